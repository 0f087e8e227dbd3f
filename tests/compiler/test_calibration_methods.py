"""Calibration's range choices and bias correction, alone (no TVM): what each method does to
a tensor's quantisation error, measured by quantising the tensor itself."""
import numpy as np
import pytest

from accel_codegen.compiler.codegen import int8
from accel_codegen.quantization import Calibration, Observer, TensorQuant, quantize_weights
from accel_codegen.quantization.calibration import histogram_counts


def _observed(x: np.ndarray, chunks: int = 4) -> Observer:
    observer = Observer()
    for part in np.array_split(x, chunks, axis=0):
        observer.add("f0.0 accel.conv2d", 1, np.ascontiguousarray(part))
    return observer


def _quantisation_mse(x: np.ndarray, method: str) -> float:
    quant = Calibration.from_observer(_observed(x), method, 1).get("f0.0", 1)
    return float(np.mean((quant.dequantize(quant.quantize(x)).astype(np.float64) - x) ** 2))


def _heavy_tailed(unsigned: bool) -> np.ndarray:
    """Student-t (3 degrees of freedom) values: a few outliers far out, as activations have."""
    x = np.random.default_rng(3).standard_t(3, size=(8, 16, 24, 24)).astype(np.float32)
    return np.maximum(x, 0) if unsigned else x


@pytest.mark.parametrize("unsigned", [False, True])
def test_mse_range_beats_the_fixed_ranges_on_a_heavy_tailed_tensor(unsigned):
    x = _heavy_tailed(unsigned)
    mse = _quantisation_mse(x, "mse")
    assert mse < _quantisation_mse(x, "max") * (0.98 if unsigned else 0.9)
    assert mse < _quantisation_mse(x, "percentile") * (0.2 if unsigned else 0.8)


@pytest.mark.parametrize("unsigned", [False, True])
def test_mse_threshold_is_the_brute_force_optimum(unsigned):
    """The closed-form error over the histogram picks a threshold whose real error (the tensor
    quantised with it) is within 1 % of the best of a fine sweep of thresholds."""
    x = _heavy_tailed(unsigned)
    chosen = _quantisation_mse(x, "mse")
    amax = float(np.abs(x).max())
    levels, zero = (255, -128) if unsigned else (127, 0)
    best = np.inf
    for threshold in np.geomspace(amax / 100, amax, 400):
        quant = TensorQuant(float(np.float32(threshold / levels)), zero)
        error = quant.dequantize(quant.quantize(x)).astype(np.float64) - x
        best = min(best, float(np.mean(error ** 2)))
    assert chosen <= 1.01 * best


def _skewed() -> np.ndarray:
    """A signed tensor whose negative side is a fifth of the positive one (a network's input
    after standardisation, a linear layer's logits): a symmetric range wastes codes on it."""
    x = _heavy_tailed(False)
    return np.where(x < 0, 0.2 * x, x)


def test_signed_ranges_are_asymmetric():
    """max covers exactly the seen range; mse places its zero point and step as well as a
    brute-force sweep of both (to 1 %), and beats the best symmetric quantisation."""
    x = _skewed()
    observer = _observed(x)
    stats = observer.stats[("f0.0", 1)]
    covering = Calibration.from_observer(observer, "max", 1).get("f0.0", 1)
    codes = covering.quantize(np.array([stats.low, stats.high], np.float32))
    assert -128 <= codes[0] <= -127 and 126 <= codes[1] <= 127  # no value saturates
    assert -100 < covering.zero < -60  # a sixth of the codes below zero, as of the range

    def error(quant):
        return float(np.mean((quant.dequantize(quant.quantize(x)).astype(np.float64) - x) ** 2))

    chosen = _quantisation_mse(x, "mse")
    amax = float(np.abs(x).max())
    symmetric = min(error(TensorQuant(float(np.float32(t / 127)), 0))
                    for t in np.geomspace(amax / 100, amax, 200))
    assert chosen < 0.6 * symmetric
    mse = Calibration.from_observer(observer, "mse", 1).get("f0.0", 1)
    best = min(error(TensorQuant(float(np.float32(s)), z))
               for s in np.geomspace(mse.scale / 2, mse.scale * 2, 60)
               for z in range(-128, 0, 2))
    assert chosen <= 1.01 * best


def test_concat_and_constant_ranges_cover_their_inputs():
    """A concat's quantisation covers every input's range (unsigned only when all are), and a
    constant's covers its own values: nothing saturates that did not before."""
    unsigned = TensorQuant(0.02, -128)
    signed = TensorQuant(0.01, -40)
    assert int8.concat_quant([unsigned, TensorQuant(0.03, -128)]) == TensorQuant(
        float(np.float32(0.03)), -128)
    both = int8.concat_quant([unsigned, signed])
    for q in (unsigned, signed):
        ends = q.dequantize(np.array([-128, 127], np.int8))
        assert np.all(np.abs(both.dequantize(both.quantize(ends)) - ends) <= both.scale / 2)
    value = np.array([-0.3, 0.0, 2.5], np.float32)
    quant = int8.range_quant(value)
    assert np.all(np.abs(quant.dequantize(quant.quantize(value)) - value) <= quant.scale / 2)
    assert int8.range_quant(np.abs(value)).zero == -128


def test_mse_range_ignores_exact_zeros():
    """A ReLU's zeros are exact at any scale: adding more of them leaves the threshold."""
    x = np.abs(_heavy_tailed(False))
    with_zeros = np.concatenate([x, np.zeros_like(x), np.zeros_like(x)])
    quant = Calibration.from_observer(_observed(x), "mse", 1).get("f0.0", 1)
    quant_zeros = Calibration.from_observer(_observed(with_zeros, 12), "mse", 1).get("f0.0", 1)
    assert quant_zeros.zero == quant.zero == -128
    assert quant_zeros.scale == pytest.approx(quant.scale, rel=0.03)
    assert _observed(with_zeros, 12).stats[("f0.0", 1)].zeros == 2 * x.size


def test_histogram_counts_are_numpys_histogram():
    magnitudes = np.abs(np.random.default_rng(4).standard_normal(50_000)).astype(np.float32)
    top = float(magnitudes.max())
    expected, _ = np.histogram(magnitudes, bins=2048, range=(0.0, top))
    counts = histogram_counts(magnitudes.copy(), top)
    assert counts.sum() == magnitudes.size
    assert np.abs(counts - expected).sum() <= 4  # float32 scaling against float64 bin edges


def test_bias_correction_removes_a_planted_mean_shift():
    """Weights that all round the same way (each 0.4 step below its code) shift every output
    channel's mean on inputs with a non-zero mean; the corrected bias takes the shift out."""
    rng = np.random.default_rng(5)
    k, c = 8, 16
    step = rng.uniform(0.001, 0.01, (k, 1))
    planted = rng.integers(-120, 120, (k, c)).astype(np.float64)
    planted[:, 0] = 127  # each channel's largest weight, exact: it sets the step
    weights = np.where(planted == 127, planted, planted - 0.4) * step
    codes, scales = quantize_weights(weights.reshape(k, c, 1, 1))
    assert np.array_equal(codes[:, :, 0, 0], planted) and np.allclose(scales, step[:, 0])
    x = rng.standard_normal((4096, c)) * 0.5 + rng.uniform(1, 3, c)  # channel means 1..3
    exact = x @ weights.T
    rounded = x @ (codes[:, :, 0, 0] * scales.reshape(-1, 1)).T
    shift = int8.bias_correction(x.mean(axis=0), 1, codes, scales, weights.reshape(k, c, 1, 1))
    before = np.abs((rounded - exact).mean(axis=0))
    after = np.abs((rounded - shift - exact).mean(axis=0))
    assert np.all(before > 0.4 * step[:, 0] * 15)  # the planted shift: 0.4 step x 15 x mean
    assert after.max() < 1e-9 * before.max()


def _calibrated(x: np.ndarray, method: str, monkeypatch) -> TensorQuant:
    """``calibrate`` on ``x`` as one run's output (key f0.0, op 1), each pass handing its
    observer the tensor as the C library's observer hook would."""
    from contextlib import contextmanager

    from accel_codegen.quantization import calibration

    current = []

    @contextmanager
    def observing(observer):
        current.append(observer)
        yield
        current.pop()

    monkeypatch.setattr(calibration, "observing", observing)
    result = calibration.calibrate(lambda example: current[-1].add("f0.0 accel.conv2d", 1,
                                                                   example.copy()),
                                   [(part,) for part in np.array_split(x, 2, axis=0)], method)
    return result.get("f0.0", 1)


def _clipped(x: np.ndarray, quant: TensorQuant) -> np.ndarray:
    """Per position of the last axis, the values ``quant`` clips."""
    lo, hi = (-128 - quant.zero) * quant.scale, (127 - quant.zero) * quant.scale
    return ((x < lo) | (x > hi)).reshape(-1, x.shape[-1]).sum(axis=0)


def test_mse_positions_keeps_the_range_of_clipping_gathered_in_one_position(monkeypatch):
    """A feature map whose first column (a border, a text line's end) reaches up to 1.5
    times the others' range on half its rows: mse clips that column's largest values (5 of
    its 192) and no other column's; mse_positions sees the clipping gathered in one position
    and takes the whole range. A long tail whose largest value alone is clipped is no such
    evidence: mse's threshold stays. A heavy tail spread over every position keeps mse's
    threshold."""
    from accel_codegen.quantization.calibration import concentrated_clipping

    rng = np.random.default_rng(5)
    edge = np.random.default_rng(4).uniform(0, 1, (4, 8, 6, 64)).astype(np.float32)
    rows = rng.random(edge.shape[:-1]) < 0.5
    edge[..., 0][rows] = rng.uniform(1.0, 1.5, int(rows.sum()))
    mse = _calibrated(edge, "mse", monkeypatch)
    clipped = _clipped(edge, mse)
    assert clipped[0] >= 5 and not clipped[1:].any(), clipped
    assert concentrated_clipping(clipped, edge.size // edge.shape[-1])
    positions = _calibrated(edge, "mse_positions", monkeypatch)
    assert not _clipped(edge, positions).any() and positions.scale > mse.scale
    # one clipped value: the tail's largest, in column 0 as it must be somewhere
    tail = np.abs(np.random.default_rng(4).standard_normal((4, 8, 6, 64))).astype(np.float32)
    rows = rng.random(tail.shape[:-1]) < 0.2
    tail[..., 0][rows] = 3 + rng.exponential(16.0, int(rows.sum()))
    mse = _calibrated(tail, "mse", monkeypatch)
    clipped = _clipped(tail, mse)
    assert clipped.sum() == clipped[0] == 1, clipped
    assert concentrated_clipping(clipped, tail.size // tail.shape[-1], evidence=1.01)
    assert _calibrated(tail, "mse_positions", monkeypatch) == mse
    # Student-t values everywhere: mse clips a few, spread; the positions' pass agrees
    spread = np.random.default_rng(3).standard_t(3, size=(8, 16, 24, 24)).astype(np.float32)
    mse = _calibrated(spread, "mse", monkeypatch)
    assert _clipped(spread, mse).sum() > 0
    assert _calibrated(spread, "mse_positions", monkeypatch) == mse
    # the rule itself: a position's share above 1e-3 and 5 x the tensor's
    assert concentrated_clipping(np.array([10] + [0] * 39), 1000)
    assert not concentrated_clipping(np.array([10, 0, 0, 0]), 1000)  # 1 % < 5 x 0.25 %
    assert not concentrated_clipping(np.array([10] * 8), 1000)
    assert not concentrated_clipping(np.zeros(8, np.int64), 1000)
    assert not concentrated_clipping(np.array([1] + [0] * 7), 10_000)  # 0.01 % < 0.1 %


def test_mse_positions_needs_evidence_of_a_count():
    """One or two clipped values among a position's few hundred are above the 0.1 % share
    by chance alone (2 calibration lines give a recogniser's token 240 values): the count
    must be one a position clipping at the threshold's rate reaches with probability below
    1e-3, which asks 5 of 240 here, and about twice the rate's count of 10 where a position
    holds 10,000 values."""
    import math

    from accel_codegen.quantization.calibration import concentrated_clipping, poisson_tail

    def tail(k, mean):  # the direct sum, for small means
        return 1 - sum(math.exp(-mean) * mean ** i / math.factorial(i) for i in range(k))

    for k, mean in ((1, 0.24), (4, 0.24), (21, 10.0), (3, 7.5), (0, 2.0)):
        assert math.isclose(poisson_tail(k, mean), tail(k, mean), rel_tol=1e-9, abs_tol=1e-15)
    assert poisson_tail(5000, 4000.0) < 1e-40 and poisson_tail(3000, 4000.0) == 1.0
    one = np.array([1] + [0] * 39)
    assert concentrated_clipping(one, 240, evidence=1.01)  # the rule without the evidence
    assert not concentrated_clipping(one, 240)
    assert not concentrated_clipping(4 * one, 240)
    assert concentrated_clipping(5 * one, 240)
    assert not concentrated_clipping(15 * one, 10_000)  # above the 10 of 0.1 %, by chance
    assert concentrated_clipping(25 * one, 10_000)
