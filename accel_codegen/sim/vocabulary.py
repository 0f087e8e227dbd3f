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
from typing import Dict, Iterator, Optional, Tuple

from .._accel_ffi import lib
from ..errors import AccelInvalidError


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

ACTIVATIONS = Table("accel_activation", "act", "ACCEL_ACT_COUNT", (
    Entry(None, "ACCEL_ACT_NONE"),
    Entry("relu", "ACCEL_ACT_RELU", "relax.nn.relu"),
    Entry("clip", "ACCEL_ACT_CLIP", "relax.clip", relax_args=2),      # the bounds
    Entry("prelu", "ACCEL_ACT_PRELU", "relax.nn.prelu", relax_args=1),  # the slopes
    Entry("sigmoid", "ACCEL_ACT_SIGMOID", "relax.sigmoid", feature="lut"),
    Entry("tanh", "ACCEL_ACT_TANH", "relax.tanh", feature="lut"),
    Entry("silu", "ACCEL_ACT_SILU", "relax.nn.silu", feature="lut"),
    # No Relax op: the compiler recognises their decomposed forms.
    Entry("hardswish", "ACCEL_ACT_HARDSWISH", feature="lut"),
    Entry("hardsigmoid", "ACCEL_ACT_HARDSIGMOID", feature="lut"),
    Entry("gelu", "ACCEL_ACT_GELU", "relax.nn.gelu", feature="lut"),
    Entry("exp", "ACCEL_ACT_EXP", "relax.exp", feature="lut"),
    # No Relax op: layer norm's and softmax's decompositions use them (sim/decompose.py);
    # relax.rsqrt is not mapped to rsqrt because the FP16 LUT answers LE[0], not NaN, for
    # t <= 0 (accel.h), a different answer where the Relax op's input may be negative.
    # int8=False: the INT8 engine runs any tables it is given, but the compiler builds none
    # for them (quantization/lut.py): their pole at 0 needs more range than one int8 scale
    # and a linear table give, so int8 builds keep these passes in FP16.
    Entry("rsqrt", "ACCEL_ACT_RSQRT", feature="lut", int8=False),
    Entry("reciprocal", "ACCEL_ACT_RECIPROCAL", feature="lut", int8=False),
    Entry("gelu_tanh", "ACCEL_ACT_GELU_TANH", "relax.nn.gelu_tanh", feature="lut"),
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
