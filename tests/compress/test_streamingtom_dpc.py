"""StreamingTOM's DPC keeps upstream's quirk: delta is the distance to the nearest LESS dense token, not a denser
one as in standard density-peak clustering; pinned on the example the docstring and docs/peers.md give."""

from __future__ import annotations

import torch

from infinipotv.compress.streamingtom import dpc_centres
from tests.helpers import ROOT

X = torch.tensor([[-0.1], [0.0], [0.1], [3.0], [3.05]])  # two clusters: tokens 0-2 and 3-4


def _standard_dpc(x: torch.Tensor, n_clusters: int, k: int) -> torch.Tensor:
    """Standard density-peak clustering (Rodriguez & Laio 2014): delta = distance to the nearest denser token."""
    dist = torch.cdist(x, x) / x.shape[1] ** 0.5
    density = (-(torch.topk(dist, k, dim=-1, largest=False).values ** 2).mean(dim=-1)).exp()
    denser = density[None, :] > density[:, None]  # [i, j]: j is denser than i
    delta = torch.where(denser, dist, dist.max()).min(dim=-1).values
    return torch.topk(density * delta, n_clusters).indices.sort().values


def test_upstream_quirk_pinned() -> None:
    assert dpc_centres(X, 2, 3, torch.zeros(5)).tolist() == [0, 2]  # both in the first cluster
    assert _standard_dpc(X, 2, 3).tolist() == [1, 3]  # one peak per cluster


def test_the_quirk_is_stated() -> None:
    assert "*less* dense" in dpc_centres.__doc__ and "[0, 2]" in dpc_centres.__doc__
    peers = " ".join((ROOT / "docs" / "peers.md").read_text().split())
    assert "An upstream quirk, kept: upstream's DPC" in peers and "*less* dense token" in peers
