"""Mixed int8/fp16 precision: which layers run int8 and which fp16, so that the model's output
reaches an SQNR target against the fp32 build (on the calibration inputs) in the fewest
simulated cycles. docs/mixed-precision.md has the algorithm and measured figures.

The search, in builds of the model (each one compiled and run on every calibration input):

1. One pass of the calibration inputs through the fp32 build of the int8 partition: the
   activation statistics (the :class:`~.calibration.Calibration` every int8 layer uses) and
   the reference outputs.
2. The two ends, all-int8 and all-fp16. The target must lie between: all-fp16 must reach it.
3. Sensitivity: per layer l, the output noise power with l alone in int8 (every other layer
   fp16), less the all-fp16 noise: N_l, what quantising l adds at the output.
4. Price: the C cost model's cycles of each layer's runs in int8 and in fp16 (the estimates of
   the two ends: the records a profiled run has) and of each layer's converting run in either
   direction.
5. The path: greedy from all-int8, each step promotes to fp16 the layer that removes the most
   noise (N_l) per extra cycle, the extra cycles of that step being the layer's own and those
   of the converting runs the step adds or removes (free promotions first). Point k has the
   first k promoted; its predicted noise is the all-fp16 noise plus the N_l of the layers
   still int8 (independent rounding noise adds), and its cycles are the cost model's estimate
   of that assignment (what its profiled run records).
6. The choice: all-int8 if it meets the target; else the first point whose prediction meets
   it, then measured: one more layer promoted while the measurement falls short, one fewer
   while the point before still meets it, and the later points that cost fewer cycles (the
   converting runs make cycles rise and fall along the path). Of the points measured, the
   one that meets the target in the fewest cycles.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import tvm

from ..errors import AccelInvalidError
from .accuracy import sqnr_db
from .calibration import DEFAULT_METHOD, Calibration, calibrate, examples_of

PRECISIONS = ("int8", "fp16")


def check_target(target_sqnr_db) -> float:
    """A target output SQNR: a positive, finite number of dB."""
    if isinstance(target_sqnr_db, bool) or not isinstance(
            target_sqnr_db, (int, float, np.integer, np.floating)):
        raise AccelInvalidError(f"target_sqnr_db = {target_sqnr_db!r} is not a number of dB")
    value = float(target_sqnr_db)
    if not math.isfinite(value) or value <= 0:
        raise AccelInvalidError(f"target_sqnr_db = {target_sqnr_db!r} must be a positive, "
                                "finite number of dB (e.g. 40)")
    return value


@dataclasses.dataclass
class PathPoint:
    """One assignment on the path from all-int8 to all-fp16: the first ``promoted`` layers of
    the order in fp16, the rest int8."""

    promoted: int
    cycles: int
    predicted_sqnr_db: float
    sqnr_db: Optional[float] = None  # measured, where the search (or a caller) built it


@dataclasses.dataclass
class MixedPrecision:
    """What the search found: the assignment, its figures, and the path it chose from."""

    target_sqnr_db: float
    layer_precisions: Dict[str, str]   # layer key (``f0.3``) -> "int8" / "fp16", in order
    order: List[str]                   # layers in the order the path promotes them
    path: List[PathPoint]              # promoted = 0 (all-int8) .. len(order) (all-fp16)
    chosen: int                        # the chosen point's index in path
    sensitivity_db: Dict[str, float]   # output SQNR with the layer alone in int8
    extra_cycles: Dict[str, int]       # cycles fp16 costs over int8, per layer
    samples: int                       # calibration inputs the SQNRs are measured on
    builds: int                        # builds the search measured
    calibration: Optional[Calibration] = dataclasses.field(default=None, repr=False,
                                                           compare=False)
    _measure: Optional[Callable[[Dict[str, str]], float]] = dataclasses.field(
        default=None, repr=False, compare=False)

    @property
    def int8(self) -> PathPoint:
        return self.path[0]

    @property
    def fp16(self) -> PathPoint:
        return self.path[-1]

    @property
    def point(self) -> PathPoint:
        return self.path[self.chosen]

    @property
    def cycle_ratio(self) -> float:
        """The chosen assignment's cycles over all-int8's."""
        return self.point.cycles / self.int8.cycles

    def assignment(self, promoted: int) -> Dict[str, str]:
        """The assignment of the path point with the first ``promoted`` layers in fp16."""
        fp16 = set(self.order[:promoted])
        return {k: "fp16" if k in fp16 else "int8" for k in self.layer_precisions}

    def measure(self, promoted: int) -> float:
        """Build and measure a path point (in the session that ran the search)."""
        if self._measure is None:
            raise AccelInvalidError("this search result was loaded: measure points in the "
                                    "session that searched")
        point = self.path[promoted]
        if point.sqnr_db is None:
            point.sqnr_db = self._measure(self.assignment(promoted))
        return point.sqnr_db

    def to_json(self) -> str:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name not in ("calibration", "_measure", "path")}
        fields["path"] = [dataclasses.asdict(p) for p in self.path]
        return json.dumps(fields)

    @classmethod
    def from_json(cls, text: str) -> "MixedPrecision":
        data = json.loads(text)
        data["path"] = [PathPoint(**p) for p in data["path"]]
        return cls(**data)

    def __str__(self) -> str:
        chosen = self.point
        counts = {p: sum(v == p for v in self.layer_precisions.values()) for p in PRECISIONS}
        lines = [f"mixed precision for {self.target_sqnr_db:g} dB output SQNR (on "
                 f"{self.samples} calibration input(s), {self.builds} builds measured):",
                 f"  all-int8  {self.int8.cycles:>12,} cycles  {self.int8.sqnr_db:6.2f} dB",
                 f"  chosen    {chosen.cycles:>12,} cycles  {chosen.sqnr_db:6.2f} dB  "
                 f"({self.cycle_ratio:.3f}x all-int8; {counts['int8']} layers int8, "
                 f"{counts['fp16']} fp16)",
                 f"  all-fp16  {self.fp16.cycles:>12,} cycles  {self.fp16.sqnr_db:6.2f} dB"]
        if chosen.sqnr_db < self.target_sqnr_db:
            lines.append("  the target is not met")
        return "\n".join(lines)


def _flat_output(result) -> np.ndarray:
    """A model output (an array or a tuple of them) as one float64 vector."""
    if hasattr(result, "numpy"):
        return np.asarray(result.numpy(), np.float64).reshape(-1)
    return np.concatenate([_flat_output(r) for r in result]) if len(result) else np.zeros(0)


def _run(vm, example) -> np.ndarray:
    return _flat_output(vm["main"](*(tvm.runtime.tensor(np.ascontiguousarray(x))
                                     for x in example)))


def _noise(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> float:
    return float(sum(np.sum((o - r) ** 2) for o, r in zip(outputs, reference)))


def _promotion_order(matched, config, keys: List[str], int8_cycles: Dict[str, int],
                     fp16_cycles: Dict[str, int], added: Dict[str, float]) -> List[str]:
    """Greedy, from all-int8: each step promotes the layer that removes the most output noise
    per extra cycle (a promotion that costs nothing first, the most noise first among those).
    The extra cycles of a step are the cost model's figures of the runs it changes: the
    layer's run in either precision, and the converting runs it adds or removes (each layer's
    converting run costed once per direction)."""
    from ..compiler.walk import composite_calls, external_calls, layer_of, layer_sources
    from ..sim.device import estimate_chain
    from ..sim.labels import run_key
    from ..sim.ops import Sdp

    sources, convert = {}, {}  # layer -> the layers it reads; its converting run's cycles
    for f, (_, function) in enumerate(external_calls(matched)):
        for i, read in enumerate(layer_sources(function)):
            sources[run_key(f, i)] = [run_key(f, j) for j in read]
        for i, (binding, composite) in enumerate(composite_calls(function)):
            shape = tuple(layer_of(composite, binding.value.args, function).out_shape)
            shape = shape if len(shape) == 4 else (shape[0], shape[1], 1, 1)
            convert[run_key(f, i)] = {p: estimate_chain(config, [Sdp(
                precision=p, convert=True, cvt_scale=1.0)], shape, mode="independent").cycles
                for p in PRECISIONS}
    layer = {"int8": int8_cycles, "fp16": fp16_cycles}

    def priced(assignment: Dict[str, str]) -> int:
        converted = {s for k in keys for s in sources[k] if assignment[s] != assignment[k]}
        return sum(layer[p][k] for k, p in assignment.items()) + \
            sum(convert[k][assignment[k]] for k in converted)

    assignment = {k: "int8" for k in keys}
    order: List[str] = []
    while len(order) < len(keys):
        now = priced(assignment)

        def merit(key: str) -> tuple:
            extra = priced({**assignment, key: "fp16"}) - now
            return (1, added[key], -extra) if extra <= 0 else (0, added[key] / extra, 0)

        best = max((k for k in keys if assignment[k] == "int8"), key=merit)
        assignment[best] = "fp16"
        order.append(best)
    return order


def search_mixed_precision(mod, params, calibration_inputs, target_sqnr_db: float, *,
                           config, winograd: bool = True,
                           calibration_method: str = DEFAULT_METHOD) -> MixedPrecision:
    """The assignment of int8 / fp16 to every layer of the int8 partition of ``mod`` that
    reaches ``target_sqnr_db`` at the fewest cycles found along the path (module docstring).
    Raises AccelInvalidError when even all-fp16 falls short of the target."""
    from ..compiler.partition import (generate_partition, layer_keys, match_composites,
                                      reference_machine)
    from ..compiler.vm import virtual_machine
    from ..sim.config import AccelConfig
    from ..sim.labels import layer_key
    from ..tools.estimation import _LoweredModel

    target = check_target(target_sqnr_db)
    config = AccelConfig.resolve(config)
    examples = examples_of(calibration_inputs, "the mixed-precision search")
    reference_vm = reference_machine(mod, params, config, True, winograd)
    reference: List[np.ndarray] = []
    calibration = calibrate(lambda *x: reference.append(_run(reference_vm, x)), examples,
                            calibration_method)
    signal = float(sum(np.sum(r ** 2) for r in reference))
    matched = match_composites(mod, params, config=config, fuse=True, precision="int8")
    keys = layer_keys(matched)
    builds = 0

    def noise_of(assignment: Dict[str, str]) -> float:
        nonlocal builds
        builds += 1
        part = generate_partition(mod, params, config, True, "int8", "mixed", calibration,
                                  winograd, assignment)
        vm = virtual_machine(tvm.compile(part, target="llvm"))
        return _noise([_run(vm, x) for x in examples], reference)

    def measure(assignment: Dict[str, str]) -> float:
        return sqnr_db(signal, noise_of(assignment))

    def lowered(assignment: Dict[str, str]):
        return _LoweredModel.of_matched(matched, config, "mixed", True, winograd, assignment)

    def cycles(assignment: Dict[str, str]) -> int:
        return int(lowered(assignment).sweep_row(config)["total_cycles"])

    def layer_cycles(precision: str) -> Dict[str, int]:
        report = lowered({k: precision for k in keys}).estimate(config)
        per_layer = dict.fromkeys(keys, 0)
        for layer in report.layers:  # "f0.3b ..." -> "f0.3": a layer's runs together
            per_layer[layer_key(layer.label)] += layer.cycles
        return per_layer

    everything = {p: {k: p for k in keys} for p in PRECISIONS}
    noise_fp16 = noise_of(everything["fp16"])
    fp16_db = sqnr_db(signal, noise_fp16)
    if fp16_db < target:
        raise AccelInvalidError(f"target_sqnr_db = {target:g} is out of reach: all-fp16 gives "
                                f"{fp16_db:.2f} dB on the calibration inputs")
    int8_cycles, fp16_cycles = layer_cycles("int8"), layer_cycles("fp16")
    extra = {k: fp16_cycles[k] - int8_cycles[k] for k in keys}
    alone: Dict[str, float] = {}
    added: Dict[str, float] = {}
    for key in keys:
        noise = noise_of({**everything["fp16"], key: "int8"})
        alone[key] = sqnr_db(signal, noise)
        added[key] = max(noise - noise_fp16, 0.0)
    order = _promotion_order(matched, config, keys, int8_cycles, fp16_cycles, added)
    path: List[PathPoint] = []
    remaining = sum(added.values())
    for promoted in range(len(keys) + 1):
        if promoted:
            remaining -= added[order[promoted - 1]]
        assignment = {k: "fp16" if k in set(order[:promoted]) else "int8" for k in keys}
        path.append(PathPoint(promoted, cycles(assignment),
                              sqnr_db(signal, noise_fp16 + max(remaining, 0.0))))
    path[-1].sqnr_db = fp16_db

    def measured(k: int) -> float:
        if path[k].sqnr_db is None:
            fp16 = set(order[:k])
            path[k].sqnr_db = measure({key: "fp16" if key in fp16 else "int8"
                                       for key in keys})
        return path[k].sqnr_db

    chosen = 0
    if measured(0) < target:
        chosen = next((k for k, p in enumerate(path) if p.predicted_sqnr_db >= target),
                      len(keys))
        while measured(chosen) < target:
            chosen += 1  # all-fp16 meets it (checked above), so this ends
        while chosen > 0 and measured(chosen - 1) >= target:
            chosen -= 1
        # Converting runs make the path's cycles rise and fall: the later points that cost
        # fewer cycles (and promote more layers) are measured too.
        for k in range(chosen + 1, len(path)):
            if path[k].cycles < path[chosen].cycles:
                measured(k)
    # Of the points measured, the fewest cycles that meet the target.
    chosen = min((k for k, p in enumerate(path) if p.sqnr_db is not None and
                  p.sqnr_db >= target), key=lambda k: (path[k].cycles, k))
    fp16_set = set(order[:chosen])
    result = MixedPrecision(target, {k: "fp16" if k in fp16_set else "int8" for k in keys},
                            order, path, chosen, alone, extra, len(examples), builds,
                            calibration)
    result._measure = measure
    return result
