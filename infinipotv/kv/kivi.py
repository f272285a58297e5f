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
heads; the index arithmetic of both layouts, and the per-head lengths kept on the device and the host together, are
:mod:`infinipotv.kv.ragged`. Per head, quantized tokens always precede residual tokens in stream order (a flush
moves the oldest residual tokens; eviction preserves order), so the stream order of a head is its quantized part
followed by its residual part.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from infinipotv.kv.accounting import Layout, Storage
from infinipotv.kv.quant import check_bits, dequantize_grouped, quantize, unpack_codes
from infinipotv.kv.ragged import (
    LENGTH_DTYPE,
    HeadLengths,
    flat_append_index,
    flat_cat,
    flat_head_rows,
    flat_rows,
    flat_runs,
    flat_starts,
    flat_take_index,
    padding_mask,
    ragged_cat,
    ragged_index,
    run_index,
    select_rows,
    take_rows,
)
from infinipotv.kv.store import POSITION_DTYPE, KVStore, Rows

KEY_BLOCK_BYTES = 1 << 21  # CPU: key scale/zero rows gathered per block of tokens of about this size
GROUP_COUNT_DTYPE = torch.int16  # survivors per key group (<= group_size), with the [H] lengths the bookkeeping
INDEX_ERRORS = {
    "outside": "indices must lie in [0, {tokens}) (positions in the current token order)",
    "unsorted": "indices must be strictly increasing along each head (sort them before keep())",
}


@dataclass(frozen=True)
class KiviHead:
    """What one head of a :class:`KiviStore` holds, without padding, as a one-head store fed the same tokens would
    hold it: codes ``[nq, D * bits / 8]``, value scale/zero ``[nq, D / G]``, key scale/zero ``[groups, D]`` with the
    survivors of each group, and the full-precision window ``[nr, D]``."""

    key_codes: torch.Tensor
    value_codes: torch.Tensor
    value_scale: torch.Tensor
    value_zero: torch.Tensor
    key_scale: torch.Tensor
    key_zero: torch.Tensor
    key_counts: torch.Tensor
    residual_keys: torch.Tensor
    residual_values: torch.Tensor


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
        self._nq = HeadLengths.zeros(0)  # quantized tokens per head, on the device and the host
        # live key groups per head, on the host only: on the device it is (counts > 0).sum(1) (n_key_groups)
        self._ng_host = np.zeros(0, dtype=np.int64)
        self._k_codes = self._v_codes = torch.zeros(0)  # [H, Lq, D * bits / 8] uint8, token-major
        self._v_scale = self._v_zero = torch.zeros(0)  # [H, Lq, D / G]
        self._k_scale = self._k_zero = torch.zeros(0)  # [live groups of all heads, D], head after head (flat)
        self._k_count = torch.zeros(0, dtype=GROUP_COUNT_DTYPE)  # [H, Lg] survivors per key group, 0 = padding
        self._res_k = self._res_v = torch.zeros(0)  # [residual tokens of all heads, D] full-precision window (flat)
        # Every tensor shape is taken from the host copies of the lengths, so append() and read() never wait for the
        # device; keep() reads the new lengths back once. Host bookkeeping, not cache memory: nbytes() leaves it out.

    # -- lengths -------------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return 0 if self._ids is None else self._ids.shape[1]

    @property
    def n_quantized(self) -> torch.Tensor:
        """``[H]`` tokens held as codes, per head."""
        return self._nq.device.clone()

    @property
    def n_residual(self) -> torch.Tensor:
        """``[H]`` tokens held in the full-precision window, per head."""
        return len(self) - self._nq.device

    @property
    def n_key_groups(self) -> torch.Tensor:
        """``[H]`` key groups with at least one surviving token (each costs one scale/zero row), per head."""
        return (self._k_count > 0).sum(dim=1)

    @property
    def padded_lengths(self) -> tuple[int, int]:
        """The rows per head of the padded parts: quantized tokens (codes, value scale/zero) and key groups
        (survivor counts), the most any head holds; a head's rows past its own are padding (``nbytes()["padding"]``)."""
        return self._k_codes.shape[1], self._k_count.shape[1]

    def head(self, h: int) -> KiviHead:
        """What head ``h`` holds, without padding (for inspection and tests; the store's own operations run on all
        heads at once)."""
        if self._ids is None:
            raise RuntimeError("head() on an empty KiviStore: append tokens first")
        q, g = int(self._nq.host[h]), int(self._ng_host[h])
        first_g = int(self._ng_host[:h].sum())
        nr_host = len(self) - self._nq.host
        first_r, r = int(nr_host[:h].sum()), int(nr_host[h])
        return KiviHead(
            self._k_codes[h, :q],
            self._v_codes[h, :q],
            self._v_scale[h, :q],
            self._v_zero[h, :q],
            self._k_scale[first_g : first_g + g],
            self._k_zero[first_g : first_g + g],
            self._k_count[h, :g],
            self._res_k[first_r : first_r + r],
            self._res_v[first_r : first_r + r],
        )

    def layout(self) -> Layout:
        """The counts :func:`~infinipotv.kv.accounting.layout_bytes` prices, from the host copies of the lengths
        (no read from the device): with :meth:`storage` it gives every part of :meth:`nbytes` but the padding."""
        if self._ids is None:
            return Layout(0)
        h, t = self._ids.shape
        return Layout(h * t, h * t - self._nq.total(), int(self._ng_host.sum()), h)

    def storage(self) -> Storage:
        """How this store holds a token, its bookkeeping included (survivors per key group, quantized tokens per
        head): the widths its :meth:`layout` is priced at. Known once the dtype is (set, or the first append's)."""
        if self.dtype is None:
            raise RuntimeError("storage() on a KiviStore with no dtype yet: pass dtype or append tokens first")
        return Storage(
            self.bits,
            self.group_size,
            self.residual_length,
            self.dtype.itemsize,
            POSITION_DTYPE.itemsize,
            GROUP_COUNT_DTYPE.itemsize,
            LENGTH_DTYPE.itemsize,
        )

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
        nr, nr_host = self.n_residual, len(self) - self._nq.host
        self._ids = torch.cat([self._ids, ids], dim=1)
        index = flat_append_index(nr, torch.full_like(nr, n), self._res_k.shape[0], n, int((nr_host + n).sum()))
        self._res_k, self._res_v = flat_cat(self._res_k, keys, index), flat_cat(self._res_v, values, index)
        self._flush()

    def keep(self, indices: torch.Tensor) -> None:
        indices = self._check_indices(indices)
        self._check_order(indices)
        n = indices.shape[1]
        nq, lq = self._nq.device, self._k_codes.shape[1]
        kept_q = HeadLengths.from_device((indices < nq.unsqueeze(1)).sum(dim=1))  # the new shapes depend on it
        nq_new, nq_new_host = kept_q.device, kept_q.host
        if lq:
            # sorted indices: a head's first nq_new[h] kept indices are its quantized survivors
            idx_q = indices[:, : kept_q.most()].clamp(max=lq - 1)
            flat = flat_rows(idx_q, lq)  # one row index for codes and value scale/zero
            self._k_codes, self._v_codes = take_rows(self._k_codes, flat), take_rows(self._v_codes, flat)
            self._v_scale, self._v_zero = take_rows(self._v_scale, flat), take_rows(self._v_zero, flat)
            self._keep_key_groups(idx_q, nq_new, lq)
        # a head's kept residual tokens follow its nq_new[h] quantized ones in indices; its window's rows start at
        # flat_starts(n_residual)[h] and hold its tokens from nq[h] on
        rows = indices + (flat_starts(self.n_residual) - nq).unsqueeze(1)
        flat = flat_take_index(rows, n - nq_new, int((n - nq_new_host).sum()), first=nq_new)
        self._res_k, self._res_v = select_rows(self._res_k, flat), select_rows(self._res_v, flat)
        self._ids = self._ids.gather(1, indices)
        self._nq = kept_q

    def read(self) -> Rows:
        """Keys and values dequantized straight into their ``[H, T, D]`` outputs (:meth:`_read_into`)."""
        return self._read_into(0)

    def commit(self, keys: torch.Tensor, values: torch.Tensor, token_ids: torch.Tensor) -> Rows:
        """What a committing forward attends, in one ``[H, T + N, D]`` allocation (the size :meth:`read` after
        :meth:`append` had): the stored tokens dequantized into its first ``T`` rows, the forward's own tokens
        copied as they are (rounded to the window's dtype) into the last ``N``; then they are appended, and
        quantized by the window rule exactly as before. No full-precision copy of the cache beyond that one."""
        if self._ids is None:
            self.append(keys, values, token_ids)
            return keys.to(self.dtype), values.to(self.dtype)
        n = keys.shape[1]
        out_k, out_v = self._read_into(n)
        out_k[:, -n:].copy_(keys)
        out_v[:, -n:].copy_(values)
        self.append(keys, values, token_ids)
        return out_k, out_v

    def _read_into(self, room: int) -> Rows:
        """Keys and values ``[H, T + room, D]``: the stored tokens dequantized into rows ``0 .. T-1`` (the last
        ``room`` rows are left for the caller). A head's quantized tokens are its first rows, so the codes of every
        head are dequantized in place into rows ``0 .. Lq-1`` (a head's rows past its own ``nq[h]`` receive
        padding), then each head's residual window is copied over rows ``nq[h] .. T-1``. No intermediate full-size
        copy of the quantized part is made and nothing is joined afterwards."""
        if self._ids is None:
            raise RuntimeError("read() on an empty KiviStore: append tokens first")
        h, t = self._ids.shape
        d, lq = self._res_k.shape[1], self._k_codes.shape[1]
        keys = torch.empty(h, t + room, d, dtype=self.dtype, device=self._ids.device)
        values = torch.empty_like(keys)
        rows, dest = self._read_rows()
        if lq:
            self._dequantize_keys(keys[:, :lq], rows)
            dequantize_grouped(
                self._v_codes, self._v_scale, self._v_zero, self.bits, self.group_size, "value", out=values[:, :lq]
            )
        if self._res_k.shape[0]:
            if room:  # rows of the flattened [H * T] output -> of [H * (T + room)]
                dest = dest + torch.div(dest, t, rounding_mode="floor") * room
            keys.view(-1, d).index_copy_(0, dest, self._res_k)
            values.view(-1, d).index_copy_(0, dest, self._res_v)
        return keys, values

    def _read_rows(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Where :meth:`read` takes and puts rows: ``[H, Lq]`` each quantized token's key scale/zero row in the
        flat rows (:meth:`_token_groups`, then the head's first row; a head's padding tokens, past its nq[h], may
        name a group past its own: any row will do, they are overwritten by the residual window), and each residual
        token's row in the flattened ``[H * T]`` outputs (head h's go to rows h * T + nq[h] .. (h + 1) * T - 1)."""
        h, t = self._ids.shape
        lq = self._k_codes.shape[1]
        rows = dest = None
        if lq:
            rows = (self._token_groups() + flat_starts(self.n_key_groups).unsqueeze(1)).clamp_(
                max=self._k_scale.shape[0] - 1
            )
        if self._res_k.shape[0]:
            starts = t * torch.arange(h, device=self._ids.device) + self._nq.device
            dest = flat_runs(starts, self.n_residual, self._res_k.shape[0])
        return rows, dest

    def _dequantize_keys(self, out: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """``q * scale + zero`` of the quantized keys into ``out`` ``[H, Lq, D]``. Key groups hold different numbers
        of survivors, so each token reads its own scale/zero row, ``rows`` (:meth:`_read_rows`), gathered in blocks
        of tokens of about ``KEY_BLOCK_BYTES`` on a CPU, so no full-size copy of the scales is made (on a GPU, one
        block: its allocator reuses memory and fewer launches win)."""
        h, lq, d = out.shape
        unpack_codes(self._k_codes, self.bits, out.dtype, out)
        step = lq if out.device.type != "cpu" else max(1, KEY_BLOCK_BYTES // (h * d * out.element_size()))
        for start in range(0, lq, step):
            g = rows[:, start : start + step].reshape(-1)
            out[:, start : start + step].mul_(self._k_scale.index_select(0, g).view(h, -1, d)).add_(
                self._k_zero.index_select(0, g).view(h, -1, d)
            )
        return out

    def _token_groups(self) -> torch.Tensor:
        """``[H, Lq]`` the key group of each quantized token (:func:`~infinipotv.kv.ragged.run_index` of the survivor
        counts). When every head holds Lq quantized tokens (no padding rows), each group's index repeated by its
        survivor count is the same thing, without a binary search per token."""
        h, lg = self._k_count.shape
        lq = self._k_codes.shape[1]
        if lq and bool((self._nq.host == lq).all()):
            group = torch.arange(lg, device=self._k_count.device).repeat(h)
            return group.repeat_interleave(self._k_count.reshape(-1).long(), output_size=h * lq).view(h, lq)
        return run_index(self._k_count, lq)

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
                (
                    "key_codes",
                    "value_codes",
                    "key_scale_zero",
                    "value_scale_zero",
                    "bookkeeping",
                    "residual",
                    "positions",
                    "padding",
                ),
                0,
            )
        d, esize = self._res_k.shape[1], self._res_k.element_size()
        n_q, n_g = self._nq.total(), int(self._ng_host.sum())
        n_r = len(self) * self._ids.shape[0] - n_q
        code_row = self._k_codes.shape[2]
        parts = {
            "key_codes": n_q * code_row,
            "value_codes": n_q * code_row,
            "key_scale_zero": n_g * d * 2 * esize,
            "value_scale_zero": n_q * (d // self.group_size) * 2 * esize,
            "bookkeeping": n_g * self._k_count.element_size() + self._nq.device.untyped_storage().nbytes(),
            "residual": n_r * d * 2 * esize,
        }
        held = (
            self._k_codes,
            self._v_codes,
            self._v_scale,
            self._v_zero,
            self._k_scale,
            self._k_zero,
            self._k_count,
            self._nq.device,
            self._res_k,
            self._res_v,
        )
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
        self._nq, self._ng_host = HeadLengths.zeros(h, dev), np.zeros(h, dtype=np.int64)
        self._k_codes = self._v_codes = torch.zeros(h, 0, d * self.bits // 8, dtype=torch.uint8, device=dev)
        self._v_scale = self._v_zero = torch.zeros(h, 0, d // self.group_size, dtype=self.dtype, device=dev)
        self._k_scale = self._k_zero = torch.zeros(0, d, dtype=self.dtype, device=dev)
        self._k_count = torch.zeros(h, 0, dtype=GROUP_COUNT_DTYPE, device=dev)
        self._res_k = self._res_v = torch.zeros(0, d, dtype=self.dtype, device=dev)

    def _flush(self) -> None:
        """Quantize, per head, the oldest whole groups of G residual tokens until the window is below R + G."""
        g = self.group_size
        nr, nr_host = self.n_residual, len(self) - self._nq.host
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
        nq, ng = self._nq.device, self.n_key_groups
        tok = ragged_index(nq, n_tok, self._k_codes.shape[1], span, int((self._nq.host + groups_host * g).max()))
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
        self._k_count = counts.masked_fill(padding_mask(ng + n_groups, counts.shape[1]), 0)
        self._nq.set(nq + n_tok, self._nq.host + groups_host * g)
        self._ng_host = self._ng_host + groups_host
        left_host = nr_host - groups_host * g
        flat = flat_runs(flat_starts(nr) + n_tok, nr - n_tok, int(left_host.sum()))  # each head's tokens left
        self._res_k, self._res_v = select_rows(self._res_k, flat), select_rows(self._res_v, flat)

    def _oldest_residual(self, span: int, nr: torch.Tensor, nr_host: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values ``[H, span, D]``: the oldest ``span`` tokens of every head's window (``nr``: its tokens;
        a head that flushes fewer groups than the most may hold fewer than ``span``, and its rows past its own are
        any rows, never kept). A view when every head holds the same number (the flat window is then ``[H, nr, D]``,
        as in a stream before its first eviction), else one gather."""
        h, d = nr.shape[0], self._res_k.shape[1]
        if bool((nr_host == nr_host[0]).all()):
            return self._res_k.view(h, -1, d)[:, :span], self._res_v.view(h, -1, d)[:, :span]
        rows = flat_head_rows(nr, span, self._res_k.shape[0])
        return select_rows(self._res_k, rows).view(h, span, d), select_rows(self._res_v, rows).view(h, span, d)

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
        ng = self.n_key_groups
        live_groups = HeadLengths.from_device(live.sum(dim=1))
        self._ng_host = live_groups.host
        order = torch.argsort((~live).to(torch.uint8), dim=1, stable=True)[:, : live_groups.most()]
        # a head's live groups, in order, in its old flat rows
        index = flat_take_index(order + flat_starts(ng).unsqueeze(1), live_groups.device, live_groups.total())
        self._k_scale, self._k_zero = select_rows(self._k_scale, index), select_rows(self._k_zero, index)
        self._k_count = counts.gather(1, order).to(GROUP_COUNT_DTYPE)

    def _check_indices(self, indices: torch.Tensor) -> torch.Tensor:
        """The indices as int64 after checking their shape and type (range and order: :meth:`_check_order`; a silent
        mis-gather would corrupt the cache)."""
        if self._ids is None:
            raise RuntimeError("keep() on an empty KiviStore: append tokens first")
        h, t = self._ids.shape
        if indices.dim() != 2 or indices.shape[0] != h or indices.shape[1] > t:
            raise ValueError(f"indices must be [heads={h}, n <= {t}], got {tuple(indices.shape)}")
        if indices.is_floating_point() or indices.dtype == torch.bool:
            raise TypeError(f"indices must be an integer tensor of token positions, got {indices.dtype}")
        return indices.long()

    def _check_order(self, indices: torch.Tensor) -> None:
        """Every index in [0, T) and strictly increasing along each head, with one read-back from the device."""
        if indices.shape[1]:
            t = len(self)
            outside, unsorted = torch.stack(
                [(indices.min() < 0) | (indices.max() >= t), (indices[:, 1:] <= indices[:, :-1]).any()]
            ).tolist()
            if outside or unsorted:
                raise ValueError(INDEX_ERRORS["outside" if outside else "unsorted"].format(tokens=t))
