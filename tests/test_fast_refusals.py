"""A config refused for a knob's own value is refused before torch loads (issue 56): run.py in a fresh interpreter
(not the suite's forkserver, which has torch imported already), and what it had imported when it exited."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT

# run.py as the command line runs it, then one line: its exit code and which heavy modules it had loaded.
_WRAPPER = """
import json, runpy, sys
sys.argv = ["run.py", *sys.argv[1:]]
try:
    runpy.run_path("run.py", run_name="__main__")
    code = 0
except SystemExit as done:
    code = done.code
print(json.dumps({"code": code, "loaded": [m for m in ("torch", "transformers") if m in sys.modules]}))
"""


@pytest.mark.parametrize(
    "override, says",
    [
        ("compress.budget=-1", "compress.budget=-1 must be >= 2"),
        ("compress.c_ratio=1.5", "compress.c_ratio=1.5 must lie in (0, 1)"),
        ("compress.r_ratio=2", "r_ratio=2.0 must be in (0.0, 1.0]"),
        ("compress.alpha=1.5", "alpha=1.5 must be in [0.0, 1.0]"),
        ("compress=nosuch", "Could not find 'compress/nosuch'"),
        ("quant=int3", "Could not find 'quant/int3'"),
    ],
)
def test_a_knobs_own_value_is_refused_before_torch_loads(tmp_path, override, says):
    out = subprocess.run(
        [sys.executable, "-c", _WRAPPER, override, f"run_dir={tmp_path / 'run'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["code"] in (1, 2) and says in out.stderr, out.stderr
    assert result["loaded"] == [], f"{override} was refused after importing {result['loaded']}"
    assert not (tmp_path / "run").exists()
