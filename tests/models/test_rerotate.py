"""H5: an adapter moves cached keys to new positions exactly, and captures the pre-RoPE queries of a forward.

The check is the definition: a key cached after RoPE at its old position, moved by ``rerotate``, equals the same
pre-RoPE key rotated by the decoder's own attention code at the new position (fp32 tolerance), for every family
(1-D RoPE: LLaVA-OneVision, the symbolic model; M-RoPE per (t, h, w) section: Qwen2-VL, Qwen2.5-VL)."""

from __future__ import annotations

import importlib

import torch

from infinipotv.models.base import ModelAdapter


def rotated_by_the_decoder(adapter: ModelAdapter, keys: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``keys [H, N, D]`` (pre-RoPE) rotated as the decoder's attention rotates them at ``positions [R, N]``."""
    module = importlib.import_module(type(adapter.attention_layers()[0]).__module__)
    lm = adapter.language_model()
    cos, sin = lm.rotary_emb(keys, adapter._position_arg(positions))
    q = keys.unsqueeze(0)
    if hasattr(module, "apply_multimodal_rotary_pos_emb") and positions.shape[0] == 3:
        section = lm.rotary_emb.mrope_section if hasattr(lm.rotary_emb, "mrope_section") else None
        try:
            _, k = module.apply_multimodal_rotary_pos_emb(q, q, cos, sin, section)
        except TypeError:
            _, k = module.apply_multimodal_rotary_pos_emb(q, q, cos, sin)
    else:
        _, k = module.apply_rotary_pos_emb(q, q, cos, sin)
    return k[0]


def positions_for(adapter: ModelAdapter, n: int, generator: torch.Generator) -> torch.Tensor:
    rows = 3 if adapter.text_positions(0, 1).shape[0] == 3 else 1
    return torch.randint(0, 5000, (rows, n), generator=generator)


def check_rerotation(adapter: ModelAdapter) -> None:
    g = torch.Generator().manual_seed(0)
    heads, dim = adapter.n_kv_heads, adapter.head_dim
    pre = torch.randn(heads, 40, dim, generator=g)
    old, new = positions_for(adapter, 40, g), positions_for(adapter, 40, g)
    cached = rotated_by_the_decoder(adapter, pre, old)
    moved = adapter.rerotate(cached, old, new)
    # fp32 tolerance: an angle p * inv_freq is rounded at ~p * 2^-24 rad, ~3e-4 at the positions drawn here (< 5000),
    # on keys of norm ~3 (both sides round their own angles)
    tolerance = dict(atol=2e-3, rtol=1e-3)
    torch.testing.assert_close(moved, rotated_by_the_decoder(adapter, pre, new), **tolerance)
    torch.testing.assert_close(adapter.rerotate(cached, old, torch.zeros_like(old)), pre, **tolerance)


def test_rerotation_is_exact(adapter):
    check_rerotation(adapter)


def test_captured_queries_are_the_q_projections(adapter):
    ids = adapter.question_ids("Which colour?")
    embeds = adapter.embed_text(ids)
    with adapter.capture_queries() as captured:
        from infinipotv.kv.cache import StreamCache
        from infinipotv.kv.store import FullPrecisionStore

        cache = StreamCache(adapter.n_layers, FullPrecisionStore)
        with cache.transient():
            adapter.forward(embeds, adapter.text_positions(0, len(ids)), cache, logits=False)
    assert len(captured) == adapter.n_layers and all(len(c) == 1 for c in captured)
    first = adapter.language_model().layers[0]
    q0 = first.self_attn.q_proj(first.input_layernorm(embeds.float()))
    heads = adapter.text_config.num_attention_heads
    expected = q0.view(len(ids), heads, adapter.head_dim).transpose(0, 1)
    torch.testing.assert_close(captured[0][0], expected)
    assert cache.committed_length() == 0
