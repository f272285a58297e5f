"""Optional experiment tracking with Weights & Biases, which must never cost a run its local outputs.

``tracking=wandb`` logs the resolved config, the scores per category, the streaming memory trace and result tables.
It runs OFFLINE unless the user chose a mode (``WANDB_MODE``): cluster nodes often have no network, and an offline
run is synced later with ``wandb sync <run_dir>/wandb/offline-run-*``. ``tracking=none`` gives a tracker whose
methods do nothing. Any wandb failure (import, init, log, finish) becomes a :class:`TrackingWarning` and switches the
tracker off; the job's own files are written regardless.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from infinipotv.results.scoring import flatten_scores
from infinipotv.runs import MEMORY, read_jsonl

DEFAULT_PROJECT = "infinipotv"


class TrackingWarning(UserWarning):
    """wandb failed; tracking is off for this run, local outputs are unaffected."""


def _container(cfg: Any) -> dict[str, Any]:
    """The config as plain containers, whatever it came as (DictConfig, dataclass, mapping)."""
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    if is_dataclass(cfg):
        return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True, enum_to_str=True)
    if isinstance(cfg, Mapping):
        return {k: v.value if isinstance(v, Enum) else v for k, v in cfg.items()}
    raise TypeError(f"cfg must be a DictConfig, a RunConfig or a mapping, got {type(cfg).__name__}")


class Tracker:
    """One run's tracking. Build with :meth:`open`; every method is a no-op when tracking is off or has failed."""

    def __init__(self, run: Any = None) -> None:
        self._run = run

    @property
    def enabled(self) -> bool:
        return self._run is not None

    @classmethod
    def open(cls, cfg: Any, run_dir: str | Path) -> Tracker:
        """Start tracking for ``cfg.tracking`` (``none`` | ``wandb``); wandb files go under ``run_dir`` unless
        ``WANDB_DIR`` is set."""
        config = _container(cfg)
        kind = str(config.get("tracking") or "none")
        if kind == "none":
            return cls()
        if kind != "wandb":
            raise ValueError(f"tracking must be 'none' or 'wandb', got {kind!r}")
        tracker = cls()

        def start() -> Any:
            import wandb

            run_dir_path = Path(run_dir)
            tags = [str((config.get(g) or {}).get("name")) for g in ("compress", "quant", "benchmark")]
            return wandb.init(
                project=os.environ.get("WANDB_PROJECT", DEFAULT_PROJECT),
                mode=os.environ.get("WANDB_MODE", "offline"),
                group=config.get("experiment"),
                name=run_dir_path.name,
                dir=None if os.environ.get("WANDB_DIR") else str(run_dir_path),
                config={k: v for k, v in config.items() if k != "table"},
                tags=[t for t in tags if t != "None"],
                job_type="eval",
            )

        tracker._run = tracker._guard("init", start)
        return tracker

    def _guard(self, what: str, action: Callable[[], Any]) -> Any:
        try:
            return action()
        except Exception as err:  # wandb may fail in many ways; none of them may stop the run
            warnings.warn(
                f"wandb {what} failed ({type(err).__name__}: {err}); tracking is off for this run, "
                "local outputs are unaffected",
                TrackingWarning,
                stacklevel=3,
            )
            self._run = None
            return None

    def log_metrics(self, metrics: Mapping[str, Any]) -> None:
        """``metrics.json``'s scores as ``benchmark/path/to/score`` (history and summary), plus memory peaks."""
        if not self.enabled:
            return
        benchmark = metrics.get("benchmark") or "scores"
        scores = flatten_scores(metrics.get("scores") or {})
        flat = {f"{benchmark}/{path.replace('.', '/')}": v for path, v in scores.items() if v is not None}
        flat.update({f"memory/{k}": v for k, v in (metrics.get("memory") or {}).items() if v is not None})
        flat.update(
            {k: metrics[k] for k in ("n_questions", "budget_tokens", "budget_bytes") if metrics.get(k) is not None}
        )
        self._guard("log_metrics", lambda: (self._run.log(flat), self._run.summary.update(flat)))

    def log_memory(self, trace: Iterable[Mapping[str, Any]]) -> None:
        """The streaming memory trace (``memory.jsonl`` records): series against a running step, and the table."""
        records = list(trace)
        if not self.enabled or not records:
            return

        def log() -> None:
            import wandb

            self._run.define_metric("memory_step")
            self._run.define_metric("stream/*", step_metric="memory_step")
            for i, record in enumerate(records):
                numeric = {k: v for k, v in record.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
                self._run.log({"memory_step": i, **{f"stream/{k}": v for k, v in numeric.items()}})
            frame = pd.DataFrame(records).drop(columns=["compress"], errors="ignore")
            self._run.log({"memory_trace": wandb.Table(dataframe=frame)})

        self._guard("log_memory", log)

    def log_table(self, name: str, frame: pd.DataFrame) -> None:
        """A result table (any DataFrame, e.g. :func:`infinipotv.results.tables.table_frame`) as a wandb Table."""
        if not self.enabled:
            return

        def log() -> None:
            import wandb

            self._run.log({name: wandb.Table(dataframe=frame.astype(object).where(frame.notna(), None))})

        self._guard("log_table", log)

    def close(self) -> None:
        """Finish the wandb run (writes the offline run to disk); safe to call twice."""
        if self.enabled:
            self._guard("finish", self._run.finish)
            self._run = None

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def track_run(cfg: Any, run_dir: Path, metrics: dict[str, Any]) -> None:
    """Track a finished run (``cfg.tracking``): its metrics and memory trace. run.py hands it to
    :func:`infinipotv.job.run_job`, which calls it once the local files are written, so a tracking failure cannot
    lose them."""
    with Tracker.open(cfg, run_dir) as tracker:
        tracker.log_metrics(metrics)
        tracker.log_memory(read_jsonl(run_dir / MEMORY)[0])
