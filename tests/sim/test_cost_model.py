"""The cost model against figures computed by hand (see the comments for the arithmetic), in
every precision: 1-byte int8, 2-byte fp16, fp32 charged as fp16."""
import numpy as np
import pytest

from accel_codegen import (AccelConfig, AccelInvalidError, AccelUnsupportedError, Bdma, Conv,
                           Device, Pool, Sdp, estimate_chain)
from accel_codegen.sim.ops import SHAPE_ONLY
from accel_codegen.sim import profile_enable, profile_records
from accel_codegen.sim.config import ENERGY_FIELDS
from accel_codegen.sim.device import ChainBatch

DEVICE = Device("nv_full", num_threads=2)


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
    DRAM: 20 B per cycle, 64-byte bursts (every stream here is whole bursts), 0.5 cycle of
    turnaround per burst written, 1,200 cycles of latency per run (FUSED) or op (INDEPENDENT).
    CBUF loading before the first MAC: the input and the first kernel group's 16 kernels,
    (401,408 + 73,728 / 4) / 20 = 20,992 cycles; CONV compute 112,896 + 20,992 = 133,888
    (3,136 positions are 196 whole stripes: no weight-load stall). The tail after the last
    byte read: one kernel group's 112,896 / 4 = 28,224. Pipeline cycles: CONV 86, SDP 52.
    fused: read 475,392, write 401,408 = 6,272 bursts; memory 1,200 + 876,800 / 20 + 3,136
           = 48,176 cycles; cycles = 86 + 52 + max(1,200 + 133,888, 48,176 + 28,224)
           = 135,226.
    independent: CONV writes and SDP re-reads the 401,408 B intermediate:
           CONV 86 + max(1,200 + 133,888, 1,200 + ceil(876,544 / 20 + 3,136) = 48,164
           + 28,224) = 135,174; SDP 52 + max(1,200 + 12,544, 1,200 + ceil(803,072 / 20 +
           3,136 = 43,289.6) = 44,490) = 44,542; 179,716 cycles."""
    chain = _conv_bn_relu(64, 64)
    fused = estimate_chain("nv_full", chain, (1, 64, 56, 56), mode="fused")
    conv, sdp = fused.ops
    assert conv.macs == 115_605_504 and conv.mac_cycles == 112_896
    assert conv.input_bytes == 401_408 and conv.weight_bytes == 73_728
    assert conv.reread_bytes == 0 and conv.bytes_written == 0
    assert sdp.input_bytes == 0 and sdp.weight_bytes == 256 and sdp.bytes_written == 401_408
    assert sdp.compute_cycles == 12_544
    assert (fused.bytes_read, fused.bytes_written) == (475_392, 401_408)
    assert conv.compute_cycles == 133_888
    assert fused.cycles == 135_226 and fused.memory_cycles == 48_176
    assert fused.utilization == pytest.approx(112_896 / 135_226)

    independent = estimate_chain("nv_full", chain, (1, 64, 56, 56), mode="independent")
    assert (independent.bytes_read, independent.bytes_written) == (876_800, 802_816)
    assert [op.memory_cycles for op in independent.ops] == [48_164, 44_490]
    assert [op.cycles for op in independent.ops] == [135_174, 44_542]
    assert independent.cycles == 179_716


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


def test_op_names_join_their_stages():
    """Each op's name: its kind, and an SDP's stages joined as ``sdp:a+b+c``."""
    chain = [Conv(np.zeros((4, 4, 3, 3), np.float32), padding=1),
             Sdp(scale=np.ones(4), ew_op="add", operand=np.ones((1, 4, 6, 6)), act="relu"),
             Pool("max", 2, 2)]
    stats = estimate_chain("nv_full", chain, (1, 4, 6, 6))
    assert [op.op for op in stats.ops] == ["conv2d", "sdp:scale_shift+add+relu", "pdp:max"]
    assert estimate_chain("nv_full", [Sdp(act="relu")], (1, 4, 6, 6)).ops[0].op == "sdp:relu"


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
    # memory: 876,800 bytes at 1 byte per cycle, 6,272 bursts written x 0.5, the latency once
    # = 881,136; the CONV from its first data to its last MAC: the longer of 419,840 cycles of
    # CBUF loading (input and first kernel group) + 112,896 MAC cycles, and its 475,136 bytes
    # loaded + the last kernel group's 28,224 MAC cycles; then the CONV's and SDP's 86 + 52
    # pipeline cycles and the long pole
    assert run.memory_cycles == 876_800 + 3_136 + 1_200
    assert run.ops[0].compute_cycles == max(112_896 + 419_840, 475_136 + 28_224)
    assert run.cycles == 86 + 52 + max(532_736 + 1_200, 881_136)
    assert run.utilization == pytest.approx(112_896 / 881_274)


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


# --- int8 and fp16: 1-byte int8 at the full atomic K, 2-byte fp16 at half ----------------------

def test_cost_int8_is_one_byte_at_full_atomic_k_fp16_two_bytes_at_half():
    config = AccelConfig.preset("nv_full")
    n, c, h, w, k = 1, 64, 14, 14, 128
    shape = (n, c, h, w)

    def layer(precision):
        conv = Conv(None, weight_shape=(k, c, 3, 3), padding=1, precision=precision)
        if precision == "int8":
            sdp = Sdp(bias=SHAPE_ONLY, mul=SHAPE_ONLY, rshift=SHAPE_ONLY, act="relu",
                      precision="int8")
        else:
            sdp = Sdp(scale=SHAPE_ONLY, shift=SHAPE_ONLY, act="relu", precision=precision)
        return estimate_chain(config, [conv, sdp], shape)

    i8, f16 = layer("int8"), layer("fp16")
    positions = n * h * w

    def feature(channels, element):
        atom = config.memory_atom_bytes
        return positions * -(-channels * element // atom) * atom

    assert i8.macs == f16.macs == positions * k * c * 9
    assert i8.ops[0].mac_cycles == positions * -(-c // config.atomic_c) * -(-k // config.atomic_k) * 9
    assert f16.ops[0].mac_cycles == positions * -(-c // config.atomic_c) * -(-k // (
        config.atomic_k // 2)) * 9
    assert f16.ops[0].mac_cycles == 2 * i8.ops[0].mac_cycles
    assert config.macs_per_cycle("int8") == 2 * config.macs_per_cycle("fp16")
    assert (i8.ops[0].input_bytes, f16.ops[0].input_bytes) == (feature(c, 1), feature(c, 2))
    assert (i8.ops[0].weight_bytes, f16.ops[0].weight_bytes) == (k * c * 9, k * c * 9 * 2)
    assert (i8.ops[1].bytes_written, f16.ops[1].bytes_written) == (feature(k, 1), feature(k, 2))
    assert i8.ops[1].weight_bytes == k * (4 + 2 + 1)       # int32 bias, int16 mul, uint8 shift
    assert f16.ops[1].weight_bytes == k * 2 * 2            # fp16 scale and shift
    # CONV compute: 196 positions are 12 stripes of 16 and one of 4, which waits for the next
    # weight block's 16-cycle load; then the CBUF loading before the first MAC (the input and
    # the first kernel group's weights) at 20 bytes per cycle
    for run, element, kernels in ((i8, 1, config.atomic_k), (f16, 2, config.atomic_k // 2)):
        blocks = -(-c // config.atomic_c) * -(-k // kernels) * 9
        first = feature(c, element) + k * c * 9 * element * kernels // k
        assert run.ops[0].compute_cycles == blocks * (12 * 16 + 16) + -(-first // 20)
    assert (i8.ops[0].compute_cycles, f16.ops[0].compute_cycles) == (9_037, 17_152)
    # the fp32 reference precision is charged as fp16
    f32 = estimate_chain(config, [Conv(None, weight_shape=(k, c, 3, 3), padding=1),
                                  Sdp(scale=SHAPE_ONLY, shift=SHAPE_ONLY, act="relu")], shape)
    assert (f32.cycles, f32.bytes_read) == (f16.cycles, f16.bytes_read)
    # an executed run costs what the estimate says
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    chain = [Conv(rng.integers(-128, 128, (k, c, 3, 3)).astype(np.int8), padding=1,
                  precision="int8"),
             Sdp(bias=np.zeros(k, np.int32), mul=np.ones(k, np.int16), rshift=np.zeros(k, np.uint8),
                 act="relu", precision="int8")]
    _, run = DEVICE.run(chain, x)
    assert (run.cycles, run.bytes_read, run.bytes_written) == (i8.cycles, i8.bytes_read,
                                                               i8.bytes_written)


def test_cost_independent_int8_and_fp16_convs_hand_the_sdp_their_accumulators():
    """INDEPENDENT mode: an INT8/FP16 CONV's result goes on the fly to its SDP (CACC feeds SDP);
    an fp32 CONV writes it to memory and the SDP reads it back."""
    shape = (1, 32, 16, 16)
    for precision in ("int8", "fp16", "fp32"):
        conv = Conv(None, weight_shape=(32, 32, 3, 3), padding=1, precision=precision)
        sdp = (Sdp(bias=SHAPE_ONLY, precision="int8") if precision == "int8"
               else Sdp(shift=SHAPE_ONLY, precision=precision))
        stats = estimate_chain("nv_full", [conv, sdp, Pool("max", 2, 2, precision=precision)],
                               shape, mode="independent")
        on_chip = precision != "fp32"
        assert (stats.ops[0].bytes_written == 0) == on_chip, precision
        assert (stats.ops[1].input_bytes == 0) == on_chip, precision
        assert stats.ops[1].bytes_written > 0 and stats.ops[2].input_bytes > 0


def test_shape_only_int8_and_fp16_operands_estimate_but_do_not_run():
    conv = Conv(None, weight_shape=(8, 4, 3, 3), precision="int8")
    sdp = Sdp(bias=SHAPE_ONLY, mul=SHAPE_ONLY, rshift=SHAPE_ONLY, ew_op="add",
              operand=SHAPE_ONLY, act="prelu", prelu_mul=SHAPE_ONLY, precision="int8")
    stats = estimate_chain("nv_full", [conv, sdp], (1, 4, 8, 8))
    assert stats.ops[1].operand_bytes > 0 and stats.ops[1].weight_bytes == 8 * (4 + 2 + 1 + 2)
    with pytest.raises(AccelInvalidError, match="shape-only operands"):
        DEVICE.run([sdp], np.zeros((1, 8, 6, 6), np.int8))
    fp16 = estimate_chain("nv_full", [Sdp(scale=SHAPE_ONLY, precision="fp16")], (1, 4, 8, 8))
    assert fp16.ops[0].precision == "fp16"


# --- energy ------------------------------------------------------------------------------------

#: Horowitz, "Computing's energy problem", ISSCC 2014, 45 nm, 0.9 V (pJ): the source the presets'
#: energies derive from (config.c), restated here to check the derivation.
HOROWITZ_45NM = {"int8 mult": 0.2, "int32 add": 0.1, "fp16 mult": 1.1, "fp32 add": 0.9,
                 "fp32 mult": 3.7, "8 KB read 64b": 10.0, "32 KB read 64b": 20.0,
                 "1 MB read 64b": 100.0, "DRAM 64b low": 1300.0}


@pytest.mark.parametrize("name", AccelConfig.preset_names())
def test_default_energies_trace_to_the_published_table(name):
    t = HOROWITZ_45NM
    cfg = AccelConfig.preset(name)
    bank = {"nv_small": "8 KB read 64b"}.get(name, "32 KB read 64b")  # 4 KiB / 32 KiB banks
    expected = {"mac_int8_pj": t["int8 mult"] + t["int32 add"],
                "mac_fp16_pj": t["fp16 mult"] + t["fp32 add"],
                "cbuf_read_pj_per_byte": t[bank] / 8, "cbuf_write_pj_per_byte": t[bank] / 8,
                "dram_pj_per_byte": t["DRAM 64b low"] / 8,
                "sram_pj_per_byte": t["1 MB read 64b"] / 8,
                "sdp_pj_per_element": t["fp32 mult"] + t["fp32 add"],
                "pdp_pj_per_element": t["fp32 add"],
                "cdp_pj_per_element": 2 * t["fp32 mult"] + 2 * t["fp32 add"]}
    assert {field: getattr(cfg, field) for field in expected} == pytest.approx(expected)


def test_energy_of_a_fused_chain_by_hand():
    """nv_full, fp32 charged as fp16, 64x56x56 -> 64 3x3 conv + scale/shift/relu + 2x2 max pool
    (the first test's layer, pooled). Energies: MAC fp16 2.0, CBUF 2.5 / B, DRAM 162.5 / B, SDP
    4.6 and PDP 0.9 per element.
    CONV  MACs 115,605,504 x 2.0                                         = 231,211,008
          CBUF write: input 401,408 + weights 73,728 = 475,136 B
          CBUF read: data 112,896 cycles x 64 lanes x 2 B                = 14,450,688 B
                     weights ceil(3,136 / 16) = 196 stripes x 36 blocks (1 x 1 x 4 x 3 x 3)
                     x 64 x 16 x 2 B                                     = 14,450,688 B
          CBUF (475,136 + 28,901,376) x 2.5                              = 73,441,280
          DRAM 475,136 B read x 162.5                                    = 77,209,600
    SDP   200,704 elements x 4.6 = 923,238.4; DRAM 256 B params x 162.5   = 41,600
    PDP   200,704 elements x 0.9 = 180,633.6; DRAM 28 x 28 x 128 B written
          = 100,352 x 162.5                                              = 16,307,200
    total 231,211,008 + 73,441,280 + 93,558,400 + 1,103,872              = 399,314,560 pJ.
    Independent: the CONV writes, the SDP reads and writes and the PDP reads the 401,408 B
    intermediate: 4 x 401,408 x 162.5 = 260,915,200 pJ more DRAM energy, nothing else."""
    chain = _conv_bn_relu(64, 64) + [Pool("max", 2, 2)]
    fused = estimate_chain("nv_full", chain, (1, 64, 56, 56))
    conv, sdp, pdp = fused.ops
    assert (conv.cbuf_write_bytes, conv.cbuf_read_bytes) == (475_136, 28_901_376)
    assert conv.mac_energy_pj == 231_211_008 and conv.cbuf_energy_pj == 73_441_280
    assert conv.dram_energy_pj == 77_209_600 and conv.engine_energy_pj == 0
    assert sdp.engine_energy_pj == pytest.approx(923_238.4) and sdp.dram_energy_pj == 41_600
    assert pdp.engine_energy_pj == pytest.approx(180_633.6)
    assert pdp.dram_energy_pj == 16_307_200
    assert (sdp.cbuf_read_bytes, sdp.cbuf_energy_pj, pdp.mac_energy_pj) == (0, 0, 0)
    assert fused.energy_pj == pytest.approx(399_314_560, rel=1e-12)
    assert (fused.mac_energy_pj, fused.cbuf_energy_pj, fused.dram_energy_pj) == \
        (231_211_008, 73_441_280, 93_558_400)
    assert fused.engine_energy_pj == pytest.approx(1_103_872)
    for op in fused.ops:
        assert op.energy_pj == pytest.approx(op.mac_energy_pj + op.cbuf_energy_pj +
                                             op.dram_energy_pj + op.engine_energy_pj)
    independent = estimate_chain("nv_full", chain, (1, 64, 56, 56), mode="independent")
    assert independent.dram_energy_pj - fused.dram_energy_pj == 4 * 401_408 * 162.5
    assert independent.energy_pj - fused.energy_pj == pytest.approx(260_915_200, rel=1e-12)


def test_int8_macs_and_copies_are_charged_their_own_energies():
    """An int8 conv charges mac_int8_pj per MAC; a BDMA copy only its DRAM bytes."""
    cfg = AccelConfig.preset("nv_full")
    conv = Conv(None, weight_shape=(32, 16, 3, 3), padding=1, precision="int8")
    sdp = Sdp(bias=SHAPE_ONLY, mul=SHAPE_ONLY, rshift=SHAPE_ONLY, precision="int8")
    run = estimate_chain(cfg, [conv, sdp], (1, 16, 8, 8))
    assert run.mac_energy_pj == pytest.approx(run.macs * cfg.mac_int8_pj)
    assert run.ops[0].cbuf_write_bytes == run.ops[0].input_bytes + run.ops[0].weight_bytes
    copy = estimate_chain(cfg, [Bdma(channels=16, dst_channels=32, precision="int8")],
                          (1, 16, 8, 8)).ops[0]
    assert copy.energy_pj == copy.dram_energy_pj == \
        (copy.bytes_read + copy.bytes_written) * cfg.dram_pj_per_byte > 0


def test_a_configuration_without_energies_charges_none():
    zero = AccelConfig.preset("nv_full").replace(**{f: 0.0 for f in ENERGY_FIELDS})
    chain = _conv_bn_relu(16, 16) + [Pool("avg", 2, 2)]
    run = estimate_chain(zero, chain, (1, 16, 8, 8), mode="independent")
    assert run.cycles > 0 and run.bytes_read > 0
    assert run.energy_pj == 0 and all(op.energy_pj == 0 for op in run.ops)
    # each energy charges its own action only
    only_dram = zero.replace(dram_pj_per_byte=1.0)
    run = estimate_chain(only_dram, chain, (1, 16, 8, 8), mode="independent")
    assert run.energy_pj == run.dram_energy_pj == run.bytes_read + run.bytes_written


def test_a_batch_of_chains_costs_each_as_alone_and_names_a_failing_chain():
    layers = [(_conv_bn_relu(16, 32), (1, 16, 12, 12), "fused"),
              ([Pool("max", 2, 2)], (1, 32, 12, 12), "independent")]
    batch = ChainBatch("nv_full", layers, "fp32")
    for config in ("nv_full", "nv_small"):
        assert batch.estimate(config) == [estimate_chain(config, ops, shape, mode=mode)
                                          for ops, shape, mode in layers]
    with_add = ChainBatch("nv_full", layers + [
        ([Sdp(ew_op="add", operand=SHAPE_ONLY)], (1, 8, 4, 4), "fused")], "fp32")
    with pytest.raises(AccelUnsupportedError, match="chain 2: .*element-wise"):
        with_add.estimate("nv_small")  # nv_small has no element-wise unit


def test_estimate_chains_refuses_bad_arguments():
    from accel_codegen._accel_ffi import ffi, lib

    config = AccelConfig.preset("nv_full").to_c()
    runs = ffi.new("accel_run_stats[]", 1)
    assert lib.accel_estimate_chains(config, ffi.NULL, -1, runs, ffi.NULL) == lib.ACCEL_ERR_INVALID
    assert "num_chains = -1" in ffi.string(lib.accel_last_error()).decode()
    assert lib.accel_estimate_chains(config, ffi.NULL, 1, runs, ffi.NULL) == lib.ACCEL_ERR_NULL
    assert lib.accel_estimate_chains(config, ffi.NULL, 0, ffi.NULL, ffi.NULL) == lib.ACCEL_OK
