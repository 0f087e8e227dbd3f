"""The engine ops of one int8 run as C descriptors, with the quantisation of what it reads and
writes (int8.py's real-value model): a conv's codes and the SDP's integer converters from the
calibrated scales, an int8 concat's rescaling copies, squeeze-excite's per-channel multiplier,
and the quantisation a converting run gives an fp16 layer's output in mixed code. Each reads
the run being printed (``gen.emitting``: its emitted weights) and its operands through ``gen``
(:class:`~.tensors.FunctionTensors`); what it reads and writes is recorded in
``gen.quantization``, keyed as the observer reports the run's tensors."""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from ...quantization import TensorQuant
from ...quantization.lut import layer_lut
from ...sim.labels import run_key
from ...sim.observer import INPUT, operand_index
from ...sim.reference import is_lut_activation
from ..layer import Layer, constant_value
from . import emit, int8
from .folding import affine
from .run_ops import channels_of, conv_op, pool_ops


def pre_pool(layer: Layer) -> int:
    """The index of the layer's op whose output is quantised (its last before any pool)."""
    return (1 if layer.conv is not None else 0) + (0 if layer.sdp.empty() else 1) - 1


def run_ops(gen, layer: Layer, key: str, in_quant: Optional[TensorQuant],
            concat: Optional[TensorQuant] = None) -> Tuple[List[str], TensorQuant]:
    """The ops of an int8 run of ``layer`` and the quantisation of its output (``concat``: the
    int8 concat's, which this copy rescales its input into)."""
    if layer.requantize:
        gen.quantization[(key, INPUT)], gen.quantization[(key, 0)] = in_quant, concat
        return [requantize(gen, layer, in_quant, concat, key)], concat
    if layer.lrn is not None:
        return [emit.cdp_op(layer.lrn, gen.precision)], in_quant
    if layer.copies:  # a copy keeps the int8 codes, so their scale and zero point
        gen.quantization[(key, INPUT)] = gen.quantization[(key, 0)] = in_quant
        return [emit.bdma_op(layer.copies[0], layer.out_surface[1], gen.precision)], \
            in_quant
    ops, out_quant = int8_layer(gen, layer, gen.emitting.scope, key, in_quant)
    gen.quantization[(key, INPUT)] = in_quant
    for i in range(1 if layer.conv is not None else 0, len(ops)):
        gen.quantization[(key, i)] = out_quant
    return ops, out_quant


def int8_output(gen, index: int) -> TensorQuant:
    """The int8 quantisation of layer ``index``'s output, for its converting run: an int8
    layer's own; for an fp16 layer, the one int8 code of that layer would have given it (its
    last run's calibration: a concat's copies together, a pool or copy its input's, else its
    output before any pool)."""
    call = gen.program.calls[index]
    if gen.precision == "int8":
        return gen.quant[call.binding.var]
    layer = call.layer
    runs = [run for run in gen.program.runs if run.call == index and not run.converts]
    if len(layer.copies) > 1:
        return int8.concat_quant(gen._calibrated((run.key, INPUT), True) for run in runs)
    key = run_key(gen.index, index, "b" if layer.branch is not None else "")
    if layer.conv is None and layer.sdp.empty():  # a pool or a copy keeps its input's
        return gen._calibrated((key, INPUT), True)
    return gen._calibrated((key, pre_pool(layer)), True)


def requantize(gen, layer: Layer, in_quant: TensorQuant, out_quant: TensorQuant,
                key: str) -> str:
    """An int8 SDP that rescales a concat's input to the concat's quantisation."""
    channels = layer.in_shape[1]
    converters = int8.channel_converters(np.ones(channels), np.zeros(channels),
                                         np.full(channels, in_quant.scale), out_quant.scale,
                                         f"layer {key}")
    return emit.sdp_op("the input to the concat's scale", {
        "precision": "ACCEL_INT8", "in_zero": in_quant.zero, "out_zero": out_quant.zero,
        "bias": f"(const int32_t*){gen._constant(converters['bias'])}",
        "mul": f"(const int16_t*){gen._constant(converters['mul'])}",
        "rshift": f"(const uint8_t*){gen._constant(converters['rshift'])}"})


def int8_layer(gen, layer: Layer, scope, key: str, in_quant: TensorQuant
              ) -> Tuple[List[str], TensorQuant]:
    """The engine ops of an int8 layer and the quantisation of its output (see int8.py for
    the real-value model)."""
    s = layer.sdp
    channels = channels_of(layer)
    if layer.computed_scale:
        out_quant = gen._calibrated((key, 0))
        return [channel_mul(gen, layer, scope, key, in_quant, out_quant)], out_quant
    ops: List[str] = []
    if layer.conv is not None:  # the weights' codes, folded and quantised once
        weights = gen.emitting.weights
        g, h = weights.affine
        means = gen.calibration.means.get(key) \
            if gen.calibration and gen.calibration.bias_correction else None
        h = h - int8.bias_correction(means, layer.conv.groups, weights.codes,
                                     weights.scales, weights.folded)
        unit = in_quant.scale * weights.scales
        g = np.ones(channels)
        ops.append(conv_op(gen, layer, scope, gen._constant(weights.codes), in_quant.zero))
    else:
        g, h = affine(s, channels, scope)
        unit = np.full(channels, in_quant.scale)
    out_quant = in_quant
    if layer.conv is not None or not s.empty():
        out_quant = gen._calibrated((key, pre_pool(layer)))
        ops.append(int8_sdp(gen, layer, scope, key, g, h, unit, in_quant, out_quant))
    if layer.pool is not None:
        ops.extend(pool_ops(gen, layer, out_quant.zero))
    return ops, out_quant


def channel_mul(gen, layer: Layer, scope, key: str, in_quant: TensorQuant,
                      out_quant: TensorQuant) -> str:
    """x * s with s a computed [N, C] tensor (squeeze-excite): the SDP's element-wise
    multiplier reads s per channel in the codes and zero point its layer wrote; x goes to
    the product's units and the output converter to the output step (int8.elementwise)."""
    s, what = layer.sdp, f"layer {key}"
    channels = channels_of(layer)
    ew_key = (key, operand_index(0))
    operand, ew_quant = gen._data(s.scale, scope, ew_key)
    gen.quantization[ew_key] = ew_quant
    ew = int8.elementwise("mul", out_quant, ew_quant, what)
    converters = int8.channel_converters(np.ones(channels), np.zeros(channels),
                                         np.full(channels, in_quant.scale), ew.target, what)
    fields = {"precision": "ACCEL_INT8", "in_zero": in_quant.zero,
              "out_zero": out_quant.zero, "ew_op": emit.c_elementwise("mul"),
              "ew_operand": operand, "ew_per_channel": 1, "ew_zero": ew_quant.zero,
              "ew_mul": ew.ew_mul, "ew_shift": ew.ew_shift, "out_mul": ew.out_mul,
              "out_shift": ew.out_shift,
              "bias": f"(const int32_t*){gen._constant(converters['bias'])}",
              "mul": f"(const int16_t*){gen._constant(converters['mul'])}",
              "rshift": f"(const uint8_t*){gen._constant(converters['rshift'])}"}
    if s.act is not None:
        fields["act"] = emit.c_activation(s.act)
    if s.act == "clip":
        fields["clip_lo"], fields["clip_hi"] = int8.clip_codes(s.clip, out_quant)
    return emit.sdp_op(f"x and the computed per-channel multiplier to 2^-{ew.extra_bits} "
                       "of the output step", fields)


def int8_sdp(gen, layer: Layer, scope, key: str, g, h, unit, in_quant: TensorQuant,
              out_quant: TensorQuant) -> str:
    s = layer.sdp
    what = f"layer {key}"
    fields = {"precision": "ACCEL_INT8", "out_zero": out_quant.zero}
    if layer.conv is None:
        fields["in_zero"] = in_quant.zero
    target, comment = out_quant.scale, "x: scale/shift to the output step"
    if s.ew_op is not None:
        ew_key = (key, operand_index(1 if layer.conv is not None else 0))
        operand, ew_quant = gen._data(s.operand, scope, ew_key)
        gen.quantization[ew_key] = ew_quant
        ew = int8.elementwise(s.ew_op, out_quant, ew_quant, what)
        target = ew.target
        fields.update(ew_op=emit.c_elementwise(s.ew_op), ew_operand=operand,
                      ew_zero=ew_quant.zero, ew_mul=ew.ew_mul, ew_shift=ew.ew_shift,
                      out_mul=ew.out_mul, out_shift=ew.out_shift)
        comment = f"x and the {s.ew_op} operand to 2^-{ew.extra_bits} of the output step"
    if is_lut_activation(s.act):  # X converts to the table's input units
        table = layer_lut(s.act, out_quant, float(np.max(np.abs(g * unit))), what)
        target, comment = table.input_step, f"x to the {s.act} table's input units"
        fields.update(out_mul=1, out_shift=table.out_shift,
                      lut=f"(const accel_lut_int8*){gen._constant(table.lut.words())}")
    converters = int8.channel_converters(g, h, unit, target, what)
    fields.update(bias=f"(const int32_t*){gen._constant(converters['bias'])}",
                  mul=f"(const int16_t*){gen._constant(converters['mul'])}",
                  rshift=f"(const uint8_t*){gen._constant(converters['rshift'])}")
    if s.act is not None:
        fields["act"] = emit.c_activation(s.act)
    if s.act == "clip":
        fields["clip_lo"], fields["clip_hi"] = int8.clip_codes(s.clip, out_quant)
    elif s.act == "prelu":
        slope = constant_value(scope.get(s.prelu_slope, s.prelu_slope))
        codes, shift = int8.prelu_converter(slope, len(g), what)
        fields.update(prelu_mul=f"(const int16_t*){gen._constant(codes)}",
                      prelu_shift=shift)
    return emit.sdp_op(comment, fields)
