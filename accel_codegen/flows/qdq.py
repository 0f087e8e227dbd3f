"""The Calibration of an int8 build of a model imported from a QDQ graph, from the graph's own
scales: the fp32 build of the partition runs the seeded input of the import's fingerprints
under the simulator's observer, and each run tensor takes the quantisation of the annotated
tensor whose fingerprint it reproduces (the whole scheme: :mod:`accel_codegen.compiler.qdq`).
A flow: it runs a build of the compiler.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..compiler.partition import calibrate_reference, reference_machine, run_main
from ..compiler.qdq import (QDQ_ATTR, QDQ_METHOD, QdqAnnotations, annotations_of,
                            fingerprint_positions, matching_inputs)
from ..errors import AccelInvalidError
from ..quantization import DEFAULT_METHOD, Calibration, Observer, TensorQuant, observing
from ..quantization.calibration import tensor_quant
from ..sim.config import AccelConfig


class _MatchingObserver(Observer):
    """Statistics of every run tensor (for those the QDQ graph does not quantise) and each
    one's values at the fingerprints' positions."""

    def __init__(self, sizes) -> None:
        super().__init__()
        self.sizes = {size: np.asarray(fingerprint_positions(size)) for size in sizes}
        self.samples: Dict[Tuple[str, int], Tuple[int, np.ndarray]] = {}

    def add(self, label: str, op_index: int, x: np.ndarray) -> None:
        super().add(label, op_index, x)
        where = self.sizes.get(x.size)
        if where is not None and x.dtype == np.float32:
            from ..sim.labels import label_key

            self.samples[(label_key(label), op_index)] = (
                x.size, x.reshape(-1)[where].astype(np.float64))


@dataclasses.dataclass
class QdqMatch:
    """How :func:`qdq_calibration` keyed the model's scales: run tensor -> ONNX tensor, and
    the run tensors no annotated tensor reproduced (their scale is the range they showed)."""

    calibration: Calibration
    matched: Dict[Tuple[str, int], str]
    unmatched: List[Tuple[str, int]]


def qdq_calibration(mod, params=None, *, config="nv_full", fuse: bool = True,
                    winograd: bool = True, annotations: Optional[QdqAnnotations] = None,
                    examples=None, method: str = DEFAULT_METHOD) -> QdqMatch:
    """The Calibration of an int8 build of ``mod`` (imported from a QDQ model) from the
    model's own scales (see the module's docstring). ``annotations``: those of
    :func:`annotations_of` by default. ``examples`` (example input tuples): the run tensors
    the model gives no scale get theirs from these inputs by ``method``, as a calibration
    would; without them, from the range they showed on the one matching input (synthetic:
    uniform over the input's codes), which can be far from real data's."""
    annotations = annotations if annotations is not None else annotations_of(mod)
    if annotations is None:
        raise AccelInvalidError("the module was not imported from a QDQ model (no "
                                f"'{QDQ_ATTR}' attribute): calibrate it with example inputs")
    config = AccelConfig.resolve(config)
    vm = reference_machine(mod, params, config, fuse, winograd)
    observer = _MatchingObserver({n for n, _, _ in annotations.fingerprints.values()})
    with observing(observer):
        run_main(vm, tuple(matching_inputs(annotations)))
    candidates: Dict[int, List[Tuple[str, np.ndarray]]] = {}
    for name, (size, _, values) in annotations.fingerprints.items():
        candidates.setdefault(size, []).append((name, np.asarray(values, np.float64)))
    # the tensors the model gives no scale: calibrated on the examples, as a build would
    seen = calibrate_reference(mod, params, config, fuse, winograd, examples, method,
                               vm=vm)[0] if examples is not None else Calibration("max", 1, {})
    tensors, matched, unmatched = {}, {}, []
    for key, stats in observer.stats.items():
        size, sample = observer.samples.get(key, (0, None))
        best = None
        if sample is not None:
            # the fp32 build agrees with ONNX Runtime's float run to ~1e-6 of a tensor's
            # range; 1e-3 still tells apart tensors that differ by one op
            tolerance = 1e-3 * max(float(np.max(np.abs(sample))), 1e-6)
            for name, values in candidates.get(size, []):
                error = float(np.max(np.abs(values - sample)))
                if error <= tolerance and (best is None or error < best[1]):
                    best = (name, error)
        if best is not None:
            scale, zero, _ = annotations.tensors[best[0]]
            tensors[key] = TensorQuant(scale, zero)
            matched[key] = best[0]
        else:
            tensors[key] = seen.tensors.get(key) or tensor_quant(stats, seen.method)
            unmatched.append(key)
    calibration = Calibration(QDQ_METHOD, seen.samples, tensors, {}, equalized=False,
                              bias_correction=False)
    return QdqMatch(calibration, matched, sorted(unmatched))
