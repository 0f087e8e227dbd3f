"""The CDP engine: local response normalisation (PyTorch's LocalResponseNorm) against the NumPy
reference (bit for bit, fp32 and fp16) and against PyTorch; its validation (typed errors that
name the field), the chain rules (a FUSED run holds a CDP alone) and its cost."""
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel_codegen import (AccelDtypeError, AccelInvalidError, AccelShapeError,
                           AccelUnsupportedError, Conv,
                           Device, Pool, Sdp, estimate_chain)
from accel_codegen import reference as ref
from accel_codegen.sim import CdpInt8, Lrn, profile_enable, profile_records
from conftest import assert_same, ideal_dram

DEVICES = {threads: Device("nv_full", num_threads=threads) for threads in (1, 2, 3)}
DEVICE = DEVICES[2]
#: (size, alpha, beta, k): torch's default, AlexNet's, GoogLeNet's, and unusual values.
PARAMETERS = [(5, 1e-4, 0.75, 1.0), (5, 1e-4, 0.75, 2.0), (5, 2e-4, 0.75, 1.0),
              (3, 0.5, 0.25, 0.5), (7, 3.0, 1.5, 1e-3), (9, 0.0, 0.75, 3.0),
              (3, 1e-2, -0.5, 1.0)]


def _torch_lrn(x, size, alpha, beta, k):
    torch = pytest.importorskip("torch")
    return torch.nn.functional.local_response_norm(torch.from_numpy(x), size, alpha, beta,
                                                   k).numpy()


@pytest.mark.parametrize("size,alpha,beta,k", PARAMETERS)
@pytest.mark.parametrize("channels", [1, 2, 6, 13])
def test_fp32_equals_the_reference_and_torch(size, alpha, beta, k, channels, rng):
    x = (rng.standard_normal((2, channels, 5, 7)) * 4).astype(np.float32)
    op = Lrn(size, alpha, beta, k)
    expected = ref.run_op(op, x)
    for threads, device in DEVICES.items():
        y, stats = device.run([op], x)
        assert_same(y, expected, f"lrn {size} {alpha} {beta} {k}, {threads} threads")
    assert stats.ops[0].engine == "CDP" and stats.ops[0].op == "cdp:lrn"
    np.testing.assert_allclose(y, _torch_lrn(x, size, alpha, beta, k), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("size", range(1, 11))
def test_the_reference_is_torch_for_every_size(size, rng):
    """Even sizes too (the hardware refuses them): the window is [c - size//2, c + (size-1)//2]
    and the divisor stays size, as torch's zero-padded average pooling gives."""
    x = (rng.standard_normal((2, 7, 3, 4)) * 3).astype(np.float32)
    np.testing.assert_allclose(ref.lrn(x, size, 0.3, 0.75, 1.5),
                               _torch_lrn(x, size, 0.3, 0.75, 1.5), rtol=2e-6, atol=1e-7)


def test_the_comparison_can_fail(rng):
    """A window shifted by one channel (the even-size mistake) is caught."""
    x = (rng.standard_normal((1, 6, 3, 3)) * 3).astype(np.float32)
    flipped = ref.lrn(x[:, ::-1].copy(), 4, 0.3, 0.75, 1.0)[:, ::-1]
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(flipped, _torch_lrn(x, 4, 0.3, 0.75, 1.0), rtol=1e-5)


@pytest.mark.parametrize("size,alpha,beta,k", PARAMETERS)
def test_fp16_equals_the_reference(size, alpha, beta, k, rng):
    """FP16: the fp32 computation on widened halves, rounded once to half."""
    x = (rng.standard_normal((2, 8, 6, 5)) * 4).astype(np.float16)
    x.flat[:3] = [65504, -0.0, 6e-8]
    op = Lrn(size, alpha, beta, k, precision="fp16")
    y, stats = DEVICE.run([op], x)
    assert_same(y, ref.run_op(op, x), "fp16 lrn")
    assert stats.ops[0].precision == "fp16"
    theirs = _torch_lrn(x.astype(np.float32), size, alpha, beta, k)
    halves = np.abs(theirs) <= 65504  # a negative beta can leave the half range: infinity
    np.testing.assert_allclose(y.astype(np.float32)[halves], theirs[halves], rtol=2**-11,
                               atol=2**-24)
    assert np.all(np.isinf(y[~halves]))


@pytest.mark.parametrize("op,error,words", [
    (Lrn(4), AccelUnsupportedError, "local_size = 4: NVDLA's CDP normalises over 3, 5, 7 or 9"),
    (Lrn(11), AccelUnsupportedError, "local_size = 11"),
    (Lrn(1), AccelUnsupportedError, "local_size = 1"),
    (Lrn(0), AccelInvalidError, "local_size = 0"),
    (Lrn(-3), AccelInvalidError, "local_size = -3"),
    (Lrn(alpha=-1.0), AccelInvalidError, "alpha = -1 must be finite and >= 0"),
    (Lrn(alpha=float("inf")), AccelInvalidError, "alpha = inf"),
    (Lrn(beta=float("nan")), AccelInvalidError, "beta = nan must be finite"),
    (Lrn(k=0.0), AccelInvalidError, "k = 0 must be finite and > 0"),
    (Lrn(k=-1.0), AccelInvalidError, "k = -1"),
    (Lrn(size=2.5), AccelDtypeError, "lrn size = 2.5 is not an integer"),
    (Lrn(alpha="big"), AccelDtypeError, "lrn alpha = 'big' is not a real number"),
    (Lrn(beta=True), AccelDtypeError, "lrn beta = True"),
    (Lrn(precision="int9"), AccelInvalidError, "'int9'"),
])
def test_bad_fields_raise_typed_errors_naming_them(op, error, words):
    x = np.ones((1, 4, 2, 2), np.float32)
    with pytest.raises(error) as info:
        DEVICE.run([op], x)
    assert words in str(info.value)


def _random_cdp_int8(rng, exponent):
    """Registers and tables anywhere in their ranges, each table's start inside the square
    sums' span so hits, underflows, overflows and every priority occur."""
    return CdpInt8(
        le=rng.integers(-32768, 32768, 65), lo=rng.integers(-32768, 32768, 257),
        le_start=int(rng.integers(-50, 300)), le_end=int(rng.integers(0, 1 << 17)),
        lo_start=int(rng.integers(-50, 3000)), lo_end=int(rng.integers(0, 1 << 17)),
        le_index_select=int(rng.integers(-2, 20)), lo_index_select=int(rng.integers(-2, 20)),
        le_index_offset=int(rng.integers(-3, 8)), le_exponent=exponent,
        le_uflow_scale=int(rng.integers(-32768, 32768)), le_uflow_shift=int(rng.integers(0, 32)),
        le_oflow_scale=int(rng.integers(-32768, 32768)), le_oflow_shift=int(rng.integers(0, 32)),
        lo_uflow_scale=int(rng.integers(-32768, 32768)), lo_uflow_shift=int(rng.integers(0, 32)),
        lo_oflow_scale=int(rng.integers(-32768, 32768)), lo_oflow_shift=int(rng.integers(0, 32)),
        uflow_priority=int(rng.integers(0, 2)), oflow_priority=int(rng.integers(0, 2)),
        hybrid_priority=int(rng.integers(0, 2)), datin_offset=int(rng.integers(-128, 128)),
        datin_scale=int(rng.integers(-600, 600)), datin_shift=int(rng.integers(0, 8)),
        datout_offset=int(rng.integers(-4096, 4096)),
        datout_scale=int(rng.integers(-2048, 2048)), datout_shift=int(rng.integers(24, 30)),
        sqsum_bypass=int(rng.random() < 0.2), mul_bypass=int(rng.random() < 0.2))


@pytest.mark.parametrize("seed", range(12))
def test_int8_is_nvdlas_cdp_as_the_reference_defines_it(seed):
    """The C engine and reference.cdp_int8 agree bit for bit on any registers and tables
    (NVDLA's traces check both against the RTL: test_nvdla_traces)."""
    rng = np.random.default_rng(seed)
    size = (3, 5, 7, 9)[seed % 4]
    x = rng.integers(-128, 128, (2, 70, 3, 4)).astype(np.int8)  # past one 46-channel block
    while True:  # registers whose output is not one or two saturated codes
        p = _random_cdp_int8(rng, exponent=seed % 2)
        # the output shift that spreads the codes most (random tables span many octaves)
        p.datout_shift = max(range(40), key=lambda s: len(np.unique(ref.cdp_int8(
            x, size, dataclasses.replace(p, datout_shift=s)))))
        if len(np.unique(ref.cdp_int8(x, size, p))) > 3:
            break
    expected = ref.run_op(Lrn(size, precision="int8", int8=p), x)
    for threads, device in DEVICES.items():
        y, stats = device.run([Lrn(size, precision="int8", int8=p)], x)
        assert_same(y, expected, f"int8 lrn seed {seed}, {threads} threads")
    assert len(np.unique(expected)) > 3
    assert stats.ops[0].precision == "int8"


def test_int8_bad_tables_raise_typed_errors():
    x = np.ones((1, 4, 2, 2), np.int8)
    with pytest.raises(AccelInvalidError, match="needs its tables"):
        DEVICE.run([Lrn(precision="int8")], x)
    bad = CdpInt8(le=np.zeros(65, np.int16), lo=np.zeros(257, np.int16), datout_shift=64)
    with pytest.raises(AccelInvalidError, match="int8.datout_shift = 64"):
        DEVICE.run([Lrn(precision="int8", int8=bad)], x)
    with pytest.raises(AccelShapeError, match="cdp lo has 256 entries"):
        DEVICE.run([Lrn(precision="int8", int8=CdpInt8(le=np.zeros(65, np.int16),
                                                           lo=np.zeros(256, np.int16)))], x)


def test_missing_hardware_is_unsupported():
    with pytest.raises(AccelUnsupportedError, match="precision fp16 is not supported by "
                                                    "configuration nv_small"):
        Device("nv_small").run([Lrn(precision="fp16")], np.ones((1, 4, 2, 2), np.float16))
    no_cdp = DEVICE.config.replace(name="no_cdp", features=("lut", "elementwise"))
    with pytest.raises(AccelUnsupportedError, match="configuration no_cdp has no CDP engine"):
        Device(no_cdp).run([Lrn()], np.ones((1, 4, 2, 2), np.float32))


# --- chains ----------------------------------------------------------------------------------

def _alexnet_block(rng, precision="fp32"):
    dtype = np.float16 if precision == "fp16" else np.float32
    x = rng.standard_normal((1, 3, 15, 15)).astype(dtype)
    w = (rng.standard_normal((8, 3, 3, 3)) * 0.5).astype(dtype)
    return x, [Conv(w, padding=1, precision=precision),
               Sdp(shift=rng.standard_normal(8).astype(dtype), act="relu", precision=precision),
               Lrn(5, 1e-2, 0.75, 2.0, precision=precision),
               Pool("max", 3, 2, precision=precision)]


@pytest.mark.parametrize("chain", [[Lrn(), Pool()], [Sdp(act="relu"), Lrn()],
                                   [Lrn(), Lrn(3)]], ids=["lrn_pool", "sdp_lrn", "two"])
def test_a_fused_run_holds_a_cdp_alone(chain):
    x = np.ones((1, 4, 4, 4), np.float32)
    with pytest.raises(AccelInvalidError, match="a FUSED run holds it alone"):
        DEVICE.run(chain, x, mode="fused")
    y, _ = DEVICE.run(chain, x, mode="independent")
    assert_same(y, ref.run_chain(chain, x), "independent")


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_conv_relu_lrn_pool_as_alexnet_runs_it(precision, rng):
    """AlexNet's conv -> ReLU -> LRN -> max pool: one independent chain, or a fused conv + ReLU,
    the LRN alone, a fused pool: the same values; the LRN's traffic is the same either way."""
    x, chain = _alexnet_block(rng, precision)
    independent, stats = DEVICE.run(chain, x, mode="independent")
    conv_relu, _ = DEVICE.run(chain[:2], x, mode="fused")
    normalised, lrn_stats = DEVICE.run(chain[2:3], conv_relu, mode="fused")
    pooled, _ = DEVICE.run(chain[3:], normalised, mode="fused")
    assert_same(independent, pooled, f"{precision} split")
    expected = ref.run_chain(chain, x)
    if precision == "fp32":  # the CONV's fp32 summation order differs from the reference's
        np.testing.assert_allclose(independent, expected, rtol=1e-5, atol=1e-6)
    else:
        ulps = np.abs(independent.view(np.int16).astype(np.int32) -
                      expected.view(np.int16).astype(np.int32))
        assert ulps.max() <= 1
    cdp = stats.ops[2]
    assert (cdp.engine, cdp.input_bytes, cdp.bytes_written) == (
        "CDP", lrn_stats.ops[0].input_bytes, lrn_stats.ops[0].bytes_written)


# --- cost -------------------------------------------------------------------------------------

@pytest.mark.parametrize("config", ["nv_small", "nv_large", "nv_full"])
def test_cost_counts_elements_and_atom_padded_traffic(config):
    shape = (2, 5, 6, 7)
    cfg = ideal_dram(config)  # the bytes at the bandwidth, nothing else
    stats = estimate_chain(cfg, [Lrn()], shape)
    op = stats.ops[0]
    # fp32 is charged as 2-byte data; each (n, h, w) position pads its channels to atoms, and
    # the engine works on the whole atoms: their elements, padding channels included
    position = -(-5 * 2 // cfg.memory_atom_bytes) * cfg.memory_atom_bytes
    elements = 2 * 6 * 7 * position // 2
    assert op.compute_cycles == -(-elements // cfg.cdp_throughput)
    assert op.input_bytes == op.bytes_read == op.bytes_written == 2 * 6 * 7 * position
    assert op.macs == op.mac_cycles == op.weight_bytes == op.operand_bytes == 0
    assert op.memory_cycles == int(np.ceil(2 * op.input_bytes * cfg.clock_hz /
                                           cfg.dram_bytes_per_s))
    # the CDP's fixed pipeline cycles per layer, then the long pole (no latency here)
    assert stats.cycles == op.cycles == cfg.cdp_pipeline_cycles + max(op.compute_cycles,
                                                                      op.memory_cycles)


def test_the_estimate_equals_a_profiled_run(rng):
    x, chain = _alexnet_block(rng)
    profile_enable(True)
    try:
        _, stats = DEVICE.run(chain, x, mode="independent", label="alexnet block")
        _, alone = DEVICE.run([Lrn(3)], x, mode="fused", label="lrn alone")
        records = profile_records()
    finally:
        profile_enable(False)
    assert [r.label for r in records] == ["alexnet block", "lrn alone"]
    assert records[0].ops == stats.ops and records[1].ops == alone.ops
    estimate = estimate_chain("nv_full", chain, x.shape, mode="independent")
    assert estimate.ops == stats.ops and estimate.cycles == stats.cycles
    assert estimate_chain("nv_full", [Lrn(3)], x.shape).ops == alone.ops


# --- properties ------------------------------------------------------------------------------

@given(st.integers(1, 2), st.integers(1, 12), st.integers(1, 6), st.integers(1, 6),
       st.sampled_from([3, 5, 7, 9]), st.floats(0, 10), st.floats(-2, 2), st.floats(1e-3, 10),
       st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None, derandomize=True, database=None)
def test_random_lrns_equal_the_reference(n, c, h, w, size, alpha, beta, k, seed):
    x = (np.random.default_rng(seed).standard_normal((n, c, h, w)) * 5).astype(np.float32)
    op = Lrn(size, alpha, beta, k)
    assert_same(DEVICE.run([op], x)[0], ref.run_op(op, x), "random lrn")
