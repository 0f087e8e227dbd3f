"""Where int8 calibration spends its time (issue #13, item 7): wall and CPU seconds (this
process, all threads) of each stage, on one model.

Stages: cross-layer equalisation of the weights; the fp32 build of the int8 partition; the
calibration inputs through it without an observer (the floor: the simulator's own work) and
with calibration's observer (its statistics are the difference); the scales of each method
from those statistics. Last, the whole of ``partition_for_accel(..., precision="int8",
calibration=inputs)`` (equalisation, fp32 build, calibration, int8 code generation) once.
``--gptq``: also the pass with GPTQ's observer (statistics and each conv's H), the rounding
itself, and the whole ``partition_for_accel(..., weight_rounding="gptq")``.

    python examples/calibration_time.py [--model resnet50] [--calibration 32] [--gptq]
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--calibration", type=int, default=32)
    parser.add_argument("--methods", nargs="+", default=["mse", "percentile"])
    parser.add_argument("--gptq", action="store_true")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import tvm
    from accel_codegen import AccelConfig, frontend, models
    from accel_codegen.compiler import weight_rounding
    from accel_codegen.compiler.partition import (generate_partition, match_composites,
                                                  partition_for_accel)
    from accel_codegen.quantization.gptq import HessianObserver
    from accel_codegen.compiler.equalization import equalize
    from accel_codegen.compiler.vm import virtual_machine
    from accel_codegen.quantization import Calibration, Observer, observing
    from accel_codegen.tools.model_spec import random_inputs

    def stage(what: str, start) -> None:
        print(f"{what:<34} {time.perf_counter() - start[0]:7.1f} s wall "
              f"{time.process_time() - start[1]:7.1f} s CPU", flush=True)

    def now():
        return time.perf_counter(), time.process_time()

    model, (x,) = models.get_model(args.model)
    mod, _ = frontend.from_pytorch(model, (x,))
    examples = random_inputs([x.numpy()], args.calibration, 1234)
    tensors = [[tvm.runtime.tensor(np.ascontiguousarray(a)) for a in e] for e in examples]
    start = now()
    equalised, _ = equalize(mod)
    stage("cross-layer equalisation", start)
    start = now()
    reference = generate_partition(equalised, None, AccelConfig.resolve("nv_full"), True,
                                   "int8", "fp32", None)
    vm = virtual_machine(tvm.compile(reference, target="llvm"))
    stage("fp32 build of the int8 partition", start)
    start = now()
    for example in tensors:
        vm["main"](*example)
    stage(f"{len(tensors)} inputs, no observer", start)
    observer = Observer()
    start = now()
    with observing(observer):
        for example in tensors:
            vm["main"](*example)
    stage(f"{len(tensors)} inputs, calibration observer", start)
    for method in args.methods:
        start = now()
        Calibration.from_observer(observer, method, len(tensors))
        stage(f"scales: {method} ({len(observer.stats)} tensors)", start)
    start = now()
    partition_for_accel(mod, precision="int8", calibration=examples)
    stage("partition_for_accel, int8, all of it", start)
    if args.gptq:
        start = now()
        matched = match_composites(equalised, None, config="nv_full", precision="int8")
        hessians = HessianObserver(weight_rounding.conv_geometries(matched), len(tensors))
        stage("GPTQ: pattern matching for the convs", start)
        start = now()
        with observing(hessians):
            for example in tensors:
                vm["main"](*example)
        stage(f"{len(tensors)} inputs, + H of {len(hessians.hessians)} convs", start)
        start = now()
        weight_rounding.round_weights(equalised, matched, hessians.hessians)
        stage("GPTQ rounding and the rewrite", start)
        start = now()
        partition_for_accel(mod, precision="int8", calibration=examples, weight_rounding="gptq")
        stage("partition_for_accel, int8, gptq", start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
