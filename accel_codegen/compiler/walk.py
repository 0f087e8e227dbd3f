"""Walking a partitioned module: main -> external functions -> composites -> layers.

A partitioned module's ``main`` calls external functions (``Codegen="accel"``), each a sequence
of composite calls (``Composite="accel.<primitive>"``), each one accelerator layer; the report,
the code generator and the estimator all walk it here, and name its runs as
:mod:`.labels` says.
"""
from __future__ import annotations

import dataclasses
from typing import Iterator, Optional, Sequence, Tuple

import tvm
from tvm import relax

from ..sim.labels import copy_part, run_key, run_label
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


def runs(mod: tvm.IRModule) -> Iterator[Run]:
    """Every accelerator run of a partitioned (or pattern-matched) module, in execution order,
    named as the generated code names it."""
    for function, (_, external) in enumerate(external_calls(mod)):
        for index, (binding, composite) in enumerate(composite_calls(external)):
            primitive = str(composite.attrs["Composite"])
            layer = layer_of(composite, binding.value.args, external)
            if len(layer.copies) > 1:
                for part, run in enumerate(layer.runs()):
                    yield Run(run_key(function, index, copy_part(part)), primitive, run)
            elif layer.branch is not None:
                yield Run(run_key(function, index, "a"), primitive, layer.branch, branch=True)
                yield Run(run_key(function, index, "b"), primitive, layer)
            else:
                yield Run(run_key(function, index), primitive, layer)
