"""The residual add's operand term in the 16-lane form (csrc/sdp_i8_lanes.h, sdp_i8_lanes_add: e
as one vpmaddwd of o - ew_zero by ew_mul and 1, its rounding folded into the high word) against
the reference, bit for bit, at its edges: every operand code, operand zero points -128..127,
ew_shift 0, 1, 16, 17, 23, 24 and 31 (e = 0 from 24 on), ew_mul 1, powers of two (ties of
both signs), 32767 and negative ones (declined by the AVX-512 build: the span path), channel
shifts 13-16, 17-20 (the split forms) and 28-31, the compiler's lean add (RELU, out_mul 1) and
others. The kernels choose the form; every build must give the reference's codes."""
import itertools

import numpy as np
import pytest

from accel_codegen import Conv, Device, Sdp
from accel_codegen import reference as ref
from conftest import assert_same

LAYERS = [((1, 32, 8, 8), (64, 32, 1, 1), dict()),              # 64 outputs: one panel row
          ((1, 16, 9, 11), (24, 16, 3, 3), dict(padding=1))]    # 99: masked tails


@pytest.mark.parametrize("layer", range(len(LAYERS)))
def test_lane_add_operand_edges_match_reference(layer):
    in_shape, weight_shape, conv_args = LAYERS[layer]
    rng = np.random.default_rng(1500 + layer)
    device = Device("nv_full", num_threads=1)
    x = rng.integers(-128, 128, in_shape).astype(np.int8)
    conv = Conv(rng.integers(-128, 128, weight_shape).astype(np.int8), precision="int8",
                in_zero=int(rng.integers(-128, 128)), **conv_args)
    acc = ref.run_op(conv, x)
    k = weight_shape[0]
    spread = max(float(np.std(acc)), 1.0)
    operand = rng.integers(-128, 128, acc.shape).astype(np.int8)
    operand.reshape(-1)[:256] = np.arange(-128, 128)  # every code
    cases = itertools.product([-128, -1, 0, 127], [0, 1, 16, 17, 23, 24, 31],
                              [1, 1 << 10, 32767, -1, -32768], [13, 17, 28])
    for n, (ew_zero, ew_shift, ew_mul, band) in enumerate(cases):
        shift = band + np.arange(k) % 4
        mul = np.clip(np.round(30 * 2.0 ** shift / spread), 1, 32767).astype(np.int16)
        bias = rng.integers(-2 * int(spread), 2 * int(spread) + 1, k).astype(np.int32)
        lean = n % 2 == 0  # the compiler's add: RELU, out_mul 1, no output shift
        sdp = Sdp(bias=bias, mul=mul, rshift=shift.astype(np.uint8),
                  act="relu" if lean or n % 3 == 0 else None, ew_op="add", operand=operand,
                  ew_zero=ew_zero, ew_mul=ew_mul, ew_shift=ew_shift,
                  out_mul=1 if lean else 3, out_shift=0 if lean else 2,
                  out_zero=-128 if lean else int(rng.integers(-128, 128)), precision="int8")
        expected = ref.run_chain([conv, sdp], x)
        assert_same(device.run([conv, sdp], x)[0], expected,
                    f"ew_zero {ew_zero} ew_shift {ew_shift} ew_mul {ew_mul} shifts {band}+")
