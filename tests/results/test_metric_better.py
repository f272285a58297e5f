"""A metric column of bytes or seconds bolds its lowest value unless ``better:`` says otherwise; scores and other
measurements (frames per second) their highest."""

from __future__ import annotations

import pytest

from infinipotv.results import build_table, parse_table
from tests.results.test_metric_columns import SPEC, field_root, runs  # noqa: F401  (the fixtures: a sharded field)


@pytest.mark.parametrize(
    ("metric", "better"),
    [
        ("memory.peak_accelerator_bytes", "lower"),
        ("memory.peak_host_bytes", "lower"),
        ("time.ttft_s.median", "lower"),
        ("time.seconds", "lower"),
        ("time.encode_seconds", "lower"),
        ("time.encode_fps", "higher"),
        ("time.compress_passes", "higher"),
        ("reference.agreement", "higher"),
        (None, "higher"),  # a score
    ],
)
def test_default_better(metric: str | None, better: str) -> None:
    from infinipotv.results.spec import default_better

    assert default_better(metric) == better


def test_costs_are_lower_is_better_without_saying_so(runs, published) -> None:  # noqa: F811
    """The same bold cells as the columns marked ``better: lower``; ``better: higher`` still overrides the default."""
    unmarked = [{k: v for k, v in column.items() if k != "better"} for column in SPEC["columns"]]
    table = build_table(parse_table({**SPEC, "columns": unmarked}), runs, published, experiment="field")
    bold = {r.id: [c.bold for c in r.cells[1:]] for r in table.rows}
    assert bold["tar_van_pool/fp16"] == [False, True, True]  # 5 MiB on the accelerator, 1 MiB on the host, 0.3 s
    assert bold["tar_van_pool/int4"] == [True, False, False]  # 2 MiB, 2 MiB, 1 s
    higher = [{**column, "better": "higher"} if "metric" in column else column for column in unmarked]
    table = build_table(parse_table({**SPEC, "columns": higher}), runs, published, experiment="field")
    bold = {r.id: [c.bold for c in r.cells[1:]] for r in table.rows}
    assert bold["tar_van_pool/fp16"] == [True, False, False]
