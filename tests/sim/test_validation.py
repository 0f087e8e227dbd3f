"""Bad input: every rejection is a typed exception whose message names the field and value."""
import dataclasses

import numpy as np
import pytest

from accel_codegen import (AccelBufferError, AccelError, AccelInvalidError,
                           AccelShapeError, AccelUnsupportedError, Conv, Device, Pool, Sdp)
from accel_codegen._accel_ffi import ffi, lib
from accel_codegen.sim.ops import AccelDtypeError
from accel_codegen.sim.ops import LutInt8

DEVICE = Device("nv_full")
X = np.ones((1, 4, 8, 8), dtype=np.float32)
W = np.ones((8, 4, 3, 3), dtype=np.float32)

# One past each limit of accel.h: the rejections follow the header, whatever its values.
OVER_STRIDE = lib.ACCEL_MAX_CONV_STRIDE + 1
OVER_PAD = lib.ACCEL_MAX_CONV_PAD + 1
OVER_KERNEL = lib.ACCEL_MAX_CONV_KERNEL + 1
OVER_POOL = lib.ACCEL_MAX_POOL_KERNEL + 1
OVER_CHAIN = lib.ACCEL_MAX_CHAIN_OPS + 1
OVER_SHIFT = lib.ACCEL_MAX_SHIFT + 1

REJECTIONS = [
    ("stride_zero", [Conv(W, stride=0)], AccelInvalidError, "stride_h = 0"),
    ("stride_over_limit", [Conv(W, stride=(1, OVER_STRIDE))], AccelInvalidError,
     f"stride_w = {OVER_STRIDE}"),
    ("negative_pad", [Conv(W, padding=(0, -1, 0, 0))], AccelInvalidError, "pad_left = -1"),
    ("pad_over_limit", [Conv(W, padding=OVER_PAD)], AccelInvalidError, f"pad_top = {OVER_PAD}"),
    ("dilation_zero", [Conv(W, dilation=0)], AccelInvalidError, "dilation_h = 0"),
    ("groups_not_dividing", [Conv(np.ones((8, 2, 3, 3), np.float32), groups=3)],
     AccelShapeError, "groups = 3"),
    ("kernel_larger_than_input", [Conv(np.ones((8, 4, 9, 9), np.float32))], AccelShapeError,
     "9x9 kernel"),
    ("kernel_over_limit", [Conv(np.ones((1, 4, OVER_KERNEL, 1), np.float32),
                                padding=(OVER_KERNEL // 2, 0, OVER_KERNEL // 2, 0))],
     AccelInvalidError, f"kernel_h = {OVER_KERNEL}"),
    ("weights_wrong_channels", [Conv(np.ones((8, 3, 3, 3), np.float32))], AccelInvalidError,
     "3 input channels per group"),
    ("pool_kernel_over_limit", [Pool("max", OVER_POOL, 1)], AccelUnsupportedError,
     f"kernel {OVER_POOL}x{OVER_POOL} exceeds the PDP limit of {lib.ACCEL_MAX_POOL_KERNEL}"),
    ("pool_pad_not_below_kernel", [Pool("max", 2, 2, padding=2)], AccelInvalidError,
     "pad_top = 2"),
    ("pool_unknown_kind", [Pool("median", 2, 2)], AccelInvalidError, "'median'"),
    ("scale_wrong_length", [Sdp(scale=np.ones(3))], AccelInvalidError,
     "scale has 3 values for 4 channels"),
    ("operand_wrong_shape", [Sdp(ew_op="add", operand=np.ones((1, 4, 8, 7)))],
     AccelInvalidError, "operand of shape (1, 4, 8, 7)"),
    ("ew_without_operand", [Sdp(ew_op="add")], AccelBufferError, "op 0 (SDP): ew_operand is NULL"),
    ("prelu_without_slope", [Conv(W), Sdp(act="prelu")], AccelBufferError,
     "op 1 (SDP): prelu_slope is NULL"),
    ("clip_inverted", [Sdp(act="clip", clip=(6.0, 0.0))], AccelInvalidError, "clip_min = 6"),
    ("unknown_activation", [Sdp(act="softsign")], AccelInvalidError, "'softsign'"),
    ("fused_out_of_order", [Sdp(act="relu"), Conv(W)], AccelInvalidError, "CONV -> SDP -> PDP"),
    ("fused_two_convs", [Conv(np.ones((4, 4, 1, 1), np.float32)), Conv(W)], AccelInvalidError,
     "op 1 (CONV)"),
    ("empty_chain", [], AccelInvalidError, "0"),
    ("too_many_ops", [Sdp(act="relu")] * OVER_CHAIN, AccelInvalidError, f"{OVER_CHAIN}"),
    ("huge_stride_overflows", [Conv(W, stride=2**40)], AccelInvalidError, "op 0 (CONV)"),
]


@pytest.mark.parametrize("name,chain,error,words", REJECTIONS, ids=[r[0] for r in REJECTIONS])
def test_rejection_names_the_bad_value(name, chain, error, words):
    with pytest.raises(error) as info:
        DEVICE.run(chain, X)
    assert words in str(info.value)
    assert isinstance(info.value, AccelError)


def test_rejection_leaves_output_untouched():
    out = np.full((1, 8, 8, 8), 7.0, dtype=np.float32)
    with pytest.raises(AccelInvalidError):
        DEVICE.run([Conv(W, padding=1), Sdp(act="clip", clip=(1.0, 0.0))], X, out=out)
    assert (out == 7.0).all()


def test_output_of_wrong_size_is_rejected():
    with pytest.raises(AccelInvalidError, match="out must be"):
        DEVICE.run([Conv(W, padding=1)], X, out=np.empty((1, 8, 8, 7), np.float32))


def test_unsupported_features_on_nv_small():
    small = Device("nv_small")
    with pytest.raises(AccelUnsupportedError, match="element-wise unit, which nv_small lacks"):
        small.run([Sdp(ew_op="add", operand=X)], X)
    with pytest.raises(AccelUnsupportedError, match="lookup table, which nv_small lacks"):
        small.run([Sdp(act="sigmoid")], X)
    with pytest.raises(AccelUnsupportedError, match="fp16 is not supported by configuration nv_small"):
        small.run([Sdp(act="relu", precision="fp16")], X, precision="fp16")


def test_unimplemented_precision_is_an_error_not_a_wrong_answer():
    """nv_full has int16, the simulator does not implement it."""
    with pytest.raises(AccelUnsupportedError, match="int16 is not implemented"):
        DEVICE.run([Sdp(act="relu", precision="int16")], X.astype(np.int16))
    with pytest.raises(AccelInvalidError, match="precision fp16 differs from the input's fp32"):
        DEVICE.run([Sdp(act="relu", precision="fp16")], X)


# --- INT8 and FP16 --------------------------------------------------------------------------

X8 = np.ones((1, 4, 8, 8), dtype=np.int8)
W8 = np.ones((8, 4, 3, 3), dtype=np.int8)
CONV8 = Conv(W8, padding=1, precision="int8")
ONES8 = dict(mul=np.ones(8, np.int16), rshift=np.zeros(8, np.uint8))
LUT8 = LutInt8(np.zeros(257, np.int16), np.zeros(65, np.int16), 0, -100, 2, 5)

INT8_REJECTIONS = [
    ("conv_alone", [Conv(W8, precision="int8")], AccelInvalidError,
     "op 0 (CONV): a int8 CONV must be followed by an SDP"),
    ("conv_then_pool", [Conv(W8, precision="int8"), Pool("max", 2, 2, precision="int8")],
     AccelInvalidError, "must be followed by an SDP"),
    ("sdp_with_scale", [CONV8, Sdp(scale=np.ones(8), precision="int8")], AccelInvalidError,
     "op 1 (SDP): scale, shift and prelu_slope are float parameters; INT8 uses bias"),
    ("sdp_with_shift", [Sdp(shift=np.ones(4), precision="int8")], AccelInvalidError,
     "scale, shift and prelu_slope are float parameters"),
    ("sdp_with_prelu_slope", [Sdp(act="prelu", prelu_slope=np.ones(4), precision="int8")],
     AccelInvalidError, "scale, shift and prelu_slope are float parameters"),
    ("rshift_63", [CONV8, Sdp(mul=np.ones(8, np.int16),
                              rshift=np.array([0, 1, 2, OVER_SHIFT, 0, 0, 0, 0], np.uint8),
                              precision="int8")], AccelInvalidError, f"rshift[3] = {OVER_SHIFT}"),
    ("out_shift_63", [Sdp(out_mul=1, out_shift=OVER_SHIFT, precision="int8")], AccelInvalidError,
     f"out_shift = {OVER_SHIFT}"),
    ("ew_shift_63", [Sdp(ew_op="add", operand=X8, ew_shift=OVER_SHIFT, precision="int8")],
     AccelInvalidError, f"ew_shift = {OVER_SHIFT}"),
    ("prelu_shift_negative", [Sdp(act="prelu", prelu_mul=np.ones(4, np.int16),
                                  prelu_shift=-1, precision="int8")],
     AccelInvalidError, "prelu_shift = -1"),
    ("out_mul_over_int16", [Sdp(out_mul=32768, precision="int8")], AccelInvalidError,
     "out_mul = 32768"),
    ("ew_mul_over_int16", [Sdp(ew_op="add", operand=X8, ew_mul=-32769, precision="int8")],
     AccelInvalidError, "ew_mul = -32769"),
    ("clip_lo_above_clip_hi", [CONV8, Sdp(**ONES8, act="clip", clip_lo=10, clip_hi=5,
                                          precision="int8")], AccelInvalidError, "clip_hi = 5"),
    ("clip_hi_over_int8", [Sdp(act="clip", clip_lo=0, clip_hi=128, precision="int8")],
     AccelInvalidError, "clip_hi = 128"),
    ("clip_bounds_without_clip", [Sdp(act="relu", clip_lo=0, clip_hi=6, precision="int8")],
     AccelInvalidError, "clip_lo = 0, clip_hi = 6: the INT8 clip bounds are read by act = "
     "'clip' only, not 'relu'"),
    ("in_zero_over_int8", [Sdp(in_zero=128, precision="int8")], AccelInvalidError,
     "in_zero = 128"),
    ("conv_in_zero_under_int8", [Conv(W8, precision="int8", in_zero=-129), Sdp(precision="int8")],
     AccelInvalidError, "in_zero = -129"),
    ("out_zero_over_int8", [Sdp(out_zero=200, precision="int8")], AccelInvalidError,
     "out_zero = 200"),
    ("pool_zero_over_int8", [Pool("avg", 2, 2, precision="int8", zero=128)], AccelInvalidError,
     "zero = 128"),
    ("sigmoid_without_tables", [CONV8, Sdp(**ONES8, act="sigmoid", precision="int8")],
     AccelBufferError, "act = sigmoid needs its INT8 tables (lut)"),
    ("tables_without_lut_act", [Sdp(act="relu", lut=LUT8, precision="int8")],
     AccelInvalidError, "lut is set but act = relu is not a lookup-table activation"),
    ("lut_select_32", [Sdp(act="tanh", lut=dataclasses.replace(LUT8, le_index_select=32),
                           precision="int8")], AccelInvalidError, "lut le_index_select = 32"),
    ("lut_slope_shift_63", [Sdp(act="tanh", precision="int8", lut=dataclasses.replace(
        LUT8, overflow_shift=OVER_SHIFT))], AccelInvalidError,
     f"lut overflow_shift = {OVER_SHIFT}"),
    ("lut_slope_scale_over_int16", [Sdp(act="exp", precision="int8", lut=dataclasses.replace(
        LUT8, underflow_scale=32768))], AccelInvalidError, "lut underflow_scale = 32768"),
    ("prelu_without_mul", [Sdp(act="prelu", precision="int8")], AccelBufferError,
     "prelu_mul is NULL"),
    ("bias_wrong_length", [CONV8, Sdp(bias=np.ones(3, np.int32), precision="int8")],
     AccelInvalidError, "bias has 3 values for 8 channels"),
    ("rshift_wrong_length", [Sdp(rshift=np.ones(5, np.uint8), precision="int8")],
     AccelInvalidError, "rshift has 5 values for 4 channels"),
    ("mixed_precisions", [CONV8, Sdp(precision="fp32")], AccelInvalidError,
     "op 1 (SDP): precision fp32 differs from the input's int8"),
    ("in_zero_after_conv", [CONV8, Sdp(in_zero=5, precision="int8")], AccelInvalidError,
     "in_zero = 5 is for an SDP that reads memory"),
]


@pytest.mark.parametrize("name,chain,error,words", INT8_REJECTIONS,
                         ids=[r[0] for r in INT8_REJECTIONS])
def test_int8_rejection_names_the_bad_value(name, chain, error, words):
    with pytest.raises(error) as info:
        DEVICE.run(chain, X8)
    assert words in str(info.value)
    assert isinstance(info.value, AccelError)


def test_int8_converter_fields_outside_int8_are_rejected():
    for sdp, x in ((Sdp(bias=np.ones(4, np.int32)), X),
                   (Sdp(out_zero=3), X),
                   (Sdp(ew_op="add", operand=X, ew_mul=2), X),
                   (Sdp(act="clip", clip_lo=-1, clip_hi=1), X),
                   (Sdp(act="sigmoid", lut=LUT8), X),
                   (Sdp(in_zero=1, precision="fp16"), X.astype(np.float16))):
        with pytest.raises(AccelInvalidError, match="INT8 converter fields .* are set in "
                                                    f"precision {sdp.precision}"):
            DEVICE.run([sdp], x)
    with pytest.raises(AccelInvalidError, match="in_zero = 3"):
        DEVICE.run([Conv(W, in_zero=3), Sdp()], X)


def test_fp16_rejections():
    x16 = X.astype(np.float16)
    with pytest.raises(AccelInvalidError,
                       match="a fp16 CONV must be followed by an SDP"):
        DEVICE.run([Conv(W.astype(np.float16), precision="fp16")], x16)
    small = Device("nv_small")
    with pytest.raises(AccelUnsupportedError,
                       match="precision fp16 is not supported by configuration nv_small"):
        small.run([Conv(W.astype(np.float16), precision="fp16"), Sdp(precision="fp16")], x16)
    with pytest.raises(AccelUnsupportedError, match="fp16 is not supported by configuration "
                                                    "nv_small"):
        small.run([Pool("max", 2, 2, precision="fp16")], x16)


def test_packed_weights_must_match_their_conv():
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, (8, 4, 3, 3)).astype(np.int8)
    conv = Conv(w, padding=1, precision="int8")
    sdp = Sdp(precision="int8")
    packed = conv.pack("nv_full")
    DEVICE.run([dataclasses.replace(conv, packed=packed), sdp], X8)  # made for it: accepted
    # the packing depends on the weights' geometry (K, C, R, S, groups) and the input channels
    others = [("kernel", Conv(w[:, :, :2, :2].copy(), padding=1, precision="int8"), X8),
              ("out_c", Conv(w[:4].copy(), padding=1, precision="int8"), X8),
              ("groups", Conv(w[:, :2].copy(), padding=1, groups=2, precision="int8"), X8),
              ("in_c", Conv(w, padding=1, groups=2, precision="int8"),
               np.ones((1, 8, 8, 8), np.int8))]
    for what, other, x in others:
        with pytest.raises(AccelInvalidError, match=r"op 0 \(CONV\): weights_packed(_bytes = "
                                                    r"\d+, this .* packing needs| .* was not "
                                                    r"packed for this)"):
            DEVICE.run([dataclasses.replace(other, packed=packed), sdp], x)
    with pytest.raises(AccelInvalidError, match="in_c = 0"):
        conv.pack("nv_full", in_c=0)
    with pytest.raises(AccelInvalidError,
                       match="weights_packed is for INT8 and FP16 weights, Winograd mode and "
                             "FP32 1x1 and 3x3 weights for C16 runs, not these direct fp32 "
                             "ones"):
        DEVICE.run([Conv(W, padding=1, packed=packed), Sdp()], X)
    with pytest.raises(AccelInvalidError, match="fp32 in direct mode: only INT8 and FP16 weights"):
        Conv(W, padding=1).pack("nv_full")
    # an int8 packing is not an fp16 one (and is too short for it; its size is the build's
    # layout's, conv/i8.h: 448 bytes with VNNI, 640 in AVX2 builds, 384 plain)
    w16 = rng.standard_normal((8, 4, 3, 3)).astype(np.float16)
    assert packed.nbytes < 1216
    with pytest.raises(AccelInvalidError,
                       match=f"weights_packed_bytes = {packed.nbytes}, .* needs 1216"):
        DEVICE.run([Conv(w16, padding=1, precision="fp16", packed=packed),
                    Sdp(precision="fp16")], X.astype(np.float16))


def test_fp16_packed_weights_give_the_same_bits():
    """FP16 packing widens the weights once; the run must not change by a bit."""
    rng = np.random.default_rng(1)
    w16 = rng.standard_normal((8, 4, 3, 3)).astype(np.float16)
    x16 = rng.standard_normal((2, 4, 8, 8)).astype(np.float16)
    conv = Conv(w16, padding=1, precision="fp16")
    sdp = Sdp(shift=rng.standard_normal(8).astype(np.float16), act="relu", precision="fp16")
    plain = DEVICE.run([conv, sdp], x16)[0]
    packed = DEVICE.run([conv.packed_for("nv_full"), sdp], x16)[0]
    assert plain.dtype == np.float16 and np.array_equal(plain.view(np.uint16),
                                                        packed.view(np.uint16))


def test_input_rank_and_size_checks():
    with pytest.raises(AccelInvalidError, match="NCHW or"):
        DEVICE.run([Sdp(act="relu")], np.ones((2, 3, 4), np.float32))
    with pytest.raises(AccelInvalidError, match="is outside"):
        DEVICE.run([Sdp(act="relu")], np.ones((0, 3, 4, 4), np.float32))


def test_unknown_mode():
    with pytest.raises(AccelInvalidError, match="'turbo'"):
        DEVICE.run([Sdp(act="relu")], X, mode="turbo")


# --- the C entry points directly: NULLs, alignment, overflow, aliasing ----------------------

def _c_chain(op_setup):
    ops = ffi.new("accel_op[1]")
    op_setup(ops[0])
    return ops


def _c_tensor(shape, data=ffi.NULL):
    t = ffi.new("accel_tensor*")
    t.n, t.c, t.h, t.w = shape
    t.precision = lib.ACCEL_FP32
    t.data = data
    return t


def _relu(op):
    op.engine = lib.ACCEL_ENGINE_SDP
    op.sdp.act = lib.ACCEL_ACT_RELU
    op.sdp.precision = lib.ACCEL_FP32


def _error():
    return ffi.string(lib.accel_last_error()).decode()


def test_c_null_and_misaligned_buffers():
    buf = np.zeros(64, dtype=np.float32)
    base = buf.ctypes.data
    ops = _c_chain(_relu)
    st = lib.accel_run(DEVICE._handle, ops, 1, _c_tensor((1, 1, 2, 2)),
                       _c_tensor((1, 1, 2, 2), ffi.cast("void*", base)), 0, ffi.NULL, ffi.NULL,
                       ffi.NULL)
    assert st == lib.ACCEL_ERR_NULL and "input tensor data is NULL" in _error()
    st = lib.accel_run(DEVICE._handle, ops, 1, _c_tensor((1, 1, 2, 2), ffi.cast("void*", base + 2)),
                       _c_tensor((1, 1, 2, 2), ffi.cast("void*", base + 64)), 0, ffi.NULL,
                       ffi.NULL, ffi.NULL)
    assert st == lib.ACCEL_ERR_ALIGNMENT and "not aligned" in _error()
    assert lib.accel_run(ffi.NULL, ops, 1, ffi.NULL, ffi.NULL, 0, ffi.NULL, ffi.NULL,
                         ffi.NULL) == lib.ACCEL_ERR_NULL
    assert lib.accel_run(DEVICE._handle, ffi.NULL, 1, ffi.NULL, ffi.NULL, 0, ffi.NULL, ffi.NULL,
                         ffi.NULL) == lib.ACCEL_ERR_NULL


def test_c_overflowing_dimensions():
    ops = _c_chain(_relu)
    big = _c_tensor((65536, 65536, 65536, 65536))
    st = lib.accel_estimate(DEVICE._config_c, ops, 1, big, big, 0, ffi.NULL, ffi.NULL)
    assert st == lib.ACCEL_ERR_INVALID and "exceed the limit" in _error()

    def conv(op):
        op.engine = lib.ACCEL_ENGINE_CONV
        d = op.conv
        d.out_c, d.kernel_h, d.kernel_w = 2**30, 1, 1
        d.stride_h = d.stride_w = d.dilation_h = d.dilation_w = d.groups = 1
        d.precision = lib.ACCEL_FP32
    st = lib.accel_estimate(DEVICE._config_c, _c_chain(conv), 1, _c_tensor((1, 64, 8, 8)),
                            _c_tensor((1, 2**30, 8, 8)), 0, ffi.NULL, ffi.NULL)
    assert st == lib.ACCEL_ERR_INVALID and "exceed the limit" in _error()


def test_c_unknown_enums():
    def bad_engine(op):
        op.engine = 7
    st = lib.accel_estimate(DEVICE._config_c, _c_chain(bad_engine), 1, _c_tensor((1, 1, 2, 2)),
                            _c_tensor((1, 1, 2, 2)), 0, ffi.NULL, ffi.NULL)
    assert st == lib.ACCEL_ERR_INVALID and "engine = 7" in _error()

    def bad_act(op):
        _relu(op)
        op.sdp.act = 42
    st = lib.accel_estimate(DEVICE._config_c, _c_chain(bad_act), 1, _c_tensor((1, 1, 2, 2)),
                            _c_tensor((1, 1, 2, 2)), 0, ffi.NULL, ffi.NULL)
    assert st == lib.ACCEL_ERR_INVALID and "act = 42" in _error()
    t = _c_tensor((1, 1, 2, 2))
    t.precision = 9
    st = lib.accel_estimate(DEVICE._config_c, _c_chain(_relu), 1, t, t, 0, ffi.NULL, ffi.NULL)
    assert st == lib.ACCEL_ERR_INVALID and "precision = 9" in _error()
    st = lib.accel_estimate(DEVICE._config_c, _c_chain(_relu), 1, _c_tensor((1, 1, 2, 2)),
                            _c_tensor((1, 1, 2, 2)), 5, ffi.NULL, ffi.NULL)
    assert st == lib.ACCEL_ERR_INVALID and "mode = 5" in _error()


def test_c_overlapping_output_is_rejected_for_conv():
    buf = np.zeros(1000, dtype=np.float32)
    w = np.ones((1, 1, 1, 1), dtype=np.float32)

    def conv(op):
        op.engine = lib.ACCEL_ENGINE_CONV
        d = op.conv
        d.out_c = d.kernel_h = d.kernel_w = 1
        d.stride_h = d.stride_w = d.dilation_h = d.dilation_w = d.groups = 1
        d.precision = lib.ACCEL_FP32
        d.weights = ffi.cast("void*", w.ctypes.data)
    base = buf.ctypes.data
    st = lib.accel_run(DEVICE._handle, _c_chain(conv), 1,
                       _c_tensor((1, 1, 10, 10), ffi.cast("void*", base)),
                       _c_tensor((1, 1, 10, 10), ffi.cast("void*", base + 40)), 0, ffi.NULL,
                       ffi.NULL, ffi.NULL)
    assert st == lib.ACCEL_ERR_INVALID and "overlaps" in _error()


def test_profile_index_out_of_range():
    run = ffi.new("accel_run_stats*")
    assert lib.accel_profile_run(10**6, run, ffi.NULL) == lib.ACCEL_ERR_NOT_FOUND
    assert "outside" in _error()


def test_operand_sharing_the_output_memory_is_rejected():
    """The SDP reads its operand while the output is written: sharing memory would give a
    wrong answer, so it is an error."""
    x = np.random.default_rng(0).standard_normal((1, 4, 8, 8)).astype(np.float32)
    y = np.ones_like(x)
    with pytest.raises(AccelInvalidError, match="ew_operand .* overlaps the output"):
        DEVICE.run([Sdp(ew_op="add", operand=y)], x, out=y)
    conv = Conv(np.ones((4, 4, 1, 1), np.float32))
    with pytest.raises(AccelInvalidError, match="overlaps the output"):
        DEVICE.run([conv, Sdp(ew_op="add", operand=y)], x, out=y)


def test_c_weight_count_cannot_overflow():
    def conv(op):
        op.engine = lib.ACCEL_ENGINE_CONV
        d = op.conv
        d.out_c = 2**31 - 1
        d.kernel_h = d.kernel_w = lib.ACCEL_MAX_CONV_KERNEL  # the largest valid window
        d.stride_h = d.stride_w = d.groups = 1
        d.dilation_h = d.dilation_w = 1
        d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = lib.ACCEL_MAX_CONV_PAD
        d.precision = lib.ACCEL_FP32
    st = lib.accel_estimate(DEVICE._config_c, _c_chain(conv), 1,
                            _c_tensor((1, 2**31 - 1, 1, 1)), _c_tensor((1, 1, 1, 1)), 0,
                            ffi.NULL, ffi.NULL)
    assert st == lib.ACCEL_ERR_INVALID and "weights exceed the limit" in _error()


def test_labels_are_cut_on_a_character_boundary():
    # "é" is two bytes: the longest label that fits ACCEL_LABEL_LEN with its NUL
    _, stats = DEVICE.run([Sdp(act="relu")], X, label="é" * lib.ACCEL_LABEL_LEN)
    assert stats.label == "é" * ((lib.ACCEL_LABEL_LEN - 1) // 2)


def _convert(src, from_, dst, to, scale=1.0, zero=0):
    return lib.accel_convert(ffi.cast("void*", src.ctypes.data), from_,
                             ffi.cast("void*", dst.ctypes.data), to, src.size, scale, zero)


def test_convert_quantizes_as_the_python_definition():
    """accel_convert (what generated code runs where data enters) equals TensorQuant."""
    from accel_codegen.quantization import TensorQuant
    rng = np.random.default_rng(5)
    quant = TensorQuant(0.0375, -128)
    x = np.concatenate([rng.standard_normal(1000) * 3, (np.arange(-40, 40) + 0.5) * 0.0375,
                        [np.nan, np.inf, -np.inf, 1e30]]).astype(np.float32)
    q = np.empty(x.size, np.int8)
    assert _convert(x, lib.ACCEL_FP32, q, lib.ACCEL_INT8, quant.scale, quant.zero) == 0
    np.testing.assert_array_equal(q, quant.quantize(x))
    back = np.empty(x.size, np.float32)
    assert _convert(q, lib.ACCEL_INT8, back, lib.ACCEL_FP32, quant.scale, quant.zero) == 0
    np.testing.assert_array_equal(back, quant.dequantize(q))
    half = np.empty(x.size, np.float16)
    assert _convert(x, lib.ACCEL_FP32, half.view(np.uint16), lib.ACCEL_FP16) == 0
    with np.errstate(over="ignore"):  # 1e30 rounds to infinity, as the converter's does
        np.testing.assert_array_equal(half, x.astype(np.float16))  # round to nearest even


@pytest.mark.parametrize("scale,zero", [(0.5, 0), (0.25, -128), (0.0375, 17), (3e-5, 127)])
def test_convert_vectors_equal_the_python_definition(scale, zero):
    """Every length from 0 to 40 (whole vectors and tails) and a long run: exact halfway
    quotients (k + 0.5 with a power-of-two scale) round away from zero, NaN gives the zero
    point, infinities and huge values clamp; dequantising gives TensorQuant's floats."""
    from accel_codegen.quantization import TensorQuant
    rng = np.random.default_rng(6)
    quant = TensorQuant(scale, zero)
    halfway = (np.arange(-300, 300) + 0.5) * scale
    x = np.concatenate([halfway, rng.standard_normal(5000) * 200 * scale,
                        [np.nan, -np.nan, np.inf, -np.inf, 1e30, -1e30, 0.0, -0.0]])
    x = rng.permutation(x).astype(np.float32)
    for n in list(range(41)) + [x.size]:
        q = np.full(n, 99, np.int8)
        assert _convert(x[:n], lib.ACCEL_FP32, q, lib.ACCEL_INT8, scale, zero) == 0
        np.testing.assert_array_equal(q, quant.quantize(x[:n]))
        back = np.empty(n, np.float32)
        assert _convert(q, lib.ACCEL_INT8, back, lib.ACCEL_FP32, scale, zero) == 0
        np.testing.assert_array_equal(back, quant.dequantize(q))


@pytest.mark.parametrize("scale", [0.0375, 0.1, 1 / 3, 7.3e-3, 2.0**-99, 2.0**-101, 1e-35,
                                   np.float32(np.pi) * 2.0**20])
def test_convert_quantizes_next_to_every_tie_exactly(scale):
    """The vector quantiser (a reciprocal product, then an exact test against (m + 0.5) *
    scale) against the double division of TensorQuant: the floats nearest every tie
    (k + 0.5) * scale and 1-3 ulps either side, for scales whose reciprocal is not exact, at the
    2^-100 limit of the vector path and below it (the scalar loop), with random zero points."""
    from accel_codegen.quantization import TensorQuant
    rng = np.random.default_rng(7)
    ties = (np.arange(-400, 400) + 0.5) * np.float64(np.float32(scale))
    near = [ties.astype(np.float32)]
    for steps in (1, 2, 3):
        for direction in (np.inf, -np.inf):
            x = near[0]
            for _ in range(steps):
                x = np.nextafter(x, np.float32(direction))
            near.append(x)
    x = rng.permutation(np.concatenate(near + [np.float32(scale) * np.array(
        [0.0, 0.4999999, 0.5, 1e-3, 1023.5, 1024.5, 1e6], np.float32)]))
    for zero in (-128, -5, 0, 77, 127):
        quant = TensorQuant(float(np.float32(scale)), zero)
        q = np.full(x.size, 99, np.int8)
        assert _convert(x, lib.ACCEL_FP32, q, lib.ACCEL_INT8, quant.scale, zero) == 0
        np.testing.assert_array_equal(q, quant.quantize(x))


def test_convert_rejections_name_the_bad_value():
    x = np.zeros(8, np.float32)
    q = np.zeros(8, np.int8)
    assert _convert(x, lib.ACCEL_FP32, q, lib.ACCEL_INT8, 0.0) == lib.ACCEL_ERR_INVALID
    assert "scale = 0" in ffi.string(lib.accel_last_error()).decode()
    assert _convert(x, lib.ACCEL_FP32, q, lib.ACCEL_INT8, 1.0, 200) == lib.ACCEL_ERR_INVALID
    assert "zero = 200" in ffi.string(lib.accel_last_error()).decode()
    assert _convert(x[1:].view(np.uint8)[1:], lib.ACCEL_FP32, q, lib.ACCEL_INT8) == \
        lib.ACCEL_ERR_ALIGNMENT
    assert "src = " in ffi.string(lib.accel_last_error()).decode()
    assert _convert(x, lib.ACCEL_FP32, x.view(np.int8), lib.ACCEL_INT8) == lib.ACCEL_ERR_INVALID
    assert "overlap" in ffi.string(lib.accel_last_error()).decode()


# --- dtypes: what int8 and fp16 data and parameters must be ------------------------------------

DTYPE_ERRORS = [
    ("float input for int8 ops",
     lambda: DEVICE.run([Pool(precision="int8")], np.zeros((1, 1, 4, 4), np.float32)),
     AccelDtypeError, "precision int8 differs from the input's fp32"),
    ("float weights for int8",
     lambda: DEVICE.run([Conv(np.ones((2, 1, 1, 1), np.float32), precision="int8"),
                         Sdp(precision="int8")], np.zeros((1, 1, 4, 4), np.int8)),
     AccelDtypeError, "conv weights: int8 values are needed, got a float32 array"),
    ("code out of int8 range",
     lambda: DEVICE.run([Pool(precision="int8")], np.full((1, 1, 4, 4), 200), precision="int8"),
     AccelInvalidError, "value 200 at [0, 0, 0, 0] is outside the int8 range"),
    ("fp32 data that is not a half",
     lambda: DEVICE.run([Pool(precision="fp16")], np.full((1, 1, 4, 4), 0.1, np.float32),
                        precision="fp16"),
     AccelDtypeError, "value 0.10000000149011612 at [0, 0, 0, 0] of the float32 array is not"),
    ("fp16 scale that is not a half",
     lambda: DEVICE.run([Sdp(scale=[0.1], precision="fp16")], np.zeros((1, 1, 2, 2), np.float16)),
     AccelDtypeError, "sdp scale: value 0.1 at [0] of the float64 array is not a float16"),
    ("int8 bias that is not int32",
     lambda: DEVICE.run([Sdp(bias=[2**31], precision="int8")], np.zeros((1, 1, 2, 2), np.int8)),
     AccelInvalidError, "sdp bias: value 2147483648 at [0] is outside the int32 range"),
    ("float mul",
     lambda: DEVICE.run([Sdp(mul=[0.5], precision="int8")], np.zeros((1, 1, 2, 2), np.int8)),
     AccelDtypeError, "sdp mul: int16 values are needed"),
    ("negative rshift",
     lambda: DEVICE.run([Sdp(rshift=[-1], precision="int8")], np.zeros((1, 1, 2, 2), np.int8)),
     AccelInvalidError, "sdp rshift: value -1 at [0] is outside the uint8 range"),
    ("int8 out for an fp16 run",
     lambda: DEVICE.run([Pool(precision="fp16")], np.zeros((1, 1, 4, 4), np.float16),
                        out=np.zeros((1, 1, 2, 2), np.int8)),
     AccelDtypeError, "out must be a float16 array for a fp16 chain, got int8"),
    ("float clip bounds in int8",
     lambda: DEVICE.run([Sdp(act="clip", clip=(0.0, 6.0), precision="int8")],
                        np.zeros((1, 1, 2, 2), np.int8)),
     AccelInvalidError, "sdp clip = (0.0, 6.0) holds float bounds"),
    ("packed bytes of the wrong type",
     lambda: DEVICE.run([Conv(np.ones((2, 1, 1, 1), np.int8), precision="int8",
                              packed=np.zeros(64, np.int32)), Sdp(precision="int8")],
                        np.zeros((1, 1, 4, 4), np.int8)),
     AccelDtypeError, "conv packed: the bytes of Conv.packed_for() are needed"),
]


@pytest.mark.parametrize("what,call,error,words", DTYPE_ERRORS, ids=[e[0] for e in DTYPE_ERRORS])
def test_wrong_dtypes_are_named(what, call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value), str(info.value)
    if error is AccelDtypeError:
        assert isinstance(info.value, TypeError)
