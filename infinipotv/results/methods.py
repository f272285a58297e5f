"""How every figure names and draws a method: its name in the papers, one colour per method family (the same in
every figure, so a reader learns it once), and within a family a marker of its own.

Families: InfiniPot-V and its ablations; the retrieval methods (a question reads blocks fetched back from the host);
the eviction peers (their own rule of what to drop or merge); the sliding window; the full cache; the other
token-selection baselines. A policy registered later and not named here is drawn in grey under its ``compress=``
name, with a marker fixed by that name, until it is added to its family.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "h")


@dataclass(frozen=True)
class Family:
    """A family of methods: its colour, and its members as (``compress=`` name, name in the papers), in legend order."""

    name: str
    colour: str
    members: tuple[tuple[str, str], ...]


# Okabe-Ito colours (told apart with any common colour-vision deficiency); black for the full cache.
FAMILIES = (
    Family(
        "InfiniPot-V",
        "#0072B2",
        (
            ("tar_van_pool", "InfiniPot-V"),
            ("tar_van", "TaR + VaN"),
            ("van_pool", "VaN + Pool"),
            ("van", "VaN"),
            ("tar", "TaR"),
            ("tar_frame", "TaR (frame-level)"),
            ("tar_reversed", "TaR (reversed)"),
            ("van_reversed", "VaN (reversed)"),
        ),
    ),
    Family(
        "retrieval",
        "#D55E00",
        (
            ("rekv", "ReKV"),
            ("livevlm", "LiveVLM"),
            ("streamkv", "StreamKV"),
            ("weavetime", "WeaveTime"),
            ("mukv", "MuKV"),
        ),
    ),
    Family(
        "eviction",
        "#009E73",
        (("streamingvlm", "StreamingVLM"), ("streammem", "StreamMem"), ("streamingtom", "StreamingTOM")),
    ),
    Family("sliding window", "#CC79A7", (("swa", "Sliding window"),)),
    Family("full cache", "#000000", (("full", "Full KV"),)),
    Family(
        "baselines",
        "#E69F00",
        (
            ("uniform_frames", "Uniform Select"),
            ("uniform_tokens", "Uniform tokens"),
            ("random", "Random"),
            ("knorm", "K-norm"),
        ),
    ),
)
OTHER = "#7F7F7F"


@dataclass(frozen=True)
class MethodStyle:
    """How one method is drawn: ``order`` sorts a legend by family, then by the family's own order."""

    name: str
    family: str
    colour: str
    marker: str
    order: tuple[int, int]


def method_style(policy: str) -> MethodStyle:
    """The name, colour and marker of the method ``compress=policy`` (:data:`FAMILIES`)."""
    for f, family in enumerate(FAMILIES):
        for m, (member, name) in enumerate(family.members):
            if member == policy:
                return MethodStyle(name, family.name, family.colour, MARKERS[m % len(MARKERS)], (f, m))
    marker = MARKERS[zlib.crc32(policy.encode()) % len(MARKERS)]
    return MethodStyle(policy, "other", OTHER, marker, (len(FAMILIES), 0))
