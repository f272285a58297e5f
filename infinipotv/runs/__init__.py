"""The run directory: its files and their one reader and writer (:mod:`.directory`), which folders a run may write
into (:mod:`.ownership`), its step trace ``memory.jsonl`` (:mod:`.trace`), whether it is finished (:mod:`.finished`)
and its provenance (:mod:`.provenance`, also the command ``python -m infinipotv.runs.provenance --short``).

It sits below everything that reads a run (the job, the benchmarks' rescoring, the aggregator) and imports none of
them: nothing here needs torch or the model stack. Import from here; provenance by its own path (its name is its
main function's).
"""

from .directory import (
    COMPACT,
    CONFIG,
    LOCK,
    MEMORY,
    METRICS,
    NOT_THE_RUN,
    PREDICTIONS,
    PROVENANCE,
    REJECTED,
    RunDirError,
    check_usable,
    claim,
    config_conflict,
    cut_last_line,
    is_blank,
    parse_line,
    read_jsonl,
    recorded_config,
    rewrite,
    sort_predictions,
    unwritable,
)
from .finished import finished, recorded_metrics
from .ownership import check_ours, discard_unused, inventory
from .trace import cut_step, is_number, trace_steps, warn_cut

__all__ = [
    "COMPACT",
    "CONFIG",
    "LOCK",
    "MEMORY",
    "METRICS",
    "NOT_THE_RUN",
    "PREDICTIONS",
    "PROVENANCE",
    "REJECTED",
    "RunDirError",
    "check_ours",
    "check_usable",
    "claim",
    "config_conflict",
    "cut_last_line",
    "cut_step",
    "discard_unused",
    "finished",
    "inventory",
    "is_blank",
    "is_number",
    "parse_line",
    "read_jsonl",
    "recorded_config",
    "recorded_metrics",
    "rewrite",
    "sort_predictions",
    "trace_steps",
    "unwritable",
    "warn_cut",
]
