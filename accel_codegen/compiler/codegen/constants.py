"""The constants of one external function: what the constant loader hands the generated code
(``__init_<symbol>``), in order, with the DLPack type each must arrive with. No TVM here."""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

#: DLPack (type code, bits) of every constant dtype the loader accepts.
DL_TYPES = {np.dtype(np.float32): ("kDLFloat", 32), np.dtype(np.float16): ("kDLFloat", 16),
            np.dtype(np.int8): ("kDLInt", 8), np.dtype(np.int16): ("kDLInt", 16),
            np.dtype(np.int32): ("kDLInt", 32), np.dtype(np.uint8): ("kDLUInt", 8)}


def fp16_saturated(array: np.ndarray) -> np.ndarray:
    """``array`` in half precision, its finite values beyond half's range at its largest
    finite value rather than infinity: a constant such as BERT's padding-mask minimum
    (float32's lowest, -3.4e38) times a 0 or 1 would otherwise give 0 * inf = NaN (infinities
    stay infinite)."""
    array = np.asarray(array)
    limit = float(np.finfo(np.float16).max)
    finite = np.isfinite(array)
    if np.all(np.abs(array[finite]) <= limit):
        return array.astype(np.float16)
    return np.where(finite, np.clip(array, -limit, limit), array).astype(np.float16)


class ConstantPool:
    """Arrays named ``<symbol>_c<i>``; floats take the function's precision (fp16 or fp32),
    integer arrays (int8 codes, converters) keep their types."""

    def __init__(self, symbol: str, precision: str):
        self.symbol = symbol
        self.float_dtype = np.float16 if precision == "fp16" else np.float32
        self.arrays: Dict[str, np.ndarray] = {}

    def add(self, array) -> int:
        """Add a constant; returns its index in the loader's array."""
        array = np.asarray(array)
        if array.dtype.kind == "f":
            array = fp16_saturated(array) if self.float_dtype == np.float16 else \
                array.astype(self.float_dtype, copy=False)
        self.arrays[f"{self.symbol}_c{len(self.arrays)}"] = np.ascontiguousarray(array)
        return len(self.arrays) - 1

    def dl_types(self) -> Tuple[Tuple[str, int], ...]:
        """The DLPack type of each constant, in order."""
        return tuple(DL_TYPES[a.dtype] for a in self.arrays.values())
