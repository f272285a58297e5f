"""Tables that other modules compute (``source: "module:function"`` in a table spec), e.g. the KV bytes per token
of :mod:`infinipotv.kv.bytes_table`: the function returns a DataFrame, or markdown text (a pipe table, then lines
that become its notes), so the same numbers land in the markdown and the LaTeX outputs."""

from __future__ import annotations

import importlib
import warnings

import pandas as pd

from infinipotv.results.spec import SpecError, TableSpec


def markdown_table(text: str) -> tuple[pd.DataFrame, list[str]]:
    """A markdown pipe table as a DataFrame, and the other non-empty lines (its notes)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines if line.startswith("|")]
    rows = [r for r in cells if not all(c and set(c) <= set(":-") for c in r)]  # drop the alignment row
    if not rows:
        raise ValueError("expected a markdown pipe table")
    return pd.DataFrame(rows[1:], columns=rows[0]), [line for line in lines if not line.startswith("|")]


def call_source(spec: TableSpec) -> tuple[pd.DataFrame, list[str]] | None:
    """The generated table and its notes; None, with a warning, when the source module is not installed."""
    module_name, function_name = str(spec.source).split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and (module_name == err.name or module_name.startswith(f"{err.name}.")):
            warnings.warn(f"table {spec.name!r}: {module_name} is not available; table skipped", stacklevel=3)
            return None
        raise
    if not hasattr(module, function_name):
        raise SpecError(f"table {spec.name!r}: {module_name} has no function {function_name!r}; fix `source`")
    result = getattr(module, function_name)()
    return markdown_table(result) if isinstance(result, str) else (pd.DataFrame(result), [])
