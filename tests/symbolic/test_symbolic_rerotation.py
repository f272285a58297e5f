"""H5 on the symbolic model (the real SmolLM2, 1-D RoPE): a moved key equals its pre-RoPE key rotated at the new
position, as the decoder's own attention rotates it."""

from __future__ import annotations

from tests.models.test_rerotate import check_rerotation


def test_rerotation_is_exact_on_the_symbolic_model(symbolic):
    check_rerotation(symbolic)
