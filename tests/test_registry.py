"""One registry for policies, benchmarks and model families: a name is one class, a second registration is refused."""

from __future__ import annotations

import pytest

from infinipotv.compress import POLICIES, register
from infinipotv.data import BENCHMARKS
from infinipotv.data.base import register as register_benchmark
from infinipotv.models import ADAPTERS
from infinipotv.models.base import register_adapter


@pytest.mark.parametrize(
    "registry, add",
    [
        (POLICIES, lambda cls: register("tar")(cls)),
        (BENCHMARKS, lambda cls: register_benchmark(type("Twin", (cls,), {"name": "videomme"}))),
        (ADAPTERS, lambda cls: register_adapter(type("Twin", (cls,), {"family": "qwen2vl"}))),
    ],
    ids=["policy", "benchmark", "model"],
)
def test_a_name_registered_twice_is_refused(registry, add):
    before = dict(registry)
    original = next(iter(registry.values()))
    with pytest.raises(ValueError, match="is registered twice"):
        add(original)
    assert dict(registry) == before and getattr(original, "name", None) != "tar"
