"""Subset selection: ids, seeded fraction over videos, first-N questions, disjoint and complete shards."""

from __future__ import annotations

from pathlib import Path

import pytest

from infinipotv.config import BenchmarkConfig, ConfigError
from infinipotv.data.base import Question, VideoSample
from infinipotv.data.subset import describe, select


def videos(n: int = 10, per: int = 3) -> list[VideoSample]:
    return [
        VideoSample(
            video_id=f"v{v}",
            path=Path(f"v{v}.mp4"),
            questions=[Question(qid=f"v{v}-{k}", prompt="p", gold="A", text="q") for k in range(per)],
        )
        for v in range(n)
    ]


def cfg(**kw) -> BenchmarkConfig:
    return BenchmarkConfig(name="x", **kw)


def qids(samples: list[VideoSample]) -> list[str]:
    return [q.qid for s in samples for q in s.questions]


def test_no_subset_keeps_everything_in_order() -> None:
    assert qids(select(videos(), cfg())) == qids(videos())
    assert describe(cfg())["is_subset"] is False


def test_limit_takes_the_first_questions() -> None:
    assert qids(select(videos(), cfg(limit=4))) == ["v0-0", "v0-1", "v0-2", "v1-0"]
    assert describe(cfg(limit=4)) == {
        "is_subset": True,
        "limit": 4,
        "fraction": None,
        "n_ids": None,
        "shard": None,
        "seed": 0,
    }


def test_fraction_is_seeded_over_whole_videos() -> None:
    picked = [s.video_id for s in select(videos(), cfg(fraction=0.3, seed=1))]
    assert len(picked) == 3 and picked == sorted(picked, key=lambda v: int(v[1:]))
    assert picked == [s.video_id for s in select(videos(), cfg(fraction=0.3, seed=1))]
    assert any(picked != [s.video_id for s in select(videos(), cfg(fraction=0.3, seed=s))] for s in range(2, 6))
    assert all(len(s.questions) == 3 for s in select(videos(), cfg(fraction=0.3, seed=1)))
    assert describe(cfg(fraction=1.0))["is_subset"] is False


def test_ids_select_questions_and_unknown_ids_fail() -> None:
    assert qids(select(videos(), cfg(ids=["v3-1", "v0-2"]))) == ["v0-2", "v3-1"]
    assert describe(cfg(ids=["v3-1"]))["n_ids"] == 1
    with pytest.raises(ConfigError, match="benchmark.ids.*nope"):
        select(videos(), cfg(ids=["v3-1", "nope"]))


@pytest.mark.parametrize("extra", [{}, {"limit": 11}, {"fraction": 0.5}])
def test_shards_are_disjoint_and_complete(extra: dict) -> None:
    whole = qids(select(videos(), cfg(**extra)))
    parts = [qids(select(videos(), cfg(shard=f"{i}/3", **extra))) for i in range(3)]
    assert sorted(q for p in parts for q in p) == sorted(whole)
    assert sum(map(len, parts)) == len(whole) and all(parts)
    assert describe(cfg(shard="1/3"))["is_subset"] is True and describe(cfg(shard="0/1"))["is_subset"] is False


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"shard": "3/3"}, "0 <= i < n"),
        ({"shard": "half"}, "'i/n'"),
        ({"fraction": 0.0}, "benchmark.fraction"),
        ({"limit": 0}, "benchmark.limit"),
    ],
)
def test_bad_subset_options_name_the_fix(bad: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        select(videos(), cfg(**bad))
