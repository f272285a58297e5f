"""Results aggregation: run directories -> tidy DataFrame -> paper tables (markdown, LaTeX), statistics, figures.

CLI: ``python -m infinipotv.results EXPERIMENT [--runs DIR] [--format md,tex] [--out DIR] [--stats] [--baseline ROW]
[--model NAME] [--force]``.
"""

from infinipotv.results.collect import (
    DuplicateQuestionError,
    Run,
    collect,
    find_run_dirs,
    load_run,
    load_runs,
    merge_shards,
    runs_frame,
)
from infinipotv.results.figures import plot_accuracy_vs_budget, plot_memory_trace, save_figure
from infinipotv.results.published import load_published
from infinipotv.results.render import to_latex, to_markdown
from infinipotv.results.report import NothingToReport, OutputExists, Report, build_report, load_experiment
from infinipotv.results.spec import SpecError, parse_experiment, parse_table
from infinipotv.results.stats import PairedStat, bootstrap_ci, mcnemar_exact, paired_differences
from infinipotv.results.tables import MixedRunsError, Table, add_stats, build_table, table_frame
from infinipotv.results.tracking import Tracker, TrackingWarning

__all__ = [
    "DuplicateQuestionError",
    "MixedRunsError",
    "NothingToReport",
    "OutputExists",
    "PairedStat",
    "Report",
    "Run",
    "SpecError",
    "Table",
    "Tracker",
    "TrackingWarning",
    "add_stats",
    "bootstrap_ci",
    "build_report",
    "build_table",
    "collect",
    "find_run_dirs",
    "load_experiment",
    "load_published",
    "load_run",
    "load_runs",
    "mcnemar_exact",
    "merge_shards",
    "paired_differences",
    "parse_experiment",
    "parse_table",
    "plot_accuracy_vs_budget",
    "plot_memory_trace",
    "runs_frame",
    "save_figure",
    "table_frame",
    "to_latex",
    "to_markdown",
]
