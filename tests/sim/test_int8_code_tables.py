"""INT8 runs of squeeze-excite and of wide pools whose codes are a function of each plane's
input bytes (issue 32): a standalone SDP with a LUT activation or a per-channel element-wise
operand converts each plane's 256 codes once and looks the plane up in them (sdp_i8.c,
run_table); an average over non-overlapping windows sums column by column (pdp_i8.c,
pool_blocks). Both against the NumPy reference, planes below and above the table's threshold,
and a partly cut last window."""
import zlib

import numpy as np
import pytest

from accel_codegen import Device, Pool, Sdp
from accel_codegen.sim import observer as obs
from accel_codegen.sim import reference as ref

from test_lut_int8_lanes import _compiler_case


def _per_channel(rng, ew_op, n, c):
    """t about the input (x 0.5 .. 1), the operand's codes as they are, the output scaled
    back to the codes' range."""
    fields = dict(bias=rng.integers(-20, 20, c).astype(np.int32),
                  mul=rng.integers(2**13, 2**14, c).astype(np.int16),
                  rshift=np.full(c, 14, np.uint8), in_zero=int(rng.integers(-5, 5)),
                  ew_zero=int(rng.integers(-4, 4)), ew_mul=1, ew_shift=0, out_mul=1,
                  out_shift={"mul": 7, "add": 1}.get(ew_op, 0),
                  out_zero=int(rng.integers(-10, 10)))
    s = rng.integers(-128, 128, (n, c)).astype(np.int8)
    return Sdp(ew_op=ew_op, operand=s, ew_per_channel=True, precision="int8", **fields)


@pytest.mark.parametrize("ew_op", ["mul", "add", "max"])
@pytest.mark.parametrize("hw", [(7, 7), (40, 64), (3, 700)])
def test_a_per_channel_operand_looked_up_by_codes(ew_op, hw):
    rng = np.random.default_rng(zlib.crc32(repr((ew_op, hw)).encode()))
    x = rng.integers(-128, 128, (2, 6) + hw).astype(np.int8)
    op = _per_channel(rng, ew_op, 2, 6)
    y = Device("nv_full", num_threads=2).run([op], x)[0]
    np.testing.assert_array_equal(y, ref.run_chain([op], x))
    assert len(np.unique(y)) > 20


@pytest.mark.parametrize("act", [None, "relu", "clip", "prelu"])
@pytest.mark.parametrize("out_mul", [0, 3])
def test_small_planes_with_a_per_channel_operand(act, out_mul):
    """Planes below the table's threshold (7x7 .. 22x22) go several to an item through the
    general steps on the codes themselves (sdp_i8_planes_avx512): every activation without a
    LUT, with and without the output converter, t * e and BN saturating in some channels, on
    2 threads."""
    rng = np.random.default_rng(zlib.crc32(repr((act, out_mul)).encode()))
    c = 90
    for hw, ew_op in (((7, 7), "mul"), ((14, 14), "mul"), ((22, 22), "add")):
        x = rng.integers(-128, 128, (2, c) + hw).astype(np.int8)
        op = _per_channel(rng, ew_op, 2, c)
        # e about the operand's code (out_mul 3: y about t e 3 / 2^9) or an eighth of it with
        # t an eighth of x (out_mul 0: y = t e)
        fields = dict(op.__dict__, act=act, out_mul=out_mul,
                      out_shift=op.out_shift + (2 if out_mul else 0),
                      ew_mul=int(rng.integers(2000, 2100)) if out_mul else 256, ew_shift=11,
                      rshift=np.full(c, 14 if out_mul else 17, np.uint8))
        fields["mul"][:5] = 32767  # BN saturates int32 in these (rshift 0 below)
        fields["rshift"][:3] = 0
        fields["bias"][5:8] = [2**31 - 1, -(2**31), 2**30]
        if act == "clip":
            fields.update(clip_lo=-50, clip_hi=90)
        if act == "prelu":
            fields.update(prelu_mul=rng.integers(-2**15, 2**15, c).astype(np.int16), prelu_shift=9)
        op = Sdp(**fields)
        y = Device("nv_full", num_threads=2).run([op], x)[0]
        np.testing.assert_array_equal(y, ref.run_chain([op], x))
        assert len(np.unique(y)) > 20, (hw, ew_op)


@pytest.mark.parametrize("case", ["ties", "t_e_at_int32", "y_beyond_int32"])
@pytest.mark.parametrize("act", [None, "relu", "clip"])
def test_small_planes_in_int32_lanes_at_their_bounds(case, act):
    """x * s on small planes in int32 lanes (AVX2: sdp_i8_planes_avx2 where the plane's bounds
    hold, the general steps where not) at the edges of those bounds: t's rounding with ties
    in every other value (shifts 0-3, the codes t itself), t e about int32's limit (saturating
    in some planes, just inside in others) and t e out_mul / 2^out_shift beyond int32 before
    the codes saturate; planes of 25 (a tail alone), 36, 49 and 196 codes."""
    rng = np.random.default_rng(zlib.crc32(repr((case, act)).encode()))
    c = 40
    for hw in ((5, 5), (6, 6), (7, 7), (14, 14)):
        x = rng.integers(-128, 128, (1, c) + hw).astype(np.int8)
        op = _per_channel(rng, "mul", 1, c)
        fields = dict(op.__dict__, act=act, ew_zero=0, ew_mul=1, ew_shift=0)
        if case == "ties":
            fields.update(mul=rng.integers(-7, 8, c).astype(np.int16),
                          rshift=rng.integers(0, 4, c).astype(np.uint8), out_mul=1, out_shift=0,
                          operand=rng.integers(-1, 2, (1, c)).astype(np.int8))
        elif case == "t_e_at_int32":  # |t| up to 255 x 32767, e = o (240..270): ~2^31
            fields.update(mul=np.full(c, 32767, np.int16), rshift=np.zeros(c, np.uint8),
                          in_zero=0, bias=rng.integers(-5, 6, c).astype(np.int32),
                          ew_mul=int(rng.integers(240, 271)), out_mul=3, out_shift=24,
                          operand=rng.integers(-127, 128, (1, c)).astype(np.int8))
        else:
            fields.update(mul=rng.integers(1000, 32768, c).astype(np.int16),
                          rshift=np.zeros(c, np.uint8), out_mul=int(rng.integers(1, 32768)),
                          out_shift=int(rng.integers(0, 41)),
                          operand=rng.integers(-60, 61, (1, c)).astype(np.int8))
        if act == "clip":
            fields.update(clip_lo=-50, clip_hi=90)
        op = Sdp(**fields)
        y = Device("nv_full", num_threads=1).run([op], x)[0]
        np.testing.assert_array_equal(y, ref.run_chain([op], x), err_msg=f"{case} {hw}")
        # y beyond int32 saturates most codes: both rails (or CLIP's) and few others
        assert len(np.unique(y)) > (1 if case == "y_beyond_int32" else 3), (case, hw)


def test_a_per_channel_operand_with_a_lut():
    op, x = _compiler_case("silu", 5)  # 16 x 64 x 65, the compiler's table
    rng = np.random.default_rng(5)
    s = rng.integers(-128, 128, (1, 16)).astype(np.int8)
    op = Sdp(**{**op.__dict__, "ew_op": "mul", "operand": s, "ew_per_channel": True,
                "ew_mul": 1, "ew_shift": 0, "mul": (op.mul // 64).astype(np.int16)})
    y = Device("nv_full", num_threads=1).run([op], x)[0]
    np.testing.assert_array_equal(y, ref.run_chain([op], x))
    assert len(np.unique(y)) > 20


def test_an_observer_sees_the_per_channel_operand_whole():
    """The kernel reads the [N][C] operand itself; an observer is still handed the operand
    of the run's input shape."""
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (1, 4, 30, 30)).astype(np.int8)
    op = _per_channel(rng, "mul", 1, 4)

    class Seen:
        def __init__(self):
            self.tensors = {}

        def add(self, label, index, t):
            self.tensors[index] = t.copy()

    seen = Seen()
    with obs.observing(seen):
        y = Device("nv_full").run([op], x, label="se")[0]
    np.testing.assert_array_equal(y, ref.run_chain([op], x))
    operand = seen.tensors[obs.operand_index(0)]
    np.testing.assert_array_equal(operand, np.broadcast_to(op.operand[:, :, None, None], x.shape))


@pytest.mark.parametrize("shape,kernel", [((3, 112, 112), (8, 8)), ((5, 14, 14), (7, 7)),
                                          ((4, 30, 37), (8, 8)), ((2, 9, 20), (2, 3))])
def test_an_average_over_blocks(shape, kernel):
    rng = np.random.default_rng(shape[1])
    x = rng.integers(-128, 128, (1,) + shape).astype(np.int8)
    out_h, out_w = -(-shape[1] // kernel[0]), -(-shape[2] // kernel[1])
    pad = (0, 0, out_h * kernel[0] - shape[1], out_w * kernel[1] - shape[2])
    op = Pool("avg", kernel, kernel, pad, count_include_pad=any(pad), precision="int8", zero=-3)
    y = Device("nv_full", num_threads=2).run([op], x)[0]
    assert y.shape == (1, shape[0], out_h, out_w)
    np.testing.assert_array_equal(y, ref.run_chain([op], x))


@pytest.mark.parametrize("shape,kernel", [((16, 112, 112), (8, 8)), ((16, 14, 14), (7, 7)),
                                          ((16, 9, 20), (2, 3))])
def test_an_fp32_average_over_blocks_in_the_window_order(shape, kernel):
    """fp32: the windows of a row side by side (pdp.c, pool_row_inside) give the C16 kernel's
    bits, NaN payloads included (its taps in the window's order)."""
    from test_c16_layout import _same_either_way
    from test_c16_pool import _with_nans

    out_h, out_w = -(-shape[1] // kernel[0]), -(-shape[2] // kernel[1])
    pad = (0, 0, out_h * kernel[0] - shape[1], out_w * kernel[1] - shape[2])
    x = _with_nans(np.random.default_rng(shape[1]), (1,) + shape)
    _same_either_way([Pool("avg", kernel, kernel, pad, count_include_pad=any(pad))], x)


@pytest.mark.parametrize("ew_op,fields", [("mul", {}), ("add", {"scale": True}),
                                          ("max", {"scale": True})])
def test_an_fp32_per_channel_operand_as_broadcast(ew_op, fields):
    """fp32 reads the [N][C] operand itself: the bits of the same op with the operand
    broadcast to the input's shape, over planes of several chunks."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 40, 64)).astype(np.float32)
    s = rng.standard_normal((2, 3)).astype(np.float32)
    extra = dict(scale=rng.standard_normal(3).astype(np.float32),
                 shift=rng.standard_normal(3).astype(np.float32)) if fields else {}
    whole = np.ascontiguousarray(np.broadcast_to(s[:, :, None, None], x.shape))
    device = Device("nv_full", num_threads=2)
    y = device.run([Sdp(ew_op=ew_op, operand=s, ew_per_channel=True, **extra)], x)[0]
    expected = device.run([Sdp(ew_op=ew_op, operand=whole, **extra)], x)[0]
    np.testing.assert_array_equal(y.view(np.uint32), expected.view(np.uint32))
