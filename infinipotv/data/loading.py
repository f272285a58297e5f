"""What the five real benchmarks share: reading released annotation files, turning rows into videos with questions
(a bad row becomes an error sample, never a crash), finding video files, and building a benchmark by name.

A benchmark module only says how one row becomes a :class:`Question` and where its video is; the run order and
the error handling are the same everywhere, so they live here once.
"""

from __future__ import annotations

import csv
import importlib
import json
import re
from abc import abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from infinipotv.config import BenchmarkConfig, ConfigError, Parser
from infinipotv.data.base import BENCHMARKS, Benchmark, Question, VideoSample
from infinipotv.data.scoring import summary

LETTERS = "ABCDEF"
ANSWER_DIRECTLY = "Answer with the option's letter from the given choices directly."
_OPTION_LINE = re.compile(r"^\(?([A-F])[.)]\s+(.*)$", re.MULTILINE)
_PREFIXED = re.compile(r"^\s*\(?([A-F])[.)]\s*(.*)$", re.DOTALL)


class RowError(ValueError):
    """One annotation row that cannot become a question; it is reported on its own sample."""


def _native(value: Any) -> Any:
    """Parquet cells come back as numpy arrays and scalars; the loaders expect plain lists and numbers."""
    return value.tolist() if hasattr(value, "tolist") else value


def read_records(path: Path) -> list[dict[str, Any]]:
    """The rows of a released annotation file: .json (a list of rows), .jsonl, .csv or .parquet."""
    if not path.is_file():
        raise FileNotFoundError(f"annotation file not found: {path}; put the released file there or point "
                                f"benchmark.annotations at it (see conf/benchmark/)")
    suffix = path.suffix.lower()
    if suffix == ".json":
        rows = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(rows, dict) and len(rows) == 1 and isinstance(next(iter(rows.values())), list):
            rows = next(iter(rows.values()))  # {"data": [...]} exports
    elif suffix == ".jsonl":
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    elif suffix == ".csv":
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    elif suffix == ".parquet":
        import pandas as pd

        try:
            frame = pd.read_parquet(path)
        except ImportError as err:
            raise RuntimeError(f"reading {path} needs pyarrow (pip install pyarrow), or export it to .json with the "
                               f"same fields and set benchmark.annotations to that file") from err
        rows = [{k: _native(v) for k, v in row.items()} for row in frame.to_dict("records")]
    else:
        raise ValueError(f"benchmark.annotations={path}: unsupported file type {suffix!r}; "
                         f"use the released .parquet/.json/.jsonl/.csv")
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{path} must hold a list of annotation rows (objects)")
    return rows


def first_existing(candidates: list[Path]) -> Path:
    """The first candidate file that exists, else the first: a missing video is reported when it is decoded."""
    return next((p for p in candidates if p.is_file()), candidates[0])


def hms_seconds(stamp: str) -> float:
    """"HH:MM:SS" (or "MM:SS", fractional seconds allowed) -> seconds."""
    parts = str(stamp).strip().split(":")
    try:
        if len(parts) > 3:
            raise ValueError
        return sum(float(p) * 60**i for i, p in enumerate(reversed(parts)))
    except ValueError:
        raise RowError(f"time stamp {stamp!r} is not HH:MM:SS") from None


def options_from_list(raw: list[str]) -> dict[str, str]:
    """Released option strings ("A. text", "(A) text" or bare text) -> letter -> text, letters in order."""
    if not isinstance(raw, list) or not 2 <= len(raw) <= len(LETTERS):
        raise RowError(f"options must be a list of 2-{len(LETTERS)} strings, got {raw!r}")
    options = {}
    for letter, text in zip(LETTERS, raw):
        m = _PREFIXED.match(str(text))
        if m and m.group(1) != letter:
            raise RowError(f"option {text!r} is labelled {m.group(1)} at position {letter}")
        options[letter] = (m.group(2) if m else str(text)).strip()
    return options


def gold_letter(answer: Any, options: dict[str, str]) -> str:
    """The gold answer as one of the question's letters."""
    gold = str(answer).strip()
    if gold not in options:
        raise RowError(f"answer {answer!r} is not one of the options {''.join(options)}")
    return gold


def question_from_record(record: dict[str, Any]) -> Question:
    """Rebuild the question of a prediction record (re-parsing needs its letters and option texts).

    Records that carry ``options`` use them; otherwise they are read back from the prompt's option lines.
    """
    options = record.get("options") or dict(_OPTION_LINE.findall(record.get("prompt") or ""))
    return Question(qid=str(record["question_id"]), prompt=record.get("prompt") or "", gold=str(record.get("gold")),
                    options={k: v.strip() for k, v in options.items()}, categories=dict(record.get("categories") or {}))


def benchmark_class(name: str) -> type[Benchmark]:
    """The registered benchmark ``name``, importing ``infinipotv.data.<name>`` on first use."""
    if name not in BENCHMARKS:
        try:
            importlib.import_module(f"infinipotv.data.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"infinipotv.data.{name}":
                raise
    if name not in BENCHMARKS:
        raise ConfigError(f"benchmark.name={name!r} is unknown; valid: {', '.join(sorted(BENCHMARKS))}")
    return BENCHMARKS[name]


class AnnotatedBenchmark(Benchmark):
    """A benchmark read from a released annotation file, one question per row.

    Subclasses set ``default_annotations`` (relative to ``cfg.root``), ``id_field``/``video_field`` (row fields
    used to name a bad row's sample), ``category_fields`` (category -> row field) and implement :meth:`row`.
    """

    default_annotations: ClassVar[str]
    id_field: ClassVar[str]
    video_field: ClassVar[str]
    category_fields: ClassVar[dict[str, str]] = {}

    def __init__(self, cfg: BenchmarkConfig) -> None:
        self.cfg = cfg  # no file access here: parsing and scoring must work from a predictions file alone

    @property
    def root(self) -> Path:
        return Path(self.cfg.root)

    @property
    def annotations(self) -> Path:
        return Path(self.cfg.annotations) if self.cfg.annotations else self.root / self.default_annotations

    @property
    def strict(self) -> bool:
        return Parser(self.cfg.parser) is Parser.strict

    def samples(self) -> Iterator[VideoSample]:
        return iter(self.load())

    def load(self) -> list[VideoSample]:
        """Every video with its questions, in the order of the annotation file."""
        return self.collect(read_records(self.annotations))

    @abstractmethod
    def row(self, row: dict[str, Any]) -> tuple[str, Path, Question]:
        """One annotation row -> (video id, video path, question); raises RowError/KeyError on a bad row."""

    def categories(self, row: dict[str, Any]) -> dict[str, str]:
        return {name: str(row[key]) for name, key in self.category_fields.items()}

    def collect(self, rows: list[dict[str, Any]]) -> list[VideoSample]:
        """Group rows into videos (first-appearance order); a bad row becomes its own sample with ``error`` set."""
        videos: dict[str, VideoSample] = {}
        out: list[VideoSample] = []
        seen: set[str] = set()
        for i, row in enumerate(rows):
            try:
                vid, path, q = self.row(row)
                if q.qid in seen:
                    raise RowError(f"duplicate question id {q.qid!r}")
            except (KeyError, ValueError, TypeError, AttributeError, IndexError) as err:
                out.append(self.bad_row(i, row, err, seen))
                continue
            seen.add(q.qid)
            if vid not in videos:
                videos[vid] = VideoSample(video_id=vid, path=path, questions=[])
                out.append(videos[vid])
            videos[vid].questions.append(q)
        return out

    def bad_row(self, index: int, row: dict[str, Any], err: Exception, seen: set[str]) -> VideoSample:
        """A sample for a malformed row: one placeholder question, so the job records it as an error."""
        raw_id = row.get(self.id_field)
        qid = str(raw_id) if raw_id is not None and str(raw_id) not in seen else f"{self.name}-row{index}"
        seen.add(qid)
        problem = f"missing field {err}" if isinstance(err, KeyError) else str(err)
        keep = {n: str(row[k]) for n, k in self.category_fields.items() if row.get(k) is not None}
        return VideoSample(video_id=str(row.get(self.video_field, qid)), path=Path(),
                           questions=[Question(qid=qid, prompt="", gold="", categories=keep)],
                           error=f"{self.annotations.name} row {index} ({qid}): {problem}")

    def score(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        return summary(records, list(self.category_fields))
