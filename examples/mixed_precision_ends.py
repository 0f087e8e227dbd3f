"""The two ends of a mixed-precision search, without the search: all-int8 and all-fp16 cycles
(the cost model) and output SQNR against the fp32 build on the calibration inputs (what the
search measures for them; docs/mixed-precision.md).

    python examples/mixed_precision_ends.py [--model resnet50] [--calibration 8]
"""
from __future__ import annotations

import argparse
import warnings

import numpy as np


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--calibration", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import accel_codegen as ac
    from accel_codegen.compiler.partition import run_main
    from accel_codegen.quantization.metrics import sqnr_db
    from accel_codegen.tools.model_spec import load_model, random_inputs

    m = load_model(args.model)
    examples = random_inputs(m, args.calibration, args.seed)
    vm = ac.virtual_machine(ac.build(m.mod, m.params, precision="fp32"))
    reference = [run_main(vm, x).astype(np.float64) for x in examples]
    signal = sum(float(np.sum(r ** 2)) for r in reference)
    for precision in ("int8", "fp16"):
        exe = ac.build(m.mod, m.params, precision=precision,
                       calibration=examples if precision == "int8" else None)
        vm = ac.virtual_machine(exe)
        noise = sum(float(np.sum((run_main(vm, x) - r) ** 2))
                    for x, r in zip(examples, reference))
        cycles = ac.estimate(m.mod, m.params, precision=precision).total_cycles
        print(f"{args.model} all-{precision}: {cycles:,} cycles, {sqnr_db(signal, noise):.2f} dB "
              f"on {args.calibration} inputs", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
