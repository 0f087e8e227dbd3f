"""Rounding int8 weights on the calibration data: GPTQ (Frantar et al., "GPTQ: Accurate
Post-Training Quantization for Generative Pre-trained Transformers", 2022).

A layer's output error from rounding its weights W to W + E is E X for its input X; over the
calibration inputs its expected square is sum_k E_k H E_k^T with H = X^T X (X: one row per
output position, one column per weight of a row: C/groups * R * S for a convolution, the
im2col'd receptive field). Nearest rounding minimises each |E| alone; GPTQ rounds the columns
of W one by one and moves each column's error onto the columns not yet rounded, in the
proportions that H's inverse gives (its upper Cholesky factor U: the update of row k after
column i is -e_ki / U_ii * U_i,i+1:), so that the correlated inputs absorb it. Rows are
independent given H, so every output channel of a layer (or of one group) is done at once.

NVDLA's arithmetic is unchanged: the per-channel scales are the nearest rounding's (each row's
largest |w| / 127), chosen before, and that largest weight keeps its code +-127, so the
rounded weights have the very same scales; only which neighbouring code the others take moves.

H is gathered during the calibration pass (:class:`HessianObserver`, from each run's fp32
input: the layer sees the fp32 model's input, not the quantised model's) on at most
``MAX_POSITIONS`` output positions per example, drawn at random, for layers of at most
``MAX_COLUMNS`` columns (H's memory is columns^2 * 4 bytes). :func:`gptq_codes` skips (rounds to
nearest) a layer whose H has fewer than ``MIN_ROWS_PER_COLUMN`` rows per column: there it would
fit the calibration inputs rather than the input distribution.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Mapping, Optional, Tuple

import numpy as np

from ..sim.labels import label_key
from ..sim.observer import INPUT
from .calibration import Observer
from .encoding import WEIGHT_MAX, quantize_weights, round_half_away

ROUNDINGS = ("gptq", "nearest")
#: output positions of one example that enter a layer's H (random, without replacement)
MAX_POSITIONS = 256
#: layers with more weights per row keep nearest rounding (their H would not fit memory)
MAX_COLUMNS = 4608
#: H from fewer calibration rows than this many per column: nearest rounding. Measured on
#: ResNet-18 (each layer's error on 16 other inputs, docs/ptq.md): 5-14 rows per column
#: gained 0.7-1.7 dB over nearest, 2.7 gained 0.25-0.43 dB, 0.34-0.68 lost 2.5-3.0 dB (GPTQ
#: fits the few rows it has)
MIN_ROWS_PER_COLUMN = 2.0
#: dampening: this fraction of H's mean diagonal is added to its diagonal (as the paper)
DAMPING = 0.01
#: columns rounded between two updates of the rest ("lazy batch" updates, as the paper)
BLOCK = 128


@dataclasses.dataclass(frozen=True)
class ConvGeometry:
    """What im2col needs of a convolution (a dense layer: a 1x1 convolution)."""

    weight_shape: Tuple[int, int, int, int]  # [K, C/groups, R, S]
    stride: Tuple[int, int] = (1, 1)
    padding: Tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right
    dilation: Tuple[int, int] = (1, 1)
    groups: int = 1

    @property
    def columns(self) -> int:
        _, c, r, s = self.weight_shape
        return c * r * s


@dataclasses.dataclass
class Hessian:
    """sum X^T X of one layer's input, per group [groups, columns, columns], and the column
    sums [groups, columns], over ``rows`` rows."""

    matrix: np.ndarray
    sums: np.ndarray
    rows: int = 0

    def means(self) -> np.ndarray:
        return self.sums / max(self.rows, 1)

    def second_moments(self, centred: bool) -> np.ndarray:
        """X^T X in float64, or the centred sum (X - mean)^T (X - mean)."""
        h = self.matrix.astype(np.float64)
        if centred:
            mean = self.means()
            h -= self.rows * mean[:, :, None] * mean[:, None, :]
        return h


def receptive_fields(x: np.ndarray, geometry: ConvGeometry, positions: Optional[int] = None,
                     rng: Optional[np.random.Generator] = None) -> np.ndarray:
    """im2col of ``x`` [N, C, H, W]: [groups, rows, C/groups * R * S], one row per output
    position (at most ``positions`` of each example, drawn by ``rng``), its columns in the order
    of a weight row ``w[k].reshape(-1)``; padding reads zero."""
    n = x.shape[0]
    _, c_group, r, s = geometry.weight_shape
    groups = geometry.groups
    top, left, bottom, right = geometry.padding
    (sh, sw), (dh, dw) = geometry.stride, geometry.dilation
    padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    out_h, out_w = _output_size(x.shape, geometry)
    chosen = np.arange(out_h * out_w)
    if positions is not None and positions < len(chosen):
        chosen = np.sort((rng or np.random.default_rng(0)).choice(len(chosen), positions,
                                                                   replace=False))
    oy, ox = np.divmod(chosen, out_w)
    # [N, C, R*S, P]: each kernel tap's input at every chosen output position
    taps = np.stack([padded[:, :, oy * sh + i * dh, ox * sw + j * dw]
                     for i in range(r) for j in range(s)], axis=2)
    rows = taps.transpose(0, 3, 1, 2).reshape(n * len(chosen), groups, c_group * r * s)
    return np.ascontiguousarray(rows.transpose(1, 0, 2))


def _output_size(shape, geometry: ConvGeometry) -> Tuple[int, int]:
    _, _, r, s = geometry.weight_shape
    top, left, bottom, right = geometry.padding
    (sh, sw), (dh, dw) = geometry.stride, geometry.dilation
    return ((shape[2] + top + bottom - dh * (r - 1) - 1) // sh + 1,
            (shape[3] + left + right - dw * (s - 1) - 1) // sw + 1)


def _positions(shape, geometry: ConvGeometry) -> int:
    out_h, out_w = _output_size(shape, geometry)
    return out_h * out_w


class HessianObserver(Observer):
    """The calibration observer that also sums each convolution run's H = X^T X (float32:
    the sum of a few dozen examples' products loses nothing GPTQ can use)."""

    def __init__(self, convs: Mapping[str, ConvGeometry], examples: int, seed: int = 0) -> None:
        super().__init__()
        self.convs = {k: g for k, g in convs.items() if g.columns <= MAX_COLUMNS}
        self.examples = examples  # how many the pass will run: layers with too few rows skip
        self.hessians: Dict[str, Hessian] = {}
        self.rng = np.random.default_rng(seed)

    def add(self, label: str, op_index: int, x: np.ndarray) -> None:
        super().add(label, op_index, x)
        key = label_key(label)
        geometry = self.convs.get(key)
        if op_index != INPUT or geometry is None or x.dtype != np.float32 or \
                x.shape[1] != geometry.weight_shape[1] * geometry.groups:
            return
        positions = min(MAX_POSITIONS, _positions(x.shape, geometry))
        if self.examples * x.shape[0] * positions < MIN_ROWS_PER_COLUMN * geometry.columns:
            del self.convs[key]  # GPTQ would round it to nearest: do not gather its H
            return
        rows = receptive_fields(np.nan_to_num(x), geometry, MAX_POSITIONS, self.rng)
        hessian = self.hessians.get(key)
        if hessian is None:
            hessian = self.hessians[key] = Hessian(
                np.zeros((geometry.groups, geometry.columns, geometry.columns), np.float32),
                np.zeros((geometry.groups, geometry.columns)))
        for group, block in enumerate(rows):
            hessian.matrix[group] += block.T @ block
            hessian.sums[group] += block.sum(axis=0, dtype=np.float64)
        hessian.rows += rows.shape[1]


def gptq_codes(weights: np.ndarray, hessian: Hessian, groups: int = 1, centred: bool = False
               ) -> Tuple[np.ndarray, np.ndarray]:
    """Per-output-channel int8 codes of ``weights`` [K, C/groups, R, S] (float64, the values
    the layer multiplies by) rounded by GPTQ with ``hessian``, and the scales, which are
    :func:`quantize_weights`'s. Nearest rounding where H has too few rows (see the module).
    ``centred``: minimise the error about its mean (the caller corrects the mean shift,
    :func:`mean_shift`, in the bias), else the whole error."""
    codes, scales = quantize_weights(weights)
    k = weights.shape[0]
    columns = int(np.prod(weights.shape[1:]))
    if hessian.rows < MIN_ROWS_PER_COLUMN * columns or \
            hessian.matrix.shape != (groups, columns, columns):
        return codes, scales
    rows = weights.reshape(groups, k // groups, columns).astype(np.float64)
    steps = scales.reshape(groups, k // groups, 1)
    # each row's largest |w| keeps its code +-127: that is what fixes the row's scale; not in
    # a row whose scale quantize_weights floored (a negligible channel: its largest |w| is
    # far below one step, its codes 0 or small)
    anchor = np.zeros(rows.shape, bool)
    top = np.abs(rows).argmax(axis=2)
    own = np.abs(rows).max(axis=2) / WEIGHT_MAX == steps[..., 0]
    np.put_along_axis(anchor, top[..., None], own[..., None], axis=2)
    result = np.empty(rows.shape, np.int8)
    h = hessian.second_moments(centred)
    for group in range(groups):
        result[group] = _round_group(rows[group], steps[group], anchor[group], h[group])
    return result.reshape(codes.shape), scales


def mean_shift(codes: np.ndarray, scales: np.ndarray, weights: np.ndarray, hessian: Hessian,
               groups: int = 1) -> np.ndarray:
    """[K]: how much rounding ``weights`` to ``codes`` moves each output channel's mean over
    the calibration inputs (borders, where padding reads zero, included)."""
    k = weights.shape[0]
    error = codes.astype(np.float64) * scales.reshape(-1, *(1,) * (weights.ndim - 1)) - weights
    error = error.reshape(groups, k // groups, -1)
    return np.einsum("gkc,gc->gk", error, hessian.means()).reshape(-1)


def _round_group(w: np.ndarray, step: np.ndarray, anchor: np.ndarray, h: np.ndarray
                 ) -> np.ndarray:
    """GPTQ on one group: w [rows, columns], step [rows, 1], H [columns, columns]."""
    w = w.copy()
    columns = w.shape[1]
    diagonal = np.diag(h).copy()
    dead = diagonal <= 0  # an input never non-zero: its weights round to nearest, no feedback
    h[dead, dead] = 1.0
    h[np.diag_indices(columns)] += DAMPING * float(np.mean(np.diag(h)))
    u = _inverse_cholesky_upper(h)
    codes = np.empty(w.shape, np.int8)
    for start in range(0, columns, BLOCK):
        end = min(start + BLOCK, columns)
        errors = np.empty((w.shape[0], end - start))
        for i in range(start, end):
            column = w[:, i]
            q = np.clip(round_half_away(column / step[:, 0]), -WEIGHT_MAX, WEIGHT_MAX)
            q = np.where(anchor[:, i], np.sign(column) * WEIGHT_MAX, q)
            codes[:, i] = q
            error = (column - q * step[:, 0]) / u[i, i]
            errors[:, i - start] = error
            w[:, i + 1:end] -= np.outer(error, u[i, i + 1:end])
        w[:, end:] -= errors @ u[start:end, end:]
    return codes


def _inverse_cholesky_upper(h: np.ndarray) -> np.ndarray:
    """The upper Cholesky factor U of H^-1 (H^-1 = U^T U), as GPTQ uses it: with H = R R^T,
    R upper (the Cholesky factor of H with rows and columns reversed, reversed back),
    U = R^-1. One factorisation and one triangular inverse."""
    r = np.linalg.cholesky(h[::-1, ::-1])[::-1, ::-1]
    return _upper_inverse(np.ascontiguousarray(r))


def _upper_inverse(r: np.ndarray) -> np.ndarray:
    """The inverse of an upper triangular matrix, by halves (the work in matrix products)."""
    n = len(r)
    if n <= 64:
        return np.triu(np.linalg.inv(r))
    m = n // 2
    a, d = _upper_inverse(r[:m, :m]), _upper_inverse(r[m:, m:])
    result = np.zeros_like(r)
    result[:m, :m], result[m:, m:] = a, d
    result[:m, m:] = -(a @ r[:m, m:]) @ d
    return result
