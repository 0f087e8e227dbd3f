"""MTCNN's face detector with its trained weights, as a user who found them would run it: the
P-Net, R-Net and O-Net state dicts that facenet-pytorch's wheel ships (``facenet_pytorch/data/
{pnet,rnet,onet}.pt``, fetched once with ``pip download``), in modules written here from
torch.nn (facenet-pytorch's own imports torchvision, which does not import beside torch 2.13),
on the photograph that matplotlib ships (Grace Hopper).

Each network is partitioned, built and run from PyTorch and from its ONNX export in fp32,
fp16 and int8 (calibrated on crops of other places and sizes than the ones compared),
against PyTorch's fp32; int8 also against ONNX Runtime's static int8 of the export, calibrated
on the same inputs. The task check: which crops (R-Net, O-Net) or positions (P-Net) each
build calls a face at MTCNN's thresholds (0.6, 0.7, 0.7), against PyTorch's fp32.

    python examples/mtcnn_faces.py [--nets pnet rnet onet]
"""
from __future__ import annotations

import argparse
import io
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import torch
import tvm
from torch import nn

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from accel_codegen.quantization import ort_baseline
from accel_codegen.quantization.metrics import sqnr_db
from accel_codegen.tools import trained_models as tm

PACKAGE, VERSION = "facenet-pytorch", "2.6.0"
THRESHOLDS = {"pnet": 0.6, "rnet": 0.7, "onet": 0.7}


class PNet(nn.Module):
    """The proposal network: fully convolutional, a face score and a box per 12x12 window."""

    def __init__(self):
        super().__init__()
        self.conv1, self.prelu1 = nn.Conv2d(3, 10, 3), nn.PReLU(10)
        self.pool1 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.conv2, self.prelu2 = nn.Conv2d(10, 16, 3), nn.PReLU(16)
        self.conv3, self.prelu3 = nn.Conv2d(16, 32, 3), nn.PReLU(32)
        self.conv4_1, self.conv4_2 = nn.Conv2d(32, 2, 1), nn.Conv2d(32, 4, 1)

    def forward(self, x):
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.prelu3(self.conv3(self.prelu2(self.conv2(x))))
        return self.conv4_2(x), torch.softmax(self.conv4_1(x), 1)


class RNet(nn.Module):
    """The refinement network: a 24x24 crop's face score and box."""

    def __init__(self):
        super().__init__()
        self.conv1, self.prelu1 = nn.Conv2d(3, 28, 3), nn.PReLU(28)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2, self.prelu2 = nn.Conv2d(28, 48, 3), nn.PReLU(48)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3, self.prelu3 = nn.Conv2d(48, 64, 2), nn.PReLU(64)
        self.dense4, self.prelu4 = nn.Linear(576, 128), nn.PReLU(128)
        self.dense5_1, self.dense5_2 = nn.Linear(128, 2), nn.Linear(128, 4)

    def forward(self, x):
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.pool2(self.prelu2(self.conv2(x)))
        x = self.prelu3(self.conv3(x)).permute(0, 3, 2, 1).flatten(1)
        x = self.prelu4(self.dense4(x))
        return self.dense5_2(x), torch.softmax(self.dense5_1(x), 1)


class ONet(nn.Module):
    """The output network: a 48x48 crop's face score, box and five landmarks."""

    def __init__(self):
        super().__init__()
        self.conv1, self.prelu1 = nn.Conv2d(3, 32, 3), nn.PReLU(32)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2, self.prelu2 = nn.Conv2d(32, 64, 3), nn.PReLU(64)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3, self.prelu3 = nn.Conv2d(64, 64, 3), nn.PReLU(64)
        self.pool3 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.conv4, self.prelu4 = nn.Conv2d(64, 128, 2), nn.PReLU(128)
        self.dense5, self.prelu5 = nn.Linear(1152, 256), nn.PReLU(256)
        self.dense6_1, self.dense6_2 = nn.Linear(256, 2), nn.Linear(256, 4)
        self.dense6_3 = nn.Linear(256, 10)

    def forward(self, x):
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.pool2(self.prelu2(self.conv2(x)))
        x = self.pool3(self.prelu3(self.conv3(x)))
        x = self.prelu4(self.conv4(x)).permute(0, 3, 2, 1).flatten(1)
        x = self.prelu5(self.dense5(x))
        return self.dense6_2(x), self.dense6_3(x), torch.softmax(self.dense6_1(x), 1)


NETS = {"pnet": PNet, "rnet": RNet, "onet": ONet}
# (left, top, right, bottom) on the 512x600 photograph: squares around the face (O-Net calls
# (180, 120, 380, 320) a face with 1.000) at several sizes and offsets, and squares elsewhere
FACES = [(280 - h + dx, 220 - h + dy, 280 + h + dx, 220 + h + dy)
         for h, dx, dy in ((100, 0, 0), (120, -20, 0), (80, 10, -10), (110, 20, 20),
                           (90, -10, 10), (130, 0, -20), (100, 15, -15), (120, -15, 15))]
OTHERS = [(x, y, x + size, y + size) for x, y, size in (
    (0, 0, 150), (300, 300, 200), (100, 400, 160), (350, 20, 150), (0, 300, 180),
    (320, 420, 180), (20, 150, 120), (400, 200, 110))]
#: seeded random squares compared beside every other crop of FACES and OTHERS (R-Net, O-Net),
#: and others (another seed) calibrated on beside the rest, mirrored: with the 8 mirrored crops
#: alone, int8's ranges missed tails that the compared crops reach (docs/trained_models.md)
RANDOM_CROPS, RANDOM_CALIBRATION_CROPS = 48, 24


def trained(name: str) -> nn.Module:
    with zipfile.ZipFile(tm.wheel(PACKAGE, VERSION)) as wheel:
        state = torch.load(io.BytesIO(wheel.read(f"facenet_pytorch/data/{name}.pt")),
                           weights_only=True)
    model = NETS[name]()
    model.load_state_dict(state)
    return model.eval()


def _normalised(image) -> np.ndarray:
    """MTCNN's input: (pixel - 127.5) / 128, NCHW."""
    return ((np.asarray(image, np.float32) - 127.5) * 0.0078125).transpose(2, 0, 1)[None].copy()


def inputs(name: str):
    """(compared, calibration): the whole photograph scaled (P-Net) or crops of its face and
    of other places (R-Net 24x24, O-Net 48x48), every other one compared and the rest,
    mirrored, for calibration; R-Net and O-Net also compare RANDOM_CROPS seeded crops and
    calibrate on RANDOM_CALIBRATION_CROPS others."""
    photo = tm.photograph()
    if name == "pnet":
        compared = [_normalised(photo.resize((150, 128)))]
        calibration = [_normalised(photo.resize((150, 128)).transpose(0)),
                       _normalised(photo.convert("L").convert("RGB").resize((150, 128)))]
        return compared, calibration
    size = 24 if name == "rnet" else 48

    def cropped(boxes):
        return [_normalised(photo.crop(box).resize((size, size))) for box in boxes]

    crops = cropped(FACES + OTHERS)
    return (crops[0::2] + cropped(_random_squares(RANDOM_CROPS, seed=0)),
            [c[..., ::-1].copy() for c in crops[1::2]]
            + cropped(_random_squares(RANDOM_CALIBRATION_CROPS, seed=1)))


def _random_squares(count: int, seed: int) -> list:
    """Squares of 60-259 pixels at seeded random places on the photograph: most of them no
    face, a few across it, so that a score's SQNR is not decided by one or two crops."""
    rng = np.random.default_rng(seed)
    width, height = tm.photograph().size
    squares = []
    for _ in range(count):
        side = int(rng.integers(60, 260))
        x, y = int(rng.integers(0, width - side)), int(rng.integers(0, height - side))
        squares.append((x, y, x + side, y + side))
    return squares


def faces(outputs, name: str) -> np.ndarray:
    """Where a build calls a face: the score's face channel over MTCNN's threshold."""
    return np.concatenate([o[-1][:, 1].ravel() for o in outputs]) > THRESHOLDS[name]


def _joined(outputs, k: int) -> np.ndarray:
    return np.concatenate([np.ravel(o[k]) for o in outputs]).astype(np.float64)


def _sqnrs(outputs, expected) -> list:
    return [sqnr_db(float(np.sum(_joined(expected, k) ** 2)),
                    float(np.sum((_joined(outputs, k) - _joined(expected, k)) ** 2)))
            for k in range(len(expected[0]))]


def _ours(mod, params, precision, compared, calibration):
    extra = {"calibration": [(c,) for c in calibration]} if precision == "int8" else {}
    partitioned = ac.partition_for_accel(mod, params, precision=precision, **extra)
    vm = ac.virtual_machine(ac.build(partitioned))
    return ac.partition_report(partitioned), [
        [o.numpy() for o in vm["main"](tvm.runtime.tensor(x))] for x in compared]


def _ort_int8(path: Path, calibration, compared, folder: Path):
    quantized, _ = ort_baseline.quantize_int8_as_ort_can(path, [(c,) for c in calibration],
                                                         folder)
    session = ort_baseline.session(quantized, threads=1)
    name = session.get_inputs()[0].name
    return [session.run(None, {name: x}) for x in compared]


def survey(name: str, folder: Path) -> None:
    model = trained(name)
    compared, calibration = inputs(name)
    with torch.no_grad():
        expected = [[o.numpy() for o in model(torch.from_numpy(x))] for x in compared]
    answers = faces(expected, name)
    path = export_onnx(model, (torch.from_numpy(compared[0]),), folder / f"{name}.onnx")
    imports = {"pytorch": from_pytorch(model, (torch.from_numpy(compared[0]),)),
               "onnx": from_onnx(path)}
    print(f"{name}: {len(compared)} inputs compared, {int(answers.sum())} of {answers.size} "
          f"{'positions' if name == 'pnet' else 'crops'} a face in PyTorch fp32")
    for source, (mod, params) in imports.items():
        for precision in ("fp32", "fp16", "int8"):
            report, outputs = _ours(mod, params, precision, compared, calibration)
            total = len(report.offloaded) + len(report.host)
            agreement = float(np.mean(faces(outputs, name) == answers))
            print(f"  {source:7s} {precision}: {len(report.offloaded)}/{total} in "
                  f"{len(report.functions)} f, dB per output "
                  f"{' / '.join(f'{d:.1f}' for d in _sqnrs(outputs, expected))}, "
                  f"face calls {agreement:.2f}")
    theirs = _ort_int8(path, calibration, compared, folder)
    print(f"  ONNX Runtime static int8: dB per output "
          f"{' / '.join(f'{d:.1f}' for d in _sqnrs(theirs, expected))}, face calls "
          f"{float(np.mean(faces(theirs, name) == answers)):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nets", nargs="+", choices=sorted(NETS), default=list(NETS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for name in args.nets:
            survey(name, Path(folder))


if __name__ == "__main__":
    main()
