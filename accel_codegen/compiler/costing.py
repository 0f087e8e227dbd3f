"""A :class:`~.program.Program` costed by the C cost model without running it: every run's
chain lowered once (direct, and in Winograd mode where the configuration runs it), and costed
on any configuration with the same partition (a sweep's points) by one
``accel_estimate_chains`` call, with the memory choices and conv modes the code generator
makes (``codegen/memory.py``: :class:`~.codegen.memory.ModulePlan`). ``estimate``, the sweep,
the timeline, the debugger and the mixed-precision search read their figures here, so they
equal a profiled run of the generated code.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

from ..sim.config import AccelConfig
from ..sim.costs import CostTotals
from ..sim.device import ChainBatch
from ..sim.ops import Sdp
from .codegen.memory import ModulePlan, choose_options, choose_run_modes
from .codegen.passes import plan_surface_adds
from .codegen.weights import quantize
from .layer import Layer, feature_surface
from .program import Program, Run, RunMemory


def batch_precision(precision: str) -> Optional[str]:
    """A ChainBatch's precision: None for mixed code (each op carries its own)."""
    return None if precision == "mixed" else precision


@dataclasses.dataclass(frozen=True)
class LoweredRun:
    """One run's chains as lowered for costing: direct, and in Winograd mode where it can be."""

    key: str
    label: str
    primitive: str
    layer: Layer
    mode: str                       # "fused" or "independent"
    conv_modes: Optional[dict]      # its CONV's input modes (None: no conv)
    direct: list
    winograd: Optional[list]
    in_shape: Optional[Tuple[int, ...]] = None  # a converting run's (else the layer's)

    def chain(self, winograd: bool = False, memory: Optional[RunMemory] = None) -> tuple:
        """(ops, input shape, mode) for a ChainBatch: direct or in Winograd mode, or with the
        memory choices (and the conv mode they record) applied to the direct ops."""
        ops = self.winograd if winograd else self.direct
        return (memory.apply(self.direct) if memory is not None else ops,
                self.in_shape or self.layer.in_shape, self.mode)

    @classmethod
    def of(cls, run: Run, precision: str, fuse: bool) -> "LoweredRun":
        """``run`` lowered (``precision``: the program's, for a run that carries none), with
        the conv modes the pass gave it (``codegen/memory.py``: ``choose_conv_modes``)."""
        layer, precision = run.layer, run.precision or precision
        if run.converts:  # one SDP pass: the layer's output into the other precision
            ops = [Sdp(precision=precision, convert=True, cvt_scale=1.0)]
            return cls(run.key, run.label, run.primitive, layer, "independent", None, ops, None,
                       feature_surface(layer.out_shape))
        mode = "fused" if layer.fused(fuse) else "independent"
        modes = run.conv_modes or {}
        fast_ops = layer.engine_ops(fuse, precision, modes={**modes, "mode": "winograd"}) \
            if run.winograd else None
        return cls(run.key, run.label, run.primitive, layer, mode, run.conv_modes,
                   layer.engine_ops(fuse, precision, modes=modes), fast_ops)


class MemoryPlans:
    """The code generator's memory plans (:class:`~.codegen.memory.ModulePlan`, with every
    conv direct and each Winograd-capable conv's options), and the chains they give, lowered
    once per distinct plan. A plan reads the configuration's memory fields only, so a sweep
    over the MAC array, CBUF and DRAM re-plans a handful of times; the modes are then chosen
    per configuration from one costing of the plan's chains, as the code generator chooses
    them; the emitted weights' non-zero counts (which decide the sparse format) are counted
    once."""

    #: The cost fields a plan reads besides the partition's fields (weight and feature bytes).
    FIELDS = ("atomic_c", "atomic_k", "memory_atom_bytes", "cbuf_bytes")

    def __init__(self, program: Program, runs: Sequence[LoweredRun], fuse: bool):
        self.program, self.runs = program, list(runs)
        self.fuse = fuse
        self.planned: Dict[tuple, Tuple[ModulePlan, ChainBatch, Dict[tuple, int]]] = {}

    def _plan(self, config: AccelConfig) -> Tuple[ModulePlan, ChainBatch, Dict[tuple, int]]:
        program = self.program
        plan = ModulePlan(program, config, self.fuse)
        # every run as planned with its conv direct (a converting run of mixed code has no
        # plan of its own: all in DRAM), then every Winograd option
        chains = [run.chain(memory=plan.direct.get(run.key, RunMemory())) for run in self.runs]
        index = {(run.key, None): i for i, run in enumerate(self.runs)}
        for run in self.runs:
            for option, (memory, _) in enumerate(plan.options.get(run.key, ())):
                index[(run.key, option)] = len(chains)
                chains.append(run.chain(memory=memory))
        return plan, ChainBatch(config, chains, batch_precision(program.precision)), index

    def records(self, config: AccelConfig, costed: str) -> Optional[list]:
        """Each run's record on ``config`` (``costed``: "estimate" or "run_stats") with the
        memory choices and conv modes of the code generator's plan; None when no plan can
        change anything (no SRAM, no weight compression: the caller chooses the modes)."""
        if config.sram_bytes == 0 and "weight_compression" not in config.features:
            return None
        key = tuple(getattr(config, field) for field in self.FIELDS)
        if key not in self.planned:
            self.planned[key] = self._plan(config)
        plan, batch, index = self.planned[key]
        records = getattr(batch, costed)(config)
        chosen = plan.choose(lambda run, option: records[index[(run, option)]].cycles)
        return [records[index[(run.key, chosen.get(run.key))]] for run in self.runs]


class ProgramCosts:
    """A program's runs lowered to C once, costed on the configuration it was lowered for or
    on any other with the same partition (the sweep's ``COST_FIELDS`` differ). ``lowered``: a
    cache of lowered runs by key, precision and conversion, kept across programs of the same
    layers on the same configuration (the mixed-precision search's candidates)."""

    def __init__(self, program: Program, config: AccelConfig, fuse: bool,
                 winograd: bool = True, lowered: Optional[dict] = None):
        self.program, self.fuse = program, fuse
        self.precision = program.precision
        lowered = {} if lowered is None else lowered
        plan_surface_adds(program)  # the runs' shapes as the code generator plans them
        for run in program.runs:
            key = (run.key, run.precision, run.converts)
            if key in lowered:  # the same layer in the same precision: its modes as chosen
                run.conv_modes, run.winograd = lowered[key].conv_modes, \
                    lowered[key].winograd is not None
            else:
                choose_run_modes(run, config, fuse, winograd, program.precision)
                lowered[key] = LoweredRun.of(run, program.precision, fuse)
        quantize(program, fuse)  # the emitted weights, whose non-zeros the memory plans count
        self.runs = [lowered[(run.key, run.precision, run.converts)] for run in program.runs]
        # Per run, its chain's index in `chains`, and the index of the same run in Winograd
        # mode where the configuration's features allow it (None elsewhere): without a memory
        # plan that changes anything, the code generator takes Winograd where it costs fewer
        # cycles, which depends on the cost fields, so both are lowered once and the choice
        # is made per configuration from their costs (with a plan: MemoryPlans).
        chains, self.choices = [], []
        for run in self.runs:
            chains.append(run.chain())
            direct, fast = len(chains) - 1, None
            if run.winograd is not None:
                chains.append(run.chain(winograd=True))
                fast = len(chains) - 1
            self.choices.append((direct, fast))
        self.chains = ChainBatch(config, chains, batch_precision(program.precision))
        self.memory = MemoryPlans(program, self.runs, fuse)

    @property
    def labels(self) -> List[Tuple[str, str]]:
        """(label, primitive) of every run, in order."""
        return [(run.label, run.primitive) for run in self.runs]

    def records(self, config: AccelConfig, costed: str = "estimate") -> list:
        """Each run's record on ``config`` (``costed``: "estimate" or "run_stats"), with the
        code generator's memory choices and conv modes: its plan's where the configuration has
        SRAM or weight compression; else every run in DRAM with dense weights, in Winograd
        mode where that takes fewer cycles (the choice the plan makes there)."""
        planned = self.memory.records(config, costed)
        if planned is not None:
            return planned
        records = getattr(self.chains, costed)(config)
        fast = {i: f for i, (_, f) in enumerate(self.choices) if f is not None}
        chosen = choose_options({i: [0] for i in fast}, 0, lambda i, option: records[
            self.choices[i][0] if option is None else fast[i]].cycles)
        return [records[f if i in chosen else d] for i, (d, f) in enumerate(self.choices)]

    def totals(self, config: AccelConfig) -> CostTotals:
        """The sums over the runs on ``config``."""
        return CostTotals.of(self.records(config, "run_stats"))
