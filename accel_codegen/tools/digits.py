"""A small CNN trained on real data: scikit-learn's 8x8 handwritten digits.

The zoo's models have random weights, on which int8 error only says how far an output moved;
whether a class is still right needs a trained model and labelled data. scikit-learn ships
the UCI digits (1,797 8x8 images of 0-16 grey levels, ten classes): :func:`digits_split`
holds back a stratified quarter, and :func:`train_digits_cnn` trains :class:`DigitsCNN` on
the rest, deterministically (fixed seeds, one thread, a fixed number of epochs: a few
seconds of CPU). ``examples/digits.py`` builds it for the accelerator in fp32, fp16 and int8
and prints top-1 on the held-back split; ``tests/flow/test_digits_flow.py`` checks it.

Needs torch and scikit-learn (``pip install 'accel-codegen[digits]'``).
"""
from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

#: Fraction of the images held back (stratified by class) for evaluation.
HELD_BACK = 0.25
#: Seed of the split, of the initial weights and of the batch order.
SEED = 0
EPOCHS = 10
BATCH = 32
LEARNING_RATE = 3e-3
#: Training images the int8 builds calibrate on (the first of the shuffled training split).
CALIBRATION_IMAGES = 128


@dataclasses.dataclass(frozen=True)
class DigitsSplit:
    """Images as float32 (N, 1, 8, 8), standardised with the training set's mean and
    standard deviation; labels as int64 (N,)."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray


def digits_split(seed: int = SEED) -> DigitsSplit:
    """scikit-learn's digits, a stratified :data:`HELD_BACK` held back, standardised with the
    training images' statistics (the held-back ones do not inform anything)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = digits.images.astype(np.float32)[:, None]  # (1797, 1, 8, 8), grey levels 0..16
    train_x, test_x, train_y, test_y = train_test_split(
        x, digits.target.astype(np.int64), test_size=HELD_BACK, random_state=seed,
        stratify=digits.target)
    mean, std = float(train_x.mean()), float(train_x.std())
    return DigitsSplit(((train_x - mean) / std).astype(np.float32), train_y,
                       ((test_x - mean) / std).astype(np.float32), test_y)


class DigitsCNN(nn.Module):
    """conv3x3(16) + BN + ReLU, conv3x3(32) + BN + ReLU, 2x2 max pool, conv3x3(64) + BN +
    ReLU, 2x2 max pool, a linear layer on the 64x2x2 features: 25 k parameters, every op one
    the accelerator runs."""

    def __init__(self, num_classes: int = 10):
        super().__init__()

        def unit(cin: int, cout: int) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                    nn.ReLU(inplace=True)]

        self.features = nn.Sequential(*unit(1, 16), *unit(16, 32), nn.MaxPool2d(2),  # 8 -> 4
                                      *unit(32, 64), nn.MaxPool2d(2))                # 4 -> 2
        self.classifier = nn.Linear(64 * 2 * 2, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


def train_digits_cnn(split: DigitsSplit, *, seed: int = SEED, epochs: int = EPOCHS) -> DigitsCNN:
    """Train :class:`DigitsCNN` on ``split``'s training images (Adam, cross-entropy,
    :data:`BATCH`-image batches in a seeded order) and return it in eval mode, gradients off.

    Deterministic: the weights and the batch order come from ``seed`` and the training runs on
    one thread (a parallel reduction's order would otherwise change the last bits), so the
    same torch build gives the same model every time."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = DigitsCNN()
            order = torch.Generator().manual_seed(seed)
            x, y = torch.from_numpy(split.train_x), torch.from_numpy(split.train_y)
            optimiser = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
            model.train()
            for _ in range(epochs):
                for batch in torch.randperm(len(x), generator=order).split(BATCH):
                    optimiser.zero_grad()
                    nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
                    optimiser.step()
    finally:
        torch.set_num_threads(threads)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def top1(logits: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of rows of ``logits`` (N, classes) whose arg-max is the label."""
    return float(np.mean(np.asarray(logits).reshape(len(labels), -1).argmax(axis=1) == labels))


def calibration_images(split: DigitsSplit, count: int = CALIBRATION_IMAGES) -> list[np.ndarray]:
    """The first ``count`` training images, each a (1, 1, 8, 8) example input."""
    return [x[None] for x in split.train_x[:count]]


def accelerator_logits(model: nn.Module, split: DigitsSplit, precision: str, *,
                       config: str = "nv_full", calibration: int = CALIBRATION_IMAGES):
    """``model`` imported from PyTorch (batch 1), partitioned and built for the accelerator
    in ``precision`` (int8 calibrated on :func:`calibration_images`), run on every held-back
    image. Returns (logits (N, 10) float32, the partition report)."""
    import tvm

    import accel_codegen as ac
    from ..compiler import frontend

    mod, params = frontend.from_pytorch(model, (torch.from_numpy(split.test_x[:1]),))
    images = calibration_images(split, calibration) if precision == "int8" else None
    partitioned = ac.partition_for_accel(mod, params, config=config, precision=precision,
                                         calibration=images)
    vm = ac.virtual_machine(ac.build(partitioned))
    logits = np.concatenate([vm["main"](tvm.runtime.tensor(np.ascontiguousarray(x[None])))
                             .numpy() for x in split.test_x])
    return logits, ac.partition_report(partitioned)


def ort_int8_logits(model: nn.Module, split: DigitsSplit, *,
                    calibration: int = CALIBRATION_IMAGES) -> np.ndarray:
    """ONNX Runtime's static int8 of ``model`` (the project's baseline settings,
    :mod:`accel_codegen.quantization.ort_baseline`), calibrated on the same images as our
    int8 build, run on every held-back image: logits (N, 10). Needs onnxruntime."""
    from ..compiler import frontend
    from ..quantization import ort_baseline

    with tempfile.TemporaryDirectory() as directory:
        path = frontend.export_onnx(model, (torch.from_numpy(split.test_x[:1]),),
                                    Path(directory) / "digits.onnx")
        quantised = ort_baseline.quantize_int8(path, calibration_images(split, calibration),
                                               directory)
        session = ort_baseline.session(quantised, 1)
        return np.concatenate([ort_baseline.run(session, (x[None],)) for x in split.test_x])
