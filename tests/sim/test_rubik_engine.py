"""The RUBIK engine's contract mode (NVDLA's deconvolution, second layer): against the NumPy
reference bit for bit in every precision and against NVDLA's own figure; every refusal, typed
and naming its field; its cost by hand; and the deconvolutions it completes (sim/deconv.py):
transposed convolutions and nearest upsampling as CONV + contract against PyTorch."""
import dataclasses
import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import accel_codegen as ac
from accel_codegen import (AccelConfig, AccelDtypeError, AccelInvalidError, AccelShapeError,
                           AccelUnsupportedError, Conv, Device, Rubik, Sdp, estimate_chain)
from accel_codegen._accel_ffi import ffi, lib
from accel_codegen.sim import observer, profile_enable, profile_records
from accel_codegen.sim import reference as ref
from accel_codegen.sim.deconv import deconv_as_conv_weights, upsample_nearest_as_conv_weights
from accel_codegen.sim.vocabulary import ENGINES, RUBIK_MODES
from conftest import assert_close, assert_same, ideal_dram

DEVICE = Device("nv_full", num_threads=2)
PRECISIONS = {"fp32": np.float32, "fp16": np.float16, "int8": np.int8}


def _data(shape, precision, seed=0):
    rng = np.random.default_rng(seed)
    if precision == "int8":
        return rng.integers(-128, 128, shape).astype(np.int8)
    return rng.standard_normal(shape).astype(PRECISIONS[precision])


# --- values ------------------------------------------------------------------------------------

@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("sx, sy", [(2, 2), (3, 2), (1, 3), (2, 1), (1, 1), (4, 4)])
def test_contract_equals_the_reference_bit_for_bit(precision, sx, sy):
    x = _data((2, sx * sy * 3, 4, 5), precision, seed=sx * 10 + sy)
    op = Rubik(sx, sy, precision=precision)
    y, stats = DEVICE.run([op], x)
    assert y.shape == (2, 3, 4 * sy, 5 * sx)
    assert_same(y, ref.run_op(op, x), f"{sx}x{sy} contract")
    assert stats.ops[0].engine == "RUBIK" and stats.ops[0].op == "rubik:contract"
    assert stats.macs == 0
    # and the definition, element by element
    c = 3
    for a in range(sy):
        for b in range(sx):
            assert_same(y[:, :, a::sy, b::sx], x[:, (a * sx + b) * c:(a * sx + b + 1) * c],
                        f"phase ({a}, {b})")


def test_contract_matches_nvdlas_figure():
    """nvdla/doc's "Contract mode in RUBIK": W = 4, H = 3, six channel groups (deconvolution x
    stride 2, y stride 3); cube g*12 + h*4 + w of the input lands in the output rows
    00 12 01 13 02 14 03 15 / 24 36 25 37 ... / 48 60 49 61 ... / 04 16 05 17 ..."""
    x = np.arange(72, dtype=np.float32).reshape(1, 6, 3, 4)
    y, _ = DEVICE.run([Rubik(stride_x=2, stride_y=3)], x)
    assert y.shape == (1, 1, 9, 8)
    assert y[0, 0, 0].tolist() == [0, 12, 1, 13, 2, 14, 3, 15]
    assert y[0, 0, 1].tolist() == [24, 36, 25, 37, 26, 38, 27, 39]
    assert y[0, 0, 2].tolist() == [48, 60, 49, 61, 50, 62, 51, 63]
    assert y[0, 0, 3].tolist() == [4, 16, 5, 17, 6, 18, 7, 19]
    assert y[0, 0, 8].tolist() == [56, 68, 57, 69, 58, 70, 59, 71]


def test_contract_is_pixel_shuffle_with_the_phase_outermost():
    """PyTorch's pixel_shuffle reads channel c*r*r + a*r + b; the contract (a*r + b)*C' + c."""
    x = _data((2, 4 * 5, 3, 6), "fp32")
    y, _ = DEVICE.run([Rubik(2, 2)], x)
    channel_major = x.reshape(2, 4, 5, 3, 6).transpose(0, 2, 1, 3, 4).reshape(x.shape)
    assert_same(y, F.pixel_shuffle(torch.from_numpy(channel_major), 2).numpy())


def test_bits_move_as_they_are_and_c16_and_threads_agree():
    x = np.array([np.nan, -0.0, np.inf, -np.inf], np.float32).view(np.uint32)
    x = (x | np.uint32(0x123)).view(np.float32)  # NaN payloads survive too
    x = np.tile(x, 4 * 16 * 3 * 2 // 4).reshape(1, 64, 3, 2)
    y, _ = DEVICE.run([Rubik(2, 2)], x)
    assert y.view(np.uint32).tobytes() == ref.rubik_contract(x, 2, 2).view(np.uint32).tobytes()
    # a C16 run (converted around the kernel) gives the same values
    from accel_codegen.sim.layout import from_c16, to_c16
    x = _data((1, 64, 5, 3), "fp32")
    y16, _ = Device("nv_full").run([Rubik(2, 2)], to_c16(x), layout="c16")
    assert_same(from_c16(y16), ref.rubik_contract(x, 2, 2), "C16")
    big = _data((2, 4 * 40, 40, 60), "int8")  # several threads share the rows
    y, _ = Device("nv_full", num_threads=3).run([Rubik(2, 2, precision="int8")], big)
    assert_same(y, ref.rubik_contract(big, 2, 2), "3 threads")


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("sx, sy", [(2, 2), (2, 1), (3, 2), (1, 2)])
@pytest.mark.parametrize("threads", [1, 2])
def test_rows_of_whole_vectors_and_a_tail(precision, sx, sy, threads):
    """Rows wider than the interleave's vectors (71 elements: 32-byte steps of every element
    size, then a tail), many rows to an item (9 of 70 rows) and items across threads: a
    nearest upsampling's shape, against the reference and the definition."""
    x = _data((1, sx * sy * 70, 9, 71), precision, seed=7 * sx + sy)
    y, _ = Device("nv_full", num_threads=threads).run([Rubik(sx, sy, precision=precision)], x)
    assert_same(y, ref.rubik_contract(x, sx, sy), f"{sx}x{sy} contract")
    for a in range(sy):
        for b in range(sx):
            assert_same(y[:, :, a::sy, b::sx], x[:, (a * sx + b) * 70:(a * sx + b + 1) * 70],
                        f"phase ({a}, {b})")


@pytest.mark.parametrize("mode", ["fused", "independent"])
def test_both_modes_and_both_presets_contract_the_same(mode):
    x = _data((1, 8, 3, 3), "int8")
    for name in ("nv_large", "nv_full"):
        y, _ = Device(name).run([Rubik(2, 2, precision="int8")], x, mode=mode)
        assert_same(y, ref.rubik_contract(x, 2, 2), name)


# --- refusals -----------------------------------------------------------------------------------

X = np.zeros((1, 8, 3, 4), np.float32)


@pytest.mark.parametrize("op, error, message", [
    (Rubik(0, 2), AccelInvalidError, "stride_x = 0 is outside [1, 32]"),
    (Rubik(2, 33), AccelInvalidError, "stride_y = 33 is outside [1, 32]"),
    (Rubik(2.0, 2), AccelDtypeError, "rubik stride_x = 2.0 is not an integer"),
    (Rubik(2, True), AccelDtypeError, "rubik stride_y = True is not an integer"),
    (Rubik(mode="transpose"), AccelInvalidError, "rubik mode = 'transpose' is not one of"),
    (Rubik(mode="split"), AccelUnsupportedError, "mode = split: the simulator models contract"),
    (Rubik(mode="merge"), AccelUnsupportedError, "mode = merge"),
    (Rubik(3, 1), AccelShapeError,
     "input channels 8 are not a multiple of stride_x = 3 x stride_y = 1"),
    (Rubik(4, 4), AccelShapeError, "input channels 8 are not a multiple of stride_x = 4"),
    (Rubik(precision="fp64"), AccelInvalidError, "fp64"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_each_field_is_checked_and_named(op, error, message):
    pattern = message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    with pytest.raises(error, match=pattern):
        DEVICE.run([op], X)
    with pytest.raises(error, match=pattern):
        estimate_chain("nv_full", [op], X.shape)


@pytest.mark.parametrize("shape, sx, sy, field", [
    ((1, 4, 2, 4097), 2, 2, "output width = 8194"),
    ((1, 4, 4097, 2), 2, 2, "output height = 8194"),
    ((1, 4, 2, 8193), 1, 4, "input width = 8193"),
    ((1, 8196, 1, 1), 2, 2, "input channels = 8196"),
    ((1, 4, 8193, 1), 4, 1, "input height = 8193"),
])
def test_nvdlas_8192_limit_per_dimension(shape, sx, sy, field):
    with pytest.raises(AccelUnsupportedError, match=f"{field} exceeds RUBIK's 8192"):
        estimate_chain("nv_full", [Rubik(sx, sy)], shape)
    estimate_chain("nv_full", [Rubik(2, 2)], (1, 4, 4096, 4096))  # at the limit: fine


def test_nv_small_has_no_rubik():
    with pytest.raises(AccelUnsupportedError, match="configuration nv_small has no RUBIK engine"):
        Device("nv_small").run([Rubik(2, 2, precision="int8")], X.astype(np.int8))
    with pytest.raises(AccelUnsupportedError, match="nv_small has no RUBIK engine"):
        estimate_chain("nv_small", [Rubik(2, 2)], X.shape)
    assert "rubik" not in AccelConfig.preset("nv_small").features
    assert "rubik" in AccelConfig.preset("nv_full").features
    no_rubik = AccelConfig.preset("nv_full").replace(
        features=tuple(f for f in AccelConfig.preset("nv_full").features if f != "rubik"))
    with pytest.raises(AccelUnsupportedError, match="has no RUBIK engine"):
        estimate_chain(no_rubik, [Rubik(2, 2)], X.shape)


def test_precision_must_be_the_tensors_and_the_configurations():
    with pytest.raises(AccelDtypeError, match="precision fp16 differs from the input's fp32"):
        DEVICE.run([Rubik(precision="fp16")], X)
    with pytest.raises(AccelUnsupportedError, match="fp16 is not supported by configuration "
                                                    "nv_large"):
        Device("nv_large").run([Rubik(precision="fp16")], X.astype(np.float16))
    with pytest.raises(AccelDtypeError, match="a fp16 RUBIK moves float16 data, got float32"):
        ref.run_op(Rubik(precision="fp16"), X)
    with pytest.raises(AccelShapeError, match="channels 6 are not a multiple"):
        ref.rubik_contract(np.zeros((1, 6, 2, 2)), 2, 2)


@pytest.mark.parametrize("mode", ["fused", "independent"])
@pytest.mark.parametrize("chain", [[Rubik(), Sdp(act="relu")], [Sdp(act="relu"), Rubik()],
                                   [Rubik(), Rubik(1, 1)]], ids=["rubik_sdp", "sdp_rubik",
                                                                 "rubik_rubik"])
def test_a_rubik_runs_alone(chain, mode):
    with pytest.raises(AccelInvalidError, match=r"RUBIK\): a RUBIK contract runs alone "
                                                r"\(num_ops = 2"):
        DEVICE.run(chain, X, mode=mode)


def test_overlap_and_the_output_tensor_are_checked():
    buffer = np.zeros(2 * 96, np.float32)
    source = buffer[:96].reshape(1, 8, 3, 4)
    with pytest.raises(AccelInvalidError, match="a contract needs separate source and "
                                                "destination"):
        DEVICE.run([Rubik()], source, out=buffer[50:146])
    DEVICE.run([Rubik()], source, out=buffer[96:])  # adjacent: fine
    # the C library checks the output tensor it is given (Device.run passes the inferred one)
    x = np.ones((1, 8, 3, 4), np.float32)
    out = np.zeros(96, np.float32)
    op = ffi.new("accel_op[]", 1)
    Rubik(2, 2).lower(op[0])
    tensor_in = ffi.new("accel_tensor*", {"data": ffi.cast("void*", x.ctypes.data), "n": 1,
                                          "c": 8, "h": 3, "w": 4, "precision": lib.ACCEL_FP32})
    for shape in ((1, 2, 8, 6), (1, 8, 3, 4), (2, 2, 3, 8)):
        tensor_out = ffi.new("accel_tensor*", {"data": ffi.cast("void*", out.ctypes.data),
                                               "n": shape[0], "c": shape[1], "h": shape[2],
                                               "w": shape[3], "precision": lib.ACCEL_FP32})
        status = lib.accel_run(DEVICE._handle, op, 1, tensor_in, tensor_out,
                               lib.ACCEL_MODE_FUSED, ffi.NULL, ffi.NULL, ffi.NULL)
        assert status == lib.ACCEL_ERR_SHAPE
        assert "the chain produces 1x2x6x8" in ffi.string(lib.accel_last_error()).decode()
    assert not out.any()


def test_vocabulary_and_output_shape():
    assert ENGINES["RUBIK"].feature == "rubik" and RUBIK_MODES.code("contract") == 0
    assert DEVICE.output_shape([Rubik(3, 2)], (2, 12, 5, 7)) == (2, 2, 10, 21)
    with pytest.raises(AccelInvalidError, match="or one Bdma or Rubik"):
        DEVICE.run(Rubik(), X)


# --- cost ---------------------------------------------------------------------------------------

def test_cost_by_hand():
    """nv_full: 32-byte atoms, fp32 charged as 2-byte fp16, DRAM 20 bytes per cycle, 64-byte
    bursts, 0.5 turnaround cycle per burst written, latency 1,200; RUBIK 64 bytes per cycle.
    (1, 4 x 8, 3, 5) contracted 2 x 2: every input position holds 4 phase groups of 8 channels,
    each one atom (16 B padded to 32): read 15 x 4 x 32 = 1,920 B; the output (1, 8, 6, 10)
    is 60 positions of one atom: 1,920 B. Compute ceil(1,920 / 64) = 30 cycles; DRAM 30 bursts
    each way: 1,200 + ceil(3,840 / 20 + 30 x 0.5) = 1,407 cycles, the long pole. Energy: the
    DRAM bytes at 162.5 pJ, nothing else."""
    stats = estimate_chain("nv_full", [Rubik(2, 2)], (1, 32, 3, 5)).ops[0]
    assert (stats.input_bytes, stats.bytes_read, stats.bytes_written) == (1920, 1920, 1920)
    assert stats.weight_bytes == stats.operand_bytes == stats.macs == 0
    assert stats.compute_cycles == 30 and stats.memory_cycles == stats.cycles == 1407
    assert stats.dram_read_bytes == stats.dram_write_bytes == 1920
    assert stats.energy_pj == stats.dram_energy_pj == pytest.approx(3840 * 162.5)
    assert stats.engine_energy_pj == stats.mac_energy_pj == stats.cbuf_energy_pj == 0


def test_each_phase_group_is_read_as_whole_atoms():
    """int8, C' = 20 (4 x 20 = 80 channels): each phase group starts on its own 32-byte
    surface (NVDLA's D_CONTRACT_STRIDE_0 = ceil(C' x bytes / 32) surfaces), so a position
    reads 4 x 32 = 128 B, not the 96 B of 80 dense channels; the output's 20 channels are one
    atom per position."""
    config = ideal_dram("nv_full")
    stats = estimate_chain(config, [Rubik(2, 2, precision="int8")], (2, 80, 3, 4)).ops[0]
    assert stats.input_bytes == 2 * 3 * 4 * 4 * 32
    assert stats.bytes_written == 2 * 6 * 8 * 32
    assert stats.memory_cycles == math.ceil((3072 + 3072) / 20)
    # C' = 32 int8 channels fill the atom: the groups are the dense tensor exactly
    dense = estimate_chain(config, [Rubik(2, 2, precision="int8")], (1, 128, 3, 4)).ops[0]
    assert dense.input_bytes == 12 * 128 == dense.bytes_written


def test_compute_cycles_follow_rubik_bytes_per_cycle():
    """With DRAM out of the way the RUBIK's data path is the long pole: the larger stream
    over rubik_bytes_per_cycle (3 x 2 stride: reads 6 groups of one atom per position)."""
    fast_dram = ideal_dram("nv_full").replace(dram_bytes_per_s=1e13)
    for width in (64, 16, 1):
        config = fast_dram.replace(rubik_bytes_per_cycle=width)
        stats = estimate_chain(config, [Rubik(3, 2)], (1, 6 * 16, 7, 9)).ops[0]
        assert stats.input_bytes == stats.bytes_written == 63 * 6 * 32
        assert stats.compute_cycles == stats.cycles == math.ceil(63 * 6 * 32 / width)
    presets = {name: AccelConfig.preset(name).rubik_bytes_per_cycle
               for name in ("nv_small", "nv_large", "nv_full")}
    assert presets == {"nv_small": 8, "nv_large": 32, "nv_full": 64}
    with pytest.raises(AccelInvalidError, match="rubik_bytes_per_cycle = 0 is outside"):
        AccelConfig.preset("nv_full").replace(rubik_bytes_per_cycle=0)
    # a configuration written before the field existed reads nv_full's
    old = AccelConfig.preset("nv_large").to_dict()
    del old["rubik_bytes_per_cycle"]
    assert AccelConfig.from_dict(old).rubik_bytes_per_cycle == 64


@pytest.mark.parametrize("precision", PRECISIONS)
def test_estimate_equals_the_profiled_run_and_the_timeline_has_a_rubik_track(precision):
    x = _data((2, 12, 5, 7), precision)
    ops = [Rubik(3, 2, precision=precision)]
    profile_enable(True)
    try:
        _, stats = DEVICE.run(ops, x, mode="independent", label="f0.1 accel.deconv")
    finally:
        profile_enable(False)
    expected = estimate_chain("nv_full", ops, x.shape, mode="independent")
    assert stats == dataclasses.replace(expected, label="f0.1 accel.deconv")
    (record,) = profile_records()
    assert record == stats and record.ops[0].precision == precision
    with ac.profile() as prof:
        DEVICE.run(ops, x, label="f0.1 accel.deconv")
    trace = json.loads(json.dumps(prof.chrome_trace("nv_full")))
    tracks = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
              if e["ph"] == "M" and e["name"] == "thread_name"}
    rubik = [e for e in trace["traceEvents"] if e["ph"] == "X" and tracks[e["tid"]] == "RUBIK"]
    assert [e["args"]["op"] for e in rubik if e["cat"] == "compute"] == ["rubik:contract"]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_observer_sees_the_input_and_the_output(precision):
    class Collector:
        def __init__(self):
            self.seen = {}

        def add(self, label, op_index, x):
            self.seen[(label, op_index)] = x.copy()

    x = _data((1, 8, 2, 3), precision)
    with observer.observing(Collector()) as seen:
        y, _ = DEVICE.run([Rubik(2, 2, precision=precision)], x, label="f0.4 accel.deconv")
    held = np.int8 if precision == "int8" else np.float32  # fp16 comes widened
    assert sorted(seen.seen) == [("f0.4 accel.deconv", observer.INPUT),
                                 ("f0.4 accel.deconv", 0)]
    assert_same(seen.seen[("f0.4 accel.deconv", 0)], y.astype(held), "output")


# --- deconvolution: CONV + contract -------------------------------------------------------------

def _deconv_on_device(x, weight, bias, stride, padding, output_padding=0, groups=1):
    plan = deconv_as_conv_weights(weight, stride, padding, output_padding, groups=groups)
    conv = [Conv(plan.weight, padding=plan.padding)]
    if bias is not None:
        conv.append(Sdp(shift=plan.bias(bias)))
    phases, _ = DEVICE.run(conv, x)
    y, _ = DEVICE.run([Rubik(plan.stride_x, plan.stride_y)], phases)
    out_h, out_w = plan.output_size(*x.shape[2:])
    assert y.shape[2:] == plan.contract_size(*x.shape[2:])
    return y[:, :, :out_h, :out_w], plan


@pytest.mark.parametrize("kernel, stride, padding, output_padding, groups", [
    (2, 2, 0, 0, 1),   # the FPN / U-Net upsampler
    (4, 2, 1, 0, 1),   # DB heads, DCGAN
    (3, 2, 1, 1, 1),   # ResNet-style decoders
    (4, 2, 1, 0, 3),   # grouped
    (3, 2, 1, 0, 1),   # odd output: the contract writes one row and column more
    (5, (3, 2), 2, 0, 1),
])
def test_transposed_conv_is_conv_plus_contract(kernel, stride, padding, output_padding, groups):
    rng = np.random.default_rng(kernel)
    c_in, k = 6, 9
    x = rng.standard_normal((2, c_in, 5, 7)).astype(np.float32)
    weight = rng.standard_normal((c_in, k // groups, kernel, kernel)).astype(np.float32)
    bias = rng.standard_normal(k).astype(np.float32)
    y, plan = _deconv_on_device(x, weight, bias, stride, padding, output_padding, groups)
    expected = F.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(weight),
                                  torch.from_numpy(bias), stride=stride, padding=padding,
                                  output_padding=output_padding, groups=groups).numpy()
    assert_close(y, expected, rtol=1e-5, what=f"conv_transpose2d k{kernel} s{stride} p{padding}")
    exact = (kernel, stride, padding, output_padding) in ((2, 2, 0, 0), (4, 2, 1, 0),
                                                          (3, 2, 1, 1))
    assert plan.exact(5, 7) == exact


def test_the_plan_folds_the_padding_into_the_conv():
    """kernel 2, stride 2: a 1x1 CONV of 4K channels, no padding; kernel 4, stride 2,
    padding 1: every phase reads 2 taps per side, one phase a row further than the other, so
    one 3x3 window with padding 1 holds both (the taps it does not use are zeros)."""
    w = np.ones((3, 5, 2, 2), np.float32)
    plan = deconv_as_conv_weights(w, 2, 0)
    assert plan.weight.shape == (20, 3, 1, 1) and plan.padding == (0, 0, 0, 0)
    plan = deconv_as_conv_weights(np.ones((3, 5, 4, 4), np.float32), 2, 1)
    assert plan.weight.shape == (20, 3, 3, 3) and plan.padding == (1, 1, 1, 1)
    assert int((plan.weight != 0).sum()) == 4 * 5 * 3 * 4  # 2 x 2 taps per phase
    assert plan.bias(np.arange(5.0)).tolist() == list(np.arange(5.0)) * 4
    with pytest.raises(AccelShapeError, match=r"bias has shape \(4,\), not \(5,\)"):
        plan.bias(np.zeros(4))
    with pytest.raises(AccelInvalidError, match="output_padding 2"):
        deconv_as_conv_weights(w, 2, 0, output_padding=2)
    with pytest.raises(AccelDtypeError, match="stride = 2.5 is not an integer"):
        deconv_as_conv_weights(w, 2.5, 0)
    with pytest.raises(AccelShapeError, match="groups = 2 does not divide"):
        deconv_as_conv_weights(w, 2, 0, groups=2)
    with pytest.raises(AccelUnsupportedError, match="padding = 2 with kernel 2 and stride 2"):
        deconv_as_conv_weights(w, 2, 2)


@pytest.mark.parametrize("scale", [2, 3, (2, 3)])
def test_nearest_upsample_is_conv_of_copies_plus_contract(scale):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 5, 4, 6)).astype(np.float32)
    plan = upsample_nearest_as_conv_weights(5, scale)
    assert plan.weight.shape[2:] == (1, 1) and plan.padding == (0, 0, 0, 0)
    phases, _ = DEVICE.run([Conv(plan.weight)], x)
    y, _ = DEVICE.run([Rubik(plan.stride_x, plan.stride_y)], phases)
    factor = scale if isinstance(scale, tuple) else (scale, scale)
    expected = F.interpolate(torch.from_numpy(x), scale_factor=factor, mode="nearest").numpy()
    assert_same(y, expected, f"nearest x{scale}")  # copies: exact
    # the same channel-extended cube without MACs: s*s BDMA copies of the input
    copies = np.zeros_like(phases)
    for phase in range(factor[0] * factor[1]):
        DEVICE.run([ac.Bdma(5, dst_offset=phase * 5, dst_channels=copies.shape[1])], x,
                   out=copies)
    assert_same(copies, phases, "BDMA copies")


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_nearest_upsample_in_fp16_and_int8_is_exact(precision):
    """A one-hot CONV (weight 1) and a contract move values unchanged: in fp16 the SDP after
    the CONV rounds the exact copy to itself; in int8 a unit converter keeps the codes."""
    x = _data((1, 4, 3, 5), precision)
    dtype = PRECISIONS[precision]
    plan = upsample_nearest_as_conv_weights(4, 2, dtype=dtype)
    sdp = Sdp(precision=precision) if precision == "fp16" else Sdp(precision="int8")
    phases, _ = DEVICE.run([Conv(plan.weight, precision=precision), sdp], x)
    y, _ = DEVICE.run([Rubik(2, 2, precision=precision)], phases)
    assert_same(y, x.repeat(2, axis=2).repeat(2, axis=3), f"{precision} nearest x2")


# --- properties ---------------------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(n=st.integers(1, 2), c=st.integers(1, 5), h=st.integers(1, 6), w=st.integers(1, 6),
       sx=st.integers(1, 4), sy=st.integers(1, 4), precision=st.sampled_from(list(PRECISIONS)),
       mode=st.sampled_from(["fused", "independent"]))
def test_property_contract_is_a_permutation_the_estimate_costs(n, c, h, w, sx, sy, precision,
                                                               mode):
    """Any shape and factors: the run equals the reference, it is a permutation of the input
    (space-to-depth with the phase outermost undoes it), and the run costs its estimate."""
    x = _data((n, c * sx * sy, h, w), precision, seed=n + c + h + w)
    op = Rubik(sx, sy, precision=precision)
    y, stats = DEVICE.run([op], x, mode=mode)
    assert_same(y, ref.run_op(op, x))
    undone = y.reshape(n, c, h, sy, w, sx).transpose(0, 3, 5, 1, 2, 4).reshape(x.shape)
    assert_same(undone, x, "space-to-depth of the contract")
    assert stats == estimate_chain("nv_full", [op], x.shape, mode=mode)


def test_a_batch_norm_and_relu_after_the_deconvolution_run_in_the_conv_s_sdp():
    """The contract permutes: the SDP after the CONV applies the tiled per-channel scale and
    shift and the activation before it, in int8's converters' place too."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
    w = rng.standard_normal((4, 6, 4, 4)).astype(np.float32)
    scale, shift = rng.uniform(0.5, 2, 6).astype(np.float32), rng.standard_normal(6).astype(
        np.float32)
    plan = deconv_as_conv_weights(w, 2, 1)
    phases, _ = DEVICE.run([Conv(plan.weight, padding=plan.padding),
                            Sdp(scale=plan.per_channel(scale), shift=plan.per_channel(shift),
                                act="relu")], x)
    y, _ = DEVICE.run([Rubik(2, 2)], phases)
    t = F.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), stride=2, padding=1)
    expected = torch.relu(t * torch.from_numpy(scale)[:, None, None]
                          + torch.from_numpy(shift)[:, None, None]).numpy()
    assert_close(y, expected, rtol=1e-5)
    with pytest.raises(AccelShapeError, match=r"scale has shape \(4,\), not \(6,\)"):
        plan.per_channel(np.ones(4), "scale")
