"""Hardware configurations: presets read from C, custom configs validated, JSON round trip."""
import json

import pytest

from accel_codegen import AccelConfig, AccelInvalidError, AccelNotFoundError, Device
from accel_codegen._accel_ffi import lib


def test_presets_come_from_the_c_library():
    assert AccelConfig.preset_names() == ["nv_small", "nv_large", "nv_full"]
    full = AccelConfig.preset("nv_full")
    assert (full.atomic_c, full.atomic_k, full.cbuf_bytes) == (64, 32, 512 * 1024)
    assert full.macs_per_cycle("int8") == 2048 and full.macs_per_cycle("fp16") == 1024
    assert set(full.precisions) == {"int8", "int16", "fp16"}
    small = AccelConfig.preset("nv_small")
    assert (small.atomic_c, small.atomic_k, small.cbuf_bytes) == (8, 8, 128 * 1024)
    # no BDMA, no multi-batch (NVDLA's nv_small.spec); the CDMA's image path is in every config
    assert small.precisions == ("int8",) and small.features == ("cdp", "image_input")
    assert "batch" in full.features and "batch" not in AccelConfig.preset("nv_large").features
    assert (small.cdp_throughput, full.cdp_throughput) == (1, 8)  # the notes: nv_small 1, PDP/CDP 8
    assert small.macs_per_cycle("int8") == 64
    assert AccelConfig.preset("nv_large").precisions == ("int8",)


def test_every_config_accepts_the_reference_precision():
    for name in AccelConfig.preset_names():
        assert AccelConfig.preset(name).supports("fp32")
    assert not AccelConfig.preset("nv_small").supports("fp16")


def test_unknown_preset():
    with pytest.raises(AccelNotFoundError, match="unknown preset 'nv_huge'"):
        AccelConfig.preset("nv_huge")


def test_replace_and_keywords():
    cfg = AccelConfig.preset("nv_full").replace(atomic_k=64, dram_bytes_per_s=5e9, name="wide")
    assert cfg.atomic_k == 64 and cfg.dram_bytes_per_s == 5e9 and cfg.name == "wide"
    custom = AccelConfig(name="mine", atomic_c=32, atomic_k=16, cbuf_bytes=256 * 1024,
                         memory_atom_bytes=32, sdp_throughput=8, sdp_ew_throughput=2,
                         pdp_throughput=4, cdp_throughput=2, clock_hz=8e8, dram_bytes_per_s=8e9,
                         precisions=("int8", "fp16"), features=("elementwise",))
    assert Device(custom).config == custom


@pytest.mark.parametrize("field,value,words", [
    ("atomic_c", 0, "atomic_c = 0"),
    ("atomic_k", -4, "atomic_k = -4"),
    ("cbuf_bytes", 10, "cbuf_bytes = 10"),
    ("memory_atom_bytes", 24, "memory_atom_bytes = 24 is not a power of two"),
    ("clock_hz", float("nan"), "clock_hz = nan"),
    ("dram_bytes_per_s", 0.0, "dram_bytes_per_s = 0"),
    ("cdp_throughput", 0, "cdp_throughput = 0"),
    ("dram_pj_per_byte", -1.0, "dram_pj_per_byte = -1 is outside [0, 1e9] pJ"),
    ("mac_int8_pj", float("inf"), "mac_int8_pj = inf"),
    ("cbuf_read_pj_per_byte", float("nan"), "cbuf_read_pj_per_byte = nan"),
    ("sdp_pj_per_element", "1", "sdp_pj_per_element = '1' is not a number"),
    ("precisions", ("int4",), "'int4'"),
    ("precisions", ("fp32",), "'fp32'"),
    ("precisions", (), "precisions = 0x0"),
    ("features", ("tensor_cores",), "'tensor_cores'"),
    ("atomic_c", 2**40, "overflows"),
    ("atomic_c", 8.5, "is not an int"),
    ("name", "x" * lib.ACCEL_NAME_LEN, f"longer than {lib.ACCEL_NAME_LEN - 1} bytes"),
])
def test_invalid_config_fields(field, value, words):
    with pytest.raises(AccelInvalidError) as info:
        AccelConfig.preset("nv_full").replace(**{field: value})
    assert words in str(info.value)


def test_json_round_trip_uses_the_same_names():
    cfg = AccelConfig.preset("nv_large")
    data = json.loads(cfg.to_json())
    for key in ("atomic_c", "atomic_k", "cbuf_bytes", "clock_hz", "dram_bytes_per_s",
                "precisions"):
        assert key in data
    assert AccelConfig.from_json(cfg.to_json()) == cfg
    derived = AccelConfig.from_dict({"base": "nv_full", "dram_bytes_per_s": 1e9})
    assert derived.dram_bytes_per_s == 1e9 and derived.atomic_c == 64


def test_json_errors():
    with pytest.raises(AccelInvalidError, match="unknown config fields \\['macs'\\]"):
        AccelConfig.from_dict({"base": "nv_full", "macs": 9})
    with pytest.raises(AccelInvalidError, match="missing fields"):
        AccelConfig.from_dict({"name": "x", "atomic_c": 8})


@pytest.mark.parametrize("name", AccelConfig.preset_names())
def test_every_preset_validates_and_round_trips(name):
    """A new preset row in config.c is checked here with no test edit."""
    cfg = AccelConfig.preset(name)
    assert cfg.name == name
    assert AccelConfig.from_json(cfg.to_json()) == cfg == AccelConfig.from_c(cfg.to_c())
    assert cfg.macs_per_cycle("int8") == cfg.atomic_c * cfg.atomic_k
