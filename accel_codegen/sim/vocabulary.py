"""The op vocabulary: one row for each value of each enum in ``accel/accel.h``.

The C header is the ISA; this table is its only Python copy, and everything else reads it: the
descriptors (``ops.py``) turn names into C values, the compiler maps Relax ops to names
(``lowering.py``, ``patterns.py``) and the code generator spells the C enumerators. A test
checks that every C enumerator (up to the ``_COUNT`` sentinel) has exactly one row here.

>>> ACTIVATIONS.code("relu")
1
>>> ACTIVATIONS["sigmoid"].relax_op, ACTIVATIONS["sigmoid"].feature
('relax.sigmoid', 'lut')
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Dict, Iterator, Optional, Tuple

import numpy as np

from .._accel_ffi import ffi, lib
from ..errors import AccelInvalidError, check
from .lut_math import (exp_f32, gelu64, gelu_f32, gelu_tanh64, log64, mish64, mish_f32,
                       softplus64, tanh_f32)


@dataclasses.dataclass(frozen=True)
class Entry:
    """One enumerator: its name in descriptors and reports, and what the compiler needs."""

    name: Optional[str]             # "relu"; None for the enum's NONE value
    c_name: str                     # "ACCEL_ACT_RELU", as generated C spells it
    relax_op: Optional[str] = None  # the Relax op offloaded as it, if any
    feature: Optional[str] = None   # the optional hardware unit it needs (AccelConfig.features)
    int8: bool = True               # whether the engine has an INT8 form of it
    relax_args: int = 0             # the Relax op's arguments besides the data
    # The Relax op's attributes the engine computes, each with the one value it computes
    # (("beta", 1.0),): an attribute the compiler neither reads nor finds here keeps the op on
    # the host (compiler/lowering.py ``check_attributes``).
    relax_attrs: Tuple[Tuple[str, object], ...] = ()
    # A LUT activation's NumPy reference (sim/reference.py reads them), written apart from the
    # C (csrc/lut.c): ``exact``, the FP32 SDP's float32 result in the C's operation order;
    # ``function64``, the float64 function its tables are built from.
    exact: Optional[Callable[[np.ndarray], np.ndarray]] = dataclasses.field(
        default=None, compare=False, repr=False)
    function64: Optional[Callable[[np.ndarray], np.ndarray]] = dataclasses.field(
        default=None, compare=False, repr=False)

    @property
    def value(self) -> int:
        """The C enum value, read from the compiled header."""
        return getattr(lib, self.c_name)


class Table:
    """The rows of one C enum, looked up by name (``table["relu"]``) or by Relax op."""

    def __init__(self, c_type: str, what: str, sentinel: str, entries: Tuple[Entry, ...]):
        self.c_type = c_type      # the C enum type, e.g. "accel_activation"
        self.what = what          # how error messages name a field of this type
        self.sentinel = sentinel  # the enum's last enumerator, the count of the others
        self.entries = entries
        self._by_name = {e.name: e for e in entries}
        self.by_relax_op: Dict[str, Entry] = {e.relax_op: e for e in entries if e.relax_op}

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries)

    def __contains__(self, name) -> bool:
        return (name is None or isinstance(name, str)) and name in self._by_name

    def __getitem__(self, name: Optional[str]) -> Entry:
        if name not in self:
            raise AccelInvalidError(f"{self.what} = {name!r} is not one of {self.names}")
        return self._by_name[name]

    @property
    def names(self) -> list:
        return [e.name for e in self.entries]

    def code(self, name: Optional[str], what: Optional[str] = None) -> int:
        """The C value of a name; an unknown name (or a non-string) raises AccelInvalidError
        naming ``what`` (default: the table's own field name)."""
        if name not in self:
            raise AccelInvalidError(f"{what or self.what} = {name!r} is not one of {self.names}")
        return self._by_name[name].value

    def name_of(self, value: int) -> Optional[str]:
        """The name of a C value."""
        for entry in self.entries:
            if entry.value == value:
                return entry.name
        raise AccelInvalidError(f"{self.what}: {value} is not an {self.c_type} value")


ENGINES = Table("accel_engine", "engine", "ACCEL_ENGINE_COUNT", (
    Entry("CONV", "ACCEL_ENGINE_CONV"),
    Entry("SDP", "ACCEL_ENGINE_SDP"),
    Entry("PDP", "ACCEL_ENGINE_PDP"),
    Entry("CDP", "ACCEL_ENGINE_CDP"),
    Entry("BDMA", "ACCEL_ENGINE_BDMA"),
    Entry("RUBIK", "ACCEL_ENGINE_RUBIK", feature="rubik"),
))

PRECISIONS = Table("accel_precision", "precision", "ACCEL_PRECISION_COUNT", (
    Entry("int8", "ACCEL_INT8"),
    Entry("int16", "ACCEL_INT16"),
    Entry("fp16", "ACCEL_FP16"),
    Entry("fp32", "ACCEL_FP32"),
))

ELEMENTWISE = Table("accel_eltwise", "ew_op", "ACCEL_EW_COUNT", (
    Entry(None, "ACCEL_EW_NONE"),
    Entry("add", "ACCEL_EW_ADD", "relax.add", feature="elementwise", relax_args=1),
    Entry("mul", "ACCEL_EW_MUL", "relax.multiply", feature="elementwise", relax_args=1),
    Entry("max", "ACCEL_EW_MAX", "relax.maximum", feature="elementwise", relax_args=1),
    Entry("min", "ACCEL_EW_MIN", "relax.minimum", feature="elementwise", relax_args=1),
))

_ONE, _THREE, _SIX, _ZERO = np.float32(1), np.float32(3), np.float32(6), np.float32(0)


@functools.lru_cache(maxsize=None)
def _domain_start(c_name: str) -> float:
    """Where the FP16 LUT of rsqrt / reciprocal begins (its LE table's le_start)."""
    geometry = ffi.new("accel_lut*")
    check(lib.accel_lut_info(getattr(lib, c_name), geometry))
    return float(geometry.le_start)


def _in_domain(c_name: str, t: np.ndarray) -> np.ndarray:
    """rsqrt's and reciprocal's t, held to their domain: defined for t > 0, below the FP16
    table's start (0, negatives, -inf and tiny t) the value there, as the LUT answers
    (accel.h), and so the INT8 tables hold it too: a finite top (32768 for both) where IEEE
    would give inf or NaN. NaN stays."""
    return np.maximum(np.asarray(t, dtype=np.float64), _domain_start(c_name))


def _relu6_shifted64(t):
    """min(max(t + 3, 0), 6) in float64, hardswish's and hardsigmoid's (csrc/lut.c)."""
    return np.minimum(np.maximum(t + 3.0, 0.0), 6.0)


ACTIVATIONS = Table("accel_activation", "act", "ACCEL_ACT_COUNT", (
    Entry(None, "ACCEL_ACT_NONE"),
    Entry("relu", "ACCEL_ACT_RELU", "relax.nn.relu"),
    Entry("clip", "ACCEL_ACT_CLIP", "relax.clip", relax_args=2),      # the bounds
    Entry("prelu", "ACCEL_ACT_PRELU", "relax.nn.prelu", relax_args=1),  # the slopes
    # The LUT activations: exact is the FP32 SDP's float32 (sigmoid, silu and exp through
    # exp_f32, tanh through tanh_f32; GELU through gelu_f32's float32 polynomials and
    # exp_f32), function64 the float64 function of the tables (GELU's through libm's erfc, as
    # csrc/lut.c's lut_function).
    Entry("sigmoid", "ACCEL_ACT_SIGMOID", "relax.sigmoid", feature="lut",
          exact=lambda t: _ONE / (_ONE + exp_f32(-t)),  # exp(-t) = inf: 0
          function64=lambda t: 1.0 / (1.0 + np.exp(-t))),
    Entry("tanh", "ACCEL_ACT_TANH", "relax.tanh", feature="lut", exact=tanh_f32,
          function64=np.tanh),
    Entry("silu", "ACCEL_ACT_SILU", "relax.nn.silu", feature="lut",
          exact=lambda t: t / (_ONE + exp_f32(-t)),
          function64=lambda t: t / (1.0 + np.exp(-t))),
    # No Relax op: the compiler recognises their decomposed forms.
    Entry("hardswish", "ACCEL_ACT_HARDSWISH", feature="lut",
          exact=lambda t: t * np.clip(t + _THREE, _ZERO, _SIX) / _SIX,
          function64=lambda t: t * _relu6_shifted64(t) / 6.0),
    Entry("hardsigmoid", "ACCEL_ACT_HARDSIGMOID", feature="lut",
          exact=lambda t: np.clip(t + _THREE, _ZERO, _SIX) / _SIX, function64=lambda t: _relu6_shifted64(t) / 6.0),
    Entry("gelu", "ACCEL_ACT_GELU", "relax.nn.gelu", feature="lut",
          exact=gelu_f32, function64=gelu64),
    Entry("exp", "ACCEL_ACT_EXP", "relax.exp", feature="lut", exact=exp_f32,
          function64=np.exp),
    # No Relax op: layer norm's and softmax's decompositions use them (sim/decompose.py);
    # relax.rsqrt is not mapped to rsqrt because the FP16 LUT answers LE[0], not NaN, for
    # t <= 0 (accel.h), a different answer where the Relax op's input may be negative.
    # int8=False: the INT8 engine runs any tables it is given, but the compiler builds none
    # for them (quantization/lut.py): their pole at 0 needs more range than one int8 scale
    # and a linear table give, so int8 builds keep these passes in FP16.
    # exact: IEEE sqrt and division, each correctly rounded (as the C's).
    Entry("rsqrt", "ACCEL_ACT_RSQRT", feature="lut", int8=False,
          exact=lambda t: (_ONE / np.sqrt(t)).astype(np.float32),
          function64=lambda t: 1.0 / np.sqrt(_in_domain("ACCEL_ACT_RSQRT", t))),
    Entry("reciprocal", "ACCEL_ACT_RECIPROCAL", feature="lut", int8=False,
          exact=lambda t: (_ONE / t).astype(np.float32),
          function64=lambda t: 1.0 / _in_domain("ACCEL_ACT_RECIPROCAL", t)),
    Entry("gelu_tanh", "ACCEL_ACT_GELU_TANH", "relax.nn.gelu_tanh", feature="lut",
          exact=lambda t: gelu_tanh64(t).astype(np.float32),
          function64=lambda t: gelu_tanh64(t, libm=False)),
    # No Relax op: exp with a table for softmax's t - max <= 0 (attention_passes, FP16)
    Entry("softmax_exp", "ACCEL_ACT_SOFTMAX_EXP", feature="lut", int8=False, exact=exp_f32,
          function64=np.exp),
    # No Relax op: torch's decomposed form (chains.DECOMPOSED), ONNX's Mish and Softplus forms
    Entry("mish", "ACCEL_ACT_MISH", feature="lut", exact=mish_f32, function64=mish64),
    # relax.nn.softplus with PyTorch's defaults, which torch's and ONNX's formulas become
    # (compiler/rewrites.softplus_from_formula). exact: float64 through libm, rounded once
    # (as the C's)
    Entry("softplus", "ACCEL_ACT_SOFTPLUS", "relax.nn.softplus", feature="lut",
          relax_attrs=(("beta", 1.0), ("threshold", 20.0)),
          exact=lambda t: softplus64(t).astype(np.float32), function64=softplus64),
    # No Relax op: log_softmax's log of its sum (sim/decompose.py); as rsqrt and reciprocal,
    # defined for t > 0 (the FP16 table answers LE[0] below its start, not -inf or NaN), so
    # not relax.log, and no int8 tables (its pole at 0). exact: libm's log, rounded once.
    Entry("log", "ACCEL_ACT_LOG", feature="lut", int8=False,
          exact=lambda t: log64(t).astype(np.float32),
          function64=lambda t: np.log(_in_domain("ACCEL_ACT_LOG", t))),
))

POOLS = Table("accel_pool", "pool kind", "ACCEL_POOL_COUNT", (
    Entry("max", "ACCEL_POOL_MAX", "relax.nn.max_pool2d"),
    Entry("avg", "ACCEL_POOL_AVG", "relax.nn.avg_pool2d"),
))

MODES = Table("accel_mode", "mode", "ACCEL_MODE_COUNT", (
    Entry("fused", "ACCEL_MODE_FUSED"),
    Entry("independent", "ACCEL_MODE_INDEPENDENT"),
))

#: CONV input formats: feature data (None) or an image-input pixel format. ``feature`` names
#: the hardware mode; the formats' sizes and precisions are accel.h's (checked by the library).
PIXEL_FORMATS = Table("accel_pixel_format", "pixel_format", "ACCEL_PIXEL_COUNT", (
    Entry(None, "ACCEL_PIXEL_NONE"),
    Entry("r8", "ACCEL_PIXEL_R8", feature="image_input"),
    Entry("a8b8g8r8", "ACCEL_PIXEL_A8B8G8R8", feature="image_input"),
    Entry("a16b16g16r16_f", "ACCEL_PIXEL_A16B16G16R16_F", feature="image_input", int8=False),
))

#: How a tensor's elements lie in memory: NCHW, or channel-blocked [n][c/16][h][w][16] (fp32).
LAYOUTS = Table("accel_layout", "layout", "ACCEL_LAYOUT_COUNT", (
    Entry("nchw", "ACCEL_LAYOUT_NCHW"),
    Entry("c16", "ACCEL_LAYOUT_C16"),
))

CONV_MODES = Table("accel_conv_mode", "conv mode", "ACCEL_CONV_MODE_COUNT", (
    Entry("direct", "ACCEL_CONV_DIRECT"),
    Entry("winograd", "ACCEL_CONV_WINOGRAD", feature="winograd"),
))

WEIGHT_FORMATS = Table("accel_weight_format", "weight_format", "ACCEL_WEIGHT_FORMAT_COUNT", (
    Entry("dense", "ACCEL_WEIGHTS_DENSE"),
    Entry("sparse", "ACCEL_WEIGHTS_SPARSE", feature="weight_compression"),
))

#: RUBIK modes: contract (a deconvolution's depth-to-space); split and merge change only the
#: memory format, which the simulator's dense tensors lack: the C library refuses them.
RUBIK_MODES = Table("accel_rubik_mode", "rubik mode", "ACCEL_RUBIK_MODE_COUNT", (
    Entry("contract", "ACCEL_RUBIK_CONTRACT", feature="rubik"),
    Entry("split", "ACCEL_RUBIK_SPLIT", feature="rubik"),
    Entry("merge", "ACCEL_RUBIK_MERGE", feature="rubik"),
))

#: Every table, for the test that holds them to the header.
TABLES = (ENGINES, PRECISIONS, ELEMENTWISE, ACTIVATIONS, POOLS, MODES, PIXEL_FORMATS,
          CONV_MODES, WEIGHT_FORMATS, LAYOUTS, RUBIK_MODES)

#: The optional hardware units: accel_feature bits (flags, not a sequence, so no sentinel).
FEATURES = {"lut": "ACCEL_FEATURE_LUT", "elementwise": "ACCEL_FEATURE_ELEMENTWISE",
            "winograd": "ACCEL_FEATURE_WINOGRAD", "rubik": "ACCEL_FEATURE_RUBIK",
            "cdp": "ACCEL_FEATURE_CDP", "bdma": "ACCEL_FEATURE_BDMA",
            "image_input": "ACCEL_FEATURE_IMAGE_INPUT", "batch": "ACCEL_FEATURE_BATCH",
            "weight_compression": "ACCEL_FEATURE_WEIGHT_COMPRESSION"}

#: The memory streams an op may place in the secondary memory: accel_sram_stream bits.
SRAM_STREAMS = {"input": "ACCEL_SRAM_INPUT", "operand": "ACCEL_SRAM_OPERAND",
                "output": "ACCEL_SRAM_OUTPUT", "weights": "ACCEL_SRAM_WEIGHTS"}
