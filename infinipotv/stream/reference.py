"""What streaming is held against: one forward pass over the whole prompt, and the original position rules.

Written apart from the adapters: the positions here are built for the whole prompt at once (never chunk by chunk),
and the one-shot pass goes through the model's own ``forward`` with token ids and pixels, so the placeholders are
filled by transformers, not by our code.

Device switch (the same tests on a GPU): ``INFINIPOTV_DEVICE=cuda``, ``INFINIPOTV_DTYPE=bfloat16`` and
``INFINIPOTV_ATTN=flash_attention_2``; tolerances follow the dtype.
"""

from __future__ import annotations

import os
from functools import lru_cache

import numpy as np
import torch

from infinipotv.config import ModelConfig
from infinipotv.kv.store import FullPrecisionStore
from infinipotv.models import ADAPTERS, ModelAdapter
from infinipotv.stream.session import StreamingSession

PROMPT = "What happens in the video?\nA. x\nB. y\nAnswer with the option's letter."
FAMILIES = ("qwen2vl", "qwen25vl", "llava_ov")
DEVICE = os.environ.get("INFINIPOTV_DEVICE", "cpu")
DTYPE = os.environ.get("INFINIPOTV_DTYPE", "float32")
ATTN = os.environ.get("INFINIPOTV_ATTN", "sdpa")  # flash_attention_2 (with bfloat16) where flash-attn is installed
# Max |log p| difference of the first answer token, streamed vs one pass. float32: summation order alone (measured
# 2e-6 on the CPU), while a wrong temporal position or a dropped newline moves it by 2e-3 to 6e-3 (checked by breaking
# the adapters on purpose). bfloat16 rounding alone reaches 8e-3 on the CPU, so there the tolerance only catches
# gross errors on these near-uniform tiny models: the GPU script runs float32 on CUDA for the tight check.
LOGPROB_ATOL = {"float32": 1e-4, "float16": 2e-2, "bfloat16": 5e-2}[DTYPE]
EMBED_ATOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}[DTYPE]  # vision embeddings here peak at ~0.13
if DEVICE.startswith("cuda"):  # float32 must mean float32: TF32 matmuls/convolutions would add 1e-3 noise
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False

_LM = {"num_layers": 2, "hidden_size": 64, "num_heads": 4, "num_kv_heads": 2, "seed": 0}
TINY = {
    "qwen2vl": dict(min_pixels=56 * 56, max_pixels=112 * 112, options=_LM),
    "qwen25vl": dict(min_pixels=56 * 56, max_pixels=112 * 112, options={**_LM, "tokens_per_second": 2}),
    "llava_ov": dict(num_frames=16, options={**_LM, "image_size": 42, "patch_size": 6}),
}


def tiny_config(family: str) -> ModelConfig:
    return ModelConfig(family=family, tiny=True, dtype=DTYPE, device=DEVICE, attn_implementation=ATTN, **TINY[family])


@lru_cache(maxsize=None)
def tiny_adapter(family: str) -> ModelAdapter:
    """One tiny model per family for the whole test session (building one costs ~2 s)."""
    return ADAPTERS[family].load(tiny_config(family))


def is_qwen(adapter: ModelAdapter) -> bool:
    return adapter.family in ("qwen2vl", "qwen25vl")


# -- positions --------------------------------------------------------------------------------------------------
def qwen_temporal_index(adapter: ModelAdapter, n: int, fps: float) -> torch.Tensor:
    """Temporal M-RoPE index of model frames 0..n-1: the frame index (Qwen2-VL), or
    int(t * second_per_grid_t * tokens_per_second) with second_per_grid_t = temporal_patch_size / fps in float32
    (Qwen2.5-VL's original rule, second_per_grid_ts as its processor returns them)."""
    t = torch.arange(n)
    if adapter.family == "qwen2vl":
        return t
    vc = adapter.vision_config
    second_per_grid_t = torch.tensor([vc.temporal_patch_size / fps], dtype=torch.float32)[0]
    return (t * second_per_grid_t * vc.tokens_per_second).long()


def qwen_positions(ids: list[int], video_token: int, grid: tuple[int, int, int], t_index: torch.Tensor) -> torch.Tensor:
    """The original Qwen2-VL/2.5-VL rule ``(3, L)`` for one video of llm grid (t, h, w): text continues from
    max(previous positions) + 1; the video gets (t_index, h, w) offset by the end of the text before it."""
    ids_t = torch.tensor(ids)
    t, h, w = grid
    start = int((ids_t == video_token).nonzero()[0])
    before = torch.arange(start).expand(3, -1)
    ti = t_index.view(-1, 1, 1).expand(t, h, w).flatten()
    hi = torch.arange(h).view(1, -1, 1).expand(t, h, w).flatten()
    wi = torch.arange(w).view(1, 1, -1).expand(t, h, w).flatten()
    video = torch.stack([ti, hi, wi]) + start
    after_start = int(video.max()) + 1
    after = torch.arange(len(ids) - start - t * h * w).expand(3, -1) + after_start
    return torch.cat([before, video, after], dim=1)


def full_prompt(adapter: ModelAdapter, frames: np.ndarray, fps: float) -> tuple[list[int], dict, torch.Tensor]:
    """Token ids of the whole prompt, the model inputs for one forward pass, and the reference positions."""
    video_token = adapter.model.config.video_token_id
    if is_qwen(adapter):
        pixels, (gt, gh, gw) = adapter.preprocess(frames)
        m = adapter.vision_config.spatial_merge_size
        grid = (gt, gh // m, gw // m)
        ids = adapter.prefix_ids() + [video_token] * (grid[0] * grid[1] * grid[2]) + adapter.question_ids(PROMPT)
        positions = qwen_positions(ids, video_token, grid, qwen_temporal_index(adapter, gt, fps))
        inputs = dict(
            pixel_values_videos=pixels,
            video_grid_thw=torch.tensor([[gt, gh, gw]]),
            position_ids=positions.unsqueeze(1),
            mm_token_type_ids=(torch.tensor([ids]) == video_token).int() * 2,
        )
        return ids, inputs, positions
    pixels = adapter.preprocess(frames)
    per_frame = adapter.grid[0] * adapter.grid[1]
    # question_ids starts with the <video> placeholder that holds the image_newline: len(frames) * p + 1 in all.
    ids = adapter.prefix_ids() + [video_token] * (len(frames) * per_frame) + adapter.question_ids(PROMPT)
    return ids, dict(pixel_values_videos=pixels.unsqueeze(0)), torch.arange(len(ids)).view(1, -1)


def one_shot_logprobs(adapter: ModelAdapter, frames: np.ndarray, fps: float) -> torch.Tensor:
    """Log-probabilities of the first answer token from one forward pass over the whole prompt."""
    ids, inputs, _ = full_prompt(adapter, frames, fps)
    inputs = {k: v.to(adapter.device) for k, v in inputs.items()}
    if "pixel_values_videos" in inputs:
        inputs["pixel_values_videos"] = inputs["pixel_values_videos"].to(adapter.dtype)
    with torch.inference_mode():
        out = adapter.model(input_ids=torch.tensor([ids], device=adapter.device), **inputs)
    return torch.log_softmax(out.logits[0, -1].float(), dim=-1).cpu()


# -- streaming --------------------------------------------------------------------------------------------------
def make_session(
    adapter: ModelAdapter, policy=None, budget: int | None = None, c_ratio: float = 0.75
) -> StreamingSession:
    return StreamingSession(adapter, policy, budget, c_ratio, lambda: FullPrecisionStore(adapter.dtype))


def stream(
    adapter: ModelAdapter,
    frames: np.ndarray,
    chunk: int,
    fps: float = 2.0,
    spy: list | None = None,
    session: StreamingSession | None = None,
) -> StreamingSession:
    """Feed ``frames`` in chunks of ``chunk`` raw frames; with ``spy``, record the positions of every forward
    (prefix, each chunk, then the question: the first forward of ``ask``)."""
    session = session or make_session(adapter)
    if spy is not None:
        forward = adapter.forward
        adapter.forward = lambda e, p, c, **kw: (spy.append(p.cpu().clone()), forward(e, p, c, **kw))[1]
    try:
        session.start("v")
        for i in range(0, len(frames), chunk):
            session.feed(frames[i : i + chunk], fps=fps)
        session.finish()
        if spy is not None:
            session.ask(PROMPT, max_new_tokens=1)
    finally:
        if spy is not None:
            del adapter.forward
    return session
