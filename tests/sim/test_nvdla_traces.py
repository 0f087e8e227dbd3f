"""NVDLA's own nv_small trace tests played on the simulator's NVDLA front end
(accel_codegen.sim.nvdla): every test that NVDLA's RTL passes must give NVDLA's golden CRC-32.

The traces and the RTL's figures live in ``../shared/nvdla-traces`` beside the repository (its
README gives the format and the CRC). CI has that folder and its absence there is a failure;
on a clone without it these tests skip and say why.
"""
import csv
import os
import pathlib

import numpy as np
import pytest

from accel_codegen.errors import AccelError
from accel_codegen.sim.nvdla import arith, nvdla_trace, play, regs
from accel_codegen.sim.nvdla.trace import Memory, parse_cfg

TRACES = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "nvdla-traces"
RESULTS = TRACES / "rtl_results.tsv"


def _rtl_results():
    if not RESULTS.exists():
        return {}
    with open(RESULTS) as f:
        return {row["test"]: row for row in csv.DictReader(f, delimiter="\t")}


RTL = _rtl_results()
PASSING = sorted(t for t, row in RTL.items() if row["rtl_verdict"] == "pass")
FAILING = sorted(t for t, row in RTL.items() if row["rtl_verdict"] != "pass")


@pytest.fixture(scope="module")
def traces():
    if not RESULTS.exists():
        message = f"NVDLA's trace tests are not at {TRACES} (../shared/nvdla-traces)"
        if os.environ.get("CI"):
            pytest.fail(message + ": CI must provide them")
        pytest.skip(message)
    return TRACES


def _cfg(root, test):
    folder = root / "tests" / "nv_small" / test
    cfgs = sorted(folder.glob("*.cfg"))
    assert len(cfgs) == 1, f"{folder}: expected one .cfg, found {cfgs}"
    return cfgs[0]


def test_trace_folder_lists_the_rtl_runs(traces):
    """The RTL passed 70 of 74 runnable tests: the list these tests cover is that one."""
    assert len(PASSING) == 70 and len(FAILING) == 4
    classes = {}
    for test in PASSING:
        classes[test.split("_")[0]] = classes.get(test.split("_")[0], 0) + 1
    assert classes == {"cdp": 23, "dc": 12, "pdp": 15, "sdp": 20}


#: Each played trace's layers, kept for the cycle calibration test (playing is the slow part).
_LAYERS = {}


@pytest.mark.parametrize("test", PASSING or ["(no traces)"])
def test_trace_matches_golden_crc(traces, test):
    run = play(str(_cfg(traces, test)))
    _LAYERS[test] = run.layers
    assert run.expected, f"{test}: no check_crc in the trace"
    assert [f"{c:08x}" for c in run.crcs] == [f"{c:08x}" for c in run.expected]


def test_cdp_traces_run_the_simulators_own_int8_lrn(traces, monkeypatch):
    """Every CDP trace runs on the simulator's INT8 CDP engine (the C, the compiler's LRN) with
    the descriptor decoded from its registers, and reference.cdp_int8 gives the same bits: one
    definition for the traces and the compiled models."""
    from accel_codegen import reference as ref
    from accel_codegen.sim.nvdla import cdp
    seen = []
    engine = cdp.run_int8

    def spy(x, size, p):
        y = engine(x, size, p)
        seen.append((x, size, p, y))
        return y

    monkeypatch.setattr(cdp, "run_int8", spy)
    tests = [t for t in PASSING if t.startswith("cdp")]
    for test in tests:
        assert play(str(_cfg(traces, test))).matches, test
    assert len(seen) == len(tests) == 23
    for x, size, p, y in seen:
        np.testing.assert_array_equal(y, ref.cdp_int8(x[None], size, p)[0])
    assert {p.le_exponent for _, _, p, _ in seen} == {0, 1}  # both LE index modes covered


@pytest.mark.parametrize("test", FAILING or ["(no traces)"])
def test_traces_the_rtl_fails_are_refused(traces, test):
    """The four tests the RTL fails program the SDP's EW unit and LUT, which nv_small removes:
    the front end refuses them with a typed error rather than computing something."""
    with pytest.raises(AccelError, match="EW"):
        play(str(_cfg(traces, test)))


def test_nvdla_trace_json_fields(traces):
    test = "sdp_3x3x33_bs_bn_int8_0"
    result = nvdla_trace(str(_cfg(traces, test)))
    assert result["crc"] == ["0x44d46c92"]
    assert isinstance(result["cycles"], int) and result["cycles"] > 0


def test_register_map_addresses():
    """A few of nv_small's register addresses and fields (NVDLA's register specification)."""
    assert regs.lookup("NVDLA_CDP.D_OP_ENABLE_0").address == 0xD048
    assert regs.lookup("NVDLA_CDMA.D_DATAIN_SIZE_0_0").address == 0x301C
    assert regs.lookup("NVDLA_SDP.D_DP_BS_CFG_0").address == 0x9058
    reg = regs.lookup("NVDLA_PDP.D_POOLING_KERNEL_CFG_0")
    assert reg.field(0x110202, "KERNEL_HEIGHT") == 2
    assert reg.field(0x110202, "KERNEL_STRIDE_WIDTH") == 1
    with pytest.raises(AccelError, match="NVDLA_SDP.D_NO_SUCH_0"):
        regs.lookup("NVDLA_SDP.D_NO_SUCH_0")
    with pytest.raises(AccelError, match="no field"):
        reg.field(0, "NOPE")


def test_rounding_is_half_away_from_zero():
    x = np.array([3, -3, 2, -2, 5, -5, 6, -6])
    assert arith.shift_right_round(x, 1).tolist() == [2, -2, 1, -1, 3, -3, 3, -3]
    assert arith.shift_right_sat(np.array([1 << 40]), 1, 32).tolist() == [2**31 - 1]
    assert arith.sdp_cvt(np.array([300, -300]), 0, 1, 0).tolist() == [127, -128]


def test_bad_trace_command_is_a_typed_error(tmp_path):
    cfg = tmp_path / "bad.cfg"
    cfg.write_text("reg_write(NVDLA_SDP.D_OP_ENABLE_0, 0x1);\nfrobnicate(1, 2);\n")
    with pytest.raises(AccelError, match="frobnicate"):
        parse_cfg(str(cfg))


def test_poll_of_a_status_the_simulator_lacks_is_a_typed_error(tmp_path):
    """The traces poll CDMA's CBUF flush (done at once in the simulator); a wait for any other
    status or value would never end on the hardware's terms: refused, named."""
    cfg = tmp_path / "poll.cfg"
    cfg.write_text("poll_reg_equal(NVDLA_CDMA.S_CBUF_FLUSH_STATUS_0, 0x1);\n")
    assert play(str(cfg)).crcs == []
    for poll in ("NVDLA_CDMA.S_CBUF_FLUSH_STATUS_0, 0x0", "NVDLA_SDP.S_STATUS_0, 0x1"):
        cfg.write_text(f"poll_reg_equal({poll});\n")
        with pytest.raises(AccelError, match=r"poll_reg_equal\(" + poll.split(",")[0]):
            play(str(cfg))


def test_sparse_memory_crc():
    mem = Memory()
    mem.write(0x8000FFFE, np.arange(4, dtype=np.uint8))   # straddles a page boundary
    assert mem.read(0x8000FFFC, 8).tolist() == [0, 0, 0, 1, 2, 3, 0, 0]
    import zlib
    assert mem.crc32(0x8000FFFC, 8) == zlib.crc32(bytes([0, 0, 0, 1, 2, 3, 0, 0]))


def test_cli_prints_one_json_line_per_trace(traces, capsys, tmp_path):
    """``accel-codegen nvdla-trace CFG``: one JSON line with the CRCs in order and the cycles;
    exit 0 when they match the trace's golden CRCs, 1 when one differs."""
    import json

    from conftest import run_cli

    test = next(t for t in PASSING if t.startswith("pdp_"))
    status, out, _ = run_cli(capsys, "nvdla-trace", _cfg(traces, test))
    line = json.loads(out.strip())
    assert status == 0 and line["match"] is True
    assert line["crc"] == line["golden"] and len(line["crc"]) >= 1
    assert isinstance(line["cycles"], int) and line["cycles"] > 0

    # the same trace with a wrong golden CRC: the command says so by its exit status
    cfg = _cfg(traces, test)
    for f in cfg.parent.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    text = (tmp_path / cfg.name).read_text()
    bad = text.replace(line["golden"][0], "0x00000000").replace(
        line["golden"][0].upper().replace("0X", "0x"), "0x00000000")
    assert bad != text, "the golden CRC is not written as the CLI prints it"
    (tmp_path / cfg.name).write_text(bad)
    status, out, _ = run_cli(capsys, "nvdla-trace", tmp_path / cfg.name)
    assert status == 1 and json.loads(out.strip())["match"] is False


# --- cycles: the cost model against the RTL (issue 31 item 4) --------------------------------

#: Tests the calibrated cost model does not bring within the issue's bounds, each with the
#: error it reaches (the honest bound: a regression fails). docs/nvdla_rtl.md says why.
CYCLE_EXCEPTIONS = {}  # none since the CACC's credits are costed (cost_model.c)
#: Tests of 500 cycles or fewer: within 64 cycles, but for these (none since split mode is
#: costed: cycles.pdp_split_cycles).
SMALL_EXCEPTIONS = {}


def test_cost_model_cycles_against_the_rtl(traces):
    """The cost model under the testbench's memory (cycles.testbench_config) against the RTL's
    cycles to the last output write, on every trace the RTL passes: within 15 % on all but
    CYCLE_EXCEPTIONS (within theirs), median under 1 %, within 64 cycles on the tests of 500
    cycles or fewer (but SMALL_EXCEPTIONS), and each class's mean absolute error bounded."""
    import statistics

    from accel_codegen.sim.nvdla.cycles import estimate_cycles

    errors, classes = {}, {}
    for test in PASSING:
        layers = _LAYERS.get(test) or play(str(_cfg(traces, test))).layers
        rtl = int(RTL[test]["rtl_cycles_last_write"])
        estimate = estimate_cycles(layers)
        errors[test] = (estimate - rtl) / rtl
        classes.setdefault(test.split("_")[0], []).append(abs(errors[test]))
        assert abs(errors[test]) <= CYCLE_EXCEPTIONS.get(test, 0.15), (test, estimate, rtl)
        if rtl <= 500:
            assert abs(estimate - rtl) <= SMALL_EXCEPTIONS.get(test, 64), (test, estimate, rtl)
    assert statistics.median(abs(e) for e in errors.values()) < 0.01
    means = {c: statistics.mean(v) for c, v in classes.items()}
    assert means["cdp"] < 0.015 and means["dc"] < 0.02, means
    assert means["pdp"] < 0.01 and means["sdp"] < 0.03, means
    # every exception is still one (a fix should tighten this table, not hide behind it)
    assert all(abs(errors[t]) > 0.15 for t in CYCLE_EXCEPTIONS), {
        t: round(errors[t], 3) for t in CYCLE_EXCEPTIONS}


def test_pdp_split_mode_costs_the_shared_columns_each_further_strip_rereads(traces):
    """cycles.pdp_split_cycles from the registers (NV_NVDLA_PDP_RDMA_ig's request size): each
    strip after the first re-reads and pools ``kernel_w - stride_w`` columns per line of each
    8-channel surface, one element per cycle, nothing more (no restart per strip); fewer when
    the stride exceeds the kernel. Both split traces then land on the RTL's cycles exactly."""
    from accel_codegen.sim.nvdla.cycles import (estimate_cycles, pdp_split_cycles,
                                                testbench_config)
    from accel_codegen.sim.nvdla.layers import Layer

    config = testbench_config()
    pool = dict(kernel=(2, 5), stride=(2, 2), method=1, padding=(0, 0, 0, 0), on_the_fly=False)
    # 3 strips, 20 channels = 3 surfaces, 4 lines, 3 shared columns of 8 elements
    assert pdp_split_cycles(Layer("pdp", (20, 4, 30), (20, 2, 13), dict(pool, splits=3)),
                            config) == 2 * 3 * 3 * 4 * 8
    assert pdp_split_cycles(Layer("pdp", (20, 4, 30), (20, 2, 13), dict(pool, splits=1)),
                            config) == 0
    wide = dict(pool, kernel=(2, 1), stride=(2, 3), splits=2)
    assert pdp_split_cycles(Layer("pdp", (8, 4, 30), (8, 2, 10), wide), config) == -2 * 4 * 8
    for test in ("pdp_5x7x8_4x1_split_max_int8_0", "pdp_16x6x16_4x2_split_max_int8_0"):
        layers = _LAYERS.get(test) or play(str(_cfg(traces, test))).layers
        assert estimate_cycles(layers) == int(RTL[test]["rtl_cycles_last_write"]), test


def test_cacc_credits_hold_one_stripe_and_a_group_of_one_kernel_delivers_eight_lanes(traces):
    """cost_model.c's cacc_credit_stall, from nv_small's RTL: the CSC sends a stripe's last
    package only with credits for the whole stripe (16 on nv_small, one a position), the CACC
    reads a position's entry 36 cycles after that package leaves the CSC, sends it to the SDP
    in 8 beats plus one read cycle, and the credit counts in the CSC 3 cycles after the last
    beat. A 1x1 convolution of 8 channels over 16 positions (16 MAC cycles a kernel group):
    the second group's stripe pops when the first's 16th position credits back, at
    36 + 15 x 9 + 8 + 3 = 182, so 16 MAC cycles and a wait of 166 more. A group of one kernel
    waits as long (the delivery buffer sends atomic K lanes whatever the count). Over 20
    positions (16 + 4), the 4-position stripes wait for 4 positions (36 + 3 x 9 + 11 = 74,
    ready at 16: 58) and the second group's first stripe for the 4 queued behind the first
    16 (read from 180, credited at 218, ready at 82: 136), its 4-position stripe 58 again.
    dc_8192x1x1 (6 MAC cycles a
    position, the last of its 6 groups one kernel) lands within 0.1 %."""
    from accel_codegen.sim.device import estimate_chain
    from accel_codegen.sim.nvdla.cycles import estimate_cycles, testbench_config
    from accel_codegen.sim.ops import Conv, Sdp

    config = testbench_config()

    def conv_cycles(k, positions):
        ops = [Conv(weights=None, weight_shape=(k, 8, 1, 1), stride=(1, 1),
                    padding=(0, 0, 0, 0), dilation=(1, 1), precision="int8"),
               Sdp(precision="int8")]
        return estimate_chain(config, ops, (1, 8, 1, positions),
                              precision="int8").ops[0].compute_cycles

    assert conv_cycles(16, 16) - conv_cycles(8, 16) == 16 + 166
    assert conv_cycles(9, 16) == conv_cycles(16, 16) and conv_cycles(9, 20) == conv_cycles(16, 20)
    assert conv_cycles(16, 20) - conv_cycles(8, 20) == (16 + 8) + 136 + 58
    test = "dc_8192x1x1_2x3x1x41_int8_0"
    rtl = int(RTL[test]["rtl_cycles_last_write"])
    layers = _LAYERS.get(test) or play(str(_cfg(traces, test))).layers
    assert abs(estimate_cycles(layers) - rtl) <= 0.001 * rtl
