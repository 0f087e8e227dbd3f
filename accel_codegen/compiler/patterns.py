"""The pattern table: which Relax op chains become one accelerator primitive.

Each entry is ``accel.<primitive>``, an annotated dataflow pattern (:mod:`.chains`) and a
check. The chains mirror what the hardware runs in one pass: CONV (or a dense layer as a 1x1
CONV), then the SDP (bias and batch norm folded into one scale/shift, an element-wise op with a
second tensor such as a residual add, an activation), then the PDP (pooling). The kind of
activation or pool is an alternation inside an entry; each combination of optional stages is
its own entry, longest first: FuseOpsByPattern gives earlier entries priority, so a conv takes
its whole epilogue. :func:`name_composites` then fills the composite names' ``{act}`` /
``{pool}`` fields with the kinds that matched (``accel.conv2d_bn_relu``).

Checks are guards that can say no, and say why: the chain's roles (``ctx.annotated_expr``) are
interpreted by :func:`accel_codegen.compiler.lowering.lower_chain` and costed by the C library,
whose validation holds the hardware limits; a refusal is recorded with its reason for the
partition report.
"""
from __future__ import annotations

import os
from typing import Dict, Iterable, List, Optional, Tuple

import tvm
from tvm import relax
from tvm.relax.backend.utils import has_leaking_intermediate_variables
from tvm.relax.dpl import is_call_tir
from tvm.relax.transform import FusionPattern, PatternCheckContext

from ..sim.config import AccelConfig
from . import chains, custom
from .layer import Bindings, Unsupported, op_name
from .lowering import lower_chain

#: Set to "1" (the test suite does) to make a check that fails unexpectedly raise instead of
#: leaving the chain on the host.
STRICT_ENV = "ACCEL_CODEGEN_STRICT"


class PartitionLog:
    """What the checks said: for every op a pattern refused, the refusal's reason."""

    def __init__(self) -> None:
        self.refusals: Dict[relax.Var, Tuple[str, str]] = {}

    def refuse(self, ctx: PatternCheckContext, pattern: str, reason: str) -> bool:
        pattern = chains.composite_name(pattern, {role: None for role in ctx.annotated_expr})
        for var in ctx.matched_bindings.keys():
            # Later (shorter) patterns overwrite: their reason is the most specific.
            self.refusals[var] = (pattern, reason)
        return False


def _make_check(name: str, config: AccelConfig, fuse: bool, precision: str, log: PartitionLog,
                batch_norm_ends: frozenset, form_parts: Dict[relax.Var, str]):
    def check(ctx: PatternCheckContext) -> bool:
        if has_leaking_intermediate_variables(ctx):
            return log.refuse(ctx, name, "an intermediate result is also used outside the chain")
        whole = form_parts.get(ctx.value_to_bound_var.get(ctx.matched_expr))
        if whole is not None and whole not in ctx.annotated_expr:
            # a part alone matches first, at its own op (a mish's softplus or tanh, a
            # softsign's add of 1), or as another entry (the mish's product of two tensors)
            return log.refuse(ctx, name, f"a part of a {whole.split(':')[1]}, which its "
                                         "pattern takes whole")
        try:
            layer = lower_chain(ctx.matched_expr, Bindings(ctx.matched_bindings),
                                dict(ctx.annotated_expr))
            layer.check_hardware(config, fuse, precision)
        except Unsupported as reason:
            return log.refuse(ctx, name, str(reason))
        except Exception as error:  # pylint: disable=broad-except
            # A chain this compiler cannot read stays on the host: never a wrong answer. Under
            # test (STRICT_ENV=1) it is a bug to fix, not a quiet fallback.
            if os.environ.get(STRICT_ENV) == "1":
                raise
            return log.refuse(ctx, name, f"not understood by the accelerator compiler "
                                         f"({type(error).__name__}: {error})")
        root = ctx.matched_expr
        if op_name(root) == "relax.nn.batch_norm" and (
                root not in ctx.value_to_bound_var or
                ctx.value_to_bound_var[root] not in batch_norm_ends):
            return log.refuse(ctx, name, "batch_norm's mean and variance outputs are read too; "
                                         "the SDP gives the normalised tensor only")
        return True

    return check


def pattern_table(config: AccelConfig | str = "nv_full", fuse: bool = True,
                  log: Optional[PartitionLog] = None, precision: str = "fp32",
                  batch_norm_ends: Iterable[relax.Var] = (),
                  form_parts: Optional[Dict[relax.Var, str]] = None) -> List[FusionPattern]:
    """The FusionPatterns for a configuration, longest chains first.

    Parameters
    ----------
    config : AccelConfig or str
        The hardware the checks hold the chains against.
    fuse : bool
        Check the chain as one fused run (True) or as one independent op per source op.
    log : PartitionLog, optional
        Receives the reason of every refusal.
    precision : str
        The precision the chains will run in ("fp32", "fp16", "int8").
    batch_norm_ends : iterable of relax.Var
        The batch norms a chain may end at: those read through their first output only
        (:func:`~accel_codegen.compiler.rewrites.first_item_only`). The composite then ends at
        that output (:func:`~accel_codegen.compiler.rewrites.end_at_first_item`).
    form_parts : dict of relax.Var to str
        The ops of forms several ops spell, a mish or a softsign, each with the role of the
        pattern that takes the whole (:func:`~accel_codegen.compiler.rewrites.form_parts`):
        only such a chain ends at them.
    """
    config = AccelConfig.resolve(config)
    log = log if log is not None else PartitionLog()
    entries = chains.entries(tuple(
        chains.Entry(f"accel.custom.{p.name}", is_call_tir(p.primfunc), {}, 1)
        for p in custom.registered().values()))
    ends, parts = frozenset(batch_norm_ends), dict(form_parts or {})
    return [FusionPattern(e.name, e.pattern, e.annotations,
                          _make_check(e.name, config, fuse, precision, log, ends, parts))
            for e in entries]


def name_composites(mod: tvm.IRModule) -> tvm.IRModule:
    """Fill the ``{act}``, ``{pool}``, ... fields of the composite functions' names with the
    kinds their match has (``accel.conv2d_bn_{act}`` -> ``accel.conv2d_bn_relu``): the entry
    is matched again on the composite's body, as TVM's code generators do."""
    templates = chains.templates()
    updates = {}
    for gv, function in mod.functions_items():
        name = str(function.attrs["Composite"]) if isinstance(function, relax.Function) and \
            function.attrs is not None and "Composite" in function.attrs else ""
        if name not in templates:
            continue
        bindings = Bindings.of(function)
        root = bindings.get(function.body.body, function.body.body)
        filled = name
        for entry in templates[name]:  # the one of that name whose form matched
            match = entry.pattern.extract_matched_expr(root, bindings)
            if match is not None:
                filled = chains.composite_name(name, chains.roles_of(entry, match))
                break
        if "{" in filled and os.environ.get(STRICT_ENV) == "1":  # the entry matched before
            raise RuntimeError(f"composite {gv.name_hint}: {name} does not match it again")
        updates[gv] = function.with_attr("Composite", filled)
    for gv, function in updates.items():
        mod[gv] = function
    return mod
