"""The embedded default's wall time at 1, 2 and all cores' torch threads, and at ``threads=auto``, side by side.

    python -m bench.threads              # ~10 minutes on 2 cores (a warm-up run, then 2 rounds of 2-4 settings)
    python -m bench.threads --rounds 3
    python -m bench.threads --smoke      # tiny Qwen2-VL, one small video: checks the script, measures nothing

Every run is ``python run.py threads=SETTING`` as a process, with the caches warm (a first, untimed-for-the-
comparison run converts the weights and generates the videos) and no thread variables in its environment
(``bench.default_run.child_env``), so ``auto`` is what ``make run`` gets. The settings run in alternating order
each round (a machine that slows down during the bench does not favour one setting), and each setting's figure is
its fastest round (the run other processes disturbed least; every round is in the JSON). The machine's load average
is recorded before and after every run: on a shared machine the times compare only within one file. Each run's
answers are compared with the warm-up's, question by question: the thread count changes the order of torch's fp32
sums, so a near-tie between two tokens may flip (``infinipotv.threads``); the count of answers that differ and each
run's accuracy say how much.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from bench.common import parse, parser, write_result
from bench.default_run import SMOKE_OVERRIDES, child_env, one_run
from infinipotv.rundir import PREDICTIONS, read_jsonl
from infinipotv.threads import AUTO, available_cores

AUTO_WITHIN = 0.10  # threads=auto within 10% of the fastest setting measured in the same run (the bound)


def settings(cores: int) -> list[str]:
    """1, 2 and all cores (each once), then auto."""
    return [str(n) for n in sorted({1, min(2, cores), cores})] + [AUTO]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2, help="runs of each setting (alternating order)")
    args = parse(p, argv)
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
