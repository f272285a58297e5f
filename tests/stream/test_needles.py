"""What a question read (:mod:`infinipotv.stream.needles`): the frame-to-id arithmetic, the two shares, every
registered method's view naming exactly the tokens it reads, the text every method's query forward reads (its
upstream's), and the shares a real session records where the answer is known (the full cache reads all of a needle;
a window past it reads none)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
import torch

from infinipotv import compress
from infinipotv.config import ConfigError
from infinipotv.factory import build_adapter, build_parts, validate
from infinipotv.models.base import ModelAdapter
from infinipotv.stream.method import Asked
from infinipotv.stream.needles import Extent, evidence_ids, needle_stats
from tests.symbolic.conftest import compose_run


def test_evidence_ids_follow_the_chunks_extents() -> None:
    # two chunks of 4 raw frames, 2 raw frames a model frame (Qwen), 6 tokens a model frame
    extents = [Extent(0, 4, 0, 12), Extent(4, 4, 12, 12)]
    assert evidence_ids(extents, 2, 4, 2).tolist() == list(range(6, 12))  # model frame 1
    assert evidence_ids(extents, 3, 5, 2).tolist() == list(range(6, 18))  # half of two model frames: both whole
    assert evidence_ids(extents, 8, 10, 2).numel() == 0  # not streamed yet
    assert evidence_ids([Extent(0, 3, 0, 36)], 1, 2, 1).tolist() == list(range(12, 24))  # one raw frame a frame


def test_recall_and_share_average_heads_and_layers() -> None:
    evidence = torch.arange(10, 20)
    text = torch.tensor([-1, -1])
    layer0 = torch.cat([text, torch.arange(10, 15), torch.arange(30, 35)])  # half the needle; half of what it read
    layer1 = torch.stack([torch.cat([text, torch.arange(10, 20)]), torch.cat([text, torch.arange(40, 50)])])
    stats = needle_stats([layer0, layer1], evidence)
    assert stats == pytest.approx({"recall": (0.5 + 1.0 + 0.0) / 3, "share": (0.5 + 1.0 + 0.0) / 3})
    assert needle_stats([layer0], torch.empty(0, dtype=torch.long)) is None


# Tiny LLaVA-OneVision (16 tokens a frame), frames fed one at a time, |M| = 80 tokens (5 frames) of a 12-frame stream.
CASES = sorted(name for name, cls in compress.POLICIES.items() if cls.evicts)


@lru_cache(maxsize=1)
def adapter() -> ModelAdapter:
    return build_adapter(compose_run("model=tiny_llava_ov"))


def stream(name: str, frames: int = 12, budget: str = "80", **knobs: str):
    cfg = compose_run(
        f"compress={name}",
        "model=tiny_llava_ov",
        "eval.chunk_frames=1",
        f"compress.budget={budget}",
        *(f"compress.{k}={v}" for k, v in knobs.items()),
    )
    validate(cfg)
    session = build_parts(cfg, adapter()).session(cfg.compress.c_ratio)
    session.start("v")
    video = np.random.default_rng(0).integers(0, 255, size=(frames + 2, 42, 42, 3)).astype(np.uint8)
    for frame in video[:frames]:
        session.feed(frame[None], fps=1.0)
    return session, video


QUESTION = "What is the door code?"
PROMPT = f"Question: {QUESTION}\nAnswer: The door code is"


@pytest.mark.parametrize("name", CASES)
def test_the_query_forward_reads_what_its_upstream_reads(name: str, monkeypatch) -> None:
    """Before the prompt's own forward a question runs exactly one forward per the method's ``query`` (its
    upstream's: the question's own text for ReKV, StreamKV, MuKV, StreamingTOM and LiveVLM, no cue, no template;
    the prompt for WeaveTime, whose first forward is the prompt's), and none for a method without one. A method that
    reads text before the prompt must declare what it reads: registered methods are covered with no new test code."""
    try:
        session, _ = stream(name)
    except ConfigError as refused:
        pytest.skip(f"refused at |M| = 80: {refused}")
    a = adapter()
    read: list[list[int]] = []
    embed = a.embed_text
    monkeypatch.setattr(a, "embed_text", lambda ids: read.append(list(ids)) or embed(ids))
    session.ask(PROMPT, 1, question=QUESTION)
    query = getattr(compress.build(name), "query", None)
    before = read[: read.index(a.question_ids(PROMPT))]
    assert before == ([a.text_ids(QUESTION)] if query == "question" else [])
    assert query in (None, "question", "prompt")


@pytest.mark.parametrize("name", sorted(n for n in CASES if "query" in compress.policy_params(n)))
def test_query_prompt_reads_the_whole_prompt_and_cue(name: str, monkeypatch) -> None:
    """``compress.query=prompt`` (the ablation) reads the answer's whole prompt, cue included, before the prompt's
    own forward."""
    session, _ = stream(name, query="prompt")
    a = adapter()
    read: list[list[int]] = []
    embed = a.embed_text
    monkeypatch.setattr(a, "embed_text", lambda ids: read.append(list(ids)) or embed(ids))
    session.ask(PROMPT, 1, question=QUESTION)
    assert read[:2] == [a.question_ids(PROMPT)] * 2


def test_what_a_session_records_it_read() -> None:
    """The full cache reads every needle whole; a sliding window reads none of an early needle and all of the
    newest frames; frames since the boundary, prefilled with a streaming question, are read too."""
    full, video = stream("full", budget="null")
    assert full.ask("Q?", 1, evidence=(3, 7)).needle == {"recall": 1.0, "share": pytest.approx(4 / 12)}
    swa, _ = stream("swa")
    assert swa.ask("Q?", 1, evidence=(3, 7)).needle == {"recall": 0.0, "share": 0.0}
    assert swa.ask("Q?", 1, evidence=(10, 12)).needle["recall"] == 1.0
    tail = swa.ask("Q?", 1, frames=video[12:14], fps=1.0, evidence=(12, 14)).needle
    assert tail["recall"] == 1.0 and 0 < tail["share"] < 1


@pytest.mark.parametrize("name", CASES)
def test_every_view_names_the_tokens_it_reads(name: str) -> None:
    """A method's view says, per layer, the stream id of each token its runs hold (what the needle shares count),
    and a question records them: registered methods are covered with no new test code."""
    try:
        session, _ = stream(name)
    except ConfigError as refused:
        pytest.skip(f"refused at |M| = 80: {refused}")
    method = session.method
    view = method.view(session.video, Asked.of_text(adapter(), "What happened?"))
    if view is not None and view.layers is not None:  # None: the stores' own tokens (their ids are the view's)
        for (keys, _), layer_ids in zip(view.layers, view.ids):
            runs = (keys,) if isinstance(keys, torch.Tensor) else keys
            assert layer_ids.shape[-1] == sum(k.shape[1] for k in runs)
    answer = session.ask("What happened?", 2, evidence=(6, 10))
    assert answer.needle is not None and 0.0 <= answer.needle["recall"] <= 1.0
