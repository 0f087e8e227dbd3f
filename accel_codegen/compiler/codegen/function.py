"""C source for one offloaded function: prints the runs of its Program (``..program``), in
order, one ``accel_run`` each, with the choices the planning passes set on them (conv modes,
memory, layouts, emitted weights: ``planning.py``; in int8 code each run's quantisation and
converters: ``int8_plan.py``).

The parts live beside it: where each tensor lives and enters or leaves (:mod:`.tensors`), the
engine ops of a run (:mod:`.run_ops`; int8's converters: :mod:`.int8_ops`), a token layer's
runs (:mod:`.passes`), scratch planning (:mod:`.buffers`), the constant pool
(:mod:`.constants`), the int8 converter maths (:mod:`.int8`), folding (:mod:`.folding`) and
the C text (:mod:`.emit`); the fixed C is ``accel/tvm_glue.h``.
"""
from __future__ import annotations

import json
import textwrap
from typing import Dict, List, Optional

import numpy as np
from tvm import relax

from ...errors import AccelUnsupportedError
from ...quantization import Calibration, Key, TensorQuant
from ...sim.labels import run_key
from ...sim.observer import INPUT
from ..layer import Layer, feature_surface, static_shape
from ..engines import fp16_runner
from ..program import MIXED, Call, Run, lower_functions
from ..program import Function as ProgramFunction
from ..source_names import function_calls, layer_names
from ..target import LayerPlan, Target
from . import emit, int8_ops, passes, run_ops
from .int8_plan import quantize_int8
from .planning import plan_program
from .tensors import STORAGE, FunctionTensors  # noqa: F401  (STORAGE: part of the interface)


def other_precision(precision: str) -> str:
    return MIXED[1 - MIXED.index(precision)]


class FunctionCodegen(FunctionTensors):
    """C source for one offloaded function (the ``index``-th the code generator sees) for
    ``target``: the runs of ``program`` (its Program function, planned; planned here as the
    module's only function when not given).

    ``precision`` "mixed": each layer in its own precision, int8 or fp16 (``Call.precision``);
    a layer's output that a layer of the other precision reads is converted once, by the
    Program's converting run right after it (its int8 side quantised as an int8 layer would
    have written it), so :attr:`precision` is the current layer's."""

    def __init__(self, function: relax.Function, target: Target, index: int,
                 calibration: Optional[Calibration] = None,
                 program: Optional[ProgramFunction] = None):
        if program is None:
            lowered = lower_functions([function], index, target.code, target.layer_precisions,
                                      fp16_runner(target.config, target.fuse))
            if lowered.mixed and not target.mixed:  # int8 code with fp16 layers (program.py)
                target = target.replace(precision=LayerPlan.of(lowered.layer_precisions))
            program = quantize_int8(plan_program(lowered, target), calibration).functions[0]
        precision = target.code
        super().__init__(function, MIXED[0] if precision == "mixed" else precision, calibration)
        self.program, self.target = program, target
        self.quant = program.quant  # the int8 quantisation pass's (read only here)
        self.config, self.fuse, self.index = target.config, target.fuse, index
        self.function_precision = precision
        self.packed = 0  # convs whose weights the glue packs once (int8, fp16, Winograd)
        self.layer_comments: List[str] = []
        self.emitting: Optional[Run] = None  # the run being printed
        self.layer_source = ""  # the source model's name of the layer being printed
        self.layer_sources: List[str] = []  # per layer (call site) of the function
        # layer key -> its source-model name, Relax operators and precision: the function's
        # record in the library (emit.INFO_SECTION)
        self.layer_info: Dict[str, Dict[str, object]] = {}
        self.layer_starts: List[int] = []  # where each layer's statements begin in the body

    @property
    def quantization(self) -> Dict[Key, TensorQuant]:
        """int8: every tensor the runs read or write, keyed as the observer reports them
        (``Run.quant``'s)."""
        return {(run.key, index): quant for run in self.program.runs if run.quant is not None
                for index, quant in run.quant.tensors.items()}

    def run(self) -> str:
        """The function's C source: every layer's runs, in the Program's order."""
        calls = self.program.calls
        plain = [b for block in self.function.body.blocks for b in block.bindings
                 if not isinstance(b.value, relax.Function)]
        if len(plain) != len(calls):
            raise AccelUnsupportedError(f"{self.short}: a binding that calls no composite")
        for index, call in enumerate(calls):
            for arg in call.binding.value.args:
                self.last_use[arg] = index
                self.readers.setdefault(arg, []).append(index)
        runs: Dict[int, List[Run]] = {}
        for run in self.program.runs:
            runs.setdefault(run.call, []).append(run)
        self.layer_sources = layer_names(self.function)  # per call site (source_names)
        for index, call in enumerate(calls):
            self.layer_index = index
            self.layer_starts.append(len(self.body))
            if self.function_precision == "mixed":
                self._use_precision(call.precision)
            self._call(index, call, [r for r in runs[index] if not r.converts])
            for run in runs[index]:
                if run.converts:  # the Program's converting run after the layer
                    self._convert_output(run)
        return translation_unit(self)

    def _call(self, index: int, call: Call, runs: List[Run]) -> None:
        """The runs of one layer, into its output's buffer."""
        var, layer = call.binding.var, call.layer
        self.layer_source = self.layer_sources[index] if index < len(self.layer_sources) \
            else ""
        self.layer_info[run_key(self.index, index)] = {
            "source": self.layer_source, "precision": self.precision,
            "ops": [c.op.name for c in function_calls(call.composite)]}
        output = self._output(var)
        sources = layer.source_ops if layer.branch is None else \
            layer.branch.source_ops + layer.source_ops
        self.layer_comments.append(f"{index}: {call.primitive} ({', '.join(sources)})" + (
            f" in {self.precision}" if self.function_precision == "mixed" else ""))
        if passes.emit_surface_add(self, index, var, layer, runs):
            pass  # a residual add of token tensors, on their surfaces (codegen/passes.py)
        elif layer.tokens or layer.norm is not None:
            # channels-last data, or a norm: one run per engine pass (codegen/passes.py)
            passes.emit_token_layer(self, index, var, layer, runs[0].scope, call.primitive)
        elif layer.rubik is not None:
            self._deconvolution(var, runs)
        elif len(layer.copies) > 1:
            self._concat(var, layer, runs)
        else:
            for run in runs:  # a downsample branch's run first, into scratch
                target = self._temp(int(np.prod(run.layer.out_shape))) if run.branch \
                    else output
                if run.branch:
                    self.inner[run.output] = target
                self._emit(run, target)
        self._leave(var)

    def _concat(self, var: relax.Var, layer: Layer, runs: List[Run]) -> None:
        """One run per copy, all into the layer's output; in int8 each rescales its input to
        the concat's quantisation, which covers them all."""
        int8_code = self.precision == "int8"
        if int8_code and layer.rescaled_rows:
            self._rescaled_concat(var, runs)
            return
        if int8_code and layer.keeps_input_scales:
            self._output_regions(var, layer, runs)
            return
        if int8_code and layer.several_sources:  # every input enters before the first copy
            for run in runs:
                self._data(run.layer.data, run.scope, (run.key, INPUT))
        for run in runs:
            self._emit(run, self.operands[var])

    def _output_regions(self, var: relax.Var, layer: Layer, runs: List[Run]) -> None:
        """An int8 concat that only leaves the function (Layer.keeps_input_scales): each
        copy moves its input's codes into the input's channel range, and that range leaves
        as fp32 with the input's own scale and zero point (``regions``)."""
        size = int(np.prod(layer.out_surface[2:]))
        regions = []
        for run in runs:
            self._emit(run, self.operands[var])
            c = run.layer.copies[0]
            regions.append((c.dst_offset * size, c.channels * size, run.quant.output))
        self.regions[var] = regions

    def _rescaled_concat(self, var: relax.Var, runs: List[Run]) -> None:
        """An int8 concat along a later axis (Layer.rescaled_rows): each copy moves its
        input's codes, in that input's scale, into scratch; then one SDP pass takes each
        position to the concat's quantisation, which covers every input, with the converter
        of the input that wrote it (the view's channels are the positions)."""
        *copies, last = runs
        scratch = self._temp(int(np.prod(last.layer.in_shape)))
        for run in copies:
            self._emit(run, scratch)
        self.emitting, layer = last, last.layer
        op = emit.sdp_op("each position's input to the concat's scale", {
            "precision": "ACCEL_INT8", "in_zero": 0, "out_zero": last.quant.output.zero,
            **int8_ops.converter_fields(self, last.quant.converters)})
        lines = [f"/* {last.label}: {' -> '.join(layer.source_ops)} */", "{",
                 emit.name_run(last.label, self.layer_source)]
        lines += emit.run_layer(emit.sram_streams([op], last.memory.sram), scratch,
                                layer.in_shape, self.operands[var], layer.out_surface,
                                layer.fused(self.fuse), last.label, self.precision)
        self.body.extend(lines + ["}"])

    def _deconvolution(self, var: relax.Var, runs: List[Run]) -> None:
        """A transposed convolution or nearest upsampling: its conv (or one BDMA copy per
        phase) writes the output's phases into scratch, then a RUBIK run contracts them into
        the output. The contract moves codes, so an int8 output keeps the phases' scale."""
        phases = self._temp(int(np.prod(runs[-1].layer.in_shape)))
        for run in runs:
            if not run.layer.contract_only:
                self._emit(run, phases)
                continue
            self.emitting, layer = run, run.layer
            ops = emit.sram_streams([emit.rubik_op(layer.rubik, self.precision)],
                                    run.memory.sram)
            lines = [f"/* {run.label}: {' -> '.join(layer.source_ops)} */", "{",
                     emit.name_run(run.label, self.layer_source)]
            lines += emit.run_layer(ops, phases, layer.in_shape, self.operands[var],
                                    feature_surface(layer.out_shape), layer.fused(self.fuse),
                                    run.label, self.precision)
            self.body.extend(lines + ["}"])

    def _convert_output(self, run: Run) -> None:
        """A converting run: its layer's output into the other precision, for the layers
        that read it in that one."""
        var, quant = run.output, run.quant.output
        target = other_precision(self.precision)
        shape = feature_surface(static_shape(var))
        temp = self._temp(int(np.prod(shape)), self.last_use.get(var, run.call),
                          itemsize=np.dtype(STORAGE[target]).itemsize)
        self.converted[var] = temp
        lines = [f"/* {run.label}: layer {run.call}'s output for its {target} readers */", "{",
                 emit.name_run(run.label, self.layer_source)]
        lines += emit.run_layer([emit.convert_op(self.precision, quant.scale, quant.zero)],
                                self.operands[var], shape, temp, shape, False, run.label,
                                self.precision, target)
        self.body.extend(lines + ["}"])

    def _emit(self, run: Run, output: str, layer: Optional[Layer] = None) -> None:
        """One accelerator run into ``output`` (``layer``: the run's layer as the caller
        reshaped it, a token layer's surface)."""
        self.emitting, layer, key = run, layer or run.layer, run.key
        lines = [f"/* {run.label}: {' -> '.join(layer.source_ops)} */", "{",
                 emit.name_run(run.label, self.layer_source)]
        data, _ = self._data(layer.data, run.scope, (key, INPUT))
        out_shape = layer.out_surface
        if self.precision == "int8":
            ops = int8_ops.run_ops(self, layer, run)
            if layer.requantize:  # into the concat's channel range
                out_shape = layer.in_shape
                offset = layer.copies[0].dst_offset * int(np.prod(out_shape[2:]))
                output = f"(int8_t*){output} + {offset}"
        else:
            ops = run_ops.float_ops(self, layer, lines)
        ops = emit.sram_streams(ops, run.memory.sram)
        lines += emit.run_layer(ops, data, layer.in_shape, output, out_shape,
                                layer.fused(self.fuse), run.label, self.precision,
                                in_layout=run.in_layout, out_layout=run.out_layout)
        self.body.extend(lines + ["}"])


def translation_unit(gen: FunctionCodegen) -> str:
    """The C source of a function whose layers ``gen`` has written."""
    args = [(f"input {i} ({var.name})", static_shape(var))
            for i, var in enumerate(gen.inputs)]
    args += [(f"output {r} ({var.name})", static_shape(var))
             for r, var in enumerate(gen.outputs)]
    ends = gen.layer_starts[1:] + [len(gen.body)]
    layer_code = ["\n".join(gen.body[start:end])
                  for start, end in zip(gen.layer_starts, ends)]
    functions, body = emit.shared_layers(layer_code)
    body = gen.body[:gen.layer_starts[0]] + body if gen.layer_starts else list(gen.body)
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
    info = {"symbol": gen.symbol, "function": gen.index, "config": gen.config.to_dict(),
            "precision": gen.function_precision, "fuse": gen.fuse, "layers": gen.layer_info}
    return emit.translation_unit(
        symbol=gen.symbol, name=f"external function f{gen.index}", header=header,
        cfg=gen.config, args=args, num_inputs=len(gen.inputs), constants=constants,
        temps=gen.scratch.sizes, num_packed=gen.packed,
        body=textwrap.indent("\n".join(body), "  "), functions=functions,
        info=json.dumps(info, separators=(",", ":"), sort_keys=True))
