"""The embedded default's wall time at 1, 2 and all cores' torch threads, and at ``threads=auto``, side by side;
with ``--wait``, under three OpenMP wait policies on idle cores and beside one busy process.

    python -m bench.threads              # ~10 minutes on 2 cores (a warm-up run, then 2 rounds of 2-4 settings)
    python -m bench.threads --rounds 3
    python -m bench.threads --smoke      # tiny Qwen2-VL, one small video: checks the script, measures nothing
    python -m bench.threads --wait --videos 1 --rounds 3   # 3 policies x idle/loaded x 3 rounds
    python -m bench.threads --wait --smoke

Every run is ``python run.py threads=SETTING`` as a process, with the caches warm (a first, untimed-for-the-
comparison run converts the weights and generates the videos) and no thread variables in its environment
(``bench.default_run.child_env``), so ``auto`` is what ``make run`` gets. The settings run in alternating order
each round (a machine that slows down during the bench does not favour one setting), and each setting's figure is
its fastest round (the run other processes disturbed least; every round is in the JSON). The machine's load average
is recorded before and after every run: on a shared machine the times compare only within one file. Each run's
answers are compared with the warm-up's, question by question: the thread count changes the order of torch's fp32
sums, so a near-tie between two tokens may flip (``infinipotv.threads``); the count of answers that differ and each
run's accuracy say how much.

``--wait`` (results/perf/threads_wait.json) runs ``python run.py`` (``threads=auto``) under libgomp's default
(``GOMP_SPINCOUNT=300000``: its documented spin count when neither variable is set, named here because run.py sets
its own where neither is), under a short spin (``GOMP_SPINCOUNT=10000``) and under run.py's default (neither set:
``OMP_WAIT_POLICY=PASSIVE``, :mod:`infinipotv.threads`), each on idle cores and beside exactly one busy process (a
Python loop this bench starts before the run and kills after it), in alternating order each round; each figure is
the median of its rounds, with every round, the run's CPU seconds and the load average in the JSON. ``--videos N``
streams N of the symbolic benchmark's videos (the default run has 4): beside a busy process libgomp's default takes
minutes a video.
The policy changes how threads wait, not what they compute: every run's answers must equal the warm-up's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch

from bench.common import parse, parser, write_result
from bench.default_run import SMOKE_OVERRIDES, child_env, one_run
from infinipotv.runs import PREDICTIONS, read_jsonl
from infinipotv.threads import AUTO, WAIT_DEFAULT, available_cores

AUTO_WITHIN = 0.10  # threads=auto within 10% of the fastest setting measured in the same run (the bound)
# --wait: each policy's variables over an environment without either (libgomp's documented default spin count first)
WAIT_POLICIES = {
    "libgomp": {"GOMP_SPINCOUNT": "300000"},
    "spin": {"GOMP_SPINCOUNT": "10000"},
    "default": {},
}
WAIT_LABELS = {
    "libgomp": "libgomp's default (GOMP_SPINCOUNT=300000)",
    "spin": "a short spin (GOMP_SPINCOUNT=10000)",
    "default": "run.py's default (" + " ".join(f"{k}={v}" for k, v in WAIT_DEFAULT.items()) + ")",
}
CONDITIONS = ("idle", "loaded")
IDLE_WITHIN = 0.10  # run.py's default within 10% of libgomp's on idle cores


def settings(cores: int) -> list[str]:
    """1, 2 and all cores (each once), then auto."""
    return [str(n) for n in sorted({1, min(2, cores), cores})] + [AUTO]


@contextmanager
def busy_process() -> Iterator[int]:
    """One process spinning on a core for the length of the block (started here, killed by its pid after)."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield spinner.pid
    finally:
        spinner.kill()
        spinner.wait()


def wait_policies(args: argparse.Namespace) -> dict[str, Any]:
    """``--wait``: the default run under each of :data:`WAIT_POLICIES`, idle and beside one busy process."""
    base = [*(SMOKE_OVERRIDES if args.smoke else []), f"threads={AUTO}"]
    if args.videos is not None and not args.smoke:  # the smoke's one small video
        base.append(f"benchmark.options.n_videos={args.videos}")
    rounds = 1 if args.smoke else args.rounds
    names = list(WAIT_POLICIES)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {c: {n: [] for n in names} for c in CONDITIONS}
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        env = child_env(tmp, args.smoke)
        warm = one_run(base, env, Path(tmp) / "warm")
        print(f"warm-up run: {warm['wall_seconds']:.1f} s", flush=True)
        reference = read_jsonl(Path(tmp) / "warm" / PREDICTIONS)[0]
        for r in range(rounds):
            for condition in CONDITIONS if r % 2 == 0 else CONDITIONS[::-1]:
                for name in names if r % 2 == 0 else names[::-1]:
                    run_dir = Path(tmp) / f"{condition}-{name}-{r}"
                    with busy_process() if condition == "loaded" else nullcontext():
                        run = one_run(base, {**env, **WAIT_POLICIES[name]}, run_dir)
                    run.pop("summary")
                    answers = read_jsonl(run_dir / PREDICTIONS)[0]
                    run["answers_differing"] = len(answers) - sum(a == b for a, b in zip(answers, reference))
                    runs[condition][name].append(run)
                    print(f"{condition} {name}: {run['wall_seconds']:.1f} s", flush=True)
    median = {
        condition: {name: statistics.median(r["wall_seconds"] for r in rs) for name, rs in by.items()}
        for condition, by in runs.items()
    }
    return {
        "overrides": base,
        "cores": available_cores(),
        "rounds": rounds,
        "policies": {name: {"env": WAIT_POLICIES[name], "label": WAIT_LABELS[name]} for name in names},
        "warm_up": {k: v for k, v in warm.items() if k != "summary"},
        "runs": runs,
        "median_wall_seconds": median,
        "idle_within": IDLE_WITHIN,
        "n_predictions": len(reference),
        "same_answers": all(r["answers_differing"] == 0 for by in runs.values() for rs in by.values() for r in rs),
        "load_start": load_start,
        "load_end": os.getloadavg(),
        "command": "python -m bench.threads --wait"
        + (" --smoke" if args.smoke else f" --rounds {rounds}")
        + ("" if args.videos is None or args.smoke else f" --videos {args.videos}"),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2, help="runs of each setting (alternating order)")
    p.add_argument("--wait", action="store_true", help="OpenMP wait policies, idle and beside one busy process")
    p.add_argument("--videos", type=int, help="--wait: the symbolic videos each run streams (default: the run's 4)")
    args = parse(p, argv)
    if args.wait:
        data = wait_policies(args)
        write_result(args.out, "threads_wait", data, args.smoke, torch.device("cpu"))
        return data
    base = SMOKE_OVERRIDES if args.smoke else []
    cores = available_cores()
    names = ["1", AUTO] if args.smoke else settings(cores)  # the smoke checks the script, measuring nothing
    rounds = 1 if args.smoke else args.rounds
    load_start = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        env = child_env(tmp, args.smoke)
        warm = one_run([*base, f"threads={AUTO}"], env, Path(tmp) / "warm")
        print(f"warm-up run: {warm['wall_seconds']:.1f} s", flush=True)
        reference = read_jsonl(Path(tmp) / "warm" / PREDICTIONS)[0]
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                run_dir = Path(tmp) / f"{name}-{r}"
                run = one_run([*base, f"threads={name}"], env, run_dir)
                run.pop("summary")
                answers = read_jsonl(run_dir / PREDICTIONS)[0]
                run["answers_differing"] = len(answers) - sum(a == b for a, b in zip(answers, reference))
                runs[name].append(run)
                print(f"threads={name} ({run['torch_threads']}): {run['wall_seconds']:.1f} s", flush=True)
    best = {name: min(r["wall_seconds"] for r in rs) for name, rs in runs.items()}
    fastest = min((n for n in names if n != AUTO), key=best.get)
    data = {
        "overrides": base,
        "cores": cores,
        "rounds": rounds,
        "warm_up": {k: v for k, v in warm.items() if k != "summary"},
        "runs": runs,
        "best_wall_seconds": best,
        "fastest": fastest,
        "auto_over_fastest": best[AUTO] / best[fastest],
        "auto_within": AUTO_WITHIN,
        "warm_up_threads": warm["torch_threads"],
        "n_predictions": len(reference),
        "load_start": load_start,
        "load_end": os.getloadavg(),
        "command": "python -m bench.threads" + (" --smoke" if args.smoke else f" --rounds {rounds}"),
    }
    write_result(args.out, "threads", data, args.smoke, torch.device("cpu"))
    return data


if __name__ == "__main__":
    main()
