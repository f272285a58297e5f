"""A small synthetic sweep in the run-directory contract, whose answers give the INT4 study's published figures.

It is the analysis notebook's default data and the results tests' fixture: Qwen2-VL-7B, TaR+VaN+Pool at 6K in FP16
and INT4 KIVI on Video-MME (500 questions per duration) and MLVU (the dev set's 2,174 questions), full KV on MLVU,
and a small MLVU budget sweep. Per category, exactly ``k`` of ``n`` questions (chosen at random, seeded) are right, so
every score is known exactly: Video-MME 74.6 / 61.4 / 52.4 / 62.8 (FP16) and 74.2 / 62.0 / 54.2 / 63.5 (INT4); MLVU
per task 87.8 / 70.0 / 72.7 / 78.0 / 63.9 / 52.9 / 35.0 and 86.7 / 68.5 / 74.2 / 80.0 / 63.9 / 55.6 / 34.0.
``metrics.json`` holds the benchmarks' own scores of these answers, in the job's format.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from infinipotv.data.mlvu import TASKS as MLVU_TASKS
from infinipotv.results.scoring import score_records
from infinipotv.runs import CONFIG, MEMORY, METRICS, PREDICTIONS, PROVENANCE

VIDEOMME_N = {"short": 500, "medium": 500, "long": 500}
VIDEOMME_CORRECT = {
    "fp16": {"short": 373, "medium": 307, "long": 262},
    "int4": {"short": 371, "medium": 310, "long": 271},
}
DOMAINS = (
    "Knowledge",
    "Film & Television",
    "Sports Competition",
    "Artistic Performance",
    "Life Record",
    "Multilingual",
)
TASK_TYPES = ("Temporal Perception", "Object Recognition", "Action Reasoning", "Counting Problem")

MLVU_N = dict(zip(MLVU_TASKS, (263, 200, 539, 404, 346, 225, 197)))
MLVU_CORRECT = {
    ("tar_van_pool", "fp16", 6000): dict(zip(MLVU_TASKS, (231, 140, 392, 315, 221, 119, 69))),
    ("tar_van_pool", "int4", 6000): dict(zip(MLVU_TASKS, (228, 137, 400, 323, 221, 125, 67))),
    ("full", "fp16", None): dict(zip(MLVU_TASKS, (228, 131, 393, 331, 241, 115, 69))),
}
BUDGET_SWEEP_SHIFT = {3000: -1.1, 12000: 0.2, 24000: -0.1}  # points added to every 6K FP16 task accuracy

# Qwen2-VL-7B: 28 layers x 4 KV heads; bytes per token per head (seed study Table 3): FP16 512, INT4 KIVI 164.
LAYER_HEADS = 28 * 4
BYTES_PER_TOKEN_HEAD = {"fp16": 512, "int4": 164}
TOKENS_PER_STEP, STEPS, PREFIX_TOKENS, RESIDUAL = 520, 96, 14, 128  # 8 raw frames = 4 grid frames of 130 tokens


def _records(
    benchmark: str, classes: Mapping[str, tuple[int, int]], categories: Callable[[str, int], dict[str, str]], seed: int
) -> list[dict[str, Any]]:
    """``classes``: {class: (n, k)}; k of each class's n questions right, which ones drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    records, i = [], 0
    for name, (n, k) in classes.items():
        right = set(rng.choice(n, size=k, replace=False).tolist())
        for j in range(n):
            gold = "ABCD"[i % 4]
            parsed = gold if j in right else "ABCD"[(i + 1) % 4]
            records.append(
                {
                    "benchmark": benchmark,
                    "question_id": f"{benchmark}-{i:05d}",
                    "video_id": f"{benchmark}-v{i // 3:04d}",
                    "categories": categories(name, i),
                    "prompt": "",
                    "output": parsed,
                    "parsed": parsed,
                    "gold": gold,
                    "correct": j in right,
                    "error": None,
                }
            )
            i += 1
    return records


def memory_trace(policy: str, kv: str, budget: int | None, c_ratio: float = 0.75) -> list[dict[str, Any]]:
    """A synthetic ``memory.jsonl`` for one 768-frame video: the cache grows by a chunk per step and, when compressed,
    falls back to |C| = c_ratio * |M| whenever the video tokens would pass |M|."""
    trace, video = [], 0
    for step in range(STEPS):
        before = video + TOKENS_PER_STEP
        compress = None
        if budget is not None and policy != "full" and before > budget:
            video = int(c_ratio * budget)
            compress = {"tokens_before": before, "tokens_after": video, "seconds": 0.05}
        else:
            video = before
        total = PREFIX_TOKENS + video
        kept_low_bit = max(total - RESIDUAL, 0) if kv != "fp16" else 0
        per_head = kept_low_bit * BYTES_PER_TOKEN_HEAD[kv] + (total - kept_low_bit) * BYTES_PER_TOKEN_HEAD["fp16"]
        trace.append(
            {
                "video_id": "example-video",
                "step": step,
                "frames_seen": 8 * (step + 1),
                "prefix_tokens": PREFIX_TOKENS,
                "video_tokens": video,
                "total_tokens": total,
                "cache_bytes": per_head * LAYER_HEADS,
                "peak_memory_bytes": per_head * LAYER_HEADS + 2**30,
                "compress": compress,
                "encode_seconds": 0.01,
            }
        )
    return trace


def run_config(benchmark: str, policy: str, kv: str, budget: int | None, experiment: str) -> dict[str, Any]:
    """A resolved ``config.yaml`` of the example's model (Qwen2-VL-7B) and settings."""
    return {
        "model": {"family": "qwen2vl", "checkpoint": "Qwen/Qwen2-VL-7B-Instruct", "tiny": False, "dtype": "bfloat16"},
        "compress": {
            "name": policy,
            "budget": budget,
            "budget_mib": None,
            "c_ratio": 0.75,
            "alpha": 0.5,
            "r_ratio": 0.125,
            "pooling": "layer_quartile",
            "frame_view": "pseudo_frames",
        },
        "quant": {"name": kv, "bits": 16 if kv == "fp16" else 4, "group_size": 32, "residual_length": 128},
        "benchmark": {
            "name": benchmark,
            "parser": "faithful",
            "limit": None,
            "fraction": None,
            "ids": None,
            "shard": None,
            "seed": 0,
        },
        "eval": {"chunk_frames": 8},
        "tracking": "none",
        "seed": 0,
        "experiment": experiment,
        "table": None,
    }


def write_run(
    run_dir: Path, config: Mapping[str, Any], records: Sequence[Mapping[str, Any]], trace: Sequence[Mapping[str, Any]]
) -> Path:
    """Write one run directory (config, predictions, metrics, memory trace, provenance) as the job does."""
    run_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create(dict(config)), run_dir / CONFIG)
    (run_dir / PREDICTIONS).write_text("".join(json.dumps(r) + "\n" for r in records))
    (run_dir / MEMORY).write_text("".join(json.dumps(r) + "\n" for r in trace))
    budget, kv = config["compress"]["budget"], config["quant"]["name"]
    peak = max(trace, key=lambda r: r["cache_bytes"])
    metrics = {
        "benchmark": config["benchmark"]["name"],
        "scores": score_records(config["benchmark"], records),
        "subset": {"is_subset": False},
        "n_questions": len(records),
        "n_expected": len(records),
        "n_errors": 0,
        "complete": True,
        "policy": config["compress"]["name"],
        "storage": kv,
        "budget_tokens": budget,
        "budget_bytes": None if budget is None else budget * BYTES_PER_TOKEN_HEAD[kv] * LAYER_HEADS,
        "memory": {
            "peak_cache_tokens": peak["total_tokens"],
            "peak_cache_bytes": peak["cache_bytes"],
            "peak_memory_bytes": peak["peak_memory_bytes"],
        },
        "time": {"seconds": 0.0},
    }
    (run_dir / METRICS).write_text(json.dumps(metrics, indent=1))
    provenance = {
        "git_sha": "example",
        "packages": {},
        "host": "example",
        "seed": 0,
        "start": "2026-01-01T00:00:00",
        "end": "2026-01-01T01:00:00",
    }
    (run_dir / PROVENANCE).write_text(json.dumps(provenance))
    return run_dir


def _videomme_records(kv: str, seed: int) -> list[dict[str, Any]]:
    classes = {d: (VIDEOMME_N[d], VIDEOMME_CORRECT[kv][d]) for d in VIDEOMME_N}

    def categories(duration: str, i: int) -> dict[str, str]:
        domain = DOMAINS[(i // 3) % len(DOMAINS)]
        return {
            "duration": duration,
            "domain": domain,
            "sub_category": f"{domain} {i % 2}",
            "task_type": TASK_TYPES[i % len(TASK_TYPES)],
        }

    return _records("videomme", classes, categories, seed)


def _mlvu_records(correct: Mapping[str, int], seed: int) -> list[dict[str, Any]]:
    classes = {t: (MLVU_N[t], correct[t]) for t in MLVU_TASKS}
    return _records("mlvu", classes, lambda task, i: {"task_type": task}, seed=seed)


def write_example_sweep(root: str | Path) -> list[Path]:
    """Write the example sweep under ``root`` (``int4_vs_fp16/`` and ``budget_sweep/``); returns the run dirs."""
    root = Path(root)
    runs = []
    for seed, kv in enumerate(("fp16", "int4")):
        records = _videomme_records(kv, seed)
        config = run_config("videomme", "tar_van_pool", kv, 6000, "int4_vs_fp16")
        runs.append(
            write_run(
                root / "int4_vs_fp16" / f"tar_van_pool_{kv}_6000_videomme",
                config,
                records,
                memory_trace("tar_van_pool", kv, 6000),
            )
        )
    for seed, ((policy, kv, budget), correct) in enumerate(MLVU_CORRECT.items()):
        records = _mlvu_records(correct, seed)
        config = run_config("mlvu", policy, kv, budget, "int4_vs_fp16")
        name = f"{policy}_{kv}_{budget}_mlvu" if budget else f"{policy}_{kv}_mlvu"
        runs.append(write_run(root / "int4_vs_fp16" / name, config, records, memory_trace(policy, kv, budget)))
    base = MLVU_CORRECT[("tar_van_pool", "fp16", 6000)]
    for budget, shift in BUDGET_SWEEP_SHIFT.items():
        correct = {t: int(round(base[t] + shift / 100 * MLVU_N[t])) for t in MLVU_TASKS}
        records = _mlvu_records(correct, budget)
        config = run_config("mlvu", "tar_van_pool", "fp16", budget, "budget_sweep")
        runs.append(
            write_run(
                root / "budget_sweep" / f"tar_van_pool_fp16_{budget}_mlvu",
                config,
                records,
                memory_trace("tar_van_pool", "fp16", budget),
            )
        )
    return runs
