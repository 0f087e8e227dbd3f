"""Squeeze-excite's x * s in int8 (issue 33, item 5): the scale s is a tensor the network
computes, so no compile-time converter holds it; the SDP's element-wise multiplier reads it
per channel (accel_sdp_desc.ew_per_channel, NVDLA's per-kernel operand mode) in the codes and
zero point of the layer that wrote it. The engine against the NumPy reference, the whole
block offloaded in one function against PyTorch, the estimate equal to the profiled run."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import accel_codegen as ac
from accel_codegen import AccelInvalidError, AccelUnsupportedError, Device, Sdp
from accel_codegen.tools.estimation import estimate
from accel_codegen.compiler.frontend import from_pytorch
from accel_codegen.sim.reference import run_op
from conftest import assert_same, build_and_run, sqnr, torch_forward


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_a_per_channel_operand_is_read_for_every_position(precision):
    rng = np.random.default_rng(0)
    if precision == "int8":
        x = rng.integers(-128, 128, (2, 5, 3, 4)).astype(np.int8)
        s = rng.integers(-128, 128, (2, 5)).astype(np.int8)
        fields = dict(in_zero=-2, ew_zero=3, out_mul=3, out_shift=8, out_zero=1)
    else:
        dtype = np.float16 if precision == "fp16" else np.float32
        x = rng.standard_normal((2, 5, 3, 4)).astype(dtype)
        s = rng.standard_normal((2, 5)).astype(dtype)
        fields = {}

    def op():
        return Sdp(ew_op="mul", operand=s, ew_per_channel=True, precision=precision, **fields)

    y, stats = Device().run([op()], x)
    assert_same(y, run_op(op(), x))
    full = run_op(Sdp(ew_op="mul", operand=np.ascontiguousarray(np.broadcast_to(
        s[:, :, None, None], x.shape)), precision=precision, **fields), x)
    assert_same(y, full)
    # the SDP reads N x C operand values (at most 2 bytes each), not a tensor of 12 times more
    _, whole = Device().run([Sdp(ew_op="mul", operand=np.ascontiguousarray(np.broadcast_to(
        s[:, :, None, None], x.shape)), precision=precision, **fields)], x)
    assert 0 < stats.ops[0].operand_bytes <= 2 * s.size < whole.ops[0].operand_bytes / 6


@pytest.mark.parametrize("affine", ["none", "scale", "shift", "both"])
def test_fp32_per_channel_multiply_keeps_zeros_signs_and_nans(affine):
    """fp32 x * s per channel after the SDP's scale and shift (sdp.c's one loop, a missing
    scale taken as 1 and a missing shift as -0): the bits of the same run with the operand
    broadcast to a whole tensor (the general span path), -0, infinities and NaN included, and
    the reference's values."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 3, 5)).astype(np.float32)
    x[0, 0, 0, :4] = [-0.0, 0.0, np.inf, np.nan]
    x[1, 2, 1, :3] = [-np.inf, -0.0, 0.0]
    s = rng.standard_normal((2, 4)).astype(np.float32)
    s[0, 1], s[1, 3], s[1, 2] = -0.0, np.inf, 2.0
    fields = {}
    if affine in ("scale", "both"):
        fields["scale"] = np.array([1.5, -1.0, 0.0, 1.0], np.float32)
    if affine in ("shift", "both"):
        fields["shift"] = np.array([-0.0, 0.5, 0.0, -2.0], np.float32)
    per_channel = Sdp(ew_op="mul", operand=s, ew_per_channel=True, **fields)
    broadcast = Sdp(ew_op="mul", operand=np.ascontiguousarray(
        np.broadcast_to(s[:, :, None, None], x.shape)), **fields)
    y = Device().run([per_channel], x)[0]
    whole = Device().run([broadcast], x)[0]
    assert np.isnan(y).any() and (np.signbit(y) & (y == 0)).any()
    nan = np.isnan(whole)
    assert np.array_equal(np.isnan(y), nan)
    assert np.array_equal(y.view(np.uint32)[~nan], whole.view(np.uint32)[~nan])
    with np.errstate(invalid="ignore"):  # inf * 0 is NaN here on purpose
        assert_same(y, run_op(per_channel, x))


def test_a_per_channel_operand_is_checked():
    x = np.zeros((1, 4, 2, 2), np.float32)
    with pytest.raises(AccelInvalidError, match="ew_per_channel = 1 needs an ew_op"):
        Device().run([Sdp(scale=np.ones(4, np.float32), ew_per_channel=True)], x)
    with pytest.raises(AccelInvalidError, match="sdp operand of shape"):
        Device().run([Sdp(ew_op="mul", operand=np.ones((1, 4, 2, 2), np.float32),
                          ew_per_channel=True)], x)
    with pytest.raises(AccelUnsupportedError, match="per-channel element-wise operand"):
        Device().run([Sdp(ew_op="mul", operand=np.ones((1, 16), np.float32),
                          ew_per_channel=True)], np.zeros((1, 1, 2, 2, 16), np.float32),
                     layout="c16")


class SqueezeExcite(torch.nn.Module):
    """MobileNetV3's block: hardswish conv, then x * hardsigmoid(fc(relu(fc(mean(x)))))."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.fc1 = torch.nn.Conv2d(16, 4, 1)
        self.fc2 = torch.nn.Conv2d(4, 16, 1)
        self.out = torch.nn.Conv2d(16, 8, 1)

    def forward(self, x):
        y = F.hardswish(self.conv(x))
        s = F.hardsigmoid(self.fc2(torch.relu(self.fc1(y.mean((2, 3), keepdim=True)))))
        return self.out(y * s)


def _block():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 8, 10, 12)).astype(np.float32)
    calibration = [(np.random.default_rng(seed).standard_normal(x.shape).astype(np.float32),)
                   for seed in range(5, 9)]
    return SqueezeExcite().eval(), x, calibration


def test_squeeze_excite_runs_whole_in_int8():
    model, x, calibration = _block()
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    partitioned = ac.partition_for_accel(mod, params, precision="int8", calibration=calibration)
    report = ac.partition_report(partitioned)
    assert report.host == [] and len(report.functions) == 1, str(report)
    # within int8's error of PyTorch (the same block with fp16 gives 66 dB)
    assert sqnr(build_and_run(partitioned, x), torch_forward(model, x)) >= 30
    with ac.profile() as prof:
        build_and_run(partitioned, x)
    report = estimate(mod, params, precision="int8")
    assert [(layer.label, layer.cycles, layer.bytes_read) for layer in report.layers] == \
        [(r.label, r.cycles, r.bytes_read) for r in prof.records]
    # the multiply is one SDP pass of its own (its converters and the element-wise multiplier)
    assert [o.op for r in prof.records for o in r.ops if o.op.endswith("mul")] == \
        ["sdp:scale_shift+mul"], [o.op for r in prof.records for o in r.ops]

