"""Layer norm, softmax, log_softmax and softsign as engine passes
(accel_codegen/sim/decompose.py).

On the simulator the decompositions equal their NumPy reference (reference.run_decomposition)
bit for bit in fp32 and fp16, the sums as BDMA + SDP trees or as CONVs (whose order the
reference follows: csrc/conv/f32_order.h); fp32 is within 1e-5 of the output scale of PyTorch (or twice
PyTorch's own error against float64); fp16 within the bounds stated here from the LUT's
(accel.h) and the halves' rounding at every pass.
"""
import math

import numpy as np
import pytest

from accel_codegen import AccelInvalidError, Device, estimate_chain
from accel_codegen import reference as ref
from accel_codegen.sim import decompose as dc
from conftest import assert_same

torch = pytest.importorskip("torch")
DEVICE = Device("nv_full", num_threads=2)
#: (channels, tokens): odd and even halvings, a power of two, ViT-Ti's 192 channels
SHAPES = [(13, 9), (48, 21), (64, 5), (192, 7)]


def _layer_norm64(x, gamma, beta, eps):
    x = x.astype(np.float64)
    mean = x.mean(1, keepdims=True)
    var = ((x - mean) ** 2).mean(1, keepdims=True)
    normed = (x - mean) / np.sqrt(var + eps)
    return normed * gamma.astype(np.float64)[None, :, None, None] + \
        beta.astype(np.float64)[None, :, None, None]


def _softmax64(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True), e.sum(1, keepdims=True)


def _inputs(rng, c, w, dtype, offset=0.5):
    x = (rng.standard_normal((1, c, 1, w)) * 2 + offset).astype(dtype)
    gamma = (1 + 0.3 * rng.standard_normal(c)).astype(dtype)
    beta = (0.2 * rng.standard_normal(c)).astype(dtype)
    return x, gamma, beta


def _torch_layer_norm(x, gamma, beta, eps):
    t = torch.from_numpy(np.ascontiguousarray(x)).permute(0, 2, 3, 1)  # channels last
    y = torch.nn.functional.layer_norm(t, (x.shape[1],), torch.from_numpy(gamma),
                                       torch.from_numpy(beta), eps)
    return y.permute(0, 3, 1, 2).numpy()


@pytest.mark.parametrize("reduce", ["tree", "conv", "conv1"])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("c,w", SHAPES)
def test_passes_equal_the_reference_bit_for_bit(c, w, precision, reduce, rng):
    dtype = dc.dtype_for(precision)
    x, gamma, beta = _inputs(rng, c, w, dtype)
    for decomposition in (dc.layer_norm_passes(x.shape, gamma, beta, 1e-5, precision, reduce),
                          dc.softmax_passes(x.shape, precision, reduce),
                          dc.log_softmax_passes(x.shape, precision, reduce)):
        y, stats = dc.run_passes(DEVICE, decomposition, x)
        assert_same(y, ref.run_decomposition(decomposition, x), decomposition.layer)
        assert len(stats) == len(decomposition.passes)
        assert y.shape == x.shape and y.dtype == dtype


#: ViT-Ti's token tensor (192 channels, 197 tokens: the CONVs' dot-product tail of 5), odd
#: channels over 50 tokens, two images of 21 tokens, a plane of 3x7
CONV_SHAPES = [(1, 192, 1, 197), (1, 37, 1, 50), (2, 48, 1, 21), (1, 40, 3, 7)]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("shape", CONV_SHAPES)
def test_the_conv_form_equals_the_reference_bit_for_bit(shape, precision, rng):
    """The sums as CONVs (what the compiler emits for a layer norm: fp16's broadcasting
    ones, "conv", and fp32's to one channel, "conv1") sum in the library's fp32 order, which
    the reference follows (reference.conv2d_f32): the same bits."""
    dtype = dc.dtype_for(precision)
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
    gamma = (1 + 0.3 * rng.standard_normal(shape[1])).astype(dtype)
    beta = (0.2 * rng.standard_normal(shape[1])).astype(dtype)
    for reduce in ("conv", "conv1"):
        for decomposition in (dc.layer_norm_passes(shape, gamma, beta, 1e-5, precision, reduce),
                              dc.softmax_passes(shape, precision, reduce),
                              dc.log_softmax_passes(shape, precision, reduce)):
            y, _ = dc.run_passes(DEVICE, decomposition, x)
            assert_same(y, ref.run_decomposition(decomposition, x),
                        f"{decomposition.layer}, {reduce}")


def test_a_wide_sum_broadcast_is_two_passes_of_the_same_bits(monkeypatch, rng):
    """Beyond MAX_SUM_BROADCAST_WEIGHTS the fp16 sums are a CONV to one channel and a
    broadcast (a group norm over 32 channels of 32x32 made a 32768 x 32768 CONV of ones, 2 GiB,
    in a MemoryError): the same output bits as the one C -> C pass, and the reference's."""
    shape = (1, 48, 1, 9)
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(np.float16)
    gamma = (1 + 0.3 * rng.standard_normal(48)).astype(np.float16)
    beta = (0.2 * rng.standard_normal(48)).astype(np.float16)
    build = (lambda: dc.layer_norm_passes(shape, gamma, beta, 1e-5, "fp16", "conv"),
             lambda: dc.softmax_passes(shape, "fp16", "conv"))
    one_pass = [dc.run_passes(DEVICE, make(), x)[0] for make in build]
    monkeypatch.setattr(dc, "MAX_SUM_BROADCAST_WEIGHTS", 48 * 48 - 1)
    for make, before in zip(build, one_pass):
        decomposition = make()
        assert any(p.role.endswith(".sum") for p in decomposition.passes), decomposition.layer
        y, _ = dc.run_passes(DEVICE, decomposition, x)
        assert_same(y, before, decomposition.layer)
        assert_same(y, ref.run_decomposition(decomposition, x), decomposition.layer)


@pytest.mark.parametrize("reduce", ["tree", "conv", "conv1"])
@pytest.mark.parametrize("c,w", SHAPES)
def test_fp32_is_within_1e_5_of_pytorch(c, w, reduce, rng):
    """1e-5 of the output scale, or twice PyTorch fp32's own error against float64."""
    x, gamma, beta = _inputs(rng, c, w, np.float32, offset=3.0)
    y, _ = dc.run_passes(DEVICE, dc.layer_norm_passes(x.shape, gamma, beta, 1e-5, "fp32",
                                                      reduce), x)
    exact = _layer_norm64(x, gamma, beta, 1e-5)
    theirs = _torch_layer_norm(x, gamma, beta, 1e-5)
    allowed = max(1e-5 * np.abs(exact).max(), 2 * np.abs(theirs - exact).max())
    assert np.abs(y - exact).max() <= allowed
    assert np.abs(y - theirs).max() <= allowed + np.abs(theirs - exact).max()
    logits = (rng.standard_normal((1, c, 1, w)) * 6).astype(np.float32)
    y, _ = dc.run_passes(DEVICE, dc.softmax_passes(logits.shape, "fp32", reduce), logits)
    exact, _ = _softmax64(logits)
    theirs = torch.softmax(torch.from_numpy(logits), 1).numpy()
    allowed = max(1e-5 * np.abs(exact).max(), 2 * np.abs(theirs - exact).max())
    assert np.abs(y - exact).max() <= allowed


@pytest.mark.parametrize("reduce", ["tree", "conv", "conv1"])
@pytest.mark.parametrize("c,w", SHAPES)
def test_fp32_log_softmax_is_within_1e_5_of_pytorch(c, w, reduce, rng):
    """x - (max + ln(sum)): within 1e-5 of the output scale (or twice PyTorch's own error
    against float64) of float64 and of torch.log_softmax."""
    logits = (rng.standard_normal((1, c, 1, w)) * 6).astype(np.float32)
    y, _ = dc.run_passes(DEVICE, dc.log_softmax_passes(logits.shape, "fp32", reduce), logits)
    x = logits.astype(np.float64)
    m = x.max(1, keepdims=True)
    exact = x - m - np.log(np.exp(x - m).sum(1, keepdims=True))
    theirs = torch.log_softmax(torch.from_numpy(logits), 1).numpy()
    allowed = max(1e-5 * np.abs(exact).max(), 2 * np.abs(theirs - exact).max())
    assert np.abs(y - exact).max() <= allowed
    assert np.abs(y - theirs).max() <= allowed + np.abs(theirs - exact).max()


def fp16_log_softmax_bound(c: int, m: np.ndarray, sums: np.ndarray, y64: np.ndarray
                           ) -> np.ndarray:
    """Per element: ln(sum)'s error is the sum's relative error (the exp LUT's bound in each
    term (exp's table's, 1.7e-4 + 1.5e-3 e^t, looser than softmax_exp's: accel.h), C 1.7e-4 / S
    + 1.5e-3 + 2^-11, and the tree's ceil(log2 C)
    half roundings) plus the log table's (accel.h: A = 1.2e-4 for S below 9, on LO, 6.0e-2
    above, with 2^-10 |ln S| + 2^-24 for its half entries and output), then the halves of
    max + ln S and of the result, 2^-11 each of their magnitudes."""
    levels = math.ceil(math.log2(c))
    log_sum = np.log(sums)
    table = np.where(sums < 9, 1.2e-4, 6.0e-2) + 2**-10 * log_sum + 2**-24
    return (c * 1.7e-4 / sums + 1.5e-3 + (levels + 1) * 2**-11 + table +
            2**-11 * (np.abs(m + log_sum) + np.abs(y64)))


@pytest.mark.parametrize("c,w", SHAPES)
def test_fp16_log_softmax_is_within_its_bound(c, w, rng):
    """Logits of scale 4 (sums mostly below 9, on the log's LO table) and of scale 0.5 (sums
    near C: its LE octaves for C >= 9)."""
    for scale in (4.0, 0.5):
        logits = (rng.standard_normal((1, c, 1, w)) * scale).astype(np.float16)
        y, _ = dc.run_passes(DEVICE, dc.log_softmax_passes(logits.shape, "fp16"), logits)
        x = logits.astype(np.float64)
        m = x.max(1, keepdims=True)
        sums = np.exp(x - m).sum(1, keepdims=True)
        exact = x - m - np.log(sums)
        excess = np.abs(y.astype(np.float64) - exact) - fp16_log_softmax_bound(c, m, sums,
                                                                                 exact)
        assert excess.max() <= 0, (c, scale, excess.max())


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_softsign_is_the_reference_and_within_its_bound(precision, rng):
    """x / (1 + |x|) as |x| = max(-x, x), 1 / (1 + |x|) through the reciprocal's LUT (FP16:
    its Newton steps) and the product: bit for bit the reference; fp32 within 2 ulp of
    softsign in float64 (1.85 measured: two roundings after the sum's, where PyTorch's
    division has one), fp16 over every finite half within 5 2^-11 |y| + 2^-24 (4.97
    measured), and torch's within 2 ulp in fp32."""
    if precision == "fp16":
        halves = np.arange(-2**15, 2**15).astype(np.int16).view(np.float16)
        halves = halves[np.isfinite(halves)]
        x = halves[:(halves.size // 64) * 64].reshape(1, 64, 1, -1)
    else:
        x = (rng.standard_normal((2, 48, 3, 50)) * 10).astype(np.float32)
        x.flat[:4] = [0.0, -0.0, 1e30, -3e38]
    decomposition = dc.softsign_passes(x.shape, precision)
    y, _ = dc.run_passes(DEVICE, decomposition, x)
    assert_same(y, ref.run_decomposition(decomposition, x), f"{precision} softsign")
    t = x.astype(np.float64)
    exact = t / (1 + np.abs(t))
    error = np.abs(y.astype(np.float64) - exact)
    if precision == "fp32":
        _, exponent = np.frexp(np.abs(exact))
        ulp = np.maximum(np.ldexp(1.0, exponent - 24), 2.0 ** -149)
        assert (error / ulp).max() <= 2.0
        theirs = torch.nn.functional.softsign(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(y, theirs, rtol=2.5e-7, atol=0)
    else:
        assert np.all(error <= 5 * 2**-11 * np.abs(exact) + 2**-24)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_reciprocal_of_a_floored_value_is_the_reference_and_within_its_bound(precision):
    """1 / max(x, floor) as the SDP's clip at the floor and the reciprocal's LUT (FP16: its
    Newton steps): bit for bit the reference; fp32 IEEE's 1 / max(x, floor) exactly, fp16
    over every finite half within 2^-10 |y| + 2^-24 (the table alone, one LE entry an octave, was off
    by up to 12.5 %); a floor that is not positive refused."""
    floor = 2.0 ** -10 if precision == "fp16" else 1e-9
    if precision == "fp16":
        halves = np.arange(-2**15, 2**15).astype(np.int16).view(np.float16)
        halves = halves[np.isfinite(halves)]
        x = halves[:(halves.size // 64) * 64].reshape(1, 64, 1, -1)
    else:
        x = np.random.default_rng(3).uniform(-2, 300, (2, 48, 1, 1)).astype(np.float32)
    decomposition = dc.reciprocal_passes(x.shape, floor, precision)
    y, _ = dc.run_passes(DEVICE, decomposition, x)
    assert_same(y, ref.run_decomposition(decomposition, x), f"{precision} reciprocal")
    held = np.maximum(x.astype(np.float64), np.float64(np.float32(floor)))
    if precision == "fp32":
        assert_same(y, (np.float32(1.0) / held.astype(np.float32)), "fp32 1 / max(x, floor)")
    else:
        exact = 1.0 / held
        assert np.all(np.abs(y.astype(np.float64) - exact) <= 2.0 ** -10 * np.abs(exact) +
                      2.0 ** -24)  # a half's subnormal step below 2^-14
    with pytest.raises(AccelInvalidError, match="floor"):
        dc.reciprocal_passes(x.shape, 0.0, precision)


def fp16_layer_norm_bound(c: int) -> float:
    """In units of 2^-11 of the output scale max |y|: the halves' roundings of d, of the
    product and of the shift (1.5), the mean's and the variance's trees (ceil(log2 C) levels
    of half rounding each, the variance's halved by the square root), 1/C as a half, and
    rsqrt after the Newton steps (the LE table's 4.6 % squared twice is below 1e-5; the
    steps' own roundings about 3): measured at most 4.1 on these inputs."""
    return 1.5 + 1.5 * math.ceil(math.log2(c)) + 4


def fp16_softmax_bound(c: int, y64: np.ndarray, sums: np.ndarray, levels: int = 0
                       ) -> np.ndarray:
    """Per element: softmax_exp's table bound (accel.h: 1e-5 + 1.1e-3 e^t, with the half
    output 2^-11 e^t more) in each e_i and in the sum S of C of them (>= 1: the max term is
    e^0), the sum's ``levels`` roundings to half (a tree's ceil(log2 C); a CONV's fp32
    accumulator: 0), the output's rounding (1 / S as its half plus the last Newton step's
    remainder: a few 2^-22): y (2.2e-3 + (levels + 3) 2^-11 + C 1e-5 / S) + 1e-5 / S
    (measured at most 0.8 of it, C from 1 to 1000, logits of std 0.5 to 8)."""
    return y64 * (2.2e-3 + (levels + 3) * 2**-11 + c * 1e-5 / sums) + 1e-5 / sums


@pytest.mark.parametrize("c,w", SHAPES)
def test_fp16_is_within_its_bound(c, w, rng):
    for offset in (0.5, 60.0):  # 60: |mean| >> std, where 1/C as a half would show
        x, gamma, beta = _inputs(rng, c, w, np.float16, offset)
        y, _ = dc.run_passes(DEVICE, dc.layer_norm_passes(x.shape, gamma, beta, 1e-5, "fp16"),
                             x)
        exact = _layer_norm64(x, gamma, beta, 1e-5)
        error = np.abs(y.astype(np.float64) - exact).max() / np.abs(exact).max() / 2**-11
        assert error <= fp16_layer_norm_bound(c), (c, offset, error)
    logits = (rng.standard_normal((1, c, 1, w)) * 4).astype(np.float16)
    exact, sums = _softmax64(logits)
    for reduce, levels in (("conv1", 0), ("tree", math.ceil(math.log2(c)))):  # conv1: the
        #                                                             compiler's (fp32_sums)
        y, _ = dc.run_passes(DEVICE, dc.softmax_passes(logits.shape, "fp16", reduce), logits)
        excess = np.abs(y.astype(np.float64) - exact) - fp16_softmax_bound(c, exact, sums,
                                                                           levels)
        assert excess.max() <= 0, reduce


def test_newton_steps_are_what_fp16_needs(rng):
    """Without the Newton steps fp16 is as coarse as the LE table (one entry per octave);
    with them within the bound above."""
    x, gamma, beta = _inputs(rng, 48, 21, np.float16)
    exact = _layer_norm64(x, gamma, beta, 1e-5)
    coarse = ref.run_decomposition(dc.layer_norm_passes(x.shape, gamma, beta, 1e-5, "fp16",
                                                        newton=0), x)
    fine = ref.run_decomposition(dc.layer_norm_passes(x.shape, gamma, beta, 1e-5, "fp16"), x)
    scale = np.abs(exact).max() * 2**-11
    assert np.abs(coarse - exact).max() / scale > 20
    assert np.abs(fine - exact).max() / scale <= fp16_layer_norm_bound(48)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_constant_token_gives_beta(precision):
    """Variance 0: rsqrt(eps) (eps the SDP's shift; in fp16 v y is formed before y^2, which
    would overflow a half at y = 316), times d = 0: exactly beta."""
    c = 48
    x = np.full((1, c, 1, 5), 0.3, dc.dtype_for(precision))
    beta = np.linspace(-1, 1, c).astype(dc.dtype_for(precision))
    gamma = np.full(c, 2.0, dc.dtype_for(precision))
    y, _ = dc.run_passes(DEVICE, dc.layer_norm_passes(x.shape, gamma, beta, 1e-5, precision), x)
    assert_same(y, np.broadcast_to(beta[None, :, None, None], x.shape).astype(y.dtype))


def test_softmax_takes_the_true_max(rng):
    """Logits far beyond exp's range (fp32 overflows e^89, the fp16 LUT from 11.09): the
    channel max keeps every exp finite and the result a distribution."""
    logits = (rng.standard_normal((1, 13, 1, 6)) * 40 + 500).astype(np.float32)
    y, _ = dc.run_passes(DEVICE, dc.softmax_passes(logits.shape, "fp32"), logits)
    exact, _ = _softmax64(logits)
    assert np.abs(y - exact).max() <= 1e-6
    halves = (logits / 40).astype(np.float16)
    y, _ = dc.run_passes(DEVICE, dc.softmax_passes(halves.shape, "fp16"), halves)
    assert np.all(np.isfinite(y)) and np.allclose(y.astype(np.float64).sum(1), 1, atol=1e-2)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_each_pass_has_its_own_name(precision):
    """A run's label is its layer's key and its pass's role: the halving trees' levels and
    the Newton steps are numbered, so no two passes of a layer (profiled runs) share one."""
    softmax = [p.role for p in dc.softmax_passes((1, 10, 1, 1), precision).passes]
    assert len(set(softmax)) == len(softmax), softmax
    assert [r for r in softmax if r.startswith("softmax.max")] == \
        [f"softmax.max.max{level}" for level in (1, 2, 3, 4)]  # 10 -> 5 -> 3 -> 2 -> 1
    norm = [p.role for p in dc.layer_norm_passes((2, 5, 1, 3), precision=precision).passes]
    assert len(set(norm)) == len(norm), norm
    assert norm[:3] == ["layer_norm.center.mean.lo1", "layer_norm.center.mean.hi1",
                        "layer_norm.center.mean.add1"]  # two images: BDMA copies per level
    if precision == "fp16":  # 3 Newton steps: 2 passes through the X units, then the last
        #                        as 1 / sum's remainder (decompose._softmax_fp16)
        assert "softmax.newton2" in softmax and "softmax.newton3" not in softmax
        assert "softmax.reciprocal.low" in softmax


def test_costs_are_the_cost_models_and_summed():
    """estimate_passes prices each pass with estimate_chain; the CONV form of the sums takes
    fewer runs and fewer cycles on nv_full for ViT-Ti's token tensor (docs/transformer_ops.md)."""
    shape = (1, 192, 1, 197)
    ones, zeros = np.ones(192, np.float32), np.zeros(192, np.float32)
    tree = dc.layer_norm_passes(shape, ones, zeros)
    total, runs = dc.estimate_passes("nv_full", tree)
    assert len(runs) == len(tree.passes)
    assert total == sum(s.cycles for _, s in runs) > 0
    first = tree.passes[0]
    assert runs[0][1].cycles == estimate_chain("nv_full", list(first.ops),
                                               tree.shapes[first.input]).cycles
    conv_total, conv_runs = dc.estimate_passes("nv_full", dc.layer_norm_passes(
        shape, ones, zeros, reduce="conv"))
    assert len(conv_runs) == 5 and conv_total < total
    assert [r for r, _ in conv_runs] == ["layer_norm.center", "layer_norm.square",
                                         "layer_norm.var", "layer_norm.normalise",
                                         "layer_norm.shift"]
    # what the compiler emits in fp32: each sum a CONV to one channel, the cheapest of the three
    assert dc.fp32_sums(shape) == "conv1"
    one = dc.layer_norm_passes(shape, ones, zeros, reduce=dc.fp32_sums(shape))
    one_total, one_runs = dc.estimate_passes("nv_full", one)
    assert one_total < conv_total
    assert [r for r, _ in one_runs] == ["layer_norm.center.mean", "layer_norm.center",
                                        "layer_norm.square", "layer_norm.var",
                                        "layer_norm.normalise", "layer_norm.shift"]
    assert [one.shapes[p.output][1] for p in one.passes] == [1, 192, 192, 1, 192, 192]
    softmax_tree, _ = dc.estimate_passes("nv_full", dc.softmax_passes(shape))
    softmax_one, _ = dc.estimate_passes("nv_full", dc.softmax_passes(shape, "fp32", "conv1"))
    assert softmax_one < softmax_tree
    # rows of several images keep the trees: the library sums their CONVs through OpenBLAS
    assert dc.fp32_sums((2, 192, 1, 1)) == "tree"
    assert dc.fp32_sums((2, 192, 1, 3)) == "conv1"


def test_bad_arguments_are_refused():
    with pytest.raises(AccelInvalidError, match="shape"):
        dc.layer_norm_passes((1, 4, 4))
    with pytest.raises(AccelInvalidError, match="precision = 'int8'"):
        dc.softmax_passes((1, 4, 1, 4), "int8")
    with pytest.raises(AccelInvalidError, match="gamma has shape"):
        dc.layer_norm_passes((1, 4, 1, 4), gamma=np.ones(3))
    with pytest.raises(AccelInvalidError, match="eps"):
        dc.layer_norm_passes((1, 4, 1, 4), eps=-1.0)
    with pytest.raises(AccelInvalidError, match="reduce"):
        dc.softmax_passes((1, 4, 1, 4), reduce="pdp")
    with pytest.raises(AccelInvalidError, match="x has shape"):
        dc.run_passes(DEVICE, dc.softmax_passes((1, 4, 1, 4)), np.zeros((1, 4, 1, 5), np.float32))


@pytest.mark.parametrize("offset", [0.5, 60.0])
def test_fp16_conv_form_rounds_like_pytorchs_half(offset, rng):
    """FP16 with reduce="conv": the sums in the CONVs' fp32 accumulators, the mean and
    1 / sqrt(var + eps) each kept as a half and its remainder, the last pass through the SDP's
    X units in fp32 (accel_sdp_x): one rounding of the output, like PyTorch's half layer norm
    (fp32 inside), so its SQNR against float64 is within 0.5 dB of PyTorch's (the tree form's
    is about 8 dB below it); 13 runs instead of the tree's 85, every SDP pass the reference's
    bit for bit on the simulator's own inputs."""
    c, w = 192, 40
    x, gamma, beta = _inputs(rng, c, w, np.float16, offset)
    d = dc.layer_norm_passes(x.shape, gamma, beta, 1e-5, "fp16", "conv")
    assert len(d.passes) == 13
    tensors = {}

    def run(p, ops, data, out):
        y, _ = DEVICE.run(ops, np.ascontiguousarray(data), out=out)
        if not any(type(op).__name__ == "Conv" for op in ops):  # SDP passes: bit for bit
            assert_same(y, ref.run_chain(ops, data), p.role)
        tensors[p.output] = y
        return y

    y = d.tensor(d.run(run, x), d.output)
    exact = _layer_norm64(x, gamma, beta, 1e-5)
    ours = _sqnr(exact, y)
    theirs = _sqnr(exact, _torch_layer_norm(x, gamma, beta, 1e-5))
    assert ours >= theirs - 0.5, (ours, theirs)
    tree = _sqnr(exact, dc.run_passes(DEVICE, dc.layer_norm_passes(
        x.shape, gamma, beta, 1e-5, "fp16"), x)[0])
    assert ours > tree + 4
    constant = np.full((1, c, 1, 3), 0.3, np.float16)  # variance 0: exactly beta
    y, _ = dc.run_passes(DEVICE, dc.layer_norm_passes(constant.shape, gamma, beta, 1e-5,
                                                      "fp16", "conv"), constant)
    assert_same(y, np.broadcast_to(beta[None, :, None, None], constant.shape))


def _sqnr(exact, y):
    error = np.sum((np.asarray(y, np.float64) - exact) ** 2)
    return 10 * math.log10(np.sum(exact ** 2) / error)
