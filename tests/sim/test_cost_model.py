"""The cost model against figures computed by hand (see the comments for the arithmetic)."""
import numpy as np
import pytest

from accel_codegen import AccelConfig, Conv, Device, Pool, Sdp, estimate_chain
from accel_codegen.sim import profile_enable, profile_records


def _conv_bn_relu(c, k, kernel=3, pad=1):
    w = np.zeros((k, c, kernel, kernel), np.float32)
    return [Conv(w, padding=pad), Sdp(scale=np.ones(k), shift=np.zeros(k), act="relu")]


def test_resnet_layer_fits_cbuf_fused_and_independent():
    """nv_full, fp32 charged as fp16 (2 bytes, atomic K 32 / 2 = 16), 64x56x56 -> 64, 3x3.
    macs       = 3136 positions * 64 * 64 * 9                     = 115,605,504
    mac cycles = 3136 * ceil(64/64) * ceil(64/16) * 9             = 112,896 (full utilisation)
    input      = 3136 positions * (64 ch * 2 B = 128 B, 4 atoms)  = 401,408 B
    weights    = 64 * 64 * 9 * 2 B                                = 73,728 B (fits with input)
    SDP params = (scale + shift) * 64 * 2 B                       = 256 B
    output     = 401,408 B
    fused: read 475,392, write 401,408; memory 876,800 B / 20 B per cycle = 43,840 cycles,
           so cycles = the MAC array's 112,896.
    independent: CONV writes and SDP re-reads the 401,408 B intermediate:
           CONV max(112,896, ceil(876,544 / 20) = 43,828) + SDP max(12,544, ceil(803,072 / 20)
           = 40,154) = 153,050 cycles."""
    chain = _conv_bn_relu(64, 64)
    fused = estimate_chain("nv_full", chain, (1, 64, 56, 56), mode="fused")
    conv, sdp = fused.ops
    assert conv.macs == 115_605_504 and conv.mac_cycles == 112_896
    assert conv.input_bytes == 401_408 and conv.weight_bytes == 73_728
    assert conv.reread_bytes == 0 and conv.bytes_written == 0
    assert sdp.input_bytes == 0 and sdp.weight_bytes == 256 and sdp.bytes_written == 401_408
    assert sdp.compute_cycles == 12_544
    assert (fused.bytes_read, fused.bytes_written) == (475_392, 401_408)
    assert fused.cycles == 112_896
    assert fused.utilization == pytest.approx(1.0)

    independent = estimate_chain("nv_full", chain, (1, 64, 56, 56), mode="independent")
    assert (independent.bytes_read, independent.bytes_written) == (876_800, 802_816)
    assert [op.cycles for op in independent.ops] == [112_896, 40_154]
    assert independent.cycles == 153_050


def test_weights_stream_when_only_the_input_fits():
    """nv_full, 256x14x14 -> 256 3x3: weights 256*256*9*2 = 1,179,648 B exceed CBUF, the
    100,352 B input stays and the weights stream through once: no re-reads."""
    conv = estimate_chain("nv_full", _conv_bn_relu(256, 256), (1, 256, 14, 14)).ops[0]
    assert conv.input_bytes == 100_352 and conv.weight_bytes == 1_179_648
    assert conv.reread_bytes == 0


def test_input_slices_reread_their_halo():
    """nv_small (CBUF 128 KiB, atom 8 B, atomic K 8 / 2 = 4 at fp32), 32x112x112 -> 32, 3x3:
    row = 112 * 64 B = 7,168 B, image 802,816 B does not fit; weights 18,432 B stay, leaving
    112,640 B = 15 rows per slice -> 13 output rows per slice, 9 slices, 128 rows read in all:
    16 re-read rows = 114,688 B.
    mac cycles = 12,544 positions * ceil(32/8) * ceil(32/4) * 9 = 3,612,672."""
    conv = estimate_chain("nv_small", _conv_bn_relu(32, 32), (1, 32, 112, 112)).ops[0]
    assert conv.input_bytes == 128 * 7_168
    assert conv.reread_bytes == 114_688
    assert conv.weight_bytes == 18_432
    assert conv.mac_cycles == 3_612_672


def test_atomic_rounding_of_small_layers():
    """RGB stem on nv_full: 3 channels use 3 of 64 atomic-C lanes. 224x224 -> 112x112 7x7/2:
    mac cycles = 12,544 * ceil(3/64) * ceil(64/16) * 49 = 2,458,624; utilisation of the array
    during the convolution = 118,013,952 / (2,458,624 * 1024) = 3/64."""
    conv = estimate_chain("nv_full", [Conv(np.zeros((64, 3, 7, 7), np.float32), stride=2,
                                           padding=3)], (1, 3, 224, 224)).ops[0]
    assert conv.macs == 118_013_952 and conv.mac_cycles == 2_458_624
    assert conv.macs / (conv.mac_cycles * 1024) == pytest.approx(3 / 64)


def test_depthwise_uses_one_lane():
    conv = estimate_chain("nv_full", [Conv(np.zeros((32, 1, 3, 3), np.float32), padding=1,
                                           groups=32)], (1, 32, 10, 10)).ops[0]
    assert conv.op == "conv2d_depthwise"
    assert conv.mac_cycles == 100 * 32 * 9 and conv.macs == 100 * 32 * 9


def test_pdp_and_elementwise_rates():
    """nv_full: PDP 8 input elements per cycle; an SDP with an element-wise op runs at the
    element-wise unit's 4 per cycle and reads its operand."""
    pool = estimate_chain("nv_full", [Pool("max", 2, 2)], (1, 64, 16, 16)).ops[0]
    assert pool.compute_cycles == 64 * 256 // 8
    assert pool.input_bytes == 256 * 128 and pool.bytes_written == 64 * 128
    add = estimate_chain("nv_full", [Sdp(ew_op="add", operand=np.zeros((1, 64, 16, 16)))],
                         (1, 64, 16, 16)).ops[0]
    assert add.compute_cycles == 64 * 256 // 4 and add.operand_bytes == 256 * 128


def test_memory_bound_when_dram_is_slow():
    slow = AccelConfig.preset("nv_full").replace(dram_bytes_per_s=1e9)
    run = estimate_chain(slow, _conv_bn_relu(64, 64), (1, 64, 56, 56))
    assert run.cycles == 876_800  # 876,800 bytes at 1 byte per cycle
    assert run.utilization == pytest.approx(112_896 / 876_800)


def test_run_reports_the_same_cost_as_estimate_and_profile_records_it():
    rng = np.random.default_rng(3)
    chain = [Conv(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), padding=1),
             Sdp(shift=np.zeros(16), act="relu"), Pool("max", 2, 2)]
    x = rng.standard_normal((1, 8, 20, 20)).astype(np.float32)
    profile_enable(True)
    try:
        _, stats = Device("nv_full").run(chain, x, label="layer1")
        _, stats2 = Device("nv_full").run(chain, x, mode="independent", label="layer1_split")
    finally:
        profile_enable(False)
    expected = estimate_chain("nv_full", chain, x.shape)
    assert stats.cycles == expected.cycles and stats.ops == expected.ops
    records = profile_records()
    assert [r.label for r in records] == ["layer1", "layer1_split"]
    assert records[0].ops == stats.ops and records[1].cycles == stats2.cycles
    Device("nv_full").run(chain, x)  # profiling off: nothing more is recorded
    assert len(profile_records()) == 2


def test_profile_context_manager_collects_runs_and_totals():
    import accel_codegen

    rng = np.random.default_rng(5)
    chain = [Conv(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), padding=1),
             Sdp(act="relu")]
    x = rng.standard_normal((1, 4, 10, 10)).astype(np.float32)
    dev = Device("nv_full")
    with accel_codegen.profile() as prof:
        _, a = dev.run(chain, x, label="first")
        _, b = dev.run(chain, x, mode="independent", label="second")
    assert [r.label for r in prof.records] == ["first", "second"]
    assert prof.totals["cycles"] == a.cycles + b.cycles
    assert prof.totals["bytes_read"] == a.bytes_read + b.bytes_read
    assert len(prof.ops) == 4
    table = prof.table(clock_hz=1e9)
    assert "first" in table and "second" in table and "simulated time" in table


def test_strided_1x1_reads_only_the_rows_it_uses_and_never_rereads_negatively():
    """A 1x1 stride-2 conv touches every other row: sliced or not, it reads only those."""
    for name in ("nv_small", "nv_full"):
        conv = estimate_chain(name, [Conv(np.zeros((64, 64, 1, 1), np.float32), stride=2)],
                              (1, 64, 64, 64)).ops[0]
        assert conv.reread_bytes >= 0
        assert conv.input_bytes <= 32 * 64 * 128  # 32 of 64 rows, 64 positions of 128 B
