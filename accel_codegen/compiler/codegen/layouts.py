"""Which tensors of an fp32 function stay channel-blocked (C16, NVDLA's feature atoms) between
its runs, so that the CPU kernels skip the conversions (accel_layout in ``accel/accel.h``).

A run has a C16 kernel when the C library says so (``accel_c16_native``: the C library is the
one judge); with all its tensors C16 it runs without conversions. Any other run that reads or
writes a C16 tensor is converted around by the runtime: a pass over each C16 tensor it touches.
The plan chooses the runs that run C16 so that what their kernels save outweighs the
conversions they cause, by the host's figures, which the runtime owns
(``accel_host_c16_saving``, ``accel_host_conversion_seconds``: docs/kernels.md, "Host-speed
figures"; ``ACCEL_HOST_C16`` sets them for another host); their tensors are the C16 ones. So a group's edge falls where converting is cheapest: a layer without a C16 kernel
may convert its output to C16 for the readers that have one, and the image layer's conv (with
ResNet's max pool) writes C16 from its NCHW input without a conversion
(``c16_native(..., in_layout="nchw")``).

A C16 tensor is one run's output read by other runs inside the function (not a function input
or output, not a constant: the constant pool holds those NCHW), fp32 with a multiple of 16
channels and more than one position, and no run that touches it copies (BDMA), reads it as
another shape (a dense layer's flattened input) or as anything but its data or element-wise
operand (a conv's computed weights). An element-wise operand is in the layout of
its run's output, so a run's operand and output are C16 together or not at all.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set

import numpy as np
from tvm import relax

from ...sim.config import AccelConfig
from ...sim.device import c16_native, c16_saving, conversion_seconds_per_byte
from ...sim.layout import ATOM
from ..layer import Layer, static_shape
from ..program import Function as ProgramFunction
from ..program import Program, Run

class _Run:
    """One run of the function as the layout plan weighs it: what it reads and writes,
    whether it has a C16 kernel, and whether the runtime may convert its tensors
    (``convertible``: not a copy, its data read in its own shape, any element-wise operand a
    tensor of the function)."""

    def __init__(self, layer: Layer, data: Optional[relax.Var], operand: Optional[relax.Var],
                 output: relax.Var, native: bool, convertible: bool, mode: str,
                 blocks_output: bool, run: Optional[Run] = None):
        self.layer, self.data, self.operand, self.output = layer, data, operand, output
        self.run = run  # the program's run (None: a layer's runs taken as one)
        self.native, self.convertible, self.mode = native, convertible, mode
        # it writes a C16 output from an NCHW input without a conversion (the image layer)
        self.blocks_output = blocks_output
        # tensors its call reads otherwise (a conv's computed weights, a concat's other
        # sources): as they are, NCHW
        self.others: List[relax.Var] = []

    def tensors(self) -> List[relax.Var]:
        return [v for v in (self.data, self.operand, self.output) if v is not None]

    def saving(self) -> float:
        """What running it C16 saves (seconds, the runtime's figures for this host; negative:
        it loses)."""
        c = self.layer.conv
        if c is None:
            return 0.0
        _, c_group, r, s = c.weight_shape
        return c16_saving((r, s), c.groups, c_group, max(c.stride),
                          winograd=self.mode == "winograd", out_shape=self.layer.out_shape)


def _bytes(var: relax.Var) -> int:
    return 4 * int(np.prod(static_shape(var)))


def _blockable(var: relax.Var) -> bool:
    shape = static_shape(var)
    return len(shape) == 4 and shape[1] % ATOM == 0 and shape[2] * shape[3] > 1


def _runs(function: ProgramFunction, config: AccelConfig, fuse: bool) -> List[_Run]:
    """Every run of the function in order, as the layout plan sees them: the program's runs of
    a layer with one run or a downsample branch (the branch's output is its layer's
    element-wise operand); the runs of a concat, a deconvolution or a layer norm as one, which
    converts nothing."""
    runs: List[_Run] = []
    of_call: Dict[int, list] = {}
    for run in function.runs:
        if not run.converts:
            of_call.setdefault(run.call, []).append(run)

    def convertible(layer: Layer, data, operand) -> bool:
        # a deconvolution's runs read and write NCHW (its phases are scratch of their own);
        # so does a multiply by a per-channel operand (Layer.computed_scale: accel.h's
        # ew_per_channel is NCHW only)
        return not layer.copies and layer.lrn is None and layer.rubik is None and \
            not layer.tokens and not (fuse and layer.computed_scale) and \
            not layer.sdp.ew_per_channel and data is not None and \
            tuple(layer.in_shape) == static_shape(data) and \
            (not layer.sdp.ew_op or operand is not None)

    def planned(run: Run) -> _Run:
        layer = run.layer
        operand = run.operand if layer.sdp.ew_op else None
        modes = run.modes
        native = blocks_output = False
        if convertible(layer, run.data, operand):
            ops = layer.engine_ops(fuse, "fp32", modes=modes)
            chain_mode = "fused" if layer.fused(fuse) else "independent"
            native, blocks_output = (c16_native(config, ops, layer.in_shape, mode=chain_mode,
                                                in_layout=layout) for layout in ("c16", "nchw"))
        return _Run(layer, run.data, operand, run.output, native,
                    convertible(layer, run.data, operand), modes.get("mode", "direct"),
                    blocks_output, run)

    for i, call in enumerate(function.calls):
        own = of_call.get(i, [])
        first = len(runs)
        if call.layer.branch is not None or len(own) == 1:
            runs.extend(planned(run) for run in own)
        else:  # its runs as one
            scope = dict(zip(call.composite.params, call.binding.value.args))
            data = scope.get(call.layer.data, call.layer.data)
            data = data if isinstance(data, relax.Var) else None
            runs.append(_Run(call.layer, data, None, call.binding.var, False, False, "direct",
                             False))
        read = {t for r in runs[first:] for t in (r.data, r.operand)}
        runs[-1].others = [a for a in call.binding.value.args
                           if isinstance(a, relax.Var) and a not in read]
    return runs


def c16_tensors(function: ProgramFunction, config: AccelConfig, fuse: bool) -> Set[relax.Var]:
    """The tensors of an fp32 function kept C16, among them a downsample branch's output (its
    layer's element-wise operand); its runs' conv modes and memory plan made."""
    runs = _runs(function, config, fuse)
    outputs = function.function.body.body
    outputs = set(outputs.fields) if isinstance(outputs, relax.Tuple) else {outputs}
    touching: Dict[relax.Var, List[_Run]] = {}
    for r in runs:
        for t in r.tensors():
            touching.setdefault(t, []).append(r)
    written = {r.output for r in runs}
    others = {t for r in runs for t in r.others}
    candidates = {t for t, rs in touching.items()
                  if t in written and t not in outputs and t not in others and _blockable(t) and
                  all(r.convertible for r in rs)}
    changed = True
    while changed:  # an operand and its run's output: C16 together or not at all
        changed = False
        for r in runs:
            if r.operand is not None and (r.operand in candidates) != (r.output in candidates):
                candidates.discard(r.operand)
                candidates.discard(r.output)
                changed = True
    return _Plan(runs, candidates).best()


def plan_layouts(program: Program, config: AccelConfig, fuse: bool) -> Program:
    """The pass that sets each run's layouts: in an fp32 program, its data and output C16
    where :func:`c16_tensors` keeps them so (the conv modes and memory plan made first);
    NCHW everywhere else."""
    if program.precision != "fp32":
        return program
    for function in program.functions:
        c16 = c16_tensors(function, config, fuse)
        for run in function.runs:
            run.in_layout = "c16" if run.data in c16 else "nchw"
            run.out_layout = "c16" if run.output in c16 else "nchw"
    return program


class _Plan:
    """The choice of runs that run C16, as a greedy descent from every native run whose
    tensors can all be C16: drop the run, or the group of C16 runs linked by their tensors,
    whose removal lowers the cost most, until none does.

    Tensors that must share a layout (a run's operand and output) form classes; a class is C16
    while a chosen run touches it, and every other run that touches it converts its tensors in
    it. Per class: ``total`` bytes that all runs touch, ``chosen`` bytes that chosen runs touch
    and ``holders`` the number of chosen runs touching it; so a drop's change in cost is local
    to the classes the dropped runs touch (the descent is quadratic in the runs, not cubic)."""

    def __init__(self, runs: List[_Run], candidates: Set[relax.Var]):
        parent = {t: t for t in candidates}

        def root(t):
            while parent[t] is not t:
                parent[t] = parent[parent[t]]
                t = parent[t]
            return t

        for r in runs:
            if r.operand in candidates:  # then its output too (the rule above)
                parent[root(r.operand)] = root(r.output)
        self.members: Dict[relax.Var, List[relax.Var]] = {}
        for t in candidates:
            self.members.setdefault(root(t), []).append(t)
        self.touches: Dict[int, Dict[relax.Var, int]] = {}  # run -> class -> bytes
        self.total: Dict[relax.Var, int] = {}
        for r in runs:
            touched: Dict[relax.Var, int] = {}
            for t in r.tensors():
                if t in candidates and not (t is r.output and r.blocks_output and
                                            r.data not in candidates):
                    touched[root(t)] = touched.get(root(t), 0) + _bytes(t)
            self.touches[id(r)] = touched
            for k, b in touched.items():
                self.total[k] = self.total.get(k, 0) + b
        self.chosen = [r for r in runs if r.native and all(t in candidates for t in r.tensors())]
        # the host's figures, asked of the runtime once per plan
        self.savings = {id(r): r.saving() for r in self.chosen}
        self.per_byte = conversion_seconds_per_byte()
        self.held = {k: 0 for k in self.total}
        self.holders = {k: 0 for k in self.total}
        for r in self.chosen:
            self._hold(r, 1)

    def _hold(self, run: _Run, sign: int) -> None:
        for k, b in self.touches[id(run)].items():
            self.held[k] += sign * b
            self.holders[k] += sign

    def cost(self) -> float:
        """Seconds the conversions take minus what the C16 runs save (lower is better)."""
        converted = sum(self.total[k] - self.held[k] for k in self.total if self.holders[k])
        return converted * self.per_byte - sum(self.savings[id(r)] for r in self.chosen)

    def _change(self, drop: List[_Run]) -> float:
        """What dropping the runs ``drop`` changes in the cost."""
        held: Dict[relax.Var, int] = {}
        holders: Dict[relax.Var, int] = {}
        for r in drop:
            for k, b in self.touches[id(r)].items():
                held[k] = held.get(k, self.held[k]) - b
                holders[k] = holders.get(k, self.holders[k]) - 1
        converted = sum((self.total[k] - held[k] if holders[k] else 0) -
                        (self.total[k] - self.held[k]) for k in held)
        return converted * self.per_byte + sum(self.savings[id(r)] for r in drop)

    def _groups(self) -> List[List[_Run]]:
        """The chosen runs linked by classes they share, groups of more than one run."""
        by_class: Dict[relax.Var, List[_Run]] = {}
        for r in self.chosen:
            for k in self.touches[id(r)]:
                by_class.setdefault(k, []).append(r)
        group_of: Dict[int, int] = {}
        groups: List[List[_Run]] = []
        for r in self.chosen:
            if id(r) in group_of:
                continue
            group_of[id(r)] = len(groups)
            group, todo = [r], [r]
            while todo:
                for k in self.touches[id(todo.pop())]:
                    for other in by_class[k]:
                        if id(other) not in group_of:
                            group_of[id(other)] = len(groups)
                            group.append(other)
                            todo.append(other)
            groups.append(group)
        return [g for g in groups if len(g) > 1]

    def best(self) -> Set[relax.Var]:
        """The C16 tensors of the cheapest plan the descent finds (none if it saves nothing)."""
        while self.chosen:
            change, drop = min(((self._change(d), d) for d in
                                [[r] for r in self.chosen] + self._groups()),
                               key=lambda option: option[0])
            if change >= 0:
                break
            for r in drop:
                self._hold(r, -1)
            dropped = set(map(id, drop))
            self.chosen = [r for r in self.chosen if id(r) not in dropped]
        if self.cost() >= 0:
            return set()
        return {t for k, members in self.members.items() if self.holders[k] for t in members}
