"""A user's custom PyTorch module kept as one monolithic op and offloaded through a registered
primitive; on hardware that cannot run it, it falls back to its host implementation."""
import pytest
import torch
from tvm import topi

import accel_codegen as ac
from accel_codegen import custom, frontend
from accel_codegen.compiler.lowering import SdpSpec
from conftest import assert_close, build_and_run, torch_forward


@torch.library.custom_op("accel_test::scale_shift_act", mutates_args=())
def scale_shift_act(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x * scale.view(1, -1, 1, 1) + shift.view(1, -1, 1, 1))


@scale_shift_act.register_fake
def _(x, scale, shift):
    return torch.empty_like(x)


class ScaleShiftSigmoid(torch.nn.Module):
    """The user's custom module: one fused op in their own framework."""

    def __init__(self, channels):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.rand(channels) + 0.5)
        self.shift = torch.nn.Parameter(torch.rand(channels) - 0.5)

    def forward(self, x):
        return scale_shift_act(x, self.scale, self.shift)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.custom = ScaleShiftSigmoid(8)

    def forward(self, x):
        return self.custom(torch.relu(self.conv(x)))


def _host(x, scale, shift):
    c = int(scale.shape[0])
    return topi.sigmoid(x * topi.reshape(scale, (1, c, 1, 1)) + topi.reshape(shift, (1, c, 1, 1)))


@pytest.fixture
def registered():
    custom.register_primitive(
        "scale_shift_sigmoid", torch_op="scale_shift_act.default", host_compute=_host,
        stages=lambda x, scale, shift: {"sdp": SdpSpec(scale=scale, bias=shift, act="sigmoid")})
    yield
    custom.unregister_primitive("scale_shift_sigmoid")


def _model():
    torch.manual_seed(1)
    return Net().eval(), torch.randn(1, 3, 12, 12)


def test_custom_module_is_one_op_and_offloaded(registered):
    model, x = _model()
    mod, _ = frontend.from_pytorch(model, (x,))
    report = ac.partition_report(ac.partition_for_accel(mod))
    custom_ops = [op for op in report.offloaded if op.primitive == "accel.custom.scale_shift_sigmoid"]
    assert len(custom_ops) == 1 and custom_ops[0].op.startswith("relax.call_tir")
    assert report.host == []
    for fuse in (True, False):  # decomposed: scale, then bias, as separate ops
        assert_close(build_and_run(mod, x, fuse=fuse), torch_forward(model, x), rtol=1e-5,
                     what=f"fuse={fuse}")


def test_custom_op_falls_back_to_its_host_implementation(registered):
    """nv_small has no LUT: the primitive stays on the host, runs its TE implementation, and the
    report says why."""
    model, x = _model()
    mod, _ = frontend.from_pytorch(model, (x,))
    partitioned = ac.partition_for_accel(mod, config="nv_small")
    (host,) = ac.partition_report(partitioned).host
    assert host.op.startswith("relax.call_tir") and "lookup table" in host.reason
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), rtol=1e-5)


def test_unregistered_custom_op_is_a_clear_import_error():
    model, x = _model()
    with pytest.raises(ac.AccelUnsupportedError, match="could not import Net"):
        frontend.from_pytorch(model, (x,))
