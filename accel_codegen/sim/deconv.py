"""Deconvolution (transposed convolution) as NVDLA runs it: a CONV whose output channels are the
output phases, then the RUBIK engine's contract (nvdla/doc, unit description, "Deconvolution").

A transposed convolution of stride s (per side) writes output position o = i*s + r - p from
input position i and kernel tap r. Split by output phase (o mod s), each phase is an ordinary
stride-1 convolution of the input with a sub-kernel of every s-th tap, reversed (NVDLA's
"order-reversed kernels"). :func:`deconv_as_conv_weights` stacks the sy*sx phase kernels into
one CONV, phase-major (output channel ``(a*sx + b)*K + k`` is phase (a, b) of channel k), which
is the channel-extended cube the RUBIK contract takes (:class:`~accel_codegen.sim.ops.Rubik`)::

    plan = deconv_as_conv_weights(weight, stride=2, padding=1)      # torch's layout and args
    y = Device().run([Conv(plan.weight, padding=plan.padding)], x)   # + Sdp(shift=plan.bias(b))
    y = Device().run([Rubik(plan.stride_x, plan.stride_y)], y)
    y = y[..., :plan.output_size(h, w)[0], :plan.output_size(h, w)[1]] # plan.exact: no crop

The padding p of the transposed convolution is folded into the CONV's padding and into which
tap each phase starts from, so the contract's output begins at the transposed convolution's
first output; it ends where it does too when the output size is a multiple of the stride
(``plan.exact``: every stride-2 kernel-2 or kernel-4 padding-1 layer, and output_padding
makes most others so); otherwise the contract gives ``s - out % s`` extra rows (columns) at
the end, which the caller crops or refuses.

Grouped transposed convolutions (depthwise ones included) become a dense CONV with zero
blocks: a grouped CONV's output channels are group-major, the contract's input phase-major.
The nearest-neighbour upsample by s is the transposed convolution of an s x s kernel of ones,
stride s, one group per channel (:func:`upsample_nearest_as_conv_weights`): a 1x1 CONV of
one-hot weights (s*s copies of each channel) + contract. Its CONV is pure data movement too:
s*s BDMA copies of the input into channel offsets ph*C (``Bdma(C, dst_offset=ph*C,
dst_channels=s*s*C)``) make the same channel-extended cube without MACs.

NumPy only (no TVM): the compiler's lowering calls these with constant weights.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence, Tuple

import numpy as np

from ..errors import AccelInvalidError, AccelShapeError, AccelUnsupportedError
from .ops import integer


def _pair(value, what: str) -> Tuple[int, int]:
    """(h, w) of an int or a pair, each an integer, named when bad."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise AccelInvalidError(f"{what} = {value!r} is not an int or an (h, w) pair")
        return integer(value[0], f"{what}[0]"), integer(value[1], f"{what}[1]")
    value = integer(value, what)
    return value, value


@dataclasses.dataclass(frozen=True)
class _Axis:
    """One spatial axis of a transposed convolution as phase convolutions."""

    stride: int
    kernel: int
    padding: int
    output_padding: int
    pad_before: int                 # the CONV's padding before and after
    pad_after: int
    taps: Tuple[Tuple[int, ...], ...]  # taps[phase][u]: the transposed kernel's tap, -1: zero

    @property
    def window(self) -> int:
        return len(self.taps[0])

    def output(self, size: int) -> int:
        """The transposed convolution's output size (PyTorch's formula, dilation 1)."""
        return (size - 1) * self.stride - 2 * self.padding + self.kernel + self.output_padding

    def contracted(self, size: int) -> int:
        """The contract's output size: the CONV's output times the stride."""
        return (size + self.pad_before + self.pad_after - self.window + 1) * self.stride


def _axis(stride: int, kernel: int, padding: int, output_padding: int, what: str) -> _Axis:
    s, r, p, op = stride, kernel, padding, output_padding
    # Output position o reads the full (unpadded) result at q = o + p = m*s + a: input
    # i = m - t with tap a + t*s. Output phase o mod s = a2 uses a = (a2 + p) mod s and starts
    # its m at delta = (a2 + p) div s: y[m'] = sum_t x[m' + delta - t] w[a + t*s].
    taps_per_phase = -(-r // s)
    first = p // s                      # the smallest delta over the phases
    last = (s - 1 + p) // s             # the largest
    pad_before = taps_per_phase - 1 - first
    window = last - first + taps_per_phase
    # The CONV's output count is ceil(out / s) = H - 1 + ceil((r + op - 2p) / s) whatever H.
    pad_after = -(-(r + op - 2 * p) // s) - 2 + window - pad_before
    if pad_before < 0 or pad_after < 0:
        raise AccelUnsupportedError(
            f"transposed convolution {what}: padding = {p} with kernel {r} and stride {s} "
            f"crops more than the phase convolutions' padding can take (CONV padding "
            f"{pad_before}, {pad_after}: an input crop would be needed)")
    taps = []
    for a2 in range(s):
        a, delta = (a2 + p) % s, (a2 + p) // s
        row = []
        for u in range(window):
            t = pad_before + delta - u
            tap = a + t * s
            row.append(tap if 0 <= t < taps_per_phase and tap < r else -1)
        taps.append(tuple(row))
    return _Axis(s, r, p, op, pad_before, pad_after, tuple(taps))


@dataclasses.dataclass(frozen=True)
class DeconvAsConv:
    """A transposed convolution as a CONV (``weight``, ``padding``, stride 1, one group) and a
    RUBIK contract (``stride_x``, ``stride_y``). See the module's docstring."""

    weight: np.ndarray              # [stride_y*stride_x*K, C, kh, kw], phase-major
    padding: Tuple[int, int, int, int]  # the CONV's (top, bottom, left, right)
    stride_x: int
    stride_y: int
    out_channels: int               # K, the transposed convolution's output channels
    _rows: _Axis
    _cols: _Axis

    def bias(self, bias: Optional[np.ndarray]) -> Optional[np.ndarray]:
        """The CONV's per-channel bias (the SDP's shift) for the transposed convolution's
        ``bias`` of K values: each phase group gets all of it."""
        return self.per_channel(bias, "bias")

    def per_channel(self, values: Optional[np.ndarray], what: str = "per-channel operand"
                    ) -> Optional[np.ndarray]:
        """Any per-channel operand of the layer after the transposed convolution (a batch
        norm's scale and shift, PReLU slopes, int8 converters) for the SDP after the CONV:
        K values tiled over the phase groups. The contract is a permutation, so the SDP's
        per-element work (activations included) may run before it."""
        if values is None:
            return None
        values = np.asarray(values)
        if values.shape != (self.out_channels,):
            raise AccelShapeError(f"transposed convolution {what} has shape {values.shape}, "
                                  f"not ({self.out_channels},)")
        return np.tile(values, self.stride_x * self.stride_y)

    def output_size(self, in_h: int, in_w: int) -> Tuple[int, int]:
        """The transposed convolution's output (height, width) for an input of in_h x in_w."""
        return self._rows.output(in_h), self._cols.output(in_w)

    def contract_size(self, in_h: int, in_w: int) -> Tuple[int, int]:
        """The (height, width) the CONV + contract write: output_size, or more at the end."""
        return self._rows.contracted(in_h), self._cols.contracted(in_w)

    def exact(self, in_h: int, in_w: int) -> bool:
        """Whether the contract's output is the transposed convolution's, with no crop."""
        return self.output_size(in_h, in_w) == self.contract_size(in_h, in_w)


def deconv_as_conv_weights(weight: np.ndarray, stride, padding=0, output_padding=0,
                           groups: int = 1) -> DeconvAsConv:
    """The CONV weights and padding (and RUBIK factors) of a transposed convolution.

    ``weight``: PyTorch's ``conv_transpose2d`` layout, [C_in, K / groups, kh, kw]; ``stride``,
    ``padding``, ``output_padding``: ints or (h, w) pairs, as PyTorch's (dilation 1). The CONV
    weight has the same dtype (its values are the transposed kernel's taps and zeros, so an
    int8 or fp16 weight stays exact)."""
    weight = np.asarray(weight)
    if weight.ndim != 4:
        raise AccelShapeError(f"transposed convolution weight has shape {weight.shape}, not "
                              "(C_in, K / groups, kh, kw)")
    groups = integer(groups, "groups", 1)
    c_in, k_group, kh, kw = weight.shape
    if c_in % groups:
        raise AccelShapeError(f"groups = {groups} does not divide the input channels {c_in}")
    sy, sx = _pair(stride, "stride")
    py, px = _pair(padding, "padding")
    oy, ox = _pair(output_padding, "output_padding")
    for name, s, p, o in (("stride", sy, py, oy), ("stride", sx, px, ox)):
        if s < 1 or p < 0 or not 0 <= o < s:
            raise AccelInvalidError(f"transposed convolution: stride {s}, padding {p}, "
                                    f"output_padding {o} (stride >= 1, padding >= 0, "
                                    "0 <= output_padding < stride)")
    rows = _axis(sy, kh, py, oy, "rows")
    cols = _axis(sx, kw, px, ox, "columns")
    k = k_group * groups
    c_group = c_in // groups
    out = np.zeros((sy * sx * k, c_in, rows.window, cols.window), dtype=weight.dtype)
    for a in range(sy):
        for b in range(sx):
            base = (a * sx + b) * k
            for u, ty in enumerate(rows.taps[a]):
                for v, tx in enumerate(cols.taps[b]):
                    if ty < 0 or tx < 0:
                        continue
                    for g in range(groups):
                        block = weight[g * c_group:(g + 1) * c_group, :, ty, tx]  # [c, k]
                        out[base + g * k_group:base + (g + 1) * k_group,
                            g * c_group:(g + 1) * c_group, u, v] = block.T
    return DeconvAsConv(out, (rows.pad_before, rows.pad_after, cols.pad_before,
                              cols.pad_after), sx, sy, k, rows, cols)


def upsample_nearest_as_conv_weights(channels: int, scale, dtype=np.float32) -> DeconvAsConv:
    """Nearest-neighbour upsampling by an integer ``scale`` (an int or (h, w)) as a CONV +
    contract: the transposed convolution of a kernel of ones, one group per channel. The CONV
    is 1x1 with one-hot weights (output channel ph*C + c copies channel c)."""
    channels = integer(channels, "channels", 1)
    sy, sx = _pair(scale, "scale")
    if sy < 1 or sx < 1:
        raise AccelInvalidError(f"scale = {scale!r} must be >= 1")
    ones = np.ones((channels, 1, sy, sx), dtype=dtype)
    return deconv_as_conv_weights(ones, (sy, sx), 0, 0, groups=channels)


__all__: Sequence[str] = ("DeconvAsConv", "deconv_as_conv_weights",
                          "upsample_nearest_as_conv_weights")
