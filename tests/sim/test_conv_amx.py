"""The INT8 CONV's AMX path (csrc/conv/i8_amx.c, conv_amx: TDPBSUD tiles on the implicit GEMM's
input copy) against the NumPy reference and against the VNNI paths, bit for bit.

The path runs where the build targets AMX (-march=native on a Sapphire Rapids), the CPU and OS
have it and Linux grants the tile state (accel_int8_amx reports it); elsewhere these tests
check that the library says so, and the same layers on the VNNI paths. Every layer below
qualifies for the tiles (at least 4 blocks of 4 input channels and 16 depth steps, not a fully
connected layer): each edge of the tiling is hit by one of them (see the comments). Each runs
with AMX on and off, at 1-3 threads, with and without pre-packed weights, fused and
independent; with packed weights the other layout's bytes are then wiped, so that a result
equal to the reference shows which path read them.
"""
import dataclasses

import numpy as np
import pytest

from accel_codegen import Conv, Device
from accel_codegen import reference as ref
from accel_codegen._accel_ffi import lib
from accel_codegen.sim.device import host_isa, int8_amx
from conftest import assert_same
from test_conv_engine import _int8_sdp, _lane_add_sdp, _lane_sdp

DEVICES = {threads: Device("nv_full", num_threads=threads) for threads in (1, 2, 3)}
CPU_AMX = "amx_int8" in open("/proc/cpuinfo").read().split()  # (the flags of every CPU)
# conv/i8.h's
LAYOUT_PLAIN, LAYOUT_VNNI, LAYOUT_AMX, LAYOUT_I16, LAYOUT_I16T, LAYOUT_I16W = 1, 2, 3, 4, 5, 6
# (the header's second int32)

AMX_LAYERS = [  # in_shape, weight_shape, conv arguments
    ((1, 64, 56, 56), (64, 64, 3, 3), dict(padding=1)),          # ResNet: 13 runs of 16 tiles
    ((1, 18, 9, 11), (17, 18, 3, 3), dict(padding=1)),           # 5 blocks (a missing channel),
                                                                 # 17 channels: a 1-row A tile
    ((2, 68, 13, 13), (33, 68, 3, 3), dict(stride=2, padding=1)),  # 17 blocks: the last chunk
                                                                 # overlaps; batch; 1x16-row tile
    ((1, 130, 10, 10), (70, 130, 3, 3), dict(padding=(1, 0, 2, 1), dilation=2)),  # 33 blocks,
                                                                 # dilation, dropped columns
    ((1, 64, 14, 14), (48, 64, 1, 1), dict()),                   # 1x1 flat copy, 16 steps
    ((1, 256, 28, 28), (40, 256, 1, 1), dict(stride=2)),         # 1x1/2: one phase of four
    ((3, 72, 7, 7), (100, 72, 3, 3), dict(padding=1)),           # 7x7 grid, batch 3
    ((1, 64, 15, 15), (64, 32, 3, 3), dict(padding=(1, 0, 2, 1), groups=2)),  # groups
    ((1, 96, 12, 12), (96, 24, 3, 3), dict(padding=1, groups=4)),  # 24 channels a group
    ((1, 64, 20, 20), (32, 64, 5, 5), dict(stride=3, padding=2)),  # stride 3: gathered rows
    ((2, 16, 30, 30), (16, 16, 3, 3), dict(padding=1)),          # 4 blocks (fewest), 16 rows
    ((1, 256, 7, 7), (256, 256, 3, 3), dict(padding=1)),         # 4 depth chunks x 9 taps
    ((1, 40, 33, 5), (24, 40, 3, 3), dict(padding=(0, 1, 0, 1))),  # odd tile count per run
    ((1, 64, 40, 40), (96, 64, 1, 1), dict()),                   # 1x1 expansion, 16 steps:
                                                                 # codes per micro-tile
    ((2, 80, 9, 9), (36, 80, 1, 1), dict()),                     # and 81 outputs: a partial one
]


def _ids(layers):
    return lambda i: "x".join(map(str, layers[i][0])) + "-" + "x".join(map(str, layers[i][1]))


@pytest.fixture
def amx_restored():
    """Leaves the switch as the test found it."""
    before = lib.accel_int8_amx(-1)
    yield
    lib.accel_int8_amx(before)


def _layout(packed: np.ndarray) -> int:
    return int(np.frombuffer(packed[4:8].tobytes(), np.int32)[0])


def _wiped(conv: Conv, keep: int) -> Conv:
    """A copy of packed `conv` (both layouts) with the bytes of the layout other than `keep`
    overwritten: only the path reading `keep` still gives the reference's codes."""
    packed = conv.packed.copy()
    data_bytes = int(np.frombuffer(packed[32:40].tobytes(), np.uint64)[0])
    k, groups = conv.weight_shape[0], conv.groups
    mblocks = -(-(k // groups) // 8)
    vnni_end = 64 + data_bytes + -(-groups * mblocks * 8 * 4 // 64) * 64
    if keep == LAYOUT_AMX:
        packed[64:64 + data_bytes] = 0x55           # the VNNI weights (its sums are kept)
    else:
        packed[vnni_end:] = 0x55                    # the AMX tiles and sums
    return dataclasses.replace(conv, packed=packed)


def _check(chain, x, expected, what):
    """Every way of running the chain, AMX on and off: the reference's codes."""
    conv = chain[0]
    packed = conv.packed_for(DEVICES[1].config)  # packed once, whatever the switch
    for amx in (1, 0):
        on = lib.accel_int8_amx(amx)
        for t, device in DEVICES.items():
            assert_same(device.run(chain, x)[0], expected, f"{what}AMX {on}, {t} threads")
            assert_same(device.run([packed, *chain[1:]], x)[0], expected,
                        f"{what}AMX {on}, {t} threads, packed")
        assert_same(DEVICES[2].run(chain, x, mode="independent")[0], expected,
                    f"{what}AMX {on}, independent")
        if _layout(packed.packed) == LAYOUT_AMX:
            keep = LAYOUT_AMX if on else LAYOUT_VNNI
            assert_same(DEVICES[2].run([_wiped(packed, keep), *chain[1:]], x)[0], expected,
                        f"{what}AMX {on}, only layout {keep} intact")


def _layer(index, seed):
    in_shape, weight_shape, conv_args = AMX_LAYERS[index]
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, in_shape).astype(np.int8)
    conv = Conv(rng.integers(-128, 128, weight_shape).astype(np.int8), precision="int8",
                in_zero=int(rng.integers(-128, 128)), **conv_args)
    return rng, x, conv


def test_amx_is_reported_as_the_machine_has_it(amx_restored):
    """accel_int8_amx (and its Python face) says whether the tiles run: never on a CPU without
    AMX, whatever is asked; where it is on, it turns off and on again."""
    on = int8_amx()
    assert on in (False, True) and on == bool(lib.accel_int8_amx(-1))
    if not CPU_AMX:
        assert not on and lib.accel_int8_amx(1) == 0 and not int8_amx(True)
        return
    available = bool(lib.accel_int8_amx(1))  # (a build without AMX code: never)
    if available:
        assert int8_amx(False) is False and lib.accel_int8_amx(-1) == 0
        assert int8_amx(True) is True and lib.accel_int8_amx(-1) == 1


def test_packed_layout_follows_the_machine():
    """Packed weights hold the AMX tiles too where the path can run (any switch state); never
    elsewhere, nor for layers it does not take (depthwise: as given; fewer than 13 channels or
    16 depth steps: the build's other layout: VNNI's, gemm16_avx2's int16 pairs in AVX2 builds
    without VNNI (tap by tap for stride-1 kxk layers, which implicit16_avx2 takes; with the
    Winograd words too for stride-1 3x3 layers of one group and 32 channels or more, which
    winograd16_avx2 takes, but not past its depth bound), or as given in portable builds)."""
    isa = host_isa()
    avx2 = "avx2" in isa and "avx512_vnni" not in isa
    other = (LAYOUT_VNNI if "avx512_vnni" in isa else LAYOUT_I16 if "avx2" in isa
             else LAYOUT_PLAIN)
    other3 = LAYOUT_I16T if avx2 else other  # a stride-1 3x3
    wino3 = LAYOUT_I16W if avx2 else other  # ... of one group and 32 channels or more
    available = bool(lib.accel_int8_amx(-1)) or CPU_AMX and _amx_can_turn_on()
    rng = np.random.default_rng(1)
    weights = lambda *shape: rng.integers(-128, 128, shape).astype(np.int8)  # noqa: E731
    pack = lambda conv: _layout(conv.pack(DEVICES[1].config))  # noqa: E731
    # a layer the AMX path takes (13 channels and 16 depth steps or more) packs its tiles there
    amx = lambda layout: LAYOUT_AMX if available else layout  # noqa: E731
    assert pack(Conv(weights(96, 12, 3, 3), precision="int8")) == other3  # 3 channel blocks
    assert pack(Conv(weights(96, 12, 3, 3), precision="int8", stride=2)) == other
    assert pack(Conv(weights(96, 32, 3, 3), precision="int8", dilation=2)) == amx(other3)
    assert pack(Conv(weights(96, 32, 3, 3), precision="int8", groups=2)) == amx(other3)
    assert pack(Conv(weights(8, 1828, 3, 3), precision="int8")) == amx(other3)  # past the bound
    assert pack(Conv(weights(8, 1827, 3, 3), precision="int8")) == amx(wino3)
    assert pack(Conv(weights(8, 32, 3, 3), precision="int8")) == amx(wino3)
    assert pack(Conv(weights(96, 16, 1, 1), precision="int8")) == other  # 4 depth steps
    assert pack(Conv(weights(64, 64, 3, 3), precision="int8")) == amx(wino3)
    assert pack(Conv(weights(96, 64, 1, 1), precision="int8")) == amx(other)
    assert pack(Conv(weights(32, 1, 3, 3), precision="int8", groups=32)) == LAYOUT_PLAIN  # dw


def _amx_can_turn_on() -> bool:
    before = lib.accel_int8_amx(-1)
    can = bool(lib.accel_int8_amx(1))
    lib.accel_int8_amx(before)
    return can


@pytest.mark.parametrize("layer", range(len(AMX_LAYERS)), ids=_ids(AMX_LAYERS))
def test_amx_layers_with_any_converter_match_reference(layer, amx_restored):
    """Converters of every kind (sdp_i8_span's: bias saturation, negative and -32768
    multipliers, element-wise mul/max/min/add, PReLU, clip), the lanes' common form with each
    activation and zero point, and the lanes' residual add in each variant."""
    for case in range(3):  # sdp_i8_span's converters
        rng, x, conv = _layer(layer, 900 + 10 * layer + case)
        chain = [conv, _int8_sdp(rng, ref.run_op(conv, x), 6 * layer + case)]
        _check(chain, x, ref.run_chain(chain, x), f"span case {case}, ")
    for act, out_zero in ((None, -7), ("relu", 0), ("clip", 93)):  # the lanes
        rng, x, conv = _layer(layer, 950 + 10 * layer + out_zero)
        chain = [conv, _lane_sdp(rng, ref.run_op(conv, x), act, out_zero)]
        _check(chain, x, ref.run_chain(chain, x), f"lanes {act} {out_zero}, ")
    for variant, act in ((0, None), (1, "relu"), (2, "clip"), (3, None), (4, "relu")):
        rng, x, conv = _layer(layer, 980 + 10 * layer + variant)
        acc = ref.run_op(conv, x)
        operand = rng.integers(-128, 128, acc.shape).astype(np.int8)
        chain = [conv, _lane_add_sdp(rng, acc, operand, act, variant)]
        _check(chain, x, ref.run_chain(chain, x), f"residual add {variant} {act}, ")


@pytest.mark.parametrize("in_zero", [-128, 127])
def test_amx_extreme_sums_match_reference(in_zero, amx_restored):
    """Inputs and weights at the int8 ends (sums of 256 channels x 9 taps near 2^28, the
    offset correction near its largest): exact, AMX and VNNI alike."""
    rng = np.random.default_rng(in_zero + 1000)
    x = np.where(rng.random((1, 256, 9, 9)) < 0.5, -128, 127).astype(np.int8)
    w = np.full((40, 256, 3, 3), -128, np.int8)
    w[1::2] = 127
    conv = Conv(w, precision="int8", in_zero=in_zero, padding=1)
    acc = ref.run_op(conv, x)
    chain = [conv, _lane_sdp(rng, acc, None, 0)]
    _check(chain, x, ref.run_chain(chain, x), "")
    chain = [conv, _int8_sdp(rng, acc, 3)]
    _check(chain, x, ref.run_chain(chain, x), "span, ")


@pytest.mark.parametrize("threads", [1, 2])
def test_amx_layer_leaves_the_depthwise_tables_intact(threads, amx_restored):
    """A device keeps its small-plane depthwise tables from run to run in workspace slots of
    their own: an AMX layer between two runs of a depthwise layer must not write into them (its
    depth tiles' offsets once shared the first table's slot, and every later inference of the
    digits CNN, whose first conv has one input channel, came out wrong)."""
    lib.accel_int8_amx(1)
    device = Device("nv_full", num_threads=threads)  # fresh: its first table is slot 0's
    rng = np.random.default_rng(77)
    layers = []
    for in_shape, weight_shape, groups in (((1, 1, 8, 8), (16, 1, 3, 3), 1),
                                           ((1, 32, 7, 7), (32, 1, 3, 3), 32)):
        x = rng.integers(-128, 128, in_shape).astype(np.int8)
        conv = Conv(rng.integers(-128, 128, weight_shape).astype(np.int8), precision="int8",
                    padding=1, groups=groups, in_zero=5)
        chain = [conv, _lane_sdp(rng, ref.run_op(conv, x), "relu", 0)]
        layers.append((chain, x, ref.run_chain(chain, x)))
    _, x, conv = _layer(0, 7)  # ResNet's 3x3 64 -> 64 at 56x56: on the tiles where AMX runs
    amx_chain = [conv, _lane_sdp(rng, ref.run_op(conv, x), None, 0)]
    amx_expected = ref.run_chain(amx_chain, x)
    for round_ in range(2):
        for chain, x_dw, expected in layers:
            assert_same(device.run(chain, x_dw)[0], expected, f"depthwise, round {round_}")
        assert_same(device.run(amx_chain, x)[0], amx_expected, f"AMX layer, round {round_}")
