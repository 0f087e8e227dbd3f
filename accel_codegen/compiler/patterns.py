"""The pattern table: which Relax op chains become one accelerator primitive.

Each entry is ``accel.<primitive>``, a dataflow pattern and a check. The chains mirror what the
hardware runs in one pass: CONV (or a dense layer as a 1x1 CONV), then the SDP (bias and batch
norm folded into one scale/shift, an element-wise op with a second tensor such as a residual
add, an activation), then the PDP (pooling). Every optional stage is its own entry, longest
first: FuseOpsByPattern gives earlier entries priority, so a conv takes its whole epilogue.

Checks are guards that can say no, and say why: the chain is interpreted by
:func:`accel_codegen.lowering.lower_chain` and costed by the C library, whose validation holds
the hardware limits; a refusal is recorded with its reason for the partition report.
"""
from __future__ import annotations

import itertools
import os
from typing import Dict, Iterable, List, Optional, Tuple

from tvm import relax
from tvm.relax.backend.utils import has_leaking_intermediate_variables
from tvm.relax.dpl import DFPattern, is_call_tir, is_const, is_op, is_tuple_get_item, wildcard
from tvm.relax.transform import FusionPattern, PatternCheckContext

from ..sim import vocabulary
from ..sim.config import AccelConfig
from . import custom
from .layer import Unsupported, op_name
from .lowering import AFFINE_ONLY, lower_chain

#: Set to "1" (the test suite does) to make a check that fails unexpectedly raise instead of
#: leaving the chain on the host.
STRICT_ENV = "ACCEL_CODEGEN_STRICT"


def _op_pattern(entry: vocabulary.Entry):
    """A builder of the pattern of one vocabulary entry's Relax op applied to x."""
    def build(x: DFPattern) -> DFPattern:
        pattern = is_op(entry.relax_op)(x, *(wildcard() for _ in range(entry.relax_args)))
        if entry.name == "prelu":  # also leaky ReLU: one slope for every channel
            return pattern | _decomposed_prelu(x) | is_op("relax.nn.leakyrelu")(x)
        return pattern
    return build


def _relu6_plus3(x: DFPattern) -> DFPattern:
    """clip(x + 3, 0, 6), as one clip or as torch's two one-sided ones."""
    shifted = _either_order("relax.add", x, is_const())
    once = is_op("relax.clip")(shifted, wildcard(), wildcard())
    return is_op("relax.clip")(once, wildcard(), wildcard()) | once


def _hardsigmoid(x: DFPattern) -> DFPattern:
    return is_op("relax.divide")(_relu6_plus3(x), is_const())


def _hardswish(x: DFPattern) -> DFPattern:
    return is_op("relax.divide")(_either_order("relax.multiply", x, _relu6_plus3(x)), is_const())


# Activations torch's frontend decomposes into several ops (lowering.py reads them back).
_DECOMPOSED = {"hardsigmoid": _hardsigmoid, "hardswish": _hardswish}

# Stage name (in primitive names) -> pattern builder, for every op the vocabulary offloads.
_ACTIVATIONS = {e.name: _op_pattern(e) for e in vocabulary.ACTIVATIONS if e.relax_op}
_ACTIVATIONS.update({name: build for name, build in _DECOMPOSED.items()
                     if name in vocabulary.ACTIVATIONS})
_POOLS = {f"{e.name}pool": _op_pattern(e) for e in vocabulary.POOLS}
_ELEMENTWISE = {e.name: e.relax_op for e in vocabulary.ELEMENTWISE if e.relax_op}


def _decomposed_prelu(x: DFPattern) -> DFPattern:
    """torch.export decomposes PReLU into where(x > 0, x, alpha * x)."""
    alpha = is_op("relax.reshape")(wildcard(), wildcard()) | wildcard()
    negative = is_op("relax.multiply")(alpha, x)
    return is_op("relax.where")(is_op("relax.greater")(x, wildcard()), x, negative)


def _either_order(op: str, x: DFPattern, other: DFPattern) -> DFPattern:
    return is_op(op)(x, other) | is_op(op)(other, x)


def _bias_add(x: DFPattern) -> DFPattern:
    """torch gives add(conv, reshape(bias)); ONNX and folded constants add a [1, C, 1, 1]."""
    bias = wildcard()
    return is_op("relax.add")(x, is_op("relax.reshape")(bias, wildcard())) | is_op("relax.add")(
        x, bias)


def _batch_norm_call(x: DFPattern) -> DFPattern:
    return is_op("relax.nn.batch_norm")(x, wildcard(), wildcard(), wildcard(), wildcard())


def _batch_norm(x: DFPattern) -> DFPattern:
    return is_tuple_get_item(_batch_norm_call(x), 0)


def _conv_bn_branch(bias: bool) -> DFPattern:
    """A conv (+ bias) + batch norm feeding a residual add: ResNet's downsample path. TVM's
    matcher does not end a pattern at a tuple item, so this branch joins the add's pattern."""
    out = is_op("relax.nn.conv2d")(wildcard(), wildcard())
    return _batch_norm(_bias_add(out) if bias else out)


def _epilogue(out: DFPattern, name: str, bias: bool, bn: bool, residual,
              act: Optional[str], pool: Optional[str]) -> Tuple[str, DFPattern, int]:
    """Append the optional SDP and PDP stages; returns the name, the pattern and its length.
    ``residual``: False, "first" / "second" (the chain is the add's first / second operand,
    the other any tensor), or "branch" / "bias_branch" (a conv + BN)."""
    length = 1
    if residual in ("branch", "bias_branch"):
        branch = _conv_bn_branch(residual == "bias_branch")
        length += 2 + (residual == "bias_branch")
        residual_stage = lambda x: is_op("relax.add")(x, branch)  # noqa: E731
        residual_name = "add_" + residual.replace("branch", "conv2d_bn")
    else:  # each operand order its own entry: one pattern with both alternatives takes the
        # first that matches, and in MobileNetV2's add(x, conv_bn(...)) x is a conv + BN
        # too, whose output other layers read: the check refused that match and the add
        # stayed a run of its own
        residual_stage = (lambda x: is_op("relax.add")(x, wildcard())) if residual == "first" \
            else (lambda x: is_op("relax.add")(wildcard(), x))
        residual_name = "add"
    # TVM's matcher cannot end a pattern at a tuple item: a chain that ends in batch norm
    # ends at the op (see ``first_item_only``).
    last_bn = bn and not residual and not act and not pool
    for present, suffix, stage in ((bias, "bias", _bias_add),
                                   (bn, "bn", _batch_norm_call if last_bn else _batch_norm),
                                   (residual, residual_name, residual_stage),
                                   (act, act, _ACTIVATIONS.get(act)),
                                   (pool, pool, _POOLS.get(pool))):
        if present:
            out = stage(out)
            name += f"_{suffix}"
            length += 1
    return name, out, length


def _conv_entries() -> List[Tuple[str, DFPattern, int]]:
    entries = []
    for bias, bn, residual, act, pool in itertools.product(
            (True, False), (True, False), (False, "first", "second"), (None, *_ACTIVATIONS),
            (None, *_POOLS)):
        conv = is_op("relax.nn.conv2d")(wildcard(), wildcard())
        entries.append(_epilogue(conv, "accel.conv2d", bias, bn, residual, act, pool))
    for bias, branch, act in itertools.product((True, False), ("branch", "bias_branch"),
                                               (None, *_ACTIVATIONS)):
        conv = is_op("relax.nn.conv2d")(wildcard(), wildcard())
        entries.append(_epilogue(conv, "accel.conv2d", bias, True, branch, act, None))
    return entries


def _dense_entries() -> List[Tuple[str, DFPattern, int]]:
    entries = []
    for flatten, bias, act in itertools.product((True, False), (True, False),
                                                (None, *_ACTIVATIONS)):
        # A flatten of NCHW data before the dense layer moves nothing: the layer reads the
        # same memory as [N, C*H*W].
        data = is_op("relax.reshape")(wildcard(), wildcard()) if flatten else wildcard()
        weight = wildcard()
        dense = is_op("relax.matmul")(data, is_op("relax.permute_dims")(weight)) | is_op(
            "relax.matmul")(data, weight)
        name, pattern, length = _epilogue(dense, "accel.flatten_dense" if flatten else
                                          "accel.dense", bias, False, False, act, None)
        entries.append((name, pattern, length + flatten))
    return entries


def _standalone_entries() -> List[Tuple[str, DFPattern, int]]:
    entries = []
    for act in (None, *_ACTIVATIONS):
        stage = _batch_norm(wildcard()) if act else _batch_norm_call(wildcard())
        entries.append(_epilogue(stage, "accel.batch_norm", False, False, False, act, None))
        for name, op in _ELEMENTWISE.items():
            pattern = is_op(op)(wildcard(), wildcard())
            entries.append(_epilogue(pattern, f"accel.{name}", False, False, False, act, None))
        for op in AFFINE_ONLY:  # by a constant: the SDP's scale/shift
            pattern = is_op(op)(wildcard(), is_const())
            entries.append(_epilogue(pattern, f"accel.{op.split('.')[-1]}", False, False, False,
                                     act, None))
        # x * c + d (or x / c - d): one scale/shift
        for scale, shift in itertools.product(("relax.multiply", "relax.divide"),
                                              ("relax.add", "relax.subtract")):
            pattern = is_op(shift)(is_op(scale)(wildcard(), is_const()), is_const())
            name, pattern, length = _epilogue(
                pattern, f"accel.{scale.split('.')[-1]}_{shift.split('.')[-1]}", False, False,
                False, act, None)
            entries.append((name, pattern, length + 1))
    for act, build in _ACTIVATIONS.items():
        entries.append((f"accel.{act}", build(wildcard()), 1))
    for pool, build in _POOLS.items():
        entries.append((f"accel.{pool}", build(wildcard()), 1))
    # BDMA copies (lowering.COPIES)
    entries.append(("accel.concat", is_op("relax.concat")(wildcard()), 1))
    bounds = [wildcard() for _ in range(3)]  # axes, begin, end; strides optional
    entries.append(("accel.slice", is_op("relax.strided_slice")(wildcard(), *bounds) | is_op(
        "relax.strided_slice")(wildcard(), *bounds, wildcard()), 1))
    grouped = is_op("relax.reshape")(wildcard(), wildcard())
    entries.append(("accel.channel_shuffle", is_op("relax.reshape")(
        is_op("relax.permute_dims")(grouped), wildcard()), 3))
    # CDP: torch's LocalResponseNorm, decomposed (lowering._local_response_norm reads it back)
    x = wildcard()
    summed = is_op("relax.nn.avg_pool3d")(is_op("relax.nn.pad")(
        is_op("relax.reshape")(is_op("relax.multiply")(x, x), wildcard())))
    denominator = is_op("relax.power")(is_op("relax.add")(is_op("relax.multiply")(
        is_op("relax.squeeze")(summed), is_const()), is_const()), is_const())
    entries.append(("accel.lrn", is_op("relax.divide")(x, denominator), 9))
    entries.append(("accel.global_avgpool", is_op("relax.mean")(wildcard()), 1))
    entries.append(("accel.adaptive_avgpool",
                    is_op("relax.nn.adaptive_avg_pool2d")(wildcard()), 1))
    return entries


class PartitionLog:
    """What the checks said: for every op a pattern refused, the refusal's reason."""

    def __init__(self) -> None:
        self.refusals: Dict[relax.Var, Tuple[str, str]] = {}

    def refuse(self, ctx: PatternCheckContext, pattern: str, reason: str) -> bool:
        for var in ctx.matched_bindings.keys():
            # Later (shorter) patterns overwrite: their reason is the most specific.
            self.refusals[var] = (pattern, reason)
        return False


def _make_check(name: str, config: AccelConfig, fuse: bool, precision: str, log: PartitionLog,
                batch_norm_ends: frozenset):
    def check(ctx: PatternCheckContext) -> bool:
        if has_leaking_intermediate_variables(ctx):
            return log.refuse(ctx, name, "an intermediate result is also used outside the chain")
        bindings = ctx.matched_bindings
        try:
            layer = lower_chain(ctx.matched_expr, lambda var: bindings.get(var))
            layer.check_hardware(config, fuse, precision)
        except Unsupported as reason:
            return log.refuse(ctx, name, str(reason))
        except Exception as error:  # pylint: disable=broad-except
            # A chain this compiler cannot read stays on the host: never a wrong answer. Under
            # test (STRICT_ENV=1) it is a bug to fix, not a quiet fallback.
            if os.environ.get(STRICT_ENV) == "1":
                raise
            return log.refuse(ctx, name, f"not understood by the accelerator compiler "
                                         f"({type(error).__name__}: {error})")
        root = ctx.matched_expr
        if op_name(root) == "relax.nn.batch_norm" and (
                root not in ctx.value_to_bound_var or
                ctx.value_to_bound_var[root] not in batch_norm_ends):
            return log.refuse(ctx, name, "batch_norm's mean and variance outputs are read too; "
                                         "the SDP gives the normalised tensor only")
        return True

    return check


def pattern_table(config: AccelConfig | str = "nv_full", fuse: bool = True,
                  log: Optional[PartitionLog] = None, precision: str = "fp32",
                  batch_norm_ends: Iterable[relax.Var] = ()) -> List[FusionPattern]:
    """The FusionPatterns for a configuration, longest chains first.

    Parameters
    ----------
    config : AccelConfig or str
        The hardware the checks hold the chains against.
    fuse : bool
        Check the chain as one fused run (True) or as one independent op per source op.
    log : PartitionLog, optional
        Receives the reason of every refusal.
    precision : str
        The precision the chains will run in ("fp32", "fp16", "int8").
    batch_norm_ends : iterable of relax.Var
        The batch norms a chain may end at: those read through their first output only
        (:func:`~accel_codegen.compiler.rewrites.first_item_only`). The composite then ends at
        that output (:func:`~accel_codegen.compiler.rewrites.end_at_first_item`).
    """
    config = AccelConfig.resolve(config)
    log = log if log is not None else PartitionLog()
    entries = _conv_entries() + _dense_entries() + _standalone_entries() + [
        (f"accel.custom.{p.name}", is_call_tir(p.primfunc), 1)
        for p in custom.registered().values()]
    entries.sort(key=lambda entry: -entry[2])  # stable: longest first
    return [FusionPattern(name, pattern, {}, _make_check(name, config, fuse, precision, log,
                                                       frozenset(batch_norm_ends)))
            for name, pattern, _ in entries]
