"""A CNN trained on real data (scikit-learn's 8x8 digits, accel_codegen.tools.digits) built for
the accelerator in fp32, fp16 and int8: top-1 on the held-back quarter (issue #13's goal: int8
within 0.5 points of fp32), everything offloaded, the training deterministic."""
import numpy as np
import pytest
import torch

from accel_codegen.tools import digits
from conftest import sqnr

# Measured (seed 0, 10 epochs, 450 held-back images): PyTorch 99.33 %, and the accelerator's
# fp32, fp16 and int8 builds the same 99.33 %. 0.5 points of 450 images is 2 images.
TOP1_GAP = 0.005
# Logits' SQNR against the fp32 build, measured 65.0 dB (fp16) and 35.6 dB (int8, 128
# calibration images); the floors leave 5-7 dB for a change of rounding or calibration.
MIN_SQNR_DB = {"fp16": 58.0, "int8": 30.0}


@pytest.fixture(scope="module")
def trained():
    split = digits.digits_split()
    return split, digits.train_digits_cnn(split)


@pytest.fixture(scope="module")
def builds(trained):
    """precision -> (held-back logits, partition report)."""
    split, model = trained
    return {p: digits.accelerator_logits(model, split, p) for p in ("fp32", "fp16", "int8")}


def test_the_split_is_stratified_and_disjoint(trained):
    split, _ = trained
    assert split.train_x.shape == (1347, 1, 8, 8) and split.test_x.shape == (450, 1, 8, 8)
    assert split.train_x.dtype == np.float32 and split.test_y.dtype == np.int64
    # Every class held back in proportion (a quarter of its images, rounded either way).
    held = np.bincount(split.test_y, minlength=10)
    total = held + np.bincount(split.train_y, minlength=10)
    assert np.all(np.abs(held - total * digits.HELD_BACK) < 1), held
    train = {x.tobytes() for x in split.train_x}
    assert not any(x.tobytes() in train for x in split.test_x)


def test_training_is_deterministic(trained):
    split, model = trained
    again = digits.train_digits_cnn(split)
    state, state_again = model.state_dict(), again.state_dict()
    assert all(torch.equal(state[k], state_again[k]) for k in state)


def test_the_trained_model_classifies(trained):
    """Trained, not random: well above chance (10 %) on images it never saw."""
    split, model = trained
    with torch.no_grad():
        accuracy = digits.top1(model(torch.from_numpy(split.test_x)).numpy(), split.test_y)
    assert accuracy > 0.97, accuracy


def test_every_op_runs_on_the_accelerator(builds):
    for precision, (_, report) in builds.items():
        assert report.host == [] and report.precision == precision, str(report)


def test_fp32_build_is_pytorch(trained, builds):
    split, model = trained
    with torch.no_grad():
        reference = model(torch.from_numpy(split.test_x)).numpy()
    logits = builds["fp32"][0]
    scale = float(np.abs(reference).max())
    assert float(np.abs(logits - reference).max()) <= 1e-5 * scale
    assert np.array_equal(logits.argmax(axis=1), reference.argmax(axis=1))


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_reduced_precision_top1_is_fp32s(trained, builds, precision):
    """Issue #13's goal for int8, and fp16 too: top-1 on the held-back images within 0.5
    points of the fp32 build's."""
    split, _ = trained
    fp32 = digits.top1(builds["fp32"][0], split.test_y)
    reduced = digits.top1(builds[precision][0], split.test_y)
    assert abs(reduced - fp32) <= TOP1_GAP, (precision, reduced, fp32)
    figure = sqnr(builds[precision][0], builds["fp32"][0])
    assert MIN_SQNR_DB[precision] <= figure < 150, (precision, figure)  # moved, a little
