"""C source for one offloaded function: walks its layers, decides where every tensor lives and
in which precision, and writes one accelerator run per layer.

The pure parts live beside it: scratch planning (:mod:`.buffers`), the constant pool
(:mod:`.constants`), the int8 converter maths (:mod:`.int8`), folding (:mod:`.folding`) and
the C text (:mod:`.emit`); the fixed C is ``accel/tvm_glue.h``.
"""
from __future__ import annotations

import textwrap
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from tvm import relax

from ...errors import AccelInvalidError, AccelUnsupportedError
from ...quantization import Calibration, Key, TensorQuant
from ...quantization.lut import layer_lut
from ...sim.config import AccelConfig
from ...sim.labels import CONVERT_PART, CONVERT_PRIMITIVE, copy_part, run_key, run_label
from ...sim.observer import INPUT, operand_index
from ...sim.reference import is_lut_activation
from ..layer import (BatchNormSpec, Layer, SdpSpec, constant_value, feature_surface,
                     is_constant, static_shape)
from ..program import MIXED, Program, Run, layer_runs, lower_function
from ..program import Function as ProgramFunction
from . import emit, int8, passes
from .buffers import ScratchPlanner
from .constants import ConstantPool
from .folding import affine, fold_batch_norm
from .planning import plan_program

#: Storage dtype of each precision the code generator emits.
STORAGE = {"fp32": np.float32, "fp16": np.float16, "int8": np.int8}
def other_precision(precision: str) -> str:
    return MIXED[1 - MIXED.index(precision)]


def _channels(layer: Layer) -> int:
    return layer.conv.weight_shape[0] if layer.conv is not None else layer.in_shape[1]


class FunctionCodegen:
    """C source for one offloaded function (the ``index``-th the code generator sees).

    ``precision`` "mixed": each layer in the precision ``layer_precisions`` gives it by its key
    (``f0.3``), int8 or fp16; a layer's output that a layer of the other precision reads is
    converted once, by a converting SDP run right after it (its int8 side quantised as an int8
    layer would have written it), so :attr:`precision` is the current layer's.

    ``program``: the function's layers and runs (:mod:`..program`), when the caller has
    lowered them."""

    def __init__(self, function: relax.Function, config: AccelConfig, fuse: bool, index: int,
                 precision: str = "fp32", calibration: Optional[Calibration] = None,
                 winograd: bool = True, layer_precisions: Optional[Dict[str, str]] = None,
                 program: Optional[ProgramFunction] = None):
        self.function = function
        if program is None:  # planned as the module's only function
            program = plan_program(Program([lower_function(function, index, precision,
                                                           layer_precisions)],
                                           precision, layer_precisions),
                                   config, fuse, winograd).functions[0]
        self.program = program
        self.runs = {run.key: run for run in program.runs}
        self.config = config
        self.fuse = fuse
        self.index = index
        self.function_precision = precision
        self.layer_precisions = layer_precisions or {}
        if precision == "mixed":
            precision = MIXED[0]  # each layer sets its own (run)
        self.precision = precision
        self.storage = np.dtype(STORAGE[precision])
        self.calibration = calibration
        self.symbol = str(function.attrs["global_symbol"])
        # Fused ops name the symbol: long enough to crowd the reason out of an error message.
        self.short = self.symbol if len(self.symbol) <= 64 else \
            f"{self.symbol[:40]}...{self.symbol[-20:]}"
        self.pool = ConstantPool(self.symbol, precision)
        self.scratch = ScratchPlanner()
        self.packed = 0  # convs whose weights the glue packs once (int8, fp16, Winograd)
        self.quantization: Dict[Key, TensorQuant] = {}  # every tensor the runs read or write
        self.layer_index = 0
        self.last_use: Dict[relax.Var, int] = {}
        self.layer_comments: List[str] = []
        self.body: List[str] = []
        self.inputs = list(function.params)
        self.outputs = self._outputs()
        # Where each tensor lives, in the function's precision, and its int8 quantisation.
        self.args: Dict[relax.Var, str] = {p: f"a[{i}]" for i, p in enumerate(self.inputs)}
        for r, var in enumerate(self.outputs):
            self.args.setdefault(var, f"a[{len(self.inputs) + r}]")
        self.operands: Dict[relax.Var, str] = dict(self.args) if precision == "fp32" else {}
        self.held: Dict[relax.Var, str] = {}  # mixed: the precision of each operand
        self.converted: Dict[relax.Var, str] = {}  # mixed: operands in the other precision
        self.quant: Dict[relax.Var, TensorQuant] = {}
        self.inner: Dict[relax.Var, str] = {}  # composite-internal results held in scratch
        self.emitting: Optional[Run] = None  # the run being emitted

    @property
    def constants(self) -> Dict[str, np.ndarray]:
        return self.pool.arrays

    # --- operands ---------------------------------------------------------------------------
    def _outputs(self) -> List[relax.Var]:
        result = self.function.body.body
        fields = list(result.fields) if isinstance(result, relax.Tuple) else [result]
        for i, var in enumerate(fields):
            if not isinstance(var, relax.Var):
                raise AccelUnsupportedError(f"{self.short}: output {i} is not a variable")
        return fields

    def _constant(self, array: np.ndarray) -> str:
        return f"k_const[{self.pool.add(array)}]"

    def _temp(self, count: int, free_after: Optional[int] = None, itemsize: int = 0) -> str:
        """Scratch for ``count`` elements (of the function's precision unless ``itemsize``
        says otherwise), live from this layer to ``free_after`` (this layer by default)."""
        size = int(count) * (itemsize or self.storage.itemsize)
        free_after = self.layer_index if free_after is None else free_after
        return f"k_temp[{self.scratch.allocate(size, self.layer_index, free_after)}]"

    def _pointer(self, expr: Optional[relax.Expr], scope, reshape=None) -> str:
        """A C pointer expression for an operand of a composite (its params map to the call's
        arguments in this function)."""
        if expr is None:
            return "NULL"
        if expr in self.inner:
            return self.inner[expr]
        expr = scope.get(expr, expr)
        if is_constant(expr):
            value = constant_value(expr)
            return self._constant(reshape(value) if reshape else value)
        held = self._held(expr)
        if held is not None:
            return held
        if expr in self.args:  # a function input, converted where it enters
            return self._enter(expr, None)
        raise AccelInvalidError(f"{self.short}: operand {expr} is not bound in the function")

    def _held(self, var: relax.Expr) -> Optional[str]:
        """Where ``var`` is held in the current layer's precision, if it is."""
        if var in self.operands and self.held.get(var, self.precision) == self.precision:
            return self.operands[var]
        return self.converted.get(var)

    def _data(self, expr: relax.Expr, scope, key: Key) -> Tuple[str, Optional[TensorQuant]]:
        """Pointer and quantisation of a data tensor in the function's precision; ``key``
        names the calibration statistics of this use, for tensors quantised here."""
        if expr in self.inner:
            return self.inner[expr], self.quant.get(expr)
        resolved = scope.get(expr, expr)
        if is_constant(resolved):  # a constant element-wise operand: its own scale
            value = np.asarray(constant_value(resolved), np.float64)
            quant = None
            if self.precision == "int8":
                quant = int8.range_quant(value)
                value = quant.quantize(value)
            return self._constant(value), quant
        held = self._held(resolved)
        if held is not None:
            return held, self.quant.get(resolved)
        if resolved in self.args:
            return self._enter(resolved, key), self.quant.get(resolved)
        raise AccelInvalidError(f"{self.short}: operand {expr} is not bound in the function")

    def _calibrated(self, key: Key, layer_int8: bool = False) -> Optional[TensorQuant]:
        """The calibrated quantisation of ``key`` in int8 code (``layer_int8``: also for a
        layer of another precision, whose output mixed code converts to int8)."""
        if self.precision != "int8" and not layer_int8:
            return None
        if self.calibration is None:
            raise AccelInvalidError("int8 code needs a calibration")
        return self.calibration.get(*key)

    def _enter(self, var: relax.Var, key: Optional[Key]) -> str:
        """A function input converted to the function's precision, once, where it is first
        read; it stays until its last reader."""
        count = int(np.prod(static_shape(var)))
        quant = self._calibrated(key) if key is not None else None
        if self.precision == "int8" and quant is None:
            raise AccelInvalidError(f"{self.short}: input {var.name} has no calibration")
        temp = self._temp(count, self.last_use.get(var, self.layer_index))
        if var in self.operands:  # mixed: entered in the other precision already
            self.converted[var] = temp
        else:
            self.operands[var], self.held[var] = temp, self.precision
        if quant is not None:
            self.quant[var] = quant
        self.body.append(f"/* input {var.name} enters as {self.precision} */")
        self.body.append(emit.convert(self.args[var], "fp32", temp, self.precision, count,
                                             *self._scale_zero(quant)))
        return temp

    @staticmethod
    def _scale_zero(quant: Optional[TensorQuant]) -> Tuple[float, int]:
        return (quant.scale, quant.zero) if quant is not None else (1.0, 0)

    # --- layers -----------------------------------------------------------------------------
    def run(self) -> str:
        """The function's C source."""
        calls = self.program.calls
        plain = [b for block in self.function.body.blocks for b in block.bindings
                 if not isinstance(b.value, relax.Function)]
        if len(plain) != len(calls):
            raise AccelUnsupportedError(f"{self.short}: a binding that calls no composite")
        for index, call in enumerate(calls):
            for arg in call.binding.value.args:
                self.last_use[arg] = index
        for index, call in enumerate(calls):
            self.layer_index = index
            if self.function_precision == "mixed":
                self._use_precision(call.precision)
            self._layer(index, call.binding.var, call.composite, call.binding.value.args)
            if call.converted:  # the program's converting run after the layer
                self._convert_output(index, call.binding.var, call.composite,
                                     call.binding.value.args)
        return translation_unit(self)

    # --- mixed precision --------------------------------------------------------------------

    def _use_precision(self, precision: str) -> None:
        self.precision = precision
        self.storage = np.dtype(STORAGE[precision])
        self.pool.float_dtype = np.float16 if precision == "fp16" else np.float32

    def _int8_output(self, index: int, var: relax.Var, composite: relax.Function,
                     args) -> TensorQuant:
        """The int8 quantisation of layer ``index``'s output: an int8 layer's own; for an fp16
        layer, the one int8 code of that layer would have given it."""
        if self.precision == "int8":
            return self.quant[var]
        layer = self.program.calls[index].layer
        if len(layer.copies) > 1:
            return int8.concat_quant(self._calibrated((run_key(self.index, index, copy_part(p)),
                                                       INPUT), True)
                                     for p in range(len(layer.runs())))
        key = run_key(self.index, index, "b" if layer.branch is not None else "")
        if layer.conv is None and layer.sdp.empty():  # a pool or a copy keeps its input's
            return self._calibrated((key, INPUT), True)
        pre_pool = (1 if layer.conv is not None else 0) + (0 if layer.sdp.empty() else 1) - 1
        return self._calibrated((key, pre_pool), True)

    def _convert_output(self, index: int, var: relax.Var, composite: relax.Function,
                        args) -> None:
        """A converting run: layer ``index``'s output into the other precision, for the
        layers that read it in that one."""
        quant = self._int8_output(index, var, composite, args)
        target = other_precision(self.precision)
        shape = feature_surface(static_shape(var))
        temp = self._temp(int(np.prod(shape)), self.last_use.get(var, index),
                          itemsize=np.dtype(STORAGE[target]).itemsize)
        self.converted[var], self.quant[var] = temp, quant
        key = run_key(self.index, index, CONVERT_PART)
        label = run_label(key, CONVERT_PRIMITIVE)
        self.quantization[(key, INPUT)] = self.quantization[(key, 0)] = quant
        lines = [f"/* {label}: layer {index}'s output for its {target} readers */", "{"]
        lines += emit.run_layer([emit.convert_op(self.precision, quant.scale, quant.zero)],
                                self.operands[var], shape, temp, shape, False, label,
                                self.precision, target)
        self.body.extend(lines + ["}"])

    def _layer(self, index: int, var: relax.Var, composite: relax.Function,
               args: Sequence[relax.Expr]) -> None:
        name = str(composite.attrs["Composite"])
        scope = dict(zip(composite.params, args))
        layer = self.program.calls[index].layer
        if var not in self.operands:
            # Live until its last reader; never the same buffer as this layer's inputs, which
            # are still live while it is allocated.
            self.operands[var] = self._temp(int(np.prod(static_shape(var))),
                                            self.last_use.get(var, index))
            self.held[var] = self.precision
        sources = layer.source_ops if layer.branch is None else \
            layer.branch.source_ops + layer.source_ops
        self.layer_comments.append(f"{index}: {name} ({', '.join(sources)})" + (
            f" in {self.precision}" if self.function_precision == "mixed" else ""))
        if layer.tokens:  # channels-last data, one run per engine pass (codegen/passes.py)
            passes.emit_token_layer(self, index, var, layer, scope, name)
            self._leave(var)
            return
        if layer.rubik is not None:
            self._deconvolution(index, var, layer, scope, name)
            self._leave(var)
            return
        if len(layer.copies) > 1:  # one run per copy, all into this layer's output
            runs = layer.runs()
            int8_code = self.precision == "int8"
            if int8_code and layer.several_sources:
                self.quant[var] = int8.concat_quant(
                    self._data(run.data, scope, (run_key(self.index, index, copy_part(part)),
                                                 INPUT))[1] for part, run in enumerate(runs))
            for part, run in enumerate(runs):
                key = run_key(self.index, index, copy_part(part))
                quant = self._emit(run, scope, key, name, self.operands[var],
                                   concat=self.quant.get(var) if int8_code else None)
                # An fp16 concat of mixed code has no int8 quantisation of its own (an int8
                # source's would be the wrong one): its int8 readers get the converting run's.
                if int8_code:
                    self.quant[var] = quant
            self._leave(var)
            return
        part = ""
        if layer.branch is not None:
            branch_out = self._temp(int(np.prod(layer.branch.out_shape)))
            self.inner[layer.sdp.operand] = branch_out
            self.quant[layer.sdp.operand] = self._emit(
                layer.branch, scope, run_key(self.index, index, "a"), name, branch_out, True,
                output_var=layer.sdp.operand)
            part = "b"
        quant = self._emit(layer, scope, run_key(self.index, index, part), name,
                           self.operands[var], output_var=var)
        if self.precision == "int8":  # fp16 and fp32 outputs have none
            self.quant[var] = quant
        self._leave(var)

    def _deconvolution(self, index: int, var: relax.Var, layer: Layer, scope, name: str
                       ) -> None:
        """A transposed convolution or nearest upsampling: its conv (or one BDMA copy per
        phase) writes the output's phases into scratch, then a RUBIK run contracts them into
        the output. The contract moves codes, so an int8 output keeps the phases' scale."""
        phases = self._temp(int(np.prod(layer.phase_shape)))
        quant = None
        for part, run in layer_runs(layer):
            key = run_key(self.index, index, part)
            if not run.contract_only:
                quant = self._emit(run, scope, key, name, phases)
                continue
            label = run_label(key, name)
            self.emitting = self.runs[key]
            ops = emit.sram_streams([emit.rubik_op(run.rubik, self.precision)],
                                    self.emitting.memory.sram)
            lines = [f"/* {label}: {' -> '.join(run.source_ops)} */", "{"]
            lines += emit.run_layer(ops, phases, run.in_shape, self.operands[var],
                                    feature_surface(run.out_shape), run.fused(self.fuse), label,
                                    self.precision)
            self.body.extend(lines + ["}"])
            if self.precision == "int8":
                self.quantization[(key, INPUT)] = self.quantization[(key, 0)] = quant
        if self.precision == "int8":
            self.quant[var] = quant

    def _leave(self, var: relax.Var) -> None:
        if self.precision != "fp32" and var in self.args:  # an output leaves as fp32
            quant = self.quant[var] if self.precision == "int8" else None
            self.body.append(emit.convert(
                self.operands[var], self.precision, self.args[var], "fp32",
                int(np.prod(static_shape(var))), *self._scale_zero(quant)))

    def _emit(self, layer: Layer, scope, key: str, primitive: str, output: str,
              branch: bool = False, concat: Optional[TensorQuant] = None,
              output_var: Optional[relax.Var] = None) -> Optional[TensorQuant]:
        """One accelerator run; returns the int8 quantisation of its output (``concat``: the
        quantisation of the int8 concat this copy rescales its input into; ``output_var``: the
        layer's output, whose layout the run writes, or None for NCHW)."""
        label = run_label(key, primitive, branch)
        self.emitting = self.runs[key]
        in_layout, out_layout = self.emitting.in_layout, self.emitting.out_layout
        lines = [f"/* {label}: {' -> '.join(layer.source_ops)} */", "{"]
        data, in_quant = self._data(layer.data, scope, (key, INPUT))
        ops: List[str] = []
        out_quant = in_quant
        out_shape = layer.out_surface
        if self.precision == "int8" and layer.requantize:
            ops.append(self._requantize(layer, in_quant, concat, key))
            out_quant, out_shape = concat, layer.in_shape
            offset = layer.copies[0].dst_offset * int(np.prod(out_shape[2:]))
            output = f"(int8_t*){output} + {offset}"
            self.quantization[(key, INPUT)] = in_quant
            self.quantization[(key, 0)] = concat
        elif layer.lrn is not None:
            ops.append(emit.cdp_op(layer.lrn, self.precision))
        elif layer.copies:  # a copy keeps the int8 codes, so their scale and zero point
            ops.append(emit.bdma_op(layer.copies[0], layer.out_surface[1],
                                    self.precision))
            if self.precision == "int8":  # an fp16 copy of mixed code stores no int8 tensor
                self.quantization[(key, INPUT)] = self.quantization[(key, 0)] = in_quant
        elif self.precision == "int8":
            ops, out_quant = self._int8_ops(layer, scope, key, in_quant)
            self.quantization[(key, INPUT)] = in_quant
            for i in range(1 if layer.conv is not None else 0, len(ops)):
                self.quantization[(key, i)] = out_quant
        elif self.precision == "fp16" and self.fuse and layer.conv is not None and \
                not layer.computed_dense_weight:
            # Batch norm's (or a scale's) factor goes into the weights before they are
            # rounded to half: one rounding fewer per layer; the SDP adds the shift.
            weights = self.emitting.weights
            ops.append(self._conv(layer, scope, self._constant(weights.array)))
            shift = "NULL" if layer.sdp.bias is None and layer.sdp.batch_norm is None else \
                self._constant(weights.affine[1])
            ops.extend(self._sdp(layer, scope, lines, ("NULL", shift)))
        else:
            if layer.conv is not None:
                ops.append(self._conv(layer, scope, c16=in_layout == out_layout == "c16"))
            ops.extend(self._sdp(layer, scope, lines))
        if self.precision == "fp16" and layer.conv is not None and len(ops) == 1:
            ops.append(emit.sdp_op("the accumulators' converter",
                                   {"precision": emit.c_precision(self.precision)}))
        if self.precision != "int8" and layer.pool is not None:
            ops.extend(self._pools(layer))
        ops = emit.sram_streams(ops, self.emitting.memory.sram)
        lines += emit.run_layer(ops, data, layer.in_shape, output, out_shape,
                                layer.fused(self.fuse), label, self.precision,
                                in_layout=in_layout, out_layout=out_layout)
        self.body.extend(lines + ["}"])
        return out_quant

    def _requantize(self, layer: Layer, in_quant: TensorQuant, out_quant: TensorQuant,
                    key: str) -> str:
        """An int8 SDP that rescales a concat's input to the concat's quantisation."""
        channels = layer.in_shape[1]
        converters = int8.channel_converters(np.ones(channels), np.zeros(channels),
                                             np.full(channels, in_quant.scale), out_quant.scale,
                                             f"layer {key}")
        return emit.sdp_op("the input to the concat's scale", {
            "precision": "ACCEL_INT8", "in_zero": in_quant.zero, "out_zero": out_quant.zero,
            "bias": f"(const int32_t*){self._constant(converters['bias'])}",
            "mul": f"(const int16_t*){self._constant(converters['mul'])}",
            "rshift": f"(const uint8_t*){self._constant(converters['rshift'])}"})

    def _pools(self, layer: Layer, zero: int = 0) -> List[str]:
        """The PDP pass(es) of a layer's pool, after the rescale of a padded global average
        (only on a layer of its own: Layer.check_hardware)."""
        passes, rescale = layer.pool.passes()
        ops = []
        if rescale != 1.0:
            scale = self._constant(np.full(_channels(layer), rescale))
            ops.append(emit.sdp_op(f"x {rescale:.6g}: the padded passes count "
                                   f"{rescale:.6g}x the window", {
                                       "scale": scale,
                                       "precision": emit.c_precision(self.precision)}))
        return ops + [emit.pool_op(p, self.precision, zero) for p in passes]

    def _conv(self, layer: Layer, scope, weights: Optional[str] = None, in_zero: int = 0,
              c16: bool = False) -> str:
        c = layer.conv
        if weights is None:
            weights = self._pointer(c.weight, scope,
                                    reshape=(lambda v: v.T) if c.transpose_weight else None)
        modes = self.emitting.modes
        pack = None
        # packed (int8), widened (fp16) or pre-transformed (fp32 Winograd, constant weights
        # only: the glue packs once) once, not every call
        winograd = modes.get("mode", "direct") == "winograd" and \
            is_constant(scope.get(c.weight, c.weight))
        # a C16 run's 1x1 weights too (fp32, constant weights), in the C16 kernel's layout
        c16_pack = c16 and is_constant(scope.get(c.weight, c.weight)) and \
            layer.engine_ops(self.fuse, "fp32", modes=modes)[0].packs(self.config,
                                                                      layer.in_shape[1])
        # weights another run computes are read where it wrote them on every call, never
        # packed once (the packed copy would be the first call's)
        computed = not is_constant(scope.get(c.weight, c.weight))
        if (self.precision != "fp32" and not computed) or winograd or c16_pack:
            pack = (layer.in_shape[1], self.packed)
            self.packed += 1
        return emit.conv_op(c, weights, self.precision, in_zero, pack, modes,
                            self.emitting.memory.conv)

    def _sdp(self, layer: Layer, scope, lines: List[str],
             folded: Optional[Tuple[str, str]] = None) -> List[str]:
        """The fp32/fp16 SDP op(s) of a layer; ``folded``: the scale and shift the caller made."""
        s = layer.sdp
        if s.empty():
            return []
        channels = _channels(layer)

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
                fields["prelu_slope"] = self._pointer(s.prelu_slope, scope)
            fields["precision"] = emit.c_precision(self.precision)
            return emit.sdp_op(what, fields)

        operand = self._data(s.operand, scope, ("", 0))[0] if s.ew_op else "NULL"
        if self.fuse and layer.computed_scale:  # x * s, s computed: Layer.computed_scale
            operand = self._data(s.scale, scope, ("", 0))[0]
            stages = " + ".join(["the computed per-channel multiplier"] + [s.act] * bool(s.act))
            return [sdp(stages, ew="mul", operand=operand, act=s.act, per_channel=True)]
        if self.fuse:
            scale, shift = folded or self._scale_shift(s, s.bias, channels, scope, lines)
            stages = [name for name, present in (
                ("bias", s.bias is not None), ("batch_norm", s.batch_norm is not None),
                ("scale", s.scale is not None), (f"{s.ew_op} operand", s.ew_op is not None),
                (s.act, s.act is not None)) if present]
            note = " (folded into one scale/shift)" if s.batch_norm is not None else ""
            return [sdp(" + ".join(stages) + note, scale, shift, s.ew_op, operand, s.act)]
        ops = []
        for stage in s.decomposed_order():
            if stage == "bias":
                ops.append(sdp("bias", shift=self._pointer(s.bias, scope)))
            else:
                ops.append(sdp(stage, *self._scale_shift(s, None, channels, scope, lines)))
        if s.ew_op:
            ops.append(sdp(s.ew_op, ew=s.ew_op, operand=operand))
        if s.act:
            ops.append(sdp(s.act, act=s.act))
        return ops

    def _scale_shift(self, s: SdpSpec, bias, channels: int, scope, lines: List[str]
                     ) -> Tuple[str, str]:
        """Pointers to the SDP's scale and shift: batch norm (with the bias, when given) folded
        into one scale and one shift, at compile time when every parameter is constant."""
        bn = s.batch_norm
        if bn is None:
            return self._pointer(s.scale, scope), self._pointer(bias, scope)
        parts = [bn.gamma, bn.beta, bn.mean, bn.var, bias]
        resolved = [None if p is None else scope.get(p, p) for p in parts]
        if all(p is None or is_constant(p) for p in resolved):
            bias_value = None if bias is None else np.ascontiguousarray(
                constant_value(resolved[4]), np.float32).reshape(-1)
            scale, shift = fold_batch_norm(BatchNormSpec(*resolved[:4], bn.epsilon), bias_value,
                                           channels)
            return self._constant(scale), self._constant(shift)
        scale = self._temp(channels, itemsize=4)
        shift = self._temp(channels, itemsize=4)
        pointers = ", ".join(f"(const float*){self._pointer(p, scope)}" for p in parts)
        lines.append(f"  /* batch norm{' and bias' if bias is not None else ''} are runtime "
                     "inputs: fold them now */")
        lines.append(f"  if (accel_glue_fold_batch_norm(&k_fn, {channels}, {pointers}, "
                     f"{emit.c_float(bn.epsilon)}, (float*){scale}, (float*){shift}) != 0) "
                     "return -1;")
        return scale, shift

    # --- int8 -------------------------------------------------------------------------------
    def _int8_ops(self, layer: Layer, scope, key: str, in_quant: TensorQuant
                  ) -> Tuple[List[str], TensorQuant]:
        """The engine ops of an int8 layer and the quantisation of its output (see int8.py for
        the real-value model)."""
        s = layer.sdp
        channels = _channels(layer)
        if layer.computed_scale:
            out_quant = self._calibrated((key, 0))
            return [self._int8_channel_mul(layer, scope, key, in_quant, out_quant)], out_quant
        ops: List[str] = []
        if layer.conv is not None:  # the weights' codes, folded and quantised once
            weights = self.emitting.weights
            g, h = weights.affine
            means = self.calibration.means.get(key) \
                if self.calibration and self.calibration.bias_correction else None
            h = h - int8.bias_correction(means, layer.conv.groups, weights.codes,
                                         weights.scales, weights.folded)
            unit = in_quant.scale * weights.scales
            g = np.ones(channels)
            ops.append(self._conv(layer, scope, self._constant(weights.codes), in_quant.zero))
        else:
            g, h = affine(s, channels, scope)
            unit = np.full(channels, in_quant.scale)
        out_quant = in_quant
        if layer.conv is not None or not s.empty():
            pre_pool = (1 if layer.conv is not None else 0) + (0 if s.empty() else 1) - 1
            out_quant = self._calibrated((key, pre_pool))
            ops.append(self._int8_sdp(layer, scope, key, g, h, unit, in_quant, out_quant))
        if layer.pool is not None:
            ops.extend(self._pools(layer, out_quant.zero))
        return ops, out_quant

    def _int8_channel_mul(self, layer: Layer, scope, key: str, in_quant: TensorQuant,
                          out_quant: TensorQuant) -> str:
        """x * s with s a computed [N, C] tensor (squeeze-excite): the SDP's element-wise
        multiplier reads s per channel in the codes and zero point its layer wrote; x goes to
        the product's units and the output converter to the output step (int8.elementwise)."""
        s, what = layer.sdp, f"layer {key}"
        channels = _channels(layer)
        ew_key = (key, operand_index(0))
        operand, ew_quant = self._data(s.scale, scope, ew_key)
        self.quantization[ew_key] = ew_quant
        ew = int8.elementwise("mul", out_quant, ew_quant, what)
        converters = int8.channel_converters(np.ones(channels), np.zeros(channels),
                                             np.full(channels, in_quant.scale), ew.target, what)
        fields = {"precision": "ACCEL_INT8", "in_zero": in_quant.zero,
                  "out_zero": out_quant.zero, "ew_op": emit.c_elementwise("mul"),
                  "ew_operand": operand, "ew_per_channel": 1, "ew_zero": ew_quant.zero,
                  "ew_mul": ew.ew_mul, "ew_shift": ew.ew_shift, "out_mul": ew.out_mul,
                  "out_shift": ew.out_shift,
                  "bias": f"(const int32_t*){self._constant(converters['bias'])}",
                  "mul": f"(const int16_t*){self._constant(converters['mul'])}",
                  "rshift": f"(const uint8_t*){self._constant(converters['rshift'])}"}
        if s.act is not None:
            fields["act"] = emit.c_activation(s.act)
        if s.act == "clip":
            fields["clip_lo"], fields["clip_hi"] = int8.clip_codes(s.clip, out_quant)
        return emit.sdp_op(f"x and the computed per-channel multiplier to 2^-{ew.extra_bits} "
                           "of the output step", fields)

    def _int8_sdp(self, layer: Layer, scope, key: str, g, h, unit, in_quant: TensorQuant,
                  out_quant: TensorQuant) -> str:
        s = layer.sdp
        what = f"layer {key}"
        fields = {"precision": "ACCEL_INT8", "out_zero": out_quant.zero}
        if layer.conv is None:
            fields["in_zero"] = in_quant.zero
        target, comment = out_quant.scale, "x: scale/shift to the output step"
        if s.ew_op is not None:
            ew_key = (key, operand_index(1 if layer.conv is not None else 0))
            operand, ew_quant = self._data(s.operand, scope, ew_key)
            self.quantization[ew_key] = ew_quant
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
                          lut=f"(const accel_lut_int8*){self._constant(table.lut.words())}")
        converters = int8.channel_converters(g, h, unit, target, what)
        fields.update(bias=f"(const int32_t*){self._constant(converters['bias'])}",
                      mul=f"(const int16_t*){self._constant(converters['mul'])}",
                      rshift=f"(const uint8_t*){self._constant(converters['rshift'])}")
        if s.act is not None:
            fields["act"] = emit.c_activation(s.act)
        if s.act == "clip":
            fields["clip_lo"], fields["clip_hi"] = int8.clip_codes(s.clip, out_quant)
        elif s.act == "prelu":
            slope = constant_value(scope.get(s.prelu_slope, s.prelu_slope))
            codes, shift = int8.prelu_converter(slope, len(g), what)
            fields.update(prelu_mul=f"(const int16_t*){self._constant(codes)}",
                          prelu_shift=shift)
        return emit.sdp_op(comment, fields)


def translation_unit(gen: FunctionCodegen) -> str:
    """The C source of a function whose layers ``gen`` has written."""
    args = [(f"input {i} ({var.name})", static_shape(var))
            for i, var in enumerate(gen.inputs)]
    args += [(f"output {r} ({var.name})", static_shape(var))
             for r, var in enumerate(gen.outputs)]
    body = list(gen.body)
    for r, var in enumerate(gen.outputs):
        source = gen.args[var]  # an fp32 input, or the output's first position
        target = f"a[{len(gen.inputs) + r}]"
        if source != target:  # an output that is an input or another output
            count = int(np.prod(static_shape(var)))
            body.append(f"memcpy({target}, {source}, {count} * sizeof(float));")
    layers = "\n".join(f" *   {c}" for c in gen.layer_comments)
    mode = "fused" if gen.fuse else "decomposed (independent)"
    precision = "int8 and fp16 per layer" if gen.function_precision == "mixed" else \
        gen.precision
    header = (f"/*\n * Generated by accel-codegen: external function {gen.symbol}\n"
              f" * Configuration {gen.config.name}, {mode} mode, {precision}.\n"
              f" * Layers:\n{layers}\n */")
    constants = [(a.size, dl) for a, dl in zip(gen.pool.arrays.values(),
                                               gen.pool.dl_types())]
    return emit.translation_unit(
        symbol=gen.symbol, short=gen.short, header=header,
        cfg=gen.config, args=args, num_inputs=len(gen.inputs), constants=constants,
        temps=gen.scratch.sizes, num_packed=gen.packed,
        body=textwrap.indent("\n".join(body), "  "))
