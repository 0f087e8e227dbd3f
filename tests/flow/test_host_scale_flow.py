"""Squeeze-excite's ``x * s`` whose per-channel ``s`` the host computes (an op the
accelerator does not run sits between the excitation and the multiply), so ``s`` enters the
multiply's external function as an argument: no run of that function writes it. Every
precision runs the multiply as the SDP's element-wise multiplier with a per-channel operand
(``Layer.computed_scale``), so the fp32 build that calibrates int8 observes ``s`` as that
operand and the int8 code enters it with that calibration (it raised "calibration has no
statistics for run f1.0 op -2" when the fp32 build read ``s`` as the SDP's scale). Each
precision against PyTorch."""
import numpy as np
import pytest
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import from_pytorch
from accel_codegen.compiler.partition import calibration_of
from accel_codegen.sim.observer import operand_index
from conftest import build_and_run, sqnr, torch_forward


class HostExcite(torch.nn.Module):
    """y = relu(conv(x)); s = sin(conv1x1(mean(y))): sin stays on the host; y * s."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.fc = torch.nn.Conv2d(16, 16, 1)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        return y * torch.sin(self.fc(y.mean((2, 3), keepdim=True)))


def _case():
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((1, 3, 10, 12)).astype(np.float32)
    calibration = [(np.random.default_rng(seed).standard_normal(x.shape).astype(np.float32),)
                   for seed in range(5, 9)]
    return HostExcite().eval(), x, calibration


# PyTorch against each precision: fp32 to its rounding, fp16 and int8 within their error
# (int8's bound sits just under what ONNX Runtime's static int8 of the same block reaches on
# the same calibration inputs: this build is held to a toolchain's int8, not to fp32)
LEAST_DB = {"fp32": 100, "fp16": 45, "int8": 28}


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_a_host_computed_scale_multiplies_on_the_accelerator(precision):
    model, x, calibration = _case()
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    partitioned = ac.partition_for_accel(mod, params, precision=precision,
                                         calibration=calibration if precision == "int8" else None)
    report = ac.partition_report(partitioned)
    host = [op.op for op in report.host]
    # sin stays on the host, so the multiply is in a function of its own, reading s as an input
    assert host == ["relax.sin"], str(report)
    assert len(report.functions) == 2, str(report)
    assert sqnr(build_and_run(partitioned, x), torch_forward(model, x)) >= LEAST_DB[precision]
    (multiply,) = [op for op in report.offloaded if op.op == "relax.multiply"]
    assert multiply.function != report.offloaded[0].function
    if precision == "int8":  # s is quantised from what the fp32 build observed of it
        tensors = calibration_of(partitioned).tensors
        assert (multiply.key, operand_index(0)) in tensors, sorted(tensors)
