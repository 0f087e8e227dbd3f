"""Quantisation: calibration statistics and activation scales (:mod:`.calibration`), the
integer encodings of NVDLA's converters (:mod:`.encoding`), and the accuracy report.
"""
from .calibration import (DEFAULT_METHOD, METHODS, Calibration, Key, Observer, TensorQuant,
                          calibrate, covering_quant, examples_of, label_key, observing)
from .encoding import (WEIGHT_MAX, encode_multiplier, encode_multipliers, quantize_weights,
                       round_half_away)

__all__ = ["DEFAULT_METHOD", "METHODS", "Calibration", "Key", "Observer", "TensorQuant",
           "WEIGHT_MAX", "calibrate", "covering_quant", "encode_multiplier", "encode_multipliers", "examples_of",
           "label_key", "observing", "quantize_weights", "round_half_away"]
