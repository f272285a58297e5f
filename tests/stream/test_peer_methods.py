"""StreamMem, StreamingVLM and StreamingTOM through the real session (docs/peers.md): StreamingVLM's contiguous
positions are exact; StreamMem's and StreamingVLM's memories stay within |M| and never depend on a question;
StreamingTOM's forwards read at most prefix + |M| while its OQM grows by exactly its stated bytes per frame; bad
knobs are refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from infinipotv.compress import build
from infinipotv.config import ConfigError, ModelConfig
from infinipotv.factory import validate
from infinipotv.kv import FullPrecisionStore
from infinipotv.kv.cache import StoreLayer
from infinipotv.kv.oqm import OQMLayer, group_bytes
from infinipotv.models import ADAPTERS
from infinipotv.models.base import ModelAdapter
from infinipotv.stream.reference import tiny_adapter
from infinipotv.stream.session import TEXT_ID, StreamingSession
from tests.helpers import run_py
from tests.models.test_rerotate import rotated_by_the_decoder
from tests.symbolic.conftest import compose_run

CHUNK = 2
QUESTIONS = ("What is shown?", "Count the scenes.")


def fp32() -> FullPrecisionStore:
    return FullPrecisionStore(torch.float32)


def noise(n: int, seed: int = 0, size: tuple[int, int] = (56, 56)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, size=(n, *size, 3)).astype(np.uint8)


def scenes(n: int, hold: int = 3, seed: int = 0) -> np.ndarray:
    """Scenes held for ``hold`` frames, exact repeats: StreamMem merges them before the LLM."""
    return noise(n // hold + 1, seed)[np.arange(n) // hold]


def symbolic_adapter() -> ModelAdapter:
    """The real SmolLM2 of the symbolic benchmark (1-D RoPE), as conf/model/symbolic.yaml loads it."""
    return ADAPTERS["symbolic"].load(ModelConfig(family="symbolic", max_pixels=3072, use_chat_template=False))


def glyph_video(n: int) -> np.ndarray:
    from bench.common import FrameStream

    return np.concatenate(list(FrameStream(48, 64, n, CHUNK, scene_frames=3, glyph_patch=16)))  # 12 tokens a frame


def stream(
    adapter: ModelAdapter,
    name: str,
    budget: int,
    video: np.ndarray,
    questions: tuple[str, ...] = (),
    make_store=fp32,
    **params,
) -> StreamingSession:
    """Stream ``video`` in chunks of 2 frames; with ``questions``, ask them after every third chunk, the next
    chunk's first frame prefilled with them as a streaming question's frames are."""
    session = StreamingSession(adapter, build(name, **params), budget, 0.75, make_store)
    session.start("v")
    for k, i in enumerate(range(0, len(video), CHUNK)):
        session.feed(video[i : i + CHUNK], fps=2.0)
        if questions and k % 3 == 2 and i + CHUNK < len(video):
            tail = video[i + CHUNK : i + CHUNK + adapter.frames_per_step]
            for q in questions:
                session.ask(q, max_new_tokens=2, frames=tail, fps=2.0)
    session.finish()
    return session


def stored(session: StreamingSession) -> list[torch.Tensor]:
    return [t for store in session.video.cache.stores for t in (*store.read(), store.token_ids())]


# -- StreamingVLM: contiguous positions ------------------------------------------------------------------------
def pre_rope_keys_by_token(adapter: ModelAdapter, session: StreamingSession) -> tuple[list[dict], list]:
    """Record, for every token the session commits from now on, each layer's key before RoPE (the ``k_proj``
    output of the forward that prefilled it), by (stream id, place among the prefix's text tokens); with the hook
    handles to remove."""
    table: list[dict[tuple[int, int], torch.Tensor]] = [{} for _ in range(adapter.n_layers)]
    heads, dim = adapter.n_kv_heads, adapter.head_dim
    outputs: dict[int, torch.Tensor] = {}
    prefill = session._prefill

    def hook(layer: int):
        def record(_module, _inputs, output: torch.Tensor) -> None:
            outputs[layer] = output[0].view(output.shape[1], heads, dim).transpose(0, 1).float().clone()

        return record

    def recorded(embeds: torch.Tensor, positions: torch.Tensor, token_ids: torch.Tensor, stream: bool = True) -> None:
        outputs.clear()
        prefill(embeds, positions, token_ids, stream)
        for layer, keys in outputs.items():
            for j, token in enumerate(token_ids.tolist()):
                table[layer][(token, j if token == TEXT_ID else 0)] = keys[:, j]

    handles = [a.k_proj.register_forward_hook(hook(layer)) for layer, a in enumerate(adapter.attention_layers())]
    session._prefill = recorded
    return table, handles


@pytest.mark.parametrize("family", ["symbolic", "llava_ov"])
def test_shrink_renumbers_every_stored_key_exactly(family: str) -> None:
    """After many evictions, the memory [prefix | newest frames] sits at positions 0, 1, ..: every stored key
    equals its pre-RoPE key rotated by the decoder's own RoPE at that contiguous position (fp32 tolerance)."""
    adapter = symbolic_adapter() if family == "symbolic" else tiny_adapter("llava_ov")
    video, budget = (glyph_video(24), 36) if family == "symbolic" else (noise(24), 64)
    session = StreamingSession(adapter, build("streamingvlm"), budget, 0.75, fp32)
    table, handles = pre_rope_keys_by_token(adapter, session)
    try:
        session.start("v")
        for i in range(0, len(video), CHUNK):
            session.feed(video[i : i + CHUNK], fps=2.0)
        v = session.video
        assert sum(bool(s.compress) for s in v.trace) >= 8 and v.video_tokens == budget
        assert v.video_start == v.prefix_len  # 1-D RoPE: the video follows the prefix
        for layer, store in enumerate(v.cache.stores):
            keys, _ = store.read()
            ids = store.token_ids()[0].tolist()
            assert ids[v.prefix_len :] == list(range(v.vision_tokens - budget, v.vision_tokens))  # newest frames
            pre = torch.stack([table[layer][(t, j if t == TEXT_ID else 0)] for j, t in enumerate(ids)], dim=1)
            expected = rotated_by_the_decoder(adapter, pre, adapter.text_positions(0, len(ids)))
            torch.testing.assert_close(keys, expected, atol=1e-4, rtol=1e-5)
        answer = session.ask(QUESTIONS[0], max_new_tokens=1)  # the question continues from the memory's end
        assert answer.tokens is not None and v.video_tokens == budget
    finally:
        for handle in handles:
            handle.remove()


# -- StreamMem and StreamingVLM: bounded, query-agnostic ------------------------------------------------------------
@pytest.mark.parametrize(
    ("family", "name"),
    [
        ("llava_ov", "streammem"),
        ("llava_ov", "streamingvlm"),
        pytest.param("qwen2vl", "streammem", marks=pytest.mark.slow),
        pytest.param("qwen2vl", "streamingvlm", marks=pytest.mark.slow),
    ],
)
def test_memory_is_bounded_and_query_agnostic(family: str, name: str) -> None:
    """|M| video tokens at most after every step, and questions asked mid-stream (with the frames since the last
    boundary) leave the stores byte-identical to a stream without any."""
    adapter, budget = tiny_adapter(family), 48
    video = scenes(36) if family == "llava_ov" else scenes(72, hold=6)  # 16 and 4 tokens per model frame
    plain = stream(adapter, name, budget, video)
    asked = stream(adapter, name, budget, video, questions=QUESTIONS)
    reordered = stream(adapter, name, budget, video, questions=QUESTIONS[::-1])
    assert all(s.video_tokens <= budget for s in plain.trace)
    assert sum(bool(s.compress) for s in plain.trace) >= 3  # the stream ran past |M| many times
    expected = stored(plain)
    for other in (asked, reordered):
        got = stored(other)
        assert len(got) == len(expected) and all(torch.equal(a, b) for a, b in zip(expected, got))
        assert [s.cache_bytes for s in other.trace] == [s.cache_bytes for s in plain.trace]


def test_streammem_prototypes_are_stored_and_counted() -> None:
    """Prototypes carry ids -2 - frame of the frames streamed (merged runs give one), count inside |M| (the
    default) and their bytes are in the trace: every step's bytes are its tokens, prototypes included, at the
    store's rate."""
    adapter, budget = tiny_adapter("llava_ov"), 48
    session = stream(adapter, "streammem", budget, scenes(24, hold=2))  # each chunk: one scene, merged
    v = session.video
    per_frame = v.grid[0] * v.grid[1]
    per_token = 2 * adapter.n_kv_heads * adapter.head_dim * 4 + adapter.n_kv_heads * 4  # fp32 K, V; int32 ids
    for step in session.trace:
        assert step.video_tokens <= budget
        assert step.cache_bytes == adapter.n_layers * step.total_tokens * per_token
    for store in v.cache.stores:
        ids = store.token_ids()
        assert ids.shape[1] == v.prefix_len + v.video_tokens
        prototypes = ids[:, v.prefix_len :][ids[:, v.prefix_len :] < TEXT_ID]
        assert prototypes.numel() > 0  # prototypes survive the proxy's selection
        frames = -2 - prototypes
        assert bool((frames >= 0).all()) and bool((frames < v.vision_tokens // per_frame).all())
        assert bool((frames % CHUNK == 0).all())  # one merged frame per chunk, one prototype each
    assert session.trace[-1].total_tokens == session.video.cache.committed_length()


# -- StreamingTOM: what a forward reads, OQM growth ---------------------------------------------------------------
def test_streamingtom_reads_at_most_prefix_plus_M_and_grows_by_its_groups(monkeypatch) -> None:
    """A chunk's forward reads the prefix and the newest window, a question's the prefix and the retrieved groups:
    never more than prefix + |M| tokens (a budget that is not whole groups included). The OQM grows by exactly
    ``layers x group_bytes(H, D, G, bits, s)`` per frame (s: the stored dtype's bytes, 4 here, 2 in fp16/bf16)."""
    adapter, budget = tiny_adapter("llava_ov"), 66  # G = 4 of 16 tokens per frame: 16.5 groups
    reads: list[tuple[bool, int]] = []
    update = StoreLayer.update

    def counted(self, key_states, value_states, *args, **kwargs):
        out = update(self, key_states, value_states, *args, **kwargs)
        own = self.tail[0].shape[1] if self.transient else key_states.shape[2]
        reads.append((self.transient, out[0].shape[2] - own))
        return out

    monkeypatch.setattr(StoreLayer, "update", counted)
    session = stream(adapter, "streamingtom", budget, noise(40), questions=QUESTIONS)
    answer = session.ask(QUESTIONS[0], max_new_tokens=2)
    v = session.video
    assert isinstance(v.cache.layers[0].store, OQMLayer)
    oqm = v.cache.layers[0].store.oqm
    retain = build("streamingtom").tokens_kept(v.grid[0] * v.grid[1])
    assert oqm.n_groups == 40 and len(oqm) == v.prefix_len + 40 * retain  # every frame kept, G tokens each
    limit = v.prefix_len + budget
    assert max(n for _, n in reads) == v.prefix_len + budget // retain * retain <= limit
    assert any(t and n == v.prefix_len + budget // retain * retain for t, n in reads)  # a question's full view
    assert answer.accelerator_bytes > sum(v.cache.nbytes().values())  # the dequantized view is counted
    per_frame = adapter.n_layers * group_bytes(adapter.n_kv_heads, adapter.head_dim, retain, 4, 4)
    growth = [b.cache_bytes - a.cache_bytes for a, b in zip(session.trace, session.trace[1:])]
    assert growth == [CHUNK * per_frame] * len(growth)
    assert [s.accelerator_bytes for s in session.trace] == [s.cache_bytes for s in session.trace]


# -- bad knobs --------------------------------------------------------------------------------------------------
def test_bad_knobs_are_refused_in_one_line() -> None:
    adapter = tiny_adapter("llava_ov")  # 16 tokens per frame
    cases = [
        (dict(name="streamingtom", budget=64, retain=17), "compress.retain"),
        (dict(name="streamingtom", budget=3), "compress.budget"),
        (dict(name="streammem", budget=2), "eval.chunk_frames"),  # a chunk of 2 frames leaves no room for tokens
        (dict(name="streammem", budget=31), "eval.chunk_frames"),  # 32 tokens: more than |M|
    ]
    for case, fix in cases:
        with pytest.raises(ValueError) as refused:
            stream(adapter, video=noise(4), **case)
        message = str(refused.value)
        assert fix in message and "\n" not in message, message


STORAGE_REFUSALS = [
    (["compress=streamingtom", "quant=int8"], "quant=fp16"),
    (["compress=streamingtom", "quant=int4", "model=tiny_qwen2vl", "compress.budget=96"], "its own 4-bit store, OQM"),
]


@pytest.mark.parametrize(("overrides", "fix"), STORAGE_REFUSALS)
def test_a_storage_the_method_cannot_use_is_a_config_error(overrides: list[str], fix: str) -> None:
    """StreamingTOM's OQM is its own low-bit store: KIVI is refused when the config is validated, before any model
    loads, in one line that says how the two compare. StreamingVLM's window takes KIVI codes in either position
    mode (issue 57: under shrink they are dequantized, then rotated on read), and MuKV's blocks too."""
    with pytest.raises(ConfigError) as refused:
        validate(compose_run(*overrides))
    assert fix in str(refused.value) and "\n" not in str(refused.value)
    for mode in ("shrink", "original"):
        validate(
            compose_run(
                "compress=streamingvlm",
                f"compress.pos_mode={mode}",
                "quant=int4",
                "model=tiny_qwen2vl",
                "compress.budget=96",
            )
        )
    validate(compose_run("compress=mukv", "quant=int4", "model=tiny_llava_ov"))


@pytest.mark.slow
def test_run_py_refuses_it_in_one_line(tmp_path) -> None:
    overrides, fix = STORAGE_REFUSALS[0]
    out = run_py(*overrides, f"run_dir={tmp_path / 'run'}")
    assert out.returncode == 2 and fix in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (tmp_path / "run" / "predictions.jsonl").exists()
