"""Engine op descriptors, the Python face of the ISA in ``accel/accel.h``.

Each class mirrors one C descriptor; ``lower()`` fills the C struct. Array operands are kept
by the descriptor, so the memory the C side reads stays alive for the run.

Data types: fp32 data and parameters are float32 (any real array converts); int8 data and
weights are int8 codes (integer arrays whose values fit); fp16 data and parameters are
``np.float16`` arrays, handed to C as their IEEE binary16 bits (float arrays convert only when
every value is a half exactly: rounding is the caller's decision). The INT8 SDP converters have
fixed types whatever the precision: ``bias`` int32, ``mul`` and ``prelu_mul`` int16, ``rshift``
uint8. A value of the wrong kind raises :class:`AccelDtypeError` (a ``TypeError``), one out of
its type's range :class:`AccelInvalidError`; both name the operand and the value.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence, Tuple

import numpy as np

from ._accel_ffi import ffi, lib
from .config import AccelConfig, precision_code
from .errors import AccelInvalidError, check

EW_OPS = {None: lib.ACCEL_EW_NONE, "add": lib.ACCEL_EW_ADD, "mul": lib.ACCEL_EW_MUL,
          "max": lib.ACCEL_EW_MAX, "min": lib.ACCEL_EW_MIN}
ACTIVATIONS = {None: lib.ACCEL_ACT_NONE, "relu": lib.ACCEL_ACT_RELU, "clip": lib.ACCEL_ACT_CLIP,
               "prelu": lib.ACCEL_ACT_PRELU, "sigmoid": lib.ACCEL_ACT_SIGMOID,
               "tanh": lib.ACCEL_ACT_TANH}
POOLS = {"max": lib.ACCEL_POOL_MAX, "avg": lib.ACCEL_POOL_AVG}
#: How each precision is stored in host memory.
_DTYPES = {"int8": np.int8, "int16": np.int16, "fp16": np.float16, "fp32": np.float32}
#: The float ReLU6 bounds an fp32/fp16 SDP clips to when ``clip`` is not given.
DEFAULT_CLIP = (0.0, 6.0)
#: Alignment accel_conv_pack_weights() needs for its output.
PACKED_ALIGNMENT = 64


class AccelDtypeError(AccelInvalidError, TypeError):
    """An array has the wrong kind of element for its operand (float data for an int8 tensor,
    say). Also a ``TypeError``."""


def dtype_for(precision: str):
    """The NumPy dtype a precision's tensors are stored in."""
    dtype = _DTYPES.get(precision)
    if dtype is None:
        raise AccelInvalidError(f"unknown precision {precision!r} (known: {', '.join(_DTYPES)})")
    return dtype


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


def _first_bad(mask: np.ndarray, values: np.ndarray) -> str:
    index = tuple(int(i) for i in np.argwhere(mask)[0])
    where = f"[{', '.join(map(str, index))}]" if index else ""
    value = values[index]
    value = value.item() if hasattr(value, "item") else value
    return f"{value!r}{' at ' + where if where else ''}"


def as_typed(array, dtype, what: str) -> np.ndarray:
    """A C-contiguous array of ``dtype``: the caller's own memory when it already is one (no
    copy), else a checked copy. Integer dtypes take integer arrays whose values fit; float16
    takes float arrays whose values are halves exactly; float32 takes any real array."""
    dtype = np.dtype(dtype)
    source = np.asarray(array)
    if source.dtype == dtype:
        return np.ascontiguousarray(source)
    kind = source.dtype.kind
    if dtype.kind in "iu":
        if kind not in "iub":
            raise AccelDtypeError(
                f"{what}: {dtype} values are needed, got a {source.dtype} array (convert "
                f"explicitly, e.g. np.rint(x).astype(np.{dtype}))")
        info = np.iinfo(dtype)
        wide = source.astype(np.int64) if kind != "u" else source.astype(np.uint64)
        outside = (wide < info.min) | (wide > info.max) if kind != "u" else wide > info.max
        if outside.any():
            raise AccelInvalidError(
                f"{what}: value {_first_bad(outside, source)} is outside the {dtype} range "
                f"[{info.min}, {info.max}]")
        return np.ascontiguousarray(source, dtype=dtype)
    if dtype == np.float16:
        if kind != "f":
            raise AccelDtypeError(
                f"{what}: float16 values are needed, got a {source.dtype} array")
        converted = np.ascontiguousarray(source, dtype=np.float16)
        with np.errstate(invalid="ignore"):
            inexact = ~((converted.astype(source.dtype) == source)
                        | (np.isnan(converted) & np.isnan(source)))
        if inexact.any():
            raise AccelDtypeError(
                f"{what}: value {_first_bad(inexact, source)} of the {source.dtype} array is "
                "not a float16 (round it yourself: x.astype(np.float16))")
        return converted
    if kind not in "iubf":
        raise AccelDtypeError(f"{what}: real values are needed, got a {source.dtype} array")
    return np.ascontiguousarray(source, dtype=dtype)


def as_operand(array, precision: str, what: str) -> np.ndarray:
    """A C-contiguous array of the precision's dtype (see :func:`as_typed`)."""
    return as_typed(array, dtype_for(precision), what)


def _pointer(array):
    if array is None:
        return ffi.NULL
    if array is SHAPE_ONLY:
        return ffi.cast("void*", _SHAPE_ONLY_WORD.ctypes.data)
    return ffi.cast("void*", array.ctypes.data)


def _operand(value, dtype, what: str, flat: bool = False):
    if value is None or value is SHAPE_ONLY:
        return value
    array = as_typed(value, dtype, what)
    return array.reshape(-1) if flat else array


def _aligned_bytes(size: int) -> np.ndarray:
    """``size`` bytes starting on a PACKED_ALIGNMENT boundary (the view keeps its base alive)."""
    raw = np.zeros(size + PACKED_ALIGNMENT, dtype=np.uint8)
    offset = -raw.ctypes.data % PACKED_ALIGNMENT
    return raw[offset:offset + size]


@dataclasses.dataclass
class Conv:
    """CONV engine: direct convolution; ``weights`` is [K, C/groups, R, S] (or None with
    ``weight_shape`` for a cost estimate).

    INT8: ``weights`` are int8, ``in_zero`` is the input's zero point (padding reads as it);
    ``packed`` optionally holds :meth:`packed_for`'s bytes (NVDLA's pre-formatted weights), else
    the kernel packs the weights on every run. An INT8 or FP16 CONV must be followed by an SDP.
    """

    weights: Optional[np.ndarray]
    stride: Sequence[int] = (1, 1)
    padding: Sequence[int] = (0, 0, 0, 0)
    dilation: Sequence[int] = (1, 1)
    groups: int = 1
    precision: str = "fp32"
    weight_shape: Optional[Sequence[int]] = None
    in_zero: int = 0
    packed: Optional[np.ndarray] = None

    engine = "CONV"

    def _fill(self, d) -> None:
        """Fill an accel_conv_desc (weights_packed left NULL)."""
        if self.weights is not None:
            self.weights = as_operand(self.weights, self.precision, "conv weights")
            self.weight_shape = self.weights.shape
        if self.weight_shape is None or len(self.weight_shape) != 4:
            raise AccelInvalidError(
                f"conv weights must be 4-D [K, C/groups, R, S], got shape {self.weight_shape}")
        d.out_c, _, d.kernel_h, d.kernel_w = (int(v) for v in self.weight_shape)
        d.stride_h, d.stride_w = _pair(self.stride, "stride")
        d.pad_top, d.pad_left, d.pad_bottom, d.pad_right = _padding(self.padding)
        d.dilation_h, d.dilation_w = _pair(self.dilation, "dilation")
        d.groups = int(self.groups)
        d.precision = precision_code(self.precision)
        d.weights = _pointer(self.weights)
        d.in_zero = int(self.in_zero)

    def lower(self, c_op) -> None:
        c_op.engine = lib.ACCEL_ENGINE_CONV
        self._fill(c_op.conv)
        if self.packed is not None:
            packed = np.asarray(self.packed)
            if packed.dtype != np.uint8 or packed.ndim != 1:
                raise AccelDtypeError(
                    f"conv packed: the bytes of Conv.packed_for() are needed (1-D uint8), got "
                    f"a {packed.dtype} array of shape {packed.shape}")
            if packed.ctypes.data % PACKED_ALIGNMENT or not packed.flags.c_contiguous:
                aligned = _aligned_bytes(packed.size)
                aligned[:] = packed
                packed = aligned
            self.packed = packed
            c_op.conv.weights_packed = _pointer(packed)

    def pack(self, config: AccelConfig | str, in_c: Optional[int] = None) -> np.ndarray:
        """The INT8 weights packed by ``accel_conv_pack_weights`` for an input of ``in_c``
        channels (default: C/groups x groups): 64-byte aligned uint8 bytes."""
        if self.weights is None:
            raise AccelInvalidError("conv weights: packing needs the weights, not a shape")
        if in_c is None:
            in_c = int(np.shape(self.weights)[1]) * int(self.groups)
        config_c = AccelConfig.resolve(config).to_c()
        desc = ffi.new("accel_conv_desc*")
        try:
            self._fill(desc)
        except OverflowError as error:
            raise AccelInvalidError(f"conv: {error}") from None
        size = ffi.new("size_t*")
        check(lib.accel_conv_pack_weights(config_c, desc, int(in_c), ffi.NULL, size))
        packed = _aligned_bytes(int(size[0]))
        check(lib.accel_conv_pack_weights(config_c, desc, int(in_c), _pointer(packed), size))
        return packed

    def packed_for(self, config: AccelConfig | str, in_c: Optional[int] = None) -> "Conv":
        """A copy of this (INT8) conv that carries its pre-packed weights (see :meth:`pack`)."""
        return dataclasses.replace(self, packed=self.pack(config, in_c))

    def check_sizes(self, in_shape: Tuple[int, int, int, int]) -> None:
        """The weights must hold [K, C/groups, R, S] for the input the op sees."""
        expected_c = in_shape[1] // max(int(self.groups), 1)
        if self.weight_shape[1] != expected_c:
            raise AccelInvalidError(
                f"conv weights have {self.weight_shape[1]} input channels per group, the input "
                f"has {in_shape[1]} channels in {self.groups} groups ({expected_c} per group)")


#: The SDP's per-channel operands and their element types (None: the op's precision).
_SDP_CHANNEL_FIELDS = {"scale": None, "shift": None, "prelu_slope": None, "bias": np.int32,
                       "mul": np.int16, "rshift": np.uint8, "prelu_mul": np.int16}


@dataclasses.dataclass
class Sdp:
    """SDP engine: ``act(ew(x * scale[c] + shift[c], operand))``.

    fp32 / fp16 use ``scale``, ``shift``, ``prelu_slope`` (arrays in the precision) and ``clip``
    (float bounds, default (0, 6)). INT8 uses the integer converters of accel.h instead:
    ``bias`` (int32), ``mul`` (int16), ``rshift`` (uint8, 0..62) per channel; ``in_zero`` (an
    input read from memory); the element-wise operand's ``ew_zero``, ``ew_mul`` (default 1),
    ``ew_shift``; PReLU's ``prelu_mul`` (int16 per channel) and ``prelu_shift``; the output
    converter ``out_mul`` (0: identity), ``out_shift``, ``out_zero``; CLIP's ``clip_lo`` /
    ``clip_hi`` in output codes (default -128 / 127).
    """

    scale: Optional[np.ndarray] = None
    shift: Optional[np.ndarray] = None
    ew_op: Optional[str] = None
    operand: Optional[np.ndarray] = None
    act: Optional[str] = None
    clip: Optional[Tuple[float, float]] = None
    prelu_slope: Optional[np.ndarray] = None
    precision: str = "fp32"
    bias: Optional[np.ndarray] = None
    mul: Optional[np.ndarray] = None
    rshift: Optional[np.ndarray] = None
    in_zero: int = 0
    ew_zero: int = 0
    ew_mul: Optional[int] = None
    ew_shift: int = 0
    prelu_mul: Optional[np.ndarray] = None
    prelu_shift: int = 0
    out_mul: int = 0
    out_shift: int = 0
    out_zero: int = 0
    clip_lo: Optional[int] = None
    clip_hi: Optional[int] = None

    engine = "SDP"

    @property
    def clip_bounds(self) -> Tuple[float, float]:
        """The float CLIP bounds (fp32 / fp16)."""
        return DEFAULT_CLIP if self.clip is None else tuple(self.clip)

    @property
    def int8_converters(self) -> dict:
        """The INT8 scalar converter fields with their defaults resolved."""
        return dict(in_zero=int(self.in_zero), ew_zero=int(self.ew_zero),
                    ew_mul=1 if self.ew_mul is None else int(self.ew_mul),
                    ew_shift=int(self.ew_shift), prelu_shift=int(self.prelu_shift),
                    out_mul=int(self.out_mul), out_shift=int(self.out_shift),
                    out_zero=int(self.out_zero),
                    clip_lo=-128 if self.clip_lo is None else int(self.clip_lo),
                    clip_hi=127 if self.clip_hi is None else int(self.clip_hi))

    def lower(self, c_op) -> None:
        if self.ew_op not in EW_OPS:
            raise AccelInvalidError(f"ew_op = {self.ew_op!r} is not one of {list(EW_OPS)}")
        if self.act not in ACTIVATIONS:
            raise AccelInvalidError(f"act = {self.act!r} is not one of {list(ACTIVATIONS)}")
        int8 = self.precision == "int8"
        data_dtype = dtype_for(self.precision)
        for field, dtype in _SDP_CHANNEL_FIELDS.items():
            if dtype is None:  # float parameters: an INT8 SDP gets them as fp32, and C refuses
                dtype = np.float32 if int8 else data_dtype
            setattr(self, field, _operand(getattr(self, field), dtype, f"sdp {field}", True))
        self.operand = _operand(self.operand, data_dtype, "sdp operand")
        c_op.engine = lib.ACCEL_ENGINE_SDP
        d = c_op.sdp
        d.scale, d.shift = _pointer(self.scale), _pointer(self.shift)
        d.ew_op = EW_OPS[self.ew_op]
        d.ew_operand = _pointer(self.operand)
        d.act = ACTIVATIONS[self.act]
        d.prelu_slope = _pointer(self.prelu_slope)
        d.precision = precision_code(self.precision)
        d.bias, d.mul = _pointer(self.bias), _pointer(self.mul)
        d.rshift, d.prelu_mul = _pointer(self.rshift), _pointer(self.prelu_mul)
        if int8:
            if self.clip is not None:
                raise AccelInvalidError(
                    f"sdp clip = {tuple(self.clip)} holds float bounds; an INT8 SDP clips its "
                    "output codes to clip_lo / clip_hi")
            d.clip_min = d.clip_max = 0.0
            for field, value in self.int8_converters.items():
                setattr(d, field, value)
        else:
            d.clip_min, d.clip_max = (float(v) for v in self.clip_bounds)
            # Outside INT8 the converters must be 0: pass what was given, so C names it.
            d.in_zero, d.ew_zero, d.ew_shift = (int(v) for v in
                                                 (self.in_zero, self.ew_zero, self.ew_shift))
            d.ew_mul = 0 if self.ew_mul is None else int(self.ew_mul)
            d.prelu_shift, d.out_mul = int(self.prelu_shift), int(self.out_mul)
            d.out_shift, d.out_zero = int(self.out_shift), int(self.out_zero)
            d.clip_lo = 0 if self.clip_lo is None else int(self.clip_lo)
            d.clip_hi = 0 if self.clip_hi is None else int(self.clip_hi)

    def check_sizes(self, in_shape: Tuple[int, int, int, int]) -> None:
        """The C side reads its operands through raw pointers: check their sizes against the
        NCHW shape the op sees, so it never reads past them."""
        for field in _SDP_CHANNEL_FIELDS:
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
    """PDP engine: max or average pooling, kernel 1..8 per side. INT8: ``zero`` is the input's
    (and output's) zero point."""

    kind: str = "max"
    kernel: Sequence[int] = (2, 2)
    stride: Sequence[int] = (2, 2)
    padding: Sequence[int] = (0, 0, 0, 0)
    count_include_pad: bool = False
    precision: str = "fp32"
    zero: int = 0

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
        d.zero = int(self.zero)

    def check_sizes(self, in_shape: Tuple[int, int, int, int]) -> None:
        """Pooling reads nothing but its input."""


def has_data(op) -> bool:
    """Whether every operand of an op holds data (estimates accept shape-only operands)."""
    if isinstance(op, Conv):
        return op.weights is not None
    if isinstance(op, Sdp):
        return all(getattr(op, f) is not SHAPE_ONLY for f in (*_SDP_CHANNEL_FIELDS, "operand"))
    return True


Op = Conv | Sdp | Pool
