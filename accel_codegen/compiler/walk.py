"""Walking a partitioned module: main -> external functions -> composites -> layers.

A partitioned module's ``main`` calls external functions (``Codegen="accel"``), each a sequence
of composite calls (``Composite="accel.<primitive>"``), each one accelerator layer; the report,
the code generator and the estimator all walk it here, and name its runs as
:mod:`.labels` says.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import tvm
from tvm import relax

from ..sim.labels import (CONTRACT_PART, CONVERT_PART, CONVERT_PRIMITIVE, copy_part, pass_part,
                          pass_primitive, run_key, run_label)
from .layer import Layer, bound_values, chain_root
from .lowering import lower_chain


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


@dataclasses.dataclass(frozen=True)
class Run:
    """One accelerator run of a partitioned module."""

    key: str
    primitive: str
    layer: Layer
    branch: bool = False
    precision: Optional[str] = None  # mixed int8/fp16 code: the run's (its input's) precision
    converts: bool = False  # the run converts ``layer``'s output to the other precision

    @property
    def label(self) -> str:
        return run_label(self.key, self.primitive, self.branch)


def layer_of(composite: relax.Function, args: Sequence[relax.Expr] = (),
             function: Optional[relax.Function] = None) -> Layer:
    """The accelerator layer a composite function describes; given the call's ``args`` and
    the external ``function`` it is called in, whether its data is one of that function's
    inputs (``Layer.host_input``)."""
    layer = lower_chain(chain_root(composite), bound_values(composite))
    if function is not None:
        arg = dict(zip(composite.params, args)).get(layer.data)
        layer.host_input = arg is not None and any(arg.same_as(p) for p in function.params)
    return layer


def converted_outputs(function: relax.Function, precisions: Sequence[str]) -> List[bool]:
    """Mixed int8/fp16 code: per layer of ``function`` (``precisions`` gives each layer's),
    whether a later layer reads its output in the other precision, so that a converting run
    follows it (once, however many such readers there are)."""
    converted = [False] * len(precisions)
    for index, sources in enumerate(layer_sources(function)):
        for source in sources:
            if precisions[source] != precisions[index]:
                converted[source] = True
    return converted


def layer_sources(function: relax.Function) -> List[List[int]]:
    """Per layer of ``function``, the earlier layers whose outputs it reads."""
    calls = list(composite_calls(function))
    produced: Dict[relax.Var, int] = {b.var: i for i, (b, _) in enumerate(calls)}
    return [[produced[arg] for arg in binding.value.args if arg in produced]
            for binding, _ in calls]


def layer_runs(layer: Layer) -> List[Tuple[str, Layer]]:
    """(key part, layer) of each run of a layer whose runs are not one: its copies, or the
    conv or copies of a deconvolution then its RUBIK contract (a branch's two runs read each
    other's results, which callers handle themselves)."""
    if layer.rubik is not None and not layer.contract_only:
        before = layer.before_contract()
        parts = layer_runs(before) if len(before.copies) > 1 else [("", before)]
        return parts + [(CONTRACT_PART, layer.contract())]
    if len(layer.copies) > 1:
        return [(copy_part(part), run) for part, run in enumerate(layer.runs())]
    return [("", layer)]


def runs(mod: tvm.IRModule, precisions: Optional[Mapping[str, str]] = None,
         precision: str = "fp32") -> Iterator[Run]:
    """Every accelerator run of a partitioned (or pattern-matched) module, in execution order,
    named as the generated code names it. ``precisions``: mixed int8/fp16 code, each layer's
    precision by its key (``f0.3``); the runs then carry their precision, and a converting
    run follows each layer whose output a layer of the other precision reads. ``precision``:
    the build's otherwise (a layer norm's passes depend on it)."""
    default = precision
    for function, (_, external) in enumerate(external_calls(mod)):
        calls = list(composite_calls(external))
        chosen = [precisions[run_key(function, i)] for i in range(len(calls))] \
            if precisions is not None else None
        converted = converted_outputs(external, chosen) if chosen else [False] * len(calls)
        for index, (binding, composite) in enumerate(calls):
            primitive = str(composite.attrs["Composite"])
            layer = layer_of(composite, binding.value.args, external)
            precision = chosen[index] if chosen else None
            if layer.norm is not None:  # one run per engine pass
                for part, run in enumerate(layer.runs(precision or default)):
                    yield Run(run_key(function, index, pass_part(part)),
                              pass_primitive(primitive, run.step.role) if run.step else primitive,
                              run, precision=precision)
            elif len(layer.copies) > 1 or layer.rubik is not None:
                for part, run in layer_runs(layer):
                    yield Run(run_key(function, index, part), primitive, run,
                              precision=precision)
            elif layer.branch is not None:
                yield Run(run_key(function, index, "a"), primitive, layer.branch, branch=True,
                          precision=precision)
                yield Run(run_key(function, index, "b"), primitive, layer, precision=precision)
            else:
                yield Run(run_key(function, index), primitive, layer, precision=precision)
            if converted[index]:
                yield Run(run_key(function, index, CONVERT_PART), CONVERT_PRIMITIVE, layer,
                          precision=precision, converts=True)
