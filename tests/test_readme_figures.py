"""The README's timings of the default run are the ones results/perf's JSON holds (written by ``bench.default_run``
and ``bench.threads``), with their commit: a re-measured file and the README cannot drift apart unnoticed."""

from __future__ import annotations

import json

from tests.helpers import ROOT

README = " ".join((ROOT / "README.md").read_text().split())
PERF = ROOT / "results" / "perf"


def test_first_and_second_run() -> None:
    data = json.loads((PERF / "default_run.json").read_text())
    first, second = (data["runs"][name]["wall_seconds"] for name in ("first", "second"))
    sha = data["environment"]["git_sha"][:7]
    quoted = f"section 8: {first:.1f} s and {second:.1f} s on a 2-core x86-64 VM at {sha}"
    assert quoted in README


def test_thread_counts() -> None:
    data = json.loads((PERF / "threads.json").read_text())
    best = {name: f"{seconds:.1f} s" for name, seconds in data["best_wall_seconds"].items()}
    quoted = f"at commit {data['environment']['git_sha'][:7]} (clean), with warm caches (the second and later runs): "
    quoted += f"{best['auto']} with `threads=auto` (two threads there), {best['2']} at two threads, {best['1']} at one"
    assert quoted in README
