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
from typing import Dict, List, Optional, Tuple

import numpy as np
from tvm import relax

from ...errors import AccelInvalidError
from ...sim.observer import INPUT
from ...sim.ops import X_FIELDS, Bdma, Conv, Pool
from ..layer import (ConvSpec, CopySpec, Layer, PoolSpec, feature_surface, static_shape,
                     token_surface)
from . import emit
from .int8_plan import token_dense
from .tensors import STORAGE, resolve_operand

#: C element type of each float precision's storage.
C_TYPES = {"fp32": "float", "fp16": "uint16_t", "int8": "int8_t"}


def transpose(src: str, dst: str, batch: int, rows: int, cols: int, precision: str,
              what: str) -> List[str]:
    """C statements: for each of ``batch`` images, the [rows, cols] matrix at ``src`` written
    transposed ([cols, rows]) at ``dst`` (storage elements, copied bit for bit by the library's
    tiled ``accel_transpose``: the generated C is compiled without optimisation, where its own
    element loop cost 2-3 ns an element, a quarter of ViT-Ti's time)."""
    size = np.dtype(STORAGE[precision]).itemsize
    return [f"/* {what} */",
            f"if (accel_glue_transpose(&k_fn, {src}, {dst}, {batch}, {rows}, {cols}, {size}) "
            f"!= 0) return -1;"]


def _op(gen, op, tensor, operand, weights=None, units=()) -> str:
    """One engine op of a pass as a C descriptor (``OP`` stands for it); ``tensor(name)``: the
    pointer of a pass's tensor; ``weights``: the tensor a CONV reads as its weights (attention's
    K and V, where another run or the function's input wrote them: never packed, since the
    packed copy would be the first call's)."""
    p = gen.precision
    if isinstance(op, Bdma):
        copy = CopySpec(None, op.channels, op.src_offset, op.src_stride, op.dst_offset,
                        op.dst_stride, repeat=op.repeat, src_repeat_stride=op.src_repeat_stride,
                        dst_repeat_stride=op.dst_repeat_stride)
        return emit.bdma_op(copy, op.dst_channels, p)
    if isinstance(op, Pool):
        spec = PoolSpec(op.kind, tuple(op.kernel), tuple(op.stride), tuple(op.padding),
                        bool(op.count_include_pad), f"pdp:{op.kind} along W")
        return emit.pool_op(spec, p)
    if isinstance(op, Conv) and weights is not None:
        spec = ConvSpec(weight=None, weight_shape=tuple(op.weight_shape),
                        source="relax.matmul: weights another run computed")
        return emit.conv_op(spec, tensor(weights), p)
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
        fields.update(ew_op=emit.c_elementwise(op.ew_op), ew_operand=tensor(operand))
        what.append(f"{op.ew_op} {operand}")
        if op.ew_per_channel:  # one value per channel, for every position
            fields["ew_per_channel"] = 1
    # the X units' operands: tensors of the passes (units), or the op's own per-channel
    # constants (accel_sdp_x)
    read = dict(units)
    per_channel = op.x_per_channel_fields()
    for field in X_FIELDS:
        unit, part = field[:2], field[3:]
        if field in read:
            fields[f"{unit}.{part}"] = tensor(read[field])
            what.append(f"{unit} {'+' if part == 'alu' else 'x'} {read[field]}")
        elif isinstance(getattr(op, field), np.ndarray):
            fields[f"{unit}.{part}"] = gen._constant(getattr(op, field))
            what.append(f"{unit} {part}")
        else:
            continue
        if field in per_channel:
            fields[f"{unit}.{part}_per_channel"] = 1
    if op.act:
        fields["act"] = emit.c_activation(op.act)
        what.append(op.act)
    if op.act == "clip":  # its bounds (a GRN's squares: GRN_SQUARE_FLOOR)
        fields.update(clip_min=emit.c_float(op.clip[0]), clip_max=emit.c_float(op.clip[1]))
    fields["precision"] = emit.c_precision(p)
    return emit.sdp_op(", ".join(what) or "identity", fields)


def _clears(ops) -> bool:
    """Whether a pass leaves output channels unwritten (a BDMA copy of fewer channels than its
    surface has: the zero padding of an odd half), so its output must start as zeros."""
    return any(isinstance(op, Bdma) and op.dst_channels is not None and
               (op.repeat + 1) * op.channels < op.dst_channels  # none is written twice
               for op in ops)


def _dense_run(gen, data: relax.Expr, surface: str, program_run, dense: Layer,
               free_after: Optional[int] = None) -> str:
    """A token layer's dense CONV + SDP run on ``surface`` (``data`` transposed), into a new
    buffer it returns (live to ``free_after``, this layer by default). In int8 the transposes
    move codes as they are: the run reads the data's quantisation, and the layer's output
    (after the transpose back) has the run's (``int8_plan``)."""
    out = gen._temp(int(np.prod(dense.out_shape)), free_after)
    gen.inner[data] = surface
    try:
        gen._emit(program_run, out, layer=dense)
    finally:
        del gen.inner[data]
    return out


def _surface_of(gen, index: int, layer: Layer, scope, data: str) -> str:
    """The [B, C, 1, T] surface of a token layer's data: where the token layer that wrote the
    data left it (``token_surfaces``), else its tokens at ``data`` transposed into scratch,
    which then holds it for the data's later readers."""
    b, c, h, w = layer.in_shape
    precision = gen.precision
    source = resolve_operand(layer.data, scope)[0]
    held = gen.token_surfaces.get(source)
    fits = held is not None and held[1:] == ((b, c, h * w), precision)
    if source in gen.surface_only and not fits:
        raise AccelInvalidError(f"layer {index}: its data's tokens were not written (every "
                                f"reader was to take their surface), and it cannot")
    if fits:
        gen.body.append(f"/* layer {index}: tokens [{b}, {h * w}, {c}] on their surface "
                        f"[{b}, {c}, {h}, {w}] already */")
        return held[0]
    # kept until the data's last reader: a later token layer or residual add reads it there
    surface = gen._temp(int(np.prod(layer.in_shape)), gen.last_use.get(source, index))
    gen.body.extend(transpose(data, surface, b, h * w, c, precision,
                              f"layer {index}: tokens [{b}, {h * w}, {c}] onto the "
                              f"surface [{b}, {c}, {h}, {w}]"))
    if isinstance(source, relax.Var):
        gen.token_surfaces[source] = (surface, (b, c, h * w), precision)
    return surface


def emit_token_layer(gen, index: int, var: relax.Var, layer: Layer, scope,
                     primitive: str) -> None:
    """The runs of a token layer, from its channels-last data to ``var``'s buffer,
    channels-last: a dense layer's CONV + SDP run, or a norm's runs (``Layer.norm_runs``), or
    attention's (its K read as written, a row per token; its V onto its surface too); a norm
    over the channels of NCHW data (``layer.tokens`` False) reads its data as its surface and
    copies its result into its buffer."""
    precision = gen.precision
    b, c, h, w = layer.in_shape
    program_runs = [run for run in gen.program.runs if run.call == index and not run.converts]
    decomposition = None
    runs = [run.layer for run in program_runs] if layer.norm is not None else \
        [token_dense(layer, program_runs)]  # without a norm: one run, on the surface
    if layer.norm is not None:
        surface_shape = layer.in_shape if layer.conv is None else \
            (b, layer.conv.weight_shape[0], h, w)
        decomposition = layer.norm.decomposition(surface_shape, precision)
    first_key = program_runs[0].key
    itemsize = gen.storage.itemsize
    ctype = C_TYPES[precision]
    data, _ = gen._data(layer.data, scope, (first_key, INPUT))
    attention = layer.norm.attention if layer.norm is not None else None
    if attention is None and layer.tokens:
        surface = _surface_of(gen, index, layer, scope, data)
        tensors = {"x": surface}
    elif attention is None:  # a norm over the channels of NCHW data: the data is its surface
        surface = data
        tensors = {"x": surface}
    else:
        tensors = _attention_tensors(gen, index, var, attention, scope, decomposition, data,
                                     first_key)
    views = decomposition.views if decomposition is not None else {}

    def tensor(name: str) -> str:
        """A pass's tensor; a view: its first channel's address in its tensor (one image, or
        every channel)."""
        if name not in views:
            if name not in tensors:  # written in parts (through views) before it is read
                tensors[name] = gen._temp(int(np.prod(decomposition.shapes[name])))
            return tensors[name]
        base, first, _, _ = views[name]
        shape = decomposition.shapes[base]
        return f"(({ctype}*){tensor(base)} + {first * shape[2] * shape[3]})"

    # the last pass's output lives as long as the layer's (the surface its token readers take)
    keep = gen.last_use.get(var, gen.layer_index) if layer.tokens and attention is None \
        else None
    start = 0
    if layer.conv is not None:
        tensors["x"] = _dense_run(gen, layer.data, surface, program_runs[0], runs[0],
                                  keep if decomposition is None else None)
        start = 1
    for part, run in enumerate(runs[start:], start):
        step = run.step
        label = program_runs[part].label
        count = int(np.prod(run.out_shape))
        if step.output in views or step.output in decomposition.into:
            out = tensor(step.output)
        else:
            out = tensors[step.output] = gen._temp(
                count, keep if step.output == decomposition.output else None)
        lines = [f"/* {label}: {step.role} */", "{", emit.name_run(label, gen.layer_source)]
        # heads: all written, into the output or a window's rows of it
        if _clears(step.ops) and step.output not in decomposition.into and \
                views.get(step.output, (None,))[0] not in decomposition.into:
            lines.append(f"  memset({out}, 0, {count * itemsize});")
        ops = [_op(gen, op, tensor, step.operand, step.weights, step.units) for op in step.ops]
        lines += emit.run_layer(ops, tensor(step.input), run.in_shape, out, run.out_shape,
                                run.fused(gen.fuse), label, precision)
        gen.body.extend(lines + ["}"])
    if attention is not None:  # its runs wrote the output's rows
        return
    if decomposition is not None:
        last = tensor(decomposition.output)
        b, k, h, w = decomposition.shapes[decomposition.output]
    else:
        last = tensors["x"]
        b, k, h, w = runs[-1].out_shape
    if not layer.tokens:  # NCHW: the surface is the output's layout
        gen.body.append(f"memcpy({gen.operands[var]}, {last}, {b * k * h * w * itemsize}); "
                        f"/* layer {index}: the result into its buffer */")
        return
    kept = decomposition is None or (decomposition.output not in views and
                                     decomposition.output not in decomposition.into)
    _tokens_of(gen, index, var, last, (b, k, h, w), kept)


def _attention_tensors(gen, index: int, var: relax.Var, attention, scope, decomposition,
                       data: str, first_key: str) -> dict:
    """Attention's tensors: Q (``data``) and V as written (a row per token), K on its surface
    (the K projection's, or its tokens transposed), the output by rows, the passes'
    constants."""
    _, ck, _, tk = decomposition.shapes["k"]
    windows = attention.windows  # Swin's: each window's K onto a surface of its own
    ck //= windows
    tensors = {"x": data, "o": gen.operands[var]}
    if attention.value is not None:  # none: need_weights=True's probabilities (groups)
        tensors["v"] = gen._data(attention.value, scope, (first_key, INPUT))[0]
    tensors.update({name: gen._constant(value)
                    for name, value in decomposition.constants.items()})
    if attention.key_bias is not None:  # [W, 1, T, Tk]: the surface [1, W T, 1, Tk]'s bytes
        tensors["bias"] = gen._data(attention.key_bias, scope, (first_key, INPUT))[0]
    held = _key_surface(gen, attention, scope, (ck, tk))
    if held is not None:  # the K projection left it: no transpose back and forth
        tensors["k"] = held
        gen.body.append(f"/* layer {index}: K on its surface [1, {ck}, 1, {tk}] already */")
        return tensors
    if resolve_operand(attention.key, scope)[0] in gen.surface_only:
        raise AccelInvalidError(f"layer {index}: its K's tokens were not written (every "
                                f"reader was to take their surface), and it cannot")
    k_data = gen._data(attention.key, scope, (first_key, INPUT))[0]
    tensors["k"] = gen._temp(windows * ck * tk)
    gen.body.extend(transpose(k_data, tensors["k"], windows, tk, ck, gen.precision,
                              f"layer {index}: K [{windows * tk}, {ck}] onto "
                              f"{windows} surface(s) [1, {ck}, 1, {tk}]"))
    return tensors


def _tokens_of(gen, index: int, var: relax.Var, last: str, shape, kept: bool) -> None:
    """A token layer's result on its surface ``last`` ([B, K, H, W]) kept for the token
    layers that read it (if ``kept``: it lives as long as ``var``) and transposed back to
    ``var``'s tokens, unless every reader takes the surface."""
    b, k, h, w = shape
    precision = gen.precision
    if kept:
        gen.token_surfaces[var] = (last, (b, k, h * w), precision)
    if kept and _readers_take_surface(gen, index, var, (b, k, h * w), precision):
        gen.surface_only.add(var)
        gen.body.append(f"/* layer {index}: its tokens stay on the surface [{b}, {k}, {h}, "
                        f"{w}]: every reader takes it */")
        return
    gen.body.extend(transpose(last, gen.operands[var], b, k, h * w,
                              precision, f"layer {index}: the surface [{b}, {k}, {h}, {w}] "
                                         f"back to tokens [{b}, {h * w}, {k}]"))


def _key_surface(gen, attention, scope, shape) -> Optional[str]:
    """The surface [1, C, 1, Tk] of attention's K where the token layer that wrote K left
    it (``token_surfaces``: the K projection's output before its transpose back to tokens),
    else None. One image, not Swin's windows (their K is one surface per window)."""
    if attention.windows != 1:
        return None
    source = resolve_operand(attention.key, scope)[0]
    held = gen.token_surfaces.get(source)
    if held is None or held[1:] != ((1,) + tuple(shape), gen.precision):
        return None
    return held[0]


def _token_shape(var: relax.Expr) -> Optional[Tuple[int, int, int]]:
    """(B, C, T) of a [B, T, C] or [T, C] tensor's surface, else None."""
    try:
        shape = static_shape(var)
    except Exception:  # pylint: disable=broad-except  (not a tensor of a static shape)
        return None
    if len(shape) not in (2, 3):
        return None
    b, c, _, t = token_surface(tuple(shape))
    return b, c, t


def _plain_elementwise(call, runs) -> bool:
    """Whether a layer is one SDP run of an element-wise op and nothing per channel (no bias,
    scale, batch norm or PReLU slope), reading its data as the feature surface of its type."""
    layer, s = call.layer, call.layer.sdp
    return (len(runs) == 1 and not layer.tokens and layer.norm is None and
            layer.conv is None and layer.pool is None and not layer.copies and
            layer.lrn is None and layer.rubik is None and layer.branch is None and
            layer.out_view is None and s.ew_op is not None and s.bias is None and
            s.batch_norm is None and s.scale is None and s.prelu_slope is None and
            s.act != "prelu" and
            tuple(layer.in_shape) == feature_surface(tuple(static_shape(call.binding.var))))


def surface_adds(function, precision: str) -> Dict[int, Tuple[int, int, int]]:
    """The layers of a Program function that run on token surfaces (``emit_surface_add``):
    layer index -> (B, C, T). Such a layer is an element-wise op of two token tensors (a
    transformer's residual add): one SDP run with nothing per channel, its data, operand and
    output all [B, T, C] (or [T, C]), each operand held on its surface when the layer runs:
    written by a token layer that keeps its result's surface, or by another such layer, or
    read before as the data of a token layer (which transposes it onto a surface it then
    keeps, ``_surface_of``). In fp32 and fp16 code only (int8 and mixed code plan their
    converters on the tokens). The planning pass (``plan_surface_adds``) gives these runs the
    surface's shape, so that the estimate prices the run that runs."""
    if precision not in ("fp32", "fp16"):
        return {}
    runs: Dict[int, List] = {}
    for run in function.runs:
        if not run.converts:
            runs.setdefault(run.call, []).append(run)
    surfaces: Dict[relax.Var, Tuple[int, int, int]] = {}  # var -> the surface held
    chosen: Dict[int, Tuple[int, int, int]] = {}
    for j, call in enumerate(function.calls):
        layer = call.layer
        if j not in runs:
            continue
        scope = runs[j][0].scope
        if layer.tokens and (layer.norm is None or layer.norm.attention is None):
            b, c, h, w = layer.in_shape
            data = resolve_operand(layer.data, scope)[0]
            if isinstance(data, relax.Var):  # held from here on (_surface_of)
                surfaces.setdefault(data, (b, c, h * w))
            if _keeps_surface(layer, precision):
                out_c = layer.conv.weight_shape[0] if layer.conv is not None else c
                surfaces[call.binding.var] = (b, out_c, h * w)
            continue
        shape = _token_shape(call.binding.var)
        if shape is None or not _plain_elementwise(call, runs[j]):
            continue
        operands = [resolve_operand(e, scope) for e in (layer.data, layer.sdp.operand)]
        if any(value is not None or not isinstance(source, relax.Var) or
                                _token_shape(source) != shape or surfaces.get(source) != shape
                                for source, value in operands):
            continue
        chosen[j] = shape
        surfaces[call.binding.var] = shape
    return chosen


def _keeps_surface(layer: Layer, precision: str) -> bool:
    """Whether a token layer (not attention) keeps its result's surface for its readers
    (``emit_token_layer``'s ``kept``): its last pass writes a tensor of its own."""
    if layer.norm is None:
        return True
    b, c, h, w = layer.in_shape
    surface = layer.in_shape if layer.conv is None else (b, layer.conv.weight_shape[0], h, w)
    decomposition = layer.norm.decomposition(surface, precision)
    return decomposition.output not in decomposition.views and \
        decomposition.output not in decomposition.into


def plan_surface_adds(program) -> None:
    """The planning pass of ``surface_adds``, once per function: its choice recorded on the
    function (``Function.surface_adds``, which the code generator follows), each such run's
    layer on the surface [B, C, 1, T] (the same element-wise op on the same values; the
    estimate and the profile then price the run of that shape). A function planned before
    keeps its choice (the estimate plans a program the code generator planned)."""
    for function in program.functions:
        _plan_function(function, program.precision)


def _plan_function(function, precision: str) -> Dict[int, Tuple[int, int, int]]:
    if function.surface_adds is None:
        chosen = surface_adds(function, precision)
        for run in function.runs:
            if run.call in chosen and not run.converts:
                run.layer = _on_surface(run.layer, chosen[run.call])
        function.surface_adds = chosen
    return function.surface_adds


def _on_surface(layer: Layer, shape) -> Layer:
    b, c, t = shape
    return dataclasses.replace(layer, in_shape=(b, c, 1, t), out_shape=(b, c, 1, t))


def _adds(gen) -> Dict[int, Tuple[int, int, int]]:
    """The function's surface adds as its planning pass chose them: one decision per
    function, not a second one here by the code generator's own reading of the precision
    (where the two could differ, an operand's surface would be missing)."""
    return _plan_function(gen.program, gen.function_precision)


def emit_surface_add(gen, index: int, var: relax.Var, layer: Layer, runs) -> bool:
    """An element-wise op of two token tensors (a transformer's residual add) run on the
    surfaces the layers that wrote them left, its result kept on its own surface for its
    readers (and transposed back to tokens unless every reader takes the surface): the same
    SDP run on the same values, element for element, without a transpose either side. NVDLA
    adds the two [B, C, 1, T] surfaces where they lie. False (nothing emitted): not such a
    layer (``_surface_add``)."""
    shape = _adds(gen).get(index)
    if shape is None:
        return False
    b, c, t = shape
    scope = runs[0].scope
    exprs = (layer.data, layer.sdp.operand)
    surfaces = []
    for expr in exprs:
        held = gen.token_surfaces.get(resolve_operand(expr, scope)[0])
        if held is None or held[1:] != (shape, gen.precision):
            raise AccelInvalidError(f"layer {index}: an operand's surface was not kept")
        surfaces.append(held[0])
    out = gen._temp(b * c * t, gen.last_use.get(var, gen.layer_index))
    surface_layer = _on_surface(runs[0].layer, shape)
    gen.body.append(f"/* layer {index}: on the surfaces [{b}, {c}, 1, {t}] of its operands */")
    for expr, surface in zip(exprs, surfaces):
        gen.inner[expr] = surface
    try:
        gen._emit(runs[0], out, layer=surface_layer)
    finally:
        for expr in exprs:
            gen.inner.pop(expr, None)
    _tokens_of(gen, index, var, out, (b, c, 1, t), True)
    return True


def _takes_surface(gen, j: int, var: relax.Var, shape, precision: str) -> bool:
    """Whether layer ``j`` reads ``var`` only as a surface of ``shape`` [B, C, T] in
    ``precision``: a token layer's data, or attention's K (one image; not also its Q or V,
    which it reads as rows)."""
    reader = gen.program.calls[j]
    layer = reader.layer
    if not layer.tokens:
        return _adds(gen).get(j) == tuple(shape) and precision == gen.precision
    mixed = gen.function_precision == "mixed"
    if (reader.precision if mixed else gen.precision) != precision:
        return False
    if sum(1 for a in reader.binding.value.args if var.same_as(a)) != 1:
        return False
    scope = next(r.scope for r in gen.program.runs if r.call == j and not r.converts)
    attention = layer.norm.attention if layer.norm is not None else None
    if attention is not None:
        b, c, t = shape
        reads = [resolve_operand(e, scope)[0] if e is not None else None
                 for e in (layer.data, attention.key, attention.value)]
        return (attention.windows == 1 and b == 1 and var.same_as(reads[1]) and
                not var.same_as(reads[0]) and not (reads[2] is not None and
                                                   var.same_as(reads[2])) and
                attention.channels["k"][0] == c and attention.kv_tokens == t)
    if not var.same_as(resolve_operand(layer.data, scope)[0]):
        return False
    b, c, h, w = layer.in_shape
    return (b, c, h * w) == tuple(shape)


def _readers_take_surface(gen, index: int, var: relax.Var, shape, precision: str) -> bool:
    """Whether every layer reading ``var`` (the output of layer ``index``) reads it as the
    data of a token layer of that shape and precision, and only so, which then takes the
    surface (emit_token_layer): the tokens need not be written at all. Not for an output of
    the function, nor where a converting run reads them."""
    call = gen.program.calls[index]
    users = gen.readers.get(var, [])
    if not users or call.converted or any(var.same_as(o) for o in gen.outputs):
        return False
    return all(_takes_surface(gen, j, var, shape, precision) for j in set(users))
