"""The policy contract's tensor side: the selection every policy shares.

A policy's parameters and registration are torch-free (:mod:`.params`); its tensor code subclasses them and
:class:`Policy`. It either scores tokens (``score(keys, values, layout, layer, n_layers) -> [H, T]``, higher = keep)
or, for positional and whole-frame baselines, picks them (``keep(...) -> [H, n_keep]``). Everything else lives here,
once: input checks, fp32 conversion, top-|C| per head, sorting (so each head's tokens stay in time order), output
checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .layout import FrameLayout
from .params.base import PolicyParams

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)  # what a ``reads_any_float`` policy may be given


def top_indices(score: torch.Tensor, n_keep: int) -> torch.Tensor:
    """The ``n_keep`` highest-scoring token indices per head, ``[H, n_keep]`` (any order): ``torch.topk``'s (where
    scores tie across the n_keep-th place, it picks among them)."""
    return torch.topk(score, n_keep, dim=1, sorted=False).indices


@dataclass(frozen=True)
class Policy(PolicyParams):
    """Base of every policy's tensor code. Subclasses implement :meth:`score` or override :meth:`keep`."""

    def score(
        self, keys: torch.Tensor, values: torch.Tensor, layout: FrameLayout, layer: int, n_layers: int
    ) -> torch.Tensor:
        """``[H, T]`` scores in fp32, higher = keep."""
        raise NotImplementedError(f"{type(self).__name__} must implement score() or keep()")

    def keep(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        layout: FrameLayout,
        n_keep: int,
        layer: int,
        n_layers: int,
    ) -> torch.Tensor:
        """``[H, n_keep]`` indices to keep, any order: by default the top ``n_keep`` of :meth:`score`."""
        return top_indices(self.score(keys, values, layout, layer, n_layers), n_keep)

    def __call__(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        layout: FrameLayout,
        n_keep: int,
        layer: int,
        n_layers: int,
    ) -> torch.Tensor:
        """Indices ``[H, n_keep]`` (LongTensor, ascending per head) of the tokens each head keeps."""
        if keys.dim() != 3 or values.shape[:2] != keys.shape[:2]:
            raise ValueError(
                f"keys and values must be [H, T, D] with the same H and T, got {tuple(keys.shape)} and "
                f"{tuple(values.shape)}"
            )
        heads, n_tokens = keys.shape[:2]
        if tuple(layout.token_ids.shape) != (heads, n_tokens):
            raise ValueError(
                f"layout.token_ids is {tuple(layout.token_ids.shape)}, expected [H, T] = {(heads, n_tokens)}"
            )
        if not 1 <= n_keep <= n_tokens:
            raise ValueError(f"n_keep={n_keep} must be in [1, T={n_tokens}]")
        if not 0 <= layer < n_layers:
            raise ValueError(f"layer={layer} must be in [0, n_layers={n_layers})")
        if not self.evicts and n_keep < n_tokens:
            raise ValueError(
                f"policy {self.name!r} never evicts: do not compress with it (n_keep={n_keep} < T={n_tokens})"
            )
        layout = FrameLayout(layout.token_ids.to(keys.device), layout.grid)
        if not (self.reads_any_float and keys.dtype in FLOAT_DTYPES and values.dtype in FLOAT_DTYPES):
            keys, values = keys.float(), values.float()
        kept = self.keep(keys, values, layout, n_keep, layer, n_layers).long()
        if kept.shape != (heads, n_keep):
            raise RuntimeError(
                f"policy {self.name!r} returned indices of shape {tuple(kept.shape)}, expected {(heads, n_keep)}"
            )
        return ascending(kept, n_tokens, self.name)


def check_on_device(ok: torch.Tensor, message: str) -> None:
    """Raise ``message`` unless ``ok`` (a bool tensor) holds, without waiting for the device: on a CPU it raises
    here (RuntimeError), on a GPU the check runs in the stream and a failure stops it at the next synchronisation.
    Reading ``ok`` back (``bool(ok)``) would make every layer of a pass wait for its kernels."""
    torch._assert_async(ok, message)


def ascending(kept: torch.Tensor, n_tokens: int, name: str) -> torch.Tensor:
    """``kept`` (distinct indices in ``[0, n_tokens)``, any order) sorted per head, by marking them in ``[H, T]``
    and reading the marks back in order: a few passes over the region instead of a sort (the same result: distinct
    integers have one ascending order). An index outside the region, or a repeated one (fewer marks than
    indices), is the policy's fault."""
    outside = f"policy {name!r} returned indices outside [0, {n_tokens})"
    repeated = f"policy {name!r} returned a token twice for some head"
    check_on_device(((kept >= 0) & (kept < n_tokens)).all(), outside)
    heads, n_keep = kept.shape
    marks = torch.zeros(heads, n_tokens, dtype=torch.bool, device=kept.device).scatter_(1, kept, True)
    check_on_device((marks.sum(dim=1) == n_keep).all(), repeated)
    slot = torch.where(marks, marks.cumsum(dim=1) - 1, n_keep)  # unmarked tokens go to a spare last column
    positions = torch.arange(n_tokens, device=kept.device).expand(heads, n_tokens)
    return kept.new_empty(heads, n_keep + 1).scatter_(1, slot, positions)[:, :n_keep]
