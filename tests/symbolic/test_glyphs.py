"""The glyph code: token ids survive a real encoded video file, and the tower reads them back as the LM's embeddings."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from infinipotv.data.video import FramePlan, decode_planned, write_video
from infinipotv.models import glyphs


@pytest.mark.parametrize("lossless", [True, False])
def test_glyph_code_round_trips_through_an_encoded_video_file(tmp_path, symbolic, lossless):
    vocab = symbolic.text_config.vocab_size
    ids = np.random.default_rng(0).integers(0, vocab, size=(24, 3, 4))
    ids[0, 0] = [0, vocab - 1, 1, 2**15]  # extreme bit patterns: all black, high bits, the MSB alone
    path = write_video(tmp_path / "glyphs.mp4", glyphs.encode(ids), fps=2, lossless=lossless)
    plan = FramePlan.rate(path, fps=2.0)
    frames = np.stack(list(decode_planned(plan)))
    assert len(frames) == len(ids) and np.allclose(plan.times, np.arange(len(ids)) / 2)
    assert np.array_equal(symbolic.read_glyphs(frames), ids)
    chunk = symbolic.encode_frames(frames, first_frame=0, fps=2.0, video_start=7)
    expected = symbolic.model.get_input_embeddings()(torch.from_numpy(ids.reshape(-1)))
    assert torch.equal(chunk.embeds, expected)
    assert chunk.grid == (3, 4) and torch.equal(chunk.positions, torch.arange(7, 7 + ids.size).view(1, -1))


def test_frames_that_are_not_glyphs_fail_with_a_clear_error(symbolic):
    noise = np.random.default_rng(1).integers(0, 256, size=(2, 48, 64, 3)).astype(np.uint8)
    with pytest.raises(glyphs.GlyphError, match="glyph code"):
        symbolic.read_glyphs(noise)
    with pytest.raises(glyphs.GlyphError, match="not a grid of 16-pixel glyphs"):
        symbolic.read_glyphs(noise[:, :40])
    with pytest.raises(glyphs.GlyphError, match="model.max_pixels"):
        symbolic.read_glyphs(np.zeros((1, 64, 64, 3), np.uint8))


@pytest.mark.parametrize("bad", [{"patch": 6}, {"ids": [[[2**16]]]}])
def test_the_encoder_rejects_what_the_code_cannot_carry(bad):
    with pytest.raises(glyphs.GlyphError):
        glyphs.encode(np.array(bad.get("ids", [[[1]]])), bad.get("patch", 16))
