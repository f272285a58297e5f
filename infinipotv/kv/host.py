"""Offloaded memory (H2): one layer's tokens that left the accelerator-resident cache, kept in host memory.

A retrieval method (ReKV, LiveVLM) keeps a small window in the cache and offloads the rest of the stream here, then
copies a few blocks back to the accelerator when a question arrives. On a GPU the tensors are pinned host memory (a
copy to the device runs at full PCIe speed); on a CPU they are plain tensors in another store, so the bytes split
the same way: :meth:`HostStore.nbytes` is host memory unless the store was made ``on_accelerator`` (LiveVLM's
paper keeps its long-term memory on the GPU: ``compress.offload=false``).

Every head holds the same tokens (a window moves whole tokens), so ids and positions are per token. Keys are kept as
the cache holds them, after RoPE at ``positions``; a method strips or moves RoPE with ``adapter.rerotate`` (H5).
Appends go to a list of segments (no copy of what is already offloaded: a stream only grows); :meth:`keep`
compacts to one segment; :meth:`splice` (StreamKV) rewrites only the segments from the one it starts in.

Under KIVI (``coding``: ``quant=int2|int4|int8``) keys and values are stored as codes grouped by the method's
retrieval block (:mod:`infinipotv.kv.coded`: a key group never straddles a block), coded once as they are offloaded
and moved as codes after that: :meth:`take` hands the accelerator codes (a view dequantizes them as a forward reads
them), :meth:`keep`, :meth:`cut` and :meth:`splice` move whole tokens without quantizing them again; what a rule
scores (:meth:`stored`, :meth:`read`) is dequantized.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infinipotv.kv.coded import Coded, CodedKeys, CodedValues, Coding, code_keys, code_values, full
from infinipotv.kv.store import POSITION_DTYPE


@dataclass
class Offloaded:
    """Tokens of one layer: ``keys``/``values`` ``[H, N, D]`` (keys after RoPE at ``positions``), stream ``ids``
    ``[N]``, ``positions`` ``[R, N]``, and optional per-block summary rows ``block_keys`` ``[B, H * D]`` (ReKV's
    representative keys: one per block of the tokens, computed once when the block is offloaded). Keys and values
    are KIVI codes (:mod:`infinipotv.kv.coded`) where a host store under KIVI holds them or hands them out."""

    keys: torch.Tensor | CodedKeys
    values: torch.Tensor | CodedValues
    ids: torch.Tensor
    positions: torch.Tensor
    block_keys: torch.Tensor | None = None

    def tensors(self) -> list[torch.Tensor | CodedKeys | CodedValues]:
        found = [self.keys, self.values, self.ids, self.positions]
        return found + ([self.block_keys] if self.block_keys is not None else [])

    def move(self, device: torch.device) -> "Offloaded":
        """The tokens on ``device`` (block rows left out: a view never needs them)."""
        return Offloaded(*(getattr(self, name).to(device, non_blocking=True) for name in TOKEN_DIM))


# The token axis of each per-token field of :class:`Offloaded`, in its field order.
TOKEN_DIM = {"keys": 1, "values": 1, "ids": 0, "positions": 1}


def _cat(parts: list[torch.Tensor | Coded], dim: int) -> torch.Tensor | Coded:
    if len(parts) == 1:
        return parts[0]
    return torch.cat(parts, dim=dim) if isinstance(parts[0], torch.Tensor) else type(parts[0]).cat(parts)


def joined_tokens(mine: torch.Tensor | Coded, theirs: torch.Tensor | Coded, dim: int) -> torch.Tensor | Coded:
    """One part of two runs of tokens one after the other, ``theirs`` moved to where ``mine`` lives (and to its
    dtype, full precision)."""
    if isinstance(mine, torch.Tensor):
        return torch.cat([mine, theirs.to(mine.device, mine.dtype)], dim=dim)
    where = mine.codes.device
    return type(mine).cat([mine, theirs.to(where)])


class HostStore:
    """One layer's offloaded tokens. ``device``: the accelerator the cache is on (a copy there is what
    :meth:`take` returns); ``on_accelerator``: keep them on that device instead (counted as accelerator bytes);
    ``coding``: store keys and values as KIVI codes (None: as they come, full precision)."""

    def __init__(self, device: torch.device, on_accelerator: bool = False, coding: Coding | None = None) -> None:
        self.device = device
        self.on_accelerator = on_accelerator
        self.coding = coding
        self.home = device if on_accelerator else torch.device("cpu")
        self.pinned = device.type == "cuda" and not on_accelerator
        self._segments: list[Offloaded] = []

    def _place(self, tensor: torch.Tensor | Coded) -> torch.Tensor | Coded:
        if not isinstance(tensor, torch.Tensor):
            return tensor.map(self._place)
        out = tensor.to(self.home).contiguous()
        return out.pin_memory() if self.pinned else out.clone() if out.data_ptr() == tensor.data_ptr() else out

    def coded(self, tokens: Offloaded, block: int | None = None) -> Offloaded:
        """``tokens`` as this store holds them: under KIVI, full-precision keys and values coded with key groups
        inside each ``block`` of tokens (None: the tokens are one block), codes left as they are."""
        if self.coding is None or not isinstance(tokens.keys, torch.Tensor):
            return tokens
        n = tokens.keys.shape[1]
        keys = code_keys(tokens.keys, block or max(n, 1), self.coding)
        return Offloaded(keys, code_values(tokens.values, self.coding), tokens.ids, tokens.positions, tokens.block_keys)

    def append(self, tokens: Offloaded, block: int | None = None) -> None:
        """Offload ``tokens`` (any device) after what is stored (under KIVI, coded in blocks of ``block`` tokens)."""
        tokens = self.coded(tokens, block)
        self._segments.append(
            Offloaded(
                keys=self._place(tokens.keys),
                values=self._place(tokens.values),
                ids=self._place(tokens.ids.to(POSITION_DTYPE)),
                positions=self._place(tokens.positions.to(POSITION_DTYPE)),
                block_keys=None if tokens.block_keys is None else self._place(tokens.block_keys),
            )
        )

    def __len__(self) -> int:
        return sum(s.ids.numel() for s in self._segments)

    def all(self) -> Offloaded:
        """Everything stored, in order, where it lives (one segment: no copy; several: one concatenation)."""
        blocks = [s.block_keys for s in self._segments]
        return Offloaded(
            *(self._joined(name) for name in TOKEN_DIM),
            block_keys=None if any(b is None for b in blocks) else _cat(blocks, 0),
        )

    def _joined(self, name: str) -> torch.Tensor | Coded:
        if not self._segments:
            raise RuntimeError(f"HostStore.stored({name!r}) on an empty store")
        return _cat([getattr(s, name) for s in self._segments], TOKEN_DIM[name])

    def stored(self, name: str) -> torch.Tensor:
        """One of ``keys``/``values``/``ids``/``positions`` of everything stored, in order, alone (dequantized under
        KIVI): a question that scores the keys or reads the ids does not concatenate the values too."""
        return full(self._joined(name))

    def block_keys(self) -> torch.Tensor:
        """``[B, H * D]``: the block rows of every segment, in order (each segment offloaded its own blocks)."""
        rows = [s.block_keys for s in self._segments]
        if not rows or any(r is None for r in rows):
            raise RuntimeError("HostStore.block_keys(): some offloaded tokens were stored without block keys")
        return _cat(rows, 0)

    def take(self, index: torch.Tensor) -> Offloaded:
        """The tokens at ``index`` (``[n]`` ascending, into the stored order), copied to the accelerator as stored
        (under KIVI, codes: :func:`~infinipotv.kv.coded.full` dequantizes them); the block rows are not copied (a
        view never needs them). Reads only the segments it takes from."""
        return self._gather(index).move(self.device)

    def _gather(self, index: torch.Tensor) -> Offloaded:
        """The tokens at ``index`` where they live (one segment's slice, or a concatenation)."""
        index = index.to("cpu", torch.long)
        parts: list[Offloaded] = []
        start = 0
        for seg in self._segments:
            n = seg.ids.numel()
            local = index[(index >= start) & (index < start + n)] - start
            if local.numel():
                local = local.to(seg.ids.device)
                parts.append(
                    Offloaded(
                        seg.keys.index_select(1, local),
                        seg.values.index_select(1, local),
                        seg.ids.index_select(0, local),
                        seg.positions.index_select(1, local),
                    )
                )
            start += n
        if not parts:  # nothing picked: zero tokens, shaped like the stored ones
            if not self._segments:
                raise RuntimeError("HostStore.take() on an empty store")
            first = self._segments[0]
            parts = [Offloaded(*(getattr(first, name).narrow(dim, 0, 0) for name, dim in TOKEN_DIM.items()))]
        return Offloaded(*(_cat([getattr(p, name) for p in parts], dim) for name, dim in TOKEN_DIM.items()))

    def nbytes_of(self, index: torch.Tensor) -> int:
        """Bytes the keys and values :meth:`take` copies for ``index`` occupy (codes, with the key rows they use)."""
        got = self._gather(index)
        return got.keys.nbytes + got.values.nbytes

    def keep(self, index: torch.Tensor) -> None:
        """Keep only the tokens at ``index`` (``[n]`` ascending), as one segment (block rows are dropped: a store
        that compacts computes its block keys when it reads them)."""
        everything = self.all()
        index = index.to(everything.ids.device, torch.long)
        self._segments = [
            Offloaded(
                keys=everything.keys.index_select(1, index),  # a gather: contiguous already
                values=everything.values.index_select(1, index),
                ids=everything.ids.index_select(0, index),
                positions=everything.positions.index_select(1, index).contiguous(),
            )
        ]

    def _segment_at(self, token: int) -> tuple[int, int]:
        """The index of the segment holding stored token ``token`` (the number of segments past the end) and the
        index of that segment's first token."""
        first = 0
        for i, seg in enumerate(self._segments):
            n = seg.ids.numel()
            if token < first + n:
                return i, first
            first += n
        return len(self._segments), first

    def read(self, name: str, start: int, stop: int) -> torch.Tensor:
        """One of ``keys``/``values``/``ids``/``positions`` of the stored tokens ``[start, stop)``, where they live
        (dequantized under KIVI), reading only the segments that hold them (StreamKV reads its newest frames, not
        the stream)."""
        return full(self._range(name, start, stop))

    def cut(self, start: int, stop: int) -> Offloaded:
        """The stored tokens ``[start, stop)`` as stored (codes under KIVI), without block rows: StreamKV keeps some
        of a segment's frames and splices them back without quantizing them again."""
        return Offloaded(*(self._range(name, start, stop) for name in TOKEN_DIM))

    def _range(self, name: str, start: int, stop: int) -> torch.Tensor | Coded:
        dim = TOKEN_DIM[name]
        i, first = self._segment_at(start)
        parts = []
        for seg in self._segments[i:]:
            if first >= stop:
                break
            n = seg.ids.numel()
            lo, hi = max(start - first, 0), min(stop - first, n)
            parts.append(getattr(seg, name).narrow(dim, lo, hi - lo))
            first += n
        if not parts or first < stop:
            raise IndexError(f"HostStore.read({name!r}, {start}, {stop}) past the {len(self)} stored tokens")
        return _cat(parts, dim)

    def splice(self, start: int, stop: int, tokens: Offloaded, block: int | None = None) -> None:
        """Replace the stored tokens ``[start, stop)`` by ``tokens`` (any device; ``start == stop`` inserts):
        StreamKV's merged frames, compressed segments and summaries. Only the segments from the one holding
        ``start`` on are rewritten, as two (what they held before ``start``; ``tokens`` and what followed ``stop``),
        so a splice among the newest tokens costs the newest segments, not the stream. Block rows are kept where
        ``tokens`` and every rewritten segment have them, of one block size, and ``start``/``stop`` fall on block
        boundaries. Full-precision ``tokens`` are coded in blocks of ``block`` under KIVI (:meth:`coded`)."""
        tokens = self.coded(tokens, block)
        i, first = self._segment_at(start)
        tail = self._segments[i:]
        if not tail:  # at the end
            if stop != start or start != len(self):
                raise IndexError(f"HostStore.splice({start}, {stop}) past the {len(self)} stored tokens")
            self.append(tokens, block)
            return
        lo, hi = start - first, stop - first
        whole = {name: _cat([getattr(s, name) for s in tail], dim) for name, dim in TOKEN_DIM.items()}
        if hi > whole["ids"].numel():
            raise IndexError(f"HostStore.splice({start}, {stop}) past the {len(self)} stored tokens")
        before, after = {}, {}
        for name, dim in TOKEN_DIM.items():
            stored = whole[name]
            new = getattr(tokens, name)
            new = new.to(self.home, stored.dtype) if isinstance(new, torch.Tensor) else new.to(self.home)
            before[name] = stored.narrow(dim, 0, lo)
            rest = stored.narrow(dim, hi, stored.shape[dim] - hi)
            after[name] = _cat([new, rest], dim)
        rows_before = rows_after = None
        block = tokens.ids.numel() // tokens.block_keys.shape[0] if tokens.block_keys is not None else 0
        same = all(s.block_keys is not None and s.ids.numel() == block * s.block_keys.shape[0] for s in tail)
        if block and same and lo % block == 0 and hi % block == 0:
            rows = _cat([s.block_keys for s in tail], 0)
            rows_before = rows[: lo // block]
            rows_after = torch.cat([tokens.block_keys.to(self.home, rows.dtype), rows[hi // block :]])
        pieces = [Offloaded(**before, block_keys=rows_before)] if lo else []
        pieces.append(Offloaded(**after, block_keys=rows_after))
        self._segments = self._segments[:i] + [self._own(p) for p in pieces if p.ids.numel()]

    def _own(self, tokens: Offloaded) -> Offloaded:
        """``tokens`` in tensors of their own (a slice of a rewritten segment must not keep all of it alive)."""

        def own(t: torch.Tensor | Coded | None) -> torch.Tensor | Coded | None:
            if t is None:
                return None
            if not isinstance(t, torch.Tensor):
                return t.map(own)
            return t.contiguous().pin_memory() if self.pinned else t.clone(memory_format=torch.contiguous_format)

        return Offloaded(*(own(t) for t in tokens.tensors()[:4]), block_keys=own(tokens.block_keys))

    def nbytes(self) -> dict[str, int]:
        """Bytes the offloaded tensors occupy, by part (under KIVI, as a KIVI store names them: codes, scale and
        zero of keys and values, the key rows' index as ``bookkeeping``)."""
        names = ("keys", "values") if self.coding is None else (*CodedKeys.PARTS, *CodedValues.PARTS)
        parts = dict.fromkeys((*names, "positions", "block_keys"), 0)
        for seg in self._segments:
            for part in (seg.keys, seg.values):
                if isinstance(part, torch.Tensor):
                    parts["keys" if part is seg.keys else "values"] += part.nbytes
                else:
                    for name, n in part.parts().items():
                        parts[name] += n
            parts["positions"] += seg.ids.nbytes + seg.positions.nbytes
            parts["block_keys"] += 0 if seg.block_keys is None else seg.block_keys.nbytes
        return parts
