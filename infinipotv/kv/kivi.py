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
quantized tokens, key groups and residual tokens. The parts whose rows are large and whose per-head counts differ
most are flat, ``[rows of all heads, D]`` head after head: the key scale/zero rows (eviction thins each head's groups
its own way: 3x apart in one layer of the memory bench, where a padded ``[H, max over heads, D]`` held ~5% of the
int4 cache in padding) and the full-precision window (heads differ by up to G - 1 tokens, more after a byte cap's
further passes, at 4 * D bytes a token). The codes, value scale/zero and survivor counts are one padded tensor
``[H, max over heads, ...]`` each (heads hold nearly the same number of quantized tokens; a count is 2 bytes). A
head's rows in a flat part start at the sum of the heads' lengths before it; all operations are vectorised over
heads. Per head, quantized tokens always precede residual tokens in stream order (a flush moves the oldest residual
tokens; eviction preserves order), so the stream order of a head is its quantized part followed by its residual
part.
"""

from __future__ import annotations

import numpy as np
import torch

from infinipotv.kv import native
from infinipotv.kv.accounting import Layout, Storage
from infinipotv.kv.quant import check_bits, dequantize_grouped, quantize, unpack_codes
from infinipotv.kv.store import POSITION_DTYPE, KVStore, flat_rows, gather_rows, take_rows

KEY_BLOCK_BYTES = 1 << 21  # CPU, PyTorch path: key scale/zero rows gathered per block of tokens of about this size
GROUP_COUNT_DTYPE = torch.int16  # survivors per key group (<= group_size), with the [H] lengths the bookkeeping
LENGTH_DTYPE = torch.long  # quantized tokens per head, on the device


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


def flat_starts(lengths: torch.Tensor) -> torch.Tensor:
    """``[K]`` first row of each of K runs of ``lengths[k]`` rows laid one after another (head after head, in a
    flat part)."""
    return lengths.cumsum(0) - lengths


def flat_runs(starts: torch.Tensor, lengths: torch.Tensor, total: int) -> torch.Tensor:
    """``[total]`` rows ``starts[k] .. starts[k] + lengths[k] - 1`` of each run k, one run after another: the index
    of every gather and copy of a flat part (one shift per run, repeated; no per-row search). ``total`` =
    ``lengths.sum()``, known on the host (reading it from the device would wait for it)."""
    shift = (starts - flat_starts(lengths)).repeat_interleave(lengths, output_size=total)
    return torch.arange(total, device=starts.device).add_(shift)


def flat_append_index(la: torch.Tensor, lb: torch.Tensor, rows_a: int, rows_b: int, total: int) -> torch.Tensor:
    """The rows of ``cat([a, b.reshape(H * rows_b, ...)])`` that hold, head after head, a head's ``la[h]`` rows of
    the flat ``a`` (``rows_a`` rows in all) then the first ``lb[h]`` of its rows of ``b`` ``[H, rows_b, ...]``:
    computed once, it serves every pair of tensors with the same lengths (:func:`flat_cat`). ``total`` =
    ``(la + lb).sum()``, known on the host."""
    b_starts = torch.arange(rows_a, rows_a + rows_b * la.shape[0], rows_b, device=la.device)
    starts = torch.stack([flat_starts(la), b_starts], dim=1).reshape(-1)
    return flat_runs(starts, torch.stack([la, lb], dim=1).reshape(-1), total)


def flat_cat(a: torch.Tensor, b: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The flat rows :func:`flat_append_index` names (``index``) of the flat ``a`` and the padded ``b``."""
    return torch.cat([a, b.reshape(-1, *b.shape[2:])]).index_select(0, index)


def flat_take_index(rows: torch.Tensor, kept: torch.Tensor, total: int, first: torch.Tensor | None = None
                    ) -> torch.Tensor:
    """``rows[h, first[h] : first[h] + kept[h]]`` of each head, head after head (``rows`` ``[H, W]``; ``first``
    None = 0): rows of a flat part to keep, when ``rows`` names them. ``total`` = ``kept.sum()``, known on the
    host."""
    h, width = rows.shape
    starts = torch.arange(0, h * width, width, device=rows.device)
    return rows.reshape(-1).index_select(0, flat_runs(starts if first is None else starts + first, kept, total))


def token_groups(counts: torch.Tensor, n: int) -> torch.Tensor:
    """``[H, n]`` index of the key group that each of a head's first ``n`` quantized tokens belongs to.

    ``counts`` ``[H, Lg]`` holds the survivors per group in stream order (0 for padding groups), so a token's group
    is the first whose running total exceeds the token's rank.
    """
    ends = counts.cumsum(dim=1)
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
        self._nq = torch.zeros(0, dtype=LENGTH_DTYPE)  # [H] quantized tokens per head
        self._k_codes = self._v_codes = torch.zeros(0)  # [H, Lq, D * bits / 8] uint8, token-major
        self._v_scale = self._v_zero = torch.zeros(0)  # [H, Lq, D / G]
        self._k_scale = self._k_zero = torch.zeros(0)  # [live groups of all heads, D], head after head (flat)
        self._k_count = torch.zeros(0, dtype=GROUP_COUNT_DTYPE)  # [H, Lg] survivors per key group, 0 = padding
        self._res_k = self._res_v = torch.zeros(0)  # [residual tokens of all heads, D] full-precision window (flat)
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

    def layout(self) -> Layout:
        """The counts :func:`~infinipotv.kv.accounting.layout_bytes` prices, from the host copies of the lengths
        (no read from the device): with :meth:`storage` it gives every part of :meth:`nbytes` but the padding."""
        if self._ids is None:
            return Layout(0)
        h, t = self._ids.shape
        return Layout(h * t, h * t - int(self._nq_host.sum()), int(self._ng_host.sum()), h)

    def storage(self) -> Storage:
        """How this store holds a token, its bookkeeping included (survivors per key group, quantized tokens per
        head): the widths its :meth:`layout` is priced at. Known once the dtype is (set, or the first append's)."""
        if self.dtype is None:
            raise RuntimeError("storage() on a KiviStore with no dtype yet: pass dtype or append tokens first")
        return Storage(self.bits, self.group_size, self.residual_length, self.dtype.itemsize, POSITION_DTYPE.itemsize,
                       GROUP_COUNT_DTYPE.itemsize, LENGTH_DTYPE.itemsize)

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
        elif (h, d) != (self._ids.shape[0], self._res_k.shape[1]):
            raise ValueError(
                f"append of {h} heads x head_dim {d} to a store of {self._ids.shape[0]} x {self._res_k.shape[1]}"
            )
        keys, values = keys.to(self.dtype), values.to(self.dtype)
        ids = token_ids.to(device=keys.device, dtype=POSITION_DTYPE).expand(h, -1)
        nr, nr_host = self.n_residual, len(self) - self._nq_host
        self._ids = torch.cat([self._ids, ids], dim=1)
        index = flat_append_index(nr, torch.full_like(nr, n), self._res_k.shape[0], n, int((nr_host + n).sum()))
        self._res_k, self._res_v = flat_cat(self._res_k, keys, index), flat_cat(self._res_v, values, index)
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
            flat = flat_rows(idx_q, lq)  # one row index for codes and value scale/zero
            self._k_codes, self._v_codes = take_rows(self._k_codes, flat), take_rows(self._v_codes, flat)
            self._v_scale, self._v_zero = take_rows(self._v_scale, flat), take_rows(self._v_zero, flat)
            self._keep_key_groups(idx_q, nq_new, lq)
        # a head's kept residual tokens follow its nq_new[h] quantized ones in indices; its window's rows start at
        # flat_starts(n_residual)[h] and hold its tokens from nq[h] on
        rows = indices + (flat_starts(self.n_residual) - nq).unsqueeze(1)
        flat = flat_take_index(rows, n - nq_new, int((n - nq_new_host).sum()), first=nq_new)
        self._res_k, self._res_v = self._res_k.index_select(0, flat), self._res_v.index_select(0, flat)
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
        d, lq = self._res_k.shape[1], self._k_codes.shape[1]
        keys = torch.empty(h, t, d, dtype=self.dtype, device=self._ids.device)
        values = torch.empty_like(keys)
        if lq:
            self._dequantize_keys(keys[:, :lq])
            dequantize_grouped(self._v_codes, self._v_scale, self._v_zero, self.bits, self.group_size, "value",
                               out=values[:, :lq])
        if self._res_k.shape[0]:
            # head h's residual tokens go to rows h * T + nq[h] .. (h + 1) * T - 1 of the flattened outputs
            starts = t * torch.arange(h, device=self._nq.device) + self._nq
            dest = flat_runs(starts, self.n_residual, self._res_k.shape[0])
            keys.view(-1, d).index_copy_(0, dest, self._res_k)
            values.view(-1, d).index_copy_(0, dest, self._res_v)
        return keys, values

    def _dequantize_keys(self, out: torch.Tensor) -> torch.Tensor:
        """``q * scale + zero`` of the quantized keys into ``out`` ``[H, Lq, D]``. Key groups hold different numbers
        of survivors, so each token's scale/zero row is gathered (:func:`token_groups`, then the head's first row in
        the flat rows); the CPU kernels of :mod:`~infinipotv.kv.native` read each token's row in place; the PyTorch
        path gathers them in blocks of tokens of about ``KEY_BLOCK_BYTES`` on a CPU, so no full-size copy of the
        scales is made (on a GPU, one block: its allocator reuses memory and fewer launches win). The same products
        and sums."""
        h, lq, d = out.shape
        ng = self.n_key_groups
        # a head's padding tokens (past its nq[h]) may name a group past its own: any row will do, they are
        # overwritten by the residual window
        rows = (self._token_groups() + flat_starts(ng).unsqueeze(1)).clamp_(max=self._k_scale.shape[0] - 1)
        if native.applies(out.device, out.dtype, d, self.group_size, "key"):
            return native.dequantize_key(self._k_codes, self._k_scale, self._k_zero, self.bits, self.group_size,
                                         groups=rows, out=out)
        unpack_codes(self._k_codes, self.bits, out.dtype, out)
        step = lq if out.device.type != "cpu" else max(1, KEY_BLOCK_BYTES // (h * d * out.element_size()))
        for start in range(0, lq, step):
            g = rows[:, start:start + step].reshape(-1)
            out[:, start:start + step].mul_(self._k_scale.index_select(0, g).view(h, -1, d)).add_(
                self._k_zero.index_select(0, g).view(h, -1, d))
        return out

    def _token_groups(self) -> torch.Tensor:
        """:func:`token_groups` of the store, ``[H, Lq]``. When every head holds Lq quantized tokens (no padding
        rows), each group's index repeated by its survivor count is the same thing, without a binary search per
        token."""
        h, lg = self._k_count.shape
        lq = self._k_codes.shape[1]
        if lq and bool((self._nq_host == lq).all()):
            group = torch.arange(lg, device=self._k_count.device).repeat(h)
            return group.repeat_interleave(self._k_count.reshape(-1).long(), output_size=h * lq).view(h, lq)
        return token_groups(self._k_count, lq)

    def token_ids(self) -> torch.Tensor:
        if self._ids is None:
            raise RuntimeError("token_ids() on an empty KiviStore: append tokens first")
        return self._ids

    def nbytes(self) -> dict[str, int]:
        """Bytes by part, adding up to the storage of every tensor the store holds.

        Each part counts only the rows its heads really use; what the padded tensors (codes, value scale/zero,
        survivor counts) hold beyond that, as heads keep different numbers of quantized tokens and key groups after
        eviction, is ``padding`` (the flat key scale/zero rows and window hold none). ``bookkeeping`` is the
        survivors-per-key-group counts plus the per-head lengths. The parts but ``padding`` are
        :func:`~infinipotv.kv.accounting.layout_bytes` of :meth:`layout` at :meth:`storage`."""
        if self._ids is None:
            return dict.fromkeys(
                ("key_codes", "value_codes", "key_scale_zero", "value_scale_zero", "bookkeeping", "residual",
                 "positions", "padding"), 0
            )
        d, esize = self._res_k.shape[1], self._res_k.element_size()
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
        self._nq = torch.zeros(h, dtype=LENGTH_DTYPE, device=dev)
        self._nq_host, self._ng_host = np.zeros(h, dtype=np.int64), np.zeros(h, dtype=np.int64)
        self._k_codes = self._v_codes = torch.zeros(h, 0, d * self.bits // 8, dtype=torch.uint8, device=dev)
        self._v_scale = self._v_zero = torch.zeros(h, 0, d // self.group_size, dtype=self.dtype, device=dev)
        self._k_scale = self._k_zero = torch.zeros(0, d, dtype=self.dtype, device=dev)
        self._k_count = torch.zeros(h, 0, dtype=GROUP_COUNT_DTYPE, device=dev)
        self._res_k = self._res_v = torch.zeros(0, d, dtype=self.dtype, device=dev)

    def _flush(self) -> None:
        """Quantize, per head, the oldest whole groups of G residual tokens until the window is below R + G."""
        g = self.group_size
        nr, nr_host = self.n_residual, len(self) - self._nq_host
        groups_host = np.maximum((nr_host - self.residual_length) // g, 0)  # per head; sizes come from here
        most = int(groups_host.max())
        if most == 0:
            return
        n_groups = ((nr - self.residual_length) // g).clamp(min=0)  # the same, on the device
        span = most * g  # the rows past a head's own n_tok[h] are quantized too, then discarded
        keys, values = self._oldest_residual(span, nr, nr_host)
        qk = quantize(keys, self.bits, g, "key")
        qv = quantize(values, self.bits, g, "value")
        n_tok = n_groups * g
        nq, ng = self._nq, self.n_key_groups
        tok = ragged_index(nq, n_tok, self._k_codes.shape[1], span, int((self._nq_host + groups_host * g).max()))
        self._k_codes = ragged_cat(self._k_codes, qk.codes, tok)
        self._v_codes = ragged_cat(self._v_codes, qv.codes, tok)
        self._v_scale = ragged_cat(self._v_scale, qv.scale, tok)
        self._v_zero = ragged_cat(self._v_zero, qv.zero, tok)
        grp = flat_append_index(ng, n_groups, self._k_scale.shape[0], most, int((self._ng_host + groups_host).sum()))
        self._k_scale, self._k_zero = flat_cat(self._k_scale, qk.scale, grp), flat_cat(self._k_zero, qk.zero, grp)
        grp = ragged_index(ng, n_groups, self._k_count.shape[1], most, int((self._ng_host + groups_host).max()))
        full = torch.full((nr.shape[0], most), g, dtype=GROUP_COUNT_DTYPE, device=nr.device)
        counts = ragged_cat(self._k_count, full, grp)
        # Padding rows repeat real rows: zero their counts, or a head that quantized fewer groups than the others
        # would count a padding row as a live group and place its next groups after it (wrong scales).
        padding = torch.arange(counts.shape[1], device=nr.device) >= (ng + n_groups).unsqueeze(1)
        self._k_count = counts.masked_fill(padding, 0)
        self._nq = nq + n_tok
        self._nq_host, self._ng_host = self._nq_host + groups_host * g, self._ng_host + groups_host
        left_host = nr_host - groups_host * g
        flat = flat_runs(flat_starts(nr) + n_tok, nr - n_tok, int(left_host.sum()))  # each head's tokens left
        self._res_k, self._res_v = self._res_k.index_select(0, flat), self._res_v.index_select(0, flat)

    def _oldest_residual(self, span: int, nr: torch.Tensor, nr_host: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values ``[H, span, D]``: the oldest ``span`` tokens of every head's window (``nr``: its tokens;
        a head that flushes fewer groups than the most may hold fewer than ``span``, and its rows past its own are
        any rows, never kept). A view when every head holds the same number (the flat window is then ``[H, nr, D]``,
        as in a stream before its first eviction), else one gather."""
        h, d = nr.shape[0], self._res_k.shape[1]
        if bool((nr_host == nr_host[0]).all()):
            return self._res_k.view(h, -1, d)[:, :span], self._res_v.view(h, -1, d)[:, :span]
        rows = (flat_starts(nr).unsqueeze(1) + torch.arange(span, device=nr.device)).reshape(-1)
        rows = rows.clamp_(max=self._res_k.shape[0] - 1)
        return self._res_k.index_select(0, rows).view(h, span, d), self._res_v.index_select(0, rows).view(h, span, d)

    def _keep_key_groups(self, idx_q: torch.Tensor, nq_new: torch.Tensor, lq: int) -> None:
        """Recount survivors per key group and drop the groups none of whose tokens survived, keeping stream order.

        ``idx_q`` ``[H, n]``: the kept quantized tokens' old rows, ascending (rows past ``nq_new[h]`` are padding).
        A group's old rows end where its running count does, so its survivors are the kept rows below that end
        minus those below the previous one: one binary search per group, not a group lookup per kept token.
        """
        valid = torch.arange(idx_q.shape[1], device=idx_q.device).unsqueeze(0) < nq_new.unsqueeze(1)
        below = torch.searchsorted(idx_q.masked_fill(~valid, lq), self._k_count.cumsum(dim=1))
        counts = torch.diff(below, dim=1, prepend=below.new_zeros(below.shape[0], 1))
        live = counts > 0
        ng, ng_new = self.n_key_groups, live.sum(dim=1)
        self._ng_host = ng_new.cpu().numpy()
        order = torch.argsort((~live).to(torch.uint8), dim=1, stable=True)[:, : int(self._ng_host.max())]
        # a head's live groups, in order, in its old flat rows
        index = flat_take_index(order + flat_starts(ng).unsqueeze(1), ng_new, int(self._ng_host.sum()))
        self._k_scale, self._k_zero = self._k_scale.index_select(0, index), self._k_zero.index_select(0, index)
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
