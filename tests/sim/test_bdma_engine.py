"""The BDMA engine: strided channel copies (concat, split / chunk, channel shuffle) against the
NumPy reference, bit for bit in every precision; its validation; its cost (whole atoms of the
channel surfaces a copy touches, at the DRAM bandwidth) and that estimate == run."""
import dataclasses
import math
import re

import numpy as np
import pytest

from accel_codegen import (AccelConfig, AccelInvalidError, AccelShapeError,
                           AccelUnsupportedError, Bdma, Device, Pool, Sdp, estimate_chain)
from accel_codegen import reference as ref
from accel_codegen._accel_ffi import ffi, lib
from accel_codegen.sim.ops import AccelDtypeError
from accel_codegen.sim import observer, profile_enable, profile_records
from conftest import assert_same, ideal_dram

DEVICE = Device("nv_full", num_threads=2)
PRECISIONS = {"fp32": np.float32, "fp16": np.float16, "int8": np.int8}


def _data(shape, precision, seed=0):
    rng = np.random.default_rng(seed)
    if precision == "int8":
        return rng.integers(-128, 128, shape).astype(np.int8)
    return rng.standard_normal(shape).astype(PRECISIONS[precision])


def _sentinel(shape, precision):
    """A destination whose every element says "never written"."""
    return np.full(shape, -7, PRECISIONS[precision])


# --- values ------------------------------------------------------------------------------------

@pytest.mark.parametrize("precision", PRECISIONS)
def test_concat_is_one_run_per_input_into_one_destination(precision):
    """DenseNet / GoogLeNet: inputs of 3, 5 and 8 channels, batch 2, into a 16-channel
    destination; each run leaves the channels it does not write as they were."""
    parts = [_data((2, c, 5, 6), precision, seed=c) for c in (3, 5, 8)]
    out = _sentinel((2, 16, 5, 6), precision)
    expected = out.copy()
    offset = 0
    for part in parts:
        op = Bdma(part.shape[1], dst_offset=offset, dst_channels=16, precision=precision)
        y, stats = DEVICE.run([op], part, out=out)
        assert y is out
        expected = ref.run_op(op, part, expected)
        assert_same(out, expected, f"after the input at channel {offset}")
        offset += part.shape[1]
        assert (out[:, offset:] == -7).all()  # not written yet: untouched
        assert stats.ops[0].engine == "BDMA" and stats.ops[0].op == "bdma:copy"
    assert_same(out, np.concatenate(parts, axis=1), "concat")


@pytest.mark.parametrize("precision", PRECISIONS)
def test_split_and_chunk_are_slices(precision):
    x = _data((3, 12, 4, 4), precision)
    for first, count in ((0, 4), (4, 4), (8, 4), (2, 7), (11, 1)):
        y, _ = DEVICE.run([Bdma(count, src_offset=first, precision=precision)], x)
        assert_same(y, x[:, first:first + count], f"channels {first}..{first + count - 1}")
    # every other channel (a strided read)
    y, _ = DEVICE.run([Bdma(6, src_offset=1, src_stride=2, precision=precision)], x)
    assert_same(y, x[:, 1::2], "odd channels")


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("groups, channels", [(2, 8), (3, 12), (4, 64), (8, 24)])
def test_channel_shuffle_is_g_strided_runs(precision, groups, channels):
    """ShuffleNet: out[i*g + j] = in[j*(C/g) + i], run j copying group j with dst_stride g."""
    x = _data((2, channels, 3, 5), precision, seed=groups)
    per_group = channels // groups
    out = _sentinel(x.shape, precision)
    for j in range(groups):
        DEVICE.run([Bdma(per_group, src_offset=j * per_group, dst_offset=j, dst_stride=groups,
                         dst_channels=channels, precision=precision)], x, out=out)
    shuffled = x.reshape(2, groups, per_group, 3, 5).transpose(0, 2, 1, 3, 4).reshape(x.shape)
    assert_same(out, shuffled, "channel shuffle")
    for i in range(per_group):
        for j in range(groups):
            assert_same(out[:, i * groups + j], x[:, j * per_group + i], f"out[{i * groups + j}]")


def test_copies_are_bit_exact_nan_payloads_signed_zeros_and_infinities():
    bits = np.array([0x7FC00001, 0xFFC12345, 0x80000000, 0x7F800000, 0xFF800000, 0x00000001],
                    np.uint32)
    x = np.tile(bits, 4).view(np.float32).reshape(1, 6, 2, 2)
    y, _ = DEVICE.run([Bdma(6, dst_offset=1, dst_channels=8)], x)
    np.testing.assert_array_equal(y[:, 1:7].view(np.uint32), x.view(np.uint32))
    halves = np.array([0x7E01, 0xFC00, 0x8000, 0x0001, 0x7BFF, 0xFE55], np.uint16)
    x16 = np.tile(halves, 4).view(np.float16).reshape(1, 6, 2, 2)
    y16, _ = DEVICE.run([Bdma(6, precision="fp16")], x16)
    np.testing.assert_array_equal(y16.view(np.uint16), x16.view(np.uint16))


def test_without_out_the_other_channels_are_zero_and_2d_inputs_stay_2d():
    x = np.arange(1, 7, dtype=np.float32).reshape(2, 3)  # [N, C]
    y, _ = DEVICE.run([Bdma(3, dst_offset=1, dst_stride=2)], x)
    assert y.shape == (2, 6)
    np.testing.assert_array_equal(y, [[0, 1, 0, 2, 0, 3], [0, 4, 0, 5, 0, 6]])


def test_both_modes_and_every_preset_copy_the_same():
    x8 = _data((1, 40, 3, 3), "int8")
    op = Bdma(10, src_offset=3, src_stride=3, dst_offset=2, dst_stride=2, precision="int8")
    expected = ref.run_op(op, x8)
    for name in ("nv_large", "nv_full"):
        for mode in ("fused", "independent"):
            y, _ = Device(name).run([op], x8, mode=mode)
            assert_same(y, expected, f"{name} {mode}")
    # NVDLA's nv_small.spec disables the BDMA.
    with pytest.raises(AccelUnsupportedError, match="configuration nv_small has no BDMA"):
        Device("nv_small").run([op], x8)


def test_large_copy_on_threads():
    x = _data((2, 96, 40, 40), "fp32")
    op = Bdma(48, src_offset=1, src_stride=2, dst_offset=5, dst_stride=3, dst_channels=150)
    for threads in (1, 2, 3):
        y, _ = Device("nv_full", num_threads=threads).run([op], x)
        assert_same(y, ref.run_op(op, x), f"{threads} threads")


# --- validation --------------------------------------------------------------------------------

X = np.ones((1, 8, 4, 4), np.float32)


@pytest.mark.parametrize("op, error, message", [
    (Bdma(0), AccelInvalidError, "bdma channels = 0"),
    (Bdma(2, src_offset=-1), AccelInvalidError, "bdma src_offset = -1"),
    (Bdma(2, src_stride=0), AccelInvalidError, "bdma src_stride = 0"),
    (Bdma(2, dst_offset=-3), AccelInvalidError, "bdma dst_offset = -3"),
    (Bdma(2, dst_stride=0), AccelInvalidError, "bdma dst_stride = 0"),
    (Bdma(2, dst_channels=0), AccelInvalidError, "bdma dst_channels = 0"),
    (Bdma(2, dst_channels=2**31), AccelInvalidError, "bdma dst_channels = 2147483648"),
    (Bdma(2.0), AccelDtypeError, "bdma channels = 2.0"),
    (Bdma(2, src_stride=True), AccelDtypeError, "bdma src_stride = True"),
    (Bdma(2, dst_offset="1"), AccelDtypeError, "bdma dst_offset = '1'"),
    (Bdma(2, precision="fp64"), AccelInvalidError, "fp64"),
    # the C library: ranges against the tensors, in int64 (no overflow)
    (Bdma(9), AccelShapeError, "reads channel 8, the input has 8 channels"),
    (Bdma(3, src_offset=2, src_stride=3), AccelShapeError, "src_stride = 3 reads channel 8"),
    (Bdma(2, src_stride=2**31 - 1), AccelShapeError, "reads channel 2147483647"),
    (Bdma(3, dst_offset=1, dst_stride=2, dst_channels=5), AccelInvalidError,
     "writes channel 5, dst_channels = 5"),
    (Bdma(2**31 - 1, dst_offset=2**31 - 1, dst_stride=2**31 - 1, dst_channels=2**31 - 1),
     AccelShapeError, "reads channel 2147483646"),  # the source is checked first
    (Bdma(1, dst_offset=2**31 - 1, dst_channels=2**31 - 1), AccelInvalidError,
     "writes channel 2147483647, dst_channels = 2147483647"),
    (Bdma(2, dst_offset=2**31 - 1, dst_stride=2**31 - 1, dst_channels=2**31 - 1),
     AccelInvalidError, "writes channel 4294967294"),
    (Bdma(8, dst_stride=2**28), AccelInvalidError, "op 0 (BDMA)"),  # default dst_channels
    (Bdma(8, dst_channels=2**27), AccelInvalidError, "exceeds the limit"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_each_field_is_checked_and_named(op, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        DEVICE.run([op], X)
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        estimate_chain("nv_full", [op], X.shape)


def test_precision_must_be_the_tensors_and_the_configurations():
    with pytest.raises(AccelDtypeError, match="precision fp16 differs from the input's fp32"):
        DEVICE.run([Bdma(2, precision="fp16")], X)
    with pytest.raises(AccelInvalidError, match="precision fp16 differs from the input's fp32"):
        DEVICE.run([Bdma(2, precision="fp16")], X, precision="fp32")
    with pytest.raises(AccelUnsupportedError, match="int16 is not implemented"):
        DEVICE.run([Bdma(2, precision="int16")], X.astype(np.int16))
    with pytest.raises(AccelUnsupportedError, match="fp16 is not supported by configuration "
                                                    "nv_large"):
        Device("nv_large").run([Bdma(2, precision="fp16")], X.astype(np.float16))
    with pytest.raises(AccelDtypeError, match="a fp16 BDMA copies float16 data, got float32"):
        ref.run_op(Bdma(2, precision="fp16"), X)


@pytest.mark.parametrize("mode", ["fused", "independent"])
@pytest.mark.parametrize("chain", [[Bdma(8), Sdp(act="relu")], [Sdp(act="relu"), Bdma(8)],
                                   [Bdma(8), Bdma(8)], [Pool("max", 2, 2), Bdma(8)]],
                         ids=["bdma_sdp", "sdp_bdma", "bdma_bdma", "pool_bdma"])
def test_a_bdma_runs_alone(chain, mode):
    with pytest.raises(AccelInvalidError, match=r"BDMA\): a BDMA copy runs alone \(num_ops = 2"):
        DEVICE.run(chain, X, mode=mode)


def test_overlapping_input_and_output_are_refused():
    x = np.arange(8 * 16, dtype=np.float32).reshape(1, 8, 4, 4)
    with pytest.raises(AccelInvalidError, match="overlaps input data"):
        DEVICE.run([Bdma(8)], x, out=x)
    buffer = np.zeros(2 * 8 * 16, np.float32)
    source = buffer[:8 * 16].reshape(1, 8, 4, 4)
    with pytest.raises(AccelInvalidError, match="a copy needs separate source and destination"):
        DEVICE.run([Bdma(4)], source, out=buffer[100:100 + 4 * 16])  # shares 28 elements
    DEVICE.run([Bdma(4)], source, out=buffer[128:192])  # adjacent: fine


def test_output_tensor_must_be_n_dst_channels_h_w():
    """The C library checks the output tensor it is given (Device.run always passes the
    inferred one)."""
    x = np.ones((1, 4, 3, 3), np.float32)
    out = np.zeros(6 * 9, np.float32)
    op = ffi.new("accel_op[]", 1)
    Bdma(4, dst_offset=2, dst_channels=6).lower(op[0])
    tensor_in = ffi.new("accel_tensor*", {"data": ffi.cast("void*", x.ctypes.data), "n": 1,
                                          "c": 4, "h": 3, "w": 3, "precision": lib.ACCEL_FP32})
    for shape in ((1, 6, 9, 1), (1, 3, 3, 6), (3, 2, 3, 3)):
        tensor_out = ffi.new("accel_tensor*", {"data": ffi.cast("void*", out.ctypes.data),
                                               "n": shape[0], "c": shape[1], "h": shape[2],
                                               "w": shape[3], "precision": lib.ACCEL_FP32})
        status = lib.accel_run(DEVICE._handle, op, 1, tensor_in, tensor_out,
                               lib.ACCEL_MODE_FUSED, ffi.NULL, ffi.NULL, ffi.NULL)
        assert status == lib.ACCEL_ERR_SHAPE
        message = ffi.string(lib.accel_last_error()).decode()
        assert "the BDMA copy writes 1x6x3x3" in message and "dst_channels = 6" in message
    assert not out.any()


def test_output_shape_and_op_list():
    assert DEVICE.output_shape([Bdma(3, dst_offset=4)], (2, 5, 7, 9)) == (2, 7, 7, 9)
    assert DEVICE.output_shape([Bdma(3, dst_channels=11)], (2, 5, 7, 9)) == (2, 11, 7, 9)
    with pytest.raises(AccelInvalidError, match="list of Conv, Sdp, Pool and Lrn, or one Bdma"):
        DEVICE.run(Bdma(3), X)


# --- cost ---------------------------------------------------------------------------------------

def test_cost_counts_whole_atoms_of_the_surfaces_touched():
    """nv_full: 32-byte atoms, 16 channels per surface at fp32 (charged as 2-byte fp16);
    DRAM 20 bytes per cycle, 64-byte bursts, 0.5 turnaround cycle per burst written, latency
    1,200 cycles.
    Concat part: channels 0..23 (surfaces 0, 1) -> channels 8..31 (surfaces 0, 1):
        read = write = 49 positions x 2 surfaces x 32 B = 3,136 B = 49 bursts each way;
        cycles 1,200 + ceil(6,272 / 20 + 49 x 0.5 = 338.1) = 1,539.
    Shuffle run j = 1 of g = 4 on 64 channels: reads 16..31 (surface 1), writes 1, 5, ..., 61:
        every one of the 4 surfaces: read 49 x 32 = 1,568 B, write 49 x 4 x 32 = 6,272 B.
    A step of a surface or more: every channel its own surface."""
    concat = estimate_chain("nv_full", [Bdma(24, dst_offset=8, dst_channels=40)],
                            (1, 24, 7, 7)).ops[0]
    assert (concat.input_bytes, concat.bytes_read, concat.bytes_written) == (3136, 3136, 3136)
    assert concat.compute_cycles == 0 and concat.memory_cycles == concat.cycles == 1539
    assert concat.dram_read_bytes == concat.dram_write_bytes == 3136
    assert concat.macs == concat.mac_cycles == concat.weight_bytes == concat.operand_bytes == 0
    shuffle = estimate_chain("nv_full", [Bdma(16, src_offset=16, dst_offset=1, dst_stride=4,
                                              dst_channels=64)], (1, 64, 7, 7)).ops[0]
    assert (shuffle.bytes_read, shuffle.bytes_written) == (1568, 6272)
    wide = estimate_chain("nv_full", [Bdma(5, src_stride=16, dst_stride=20)],
                          (2, 80, 3, 3)).ops[0]
    assert (wide.bytes_read, wide.bytes_written) == (18 * 5 * 32, 18 * 5 * 32)
    # int8: 32 channels per surface; channels 30..33 straddle two
    int8 = estimate_chain("nv_full", [Bdma(4, src_offset=30, precision="int8")],
                          (1, 40, 2, 2)).ops[0]
    assert (int8.bytes_read, int8.bytes_written) == (4 * 2 * 32, 4 * 32)


@pytest.mark.parametrize("name, precision", [
    (name, precision) for name in ("nv_small", "nv_large", "nv_full") for precision in PRECISIONS
    if precision == "fp32" or precision in AccelConfig.preset(name).precisions])
def test_a_contiguous_copy_costs_the_feature_data_of_its_channels(name, precision):
    """Offset 0, step 1: exactly what the model counts for a tensor of those channels (its
    positions padded to whole atoms), read and written; a step of 2 reads the surfaces of
    twice the channels."""
    config = ideal_dram(name)  # the bytes at the bandwidth, nothing else
    if "bdma" not in config.features:  # nv_small's memory atom, with a BDMA added
        config = config.replace(features=(*config.features, "bdma"))
    shape = (2, 50, 5, 3)
    positions = 2 * 5 * 3
    element = 1 if precision == "int8" else 2
    atom = config.memory_atom_bytes
    for channels in (1, 7, 16, 33, 50):
        stats = estimate_chain(config, [Bdma(channels, precision=precision)], shape).ops[0]
        feature = positions * math.ceil(channels * element / atom) * atom
        assert stats.bytes_read == stats.bytes_written == feature, (channels, stats)
        assert stats.cycles == math.ceil(2 * feature * config.clock_hz /
                                         config.dram_bytes_per_s)
    strided = estimate_chain(config, [Bdma(25, src_stride=2, precision=precision)], shape).ops[0]
    assert strided.bytes_read == positions * math.ceil(49 * element / atom) * atom


def test_an_atom_narrower_than_an_element_holds_one_channel():
    config = AccelConfig.preset("nv_full").replace(memory_atom_bytes=1)
    stats = estimate_chain(config, [Bdma(5, src_offset=1)], (1, 8, 2, 2)).ops[0]
    assert stats.bytes_read == stats.bytes_written == 4 * 5 * 2


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("mode", ["fused", "independent"])
def test_estimate_equals_the_profiled_run(precision, mode):
    x = _data((2, 24, 9, 7), precision)
    ops = [Bdma(8, src_offset=1, src_stride=3, dst_offset=3, dst_stride=5, dst_channels=40,
                precision=precision)]
    profile_enable(True)
    try:
        _, stats = DEVICE.run(ops, x, mode=mode, label="f0.1 accel.concat")
    finally:
        profile_enable(False)
    expected = estimate_chain("nv_full", ops, x.shape, mode=mode)
    assert stats == dataclasses.replace(expected, label="f0.1 accel.concat")
    (record,) = profile_records()
    assert record == stats and record.ops[0].precision == precision
    assert record.utilization == 0.0 and record.macs == 0


def test_profile_table_lists_the_bdma():
    import accel_codegen

    x = _data((1, 4, 3, 3), "fp32")
    with accel_codegen.profile() as prof:
        DEVICE.run([Bdma(4, dst_offset=4, dst_channels=8)], x, label="f0.2 accel.concat")
    assert [op.engine for op in prof.ops] == ["BDMA"]
    assert "BDMA" in prof.table() and prof.totals["cycles"] == prof.records[0].cycles > 0


# --- observer ------------------------------------------------------------------------------------

class _Collector:
    def __init__(self):
        self.seen = {}

    def add(self, label, op_index, x):
        self.seen[(label, op_index)] = x.copy()


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_observer_sees_the_input_and_the_copied_channels(precision):
    x = _data((2, 9, 3, 4), precision)
    out = _sentinel((2, 12, 3, 4), precision)
    op = Bdma(3, src_offset=2, src_stride=3, dst_offset=1, dst_stride=4, dst_channels=12,
              precision=precision)
    with observer.observing(_Collector()) as seen:
        DEVICE.run([op], x, out=out, label="f0.3 accel.shuffle")
    held = np.int8 if precision == "int8" else np.float32  # fp16 comes widened
    assert sorted(seen.seen) == [("f0.3 accel.shuffle", observer.INPUT),
                                 ("f0.3 accel.shuffle", 0)]
    assert_same(seen.seen[("f0.3 accel.shuffle", observer.INPUT)], x.astype(held), "input")
    assert_same(seen.seen[("f0.3 accel.shuffle", 0)], x[:, 2:9:3].astype(held), "copied")
    assert_same(out[:, 1::4], x[:, 2:9:3], "written")


# --- the second repeat level (accel_bdma_desc.repeat) -------------------------------------------

def _transpose_op(r, s, precision):
    """[R, S] -> [S, R] of one-element (or one-line) channels in one run (lowering._transpose's
    two forms: a row of S channels written every R, or a column of R channels read every S)."""
    if r <= s:
        return Bdma(s, dst_stride=r, repeat=r - 1, src_repeat_stride=s, dst_repeat_stride=1,
                    precision=precision)
    return Bdma(r, src_stride=s, repeat=s - 1, src_repeat_stride=1, dst_repeat_stride=r,
                precision=precision)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("r, s, line", [(3, 5, 1), (5, 3, 1), (4, 4, 3), (7, 2, 2),
                                        (192, 196, 1), (1, 9, 1)])
def test_a_transpose_is_one_repeated_run(precision, r, s, line):
    """A ViT's patch map [1, 192, 196] into its tokens: one run (192 before), the same bytes
    as NumPy's transpose and the reference, on 1 and 2 threads."""
    x = _data((2, r * s, 1, line), precision, seed=r + s)
    op = _transpose_op(r, s, precision)
    expected = x.reshape(2, r, s, line).transpose(0, 2, 1, 3).reshape(2, r * s, 1, line)
    assert_same(ref.run_op(op, x), expected, "reference")
    for threads in (1, 2):
        y, stats = Device("nv_full", num_threads=threads).run([op], x)
        assert_same(y, expected, f"{threads} threads")
        assert len(stats.ops) == 1


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("fields", [
    dict(channels=3, src_offset=1, src_stride=2, dst_offset=2, dst_stride=3, repeat=2,
         src_repeat_stride=7, dst_repeat_stride=9),  # blocks one after another
    dict(channels=4, src_offset=0, src_stride=1, dst_offset=1, dst_stride=5, repeat=3,
         src_repeat_stride=4, dst_repeat_stride=1),  # interleaved: a shuffle in one run
    dict(channels=2, src_offset=3, src_stride=4, dst_offset=0, dst_stride=1, repeat=4,
         src_repeat_stride=0, dst_repeat_stride=2),  # the same channels read every time
    dict(channels=5, src_offset=0, src_stride=1, dst_offset=0, dst_stride=1, repeat=3,
         src_repeat_stride=5, dst_repeat_stride=6),  # contiguous blocks, a gap between
])
def test_a_repeated_copy_is_its_repeats_one_level_copies(precision, fields):
    """repeat + 1 runs, run k with both offsets moved k repeat strides, write what one
    repeated run writes, into the same destination; the channels neither writes stay."""
    x = _data((2, 24, 3, 2), precision, seed=fields["repeat"])
    op = Bdma(dst_channels=30, precision=precision, **fields)
    out, expected = _sentinel((2, 30, 3, 2), precision), _sentinel((2, 30, 3, 2), precision)
    y, _ = DEVICE.run([op], x, out=out)
    assert y is out
    for k in range(fields["repeat"] + 1):
        one = Bdma(fields["channels"], fields["src_offset"] + k * fields["src_repeat_stride"],
                   fields["src_stride"], fields["dst_offset"] + k * fields["dst_repeat_stride"],
                   fields["dst_stride"], 30, precision=precision)
        DEVICE.run([one], x, out=expected)
    assert_same(out, expected, "repeat against its copies")
    assert_same(out, ref.run_op(op, x, _sentinel((2, 30, 3, 2), precision)), "reference")
    assert DEVICE.output_shape([dataclasses.replace(op, dst_channels=None)], x.shape)[1] == \
        fields["dst_offset"] + fields["repeat"] * fields["dst_repeat_stride"] + \
        (fields["channels"] - 1) * fields["dst_stride"] + 1


@pytest.mark.parametrize("op, error, message", [
    (Bdma(2, repeat=-1), AccelInvalidError, "bdma repeat = -1"),
    (Bdma(2, repeat=1, src_repeat_stride=-2), AccelInvalidError, "bdma src_repeat_stride = -2"),
    (Bdma(2, repeat=1, dst_repeat_stride=-1), AccelInvalidError, "bdma dst_repeat_stride = -1"),
    # the C library, in int64: the last channel read or written with the repeat
    (Bdma(2, repeat=3, src_repeat_stride=3), AccelShapeError,
     "repeat = 3 x src_repeat_stride = 3 + (channels = 2 - 1) x src_stride = 1 reads channel 10"
     ", the input has 8 channels"),
    (Bdma(1, repeat=2**31 - 1, src_repeat_stride=2**31 - 1), AccelShapeError,
     "reads channel 4611686014132420609"),
    (Bdma(2, repeat=1, dst_repeat_stride=1, dst_channels=3), AccelInvalidError,
     "writes some channel twice"),
    (Bdma(2, repeat=2, dst_repeat_stride=2, dst_channels=5), AccelInvalidError,
     "writes channel 5, dst_channels = 5"),
    (Bdma(3, dst_stride=2, repeat=2, dst_repeat_stride=1, dst_channels=8), AccelInvalidError,
     "writes some channel twice"),  # interleaved, but the third repeat meets the next column
    (Bdma(1, repeat=1, dst_repeat_stride=0, dst_channels=1), AccelInvalidError,
     "writes some channel twice"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_the_repeat_fields_are_checked_and_named(op, error, message):
    with pytest.raises(error, match=re.escape(message)):
        DEVICE.run([op], X)
    with pytest.raises(error, match=re.escape(message)):
        estimate_chain("nv_full", [op], X.shape)


def test_the_reference_refuses_a_channel_written_twice():
    x = _data((1, 8, 1, 1), "fp32")
    with pytest.raises(AccelInvalidError, match="writes some channel twice"):
        ref.bdma_copy(x, 2, repeat=1, dst_repeat_stride=1)
    with pytest.raises(AccelInvalidError, match="out of range"):
        ref.bdma_copy(x, 2, repeat=3, src_repeat_stride=3, dst_repeat_stride=2)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_repeated_copy_moves_its_copies_bytes_in_one_run(precision):
    """The cost of a repeated run: the bytes of its repeat + 1 one-level copies (the same
    surfaces touched, repeat by repeat), one run's fixed cost (DRAM latency) instead of
    repeat + 1; estimate == profile."""
    r, s = 12, 20
    op = _transpose_op(r, s, precision)
    one = estimate_chain("nv_full", [op], (1, r * s, 1, 1)).ops[0]
    copies = [estimate_chain("nv_full", [Bdma(s, src_offset=j * s, dst_offset=j, dst_stride=r,
                                              dst_channels=r * s, precision=precision)],
                             (1, r * s, 1, 1)).ops[0] for j in range(r)]
    assert one.bytes_read == sum(c.bytes_read for c in copies)
    assert one.bytes_written == sum(c.bytes_written for c in copies)
    assert one.cycles < sum(c.cycles for c in copies)
    x = _data((1, r * s, 1, 1), precision)
    profile_enable(True)
    try:
        _, stats = DEVICE.run([op], x, label="f0.4 accel.transpose")
    finally:
        profile_enable(False)
    assert stats == dataclasses.replace(estimate_chain("nv_full", [op], x.shape),
                                        label="f0.4 accel.transpose")


def test_the_observer_sees_the_copied_channels_repeat_by_repeat():
    x = _data((2, 12, 2, 1), "fp32")
    op = _transpose_op(3, 4, "fp32")
    with observer.observing(_Collector()) as seen:
        y, _ = DEVICE.run([op], x, label="f0.5 accel.transpose")
    copied = seen.seen[("f0.5 accel.transpose", 0)]
    assert copied.shape == (2, 12, 2, 1)
    written = (np.arange(3)[:, None] * 1 + np.arange(4) * 3).ravel()
    assert_same(copied, y[:, written], "copied, in copy order")
