"""Engine op descriptors, the Python face of the ISA in ``accel/accel.h``.

Each class mirrors one C descriptor; ``lower()`` fills the C struct. Array operands are kept
by the descriptor, so the memory the C side reads stays alive for the run.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence, Tuple

import numpy as np

from ._accel_ffi import ffi, lib
from .config import precision_code
from .errors import AccelInvalidError

EW_OPS = {None: lib.ACCEL_EW_NONE, "add": lib.ACCEL_EW_ADD, "mul": lib.ACCEL_EW_MUL,
          "max": lib.ACCEL_EW_MAX, "min": lib.ACCEL_EW_MIN}
ACTIVATIONS = {None: lib.ACCEL_ACT_NONE, "relu": lib.ACCEL_ACT_RELU, "clip": lib.ACCEL_ACT_CLIP,
               "prelu": lib.ACCEL_ACT_PRELU, "sigmoid": lib.ACCEL_ACT_SIGMOID,
               "tanh": lib.ACCEL_ACT_TANH}
POOLS = {"max": lib.ACCEL_POOL_MAX, "avg": lib.ACCEL_POOL_AVG}
#: How each precision is stored in host memory.
_DTYPES = {"int8": np.int8, "int16": np.int16, "fp16": np.float16, "fp32": np.float32}


def _pair(value, what: str) -> Tuple[int, int]:
    if isinstance(value, (int, np.integer)):
        return int(value), int(value)
    if len(value) != 2:
        raise AccelInvalidError(f"{what} = {value!r} must be an int or a pair")
    return int(value[0]), int(value[1])


def _padding(value) -> Tuple[int, int, int, int]:
    """(top, left, bottom, right), TVM's order; an int or a (h, w) pair pads symmetrically."""
    if isinstance(value, (int, np.integer)):
        return (int(value),) * 4
    if len(value) == 2:
        return int(value[0]), int(value[1]), int(value[0]), int(value[1])
    if len(value) == 4:
        return tuple(int(v) for v in value)
    raise AccelInvalidError(f"padding = {value!r} must have 1, 2 or 4 entries")


class _ShapeOnly:
    """An operand that is present but has no data: for cost estimates of chains whose weights
    are not known yet. ``Device.run`` refuses it."""

    def __repr__(self) -> str:
        return "SHAPE_ONLY"


SHAPE_ONLY = _ShapeOnly()
# Estimates never read operands, but the cost model counts the present ones by pointer: a
# shape-only operand points at this (never dereferenced) word.
_SHAPE_ONLY_WORD = np.zeros(16, dtype=np.float64)


def as_operand(array, precision: str, what: str) -> np.ndarray:
    """A C-contiguous array of the precision's dtype: the caller's own memory when it already is
    one (no copy), else a converted copy."""
    dtype = _DTYPES.get(precision)
    if dtype is None:
        raise AccelInvalidError(f"{what}: unknown precision {precision!r}")
    return np.ascontiguousarray(array, dtype=dtype)


def _pointer(array):
    if array is None:
        return ffi.NULL
    if array is SHAPE_ONLY:
        return ffi.cast("void*", _SHAPE_ONLY_WORD.ctypes.data)
    return ffi.cast("void*", array.ctypes.data)


def _operand(value, precision: str, what: str):
    return value if value is None or value is SHAPE_ONLY else as_operand(value, precision, what)


@dataclasses.dataclass
class Conv:
    """CONV engine: direct convolution; ``weights`` is [K, C/groups, R, S] (or None with
    ``weight_shape`` for a cost estimate)."""

    weights: Optional[np.ndarray]
    stride: Sequence[int] = (1, 1)
    padding: Sequence[int] = (0, 0, 0, 0)
    dilation: Sequence[int] = (1, 1)
    groups: int = 1
    precision: str = "fp32"
    weight_shape: Optional[Sequence[int]] = None

    engine = "CONV"

    def lower(self, c_op) -> None:
        if self.weights is not None:
            self.weights = as_operand(self.weights, self.precision, "conv weights")
            self.weight_shape = self.weights.shape
        if self.weight_shape is None or len(self.weight_shape) != 4:
            raise AccelInvalidError(
                f"conv weights must be 4-D [K, C/groups, R, S], got shape {self.weight_shape}")
        c_op.engine = lib.ACCEL_ENGINE_CONV
        d = c_op.conv
        d.out_c, _, d.kernel_h, d.kernel_w = (int(v) for v in self.weight_shape)
        d.stride_h, d.stride_w = _pair(self.stride, "stride")
        d.pad_top, d.pad_left, d.pad_bottom, d.pad_right = _padding(self.padding)
        d.dilation_h, d.dilation_w = _pair(self.dilation, "dilation")
        d.groups = int(self.groups)
        d.precision = precision_code(self.precision)
        d.weights = _pointer(self.weights)

    def check_sizes(self, in_shape: Tuple[int, int, int, int]) -> None:
        """The weights must hold [K, C/groups, R, S] for the input the op sees."""
        expected_c = in_shape[1] // max(int(self.groups), 1)
        if self.weight_shape[1] != expected_c:
            raise AccelInvalidError(
                f"conv weights have {self.weight_shape[1]} input channels per group, the input "
                f"has {in_shape[1]} channels in {self.groups} groups ({expected_c} per group)")


@dataclasses.dataclass
class Sdp:
    """SDP engine: ``act(ew(x * scale[c] + shift[c], operand))``."""

    scale: Optional[np.ndarray] = None
    shift: Optional[np.ndarray] = None
    ew_op: Optional[str] = None
    operand: Optional[np.ndarray] = None
    act: Optional[str] = None
    clip: Tuple[float, float] = (0.0, 6.0)
    prelu_slope: Optional[np.ndarray] = None
    precision: str = "fp32"

    engine = "SDP"

    def lower(self, c_op) -> None:
        if self.ew_op not in EW_OPS:
            raise AccelInvalidError(f"ew_op = {self.ew_op!r} is not one of {list(EW_OPS)}")
        if self.act not in ACTIVATIONS:
            raise AccelInvalidError(f"act = {self.act!r} is not one of {list(ACTIVATIONS)}")
        for field in ("scale", "shift", "prelu_slope"):
            value = _operand(getattr(self, field), self.precision, f"sdp {field}")
            setattr(self, field, value.reshape(-1) if isinstance(value, np.ndarray) else value)
        self.operand = _operand(self.operand, self.precision, "sdp operand")
        c_op.engine = lib.ACCEL_ENGINE_SDP
        d = c_op.sdp
        d.scale, d.shift = _pointer(self.scale), _pointer(self.shift)
        d.ew_op = EW_OPS[self.ew_op]
        d.ew_operand = _pointer(self.operand)
        d.act = ACTIVATIONS[self.act]
        d.clip_min, d.clip_max = (float(v) for v in self.clip)
        d.prelu_slope = _pointer(self.prelu_slope)
        d.precision = precision_code(self.precision)

    def check_sizes(self, in_shape: Tuple[int, int, int, int]) -> None:
        """The C side reads its operands through raw pointers: check their sizes against the
        NCHW shape the op sees, so it never reads past them."""
        for field in ("scale", "shift", "prelu_slope"):
            value = getattr(self, field)
            if isinstance(value, np.ndarray) and value.size != in_shape[1]:
                raise AccelInvalidError(
                    f"sdp {field} has {value.size} values for {in_shape[1]} channels")
        if isinstance(self.operand, np.ndarray) and self.operand.size != int(np.prod(in_shape)):
            raise AccelInvalidError(
                f"sdp operand of shape {self.operand.shape} does not match the op's shape "
                f"{tuple(in_shape)}")


@dataclasses.dataclass
class Pool:
    """PDP engine: max or average pooling, kernel 1..8 per side."""

    kind: str = "max"
    kernel: Sequence[int] = (2, 2)
    stride: Sequence[int] = (2, 2)
    padding: Sequence[int] = (0, 0, 0, 0)
    count_include_pad: bool = False
    precision: str = "fp32"

    engine = "PDP"

    def lower(self, c_op) -> None:
        if self.kind not in POOLS:
            raise AccelInvalidError(f"pool kind = {self.kind!r} is not one of {list(POOLS)}")
        c_op.engine = lib.ACCEL_ENGINE_PDP
        d = c_op.pdp
        d.pool = POOLS[self.kind]
        d.kernel_h, d.kernel_w = _pair(self.kernel, "kernel")
        d.stride_h, d.stride_w = _pair(self.stride, "stride")
        d.pad_top, d.pad_left, d.pad_bottom, d.pad_right = _padding(self.padding)
        d.count_include_pad = int(bool(self.count_include_pad))
        d.precision = precision_code(self.precision)

    def check_sizes(self, in_shape: Tuple[int, int, int, int]) -> None:
        """Pooling reads nothing but its input."""


def has_data(op) -> bool:
    """Whether every operand of an op holds data (estimates accept shape-only operands)."""
    if isinstance(op, Conv):
        return op.weights is not None
    if isinstance(op, Sdp):
        return all(getattr(op, f) is not SHAPE_ONLY
                   for f in ("scale", "shift", "operand", "prelu_slope"))
    return True


Op = Conv | Sdp | Pool
