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

from .._accel_ffi import ffi, lib
from ..errors import AccelDtypeError, AccelInvalidError, AccelShapeError, check
from .config import AccelConfig, precision_code
from .layout import c16_shape
from .vocabulary import (ACTIVATIONS, CONV_MODES, ELEMENTWISE, ENGINES, PIXEL_FORMATS, POOLS,
                         RUBIK_MODES, SRAM_STREAMS, WEIGHT_FORMATS)

#: How each precision is stored in host memory.
_DTYPES = {"int8": np.int8, "int16": np.int16, "fp16": np.float16, "fp32": np.float32}
#: The float ReLU6 bounds an fp32/fp16 SDP clips to when ``clip`` is not given.
DEFAULT_CLIP = (0.0, 6.0)
#: Alignment accel_conv_pack_weights() needs for its output.
PACKED_ALIGNMENT = lib.ACCEL_PACKED_ALIGNMENT


def dtype_for(precision: str):
    """The NumPy dtype a precision's tensors are stored in."""
    dtype = _DTYPES.get(precision) if isinstance(precision, str) else None
    if dtype is None:
        raise AccelInvalidError(f"unknown precision {precision!r} (known: {', '.join(_DTYPES)})")
    return dtype


#: The range of the C descriptors' int32_t fields.
INT32_RANGE = (-2**31, 2**31 - 1)


def integer(value, what: str, lo: int = INT32_RANGE[0], hi: int = INT32_RANGE[1]) -> int:
    """``value`` as a Python int in [lo, hi]: an integer (not a bool, not a float, which would
    be truncated), else AccelDtypeError; out of range, AccelInvalidError. Both name ``what``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise AccelDtypeError(f"{what} = {value!r} is not an integer")
    value = int(value)
    if not lo <= value <= hi:
        raise AccelInvalidError(f"{what} = {value} is outside [{lo}, {hi}]")
    return value


def real(value, what: str) -> float:
    """``value`` as a float: an int, float or NumPy real scalar (not a bool, not a string)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                       np.floating)):
        raise AccelDtypeError(f"{what} = {value!r} is not a real number")
    return float(value)


def flag(value, what: str) -> bool:
    """``value`` as a bool: True / False (or NumPy's, or 0 / 1); anything else is refused
    rather than read by its truth value (the string "no" is true)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and value in (0, 1):
        return bool(value)
    raise AccelDtypeError(f"{what} = {value!r} is not a bool")


def _entries(value, what: str, counts: Tuple[int, ...]) -> tuple:
    """The entries of a tuple or list (or 1-D array) whose length is one of ``counts``."""
    if isinstance(value, np.ndarray) and value.ndim == 1:
        value = value.tolist()
    if not isinstance(value, (tuple, list)) or len(value) not in counts:
        wanted = " or ".join(str(c) for c in counts)
        raise AccelInvalidError(
            f"{what} = {value!r} must be an integer or a sequence of {wanted} integers")
    return tuple(value)


def _pair(value, what: str) -> Tuple[int, int]:
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return integer(value, what), integer(value, what)
    first, second = _entries(value, what, (2,))
    return integer(first, f"{what}[0]"), integer(second, f"{what}[1]")


def _padding(value, what: str = "padding") -> Tuple[int, int, int, int]:
    """(top, left, bottom, right), TVM's order; an int or a (h, w) pair pads symmetrically."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return (integer(value, what),) * 4
    entries = _entries(value, what, (2, 4))
    entries = tuple(integer(v, f"{what}[{i}]") for i, v in enumerate(entries))
    return entries * 2 if len(entries) == 2 else entries


class _ShapeOnly:
    """An operand that is present but has no data: for cost estimates of chains whose weights
    are not known yet. ``Device.run`` refuses it."""

    def __repr__(self) -> str:
        return "SHAPE_ONLY"


SHAPE_ONLY = _ShapeOnly()
# Estimates never read operands, but the cost model counts the present ones by pointer: a
# shape-only operand points at these zeros (a table struct's fields are validated: 1 KiB of
# zeros covers the largest, accel_cdp_int8, with in-range values).
_SHAPE_ONLY_WORD = np.zeros(128, dtype=np.float64)


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
        if source.flags.c_contiguous and source.flags.aligned:
            return source
        return np.array(source, order="C")  # a fresh array is aligned
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


def _int16_tables(owner, tables: Sequence[Tuple[str, int]], what: str) -> np.ndarray:
    """The named int16 lookup tables of ``owner`` laid end to end, each checked for its count
    of entries (``accel.h``'s sizes): the part of a LUT struct the descriptor points at."""
    checked = []
    for name, size in tables:
        table = as_typed(np.asarray(getattr(owner, name)).reshape(-1), np.int16,
                         f"{what} {name}")
        if table.size != size:
            raise AccelShapeError(f"{what} {name} has {table.size} entries, not {size}")
        checked.append(table)
    return np.concatenate(checked)


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


def count_nonzero(weights: np.ndarray, precision: str) -> int:
    """Non-zero weights as the hardware counts them (a negative zero is zero)."""
    return int(np.count_nonzero(np.asarray(weights, dtype_for(precision))))


def sram_bits(streams, what: str = "sram") -> int:
    """accel_op.sram of stream names ("input", "operand", "output")."""
    if isinstance(streams, str) or not isinstance(streams, (tuple, list, set, frozenset)):
        raise AccelInvalidError(f"{what} = {streams!r} must be a list of stream names "
                                f"({', '.join(SRAM_STREAMS)})")
    bits = 0
    for name in streams:
        if name not in SRAM_STREAMS:
            raise AccelInvalidError(f"{what}: {name!r} is not one of {', '.join(SRAM_STREAMS)}")
        bits |= getattr(lib, SRAM_STREAMS[name])
    return bits


def _aligned_bytes(size: int) -> np.ndarray:
    """``size`` bytes starting on a PACKED_ALIGNMENT boundary (the view keeps its base alive)."""
    raw = np.zeros(size + PACKED_ALIGNMENT, dtype=np.uint8)
    offset = -raw.ctypes.data % PACKED_ALIGNMENT
    return raw[offset:offset + size]


@dataclasses.dataclass
class Conv:
    """CONV engine: direct or Winograd convolution; ``weights`` is [K, C/groups, R, S] (or
    None with ``weight_shape`` for a cost estimate).

    INT8: ``weights`` are int8, ``in_zero`` is the input's zero point (padding reads as it);
    ``packed`` optionally holds :meth:`packed_for`'s bytes (NVDLA's pre-formatted weights), else
    the kernel packs the weights on every run. An INT8 or FP16 CONV must be followed by an SDP.

    ``pixel_format`` (``"r8"``, ``"a8b8g8r8"``, ``"a16b16g16r16_f"``) reads the run's input as
    pixels (NVDLA's image-input mode); ``multi_batch`` fetches a fully connected layer's
    weights once per batch. Both give the same values and cost less (see ``accel.h``).
    ``mode``: "direct" or "winograd" (NVDLA's F(2x2, 3x3); its conditions and numerical bound
    are accel_conv_mode's in accel.h; the C library refuses a conv that does not qualify).
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
    pixel_format: Optional[str] = None
    multi_batch: bool = False
    mode: str = "direct"
    data_banks: int = 0     # CBUF split; both 0: accel_conv_banks()'s choice
    weight_banks: int = 0
    weight_format: str = "dense"  # or "sparse": NVDLA's mask + non-zero weights
    weights_nonzero: Optional[int] = None  # sparse: counted from the weights when None

    sram: Sequence[str] = ()  # memory streams in the secondary memory: SRAM_STREAMS

    engine = "CONV"

    def _fill(self, d) -> None:
        """Fill an accel_conv_desc (weights_packed left NULL)."""
        if self.weights is not None:
            self.weights = as_operand(self.weights, self.precision, "conv weights")
            if self.weight_shape is not None and (
                    not isinstance(self.weight_shape, (tuple, list)) or
                    tuple(self.weight_shape) != self.weights.shape):
                raise AccelInvalidError(
                    f"conv weight_shape = {self.weight_shape!r} disagrees with the weights' "
                    f"shape {self.weights.shape} (give one or the other)")
            self.weight_shape = self.weights.shape
        shape = self.weight_shape
        if (not isinstance(shape, (tuple, list)) or len(shape) != 4):
            raise AccelInvalidError(
                f"conv weights must be 4-D [K, C/groups, R, S], got shape {shape!r}")
        self.weight_shape = tuple(integer(v, f"conv weight_shape[{i}]", 1)
                                  for i, v in enumerate(shape))
        d.out_c, _, d.kernel_h, d.kernel_w = self.weight_shape
        d.stride_h, d.stride_w = _pair(self.stride, "conv stride")
        d.pad_top, d.pad_left, d.pad_bottom, d.pad_right = _padding(self.padding, "conv padding")
        d.dilation_h, d.dilation_w = _pair(self.dilation, "conv dilation")
        d.groups = integer(self.groups, "conv groups")
        d.precision = precision_code(self.precision)
        d.weights = _pointer(self.weights)
        d.in_zero = integer(self.in_zero, "conv in_zero")
        d.pixel_format = PIXEL_FORMATS.code(self.pixel_format, "conv pixel_format")
        if not isinstance(self.multi_batch, (bool, np.bool_)):
            raise AccelInvalidError(f"conv multi_batch = {self.multi_batch!r} is not a bool")
        d.multi_batch = int(self.multi_batch)
        d.mode = CONV_MODES.code(self.mode)
        d.data_banks = integer(self.data_banks, "conv data_banks")
        d.weight_banks = integer(self.weight_banks, "conv weight_banks")
        if self.weight_format not in WEIGHT_FORMATS:
            raise AccelInvalidError(f"conv weight_format = {self.weight_format!r} is not one of "
                                    f"{', '.join(WEIGHT_FORMATS.names)}")
        d.weight_format = WEIGHT_FORMATS.code(self.weight_format)
        nonzero = self.weights_nonzero
        if nonzero is None and self.weight_format == "sparse":
            if not isinstance(self.weights, np.ndarray):
                raise AccelInvalidError("conv weights_nonzero: a sparse conv without weights "
                                        "needs the count of its non-zero weights")
            nonzero = count_nonzero(self.weights, self.precision)
        d.weights_nonzero = integer(nonzero or 0, "conv weights_nonzero", 0, 2**62)

    def lower(self, c_op) -> None:
        c_op.engine = ENGINES.code(self.engine)
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
            c_op.conv.weights_packed_bytes = packed.size

    def pack(self, config: AccelConfig | str, in_c: Optional[int] = None) -> np.ndarray:
        """The weights packed by ``accel_conv_pack_weights`` for an input of ``in_c`` channels
        (default: C/groups x groups): INT8 in the kernel's layout, FP16 widened, FP32/FP16
        Winograd pre-transformed; 64-byte aligned uint8 bytes."""
        if self.weights is None:
            raise AccelInvalidError("conv weights: packing needs the weights, not a shape")
        config_c = AccelConfig.resolve(config).to_c()
        desc = ffi.new("accel_conv_desc*")
        self._fill(desc)
        groups, per_group = desc.groups, self.weight_shape[1]
        if in_c is None:
            in_c = per_group * groups
        in_c = integer(in_c, "conv pack in_c", 1)
        if in_c != per_group * groups:  # the C side reads K x in_c/groups x R x S weights
            raise AccelShapeError(
                f"conv pack in_c = {in_c}: the weights hold {per_group} input channels per "
                f"group x {groups} groups = {per_group * groups}")
        size = ffi.new("size_t*")
        check(lib.accel_conv_pack_weights(config_c, desc, in_c, ffi.NULL, size))
        packed = _aligned_bytes(int(size[0]))
        check(lib.accel_conv_pack_weights(config_c, desc, in_c, _pointer(packed), size))
        return packed

    def packs(self, config: AccelConfig | str, in_c: int) -> bool:
        """Whether ``accel_conv_pack_weights`` packs this conv's weights (weights or a shape
        suffice): INT8, FP16, Winograd mode, and FP32 1x1 and 3x3 weights for C16 runs."""
        desc = ffi.new("accel_conv_desc*")
        self._fill(desc)
        return lib.accel_conv_pack_weights(AccelConfig.resolve(config).to_c(), desc,
                                           integer(in_c, "conv pack in_c", 1), ffi.NULL,
                                           ffi.new("size_t*")) == lib.ACCEL_OK

    def packed_for(self, config: AccelConfig | str, in_c: Optional[int] = None) -> "Conv":
        """A copy of this conv that carries its pre-packed weights (see :meth:`pack`)."""
        return dataclasses.replace(self, packed=self.pack(config, in_c))

    def check_sizes(self, in_shape: Tuple[int, int, int, int], layout: str = "nchw") -> None:
        """The weights must hold [K, C/groups, R, S] for the input the op sees."""
        expected_c = in_shape[1] // max(int(self.groups), 1)
        if self.weight_shape[1] != expected_c:
            raise AccelInvalidError(
                f"conv weights have {self.weight_shape[1]} input channels per group, the input "
                f"has {in_shape[1]} channels in {self.groups} groups ({expected_c} per group)")


#: The SDP's per-channel operands and their element types (None: the op's precision).
_SDP_CHANNEL_FIELDS = {"scale": None, "shift": None, "prelu_slope": None, "bias": np.int32,
                       "mul": np.int16, "rshift": np.uint8, "prelu_mul": np.int16}
#: The SDP's X unit operands (accel_sdp_x: x1 then x2, each an add then a multiply).
X_FIELDS = ("x1_alu", "x1_mul", "x2_alu", "x2_mul")
#: The SDP's scalar INT8 converter fields (None: the default, see Sdp.int8_converters).
_SDP_CONVERTER_FIELDS = ("in_zero", "ew_zero", "ew_mul", "ew_shift", "prelu_shift", "out_mul",
                         "out_shift", "out_zero", "clip_lo", "clip_hi")


@dataclasses.dataclass
class LutInt8:
    """The INT8 SDP's lookup table (``accel_lut_int8`` in accel.h): int16 entries of the LO
    (257) and LE (65) tables, their starts in units of the LUT's int32 input, each table's step
    as a power of two (``*_index_select``, 0..31), and the slopes below and above LE (int16
    scale, right shift). The compiler builds one per layer from its scales
    (:mod:`accel_codegen.quantization.lut`)."""

    lo: np.ndarray
    le: np.ndarray
    lo_start: int
    le_start: int
    lo_index_select: int
    le_index_select: int
    underflow_scale: int = 0
    underflow_shift: int = 0
    overflow_scale: int = 0
    overflow_shift: int = 0

    #: The int32 fields after the entries, in accel_lut_int8's order.
    FIELDS = ("lo_start", "le_start", "lo_index_select", "le_index_select", "underflow_scale",
              "underflow_shift", "overflow_scale", "overflow_shift")

    def words(self) -> np.ndarray:
        """The struct's memory as int32 words (644 bytes of int16 entries, then the fields):
        what the descriptor points at, and the generated code's constant."""
        entries = _int16_tables(self, (("lo", lib.ACCEL_LUT_LO_ENTRIES),
                                       ("le", lib.ACCEL_LUT_LE_ENTRIES)), "sdp lut")
        fields = [integer(getattr(self, f), f"sdp lut {f}") for f in self.FIELDS]
        return np.concatenate([entries.view(np.int32), np.asarray(fields, np.int32)])


@dataclasses.dataclass
class CdpInt8:
    """The INT8 CDP's registers and lookup tables (``accel_cdp_int8`` in accel.h), NVDLA's CDP
    datapath: the input converter (``datin_*``), the square sum, the LE (65 entries, linear or
    exponential index) and LO (257, linear) int16 tables with their starts and ends (units of
    the square sum), index selects, LE's index offset, the four slopes beyond them (int16 scale,
    right shift) and the three priorities (1: LO wins), the multiplier and the output converter
    (``datout_*``). The arithmetic is ``reference.cdp_int8``; the NVDLA front end fills one
    from a trace's registers, the compiler from a layer's alpha, beta, k and size."""

    le: np.ndarray
    lo: np.ndarray
    le_start: int = 0
    le_end: int = 0
    lo_start: int = 0
    lo_end: int = 0
    le_index_select: int = 0
    lo_index_select: int = 0
    le_index_offset: int = 0
    le_exponent: int = 1
    le_uflow_scale: int = 0
    le_uflow_shift: int = 0
    le_oflow_scale: int = 0
    le_oflow_shift: int = 0
    lo_uflow_scale: int = 0
    lo_uflow_shift: int = 0
    lo_oflow_scale: int = 0
    lo_oflow_shift: int = 0
    uflow_priority: int = 0
    oflow_priority: int = 0
    hybrid_priority: int = 0
    datin_offset: int = 0
    datin_scale: int = 1
    datin_shift: int = 0
    datout_offset: int = 0
    datout_scale: int = 1
    datout_shift: int = 0
    sqsum_bypass: int = 0
    mul_bypass: int = 0

    #: The int64 fields first, then the int16 entries, then the int32 fields (accel.h's order).
    WIDE = ("le_start", "le_end", "lo_start", "lo_end")
    FIELDS = ("le_index_select", "lo_index_select", "le_index_offset", "le_exponent",
              "le_uflow_scale", "le_uflow_shift", "le_oflow_scale", "le_oflow_shift",
              "lo_uflow_scale", "lo_uflow_shift", "lo_oflow_scale", "lo_oflow_shift",
              "uflow_priority", "oflow_priority", "hybrid_priority", "datin_offset",
              "datin_scale", "datin_shift", "datout_offset", "datout_scale", "datout_shift",
              "sqsum_bypass", "mul_bypass")

    def words(self) -> np.ndarray:
        """The struct's memory as int32 words: what the descriptor points at."""
        wide = np.asarray([int(getattr(self, f)) for f in self.WIDE], np.int64)
        entries = _int16_tables(self, (("le", lib.ACCEL_LUT_LE_ENTRIES),
                                       ("lo", lib.ACCEL_LUT_LO_ENTRIES)), "cdp")
        fields = [integer(getattr(self, f), f"cdp {f}") for f in self.FIELDS]
        return np.concatenate([wide.view(np.int32), entries.view(np.int32),
                               np.asarray(fields, np.int32)])


@dataclasses.dataclass
class Sdp:
    """SDP engine: ``act(ew(x * scale[c] + shift[c], operand))``.

    fp32 / fp16 use ``scale``, ``shift``, ``prelu_slope`` (arrays in the precision) and ``clip``
    (float bounds, default (0, 6)). INT8 uses the integer converters of accel.h instead:
    ``bias`` (int32), ``mul`` (int16), ``rshift`` (uint8, 0..62) per channel; ``in_zero`` (an
    input read from memory); the element-wise operand's ``ew_zero``, ``ew_mul`` (default 1),
    ``ew_shift``; PReLU's ``prelu_mul`` (int16 per channel) and ``prelu_shift``; the output
    converter ``out_mul`` (0: identity), ``out_shift``, ``out_zero``; CLIP's ``clip_lo`` /
    ``clip_hi`` in output codes (default -128 / 127; refused with another ``act``); a LUT
    activation's tables ``lut`` (:class:`LutInt8`).

    ``convert=True`` (alone in its run, nothing else set): an INT8 SDP writes FP16, an FP16 SDP
    writes INT8, with ``cvt_scale`` / ``cvt_zero`` the INT8 side's quantisation (accel.h).

    ``ew_per_channel=True``: the element-wise ``operand`` holds one value per image and channel
    ([N, C] or [N, C, 1, 1]), read for every position (squeeze-excite's ``x * s``).

    ``x1_alu``, ``x1_mul``, ``x2_alu``, ``x2_mul`` (fp32 / fp16): NVDLA's X units' operands
    read from memory (accel.h's accel_sdp_x), applied first:
    ``t = ((x + x1_alu) * x1_mul + x2_alu) * x2_mul``, each the op's shape, or [C] when its
    name is in ``x_per_channel``.
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
    lut: Optional[LutInt8] = None
    convert: bool = False
    cvt_scale: float = 0.0
    cvt_zero: int = 0
    ew_per_channel: bool = False
    x1_alu: Optional[np.ndarray] = None
    x1_mul: Optional[np.ndarray] = None
    x2_alu: Optional[np.ndarray] = None
    x2_mul: Optional[np.ndarray] = None
    x_per_channel: Sequence[str] = ()

    sram: Sequence[str] = ()  # memory streams in the secondary memory: SRAM_STREAMS

    engine = "SDP"

    @property
    def output_precision(self) -> str:
        """The precision this op writes: its own, or the other one when it converts."""
        if not self.convert:
            return self.precision
        return "fp16" if self.precision == "int8" else "int8"

    @property
    def int8_converters(self) -> dict:
        """The INT8 scalar converter fields with their defaults resolved."""
        defaults = dict(ew_mul=1, clip_lo=-128, clip_hi=127)
        values = {field: getattr(self, field) for field in _SDP_CONVERTER_FIELDS}
        return {field: integer(defaults.get(field, value) if value is None else value,
                               f"sdp {field}") for field, value in values.items()}

    @property
    def clip_bounds(self) -> Tuple[float, float]:
        """The float CLIP bounds (fp32 / fp16)."""
        if self.clip is None:
            return DEFAULT_CLIP
        low, high = _entries(self.clip, "sdp clip", (2,))
        return real(low, "sdp clip[0]"), real(high, "sdp clip[1]")

    def lower(self, c_op) -> None:
        ew_op = ELEMENTWISE.code(self.ew_op, "sdp ew_op")
        act = ACTIVATIONS.code(self.act, "sdp act")
        int8 = self.precision == "int8"
        data_dtype = dtype_for(self.precision)
        for field, dtype in _SDP_CHANNEL_FIELDS.items():
            if dtype is None:  # float parameters: an INT8 SDP gets them as fp32, and C refuses
                dtype = np.float32 if int8 else data_dtype
            setattr(self, field, _operand(getattr(self, field), dtype, f"sdp {field}", True))
        self.operand = _operand(self.operand, data_dtype, "sdp operand")
        per_channel = self.x_per_channel_fields()
        for field in X_FIELDS:
            setattr(self, field, _operand(getattr(self, field), data_dtype, f"sdp {field}",
                                          field in per_channel))
        c_op.engine = ENGINES.code(self.engine)
        d = c_op.sdp
        d.scale, d.shift = _pointer(self.scale), _pointer(self.shift)
        d.ew_op = ew_op
        d.ew_operand = _pointer(self.operand)
        d.act = act
        d.prelu_slope = _pointer(self.prelu_slope)
        d.precision = precision_code(self.precision)
        d.bias, d.mul = _pointer(self.bias), _pointer(self.mul)
        d.rshift, d.prelu_mul = _pointer(self.rshift), _pointer(self.prelu_mul)
        if self.lut is not None and self.lut is not SHAPE_ONLY:
            if not isinstance(self.lut, LutInt8):
                raise AccelDtypeError(f"sdp lut = {self.lut!r} is not a LutInt8")
            self._lut_words = self.lut.words()  # kept alive with the op
            d.lut = ffi.cast("accel_lut_int8*", self._lut_words.ctypes.data)
        else:
            d.lut = _pointer(self.lut)
        d.convert = 1 if flag(self.convert, "sdp convert") else 0
        d.cvt_scale = real(self.cvt_scale, "sdp cvt_scale")
        d.cvt_zero = integer(self.cvt_zero, "sdp cvt_zero")
        d.ew_per_channel = 1 if flag(self.ew_per_channel, "sdp ew_per_channel") else 0
        for field in X_FIELDS:  # all four: a field not given is NULL
            unit, part = getattr(d, field[:2]), field[3:]
            setattr(unit, part, _pointer(getattr(self, field)))
            setattr(unit, f"{part}_per_channel", int(field in per_channel))
        if int8 and not self.convert:
            if self.clip is not None:
                raise AccelInvalidError(
                    f"sdp clip = {self.clip!r} holds float bounds; an INT8 SDP clips its "
                    "output codes to clip_lo / clip_hi")
            given = {f: getattr(self, f) for f in ("clip_lo", "clip_hi")
                     if getattr(self, f) is not None}
            if given and self.act != "clip":  # C reads them for CLIP only: never ignore them
                raise AccelInvalidError(
                    "sdp " + ", ".join(f"{f} = {v!r}" for f, v in given.items()) +
                    f": the INT8 clip bounds are read by act = 'clip' only, not {self.act!r}")
            d.clip_min = d.clip_max = 0.0
            for field, value in self.int8_converters.items():
                setattr(d, field, value)
        else:
            d.clip_min, d.clip_max = self.clip_bounds
            # Outside INT8 the converters must be 0: pass what was given, so C names it.
            for field in _SDP_CONVERTER_FIELDS:
                value = getattr(self, field)
                setattr(d, field, 0 if value is None else integer(value, f"sdp {field}"))

    def x_per_channel_fields(self) -> frozenset:
        """The X unit operands given per channel (``x_per_channel``, checked)."""
        names = self.x_per_channel
        if isinstance(names, str):
            names = (names,)
        if not isinstance(names, (tuple, list, set, frozenset)):
            raise AccelInvalidError(f"sdp x_per_channel = {names!r} is not a sequence of "
                                    f"names of {list(X_FIELDS)}")
        for name in names:
            if name not in X_FIELDS:
                raise AccelInvalidError(f"sdp x_per_channel names {name!r}, not one of "
                                        f"{list(X_FIELDS)}")
        return frozenset(names)

    @property
    def has_x_units(self) -> bool:
        """Whether any X unit operand is set."""
        return any(getattr(self, field) is not None for field in X_FIELDS)

    def check_sizes(self, in_shape: Tuple[int, int, int, int], layout: str = "nchw") -> None:
        """The C side reads its operands through raw pointers: check their sizes against the
        NCHW shape the op sees, so it never reads past them."""
        for field in _SDP_CHANNEL_FIELDS:
            value = getattr(self, field)
            if isinstance(value, np.ndarray) and value.size != in_shape[1]:
                raise AccelInvalidError(
                    f"sdp {field} has {value.size} values for {in_shape[1]} channels")
        per_channel = self.x_per_channel_fields()
        for field in X_FIELDS:
            value = getattr(self, field)
            if not isinstance(value, np.ndarray):
                continue
            if field in per_channel:
                if value.size != in_shape[1]:
                    raise AccelInvalidError(f"sdp {field} (per channel) has {value.size} "
                                            f"values for {in_shape[1]} channels")
            elif value.shape != tuple(in_shape) and not (
                    in_shape[2:] == (1, 1) and value.shape == tuple(in_shape[:2])):
                raise AccelInvalidError(f"sdp {field} of shape {value.shape} does not match "
                                        f"the op's shape {tuple(in_shape)}")
        if isinstance(self.operand, np.ndarray):
            shapes = [tuple(in_shape)]
            if self.ew_per_channel:
                shapes = [tuple(in_shape[:2]), (*in_shape[:2], 1, 1)]
            elif layout == "c16":  # the run's layout (accel_layout)
                shapes = [c16_shape(in_shape)]
            elif in_shape[2:] == (1, 1):
                shapes.append(tuple(in_shape[:2]))  # [N, C] data
            if self.operand.shape not in shapes:
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

    sram: Sequence[str] = ()  # memory streams in the secondary memory: SRAM_STREAMS

    engine = "PDP"

    def lower(self, c_op) -> None:
        pool = POOLS.code(self.kind)
        c_op.engine = ENGINES.code(self.engine)
        d = c_op.pdp
        d.pool = pool
        d.kernel_h, d.kernel_w = _pair(self.kernel, "pool kernel")
        d.stride_h, d.stride_w = _pair(self.stride, "pool stride")
        d.pad_top, d.pad_left, d.pad_bottom, d.pad_right = _padding(self.padding, "pool padding")
        d.count_include_pad = int(flag(self.count_include_pad, "pool count_include_pad"))
        d.precision = precision_code(self.precision)
        d.zero = integer(self.zero, "pool zero")

    def check_sizes(self, in_shape: Tuple[int, int, int, int], layout: str = "nchw") -> None:
        """Pooling reads nothing but its input."""


@dataclasses.dataclass
class Lrn:
    """CDP engine: local response normalisation across channels, PyTorch's
    ``LocalResponseNorm(size, alpha, beta, k)``: ``x / (k + alpha / size * S)^beta`` with S the
    sum of squares over ``size`` neighbouring channels. ``size`` is 3, 5, 7 or 9 (NVDLA's
    CDP); fp32 and fp16. int8 is NVDLA's CDP with the registers and tables of ``int8``
    (:class:`CdpInt8`; alpha, beta and k are then not read). The CDP reads and writes memory: a
    fused run holds it alone, an independent chain anywhere."""

    size: int = 5
    alpha: float = 1e-4
    beta: float = 0.75
    k: float = 1.0
    precision: str = "fp32"
    int8: Optional[CdpInt8] = None

    sram: Sequence[str] = ()  # memory streams in the secondary memory: SRAM_STREAMS

    engine = "CDP"

    def lower(self, c_op) -> None:
        c_op.engine = ENGINES.code(self.engine)
        d = c_op.cdp
        d.local_size = integer(self.size, "lrn size")
        d.alpha = real(self.alpha, "lrn alpha")
        d.beta = real(self.beta, "lrn beta")
        d.k = real(self.k, "lrn k")
        d.precision = precision_code(self.precision)
        if self.int8 is not None and self.int8 is not SHAPE_ONLY:
            if not isinstance(self.int8, CdpInt8):
                raise AccelDtypeError(f"lrn int8 = {self.int8!r} is not a CdpInt8")
            self._int8_words = self.int8.words()  # kept alive with the op
            d.int8 = ffi.cast("accel_cdp_int8*", self._int8_words.ctypes.data)
        else:
            d.int8 = _pointer(self.int8)

    def check_sizes(self, in_shape: Tuple[int, int, int, int], layout: str = "nchw") -> None:
        """Normalisation reads nothing but its input."""


@dataclasses.dataclass
class Bdma:
    """BDMA engine: a strided copy of channels, bit for bit, in any precision the simulator
    runs, repeated ``repeat + 1`` times (NVDLA's second repeat level)::

        out[:, dst_offset + r*dst_repeat_stride + i*dst_stride] =
            x[:, src_offset + r*src_repeat_stride + i*src_stride]   for r <= repeat, i < channels

    The output has ``dst_channels`` channels (default: just enough for the last one written)
    and the input's n, h, w; its other channels are left as they are, so several runs into
    one ``Device.run(..., out=)`` fill it: a concat is one run per input, a split one run per
    part, a channel shuffle of g groups g runs with ``dst_stride=g``, a transpose of R x S
    one-element channels one run (``channels=S, dst_stride=R, repeat=R-1,
    src_repeat_stride=S, dst_repeat_stride=1``). No channel may be written twice (accel.h).
    A BDMA op runs alone in its chain."""

    channels: int
    src_offset: int = 0
    src_stride: int = 1
    dst_offset: int = 0
    dst_stride: int = 1
    dst_channels: Optional[int] = None
    precision: str = "fp32"
    repeat: int = 0
    src_repeat_stride: int = 0
    dst_repeat_stride: int = 0

    sram: Sequence[str] = ()  # memory streams in the secondary memory: SRAM_STREAMS

    engine = "BDMA"

    #: The fields and their lower bounds (the upper one is int32's).
    _FIELDS = (("channels", 1), ("src_offset", 0), ("src_stride", 1), ("dst_offset", 0),
               ("dst_stride", 1), ("repeat", 0), ("src_repeat_stride", 0),
               ("dst_repeat_stride", 0))

    @property
    def output_channels(self) -> int:
        """``dst_channels``, or the default: the last channel written, plus one."""
        values = {field: integer(getattr(self, field), f"bdma {field}", lo)
                  for field, lo in self._FIELDS}
        if self.dst_channels is not None:
            return integer(self.dst_channels, "bdma dst_channels", 1)
        needed = values["dst_offset"] + values["repeat"] * values["dst_repeat_stride"] + \
            (values["channels"] - 1) * values["dst_stride"] + 1
        return integer(needed, "bdma dst_channels (dst_offset + repeat * dst_repeat_stride + "
                       "(channels - 1) * dst_stride + 1)", 1)

    def lower(self, c_op) -> None:
        c_op.engine = ENGINES.code(self.engine)
        d = c_op.bdma
        for field, lo in self._FIELDS:
            setattr(d, field, integer(getattr(self, field), f"bdma {field}", lo))
        d.dst_channels = self.output_channels
        d.precision = precision_code(self.precision)

    def check_sizes(self, in_shape: Tuple[int, int, int, int], layout: str = "nchw") -> None:
        """A copy reads nothing but its input (its ranges are checked by the C library)."""


@dataclasses.dataclass
class Rubik:
    """RUBIK engine, contract mode (NVDLA's second hardware layer of a deconvolution): the
    ``stride_x * stride_y`` channel groups of the input, phase-major, rearranged into
    ``stride_y x stride_x`` blocks of pixels, bit for bit, in any precision the simulator runs::

        out[n, c, y*stride_y + a, x*stride_x + b] = x[n, (a*stride_x + b)*C' + c, y, x]

    with ``C' = C / (stride_x * stride_y)``: input (n, C, H, W), output (n, C', H*stride_y,
    W*stride_x). Phase-major (group ``a*stride_x + b`` is one phase), unlike PyTorch's
    ``pixel_shuffle``, which puts the channel outermost. A RUBIK op runs alone in its chain,
    memory to memory. ``mode`` "split" and "merge" are NVDLA's other modes (memory formats
    only): the C library refuses them. Needs the "rubik" feature (nv_small has none)."""

    stride_x: int = 2
    stride_y: int = 2
    mode: str = "contract"
    precision: str = "fp32"

    sram: Sequence[str] = ()  # memory streams in the secondary memory: SRAM_STREAMS

    engine = "RUBIK"

    def lower(self, c_op) -> None:
        c_op.engine = ENGINES.code(self.engine)
        d = c_op.rubik
        d.mode = RUBIK_MODES.code(self.mode)
        d.stride_x = integer(self.stride_x, "rubik stride_x")
        d.stride_y = integer(self.stride_y, "rubik stride_y")
        d.precision = precision_code(self.precision)

    def check_sizes(self, in_shape: Tuple[int, int, int, int], layout: str = "nchw") -> None:
        """A contract reads nothing but its input (its shapes are checked by the C library)."""


def has_data(op) -> bool:
    """Whether every operand of an op holds data (estimates accept shape-only operands)."""
    if isinstance(op, Conv):
        return op.weights is not None
    if isinstance(op, Sdp):
        return all(getattr(op, f) is not SHAPE_ONLY
                   for f in (*_SDP_CHANNEL_FIELDS, "operand", "lut"))
    return True


Op = Conv | Sdp | Pool | Lrn | Bdma | Rubik
#: Every engine op class (a chain holds instances of these).
OP_CLASSES = (Conv, Sdp, Pool, Lrn, Bdma, Rubik)
