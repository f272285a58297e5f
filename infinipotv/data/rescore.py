"""Re-parse and re-score a finished run from its files alone, no model: ``python -m infinipotv.data.rescore RUN_DIR``.

Reads ``RUN_DIR/config.yaml`` (its ``benchmark`` node) and ``RUN_DIR/predictions.jsonl``, parses every raw output
again with the configured parser (or ``--parser``), prints a markdown summary, and with ``--write`` stores the new
scores in ``RUN_DIR/metrics.json`` (keys ``scores``, ``parser``, ``subset``; other keys are kept). This is how a
table switches between the faithful and the strict parser, or picks up a parser fix, without a GPU.

A line that is not a prediction (not JSON, not UTF-8, not an object, no ``question_id``: a job killed mid-write, a
disk error) is skipped with a warning naming the file and line; an answer to a question the run was not asked (a
hand edit, a file copied from another run) is left out, with one warning naming the file and the count. No prediction
at all, or no run files, is an error: one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from infinipotv.config import BenchmarkConfig, Parser
from infinipotv.data.base import Benchmark
from infinipotv.data.loading import benchmark_class, question_from_record
from infinipotv.data.subset import describe, select
from infinipotv.runs import CONFIG, METRICS, PREDICTIONS, RunDirError, is_number, parse_line, rewrite

Record = dict[str, Any]


class SkippedInput(UserWarning):
    """A corrupt file, or a corrupt line of one, left out of what is read; the message names it and says why."""


def skip(message: str) -> None:
    """Warn that ``message`` (a file, maybe a line, and the reason) was left out; the caller goes on without it."""
    warnings.warn(message, SkippedInput, stacklevel=3)


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _options(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(text, str) for text in value.values())


def _reference(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("agree"), bool) and is_number(value.get("kl_first_token"))


def _needle(value: Any) -> bool:
    return isinstance(value, dict) and is_number(value.get("recall")) and is_number(value.get("share"))


def _or_null(fits: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or fits(value)


#: What each field of a prediction record is, where the record has it, as the job writes it (null where the readers
#: take null for none); a record holding anything else (a hand edit: a NaN ``correct``, an ``output`` 5, ``options``
#: as text) is not read, never guessed at: its parse, score or count would crash or mislead.
FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "video_id": (_text, "a text"),
    "prompt": (_or_null(_text), "a text"),
    "output": (_or_null(_text), "a text"),
    "error": (_or_null(_text), "null or a text"),
    "correct": (lambda value: isinstance(value, bool), "true or false"),
    "options": (_or_null(_options), "a mapping of letters to texts"),
    "categories": (_or_null(lambda value: isinstance(value, dict)), "a mapping"),
    "reference": (_reference, "a reference answer (agree, kl_first_token)"),
    "needle": (_or_null(_needle), "a needle read (recall, share)"),
}


def why_not_a_prediction(record: Any, required: Collection[str] = ("question_id",)) -> str | None:
    """Why a JSON value read from predictions.jsonl is not a prediction record as the job writes it (not an object,
    a ``required`` field missing, a field of another kind: :data:`FIELDS`), or None. The job's resume, ``rescore``
    and the aggregator read the file by this one rule."""
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not a prediction object"
    missing = [key for key in required if record.get(key) is None]
    if missing:
        return f"no {', '.join(missing)}"
    for key, (fits, what) in FIELDS.items():
        if key in record and not fits(record[key]):
            shown = json.dumps(record[key])
            return f"{key} is {shown if len(shown) <= 40 else shown[:37] + '...'}, not {what}; not scored"
    return None


def _prediction(line: bytes) -> tuple[Record | None, str | None]:
    """One line of predictions.jsonl as a record, or why it is not one."""
    record, why = parse_line(line)
    why = why or why_not_a_prediction(record)
    return (None, why) if why else (record, None)


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The object in a JSON file (metrics.json, provenance.json); None when it is absent, or corrupt: then with a
    :class:`SkippedInput` warning naming the file."""
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        skip(f"{path}: not JSON ({type(err).__name__}: {err}); file skipped")
        return None
    if not isinstance(value, dict):
        skip(f"{path}: a JSON {type(value).__name__}, not an object; file skipped")
        return None
    return value


def read_config(path: Path) -> dict[str, Any]:
    """A run's config.yaml as plain containers; ValueError naming the file if unreadable.

    Interpolations are left as written, never resolved: the job writes the values that ran, so a ``${oc.env:...}``
    in a run's config.yaml was put there by hand and would put the reader's environment into the tables.
    YAML tags (``!!python/object``) are not constructed (a safe loader): the file is refused."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: RUN_DIR must be a run directory written by the job")
    try:
        config = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception as err:  # YAML syntax, tags, bad encoding: all mean a broken file
        raise ValueError(f"{path}: not a readable config ({type(err).__name__}: {' '.join(str(err).split())})") from err
    if not isinstance(config, dict):
        raise ValueError(f"{path}: a config must be a mapping, not a {type(config).__name__}")
    return config


def _literal(value: Any) -> Any:
    """``value`` with every ``${`` escaped, so that OmegaConf keeps the text as written instead of resolving it."""
    if isinstance(value, str):
        return value.replace("${", "\\${")
    if isinstance(value, dict):
        return {k: _literal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_literal(v) for v in value]
    return value


def benchmark_config(node: dict[str, Any]) -> BenchmarkConfig:
    """A run's ``benchmark`` block (as :func:`read_config` gives it) typed, with its text taken literally."""
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(BenchmarkConfig), _literal(node)))


def load_benchmark_config(run_dir: Path, parser: str | None = None) -> BenchmarkConfig:
    """The run's benchmark config, typed; ``parser`` overrides the one it ran with."""
    path = run_dir / CONFIG
    node = read_config(path).get("benchmark")
    if not isinstance(node, dict):
        raise ValueError(f"{path} has no 'benchmark' node")
    cfg = benchmark_config(node)
    if parser is not None:
        cfg.parser = Parser(parser)
    return cfg


def read_predictions(path: Path) -> tuple[list[Record], int]:
    """The last record of each question (a later answer supersedes an earlier one, with a warning: the rule of the
    job's resume, :func:`infinipotv.runs.sort_predictions`) and the number of lines skipped, each with a
    :class:`SkippedInput` warning naming ``path`` and the line (a job killed mid-write leaves a truncated last line)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: the run wrote no predictions")
    records: dict[str, Record] = {}
    bad = 0
    with path.open("rb") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            record, problem = _prediction(line)
            if record is None:
                bad += 1
                skip(f"{path} line {number}: {problem}; line skipped")
                continue
            qid = str(record["question_id"])
            if qid in records:
                skip(f"{path} line {number}: another answer to question {qid!r}; it supersedes the earlier one")
            records[qid] = record
    return list(records.values()), bad


def run_questions(cfg: BenchmarkConfig, metrics: dict[str, Any] | None) -> set[str] | None:
    """The ids of the questions the run was asked: its metrics.json's ``question_ids`` (the job writes them), else
    the selection the job makes from the benchmark's annotations; None when neither can be read (a run from before
    ``question_ids`` whose data is on another machine): its answers cannot be checked, and a run without metrics.json
    is flagged partial anyway."""
    asked = (metrics or {}).get("question_ids")
    if isinstance(asked, list):
        return {str(q) for q in asked}
    try:
        samples = select(benchmark_class(cfg.name)(cfg).samples(), cfg)
    except Exception:  # whatever keeps the annotations from being read (no data here), the answers are still read
        return None
    return {q.qid for s in samples for q in s.questions}


def only_asked(records: list[Record], asked: Collection[str] | None, path: Path) -> tuple[list[Record], int]:
    """The records of the questions the run asked (all of them when ``asked`` is None), and how many others were
    left out, with one warning naming ``path`` and the count (as a resume sets them aside,
    :func:`infinipotv.runs.sort_predictions`): an answer to a question the run never had is never counted."""
    if asked is None:
        return records, 0
    kept = [r for r in records if str(r["question_id"]) in asked]
    foreign = [str(r["question_id"]) for r in records if str(r["question_id"]) not in asked]
    if foreign:
        shown = ", ".join(repr(q) for q in foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        skip(f"{path}: {len(foreign)} answer(s) to questions that are not this run's ({shown}); not counted")
    return kept, len(foreign)


def reparse(records: list[Record], bench: Benchmark) -> tuple[list[Record], int]:
    """Records with ``parsed``/``correct`` recomputed from the raw outputs, and how many parses changed."""
    out, changed = [], 0
    for r in records:
        if r.get("error") is not None:
            out.append({**r, "correct": False})
            continue
        parsed = bench.parse(r.get("output") or "", question_from_record(r))
        changed += parsed != r.get("parsed")
        out.append({**r, "parsed": parsed, "correct": parsed is not None and parsed == str(r.get("gold"))})
    return out, changed


def _fmt(value: Any) -> str:
    return "missing" if value is None else f"{value:.1f}" if isinstance(value, float) else str(value)


def markdown(scores: dict[str, Any], title: str) -> str:
    """Scalars in one table, then one table per breakdown field or per-task block (tasks, groups)."""
    lines = [f"## {title}", "", "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {_fmt(v)} |" for k, v in scores.items() if not isinstance(v, (dict, list))]
    lines += [f"| {k} | {', '.join(v) or '-'} |" for k, v in scores.items() if isinstance(v, list)]
    counts = scores.get("counts", {})
    tables = [(f"breakdown: {f}", vals, counts.get(f, {})) for f, vals in scores.get("breakdown", {}).items()]
    for k, v in scores.items():  # per-task blocks (tasks, groups) that do not repeat a breakdown table
        if isinstance(v, dict) and k not in ("breakdown", "counts") and all(v != t[1] for t in tables):
            tables.append((k, v, next((c for c in counts.values() if set(v) <= set(c)), {})))
    for name, values, n in tables:
        lines += ["", f"### {name}", "", "| value | accuracy | n |", "|---|---|---|"]
        lines += [f"| {v} | {_fmt(acc)} | {n.get(v, '')} |" for v, acc in values.items()]
    return "\n".join(lines) + "\n"


def rescore(run_dir: Path, parser: str | None = None, write: bool = False) -> tuple[dict[str, Any], str]:
    """Scores and the markdown summary of ``run_dir``; with ``write`` also updates its metrics.json."""
    cfg = load_benchmark_config(run_dir, parser)
    bench = benchmark_class(cfg.name)(cfg)
    records, bad = read_predictions(run_dir / PREDICTIONS)
    path = run_dir / METRICS
    metrics = read_json_object(path)
    if not records:
        raise ValueError(
            f"{run_dir / PREDICTIONS} holds no readable prediction ({bad} line(s) skipped): nothing to rescore"
        )
    records, foreign = only_asked(records, run_questions(cfg, metrics), run_dir / PREDICTIONS)
    if not records:
        raise ValueError(
            f"{run_dir / PREDICTIONS} holds no answer to this run's questions ({foreign} answer(s) to others "
            f"skipped): nothing to rescore"
        )
    records, changed = reparse(records, bench)
    scores = bench.score(records)
    parser_name = Parser(cfg.parser).value
    text = markdown(scores, f"{cfg.name} rescored with the {parser_name} parser ({run_dir})")
    text += f"\n{changed} of {len(records)} answers parse differently from the stored predictions"
    text += f"; {bad} unreadable lines skipped" if bad else ""
    text += f"; {foreign} answers to questions that are not this run's left out.\n" if foreign else ".\n"
    if write:
        if metrics is None and path.is_file():
            raise ValueError(f"{path} is corrupt, so --write would lose its other keys: fix or delete it, then rerun")
        metrics = metrics or {}
        metrics.update(scores=scores, parser=parser_name, subset=describe(cfg))
        rewrite(path, json.dumps(metrics, indent=2) + "\n")  # whole or not at all: the run's other keys are in it
    return scores, text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m infinipotv.data.rescore", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--parser", choices=[p.value for p in Parser], help="default: the parser the run used")
    ap.add_argument("--write", action="store_true", help="update RUN_DIR/metrics.json with the new scores")
    args = ap.parse_args(argv)
    with warnings.catch_warnings(record=True) as skipped:
        warnings.simplefilter("always", SkippedInput)
        try:
            _, text = rescore(args.run_dir, args.parser, args.write)
        except (FileNotFoundError, ValueError, RunDirError) as err:  # no run files, a bad config, a full disk
            text, error = "", err
        else:
            error = None
    print_skipped(skipped)
    if error is not None:
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


def print_skipped(caught: list[warnings.WarningMessage]) -> None:
    """Each :class:`SkippedInput` as one ``warning:`` line on stderr (other warnings go on as usual)."""
    for w in caught:
        if issubclass(w.category, SkippedInput):
            print(f"warning: {w.message}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)


if __name__ == "__main__":
    sys.exit(main())
