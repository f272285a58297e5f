"""The documented toy run (docs/benchmarks.md, "Toy data") compresses: the command as the doc writes it, on the data
``python -m infinipotv.data.toy`` writes, reports compression passes, as many as the doc says."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from infinipotv.data.toy import write_toy
from tests.helpers import ROOT, run_py

DOC = ROOT / "docs" / "benchmarks.md"


def test_the_documented_toy_command_compresses(tmp_path: Path) -> None:
    text = DOC.read_text()
    command = next(line for line in text.splitlines() if "run.py model=tiny_qwen2vl benchmark=videomme" in line)
    args = shlex.split(command.split("run.py", 1)[1].split("#")[0].replace("toy/", f"{tmp_path}/toy/"))
    passes_documented = int(re.search(r"go through (\d+) compression passes", text).group(1))
    write_toy(tmp_path / "toy")
    done = run_py(*args, f"run_dir={tmp_path / 'run'}", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["time"]["compress_passes"] == passes_documented > 0
    assert f"| compression passes | {passes_documented} |" in done.stdout
    assert metrics["memory"]["peak_cache_tokens"] < 100
