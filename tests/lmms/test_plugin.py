"""The lmms-eval model plugin: found through the entry point, configured by Hydra, streaming as run.py streams."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from infinipotv.data.toy_lmms import build_hf_home, our_config
from tests.lmms.lmms_data import NO_LMMS

pytestmark = pytest.mark.lmms
pytest.importorskip("lmms_eval", reason=NO_LMMS)

from lmms_eval.models import get_model  # noqa: E402

from infinipotv.config import ConfigError  # noqa: E402
from infinipotv.data.videomme import VideoMME  # noqa: E402
from infinipotv.job import read_predictions, run_job  # noqa: E402
from infinipotv.lmms.compose import compose_run_config  # noqa: E402
from infinipotv.lmms.plugin import InfiniPotV, _video_path  # noqa: E402

# |M| = 40 with 4 vision tokens per model frame: the 24 frames of a 12 s video (2 fps) force compression passes.
MODEL_ARGS = {
    "model": "tiny_qwen2vl",
    "model.max_pixels": 3136,
    "compress": "tar_van_pool",
    "compress.budget": 40,
    "eval.chunk_frames": 4,
    "eval.max_new_tokens": 4,
    "quant": "int4",
}
GREEDY = {"max_new_tokens": 16, "temperature": 0, "do_sample": False, "num_beams": 1}
TRACE = ("frames_seen", "video_tokens", "total_tokens", "cache_bytes")


def test_lmms_eval_finds_the_plugin_through_its_entry_point() -> None:
    assert get_model("infinipotv") is InfiniPotV


def test_model_args_are_hydra_overrides_of_run_py_configs() -> None:
    cfg = compose_run_config(
        {
            "model": "tiny_qwen2vl",
            "compress": "tar_van_pool",
            "compress.budget": 200,
            "compress.c_ratio": 0.5,
            "quant": "int4",
            "model.use_chat_template": False,
        }
    )
    assert (cfg.model.family, cfg.model.tiny, cfg.model.use_chat_template) == ("qwen2vl", True, False)
    assert (cfg.compress.name, cfg.compress.budget, cfg.compress.c_ratio) == ("tar_van_pool", 200, 0.5)
    assert (cfg.quant.name, cfg.quant.bits) == ("int4", 4)


@pytest.mark.parametrize(
    "args, message",
    [
        ({"benchmark": "videomme"}, "--tasks"),  # lmms-eval decides the task
        ({"run_dir": "/tmp/x"}, "--output_path"),
        ({"compress": "no_such_policy"}, "no_such_policy"),  # Hydra's own error, named
        ({"compress": "tar_van_pool", "compress.budget": 20}, "eval.chunk_frames"),  # validate() runs
        ({"config_dir": "/nonexistent"}, "config.yaml"),
        ({"batch_size": 4}, "--batch_size 1"),
    ],
)
def test_bad_model_args_fail_with_the_fix(args: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        InfiniPotV(**args)


@pytest.fixture(scope="module")
def plugin() -> InfiniPotV:
    return InfiniPotV(**MODEL_ARGS)


def _requests(plugin: InfiniPotV, questions: list, gen_kwargs: dict = GREEDY) -> list[SimpleNamespace]:
    """lmms-eval's generate_until requests (only ``args`` is read) over ``(prompt, video path)`` pairs."""
    plugin.task_dict = {"videomme": {"test": [{"path": str(path)} for _, path in questions]}}
    return [
        SimpleNamespace(args=(prompt, dict(gen_kwargs), lambda doc: [doc["path"]], i, "videomme", "test"))
        for i, (prompt, _) in enumerate(questions)
    ]


@pytest.mark.slow
def test_plugin_streams_and_answers_as_run_py(plugin: InfiniPotV, tmp_path: Path, monkeypatch) -> None:
    home = build_hf_home(tmp_path / "hf", n_frames=48)
    bench = our_config(home, "videomme_local")
    samples = VideoMME(bench).load()
    by_video = [[(q.prompt, s.path) for q in s.questions] for s in samples]
    interleaved = [q for pair in zip(*by_video) for q in pair]  # A0 B0 A1 B1: answers must come back in order
    starts = []
    monkeypatch.setattr(plugin.session, "start", lambda vid, f=plugin.session.start: (starts.append(vid), f(vid)))
    answers = plugin.generate_until(_requests(plugin, interleaved))

    run_job(replace(plugin.cfg, benchmark=bench), tmp_path / "run")
    outputs = {r["prompt"]: r["output"] for r in read_predictions(tmp_path / "run" / "predictions.jsonl")}
    assert answers == [outputs[prompt] for prompt, _ in interleaved]
    assert starts == [s.video_id for s in samples]  # each video streamed once
    memory = [json.loads(line) for line in (tmp_path / "run" / "memory.jsonl").read_text().splitlines()]
    job_trace = [{k: m[k] for k in TRACE} for m in memory if m["video_id"] == samples[-1].video_id]
    assert job_trace == [{k: getattr(step, k) for k in TRACE} for step in plugin.session.trace]
    assert any(step.compress for step in plugin.session.trace)


def test_until_cuts_the_answer_and_sampling_is_refused(plugin: InfiniPotV, hf_home: Path) -> None:
    question = [("What is shown?", hf_home / "videomme" / "data" / "vmmeA.mp4")]
    (full,) = plugin.generate_until(_requests(plugin, question))
    (cut,) = plugin.generate_until(_requests(plugin, question, {**GREEDY, "until": ["\n"]}))
    assert cut == full.split("\n")[0]
    with pytest.raises(ValueError, match="greedily"):
        plugin.generate_until(_requests(plugin, question, {**GREEDY, "do_sample": True}))


def test_unsupported_requests_say_why(plugin: InfiniPotV) -> None:
    with pytest.raises(NotImplementedError, match="generate_until"):
        plugin.loglikelihood([])
    with pytest.raises(TypeError, match="one video file"):
        _video_path([object(), object()], "some_image_task")
