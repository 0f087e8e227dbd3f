"""Post-training quantisation: calibration statistics, activation scales, integer converters.

Calibration runs example inputs through the fp32 build of the same partition. The C library's
observer (``accel_set_observer``) hands over every run's input and the output of every engine
pass, so the statistics also cover what a fused chain keeps on chip (the SDP result before a
pooling op). A tensor is identified by its run's label key (``f0.3``, ``f0.3a`` for a branch,
as the generated code and :func:`accel_codegen.estimate` label runs) and the index of the op
whose output it is (-1: the run's input).

Activation scales are per tensor with a zero point, weights per output channel (symmetric,
codes -127..127).
Calibration also records each run input's per-channel mean: the code generator uses it for
bias correction (the mean shift that rounding the weights causes goes back into the bias),
which gained 2.7 dB on VGG-11-BN and 3.7 dB on ResNet-18 in our measurements.
A tensor the calibration data never saw negative is stored unsigned: zero point -128 and
255 steps over [0, max] (NVDLA's converter offset and PADDING_VALUE do the same), which gives
a ReLU output the bit a symmetric code would waste on its sign. A signed tensor is asymmetric
under ``mse`` and ``max``: its zero point splits the 255 steps between the two sides as its
values do (a standardised image reaches 2.3 times further above zero than below; on the
trained digits CNN this gained 0.6 dB at the logits, docs/ptq.md).

Methods (``calibration_method``):

- ``"mse"`` (default): the threshold that minimises the tensor's expected squared
  quantisation error (clipping above, rounding below) over the calibration histogram, searched
  per tensor (:func:`mse_threshold`; for a signed tensor the step and zero point together,
  :func:`mse_asymmetric`); the exact zeros of a ReLU are left out, as they are exact. A
  tensor that a depthwise convolution alone reads, whose threshold leaves a channel the
  convolution weighs above the mean within 2 codes over its whole range
  (:func:`loses_amplified_channel`), takes the threshold of least error of the
  convolution's output instead: the same search with each channel's values weighed by the
  convolution's squared weights (``Observer.channel_weights``, from
  compiler/sensitivity.py). A trained depthwise kernel multiplies a channel of small range
  by up to 73 (PP-PicoDet), and the plain search, set by the widest channel, left that
  channel one code. Against ``percentile`` on the zoo it gained up to 1.8 dB at the output (VGG-11-BN)
  and lost 0.9 dB on MobileNet-v3-small, where a smaller range than the least-error one did
  better (docs/calibration_methods.txt).
- ``"mse_positions"``: ``mse``, then a second pass over the examples that counts each
  position's clipped values. The least-error threshold prices a clipped value as one
  squared error among all the tensor's values; where the values it clips gather in a few
  positions of the last axis (a border column, the end of a line of text:
  :func:`concentrated_clipping`, by a count that chance does not explain), a decision read
  at that position (a CTC time step) sees the whole clipping, so such a tensor takes its
  whole range (``max``'s) instead. Not the default: on PP-OCRv4's recogniser, the trained
  set and the zoo it changes few tensors or none and moves nothing beyond noise, and
  without the count's evidence it lost SQNR on held-back inputs (docs/ptq.md).
- ``"mse_outputs"``: ``mse``, then each of the tensors that cost the outputs most takes,
  of a few multiples of its range, the one of least error at the network's outputs, in
  the fp32 reference run with the int8 activations emulated (:mod:`.output_aware`: a
  coordinate descent, (tensors + 32 x 8) runs of every other example; a change only where
  no example's output noise rises), kept only where the int8 build of the chosen ranges
  beats the build of ``mse``'s on the examples the search did not see (two builds: the
  emulation is not the build, and ranges fitted to few examples fit them; with one example,
  on that example). Not the default: on the trained set it gains (YOLOv8n, the
  recogniser's strings) or checks back to ``mse``, but it costs every int8 build the
  search and two builds, and the recogniser 0.7 dB over its compared lines
  (docs/trained_models.md, "`mse_outputs` checked in a real build").
- ``"percentile"``: the 99.99th percentile of |x|; one outlier in a large calibration set
  does not stretch the range for every other value, but a heavy tail is clipped hard.
- ``"max"``: the range seen (ONNX Runtime's MinMax): nothing saturates on the calibration
  data; best when the calibration set is the deployment set.
- ``"entropy"``: TensorRT's KL-divergence threshold over a 2048-bin histogram (the first bin
  left out for non-negative tensors: a ReLU's zeros are exact at any scale, and with them the
  threshold fell to about 45 % of the range and LeNet-5 to 9 dB). Offered for comparison; it
  clips more than the others.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Callable, Dict, Iterable, Optional, Tuple

import numpy as np

from ..errors import AccelInvalidError
from ..sim.labels import label_key
from ..sim.observer import INPUT, observing
from .encoding import round_half_away

METHODS = ("mse", "percentile", "max", "entropy", "mse_positions", "mse_outputs")
#: the methods that search the least-error threshold (``mse_positions``: ``mse``, then the
#: positions' pass, :func:`spare_concentrated_clipping`; ``mse_outputs``: ``mse``, then the
#: outputs' search, :mod:`.output_aware`)
LEAST_ERROR = ("mse", "mse_positions", "mse_outputs")
DEFAULT_METHOD = "mse"
PERCENTILE = 99.99
HISTOGRAM_BINS = 2048

Key = Tuple[str, int]  # (run label key, op index)


@dataclasses.dataclass(frozen=True)
class TensorQuant:
    """real = (code - zero) * scale for an int8 tensor. ``reader_relu``: the quantisation is
    that of the ReLU which alone reads the tensor (codegen/int8_plan._select_outputs), so its
    negative values saturate to that ReLU's zeros by design, not by a calibration that missed
    them (the accuracy report compares such a tensor with its reference's ReLU)."""

    scale: float
    zero: int
    reader_relu: bool = dataclasses.field(default=False, compare=False)

    def quantize(self, x: np.ndarray) -> np.ndarray:
        """As ``accel_convert`` does (FP32 -> INT8), for references and tests."""
        v = round_half_away(np.asarray(x, np.float64) / np.float64(np.float32(self.scale)))
        v = np.where(np.isnan(v), 0.0, v) + self.zero
        return np.clip(v, -128, 127).astype(np.int8)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        return ((q.astype(np.float64) - self.zero) * np.float64(np.float32(self.scale))
                ).astype(np.float32)


@dataclasses.dataclass(frozen=True, eq=False)
class ChannelQuant:
    """real = (code - zeros[c]) * scales[c] for an int8 tensor whose channels (axis 1) keep
    the quantisations of the tensors they were copied from: a channel concat whose readers
    take each channel's scale and zero point into their per-channel converters (an SDP's
    multiplier and bias), so its copies move codes instead of rescaling every part into one
    scale that covers them all (``codegen/int8_plan.py``: ``_FunctionQuant.part_scaled``)."""

    scales: np.ndarray  # [C] float64, each a float32 value
    zeros: np.ndarray   # [C] int64

    @classmethod
    def of_parts(cls, parts) -> "ChannelQuant":
        """From (channels, TensorQuant) of each part, in channel order."""
        parts = list(parts)
        return cls(np.concatenate([np.full(n, np.float32(q.scale), np.float64)
                                   for n, q in parts]),
                   np.concatenate([np.full(n, q.zero, np.int64) for n, q in parts]))

    def _view(self, x: np.ndarray):
        shape = (1, -1) + (1,) * (np.ndim(x) - 2)
        return self.scales.reshape(shape), self.zeros.reshape(shape)

    def quantize(self, x: np.ndarray) -> np.ndarray:
        """Each channel as its own TensorQuant quantises it (``accel_convert``'s rounding)."""
        scales, zeros = self._view(x)
        v = round_half_away(np.asarray(x, np.float64) / scales)
        return np.clip(np.where(np.isnan(v), 0.0, v) + zeros, -128, 127).astype(np.int8)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        scales, zeros = self._view(q)
        return ((q.astype(np.float64) - zeros) * scales).astype(np.float32)


@dataclasses.dataclass
class _Stats:
    low: float = math.inf
    high: float = -math.inf
    histogram: Optional[np.ndarray] = None  # of |x| over [0, top]
    negative: Optional[np.ndarray] = None   # of |x| of the negative values alone (same bins)
    top: float = 0.0                          # the histogram's range: amax up to a factor 2
    channel_sum: Optional[np.ndarray] = None  # per channel (axis 1), for bias correction
    channel_positive: Optional[np.ndarray] = None  # values > 0 per channel (axis 1): the
                                                   # share a ReLU before it passed
    channel_square: Optional[np.ndarray] = None    # sum of squares per channel (axis 1)
    count: int = 0                            # values per channel summed
    zeros: float = 0                          # exact zeros (in the histogram's first bin;
                                              # their weight, when weighted)

    @property
    def amax(self) -> float:
        return max(abs(self.low), abs(self.high), 0.0)

    def add_histogram(self, x: np.ndarray, amax: float,
                      weights: Optional[np.ndarray] = None) -> None:
        """Count |x| (finite values) into the histogram, and the negative values' |x| into
        their own, first widening the range (by doubling: two bins merge into one exactly)
        until it holds ``amax``; ``weights``: each value's weight (x's shape), else 1."""
        if not amax > 0:
            return
        if self.histogram is None:
            self.top = amax
            dtype = np.int64 if weights is None else np.float64
            self.histogram = np.zeros(HISTOGRAM_BINS, dtype)
            self.negative = np.zeros(HISTOGRAM_BINS, dtype)
        while self.top < amax:
            self.histogram, self.negative = (
                np.concatenate([merged, np.zeros_like(merged)])
                for merged in (h.reshape(-1, 2).sum(axis=1) for h in (self.histogram,
                                                                      self.negative)))
            self.top *= 2
        if self.low < 0:  # a ReLU's output has no negative value to sort out
            below = x < 0
            self.negative += histogram_counts(-x[below], self.top,
                                              None if weights is None else weights[below])
        self.histogram += histogram_counts(np.abs(x), self.top, weights)


def histogram_counts(magnitudes: np.ndarray, top: float,
                     weights: Optional[np.ndarray] = None) -> np.ndarray:
    """Counts of ``magnitudes`` (>= 0, overwritten) in HISTOGRAM_BINS equal bins over
    [0, top], the last one closed: np.histogram's bins, in 40 % of its time (one scaling
    in place, one conversion, one bincount); ``weights``: each value's weight (summed per
    bin instead of counted)."""
    flat = magnitudes.reshape(-1)
    factor = HISTOGRAM_BINS / top
    if factor <= float(np.finfo(flat.dtype).max):
        np.multiply(flat, flat.dtype.type(factor), out=flat)
    else:  # a range of float32 denormals (a layer of denormal weights): bins 2^11 / 1e-42
        flat = flat.astype(np.float64) * (HISTOGRAM_BINS / top)
    index = flat.astype(np.int32)
    np.minimum(index, HISTOGRAM_BINS - 1, out=index)
    if weights is not None:
        return np.bincount(index, weights=np.asarray(weights, np.float64).reshape(-1),
                           minlength=HISTOGRAM_BINS)
    return np.bincount(index, minlength=HISTOGRAM_BINS)


class Observer:
    """Collects statistics of every fp32 tensor the simulator produces while active, in one
    pass: the range, a histogram of |x| (whose range doubles as larger values arrive, so no
    second pass over the data is needed), and each run input's per-channel sums. Subclasses
    see every tensor through :meth:`add` (fp32 values, or int8 codes of an int8 run)."""

    def __init__(self, channel_weights: Optional[Dict[Key, np.ndarray]] = None) -> None:
        self.stats: Dict[Key, _Stats] = {}
        #: per tensor, its channels' (axis 1) weights: such a tensor also gets a histogram
        #: weighted by them (``weighted``) and each channel's range (``spans``), which
        #: ``mse`` reads (see compiler/sensitivity.py and :func:`loses_amplified_channel`)
        self.channel_weights = channel_weights or {}
        self.weighted: Dict[Key, _Stats] = {}
        self.spans: Dict[Key, Tuple[np.ndarray, np.ndarray]] = {}

    def add(self, label: str, op_index: int, x: np.ndarray) -> None:
        if x.dtype != np.float32:
            return
        key = (label_key(label), op_index)
        stats = self.stats.setdefault(key, _Stats())
        low, high = (float(x.min()), float(x.max())) if x.size else (0.0, 0.0)
        finite = x
        if not (math.isfinite(low) and math.isfinite(high)):  # rare: filter, then again
            finite = x[np.isfinite(x)]
            low, high = (float(finite.min()), float(finite.max())) if finite.size else (0, 0)
        if finite.size:
            stats.low, stats.high = min(stats.low, low), max(stats.high, high)
            weights = self.channel_weights.get(key)
            if weights is not None and finite is x and x.ndim >= 2 and \
                    x.shape[1] == len(weights):
                self._add_weighted(key, x, weights, max(abs(low), abs(high)))
            stats.add_histogram(finite, max(abs(low), abs(high)))
            stats.zeros += int(finite.size - np.count_nonzero(finite))
        if op_index == INPUT:
            sums = (x if finite is x else np.nan_to_num(x)).sum(axis=(0, 2, 3),
                                                                 dtype=np.float64)
            stats.channel_sum = sums if stats.channel_sum is None else \
                stats.channel_sum + sums
            positive = np.count_nonzero(x > 0, axis=(0, 2, 3))
            stats.channel_positive = positive if stats.channel_positive is None else \
                stats.channel_positive + positive
            squares = np.einsum("nchw,nchw->c", x, x, dtype=np.float64) if finite is x \
                else (np.nan_to_num(x).astype(np.float64) ** 2).sum(axis=(0, 2, 3))
            stats.channel_square = squares if stats.channel_square is None else \
                stats.channel_square + squares
            stats.count += x.shape[0] * x.shape[2] * x.shape[3]

    def _add_weighted(self, key: Key, x: np.ndarray, weights: np.ndarray, amax: float) -> None:
        """The weighted histogram and the channels' ranges of a tensor with channel weights."""
        stats = self.weighted.setdefault(key, _Stats())
        stats.low, stats.high = min(stats.low, float(x.min())), max(stats.high, float(x.max()))
        each = np.broadcast_to(np.asarray(weights, np.float64).reshape(
            (1, -1) + (1,) * (x.ndim - 2)), x.shape)
        stats.add_histogram(x, amax, each)
        stats.zeros += float(each[x == 0].sum())
        axes = (0,) + tuple(range(2, x.ndim))
        lo, hi = x.min(axis=axes).astype(np.float64), x.max(axis=axes).astype(np.float64)
        if key in self.spans:
            lo, hi = np.minimum(self.spans[key][0], lo), np.maximum(self.spans[key][1], hi)
        self.spans[key] = (lo, hi)


def loses_amplified_channel(quant: TensorQuant, weights: np.ndarray,
                            spans: Tuple[np.ndarray, np.ndarray], codes: float = 2.0) -> bool:
    """Whether ``quant`` leaves a channel its reader weighs above the mean (``weights``,
    mean 1) within ``codes`` steps over its whole range (``spans``: each channel's low and
    high): the depthwise reader then amplifies a channel int8 has all but erased."""
    lo, hi = spans
    return bool(np.any((weights > 1) & (hi - lo <= codes * quant.scale)))


def tensor_quant(stats: _Stats, method: str) -> TensorQuant:
    """The quantisation ``method`` gives a tensor with these statistics: unsigned (zero point
    -128, 255 steps over [0, T]) when no value was negative; otherwise asymmetric (a zero
    point placing the codes over [lo, hi]) for ``mse`` and ``max``, and symmetric (zero point
    0, 127 steps each side) for ``percentile`` and ``entropy``, which judge |x| alone."""
    if not stats.low < 0:
        return _unsigned_quant(_threshold(stats, method))
    if method == "max":
        return covering_quant(stats.low, stats.high)
    if method in LEAST_ERROR:
        width = stats.top / HISTOGRAM_BINS
        negative = stats.negative.astype(np.float64)
        positive = stats.histogram - negative
        positive[0] -= stats.zeros
        # a tensor that is negative everywhere (calibration saw a negative constant) still
        # gets a range with 0 in it, as every int8 range has: max(high, 0)
        return mse_asymmetric(positive, negative, width, max(stats.high, 0.0), -stats.low)
    threshold = _threshold(stats, method)
    if not threshold > 0 or not math.isfinite(threshold):
        threshold = 1.0
    return TensorQuant(float(np.float32(threshold / 127)), 0)


def _unsigned_quant(threshold: float) -> TensorQuant:
    scale = float(np.float32(threshold / 255)) if math.isfinite(threshold) else 0.0
    if not scale > 0:
        # an all-zero (or unseen) tensor, or one whose range is below float32's smallest step
        # (every value is code 0 of any scale): any scale represents it
        scale = float(np.float32(1.0 / 255))
    return TensorQuant(scale, -128)


def covering_quant(lo: float, hi: float) -> TensorQuant:
    """The finest int8 quantisation whose codes cover [lo, hi] (lo <= 0 <= hi) with 0 exact:
    unsigned over [0, hi] when lo is 0; otherwise 254 steps over hi - lo, the zero point
    rounded towards the negative end (one step of the 255 pays for that rounding). A range
    that leaves 0 out (a tensor negative everywhere) is widened to it."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if not lo < 0:
        return _unsigned_quant(hi)
    scale = float(np.float32((hi - lo) / 254))
    if not scale > 0:  # a range below float32's smallest step: every value is 0's code
        return _unsigned_quant(0.0)
    steps_below = min(int(math.ceil(-lo / scale - 1e-9)), 255)
    return TensorQuant(scale, steps_below - 128)


def _threshold(stats: _Stats, method: str) -> float:
    """The symmetric methods' clipping threshold of |x|."""
    amax = stats.amax
    if method == "max" or stats.histogram is None or amax == 0:
        return amax
    counts = stats.histogram.astype(np.float64)
    width = stats.top / HISTOGRAM_BINS
    if method in LEAST_ERROR:
        return mse_threshold(counts, width, amax, stats.zeros, stats.low >= 0)
    if method == "percentile":
        cumulative = np.cumsum(counts)
        index = int(np.searchsorted(cumulative, cumulative[-1] * PERCENTILE / 100.0))
        return min(amax, (index + 1) * width)
    unsigned = stats.low >= 0
    if unsigned:  # the ReLU zeros are exact in any scale: they must not pull the range down
        counts = counts.copy()
        counts[0] = 0
    used = min(HISTOGRAM_BINS, int(math.ceil(amax / width)))  # the bins up to amax
    return min(amax, _entropy_threshold(counts[:used], unsigned) * width)


#: The MSE search: candidate thresholds geometric from amax / 256 to amax (MSE_CANDIDATES of
#: them, about 9 % apart), then half as many between the best one's neighbours.
MSE_CANDIDATES = 64


def mse_threshold(counts: np.ndarray, width: float, amax: float, zeros: int,
                  unsigned: bool) -> float:
    """The clipping threshold T (the largest code's value) that minimises the expected squared
    quantisation error of the histogrammed |x|: values above T saturate to T, values below
    round to the step T / levels. Each bin's values are taken as uniform over the bin, which
    gives both errors in closed form; the exact zeros (exact at any scale) are left out."""
    used = min(len(counts), int(math.ceil(amax / width)))
    counts = counts[:used].astype(np.float64)
    counts[0] = max(counts[0] - zeros, 0.0)
    if not counts.any():
        return amax
    filled = np.flatnonzero(counts)  # empty bins add no error at any threshold
    lo, counts = filled * width, counts[filled]  # the bins [lo, lo + width]
    ratios = np.geomspace(1.0 / 256, 1.0, MSE_CANDIDATES)
    errors = _clipping_errors(counts, lo, width, amax * ratios, unsigned)
    best = int(np.argmin(errors))
    fine = np.geomspace(ratios[max(best - 1, 0)], ratios[min(best + 1, len(ratios) - 1)],
                        MSE_CANDIDATES // 2)
    errors = _clipping_errors(counts, lo, width, amax * fine, unsigned)
    return float(amax * fine[int(np.argmin(errors))])


def _clipping_errors(counts: np.ndarray, lo: np.ndarray, width: float, thresholds: np.ndarray,
                     unsigned: bool) -> np.ndarray:
    """The total squared error of quantising the histogram with each threshold."""
    t = thresholds[:, None]
    step = t / (255 if unsigned else 127)
    cube = step ** 3

    def rounding(x):  # the integral of the squared rounding error from 0 (a sawtooth's)
        n = np.floor(x / step + 0.5)
        r = x - n * step
        return n * (cube / 12) + r ** 3 / 3

    hi = lo + width
    below = rounding(np.minimum(hi, t)) - rounding(np.minimum(lo, t))
    above = np.maximum(hi - t, 0) ** 3 - np.maximum(lo - t, 0) ** 3
    return (below + above / 3) @ counts / width


def mse_asymmetric(positive: np.ndarray, negative: np.ndarray, width: float, high: float,
                   low_magnitude: float) -> TensorQuant:
    """The asymmetric quantisation (step s, zero point z: codes over [-(z + 128) s,
    (127 - z) s]) that minimises the expected squared error of a signed tensor, from the
    histograms of its positive values (exact zeros left out) and of its negative values'
    magnitudes (bins of ``width``). For each candidate step, every split of the 255 steps
    between the two sides is priced at once (:func:`_side_errors`)."""
    top = (high + low_magnitude) / 254  # the step of the covering range
    best = (math.inf, top, 0)

    def search(steps):
        nonlocal best
        for step in steps:
            above = _side_errors(positive, width, step)      # [n]: n steps above zero
            below = _side_errors(negative, width, step)[::-1]  # [n]: 255 - n steps below
            total = above + below
            n = int(np.argmin(total))
            if total[n] < best[0]:
                best = (float(total[n]), step, n)

    ratios = np.geomspace(1.0 / 256, 1.0, MSE_CANDIDATES)
    search(top * ratios)
    i = int(np.argmin(np.abs(ratios - best[1] / top)))
    search(top * np.geomspace(ratios[max(i - 1, 0)], ratios[min(i + 1, len(ratios) - 1)],
                              MSE_CANDIDATES // 2))
    _, step, n = best
    return TensorQuant(float(np.float32(step)), 127 - n)


def _side_errors(counts: np.ndarray, width: float, step: float) -> np.ndarray:
    """The squared error of one side of a tensor (a histogram of magnitudes, values uniform
    within each bin [b w, (b + 1) w]) quantised with ``step`` and n = 0..255 steps, so values
    above n * step saturate there: one prefix sum (the rounding error of the bins below the
    threshold), suffix moments (the clipping error of the bins above it) and the one bin the
    threshold cuts."""
    bins = len(counts)
    edges = np.arange(bins + 1) * width
    cube = step ** 3

    def rounding(x):  # the integral of the squared rounding error from 0 (a sawtooth's)
        k = np.floor(x / step + 0.5)
        r = x - k * step
        return k * (cube / 12) + r ** 3 / 3

    density = counts / width
    inside = np.concatenate([[0.0], np.cumsum(density * np.diff(rounding(edges)))])
    lo, hi = edges[:-1], edges[1:]
    moments = [density * (hi - lo), density * (hi ** 2 - lo ** 2) / 2,
               density * (hi ** 3 - lo ** 3) / 3]  # integrals of 1, t, t^2 per bin
    suffix = [np.concatenate([np.cumsum(m[::-1])[::-1], [0.0]]) for m in moments]
    t = np.arange(256) * step
    cut = np.minimum((t / width).astype(np.int64), bins)  # the bin the threshold falls in
    clipped = suffix[2][cut] - 2 * t * suffix[1][cut] + t * t * suffix[0][cut]
    partial = np.where(cut < bins, density[np.minimum(cut, bins - 1)], 0.0)
    start = edges[np.minimum(cut, bins)]
    # the cut bin: [start, t] rounds, [t, start + width] saturates; its whole-bin clipping
    # term (in suffix[cut]) is replaced by the part above t
    below_t = partial * (rounding(t) - rounding(start))
    whole = partial * ((start + width - t) ** 3 - (start - t) ** 3) / 3
    above_t = partial * np.maximum(start + width - t, 0) ** 3 / 3
    return inside[cut] + below_t + clipped - whole + above_t


def _entropy_threshold(counts: np.ndarray, unsigned: bool) -> int:
    """TensorRT's method: the clipping bin count whose quantised distribution (levels
    codes) is closest in KL divergence to the clipped reference distribution."""
    levels = 255 if unsigned else 127
    best, best_bins = math.inf, len(counts)
    for bins in range(levels, len(counts) + 1, 16):
        reference = counts[:bins].copy()
        reference[bins - 1] += counts[bins:].sum()
        groups = np.array_split(np.arange(bins), levels)
        quantised = np.zeros(bins)
        for g in groups:
            part = counts[g]
            nonzero = part > 0
            if nonzero.any():
                quantised[g[nonzero]] = part.sum() / nonzero.sum()
        p = reference / reference.sum()
        q = quantised / max(quantised.sum(), 1e-30)
        mask = p > 0
        divergence = float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-30))))
        if divergence < best:
            best, best_bins = divergence, bins
    return best_bins


#: :func:`concentrated_clipping`: a position (an index of the last axis) whose share of
#: clipped values is above CLIP_POSITION_SHARE and CLIP_POSITION_RATIO times the tensor's
#: share makes the tensor take its whole range, where its count is evidence of that: a
#: position clipping at exactly that rate reaches the count with a probability below
#: CLIP_POSITION_EVIDENCE (Poisson). Why: ``mse`` clips few values (a tensor's largest
#: handful), and a position of few values (a token of 2 calibration lines) passes the 0.1 %
#: share with one clipped value, which must be at some position: without the evidence such
#: chance decided most of the tensors the rule changed (docs/ptq.md)
CLIP_POSITION_SHARE = 1e-3
CLIP_POSITION_RATIO = 5.0
CLIP_POSITION_EVIDENCE = 1e-3


def poisson_tail(count: int, mean: float) -> float:
    """P(X >= count) for X ~ Poisson(mean), its terms summed in log space (a mean of
    thousands underflows exp(-mean)): from ``count`` up where ``count`` is above the mean
    (the terms fall from there), else 1 less the terms below ``count``."""
    if count <= 0:
        return 1.0
    if mean <= 0:
        return 0.0

    def log_term(i: int) -> float:
        return -mean + i * math.log(mean) - math.lgamma(i + 1)

    if count <= mean:
        return max(0.0, 1.0 - sum(math.exp(log_term(i)) for i in range(count)))
    total, i = 0.0, count
    while True:
        term = math.exp(log_term(i))
        total += term
        if term <= 1e-17 * total or i > count + 100_000:
            return min(total, 1.0)
        i += 1


class ClipCounter:
    """An observer of a second pass: for each tensor a quantisation is given for (``quants``),
    the values it clips, counted per position of the last axis (axis 0 and the axes between
    summed), and the values seen there.

    Tensors of fewer than 3 axes are not counted: a 2-D tensor is a dense layer's
    ``[N, features]`` (or a vector), whose last axis holds features, not positions; clipping
    gathered in one feature is that feature's wider range, which every per-tensor scale has
    and no per-position decision reads. From 3 axes the last is a position: the width of
    ``[N, C, H, W]``, the sequence of ``[N, C, L]``."""

    def __init__(self, quants: Dict[Key, "TensorQuant"]) -> None:
        self.bounds = {key: ((-128 - q.zero) * q.scale, (127 - q.zero) * q.scale)
                       for key, q in quants.items()}
        self.clipped: Dict[Key, np.ndarray] = {}
        self.seen: Dict[Key, int] = {}

    def add(self, label: str, op_index: int, x: np.ndarray) -> None:
        key = (label_key(label), op_index)
        if x.dtype != np.float32 or x.ndim < 3 or key not in self.bounds:
            return
        lo, hi = self.bounds[key]
        counts = ((x < lo) | (x > hi)).reshape(-1, x.shape[-1]).sum(axis=0)
        self.clipped[key] = counts if key not in self.clipped else self.clipped[key] + counts
        self.seen[key] = self.seen.get(key, 0) + x.size // x.shape[-1]


def concentrated_clipping(clipped: np.ndarray, seen: int,
                          share: float = CLIP_POSITION_SHARE,
                          ratio: float = CLIP_POSITION_RATIO,
                          evidence: float = CLIP_POSITION_EVIDENCE) -> bool:
    """Whether the values a threshold clips (``clipped``: their count per position of the
    last axis, of ``seen`` values each) gather in a few positions: one position loses more
    than ``share`` of its values and more than ``ratio`` times the tensor's share, by a
    count that a position clipping at that rate reaches with probability below ``evidence``
    (so one or two clipped values among a few hundred do not decide it)."""
    if seen <= 0 or not clipped.size:
        return False
    overall = float(clipped.sum()) / (seen * clipped.size)
    rate = max(share, ratio * overall)
    worst = int(clipped.max())
    return worst > rate * seen and poisson_tail(worst, rate * seen) < evidence


@dataclasses.dataclass
class Calibration:
    """The activation quantisation of every tensor an int8 build stores: what travels into
    the generated code (as converter constants) and what the partition report shows."""

    method: str
    samples: int
    tensors: Dict[Key, TensorQuant]
    # per-channel means of every run's input, for bias correction (run key -> [C])
    means: Dict[str, np.ndarray] = dataclasses.field(default_factory=dict, compare=False)
    # made on cross-layer equalised weights (compiler/equalization.py)?
    equalized: bool = False
    # the build corrects each conv's bias for its weights' rounding (codegen/int8.py)?
    bias_correction: bool = True
    # how the build rounded the conv weights: "nearest", or "gptq" on this calibration's
    # inputs (quantization/gptq.py; its Hessians are not kept, so a Calibration read back
    # from a module cannot round again)
    weight_rounding: str = "nearest"
    # per channel, the share of every run's input values above 0 (run key -> [C]): where a
    # ReLU wrote the input, the share of its channel's values an offset before it moved
    # (codegen/int8_plan.py: _FunctionQuant.input_shift)
    positives: Dict[str, np.ndarray] = dataclasses.field(default_factory=dict, compare=False)
    # per-channel standard deviations of every run's input (run key -> [C]): with ``means``,
    # where an int8 average pool's rounding leans (_FunctionQuant.pool_bias)
    stds: Dict[str, np.ndarray] = dataclasses.field(default_factory=dict, compare=False)

    @classmethod
    def from_observer(cls, observer: Observer, method: str, samples: int) -> "Calibration":
        tensors, means, positives, stds = {}, {}, {}, {}
        for key, stats in observer.stats.items():
            if stats.channel_sum is not None and stats.count:
                means[key[0]] = stats.channel_sum / stats.count
                positives[key[0]] = stats.channel_positive / stats.count
                stds[key[0]] = np.sqrt(np.maximum(
                    stats.channel_square / stats.count - means[key[0]] ** 2, 0.0))
            tensors[key] = tensor_quant(stats, method)
            # a channel its depthwise reader amplifies and the plain threshold erased: the
            # least error of the reader's output instead (compiler/sensitivity.py)
            if method in LEAST_ERROR and key in observer.weighted and loses_amplified_channel(
                    tensors[key], observer.channel_weights[key], observer.spans[key]):
                tensors[key] = tensor_quant(observer.weighted[key], method)
        return cls(method, samples, tensors, means, positives=positives, stds=stds)

    def get(self, key: str, op_index: int) -> TensorQuant:
        try:
            return self.tensors[(key, op_index)]
        except KeyError:
            raise AccelInvalidError(
                f"calibration has no statistics for run {key} op {op_index}: it was made for "
                "another partition (same model, configuration and fuse setting needed)") from None

    def to_json(self) -> str:
        return json.dumps({"method": self.method, "samples": self.samples,
                           "tensors": [[k, i, q.scale, q.zero] + ([True] if q.reader_relu else [])
                                       for (k, i), q in sorted(self.tensors.items())],
                           "means": {k: [float(v) for v in m] for k, m in self.means.items()},
                           "positives": {k: [float(v) for v in m]
                                         for k, m in self.positives.items()},
                           "stds": {k: [float(v) for v in m] for k, m in self.stds.items()},
                           "equalized": self.equalized,
                           "bias_correction": self.bias_correction,
                           "weight_rounding": self.weight_rounding})

    @classmethod
    def from_json(cls, text: str) -> "Calibration":
        data = json.loads(text)
        return cls(data["method"], int(data["samples"]),
                   {(k, int(i)): TensorQuant(float(s), int(z), bool(relu and relu[0]))
                    for k, i, s, z, *relu in data["tensors"]},
                   {k: np.asarray(m, np.float64) for k, m in data.get("means", {}).items()},
                   bool(data.get("equalized", False)), bool(data.get("bias_correction", True)),
                   str(data.get("weight_rounding", "nearest")),
                   {k: np.asarray(m, np.float64) for k, m in data.get("positives", {}).items()},
                   {k: np.asarray(m, np.float64) for k, m in data.get("stds", {}).items()})


def examples_of(inputs, what: str) -> list:
    """Example inputs as a list of tuples of arrays: an iterable of tuples (or of single
    arrays, for one-input models)."""
    if isinstance(inputs, np.ndarray):
        raise AccelInvalidError(f"{what}: expected an iterable of example inputs (tuples of "
                                f"arrays), got one array of shape {inputs.shape}; wrap it: [x]")
    examples = [tuple(x) if isinstance(x, (tuple, list)) else (x,) for x in inputs]
    if not examples:
        raise AccelInvalidError(f"{what} needs at least one example input")
    for i, example in enumerate(examples):
        for j, x in enumerate(example):
            # a dict (ONNX Runtime's calibration readers give {name: array}) or anything else
            # NumPy makes an object array of would reach TVM as dtype `object`
            if isinstance(x, dict) or np.asarray(x).dtype.kind not in "biuf":
                raise AccelInvalidError(
                    f"{what}: input {j} of example {i} is a {type(x).__name__}, not an array "
                    "of numbers; give each example as an array (one-input models) or a tuple "
                    "of arrays in the order of main's parameters")
    return examples


#: Makes the ``progress(done, total)`` callback of a long pass from its label; None: no
#: progress. The tools set it (:mod:`accel_codegen.tools.progress`: a bar on a terminal), as
#: this layer knows nothing of terminals.
progress_factory: Optional[Callable[[str], Callable[[int, int], None]]] = None


#: a method's pass over the examples after the statistics (its progress label, the pass), by
#: method name: ``mse_outputs``'s
#: search (:func:`.output_aware.refine_for_outputs`) registers itself here when the package
#: is imported, so that this module does not import the module built on top of it
SECOND_PASSES: Dict[str, Tuple[str, Callable[..., object]]] = {}


def calibrate(run, inputs: Iterable[Tuple[np.ndarray, ...]], method: str = DEFAULT_METHOD,
              observer: Optional[Observer] = None, *, rerun=None, verify=None) -> Calibration:
    """Statistics of every accelerator tensor while ``run(*example)`` executes the fp32 build
    on each example (one pass), turned into scales by ``method``. ``observer``: one that
    gathers more in the same pass (e.g. :class:`~.gptq.HessianObserver`). Each example done
    is reported to :data:`progress_factory`'s callback, when set. ``rerun``: what runs an
    example in ``mse_positions``'s second pass (``run`` by default); a caller whose ``run``
    also records each example's outputs gives one that does not, so that it records each
    example once. ``verify(calibration, examples)``: the int8 build of a calibration's
    scales run on ``examples`` (a result per example), which a second pass that asks for it
    (``mse_outputs``) uses to check its choice against the first pass's in a real build, on
    examples it held back from its search."""
    if method not in METHODS:
        raise AccelInvalidError(f"calibration_method = {method!r} is not one of {METHODS}")
    examples = examples_of(inputs, "calibration")
    observer = observer if observer is not None else Observer()
    progress = progress_factory("calibration") if progress_factory is not None else None
    with observing(observer):
        for done, example in enumerate(examples):
            if progress is not None:
                progress(done, len(examples))
            run(*example)
    if progress is not None:
        progress(len(examples), len(examples))
    calibration = Calibration.from_observer(observer, method, len(examples))
    if method == "mse_positions":
        spare_concentrated_clipping(calibration, observer, rerun or run, examples)
    if method in SECOND_PASSES:
        label, second_pass = SECOND_PASSES[method]
        second_pass(calibration, observer, rerun or run, examples,
                    progress=progress_factory(label) if progress_factory is not None else None,
                    verify=verify)
    return calibration


def spare_concentrated_clipping(calibration: Calibration, observer: Observer, run,
                                examples) -> None:
    """The second pass of ``mse_positions``: the examples again, each position's clipped values
    counted (:class:`ClipCounter`); a tensor whose clipping gathers in a few positions
    (:func:`concentrated_clipping`) takes its whole range (``max``'s quantisation)."""
    counter = ClipCounter(calibration.tensors)
    with observing(counter):
        for example in examples:
            run(*example)
    for key, clipped in counter.clipped.items():
        if concentrated_clipping(clipped, counter.seen[key]):
            stats = observer.stats[key]
            calibration.tensors[key] = covering_quant(stats.low, stats.high)
