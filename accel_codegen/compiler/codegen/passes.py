"""C for a layer decomposed into engine passes (a layer norm over the channels of token
tensors, issue 29): the channels-last data transposed onto its feature surface, the dense
layer's CONV + SDP run (if the layer has one), one run per pass of sim/decompose.py's
decomposition, and the result transposed back to channels-last.

The transposes are no engine's work: NVDLA's feature format holds each position's channels
together, so a [B, T, C] token tensor already is the [B, C, 1, T] surface's bytes there; the
simulator's tensors are dense NCHW, so the generated code moves them, outside the cost model
(``layer.token_surface``)."""
from __future__ import annotations

import dataclasses
from typing import Dict, List

import numpy as np
from tvm import relax

from ...sim.labels import pass_part, pass_primitive, run_key, run_label
from ...sim.observer import INPUT
from ...sim.ops import Bdma, Conv, Sdp
from ..layer import ConvSpec, CopySpec, Layer
from . import emit

#: C element type of each float precision's storage.
C_TYPES = {"fp32": "float", "fp16": "uint16_t"}


def transpose(src: str, dst: str, batch: int, rows: int, cols: int, precision: str,
              what: str) -> List[str]:
    """C statements: for each of ``batch`` images, the [rows, cols] matrix at ``src`` written
    transposed ([cols, rows]) at ``dst`` (storage elements, copied bit for bit)."""
    t = C_TYPES[precision]
    return [f"/* {what} */", "{",
            f"  const {t}* s = (const {t}*){src}; {t}* d = ({t}*){dst};",
            f"  for (int64_t b = 0; b < {batch}; ++b)",
            f"    for (int64_t i = 0; i < {rows}; ++i)",
            f"      for (int64_t j = 0; j < {cols}; ++j)",
            f"        d[(b * {cols} + j) * {rows} + i] = s[(b * {rows} + i) * {cols} + j];",
            "}"]


def _op(gen, op, tensors: Dict[str, str], operand) -> str:
    """One engine op of a pass as a C descriptor (``OP`` stands for it)."""
    p = gen.precision
    if isinstance(op, Bdma):
        copy = CopySpec(None, op.channels, op.src_offset, op.src_stride, op.dst_offset,
                        op.dst_stride)
        return emit.bdma_op(copy, op.dst_channels, p)
    if isinstance(op, Conv):
        spec = ConvSpec(weight=None, weight_shape=tuple(op.weights.shape),
                        source="ones: a channel sum or a broadcast")
        pack = None
        if p != "fp32":  # widened once by the glue, as every fp16 conv's weights
            pack = (op.weights.shape[1], gen.packed)
            gen.packed += 1
        return emit.conv_op(spec, gen._constant(op.weights), p, pack=pack)
    fields = {"scale": "NULL" if op.scale is None else gen._constant(op.scale),
              "shift": "NULL" if op.shift is None else gen._constant(op.shift)}
    what = []
    if op.scale is not None or op.shift is not None:
        what.append("scale/shift")
    if op.ew_op:
        fields.update(ew_op=emit.c_elementwise(op.ew_op), ew_operand=tensors[operand])
        what.append(f"{op.ew_op} {operand}")
    if op.act:
        fields["act"] = emit.c_activation(op.act)
        what.append(op.act)
    fields["precision"] = emit.c_precision(p)
    return emit.sdp_op(", ".join(what) or "identity", fields)


def _clears(ops) -> bool:
    """Whether a pass leaves output channels unwritten (a BDMA copy of fewer channels than its
    surface has: the zero padding of an odd half), so its output must start as zeros."""
    return any(isinstance(op, Bdma) and op.dst_channels is not None and
               (op.dst_offset > 0 or op.dst_stride > 1 or op.channels < op.dst_channels)
               for op in ops)


def emit_token_layer(gen, index: int, var: relax.Var, layer: Layer, scope,
                     primitive: str) -> None:
    """The runs of a token layer, from its channels-last data to ``var``'s buffer,
    channels-last: a dense layer's CONV + SDP run, or a norm's runs (``Layer.norm_runs``); a
    norm over the channels of NCHW data (``layer.tokens`` False) reads and writes the
    surfaces themselves."""
    precision = gen.precision
    b, c, h, w = layer.in_shape
    if layer.norm is not None:
        runs = layer.runs(precision)
        first_key = run_key(gen.index, index, pass_part(0))
    else:  # one run, keyed as walk.runs keys it
        runs = [dataclasses.replace(layer, out_shape=(b, layer.conv.weight_shape[0], h, w))]
        first_key = run_key(gen.index, index)
    itemsize = gen.storage.itemsize
    data, _ = gen._data(layer.data, scope, (first_key, INPUT))
    if layer.tokens:
        surface = gen._temp(int(np.prod(layer.in_shape)))
        gen.body.extend(transpose(data, surface, b, h * w, c, precision,
                                  f"layer {index}: tokens [{b}, {h * w}, {c}] onto the surface "
                                  f"[{b}, {c}, {h}, {w}]"))
    else:  # a norm over the channels of NCHW data: the data is its surface
        surface = data
    tensors = {"x": surface}
    start = 0
    if layer.conv is not None:
        dense = runs[0]
        out = gen._temp(int(np.prod(dense.out_shape)))
        gen.inner[layer.data] = surface
        try:
            gen._emit(dense, scope, first_key, primitive, out)
        finally:
            del gen.inner[layer.data]
        tensors["x"] = out
        start = 1
    for part, run in enumerate(runs[start:], start):
        step = run.step
        key = run_key(gen.index, index, pass_part(part))
        label = run_label(key, pass_primitive(primitive, step.role))
        count = int(np.prod(run.out_shape))
        last = part == len(runs) - 1
        # NCHW data: the last pass writes the layer's output itself
        out = tensors[step.output] = gen.operands[var] if last and not layer.tokens else \
            gen._temp(count)
        lines = [f"/* {label}: {step.role} */", "{"]
        if _clears(step.ops):
            lines.append(f"  memset({out}, 0, {count * itemsize});")
        ops = [_op(gen, op, tensors, step.operand) for op in step.ops]
        lines += emit.run_layer(ops, tensors[step.input], run.in_shape, out, run.out_shape,
                                run.fused(gen.fuse), label, precision)
        gen.body.extend(lines + ["}"])
    if not layer.tokens:
        return
    last = tensors[runs[-1].step.output] if runs[-1].step is not None else tensors["x"]
    b, k, h, w = runs[-1].out_shape
    gen.body.extend(transpose(last, gen.operands[var], b, k, h * w,
                              precision, f"layer {index}: the surface [{b}, {k}, {h}, {w}] "
                                         f"back to tokens [{b}, {h * w}, {k}]"))
