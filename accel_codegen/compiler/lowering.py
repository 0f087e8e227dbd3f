"""From matched Relax ops to accelerator layers: the one interpretation that the partitioner's
checks and the code generator share.

A composite is a chain: a data input flows through CONV or dense, then bias, batch norm, an
element-wise op with a second tensor, an activation, and pooling, each optional. ``lower_chain``
reads the ops' roles from the chain's annotated pattern (:mod:`.chains`) and returns a
:class:`Layer` of engine op specs, or raises :class:`Unsupported` with the reason in words
(dtype, layout, an attribute the engine does not honour, a hardware limit, ...).
Hardware limits are not restated here: the layer is costed by the C library, whose validation
says no with its own message.
"""
from __future__ import annotations

import dataclasses
import enum
import math
from typing import List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import tvm
from tvm import relax

from ..errors import AccelError
from ..sim import vocabulary
from ..sim.config import AccelConfig
from ..sim.deconv import deconv_as_conv_weights
from . import chains, custom
from .chains import Roles
from .layer import (AttentionSpec, BatchNormSpec, ConvSpec, CopySpec, Layer, LrnSpec, NormSpec,
                    PoolSpec, RubikSpec, SdpSpec, token_surface)
from .relax_exprs import (Lookup, Unsupported, constant_value, describe, dtype_of,
                          resize_coordinates,
                          feature_surface, is_constant, keepdims_axes, op_name, static_shape)

# Relax op -> the engine's name for it, from the op vocabulary (activations are looked up when
# used: a test may extend the vocabulary).
ELEMENTWISE = {op: entry.name for op, entry in vocabulary.ELEMENTWISE.by_relax_op.items()}
POOLS = {op: entry.name for op, entry in vocabulary.POOLS.by_relax_op.items()}
SUPPORTED_DTYPES = ("float32",)
# Ops the SDP runs only with a constant second operand, as its scale/shift: x - c = x + (-c),
# x / c = x * (1 / c) (one rounding of 1 / c: within an ulp of the division).
AFFINE_ONLY = dict(zip(chains.AFFINE_OPS, ("relax.add", "relax.multiply")))


class Stage(NamedTuple):
    """One op of a chain, as its role gives it: its kind ("conv", "dense", "batch_norm",
    "act", "pool", "binary"), the call, the other operand of a binary op, the flatten a
    dense layer reads its input through, and the activation a group of ops computes (one
    that the frontend decomposed: ``call`` is its last op)."""

    kind: str
    call: relax.Call
    other: Optional[relax.Expr] = None
    flatten: Optional[relax.Call] = None
    act: Optional[str] = None


class SdpUnit(enum.IntEnum):
    """The SDP's sub-units in the order one pass runs them (NVDLA: X1/X2, then Y)."""

    SCALE_SHIFT = 0  # bias, batch norm, per-channel scale
    ELEMENTWISE = 1  # the op with a second tensor
    ACTIVATION = 2


def _ints(values) -> Tuple[int, ...]:
    return tuple(int(v) for v in values)


def _require_float32(expr: relax.Expr, what: str) -> None:
    dtype = dtype_of(expr)
    if dtype not in SUPPORTED_DTYPES:
        raise Unsupported(f"{what} has dtype {dtype}; the simulator runs {', '.join(SUPPORTED_DTYPES)}")


def _feature_shape(expr: relax.Expr, what: str) -> Tuple[int, int, int, int]:
    """The feature cube the engines read ``expr`` as (layer.feature_surface: NCHW, [N, C, L]
    as [N, C, 1, L], [N, C] as [N, C, 1, 1])."""
    shape = static_shape(expr)
    if len(shape) not in (2, 3, 4):
        raise Unsupported(f"{what} is {len(shape)}-D {list(shape)}; the engines take NCHW, "
                          "[N, C, L] or [N, C]")
    return feature_surface(shape)


def _per_channel(expr: relax.Expr, channels: int, what: str) -> None:
    """A per-channel operand: [C], [1, C], or [1, C, 1, 1]."""
    _require_float32(expr, what)
    shape = static_shape(expr)
    squeezed = [d for d in shape if d != 1]
    if squeezed not in ([channels], [] if channels == 1 else [channels]) or (
            len(shape) not in (1, 2, 4)) or (len(shape) > 1 and shape[1] != channels):
        raise Unsupported(f"{what} of shape {list(shape)} is not one value per channel "
                          f"({channels} channels)")


def _per_channel_operand(expr: relax.Expr, feature: Tuple[int, ...]) -> bool:
    """Whether an add/mul operand broadcasts along the channel axis only (or is one constant
    for every element)."""
    try:
        shape = static_shape(expr)
    except Unsupported:
        return False
    if is_constant(expr) and int(np.prod(shape)) == 1:
        return True
    c = feature[1]
    if len(feature) == 4:
        return shape in ((c, 1, 1), (1, c, 1, 1)) or (c == 1 and shape in ((1,), ()))
    if len(feature) == 3:  # [N, C, L]: along axis 1 (a [C] operand would be along L)
        return shape in ((c, 1), (1, c, 1)) or (c == 1 and shape in ((1,), ()))
    return shape in ((c,), (1, c))


def _per_image_channel_operand(expr: relax.Expr, feature: Tuple[int, ...]) -> bool:
    """Whether a multiply's computed operand holds one value per image and channel of a batch
    above 1 ([N, C, 1, 1] against [N, C, H, W]: squeeze-excite's ``x * s`` on a batch), the
    SDP's element-wise multiplier with a per-channel operand, which reads it [N][C]."""
    try:
        shape = static_shape(expr)
    except Unsupported:
        return False
    return len(feature) == 4 and feature[0] > 1 and not is_constant(expr) and \
        tuple(shape) == (feature[0], feature[1], 1, 1)


# --- the chain walker ------------------------------------------------------------------------

def _resolve(expr: relax.Expr, lookup: Lookup) -> Optional[relax.Expr]:
    """The value an in-chain Var is bound to, or None for a chain input (parameter, constant,
    or a Var bound outside the chain)."""
    if isinstance(expr, relax.Var):
        return lookup(expr)
    if isinstance(expr, relax.Call) or isinstance(expr, relax.TupleGetItem):
        return expr
    return None


def _strip_reshape(expr: relax.Expr, lookup: Lookup) -> relax.Expr:
    """A bias often arrives as reshape(bias, [1, C, 1, 1]): look through it."""
    value = _resolve(expr, lookup)
    if op_name(value) == "relax.reshape":
        return value.args[0]
    return expr


def _lower_custom(call: relax.Call) -> Optional[Layer]:
    """A call_tir of a registered custom primitive: the stages its registration gives."""
    callee = call.args[0]
    primitive = custom.find(getattr(callee, "name_hint", ""))
    if primitive is None:
        return None
    args = list(call.args[1].fields)
    parts = dict(primitive.stages(*args))
    data = parts.pop("data", args[0])
    _require_float32(data, "the input")
    layer = Layer(data=data, in_shape=_feature_shape(data, "the input"),
                  out_shape=static_shape(call), **parts)
    layer.sdp.sources = layer.sdp.sources or [f"custom {primitive.name}"]
    _require_float32(call, "the output")
    return layer


def lower_chain(root: relax.Expr, lookup: Lookup, roles: Optional[Roles] = None,
                name: Optional[str] = None) -> Layer:
    """Interpret a matched chain, given its last op, a Var -> bound value lookup that knows
    only the chain's own bindings, and the roles its pattern annotated (``ctx.annotated_expr``;
    None: the chain's entry is matched again, which needs ``lookup`` to be a
    :class:`~accel_codegen.compiler.layer.Bindings`; an op that no entry matches is read
    alone), and the composite's name, which that match must give (None: any).

    Raises
    ------
    Unsupported
        When a part of the chain is outside what the engines do; the message says why.
    """
    root_value = root if isinstance(root, relax.Call) else _resolve(root, lookup)
    if op_name(root_value) == "relax.reshape":  # a token chain can end in torch's reshape
        roles = roles or _match(root_value, lookup, name)
        if roles and "attention" in roles:
            return _lower_attention(roles, lookup, root)
        if roles and "probabilities" in roles:
            return _lower_attention(roles, lookup, root, probabilities=True)
        if roles and "unflatten" in roles:
            return _lower_tokens(_token_roles(roles), lookup, root)
    if op_name(root_value) in ("relax.mean", "relax.permute_dims"):  # need_weights=True's
        # head-averaged probabilities without the reshape to their own shape
        found = roles or _match(root_value, lookup, name)
        if found and "probabilities" in found:
            return _lower_attention(found, lookup, root, probabilities=True)
    if op_name(root_value) in COPIES:
        return _lower_copies(root_value, lookup)
    if op_name(root_value) == UPSAMPLE:
        return _lower_upsample(root_value, lookup)
    lrn = _local_response_norm(root_value, lookup)
    if lrn is not None:
        return lrn
    if op_name(root_value) == "relax.call_tir":
        layer = _lower_custom(root_value)
        if layer is None:
            raise Unsupported(f"no accelerator primitive for {root_value.args[0].name_hint}")
        return layer
    if not roles:
        roles = _match(root_value, lookup, name)
    if roles and _kind(roles, "norm") == "lrn":  # the shape of an LRN, not the CDP's (above)
        raise Unsupported("a local response norm the CDP does not compute: its channel "
                          "window is off centre (ONNX's of an even size) or its shapes are not "
                          "the CDP's, which takes a centred window")
    if roles and ("norm" in roles or "unflatten" in roles or (
            "dense" in roles and len(static_shape(roles["dense"])) > 2)):
        return _lower_tokens(_token_roles(roles), lookup, root)
    if roles:
        data, stages = _stages_from_roles(roles, lookup)
    else:
        data, stages = _single_op(root_value, lookup)
    if _resolve(data, lookup) is not None and not is_constant(data):
        # e.g. a residual branch that reads an intermediate of the main chain
        raise Unsupported("the chain's input is computed inside the matched region")
    return _reciprocal_kind(_build_layer(data, stages, root, lookup))


def _reciprocal_kind(layer: Layer) -> Layer:
    """1 / max(x, floor) alone in its chain (``accel.max_reciprocal``) as the decomposed
    "reciprocal" kind: the SDP's clip at the floor, then the LUT, and in FP16 its Newton steps
    (the table alone is within 12.5 %: sim/decompose.reciprocal_passes); any other layer as
    it is."""
    s = layer.sdp
    if layer.conv is not None or layer.pool is not None or layer.copies or layer.flattened or \
            s.act != "reciprocal" or s.ew_op != "max" or not is_constant(s.operand) or \
            s.ew_per_channel or s.decomposed_order() or s.prelu_slope is not None:
        return layer
    floors = np.unique(constant_value(s.operand))
    if floors.size != 1 or not (np.isfinite(floors[0]) and floors[0] > 0):
        return layer
    return dataclasses.replace(layer, sdp=SdpSpec(), norm=NormSpec(
        None, None, float(floors[0]), sources=["relax.maximum"], kind="reciprocal"))


def _match(value: Optional[relax.Expr], lookup: Lookup, name: Optional[str] = None
           ) -> Optional[Roles]:
    """The roles of the first entry of the table that matches at ``value`` (batch norm's first
    item is matched at the batch norm)."""
    if isinstance(value, relax.TupleGetItem) and int(value.index) == 0:
        value = _resolve(value.tuple_value, lookup)
    if not isinstance(value, relax.Call):
        return None
    found = chains.match_roles(value, lookup if isinstance(lookup, dict) else {}, name)
    return found[1] if found is not None else None


def _kind(roles: Roles, role: str) -> Optional[str]:
    """The kind that matched a role with kinds ("act:relu" -> "relu")."""
    for key in roles:
        if key.startswith(role + ":"):
            return key.split(":", 1)[1]
    return None


def _stages_from_roles(roles: Roles, lookup: Lookup) -> Tuple[relax.Expr, List[Stage]]:
    """The chain's data and its stages, first to last, from its pattern's roles."""
    stages: List[Stage] = []
    if "conv" in roles:
        stages.append(Stage("conv", roles["conv"]))
        data = roles["conv"].args[0]
    elif "deconv" in roles:
        stages.append(Stage("deconv", roles["deconv"]))
        data = roles["deconv"].args[0]
    elif "dense" in roles:
        stage, data = _dense_stage(roles["dense"], lookup)
        stages.append(stage)
    elif "ew" in roles:
        stage, data = _commutative_stage(roles["ew"], lookup)
        stages.append(stage)
    elif "affine" in roles or "scale" in roles:
        # the matcher takes add and multiply in either operand order: c * x + d reads x
        data = None
        for role in ("affine", "scale", "shift"):
            if role in roles:
                call = roles[role]
                stage, operand = _commutative_stage(call, lookup) if op_name(call) in \
                    ELEMENTWISE else (_affine_stage(call), call.args[0])
                stages.append(stage)
                data = operand if data is None else data
    elif "bn" in roles:
        data = roles["bn"].args[0]
    elif "act" in roles:
        data = None  # the activation's input, below
    else:
        data = roles["pool"].args[0]
    # A wildcard's annotation is the value bound to the operand, not the operand: the other
    # operand of an add is read from the call (the one not computed by the chain).
    if "bias" in roles:
        stages.append(_commutative_stage(roles["bias"], lookup)[0])
    if "bn" in roles:
        stages.append(Stage("batch_norm", roles["bn"]))
    if "residual" in roles:
        stages.append(_commutative_stage(roles["residual"], lookup)[0])
    if "factor" in roles:
        stages.append(_commutative_stage(roles["factor"], lookup)[0])
    if "act" in roles:
        act = _kind(roles, "act")
        call = roles["act"]
        if act in chains.DECOMPOSED:
            decomposed = _decomposed_activation(call, lookup)
            if decomposed is None and act == "reciprocal":
                raise Unsupported("1 / x with x not held above a positive bound in its chain: "
                                  "the LUT's reciprocal answers its table's start for x <= 0")
            if decomposed is None or decomposed[0] != act:
                raise Unsupported(f"{op_name(call)} of {act}'s form with other constants is "
                                  f"not {act}")
            stages.append(Stage("act", call, act=act))
            source = decomposed[1]
        else:
            stages.append(Stage("act", call))
            source = call.args[1] if op_name(call) == "relax.where" else call.args[0]
        data = source if data is None else data
    if "pool" in roles:
        stages.append(Stage("pool", roles["pool"]))
    return data, stages


def _dense_stage(call: relax.Call, lookup: Lookup) -> Tuple[Stage, relax.Expr]:
    rank = len(static_shape(call.args[0]))
    if rank != 2:
        raise Unsupported(f"batched matmul ({rank}-D input): the CONV engine runs "
                          "dense layers, [N, C] x [C, K]")
    data = call.args[0]
    flattened = _resolve(data, lookup)
    if op_name(flattened) == "relax.reshape":
        if not _flattens(flattened):
            raise Unsupported("the reshape before the dense layer is not a flatten")
        return Stage("dense", call, flatten=flattened), flattened.args[0]
    return Stage("dense", call), data


def _affine_stage(call: relax.Call) -> Stage:
    """x - c or x / c (or x + c, x * c in a scale/shift): the data is the first operand."""
    if op_name(call) in AFFINE_ONLY and is_constant(call.args[0]):
        raise Unsupported(f"{op_name(call)} of a constant by a tensor: the SDP scales and "
                          "shifts the tensor")
    return Stage("binary", call, other=call.args[1])


def _commutative_stage(value: relax.Call, lookup: Lookup) -> Tuple[Stage, relax.Expr]:
    """An element-wise op: (its stage, its data operand). Every SDP element-wise op is
    commutative: the data is the operand from inside the chain, else the one with the op's own
    shape (``s * x`` reads x, not s). A constant is never the data (``pos_embed + x`` reads
    x), nor a reshape of a chain input where the other operand is computed in the chain
    (``reshape(b, [1, K]) + x W^T`` with a runtime bias b reads x W^T: it read the bias)."""
    lhs, rhs = value.args[0], value.args[1]
    lhs_in_chain = _resolve(lhs, lookup) is not None and not is_constant(lhs)
    rhs_in_chain = _resolve(rhs, lookup) is not None and not is_constant(rhs)
    if lhs_in_chain and rhs_in_chain and _reshaped_input(lhs, lookup) and \
            not _reshaped_input(rhs, lookup):
        lhs_in_chain = False
    if (rhs_in_chain and not lhs_in_chain) or (is_constant(lhs) and not is_constant(rhs)) or (
            not lhs_in_chain and not rhs_in_chain and _same_shape(rhs, value) and
            not _same_shape(lhs, value)):
        lhs, rhs = rhs, lhs
    return Stage("binary", value, other=rhs), lhs


def _reshaped_input(expr: relax.Expr, lookup: Lookup) -> bool:
    """Whether ``expr`` is an in-chain reshape of a chain input (a runtime bias's view)."""
    value = _resolve(expr, lookup)
    return op_name(value) == "relax.reshape" and _resolve(value.args[0], lookup) is None


def _single_op(value: Optional[relax.Expr], lookup: Lookup) -> Tuple[relax.Expr, List[Stage]]:
    """An op that no entry matches, read alone (why a host op is not offloaded)."""
    if isinstance(value, relax.TupleGetItem):
        bn = _resolve(value.tuple_value, lookup)
        if op_name(bn) != "relax.nn.batch_norm" or int(value.index) != 0:
            raise Unsupported("a tuple item other than batch_norm's output")
        return bn.args[0], [Stage("batch_norm", bn)]
    name = op_name(value)
    if name == "relax.nn.batch_norm":
        return value.args[0], [Stage("batch_norm", value)]
    if name == "relax.nn.conv2d":
        return value.args[0], [Stage("conv", value)]
    if name == DECONV:
        return value.args[0], [Stage("deconv", value)]
    if name == "relax.matmul":
        stage, data = _dense_stage(value, lookup)
        return data, [stage]
    decomposed = _decomposed_activation(value, lookup)
    if decomposed is not None:
        return decomposed[1], [Stage("act", value, act=decomposed[0])]
    if name in vocabulary.ACTIVATIONS.by_relax_op or name == "relax.nn.leakyrelu":
        return value.args[0], [Stage("act", value)]
    if name == "relax.where":  # PReLU as torch.export decomposes it
        return value.args[1], [Stage("act", value)]
    if name in POOLS or name in ("relax.mean", "relax.nn.adaptive_avg_pool2d"):
        return value.args[0], [Stage("pool", value)]
    if name in AFFINE_ONLY:
        return value.args[0], [_affine_stage(value)]
    if name in ELEMENTWISE:
        stage, data = _commutative_stage(value, lookup)
        return data, [stage]
    raise Unsupported(f"{name or describe(value)} is not an accelerator op")


def _same_shape(expr: relax.Expr, like: relax.Expr) -> bool:
    """Whether two expressions have the same static shape (False when either has none)."""
    try:
        return static_shape(expr) == static_shape(like)
    except Unsupported:
        return False


def _flattens(reshape: relax.Call) -> bool:
    """reshape(x, [N, prod(rest)]): a flatten that keeps NCHW memory order."""
    try:
        before, after = static_shape(reshape.args[0]), static_shape(reshape)
    except Unsupported:
        return False
    return len(after) == 2 and len(before) >= 2 and after[0] == before[0] and \
        after[1] == int(np.prod(before[1:]))


def _build_layer(data: relax.Expr, stages: List[Stage], root: relax.Expr, lookup: Lookup
                 ) -> Layer:
    _require_float32(data, "the input")
    flattened = stages[0].flatten is not None
    if flattened:
        shape = static_shape(data)
        in_shape = (shape[0], int(np.prod(shape[1:])), 1, 1)
    else:  # a 3-D tensor as [N, C, 1, L] (a transformer's residual add alike: element-wise
        # ops read the bytes as they lie, whichever axis is its channels)
        in_shape = _feature_shape(data, "the input")
    layer = Layer(data=data, in_shape=in_shape, out_shape=(),
                  flattened=flattened)
    channels = in_shape[1]
    order: List[SdpUnit] = []  # the SDP units the chain's ops use, in source order
    plan = None
    for kind, call, other, _, act in stages:
        if kind == "conv":
            layer.conv = _conv_spec(call)
            channels = layer.conv.weight_shape[0]
            continue
        if kind == "deconv":
            layer.conv, plan = _deconv_spec(call, in_shape)
            layer.rubik = RubikSpec(plan.stride_x, plan.stride_y, DECONV)
            channels = plan.out_channels
            continue
        if kind == "dense":
            layer.conv = _dense_spec(call, lookup)
            channels = layer.conv.weight_shape[0]
            continue
        if layer.pool is not None:
            raise Unsupported(f"{op_name(call)} after pooling: the PDP is the last engine")
        if kind == "pool":
            layer.pool = _pool_spec(call, layer, channels)
        elif kind == "batch_norm":
            _add_batch_norm(layer.sdp, call, channels, order)
        elif kind == "act":
            _add_activation(layer.sdp, call, channels, order, lookup, act)
        elif kind == "binary":
            _add_binary(layer, call, other, channels, order, lookup)
    if order != sorted(order):
        raise Unsupported("the SDP runs scale/shift, then the element-wise op, then the "
                          "activation; this chain has another order")
    if layer.conv is None and layer.sdp.empty() and layer.pool is None:
        raise Unsupported("nothing for the engines to do")
    result = root
    if op_name(root) == "relax.nn.batch_norm":  # asked about alone: its first output
        result = relax.TupleGetItem(root, 0)
    layer.out_shape = static_shape(result)
    _require_float32(result, "the output")
    if plan is not None:
        _per_phase(layer, plan)
    return layer


def _conv_spec(call: relax.Call) -> ConvSpec:
    a = call.attrs
    for field, want in (("data_layout", "NCHW"), ("kernel_layout", "OIHW"), ("out_layout", "NCHW")):
        if str(getattr(a, field)) != want:
            raise Unsupported(f"conv2d {field} is {getattr(a, field)}; the CONV engine takes {want}")
    if a.out_dtype is not None and str(a.out_dtype) not in ("", "float32"):
        raise Unsupported(f"conv2d out_dtype is {a.out_dtype}")
    _require_float32(call.args[1], "the conv2d weight")
    weight_shape = static_shape(call.args[1])
    padding = _ints(a.padding)
    if len(padding) == 2:
        padding = padding * 2
    return ConvSpec(weight=call.args[1], weight_shape=weight_shape, stride=_ints(a.strides),
                    padding=padding, dilation=_ints(a.dilation), groups=int(a.groups))


DECONV = "relax.nn.conv2d_transpose"


def _deconv_spec(call: relax.Call, in_shape: Tuple[int, ...]):
    """A transposed convolution as NVDLA runs it: a stride-1 CONV of its phase kernels
    (:func:`~accel_codegen.sim.deconv.deconv_as_conv_weights`), whose output channels are the
    output's phases, then a RUBIK contract (``Layer.rubik``). Returns the ConvSpec and the
    plan; what the two runs cannot compute exactly stays on the host, named."""
    a = call.attrs
    for field, want in (("data_layout", "NCHW"), ("kernel_layout", "IOHW"),
                        ("out_layout", "NCHW")):
        if str(getattr(a, field)) != want:
            raise Unsupported(f"conv2d_transpose {field} is {getattr(a, field)}; the CONV + "
                              f"RUBIK deconvolution takes {want}")
    if a.out_dtype is not None and str(a.out_dtype) not in ("", "float32"):
        raise Unsupported(f"conv2d_transpose out_dtype is {a.out_dtype}")
    if any(d != 1 for d in _ints(a.dilation)):
        raise Unsupported(f"conv2d_transpose with dilation {list(_ints(a.dilation))}: the "
                          "phase kernels of NVDLA's deconvolution are undilated")
    top, left, bottom, right = _ints(a.padding)
    if (top, left) != (bottom, right):
        raise Unsupported(f"conv2d_transpose with padding {[top, left, bottom, right]}: the "
                          "deconvolution crops the same number of rows (columns) each side")
    weight = call.args[1]
    _require_float32(weight, "the conv2d_transpose weight")
    if not is_constant(weight):
        raise Unsupported("the conv2d_transpose weight is not a constant: its phase kernels "
                          "are made at compile time (bind inputs as params)")
    try:
        plan = deconv_as_conv_weights(constant_value(weight), _ints(a.strides), (top, left),
                                      _ints(a.output_padding), int(a.groups))
    except AccelError as error:
        raise Unsupported(str(error).rsplit(" [ACCEL_", 1)[0]) from None
    if not plan.exact(in_shape[2], in_shape[3]):
        raise Unsupported(
            f"conv2d_transpose of {in_shape[2]}x{in_shape[3]} gives "
            f"{'x'.join(map(str, plan.output_size(*in_shape[2:])))}, not a multiple of its "
            f"stride: the RUBIK contract would write "
            f"{'x'.join(map(str, plan.contract_size(*in_shape[2:])))} (a crop it does not do)")
    pt, pb, pl, pr = plan.padding
    spec = ConvSpec(weight=relax.const(np.ascontiguousarray(plan.weight, np.float32)),
                    weight_shape=tuple(plan.weight.shape), padding=(pt, pl, pb, pr),
                    source=DECONV)
    return spec, plan


def _per_phase(layer: Layer, plan) -> None:
    """A transposed convolution's per-channel SDP operands tiled over its phases (the CONV's
    output channels are phase-major): constants, made at compile time."""
    sdp = layer.sdp
    if sdp.ew_op is not None:
        raise Unsupported(f"an element-wise {sdp.ew_op} with a tensor after conv2d_transpose: "
                          "its operand would be read in the phases' order")
    if layer.pool is not None:
        raise Unsupported("a pool after conv2d_transpose: the PDP would pool the phases")

    def tiled(expr, what):
        if expr is None:
            return None
        if not is_constant(expr):
            raise Unsupported(f"the {what} after conv2d_transpose is not a constant: it is "
                              "tiled over the phases at compile time")
        values = np.asarray(constant_value(expr), np.float32).reshape(-1)
        if values.size == 1:
            values = np.full(plan.out_channels, values[0], np.float32)
        return relax.const(np.ascontiguousarray(plan.per_channel(values, what), np.float32))

    sdp.bias = tiled(sdp.bias, "bias")
    sdp.scale = tiled(sdp.scale, "scale")
    sdp.prelu_slope = tiled(sdp.prelu_slope, "prelu alpha")
    bn = sdp.batch_norm
    if bn is not None:
        sdp.batch_norm = BatchNormSpec(tiled(bn.gamma, "batch_norm gamma"),
                                       tiled(bn.beta, "batch_norm beta"),
                                       tiled(bn.mean, "batch_norm moving mean"),
                                       tiled(bn.var, "batch_norm moving var"), bn.epsilon)


def _dense_spec(call: relax.Call, lookup: Lookup) -> ConvSpec:
    """matmul(x, permute_dims(W)) with W [K, C] (torch, ONNX), or matmul(x, W') with a
    constant W' [C, K]: a 1x1 convolution on [N, C, 1, 1]."""
    x, w = call.args
    if call.attrs.out_dtype is not None and str(call.attrs.out_dtype) not in ("", "float32"):
        raise Unsupported(f"matmul out_dtype is {call.attrs.out_dtype}")
    value = _resolve(w, lookup)
    if op_name(value) == "relax.permute_dims":
        weight = value.args[0]
        axes = value.attrs.axes
        if axes is not None and _ints(axes) != (1, 0):
            raise Unsupported(f"dense weight permuted with axes {list(_ints(axes))}")
        transpose = False
    elif is_constant(w):
        weight, transpose = w, True
    else:
        raise Unsupported("dense weight is a runtime [C, K] input that "
                          "rewrites.computed_matmuls did not transpose onto the CONV's [K, C] "
                          "(batch axes that broadcast, or not float32)")
    _require_float32(weight, "the dense weight")
    shape = static_shape(weight)
    if len(shape) != 2:
        raise Unsupported(f"dense weight of shape {list(shape)}")
    k, c = (shape[1], shape[0]) if transpose else shape
    return ConvSpec(weight=weight, weight_shape=(k, c, 1, 1), transpose_weight=transpose,
                    source="relax.matmul")


def _pool_spec(call: relax.Call, layer: Layer, channels: int) -> PoolSpec:
    name = op_name(call)
    shape = _feature_shape(call.args[0], f"the {name} input")
    if name in ("relax.mean", "relax.nn.adaptive_avg_pool2d"):
        if len(static_shape(call.args[0])) != 4:
            raise Unsupported(f"{name} of a non-NCHW tensor")
        if name == "relax.mean":
            axes = sorted(int(a) % 4 for a in call.attrs.axis) if call.attrs.axis is not None else []
            if axes != [2, 3]:
                raise Unsupported(f"mean over axes {axes}; the PDP averages H and W only")
        else:
            for field in ("layout", "out_layout"):
                if str(getattr(call.attrs, field)) != "NCHW":
                    raise Unsupported(f"adaptive_avg_pool2d {field} is "
                                      f"{getattr(call.attrs, field)}; the PDP takes NCHW")
            out_h, out_w = static_shape(call)[2:]
            if shape[2] % out_h or shape[3] % out_w:
                raise Unsupported(f"adaptive_avg_pool2d from {shape[2]}x{shape[3]} to "
                                  f"{out_h}x{out_w}: the windows differ in size")
            # Equal windows: an ordinary average pool.
            window = (shape[2] // out_h, shape[3] // out_w)
            return PoolSpec("avg", window, window, (0, 0, 0, 0), False, name,
                            is_global=(out_h, out_w) == (1, 1))
        return PoolSpec("avg", (shape[2], shape[3]), (1, 1), (0, 0, 0, 0), False, name,
                        is_global=True)
    a = call.attrs
    check_attributes(call, vocabulary.POOLS.by_relax_op[name], _POOL_FIELDS)
    if str(a.layout) != "NCHW" or str(a.out_layout) != "NCHW":
        field = "layout" if str(a.layout) != "NCHW" else "out_layout"
        raise Unsupported(f"{name} {field} is {getattr(a, field)}; the PDP takes NCHW")
    if any(d != 1 for d in _ints(a.dilation)):
        raise Unsupported(f"{name} with dilation {list(_ints(a.dilation))}")
    kernel, stride = _ints(a.pool_size), _ints(a.strides)
    padding = _ints(a.padding)
    if len(padding) == 2:
        padding = padding * 2
    include = bool(getattr(a, "count_include_pad", False))
    if bool(a.ceil_mode):
        # ceil_mode's partial last window is a window over more bottom/right padding, which
        # never wins a max and is not counted by an average that counts image elements only.
        out_h, out_w = static_shape(call)[2:]
        extra_h = (out_h - 1) * stride[0] + kernel[0] - (shape[2] + padding[0] + padding[2])
        extra_w = (out_w - 1) * stride[1] + kernel[1] - (shape[3] + padding[1] + padding[3])
        if (extra_h > 0 or extra_w > 0) and POOLS[name] == "avg" and include:
            raise Unsupported(f"{name} with ceil_mode and count_include_pad: its partial "
                              "window's divisor counts padding that is not there")
        padding = (padding[0], padding[1], padding[2] + max(extra_h, 0),
                   padding[3] + max(extra_w, 0))
    return PoolSpec(POOLS[name], kernel, stride, padding, include, name)


# The pool attributes _pool_spec reads (and refuses what the PDP cannot do).
_POOL_FIELDS = ("pool_size", "strides", "padding", "dilation", "ceil_mode", "count_include_pad",
                "layout", "out_layout")


def _attribute_fields(attrs) -> List[str]:
    """The fields of an op's attributes (none for an op without attributes)."""
    if attrs is None:
        return []
    return sorted(set(dir(type(attrs))) - set(dir(tvm.ir.Attrs)))


def _same_value(value, want) -> bool:
    if isinstance(want, bool) or isinstance(value, (bool, int, float)) or hasattr(value, "value"):
        try:
            return float(getattr(value, "value", value)) == float(want)
        except (TypeError, ValueError):
            return False
    if isinstance(want, (tuple, list)):
        try:
            return [float(getattr(v, "value", v)) for v in value] == [float(w) for w in want]
        except (TypeError, ValueError):
            return False
    return str(value) == str(want)


def check_attributes(call: relax.Call, entry: vocabulary.Entry,
                     interpreted: Tuple[str, ...] = ()) -> None:
    """Every attribute of a vocabulary-driven op is one the lowering reads (``interpreted``)
    or one the vocabulary pins to the value the engine computes (``Entry.relax_attrs``):
    anything else (``softplus(beta=2)`` where the engine's softplus has beta 1) keeps the op on
    the host, naming the attribute, rather than running another function."""
    pinned = dict(entry.relax_attrs)
    name = op_name(call)
    for field in _attribute_fields(call.attrs):
        if field in interpreted:
            continue
        value = getattr(call.attrs, field)
        if field not in pinned:
            raise Unsupported(f"{name} with {field} = {value}: the engine's {entry.name} has no "
                              f"{field}")
        if not _same_value(value, pinned[field]):
            raise Unsupported(f"{name} with {field} = {value}: the engine's {entry.name} "
                              f"computes {field} = {pinned[field]}")


def _add_batch_norm(sdp: SdpSpec, bn: relax.Call, channels: int, order: List[SdpUnit]) -> None:
    a = bn.attrs
    if bool(a.training):
        raise Unsupported("batch_norm in training mode (batch statistics)")
    if int(a.axis) not in (1, -3) and not (int(a.axis) == -1 and len(static_shape(bn.args[0])) == 2):
        raise Unsupported(f"batch_norm over axis {int(a.axis)}; the SDP scales channels (axis 1)")
    if sdp.batch_norm is not None or sdp.ew_op is not None or sdp.act is not None:
        raise Unsupported("a second scale/shift after an element-wise op or activation")
    if sdp.scale is not None:
        raise Unsupported("a per-channel multiply before batch norm")
    gamma, beta, mean, var = bn.args[1:5]
    for expr, what in ((gamma, "gamma"), (beta, "beta"), (mean, "moving mean"),
                       (var, "moving var")):
        _per_channel(expr, channels, f"batch_norm {what}")
    sdp.batch_norm = BatchNormSpec(gamma if bool(a.scale) else None,
                                   beta if bool(a.center) else None, mean, var,
                                   float(a.epsilon))
    sdp.sources.append("relax.nn.batch_norm")
    order.append(SdpUnit.SCALE_SHIFT)


def _decomposed_prelu_slope(call: relax.Call, lookup: Lookup) -> relax.Expr:
    """The alpha of where(x > 0, x, alpha * x), or Unsupported for any other where."""
    condition, x, negative = (_resolve(arg, lookup) for arg in call.args)
    x = call.args[1]
    zero = condition.args[1] if op_name(condition) == "relax.greater" else None
    if zero is None or not condition.args[0].same_as(x) or not is_constant(zero) or \
            np.any(constant_value(zero) != 0) or op_name(negative) != "relax.multiply":
        raise Unsupported("a where other than PReLU's where(x > 0, x, alpha * x)")
    lhs, rhs = negative.args
    if lhs.same_as(x):
        lhs, rhs = rhs, lhs
    if not rhs.same_as(x):
        raise Unsupported("a where other than PReLU's where(x > 0, x, alpha * x)")
    if not _per_channel_operand(lhs, static_shape(x)):
        raise Unsupported(f"PReLU's alpha of shape {list(static_shape(lhs))} is not one value "
                          "per channel")
    return _strip_reshape(lhs, lookup)


def _add_activation(sdp: SdpSpec, call: relax.Call, channels: int, order: List[SdpUnit],
                    lookup: Lookup, decomposed: Optional[str] = None) -> None:
    if sdp.act is not None:
        raise Unsupported("two activations in one SDP pass")
    name = op_name(call)
    if decomposed is not None:
        sdp.act = decomposed
        sdp.sources.append(f"{decomposed} (decomposed)")
        order.append(SdpUnit.ACTIVATION)
        return
    if name == "relax.nn.leakyrelu":  # PReLU with one slope
        sdp.act = "prelu"
        sdp.prelu_slope = relax.const(np.full(channels, float(call.attrs.alpha), np.float32))
        sdp.sources.append(name)
        order.append(SdpUnit.ACTIVATION)
        return
    if name == "relax.where":
        slope = _decomposed_prelu_slope(call, lookup)
        _per_channel(slope, channels, "prelu alpha")
        sdp.act, sdp.prelu_slope = "prelu", slope
        sdp.sources.append("relax.where (prelu)")
        order.append(SdpUnit.ACTIVATION)
        return
    entry = vocabulary.ACTIVATIONS.by_relax_op[name]
    check_attributes(call, entry, ("axis",) if name == "relax.nn.prelu" else ())
    sdp.act = entry.name
    if name == "relax.clip":
        sdp.clip = _clip_bounds(call)
    elif name == "relax.nn.prelu":
        if int(call.attrs.axis) != 1:
            raise Unsupported(f"prelu over axis {int(call.attrs.axis)}")
        _per_channel(call.args[1], channels, "prelu alpha")
        sdp.prelu_slope = call.args[1]
    sdp.sources.append(name)
    order.append(SdpUnit.ACTIVATION)


#: The most elements a constant operand broadcast along axes other than the channels is
#: expanded to (it becomes a constant of the feature's size).
MAX_EXPANDED_OPERAND = 1 << 20


def _expanded_operand(other: relax.Expr, feature: Sequence[int]) -> relax.Expr:
    """A constant element-wise operand broadcast along axes other than the channels (YOLOv8's
    per-position stride [1, L] against [N, 4, L]) as a constant of the feature's own shape:
    the SDP's element-wise operand, the same values broadcasting repeats. Unchanged where it
    does not broadcast to the feature, or would be too large."""
    shape = static_shape(other)
    if len(shape) > len(feature) or int(np.prod(feature)) > MAX_EXPANDED_OPERAND or any(
            s not in (1, f) for s, f in zip(shape[::-1], feature[::-1])):
        return other
    value = np.broadcast_to(np.asarray(constant_value(other)), tuple(feature))
    return relax.const(np.ascontiguousarray(value), str(other.ty.dtype))


def _computed_channel_addend(layer: Layer, other: relax.Expr, feature, lookup: Lookup) -> bool:
    """Whether ``other`` is a computed [N, C, 1, 1] added to an NCHW tensor [N, C, H, W] as the
    layer's first stage (no convolution, no SDP stage before it), an input of the chain."""
    return layer.conv is None and layer.sdp.empty() and len(feature) == 4 and \
        static_shape(other) == (feature[0], feature[1], 1, 1) and \
        feature[2:] != (1, 1) and not is_constant(_strip_reshape(other, lookup)) and \
        _resolve(other, lookup) is None


def _add_binary(layer: Layer, call: relax.Call, other: relax.Expr, channels: int, order: List[SdpUnit],
                lookup: Lookup) -> None:
    """A bias add or per-channel multiply (scale/shift), or an element-wise op with a second
    tensor of the same shape (the SDP's element-wise unit)."""
    name = op_name(call)
    sdp = layer.sdp
    feature = static_shape(call)
    _require_float32(other, f"the second {name} operand")
    # Per channel as the op sees the operand (after any reshape); then read the values from
    # behind a reshape bound inside the chain, which keeps their order.
    affine = AFFINE_ONLY.get(name, name)
    # A computed addend of the tensor's own shape is the element-wise adder's operand, read
    # from memory as a residual add's: where the tensor is one value per channel (N = 1,
    # H = W = 1: an LSTM step's gates, the state Gemm plus the input's), it would also pass
    # for a bias, which fp16 and int8 code take only as constants.
    elementwise = name == "relax.add" and not is_constant(_strip_reshape(other, lookup)) and \
        static_shape(other) == feature
    if name == "relax.multiply" and _per_image_channel_operand(other, feature):
        if layer.conv is not None or not sdp.empty():
            raise Unsupported("a multiply by one value per image and channel after a "
                              "convolution or another SDP stage (the SDP's per-channel operand "
                              "is its element-wise multiplier's, in a run of its own)")
        sdp.scale = other
        sdp.sources.append(name)
        order.append(SdpUnit.SCALE_SHIFT)
        return
    if name == "relax.add" and _computed_channel_addend(layer, other, feature, lookup):
        # x + t, t computed [N, C, 1, 1]: the element-wise adder's per-channel operand, read
        # from memory in the precision (and int8 codes) its run wrote, where a bias is folded
        # into the converters at compile time (fp16 and int8 take constants only)
        sdp.ew_op, sdp.operand, sdp.ew_per_channel = "add", other, True
        sdp.sources.append(name)
        order.append(SdpUnit.ELEMENTWISE)
        return
    if affine in ("relax.add", "relax.multiply") and not elementwise and \
            _per_channel_operand(other, feature):
        operand = _channel_operand(other, name, channels, lookup)
        if sdp.batch_norm is not None or sdp.ew_op is not None or sdp.act is not None:
            raise Unsupported(f"a per-channel {name} after batch norm, an element-wise op or an "
                              "activation")
        if affine == "relax.add":
            if sdp.bias is not None:
                raise Unsupported("two bias adds")
            sdp.bias = operand
        else:
            if sdp.scale is not None or sdp.bias is not None:
                raise Unsupported("a per-channel multiply after a bias")
            sdp.scale = operand
        sdp.sources.append(name)
        order.append(SdpUnit.SCALE_SHIFT)
        return
    if name in AFFINE_ONLY:
        raise Unsupported(f"{name} of two tensors: the SDP's element-wise unit adds, multiplies "
                          "or takes the max or min")
    if is_constant(other) and static_shape(other) != feature:
        other = _expanded_operand(other, feature)
    if static_shape(other) != feature or any(
            static_shape(a) != feature for a in call.args if not is_constant(a)):
        raise Unsupported(f"{name} with broadcasting between {list(static_shape(call.args[0]))} "
                          f"and {list(static_shape(call.args[1]))}")
    if len(static_shape(other)) != 3 or layer.in_shape[2:] != (1, 1):
        _feature_shape(other, f"the {name} operand")
    if sdp.ew_op is not None:
        raise Unsupported("two element-wise ops in one SDP pass")
    if sdp.act is not None:
        raise Unsupported(f"{name} after the activation")
    if _resolve(other, lookup) is not None:  # the operand is computed inside the chain
        branch = lower_chain(other, lookup)
        if branch.conv is None or branch.pool is not None or branch.sdp.ew_op or branch.sdp.act:
            raise Unsupported(f"the second {name} operand is computed by a chain other than "
                              "conv + bias + batch norm")
        layer.branch = branch
    sdp.ew_op = ELEMENTWISE[name]
    sdp.operand = other
    sdp.sources.append(name)
    order.append(SdpUnit.ELEMENTWISE)


# --- token chains: layer norm over channels (issue 29) ----------------------------------------

def _token_roles(roles: Roles) -> Roles:
    """The roles of a token chain, the torch form's matmul and add (chains.token_dense) read
    as "dense" and "bias"."""
    roles = dict(roles)
    for role in ("dense", "bias"):
        if f"{role}_flat" in roles:
            roles[role] = roles.pop(f"{role}_flat")
    return roles


def _lower_softsign(norm: relax.Call, lookup: Lookup, root: relax.Expr) -> Layer:
    """x / (1 + |x|) (chains: the softsign kind): one layer of SDP passes over x's feature
    surface (sim/decompose.softsign_passes)."""
    x, total = norm.args[0], _resolve(norm.args[1], lookup)
    if not any(_is_scalar(one, 1.0) for one in total.args):
        raise Unsupported("x / (|x| + c) with c other than 1 is not softsign")
    _require_float32(x, "the input")
    _require_float32(norm, "the softsign output")
    if _resolve(x, lookup) is not None and not is_constant(x):
        raise Unsupported("the chain's input is computed inside the matched region")
    return Layer(data=x, in_shape=_feature_shape(x, "the input"), out_shape=static_shape(root),
                 norm=NormSpec(None, None, 0.0, kind="softsign"))


def _lower_tokens(roles: Roles, lookup: Lookup, root: relax.Expr) -> Layer:
    """[dense over tokens (+ bias)] -> layer_norm over the last axis -> [activation]: one layer
    whose data, [B, T, C] (or [T, C], or [B, H, W, C]) with the channels last, is read as the
    feature surface [B, C, 1, T] (``token_surface``) and whose runs are the dense layer's CONV
    + SDP and the layer norm's engine passes (``Layer.runs``)."""
    if "norm" not in roles:
        return _lower_token_dense(roles, lookup, root)
    norm = roles["norm"]
    if "passes:softsign" in roles:
        return _lower_softsign(norm, lookup, root)
    if op_name(norm) == "relax.divide":
        return _lower_l2_normalize(norm, lookup, root)
    if _kind(roles, "norm") == "grn":
        return _lower_grn(roles, lookup, root)
    a = norm.attrs
    normed = norm.args[0]
    shape = static_shape(normed)
    rank = len(shape)
    # Over axis 1 of a 4-D tensor: the channels of NCHW data, whose surface it is itself
    # (rewrites.channels_last_sandwiches gives ConvNeXt's layer norms so).
    softmax = op_name(norm)[len("relax.nn."):] if op_name(norm) in (
        f"relax.nn.{op}" for op in chains.SOFTMAXES) else None
    # A softmax over axis 1 of [N, C, L]: the channels of [N, C, 1, L], the same bytes
    # (ResNeSt's split attention normalises over its radix so).
    channels_first = (rank == 4 or (rank == 3 and softmax)) and (
        int(a.axis) % rank == 1 if softmax else sorted(int(v) % rank for v in a.axes) == [1])
    surface = (tuple(shape) if rank == 4 else (shape[0], shape[1], 1, shape[2])) \
        if channels_first else None
    if softmax:  # softmax or log_softmax
        if not channels_first and (rank not in (2, 3, 4) or int(a.axis) % rank != rank - 1):
            raise Unsupported(f"{softmax} over axis {int(a.axis)} of a {rank}-D tensor "
                              f"{list(shape)}: the engine passes reduce the channels, the last "
                              "axis of [T, C], [B, T, C] or [B, H, W, C], or axis 1 of "
                              "[N, C, H, W] or [N, C, L]")
        _require_float32(normed, "the input")
        _require_float32(norm, f"the {softmax} output")
        if _resolve(normed, lookup) is not None and not is_constant(normed):
            raise Unsupported("the chain's input is computed inside the matched region")
        return Layer(data=normed, in_shape=surface or token_surface(shape),
                     out_shape=static_shape(root), tokens=not channels_first,
                     norm=NormSpec(None, None, 0.0, kind=softmax))
    kind = "rms_norm" if op_name(norm) == "relax.nn.rms_norm" else "layer_norm"
    axes = sorted(int(v) % rank for v in a.axes) if rank else []
    if not channels_first and (rank not in (2, 3, 4) or axes != [rank - 1]):
        raise Unsupported(f"{kind} over axes {[int(v) for v in a.axes]} of a {rank}-D "
                          f"tensor {list(shape)}: the engine passes normalise the channels, the "
                          "last axis of [T, C], [B, T, C] or [B, H, W, C]")
    _require_float32(norm, f"the {kind} output")
    params = []
    affine = ((norm.args[1], True, "gamma"),) if kind == "rms_norm" else (
        (norm.args[1], bool(a.scale), "gamma"), (norm.args[2], bool(a.center), "beta"))
    for expr, used, what in affine:
        if not used:
            params.append(None)
            continue
        value = _strip_reshape(expr, lookup)
        if not is_constant(value):
            raise Unsupported(f"{kind}'s {what} is not a constant: its passes fold it into "
                              "the SDP's scale and shift at compile time")
        channels = shape[1] if channels_first else shape[-1]
        if constant_value(value).size != channels:
            raise Unsupported(f"{kind}'s {what} has {constant_value(value).size} values for "
                              f"{channels} channels")
        params.append(value)
    params += [None] * (2 - len(params))
    act = None
    if "act" in roles:
        probe = SdpSpec()
        _add_activation(probe, roles["act"], shape[1] if channels_first else shape[-1], [],
                        lookup, _kind(roles, "act")
                        if _kind(roles, "act") in chains.DECOMPOSED else None)
        if probe.act in ("prelu", "clip"):
            raise Unsupported(f"a {probe.act} after a layer norm is not generated (its "
                              "parameters are not carried into the passes)")
        act = probe.act
    spec = NormSpec(params[0], params[1], float(a.epsilon), act, kind=kind)
    data, conv, sdp = _token_dense_part(roles, lookup, normed)
    if channels_first and conv is not None:
        raise Unsupported("a dense layer over tokens before a layer norm over axis 1")
    if "flatten" in roles:
        spec.sources = ["relax.reshape", "relax.reshape"]
    return Layer(data=data, in_shape=surface or token_surface(static_shape(data)),
                 out_shape=static_shape(root), conv=conv, sdp=sdp, tokens=not channels_first,
                 norm=spec)


def l2_normalize_parts(norm: relax.Call, lookup: Lookup):
    """(x, the sum, eps) of F.normalize's ops (chains.l2_normalize), the exponents checked."""
    x = norm.args[0]
    divisor = _resolve(norm.args[1], lookup)
    if op_name(divisor) == "relax.broadcast_to":
        divisor = _resolve(divisor.args[0], lookup)
    if op_name(divisor) == "relax.clip":
        eps, top = (float(getattr(v, "value", v)) for v in divisor.args[1:3])
        if top != math.inf:
            raise Unsupported(f"F.normalize's clamp has an upper bound {top}")
    else:  # maximum(norm, eps)
        bound = np.asarray(constant_value(divisor.args[1])).reshape(-1)
        if bound.size != 1:
            raise Unsupported(f"F.normalize's clamp by a constant of {bound.size} values")
        eps = float(bound[0])
    root = _resolve(divisor.args[0], lookup)
    if op_name(root) == "relax.power" and float(
            constant_value(root.args[1]).reshape(-1)[0]) != 0.5:
        raise Unsupported("a power of the sum of squares other than 0.5 is not an L2 norm")
    total = _resolve(root.args[0], lookup)
    squares = _resolve(total.args[0], lookup)
    if op_name(squares) == "relax.power" and float(
            constant_value(squares.args[1]).reshape(-1)[0]) != 2.0:
        raise Unsupported("a sum of powers other than squares is not an L2 norm")
    if not (eps >= 0 and math.isfinite(eps)):
        raise Unsupported(f"F.normalize's eps {eps} is not a finite value >= 0")
    return x, total, eps


def _lower_l2_normalize(norm: relax.Call, lookup: Lookup, root: relax.Expr) -> Layer:
    """F.normalize over the last axis (chains.l2_normalize): one layer whose runs are
    sim/decompose.l2_normalize_passes over the token surface, as a layer norm's are."""
    x, total, eps = l2_normalize_parts(norm, lookup)
    shape = static_shape(x)
    rank = len(shape)
    axes = total.attrs.axis
    axes = sorted(int(v) % rank for v in axes) if axes is not None else list(range(rank))
    if rank not in (2, 3, 4) or axes != [rank - 1] or not bool(total.attrs.keepdims):
        raise Unsupported(f"F.normalize over axes {axes} of a {rank}-D tensor {list(shape)}: "
                          "the engine passes normalise the channels, the last axis of [T, C], "
                          "[B, T, C] or [B, H, W, C]")
    _require_float32(x, "the input")
    _require_float32(norm, "the F.normalize output")
    return Layer(data=x, in_shape=token_surface(shape), out_shape=static_shape(root),
                 tokens=True, norm=NormSpec(None, None, eps, kind="l2_normalize"))


def _lower_grn(roles: Roles, lookup: Lookup, root: relax.Expr) -> Layer:
    """ConvNeXt-V2's GRN over NCHW data (chains.grn; rewrites.channels_last_sandwiches gives
    its channels-last form so): one layer whose runs are sim/decompose.grn_passes over the
    tensor itself, its surface."""
    # the residual's operand: the input as the chain reads it (roles["input"] is the value
    # the pattern matched through the variable)
    value = root if isinstance(root, relax.Call) else _resolve(root, lookup)
    outside = [arg for arg in value.args if _resolve(arg, lookup) is None]
    if len(outside) != 1:
        raise Unsupported("the chain's input is computed inside the matched region")
    x = outside[0]
    shape = static_shape(x)
    if len(shape) != 4:
        raise Unsupported(f"a GRN of a {len(shape)}-D tensor {list(shape)}: its passes take "
                          "NCHW data (or channels-last data between permutes)")
    total, mean = roles["grn_sum"], roles["grn_mean"]
    axes = [keepdims_axes(call, 4) for call in (total, mean)]
    if axes != [[2, 3], [1]]:
        raise Unsupported(f"a GRN whose norm is over axes {axes[0]} and whose mean is over "
                          f"axes {axes[1]}: the passes take the norm over H and W (the PDP) "
                          "and the mean over C, keepdims")
    if not chains.grn_exponents(roles["grn_squares"], roles["grn_root"], constant_value):
        raise Unsupported("a GRN whose norm is not the L2 norm (powers 2 and 0.5)")
    eps = constant_value(roles["grn_eps"]).reshape(-1)
    if eps.size != 1 or not (math.isfinite(float(eps[0])) and float(eps[0]) >= 0):
        raise Unsupported(f"a GRN's eps {eps.tolist()} is not one finite value >= 0")
    for what in ("gamma", "beta"):
        value = constant_value(roles[f"grn_{what}"])
        if value.size != shape[1] or (value.ndim == 4 and value.shape[1] != shape[1]) or \
                (value.ndim == 3 and value.shape[0] != shape[1]):
            raise Unsupported(f"a GRN's {what} of shape {list(value.shape)} is not one value "
                              f"per channel of {list(shape)}")
    _require_float32(x, "the input")
    _require_float32(root, "the GRN output")
    return Layer(data=x, in_shape=tuple(shape), out_shape=static_shape(root),
                 norm=NormSpec(roles["grn_gamma"], roles["grn_beta"], float(eps[0]),
                               kind="grn"))


def _lower_token_dense(roles: Roles, lookup: Lookup, root: relax.Expr) -> Layer:
    """A dense layer over tokens (+ bias, + activation) alone: one CONV + SDP run on the
    surface; 2-D data stays with the dense entries (an [N, C] batch of vectors)."""
    data, conv, sdp = _token_dense_part(roles, lookup, None)
    if "flatten" not in roles and len(static_shape(data)) == 2:
        raise Unsupported("a dense layer of [N, C] data is not a token chain")
    if "act" in roles:
        _add_activation(sdp, roles["act"], conv.weight_shape[0], [], lookup,
                        _kind(roles, "act") if _kind(roles, "act") in chains.DECOMPOSED
                        else None)
    if "flatten" in roles:
        sdp.sources = ["relax.reshape"] + sdp.sources + ["relax.reshape"]
    return Layer(data=data, in_shape=token_surface(static_shape(data)),
                 out_shape=static_shape(root), conv=conv, sdp=sdp, tokens=True)


def _token_dense_part(roles: Roles, lookup: Lookup, normed: Optional[relax.Expr]):
    """(data, conv, sdp) of a token chain's dense layer (+ bias), or (``normed``, None, an
    empty SdpSpec) without one."""
    conv, sdp = None, SdpSpec()
    data = normed
    if "dense" in roles:
        dense = roles["dense"]
        weight = _resolve(dense.args[1], lookup)
        if op_name(weight) == "relax.permute_dims":
            weight = weight.args[0]
        elif weight is None:
            weight = dense.args[1]
        if not is_constant(_strip_reshape(weight, lookup)):
            raise Unsupported("a matmul of two computed tensors whose batch axes broadcast "
                              "(or not in float32) is not generated: rewrites.computed_matmuls "
                              "reads each image's pair of operands, equal batch axes only")
        conv = _dense_spec(dense, lookup)
        k, c = conv.weight_shape[:2]
        data = dense.args[0]
        if ("flatten" in roles) != ("unflatten" in roles):
            raise Unsupported("a reshape on one side of the dense layer only")
        if "flatten" in roles:  # torch: reshape(x, [B*T, C]) . W^T, reshaped to [B, T, K]
            data = roles["flatten"].args[0]
            before = static_shape(data)
            if len(before) not in (2, 3, 4) or static_shape(roles["flatten"]) != (
                    int(np.prod(before[:-1])), before[-1]) or \
                    static_shape(roles["unflatten"]) != before[:-1] + (k,):
                raise Unsupported("the reshapes around the dense layer do not keep the tokens "
                                  f"of {list(before)}")
        if static_shape(data)[-1] != c or len(static_shape(data)) not in (2, 3, 4):
            raise Unsupported(f"a dense layer over {list(static_shape(data))} with a [{k}, {c}] "
                              "weight")
        if "bias" in roles:
            stage, _ = _commutative_stage(roles["bias"], lookup)
            bias = _strip_reshape(stage.other, lookup)
            bias_shape = static_shape(stage.other)
            if not is_constant(bias) or [d for d in bias_shape if d != 1] != [k] or \
                    bias_shape[-1] != k:
                raise Unsupported(f"the add after the dense layer of shape {list(bias_shape)} "
                                  f"is not a constant bias of {k} values")
            _require_float32(bias, "the dense bias")
            sdp.bias = bias
            sdp.sources.append("relax.add")
    _require_float32(data, "the input")
    if _resolve(data, lookup) is not None and not is_constant(data):
        raise Unsupported("the chain's input is computed inside the matched region")
    return data, conv, sdp


def _heads_mean_groups(roles: Roles, call: relax.Call) -> int:
    """How many consecutive heads each mean of need_weights=True's probabilities averages
    (the chain _lower_attention's ``probabilities`` reads), checked: V the identity of the
    keys for every head, the mean over the groups' axis of [W, T, G, g, Tk], and, where a
    window has several groups (a sequence-first batch's images, or every head alone:
    average_attn_weights=False), the permute that puts them before their tokens."""
    windows, tokens, heads, _ = static_shape(call.args[0])
    kv_tokens = static_shape(call.args[1])[1]
    eye = np.asarray(constant_value(call.args[2]))
    expected = np.broadcast_to(np.eye(kv_tokens, dtype=np.float32)[None, :, None, :],
                               (windows, kv_tokens, heads, kv_tokens))
    if eye.shape != expected.shape or not np.array_equal(eye, expected):
        raise Unsupported("attention with a constant V other than the identity is not "
                          "generated")
    mean = roles["heads_mean"]
    grouped = static_shape(mean.args[0])
    axes = [int(v) for v in mean.attrs.axis] if mean.attrs.axis is not None else []
    if len(grouped) != 5 or grouped[:2] != (windows, tokens) or grouped[4] != kv_tokens or \
            grouped[2] * grouped[3] != heads or axes not in ([3], [-2]) or \
            bool(mean.attrs.keepdims):
        raise Unsupported(f"a mean of attention's probabilities over {axes} of "
                          f"{list(grouped)} is not one over groups of heads")
    permute = roles.get("images_first")
    if permute is not None and (permute.attrs.axes is None or [
            int(v) for v in permute.attrs.axes] != [0, 2, 1, 3]):
        raise Unsupported("the head-averaged probabilities are permuted other than their "
                          "images before their tokens")
    if permute is None and grouped[2] != 1:
        raise Unsupported("the head-averaged probabilities of several images are not put "
                          "before their tokens")
    return grouped[3]


def _lower_attention(roles: Roles, lookup: Lookup, root: relax.Expr,
                     probabilities: bool = False) -> Layer:
    """reshape(nn.attention(q, k, v)) of one image's token tensors (compiler/attention.py
    writes it so): one layer whose data is Q, read as the surface [1, C, 1, T], whose runs are
    sim/decompose.attention_passes'. ``probabilities``: need_weights=True's head-averaged
    probabilities, reshape([permute_dims](mean(reshape(nn.attention(q, k, I), [W, T, G, g,
    Tk]), axis 3))) with I the identity (each head's probabilities): the passes' ``groups``
    g, no V (compiler/attention.py)."""
    call = roles["probabilities" if probabilities else "attention"]
    a = call.attrs
    groups = None
    if probabilities:
        groups = _heads_mean_groups(roles, call)
    if a.causal_mask is not None or (a.window_size is not None and int(a.window_size) > 0):
        raise Unsupported(f"attention with a causal mask ({a.causal_mask}) is not generated")
    # a batch is Swin's windows: each its own attention, its rows consecutive in Q, K, V and
    # the output (one image's windows, compiler/attention.py)
    windows, tokens, heads, d = static_shape(call.args[0])
    kv_tokens = static_shape(call.args[1])[1]
    # the values CONV reads each head's dv columns of V whatever the key's d (its kernels are
    # the exponentials of the keys, whose count is Tk, not d)
    dv = static_shape(call.args[2])[-1]
    bias = key_bias = None
    if len(call.args) > 3 and call.args[3] is not None and not is_constant(call.args[3]):
        # a padding mask's bias, copied to the queries by compiler/attention.py: the scores'
        # SDP reads it as its element-wise operand
        key_bias = call.args[3]
        if static_shape(key_bias) not in ((windows, 1, tokens, kv_tokens),
                                          (windows, heads, tokens, kv_tokens)):
            raise Unsupported(f"attention's computed bias {list(static_shape(key_bias))} is not "
                              f"[{windows}, 1 or {heads}, {tokens}, {kv_tokens}]: one per "
                              f"window (a batch's image), for every head or each its own")
        _require_float32(key_bias, "attention's computed bias")
    elif len(call.args) > 3 and call.args[3] is not None:
        bias = np.asarray(constant_value(call.args[3]), np.float32)
        if bias.ndim != 4 or bias.shape[0] not in (1, windows) or \
                bias.shape[1:] != (heads, tokens, kv_tokens):
            raise Unsupported(f"attention's bias of shape {list(bias.shape)} is not one "
                              f"[{tokens}, {kv_tokens}] per head (and window)")
    channels, sources = {}, {}
    per_head = None
    for i, (role, name) in enumerate((("query", "x"), ("key", "k"), ("value", "v"))):
        if probabilities and name == "v":
            sources[name] = None
            continue
        heads_of = call.args[i]  # reshape(data or a slice of it, [1, T, H, d])
        heads_of = heads_of if isinstance(heads_of, relax.Call) else _resolve(heads_of, lookup)
        if name == "x" and op_name(heads_of) == "relax.multiply":
            # Swin-V2's logit scale: a constant per head on the query's heads [1, 1, H, 1]
            factor = np.asarray(constant_value(heads_of.args[1]), np.float64)
            if factor.size not in (1, heads) or (factor.size == heads and (
                    factor.ndim < 2 or factor.shape[-2:] != (heads, 1))):
                raise Unsupported(f"attention's query scaled by a constant of shape "
                                  f"{list(factor.shape)}: one factor per head is generated")
            per_head = np.broadcast_to(factor.reshape(-1), (heads,))
            heads_of = heads_of.args[0]
            heads_of = heads_of if isinstance(heads_of, relax.Call) else \
                _resolve(heads_of, lookup)
        data = heads_of.args[0]
        sliced = data if isinstance(data, relax.Call) else _resolve(data, lookup)
        if op_name(sliced) == "relax.strided_slice":
            data = sliced.args[0]
        else:
            sliced = None
        width_of_heads = heads * (dv if name == "v" else d)
        first = 0
        shape = static_shape(data)
        if sliced is not None:
            axes, begin, end = (_tuple_ints(arg) for arg in sliced.args[1:4])
            strides = _tuple_ints(sliced.args[4]) if len(sliced.args) > 4 else (1,)
            if len(axes) != 1 or axes[0] % len(shape) != len(shape) - 1 or strides != (1,) or \
                    end[0] - begin[0] != width_of_heads:
                raise Unsupported("attention's input is a slice other than a channel range")
            first = begin[0]
        # the rows of the tensor: [tokens, channels] (a sequence-first batch's [T, B, C] is
        # [T, B x C], each image's heads more heads of the one image: compiler/attention.py;
        # Swin-V2's q and k, each head L2-normalised over its d channels, [tokens x heads, d]
        # is [tokens, heads x d])
        rows = windows * (tokens if name == "x" else kv_tokens)
        width = int(np.prod(shape)) // rows
        if width * rows != int(np.prod(shape)) or width < first + width_of_heads or \
                (sliced is not None and shape[-1] != width):
            raise Unsupported(f"attention's {role} {list(shape)} is not [tokens, channels]")
        _require_float32(data, f"attention's {role}")
        if _resolve(data, lookup) is not None and not is_constant(data):
            raise Unsupported("the chain's input is computed inside the matched region")
        channels[name] = (width, first)
        sources[name] = data
    _require_float32(call, "the attention output")
    scale = float(a.scale) if a.scale is not None else 1.0 / math.sqrt(d)
    if per_head is not None:
        scale = tuple(float(scale * f) for f in per_head)
    spec = AttentionSpec(sources["k"], sources["v"], heads, d, tokens, kv_tokens, scale,
                         channels, windows, bias, key_bias,
                         None if dv == d or probabilities else dv, groups)
    norm = NormSpec(None, None, 0.0, kind="attention", attention=spec)
    return Layer(data=sources["x"], in_shape=(windows * tokens, channels["x"][0], 1, 1),
                 out_shape=static_shape(root), tokens=True, norm=norm)


# --- BDMA copies --------------------------------------------------------------------------------

def _channel_axis(expr: relax.Expr, axis: int, what: str) -> None:
    rank = len(static_shape(expr))
    if rank not in (2, 3, 4) or axis % rank != 1:
        raise Unsupported(f"{what} along axis {axis} of a {rank}-D tensor: the BDMA copies "
                          "channel ranges of NCHW, [N, C, L] or [N, C] data")


def axis_view(shape: Sequence[int], axis: int) -> Tuple[int, int, int, int]:
    """A dense tensor's bytes as the (n, c, h, w) whose channels are ``axis``: the axes before
    it as n, the ones after it as w. A concat along that axis is then the BDMA's channel
    ranges (on NVDLA, whose BDMA copies lines and surfaces of any pitch, the same copies)."""
    return (int(np.prod(shape[:axis], dtype=np.int64)), int(shape[axis]), 1,
            int(np.prod(shape[axis + 1:], dtype=np.int64)))


def _concat(call: relax.Call, lookup: Lookup) -> Tuple[List[CopySpec], Optional[tuple]]:
    """The copies of a concat and the output's view: along the channels, none (each input
    is its own feature surface); along a later axis of a 3-D or 4-D tensor (a detection
    head's [N, C, L] along L), the inputs and output as their axis_view."""
    shape, axis = static_shape(call), int(call.attrs.axis)
    rank = len(shape)
    axis %= max(rank, 1)
    if rank not in (2, 3, 4) or axis == 0:
        raise Unsupported(f"a concat along axis {int(call.attrs.axis)} of a {rank}-D tensor: "
                          "the BDMA copies ranges of the channels (or of a later axis) of "
                          "NCHW, [N, C, L] or [N, C] data")
    fields = call.args[0]
    if isinstance(fields, relax.Var):
        fields = _resolve(fields, lookup) or fields
    if not isinstance(fields, relax.Tuple):
        raise Unsupported("a concat of a tuple computed elsewhere")
    copies, offset = [], 0
    for field in fields.fields:
        _require_float32(field, "a concat input")
        size = static_shape(field)[axis]
        view = axis_view(static_shape(field), axis) if axis > 1 else None
        copies.append(CopySpec(field, size, dst_offset=offset, view=view))
        offset += size
    return copies, axis_view(shape, axis) if axis > 1 else None


def _reshape_view(shape: Sequence[int], out: Sequence[int]) -> Tuple[int, int, int, int]:
    """The (n, c, 1, w) that both sides of a reshape (n: the batch where both keep it, else
    1) read as the same
    dense bytes: c the product of the most leading axes (after the batch) that end at the
    same place in both shapes, so that each "channel" is a whole line of each side (the
    channels themselves when both keep them)."""
    if tuple(shape[:2]) == tuple(out[:2]):
        return axis_view(shape, 1)
    # a reshape that moves the batch (Swin's windows: [1, H, W, C] <-> [windows, n, C]) is
    # one image of the lines both sides share
    n = int(shape[0]) if shape[0] == out[0] else 1
    total = int(np.prod(shape, dtype=np.int64))
    ends = set(np.cumprod(shape[:-1], dtype=np.int64).tolist()) & \
        set(np.cumprod(out[:-1], dtype=np.int64).tolist())
    common = max((e for e in ends if e % n == 0), default=n)
    return (n, common // n, 1, total // common)


def _reshape(call: relax.Call) -> Tuple[List[CopySpec], tuple]:
    """A reshape that keeps the batch ([N, C, H, W] <-> [N, C, H*W] <-> [N, C, 1, L],
    [N, C, 1, 1] <-> [N, C], [N, 4*R, L] <-> [N, 4, R, L], [N, 1, 4, L] <-> [N, 4, L]): the
    same elements in the same order, so the same dense bytes; one BDMA copy of the lines both
    sides share (_reshape_view; on NVDLA's feature format, which pads the channels, a copy
    per line where the channels change: the BDMA's lines and surfaces of any pitch). A channel
    shuffle is read first (_shuffle)."""
    x = call.args[0]
    shape, out = static_shape(x), static_shape(call)
    if is_constant(x):
        raise Unsupported("a reshape of a constant (folded at compile time)")
    if len(shape) < 2 or len(out) < 2 or len(shape) > 4 or len(out) > 4:
        raise Unsupported(f"a reshape of {list(shape)} to {list(out)}: the BDMA copies "
                          "NCHW, [N, C, L] or [N, C] data (2 to 4 axes)")
    view = _reshape_view(shape, out)
    return [CopySpec(x, view[1], view=view)], view


def _swapped_axes(axes: Optional[Tuple[int, ...]], rank: int) -> Optional[int]:
    """i when ``axes`` (of a permute_dims) swaps the adjacent axes i and i + 1 (i >= 1) and
    keeps the others; else None."""
    if axes is None:
        return None
    axes = tuple(a % rank for a in axes)
    for i in range(1, rank - 1):
        if axes == tuple(range(i)) + (i + 1, i) + tuple(range(i + 2, rank)):
            return i
    return None


def _transpose(call: relax.Call) -> Tuple[List[CopySpec], tuple]:
    """permute_dims swapping two adjacent axes after the batch: [N, R, S] -> [N, S, R] (a
    detection head's [N, C, L] into [N, L, C] rows, a ViT's patch map into tokens),
    [N, A, B, L] -> [N, B, A, L] (YOLOv8's DFL). The axes before the pair as n, the pair as
    R * S "channels", the axes after it as the line each channel is: out[s * R + r] =
    x[r * S + s], one BDMA run: a strided copy of a row of the smaller side, repeated once
    per row (accel.h's repeat; it was one run per row: a ViT's 192 patch-map rows 192 runs).
    On NVDLA the patch map and the tokens are the same surface [N, C, 1, L] and nothing
    moves; the simulator's dense tensors do move, and the copy is charged."""
    x = call.args[0]
    if is_constant(x):
        raise Unsupported("a transpose of a constant (folded at compile time)")
    shape = static_shape(x)
    axes = _ints(call.attrs.axes) if call.attrs.axes is not None else None
    i = _swapped_axes(axes, len(shape)) if len(shape) in (3, 4) else None
    if i is None:
        raise Unsupported(f"a permute_dims {list(axes) if axes else 'reversing the axes'} of a "
                          f"{len(shape)}-D tensor: the BDMA swaps two adjacent axes after the "
                          "batch of [N, R, S] or [N, A, B, L] only")
    n = int(np.prod(shape[:i], dtype=np.int64))
    r, s = shape[i], shape[i + 1]
    line = int(np.prod(shape[i + 2:], dtype=np.int64))
    view = (n, r * s, 1, line)
    if r <= s:  # row j of R: S channels in order, written every R from j
        copy = CopySpec(x, s, dst_stride=r, view=view, repeat=r - 1, src_repeat_stride=s,
                        dst_repeat_stride=1)
    else:  # column j of S: R channels read every S from j, written in order from j * R
        copy = CopySpec(x, r, src_stride=s, view=view, repeat=s - 1, src_repeat_stride=1,
                        dst_repeat_stride=r)
    return [copy], view


def _slice(call: relax.Call) -> Tuple[List[CopySpec], Optional[tuple]]:
    x = call.args[0]
    axes, begin, _ = (_tuple_ints(arg) for arg in call.args[1:4])
    strides = _tuple_ints(call.args[4]) if len(call.args) > 4 else (1,) * len(axes)
    shape = static_shape(x)
    rank = len(shape)
    # The rank first: a 1-D or 0-D tensor has no channel axis to read.
    if rank not in (2, 3, 4) or len(axes) != 1 or axes[0] % rank == 0 or strides[0] < 1:
        raise Unsupported(f"a slice along axes {list(axes)} (strides {list(strides)}) of a "
                          f"{rank}-D tensor: the BDMA copies ranges of the channels (or of a "
                          "later axis) of NCHW, [N, C, L] or [N, C] data, in order")
    axis = axes[0] % rank
    channels = shape[axis]
    out = static_shape(call)
    start = begin[0] + channels if begin[0] < 0 else min(begin[0], channels)
    if axis == 1:
        return [CopySpec(x, out[1], src_offset=start, src_stride=strides[0])], None
    # along a later axis (Swin's rolls and patch merging's phases of [B, H, W, C]): the
    # axis as the copy's channels of the tensor's axis_view, as a concat along it
    return [CopySpec(x, out[axis], src_offset=start, src_stride=strides[0],
                     view=axis_view(shape, axis))], axis_view(out, axis)


def _tuple_ints(arg: relax.Expr) -> Tuple[int, ...]:
    """The integers of a strided_slice argument (a tuple of immediates)."""
    if not isinstance(arg, relax.Tuple):
        raise Unsupported("a slice with computed bounds")
    return tuple(int(getattr(f, "value", f)) for f in arg.fields)


def _shuffle(call: relax.Call, lookup: Lookup) -> List[CopySpec]:
    """reshape(permute_dims(reshape(x, [N, g, C/g, H, W]), [0, 2, 1, 3, 4]), [N, C, H, W]):
    g copies, group j's channels to every g-th output channel from j."""
    permuted = _resolve(call.args[0], lookup)
    grouped = _resolve(permuted.args[0], lookup) if op_name(permuted) == "relax.permute_dims" \
        else None
    if op_name(grouped) != "relax.reshape" or permuted.attrs.axes is None or \
            _ints(permuted.attrs.axes) != (0, 2, 1, 3, 4):
        raise Unsupported("a reshape other than a channel shuffle")
    x = grouped.args[0]
    shape, split = static_shape(x), static_shape(grouped)
    if len(shape) != 4 or static_shape(call) != shape or split != (
            shape[0], split[1], shape[1] // split[1], shape[2], shape[3]):
        raise Unsupported("a reshape other than a channel shuffle")
    groups, per_group = split[1], split[2]
    return [CopySpec(x, per_group, src_offset=j * per_group, dst_offset=j, dst_stride=groups)
            for j in range(groups)]


# Relax op -> its copies, and what the report calls it.
COPIES = {"relax.concat": "relax.concat", "relax.strided_slice": "relax.strided_slice",
          "relax.reshape": "relax.reshape (channel shuffle)",
          "relax.permute_dims": "relax.permute_dims (transpose)"}


def _is_shuffle(call: relax.Call, lookup: Lookup) -> bool:
    permuted = _resolve(call.args[0], lookup)
    return op_name(permuted) == "relax.permute_dims" and \
        op_name(_resolve(permuted.args[0], lookup)) == "relax.reshape"


def _lower_copies(call: relax.Call, lookup: Lookup) -> Layer:
    name = op_name(call)
    out_view, source = None, COPIES[name]
    if name == "relax.concat":
        copies, out_view = _concat(call, lookup)
    elif name == "relax.strided_slice":
        copies, out_view = _slice(call)
    elif name == "relax.permute_dims":
        copies, out_view = _transpose(call)
    elif _is_shuffle(call, lookup):
        copies = _shuffle(call, lookup)
    else:
        (copies, out_view), source = _reshape(call), "relax.reshape"
    for copy in copies:
        if _resolve(copy.source, lookup) is not None and not is_constant(copy.source):
            raise Unsupported("a copy of a tensor computed inside the matched region")
        _require_float32(copy.source, "the copied tensor")
    _require_float32(call, "the output")
    data = copies[0].source
    return Layer(data=data, in_shape=copies[0].view or _feature_shape(data, "the copied tensor"),
                 out_shape=static_shape(call), copies=copies, copy_source=source,
                 out_view=out_view)


# --- nearest upsampling: BDMA copies + RUBIK contract ----------------------------------------

UPSAMPLE = "relax.image.resize2d"


def _nearest_indices(in_size: int, out_size: int, mode: str, rounding: str) -> np.ndarray:
    """The input index each output index reads in TVM's nearest resize2d (topi's get_inx and
    get_closest_index, in float32 as it computes them), clamped as it clamps them."""
    in_x = resize_coordinates(in_size, out_size, mode)
    if in_x is None:
        raise Unsupported(f"resize2d with coordinate_transformation_mode = {mode}")
    if rounding == "":
        rounding = "round" if mode == "align_corners" else "floor"
    if mode == "asymmetric" and rounding == "floor" and out_size % in_size == 0:
        index = np.arange(out_size) // (out_size // in_size)  # topi's integer division
    elif rounding == "round":
        index = np.round(in_x)
    elif rounding == "round_prefer_floor":
        index = np.ceil(in_x - np.float32(0.5))
    elif rounding == "round_prefer_ceil":
        index = np.floor(in_x + np.float32(0.5))
    elif rounding == "floor":
        index = np.floor(in_x + np.float32(1e-5))
    elif rounding == "ceil":
        index = np.ceil(in_x - np.float32(1e-5))
    else:
        raise Unsupported(f"resize2d with rounding_method = {rounding}")
    return np.clip(index.astype(np.int64), 0, in_size - 1)


def _lower_upsample(call: relax.Call, lookup: Lookup) -> Layer:
    """resize2d, nearest, by an integer factor per axis whose coordinate mode and rounding
    read input index i // s at output index i: the s_y * s_x phases are the input itself, so
    one BDMA copy per phase into its channel group makes the cube a RUBIK contract turns into
    the output (:func:`~accel_codegen.sim.deconv.upsample_nearest_as_conv_weights`: the same
    cube without the CONV's MACs)."""
    a = call.attrs
    x = call.args[0]
    if str(a.method) == "linear":  # what neither rewrite of a linear resize took
        sizes = f"{list(static_shape(x)[2:])} -> {list(static_shape(call)[2:])}"
        raise Unsupported(f"bilinear resize2d {sizes} with coordinate mode "
                          f"{a.coordinate_transformation_mode}: bilinear runs as a "
                          "deconvolution of its tent kernel (half-pixel centres, an even "
                          "integer factor in H and W) or as a dense layer per axis (modes "
                          "align_corners, asymmetric, half_pixel, pytorch_half_pixel) of "
                          "NCHW float data without a region of interest")
    if str(a.method) != "nearest_neighbor":
        raise Unsupported(f"resize2d with method = {a.method}: the RUBIK upsampling is "
                          "nearest-neighbour only")
    if str(a.layout) != "NCHW":
        raise Unsupported(f"resize2d layout is {a.layout}; the engines take NCHW")
    if a.out_dtype is not None and str(a.out_dtype) not in ("", "float32"):
        raise Unsupported(f"resize2d out_dtype is {a.out_dtype}")
    if any(float(getattr(v, "value", v)) != 0.0 for v in a.roi):
        raise Unsupported("resize2d with a region of interest")
    _require_float32(x, "the input")
    _require_float32(call, "the output")
    shape, out = static_shape(x), static_shape(call)
    if len(shape) != 4 or len(out) != 4:
        raise Unsupported(f"resize2d of a {len(shape)}-D tensor")
    scales = []
    for axis, what in ((2, "height"), (3, "width")):
        if out[axis] % shape[axis]:
            raise Unsupported(f"resize2d of {what} {shape[axis]} to {out[axis]}: not an "
                              "integer scale")
        scale = out[axis] // shape[axis]
        index = _nearest_indices(shape[axis], out[axis], str(a.coordinate_transformation_mode),
                                 str(a.rounding_method))
        if not np.array_equal(index, np.arange(out[axis]) // scale):
            raise Unsupported(
                f"resize2d with coordinate_transformation_mode = "
                f"{a.coordinate_transformation_mode} and rounding_method = "
                f"{a.rounding_method or '(default)'} does not repeat each input {what} "
                f"{scale} times")
        scales.append(scale)
    sy, sx = scales
    if sy * sx == 1:
        raise Unsupported("resize2d to the same size: nothing for the engines to do")
    channels = shape[1]
    if _resolve(x, lookup) is not None and not is_constant(x):
        raise Unsupported("an upsampling of a tensor computed inside the matched region")
    copies = [CopySpec(x, channels, dst_offset=phase * channels) for phase in range(sy * sx)]
    return Layer(data=x, in_shape=shape, out_shape=out, copies=copies,
                 copy_source=f"{UPSAMPLE} (nearest, x{sy}x{sx})",
                 rubik=RubikSpec(sx, sy, f"{UPSAMPLE} (nearest)"))


# --- CDP ------------------------------------------------------------------------------------------

def _scalar_of(expr: relax.Expr) -> Optional[float]:
    if is_constant(expr) and constant_value(expr).size == 1:
        return float(constant_value(expr).reshape(-1)[0])
    return None


def _local_response_norm(call: relax.Expr, lookup: Lookup) -> Optional[Layer]:
    """torch's LocalResponseNorm as its frontend decomposes it: x / (k + alpha *
    avg_pool3d(pad(reshape(x * x)))).pow(beta), the average over ``size`` channels with
    size // 2 zeros before and (size - 1) // 2 after; None for anything else."""
    if op_name(call) != "relax.divide":
        return None
    x = call.args[0]
    chain = [("relax.power", 1), ("relax.add", 1), ("relax.multiply", 1), ("relax.squeeze", None),
             ("relax.nn.avg_pool3d", None), ("relax.nn.pad", None), ("relax.reshape", None),
             ("relax.multiply", None)]
    value, scalars, calls = _resolve(call.args[1], lookup), [], {}
    for name, scalar_arg in chain:
        if op_name(value) != name:
            return None
        calls.setdefault(name, value)
        if scalar_arg is not None:
            scalars.append(_scalar_of(value.args[scalar_arg]))
        if name == "relax.multiply" and scalar_arg is None:
            break
        value = _resolve(value.args[0], lookup)
    square = value
    beta, k, alpha = scalars
    pool, pad = calls["relax.nn.avg_pool3d"], calls["relax.nn.pad"]
    size = int(pool.attrs.pool_size[0])
    width = [int(w) for w in pad.attrs.pad_width]
    if None in scalars or not (square.args[0].same_as(x) and square.args[1].same_as(x)) or \
            width != [0, 0, 0, 0, size // 2, (size - 1) // 2, 0, 0, 0, 0] or \
            float(pad.attrs.pad_value) != 0.0 or not bool(pool.attrs.count_include_pad) or \
            [int(v) for v in pool.attrs.pool_size] != [size, 1, 1] or \
            any(int(v) != 1 for v in pool.attrs.strides) or \
            any(int(v) != 0 for v in pool.attrs.padding) or \
            any(int(v) != 1 for v in pool.attrs.dilation) or \
            str(pool.attrs.layout) != "NCDHW" or str(pool.attrs.out_layout) != "NCDHW" or \
            str(pad.attrs.pad_mode) != "constant" or not _lrn_shapes(x, calls):
        return None
    _require_float32(x, "the input")
    return Layer(data=x, in_shape=_feature_shape(x, "the input"), out_shape=static_shape(call),
                 lrn=LrnSpec(size, alpha, beta, k))


def _lrn_shapes(x: relax.Expr, calls) -> bool:
    """LRN's reshape gives [N, 1, C, H, W] (the pool runs over channels) and its squeeze gives
    x's shape back."""
    try:
        shape = static_shape(x)
        return len(shape) == 4 and static_shape(calls["relax.reshape"]) == (
            shape[0], 1, *shape[1:]) and static_shape(calls["relax.squeeze"]) == shape
    except Unsupported:
        return False


def _channel_operand(other: relax.Expr, name: str, channels: int, lookup: Lookup
                     ) -> relax.Expr:
    """The per-channel scale or shift an operand gives: itself (read from behind a reshape),
    or a constant [C] for a single value, a subtrahend (negated) or a divisor (inverted)."""
    operand = _strip_reshape(other, lookup)
    single = is_constant(operand) and constant_value(operand).size == 1
    if name not in AFFINE_ONLY and not single:
        return operand
    if not is_constant(operand):
        raise Unsupported(f"{name} by a runtime tensor: the SDP subtracts or divides by "
                          "constants only (as its shift or scale)")
    values = np.broadcast_to(constant_value(operand).astype(np.float64).reshape(-1), (channels,))
    if name == "relax.subtract":
        values = -values
    elif name == "relax.divide":
        if np.any(values == 0):
            raise Unsupported("a division by zero")
        values = 1.0 / values
    return relax.const(np.ascontiguousarray(values, np.float32))


def _decomposed_activation(call: relax.Expr, lookup: Lookup
                           ) -> Optional[Tuple[str, relax.Expr]]:
    """(activation, its input) for the op groups the frontends decompose activations the LUT
    runs into: hardsigmoid = clip(x + 3, 0, 6) / 6 and hardswish = x * clip(x + 3, 0, 6) / 6
    (each clip possibly as two one-sided ones), mish = x * tanh(softplus(x)); None for
    anything else."""
    if op_name(call) == "relax.multiply":
        for x, outer in (call.args, call.args[::-1]):
            tanh = _resolve(outer, lookup)
            if op_name(tanh) == "relax.tanh":
                source = _softplus_input(tanh.args[0], lookup)
                if source is not None and source.same_as(x):
                    return _available("mish", x)
        return None
    if op_name(call) == "relax.divide" and _is_scalar(call.args[0], 1.0):
        # the LUT's reciprocal equals 1 / x where x is in its domain: x held above a
        # positive bound by its chain's maximum (rewrites.per_row_products' pooling count)
        held = _resolve(call.args[1], lookup)
        if op_name(held) == "relax.maximum" and any(
                is_constant(b) and constant_value(b).size == 1 and
                float(constant_value(b).reshape(-1)[0]) > 0.0 for b in held.args):
            return _available("reciprocal", call.args[1])
        return None
    if op_name(call) != "relax.divide" or not _is_scalar(call.args[1], 6.0):
        return None
    inner = _resolve(call.args[0], lookup)
    if op_name(inner) == "relax.multiply":
        for x, clipped in (inner.args, inner.args[::-1]):
            source = _relu6_plus3_input(clipped, lookup)
            if source is not None and source.same_as(x):
                return _available("hardswish", x)
        return None
    source = _relu6_plus3_input(call.args[0], lookup)
    return None if source is None else _available("hardsigmoid", source)


#: mish's softplus: tanh(softplus(x)) is 1 in fp32 from x = 10 on, so a threshold from there
#: (x itself above it) gives mish's values.
MISH_SOFTPLUS_THRESHOLD = 10.0


def _softplus_input(expr: relax.Expr, lookup: Lookup) -> Optional[relax.Expr]:
    """x, where expr is softplus(x) with beta 1 and a threshold from
    MISH_SOFTPLUS_THRESHOLD on (the frontends' formulas are relax.nn.softplus by now:
    rewrites.softplus_from_formula)."""
    value = _resolve(expr, lookup)
    if op_name(value) != "relax.nn.softplus" or float(value.attrs.beta) != 1.0 or \
            float(value.attrs.threshold) < MISH_SOFTPLUS_THRESHOLD:
        return None
    return value.args[0]


def _available(act: str, x: relax.Expr) -> Optional[Tuple[str, relax.Expr]]:
    return (act, x) if act in vocabulary.ACTIVATIONS else None


def _is_scalar(expr: relax.Expr, value: float) -> bool:
    return is_constant(expr) and constant_value(expr).size == 1 and \
        float(constant_value(expr).reshape(-1)[0]) == value


def _clip_bounds(call: relax.Call) -> Tuple[float, float]:
    bounds = []
    for bound in call.args[1:3]:
        value = getattr(bound, "value", None)
        value = getattr(value, "value", value)  # a PrimValue wraps the immediate
        if not isinstance(value, (int, float)):
            raise Unsupported("clip with non-constant bounds")
        bounds.append(float(value))
    return bounds[0], bounds[1]


def _relu6_plus3_input(expr: relax.Expr, lookup: Lookup) -> Optional[relax.Expr]:
    """x, where expr is clip(x + 3, 0, 6) (or clip(clip(x + 3, 0, inf), -inf, 6)) in-chain."""
    value = _resolve(expr, lookup)
    low, high = -np.inf, np.inf
    while op_name(value) == "relax.clip":
        lo, hi = _clip_bounds(value)
        low, high = max(low, lo), min(high, hi)
        value = _resolve(value.args[0], lookup)
    if (low, high) != (0.0, 6.0) or op_name(value) != "relax.add":
        return None
    for x, three in (value.args, value.args[::-1]):
        if _is_scalar(three, 3.0) and not is_constant(x):
            return x
    return None


def explain(call: relax.Call, config: AccelConfig, precision: str = "fp32") -> str:
    """Why a single host op is not offloaded (used for ops no pattern took)."""
    name = op_name(call)
    if name is None:
        return "not an operator call"
    if name == "relax.call_tir":
        try:
            lower_chain(call, lambda var: None).check_hardware(config, True, precision)
        except Unsupported as reason:
            return str(reason)
        return "supported, but left on the host by the partitioner"
    known = (set(vocabulary.ACTIVATIONS.by_relax_op) | set(ELEMENTWISE) | set(POOLS) | set(AFFINE_ONLY) | set(COPIES) |
             {"relax.nn.leakyrelu", "relax.nn.conv2d", DECONV, UPSAMPLE, "relax.matmul", "relax.nn.batch_norm", "relax.mean",
              "relax.nn.adaptive_avg_pool2d", "relax.nn.layer_norm", "relax.nn.rms_norm"} |
             {f"relax.nn.{op}" for op in chains.SOFTMAXES})
    if name == "relax.nn.attention":  # only with its head reshapes: accel.attention
        return ("attention runs on the accelerator as reshape(nn.attention(...)) of one "
                "image's [tokens, channels] tensors (compiler/attention.py writes it so)")
    if name == "relax.nn.pad":
        return (f"a {call.attrs.pad_mode} padding with value {float(call.attrs.pad_value):g}: "
                "only a zero padding of H and W right before a convolution runs on the "
                "accelerator (as the convolution's own padding)")
    if name not in known:
        return f"no accelerator primitive for {name}"
    try:
        layer = lower_chain(call, lambda var: None)
        layer.check_hardware(config, True, precision)
    except Unsupported as reason:
        return str(reason)
    return "supported alone, but left on the host by the partitioner (its operand is produced " \
           "by a neighbour that could not be fused with it)"
