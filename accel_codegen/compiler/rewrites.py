"""Relax rewrites that run before the pattern table, so that what the hardware does in one
engine reaches the partitioner as one op. Each keeps the module's meaning exactly (TVM's host
build of the result computes the same values).

- An explicit zero padding before a convolution (``nn.ZeroPad2d``, ``F.pad(x, ..., value=0)``)
  becomes the convolution's own, possibly asymmetric, padding: the CONV engine pads as it reads
  (NVDLA's CDMA), where a separate pad op would stay on the host.
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard


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
    result = tvm.IRModule(mod.functions, attrs=mod.attrs)
    for gv, function in mod.functions_items():
        if isinstance(function, relax.Function):
            result[gv] = rewrite_call(_CONV_OF_PAD, _fold_pad, function)
    return result
