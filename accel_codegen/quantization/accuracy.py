"""Accuracy of a reduced-precision build against fp32: per tensor and at the model output.

The fp32 reference is the same partition generated in fp32 (every chain the target precision
offloads, offloaded the same way), so the two runs make the same accelerator runs and the
observer (``accel_set_observer``) hands over the same tensors of both: each run's input and
every engine pass's output, including what a fused chain keeps on chip. int8 codes are
dequantised with the scale the generated code used for them.

Per-tensor figures are cumulative: a tensor's error includes everything upstream of it.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Dict, Iterable, List, Optional, Tuple

import numpy as np
import tvm

from ..compiler.walk import runs
from ..errors import AccelInvalidError
from ..compiler.partition import calibration_of, generate_partition, match_composites, partition_for_accel
from ..sim.config import AccelConfig
from ..tables import Column, render_table
from ..compiler.toolchain import virtual_machine
from .calibration import DEFAULT_METHOD, Key, examples_of, observing


def sqnr_db(signal_power: float, noise_power: float) -> float:
    """10 log10(signal / noise); inf when there is no noise."""
    if noise_power == 0:
        return float("inf")
    if signal_power == 0:
        return float("-inf")
    return float(10.0 * np.log10(signal_power / noise_power))


@dataclasses.dataclass
class TensorAccuracy:
    """One accelerator tensor over all inputs."""

    key: str            # the run (``f0.3``; ``a``/``b``: a residual branch and its layer)
    op_index: int       # the op whose output it is
    label: str          # the run's label: key and primitive
    shape: Tuple[int, ...]
    sqnr_db: float
    max_abs_error: float
    saturated: float    # fraction of int8 codes clipped at either end of the range (0 for fp16)
    scale: Optional[float] = None
    zero: Optional[int] = None


@dataclasses.dataclass
class AccuracyReport:
    config: str
    precision: str
    calibration_method: Optional[str]
    calibration_samples: int
    inputs: int
    output_sqnr_db: float
    top1_agreement: Optional[float]   # classification outputs ([N, classes]) only
    tensors: List[TensorAccuracy]

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        for key in ("output_sqnr_db",):
            data[key] = _finite(data[key])
        for t in data["tensors"]:
            t["sqnr_db"] = _finite(t["sqnr_db"])
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    def __str__(self) -> str:
        calibration = f", calibration {self.calibration_method} on " \
                      f"{self.calibration_samples} inputs" if self.calibration_method else ""
        top1 = f", top-1 agreement {self.top1_agreement * 100:.1f} %" \
            if self.top1_agreement is not None else ""
        lines = [f"{self.precision} on {self.config} vs fp32 over {self.inputs} inputs"
                 f"{calibration}: output SQNR {self.output_sqnr_db:.2f} dB{top1}"]
        rows = []
        for t in self.tensors:
            primitive = t.label.split(" ", 1)[1] if " " in t.label else t.label
            rows.append([t.key, t.op_index, primitive, "x".join(map(str, t.shape)), t.sqnr_db,
                         t.max_abs_error, t.saturated * 100,
                         "" if t.scale is None else t.scale, "" if t.zero is None else t.zero])
        lines.append(render_table(_TENSOR_COLUMNS, rows))
        return "\n".join(lines)


_TENSOR_COLUMNS = (Column("run", 7, "<"), Column("op", 3),
                   Column("primitive", 44, "<", clip=True, gap="  "), Column("shape", 16, "<"),
                   Column("SQNR dB", 8, spec=".2f"), Column("max err", 9, spec=".3g"),
                   Column("sat %", 6, spec=".2f"), Column("scale", 10, spec=".3g"),
                   Column("zero", 5, spec="d"))


def _finite(value: float):
    return value if np.isfinite(value) else str(value)


class _Recorder:
    """Keeps a copy of every fp32 pass output of one inference."""

    def __init__(self) -> None:
        self.tensors: Dict[Key, np.ndarray] = {}

    def add(self, label: str, op_index: int, x: np.ndarray) -> None:
        if op_index < 0:
            return
        key = (label.split(" ", 1)[0], op_index)
        self.tensors[key] = np.array(x, np.float64)


class _Comparer:
    """Accumulates the error of the target run's pass outputs against a recording.
    ``shifted``: runs whose conv has no SDP of its own, to which the target precision adds
    one (its converter), so their later ops are one index further than in fp32."""

    def __init__(self, quantization, shifted) -> None:
        self.quantization = quantization
        self.shifted = shifted
        self.reference: Dict[Key, np.ndarray] = {}
        # signal, noise, max error, saturated, count, shape, label
        self.sums: Dict[Key, list] = {}

    def add(self, label: str, op_index: int, x: np.ndarray) -> None:
        key = (label.split(" ", 1)[0], op_index)
        fp32_index = op_index - 1 if key[0] in self.shifted and op_index >= 1 else op_index
        ref = self.reference.get((key[0], fp32_index))
        if op_index < 0 or ref is None or ref.shape != x.shape:
            return
        saturated = 0
        if x.dtype == np.int8:
            quant = self.quantization.tensors.get(key)
            if quant is None:
                return
            # -128 is the real zero of an unsigned tensor, not a clipped value
            saturated = int(np.count_nonzero((x == 127) | ((x == -128) & (quant.zero > -128))))
            value = (x.astype(np.float64) - quant.zero) * np.float64(np.float32(quant.scale))
        else:
            value = x.astype(np.float64)
        error = value - ref
        sums = self.sums.setdefault(key, [0.0, 0.0, 0.0, 0, 0, x.shape, label])
        sums[0] += float(np.sum(ref * ref))
        sums[1] += float(np.sum(error * error))
        sums[2] = max(sums[2], float(np.max(np.abs(error))) if error.size else 0.0)
        sums[3] += saturated
        sums[4] += x.size


def accuracy_report(mod: tvm.IRModule, params=None, inputs: Iterable = (), *,
                    config: AccelConfig | str = "nv_full", precision: str = "int8",
                    fuse: bool = True, calibration=None,
                    calibration_method: str = DEFAULT_METHOD) -> AccuracyReport:
    """Run ``inputs`` through the fp32 and the ``precision`` builds of a model and compare.

    Parameters
    ----------
    mod, params, config, fuse, calibration, calibration_method
        As for :func:`accel_codegen.partition_for_accel`; ``precision`` "int8" or "fp16".
    inputs : iterable
        Evaluation inputs of ``main`` (each a tuple of arrays, or one array); use inputs other
        than the calibration ones.

    Returns
    -------
    AccuracyReport
        SQNR against fp32 per accelerator tensor (every pass output, in execution order) and
        at the model output, and the top-1 agreement for classification outputs.
    """
    config = AccelConfig.resolve(config)
    if precision == "fp32":
        raise AccelInvalidError("the accuracy report compares a reduced precision with fp32")
    examples = examples_of(inputs, "the accuracy report")
    target = partition_for_accel(mod, params, config=config, fuse=fuse, precision=precision,
                                 calibration=calibration,
                                 calibration_method=calibration_method)
    used = calibration_of(target, used=True)
    reference = generate_partition(mod, params, config, fuse, precision, "fp32", None)
    ref_vm = virtual_machine(tvm.compile(reference, target="llvm"))
    vm = virtual_machine(tvm.compile(target, target="llvm"))

    def run(machine, example):
        result = machine["main"](*(tvm.runtime.tensor(np.ascontiguousarray(x))
                                   for x in example))
        return np.asarray(result.numpy(), np.float64)

    matched = match_composites(mod, params, config=config, fuse=fuse, precision=precision)
    shifted = {run.key for run in runs(matched)
               if run.layer.conv is not None and run.layer.sdp.empty()}
    comparer = _Comparer(used, shifted)
    signal = noise = 0.0
    agree = total = 0
    for example in examples:
        recorder = _Recorder()
        with observing(recorder):
            expected = run(ref_vm, example)
        comparer.reference = recorder.tensors
        with observing(comparer):
            actual = run(vm, example)
        signal += float(np.sum(expected * expected))
        noise += float(np.sum((actual - expected) ** 2))
        if expected.ndim == 2 and expected.shape[1] > 1:
            agree += int(np.sum(expected.argmax(axis=1) == actual.argmax(axis=1)))
            total += expected.shape[0]
    tensors = []
    for key, (sig, err, max_err, saturated, count, shape, label) in comparer.sums.items():
        quant = used.tensors.get(key) if used is not None else None
        tensors.append(TensorAccuracy(
            key[0], key[1], label, tuple(int(d) for d in shape), sqnr_db(sig, err),
            max_err, saturated / count if count else 0.0,
            quant.scale if quant else None, quant.zero if quant else None))
    return AccuracyReport(config.name, precision, used.method if used else None,
                          used.samples if used else 0, len(examples), sqnr_db(signal, noise),
                          agree / total if total else None, tensors)
