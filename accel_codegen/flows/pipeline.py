"""The build flow: ``partition_for_accel`` and ``build``, the public entry points.

They take the build's options as keywords, settle what the options leave to calibration (int8:
the scales from a run of the fp32 reference, GPTQ's Hessians, equalisation; a QDQ model's own
scales; mixed: the per-layer search of :mod:`.mixed`), then hand a fully decided build to the
compiler (a :class:`~accel_codegen.compiler.target.Target` and
:func:`accel_codegen.compiler.partition.generate`). The compiler never calls back up here: what
needs example inputs run through a build is a flow.
"""
from __future__ import annotations

import dataclasses
import json
import warnings
from typing import Dict, Optional

import numpy as np
import tvm

from ..compiler import equalization, frontend, qdq
from ..compiler import weight_rounding as weight_rounding_pass
from ..compiler.partition import (REPORT_ATTR, PartitionReport, calibrate_reference, generate,
                                  is_partitioned, match_composites, run_main)
from ..compiler.patterns import PartitionLog
from ..compiler.program import lower_module
from ..compiler.target import MIXED, LayerPlan, Target
from ..compiler.toolchain import AccelExecutable, virtual_machine
from ..errors import AccelInvalidError, AccelUnsupportedError
from ..quantization import DEFAULT_METHOD, Calibration, examples_of
from ..quantization.calibration import SECOND_PASSES
from ..quantization.gptq import HessianObserver
from ..sim.config import AccelConfig, Precision, check_precision
from .qdq import qdq_calibration

MIXED_ATTR = "accel_mixed_precision"


def partition_for_accel(mod: tvm.IRModule, params: Optional[Dict[str, np.ndarray]] = None, *,
                        config: AccelConfig | str = "nv_full", fuse: bool = True,
                        precision: str = "fp32", calibration=None,
                        calibration_method: str = DEFAULT_METHOD,
                        winograd: bool = True, target_sqnr_db: Optional[float] = None,
                        layer_precisions: Optional[Dict[str, str]] = None,
                        equalize: Optional[bool] = None,
                        bias_correction: bool = True,
                        weight_rounding: str = "nearest",
                        keep_float=None) -> tvm.IRModule:
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
        "fp32" (the reference), "fp16" or "int8"; the configuration must have it. "mixed":
        int8 or fp16 per layer (the configuration must have both), the assignment that meets
        ``target_sqnr_db`` at the fewest cycles (docs/mixed-precision.md), or the one
        ``layer_precisions`` gives.
    calibration : iterable of input tuples, or Calibration
        int8 and mixed, required: example inputs of ``main`` (each a tuple of arrays, or one
        array), run through the fp32 build of the same partition to set the activation
        scales (and, for mixed, to measure the output SQNR); or the
        :class:`~accel_codegen.quantization.Calibration` of an earlier build (mixed: with
        ``layer_precisions`` only). A module imported from a QDQ model (``from_onnx``)
        keeps the model's scales: int8 needs no calibration, and example inputs set only
        the tensors the model leaves unquantised (:mod:`accel_codegen.compiler.qdq`).
    calibration_method : str
        "mse" (default), "percentile", "max", "entropy" or "mse_positions"; see
        :mod:`accel_codegen.quantization.calibration`.
    winograd : bool
        True: convolutions the configuration runs in Winograd mode (accel_conv_mode in accel.h:
        3x3 after stride folding, no groups or dilation, ACCEL_FEATURE_WINOGRAD) use it; the
        report, the profile and the estimate say which ("CONV(wg)"). False: all direct.
    target_sqnr_db : float
        Mixed only: the output SQNR against the fp32 build, on the calibration inputs, that
        the assignment must reach (a positive number of dB, e.g. 40).
    layer_precisions : dict of str to str
        Mixed only, instead of a target: each layer's precision by its key (``f0.3``), e.g.
        the ``layer_precisions`` of an earlier build's :func:`mixed_precision_of`.
    equalize : bool, optional
        int8 only: cross-layer equalisation of the convolution weights before they are
        quantised (:mod:`accel_codegen.compiler.equalization`; the fp32 function is
        unchanged). False: the weights as given. Default: True with example inputs; with a
        Calibration, as it was made (``Calibration.equalized``), and asking otherwise is an
        error.
    bias_correction : bool
        int8 only: each convolution's bias takes back the mean shift that rounding its
        weights causes, from the calibration's input means (Nagel et al., 2019). False: not.
    weight_rounding : str
        int8 only: "nearest" (default), or "gptq": each convolution's weights rounded by GPTQ
        on the calibration inputs (:mod:`accel_codegen.quantization.gptq`; needs example
        inputs, not a Calibration).
    keep_float : list of str, optional
        int8 only: the layers to keep out of int8, by their source-model names
        (``"layer1.0.conv1"``; a module, ``"layer4"``, for every layer under it; an ONNX node
        name; a wildcard) or keys (``"f0.3"``): they run in fp16, the others in int8 (the
        mixed build with that assignment: the configuration must have fp16;
        :mod:`accel_codegen.compiler.keep_float`).

    The keywords make a :class:`~accel_codegen.compiler.target.Target` (``Target.of`` checks
    them together); the calibration, the search and the code generator read that.

    Returns
    -------
    tvm.IRModule
        The module with external calls in place of the offloaded regions, ready for
        :func:`accel_codegen.build`; :func:`partition_report` describes it and
        :func:`calibration_of` gives an int8 module's scales.
    """
    if keep_float is not None:
        precision, layer_precisions = keep_float_assignment(
            mod, params, AccelConfig.resolve(config), fuse, precision, keep_float,
            target_sqnr_db, layer_precisions)
    if precision != MIXED and target_sqnr_db is not None:
        raise AccelInvalidError(f"target_sqnr_db and layer_precisions are for precision="
                                f"'mixed', not {precision!r}")
    target = Target.of(config, fuse=fuse, precision=precision, winograd=winograd,
                       layer_precisions=layer_precisions,
                       calibration_method=calibration_method, equalize=equalize,
                       bias_correction=bias_correction, weight_rounding=weight_rounding)
    if target.mixed:
        return _partition_mixed(mod, params, target, calibration, target_sqnr_db)
    if target.precision is Precision.INT8:
        return _partition_int8(mod, params, target, calibration)
    if calibration is not None:
        raise AccelInvalidError(f"calibration is for int8, not {target.precision}")
    return generate(mod, params, target)


def _partition_int8(mod, params, target: Target, calibration) -> tvm.IRModule:
    """precision="int8": the calibration settled (a QDQ model's own scales, or the example
    inputs run through the fp32 reference, with equalisation and GPTQ where asked), then the
    int8 code."""
    equalize, bias_correction = target.equalize, target.bias_correction
    config, fuse, winograd = target.config, target.fuse, target.winograd
    if not isinstance(calibration, Calibration) and qdq.annotations_of(mod) is not None:
        # a QDQ model's own scales (compiler/qdq.py), example inputs for the tensors it
        # gives none; equalisation would move its weights off the model's codes
        if equalize:
            raise AccelInvalidError("equalize=True would move a QDQ model's weights off its "
                                    "own int8 codes: give equalize=False or None")
        if target.weight_rounding != "nearest":
            raise AccelInvalidError("a QDQ model's weights keep their own codes: "
                                    "weight_rounding='nearest' only")
        equalize = False
        match = qdq_calibration(mod, params, config=config, fuse=fuse, winograd=winograd,
                                examples=calibration, method=target.calibration_method)
        if match.unmatched and calibration is None:
            warnings.warn(f"{len(match.unmatched)} accelerator tensors have no scale in the "
                          "QDQ model; their ranges come from one synthetic input: give "
                          "example inputs (calibration=) for them", stacklevel=3)
        calibration = match.calibration
    if isinstance(calibration, Calibration) and calibration.method == qdq.QDQ_METHOD:
        bias_correction = False  # the model's own biases, as its int8 runtime adds them
    if calibration is None:
        raise AccelInvalidError("int8 needs calibration: example inputs (an iterable of input "
                                "tuples) or a Calibration")
    if equalize is None:
        equalize = calibration.equalized if isinstance(calibration, Calibration) else True
    if isinstance(calibration, Calibration) and calibration.equalized != equalize:
        raise AccelInvalidError(f"the calibration was made with equalize="
                                f"{calibration.equalized}, the build asks equalize={equalize}: "
                                "its scales are for other weights")
    if target.weight_rounding == "gptq" and isinstance(calibration, Calibration):
        raise AccelInvalidError("weight_rounding='gptq' rounds on the calibration inputs: give "
                                "example inputs, not a Calibration (which keeps no Hessians), "
                                "or weight_rounding='nearest'")
    target = target.replace(equalize=equalize, bias_correction=bias_correction)
    if not isinstance(calibration, Calibration):
        mod, params, calibration = _calibrate_int8(mod, params, target, calibration)
    elif equalize:
        # a Calibration made on equalised weights (an earlier build's, calibration_of): its
        # scales are of the equalised weights' tensors, so the code must be generated from
        # those weights too, as the build that made it was (the same transform of the same
        # module gives the same weights); from the weights as given, each equalised channel
        # would run at a scale made for another range
        mod, params = equalized_module(mod, params)
    calibration = dataclasses.replace(calibration, bias_correction=bias_correction,
                                      weight_rounding=target.weight_rounding)
    return generate(mod, params, target, calibration)


def _calibrate_int8(mod, params, target: Target, examples):
    """The int8 calibration of example inputs: the weights equalised (``target.equalize``),
    the fp32 reference run on the examples, and with GPTQ (``target.weight_rounding``) each
    conv's Hessian gathered in the same pass and its weights rewritten to their GPTQ codes.
    Returns the module and params the int8 code is generated from, and the Calibration."""
    gptq = target.weight_rounding == "gptq"
    if target.equalize:
        mod, params = equalized_module(mod, params)
    elif gptq:
        mod, params = frontend.bind_params(mod, params) if params else mod, None
    observer = None
    matched = log = None
    if gptq:  # each conv's H = X^T X, gathered in the same pass
        log = PartitionLog()  # one matching: GPTQ's, the depthwise weights' and the reference's
        matched = match_composites(mod, None, config=target.config, fuse=target.fuse, log=log,
                                   precision="int8")
        conv_program = lower_module(matched, "int8")  # GPTQ's conv runs, lowered once
        examples = examples_of(examples, "calibration")
        observer = HessianObserver(weight_rounding_pass.conv_geometries(conv_program),
                                   len(examples))
    verify = None
    if target.calibration_method in SECOND_PASSES:
        verify = _int8_runs(mod, params, target)
    calibration = calibrate_reference(mod, params, target.config, target.fuse, target.winograd,
                                      examples, target.calibration_method, observer=observer,
                                      matched=matched, log=log, verify=verify)[0]
    calibration.equalized = target.equalize
    if gptq:
        mod = weight_rounding_pass.round_weights(mod, conv_program, observer.hessians,
                                                 target.bias_correction)[0]
    return mod, params, calibration


def _int8_runs(mod, params, target: Target):
    """What checks a second calibration pass in a real build (``verify`` of
    :func:`~accel_codegen.quantization.calibration.calibrate`): ``runs(calibration,
    examples)``, a Calibration's int8 code generated from ``mod`` as this build generates
    it, compiled, and run on ``examples``; one result per example. GPTQ's rounding, made
    after calibration, is left out: the check compares two sets of ranges, both with the
    weights rounded to nearest."""
    def runs(calibration: Calibration, examples) -> list:
        calibration = dataclasses.replace(calibration, equalized=target.equalize,
                                          bias_correction=target.bias_correction,
                                          weight_rounding="nearest")
        machine = virtual_machine(tvm.compile(generate(mod, params, target, calibration),
                                              target="llvm"))
        return [run_main(machine, example) for example in examples]
    return runs


def equalized_module(mod, params):
    """(mod, None): ``params`` bound and the weights cross-layer equalised
    (:mod:`accel_codegen.compiler.equalization`): the weights an int8 build with
    ``equalize=True`` quantises, whether it calibrates or is given a Calibration made so."""
    mod = frontend.bind_params(mod, params) if params else mod
    return equalization.equalize(mod)[0], None


def keep_float_assignment(mod, params, config: AccelConfig, fuse: bool, precision: str,
                          keep_float, target_sqnr_db=None, layer_precisions=None):
    """keep_float: ("mixed", the assignment that keeps the named layers in fp16 and the rest
    in int8) (:mod:`accel_codegen.compiler.keep_float`)."""
    from ..compiler.keep_float import keep_float_precisions
    from ..compiler.partition import match_composites

    if precision != "int8":
        raise AccelInvalidError(f"keep_float keeps layers of an int8 build in fp16; the "
                                f"precision is {precision!r}")
    if target_sqnr_db is not None or layer_precisions is not None:
        raise AccelInvalidError("keep_float chooses the layers' precisions: give it without "
                                "target_sqnr_db and layer_precisions")
    try:
        check_precision(config, "fp16")
    except AccelUnsupportedError as error:
        raise AccelUnsupportedError(f"keep_float runs the kept layers in fp16: {error}") \
            from None
    matched = match_composites(mod, params, config=config, fuse=fuse, precision="int8")
    return "mixed", keep_float_precisions(matched, keep_float)


def _partition_mixed(mod, params, target: Target, calibration, target_sqnr_db) -> tvm.IRModule:
    """precision="mixed": the int8 partition (every layer it offloads runs in either
    precision), each layer in the precision the search chose or the caller gave."""
    from .mixed import check_target, search_mixed_precision

    if isinstance(calibration, Calibration) and calibration.equalized:
        raise AccelInvalidError("this calibration was made with equalize=True: its scales "
                                "are for equalised weights, which a mixed build does not "
                                "use (calibrate an int8 build with equalize=False)")
    if calibration is None:
        raise AccelInvalidError("mixed precision needs calibration: example inputs (an "
                                "iterable of input tuples), or a Calibration with "
                                "layer_precisions")
    if (target_sqnr_db is None) == (not target.precision.assigned):
        raise AccelInvalidError("mixed precision needs target_sqnr_db (the output SQNR to "
                                "reach, in dB) or layer_precisions (each layer's), one of them")
    search = None
    if not target.precision.assigned:
        goal = check_target(target_sqnr_db)
        if isinstance(calibration, Calibration):
            raise AccelInvalidError("the mixed-precision search measures the output SQNR on "
                                    "the calibration inputs: give example inputs, not a "
                                    "Calibration (or give layer_precisions)")
        search = search_mixed_precision(mod, params, calibration, goal, config=target.config,
                                        winograd=target.winograd,
                                        calibration_method=target.calibration_method)
        calibration = search.calibration
        target = target.replace(precision=LayerPlan.of(search.layer_precisions))
    elif not isinstance(calibration, Calibration):
        calibration = calibrate_reference(mod, params, target.config, target.fuse,
                                          target.winograd, calibration,
                                          target.calibration_method)[0]
    mod = generate(mod, params, target, calibration)
    return mod if search is None else mod.with_attr(MIXED_ATTR, search.to_json())


def mixed_precision_of(mod: tvm.IRModule):
    """The search behind a mixed build (:class:`~accel_codegen.flows.mixed.MixedPrecision`:
    the chosen assignment, its cycles and SQNR, the path from all-int8 to all-fp16), or None
    for a build that was not searched."""
    from .mixed import MixedPrecision

    if mod.attrs is None or MIXED_ATTR not in mod.attrs:
        return None
    return MixedPrecision.from_json(str(mod.attrs[MIXED_ATTR]))


def partition_report(mod: tvm.IRModule, params=None, *, config: AccelConfig | str = "nv_full",
                     fuse: bool = True, precision: str = "fp32",
                     calibration=None, winograd: bool = True, **mixed) -> PartitionReport:
    """The partition report of a partitioned module (partitions an unpartitioned one first;
    ``mixed``: target_sqnr_db or layer_precisions, for precision="mixed")."""
    if not is_partitioned(mod):
        mod = partition_for_accel(mod, params, config=config, fuse=fuse, precision=precision,
                                  calibration=calibration, winograd=winograd, **mixed)
    return PartitionReport.from_dict(json.loads(str(mod.attrs[REPORT_ATTR])))



def build(mod: tvm.IRModule, params: Optional[Dict[str, np.ndarray]] = None, *,
          config: AccelConfig | str = "nv_full", fuse: bool = True, precision: str = "fp32",
          calibration=None, calibration_method: str = DEFAULT_METHOD,
          target="llvm", winograd: bool = True, target_sqnr_db: Optional[float] = None,
          layer_precisions: Optional[Dict[str, str]] = None, equalize: Optional[bool] = None,
          bias_correction: bool = True,
          weight_rounding: str = "nearest") -> AccelExecutable:
    """Partition (unless partitioned already) and compile a module.

    Parameters
    ----------
    mod, params, config, fuse, precision, calibration, calibration_method, winograd
    target_sqnr_db, layer_precisions, equalize, bias_correction, weight_rounding
        As for :func:`accel_codegen.partition_for_accel`: int8 needs ``calibration``, an
        iterable of example input tuples (or a Calibration); precision="mixed" needs it and
        ``target_sqnr_db`` (or ``layer_precisions``).
    target : str or dict
        The host target for the ops that stay on the host.

    Returns
    -------
    AccelExecutable
        A ``tvm.runtime.Executable`` whose ``jit`` and ``export_library`` link the simulator
        in: run it with :func:`virtual_machine` (thread-safe, typed errors) or TVM's
        ``relax.VirtualMachine(exe, tvm.cpu())``; export it with :func:`export_library` or
        ``exe.export_library(path)``.
    """
    if is_partitioned(mod):
        if params:
            raise AccelInvalidError("bind params before partitioning: the module is partitioned")
    else:
        mod = partition_for_accel(mod, params, config=config, fuse=fuse, precision=precision,
                                  calibration=calibration,
                                  calibration_method=calibration_method, winograd=winograd,
                                  target_sqnr_db=target_sqnr_db,
                                  layer_precisions=layer_precisions, equalize=equalize,
                                  bias_correction=bias_correction,
                                  weight_rounding=weight_rounding)
    return AccelExecutable(tvm.compile(mod, target=target).mod)
