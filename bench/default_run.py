"""Wall time of the embedded default, ``python run.py``: the first run on clean caches, then a second run.

    python -m bench.default_run                                   # ~3 minutes on 2 idle cores
    python -m bench.default_run --reference OTHER/predictions.jsonl  # also: the same answers as another checkout's
    python -m bench.default_run --smoke                           # tiny Qwen2-VL, one small video, warm caches

Both runs are real processes (``run.py`` as a newcomer types it) with their own cache and data folders
(``INFINIPOTV_CACHE``, ``INFINIPOTV_DATA``) in a fresh temporary directory: the first run converts the GGUF weights
and generates the symbolic videos, the second finds both cached. They run with the thread count a newcomer gets
(``threads=auto``: this process's ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` are not passed on, nor its OpenMP wait
policy, so run.py sets its own; ``--threads`` sets only this process's own). The machine's load average is recorded
before and after each run (on a shared machine the times are only comparable within one file), and each run's CPU
seconds. The two runs' predictions must be identical, and identical to ``--reference`` when given.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from bench.common import ROOT, parse, parser, write_result
from infinipotv.runs import PREDICTIONS, read_jsonl
from infinipotv.threads import WAIT_VARIABLES

SMOKE_OVERRIDES = [
    "model=tiny_qwen2vl",
    "compress=full",
    "compress.budget=null",
    "benchmark.options.n_videos=1",
    "benchmark.options.frames=48",
]
TARGET_SECONDS = 90.0  # the bound for the first run on 2 idle cores
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", *WAIT_VARIABLES)


def child_env(tmp: str, smoke: bool) -> dict[str, str]:
    """The environment of a timed ``run.py``: a newcomer's (no thread variables), with fresh cache and data folders
    under ``tmp`` (the smoke runs keep the converted tokenizer, ~30 s to rebuild, and measure nothing)."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    env.update(PYTHONPATH=str(ROOT), INFINIPOTV_DATA=f"{tmp}/data")
    if not smoke:
        env["INFINIPOTV_CACHE"] = f"{tmp}/cache"
    return env


def one_run(overrides: list[str], env: dict[str, str], run_dir: Path) -> dict[str, Any]:
    load_before = os.getloadavg()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "run.py", *overrides, f"run_dir={run_dir}"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)  # the children waited for since: this run alone
    if done.returncode:
        raise RuntimeError(f"run.py failed:\n{done.stderr[-3000:]}")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    if metrics["n_errors"]:  # a question that failed skipped its answer: the time is not a run's
        raise RuntimeError(f"run.py answered {metrics['n_errors']} question(s) with errors: {metrics['errors']}")
    return {
        "wall_seconds": wall,
        "job_seconds": metrics["time"]["seconds"],
        "cpu_seconds": cpu.ru_utime + cpu.ru_stime - cpu_before.ru_utime - cpu_before.ru_stime,
        "torch_threads": json.loads((run_dir / "provenance.json").read_text()).get("cpu_threads"),
        "accuracy": metrics["scores"]["overall"],
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "summary": done.stdout.split("\n\nrun directory:")[0],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--reference", type=Path, help="predictions.jsonl of another checkout's default run")
    args = parse(p, argv)
    overrides = SMOKE_OVERRIDES if args.smoke else []
    with tempfile.TemporaryDirectory() as tmp:
        env = child_env(tmp, args.smoke)
        runs = {}
        for name in ("first", "second"):
            runs[name] = one_run(overrides, env, Path(tmp) / name)
            print(
                f"{name} run: {runs[name]['wall_seconds']:.1f} s (load {runs[name]['load_before'][0]:.2f})", flush=True
            )
        first, second = (read_jsonl(Path(tmp) / name / PREDICTIONS)[0] for name in ("first", "second"))
    data = {
        "overrides": overrides,
        "runs": runs,
        "target_seconds": TARGET_SECONDS,
        "same_predictions": first == second,
        "n_predictions": len(first),
        "command": "python -m bench.default_run" + (" --smoke" if args.smoke else ""),
    }
    if args.reference is not None:
        data["reference"] = str(args.reference)
        data["same_as_reference"] = first == read_jsonl(args.reference)[0]
    write_result(args.out, "default_run", data, args.smoke, torch.device("cpu"))
    return data


if __name__ == "__main__":
    main()
