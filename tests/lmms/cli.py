"""Running lmms-eval's CLI as a user would, offline, on the tiny $HF_HOME; its exit code says nothing, so the
caller gets the results file (or an assertion naming the log)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from infinipotv.lmms import TASKS_DIR
from tests.helpers import ROOT

TASKS = ("videomme_local", "mlvu_dev_local", "egoschema_subset_local", "longvideobench_val_v_local")
SCRIPTED_ENTRY_POINT = "[lmms_eval.models]\nscripted_replies = tests.lmms.scripted_replies:manifest\n"


def scripted_replies_dist(folder: Path) -> Path:
    """A dist-info folder registering tests/lmms/scripted_replies.py as an lmms-eval model; put ``folder`` on
    PYTHONPATH."""
    info = folder / "scripted_replies-0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: scripted-replies\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text(SCRIPTED_ENTRY_POINT)
    return folder


def run_lmms_eval(model: str, model_args: str, out: Path, hf_home: Path, pythonpath: list[Path] = ()) -> Path:
    """``lmms-eval --model MODEL ... --log_samples`` over our four local tasks; returns its results file."""
    env = {
        **os.environ,
        "HF_HOME": str(hf_home),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join(map(str, [ROOT, *pythonpath])),
    }
    cmd = [
        str(Path(sys.executable).with_name("lmms-eval")),
        "--model",
        model,
        "--model_args",
        model_args,
        "--tasks",
        ",".join(TASKS),
        "--include_path",
        str(TASKS_DIR),
        "--output_path",
        str(out),
        "--log_samples",
    ]
    log = out.with_suffix(".log")
    with log.open("w") as f:
        subprocess.run(cmd, cwd=out.parent, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=600, check=False)
    found = sorted(out.rglob("*_results.json"))  # under a folder named after model_args, if any
    assert found, f"lmms-eval wrote no results file (it exits 0 on failure): see {log}\n{log.read_text()[-3000:]}"
    return found[-1]


def samples_file(results: Path, task: str) -> Path:
    return results.with_name(results.name.replace("_results.json", f"_samples_{task}.jsonl"))
