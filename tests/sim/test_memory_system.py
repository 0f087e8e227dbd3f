"""The memory system of the cost model (#12 items 3-4): DRAM efficiency (bursts, turnaround,
latency), the secondary memory (SRAM), the CBUF bank split and the sparse weight format, against
figures computed by hand; and the descriptor checks, each naming the bad value."""
import numpy as np
import pytest

from accel_codegen import (AccelConfig, AccelInvalidError, AccelUnsupportedError, Conv, Device,
                           Pool, Sdp, estimate_chain)
from accel_codegen._accel_ffi import ffi, lib
from accel_codegen.sim import profile_enable, profile_records
from conftest import assert_same

SRAM = AccelConfig.preset("nv_full").replace(sram_bytes=1 << 20)  # 64 B per cycle


# --- DRAM efficiency ----------------------------------------------------------------------------

def test_dram_rounds_streams_to_bursts_and_charges_turnaround_and_latency():
    """nv_full with 16 B per cycle, 64-byte bursts, 2 cycles of turnaround per burst written,
    100 cycles of latency. A 2x2/2 max pool of 16 fp32 channels (2-byte data: one 32-byte atom
    per position) on 7x7:
        read 49 x 32 = 1,568 B = 24.5 bursts -> 25 bursts = 1,600 B
        write 3 x 3 x 32 = 288 B = 4.5 bursts -> 5 bursts = 320 B
        DRAM cycles = 100 + ceil(1,920 / 16 + 5 x 2) = 230; the PDP's 784 / 8 = 98 cycles after
        the latency (198) hide behind it; plus the PDP's 54 pipeline cycles: 284."""
    config = AccelConfig.preset("nv_full").replace(
        dram_bytes_per_s=16e9, dram_burst_bytes=64, dram_turnaround_cycles=2.0,
        dram_latency_cycles=100)
    op = estimate_chain(config, [Pool("max", 2, 2)], (1, 16, 7, 7)).ops[0]
    assert (op.bytes_read, op.bytes_written) == (1568, 288)
    assert (op.dram_read_bytes, op.dram_write_bytes) == (1600, 320)
    assert op.compute_cycles == 98 and op.memory_cycles == 230 and op.cycles == 54 + 230


def test_latency_is_exposed_on_small_runs_and_hidden_by_long_ones():
    """The first read's latency bounds a short run from below; a run whose compute is longer
    than latency + transfer pays it once, before its compute starts (its first data)."""
    small = estimate_chain("nv_full", [Pool("max", 2, 2)], (1, 16, 2, 2))
    assert small.ops[0].compute_cycles == 8 and small.cycles > 1200
    no_latency = estimate_chain(SRAM.replace(dram_latency_cycles=0), [Pool("max", 2, 2)],
                                (1, 16, 2, 2))
    assert small.cycles - no_latency.cycles == 1200
    w = np.zeros((64, 64, 3, 3), np.float32)
    chain = [Conv(w, padding=1), Sdp(shift=np.zeros(64), act="relu")]
    big = estimate_chain("nv_full", chain, (1, 64, 56, 56))
    # compute-bound: the CONV's and SDP's 86 + 52 pipeline cycles, the latency, then the MACs
    # after CBUF loading ((401,408 B input + 18,432 B of the first kernel group) / 20 B)
    assert big.ops[0].compute_cycles == big.mac_cycles + 20_992
    assert big.cycles == 86 + 52 + 1200 + big.mac_cycles + 20_992


# --- the secondary memory ---------------------------------------------------------------------

def test_sram_streams_cost_sram_bandwidth_and_the_long_pole_wins():
    """nv_full + 1 MiB SRAM at 64 B per cycle. A ReLU of 64 fp32 channels on 14x14: 196
    positions x 128 B = 25,088 B each way, 12,544 elements / 16 = 784 SDP cycles.
        input in SRAM, output in DRAM: SRAM ceil(25,088 / 64) = 392 cycles; DRAM 1,200 +
            ceil(25,088 / 20 + 392 bursts x 0.5 = 1,450.4) = 2,651 cycles -> 2,651
        both in SRAM: SRAM 50,176 / 64 = 784 cycles, no DRAM -> 784 (the SDP's own)
    each plus the SDP's 52 pipeline cycles (no DRAM read: no latency before the compute)"""
    shape = (1, 64, 14, 14)
    half = estimate_chain(SRAM, [Sdp(act="relu", sram=("input",))], shape).ops[0]
    assert (half.sram_read_bytes, half.sram_write_bytes) == (25_088, 0)
    assert (half.dram_read_bytes, half.dram_write_bytes) == (0, 25_088)
    assert half.sram_cycles == 392 and half.memory_cycles == 2651 and half.cycles == 52 + 2651
    both = estimate_chain(SRAM, [Sdp(act="relu", sram=("input", "output"))], shape)
    op = both.ops[0]
    assert (op.sram_read_bytes, op.sram_write_bytes, op.dram_read_bytes) == (25_088, 25_088, 0)
    assert op.memory_cycles == 0 and op.sram_cycles == op.compute_cycles == 784
    assert op.cycles == 52 + 784
    assert (both.dram_bytes, both.sram_bytes) == (0, 50_176)


def test_a_fused_run_pays_one_latency_and_takes_the_long_pole_of_dram_and_sram():
    w = np.zeros((32, 16, 3, 3), np.float32)
    chain = [Conv(w, padding=1, sram=("input",)), Sdp(shift=np.zeros(32), act="relu")]
    run = estimate_chain(SRAM, chain, (1, 16, 28, 28))
    conv, sdp = run.ops
    assert conv.sram_read_bytes == conv.input_bytes and conv.dram_read_bytes == conv.weight_bytes
    assert run.memory_cycles < conv.memory_cycles + sdp.memory_cycles  # one latency, not two
    # CBUF loading before the first MAC: the input (784 x 32 B) from SRAM at 64 B per cycle,
    # 392 cycles, beside the first kernel group's 16 x 16 x 9 x 2 B from DRAM at 20, 231 (the
    # other path, all 9,216 B of weights at 20 B per cycle, 461, then the second kernel
    # group's half of the MAC cycles, is shorter)
    assert conv.compute_cycles == conv.mac_cycles + 392 > 461 + conv.mac_cycles // 2
    # one pipeline (86 + 52), the latency before the compute, the long pole
    assert run.cycles == 86 + 52 + max(conv.compute_cycles + 1200, sdp.compute_cycles + 1200,
                                       run.memory_cycles, run.sram_cycles)


def test_sram_values_are_unchanged_and_the_profile_records_what_estimate_says(rng):
    x = rng.standard_normal((1, 16, 10, 10)).astype(np.float32)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    plain = [Conv(w, padding=1), Sdp(shift=np.zeros(32), act="relu")]
    placed = [Conv(w, padding=1, sram=("input",)),
              Sdp(shift=np.zeros(32), act="relu", sram=("output",))]
    device = Device(SRAM, num_threads=2)
    y0, _ = device.run(plain, x)
    profile_enable(True)
    try:
        y1, stats = device.run(placed, x, label="in sram")
        records = profile_records()
    finally:
        profile_enable(False)
    assert_same(y1, y0)
    assert records[0].cycles == stats.cycles == estimate_chain(SRAM, placed, x.shape).cycles
    assert records[0].sram_bytes == stats.sram_bytes > 0


def test_resident_weights_are_read_from_sram_and_count_toward_its_size():
    """64 -> 64 3x3 fp32 (2-byte) weights: 73,728 B read at 64 B per cycle = 1,152 cycles."""
    w = np.zeros((64, 64, 3, 3), np.float32)
    chain = [Conv(w, padding=1, sram=("weights",)), Sdp(shift=np.zeros(64))]
    conv = estimate_chain(SRAM, chain, (1, 64, 14, 14)).ops[0]
    assert conv.sram_read_bytes == conv.weight_bytes == 73_728 and conv.sram_cycles == 1152
    assert conv.dram_read_bytes == conv.input_bytes
    with pytest.raises(AccelInvalidError, match="the run places 73728 bytes in SRAM"):
        estimate_chain(SRAM.replace(sram_bytes=70_000), chain, (1, 64, 14, 14))
    with pytest.raises(AccelInvalidError, match=r"sram WEIGHTS bit on an op without weights"):
        estimate_chain(SRAM, [Sdp(act="relu", sram=("weights",))], (1, 64, 14, 14))


def test_sram_bits_are_checked():
    shape = (1, 64, 14, 14)
    with pytest.raises(AccelUnsupportedError, match="sram = 0x1, but configuration nv_full has "
                                                     r"no SRAM \(sram_bytes = 0\)"):
        estimate_chain("nv_full", [Sdp(act="relu", sram=("input",))], shape)
    w = np.zeros((64, 64, 1, 1), np.float32)
    with pytest.raises(AccelInvalidError, match="op 1 .*sram INPUT bit, but its input comes on "
                                                "the fly from op 0"):
        estimate_chain(SRAM, [Conv(w), Sdp(act="relu", sram=("input",))], shape)
    with pytest.raises(AccelInvalidError, match="op 0 .*sram OUTPUT bit, but its output goes on "
                                                "the fly to op 1"):
        estimate_chain(SRAM, [Conv(w, sram=("output",)), Sdp(act="relu")], shape)
    with pytest.raises(AccelInvalidError, match="sram OPERAND bit without an element-wise"):
        estimate_chain(SRAM, [Sdp(act="relu", sram=("operand",))], shape)
    tiny = SRAM.replace(sram_bytes=40_000)  # input 25,088 + output 25,088 do not fit
    with pytest.raises(AccelInvalidError, match="the run places 50176 bytes in SRAM, "
                                                "configuration nv_full has sram_bytes = 40000"):
        estimate_chain(tiny, [Sdp(act="relu", sram=("input", "output"))], shape)
    with pytest.raises(AccelInvalidError, match="'cache' is not one of input, operand, output, weights"):
        estimate_chain(SRAM, [Sdp(act="relu", sram=("cache",))], shape)
    op = ffi.new("accel_op[1]")
    op[0].engine = lib.ACCEL_ENGINE_PDP
    op[0].pdp.kernel_h = op[0].pdp.kernel_w = op[0].pdp.stride_h = op[0].pdp.stride_w = 1
    op[0].pdp.precision = lib.ACCEL_FP32
    op[0].sram = 16
    x = ffi.new("accel_tensor*", {"n": 1, "c": 4, "h": 2, "w": 2, "precision": lib.ACCEL_FP32})
    stats, ops = ffi.new("accel_run_stats*"), ffi.new("accel_op_stats[1]")
    status = lib.accel_estimate(SRAM.to_c(), op, 1, x, ffi.NULL, lib.ACCEL_MODE_FUSED, stats, ops)
    assert status == lib.ACCEL_ERR_INVALID
    assert "sram = 0x10 has unknown bits" in ffi.string(lib.accel_last_error()).decode()


# --- CBUF banks ---------------------------------------------------------------------------------

def _int8_conv(k, c, **fields):
    w = np.zeros((k, c, 3, 3), np.int8)
    return [Conv(w, padding=1, precision="int8", **fields), Sdp(precision="int8")]


def test_the_compiler_split_and_what_a_smaller_one_rereads():
    """nv_full int8 (16 banks of 32 KiB), 256x14x14 -> 512, 3x3:
        input 14 rows x 14 x 256 B = 50,176 B: 2 banks; weights 512 x 2,304 = 1,179,648 B:
        36 banks; one kernel group 32 x 2,304 = 73,728 B: 3 banks.
    NVDLA's order: all (2 + 36) does not fit; the whole input and two kernel groups (2 + 6)
    does: (2, 6), each byte read once (batch 1).
    Given (1, 15): a bank holds 9 rows of 3,584 B, 7 output rows per slice, 2 slices reading
    input rows 0..7 and 6..13 (16 rows = 57,344 B); the weights (36 > 15 banks) stream once per
    slice: 2,359,296 B; re-reads 57,344 + 2,359,296 - 50,176 - 1,179,648 = 1,186,816 B."""
    conv = estimate_chain("nv_full", _int8_conv(512, 256), (1, 256, 14, 14)).ops[0]
    assert (conv.data_banks, conv.weight_banks) == (2, 6)
    assert (conv.input_bytes, conv.weight_bytes, conv.reread_bytes) == (50_176, 1_179_648, 0)
    assert conv.cbuf_write_bytes == 50_176 + 1_179_648
    small = estimate_chain("nv_full", _int8_conv(512, 256, data_banks=1, weight_banks=15),
                           (1, 256, 14, 14)).ops[0]
    assert (small.data_banks, small.weight_banks) == (1, 15)
    assert (small.input_bytes, small.weight_bytes) == (57_344, 2_359_296)
    assert small.reread_bytes == 1_186_816


def test_accel_conv_banks_is_the_split_the_descriptor_defaults_to():
    conv = ffi.new("accel_conv_desc*", {"out_c": 512, "kernel_h": 3, "kernel_w": 3,
                                        "stride_h": 1, "stride_w": 1, "pad_top": 1,
                                        "pad_bottom": 1, "pad_left": 1, "pad_right": 1,
                                        "dilation_h": 1, "dilation_w": 1, "groups": 1,
                                        "precision": lib.ACCEL_INT8})
    x = ffi.new("accel_tensor*", {"n": 1, "c": 256, "h": 14, "w": 14,
                                  "precision": lib.ACCEL_INT8})
    data, weights = ffi.new("int32_t*"), ffi.new("int32_t*")
    assert lib.accel_conv_banks(AccelConfig.preset("nv_full").to_c(), conv, x, data,
                                weights) == lib.ACCEL_OK
    assert (data[0], weights[0]) == (2, 6)
    # The whole input and all weights fit: each gets what it needs (1 + 2 banks).
    conv.out_c = 32
    x.c = 64
    assert lib.accel_conv_banks(AccelConfig.preset("nv_full").to_c(), conv, x, data,
                                weights) == lib.ACCEL_OK
    assert (data[0], weights[0]) == (1, 1)


@pytest.mark.parametrize("banks, error, message", [
    ((10, 10), AccelInvalidError, r"data_banks = 10 \+ weight_banks = 10 must be >= 1 each and "
                                  "fit the 16 CBUF banks"),
    ((0, 5), AccelInvalidError, r"data_banks = 0 \+ weight_banks = 5"),
    ((2, 2), AccelUnsupportedError, r"weight_banks = 2 cannot hold one kernel group \(3 banks "
                                    "of 32768 bytes\\)"),
], ids=["too many", "one zero", "no kernel group"])
def test_a_bad_split_is_refused_naming_it(banks, error, message):
    d, w = banks
    with pytest.raises(error, match=message):
        estimate_chain("nv_full", _int8_conv(512, 256, data_banks=d, weight_banks=w),
                       (1, 256, 14, 14))


def test_a_kernel_group_larger_than_cbuf_streams_in_parts():
    """nv_full with a 128 KiB CBUF (16 banks of 8 KiB), int8 512 -> 512 3x3 on 7x7: one kernel
    group is 32 x 4,608 B = 147,456 B = 18 banks, more than CBUF holds; one output row's input
    3 x 7 x 512 B = 10,752 B = 2 banks. The split gives the weights the 14 banks beside those
    (a kernel group streams in parts, re-read for each of the input's slices), and a split
    must leave them those 14."""
    small = AccelConfig.preset("nv_full").replace(cbuf_bytes=128 * 1024)
    conv = estimate_chain(small, _int8_conv(512, 512), (1, 512, 7, 7)).ops[0]
    assert (conv.data_banks, conv.weight_banks) == (2, 14)
    assert conv.weight_bytes % (512 * 4608) == 0 and conv.weight_bytes > 512 * 4608
    with pytest.raises(AccelUnsupportedError, match=r"weight_banks = 13 cannot hold one kernel "
                                                    r"group \(14 banks of 8192 bytes\)"):
        estimate_chain(small, _int8_conv(512, 512, data_banks=3, weight_banks=13),
                       (1, 512, 7, 7))


def test_data_banks_must_hold_one_output_row():
    """nv_small (32 banks of 4 KiB), int8 64 x 224 rows of 64 channels: one output row of a 3x3
    reads 3 rows x 224 x 64 B = 43,008 B = 11 banks."""
    with pytest.raises(AccelUnsupportedError, match=r"data_banks = 4 cannot hold the input rows "
                                                    r"of one output row \(11 banks of 4096"):
        estimate_chain("nv_small", _int8_conv(8, 64, data_banks=4, weight_banks=4),
                       (1, 64, 16, 224))


# --- sparse weights -----------------------------------------------------------------------------

def _pruned(rng, shape, keep):
    w = rng.integers(-127, 128, size=shape).astype(np.int8)
    w[w == 0] = 1
    mask = np.zeros(w.size, bool)
    mask[rng.choice(w.size, int(w.size * keep), replace=False)] = True
    return np.where(mask.reshape(shape), w, 0).astype(np.int8)


def test_sparse_weights_cost_mask_and_nonzeros_and_compute_the_same(rng):
    """int8 64 x 64 x 3 x 3 = 36,864 weights, a quarter kept: 9,216 non-zero.
    bytes = mask 36,864 / 8 = 4,608 + 9,216 + 4 x 2 kernel groups = 13,832 (dense 36,864); the
    mask takes a bank of its own."""
    w = _pruned(rng, (64, 64, 3, 3), 0.25)
    x = rng.integers(-128, 128, size=(1, 64, 12, 12)).astype(np.int8)
    sdp = Sdp(bias=np.zeros(64, np.int32), mul=np.ones(64, np.int16),
              rshift=np.full(64, 4, np.uint8), precision="int8")
    device = Device("nv_full", num_threads=2)
    dense, dense_stats = device.run([Conv(w, padding=1, precision="int8"), sdp], x)
    sparse, sparse_stats = device.run([Conv(w, padding=1, precision="int8",
                                            weight_format="sparse"), sdp], x)
    assert_same(sparse, dense)
    assert dense_stats.ops[0].weight_bytes == 36_864
    assert sparse_stats.ops[0].weight_bytes == 13_832
    shape_only = Conv(None, weight_shape=w.shape, padding=1, precision="int8",
                      weight_format="sparse", weights_nonzero=9216)
    estimated = estimate_chain("nv_full", [shape_only, sdp], x.shape)
    assert estimated.cycles == sparse_stats.cycles and estimated.ops[0].weight_bytes == 13_832
    conv = ffi.new("accel_conv_desc*")
    shape_only._fill(conv)
    assert lib.accel_conv_weight_bytes(AccelConfig.preset("nv_full").to_c(), conv, 64) == 13_832


def test_sparse_weights_are_checked(rng):
    w = _pruned(rng, (32, 16, 3, 3), 0.5)
    x = rng.integers(-128, 128, size=(1, 16, 6, 6)).astype(np.int8)
    sdp = Sdp(bias=np.zeros(32, np.int32), precision="int8")
    device = Device("nv_full", num_threads=2)
    with pytest.raises(AccelInvalidError, match="weights_nonzero = 5, the weights hold 2304 "
                                                "non-zero values"):
        device.run([Conv(w, precision="int8", weight_format="sparse", weights_nonzero=5), sdp], x)
    with pytest.raises(AccelUnsupportedError, match="weight_format = SPARSE needs weight "
                                                    "compression, which configuration nv_large "
                                                    "lacks"):
        estimate_chain("nv_large", [Conv(w, precision="int8", weight_format="sparse"), sdp],
                       x.shape)
    with pytest.raises(AccelInvalidError, match="weights_nonzero = 3 is for SPARSE weights"):
        estimate_chain("nv_full", [Conv(w, precision="int8", weights_nonzero=3), sdp], x.shape)
    with pytest.raises(AccelInvalidError, match="weights_nonzero = 9999 is outside"):
        estimate_chain("nv_full", [Conv(None, weight_shape=w.shape, precision="int8",
                                        weight_format="sparse", weights_nonzero=9999), sdp],
                       x.shape)
    with pytest.raises(AccelInvalidError, match="weight_format = 'rle' is not one of"):
        estimate_chain("nv_full", [Conv(w, precision="int8", weight_format="rle"), sdp], x.shape)
    with pytest.raises(AccelUnsupportedError, match="mode = winograd: weight_format = SPARSE "
                                                    r"\(Winograd's weights are dense\)"):
        estimate_chain("nv_full", [Conv(w, padding=1, precision="int8", weight_format="sparse",
                                        mode="winograd"), sdp], x.shape)


def test_winograd_weights_are_read_and_banked_at_their_transformed_size(rng):
    """int8 64 x 64 x 3 x 3 in Winograd mode: 4 x 4 int16 per kernel and channel, 64 x 64 x 16
    x 2 = 131,072 bytes (direct: 36,864) read once, in ceil(131,072 / 32 KiB) = 4 weight banks
    (direct: 2); the 12 x 12 input (12 rows of 12 x 64 B) takes 1 data bank."""
    w = rng.integers(-127, 128, size=(64, 64, 3, 3)).astype(np.int8)
    x = rng.integers(-128, 128, size=(1, 64, 12, 12)).astype(np.int8)
    sdp = Sdp(bias=np.zeros(64, np.int32), precision="int8")
    config = AccelConfig.preset("nv_full")
    for mode, weight_bytes, weight_banks in (("direct", 36_864, 2), ("winograd", 131_072, 4)):
        conv = Conv(w, padding=1, precision="int8", mode=mode)
        stats = estimate_chain(config, [conv, sdp], x.shape)
        assert stats.ops[0].weight_bytes == weight_bytes and stats.ops[0].reread_bytes == 0
        assert (stats.ops[0].data_banks, stats.ops[0].weight_banks) == (1, weight_banks)
        desc = ffi.new("accel_conv_desc*")
        conv._fill(desc)
        assert lib.accel_conv_weight_bytes(config.to_c(), desc, 64) == weight_bytes


# --- configuration ------------------------------------------------------------------------------

def test_memory_fields_are_validated_naming_the_value():
    full = AccelConfig.preset("nv_full")
    with pytest.raises(AccelInvalidError, match="cbuf_bytes = 524288 is not a whole number of "
                                                "cbuf_banks = 24"):
        full.replace(cbuf_banks=24)
    with pytest.raises(AccelInvalidError, match=r"sram_bytes_per_s = 0 is outside \[1e\+06, "
                                                r"1e14\] \(sram_bytes > 0 needs a bandwidth"):
        AccelConfig.preset("nv_small").replace(sram_bytes=1 << 20)
    with pytest.raises(AccelInvalidError, match="dram_burst_bytes = 0 is outside"):
        full.replace(dram_burst_bytes=0)
    with pytest.raises(AccelInvalidError, match="dram_turnaround_cycles = -1 is outside"):
        full.replace(dram_turnaround_cycles=-1.0)


def test_presets_follow_the_spec_files():
    """hw/spec/defs: CBUF_BANK_NUMBER, PRIMARY_MEMIF_WIDTH x burst length 1, PRIMARY_MEMIF_
    LATENCY, WEIGHT_COMPRESSION_ENABLE (nv_full only), no SRAM behind the secondary interface
    unless given."""
    small, large, full = (AccelConfig.preset(n) for n in ("nv_small", "nv_large", "nv_full"))
    assert (small.cbuf_banks, large.cbuf_banks, full.cbuf_banks) == (32, 16, 16)
    assert (small.dram_burst_bytes, large.dram_burst_bytes, full.dram_burst_bytes) == (8, 32, 64)
    assert (small.dram_latency_cycles, large.dram_latency_cycles,
            full.dram_latency_cycles) == (64, 1024, 1200)
    assert [("weight_compression" in c.features) for c in (small, large, full)] == \
        [False, False, True]
    assert small.sram_bytes == large.sram_bytes == full.sram_bytes == 0
    assert AccelConfig.from_dict({k: v for k, v in full.to_dict().items()
                                  if k not in ("cbuf_banks", "sram_bytes")}) == full


@pytest.mark.parametrize("field, value", [("cbuf_banks", 32), ("dram_burst_bytes", 32),
                                          ("dram_latency_cycles", 0),
                                          ("dram_turnaround_cycles", 1.0),
                                          ("sram_bytes", 1 << 20), ("sram_bytes_per_s", 1e10)])
def test_a_memory_field_makes_a_distinct_shared_device(field, value):
    """Generated code runs on the shared device of its configuration: one differing only in a
    memory field (say, an SRAM) must not run on another's."""
    base = AccelConfig.preset("nv_full").replace(sram_bytes=1 << 20)
    other = base.replace(**{field: value}) if getattr(base, field) != value else \
        AccelConfig.preset("nv_full")
    first, second = ffi.new("accel_device**"), ffi.new("accel_device**")
    assert lib.accel_device_shared(base.to_c(), first) == lib.ACCEL_OK
    assert lib.accel_device_shared(other.to_c(), second) == lib.ACCEL_OK
    assert first[0] != second[0]
