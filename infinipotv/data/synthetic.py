"""A self-contained benchmark generated on the fly: real mp4 files written with PyAV and multiple-choice questions.

Each video shows a sequence of solid-colour scenes; the questions ask which colour appeared first, last, or most
often. It exercises the whole pipeline (decode -> stream -> compress -> answer -> score) with nothing from outside.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from infinipotv.config import BenchmarkConfig
from infinipotv.data.base import Benchmark, Question, VideoSample, register
from infinipotv.data.video import write_video

COLOURS = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 70, 220), "yellow": (230, 210, 40)}
LETTERS = "ABCD"
PROMPT = "{question}\n{options}\nAnswer with the option's letter from the given choices directly."


def _generate(root: Path, n_videos: int, frames: int, fps: int, size: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    names = list(COLOURS)
    rows = []
    for v in range(n_videos):
        scenes = rng.choice(names, size=int(rng.integers(3, 6)))
        per = frames // len(scenes)
        seq = [s for s in scenes for _ in range(per)]
        noise = rng.integers(0, 12, size=(len(seq), size, size, 3))
        video = np.stack([np.clip(np.array(COLOURS[s]) + n, 0, 255) for s, n in zip(seq, noise)]).astype(np.uint8)
        vid = f"synthetic_{v:03d}"
        write_video(root / "videos" / f"{vid}.mp4", video, fps)
        facts = {"first": scenes[0], "last": scenes[-1], "most": Counter(seq).most_common(1)[0][0]}
        for kind, answer in facts.items():
            options = list(rng.permutation(names))
            rows.append({"video_id": vid, "question_id": f"{vid}_{kind}", "kind": kind,
                         "question": f"Which colour is shown {'most often' if kind == 'most' else kind} in the video?",
                         "options": options, "answer": LETTERS[options.index(answer)]})
    path = root / "annotations.json"
    path.write_text(json.dumps(rows, indent=1))
    return path


@register
class Synthetic(Benchmark):
    """Options: n_videos (4), frames (32), fps (4), size (56 px), regenerate (false)."""

    name = "synthetic"

    def __init__(self, cfg: BenchmarkConfig) -> None:
        self.cfg = cfg

    def samples(self) -> Iterator[VideoSample]:
        o, root = self.cfg.options, Path(self.cfg.root)
        path = Path(self.cfg.annotations) if self.cfg.annotations else root / "annotations.json"
        if not path.exists() or o.get("regenerate", False):
            path = _generate(root, int(o.get("n_videos", 4)), int(o.get("frames", 32)), int(o.get("fps", 4)),
                             int(o.get("size", 56)), self.cfg.seed)
        by_video: dict[str, list[Question]] = {}
        for row in json.loads(path.read_text()):
            opts = {LETTERS[i]: t for i, t in enumerate(row["options"])}
            prompt = PROMPT.format(question=row["question"], options="\n".join(f"{k}. {t}" for k, t in opts.items()))
            by_video.setdefault(row["video_id"], []).append(
                Question(qid=row["question_id"], prompt=prompt, gold=row["answer"], options=opts,
                         categories={"kind": row["kind"]})
            )
        for vid, questions in by_video.items():
            yield VideoSample(video_id=vid, path=root / "videos" / f"{vid}.mp4", questions=questions)

    def parse(self, output: str, question: Question) -> str | None:
        text = output.strip()
        for letter in question.options:
            if text.startswith(letter) or f"({letter})" in text or f"{letter}." in text:
                return letter
        return None

    def score(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        n = len(records)
        correct = sum(bool(r["correct"]) for r in records)
        kinds: dict[str, list[bool]] = {}
        for r in records:
            kinds.setdefault(r["categories"]["kind"], []).append(bool(r["correct"]))
        return {
            "overall": 100.0 * correct / n if n else float("nan"), "n": n,
            "n_errors": sum(r.get("error") is not None for r in records),
            "breakdown": {"kind": {k: 100.0 * sum(v) / len(v) for k, v in kinds.items()}},
        }
