"""What int8 rounding leans to, per channel, and where it is taken back (issue 33).

Rounding to nearest is unbiased on a value spread over many steps, but two roundings of the
int8 code are the same at every position of a channel and every input: an SDP reading its
data from memory adds its bias to the input's codes before any multiply, so a batch norm's
shift is rounded to half an input step per channel; the PDP's average rounds half away from
zero after each of its two reciprocals, so a 2x2 window leans 0.375 codes away from code 0.
An average pool then keeps such an offset while it averages the rest of the error away
(DenseNet's global pool; its transitions' pools are int8 convs now: rewrites.
pooled_convolutions). The quantisation pass records each such mean shift
(:class:`MeanShifts`) and takes it back where a conv reads the tensor (into its bias,
through its quantised weights, as bias correction takes back the weights' rounding) or where
the SDP before a pool can lean the other way. docs/precision-design.md, section 10.
"""
from __future__ import annotations

import math
from typing import Dict, Optional

import numpy as np
from tvm import relax

from ...quantization import Calibration, TensorQuant
from ..layer import Layer
from ..program import Function, Run
from . import int8


class MeanShifts:
    """The mean shifts of one function's int8 tensors that its runs' rounding leans to."""

    def __init__(self, function: Function, calibration: Optional[Calibration]):
        self.function, self.calibration = function, calibration
        # per tensor an SDP without conv wrote: the offset its rounded bias adds to each
        # channel before its activation (real units), and whether that is a ReLU
        self.offsets: Dict[relax.Var, tuple] = {}
        # per tensor an average pool wrote: the mean shift of its channels (real units)
        self.shifts: Dict[relax.Var, np.ndarray] = {}

    def through_weights(self, run: Run, weights, correcting: bool = True) -> np.ndarray:
        """What a conv's bias (real units, per output channel) takes back of the mean shift
        its input carries (input_shift), through its weights as quantised; 0: none known,
        or not ``correcting`` (bias correction off)."""
        shift = self.input_shift(run) if correcting else None
        if shift is None or run.layer.conv.groups != 1 or len(shift) != weights.codes.shape[1]:
            return np.zeros(weights.codes.shape[0])
        quantised = weights.codes.astype(np.float64) * weights.scales.reshape(-1, 1, 1, 1)
        return quantised.sum(axis=(2, 3)) @ shift

    def note(self, run: Run, layer: Layer, g, h, converters,
             out_quant: TensorQuant) -> None:
        """Records what an int8 SDP reading its data from memory (a standalone batch norm:
        DenseNet's before every conv) adds to its output's channel means. Its bias is in
        accumulator units, here the input's codes, so the batch norm's shift is rounded to
        half an input step per channel: the same offset at every position and every input,
        which a ReLU then passes where it passes the values and an average pool keeps
        (NVDLA's BS adds the bias before any multiply; a conv's accumulator is fine enough,
        an int8 input is not). The reading conv takes it back into its bias
        (through_weights); an SDP reading it carries it on (its factor g into its own
        offset); an average pool alone reading such a tensor keeps it."""
        s = layer.sdp
        if layer.conv is None and s.empty():  # a pool alone: what its input carried, and
            # where its own rounding leans
            if not average_pool(layer) or run.output is None:
                return
            shift, lean = self.input_shift(run), self.pool_lean(run, layer, out_quant)
            if lean is not None:
                lean = lean * out_quant.scale
                shift = lean if shift is None or len(shift) != len(lean) else shift + lean
            if shift is not None:
                self.shifts[run.output] = shift
            return
        # a pool after the activation would make the ReLU's share the reader's input's
        # no longer (a window passes when any of its values does): not followed
        if layer.conv is not None or s.empty() or converters is None or \
                s.ew_op is not None or converters.lut is not None or \
                s.act not in (None, "relu") or run.output is None or layer.pool is not None:
            return
        factor = converters.mul.astype(np.float64) / \
            np.exp2(converters.rshift.astype(np.float64))
        ideal = np.asarray(h, np.float64) / out_quant.scale
        offset = (converters.bias.astype(np.float64) * factor - ideal) * out_quant.scale
        inherited = self.input_shift(run)  # what its own input carried, through g
        if inherited is not None and len(inherited) == len(offset):
            offset = offset + np.asarray(g, np.float64) * inherited
        self.offsets[run.output] = (offset, s.act == "relu")

    def leaned_back(self, run: Run, layer: Layer, quant: TensorQuant):
        """What the SDP before the layer's average pool subtracts (real units, per channel)
        so that the pool's rounding lean (pool_lean) cancels: 0 without one."""
        lean = self.pool_lean(run, layer, quant)
        return 0.0 if lean is None else lean * quant.scale

    def pool_lean(self, run: Run, layer: Layer, quant: TensorQuant) -> Optional[np.ndarray]:
        """Per channel, the mean error in codes of the layer's int8 average pool (None: none
        known; a pool that pads, or rescales its passes' result, is not followed): the PDP
        rounds half away from zero after each of its two reciprocals, so a 2x2 window leans
        0.375 codes away from code 0 on average (int8.pool_rounding_bias), the same at every
        position: a per-channel offset, which a conv + pool chain passes to every later
        layer and a global pool to the classifier. Which way it leans is the sign of the
        window's sum of codes: above 0 where the pooled value is above -zero x scale, its
        share per channel from the calibration's mean and deviation of the pool's output
        (the input of a run reading it), taken as normal."""
        if self.calibration is None or not self.calibration.bias_correction or \
                not average_pool(layer) or run.output is None:
            return None
        passes, rescale = layer.pool.passes()
        if rescale != 1.0 or any(any(p.padding) for p in passes):
            return None
        # each pass averages the one before's lean and adds its own: their sum (the passes
        # of a global pool lean the same way, the sign of the mean they reach)
        lean = sum(int8.pool_rounding_bias(*p.kernel) for p in passes)
        if lean == 0.0:
            return None
        for reader in self.function.runs:
            if reader.data is None or not reader.data.same_as(run.output):
                continue
            mean = self.calibration.means.get(reader.key)
            std = self.calibration.stds.get(reader.key)
            if mean is None or std is None:
                continue
            threshold = -quant.zero * quant.scale  # where the codes cross 0
            with np.errstate(divide="ignore", invalid="ignore"):
                z = np.where(std > 0, (mean - threshold) / std, np.sign(mean - threshold) * 40)
            above = 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))
            return lean * (2.0 * above - 1.0)
        return None

    def input_shift(self, run: Run) -> Optional[np.ndarray]:
        """The mean shift of each channel of the run's data that an SDP's rounded bias
        caused (note): its offset, times the share of the channel's values its ReLU
        passed (the calibration's share above 0 of this run's input, which that ReLU wrote);
        None: none known."""
        if run.data is None:
            return None
        if run.data in self.shifts:
            return self.shifts[run.data]
        if run.data not in self.offsets or self.calibration is None:
            return None
        offset, relu = self.offsets[run.data]
        if not relu:
            return offset
        passed = self.calibration.positives.get(run.key)
        if passed is None or len(passed) != len(offset):
            return None
        return offset * passed


def average_pool(layer: Layer) -> bool:
    """Whether the layer's pool averages (and so keeps its input's channel means)."""
    return layer.pool is not None and layer.pool.kind == "avg"
