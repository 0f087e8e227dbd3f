"""NumPy reference of every engine op: the living definition of what the simulator computes.

The convolution accumulates in float64 (the simulator's fp32 sums differ from it only by
rounding); SDP and PDP compute in float32 in the simulator's order, so non-LUT SDP ops and max
pooling match the simulator bit for bit.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from .ops import Conv, Op, Pool, Sdp, _pair, _padding


def conv2d(x: np.ndarray, weights: np.ndarray, stride=1, padding=0, dilation=1,
           groups: int = 1) -> np.ndarray:
    """Direct convolution, NCHW x [K, C/groups, R, S] -> NCHW, float64 accumulation."""
    n, c, h, w = x.shape
    k, c_group, kernel_h, kernel_w = weights.shape
    stride_h, stride_w = _pair(stride, "stride")
    dil_h, dil_w = _pair(dilation, "dilation")
    top, left, bottom, right = _padding(padding)
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    out_h = (h + top + bottom - dil_h * (kernel_h - 1) - 1) // stride_h + 1
    out_w = (w + left + right - dil_w * (kernel_w - 1) - 1) // stride_w + 1
    k_group = k // groups
    grouped_x = padded.reshape(n, groups, c_group, *padded.shape[2:])
    grouped_w = weights.astype(np.float64).reshape(groups, k_group, c_group, kernel_h, kernel_w)
    out = np.zeros((n, groups, k_group, out_h, out_w))
    for r in range(kernel_h):
        for s in range(kernel_w):
            y0, x0 = r * dil_h, s * dil_w
            patch = grouped_x[:, :, :, y0:y0 + stride_h * (out_h - 1) + 1:stride_h,
                              x0:x0 + stride_w * (out_w - 1) + 1:stride_w]
            out += np.einsum("ngchw,gkc->ngkhw", patch, grouped_w[:, :, :, r, s])
    return out.reshape(n, k, out_h, out_w)


def _per_channel(values: np.ndarray, ndim: int) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).reshape((1, -1) + (1,) * (ndim - 2))


def sdp(x: np.ndarray, scale: Optional[np.ndarray] = None, shift: Optional[np.ndarray] = None,
        ew_op: Optional[str] = None, operand: Optional[np.ndarray] = None,
        act: Optional[str] = None, clip=(0.0, 6.0),
        prelu_slope: Optional[np.ndarray] = None) -> np.ndarray:
    """``act(ew(x * scale[c] + shift[c], operand))`` in float32, one rounding per operation."""
    t = np.array(x, dtype=np.float32)
    if scale is not None:
        t = t * _per_channel(scale, t.ndim)
    if shift is not None:
        t = t + _per_channel(shift, t.ndim)
    if ew_op is not None:
        other = np.asarray(operand, dtype=np.float32).reshape(t.shape)
        t = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[ew_op](
            t, other)
    if act == "relu":
        t = np.maximum(t, np.float32(0))
    elif act == "clip":
        t = np.minimum(np.maximum(t, np.float32(clip[0])), np.float32(clip[1]))
    elif act == "prelu":
        t = np.where(t >= 0, t, t * _per_channel(prelu_slope, t.ndim))
    elif act == "sigmoid":
        t = np.float32(1) / (np.float32(1) + np.exp(-t))
    elif act == "tanh":
        t = np.tanh(t)
    elif act is not None:
        raise ValueError(f"unknown activation {act!r}")
    return t.astype(np.float32)


def pool2d(x: np.ndarray, kind: str = "max", kernel=2, stride=2, padding=0,
           count_include_pad: bool = False) -> np.ndarray:
    """Max or average pooling; padding never wins a max and counts in an average only with
    ``count_include_pad``."""
    n, c, h, w = x.shape
    kernel_h, kernel_w = _pair(kernel, "kernel")
    stride_h, stride_w = _pair(stride, "stride")
    top, left, bottom, right = _padding(padding)
    out_h = (h + top + bottom - kernel_h) // stride_h + 1
    out_w = (w + left + right - kernel_w) // stride_w + 1
    fill = -np.inf if kind == "max" else 0.0
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)),
                    constant_values=fill)
    inside = np.pad(np.ones((h, w)), ((top, bottom), (left, right)))
    windows = []
    counts = np.zeros((out_h, out_w))
    for r in range(kernel_h):
        for s in range(kernel_w):
            rows = slice(r, r + stride_h * (out_h - 1) + 1, stride_h)
            cols = slice(s, s + stride_w * (out_w - 1) + 1, stride_w)
            windows.append(padded[:, :, rows, cols])
            counts += inside[rows, cols]
    stacked = np.stack(windows)
    if kind == "max":
        return stacked.max(axis=0).astype(np.float32)
    divisor = kernel_h * kernel_w if count_include_pad else counts
    return (stacked.sum(axis=0) / divisor).astype(np.float32)


def run_op(op: Op, x: np.ndarray) -> np.ndarray:
    """One engine op, as its descriptor says."""
    if isinstance(op, Conv):
        return conv2d(x, op.weights, op.stride, op.padding, op.dilation, op.groups).astype(
            np.float32)
    if isinstance(op, Sdp):
        return sdp(x, op.scale, op.shift, op.ew_op, op.operand, op.act, op.clip, op.prelu_slope)
    if isinstance(op, Pool):
        return pool2d(x, op.kind, op.kernel, op.stride, op.padding, op.count_include_pad)
    raise TypeError(f"not an engine op: {op!r}")


def run_chain(ops: Sequence[Op], x: np.ndarray) -> np.ndarray:
    """A chain of engine ops; 2-D [N, C] input runs as [N, C, 1, 1]."""
    flat = x.ndim == 2
    t = x.reshape(*x.shape, 1, 1) if flat else x
    for op in ops:
        t = run_op(op, t)
    return t.reshape(t.shape[:2]) if flat and t.shape[2:] == (1, 1) else t
