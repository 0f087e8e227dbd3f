"""Models that arrive quantised (issue 33, item 7), measured: how far the accelerator's int8 run
of a model quantised elsewhere is from that toolchain's own int8 run, in output codes.

* ``onnx:<zoo model>:<pc|pt>``: the zoo model exported to ONNX, quantised by ONNX Runtime's
  ``quantize_static`` (QDQ, uint8 activations, int8 weights per channel or per tensor, 8
  calibration inputs: ``quantization.ort_baseline.quantize_int8``), imported with its scales
  (``from_onnx``), built in int8 without calibration of ours; against ONNX Runtime's int8 run
  of the same file; beside it, ONNX Runtime's optimised run (QLinearConv: integer kernels)
  against its unoptimised run (DequantizeLinear -> float op -> QuantizeLinear) of the file:
  how far two int8 runs of the same model by the same runtime are apart.
* ``trained:<name>``: a model of docs/trained_models.md, quantised the same way on 2 of its
  real inputs, compared on 2 others.
* ``pt2e:<zoo model>:<pc|pt>``: the zoo model quantised with PT2E (torchao's prepare_pt2e /
  convert_pt2e, ``tools.pt2e_quantizer.AccelQuantizer``), imported with ``from_pytorch``;
  against PyTorch's run of the converted model.

Each line: operators offloaded, functions, run tensors without a scale of the model's, and the
histogram of |ours - reference| in output codes (index = codes).

    python examples/quantised_models.py onnx:resnet18:pc onnx:resnet18:pt trained:orientation
"""
import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import tvm

from accel_codegen.compiler import qdq
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from accel_codegen.compiler.vm import virtual_machine
from accel_codegen.flows.pipeline import partition_for_accel, partition_report
from accel_codegen.flows.qdq import qdq_calibration
from accel_codegen.tools.models import get_model

TESTED = 3  # inputs compared per zoo model


def histogram(differences) -> str:
    d = np.concatenate([np.asarray(x).reshape(-1) for x in differences]).astype(int)
    return f"{d.size} values, max {d.max()} codes, histogram {np.bincount(d).tolist()}"


def build(mod, calibration):
    """The int8 build of an imported quantised model, and what its partition says."""
    start = time.time()
    match = qdq_calibration(mod, examples=calibration)
    partitioned = partition_for_accel(mod, precision="int8", calibration=calibration)
    report = partition_report(partitioned)
    offloaded = len(report.ops) - len(report.host)
    host = sorted({op.op for op in report.host})
    print(f"  {offloaded}/{len(report.ops)} operators offloaded in {len(report.functions)} "
          f"function(s); {len(match.unmatched)} of {len(match.calibration.tensors)} run "
          f"tensors without a model scale; host: {host or 'nothing'} "
          f"({time.time() - start:.0f} s)", flush=True)
    return virtual_machine(tvm.compile(partitioned, target="llvm"))


def run(vm, inputs):
    result = vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(x)) for x in inputs])
    return [result.numpy()] if hasattr(result, "numpy") else [r.numpy() for r in result]


def ort_comparison(path, calibration, tested):
    import onnxruntime as ort

    from accel_codegen.quantization import ort_baseline

    mod, _ = from_onnx(path)
    annotations = qdq.annotations_of(mod)
    vm = build(mod, calibration)
    optimised = ort_baseline.session(path, threads=1)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    plain = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in optimised.get_inputs()]
    outputs = [o.name for o in optimised.get_outputs()]
    ours, theirs = {}, {}
    for x in tested:
        feeds = ort_baseline.feeds(names, x)
        reference, unoptimised = optimised.run(None, feeds), plain.run(None, feeds)
        for name, r, o, u in zip(outputs, reference, run(vm, x), unoptimised):
            if name not in annotations.tensors:
                print(f"  output {name} is not quantised by the model: skipped")
                continue
            scale = annotations.tensors[name][0]
            codes = lambda v: np.round(np.asarray(v, np.float64) / scale)  # noqa: E731
            ours.setdefault(name, []).append(np.abs(codes(o) - codes(r)))
            theirs.setdefault(name, []).append(np.abs(codes(u) - codes(r)))
    for name in ours:
        print(f"  output {name}: accelerator vs ONNX Runtime int8: {histogram(ours[name])}")
        print(f"  output {name}: ONNX Runtime unoptimised vs optimised: "
              f"{histogram(theirs[name])}", flush=True)


def zoo_inputs(name):
    model, inputs = get_model(name, batch=1, seed=0)
    shape = tuple(inputs[0].shape)
    rng = np.random.default_rng(7)
    calibration = [(rng.standard_normal(shape).astype(np.float32),) for _ in range(8)]
    tested = [(np.random.default_rng(100 + i).standard_normal(shape).astype(np.float32),)
              for i in range(TESTED)]
    return model, inputs, calibration, tested


def onnx_zoo(name, weights):
    from accel_codegen.quantization import ort_baseline

    model, inputs, calibration, tested = zoo_inputs(name)
    folder = Path(tempfile.mkdtemp())
    export_onnx(model, inputs, folder / f"{name}.onnx")
    path = ort_baseline.quantize_int8(folder / f"{name}.onnx", calibration, folder,
                                      ort_baseline.Int8Settings(per_channel=weights == "pc"))
    print(f"onnx {name}, weights {'per channel' if weights == 'pc' else 'per tensor'}:")
    ort_comparison(path, calibration, tested)


def trained(name):
    from onnx import version_converter

    from accel_codegen.quantization import ort_baseline
    from accel_codegen.tools import trained_models

    model = trained_models.load(name)
    folder = Path(tempfile.mkdtemp())
    onnx_model = model.onnx_model
    if trained_models._default_opset(onnx_model) < 13:  # per-channel DequantizeLinear
        onnx_model = version_converter.convert_version(onnx_model, 13)
    (folder / f"{name}.onnx").write_bytes(onnx_model.SerializeToString())
    calibration, tested = model.inputs(2, held_out=True), model.inputs(2)
    for settings in (ort_baseline.Int8Settings(), ort_baseline.Int8Settings(pre_process=False)):
        try:  # ONNX Runtime's pre-processing raises on some graphs
            path = ort_baseline.quantize_int8(folder / f"{name}.onnx", calibration, folder,
                                              settings)
            break
        except Exception as error:  # noqa: BLE001 (ONNX Runtime's, reported)
            print(f"  quantize_static with {settings}: {type(error).__name__}")
    print(f"trained {name}:")
    ort_comparison(path, calibration, tested)


def pt2e_zoo(name, weights):
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from accel_codegen.compiler import pt2e
    from accel_codegen.tools.pt2e_quantizer import AccelQuantizer

    model, inputs, calibration, tested = zoo_inputs(name)
    with torch.no_grad():
        exported = torch.export.export(model.eval(), inputs).module()
        prepared = prepare_pt2e(exported, AccelQuantizer(per_channel=weights == "pc"))
        for (x,) in calibration:
            prepared(torch.from_numpy(x))
        converted = convert_pt2e(prepared)
    output = next(n for n in converted.graph.nodes if n.op == "output").args[0]
    output = output[0] if isinstance(output, (tuple, list)) else output
    assert pt2e.quant_op(output) == "dequantize_per_tensor", "the output is not quantised"
    scale = float(output.args[1])
    print(f"pt2e {name}, weights {'per channel' if weights == 'pc' else 'per tensor'}:")
    mod, _ = from_pytorch(converted, inputs)
    vm = build(mod, calibration)
    differences = []
    for (x,) in tested:
        with torch.no_grad():
            reference = converted(torch.from_numpy(x))
        reference = reference[0] if isinstance(reference, (tuple, list)) else reference
        ours = run(vm, (x,))[0]
        differences.append(np.abs(np.round(ours / scale) - np.round(reference.numpy() / scale)))
    print(f"  accelerator vs PyTorch: {histogram(differences)}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="onnx:<zoo>:<pc|pt>, trained:<name>, "
                        "pt2e:<zoo>:<pc|pt>")
    args = parser.parse_args()
    for spec in args.models:
        kind, *rest = spec.split(":")
        if kind == "trained":
            trained(rest[0])
        elif kind == "onnx":
            onnx_zoo(rest[0], rest[1] if len(rest) > 1 else "pc")
        elif kind == "pt2e":
            pt2e_zoo(rest[0], rest[1] if len(rest) > 1 else "pc")
        else:
            parser.error(f"{spec}: onnx:, trained: or pt2e:")


if __name__ == "__main__":
    main()
