"""The accelerator program of a partitioned module: Program -> Function -> Run, built once after
matching (:func:`lower_module`, or :func:`lower_functions` for the functions RunCodegen hands
the code generator) and read by every step after it.

A partitioned module's ``main`` calls external functions (``Codegen="accel"``), each a
sequence of composite calls (``Composite="accel.<primitive>"``), each one accelerator layer.
Lowering walks them once: each composite's chain is read as a :class:`~.layer.Layer`, and each
layer gives its runs, named as :mod:`accel_codegen.sim.labels` says (a concat one per copy, a
layer with a downsample branch the branch's run then its own, a deconvolution its conv or
copies then its RUBIK contract, a layer norm one per engine pass, in mixed int8/fp16 code a
converting run after a layer whose output a layer of the other precision reads: this is the
one place that inserts converting runs; int8 code runs its norms, softmaxes and attention
cores in fp16, ``engines.fp16_in_int8``, the copies of their results until an int8 layer
reads them, the layers around a reciprocal that compute its divisor or multiply by it
(``_fp16_divisors``), and where the build's configuration computes fp16 the adds of a sum
over ranges of one tensor (``_fp16_range_sums``), which makes it the mixed code of that
assignment).
A :class:`Run` knows its key and label, primitive, layer, precision, the function-level
tensors it reads and writes, whether the memory plan places it, and whether it converts.

The planning steps are passes over the program that set fields of its runs
(``codegen/planning.py`` runs them): each conv's modes (``codegen/memory.py``:
``choose_conv_modes``), its emitted weights, folded, halved or quantised once
(``codegen/weights.py``: ``quantize``), the memory plan and with it each conv's mode
(``plan_memory``), the fp32 layouts (``codegen/layouts.py``: ``plan_layouts``), and in int8
code each run's quantisation: the scales of what it reads and writes and its converters
(``codegen/int8_plan.py``: ``quantize_int8``, from a calibration). The costing
(:class:`~.costing.ProgramCosts`: the runs' chains lowered to C once, costed on any
configuration with the same partition, with the code generator's memory plan and mode rule),
which ``estimate``, the sweep, the timeline and the mixed-precision search read, and the code
generator, which prints the runs, read those fields.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import tvm
from tvm import relax

from ..errors import AccelInvalidError
from ..quantization import TensorQuant
from ..sim.labels import (CONTRACT_PART, CONVERT_PART, CONVERT_PRIMITIVE, RESCALE_PART,
                          copy_part, pass_part, pass_primitive, run_key, run_label)
from ..sim.ops import Conv, Sdp
from .engines import fp16_in_int8, partition_fp16_runner
from .layer import Layer, bound_values, chain_root
from .lowering import lower_chain

#: The precisions a layer of mixed code takes; a converting run goes from one to the other.
MIXED = ("int8", "fp16")


def external_calls(mod: tvm.IRModule) -> Iterator[Tuple[relax.VarBinding, relax.Function]]:
    """(binding in main, external function) of every call of an offloaded function, in order."""
    external = {gv: f for gv, f in mod.functions_items()
                if isinstance(f, relax.Function) and f.attrs and "Codegen" in f.attrs}
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar) and \
                    value.op in external:
                yield binding, external[value.op]


def composite_calls(function: relax.Function
                    ) -> Iterator[Tuple[relax.VarBinding, relax.Function]]:
    """(binding, composite function) of every layer of an external function, in order."""
    lookup = bound_values(function)
    for block in function.body.blocks:
        for binding in block.bindings:
            value = binding.value
            composite = lookup(value.op) if isinstance(value, relax.Call) and \
                isinstance(value.op, relax.Var) else None
            if isinstance(composite, relax.Function):
                yield binding, composite


def layer_of(composite: relax.Function, args: Sequence[relax.Expr] = (),
             function: Optional[relax.Function] = None) -> Layer:
    """The accelerator layer a composite function describes; given the call's ``args`` and
    the external ``function`` it is called in, whether its data is one of that function's
    inputs (``Layer.host_input``)."""
    name = composite.attrs["Composite"] if composite.attrs is not None and \
        "Composite" in composite.attrs else None
    layer = lower_chain(chain_root(composite), bound_values(composite),
                        name=None if name is None else str(name))
    if function is not None:
        arg = dict(zip(composite.params, args)).get(layer.data)
        layer.host_input = arg is not None and any(arg.same_as(p) for p in function.params)
    return layer


def function_outputs(function: relax.Function) -> List[relax.Expr]:
    """The values ``function`` returns: its result tuple's fields, or its one result."""
    result = function.body.body
    return list(result.fields) if isinstance(result, relax.Tuple) else [result]


def leaves_only(function: relax.Function) -> List[bool]:
    """Per layer of ``function``, whether its output is one of the function's outputs that
    no layer of the function reads (``Layer.leaves_function``)."""
    outputs = function_outputs(function)
    read = {s for sources in layer_sources(function) for s in sources}
    return [i not in read and any(binding.var.same_as(o) for o in outputs)
            for i, (binding, _) in enumerate(composite_calls(function))]


def layer_sources(function: relax.Function) -> List[List[int]]:
    """Per layer of ``function``, the earlier layers whose outputs it reads."""
    calls = list(composite_calls(function))
    produced: Dict[relax.Var, int] = {b.var: i for i, (b, _) in enumerate(calls)}
    return [[produced[arg] for arg in binding.value.args if arg in produced]
            for binding, _ in calls]


def layer_runs(layer: Layer, precision: str = "fp32") -> List[Tuple[str, Layer]]:
    """(key part, layer) of each run of a layer whose runs are not one: its copies (in int8,
    then the rescale of a concat along a later axis), or the conv or copies of a
    deconvolution then its RUBIK contract (a branch's two runs read each other's results,
    which callers handle themselves)."""
    if layer.rubik is not None and not layer.contract_only:
        before = layer.before_contract()
        parts = layer_runs(before, precision) if len(before.copies) > 1 else [("", before)]
        return parts + [(CONTRACT_PART, layer.contract())]
    if len(layer.copies) > 1:
        return [(copy_part(part) if run.copies else RESCALE_PART, run)
                for part, run in enumerate(layer.runs(precision))]
    return [("", layer)]


def _after_scratch(layer: Layer) -> bool:
    """Whether a run reads the scratch its layer's earlier runs wrote (a RUBIK contract, an
    int8 concat's rescale) rather than a tensor of the function."""
    return layer.contract_only or (layer.requantize and not layer.copies)


def converted_outputs(function: relax.Function, precisions: Sequence[str]) -> List[bool]:
    """Mixed int8/fp16 code: per layer of ``function`` (``precisions`` gives each layer's),
    whether a later layer reads its output in the other precision, so that a converting run
    follows it (once, however many such readers there are)."""
    return _converted(layer_sources(function), precisions)


def _converted(sources: Sequence[Sequence[int]], precisions: Sequence[str]) -> List[bool]:
    """Per layer, whether a layer of the other precision reads its output (``sources``: per
    layer, the layers it reads)."""
    converted = [False] * len(precisions)
    for reader, read in enumerate(sources):
        for source in read:
            converted[source] |= precisions[source] != precisions[reader]
    return converted


@dataclasses.dataclass(frozen=True)
class ConvChoice:
    """What the CONV descriptor of a run records about memory."""

    data_banks: int
    weight_banks: int
    weight_format: str = "dense"
    weights_nonzero: int = 0
    mode: str = "direct"  # the CONV's mode ("winograd": chosen with this plan)


@dataclasses.dataclass(frozen=True)
class RunMemory:
    """The memory choices of one run: its streams in SRAM and its conv's choice."""

    sram: Tuple[str, ...] = ()  # among "input", "operand", "output", "weights"
    conv: Optional[ConvChoice] = None

    def apply(self, ops: Sequence) -> list:
        """The run's engine ops (sim descriptors) with these choices set."""
        ops = [dataclasses.replace(op) for op in ops]
        if "input" in self.sram:
            ops[0].sram = (*ops[0].sram, "input")
        if "weights" in self.sram:
            ops[0].sram = (*ops[0].sram, "weights")
        if "output" in self.sram:
            ops[-1].sram = (*ops[-1].sram, "output")
        if "operand" in self.sram:
            for op in ops:
                if isinstance(op, Sdp) and op.ew_op is not None:
                    op.sram = (*op.sram, "operand")
        if self.conv is not None and isinstance(ops[0], Conv):
            # The CBUF split stays 0 / 0: the library's policy, which is what the code
            # generator asked it for on this configuration (and gives a sweep's other CBUFs
            # their own).
            ops[0] = dataclasses.replace(ops[0], weight_format=self.conv.weight_format,
                                         weights_nonzero=self.conv.weights_nonzero,
                                         mode=self.conv.mode)
        return ops


def _quant_dict(quant: Optional[TensorQuant]) -> Optional[dict]:
    return None if quant is None else {"scale": float(quant.scale), "zero": int(quant.zero)}


@dataclasses.dataclass(frozen=True, eq=False)
class RunQuant:
    """The int8 quantisation of one run (``codegen/int8_plan.py``: ``quantize_int8``): the
    scale and zero point of its data (``input``; None: an int8 concat's rescale, whose
    scratch holds each input's, or an SDP reading a concat whose channels keep their inputs'
    (a ChannelQuant: its zero points in the bias, its scales in the multipliers)), its
    element-wise operand's and its output's; ``tensors``:
    every tensor it reads or writes by the observer's op index (``sim.observer``: INPUT, an
    op's output, an operand), as the calibration keys them; ``converters``: its SDP's integer
    converters (``codegen/int8.py``: Converters; None: a run that moves codes)."""

    input: Optional[TensorQuant]
    output: Optional[TensorQuant]
    operand: Optional[TensorQuant] = None
    tensors: Mapping[int, TensorQuant] = dataclasses.field(default_factory=dict)
    converters: Optional[object] = None

    def to_dict(self) -> dict:
        return {"input": _quant_dict(self.input), "output": _quant_dict(self.output),
                "operand": _quant_dict(self.operand),
                "converters": self.converters.to_dict() if self.converters is not None
                else None}


@dataclasses.dataclass(eq=False)
class Run:
    """One accelerator run of a program.

    ``data`` and ``operand``: the tensors its layer's data and element-wise operand name,
    resolved to the function's (None where a constant); a downsample branch's output, which its
    layer's second run reads as its operand, is the composite's own. ``output``: what it writes
    (that branch output for the branch's run, else its call's result). ``reads`` and
    ``writes``: the function-level tensors the memory plan may place, by stream (a
    deconvolution's phases and a layer norm's passes are scratch of their own, in DRAM);
    ``planned``: whether the memory plan makes choices for it (not for a converting run nor a
    layer norm's passes).

    What lowering knows is fixed; the planning passes then fill in their choices (the code
    generator reads them, never re-deriving one): ``conv_modes`` and ``winograd``
    (``codegen/memory.py``: ``choose_conv_modes``), ``memory`` and with it the CONV's mode
    (``plan_memory``), ``in_layout`` / ``out_layout`` (``codegen/layouts.py``:
    ``plan_layouts``), ``weights``: the conv's constants as emitted, folded, halved or
    quantised once (``codegen/weights.py``: ``quantize``), ``quant``: in int8 code its
    quantisation and converters (``codegen/int8_plan.py``: ``quantize_int8``)."""

    key: str
    primitive: str
    layer: Layer
    branch: bool = False            # the run of a layer's downsample branch
    precision: Optional[str] = None  # its layer's (None: a program lowered without one)
    converts: bool = False          # it converts ``layer``'s output to the other precision
    function: int = 0               # its function's index, as the code generator numbers them
    call: int = 0                   # its layer's (composite call's) index in the function
    part: str = ""                  # the key's part: "", "a", "b", "c<i>", "p<i>", "q", "r", "x"
    data: Optional[relax.Var] = dataclasses.field(default=None, repr=False)
    operand: Optional[relax.Var] = dataclasses.field(default=None, repr=False)
    output: Optional[relax.Var] = dataclasses.field(default=None, repr=False)
    #: the composite's parameters -> its call's arguments
    scope: Mapping = dataclasses.field(default_factory=dict, repr=False)
    reads: Mapping[str, Optional[relax.Var]] = dataclasses.field(default_factory=dict,
                                                                 repr=False)
    writes: Optional[relax.Var] = dataclasses.field(default=None, repr=False)
    planned: bool = True
    # --- set by the planning passes
    #: its CONV's input modes (image input, multi-batch; None: no conv)
    conv_modes: Optional[dict] = dataclasses.field(default=None, repr=False)
    #: whether the configuration runs its CONV in Winograd mode (the plan then chooses)
    winograd: bool = False
    memory: RunMemory = dataclasses.field(default_factory=RunMemory, repr=False)
    in_layout: str = "nchw"         # "c16": its data is channel-blocked (fp32 only)
    out_layout: str = "nchw"        # "c16": it writes its output channel-blocked
    #: its conv's weights as emitted (``codegen/weights.py``: EmittedWeights; None: no conv)
    weights: Optional[object] = dataclasses.field(default=None, repr=False)
    #: its int8 quantisation (None: not int8 code, or not quantised yet)
    quant: Optional[RunQuant] = dataclasses.field(default=None, repr=False)

    @property
    def label(self) -> str:
        return run_label(self.key, self.primitive, self.branch)

    @property
    def modes(self) -> dict:
        """Its CONV's modes as emitted: the input modes, and the mode the memory plan chose."""
        modes = dict(self.conv_modes or {})
        if self.memory.conv is not None and self.memory.conv.mode != "direct":
            modes["mode"] = self.memory.conv.mode
        return modes

    def to_dict(self, names: Optional[Mapping] = None) -> dict:
        """The run as JSON data (``Program.to_dict``): what lowering knows and what the planning
        passes chose; ``names``: the function's tensors' names (an input's parameter name, a
        layer's output its key; None: the layer's own scratch)."""
        layer, conv, names = self.layer, self.memory.conv, names or {}
        return {
            "key": self.key, "label": self.label, "primitive": self.primitive,
            "precision": self.precision, "converts": self.converts, "branch": self.branch,
            "in_shape": list(layer.out_shape if self.converts else layer.in_shape),
            "out_shape": list(layer.out_shape),
            "reads": {stream: names.get(var) for stream, var in self.reads.items()
                      if var is not None},
            "writes": names.get(self.writes) if self.writes is not None else None,
            "modes": self.modes if self.conv_modes is not None else None,
            "winograd_allowed": self.winograd,
            "sram": list(self.memory.sram),
            "conv": dataclasses.asdict(conv) if conv is not None else None,
            "in_layout": self.in_layout, "out_layout": self.out_layout,
            "quant": self.quant.to_dict() if self.quant is not None else None,
        }


@dataclasses.dataclass(frozen=True, eq=False)
class Call:
    """One layer (composite call) of a function: its binding, composite, layer, precision and
    whether a converting run follows it."""

    binding: relax.VarBinding
    composite: relax.Function
    layer: Layer
    precision: Optional[str] = None
    converted: bool = False
    #: int8 or mixed code: why the layer runs in fp16 in every assignment (None otherwise)
    fp16_reason: Optional[str] = None

    @property
    def primitive(self) -> str:
        return str(self.composite.attrs["Composite"])


@dataclasses.dataclass(eq=False)
class Function:
    """One offloaded function: its layers and their runs, in execution order."""

    index: int
    function: relax.Function
    calls: List[Call]
    runs: List[Run]
    #: per layer, the earlier layers whose outputs it reads
    sources: List[List[int]] = dataclasses.field(default_factory=list)
    #: int8 code: the quantisation of each tensor an int8 run reads or writes (function
    #: inputs and layer outputs, a downsample branch's output; ``quantize_int8`` fills it; a
    #: concat whose channels keep their inputs' quantisations has a ChannelQuant)
    quant: Dict[relax.Var, TensorQuant] = dataclasses.field(default_factory=dict, repr=False)
    #: the layers that run on token surfaces, index -> (B, C, T): the planning pass's one
    #: decision (``codegen.passes.plan_surface_adds``), which the estimate prices and the code
    #: generator follows; None before that pass ran
    surface_adds: Optional[Dict[int, Tuple[int, int, int]]] = None

    @property
    def symbol(self) -> str:
        return str(self.function.attrs["global_symbol"])


@dataclasses.dataclass(eq=False)
class Program:
    """The runs of a partitioned module's offloaded functions (see the module's docstring).
    ``precision`` "mixed": each layer's from ``layer_precisions`` by its key (``f0.3``)."""

    functions: List[Function]
    precision: Optional[str] = None
    layer_precisions: Optional[Dict[str, str]] = None

    @property
    def runs(self) -> List[Run]:
        return [run for function in self.functions for run in function.runs]

    @property
    def mixed(self) -> bool:
        return self.precision == "mixed"

    def to_dict(self) -> dict:
        """The program as JSON data, for users and tests (``accel-codegen partition --program
        out.json``, :func:`~.partition.program_of`): per function its symbol, its inputs, its
        layers (key, primitive, precision, the layers whose outputs it reads) and its runs in
        execution order (:meth:`Run.to_dict`), each tensor named by the parameter or the layer
        key it comes from. A description of the build, not an input to one."""
        return {"precision": self.precision, "layer_precisions": self.layer_precisions,
                "functions": [_function_dict(f) for f in self.functions]}


def _function_dict(f: Function) -> dict:
    names = {param: str(param.name) for param in f.function.params}
    names.update({c.binding.var: run_key(f.index, i) for i, c in enumerate(f.calls)})
    return {"index": f.index, "symbol": f.symbol,
            "inputs": [str(param.name) for param in f.function.params],
            "layers": [{"key": run_key(f.index, i), "primitive": c.primitive,
                        "precision": c.precision, "converted": c.converted,
                        "reads": [run_key(f.index, s) for s in sources]}
                       for i, (c, sources) in enumerate(zip(f.calls, f.sources))],
            "runs": [run.to_dict(names) for run in f.runs]}


def _layer_precision(precision: Optional[str], layer_precisions, key: str,
                     layer: Layer) -> Optional[str]:
    """A layer's precision in code of ``precision``: the code's, but fp16 for a layer that int8
    code runs in fp16 (``engines.fp16_in_int8``: a norm, softmax or attention core, in int8
    code and in every mixed assignment); mixed: its own from ``layer_precisions``."""
    if precision in (*MIXED, "mixed") and fp16_in_int8(layer) is not None:
        return MIXED[1]
    if precision != "mixed":
        return precision
    chosen = (layer_precisions or {}).get(key)
    if chosen not in MIXED:
        raise AccelInvalidError(f"layer {key} has precision {chosen!r}, not one of {MIXED}")
    return chosen


def _program(functions: List["Function"], precision: Optional[str]) -> Program:
    """The Program of lowered functions: int8 code with layers in fp16 (``_layer_precision``)
    is mixed int8/fp16 code, and a mixed program's ``layer_precisions`` are its layers' own
    (the fp16 layers of every assignment included)."""
    chosen = {run_key(f.index, i): c.precision for f in functions
              for i, c in enumerate(f.calls)}
    if precision == "mixed" or (precision == MIXED[0] and
                                any(p != MIXED[0] for p in chosen.values())):
        return Program(functions, "mixed", chosen)
    return Program(functions, precision)


def _call_runs(index: int, call: int, c: Call) -> List[Run]:
    """The runs of one layer (a converting run last, where one follows it)."""
    scope = dict(zip(c.composite.params, c.binding.value.args))

    def var(expr):
        resolved = scope.get(expr, expr) if expr is not None else None
        return resolved if isinstance(resolved, relax.Var) else None

    def run(layer: Layer, part: str, output, reads: Optional[dict] = None, writes=None,
            branch: bool = False, primitive: Optional[str] = None, planned: bool = True) -> Run:
        data = var(layer.data)
        return Run(run_key(index, call, part), primitive or c.primitive, layer, branch,
                   c.precision, function=index, call=call, part=part, data=data,
                   operand=var(layer.sdp.operand), output=output, scope=scope,
                   reads={"input": data} if reads is None else reads, writes=writes,
                   planned=planned)

    layer, out = c.layer, c.binding.var
    if layer.norm is not None:  # one run per engine pass; the plan sees the dense layer's
        runs = [run(r, pass_part(p), out, {}, None, primitive=pass_primitive(
                    c.primitive, r.step.role) if r.step else None,
                    planned=p == 0 and layer.conv is not None)
                for p, r in enumerate(layer.runs(c.precision or "fp32"))]
    elif len(layer.copies) > 1 or layer.rubik is not None:
        # a deconvolution's phases, an int8 concat's rows before their rescale: scratch of
        # its own (DRAM), then the run that reads it into the output
        parts = layer_runs(layer, c.precision or "fp32")
        scratch = any(_after_scratch(r) for _, r in parts)
        runs = [run(r, part, out, {} if _after_scratch(r) else None,
                    out if not scratch or _after_scratch(r) else None)
                for part, r in parts]
    elif layer.branch is not None:
        runs = [run(layer.branch, "a", layer.sdp.operand, branch=True), run(layer, "b", out,
                                                                            writes=out)]
    else:
        runs = [run(layer, "", out, {"input": var(layer.data),
                                     "operand": var(layer.sdp.operand)}, out)]
    if c.converted:
        runs.append(Run(run_key(index, call, CONVERT_PART), CONVERT_PRIMITIVE, layer,
                        precision=c.precision, converts=True, function=index, call=call,
                        part=CONVERT_PART, data=out, output=out, scope=scope, planned=False))
    return runs


def _copies_only(call: Call, produced: Sequence[int]) -> bool:
    """Whether a layer only moves values (BDMA copies: a reshape, slice, transpose or concat)
    and reads layers' outputs alone (``produced``: the layers it reads), no function input."""
    layer = call.layer
    tensors = [a for a in call.binding.value.args if isinstance(a, relax.Var)]
    return bool(layer.copies) and layer.conv is None and layer.pool is None and \
        layer.norm is None and layer.rubik is None and layer.branch is None and \
        layer.sdp.empty() and bool(tensors) and len(produced) == len(tensors)


#: Whether the build's configuration runs a layer in fp16 (``engines.fp16_runner``): int8 code
#: then runs there the layers it would rather run in fp16 (``_fp16_range_sums``); None where
#: the lowering does not know the configuration.
Fp16Runner = Optional[Callable[[Layer], bool]]


def _readers(sources: Sequence[Sequence[int]]) -> List[List[int]]:
    """Per layer, the layers that read its output (``sources``: per layer, those it reads)."""
    readers: List[List[int]] = [[] for _ in sources]
    for reader, read in enumerate(sources):
        for source in read:
            readers[source].append(reader)
    return readers


def _fp16_copies(calls: Sequence[Call], sources: Sequence[Sequence[int]],
                 precisions: List[str]) -> List[str]:
    """int8 code's copy layers of fp16 values in fp16: each group of copy layers that read
    one another and whose other sources are all fp16 layers (a matmul of computed operands'
    products per head, concatenated before the softmax or the output projection) copies fp16
    values. In int8 each piece would be rounded to codes of its own scale, then to the
    concat's; in fp16 they are converted once, where an int8 layer reads the group."""
    readers = _readers(sources)
    movers = {i for i, c in enumerate(calls)
              if precisions[i] == MIXED[0] and _copies_only(c, sources[i])}
    seen: set = set()
    for first in sorted(movers):
        if first in seen:
            continue
        group, stack = set(), [first]
        while stack:  # the copy layers connected to ``first`` through one another
            i = stack.pop()
            if i in group:
                continue
            group.add(i)
            stack.extend(j for j in list(sources[i]) + readers[i] if j in movers)
        seen |= group
        upstream = {j for i in group for j in sources[i]} - group
        if upstream and all(precisions[j] == MIXED[1] for j in upstream):
            for i in group:
                precisions[i] = MIXED[1]
    return precisions


def _fp16_divisors(calls: Sequence[Call], sources: Sequence[Sequence[int]],
                   precisions: List[str], runs_fp16: Fp16Runner = None) -> List[str]:
    """int8 code's neighbours of a reciprocal (``1 / max(x, floor)``, which int8 runs in fp16)
    in fp16 too: the layers that multiply by it as their computed per-channel operand, and,
    back from those and from it, each layer without a CONV whose readers all run in fp16
    (SimAM's energy: its variance, the squares and the differences they are of). One
    per-tensor int8 scale keeps few digits of a divisor near 0 (a channel of small spread),
    none of the reciprocals that span 1 / 0.002 to 1 / 2, and few of the small squares such
    a divisor then amplifies; fp16 keeps them, and the int8 layer before converts once.
    A layer the build's configuration does not run in fp16 (``runs_fp16``) stays int8."""
    readers = _readers(sources)
    movable = runs_fp16 or (lambda layer: True)
    int8, fp16 = MIXED
    stack = [i for i, c in enumerate(calls) if precisions[i] == fp16 and
             c.layer.norm is not None and c.layer.norm.kind == "reciprocal"]
    for i in list(stack):
        for r in readers[i]:
            if precisions[r] == int8 and calls[r].layer.computed_scale and \
                    movable(calls[r].layer):
                precisions[r] = fp16
                stack.append(r)
    while stack:
        for j in sources[stack.pop()]:
            layer = calls[j].layer
            if precisions[j] == int8 and layer.conv is None and layer.norm is None and \
                    not layer.copies and all(precisions[r] == fp16 for r in readers[j]) and \
                    movable(layer):
                precisions[j] = fp16
                stack.append(j)
    return precisions


def _range_sum_add(layer: Layer) -> bool:
    """Whether a layer is the SDP's element-wise add of two computed tensors and nothing else."""
    sdp = layer.sdp
    return layer.conv is None and layer.pool is None and layer.norm is None and \
        not layer.copies and layer.rubik is None and layer.branch is None and \
        sdp.ew_op == "add" and isinstance(sdp.operand, relax.Var) and \
        not sdp.ew_per_channel and sdp.act is None and sdp.scale is None and \
        sdp.bias is None and sdp.batch_norm is None


def _fp16_range_sums(calls: Sequence[Call], sources: Sequence[Sequence[int]],
                     precisions: List[str], runs_fp16: Callable[[Layer], bool]) -> List[str]:
    """int8 code's sums over ranges of one tensor in fp16 where the configuration computes
    fp16 (``runs_fp16``): a tree of adds whose leaves are copies of one layer's output and
    whose inner adds only the next add reads (SKNet's sum over its stacked branches, the
    channel ranges of [N, M C, H, W]: rewrites.branch_stacks_as_channels). It is a reduction,
    as ONNX Runtime's ReduceSum, which runs in float on the dequantised terms: in int8 each
    partial sum is rounded to codes of its own scale, then the sum to the output's; in fp16
    the sum is converted once, where an int8 layer reads it (docs/onnxruntime.md, SKNet)."""
    readers = _readers(sources)
    int8, fp16 = MIXED
    origin: Dict[int, int] = {}  # add -> the layer whose ranges it sums
    for i, c in enumerate(calls):
        if precisions[i] != int8 or len(sources[i]) != 2 or not _range_sum_add(c.layer):
            continue
        roots = set()
        for j in sources[i]:
            if j in origin and readers[j] == [i]:
                roots.add(origin[j])
            elif precisions[j] == int8 and len(sources[j]) == 1 and \
                    _copies_only(calls[j], sources[j]):
                roots.add(sources[j][0])
            else:
                roots.add(None)
        if len(roots) == 1 and None not in roots:
            origin[i] = roots.pop()
    for i in origin:
        if runs_fp16(calls[i].layer):
            precisions[i] = fp16
    return precisions


def _with_precisions(function: relax.Function, index: int, calls: Sequence[Call],
                     sources: Sequence[Sequence[int]], precision: Optional[str],
                     layer_precisions: Optional[Mapping[str, str]],
                     runs_fp16: Fp16Runner = None) -> Function:
    """The function with each layer's precision (mixed: ``layer_precisions``' by its key;
    int8: fp16 for the layers int8 runs in fp16 and the copies between them, and where the
    build's configuration computes fp16 its sums over ranges of one tensor), a converting
    run after each layer whose output a layer of the other precision reads."""
    precisions = [_layer_precision(precision, layer_precisions, run_key(index, i), c.layer)
                  for i, c in enumerate(calls)]
    reasons = [fp16_in_int8(c.layer) if precision in (MIXED[0], "mixed") else None
               for c in calls]
    if precision == MIXED[0]:
        rules = [(lambda p: _fp16_copies(calls, sources, p), "it copies the values of layers "
                  "that run in fp16 (converted once, where an int8 layer reads them)"),
                 (lambda p: _fp16_divisors(calls, sources, p, runs_fp16),
                  "it computes a reciprocal's divisor or multiplies by the reciprocal, whose "
                  "range no per-tensor int8 scale keeps"),
                 (lambda p: _fp16_range_sums(calls, sources, p, runs_fp16)
                  if runs_fp16 is not None else p, "it sums ranges of one tensor (a reduction: "
                  "in int8 each partial sum would be rounded)")]
        for rule, why in rules:
            before = list(precisions)
            precisions = rule(precisions)
            reasons = [why if new != old else reason
                       for old, new, reason in zip(before, precisions, reasons)]
    converted = _converted(sources, precisions)  # none where every layer has one precision
    calls = [dataclasses.replace(c, precision=precisions[i], converted=converted[i],
                                 fp16_reason=reasons[i]) for i, c in enumerate(calls)]
    runs = [run for i, c in enumerate(calls) for run in _call_runs(index, i, c)]
    return Function(index, function, calls, runs, list(sources))


def lower_function(function: relax.Function, index: int, precision: Optional[str] = None,
                   layer_precisions: Optional[Mapping[str, str]] = None,
                   runs_fp16: Fp16Runner = None) -> Function:
    """One offloaded function's layers and runs (``index``: its number in the module)."""
    calls = [Call(binding, composite, layer_of(composite, binding.value.args, function))
             for binding, composite in composite_calls(function)]
    for call, leaves in zip(calls, leaves_only(function)):
        call.layer.leaves_function = leaves
    return _with_precisions(function, index, calls, layer_sources(function), precision,
                            layer_precisions, runs_fp16)


def assign_precisions(program: Program, layer_precisions: Mapping[str, str]) -> Program:
    """``program`` as mixed int8/fp16 code with each layer in its precision from
    ``layer_precisions`` (by layer key) and the converting runs that assignment needs; the
    layers are not lowered again (the mixed-precision search prices its candidates so)."""
    return _program([_with_precisions(f.function, f.index, f.calls, f.sources, "mixed",
                                      layer_precisions) for f in program.functions], "mixed")


def lower_functions(functions: Sequence[relax.Function], first_index: int = 0,
                    precision: Optional[str] = None,
                    layer_precisions: Optional[Mapping[str, str]] = None,
                    runs_fp16: Fp16Runner = None) -> Program:
    """The program of offloaded functions numbered from ``first_index`` (as RunCodegen hands
    them to the code generator)."""
    return _program([lower_function(f, first_index + i, precision, layer_precisions,
                                    runs_fp16) for i, f in enumerate(functions)], precision)


def lower_module(matched: tvm.IRModule, precision: Optional[str] = None,
                 layer_precisions: Optional[Mapping[str, str]] = None) -> Program:
    """The program of a partitioned (or pattern-matched) module: every run in execution order,
    named as the generated code names it; int8 code asks the configuration the partition
    marked the module with whether a layer runs in fp16 (``engines.partition_fp16_runner``)."""
    return lower_functions([f for _, f in external_calls(matched)], 0, precision,
                           layer_precisions, partition_fp16_runner(matched))
