"""SimAM (Yang et al., 2021), the parameter-free attention of YOLO variants: x times the
sigmoid of its energy, ``(x - mean)^2 / (4 (sum((x - mean)^2) / n + lambda)) + 0.5``, the mean
and the sum over H and W. It was three host ops in four functions (a subtraction and a division
by computed per-channel tensors, a sum over H and W); now x - mean is the element-wise adder's
per-channel operand (``rewrites.tensor_minus_tensor``), the sum the PDP's mean times H W
(``spatial_sums_as_means``) and the division a multiply by the LUT's reciprocal of a divisor
proven at least 4 lambda by what computes it (``per_row_products``' ``_lower_bound``)."""

import numpy as np
import pytest
import torch

import accel_codegen as ac
from accel_codegen.compiler import rewrites
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from conftest import (assert_close, build_and_run, fp16_and_half_sqnrs, int8_sqnrs_held_back,
                      random_inputs, torch_forward)


class SimAM(torch.nn.Module):
    def __init__(self, lam: float = 1e-4):
        super().__init__()
        self.lam = lam

    def forward(self, x):
        n = x.shape[2] * x.shape[3] - 1
        d = (x - x.mean(dim=[2, 3], keepdim=True)).pow(2)
        v = d.sum(dim=[2, 3], keepdim=True) / n
        return x * torch.sigmoid(d / (4 * (v + self.lam)) + 0.5)


class SimAMBlock(torch.nn.Module):
    """conv + BN + ReLU, SimAM, conv: as a YOLO neck uses it."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1),
                                         torch.nn.BatchNorm2d(32), torch.nn.ReLU())
        self.attention = SimAM()
        self.conv2 = torch.nn.Conv2d(32, 16, 3, padding=1)

    def forward(self, x):
        return self.conv2(self.attention(self.conv1(x)))


def _block():
    torch.manual_seed(0)
    model = SimAMBlock().eval()
    with torch.no_grad():  # trained-like batch norm statistics
        model.conv1[1].running_mean.uniform_(-0.5, 0.5)
        model.conv1[1].running_var.uniform_(0.5, 2.0)
    return model, torch.randn(1, 16, 20, 20)


def _whole(report):
    assert report.host == [] and len(report.functions) == 1, str(report)


def test_simam_is_one_function_from_pytorch_and_onnx_in_every_precision(tmp_path):
    model, x = _block()
    mod, params = from_pytorch(model, (x,))
    onnx_mod, onnx_params = from_onnx(export_onnx(model, (x,), tmp_path / "simam.onnx"))
    calibration = random_inputs(tuple(x.shape), 4, 5)
    for precision in ("fp32", "fp16", "int8"):
        extra = {"calibration": calibration} if precision == "int8" else {}
        _whole(ac.partition_report(mod, params, precision=precision, **extra))
        _whole(ac.partition_report(onnx_mod, onnx_params, precision=precision, **extra))
    expected = torch_forward(model, x)
    assert_close(build_and_run(mod, x.numpy(), params=params), expected, 1e-4)
    assert_close(build_and_run(onnx_mod, x.numpy(), params=onnx_params), expected, 1e-4)


def test_simam_in_fp16_is_within_1_db_of_half():
    """SimAM on the block's own ReLU output (channels of very different spread: divisors 0.06
    to 1.85): 67.6 dB against .half()'s 68.0 measured (42.6 while the reciprocal was the
    LUT's table alone, up to 12.5 % off: decompose.reciprocal_passes now adds its Newton
    steps in FP16)."""
    model, x = _block()
    y = model.conv1(x).detach()
    mod, params = from_pytorch(model.attention, (y,))
    ours, half = fp16_and_half_sqnrs(mod, params, model.attention, y)
    assert ours >= half - 1.0, (ours, half)


def test_simam_in_int8_at_least_onnx_runtime(tmp_path):
    """int8: whole; the reciprocal runs in fp16 between converting runs, and so do the layers
    that multiply by it and, back from them, those without a CONV whose readers all run in
    fp16 (program._fp16_divisors: SimAM's energy, from x - mean to d / c), where int8 lost
    the small variances' digits (30.6 dB against ONNX Runtime's 33.1 while each ran in int8);
    ONNX Runtime keeps the power, the sums and the division in float."""
    model, x = _block()
    mod, params = from_pytorch(model, (x,))
    calibration = random_inputs(tuple(x.shape), 8, 5)
    partitioned = ac.partition_for_accel(mod, params, precision="int8", calibration=calibration)
    report = ac.partition_report(partitioned)
    _whole(report)
    precisions = {p: [] for p in ("int8", "fp16")}
    for op in report.ops:
        precisions[op.precision].append(op.op)
    # the convolutions, the last product x * sigmoid(...) and the sigmoid's add stay int8
    assert precisions["int8"].count("relax.nn.conv2d") == 2 and \
        "relax.sigmoid" in precisions["int8"], report
    assert "relax.maximum" in precisions["fp16"] and "relax.mean" in precisions["fp16"], report
    held = random_inputs(tuple(x.shape), 8, 77)
    ours, theirs = int8_sqnrs_held_back(model, partitioned, held, calibration, tmp_path)
    assert ours >= theirs, (ours, theirs)


def test_a_division_by_a_tensor_not_proven_positive_stays_on_the_host():
    """x / (m + c): m a mean of x, which may be negative, so no bound: the host divides (the
    LUT's reciprocal is not defined at 0); the same with c <= 0 for a square's mean."""

    class Divide(torch.nn.Module):
        def __init__(self, square: bool, c: float):
            super().__init__()
            self.square, self.c = square, c

        def forward(self, x):
            m = x.mean(dim=[2, 3], keepdim=True)
            return x / ((m * m if self.square else m) + self.c)

    x = torch.randn(1, 8, 6, 6)
    for square, c in ((False, 1.0), (True, 0.0), (True, -0.5)):
        model = Divide(square, c).eval()
        mod, params = from_pytorch(model, (x,))
        report = ac.partition_report(mod, params)
        assert any("relax.divide" in r for r in map(str, report.host)), (square, c, str(report))
    model = Divide(True, 0.25).eval()  # m^2 + 0.25 >= 0.25: on the accelerator
    mod, params = from_pytorch(model, (x,))
    _whole(ac.partition_report(mod, params))
    assert_close(build_and_run(mod, x.numpy(), params=params), torch_forward(model, x), 1e-4)


def test_a_grns_sum_under_its_root_is_not_a_mean():
    """ConvNeXt-V2's GRN reads sqrt(sum(x^2)) as its own pattern: the spatial-sum rewrite keeps
    a sum whose root is taken, and rewrites one that is not."""

    class Sums(torch.nn.Module):
        def forward(self, x):
            squares = x * x
            return torch.sqrt(squares.sum(dim=[2, 3], keepdim=True)) + \
                (x + 1.0).sum(dim=[2, 3], keepdim=True)

    x = torch.randn(1, 4, 5, 5)
    mod, _ = from_pytorch(Sums().eval(), (x,))
    text = rewrites.spatial_sums_as_means(mod).script()
    assert text.count("R.sum(") == 1 and text.count("R.mean(") == 1, text


@pytest.mark.parametrize("lam", [1e-4, 0.5])
def test_the_lower_bound_of_simams_divisor(lam):
    """4 (sum(d) / n + lambda) >= 4 lambda, d a square; the derived floor a little below it."""
    x = torch.randn(1, 4, 6, 6)
    mod, params = from_pytorch(SimAM(lam).eval(), (x,))
    text = rewrites.per_row_products(rewrites.spatial_sums_as_means(mod)).script()
    assert "R.maximum(" in text, text
    floors = [float(line.split("R.const(")[1].split(",")[0]) for line in text.splitlines()
              if "R.maximum(" in line]
    assert floors and all(4 * lam * (1 - 2e-3) < f < 4 * lam for f in floors), floors
    np.testing.assert_allclose(build_and_run(mod, x.numpy(), params=params),
                               torch_forward(SimAM(lam).eval(), x), rtol=1e-5, atol=1e-6)
