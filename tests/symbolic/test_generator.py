"""The symbolic benchmark's generator: seeded and deterministic, its knobs do what they say, bad knobs fail clearly;
short answers and option choices are read from the completion."""

from __future__ import annotations

import json

import numpy as np
import pytest

from infinipotv.config import BenchmarkConfig, ConfigError
from infinipotv.data.loading import hms_seconds
from infinipotv.data.symbolic import Symbolic, choose, normalize
from infinipotv.data.symbolic_content import KINDS
from infinipotv.data.video import FramePlan, decode_planned
from infinipotv.models import glyphs

SMALL = {"n_videos": 2, "frames": 64, "scene_frames": 8}


def bench(root, seed=0, **options) -> Symbolic:
    return Symbolic(BenchmarkConfig(name="symbolic", root=str(root), seed=seed, options={**SMALL, **options}))


def snapshot(b: Symbolic) -> tuple[list, list[np.ndarray]]:
    samples = list(b.samples())
    questions = [(q.qid, q.prompt, q.gold, q.options, q.categories, q.time_s) for s in samples for q in s.questions]
    return questions, [np.stack(list(decode_planned(FramePlan.rate(s.path, 2.0)))) for s in samples]


def test_same_seed_gives_the_same_files_and_questions(tmp_path):
    first, second = bench(tmp_path / "a"), bench(tmp_path / "b")
    (q1, frames1), (q2, frames2) = snapshot(first), snapshot(second)
    assert q1 == q2 and all(np.array_equal(x, y) for x, y in zip(frames1, frames2))
    assert first.annotations.read_bytes() == second.annotations.read_bytes()
    assert sorted(p.name for p in first.folder.rglob("*")) == sorted(p.name for p in second.folder.rglob("*"))
    q3, frames3 = snapshot(bench(tmp_path / "a", seed=1))
    assert q3 != q1 and not np.array_equal(frames3[0], frames1[0])


def test_a_generated_folder_is_reused_and_a_changed_knob_gets_its_own(tmp_path):
    b = bench(tmp_path)
    list(b.samples())
    stamp = b.annotations.stat().st_mtime_ns
    assert bench(tmp_path).annotations.stat().st_mtime_ns == stamp
    other = bench(tmp_path, frames=48)
    list(other.samples())
    assert other.folder != b.folder and b.annotations.stat().st_mtime_ns == stamp


def test_needles_sit_where_the_knobs_put_them_and_streaming_questions_come_after(tmp_path):
    b = bench(
        tmp_path,
        n_videos=3,
        n_needles=4,
        needle_span=[0.2, 0.4],
        needle_frames=1,
        streaming_fraction=1.0,
        question_delay=[0.1, 0.2],
        scene_questions=0,
    )
    rows = json.loads(b.annotations.read_text()) if list(b.samples()) else []
    duration = 64 / 2
    assert len(rows) == 3 * 4 and len({r["task_type"] for r in rows if r["video_id"] == rows[0]["video_id"]}) == 4
    for r in rows:
        start = hms_seconds(r["evidence"][0])
        assert 0.2 * duration <= start <= 0.4 * duration
        assert r["mode"] == "streaming" and start < hms_seconds(r["time_stamp"]) <= start + 0.2 * duration + 1


def generated(tmp_path, **options) -> list[dict]:
    b = bench(tmp_path, **options)
    list(b.samples())
    return json.loads(b.annotations.read_text())


def test_needles_past_one_per_kind_ask_about_their_own_subject(tmp_path):
    """Ten needles: each kind twice, the second time about its next subject; the first five ask what a video of five
    needles asks (the same kinds in the same order, about the same subjects)."""
    many = generated(tmp_path, n_videos=2, n_needles=10, needle_span=[0.05, 0.8])
    five = generated(tmp_path, n_videos=2, n_needles=5, needle_span=[0.05, 0.8])
    for video in ("symbolic_000", "symbolic_001"):
        rows = [r for r in many if r["video_id"] == video]
        kinds = [r["task_type"] for r in rows]
        assert len(rows) == 10 and len({r["answer_prefix"] for r in rows}) == 10  # no two ask the same thing
        assert kinds[5:] == kinds[:5] and len(set(kinds)) == 5
        assert [r["answer_prefix"] for r in rows[:5]] == [r["answer_prefix"] for r in five if r["video_id"] == video]


def test_the_mix_of_formats_and_modes_follows_the_knobs(tmp_path):
    rows = [q for s in bench(tmp_path, mc_fraction=0.0, streaming_fraction=0.0).samples() for q in s.questions]
    assert {q.categories["format"] for q in rows} == {"short_answer"}
    assert {q.categories["mode"] for q in rows} == {"offline"} and all(q.time_s == 32.0 for q in rows)
    mc = [q for s in bench(tmp_path, mc_fraction=1.0).samples() for q in s.questions]
    assert all(q.options and q.gold in "ABCD" and "Options:" not in q.prompt for q in mc)
    shown = [q for s in bench(tmp_path, mc_fraction=1.0, show_options=True).samples() for q in s.questions]
    assert all("Options: A. " in q.prompt for q in shown)


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"n_needles": 26}, "n_needles"),
        ({"distractor_similarity": 1.5}, "distractor_similarity"),
        ({"needle_span": [0.7, 0.2]}, "needle_span"),
        ({"needle_span": [0.2, 0.3], "needle_frames": 4}, "needle_span"),
        ({"frames": 4}, "frames"),
        ({"colour": "red"}, "unknown keys"),
        ({"grid": [2, 2]}, "grid"),
        ({"background_rows": 3}, "background_rows"),
        ({"background_rows": 1}, "background_rows=1 leaves 8 tokens"),
        ({"background_rows": 1, "grid": [4, 4], "background_frames": 0}, "background_frames"),
    ],
)
def test_bad_knobs_fail_with_the_option_named(tmp_path, options, needle):
    with pytest.raises(ConfigError, match=needle):
        list(bench(tmp_path, **options).samples())


def test_the_background_kind_adds_a_static_row_under_the_same_events(tmp_path):
    """background_rows=1 on a 4 x 4 grid: the top three rows are the plain 3 x 4 stream, token for token, with the
    same questions; the bottom row holds one background line for stretches of background_frames (+-25%), whatever
    changes above it. Inert while off: background_frames alone does not make a new folder."""
    plain, kind = bench(tmp_path), bench(tmp_path, grid=[4, 4], background_rows=1, background_frames=16)
    (q_plain, v_plain), (q_kind, v_kind) = snapshot(plain), snapshot(kind)
    assert [q[1:] for q in q_plain] == [q[1:] for q in q_kind]
    for a, b in zip(v_plain, v_kind):
        top, bottom = glyphs.decode(a), glyphs.decode(b)
        assert np.array_equal(bottom[:, :3], top)
        row = [tuple(r) for r in bottom[:, 3].reshape(len(bottom), -1)]
        starts = [i for i in range(1, len(row)) if row[i] != row[i - 1]]
        assert starts and all(12 <= y - x <= 20 for x, y in zip([0, *starts], starts))
        assert len({row[s] for s in [0, *starts]}) > 1
    assert bench(tmp_path, background_frames=7).folder == plain.folder != kind.folder


def test_the_kind_cue_names_the_kind_of_value_never_the_needles_line(tmp_path):
    """answer_cue=kind: the same videos and questions, each question's cue the kind of value alone (shared by every
    subject of its kind, so it singles out no needle and repeats no line's opening words); the default cue is the
    line's opening words. A folder made before the knob existed is reused for the default."""
    line, kind = bench(tmp_path, n_needles=5), bench(tmp_path, n_needles=5, answer_cue="kind")
    (_, v_line), (q_kind, v_kind) = snapshot(line), snapshot(kind)
    assert all(np.array_equal(a, b) for a, b in zip(v_line, v_kind))
    rows_line = json.loads(line.annotations.read_text())
    rows_kind = json.loads(kind.annotations.read_text())
    cues = {k.name: k.kind_cue for k in KINDS}
    for a, b in zip(rows_line, rows_kind):
        assert {**a, "answer_prefix": None} == {**b, "answer_prefix": None}
        assert b["answer_prefix"] == cues[b["task_type"]] != a["answer_prefix"]
        subject = a["answer_prefix"].split()[1].rstrip("'s")
        assert subject not in b["answer_prefix"] and a["answer_prefix"] not in b["answer_prefix"]
    assert all(q[1].endswith(f"Answer: {cues[q[4]['task_type']]}") for q in q_kind)
    assert bench(tmp_path, answer_cue="line").folder == line.folder


def test_needle_lengths_are_drawn_per_event_from_the_list(tmp_path):
    """needle_frames=[3, 6]: every needle and distractor event lasts 3 or 6 frames (both occur), a needle's question
    names its own span, and the draws come from a stream of their own: the needles' kinds, values and places are those
    of the stream whose every event has the longest length."""
    fixed = generated(tmp_path, n_videos=4, n_needles=5, needle_frames=6)
    drawn_bench = bench(tmp_path, n_videos=4, n_needles=5, needle_frames=[3, 6])
    drawn = generated(tmp_path, n_videos=4, n_needles=5, needle_frames=[3, 6])
    spans = [hms_seconds(r["evidence"][1]) * 2 - hms_seconds(r["evidence"][0]) * 2 for r in drawn]
    assert set(spans) == {3, 6}
    assert [(r["question"], r["evidence"][0], r["answer"]) for r in drawn] == [
        (r["question"], r["evidence"][0], r["answer"]) for r in fixed
    ]
    frames = [glyphs.decode(v) for v in snapshot(drawn_bench)[1]]
    for rows, ids in zip([drawn[i : i + 5] for i in range(0, 20, 5)], frames):
        for r in rows:
            first, end = (int(hms_seconds(t) * 2) for t in r["evidence"])
            assert all(np.array_equal(ids[f], ids[first]) for f in range(first, end))
            assert not np.array_equal(ids[end], ids[first])


def test_several_background_rows_hold_a_line_each(tmp_path):
    """background_rows=3 on a 6 x 4 grid: the top three rows are the plain 3 x 4 stream token for token; each lower
    row holds its own background line, held for stretches, on its own random stream (row 0 is the one-row kind's)."""
    plain = bench(tmp_path)
    one = bench(tmp_path, grid=[4, 4], background_rows=1, background_frames=16)
    three = bench(tmp_path, grid=[6, 4], background_rows=3, background_frames=16)
    (q_plain, v_plain), (_, v_one), (q_three, v_three) = snapshot(plain), snapshot(one), snapshot(three)
    assert [q[1:] for q in q_three] == [q[1:] for q in q_plain]
    for a, b, c in zip(v_plain, v_one, v_three):
        top, one_row, rows = glyphs.decode(a), glyphs.decode(b), glyphs.decode(c)
        assert np.array_equal(rows[:, :3], top) and np.array_equal(rows[:, 3], one_row[:, 3])
        lines = [[tuple(x) for x in rows[:, r]] for r in (3, 4, 5)]
        assert lines[0] != lines[1] != lines[2]
        assert all(len(set(line)) > 1 for line in lines)


def test_short_answers_and_choices_are_read_from_the_completion():
    assert normalize(" 4817.\n\nThe answer") == "4817" and normalize("Clara's") == "clara's" and normalize("") == ""
    options = {"A": "red", "B": "blue", "C": "green", "D": "black"}
    assert choose(" blue.\n\nThe answer is red", options) == "B"
    assert choose(" a green or red bench", options) == "C"
    assert choose("(D)", options) == "D" and choose(" purple", options) is None
