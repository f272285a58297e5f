"""What a question read of its evidence: the measured reason behind a method's accuracy (issue 44).

A benchmark that knows where a question's answer is shown (the symbolic benchmark's ``evidence``: the needle's
frames) lets the session count, at the question, which of those frames' tokens the answer's attention read: the
stored memory for a method that evicts (what it kept), the retrieved view for a method that retrieves (what it
found), the frames since the last chunk boundary included. Two shares, means over layers and KV heads:

- ``recall``: the share of the evidence frames' vision tokens that the answer read (a retrieval's recall, an
  eviction's retention of the needle);
- ``share``: the share of the vision tokens the answer read that lie on the evidence frames (how much of the
  memory, or of the retrieval buffer, the needle occupies).

Every answer also records how many vision tokens it read (:func:`video_tokens_read`), evidence or not.

Stream ids number vision tokens in stream order (:class:`~infinipotv.stream.video_state.VideoState`); a chunk of
raw frames maps to a contiguous run of them, each model frame (Qwen merges 2 raw frames) to ``tokens_per_frame``
consecutive ids, so the evidence's ids follow from the chunks' extents alone.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class Extent(NamedTuple):
    """One prefilled chunk: raw frames ``raw_first .. raw_first + raw_count - 1`` became stream ids ``id_first ..
    id_first + id_count - 1``."""

    raw_first: int
    raw_count: int
    id_first: int
    id_count: int


def evidence_ids(extents: list[Extent], first: int, end: int, frames_per_step: int) -> torch.Tensor:
    """``[n]`` stream ids of the vision tokens of raw frames ``first .. end - 1`` (a model frame counts whole when
    any of its raw frames is evidence); frames no extent covers contribute none."""
    found = []
    for e in extents:
        lo, hi = max(first, e.raw_first), min(end, e.raw_first + e.raw_count)
        if lo >= hi:
            continue
        per_frame = e.id_count // (e.raw_count // frames_per_step)
        m_lo, m_hi = (lo - e.raw_first) // frames_per_step, -(-(hi - e.raw_first) // frames_per_step)
        found.append(torch.arange(e.id_first + m_lo * per_frame, e.id_first + m_hi * per_frame))
    return torch.cat(found) if found else torch.empty(0, dtype=torch.long)


def video_tokens_read(read: list[torch.Tensor]) -> float:
    """The vision tokens an answer read, per layer and KV head (the mean): what equal accelerator memory spends on
    an answer, which a retrieval reads less of than it holds (``read`` as :func:`needle_stats` takes it)."""
    counts = [float((ids.reshape(-1, ids.shape[-1]) >= 0).sum(dim=-1).float().mean()) for ids in read]
    return sum(counts) / len(counts) if counts else 0.0


def needle_stats(read: list[torch.Tensor], evidence: torch.Tensor) -> dict[str, float] | None:
    """``recall`` and ``share`` (module docstring) of what each layer read, ``read[i]`` its stream ids ``[N]`` or
    ``[H, N]`` (text: negative ids), against the ``evidence`` ids; None when there is no evidence to read."""
    if not evidence.numel() or not read:
        return None
    recall, share = [], []
    for ids in read:
        ids = ids.reshape(-1, ids.shape[-1])  # [H, N]: a shared [N] is one row
        ev = evidence.to(device=ids.device, dtype=ids.dtype)
        for head in ids:
            video = head[head >= 0]
            hits = torch.isin(video, ev)
            recall.append(float(torch.isin(ev, video).float().mean()))
            share.append(float(hits.float().mean()) if video.numel() else 0.0)
    return {"recall": sum(recall) / len(recall), "share": sum(share) / len(share)}
