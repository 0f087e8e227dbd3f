"""ConvNeXt-V2's GRN over an [N, C, H, W] surface as engine passes (sim/decompose.grn_passes):
the simulator equals the NumPy reference bit for bit in fp32 and fp16; fp32 is within 1e-6 of
the output scale of the GRN in float64; in fp16 the norms the LUT and its Newton steps give
are within 3 half-ulps of sqrt(m) (accel.h's rsqrt and reciprocal tables, docs/
transformer_ops.md "ConvNeXt-V2"), and the output's SQNR against float64 is within 1 dB of
PyTorch's own ``.half()`` GRN; a channel of zeros gives beta + x, as the GRN does."""
import numpy as np
import pytest

from accel_codegen import AccelInvalidError, Device
from accel_codegen import reference as ref
from accel_codegen.sim import decompose as dc
from conftest import assert_close, assert_same, sqnr

torch = pytest.importorskip("torch")
DEVICE = Device("nv_full", num_threads=2)
#: one image and two (the tree's channel mean, the per-channel element-wise operand), exact
#: PDP windows (10 = 5 x 2, 56 = 8 x 7) and padded ones (11: 8 padded to 16, then 2; 13)
SHAPES = [(1, 32, 10, 10), (1, 48, 11, 13), (2, 16, 5, 9), (1, 24, 56, 56)]


def _grn(x, gamma, beta, eps=1e-6):
    """The GRN as its authors wrote it, over NCHW data."""
    x = torch.from_numpy(np.ascontiguousarray(x))
    gamma, beta = (torch.from_numpy(v).to(x.dtype).view(1, -1, 1, 1) for v in (gamma, beta))
    gx = torch.norm(x, p=2, dim=(2, 3), keepdim=True)
    nx = gx / (gx.mean(dim=1, keepdim=True) + eps)
    return (gamma * (x * nx) + beta + x).numpy()


def _parameters(rng, c):
    return (rng.normal(0, 0.5, c).astype(np.float32), rng.normal(0, 0.2, c).astype(np.float32))


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("shape", SHAPES)
def test_passes_equal_the_reference_and_match_the_grn(shape, precision, rng):
    dtype = dc.dtype_for(precision)
    gamma, beta = _parameters(rng, shape[1])
    x = (rng.standard_normal(shape) * 1.5).astype(dtype)
    x[0, 1] = 0  # a channel of zeros: its norm 0, its output beta + x
    decomposition = dc.grn_passes(shape, gamma, beta, 1e-6, precision)
    y, stats = dc.run_passes(DEVICE, decomposition, x)
    assert_same(y, ref.run_decomposition(decomposition, x), "grn")
    assert len(stats) == len(decomposition.passes) and y.dtype == dtype
    exact = _grn(x.astype(np.float64), gamma.astype(np.float64), beta.astype(np.float64))
    assert not np.any(np.isnan(y))
    if precision == "fp32":
        assert_close(y, exact.astype(np.float32), 1e-6)
        return
    half = _grn(x, gamma.astype(np.float16), beta.astype(np.float16)).astype(np.float64)
    ours = sqnr(y.astype(np.float64), exact)
    assert ours >= sqnr(half, exact) - 1.0, (ours, sqnr(half, exact))


def test_fp16_norms_are_within_the_luts_bound(rng):
    """g = m / sqrt(m) through the rsqrt table and two Newton steps: within 3 half-ulps of
    sqrt(m) for m over 16 octaves (the table's LE region and its LO [0.5, 4.5))."""
    shape = (1, 64, 4, 4)
    scales = np.exp2(rng.uniform(-8, 8, shape[1])).reshape(1, -1, 1, 1)
    x = (rng.standard_normal(shape) * scales).astype(np.float16)
    decomposition = dc.grn_passes(shape, np.ones(64, np.float32), np.zeros(64, np.float32),
                                  1e-6, "fp16")
    tensors = decomposition.run(lambda p, ops, data, out: ref.run_chain(ops, data), x)
    outputs = {p.role: p.output for p in decomposition.passes}
    m = tensors[outputs["grn.spatial_mean2"] if "grn.spatial_mean2" in outputs
                else outputs["grn.spatial_mean"]].astype(np.float64)
    g = tensors[outputs["grn.norm"]].astype(np.float64)
    ulp = 2.0 ** (np.floor(np.log2(np.sqrt(m))) - 10)
    assert np.max(np.abs(g - np.sqrt(m)) / ulp) <= 3.0


def test_refuses_what_it_cannot_compute():
    with pytest.raises(AccelInvalidError, match="eps"):
        dc.grn_passes((1, 8, 4, 4), eps=-1.0)
    with pytest.raises(AccelInvalidError, match="gamma"):
        dc.grn_passes((1, 8, 4, 4), gamma=np.ones(7, np.float32))
