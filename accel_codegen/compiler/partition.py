"""Partitioning: which ops of a Relax module run on the accelerator, and why the rest do not.

``partition_for_accel`` matches the pattern table, merges neighbouring composites into one
external function per region, records the partition report, then runs the code generator at
once: RunCodegen turns every region into an opaque external call, which is what keeps batch
norm whole (LegalizeOps and DecomposeOpsForInference rewrite ops inside partitioned functions
too, so nothing may run between partitioning and codegen).
"""
from __future__ import annotations

import collections
import dataclasses
import json
from typing import Dict, List, Optional, Tuple

import numpy as np
import tvm
from tvm import relax

from ..errors import AccelInvalidError, AccelUnsupportedError
from ..quantization import DEFAULT_METHOD, Calibration, calibrate, equalization
from ..sim.config import AccelConfig, check_precision
from ..tables import Column, render_table
from . import codegen, frontend
from .lowering import explain
from .patterns import PartitionLog, pattern_table
from .rewrites import (end_at_first_item, first_item_only, flattened_global_pools,
                       fold_zero_padding, silu_from_sigmoid, split_into_slices)
from .vm import virtual_machine
from .walk import composite_calls, layer_of

REPORT_ATTR = "accel_partition_report"
CALIBRATION_ATTR = "accel_calibration"
QUANTIZATION_ATTR = "accel_quantization"


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
            lines += [f"{count:>6} x {reason}" for reason, count in self.host_reasons()]
            lines.append("")
        columns = [Column("#", 4), Column("operator", 28, "<", gap="  "),
                   Column("shape", 20, "<"), Column("where", 9, "<"),
                   Column("primitive / reason", 0, "<")]
        rows = [[op.index, op.op, "x".join(map(str, op.shape)),
                 "accel" if op.offloaded else "host",
                 (op.primitive + (f" ({op.conv_mode})" if op.conv_mode == "winograd" else "")
                  if op.offloaded else op.reason)] for op in self.ops]
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


def _conv_modes(composite: relax.Function, config: AccelConfig, fuse: bool, precision: str,
                winograd: bool) -> Optional[str]:
    """The CONV modes a composite's runs use ("direct", "winograd", "direct+winograd"), as the
    code generator chooses them; None without a convolution."""
    layer = layer_of(composite)
    layers = [layer] + ([layer.branch] if layer.branch is not None else [])
    modes = sorted({lay.conv_modes(config, fuse, precision, winograd).get("mode", "direct")
                    for lay in layers if lay.conv is not None})
    return "+".join(modes) or None


def _build_report(mod: tvm.IRModule, config: AccelConfig, fuse: bool,
                  log: PartitionLog, precision: str, winograd: bool = True) -> PartitionReport:
    ops: List[OpRecord] = []
    layers = 0
    external = {gv: f for gv, f in mod.functions_items()
                if isinstance(f, relax.Function) and f.attrs and "Codegen" in f.attrs}
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if not isinstance(value, relax.Call):
                continue
            if isinstance(value.op, tvm.ir.GlobalVar) and value.op in external:
                function = external[value.op]
                symbol = str(function.attrs["global_symbol"])
                for _, composite in composite_calls(function):
                    primitive = str(composite.attrs["Composite"])
                    conv_mode = _conv_modes(composite, config, fuse, precision, winograd)
                    for cblock in composite.body.blocks:
                        for cb in cblock.bindings:
                            name = _call_name(cb.value) if isinstance(cb.value, relax.Call) \
                                else None
                            if name:
                                ops.append(OpRecord(len(ops), name, _shape_of(cb.var), True,
                                                    primitive, symbol, layers,
                                                    conv_mode=conv_mode))
                    layers += 1
                continue
            name = _call_name(value)
            if name is None:
                continue
            refusal = log.refusals.get(binding.var)
            own = explain(value, config, precision)
            # A refusal names the failing stage of a chain the op was part of; the op's own
            # reason is better when it has no primitive at all.
            if refusal and not own.startswith("no accelerator primitive"):
                reason = refusal[1]
            else:
                reason = own
            ops.append(OpRecord(len(ops), name, _shape_of(binding.var), False, reason=reason))
    return PartitionReport(config.name, fuse, ops, precision)


def is_partitioned(mod: tvm.IRModule) -> bool:
    return mod.attrs is not None and REPORT_ATTR in mod.attrs


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
    mod = frontend.bind_params(mod, params) if params else mod
    for rewrite in (fold_zero_padding, silu_from_sigmoid, split_into_slices,
                    flattened_global_pools):
        mod = rewrite(mod)
    mod = tvm.transform.Sequential([relax.transform.CanonicalizeBindings(),
                                    relax.transform.DeadCodeElimination()])(mod)
    table = pattern_table(config, fuse, log, precision, first_item_only(mod["main"]))
    mod = end_at_first_item(relax.transform.FuseOpsByPattern(
        table, bind_constants=True, annotate_codegen=False)(mod))
    return tvm.transform.Sequential([
        relax.transform.CanonicalizeBindings(),
        relax.transform.MergeCompositeFunctions(),
    ])(mod)


def generate_partition(mod: tvm.IRModule, params, config: AccelConfig, fuse: bool,
                       chains_for: str, code: str,
                       calibration: Optional[Calibration], winograd: bool = True) -> tvm.IRModule:
    """Match the chains that the accelerator runs in precision ``chains_for``, then generate
    code of precision ``code`` for them: the fp32 code of an int8 or fp16 partition is what
    calibration and the accuracy report compare against (the same runs, op for op)."""
    log = PartitionLog()
    mod = match_composites(mod, params, config=config, fuse=fuse, log=log, precision=chains_for)
    report = _build_report(mod, config, fuse, log, code, winograd)
    options = {"config": config.to_json(), "fuse": fuse, "precision": code, "winograd": winograd}
    if calibration is not None:
        options["calibration"] = calibration.to_json()
    with codegen.collecting() as generated:
        mod = relax.transform.RunCodegen({"accel": options})(mod)
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
    return mod.with_attr("accel_sources", generated.sources)


def partition_for_accel(mod: tvm.IRModule, params: Optional[Dict[str, np.ndarray]] = None, *,
                        config: AccelConfig | str = "nv_full", fuse: bool = True,
                        precision: str = "fp32", calibration=None,
                        calibration_method: str = DEFAULT_METHOD,
                        winograd: bool = True, equalize: Optional[bool] = None,
                        bias_correction: bool = True) -> tvm.IRModule:
    """Offload what the accelerator runs; the rest stays on TVM's host path.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module with a ``main`` function (from ``accel_codegen.frontend`` or built by
        hand). Batch norm must be in inference form.
    params : dict of str to numpy.ndarray, optional
        Values of ``main`` parameters to bind as constants: constant weights are folded at
        compile time; parameters left unbound stay runtime inputs, folded on every call
        (fp32 only: fp16 and int8 chains need constant weights, others stay on the host).
    config : AccelConfig or str
        The hardware configuration (a preset name or a config).
    fuse : bool
        True: each primitive runs as one fused chain (CONV -> SDP -> PDP on the fly). False:
        every source op is its own accelerator op, intermediates through memory.
    precision : str
        "fp32" (the reference), "fp16" or "int8"; the configuration must have it.
    calibration : iterable of input tuples, or Calibration
        int8 only, required: example inputs of ``main`` (each a tuple of arrays, or one
        array), run through the fp32 build of the same partition to set the activation
        scales; or the :class:`~accel_codegen.quantization.Calibration` of an earlier build.
    calibration_method : str
        "mse" (default), "percentile", "max" or "entropy"; see :mod:`accel_codegen.quantization`.
    winograd : bool
        True: convolutions the configuration runs in Winograd mode (accel_conv_mode in accel.h:
        3x3 after stride folding, no groups or dilation, ACCEL_FEATURE_WINOGRAD) use it; the
        report, the profile and the estimate say which ("CONV(wg)"). False: all direct.
    equalize : bool, optional
        int8 only: cross-layer equalisation of the convolution weights before they are
        quantised (:mod:`accel_codegen.quantization.equalization`; the fp32 function is
        unchanged). False: the weights as given. Default: True with example inputs; with a
        Calibration, as it was made (``Calibration.equalized``), and asking otherwise is an
        error.
    bias_correction : bool
        int8 only: each convolution's bias takes back the mean shift that rounding its
        weights causes, from the calibration's input means (Nagel et al., 2019). False: not.

    Returns
    -------
    tvm.IRModule
        The module with external calls in place of the offloaded regions, ready for
        :func:`accel_codegen.build`; :func:`partition_report` describes it and
        :func:`calibration_of` gives an int8 module's scales.
    """
    config = AccelConfig.resolve(config)
    check_precision(config, precision)
    if precision == "int8" and not fuse:
        raise AccelUnsupportedError("int8 code is generated for fused chains (fuse=True); "
                                    "decomposed int8 can be estimated, not run")
    if precision != "int8":
        if calibration is not None:
            raise AccelInvalidError(f"calibration is for int8, not {precision}")
        return generate_partition(mod, params, config, fuse, precision, precision, None,
                                  winograd)
    if calibration is None:
        raise AccelInvalidError("int8 needs calibration: example inputs (an iterable of input "
                                "tuples) or a Calibration")
    if equalize is None:
        equalize = calibration.equalized if isinstance(calibration, Calibration) else True
    if isinstance(calibration, Calibration) and calibration.equalized != equalize:
        raise AccelInvalidError(f"the calibration was made with equalize="
                                f"{calibration.equalized}, the build asks equalize={equalize}: "
                                "its scales are for other weights")
    if equalize:
        mod = equalization.equalize(frontend.bind_params(mod, params) if params else mod)[0]
        params = None
    if not isinstance(calibration, Calibration):
        reference = generate_partition(mod, params, config, fuse, "int8", "fp32", None,
                                       winograd)
        vm = virtual_machine(tvm.compile(reference, target="llvm"))

        def run(*inputs):
            vm["main"](*(tvm.runtime.tensor(np.ascontiguousarray(x)) for x in inputs))

        calibration = calibrate(run, calibration, calibration_method)
        calibration.equalized = equalize
    calibration = dataclasses.replace(calibration, bias_correction=bias_correction)
    return generate_partition(mod, params, config, fuse, "int8", "int8", calibration,
                              winograd)


def calibration_of(mod: tvm.IRModule, used: bool = False) -> Optional[Calibration]:
    """The calibration an int8 module was generated from (None otherwise); with ``used``, the
    quantisation of every tensor its runs read and write, keyed as the observer reports
    them (a pooled output keeps its input's scale, so it differs from the calibration)."""
    attr = QUANTIZATION_ATTR if used else CALIBRATION_ATTR
    if mod.attrs is None or attr not in mod.attrs:
        return None
    return Calibration.from_json(str(mod.attrs[attr]))


def partition_report(mod: tvm.IRModule, params=None, *, config: AccelConfig | str = "nv_full",
                     fuse: bool = True, precision: str = "fp32",
                     calibration=None, winograd: bool = True) -> PartitionReport:
    """The partition report of a partitioned module (partitions an unpartitioned one first)."""
    if not is_partitioned(mod):
        mod = partition_for_accel(mod, params, config=config, fuse=fuse, precision=precision,
                                  calibration=calibration, winograd=winograd)
    return PartitionReport.from_dict(json.loads(str(mod.attrs[REPORT_ATTR])))


def generated_sources(mod: tvm.IRModule) -> Dict[str, str]:
    """The generated C source of every external function (symbol -> source), for inspection."""
    if not is_partitioned(mod):
        raise AccelInvalidError("the module is not partitioned: call partition_for_accel first")
    return {str(k): str(v) for k, v in mod.attrs["accel_sources"].items()}
