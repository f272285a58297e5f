"""Every model family, on its tiny config: streaming is exact, positions follow the original rules, compression runs.

The ``adapter`` fixture (conftest.py) parametrizes each test over the registered families; a new family is covered
by adding it to ``reference.FAMILIES`` and ``reference.TINY``.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from infinipotv import compress
from infinipotv.config import ConfigError
from infinipotv.factory import build_adapter
from infinipotv.models import ADAPTERS, ModelError
from infinipotv.stream.reference import (
    DEVICE,
    EMBED_ATOL,
    FAMILIES,
    LOGPROB_ATOL,
    PROMPT,
    full_prompt,
    is_qwen,
    make_session,
    one_shot_logprobs,
    stream,
    tiny_adapter,
    tiny_config,
)
from tests.helpers import run_py


def test_every_family_is_registered_and_tested():
    assert set(FAMILIES) <= set(ADAPTERS), sorted(ADAPTERS)


@pytest.mark.parametrize("chunk", [2, 3, 6])
def test_chunked_streaming_equals_one_forward(adapter, video, chunk):
    streamed = stream(adapter, video, chunk).ask(PROMPT, max_new_tokens=1).first_logprobs
    one_shot = one_shot_logprobs(adapter, video, fps=2.0)
    assert (streamed - one_shot).abs().max() <= LOGPROB_ATOL, (streamed - one_shot).abs().max()


@pytest.mark.parametrize("size", [(56, 84), (112, 56)])
@pytest.mark.parametrize("chunk", [2, 4, 10])
def test_positions_follow_the_original_rule(adapter, size, chunk):
    frames = np.random.default_rng(1).integers(0, 255, size=(10, *size, 3)).astype(np.uint8)
    spy: list[torch.Tensor] = []
    stream(adapter, frames, chunk, spy=spy)
    _, _, reference = full_prompt(adapter, frames, fps=2.0)
    assert torch.equal(torch.cat(spy, dim=1), reference)


def test_chunked_vision_encoding_is_exact(adapter):
    """Each chunk is encoded on its own: the vision tower (Qwen2.5: windowed and full blocks) never crosses frames."""
    frames = np.random.default_rng(2).integers(0, 255, size=(8, 112, 112, 3)).astype(np.uint8)
    whole = adapter.encode_frames(frames, 0, 2.0, video_start=5)
    parts = [adapter.encode_frames(frames[i : i + 2], i, 2.0, video_start=5) for i in range(0, 8, 2)]
    embeds = torch.cat([p.embeds for p in parts]).float()
    assert (embeds - whole.embeds.float()).abs().max() <= EMBED_ATOL
    assert torch.equal(torch.cat([p.positions for p in parts], dim=1), whole.positions)
    assert {p.grid for p in parts} == {whole.grid} and whole.embeds.shape[0] == whole.n_frames * whole.tokens_per_frame


def test_questions_leave_the_memory_unchanged(adapter, video):
    session = stream(adapter, video, 4)
    before = [s.read()[0].clone() for s in session.video.cache.stores]
    first = session.ask(PROMPT, max_new_tokens=3)
    session.ask("Another question?", max_new_tokens=3)
    again = session.ask(PROMPT, max_new_tokens=3)
    assert all(torch.equal(b, s.read()[0]) for b, s in zip(before, session.video.cache.stores))
    assert first.tokens == again.tokens and torch.equal(first.first_logprobs, again.first_logprobs)


def test_tar_van_pool_compresses_and_answers(adapter):
    """A budget of six frames' worth, one model frame per chunk: several passes, each to exactly |C| per head."""
    frames = np.random.default_rng(3).integers(0, 255, size=(24, 56, 84, 3)).astype(np.uint8)
    step = adapter.frames_per_step
    per_frame = adapter.encode_frames(frames[:step], 0, 2.0, 0).tokens_per_frame
    policy = compress.build("tar_van_pool")
    session = make_session(adapter, policy, budget=6 * per_frame)
    policy.validate(session.schedule.n_keep, per_frame, session.schedule.budget + per_frame)  # |M| plus one chunk
    stream(adapter, frames, step, session=session)
    passes = [s.compress for s in session.trace if s.compress]
    assert len(passes) >= 2 and all(p.tokens_after == session.schedule.n_keep for p in passes)
    assert max(s.video_tokens for s in session.trace) < session.schedule.budget
    assert session.video.vision_tokens == len(frames) // step * per_frame  # frames only: LLaVA's newline is not memory
    answer = session.ask(PROMPT, max_new_tokens=4)
    assert answer.tokens and torch.isfinite(answer.first_logprobs).all()


@pytest.mark.parametrize("fps", [1.0, 3.0])
def test_qwen25vl_temporal_positions_are_seconds(fps):
    adapter = tiny_adapter("qwen25vl")
    frames = np.random.default_rng(4).integers(0, 255, size=(8, 56, 56, 3)).astype(np.uint8)
    spy: list[torch.Tensor] = []
    session = stream(adapter, frames, 4, fps=fps, spy=spy)
    ours = torch.cat(spy, dim=1)
    _, _, reference = full_prompt(adapter, frames, fps)
    assert torch.equal(ours, reference)
    v = session.video
    temporal = ours[0, v.prefix_len : v.prefix_len + v.vision_tokens].unique() - v.video_start
    tokens_per_second = adapter.vision_config.tokens_per_second
    assert temporal.tolist() == [int(t * 2 / fps * tokens_per_second) for t in range(4)]


def test_qwen25vl_positions_differ_between_frame_rates():
    adapter = tiny_adapter("qwen25vl")
    frames = np.random.default_rng(4).integers(0, 255, size=(8, 56, 56, 3)).astype(np.uint8)
    slow, fast = (adapter.encode_frames(frames, 0, fps, 0).positions for fps in (1.0, 3.0))
    assert torch.equal(slow[1:], fast[1:]) and not torch.equal(slow[0], fast[0])


@pytest.mark.parametrize("family", ["qwen2vl", "qwen25vl"])
def test_hf_rope_index_agrees_on_vision_tokens(family, video):
    """transformers' own rope index places the video tokens as we do (it differs only for the text after them)."""
    adapter = tiny_adapter(family)
    ids, inputs, ours = full_prompt(adapter, video, fps=2.0)
    kwargs = {"second_per_grid_ts": torch.tensor([2 / 2.0])} if adapter.family == "qwen25vl" else {}
    theirs, _ = adapter.model.model.get_rope_index(
        torch.tensor([ids]), inputs["mm_token_type_ids"], video_grid_thw=inputs["video_grid_thw"], **kwargs
    )
    is_video = torch.tensor(ids) == adapter.model.config.video_token_id
    assert torch.equal(theirs[:, 0, is_video], ours[:, is_video])


def test_llava_ov_refuses_a_prompt_without_its_template():
    """The adapter raises its own error; the factory, at the edge, reports the same line as the config error that
    run.py prints."""
    cfg = tiny_config("llava_ov")
    cfg.use_chat_template = False
    with pytest.raises(ModelError, match="use_chat_template") as raised:
        ADAPTERS["llava_ov"].load(cfg)
    with pytest.raises(ConfigError) as reported:
        build_adapter(SimpleNamespace(model=cfg))
    assert str(reported.value) == str(raised.value)


@pytest.mark.parametrize("model", ["qwen2vl", "qwen25vl", "llava_ov"])
def test_missing_weights_fail_fast_with_the_fix(model, tmp_path):
    t0 = time.monotonic()
    proc = run_py(
        f"model={model}",
        f"run_dir={tmp_path / 'run'}",
        f"hydra.run.dir={tmp_path / 'h'}",
        timeout=120,
        env={"HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": None},
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert time.monotonic() - t0 < 60
    assert "not found" in proc.stderr and "huggingface-cli download" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.skipif(DEVICE != "cpu", reason="compares CPU preprocessing with the CPU processors")
def test_preprocessing_matches_the_hf_processor(adapter):
    """Our resize + normalise + patch order against transformers' video processors (they need torchvision)."""
    pytest.importorskip("torchvision")
    from transformers import LlavaOnevisionVideoProcessor, Qwen2VLVideoProcessor

    rng = np.random.default_rng(5)
    exact = (56, 84) if is_qwen(adapter) else (adapter.vision_config.image_size,) * 2  # no resize: exact
    for size, atol in ((exact, 1e-5), ((100, 130), 0.05)):  # resized: within a few uint8 levels on average
        frames = rng.integers(0, 255, size=(4, *size, 3)).astype(np.uint8)
        if is_qwen(adapter):
            processor = Qwen2VLVideoProcessor(min_pixels=adapter.cfg.min_pixels, max_pixels=adapter.cfg.max_pixels)
            out = processor(videos=[frames], return_tensors="pt", cap_pixels_per_frame=False)
            ours, grid = adapter.preprocess(frames)
            assert out["video_grid_thw"].tolist() == [list(grid)]
            theirs = out["pixel_values_videos"]
        else:
            side = adapter.vision_config.image_size
            processor = LlavaOnevisionVideoProcessor(
                size={"height": side, "width": side}, image_mean=[0.5] * 3, image_std=[0.5] * 3
            )
            ours = adapter.preprocess(frames)
            theirs = processor(videos=[frames], return_tensors="pt")["pixel_values_videos"][0]
        assert ours.shape == theirs.shape
        assert (ours - theirs).abs().mean() <= atol, (ours - theirs).abs().mean()


def test_frames_resized_as_they_are_decoded_encode_exactly_as_raw_frames(adapter):
    """The frame source resizes to :meth:`frame_size` in the background; the tower then gets the same pixels."""
    from infinipotv.models.base import resize_frames

    frames = np.random.default_rng(6).integers(0, 255, size=(4, 100, 130, 3)).astype(np.uint8)
    size = adapter.frame_size(100, 130)
    small = resize_frames(frames, size)
    assert small.dtype == np.uint8 and small.shape[1:3] == size and adapter.frame_size(*size) == size
    raw, resized = adapter.encode_frames(frames, 0, 2.0, 5), adapter.encode_frames(small, 0, 2.0, 5)
    assert torch.equal(raw.embeds, resized.embeds) and torch.equal(raw.positions, resized.positions)


def test_a_prefill_without_logits_leaves_the_same_cache_and_answers(adapter, video, monkeypatch):
    """Chunks are prefilled with ``logits=False`` (no vocabulary projection): the answers stay bit-identical."""
    forward, asked = adapter.forward, []

    def always_logits(embeds, positions, cache, logits=True):
        asked.append(logits)
        return forward(embeds, positions, cache, logits=True)

    monkeypatch.setattr(adapter, "forward", always_logits)
    with_logits = stream(adapter, video, 4)
    monkeypatch.undo()
    without = stream(adapter, video, 4)
    assert False in asked  # the session skips them for every prefill
    a, b = with_logits.ask(PROMPT, max_new_tokens=4), without.ask(PROMPT, max_new_tokens=4)
    assert a.tokens == b.tokens and torch.equal(a.first_logprobs, b.first_logprobs)
    assert all(
        torch.equal(x.read()[0], y.read()[0])
        for x, y in zip(with_logits.video.cache.stores, without.video.cache.stores)
    )
    with without.video.cache.transient():
        assert (
            adapter.forward(adapter.embed_text([1, 2]), adapter.text_positions(0, 2), without.video.cache, logits=False)
            is None
        )
