"""Which tensors of an fp32 function stay channel-blocked (C16, NVDLA's feature atoms) between
its runs, so that the CPU kernels skip the conversions (accel_layout in ``accel/accel.h``).

A tensor is C16 when it is one run's output and other runs' inputs inside the function (not a
function input or output), fp32 with a multiple of 16 channels and more than one position,
and every run that writes or reads it has a C16 kernel (``accel_c16_native``: 1x1 and
depthwise 3x3 convolutions with their fused SDP; only a conv's run is asked, and not one whose
element-wise operand is a constant, which the constant pool holds NCHW). An element-wise operand is in the layout of
its run's output, so a run's operand and output are C16 together or not at all. The runtime
converts around any run whose tensors do not all match its kernel, which costs a pass over
each converted tensor: a group of C16 tensors linked by their runs is kept only when its runs'
convolutions outweigh the bytes converted at its edges (``FLOPS_PER_CONVERTED_BYTE``).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set

import numpy as np
from tvm import relax

from ...sim.config import AccelConfig
from ...sim.device import c16_native
from ...sim.layout import ATOM
from ...sim.labels import run_key
from ..layer import Layer, static_shape
from ..walk import composite_calls, layer_of
from .memory import RunMemory, emitted_conv_modes

#: A group of C16 tensors pays when its runs' convolutions do at least this many FLOPs per
#: byte converted at its edges. A C16 1x1 convolution runs about 20 % faster than the NCHW one
#: at about 150 GFLOP/s, and a conversion reads and writes a tensor at about 29 GB/s together
#: (docs/whole_network_time.md, the NCHW16c study): 0.2 / 150e9 s saved per FLOP against
#: 2 / 29e9 s per byte, 52 FLOPs a byte. (The depthwise kernels gain more per FLOP.)
FLOPS_PER_CONVERTED_BYTE = 52


class _Run:
    """One layer of the function: what it reads and writes, and whether it has a C16 kernel."""

    def __init__(self, layer: Layer, data: Optional[relax.Var], operand: Optional[relax.Var],
                 output: relax.Var, native: bool):
        self.layer, self.data, self.operand, self.output = layer, data, operand, output
        self.native = native

    def tensors(self) -> List[relax.Var]:
        return [v for v in (self.data, self.operand, self.output) if v is not None]

    def flops(self) -> int:
        c = self.layer.conv
        if c is None:
            return 0
        k, c_group, r, s = c.weight_shape
        out = self.layer.out_shape
        return 2 * int(np.prod(out)) * int(c_group) * int(r) * int(s)


def _elements(var: relax.Var) -> int:
    return int(np.prod(static_shape(var)))


def _blockable(var: relax.Var) -> bool:
    shape = static_shape(var)
    return len(shape) == 4 and shape[1] % ATOM == 0 and shape[2] * shape[3] > 1


def plan_layouts(function: relax.Function, index: int, config: AccelConfig, fuse: bool,
                 memory: Dict[str, RunMemory]) -> Set[relax.Var]:
    """The tensors of fp32 function ``index`` kept C16 (its memory plan: ``memory``)."""
    runs: List[_Run] = []
    readers: Dict[relax.Var, List[_Run]] = {}
    for i, (binding, composite) in enumerate(composite_calls(function)):
        args = binding.value.args
        scope = dict(zip(composite.params, args))
        layer = layer_of(composite, args, function)

        def var(expr):
            resolved = scope.get(expr, expr) if expr is not None else None
            return resolved if isinstance(resolved, relax.Var) else None

        # a conv's run with its SDP, whose element-wise operand (if any) is a tensor of the
        # function (a constant one is stored NCHW)
        plain = layer.conv is not None and layer.branch is None and not layer.copies and \
            layer.pool is None and layer.lrn is None and \
            (not layer.sdp.ew_op or var(layer.sdp.operand) is not None)
        native = False
        if plain:
            run = memory.get(run_key(index, i), RunMemory())
            modes = emitted_conv_modes(layer, config, fuse, "fp32", run)
            native = c16_native(config, layer.engine_ops(fuse, "fp32", modes=modes),
                                layer.in_shape, mode="fused" if layer.fused(fuse) else
                                "independent")
        run = _Run(layer, var(layer.data), var(layer.sdp.operand) if layer.sdp.ew_op else None,
                   binding.var, native)
        runs.append(run)
        for arg in args:
            if isinstance(arg, relax.Var):
                readers.setdefault(arg, []).append(run)
    outputs = function.body.body
    outputs = set(outputs.fields) if isinstance(outputs, relax.Tuple) else {outputs}

    def eligible(run: _Run, tensor: relax.Var) -> bool:
        return run.native and tensor in (run.data, run.operand)

    blocked = {r.output for r in runs
               if r.native and r.output not in outputs and _blockable(r.output) and
               all(eligible(reader, r.output) for reader in readers.get(r.output, []))}
    changed = True
    while changed:  # an operand and its run's output: C16 together or not at all
        changed = False
        for r in runs:
            if r.operand is not None and (r.operand in blocked) != (r.output in blocked):
                blocked.discard(r.operand)
                blocked.discard(r.output)
                changed = True
    return _paying(runs, blocked)


def _paying(runs: List[_Run], blocked: Set[relax.Var]) -> Set[relax.Var]:
    """The groups of C16 tensors whose runs' convolutions outweigh their edges' conversions."""
    groups: Dict[relax.Var, relax.Var] = {t: t for t in blocked}  # union-find

    def root(t):
        while groups[t] is not t:
            groups[t] = groups[groups[t]]
            t = groups[t]
        return t

    for r in runs:
        touched = [t for t in r.tensors() if t in blocked]
        for t in touched[1:]:
            groups[root(t)] = root(touched[0])
    flops: Dict[relax.Var, int] = {}
    converted: Dict[relax.Var, int] = {}
    for r in runs:
        touched = [t for t in r.tensors() if t in blocked]
        if not touched:
            continue
        group = root(touched[0])
        if len(touched) == len(r.tensors()):  # all C16: its C16 kernel runs it
            flops[group] = flops.get(group, 0) + r.flops()
        else:  # converted around: every C16 tensor it touches makes a pass
            converted[group] = converted.get(group, 0) + 4 * sum(_elements(t) for t in touched)
    keep = {g for g in flops if flops[g] >= FLOPS_PER_CONVERTED_BYTE * converted.get(g, 0)}
    return {t for t in blocked if root(t) in keep}
