"""Issue 32's speed table: the simulator against ONNX Runtime, fp32 and int8, on ResNet-50,
MobileNetV2, EfficientNet-B0 (SiLU, squeeze-excite), two YOLO-style SiLU detectors (YOLOX,
ddddocr's trained ``common_det.onnx`` at its 416x416 input, from the trained set, converted
to opset 13 as tools/trained_models.py does; and the zoo's YOLOv8n at 320x320) and a
hardswish network (MobileNetV3-small), each through ``bench.run_bench`` (interleaved rounds,
medians), with the slowdown against the modelled hardware.

    python examples/bench_issue32.py --threads 1 [--repeat 7] [--calibration 8]
                                     [--models resnet50,mobilenet_v2,...] [--json out.json]
                                     [--modes fused,fused_int8,ort_fp32,ort_int8]

The AVX2-only table (issue 32's other goal: the simulator built for x86-64-v3 against PyTorch
held to AVX2; docs/measurements.md, "An AVX2-only build"), from a venv holding that build:

    OPENBLAS_CORETYPE=Haswell ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 \
        python examples/bench_issue32.py --threads 1 --modes fused,pytorch,ort_fp32

(PyTorch cannot run the detector, an ONNX file: its row has no PyTorch figure.)

One thread count per process (the simulator reads ACCEL_NUM_THREADS when it makes its
device). The int8 modes (ours and ONNX Runtime's) calibrate on the same inputs: the trained
detector on its real ones (tools/trained_models.py), the zoo on random N(0, 1) ones.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import tempfile
from pathlib import Path

from accel_codegen.tools import bench

MODELS = ("resnet50", "mobilenet_v2", "efficientnet_b0", "ddddocr_det", "yolov8n",
          "mobilenet_v3_small")
MODES = ["fused", "fused_int8", "ort_fp32", "ort_int8"]


def _cpu() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        name = [ln.split(":", 1)[1].strip() for ln in out.splitlines()
                if ln.startswith("Model name")]
        flags = [ln for ln in out.splitlines() if ln.startswith("Flags")]
        amx = bool(flags) and "amx_int8" in flags[0]
        return f"{name[0] if name else platform.processor()}, AMX {'yes' if amx else 'no'}"
    except (OSError, subprocess.CalledProcessError):
        return platform.processor()


def run(name: str, threads: int, repeat: int, calibration: int, folder: Path,
        modes: list = MODES) -> dict:
    if name == "ddddocr_det":
        from accel_codegen.tools import trained_models as tm

        from onnx import version_converter

        loaded = tm.load(name)
        path = folder / f"{name}.onnx"
        onnx_model = loaded.onnx_model
        # ONNX Runtime's per-channel int8 needs opset 13 (as tools/trained_models.py converts)
        if max(o.version for o in onnx_model.opset_import if o.domain in ("", "ai.onnx")) < 13:
            onnx_model = version_converter.convert_version(onnx_model, 13)
        path.write_bytes(onnx_model.SerializeToString())
        examples = loaded.spec.make_inputs(calibration)
        return bench.run_bench(str(path), modes=list(modes), repeat=repeat, threads=threads,
                               calibration=examples, progress=False)
    return bench.run_bench(name, modes=list(modes), repeat=repeat, threads=threads,
                           calibration=calibration, progress=False)


def torch_columns(med) -> str:
    """PyTorch's median time and its ratio to the simulator's fp32 (>= 1.00: ours at least as
    fast), NaN where PyTorch did not run (an ONNX model)."""
    return f" {med('pytorch'):10.2f} {med('pytorch') / med('fused'):6.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--calibration", type=int, default=8)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--json", default=None)
    parser.add_argument("--modes", default=",".join(MODES),
                        help="bench modes (pytorch adds PyTorch's time and its ratio)")
    args = parser.parse_args()
    modes = args.modes.split(",")
    held = {v: os.environ[v] for v in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY",
                                       "OPENBLAS_CORETYPE") if v in os.environ}
    print(f"CPU: {_cpu()}; threads {args.threads}; {args.repeat} interleaved rounds; "
          f"load average {os.getloadavg()[0]:.2f} at the start"
          f"{'; ' + str(held) if held else ''}", flush=True)
    print(f"{'model':20s} {'fp32 ms':>9s} {'ORT fp32':>9s} {'ratio':>6s} {'int8 ms':>9s} "
          f"{'ORT int8':>9s} {'ratio':>6s} {'slow fp32':>10s} {'slow int8':>10s} {'load':>5s}"
          f"{' PyTorch ms  ratio' if 'pytorch' in modes else ''}", flush=True)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            try:
                r = run(name, args.threads, args.repeat, args.calibration, Path(tmp), modes)
            except Exception as error:  # pylint: disable=broad-except  (reported, then on)
                print(f"{name:20s} failed: {type(error).__name__}: "
                      f"{str(error).splitlines()[0][:200]}", flush=True)
                continue
            results[name] = r
            m, v = r["modes"], r["vs_ort"]
            med = lambda mode: m[mode]["wall_ms"]["median"] if mode in m else float("nan")  # noqa
            ratio = lambda p: v[p]["median"] if p in v else float("nan")  # noqa: E731
            slow = lambda mode: ((m[mode].get("slowdown") or {}) if mode in m else {}).get(  # noqa
                "median", float("nan"))
            print(f"{name:20s} {med('fused'):9.2f} {med('ort_fp32'):9.2f} {ratio('fp32'):6.2f} "
                  f"{med('fused_int8'):9.2f} {med('ort_int8'):9.2f} {ratio('int8'):6.2f} "
                  f"{slow('fused'):10,.1f} {slow('fused_int8'):10,.1f} "
                  f"{r['load_average']['after']:5.2f}"
                  f"{torch_columns(med) if 'pytorch' in modes else ''}", flush=True)
            if r["skipped"]:
                print(f"  skipped: {r['skipped']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
