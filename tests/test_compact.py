"""A study's runs committed in compact form (infinipotv.results.compact): real small runs of the tiny Qwen2-VL on the
symbolic benchmark, compacted and copied as a fresh clone holds them, re-render every table and figure identically and
resume without recomputing (a finished run untouched, an unfinished one continued to the same answers); git keeps
exactly the compact files; a study over its size limit is refused in one line; the studies committed stay under it."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from infinipotv.config import BenchmarkConfig, CompressConfig, EvalConfig, ModelConfig, QuantConfig, RunConfig
from infinipotv.job import run_job
from infinipotv.results import build_report
from infinipotv.results.compact import LIMIT_MIB, committed_files, compact_study, main
from infinipotv.runs import COMPACT, MEMORY, METRICS, PREDICTIONS, PROVENANCE, RunDirError
from tests.helpers import ROOT, TINY_QWEN2VL, lines

pytestmark = pytest.mark.slow

FIGURES = [
    {"kind": "accuracy_vs_budget", "benchmark": "symbolic", "score": "overall"},
    {"kind": "accuracy_vs_metric", "benchmark": "symbolic", "score": "overall", "metric": "time.ttft_s.median"},
    {
        "kind": "accuracy_vs_metric",
        "benchmark": "symbolic",
        "score": "overall",
        "metric": "memory.peak_accelerator_bytes",
        "scale": "MiB",
    },
    {"kind": "memory_trace", "benchmark": "symbolic"},
]
TABLE = {
    "name": "main",
    "stub": ["Method"],
    "columns": [
        {"benchmark": "symbolic", "score": "overall", "label": "All", "paired": True},
        {"benchmark": "symbolic", "metric": "memory.peak_accelerator_bytes", "scale": "MiB", "label": "MiB"},
        {"benchmark": "symbolic", "metric": "time.ttft_s.median", "label": "TTFT"},
    ],
    "rows": {"by": ["policy"]},
}


def _config(root: Path, policy: str) -> RunConfig:
    options = {"n_videos": 2, "frames": 48, "scene_frames": 8}
    return RunConfig(
        model=ModelConfig(**TINY_QWEN2VL),
        compress=CompressConfig(name=policy, budget=96 if policy != "full" else None),
        quant=QuantConfig(),
        benchmark=BenchmarkConfig(name="symbolic", root=str(root), options=options),
        eval=EvalConfig(chunk_frames=2),
        experiment="study",
    )


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Two finished runs of a study as the sweep leaves them (Hydra's files beside), and the report they give."""
    tmp = tmp_path_factory.mktemp("compact")
    data, runs = tmp / "data", tmp / "runs"
    configs = {p: _config(data, p) for p in ("tar_van_pool", "full")}
    for policy, cfg in configs.items():
        run_dir = runs / "study" / policy
        run_job(cfg, run_dir)
        (run_dir / ".hydra").mkdir()
        shutil.copy(run_dir / "config.yaml", run_dir / ".hydra" / "config.yaml")
        (run_dir / "run.log").write_text("")
    (runs / "study" / "study.log").write_text("2026-12-06T04:00:00Z study start at abc1234\n")
    experiments = tmp / "experiments"
    experiments.mkdir()
    (experiments / "study.yaml").write_text(yaml.safe_dump({"table": {"tables": [TABLE], "figures": FIGURES}}))
    before = build_report("study", runs, tmp / "before", experiments_dir=experiments, n_boot=200)
    whole = {p: (runs / "study" / p / MEMORY).read_bytes() for p in configs}
    return {"tmp": tmp, "runs": runs, "configs": configs, "experiments": experiments, "before": before, "whole": whole}


def _clone(study_dir: Path, to: Path) -> Path:
    """What a fresh clone holds of a study: the files git keeps, nothing else."""
    for path in committed_files(study_dir):
        target = to / path.relative_to(study_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    return to


def test_the_compact_form_re_renders_every_table_and_figure_identically(study: dict) -> None:
    study_dir = study["runs"] / "study"
    summary = compact_study(study_dir)
    assert (summary.runs, summary.finished, summary.trimmed) == (2, 2, 2)
    for policy, whole in study["whole"].items():
        trimmed = (study_dir / policy / MEMORY).read_bytes()
        assert 0 < len(trimmed) < len(whole) and trimmed in whole  # one video's steps, as they were written
        record = json.loads((study_dir / policy / COMPACT).read_text())[MEMORY]
        assert record["bytes_before"] == len(whole) and record["bytes_after"] == len(trimmed)
    kinds = {".gitignore", "study.log", "config.yaml", COMPACT, MEMORY, METRICS, PREDICTIONS, PROVENANCE}
    assert {p.name for p in summary.files} == kinds
    assert not any(".hydra" in p.parts or p.name in ("run.log", ".lock") for p in summary.files)
    clone = _clone(study_dir, study["tmp"] / "clone" / "study")
    experiments = study["experiments"]
    after = build_report("study", clone.parent, study["tmp"] / "after", experiments_dir=experiments, n_boot=200)
    assert after.notes == study["before"].notes
    names = sorted(p.relative_to(study["before"].out) for p in study["before"].files)
    assert names == sorted(p.relative_to(after.out) for p in after.files)
    assert sum(n.parts[0] == "figures" for n in names) == 2 * len(FIGURES)  # every figure drawn, PNG and PDF
    for name in names:
        if name.suffix != ".pdf":  # a PDF records when it was made
            assert (after.out / name).read_bytes() == (study["before"].out / name).read_bytes(), name


def test_a_finished_compact_run_resumes_without_recomputing(study: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    study_dir = study["runs"] / "study"
    compact_study(study_dir)
    clone = _clone(study_dir, study["tmp"] / "resume" / "study")
    kept = {p: p.read_bytes() for p in clone.rglob("*") if p.is_file()}

    def no_model(cfg):
        raise AssertionError("a finished run built its model again")

    monkeypatch.setattr("infinipotv.job.build_parts", no_model)
    for policy, cfg in study["configs"].items():
        metrics = run_job(cfg, clone / policy)
        assert metrics == json.loads((clone / policy / METRICS).read_text())
        assert "ttft_s" in metrics["time"]
    assert all(p.read_bytes() == b for p, b in kept.items())  # metrics, provenance and answers as committed


def test_an_unfinished_run_is_committed_whole_and_continues_to_the_same_answers(study: dict) -> None:
    finished = study["runs"] / "study" / "tar_van_pool"
    partial = study["tmp"] / "partial_runs" / "partial" / "tar_van_pool"
    partial.mkdir(parents=True)
    shutil.copy(finished / "config.yaml", partial)
    (partial / MEMORY).write_bytes(study["whole"]["tar_van_pool"])
    answers = lines(finished / PREDICTIONS)
    first = [a for a in answers if a["video_id"] == answers[0]["video_id"]]  # killed after its first video
    (partial / PREDICTIONS).write_text("".join(json.dumps(a) + "\n" for a in first))
    summary = compact_study(partial.parent)
    assert (summary.finished, summary.trimmed) == (0, 0)
    assert (partial / MEMORY).read_bytes() == study["whole"]["tar_van_pool"]  # kept whole: the resume counts it
    clone = _clone(partial.parent, study["tmp"] / "partial_clone" / "partial")
    metrics = run_job(study["configs"]["tar_van_pool"], clone / "tar_van_pool")
    assert (clone / "tar_van_pool" / PREDICTIONS).read_bytes() == (finished / PREDICTIONS).read_bytes()
    whole = json.loads((finished / METRICS).read_text())["memory"]
    del whole["peak_memory_bytes"], metrics["memory"]["peak_memory_bytes"]  # the process's own peak, not the run's
    assert metrics["memory"] == whole  # counted from the committed trace and the second video's steps


def test_a_compact_run_that_would_answer_again_is_refused_untouched(study: dict) -> None:
    study_dir = study["runs"] / "study"
    compact_study(study_dir)
    run_dir = _clone(study_dir, study["tmp"] / "retry" / "study") / "full"
    records = lines(run_dir / PREDICTIONS)
    records[0]["error"] = "RuntimeError: a question that failed"
    (run_dir / PREDICTIONS).write_text("".join(json.dumps(r) + "\n" for r in records))
    kept = {p: p.read_bytes() for p in run_dir.iterdir() if p.is_file() and p.name != ".lock"}
    cfg = dataclasses.replace(study["configs"]["full"], retry_errors=True)
    with pytest.raises(RunDirError) as err:
        run_job(cfg, run_dir)
    assert "is a compact run" in str(err.value) and records[0]["question_id"] in str(err.value)
    assert "\n" not in str(err.value)
    assert all(p.read_bytes() == b for p, b in kept.items())


def test_git_keeps_exactly_the_compact_files_of_a_study_and_nothing_of_other_runs(study: dict) -> None:
    repo = study["tmp"] / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    shutil.copy(ROOT / ".gitignore", repo / ".gitignore")
    study_dir = study["runs"] / "study"
    compact_study(study_dir)
    shutil.copytree(study_dir, repo / "results" / "runs" / "study")
    other = repo / "results" / "runs" / "2026-12-06" / "04-00-00_run"  # a single run: not a study's
    shutil.copytree(study_dir / "full", other)
    out = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard"], cwd=repo, capture_output=True, text=True, check=True
    )
    seen = set(out.stdout.split()) - {".gitignore"}
    assert seen == {f"results/runs/study/{p.relative_to(study_dir).as_posix()}" for p in committed_files(study_dir)}


def test_a_study_over_its_size_limit_is_refused_in_one_line(study: dict, capsys: pytest.CaptureFixture) -> None:
    study_dir = study["runs"] / "study"
    with pytest.raises(ValueError, match=r"over the 0.01 MiB limit \(largest: .*\): trim the study's grid"):
        compact_study(study_dir, limit_mib=0.01)
    assert main(["study", "--runs", str(study["runs"]), "--limit-mib", "0.01"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "over the 0.01 MiB limit" in err[0]
    assert main(["study", "--runs", str(study["runs"])]) == 0
    assert "MiB to commit (limit 30 MiB)" in capsys.readouterr().out
    assert (study_dir / "tar_van_pool" / METRICS).is_file()  # nothing lost


def test_every_study_committed_stays_under_the_limit() -> None:
    """The guard on what is in git: each study's committed runs (results/runs/STUDY/) under LIMIT_MIB in all."""
    out = subprocess.run(["git", "ls-files", "-z", "results/runs"], cwd=ROOT, capture_output=True, check=True)
    sizes: dict[str, int] = {}
    for name in filter(None, out.stdout.decode().split("\0")):
        study = Path(name).parts[2]
        sizes[study] = sizes.get(study, 0) + (ROOT / name).stat().st_size
    over = {s: f"{n / 2**20:.1f} MiB" for s, n in sizes.items() if n > LIMIT_MIB * 2**20}
    assert not over, f"studies over the {LIMIT_MIB:g} MiB limit of committed runs: {over}"
