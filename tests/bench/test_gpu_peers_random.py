"""``bench.gpu_peers --random-weights``: the written-out 7B shapes are the released models' (parameter counts, on the
meta device: no memory), and the random-weights path runs end to end at tiny shapes on the CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench import gpu_peers
from bench.report import render
from bench.shapes import SHAPES, build_model
from infinipotv.models.llava_ov import VISION_TOKENS, llava_tokenizer

# the written-out shapes' exact counts; the released checkpoints' model cards give 8.29B and 8.03B
PARAMETERS = {"qwen2vl": 8_291_375_616, "llava_ov": 8_030_807_584}


@pytest.fixture(autouse=True)
def _restore_threads():
    """The bench sets torch's thread count (--threads): give the other tests theirs back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("family", sorted(PARAMETERS))
def test_7b_shapes_have_the_released_parameter_counts(family: str) -> None:
    model = build_model(family, SHAPES["7b"][family], torch.device("meta"), torch.bfloat16)
    assert sum(p.numel() for p in model.parameters()) == PARAMETERS[family]
    assert not model.config.tie_word_embeddings
    if family == "llava_ov":  # the placeholders are the offline tokenizer's <image>/<video>, as the adapter reads
        ids = llava_tokenizer().convert_tokens_to_ids(list(VISION_TOKENS))
        assert [model.config.image_token_id, model.config.video_token_id] == ids


def test_random_weights_runs_every_method_on_both_families(tmp_path: Path) -> None:
    argv = ["--random-weights", "--shape", "tiny", "--device", "cpu", "--frames", "8", "--budget", "800"]
    data = gpu_peers.main([*argv, "--out", str(tmp_path)])
    written = json.loads((tmp_path / "gpu_peers.json").read_text())
    assert written["weights"] == "random" and written["smoke"] is False
    assert {f: v["tokens_per_model_frame"] for f, v in data["families"].items()} == {"qwen2vl": 112, "llava_ov": 196}
    runs = {(r["model"], r["method"]): r for r in data["runs"]}
    assert set(runs) == {(f, m) for f in ("qwen2vl", "llava_ov") for m in gpu_peers.METHODS}
    assert runs[("llava_ov", "rekv")]["host_pinned"] is False  # a CPU run: plain host tensors
    assert runs[("llava_ov", "tar_van_pool")]["host_pinned"] is None
    assert all(r["seconds"] > 0 and len(r["ttft_each_s"]) == gpu_peers.ASKS for r in data["runs"])

    # The report renders every gpu_peers*.json in the folder and compares a model's runs at two stream lengths.
    (tmp_path / "gpu_peers.json").rename(tmp_path / "gpu_peers_8.json")
    gpu_peers.main([*argv[:-4], "--families", "qwen2vl", "--frames", "16", "--budget", "800", "--out", str(tmp_path)])
    section = render(tmp_path).read_text().split("## 10.")[1]
    assert section.count("| qwen2vl | 8 |") == section.count("| qwen2vl | 16 |") == len(gpu_peers.METHODS)
    assert "qwen2vl rekv, 8 -> 16 frames: accelerator peak" in section


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: the default device works")
def test_random_weights_without_a_gpu_says_so_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no CUDA GPU here; run on a GPU, or pass --device cpu"):
        gpu_peers.main(["--random-weights", "--out", str(tmp_path)])
