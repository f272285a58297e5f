"""notebooks/analysis.ipynb runs top to bottom on the example sweep, in the project's Python, with no stored outputs."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "analysis.ipynb"


def test_committed_notebook_has_no_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


def test_notebook_executes(sweep_dir: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("INFINIPOTV_RUNS_DIR", str(sweep_dir))
    monkeypatch.setenv("INFINIPOTV_NOTEBOOK_OUT", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the kernel imports the working tree's package
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import sys; print(sys.executable)"))
    # jupyter_client starts the kernelspec's "python" as sys.executable: the venv running the tests
    client = NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    client.execute()
    text = "".join(str(o.get("data", {}).get("text/markdown", "")) for c in nb.cells for o in c.get("outputs", []))
    assert "**74.6** (n=500)" in text and "**Paired difference vs fp16**" in text
    assert nb.cells[-1].outputs[0]["text"].strip() == sys.executable
    for stem in ("accuracy_vs_budget_mlvu", "memory_trace_mlvu"):
        assert (tmp_path / f"{stem}.png").stat().st_size > 1000
