"""The chains the accelerator runs in one pass, as annotated dataflow patterns.

Each factory returns a pattern and its annotations: role name -> the pattern node that plays it
(TVM's backends do the same: ``make_conv2d_pattern`` annotates "input", "weight", "root"). The
partitioner's check reads the roles from ``ctx.annotated_expr`` and the lowering builds the
layer from them (:func:`accel_codegen.compiler.lowering.lower_chain`); the code generator,
which sees a composite function, matches its entry again (:func:`match_roles`), as TVM's own
code generators do.

Roles: "input" (the chain's data), "conv", "deconv" (a transposed convolution), "dense"
(+ "flatten"), "bias", "bn" (the batch_norm
call), "residual" (the add with a second tensor) and its "operand", "branch_conv",
"branch_bias", "branch_bn" (ResNet's downsample conv + BN feeding the add), "act", "pool", "ew"
(an element-wise op with a second tensor), "affine", "scale", "shift" (the SDP's scale/shift by
constants). A role that has kinds is annotated twice: "act" on the alternation and "act:relu"
on the alternative that matched; the kind fills the ``{act}`` field of the entry's name
(``accel.conv2d_bias_bn_{act}`` gives the composite ``accel.conv2d_bias_bn_relu``).

Which kind of activation, pool or element-wise op is an alternation (``|``) inside one entry:
a new activation in the vocabulary adds no entry. Whether each optional stage is present stays
one entry per combination, longest first: FuseOpsByPattern gives earlier entries priority and
takes, at each op, the first alternative of a pattern that matches; a check that refuses a
longer chain must leave the shorter ones to later entries (MobileNetV2's add of two conv + BN
chains, one of which other layers read, is taken from its other operand that way).
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Dict, List, Optional, Tuple

import tvm
from tvm import relax
from tvm.relax.dpl import (CallPattern, DFPattern, ExprPattern, OrPattern, is_const, is_op,
                           is_tuple_get_item, wildcard)

from ..sim import vocabulary

#: Annotations: role name -> pattern node.
Annotations = Dict[str, DFPattern]
#: softmax and log_softmax (relax.nn.<name>): the token entries' engine passes, alike in
#: their axes (lowering._lower_tokens), kinds of one entry (composites accel.<name>).
SOFTMAXES = ("softmax", "log_softmax")
#: The Relax ops the SDP runs only with a constant second operand (as its scale/shift).
AFFINE_OPS = ("relax.subtract", "relax.divide")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One pattern of the table: its name (``{field}`` filled from the match), the pattern,
    its annotations and its length in stages (the table's order: longest first)."""

    name: str
    pattern: DFPattern
    annotations: Annotations
    length: int


# --- activations, pools and element-wise ops, from the vocabulary -------------------------------

def _either_order(op: str, x: DFPattern, other: DFPattern) -> DFPattern:
    return is_op(op)(x, other) | is_op(op)(other, x)


def _relu6_plus3(x: DFPattern) -> DFPattern:
    """clip(x + 3, 0, 6), as one clip or as torch's two one-sided ones."""
    once = is_op("relax.clip")(_either_order("relax.add", x, is_const()), wildcard(), wildcard())
    return is_op("relax.clip")(once, wildcard(), wildcard()) | once


def _hardsigmoid(x: DFPattern) -> DFPattern:
    return is_op("relax.divide")(_relu6_plus3(x), is_const())


def _hardswish(x: DFPattern) -> DFPattern:
    return is_op("relax.divide")(_either_order("relax.multiply", x, _relu6_plus3(x)), is_const())


def _decomposed_prelu(x: DFPattern) -> DFPattern:
    """torch.export decomposes PReLU into where(x > 0, x, alpha * x)."""
    alpha = is_op("relax.reshape")(wildcard(), wildcard()) | wildcard()
    negative = is_op("relax.multiply")(alpha, x)
    return is_op("relax.where")(is_op("relax.greater")(x, wildcard()), x, negative)


def _softplus(x: DFPattern) -> DFPattern:
    """softplus(x): the frontends' formulas for it are read back as the op before matching
    (rewrites.softplus_from_formula)."""
    return is_op("relax.nn.softplus")(x)


def _mish(x: DFPattern) -> DFPattern:
    return _either_order("relax.multiply", x, is_op("relax.tanh")(_softplus(x)))


def _reciprocal(x: DFPattern) -> DFPattern:
    """1 / x (lowering.py takes it only of a divisor held above a positive bound in its own
    chain: the LUT answers its table's start for x <= 0, where IEEE's 1 / x does not)."""
    return is_op("relax.divide")(is_const(), x)


#: Activations the frontends decompose into several ops (lowering.py checks their constants).
DECOMPOSED = {"hardsigmoid": _hardsigmoid, "hardswish": _hardswish, "mish": _mish,
              "reciprocal": _reciprocal}


def _one_op(entry: vocabulary.Entry, x: DFPattern) -> DFPattern:
    pattern = is_op(entry.relax_op)(x, *(wildcard() for _ in range(entry.relax_args)))
    if entry.name == "prelu":  # also leaky ReLU: one slope for every channel
        return pattern | _decomposed_prelu(x) | is_op("relax.nn.leakyrelu")(x)
    return pattern


def _kinds(role: str, forms: List[Tuple[str, DFPattern]], annotations: Annotations
           ) -> DFPattern:
    """The alternation of ``forms`` (kind, pattern), annotated as ``role`` and each form as
    ``role:kind``."""
    pattern = None
    for kind, form in forms:
        annotations[f"{role}:{kind}"] = form
        pattern = form if pattern is None else pattern | form
    annotations[role] = pattern
    return pattern


def activation(x: DFPattern, annotations: Annotations) -> DFPattern:
    """Any activation of the vocabulary applied to x (role "act")."""
    forms = []
    for entry in vocabulary.ACTIVATIONS:
        if entry.relax_op:
            forms.append((entry.name, _one_op(entry, x)))
        elif entry.name in DECOMPOSED:
            forms.append((entry.name, DECOMPOSED[entry.name](x)))
    return _kinds("act", forms, annotations)


def pool(x: DFPattern, annotations: Annotations) -> DFPattern:
    """Any pool of the vocabulary applied to x (role "pool")."""
    return _kinds("pool", [(f"{e.name}pool", _one_op(e, x)) for e in vocabulary.POOLS],
                  annotations)


def elementwise(x: DFPattern, other: DFPattern, annotations: Annotations) -> DFPattern:
    """Any element-wise op of the vocabulary of x and a second tensor (role "ew")."""
    return _kinds("ew", [(e.name, is_op(e.relax_op)(x, other))
                         for e in vocabulary.ELEMENTWISE if e.relax_op], annotations)


# --- the stages of a chain ----------------------------------------------------------------------

def conv2d(annotations: Annotations) -> DFPattern:
    data, weight = wildcard(), wildcard()
    conv = is_op("relax.nn.conv2d")(data, weight)
    annotations.update(input=data, weight=weight, conv=conv)
    return conv


def conv2d_transpose(annotations: Annotations) -> DFPattern:
    """A transposed convolution (role "deconv"): a CONV of its phase kernels, then a RUBIK
    contract (lowering.py)."""
    data, weight = wildcard(), wildcard()
    deconv = is_op("relax.nn.conv2d_transpose")(data, weight)
    annotations.update(input=data, weight=weight, deconv=deconv)
    return deconv


def dense(flatten: bool, annotations: Annotations) -> DFPattern:
    """matmul(x, permute_dims(W)) or matmul(x, W'); with ``flatten``, x = reshape(data)
    (a flatten of NCHW data moves nothing: the layer reads the same memory as [N, C*H*W])."""
    data, weight = wildcard(), wildcard()
    annotations.update(input=data, weight=weight)
    if flatten:
        data = annotations["flatten"] = is_op("relax.reshape")(data, wildcard())
    out = is_op("relax.matmul")(data, is_op("relax.permute_dims")(weight)) | is_op(
        "relax.matmul")(data, weight)
    annotations["dense"] = out
    return out


def bias_add(x: DFPattern, annotations: Annotations, role: str = "bias") -> DFPattern:
    """torch gives add(conv, reshape(bias)); ONNX and folded constants add a [1, C, 1, 1]."""
    bias = wildcard()
    out = is_op("relax.add")(x, is_op("relax.reshape")(bias, wildcard())) | is_op(
        "relax.add")(x, bias)
    annotations[role] = out
    return out


def batch_norm(x: DFPattern, annotations: Annotations, role: str = "bn",
               item: bool = True) -> DFPattern:
    """batch_norm(x)[0]; ``item`` False: the call itself (TVM's matcher cannot end a pattern at
    a tuple item: a chain that ends in batch norm ends at the op, see ``first_item_only``)."""
    call = is_op("relax.nn.batch_norm")(x, wildcard(), wildcard(), wildcard(), wildcard())
    annotations[role] = call
    return is_tuple_get_item(call, 0) if item else call


def residual(x: DFPattern, order: str, annotations: Annotations) -> DFPattern:
    """add(x, other) ("first") or add(other, x) ("second"); "branch" / "bias_branch": the
    other operand is a conv (+ bias) + batch norm of its own, which joins the chain."""
    if order in ("branch", "bias_branch"):
        branch = is_op("relax.nn.conv2d")(wildcard(), wildcard())
        annotations["branch_conv"] = branch
        if order == "bias_branch":
            branch = is_op("relax.add")(branch, is_op("relax.reshape")(wildcard(), wildcard())) \
                | is_op("relax.add")(branch, wildcard())
            annotations["branch_bias"] = branch
        other = batch_norm(branch, annotations, "branch_bn")
        out = is_op("relax.add")(x, other)
    else:
        other = wildcard()
        out = is_op("relax.add")(x, other) if order == "first" else is_op("relax.add")(other, x)
    annotations.update(residual=out, operand=other)
    return out


def constant_factor(x: DFPattern, annotations: Annotations) -> DFPattern:
    """x times a constant of x's shape (role "factor": the SDP's element-wise multiplier
    reading its operand from memory; an average's border factors after its depthwise sum,
    rewrites.varying_divisor_averages)."""
    out = is_op("relax.multiply")(x, is_const())
    annotations["factor"] = out
    return out


# --- the table ----------------------------------------------------------------------------------

def _epilogue(out: DFPattern, annotations: Annotations, name: str, length: int, *, bias=False,
              bn=False, res=False, factor=False, act=False, pool_=False) -> Entry:
    """The optional SDP and PDP stages after ``out``, in the order one pass runs them."""
    if bias:
        out, name, length = bias_add(out, annotations), name + "_bias", length + 1
    if factor:
        out, name, length = constant_factor(out, annotations), name + "_mul", length + 1
    if bn:
        last = not (res or act or pool_)
        out, name, length = batch_norm(out, annotations, item=not last), name + "_bn", length + 1
    if res:
        out = residual(out, res, annotations)
        name += "_add" + ("_" + res.replace("branch", "conv2d_bn") if "branch" in res else "")
        length += 1 + (2 + (res == "bias_branch") if "branch" in res else 0)
    if act:
        out, name, length = activation(out, annotations), name + "_{act}", length + 1
    if pool_:
        out, name, length = pool(out, annotations), name + "_{pool}", length + 1
    return Entry(name, out, annotations, length)


def _conv_entries() -> List[Entry]:
    entries = []
    for bias, bn, res, act, pool_ in itertools.product(
            (True, False), (True, False), (False, "first", "second"), (False, True),
            (False, True)):
        annotations: Annotations = {}
        entries.append(_epilogue(conv2d(annotations), annotations, "accel.conv2d", 1,
                                 bias=bias, bn=bn, res=res, act=act, pool_=pool_))
    for bias, branch, act in itertools.product((True, False), ("branch", "bias_branch"),
                                               (False, True)):
        annotations = {}
        entries.append(_epilogue(conv2d(annotations), annotations, "accel.conv2d", 1,
                                 bias=bias, bn=True, res=branch, act=act))
    for bias, act in itertools.product((True, False), (False, True)):
        annotations = {}
        entries.append(_epilogue(conv2d(annotations), annotations, "accel.conv2d", 1,
                                 bias=bias, factor=True, act=act))
    return entries


def _deconv_entries() -> List[Entry]:
    """A transposed convolution and the per-channel SDP stages after it (bias, batch norm, an
    activation: the contract is a permutation, so they run on the phases before it)."""
    entries = []
    for bias, bn, act in itertools.product((True, False), (True, False), (False, True)):
        annotations: Annotations = {}
        entries.append(_epilogue(conv2d_transpose(annotations), annotations,
                                 "accel.conv2d_transpose", 1, bias=bias, bn=bn, act=act))
    return entries


def _dense_entries() -> List[Entry]:
    entries = []
    for flatten, bias, act in itertools.product((True, False), (True, False), (False, True)):
        annotations: Annotations = {}
        out = dense(flatten, annotations)
        entries.append(_epilogue(out, annotations, "accel.flatten_dense" if flatten else
                                 "accel.dense", 1 + flatten, bias=bias, act=act))
    return entries


def _standalone_entries() -> List[Entry]:
    entries = []
    for act in (False, True):
        annotations: Annotations = {}
        data = annotations["input"] = wildcard()
        entries.append(_epilogue(batch_norm(data, annotations, item=act), annotations,
                                 "accel.batch_norm", 1, act=act))
        annotations = {}
        data = annotations["input"] = wildcard()
        entries.append(_epilogue(elementwise(data, wildcard(), annotations), annotations,
                                 "accel.{ew}", 1, act=act))
        annotations = {}  # by a constant: the SDP's scale/shift
        data = annotations["input"] = wildcard()
        out = _kinds("affine", [(op.split(".")[-1], is_op(op)(data, is_const()))
                                for op in AFFINE_OPS], annotations)
        entries.append(_epilogue(out, annotations, "accel.{affine}", 1, act=act))
        annotations = {}  # x * c + d (or x / c - d): one scale/shift
        data = annotations["input"] = wildcard()
        scale = _kinds("scale", [(op, is_op(f"relax.{op}")(data, is_const()))
                                 for op in ("multiply", "divide")], annotations)
        shift = _kinds("shift", [(op, is_op(f"relax.{op}")(scale, is_const()))
                                 for op in ("add", "subtract")], annotations)
        entries.append(_epilogue(shift, annotations, "accel.{scale}_{shift}", 2, act=act))
    for role, build, name in (("act", activation, "accel.{act}"),
                              ("pool", pool, "accel.{pool}")):
        annotations = {}
        data = annotations["input"] = wildcard()
        entries.append(Entry(name, build(data, annotations), annotations, 1))
    # BDMA copies (lowering.COPIES), the CDP's LRN and the global pools: lowered by their op.
    # nearest upsampling by an integer factor: BDMA copies + RUBIK contract (lowering.py)
    entries.append(Entry("accel.upsample_nearest", is_op("relax.image.resize2d")(
        wildcard(), wildcard()), {}, 1))
    bounds = [wildcard() for _ in range(3)]  # axes, begin, end; strides optional
    entries.append(Entry("accel.slice", is_op("relax.strided_slice")(wildcard(), *bounds) | is_op(
        "relax.strided_slice")(wildcard(), *bounds, wildcard()), {}, 1))
    grouped = is_op("relax.reshape")(wildcard(), wildcard())
    entries.append(Entry("accel.channel_shuffle", is_op("relax.reshape")(
        is_op("relax.permute_dims")(grouped), wildcard()), {}, 3))
    # a concat (one copy per input), a reshape keeping the batch and channels (one copy), a
    # transpose of [N, R, S] (one per row): lowering._concat, _reshape, _transpose
    annotations = {}
    x = annotations["input"] = wildcard()
    entries.append(Entry("accel.{copy}", _kinds("copy", [
        ("concat", is_op("relax.concat")(x)),
        ("reshape", is_op("relax.reshape")(x, wildcard())),
        ("transpose", is_op("relax.permute_dims")(x))], annotations), annotations, 1))
    # torch's LocalResponseNorm, decomposed (lowering._local_response_norm reads it back)
    x = wildcard()
    summed = is_op("relax.nn.avg_pool3d")(is_op("relax.nn.pad")(
        is_op("relax.reshape")(is_op("relax.multiply")(x, x), wildcard())))
    denominator = is_op("relax.power")(is_op("relax.add")(is_op("relax.multiply")(
        is_op("relax.squeeze")(summed), is_const()), is_const()), is_const())
    # and F.normalize (an L2 norm over the last axis, decomposed the same way: x divided by a
    # norm of x; lowering._lower_l2_normalize, the passes of sim/decompose.py): one entry of
    # two kinds, matched before the standalone divide, abs, power and clip
    annotations = {"input": x}
    # and ConvNeXt-V2's GRN over the channels of NCHW data (rewrites.channels_last_sandwiches
    # gives its channels-last form so; lowering._lower_grn, sim/decompose.grn_passes)
    entries.append(Entry("accel.{norm}", _kinds("norm", [
        ("lrn", is_op("relax.divide")(x, denominator)), ("l2_normalize", l2_normalize(x)),
        ("grn", grn(x, annotations))], annotations), annotations, 9))
    for name, op in (("accel.global_avgpool", "relax.mean"),
                     ("accel.adaptive_avgpool", "relax.nn.adaptive_avg_pool2d")):
        annotations = {"input": wildcard()}
        annotations["pool"] = is_op(op)(annotations["input"])
        entries.append(Entry(name, annotations["pool"], annotations, 1))
    return entries


# --- token chains (issue 29): [batch, tokens, channels] tensors, layer norm over channels -------

def layer_norm(x: DFPattern, annotations: Annotations) -> DFPattern:
    """layer_norm(x, gamma, beta) or rms_norm(x, gamma) (role "norm"; its kind, "layer_norm"
    or "rms_norm", the entry name's ``{token_norm}``: "accel.{norm}" is the LRN and L2 norm
    entry's, and a template names one entry); lowering.py checks the axes (the last one)."""
    pattern = _kinds("token_norm", [
        ("layer_norm", is_op("relax.nn.layer_norm")(x, wildcard(), wildcard())),
        ("rms_norm", is_op("relax.nn.rms_norm")(x, wildcard()))], annotations)
    annotations["norm"] = pattern
    return pattern


def l2_normalize(x: DFPattern) -> DFPattern:
    """torch's F.normalize(x, dim) as torch.export spells it, x / broadcast_to(clip(power(
    sum(power(abs(x), 2), dim, keepdims), 0.5), eps, inf)) (also the squares as x * x, the
    root as sqrt, the clamp as maximum with a constant, the divisor not broadcast: ONNX's
    ReduceL2); lowering.py checks the exponents, the axis and eps."""
    squares = is_op("relax.power")(is_op("relax.abs")(x), is_const()) | is_op("relax.power")(
        x, is_const()) | is_op("relax.multiply")(x, x)
    total = is_op("relax.sum")(squares)
    norm = is_op("relax.power")(total, is_const()) | is_op("relax.sqrt")(total)
    clamped = is_op("relax.clip")(norm, wildcard(), wildcard()) | is_op("relax.maximum")(
        norm, is_const())
    return is_op("relax.divide")(x, is_op("relax.broadcast_to")(clamped, wildcard()) | clamped)


def grn(x: DFPattern, annotations: Annotations) -> DFPattern:
    """ConvNeXt-V2's global response normalisation, ``gamma * (x * nx) + beta + x`` with nx =
    gx / (mean(gx) + eps), gx the L2 norm of x over two axes, as torch.export spells it
    (``power(abs(x), 2)``, ``sum``, ``power(., 0.5)``) or ONNX (``x * x``, ``sum``, ``sqrt``),
    each product and sum in either order; roles ``grn_squares``, ``grn_sum``, ``grn_root``,
    ``grn_mean``, ``grn_eps``, ``grn_gamma``, ``grn_beta`` (:func:`grn_exponents` and
    lowering.py check the axes, the exponents and the
    constants' shapes). The same pattern over the channels-last tensor is what
    rewrites.channels_last_sandwiches reads back as this form over NCHW data."""
    squares = annotations["grn_squares"] = is_op("relax.power")(
        is_op("relax.abs")(x), is_const()) | is_op("relax.power")(x, is_const()) | is_op(
        "relax.multiply")(x, x)
    total = annotations["grn_sum"] = is_op("relax.sum")(squares)
    norm = annotations["grn_root"] = is_op("relax.power")(total, is_const()) | is_op(
        "relax.sqrt")(total)
    mean = annotations["grn_mean"] = is_op("relax.mean")(norm)
    eps = annotations["grn_eps"] = is_const()
    gamma = annotations["grn_gamma"] = is_const()
    beta = annotations["grn_beta"] = is_const()
    nx = is_op("relax.divide")(norm, _either_order("relax.add", mean, eps))
    scaled = _either_order("relax.multiply", _either_order("relax.multiply", x, nx), gamma)
    return _either_order("relax.add", _either_order("relax.add", scaled, beta), x)


def grn_exponents(squares: relax.Call, root: relax.Call, value) -> bool:
    """Whether a GRN's squares and root (:func:`grn`'s roles) are x^2 and ^0.5 (``value``
    reads a constant's values): the L2 norm its passes compute."""
    for call, exponent in ((squares, 2.0), (root, 0.5)):
        if call.op.name == "relax.power" and [float(v) for v in value(
                call.args[1]).reshape(-1)] != [exponent]:
            return False
    return True


def token_dense(bias: bool, annotations: Annotations) -> DFPattern:
    """A dense layer over the tokens of a [B, T, C] (or [B, H, W, C]) tensor: matmul(x, W^T)
    or matmul(x, W') on the 3-D or 4-D x (ONNX, Relax), or, as torch exports nn.Linear,
    between reshape(x, [B*T, C]) (role "flatten") and reshape(., [B, T, K]) (role
    "unflatten"); optionally + bias. The torch form's matmul and add are the roles
    "dense_flat" and "bias_flat" (lowering.py reads them as "dense" and "bias"); 2-D data
    without the reshapes is the dense entries' (an [N, C] batch of vectors)."""
    data, weight = wildcard(), wildcard()
    annotations.update(input=data, weight=weight)

    def matmul(source):
        return is_op("relax.matmul")(source, is_op("relax.permute_dims")(weight)) | is_op(
            "relax.matmul")(source, weight)

    flatten = annotations["flatten"] = is_op("relax.reshape")(data, wildcard())
    flat = annotations["dense_flat"] = matmul(flatten)
    direct = annotations["dense"] = matmul(data.has_ty(relax.TensorType(ndim=3, dtype="")) |
                                           data.has_ty(relax.TensorType(ndim=4, dtype="")))
    if bias:
        flat = bias_add(flat, annotations, "bias_flat")
        direct = bias_add(direct, annotations)
    unflatten = annotations["unflatten"] = is_op("relax.reshape")(flat, wildcard())
    return unflatten | direct


def _token_entries() -> List[Entry]:
    """layer norm over the channels of token tensors, alone (with an activation after it or
    not) or after a dense layer over the tokens and before an activation (the forum's
    relu(layer_norm(matmul(x, W)))): each one composite whose runs are the layer norm's
    engine passes (sim/decompose.py; lowering.py builds them); a dense layer over the tokens
    (+ bias, + activation) alone; softmax over the last axis. A dense layer then a layer norm
    without an activation is two composites of one function: the same runs, one entry fewer
    for each bias form."""
    entries = []
    # (bias: None for a layer norm alone, else whether the dense layer adds one; activation)
    for bias, act in ((None, False), (None, True), (True, True), (False, True)):
        annotations: Annotations = {}
        if bias is None:
            data = annotations["input"] = wildcard()
            name, length = "accel.{token_norm}", 1
        else:
            data = token_dense(bias, annotations)
            name = "accel.token_dense" + ("_bias" if bias else "") + "_{token_norm}"
            length = 4 + bias
        out = layer_norm(data, annotations)
        if act:
            out, name, length = activation(out, annotations), name + "_{act}", length + 1
        entries.append(Entry(name, out, annotations, length))
    for bias, act in itertools.product((True, False), (True, False)):  # a dense layer alone
        annotations = {}
        out = token_dense(bias, annotations)
        name = "accel.token_dense" + ("_bias" if bias else "")
        if act:
            out, name = activation(out, annotations), name + "_{act}"
        entries.append(Entry(name, out, annotations, 3 + bias + act))
    # attention's core, which compiler/attention.py reads back as one op: its engine passes
    # (sim/decompose.attention_passes), its inputs the token tensors (or channel ranges of one)
    annotations = {}
    heads = []
    for role in ("query", "key", "value"):
        data = annotations[role] = wildcard()
        sliced = annotations[f"{role}_slice"] = is_op("relax.strided_slice")(
            data, *(wildcard() for _ in range(3))) | is_op("relax.strided_slice")(
            data, *(wildcard() for _ in range(4)))
        heads.append(is_op("relax.reshape")(sliced | data, wildcard()))
    # Swin-V2's logit scale per head: the query's heads times a constant [1, 1, heads, 1]
    heads[0] = heads[0] | is_op("relax.multiply")(heads[0], is_const())
    annotations["input"] = annotations["query"]
    # Swin's windows add a constant (relative position bias, mask) to the scores; a padding
    # mask a computed bias (compiler/attention.py)
    annotations["attention"] = is_op("relax.nn.attention")(*heads) | is_op(
        "relax.nn.attention_bias")(*heads, is_const() | wildcard())
    entries.append(Entry("accel.attention", is_op("relax.reshape")(
        annotations["attention"], wildcard()), annotations, 8))
    # need_weights=True's head-averaged probabilities (compiler/attention.py): nn.attention of
    # the query's and key's heads with V a constant identity (each head's probabilities
    # themselves), the mean of each group of heads (an image's), [windows, T, groups, Tk],
    # its images put first where they are several heads of one (a sequence-first batch)
    annotations = {role: pattern for role, pattern in annotations.items()
                   if role not in ("attention", "value", "value_slice")}
    annotations["probabilities"] = is_op("relax.nn.attention")(
        heads[0], heads[1], is_const()) | is_op("relax.nn.attention_bias")(
        heads[0], heads[1], is_const(), is_const() | wildcard())
    mean = annotations["heads_mean"] = is_op("relax.mean")(is_op("relax.reshape")(
        annotations["probabilities"], wildcard()))
    annotations["images_first"] = is_op("relax.permute_dims")(mean)
    mean = annotations["images_first"] | mean
    # (the reshape to the tensor's own shape gone: a batch of one image's heads, [1, H, T, Tk])
    entries.append(Entry("accel.attention_weights",
                         is_op("relax.reshape")(mean, wildcard()) | mean, annotations, 8))
    # softmax or log_softmax over the last axis, and softsign, x / (1 + |x|) (as the
    # frontends write it), kinds ("passes:<kind>") of one entry, each a "norm" of engine
    # passes (sim/decompose.py); the field is not {norm}, the decomposed LRN's entry's name
    annotations = {}
    data = annotations["input"] = wildcard()
    softsign = is_op("relax.divide")(data, _either_order("relax.add", is_op("relax.abs")(data),
                                                         is_const()))
    norm = annotations["norm"] = _kinds(
        "passes", [(op, is_op(f"relax.nn.{op}")(data)) for op in SOFTMAXES] +
        [("softsign", softsign)], annotations)
    entries.append(Entry("accel.{passes}", norm, annotations, 1))
    return entries


def entries(extra: Tuple[Entry, ...] = ()) -> List[Entry]:
    """Every chain entry and ``extra`` ones (custom primitives), longest first (stable:
    conv, deconvolution, dense, the standalone ops, the token chains, then ``extra``). Built
    from the vocabulary on each call."""
    table = _conv_entries() + _deconv_entries() + _dense_entries() + _standalone_entries() + \
        _token_entries() + \
        list(extra)
    table.sort(key=lambda entry: -entry.length)
    return table


def _root_ops(pattern: DFPattern) -> Optional[frozenset]:
    """The names of the ops a pattern can match at its root (None: any expression)."""
    if isinstance(pattern, OrPattern):
        left, right = _root_ops(pattern.left), _root_ops(pattern.right)
        return None if left is None or right is None else left | right
    if isinstance(pattern, CallPattern) and isinstance(pattern.op, ExprPattern) and \
            isinstance(pattern.op.expr, tvm.ir.Op):
        return frozenset([pattern.op.expr.name])
    return None


_ENTRIES: Optional[Tuple[List[Tuple[Entry, Optional[frozenset]]], Tuple]] = None


def _cached_entries() -> List[Tuple[Entry, Optional[frozenset]]]:
    """entries() with each one's root ops, rebuilt when the vocabulary's tables change (tests
    replace them)."""
    global _ENTRIES  # pylint: disable=global-statement
    key = (vocabulary.ACTIVATIONS.entries, vocabulary.POOLS.entries,
           vocabulary.ELEMENTWISE.entries)
    if _ENTRIES is None or _ENTRIES[1] != key:
        _ENTRIES = ([(e, _root_ops(e.pattern)) for e in entries()], key)
    return _ENTRIES[0]


def templates() -> Dict[str, List[Entry]]:
    """The entries whose names have ``{role}`` fields, by name (several entries share a name
    where their forms differ: the element-wise operand first or second)."""
    found: Dict[str, List[Entry]] = {}
    for e, _ in _cached_entries():
        if "{" in e.name:
            found.setdefault(e.name, []).append(e)
    return found


# --- roles of a match -------------------------------------------------------------------------

Roles = Dict[str, relax.Expr]


def roles_of(entry: Entry, match) -> Roles:
    """role -> matched expression, from a match (pattern -> expr) of ``entry``'s pattern."""
    roles = {}
    for role, node in entry.annotations.items():
        expr = match.get(node) if hasattr(match, "get") else None
        if expr is not None:
            roles[role] = expr
    return roles


def match_roles(root: relax.Expr, var2val: Dict[relax.Var, relax.Expr],
                name: Optional[str] = None) -> Optional[Tuple[Entry, Roles]]:
    """The first entry (in table order) whose pattern matches at ``root`` and its roles; None
    when none does. ``name``: a composite's name, the first match that gives it preferred (a
    mish alone, x * tanh(softplus(x)), is also a product of two tensors, whose entry comes
    first)."""
    op = getattr(getattr(root, "op", None), "name", None)
    first = None
    for entry, ops in _cached_entries():
        if not entry.annotations or (ops is not None and op not in ops):
            continue
        match = entry.pattern.extract_matched_expr(root, var2val)
        if match is not None:
            roles = roles_of(entry, match)
            if name is None or composite_name(entry.name, roles) == name:
                return entry, roles
            first = first or (entry, roles)
    return first


def composite_name(name: str, roles: Roles) -> str:
    """The entry's name with each ``{role}`` field filled with the kind that matched."""
    if "{" not in name:
        return name
    kinds = {}
    for role in roles:
        if ":" in role:
            field, kind = role.split(":", 1)
            kinds[field] = kind
    try:
        return name.format(**kinds)
    except KeyError:  # a field the match left unfilled: the entry's own name says what it is
        return name
