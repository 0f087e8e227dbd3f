"""The engine ops of one int8 run as C descriptors, printed from the run's quantisation
(``Run.quant``, set by :func:`~.int8_plan.quantize_int8` before any C is written): a conv's
codes with its input's zero point, the SDP's integer converters, an int8 concat's rescaling
copies, squeeze-excite's per-channel multiplier. Each reads the run being printed
(``gen.emitting``: its emitted weights and quantisation) and its operands through ``gen``
(:class:`~.tensors.FunctionTensors`)."""
from __future__ import annotations

from typing import Dict, List

from ..layer import Layer
from ..program import Run
from . import emit
from .int8 import Converters
from .run_ops import conv_op, pool_ops
from ...sim.observer import operand_index


def converter_fields(gen, converters: Converters) -> Dict[str, str]:
    """An SDP's per-channel converters as descriptor fields (constants of the pool)."""
    return {"bias": f"(const int32_t*){gen._constant(converters.bias)}",
            "mul": f"(const int16_t*){gen._constant(converters.mul)}",
            "rshift": f"(const uint8_t*){gen._constant(converters.rshift)}"}


def run_ops(gen, layer: Layer, run: Run) -> List[str]:
    """The ops of an int8 run of ``layer`` (the run's, or a token layer's on its surface)."""
    quant = run.quant
    if layer.requantize:  # the input to the concat's scale
        return [emit.sdp_op("the input to the concat's scale", {
            "precision": "ACCEL_INT8", "in_zero": quant.input.zero,
            "out_zero": quant.output.zero, **converter_fields(gen, quant.converters)})]
    if layer.lrn is not None:
        return [emit.cdp_op(layer.lrn, gen.precision)]
    if layer.copies:  # a copy keeps the int8 codes, so their scale and zero point
        return [emit.bdma_op(layer.copies[0], layer.out_surface[1], gen.precision)]
    if layer.computed_scale:
        return [channel_mul(gen, layer, run)]
    ops: List[str] = []
    scope = run.scope
    if layer.conv is not None:  # the weights' codes, folded and quantised once
        ops.append(conv_op(gen, layer, scope, gen._constant(run.weights.codes),
                           quant.input.zero))
    if layer.conv is not None or not layer.sdp.empty():
        ops.append(int8_sdp(gen, layer, run))
    if layer.pool is not None:
        ops.extend(pool_ops(gen, layer, quant.output.zero))
    return ops


def _activation(fields: dict, layer: Layer, converters: Converters) -> None:
    act = layer.sdp.act
    if act is not None:
        fields["act"] = emit.c_activation(act)
    if converters.clip is not None:
        fields["clip_lo"], fields["clip_hi"] = converters.clip


def channel_mul(gen, layer: Layer, run: Run) -> str:
    """x * s with s a computed [N, C] tensor (squeeze-excite): the SDP's element-wise
    multiplier reads s per channel in the codes and zero point its layer wrote."""
    quant, converters = run.quant, run.quant.converters
    ew = converters.ew
    operand, _ = gen._data(layer.sdp.scale, run.scope, (run.key, operand_index(0)))
    fields = {"precision": "ACCEL_INT8", "in_zero": quant.input.zero,
              "out_zero": quant.output.zero, "ew_op": emit.c_elementwise("mul"),
              "ew_operand": operand, "ew_per_channel": 1, "ew_zero": quant.operand.zero,
              "ew_mul": ew.ew_mul, "ew_shift": ew.ew_shift, "out_mul": ew.out_mul,
              "out_shift": ew.out_shift, **converter_fields(gen, converters)}
    _activation(fields, layer, converters)
    return emit.sdp_op(f"x and the computed per-channel multiplier to 2^-{ew.extra_bits} "
                       "of the output step", fields)


def int8_sdp(gen, layer: Layer, run: Run) -> str:
    s, quant, converters = layer.sdp, run.quant, run.quant.converters
    fields = {"precision": "ACCEL_INT8", "out_zero": quant.output.zero}
    if layer.conv is None:  # input None: a ChannelQuant's zero points are in the bias
        fields["in_zero"] = quant.input.zero if quant.input is not None else 0
    comment = "x: scale/shift to the output step"
    if s.ew_op is not None:
        ew = converters.ew
        key = (run.key, operand_index(1 if layer.conv is not None else 0))
        operand, _ = gen._data(s.operand, run.scope, key)
        fields.update(ew_op=emit.c_elementwise(s.ew_op), ew_operand=operand,
                      ew_zero=quant.operand.zero, ew_mul=ew.ew_mul, ew_shift=ew.ew_shift,
                      out_mul=ew.out_mul, out_shift=ew.out_shift)
        if s.ew_per_channel:  # one code per channel (a computed [1, C, 1, 1] addend)
            fields["ew_per_channel"] = 1
        comment = f"x and the {s.ew_op} operand to 2^-{ew.extra_bits} of the output step"
    if converters.lut is not None:  # X converts to the table's input units
        comment = f"x to the {s.act} table's input units"
        fields.update(out_mul=1, out_shift=converters.lut.out_shift,
                      lut=f"(const accel_lut_int8*){gen._constant(converters.lut.lut.words())}")
    fields.update(converter_fields(gen, converters))
    _activation(fields, layer, converters)
    if converters.prelu is not None:
        codes, shift = converters.prelu
        fields.update(prelu_mul=f"(const int16_t*){gen._constant(codes)}", prelu_shift=shift)
    return emit.sdp_op(comment, fields)
