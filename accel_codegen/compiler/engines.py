"""What the engines run of a :class:`~.layer.Layer`: its shape-only engine descriptors
(:func:`engine_ops`), and the C library's answers about them on a configuration: whether it
runs the layer at all (:func:`check_hardware`, the partition's check), the CONV's input modes
(:func:`conv_modes`), whether it runs the conv in Winograd mode (:func:`winograd_refusal`) and
whether that pays for the layer alone (:func:`conv_mode`). ``Layer`` keeps these as methods,
which call here; the layer is the IR, this module what the hardware makes of it.
"""
from __future__ import annotations

import functools
import json
from typing import Callable, Optional, Tuple

import numpy as np

from ..errors import AccelError
from ..sim.config import AccelConfig
from ..sim.device import estimate_chain
from ..sim.ops import SHAPE_ONLY, Bdma, Conv, Lrn, Pool, Rubik, Sdp
from ..sim.reference import is_lut_activation
from .relax_exprs import Unsupported, constant_value, is_constant, static_shape


def conv_modes(layer, config: AccelConfig, fuse: bool, precision: str = "fp32",
               winograd: bool = False) -> dict:
    """The CONV input modes the code generator chooses on ``config`` (Conv fields): image
    input (``pixel_format``) for a conv that reads the function's input with at most four
    channels (an image: NVDLA's first-layer mode), multi-batch for a fully connected layer
    of a batch. Each only where the configuration has it and the C library accepts the
    chain with it and the modes chosen before it, image input first (its limits are the
    library's, not restated here). With ``winograd``,
    also Winograd mode (``mode``) where :func:`conv_mode` chooses it for the layer alone
    (the code generator chooses it with its memory plan: ``codegen/memory.py``)."""
    if layer.conv is None or layer.copies or layer.step is not None:
        return {}
    if layer.norm is not None:
        return conv_modes(layer.runs(precision)[0], config, fuse, precision, winograd)
    n, channels, h, w = layer.in_shape
    modes: dict = {}
    if layer.host_input and not layer.tokens and channels <= 4 and \
            "image_input" in config.features:
        modes["pixel_format"] = ("r8" if channels == 1 else "a8b8g8r8") \
            if precision == "int8" else "a16b16g16r16_f"
    if n > 1 and (h, w) == (1, 1) and "batch" in config.features:
        modes["multi_batch"] = True
    chosen: dict = {}
    # Each in turn, kept where the library accepts the chain with it and those kept before
    # it: the combination is what the code generator emits, and one mode may fit where
    # both do not (image input is direct convolution only, without multi-batch).
    for field, value in modes.items():
        try:
            estimate_chain(config, engine_ops(layer, fuse, precision,
                                              modes={**chosen, field: value}),
                           layer.in_shape, mode="fused" if fused(layer, fuse) else "independent",
                           precision=precision)
            chosen[field] = value
        except AccelError:
            pass
    if winograd and conv_mode(layer, config, fuse, precision, True, chosen)[0] == "winograd":
        chosen["mode"] = "winograd"
    return chosen


def engine_ops(layer, fuse: bool, precision: str = "fp32", config: Optional[AccelConfig] = None,
               modes: Optional[dict] = None, winograd: bool = True) -> list:
    """Shape-only engine descriptors: one fused chain, or one op per source op. Outside
    fp32 a CONV always feeds an SDP (an identity one if the chain has none), and INT8 SDPs
    carry integer converters in place of the float scale and shift. With ``config``, the
    CONV takes the modes :func:`conv_modes` chooses there for the layer alone (Winograd
    unless ``winograd`` is False); ``modes`` gives them instead."""
    if layer.contract_only:
        return [Rubik(layer.rubik.stride_x, layer.rubik.stride_y, precision=precision)]
    if modes is None:
        modes = conv_modes(layer, config, fuse, precision, winograd) if config is not None \
            else {}
    int8 = precision == "int8"
    if layer.step is not None:  # a pass of a norm: its own ops (operands shape-only)
        return layer.step.bound(None)
    if layer.norm is not None:  # its first run's
        return engine_ops(layer.runs(precision)[0], fuse, precision, config, modes, winograd)
    if layer.lrn is not None:
        n = layer.lrn
        if int8:
            raise Unsupported("an int8 LRN is not generated yet: the compiler does not build "
                              "the CDP's INT8 tables (accel_cdp_int8) from alpha, beta and k")
        return [Lrn(n.size, n.alpha, n.beta, n.k, precision=precision)]
    if int8 and layer.requantize:  # a source (or a concat's rows) to the concat's scale
        return [Sdp(bias=SHAPE_ONLY, mul=SHAPE_ONLY, rshift=SHAPE_ONLY, precision=precision)]
    if layer.copies:
        (c,) = layer.copies  # one run per copy
        return [Bdma(c.channels, c.src_offset, c.src_stride, c.dst_offset, c.dst_stride,
                     layer.out_surface[1], precision=precision, repeat=c.repeat,
                     src_repeat_stride=c.src_repeat_stride,
                     dst_repeat_stride=c.dst_repeat_stride)]

    def sdp(scaled=False, shifted=False, **fields):
        if int8:  # the code generator always emits all three converter arrays
            fields.pop("clip", None)
            if fields.get("prelu_slope") is not None:
                fields["prelu_mul"] = fields.pop("prelu_slope")
            if is_lut_activation(fields.get("act")):
                fields["lut"] = SHAPE_ONLY  # the layer's tables
            return Sdp(bias=SHAPE_ONLY, mul=SHAPE_ONLY, rshift=SHAPE_ONLY,
                       precision=precision, **fields)
        return Sdp(scale=_placeholder(scaled), shift=_placeholder(shifted),
                   precision=precision, **fields)

    ops: list = []
    if layer.computed_scale and fuse:  # x * s, s computed: see computed_scale
        return [sdp(ew_op="mul", operand=SHAPE_ONLY, ew_per_channel=True, act=layer.sdp.act,
                    clip=layer.sdp.clip, prelu_slope=_placeholder(layer.sdp.prelu_slope))]
    if layer.conv is not None:
        ops.append(Conv(None, weight_shape=layer.conv.weight_shape, stride=layer.conv.stride,
                        padding=layer.conv.padding, dilation=layer.conv.dilation,
                        groups=layer.conv.groups, precision=precision, **modes))
    s = layer.sdp
    if fuse:
        if not s.empty():
            folded = s.bias is not None or s.batch_norm is not None
            # fp16 folds the factor into the conv weights (see codegen)
            scaled = (s.batch_norm is not None or s.scale is not None) and not (
                precision == "fp16" and layer.conv is not None)
            ops.append(sdp(scaled, folded, ew_op=s.ew_op, operand=_placeholder(s.operand),
                           ew_per_channel=s.ew_per_channel, act=s.act, clip=s.clip,
                           prelu_slope=_placeholder(s.prelu_slope)))
    else:
        for stage in s.decomposed_order():
            if stage == "bias":
                ops.append(sdp(shifted=True))
            else:  # batch norm: scale and shift; a multiply: scale only
                ops.append(sdp(True, s.batch_norm is not None))
        if s.ew_op is not None:
            ops.append(sdp(ew_op=s.ew_op, operand=SHAPE_ONLY, ew_per_channel=s.ew_per_channel))
        if s.act is not None:
            ops.append(sdp(act=s.act, clip=s.clip,
                           prelu_slope=_placeholder(s.prelu_slope)))
    if precision != "fp32" and layer.conv is not None and (
            len(ops) == 1 or not isinstance(ops[1], Sdp)):
        ops.insert(1, sdp())  # the converter the accumulators leave through
    if layer.pool is not None:
        passes, rescale = layer.pool.passes()
        if rescale != 1.0:
            ops.append(sdp(scaled=True))
        ops += [Pool(p.kind, p.kernel, p.stride, p.padding, p.count_include_pad,
                     precision=precision) for p in passes]
    return ops


def fused(layer, fuse: bool) -> bool:
    """Whether the run is fused: a pool split into several PDP passes goes through
    memory between them (INDEPENDENT mode), as on NVDLA."""
    return fuse and (layer.pool is None or len(layer.pool.passes()[0]) == 1)


def _check_int8_concat(layer) -> None:
    """An int8 concat rescales each whole input into a channel range of one image, which
    an SDP pass writes as a dense tensor; along a later axis, or along the channels of a
    batch, its copies move the codes and one SDP pass rescales the rows
    (Layer.rescaled_rows)."""
    if layer.rescaled_rows:
        return
    for c in layer.copies:
        whole = c.in_shape[1] == c.channels
        if not whole or c.src_offset != 0 or c.src_stride != 1 or c.dst_stride != 1:
            raise Unsupported("an int8 concat whose copies take channel slices or steps is "
                              "not generated: each input is rescaled whole by an SDP pass "
                              "into one channel range")


def norm_name(layer) -> str:
    """How the reports name a layer's norm: "a layer_norm", "a softmax", "attention"."""
    kind = layer.norm.kind
    return kind if kind == "attention" else f"a {kind}"


def fp16_in_int8(layer) -> Optional[str]:
    """Why int8 code runs this layer in fp16 (None: it runs in int8), the one definition the
    partition's check, the program's precisions (``program.py``) and the reports read. A
    layer norm, an L2 norm, a softmax and an attention core are reductions whose
    intermediates no per-tensor int8 scale covers (a variance, a sum of squares or of
    exponentials, and the 1/sqrt or 1/sum of it, each with a pole at 0): NVDLA-faithfully,
    their passes run in fp16 on an engine that computes both and the SDP converts at their
    borders (docs/mixed-precision.md, "int8 builds"). So does an SDP pass whose LUT is the
    reciprocal (a mean pooling's 1 / max(count, eps)): the compiler builds no int8 table
    for its pole (vocabulary: int8=False). So does a dense layer whose weights another run
    computes (GCNet's context: the map's rows weighted by a softmax, rewrites.column_products;
    each head of a matmul of two computed operands, rewrites.computed_matmuls),
    as attention's CONVs do: NVDLA's int8 CONV takes its per-kernel weight scales from the
    compiler, and computed weights have none."""
    if layer.norm is None:
        if layer.conv is None and layer.pool is None and layer.sdp.act == "reciprocal":
            return "its reciprocal's pole at 0 has no int8 table"
        if layer.computed_dense_weight:
            return ("its CONV's weights are another run's output, with no int8 per-kernel "
                    "scales at compile time")
        return None
    if layer.norm.kind == "attention":
        return ("its softmax's sum of exponentials and 1/sum have a dynamic range no "
                "per-tensor int8 scale covers, and its CONVs' weights are K and V as other runs "
                "compute them, with no int8 per-kernel scales at compile time")
    if layer.norm.kind == "softsign":
        return "its 1 / (1 + |x|) is the reciprocal's LUT, which has no int8 tables"
    if layer.norm.kind == "reciprocal":
        return "its reciprocal's pole at 0 has no int8 table"
    what = {"layer_norm": "its variance and 1/sqrt",
            "rms_norm": "its mean of squares and 1/sqrt",
            "l2_normalize": "its sum of squares and 1/sqrt",
            "grn": "its means of squares, their 1/sqrt and the 1/mean of the norms",
            "log_softmax": "its sum of exponentials and its log"}.get(
        layer.norm.kind, "its sum of exponentials and 1/sum")
    return f"{what} have a dynamic range no per-tensor int8 scale covers"


def _check_in_fp16(layer, config: AccelConfig, fuse: bool, what: str) -> None:
    """A layer int8 code runs in fp16 between converting SDP runs (program.py assigns the
    precision): the configuration must compute fp16, and the fp32 reference that calibrates
    the build must run it too."""
    if not config.supports("fp16"):
        raise Unsupported(f"{what} in an int8 build runs in fp16 ({fp16_in_int8(layer)}): "
                          f"precision fp16 is not supported by configuration {config.name} "
                          f"(its precisions: {', '.join(config.precisions)})")
    for each in ("fp16", "fp32"):
        check_hardware(layer, config, fuse, each)


#: A matched module's attribute: the configuration and fusion its partition checked its
#: layers against (JSON), so that every lowering of it (the calibration's, the costing's)
#: asks the same configuration whether a layer runs in fp16 as the code generator does
#: (:func:`fp16_runner`, :func:`partition_fp16_runner`).
PARTITION_TARGET_ATTR = "accel_partition_target"


def with_partition_target(mod, config: AccelConfig, fuse: bool):
    """``mod`` (a matched IRModule) marked with the target it was partitioned for."""
    return mod.with_attr(PARTITION_TARGET_ATTR,
                         json.dumps({"config": config.to_dict(), "fuse": fuse}))


@functools.lru_cache(maxsize=16)
def _partition_target(text: str) -> Tuple[AccelConfig, bool]:
    target = json.loads(text)
    return AccelConfig.from_dict(target["config"]), bool(target["fuse"])


def partition_fp16_runner(mod) -> Optional[Callable[[object], bool]]:
    """:func:`fp16_runner` of the target a matched module was partitioned for; None where it
    carries none (composites merged by hand, not by ``partition.match_composites``)."""
    attrs = mod.attrs
    if attrs is None or PARTITION_TARGET_ATTR not in attrs:
        return None
    return fp16_runner(*_partition_target(str(attrs[PARTITION_TARGET_ATTR])))


def fp16_runner(config: AccelConfig, fuse: bool) -> Callable[[object], bool]:
    """Whether ``config`` runs a layer in fp16 (and the fp32 code that calibrates an int8
    build runs it too), as the partition checks a layer int8 code runs in fp16."""
    def runs_fp16(layer) -> bool:
        if not config.supports("fp16"):
            return False
        try:
            for precision in ("fp16", "fp32"):
                check_hardware(layer, config, fuse, precision)
        except Unsupported:
            return False
        return True
    return runs_fp16


#: The smallest magnitude half precision holds (its least subnormal, 2^-24); below half of
#: it a value rounds to 0.
HALF_TINY = float(np.finfo(np.float16).smallest_subnormal)


def _check_half_constants(layer) -> None:
    """fp16 code holds a layer's constants in half: a parameter that is not 0 but whose every
    value rounds to 0 there would change what the layer computes (an epsilon added before a
    log on the host, 1e-10 in Basic Pitch's spectrogram: the log of 0 is -inf, and the output
    NaN). Such a layer stays in fp32, on the host. The weights are not read here (each check
    would copy them; trained weights are never all below 6e-8, and a few tiny values among
    others, a trained weight's leftovers, round to 0 harmlessly); values beyond half's range
    saturate (``codegen.constants.fp16_saturated``)."""
    s = layer.sdp
    operand = [("element-wise operand", s.operand)] if s.operand is not None else []
    for what, expr in layer.parameters() + operand:
        if what.endswith(" weight") or not is_constant(expr):
            continue
        value = constant_value(expr)
        largest = float(max(value.max(), -value.min())) if value.size else 0.0
        if 0 < largest < HALF_TINY and not np.any(value.astype(np.float16) != 0):
            raise Unsupported(f"the {what} (largest magnitude {largest:.1e}) is below half "
                              f"precision's smallest value ({HALF_TINY:.1e}): fp16 would "
                              "hold it as 0")


def check_hardware(layer, config: AccelConfig, fuse: bool, precision: str = "fp32") -> None:
    """Ask the C library whether the configuration runs this layer (Unsupported if not)."""
    if layer.branch is not None:
        check_hardware(layer.branch, config, fuse, precision)
    if layer.norm is not None:
        if precision == "int8" and fp16_in_int8(layer) is not None:
            _check_in_fp16(layer, config, fuse, norm_name(layer))
            return
        for run in layer.runs(precision):
            check_hardware(run, config, fuse, precision)
        return
    if layer.rubik is not None and not layer.contract_only:
        check_hardware(layer.before_contract(), config, fuse, precision)
        check_hardware(layer.contract(), config, fuse, precision)
        return
    if len(layer.copies) > 1:
        if precision == "int8" and layer.several_sources:
            _check_int8_concat(layer)
        for run in layer.runs(precision):
            check_hardware(run, config, fuse, precision)
        return
    if precision == "int8" and fp16_in_int8(layer) is not None:
        _check_in_fp16(layer, config, fuse, "a dense layer of computed weights"
                       if layer.computed_dense_weight else "a reciprocal")
        return
    if layer.per_image_scale and not (fuse and layer.computed_scale):
        raise Unsupported("a multiply by one value per image and channel runs as the SDP's "
                          "per-channel element-wise multiplier, fused, with nothing but an "
                          "activation after it")
    if precision != "fp32":
        for what, expr in layer.parameters():
            # fp16 reads a computed per-channel scale as it is (squeeze-excite's x * s):
            # with nothing to fold it into, and one batch, it is the SDP's [C] halves (a
            # batch's, [N, C], the fused per-channel multiplier's operand).
            # int8 reads it as the element-wise multiplier's per-channel operand (fused
            # runs only: the int8 code generator emits each layer as one SDP).
            computed_scale = what == "scale" and (
                (precision == "fp16" and layer.conv is None and
                 layer.sdp.batch_norm is None and layer.in_shape[0] == 1) or
                (precision == "fp16" and fuse and layer.per_image_scale) or
                (precision == "int8" and fuse and layer.computed_scale and
                 layer.sdp.act in (None, "relu", "clip")))
            if not is_constant(expr) and not computed_scale and \
                    not (precision == "fp16" and what == "dense weight" and
                         layer.computed_dense_weight):
                raise Unsupported(f"the {what} is not a constant (a runtime input, or "
                                  f"computed by another operator); {precision} code needs "
                                  "constant weights and parameters (bind inputs as params)")
    if precision == "fp16":
        _check_half_constants(layer)
    if precision == "int8" and is_lut_activation(layer.sdp.act) and layer.sdp.ew_op:
        raise Unsupported(f"an int8 element-wise {layer.sdp.ew_op} before a "
                          f"{layer.sdp.act} is not generated (its operand would have to be "
                          "converted to the lookup table's input units)")
    if layer.pool is not None and layer.pool.passes()[1] != 1.0 and (
            layer.conv is not None or not layer.sdp.empty() or precision == "int8"):
        raise Unsupported(f"a global average pool of {layer.pool.kernel[0]}x"
                          f"{layer.pool.kernel[1]} runs as padded PDP passes and a rescale: "
                          "on its own, in fp32 or fp16")
    mode = "fused" if fused(layer, fuse) else "independent"
    try:
        estimate_chain(config, engine_ops(layer, fuse, precision), layer.in_shape, mode=mode,
                       precision=precision)
    except AccelError as error:
        raise Unsupported(_without_status(str(error))) from None
    if precision == "int8" and (layer.copies or not layer.requantize):
        # int8 calibration runs the fp32 code of the same partition (its reference), where
        # a concat's copies are BDMA copies, not SDP rescales: it must run there too (a
        # concat's rescale of its rows after the copies is int8's alone).
        try:
            estimate_chain(config, engine_ops(layer, fuse, "fp32"), layer.in_shape, mode=mode,
                           precision="fp32")
        except AccelError as error:
            raise Unsupported("int8 calibration runs it in fp32: "
                              f"{_without_status(str(error))}") from None



def winograd_refusal(layer, config: AccelConfig, fuse: bool, precision: str = "fp32",
                     modes: Optional[dict] = None) -> Optional[str]:
    """None where the configuration runs this layer's convolution in Winograd mode (the C
    library decides: accel_conv_mode's conditions), else why not. ``modes``: the input
    modes chosen besides."""
    if layer.conv is None:
        return "no convolution"
    try:
        estimate_chain(config, engine_ops(layer, fuse, precision, modes={
            **(modes or {}), "mode": "winograd"}), layer.in_shape,
            mode="fused" if fused(layer, fuse) else "independent", precision=precision)
    except AccelError as error:
        return _without_status(str(error)).split("mode = winograd: ")[-1]
    return None


def conv_mode(layer, config: AccelConfig, fuse: bool, precision: str = "fp32",
              winograd: bool = True, modes: Optional[dict] = None) -> Tuple[str, str]:
    """The CONV's mode for this layer alone, and why: ("winograd", "") where ``winograd``
    allows it, the configuration runs it (:func:`winograd_refusal`) and the cost model
    gives the layer fewer cycles that way with its weights dense and in DRAM (the larger
    pre-transformed weights can make a memory-bound layer lose); else ("direct", the
    reason). ``modes``: the input modes chosen besides. (The code generator decides with
    the memory plan its run gets instead, SRAM and sparse weights included:
    ``codegen/memory.py``; the two agree where that plan keeps the weights dense and in
    DRAM.)"""
    modes = dict(modes or {})
    if not winograd and layer.conv is not None:
        return "direct", "winograd=False"
    refusal = winograd_refusal(layer, config, fuse, precision, modes)
    if refusal is not None:
        return "direct", refusal
    mode = "fused" if fused(layer, fuse) else "independent"
    fast = estimate_chain(config, engine_ops(layer, fuse, precision, modes={
        **modes, "mode": "winograd"}), layer.in_shape, mode=mode, precision=precision).cycles
    direct = estimate_chain(config, engine_ops(layer, fuse, precision, modes=modes),
                            layer.in_shape, mode=mode, precision=precision).cycles
    if fast >= direct:
        return "direct", f"Winograd would take {fast:,} cycles, direct {direct:,}"
    return "winograd", ""



def _placeholder(present):
    """Shape-only SDP operands for the estimate: present or absent, no data."""
    return None if present is None or present is False else SHAPE_ONLY


def _without_status(message: str) -> str:
    return message.rsplit(" [ACCEL_", 1)[0]
