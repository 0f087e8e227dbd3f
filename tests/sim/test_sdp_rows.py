"""The SDP on planes of one value, [N, C, 1, 1] (a transformer's tokens, a row of C channels
each): each image's C values run side by side, the per-channel operands as vectors along them
(sdp.c's rows path). The C engine against the NumPy reference bit for bit, with every step an
SDP has (X units per channel and per element, scale, shift, each element-wise op, an operand
per channel or per element, the activations, the FP16 LUT model), at sizes below and above the
one where the run splits across threads, in place and not."""
import numpy as np
import pytest

from accel_codegen import Device, Sdp
from accel_codegen.sim import reference
from conftest import assert_same

#: [N, C]: softmax's one-image column of reductions, a small odd block, and ViT-Ti's 197 tokens
#: of 192 channels (37,824 values: beyond the 32,768 at which a run uses every thread)
ROWS = [(1, 591), (3, 7), (197, 192)]
UNITS = ("x1_alu", "x1_mul", "x2_alu", "x2_mul")


def _sdp(rng, shape, dtype, precision, units, per_channel, ew_op, ew_per_channel, act):
    n, c = shape[:2]
    kwargs = {name: rng.standard_normal((c,) if name in per_channel else shape).astype(dtype)
              for name in units}
    if ew_op is not None:
        kwargs["operand"] = rng.standard_normal((n, c) if ew_per_channel else shape
                                                ).astype(dtype)
    if act == "prelu":
        kwargs["prelu_slope"] = rng.uniform(0, 0.5, c).astype(dtype)
    return Sdp(scale=rng.standard_normal(c).astype(dtype),
               shift=rng.standard_normal(c).astype(dtype), ew_op=ew_op,
               ew_per_channel=ew_per_channel, act=act,
               x_per_channel=tuple(name for name in per_channel if name in units),
               precision=precision,
               **kwargs)


@pytest.mark.parametrize("rows", ROWS, ids=lambda r: f"{r[0]}x{r[1]}")
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("units, per_channel", [
    ((), ()), (UNITS, ()), (("x1_alu", "x2_mul"), ("x2_mul",)), (UNITS, UNITS)])
@pytest.mark.parametrize("ew_op, ew_per_channel", [
    (None, False), ("add", False), ("mul", False), ("max", False), ("mul", True), ("add", True)])
@pytest.mark.parametrize("threads", [1, 2])
def test_rows_are_the_reference_bit_for_bit(rng, rows, precision, units, per_channel, ew_op,
                                            ew_per_channel, threads):
    dtype = np.float16 if precision == "fp16" else np.float32
    shape = (*rows, 1, 1)
    x = rng.standard_normal(shape).astype(dtype)
    op = _sdp(rng, shape, dtype, precision, units, per_channel, ew_op, ew_per_channel, "relu")
    y, _ = Device("nv_full", num_threads=threads).run([op], x, mode="independent")
    assert_same(y, reference.run_chain([op], x))


@pytest.mark.parametrize("rows", ROWS, ids=lambda r: f"{r[0]}x{r[1]}")
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("act", [None, "clip", "prelu", "sigmoid", "silu", "exp", "rsqrt",
                                 "reciprocal"])
@pytest.mark.parametrize("with_units", [False, True])
def test_every_activation_on_rows(rng, rows, precision, act, with_units):
    """The activations after the other steps; FP16's LUT ones through the LUT model. rsqrt and
    reciprocal read positive values (the x units' and the affine steps' result is clipped into
    range by a positive scale and shift on |x|)."""
    dtype = np.float16 if precision == "fp16" else np.float32
    shape = (*rows, 1, 1)
    x = rng.standard_normal(shape).astype(dtype)
    units = ("x1_mul",) if with_units else ()
    op = _sdp(rng, shape, dtype, precision, units, (), "add", True, act)
    if act in ("rsqrt", "reciprocal"):
        x = np.abs(x) + dtype(0.5)
        op = Sdp(scale=np.abs(op.scale) + dtype(0.5), shift=np.abs(op.shift),
                 ew_op="add", ew_per_channel=True, operand=np.abs(op.operand), act=act,
                 x1_mul=None if op.x1_mul is None else np.abs(op.x1_mul) + dtype(0.5),
                 precision=precision)
    y, _ = Device("nv_full").run([op], x, mode="independent")
    assert_same(y, reference.run_chain([op], x))


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_rows_in_place(rng, precision):
    """Two passes: the second reads and writes the same scratch buffer."""
    dtype = np.float16 if precision == "fp16" else np.float32
    shape = (197, 192, 1, 1)
    x = rng.standard_normal(shape).astype(dtype)
    first = Sdp(scale=rng.standard_normal(192).astype(dtype), precision=precision)
    second = _sdp(rng, shape, dtype, precision, UNITS, ("x1_mul",), "add", False, "relu")
    y, _ = Device("nv_full").run([first, second], x, mode="independent")
    assert_same(y, reference.run_chain([first, second], x))


@pytest.mark.parametrize("shape", [(1, 3, 40, 40), (2, 5, 7, 9), (1, 600, 1, 3)],
                         ids=["pieces_of_planes", "planes_a_chunk", "chunks_across_images"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("act", ["relu", "silu", "prelu"])
def test_fp16_runs_in_chunks_bit_for_bit(rng, shape, threads, act):
    """A lone FP16 SDP runs halves in and out in chunks of 1,024 values (sdp_f16_run): planes
    longer than a chunk in pieces, shorter ones several a chunk, every operand's chunk widened
    with the input's."""
    dtype = np.float16
    x = rng.standard_normal(shape).astype(dtype)
    op = _sdp(rng, shape, dtype, "fp16", UNITS, ("x1_mul",), "add", False, act)
    y, _ = Device("nv_full", num_threads=threads).run([op], x, mode="independent")
    assert_same(y, reference.run_chain([op], x))
