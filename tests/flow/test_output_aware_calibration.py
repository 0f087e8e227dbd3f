"""Output-aware ranges (``calibration_method="mse_outputs"``, quantization/output_aware.py):
the fp32 reference run with the int8 activations emulated in place, and a range chosen by
the error at the outputs where the tensor's own least error clips what decides them."""
import math

import numpy as np
import pytest
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import from_pytorch
from accel_codegen.quantization import TensorQuant
from accel_codegen.quantization.output_aware import FACTORS, candidates
from conftest import build_and_run, sqnr, torch_forward


def test_candidates_stay_within_the_range_seen():
    """Multiples of the least-error range, never wider than the values seen (that end is
    ``max``'s range), the least-error one itself left out; unsigned tensors stay unsigned."""
    unsigned = TensorQuant(float(np.float32(2.0 / 255)), -128)
    found = candidates(unsigned, 0.0, 5.0)
    ends = [(127 - q.zero) * q.scale for q in found]
    assert all(q.zero == -128 for q in found) and max(ends) == pytest.approx(5.0, rel=1e-6)
    assert min(ends) == pytest.approx(1.0, rel=1e-6) and unsigned not in found
    assert len(found) == len(FACTORS) - 1  # 3x and inf both give the range seen: once
    signed = ac.quantization.covering_quant(-1.0, 3.0)
    for q in candidates(signed, -4.0, 3.5):
        lo, hi = (-128 - q.zero) * q.scale, (127 - q.zero) * q.scale
        assert lo >= -4.0 - 2 * q.scale and hi <= 3.5 + q.scale and lo < 0 < hi


class Weighed(torch.nn.Module):
    """conv + hardswish (not positively homogeneous: equalisation leaves it) whose first
    channel is wide and the others narrow, read by a 1x1 conv that weighs the narrow ones
    1,000 times the wide one: the tensor's own least error keeps the wide channel's range
    (a per-tensor scale), leaving the channels the output reads a few codes; the outputs'
    error prefers clipping the wide channel."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.head = torch.nn.Conv2d(4, 4, 1)
        with torch.no_grad():
            self.conv.weight[0] *= 20
            self.conv.bias[0] = 20.0
            self.head.weight[:, 0] *= 0.01
            self.head.weight[:, 1:] *= 10

    def forward(self, x):
        return self.head(torch.nn.functional.hardswish(self.conv(x)))


def _input(seed):
    return np.random.default_rng(seed).standard_normal((1, 3, 12, 12)).astype(np.float32)


def test_fake_quantizer_changes_the_run_and_leaves_the_build_as_it_was():
    """The observer's overwrite reaches the outputs (the next pass reads the buffer it
    changed), and a run without it afterwards gives the fp32 bits again."""
    from accel_codegen.compiler.partition import calibrate_reference, run_main
    from accel_codegen.quantization.output_aware import FakeQuantizer
    from accel_codegen.sim.config import AccelConfig
    from accel_codegen.sim.observer import observing

    torch.manual_seed(0)
    mod, params = from_pytorch(Weighed().eval(), (torch.from_numpy(_input(0)),))
    calibration, vm = calibrate_reference(mod, params, AccelConfig.preset("nv_full"), True,
                                          True, [(_input(s),) for s in range(3)], "mse")
    x = (_input(7),)
    clean = run_main(vm, x)
    coarse = {k: TensorQuant(q.scale * 16, q.zero) for k, q in calibration.tensors.items()}
    with observing(FakeQuantizer(coarse)):
        emulated = run_main(vm, x)
    assert sqnr(emulated, clean) < 30
    assert np.array_equal(run_main(vm, x), clean)


def test_output_aware_ranges_follow_what_the_output_reads():
    torch.manual_seed(0)
    model = Weighed().eval()
    mod, params = from_pytorch(model, (torch.from_numpy(_input(0)),))
    examples = [(_input(s),) for s in range(10, 14)]
    results = {}
    for method in ("mse", "mse_outputs"):
        part = ac.partition_for_accel(mod, params, precision="int8", calibration=examples,
                                      calibration_method=method)
        results[method] = [sqnr(build_and_run(part, x), torch_forward(model, x))
                           for x in (_input(s) for s in range(20, 23))]
        results[method + " scales"] = ac.calibration_of(part).tensors
    print(results)
    assert min(results["mse_outputs"]) > min(results["mse"]) + 1.0
