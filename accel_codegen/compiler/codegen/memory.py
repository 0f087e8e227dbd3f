"""The code generator's memory choices for one offloaded function, made here once for the
generated code and for the estimate alike (so that an estimate equals a profiled run):

- **Weight format.** A convolution whose weights, as the code generator emits them (folded,
  rounded or quantised), take fewer bytes in NVDLA's sparse format (a bit mask and the non-zero
  weights, see ``accel_weight_format`` in accel.h) is stored sparse, where the configuration
  has weight compression; otherwise dense.
- **CBUF split.** The data and weight banks NVDLA's compiler would give the convolution
  (``accel_conv_banks``, the policy of nvdla/sw's ConvCoreNode::splitNodesInternal), for the
  chosen format; recorded in the CONV descriptor.
- **Secondary memory (SRAM).** NVDLA's compiler allocates its local surfaces (the feature maps
  between layers) from the CVSRAM pool first and falls back to DRAM. Here: a feature map that
  one layer of the function writes and only later layers of the function read goes to SRAM
  when it fits beside the feature maps already placed there and live at the same time (greedy,
  in execution order); every run that writes or reads it sets its stream's ``sram`` bit.
  Function inputs and outputs stay in DRAM (the host reads and writes them), as does a
  downsample branch's result. The engines write and read SRAM directly, so no BDMA copy is
  needed for these feature maps.
- **Resident weights.** What SRAM has left beside the largest set of feature maps live at once
  (over every function of the module) holds conv weights, in execution order while they fit:
  copied there once when the model's constants load (the BDMA's job on NVDLA, not part of an
  inference), then read at SRAM bandwidth by every inference. (NVDLA's own compiler keeps
  weights in DRAM: placing them in SRAM is this model's choice.)
- **Winograd mode**, chosen under the plan it runs with (its pre-transformed weights are larger,
  dense, and may or may not fit SRAM, so the mode and the memory choices are one decision).
  The plan above is made with every conv direct; then each conv the configuration runs in
  Winograd mode (``Layer.winograd_refusal``), in execution order, switches to it where the cost
  model gives its run fewer cycles that way, with its weights in DRAM, or resident in SRAM when
  what they add to its direct plan fits what SRAM has left (they never displace another layer's
  weights, so no other run gets slower: each switch lowers the total). On equal cycles the
  option that holds fewer SRAM bytes wins (direct first, then Winograd from DRAM).
  :class:`ModulePlan` holds the direct plan and each conv's options; ``choose`` takes any
  costing of them, so the code generator (one batch of chains) and a sweep (one batch per
  plan, costed per configuration) choose alike.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from tvm import relax

from ..._accel_ffi import ffi, lib
from ...errors import check
from ...sim.config import AccelConfig, precision_code
from ...sim.device import ChainBatch
from ...sim.ops import Conv
from ..engines import fp16_runner
from ..layer import Layer, static_shape
from ..program import ConvChoice, Program, Run, RunMemory, lower_functions  # noqa: F401
from ..program import Function as ProgramFunction
from .weights import quantize, run_weights


def choose_run_modes(run: Run, config: AccelConfig, fuse: bool, winograd: bool = True,
                     precision: Optional[str] = None) -> None:
    """A run's CONV input modes (``Layer.conv_modes``) and whether the configuration runs its
    CONV in Winograd mode (``Layer.winograd_refusal``; only with ``winograd``), set on the run
    (``precision``: the program's, for a run that carries none)."""
    layer = run.layer
    if layer.conv is None or run.converts:
        return
    precision = run.precision or precision
    run.conv_modes = layer.conv_modes(config, fuse, precision)
    run.winograd = winograd and \
        layer.winograd_refusal(config, fuse, precision, run.conv_modes) is None


def choose_conv_modes(program: Program, config: AccelConfig, fuse: bool,
                      winograd: bool = True) -> Program:
    """The pass that sets each conv run's input modes and whether it may run in Winograd mode;
    which mode it runs in is the memory plan's choice (:func:`plan_memory`)."""
    for run in program.runs:
        choose_run_modes(run, config, fuse, winograd, program.precision)
    return program


def conv_choice(config: AccelConfig, layer: Layer, precision: str,
                modes: dict, count_weights: Callable[[], Optional[int]]) -> ConvChoice:
    """Weight format and CBUF split of a layer's conv (see the module's docstring), in the conv
    modes given (``Layer.conv_modes``' input modes, and "mode": "winograd" for Winograd's
    option: they change the bytes CBUF holds).
    ``count_weights()``: the non-zero count of the weights the code generator emits (None when
    they are not constants), asked only where the sparse format is possible."""
    config_c = config.to_c()
    modes = modes or {}
    conv = Conv(None, weight_shape=layer.conv.weight_shape, stride=layer.conv.stride,
                padding=layer.conv.padding, dilation=layer.conv.dilation,
                groups=layer.conv.groups, precision=precision, **modes)
    desc = ffi.new("accel_conv_desc*")
    conv._fill(desc)
    in_c = layer.in_shape[1]
    fmt, nonzero = "dense", 0
    # Winograd's pre-transformed weights are dense (NVDLA's compiler never compresses them).
    count = count_weights() \
        if "weight_compression" in config.features and modes.get("mode") != "winograd" \
        else None
    if count is not None:
        dense = lib.accel_conv_weight_bytes(config_c, desc, in_c)
        desc.weight_format = lib.ACCEL_WEIGHTS_SPARSE
        desc.weights_nonzero = count
        # Worth it when fewer bytes, and a CBUF of 3 banks or more leaves one for the mask.
        if lib.accel_conv_weight_bytes(config_c, desc, in_c) < dense and config.cbuf_banks > 2:
            fmt, nonzero = "sparse", int(desc.weights_nonzero)
        else:
            desc.weight_format, desc.weights_nonzero = lib.ACCEL_WEIGHTS_DENSE, 0
    shape = ffi.new("accel_tensor*", {"n": layer.in_shape[0], "c": in_c, "h": layer.in_shape[2],
                                      "w": layer.in_shape[3],
                                      "precision": precision_code(precision)})
    data_banks, weight_banks = ffi.new("int32_t*"), ffi.new("int32_t*")
    check(lib.accel_conv_banks(config_c, desc, shape, data_banks, weight_banks))
    return ConvChoice(int(data_banks[0]), int(weight_banks[0]), fmt, nonzero,
                      modes.get("mode", "direct"))


def _feature_bytes(config_c, shape: Sequence[int], precision: str) -> int:
    n, c, h, w = (tuple(shape) + (1, 1))[:4]
    tensor = ffi.new("accel_tensor*", {"n": n, "c": c, "h": h, "w": w,
                                       "precision": precision_code(precision)})
    return int(lib.accel_feature_bytes(config_c, tensor))


def plan_memory(program: Program, config: AccelConfig, fuse: bool) -> Program:
    """The pass that sets every planned run's memory choices and its CONV's mode
    (:class:`ModulePlan`, its options costed by the C cost model on ``config``); the runs'
    conv modes and emitted weights first (:func:`choose_conv_modes`, ``weights.quantize``)."""
    plan = ModulePlan(program, config, fuse)
    memories = plan.memories(plan.choose(plan.cycles(config)))
    for run in program.runs:
        if run.key in memories:
            run.memory = memories[run.key]
    return program


def plan_module(functions: Sequence[relax.Function], config: AccelConfig, fuse: bool,
                precision: str, first_index: int = 0, winograd: bool = True,
                layer_precisions: Optional[Dict[str, str]] = None,
                program: Optional[Program] = None) -> Dict[str, RunMemory]:
    """The memory choices and conv modes of every run of a module's offloaded functions (in
    the order the code generator numbers them, from ``first_index``), by run key, as the code
    generator emits them (:func:`plan_memory` on their Program). ``precision`` "mixed": each
    layer's from ``layer_precisions`` by its key."""
    if program is None:
        program = lower_functions(functions, first_index, precision, layer_precisions,
                                  fp16_runner(config, fuse))
    quantize(choose_conv_modes(program, config, fuse, winograd), fuse)
    plan_memory(program, config, fuse)
    return {run.key: run.memory for run in program.runs if run.planned}


def choose_options(extras: Dict[str, List[int]], left: int,
                   cycles: Callable[[str, Optional[int]], int]) -> Dict[str, int]:
    """The one rule that picks each conv's mode: in execution order, the option with the
    fewest cycles (``cycles(key, option)``; None: direct as planned), among those whose SRAM
    bytes beyond the direct plan's (``extras[key][option]``) fit what is ``left``; direct on
    equal cycles. Returns the option each switching conv takes, by run key."""
    chosen = {}
    for key, options in extras.items():
        best, pick = cycles(key, None), None
        for option, extra in enumerate(options):
            if extra <= left and cycles(key, option) < best:
                best, pick = cycles(key, option), option
        if pick is not None:
            chosen[key] = pick
            left -= options[pick]
    return chosen


class ModulePlan:
    """A module's memory plan with every conv direct, and the Winograd options of each conv
    the configuration runs in Winograd mode (see the module's docstring); :meth:`choose` picks
    the modes from the options' cycles, :meth:`memories` gives the chosen plan.

    It reads the program's runs as the passes before it left them: each conv run's input modes
    and whether it may run in Winograd mode (:func:`choose_conv_modes`), its emitted weights
    (``weights.quantize``: their non-zero count decides the sparse format). In mixed code a
    layer's output that a layer of the other precision reads (through a converting run) stays
    in DRAM."""

    def __init__(self, program: Program, config: AccelConfig, fuse: bool):
        self.fuse = fuse
        plans = [_FunctionPlan(f, config, fuse) for f in program.functions]
        self.left = 0  # SRAM bytes no feature map or resident weights take
        if config.sram_bytes > 0:
            for plan in plans:
                plan.place_feature_maps()
            # Resident weights share the SRAM with every function's feature maps.
            budget = config.sram_bytes - max((max(plan.load, default=0) for plan in plans),
                                             default=0)
            for plan in plans:
                budget = plan.place_weights(budget)
            self.left = budget
        self.direct: Dict[str, RunMemory] = {}
        self.options: Dict[str, List[Option]] = {}  # in execution order
        self.runs: Dict[str, Run] = {}  # conv runs with options
        for plan in plans:
            self.direct.update(plan.result())
            for run in plan.runs:
                if run.key in plan.winograd:
                    self.options[run.key] = plan.winograd_options(run)
                    self.runs[run.key] = run

    def chain(self, key: str, option: Optional[int]) -> tuple:
        """(ops, input shape, mode) of a conv run with options: direct as planned (None) or
        its Winograd option."""
        run = self.runs[key]
        memory = self.direct[key] if option is None else self.options[key][option][0]
        ops = run.layer.engine_ops(self.fuse, run.precision, modes=run.conv_modes)
        return (memory.apply(ops), run.layer.in_shape,
                "fused" if run.layer.fused(self.fuse) else "independent")

    def cycles(self, config: AccelConfig) -> Callable[[str, Optional[int]], int]:
        """The cycles of every conv run with options, direct and in each option, on ``config``
        (one batch of chains)."""
        index = {(key, option): i for i, (key, option) in enumerate(
            (key, option) for key, options in self.options.items()
            for option in [None, *range(len(options))])}
        if not index:
            return lambda key, option: 0
        # each chain in its ops' precision (mixed code: each layer its own)
        batch = ChainBatch(config, [self.chain(*choice) for choice in index])
        records = batch.run_stats(config)
        return lambda key, option: int(records[index[(key, option)]].cycles)

    def choose(self, cycles: Callable[[str, Optional[int]], int]) -> Dict[str, int]:
        """The Winograd option each switching conv run takes (by run key; the others stay
        direct), from ``cycles(key, option)`` (None: direct as planned)."""
        return choose_options({key: [extra for _, extra in options]
                               for key, options in self.options.items()}, self.left, cycles)

    def memories(self, chosen: Dict[str, int]) -> Dict[str, RunMemory]:
        """Every run's memory choices (and conv mode) with the options ``chosen``."""
        return {key: self.options[key][chosen[key]][0] if key in chosen else memory
                for key, memory in self.direct.items()}


class _FunctionPlan:
    """The runs of one function, its conv choices and what it places in SRAM."""

    def __init__(self, function: ProgramFunction, config: AccelConfig, fuse: bool):
        self.function = function.function
        self.config = config
        self.config_c = config.to_c()
        # its planned runs (a converting run of mixed code and a layer norm's passes have no
        # plan of their own: all in DRAM)
        self.runs = [run for run in function.runs if run.planned]
        # mixed: outputs converted for a reader of the other precision (kept in DRAM)
        self.converted = {run.writes for run in self.runs
                          if run.writes is not None and function.calls[run.call].converted}
        # the conv input modes (image input, multi-batch) the code generator chooses
        self.modes = {run.key: run.conv_modes for run in self.runs if run.layer.conv is not None}
        self.convs = {run.key: conv_choice(config, run.layer, run.precision, run.conv_modes,
                                           lambda run=run: run_weights(run, fuse).nonzero)
                      for run in self.runs if run.key in self.modes}
        # the CBUF split of each conv the configuration runs in Winograd mode, in that mode
        self.winograd = {
            run.key: conv_choice(config, run.layer, run.precision,
                                 {**run.conv_modes, "mode": "winograd"}, lambda: None)
            for run in self.runs if run.key in self.modes and run.winograd}
        self.sram_of: Dict[str, set] = {run.key: set() for run in self.runs}
        self.placed: set = set()             # feature maps in SRAM
        self.sizes: Dict[relax.Var, int] = {}
        self.load: List[int] = []            # SRAM bytes of feature maps live at each call
        self.resident: Dict[str, int] = {}   # bytes of each conv's resident weights

    def weight_bytes(self, run: Run, choice: ConvChoice) -> int:
        """The bytes of a conv's weights as its CONV reads them with ``choice``."""
        layer = run.layer
        conv = Conv(None, weight_shape=layer.conv.weight_shape, groups=layer.conv.groups,
                    stride=layer.conv.stride, precision=run.precision,
                    **{**self.modes[run.key], **dataclasses.asdict(choice)})
        desc = ffi.new("accel_conv_desc*")
        conv._fill(desc)
        return int(lib.accel_conv_weight_bytes(self.config_c, desc, layer.in_shape[1]))

    def winograd_options(self, run: Run) -> List[Option]:
        """A conv's Winograd options under this plan: its weights in DRAM, and resident when
        SRAM has them and the run's feature maps room (the bytes beyond its direct plan's are
        checked against what is left when the option is chosen)."""
        choice = self.winograd[run.key]
        streams = tuple(sorted(self.sram_of[run.key] - {"weights"}))
        direct = self.resident.get(run.key, 0)
        options = [(RunMemory(streams, choice), -direct)]
        size = self.weight_bytes(run, choice)
        if self.config.sram_bytes > 0 and 0 < size and \
                self.run_footprint(run) + size <= self.config.sram_bytes:
            options.append((RunMemory(tuple(sorted((*streams, "weights"))), choice),
                            size - direct))
        return options

    def result(self) -> Dict[str, RunMemory]:
        return {run.key: RunMemory(tuple(sorted(self.sram_of[run.key])), self.convs.get(run.key))
                for run in self.runs}

    def run_footprint(self, run: Run, extra=None) -> int:
        """The run's SRAM feature bytes as the library counts them (each stream on its own)."""
        tensors = [v for v in run.reads.values()
                   if v is not None and (v in self.placed or v is extra)]
        if run.writes is not None and (run.writes in self.placed or run.writes is extra):
            tensors.append(run.writes)
        return sum(self.sizes[v] for v in tensors)

    def place_weights(self, budget: int) -> int:
        """Resident weights, in execution order, while they fit ``budget``; returns what is
        left of it."""
        for run in self.runs:
            choice = self.convs.get(run.key)
            if choice is None:
                continue
            size = self.weight_bytes(run, choice)
            if 0 < size <= budget and \
                    self.run_footprint(run) + size <= self.config.sram_bytes:
                self.sram_of[run.key].add("weights")
                self.resident[run.key] = size
                budget -= size
        return budget

    def place_feature_maps(self) -> None:
        """Greedy placement of the function's intermediate feature maps (see the docstring)."""
        runs, config = self.runs, self.config
        result = self.function.body.body
        outputs = set(result.fields) if isinstance(result, relax.Tuple) else {result}
        produced = {run.writes: run.call for run in runs if run.writes is not None}
        precision_of = {run.writes: run.precision for run in runs if run.writes is not None}
        # Every use of a tensor: (run, stream); a tensor read any other way stays in DRAM.
        uses: Dict[relax.Var, List[Tuple[Run, str]]] = {}
        for run in runs:
            for stream, var in run.reads.items():
                if var is not None:
                    uses.setdefault(var, []).append((run, stream))
        for var in produced:
            views = [static_shape(var)] + [u.layer.in_shape for u, stream in uses.get(var, ())
                                          if stream == "input"]
            self.sizes[var] = max(_feature_bytes(self.config_c, shape, precision_of[var])
                                  for shape in views)
        self.load = [0] * (max((run.call for run in runs), default=-1) + 1)
        for var, first in sorted(produced.items(), key=lambda item: item[1]):
            readers = uses.get(var, [])
            if var in outputs or not readers or var in self.converted:
                continue
            size = self.sizes[var]
            last = max(run.call for run, _ in readers)
            if any(self.load[i] + size > config.sram_bytes for i in range(first, last + 1)):
                continue
            touching = [run for run in runs if run.writes is var] + [run for run, _ in readers]
            if any(self.run_footprint(run, var) > config.sram_bytes for run in touching):
                continue
            self.placed.add(var)
            for i in range(first, last + 1):
                self.load[i] += size
            for run in runs:
                if run.writes is var:
                    self.sram_of[run.key].add("output")
            for run, stream in readers:
                self.sram_of[run.key].add(stream)
