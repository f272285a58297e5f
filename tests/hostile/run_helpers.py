"""What the run-directory probes share: a small in-process run on toy data, a folder's files to compare, a
file-size limit for a block, and run.py on an experiment file of the probe's own."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from infinipotv.config import CompressConfig, EvalConfig, ModelConfig, QuantConfig, RunConfig
from infinipotv.data.toy import BUILDERS
from tests.helpers import ROOT, TINY_QWEN2VL


def toy_config(root: Path, benchmark: str = "videomme") -> RunConfig:
    """The tiny Qwen2-VL on a toy benchmark (written under ``root`` once), compressed: seconds per run."""
    bench = BUILDERS[benchmark](root / benchmark)
    return RunConfig(
        model=ModelConfig(**TINY_QWEN2VL),
        compress=CompressConfig(name="tar_van_pool", budget=96),
        quant=QuantConfig(),
        benchmark=bench,
        eval=EvalConfig(chunk_frames=2),
    )


def files_under(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` (relative) with its bytes, None for a folder: what "left as it was" compares."""
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes() for p in sorted(folder.rglob("*"))}


@contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """Writes past ``limit`` bytes fail (EFBIG) inside the block, as under ``ulimit -f`` with SIGXFSZ ignored."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


def run_experiment(tmp_path: Path, name: str, text: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``run.py +experiment=NAME ARGS`` with ``text`` as experiments/NAME.yaml, from a copy of the entry point and
    conf/ in ``tmp_path`` (so the repository gains no file) and this checkout's package first on the path."""
    shutil.copy(ROOT / "run.py", tmp_path / "run.py")
    shutil.copytree(ROOT / "conf", tmp_path / "conf", symlinks=True)
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / f"{name}.yaml").write_text(text)
    return subprocess.run(
        [sys.executable, "run.py", f"+experiment={name}", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HYDRA_FULL_ERROR": "0"},
    )
