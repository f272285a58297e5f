"""The released files' shapes and quirks (toy sets written in those shapes): every question loads with a stable id
or becomes one error record with its reason; the official MLVU / EgoSchema releases give the Hub's questions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infinipotv.config import BenchmarkConfig, ConfigError
from infinipotv.data.loading import DataError, RowError, benchmark_class, hms_seconds
from infinipotv.data.streamingbench import PROMPT, SQA_CONTEXT
from infinipotv.data.streamingbench_files import GROUPS, flatten_csv, repair_options
from infinipotv.data.toy import BUILDERS
from infinipotv.data.toy_sets import write_rows
from infinipotv.data.toy_streaming import proactive_entries


def load(cfg: BenchmarkConfig) -> list:
    return list(benchmark_class(cfg.name)(cfg).samples())


def questions(samples: list) -> dict:
    return {q.qid: q for s in samples if s.error is None for q in s.questions}


def test_one_video_from_several_entries_is_one_pass_in_time_order(tmp_path: Path) -> None:
    samples = load(BUILDERS["streamingbench"](tmp_path))
    first = samples[0]
    assert first.video_id == "sample_1_real" and len(first.questions) == 3  # two entries, another video between
    assert [q.time_s for q in first.questions] == [1.0, 2.0, 3.0]  # "0:00:01", "00:00:02", "00:03"
    assert [q.qid for q in first.questions] == ["sample_1_real_2", "sample_1_real_1", "sample_1_real_3"]
    assert samples[-1].questions[0].categories == {"task_type": "Counting", "group": "Real-Time Visual Understanding"}
    bare = first.questions[2]  # its options are bare text: labelled A-D in the prompt, as upstream does
    assert bare.options == {x: f"thing {i}." for i, x in enumerate("ABCD")} and "\nA. thing 0.\n" in bare.prompt


def test_ids_are_stable_and_unique(tmp_path: Path) -> None:
    a = [q.qid for s in load(BUILDERS["streamingbench"](tmp_path / "a")) for q in s.questions]
    b = [q.qid for s in load(BUILDERS["streamingbench"](tmp_path / "b")) for q in s.questions]
    assert a == b and len(set(a)) == len(a)


def test_omni_groups_and_a_split_option_list(tmp_path: Path) -> None:
    samples = load(BUILDERS["streamingbench"](tmp_path, part="omni"))
    qs = questions(samples)
    groups = {q.categories["task_type"]: q.categories["group"] for q in qs.values()}
    assert groups == {
        "Scene Understanding": "Omni-Source Understanding",
        "Misleading Context Understanding": "Contextual Understanding",
        "Emotion Recognition": "Omni-Source Understanding",
    }
    split = next(q for q in qs.values() if q.categories["task_type"] == "Scene Understanding")
    assert split.options == {
        "A": "A man waves and the narrator says, 'Have you packed yet?'.",
        "B": "A dog runs.",
        "C": "A car stops.",
        "D": "A bell rings.",
    }
    assert [s.error for s in samples if s.error] == [
        "questions_omni.json row 3 (sample_1_Scene_Understanding_4): task_type 'Audio Guessing' is not one of "
        "StreamingBench's 18 tasks"
    ]


def test_repair_keeps_plain_lists_and_drops_what_upstream_never_shows() -> None:
    assert repair_options(["x", "y", "z", "w"]) == ["x", "y", "z", "w"]
    assert repair_options(["A. a", "B. b", "C. c", "D. d", "E. .", "F. Translated"]) == ["A. a", "B. b", "C. c", "D. d"]
    assert repair_options(["A. a", "", "B. b", "C. c", "", "D. d"]) == ["A. a", "B. b", "C. c", "D. d"]


def test_sqa_prompts_hold_the_earlier_questions_with_gold_answers(tmp_path: Path) -> None:
    samples = load(BUILDERS["streamingbench"](tmp_path, part="contextual"))
    video = samples[0]
    assert [q.categories["group"] for q in video.questions] == ["Contextual Understanding"] * 3
    first, second, third = (q.prompt for q in video.questions)
    assert SQA_CONTEXT not in first and "Here is the question." in first
    assert (
        "At timestamp 00:00:01, the following question and answer occurred: Question: What is visible at "
        "00:00:01 (q1)?; Options: A. thing 0., B. thing 1., C. thing 2., D. thing 3.; Answer: A; "
    ) in second
    assert "Answer: A; " in third and "Answer: B; " in third and "Answer: C" not in third
    assert "options must be a list" in samples[-1].error


def test_proactive_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="^benchmark.part=proactive: .*no options or answers"):
        benchmark_class("streamingbench")(BenchmarkConfig(name="streamingbench", part="proactive"))
    path = write_rows(proactive_entries(), tmp_path / "questions_proactive.json")
    cfg = BenchmarkConfig(name="streamingbench", root=str(tmp_path), annotations=str(path))
    with pytest.raises(DataError, match="questions_proactive.json: benchmark.part=proactive"):
        load(cfg)


def test_csv_categories_never_merge_and_task_names_match_the_json(tmp_path: Path) -> None:
    real = load(BUILDERS["streamingbench"](tmp_path / "r", fmt="csv"))
    omni = load(BUILDERS["streamingbench"](tmp_path / "o", fmt="csv", part="omni"))
    assert real[0].video_id == "Real-Time Visual Understanding_sample_1"
    assert omni[0].video_id == "Omni-Source Understanding_sample_1"
    assert real[0].path.parts[-3:] == ("Real-Time Visual Understanding", "sample_1", "video.mp4")
    rows = [
        {"question_id": "Real-Time Visual Understanding_sample_3_1"},
        {"question_id": "Omni-Source Understanding_sample_3_1"},
    ]
    assert len({r["video_id"] for r in flatten_csv(rows, "{category}/sample_{n}/video.mp4")}) == 2
    json_tasks = {
        q.categories["task_type"] for q in questions(load(BUILDERS["streamingbench"](tmp_path / "j"))).values()
    }
    assert {q.categories["task_type"] for q in questions(real).values()} == json_tasks
    assert json_tasks <= set(GROUPS["Real-Time Visual Understanding"])


@pytest.mark.parametrize("name", ["mlvu", "egoschema"])
def test_official_release_gives_the_hub_questions(name: str, tmp_path: Path) -> None:
    hub = questions(load(BUILDERS[name](tmp_path / "hub", errors=False)))
    official = questions(load(BUILDERS[name](tmp_path / "official", fmt="official", errors=False)))
    assert hub.keys() == official.keys() and len(hub) >= 2
    for qid, q in hub.items():
        o = official[qid]
        assert (q.prompt, q.gold, q.options, q.categories) == (o.prompt, o.gold, o.options, o.categories)


def test_official_mlvu_types_and_open_ended_files(tmp_path: Path) -> None:
    samples = load(BUILDERS["mlvu"](tmp_path, fmt="official"))
    qs = questions(samples)
    assert {q.categories["task_type"] for q in qs.values()} == {"plotQA", "needle", "count"}  # findNeedle -> needle
    assert qs["plotQA_1"].gold == "C"  # "A cup" is candidate A and C: the last one, as the official scorer
    assert all(q.qid != "summary_0" for s in samples for q in s.questions)  # 9_summary.json is open-ended
    (bad,) = [s.error for s in samples if s.error]
    assert bad.startswith(
        "2_needle.json row 1 (needle_1): answer 'Catching a flying drone quadcopter' is not a candidate"
    )


def test_official_egoschema_subset_is_its_answered_questions(tmp_path: Path) -> None:
    samples = load(BUILDERS["egoschema"](tmp_path, fmt="official"))
    assert sorted(questions(samples)) == ["0a1b2c3d-ego-a", "4e5f6a7b-ego-b"]  # ego-c has no public answer
    (bad,) = [s.error for s in samples if s.error]
    assert "subset_answers.json names q_uid 'ffffffff-unknown'" in bad
    (tmp_path / "subset_answers.json").unlink()
    with pytest.raises(DataError, match="subset_answers.json are missing"):
        load(BenchmarkConfig(name="egoschema", root=str(tmp_path)))


def test_missing_or_empty_root_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=f"benchmark.root={tmp_path / 'nope'} does not exist"):
        load(BenchmarkConfig(name="videomme", root=str(tmp_path / "nope")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="is empty.*infinipotv.data.toy"):
        load(BenchmarkConfig(name="longvideobench", root=str(tmp_path / "empty")))


def test_non_utf8_file_names_file_and_line(tmp_path: Path) -> None:
    cfg = BUILDERS["longvideobench"](tmp_path)
    path = Path(cfg.annotations)
    lines = path.read_bytes().split(b"\n")
    n = next(i for i, line in enumerate(lines) if b"what happens" in line)
    lines[n] = lines[n].replace(b"what happens", b"qu\xe9 pasa")
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(DataError, match=rf"lvb_val.json:{n + 1}: not UTF-8 \(byte 0xe9\)"):
        load(cfg)


def test_broken_jsonl_line_is_one_bad_row_naming_file_and_line(tmp_path: Path) -> None:
    cfg = BUILDERS["videomme"](tmp_path, fmt="jsonl", errors=False)
    path = Path(cfg.annotations)
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "", lines[1][:40]]) + "\n")
    samples = load(cfg)
    assert [q.qid for s in samples if s.error is None for q in s.questions] == ["001-1"]
    (bad,) = [s.error for s in samples if s.error]
    assert "test-00000-of-00001.jsonl:3: not valid JSON" in bad


def test_null_ids_and_options_are_not_the_text_none(tmp_path: Path) -> None:
    cfg = BUILDERS["videomme"](tmp_path, fmt="json", errors=False)
    path = Path(cfg.annotations)
    rows = json.loads(path.read_text())
    rows[0]["question_id"] = None
    rows[1]["options"][2] = None
    path.write_text(json.dumps(rows))
    samples = load(cfg)
    errors = [s.error for s in samples if s.error]
    assert errors == [
        "test-00000-of-00001.json row 0 (videomme-row0): question_id is empty",
        "test-00000-of-00001.json row 1 (001-2): option C is null",
    ]
    assert all("None" not in q.qid and "None" not in q.prompt for s in samples for q in s.questions)


def test_streamingbench_prompt_is_upstreams(tmp_path: Path) -> None:
    q = load(BUILDERS["streamingbench"](tmp_path))[0].questions[0]
    assert q.prompt == PROMPT.format(
        question="What is visible at 00:00:01 (q1)?", options="A. thing 0.\nB. thing 1.\nC. thing 2.\nD. thing 3."
    )


def test_time_stamps_in_the_released_forms() -> None:
    assert [hms_seconds(s) for s in ("00:03:10", "0:03:10", "00:24", "00:00:8")] == [190.0, 190.0, 24.0, 8.0]
    for bad in ("00:12450", "soon", "12", "1:2:3:4", "-0:01"):
        with pytest.raises(RowError, match="is not H:MM:SS"):
            hms_seconds(bad)
