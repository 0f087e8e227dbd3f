"""The converting SDP (accel_sdp_desc.convert, ABI 5): int8 <-> fp16 as accel_convert computes
through fp32, its cost (it reads one precision and writes the other), and its validation."""
import numpy as np
import pytest

from accel_codegen import AccelInvalidError, Device, Sdp, estimate_chain
from accel_codegen.sim import reference
from conftest import assert_same


@pytest.mark.parametrize("mode", ["fused", "independent"])
def test_int8_to_fp16_and_back_is_the_reference(rng, mode):
    dev = Device("nv_full")
    q = rng.integers(-128, 128, (2, 64, 5, 7)).astype(np.int8)
    up = Sdp(precision="int8", convert=True, cvt_scale=0.0371, cvt_zero=-9)
    y, _ = dev.run([up], q, mode=mode)
    assert_same(y, reference.run_chain([up], q))
    # the values accel_convert gives through fp32 (dequantise, then round to half)
    assert_same(y, ((q.astype(np.float64) + 9) * np.float32(0.0371)).astype(np.float32)
                .astype(np.float16))
    down = Sdp(precision="fp16", convert=True, cvt_scale=0.0371, cvt_zero=-9)
    back, _ = dev.run([down], y, mode=mode)
    assert_same(back, reference.run_chain([down], y))
    assert_same(back, q)  # a step of the same scale: every code comes back


def test_fp16_to_int8_saturates_and_rounds_half_away(rng):
    dev = Device("nv_full")
    x = np.array([-1e4, -0.75, -0.25, 0.25, 0.75, 2.5, 1e4, np.nan], np.float16)
    x = np.ascontiguousarray(np.broadcast_to(x.reshape(1, 1, 1, 8), (1, 8, 1, 8)))
    op = Sdp(precision="fp16", convert=True, cvt_scale=0.5, cvt_zero=3)
    y, _ = dev.run([op], x)
    assert_same(y, reference.run_chain([op], x))
    assert y[0, 0, 0].tolist() == [-128, 1, 2, 4, 5, 8, 127, 3]


def test_the_cost_reads_one_precision_and_writes_the_other():
    """64 channels: one position is 64 bytes in int8 and 128 in fp16 (memory atoms of 32)."""
    shape = (1, 64, 8, 8)
    up = estimate_chain("nv_full", [Sdp(precision="int8", convert=True, cvt_scale=1.0)], shape,
                        mode="independent")
    down = estimate_chain("nv_full", [Sdp(precision="fp16", convert=True, cvt_scale=1.0)],
                          shape, mode="independent")
    assert (up.bytes_read, up.bytes_written) == (64 * 64, 64 * 128)
    assert (down.bytes_read, down.bytes_written) == (64 * 128, 64 * 64)
    assert up.ops[0].op == down.ops[0].op == "sdp:convert"
    x = np.zeros(shape, np.int8)
    _, ran = Device("nv_full").run([Sdp(precision="int8", convert=True, cvt_scale=1.0)], x,
                                   mode="independent")
    assert (ran.cycles, ran.bytes_read, ran.bytes_written) == \
        (up.cycles, up.bytes_read, up.bytes_written)


@pytest.mark.parametrize("ops, precision, message", [
    ([Sdp(precision="int8", convert=True, cvt_scale=0.0)], "int8", "cvt_scale = 0"),
    ([Sdp(precision="int8", convert=True, cvt_scale=float("inf"))], "int8", "cvt_scale = inf"),
    ([Sdp(precision="int8", convert=True, cvt_scale=1.0, cvt_zero=200)], "int8", "cvt_zero = 200"),
    ([Sdp(precision="fp32", convert=True, cvt_scale=1.0)], "fp32", "the SDP.s precision is fp32"),
    ([Sdp(precision="int8", convert=True, cvt_scale=1.0, act="relu")], "int8",
     "sets only cvt_scale and cvt_zero"),
    ([Sdp(precision="int8", convert=True, cvt_scale=1.0),
      Sdp(precision="int8", act="relu")], "int8", "runs alone"),
    ([Sdp(precision="int8", cvt_scale=1.0)], "int8", "are for a converting SDP"),
], ids=["zero-scale", "inf-scale", "zero-point", "fp32", "other-field", "chained", "no-flag"])
def test_invalid_converting_sdps_are_refused_by_name(ops, precision, message):
    with pytest.raises(AccelInvalidError, match=message):
        estimate_chain("nv_full", ops, (1, 8, 4, 4), mode="independent", precision=precision)


def test_nv_small_has_no_fp16_to_convert_to():
    from accel_codegen import AccelUnsupportedError

    with pytest.raises(AccelUnsupportedError, match="precision fp16 is not supported by configuration nv_small"):
        estimate_chain("nv_small", [Sdp(precision="int8", convert=True, cvt_scale=1.0)],
                       (1, 8, 4, 4), mode="independent")
