"""Relax rewrites that run before the pattern table, so that what the hardware does in one
engine reaches the partitioner as one op. Each keeps the module's meaning exactly (TVM's host
build of the result computes the same values).

- An explicit zero padding before a convolution (``nn.ZeroPad2d``, ``F.pad(x, ..., value=0)``)
  becomes the convolution's own, possibly asymmetric, padding: the CONV engine pads as it reads
  (NVDLA's CDMA), where a separate pad op would stay on the host.
- ONNX's Clip with its bounds as inputs (torch's export of ReLU6) becomes ``relax.clip``, as
  the PyTorch frontend gives it: the same model partitions the same from either frontend.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import DFPattern, is_call_tir, is_const, is_op, rewrite_call, wildcard

from .layer import constant_value, is_constant


_PAD = is_op("relax.nn.pad")(wildcard())
_CONV_OF_PAD = is_op("relax.nn.conv2d")(_PAD, wildcard())


def _fold_pad(expr: relax.Expr, matches) -> relax.Expr:
    conv, pad = matches[_CONV_OF_PAD], matches[_PAD]
    width = [int(v) for v in pad.attrs.pad_width]
    if (str(pad.attrs.pad_mode) != "constant" or float(pad.attrs.pad_value) != 0.0 or
            len(width) != 8 or any(width[:4]) or min(width) < 0 or
            str(conv.attrs.data_layout) != "NCHW" or len(conv.attrs.padding) != 4):
        return expr  # not a zero padding of H and W only
    top, left, bottom, right = (int(v) for v in conv.attrs.padding)
    a = conv.attrs
    return relax.op.nn.conv2d(
        pad.args[0], conv.args[1], strides=a.strides,
        padding=(top + width[4], left + width[6], bottom + width[5], right + width[7]),
        dilation=a.dilation, groups=a.groups, data_layout=a.data_layout,
        kernel_layout=a.kernel_layout, out_layout=a.out_layout, out_dtype=a.out_dtype)


def fold_zero_padding(mod: tvm.IRModule) -> tvm.IRModule:
    """conv2d(pad(x, zeros on H and W)) -> conv2d(x) with the padding added to its own."""
    return _rewrite(mod, _CONV_OF_PAD, _fold_pad)


def _rewrite(mod: tvm.IRModule, pattern, rewriter) -> tvm.IRModule:
    """Every Relax function of ``mod`` with ``pattern`` rewritten."""
    result = tvm.IRModule(mod.functions, attrs=mod.attrs)
    for gv, function in mod.functions_items():
        if isinstance(function, relax.Function):
            result[gv] = rewrite_call(pattern, rewriter, function)
    return result


# ONNX's Clip(x, min, max) with its bounds as inputs (torch exports ReLU6 so) arrives from TVM's
# importer as minimum(maximum(x, where(isnan(lo), -inf, lo)), where(isnan(hi), inf, hi)), two
# call_tir of TE kernels: read back as the clip it is.
def _bound() -> DFPattern:
    constant = is_const()
    return is_op("relax.where")(is_op("relax.isnan")(constant), is_const(), constant) | constant


_LO, _HI, _X = _bound(), _bound(), wildcard()
_MAX = is_call_tir("maximum", [_X, _LO])
_CLIP = is_call_tir("minimum", [_MAX, _HI])


def _bound_value(expr: relax.Expr) -> Optional[float]:
    """The scalar a bound pattern matched (a where(isnan(c), inf, c) is c: c is a number)."""
    if isinstance(expr, relax.Call):  # where(isnan(c), +-inf, c)
        expr = expr.args[2]
    value = constant_value(expr) if is_constant(expr) else None
    if value is None or value.size != 1 or not np.isfinite(value).all():
        return None
    return float(value.reshape(-1)[0])


def _to_clip(expr: relax.Expr, matches) -> relax.Expr:
    lo, hi = _bound_value(matches[_LO]), _bound_value(matches[_HI])
    x = matches[_X]
    if lo is None or hi is None or lo > hi or str(expr.ty) != str(x.ty):  # no broadcast
        return expr
    return relax.op.clip(x, lo, hi)


def clip_from_bounds(mod: tvm.IRModule) -> tvm.IRModule:
    """minimum(maximum(x, lo), hi) of scalar constant bounds (ONNX Clip) -> clip(x, lo, hi)."""
    return _rewrite(mod, _CLIP, _to_clip)
