"""Score an lmms-eval samples file with our benchmark code, beside lmms-eval's own number.

``python -m infinipotv.lmms.parity OUT/MODEL/DATE_samples_videomme_local.jsonl --task videomme``

Every answer lmms-eval scored (``filtered_resps``) is parsed again by our benchmark (``faithful`` and ``strict``) and
scored by our code. The report puts side by side: lmms-eval's number (from the results file written with the samples,
else recomputed from the samples' own parses), ours in lmms-eval's convention (its scale and, for MLVU, a missing task
counted as 0), ours as run.py reports it, and the strict parser's, with every question where strict differs.

Parity holds when our faithful parser agrees with lmms-eval on every question and the numbers agree. Two things can
never agree question by question and are listed apart: EgoSchema and LongVideoBench answer an unparseable reply with
a random letter (lmms-eval from its global random state, ours seeded by question); for those questions the check uses
lmms-eval's letter. Numbers are compared to 1e-9: MLVU's is a sum over a Python set, whose order (and so the last bit
of the float) varies from process to process. Exit status 0 when parity holds, 1 when it does not.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infinipotv.config import BenchmarkConfig, Parser
from infinipotv.data.base import Benchmark, Question
from infinipotv.data.loading import benchmark_class, question_from_record
from infinipotv.data.mlvu import TASKS as MLVU_TASKS
from infinipotv.data.parsing import egoschema, first_capital

Record = dict[str, Any]
LOCAL_SUFFIX = "_local"  # our task overrides (infinipotv/lmms/tasks) are lmms-eval's tasks under this suffix


def _accuracy(records: list[Record]) -> tuple[int, int]:
    return sum(bool(r["correct"]) for r in records), len(records)


def _percent(records: list[Record]) -> float:
    """Video-MME: 100 * correct / answered."""
    correct, n = _accuracy(records)
    return 100 * correct / n if n else 0


def _mlvu_mean(records: list[Record]) -> float:
    """MLVU dev: the mean of the 7 task accuracies, a task without questions counted as 0."""
    tasks = {t: [r for r in records if r["categories"]["task_type"] == t] for t in MLVU_TASKS}
    return sum(_percent(rs) for rs in tasks.values()) / len(MLVU_TASKS)


def _fraction(records: list[Record]) -> float:
    """EgoSchema: correct / answered, on a 0-1 scale."""
    correct, n = _accuracy(records)
    return correct / n if n else 0


def _lvb_overall(records: list[Record]) -> float:
    """LongVideoBench: accuracy over the duration-group and question-category subsets (each question counted in
    both, so this is the plain accuracy), weighted by subset size, 0-1 scale, rounded to 5 decimals."""
    subsets: dict[Any, list[Record]] = {}
    for r in records:
        for key in ("duration_group", "question_category"):
            subsets.setdefault(r["categories"][key], []).append(r)
    if not subsets:
        return 0
    return round(sum(_fraction(rs) * len(rs) for rs in subsets.values()) / sum(map(len, subsets.values())), 5)


def _videomme(line: dict) -> tuple[Record, str]:
    m = line["videomme_perception_score"]
    categories = {
        "duration": m["duration"],
        "domain": m["category"],
        "sub_category": m["sub_category"],
        "task_type": m["task_category"],
    }
    return {"question_id": m["question_id"], "categories": categories, "gold": m["answer"]}, m["pred_answer"]


def _mlvu(line: dict) -> tuple[Record, str]:
    m = line["mlvu_percetion_score"]  # sic: lmms-eval's metric name; its question_id is the question text
    record = {"question_id": f"doc{line['doc_id']}", "categories": {"task_type": m["task_type"]}, "gold": m["answer"]}
    return record, m["pred_answer"]


def _egoschema(line: dict) -> tuple[Record, str]:
    (video,) = line["submission"]  # {video_idx: predicted index}; the Subset's question_idx is its video_idx
    pred, gold = line["score"]["pred"], int(line["score"]["ground_truth"])
    return {"question_id": video, "categories": {}, "gold": "ABCDE"[gold]}, "ABCDE"[pred] if 0 <= pred < 5 else ""


def _longvideobench(line: dict) -> tuple[Record, str]:
    m = line["lvb_acc"]
    categories = {"duration_group": str(m["duration_group"]), "question_category": m["question_category"]}
    return {"question_id": m["id"], "categories": categories, "gold": m["answer"]}, m["parsed_pred"]


def _ego_draw(output: str, q: Question, seed: int) -> bool:
    return egoschema(output, q.options, q.qid, seed, random_fallback=False) is None


def _lvb_draw(output: str, q: Question, seed: int) -> bool:
    return first_capital(output, "".join(q.options), q.qid, seed, random_fallback=False) is None


@dataclass(frozen=True)
class Family:
    """How one lmms-eval task family maps onto our benchmark: its metric, its sample lines, its aggregate."""

    benchmark: str  # our benchmark name
    metric: str  # lmms-eval's metric (key of the per-sample dict and, with ",none", of the results file)
    read: Callable[[dict], tuple[Record, str]]  # samples line -> (our record without the parse, lmms-eval's letter)
    aggregate: Callable[[list[Record]], float]  # lmms-eval's number from parsed records, its arithmetic and scale
    scale: str
    strict_means: str  # what the strict parser changes, for the report
    draws: Callable[[str, Question, int], bool] | None = None  # would our faithful parser draw a random letter?


FAMILIES: dict[str, Family] = {
    "videomme": Family(
        "videomme",
        "videomme_perception_score",
        _videomme,
        _percent,
        "0-100",
        "strict needs a standalone letter and has no fallback; lmms-eval also reads letters inside "
        "words, any letter after an answer phrase, and else the last capital option letter",
    ),
    "mlvu_dev": Family(
        "mlvu",
        "mlvu_percetion_score",
        _mlvu,
        _mlvu_mean,
        "0-100, missing task = 0",
        "as Video-MME: strict needs a standalone letter and has no fallback",
    ),
    "egoschema_subset": Family(
        "egoschema",
        "score",
        _egoschema,
        _fraction,
        "0-1",
        "strict scores an unparseable reply as wrong (no random letter) and matches long "
        "replies against the bare option text",
        _ego_draw,
    ),
    "longvideobench_val_v": Family(
        "longvideobench",
        "lvb_acc",
        _longvideobench,
        _lvb_overall,
        "0-1, 5 decimals",
        "strict reads the first standalone option letter ('Answer: B' is B, not the A of "
        "'Answer') and scores an unparseable reply as wrong",
        _lvb_draw,
    ),
}


def family_of(task: str) -> Family:
    base = task.removesuffix(LOCAL_SUFFIX)
    if base not in FAMILIES:
        raise ValueError(f"--task {task}: parity covers {', '.join(FAMILIES)} (and their {LOCAL_SUFFIX} versions)")
    return FAMILIES[base]


def task_from_name(samples: Path) -> str:
    """The task in lmms-eval's samples file name ``<date>_samples_<task>.jsonl``."""
    if "_samples_" not in samples.name or samples.suffix != ".jsonl":
        raise ValueError(f"{samples.name} is not named <date>_samples_<task>.jsonl: pass --task")
    return samples.stem.split("_samples_", 1)[1]


def lmms_number(samples: Path, task: str, family: Family, results: Path | None) -> tuple[float | None, str]:
    """lmms-eval's aggregate from its results file (``<date>_results.json`` beside the samples), under the task name
    of the samples file (``--task videomme`` may score a ``videomme_local`` run)."""
    path = results or samples.with_name(samples.name.split("_samples_", 1)[0] + "_results.json")
    if not path.is_file():
        return None, f"no results file ({path.name})"
    blocks = json.loads(path.read_text(encoding="utf-8")).get("results", {})
    names = [task_from_name(samples), task] if "_samples_" in samples.name else [task]
    for name in names:
        value = blocks.get(name, {}).get(f"{family.metric},none")
        if value is not None:
            return float(value), f"results file {path.name}"
    return None, f"{' or '.join(dict.fromkeys(names))} not in {path.name}"


@dataclass
class ParityReport:
    task: str
    family: Family
    n: int
    lmms_value: float  # lmms-eval's number
    lmms_source: str
    ours: float  # our faithful parses, lmms-eval's arithmetic
    ours_with_their_draws: float  # the same, lmms-eval's letters where both parsers drew at random
    scores: dict[str, Any]  # our benchmark's own report (faithful)
    strict_scores: dict[str, Any]
    strict_value: float  # strict parses, lmms-eval's arithmetic
    mismatches: list[dict] = field(default_factory=list)  # faithful parse != lmms-eval's parse (no draw involved)
    draws: list[dict] = field(default_factory=list)
    strict_diffs: list[dict] = field(default_factory=list)
    stripped: int = 0  # answers whose reasoning blocks lmms-eval removed before parsing

    @property
    def exact(self) -> bool:
        return not self.mismatches and math.isclose(
            self.ours_with_their_draws, self.lmms_value, rel_tol=0, abs_tol=1e-9
        )


def _scored(records: list[Record], parses: list[str | None]) -> list[Record]:
    return [
        {**r, "parsed": p, "correct": p is not None and p == r["gold"], "error": None} for r, p in zip(records, parses)
    ]


def parity(samples: Path, task: str | None = None, results: Path | None = None, seed: int = 0) -> ParityReport:
    """Re-parse and re-score ``samples`` (an lmms-eval ``--log_samples`` file) with our benchmark code."""
    task = task or task_from_name(samples)
    family = family_of(task)
    lines = [json.loads(s) for s in samples.read_text(encoding="utf-8").splitlines() if s.strip()]
    if not lines:
        raise ValueError(f"{samples} holds no samples")
    bench: dict[Parser, Benchmark] = {
        p: benchmark_class(family.benchmark)(BenchmarkConfig(name=family.benchmark, root=".", parser=p, seed=seed))
        for p in Parser
    }
    records, theirs, faithful, strict, report_rows = [], [], [], [], []
    stripped = 0
    for i, line in enumerate(lines, start=1):
        try:
            record, their = family.read(line)
        except KeyError as err:
            raise ValueError(f"{samples} line {i} has no {err} field: is it a samples file of {task}?") from None
        output = line["filtered_resps"]
        output = (output[0] if isinstance(output, list) else output) or ""
        stripped += "resps" in line
        record.update(prompt=line.get("input", ""), output=output)
        q = question_from_record(record)
        records.append(record)
        theirs.append(their or None)
        faithful.append(bench[Parser.faithful].parse(output, q))
        strict.append(bench[Parser.strict].parse(output, q))
        report_rows.append(
            {
                "question_id": q.qid,
                "output": output,
                "gold": record["gold"],
                "lmms_eval": their,
                "drew": bool(family.draws and family.draws(output, q, seed)),
            }
        )
    adjusted = [t if row["drew"] else f for t, f, row in zip(theirs, faithful, report_rows)]
    for row, f, s in zip(report_rows, faithful, strict):
        row.update(faithful=f, strict=s)
    lmms_value, source = lmms_number(samples, task, family, results)
    if lmms_value is None:
        lmms_value = family.aggregate(_scored(records, theirs))
        source = f"recomputed from the samples' parses ({source})"
    ours = _scored(records, faithful)
    return ParityReport(
        task=task,
        family=family,
        n=len(lines),
        lmms_value=lmms_value,
        lmms_source=source,
        ours=family.aggregate(ours),
        ours_with_their_draws=family.aggregate(_scored(records, adjusted)),
        scores=bench[Parser.faithful].score(ours),
        strict_scores=bench[Parser.strict].score(_scored(records, strict)),
        strict_value=family.aggregate(_scored(records, strict)),
        mismatches=[r for r in report_rows if not r["drew"] and (r["faithful"] or "") != (r["lmms_eval"] or "")],
        draws=[r for r in report_rows if r["drew"]],
        strict_diffs=[r for r in report_rows if r["strict"] != r["faithful"]],
        stripped=stripped,
    )


def _num(value: Any) -> str:
    return "missing" if value is None else f"{value:.6g}" if isinstance(value, float) else str(value)


def _rows(rows: list[dict], columns: tuple[str, ...]) -> list[str]:
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        out.append("| " + " | ".join(json.dumps(r[c]) if c == "output" else str(r[c] or "-") for c in columns) + " |")
    return out


def format_report(rep: ParityReport) -> str:
    """Markdown: the numbers side by side, then the questions that explain any difference."""
    f = rep.family
    ours_own = rep.scores["overall"]
    own_note = f" (missing tasks: {', '.join(rep.scores['missing'])})" if rep.scores.get("missing") else ""
    lines = [
        f"## Parity: {rep.task} ({rep.n} questions; lmms-eval scale {f.scale})",
        "",
        "| scorer | score |",
        "|---|---|",
        f"| lmms-eval ({rep.lmms_source}) | {_num(rep.lmms_value)} |",
        f"| ours, faithful parser, lmms-eval's convention | {_num(rep.ours)} |",
        f"| ours, faithful parser, as run.py reports it (0-100) | {_num(ours_own)}{own_note} |",
        f"| ours, strict parser, lmms-eval's convention | {_num(rep.strict_value)} |",
        f"| ours, strict parser, as run.py reports it (0-100) | {_num(rep.strict_scores['overall'])} |",
        "",
    ]
    verdict = "EXACT" if rep.exact else "DIFFERENT"
    lines.append(
        f"parity: {verdict} -- {len(rep.mismatches)} parse mismatches, {len(rep.draws)} random draws, "
        f"|lmms-eval - ours| = {abs(rep.lmms_value - rep.ours_with_their_draws):.3g}"
        + (" (with lmms-eval's drawn letters)" if rep.draws else "")
    )
    if rep.stripped:
        lines.append(
            f"note: lmms-eval removed reasoning blocks (--reasoning_tags) from {rep.stripped} answers before "
            f"parsing; our faithful parsers do the same to run.py's raw outputs (parsing.lmms_view)"
        )
    if rep.mismatches:
        lines += [
            "",
            "### Our faithful parser disagrees with lmms-eval",
            "",
            *_rows(rep.mismatches, ("question_id", "output", "lmms_eval", "faithful")),
        ]
    if rep.draws:
        lines += [
            "",
            "### Random draws (unparseable replies; lmms-eval's letter is used for the parity check)",
            "",
            *_rows(rep.draws, ("question_id", "output", "lmms_eval", "faithful", "gold")),
        ]
    lines += ["", f"### Strict parser differs on {len(rep.strict_diffs)} questions", "", f"Why: {f.strict_means}."]
    if rep.strict_diffs:
        lines += ["", *_rows(rep.strict_diffs, ("question_id", "output", "faithful", "strict", "gold"))]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m infinipotv.lmms.parity", description=__doc__.split("\n\n")[0])
    ap.add_argument("samples", type=Path, help="an lmms-eval samples file (<date>_samples_<task>.jsonl)")
    ap.add_argument("--task", help="lmms-eval task name (default: from the file name), e.g. videomme or videomme_local")
    ap.add_argument("--results", type=Path, help="lmms-eval's results json (default: <date>_results.json beside it)")
    ap.add_argument("--seed", type=int, default=0, help="benchmark.seed of our faithful parser's random fallback")
    args = ap.parse_args(argv)
    try:
        rep = parity(args.samples, args.task, args.results, args.seed)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    sys.stdout.write(format_report(rep))
    return 0 if rep.exact else 1


if __name__ == "__main__":
    sys.exit(main())
