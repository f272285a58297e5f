"""What every benchmark script shares: models from conf/, a frame stream that costs no memory, streaming sessions,
an honest peak-memory probe, timing, and writing results as JSON (then the report) under ``results/perf/``.

The scripts measure the harness itself (the real session, stores and policies), never a copy of it: the only
things built here are the inputs (frames generated chunk by chunk, so the process holds one chunk at a time and its
memory reflects the cache, not the video) and the probes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf

from infinipotv.compress import build
from infinipotv.config import ModelConfig, QuantConfig
from infinipotv.kv import make_store_factory
from infinipotv.models import ADAPTERS, ModelAdapter, glyphs
from infinipotv.provenance import git_sha, now
from infinipotv.stream.session import ByteCap, StreamingSession

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
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads for torch (1: reproducible on a shared machine; recorded with the results)")
    return p


def parse(p: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse ``argv`` and apply ``--threads``."""
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    return args


def load_model(name: str, **overrides: Any) -> ModelAdapter:
    """The model of ``conf/model/NAME.yaml`` with ``overrides`` (dotted keys allowed, e.g. ``options.num_layers``)."""
    cfg = OmegaConf.merge(OmegaConf.structured(ModelConfig), OmegaConf.load(CONF / "model" / f"{name}.yaml"))
    for key, value in overrides.items():
        OmegaConf.update(cfg, key, value, merge=True)
    model_cfg: ModelConfig = OmegaConf.to_object(cfg)
    return ADAPTERS[model_cfg.family].load(model_cfg)


def quant_config(name: str, **overrides: Any) -> QuantConfig:
    """The storage of ``conf/quant/NAME.yaml`` with ``overrides``."""
    cfg = OmegaConf.merge(OmegaConf.structured(QuantConfig), OmegaConf.load(CONF / "quant" / f"{name}.yaml"), overrides)
    return OmegaConf.to_object(cfg)


def session(adapter: ModelAdapter, policy: str, quant: QuantConfig, budget: int, c_ratio: float = PAPER_C_RATIO,
            in_bytes: bool = False, **policy_kw: Any) -> StreamingSession:
    """A streaming session as the job builds it; ``full`` gets no budget (it never evicts). ``in_bytes``: the
    budget is held in bytes too, as with ``compress.budget_mib`` (the formula's bytes for ``budget`` tokens)."""
    make_store, storage = make_store_factory(quant, adapter.dtype)
    pol = build(policy, **policy_kw)
    shape = (adapter.n_layers, adapter.n_kv_heads, adapter.head_dim)
    cap = ByteCap.of(budget, c_ratio, len(adapter.prefix_ids()), shape, storage) if in_bytes and pol.evicts else None
    return StreamingSession(adapter, pol, budget if pol.evicts else None, c_ratio, make_store, byte_cap=cap)


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


def raw_frames_for(tokens: int, tokens_per_frame: int, frames_per_step: int) -> int:
    """Raw frames whose vision tokens reach ``tokens`` (rounded up to whole model frames)."""
    return -(-tokens // tokens_per_frame) * frames_per_step


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextmanager
def timed(device: torch.device, into: list[float]) -> Iterator[None]:
    """Wall time of the block (device work included), appended to ``into``."""
    sync(device)
    t0 = time.perf_counter()
    yield
    sync(device)
    into.append(time.perf_counter() - t0)


class PeakProbe:
    """Peak memory since :meth:`reset`: CUDA's allocator peak on GPU; on CPU the kernel's own resident-set high-water
    mark (``VmHWM``, reset through ``/proc/self/clear_refs``), which sees the short peaks inside a forward or a
    compression pass that sampling the RSS between steps would miss. Drop-in for the session's ``PeakMemory``."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.method = "cuda.max_memory_allocated" if device.type == "cuda" else self._cpu_method()
        self.baseline = 0
        self.reset()

    @staticmethod
    def _cpu_method() -> str:
        try:
            Path("/proc/self/clear_refs").write_text("5")
            return "VmHWM"
        except OSError:
            return "ru_maxrss"  # never reset: a peak since process start (each configuration runs in its own process)

    def reset(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self.baseline = int(torch.cuda.memory_allocated(self.device))
        else:
            if self.method == "VmHWM":
                Path("/proc/self/clear_refs").write_text("5")
            self.baseline = self.current()

    def current(self) -> int:
        if self.device.type == "cuda":
            return int(torch.cuda.memory_allocated(self.device))
        return _status_kib("VmRSS") * 1024

    def read(self) -> int:
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        if self.method == "VmHWM":
            return _status_kib("VmHWM") * 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}: peak memory needs Linux")


def environment(device: torch.device) -> dict[str, Any]:
    """Where the numbers come from: they only compare within one file (one machine, one run)."""
    env = {
        "date": now(), "git_sha": git_sha(ROOT), "torch": torch.__version__, "device": str(device),
        "cpu_threads": torch.get_num_threads(), "cpus": os.cpu_count(), "machine": platform.machine(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
    }
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
    return env


def write_result(out: Path, name: str, data: dict[str, Any], smoke: bool, device: torch.device) -> Path:
    """``out/NAME.json`` with the environment, then the report regenerated from every result in ``out``."""
    from bench.report import render

    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps({"bench": name, "smoke": smoke, "environment": environment(device), **data}, indent=1))
    render(out)
    return path
