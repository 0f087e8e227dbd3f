"""The engine ops of one fp32 or fp16 run as C descriptors (the CONV of every precision, the
float SDP stages and the PDP passes); an int8 run's are :mod:`.int8_ops`'. Each reads the run
being printed (``gen.emitting``: its conv modes, memory choices and emitted weights) and its
operands through ``gen`` (:class:`~.tensors.FunctionTensors`)."""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from ..layer import BatchNormSpec, Layer, SdpSpec, constant_value, is_constant
from . import emit
from .folding import fold_batch_norm


def channels_of(layer: Layer) -> int:
    """The channels of the layer's SDP: its conv's output channels, else its input's."""
    return layer.conv.weight_shape[0] if layer.conv is not None else layer.in_shape[1]


def float_ops(gen, layer: Layer, lines: List[str]) -> List[str]:
    """The ops of an fp32 or fp16 run of ``layer`` (``lines``: the run's C so far, where a
    fold of runtime batch-norm parameters goes)."""
    run, scope, precision = gen.emitting, gen.emitting.scope, gen.precision
    ops: List[str] = []
    if layer.lrn is not None:
        ops.append(emit.cdp_op(layer.lrn, precision))
    elif layer.copies:
        ops.append(emit.bdma_op(layer.copies[0], layer.out_surface[1], precision))
    elif precision == "fp16" and gen.fuse and layer.conv is not None and \
            not layer.computed_dense_weight:
        # Batch norm's (or a scale's) factor goes into the weights before they are
        # rounded to half: one rounding fewer per layer; the SDP adds the shift.
        weights = run.weights
        ops.append(conv_op(gen, layer, scope, gen._constant(weights.array)))
        shift = "NULL" if layer.sdp.bias is None and layer.sdp.batch_norm is None else \
            gen._constant(weights.affine[1])
        ops.extend(sdp_ops(gen, layer, scope, lines, ("NULL", shift)))
    else:
        if layer.conv is not None:
            ops.append(conv_op(gen, layer, scope,
                               c16=run.in_layout == run.out_layout == "c16"))
        ops.extend(sdp_ops(gen, layer, scope, lines))
    if precision == "fp16" and layer.conv is not None and len(ops) == 1:
        ops.append(emit.sdp_op("the accumulators' converter",
                               {"precision": emit.c_precision(precision)}))
    if layer.pool is not None:
        ops.extend(pool_ops(gen, layer))
    return ops


def conv_op(gen, layer: Layer, scope, weights: Optional[str] = None, in_zero: int = 0,
          c16: bool = False) -> str:
    c = layer.conv
    if weights is None:
        weights = _fp32_weights(gen, c, scope) or gen._pointer(
            c.weight, scope, reshape=(lambda v: v.T) if c.transpose_weight else None)
    modes = gen.emitting.modes
    pack = None
    # packed (int8), widened (fp16) or pre-transformed (fp32 Winograd, constant weights
    # only: the glue packs once) once, not every call
    winograd = modes.get("mode", "direct") == "winograd" and \
        is_constant(scope.get(c.weight, c.weight))
    # a C16 run's 1x1 weights too (fp32, constant weights), in the C16 kernel's layout
    c16_pack = c16 and is_constant(scope.get(c.weight, c.weight)) and \
        layer.engine_ops(gen.fuse, "fp32", modes=modes)[0].packs(gen.config,
                                                                  layer.in_shape[1])
    # weights another run computes are read where it wrote them on every call, never
    # packed once (the packed copy would be the first call's)
    computed = not is_constant(scope.get(c.weight, c.weight))
    if (gen.precision != "fp32" and not computed) or winograd or c16_pack:
        pack = (layer.in_shape[1], gen.packed)
        gen.packed += 1
    return emit.conv_op(c, weights, gen.precision, in_zero, pack, modes,
                        gen.emitting.memory.conv)


def _fp32_weights(gen, c, scope) -> Optional[str]:
    """fp32 constant weights pooled from the run's emitted weights (``weights.py``), which the
    memory plan read already, in the shape the constant has (transposed where the conv reads
    it so): the same bytes as the constant's own, without reading them out of TVM again."""
    emitted = gen.emitting.weights if gen.emitting is not None else None
    if gen.precision != "fp32" or emitted is None or emitted.precision != "fp32" or \
            not emitted.constant or not emitted.expr.same_as(scope.get(c.weight, c.weight)) or \
            emitted.layer.conv.transpose_weight != c.transpose_weight or \
            tuple(emitted.layer.conv.weight_shape) != tuple(c.weight_shape):
        return None
    shape = [int(d) for d in emitted.expr.value.shape]
    return gen._constant(emitted.array.reshape(shape[::-1] if c.transpose_weight else shape))


def sdp_ops(gen, layer: Layer, scope, lines: List[str],
         folded: Optional[Tuple[str, str]] = None) -> List[str]:
    """The fp32/fp16 SDP op(s) of a layer; ``folded``: the scale and shift the caller made."""
    s = layer.sdp
    if s.empty():
        return []
    channels = channels_of(layer)

    def sdp(what, scale="NULL", shift="NULL", ew=None, operand="NULL", act=None,
            per_channel=False):
        fields = {"scale": scale, "shift": shift}
        if ew:
            fields.update(ew_op=emit.c_elementwise(ew), ew_operand=operand)
        if per_channel:
            fields["ew_per_channel"] = 1
        if act:
            fields["act"] = emit.c_activation(act)
        if act == "clip":
            fields.update(clip_min=emit.c_float(s.clip[0]), clip_max=emit.c_float(s.clip[1]))
        if act == "prelu":
            fields["prelu_slope"] = gen._pointer(s.prelu_slope, scope)
        fields["precision"] = emit.c_precision(gen.precision)
        return emit.sdp_op(what, fields)

    operand = gen._data(s.operand, scope, ("", 0))[0] if s.ew_op else "NULL"
    if gen.fuse and layer.computed_scale:  # x * s, s computed: Layer.computed_scale
        operand = gen._data(s.scale, scope, ("", 0))[0]
        stages = " + ".join(["the computed per-channel multiplier"] + [s.act] * bool(s.act))
        return [sdp(stages, ew="mul", operand=operand, act=s.act, per_channel=True)]
    if gen.fuse:
        scale, shift = folded or scale_shift(gen, s, s.bias, channels, scope, lines)
        stages = [name for name, present in (
            ("bias", s.bias is not None), ("batch_norm", s.batch_norm is not None),
            ("scale", s.scale is not None), (f"{s.ew_op} operand", s.ew_op is not None),
            (s.act, s.act is not None)) if present]
        note = " (folded into one scale/shift)" if s.batch_norm is not None else ""
        return [sdp(" + ".join(stages) + note, scale, shift, s.ew_op, operand, s.act,
                    per_channel=s.ew_per_channel)]
    ops = []
    for stage in s.decomposed_order():
        if stage == "bias":
            ops.append(sdp("bias", shift=gen._pointer(s.bias, scope)))
        else:
            ops.append(sdp(stage, *scale_shift(gen, s, None, channels, scope, lines)))
    if s.ew_op:
        ops.append(sdp(s.ew_op, ew=s.ew_op, operand=operand, per_channel=s.ew_per_channel))
    if s.act:
        ops.append(sdp(s.act, act=s.act))
    return ops


def scale_shift(gen, s: SdpSpec, bias, channels: int, scope, lines: List[str]
                 ) -> Tuple[str, str]:
    """Pointers to the SDP's scale and shift: batch norm (with the bias, when given) folded
    into one scale and one shift, at compile time when every parameter is constant."""
    bn = s.batch_norm
    if bn is None:
        return gen._pointer(s.scale, scope), gen._pointer(bias, scope)
    parts = [bn.gamma, bn.beta, bn.mean, bn.var, bias]
    resolved = [None if p is None else scope.get(p, p) for p in parts]
    if all(p is None or is_constant(p) for p in resolved):
        bias_value = None if bias is None else np.ascontiguousarray(
            constant_value(resolved[4]), np.float32).reshape(-1)
        scale, shift = fold_batch_norm(BatchNormSpec(*resolved[:4], bn.epsilon), bias_value,
                                       channels)
        return gen._constant(scale), gen._constant(shift)
    scale = gen._temp(channels, itemsize=4)
    shift = gen._temp(channels, itemsize=4)
    pointers = ", ".join(f"(const float*){gen._pointer(p, scope)}" for p in parts)
    lines.append(f"  /* batch norm{' and bias' if bias is not None else ''} are runtime "
                 "inputs: fold them now */")
    lines.append(f"  if (accel_glue_fold_batch_norm(&k_fn, {channels}, {pointers}, "
                 f"{emit.c_float(bn.epsilon)}, (float*){scale}, (float*){shift}) != 0) "
                 "return -1;")
    return scale, shift

# --- int8 -------------------------------------------------------------------------------

def pool_ops(gen, layer: Layer, zero: int = 0) -> List[str]:
    """The PDP pass(es) of a layer's pool, after the rescale of a padded global average
    (only on a layer of its own: Layer.check_hardware)."""
    passes, rescale = layer.pool.passes()
    ops = []
    if rescale != 1.0:
        scale = gen._constant(np.full(channels_of(layer), rescale))
        ops.append(emit.sdp_op(f"x {rescale:.6g}: the padded passes count "
                               f"{rescale:.6g}x the window", {
                                   "scale": scale,
                                   "precision": emit.c_precision(gen.precision)}))
    return ops + [emit.pool_op(p, gen.precision, zero) for p in passes]
