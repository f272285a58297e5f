"""A new policy whose heads share their tokens passes the parametrized policy contract with no test edit: the test
reads the policy's own ``head_shared`` attribute, not a list of names in the test file (docs/extending.md)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from infinipotv.compress import POLICIES, FrameLayout, Policy
from tests.compress import test_compress_policies as contract


@dataclass(frozen=True)
class Newest(Policy):
    """The newest ``n_keep`` tokens of the region, the same in every head (a toy positional rule)."""

    head_shared = True

    def keep(
        self, keys: torch.Tensor, values: torch.Tensor, layout: FrameLayout, n_keep: int, layer: int, n_layers: int
    ) -> torch.Tensor:
        n_tokens = keys.shape[1]
        return torch.arange(n_tokens - n_keep, n_tokens, device=keys.device).expand(keys.shape[0], n_keep)


@dataclass(frozen=True)
class NewestUndeclared(Newest):
    """The same rule without saying that its heads share their tokens."""

    head_shared = False


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch):
    """Register a policy class under a name for one test, as ``@register`` would; the registry is restored after."""

    def add(name: str, cls: type[Policy]) -> str:
        monkeypatch.setitem(POLICIES, name, cls)
        monkeypatch.setattr(cls, "name", name)
        return name

    return add


@pytest.mark.parametrize("compressed", [False, True], ids=["fresh", "compressed"])
def test_a_new_head_shared_policy_passes_the_contract(region, registered, compressed):
    contract.test_policy_contract(region, registered("newest", Newest), {}, compressed)


def test_the_contract_reads_the_attribute(region, registered):
    """Without ``head_shared``, the same rule is held to "heads choose their own tokens", and fails it."""
    with pytest.raises(AssertionError, match="heads choose their own tokens"):
        contract.test_policy_contract(region, registered("newest_undeclared", NewestUndeclared), {}, False)
