"""What users rely on when they trust a number: a killed and resumed run, a subset, a shard and a second writer
leave exactly the answers of one uninterrupted run; a bad question costs only itself."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from infinipotv.runs import claim
from tests import launch
from tests.helpers import lines, run_py

# The real SmolLM2 on small symbolic streams: 2 videos x 48 frames (576 vision tokens) under |M| = 144, chunks of
# 2 frames, so every video is compressed many times and half the questions are asked while it plays.
SYMBOLIC = ["benchmark.options.n_videos=2", "benchmark.options.frames=48"]
TINY = [
    "model=tiny_qwen2vl",
    "compress=tar_van_pool",
    "compress.budget=96",
    "eval.chunk_frames=2",
    "quant=fp16",
    "benchmark=symbolic",
    "benchmark.options.n_videos=3",
    "benchmark.options.frames=48",
]


def predictions(run_dir: Path) -> bytes:
    return (run_dir / "predictions.jsonl").read_bytes()


@pytest.fixture(scope="session")
def symbolic_data(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("symbolic_data")


@pytest.fixture(scope="session")
def full_run(tmp_path_factory, symbolic_data) -> Path:
    run_dir = tmp_path_factory.mktemp("full") / "run"
    out = run_py(*SYMBOLIC, f"benchmark.root={symbolic_data}", f"run_dir={run_dir}")
    assert out.returncode == 0, out.stderr
    return run_dir


def _kill_after(args: list[str], answers: int, extra_s: float, timeout: float = 300) -> None:
    """Start run.py, SIGKILL it ``extra_s`` after it has written ``answers`` answers (mid-stream or mid-line)."""
    run_dir = Path(next(a for a in args if a.startswith("run_dir=")).split("=", 1)[1])
    proc = launch.start(*args, logs=run_dir.with_name(run_dir.name + ".logs"))
    deadline = time.time() + timeout
    path = run_dir / "predictions.jsonl"
    while time.time() < deadline and proc.poll() is None:
        if path.exists() and path.read_bytes().count(b"\n") >= answers:
            break
        time.sleep(0.005)
    time.sleep(extra_s)
    proc.kill()
    proc.wait()


@pytest.mark.slow
@pytest.mark.smoke
def test_kill_and_resume_gives_the_uninterrupted_predictions_byte_for_byte(tmp_path, full_run, symbolic_data):
    expected = predictions(full_run)
    n = expected.count(b"\n")
    run_dir = tmp_path / "killed"
    args = [*SYMBOLIC, f"benchmark.root={symbolic_data}", f"run_dir={run_dir}"]
    rng = random.Random(16)
    for answers in sorted(rng.sample(range(1, n - 1), 2)):
        _kill_after(args, answers, extra_s=rng.uniform(0.0, 0.4))
    assert 0 < predictions(run_dir).count(b"\n") < n, "the kills must land before the run is done"
    resumed = run_py(*args)
    assert resumed.returncode == 0, resumed.stderr
    assert predictions(run_dir) == expected

    def trace(run: Path) -> list[tuple]:
        return sorted(
            (s["video_id"], s["step"], s["frames_seen"], s["video_tokens"], s["cache_bytes"])
            for s in lines(run / "memory.jsonl")
        )

    assert trace(run_dir) == trace(full_run)
    resumed_metrics, full_metrics = (
        {k: v for k, v in json.loads((run / "metrics.json").read_text()).items() if k not in ("time", "memory")}
        for run in (run_dir, full_run)
    )
    assert resumed_metrics == full_metrics


@pytest.mark.slow
@pytest.mark.smoke
def test_a_subset_answers_each_question_as_the_full_run(tmp_path, full_run, symbolic_data):
    full = {r["question_id"]: r for r in lines(full_run / "predictions.jsonl")}
    streaming = [q for q, r in full.items() if r["time_s"] is not None]
    by_video: dict[str, list[str]] = {}
    for q, r in full.items():
        by_video.setdefault(r["video_id"], []).append(q)
    # a streaming question late in one video alone, and the last question of another without the ones before it
    ids = [streaming[len(streaming) // 2], list(by_video.values())[1][-1]]
    subset = run_py(
        *SYMBOLIC, f"benchmark.root={symbolic_data}", f"benchmark.ids=[{','.join(ids)}]", f"run_dir={tmp_path / 'ids'}"
    )
    assert subset.returncode == 0, subset.stderr
    shard = run_py(*SYMBOLIC, f"benchmark.root={symbolic_data}", "benchmark.shard=1/2", f"run_dir={tmp_path / 'shard'}")
    assert shard.returncode == 0, shard.stderr
    for run in ("ids", "shard"):
        got = lines(tmp_path / run / "predictions.jsonl")
        assert got and all(r == full[r["question_id"]] for r in got), run


# Methods whose guarantees run on the tiny Qwen2-VL (seconds a run) rather than SmolLM2: their streaming does not
# depend on the model's RoPE (ReKV, StreamKV, StreamingTOM, WeaveTime and MuKV retrieve by query-key scores, StreamMem
# merges before the LLM); StreamingVLM's renumbering does (1-D RoPE only), so it keeps the real model.
ON_TINY = {"rekv", "streammem", "streamingtom", "streamkv", "weavetime", "mukv"}


@pytest.mark.slow
@pytest.mark.parametrize(
    "method", ["rekv", "streammem", "streamingvlm", "streamingtom", "streamkv", "weavetime", "mukv"]
)
def test_a_streaming_method_keeps_the_guarantees(tmp_path, symbolic_data, method):
    """The field's streaming methods (docs/retrieval.md, docs/peers.md): ReKV (a window, every frame offloaded,
    blocks retrieved per question), StreamMem (a proxy pass and prototypes at every chunk, frames merged before
    the LLM), StreamingVLM (recent frames, positions renumbered), StreamingTOM (CTR before the LLM, OQM, groups
    retrieved per question), WeaveTime (ReKV's memory, the window or retrieved blocks per question by its gate), MuKV
    (blocks side-prefilled at three granularities to the host, reranked per question): a
    killed and resumed run, an ``ids`` subset and a shard answer each question exactly as the uninterrupted run (one
    video, so it stays short: the shard holding it streams it whole, as a shard does)."""
    if method in ON_TINY:
        args = [*TINY, "benchmark.options.n_videos=1", f"compress={method}", f"benchmark.root={tmp_path / 'data'}"]
    else:
        args = [*SYMBOLIC, "benchmark.options.n_videos=1", f"compress={method}", f"benchmark.root={symbolic_data}"]
    full = run_py(*args, f"run_dir={tmp_path / 'full'}")
    assert full.returncode == 0, full.stderr
    expected = predictions(tmp_path / "full")
    n = expected.count(b"\n")
    _kill_after([*args, f"run_dir={tmp_path / 'killed'}"], n // 2, extra_s=0.1)
    assert 0 < predictions(tmp_path / "killed").count(b"\n") < n, "the kill must land before the run is done"
    resumed = run_py(*args, f"run_dir={tmp_path / 'killed'}")
    assert resumed.returncode == 0, resumed.stderr
    assert predictions(tmp_path / "killed") == expected
    records = {r["question_id"]: r for r in lines(tmp_path / "full" / "predictions.jsonl")}
    late = [q for q, r in records.items() if r["time_s"] is not None][-1]
    for name, extra in [("ids", f"benchmark.ids=[{late}]"), ("shard", "benchmark.shard=0/2")]:
        out = run_py(*args, extra, f"run_dir={tmp_path / name}")
        assert out.returncode == 0, out.stderr
        got = lines(tmp_path / name / "predictions.jsonl")
        assert got and all(r == records[r["question_id"]] for r in got), name


def test_two_writers_never_answer_a_question_twice(tmp_path):
    run_dir = tmp_path / "run"
    args = [*TINY, f"benchmark.root={tmp_path / 'data'}", f"run_dir={run_dir}"]
    with claim(run_dir, "held: {}"):  # a job holds the directory: another is refused at once, nothing written
        refused = run_py(*args)
        assert refused.returncode == 2 and "is being written by pid" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1 and not (run_dir / "predictions.jsonl").exists()
    (run_dir / "config.yaml").unlink()
    procs = [launch.start(*args, logs=tmp_path / f"logs{i}") for i in range(2)]
    codes = [proc.wait(timeout=300) for proc in procs]
    assert sorted(codes) in ([0, 0], [0, 2]), codes  # the second waits for nothing: refused, or resumes a done run
    ids = [r["question_id"] for r in lines(run_dir / "predictions.jsonl")]
    assert len(ids) == len(set(ids)) and len(ids) == json.loads((run_dir / "metrics.json").read_text())["n_expected"]


def test_resuming_with_another_configuration_is_refused_and_appends_nothing(tmp_path):
    run_dir = tmp_path / "run"
    args = [*TINY, f"benchmark.root={tmp_path / 'data'}", f"run_dir={run_dir}", "benchmark.limit=2"]
    assert run_py(*args).returncode == 0
    before, config = predictions(run_dir), (run_dir / "config.yaml").read_text()
    other = run_py(*args, "quant=int8", "quant.group_size=16")
    assert other.returncode == 2 and "holds a run of another configuration" in other.stderr
    assert "quant.bits: 16 -> 8" in other.stderr and len(other.stderr.strip().splitlines()) == 1
    assert predictions(run_dir) == before and (run_dir / "config.yaml").read_text() == config


def test_an_unencodable_question_costs_only_itself_and_is_retried_once_fixed(tmp_path):
    data, run_dir = tmp_path / "data", tmp_path / "run"
    assert run_py(*TINY, f"benchmark.root={data}", f"run_dir={tmp_path / 'gen'}", "benchmark.limit=1").returncode == 0
    annotations = next(data.glob("*/annotations.json"))
    rows = json.loads(annotations.read_text())
    good = rows[1]["question"]
    rows[1]["question"] = "Which code \ud800 appeared?"  # a lone surrogate: valid JSON, no tokenizer can encode it
    annotations.write_text(json.dumps(rows))
    args = [*TINY, f"benchmark.annotations={annotations}", f"benchmark.root={data}", f"run_dir={run_dir}"]
    out = run_py(*args)
    assert out.returncode == 0, out.stderr
    records = lines(run_dir / "predictions.jsonl")
    failed = [r for r in records if r["error"]]
    assert [r["question_id"] for r in failed] == [str(rows[1]["question_id"])]
    assert failed[0]["error"].startswith("TypeError") and len(records) == len(rows)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["n_errors"] == 1 and metrics["errors"] == {"TypeError": 1} and metrics["complete"]

    rows[1]["question"] = good
    annotations.write_text(json.dumps(rows))
    assert run_py(*args, "retry_errors=true").returncode == 0
    records = lines(run_dir / "predictions.jsonl")
    assert len(records) == len(rows) and not any(r["error"] for r in records)
    assert len({r["question_id"] for r in records}) == len(rows)


def test_default_run_directories_are_unique_and_hydra_writes_nowhere_else(tmp_path):
    """Parallel launches without run_dir get their own folders; with run_dir, Hydra's log and .hydra/ go there."""
    args = [*TINY, f"benchmark.root={tmp_path / 'data'}", "benchmark.limit=1", "benchmark.options.n_videos=1"]
    work = tmp_path / "work"
    work.mkdir()
    # launched together: the same second, the same data generated by both
    procs = [launch.start(*args, cwd=work, logs=tmp_path / f"logs{i}") for i in range(2)]
    assert [proc.wait(timeout=300) for proc in procs] == [0, 0]
    assert len(list((work / "results" / "runs").glob("*/*/predictions.jsonl"))) == 2

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert launch.run(*args, f"run_dir={tmp_path / 'mine'}", cwd=elsewhere).returncode == 0
    assert list(elsewhere.iterdir()) == [] and (tmp_path / "mine" / ".hydra" / "config.yaml").is_file()
