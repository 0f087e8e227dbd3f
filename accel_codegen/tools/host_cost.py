"""The counterfactual cost of every host operator: what the accelerator would spend on an
operator the partition leaves on TVM's host path if it had a primitive for it, beside the
host time it costs today, ranked, so that "what to support next" is a number.

The accelerator side is a roofline from the operator's tensor sizes and the configuration
(docs/report-schema.md states it): the tensors cross DRAM once (inputs read, output written,
at the cost model's element width: 1 byte in int8, 2 otherwise, as ``hw_element_bytes`` in
csrc/cost_model.c charges fp32 as NVDLA's fp16), and the engine that would run it works at
its configured rate:

* a matmul or convolution on the MAC array: MACs / ``macs_per_cycle(precision)``;
* an element-wise op with two tensor operands on the SDP's element-wise rate
  (``sdp_ew_throughput`` elements a cycle), one with one operand on ``sdp_throughput``;
* a reduction or pool on the PDP's (``pdp_throughput``, input elements);
* a normalisation (softmax, layer / group / RMS norm) as three SDP passes over its input;
* a data movement (transpose, concat, slice, gather, ...) on the BDMA: its bytes alone;
* a view (reshape, flatten, squeeze, expand_dims) moves nothing: no cost.

cycles = max(compute cycles, DRAM cycles); energy = DRAM bytes x ``dram_pj_per_byte`` + the
engine's energy per MAC or element. Operators of no class above are costed as one-operand
element-wise ops and say so (``assumed``).

The host side is measured: each distinct operator (op, attributes, shapes) is compiled alone
with TVM (``tvm.compile``, target llvm, as the host part of the built module is) and timed
(the median of a few runs after a warm-up). An operator that cannot be compiled alone has
no host time and its row says why.
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from ..errors import AccelError
from ..sim.config import AccelConfig
from ..tables import Column, render_table

#: Ops that only re-describe a contiguous tensor: nothing moves.
VIEWS = frozenset({"relax.reshape", "relax.flatten", "relax.squeeze", "relax.expand_dims"})
#: Ops the MAC array runs: the MACs come from the shapes.
MATMULS = frozenset({"relax.matmul", "relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv3d",
                     "relax.nn.conv2d_transpose", "relax.nn.conv1d_transpose",
                     "relax.linear", "relax.nn.dense"})
#: Element-wise ops with two tensor operands (the SDP's element-wise path).
BINARY = frozenset({"relax.add", "relax.subtract", "relax.multiply", "relax.divide",
                    "relax.maximum", "relax.minimum", "relax.power", "relax.where",
                    "relax.floor_divide", "relax.equal", "relax.greater", "relax.less",
                    "relax.greater_equal", "relax.less_equal", "relax.not_equal",
                    "relax.logical_and", "relax.logical_or", "relax.floor_mod", "relax.mod"})
#: Element-wise ops with one tensor operand (the SDP's scale / shift / LUT path).
UNARY = frozenset({"relax.nn.relu", "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.silu",
                   "relax.sigmoid", "relax.tanh", "relax.exp", "relax.log", "relax.sqrt",
                   "relax.rsqrt", "relax.erf", "relax.clip", "relax.astype", "relax.negative",
                   "relax.abs", "relax.square", "relax.nn.leakyrelu", "relax.nn.prelu",
                   "relax.round", "relax.floor", "relax.ceil", "relax.sin", "relax.cos",
                   "relax.hardswish", "relax.nn.softplus", "relax.nn.selu", "relax.nn.elu"})
#: Reductions and pools (the PDP's rate, over the input).
REDUCTIONS = frozenset({"relax.mean", "relax.sum", "relax.max", "relax.min", "relax.prod",
                        "relax.variance", "relax.argmax", "relax.argmin", "relax.std",
                        "relax.nn.max_pool2d", "relax.nn.avg_pool2d", "relax.nn.max_pool1d",
                        "relax.nn.avg_pool1d", "relax.nn.adaptive_avg_pool2d",
                        "relax.nn.adaptive_avg_pool1d", "relax.nn.max_pool3d",
                        "relax.nn.avg_pool3d", "relax.cumsum"})
#: Normalisations: three SDP passes (statistics, centre and scale, affine).
NORMS = frozenset({"relax.nn.softmax", "relax.nn.log_softmax", "relax.nn.layer_norm",
                   "relax.nn.group_norm", "relax.nn.rms_norm", "relax.nn.batch_norm",
                   "relax.nn.instance_norm"})


@dataclasses.dataclass
class HostOpCost:
    """One host operator: its counterfactual accelerator cost and its host time today."""

    index: int                 # the operator's index in the partition report
    op: str
    shape: List[int]           # its output's
    reason: str                # why it is on the host (the partition report's)
    engine: str                # the engine the roofline charges ("CONV", "SDP", "PDP", "BDMA", "-")
    kind: str                  # matmul, binary, unary, reduction, norm, movement, view, assumed
    macs: int
    elements: int              # the elements the engine processes
    dram_bytes: int
    compute_cycles: int
    dram_cycles: int
    cycles: int
    energy_pj: float
    host_ms: Optional[float] = None       # measured: the operator alone, compiled by TVM
    host_note: Optional[str] = None       # why there is no host time
    saved_ms: Optional[float] = None      # host_ms minus the accelerator's time for it

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def _shape(sinfo) -> Optional[List[int]]:
    try:
        return [int(v) for v in sinfo.shape.values]
    except (AttributeError, TypeError):
        return None


def _tensor_shapes(expr) -> List[List[int]]:
    """The static shapes of the tensors an argument holds (a tuple's fields too)."""
    from tvm import relax

    if isinstance(expr, relax.Tuple):
        return [s for field in expr.fields for s in _tensor_shapes(field)]
    ty = getattr(expr, "ty", None)
    if isinstance(ty, relax.TensorType):
        shape = _shape(ty)
        return [shape] if shape is not None else []
    if isinstance(ty, relax.TupleType):
        return [s for f in ty.fields if isinstance(f, relax.TensorType)
                for s in [_shape(f)] if s is not None]
    return []


def _size(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64)) if shape else 1


def _classify(name: str) -> tuple:
    """(kind, engine) of an op name."""
    if name in VIEWS:
        return "view", "-"
    if name in MATMULS:
        return "matmul", "CONV"
    if name in BINARY:
        return "binary", "SDP"
    if name in UNARY:
        return "unary", "SDP"
    if name in REDUCTIONS:
        return "reduction", "PDP"
    if name in NORMS:
        return "norm", "SDP"
    if name.startswith("relax.call_tir") or name.startswith("relax.call_dps_packed"):
        return "assumed", "SDP"
    if name.startswith("relax.") and name not in ("relax.match_cast",):
        movement = ("permute_dims", "concat", "split", "strided_slice", "take", "gather",
                    "scatter", "broadcast_to", "tile", "repeat", "flip", "layout_transform",
                    "dynamic_strided_slice", "one_hot", "pad", "image.resize2d",
                    "collapse_sum", "nn.pad", "index")
        if any(word in name for word in movement):
            return "movement", "BDMA"
    return "assumed", "SDP"


def _macs(name: str, inputs: List[List[int]], out: List[int]) -> int:
    """MACs of a matmul or convolution from its shapes (0 when they are not static)."""
    if not inputs or not out:
        return 0
    if name == "relax.matmul" or name in ("relax.linear", "relax.nn.dense"):
        return _size(out) * (inputs[0][-1] if inputs[0] else 1)
    if len(inputs) > 1 and len(inputs[1]) >= 3:  # conv: out elements x (C / groups x kernel)
        weight = inputs[1]
        if "transpose" in name:
            return _size(inputs[0]) * _size(weight[1:])
        return _size(out) * _size(weight[1:])
    return 0


def counterfactual(name: str, inputs: List[List[int]], out: List[int], config: AccelConfig,
                   precision: str) -> Dict[str, Any]:
    """The roofline figures of one op (see the module's docstring)."""
    kind, engine = _classify(name)
    element_bytes = 1 if precision == "int8" else 2
    in_elements = sum(_size(s) for s in inputs)
    out_elements = _size(out) if out else 0
    macs, elements, compute, energy = 0, 0, 0.0, 0.0
    if kind == "view":
        dram_bytes = 0
    else:
        dram_bytes = (in_elements + out_elements) * element_bytes
    if kind == "matmul":
        macs = _macs(name, inputs, out)
        compute = macs / config.macs_per_cycle("int8" if precision == "int8" else "fp16")
        energy = macs * (config.mac_int8_pj if precision == "int8" else config.mac_fp16_pj)
    elif kind == "binary":
        elements = out_elements
        compute = elements / config.sdp_ew_throughput
        energy = elements * config.sdp_pj_per_element
    elif kind in ("unary", "assumed"):
        elements = max(out_elements, _size(inputs[0]) if inputs else 0)
        compute = elements / config.sdp_throughput
        energy = elements * config.sdp_pj_per_element
    elif kind == "reduction":
        elements = _size(inputs[0]) if inputs else out_elements
        compute = elements / config.pdp_throughput
        energy = elements * config.pdp_pj_per_element
    elif kind == "norm":
        elements = 3 * (_size(inputs[0]) if inputs else out_elements)
        compute = elements / config.sdp_throughput
        energy = elements * config.sdp_pj_per_element
    bytes_per_cycle = config.dram_bytes_per_s / config.clock_hz
    dram_cycles = int(np.ceil(dram_bytes / bytes_per_cycle)) if dram_bytes else 0
    energy += dram_bytes * config.dram_pj_per_byte
    compute_cycles = int(np.ceil(compute))
    return {"engine": engine, "kind": kind, "macs": int(macs), "elements": int(elements),
            "dram_bytes": int(dram_bytes), "compute_cycles": compute_cycles,
            "dram_cycles": dram_cycles, "cycles": max(compute_cycles, dram_cycles),
            "energy_pj": float(energy)}


def _call_name(call) -> str:
    """An op call's name as the partition report writes it."""
    name = call.op.name
    if name in ("relax.call_tir", "relax.call_dps_packed"):
        callee = call.args[0]
        return f"{name}({getattr(callee, 'name_hint', None) or callee.global_symbol})"
    return name


def _host_calls(partitioned, external: set):
    """(binding, call, name) of every operator call of main that is not an external
    function's (``external``: their symbols), in order."""
    import tvm
    from tvm import relax

    for block in partitioned["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(binding, relax.MatchCast) or not isinstance(value, relax.Call) or \
                    not isinstance(value.op, tvm.ir.Op):
                continue
            if value.op.name == "relax.call_dps_packed" and \
                    str(getattr(value.args[0], "global_symbol", "")) in external:
                continue
            yield binding, value, _call_name(value)


def _time_alone(partitioned, call, var, repeat: int = 5) -> tuple:
    """(host ms, None) of one call compiled alone by TVM, or (None, why not)."""
    import tvm
    from tvm import relax

    try:
        free = list(relax.analysis.free_vars(call))
        params = [relax.Var(str(v.name), v.ty) for v in free]  # not dataflow vars
        mapping = dict(zip(free, params))

        def bound(arg):
            if isinstance(arg, relax.Tuple):
                return relax.Tuple([bound(field) for field in arg.fields])
            return mapping.get(arg, arg)

        builder = relax.BlockBuilder()
        with builder.function("main", params):
            out = builder.emit(relax.Call(call.op, [bound(a) for a in call.args], call.attrs,
                                          call.ty_args))
            builder.emit_func_output(out)
        mod = builder.get()
        for arg in call.args:  # a call_tir's PrimFunc travels with it
            if isinstance(arg, tvm.ir.GlobalVar):
                mod[arg] = partitioned[arg]
        exe = tvm.compile(mod, target="llvm")
        machine = relax.VirtualMachine(exe, tvm.cpu())
        rng = np.random.default_rng(0)
        args = []
        for param in params:
            sinfo = param.ty
            shape = _shape(sinfo)
            if not isinstance(sinfo, relax.TensorType) or shape is None:
                return None, "an argument that is not a static tensor"
            dtype = str(sinfo.dtype)
            value = rng.standard_normal(shape).astype(dtype) if "float" in dtype else \
                np.zeros(shape, dtype)
            args.append(tvm.runtime.tensor(value))
        machine["main"](*args)  # warm-up
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            machine["main"](*args)
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e3, None
    except Exception as error:  # pylint: disable=broad-except  (TVM's own error types)
        first = str(error).strip().splitlines()
        return None, f"not measured: {type(error).__name__}: {first[0] if first else ''}"[:120]


def host_costs(partitioned, config: AccelConfig | str = "nv_full", *, measure: bool = True,
               precision: Optional[str] = None) -> List[HostOpCost]:
    """Every host operator of a partitioned module with its counterfactual accelerator cost
    and (``measure``) its host time, most accelerator-worthy first: by the time a primitive
    would save where measured (host time minus the accelerator's), then by cycles."""
    from ..flows.pipeline import partition_report

    config = AccelConfig.resolve(config)
    report = partition_report(partitioned)
    precision = precision or ("int8" if report.precision == "mixed" else report.precision)
    host_records = [op for op in report.ops if not op.offloaded and op.op != "relax.match_cast"]
    external = {op.function for op in report.offloaded}
    calls = list(_host_calls(partitioned, external))
    names = [name for _, _, name in calls]
    if names != [op.op for op in host_records]:
        raise AccelError(f"the host operators of main ({len(names)}) are not the "
                                 f"partition report's ({len(host_records)})")
    measured: Dict[str, tuple] = {}
    result = []
    for record, (binding, call, _) in zip(host_records, calls):
        inputs = [s for arg in call.args for s in _tensor_shapes(arg)]
        out = _shape(binding.var.ty) or record.shape
        figures = counterfactual(record.op, inputs, out, config, precision)
        host_ms, note = None, None
        if measure:
            key = f"{call.op.name}{inputs}{out}{call.attrs}"
            if key not in measured:
                measured[key] = _time_alone(partitioned, call, binding.var)
            host_ms, note = measured[key]
        else:
            note = "not measured"
        saved = None if host_ms is None else host_ms - figures["cycles"] / config.clock_hz * 1e3
        result.append(HostOpCost(record.index, record.op, list(out), record.reason or "",
                                 **figures, host_ms=host_ms, host_note=note, saved_ms=saved))
    result.sort(key=lambda c: (-(c.saved_ms or 0.0), -c.cycles))
    return result


def format_host_costs(costs: Sequence[HostOpCost], config: AccelConfig) -> str:
    """The ranked table, and the sums."""
    if not costs:
        return "host operators: none (everything is offloaded)"
    shapes = ["x".join(map(str, c.shape)) for c in costs]
    op_width = max(len("operator"), *(len(c.op) for c in costs))
    columns = [Column("#", 4), Column("operator", op_width, "<"),
               Column("shape", max(len("shape"), *map(len, shapes)), "<"),
               Column("host ms", 8, spec=".3f"), Column("saved ms", 8, spec=".3f"),
               Column("engine", 6, "<"),
               Column("accel cycles", 12, spec=","), Column("accel us", 9, spec=".2f"),
               Column("DRAM KB", 8, spec=".1f"), Column("uJ", 7, spec=".2f"),
               Column("why on the host", 0, "<", gap="  ")]
    rows = [[c.index, c.op, shape, c.host_ms, c.saved_ms, c.engine, c.cycles,
             c.cycles / config.clock_hz * 1e6, c.dram_bytes / 1e3, c.energy_pj / 1e6,
             c.reason] for c, shape in zip(costs, shapes)]
    measured = [c.host_ms for c in costs if c.host_ms is not None]
    saved = [c.saved_ms for c in costs if c.saved_ms is not None]
    total = ["", "total", "", sum(measured) if measured else None,
             sum(saved) if saved else None, "",
             sum(c.cycles for c in costs), sum(c.cycles for c in costs) / config.clock_hz * 1e6,
             sum(c.dram_bytes for c in costs) / 1e3, sum(c.energy_pj for c in costs) / 1e6]
    lines = [f"host operators ranked by the time an accelerator primitive would save, with the "
             f"accelerator's cost of each ({config.name}; a roofline of the tensor sizes: "
             f"docs/report-schema.md):", render_table(columns, rows, footer=[total])]
    lines.append("host ms: the operator alone, compiled by TVM for the host (llvm) and timed "
                 "on this machine, median of 5 runs, the VM's call overhead included; saved ms: "
                 f"host ms minus the accelerator's time at {config.clock_hz / 1e9:g} GHz")
    notes = sorted({c.host_note for c in costs if c.host_note})
    lines += [f"host ms {note}" for note in notes]
    return "\n".join(lines)


HOST_COST_COLUMNS = ("index", "op", "shape", "reason", "engine", "kind", "macs", "elements",
                     "dram_bytes", "compute_cycles", "dram_cycles", "cycles", "energy_pj",
                     "host_ms", "saved_ms", "host_note")


def write_host_costs_csv(costs: Sequence[HostOpCost], path) -> Path:
    """The ranked host operators as CSV (columns :data:`HOST_COST_COLUMNS`)."""
    from .report import write_csv

    rows = [{**c.to_dict(), "shape": "x".join(map(str, c.shape))} for c in costs]
    return write_csv(rows, path, HOST_COST_COLUMNS)
