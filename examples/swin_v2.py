"""Swin-V2 on the accelerator (issue 29): per model, the operators offloaded, the external
functions, the fp32 error against PyTorch (max |error| / max |output|, beside PyTorch fp32's
own against float64) and the fp16 SQNR against a float64 run beside PyTorch's own ``.half()``:

    python examples/swin_v2.py [--models blocks tiny mini] [--precisions fp32 fp16]

blocks: two Swin-V2 blocks (width 16, 2 heads, window 7, the second shifted) on a 14x14x16
channels-last input; tiny: Swin-V2 at the test size of tests/flow/test_transformer_zoo.py
(width 16, [2, 2] blocks of [1, 2] heads, 3x56x56); mini: swin_mini's layout with Swin-V2's
blocks and patch merging (width 32, [2, 2, 2, 2] blocks of [1, 2, 4, 8] heads, 3x224x224).
Realistic initialisation (``build_realistic``), nv_full. Figures in docs/transformer_ops.md."""
import argparse

import numpy as np
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import from_pytorch
from accel_codegen.compiler.partition import run_main
from accel_codegen.quantization.metrics import sqnr_db
from accel_codegen.tools.models import SwinBlockV2, SwinTransformer, build_realistic

MODELS = {
    "blocks": lambda: build_realistic(lambda: torch.nn.Sequential(
        SwinBlockV2(16, 2, 7, 0, 14), SwinBlockV2(16, 2, 7, 3, 14)), (14, 14, 16)),
    "tiny": lambda: build_realistic(lambda: SwinTransformer(
        image=56, dim=16, depths=(2, 2), heads=(1, 2), window=7, num_classes=10, v2=True),
        (3, 56, 56)),
    "mini": lambda: build_realistic(lambda: SwinTransformer(v2=True), (3, 224, 224)),
}


def _forward(model, x, dtype):
    with torch.no_grad():
        return model.to(dtype)(x.to(dtype)).to(torch.float64).numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["blocks", "tiny"], choices=MODELS)
    parser.add_argument("--precisions", nargs="+", default=["fp32", "fp16"])
    args = parser.parse_args()
    for name in args.models:
        model, (x,) = MODELS[name]()
        mod, params = from_pytorch(model, (x,))
        exact = _forward(model, x, torch.float64)
        for precision in args.precisions:
            report = ac.partition_report(mod, params, precision=precision)
            total, host = len(report.ops), len(report.host)
            vm = ac.virtual_machine(ac.build(mod, params=params, precision=precision))
            ours = run_main(vm, (x.numpy(),)).astype(np.float64)
            line = (f"{name} {precision}: {total - host} of {total} operators offloaded "
                    f"({100 * (total - host) / total:.1f} %) in {len(report.functions)} "
                    "function(s)")
            if precision == "fp32":
                theirs = _forward(model, x, torch.float32)
                scale = np.abs(theirs).max()
                line += (f"; max error {np.abs(ours - theirs).max() / scale:.1e} of the output "
                         f"scale (PyTorch fp32 against float64: "
                         f"{np.abs(theirs - exact).max() / scale:.1e})")
            else:
                half = _forward(model, x, torch.float16)
                power = float(np.sum(exact ** 2))
                line += (f"; SQNR against float64 {sqnr_db(power, float(np.sum((ours - exact) ** 2))):.1f}"
                         f" dB, PyTorch's .half() {sqnr_db(power, float(np.sum((half - exact) ** 2))):.1f} dB")
            print(line, flush=True)
            model.float()


if __name__ == "__main__":
    main()
