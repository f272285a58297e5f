"""bench.needle_retention counts what a memory holds of each needle from the stores' stream ids, and runs end to end
on the study's own config (smoke: one generated video, its first 32 frames)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.needle_retention import POLICIES, Video, main, measure

NEWLINE = 198


def _video() -> Video:
    """Four frames of 2 x 3 slots (the last row a background): frames 1-2 are a needle whose line is two glyphs."""
    ids = np.array(
        [
            [11, NEWLINE, NEWLINE, 90, 91, 92],
            [50, 51, NEWLINE, 90, 91, 92],
            [50, 51, NEWLINE, 90, 91, 92],
            [12, NEWLINE, NEWLINE, 90, 91, 92],
        ]
    )
    return Video("v", np.zeros((4, 1, 1, 3), dtype=np.uint8), ids, [range(1, 3)])


def test_line_counts_a_glyph_kept_in_any_copy_and_copies_every_copy() -> None:
    per_frame = 6
    # head 0: both glyphs of the line, each from a different copy; head 1: one glyph, twice; plus padding/background
    head0 = [-1, 1 * per_frame + 0, 2 * per_frame + 1, 0 * per_frame + 3]
    head1 = [-1, 1 * per_frame + 1, 2 * per_frame + 1, 3 * per_frame + 2]
    result = measure([np.array([head0, head1])], _video(), NEWLINE, event_slots=3)
    assert result["line"] == [pytest.approx((2 / 2 + 1 / 2) / 2)]
    assert result["copies"] == [pytest.approx((2 / 4 + 2 / 4) / 2)]
    # shares of each head's 3 vision tokens: needle frames 2/3 and 3/3, background 1/3 and 0, padding 0 and 1/3
    assert result["share_needle_frames"] == pytest.approx((2 / 3 + 2 / 3) / 2)
    assert result["share_background"] == pytest.approx((1 / 3) / 2)
    assert result["share_padding"] == pytest.approx((1 / 3) / 2)
    assert result["stream_share_needle_frames"] == 0.5 and result["tokens_held"] == 3


def test_smoke_run_on_the_study_config(tmp_path: Path) -> None:
    threads = torch.get_num_threads()
    try:
        main(["--smoke", "--threads", "1", "--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    data = json.loads((tmp_path / "needle_retention.json").read_text())
    plain = data["kinds"]["plain"]
    assert data["smoke"] and set(plain["policies"]) == set(POLICIES) and plain["event_slots"] == 12
    for r in plain["policies"].values():
        assert r["needles"] >= 1 and 0 <= r["copies_pct"] <= r["line_pct"] <= 100
        assert r["line_ci95"][0] <= r["line_pct"] <= r["line_ci95"][1]
        assert r["share_background_pct"] == 0 and 0 < r["tokens_held"] <= data["budget"]
    assert "| InfiniPot-V |" in (tmp_path / "needle_retention.md").read_text()
