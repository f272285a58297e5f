"""What every benchmark script shares: models from conf/, a frame stream that costs no memory, streaming sessions
built by the job's own factory, and writing results as JSON under ``results/perf/`` (``python -m bench.report``
renders the report from them).

The scripts measure the harness itself (the real session, stores and policies, built by
:func:`infinipotv.factory.build_parts`; peaks from the session's own probe,
:class:`~infinipotv.stream.trace.PeakMemory`), never a copy of it: the only things built here are the inputs (frames
generated chunk by chunk, so the process holds one chunk at a time and its memory reflects the cache, not the video).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf

from infinipotv.config import CompressConfig, EvalConfig, ModelConfig, QuantConfig, RunConfig, as_run_config
from infinipotv.factory import build_parts
from infinipotv.kv import Storage, cache_bytes
from infinipotv.models import ADAPTERS, ModelAdapter, glyphs
from infinipotv.runs.provenance import git_sha, now
from infinipotv.stream.session import StreamingSession

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "perf"
CONF = ROOT / "conf"
PAPER_BUDGET, PAPER_C_RATIO = 6000, 0.75  # |M| = 6K tokens, |C| = 0.75 |M| (spec, "Defaults")

# The tiny families get head_dim 32 (hidden 128 over 4 heads): KIVI groups of 32 channels need head_dim % 32 == 0.
TINY_SHAPE = {"hidden_size": 128, "num_heads": 4, "num_kv_heads": 2}


def parser(description: str) -> argparse.ArgumentParser:
    """The options every script takes: ``--smoke`` (tiny sizes, seconds; what the tests run), ``--out`` and
    ``--threads``."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--smoke", action="store_true", help="tiny sizes: checks the script runs, measures nothing")
    p.add_argument("--out", type=Path, default=RESULTS, help="folder for the JSON results and the report")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads for torch (1: reproducible on a shared machine; recorded with the results)",
    )
    return p


def parse(p: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse ``argv`` and apply ``--threads``."""
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    return args


def model_settings(name: str, **overrides: Any) -> ModelConfig:
    """The settings of ``conf/model/NAME.yaml`` with ``overrides`` (dotted keys allowed, e.g.
    ``options.num_layers``)."""
    cfg = OmegaConf.merge(OmegaConf.structured(ModelConfig), OmegaConf.load(CONF / "model" / f"{name}.yaml"))
    for key, value in overrides.items():
        OmegaConf.update(cfg, key, value, merge=True)
    return OmegaConf.to_object(cfg)


def load_model(name: str, **overrides: Any) -> ModelAdapter:
    """The model of ``conf/model/NAME.yaml`` with ``overrides`` (:func:`model_settings`)."""
    model_cfg = model_settings(name, **overrides)
    return ADAPTERS[model_cfg.family].load(model_cfg)


def tokens_per_model_frame(adapter: ModelAdapter, frame_hw: tuple[int, int]) -> int:
    """Vision tokens of one model frame of ``frame_hw`` pixels, as the adapter encodes it (one frame, thrown away)."""
    blank = np.zeros((adapter.frames_per_step, *frame_hw, 3), dtype=np.uint8)
    return adapter.encode_frames(blank, 0, 2.0, 0).tokens_per_frame


def quant_config(name: str, **overrides: Any) -> QuantConfig:
    """The storage of ``conf/quant/NAME.yaml`` with ``overrides``."""
    cfg = OmegaConf.merge(OmegaConf.structured(QuantConfig), OmegaConf.load(CONF / "quant" / f"{name}.yaml"), overrides)
    return OmegaConf.to_object(cfg)


def session(
    adapter: ModelAdapter,
    policy: str,
    quant: QuantConfig,
    budget: int,
    c_ratio: float = PAPER_C_RATIO,
    in_bytes: bool = False,
    chunk_frames: int = 1,
) -> StreamingSession:
    """The streaming session the job builds (:func:`~infinipotv.factory.build_parts`, on the model already loaded)
    for ``compress=POLICY compress.budget=BUDGET``; ``in_bytes``: ``compress.budget_mib`` instead, set to the
    formula's bytes for ``budget`` tokens and the prefix (the factory converts it back to ``budget`` and holds the
    cap). ``chunk_frames``: the frames per chunk, which the factory checks against the budget as the job's."""
    budget_mib = None
    if in_bytes:
        shape = (adapter.n_layers, adapter.n_kv_heads, adapter.head_dim)
        storage = Storage.from_config(quant, adapter.dtype)
        budget_mib = cache_bytes(budget + len(adapter.prefix_ids()), *shape, storage) / 2**20
    compress = CompressConfig(name=policy, budget=None if in_bytes else budget, budget_mib=budget_mib, c_ratio=c_ratio)
    cfg = as_run_config(
        RunConfig(model=adapter.cfg, compress=compress, quant=quant, eval=EvalConfig(chunk_frames=chunk_frames))
    )
    return build_parts(cfg, adapter).session(c_ratio)


@dataclass(frozen=True)
class FrameStream:
    """Raw uint8 frames ``[N, height, width, 3]`` made chunk by chunk: scenes held for ``scene_frames`` frames plus
    small noise (so that temporal redundancy is real for TaR), each scene drawn from its own seed. With
    ``glyph_patch`` > 0 a scene is a line of random token ids in the symbolic model's glyph code (patches of that
    many pixels), held without noise: the symbolic model reads it exactly. Nothing but the current chunk is ever in
    memory, whatever the stream's length."""

    height: int
    width: int
    n_frames: int
    chunk: int
    scene_frames: int = 16
    seed: int = 0
    glyph_patch: int = 0

    def _scene(self, index: int) -> np.ndarray:
        rng = np.random.default_rng((self.seed, 1, index))
        if self.glyph_patch:
            ids = rng.integers(100, 20_000, size=(1, self.height // self.glyph_patch, self.width // self.glyph_patch))
            return glyphs.encode(ids, self.glyph_patch)[0]
        return rng.integers(0, 250, size=(self.height, self.width, 3), dtype=np.uint8)

    def __iter__(self) -> Iterator[np.ndarray]:
        noise = np.random.default_rng((self.seed, 0))
        scenes: dict[int, np.ndarray] = {}
        for start in range(0, self.n_frames, self.chunk):
            idx = range(start, min(start + self.chunk, self.n_frames))
            scenes = {i // self.scene_frames: scenes.get(i // self.scene_frames) for i in idx}
            scenes = {k: self._scene(k) if v is None else v for k, v in scenes.items()}
            chunk = np.stack([scenes[i // self.scene_frames] for i in idx])
            yield chunk if self.glyph_patch else chunk + noise.integers(0, 6, size=chunk.shape, dtype=np.uint8)


def environment(device: torch.device) -> dict[str, Any]:
    """Where the numbers come from: they only compare within one file (one machine, one run)."""
    env = {
        "date": now(),
        "git_sha": git_sha(ROOT),
        "torch": torch.__version__,
        "device": str(device),
        "cpu_threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
    }
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
    return env


def cpu_model() -> str | None:
    """The CPU's model name (Linux's /proc/cpuinfo), so that a figure names its machine."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def write_result(out: Path, name: str, data: dict[str, Any], smoke: bool, device: torch.device) -> Path:
    """``out/NAME.json`` with the environment. The report is rendered from every result in ``out`` by its own
    command (``python -m bench.report --out OUT``), not by each bench."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps({"bench": name, "smoke": smoke, "environment": environment(device), **data}, indent=1))
    return path
