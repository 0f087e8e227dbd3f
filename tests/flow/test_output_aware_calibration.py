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


def _weighed_examples():
    torch.manual_seed(0)
    model = Weighed().eval()
    mod, params = from_pytorch(model, (torch.from_numpy(_input(0)),))
    return mod, params, [(_input(s),) for s in range(10, 14)]


@pytest.mark.parametrize("second_better", [False, True])
def test_a_real_build_on_held_back_examples_decides_between_the_passes(second_better):
    """With ``verify``, the pass searches on every other example and keeps its ranges only
    where the int8 build of them beats the build of the first pass's on the others: here a
    stand-in build that is exact for one calibration and noisy for the other, each way
    round."""
    from accel_codegen.compiler.partition import calibrate_reference, run_main
    from accel_codegen.quantization.calibration import Observer
    from accel_codegen.quantization.output_aware import refine_for_outputs
    from accel_codegen.sim.config import AccelConfig

    mod, params, examples = _weighed_examples()
    observer = Observer()
    calibration, vm = calibrate_reference(mod, params, AccelConfig.preset("nv_full"), True,
                                          True, examples, "mse", observer=observer)
    first = dict(calibration.tensors)
    seen, searched = [], []

    def verify(c, held_back):
        seen.append((dict(c.tensors), [x[0][0, 0, 0, 0] for x in held_back]))
        exact = (c.tensors != first) == second_better
        clean = [run_main(vm, x) for x in held_back]
        return [y if exact else y + np.float32(0.1) * np.abs(y).max() for y in clean]

    def run(*x):
        searched.append(x[0][0, 0, 0, 0])
        return run_main(vm, x)

    changed = refine_for_outputs(calibration, observer, run, examples, verify=verify)
    assert len(seen) == 2 and seen[0][0] == first and seen[1][0] != first  # both builds ran
    held_back = [examples[1][0][0, 0, 0, 0], examples[3][0][0, 0, 0, 0]]
    assert seen[0][1] == seen[1][1] == held_back  # on the examples the search did not see
    assert not set(held_back) & set(searched[:-2])  # (the last 2: their fp32 reference)
    if second_better:
        assert changed and calibration.tensors != first
    else:
        assert changed == {} and calibration.tensors == first


def test_an_int8_build_checks_the_pass_in_a_real_build(monkeypatch):
    """partition_for_accel gives the pass its check: a build that says the first pass's
    ranges are better leaves the calibration at ``mse``'s."""
    from accel_codegen.quantization import output_aware

    mod, params, examples = _weighed_examples()
    calls = []

    def first_is_better(calibration, chosen, verify, reference):
        calls.append((len(verify(calibration)), len(reference)))
        return False

    monkeypatch.setattr(output_aware, "verified", first_is_better)
    scales = {}
    for method in ("mse", "mse_outputs"):
        part = ac.partition_for_accel(mod, params, precision="int8", calibration=examples,
                                      calibration_method=method)
        scales[method] = ac.calibration_of(part).tensors
    assert calls == [(len(examples) // 2, len(examples) // 2)]  # the held-back half
    assert scales["mse_outputs"] == scales["mse"]
