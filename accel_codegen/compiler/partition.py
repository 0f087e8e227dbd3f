"""Partitioning: which ops of a Relax module run on the accelerator, and why the rest do not.

:func:`generate` (of a :class:`~.target.Target`; :func:`generate_partition` of its parts)
matches the pattern table, merges neighbouring composites into one external function per
region, records the partition report, then runs the code generator at once: RunCodegen turns
every region into an opaque external call, which is what keeps batch norm whole (LegalizeOps
and DecomposeOpsForInference rewrite ops inside partitioned functions too, so nothing may run
between partitioning and codegen). The public ``partition_for_accel`` is a flow above the
compiler (:mod:`accel_codegen.flows.pipeline`): it calibrates or searches where the build asks
it, then calls :func:`generate`.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
from typing import Dict, List, Optional, Tuple

import numpy as np
import tvm
from tvm import relax

from ..errors import AccelInvalidError, AccelUnsupportedError
from ..quantization import Calibration, Observer, calibrate
from ..quantization.calibration import LEAST_ERROR
from ..sim.config import AccelConfig, Precision
from ..tables import Column, render_table
from . import codegen, frontend
from .attention import attention_cores, private_attention_inputs
from .constant_folding import constant_computations
from .engines import with_partition_target
from .lowering import explain
from .patterns import PartitionLog, name_composites, pattern_table
from .reasons import coded_reason, reason_code
from .recurrent import recurrent_steps
from .sensitivity import depthwise_weights
from .source_names import layer_op_names, name_call_sites, name_of
from .target import LayerPlan, Target
from .windows import WINDOW_REWRITES
from .rewrites import (EXACT_REWRITES, broadcast_weight_matmuls, causal_masks,
                       softmax_row_shifts,
                       end_at_first_item, global_means_as_convolutions,
                       pooled_convolutions, varying_divisor_averages,
                       first_item_only, form_parts,
                       flattened_global_pools, fold_zero_padding, gelu_from_erf, identity_reshapes,
                       hide_match_casts, layer_norm_from_formula, restore_match_casts,
                       rms_norm_from_formula,
                       shared_constant_reshapes, silu_from_sigmoid, split_into_slices,
                       static_shapes)
from .vm import virtual_machine
from ..sim.labels import layer_key, run_key
from .walk import composite_calls, external_calls

REPORT_ATTR = "accel_partition_report"
CALIBRATION_ATTR = "accel_calibration"
QUANTIZATION_ATTR = "accel_quantization"
PROGRAM_ATTR = "accel_program"
# A match_cast that the partition could not drop (its value's type is less specific than the
# target): a check of the shape at run time, which only the host does.
MATCH_CAST_REASON = "a run-time shape check (match_cast) runs on the host"


@dataclasses.dataclass
class OpRecord:
    """One operator of the model and where it runs."""

    index: int
    op: str
    shape: List[int]
    offloaded: bool
    primitive: Optional[str] = None  # the accelerator primitive it is part of
    function: Optional[str] = None   # the external function that runs it
    layer: Optional[int] = None      # the accelerator run (layer) it is part of
    reason: Optional[str] = None     # why it stayed on the host
    conv_mode: Optional[str] = None  # its layer's CONV mode(s): "direct", "winograd"
    precision: Optional[str] = None  # mixed: its layer's precision ("int8" or "fp16")
    key: Optional[str] = None        # its layer's key (``f0.3``, as run labels start)
    source: Optional[str] = None     # the source model's name of it (compiler/source_names.py)
    code: Optional[str] = None       # the stable code of its reason (compiler/reasons.py)
    #: why its layer runs in fp16 in int8 or mixed code whatever the assignment (a norm,
    #: softmax or attention core: engines.fp16_in_int8; in int8 code also its neighbours
    #: that program.py moves to fp16: program.Call.fp16_reason); None otherwise
    fp16_reason: Optional[str] = None

    def __post_init__(self):
        if self.reason is not None and self.code is None:
            self.code = reason_code(self.reason)


@dataclasses.dataclass
class PartitionReport:
    """Every operator of a partitioned model: offloaded as which primitive, or why not."""

    config: str
    fuse: bool
    ops: List[OpRecord]
    precision: str = "fp32"

    @property
    def offloaded(self) -> List[OpRecord]:
        return [op for op in self.ops if op.offloaded]

    @property
    def host(self) -> List[OpRecord]:
        return [op for op in self.ops if not op.offloaded]

    @property
    def functions(self) -> Dict[str, List[str]]:
        """External function -> its primitives, in execution order (one entry per layer)."""
        result: Dict[str, List[str]] = {}
        seen = set()
        for op in self.offloaded:
            if op.layer not in seen:
                seen.add(op.layer)
                result.setdefault(op.function, []).append(op.primitive)
        return result

    def to_dict(self) -> dict:
        return {"config": self.config, "fuse": self.fuse, "precision": self.precision,
                "ops": [dataclasses.asdict(op) for op in self.ops]}

    @classmethod
    def from_dict(cls, data: dict) -> "PartitionReport":
        return cls(data["config"], data["fuse"], [OpRecord(**op) for op in data["ops"]],
                   data.get("precision", "fp32"))

    @property
    def layer_precisions(self) -> Dict[str, str]:
        """Mixed: each offloaded layer's precision by its key (``f0.3``), in order."""
        return {op.key: op.precision for op in self.offloaded if op.precision is not None}

    def fp16_layers(self) -> Dict[str, str]:
        """The layers int8 (or mixed) code runs in fp16 whatever the assignment: layer key ->
        its primitive and why (``OpRecord.fp16_reason``), in order."""
        return {op.key: f"{op.primitive}: {op.fp16_reason}" for op in self.offloaded
                if op.fp16_reason is not None}

    def host_reasons(self) -> List[Tuple[str, int]]:
        """(reason, how many host operators give it), most frequent first."""
        return collections.Counter(op.reason for op in self.host).most_common()

    def __str__(self) -> str:
        lines = [f"partition for {self.config} ({'fused' if self.fuse else 'decomposed'}, "
                 f"{self.precision}): "
                 f"{len(self.offloaded)} of {len(self.ops)} operators offloaded in "
                 f"{len(self.functions)} external function(s)"]
        if self.host:
            lines.append(f"{len(self.host)} on the host:")
            lines += [f"{count:>6} x {coded_reason(reason)}"
                      for reason, count in self.host_reasons()]
            lines.append("")
        if self.layer_precisions:
            chosen = collections.Counter(self.layer_precisions.values())
            lines.append("layers by precision: " + ", ".join(
                f"{chosen[p]} {p}" for p in ("int8", "fp16")))
        kept = self.fp16_layers()
        if kept:
            lines.append(f"{len(kept)} layer(s) in fp16 in {self.precision} code, the SDP "
                         "converting where they meet int8 layers:")
            lines += [f"{count:>6} x {why}" for why, count in
                      collections.Counter(kept.values()).most_common()]
        columns = [Column("#", 4), Column("operator", 28, "<", gap="  "),
                   Column("shape", 20, "<"), Column("where", 10, "<"),
                   Column("primitive / reason", 0, "<")]
        sources = [op.source or "" for op in self.ops]
        if any(sources):  # the source model's names (compiler/source_names.py), uncut
            columns.insert(2, Column("source", max(len("source"), *map(len, sources)), "<"))
        rows = [[op.index, op.op] + ([op.source or ""] if any(sources) else []) +
                ["x".join(map(str, op.shape)),
                 ("accel" + (f" {op.precision}" if op.precision else "")) if op.offloaded
                 else "host",
                 (op.primitive + (f" ({op.conv_mode})" if op.conv_mode == "winograd" else "")
                  if op.offloaded else coded_reason(op.reason, op.code))] for op in self.ops]
        return "\n".join(lines + [render_table(columns, rows)])


def _call_name(call: relax.Call) -> Optional[str]:
    if isinstance(call.op, tvm.ir.Op):
        if call.op.name in ("relax.call_tir", "relax.call_dps_packed"):
            callee = call.args[0]
            return f"{call.op.name}({getattr(callee, 'name_hint', None) or callee.global_symbol})"
        return call.op.name
    return None


def _shape_of(expr: relax.Expr) -> List[int]:
    """The static shape of an op's result (of its first field for a tuple, e.g. batch_norm)."""
    ty = expr.ty
    if isinstance(ty, relax.TupleType) and len(ty.fields) > 0:
        ty = ty.fields[0]
    try:
        return [int(v) for v in ty.shape.values]
    except (AttributeError, TypeError):
        return []


def _conv_modes(report: PartitionReport, conv_modes: Dict[str, str]) -> None:
    """Each offloaded op's ``conv_mode``: the CONV modes its layer's runs use ("direct",
    "winograd", "direct+winograd"; None without a convolution), as the code generator chose
    them with its memory plan (``conv_modes``: run key -> mode)."""
    by_layer: Dict[str, set] = {}
    for run, mode in conv_modes.items():
        by_layer.setdefault(layer_key(run), set()).add(mode)
    for op in report.offloaded:
        op.conv_mode = "+".join(sorted(by_layer.get(op.key, ()))) or None


def _precisions(report: PartitionReport, generated) -> None:
    """Each offloaded op's precision where its code has layers of both (mixed code, and int8
    code whose norms, softmaxes and attention cores run in fp16: ``program.py``), as the code
    generator's Program assigned them, and why a layer is fp16 whatever the assignment."""
    chosen = generated.program.get("layer_precisions") or {}
    for op in report.offloaded:
        op.precision = chosen.get(op.key, op.precision)
        op.fp16_reason = generated.fp16_reasons.get(op.key)


def _build_report(mod: tvm.IRModule, config: AccelConfig, fuse: bool,
                  log: PartitionLog, precision: str,
                  layer_precisions: Optional[Dict[str, str]] = None,
                  chains_for: Optional[str] = None) -> PartitionReport:
    """The partition report of ``mod`` matched for ``chains_for`` (default ``precision``) and
    generated in ``precision``; a host op is explained in the precision its chains were
    matched for (a mixed build's are int8's: "mixed" is no precision an engine runs)."""
    ops: List[OpRecord] = []
    layers = 0
    functions = 0
    external = {gv: f for gv, f in mod.functions_items()
                if isinstance(f, relax.Function) and f.attrs and "Codegen" in f.attrs}
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(binding, relax.MatchCast):
                ops.append(OpRecord(len(ops), "relax.match_cast", _shape_of(binding.var), False,
                                    reason=MATCH_CAST_REASON))
                continue
            if not isinstance(value, relax.Call):
                continue
            if isinstance(value.op, tvm.ir.GlobalVar) and value.op in external:
                function = external[value.op]
                symbol = str(function.attrs["global_symbol"])
                sources = layer_op_names(function)
                for index, (_, composite) in enumerate(composite_calls(function)):
                    primitive = str(composite.attrs["Composite"])
                    key = run_key(functions, index)
                    chosen = layer_precisions[key] if layer_precisions else None
                    names = iter(sources[index])
                    for cblock in composite.body.blocks:
                        for cb in cblock.bindings:
                            name = _call_name(cb.value) if isinstance(cb.value, relax.Call) \
                                else None
                            if name:
                                ops.append(OpRecord(len(ops), name, _shape_of(cb.var), True,
                                                    primitive, symbol, layers,
                                                    precision=chosen,
                                                    key=key, source=next(names, None)))
                    layers += 1
                functions += 1
                continue
            name = _call_name(value)
            if name is None:
                continue
            refusal = log.refusals.get(binding.var)
            own = explain(value, config, chains_for or precision)
            # A refusal names the failing stage of a chain the op was part of; the op's own
            # reason is better when it has no primitive at all.
            if refusal and not own.startswith("no accelerator primitive"):
                reason = refusal[1]
            else:
                reason = own
            ops.append(OpRecord(len(ops), name, _shape_of(binding.var), False, reason=reason,
                                source=name_of(value)))
    return PartitionReport(config.name, fuse, ops, precision)


def is_partitioned(mod: tvm.IRModule) -> bool:
    return mod.attrs is not None and REPORT_ATTR in mod.attrs


def _rewrite_for_matching(mod: tvm.IRModule, params) -> tvm.IRModule:
    mod = frontend.bind_params(mod, params) if params else mod
    for rewrite in (constant_computations, static_shapes, causal_masks, fold_zero_padding,
                    silu_from_sigmoid, gelu_from_erf, layer_norm_from_formula,
                    rms_norm_from_formula, split_into_slices, flattened_global_pools, broadcast_weight_matmuls,
                    identity_reshapes, softmax_row_shifts, attention_cores,
                    recurrent_steps, *EXACT_REWRITES):
        mod = rewrite(mod)
    tidy = tvm.transform.Sequential([relax.transform.CanonicalizeBindings(),
                                     relax.transform.DeadCodeElimination()])
    # the window layouts once the layout ops that attention_cores replaced are gone
    mod = tidy(mod)
    for rewrite in WINDOW_REWRITES:
        mod = rewrite(mod)
    # Once more, last: a rewrite through TVM's rewrite_call that changes a function merges
    # its equal expressions, among them the layers' transposes of one constant weight (an
    # unrolled LSTM's 20 steps of one W_hh), which a chain then cannot take (an intermediate
    # read outside it): each dense layer reads the transposed constant itself again. The
    # same merging gives two attention cores of equal projections one binding of their input
    # views, which each then binds again.
    return tidy(private_attention_inputs(shared_constant_reshapes(mod)))


def _params_digest(params) -> Optional[str]:
    """A digest of the params' names, dtypes, shapes and bytes (None without params)."""
    if not params:
        return None
    digest = hashlib.sha1()
    for name in sorted(params):
        value = params[name]
        array = np.ascontiguousarray(value.numpy() if hasattr(value, "numpy") else value)
        digest.update(f"{name}|{array.dtype}|{array.shape}|".encode())
        digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()


class _RewriteCache:
    """The rewrites before matching of the last (module, params) pair. They depend on the
    module and its params alone, not on the configuration, precision or fusion, so the
    commands of a session that partition one import for several targets (the CLI sweep, the
    accuracy report's precisions) run them once. Keyed by the module's functions themselves
    (Relax functions and the constants in them are immutable: setting a function of the
    module, or importing again, makes a new one, which misses; comparing them by structure
    instead would hash every constant's bytes, hundreds of MB in a ViT-B) and a digest of the
    params' bytes (NumPy arrays can change in place: such a change misses)."""

    def __init__(self, size: int = 1):
        self.size = size
        self.entries: "collections.OrderedDict[tuple, tvm.IRModule]" = \
            collections.OrderedDict()
        self.hits = self.misses = 0

    def __call__(self, mod: tvm.IRModule, params) -> tvm.IRModule:
        # TVM objects compare and hash by identity; the key holds them, so none is reused
        key = (tuple(sorted(((gv.name_hint, f) for gv, f in mod.functions_items()),
                            key=lambda item: item[0])),
               mod.attrs, _params_digest(params))
        result = self.entries.get(key)
        if result is not None:
            self.entries.move_to_end(key)
            self.hits += 1
        else:
            self.misses += 1
            result = _rewrite_for_matching(mod, params)
            self.entries[key] = result
            while len(self.entries) > self.size:
                self.entries.popitem(last=False)
        # a module of its own: a caller setting a function in it leaves the cached one whole
        return tvm.IRModule(result.functions, attrs=result.attrs)


#: :func:`rewritten`'s cache (one per process)
REWRITE_CACHE = _RewriteCache()


def rewritten(mod: tvm.IRModule, params=None) -> tvm.IRModule:
    """``mod`` with ``params`` bound and the rewrites before matching applied (onto what the
    engines run: ``rewrites.py``, ``attention.py``, ``windows.py``), from
    :data:`REWRITE_CACHE` when the same module and params were rewritten last."""
    return REWRITE_CACHE(mod, params)


def match_composites(mod: tvm.IRModule, params: Optional[Dict[str, np.ndarray]] = None, *,
                     config: AccelConfig | str = "nv_full", fuse: bool = True,
                     log: Optional[PartitionLog] = None, precision: str = "fp32"
                     ) -> tvm.IRModule:
    """The partitioning half of :func:`partition_for_accel`, without code generation: params
    bound, the pattern table matched, neighbouring composites merged into external functions.

    For analyses that only read the composites (``accel_codegen.estimate``). Do not lower or
    build the result: nothing keeps batch norm whole until RunCodegen has run.
    """
    if not isinstance(mod, tvm.IRModule) or "main" not in [gv.name_hint for gv in
                                                           mod.get_global_vars()]:
        raise AccelInvalidError(f"expected a tvm.IRModule with a main function, got {type(mod)}")
    if is_partitioned(mod):
        raise AccelInvalidError("the module is partitioned already")
    config = AccelConfig.resolve(config)
    # after the cache: the rewrites it keeps are for every precision
    mod = varying_divisor_averages(rewritten(mod, params), precision)
    if precision == "int8":
        mod = pooled_convolutions(global_means_as_convolutions(mod))
    table = pattern_table(config, fuse, log, precision, first_item_only(mod["main"]),
                          form_parts(mod["main"]))
    before = mod["main"]  # its calls' own source names, for the layers fusion shares
    mod = name_composites(end_at_first_item(relax.transform.FuseOpsByPattern(
        table, bind_constants=True, annotate_codegen=False)(mod)))
    # The merge cannot take match_cast bindings: they go through it as host calls.
    mod = relax.transform.CanonicalizeBindings()(hide_match_casts(mod))
    try:
        merged = relax.transform.MergeCompositeFunctions()(mod)
    except Exception as error:  # TVM's InternalError / TypeError, with no word of the cause
        raise AccelUnsupportedError(
            f"TVM's MergeCompositeFunctions failed on main{_symbolic_cause(mod['main'])}: "
            f"{str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__}"
        ) from error
    return with_partition_target(name_call_sites(restore_match_casts(merged), before),
                                 config, fuse)


def _symbolic_cause(main: relax.Function) -> str:
    """Why a merge failed, when it is the one cause known: shapes computed at run time (TVM's
    merge cannot take their symbolic dimensions)."""
    symbolic = sorted({str(v) for v in list(relax.analysis.defined_symbolic_vars(main)) +
                       list(relax.analysis.free_symbolic_vars(main))})
    if not symbolic:
        return ""
    return (f", whose shapes are computed at run time (symbolic dimensions "
            f"{', '.join(symbolic[:5])}): the accelerator's partition needs static shapes "
            f"(accel_codegen.frontend.from_onnx folds an ONNX graph's shape arithmetic when "
            f"its inputs have static shapes)")


def layer_keys(matched: tvm.IRModule) -> List[str]:
    """The key (``f0.3``) of every accelerator layer of a matched module, in order."""
    return [run_key(f, i) for f, (_, function) in enumerate(external_calls(matched))
            for i, _ in enumerate(composite_calls(function))]


def check_layer_precisions(matched: tvm.IRModule, layer_precisions) -> Dict[str, str]:
    """A mixed build's assignment: every layer of the partition, int8 or fp16."""
    if not isinstance(layer_precisions, dict):
        raise AccelInvalidError(f"layer_precisions must be a dict of layer key -> 'int8' or "
                                f"'fp16', got {type(layer_precisions).__name__}")
    keys = layer_keys(matched)
    missing = [k for k in keys if k not in layer_precisions]
    unknown = [k for k in layer_precisions if k not in keys]
    if missing or unknown:
        raise AccelInvalidError(
            f"layer_precisions must name every layer of the partition ({len(keys)}: "
            f"{keys[0] if keys else ''}...): missing {missing[:5]}, unknown {unknown[:5]}")
    bad = {k: v for k, v in layer_precisions.items() if v not in ("int8", "fp16")}
    if bad:
        raise AccelInvalidError(f"layer_precisions: {bad} (each layer is 'int8' or 'fp16')")
    return {k: layer_precisions[k] for k in keys}


def generate_partition(mod: tvm.IRModule, params, config: AccelConfig, fuse: bool,
                       chains_for: str, code: str,
                       calibration: Optional[Calibration], winograd: bool = True,
                       layer_precisions: Optional[Dict[str, str]] = None,
                       matched: Optional[Tuple[tvm.IRModule, PartitionLog]] = None
                       ) -> tvm.IRModule:
    """Match the chains that the accelerator runs in precision ``chains_for``, then generate
    code of precision ``code`` for them: the fp32 code of an int8 or fp16 partition is what
    calibration and the accuracy report compare against (the same runs, op for op). ``code``
    "mixed" takes each layer's precision from ``layer_precisions`` (layer key -> int8/fp16).
    ``matched``: ``mod`` matched so already, and the log of that matching (the mixed-precision
    search generates code for many assignments of one matching)."""
    if matched is None:
        log = PartitionLog()
        mod = match_composites(mod, params, config=config, fuse=fuse, log=log,
                               precision=chains_for)
    else:
        mod, log = matched
    if code == "mixed":
        layer_precisions = check_layer_precisions(mod, layer_precisions)
    report = _build_report(mod, config, fuse, log, code,
                           layer_precisions if code == "mixed" else None, chains_for)
    # the code's own Target: the partition checked its combination above
    code_target = Target(config, fuse, LayerPlan.of(layer_precisions) if code == "mixed"
                         else Precision.of(code), winograd)
    options = code_target.options()
    if calibration is not None:
        options["calibration"] = calibration.to_json()
    with codegen.collecting() as generated:
        mod = relax.transform.RunCodegen({"accel": options})(mod)
    _conv_modes(report, generated.conv_modes)
    _precisions(report, generated)
    # The constant loader gets the codegen's own constants (folded scale/shift, weights), not
    # the originals RunCodegen recorded: those would be serialised unused.
    constants = {name: tvm.runtime.tensor(value) for name, value in generated.constants.items()}
    mod = mod.without_attr("const_name_to_constant") if mod.attrs and \
        "const_name_to_constant" in mod.attrs else mod
    if constants:
        mod = mod.with_attr("const_name_to_constant", constants)
    if calibration is not None:
        mod = mod.with_attr(CALIBRATION_ATTR, calibration.to_json())
        mod = mod.with_attr(QUANTIZATION_ATTR, Calibration(
            calibration.method, calibration.samples, generated.quantization).to_json())
    mod = mod.with_attr(REPORT_ATTR, json.dumps(report.to_dict()))
    mod = mod.with_attr(PROGRAM_ATTR, json.dumps(generated.program or {
        "precision": code, "layer_precisions": None, "functions": []}))  # nothing offloaded
    return mod.with_attr("accel_sources", generated.sources)


def generate(mod: tvm.IRModule, params, target: Target,
             calibration: Optional[Calibration] = None) -> tvm.IRModule:
    """``target``'s code for the chains it runs (a per-layer plan: the int8 chains, each layer
    in its plan's precision); int8 and per-layer code need ``calibration``."""
    return generate_partition(mod, params, target.config, target.fuse, target.chains.value,
                              target.code, calibration, target.winograd,
                              target.layer_precisions)


def reference_machine(mod: tvm.IRModule, params, config: AccelConfig, fuse: bool,
                      winograd: bool = True,
                      matched: Optional[Tuple[tvm.IRModule, PartitionLog]] = None):
    """A VM of the fp32 code of the int8 partition: what calibration observes and what int8
    and mixed builds are measured against. ``matched``: ``mod`` already matched for int8, and
    the log of that matching (as :func:`generate_partition` takes it)."""
    reference = generate_partition(mod, params, config, fuse, "int8", "fp32", None, winograd,
                                   matched=matched)
    return virtual_machine(tvm.compile(reference, target="llvm"))


def calibrate_reference(mod: tvm.IRModule, params, config: AccelConfig, fuse: bool,
                        winograd: bool, examples, method: str, *, observer=None,
                        matched: Optional[tvm.IRModule] = None,
                        log: Optional[PartitionLog] = None, vm=None, each=None,
                        verify=None):
    """The int8 calibration of example inputs, one definition for every flow that calibrates
    (an int8 build, the mixed-precision search, a mixed build given its layers' precisions, a
    QDQ model's tensors without a scale): the fp32 code of the int8 partition
    (:func:`reference_machine`, or ``vm``) runs each example while ``observer`` (an
    :class:`~accel_codegen.quantization.calibration.Observer` by default) gathers every
    tensor's statistics; under ``mse`` (and ``mse_positions``) a tensor a depthwise convolution
    alone reads has its error weighed by the convolution's channels (:mod:`.sensitivity`;
    ``matched``: the int8 matching of ``mod``, made here when not given; the reference
    machine's partition reuses it when made here or given with the ``log`` of that matching). ``each(vm, example)`` runs one
    example (``run_main`` by default: a caller keeping the reference outputs records them
    there), once per example whatever the method. ``verify``: :func:`calibrate`'s (a
    second pass's check in a real int8 build).
    Returns (the Calibration, the reference VM)."""
    if matched is None and (method in LEAST_ERROR or vm is None):
        log = PartitionLog()
        matched = match_composites(mod, params, config=config, fuse=fuse, log=log,
                                   precision="int8")
    if method in LEAST_ERROR:
        observer = observer if observer is not None else Observer()
        observer.channel_weights = depthwise_weights(matched, fuse)
    if vm is None:
        vm = reference_machine(mod, params, config, fuse, winograd,
                               matched=(matched, log) if log is not None else None)
    each = each if each is not None else run_main
    # mse_positions runs the examples twice: the second pass through run_main, so that a
    # caller's ``each`` (the mixed-precision search keeps the outputs) sees each example once
    calibration = calibrate(lambda *inputs: each(vm, inputs), examples, method, observer,
                            rerun=lambda *inputs: run_main(vm, inputs), verify=verify)
    return calibration, vm


def run_main(vm, inputs) -> np.ndarray:
    """``vm["main"]`` on one example (a tuple of arrays); its output as a NumPy array."""
    result = vm["main"](*(tvm.runtime.tensor(np.ascontiguousarray(x)) for x in inputs))
    return result.numpy() if hasattr(result, "numpy") else np.asarray(result)


def calibration_of(mod: tvm.IRModule, used: bool = False) -> Optional[Calibration]:
    """The calibration an int8 module was generated from (None otherwise); with ``used``, the
    quantisation of every tensor its runs read and write, keyed as the observer reports
    them (a pooled output keeps its input's scale, so it differs from the calibration)."""
    attr = QUANTIZATION_ATTR if used else CALIBRATION_ATTR
    if mod.attrs is None or attr not in mod.attrs:
        return None
    return Calibration.from_json(str(mod.attrs[attr]))


def program_of(mod: tvm.IRModule) -> Dict[str, object]:
    """The accelerator program a partitioned module's code was generated from, as JSON data
    (:meth:`.program.Program.to_dict`): every run in execution order with its key and label,
    precision, shapes, the tensors it reads and writes, and what the planning passes chose
    (conv modes, SRAM placement, the CONV's CBUF split, weight format and mode, layouts)."""
    if not is_partitioned(mod):
        raise AccelInvalidError("the module is not partitioned: call partition_for_accel first")
    return json.loads(str(mod.attrs[PROGRAM_ATTR]))


def generated_sources(mod: tvm.IRModule) -> Dict[str, str]:
    """The generated C source of every external function (symbol -> source), for inspection."""
    if not is_partitioned(mod):
        raise AccelInvalidError("the module is not partitioned: call partition_for_accel first")
    return {str(k): str(v) for k, v in mod.attrs["accel_sources"].items()}
