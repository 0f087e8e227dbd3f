"""The constants a conv run hands its CONV, as the generated code emits them, made once per run:
fp32 weights as they are; fp16 with a fused layer's batch-norm (or scale) factor folded in,
then rounded to half (one rounding fewer per layer: the SDP adds only the shift); int8 folded
the same way, then quantised per output channel. The memory plan counts their non-zeros (the
sparse format), the code generator pools them, so both read the one :class:`EmittedWeights` of
the run (:func:`quantize` attaches it; each array is computed on first use, so an estimate
that never asks for a non-zero count never folds a weight).
"""
from __future__ import annotations

import functools
from typing import Optional, Tuple

import numpy as np

from ...quantization import quantize_weights
from ...sim.ops import count_nonzero
from ..layer import Layer, constant_value, is_constant
from ..program import Program, Run
from .folding import affine
from .constants import fp16_saturated


class EmittedWeights:
    """A conv layer's weights as its run emits them in ``precision`` (``fuse``: whether the
    layer's SDP is fused, which lets fp16 fold its factor into them); ``scope`` maps the
    composite's parameters to the function's expressions."""

    def __init__(self, layer: Layer, scope, precision: str, fuse: bool):
        self.layer, self.scope, self.precision, self.fuse = layer, scope, precision, fuse
        c = layer.conv
        self.expr = scope.get(c.weight, c.weight)
        #: whether they are constants (not another run's output: attention's K)
        self.constant = is_constant(self.expr)

    @functools.cached_property
    def affine(self) -> Tuple[np.ndarray, np.ndarray]:
        """The per-channel (g, h) of the layer's constant scale/shift stages (float64)."""
        return affine(self.layer.sdp, self.layer.conv.weight_shape[0], self.scope)

    @functools.cached_property
    def original(self) -> np.ndarray:
        """The constant weights as [K, C/groups, R, S], float64."""
        return self._shaped(np.asarray(constant_value(self.expr), np.float64))

    def _shaped(self, w: np.ndarray) -> np.ndarray:
        c = self.layer.conv
        return (w.T if c.transpose_weight else w).reshape(c.weight_shape)

    @functools.cached_property
    def folded(self) -> np.ndarray:
        """The weights with the SDP's factor g folded in (float64): what fp16 (fused) rounds
        and int8 quantises."""
        return self.original * self.affine[0].reshape(-1, 1, 1, 1)

    @functools.cached_property
    def _quantized(self) -> Tuple[np.ndarray, np.ndarray]:
        return quantize_weights(self.folded)

    @property
    def codes(self) -> np.ndarray:
        """int8: the folded weights' codes per output channel."""
        return self._quantized[0]

    @property
    def scales(self) -> np.ndarray:
        """int8: each output channel's weight step."""
        return self._quantized[1]

    @property
    def folds(self) -> bool:
        """Whether the SDP's factor goes into the weights (int8; fp16 when fused)."""
        return self.precision == "int8" or (self.precision == "fp16" and self.fuse)

    @functools.cached_property
    def array(self) -> Optional[np.ndarray]:
        """The weights in the run's storage type (None when they are not constants)."""
        if not self.constant:
            return None
        if self.precision == "int8":
            return self.codes
        if self.precision == "fp16":
            return fp16_saturated(self.folded if self.fuse else self.original)
        # float32 as read (through float64 it is the same values): one copy fewer of
        # a model's every weight than self.original's
        return self._shaped(np.asarray(constant_value(self.expr), np.float32))

    @functools.cached_property
    def nonzero(self) -> Optional[int]:
        """Non-zero weights as the hardware counts them (None when they are not constants)."""
        array = self.array
        return None if array is None else count_nonzero(array, self.precision)


def run_weights(run: Run, fuse: bool, precision: Optional[str] = None) -> EmittedWeights:
    """The run's emitted weights, attached to it on first use (``precision``: the program's,
    for a run that carries none)."""
    if run.weights is None:
        run.weights = EmittedWeights(run.layer, run.scope, run.precision or precision, fuse)
    return run.weights


def quantize(program: Program, fuse: bool) -> Program:
    """The pass that gives each conv run its emitted weights (folded, halved or quantised once:
    :class:`EmittedWeights`), for the memory plan and the code generator alike."""
    for run in program.runs:
        if run.layer.conv is not None and not run.converts:
            run_weights(run, fuse, program.precision)
    return program
