"""Where a retrieval score ranks a question's needle frames: why ReKV's answers read so little of their needles.

The fair study (experiments/fair_peers.yaml) records per answer the share of its needle frames' tokens it read
(``needle.recall``). ReKV's is at or below what a random choice of its buffer would read, while MuKV, which scores
other keys, reads most of its needles. That leaves two suspects: the buffer (too few frames) or the score. This
bench isolates the score. It streams the study's development videos (seed 2, |M| = 144, ReKV at its upstream
split: the study's config composed from the experiment file, built by the job's own factory) to their end, asks
each question there, and at every layer ranks the candidate frames by the score ReKV selects with (the question's
mean pre-RoPE query dotted with each frame's mean pre-RoPE key, ``ReKV.select``; WeaveTime's prefilter and
StreamKV's retrieval use the same score). Per question and layer:

- ``percentile``: the mean rank of the needle frames among the candidates, 0 the lowest score, 1 the highest, 0.5
  what a random score gives;
- ``hit``: whether any needle frame is among the blocks the layer retrieves, beside ``hit_chance``, the
  probability that a random choice of as many blocks would include one.

Means over questions per layer, and over layers and questions with a 95% bootstrap CI over questions. A percentile
under 0.5 means the score prefers other frames to the needle: no buffer size can make up for it.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra import compose, initialize_config_dir

from bench.common import CONF, parse, parser, write_result
from infinipotv import job
from infinipotv.compress.rekv import ReKV
from infinipotv.compress.retrieval import mean_query, top_blocks
from infinipotv.config import RunConfig, as_run_config, register_configs
from infinipotv.factory import build_adapter, build_benchmark, build_parts
from infinipotv.results.stats import bootstrap_ci

EXPERIMENT = "fair_peers"
POLICY = "rekv"
BUDGET = 144
SEED = 2  # the development seed: a diagnosis never looks at the test seeds' videos


class _Ranks:
    """Collects, per layer of the question being asked, where the rule's score puts the needle frames."""

    def __init__(self) -> None:
        self.needle: range | None = None
        self.rows: list[dict[str, float]] = []

    def record(self, scores: torch.Tensor, picked: torch.Tensor) -> None:
        if self.needle is None or self.needle.stop > len(scores):
            return
        needle = torch.tensor(list(self.needle))
        rank = scores.argsort().argsort().double() / max(1, len(scores) - 1)
        n, k = len(scores), len(needle)
        self.rows.append(
            {
                "percentile": float(rank[needle].mean()),
                "hit": float(bool(np.isin(needle.numpy(), picked.numpy()).any())),
                "hit_chance": 1 - math.comb(n - k, len(picked)) / math.comb(n, len(picked)),
                "candidates": float(n),
            }
        )


def recording_rule(rule: ReKV, ranks: _Ranks) -> ReKV:
    """``rule`` whose selection also reports its scores to ``ranks`` (the selection itself is unchanged)."""

    class Recording(type(rule)):  # type: ignore[misc, valid-type]
        def select(self, queries: torch.Tensor, block_keys: torch.Tensor, n_select: int) -> torch.Tensor:
            picked = super().select(queries, block_keys, n_select)
            kv_heads = block_keys.shape[1] // queries.shape[-1]
            scores = block_keys.float() @ mean_query(queries, kv_heads).to(block_keys.device)
            if not torch.equal(top_blocks(scores, n_select).cpu(), picked.cpu()):  # the score is the rule's own
                raise AssertionError("bench.retrieval_ranks scores blocks otherwise than ReKV.select")
            ranks.record(scores.cpu(), picked.cpu())
            return picked

    return Recording(**asdict(rule))


def compose_config(n_videos: int, smoke_root: Path | None) -> RunConfig:
    """The development run's config for ReKV (its study sweep line); ``smoke_root``: a benchmark generated there."""
    overrides = [
        f"+experiment={EXPERIMENT}",
        f"compress={POLICY}",
        f"compress.budget={BUDGET}",
        f"benchmark.seed={SEED}",
        f"benchmark.options.n_videos={n_videos}",
    ]
    if smoke_root is not None:
        overrides.append(f"benchmark.root={smoke_root}")
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return as_run_config(compose("config", overrides=overrides))


def measure(cfg: RunConfig, n_frames: int | None) -> dict[str, Any]:
    """Stream every video of ``cfg`` (its first ``n_frames``), ask each question whose needle it holds at the end;
    the per-layer ranks of each question's needle frames."""
    adapter = build_adapter(cfg)
    ranks = _Ranks()
    parts = build_parts(cfg, adapter)
    parts = replace(parts, policy=recording_rule(parts.policy, ranks))
    per_question: list[list[dict[str, float]]] = []
    for sample in build_benchmark(cfg).samples():
        with job.sample_frames(sample, cfg, adapter) as source:
            frames = source.read(0, n_frames or len(source))
            times = source.times[: len(frames)]
            fps = source.fps
        session = parts.session(cfg.compress.c_ratio)
        session.start(sample.video_id)
        for start in range(0, len(frames), cfg.eval.chunk_frames):
            session.feed(frames[start : start + cfg.eval.chunk_frames], fps)
        session.finish()
        for q in sample.questions:
            evidence = job.evidence_frames(q, times)
            if evidence is None:
                continue
            ranks.needle, ranks.rows = range(*evidence), []
            session.ask(q.prompt, 1, evidence=evidence, question=q.text)  # one token: the retrieval is measured
            if ranks.rows:
                per_question.append(ranks.rows)
    return summarize(per_question)


def summarize(per_question: list[list[dict[str, float]]]) -> dict[str, Any]:
    """Means per layer, and over layers with a bootstrap CI over questions."""
    if not per_question:
        return {"questions": 0}
    percentile = np.array([[r["percentile"] for r in rows] for rows in per_question])  # [questions, layers]
    hit = np.array([[r["hit"] for r in rows] for rows in per_question])
    hit_chance = np.array([[r["hit_chance"] for r in rows] for rows in per_question])
    weights = np.full(len(per_question), 1 / len(per_question))
    low, high = bootstrap_ci(percentile.mean(axis=1), weights)
    return {
        "questions": len(per_question),
        "candidates": float(np.mean([rows[0]["candidates"] for rows in per_question])),
        "percentile": float(percentile.mean()),
        "percentile_ci95": [low, high],
        "hit": float(hit.mean()),
        "hit_chance": float(hit_chance.mean()),
        "per_layer": [
            {"layer": i, "percentile": float(p), "hit": float(h), "hit_chance": float(c)}
            for i, (p, h, c) in enumerate(
                zip(percentile.mean(axis=0), hit.mean(axis=0), hit_chance.mean(axis=0), strict=True)
            )
        ],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--videos", type=int, default=10, help="development videos (the study's grid has 10)")
    args = parse(p, argv)
    start = time.perf_counter()
    if args.smoke:  # one generated video's first 40 frames (its first needles): seconds
        data = measure(compose_config(1, smoke_root=args.out / "data"), 40)
    else:
        data = measure(compose_config(args.videos, smoke_root=None), None)
    data.update(experiment=EXPERIMENT, policy=POLICY, budget=BUDGET, seed=SEED, seconds=time.perf_counter() - start)
    path = write_result(args.out, "retrieval_ranks", data, args.smoke, torch.device("cpu"))
    text = "\n".join(markdown(json.loads(path.read_text()))) + "\n"
    path.with_suffix(".md").write_text(text)
    print(text)
    return data


def markdown(data: dict[str, Any]) -> list[str]:
    """The overall rank with its CI, then one row per layer."""
    smoke = "smoke run, " if data["smoke"] else ""
    lines = [
        "# Where ReKV's score ranks the needle frames",
        "",
        f"`python -m bench.retrieval_ranks` at {data['environment']['git_sha']} ({smoke}{data['policy']} at |M| = "
        f"{data['budget']}, development seed {data['seed']}, the config of experiments/{data['experiment']}.yaml). "
        "Each question asked at the end of its video; per layer, the needle frames' mean rank among the candidate "
        "frames under the question's mean pre-RoPE query dotted with each frame's mean pre-RoPE key (0 lowest, 1 "
        "highest, 0.5 a random score), and the share of questions whose retrieved frames include a needle frame.",
        "",
    ]
    if not data["questions"]:
        return [*lines, "No question's needle lay in the streamed frames."]
    low, high = data["percentile_ci95"]
    lines += [
        f"{data['questions']} questions, {data['candidates']:.0f} candidate frames on average: the needle's mean "
        f"percentile {data['percentile']:.3f} (95% CI {low:.3f}-{high:.3f}); a needle frame retrieved in "
        f"{100 * data['hit']:.1f}% of the layer-questions, where a random choice of as many frames would in "
        f"{100 * data['hit_chance']:.1f}%.",
        "",
        "| Layer | Needle percentile | Needle retrieved % | By chance % |",
        "| --: | --: | --: | --: |",
        *(
            f"| {r['layer']} | {r['percentile']:.3f} | {100 * r['hit']:.1f} | {100 * r['hit_chance']:.1f} |"
            for r in data["per_layer"]
        ),
    ]
    return lines


if __name__ == "__main__":
    main()
