"""The SDP's X units with operands read from memory (accel_sdp_desc.x1 / x2, ABI 13): NVDLA's
BS and BN units, t = ((x + x1.alu) * x1.mul + x2.alu) * x2.mul before the affine step, each
operand per element or per channel. The C engine against the NumPy reference bit for bit,
alone and after a CONV, in place, with the other SDP steps; their cost; their refusals."""
import numpy as np
import pytest

from accel_codegen import (AccelInvalidError, AccelUnsupportedError, Conv, Device, Sdp,
                           estimate_chain)
from accel_codegen.sim import reference
from conftest import assert_same

SHAPE = (2, 5, 3, 7)


def _units(rng, dtype, per_channel):
    values = {}
    for name in ("x1_alu", "x1_mul", "x2_alu", "x2_mul"):
        shape = (SHAPE[1],) if name in per_channel else SHAPE
        values[name] = rng.standard_normal(shape).astype(dtype)
    return values


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("per_channel", [(), ("x2_alu",), ("x1_mul", "x2_mul"),
                                         ("x1_alu", "x1_mul", "x2_alu", "x2_mul")])
@pytest.mark.parametrize("mode", ["fused", "independent"])
def test_x_units_are_the_reference_bit_for_bit(rng, precision, per_channel, mode):
    dtype = np.float16 if precision == "fp16" else np.float32
    x = rng.standard_normal(SHAPE).astype(dtype)
    op = Sdp(**_units(rng, dtype, per_channel), x_per_channel=per_channel,
             scale=rng.standard_normal(5).astype(dtype), shift=rng.standard_normal(5).astype(dtype),
             ew_op="add", operand=rng.standard_normal(SHAPE).astype(dtype), act="relu",
             precision=precision)
    y, _ = Device("nv_full").run([op], x, mode=mode)
    expected = reference.run_chain([op], x)
    assert_same(y, expected)
    # the formula, in float32 steps (one rounding each), then the one rounding to the output
    t = x.astype(np.float32)
    t = ((t + _value(op.x1_alu, per_channel, "x1_alu")) * _value(op.x1_mul, per_channel,
                                                                  "x1_mul")
         + _value(op.x2_alu, per_channel, "x2_alu")) * _value(op.x2_mul, per_channel, "x2_mul")
    t = t * op.scale.astype(np.float32).reshape(1, 5, 1, 1) + \
        op.shift.astype(np.float32).reshape(1, 5, 1, 1)
    t = np.maximum(t + op.operand.astype(np.float32), np.float32(0))
    assert_same(y, t.astype(dtype))


def _value(v, per_channel, name):
    v = np.asarray(v, np.float32)
    return v.reshape(1, 5, 1, 1) if name in per_channel else v.reshape(SHAPE)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_after_a_conv_the_units_read_the_accumulators(rng, precision):
    """A CONV's SDP with X units: the same as the SDP on the CONV's own (fp32) output; in fp16
    the accumulators are not rounded to half before the units."""
    dtype = np.float16 if precision == "fp16" else np.float32
    x = rng.standard_normal(SHAPE).astype(dtype)
    conv = Conv(rng.standard_normal((5, 5, 1, 1)).astype(dtype), precision=precision)
    units = _units(rng, dtype, ("x1_mul",))
    sdp = Sdp(x1_alu=units["x1_alu"], x1_mul=units["x1_mul"], x_per_channel=("x1_mul",),
              precision=precision)
    dev = Device("nv_full")
    for mode in ("fused", "independent"):
        y, _ = dev.run([conv, sdp], x, mode=mode)
        acc, _ = dev.run([Conv(conv.weights, precision="fp32")], x.astype(np.float32)) \
            if precision == "fp16" else dev.run([conv], x)
        expected = reference.sdp(acc, x_units=[units["x1_alu"].astype(np.float32),
                                               units["x1_mul"].astype(np.float32), None, None],
                                 x_per_channel=("x1_mul",))
        assert_same(y, expected.astype(dtype))


def test_in_place_and_the_cost(rng):
    """An SDP with X units runs in place; each per-element operand is read as a tensor, each
    per-channel one once per channel, at the element-wise unit's throughput."""
    x = rng.standard_normal(SHAPE).astype(np.float32)
    a = rng.standard_normal(SHAPE).astype(np.float32)
    m = rng.standard_normal(5).astype(np.float32)
    op = Sdp(x1_alu=a, x2_mul=m, x_per_channel=["x2_mul"])
    expected = reference.run_chain([op], x)
    dev = Device("nv_full")
    y, _ = dev.run([op], x, out=x)
    assert y is x
    assert_same(x, expected)
    plain = estimate_chain("nv_full", [Sdp(scale=m)], SHAPE)
    units = estimate_chain("nv_full", [op], SHAPE)
    [p], [u] = plain.ops, units.ops
    assert u.op == "sdp:x"
    assert u.operand_bytes == p.input_bytes > 0
    assert u.weight_bytes == p.weight_bytes > 0
    assert u.compute_cycles >= p.compute_cycles
    both = estimate_chain("nv_full", [Sdp(x1_alu=a, x1_mul=a, x2_alu=a, scale=m)], SHAPE)
    assert both.ops[0].operand_bytes == 3 * p.input_bytes


def test_refusals(rng):
    dev = Device("nv_full")
    x = rng.standard_normal(SHAPE).astype(np.float32)
    a = rng.standard_normal(SHAPE).astype(np.float32)
    with pytest.raises(AccelUnsupportedError, match="x1's operands .* not INT8"):
        dev.run([Sdp(x1_alu=a.astype(np.int8), precision="int8")], x.astype(np.int8))
    with pytest.raises(AccelUnsupportedError, match="lacks"):
        Device("nv_small").run([Sdp(x1_mul=a)], x)
    with pytest.raises(AccelInvalidError, match="x2_mul of shape"):
        dev.run([Sdp(x2_mul=a[:1])], x)
    with pytest.raises(AccelInvalidError, match="per channel\\) has 3 values for 5 channels"):
        dev.run([Sdp(x2_mul=np.ones(3, np.float32), x_per_channel=("x2_mul",))], x)
    with pytest.raises(AccelInvalidError, match="x_per_channel names 'x3_mul'"):
        dev.run([Sdp(x1_mul=a, x_per_channel=("x3_mul",))], x)
    with pytest.raises(AccelUnsupportedError, match="NCHW tensors only"):
        x16 = rng.standard_normal((1, 1, 2, 2, 16)).astype(np.float32)
        dev.run([Sdp(x1_alu=np.ones((1, 16, 2, 2), np.float32))], x16, layout="c16")
