"""Mixed int8/fp16 precision: which layers run int8 and which fp16, so that every output of the
model reaches an SQNR target against the fp32 build in the fewest simulated cycles, on the
calibration inputs and on inputs held back from calibration (as a user judges the build: on
inputs it was not calibrated on). docs/mixed-precision.md has the algorithm and figures.

The search builds the model (each build compiled and run on every calibration input) only
for the two ends and the few points it measures; it ranks the layers without building:

1. The example inputs split: the last quarter (at least one) is held back, unless the caller
   gives held-back inputs. One pass of the others through the fp32 build of the int8
   partition: the activation statistics (the :class:`~.calibration.Calibration` every int8
   layer uses, made as an int8 build's is: ``compiler.partition.calibrate_reference``) and
   the reference outputs; the held-back inputs' reference outputs apart,
   unobserved.
2. The two ends, all-int8 and all-fp16, built and measured. The target must lie between:
   all-fp16 must reach it on every output, on both sets of inputs (else an error says which
   output falls short).
3. Sensitivity, emulated: per layer l, the calibration inputs run again through the same
   fp32 build with l's activations alone quantised in place (each pass output it writes
   rounded to its int8 codes and back: ``output_aware.FakeQuantizer``, the observer
   ``calibration_method="mse_outputs"`` ranks tensors with): each output's noise power, N_l.
   The emulation leaves out the weights' rounding and the integer arithmetic, so the N_l are
   scaled, per output, to sum to what the all-int8 build measured above all-fp16 (each
   layer's share of the noise kept). One fp32 run of the inputs per layer instead of one
   build per layer (a code generation, a C compile and the runs): PP-OCRv4's recogniser has
   121 layers. The greedy order weighs N_l by the output's power (summed over the outputs).
4. Price: the C cost model's cycles of each layer's runs in int8 and in fp16 (the estimates of
   the two ends: the records a profiled run has) and of each layer's converting run in either
   direction.
5. The path: greedy from all-int8, each step promotes to fp16 the layer that removes the most
   noise (N_l) per extra cycle, the extra cycles of that step being the layer's own and those
   of the converting runs the step adds or removes (free promotions first). Point k has the
   first k promoted; its predicted noise (per output; the worst output's SQNR is the
   prediction) is the all-fp16 noise plus the N_l of the layers still int8 (independent
   rounding noise adds), and its cycles are the cost model's estimate of that assignment
   (what its profiled run records).
6. The choice: all-int8 if it meets the target; else the first point whose prediction meets
   it, then measured; from there steps of 1, 2, 4, ... layers (more promoted while the
   measurement falls short, fewer while it meets) until two measured points bracket the
   target's edge, then halving between them: the first point that meets it (the emulated
   ranking may misplace it by many layers; the builds grow with the logarithm of the miss).
   Then the later points that cost fewer cycles (the converting runs make cycles rise and
   fall along the path), the cheapest first, until one meets the target. A point meets the
   target when its worst output does on the calibration inputs and on the held-back ones. Of
   the points measured, the one that meets the target in the fewest cycles.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tvm

from ..errors import AccelInvalidError
from ..quantization.metrics import sqnr_db
from ..quantization import calibration as calibration_pass
from ..quantization.calibration import DEFAULT_METHOD, Calibration, examples_of
from ..quantization.output_aware import FakeQuantizer
from ..sim.labels import layer_key
from ..sim.observer import observing

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
    the order in fp16, the rest int8. SQNRs are of the worst output (each output against its
    own fp32 counterpart), on the calibration inputs and on the inputs held back from
    calibration; ``output_sqnr_db`` / ``held_back_output_sqnr_db`` give every output's."""

    promoted: int
    cycles: int
    predicted_sqnr_db: float
    sqnr_db: Optional[float] = None  # measured, where the search (or a caller) built it
    held_back_sqnr_db: Optional[float] = None
    output_sqnr_db: Optional[List[float]] = None
    held_back_output_sqnr_db: Optional[List[float]] = None

    @property
    def measured(self) -> bool:
        return self.sqnr_db is not None

    @property
    def worst_sqnr_db(self) -> Optional[float]:
        """What the target is judged on: the worst output on either set of inputs."""
        if self.sqnr_db is None:
            return None
        return self.sqnr_db if self.held_back_sqnr_db is None else \
            min(self.sqnr_db, self.held_back_sqnr_db)

    def meets(self, target: float) -> bool:
        return self.sqnr_db is not None and self.worst_sqnr_db >= target


@dataclasses.dataclass
class MixedPrecision:
    """What the search found: the assignment, its figures, and the path it chose from."""

    target_sqnr_db: float
    layer_precisions: Dict[str, str]   # layer key (``f0.3``) -> "int8" / "fp16", in order
    order: List[str]                   # layers in the order the path promotes them
    path: List[PathPoint]              # promoted = 0 (all-int8) .. len(order) (all-fp16)
    chosen: int                        # the chosen point's index in path
    sensitivity_db: Dict[str, float]   # worst output SQNR with the layer alone in int8
                                       # (emulated and scaled: module docstring, step 3)
    extra_cycles: Dict[str, int]       # cycles fp16 costs over int8, per layer
    samples: int                       # calibration inputs (scales, sensitivities, path)
    builds: int                        # builds the search measured
    held_back: int = 0                 # inputs held back from calibration, the target's check
    outputs: int = 1                   # model outputs, each held to the target
    calibration: Optional[Calibration] = dataclasses.field(default=None, repr=False,
                                                           compare=False)
    _measure: Optional[Callable[[Dict[str, str]], tuple]] = dataclasses.field(
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
        """Build and measure a path point (in the session that ran the search): its worst
        output SQNR on the calibration inputs (the point holds the held-back figures too)."""
        if self._measure is None:
            raise AccelInvalidError("this search result was loaded: measure points in the "
                                    "session that searched")
        point = self.path[promoted]
        if point.sqnr_db is None:
            _fill(point, self._measure(self.assignment(promoted)))
        return point.sqnr_db

    def to_json(self) -> str:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name not in ("calibration", "_measure", "path")}
        fields["path"] = [dataclasses.asdict(p) for p in self.path]
        return json.dumps(fields, default=_json_number)

    @classmethod
    def from_json(cls, text: str) -> "MixedPrecision":
        data = json.loads(text)
        data["path"] = [PathPoint(**p) for p in data["path"]]
        return cls(**data)

    def __str__(self) -> str:
        chosen = self.point
        counts = {p: sum(v == p for v in self.layer_precisions.values()) for p in PRECISIONS}
        judged = "the output" if self.outputs == 1 else f"the worst of {self.outputs} outputs"
        held = f"; checked on {self.held_back} input(s) held back from calibration" \
            if self.held_back else ""

        def figures(point: PathPoint) -> str:
            text = f"{point.sqnr_db:6.2f} dB"
            if point.held_back_sqnr_db is not None:
                text += f" (held back {point.held_back_sqnr_db:6.2f} dB)"
            return text

        lines = [f"mixed precision for {self.target_sqnr_db:g} dB output SQNR of {judged} "
                 f"(calibration: {self.samples} input(s){held}; {self.builds} builds "
                 "measured):",
                 f"  all-int8  {self.int8.cycles:>12,} cycles  {figures(self.int8)}",
                 f"  chosen    {chosen.cycles:>12,} cycles  {figures(chosen)}  "
                 f"({self.cycle_ratio:.3f}x all-int8; {counts['int8']} layers int8, "
                 f"{counts['fp16']} fp16)",
                 f"  all-fp16  {self.fp16.cycles:>12,} cycles  {figures(self.fp16)}"]
        if self.outputs > 1 and chosen.output_sqnr_db is not None:
            per = [f"output {i}: {c:.2f} dB" + (
                f" (held back {h:.2f} dB)" if chosen.held_back_output_sqnr_db else "")
                for i, (c, h) in enumerate(zip(
                    chosen.output_sqnr_db,
                    chosen.held_back_output_sqnr_db or chosen.output_sqnr_db))]
            lines.append("  chosen, per output: " + ", ".join(per))
        if not chosen.meets(self.target_sqnr_db):
            lines.append("  the target is not met")
        return "\n".join(lines)


def _json_number(value):
    """NumPy scalars as JSON numbers."""
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _fill(point: PathPoint, measured: tuple) -> None:
    """A point's measured figures: per output on the calibration and held-back inputs."""
    calibration, held = measured
    point.output_sqnr_db = calibration
    point.sqnr_db = min(calibration)
    if held is not None:
        point.held_back_output_sqnr_db = held
        point.held_back_sqnr_db = min(held)


def _outputs(result) -> List[np.ndarray]:
    """A model's outputs (an array, or a tuple of arrays and tuples) as float64 vectors."""
    if hasattr(result, "numpy"):
        return [np.asarray(result.numpy(), np.float64).reshape(-1)]
    return [o for r in result for o in _outputs(r)]


def _run(vm, example) -> List[np.ndarray]:
    return _outputs(vm["main"](*(tvm.runtime.tensor(np.ascontiguousarray(x))
                                 for x in example)))


def _powers(runs: Sequence[List[np.ndarray]]) -> np.ndarray:
    """Each output's power summed over the runs."""
    return np.sum([[np.sum(o ** 2) for o in outputs] for outputs in runs], axis=0)


def _noise(outputs: Sequence[List[np.ndarray]],
           reference: Sequence[List[np.ndarray]]) -> np.ndarray:
    """Each output's noise power against the reference, summed over the runs."""
    return np.sum([[np.sum((o - r) ** 2) for o, r in zip(got, want)]
                   for got, want in zip(outputs, reference)], axis=0)


def _sqnrs(signal: np.ndarray, noise: np.ndarray) -> List[float]:
    return [sqnr_db(float(s), float(n)) for s, n in zip(signal, noise)]


def split_held_back(examples: list, held_back=None) -> Tuple[list, list]:
    """(calibration inputs, held-back inputs): ``held_back`` when given, else the last quarter
    of ``examples`` (at least one), which calibration then never sees."""
    if held_back is not None:
        return examples, examples_of(held_back, "the held-back inputs of the mixed-precision "
                                                "search")
    if len(examples) < 2:
        raise AccelInvalidError(
            f"the mixed-precision search needs at least 2 example inputs, got {len(examples)}: "
            "it calibrates on some and checks the target on the others, held back from "
            "calibration (as new inputs would be judged)")
    count = (len(examples) + 3) // 4
    return examples[:-count], examples[-count:]


def _promotion_order(matched, config, keys: List[str], int8_cycles: Dict[str, int],
                     fp16_cycles: Dict[str, int], added: Dict[str, float],
                     fixed: Optional[Dict[str, str]] = None) -> List[str]:
    """Greedy, from all-int8: each step promotes the layer that removes the most output noise
    per extra cycle (a promotion that costs nothing first, the most noise first among those).
    The extra cycles of a step are the cost model's figures of the runs it changes: the
    layer's run in either precision, and the converting runs it adds or removes (each layer's
    converting run costed once per direction). ``fixed``: the layers every assignment runs
    in fp16, whose converting runs count too."""
    from ..compiler.layer import feature_surface
    from ..compiler.walk import composite_calls, external_calls, layer_of, layer_sources
    from ..sim.device import estimate_chain
    from ..sim.labels import run_key
    from ..sim.ops import Sdp

    sources, convert = {}, {}  # layer -> the layers it reads; its converting run's cycles
    for f, (_, function) in enumerate(external_calls(matched)):
        for i, read in enumerate(layer_sources(function)):
            sources[run_key(f, i)] = [run_key(f, j) for j in read]
        for i, (binding, composite) in enumerate(composite_calls(function)):
            shape = feature_surface(layer_of(composite, binding.value.args, function).out_shape)
            convert[run_key(f, i)] = {p: estimate_chain(config, [Sdp(
                precision=p, convert=True, cvt_scale=1.0)], shape, mode="independent").cycles
                for p in PRECISIONS}
    layer = {"int8": int8_cycles, "fp16": fp16_cycles}

    def priced(assignment: Dict[str, str]) -> int:
        converted = {s for k in assignment for s in sources[k]
                     if assignment[s] != assignment[k]}
        return sum(layer[p].get(k, 0) for k, p in assignment.items()) + \
            sum(convert[k][assignment[k]] for k in converted)

    assignment = {**{k: "int8" for k in keys}, **(fixed or {})}
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
                           calibration_method: str = DEFAULT_METHOD,
                           held_back=None) -> MixedPrecision:
    """The assignment of int8 / fp16 to every layer of the int8 partition of ``mod`` that
    reaches ``target_sqnr_db`` at the fewest cycles found along the path (module docstring).

    The target holds for every output (each against its own fp32 counterpart: the worst
    output decides), on the calibration inputs and on inputs held back from calibration:
    ``held_back`` (example inputs), or by default the last quarter of ``calibration_inputs``
    (at least one; the rest calibrate). Raises AccelInvalidError when even all-fp16 falls
    short of the target, naming the output and the inputs."""
    from ..compiler.partition import (calibrate_reference, generate_partition, layer_keys,
                                      match_composites)
    from ..compiler.patterns import PartitionLog
    from ..compiler.program import lower_module
    from ..compiler.vm import virtual_machine
    from ..sim.config import AccelConfig

    target = check_target(target_sqnr_db)
    config = AccelConfig.resolve(config)
    examples, held = split_held_back(
        examples_of(calibration_inputs, "the mixed-precision search"), held_back)
    log = PartitionLog()  # one matching: every candidate's code is generated for it
    matched = match_composites(mod, params, config=config, fuse=True, precision="int8",
                               log=log)
    reference: List[List[np.ndarray]] = []
    # the int8 flow's calibration (the depthwise-aware search included), keeping the outputs
    calibration, reference_vm = calibrate_reference(
        mod, params, config, True, winograd, examples, calibration_method, matched=matched,
        log=log, each=lambda vm, x: reference.append(_run(vm, x)))
    held_reference = [_run(reference_vm, x) for x in held]  # not observed: not calibrated on
    signal, held_signal = _powers(reference), _powers(held_reference)
    outputs = len(signal)
    program = lower_module(matched, "int8")  # its layers, lowered once for every candidate
    fixed, every, keys = _choices(program, layer_keys(matched))
    builds = 0
    # progress per build: the two ends, then the few the path measures (the total grows by
    # them as they come)
    factory = calibration_pass.progress_factory
    progress = factory("mixed-precision search") if factory is not None else None
    expected = 2

    def noise_of(assignment: Dict[str, str], check: bool = False):
        """Each output's noise power on the calibration inputs (and, with ``check``, on the
        held-back ones)."""
        nonlocal builds, expected
        if progress is not None:
            expected = max(expected, builds + 1)
            progress(builds, expected)
        builds += 1
        part = generate_partition(mod, params, config, True, "int8", "mixed", calibration,
                                  winograd, {**assignment, **fixed}, (matched, log))
        vm = virtual_machine(tvm.compile(part, target="llvm"))
        noise = _noise([_run(vm, x) for x in examples], reference)
        if not check:
            return noise
        return noise, _noise([_run(vm, x) for x in held], held_reference)

    def measure(assignment: Dict[str, str]) -> tuple:
        noise, held_noise = noise_of(assignment, True)
        return _sqnrs(signal, noise), _sqnrs(held_signal, held_noise)

    lowered_runs: dict = {}

    def cycles(assignment: Dict[str, str]) -> int:
        return int(_costs(program, assignment, config, winograd, lowered_runs)
                   .totals(config).cycles)

    def layer_cycles(precision: str) -> Dict[str, int]:
        return _layer_cycles(program, keys, precision, config, winograd, lowered_runs)

    everything = {p: {k: p for k in keys} for p in PRECISIONS}
    noise_fp16, held_noise_fp16 = noise_of(everything["fp16"], True)
    fp16_measured = (_sqnrs(signal, noise_fp16), _sqnrs(held_signal, held_noise_fp16))
    _out_of_reach(target, *fp16_measured)
    noise_int8, held_noise_int8 = noise_of(everything["int8"], True)
    int8_measured = (_sqnrs(signal, noise_int8), _sqnrs(held_signal, held_noise_int8))
    int8_cycles, fp16_cycles = layer_cycles("int8"), layer_cycles("fp16")
    extra = {k: fp16_cycles[k] - int8_cycles[k] for k in keys}
    added = _emulated_noise(keys, calibration, reference_vm, examples, reference)
    del reference_vm
    added = _scaled(added, noise_int8 - noise_fp16)
    alone = {k: min(_sqnrs(signal, noise_fp16 + added[k])) for k in keys}
    # One figure per layer for the greedy order: the noise it adds relative to each output's
    # power, summed over the outputs (outputs of different scales count alike).
    relative = {k: float(np.sum(added[k] / np.where(signal > 0, signal, 1.0))) for k in keys}
    order = _promotion_order(matched, config, keys, int8_cycles, fp16_cycles, relative, fixed)
    path = _predicted_path(keys, order, added, signal, noise_fp16, outputs, cycles)
    _fill(path[0], int8_measured)
    _fill(path[-1], fp16_measured)
    chosen = _choose_point(path, keys, order, target, measure)
    fp16_set = set(order[:chosen]) | set(fixed)
    if progress is not None:
        progress(builds, builds)
    result = MixedPrecision(target, {k: "fp16" if k in fp16_set else "int8" for k in every},
                            order, path, chosen, alone, extra, len(examples), builds,
                            len(held), outputs, calibration)
    result._measure = measure
    return result


def _choices(program, every: List[str]) -> Tuple[Dict[str, str], List[str], List[str]]:
    """(the layers every assignment runs in fp16, every layer, the layers the search
    chooses for): norms, softmaxes and attention cores are fp16 in int8 code
    (``engines.fp16_in_int8``), so no choice of the search."""
    fixed = {k: p for k, p in (program.layer_precisions or {}).items() if p == "fp16"}
    return fixed, every, [k for k in every if k not in fixed]


def _costs(program, assignment: Dict[str, str], config, winograd: bool, lowered_runs: dict):
    """The cost model's view of ``program`` with each layer in its ``assignment`` precision
    (``lowered_runs``: the runs lowered so far, shared by every candidate)."""
    from ..compiler.costing import ProgramCosts
    from ..compiler.program import assign_precisions
    return ProgramCosts(assign_precisions(program, assignment), config, True, winograd,
                        lowered_runs)


def _layer_cycles(program, keys: List[str], precision: str, config, winograd: bool,
                  lowered_runs: dict) -> Dict[str, int]:
    """The estimated cycles of each layer's runs with every layer in ``precision``."""
    from ..sim.labels import layer_key
    costs = _costs(program, {k: precision for k in keys}, config, winograd, lowered_runs)
    per_layer = dict.fromkeys(keys, 0)
    for run, record in zip(costs.runs, costs.records(config, "estimate")):
        if layer_key(run.key) in per_layer:  # a layer's runs together (not a fixed one's)
            per_layer[layer_key(run.key)] += record.cycles
    return per_layer


def _emulated_noise(keys: List[str], calibration: Calibration, reference_vm, examples: list,
                    reference: Sequence[List[np.ndarray]]) -> Dict[str, np.ndarray]:
    """Per layer, per output: the noise power (summed over ``examples``) that quantising the
    layer's activations alone adds, emulated in the fp32 build of the int8 partition
    (``reference_vm``, whose outputs on the examples are ``reference``): every pass output of
    the layer's runs rounded in place to the int8 codes of its calibrated quantisation
    (module docstring, step 3)."""
    quants: Dict[str, dict] = {k: {} for k in keys}
    for tensor, quant in calibration.tensors.items():
        owner = quants.get(layer_key(tensor[0]))
        if owner is not None:
            owner[tensor] = quant
    added: Dict[str, np.ndarray] = {}
    for key in keys:
        with observing(FakeQuantizer(quants[key])):
            added[key] = _noise([_run(reference_vm, x) for x in examples], reference)
    return added


def _scaled(added: Dict[str, np.ndarray], measured: np.ndarray) -> Dict[str, np.ndarray]:
    """The emulated noises (per layer, per output) scaled per output so that they sum to
    ``measured`` (all-int8's noise less all-fp16's): what the emulation leaves out (weights,
    integer arithmetic) taken in proportion to each layer's emulated share. An output the
    emulation sees no noise at keeps its figures (0)."""
    if not added:
        return added
    total = np.sum(list(added.values()), axis=0)
    factor = np.where(total > 0, np.maximum(measured, 0.0) / np.where(total > 0, total, 1.0),
                      1.0)
    return {k: v * factor for k, v in added.items()}


def _predicted_path(keys: List[str], order: List[str], added: Dict[str, np.ndarray],
                    signal: np.ndarray, noise_fp16: np.ndarray, outputs: int,
                    cycles: Callable[[Dict[str, str]], int]) -> List[PathPoint]:
    """The points of the greedy path, each with its cycles and predicted SQNR: point k has
    the first k layers of ``order`` promoted to fp16."""
    path: List[PathPoint] = []
    remaining = np.sum([added[k] for k in keys], axis=0) if keys else np.zeros(outputs)
    for promoted in range(len(keys) + 1):
        if promoted:
            remaining = remaining - added[order[promoted - 1]]
        assignment = {k: "fp16" if k in set(order[:promoted]) else "int8" for k in keys}
        path.append(PathPoint(promoted, cycles(assignment), min(
            _sqnrs(signal, noise_fp16 + np.maximum(remaining, 0.0)))))
    return path


def _choose_point(path: List[PathPoint], keys: List[str], order: List[str], target: float,
                  measure: Callable[[Dict[str, str]], tuple]) -> int:
    """The point of ``path`` chosen (module docstring, step 6), measuring the points it
    needs with ``measure``; the last point (all-fp16) is measured and meets the target."""
    def meets(k: int) -> bool:
        if not path[k].measured:
            fp16 = set(order[:k])
            _fill(path[k], measure({key: "fp16" if key in fp16 else "int8" for key in keys}))
        return path[k].meets(target)

    if not meets(0):
        guess = next((k for k, p in enumerate(path) if p.predicted_sqnr_db >= target),
                     len(keys))
        chosen = _first_meeting(len(path) - 1, guess, meets)
        # Converting runs make the path's cycles rise and fall: the later points that cost
        # fewer cycles (and promote more layers) are measured too, the cheapest first, until
        # one meets the target (no point after it can be cheaper).
        for k in sorted(range(chosen + 1, len(path)), key=lambda k: (path[k].cycles, k)):
            if path[k].cycles >= path[chosen].cycles or meets(k):
                break
    # Of the points measured, the fewest cycles that meet the target.
    return min((k for k, p in enumerate(path) if p.meets(target)),
               key=lambda k: (path[k].cycles, k))


def _first_meeting(last: int, guess: int, meets: Callable[[int], bool]) -> int:
    """The first point of the path that meets the target (as far as the measurements tell),
    where point 0 falls short and point ``last`` meets: from ``guess``, steps of 1, 2, 4, ...
    away from it (fewer layers promoted while the points meet, more while they fall short)
    until a point that falls short and one that meets bracket the edge, then halving."""
    below, above = 0, last  # measured: ``below`` falls short, ``above`` meets
    k, step = min(max(guess, 1), last), 1
    if meets(k):
        above = k
        while above - below > 1:
            k = max(above - step, below + 1)
            if not meets(k):
                below = k
                break
            above, step = k, step * 2
    else:
        below = k
        while above - below > 1:
            k = min(below + step, above - 1)
            if meets(k):
                above = k
                break
            below, step = k, step * 2
    while above - below > 1:
        k = (below + above) // 2
        if meets(k):
            above = k
        else:
            below = k
    return above


def _out_of_reach(target: float, calibration: List[float], held: List[float]) -> None:
    """An error when all-fp16 (the most precise the accelerator computes) misses the target
    on some output, on either set of inputs: no assignment of int8 / fp16 can reach it."""
    worst = min(min(calibration), min(held))
    if worst >= target:
        return
    sets = {"the calibration inputs": calibration, "the held-back inputs": held}
    where, values = min(sets.items(), key=lambda item: min(item[1]))
    output = int(np.argmin(values))
    which = f" (output {output} of {len(values)}; the others " + ", ".join(
        f"{v:.2f}" for i, v in enumerate(values) if i != output) + " dB)" \
        if len(values) > 1 else ""
    raise AccelInvalidError(
        f"target_sqnr_db = {target:g} is out of reach: all-fp16 gives {worst:.2f} dB on "
        f"{where}{which}, and fp16 is the most precise the accelerator computes in: the model "
        "loses that much to fp16 rounding alone (every layer of the int8 partition on the "
        "accelerator, against its fp32 build), so no int8/fp16 assignment reaches the target")
