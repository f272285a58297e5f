"""The markdown table of KV bytes per token per head, computed by :mod:`infinipotv.kv.accounting`.

Run ``python -m infinipotv.kv.bytes_table [--head-dim 128] [--group-size 32]``. The table is generated, never typed,
so the figures in the report move with the formula and its assumptions, printed under it.
"""

from __future__ import annotations

import argparse

from infinipotv.kv.accounting import Storage, bytes_per_token

ROWS = (("FP16 / BF16", 16), ("INT8 KIVI", 8), ("INT4 KIVI", 4), ("INT2 KIVI", 2))


def _fmt(x: float) -> str:
    return f"{x:g}"


def bytes_table(head_dim: int = 128, group_size: int = 32, position_bytes: int = 4, scale_bytes: int = 2) -> str:
    """Markdown table (one row per storage) followed by the assumptions the figures rest on."""
    same = dict(group_size=group_size, scale_bytes=scale_bytes, position_bytes=position_bytes)
    per_token = {bits: bytes_per_token(head_dim, Storage(bits, **same)) for _, bits in ROWS}
    fp16, int4 = per_token[16], per_token[4]
    lines = [
        "| KV | Codes | V scale+zero | K scale+zero | KV data | + position | Bytes / token / head | vs FP16 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, bits in ROWS:
        b = per_token[bits]
        lines.append(
            f"| {name} | {_fmt(b.codes)} | {_fmt(b.value_scale_zero)} | {_fmt(b.key_scale_zero)} | "
            f"{_fmt(b.total - b.positions)} B | {_fmt(b.positions)} | {_fmt(b.total)} B | "
            f"1/{fp16.total / b.total:.2f} |"
        )
    s, d, g, p = scale_bytes, head_dim, group_size, position_bytes
    lines += [
        "",
        f"Assumptions (D = {d}, G = {g}):",
        f"- codes = 2 * D * b / 8 (keys and values); V scale+zero = (D / G) * 2 * {s} B per token (values per token);",
        f"  K scale+zero = D * 2 * {s} / G B per token (keys per channel: one row per group of G tokens, amortised).",
        f"- scale/zero are {s}-byte (fp16/bf16, the activation dtype).",
        f"- every key group is full: after eviction a group with n survivors costs D * 2 * {s} / n B per survivor.",
        "- the full-precision residual window (the newest R to R + G - 1 tokens) is counted apart, at the FP16 rate.",
        f"- one stored position per token per head ({p} B; M-RoPE's three position rows would cost {3 * p} B)."
        if p
        else "- positions are left out (--position-bytes 0).",
        "- not in the figure, measured by store.nbytes(): KiviStore's survivors-per-group counter (2 B per key group",
        "  per head) and padding between heads that keep different numbers of quantized tokens.",
    ]
    if p:
        bare = fp16.total - fp16.positions
        lines.append(
            f"- FP16 without a position is {_fmt(bare)} B: the INT4 study's 1/{bare / int4.total:.1f} sets INT4 with a "
            f"position against FP16 without one; with one on both sides (as the harness stores) it is "
            f"1/{fp16.total / int4.total:.2f}."
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="KV bytes per token per head, FP16 vs KIVI INT8/INT4/INT2")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--group-size", type=int, default=32)
    parser.add_argument("--position-bytes", type=int, default=4, help="stored id per token per head (0 = none)")
    args = parser.parse_args(argv)
    print(bytes_table(args.head_dim, args.group_size, args.position_bytes))


if __name__ == "__main__":
    main()
