"""Streaming is exact: chunked prefill with causal positions reproduces one forward pass over the whole prompt."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from infinipotv.kv.store import FullPrecisionStore
from infinipotv.stream.session import StreamingSession

PROMPT = "What happens in the video?\nA. x\nB. y\nAnswer with the option's letter."


def reference_positions(input_ids: list[int], video_token: int, grids: list[tuple[int, int, int]]) -> torch.Tensor:
    """The original Qwen2-VL rule (3, L): text continues from max(previous positions) + 1; a video of llm grid
    (t, h, w) starting after a text run gets (t, h, w) indices offset by that text's end."""
    ids = torch.tensor(input_ids)
    pieces: list[torch.Tensor] = []
    st = 0
    for t, h, w in grids:
        ed = int((ids[st:] == video_token).nonzero()[0]) + st
        st_idx = int(pieces[-1].max()) + 1 if pieces else 0
        pieces.append(torch.arange(ed - st).expand(3, -1) + st_idx)
        ti = torch.arange(t).view(-1, 1).expand(-1, h * w).flatten()
        hi = torch.arange(h).view(1, -1, 1).expand(t, -1, w).flatten()
        wi = torch.arange(w).view(1, 1, -1).expand(t, h, -1).flatten()
        pieces.append(torch.stack([ti, hi, wi]) + (ed - st) + st_idx)
        st = ed + t * h * w
    if st < len(ids):
        st_idx = int(pieces[-1].max()) + 1 if pieces else 0
        pieces.append(torch.arange(len(ids) - st).expand(3, -1) + st_idx)
    return torch.cat(pieces, dim=1)


def full_prompt(adapter, frames: np.ndarray) -> tuple[list[int], torch.Tensor, tuple[int, int, int]]:
    pixels, (gt, gh, gw) = adapter.preprocess(frames)
    m = adapter.vision_config.spatial_merge_size
    n_video = gt * (gh // m) * (gw // m)
    ids = adapter.prefix_ids() + [adapter.model.config.video_token_id] * n_video + adapter.question_ids(PROMPT)
    return ids, pixels, (gt, gh, gw)


def stream(adapter, frames: np.ndarray, chunk: int, spy: list | None = None) -> StreamingSession:
    session = StreamingSession(adapter, None, None, 0.75, lambda: FullPrecisionStore(torch.float32))
    if spy is not None:
        forward = adapter.forward
        adapter.forward = lambda e, p, c, **kw: (spy.append(p.clone()), forward(e, p, c, **kw))[1]
    try:
        session.start("v")
        for i in range(0, len(frames), chunk):
            session.feed(frames[i:i + chunk], fps=2.0)
        session.finish()
        if spy is not None:
            session.ask(PROMPT, max_new_tokens=1)
    finally:
        if spy is not None:
            del adapter.forward
    return session


@pytest.mark.parametrize("chunk", [2, 4, 6])
def test_chunked_prefill_equals_one_forward(tiny_qwen2vl, frames, chunk):
    adapter = tiny_qwen2vl
    session = stream(adapter, frames, chunk)
    streamed = session.ask(PROMPT, max_new_tokens=1).first_logprobs

    ids, pixels, grid = full_prompt(adapter, frames)
    m = adapter.vision_config.spatial_merge_size
    positions = reference_positions(ids, adapter.model.config.video_token_id, [(grid[0], grid[1] // m, grid[2] // m)])
    input_ids = torch.tensor([ids])
    with torch.inference_mode():
        out = adapter.model(input_ids=input_ids, pixel_values_videos=pixels, video_grid_thw=torch.tensor([grid]),
                            position_ids=positions.unsqueeze(1),
                            mm_token_type_ids=(input_ids == adapter.model.config.video_token_id).int() * 2)
    one_shot = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
    assert torch.allclose(streamed, one_shot, atol=1e-4), (streamed - one_shot).abs().max()


@pytest.mark.parametrize("size", [(56, 84), (112, 56), (84, 84)])
@pytest.mark.parametrize("chunk", [2, 4, 10])
def test_positions_follow_the_original_rule(tiny_qwen2vl, size, chunk):
    rng = np.random.default_rng(1)
    frames = rng.integers(0, 255, size=(10, *size, 3)).astype(np.uint8)
    spy: list[torch.Tensor] = []
    stream(tiny_qwen2vl, frames, chunk, spy)
    ours = torch.cat(spy, dim=1)  # prefix, every chunk, then the question (first forward of ask)
    ids, _, grid = full_prompt(tiny_qwen2vl, frames)
    m = tiny_qwen2vl.vision_config.spatial_merge_size
    ref = reference_positions(ids, tiny_qwen2vl.model.config.video_token_id, [(grid[0], grid[1] // m, grid[2] // m)])
    assert torch.equal(ours, ref)


def test_questions_leave_the_memory_unchanged(tiny_qwen2vl, frames):
    session = stream(tiny_qwen2vl, frames, 4)
    before = [s.dequantized()[0].clone() for s in session.cache.stores]
    first = session.ask(PROMPT, max_new_tokens=3)
    session.ask("Another question?", max_new_tokens=3)
    again = session.ask(PROMPT, max_new_tokens=3)
    assert [torch.equal(b, s.dequantized()[0]) for b, s in zip(before, session.cache.stores)] == [True, True]
    assert first.tokens == again.tokens and torch.equal(first.first_logprobs, again.first_logprobs)
