"""Re-parse and re-score a finished run from its files alone, no model: ``python -m infinipotv.data.rescore RUN_DIR``.

Reads ``RUN_DIR/config.yaml`` (its ``benchmark`` node) and ``RUN_DIR/predictions.jsonl``, parses every raw output
again with the configured parser (or ``--parser``), prints a markdown summary, and with ``--write`` stores the new
scores in ``RUN_DIR/metrics.json`` (keys ``scores``, ``parser``, ``subset``; other keys are kept). This is how a
table switches between the faithful and the strict parser, or picks up a parser fix, without a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from infinipotv.config import BenchmarkConfig, Parser
from infinipotv.data.base import Benchmark
from infinipotv.data.loading import benchmark_class, question_from_record
from infinipotv.data.subset import describe
from infinipotv.rundir import CONFIG, METRICS, PREDICTIONS, read_jsonl

Record = dict[str, Any]


def load_benchmark_config(run_dir: Path, parser: str | None = None) -> BenchmarkConfig:
    """The run's benchmark config, typed; ``parser`` overrides the one it ran with."""
    path = run_dir / CONFIG
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: RUN_DIR must be a run directory written by the job")
    node = OmegaConf.load(path).get("benchmark")
    if node is None:
        raise ValueError(f"{path} has no 'benchmark' node")
    cfg = OmegaConf.merge(OmegaConf.structured(BenchmarkConfig), node)
    if parser is not None:
        cfg.parser = Parser(parser)
    return OmegaConf.to_object(cfg)


def read_predictions(path: Path) -> tuple[list[Record], int]:
    """The last record of each question (a resumed job may repeat one) and the number of unreadable lines
    (a job killed mid-write leaves a truncated last line)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: the run wrote no predictions")
    records, bad = read_jsonl(path)
    return list({str(r["question_id"]): r for r in records}.values()), bad


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
    records, changed = reparse(records, bench)
    scores = bench.score(records)
    parser_name = Parser(cfg.parser).value
    text = markdown(scores, f"{cfg.name} rescored with the {parser_name} parser ({run_dir})")
    text += f"\n{changed} of {len(records)} answers parse differently from the stored predictions"
    text += f"; {bad} unreadable lines skipped.\n" if bad else ".\n"
    if write:
        path = run_dir / METRICS
        metrics = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        metrics.update(scores=scores, parser=parser_name, subset=describe(cfg))
        path.write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    return scores, text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m infinipotv.data.rescore", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--parser", choices=[p.value for p in Parser], help="default: the parser the run used")
    ap.add_argument("--write", action="store_true", help="update RUN_DIR/metrics.json with the new scores")
    args = ap.parse_args(argv)
    _, text = rescore(args.run_dir, args.parser, args.write)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
