"""Loading each benchmark from fixture files in its released format: protocol prompts, gold letters, categories,
videos resolved as the spec says, and a missing video or a malformed row reported per sample."""

from __future__ import annotations

from pathlib import Path

import av
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from infinipotv.config import BenchmarkConfig, ConfigError, register_configs
from infinipotv.data.loading import DataError, benchmark_class, read_records
from infinipotv.data.subset import describe, select
from infinipotv.data.toy import BUILDERS
from infinipotv.data.toy_sets import tiny_video
from infinipotv.data.videomme import VideoMME

CONF = Path(__file__).resolve().parents[2] / "conf" / "benchmark"
ANSWER = "Answer with the option's letter from the given choices directly."
SB_PROMPT = (
    "You are an advanced video question-answering AI assistant. You have been provided with some frames from the "
    "video and a multiple-choice question related to the video. Your task is to carefully analyze the video and "
    "provide the best answer to question, choosing from the four options provided. Respond with only the letter "
    "(A, B, C, or D) of the correct option.\n\nQuestion: What is visible at 00:00:01 (q1)?\n\nOptions:\n"
    "A. thing 0.\nB. thing 1.\nC. thing 2.\nD. thing 3.\n\nThe best option is:"
)

# name -> (video ids in order, the last being the malformed row's; the first question: qid, prompt, gold, categories)
EXPECTED = {
    "videomme": (
        ["vmmeA", "vmmeB", "vmmeB"],
        "001-1",
        "Select the best answer to the following multiple-choice question based on the video and the "
        "subtitles. Respond with only the letter (A, B, C, or D) of the correct option.\nQuestion 001-1?\n"
        "A. Option 1 of 001-1.\nB. Option 2 of 001-1.\nC. Option 3 of 001-1.\nD. Option 4 of 001-1.\n\n" + ANSWER,
        "C",
        {"duration": "short", "domain": "Knowledge", "sub_category": "Astronomy", "task_type": "Counting Problem"},
    ),
    "mlvu": (
        ["plot_1.mp4", "needle_1.mp4", "count_1.mp4", "count_9.mp4", "plot_1.mp4"],
        "plotQA_0",
        "What colour is the main character's coat?\n(A) Yellow\n(B) Red\n(C) Green\n(D) Blue\n"
        "Only give the best option.\nBest option: (",
        "B",
        {"task_type": "plotQA"},
    ),
    "egoschema": (
        ["0a1b2c3d-ego-a", "4e5f6a7b-ego-b", "0a1b2c3d-ego-a"],
        "0a1b2c3d-ego-a",
        "What does c do overall in 0a1b2c3d-ego-a?\n"
        + "".join(f"{x}. c does thing {i} in 0a1b2c3d-ego-a.\n" for i, x in enumerate("ABCDE"))
        + ANSWER,
        "C",
        {},
    ),
    "longvideobench": (
        ["lvbA", "lvbB", "lvbB"],
        "lvbA_0",
        "In lvbA_0, what happens?\n"
        + "".join(f"{x}. event {i} of lvbA_0\n" for i, x in enumerate("ABCD"))
        + ANSWER
        + "\n",
        "B",
        {"duration_group": "15", "question_category": "E2O", "topic_category": "NP-News-Programs"},
    ),
    "streamingbench": (
        ["sample_1_real", "sample_2_real", "sample_2_real"],
        "sample_1_real_2",
        SB_PROMPT,
        "A",
        {"task_type": "Counting", "group": "Real-Time Visual Understanding"},
    ),
}
FORMATS = [
    ("videomme", "json"),
    ("videomme", "jsonl"),
    ("videomme", "parquet"),
    ("mlvu", "json"),
    ("mlvu", "parquet"),
    ("mlvu", "official"),
    ("egoschema", "json"),
    ("egoschema", "parquet"),
    ("egoschema", "official"),
    ("longvideobench", None),
    ("streamingbench", "json"),
    ("streamingbench", "csv"),
]


def build(name: str, fmt: str | None, root: Path) -> BenchmarkConfig:
    if fmt == "parquet":
        pytest.importorskip("pyarrow", reason="writing/reading the released parquet needs pyarrow")
    return BUILDERS[name](root) if fmt is None else BUILDERS[name](root, fmt)


@pytest.mark.parametrize("name, fmt", FORMATS)
def test_fixture_loads_with_protocol_prompts(name: str, fmt: str | None, tmp_path: Path) -> None:
    cfg = build(name, fmt, tmp_path)
    bench = benchmark_class(name)(cfg)
    samples = list(bench.samples())
    video_ids, qid, prompt, gold, categories = EXPECTED[name]
    if fmt == "csv":  # the CSV names videos by category and sample, and carries its own question ids
        video_ids = [
            "Real-Time Visual Understanding_sample_1",
            "Real-Time Visual Understanding_sample_2",
            "Real-Time Visual Understanding_sample_2",
        ]
        qid = "Real-Time Visual Understanding_sample_1_2"
    if fmt == "official" and name == "mlvu":  # the answer that is not a candidate is the bad row
        video_ids = ["plot_1.mp4", "needle_1.mp4", "needle_1.mp4", "count_1.mp4", "count_9.mp4"]
    if fmt == "official" and name == "egoschema":  # the answer for an unknown q_uid is the bad row
        video_ids = video_ids[:-1] + ["ffffffff-unknown"]
    assert [s.video_id for s in samples] == video_ids
    first = samples[0].questions[0]
    assert (first.qid, first.prompt, first.gold, first.categories) == (qid, prompt, gold, categories)

    present = samples[0]
    missing = [s for s in samples if s.error is None and not s.path.exists()]
    (malformed,) = [s for s in samples if s.error is not None]
    assert present.path.is_file() and present.error is None
    assert len(missing) == 1 and missing[0].questions
    assert "row" in malformed.error
    assert Path(cfg.annotations).name in malformed.error or name == "mlvu"  # MLVU names the per-task file
    assert [q.prompt for q in malformed.questions] == [""]

    questions = [q for s in samples for q in s.questions]
    assert len({q.qid for q in questions}) == len(questions)
    for q in [q for s in samples if s.error is None for q in s.questions]:
        assert q.gold in q.options and q.max_new_tokens == (32 if name == "longvideobench" else 16)
        assert (q.time_s is not None) == bench.streaming


def test_streaming_questions_are_in_time_order(tmp_path: Path) -> None:
    bench = benchmark_class("streamingbench")(BUILDERS["streamingbench"](tmp_path))
    first = next(bench.samples())
    assert [q.time_s for q in first.questions] == [1.0, 2.0, 3.0]
    assert [q.categories["task_type"] for q in first.questions] == ["Counting", "Object Perception", "Causal Reasoning"]


@pytest.mark.parametrize(
    "name, problem",
    [
        ("videomme", "4 options"),
        ("mlvu", "task_type 'summary'"),
        ("egoschema", "index 0-4"),
        ("longvideobench", "correct_choice 4"),
        ("streamingbench", "time stamp '00:12450'"),
    ],
)
def test_malformed_row_names_the_problem(name: str, problem: str, tmp_path: Path) -> None:
    samples = list(benchmark_class(name)(BUILDERS[name](tmp_path)).samples())
    assert [problem in s.error for s in samples if s.error] == [True]


def test_missing_field_is_named(tmp_path: Path) -> None:
    cfg = BUILDERS["egoschema"](tmp_path, fmt="json")
    path = Path(cfg.annotations)
    path.write_text(path.read_text().replace('"answer": "0"', '"solution": "0"'))
    error = [s.error for s in benchmark_class("egoschema")(cfg).samples() if s.error][0]
    assert "row 1 (4e5f6a7b-ego-b): missing field 'answer'" in error


def test_constructor_reads_no_files_and_samples_say_where_annotations_go(tmp_path: Path) -> None:
    bench = VideoMME(BenchmarkConfig(name="videomme", root=str(tmp_path)))
    assert bench.annotations == tmp_path / "videomme" / "test-00000-of-00001.parquet"
    (tmp_path / "data").mkdir()
    with pytest.raises(DataError, match="benchmark.annotations"):
        list(bench.samples())


def test_the_subset_applies_to_a_loaded_benchmark(tmp_path: Path) -> None:
    cfg = BUILDERS["videomme"](tmp_path)
    cfg.limit = 2
    assert [q.qid for s in select(VideoMME(cfg).samples(), cfg) for q in s.questions] == ["001-1", "001-2"]
    assert describe(cfg)["is_subset"] is True


def test_streamingbench_rejects_unknown_part() -> None:
    with pytest.raises(ConfigError, match="benchmark.part='offline'.*real_time"):
        benchmark_class("streamingbench")(BenchmarkConfig(name="streamingbench", part="offline"))


def test_parquet_without_pyarrow_says_how_to_fix(tmp_path: Path) -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("pyarrow is installed: parquet files are read")
    path = tmp_path / "Subset" / "test-00000-of-00001.parquet"
    path.parent.mkdir()
    path.write_bytes(b"PAR1")
    with pytest.raises(DataError, match="needs pyarrow.*export it to .json"):
        read_records(path)


def test_fixture_video_decodes(tmp_path: Path) -> None:
    path = tiny_video(tmp_path / "v.mp4", n_frames=8)
    with av.open(str(path)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) == 8 and frames[0].shape == (64, 64, 3)


@pytest.mark.parametrize("name", list(BUILDERS))
def test_yaml_composes_to_a_buildable_benchmark(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFINIPOTV_DATA", "/datasets")
    register_configs()
    with initialize_config_dir(config_dir=str(CONF.parent), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"benchmark={name}"])
    typed = OmegaConf.to_object(cfg.benchmark)
    assert isinstance(typed, BenchmarkConfig) and typed.name == name and typed.root == f"/datasets/{name}"
    assert benchmark_class(name)(typed).annotations.is_relative_to(f"/datasets/{name}")
