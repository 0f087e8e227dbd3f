"""The simulator's Python and C boundary under hostile input (issue #9): every case was a crash,
a wrong answer or an untyped error once; each must now be a typed AccelError that names the
field and the value, or the right result."""
import json

import numpy as np
import pytest

from accel_codegen import (AccelConfig, AccelError, AccelInvalidError, AccelShapeError, Conv,
                           Device, Pool, Sdp, estimate_chain)
from accel_codegen._accel_ffi import lib
from accel_codegen.sim.ops import _aligned_bytes
from accel_codegen.sim.reference import run_chain
from conftest import assert_close

DEVICE = Device("nv_full", num_threads=1)
RNG = np.random.default_rng(9)
X = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
W = RNG.standard_normal((8, 4, 3, 3)).astype(np.float32)
W8 = RNG.integers(-128, 128, (8, 4, 3, 3)).astype(np.int8)
X8 = RNG.integers(-128, 128, (1, 4, 8, 8)).astype(np.int8)


def _raises(error, words, call, *args, **kwargs):
    """``call`` raises ``error`` (an AccelError) with every one of ``words`` in its message."""
    with pytest.raises(error) as info:
        call(*args, **kwargs)
    assert isinstance(info.value, AccelError), type(info.value).__mro__
    for word in words:
        assert word in str(info.value), (word, str(info.value))


# --- packed weights: the C side knows every buffer's size --------------------------------------
@pytest.mark.parametrize("in_c", [7000, 5, 3])
def test_pack_checks_in_c_against_the_weights(in_c):
    """A wrong in_c made the packer read past the weights (a segfault for 7000)."""
    conv = Conv(np.ones((512, 1, 3, 3), np.int8) if in_c == 7000 else W8, precision="int8")
    _raises(AccelShapeError, [f"in_c = {in_c}"], conv.pack, "nv_full", in_c=in_c)


@pytest.mark.parametrize("size", [0, 16, 64, -64])
def test_a_short_packed_buffer_is_refused(size):
    """A truncated packing was read past its end and gave wrong codes."""
    conv = Conv(W8, padding=1, precision="int8")
    packed = conv.pack("nv_full")
    short = packed[:size].copy()
    _raises(AccelInvalidError, ["weights_packed_bytes", f"= {short.size}", "needs"],
            DEVICE.run, [Conv(W8, padding=1, precision="int8", packed=short),
                         Sdp(precision="int8")], X8)


# --- overlap: no operand may share memory with the output --------------------------------------
def test_conv_weights_overlapping_the_output_are_refused():
    """fp32 weights inside the output buffer were overwritten mid-run (max error 329)."""
    buffer = np.zeros(W.size + 8 * 8 * 8, np.float32)
    weights = buffer[:W.size].reshape(W.shape)
    weights[:] = W
    out = buffer[W.size // 2:W.size // 2 + 512].reshape(1, 8, 8, 8)
    _raises(AccelInvalidError, ["op 0 (CONV): weights", "overlaps the output"],
            DEVICE.run, [Conv(weights, padding=1)], X, out=out)
    assert np.array_equal(weights, W)  # refused before anything was written


def test_packed_weights_overlapping_the_output_are_refused():
    packed = Conv(W8, padding=1, precision="int8").pack("nv_full")
    memory = _aligned_bytes(packed.size + 512)  # the packing, then the output, sharing 64 bytes
    memory[:packed.size] = packed
    out = memory[packed.size - 64:packed.size + 448].view(np.int8).reshape(1, 8, 8, 8)
    _raises(AccelInvalidError, ["weights_packed", "overlaps the output"],
            DEVICE.run, [Conv(W8, padding=1, precision="int8", packed=memory[:packed.size]),
                         Sdp(precision="int8")], X8, out=out)


@pytest.mark.parametrize("field", ["bias", "mul", "rshift"])
def test_int8_converters_overlapping_the_output_are_refused(field):
    out = np.zeros((1, 4, 8, 8), np.int8)
    dtype = {"bias": np.int32, "mul": np.int16, "rshift": np.uint8}[field]
    operand = out.reshape(-1)[:4 * np.dtype(dtype).itemsize].view(dtype)
    operand[:] = 1
    _raises(AccelInvalidError, [f"op 0 (SDP): {field}", "overlaps the output"],
            DEVICE.run, [Sdp(precision="int8", **{field: operand})], X8, out=out)


# --- untyped exceptions ------------------------------------------------------------------------
NESTED = "[" * 100000 + "]" * 100000


@pytest.mark.parametrize("case, words", [
    (lambda: AccelConfig.preset("nv_full").replace(name=5), ["name = 5"]),
    (lambda: AccelConfig.preset("nv_full").replace(colour="red"), ["colour"]),
    (lambda: AccelConfig.from_json('{"base": "nv_full", "name": 7}'), ["name = 7"]),
    (lambda: AccelConfig.from_json('{"base": "nv_full", "clock_hz": "fast"}'),
     ["clock_hz = 'fast'"]),
    (lambda: AccelConfig.from_json('{"base": "nv_full", "precisions": "int8"}'),
     ["precisions = 'int8'"]),
    (lambda: AccelConfig.from_json("null"), ["None"]),
    (lambda: AccelConfig.from_json("[1, 2]"), ["[1, 2]"]),
    (lambda: AccelConfig.from_json("{"), ["does not parse"]),
    (lambda: AccelConfig.from_json(NESTED), ["does not parse"]),
    (lambda: DEVICE.run([None], X), ["op 0 = None"]),
    (lambda: DEVICE.run(Conv(W, padding=1), X), ["list of Conv, Sdp, Pool and Lrn"]),
    (lambda: estimate_chain("nv_full", [None], (1, 4, 8, 8)), ["op 0 = None"]),
    (lambda: Device("nv_full", num_threads=2**40), ["num_threads = 1099511627776"]),
    (lambda: Conv(W8, precision="int8").pack("nv_full", in_c=2**40), ["in_c = 1099511627776"]),
    (lambda: DEVICE.run([Sdp()], X, mode=["fused"]), ["mode = ['fused']"]),
    (lambda: DEVICE.run([Pool("max", 2, 2)], X, precision=["fp32"]), ["['fp32']"]),
])
def test_hostile_values_raise_typed_errors(case, words):
    _raises(AccelError, words, case)


# --- nothing is silently reinterpreted ---------------------------------------------------------
@pytest.mark.parametrize("chain, shape, words", [
    ([Pool("avg", 2, 2, count_include_pad="no")], (1, 4, 8, 8), ["count_include_pad = 'no'"]),
    ([Pool("max", 2.0, 2)], (1, 4, 8, 8), ["pool kernel = 2.0"]),
    ([Sdp()], (1, 8.7, 4, 4), ["tensor dimension c = 8.7"]),
    ([Conv(None, weight_shape=(8.5, 4, 3, 3))], (1, 4, 8, 8), ["weight_shape[0] = 8.5"]),
    ([Conv(None, weight_shape=(8, 4, 3, 3), groups=1.0)], (1, 4, 8, 8), ["groups = 1.0"]),
    ([Conv(W8, precision="int8"), Sdp(out_mul=1.7, precision="int8")], (1, 4, 8, 8),
     ["out_mul = 1.7"]),
    ([Conv(W, padding="same")], (1, 4, 8, 8), ["padding = 'same'"]),
    ([Conv(W, padding=1.5)], (1, 4, 8, 8), ["padding = 1.5"]),
    ([Conv(W, padding=(1, 1, 1))], (1, 4, 8, 8), ["padding = (1, 1, 1)"]),
    ([Conv(W, stride=(1, "2"))], (1, 4, 8, 8), ["stride[1] = '2'"]),
    ([Sdp(act="clip", clip=(0, 1, 2))], (1, 4, 8, 8), ["clip = (0, 1, 2)"]),
    ([Sdp(act="clip", clip=("0", 1))], (1, 4, 8, 8), ["clip[0] = '0'"]),
    ([Sdp(act="Relu")], (1, 4, 8, 8), ["act = 'Relu'"]),
    ([Sdp(ew_op=["add"], operand=X)], (1, 4, 8, 8), ["ew_op = ['add']"]),
    ([Conv(W, padding=2**31)], (1, 4, 8, 8), ["padding = 2147483648"]),
    ([Conv(W8, in_zero=2**40, precision="int8"), Sdp(precision="int8")], (1, 4, 8, 8),
     ["in_zero = 1099511627776"]),
    ([Pool("max", 2, 2, zero=-2**33)], (1, 4, 8, 8), ["zero = -8589934592"]),
])
def test_bad_fields_are_refused_by_name(chain, shape, words):
    """Each op's error names the op, the field and the value (never "invalid literal for int()",
    "has no len()" or "does not fit 'int32_t'")."""
    _raises(AccelError, words, estimate_chain, "nv_full", chain, shape)


def test_an_operand_of_the_right_size_but_wrong_shape_is_refused():
    operand = X.reshape(4, 1, 8, 8)
    _raises(AccelInvalidError, ["operand of shape (4, 1, 8, 8)", "(1, 4, 8, 8)"],
            DEVICE.run, [Sdp(ew_op="add", operand=operand)], X)


def test_bool_flags_still_work():
    for flag in (True, False, np.True_, 1, 0):
        y, _ = DEVICE.run([Pool("avg", 3, 1, padding=1, count_include_pad=flag)], X)
        expected = run_chain([Pool("avg", 3, 1, padding=1, count_include_pad=bool(flag))], X)
        assert_close(y, expected)


def test_c_limits_are_read_from_the_header():
    """The Python checks name the same limits the C library enforces."""
    _raises(AccelError, [f"{lib.ACCEL_MAX_CHAIN_OPS}"], DEVICE.run,
            [Sdp()] * (lib.ACCEL_MAX_CHAIN_OPS + 1), X, mode="independent")


# --- misaligned arrays are copied, not refused -------------------------------------------------
def _misaligned(array):
    raw = np.zeros(array.nbytes + 1, np.uint8)
    view = raw[1:].view(array.dtype).reshape(array.shape)
    view[...] = array
    assert not view.flags.aligned and view.flags.c_contiguous
    return view


def test_misaligned_contiguous_arrays_are_copied():
    chain = [Conv(_misaligned(W), padding=1),
             Sdp(scale=_misaligned(np.full(8, 0.5, np.float32)), act="relu")]
    y, _ = DEVICE.run(chain, _misaligned(X))
    expected = run_chain([Conv(W, padding=1), Sdp(scale=np.full(8, 0.5, np.float32),
                                                      act="relu")], X)
    assert_close(y, expected)


def test_a_misaligned_out_is_refused_by_name():
    out = _misaligned(np.zeros((1, 4, 8, 8), np.float32))
    _raises(AccelError, ["out at address", "not aligned"], DEVICE.run, [Sdp()], X, out=out)


def test_json_round_trip_still_works():
    cfg = AccelConfig.preset("nv_small").replace(dram_bytes_per_s=5e9)
    assert AccelConfig.from_json(cfg.to_json()) == cfg
    assert AccelConfig.from_json(json.dumps({"base": "nv_full", "clock_hz": 2**30})).clock_hz == 2.0**30


def test_a_weight_shape_that_disagrees_with_the_weights_is_refused():
    _raises(AccelInvalidError, ["weight_shape = (1, 2)", "(8, 4, 3, 3)"], DEVICE.run,
            [Conv(W, weight_shape=(1, 2))], X)
    conv = Conv(W, padding=1)
    first = DEVICE.run([conv], X)[0]
    np.testing.assert_array_equal(DEVICE.run([conv], X)[0], first)  # a descriptor runs again
