"""Compile-time folding of an SDP's scale/shift stages: batch norm and a bias become one
per-channel scale and one shift (the two adds become one), by the C library's own routine."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from ..._accel_ffi import ffi, lib
from ...errors import check
from ..layer import BatchNormSpec, SdpSpec, constant_value


def fold_batch_norm(bn: BatchNormSpec, bias: Optional[np.ndarray], channels: int
                    ) -> Tuple[np.ndarray, np.ndarray]:
    """Constant batch norm (and bias) -> (scale, shift), float32, by accel_fold_batch_norm."""
    def arg(expr):
        return None if expr is None else np.ascontiguousarray(
            constant_value(expr), dtype=np.float32).reshape(-1)

    inputs = [arg(bn.gamma), arg(bn.beta), arg(bn.mean), arg(bn.var), bias]
    scale = np.empty(channels, np.float32)
    shift = np.empty(channels, np.float32)
    pointers = [ffi.NULL if a is None else ffi.cast("float*", a.ctypes.data) for a in inputs]
    check(lib.accel_fold_batch_norm(channels, *pointers, bn.epsilon,
                                    ffi.cast("float*", scale.ctypes.data),
                                    ffi.cast("float*", shift.ctypes.data)))
    return scale, shift


def affine(s: SdpSpec, channels: int, scope) -> Tuple[np.ndarray, np.ndarray]:
    """The per-channel (g, h) of an SDP's constant scale/shift stages, y = g * x + h (float64);
    ``scope`` maps a composite's parameters to the function's expressions."""
    def value(expr):
        return np.broadcast_to(np.asarray(constant_value(scope.get(expr, expr)), np.float64
                                          ).reshape(-1), (channels,)).copy()

    bias = value(s.bias) if s.bias is not None else None
    if s.batch_norm is not None:
        bn = s.batch_norm
        parts = [None if p is None else scope.get(p, p) for p in (bn.gamma, bn.beta, bn.mean,
                                                                  bn.var)]
        scale, shift = fold_batch_norm(BatchNormSpec(*parts, bn.epsilon),
                                       None if bias is None else bias.astype(np.float32),
                                       channels)
        return scale.astype(np.float64), shift.astype(np.float64)
    g = value(s.scale) if s.scale is not None else np.ones(channels)
    return g, bias if bias is not None else np.zeros(channels)
