"""The compiler's IR: a :class:`Layer` is one accelerator run (CONV -> SDP -> PDP, each stage
optional) described by the Relax expressions it reads, as :mod:`.lowering` finds it in a matched
composite. The partitioner's checks, the code generator, the estimator and the accuracy report
all read layers; none re-derives one.

Also here: reading Relax expressions (static shapes, constants) and walking a partitioned
function's bindings, which every consumer of layers needs.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, List, Optional, Tuple

import numpy as np
import tvm
from tvm import relax

from .._accel_ffi import lib
from ..errors import AccelError
from ..sim.config import AccelConfig
from ..sim.decompose import Pass, layer_norm_passes, softmax_passes
from ..sim.device import estimate_chain
from ..sim.ops import SHAPE_ONLY, Bdma, Conv, Lrn, Pool, Rubik, Sdp
from ..sim.reference import is_lut_activation


class Unsupported(Exception):
    """A chain the accelerator cannot run; the message says why, in words."""


Lookup = Callable[[relax.Expr], Optional[relax.Expr]]


@dataclasses.dataclass
class ConvSpec:
    """CONV: ``weight`` is [K, C/groups, R, S]; a dense layer is a 1x1 conv on [N, C, 1, 1]."""

    weight: relax.Expr
    weight_shape: Tuple[int, int, int, int]
    stride: Tuple[int, int] = (1, 1)
    padding: Tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right
    dilation: Tuple[int, int] = (1, 1)
    groups: int = 1
    transpose_weight: bool = False  # dense weight given as [C, K]: transpose it (constants only)
    source: str = "relax.nn.conv2d"


@dataclasses.dataclass
class BatchNormSpec:
    gamma: Optional[relax.Expr]
    beta: Optional[relax.Expr]
    mean: relax.Expr
    var: relax.Expr
    epsilon: float


@dataclasses.dataclass
class SdpSpec:
    """The SDP stages of a chain, as the source ops gave them; the code generator folds bias
    and batch norm into one scale/shift when fusing, or keeps them apart when not."""

    bias: Optional[relax.Expr] = None
    batch_norm: Optional[BatchNormSpec] = None
    scale: Optional[relax.Expr] = None  # per-channel multiply by a constant or input
    ew_op: Optional[str] = None
    operand: Optional[relax.Expr] = None
    act: Optional[str] = None
    clip: Tuple[float, float] = (0.0, 6.0)
    prelu_slope: Optional[relax.Expr] = None
    sources: List[str] = dataclasses.field(default_factory=list)

    def decomposed_order(self) -> List[str]:
        """The scale/shift stages as separate ops, in source order: a bias comes before batch
        norm (conv + bias + BN), a per-channel multiply before its bias (x * s + b)."""
        if self.scale is not None:
            return ["scale"] + (["bias"] if self.bias is not None else [])
        return (["bias"] if self.bias is not None else []) + (
            ["batch_norm"] if self.batch_norm is not None else [])

    def empty(self) -> bool:
        return (self.bias is None and self.batch_norm is None and self.scale is None
                and self.ew_op is None and self.act is None)


@dataclasses.dataclass
class PoolSpec:
    kind: str
    kernel: Tuple[int, int]
    stride: Tuple[int, int]
    padding: Tuple[int, int, int, int]  # top, left, bottom, right
    count_include_pad: bool
    source: str
    is_global: bool = False  # the window is the whole input (its output is 1 x 1)

    def passes(self) -> Tuple[List["PoolSpec"], float]:
        """The PDP passes that compute this pool, and the factor their result must be scaled
        by. An average over non-overlapping windows wider than the PDP's runs as several
        passes whose windows multiply to it, as NVDLA's compiler splits it; a global window
        that no such product fits is padded with zeros (counted) and the result rescaled."""
        limit = lib.ACCEL_MAX_POOL_KERNEL
        if max(self.kernel) <= limit or self.kind != "avg" or any(self.padding) or (
                self.kernel != self.stride and not self.is_global):
            return [self], 1.0
        per_axis = [_window_factors(k, limit, self.is_global) for k in self.kernel]
        count = max(len(f) for f in per_axis)
        per_axis = [f + [(1, 0)] * (count - len(f)) for f in per_axis]
        passes = [PoolSpec("avg", (kh, kw), (kh, kw), (0, 0, ph, pw), bool(ph or pw),
                           self.source) for (kh, ph), (kw, pw) in zip(*per_axis)]
        covered = [int(np.prod([k for k, _ in f])) for f in per_axis]
        rescale = covered[0] * covered[1] / (self.kernel[0] * self.kernel[1])
        return passes, rescale


def _window_factors(size: int, limit: int, pad: bool) -> List[Tuple[int, int]]:
    """(window, bottom padding) of successive passes that reduce ``size`` to 1: exact
    factors when they exist; otherwise (``pad``) the widest window, padded."""
    if size <= limit:
        return [(size, 0)]
    for window in range(limit, 1, -1):
        if size % window == 0:
            return [(window, 0)] + _window_factors(size // window, limit, pad)
    if not pad:
        raise Unsupported(f"a window of {size} has no factors of at most {limit}")
    outputs = -(-size // limit)
    return [(limit, outputs * limit - size)] + _window_factors(outputs, limit, pad)


@dataclasses.dataclass
class CopySpec:
    """A BDMA copy of channels of ``source`` into the layer's output: for i < channels,
    out[:, dst_offset + i * dst_stride] = source[:, src_offset + i * src_stride].
    ``view``: the source's dense bytes as the (n, c, h, w) the copy reads, where its axes are
    not the surface's (a concat along the last axis copies each row of [N, C, L] as a range
    of the "channels" of [N * C, L, 1, 1]; the layer's ``out_view`` is the output's); None:
    its feature surface."""

    source: relax.Expr
    channels: int
    src_offset: int = 0
    src_stride: int = 1
    dst_offset: int = 0
    dst_stride: int = 1
    view: Optional[Tuple[int, int, int, int]] = None

    @property
    def in_shape(self) -> Tuple[int, int, int, int]:
        return self.view or feature_surface(static_shape(self.source))


@dataclasses.dataclass
class LrnSpec:
    """CDP: local response normalisation, x / (k + alpha / size * sum of x^2 over ``size``
    neighbouring channels)^beta."""

    size: int
    alpha: float
    beta: float
    k: float


@dataclasses.dataclass
class RubikSpec:
    """A RUBIK contract after a layer's run(s): NVDLA's deconvolution is a CONV (or, for a
    nearest upsampling, BDMA copies) writing the ``stride_x * stride_y`` output phases as
    channel groups, phase-major, then this depth-to-space rearrangement
    (:mod:`accel_codegen.sim.deconv`)."""

    stride_x: int
    stride_y: int
    source: str  # the Relax op the two runs compute


@dataclasses.dataclass
class NormSpec:
    """A layer norm (``kind`` "layer_norm") or a softmax ("softmax") over the channels of the
    layer's surface (the last axis of its [B, T, C] tokens), run as the engine passes of
    sim/decompose.py, then ``act``; a layer norm's ``gamma`` / ``beta`` constants (None: 1 /
    0)."""

    gamma: Optional[relax.Expr]
    beta: Optional[relax.Expr]
    epsilon: float
    act: Optional[str] = None
    sources: List[str] = dataclasses.field(default_factory=list)  # ops around the dense layer
    kind: str = "layer_norm"

    @property
    def source(self) -> str:
        return f"relax.nn.{self.kind}"

    def decomposition(self, shape: Tuple[int, int, int, int], precision: str):
        """The passes over a surface of ``shape`` in ``precision`` (sim/decompose.py)."""
        if self.kind == "softmax":
            return softmax_passes(shape, precision)

        def value(expr):
            return None if expr is None else np.asarray(constant_value(expr),
                                                        np.float32).reshape(-1)

        return layer_norm_passes(shape, value(self.gamma), value(self.beta), self.epsilon,
                                 precision, act=self.act)


def feature_surface(shape: Tuple[int, ...]) -> Tuple[int, int, int, int]:
    """The feature surface a channels-first tensor is read as: NCHW itself, [N, C, L] (a 1-D
    signal, or a detection head's flattened positions) as [N, C, 1, L], [N, C] as
    [N, C, 1, 1]. The same bytes either way, so nothing moves. Which surface a 3-D tensor is
    depends on its reader: a layer norm, softmax or dense layer over the last axis reads
    channels-last tokens ([B, T, C]: :func:`token_surface`); a batch norm or a per-channel
    operand over axis 1 reads [N, C, L] so; element-wise ops, activations and copies are the
    same on either (they read the bytes as they lie), so they take this one."""
    if len(shape) == 4:
        return tuple(shape)
    if len(shape) == 3:
        return (shape[0], shape[1], 1, shape[2])
    if len(shape) == 2:
        return (shape[0], shape[1], 1, 1)
    raise Unsupported(f"a {len(shape)}-D tensor {list(shape)}: the engines read NCHW, "
                      "[N, C, L] or [N, C]")


def token_surface(shape: Tuple[int, ...]) -> Tuple[int, int, int, int]:
    """The feature surface a channels-last tensor is read as: [T, C] -> [1, C, 1, T],
    [B, T, C] -> [B, C, 1, T], [B, H, W, C] -> [B, C, H, W]. On NVDLA the two are the same
    bytes (its feature format holds each position's channels together, in atoms), so nothing
    moves; the simulator's tensors are dense NCHW, so the generated code transposes the data
    in (and the result out) around the runs, outside the cost model (docs/transformer_ops.md)."""
    if len(shape) == 2:
        return (1, shape[1], 1, shape[0])
    if len(shape) == 3:
        return (shape[0], shape[2], 1, shape[1])
    if len(shape) == 4:
        return (shape[0], shape[3], shape[1], shape[2])
    raise Unsupported(f"a {len(shape)}-D token tensor {list(shape)}")


@dataclasses.dataclass
class Layer:
    """One accelerator run: ``data`` (NCHW, or [N, C] as N x C x 1 x 1) through CONV, SDP, PDP;
    or, for a concat, slice or channel shuffle, BDMA ``copies`` into one output (one run per
    copy: :meth:`runs`)."""

    data: relax.Expr
    in_shape: Tuple[int, int, int, int]
    out_shape: Tuple[int, ...]  # as Relax types the result
    conv: Optional[ConvSpec] = None
    sdp: SdpSpec = dataclasses.field(default_factory=SdpSpec)
    pool: Optional[PoolSpec] = None
    flattened: bool = False  # a dense layer reads its NCHW input as [N, C*H*W]
    # A second conv (+ bias) + batch norm whose result is this layer's element-wise operand
    # (ResNet's downsample branch): it runs first, as a layer of its own.
    branch: Optional["Layer"] = None
    copies: List[CopySpec] = dataclasses.field(default_factory=list)
    copy_source: str = ""  # the Relax op(s) the copies compute
    lrn: Optional[LrnSpec] = None  # a CDP run (alone)
    # The data is a parameter of the external function: pixels the host wrote, which a conv
    # may read in image-input mode (set by the walker, which sees the function).
    host_input: bool = False
    # In int8, a copy of a concat of several tensors: each input has its own scale, so an SDP
    # pass rescales it to the concat's and writes its channel range (one image: contiguous).
    requantize: bool = False
    # Channels-last data ([B, T, C]) read as the surface token_surface gives, and the output
    # written back channels-last (a layer with ``norm``).
    tokens: bool = False
    # A layer norm after the CONV + SDP (or alone): the layer's runs are the CONV + SDP and
    # then the norm's engine passes (runs(precision)).
    norm: Optional[NormSpec] = None
    # One of those passes: this run's ops are the pass's (engine_ops).
    step: Optional[Pass] = None

    # A transposed convolution or nearest upsampling: the conv or copies write the output's
    # phases (``phase_shape``), then a RUBIK run contracts them into ``out_shape``
    # (:meth:`before_contract`, :meth:`contract`); a layer that is that run alone has
    # ``rubik`` and neither conv nor copies.
    rubik: Optional[RubikSpec] = None
    # Copies: the output's dense bytes as the copies write them, where that is not its
    # feature surface (CopySpec.view)
    out_view: Optional[Tuple[int, int, int, int]] = None

    @property
    def out_surface(self) -> Tuple[int, int, int, int]:
        """The (n, c, h, w) the layer's (last) run writes its output as."""
        return self.out_view or feature_surface(self.out_shape)

    @property
    def phase_shape(self) -> Tuple[int, int, int, int]:
        """The channel-extended cube the RUBIK contract reads: the output's phases."""
        n, c, h, w = feature_surface(self.out_shape)
        sx, sy = self.rubik.stride_x, self.rubik.stride_y
        return (n, c * sx * sy, h // sy, w // sx)

    @property
    def contract_only(self) -> bool:
        """Whether this layer is a RUBIK run alone (the second run of a deconvolution)."""
        return self.rubik is not None and self.conv is None and not self.copies

    def before_contract(self) -> "Layer":
        """The run(s) before the contract: this layer writing the phase cube."""
        return dataclasses.replace(self, out_shape=self.phase_shape, rubik=None)

    def contract(self) -> "Layer":
        """The RUBIK run: the phase cube into the output."""
        return Layer(data=self.data, in_shape=self.phase_shape, out_shape=self.out_shape,
                     rubik=self.rubik)

    @property
    def source_ops(self) -> List[str]:
        if self.contract_only:
            return [f"{self.rubik.source} (RUBIK contract)"]
        if self.step is not None:
            return [f"{self.step.role} (engine pass)"]
        if self.norm is not None:
            ops = self.norm.sources[:1] + ([self.conv.source] if self.conv else []) + \
                self.sdp.sources + self.norm.sources[1:] + [self.norm.source]
            return ops + ([self.norm.act] if self.norm.act else [])
        if self.copies:
            return [self.copy_source]
        if self.lrn is not None:
            return ["local response norm (decomposed)"]
        ops = ["relax.reshape"] if self.flattened else []
        ops += [self.conv.source] if self.conv else []
        ops += self.sdp.sources
        return ops + ([self.pool.source] if self.pool else [])

    @property
    def computed_scale(self) -> bool:
        """Whether the layer is a per-channel multiply by a computed tensor (squeeze-excite's
        ``x * s``) of one image: fused, every precision runs it as the SDP's element-wise
        multiplier with a per-channel operand (``ew_per_channel``), int8 in the codes and
        zero point of the layer (or the function input) that gave it. So the fp32 build that
        calibrates an int8 one observes ``s`` as that operand, where the host computed it too
        (an external function's argument has no other run that sees it). ``s`` is one value
        per channel ([1, C, 1, 1], the lowering's per-channel rule) and the operand holds
        [N, C]: a batch above 1 reads it as the SDP's scale (fp32 only)."""
        s = self.sdp
        return self.conv is None and not self.copies and s.scale is not None and \
            not is_constant(s.scale) and s.batch_norm is None and s.bias is None and \
            s.ew_op is None and self.in_shape[0] == 1

    @property
    def computed_dense_weight(self) -> bool:
        """Whether the layer is a matmul whose weights are another run's output, read [K, C]
        as they are (attention's Q K^T: K's [T, d] tokens are the CONV's [T, d] kernels):
        NVDLA's CONV fetches its weights from memory, so the run reads that tensor, dense, at
        run time. Nothing is folded into such weights (no batch norm or scale), and fp16 code
        reads them as the run wrote them, in half, without packing them once."""
        c, s = self.conv, self.sdp
        return c is not None and c.source == "relax.matmul" and not c.transpose_weight and \
            not is_constant(c.weight) and s.batch_norm is None and s.scale is None

    def parameters(self) -> List[Tuple[str, relax.Expr]]:
        """(what, expr) of every weight and per-channel parameter the layer reads."""
        s, bn = self.sdp, self.sdp.batch_norm
        weight = "dense weight" if self.conv and self.conv.source == "relax.matmul" else \
            "conv weight"
        found = [(weight, self.conv.weight if self.conv else None), ("bias", s.bias),
                 ("scale", s.scale), ("prelu alpha", s.prelu_slope)]
        if self.norm is not None:
            found += [("layer_norm gamma", self.norm.gamma), ("layer_norm beta", self.norm.beta)]
        if bn is not None:
            found += [("batch_norm gamma", bn.gamma), ("batch_norm beta", bn.beta),
                      ("batch_norm moving mean", bn.mean), ("batch_norm moving var", bn.var)]
        return [(what, expr) for what, expr in found if expr is not None]

    def runs(self, precision: str = "fp32") -> List["Layer"]:
        """The accelerator runs of this layer in order: itself, or one per copy; a layer with
        a norm: its CONV + SDP (if it has a CONV), then one per pass of the norm, whose count
        depends on ``precision`` (FP16 adds Newton steps)."""
        if self.norm is not None:
            return self.norm_runs(precision)
        if len(self.copies) <= 1:
            return [self]
        return [dataclasses.replace(self, data=c.source, in_shape=c.in_shape,
                                    copies=[c], requantize=self.several_sources)
                for c in self.copies]

    def norm_runs(self, precision: str) -> List["Layer"]:
        """The dense layer's run (the CONV and its bias on the surface), then the passes."""
        runs = []
        surface = self.in_shape
        if self.conv is not None:
            surface = (surface[0], self.conv.weight_shape[0]) + tuple(surface[2:])
            runs.append(dataclasses.replace(self, norm=None, out_shape=surface))
        decomposition = self.norm.decomposition(surface, precision)
        for p in decomposition.passes:
            runs.append(Layer(data=self.data, in_shape=decomposition.shapes[p.input],
                              out_shape=decomposition.shapes[p.output], tokens=True, step=p))
        return runs

    @property
    def several_sources(self) -> bool:
        """Whether the copies read more than one tensor (a concat, not a shuffle)."""
        first = self.copies[0].source if self.copies else None
        return any(not c.source.same_as(first) for c in self.copies[1:])

    def conv_modes(self, config: AccelConfig, fuse: bool, precision: str = "fp32",
                   winograd: bool = False) -> dict:
        """The CONV input modes the code generator chooses on ``config`` (Conv fields): image
        input (``pixel_format``) for a conv that reads the function's input with at most four
        channels (an image: NVDLA's first-layer mode), multi-batch for a fully connected layer
        of a batch. Each only where the configuration has it and the C library accepts the
        chain with it and the modes chosen before it, image input first (its limits are the
        library's, not restated here). With ``winograd``,
        also Winograd mode (``mode``) where :meth:`conv_mode` chooses it for the layer alone
        (the code generator chooses it with its memory plan: ``codegen/memory.py``)."""
        if self.conv is None or self.copies or self.step is not None:
            return {}
        if self.norm is not None:
            return self.runs(precision)[0].conv_modes(config, fuse, precision, winograd)
        n, channels, h, w = self.in_shape
        modes: dict = {}
        if self.host_input and not self.tokens and channels <= 4 and "image_input" in config.features:
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
                estimate_chain(config, self.engine_ops(fuse, precision,
                                                       modes={**chosen, field: value}),
                               self.in_shape, mode="fused" if self.fused(fuse) else "independent",
                               precision=precision)
                chosen[field] = value
            except AccelError:
                pass
        if winograd and self.conv_mode(config, fuse, precision, True, chosen)[0] == "winograd":
            chosen["mode"] = "winograd"
        return chosen

    def engine_ops(self, fuse: bool, precision: str = "fp32", config: Optional[AccelConfig] = None,
                   modes: Optional[dict] = None, winograd: bool = True) -> list:
        """Shape-only engine descriptors: one fused chain, or one op per source op. Outside
        fp32 a CONV always feeds an SDP (an identity one if the chain has none), and INT8 SDPs
        carry integer converters in place of the float scale and shift. With ``config``, the
        CONV takes the modes :meth:`conv_modes` chooses there for the layer alone (Winograd
        unless ``winograd`` is False); ``modes`` gives them instead."""
        if self.contract_only:
            return [Rubik(self.rubik.stride_x, self.rubik.stride_y, precision=precision)]
        if modes is None:
            modes = self.conv_modes(config, fuse, precision, winograd) if config is not None \
                else {}
        int8 = precision == "int8"
        if self.step is not None:  # a pass of a norm: its own ops (operands shape-only)
            return self.step.bound(None)
        if self.norm is not None:  # its first run's
            return self.runs(precision)[0].engine_ops(fuse, precision, config, modes, winograd)
        if self.lrn is not None:
            n = self.lrn
            return [Lrn(n.size, n.alpha, n.beta, n.k, precision=precision)]
        if self.copies:
            (c,) = self.copies  # one run per copy
            if int8 and self.requantize:  # the source to the concat's scale
                return [Sdp(bias=SHAPE_ONLY, mul=SHAPE_ONLY, rshift=SHAPE_ONLY,
                            precision=precision)]
            return [Bdma(c.channels, c.src_offset, c.src_stride, c.dst_offset, c.dst_stride,
                         self.out_surface[1], precision=precision)]

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
        if self.computed_scale and fuse:  # x * s, s computed: see computed_scale
            return [sdp(ew_op="mul", operand=SHAPE_ONLY, ew_per_channel=True, act=self.sdp.act,
                        clip=self.sdp.clip, prelu_slope=_placeholder(self.sdp.prelu_slope))]
        if self.conv is not None:
            ops.append(Conv(None, weight_shape=self.conv.weight_shape, stride=self.conv.stride,
                            padding=self.conv.padding, dilation=self.conv.dilation,
                            groups=self.conv.groups, precision=precision, **modes))
        s = self.sdp
        if fuse:
            if not s.empty():
                folded = s.bias is not None or s.batch_norm is not None
                # fp16 folds the factor into the conv weights (see codegen)
                scaled = (s.batch_norm is not None or s.scale is not None) and not (
                    precision == "fp16" and self.conv is not None)
                ops.append(sdp(scaled, folded, ew_op=s.ew_op, operand=_placeholder(s.operand),
                               act=s.act, clip=s.clip, prelu_slope=_placeholder(s.prelu_slope)))
        else:
            for stage in s.decomposed_order():
                if stage == "bias":
                    ops.append(sdp(shifted=True))
                else:  # batch norm: scale and shift; a multiply: scale only
                    ops.append(sdp(True, s.batch_norm is not None))
            if s.ew_op is not None:
                ops.append(sdp(ew_op=s.ew_op, operand=SHAPE_ONLY))
            if s.act is not None:
                ops.append(sdp(act=s.act, clip=s.clip,
                               prelu_slope=_placeholder(s.prelu_slope)))
        if precision != "fp32" and self.conv is not None and (
                len(ops) == 1 or not isinstance(ops[1], Sdp)):
            ops.insert(1, sdp())  # the converter the accumulators leave through
        if self.pool is not None:
            passes, rescale = self.pool.passes()
            if rescale != 1.0:
                ops.append(sdp(scaled=True))
            ops += [Pool(p.kind, p.kernel, p.stride, p.padding, p.count_include_pad,
                         precision=precision) for p in passes]
        return ops

    def fused(self, fuse: bool) -> bool:
        """Whether the run is fused: a pool split into several PDP passes goes through
        memory between them (INDEPENDENT mode), as on NVDLA."""
        return fuse and (self.pool is None or len(self.pool.passes()[0]) == 1)

    def _check_int8_concat(self) -> None:
        """An int8 concat rescales each whole input into a channel range of one image, which
        an SDP pass writes as a dense tensor."""
        if self.out_view is not None:
            raise Unsupported("an int8 concat along an axis other than the channels is not "
                              "generated: each input is rescaled by an SDP pass into its "
                              "channel range, contiguous along the channels only")
        if self.in_shape[0] != 1:
            raise Unsupported(f"an int8 concat of batch {self.in_shape[0]} is not generated: "
                              "each input is rescaled by an SDP pass into its channel range, "
                              "contiguous for one image only")
        for c in self.copies:
            whole = c.in_shape[1] == c.channels
            if not whole or c.src_offset != 0 or c.src_stride != 1 or c.dst_stride != 1:
                raise Unsupported("an int8 concat whose copies take channel slices or steps is "
                                  "not generated: each input is rescaled whole by an SDP pass "
                                  "into one channel range")

    def check_hardware(self, config: AccelConfig, fuse: bool, precision: str = "fp32") -> None:
        """Ask the C library whether the configuration runs this layer (Unsupported if not)."""
        if self.branch is not None:
            self.branch.check_hardware(config, fuse, precision)
        if self.tokens and precision == "int8" and self.norm is None:
            raise Unsupported("an int8 dense layer over tokens is not generated yet (its "
                              "transposes onto the feature surface are fp32 and fp16 only)")
        if self.norm is not None:
            if precision == "int8":
                what = "its variance and 1/sqrt" if self.norm.kind == "layer_norm" else \
                    "its sum of exponentials and 1/sum"
                raise Unsupported(f"a {self.norm.kind} in int8 is not generated: {what} have "
                                  "a dynamic range no per-tensor int8 scale covers (its passes "
                                  "would stay fp16 between converting runs, which this "
                                  "compiler does not emit yet)")
            for run in self.runs(precision):
                run.check_hardware(config, fuse, precision)
            return
        if self.rubik is not None and not self.contract_only:
            self.before_contract().check_hardware(config, fuse, precision)
            self.contract().check_hardware(config, fuse, precision)
            return
        if len(self.copies) > 1:
            if precision == "int8" and self.several_sources:
                self._check_int8_concat()
            for run in self.runs():
                run.check_hardware(config, fuse, precision)
            return
        if precision != "fp32":
            for what, expr in self.parameters():
                # fp16 reads a computed per-channel scale as it is (squeeze-excite's x * s):
                # with nothing to fold it into, and one batch, it is the SDP's [C] halves.
                # int8 reads it as the element-wise multiplier's per-channel operand (fused
                # runs only: the int8 code generator emits each layer as one SDP).
                computed_scale = what == "scale" and (
                    (precision == "fp16" and self.conv is None and
                     self.sdp.batch_norm is None and self.in_shape[0] == 1) or
                    (precision == "int8" and fuse and self.computed_scale and
                     self.sdp.act in (None, "relu", "clip")))
                if not is_constant(expr) and not computed_scale and \
                        not (precision == "fp16" and what == "dense weight" and
                             self.computed_dense_weight):
                    raise Unsupported(f"the {what} is not a constant (a runtime input, or "
                                      f"computed by another operator); {precision} code needs "
                                      "constant weights and parameters (bind inputs as params)")
        if precision == "int8" and is_lut_activation(self.sdp.act) and self.sdp.ew_op:
            raise Unsupported(f"an int8 element-wise {self.sdp.ew_op} before a "
                              f"{self.sdp.act} is not generated (its operand would have to be "
                              "converted to the lookup table's input units)")
        if precision == "int8" and self.conv is None:
            # Without a conv to take it into the weights, a channel factor of 0 would zero the
            # shift too: the int8 SDP adds its bias before it multiplies.
            bn = self.sdp.batch_norm
            for what, expr in (("batch_norm gamma", bn.gamma if bn else None),
                               ("per-channel scale", self.sdp.scale)):
                if expr is not None and is_constant(expr) and np.any(constant_value(expr) == 0):
                    raise Unsupported(f"a {what} of 0 has no int8 converter (the SDP adds its "
                                      "bias before it multiplies)")
        if self.pool is not None and self.pool.passes()[1] != 1.0 and (
                self.conv is not None or not self.sdp.empty() or precision == "int8"):
            raise Unsupported(f"a global average pool of {self.pool.kernel[0]}x"
                              f"{self.pool.kernel[1]} runs as padded PDP passes and a rescale: "
                              "on its own, in fp32 or fp16")
        mode = "fused" if self.fused(fuse) else "independent"
        try:
            estimate_chain(config, self.engine_ops(fuse, precision), self.in_shape, mode=mode,
                           precision=precision)
        except AccelError as error:
            raise Unsupported(_without_status(str(error))) from None
        if precision == "int8":
            # int8 calibration runs the fp32 code of the same partition (its reference), where
            # a concat's copies are BDMA copies, not SDP rescales: it must run there too.
            try:
                estimate_chain(config, self.engine_ops(fuse, "fp32"), self.in_shape, mode=mode,
                               precision="fp32")
            except AccelError as error:
                raise Unsupported("int8 calibration runs it in fp32: "
                                  f"{_without_status(str(error))}") from None


    def winograd_refusal(self, config: AccelConfig, fuse: bool, precision: str = "fp32",
                         modes: Optional[dict] = None) -> Optional[str]:
        """None where the configuration runs this layer's convolution in Winograd mode (the C
        library decides: accel_conv_mode's conditions), else why not. ``modes``: the input
        modes chosen besides."""
        if self.conv is None:
            return "no convolution"
        try:
            estimate_chain(config, self.engine_ops(fuse, precision, modes={
                **(modes or {}), "mode": "winograd"}), self.in_shape,
                mode="fused" if self.fused(fuse) else "independent", precision=precision)
        except AccelError as error:
            return _without_status(str(error)).split("mode = winograd: ")[-1]
        return None

    def conv_mode(self, config: AccelConfig, fuse: bool, precision: str = "fp32",
                  winograd: bool = True, modes: Optional[dict] = None) -> Tuple[str, str]:
        """The CONV's mode for this layer alone, and why: ("winograd", "") where ``winograd``
        allows it, the configuration runs it (:meth:`winograd_refusal`) and the cost model
        gives the layer fewer cycles that way with its weights dense and in DRAM (the larger
        pre-transformed weights can make a memory-bound layer lose); else ("direct", the
        reason). ``modes``: the input modes chosen besides. (The code generator decides with
        the memory plan its run gets instead, SRAM and sparse weights included:
        ``codegen/memory.py``; the two agree where that plan keeps the weights dense and in
        DRAM.)"""
        modes = dict(modes or {})
        if not winograd and self.conv is not None:
            return "direct", "winograd=False"
        refusal = self.winograd_refusal(config, fuse, precision, modes)
        if refusal is not None:
            return "direct", refusal
        mode = "fused" if self.fused(fuse) else "independent"
        fast = estimate_chain(config, self.engine_ops(fuse, precision, modes={
            **modes, "mode": "winograd"}), self.in_shape, mode=mode, precision=precision).cycles
        direct = estimate_chain(config, self.engine_ops(fuse, precision, modes=modes),
                                self.in_shape, mode=mode, precision=precision).cycles
        if fast >= direct:
            return "direct", f"Winograd would take {fast:,} cycles, direct {direct:,}"
        return "winograd", ""


def _placeholder(present):
    """Shape-only SDP operands for the estimate: present or absent, no data."""
    return None if present is None or present is False else SHAPE_ONLY


def _without_status(message: str) -> str:
    return message.rsplit(" [ACCEL_", 1)[0]


# --- reading Relax ----------------------------------------------------------------------------

def static_shape(expr: relax.Expr) -> Tuple[int, ...]:
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        raise Unsupported(f"{describe(expr)} has no static tensor shape")
    try:
        return tuple(int(v) for v in ty.shape.values)
    except (TypeError, AttributeError):
        raise Unsupported(f"{describe(expr)} has a symbolic shape {ty.shape}") from None


def dtype_of(expr: relax.Expr) -> str:
    ty = expr.ty
    return str(ty.dtype) if isinstance(ty, relax.TensorType) else "?"


def describe(expr: relax.Expr) -> str:
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
        return expr.op.name
    return type(expr).__name__


def op_name(expr: Optional[relax.Expr]) -> Optional[str]:
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
        return expr.op.name
    return None


def is_constant(expr: relax.Expr) -> bool:
    return isinstance(expr, tvm.ir.expr.GenericConst)


def constant_value(expr: relax.Expr) -> np.ndarray:
    return expr.value.numpy()


class Bindings(dict):
    """Var -> bound value of a chain's bindings, callable as a :data:`Lookup`; a dict, so that
    a pattern can be matched against it again (``extract_matched_expr(expr, var2val)``)."""

    def __call__(self, var: relax.Expr) -> Optional[relax.Expr]:
        return self.get(var)

    @classmethod
    def of(cls, function: relax.Function) -> "Bindings":
        table = cls()
        for block in function.body.blocks:
            for binding in block.bindings:
                table[binding.var] = binding.value
        return table


def bound_values(function: relax.Function) -> Bindings:
    """A lookup of the Var -> value bindings of a function body (for the code generator)."""
    return Bindings.of(function)


def chain_root(function: relax.Function) -> relax.Expr:
    """The last op of a composite function."""
    body = function.body
    result = body.body
    if isinstance(result, relax.Var):
        value = bound_values(function)(result)
        if value is not None:
            return value
    return result
