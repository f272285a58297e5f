"""Published reference numbers (package data ``published_results.csv``): the rows tables show with a dagger.

The CSV's ``method`` column is the policy name of our configs (``tar_van_pool``, ``full``...); it is renamed
``policy`` on load so that reference rows and run rows are described by the same fields.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd

COLUMNS = ("source", "table", "model", "policy", "kv", "budget_tokens", "benchmark", "category", "value")


def load_published(path: str | Path | None = None) -> pd.DataFrame:
    """The reference rows; ``path`` overrides the packaged CSV (same columns, ``method`` or ``policy``)."""
    source = Path(path) if path is not None else resources.files("infinipotv.results") / "published_results.csv"
    with source.open() as handle:
        frame = pd.read_csv(handle, dtype={"category": str}).rename(columns={"method": "policy"})
    missing = set(COLUMNS) - set(frame.columns)
    if missing:
        raise ValueError(f"published results {source} lacks column(s) {sorted(missing)}; expected {list(COLUMNS)}")
    return frame[list(COLUMNS)]


def same_value(have: Any, want: Any) -> bool:
    """Config/CSV value equality that ignores int-vs-float-vs-str spelling (6000 == 6000.0 == "6000")."""
    have_missing = have is None or (isinstance(have, float) and math.isnan(have))
    if have_missing or want is None:
        return have_missing and want is None
    try:
        return float(have) == float(want)
    except (TypeError, ValueError):
        return str(have) == str(want)


def select(frame: pd.DataFrame, filters: Mapping[str, Any]) -> pd.DataFrame:
    """Rows of ``frame`` whose columns equal every filter value."""
    keep = pd.Series(True, index=frame.index)
    for key, want in filters.items():
        keep &= frame[key].map(lambda have, want=want: same_value(have, want))
    return frame[keep]
