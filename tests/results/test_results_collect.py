"""Collecting run directories: the tidy frame, shard merging (= the unsharded run), duplicates, partial runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from infinipotv.results import DuplicateQuestionError, collect, load_runs
from infinipotv.results.collect import load_run
from infinipotv.results.example import write_example_sweep
from infinipotv.results.scoring import flatten_scores, score_records

UNSHARDED = "int4_vs_fp16/tar_van_pool_fp16_6000_mlvu"


def write_shards(source: Path, dest: Path, n: int, keep: list[int] | None = None, overlap: bool = False) -> None:
    """Split a run dir into ``n`` shard dirs (stride over videos, as the job shards), each scored on its own."""
    config = OmegaConf.to_container(OmegaConf.load(source / "config.yaml"))
    records = [json.loads(line) for line in (source / "predictions.jsonl").read_text().splitlines()]
    videos = list(dict.fromkeys(r["video_id"] for r in records))
    for i in keep if keep is not None else range(n):
        mine = set(videos[i::n])
        part = [r for r in records if r["video_id"] in mine] + (records[:1] if overlap and i == 1 else [])
        shard = dest / f"shard{i}"
        shard.mkdir(parents=True)
        config["benchmark"]["shard"] = f"{i}/{n}"
        OmegaConf.save(OmegaConf.create(config), shard / "config.yaml")
        (shard / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
        metrics = json.loads((source / "metrics.json").read_text())
        metrics.update(scores=score_records(config["benchmark"], part), n_questions=len(part), n_expected=len(part))
        ttft = {r["question_id"]: 0.5 + i for r in part}  # as job.py writes them: seconds per question, and a summary
        metrics["time"] = {"seconds": 10.0, "ttft_s": {"mean": 0.5 + i, "n": len(ttft)}, "ttft_s_by_question": ttft}
        metrics["time"]["encode_seconds"] = 2.0 * (i + 1)  # shard i streams 96 frames a video at 48 / (i + 1) fps
        metrics["memory"] = {**metrics.get("memory", {}), "peak_cache_bytes": 1000 * (i + 1), "frames": 96}
        (shard / "metrics.json").write_text(json.dumps(metrics))
        shutil.copy(source / "memory.jsonl", shard / "memory.jsonl")


def test_tidy_frame_has_a_row_per_run_and_score(sweep_dir: Path):
    frame = collect(sweep_dir)
    row = frame[(frame.run == "int4_vs_fp16/tar_van_pool_int4_6000_videomme") & (frame.score == "S")].iloc[0]
    assert row.value == pytest.approx(74.2) and row.n == 500
    described = (row.model, row.policy, row.kv, row.budget_tokens, row.storage)
    assert described == ("Qwen2-VL-7B-Instruct", "tar_van_pool", "int4", 6000, "int4")
    assert row.budget_bytes == 6000 * 164 * 28 * 4 and row.complete and not row.subset and row.git_sha == "example"
    assert row["compress.alpha"] == 0.5 and frame.run.nunique() == 8
    assert not frame.score.str.startswith("counts").any()


def test_shard_merge_equals_the_unsharded_run(sweep_dir: Path, tmp_path: Path):
    write_shards(sweep_dir / UNSHARDED, tmp_path, 3)
    (merged,) = load_runs(tmp_path)
    (whole,) = [r for r in load_runs(sweep_dir) if r.id == UNSHARDED]
    assert merged.complete and not merged.subset and len(merged.dirs) == 3
    assert flatten_scores(merged.scores) == pytest.approx(flatten_scores(whole.scores))
    assert merged.scores["missing"] == whole.scores["missing"] == []
    assert sorted(r["question_id"] for r in merged.predictions) == sorted(r["question_id"] for r in whole.predictions)
    assert merged.question_counts == whole.question_counts
    time = merged.metrics["time"]
    assert time["seconds"] == 30.0 and len(time["ttft_s_by_question"]) == time["ttft_s"]["n"] == len(whole.predictions)
    assert time["ttft_s"]["mean"] == pytest.approx(sum(time["ttft_s_by_question"].values()) / time["ttft_s"]["n"])
    # counts add up, peaks take the largest shard's, and the encode rate comes from the summed counts (never a sum
    # or a mean of the shards' rates): 3 x 96 frames over 2 + 4 + 6 seconds
    assert merged.metrics["memory"]["frames"] == 3 * 96 and merged.metrics["memory"]["peak_cache_bytes"] == 3000
    assert time["encode_seconds"] == 12.0 and time["encode_fps"] == pytest.approx(288 / 12)
    assert [r.metrics["time"]["encode_fps"] for r in map(load_run, sorted(tmp_path.glob("shard*")))] == [48, 24, 16]


def test_duplicate_question_across_shards_is_refused(sweep_dir: Path, tmp_path: Path):
    write_shards(sweep_dir / UNSHARDED, tmp_path, 3, overlap=True)
    with pytest.raises(DuplicateQuestionError, match=r"question_id 'mlvu-00000' of mlvu appears twice.*shard0.*shard1"):
        load_runs(tmp_path)


def test_missing_shard_and_unfinished_runs_are_partial(sweep_dir: Path, tmp_path: Path):
    write_shards(sweep_dir / UNSHARDED, tmp_path / "sharded", 3, keep=[0, 2])
    write_example_sweep(tmp_path / "other")
    unfinished = tmp_path / "other" / UNSHARDED
    (unfinished / "metrics.json").unlink()
    with (unfinished / "predictions.jsonl").open("a") as f:
        f.write('{"benchmark": "mlvu", "question_id"')  # torn by a kill
    runs = {r.id: r for r in load_runs(tmp_path)}
    sharded = next(r for k, r in runs.items() if k.startswith("sharded/"))
    assert not sharded.complete and "missing shard(s) 1/3" in sharded.problems
    rescored = runs[f"other/{UNSHARDED}"]
    assert not rescored.complete and rescored.scores["avg"] == pytest.approx(65.76, abs=5e-3)
    assert any("metrics.json missing" in p for p in rescored.problems)
    assert any("unreadable" in p for p in rescored.problems)
