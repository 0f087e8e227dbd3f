"""Small DenseNets: our int8 against ONNX Runtime's static int8, output SQNR against fp32.

The zoo's DenseNet class (tools/models.py) at small sizes, realistically initialised
(``build_realistic``) on 3x64x64: two dense blocks of 4 layers of growth 12 with a transition
(conv 1x1 + 2x2 average pool) between them, or one block of 6 layers of growth 32, each for
model seeds 0, 1 and 2. Both quantisers are calibrated on the same random N(0, 1) inputs
(seed 1234) and evaluated on others (seed 1235) against our fp32 build, as
examples/accuracy_vs_ort.py does for the zoo (``accuracy_report(..., onnx_model=...)``).
densenet121 itself takes minutes; these take under a minute each and show the same
structure: concats read through batch norm + ReLU, average pools (issue 33).

    python examples/densenet_probes.py [--calibration 16] [--inputs 8]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

PROBES = [((4, 4), 12), ((6,), 32)]
SEEDS = (0, 1, 2)


def measure(blocks, growth, seed, args):
    import accel_codegen as ac
    from accel_codegen import frontend
    from accel_codegen.tools import models
    from accel_codegen.tools.model_spec import random_inputs

    model, (x,) = models.build_realistic(
        lambda: models.DenseNet(growth=growth, blocks=blocks, init_features=16, bn_size=4,
                                num_classes=10), (3, 64, 64), seed=seed)
    mod, _ = frontend.from_pytorch(model, (x,))
    calibration = random_inputs([x.numpy()], args.calibration, 1234)
    evaluation = random_inputs([x.numpy()], args.inputs, 1235)
    with tempfile.TemporaryDirectory() as directory:
        path = frontend.export_onnx(model, (x,), Path(directory) / "densenet.onnx")
        return ac.accuracy_report(mod, None, evaluation, config="nv_full", precision="int8",
                                  calibration=calibration, onnx_model=path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", type=int, default=16)
    parser.add_argument("--inputs", type=int, default=8)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print(f"{'blocks':8} {'growth':>6} {'seed':>4} {'ours dB':>8} {'ORT dB':>7} "
          f"{'ours-ORT':>8} {'s':>4}")
    ours, theirs = [], []
    for blocks, growth in PROBES:
        for seed in SEEDS:
            start = time.perf_counter()
            report = measure(blocks, growth, seed, args)
            ours.append(report.output_sqnr_db)
            theirs.append(report.ort.output_sqnr_db)
            print(f"{str(blocks):8} {growth:6} {seed:4} {ours[-1]:8.2f} {theirs[-1]:7.2f} "
                  f"{ours[-1] - theirs[-1]:+8.2f} {time.perf_counter() - start:4.0f}",
                  flush=True)
    print(f"mean: ours {sum(ours) / len(ours):.2f} dB, ONNX Runtime "
          f"{sum(theirs) / len(theirs):.2f} dB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
