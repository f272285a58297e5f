"""The policy contract over the whole registry, the registry/build API, validation errors and the config choices."""

from __future__ import annotations

from dataclasses import fields
from enum import Enum

import pytest
import torch
from omegaconf import OmegaConf

from infinipotv.compress import (
    POLICIES,
    POOLINGS,
    PRESETS,
    build,
    compressed_size,
    pinned_params,
    policy_params,
    resolve_params,
)

N_LAYERS = 6  # not a multiple of 4: every layer_quartile group boundary is exercised
# Rules that choose from what the stored tensors cannot tell: StreamMem's proxy queries, StreamingTOM's cut before
# the LLM. Their streaming methods call them (tests/stream/test_peer_methods.py, the transcription tests).
NOT_ALONE = {"streammem", "streamingtom", "mukv"}

CASES = [(name, {}) for name in sorted(POLICIES) if name not in NOT_ALONE]
CASES += [("tar_van_pool", {"pooling": pooling}) for pooling in POOLINGS]
CASES += [("tar_van_pool", {"frame_view": "grid_aware"})]
CASES += [("tar_van_pool", {"pooling": "cv", "frame_view": "grid_aware"})]
CASES += [(name, {"frame_view": "grid_aware"}) for name in ("tar", "tar_frame", "uniform_frames", "van_pool")]


@pytest.mark.parametrize("name, kwargs", CASES, ids=[f"{n}-{'-'.join(map(str, k.values()))}" for n, k in CASES])
@pytest.mark.parametrize("compressed", [False, True], ids=["fresh", "compressed"])
def test_policy_contract(region, name, kwargs, compressed):
    keys, values, layout = region(old_frames=12, keep_old=30) if compressed else region()
    heads, n_tokens = keys.shape[:2]
    policy = build(name, **kwargs)
    n_keep = n_tokens if not policy.evicts else 40
    for layer in range(N_LAYERS):
        kept = policy(keys, values, layout, n_keep, layer, N_LAYERS)
        assert kept.dtype == torch.long and kept.shape == (heads, n_keep)
        assert (kept[:, 1:] > kept[:, :-1]).all(), "sorted ascending and unique per head"
        assert kept.min() >= 0 and kept.max() < n_tokens
        assert torch.equal(kept, policy(keys.clone(), values.clone(), layout, n_keep, layer, N_LAYERS))
    low_keys, low_values = keys.bfloat16(), values.bfloat16()
    low_precision = policy(low_keys, low_values, layout, n_keep, 0, N_LAYERS)
    assert torch.equal(low_precision, policy(low_keys.float(), low_values.float(), layout, n_keep, 0, N_LAYERS))
    if not compressed and not policy.head_shared:
        assert any(not torch.equal(kept[0], kept[h]) for h in range(1, heads)), "heads choose their own tokens"


def test_full_never_evicts(region):
    keys, values, layout = region()
    full = build("full")
    assert not full.evicts and all(POLICIES[n].evicts for n in POLICIES if n != "full")
    with pytest.raises(ValueError, match="never evicts"):
        full(keys, values, layout, keys.shape[1] - 1, 0, 1)


def test_build_errors_name_the_fix():
    with pytest.raises(ValueError, match="unknown compression policy 'nope'.*tar_van_pool"):
        build("nope")
    with pytest.raises(
        TypeError, match=r"no parameter alpha \(it pins alpha=1.0\); its parameters: r_ratio, frame_view"
    ):
        build("tar", alpha=0.3)
    with pytest.raises(TypeError, match="its parameters: none"):
        build("van", pooling="cv")
    with pytest.raises(ValueError, match="preset='x'"):
        build("tar", preset="x")
    with pytest.raises(ValueError, match="unknown compression policy"):
        policy_params("nope")


@pytest.mark.parametrize(
    "name, kwargs, message",
    [
        (
            "tar_van_pool",
            {"pooling": "max"},
            "pooling='max' is unknown; use one of none, layer_quartile, layer_quartile_axes, cv",
        ),
        ("tar_van_pool", {"frame_view": "grid"}, "frame_view='grid' is unknown"),
        ("tar_van_pool", {"alpha": 1.5}, r"alpha=1.5 must be in \[0.0, 1.0\]"),
        ("tar_van", {"alpha": -0.1}, "alpha=-0.1 must be in"),
        ("tar", {"r_ratio": 0.0}, r"r_ratio=0.0 must be in \(0.0, 1.0\]"),
        ("tar_frame", {"r_ratio": 2.0}, "r_ratio=2.0 must be in"),
        ("van_pool", {"cv_thresholds": (0.3, 0.6, 1.0)}, "tau1 > tau2 > tau3"),
        ("uniform_frames", {"frame_view": "x"}, "frame_view='x' is unknown"),
        ("swa", {"n_sink": -1}, "n_sink=-1 must be >= 0"),
    ],
)
def test_invalid_params(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        build(name, **kwargs)


@pytest.mark.parametrize("name", ["tar_van_pool", "tar_van", "tar", "tar_reversed", "tar_frame"])
def test_recent_frames_must_fit_tar_share(region, name):
    keys, values, layout = region(frames=8)  # f = 8, p = 12
    kwargs = {"alpha": 0.5} if "alpha" in policy_params(name) else {}
    policy = build(name, r_ratio=0.5, **kwargs)  # r = 4 recent frames = 48 tokens
    n_keep = 40 if kwargs else 47  # n_tar = 20 (alpha 0.5) or 47 (TaR alone): both < 48
    with pytest.raises(ValueError, match=r"leaves n_tar=\d+ tokens for TaR but r_ratio=0.5 keeps r=4 recent frames"):
        policy.validate(n_keep, 12, 96)
    with pytest.raises(ValueError, match="raise alpha .* or lower r_ratio"):
        policy(keys, values, layout, n_keep, 0, 4)
    build(name, r_ratio=0.125, **kwargs).validate(n_keep, 12, 96)  # r = 1: 12 tokens fit


def test_validate_generic_and_alpha_zero_skips_tar():
    build("van").validate(40, 12, 96)
    build("tar_van", alpha=0.0, r_ratio=1.0).validate(40, 12, 96)  # no TaR share, nothing to fit
    with pytest.raises(ValueError, match=r"n_keep=97 must be in \[1, 96\]"):
        build("knorm").validate(97, 12, 96)
    with pytest.raises(ValueError, match="n_sink=40 leaves no room"):
        build("swa", n_sink=40).validate(40, 12, 96)


def test_call_checks_inputs(region):
    keys, values, layout = region()
    policy = build("van")
    with pytest.raises(ValueError, match="n_keep=97 must be in"):
        policy(keys, values, layout, 97, 0, 4)
    with pytest.raises(ValueError, match="layer=4 must be in"):
        policy(keys, values, layout, 10, 4, 4)
    with pytest.raises(ValueError, match="layout.token_ids"):
        policy(keys[:, :-1], values[:, :-1], layout, 10, 0, 4)
    with pytest.raises(ValueError, match="same H and T"):
        policy(keys, values[:, :-1], layout, 10, 0, 4)


def test_compressed_size():
    assert compressed_size(6000, 0.75) == 4500
    for c_ratio in (0.0, 1.0, 1.5, -0.2):
        with pytest.raises(ValueError, match=f"c_ratio={c_ratio} must be in"):
            compressed_size(6000, c_ratio)
    with pytest.raises(ValueError, match="budget=1"):
        compressed_size(1, 0.5)


def test_presets_and_explicit_kwargs_win():
    assert PRESETS["paper"] == {}
    public = build("tar_van_pool", preset="public_code")
    assert (public.r_ratio, public.pooling, public.alpha) == (0.25, "none", 0.5)
    assert build("tar_van_pool", preset="public_code", pooling="cv").pooling == "cv"
    assert build("tar_van_pool", preset="public_code", r_ratio=0.2).r_ratio == 0.2
    assert build("tar_van_pool", preset="public_code", r_ratio=None).r_ratio == 0.25  # None = not given
    assert build("van", preset="public_code") == build("van")  # preset values it does not declare are skipped
    assert build("tar").alpha == 1.0 and build("van").alpha == 0.0 and build("van_reversed").reverse
    assert resolve_params("tar", "public_code") == {"r_ratio": 0.25, "frame_view": "pseudo_frames"}
    assert pinned_params("tar")["alpha"] == 1.0 and "alpha" not in policy_params("tar")


def test_config_values_are_stored_plain():
    class Pooling(str, Enum):
        cv = "cv"

    policy = build("tar_van_pool", pooling=Pooling.cv, cv_thresholds=OmegaConf.create([2.0, 1.0, 0.5]))
    assert type(policy.pooling) is str and policy.cv_thresholds == (2.0, 1.0, 0.5)


def test_every_policy_is_a_config_choice_with_exactly_its_params():
    """``compress=NAME`` is generated from the registry: the shared knobs plus the policy's own, nothing else."""
    from infinipotv.config import CompressConfig, policy_config

    shared = {f.name for f in fields(CompressConfig)}
    for name in POLICIES:
        schema = policy_config(name)
        node = OmegaConf.structured(schema)
        assert set(node) == shared | set(policy_params(name)), name
        assert node.name == name and node.budget == (None if name == "full" else 6000)
        given = {k: v for k, v in OmegaConf.to_container(node).items() if k not in shared}
        assert build(name, **given) == build(name), f"compress={name} must restate the policy's defaults"


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        (lambda h, n, t: torch.arange(n).expand(h, n) + (t - n + 1), r"returned indices outside \[0, "),
        (lambda h, n, t: torch.zeros(h, n, dtype=torch.long), "returned a token twice"),
        (lambda h, n, t: torch.arange(n - 1).expand(h, n - 1), "returned indices of shape"),
    ],
)
def test_a_policy_returning_bad_indices_is_caught(region, monkeypatch, returned, message):
    """The checks run on the device (no read-back inside a pass); on the CPU they raise at once."""
    keys, values, layout = region()
    policy = build("van")
    monkeypatch.setattr(type(policy), "keep", lambda self, k, v, lay, n, *_: returned(k.shape[0], n, k.shape[1]))
    with pytest.raises(RuntimeError, match=message):
        policy(keys, values, layout, 10, 0, 4)


SYNCS = ("__bool__", "item", "tolist", "cpu", "numpy", "__int__", "__float__")


@pytest.mark.parametrize("name", ["tar_van_pool", "tar_van", "van", "knorm", "uniform_tokens"])
def test_a_pass_reads_nothing_back_from_the_device(region, monkeypatch, name):
    """No host synchronisation inside a policy call in the paper's setting (pseudo frames, layer-quartile pooling):
    every tensor-to-host read raises here, so on a GPU the layers of a pass queue their kernels without waiting.
    The same indices as with the reads allowed."""
    keys, values, layout = region(old_frames=12, keep_old=30)
    policy = build(name)
    want = policy(keys, values, layout, 40, 1, 4)

    def refuse(self, *args, **kwargs):
        raise AssertionError("a host read inside a compression pass")

    for attr in SYNCS:
        monkeypatch.setattr(torch.Tensor, attr, refuse)
    got = policy(keys, values, layout, 40, 1, 4)
    monkeypatch.undo()
    assert torch.equal(got, want)
    if name == "tar_van_pool":  # the check sees a read where there is one: cv pooling reads its statistic back
        for attr in SYNCS:
            monkeypatch.setattr(torch.Tensor, attr, refuse)
        with pytest.raises(AssertionError, match="host read"):
            build(name, pooling="cv")(keys, values, layout, 40, 1, 4)
