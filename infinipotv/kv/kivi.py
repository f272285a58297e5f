"""KIVI storage of one layer's kept tokens inside an evicting cache.

Appends go to a full-precision residual window. When a head's window reaches ``residual_length + group_size``
tokens, its oldest ``group_size`` tokens are quantized (keys per channel: one scale/zero row ``[D]`` per group;
values per token: ``[D / G]`` scale/zero per token) and move to the quantized part, keys and values together so both
stay aligned. The window then holds between R and R + G - 1 tokens, as in KIVI.

Eviction (:meth:`KiviStore.keep`) never re-quantizes a survivor: codes are token-major, so keeping tokens is a row
gather of keys and values alike; a key group keeps its scale/zero row while any of its tokens survive (a count per
group says how many) and frees it when none does. Re-quantizing survivors into new groups would compound the error
with every compression step.

After eviction each head keeps its own set of tokens (same total per head), so heads hold different numbers of
quantized tokens, key groups and residual tokens. Every part is one padded tensor ``[H, max over heads, ...]`` plus
per-head lengths; all operations are vectorised over heads. Per head, quantized tokens always precede residual
tokens in stream order (a flush moves the oldest residual tokens; eviction preserves order), so the stream order of a
head is its quantized part followed by its residual part.
"""

from __future__ import annotations

import numpy as np
import torch

from infinipotv.kv.quant import check_bits, dequantize_grouped, quantize, unpack_codes
from infinipotv.kv.store import POSITION_DTYPE, KVStore, flat_rows, gather_rows, take_rows

KEY_BLOCK_BYTES = 1 << 21  # CPU: key scale/zero rows gathered per block of tokens of about this size (see dequantized)
GROUP_COUNT_DTYPE = torch.int16  # survivors per key group (<= group_size), with the [H] lengths the bookkeeping


def ragged_index(la: torch.Tensor, lb: torch.Tensor, rows_a: int, rows_b: int, length: int) -> torch.Tensor:
    """The rows of ``cat([a, b], 1)`` that :func:`ragged_cat` gathers (``a``, ``b`` with ``rows_a``, ``rows_b``
    rows): computed once, it serves every pair of tensors with the same per-head lengths (keys and values).
    ``length`` = max over heads of ``la + lb``, known on the host (reading it from the device would wait for it)."""
    t = torch.arange(length, device=la.device).unsqueeze(0)
    idx = torch.where(t < la.unsqueeze(1), t, rows_a + t - la.unsqueeze(1))
    return idx.clamp(max=max(rows_a + rows_b - 1, 0))


def ragged_cat(a: torch.Tensor, b: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Per head, the first ``la[h]`` rows of ``a`` then the first ``lb[h]`` rows of ``b``, padded to the longest head,
    where ``index`` is :func:`ragged_index` of those lengths and shapes.

    Padding rows (past ``la[h] + lb[h]``) repeat some valid or padding row: their content is never read (counts
    excepted, see ``_flush``).
    """
    if index.shape[1] == 0:
        return a.new_empty((a.shape[0], 0, *a.shape[2:]))
    return gather_rows(torch.cat([a, b], dim=1), index)


def token_groups(counts: torch.Tensor, n: int, rank: torch.Tensor | None = None) -> torch.Tensor:
    """``[H, n]`` index of the key group that each of a head's first ``n`` quantized tokens belongs to (or, given
    ``rank`` ``[H, m]``, the groups of the quantized tokens at those ranks).

    ``counts`` ``[H, Lg]`` holds the survivors per group in stream order (0 for padding groups), so a token's group
    is the first whose running total exceeds the token's rank.
    """
    ends = counts.cumsum(dim=1)
    if rank is None:
        rank = torch.arange(n, device=counts.device).expand(counts.shape[0], n).contiguous()
    return torch.searchsorted(ends, rank, right=True).clamp(max=max(counts.shape[1] - 1, 0))


class KiviStore(KVStore):
    """Keys and values stored as KIVI codes (keys per channel, values per token) plus a full-precision window.

    ``bits`` in {2, 4, 8}; ``group_size`` G divides head_dim; ``residual_length`` R >= 0 newest tokens stay in
    ``dtype`` (None = the dtype of the first append), which is also the scale/zero dtype (2 bytes for fp16/bf16).
    """

    def __init__(
        self, bits: int = 4, group_size: int = 32, residual_length: int = 128, dtype: torch.dtype | None = None
    ) -> None:
        check_bits(bits)
        if group_size <= 0:
            raise ValueError(f"group_size={group_size} must be a positive number of tokens/channels (KIVI: 32)")
        if residual_length < 0:
            raise ValueError(f"residual_length={residual_length} must be >= 0 (KIVI: 128 full-precision tokens)")
        if dtype is not None and not dtype.is_floating_point:
            raise ValueError(f"dtype={dtype} must be a floating-point dtype (float16, bfloat16 or float32)")
        self.bits, self.group_size, self.residual_length, self.dtype = bits, group_size, residual_length, dtype
        self._ids: torch.Tensor | None = None  # [H, T] stream ids (int32), all heads the same length
        self._nq = torch.zeros(0, dtype=torch.long)  # [H] quantized tokens per head
        self._k_codes = self._v_codes = torch.zeros(0)  # [H, Lq, D * bits / 8] uint8, token-major
        self._v_scale = self._v_zero = torch.zeros(0)  # [H, Lq, D / G]
        self._k_scale = self._k_zero = torch.zeros(0)  # [H, Lg, D], one row per live key group
        self._k_count = torch.zeros(0, dtype=GROUP_COUNT_DTYPE)  # [H, Lg] survivors per key group, 0 = padding
        self._res_k = self._res_v = torch.zeros(0)  # [H, Lr, D] full-precision window
        # Host copies of the per-head lengths (quantized tokens, live key groups): every tensor shape is taken from
        # them, so append() and dequantized() never wait for the device; keep() reads the new lengths back once.
        # Host bookkeeping (16 bytes per head), not cache memory: nbytes() leaves them out.
        self._nq_host = np.zeros(0, dtype=np.int64)
        self._ng_host = np.zeros(0, dtype=np.int64)

    # -- lengths -------------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return 0 if self._ids is None else self._ids.shape[1]

    @property
    def n_quantized(self) -> torch.Tensor:
        """``[H]`` tokens held as codes, per head."""
        return self._nq.clone()

    @property
    def n_residual(self) -> torch.Tensor:
        """``[H]`` tokens held in the full-precision window, per head."""
        return len(self) - self._nq

    @property
    def n_key_groups(self) -> torch.Tensor:
        """``[H]`` key groups with at least one surviving token (each costs one scale/zero row), per head."""
        return (self._k_count > 0).sum(dim=1)

    # -- the store contract ----------------------------------------------------------------------------------------

    def append(self, keys: torch.Tensor, values: torch.Tensor, token_ids: torch.Tensor) -> None:
        if keys.dim() != 3 or keys.shape != values.shape:
            raise ValueError(
                f"keys {tuple(keys.shape)} and values {tuple(values.shape)} must both be [heads, tokens, head_dim]"
            )
        h, n, d = keys.shape
        if token_ids.shape != (n,):
            raise ValueError(f"token_ids must be [tokens] = [{n}], got {tuple(token_ids.shape)}")
        if self._ids is None:
            self._start(keys)
        elif (h, d) != (self._ids.shape[0], self._res_k.shape[2]):
            raise ValueError(
                f"append of {h} heads x head_dim {d} to a store of {self._ids.shape[0]} x {self._res_k.shape[2]}"
            )
        keys, values = keys.to(self.dtype), values.to(self.dtype)
        ids = token_ids.to(device=keys.device, dtype=POSITION_DTYPE).expand(h, -1)
        nr, nr_host = self.n_residual, len(self) - self._nq_host
        self._ids = torch.cat([self._ids, ids], dim=1)
        full = torch.full_like(nr, n)
        index = ragged_index(nr, full, self._res_k.shape[1], n, int((nr_host + n).max()))
        self._res_k = ragged_cat(self._res_k, keys, index)
        self._res_v = ragged_cat(self._res_v, values, index)
        self._flush()

    def keep(self, indices: torch.Tensor) -> None:
        indices = self._check_indices(indices)
        n = indices.shape[1]
        nq, lq = self._nq, self._k_codes.shape[1]
        nq_new = (indices < nq.unsqueeze(1)).sum(dim=1)
        nq_new_host = nq_new.cpu().numpy()  # the new shapes depend on which tokens were kept: read them once
        if lq:
            # sorted indices: a head's first nq_new[h] kept indices are its quantized survivors
            idx_q = indices[:, : int(nq_new_host.max())].clamp(max=lq - 1)
            gid = self._token_groups(idx_q)
            flat = flat_rows(idx_q, lq)  # one row index for codes and value scale/zero
            self._k_codes, self._v_codes = take_rows(self._k_codes, flat), take_rows(self._v_codes, flat)
            self._v_scale, self._v_zero = take_rows(self._v_scale, flat), take_rows(self._v_zero, flat)
            self._keep_key_groups(gid, nq_new)
        nr_new_host = n - nq_new_host
        rank = (nq_new.unsqueeze(1) + torch.arange(int(nr_new_host.max()), device=indices.device)).clamp(max=n - 1)
        idx_r = (indices.gather(1, rank) - nq.unsqueeze(1)).clamp(0, max(self._res_k.shape[1] - 1, 0))
        flat = flat_rows(idx_r, self._res_k.shape[1])
        self._res_k, self._res_v = take_rows(self._res_k, flat), take_rows(self._res_v, flat)
        self._ids = self._ids.gather(1, indices)
        self._nq, self._nq_host = nq_new, nq_new_host

    def dequantized(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values written straight into their ``[H, T, D]`` outputs: a head's quantized tokens are its
        first rows, so the codes of every head are dequantized in place into rows ``0 .. Lq-1`` (a head's rows past
        its own ``nq[h]`` receive padding), then each head's residual window is copied over rows ``nq[h] ..
        T-1``. No intermediate full-size copy of the quantized part is made and nothing is joined afterwards."""
        if self._ids is None:
            raise RuntimeError("dequantized() on an empty KiviStore: append tokens first")
        h, t = self._ids.shape
        d, lq = self._res_k.shape[2], self._k_codes.shape[1]
        # one spare row past the H*T real ones receives the residual window's padding rows (see _residual_rows)
        flat_k = torch.empty(h * t + 1, d, dtype=self.dtype, device=self._ids.device)
        flat_v = torch.empty_like(flat_k)
        keys, values = flat_k[: h * t].view(h, t, d), flat_v[: h * t].view(h, t, d)
        if lq:
            self._dequantize_keys(keys[:, :lq])
            dequantize_grouped(self._v_codes, self._v_scale, self._v_zero, self.bits, self.group_size, "value",
                               out=values[:, :lq])
        if self._res_k.shape[1]:
            dest = self._residual_rows(t)
            flat_k.index_copy_(0, dest, self._res_k.reshape(-1, d))
            flat_v.index_copy_(0, dest, self._res_v.reshape(-1, d))
        return keys, values

    def _dequantize_keys(self, out: torch.Tensor) -> torch.Tensor:
        """``q * scale + zero`` of the quantized keys into ``out`` ``[H, Lq, D]``. Key groups hold different numbers
        of survivors, so each token's scale/zero row is gathered (:func:`token_groups`); on the CPU this is done
        in blocks of tokens of about ``KEY_BLOCK_BYTES``, so no full-size copy of the scales is made (on a GPU, one
        block: its allocator reuses memory and fewer launches win). The same products and sums."""
        h, lq = out.shape[:2]
        gid = self._token_groups()
        unpack_codes(self._k_codes, self.bits, out.dtype, out)
        step = lq if out.device.type != "cpu" else max(1, KEY_BLOCK_BYTES // (h * out.shape[2] * out.element_size()))
        for start in range(0, lq, step):
            g = flat_rows(gid[:, start:start + step], self._k_scale.shape[1])
            out[:, start:start + step].mul_(take_rows(self._k_scale, g)).add_(take_rows(self._k_zero, g))
        return out

    def _token_groups(self, rank: torch.Tensor | None = None) -> torch.Tensor:
        """:func:`token_groups` of the store (``[H, Lq]``, or at ``rank``). When every head holds Lq quantized
        tokens (no padding rows), each group's index repeated by its survivor count is the same thing, without a
        binary search per token."""
        h, lg = self._k_count.shape
        lq = self._k_codes.shape[1]
        if lq and bool((self._nq_host == lq).all()):
            group = torch.arange(lg, device=self._k_count.device).repeat(h)
            gid = group.repeat_interleave(self._k_count.reshape(-1).long(), output_size=h * lq).view(h, lq)
            return gid if rank is None else gid.gather(1, rank)
        return token_groups(self._k_count, lq, rank)

    def _residual_rows(self, t: int) -> torch.Tensor:
        """Flat destination rows (in ``[H * T + 1]``) of the residual window's rows ``[H, Lr]``: head h's j-th
        residual token goes to row ``h * T + nq[h] + j``, padding rows (j >= T - nq[h]) to the spare row H * T."""
        h, lr = self._res_k.shape[:2]
        j = torch.arange(lr, device=self._nq.device).unsqueeze(0)
        start = self._nq.unsqueeze(1) + torch.arange(h, device=self._nq.device).unsqueeze(1) * t
        return torch.where(j < (t - self._nq).unsqueeze(1), start + j, h * t).reshape(-1)

    def token_ids(self) -> torch.Tensor:
        if self._ids is None:
            raise RuntimeError("token_ids() on an empty KiviStore: append tokens first")
        return self._ids

    def nbytes(self) -> dict[str, int]:
        """Bytes by part, adding up to the storage of every tensor the store holds.

        Each part counts only the rows its heads really use; what the padded tensors hold beyond that (heads keep
        different numbers of quantized, residual and group rows after eviction) is ``padding``. ``bookkeeping`` is
        the survivors-per-key-group counts plus the per-head lengths."""
        if self._ids is None:
            return dict.fromkeys(
                ("key_codes", "value_codes", "key_scale_zero", "value_scale_zero", "bookkeeping", "residual",
                 "positions", "padding"), 0
            )
        d, esize = self._res_k.shape[2], self._res_k.element_size()
        n_q, n_g = int(self._nq_host.sum()), int(self._ng_host.sum())
        n_r = len(self) * self._ids.shape[0] - n_q
        code_row = self._k_codes.shape[2]
        parts = {
            "key_codes": n_q * code_row,
            "value_codes": n_q * code_row,
            "key_scale_zero": n_g * d * 2 * esize,
            "value_scale_zero": n_q * (d // self.group_size) * 2 * esize,
            "bookkeeping": n_g * self._k_count.element_size() + self._nq.untyped_storage().nbytes(),
            "residual": n_r * d * 2 * esize,
        }
        held = (self._k_codes, self._v_codes, self._v_scale, self._v_zero, self._k_scale, self._k_zero,
                self._k_count, self._nq, self._res_k, self._res_v)
        parts["padding"] = sum(t.untyped_storage().nbytes() for t in held) - sum(parts.values())
        parts["positions"] = self._ids.untyped_storage().nbytes()
        return parts

    # -- internals ---------------------------------------------------------------------------------------------------

    def _start(self, keys: torch.Tensor) -> None:
        """Allocate empty parts on the first append, once heads, head_dim, dtype and device are known."""
        h, _, d = keys.shape
        if d % self.group_size:
            raise ValueError(
                f"head_dim={d} is not a multiple of group_size={self.group_size}: values are grouped over channels "
                "(pick a group_size that divides head_dim)"
            )
        if d * self.bits % 8:
            raise ValueError(f"head_dim={d} at {self.bits} bits does not fill whole bytes")
        dtype = self.dtype or keys.dtype
        if not dtype.is_floating_point:
            raise ValueError(f"KiviStore needs floating-point keys/values, got {dtype}")
        self.dtype = dtype
        dev = keys.device
        self._ids = torch.zeros(h, 0, dtype=POSITION_DTYPE, device=dev)
        self._nq = torch.zeros(h, dtype=torch.long, device=dev)
        self._nq_host, self._ng_host = np.zeros(h, dtype=np.int64), np.zeros(h, dtype=np.int64)
        self._k_codes = self._v_codes = torch.zeros(h, 0, d * self.bits // 8, dtype=torch.uint8, device=dev)
        self._v_scale = self._v_zero = torch.zeros(h, 0, d // self.group_size, dtype=self.dtype, device=dev)
        self._k_scale = self._k_zero = torch.zeros(h, 0, d, dtype=self.dtype, device=dev)
        self._k_count = torch.zeros(h, 0, dtype=GROUP_COUNT_DTYPE, device=dev)
        self._res_k = self._res_v = torch.zeros(h, 0, d, dtype=self.dtype, device=dev)

    def _flush(self) -> None:
        """Quantize, per head, the oldest whole groups of G residual tokens until the window is below R + G."""
        g = self.group_size
        nr, nr_host = self.n_residual, len(self) - self._nq_host
        groups_host = np.maximum((nr_host - self.residual_length) // g, 0)  # per head; sizes come from here
        most = int(groups_host.max())
        if most == 0:
            return
        n_groups = ((nr - self.residual_length) // g).clamp(min=0)  # the same, on the device
        span = most * g  # every head holds at least R + span >= span residual rows; extra ones are discarded
        qk = quantize(self._res_k[:, :span], self.bits, g, "key")
        qv = quantize(self._res_v[:, :span], self.bits, g, "value")
        n_tok = n_groups * g
        nq, ng = self._nq, self.n_key_groups
        tok = ragged_index(nq, n_tok, self._k_codes.shape[1], span, int((self._nq_host + groups_host * g).max()))
        self._k_codes = ragged_cat(self._k_codes, qk.codes, tok)
        self._v_codes = ragged_cat(self._v_codes, qv.codes, tok)
        self._v_scale = ragged_cat(self._v_scale, qv.scale, tok)
        self._v_zero = ragged_cat(self._v_zero, qv.zero, tok)
        grp = ragged_index(ng, n_groups, self._k_scale.shape[1], most, int((self._ng_host + groups_host).max()))
        self._k_scale = ragged_cat(self._k_scale, qk.scale, grp)
        self._k_zero = ragged_cat(self._k_zero, qk.zero, grp)
        full = torch.full((nr.shape[0], most), g, dtype=GROUP_COUNT_DTYPE, device=nr.device)
        counts = ragged_cat(self._k_count, full, grp)
        # Padding rows repeat real rows: zero their counts, or a head that quantized fewer groups than the others
        # would count a padding row as a live group and place its next groups after it (wrong scales).
        padding = torch.arange(counts.shape[1], device=nr.device) >= (ng + n_groups).unsqueeze(1)
        self._k_count = counts.masked_fill(padding, 0)
        self._nq = nq + n_tok
        self._nq_host, self._ng_host = self._nq_host + groups_host * g, self._ng_host + groups_host
        left_host = nr_host - groups_host * g
        rank = (n_tok.unsqueeze(1) + torch.arange(int(left_host.max()), device=nr.device)).clamp(
            max=self._res_k.shape[1] - 1
        )
        flat = flat_rows(rank, self._res_k.shape[1])
        self._res_k, self._res_v = take_rows(self._res_k, flat), take_rows(self._res_v, flat)

    def _keep_key_groups(self, gid: torch.Tensor, nq_new: torch.Tensor) -> None:
        """Recount survivors per key group and drop the groups none of whose tokens survived, keeping stream order.

        ``gid`` ``[H, n]``: old group of each kept quantized token (rows past ``nq_new[h]`` are padding).
        """
        valid = torch.arange(gid.shape[1], device=gid.device).unsqueeze(0) < nq_new.unsqueeze(1)
        counts = torch.zeros(self._k_count.shape, dtype=torch.long, device=gid.device)
        counts.scatter_add_(1, gid, valid.long())
        live = counts > 0
        self._ng_host = live.sum(dim=1).cpu().numpy()
        order = torch.argsort((~live).to(torch.uint8), dim=1, stable=True)[:, : int(self._ng_host.max())]
        flat = flat_rows(order, self._k_scale.shape[1])
        self._k_scale, self._k_zero = take_rows(self._k_scale, flat), take_rows(self._k_zero, flat)
        self._k_count = counts.gather(1, order).to(GROUP_COUNT_DTYPE)

    def _check_indices(self, indices: torch.Tensor) -> torch.Tensor:
        """The indices as int64 after checking shape, range and order (a silent mis-gather would corrupt the cache)."""
        if self._ids is None:
            raise RuntimeError("keep() on an empty KiviStore: append tokens first")
        h, t = self._ids.shape
        if indices.dim() != 2 or indices.shape[0] != h or indices.shape[1] > t:
            raise ValueError(f"indices must be [heads={h}, n <= {t}], got {tuple(indices.shape)}")
        if indices.is_floating_point() or indices.dtype == torch.bool:
            raise TypeError(f"indices must be an integer tensor of token positions, got {indices.dtype}")
        if indices.shape[1]:  # one read-back from the device for both checks
            out_of_range, unsorted = torch.stack([
                (indices.min() < 0) | (indices.max() >= t), (indices[:, 1:] <= indices[:, :-1]).any()]).tolist()
            if out_of_range:
                raise ValueError(f"indices must lie in [0, {t}) (positions in the current token order)")
            if unsorted:
                raise ValueError("indices must be strictly increasing along each head (sort them before keep())")
        return indices.long()
