"""The compiler's IR: a :class:`Layer` is one accelerator run (CONV -> SDP -> PDP, each stage
optional) described by the Relax expressions it reads, as :mod:`.lowering` finds it in a matched
composite. The partitioner's checks, the code generator, the estimator and the accuracy report
all read layers; none re-derives one.

What the engines make of a layer (its shape-only descriptors, and the C library's answers:
whether a configuration runs it, its conv modes) is :mod:`.engines`, which ``Layer``'s methods
of those names call; reading Relax expressions (static shapes, constants, a chain's bindings)
is :mod:`.relax_exprs`, whose names this module keeps for its importers.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple, Union

import numpy as np
from tvm import relax

from .._accel_ffi import lib
from ..sim.config import AccelConfig
from ..sim.decompose import (Pass, attention_passes, fp32_sums, grn_passes, l2_normalize_passes,
                             layer_norm_passes, log_softmax_passes, rms_norm_passes,
                             reciprocal_passes, softmax_passes, softsign_passes)
from . import engines
from .relax_exprs import (Bindings, Lookup, Unsupported, bound_values,  # noqa: F401
                          chain_root, constant_value, feature_surface, is_constant, op_name,
                          static_shape)


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
    # the element-wise operand holds one value per channel ([N, C, 1, 1], computed: GCNet's
    # context added to the map), read by the SDP for every position (accel.h's
    # ew_per_channel, NCHW only), not one value per element
    ew_per_channel: bool = False
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
    """A BDMA copy of channels of ``source`` into the layer's output: for r <= repeat and
    i < channels, out[:, dst_offset + r * dst_repeat_stride + i * dst_stride] =
    source[:, src_offset + r * src_repeat_stride + i * src_stride] (accel.h's repeat: one
    run).
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
    repeat: int = 0
    src_repeat_stride: int = 0
    dst_repeat_stride: int = 0

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
class AttentionSpec:
    """Multi-head attention of one image (``accel.attention``): its K and V tensors (Q is the
    layer's data), each [tokens, channels] in memory with ``heads`` x ``head_dim`` of those
    channels from ``first[name]`` on ("x" for Q, "k", "v")."""

    key: relax.Expr
    value: Optional[relax.Expr]
    heads: int
    head_dim: int
    tokens: int
    kv_tokens: int
    #: the scores' factor, or one per head (Swin-V2's logit scales: a constant multiplying
    #: the query's heads, compiler/attention.py)
    scale: Union[float, Tuple[float, ...]]
    channels: Dict[str, Tuple[int, int]]  # name -> (channels of its tensor, first of the heads)
    #: Swin's windows: attention in each of ``windows`` consecutive blocks of tokens
    windows: int = 1
    #: added to the scaled scores, [1 or windows, heads, tokens, kv_tokens] (None: nothing)
    bias: Optional[np.ndarray] = dataclasses.field(default=None, compare=False)
    #: or a computed bias (a padding mask's), [windows, 1, tokens, kv_tokens] the same for
    #: every head of a window or [windows, heads, tokens, kv_tokens] one per head, whose bytes
    #: the scores' SDP reads as the surface [1, blocks x tokens, 1, kv_tokens]
    key_bias: Optional[relax.Expr] = None
    #: each head's V columns and output channels where they differ from ``head_dim`` (SAGAN's
    #: self-attention over a feature map: q and k of C/8 channels, v of C); None: the same
    value_dim: Optional[int] = None
    #: ``nn.MultiheadAttention``'s ``need_weights=True``: the layer computes the mean of each
    #: ``groups`` consecutive heads' probabilities (of each image) instead of the output,
    #: [images, tokens, kv_tokens], and reads no V (``value`` None); None: the output
    groups: Optional[int] = None

    @property
    def key_bias_per_head(self) -> bool:
        return self.key_bias is not None and static_shape(self.key_bias)[1] > 1


@dataclasses.dataclass
class NormSpec:
    """A layer norm (``kind`` "layer_norm"), an RMS norm ("rms_norm": T5's, LLaMA's; no
    ``beta``), an L2 norm (torch's F.normalize:
    "l2_normalize", ``epsilon`` its eps), ConvNeXt-V2's GRN ("grn": ``gamma``, ``beta`` and
    ``epsilon`` its own, over the H and W of NCHW data), softsign ("softsign", element-wise),
    1 / max(x, ``epsilon``) ("reciprocal", element-wise), a softmax
    ("softmax") or log_softmax ("log_softmax") over the channels of the
    layer's surface (the last axis of its [B, T, C] tokens), or attention ("attention", with
    ``attention``), run as the engine passes of sim/decompose.py, then ``act``; a layer norm's
    ``gamma`` / ``beta`` constants (None: 1 / 0)."""

    gamma: Optional[relax.Expr]
    beta: Optional[relax.Expr]
    epsilon: float
    act: Optional[str] = None
    sources: List[str] = dataclasses.field(default_factory=list)  # ops around the dense layer
    kind: str = "layer_norm"
    attention: Optional[AttentionSpec] = None

    @property
    def source(self) -> str:
        if self.kind == "l2_normalize":  # no Relax op: torch's F.normalize, its ops matched
            return "F.normalize (L2 norm, decomposed)"
        if self.kind == "grn":  # no Relax op: ConvNeXt-V2's GRN, its ops matched
            return "GRN (global response norm, decomposed)"
        if self.kind == "reciprocal":  # 1 / x, after the max in ``sources``
            return "reciprocal (decomposed)"
        return f"relax.nn.{self.kind}"

    def decomposition(self, shape: Tuple[int, int, int, int], precision: str):
        """The passes over a surface of ``shape`` in ``precision`` (sim/decompose.py)."""
        if self.kind == "softmax":  # the sum a CONV (decompose.fp32_sums; fp16: its fp32
            # accumulator gives 1 / sum's remainder, decompose._softmax_fp16)
            return softmax_passes(shape, precision, fp32_sums(shape))
        if self.kind == "softsign":  # element-wise: |x|, 1 / (1 + |x|), times x
            return softsign_passes(shape, precision)
        if self.kind == "reciprocal":  # element-wise: 1 / max(x, epsilon)
            return reciprocal_passes(shape, self.epsilon, precision)
        if self.kind == "log_softmax":  # softmax's passes, ln(sum) subtracted
            return log_softmax_passes(shape, precision,
                                      fp32_sums(shape) if precision == "fp32" else "tree")
        if self.kind == "l2_normalize":  # fp32: the sum a CONV (decompose.fp32_sums)
            return l2_normalize_passes(shape, self.epsilon, precision,
                                       reduce=fp32_sums(shape) if precision == "fp32"
                                       else "tree")
        if self.kind == "grn":
            return grn_passes(shape, *(np.asarray(constant_value(v), np.float32).reshape(-1)
                                       for v in (self.gamma, self.beta)), self.epsilon,
                              precision)
        if self.kind == "rms_norm":  # as a layer norm's: FP16's mean a CONV
            return rms_norm_passes(shape, None if self.gamma is None else np.asarray(
                constant_value(self.gamma), np.float32).reshape(-1), self.epsilon, precision,
                fp32_sums(shape) if precision == "fp32" else "tree", act=self.act)
        if self.kind == "attention":
            a = self.attention
            return attention_passes(a.tokens, a.heads, a.head_dim, a.scale, precision,
                                    a.kv_tokens, a.channels, windows=a.windows, bias=a.bias,
                                    key_bias="head" if a.key_bias_per_head else
                                    a.key_bias is not None, value_dim=a.value_dim,
                                    groups=a.groups)

        def value(expr):
            return None if expr is None else np.asarray(constant_value(expr),
                                                        np.float32).reshape(-1)

        # FP16: the sums as CONVs (fp32 accumulators) and the last pass through the SDP's X
        # units, rounding once (sim/decompose.py); FP32: each sum one CONV to one channel
        # (decompose.fp32_sums)
        return layer_norm_passes(shape, value(self.gamma), value(self.beta), self.epsilon,
                                 precision, reduce="conv" if precision == "fp16" else
                                 fp32_sums(shape), act=self.act)


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
    # Without copies, the SDP pass after an int8 concat along a later axis (rescaled_rows).
    requantize: bool = False
    # The output is one of its external function's outputs, read by no layer of that
    # function (set by the walker, which sees the function): it leaves as fp32, so an int8
    # concat need not bring its inputs to one scale (keeps_input_scales).
    leaves_function: bool = False
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
        if self.requantize:
            return [f"{self.copy_source} (int8 rescale to the concat's scale)"]
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
        (an external function's argument has no other run that sees it). The operand holds
        [N, C]: ``s`` is [1, C, 1, 1] for one image, [N, C, 1, 1] for a batch
        (``per_image_scale``); a batch above 1 with one ``s`` for every image reads it as the
        SDP's scale (fp32 only)."""
        s = self.sdp
        return self.conv is None and not self.copies and s.scale is not None and \
            not is_constant(s.scale) and s.batch_norm is None and s.bias is None and \
            s.ew_op is None and (self.in_shape[0] == 1 or self.per_image_scale)

    @property
    def per_image_scale(self) -> bool:
        """Whether the SDP's scale is computed with one value per image and channel of a batch
        above 1 ([N, C, 1, 1]): only the fused per-channel multiplier (``computed_scale``)
        reads it so."""
        s = self.sdp
        if s.scale is None or is_constant(s.scale) or self.in_shape[0] == 1:
            return False
        shape = tuple(static_shape(s.scale))
        return len(shape) == 4 and shape[0] == self.in_shape[0] and shape[2:] == (1, 1)

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
        if precision == "int8" and self.rescaled_rows:
            return [dataclasses.replace(self, data=c.source, in_shape=c.in_shape, copies=[c])
                    for c in self.copies] + [self.rescale()]
        return [dataclasses.replace(self, data=c.source, in_shape=c.in_shape,
                                    copies=[c], requantize=self.several_sources and
                                    not self.keeps_input_scales)
                for c in self.copies]

    @property
    def keeps_input_scales(self) -> bool:
        """Whether an int8 concat of several tensors, each whole into one channel range of
        one image, is only an output of its function (:attr:`leaves_function`): its copies
        then move each input's codes in that input's own scale, and the output leaves as
        fp32 range by range, each with its input's scale and zero point. So inputs whose
        ranges differ by orders of magnitude (a detector's boxes in pixels beside its scores
        in 0..1, YOLOv8's one output) each keep their resolution, which the one scale
        covering them all would lose (the scores' codes all 0)."""
        return self.leaves_function and self.out_view is None and self.several_sources \
            and self.in_shape[0] == 1 and all(
                c.in_shape[1] == c.channels and c.src_offset == 0 and c.src_stride == 1
                and c.dst_stride == 1 for c in self.copies)

    @property
    def rescaled_rows(self) -> bool:
        """Whether an int8 concat of several tensors is along a later axis (a detection
        head's [N, C, L] along L), or along the channels of a batch above 1: each input's
        rows are ranges of the output's rows (of each image's channels), not one contiguous
        range, which an SDP pass writing a dense tensor cannot fill. So its copies move each
        input's codes, in its own scale, into scratch viewed as ``out_surface`` ((n,
        positions, 1, w), or the channels' own NCHW surface), and one SDP pass
        (:meth:`rescale`) then takes every position to the concat's scale with that
        position's input's converter: the SDP's per-channel converters are per position in
        that view."""
        return self.several_sources and (self.out_view is not None or self.in_shape[0] > 1)

    def rescale(self) -> "Layer":
        """The SDP pass after the copies of a concat with :attr:`rescaled_rows`: the scratch
        the copies wrote, viewed as ``out_surface``, into the output."""
        return dataclasses.replace(self, in_shape=self.out_surface, copies=[], requantize=True)

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

    def norm_output_writers(self, precision: str) -> List[int]:
        """The indices in :meth:`norm_runs` of the passes that write the norm's output or a
        part of it (attention: each head's, each window's last pass writes its channels or
        rows), in order."""
        surface = self.in_shape
        if self.conv is not None:
            surface = (surface[0], self.conv.weight_shape[0]) + tuple(surface[2:])
        decomposition = self.norm.decomposition(surface, precision)

        def base(name: str) -> str:
            while name in decomposition.views:
                name = decomposition.views[name][0]
            return name

        first = 1 if self.conv is not None else 0
        return [first + i for i, p in enumerate(decomposition.passes)
                if base(p.output) == decomposition.output]

    @property
    def several_sources(self) -> bool:
        """Whether the copies read more than one tensor (a concat, not a shuffle)."""
        first = self.copies[0].source if self.copies else None
        return any(not c.source.same_as(first) for c in self.copies[1:])

    # --- what the engines run of it (compiler/engines.py) -----------------------------------
    def conv_modes(self, config: AccelConfig, fuse: bool, precision: str = "fp32",
                   winograd: bool = False) -> dict:
        """The CONV input modes the code generator chooses on ``config``
        (:func:`.engines.conv_modes`)."""
        return engines.conv_modes(self, config, fuse, precision, winograd)

    def engine_ops(self, fuse: bool, precision: str = "fp32",
                   config: Optional[AccelConfig] = None, modes: Optional[dict] = None,
                   winograd: bool = True) -> list:
        """Shape-only engine descriptors (:func:`.engines.engine_ops`)."""
        return engines.engine_ops(self, fuse, precision, config, modes, winograd)

    def fused(self, fuse: bool) -> bool:
        """Whether the run is fused (:func:`.engines.fused`)."""
        return engines.fused(self, fuse)

    def check_hardware(self, config: AccelConfig, fuse: bool, precision: str = "fp32") -> None:
        """Ask the C library whether the configuration runs this layer (Unsupported if not:
        :func:`.engines.check_hardware`)."""
        engines.check_hardware(self, config, fuse, precision)

    def winograd_refusal(self, config: AccelConfig, fuse: bool, precision: str = "fp32",
                         modes: Optional[dict] = None) -> Optional[str]:
        """None where the configuration runs the conv in Winograd mode, else why not
        (:func:`.engines.winograd_refusal`)."""
        return engines.winograd_refusal(self, config, fuse, precision, modes)

    def conv_mode(self, config: AccelConfig, fuse: bool, precision: str = "fp32",
                  winograd: bool = True, modes: Optional[dict] = None) -> Tuple[str, str]:
        """The CONV's mode for this layer alone, and why (:func:`.engines.conv_mode`)."""
        return engines.conv_mode(self, config, fuse, precision, winograd, modes)

