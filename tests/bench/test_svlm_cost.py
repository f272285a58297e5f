"""bench.svlm_cost times StreamingVLM's two shrink paths side by side: it runs in smoke mode and leaves its JSON, both
paths stream the same video through the same evictions, and the re-rotating path it times against moves keys as the
method reads them (the same positions; fp32 storage: the same keys). Performance itself is never asserted."""

from __future__ import annotations

import json

import numpy as np
import torch

from bench.svlm_cost import PATHS, Rerotating, main
from infinipotv.compress import build
from infinipotv.kv import FullPrecisionStore
from infinipotv.stream.reference import tiny_adapter
from infinipotv.stream.session import StreamingSession


def test_smoke_times_both_paths_through_the_same_evictions(tmp_path) -> None:
    data = main(["--smoke", "--threads", "1", "--out", str(tmp_path)])
    assert json.loads((tmp_path / "svlm_cost.json").read_text())["paths"].keys() == set(PATHS)
    rows = data["paths"]
    assert rows["rerotated"]["evictions"] == rows["on_read"]["evictions"] > 0
    assert rows["rerotated"]["stream_seconds_ratio"] == 1.0 and rows["on_read"]["stream_seconds"] > 0


def test_the_baseline_path_stores_the_keys_the_method_reads() -> None:
    """12 one-frame chunks at W = 4 frames (8 evictions): the same tokens, and in fp32 the same keys."""
    adapter = tiny_adapter("llava_ov")
    video = np.random.default_rng(0).integers(0, 255, size=(12, 56, 56, 3)).astype(np.uint8)
    sessions = [
        StreamingSession(adapter, build("streamingvlm"), 64, 0.75, lambda: FullPrecisionStore(torch.float32))
        for _ in PATHS
    ]
    sessions[0].method = Rerotating(sessions[0].method.policy, adapter, 64, 0.75, None)
    for sess in sessions:
        sess.start("v")
        for frame in video:
            sess.feed(frame[None], fps=2.0)
    old, new = (s.video.cache.stores for s in sessions)
    assert sum(bool(s.compress) for s in sessions[0].trace) == 8
    for a, b in zip(old, new):
        assert torch.equal(a.token_ids(), b.token_ids())
        torch.testing.assert_close(a.read()[0], b.read()[0], atol=1e-5, rtol=0)
