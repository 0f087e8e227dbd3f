"""Quantisation maths, below the compiler (NumPy only; the code generator uses it): calibration
statistics and activation scales (:mod:`.calibration`), the integer encodings of NVDLA's
converters (:mod:`.encoding`), int8 LUT tables (:mod:`.lut`), GPTQ rounding (:mod:`.gptq`),
SQNR (:mod:`.metrics`), and ONNX Runtime's int8 baseline (:mod:`.ort_baseline`). What runs
example inputs through builds (the accuracy report, the mixed-precision search, the int8
build flow) is in :mod:`accel_codegen.flows`.
"""
from .calibration import (DEFAULT_METHOD, METHODS, Calibration, ChannelQuant, Key, Observer,
                          TensorQuant, calibrate, covering_quant, examples_of, label_key, observing)
from . import output_aware  # registers calibration_method="mse_outputs"'s search
from .encoding import (WEIGHT_MAX, encode_multiplier, encode_multipliers, quantize_weights,
                       round_half_away)

__all__ = ["DEFAULT_METHOD", "METHODS", "Calibration", "ChannelQuant", "Key", "Observer",
           "TensorQuant", "WEIGHT_MAX", "calibrate", "covering_quant", "encode_multiplier",
           "encode_multipliers", "examples_of", "label_key", "observing", "quantize_weights",
           "round_half_away"]
