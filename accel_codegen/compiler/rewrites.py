"""Relax rewrites around the pattern table, so that what the hardware does in one engine reaches
the partitioner as one op. Each keeps the module's meaning exactly (TVM's host build of the
result computes the same values).

- An explicit zero padding before a convolution (``nn.ZeroPad2d``, ``F.pad(x, ..., value=0)``)
  becomes the convolution's own, possibly asymmetric, padding: the CONV engine pads as it reads
  (NVDLA's CDMA), where a separate pad op would stay on the host.
- ONNX's Clip with its bounds as inputs (torch's export of ReLU6) becomes ``relax.clip``, as
  the PyTorch frontend gives it: the same model partitions the same from either frontend.
- torch's unchecked gathers (``take`` in "fast" mode) become bounds-clamped ones: the same
  values in bounds, no read outside the tensor, and no warning from TVM at every build.
- Each part of a ``split`` (torch's chunk and split) becomes a ``strided_slice`` of its own.
- A batched matmul whose weight is a ``broadcast_to`` of one [K, N] matrix (torch.export's Linear
  of a non-contiguous batch: batch-first attention's transposed input) becomes the dense layer
  of its rows, reshaped back (its bias with it).
- A flatten of a global average pool's [N, C, 1, 1] to [N, C] becomes the pool without
  keepdims: no reshape between the PDP and a dense layer, or the function's output.
- SiLU, which torch's frontend decomposes into ``x * sigmoid(x)``, becomes ``relax.nn.silu``:
  one activation for the SDP's lookup table.
- GELU written as its formula (torch.onnx's export: x * (erf(x / sqrt(2)) + 1) * 0.5) becomes
  ``relax.nn.gelu``: one activation for the SDP's lookup table.
- softplus written as its formula (torch's where(b x > c, x, log(exp(b x) + 1) / b), ONNX's
  max(x, 0) + log(1 + exp(-|x|)), log(1 + exp(x))) becomes ``relax.nn.softplus`` (with beta b
  and threshold c: only PyTorch's defaults are the SDP's softplus), applied with the exact
  rewrites below, after ``x * 1`` has gone (``softplus_from_formula``).
- Layer norm written as its formula (Paddle's ONNX export: mean, subtract, power 2, mean, add
  eps, sqrt, divide, * gamma, + beta over the last axis) becomes ``relax.nn.layer_norm``: one
  composite of engine passes (sim/decompose.py).
- Exact rewrites onto what the engines run (``EXACT_REWRITES``, applied after the above): a cast
  to its input's own type is that input; a stride-1 'same' max pool wider than the PDP's window
  becomes a cascade of 5x5 ones (their identical stages computed once: SPP becomes SPPF); the s x
  s phases of x concatenated on channels (Focus, space-to-depth) a one-hot s x s stride-s
  convolution; a permute before the flatten of a dense layer a permutation of the constant
  weight's columns; a reshape of a constant read by several ops the reshaped constant in each;
  ``c - x`` ``x * -1 + c``; a reshape to its input's own shape its input; ``a - b`` of two tensors
  ``a + b * -1``; a broadcast of a constant or a take of one at constant indices the constant they
  compute, a constant operand of lower rank (2 or more axes) the same with leading unit axes, a
  take at one constant index of a computed tensor a strided slice (ViT's class token for its
  head); a convolution strided wider than the CONV's register a one-hot space-to-depth convolution
  then one of kernel k/f and stride s/f (ViT's 16x16 stride-16 patch embedding); a convolution
  whose kernel is wider than the CONV's window one convolution of pieces of at most 32 taps over
  the input's shifted copies stacked on channels (a one-hot depthwise convolution of the
  zero-padded input), or a 1-D one strided beyond the register with S >= K / 32 the stride-1
  convolution of its S phases as channels (a reshape and a transpose: ``wide_kernel_convs``);
  a channels-last
  sandwich of NCHW data (ConvNeXt's block: permute to NHWC, layer norm, Linear, GELU, a
  per-channel scale, permute back) the same ops over the NCHW tensor's channels (layer norm over
  axis 1, a 1x1 conv), without the permutes; a squeeze or expand_dims the reshape to its shape; a
  tile (torch's repeat; ONNX's Tile, a call_tir of TOPI's kernel) x concatenated with itself; a
  softmax over the last axis of reshaped rows (ONNX's opset-12 Softmax) the softmax of the
  tensor's own rows; a permute that swaps the only two axes longer than 1 a transpose of [1, R, S]
  between reshapes; a constant scale and shift per channel after a convolution,
  ``(conv2d(x, W) + b) * c + d`` (PP-LCNetV3's learnable affine blocks, a hardsigmoid's
  ``x * 0.2 + 0.5``), the convolution ``conv2d(x, W c) + (b c + d)`` (one int8 rounding fewer per
  block); one that no convolution before it takes (after a hardswish), read by a convolution
  without padding alone, that convolution's input side ``conv2d(x, W c) + (b + sum W d)``; a
  conv1d of ``[N, C, L]`` the conv2d of ``[N, C, 1, L]`` between reshapes (as torch's frontend
  imports the 1-D pools); a mean over the last axis of ``[N, C, L]`` or over the tokens of
  ``[N, T, C]`` the global average of ``[N, C, 1, L]`` (the tokens transposed first); a
  bilinear upsampling (half-pixel centres) by an even factor the depthwise transposed
  convolution of its tent kernel, of x with its border repeated; a group norm (instance
  norm) the layer norm of each group's values over the last axis of ``[N, G, C H W / G]``,
  reshaped back, then its per-channel scale and shift; ``x * 1`` and ``x + 0`` of constants
  that broadcast x to no more values ``x``; a product or sum of ``[N, C, H, W]`` and a computed
  ``[N, 1, H, W]`` map the same of the map copied to C channels by a 1x1 convolution of ones.
- After matching, a composite that ends at a batch_norm returns its normalised output, not the
  (y, mean, var) tuple (TVM's matcher cannot end a pattern at the tuple item).
- A symbolic dimension that a match_cast defines from constants only (TVM's ONNX import of a
  computed Range) is computed on the host build and bound: the shapes are static again.
- Around MergeCompositeFunctions, which raises at any match_cast binding: one whose value has
  the target type already is a plain binding; the others (run-time shape checks) pass through
  the merge as calls of a checker function and are match_casts again, on the host, after it.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np
import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.dpl import DFPattern, is_call_tir, is_const, is_op, rewrite_call, wildcard

from . import chains
from .layer import constant_value, is_constant
from .relax_exprs import (keepdims_axes, op_name, read_counts, resize_coordinates,
                          strided_sliced)
from .source_names import name_bindings, name_of, named


_PAD = is_op("relax.nn.pad")(wildcard())
_CONV_OF_PAD = is_op("relax.nn.conv2d")(_PAD, wildcard()) | \
    is_op("relax.nn.conv1d")(_PAD, wildcard())


def _fold_pad(expr: relax.Expr, matches) -> relax.Expr:
    conv, pad = matches[_CONV_OF_PAD], matches[_PAD]
    width = [int(v) for v in pad.attrs.pad_width]
    spatial = 2 if conv.op.name == "relax.nn.conv2d" else 1
    if (str(pad.attrs.pad_mode) != "constant" or float(pad.attrs.pad_value) != 0.0 or
            len(width) != 4 + 2 * spatial or any(width[:4]) or min(width) < 0 or
            str(conv.attrs.data_layout) != ("NCHW" if spatial == 2 else "NCW") or
            len(conv.attrs.padding) != 2 * spatial):
        return expr  # not a zero padding of the spatial axes only
    # the conv's padding: the begins of each spatial axis, then the ends; pad_width pairs
    own = [int(v) for v in conv.attrs.padding]
    padding = [own[i] + width[4 + 2 * i] for i in range(spatial)] + \
        [own[spatial + i] + width[5 + 2 * i] for i in range(spatial)]
    a = conv.attrs
    make = relax.op.nn.conv2d if spatial == 2 else relax.op.nn.conv1d
    return make(pad.args[0], conv.args[1], strides=a.strides, padding=padding,
                dilation=a.dilation, groups=a.groups, data_layout=a.data_layout,
                kernel_layout=a.kernel_layout, out_layout=a.out_layout, out_dtype=a.out_dtype)


def fold_zero_padding(mod: tvm.IRModule) -> tvm.IRModule:
    """conv2d(pad(x, zeros on H and W)) -> conv2d(x) with the padding added to its own; the
    same for conv1d and a zero padding of L (a causal convolution's left padding: TCNs,
    WaveNet-style audio models)."""
    return _rewrite(mod, _CONV_OF_PAD, _fold_pad)


def _rewrite(mod: tvm.IRModule, pattern, rewriter) -> tvm.IRModule:
    """Every Relax function of ``mod`` with ``pattern`` rewritten; a call that replaces a
    matched one keeps the source model's name that one had, or the one the rewriter gave it
    (:func:`named_as`)."""
    result = tvm.IRModule(mod.functions, attrs=mod.attrs)
    for gv, function in mod.functions_items():
        if not isinstance(function, relax.Function):
            continue
        bound: Dict[relax.Expr, str] = {}  # value -> variable name, read at the first match
        names: Dict[str, str] = {}  # the rewritten bindings' variables -> their names

        def keeping_names(expr: relax.Expr, matches) -> relax.Expr:
            new = rewriter(expr, matches)
            name = (name_of(new) or name_of(expr)) if new is not expr else None
            if name and not bound:
                bound.update((b.value, b.var.name) for block in function.body.blocks
                             for b in block.bindings)
            if name and expr in bound:
                names[bound[expr]] = name
            return new

        rewritten = rewrite_call(pattern, keeping_names, function)
        # rewrite_call normalises the new calls, which makes them anew, without a span
        result[gv] = name_bindings(rewritten, names) if names else rewritten
    return result


def named_as(new: relax.Expr, old: relax.Expr) -> relax.Expr:
    """``new`` (a call a rewriter returns) with ``old``'s source-model name (its span:
    :mod:`.source_names`): what a rewrite puts in a node's place is that node, for the
    reports. :func:`_rewrite` gives the name to the binding of the call."""
    return named(new, name_of(old))


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


# A Clip with one bound (torch's clamp(min=eps) in F.normalize's export, clamp(max=...)) is
# one call_tir: maximum(x, lo) or minimum(x, hi), the other bound infinite.
_ONE_X, _ONE_BOUND = wildcard(), _bound()
_LOWER_ONLY = is_call_tir("maximum", [_ONE_X, _ONE_BOUND])
_UPPER_ONLY = is_call_tir("minimum", [_ONE_X, _ONE_BOUND])


def _one_sided_clip(lower: bool):
    def rewrite(expr: relax.Expr, matches) -> relax.Expr:
        bound, x = _bound_value(matches[_ONE_BOUND]), matches[_ONE_X]
        # no broadcast; a float tensor alone: clip's infinite other bound has no integer form
        if bound is None or str(expr.ty) != str(x.ty) or \
                not str(x.ty.dtype).startswith(("float", "bfloat")):
            return expr
        return relax.op.clip(x, bound, np.inf) if lower else relax.op.clip(x, -np.inf, bound)
    return rewrite


def clip_from_bounds(mod: tvm.IRModule) -> tvm.IRModule:
    """minimum(maximum(x, lo), hi) of scalar constant bounds (ONNX Clip) -> clip(x, lo, hi);
    maximum(x, lo) or minimum(x, hi) alone (a Clip of one bound) -> clip(x, lo, inf) or
    clip(x, -inf, hi)."""
    mod = _rewrite(mod, _CLIP, _to_clip)
    return _rewrite(_rewrite(mod, _LOWER_ONLY, _one_sided_clip(True)), _UPPER_ONLY,
                    _one_sided_clip(False))


# --- take --------------------------------------------------------------------------------------
# torch's frontend gathers (embeddings, x[:, 0], x[:, -1]) with take(mode="fast"): no bounds
# check, and TVM warns at every one it compiles. torch's indices count from the end when
# negative (an LSTM's last step, x[:, -1]), which "wrap" reads as torch does for every index
# torch accepts, [-n, n); "clip" read x[:, -1] as x[:, 0] (a wrong answer, not an error).
_TAKE = is_op("relax.take")(wildcard(), wildcard())


def _checked_take(expr: relax.Expr, matches) -> relax.Expr:
    if str(expr.attrs.mode) != "fast":
        return expr
    return relax.op.take(expr.args[0], expr.args[1], axis=expr.attrs.axis, mode="wrap")


def bounded_takes(mod: tvm.IRModule) -> tvm.IRModule:
    """take(..., mode="fast") -> take(..., mode="wrap") (torch's negative indices)."""
    return _rewrite(mod, _TAKE, _checked_take)


# --- split -------------------------------------------------------------------------------------
# split(x, ...)[i] (torch's chunk and split) -> strided_slice(x, ...): one tensor per part, which
# the BDMA copies (or anything reads) without the tuple.

@relax.expr_functor.mutator
class _SplitParts(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.splits = {}

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = binding.value
        if isinstance(value, relax.Call) and getattr(value.op, "name", None) == "relax.split":
            self.splits[binding.var] = value
        super().visit_var_binding_(binding)

    def visit_tuple_getitem_(self, item: relax.TupleGetItem) -> relax.Expr:
        split = self.splits.get(item.tuple_value)
        bounds = _split_bounds(split) if split is not None else None
        if bounds is None:
            return super().visit_tuple_getitem_(item)
        begin, end = bounds[int(item.index)], bounds[int(item.index) + 1]
        return relax.op.strided_slice(self.visit_expr(split.args[0]), axes=[int(split.attrs.axis)],
                                      begin=[begin], end=[end])


def _split_bounds(split: relax.Call) -> Optional[list]:
    """The part boundaries of a split with static sizes (None otherwise)."""
    try:
        size = int(split.args[0].ty.shape.values[int(split.attrs.axis)])
    except (AttributeError, TypeError, IndexError):
        return None
    sections = split.attrs.indices_or_sections
    if isinstance(sections, (int, tvm.tirx.IntImm)) or hasattr(sections, "value"):
        parts = int(getattr(sections, "value", sections))
        if parts <= 0 or size % parts:
            return None
        return [i * size // parts for i in range(parts + 1)]
    return [0] + [int(i) for i in sections] + [size]


def split_into_slices(mod: tvm.IRModule) -> tvm.IRModule:
    """Every part of a split read as a strided_slice (the unused split is dead code after)."""
    result = tvm.IRModule(mod.functions, attrs=mod.attrs)
    for gv, function in mod.functions_items():
        if isinstance(function, relax.Function) and (function.attrs is None or
                                                     "Composite" not in function.attrs):
            result[gv] = _SplitParts(result).visit_expr(function)
    return result


# --- flatten after a global pool ---------------------------------------------------------------
# reshape(global average of x, [N, C]) (torch.flatten after AdaptiveAvgPool2d(1)) moves no data:
# it is mean(x, [2, 3]) without keepdims, which the PDP writes as it is.
_POOLED_X = wildcard()
_POOLED = is_op("relax.mean")(_POOLED_X) | is_op("relax.nn.adaptive_avg_pool2d")(_POOLED_X)
_FLATTENED = is_op("relax.reshape")(_POOLED, wildcard())


def _global_mean(expr: relax.Expr, matches) -> relax.Expr:
    pooled, x = matches[_POOLED], matches[_POOLED_X]
    try:
        shape = [int(v) for v in x.ty.shape.values]
        pooled_shape = [int(v) for v in pooled.ty.shape.values]
        flat = [int(v) for v in expr.ty.shape.values]
    except (AttributeError, TypeError):
        return expr
    if len(shape) != 4 or pooled_shape != shape[:2] + [1, 1] or flat != shape[:2]:
        return expr
    if getattr(pooled.op, "name", "") == "relax.mean" and sorted(
            int(a) % 4 for a in (pooled.attrs.axis or [])) != [2, 3]:
        return expr
    # the pool's name (avgpool), not the flatten's that the pool now does
    return named_as(relax.op.mean(x, axis=[2, 3], keepdims=False), pooled)


def flattened_global_pools(mod: tvm.IRModule) -> tvm.IRModule:
    """reshape(mean or adaptive_avg_pool2d(x) to 1 x 1, [N, C]) -> mean(x, [2, 3])."""
    return _rewrite(mod, _FLATTENED, _global_mean)


# --- SiLU --------------------------------------------------------------------------------------
_SILU_X = wildcard()
_SIGMOID = is_op("relax.sigmoid")(_SILU_X)
_SILU = is_op("relax.multiply")(_SILU_X, _SIGMOID) | is_op("relax.multiply")(_SIGMOID, _SILU_X)


def _to_silu(expr: relax.Expr, matches) -> relax.Expr:
    return relax.op.nn.silu(matches[_SILU_X])


def silu_from_sigmoid(mod: tvm.IRModule) -> tvm.IRModule:
    """x * sigmoid(x) -> silu(x) (TOPI's silu is that product: the host computes the same)."""
    return _rewrite(mod, _SILU, _to_silu)


# --- GELU written out ------------------------------------------------------------------------
# torch.onnx exports nn.GELU (erf form, opsets before 20) as its formula: x * (erf(x / sqrt(2))
# + 1) * 0.5. Read back as the gelu it is (TOPI's gelu is that formula), it is one activation
# for the SDP's lookup table, as from torch.export.
_GELU_X = wildcard()
_GELU_SCALE, _GELU_ONE, _GELU_HALF = is_const(), is_const(), is_const()
_GELU_DIVIDED = is_op("relax.divide")(_GELU_X, _GELU_SCALE)
_GELU_ERF = is_op("relax.erf")(_GELU_DIVIDED | is_op("relax.multiply")(_GELU_X, _GELU_SCALE))
_GELU_SUM = is_op("relax.add")(_GELU_ERF, _GELU_ONE) | is_op("relax.add")(_GELU_ONE, _GELU_ERF)
_GELU_PRODUCT = is_op("relax.multiply")(_GELU_X, _GELU_SUM) | \
    is_op("relax.multiply")(_GELU_SUM, _GELU_X)
_GELU = is_op("relax.multiply")(_GELU_PRODUCT, _GELU_HALF) | \
    is_op("relax.multiply")(_GELU_HALF, _GELU_PRODUCT)


def _scalar(expr: relax.Expr) -> Optional[float]:
    value = constant_value(expr)
    return float(value.reshape(())) if value.size == 1 else None


def _to_gelu(expr: relax.Expr, matches) -> relax.Expr:
    scale, one, half = (_scalar(matches[p]) for p in (_GELU_SCALE, _GELU_ONE, _GELU_HALF))
    root2 = scale if _GELU_DIVIDED in matches else (1 / scale if scale else None)
    # (a constant of size 1 but more axes than x would broadcast the formula to its rank)
    if root2 is None or one != 1.0 or half != 0.5 or \
            not np.isclose(root2, np.sqrt(2.0), rtol=1e-6, atol=0) or \
            _static(expr) is None or _static(expr) != _static(matches[_GELU_X]):
        return expr
    return relax.op.nn.gelu(matches[_GELU_X])


def gelu_from_erf(mod: tvm.IRModule) -> tvm.IRModule:
    """x * (erf(x / sqrt(2)) + 1) * 0.5 -> gelu(x)."""
    return _rewrite(mod, _GELU, _to_gelu)


# --- softplus written out --------------------------------------------------------------------
# The frontends spell softplus(x) = ln(1 + e^x) as ops: torch's where(x > threshold, x,
# log(exp(x) + 1)), ONNX's Softplus as max(x, 0) + log(1 + exp(-|x|)), its Mish op with
# log(1 + exp(x)). Read back as relax.nn.softplus, it is one activation for the SDP's lookup
# table (and mish's x * tanh(softplus(x)) one pattern).
#: From this threshold on (torch's where(x > c, x, ...)), x and ln(1 + e^x) round to the same
#: fp32 for every x > c (ln(1 + e^-x) < e^-x is below half an ulp of x from 14.56 on): the
#: where is softplus with PyTorch's default threshold, 20.
SOFTPLUS_EXACT_FROM = 15.0
_SOFTPLUS_DEFAULT_THRESHOLD = 20.0


def _size1(expr: relax.Expr) -> Optional[float]:
    return _scalar(expr) if is_constant(expr) else None


def _unit_softplus_of(expr: relax.Expr, source) -> Optional[Tuple[relax.Expr, float]]:
    """(x, threshold) where ``expr`` is bound to softplus(x) with beta 1 (else None)."""
    value = source(expr) if isinstance(expr, relax.Var) else expr
    if op_name(value) != "relax.nn.softplus" or float(value.attrs.beta) != 1.0:
        return None
    return value.args[0], float(value.attrs.threshold)


def _softplus_formula(call: relax.Call, source) -> relax.Expr:
    """log(exp(x) + 1) -> softplus(x); torch's where(b x > c, x, softplus(b x) / b) ->
    softplus(x) with beta b and threshold c (beta 1: where(x > c, x, softplus(x)), threshold
    20, PyTorch's default, from SOFTPLUS_EXACT_FROM on: the same fp32 values); max(x, 0) +
    softplus(-|x|) -> softplus(x). The inner forms are read first (bindings in
    order), so each outer one finds its inner part already a softplus."""
    def bound(expr):
        return source(expr) if isinstance(expr, relax.Var) else expr

    name = op_name(call)
    x = None
    if name == "relax.log":
        total = bound(call.args[0])
        if op_name(total) == "relax.add":
            for e, one in (total.args, total.args[::-1]):
                e = bound(e)
                if op_name(e) == "relax.exp" and _size1(one) == 1.0:
                    x = e.args[0]
                    break
    elif name == "relax.where":  # torch's where(b x > c, x, softplus(b x) / b), b 1: no b
        condition, data = bound(call.args[0]), call.args[1]
        scaled = condition.args[0] if op_name(condition) == "relax.greater" else None
        c = _size1(condition.args[1]) if scaled is not None else None
        beta, tail = 1.0, bound(call.args[2])
        if op_name(tail) == "relax.divide":
            beta, tail = _size1(tail.args[1]), tail.args[0]
        inner = _unit_softplus_of(tail, source)
        times = bound(scaled) if scaled is not None and not scaled.same_as(data) else None
        if times is not None:  # b x: x times its beta, either order
            factors = [a for a in times.args if not a.same_as(data)] \
                if op_name(times) == "relax.multiply" else []
            beta = _size1(factors[0]) if len(factors) == 1 and len(times.args) == 2 and \
                beta == _size1(factors[0]) else None
        if c is not None and beta is not None and beta > 0 and inner is not None and \
                inner[1] == _SOFTPLUS_DEFAULT_THRESHOLD and inner[0].same_as(scaled):
            threshold = _SOFTPLUS_DEFAULT_THRESHOLD \
                if beta == 1.0 and c >= SOFTPLUS_EXACT_FROM else c
            if _static(data) is None or _static(data) != _static(call):
                return call
            return relax.op.nn.softplus(data, beta, threshold)
    elif name == "relax.add":
        for top, tail in (call.args, call.args[::-1]):
            top, inner = bound(top), _unit_softplus_of(tail, source)
            if op_name(top) != "relax.maximum" or _size1(top.args[1]) != 0.0 or \
                    inner is None or inner[1] != _SOFTPLUS_DEFAULT_THRESHOLD:
                continue
            negative = bound(inner[0])
            magnitude = bound(negative.args[0]) if op_name(negative) == "relax.negative" \
                else None
            if op_name(magnitude) == "relax.abs" and magnitude.args[0].same_as(top.args[0]):
                x = top.args[0]
                break
    if x is None or _static(x) is None or _static(x) != _static(call):
        return call
    return relax.op.nn.softplus(x, 1.0, _SOFTPLUS_DEFAULT_THRESHOLD)


def form_parts(function: relax.Function) -> Dict[relax.Var, str]:
    """The Vars bound to the ops of a form several ops spell, each with the role its pattern
    annotates when it takes the whole (the pattern table's checks leave those ops to it:
    patterns.pattern_table): a mish, x * tanh(softplus(x)) ("act:mish"), and a softsign,
    x / (|x| + 1) ("passes:softsign"). Alone, each part would match first, at its own op (or
    as a product of two tensors, or an add of a constant)."""
    bound = {b.var: b.value for block in function.body.blocks for b in block.bindings}
    found: Dict[relax.Var, str] = {}
    for var, value in bound.items():
        if op_name(value) == "relax.multiply":
            for x, outer in (value.args, value.args[::-1]):
                tanh = bound.get(outer)
                inner = bound.get(tanh.args[0]) if op_name(tanh) == "relax.tanh" else None
                if op_name(inner) == "relax.nn.softplus" and inner.args[0].same_as(x):
                    found.update({v: "act:mish" for v in (var, outer, tanh.args[0])})
        elif op_name(value) == "relax.divide":
            x, total = value.args[0], bound.get(value.args[1])
            if op_name(total) != "relax.add":
                continue
            for magnitude, one in (total.args, total.args[::-1]):
                absolute = bound.get(magnitude)
                if op_name(absolute) == "relax.abs" and absolute.args[0].same_as(x) and \
                        _size1(one) == 1.0:
                    found.update({v: "passes:softsign" for v in (var, value.args[1], magnitude)})
    return found


def softplus_from_formula(mod: tvm.IRModule) -> tvm.IRModule:
    """The frontends' softplus formulas -> relax.nn.softplus (:func:`_softplus_formula`)."""
    return rewrite_bindings(mod, ("relax.log", "relax.where", "relax.add"), _softplus_formula)


# --- layer norm written out -------------------------------------------------------------------
# Paddle's ONNX export (PP-OCR's SVTR mixer) and hand-written models give layer norm as its
# formula: mean over the last axis, x - mean, its square (power 2, or d * d), the mean of that,
# + eps, sqrt, divide (or times rsqrt), * gamma, + beta. Read back as the layer_norm it is, it
# is one composite of the engine passes (sim/decompose.py), where the formula's ops were each a
# host op (a channel mean, a power, a sqrt have no engine of their own).
_LN_X = wildcard()
_LN_MEAN = is_op("relax.mean")(_LN_X)
_LN_D = is_op("relax.subtract")(_LN_X, _LN_MEAN)
# the variance's x - mean: the numerator's, or x - mean written again (detectron2's and SAM's
# LayerNorm2d: "(x - u).pow(2).mean(1)" and "(x - u) / ..."), the same operands and values
_LN_D_SQUARED = _LN_D | is_op("relax.subtract")(_LN_X, _LN_MEAN)
_LN_EXPONENT = is_const()
_LN_VARIANCE = is_op("relax.variance")(_LN_X)  # TVM's import of ONNX's InstanceNormalization
_LN_BIASED = is_op("relax.mean")(is_op("relax.power")(_LN_D_SQUARED, _LN_EXPONENT) |
                                 is_op("relax.multiply")(_LN_D_SQUARED, _LN_D_SQUARED)) | \
    _LN_VARIANCE
# torch's x.var(), unbiased by default (AdaIN's and style transfer's statistics): the variance
# times n / (n - 1) (torch.onnx: times n, then over n - 1)
_LN_TIMES, _LN_OVER = is_const(), is_const()
_LN_VAR = _LN_BIASED | is_op("relax.multiply")(_LN_BIASED, _LN_TIMES) | \
    is_op("relax.divide")(is_op("relax.multiply")(_LN_BIASED, _LN_TIMES), _LN_OVER)
_LN_EPS = is_const()
_LN_VE = is_op("relax.add")(_LN_VAR, _LN_EPS) | is_op("relax.add")(_LN_EPS, _LN_VAR)
# the numerator's x - mean, or x less a mean of x computed again (torch.onnx's export of
# (x - x.mean()) / x.var().sqrt()): the same values where the two means reduce alike
# (tried first: the matcher does not come back to an alternative that matched alone)
_LN_MEAN_AGAIN = is_op("relax.mean")(_LN_X)
_LN_NUMERATOR = is_op("relax.subtract")(_LN_X, _LN_MEAN_AGAIN) | _LN_D
_LN_NORMED = is_op("relax.divide")(_LN_NUMERATOR, is_op("relax.sqrt")(_LN_VE)) | \
    is_op("relax.multiply")(_LN_NUMERATOR, is_op("relax.rsqrt")(_LN_VE))


def _constant_view(constant: DFPattern, depth: int = 2) -> DFPattern:
    """``constant``, or up to ``depth`` reshapes / expand_dims of it (torch's
    ``weight[:, None, None]``: constant folding leaves layout ops alone)."""
    pattern = constant
    for _ in range(depth):
        pattern = pattern | is_op("relax.expand_dims")(pattern) | \
            is_op("relax.reshape")(pattern, wildcard())
    return pattern


def _view_value(matches, view: DFPattern, constant: DFPattern) -> np.ndarray:
    """The value a matched :func:`_constant_view` gives: its constant in the view's shape
    (reshapes and expand_dims keep the elements' order)."""
    return np.asarray(constant_value(matches[constant])).reshape(_static(matches[view]))


_LN_GAMMA_CONSTANT, _LN_BETA_CONSTANT = is_const(), is_const()
_LN_GAMMA, _LN_BETA = _constant_view(_LN_GAMMA_CONSTANT), _constant_view(_LN_BETA_CONSTANT)
_LN_SCALED = is_op("relax.multiply")(_LN_NORMED, _LN_GAMMA) | \
    is_op("relax.multiply")(_LN_GAMMA, _LN_NORMED)
_LN_FORMULA = is_op("relax.add")(_LN_SCALED, _LN_BETA) | is_op("relax.add")(_LN_BETA, _LN_SCALED)


def _mean_axis(call: relax.Call, rank: int) -> Optional[int]:
    """The one axis a keepdims mean reduces, or None."""
    axes = call.attrs.axis
    if axes is None or not bool(call.attrs.keepdims):
        return None
    axes = [int(a) % rank for a in _int_list(axes)]
    return axes[0] if len(axes) == 1 else None


def _norm_axis(rank: int, *means: relax.Call) -> Optional[int]:
    """The channel axis the means of a layer norm's formula reduce: the last, or axis 1 of
    NCHW data (ConvNeXt's and detectron2's / SAM's channels-first LayerNorm2d), else None."""
    axes = {_mean_axis(mean, rank) for mean in means}
    axis = axes.pop() if len(axes) == 1 else None
    return axis if axis == rank - 1 or (axis == 1 and rank == 4) else None


def _one_per_channel(value: np.ndarray, rank: int, axis: int, channels: int) -> bool:
    """Whether a constant broadcast against rank-``rank`` data is one value per channel of
    ``axis``: [C] or [.., C] for the last axis, [C, 1, 1] or [1, C, 1, 1] for axis 1."""
    if value.size != channels:
        return False
    if axis == rank - 1:
        return not value.ndim or value.shape[-1] == channels
    trailing = value.shape[value.ndim - (rank - axis):] if value.ndim >= rank - axis else ()
    return value.ndim <= rank and len(trailing) == rank - axis and trailing[0] == channels


def _to_layer_norm(expr: relax.Expr, matches) -> relax.Expr:
    x = matches[_LN_X]
    shape = _static(x)
    dtype = getattr(x.ty, "dtype", None)
    if shape is None or not shape or dtype not in ("float32", "float16"):
        return expr
    rank = len(shape)
    var, mean = matches[_LN_VAR], _formula_mean(matches)
    axis = _norm_axis(rank, mean, var) if var.op.name == "relax.mean" and mean is not None \
        else None
    if axis is None:
        return expr
    channels = shape[axis]
    if _matched(matches, _LN_EXPONENT) is not None and \
            constant_value(matches[_LN_EXPONENT]).tolist() not in (2, 2.0, [2.0], [2]):
        return expr
    eps = constant_value(matches[_LN_EPS])
    gamma = _view_value(matches, _LN_GAMMA, _LN_GAMMA_CONSTANT)
    beta = _view_value(matches, _LN_BETA, _LN_BETA_CONSTANT)
    if eps.size != 1 or float(eps.reshape(-1)[0]) < 0 or \
            not all(_one_per_channel(v, rank, axis, channels) for v in (gamma, beta)):
        return expr  # one eps; gamma and beta one value per channel
    return relax.op.nn.layer_norm(x, relax.const(gamma.reshape(channels), dtype),
                                  relax.const(beta.reshape(channels), dtype),
                                  axes=[axis if axis == 1 else -1],
                                  epsilon=float(eps.reshape(-1)[0]))


def _trailing_axes(call: relax.Call, rank: int) -> Optional[int]:
    """The first of the trailing axes a keepdims mean or variance reduces (k: axes k..rank-1),
    or None."""
    axes = call.attrs.axis
    if axes is None or not bool(call.attrs.keepdims):
        return None
    axes = sorted(int(a) % rank for a in _int_list(axes))
    return axes[0] if axes == list(range(axes[0], rank)) and axes[0] > 0 else None


def _variance_factor(matches) -> Optional[float]:
    """c of a formula's c v + eps (Bessel's n / (n - 1), or 1): None unless positive."""
    factor = 1.0
    for pattern, power in ((_LN_TIMES, 1), (_LN_OVER, -1)):
        value = _matched(matches, pattern)
        if value is not None:
            c = np.asarray(constant_value(value), np.float64).reshape(-1)
            if c.size != 1 or not c[0] > 0:
                return None
            factor *= float(c[0]) ** power
    return factor


def _formula_mean(matches) -> Optional[relax.Call]:
    """The formula's mean of x: the one both x - mean read, or None where the numerator's,
    computed again (torch.onnx's export), reduces otherwise than the variance's (other axes
    or keepdims: other values)."""
    mean, again = _matched(matches, _LN_MEAN), _matched(matches, _LN_MEAN_AGAIN)
    if mean is None or again is None:
        return again if mean is None else mean
    alike = bool(again.attrs.keepdims) == bool(mean.attrs.keepdims) and \
        _int_list(again.attrs.axis) == _int_list(mean.attrs.axis)
    return mean if alike else None


def _to_plain_layer_norm(expr: relax.Expr, matches) -> relax.Expr:
    x = matches[_LN_X]
    shape = _static(x)
    dtype = getattr(x.ty, "dtype", None)
    if shape is None or not shape or dtype not in ("float32", "float16") or \
            (_matched(matches, _LN_EXPONENT) is not None and
             constant_value(matches[_LN_EXPONENT]).tolist() not in (2, 2.0, [2.0], [2])):
        return expr
    mean = _formula_mean(matches)
    first = _trailing_axes(mean, len(shape)) if mean is not None else None
    eps = constant_value(matches[_LN_EPS])
    factor = _variance_factor(matches)
    if first is None or _trailing_axes(matches[_LN_BIASED], len(shape)) != first or \
            eps.size != 1 or float(eps.reshape(-1)[0]) < 0 or factor is None:
        return expr
    # c v + eps with c > 0: (x - m) / sqrt(c v + eps) is the layer norm of eps / c times the
    # constant 1 / sqrt(c), its gamma
    scaled = factor != 1.0
    # the trailing axes as one (InstanceNormalization's H and W): the same values in order
    rows = shape[:first] + [int(np.prod(shape[first:]))]
    channels, dtype = rows[-1], str(dtype)
    normed = relax.op.nn.layer_norm(
        x if rows == shape else relax.op.reshape(x, rows),
        relax.const(np.full(channels, 1.0 / np.sqrt(factor), dtype)),
        relax.const(np.zeros(channels, dtype)), axes=[-1],
        epsilon=float(eps.reshape(-1)[0]) / factor, center=False, scale=scaled)
    return normed if rows == shape else relax.op.reshape(named_as(normed, expr), shape)


def layer_norm_from_formula(mod: tvm.IRModule) -> tvm.IRModule:
    """(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) * gamma + beta over the last axis
    (or over axis 1 of NCHW data: LayerNorm2d) -> layer_norm(x, gamma, beta) (the host build
    computes the same formula); the formula without gamma and beta, over the last axis or
    several trailing ones (the variance's form: TVM's import of ONNX's InstanceNormalization,
    whose affine torch's GroupNorm export moves after a reshape) the layer norm without them
    (of the trailing axes as one); with torch's unbiased variance (``x.var()``: the variance
    times c = n / (n - 1), AdaIN's statistics) the layer norm of eps / c whose gamma is
    1 / sqrt(c)."""
    mod = _rewrite(mod, _LN_FORMULA, _to_layer_norm)
    return _rewrite(mod, _LN_NORMED, _to_plain_layer_norm)


# --- RMS norm (T5, LLaMA, torch's nn.RMSNorm) -----------------------------------------------------
# x * rsqrt(mean(x^2, -1, keepdims) + eps) [* gamma] (also x / sqrt(...), x * (1 / sqrt(...)),
# the squares as x * x)
# -> rms_norm(x, gamma): the host build computes the same formula; the engines run its passes
# (sim/decompose.rms_norm_passes) as a layer norm's.
_RMS_X = wildcard()
_RMS_EXPONENT = is_const()
_RMS_MEAN = is_op("relax.mean")(is_op("relax.power")(_RMS_X, _RMS_EXPONENT) |
                                is_op("relax.multiply")(_RMS_X, _RMS_X))
_RMS_EPS = is_const()
_RMS_ME = is_op("relax.add")(_RMS_MEAN, _RMS_EPS) | is_op("relax.add")(_RMS_EPS, _RMS_MEAN)
_RMS_ONE = is_const()  # 1 / sqrt(...): ONNX's Reciprocal, or torch.rsqrt as exported to ONNX
_RMS_INVERSE = is_op("relax.rsqrt")(_RMS_ME) | \
    is_op("relax.divide")(_RMS_ONE, is_op("relax.sqrt")(_RMS_ME))
_RMS_NORMED = is_op("relax.multiply")(_RMS_X, _RMS_INVERSE) | \
    is_op("relax.multiply")(_RMS_INVERSE, _RMS_X) | \
    is_op("relax.divide")(_RMS_X, is_op("relax.sqrt")(_RMS_ME))
_RMS_GAMMA_CONSTANT = is_const()
_RMS_GAMMA = _constant_view(_RMS_GAMMA_CONSTANT)
_RMS_SCALED = is_op("relax.multiply")(_RMS_NORMED, _RMS_GAMMA) | \
    is_op("relax.multiply")(_RMS_GAMMA, _RMS_NORMED)


def _to_rms_norm(expr: relax.Expr, matches) -> relax.Expr:
    x = matches[_RMS_X]
    shape, dtype = _static(x), str(getattr(x.ty, "dtype", None))
    if not shape or dtype not in ("float32", "float16"):
        return expr
    exponent, one = _matched(matches, _RMS_EXPONENT), _matched(matches, _RMS_ONE)
    if exponent is not None and constant_value(exponent).tolist() not in (2, 2.0, [2.0], [2]):
        return expr
    if one is not None and constant_value(one).tolist() not in (1, 1.0, [1.0], [1]):
        return expr
    mean, eps = matches[_RMS_MEAN], constant_value(matches[_RMS_EPS])
    if _trailing_axes(mean, len(shape)) != len(shape) - 1 or eps.size != 1 or \
            not float(eps.reshape(-1)[0]) >= 0:
        return expr
    channels = shape[-1]
    if _matched(matches, _RMS_GAMMA_CONSTANT) is not None:
        gamma = _view_value(matches, _RMS_GAMMA, _RMS_GAMMA_CONSTANT)
        # one value per channel, broadcast along the last axis only
        if gamma.size != channels or gamma.shape[-1] != channels:
            return expr
        gamma = gamma.reshape(channels)
    else:
        gamma = np.ones(channels)
    return relax.op.nn.rms_norm(x, relax.const(np.ascontiguousarray(gamma, dtype), dtype),
                                axes=[-1], epsilon=float(eps.reshape(-1)[0]))


def rms_norm_from_formula(mod: tvm.IRModule) -> tvm.IRModule:
    """x * rsqrt(mean(x^2) + eps) * gamma over the last axis (T5's and LLaMA's RMS norm, as
    torch exports nn.RMSNorm) -> rms_norm(x, gamma); without gamma, rms_norm(x, ones)."""
    mod = _rewrite(mod, _RMS_SCALED, _to_rms_norm)
    return _rewrite(mod, _RMS_NORMED, _to_rms_norm)


# --- batch norm at the end of a chain -----------------------------------------------------------
# batch_norm returns (y, mean, var), and TVM's matcher cannot end a pattern at the tuple item
# y. A chain ending in batch norm (conv + BN before a linear bottleneck's add, or before
# another conv) is matched up to the op; afterwards its composite is made to return y itself,
# so batch norm reaches the code generator whole, inside one composite.

def first_item_only(function: relax.Function) -> frozenset:
    """The Vars bound to an inference batch_norm whose tuple is read only as ``t[0]``."""
    bound, readers = {}, {}

    def note_use(expr, reader):
        if isinstance(expr, relax.Var):
            readers.setdefault(expr, []).append(reader)

    for block in function.body.blocks:
        for binding in block.bindings:
            value = binding.value
            bound[binding.var] = value
            if isinstance(value, relax.TupleGetItem):
                note_use(value.tuple_value, int(value.index))
            else:
                relax.analysis.post_order_visit(value, lambda e: note_use(e, None))
    note_use(function.body.body, None)
    relax.analysis.post_order_visit(function.body.body, lambda e: note_use(e, None))
    return frozenset(var for var, value in bound.items()
                     if isinstance(value, relax.Call) and
                     getattr(value.op, "name", None) == "relax.nn.batch_norm" and
                     not bool(value.attrs.training) and readers.get(var) and
                     all(index == 0 for index in readers[var]))


def _ends_at_tuple(function: relax.BaseFunc) -> bool:
    return isinstance(function, relax.Function) and function.attrs is not None and \
        "Composite" in function.attrs and isinstance(function.ret_ty,
                                                     relax.TupleType)


def _first_item_function(function: relax.Function) -> relax.Function:
    """A composite that returns batch_norm's tuple, made to return its first item."""
    *blocks, last = function.body.blocks
    *bindings, final = last.bindings
    whole = relax.DataflowVar(final.var.name + "_tuple", final.var.ty)
    item = relax.TupleGetItem(whole, 0)
    out = relax.Var(final.var.name, function.ret_ty.fields[0])
    block = relax.DataflowBlock(bindings + [relax.VarBinding(whole, final.value),
                                            relax.VarBinding(out, item)])
    return relax.Function(function.params, relax.SeqExpr(blocks + [block], out),
                          function.ret_ty.fields[0], function.is_pure, function.attrs)


@relax.expr_functor.mutator
class _FirstItemCalls(relax.PyExprMutator):
    """Calls of the rewritten composites: their result is the tensor; ``t[0]`` reads it."""

    def __init__(self, mod: tvm.IRModule, rewritten: dict):
        super().__init__(mod)
        self.rewritten = rewritten  # old GlobalVar -> the new function's
        self.results = set()

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = binding.value
        if isinstance(value, relax.Call) and value.op in self.rewritten:
            call = relax.Call(self.rewritten[value.op], [self.visit_expr(a) for a in value.args])
            var = self.builder_.emit(call, binding.var.name)
            self.set_var_remap(binding.var, var)
            self.results.add(var)
            return
        super().visit_var_binding_(binding)

    def visit_tuple_getitem_(self, item: relax.TupleGetItem) -> relax.Expr:
        tuple_value = self.visit_expr(item.tuple_value)
        if tuple_value in self.results:
            return tuple_value  # only index 0 is ever read (first_item_only)
        return super().visit_tuple_getitem_(item)


def end_at_first_item(mod: tvm.IRModule) -> tvm.IRModule:
    """Every composite that ends at a batch_norm made to return its normalised output."""
    ends = [gv for gv, function in mod.functions_items() if _ends_at_tuple(function)]
    if not ends:
        return mod
    functions = dict(mod.functions_items())
    for gv in ends:
        functions.pop(gv)
    # A GlobalVar carries its function's type: the block builder gives the new ones theirs.
    builder = relax.BlockBuilder(tvm.IRModule(functions, attrs=mod.attrs))
    rewritten = {gv: builder.add_func(_first_item_function(mod[gv]), gv.name_hint)
                 for gv in ends}
    result = builder.get()
    mutator = _FirstItemCalls(result, rewritten)
    for gv, function in result.functions_items():
        if isinstance(function, relax.Function) and (
                function.attrs is None or "Composite" not in function.attrs):
            result[gv] = mutator.visit_expr(function)
    return result


# --- match_cast --------------------------------------------------------------------------------
# MergeCompositeFunctions raises "TypeError: Invalid type: relax.expr.MatchCast" at any match_cast
# binding (TVM's ONNX importer writes them for shapes it computes at run time: a Range with
# computed bounds, a reshape to a computed shape). One whose value already has the target type
# checks nothing and becomes a plain binding. The others are run-time shape checks, which stay
# on the host: through the merge they are calls of a host function (the merge groups only
# composites and leaves other calls where they are, with their dependencies) and become
# match_casts again after it.
HOST_MATCH_CAST = "accel_host_match_cast"


def _rebuild(function: relax.Function, rewrite_binding) -> relax.Function:
    """``function`` with each binding of its body replaced by ``rewrite_binding(binding)``."""
    blocks = []
    for block in function.body.blocks:
        bindings = [rewrite_binding(b) for b in block.bindings]
        blocks.append(relax.DataflowBlock(bindings) if isinstance(block, relax.DataflowBlock)
                      else relax.BindingBlock(bindings))
    return relax.Function(function.params, relax.SeqExpr(blocks, function.body.body),
                          function.ret_ty, function.is_pure, function.attrs)


def _host_functions(mod: tvm.IRModule):
    return [(gv, f) for gv, f in mod.functions_items() if isinstance(f, relax.Function) and
            (f.attrs is None or ("Composite" not in f.attrs and "Codegen" not in f.attrs)) and
            not gv.name_hint.startswith(HOST_MATCH_CAST)]


def _checker(target: relax.Type) -> relax.Function:
    """A function that match_casts its argument to ``target``: its calls have that type."""
    x = relax.Var("x", relax.ObjectType())
    checked = relax.Var("checked", target)
    body = relax.SeqExpr([relax.BindingBlock([relax.MatchCast(checked, x, target)])], checked)
    return relax.Function([x], body, target, is_pure=True)


def hide_match_casts(mod: tvm.IRModule) -> tvm.IRModule:
    """match_cast bindings of the host functions: trivial ones dropped, the rest made calls
    that :func:`restore_match_casts` turns back (around MergeCompositeFunctions)."""
    functions = _host_functions(mod)
    casts = [b for _, f in functions for block in f.body.blocks for b in block.bindings
             if isinstance(b, relax.MatchCast)]
    if not casts:
        return mod
    builder = relax.BlockBuilder(tvm.IRModule(mod.functions, attrs=mod.attrs))
    checkers = []  # (target type, GlobalVar of its checker)

    def checker(target: relax.Type) -> tvm.ir.GlobalVar:
        for known, gv in checkers:
            if tvm_ffi.structural_equal(known, target):
                return gv
        checkers.append((target, builder.add_func(_checker(target),
                                                  f"{HOST_MATCH_CAST}_{len(checkers)}")))
        return checkers[-1][1]

    def hide(binding: relax.Binding) -> relax.Binding:
        if not isinstance(binding, relax.MatchCast):
            return binding
        if tvm_ffi.structural_equal(binding.value.ty, binding.ty):
            return relax.VarBinding(binding.var, binding.value)
        call = builder.normalize(relax.Call(checker(binding.ty), [binding.value]))
        return relax.VarBinding(binding.var, call)

    rebuilt = [(gv, _rebuild(function, hide)) for gv, function in functions]
    result = builder.get()
    for gv, function in rebuilt:
        result[gv] = function
    return result


def restore_match_casts(mod: tvm.IRModule) -> tvm.IRModule:
    """The match_cast bindings :func:`hide_match_casts` hid, back in place."""
    checkers = [gv for gv in mod.get_global_vars() if gv.name_hint.startswith(HOST_MATCH_CAST)]
    if not checkers:
        return mod

    def restore(binding: relax.Binding) -> relax.Binding:
        value = binding.value
        if isinstance(binding, relax.VarBinding) and isinstance(value, relax.Call) and \
                any(value.op.same_as(gv) for gv in checkers):
            return relax.MatchCast(binding.var, value.args[0], binding.var.ty)
        return binding

    functions = _host_functions(mod)
    result = tvm.IRModule({gv: f for gv, f in mod.functions_items()
                           if not any(gv.same_as(c) for c in checkers)}, attrs=mod.attrs)
    for gv, function in functions:
        result[gv] = _rebuild(function, restore)
    return result


# --- shapes computed from constants ------------------------------------------------------------
# TVM's ONNX importer (without accel_codegen.frontend's folding) computes a Range's bound or a
# reshape target at run time from constants, and names the result with a match_cast that
# defines a symbolic dimension: MergeCompositeFunctions cannot take symbolic dimensions. Each
# such value is computed once here, on TVM's host build of the bindings it depends on, and the
# dimension is bound to it: the shapes are static again, as the project's rule has them.
def _bindings_of(function: relax.Function) -> list:
    return [b for block in function.body.blocks for b in block.bindings]


def _constant_slice(function: relax.Function, value: relax.Expr) -> Optional[list]:
    """The bindings ``value`` depends on, in order, when none depends on a parameter."""
    definitions = {b.var: b for b in _bindings_of(function)}
    needed, stack = set(), list(relax.analysis.free_vars(value))
    while stack:
        var = stack.pop()
        if var in needed:
            continue
        if var not in definitions:  # a parameter of the function: known at run time only
            return None
        needed.add(var)
        stack.extend(relax.analysis.free_vars(definitions[var].value))
    return [b for b in _bindings_of(function) if b.var in needed]


def _evaluate(bindings: list, value: relax.Expr):
    """``value`` after ``bindings``, computed by TVM's host build (None if it cannot be)."""
    from .vm import virtual_machine

    out = relax.Var("out", value.ty)
    body = relax.SeqExpr([relax.DataflowBlock(bindings + [relax.VarBinding(out, value)])], out)
    try:
        function = relax.Function([], body, value.ty, is_pure=True)
        return virtual_machine(tvm.compile(tvm.IRModule({"main": function}),
                                           target="llvm"))["main"]()
    except Exception:  # an op the host cannot build without shapes: the cast stays
        return None


def _static_value(binding: relax.MatchCast, result) -> Optional[tuple]:
    """(the constant to cast, {symbolic dimension: value}) for a computed ``result``."""
    target = binding.ty
    if isinstance(target, relax.ShapeType) and target.values is not None:
        dims, got = list(target.values), [int(v) for v in result]
        constant = relax.ShapeExpr(got)
    elif isinstance(target, relax.TensorType) and isinstance(target.shape, relax.ShapeExpr) \
            and hasattr(result, "numpy"):
        array = result.numpy()
        dims, got, constant = list(target.shape.values), list(array.shape), relax.const(array)
    else:
        return None
    if len(dims) != len(got):
        return None
    mapping = {}
    for dim, size in zip(dims, got):
        if isinstance(dim, tvm.tirx.Var):
            if mapping.get(dim, size) != size:
                return None
            mapping[dim] = size
        elif not isinstance(dim, tvm.tirx.IntImm) or int(dim) != size:
            return None  # a check that fails at run time; TVM's build reports it there
    return constant, mapping


def static_shapes(mod: tvm.IRModule) -> tvm.IRModule:
    """Symbolic dimensions of ``main`` that match_cast defines from constants, bound to their
    values (the casts then check nothing, and :func:`hide_match_casts` drops them)."""
    if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
        return mod
    tried = set()
    while True:
        main = mod["main"]
        inputs = {v for p in main.params for v in relax.analysis.tir_vars_in_type(p.ty)}
        for binding in _bindings_of(main):
            dims = relax.analysis.tir_vars_in_type(binding.ty) \
                if isinstance(binding, relax.MatchCast) else []
            if not dims or any(d in inputs for d in dims) or binding.var.name in tried:
                continue
            tried.add(binding.var.name)
            bindings = _constant_slice(main, binding.value)
            result = None if bindings is None else _evaluate(bindings, binding.value)
            static = None if result is None else _static_value(binding, result)
            if static is None:
                continue
            constant, mapping = static
            cast = relax.MatchCast(binding.var, constant, binding.ty)
            mod = tvm.IRModule(mod.functions, attrs=mod.attrs)
            mod["main"] = _rebuild(main, lambda b: cast if b.same_as(binding) else b)
            mod = relax.transform.BindSymbolicVars(mapping, "main")(mod) if mapping else mod
            break
        else:
            return mod


# --- exact rewrites onto what the engines run (issue 33) -----------------------------------------
# Each gives the same values as the graph it replaces (max pooling composes; a one-hot
# convolution copies; a permutation of a dense layer's inputs is a permutation of its weight's
# columns; c - x is -x + c), so that a detector's neck, stem, box decoding and head reach the
# pattern table as ops the engines run.

def _static(expr: relax.Expr) -> Optional[list]:
    """The static shape of a tensor expression (None when it has none)."""
    try:
        return [int(v) for v in expr.ty.shape.values]
    except (AttributeError, TypeError):
        return None


def _int_list(values) -> list:
    return [int(getattr(v, "value", v)) for v in values]


# max pool 9 and 13 with stride 1 and 'same' padding (YOLO's SPP) -> a cascade of 5x5 ones.
# max over a (2a+1)-wide window centred at i, of the rows inside the image, equals the max of
# the (2b+1)-wide maxima centred at rows m in [i - (a-b), i + (a-b)] inside the image: every
# row j of the big window is in the small window of m = i + clamp(j - i, -(a-b), a-b), which
# lies between i and j and so inside the image; padding is -inf, so it never wins either. So
# a 'same' max pool of kernel k is the 'same' pools of kernels k1, k2, ... with
# (k1 - 1) + (k2 - 1) + ... = k - 1, exactly (a max only selects). Stages of 5 (the last 3 if
# needed): SPP's 9 and 13 then start with its own 5x5 pool, which they share (SPPF's form).
_MAX_POOL = is_op("relax.nn.max_pool2d")(wildcard())
_POOL_STAGE = 5


def _pool_stages(kernel: int) -> list:
    """Odd kernels of at most _POOL_STAGE whose spans (kernel - 1) add up to ``kernel - 1``."""
    stages, span = [], kernel - 1
    while span > 0:
        step = min(_POOL_STAGE - 1, span)
        stages.append(step + 1)
        span -= step
    return stages


def _max_pool_cascade(expr: relax.Expr, matches) -> relax.Expr:
    from .._accel_ffi import lib

    a = expr.attrs
    kernel, strides, dilation = (_int_list(v) for v in (a.pool_size, a.strides, a.dilation))
    padding = _int_list(a.padding)
    padding = padding * 2 if len(padding) == 2 else padding
    if str(a.layout) != "NCHW" or str(a.out_layout) != "NCHW" or len(kernel) != 2 or \
            max(kernel) <= int(lib.ACCEL_MAX_POOL_KERNEL) or strides != [1, 1] or \
            dilation != [1, 1] or any(k % 2 == 0 for k in kernel) or \
            padding != [(kernel[0] - 1) // 2, (kernel[1] - 1) // 2] * 2:
        return expr  # not a stride-1 'same' max pool the PDP cannot run in one pass
    # ceil_mode adds no window at stride 1: the output size is the same either way.
    rows, cols = _pool_stages(kernel[0]), _pool_stages(kernel[1])
    count = max(len(rows), len(cols))
    out = matches[_MAX_POOL].args[0]
    for kh, kw in zip(rows + [1] * (count - len(rows)), cols + [1] * (count - len(cols))):
        out = relax.op.nn.max_pool2d(out, (kh, kw), strides=(1, 1),
                                     padding=((kh - 1) // 2, (kw - 1) // 2) * 2,
                                     dilation=(1, 1), ceil_mode=False, layout="NCHW",
                                     out_layout="NCHW")
    return out


@relax.expr_functor.mutator
class _SharedPools(relax.PyExprMutator):
    """Identical max pools of the same tensor computed once (the cascades' shared stages)."""

    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.seen = []  # (the call, its Var) in the current block

    def visit_dataflow_block_(self, block: relax.DataflowBlock) -> relax.BindingBlock:
        self.seen = []  # a dataflow Var is not visible outside its block
        return super().visit_dataflow_block_(block)

    def visit_binding_block_(self, block: relax.BindingBlock) -> relax.BindingBlock:
        self.seen = []
        return super().visit_binding_block_(block)

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = self.visit_expr(binding.value)
        if getattr(value, "op", None) is not None and \
                getattr(value.op, "name", None) == "relax.nn.max_pool2d":
            for call, var in self.seen:
                if isinstance(binding.var, relax.DataflowVar) and \
                        tvm_ffi.structural_equal(call, value):
                    self.set_var_remap(binding.var, var)
                    return
            super().visit_var_binding_(binding)
            self.seen.append((value, binding.var))  # re-emitted as itself: same type
            return
        super().visit_var_binding_(binding)


def max_pool_cascades(mod: tvm.IRModule) -> tvm.IRModule:
    """max_pool2d of a kernel wider than the PDP's window, stride 1, 'same' padding -> a
    cascade of 'same' pools of at most 5x5 (the same values); identical stages shared."""
    rewritten = _rewrite(mod, _MAX_POOL, _max_pool_cascade)
    if tvm_ffi.structural_equal(rewritten, mod):
        return mod
    result = tvm.IRModule(rewritten.functions, attrs=rewritten.attrs)
    for gv, function in rewritten.functions_items():
        if isinstance(function, relax.Function):
            result[gv] = _SharedPools(result).visit_expr(function)
    return result


def _window_factors(size: int, limit: int) -> Optional[list]:
    """``size`` as a product of factors of at most ``limit``, largest first (None: a prime
    factor above it)."""
    factors = []
    while size > 1:
        factor = next((f for f in range(limit, 1, -1) if size % f == 0), None)
        if factor is None:
            return None
        factors.append(factor)
        size //= factor
    return factors


def _global_max_cascade(call: relax.Call, source) -> relax.Expr:
    from .._accel_ffi import lib

    x = call.args[0]
    shape, out = _static(x), _static(call)
    if shape is None or out is None or len(shape) != 4 or \
            str(x.ty.dtype) not in ("float32", "float16"):
        return call
    if call.op.name == "relax.max":
        axes = call.attrs.axis
        if axes is None or sorted(int(a) % 4 for a in axes) != [2, 3]:
            return call
    else:  # a max pool whose one window is the whole plane
        a = call.attrs
        if str(a.layout) != "NCHW" or str(a.out_layout) != "NCHW" or \
                _int_list(a.pool_size) != shape[2:] or any(_int_list(a.padding)) or \
                _int_list(a.dilation) != [1, 1]:
            return call
    limit = int(lib.ACCEL_MAX_POOL_KERNEL)
    rows, cols = _window_factors(shape[2], limit), _window_factors(shape[3], limit)
    if rows is None or cols is None or max(shape[2:]) <= limit:
        return call  # one PDP pass takes it (as a max pool) or no cascade of windows does
    count = max(len(rows), len(cols))
    pooled = x
    for kh, kw in zip(rows + [1] * (count - len(rows)), cols + [1] * (count - len(cols))):
        pooled = relax.op.nn.max_pool2d(pooled, (kh, kw), strides=(kh, kw), layout="NCHW",
                                        out_layout="NCHW")
    return pooled if out == shape[:2] + [1, 1] else \
        relax.op.reshape(named_as(pooled, call), out)


def global_max_pools(mod: tvm.IRModule) -> tvm.IRModule:
    """A max over H and W of NCHW data (torch.amax(x, (2, 3)), adaptive_max_pool2d(x, 1):
    CBAM's channel attention) or a max pool whose one window is the whole plane, wider than the
    PDP's window -> a cascade of non-overlapping max pools of at most 8x8 (12 = 6 x 2), the
    same maximum; a side with a prime factor above 8 stays as it is."""
    return rewrite_bindings(mod, ("relax.max", "relax.nn.max_pool2d"), _global_max_cascade)


# Focus / space-to-depth (YOLOv5's stem: cat([x[..., ::2, ::2], x[..., 1::2, ::2], ...], 1))
# -> one convolution with an s_h x s_w kernel, stride (s_h, s_w), and one-hot weights: output
# channel p*C + c reads input channel c at the offset (b_h, b_w) of the concat's p-th part.
# Each output is 1 * x plus zeros times its neighbours: x itself for finite inputs (an inf or
# NaN neighbour would make a NaN, which the slices do not), in fp32 and fp16; int8 rounds
# the copy through the layer's output scale as it rounds any layer's.

def _phase(value: relax.Call, shape: list, axis: int) -> Optional[tuple]:
    """(begin, stride) of a strided_slice on ``axis`` that reads every stride-th element from
    begin < stride to the end (None for any other slice)."""
    axes = _int_list(value.args[1].fields)
    begins, ends = _int_list(value.args[2].fields), _int_list(value.args[3].fields)
    strides = _int_list(value.args[4].fields) if len(value.args) > 4 else [1] * len(axes)
    rank = len(shape)
    axes = [a % rank for a in axes]
    if axis not in axes:
        return 0, 1
    i = axes.index(axis)
    begin, end, stride, size = begins[i], ends[i], strides[i], shape[axis]
    begin = begin + size if begin < 0 else begin
    if stride < 1 or not 0 <= begin < stride or end < size:
        return None
    return begin, stride


def _space_to_depth_part(expr: relax.Expr, table: dict) -> Optional[tuple]:
    """(x, (b_h, s_h), (b_w, s_w)) for one part: strided slices of NCHW x on H and W only."""
    phases = {2: (0, 1), 3: (0, 1)}
    value = table.get(expr, expr)
    sliced = False
    while isinstance(value, relax.Call) and getattr(value.op, "name", "") == \
            "relax.strided_slice":
        source = value.args[0]
        shape = _static(source)
        if shape is None or len(shape) != 4 or any(not isinstance(value.args[i], relax.Tuple)
                                                   for i in range(1, len(value.args))):
            return None
        axes = [a % 4 for a in _int_list(value.args[1].fields)]
        if any(a not in (2, 3) for a in axes) or len(set(axes)) != len(axes):
            return None
        for axis in axes:
            phase = _phase(value, shape, axis)
            if phase is None or phases[axis] != (0, 1):  # one slice per axis
                return None
            phases[axis] = phase
        sliced, expr = True, source
        value = table.get(expr, expr)
    return (expr, phases[2], phases[3]) if sliced else None


def _space_to_depth(table: dict):
    def rewrite(expr: relax.Expr, matches) -> relax.Expr:
        fields = table.get(expr.args[0], expr.args[0])
        out_shape = _static(expr)
        if not isinstance(fields, relax.Tuple) or out_shape is None or len(out_shape) != 4 or \
                int(expr.attrs.axis) % 4 != 1:
            return expr
        parts = [_space_to_depth_part(f, table) for f in fields.fields]
        if any(p is None for p in parts):
            return expr
        x = parts[0][0]
        shape = _static(x)
        strides = (parts[0][1][1], parts[0][2][1])
        if shape is None or len(shape) != 4 or strides == (1, 1) or \
                any(not p[0].same_as(x) or (p[1][1], p[2][1]) != strides for p in parts) or \
                x.ty.dtype not in ("float32", "float16"):
            return expr
        n, c, h, w = shape
        # The conv reads rows i*s .. i*s + s - 1: where the parts have more rows than s divides
        # into, a bottom (right) zero padding completes the last window (weight 0 there).
        rows = _static(fields.fields[0])
        if rows is None or len(rows) != 4:
            return expr
        pad = [max(0, rows[2] * strides[0] - h), max(0, rows[3] * strides[1] - w)]
        expected = [n, c * len(parts), rows[2], rows[3]]
        if out_shape != expected or pad[0] >= strides[0] or pad[1] >= strides[1] or \
                any(_static(f) != [n, c] + expected[2:] for f in fields.fields):
            return expr
        weight = np.zeros((c * len(parts), c) + strides, dtype=str(x.ty.dtype))
        for p, (_, (bh, _), (bw, _)) in enumerate(parts):
            weight[p * c + np.arange(c), np.arange(c), bh, bw] = 1
        return relax.op.nn.conv2d(x, relax.const(weight), strides=strides,
                                  padding=(0, 0, pad[0], pad[1]), data_layout="NCHW",
                                  kernel_layout="OIHW", out_layout="NCHW",
                                  out_dtype=str(x.ty.dtype))
    return rewrite


# A convolution strided wider than the CONV's stride register (ViT's 16x16 stride-16 patch
# embedding) -> a one-hot f x f stride-f convolution (space-to-depth: output channel p*C + c
# is input channel c at offset p = (b_h, b_w) of each f x f block) then the convolution with
# kernel k/f and stride s/f over those C f^2 channels, its weight W'[o, p*C + c, u, v] =
# W[o, c, f u + b_h, f v + b_w]: output (i, j) sums the same products W * x (row
# s i - pad + f u + b_h of x is row (s/f) i + u of the phase b_h), in another order. The
# padding goes to the one-hot conv (its rows f r - pad + b_h are the same rows). f divides
# the stride and the kernel; the smallest such f that brings the stride within the register
# is taken, since the one-hot conv's MACs grow as f^2 (C^2 f^2 per input position) while the
# second conv's do not depend on f. The copies are exact as the Focus conv's above are.
_WIDE_X, _WIDE_W = wildcard(), is_const()
_WIDE_CONV = is_op("relax.nn.conv2d")(_WIDE_X, _WIDE_W)


def _phase_factor(stride: int, kernel: int, limit: int, kernel_limit: int) -> Optional[int]:
    """The smallest f dividing ``stride`` and ``kernel`` with stride / f and f within
    ``limit`` and kernel / f within ``kernel_limit`` (1 when the stride is within already)."""
    if stride <= limit:
        return 1
    for f in range(2, limit + 1):
        if stride % f == 0 and kernel % f == 0 and stride // f <= limit and \
                kernel // f <= kernel_limit:
            return f
    return None


def _wide_stride_conv(expr: relax.Expr, matches) -> relax.Expr:
    from .._accel_ffi import lib

    a = expr.attrs
    x, weight = matches[_WIDE_X], constant_value(matches[_WIDE_W])
    shape, out_shape = _static(x), _static(expr)
    strides, dilation = _int_list(a.strides), _int_list(a.dilation)
    padding = _int_list(a.padding)
    padding = padding * 2 if len(padding) == 2 else padding
    limit = int(lib.ACCEL_MAX_CONV_STRIDE)
    if str(a.data_layout) != "NCHW" or str(a.kernel_layout) != "OIHW" or \
            str(a.out_layout) != "NCHW" or int(a.groups) != 1 or dilation != [1, 1] or \
            max(strides) <= limit or shape is None or out_shape is None or \
            len(shape) != 4 or weight.ndim != 4 or \
            str(x.ty.dtype) not in ("float32", "float16") or \
            str(expr.ty.dtype) != str(x.ty.dtype):
        return expr
    out_ch, c, kh, kw = weight.shape
    factors = [_phase_factor(s, k, limit, int(lib.ACCEL_MAX_CONV_KERNEL))
               for s, k in zip(strides, (kh, kw))]
    if None in factors:
        return expr
    fh, fw = factors
    top, left, bottom, right = padding
    rows = (shape[2] + top + bottom - fh) // fh + 1
    cols = (shape[3] + left + right - fw) // fw + 1
    sh, sw = strides[0] // fh, strides[1] // fw
    if [(rows - kh // fh) // sh + 1, (cols - kw // fw) // sw + 1] != out_shape[2:]:
        return expr
    dtype = str(x.ty.dtype)
    onehot = np.zeros((c * fh * fw, c, fh, fw), dtype=dtype)
    # the phases' weights: [O, C, kh/fh, fh, kw/fw, fw] -> [O, fh, fw, C, kh/fh, kw/fw]
    phases = weight.reshape(out_ch, c, kh // fh, fh, kw // fw, fw).transpose(0, 3, 5, 1, 2, 4)
    for p, (bh, bw) in enumerate((bh, bw) for bh in range(fh) for bw in range(fw)):
        onehot[p * c + np.arange(c), np.arange(c), bh, bw] = 1
    blocks = named_as(relax.op.nn.conv2d(
        x, relax.const(onehot), strides=(fh, fw), padding=padding, data_layout="NCHW",
        kernel_layout="OIHW", out_layout="NCHW", out_dtype=dtype), expr)
    return relax.op.nn.conv2d(
        blocks, relax.const(np.ascontiguousarray(
            phases.reshape(out_ch, fh * fw * c, kh // fh, kw // fw)).astype(dtype)),
        strides=(sh, sw), padding=(0, 0, 0, 0), data_layout="NCHW", kernel_layout="OIHW",
        out_layout="NCHW", out_dtype=dtype)


def wide_stride_convs(mod: tvm.IRModule) -> tvm.IRModule:
    """conv2d strided wider than the CONV's register -> a one-hot f x f stride-f conv2d then
    the conv2d of kernel k/f, stride s/f (the same products)."""
    return _rewrite_calls(mod, _WIDE_CONV, _wide_stride_conv)


# A convolution whose kernel is wider than the CONV's weight window (audio front ends: a
# pitch tracker's 512-tap first layer, a constant-Q spectrogram's 256- and 39-tap filters) ->
# ONE convolution of a kernel B <= 32 over m = ceil(K / B) shifted copies of its input stacked
# as channels: copy j is x (padded as the conv pads it) from column j B d on (d the dilation),
# channel c m + j of the stack, and the weight W'[o, c m + j, u, b] = W[o, c, u, j B + b]
# (0 where j B + b >= K). Output t sums W[o, c, u, jB + b] x[t S + (jB + b) d] over the same
# taps as the original, in one accumulation (int8 keeps its int32 accumulator and one output
# converter: no partial convolutions rounded apart); any stride works, since the shift is in
# the input's coordinates, and groups keep each group's channels together (c-major). The
# stack is one depthwise convolution of one-hot weights: m taps (per input channel, m
# outputs, tap j of output j is 1) dilated B d, so tap j reads column j B d on, which
# copies exactly (1 x; in int8 it keeps the input's codes: int8_plan._copies_codes). One
# run, where m BDMA slices and a concat of them cost five times its cycles (a 512-tap conv
# over 1,500 samples: 100 k against 21 k). The stack convolution also pads, as the conv
# would (its padding register holds 31 per side: a wider padding, 'same' of a 512-tap
# kernel is 255, comes first from depthwise 1x1 convolutions of ones that pad, one for a
# row, read as rows of w samples: _zero_padded), and pads the tail the last copy reads past
# x's end when m B > K. H is cut the same way, by the same convolution (its taps
# m_H x m_W, output channel (c m_H + j_H) m_W + j_W). B is the
# smallest width that keeps m and B d within the window and the dilation register; a
# stride beyond the CONV's register also needs B to share a factor with it
# (wide_stride_convs, after this, then cuts the stride).
# A 1-D convolution strided beyond the register with S >= K / 32 (a constant-Q transform's
# hops of 16 to 256 samples over 256 taps: Basic Pitch) is space-to-depth instead, by layout
# alone: x [N, C, 1, L] (padded, cut to O' S samples, O' = O + q - 1, q = ceil(K / S)) read
# as [N, C, O', S], its last two axes swapped (one BDMA transpose) and read as
# [N, C S, 1, O'], then the stride-1 convolution of kernel q with W'[o, c S + p, 0, u] =
# W[o, c, 0, u S + p]: output t sums W[o, c, 0, u S + p] x[(t + u) S + p], the same taps.
# No stack of m copies and no one-hot convolution runs; nor does any stride limit bind (a
# 400-tap filter bank's hop of 160).
_WIDE_KERNEL_X, _WIDE_KERNEL_W = wildcard(), is_const()
_WIDE_KERNEL_CONV = is_op("relax.nn.conv2d")(_WIDE_KERNEL_X, _WIDE_KERNEL_W)


def _kernel_pieces(kernel: int, stride: int, dilation: int) -> Optional[Tuple[int, int]]:
    """(m, B): ``kernel`` cut in m <= 32 pieces of B <= 32 taps (m B >= kernel, the fewest
    pieces, then the narrowest), B ``dilation`` within the dilation register (the stack's
    taps are B d apart); with a stride beyond the stride register, a B that
    :func:`_phase_factor` can cut it by. None when no B does."""
    from .._accel_ffi import lib

    window, stride_limit = int(lib.ACCEL_MAX_CONV_KERNEL), int(lib.ACCEL_MAX_CONV_STRIDE)
    widest = min(window, int(lib.ACCEL_MAX_CONV_DILATION) // dilation)
    for pieces in range(-(-kernel // max(widest, 1)), window + 1):
        for width in range(-(-kernel // pieces), widest + 1):
            if _phase_factor(stride, width, stride_limit, window) is not None:
                return -(-kernel // width), width
    return None


def _zero_padded(x: relax.Expr, padding: list, old: relax.Expr) -> relax.Expr:
    """x [N, C, H, W] with ``padding`` (top, left, bottom, right) zeros around it, as
    depthwise 1x1 convolutions of ones that pad (each at most the padding register per
    side): exact copies (1 x, whose int8 weight is code 127 at scale 1 / 127). A row
    (H = 1) padded wider than the register is read as rows of w samples (w dividing its
    length) padded with whole rows: one convolution, not one per 31 samples (255 a side:
    9), between two reshapes, then a slice drops the zeros beyond the padding."""
    n, channels, height, length = _static(x)
    dtype = str(x.ty.dtype)
    ones = relax.const(np.ones((channels, 1, 1, 1), dtype=dtype))

    def pad(data, widths):
        return named_as(relax.op.nn.conv2d(data, ones, padding=widths, groups=channels,
                                           data_layout="NCHW", kernel_layout="OIHW",
                                           out_layout="NCHW", out_dtype=dtype), old)

    limit, (_, left, _, right) = _pad_limit(), padding
    rows = next((w for w in range(2, length + 1) if length % w == 0 and
                 -(-left // w) <= limit and -(-right // w) <= limit), None) \
        if height == 1 and max(left, right) > limit and not any(padding[::2]) else None
    if rows is not None:
        above, below = -(-left // rows), -(-right // rows)
        data = pad(relax.op.reshape(x, [n, channels, length // rows, rows]),
                   [above, 0, below, 0])
        data = named_as(relax.op.reshape(
            data, [n, channels, 1, (length // rows + above + below) * rows]), old)
        start = above * rows - left
        return named_as(relax.op.strided_slice(data, axes=[3], begin=[start],
                                               end=[start + left + length + right]), old)
    remaining = list(padding)
    while any(remaining):
        step = [min(v, limit) for v in remaining]
        x = pad(x, step)
        remaining = [v - s for v, s in zip(remaining, step)]
    return x


def _pad_limit() -> int:
    from .._accel_ffi import lib

    return int(lib.ACCEL_MAX_CONV_PAD)


def _space_to_depth_1d(x: relax.Expr, weight: np.ndarray, padding: list, out_len: int,
                       old: relax.Expr) -> relax.Expr:
    """``old``, conv2d(x [N, C, 1, L], weight [O, C, 1, K]) of stride S along L and
    ``padding``, as the stride-1 convolution of kernel q = ceil(K / S) over x's S phases as
    channels (above); ``out_len``: its output's length O."""
    n, channels, _, length = _static(x)
    stride = int(old.attrs.strides[1])
    out_ch, _, _, kernel = weight.shape
    taps = -(-kernel // stride)
    frames = out_len + taps - 1
    padded = length + padding[1] + padding[3]
    data = _zero_padded(x, [0, padding[1], 0, padding[3] + max(0, frames * stride - padded)],
                        old)
    if padded > frames * stride:  # the samples no output reads
        data = named_as(relax.op.strided_slice(data, axes=[3], begin=[0],
                                               end=[frames * stride]), old)
    phases = named_as(relax.op.permute_dims(
        relax.op.reshape(data, [n, channels, frames, stride]), [0, 1, 3, 2]), old)
    data = named_as(relax.op.reshape(phases, [n, channels * stride, 1, frames]), old)
    grown = np.pad(weight, [(0, 0), (0, 0), (0, 0), (0, taps * stride - kernel)])
    cut = grown.reshape(out_ch, channels, taps, stride).transpose(0, 1, 3, 2)
    dtype = str(x.ty.dtype)
    return relax.op.nn.conv2d(
        data, relax.const(np.ascontiguousarray(cut.reshape(out_ch, channels * stride, 1, taps))
                          .astype(dtype)),
        data_layout="NCHW", kernel_layout="OIHW", out_layout="NCHW", out_dtype=dtype)


def _stacked_copies(x: relax.Expr, pieces: list, dilation: list, padding: list,
                    old: relax.Expr) -> relax.Expr:
    """x's copies shifted by j B d along each cut axis (``pieces``: (m, B) of H and W, m = 1
    for an axis not cut), stacked on channels c-major, padded by ``padding`` (top, left,
    bottom, right) first: the one-hot depthwise convolution (above), after the 1x1 ones for
    what exceeds its padding register."""
    first = [max(0, p - _pad_limit()) for p in padding]
    data = _zero_padded(x, first, old)
    (mh, bh), (mw, bw) = pieces
    channels, dtype = _static(x)[1], str(x.ty.dtype)
    onehot = np.zeros((channels, mh, mw, 1, mh, mw), dtype=dtype)
    for jh in range(mh):
        for jw in range(mw):
            onehot[:, jh, jw, 0, jh, jw] = 1
    return named_as(relax.op.nn.conv2d(
        data, relax.const(onehot.reshape(channels * mh * mw, 1, mh, mw)),
        padding=[p - f for p, f in zip(padding, first)],
        dilation=(bh * dilation[0] if mh > 1 else 1, bw * dilation[1] if mw > 1 else 1),
        groups=channels, data_layout="NCHW", kernel_layout="OIHW", out_layout="NCHW",
        out_dtype=dtype), old)


def _wide_kernel_conv(expr: relax.Expr, matches) -> relax.Expr:
    from .._accel_ffi import lib

    a = expr.attrs
    x, weight = matches[_WIDE_KERNEL_X], constant_value(matches[_WIDE_KERNEL_W])
    shape, out_shape = _static(x), _static(expr)
    kernel_limit = int(lib.ACCEL_MAX_CONV_KERNEL)
    groups = int(a.groups)
    if str(a.data_layout) != "NCHW" or str(a.kernel_layout) != "OIHW" or \
            str(a.out_layout) != "NCHW" or shape is None or \
            out_shape is None or len(shape) != 4 or weight.ndim != 4 or \
            max(weight.shape[2:]) <= kernel_limit or \
            str(x.ty.dtype) not in ("float32", "float16") or \
            str(expr.ty.dtype) != str(x.ty.dtype):
        return expr
    strides, dilation = _int_list(a.strides), _int_list(a.dilation)
    padding = _int_list(a.padding)
    padding = padding * 2 if len(padding) == 2 else padding
    if shape[2] == 1 and weight.shape[2] == 1 and padding[0] == padding[2] == 0 and \
            strides[1] > int(lib.ACCEL_MAX_CONV_STRIDE) and dilation == [1, 1] and \
            groups == 1 and -(-weight.shape[3] // strides[1]) <= kernel_limit:
        return _space_to_depth_1d(x, weight, padding, out_shape[3], expr)
    pieces = []  # (m, B) of H and W; (1, K) where the kernel fits
    for i, k in enumerate(weight.shape[2:]):
        cut = (1, k) if k <= kernel_limit else _kernel_pieces(k, strides[i], dilation[i])
        if cut is None:
            return expr
        pieces.append(cut)
    # a cut axis's padding goes to the stack, with the tail its last copy reads past x's end
    stack_pad, own = [0, 0, 0, 0], list(padding)
    for i, (m, width) in enumerate(pieces):
        if m > 1:
            span = (out_shape[2 + i] - 1) * strides[i] + (width - 1) * dilation[i] + 1
            tail = max(0, (m - 1) * width * dilation[i] + span -
                       (shape[2 + i] + padding[i] + padding[i + 2]))
            stack_pad[i], stack_pad[i + 2] = padding[i], padding[i + 2] + tail
            own[i] = own[i + 2] = 0
    (mh, bh), (mw, bw) = pieces
    # W [O, Cg, KH, KW] -> zero taps up to m B -> [O, Cg, mh, bh, mw, bw] -> the stack's
    # channel order (c, j_H, j_W)
    out_ch, channels, kh, kw = weight.shape
    cut = np.pad(weight, [(0, 0), (0, 0), (0, mh * bh - kh), (0, mw * bw - kw)])
    cut = cut.reshape(out_ch, channels, mh, bh, mw, bw).transpose(0, 1, 2, 4, 3, 5)
    dtype = str(x.ty.dtype)
    return relax.op.nn.conv2d(
        _stacked_copies(x, pieces, dilation, stack_pad, expr),
        relax.const(np.ascontiguousarray(cut.reshape(out_ch, channels * mh * mw, bh, bw))
                    .astype(dtype)),
        strides=strides, padding=own, dilation=dilation, groups=groups, data_layout="NCHW",
        kernel_layout="OIHW", out_layout="NCHW", out_dtype=dtype)


def wide_kernel_convs(mod: tvm.IRModule) -> tvm.IRModule:
    """conv2d whose kernel is wider than the CONV's window (W, H or both) -> the conv2d of
    B-wide pieces of the kernel over the input's shifted copies stacked as channels (a
    one-hot depthwise convolution, after 1x1 ones for a padding wider than its register);
    a 1-D one strided beyond the register, S >= K / 32, the stride-1 conv2d of its S phases
    (a reshape and a transpose): the same products in one accumulation."""
    return _rewrite_calls(mod, _WIDE_KERNEL_CONV, _wide_kernel_conv)


# Constants computed at compile time: broadcast_to of a constant (ViT's class token expanded
# to the batch) and a take of a constant at constant indices (Swin's relative position bias
# gathered from its table) -> the constant they compute (NumPy copies its values exactly).
_BROADCAST_CONSTANT = is_op("relax.broadcast_to")(is_const(), wildcard())
_TAKE_CONSTANT = is_op("relax.take")(is_const(), is_const())
# torch's nn.MultiheadAttention with a query other than its key and value (DETR's decoder,
# cross-attention) projects each with rows of its one in_proj_weight and in_proj_bias
_SLICE_CONSTANTS = (
    is_op("relax.strided_slice")(is_const(), wildcard(), wildcard(), wildcard()),
    is_op("relax.strided_slice")(is_const(), wildcard(), wildcard(), wildcard(), wildcard()))


def _take_mode(mode: str) -> str:
    """NumPy's take mode of a Relax take's (in bounds, checked, "fast" is clip's)."""
    return "wrap" if mode == "wrap" else "clip"


def _folded_constant(expr: relax.Expr, matches) -> relax.Expr:
    shape = _static(expr)
    if shape is None:
        return expr
    value = constant_value(expr.args[0])
    if expr.op.name == "relax.broadcast_to":
        folded = np.broadcast_to(value, shape)
    elif expr.op.name == "relax.strided_slice":
        folded = strided_sliced(expr, value)
        if folded is None:
            return expr
    else:
        axis, indices = expr.attrs.axis, constant_value(expr.args[1]).astype(np.int64)
        extent = value.size if axis is None else value.shape[int(axis)]
        if str(expr.attrs.mode) not in ("clip", "wrap") and \
                np.any((indices < 0) | (indices >= extent)):
            return expr  # "fast" reads in bounds only: no value to fold
        folded = np.take(value, indices,
                         axis=None if axis is None else int(axis),
                         mode=_take_mode(str(expr.attrs.mode)))
    if list(folded.shape) != shape:
        return expr
    return relax.const(np.ascontiguousarray(folded), str(expr.ty.dtype))


def constant_broadcasts_and_takes(mod: tvm.IRModule) -> tvm.IRModule:
    """broadcast_to(constant), take(constant, constant indices) and strided_slice(constant)
    -> the constant."""
    for pattern in (_BROADCAST_CONSTANT, _TAKE_CONSTANT, *_SLICE_CONSTANTS):
        mod = _rewrite_calls(mod, pattern, _folded_constant)
    return mod


# A batched matmul whose weight is a broadcast_to of one [K, N] matrix over the batch
# (torch.export's Linear of a non-contiguous [B, M, K] tensor, such as
# nn.MultiheadAttention(batch_first=True)'s transposed input: an expand of W^T, a bmm, then
# the bias added) -> reshape(matmul(reshape(x, [B M, K]), W) + b, [B, M, N]): the dense
# layer of x's rows that torch gives for a contiguous x (every batch multiplies the same W:
# the same sums). A broadcast_to of x to its own shape, which torch's expand of x adds, is x.
_BATCHED = wildcard()
_BROADCAST_WEIGHT = wildcard()
_WEIGHT_MATMUL = is_op("relax.matmul")(
    _BATCHED, is_op("relax.broadcast_to")(_BROADCAST_WEIGHT, wildcard()))
_MATMUL_BIAS = is_const()
_WEIGHT_MATMUL_BIAS = is_op("relax.add")(_WEIGHT_MATMUL, _MATMUL_BIAS) | \
    is_op("relax.add")(_MATMUL_BIAS, _WEIGHT_MATMUL)


def _unbroadcast(expr: relax.Expr) -> relax.Expr:
    """x where ``expr`` is broadcast_to(x, x's own shape), else ``expr``."""
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and \
            expr.op.name == "relax.broadcast_to" and _static(expr) is not None and \
            _static(expr) == _static(expr.args[0]):
        return expr.args[0]
    return expr


def _dense_of_broadcast(expr: relax.Expr, matches) -> relax.Expr:
    matmul = matches[_WEIGHT_MATMUL]
    x, w = _unbroadcast(matches[_BATCHED]), matches[_BROADCAST_WEIGHT]
    shape, w_shape, out = _static(x), _static(w), _static(matmul)
    if shape is None or w_shape is None or out is None or len(w_shape) != 2 or \
            len(shape) < 3 or _static(matmul.args[1]) != shape[:-2] + w_shape or \
            shape[-1] != w_shape[0] or out != shape[:-1] + [w_shape[1]]:
        return expr
    rows = relax.op.reshape(x, [int(np.prod(shape[:-1])), shape[-1]])
    dense = named_as(relax.op.matmul(rows, w, out_dtype=matmul.attrs.out_dtype), matmul)
    if _MATMUL_BIAS in matches:
        bias = constant_value(matches[_MATMUL_BIAS])
        # a bias along the last axis only, as the dense layer's rows read it
        if bias.size != w_shape[1] or bias.shape[-1] != w_shape[1] or _static(expr) != out:
            return expr
        dense = named_as(relax.op.add(dense, relax.const(bias.reshape(-1),
                                                         str(expr.ty.dtype))), expr)
    return relax.op.reshape(dense, out)


def broadcast_weight_matmuls(mod: tvm.IRModule) -> tvm.IRModule:
    """matmul(x [B, M, K], broadcast_to(W [K, N], [B, K, N])) (+ b [N]) ->
    reshape(matmul(reshape(x, [B M, K]), W) (+ b), [B, M, N])."""
    return _rewrite(_rewrite(mod, _WEIGHT_MATMUL_BIAS, _dense_of_broadcast), _WEIGHT_MATMUL,
                    _dense_of_broadcast)


# A constant operand of an element-wise op with fewer axes (at least 2) than the tensor (a
# gathered bias [T, C] added to [B, T, C]) -> the constant with the leading unit axes
# broadcasting gives it: the same sums, in the rank the SDP's operand checks read.
_ELEMENTWISE = ("relax.add", "relax.multiply", "relax.subtract", "relax.divide")
_LOW_RANK = is_op(_ELEMENTWISE[0])(wildcard(), wildcard())
for _name in _ELEMENTWISE[1:]:
    _LOW_RANK = _LOW_RANK | is_op(_name)(wildcard(), wildcard())


def _ranked_constant(expr: relax.Expr, matches) -> relax.Expr:
    shape = _static(expr)
    if not isinstance(expr, relax.Call) or shape is None or len(expr.args) != 2:
        return expr
    args = list(expr.args)
    for i, arg in enumerate(args):
        arg_shape = _static(arg)
        # (a 1-D constant is a bias or per-channel vector, which the patterns read as it is)
        if is_constant(arg) and arg_shape is not None and 2 <= len(arg_shape) < len(shape) and \
                not is_constant(args[1 - i]):
            value = constant_value(arg)
            args[i] = relax.const(value.reshape([1] * (len(shape) - value.ndim) +
                                                list(value.shape)), str(arg.ty.dtype))
    if all(a.same_as(b) for a, b in zip(args, expr.args)):
        return expr
    return relax.Call(expr.op, args, expr.attrs, expr.ty_args)


def ranked_constants(mod: tvm.IRModule) -> tvm.IRModule:
    """add / multiply / subtract / divide(x, a constant of lower rank) -> the constant with
    leading unit axes."""
    return _rewrite(mod, _LOW_RANK, _ranked_constant)


# take(x, i) of a computed x at one constant index i along an axis (ViT's x[:, 0], the class
# token its head reads) -> strided_slice(x, [axis], [i], [i + 1]) reshaped to the take's shape:
# the same elements, as a copy the BDMA makes (lowering.py) where a gather has no engine.
_TAKEN = wildcard()
_TAKE_AT = is_op("relax.take")(_TAKEN, is_const())


def _sliced_take(expr: relax.Expr, matches) -> relax.Expr:
    x, index = matches[_TAKEN], constant_value(expr.args[1])
    shape, out = _static(x), _static(expr)
    # axis 1 of 2-D to 4-D data, or axis 0 (torch's select of q, k or v from the packed
    # projection [3, ..]: the data read as [1, 3, rest], its block i); the slices the BDMA
    # copies (lowering._slice); a take elsewhere would only become two host ops instead of one
    if is_constant(x) or index.ndim != 0 or expr.attrs.axis is None or shape is None or \
            out is None or len(shape) not in (2, 3, 4) or \
            int(expr.attrs.axis) % len(shape) not in (0, 1):
        return expr
    axis = int(expr.attrs.axis) % len(shape)
    size, i, mode = shape[axis], int(index), str(expr.attrs.mode)
    # "fast" reads in bounds only (out of them the host's take reads what lies there)
    if mode not in ("clip", "wrap") and not 0 <= i < size:
        return expr
    i = i % size if mode == "wrap" else min(max(i, 0), size - 1)
    if axis == 0:
        x = relax.op.reshape(x, [1, size, int(np.prod(shape[1:]))])
    return relax.op.reshape(relax.op.strided_slice(x, axes=[1], begin=[i], end=[i + 1]),
                            out)


def sliced_takes(mod: tvm.IRModule) -> tvm.IRModule:
    """take(x, constant scalar i, axis=1) of 2-D to 4-D x -> reshape(strided_slice(x, [1], i,
    i + 1)); at axis 0 the same of x read as [1, x.shape[0], rest]."""
    return _rewrite_calls(mod, _TAKE_AT, _sliced_take)


#: The most pieces a gather of constant indices is copied as (one BDMA copy each).
_GATHER_PIECES = 32


def _gather_as_slices(expr: relax.Expr, matches) -> relax.Expr:
    x, index = matches[_TAKEN], constant_value(expr.args[1])
    shape, out = _static(x), _static(expr)
    if is_constant(x) or index.ndim != 1 or expr.attrs.axis is None or shape is None or \
            out is None or len(shape) not in (2, 3, 4) or index.dtype.kind not in "iu":
        return expr
    axis = int(expr.attrs.axis) % len(shape)
    size, mode = shape[axis], str(expr.attrs.mode)
    if axis == 0 or (mode not in ("clip", "wrap") and (index.min() < 0 or index.max() >= size)):
        return expr
    rows = index % size if mode == "wrap" else np.clip(index, 0, size - 1)
    # runs of consecutive rows, each one slice
    runs = [[int(rows[0]), int(rows[0]) + 1]]
    for r in rows[1:]:
        if int(r) == runs[-1][1]:
            runs[-1][1] += 1
        else:
            runs.append([int(r), int(r) + 1])
    if len(runs) > _GATHER_PIECES or (len(runs) == 1 and runs[0] == [0, size]):
        return expr if len(runs) > _GATHER_PIECES else x
    pieces = [relax.op.strided_slice(x, axes=[axis], begin=[b], end=[e]) for b, e in runs]
    return pieces[0] if len(pieces) == 1 else relax.op.concat(pieces, axis=axis)


def gathers_as_slices(mod: tvm.IRModule) -> tvm.IRModule:
    """take(x, constant 1-D indices, axis > 0) of 2-D to 4-D x whose indices are a few runs of
    consecutive rows (torch's reflection and replication paddings gather so: [2, 1, 0, 1, 2,
    ..., 7, 6, 5] for a reflection of 2) -> the concat along that axis of one slice per run:
    the same elements, as BDMA copies where a gather has no engine."""
    return _rewrite_calls(mod, _TAKE_AT, _gather_as_slices)


def _leading_slice(call: relax.Call, source) -> relax.Expr:
    x = call.args[0]
    shape, out = _static(x), _static(call)
    axes = _int_list(call.args[1]) if len(call.args) > 1 else []
    strides = _int_list(call.args[4]) if len(call.args) > 4 else [1]
    if shape is None or out is None or len(shape) in (0, 1, 4) or shape[0] < 2 or \
            [a % len(shape) for a in axes] != [0] or strides != [1] or out[1:] != shape[1:] or \
            is_constant(x):
        return call
    begin = _int_list(call.args[2])[0] % shape[0]
    rows, length = shape[0], int(np.prod(shape[1:]))
    lines = relax.op.reshape(x, [1, rows, length])
    taken = relax.op.strided_slice(lines, axes=[1], begin=[begin], end=[begin + out[0]])
    return relax.op.reshape(named_as(taken, call), out)


def leading_axis_slices(mod: tvm.IRModule) -> tvm.IRModule:
    """A slice along axis 0 of 2-D, 3-D or 5-D and wider data (an LSTM's time steps of [T, N,
    4H] gates, the sequence-first layout torch's nn.LSTM computes them in; q, k and v of a
    packed projection viewed as [3, B, H, T, d], RoPE's before its rotation) -> the same rows
    as a slice along axis 1 of [1, A, rest] (one block of contiguous bytes either way), which
    the BDMA copies."""
    return rewrite_bindings(mod, ("relax.strided_slice",), _leading_slice)


#: The longest axis a flip is copied along row by row (one BDMA copy a row).
_FLIP_ROWS = 64


def _flip_as_copies(call: relax.Call, source) -> relax.Expr:
    x = call.args[0]
    shape = _static(x)
    if shape is None or len(shape) not in (2, 3, 4) or is_constant(x):
        return call
    axis = int(call.attrs.axis) % len(shape)
    rows = shape[axis]
    if not 2 <= rows <= _FLIP_ROWS:
        return call
    view = relax.op.reshape(x, [int(np.prod(shape[:axis])), rows, int(np.prod(shape[axis + 1:]))])
    pieces = [relax.op.strided_slice(view, axes=[1], begin=[i], end=[i + 1])
              for i in reversed(range(rows))]
    return relax.op.reshape(named_as(relax.op.concat(pieces, axis=1), call), shape)


def flips_as_copies(mod: tvm.IRModule) -> tvm.IRModule:
    """flip(x, axis) with at most 64 rows along the axis (a bidirectional LSTM's or GRU's
    backward pass reads the time steps reversed) -> the rows copied in reverse order: x viewed
    as [P, rows, L], a slice of each row and their concat (BDMA copies), viewed back."""
    return rewrite_bindings(mod, ("relax.flip",), _flip_as_copies)


_ELEMENTWISE_PAIRS = ("relax.add", "relax.multiply", "relax.subtract", "relax.maximum",
                      "relax.minimum")


#: The smallest magnitude of a float32 fill value that masking by an add keeps exact: x + v
#: rounds to v for every |x| below half of v's ulp (2^103 at 2^127), so for any x an
#: activation holds; infinities absorb every finite x.
_ABSORBING_FILL = 2.0 ** 100


def _fill_bias(call: relax.Call, source) -> relax.Expr:
    """where(c, v, x) -> x + where(c, v, 0) and where(c, x, v) -> x + where(c, 0, v), for a
    constant condition c and a constant fill v that absorbs x (+-inf or |v| >= 2^100, float32)
    and a computed x; the bias a constant of the result's shape broadcast as far as c and v
    are (causal_masks)."""
    cond, a, b = call.args
    if not is_constant(cond) or str(getattr(call.ty, "dtype", None)) != "float32":
        return call
    for fill, x, fill_first in ((a, b, True), (b, a, False)):
        if not is_constant(fill) or is_constant(x) or _static(x) != _static(call):
            continue
        v = np.asarray(constant_value(fill), np.float32)
        if not np.all(np.isinf(v) | (np.abs(v) >= _ABSORBING_FILL)):
            continue
        c = np.asarray(constant_value(cond)).astype(bool)
        zero = np.zeros((), np.float32)
        bias = np.where(c, v, zero) if fill_first else np.where(c, zero, v)
        if bias.ndim > len(_static(call)):
            return call
        return relax.op.add(x, relax.const(np.ascontiguousarray(bias, np.float32), "float32"))
    return call


def _row_extreme_of(expr: relax.Expr, scores: relax.Expr, axis: int, source) -> bool:
    """Whether ``expr`` is max or min of ``scores`` over ``axis`` (keepdims), broadcast back
    to its shape or left to the subtraction's own broadcasting: one finite value per row
    wherever the scores are finite."""
    value = source(expr) if isinstance(expr, relax.Var) else expr
    if isinstance(value, relax.Call) and op_name(value) == "relax.broadcast_to":
        expr = value.args[0]
        value = source(expr) if isinstance(expr, relax.Var) else expr
    rank = len(_static(scores) or [])
    if not isinstance(value, relax.Call) or op_name(value) not in ("relax.max", "relax.min") or \
            not value.args[0].same_as(scores) or not bool(value.attrs.keepdims) or \
            value.attrs.axis is None:
        return False
    return [int(a) % rank for a in value.attrs.axis] == [axis]


def _softmax_of_shifted_rows(call: relax.Call, source) -> relax.Expr:
    shape = _static(call)
    x = call.args[0]
    value = source(x) if isinstance(x, relax.Var) else x
    if shape is None or not isinstance(value, relax.Call) or \
            op_name(value) != "relax.subtract" or str(call.ty.dtype) != "float32":
        return call
    axis = int(call.attrs.axis) % len(shape)
    a, b = value.args
    if _static(b) == shape and _row_extreme_of(a, b, axis, source):  # softmax(c - s)
        scores = relax.op.multiply(b, relax.const(-1.0, "float32"))
    elif _static(a) == shape and _row_extreme_of(b, a, axis, source):  # softmax(s - c)
        scores = a
    else:
        return call
    return relax.op.nn.softmax(named_as(scores, value), axis=int(call.attrs.axis))


def softmax_row_shifts(mod: tvm.IRModule) -> tvm.IRModule:
    """softmax(c - s) or softmax(s - c) over an axis along which c is one value per row, the
    max or min of s over that axis (DANet's channel attention: ``softmax(max(energy, -1) -
    energy)``) -> softmax(-s) or softmax(s): a softmax subtracts its rows' max itself, and
    exp(t + c) / sum exp(u + c) = exp(t) / sum exp(u) for a finite c (an extreme of finite
    scores is finite), so only the rounding of c - s is left out. Before attention's rewrite
    (the shifted scores are an attention core's, whose scores may be scaled, not shifted:
    ``nn.attention``'s scale -1); the reductions it leaves unread go."""
    changed = []

    def rewrite(call: relax.Call, source) -> relax.Expr:
        new = _softmax_of_shifted_rows(call, source)
        if new is not call:
            changed.append(call)
        return new

    rewritten = rewrite_bindings(mod, ("relax.nn.softmax",), rewrite)
    return relax.transform.DeadCodeElimination()(rewritten) if changed else mod


def causal_masks(mod: tvm.IRModule) -> tvm.IRModule:
    """A constant mask applied by ``where`` with an absorbing fill (GPT-2's and nanoGPT's
    ``masked_fill(causal, -inf)``, Hugging Face's ``where(causal, scores, finfo.min)``) -> the
    scores plus a constant bias (the fill where masked, 0 elsewhere): the same values, as the
    scores' add of a constant, which attention cores take as their bias (Swin's relative
    position bias is one), where ``where`` is no engine's op."""
    return rewrite_bindings(mod, ("relax.where",), _fill_bias)


def _same_values_broadcast(call: relax.Call, source) -> relax.Expr:
    a, b = call.args
    shapes, out = [_static(a), _static(b)], _static(call)
    if out is None or None in shapes or shapes[0] == shapes[1]:
        return call
    wide, narrow = (0, 1) if len(shapes[0]) >= len(shapes[1]) else (1, 0)
    operand = call.args[narrow]
    # a constant is ranked_constants'; a parameter (a weight left as a runtime input: a dense
    # layer's bias) stays the chain's input, where a reshape of it would be an op of its own
    # (in int8 a quantised one: ResNet-18's runtime-weight int8 20.3 dB against 25)
    if is_constant(operand) or (isinstance(operand, relax.Var) and source(operand) is None):
        return call
    extra = len(shapes[wide]) - len(shapes[narrow])
    # the narrow one is the wide one's shape without some of its leading unit axes: the
    # same values in the same order, the broadcast a reshape
    if shapes[wide] != out or extra == 0 or any(d != 1 for d in out[:extra]) or \
            shapes[wide][extra:] != shapes[narrow]:
        return call
    args = list(call.args)
    args[narrow] = relax.op.reshape(args[narrow], out)
    return relax.Call(call.op, args, call.attrs)


def same_values_broadcasts(mod: tvm.IRModule) -> tvm.IRModule:
    """An element-wise op of two tensors whose shapes differ only by leading unit axes, the
    lower-rank one computed in the function ([1, 1, C] + [1, C]: an LSTM step's gates) ->
    that one reshaped to the other's shape first (the same values), which the SDP's
    element-wise unit takes."""
    return rewrite_bindings(mod, _ELEMENTWISE_PAIRS, _same_values_broadcast)


def _positive_floor(expr: relax.Expr, source) -> Optional[Tuple[relax.Expr, float]]:
    """(y, lo) where ``expr`` is clip(y, lo, inf) or maximum(y, lo) with lo > 0 (a mean
    pooling's count, torch.clamp(count, min=1e-9)), else None."""
    value = source(expr) if isinstance(expr, relax.Var) else expr
    if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
        return None
    if value.op.name == "relax.clip":
        low, high = (_bound_of(b) for b in value.args[1:3])
        if low is not None and low > 0.0 and high == float("inf"):
            return value.args[0], low
    if value.op.name == "relax.maximum":
        for y, bound in (value.args, value.args[::-1]):
            if is_constant(bound) and constant_value(bound).size == 1 and \
                    float(constant_value(bound).reshape(-1)[0]) > 0.0 and not is_constant(y):
                return y, float(constant_value(bound).reshape(-1)[0])
    return None


# ops whose value is never negative, and views that keep their input's values
_NON_NEGATIVE = ("relax.nn.relu", "relax.sigmoid", "relax.exp", "relax.abs", "relax.nn.softplus")
_VALUE_VIEWS = ("relax.reshape", "relax.permute_dims", "relax.broadcast_to", "relax.squeeze",
                "relax.expand_dims", "relax.strided_slice")


def _lower_bound(expr: relax.Expr, source, depth: int = 16) -> Optional[float]:
    """A lower bound of every value of ``expr`` that what computes it proves (squares, sums and
    means of non-negative values, positive constants added, scalings by positive constants),
    None where none is known. The bound holds for the values as computed in floating point too:
    each step is monotonic in its operands, and so is rounding."""
    if is_constant(expr):
        value = constant_value(expr)
        return float(np.min(value)) if value.size and np.all(np.isfinite(value)) else None
    value = source(expr) if isinstance(expr, relax.Var) else expr
    if depth == 0 or not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
        return None
    name, args = value.op.name, value.args
    if name in _NON_NEGATIVE:
        return 0.0
    if name in _VALUE_VIEWS or name == "relax.mean":
        return _lower_bound(args[0], source, depth - 1)
    squared = name == "relax.power" and is_constant(args[1]) and \
        constant_value(args[1]).size == 1 and float(constant_value(args[1]).reshape(-1)[0]) == 2
    if squared or name == "relax.multiply" and args[0].same_as(args[1]):
        return 0.0
    if name == "relax.sum":
        low = _lower_bound(args[0], source, depth - 1)
        return 0.0 if low is not None and low >= 0.0 else None  # a sum of one value or more
    if name == "relax.maximum":
        bounds = [b for b in (_lower_bound(a, source, depth - 1) for a in args) if b is not None]
        return max(bounds) if bounds else None
    if name not in ("relax.add", "relax.multiply", "relax.divide"):
        return None
    a, b = (_lower_bound(arg, source, depth - 1) for arg in args)
    if a is None or b is None:
        return None
    if name == "relax.add":
        return a + b
    if a < 0.0 or b < 0.0:
        return None
    if name == "relax.multiply":
        return a * b
    # a / b: a bound only for a constant positive divisor (b's upper bound is unknown)
    if not is_constant(args[1]) or b <= 0.0:
        return None
    return a / float(np.max(constant_value(args[1])))


def _reads(expr: relax.Expr, target: relax.Expr, source, depth: int = 8) -> bool:
    """Whether ``expr`` is computed from ``target`` within ``depth`` ops."""
    if expr.same_as(target):
        return True
    value = source(expr) if isinstance(expr, relax.Var) else expr
    if depth == 0 or not isinstance(value, relax.Call):
        return False
    return any(_reads(arg, target, source, depth - 1) for arg in value.args
               if isinstance(arg, (relax.Var, relax.Call)))


def _bound_of(bound) -> Optional[float]:
    value = getattr(bound, "value", None)
    value = getattr(value, "value", value)  # a PrimValue wraps the immediate
    return float(value) if isinstance(value, (int, float)) else None


def _per_row_product(call: relax.Call, source) -> relax.Expr:
    x, m = call.args
    out, shapes = _static(call), [_static(x), _static(m)]
    if out is None or None in shapes:
        return call
    if call.op.name == "relax.divide":
        # x / max(y, lo), lo > 0: x times the LUT's reciprocal of max(y, lo), one SDP pass
        # (its input in the reciprocal's domain: lowering._decomposed_activation)
        floor = _positive_floor(m, source)
        # x over a norm of itself (ONNX's LpNormalization: x / max(sqrt(sum(x x)), eps)) is
        # the L2 norm composite's (chains.l2_normalize), not a division per row
        if floor is not None and _reads(m, x, source):
            return call
        if floor is None:
            # m >= lo > 0 by what computes it (SimAM's 4 (sum(d) / n + lambda), d a square):
            # max(m, lo) is m; lo lowered a little so that no rounding of m falls below it
            low = _lower_bound(m, source)
            if low is None or low <= 0.0:
                return call
            floor = m, low * (1.0 - 2.0 ** -10)
    elif shapes[0] != out:
        x, m = m, x
        shapes = shapes[::-1]
    if shapes[0] != out or is_constant(m) or str(call.ty.dtype) not in ("float32", "float16") or \
            str(m.ty.dtype) != str(call.ty.dtype):
        return call
    if call.op.name == "relax.multiply" and len(out) >= 3 and out[-2] >= 2 and out[-1] >= 2 and \
            shapes[1] == out[:-2] + [1, out[-1]]:
        # x [..., H, W] times a computed m [..., 1, W], one factor per column of each plane
        # (coordinate attention's width weights): the per-row product of x's transpose
        # [..., W, H] by m read as [..., W, 1] (the same bytes), transposed back
        axes = list(range(len(out)))
        axes[-2:] = axes[-1], axes[-2]
        rows = int(np.prod(out[:-2])) * out[-1]
        columns = named_as(relax.op.reshape(named_as(relax.op.permute_dims(x, axes), call),
                                            [1, rows, 1, out[-2]]), call)
        product = named_as(relax.op.multiply(columns, relax.op.reshape(m, [1, rows, 1, 1])), call)
        return relax.op.permute_dims(named_as(relax.op.reshape(
            product, out[:-2] + [out[-1], out[-2]]), call), axes)
    # x [..., C] times (or over) a computed m [..., 1] of the same leading axes: one factor
    # per row; or x [N, C, H, W] over a computed m [N, C, 1, 1], one divisor per channel
    per_channel = call.op.name == "relax.divide" and len(out) == 4 and \
        shapes[1] == out[:2] + [1, 1] and out[2] * out[3] > 1
    if not per_channel and (len(out) < 2 or shapes[1] != out[:-1] + [1] or out[-1] < 2):
        return call
    if call.op.name == "relax.divide":
        dtype = str(call.ty.dtype)
        y, low = floor
        m = named_as(relax.op.divide(relax.const(np.array(1.0, dtype)), named_as(
            relax.op.maximum(y, relax.const(np.array(low, dtype))), call)), call)
    if per_channel:  # the SDP's multiply by a computed per-channel operand, as it lies
        return relax.op.multiply(x, m)
    rows = int(np.prod(out[:-1]))
    product = relax.op.multiply(relax.op.reshape(x, [1, rows, 1, out[-1]]),
                                relax.op.reshape(m, [1, rows, 1, 1]))
    return relax.op.reshape(named_as(product, call), out)


def per_row_products(mod: tvm.IRModule) -> tvm.IRModule:
    """x [..., C] times a computed tensor m [..., 1] of the same leading axes (a padded
    batch's mean pooling, sentence-transformers': the tokens ``x * mask[..., None]``) ->
    the product of x read as [1, R, 1, C] (R rows as channels: the same bytes) and m as
    [1, R, 1, 1], viewed back: the SDP's multiply with a computed per-channel operand,
    which squeeze-excite's ``x * s`` runs (``Layer.computed_scale``); x [..., H, W] times a
    computed m [..., 1, W] (coordinate attention's factor per column) the same product of x's
    transpose [..., W, H], transposed back (two transposes of x where the host would split the
    function). x divided by such an m
    held above a positive bound (the pooling's ``sum / clamp(count, min=1e-9)``) likewise, m
    then ``1 / maximum(count, 1e-9)``: the SDP's max then its LUT reciprocal, one pass (fp32:
    IEEE's 1 / t, so x / m within an ulp; fp16: the table's); not where m is computed from x
    (a norm of x: the L2 norm composite's)."""
    return rewrite_bindings(mod, ("relax.multiply", "relax.divide"), _per_row_product)


def _images_of(x: relax.Expr, images: int, size: int, call: relax.Call):
    """A function of i giving image i's ``size`` values of x, a batch of ``images`` (x itself
    for one): a slice of x read as [1, images, size] (one view of x for every image), one BDMA
    copy of its contiguous block."""
    if images == 1:
        return lambda i: x
    whole = named_as(relax.op.reshape(x, [1, images, size]), call)
    return lambda i: named_as(relax.op.strided_slice(whole, axes=[1], begin=[i], end=[i + 1]),
                              call)


def _side_by_side(products: list, out: list, call: relax.Call) -> relax.Expr:
    """The images' products, each flattened to one row, concatenated along axis 1 and viewed
    as ``out``: the batch's results lie one after the other, as the batched matmul's do."""
    if len(products) == 1:
        return relax.op.reshape(products[0], out)
    size = int(np.prod(out)) // len(products)
    rows = [named_as(relax.op.reshape(p, [1, size]), call) for p in products]
    return relax.op.reshape(named_as(relax.op.concat(rows, axis=1), call), out)


def _column_product(call: relax.Call, source) -> relax.Expr:
    a, b = call.args
    out, a_shape, b_shape = _static(call), _static(a), _static(b)
    if out is None or a_shape is None or b_shape is None or len(a_shape) < 2 or \
            len(b_shape) != len(a_shape) or b_shape[-1] != 1 or a_shape[-1] != b_shape[-2] or \
            a_shape[:-2] != b_shape[:-2] or is_constant(a) or is_constant(b) or \
            {str(a.ty.dtype), str(b.ty.dtype), str(call.ty.dtype)} != {"float32"}:
        return call
    images = int(np.prod(a_shape[:-2]))
    rows, length = a_shape[-2:]
    products = []
    maps, columns = _images_of(a, images, rows * length, call), _images_of(b, images, length, call)
    for i in range(images):
        weights = named_as(relax.op.reshape(maps(i), [rows, length]), call)
        row = named_as(relax.op.reshape(columns(i), [1, length]), call)
        products.append(named_as(relax.op.matmul(row, named_as(
            relax.op.permute_dims(weights, [1, 0]), call)), call))
    # the images' [1, C] rows side by side are the [images, C] result's bytes
    return _side_by_side(products, out, call)


def column_products(mod: tvm.IRModule) -> tvm.IRModule:
    """A matmul of a computed map A [1, .., C, N] by a computed column b [1, .., N, 1] (GCNet's
    context modelling: the feature map's positions summed with their softmaxed weights) ->
    the dense layer of b's one row [1, N] (the same bytes) whose weights are A's C rows of N
    ([C, N] is the CONV's C kernels of N channels as A's NCHW output lies), viewed back:
    ``A b = (b^T A^T)^T`` with the same products, one CONV run that reads its weights from
    the run that wrote A (``Layer.computed_dense_weight``: NVDLA's CONV fetches its weights
    from memory). A batch's images are a dense layer each (its own weights: a slice of A),
    their [1, C] rows concatenated side by side."""
    return rewrite_bindings(mod, ("relax.matmul",), _column_product)


def _of_constant(expr: relax.Expr, source) -> bool:
    """Whether expr is a constant, or layout ops of one (a dense layer's transposed weight)."""
    while isinstance(expr, relax.Var):
        bound = source(expr)
        if not isinstance(bound, relax.Call) or op_name(bound) not in _SHAPE_ONLY + (
                "relax.permute_dims",):
            return False
        expr = bound.args[0]
    return is_constant(expr)


def _transposed_2d(x: relax.Expr, rows: int, columns: int, call: relax.Call) -> relax.Expr:
    """x's [rows, columns] values as the [columns, rows] transpose: one BDMA transpose of
    [1, rows, columns] (lowering's swap of the two axes after the batch)."""
    three = named_as(relax.op.reshape(x, [1, rows, columns]), call)
    return named_as(relax.op.reshape(named_as(relax.op.permute_dims(three, [0, 2, 1]), call),
                                     [columns, rows]), call)


def _keys_of(b: relax.Expr, rank: int, source) -> Optional[relax.Expr]:
    """K where b is K^T, a transpose of its last two axes of a computed K of static shape (the
    CONV's kernels, or a dense layer's rows, as K lies), else None."""
    swap = list(range(rank - 2)) + [rank - 1, rank - 2]
    bound = source(b) if isinstance(b, relax.Var) else None
    keys = bound.args[0] if isinstance(bound, relax.Call) and \
        op_name(bound) == "relax.permute_dims" and (
            bound.attrs.axes is None and rank == 2 or
            bound.attrs.axes is not None and
            [int(x) % rank for x in _int_list(bound.attrs.axes)] == swap) else None
    return None if keys is None or is_constant(keys) or _static(keys) is None else keys


def _constant_rows_matmul(call: relax.Call, source) -> relax.Expr:
    """C [.., M, K] B [.., K, N] with C a constant (a Perceiver's learned queries, folded with
    their projection by the ONNX import) and B computed: per image, (B_i^T C_i^T)^T, the dense
    layer of B_i^T's N rows with C_i's M rows as its constant weights, then transposed."""
    a, b = call.args
    out, a_shape, b_shape = _static(call), _static(a), _static(b)
    rank = len(b_shape)
    images = int(np.prod(b_shape[:-2]))
    batch = [1] * (rank - len(a_shape)) + a_shape[:-2]
    if len(a_shape) > rank or any(x not in (1, y) for x, y in zip(batch, b_shape[:-2])) or \
            int(np.prod(batch)) not in (1, images):
        return call
    m, k = a_shape[-2:]
    n = b_shape[-1]
    rows = constant_value(a).reshape(-1, m, k)
    keys = _keys_of(b, rank, source)
    columns = _images_of(b if keys is None else keys, images, k * n, call)
    products = []
    for i in range(images):
        data = named_as(relax.op.reshape(columns(i), [n, k]), call) if keys is not None \
            else _transposed_2d(columns(i), k, n, call)
        weight = np.ascontiguousarray(rows[i % len(rows)].T)  # [K, M]
        product = named_as(relax.op.matmul(data, relax.const(weight, "float32")), call)
        products.append(_transposed_2d(product, n, m, call))
    return _side_by_side(products, out, call)


def _computed_matmul(call: relax.Call, source) -> relax.Expr:
    a, b = call.args
    out, a_shape, b_shape = _static(call), _static(a), _static(b)
    if out is not None and a_shape is not None and b_shape is not None and \
            len(a_shape) >= 2 and len(b_shape) >= 2 and a_shape[-1] == b_shape[-2] and \
            is_constant(a) and not _of_constant(b, source) and b_shape[-1] > 1 and \
            {str(a.ty.dtype), str(b.ty.dtype), str(call.ty.dtype)} == {"float32"} and \
            (call.attrs.out_dtype is None or str(call.attrs.out_dtype) in ("", "float32")):
        return _constant_rows_matmul(call, source)
    if out is None or a_shape is None or b_shape is None or len(a_shape) < 2 or \
            len(b_shape) != len(a_shape) or a_shape[:-2] != b_shape[:-2] or \
            a_shape[-1] != b_shape[-2] or b_shape[-1] == 1 or _of_constant(a, source) or \
            _of_constant(b, source) or {str(a.ty.dtype), str(b.ty.dtype), str(call.ty.dtype)} != \
            {"float32"} or (call.attrs.out_dtype is not None and
                            str(call.attrs.out_dtype) not in ("", "float32")):
        return call
    rank = len(b_shape)
    # b = K^T, a transpose of its last two axes (attention's scores): K [.., N, K] is already
    # the CONV's N kernels of K as it lies, read as the weights with no copy
    keys = _keys_of(b, rank, source)
    if rank == 2 and keys is not None:
        return call  # already the dense layer of computed weights (lowering._dense_spec)
    images = int(np.prod(a_shape[:-2]))
    m, k = a_shape[-2:]
    n = b_shape[-1]
    products = []
    rows = _images_of(a, images, m * k, call)
    columns = _images_of(b if keys is None else keys, images, k * n, call)
    for i in range(images):
        data = named_as(relax.op.reshape(rows(i), [m, k]), call)
        if keys is not None:
            weights = named_as(relax.op.reshape(columns(i), [n, k]), call)
        else:  # b's [K, N] transposed to its N rows of K, the weights' layout the CONV reads
            weights = _transposed_2d(columns(i), k, n, call)
        products.append(named_as(relax.op.matmul(data, named_as(
            relax.op.permute_dims(weights, [1, 0]), call)), call))
    return _side_by_side(products, out, call)


def computed_matmuls(mod: tvm.IRModule) -> tvm.IRModule:
    """A (batched) matmul of two computed operands A [.., M, K] B [.., K, N] that no rewrite
    before read as something else (attention's cores, GCNet's column products) -> per image
    (head, batch element) the dense layer of A's M rows whose weights are B's N columns,
    ``A_i B_i = A_i (B_i^T)^T``: one CONV run whose weights another run wrote (NVDLA's CONV
    fetches its weights from memory: ``Layer.computed_dense_weight``), the images' [M, N]
    results side by side. B given as K^T (a transpose of its last two axes: Q K^T) is read
    through K's rows as they lie; any other B is transposed to its N rows of K first, one
    BDMA transpose per image. Exact: each output sums the same K products in the CONV's
    order. Batch axes that broadcast, and a column B (N = 1: column_products), are left as
    they are."""
    return rewrite_bindings(mod, ("relax.matmul",), _computed_matmul)


def _bindings_table(function: relax.Function) -> dict:
    return {b.var: b.value for block in function.body.blocks for b in block.bindings
            if isinstance(b, relax.VarBinding)}


def space_to_depth_convs(mod: tvm.IRModule) -> tvm.IRModule:
    """concat of the s x s phases of x along channels -> a one-hot s x s stride-s conv2d."""
    result = tvm.IRModule(mod.functions, attrs=mod.attrs)
    pattern = is_op("relax.concat")(wildcard())
    for gv, function in mod.functions_items():
        if isinstance(function, relax.Function):
            result[gv] = rewrite_call(pattern, _space_to_depth(_bindings_table(function)),
                                      function)
    return result


# A permute before the flatten of a dense layer (an NHWC flatten: face detectors' heads)
# -> a plain flatten of x, the dense weight's columns permuted to match at compile time: the
# layer's output element k sums the same products W[k, j] * y[j], each input read where it is.
_PERMUTE_X = wildcard()
_PERMUTED = is_op("relax.permute_dims")(_PERMUTE_X)
_FLATTENED_PERMUTE = is_op("relax.reshape")(_PERMUTED, wildcard())
_DENSE_WEIGHT = is_const()
_DENSE_WEIGHT_T = is_op("relax.permute_dims")(_DENSE_WEIGHT)
_DENSE_OF_PERMUTE = is_op("relax.matmul")(_FLATTENED_PERMUTE, _DENSE_WEIGHT_T | _DENSE_WEIGHT)


def _fold_permute(expr: relax.Expr, matches) -> relax.Expr:
    x, permuted = matches[_PERMUTE_X], matches[_PERMUTED]
    flat, weight = matches[_FLATTENED_PERMUTE], matches[_DENSE_WEIGHT]
    shape, flat_shape, w_shape = _static(x), _static(flat), _static(weight)
    if shape is None or flat_shape is None or w_shape is None or len(shape) < 3:
        return expr
    axes = list(range(len(shape)))[::-1] if permuted.attrs.axes is None \
        else [a % len(shape) for a in _int_list(permuted.attrs.axes)]
    size = int(np.prod(shape[1:]))
    if axes[0] != 0 or flat_shape != [shape[0], size] or len(w_shape) != 2:
        return expr
    transposed = _DENSE_WEIGHT_T in matches and matches[_DENSE_WEIGHT_T] is not None
    if transposed:  # matmul(y, permute_dims(W)), W [K, size]
        axes_w = matches[_DENSE_WEIGHT_T].attrs.axes
        if (axes_w is not None and _int_list(axes_w) != [1, 0]) or w_shape[1] != size:
            return expr
    elif w_shape[0] != size:  # matmul(y, W') with W' [size, K]
        return expr
    # y's flat index at each position of x: x's element i is y's element order[i].
    perm = [a - 1 for a in axes[1:]]
    y_index = np.arange(size).reshape([shape[1:][a] for a in perm])
    order = y_index.transpose(np.argsort(perm)).reshape(-1)
    w = constant_value(weight)
    data = relax.op.reshape(x, [shape[0], size])
    if transposed:
        return relax.op.matmul(data, relax.op.permute_dims(relax.const(w[:, order]), [1, 0]),
                               out_dtype=expr.attrs.out_dtype)
    return relax.op.matmul(data, relax.const(w[order, :]), out_dtype=expr.attrs.out_dtype)


def permuted_flattens(mod: tvm.IRModule) -> tvm.IRModule:
    """matmul(flatten(permute_dims(x)), constant W) -> matmul(flatten(x), W with its input
    columns permuted): the flatten keeps NCHW order, which the dense layer reads as it is."""
    return _rewrite(mod, _DENSE_OF_PERMUTE, _fold_permute)


# A constant reshaped once and read by several ops (a bias [1, C, 1, 1] that two convs add;
# SqueezeNet, EfficientNetV2): the reshape's result is an intermediate the matcher cannot
# give to two chains, so it stayed on the host and each chain read it from there. Each
# reader gets the reshaped constant itself.
_SHAPE_ONLY = ("relax.reshape", "relax.expand_dims", "relax.squeeze")


@relax.expr_functor.mutator
class _InlinedConstants(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, constants: dict):
        super().__init__(mod)
        self.constants = constants

    def visit_dataflow_var_(self, var: relax.DataflowVar) -> relax.Expr:
        return self.constants.get(var) or super().visit_dataflow_var_(var)


def _moved_constant(value: relax.Call) -> np.ndarray:
    """The constant a reshape or a permute_dims of a constant computes."""
    array = constant_value(value.args[0])
    if value.op.name == "relax.permute_dims":
        axes = value.attrs.axes
        return np.ascontiguousarray(np.transpose(array, None if axes is None
                                                 else _int_list(axes)))
    return array.reshape(_static(value))


def _graph_functions(mod: tvm.IRModule):
    """(global var, function) of each Relax function of ``mod`` but the composites: the
    graphs the rewrites change."""
    for gv, function in mod.functions_items():
        if isinstance(function, relax.Function) and not (
                function.attrs is not None and "Composite" in function.attrs):
            yield gv, function


def _rewrite_with_readers(mod: tvm.IRModule, pattern, make_rewriter) -> tvm.IRModule:
    """``pattern`` rewritten in each graph function by ``make_rewriter(readers, bound)``: the
    function's reader counts and its bound value -> var table (a fold that needs an
    intermediate result read by the next op alone)."""
    result = tvm.IRModule(mod.functions, attrs=mod.attrs)
    for gv, function in _graph_functions(mod):
        bound = {value: var for var, value in _bindings_table(function).items()}
        part = _rewrite(tvm.IRModule({gv: function}), pattern,
                        make_rewriter(read_counts(function), bound))
        result[gv] = part[gv]
    return result


_ELEMENT_WISE = ("relax.add", "relax.multiply", "relax.subtract", "relax.divide")


def _operands_read_as_constants(function: relax.Function) -> set:
    """The variables some element-wise arithmetic binding of ``function`` reads directly, but
    for 4-D ones (torch's conv biases, [1, C, 1, 1], which the patterns read through their
    reshape), and the slopes of its PReLUs (ONNX's PRelu slope is [C, 1, 1], which TVM's
    importer reshapes to the [C] of ``relax.nn.prelu``: its pattern reads a constant)."""
    values = list(_bindings_table(function).values())
    return {arg for value in values
            if getattr(getattr(value, "op", None), "name", None) in _ELEMENT_WISE
            for arg in value.args if isinstance(arg, relax.Var) and
            len(_static(arg) or [0] * 4) != 4} | \
        {value.args[1] for value in values
         if getattr(getattr(value, "op", None), "name", None) == "relax.nn.prelu" and
         isinstance(value.args[1], relax.Var)}


def shared_constant_reshapes(mod: tvm.IRModule) -> tvm.IRModule:
    """A reshape (expand_dims, squeeze) or a permute_dims of a constant read by two ops or more
    -> the reshaped constant in each reader (torch.export binds one permute_dims for the equal
    weights of cloned layers, as nn.TransformerEncoder's are before training: each dense
    layer then reads its weights on its own); and one of another rank than 4 that element-wise
    arithmetic reads (a per-channel scale of [1, C, 1] of 1-D data: fp16 and int8 code read
    constant operands), or that a PReLU reads as its slope (ONNX's)."""
    result = tvm.IRModule(mod.functions, attrs=mod.attrs)
    for gv, function in _graph_functions(mod):
        readers = read_counts(function)
        arithmetic = _operands_read_as_constants(function)
        constants = {}
        for var, value in _bindings_table(function).items():
            if isinstance(var, relax.DataflowVar) and \
                    (readers.get(var, 0) > 1 or var in arithmetic) and \
                    getattr(getattr(value, "op", None), "name", None) in _SHAPE_ONLY + (
                        "relax.permute_dims",) and \
                    is_constant(value.args[0]) and _static(value) is not None:
                constants[var] = relax.const(_moved_constant(value), value.ty.dtype)
        if constants:
            result[gv] = _InlinedConstants(result, constants).visit_expr(function)
    return result


# c - x with a constant c (box decoding) -> x * (-1) + c: the SDP's scale and shift. Exact:
# x * (-1) is -x, and IEEE subtraction is the addition of the negation, one rounding.
_MINUEND = is_const()
_SUBTRAHEND = wildcard()
_CONSTANT_MINUS = is_op("relax.subtract")(_MINUEND, _SUBTRAHEND)


def _negatable(x: relax.Expr, other: relax.Expr) -> Optional[str]:
    """The float dtype of a computed tensor ``x`` that a subtraction negates, when ``other``,
    the other operand, has the same one (None: the subtraction stays as it is)."""
    dtype = str(getattr(x.ty, "dtype", None))
    if is_constant(x) or dtype not in ("float32", "float16") or \
            str(getattr(other.ty, "dtype", None)) != dtype:
        return None
    return dtype


def _negated_plus(expr: relax.Expr, matches) -> relax.Expr:
    c, x = matches[_MINUEND], matches[_SUBTRAHEND]
    dtype = _negatable(x, c)
    if dtype is None:
        return expr
    return relax.op.add(relax.op.multiply(x, relax.const(-1.0, dtype)), c)


def constant_minus_tensor(mod: tvm.IRModule) -> tvm.IRModule:
    """subtract(constant c, x) -> add(multiply(x, -1), c)."""
    return _rewrite(mod, _CONSTANT_MINUS, _negated_plus)


# -x (RoPE's rotate_half, torch.cat([-x2, x1])) -> x * (-1): the SDP's scale. Exact.
_NEGATED = wildcard()
_NEGATIVE = is_op("relax.negative")(_NEGATED)


def _scaled_by_minus_one(expr: relax.Expr, matches) -> relax.Expr:
    x = matches[_NEGATED]
    dtype = _negatable(x, x)
    return expr if dtype is None else relax.op.multiply(x, relax.const(-1.0, dtype))


def negatives_as_scales(mod: tvm.IRModule) -> tvm.IRModule:
    """negative(x) of a computed float tensor -> multiply(x, -1)."""
    return _rewrite(mod, _NEGATIVE, _scaled_by_minus_one)


# torch's softmax in scaled_dot_product_attention's decomposition is guarded, where(every
# score of the row is -inf, 0, P), for fully masked rows; attention.py reads the guard within
# its core (_unguarded). Where the core is not read (q and k rotated first: RoPE), the guard
# of scores that are products of finite tensors, scaled (no mask added), is P itself.
_GUARD_OPS = ("relax.logical_not", "relax.astype", "relax.max", "relax.equal")
_SCORE_VIEWS = ("relax.reshape", "relax.permute_dims", "relax.broadcast_to")


def _product_scores(expr: relax.Expr, source) -> bool:
    """Whether expr is a matmul seen through views and scalings by constants."""
    while isinstance(expr, relax.Var):
        bound = source(expr)
        name = op_name(bound) if isinstance(bound, relax.Call) else None
        if name == "relax.matmul":
            return True
        if name in ("relax.multiply", "relax.divide") and is_constant(bound.args[1]) or \
                name in _SCORE_VIEWS:
            expr = bound.args[0]
        else:
            return False
    return False


def _unguarded_softmax(call: relax.Call, source) -> relax.Expr:
    condition, fill, probabilities = call.args
    softmax = source(probabilities) if isinstance(probabilities, relax.Var) else None
    zeros = source(fill) if isinstance(fill, relax.Var) else None
    if op_name(softmax) != "relax.nn.softmax" or op_name(zeros) != "relax.full_like" or \
            not zeros.args[0].same_as(probabilities) or not is_constant(zeros.args[1]) or \
            np.any(constant_value(zeros.args[1]) != 0) or \
            not _product_scores(softmax.args[0], source):
        return call
    scores, stack, seen = softmax.args[0], [condition], set()
    while stack:  # the condition reads the scores alone, through the guard's ops
        expr = stack.pop()
        if expr.same_as(scores) or expr in seen:
            continue
        seen.add(expr)
        bound = source(expr) if isinstance(expr, relax.Var) else None
        if op_name(bound) not in _GUARD_OPS:
            return call
        stack.extend(a for a in bound.args if not is_constant(a))
    return probabilities


def unguarded_softmaxes(mod: tvm.IRModule) -> tvm.IRModule:
    """where(row all -inf, 0, softmax(s)) of scores s that are a scaled matmul -> softmax(s)."""
    return rewrite_bindings(mod, ("relax.where",), _unguarded_softmax)


# a - b of two tensors of one shape (box decoding's x2y2 - x1y1) -> a + b * (-1): the SDP's
# scale of one run and the element-wise adder of the next. Exact: b * (-1) is -b, and IEEE
# subtraction is the addition of the negation, one rounding.
_MINUEND_T = wildcard()
_SUBTRAHEND_T = wildcard()
_TENSOR_MINUS = is_op("relax.subtract")(_MINUEND_T, _SUBTRAHEND_T)


def _plus_negated(expr: relax.Expr, matches) -> relax.Expr:
    a, b = matches[_MINUEND_T], matches[_SUBTRAHEND_T]
    dtype = _negatable(b, a)
    shape, other = _static(a), _static(b)
    if dtype is None or is_constant(a) or shape is None or other is None:
        return expr
    # b one value per image and channel of NCHW a (SimAM's x - mean(x)): the element-wise
    # adder's per-channel operand (lowering's computed channel addend)
    per_channel = len(shape) == 4 and other == shape[:2] + [1, 1] and shape[2] * shape[3] > 1
    if other != shape and not per_channel:
        return expr
    return relax.op.add(a, relax.op.multiply(b, relax.const(-1.0, dtype)))


def tensor_minus_tensor(mod: tvm.IRModule) -> tvm.IRModule:
    """subtract(a, b) of two computed tensors of one shape, or of an NCHW tensor and one value
    per image and channel, -> add(a, multiply(b, -1))."""
    return _rewrite(mod, _TENSOR_MINUS, _plus_negated)


# Channels-last sandwiches of NCHW data (ConvNeXt's block, torchvision's LayerNorm2d: permute
# NCHW -> NHWC, layer norm over C, Linear over C, GELU, a per-channel scale, permute back)
# -> the same ops over the channels of the NCHW tensor itself: layer_norm over axis 1, a 1x1
# conv2d for the Linear, the activation and the scale as they are, the two permutes cancelled.
# On NVDLA the permute moves nothing (an [N, H, W, C] token tensor is the [N, C, H, W]
# surface's bytes: layer.token_surface), so the runs are the same either way; here each op is
# one the engines take on the NCHW surface, and no permute stays between them on the host. The
# values are the same sums and products (a 1x1 conv sums over C as the matmul does).
_NCHW = wildcard()
_TO_NHWC = is_op("relax.permute_dims")(_NCHW)
_NHWC_AXES, _NCHW_AXES = [0, 2, 3, 1], [0, 3, 1, 2]
#: Ops of one tensor that act on each element alone (they commute with a permute).
_PER_ELEMENT = {"relax.nn.gelu": relax.op.nn.gelu, "relax.nn.gelu_tanh": relax.op.nn.gelu_tanh,
                "relax.nn.relu": relax.op.nn.relu, "relax.nn.silu": relax.op.nn.silu,
                "relax.sigmoid": relax.op.sigmoid, "relax.tanh": relax.op.tanh}
_SANDWICH_LN = is_op("relax.nn.layer_norm")(_TO_NHWC, is_const(), is_const())
_SANDWICH_ACT = None
for _name in _PER_ELEMENT:
    _one = is_op(_name)(_TO_NHWC)
    _SANDWICH_ACT = _one if _SANDWICH_ACT is None else _SANDWICH_ACT | _one
_SCALE = is_const()
_SANDWICH_SCALE = is_op("relax.multiply")(_TO_NHWC, _SCALE) | \
    is_op("relax.multiply")(_SCALE, _TO_NHWC)
_LINEAR_W = is_const()
_LINEAR_WT = is_op("relax.permute_dims")(_LINEAR_W)
_LINEAR_B = is_const()
_LINEAR_FLAT = is_op("relax.reshape")(_TO_NHWC, wildcard())
_LINEAR_MM = is_op("relax.matmul")(_LINEAR_FLAT | _TO_NHWC, _LINEAR_WT | _LINEAR_W)
_LINEAR_BIASED = is_op("relax.add")(_LINEAR_MM, _LINEAR_B) | \
    is_op("relax.add")(_LINEAR_B, _LINEAR_MM)
_SANDWICH_LINEAR = is_op("relax.reshape")(_LINEAR_BIASED | _LINEAR_MM, wildcard()) | \
    _LINEAR_BIASED | _LINEAR_MM
_BACK_TO_NCHW = is_op("relax.permute_dims")(_TO_NHWC)
#: ConvNeXt-V2's GRN over the channels-last tensor (chains.grn: its norm over H and W, the
#: mean of the norms over C, the affine and the residual): the same ops over NCHW data
_GRN_ROLES: Dict[str, DFPattern] = {}
_SANDWICH_GRN = chains.grn(_TO_NHWC, _GRN_ROLES)


def _permute_axes(call: relax.Call, rank: int) -> Optional[list]:
    axes = call.attrs.axes
    return list(range(rank))[::-1] if axes is None else [int(a) % rank
                                                         for a in _int_list(axes)]


def _nhwc_of(matches) -> Optional[relax.Expr]:
    """x when the match's permute is NCHW -> NHWC of a 4-D float x, else None."""
    x = matches[_NCHW]
    shape = _static(x)
    if shape is None or len(shape) != 4 or getattr(x.ty, "dtype", None) not in (
            "float32", "float16") or _permute_axes(matches[_TO_NHWC], 4) != _NHWC_AXES:
        return None
    return x


def _matched(matches, pattern: DFPattern) -> Optional[relax.Expr]:
    """What ``pattern`` matched, None for an alternative that did not take part."""
    return matches[pattern] if pattern in matches else None


def _nhwc(expr: relax.Expr) -> relax.Expr:
    return relax.op.permute_dims(expr, _NHWC_AXES)


def _sandwich_layer_norm(expr: relax.Expr, matches) -> relax.Expr:
    x = _nhwc_of(matches)
    a = expr.attrs
    if x is None or [int(v) % 4 for v in a.axes] != [3]:
        return expr
    return _nhwc(relax.op.nn.layer_norm(x, expr.args[1], expr.args[2], axes=[1],
                                        epsilon=float(a.epsilon), center=bool(a.center),
                                        scale=bool(a.scale)))


def _sandwich_activation(expr: relax.Expr, matches) -> relax.Expr:
    x = _nhwc_of(matches)
    return expr if x is None else _nhwc(_PER_ELEMENT[expr.op.name](x))


def _sandwich_scale(expr: relax.Expr, matches) -> relax.Expr:
    x = _nhwc_of(matches)
    scale = matches[_SCALE]
    if x is None or scale.ty.dtype != x.ty.dtype:
        return expr
    channels = _static(x)[1]
    value = constant_value(scale)
    if value.size != channels or value.ndim == 0 or value.shape[-1] != channels:
        return expr  # a scalar or another broadcast: not one factor per channel
    return _nhwc(relax.op.multiply(x, relax.const(value.reshape(1, channels, 1, 1),
                                                  str(scale.ty.dtype))))


def _sandwich_linear(expr: relax.Expr, matches) -> relax.Expr:
    x = _nhwc_of(matches)
    if x is None:
        return expr
    n, c, h, w = _static(x)
    weight = constant_value(matches[_LINEAR_W])
    transposed = _matched(matches, _LINEAR_WT) is not None
    if weight.ndim != 2 or (transposed and (_permute_axes(matches[_LINEAR_WT], 2) != [1, 0] or
                                            weight.shape[1] != c)) or \
            (not transposed and weight.shape[0] != c):
        return expr
    kernels = weight if transposed else weight.T
    k = kernels.shape[0]
    flat = _matched(matches, _LINEAR_FLAT)
    if flat is not None and (_static(flat) != [n * h * w, c] or _static(expr) != [n, h, w, k]):
        return expr
    if flat is None and _static(expr) != [n, h, w, k]:
        return expr  # the matmul on the 4-D tensor itself (ONNX), whose result is the output
    dtype = str(x.ty.dtype)
    out = relax.op.nn.conv2d(x, relax.const(np.ascontiguousarray(kernels).reshape(k, c, 1, 1),
                                            dtype), data_layout="NCHW", kernel_layout="OIHW",
                             out_layout="NCHW", out_dtype=dtype)
    if _matched(matches, _LINEAR_B) is not None:
        bias = constant_value(matches[_LINEAR_B])
        if bias.size != k or bias.shape[-1] != k:
            return expr
        out = relax.op.add(out, relax.const(bias.reshape(1, k, 1, 1), dtype))
    return _nhwc(out)


def _sandwich_grn(expr: relax.Expr, matches) -> relax.Expr:
    x = _nhwc_of(matches)
    if x is None:
        return expr
    channels = _static(x)[1]
    total, mean = matches[_GRN_ROLES["grn_sum"]], matches[_GRN_ROLES["grn_mean"]]
    eps = np.asarray(constant_value(matches[_GRN_ROLES["grn_eps"]])).reshape(-1)
    gamma, beta = (constant_value(matches[_GRN_ROLES[f"grn_{name}"]])
                   for name in ("gamma", "beta"))
    if not chains.grn_exponents(matches[_GRN_ROLES["grn_squares"]],
                                matches[_GRN_ROLES["grn_root"]], constant_value) or \
            keepdims_axes(total, 4) != [1, 2] or keepdims_axes(mean, 4) != [3] or \
            eps.size != 1 or any(not _one_per_channel(v, 4, 3, channels)
                                 for v in (gamma, beta)):
        return expr  # not a GRN over H and W of channels-last data: lowering says why not
    dtype = str(x.ty.dtype)
    norm = relax.op.sqrt(relax.op.sum(relax.op.multiply(x, x), axis=[2, 3], keepdims=True))
    nx = relax.op.divide(norm, relax.op.add(relax.op.mean(norm, axis=[1], keepdims=True),
                                            relax.const(eps.astype(dtype).reshape(()), dtype)))

    def per_channel(value):
        return relax.const(np.asarray(value).reshape(1, channels, 1, 1).astype(dtype), dtype)

    scaled = relax.op.multiply(relax.op.multiply(x, nx), per_channel(gamma))
    return _nhwc(relax.op.add(relax.op.add(scaled, per_channel(beta)), x))


def _sandwich_cancel(expr: relax.Expr, matches) -> relax.Expr:
    x = _nhwc_of(matches)
    if x is None or _permute_axes(expr, 4) != _NCHW_AXES:
        return expr
    return x


_SANDWICH_REWRITES = ((_SANDWICH_LN, _sandwich_layer_norm),
                      (_SANDWICH_ACT, _sandwich_activation),
                      (_SANDWICH_SCALE, _sandwich_scale),
                      (_SANDWICH_LINEAR, _sandwich_linear),
                      (_SANDWICH_GRN, _sandwich_grn),
                      (_BACK_TO_NCHW, _sandwich_cancel))


def channels_last_sandwiches(mod: tvm.IRModule) -> tvm.IRModule:
    """permute NCHW -> NHWC, then per-channel ops over the last axis (layer norm, Linear,
    per-element activations, a per-channel scale), then permute back -> the same ops over axis
    1 of the NCHW tensor, without the permutes. Each rewrite moves the permute one op later;
    they repeat until none applies (a permute that reaches no permute back stays, after the
    ops it passed)."""
    for _ in range(64):
        before = mod
        for pattern, rewriter in _SANDWICH_REWRITES:
            mod = _rewrite(mod, pattern, rewriter)
        if tvm_ffi.structural_equal(before, mod):
            break
    return mod


# A layer norm over the channels of NCHW data read only by a convolution without padding
# (ConvNeXt's block after channels_last_sandwiches: layer norm, then the Linear as a 1x1 conv;
# its downsampling: LayerNorm2d, then a 2x2 stride-2 conv): the layer norm's shift beta folded
# into the conv's bias, conv(W, y + beta) = conv(W, y) + sum_{c,r,s} W[k, c, r, s] beta[c] (no
# padding: every tap reads a shifted value), as batch norm folds into a conv. In the layer
# norm's passes gamma r d rounds once to the data precision instead of twice (then + beta);
# in fp16, convnext_mini's SQNR against float64 rose from 57.7 to 59.8 dB. A layer norm with
# center=False ignores its beta: nothing to fold.
# (names of their own: layer_norm_from_formula's _LN_GAMMA / _LN_BETA are other patterns)
_FOLD_LN_DATA = wildcard()
_FOLD_GAMMA, _FOLD_BETA = is_const(), is_const()
_NORMED = is_op("relax.nn.layer_norm")(_FOLD_LN_DATA, _FOLD_GAMMA, _FOLD_BETA)
_FOLD_W = is_const()
_FOLD_CONV = is_op("relax.nn.conv2d")(_NORMED, _FOLD_W)
_FOLD_B = is_const()
_FOLD_B_SHAPED = is_op("relax.reshape")(_FOLD_B, wildcard())  # torch's conv bias
_FOLD_BIASED = is_op("relax.add")(_FOLD_CONV, _FOLD_B | _FOLD_B_SHAPED)


def _beta_folded(readers: dict, bound: dict):
    def rewriter(expr: relax.Expr, matches) -> relax.Expr:
        norm, conv = matches[_NORMED], matches[_FOLD_CONV]
        x = matches[_FOLD_LN_DATA]
        a, c = norm.attrs, conv.attrs
        beta = constant_value(matches[_FOLD_BETA]).astype(np.float64)
        weight = constant_value(matches[_FOLD_W]).astype(np.float64)
        shape = _static(x)
        var = bound.get(norm)
        if shape is None or len(shape) != 4 or [int(v) % 4 for v in a.axes] != [1] or \
                not bool(a.center) or \
                not np.any(beta) or beta.size != shape[1] or \
                var is None or readers.get(var, 0) != 1 or int(c.groups) != 1 or \
                any(int(v) for v in c.padding) or str(c.data_layout) != "NCHW" or \
                str(c.kernel_layout) != "OIHW" or weight.ndim != 4 or \
                weight.shape[1] != shape[1]:
            return expr
        dtype = str(x.ty.dtype)
        k = weight.shape[0]
        bias = np.einsum("kcrs,c->k", weight, beta.reshape(-1))
        old = constant_value(matches[_FOLD_B])
        if old.size != k or _static(expr.args[1]) not in ([1, k, 1, 1], [k, 1, 1]):
            return expr
        bias = bias + old.astype(np.float64).reshape(-1)
        unshifted = relax.op.nn.layer_norm(
            x, norm.args[1], relax.const(np.zeros(beta.shape, dtype), dtype),
            axes=[int(v) for v in a.axes], epsilon=float(a.epsilon), center=bool(a.center),
            scale=bool(a.scale))
        out = relax.Call(conv.op, [named_as(unshifted, norm), conv.args[1]], conv.attrs)
        return relax.op.add(named_as(out, conv), relax.const(bias.reshape(1, k, 1, 1), dtype))
    return rewriter


def layer_norm_shifts_into_convs(mod: tvm.IRModule) -> tvm.IRModule:
    """conv2d(layer_norm(x, gamma, beta, axes=[1]), W) + b, the layer norm read by the conv
    alone and the conv without padding -> conv2d(layer_norm(x, gamma, 0), W) + (b + W beta)."""
    return _rewrite_with_readers(mod, _FOLD_BIASED, _beta_folded)


# A constant scale and shift after a convolution, (conv2d(x, W) + b) * c + d (PP-LCNetV3's
# learnable affine blocks after each conv + batch norm, in Paddle's ONNX as Mul and Add of
# [1] constants): folded into the conv as batch norm folds, conv2d(x, W c) + (b c + d), exact
# for any padding and groups (each output channel scaled, then shifted). Without it the
# scale/shift was a layer of its own after the conv's, one more int8 rounding of every conv
# output (30 in the PP-OCRv4 recogniser).
_AFF_X, _AFF_W, _AFF_B = wildcard(), is_const(), is_const()
_AFF_CONV = is_op("relax.nn.conv2d")(_AFF_X, _AFF_W)
_AFF_BIASED = is_op("relax.add")(_AFF_CONV, _AFF_B | is_op("relax.reshape")(_AFF_B, wildcard()))
_AFF_C, _AFF_D = is_const(), is_const()
_AFF_MUL = is_op("relax.multiply")(_AFF_BIASED | _AFF_CONV, _AFF_C)
_AFF_MUL_FIRST = is_op("relax.multiply")(_AFF_C, _AFF_BIASED | _AFF_CONV)  # Paddle's scale * x
_AFF_SHIFTED = is_op("relax.add")(_AFF_MUL | _AFF_MUL_FIRST, _AFF_D) | \
    is_op("relax.add")(_AFF_D, _AFF_MUL | _AFF_MUL_FIRST)


def _per_channel(value: np.ndarray, k: int) -> Optional[np.ndarray]:
    """A constant that broadcasts per output channel of [N, k, H, W] ([1], [k, 1, 1],
    [1, k, 1, 1]): its k values; None for any other shape."""
    shape = [int(v) for v in value.shape]
    if value.size == 1 and len(shape) <= 4:
        return np.full(k, float(value.reshape(-1)[0]))
    if value.size == k and shape[-2:] == [1, 1] and len(shape) in (3, 4) and shape[-3] == k:
        return value.reshape(-1).astype(np.float64)
    return None


def _affine_folded(readers: dict, bound: dict):
    def rewriter(expr: relax.Expr, matches) -> relax.Expr:
        conv = matches[_AFF_CONV]
        scaled = matches[_AFF_MUL] if _AFF_MUL in matches else matches[_AFF_MUL_FIRST]
        biased = matches[_AFF_BIASED] if _AFF_BIASED in matches else None
        weight = constant_value(matches[_AFF_W]).astype(np.float64)
        shape = _static(conv)
        if shape is None or len(shape) != 4 or weight.ndim != 4 or \
                str(conv.attrs.data_layout) != "NCHW" or str(conv.attrs.kernel_layout) != \
                "OIHW" or str(conv.attrs.out_layout) not in ("", "NCHW"):
            return expr
        k = weight.shape[0]
        # the scale's tensor operand (a bound variable) is the biased sum's or the conv's
        data = scaled.args[1] if is_constant(scaled.args[0]) else scaled.args[0]
        inner = next((e for e in (biased, conv) if e is not None and (
            data.same_as(e) or data.same_as(bound.get(e)))), None)
        if inner is None:
            return expr
        if any(readers.get(bound.get(e), 0) != 1 for e in (inner, scaled)) or \
                (inner is biased and readers.get(bound.get(conv), 0) != 1):
            return expr
        c = _per_channel(constant_value(matches[_AFF_C]), k)
        d = _per_channel(constant_value(matches[_AFF_D]), k)
        b = np.zeros(k)
        if inner is biased:
            # the bias as the add reads it (after its reshape): a [k] bias broadcasts along W,
            # not the channels, so only the shapes _per_channel takes are per channel
            value = constant_value(matches[_AFF_B])
            added = _static(biased.args[1])
            if added is None or int(np.prod(added)) != value.size:
                return expr
            b = _per_channel(value.reshape(added), k)
            if b is None:
                return expr
        if c is None or d is None or not np.all(np.isfinite(c)) or \
                _static(expr) != [int(v) for v in shape]:
            return expr
        dtype = str(conv.ty.dtype)
        folded = relax.const((weight * c.reshape(-1, 1, 1, 1)).astype(dtype), dtype)
        out = relax.Call(conv.op, [conv.args[0], folded], conv.attrs)
        return relax.op.add(named_as(out, conv),
                            relax.const((b * c + d).reshape(1, k, 1, 1).astype(dtype), dtype))
    return rewriter


def affines_into_convs(mod: tvm.IRModule) -> tvm.IRModule:
    """(conv2d(x, W) [+ b]) * c + d with constant c, d per output channel (or scalars), the
    conv's output read by the scale alone -> conv2d(x, W c) + (b c + d)."""
    return _rewrite_with_readers(mod, _AFF_SHIFTED, _affine_folded)


# A constant scale and shift that no convolution before it can take (PP-LCNetV3's learnable
# affine block after each hardswish: hardswish(y) * c + d, [1] constants), read by a
# convolution alone: folded into that conv's input side, conv2d(x c + d, W) ->
# conv2d(x, W c) + sum(W d), W c per input channel and the shift summed over each output
# channel's taps. With padding a padded tap reads 0 where the folded conv would need -d / c
# (NVDLA's CONV pads with one value per tensor, which in int8 would have to be a code), so
# the shift's sum differs at the border: there the fold adds the difference, a constant of
# the output's shape that is 0 wherever every tap is inside the image (the SDP's
# element-wise operand after the bias: exact in fp32; in int8 a rounding of the border's
# corrections alone, in place of a pass that rounds the whole tensor; only where the
# correction is no larger than the shift the bias takes: a larger one's int8 step made
# PP-OCRv4's text detector lose 13 dB at its borders). The conv's bias add,
# when it has one, takes the interior's shift (two passes: with the bias, then a conv
# without one).
_NX_X, _NX_C, _NX_D = wildcard(), is_const(), is_const()
_NX_MULS = (is_op("relax.multiply")(_NX_X, _NX_C), is_op("relax.multiply")(_NX_C, _NX_X))
_NX_MUL = _NX_MULS[0] | _NX_MULS[1]
_NX_ADDS = (is_op("relax.add")(_NX_MUL, _NX_D), is_op("relax.add")(_NX_D, _NX_MUL),
            is_op("relax.subtract")(_NX_MUL, _NX_D))
_NX_AFFINE = _NX_ADDS[0] | _NX_ADDS[1] | _NX_ADDS[2] | _NX_MUL
_NX_W, _NX_B = is_const(), is_const()
_NX_CONV = is_op("relax.nn.conv2d")(_NX_AFFINE, _NX_W)
_NX_BIASED = is_op("relax.add")(_NX_CONV, _NX_B | is_op("relax.reshape")(_NX_B, wildcard()))


def _input_side_folded(readers: dict, bound: dict):
    def rewriter(expr: relax.Expr, matches) -> relax.Expr:
        conv = matches[_NX_CONV]
        mul = next(matches[p] for p in _NX_MULS if p in matches)
        shifted = next((matches[p] for p in _NX_ADDS if p in matches), None)
        affine = mul if shifted is None else shifted
        a = conv.attrs
        weight = constant_value(matches[_NX_W]).astype(np.float64)
        shape = _static(affine)
        out_shape = _static(conv)
        if shape is None or len(shape) != 4 or weight.ndim != 4 or out_shape is None or \
                str(a.data_layout) != "NCHW" or \
                str(a.kernel_layout) != "OIHW" or str(a.out_layout) not in ("", "NCHW") or \
                _static(mul) != shape or _static(matches[_NX_X]) != shape:
            return expr
        # the affine's result is the conv's alone (and the product the shift's alone)
        if readers.get(bound.get(affine), 0) != 1 or \
                (shifted is not None and readers.get(bound.get(mul), 0) != 1):
            return expr
        channels, k, groups = shape[1], weight.shape[0], int(a.groups)
        c = _per_channel(constant_value(matches[_NX_C]), channels)
        d = np.zeros(channels) if shifted is None else \
            _per_channel(constant_value(matches[_NX_D]), channels)
        if d is not None and shifted is not None and shifted.op.name == "relax.subtract":
            d = -d
        if c is None or d is None or not np.all(np.isfinite(c)) or \
                not np.all(np.isfinite(d)) or weight.shape[1] * groups != channels or \
                k % groups:
            return expr
        # the input channel each weight [k, i] reads: group k // (K / g), channel i of it
        group = np.arange(k) // (k // groups)
        source = group[:, None] * weight.shape[1] + np.arange(weight.shape[1])[None, :]
        folded_w = weight * c[source][:, :, None, None]
        shifted_w = np.einsum("kirs,ki->krs", weight, d[source])
        shift = shifted_w.sum(axis=(1, 2))
        border = _border_shift(shifted_w, shape[2:], out_shape[2:], a)
        if border is not None and (int(np.prod(out_shape[1:])) > _MAX_BORDER_SHIFT or
                                   np.abs(border).max() > np.abs(shift).max()):
            return expr
        biased = not expr.same_as(conv)
        if biased:
            value = constant_value(matches[_NX_B])
            added = _static(expr.args[1])
            if added is None or int(np.prod(added)) != value.size or \
                    readers.get(bound.get(conv), 0) != 1:
                return expr
            b = _per_channel(value.reshape(added), k)
            if b is None:
                return expr
            shift = shift + b
        dtype = str(conv.ty.dtype)
        out = relax.Call(conv.op, [matches[_NX_X], relax.const(folded_w.astype(dtype), dtype)],
                         conv.attrs)
        out = relax.op.add(named_as(out, conv),
                           relax.const(shift.reshape(1, k, 1, 1).astype(dtype), dtype))
        if border is None:
            return out
        return relax.op.add(out, relax.const(border[None].astype(dtype), dtype))
    return rewriter


# The largest border correction (elements of one image's output) a padded fold adds: the
# SDP reads it as a feature-sized operand (as lowering's expanded operands).
_MAX_BORDER_SHIFT = 1 << 20


def _border_shift(shifted_w: np.ndarray, size, out_size, attrs) -> Optional[np.ndarray]:
    """The shift's sum at each output position of a padded conv minus its sum over all taps
    (``shifted_w``: [K, R, S], each tap's share), [K, H', W']: 0 where every tap reads the
    image, at the border minus the padded taps' shares; None when no tap is ever padded."""
    top, left, bottom, right = (int(v) for v in attrs.padding)
    if not any((top, left, bottom, right)):
        return None
    (stride_h, stride_w), (dil_h, dil_w) = [int(v) for v in attrs.strides], \
        [int(v) for v in attrs.dilation]
    _, taps_h, taps_w = shifted_w.shape

    def inside(taps, stride, dilation, pad, length, out):  # [taps, out]: the tap reads x
        rows = np.arange(out)[None, :] * stride - pad + np.arange(taps)[:, None] * dilation
        return ((rows >= 0) & (rows < length)).astype(np.float64)

    rows = inside(taps_h, stride_h, dil_h, top, int(size[0]), int(out_size[0]))
    cols = inside(taps_w, stride_w, dil_w, left, int(size[1]), int(out_size[1]))
    total = np.einsum("krs,ry,sx->kyx", shifted_w, rows, cols)
    border = total - shifted_w.sum(axis=(1, 2))[:, None, None]
    return border if np.any(border != 0) else None


def affines_into_next_convs(mod: tvm.IRModule) -> tvm.IRModule:
    """conv2d(x * c [+ d], W) [+ b] with constant c, d per channel of x (or scalars), the
    affine read by the conv alone -> conv2d(x, W c) + (b + sum(W d)), and where the conv pads
    and d is not 0, + the border's correction (a constant of the output's shape, 0 inside:
    the padded taps' shares of sum(W d) taken off), when that is no larger than sum(W d).
    After :func:`affines_into_convs`, which folds an affine into the conv that computes its
    input (exact with any padding) where there is one."""
    once = _rewrite_with_readers(mod, _NX_BIASED, _input_side_folded)
    return _rewrite_with_readers(once, _NX_CONV, _input_side_folded)


# A global average whose window the PDP cannot split into exact passes (a side with a prime
# factor above its 8: PP-PicoDet's squeeze-excite means over its stride-32 map, 25x19) runs
# as padded passes and a rescale, which int8 does not generate: for int8 it becomes the
# depthwise convolution it is, weights 1 / (H W) (a CONV window up to
# ACCEL_MAX_CONV_KERNEL; equal weights are one int8 code, 127, per channel), whose SDP then
# converts to the mean's own scale. Only where the mean's value is read by an op that
# computes: the convolution is there to keep its function whole, and it is dear (one output
# position per channel, so every tap of every channel is a weight block that waits for its
# load: C H W x cmac_weight_load_cycles). A mean whose value only leaves the program
# (SqueezeNet's classifier: a 13x13 mean of 1000 channels, then the flatten) splits nothing
# on the host, where its convolution would cost more cycles than the rest of the network.
_GAP_X = wildcard()
_GAP = is_op("relax.mean")(_GAP_X) | is_op("relax.nn.adaptive_avg_pool2d")(_GAP_X)


def _pdp_splits(size: int) -> bool:
    """Whether a side of ``size`` splits into PDP windows exactly (every prime factor fits
    the PDP's window), as ``PoolSpec.passes`` splits it."""
    from .._accel_ffi import lib

    for window in range(lib.ACCEL_MAX_POOL_KERNEL, 1, -1):
        while size % window == 0 and size > 1:
            size //= window
    return size == 1


def _leaving_only(function: relax.Function) -> set:
    """The variables of ``function`` whose values only leave it: read by its result alone,
    or by shape-only ops (reshape, squeeze, expand_dims), aliases and tuples whose values
    only leave it too."""
    bindings = [b for block in function.body.blocks for b in block.bindings
                if isinstance(b, relax.VarBinding)]
    readers: Dict[relax.Var, list] = {}
    for binding in bindings:
        for var in relax.analysis.free_vars(binding.value):
            readers.setdefault(var, []).append(binding)
    returned = set(relax.analysis.free_vars(function.body.body))
    leaving: set = set()
    for binding in reversed(bindings):  # a value's readers come after it
        reads = readers.get(binding.var, [])
        if (reads or binding.var in returned) and all(
                r.var in leaving and (isinstance(r.value, (relax.Var, relax.Tuple)) or
                                      getattr(getattr(r.value, "op", None), "name", None) in
                                      _SHAPE_ONLY)
                for r in reads):
            leaving.add(binding.var)
    return leaving


def _mean_as_conv(leaving: set, bound: dict):
    def rewrite(expr: relax.Expr, matches) -> relax.Expr:
        return expr if bound.get(expr) in leaving else _mean_conv(expr, matches)
    return rewrite


def _mean_conv(expr: relax.Expr, matches) -> relax.Expr:
    from .._accel_ffi import lib

    x = matches[_GAP_X]
    shape, out = _static(x), _static(expr)
    # the output [N, C(, 1, 1)] of a 4-D input rules out an NHWC pool (its [N, 1, 1, C]
    # equals [N, H, 1, 1] only when H = 1, a window the PDP holds)
    if shape is None or out is None or len(shape) != 4 or out not in (
            shape[:2] + [1, 1], shape[:2]) or str(x.ty.dtype) not in ("float32", "float16"):
        return expr
    if expr.op.name == "relax.mean" and sorted(
            int(a) % 4 for a in (expr.attrs.axis or [])) != [2, 3]:
        return expr
    n, channels, height, width = shape
    if (height <= lib.ACCEL_MAX_POOL_KERNEL and width <= lib.ACCEL_MAX_POOL_KERNEL) or (
            _pdp_splits(height) and _pdp_splits(width)) or \
            max(height, width) > lib.ACCEL_MAX_CONV_KERNEL:
        return expr
    dtype = str(x.ty.dtype)
    weight = np.full((channels, 1, height, width), 1.0 / (height * width), dtype)
    conv = named_as(relax.op.nn.conv2d(x, relax.const(weight, dtype), groups=channels), expr)
    return conv if out == shape[:2] + [1, 1] else relax.op.reshape(conv, [n, channels])


def global_means_as_convolutions(mod: tvm.IRModule) -> tvm.IRModule:
    """mean(x, [2, 3]) (or adaptive_avg_pool2d to 1 x 1) of a window the PDP splits only
    with padding and a rescale, and a CONV's kernel holds -> conv2d(x, 1 / (H W), groups=C)
    [reshaped to [N, C]]: applied for int8 alone (the partitioner), where the padded passes'
    rescale has no form; fp32 and fp16 keep the pool. A mean whose value only leaves the
    program (through reshapes) stays: on the host it splits no function."""
    result = tvm.IRModule(mod.functions, attrs=mod.attrs)
    for gv, function in _graph_functions(mod):
        bound = {value: var for var, value in _bindings_table(function).items()}
        part = _rewrite(tvm.IRModule({gv: function}), _GAP,
                        _mean_as_conv(_leaving_only(function), bound))
        result[gv] = part[gv]
    return result


# A 1x1 convolution whose output a non-overlapping k x k average pool alone reads (DenseNet's
# transitions: conv 1x1, then a 2x2 stride-2 pool) is one k x k stride-k convolution of the
# weights / (k k) repeated over the window: both are linear, each pooled output sums the same
# C k k products (the same MACs, no PDP pass, weights k k times larger), and a bias per
# channel is its own average. In int8 the pooled value is then rounded once, by the CONV's
# converter, where the fused chain rounded the conv's output to codes and the PDP's average
# twice more (half away from zero after each reciprocal: int8.pool_rounding_bias). So it is
# for int8 alone: in fp32 and fp16 the two differ only by rounding, and the k k times larger
# weights are more bytes to load. Non-overlapping windows only (an overlapping pool's conv
# would repeat products). Without padding the pool's count_include_pad does not matter;
# floor mode drops the rows and columns the strided conv drops.
_CP_X, _CP_W, _CP_B = wildcard(), is_const(), wildcard()
_CP_CONV = is_op("relax.nn.conv2d")(_CP_X, _CP_W)
_CP_BIASED = is_op("relax.add")(_CP_CONV, _CP_B)
_CONV_POOL = is_op("relax.nn.avg_pool2d")(_CP_CONV | _CP_BIASED)


def _pooled_conv(readers: dict, bound: dict):
    def rewriter(expr: relax.Expr, matches) -> relax.Expr:
        from .._accel_ffi import lib

        conv = matches[_CP_CONV]
        biased = matches[_CP_BIASED] if _CP_BIASED in matches else None
        a, p = conv.attrs, expr.attrs
        weight = constant_value(matches[_CP_W])
        kernel, strides = _int_list(p.pool_size), _int_list(p.strides)
        dtype = str(conv.ty.dtype)
        if weight.ndim != 4 or list(weight.shape[2:]) != [1, 1] or \
                str(a.data_layout) != "NCHW" or str(a.kernel_layout) != "OIHW" or \
                str(a.out_layout) not in ("", "NCHW") or _int_list(a.strides) != [1, 1] or \
                _int_list(a.dilation) != [1, 1] or any(_int_list(a.padding)) or \
                str(p.layout) != "NCHW" or str(p.out_layout) not in ("", "NCHW") or \
                any(_int_list(p.padding)) or _int_list(p.dilation) != [1, 1] or \
                bool(p.ceil_mode) or strides != kernel or \
                max(kernel) > int(lib.ACCEL_MAX_CONV_STRIDE) or \
                dtype not in ("float32", "float16") or str(expr.ty.dtype) != dtype:
            return expr
        # the conv's output (and its bias add's) is the pool's alone
        if readers.get(bound.get(conv), 0) != 1 or \
                (biased is not None and readers.get(bound.get(biased), 0) != 1):
            return expr
        bias = None
        if biased is not None:
            bias = matches[_CP_B]
            shape = _static(bias)
            # a constant per channel (or one value): the same at every position of a window
            if shape is None or len(shape) > 4 or shape[-2:] not in ([1, 1], [1]) or \
                    not (is_constant(bias) or (op_name(bias) == "relax.reshape" and
                                               is_constant(bias.args[0]))):
                return expr
        kh, kw = kernel
        shape, out_shape = _static(matches[_CP_X]), _static(expr)
        if shape is None or out_shape is None or len(shape) != 4 or \
                out_shape[2:] != [shape[2] // kh, shape[3] // kw]:
            return expr
        folded = np.repeat(np.repeat(weight.astype(np.float64) / (kh * kw), kh, axis=2),
                           kw, axis=3)
        out = named_as(relax.op.nn.conv2d(
            matches[_CP_X], relax.const(folded.astype(dtype), dtype), strides=(kh, kw),
            padding=(0, 0, 0, 0), groups=int(a.groups), data_layout="NCHW",
            kernel_layout="OIHW", out_layout="NCHW", out_dtype=dtype), conv)
        if bias is not None:
            out = relax.op.add(out, bias)
        return out
    return rewriter


def _window_divisors(size: int, kernel: int, stride: int, before: int, after: int, out: int,
                     include: bool) -> np.ndarray:
    """What an average divides by at each of ``out`` positions along one axis (torch's and
    TVM's rule): its window clipped to the padded extent [-before, size + after) when it
    counts padding, to the image [0, size) when not; ceil_mode's last window reaches past
    both and counts neither."""
    starts = np.arange(out) * stride - before
    low, high = (-before, size + after) if include else (0, size)
    return np.minimum(starts + kernel, high) - np.maximum(starts, low)


def _varying_divisor_average(int8: bool):
    def rewrite(call: relax.Call, source) -> relax.Expr:
        from .._accel_ffi import lib

        a = call.attrs
        shape, out = _static(call.args[0]), _static(call)
        dtype = str(call.ty.dtype)
        if shape is None or out is None or len(shape) != 4 or str(a.layout) != "NCHW" or \
                str(a.out_layout) not in ("", "NCHW") or \
                any(d != 1 for d in _int_list(a.dilation)) or \
                dtype not in ("float32", "float16"):
            return call
        kernel, strides = _int_list(a.pool_size), _int_list(a.strides)
        padding = _int_list(a.padding)
        padding = padding * 2 if len(padding) == 2 else padding
        include = bool(a.count_include_pad)
        divisors = np.outer(*[_window_divisors(shape[2 + i], kernel[i], strides[i], padding[i],
                                               padding[2 + i], out[2 + i], include)
                              for i in range(2)])
        window = kernel[0] * kernel[1]
        # the PDP divides by the whole window, or (in fp32 and fp16) by its image elements
        # when it does not count padding: those averages it runs
        if not (int8 or include) or np.all(divisors == window) or np.any(divisors <= 0) or \
                max(kernel) > int(lib.ACCEL_MAX_CONV_KERNEL) or \
                max(strides) > int(lib.ACCEL_MAX_CONV_STRIDE):
            return call
        # the bottom and right padding that give the pool's output size with every window
        # whole (ceil_mode's last one reads zeros past the padding; floor mode's unread rows
        # need none)
        ends = [max((out[2 + i] - 1) * strides[i] + kernel[i] - shape[2 + i] - padding[i], 0)
                for i in range(2)]
        if any((shape[2 + i] + padding[i] + ends[i] - kernel[i]) // strides[i] + 1 !=
               out[2 + i] for i in range(2)):
            return call
        padded = [padding[0], padding[1], ends[0], ends[1]]
        if int8:
            channels = shape[1]
            weight = np.full((channels, 1, *kernel), 1.0 / window, dtype)
            whole = relax.op.nn.conv2d(call.args[0], relax.const(weight, dtype), strides,
                                       padded, groups=channels, out_dtype=dtype)
        else:
            whole = relax.op.nn.avg_pool2d(call.args[0], kernel, strides, padded,
                                           count_include_pad=True)
        factor = (window / divisors).astype(dtype).reshape(1, 1, *out[2:])
        return named_as(relax.op.multiply(named_as(whole, call), relax.const(factor, dtype)),
                        call)
    return rewrite


def varying_divisor_averages(mod: tvm.IRModule, precision: str) -> tvm.IRModule:
    """avg_pool2d whose divisor is not its whole window at some position, where the PDP
    does not divide as it does -> the average over whole windows of x, padded as the pool
    reads it (what the PDP computes: ceil_mode's last windows reach past the padding into
    zeros), times the constant k k / divisor per position (1 inside: the SDP's element-wise
    multiply). In fp32 and fp16, only a ceil_mode pool counting padding whose last windows
    reach past it (torch divides those by their padded extent alone), as a PDP average
    counting padding: the other averages the PDP runs. In int8 (a mixed build is matched
    as int8's), whose PDP divides by the whole window (NVDLA's reciprocal registers), any
    (count_include_pad False with padding: PoolFormer's token mixer, Inception's pool
    branches), as a depthwise conv2d of weights 1 / (k k): its sums are exact and rounded
    once with the factor at the CONV's own output scale, where the PDP's average keeps its
    input's (and in fp16 1 / 9 is no half, where the PDP divides in fp32)."""
    return rewrite_bindings(mod, ("relax.nn.avg_pool2d",),
                            _varying_divisor_average(precision == "int8"))


def pooled_convolutions(mod: tvm.IRModule) -> tvm.IRModule:
    """avg_pool2d(conv2d(x, W) [+ b]) of a 1x1 W and a k x k stride-k pool without padding,
    the conv's output read by the pool alone -> conv2d(x, W / (k k) over k x k, stride k)
    [+ b]: applied for int8 alone (the partitioner), where it spares two roundings; fp32 and
    fp16 keep the fused pool (docs/ptq.md, "A DenseNet transition's conv and pool as one
    conv")."""
    return _rewrite_with_readers(mod, _CONV_POOL, _pooled_conv)


# A reshape to the shape its input has (torch's flatten after a keepdims mean, then
# unflattened), or a broadcast to it (torch.matmul's operands of a batched product, each
# expanded to the batch shape it already has): it moves nothing, and alone it stayed on the
# host between two functions (before a matmul: the attention core's operands unread).
def _unreshaped(call: relax.Call, source) -> relax.Expr:
    x = call.args[0]
    shape = _static(x)
    return x if shape is not None and shape == _static(call) else call


def identity_reshapes(mod: tvm.IRModule) -> tvm.IRModule:
    """reshape(x, x's own shape) or broadcast_to(x, x's own shape) -> x, binding by binding
    (:func:`rewrite_bindings`: through rewrite_call, the first of these rewrites that changed
    ViT-B/16 hashed its 344 MB of constants, 0.8 s of the 4.9 s its matching took)."""
    return rewrite_bindings(mod, ("relax.reshape", "relax.broadcast_to"), _unreshaped)


# A cast to the type its input has (skl2onnx's Cast to float of a float input): no engine op,
# and alone it stayed on the host before the first function.
_CAST_X = wildcard()
_CAST = is_op("relax.astype")(_CAST_X)


def _uncast(expr: relax.Expr, matches) -> relax.Expr:
    x = matches[_CAST_X]
    return x if str(x.ty.dtype) == str(expr.attrs.dtype) else expr


def identity_casts(mod: tvm.IRModule) -> tvm.IRModule:
    """astype(x, x's own dtype) -> x."""
    return _rewrite(mod, _CAST, _uncast)


# Layout ops that only name the same bytes otherwise (Paddle2ONNX's SVTR mixer, PP-OCR): a
# squeeze or expand_dims is the reshape to its output's shape; an opset-12 Softmax over the
# last axis arrives as softmax(reshape(x, [rows, L])) reshaped back, the softmax of x's own
# rows when x's last axis is L (a reshape keeps row-major order, so the rows are the same);
# a permute_dims that swaps the only two axes longer than 1 (Paddle's [1, T, C] tokens put
# back on the NCHW surface: reshape to [1, 1, T, C], permute [0, 3, 1, 2]) is the transpose
# of [1, R, S] between reshapes, which the BDMA runs and the reshapes name.
@relax.expr_functor.mutator
class _ByBinding(relax.PyExprMutator):
    """Each binding of a call of one of ``ops`` replaced by ``rewrite(call, source)`` (nested
    calls, each emitted as a binding of its own), where that is not the call itself;
    ``source(var)``: the value bound to a variable of the function (None: a parameter). A
    dataflow variable whose call becomes a constant is replaced by the constant in its
    readers (as TVM's CanonicalizeBindings does after rewrite_call), so that the next
    rewrite sees a constant operand."""

    def __init__(self, mod: tvm.IRModule, ops, rewrite):
        super().__init__(mod)
        self.ops, self.rewrite = frozenset(ops), rewrite
        self.constants: Dict[relax.Var, relax.Expr] = {}

    def visit_dataflow_var_(self, var: relax.DataflowVar) -> relax.Expr:
        return self.constants.get(var) or super().visit_dataflow_var_(var)

    def _emit_args(self, expr: relax.Expr, emitted=None) -> relax.Expr:
        """``expr`` with its nested calls emitted, each once where a rewrite reads one call
        twice (``emitted``: call -> its binding's variable)."""
        emitted = {} if emitted is None else emitted
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self._emit_args(f, emitted) for f in expr.fields])
        if not isinstance(expr, relax.Call):
            return expr
        args = []
        for arg in expr.args:
            if isinstance(arg, relax.TupleGetItem) and isinstance(arg.tuple_value, relax.Call):
                # a tuple's item (batch_norm's output) a binding too: the builder would
                # otherwise bind it itself and make this call anew, without its span
                whole = arg.tuple_value
                if whole not in emitted:
                    emitted[whole] = self.builder_.emit(self._emit_args(whole, emitted))
                arg = self.builder_.emit(relax.TupleGetItem(emitted[whole], arg.index))
            elif isinstance(arg, relax.Call):
                if arg not in emitted:
                    emitted[arg] = self.builder_.emit(self._emit_args(arg, emitted))
                arg = emitted[arg]
            else:
                arg = self._emit_args(arg, emitted)
            args.append(arg)
        return relax.Call(expr.op, args, expr.attrs, expr.ty_args, expr.span)

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = binding.value
        if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and
                value.op.name in self.ops):
            super().visit_var_binding_(binding)
            return
        call = self.visit_expr(value)
        new = self.rewrite(call, self.lookup_binding)
        if new is call or new is None:
            super().visit_var_binding_(binding)
            return
        if is_constant(new) and isinstance(binding.var, relax.DataflowVar):
            self.constants[binding.var] = new
            return
        if isinstance(new, relax.Var) and isinstance(binding.var, relax.DataflowVar):
            self.set_var_remap(binding.var, new)  # its readers read that variable instead
            return
        new = self._emit_args(new)
        # a function's output of a dataflow block; a binding block's variables are all Vars
        emit = self.builder_.emit_output if self.builder_.current_block_is_dataflow() and \
            not isinstance(binding.var, relax.DataflowVar) else self.builder_.emit
        self.set_var_remap(binding.var, emit(new, name_hint=binding.var.name))


def rewrite_bindings(mod: tvm.IRModule, ops, rewrite) -> tvm.IRModule:
    """``mod`` with each binding of a call of one of ``ops`` (operator names) in its functions
    (not the composites) replaced by ``rewrite(call, source)``, where that returns another
    expression (nested calls become bindings of their own); ``source(var)`` gives the value
    bound to ``var`` (None for a parameter). Binding by binding, where TVM's rewrite_call
    would also merge equal expressions elsewhere (two layers' equal constant weight
    transposes, which their dense layers then share) and, to find them, hash every
    constant's bytes once per rewrite that changes the graph (ViT-B's 344 MB): the squeezes
    here, the identity reshapes, the folded constants, the sliced takes, the wide-stride
    convolutions and the window layouts' swaps (``windows.py``) rewrite this way."""
    result = tvm.IRModule(mod.functions, attrs=mod.attrs)
    for gv, function in _graph_functions(mod):
        result[gv] = _ByBinding(result, ops, rewrite).visit_expr(function)
    return result


def _rewrite_calls(mod: tvm.IRModule, pattern: DFPattern, rewriter) -> tvm.IRModule:
    """:func:`_rewrite`'s ``rewriter(expr, matches)`` of a ``pattern`` that is one call of
    operands (``is_op(...)(wildcard(), is_const(), ...)``), applied binding by binding
    (:func:`rewrite_bindings`); the new call keeps the source name of the one it replaces,
    unless the rewriter named it."""
    def rewrite(call: relax.Call, source) -> relax.Expr:
        matches = pattern.extract_matched_expr(call)
        if matches is None:
            return call
        new = rewriter(call, matches)
        return new if new is call or name_of(new) else named_as(new, call)

    return rewrite_bindings(mod, _pattern_ops(pattern), rewrite)


def _pattern_ops(pattern: DFPattern) -> tuple:
    """The operator name a call pattern matches."""
    return (str(pattern.op.expr.name),)


def _squeeze_as_reshape(call: relax.Call, source) -> relax.Expr:
    x = call.args[0]
    shape = _static(call)
    bound = source(x) if isinstance(x, relax.Var) else None
    # torch's decomposed LocalResponseNorm keeps its squeeze: the accel.lrn entry reads it so
    if shape is None or _static(x) is None or (
            isinstance(bound, relax.Call) and
            getattr(bound.op, "name", "") == "relax.nn.avg_pool3d"):
        return call
    return named_as(relax.op.reshape(x, shape), call)




def _conv1d_rows(call: relax.Call) -> Optional[relax.Expr]:
    """conv1d(x, W) of [N, C, L] as the conv2d of [N, C, 1, L] (4-D out), or None."""
    a = call.attrs
    x, weight = call.args
    if str(a.data_layout) != "NCW" or str(a.kernel_layout) != "OIW" or \
            str(a.out_layout) != "NCW" or _static(x) is None or _static(call) is None:
        return None
    if is_constant(weight):
        value = constant_value(weight)
        weight = relax.const(np.ascontiguousarray(value[:, :, None, :]), str(value.dtype))
    else:
        weight = relax.op.expand_dims(weight, axis=[2])
    left, right = _int_list(a.padding)
    return named_as(relax.op.nn.conv2d(
        relax.op.expand_dims(x, axis=[2]), weight, strides=(1, _int_list(a.strides)[0]),
        padding=(0, left, 0, right), dilation=(1, _int_list(a.dilation)[0]),
        groups=int(a.groups), data_layout="NCHW", kernel_layout="OIHW", out_layout="NCHW",
        out_dtype=str(call.ty.dtype)), call)  # ONNX's import leaves out_dtype unset


def _conv1d_as_conv2d(call: relax.Call, source) -> relax.Expr:
    rows = _conv1d_rows(call)
    return call if rows is None else named_as(relax.op.squeeze(rows, axis=[2]), call)


# torch's Conv1d with a bias: add(conv1d, reshape(b, [1, K, 1])), rewritten as one so that the
# bias meets the conv2d as a 2-D conv's does (the CONV's bias on the SDP, in every precision)
_C1_CONV = is_op("relax.nn.conv1d")(wildcard(), wildcard())
_C1_B = is_const()
_C1_BIASED = is_op("relax.add")(_C1_CONV, _C1_B | is_op("relax.reshape")(_C1_B, wildcard()))


def _conv1d_bias_folded(readers: dict, bound: dict):
    def rewriter(expr: relax.Expr, matches) -> relax.Expr:
        conv = matches[_C1_CONV]
        bias = constant_value(matches[_C1_B])
        out = _static(conv)
        var = bound.get(conv)
        rows = _conv1d_rows(conv) if var is not None and readers.get(var, 0) == 1 else None
        if rows is None or bias.size != out[1] or _static(expr) != out or \
                _static(expr.args[1]) not in ([1, out[1], 1], [out[1], 1]) or \
                bias.dtype != np.dtype(str(conv.ty.dtype)):
            return expr
        biased = relax.op.add(rows, relax.const(bias.reshape(1, out[1], 1, 1)))
        return relax.op.squeeze(named_as(biased, expr), axis=[2])
    return rewriter


_POOLS_2D = {"relax.nn.max_pool1d": relax.op.nn.max_pool2d,
             "relax.nn.avg_pool1d": relax.op.nn.avg_pool2d}


def _pool1d_as_pool2d(call: relax.Call, source) -> relax.Expr:
    a = call.attrs
    if str(a.layout) != "NCW" or str(a.out_layout) != "NCW" or _static(call.args[0]) is None:
        return call
    left, right = _int_list(a.padding)
    rows = _POOLS_2D[call.op.name](
        relax.op.expand_dims(call.args[0], axis=[2]), pool_size=(1, _int_list(a.pool_size)[0]),
        strides=(1, _int_list(a.strides)[0]), padding=(0, left, 0, right),
        dilation=(1, _int_list(a.dilation)[0]), ceil_mode=bool(a.ceil_mode),
        count_include_pad=bool(a.count_include_pad), layout="NCHW", out_layout="NCHW")
    return named_as(relax.op.squeeze(named_as(rows, call), axis=[2]), call)


def conv1d_as_conv2d(mod: tvm.IRModule) -> tvm.IRModule:
    """conv1d of [N, C, L] (with its bias, where one is added) -> the conv2d of [N, C, 1, L]
    with kernel [K, C/g, 1, k] (the same products in the same order), between an expand_dims
    and a squeeze, which :func:`squeezes_as_reshapes` then makes the reshapes of the same
    bytes; the 1-D pools of ONNX's import likewise (torch's frontend imports them in this form
    already)."""
    mod = _rewrite_with_readers(mod, _C1_BIASED, _conv1d_bias_folded)
    mod = rewrite_bindings(mod, tuple(_POOLS_2D), _pool1d_as_pool2d)
    return rewrite_bindings(mod, ("relax.nn.conv1d",), _conv1d_as_conv2d)


def _mean_of_3d(call: relax.Call, source) -> relax.Expr:
    x = call.args[0]
    shape, out = _static(x), _static(call)
    axes = call.attrs.axis
    if shape is None or out is None or len(shape) != 3 or axes is None or len(axes) != 1 or \
            str(x.ty.dtype) not in ("float32", "float16"):
        return call
    axis = int(axes[0]) % 3
    # a sum over the last axis is the channel sum of tokens (an L2 norm's, an RMS norm's),
    # which the normalisation composites match whole: only a sum over the tokens pools
    if axis == 0 or (call.op.name == "relax.sum" and axis != 1):
        return call
    n, a, b = shape
    length = shape[axis]
    if axis == 1:  # [N, T, C] tokens: their channels' means over the tokens
        x, a, b = relax.op.permute_dims(x, [0, 2, 1]), b, a
    # the max: PointNet's symmetric function over the points, a 1-D network's global max
    # pool (global_max_pools then gives the PDP its windows)
    reduce = relax.op.max if call.op.name == "relax.max" else relax.op.mean
    pooled = reduce(relax.op.reshape(x, [n, a, 1, b]), axis=[2, 3], keepdims=False)
    if call.op.name == "relax.sum":  # the mean times the count: the SDP's scale
        pooled = relax.op.multiply(named_as(pooled, call),
                                   relax.const(np.array(length, str(call.ty.dtype))))
    return pooled if out == [n, a] else relax.op.reshape(named_as(pooled, call), out)


def means_of_3d_tensors(mod: tvm.IRModule) -> tvm.IRModule:
    """A mean or max over one axis of [N, C, L] (a 1-D network's global average or max,
    PointNet's max over its points), or a mean (or sum, or max) over the tokens of [N, T, C]
    (MLP-Mixer's, a ViT's average-pool head, a text encoder's mean pooling, written as a
    sum over the tokens divided by their count) -> the PDP's global average (or max) of
    [N, C, 1, L] (of the tokens transposed to [N, C, T] first), times L for a sum, keepdims a
    reshape after it."""
    return rewrite_bindings(mod, ("relax.mean", "relax.sum", "relax.max"), _mean_of_3d)


# A batch norm (and its activation) of [N, C, L] between the reshapes that read a conv1d's
# output as [N, C, 1, L] and back (a 1-D network's conv + BN + ReLU: PointNet's shared MLP,
# after conv1d_as_conv2d), or before the [N, C, 1, L] of a pool (means_of_3d_tensors): the
# same per-channel ops of the 4-D tensor, so the conv's chain takes them (one int8 rounding
# of the conv's output, after the batch norm, where the 3-D batch norm was a layer of its own
# reading the conv's output rounded to int8 before its scale and shift: 1.8 dB on PointNet).
_UNIT_ACTIVATIONS = ("relax.nn.relu", "relax.nn.silu", "relax.nn.gelu", "relax.sigmoid",
                     "relax.tanh", "relax.nn.leakyrelu", "relax.clip")


def _norm_between_reshapes(readers: dict):
    def rewrite(call: relax.Call, source) -> relax.Expr:
        def alone(var):  # bound to a value that this chain alone reads
            value = source(var) if isinstance(var, relax.Var) else None
            return value if value is not None and readers.get(var, 0) == 1 else None

        act = alone(call.args[0])
        item = act.args[0] if op_name(act) in _UNIT_ACTIVATIONS else act
        item = alone(item) if item is not act else item
        if act is None or item is None or not isinstance(item, relax.TupleGetItem) or \
                int(item.index) != 0:
            return call
        norm = alone(item.tuple_value)
        if op_name(norm) != "relax.nn.batch_norm" or bool(norm.attrs.training) or \
                not all(is_constant(a) for a in norm.args[1:]):
            return call
        squeezed = alone(norm.args[0])
        if op_name(squeezed) != "relax.reshape":
            return call
        y = squeezed.args[0]
        shape, flat = _static(y), _static(squeezed)
        if shape is None or flat is None or _static(call) != shape or len(shape) != 4 or \
                len(flat) != 3 or shape[:2] != flat[:2] or shape[2] != 1 or \
                int(norm.attrs.axis) % 3 != 1:
            return call
        out = relax.TupleGetItem(relax.Call(norm.op, [y, *norm.args[1:]], norm.attrs,
                                            norm.ty_args, norm.span), 0)
        if act is not item:
            out = relax.Call(act.op, [out, *act.args[1:]], act.attrs, act.ty_args, act.span)
        return out
    return rewrite


def norms_between_unit_reshapes(mod: tvm.IRModule) -> tvm.IRModule:
    """reshape(act(batch_norm(reshape(y, [N, C, L]))[0]), [N, C, 1, L]) with y of
    [N, C, 1, L] -> act(batch_norm(y)[0]) over the channels of y (act: a unary activation,
    or none; each intermediate read by the next op alone)."""
    readers: Dict[relax.Var, int] = {}
    for _, function in _graph_functions(mod):
        readers.update(read_counts(function))
    return rewrite_bindings(mod, ("relax.reshape",), _norm_between_reshapes(readers))


def _channel_reduction(call: relax.Call, source) -> relax.Expr:
    x = call.args[0]
    shape, out = _static(x), _static(call)
    axes = call.attrs.axis
    if shape is None or out is None or len(shape) != 4 or axes is None or len(axes) != 1 or \
            int(axes[0]) % 4 != 1 or shape[1] < 2 or \
            str(x.ty.dtype) not in ("float32", "float16"):
        return call
    n, c, h, w = shape
    dtype = str(x.ty.dtype)
    # a GRN's mean of its channels' norms over H and W stays: its pattern (chains.grn) reads it
    value = source(x) if isinstance(x, relax.Var) else x
    if call.op.name == "relax.mean" and op_name(value) in ("relax.sqrt", "relax.power") and \
            op_name(source(value.args[0]) if isinstance(value.args[0], relax.Var)
                    else value.args[0]) == "relax.sum":
        return call
    if call.op.name == "relax.max":
        # halves of the channels (overlapping by one where C is odd: max takes a value twice
        # as readily as once), BDMA ranges, their element-wise max on the SDP, until one
        while c > 1:
            k = (c + 1) // 2
            x = relax.op.maximum(
                relax.op.strided_slice(x, axes=[1], begin=[0], end=[k]),
                relax.op.strided_slice(x, axes=[1], begin=[c - k], end=[c]))
            c = k
        reduced = x
    else:  # the sum: a convolution of ones to one channel; the mean: of 1 / C
        value = 1.0 / c if call.op.name == "relax.mean" else 1.0
        reduced = relax.op.nn.conv2d(x, relax.const(np.full((1, c, 1, 1), value, dtype)),
                                     data_layout="NCHW", kernel_layout="OIHW",
                                     out_layout="NCHW", out_dtype=dtype)
    return reduced if out == [n, 1, h, w] else \
        relax.op.reshape(named_as(reduced, call), out)


def _spatial_sum(roots: set):
    def rewrite(call: relax.Call, source) -> relax.Expr:
        x = call.args[0]
        shape, axes = _static(x), call.attrs.axis
        if shape is None or len(shape) != 4 or axes is None or \
                sorted(int(a) % 4 for a in axes) != [2, 3] or x in roots or \
                str(x.ty.dtype) not in ("float32", "float16") or shape[2] * shape[3] < 2:
            return call
        mean = named_as(relax.op.mean(x, axis=[2, 3], keepdims=bool(call.attrs.keepdims)), call)
        return relax.op.multiply(mean, relax.const(float(shape[2] * shape[3]), str(x.ty.dtype)))
    return rewrite


def spatial_sums_as_means(mod: tvm.IRModule) -> tvm.IRModule:
    """A sum over H and W of NCHW data (SimAM's energy) -> its mean (the PDP's global average)
    times H W (the SDP's scale): within a rounding of the sum. Not a sum whose root is taken
    (a GRN's L2 norm: its pattern, chains.grn, reads the sum)."""
    result = tvm.IRModule(mod.functions, attrs=mod.attrs)
    for gv, function in _graph_functions(mod):
        table = _bindings_table(function)
        roots = {table[a].args[0] for v in table.values()
                 if op_name(v) in ("relax.sqrt", "relax.power") for a in v.args
                 if isinstance(a, relax.Var) and op_name(table.get(a)) == "relax.sum"}
        part = rewrite_bindings(tvm.IRModule({gv: function}), ("relax.sum",),
                                _spatial_sum(roots))
        result[gv] = part[gv]
    return result


def channel_reductions(mod: tvm.IRModule) -> tvm.IRModule:
    """A sum, mean or max over the channels of NCHW data (CBAM's spatial attention reads the
    mean and the max; a one-channel map's sum) -> a 1x1 convolution to one channel of ones
    (the sum: exact) or of 1 / C (the mean: products summed, fp32's rounding), or (the max,
    exact) a tree of the SDP's element-wise max over halves of the channels, each half a
    BDMA channel range."""
    return rewrite_bindings(mod, ("relax.sum", "relax.mean", "relax.max"), _channel_reduction)


def _edge_padded(x: relax.Expr, axis: int, size: int) -> relax.Expr:
    """x with its first and last rows (axis 2) or columns (axis 3) repeated once outside:
    two slices and a concat, BDMA copies."""
    return relax.op.concat([relax.op.strided_slice(x, axes=[axis], begin=[0], end=[1]), x,
                            relax.op.strided_slice(x, axes=[axis], begin=[size - 1],
                                                   end=[size])], axis=axis)


def _float_linear_resize(call: relax.Call) -> bool:
    """Whether ``call`` is a linear resize2d of 4-D NCHW float data to its own type without a
    region of interest, with static shapes: what both rewrites of a linear resize read."""
    a, x = call.attrs, call.args[0]
    shape, out = _static(x), _static(call)
    return str(a.method) == "linear" and str(a.layout) == "NCHW" and shape is not None and \
        out is not None and len(shape) == 4 and \
        all(float(getattr(v, "value", v)) == 0.0 for v in a.roi) and \
        str(x.ty.dtype) in ("float32", "float16") and str(call.ty.dtype) == str(x.ty.dtype)


def _bilinear_as_deconv(call: relax.Call, source) -> relax.Expr:
    a = call.attrs
    x = call.args[0]
    shape, out = _static(x), _static(call)
    if not _float_linear_resize(call) or \
            str(a.coordinate_transformation_mode) not in ("half_pixel", "pytorch_half_pixel"):
        return call
    factors = [o // i if o % i == 0 else 0 for o, i in zip(out[2:], shape[2:])]
    if any(f < 2 or f % 2 for f in factors) or min(shape[2:]) < 2:
        return call
    dtype = str(x.ty.dtype)
    # the triangle (tent) kernel of factor s at half-pixel centres, 2s taps: 1 - |(t + 1/2)/s - 1|
    taps = [1.0 - np.abs((np.arange(2 * f) + 0.5) / f - 1.0) for f in factors]
    kernel = np.outer(*taps).astype(dtype)
    weight = np.ascontiguousarray(np.broadcast_to(kernel, (shape[1], 1) + kernel.shape))
    padded = _edge_padded(_edge_padded(x, 2, shape[2]), 3, shape[3])
    (fh, fw) = factors
    return relax.op.nn.conv2d_transpose(
        padded, relax.const(weight), strides=(fh, fw),
        padding=(3 * fh // 2, 3 * fw // 2, 3 * fh // 2, 3 * fw // 2), groups=shape[1],
        data_layout="NCHW", kernel_layout="IOHW", out_layout="NCHW", out_dtype=dtype)


def bilinear_upsampling_as_deconvolution(mod: tvm.IRModule) -> tvm.IRModule:
    """resize2d, linear, half-pixel centres (torch's bilinear with align_corners=False, ONNX's
    Resize linear), by an even integer factor s per axis (FPN and segmentation heads' x2, x4,
    x8) -> the depthwise transposed convolution of the tent kernel of 2s taps, stride s,
    cropping 3s/2 each side, of x with its border rows and columns repeated once (the
    resize's clamped edges): the same weighted sums, which the CONV + RUBIK deconvolution
    runs (products summed in another order: fp32's rounding, not exact)."""
    return rewrite_bindings(mod, ("relax.image.resize2d",), _bilinear_as_deconv)


def _linear_resize_matrix(in_size: int, out_size: int, mode: str) -> Optional[np.ndarray]:
    """[out_size, in_size]: the weights TVM's linear resize2d gives each input index along one
    axis (at relax_exprs.resize_coordinates' x, the lower index floor(x) and the next one, both
    clamped to the axis), or None for a coordinate mode it has no linear form of here."""
    # tf_half_pixel_for_nn is a nearest resize's mode (ONNX's): not read as a linear one
    x = None if mode == "tf_half_pixel_for_nn" else resize_coordinates(in_size, out_size, mode)
    if x is None:
        return None
    low = np.floor(x)
    frac = (x - low).astype(np.float64)
    low = low.astype(np.int64)
    matrix = np.zeros((out_size, in_size))
    rows = np.arange(out_size)
    np.add.at(matrix, (rows, np.clip(low, 0, in_size - 1)), 1.0 - frac)
    np.add.at(matrix, (rows, np.clip(low + 1, 0, in_size - 1)), frac)
    return matrix


def _resize_as_dense(call: relax.Call, source) -> relax.Expr:
    a = call.attrs
    x = call.args[0]
    shape, out = _static(x), _static(call)
    if not _float_linear_resize(call):
        return call
    dtype, mode = str(x.ty.dtype), str(a.coordinate_transformation_mode)
    matrices = [_linear_resize_matrix(i, o, mode) for i, o in zip(shape[2:], out[2:])]
    if any(m is None for m in matrices):
        return call

    def along_last(y, matrix):  # y [..., n] -> y A^T [..., m]: a dense layer of A's rows
        return named_as(relax.op.matmul(y, relax.op.permute_dims(
            relax.const(matrix.astype(dtype)), [1, 0])), call)
    swap = [0, 1, 3, 2]
    y = x
    if shape[2] != out[2] or not np.array_equal(matrices[0], np.eye(shape[2])):
        y = named_as(relax.op.permute_dims(along_last(
            named_as(relax.op.permute_dims(y, swap), call), matrices[0]), swap), call)
    if shape[3] != out[3] or not np.array_equal(matrices[1], np.eye(shape[3])):
        y = along_last(y, matrices[1])
    return y


def linear_resizes_as_dense_layers(mod: tvm.IRModule) -> tvm.IRModule:
    """resize2d, linear, of a coordinate mode or factor the deconvolution does not take
    (torch's bilinear with align_corners=True, ONNX's asymmetric, a factor of 3 or a
    non-integer one: segmentation heads, resized feature maps) -> its two separable passes,
    each a dense layer whose weights are the interpolation matrix of one axis (each output
    index's two weights on the input indices it reads, TVM's own in float32): along H on the
    transposed map, then along W. The same weighted sums (the products summed with the other
    weights' zeros, in another order: fp32's rounding, not exact); the CONV spends the
    interpolation matrix's every weight, zeros included (the input size along the axis per
    output), where the host would split the function. After
    :func:`bilinear_upsampling_as_deconvolution`, which takes what it can."""
    return rewrite_bindings(mod, ("relax.image.resize2d",), _resize_as_dense)


def _grouped_norm(call: relax.Call, source) -> relax.Expr:
    a = call.attrs
    x, gamma, beta = call.args
    shape = _static(x)
    if shape is None or len(shape) not in (3, 4) or int(a.channel_axis) % len(shape) != 1 or \
            str(x.ty.dtype) not in ("float32", "float16") or \
            (bool(a.scale) and not is_constant(gamma)) or \
            (bool(a.center) and not is_constant(beta)):
        return call
    axes = sorted(int(v) % len(shape) for v in a.axes)
    spatial = list(range(2, len(shape)))
    # TVM's import of torch's instance norm gives axes [0, 2, 3]: the same statistics as
    # PyTorch's per-image ones for one image only
    if axes != spatial and not (axes == [0] + spatial and shape[0] == 1):
        return call
    groups = int(a.num_groups) if call.op.name == "relax.nn.group_norm" else shape[1]
    if shape[1] % groups:
        return call
    dtype = str(x.ty.dtype)
    n, c = shape[0], shape[1]
    length = int(np.prod(shape[1:])) // groups
    normed = relax.op.nn.layer_norm(
        relax.op.reshape(x, [n, groups, length]), relax.const(np.ones(length, dtype)),
        relax.const(np.zeros(length, dtype)), axes=[-1], epsilon=float(a.epsilon),
        center=False, scale=False)
    out = relax.op.reshape(named_as(normed, call), shape)
    per_channel = [1, c] + [1] * (len(shape) - 2)
    if bool(a.scale):
        out = relax.op.multiply(named_as(out, call), relax.const(
            constant_value(gamma).astype(dtype).reshape(per_channel)))
    if bool(a.center):
        out = relax.op.add(named_as(out, call), relax.const(
            constant_value(beta).astype(dtype).reshape(per_channel)))
    return out


def grouped_norms_as_layer_norms(mod: tvm.IRModule) -> tvm.IRModule:
    """group_norm(x, G) (and instance_norm, G = C) of [N, C, H, W] or [N, C, L] -> the layer
    norm of each group's values, reshape(x, [N, G, C H W / G]) over its last axis (the same
    statistics; the layer norm's engine passes), reshaped back, then gamma and beta per channel
    (the SDP's scale and shift)."""
    return rewrite_bindings(mod, ("relax.nn.group_norm", "relax.nn.instance_norm"),
                            _grouped_norm)


def _norm_over_unit_axes(call: relax.Call, source) -> relax.Expr:
    a = call.attrs
    x, gamma, beta = call.args
    shape = _static(x)
    if shape is None or len(shape) != 4 or str(x.ty.dtype) not in ("float32", "float16"):
        return call
    axes = sorted(int(v) % 4 for v in a.axes)
    if axes == [1] or axes[0] != 1 or any(shape[i] != 1 for i in axes[1:]) or \
            not is_constant(gamma) or not is_constant(beta):
        return call
    c = shape[1]
    params = [constant_value(p) for p in (gamma, beta)]
    if any(p.size != c for p in params):
        return call
    gamma, beta = (relax.const(np.ascontiguousarray(p.reshape(c)), str(p.dtype)) for p in params)
    return relax.op.nn.layer_norm(x, gamma, beta, axes=[1], epsilon=float(a.epsilon),
                                  center=bool(a.center), scale=bool(a.scale))


def _as_channels(x: relax.Expr, source) -> Optional[relax.Expr]:
    """A 5-D [N, M, C, H, W] tensor as the 4-D [N, M C, H, W] of the same bytes: the tensor
    it was reshaped from where that is it, else a reshape of it."""
    shape = _static(x)
    merged = [shape[0], shape[1] * shape[2], shape[3], shape[4]]
    bound = source(x) if isinstance(x, relax.Var) else None
    if bound is not None and op_name(bound) == "relax.reshape" and \
            _static(bound.args[0]) == merged:
        return bound.args[0]
    return relax.op.reshape(x, merged)


def _branch_stack_op(call: relax.Call, source) -> relax.Expr:
    x = call.args[0]
    shape, out = _static(x), _static(call)
    if shape is None or out is None or len(shape) != 5 or \
            str(x.ty.dtype) not in ("float32", "float16"):
        return call
    n, m, c, h, w = shape
    name = call.op.name
    if name == "relax.sum":
        axes = call.attrs.axis
        if axes is None or [int(a) % 5 for a in axes] != [1] or m > 16:
            return call
        merged = _as_channels(x, source)
        # the branches' sum in the reduction's order, ((b0 + b1) + b2) ...: the same bits
        total = relax.op.strided_slice(merged, axes=[1], begin=[0], end=[c])
        for i in range(1, m):
            total = relax.op.add(total, relax.op.strided_slice(merged, axes=[1], begin=[i * c],
                                                               end=[(i + 1) * c]))
        return total if out == [n, c, h, w] else relax.op.reshape(named_as(total, call), out)
    if name == "relax.nn.softmax":
        if int(call.attrs.axis) % 5 != 1 or (h, w) != (1, 1):
            return call
        rows = relax.op.nn.softmax(relax.op.reshape(x, [n, m, c]), axis=1)
        return relax.op.reshape(named_as(rows, call), shape)
    # multiply / add of [N, M, C, H, W] by [N, M, C, H, W] or [N, M, C, 1, 1]
    y = call.args[1]
    other = _static(y)
    if other is None or len(other) != 5 or other[:3] != shape[:3] or \
            other[3:] not in (shape[3:], [1, 1]) or out != shape:
        return call
    merged = relax.Call(call.op, [_as_channels(x, source), _as_channels(y, source)])
    return relax.op.reshape(named_as(merged, call), shape)


def branch_stacks_as_channels(mod: tvm.IRModule) -> tvm.IRModule:
    """The branches of a selective-kernel block (SKNet, ResNeSt written with a stack) as one
    5-D [N, M, C, H, W] tensor: its sum over M the adds of the M channel ranges of
    [N, M C, H, W], its softmax over M of [N, M, C, 1, 1] the softmax over axis 1 of [N, M, C],
    its product (or sum) with the attention [N, M, C, 1, 1] the per-channel one of the 4-D
    views: the same values, on the SDP and BDMA copies."""
    return rewrite_bindings(mod, ("relax.sum", "relax.nn.softmax", "relax.multiply",
                                  "relax.add"), _branch_stack_op)


def norms_over_unit_axes(mod: tvm.IRModule) -> tvm.IRModule:
    """layer_norm over [C, 1, 1] of [N, C, 1, 1] (GCNet's context transform normalises its
    pooled vector so: nn.LayerNorm([C, 1, 1])) -> the same norm over axis 1, the channels of
    NCHW data that the engine passes normalise (the unit axes add no values: the same
    statistics), gamma and beta as [C]."""
    return rewrite_bindings(mod, ("relax.nn.layer_norm",), _norm_over_unit_axes)


# x * 1 and x + 0 of constants that do not broadcast x to more values: torch's ONNX export of
# GroupNorm gives its InstanceNormalization a scale of ones and a bias of zeros (per group, in a
# layout no engine reads), which then only copy x
_UNIT_X, _UNIT_C = wildcard(), is_const()
_UNIT_OPERAND = _UNIT_C | is_op("relax.reshape")(_UNIT_C, wildcard())
_UNIT_TIMES = is_op("relax.multiply")(_UNIT_X, _UNIT_OPERAND) | \
    is_op("relax.multiply")(_UNIT_OPERAND, _UNIT_X)
_UNIT_PLUS = is_op("relax.add")(_UNIT_X, _UNIT_OPERAND) | \
    is_op("relax.add")(_UNIT_OPERAND, _UNIT_X)


def _unit(identity: float):
    def rewrite(expr: relax.Expr, matches) -> relax.Expr:
        x, value = matches[_UNIT_X], constant_value(matches[_UNIT_C])
        if _static(x) is None or _static(x) != _static(expr) or \
                str(x.ty.dtype) != str(expr.ty.dtype) or not np.all(value == identity):
            return expr
        return x
    return rewrite


def unit_affines(mod: tvm.IRModule) -> tvm.IRModule:
    """x * ones -> x and x + zeros -> x, where the constant broadcasts x to no more values."""
    return _rewrite(_rewrite(mod, _UNIT_TIMES, _unit(1.0)), _UNIT_PLUS, _unit(0.0))


def _square_as_product(call: relax.Call, source) -> relax.Expr:
    x, exponent = call.args
    if not is_constant(exponent) or is_constant(x) or \
            np.asarray(constant_value(exponent)).reshape(-1).tolist() != [2.0] or \
            _static(x) is None or _static(x) != _static(call) or \
            str(getattr(x.ty, "dtype", None)) != "float32":
        return call
    # F.normalize's power(abs(x), 2) stays: its pattern (chains.l2_normalize) reads it
    value = source(x) if isinstance(x, relax.Var) else x
    if isinstance(value, relax.Call) and getattr(value.op, "name", None) == "relax.abs":
        return call
    return relax.op.multiply(x, x)


def squares_as_products(mod: tvm.IRModule) -> tvm.IRModule:
    """power(x, 2) -> x * x (torch's ``x ** 2`` and ``x.pow(2)``, ONNX's Pow of 2: the same
    product, which torch's x ** 2 computes): the SDP's element-wise multiplier, where no
    engine has a power."""
    return rewrite_bindings(mod, ("relax.power",), _square_as_product)


def _channel_broadcast(call: relax.Call, source) -> relax.Expr:
    a, b = call.args
    shapes = [_static(a), _static(b)]
    out = _static(call)
    if out is None or len(out) != 4 or out[1] == 1 or None in shapes or \
            any(len(shape) != 4 for shape in shapes) or \
            str(call.ty.dtype) not in ("float32", "float16") or \
            is_constant(a) or is_constant(b):
        return call
    wide, narrow = (a, b) if shapes[0] == out else (b, a)
    if _static(wide) != out or _static(narrow) != [out[0], 1] + out[2:]:
        return call
    dtype = str(call.ty.dtype)
    copies = relax.op.nn.conv2d(narrow, relax.const(np.ones((out[1], 1, 1, 1), dtype)),
                                data_layout="NCHW", kernel_layout="OIHW", out_layout="NCHW",
                                out_dtype=dtype)
    return relax.Call(call.op, [wide, named_as(copies, call)], call.attrs)


def channel_broadcasts_as_convolutions(mod: tvm.IRModule) -> tvm.IRModule:
    """x * m and x + m with x [N, C, H, W] and a computed m [N, 1, H, W] (a spatial attention
    map: CBAM's, BiSeNet's) -> the same with m copied to C channels by a 1x1 convolution of
    ones (each output one product by 1: the copy exactly), whose output the SDP's element-wise
    unit reads as it reads any tensor of x's shape."""
    return rewrite_bindings(mod, ("relax.multiply", "relax.add"), _channel_broadcast)


def _concat_copies(x: relax.Expr, repeats: list, call: relax.Expr) -> relax.Expr:
    out = x
    for axis, count in enumerate(repeats):
        if count > 1:
            out = named_as(relax.op.concat([out] * count, axis=axis), call)
    return out


def _tile_as_concat(call: relax.Call, source) -> relax.Expr:
    shape = _static(call.args[0])
    if shape is None or _static(call) is None:
        return call
    repeats = _int_list(call.attrs.repeats)
    repeats = [1] * (len(shape) - len(repeats)) + repeats  # numpy's rule for fewer repeats
    if len(repeats) != len(shape):
        return call  # more repeats than axes: the output gains axes
    return _concat_copies(call.args[0], repeats, call)


# TVM's ONNX importer writes Tile as a call_tir of TOPI's tile kernel, its repeats baked in:
# each output axis is its input axis times the repeat.
_TILE_X = wildcard()
_TILE_KERNEL = is_call_tir("tile", [_TILE_X])


def _tile_kernel_as_concat(expr: relax.Expr, matches) -> relax.Expr:
    shape, out = _static(matches[_TILE_X]), _static(expr)
    if shape is None or out is None or len(shape) != len(out) or \
            any(n == 0 or m % n for n, m in zip(shape, out)):
        return expr
    return _concat_copies(matches[_TILE_X], [m // n for n, m in zip(shape, out)], expr)


def tiles_as_concats(mod: tvm.IRModule) -> tvm.IRModule:
    """tile(x, repeats) (torch's ``x.repeat``: a grey image made three channels for an RGB
    backbone; ONNX's Tile) -> x concatenated with itself ``repeats[i]`` times along each axis
    i: the same values in the same places, copies the BDMA makes."""
    return _rewrite(rewrite_bindings(mod, ("relax.tile",), _tile_as_concat), _TILE_KERNEL,
                    _tile_kernel_as_concat)


def squeezes_as_reshapes(mod: tvm.IRModule) -> tvm.IRModule:
    """squeeze(x) and expand_dims(x) of static shapes -> reshape(x, their shape), binding by
    binding (:func:`rewrite_bindings`)."""
    return rewrite_bindings(mod, ("relax.squeeze", "relax.expand_dims"), _squeeze_as_reshape)


def _pool_padding_as_pad(call: relax.Call, source) -> relax.Expr:
    attrs = call.attrs
    padding = [int(v) for v in attrs.padding]
    if not any(padding) or not bool(attrs.count_include_pad) or bool(attrs.ceil_mode) or \
            str(attrs.layout) != "NCDHW" or str(attrs.out_layout) != "NCDHW" or \
            _static(call.args[0]) is None or len(padding) != 6:
        return call
    widths = [0, 0, 0, 0] + [w for axis in range(3) for w in (padding[axis], padding[axis + 3])]
    padded = named_as(relax.op.nn.pad(call.args[0], widths, pad_value=0.0), call)
    return named_as(relax.op.nn.avg_pool3d(
        padded, [int(v) for v in attrs.pool_size], [int(v) for v in attrs.strides], 0,
        [int(v) for v in attrs.dilation], False, True, "NCDHW", "NCDHW"), call)


def pool_padding_as_pad(mod: tvm.IRModule) -> tvm.IRModule:
    """avg_pool3d(x) counting its zero padding (count_include_pad) -> avg_pool3d of x padded
    with zeros first, no padding: the same averages, exactly (the zeros it counts are the
    ones it reads). TVM's ONNX importer writes LRN's channel window so; torch's
    LocalResponseNorm pads first, the form the accel.lrn entry reads (Caffe2's AlexNet and
    ZFNet exports)."""
    return rewrite_bindings(mod, ("relax.nn.avg_pool3d",), _pool_padding_as_pad)


_ROWS_X = wildcard()
_ROWS_SOFTMAX = is_op("relax.nn.softmax")(is_op("relax.reshape")(_ROWS_X, wildcard()))
_ROWS_BACK = is_op("relax.reshape")(_ROWS_SOFTMAX, wildcard())


def _softmax_of_rows(expr: relax.Expr, matches) -> relax.Expr:
    softmax = matches[_ROWS_SOFTMAX]
    x = matches[_ROWS_X]
    shape, rows, out = _static(x), _static(softmax), _static(expr)
    if shape is None or rows is None or out is None or not shape or \
            int(softmax.attrs.axis) % len(rows) != len(rows) - 1 or rows[-1] != shape[-1] or \
            str(getattr(x.ty, "dtype", "")) != str(getattr(softmax.ty, "dtype", "")):
        return expr
    result = named_as(relax.op.nn.softmax(x, axis=-1), softmax)
    return result if out == shape else relax.op.reshape(result, out)


def softmax_rows(mod: tvm.IRModule) -> tvm.IRModule:
    """reshape(softmax(reshape(x, [..., L]), axis=-1), S) with x [..., L] ->
    softmax(x, axis=-1) (reshaped to S where S is not x's shape)."""
    return _rewrite(mod, _ROWS_BACK, _softmax_of_rows)


_SWAPPED_FROM = wildcard()
_SWAPPED_X = is_op("relax.reshape")(_SWAPPED_FROM, wildcard()) | wildcard()
_SWAP = is_op("relax.permute_dims")(_SWAPPED_X)


def _two_axis_swap(expr: relax.Expr, matches) -> relax.Expr:
    x = matches[_SWAPPED_X]
    shape, out = _static(x), _static(expr)
    if shape is None or out is None:
        return expr
    axes = list(range(len(shape)))[::-1] if expr.attrs.axes is None \
        else [a % len(shape) for a in _int_list(expr.attrs.axes)]
    long = [a for a in range(len(shape)) if shape[a] > 1]
    # a constant's transpose (a dense weight's) is folded where it is read
    if len(shape) < 3 or is_constant(x) or len(long) != 2 or \
            [a for a in axes if shape[a] > 1] != long[::-1] or \
            (len(shape) == 3 and axes == [0, 2, 1] and shape[0] == 1):
        return expr
    # reshape(reshape(y)) is reshape(y): read y where x is a reshape of it
    source = matches[_SWAPPED_FROM] if _SWAPPED_FROM in matches else None
    data = x if source is None or _static(source) is None else source
    rows = [1, shape[long[0]], shape[long[1]]]
    data = data if _static(data) == rows else relax.op.reshape(data, rows)
    swapped = named_as(relax.op.permute_dims(data, [0, 2, 1]), expr)
    return relax.op.reshape(swapped, out)


def two_axis_swaps(mod: tvm.IRModule) -> tvm.IRModule:
    """permute_dims(x) that swaps x's only two axes longer than 1 ->
    reshape(permute_dims(reshape(x, [1, R, S]), [0, 2, 1]), out)."""
    return _rewrite(mod, _SWAP, _two_axis_swap)


#: The exact rewrites onto the engines' ops, in the order the partitioner applies them (a
#: shared constant reshape first: ``c - x`` then sees the constant; the channels-last
#: sandwiches before a permute before a flatten is folded into the dense layer's weight;
#: the layout ops that name the same bytes before the reshapes to a tensor's own shape go).
EXACT_REWRITES = (identity_casts, identity_reshapes, constant_broadcasts_and_takes,
                  ranked_constants, sliced_takes, gathers_as_slices, shared_constant_reshapes,
                  pool_padding_as_pad,
                  conv1d_as_conv2d, squeezes_as_reshapes, tiles_as_concats, means_of_3d_tensors,
                  norms_between_unit_reshapes,
                  channel_reductions, spatial_sums_as_means, flips_as_copies,
                  leading_axis_slices,
                  same_values_broadcasts, per_row_products, column_products, unguarded_softmaxes,
                  computed_matmuls,
                  bilinear_upsampling_as_deconvolution, linear_resizes_as_dense_layers,
                  grouped_norms_as_layer_norms,
                  norms_over_unit_axes, branch_stacks_as_channels,
                  unit_affines, softplus_from_formula, channel_broadcasts_as_convolutions,
                  softmax_rows, two_axis_swaps, identity_reshapes, max_pool_cascades,
                  global_max_pools,
                  space_to_depth_convs, wide_kernel_convs, wide_stride_convs,
                  channels_last_sandwiches,
                  permuted_flattens, constant_minus_tensor, tensor_minus_tensor,
                  negatives_as_scales,
                  layer_norm_shifts_into_convs, affines_into_convs, affines_into_next_convs,
                  squares_as_products)
