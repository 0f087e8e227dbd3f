"""The int8 quantisation pass: each int8 run's quantisation (``Run.quant``, a
:class:`~..program.RunQuant`) from a calibration, before any C is printed, in the Program's
order, since a run reads what earlier runs wrote:

- a function input: the calibrated quantisation of its first int8 reader's use of it (the
  key it enters the code under); a constant element-wise operand its own range's;
- a layer's output: its SDP's calibrated output before any pool (a conv or SDP), its input's
  (a pool, a copy, a CDP, a conv that only copies its input: ``_copies_codes``), an int8
  concat's one that covers every input (each copy then rescales into it; where every input
  is a conv or SDP layer of the function read by the concat alone, those layers write
  their outputs in it and the copies move codes:
  ``concat_producers``), a deconvolution's its phases'; in mixed code a converting run's the
  one an int8 layer would have given it;
- each run's converters (``int8.py``'s real-value model): the conv's weights folded and
  quantised once (``Run.weights``), bias correction, the element-wise operand's alignment,
  a LUT activation's tables, a clip's codes, PReLU's slopes.

The code generator prints what this sets (``int8_ops.py``), and ``Program.to_dict`` shows it.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional

import numpy as np
from tvm import relax

from ...errors import AccelInvalidError
from ...quantization import Calibration, ChannelQuant, Key, TensorQuant
from ...quantization.lut import layer_lut
from ...sim.labels import pass_part, run_key
from ...sim.observer import INPUT, operand_index
from ...sim.reference import is_lut_activation
from ..layer import Layer, constant_value
from ..qdq import QDQ_METHOD
from ..relax_exprs import read_counts
from ..program import Call, Function, Program, Run, RunQuant
from . import int8
from .folding import affine
from .int8_means import MeanShifts
from .run_ops import channels_of
from .tensors import resolve_operand


def pre_pool(layer: Layer) -> int:
    """The index of the layer's op whose output is quantised (its last before any pool)."""
    return (1 if layer.conv is not None else 0) + (0 if layer.sdp.empty() else 1) - 1


def token_dense(layer: Layer, runs: List[Run]) -> Layer:
    """A token layer's dense CONV + SDP run's layer, on its surface (``runs``: the layer's
    runs): a norm's first pass, or the layer with the conv's output channels."""
    if layer.norm is not None:
        return runs[0].layer
    b, _, h, w = layer.in_shape
    return dataclasses.replace(layer, out_shape=(b, layer.conv.weight_shape[0], h, w))


def quantize_int8(program: Program, calibration: Optional[Calibration]) -> Program:
    """``program`` with every int8 run's quantisation set (and mixed code's converting runs'),
    from ``calibration``; functions without an int8 run are left as they are."""
    for function in program.functions:
        if any(run.precision == "int8" or run.converts for run in function.runs):
            _FunctionQuant(function, calibration).walk()
    return program


class _FunctionQuant:
    """The pass over one function: ``quant`` is the function's table of tensors (Function.quant),
    filled in the order the code reads and writes them."""

    def __init__(self, function: Function, calibration: Optional[Calibration]):
        self.function, self.calibration = function, calibration
        function.quant.clear()
        self.quant: Dict[relax.Var, TensorQuant] = function.quant
        self.params = set(function.function.params)
        # an int8 concat's quantisation, and its producers' outputs written in it
        # (concat_producers)
        self.concats: Dict[relax.Var, TensorQuant] = {}
        self.produced: Dict[str, TensorQuant] = {}
        self.part_scaled: set = set()  # concats keeping their inputs' quantisations
        # layers converted to int8 that write their ReLU reader's quantisation (_select_outputs)
        self.later: Dict[int, TensorQuant] = {}
        self.shifts = MeanShifts(function, calibration)  # what the rounding leans to

    def calibrated(self, key: Key) -> TensorQuant:
        if self.calibration is None:
            raise AccelInvalidError("int8 code needs a calibration")
        return self.calibration.get(*key)

    def data(self, expr: relax.Expr, scope, key: Key) -> TensorQuant:
        """The quantisation of a data tensor a run reads (``key``: the calibration's name of
        this use, for a function input that enters the code here)."""
        if expr in self.quant:  # a downsample branch's output, inside the composite
            return self.quant[expr]
        resolved, value = resolve_operand(expr, scope)
        if value is not None:  # a constant element-wise operand: its own range
            return int8.range_quant(value)
        if resolved in self.quant:
            return self.quant[resolved]
        if resolved in self.params:
            self.quant[resolved] = self.calibrated(key)
            return self.quant[resolved]
        raise AccelInvalidError(f"{self.function.symbol}: operand {expr} is not bound in the "
                                "function")

    def walk(self) -> None:
        runs: Dict[int, List[Run]] = {}
        for run in self.function.runs:
            runs.setdefault(run.call, []).append(run)
        self.part_scaled = concats_read_per_channel(self.function, runs)
        _select_outputs(self, runs)
        self.concat_producers(runs)
        for index, call in enumerate(self.function.calls):
            if call.precision == "int8":
                self.call(call, [r for r in runs[index] if not r.converts])
            for run in runs[index]:
                if run.converts:
                    quant = self.later.get(index) or self.int8_output(index, call, runs[index])
                    self.quant[call.binding.var] = quant
                    run.quant = RunQuant(quant, quant, tensors={INPUT: quant, 0: quant})

    def call(self, call: Call, runs: List[Run]) -> None:
        var, layer = call.binding.var, call.layer
        if layer.tokens or layer.norm is not None:
            scope, key = runs[0].scope, (runs[0].key, INPUT)
            data = self.data(layer.data, scope, key)
            attention = layer.norm.attention if layer.norm is not None else None
            if attention is not None:  # K, V (and a computed bias) enter as Q does
                for source in (attention.key, attention.value, attention.key_bias):
                    if source is not None:
                        self.data(source, scope, key)
            if layer.conv is not None:
                self.quant[var] = self.run(runs[0], layer=token_dense(layer, runs),
                                           in_quant=data)
        elif layer.rubik is not None:  # the contract moves codes: the phases' quantisation
            quant = None
            for run in runs:
                if not run.layer.contract_only:
                    quant = self.run(run)
                else:
                    run.quant = RunQuant(quant, quant, tensors={INPUT: quant, 0: quant})
            self.quant[var] = quant
        elif len(layer.copies) > 1:
            self.concat(var, layer, runs)
        else:
            for run in runs:  # a downsample branch's output is its layer's operand
                self.quant[run.output] = self.run(run)

    def concat_producers(self, runs: Dict[int, List[Run]]) -> None:
        """An int8 concat whose every input is a conv or SDP layer of this function read by
        the concat alone (a detector neck's branches): each branch writes its output straight
        in the concat's quantisation (the one covering every branch's calibrated range), so
        its copy moves codes and the branch is rounded once, where writing its own scale and
        rescaling into the concat's rounded it twice."""
        if self.calibration is None or self.calibration.method == QDQ_METHOD:
            return  # a quantised model's own scales are kept, as ONNX Runtime keeps them
        calls = self.function.calls
        producer = {call.binding.var: index for index, call in enumerate(calls)}
        readers = read_counts(self.function.function)
        for at, call in enumerate(calls):
            layer = call.layer
            if call.precision != "int8" or len(layer.copies) < 2 or not runs.get(at) or \
                    not layer.several_sources or layer.rescaled_rows or \
                    layer.keeps_input_scales or call.binding.var in self.part_scaled:
                continue
            sources, keys = [], []
            for copy in layer.copies:
                var, _ = resolve_operand(copy.source, runs[at][0].scope)
                index = producer.get(var)
                if index is None:
                    break
                source = calls[index]
                made = [r for r in runs.get(index, []) if not r.converts]
                if source.precision != "int8" or source.converted or not made or \
                        readers.get(var, 0) != 1 or not _plain(source.layer):
                    break
                if var not in sources:
                    sources.append(var)
                    keys.append((made[-1].key, pre_pool(source.layer)))
            else:
                quant = int8.concat_quant(self.calibrated(key) for key in keys)
                self.concats[call.binding.var] = quant
                self.produced.update({key[0]: quant for key in keys})

    def concat(self, var: relax.Var, layer: Layer, runs: List[Run]) -> None:
        """An int8 concat's quantisation covers every input's; each copy rescales its input
        into it (or, along a later axis, one SDP pass after the copies: Layer.rescaled_rows)."""
        if layer.rescaled_rows:
            *copies, last = runs
            quants = []
            for run in copies:  # the scratch holds several scales: no output quantisation
                quants.append(self.run(run))
                run.quant = RunQuant(run.quant.input, run.quant.output,
                                     tensors={INPUT: run.quant.input})
            quant = int8.concat_quant(quants)
            positions = last.layer.in_shape[1]
            unit, shift = np.zeros(positions), np.zeros(positions)
            for run, q in zip(copies, quants):
                c = run.layer.copies[0]
                unit[c.dst_offset:c.dst_offset + c.channels] = q.scale
                shift[c.dst_offset:c.dst_offset + c.channels] = -q.zero * q.scale
            converters = int8.channel_converters(np.ones(positions), shift, unit, quant.scale,
                                                 f"layer {last.key}")
            last.quant = RunQuant(None, quant, tensors={0: quant},
                                  converters=int8.Converters(**converters))
            self.quant[var] = quant
            return
        if layer.keeps_input_scales:  # each copy keeps its input's codes (an output's
            # ranges leave as fp32 each with its own); what read the tensor as one int8
            # tensor (nothing in this function) would need the scale that covers them all
            self.quant[var] = int8.concat_quant([self.run(run) for run in runs])
            return
        if var in self.part_scaled:  # each copy moves its input's codes (identity
            # converters), the channels keeping that input's quantisation (ChannelQuant)
            self.quant[var] = ChannelQuant.of_parts(_moved_parts(self, runs))
            return
        if var in self.concats:  # its inputs were written in it: the copies move codes
            self.quant[var] = self.concats[var]
        elif layer.several_sources:
            self.quant[var] = int8.concat_quant(
                self.data(run.layer.data, run.scope, (run.key, INPUT)) for run in runs)
        for run in runs:
            self.quant[var] = self.run(run, concat=self.quant.get(var))

    def int8_output(self, index: int, call: Call, runs: List[Run]) -> TensorQuant:
        """The int8 quantisation of layer ``index``'s output, for its converting run: an int8
        layer's own; for an fp16 layer, the one int8 code of that layer would have given it
        (its last run's calibration: a concat's copies together, a pool or copy its input's,
        else its output before any pool)."""
        if call.precision == "int8":
            return self.quant[call.binding.var]
        layer = call.layer
        if len(layer.copies) > 1:
            return int8.concat_quant(self.calibrated((run.key, INPUT)) for run in runs
                                     if not run.converts)
        if layer.norm is not None:
            # a norm's (softmax's, attention's) output as an int8 run that reads it saw it in
            # the fp32 reference that made the calibration: the whole tensor, weighed for that
            # reader (a depthwise convolution's channels) as an int8 build's function input
            # was where this layer ran on the host
            read = self.int8_read_of(call.binding.var)
            if read is not None:
                return self.calibrated(read)
            # else (an output of the function) the fp32 passes that write it: every head's
            # and window's part of attention's (one alone would saturate the others), a
            # norm's or softmax's last pass (fp16 has more passes)
            passes = layer.runs("fp32")
            writers = layer.norm_output_writers("fp32") if layer.norm.kind == "attention" \
                else [len(passes) - 1]
            return int8.concat_quant(
                self.calibrated((run_key(self.function.index, index, pass_part(i)),
                                 len(passes[i].engine_ops(True, "fp32")) - 1))
                for i in writers)
        key = run_key(self.function.index, index, "b" if layer.branch is not None else "")
        if layer.conv is None and layer.sdp.empty():  # a pool or a copy keeps its input's
            return self.calibrated((key, INPUT))
        return self.calibrated((key, pre_pool(layer)))

    def int8_read_of(self, var: relax.Var) -> Optional[Key]:
        """The calibration's key of ``var`` where the first int8 run that reads it reads it:
        as its data, or as its SDP's element-wise operand (a residual add's, squeeze-excite's
        scale); None: no int8 run of the function does."""
        if self.calibration is None:
            return None
        for run in self.function.runs:
            if run.precision != "int8" or run.converts:
                continue
            layer = run.layer
            uses = [(layer.data, INPUT)]
            if layer.sdp.ew_op is not None:
                uses.append((layer.sdp.operand, operand_index(1 if layer.conv is not None else 0)))
            if layer.computed_scale:
                uses.append((layer.sdp.scale, operand_index(0)))
            for expr, index in uses:
                read = resolve_operand(expr, run.scope)[0] if expr is not None else None
                if isinstance(read, relax.Var) and read.same_as(var) and \
                        (run.key, index) in self.calibration.tensors:
                    return run.key, index
        return None

    def run(self, run: Run, concat: Optional[TensorQuant] = None, layer: Optional[Layer] = None,
            in_quant: Optional[TensorQuant] = None) -> TensorQuant:
        """One run's quantisation (``concat``: the int8 concat's, which this copy rescales its
        input into; ``layer`` and ``in_quant``: a token layer's dense run on its surface);
        returns its output's."""
        layer, key = layer or run.layer, run.key
        if in_quant is None:
            in_quant = self.data(layer.data, run.scope, (key, INPUT))
        if layer.requantize:  # into the concat's channel range
            channels = layer.in_shape[1]
            converters = int8.channel_converters(
                np.ones(channels), np.zeros(channels), np.full(channels, in_quant.scale),
                concat.scale, f"layer {key}")
            run.quant = RunQuant(in_quant, concat, tensors={INPUT: in_quant, 0: concat},
                                 converters=int8.Converters(**converters))
        elif layer.lrn is not None:
            run.quant = RunQuant(in_quant, in_quant)
        elif layer.copies:  # a copy keeps the int8 codes, so their scale and zero point
            run.quant = RunQuant(in_quant, in_quant, tensors={INPUT: in_quant, 0: in_quant})
        elif layer.computed_scale:
            run.quant = _channel_mul(self, run, layer, in_quant)
        else:
            run.quant = self.layer(run, layer, in_quant)
        return run.quant.output

    def layer(self, run: Run, layer: Layer, in_quant: TensorQuant) -> RunQuant:
        """A conv, SDP and pool layer: the conv's weights folded and quantised once, then the
        SDP's converters to its calibrated output (before any pool, which keeps it)."""
        s, scope, key = layer.sdp, run.scope, run.key
        channels = channels_of(layer)
        if layer.conv is not None:
            weights = run.weights
            g, h = weights.affine
            calibration = self.calibration
            means = calibration.means.get(key) \
                if calibration and calibration.bias_correction else None
            h = h - int8.bias_correction(means, layer.conv.groups, weights.codes,
                                         weights.scales, weights.folded)
            h = h - self.shifts.through_weights(run, weights, means is not None)
            unit = in_quant.scale * weights.scales
            g = np.ones(channels)
        else:
            g, h = affine(s, channels, scope)
            g, h, unit = _read_channels(g, h, in_quant)
        ops = 1 if layer.conv is not None else 0
        tensors: Dict[int, TensorQuant] = {}
        out_quant, operand, converters = in_quant, None, None
        if layer.conv is not None or not s.empty():
            out_quant = _output_quant(self, run, layer, in_quant)
            h = h - self.shifts.leaned_back(run, layer, out_quant)  # a pool's lean
            operand, converters = self.sdp(run, layer, g, h, unit, out_quant, tensors)
            ops += 1
        if layer.pool is not None:
            passes, rescale = layer.pool.passes()
            ops += len(passes) + (rescale != 1.0)
        self.shifts.note(run, layer, g, h, converters, out_quant)
        # a ChannelQuant: in the converters, the input read with in_zero 0 (input None)
        in_quant = None if isinstance(in_quant, ChannelQuant) else in_quant
        tensors.update({INPUT: in_quant} if in_quant is not None else {})
        for i in range(1 if layer.conv is not None else 0, ops):
            tensors[i] = out_quant
        return RunQuant(in_quant, out_quant, operand, tensors, converters)

    def sdp(self, run: Run, layer: Layer, g, h, unit, out_quant: TensorQuant,
            tensors: Dict[int, TensorQuant]):
        """The SDP's element-wise operand's quantisation and its converters (recording the
        operand in ``tensors``)."""
        s, key = layer.sdp, run.key
        what = f"layer {key}"
        target, ew, ew_quant, lut, clip, prelu = out_quant.scale, None, None, None, None, None
        if s.ew_op is not None:
            index = operand_index(1 if layer.conv is not None else 0)
            ew_quant = tensors[index] = self.data(s.operand, run.scope, (key, index))
            ew = int8.elementwise(s.ew_op, out_quant, ew_quant, what)
            target = ew.target
        if is_lut_activation(s.act):  # X converts to the table's input units
            lut = layer_lut(s.act, out_quant, float(np.max(np.abs(g * unit))), what)
            target = lut.input_step
        converters = int8.channel_converters(g, h, unit, target, what)
        if s.act == "clip":
            clip = int8.clip_codes(s.clip, out_quant)
        elif s.act == "prelu":
            slope = constant_value(run.scope.get(s.prelu_slope, s.prelu_slope))
            prelu = int8.prelu_converter(slope, len(g), what)
        return ew_quant, int8.Converters(**converters, ew=ew, lut=lut, clip=clip, prelu=prelu)


def _select_outputs(fq: _FunctionQuant, runs: Dict[int, List[Run]]) -> None:
    """A layer whose output only a ReLU alone reads (through copies that keep the codes,
    a reshape: the ReLU after an instance norm, which int8 code runs in fp16) writes its
    int8 output in the ReLU's quantisation (``fq.later``; an int8 conv or SDP layer
    through ``fq.produced``), and the ReLU then moves codes. A ReLU commutes with
    int8's rounding, and an unsigned code saturates a negative value to 0, which is the
    ReLU: so the ReLU's codes are the rounding of its fp32 values, once, where the
    layer's own least-error range spent half its codes on the values the ReLU zeroes
    and the ReLU rounded them again (1.2 dB on a CycleGAN generator; ONNX Runtime
    quantises a norm's output with its ReLU's range likewise). A max pool does not
    select so: the least-error range after the max gained on the tensor it writes
    (ResNet's stem +0.25 dB) but not at the zoo's outputs (docs/ptq.md)."""
    if fq.calibration is None or fq.calibration.method == QDQ_METHOD:
        return  # a quantised model's own scales are kept
    calls = fq.function.calls
    readers = read_counts(fq.function.function)
    reading: Dict[int, List[int]] = {}
    for at, sources in enumerate(fq.function.sources):
        for source in set(sources):
            reading.setdefault(source, []).append(at)
    for at, call in enumerate(calls):
        made = [r for r in runs.get(at, []) if not r.converts]
        if call.precision == "int8":
            if call.converted or not made or not _plain(call.layer) or \
                    call.layer.branch is not None:
                continue
        elif not call.converted:  # another precision's layer, converted to int8 after
            continue
        last, index, between, selecting = None, at, [], []
        while readers.get(calls[index].binding.var, 0) == 1 and \
                len(reading.get(index, [])) == 1:
            index = reading[index][0]
            after = calls[index]
            steps = [r for r in runs.get(index, []) if not r.converts]
            if after.precision != "int8" or after.converted or len(steps) != 1 or \
                    not _selects(after.layer):
                break
            between.append(steps[0].key)
            if not after.layer.copies:
                last, selecting = (steps[0].key, pre_pool(after.layer)), list(between)
        if last is None:
            continue
        quant = dataclasses.replace(fq.calibrated(last), reader_relu=True)
        fq.later[at] = quant
        fq.produced.update({key: quant for key in selecting})
        if call.precision == "int8":
            fq.produced[made[-1].key] = quant



def concats_read_per_channel(function: Function, runs: Dict[int, List[Run]]) -> set:
    """The int8 channel concats (one image, each input whole into its channel range)
    whose every reader is an int8 SDP layer reading the concat as its data (a DenseNet's
    batch norm + ReLU after each concat): such a concat keeps each input's scale and zero
    point in its channels (a ChannelQuant), its copies move codes, and the reader takes
    each channel's scale into its multiplier and its zero point into its bias, which are
    per channel on the SDP (NVDLA's BS/BN operands). One scale covering every input
    instead rescales each into it (a rounding per input, on the codes already rounded
    once: a ratio near 1/2, an unsigned input beside signed ones of the same reach, then
    biases the codes) and gives the inputs of small range, a 12-channel growth layer's
    beside the block's input, few codes, which the reader's batch norm then amplifies."""
    found: set = set()
    readers = read_counts(function.function)
    for at, call in enumerate(function.calls):
        layer, var = call.layer, call.binding.var
        if call.precision != "int8" or call.converted or len(layer.copies) < 2 or \
                not runs.get(at) or not layer.several_sources or layer.rescaled_rows or \
                layer.keeps_input_scales or layer.in_shape[0] != 1 or \
                not all(c.in_shape[1] == c.channels and c.src_offset == 0 and
                        c.src_stride == 1 and c.dst_stride == 1 for c in layer.copies):
            continue
        reading = [r for r in function.runs if r.data is not None and
                   r.data.same_as(var) and r.call != at]
        if reading and len({r.call for r in reading}) == readers.get(var, 0) and \
                all(_absorbs_channels(r) for r in reading):
            found.add(var)
    return found



def _channel_mul(fq: _FunctionQuant, run: Run, layer: Layer,
                 in_quant: TensorQuant) -> RunQuant:
    """x * s with s a computed [N, C] tensor (squeeze-excite): s in the codes and zero
    point its layer wrote; x to the product's units, the output converter to the output
    step (int8.elementwise)."""
    s, key = layer.sdp, run.key
    what, channels = f"layer {key}", channels_of(layer)
    out_quant = fq.calibrated((key, 0))
    ew_quant = fq.data(s.scale, run.scope, (key, operand_index(0)))
    ew = int8.elementwise("mul", out_quant, ew_quant, what)
    converters = int8.channel_converters(np.ones(channels), np.zeros(channels),
                                         np.full(channels, in_quant.scale), ew.target, what)
    clip = int8.clip_codes(s.clip, out_quant) if s.act == "clip" else None
    return RunQuant(in_quant, out_quant, ew_quant,
                    {operand_index(0): ew_quant, INPUT: in_quant, 0: out_quant},
                    int8.Converters(**converters, ew=ew, clip=clip))


def _moved_parts(fq: _FunctionQuant, runs: List[Run]):
    """(channels, quantisation) of each copy of a concat that keeps its inputs'
    quantisations, each copy's quantisation set to move its input's codes."""
    for run in runs:
        part = fq.data(run.layer.data, run.scope, (run.key, INPUT))
        yield run.layer.copies[0].channels, fq.run(run, concat=part)


def _read_channels(g: np.ndarray, h: np.ndarray, in_quant):
    """(g, h, unit) of an SDP reading int8 data from memory: one scale for every channel, or
    a concat's channels each in its input's quantisation (a ChannelQuant): the scales in the
    multipliers, the zero points in the bias (accumulator units, the codes: exact)."""
    if isinstance(in_quant, ChannelQuant):
        return g, h - g * in_quant.scales * in_quant.zeros, in_quant.scales
    return g, h, np.full(len(g), in_quant.scale)


def _absorbs_channels(run: Run) -> bool:
    """Whether an int8 run reads its data through an SDP of per-channel converters alone (no
    conv, no element-wise operand, one tensor in and out): what can take a ChannelQuant
    input (per-channel scales and zero points) into its multipliers and bias exactly."""
    layer = run.layer
    return run.precision == "int8" and not run.converts and layer.conv is None and \
        not layer.sdp.empty() and layer.sdp.ew_op is None and layer.branch is None and \
        _plain(layer) and layer.lrn is None and run.part == ""


def _selects(layer: Layer) -> bool:
    """A layer whose int8 output is its input's codes, or a ReLU of them in codes where the
    input's quantisation is unsigned (the ReLU's own): copies of one tensor (a reshape), a
    ReLU alone."""
    s = layer.sdp
    if layer.conv is not None or layer.pool is not None or layer.tokens or \
            layer.norm is not None or layer.rubik is not None or layer.lrn is not None or \
            layer.requantize or layer.computed_scale or layer.branch is not None:
        return False
    if layer.copies:
        return s.empty() and not layer.several_sources
    return s.act == "relu" and s.bias is None and s.batch_norm is None and \
        s.scale is None and s.ew_op is None


def _output_quant(fq: _FunctionQuant, run: Run, layer: Layer,
                  in_quant: TensorQuant) -> TensorQuant:
    """A conv or SDP layer's output quantisation, before any pool: the one a reader chose
    for it (``fq.produced``), its input's where it only copies it, else its calibrated one."""
    return fq.produced.get(run.key) or (
        in_quant if _copies_codes(layer, run, in_quant)
        else fq.calibrated((run.key, pre_pool(layer))))


def _copies_codes(layer: Layer, run: Run, in_quant: TensorQuant) -> bool:
    """A conv that only copies its input's values (each output channel one weight of 1,
    nothing after it: rewrites.wide_kernel_convs' stack of shifted copies and its padding, a
    one-hot space-to-depth): its output keeps the input's quantisation, so the weight's code
    127 at scale 1 / 127 gives each input code back and the values are rounded once."""
    if layer.conv is None or not layer.sdp.empty() or layer.pool is not None or \
            layer.branch is not None or isinstance(in_quant, ChannelQuant) or \
            run.weights is None or not run.weights.constant:
        return False
    weights = run.weights.original.reshape(run.weights.original.shape[0], -1)
    return bool(np.all(np.count_nonzero(weights, axis=1) == 1) and
                np.all(weights.max(axis=1) == 1.0))


def _plain(layer: Layer) -> bool:
    """A conv or SDP layer (a pool after them at most) whose one output quantisation is its
    SDP's: what may write its output in another tensor's quantisation."""
    return (layer.conv is not None or not layer.sdp.empty()) and not layer.copies and \
        not layer.tokens and layer.norm is None and layer.rubik is None and \
        not layer.computed_scale and not layer.requantize
