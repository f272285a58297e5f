"""When the session compresses: the rule of the spec (a pass when the video part reaches |M| tokens, down to |C|,
after the chunk's forward) and a byte cap held on the bytes the stores occupy.

The schedule decides and the session acts: every method here is arithmetic on counts the session measured, so the
rules can be tested without a model (tests/stream/test_schedule.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from infinipotv.compress import compressed_size
from infinipotv.kv.accounting import Storage, cache_bytes


@dataclass(frozen=True)
class ByteCap:
    """A KV budget given in bytes (``compress.budget_mib``), held on the bytes the stores really occupy.

    The budget is converted to |M| tokens with the full-group formula, but under KIVI a key group thinned by eviction
    keeps its scale/zero row while any token of it survives (never re-quantized: spec/kivi.md), so |M| kept tokens
    can occupy more than the formula says. The session therefore also compresses when a step leaves more than
    ``cap`` bytes, and a pass that leaves more than ``after_pass`` bytes (the formula's figure for |C| tokens) keeps
    fewer tokens, so the cache never holds more than ``cap`` bytes after a step (between a chunk's prefill and the
    pass it triggers it may, by up to that chunk, as with tokens). Full-precision storage costs exactly the formula,
    so for it the cap never acts before |M| tokens.
    """

    cap: int
    after_pass: int

    @classmethod
    def of(cls, budget: int, c_ratio: float, prefix: int, shape: tuple[int, int, int], storage: Storage) -> "ByteCap":
        """The formula's bytes for |M| = ``budget`` and |C| video tokens plus the ``prefix``, over the whole model
        (``shape`` = layers, KV heads, head_dim)."""

        def formula(video: int) -> int:
            return int(cache_bytes(video + prefix, *shape, storage))

        return cls(cap=formula(budget), after_pass=formula(compressed_size(budget, c_ratio)))


@dataclass(frozen=True)
class Schedule:
    """|M| (``budget``) and |C| (``n_keep``) video tokens per KV head, and the byte cap when the budget was given in
    bytes. A session that never compresses (no budget, or a policy that never evicts) has no schedule."""

    budget: int
    n_keep: int
    byte_cap: ByteCap | None = None
    every_chunk: bool = False  # H7: a pass after every chunk that takes the memory past |M|, back to |M|

    @classmethod
    def of(cls, budget: int, c_ratio: float, byte_cap: ByteCap | None = None) -> "Schedule":
        return cls(budget, compressed_size(budget, c_ratio), byte_cap)

    @classmethod
    def per_chunk(cls, budget: int, byte_cap: ByteCap | None = None) -> "Schedule":
        """The streaming methods that decide at every chunk (StreamMem, StreamingVLM): |M| + chunk -> |M|, so
        |C| = |M| and the memory never holds more than |M| after a step (under a byte cap, ``after_pass`` is
        ``cap``)."""
        if budget < 1:
            raise ValueError(f"budget={budget} must be >= 1 vision token (e.g. budget=6000)")
        return cls(budget, budget, byte_cap, every_chunk=True)

    def check_chunk(self, tokens: int, frames: int) -> None:
        """A chunk must hold fewer than |M| - |C| tokens: the pass it triggers then always has tokens to evict.
        Per chunk (|C| = |M|): at most |M| tokens, so a pass never has to evict part of the chunk it follows for
        want of room."""
        if self.every_chunk:
            if tokens > self.budget:
                raise ValueError(
                    f"a chunk of {frames} frames holds {tokens} vision tokens, more than |M| = {self.budget}: "
                    f"lower eval.chunk_frames or raise compress.budget"
                )
            return
        if tokens >= self.budget - self.n_keep:
            raise ValueError(
                f"a chunk of {frames} frames holds {tokens} vision tokens, not fewer than "
                f"|M| - |C| = {self.budget - self.n_keep}: lower eval.chunk_frames or raise compress.budget"
            )

    def due(self, tokens: int) -> int | None:
        """The ``n_keep`` of the pass a chunk triggers when it brings the video part to ``tokens`` per head, or None
        below |M|. The pass runs after the chunk's forward, over every layer (the spec's order).

        Measured on the CPU (docs/performance.md): after the forward a pass over a KIVI cache, its second
        dequantization included, took 0.85x the time of compressing each layer as the forward leaves it (on what
        attention read, no second dequantization), and a full-precision store's read is free; on a GPU, timing a
        pass made inside the forward would synchronise once per layer."""
        if tokens < self.budget + self.every_chunk:
            return None
        return min(self.n_keep, tokens - 1)

    def byte_pass(self, passes: int, held: int, video_tokens: int) -> int | None:
        """Under a byte cap, the ``n_keep`` of one more pass in this step, or None when the step is done.

        ``passes``: the passes this step made so far; ``held``: the bytes the stores occupy now; ``video_tokens``:
        per head, now. With no pass yet, one to |C| when the step left more than ``cap`` bytes; after a pass, one
        keeping fewer tokens in proportion while the cache holds more than ``after_pass`` bytes (each further pass
        runs the same policy on the memory the previous one left). None too when no token would be left."""
        cap = self.byte_cap
        if cap is None:
            return None
        if not passes:
            if held <= cap.cap:
                return None
            n_keep = self.n_keep
        elif held > cap.after_pass:
            n_keep = video_tokens * cap.after_pass // held
        else:
            return None
        n_keep = min(n_keep, video_tokens - 1)
        return n_keep if n_keep >= 1 else None
