"""StreamingBench (THUNLP-MT): questions asked while the video streams, each at its own time stamp.

The model sees the stream only up to a question's ``time_s``, answers, and keeps watching; all questions of a video
(from all of its entries in the released file) are answered in one pass, in time order, on the same compressed
memory (multi-turn, query-agnostic compression). ``part`` picks the released file: ``real_time`` (the 10 Real-Time
Visual Understanding tasks that InfiniPot-V reports), ``omni`` (six tasks; two of them, Misleading and Anomaly
Context Understanding, the paper groups under Contextual Understanding) or ``contextual`` (``questions_sqa.json``,
sequential QA: each question's prompt holds the video's earlier questions with their gold answers, as upstream's
protocol does). ``proactive`` (open-ended timing, no options or answers) is refused with one line. The prompts are
StreamingBench's own; ``faithful`` parsing is its scorer's (the output's first character), ``strict`` the
Video-MME form-priority parser.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infinipotv.config import BenchmarkConfig, ConfigError
from infinipotv.data.base import Question, VideoSample, register
from infinipotv.data.loading import (
    AnnotatedBenchmark,
    DataError,
    RowError,
    check_root,
    gold_letter,
    hms_seconds,
    options_from_list,
    read_json,
    read_records,
    text,
)
from infinipotv.data.parsing import by_form, first_char
from infinipotv.data.streamingbench_files import (
    csv_options,
    flatten_csv,
    flatten_entries,
    flatten_sqa,
    is_proactive,
    repair_options,
    task_and_group,
)

PARTS = {  # part -> default annotation file under root
    "real_time": "questions_real.json",
    "omni": "questions_omni.json",
    "contextual": "questions_sqa.json",
}
PROACTIVE = (
    "benchmark.part=proactive: questions_proactive.json holds open-ended Proactive Output questions (no "
    "options or answers; scored by when the model speaks up), which this harness does not run; use "
    "part=real_time, omni or contextual"
)
CSV_VIDEO = "{category}/sample_{n}/video.mp4"  # the Hub zips of a category unzipped into <root>/<category>/
_INTRO = (
    "You are an advanced video question-answering AI assistant. You have been provided with {what} related to "
    "the video. Your task is to carefully analyze the video {how}, choosing from the four options provided. "
    "Respond with only the letter (A, B, C, or D) of the correct option.\n\n"
)
PROMPT = (
    _INTRO.format(
        what="some frames from the video and a multiple-choice question", how="and provide the best answer to question"
    )
    + "Question: {question}\n\nOptions:\n{options}\n\nThe best option is:"
)
SQA_PROMPT = (
    _INTRO.format(what="a video and a multiple-choice question", how="and the provided context to answer the question")
    + "{context}\n\nHere is the question. Answer it and don't confuse it with the previous conversation.\n"
    "Question: {question}\n\nOptions:\n{options}\n\nThe best option is:"
)
SQA_CONTEXT = (
    "Here are the contextual information related to the video. Please answer the questions based on the "
    "contextual information: "
)
SQA_TURN = (
    "At timestamp {stamp}, the following question and answer occurred: Question: {question}; "
    "Options: {options}; Answer: {answer}; "
)


def _lines(options: dict[str, str]) -> list[str]:
    return [f"{letter}. {text}" for letter, text in options.items()]


@register
class StreamingBench(AnnotatedBenchmark):
    """Annotations: the released JSON (entries with ``video_path`` and ``questions``; the SQA file a list of such
    lists), or a Hub CSV (one question per row; videos at ``{root}/`` + ``options.csv_video``)."""

    name = "streamingbench"
    streaming = True
    option_keys = ("csv_video",)
    id_field = "question_id"
    video_field = "video_id"
    category_fields = {"task_type": "task_type", "group": "group"}

    def __init__(self, cfg: BenchmarkConfig) -> None:
        super().__init__(cfg)
        if self.part == "proactive":
            raise ConfigError(PROACTIVE)
        if self.part not in PARTS:
            raise ConfigError(
                f"benchmark.part={cfg.part!r} is unknown for streamingbench; use one of {', '.join(PARTS)}"
            )
        self._sqa: dict[str, tuple[str, str]] = {}  # qid -> (time stamp, question text), for the SQA context

    @property
    def part(self) -> str:
        return self.cfg.part or "real_time"

    @property
    def annotations(self) -> Path:
        return Path(self.cfg.annotations) if self.cfg.annotations else self.root / PARTS[self.part]

    def load(self) -> list[VideoSample]:
        check_root(self.root)
        path = self.annotations
        if path.suffix.lower() == ".json" and path.is_file():
            rows = read_json(path)
            if not isinstance(rows, list):
                raise DataError(f"{path} must hold a list of entries, found {type(rows).__name__}")
        else:
            rows = read_records(path)
        if is_proactive(rows):
            raise DataError(f"{path}: {PROACTIVE}")
        if path.suffix.lower() == ".csv":
            flat = flatten_csv(rows, self.cfg.options.get("csv_video", CSV_VIDEO))
        elif rows and all(isinstance(r, list) for r in rows):  # the SQA file: one list of entries per video
            flat = flatten_sqa(rows)
        else:
            flat = flatten_entries(
                [r if isinstance(r, dict) else {"_problem": f"a {type(r).__name__}, not an entry"} for r in rows]
            )
        samples = self.collect(flat)
        for s in samples:
            s.questions.sort(key=lambda q: q.time_s or 0.0)
            if self._sqa:
                self._add_context(s.questions)
        return samples

    def _add_context(self, questions: list[Question]) -> None:
        """Sequential QA: each question's prompt holds the earlier questions of its video with their gold answers."""
        turns = ""
        for q in questions:
            if q.qid not in self._sqa:
                continue
            stamp, question = self._sqa[q.qid]
            context = SQA_CONTEXT + turns if turns else ""
            q.prompt = SQA_PROMPT.format(context=context, question=question, options="\n".join(_lines(q.options)))
            turns += SQA_TURN.format(
                stamp=stamp, question=question, options=", ".join(_lines(q.options)), answer=q.gold
            )

    def row(self, row: dict[str, Any]) -> tuple[str, Path, Question]:
        task, group = task_and_group(row["task_type"])
        raw = row["options"]
        options = options_from_list(repair_options(csv_options(raw) if isinstance(raw, str) else raw))
        question = text(row, "question")
        qid = text(row, "question_id")
        q = Question(
            qid=qid,
            prompt=PROMPT.format(question=question, options="\n".join(_lines(options))),
            gold=gold_letter(row["answer"], options),
            text=question,
            options=options,
            categories={"task_type": task, "group": group},
            time_s=hms_seconds(row["time_stamp"]),
        )
        if task == "Sequential Question Answering":
            self._sqa[qid] = (str(row["time_stamp"]), question)
        return text(row, "video_id"), self.root / text(row, "video_path"), q

    def error_categories(self, row: dict[str, Any]) -> dict[str, str]:
        """A bad row's task under the paper's name, with its group (nothing when the task itself is unknown)."""
        try:
            task, group = task_and_group(row.get("task_type"))
        except RowError:
            return {}
        return {"task_type": task, "group": group}

    def parse(self, output: str, question: Question) -> str | None:
        letters = "".join(question.options)
        return by_form(output, letters, strict=True) if self.strict else first_char(output, letters)

    def score(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        scores = super().score(records)
        return {**scores, "tasks": scores["breakdown"]["task_type"], "groups": scores["breakdown"]["group"]}
