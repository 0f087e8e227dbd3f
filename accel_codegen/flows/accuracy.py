"""Accuracy of a reduced-precision build against fp32: per tensor and at the model output.

The fp32 reference is the same partition generated in fp32 (every chain the target precision
offloads, offloaded the same way), so the two runs make the same accelerator runs and the
observer (``accel_set_observer``) hands over the same tensors of both: each run's input and
every engine pass's output, including what a fused chain keeps on chip. int8 codes are
dequantised with the scale the generated code used for them.

Per-tensor figures are cumulative: a tensor's error includes everything upstream of it. A
layer decomposed into engine passes (softmax, layer norm) may make other passes in the target
precision (fp16's Newton steps, its sums as CONVs): its pass runs are compared only with the
fp32 run of the same label, and each layer's output (the last tensor its runs make) with the
fp32 build's output of the layer (``layers`` of the report: what the debugger reads).

For int8, given the model's ONNX file (``onnx_model``), the report also quantises it with ONNX
Runtime's static QDQ int8 quantisation, calibrated on the same calibration inputs, and sets
its output SQNR against the same fp32 reference (our fp32 build's output) beside ours
(:mod:`accel_codegen.quantization.ort_baseline` holds the settings; onnxruntime is optional:
without it the comparison is skipped and the report says why).
"""
from __future__ import annotations

import dataclasses
import json
import tempfile
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np
import tvm

from ..compiler.walk import runs
from ..errors import AccelInvalidError, AccelUnsupportedError
from ..compiler.partition import (PartitionReport, calibration_of, generate_partition,
                                  match_composites)
from ..compiler.target import Target
from ..sim.config import AccelConfig
from ..sim.labels import CONVERT_PART, is_pass_label, layer_key
from ..tables import Column, render_table
from ..compiler.toolchain import virtual_machine
from ..quantization import ort_baseline
from ..quantization.calibration import DEFAULT_METHOD, Calibration, Key, examples_of, observing
from ..quantization.metrics import sqnr_db
from .pipeline import equalized_module, mixed_precision_of, partition_for_accel, partition_report


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
class OrtComparison:
    """ONNX Runtime's static int8 quantisation of the same model, on the same inputs."""

    version: str
    settings: Dict[str, Any]          # ort_baseline.Int8Settings as a dict
    calibration_samples: int
    output_sqnr_db: float             # ORT int8 against our fp32 build's output
    top1_agreement: Optional[float]
    fp32_sqnr_db: float               # ORT fp32 against the same reference (the same model?)
    int8_model: Dict[str, int]        # QDQ node and int8 weight counts (it is quantised)

    def describe(self) -> str:
        s = self.settings
        return (f"ONNX Runtime {self.version} int8 (static {s['quant_format']}, "
                f"{s['activation_type']} activations, per-channel {s['weight_type']} weights, "
                f"{s['calibrate_method']}, the same {self.calibration_samples} calibration "
                f"inputs{'' if s['pre_process'] else ', without its pre-processing, which failed on this graph'})")


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
    ort: Optional[OrtComparison] = None
    ort_skipped: Optional[str] = None  # why there is no ONNX Runtime comparison, if asked for
    layer_precisions: Optional[Dict[str, str]] = None  # mixed: each layer's (``f0.3``: int8)
    # every output's SQNR (output_sqnr_db is the worst of them)
    output_sqnrs_db: Optional[List[float]] = None
    # mixed, searched: the target and what the search measured for the chosen assignment
    # (worst output, on its calibration inputs and on those it held back from calibration)
    target_sqnr_db: Optional[float] = None
    search_sqnr_db: Optional[float] = None
    search_held_back_sqnr_db: Optional[float] = None
    # each accelerator layer's output against the fp32 build's (key: the layer's, ``f0.3``)
    layers: List[TensorAccuracy] = dataclasses.field(default_factory=list)
    # the build's partition report (where each operator runs; not in to_dict: `partition
    # --json` gives it)
    partition: Optional[PartitionReport] = None

    @property
    def ort_gap_db(self) -> Optional[float]:
        """Our output SQNR minus ONNX Runtime int8's (> 0: ours is the more accurate)."""
        return None if self.ort is None else self.output_sqnr_db - self.ort.output_sqnr_db

    def to_dict(self) -> dict:
        data = dataclasses.asdict(dataclasses.replace(self, partition=None))
        del data["partition"]
        for key in ("output_sqnr_db", "search_sqnr_db", "search_held_back_sqnr_db"):
            data[key] = _finite(data[key]) if data[key] is not None else None
        if data["output_sqnrs_db"] is not None:
            data["output_sqnrs_db"] = [_finite(v) for v in data["output_sqnrs_db"]]
        for t in data["tensors"] + data["layers"]:
            t["sqnr_db"] = _finite(t["sqnr_db"])
        if data["ort"] is not None:
            for key in ("output_sqnr_db", "fp32_sqnr_db"):
                data["ort"][key] = _finite(data["ort"][key])
            data["ort"]["gap_db"] = _finite(self.ort_gap_db)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    def __str__(self) -> str:
        calibration = f", calibration {self.calibration_method} on " \
                      f"{self.calibration_samples} inputs" if self.calibration_method else ""
        top1 = f", top-1 agreement {self.top1_agreement * 100:.1f} %" \
            if self.top1_agreement is not None else ""
        precision = self.precision
        if self.layer_precisions:
            counts = [f"{sum(p == each for p in self.layer_precisions.values())} {each}"
                      for each in ("int8", "fp16")]
            precision += f" ({' and '.join(counts)} layers)"
        several = self.output_sqnrs_db is not None and len(self.output_sqnrs_db) > 1
        worst = f" (the worst of {len(self.output_sqnrs_db)} outputs)" if several else ""
        lines = [f"{precision} on {self.config} vs fp32 over {self.inputs} inputs"
                 f"{calibration}: output SQNR {self.output_sqnr_db:.2f} dB{worst}{top1}"]
        if several:
            lines.append("output SQNR per output: " + ", ".join(
                f"{i}: {v:.2f} dB" for i, v in enumerate(self.output_sqnrs_db)))
        if self.target_sqnr_db is not None:
            met = "met" if self.output_sqnr_db >= self.target_sqnr_db else "NOT met"
            searched = f" (the search measured {self.search_sqnr_db:.2f} dB on its " \
                f"calibration inputs" + (
                    f", {self.search_held_back_sqnr_db:.2f} dB on those it held back"
                    if self.search_held_back_sqnr_db is not None else "") + ")" \
                if self.search_sqnr_db is not None else ""
            lines.append(f"target {self.target_sqnr_db:g} dB on every output: {met} on these "
                         f"{self.inputs} inputs, which calibration did not see{searched}")
        if self.ort is not None:
            o = self.ort
            top1 = f", top-1 agreement {o.top1_agreement * 100:.1f} %" \
                if o.top1_agreement is not None else ""
            lines.append(f"{o.describe()}: output SQNR {o.output_sqnr_db:.2f} dB{top1}; ours "
                         f"minus ONNX Runtime's: {self.ort_gap_db:+.2f} dB (ONNX Runtime fp32 "
                         f"against our fp32 build: {o.fp32_sqnr_db:.1f} dB)")
        elif self.ort_skipped:
            lines.append(f"ONNX Runtime int8 comparison skipped: {self.ort_skipped}")
        rows = []
        for t in self.tensors:
            primitive = t.label.split(" ", 1)[1] if " " in t.label else t.label
            rows.append([t.key, t.op_index, primitive, "x".join(map(str, t.shape)), t.sqnr_db,
                         t.max_abs_error, t.saturated * 100,
                         "" if t.scale is None else t.scale, "" if t.zero is None else t.zero])
            if self.layer_precisions:  # mixed: the precision of the tensor's layer
                rows[-1].insert(1, self.layer_precisions.get(layer_key(t.key), ""))
        columns = _TENSOR_COLUMNS if not self.layer_precisions else \
            _TENSOR_COLUMNS[:1] + (Column("prec", 4, "<"),) + _TENSOR_COLUMNS[1:]
        lines.append(render_table(columns, rows))
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
        self.labels: Dict[Key, str] = {}
        self.layers: Dict[str, np.ndarray] = {}  # each layer's output: its last tensor

    def add(self, label: str, op_index: int, x: np.ndarray) -> None:
        if op_index < 0:
            return
        key = (label.split(" ", 1)[0], op_index)
        self.tensors[key] = self.layers[layer_key(key[0])] = np.array(x, np.float64)
        self.labels[key] = label


class _Comparer:
    """Accumulates the error of the target run's pass outputs against a recording.
    ``shifted``: runs whose conv has no SDP of its own, to which the target precision adds
    one (its converter), so their later ops are one index further than in fp32."""

    def __init__(self, quantization, shifted) -> None:
        self.quantization = quantization
        self.shifted = shifted
        self.reference: Dict[Key, np.ndarray] = {}
        self.reference_labels: Dict[Key, str] = {}
        # signal, noise, max error, saturated, count, shape, label
        self.sums: Dict[Key, list] = {}
        # the same of each layer's output (its op index in place of the shape's place: below)
        self.layer_sums: Dict[str, list] = {}
        self.last: Dict[str, tuple] = {}  # this example's: layer -> its last tensor

    def add(self, label: str, op_index: int, x: np.ndarray) -> None:
        key = (label.split(" ", 1)[0], op_index)
        if op_index < 0:
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
        if not key[0].endswith(CONVERT_PART):  # a converting run is not a tensor of its own
            self.last[layer_key(key[0])] = (key, label, value, saturated)
        fp32_index = op_index - 1 if key[0] in self.shifted and op_index >= 1 else op_index
        ref = self.reference.get((key[0], fp32_index))
        if ref is None or ref.shape != x.shape:
            return
        if x.dtype == np.int8 and quant.reader_relu:
            # the plan gave the tensor its ReLU reader's quantisation (int8_plan.
            # _select_outputs): its saturation is that ReLU, so the tensor is the ReLU's
            # zeros there, not an error (elsewhere a negative value it cannot give is one)
            ref = np.maximum(ref, 0.0)
        # an engine pass (``<primitive>:<pass>``) only against the same pass: the precisions'
        # passes of one layer differ (fp16's Newton steps), so their numbers do
        if is_pass_label(label) and self.reference_labels.get((key[0], fp32_index)) != label:
            return
        _accumulate(self.sums.setdefault(key, [0.0, 0.0, 0.0, 0, 0, x.shape, label]),
                    ref, value, saturated)

    def end_example(self, reference_layers: Dict[str, np.ndarray]) -> None:
        """Each layer's output of this example against the fp32 build's output of it."""
        for layer, (key, label, value, saturated) in self.last.items():
            ref = reference_layers.get(layer)
            if ref is not None and ref.shape == value.shape:
                _accumulate(self.layer_sums.setdefault(
                    layer, [0.0, 0.0, 0.0, 0, 0, value.shape, label, key]), ref, value,
                    saturated)
        self.last = {}


def _accumulate(sums: list, ref: np.ndarray, value: np.ndarray, saturated: int) -> None:
    """Add one example's signal, noise, max error, saturated codes and count to ``sums``."""
    error = value - ref
    sums[0] += float(np.sum(ref * ref))
    sums[1] += float(np.sum(error * error))
    sums[2] = max(sums[2], float(np.max(np.abs(error))) if error.size else 0.0)
    sums[3] += saturated
    sums[4] += value.size


def accuracy_report(mod: tvm.IRModule, params=None, inputs: Iterable = (), *,
                    config: AccelConfig | str = "nv_full", precision: str = "int8",
                    fuse: bool = True, calibration=None,
                    calibration_method: str = DEFAULT_METHOD,
                    onnx_model=None, equalize: Optional[bool] = None,
                    bias_correction: bool = True, weight_rounding: str = "nearest",
                    target_sqnr_db: Optional[float] = None,
                    layer_precisions: Optional[Dict[str, str]] = None,
                    target: Optional[Target] = None) -> AccuracyReport:
    """Run ``inputs`` through the fp32 and the ``precision`` builds of a model and compare.

    Parameters
    ----------
    mod, params, config, fuse, calibration, calibration_method, equalize, bias_correction,
    weight_rounding
        As for :func:`accel_codegen.partition_for_accel`; ``precision`` "int8", "fp16" or
        "mixed". The fp32 reference is built from the equalised weights when the int8 build
        equalises them (the same function to float32 rounding), so that each tensor is
        compared with its own fp32 counterpart.
    target_sqnr_db, layer_precisions
        precision="mixed", one of them (as for :func:`accel_codegen.partition_for_accel`):
        the search's target on the calibration inputs, or each layer's precision. The
        reference is the fp32 code of the int8 partition (the mixed build's); a converting
        run is not a tensor of its own (the observer sees its values where they were made),
        and each layer's tensors carry its precision (``layer_precisions`` of the report).
    target : Target, optional
        The build's options as one :class:`~accel_codegen.compiler.target.Target`, in place of
        the keywords above (``target_sqnr_db`` searches the plan of a per-layer one without).
    inputs : iterable
        Evaluation inputs of ``main`` (each a tuple of arrays, or one array); use inputs other
        than the calibration ones.
    onnx_model : str or os.PathLike, optional
        int8 only: the same model as an ONNX file (``accel_codegen.frontend.export_onnx``).
        ONNX Runtime quantises it (static QDQ int8, per-channel weights) calibrated on
        ``calibration``, which must then be example inputs (not a Calibration), and the
        report holds its output SQNR against the same fp32 reference in ``ort``.

    Returns
    -------
    AccuracyReport
        SQNR against fp32 per accelerator tensor (every pass output, in execution order) and
        at the model output, and the top-1 agreement for classification outputs; ``ort``:
        ONNX Runtime's int8 figures (or ``ort_skipped``: why not, e.g. onnxruntime missing).
    """
    winograd = target.winograd if target is not None else True
    if target is not None:  # its fields in place of the keywords
        (config, fuse, precision, calibration_method, equalize, bias_correction,
         weight_rounding, layer_precisions) = _keywords(target)
    config = AccelConfig.resolve(config)
    if precision == "fp32":
        raise AccelInvalidError("the accuracy report compares a reduced precision with fp32")
    examples = examples_of(inputs, "the accuracy report")
    ort_runs, ort_skipped = None, None
    if onnx_model is not None:
        if calibration is not None and not isinstance(calibration, Calibration):
            calibration = examples_of(calibration, "calibration")  # read twice: ours, ORT's
        ort_runs, ort_skipped = _ort_runs(onnx_model, precision, calibration)
    switches = {"equalize": equalize, "bias_correction": bias_correction,
                "weight_rounding": weight_rounding} if precision == "int8" else {}
    if precision == "mixed" or target_sqnr_db is not None or layer_precisions is not None:
        switches = {"target_sqnr_db": target_sqnr_db, "layer_precisions": layer_precisions}
    built = partition_for_accel(mod, params, config=config, fuse=fuse, precision=precision,
                                calibration=calibration, winograd=winograd,
                                calibration_method=calibration_method, **switches)
    # The chains of the build: a mixed build is the int8 partition, each layer in its own
    # precision, and so is an int8 build whose norms, softmaxes and attention cores run in
    # fp16 (None otherwise: the whole build is in ``precision``).
    chosen = partition_report(built).layer_precisions or None
    chains_for = "int8" if precision == "mixed" else precision
    used = calibration_of(built, used=True)
    made = calibration_of(built)
    if made is not None and made.equalized:  # the fp32 tensors of the weights int8 quantises
        mod, params = equalized_module(mod, params)
    reference = generate_partition(mod, params, config, fuse, chains_for, "fp32", None,
                                   winograd)
    ref_vm = virtual_machine(tvm.compile(reference, target="llvm"))
    vm = virtual_machine(tvm.compile(built, target="llvm"))

    matched = match_composites(mod, params, config=config, fuse=fuse, precision=chains_for)
    shifted = {run.key for run in runs(matched)
               if run.layer.conv is not None and run.layer.sdp.empty()}
    comparer = _Comparer(used, shifted)
    signal, noise, agree, total, ort_sums = _compare_runs(ref_vm, vm, examples, comparer,
                                                          ort_runs)
    tensors = _tensor_accuracies(comparer, used)
    ort = None
    if ort_runs is not None:
        ort = OrtComparison(ort_runs["version"], ort_runs["settings"], ort_runs["samples"],
                            _worst(signal, ort_sums["int8"][0]),
                            ort_sums["int8"][1] / total if total else None,
                            _worst(signal, ort_sums["fp32"][0]), ort_runs["int8_model"])
    search = mixed_precision_of(built) if precision == "mixed" else None
    outputs = [sqnr_db(s, n) for s, n in zip(signal, noise)]
    return AccuracyReport(config.name, precision, used.method if used else None,
                          used.samples if used else 0, len(examples), min(outputs),
                          agree / total if total else None, tensors, ort, ort_skipped, chosen,
                          outputs, search.target_sqnr_db if search else None,
                          search.point.sqnr_db if search else None,
                          search.point.held_back_sqnr_db if search else None,
                          _layer_accuracies(comparer, used), partition_report(built))


def _keywords(target: Target) -> tuple:
    """accuracy_report's keywords from a Target: config, fuse, precision, calibration_method,
    equalize, bias_correction, weight_rounding, layer_precisions."""
    return (target.config, target.fuse, target.code, target.calibration_method,
            target.equalize, target.bias_correction, target.weight_rounding,
            target.layer_precisions)


def _run(machine, example) -> List[np.ndarray]:
    """The outputs of ``main`` on one example, as float64 arrays."""
    return _outputs(machine["main"](*(tvm.runtime.tensor(np.ascontiguousarray(x))
                                      for x in example)))


def _compare_runs(ref_vm, vm, examples, comparer: _Comparer, ort_runs):
    """Run each example through the fp32 reference, the build (observed by ``comparer``)
    and ONNX Runtime's sessions; returns the output signal and noise (per output), the
    top-1 agreements and count, and ONNX Runtime's noise and agreements by session."""
    signal = noise = None  # per output
    agree = total = 0
    ort_sums = {"int8": [None, 0], "fp32": [None, 0]}  # noise per output, top-1 agreements
    for example in examples:
        recorder = _Recorder()
        with observing(recorder):
            expected = _run(ref_vm, example)
        comparer.reference, comparer.reference_labels = recorder.tensors, recorder.labels
        with observing(comparer):
            actual = _run(vm, example)
        comparer.end_example(recorder.layers)
        signal = _add(signal, [float(np.sum(e * e)) for e in expected])
        noise = _add(noise, [float(np.sum((a - e) ** 2)) for a, e in zip(actual, expected)])
        # top-1 of a classifier: one [N, classes] output
        classifier = len(expected) == 1 and expected[0].ndim == 2 and expected[0].shape[1] > 1
        if classifier:
            agree += int(np.sum(expected[0].argmax(axis=1) == actual[0].argmax(axis=1)))
            total += expected[0].shape[0]
        if ort_runs is not None:
            for name, sess in ort_runs["sessions"].items():
                got = [g.reshape(e.shape) for g, e in zip(_ort_outputs(sess, example),
                                                          expected)]
                ort_sums[name][0] = _add(ort_sums[name][0], [
                    float(np.sum((g - e) ** 2)) for g, e in zip(got, expected)])
                if classifier:
                    ort_sums[name][1] += int(np.sum(expected[0].argmax(axis=1) ==
                                                    got[0].argmax(axis=1)))
    return signal, noise, agree, total, ort_sums


def _tensor_accuracies(comparer: _Comparer, used) -> List[TensorAccuracy]:
    """The accuracy of each accelerator tensor the comparer saw, in execution order."""
    tensors = []
    for key, (sig, err, max_err, saturated, count, shape, label) in comparer.sums.items():
        quant = used.tensors.get(key) if used is not None else None
        tensors.append(TensorAccuracy(
            key[0], key[1], label, tuple(int(d) for d in shape), sqnr_db(sig, err),
            max_err, saturated / count if count else 0.0,
            quant.scale if quant else None, quant.zero if quant else None))
    return tensors


def _layer_accuracies(comparer: _Comparer, used) -> List[TensorAccuracy]:
    """The accuracy of each accelerator layer's output, in execution order: the key is the
    layer's, the op index and label those of the run that made it."""
    layers = []
    for layer, (sig, err, max_err, saturated, count, shape, label, key) in \
            comparer.layer_sums.items():
        quant = used.tensors.get(key) if used is not None else None
        layers.append(TensorAccuracy(
            layer, key[1], label, tuple(int(d) for d in shape), sqnr_db(sig, err), max_err,
            saturated / count if count else 0.0, quant.scale if quant else None,
            quant.zero if quant else None))
    return layers


def _outputs(result) -> List[np.ndarray]:
    """A model's outputs (an array, or a tuple of arrays and tuples) as float64 arrays."""
    if hasattr(result, "numpy"):
        return [np.asarray(result.numpy(), np.float64)]
    return [o for r in result for o in _outputs(r)]


def _ort_outputs(sess, example) -> List[np.ndarray]:
    """Every output of one ONNX Runtime inference, as float64."""
    names = [i.name for i in sess.get_inputs()]
    return [np.asarray(o, np.float64)
            for o in sess.run(None, ort_baseline.feeds(names, example))]


def _add(sums: Optional[List[float]], values: List[float]) -> List[float]:
    return values if sums is None else [a + b for a, b in zip(sums, values)]


def _worst(signal: List[float], noise: List[float]) -> float:
    """The worst output's SQNR."""
    return min(sqnr_db(s, n) for s, n in zip(signal, noise))


def _ort_runs(onnx_model, precision: str, calibration):
    """ONNX Runtime's fp32 and static int8 sessions of an ONNX file, the int8 one calibrated
    on ``calibration``: (a dict of them and what they are, None), or (None, why not)."""
    if precision != "int8":
        raise AccelInvalidError(f"the ONNX Runtime comparison is of int8 quantisation, not "
                                f"{precision}: leave onnx_model out")
    if calibration is None or isinstance(calibration, Calibration):
        raise AccelInvalidError("the ONNX Runtime comparison calibrates ONNX Runtime on the "
                                "same inputs: give calibration as example inputs, not a "
                                "Calibration")
    reason = ort_baseline.unavailable()
    if reason:
        return None, reason
    examples = examples_of(calibration, "calibration")
    with tempfile.TemporaryDirectory(prefix="accel-ort-") as directory:
        try:
            int8, settings = ort_baseline.quantize_int8_as_ort_can(onnx_model, examples,
                                                                   directory)
        except AccelUnsupportedError as error:
            return None, str(error)
        sessions = {"fp32": ort_baseline.session(onnx_model, 0),
                    "int8": ort_baseline.session(int8, 0)}
        summary = ort_baseline.qdq_summary(int8)
    return {"sessions": sessions, "version": ort_baseline.version(),
            "settings": dataclasses.asdict(settings), "samples": len(examples),
            "int8_model": summary}, None
