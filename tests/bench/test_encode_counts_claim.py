"""bench.encode_counts states its claim as designed: each video decoded once and its stream encoded once; a streaming
question's tail (the frames since the last chunk boundary) encoded once with it and again with its chunk, counted
apart; an offline question encodes nothing. Measured on the smoke run, which has both kinds of question."""

from __future__ import annotations

from pathlib import Path

import torch

from bench import encode_counts
from bench.report import render


def test_the_stream_once_and_each_tail_once(tmp_path: Path) -> None:
    threads = torch.get_num_threads()
    try:
        data = encode_counts.main(["--smoke", "--threads", "1", "--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    assert data["all_encoded_once"] and data["all_tails_encoded_once"]
    streaming, offline = (data["cases"][name]["videos"] for name in ("symbolic", "symbolic_offline"))
    assert sum(v["tail_frames"] for v in streaming.values()) > 0  # the smoke's streaming questions do have tails
    assert all(v["tail_frames_encoded"] == v["tail_frames"] == 0 for v in offline.values())
    for name in ("symbolic (resumed, complete)", "symbolic_offline (resumed, complete)"):
        assert data["cases"][name]["videos"] == {}  # nothing decoded or encoded on a complete resume
    report = render(tmp_path).read_text()
    assert "Every video decoded once and its stream encoded once per run: **PASS**" in report
    assert "Each question's tail encoded once, no more: **PASS**" in report
