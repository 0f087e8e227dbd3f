"""Hardware configurations: the presets come from the C library, the one source of truth.

>>> cfg = AccelConfig.preset("nv_full")
>>> small_dram = cfg.replace(dram_bytes_per_s=5e9)
"""
from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any, Optional

from .._accel_ffi import ffi, lib
from ..errors import AccelInvalidError, AccelUnsupportedError, check
from .vocabulary import FEATURES
from .vocabulary import PRECISIONS as PRECISION_TABLE

PRECISIONS = tuple(PRECISION_TABLE.names)


class Precision(str, enum.Enum):
    """A precision of accel.h's ``accel_precision`` (the vocabulary's ``PRECISIONS`` rows, in
    the C enum's order: a test holds the three together). String-valued, so a Precision
    equals its name (``Precision.INT8 == "int8"``), prints as it and serialises as it."""

    INT8 = "int8"
    INT16 = "int16"
    FP16 = "fp16"
    FP32 = "fp32"

    __str__ = str.__str__
    __format__ = str.__format__

    @property
    def code(self) -> int:
        """The C enum value (``ACCEL_INT8`` ...)."""
        return PRECISION_TABLE.code(self.value)

    @classmethod
    def of(cls, name) -> "Precision":
        """The precision named ``name`` (a Precision or its name); AccelInvalidError for any
        other value."""
        try:
            return cls(name)
        except ValueError:
            raise AccelInvalidError(f"unknown precision {name!r} (known: "
                                    f"{', '.join(PRECISIONS)})") from None
_PRECISION_CODES = {entry.name: entry.value for entry in PRECISION_TABLE}
_FEATURES = {name: getattr(lib, c_name) for name, c_name in FEATURES.items()}
#: fp32 is the simulator's reference precision: every configuration accepts it, and the cost
#: model charges it as fp16. ``AccelConfig.precisions`` lists the hardware's own precisions.
REFERENCE_PRECISION = "fp32"


#: The precisions the code generator emits (and the estimator costs); int16 is not emitted.
GENERATED_PRECISIONS = ("fp32", "fp16", "int8")


def check_precision(config: "AccelConfig", precision: str) -> None:
    """Raise unless ``precision`` is known, the configuration has it, and code is generated
    for it (AccelInvalidError for an unknown name, AccelUnsupportedError otherwise)."""
    if precision not in PRECISIONS:
        raise AccelInvalidError(f"unknown precision {precision!r} (known: {', '.join(PRECISIONS)})")
    if not config.supports(precision):
        raise AccelUnsupportedError(
            f"configuration {config.name} has no {precision} (its precisions: "
            f"{', '.join((REFERENCE_PRECISION,) + tuple(config.precisions))})")
    if precision not in GENERATED_PRECISIONS:
        raise AccelUnsupportedError(
            f"precision {precision!r}: the code generator emits "
            f"{', '.join(GENERATED_PRECISIONS)} only")


def _check_known(fields: dict) -> None:
    """Every key must name a config field."""
    known = {f.name for f in dataclasses.fields(AccelConfig)}
    unknown = sorted(map(str, set(fields) - known))
    if unknown:
        raise AccelInvalidError(f"unknown config fields {unknown} (known: {sorted(known)})")


def precision_code(name: str) -> int:
    """The C enum value of a precision name ("int8", "int16", "fp16", "fp32")."""
    if name not in PRECISION_TABLE:
        raise AccelInvalidError(f"unknown precision {name!r} (known: {', '.join(PRECISIONS)})")
    return PRECISION_TABLE.code(name)


def precision_name(code: int) -> str:
    return PRECISION_TABLE.name_of(code)


@dataclasses.dataclass(frozen=True)
class AccelConfig:
    """An NVDLA-like hardware configuration.

    Parameters
    ----------
    name : str
        A label for reports.
    atomic_c, atomic_k : int
        MAC array size: input channels consumed and int8 output channels produced per cycle
        (16-bit data halves ``atomic_k``).
    cbuf_bytes : int
        Convolution buffer capacity (input and weights together).
    memory_atom_bytes : int
        Smallest memory access; every feature position pads its channels to it.
    sdp_throughput, sdp_ew_throughput, pdp_throughput, cdp_throughput : int
        Elements per cycle of the SDP scale/shift unit, the SDP element-wise/LUT unit, the PDP,
        the CDP.
    clock_hz, dram_bytes_per_s : float
        Engine clock and memory bandwidth.
    precisions : tuple of str
        Hardware precisions among "int8", "int16", "fp16".
    features : tuple of str
        Optional units among "lut", "elementwise", "winograd", "rubik", "cdp", "bdma",
        "weight_compression".
    mac_int8_pj, mac_fp16_pj : float
        Energy of one MAC in picojoules (fp32 and int16 are charged the fp16 figure).
    cbuf_read_pj_per_byte, cbuf_write_pj_per_byte, dram_pj_per_byte, sram_pj_per_byte : float
        Energy per byte of CBUF reads and writes, DRAM traffic, on-chip SRAM traffic.
    sdp_pj_per_element, pdp_pj_per_element, cdp_pj_per_element : float
        Energy per element an engine processes. The presets' energies (accel.h and config.c
        give their source); a field left out here is 0: that action is not charged.
    cbuf_banks : int
        CBUF banks (``cbuf_bytes`` divides into them); a convolution splits them between its
        input data and its weights.
    dram_burst_bytes, dram_latency_cycles, dram_turnaround_cycles
        DRAM efficiency: the smallest transfer (streams round up to it), the read latency a run
        waits once, the cycles lost per burst written (read/write turnaround, amortised).
    sram_bytes, sram_bytes_per_s
        The on-chip SRAM behind NVDLA's secondary memory interface (0: none) and its bandwidth.
    dram_read_request_cycles : int
        Cycles between two read requests the memory accepts (one burst each): reads move at
        most ``dram_burst_bytes`` per this many cycles (0: no limit beyond the bandwidth).
    cmac_weight_load_cycles : int
        Cycles to load one atomic-C x atomic-K weight block into the MAC cells; a stripe of
        fewer output positions waits for it.
    conv_pipeline_cycles, sdp_pipeline_cycles, pdp_pipeline_cycles, cdp_pipeline_cycles : int
        Fixed cycles per layer and engine (programming, pipeline fill and drain, the last
        write's latency); a fused run pays the sum of its engines'. These six are calibrated
        against NVDLA's nv_small RTL (runtime/src/config.c says from which trace tests;
        docs/nvdla_rtl.md).
    rubik_bytes_per_cycle : int
        Bytes the RUBIK engine reads (and writes) per cycle (config.c gives the figure's source).

    The fields after the energy figures default to the nv_full preset's (a config written
    before they existed reads as it did, with nv_full's memory system); the energy figures
    default to 0 (uncharged).
    """

    name: str
    atomic_c: int
    atomic_k: int
    cbuf_bytes: int
    memory_atom_bytes: int
    sdp_throughput: int
    sdp_ew_throughput: int
    pdp_throughput: int
    cdp_throughput: int
    clock_hz: float
    dram_bytes_per_s: float
    precisions: tuple = ("int8",)
    features: tuple = ()
    mac_int8_pj: float = 0.0
    mac_fp16_pj: float = 0.0
    cbuf_read_pj_per_byte: float = 0.0
    cbuf_write_pj_per_byte: float = 0.0
    dram_pj_per_byte: float = 0.0
    sram_pj_per_byte: float = 0.0
    sdp_pj_per_element: float = 0.0
    pdp_pj_per_element: float = 0.0
    cdp_pj_per_element: float = 0.0
    cbuf_banks: Optional[int] = None
    dram_burst_bytes: Optional[int] = None
    dram_latency_cycles: Optional[int] = None
    dram_turnaround_cycles: Optional[float] = None
    sram_bytes: Optional[int] = None
    sram_bytes_per_s: Optional[float] = None
    dram_read_request_cycles: Optional[int] = None
    cmac_weight_load_cycles: Optional[int] = None
    conv_pipeline_cycles: Optional[int] = None
    sdp_pipeline_cycles: Optional[int] = None
    pdp_pipeline_cycles: Optional[int] = None
    cdp_pipeline_cycles: Optional[int] = None
    rubik_bytes_per_cycle: Optional[int] = None

    def __post_init__(self) -> None:
        # the fields defaulting to None (memory system, ABI 5; RTL-calibrated, ABI 8; RUBIK,
        # ABI 9) left out take nv_full's values
        memory_fields = [f.name for f in dataclasses.fields(self)
                         if f.default is None and getattr(self, f.name) is None]
        if memory_fields:  # from the C preset, the one copy of its figures
            preset = ffi.new("accel_config*")
            check(lib.accel_config_preset(b"nv_full", preset))
            for name in memory_fields:
                object.__setattr__(self, name, getattr(preset, name))
        for field in ("precisions", "features"):
            value = getattr(self, field)
            if not isinstance(value, (tuple, list)):
                raise AccelInvalidError(
                    f"config {self.name!r}: {field} = {value!r} must be a list of names")
            object.__setattr__(self, field, tuple(value))
        check(lib.accel_config_validate(self.to_c()))

    @classmethod
    def preset(cls, name: str) -> "AccelConfig":
        """The named preset: "nv_small", "nv_large" or "nv_full"."""
        c_config = ffi.new("accel_config*")
        check(lib.accel_config_preset(str(name).encode(), c_config))
        return cls.from_c(c_config)

    @staticmethod
    def preset_names() -> list[str]:
        return [ffi.string(lib.accel_preset_name(i)).decode()
                for i in range(lib.accel_num_presets())]

    @classmethod
    def resolve(cls, config: "AccelConfig | str") -> "AccelConfig":
        """Accept a config or a preset name, as every public entry point does."""
        return config if isinstance(config, AccelConfig) else cls.preset(config)

    def replace(self, **changes: Any) -> "AccelConfig":
        """A copy with some fields changed (validated like any config)."""
        _check_known(changes)
        return dataclasses.replace(self, **changes)

    def macs_per_cycle(self, precision: str = REFERENCE_PRECISION) -> int:
        """MACs the array performs per cycle at a precision (16-bit data halves atomic K)."""
        return int(lib.accel_config_macs_per_cycle(self.to_c(), precision_code(precision)))

    def supports(self, precision: str) -> bool:
        return precision == REFERENCE_PRECISION or precision in self.precisions

    # --- conversions ------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) if not isinstance(getattr(self, f.name), tuple)
                else list(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: dict) -> "AccelConfig":
        """A config from a dict; with "base": a preset name, the other keys override it."""
        if not isinstance(data, dict):
            raise AccelInvalidError(f"a config is a JSON object (a dict), got {data!r:.80}")
        data = dict(data)
        base = data.pop("base", None)
        _check_known(data)
        if base is not None:
            if not isinstance(base, str):
                raise AccelInvalidError(f"config base = {base!r} is not a preset name")
            return cls.preset(base).replace(**data)
        missing = sorted(f.name for f in dataclasses.fields(cls)
                         if f.default is dataclasses.MISSING and f.name not in data)
        if missing:
            raise AccelInvalidError(f"config is missing fields {missing}")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> "AccelConfig":
        try:
            data = json.loads(text)
        except (ValueError, TypeError, RecursionError) as error:
            raise AccelInvalidError(f"config JSON does not parse: {error}") from None
        return cls.from_dict(data)

    # The C struct's fields, by kind: the schema lives in accel.h once (a test checks that
    # every C field is a dataclass field and the other way round).
    _FLAGS = {"precisions": (_PRECISION_CODES, "precision"), "features": (_FEATURES, "feature")}

    def to_c(self):
        """The config as a C ``accel_config*`` (every field type-checked and named), a new
        struct each call; the fields are converted once (the config is frozen) and copied
        after: the partitioner's checks ask for it once per chain."""
        c_config = ffi.new("accel_config*")
        converted = self.__dict__.get("_c_bytes")
        if converted is not None:
            ffi.memmove(c_config, converted, len(converted))
            return c_config
        self._convert(c_config)
        object.__setattr__(self, "_c_bytes", bytes(ffi.buffer(c_config)))
        return c_config

    def _convert(self, c_config) -> None:
        for name, field in ffi.typeof("accel_config").fields:
            value = getattr(self, name)
            if name in self._FLAGS:
                setattr(c_config, name, self._flag_bits(name, value))
            elif field.type.kind == "array":  # the name
                if not isinstance(value, str):
                    raise AccelInvalidError(f"config {name} = {value!r} is not a string")
                if len(value.encode()) >= field.type.length:
                    raise AccelInvalidError(f"config {name} {value!r} is longer than "
                                            f"{field.type.length - 1} bytes")
                setattr(c_config, name, value.encode())
            elif field.type.cname == "double":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                        isinstance(value, int) and abs(value) > 2**1000):
                    raise AccelInvalidError(
                        f"config {self.name}: {name} = {value!r} is not a number")
                setattr(c_config, name, float(value))
            else:
                if not isinstance(value, int) or isinstance(value, bool):
                    raise AccelInvalidError(
                        f"config {self.name}: {name} = {value!r} is not an int")
                bits = 8 * ffi.sizeof(field.type)
                if not -2**(bits - 1) <= value < 2**(bits - 1):
                    raise AccelInvalidError(f"config {self.name}: {name} = {value} overflows")
                setattr(c_config, name, value)

    def _flag_bits(self, field: str, names) -> int:
        codes, what = self._FLAGS[field]
        bits = 0
        for name in names:
            if not isinstance(name, str) or name not in codes or name == REFERENCE_PRECISION:
                known = ", ".join(n for n in codes if n != REFERENCE_PRECISION)
                raise AccelInvalidError(
                    f"config {self.name}: {what} {name!r} is not one of {known}")
            bits |= (1 << codes[name]) if field == "precisions" else codes[name]
        return bits

    @classmethod
    def from_c(cls, c_config) -> "AccelConfig":
        values = {}
        for name, field in ffi.typeof("accel_config").fields:
            value = getattr(c_config, name)
            if name in cls._FLAGS:
                codes = cls._FLAGS[name][0]
                value = tuple(n for n, code in codes.items() if n != REFERENCE_PRECISION and
                              value & ((1 << code) if name == "precisions" else code))
            elif field.type.kind == "array":
                value = ffi.string(value).decode()
            values[name] = value
        return cls(**values)


#: The per-action energies of a configuration (picojoules; accel.h's accel_config): the fields
#: named ``*_pj`` and ``*_pj_per_<unit>``.
ENERGY_FIELDS = tuple(f.name for f in dataclasses.fields(AccelConfig) if "_pj" in f.name)
