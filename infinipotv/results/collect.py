"""Run directories -> :class:`Run` objects -> one tidy DataFrame (a row per run x benchmark x score path).

A run directory is whatever holds a ``config.yaml`` beside a ``predictions.jsonl`` or ``metrics.json`` (the job's
contract). Within one directory a question answered twice (a resumed job) counts once, its last answer. Shards of one
sharded run (same resolved config except ``benchmark.shard``) are merged here: their predictions are concatenated and
re-scored by the benchmark's own scorer, so a merged run is scored exactly like an unsharded one; a question found in
two shards is refused, never silently counted twice. A corrupt file is skipped with a
:class:`~infinipotv.data.rescore.SkippedInput` warning naming it (and the line): an unreadable config.yaml (or one
empty, cut short, without its benchmark) skips its run directory, a corrupt metrics.json leaves the run partial and
scored from its predictions, a score no accuracy can be (NaN, 175), or one its own predictions contradict (a
hand-edited or stale metrics.json), is scored from the predictions, so that a table's cell and its paired difference
count the same answers. An answer to a question the run was not asked is left out, with one warning naming the file
and the count.
"""

from __future__ import annotations

import json
import statistics
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from infinipotv.config import ConfigError, Parser
from infinipotv.data.loading import benchmark_class
from infinipotv.data.rescore import (
    benchmark_config,
    only_asked,
    read_config,
    read_json_object,
    read_predictions,
    reparse,
    run_questions,
    skip,
)
from infinipotv.data.scoring import gate_counts
from infinipotv.data.subset import describe, parse_shard
from infinipotv.results.scoring import (
    ScorerError,
    contradicted_scores,
    flatten_scores,
    has_scorer,
    implausible_scores,
    replace_scores,
    score_records,
    score_weights,
)
from infinipotv.runs import CONFIG, MEMORY, METRICS, PREDICTIONS, PROVENANCE
from infinipotv.runs.provenance import label, sittings

IGNORED_FOR_MERGE = ("benchmark.shard", "run_dir")  # keys that differ between shards of one run
MEMORY_COUNTS = ("frames", "frames_with_questions_only")  # metrics.json's memory counts: shards add them up
RATES = ("encode_fps",)  # time's rates, derived by with_rates (never summed over shards)
RUN_SECTIONS = ("model", "compress", "quant", "benchmark")  # what a run's config.yaml must hold to say what ran
# the config keys a table labels its rows with (model, policy, kv, benchmark): each must be one name, never a list
LABELS = (("model", "family"), ("compress", "name"), ("quant", "name"), ("benchmark", "name"))
CANONICAL = ("model", "policy", "kv", "budget_tokens", "budget_bytes", "storage", "benchmark", "experiment")


class DuplicateQuestionError(ValueError):
    """The same question id appears twice in what should be one run."""


@dataclass
class Run:
    """One evaluation (a run dir, or the merged shards of one): its config, predictions and scores."""

    dirs: tuple[Path, ...]
    id: str
    config: dict[str, Any]
    predictions: list[dict[str, Any]]
    scores: dict[str, Any]
    metrics: dict[str, Any]
    provenance: dict[str, Any]
    complete: bool
    subset: bool
    problems: list[str] = field(default_factory=list)

    @cached_property
    def flat_config(self) -> dict[str, Any]:
        return _flatten(self.config)

    @cached_property
    def fields(self) -> dict[str, Any]:
        """The canonical descriptors tables match on (names shared with the published CSV) + the flat config."""
        cfg = self.config
        model = cfg.get("model") or {}
        checkpoint = model.get("checkpoint")
        name = str(checkpoint).rstrip("/").rsplit("/", 1)[-1] if checkpoint else str(model.get("family"))
        compress = cfg.get("compress") or {}
        storage = self.metrics.get("storage")
        return {
            **self.flat_config,
            "model": f"{name}-tiny" if model.get("tiny") else name,
            "policy": compress.get("name"),
            "kv": (cfg.get("quant") or {}).get("name"),
            "budget_tokens": self.metrics.get("budget_tokens", compress.get("budget")),
            "budget_bytes": self.metrics.get("budget_bytes"),
            "storage": json.dumps(storage, sort_keys=True) if isinstance(storage, Mapping) else storage,
            "benchmark": (cfg.get("benchmark") or {}).get("name"),
            "experiment": cfg.get("experiment"),
        }

    @cached_property
    def over_budget(self) -> bool:
        """Its measured accelerator peak exceeds its budget's bytes: it held more than the equal memory it is compared
        at (marked in tables, off the Pareto front)."""
        return self.exceeds(self.metrics.get("budget_bytes"))

    def exceeds(self, budget_bytes: Any) -> bool:
        """Its measured accelerator peak exceeds ``budget_bytes``: its own budget's (:attr:`over_budget`), or the
        bytes a table holds every row to (``TableSpec.budget_mib``), which differ for a row whose |M| was chosen to
        fit another budget's bytes (StreamingTOM's equal-bytes row). No peak or no budget: not over."""
        peak = (self.metrics.get("memory") or {}).get("peak_accelerator_bytes")
        return _number(peak) and _number(budget_bytes) and peak > budget_bytes

    @cached_property
    def never_evicts(self) -> bool:
        """No compression pass and no byte-cap pass in a whole run: it held every token it streamed (the full cache,
        a budget that outlasts the stream, a store that only grows), so its budget constrained nothing (marked)."""
        time = self.metrics.get("time") or {}
        return self.complete and time.get("compress_passes") == 0 and time.get("byte_cap_passes") == 0

    @cached_property
    def selection(self) -> dict[str, Any]:
        """Which of its benchmark's questions the run was asked (ids, fraction, limit; shards aside): runs compared
        in one table row or one paired statistic must have been asked the same selection."""
        bench = self.config.get("benchmark") or {}
        return {**_subset(bench), **{k: bench.get(k) for k in ("ids", "part", "options")}}

    @cached_property
    def rescored(self) -> dict[str, Any]:
        """Scores from the predictions by the benchmark's own scorer (for a score metrics.json lacks); ScorerError
        when the benchmark has none."""
        return score_records(self.config.get("benchmark") or {}, self.predictions) if self.predictions else {}

    @cached_property
    def question_counts(self) -> dict[str, int]:
        """Questions behind each score path (nonzero weight in the scorer's mean); raises ScorerError without one."""
        if not self.predictions:
            return {}
        weights = score_weights(self.config["benchmark"], self.predictions)
        return {path: int((w != 0).sum()) for path, w in weights.items()}

    @cached_property
    def mixed_code(self) -> list[str]:
        """How the code of the sittings (and shards) that answered this run differs among them, as provenance.json
        records it (:mod:`infinipotv.runs.provenance`): a run resumed at another commit, on a dirty tree or with other
        packages, or shards made at different commits, is one run of mixed code, refused as two such runs are."""
        parts = [{"git_sha": label(s), "packages": s.get("packages")} for s in sittings(self.provenance)]
        return list(dict.fromkeys(d for part in parts[1:] for d in _code_differences(parts[0], part)))

    def memory(self) -> pd.DataFrame:
        """The streaming memory trace (``memory.jsonl`` of every shard), one row per step; empty when none."""
        frames = [pd.read_json(d / MEMORY, lines=True) for d in self.dirs if (d / MEMORY).is_file()]
        frames = [f for f in frames if not f.empty]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def code_differences(run: Run, other: Run) -> list[str]:
    """How the code that made ``other`` differs from ``run``'s, as their provenance records it (``git_sha b vs a``,
    ``transformers 4.46.0 vs 4.45.2``); what only one of them records is no evidence and is left out."""
    return _code_differences(run.provenance, other.provenance)


def _code_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    out = []
    if a.get("git_sha") and b.get("git_sha") and str(a["git_sha"]) != str(b["git_sha"]):
        out.append(f"git_sha {b['git_sha']} vs {a['git_sha']}")
    packages_a, packages_b = a.get("packages"), b.get("packages")
    if isinstance(packages_a, Mapping) and isinstance(packages_b, Mapping):
        for name in sorted(set(packages_a) & set(packages_b)):
            if packages_a[name] != packages_b[name]:
                out.append(f"{name} {packages_b[name]} vs {packages_a[name]}")
    return out


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config -> ``{"compress.budget": 6000, ...}`` (lists kept as values)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if path == "table":  # the experiment's table spec: presentation, not part of what was run
            continue
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{path}."))
        else:
            flat[path] = value
    return flat


def find_run_dirs(root: str | Path) -> list[Path]:
    """Every run directory under ``root`` (recursively), sorted."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"runs folder {root} does not exist; pass --runs DIR with the sweep's output folder")
    return sorted(
        p.parent for p in root.rglob(CONFIG) if (p.parent / PREDICTIONS).is_file() or (p.parent / METRICS).is_file()
    )


def _check_unique(records: Iterable[Mapping[str, Any]], sources: Sequence[Path]) -> None:
    seen: dict[str, Path] = {}
    for record, source in zip(records, sources):
        qid = str(record.get("question_id"))
        if qid in seen:
            raise DuplicateQuestionError(
                f"question_id {qid!r} of {record.get('benchmark')} appears twice: in {seen[qid]} and {source}. "
                "Two run dirs cover the same questions (a re-run shard?): move the stale one out of the runs folder"
            )
        seen[qid] = source


def _subset(benchmark: Mapping[str, Any]) -> dict[str, Any]:
    """The metrics' ``subset`` block for the selection with shards aside (ids, fraction, limit): a merged run, or one
    shard judged as part of its whole run."""
    return describe(benchmark_config({**benchmark, "shard": None}))


def _benchmark_block(config: dict[str, Any], path: Path) -> dict[str, Any]:
    """The run's ``benchmark`` block, checked typed; a ValueError naming the file when the config lacks a section the
    job always writes (an empty file, one cut short), its benchmark block does not read as one, or a name a table
    labels rows with is not one name (``compress.name: [tar, van]`` would become a row of its own)."""
    missing = [k for k in RUN_SECTIONS if not isinstance(config.get(k), Mapping)]
    if missing:
        raise ValueError(
            f"{path}: no {', '.join(f'`{k}:`' for k in missing)} section (an empty or cut-short config.yaml?)"
        )
    bench = config["benchmark"]
    try:
        _subset(bench)
    except Exception as err:  # a wrong type, an unknown key, a bad shard: the block does not say what ran
        raise ValueError(
            f"{path}: its benchmark section does not read ({type(err).__name__}: {' '.join(str(err).split())})"
        ) from None
    if not bench.get("name"):
        raise ValueError(f"{path}: its benchmark section names no benchmark (`name:`)")
    for section, key in LABELS:
        value = config[section].get(key)
        if not isinstance(value, str) or not value:
            raise ValueError(f"{path}: {section}.{key} is {value!r}, not a name (a hand-edited config.yaml?)")
    return bench


def _checked_scores(scores: dict[str, Any], fresh: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """``scores`` as metrics.json holds them, where every value a score cannot take (not a number, NaN, outside
    [0, 100]; :func:`implausible_scores`) or that the run's own predictions contradict (:func:`contradicted_scores`)
    is replaced by ``fresh``, the one scored from the predictions (none where they cannot be scored), with one
    warning each: a table's cell must count the answers its paired difference counts."""
    bad = implausible_scores(scores)
    if bad:
        shown = ", ".join(f"{k} is {v}" for k, v in bad.items())
        skip(f"{path}: {shown}: not a score in [0, 100]; scored from the run's predictions instead")
        scores = replace_scores(scores, set(bad), fresh)
    differ = contradicted_scores(scores, fresh) if fresh else {}
    if differ:
        shown = ", ".join(f"{k} is {_shown(a)} there, {_shown(b)} from them" for k, (a, b) in list(differ.items())[:3])
        skip(
            f"{path}: its scores are not its predictions' ({shown}{', ...' if len(differ) > 3 else ''}); the tables "
            f"use the predictions' (`python -m infinipotv.data.rescore {path.parent} --write` stores them)"
        )
        scores = replace_scores(scores, set(differ), fresh)
    return scores


def _shown(score: float | None) -> str:
    return "none" if score is None else f"{score:.1f}"


def _as_scored(bench: Mapping[str, Any], metrics: Mapping[str, Any], predictions: list[dict]) -> list[dict]:
    """The answers as metrics.json's scores read them: ``rescore --parser P --write`` records P beside the scores it
    writes while predictions.jsonl keeps the run's own parses, so they are parsed again with P (the paired statistics
    count these answers too)."""
    parser = metrics.get("parser")
    if parser == bench.get("parser") or parser not in {p.value for p in Parser}:
        return predictions
    cfg = benchmark_config({**bench, "parser": parser, "shard": None})
    return reparse(predictions, benchmark_class(cfg.name)(cfg))[0]


def _with_option_defaults(bench: dict[str, Any]) -> dict[str, Any]:
    """``bench`` with each benchmark option its config.yaml lacks at the option's default, in place: a run recorded
    before an option existed ran at that default (the job resumes it so), and reads as such in tables and in the
    question sets that pair runs (``answer_cue: line`` for a symbolic run from before the knob)."""
    options = bench.get("options")
    if options is None or isinstance(options, Mapping):
        try:
            defaults = benchmark_class(str(bench["name"])).option_defaults
        except ConfigError:  # an unregistered benchmark: its options are what the file says
            return bench
        bench["options"] = {**{k: v for k, v in defaults.items() if k not in (options or {})}, **(options or {})}
    return bench


def load_run(path: str | Path, root: str | Path | None = None) -> Run:
    """One run directory as a :class:`Run` (not merged with its sibling shards); a ValueError naming the file when
    its config.yaml does not say what ran."""
    path = Path(path)
    config = read_config(path / CONFIG)
    bench = _with_option_defaults(_benchmark_block(config, path / CONFIG))
    problems = []
    try:
        predictions, unreadable = read_predictions(path / PREDICTIONS)
    except FileNotFoundError:
        predictions, unreadable = [], 0
        problems.append("predictions.jsonl missing")
    if unreadable:
        problems.append(f"{unreadable} unreadable line(s) in predictions.jsonl")
    metrics = with_rates(read_json_object(path / METRICS) or {})
    provenance = read_json_object(path / PROVENANCE) or {}
    if predictions:  # the question set: metrics.json's, else (a run that did not finish) the benchmark's selection
        known = "question_ids" in metrics or not metrics  # a run from before question_ids: not checked
        asked = run_questions(benchmark_config(bench), metrics) if known else None
        predictions, foreign = only_asked(predictions, asked, path / PREDICTIONS)
        if foreign:
            problems.append(f"{foreign} answer(s) to questions the run did not ask in predictions.jsonl")
    if not metrics:
        problems.append(
            "metrics.json corrupt" if (path / METRICS).is_file() else "metrics.json missing (the job did not finish)"
        )
    elif not metrics.get("complete", False):
        problems.append(f"incomplete: {metrics.get('n_questions')} of {metrics.get('n_expected')} questions")
    scorable = bool(predictions) and has_scorer(bench.get("name"))
    if scorable:
        predictions = _as_scored(bench, metrics, predictions)
    fresh = score_records(bench, predictions) if scorable else {}
    stored = metrics.get("scores")
    scores = _checked_scores(dict(stored), fresh, path / METRICS) if isinstance(stored, Mapping) and stored else fresh
    run_id = str(path.relative_to(root)) if root is not None else str(path)
    subset = bool(_subset(bench)["is_subset"])
    return Run((path,), run_id, config, predictions, scores, metrics, provenance, not problems, subset, problems)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def with_rates(metrics: dict[str, Any]) -> dict[str, Any]:
    """``metrics`` with what its counts give, derived here rather than written by the job so that merged shards
    get them from their summed counts and runs from before a measurement existed get it too: ``time.encode_fps``,
    frames streamed per second of encoding and prefilling (``memory.frames`` / ``time.encode_seconds``), and
    ``memory.peak_total_bytes`` of a run that never held a byte on the host (its accelerator peak, exactly)."""
    memory = metrics.get("memory") or {}
    if "peak_total_bytes" not in memory and memory.get("peak_host_bytes") == 0:
        if _number(memory.get("peak_accelerator_bytes")):
            metrics = {**metrics, "memory": {**memory, "peak_total_bytes": memory["peak_accelerator_bytes"]}}
    frames = memory.get("frames")
    seconds = (metrics.get("time") or {}).get("encode_seconds")
    if not (_number(frames) and _number(seconds) and seconds > 0):
        return metrics
    return {**metrics, "time": {**metrics["time"], "encode_fps": frames / seconds}}


def _merge_key(run: Run) -> str:
    kept = {k: v for k, v in run.flat_config.items() if k not in IGNORED_FOR_MERGE}
    return json.dumps(kept, sort_keys=True, default=str)


def _merge_times(times: list[dict]) -> dict:
    """Shards' times: seconds add up; the per-question first-token times are one mapping, their summary made anew
    from it (a mean of shard means would weigh a small shard like a large one)."""
    keys = {k for t in times for k in t} - set(RATES)
    merged: dict = {
        k: sum(t.get(k) or 0 for t in times)
        for k in keys
        if all(isinstance(t.get(k), (int, float, type(None))) for t in times)
    }
    by_question = {q: s for t in times for q, s in (t.get("ttft_s_by_question") or {}).items()}
    if by_question:
        values = list(by_question.values())
        merged["ttft_s"] = {"mean": statistics.fmean(values), "median": statistics.median(values), "n": len(values)}
        merged["ttft_s_by_question"] = by_question
    return merged


def merge_shards(shards: Sequence[Run]) -> Run:
    """The whole run from its shards: predictions concatenated in shard order (duplicates refused), re-scored."""
    indexed = sorted(((parse_shard(s.config["benchmark"]["shard"]), s) for s in shards), key=lambda x: x[0])
    totals = {n for (_, n), _ in indexed}
    if len(totals) != 1:
        dirs = [str(s.dirs[0]) for s in shards]
        raise ValueError(f"shards of one run disagree on the shard count {sorted(totals)}: {dirs}")
    (total,) = totals
    shards = [s for _, s in indexed]
    problems = [f"shard {i}/{n}: {p}" for (i, n), s in indexed for p in s.problems]
    missing = sorted(set(range(total)) - {i for (i, _), _ in indexed})
    if missing:
        problems.append(f"missing shard(s) {', '.join(f'{i}/{total}' for i in missing)}")
    predictions = [r for s in shards for r in s.predictions]
    _check_unique(predictions, [s.dirs[0] for s in shards for _ in s.predictions])
    config = json.loads(json.dumps(shards[0].config))
    config["benchmark"]["shard"] = None
    scores = score_records(config["benchmark"], predictions) if predictions else {}
    peaks = [s.metrics.get("memory") or {} for s in shards]
    times = [s.metrics.get("time") or {} for s in shards]
    metrics = {
        **shards[0].metrics,
        "scores": scores,
        "subset": _subset(config["benchmark"]),
        "n_questions": len(predictions),
        "n_expected": sum(s.metrics.get("n_expected") or 0 for s in shards),
        "question_ids": [q for s in shards for q in s.metrics.get("question_ids") or []],
        "n_errors": sum(r.get("error") is not None for r in predictions),
        "complete": not problems,
        "memory": {
            k: (sum if k in MEMORY_COUNTS else max)(p.get(k) or 0 for p in peaks) for k in {k for p in peaks for k in p}
        },
        "time": _merge_times(times),
    }
    starts = [s.provenance["start"] for s in shards if s.provenance.get("start")]
    ends = [s.provenance["end"] for s in shards if s.provenance.get("end")]
    provenance = {
        **shards[0].provenance,
        "git_sha": ",".join(sorted({str(s.provenance.get("git_sha")) for s in shards})),
        "start": min(starts, default=None),
        "end": max(ends, default=None),
        "sittings": [sitting for s in shards for sitting in sittings(s.provenance)],  # checked as one run's
    }
    run_id = f"{shards[0].id} [{len(shards)} of {total} shards]"
    dirs = tuple(d for s in shards for d in s.dirs)
    subset = metrics["subset"]["is_subset"]
    metrics.pop("gate", None)  # shard 0's: counted again over every shard's answers
    gate = gate_counts(predictions)
    if gate is not None:
        metrics["gate"] = gate
    metrics = with_rates(metrics)
    return Run(dirs, run_id, config, predictions, scores, metrics, provenance, not problems, subset, problems)


def load_runs(root: str | Path, studies: Sequence[str] | None = None) -> list[Run]:
    """Every readable run under ``root`` (only under its ``studies`` folders, when given: ``root/NAME``, the ones
    that exist, ids still relative to ``root``), shards merged, each flagged complete or with the problems that make
    it partial (corrupt files, and a run whose every answer is an error, skipped with a warning)."""
    root = Path(root)
    if studies is None:
        run_dirs = find_run_dirs(root)
    else:
        folders = [root / name for name in studies if (root / name).is_dir()]
        if not folders:
            raise FileNotFoundError(
                f"no study folder {' or '.join(str(root / n) for n in studies)}: run the study first, or pass --runs "
                f"DIR with the folder that holds its runs"
            )
        run_dirs = sorted(d for folder in folders for d in find_run_dirs(folder))
    singles = []
    for run_dir in run_dirs:
        try:
            run = load_run(run_dir, root)
        except ValueError as err:  # an unreadable config.yaml: nothing says what this run was
            skip(f"{err}; run directory skipped")
            continue
        if run.metrics.get("failed"):  # every answer an error (answers.failure): its 0.0 is no score
            skip(f"{run_dir}: the run failed: {run.metrics['failed']}; run directory skipped")
            continue
        singles.append(run)
    groups: dict[str, list[Run]] = {}
    runs = []
    for run in singles:
        if (run.config.get("benchmark") or {}).get("shard"):
            groups.setdefault(_merge_key(run), []).append(run)
        else:
            runs.append(run)
    runs.extend(merge_shards(shards) for shards in groups.values())
    return sorted(runs, key=lambda r: r.id)


def runs_frame(runs: Sequence[Run], counts: bool = True) -> pd.DataFrame:
    """The tidy table: one row per run x benchmark x score path, with descriptors, flags and provenance.

    ``n`` is the number of questions behind each score, from the scorer's own weights (NaN when the benchmark has no
    registered scorer, or with ``counts=False``, which skips probing the scorer once per benchmark question set).
    """
    rows = []
    for run in runs:
        fields = run.fields
        n_by_path: dict[str, int] = {}
        if counts:
            try:
                n_by_path = run.question_counts
            except ScorerError as err:
                warnings.warn(f"{run.id}: per-score question counts unavailable: {err}", stacklevel=2)
        memory = run.metrics.get("memory") or {}
        base = {
            "run": run.id,
            **{k: fields[k] for k in CANONICAL},
            "n_run": len(run.predictions),
            "n_questions": run.metrics.get("n_questions"),
            "subset": run.subset,
            "complete": run.complete,
            "problems": "; ".join(run.problems),
            "shards": len(run.dirs),
            "over_budget": run.over_budget,
            "never_evicts": run.never_evicts,
            **{k: memory.get(k) for k in ("peak_cache_tokens", "peak_cache_bytes", "peak_memory_bytes")},
            **{k: run.provenance.get(k) for k in ("git_sha", "host", "seed", "start", "end")},
        }
        config = {k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in run.flat_config.items()}
        for path, value in flatten_scores(run.scores).items():
            rows.append(
                {**base, "score": path, "value": value, "missing": value is None, "n": n_by_path.get(path), **config}
            )
    return pd.DataFrame(rows)


def collect(root: str | Path, counts: bool = True) -> pd.DataFrame:
    """``runs_frame(load_runs(root))``: the whole sweep under ``root`` as one tidy DataFrame."""
    return runs_frame(load_runs(root), counts=counts)
