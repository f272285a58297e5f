"""StreamingVLM's kept set against a transcription of its inference loop (mit-han-lab/streaming-vlm@a940d8c
``inference.py:L141-154``); the renumbered positions are checked through the session, on every family
(tests/stream/test_streamingvlm_session.py)."""

from __future__ import annotations

import torch

from infinipotv.compress.streamingvlm import window_keep


def test_the_window_keeps_the_last_frames_as_upstreams_eviction_does():
    g = torch.Generator().manual_seed(0)
    window, cache = 4, []  # upstream: append each chunk, evict the oldest once more than `window` are held
    frame_of = torch.empty(0, dtype=torch.long)
    for step in range(11):
        tokens = int(torch.randint(1, 4, (1,), generator=g))  # frames of varying size (a CTR-filtered stream)
        cache.append([step] * tokens)
        if len(cache) > window:
            cache.pop(0)
        frame_of = torch.cat([frame_of, torch.full((tokens,), step)])
        kept = window_keep(frame_of, window)
        frame_of = frame_of[kept]
        assert frame_of.tolist() == [f for chunk in cache for f in chunk]
