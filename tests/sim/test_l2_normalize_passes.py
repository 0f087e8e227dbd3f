"""F.normalize (x / max(||x||_2, eps) over the channels) as engine passes
(sim/decompose.l2_normalize_passes): the simulator equals the NumPy reference bit for bit in
fp32 and fp16; fp32 is within 1e-6 of the output scale of PyTorch's F.normalize; fp16's SQNR
against float64 is within 1 dB of PyTorch's own ``.half()`` F.normalize."""
import numpy as np
import pytest

from accel_codegen import AccelInvalidError, Device
from accel_codegen import reference as ref
from accel_codegen.sim import decompose as dc
from conftest import assert_close, assert_same, sqnr

torch = pytest.importorskip("torch")
DEVICE = Device("nv_full", num_threads=2)
#: (channels, tokens): Swin-V2's head dims (8, 16, 32), an odd count, CLIP's 512
SHAPES = [(8, 98), (16, 49), (13, 9), (32, 40), (512, 3)]


def _torch_normalize(x, eps=1e-12):
    return torch.nn.functional.normalize(torch.from_numpy(np.ascontiguousarray(x)), dim=1,
                                         eps=eps).numpy()


@pytest.mark.parametrize("precision,reduce", [("fp32", "tree"), ("fp32", "conv1"),
                                              ("fp16", "tree")])
@pytest.mark.parametrize("c,w", SHAPES)
def test_passes_equal_the_reference_and_match_pytorch(c, w, precision, reduce, rng):
    """The tree's sums and fp32's CONV of ones to one channel (the compiler's: fp32_sums)."""
    dtype = dc.dtype_for(precision)
    x = (rng.standard_normal((1, c, 1, w)) * 3 + 0.5).astype(dtype)
    decomposition = dc.l2_normalize_passes(x.shape, 1e-12, precision, reduce=reduce)
    y, stats = dc.run_passes(DEVICE, decomposition, x)
    assert_same(y, ref.run_decomposition(decomposition, x), "l2_normalize")
    assert len(stats) == len(decomposition.passes) and y.dtype == dtype
    exact = _torch_normalize(x.astype(np.float64))
    if precision == "fp32":
        assert_close(y, _torch_normalize(x), 1e-6)
    else:  # PyTorch's half: its squares, sum, sqrt and division each rounded to half
        half = _torch_normalize(x)
        assert sqnr(y, exact) >= sqnr(half, exact) - 1.0, (sqnr(y, exact), sqnr(half, exact))


@pytest.mark.parametrize("reduce", ["tree", "conv1"])
def test_zeros_give_zeros_and_tiny_norms_are_exact(reduce):
    """A token of zeros gives zeros (torch: 0 / eps); a norm far below 1 but above 4096 eps
    (the bound where eps^2 added to the sum changes nothing in fp32) is normalised."""
    x = np.zeros((1, 16, 1, 3), np.float32)
    x[0, :, 0, 1] = 1e-6 * np.arange(1, 17)
    x[0, 3, 0, 2] = -2.5
    y, _ = dc.run_passes(DEVICE, dc.l2_normalize_passes(x.shape, reduce=reduce), x)
    assert_same(y[..., 0], np.zeros((1, 16, 1), np.float32))
    assert_close(y, _torch_normalize(x), 1e-6)
    assert y[0, 3, 0, 2] == -1.0


def test_bad_eps_is_refused():
    with pytest.raises(AccelInvalidError, match="eps"):
        dc.l2_normalize_passes((1, 8, 1, 4), eps=-1.0)


def test_the_fp32_conv_sum_is_fewer_runs_and_cycles_than_the_tree():
    """The compiler's fp32 form (fp32_sums: one CONV of ones to one channel, then its SDP's
    shift and rsqrt) against the tree, priced by the cost model (docs/transformer_ops.md)."""
    for shape in [(1, 32, 1, 49), (1, 16, 1, 64), (1, 192, 1, 197)]:
        assert dc.fp32_sums(shape) == "conv1"
        tree = dc.l2_normalize_passes(shape, reduce="tree")
        conv = dc.l2_normalize_passes(shape, reduce="conv1")
        assert len(conv.passes) == 3 < len(tree.passes)
        assert dc.estimate_passes("nv_full", conv)[0] < dc.estimate_passes("nv_full", tree)[0]
