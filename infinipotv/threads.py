"""Torch's CPU threads for a run: ``threads=auto`` (the default) or a count.

A streaming job runs two kinds of CPU work at once: the model's forward on torch's intra-op threads (OpenMP), and
the background decoder (PyAV/FFmpeg and the resize to the model's input, :mod:`infinipotv.data.frames`). OpenMP
workers meet at the end of every parallel region; when one of them shares a core with the decoder or another
process, each region waits for it, and the forward of a small model is thousands of short regions. On 2 cores the
default job ran about 3x slower on torch's default (one thread per core) than on one thread (``bench.threads``), so
``auto`` leaves a core to the decoder: one thread fewer than the cores this process may run on (its CPU affinity:
a Slurm allocation or ``taskset`` counts, not the machine's total), at least one. ``OMP_NUM_THREADS``, when set,
is the user's choice and ``auto`` keeps it. The count changes speed only, never a result (the same predictions at
every count, ``bench.threads`` checks), so a resume may change it (:data:`infinipotv.rundir.NOT_THE_RUN`).
"""

from __future__ import annotations

import os

import torch

from infinipotv.config import ConfigError

AUTO = "auto"


def available_cores() -> int:
    """The cores this process may run on (its affinity), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform (macOS)
        return os.cpu_count() or 1


def resolve(setting: str | int) -> int:
    """The thread count ``threads=SETTING`` means here: ``auto`` (``OMP_NUM_THREADS`` if set, else one core left to
    the decoder) or a positive count."""
    text = str(setting).strip().lower()
    if text == AUTO:
        env = os.environ.get("OMP_NUM_THREADS", "").strip()
        if env.isdigit() and int(env) > 0:
            return int(env)
        return max(1, available_cores() - 1)
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise ConfigError(f"threads={setting!r}: give auto (one core left to the frame decoder) or a count such as 1")


def use_threads(setting: str | int) -> int:
    """Set torch's intra-op threads for this process to ``resolve(setting)``; returns the count."""
    n = resolve(setting)
    torch.set_num_threads(n)
    return n
