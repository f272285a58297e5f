"""Torch's CPU threads for a run: ``threads=auto`` (the default) or a count.

A streaming job runs two kinds of CPU work at once: the model's forward on torch's intra-op threads (OpenMP), and
the background decoder (PyAV/FFmpeg and the resize to the model's input, :mod:`infinipotv.data.frames`). OpenMP
workers meet at the end of every parallel region; when one of them shares a core with another busy process, each
region waits for it, and the forward of a small model is thousands of short regions. ``bench.threads`` on the
default job, 2-core VM: on idle cores one thread per core was the fastest (the decoder costs less than the second
thread gains); with other jobs keeping the machine busy (load average 5-7) two threads took 5x as long as one.
``auto`` takes one thread per core this process may run on (its CPU affinity: a Slurm allocation or ``taskset``
counts, not the machine's total): the fastest on a machine of one's own, and the same count every time the same
command runs there. It does not follow the machine's load, because the count changes results, not only speed:
torch's fp32 sums run in another order at another count, and a near-tie between two tokens may flip (2 of the
default job's 20 answers differed between 1 and 2 threads, the score the same; ``bench.threads`` reports it). On a
busy shared machine set ``threads=1`` (or ``OMP_NUM_THREADS``, which ``auto`` keeps). A resume may change the count
(:data:`infinipotv.runs.NOT_THE_RUN`): it is the user's to choose, and answers already written are kept, so only
the rest can differ, as they would on another machine.

How the workers wait is the other half. libgomp (the OpenMP runtime of torch's Linux builds) lets a worker spin
300,000 times at the end of a region before it sleeps; on a core another process holds, every region then waits
for a spinner to be scheduled. ``python -m bench.threads --wait --videos 1 --rounds 3`` (results/perf/
threads_wait.json; 2-core AMD EPYC VM, 2026-12-06, medians of 3 rounds): on idle cores 12.8 s with libgomp's
default, 13.0 s with ``GOMP_SPINCOUNT=10000`` and 13.6 s with ``OMP_WAIT_POLICY=PASSIVE`` (1.07x); beside one busy
process 27.6 s, 30.0 s and 15.0 s. A short spin did not remove the cliff there (an earlier measurement on another
2-core VM, the full default run, had it at 64 s against 330 s, and PASSIVE at 43 s, 1.29x on idle cores); passive
waiting cut the loaded run by half or more in both, so it is the default: :func:`set_wait_default` sets
``OMP_WAIT_POLICY=PASSIVE`` where the user has set neither variable (a user's choice is kept, whichever: on cores
of one's own, ``OMP_WAIT_POLICY=ACTIVE`` or a ``GOMP_SPINCOUNT`` buys back the few idle percent). libgomp reads
them once, when torch loads it: run.py calls it before anything imports torch, a Slurm job runs
:data:`WAIT_SETUP` before Python starts, and ``python -m bench.threads --wait`` measures the three side by side.
This module imports torch only inside :func:`use_threads`, so that it can be imported first.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from infinipotv.config import ConfigError

AUTO = "auto"
WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")  # how OpenMP workers wait: the user's choice when either is set
WAIT_DEFAULT = {"OMP_WAIT_POLICY": "PASSIVE"}  # ours where the user set neither (libgomp's own: a 300,000-spin wait)
# The same rule as a shell line, for a Slurm job's sbatch script (its environment is the submitter's or the site's).
WAIT_SETUP = '[ -n "${OMP_WAIT_POLICY+x}${GOMP_SPINCOUNT+x}" ] || export ' + " ".join(
    f"{name}={value}" for name, value in WAIT_DEFAULT.items()
)


def wait_default(env: Mapping[str, str]) -> dict[str, str]:
    """The variables to add to ``env`` for our OpenMP wait policy: :data:`WAIT_DEFAULT` unless ``env`` already
    says how workers wait (either of :data:`WAIT_VARIABLES`, any value)."""
    return {} if any(name in env for name in WAIT_VARIABLES) else dict(WAIT_DEFAULT)


def set_wait_default() -> None:
    """Apply :func:`wait_default` to this process's environment (and so its children's). Only a torch imported
    after it follows it: call it before the first ``import torch``."""
    os.environ.update(wait_default(os.environ))


#: The most threads per core this process may run on: past it a count only slows the run down, and an absurd one
#: (threads=100000) makes OpenMP fail to start its workers.
PER_CORE = 4


def available_cores() -> int:
    """The cores this process may run on (its affinity), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform (macOS)
        return os.cpu_count() or 1


def resolve(setting: str | int) -> int:
    """The thread count ``threads=SETTING`` means here: ``auto`` (``OMP_NUM_THREADS`` if set, else one per core this
    process may run on) or a positive count."""
    text = str(setting).strip().lower()
    if text == AUTO:
        env = os.environ.get("OMP_NUM_THREADS", "").strip()
        if env.isdigit() and int(env) > 0:
            return int(env)
        return available_cores()
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise ConfigError(f"threads={setting!r}: give auto (one per core) or a count such as 1 (a busy shared machine)")


def use_threads(setting: str | int) -> int:
    """Set torch's intra-op threads for this process to ``resolve(setting)``; returns the count. A count above
    :data:`PER_CORE` per core this process may run on is refused here, where the job runs, not when a sweep is
    checked: the submitting machine's cores are not the node's."""
    import torch

    n = resolve(setting)
    cores = available_cores()
    if n > PER_CORE * cores:
        given = f"threads={setting}" if str(setting).strip().lower() != AUTO else f"OMP_NUM_THREADS={n} (threads=auto)"
        raise ConfigError(
            f"{given} is more than {PER_CORE} threads per core of the {cores} this process may run on: give "
            f"threads=auto (one per core) or a count up to {PER_CORE * cores}"
        )
    torch.set_num_threads(n)
    return n
