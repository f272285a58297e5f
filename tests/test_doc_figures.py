"""docs/performance.md's timings of the default run and docs/peers.md's memory figures are the ones results/perf's
JSON holds (written by ``bench.default_run``, ``bench.threads``, ``bench.peers_memory``): a re-measured file and the
text cannot drift apart unnoticed."""

from __future__ import annotations

import json

from tests.helpers import ROOT

PERFORMANCE = " ".join((ROOT / "docs" / "performance.md").read_text().split())
PERF = ROOT / "results" / "perf"


def test_first_and_second_run() -> None:
    data = json.loads((PERF / "default_run.json").read_text())
    first, second = (data["runs"][name]["wall_seconds"] for name in ("first", "second"))
    sha = data["environment"]["git_sha"][:7]
    quoted = f"section 8: {first:.1f} s and {second:.1f} s on a 2-core x86-64 VM at {sha}"
    assert quoted in PERFORMANCE


def test_thread_counts() -> None:
    data = json.loads((PERF / "threads.json").read_text())
    best = {name: f"{seconds:.1f} s" for name, seconds in data["best_wall_seconds"].items()}
    quoted = f"at commit {data['environment']['git_sha'][:7]} (clean), with warm caches (the second and later runs): "
    quoted += f"{best['auto']} with `threads=auto` (two threads there), {best['2']} at two threads, {best['1']} at one"
    assert quoted in PERFORMANCE


def test_peers_memory_in_mib() -> None:
    """docs/peers.md quotes StreamingTOM's peaks in the unit ``bench.peers_memory`` prints (MiB), from its JSON."""
    rows = json.loads((PERF / "peers_memory.json").read_text())["methods"]["streamingtom"]
    first, last = (f"{row['peak'] / 2**20:.2f} MiB at {row['frames']}" for row in (rows[0], rows[-1]))
    peers = " ".join((ROOT / "docs" / "peers.md").read_text().split())
    assert f"is {first} frames and {last}" in peers
