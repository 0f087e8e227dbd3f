"""Device.run beyond one engine: chains of many ops in independent mode, fused against
independent, runs in place and into `out`, the input's dtype and layout, threads and concurrent
callers."""
import numpy as np

from accel_codegen import Bdma, Conv, Device, Lrn, Pool, Sdp
from accel_codegen import reference as ref
from conftest import assert_close, assert_same

DEFAULT_DEVICE = Device("nv_full")  # as many threads as CPUs
DEVICES = {threads: Device("nv_full", num_threads=threads) for threads in (1, 2, 3)}
DEVICE = DEVICES[2]


# --- chains of many ops, fused and independent -------------------------------------------------

def test_independent_chain_of_many_ops(rng):
    """Independent mode takes any order: conv, bias, BN, ReLU, pool, each its own op."""
    x = rng.standard_normal((1, 4, 9, 9), dtype=np.float32)
    w = rng.standard_normal((8, 4, 3, 3), dtype=np.float32)
    chain = [Conv(w, padding=1), Sdp(shift=rng.standard_normal(8)),
             Sdp(scale=rng.uniform(0.5, 1.5, 8), shift=rng.standard_normal(8)), Sdp(act="relu"),
             Pool("max", 3, 2, 1), Sdp(act="tanh")]
    y, stats = DEFAULT_DEVICE.run(chain, x, mode="independent")
    assert_close(y, ref.run_chain(chain, x), rtol=1e-5)
    assert [op.engine for op in stats.ops] == ["CONV", "SDP", "SDP", "SDP", "PDP", "SDP"]


def test_int8_independent_chain_of_many_ops():
    """Independent mode: the CONV -> SDP pair on the fly, then SDPs and a pool through memory,
    each reading the previous op's codes with its zero point."""
    rng = np.random.default_rng(11)
    x = rng.integers(-128, 128, (1, 5, 11, 11)).astype(np.int8)
    w = rng.integers(-128, 128, (8, 5, 3, 3)).astype(np.int8)
    chain = [Conv(w, padding=1, precision="int8", in_zero=-7),
             Sdp(bias=rng.integers(-5000, 5000, 8).astype(np.int32),
                 mul=rng.integers(100, 900, 8).astype(np.int16),
                 rshift=np.full(8, 18, np.uint8), out_zero=4, precision="int8"),
             Sdp(in_zero=4, act="relu", out_mul=3, out_shift=1, out_zero=-128, precision="int8"),
             Pool("max", 3, 2, 1, precision="int8", zero=-128),
             Sdp(in_zero=-128, act="clip", clip_lo=-100, clip_hi=90, out_zero=-128,
                 precision="int8"),
             Pool("avg", 2, 1, precision="int8", zero=-128)]
    y, stats = DEVICE.run(chain, x, mode="independent")
    assert_same(y, ref.run_chain(chain, x), "independent chain")
    assert [op.engine for op in stats.ops] == ["CONV", "SDP", "SDP", "PDP", "SDP", "PDP"]
    assert len(np.unique(y)) > 10


def test_fp16_conv_sdp_pool_fused_equals_independent():
    """The CONV + SDP pair rounds once (at the SDP), the pool pools the rounded halves."""
    rng = np.random.default_rng(21)
    x = rng.standard_normal((2, 6, 12, 12)).astype(np.float16)
    w = (rng.standard_normal((10, 6, 3, 3)) / 5).astype(np.float16)
    for pool in (Pool("max", 2, 2, precision="fp16"), Pool("avg", 3, 2, 1, precision="fp16")):
        chain = [Conv(w, padding=1, precision="fp16"),
                 Sdp(shift=rng.standard_normal(10).astype(np.float16), act="relu",
                     precision="fp16"), pool]
        fused, fused_stats = DEVICE.run(chain, x)
        independent, independent_stats = DEVICE.run(chain, x, mode="independent")
        assert_same(fused, independent, f"fused vs independent, {pool.kind}")
        assert fused_stats.bytes_written < independent_stats.bytes_written
        # the pool on the simulator's own rounded SDP output gives the fused result exactly
        sdp_out, _ = DEVICE.run(chain[:2], x)
        assert_same(fused, ref.run_op(pool, sdp_out), f"pool of the rounded halves, {pool.kind}")


# --- memory, dtypes and layouts ----------------------------------------------------------------

def test_input_used_in_place_and_out_parameter(rng):
    x = rng.standard_normal((1, 3, 4, 4), dtype=np.float32)
    out = np.empty_like(x)
    y, _ = DEFAULT_DEVICE.run([Sdp(act="relu")], x, out=out)
    assert y is out
    np.testing.assert_array_equal(out, np.maximum(x, 0))
    y, _ = DEFAULT_DEVICE.run([Sdp(act="relu")], x, out=x)  # an SDP chain may run in place
    assert y is x and (x >= 0).all()


def test_non_contiguous_and_float64_inputs_are_converted(rng):
    x = rng.standard_normal((1, 3, 8, 8))[:, :, ::2, ::2]  # float64, strided
    y, _ = DEFAULT_DEVICE.run([Pool("max", 2, 2)], x)
    np.testing.assert_array_equal(y, ref.pool2d(x.astype(np.float32), "max", 2, 2))


def test_run_precision_follows_the_input_dtype():
    rng = np.random.default_rng(5)
    x8 = rng.integers(-128, 128, (1, 4, 6, 6)).astype(np.int8)
    y, stats = DEVICE.run([Pool("max", 2, 2, precision="int8")], x8)
    assert y.dtype == np.int8 and stats.ops[0].precision == "int8"
    x16 = rng.standard_normal((1, 4, 6, 6)).astype(np.float16)
    y, stats = DEVICE.run([Pool("max", 2, 2, precision="fp16")], x16)
    assert y.dtype == np.float16 and stats.ops[0].precision == "fp16"
    # an exactly representable fp32 / int64 array converts when the precision is given
    y2, _ = DEVICE.run([Pool("max", 2, 2, precision="fp16")], x16.astype(np.float32),
                       precision="fp16")
    assert_same(y2, y, "fp32 input holding halves")
    y3, _ = DEVICE.run([Pool("max", 2, 2, precision="int8")], x8.astype(np.int64),
                       precision="int8")
    assert_same(y3, ref.run_op(Pool("max", 2, 2, precision="int8"), x8), "int64 codes")


# --- threads -----------------------------------------------------------------------------------

def test_threads_give_the_same_bits(rng):
    x = rng.standard_normal((1, 32, 30, 30), dtype=np.float32)
    w = rng.standard_normal((40, 32, 3, 3), dtype=np.float32)
    chain = [Conv(w, padding=1), Sdp(shift=np.ones(40), act="relu")]
    one, two = Device("nv_full", num_threads=1), Device("nv_full", num_threads=2)
    np.testing.assert_array_equal(one.run(chain, x)[0], two.run(chain, x)[0])


def test_concurrent_runs_on_one_device_are_serialised(rng):
    """Two Python threads sharing a device: runs queue on the device's lock, the scratch
    memory is never shared by two runs, and each thread gets its own right answer."""
    import threading

    x = [rng.standard_normal((1, 16, 24, 24), dtype=np.float32) for _ in range(2)]
    w = rng.standard_normal((32, 16, 3, 3), dtype=np.float32)
    chain = [Conv(w, padding=1), Sdp(act="relu"), Pool("max", 2, 2)]
    expected = [DEFAULT_DEVICE.run(chain, xi, mode="independent")[0] for xi in x]
    errors = []

    def work(i):
        for _ in range(20):
            y, _ = DEFAULT_DEVICE.run(chain, x[i], mode="independent")
            if not np.array_equal(y, expected[i]):
                errors.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def _int8_chains(rng):
    """INT8 chains over every kernel loop that runs on the pool (csrc/pool.c): implicit GEMM,
    depthwise, a fully connected layer (matrix-vector), an independent SDP, pooling."""
    def sdp(k, **extra):
        return Sdp(bias=rng.integers(-2000, 2000, k).astype(np.int32),
                   mul=rng.integers(16384, 32768, k).astype(np.int16),
                   rshift=rng.integers(14, 20, k).astype(np.uint8), out_zero=-3, precision="int8",
                   **extra)
    x = rng.integers(-128, 128, (2, 24, 20, 20)).astype(np.int8)
    conv = Conv(rng.integers(-128, 128, (40, 24, 3, 3)).astype(np.int8), padding=1, in_zero=5,
                precision="int8")
    dw = Conv(rng.integers(-128, 128, (24, 1, 3, 3)).astype(np.int8), stride=2, padding=1,
              groups=24, in_zero=-7, precision="int8")
    fc = Conv(rng.integers(-128, 128, (30, 96, 1, 1)).astype(np.int8), in_zero=1,
              precision="int8")
    return [(x, [conv, sdp(40, act="relu"), Pool("max", 2, 2, precision="int8")], "independent"),
            (x, [dw, sdp(24, act="clip", clip_lo=-20, clip_hi=90)], "fused"),
            (rng.integers(-128, 128, (1, 96, 1, 1)).astype(np.int8), [fc, sdp(30)], "fused"),
            (x, [Pool("avg", 3, 1, 1, True, precision="int8", zero=4)], "fused")]


def test_concurrent_int8_runs_on_several_devices_match_the_reference(rng):
    """Three Python threads, each with its own 2-thread device: one parallel loop at a time
    gets the pool's workers, the others run on their callers; every result is bit-exact."""
    chains = _int8_chains(rng)
    _agree_on_python_threads(
        [(f"chain {c}", lambda device, x=x, chain=chain, mode=mode:
          device.run(chain, x, mode=mode)[0], ref.run_chain(chain, x))
         for c, (x, chain, mode) in enumerate(chains)], rounds=10)


def _agree_on_python_threads(cases, rounds: int) -> None:
    """Three Python threads, each with its own 2-thread device, run every case ``rounds``
    times: (label, run(device) -> array, the array it must equal bit for bit)."""
    import threading

    errors = []

    def work(i):
        try:
            device = Device("nv_full", num_threads=2)
            for _ in range(rounds):
                for label, run, want in cases:
                    if not np.array_equal(run(device), want):
                        errors.append(f"thread {i}, {label}: differs from the reference")
        except Exception as error:  # a thread's exception would otherwise be lost
            errors.append(f"thread {i}: {error!r}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def _fp32_engine_runs(rng):
    """fp32 runs of the engines besides CONV, each large enough to run on the pool's workers:
    SDP (independent: every converter step and an element-wise op), pooling, LRN, BDMA."""
    x = rng.standard_normal((2, 24, 40, 40), dtype=np.float32)
    sdp = Sdp(scale=rng.uniform(-2, 2, 24).astype(np.float32),
              shift=rng.standard_normal(24).astype(np.float32), ew_op="add",
              operand=rng.standard_normal(x.shape).astype(np.float32), act="relu")
    big = rng.standard_normal((2, 96, 64, 64), dtype=np.float32)
    copy = Bdma(48, src_offset=1, src_stride=2, dst_offset=5, dst_stride=3, dst_channels=150)
    return [(x, [sdp]), (x, [Pool("max", 3, 2, 1)]), (x, [Pool("avg", 2, 2)]),
            (x, [Lrn(5, 1e-4, 0.75, 2.0)]), (big, [copy])]


def test_fp32_engines_on_several_threads_and_devices_match_the_reference(rng):
    """The SDP, PDP, CDP and BDMA loops on the pool (csrc/pool.c): 1, 2 and 3 threads, then
    three Python threads with a 2-thread device each (one loop gets the workers, the others run
    on their callers); every result is bit-exact (the average pool: to the 1-thread run's)."""
    runs = _fp32_engine_runs(rng)
    expected = [ref.run_chain(chain, x) for x, chain in runs]
    # the fp32 average divides where the reference's mean may round differently: its bits are
    # the 1-thread run's, within a rounding of the reference
    one = DEVICES[1].run(runs[2][1], runs[2][0])[0]
    assert_close(one, expected[2], rtol=1e-6)
    expected[2] = one
    for threads, device in DEVICES.items():
        for (x, chain), want in zip(runs, expected):
            assert_same(device.run(chain, x)[0], want, f"{chain[0]!r}, {threads} threads")
    _agree_on_python_threads(
        [(f"run {c}", lambda device, x=x, chain=chain: device.run(chain, x)[0], want)
         for c, ((x, chain), want) in enumerate(zip(runs, expected))], rounds=5)
