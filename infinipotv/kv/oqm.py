"""StreamingTOM's online quantized memory, OQM (YIGE24/StreamingTOM@6c66b05, ``streamingtom/modules/oqm.py``).

Every token the stream keeps is stored, in groups of one frame's G tokens (after CTR, G = its budget per frame):

- keys and values (after RoPE) as b-bit codes, quantized per (head, channel) over the group's G tokens with the
  group's min and scale ``(max - min) / (2^b - 1)`` (``OQM._quantize_tensor``);
- one full-precision group key: the mean of the group's G keys before RoPE, the KV heads concatenated
  (``attention_processor._encode_mode``), which a question's mean query (:func:`query_repr`) retrieves by cosine
  (:func:`top_groups`, ``_select_top_k_groups``);
- the system prefix ("init tokens") at full precision.

It is not the harness's KIVI (:mod:`infinipotv.kv.kivi`): KIVI groups keys per channel over G tokens but values
per token over G channels, keeps the newest R tokens at full precision, and evicts; OQM quantizes keys and values
alike per (head, channel) over a frame's tokens, has no full-precision window, never evicts (it grows with the
stream), and keeps a retrieval key per group. Codes are packed along the channels here (upstream packs along the
tokens): the same codes, the same bytes. Scale and min are computed in float32 and stored in the store's dtype
(upstream computes them in the cache's dtype and clamps the scale to 1e-8, which float16 flushes to zero; a
constant group gets code 0 either way, dequantized to its min exactly).

Bytes per group (H KV heads, head_dim D, G tokens, b bits, s = dtype width): codes ``2 H G D b / 8``, min and
scale ``2 * 2 H D s``, group key ``H D s``, stream ids ``4 G``. At D = 128, G = 50, b = 4, s = 2 that is 128 + 20.5
+ 5.1 B per token per head (+ the ids): the spec's ~154 B.
"""

from __future__ import annotations

import math

import torch

from infinipotv.kv.accounting import Layout, Storage
from infinipotv.kv.quant import check_bits, levels, pack_codes, unpack_codes
from infinipotv.kv.store import POSITION_DTYPE, KVStore

GROUP_SIZE = 50  # OQM_GROUP_SIZE (= CTR_RETAIN_TOKENS)
BITS = 4  # OQM_QUANTIZATION_BITS
RETRIEVAL_MAX_TOKENS = 12544  # OQM_RETRIEVAL_MAX_TOKENS
TEXT_ID = -1  # the stream id of a text token (the prefix)


def quantize_group(x: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Codes ``[..., G, D]`` (uint8, unpacked), scale and min ``[..., D]`` (float32) of groups ``x`` ``[..., G, D]``
    (e.g. ``[H, G, D]``: one group of every head): per (head, channel) over the group's G tokens."""
    xf = x.float()
    mn, mx = xf.amin(dim=-2), xf.amax(dim=-2)
    scale = (mx - mn) / levels(bits)
    safe = torch.where(scale == 0, torch.ones_like(scale), scale)
    codes = ((xf - mn.unsqueeze(-2)) / safe.unsqueeze(-2)).clamp_(0, levels(bits)).round_().to(torch.uint8)
    return codes, scale, mn


def group_key(pre_rope_keys: torch.Tensor) -> torch.Tensor:
    """``[H * D]``: the mean over a group's tokens of its keys before RoPE ``[H, G, D]``, heads concatenated."""
    return pre_rope_keys.float().mean(dim=1).reshape(-1)


def query_repr(pre_rope_queries: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """``[H_kv * D]``: a question's queries before RoPE ``[H_q, q, D]`` averaged over the query heads of each KV
    head, then over the tokens (``_retrieve_mode``)."""
    heads, rows, dim = pre_rope_queries.shape
    return pre_rope_queries.float().reshape(kv_heads, heads // kv_heads, rows, dim).mean(dim=(1, 2)).reshape(-1)


def top_groups(query: torch.Tensor, keys: torch.Tensor, budget_tokens: int, group_size: int) -> torch.Tensor:
    """Ascending indices of the ceil(budget / G) groups whose keys ``[n, H * D]`` have the highest cosine with
    ``query`` ``[H * D]`` (all of them when that is not fewer than there are)."""
    wanted = math.ceil(budget_tokens / group_size)
    if wanted >= keys.shape[0]:
        return torch.arange(keys.shape[0], device=keys.device)
    cos = torch.nn.functional.normalize(keys.float(), dim=1) @ torch.nn.functional.normalize(query.float(), dim=0)
    return torch.topk(cos, wanted).indices.sort().values


class OQMStore:
    """One layer's OQM: the prefix at full precision, then groups of ``group_size`` tokens as ``bits``-bit codes
    with a group key each. ``dtype``: of the prefix, scales, mins and group keys (None: the first append's)."""

    def __init__(self, bits: int = BITS, group_size: int = GROUP_SIZE, dtype: torch.dtype | None = None) -> None:
        check_bits(bits)
        if group_size < 1:
            raise ValueError(f"group_size={group_size} must be >= 1 token (StreamingTOM: 50, one frame after CTR)")
        self.bits, self.group_size, self.dtype = bits, group_size, dtype
        self._init: tuple[torch.Tensor, torch.Tensor] | None = None  # [H, P, D] each
        self._codes: list[torch.Tensor] = []  # per append: [2, n_groups, H, G, D * bits / 8] (keys, values)
        self._scale_min: list[torch.Tensor] = []  # per append: [2, 2, n_groups, H, D]: (scale, min) x (keys, values)
        self._group_keys: list[torch.Tensor] = []  # per append: [n_groups, H * D]
        self._ids: list[torch.Tensor] = []  # per append: [N] int32 stream ids (one set for every head)
        self._n_groups = 0

    def __len__(self) -> int:
        return sum(len(ids) for ids in self._ids)

    @property
    def n_groups(self) -> int:
        return self._n_groups

    @property
    def prefix_length(self) -> int:
        return 0 if self._init is None else self._init[0].shape[1]

    def append(
        self, keys: torch.Tensor, values: torch.Tensor, token_ids: torch.Tensor, pre_rope_keys: torch.Tensor | None
    ) -> None:
        """Text tokens (ids -1, the prefix, before any vision) are kept at full precision; vision tokens
        (``[H, N, D]``, N a multiple of G, ``pre_rope_keys`` the same tokens' keys before RoPE) become groups."""
        dtype = self.dtype = self.dtype or keys.dtype
        ids = token_ids.to(device=keys.device, dtype=POSITION_DTYPE)
        text = ids == TEXT_ID
        if bool(text.all()):
            if self._n_groups:
                raise ValueError("OQMStore: text tokens after the video started (only the prefix is stored)")
            k, v = keys.to(dtype), values.to(dtype)
            self._init = (
                (k, v) if self._init is None else (torch.cat([self._init[0], k], 1), torch.cat([self._init[1], v], 1))
            )
        else:
            h, n, d = keys.shape
            if bool(text.any()) or n % self.group_size:
                raise ValueError(
                    f"OQMStore: an append of {n} tokens is not whole groups of {self.group_size} vision tokens "
                    f"(one frame after CTR each)"
                )
            if pre_rope_keys is None or pre_rope_keys.shape != keys.shape:
                raise ValueError("OQMStore: vision tokens need their keys before RoPE (the group keys), same shape")
            g = n // self.group_size
            grouped = torch.stack([keys, values]).reshape(2, h, g, self.group_size, d).transpose(1, 2)
            codes, scale, mn = quantize_group(grouped, self.bits)  # [2, g, h, G, D], [2, g, h, D] x 2
            self._codes.append(pack_codes(codes, self.bits))
            self._scale_min.append(torch.stack([scale, mn]).to(dtype))
            pre = pre_rope_keys.reshape(h, g, self.group_size, d).transpose(0, 1)
            self._group_keys.append(torch.stack([group_key(x) for x in pre]).to(dtype))
            self._n_groups += g
        self._ids.append(ids)

    def group_keys(self) -> torch.Tensor:
        """``[n_groups, H * D]`` in stream order."""
        return torch.cat(self._group_keys)

    def token_ids(self) -> torch.Tensor:
        """``[T]`` stream ids (prefix, then every group), the same in every head."""
        return torch.cat(self._ids)

    def read_groups(self, groups: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values ``[H, P + n * G, D]`` in the store's dtype: the prefix then the ``groups`` (ascending
        indices; None: all of them) dequantized."""
        if self._init is None:
            raise RuntimeError("read_groups() on an OQMStore with no prefix: append the prefix first")
        k0, v0 = self._init
        if not self._n_groups:
            return k0, v0
        if groups is None:
            codes, params = torch.cat(self._codes, dim=1), torch.cat(self._scale_min, dim=2)
        elif (
            groups.numel() and int(groups[0]) == self._n_groups - len(groups) and int(groups[-1]) == self._n_groups - 1
        ):
            codes, params = self._trailing(int(groups[0]))  # a window at the end: no copy of the whole memory
        else:
            codes, params = torch.cat(self._codes, dim=1), torch.cat(self._scale_min, dim=2)
            codes, params = codes[:, groups.to(codes.device)], params[:, :, groups.to(codes.device)]
        scale, mn = params.float().unsqueeze(-2)  # [2, g, H, 1, D] each
        x = unpack_codes(codes, self.bits, torch.float32) * scale + mn
        _, g, h, size, d = x.shape
        k, v = x.transpose(1, 2).reshape(2, h, g * size, d).to(self.dtype)
        return torch.cat([k0, k], dim=1), torch.cat([v0, v], dim=1)

    def _trailing(self, first: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Codes and scale/min of groups ``first ..`` (a window at the end), concatenating only the appends that
        hold them (a chunk's prefill reads the window, not the whole memory)."""
        codes, params, start = [], [], self._n_groups
        for c, m in zip(reversed(self._codes), reversed(self._scale_min)):
            if start <= first:
                break
            start -= c.shape[1]
            skip = max(0, first - start)
            codes.append(c[:, skip:])
            params.append(m[:, :, skip:])
        return torch.cat(codes[::-1], dim=1), torch.cat(params[::-1], dim=2)

    def group_ids(self, groups: torch.Tensor) -> torch.Tensor:
        """``[P + n * G]`` stream ids of :meth:`read_groups`' tokens."""
        ids = self.token_ids()
        p = self.prefix_length
        slots = (groups.long().cpu()[:, None] * self.group_size + torch.arange(self.group_size)).flatten() + p
        return torch.cat([ids[:p], ids[slots.to(ids.device)]])

    def nbytes(self) -> dict[str, int]:
        """Bytes the store's tensors occupy, by part."""

        def total(parts: list[torch.Tensor]) -> int:
            return sum(t.nbytes for t in parts)

        return {
            "prefix": 0 if self._init is None else self._init[0].nbytes + self._init[1].nbytes,
            "codes": total(self._codes),
            "scale_min": total(self._scale_min),
            "group_keys": total(self._group_keys),
            "positions": total(self._ids),
        }


def group_bytes(heads: int, head_dim: int, group_size: int, bits: int, scale_bytes: int) -> int:
    """Analytic bytes of one group (see the module docstring): what :meth:`OQMStore.nbytes` grows by per group."""
    return (
        2 * heads * group_size * head_dim * bits // 8
        + 4 * heads * head_dim * scale_bytes
        + heads * head_dim * scale_bytes
        + group_size * POSITION_DTYPE.itemsize
    )


class OQMLayer(KVStore):
    """An :class:`OQMStore` as one layer of the cache a forward sees: a chunk's prefill attends the prefix and the
    newest ``window`` tokens (whole groups) dequantized, and its own tokens join the OQM. ``len`` is that view's
    length, not the OQM's (``oqm.n_groups``): the cache's committed length is what attention reads.

    ``positions``: the stream positions of the tokens the next committing forward appends (set before each chunk's
    prefill); ``unrotate(keys, positions)`` gives their keys before RoPE, for the group keys."""

    def __init__(self, oqm: OQMStore, window: int, unrotate) -> None:
        self.oqm, self.window, self.unrotate = oqm, window, unrotate
        self.positions: torch.Tensor | None = None

    def _window(self) -> torch.Tensor:
        n = self.oqm.n_groups
        return torch.arange(n - min(n, self.window // self.oqm.group_size), n)

    def append(self, keys: torch.Tensor, values: torch.Tensor, token_ids: torch.Tensor) -> None:
        pre = None
        if bool((token_ids != TEXT_ID).any()):
            if self.positions is None or self.positions.shape[-1] != keys.shape[1]:
                raise RuntimeError("OQMLayer: the positions of the appended tokens were not set before the prefill")
            pre = self.unrotate(keys, self.positions)
        self.oqm.append(keys, values, token_ids, pre)
        self.positions = None

    def keep(self, indices: torch.Tensor) -> None:
        raise RuntimeError("OQM never evicts: every token it stores stays (StreamingTOM retrieves at a question)")

    def read(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.oqm.read_groups(self._window())

    def token_ids(self) -> torch.Tensor:
        ids = self.oqm.group_ids(self._window())
        heads = self.oqm.read_groups(self._window()[:0])[0].shape[0]
        return ids.expand(heads, -1)

    def nbytes(self) -> dict[str, int]:
        return self.oqm.nbytes()

    def layout(self) -> Layout:
        raise NotImplementedError("OQM is priced by infinipotv.kv.oqm.group_bytes, not the KIVI/fp16 rates")

    def storage(self) -> Storage:
        raise NotImplementedError("OQM is priced by infinipotv.kv.oqm.group_bytes, not the KIVI/fp16 rates")

    def __len__(self) -> int:
        return self.oqm.prefix_length + len(self._window()) * self.oqm.group_size
