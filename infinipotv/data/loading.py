"""What the five real benchmarks share: reading released annotation files, turning rows into videos with questions
(a bad row becomes an error sample, never a crash), finding video files, and building a benchmark by name.

A benchmark module only says how one row becomes a :class:`Question` and where its video is; the run order and
the error handling are the same everywhere, so they live here once.
"""

from __future__ import annotations

import csv
import importlib
import io
import json
import math
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
_NUMBER = re.compile(r"\d+(\.\d+)?")
TOO_DEEP = "JSON nested too deeply to read (no annotation file nests more than a few levels)"


class RowError(ValueError):
    """One annotation row that cannot become a question; it is reported on its own sample."""


class DataError(ConfigError):
    """A benchmark root or annotation file that cannot be read at all. The message is one line naming the file (and
    line) and the fix; ``run.py`` prints it and exits before any model is loaded."""


def _native(value: Any) -> Any:
    """Parquet cells come back as numpy arrays and scalars; the loaders expect plain lists and numbers."""
    return value.tolist() if hasattr(value, "tolist") else value


def check_root(root: Path) -> None:
    """A missing or empty benchmark root is one line, not a run of "video not found" errors."""
    if not root.is_dir():
        raise DataError(
            f"benchmark.root={root} does not exist; set benchmark.root= (or INFINIPOTV_DATA) to the "
            f"folder holding the released annotations and videos (see conf/benchmark/)"
        )
    if not any(root.iterdir()):
        raise DataError(
            f"benchmark.root={root} is empty; put the released annotations and videos there "
            f"(conf/benchmark/ lists the layout; `python -m infinipotv.data.toy ROOT` writes a small one)"
        )


def read_text(path: Path) -> str:
    """A released text file as UTF-8 (a leading BOM is dropped); a non-UTF-8 file names its first bad line."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise DataError(
            f"{path}:{line}: not UTF-8 (byte 0x{data[err.start]:02x}); re-save the file as UTF-8, "
            f"e.g. iconv -f latin1 -t utf-8 {path.name} > fixed_{path.name}"
        ) from None


def _jsonl_rows(path: Path) -> list[dict[str, Any]]:
    """One row per non-empty line; a broken line becomes a row carrying its problem (file and line named)."""
    rows: list[dict[str, Any]] = []
    for n, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            rows.append(
                {
                    "_problem": f"{path.name}:{n}: not valid JSON ({err.msg} at column {err.colno}); "
                    f"fix or delete that line"
                }
            )
        except RecursionError:
            rows.append({"_problem": f"{path.name}:{n}: {TOO_DEEP}; fix or delete that line"})
    return rows


def read_json(path: Path) -> Any:
    """A .json file; invalid JSON names the file and line."""
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise DataError(f"{path}:{err.lineno}: not valid JSON ({err.msg}); re-download the released file") from None
    except RecursionError:
        raise DataError(f"{path}: {TOO_DEEP}; re-download the released file") from None


def read_records(path: Path) -> list[dict[str, Any]]:
    """The rows of a released annotation file: .json (a list of rows), .jsonl, .csv or .parquet; a file holding
    none (``[]``) is a :class:`DataError`."""
    if not path.is_file():
        raise DataError(
            f"annotation file not found: {path}; put the released file there, set INFINIPOTV_DATA "
            f"(or benchmark.root=) to the folder holding it, or point benchmark.annotations at it "
            f"(see conf/benchmark/)"
        )
    suffix = path.suffix.lower()
    if suffix == ".json":
        rows = read_json(path)
        if isinstance(rows, dict) and len(rows) == 1 and isinstance(next(iter(rows.values())), list):
            rows = next(iter(rows.values()))  # {"data": [...]} exports
    elif suffix == ".jsonl":
        rows = _jsonl_rows(path)
    elif suffix == ".csv":
        rows = list(csv.DictReader(io.StringIO(read_text(path), newline="")))
    elif suffix == ".parquet":
        import pandas as pd

        try:
            frame = pd.read_parquet(path)
        except ImportError as err:
            raise DataError(
                f"reading {path} needs pyarrow (pip install pyarrow), or export it to .json with the "
                f"same fields and set benchmark.annotations to that file"
            ) from err
        rows = [{k: _native(v) for k, v in row.items()} for row in frame.to_dict("records")]
    else:
        raise DataError(
            f"benchmark.annotations={path}: unsupported file type {suffix!r}; "
            f"use the released .parquet/.json/.jsonl/.csv"
        )
    if not isinstance(rows, list):
        raise DataError(f"{path} must hold a list of annotation rows (objects), found {type(rows).__name__}")
    if not rows:  # a run of it would answer nothing and exit 0, as if it had scored something
        raise DataError(f"{path} holds no annotation rows (an empty list): re-download the released file")
    return [r if isinstance(r, dict) else {"_problem": f"row is a {type(r).__name__}, not an object"} for r in rows]


def is_null(value: Any) -> bool:
    """None or NaN (a parquet's empty cell): no value at all, never the text "None"."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def is_blank(value: Any) -> bool:
    """Null (:func:`is_null`) or an empty string: a field the row does not really have."""
    return is_null(value) or str(value).strip() == ""


def text(row: dict[str, Any], key: str) -> str:
    """A required text field; a null or empty cell is a bad row, never the text "None"."""
    value = row[key]
    if is_blank(value):
        raise RowError(f"{key} is empty")
    return value if isinstance(value, str) else str(value)


def first_existing(candidates: list[Path]) -> Path:
    """The first candidate file that exists, else the first: a missing video is reported when it is decoded."""
    return next((p for p in candidates if p.is_file()), candidates[0])


def hms_seconds(stamp: str) -> float:
    """ "HH:MM:SS", "H:MM:SS" or "MM:SS" (fractional seconds allowed) -> seconds. A minutes or seconds field of 60
    or more (StreamingBench has one "00:12450") is a bad row, not a time three hours into the video."""
    parts = str(stamp).strip().split(":")
    values = [float(p) for p in parts] if all(_NUMBER.fullmatch(p) for p in parts) else []
    if not 1 < len(values) <= 3 or any(v >= 60 for v in values[1:]):
        raise RowError(f"time stamp {stamp!r} is not H:MM:SS")
    return sum(v * 60**i for i, v in enumerate(reversed(values)))


def options_from_list(raw: list[str]) -> dict[str, str]:
    """Released option strings ("A. text", "(A) text" or bare text) -> letter -> text, letters in order. An empty
    string is an (empty) option as shipped; a null is a bad row, never the option "None"."""
    if not isinstance(raw, list) or not 2 <= len(raw) <= len(LETTERS):
        raise RowError(f"options must be a list of 2-{len(LETTERS)} strings, got {raw!r}")
    options = {}
    for letter, value in zip(LETTERS, raw):
        if is_null(value):
            raise RowError(f"option {letter} is null")
        m = _PREFIXED.match(str(value))
        if m and m.group(1) != letter:
            raise RowError(f"option {value!r} is labelled {m.group(1)} at position {letter}")
        options[letter] = (m.group(2) if m else str(value)).strip()
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
    return Question(
        qid=str(record["question_id"]),
        prompt=record.get("prompt") or "",
        gold=str(record.get("gold")),
        text="",  # rescoring reads the answer, never the question's text
        options={k: v.strip() for k, v in options.items()},
        categories=dict(record.get("categories") or {}),
    )


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
    def video_root(self) -> Path:
        """The folder every video must resolve into (unless ``benchmark.allow_outside_root``)."""
        return self.root

    def check_inside(self, path: Path) -> None:
        """A video path that resolves outside :attr:`video_root` (``..``, an absolute path, a symlink) is a
        :class:`RowError` naming it and the knob that allows it."""
        if self.cfg.allow_outside_root:
            return
        root, resolved = self.video_root.resolve(), path.resolve()
        if not resolved.is_relative_to(root):
            raise RowError(
                f"video path {path} resolves to {resolved}, outside the video root {root}; move the video under it, "
                f"or set benchmark.allow_outside_root=true to read it there"
            )

    @property
    def strict(self) -> bool:
        return Parser(self.cfg.parser) is Parser.strict

    def samples(self) -> Iterator[VideoSample]:
        return iter(self.load())

    def load(self) -> list[VideoSample]:
        """Every video with its questions, in the order of the annotation file."""
        check_root(self.root)
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
                if "_problem" in row:
                    raise RowError(row["_problem"])
                vid, path, q = self.row(row)
                if q.qid in seen:
                    raise RowError(f"duplicate question id {q.qid!r}")
                self.check_inside(path)
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
        qid = str(raw_id) if not is_blank(raw_id) and str(raw_id) not in seen else f"{self.name}-row{index}"
        seen.add(qid)
        problem = f"missing field {err}" if isinstance(err, KeyError) else str(err)
        keep = self.error_categories(row)
        video = row.get(self.video_field)
        return VideoSample(
            video_id=qid if is_blank(video) else str(video),
            path=Path(),
            questions=[Question(qid=qid, prompt="", gold="", text="", categories=keep)],
            error=f"{row.get('_source') or f'{self.annotations.name} row {index}'} ({qid}): {problem}",
        )

    def error_categories(self, row: dict[str, Any]) -> dict[str, str]:
        """The categories a bad row still has, so its error lands in its table row."""
        return {n: str(row[k]) for n, k in self.category_fields.items() if not is_blank(row.get(k))}

    def score(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        return summary(records, list(self.category_fields))
