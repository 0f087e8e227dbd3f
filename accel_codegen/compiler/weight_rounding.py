"""GPTQ weight rounding of an int8 build as a rewrite of ``main``'s convolution weights.

The int8 code generator quantises each conv's weights (batch norm's factor g folded in) to
nearest, per output channel. After calibration, :func:`round_weights` rounds them with GPTQ
(:mod:`accel_codegen.quantization.gptq`) and writes back the values of those codes,
codes * scale / g: nearest rounding of these reproduces the GPTQ codes and the same scales
exactly, so the code generator, the memory plan (which counts the emitted non-zero weights)
and the estimate all see the rounded weights without knowing how they were chosen. A weight
constant used by more than one layer, or shared with a layer the accelerator does not run,
keeps its values.

Bias correction happens here too (the code generator's, codegen/int8.py, finds the rewritten
weights exactly representable): GPTQ then minimises the error about its mean (H centred) and
the mean shift its rounding leaves, from the calibration's receptive-field means, is taken
out of the layer's batch-norm beta (or mean) or bias. A layer with neither, or a build with
``bias_correction=False``, rounds on the uncentred H, whose error includes the shift.
"""
from __future__ import annotations

from typing import Callable, Dict, Iterator, Optional, Tuple, Union

import numpy as np
import tvm

from ..quantization.gptq import ConvGeometry, Hessian, gptq_codes, mean_shift
from .codegen.weights import EmittedWeights
from .equalization import constants_in, Graph, with_constants
from .layer import Layer, constant_value, is_constant
from .program import Program, lower_module


def conv_runs(matched: Union[tvm.IRModule, Program]) -> Iterator[Tuple[str, Layer, dict]]:
    """(run key, layer, scope) of every convolution run of a pattern-matched module (or of its
    program, ``lower_module(matched)``, lowered once for the passes that share it), keyed as
    the generated code labels its runs (and so as calibration names their inputs); the
    program is int8 code's, ``lower_module(matched, "int8")``."""
    program = matched if isinstance(matched, Program) else lower_module(matched, "int8")
    for run in program.runs:
        # not a layer int8 code runs in fp16 (engines.fp16_in_int8): its weights stay as given
        if run.layer.conv is not None and not run.converts and run.precision != "fp16":
            yield run.key, run.layer, run.scope


def conv_geometries(matched: Union[tvm.IRModule, Program]) -> Dict[str, ConvGeometry]:
    """Each convolution run's im2col geometry, by run key."""
    return {key: ConvGeometry(tuple(layer.conv.weight_shape), tuple(layer.conv.stride),
                              tuple(layer.conv.padding), tuple(layer.conv.dilation),
                              int(layer.conv.groups))
            for key, layer, _ in conv_runs(matched)}


def round_weights(mod: tvm.IRModule, matched: Union[tvm.IRModule, Program],
                  hessians: Dict[str, Hessian],
                  bias_correction: bool = True) -> Tuple[tvm.IRModule, int]:
    """``mod`` (params bound) with the weights of every convolution that has a Hessian
    rounded by GPTQ (as values; see the module); ``matched``: ``mod`` pattern-matched for
    int8. Also returns how many layers were rewritten."""
    function = mod["main"]
    graph = Graph(function)
    originals = {c.__chandle__(): c for v in graph.order for c in constants_in(graph.value[v])}
    arrays: Dict[int, np.ndarray] = {}
    layers = 0
    for key, layer, scope in conv_runs(matched):
        conv = layer.conv
        weight = scope.get(conv.weight, conv.weight)
        hessian = hessians.get(key)
        if hessian is None or not is_constant(weight) or not graph.private(weight) or \
                weight.__chandle__() not in originals:
            continue
        emitted = EmittedWeights(layer, scope, "int8", True)  # what int8 code would quantise
        w, g = emitted.original, emitted.affine[0].reshape(-1, 1, 1, 1)
        value = constant_value(weight)
        correct = _correction(layer, scope, graph) if bias_correction else None
        codes, scales = gptq_codes(emitted.folded, hessian, conv.groups,
                                   centred=correct is not None)
        rounded = _unfolded(codes, scales, g, w)
        rounded = rounded.reshape(conv.weight_shape[0], -1).T if conv.transpose_weight \
            else rounded
        arrays[weight.__chandle__()] = rounded.reshape(value.shape)
        layers += 1
        if correct is not None:
            constant, per_unit = correct
            shift = mean_shift(codes, scales, emitted.folded, hessian, conv.groups)
            old = np.asarray(constant_value(constant), np.float64)
            arrays[constant.__chandle__()] = old - (shift * per_unit(g.reshape(-1))
                                                     ).reshape(old.shape)
    if not arrays:
        return mod, 0
    return with_constants(mod, function, originals, arrays), layers


def _correction(layer: Layer, scope, graph: Graph
                ) -> Optional[Tuple[object, Callable[[np.ndarray], np.ndarray]]]:
    """Where a shift of the layer's output mean can be taken back: (a private constant c,
    f(g)) such that c - shift * f(g) lowers the folded output by ``shift`` (batch norm's beta,
    else its moving mean, else the bias), or None."""
    s = layer.sdp

    def private(expr):
        value = None if expr is None else scope.get(expr, expr)
        return value if value is not None and is_constant(value) and graph.private(value) \
            else None

    bn = s.batch_norm
    if bn is not None:
        if private(bn.beta) is not None:
            return private(bn.beta), np.ones_like
        if private(bn.mean) is not None:  # beta - g * mean: the mean rises by shift / g
            return private(bn.mean), lambda g: -1.0 / np.where(g != 0, g, np.inf)
        return None
    if private(s.bias) is not None:
        return private(s.bias), np.ones_like
    return None


def _unfolded(codes: np.ndarray, scales: np.ndarray, g: np.ndarray, w: np.ndarray
              ) -> np.ndarray:
    """codes * scale / g: the weights whose folded nearest rounding gives ``codes``; the
    original row where g is 0 (its folded weights are 0 at any rounding)."""
    values = codes.astype(np.float64) * scales.reshape(-1, 1, 1, 1)
    safe = np.where(g != 0, g, 1.0)
    return np.where(g != 0, values / safe, w)
