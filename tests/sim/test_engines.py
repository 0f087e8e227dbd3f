"""Every engine op against the NumPy reference, over randomized parameters (fixed seed)."""
import numpy as np
import pytest

from accel_codegen import Conv, Device, Pool, Sdp
from accel_codegen import reference as ref
from conftest import assert_close

DEVICE = Device("nv_full")


def _conv_cases(count=48, seed=7):
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(count):
        groups = int(rng.choice([1, 1, 2, 0]))  # 0: depthwise
        c_group = int(rng.integers(1, 9))
        c = c_group * (groups or 1) if groups else int(rng.integers(1, 17))
        groups = groups or c
        k = groups * int(rng.integers(1, 5)) if groups > 1 else int(rng.integers(1, 40))
        kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
        dh, dw = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        pads = tuple(int(v) for v in rng.integers(0, 4, size=4))
        h = int(rng.integers(max(1, dh * (kh - 1) + 1 - pads[0] - pads[2]), 20))
        w = int(rng.integers(max(1, dw * (kw - 1) + 1 - pads[1] - pads[3]), 20))
        cases.append(dict(n=int(rng.integers(1, 3)), c=c, h=h, w=w, k=k, kernel=(kh, kw),
                          stride=tuple(int(v) for v in rng.integers(1, 4, size=2)),
                          padding=pads, dilation=(dh, dw), groups=groups))
    return cases


def _case_id(case):
    return "-".join(f"{key}{'x'.join(map(str, v)) if isinstance(v, tuple) else v}"
                    for key, v in case.items())


@pytest.mark.parametrize("case", _conv_cases(), ids=_case_id)
def test_conv_matches_reference(case, rng):
    x = rng.standard_normal((case["n"], case["c"], case["h"], case["w"]), dtype=np.float32)
    w = rng.standard_normal((case["k"], case["c"] // case["groups"], *case["kernel"]),
                            dtype=np.float32)
    op = Conv(w, stride=case["stride"], padding=case["padding"], dilation=case["dilation"],
              groups=case["groups"])
    y, stats = DEVICE.run([op], x)
    assert_close(y, ref.run_op(op, x), rtol=1e-5)
    k_group, c_group = case["k"] // case["groups"], case["c"] // case["groups"]
    assert stats.macs == y.size * c_group * case["kernel"][0] * case["kernel"][1]
    assert k_group * case["groups"] == y.shape[1]


@pytest.mark.parametrize("shape,kernel,stride,pad", [
    ((1, 64, 56, 56), 3, 1, 1), ((1, 3, 32, 32), 7, 2, 3), ((1, 256, 14, 14), 1, 1, 0),
    ((2, 512, 7, 7), 3, 1, 1), ((1, 64, 28, 28), 1, 2, 0), ((3, 100, 1, 1), 1, 1, 0),
], ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_conv_real_layers_with_epilogue(shape, kernel, stride, pad, rng):
    """Layer shapes of the zoo, through the fast paths, with the fused scale/shift + ReLU."""
    x = rng.standard_normal(shape, dtype=np.float32)
    k = 48
    w = rng.standard_normal((k, shape[1], kernel, kernel), dtype=np.float32) / np.sqrt(
        shape[1] * kernel * kernel)
    sdp = Sdp(scale=rng.uniform(0.5, 2, k), shift=rng.standard_normal(k), act="relu")
    chain = [Conv(w, stride=stride, padding=pad), sdp]
    y, _ = DEVICE.run(chain, x)
    expected = ref.sdp(ref.conv2d(x, w, stride, pad).astype(np.float32), sdp.scale, sdp.shift,
                       act="relu")
    assert_close(y, expected, rtol=1e-5)


EPILOGUES = {
    "bias": dict(shift=True),
    "bn": dict(scale=True, shift=True),
    "scale_only": dict(scale=True),
    "bn_relu": dict(scale=True, shift=True, act="relu"),
    "bn_relu6": dict(scale=True, shift=True, act="clip"),
    "bn_prelu": dict(scale=True, shift=True, act="prelu"),
    "bn_add_relu": dict(scale=True, shift=True, ew_op="add", act="relu"),
    "mul": dict(ew_op="mul"),
    "max": dict(ew_op="max"),
    "min_sigmoid": dict(ew_op="min", act="sigmoid"),
    "tanh": dict(shift=True, act="tanh"),
}


def _sdp(spec, shape, rng):
    c = shape[1]
    return Sdp(
        scale=rng.uniform(-2, 2, c).astype(np.float32) if spec.get("scale") else None,
        shift=rng.standard_normal(c).astype(np.float32) if spec.get("shift") else None,
        ew_op=spec.get("ew_op"),
        operand=rng.standard_normal(shape).astype(np.float32) if spec.get("ew_op") else None,
        act=spec.get("act"), clip=(0.0, 6.0) if spec.get("act") == "clip" else (-1.0, 1.0),
        prelu_slope=rng.uniform(0, 0.5, c).astype(np.float32) if spec.get("act") == "prelu"
        else None)


@pytest.mark.parametrize("name", EPILOGUES)
def test_sdp_matches_reference_bit_for_bit(name, rng):
    shape = (2, 5, 7, 9)
    x = rng.standard_normal(shape, dtype=np.float32) * 4
    op = _sdp(EPILOGUES[name], shape, rng)
    y, stats = DEVICE.run([op], x)
    expected = ref.run_op(op, x)
    if op.act in ("sigmoid", "tanh"):  # libm and NumPy may differ in the last bit
        np.testing.assert_allclose(y, expected, rtol=2e-6, atol=1e-7)
    else:
        np.testing.assert_array_equal(y, expected)
    assert stats.ops[0].engine == "SDP"


@pytest.mark.parametrize("name", EPILOGUES)
def test_fused_and_independent_agree_exactly(name, rng):
    """Conv -> SDP -> pool, fused vs independent: the same bits, different memory traffic."""
    x = rng.standard_normal((1, 6, 12, 12), dtype=np.float32)
    w = rng.standard_normal((10, 6, 3, 3), dtype=np.float32)
    conv = Conv(w, padding=1)
    sdp = _sdp(EPILOGUES[name], (1, 10, 12, 12), rng)
    chain = [conv, sdp, Pool("max", 2, 2)]
    fused, fused_stats = DEVICE.run(chain, x, mode="fused")
    independent, independent_stats = DEVICE.run(chain, x, mode="independent")
    np.testing.assert_array_equal(fused, independent)
    assert fused_stats.bytes_read < independent_stats.bytes_read
    assert fused_stats.bytes_written < independent_stats.bytes_written
    assert_close(fused, ref.run_chain(chain, x), rtol=1e-5)


POOLS = [
    ("max", 2, 2, 0, False), ("max", 3, 2, 1, False), ("avg", 3, 1, 1, True),
    ("avg", 3, 2, 1, False), ("avg", 7, 1, 0, False), ("max", 8, 8, 0, False),
    ("max", (1, 3), (1, 2), (0, 1, 0, 1), False), ("avg", (2, 4), 3, (1, 0, 0, 2), False),
]


@pytest.mark.parametrize("kind,kernel,stride,padding,include_pad", POOLS, ids=str)
def test_pool_matches_reference(kind, kernel, stride, padding, include_pad, rng):
    x = rng.standard_normal((2, 3, 15, 16), dtype=np.float32)
    op = Pool(kind, kernel, stride, padding, include_pad)
    y, stats = DEVICE.run([op], x)
    expected = ref.run_op(op, x)
    if kind == "max":
        np.testing.assert_array_equal(y, expected)
    else:
        assert_close(y, expected, rtol=1e-6)
    assert stats.ops[0].op == f"pdp:{kind}"


def test_global_average_pool_7x7(rng):
    x = rng.standard_normal((1, 512, 7, 7), dtype=np.float32)
    y, _ = DEVICE.run([Pool("avg", 7, 1)], x)
    assert_close(y, x.mean(axis=(2, 3), keepdims=True), rtol=1e-6)


def test_fully_connected_as_1x1_conv(rng):
    """[N, C] input, dense weights [K, C] as a 1x1 convolution: the output stays [N, K]."""
    x = rng.standard_normal((3, 200), dtype=np.float32)
    w = rng.standard_normal((10, 200), dtype=np.float32)
    b = rng.standard_normal(10).astype(np.float32)
    y, stats = DEVICE.run([Conv(w.reshape(10, 200, 1, 1)), Sdp(shift=b)], x)
    assert_close(y, (x.astype(np.float64) @ w.T.astype(np.float64) + b), rtol=1e-5)
    assert stats.macs == 3 * 200 * 10


def test_independent_chain_of_many_ops(rng):
    """Independent mode takes any order: conv, bias, BN, ReLU, pool, each its own op."""
    x = rng.standard_normal((1, 4, 9, 9), dtype=np.float32)
    w = rng.standard_normal((8, 4, 3, 3), dtype=np.float32)
    chain = [Conv(w, padding=1), Sdp(shift=rng.standard_normal(8)),
             Sdp(scale=rng.uniform(0.5, 1.5, 8), shift=rng.standard_normal(8)), Sdp(act="relu"),
             Pool("max", 3, 2, 1), Sdp(act="tanh")]
    y, stats = DEVICE.run(chain, x, mode="independent")
    assert_close(y, ref.run_chain(chain, x), rtol=1e-5)
    assert [op.engine for op in stats.ops] == ["CONV", "SDP", "SDP", "SDP", "PDP", "SDP"]


def test_input_used_in_place_and_out_parameter(rng):
    x = rng.standard_normal((1, 3, 4, 4), dtype=np.float32)
    out = np.empty_like(x)
    y, _ = DEVICE.run([Sdp(act="relu")], x, out=out)
    assert y is out
    np.testing.assert_array_equal(out, np.maximum(x, 0))
    y, _ = DEVICE.run([Sdp(act="relu")], x, out=x)  # an SDP chain may run in place
    assert y is x and (x >= 0).all()


def test_non_contiguous_and_float64_inputs_are_converted(rng):
    x = rng.standard_normal((1, 3, 8, 8))[:, :, ::2, ::2]  # float64, strided
    y, _ = DEVICE.run([Pool("max", 2, 2)], x)
    np.testing.assert_array_equal(y, ref.pool2d(x.astype(np.float32), "max", 2, 2))


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
    expected = [DEVICE.run(chain, xi, mode="independent")[0] for xi in x]
    errors = []

    def work(i):
        for _ in range(20):
            y, _ = DEVICE.run(chain, x[i], mode="independent")
            if not np.array_equal(y, expected[i]):
                errors.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_nan_and_infinity_follow_the_reference():
    """NaN survives ReLU, clip and max as in NumPy and PyTorch; an all -inf window pools to
    -inf."""
    x = np.array([np.nan, -1.0, 2.0, np.inf, -np.inf, 0.5], np.float32).reshape(1, 1, 2, 3)
    for op in (Sdp(act="relu"), Sdp(act="clip", clip=(0.0, 6.0)),
               Sdp(ew_op="max", operand=np.zeros_like(x)),
               Sdp(ew_op="min", operand=np.zeros_like(x))):
        np.testing.assert_array_equal(DEVICE.run([op], x)[0], ref.run_op(op, x))
    pool = Pool("max", (1, 2), (1, 1))
    windows = np.array([[np.nan, 1.0, -np.inf, -np.inf]], np.float32).reshape(1, 1, 1, 4)
    np.testing.assert_array_equal(DEVICE.run([pool], windows)[0], ref.run_op(pool, windows))
