"""The lmms-eval model ``infinipotv``: lmms-eval's video tasks answered by our streaming session.

lmms-eval hands a "simple" model its requests as ``(prompt, generation kwargs, doc_to_visual, doc_id, task, split)``.
The plugin groups them by video, streams each video once through a :class:`StreamingSession` (frames sampled as
``run.py`` samples them, fed in ``eval.chunk_frames`` chunks, compressed under the configured budget and storage) and
answers every question of that video on the same memory. ``ask`` leaves the memory as it found it, so this gives the
answers that streaming the video once per question would, in a third of the time on Video-MME.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lmms_eval.api.instance import Instance
from lmms_eval.api.model import lmms
from loguru import logger
from tqdm import tqdm

from infinipotv.config import ConfigError
from infinipotv.data import VideoSample
from infinipotv.data.video import VideoError
from infinipotv.factory import build_parts
from infinipotv.job import sample_frames
from infinipotv.lmms.compose import compose_run_config

DEFAULT_MAX_NEW_TOKENS = 16  # the benchmarks' short-answer setting, for a task that does not say


class InfiniPotV(lmms):
    """``--model infinipotv --model_args model=...,compress=...,compress.budget=...,quant=...`` (Hydra overrides).

    ``config_dir=`` points at another conf/ folder; lmms-eval's ``--device`` sets ``model.device`` unless the
    model_args do. Decoding is greedy, as in every benchmark we score.
    """

    is_simple = True

    def __init__(
        self,
        batch_size: int | str = 1,
        max_batch_size: int | None = None,
        device: str | None = None,
        config_dir: str | None = None,
        **model_args: Any,
    ) -> None:
        super().__init__()
        if str(batch_size) != "1":
            raise ConfigError(
                f"--batch_size {batch_size}: the streaming session answers one video at a time; use --batch_size 1"
            )
        if device is not None and "model.device" not in model_args:
            model_args["model.device"] = device
        self.cfg = compose_run_config(model_args, config_dir)
        torch.manual_seed(self.cfg.seed)
        parts = build_parts(self.cfg)
        self.session = parts.session(self.cfg.compress.c_ratio)
        logger.info(
            f"infinipotv: {self.cfg.model.family} / {self.cfg.compress.name} (|M| = {parts.budget}) / "
            f"{self.cfg.quant.name}"
        )

    # -- requests -------------------------------------------------------------------------------------------------
    def generate_until(self, requests: list[Instance]) -> list[str]:
        """One answer per request, in request order; each video is decoded and streamed once."""
        by_video: dict[Path, list[int]] = {}
        for i, request in enumerate(requests):
            _, _, doc_to_visual, doc_id, task, split = request.args
            path = _video_path(doc_to_visual(self.task_dict[task][split][doc_id]), task)
            by_video.setdefault(path, []).append(i)
        answers = [""] * len(requests)
        with tqdm(total=len(requests), desc="infinipotv", disable=self.rank != 0) as bar:
            for path, indices in by_video.items():
                for i, text in zip(indices, self._answer_video(path, [requests[i].args for i in indices])):
                    answers[i] = text
                    self.cache_hook.add_partial("generate_until", requests[i].args[:2], text)
                    bar.update(1)
        return answers

    def _answer_video(self, path: Path, args: list[tuple]) -> list[str]:
        session, chunk = self.session, self.cfg.eval.chunk_frames
        try:
            with sample_frames(
                VideoSample(video_id=path.stem, path=path, questions=[]), self.cfg, session.adapter
            ) as frames:
                session.start(path.stem)
                for start in range(0, len(frames), chunk):
                    session.feed(frames.read(start, start + chunk), frames.fps)
        except VideoError as err:
            logger.error(f"infinipotv: {err}; its {len(args)} question(s) get empty answers, scored as wrong")
            return ["" for _ in args]
        session.finish()
        return [self._ask(prompt, gen_kwargs) for prompt, gen_kwargs, *_ in args]

    def _ask(self, prompt: str, gen_kwargs: dict[str, Any]) -> str:
        if gen_kwargs.get("do_sample") or int(gen_kwargs.get("num_beams", 1)) > 1:
            raise ValueError(
                f"generation_kwargs {gen_kwargs}: the streaming session decodes greedily; sampling and "
                f"beam search are not supported (set do_sample: false, num_beams: 1 in the task)"
            )
        max_new = self.cfg.eval.max_new_tokens or int(gen_kwargs.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS))
        text = self.session.ask(prompt, max_new).text  # lmms-eval gives no bare question: the context is the query
        until = gen_kwargs.get("until") or []
        for stop in [until] if isinstance(until, str) else until:
            text = text.split(stop)[0]
        return text

    def loglikelihood(self, requests: list[Instance]) -> list[tuple[float, bool]]:
        raise NotImplementedError(
            "infinipotv answers generate_until requests only: lmms-eval's video tasks videomme, mlvu_dev, "
            "egoschema_subset and longvideobench_val_v generate their answers; the perplexity variants "
            "(e.g. egoschema_subset_mcppl) are not supported"
        )

    def generate_until_multi_round(self, requests: list[Instance]) -> list[str]:
        raise NotImplementedError(
            "infinipotv answers single-round generate_until requests only; for multi-turn "
            "questions on one stream use run.py with benchmark=streamingbench"
        )


def _video_path(visual: Any, task: str) -> Path:
    """The one video file a request is about (lmms-eval's video tasks give ``[path]``)."""
    if isinstance(visual, (list, tuple)) and len(visual) == 1:
        visual = visual[0]
    if not isinstance(visual, (str, Path)):
        raise TypeError(
            f"task {task} gives {type(visual).__name__} visuals; infinipotv streams one video file per "
            f"question (doc_to_visual must return [video_path])"
        )
    return Path(visual)
