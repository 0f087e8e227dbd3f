"""Which int8 tensors a depthwise convolution alone reads, and how much each of their channels
weighs in its output: the weights of calibration's depthwise-aware threshold search.

An int8 tensor has one scale (NVDLA's converters and its LUT are per tensor), chosen so its
own squared error is least. A depthwise convolution reads each channel alone and multiplies
it by that channel's weights, which training leaves at very different sizes: in PP-PicoDet's
first block a channel spanning 0.11 (every value one int8 code of the tensor's step, 0.18) is
multiplied by weights of up to 73 while the channel that sets the range (up to 45) is
multiplied by 0.14. The error that matters is the convolution's, sum over channels of
|w_c|^2 times channel c's error: so calibration weighs each value of channel c by
|w_c|^2 (:func:`depthwise_weights`), which trades a clipped top of the wide channel for the
resolution of the amplified ones, where the plain threshold erases such a channel
(``quantization.calibration.loses_amplified_channel``: a channel weighed above the mean
within 2 codes over its whole range). A tensor another layer also reads (a residual add,
a branch) or that leaves its function keeps the plain search.
"""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np
import tvm

from .codegen.int8_plan import pre_pool
from .codegen.weights import EmittedWeights
from .program import function_outputs, lower_module


def _depthwise(layer) -> bool:
    c = layer.conv
    return c is not None and c.groups > 1 and c.groups == layer.in_shape[1] == \
        c.weight_shape[0] and c.weight_shape[1] == 1


def depthwise_weights(matched: tvm.IRModule, fuse: bool = True
                      ) -> Dict[Tuple[str, int], np.ndarray]:
    """(run key, op index) of each int8-quantised layer output read by one depthwise
    convolution and nothing else -> that convolution's |w_c|^2 per channel (its folded
    weights, as int8 quantises them), scaled to a mean of 1."""
    program = lower_module(matched, "int8")
    found: Dict[Tuple[str, int], np.ndarray] = {}
    for function in program.functions:
        outputs = function_outputs(function.function)
        readers: Dict[object, list] = {}
        producer = {}
        for run in function.runs:
            for var in {run.data, run.operand} - {None}:
                readers.setdefault(var, []).append(run)
            if run.output is not None and not run.branch and not run.converts:
                producer.setdefault(run.output, []).append(run)
        for var, reading in readers.items():
            made = producer.get(var, [])
            if len(reading) != 1 or len(made) != 1 or any(var.same_as(o) for o in outputs):
                continue
            reader, source = reading[0], made[0]
            layer = source.layer
            if not _depthwise(reader.layer) or reader.branch or var.same_as(reader.operand) or \
                    layer.copies or layer.norm is not None or layer.rubik is not None or \
                    layer.tokens or layer.requantize or layer.computed_scale or \
                    (layer.conv is None and layer.sdp.empty()):
                continue
            weights = EmittedWeights(reader.layer, reader.scope, "int8", fuse)
            if not weights.constant:
                continue
            power = np.sum(weights.folded.reshape(weights.folded.shape[0], -1) ** 2, axis=1)
            if not np.all(np.isfinite(power)) or not power.mean() > 0:
                continue
            found[(source.key, pre_pool(layer))] = power / power.mean()
    return found
