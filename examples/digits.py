"""A CNN trained on real data, built for the accelerator in fp32, fp16 and int8: top-1 on
held-back images.

scikit-learn's 8x8 digits (1,797 images, ten classes), a stratified quarter held back; a small
CNN (accel_codegen.tools.digits.DigitsCNN: three conv + BN + ReLU units, two max pools, a
linear layer) trained in PyTorch on the rest, deterministically, in a few seconds of CPU.
The model is then imported, partitioned and built for the accelerator in fp32, fp16 and int8
(int8 calibrated on 128 training images) and each build classifies the held-back images;
ONNX Runtime's static int8 (calibrated on the same images) too when onnxruntime is installed.
Issue #13's goal: int8 top-1 within 0.5 points of fp32.

    pip install 'accel-codegen[digits]'
    python examples/digits.py [--config nv_full] [--epochs 10]
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch

from accel_codegen.tools import digits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="nv_full", help="a preset with fp16 (nv_full)")
    parser.add_argument("--epochs", type=int, default=digits.EPOCHS,
                        help=f"training epochs ({digits.EPOCHS})")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=FutureWarning)  # torch.export's own noise

    split = digits.digits_split()
    start = time.process_time()
    model = digits.train_digits_cnn(split, epochs=args.epochs)
    print(f"digits: {len(split.train_y)} training images, {len(split.test_y)} held back; "
          f"trained {args.epochs} epochs in {time.process_time() - start:.1f} s of CPU")
    with torch.no_grad():
        reference = model(torch.from_numpy(split.test_x)).numpy()
    rows = [("PyTorch fp32", digits.top1(reference, split.test_y), None)]
    for precision in ("fp32", "fp16", "int8"):
        logits, report = digits.accelerator_logits(model, split, precision, config=args.config)
        host = f"{len(report.host)} op(s) on the host" if report.host else "all offloaded"
        rows.append((f"accelerator {precision} ({host})", digits.top1(logits, split.test_y),
                     logits))
    from accel_codegen.quantization import ort_baseline

    reason = ort_baseline.unavailable()
    if reason:
        print(f"ONNX Runtime int8 skipped: {reason}")
    else:
        logits = digits.ort_int8_logits(model, split)
        rows.append((f"ONNX Runtime {ort_baseline.version()} int8",
                     digits.top1(logits, split.test_y), logits))
    fp32 = rows[1][1]
    print(f"{'':40} {'top-1':>7} {'vs fp32':>8} {'max |logit - PyTorch|':>22} "
          f"{'SQNR vs PyTorch':>16}")
    for name, accuracy, logits in rows:
        if logits is None:
            error = sqnr = "-"
        else:
            error = f"{float(np.abs(logits - reference).max()):.3g}"
            noise = float(np.sum((logits.astype(np.float64) - reference) ** 2))
            sqnr = "exact" if noise == 0 else \
                f"{10 * np.log10(np.sum(reference.astype(np.float64) ** 2) / noise):.2f} dB"
        print(f"{name:40} {accuracy * 100:6.2f}% {(accuracy - fp32) * 100:+7.2f} "
              f"{error:>22} {sqnr:>16}")


if __name__ == "__main__":
    main()
