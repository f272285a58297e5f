"""KIVI's quantizer: asymmetric min-max per group, codes packed token-major (model-free, no store logic).

For a group x of G values and b bits: ``mn = min(x)``, ``scale = (max(x) - mn) / (2^b - 1)``,
``q = round(clamp((x - mn) / scale, 0, 2^b - 1))`` (``torch.round``: half to even) and ``x' = q * scale + mn``.
The stored zero is ``mn`` itself, a float, not an integer zero point.

Two group layouts (the two halves of KIVI):

- ``axis="key"``: per channel. A group is G consecutive tokens of one channel; ``scale``/``zero`` are
  ``[..., T / G, D]``. Only whole groups exist, so T must be a multiple of G (the store quantizes keys G at a time).
- ``axis="value"``: per token. A group is G consecutive channels of one token; ``scale``/``zero`` are
  ``[..., T, D / G]``; any T works.

Codes are always packed along the channel axis of each token (``[..., T, D * b / 8]`` uint8, least significant bits
first): every token owns whole bytes, so an evicting store gathers token rows of keys and values alike without ever
unpacking or re-quantizing. Little-endian, this is byte for byte the "32 / b codes per int32 word, LSB first" layout.

Scale and zero keep the dtype of the input: fp16/bf16 activations give the 2-byte scale/zero that the byte accounting
assumes; an fp32 input (CPU tests) keeps fp32 scale/zero (4 bytes each) rather than silently losing precision. Byte
counts therefore always come from the tensors (``QuantizedTensor.nbytes``), never from an assumed width.

The arithmetic is done in the input dtype with the same operations as optimum-quanto's affine quantizer
(``MaxOptimizer``, ``axis_key=-1`` / ``axis_value=0``; rounding before or after the integer clamp is the same), so
codes, scales and dequantized values are bit-identical to it wherever it applies (token counts a multiple of G).

One implementation of that arithmetic, the PyTorch operations below, on every device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

BITS = (2, 4, 8)
Axis = Literal["key", "value"]
AXES: tuple[Axis, ...] = ("key", "value")


def check_bits(bits: int) -> None:
    """Reject a bit width the packer cannot store (codes must tile a byte)."""
    if bits not in BITS:
        raise ValueError(f"bits={bits} is not supported by KIVI storage: use one of {BITS} (16 = full precision)")


def levels(bits: int) -> int:
    """The largest code, 2^b - 1: the number of steps between a group's min and max."""
    return (1 << bits) - 1


def pack_codes(q: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack uint8 codes ``[..., D]`` into ``[..., D * bits / 8]`` bytes, least significant bits first."""
    check_bits(bits)
    per_byte = 8 // bits
    d = q.shape[-1]
    if d % per_byte:
        raise ValueError(f"cannot pack {d} channels at {bits} bits: head_dim must be a multiple of {per_byte}")
    q = q.to(torch.uint8)
    if per_byte == 1:
        return q.contiguous()
    # One strided slice per lane (2 or 4 of them), or'ed into place: a reduction over a last dim of 2-4 elements
    # is an order of magnitude slower on CPU.
    packed = q[..., 0::per_byte].clone()
    for lane in range(1, per_byte):
        packed |= q[..., lane::per_byte] << (lane * bits)
    return packed


def unpack_codes(
    packed: torch.Tensor, bits: int, dtype: torch.dtype = torch.uint8, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Inverse of :func:`pack_codes`: ``[..., D * bits / 8]`` bytes -> codes ``[..., D]`` in ``dtype`` (a float
    dtype converts each lane as it is written: no uint8 copy of the codes, no second pass to convert them).

    ``out`` (``[..., D]``, its last dimension contiguous, e.g. rows of a larger tensor): written in place and
    returned, so a caller can unpack straight into its final buffer. The lowest lane needs no shift and the highest
    no mask (the shift leaves only its bits)."""
    check_bits(bits)
    per_byte = 8 // bits
    if out is None:
        if per_byte == 1:
            return packed.to(dtype)
        out = torch.empty(*packed.shape[:-1], packed.shape[-1] * per_byte, dtype=dtype, device=packed.device)
    if per_byte == 1:
        return out.copy_(packed)
    lanes = out.view(*packed.shape, per_byte)
    for lane in range(per_byte):
        if lane == 0:
            code = packed & levels(bits)
        elif lane == per_byte - 1:
            code = packed >> (lane * bits)
        else:
            code = (packed >> (lane * bits)) & levels(bits)
        lanes[..., lane] = code
    return out


@dataclass(frozen=True)
class QuantizedTensor:
    """Packed codes plus per-group scale and zero (the group minimum), see the module docstring for shapes."""

    codes: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor
    bits: int
    group_size: int
    axis: Axis

    @property
    def nbytes(self) -> int:
        """Bytes of codes, scales and zeros as stored (scale/zero width taken from their dtype)."""
        return self.codes.nbytes + self.scale.nbytes + self.zero.nbytes

    @property
    def shape(self) -> torch.Size:
        """Shape of the dequantized tensor, ``[..., T, D]``."""
        return torch.Size((*self.codes.shape[:-1], self.codes.shape[-1] * 8 // self.bits))


def min_max_params(x: torch.Tensor, bits: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale and zero of the groups that span ``dim`` of ``x`` (kept as a size-1 dim for broadcasting)."""
    mn = x.amin(dim=dim, keepdim=True)
    mx = x.amax(dim=dim, keepdim=True)
    return (mx - mn) / levels(bits), mn


def quantize_codes(x: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int) -> torch.Tensor:
    """uint8 codes of ``x`` under broadcastable ``scale``/``zero``.

    A constant group has scale 0: dividing by 1 there instead gives code 0, which dequantizes exactly to ``zero``
    (the reference code divides 0 by 0 and corrupts the packed word on CPU).
    """
    safe = torch.where(scale == 0, torch.ones_like(scale), scale)
    return (x - zero).div_(safe).clamp_(0, levels(bits)).round_().to(torch.uint8)


def dequantize_codes(
    codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int, out: torch.Tensor | None = None
) -> torch.Tensor:
    """``q * scale + zero`` for packed ``codes`` ``[..., D * bits / 8]`` and per-element ``scale``/``zero``
    ``[..., D]`` (already expanded from their groups), in the scale's dtype (into ``out``, see :func:`unpack_codes`,
    when given)."""
    return unpack_codes(codes, bits, scale.dtype, out).mul_(scale).add_(zero)


def dequantize_grouped(
    codes: torch.Tensor,
    scale: torch.Tensor,
    zero: torch.Tensor,
    bits: int,
    group_size: int,
    axis: Axis,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`dequantize_codes` with ``scale``/``zero`` as stored per group (see :class:`QuantizedTensor`),
    broadcast over their groups instead of expanded to one per element: the same arithmetic, two fewer full-size
    tensors (into ``out`` when given)."""
    q = unpack_codes(codes, bits, scale.dtype, out)
    *lead, t, d = q.shape
    if axis == "key":
        grouped, s, z = q.view(*lead, t // group_size, group_size, d), scale.unsqueeze(-2), zero.unsqueeze(-2)
    else:
        grouped, s, z = q.view(*lead, t, d // group_size, group_size), scale.unsqueeze(-1), zero.unsqueeze(-1)
    return grouped.mul_(s).add_(z).view(*lead, t, d)


def expand_value_params(p: torch.Tensor, group_size: int) -> torch.Tensor:
    """Per-token value scale or zero ``[..., T, D / G]`` -> one per element ``[..., T, D]``."""
    return p.repeat_interleave(group_size, dim=-1)


def expand_key_params(p: torch.Tensor, group_size: int) -> torch.Tensor:
    """Per-channel key scale or zero ``[..., T / G, D]`` -> one per element ``[..., T, D]``."""
    return p.repeat_interleave(group_size, dim=-2)


def _check_input(x: torch.Tensor, bits: int, group_size: int, axis: str) -> None:
    check_bits(bits)
    if axis not in AXES:
        raise ValueError(f"axis={axis!r}: use 'key' (per channel, groups of tokens) or 'value' (per token)")
    if not x.is_floating_point():
        raise TypeError(f"quantize() needs a floating-point tensor, got {x.dtype}")
    if x.dim() < 2:
        raise ValueError(f"quantize() needs [..., tokens, head_dim], got shape {tuple(x.shape)}")
    if group_size <= 0:
        raise ValueError(f"group_size={group_size} must be positive")
    t, d = x.shape[-2], x.shape[-1]
    if axis == "key" and t % group_size:
        raise ValueError(
            f"keys are quantized per channel in whole groups of group_size={group_size} tokens, got {t} tokens: "
            "quantize a multiple of group_size (keep the rest in the full-precision residual window)"
        )
    if axis == "value" and d % group_size:
        raise ValueError(
            f"values are grouped over channels: head_dim={d} must be a multiple of group_size={group_size}"
        )


def quantize(x: torch.Tensor, bits: int, group_size: int, axis: Axis) -> QuantizedTensor:
    """Quantize ``x`` ``[..., T, D]`` to ``bits`` with KIVI's grouping for ``axis`` ("key" or "value")."""
    _check_input(x, bits, group_size, axis)
    *lead, t, d = x.shape
    if axis == "key":
        grouped = x.reshape(*lead, t // group_size, group_size, d)
        scale, zero = min_max_params(grouped, bits, dim=-2)
        codes = quantize_codes(grouped, scale, zero, bits).reshape(*lead, t, d)
        scale, zero = scale.squeeze(-2), zero.squeeze(-2)
    else:
        grouped = x.reshape(*lead, t, d // group_size, group_size)
        scale, zero = min_max_params(grouped, bits, dim=-1)
        codes = quantize_codes(grouped, scale, zero, bits).reshape(*lead, t, d)
        scale, zero = scale.squeeze(-1), zero.squeeze(-1)
    return QuantizedTensor(pack_codes(codes, bits), scale.contiguous(), zero.contiguous(), bits, group_size, axis)


def dequantize(q: QuantizedTensor) -> torch.Tensor:
    """``[..., T, D]`` in the scale's dtype: ``code * scale + zero`` per group."""
    return dequantize_grouped(q.codes, q.scale, q.zero, q.bits, q.group_size, q.axis)
