"""The rewrites that make attention-style CNN blocks whole (issue 29), on Relax written by
hand: softmax(max(s) - s) as softmax(-s) (rewrites.softmax_row_shifts: DANet's channel
attention), a matmul of a computed map by a computed column as the dense layer of the
column's row with the map as computed weights (rewrites.column_products: GCNet's context),
SAGAN's ``V^T P^T`` read as one nn.attention whose value head size is not the key's
(attention.attention_cores), and a map times a computed factor per column (coordinate
attention's width weights) as the per-row product of its transpose (rewrites.per_row_products). Each gives the values of the graph it replaces (TVM's host
build of both), and what it must not read stays as it was."""
import numpy as np
import pytest
import tvm
from tvm import relax

from accel_codegen.compiler.attention import attention_cores
from accel_codegen.compiler.rewrites import (column_products, per_row_products,
                                             softmax_row_shifts)


def _function(params, body) -> tvm.IRModule:
    """main(params) = body(*vars): one dataflow block of the calls ``body`` makes."""
    bb = relax.BlockBuilder()
    args = [relax.Var(name, relax.TensorType(shape, "float32")) for name, shape in params]
    with bb.function("main", args):
        with bb.dataflow():
            out = bb.emit_output(body(bb, *args))
        bb.emit_func_output(out)
    return bb.get()


def _ops(mod: tvm.IRModule) -> list:
    ops = []
    relax.analysis.post_order_visit(mod["main"], lambda e: ops.append(e.op.name) if isinstance(
        e, relax.Call) and isinstance(e.op, tvm.ir.Op) else None)
    return ops


def _host(mod: tvm.IRModule, *inputs) -> np.ndarray:
    exe = tvm.compile(relax.transform.LegalizeOps()(mod), target="llvm")
    vm = relax.VirtualMachine(exe, tvm.cpu())
    return vm["main"](*(tvm.runtime.tensor(x) for x in inputs)).numpy()


def _inputs(rng, *shapes):
    return [rng.standard_normal(shape).astype(np.float32) for shape in shapes]


def _shifted(reduction, scores_first):
    def body(bb, s):
        row = bb.emit(getattr(relax.op, reduction)(s, axis=[-1], keepdims=True))
        row = bb.emit(relax.op.broadcast_to(row, [1, 6, 6]))
        shifted = bb.emit(relax.op.subtract(s, row) if scores_first else
                          relax.op.subtract(row, s))
        return relax.op.nn.softmax(shifted, axis=-1)
    return _function([("s", (1, 6, 6))], body)


@pytest.mark.parametrize("reduction", ["max", "min"])
@pytest.mark.parametrize("scores_first", [False, True], ids=["c_minus_s", "s_minus_c"])
def test_a_softmax_of_rows_shifted_by_their_extreme_drops_the_shift(reduction, scores_first, rng):
    mod = _shifted(reduction, scores_first)
    rewritten = softmax_row_shifts(mod)
    ops = _ops(rewritten)
    assert "relax.subtract" not in ops and f"relax.{reduction}" not in ops, ops
    assert ops.count("relax.multiply") == (0 if scores_first else 1), ops
    (s,) = _inputs(rng, (1, 6, 6))
    np.testing.assert_allclose(_host(rewritten, s), _host(mod, s), rtol=1e-6, atol=1e-7)


def test_a_shift_that_is_not_the_rows_own_extreme_stays():
    """A max over another axis, or of another tensor, is no shift of each row by a constant."""
    def other_axis(bb, s):
        row = bb.emit(relax.op.broadcast_to(bb.emit(relax.op.max(s, axis=[-2], keepdims=True)),
                                            [1, 6, 6]))
        return relax.op.nn.softmax(bb.emit(relax.op.subtract(row, s)), axis=-1)

    def other_tensor(bb, s, t):
        row = bb.emit(relax.op.broadcast_to(bb.emit(relax.op.max(t, axis=[-1], keepdims=True)),
                                            [1, 6, 6]))
        return relax.op.nn.softmax(bb.emit(relax.op.subtract(row, s)), axis=-1)

    for mod in (_function([("s", (1, 6, 6))], other_axis),
                _function([("s", (1, 6, 6)), ("t", (1, 6, 6))], other_tensor)):
        assert softmax_row_shifts(mod) is mod


@pytest.mark.parametrize("images", [1, 2])
def test_a_map_times_a_computed_column_is_a_dense_layer_of_computed_weights(images, rng):
    """GCNet's matmul([B, 1, C, HW], [B, 1, HW, 1]): per image the column's row [1, HW] times
    the map's [C, HW] rows transposed (the dense form whose weights the CONV reads as
    another run wrote them), the images' rows side by side."""
    def body(bb, x, m):
        a = bb.emit(relax.op.multiply(x, relax.const(2.0, "float32")))  # computed operands
        b = bb.emit(relax.op.nn.softmax(m, axis=2))
        return relax.op.matmul(a, b)

    mod = _function([("x", (images, 1, 8, 12)), ("m", (images, 1, 12, 1))], body)
    rewritten = column_products(mod)
    ops = _ops(rewritten)
    assert ops.count("relax.matmul") == images and ops.count("relax.permute_dims") == images
    assert ops.count("relax.concat") == (images > 1), ops
    x, m = _inputs(rng, (images, 1, 8, 12), (images, 1, 12, 1))
    np.testing.assert_allclose(_host(rewritten, x, m), _host(mod, x, m), rtol=1e-6, atol=1e-6)


def test_a_matmul_by_a_constant_column_or_of_wider_columns_stays():
    column = relax.const(np.ones((1, 12, 1), np.float32))
    constant = _function([("x", (1, 8, 12))], lambda bb, x: relax.op.matmul(
        bb.emit(relax.op.nn.relu(x)), column))
    wider = _function([("x", (1, 8, 12)), ("m", (1, 12, 2))], lambda bb, x, m: relax.op.matmul(
        bb.emit(relax.op.nn.relu(x)), bb.emit(relax.op.nn.relu(m))))
    for mod in (constant, wider):
        assert "relax.permute_dims" not in _ops(column_products(mod))


def _sagan(bb, q, k, v):
    """bmm(v, softmax(q^T k)^T) of channel-major q, k [1, d, T], v [1, dv, T]."""
    scores = bb.emit(relax.op.matmul(bb.emit(relax.op.permute_dims(q, [0, 2, 1])), k))
    attention = bb.emit(relax.op.nn.softmax(scores, axis=-1))
    return relax.op.matmul(v, bb.emit(relax.op.permute_dims(attention, [0, 2, 1])))


def test_sagans_transposed_values_are_one_attention_of_another_value_size(rng):
    d, dv, t = 4, 32, 20
    mod = _function([("q", (1, d, t)), ("k", (1, d, t)), ("v", (1, dv, t))], _sagan)
    rewritten = attention_cores(mod)
    rewritten = relax.transform.DeadCodeElimination()(rewritten)
    calls = []
    relax.analysis.post_order_visit(rewritten["main"], lambda e: calls.append(e) if isinstance(
        e, relax.Call) and getattr(e.op, "name", "") == "relax.nn.attention" else None)
    assert len(calls) == 1
    q, k, v = (tuple(int(n) for n in a.ty.shape.values) for a in calls[0].args[:3])
    assert (q, k, v) == ((1, t, 1, d), (1, t, 1, d), (1, t, 1, dv))
    assert float(calls[0].attrs.scale) == 1.0  # no scale: SAGAN's scores as they are
    assert "relax.matmul" not in _ops(rewritten)
    inputs = _inputs(rng, (1, d, t), (1, d, t), (1, dv, t))
    np.testing.assert_allclose(_host(rewritten, *inputs), _host(mod, *inputs), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("factor_first", [False, True])
@pytest.mark.parametrize("shape", [(1, 4, 5, 6), (2, 3, 4, 7), (3, 5, 2)])
def test_a_factor_per_column_is_the_row_product_of_the_transpose(shape, factor_first, rng):
    """x [..., H, W] times sigmoid(m) [..., 1, W]: x's transpose times the factors as one per
    row ([1, R, 1, H] by [1, R, 1, 1]: the SDP's per-channel multiply), transposed back."""
    column = shape[:-2] + (1, shape[-1])

    def body(bb, x, m):
        factor = bb.emit(relax.op.sigmoid(m))
        return relax.op.multiply(factor, x) if factor_first else relax.op.multiply(x, factor)
    mod = _function([("x", shape), ("m", column)], body)
    rewritten = per_row_products(mod)
    ops = _ops(rewritten)
    assert ops.count("relax.permute_dims") == 2 and ops.count("relax.multiply") == 1, ops
    inputs = _inputs(rng, shape, column)
    np.testing.assert_array_equal(_host(rewritten, *inputs), _host(mod, *inputs))


def test_a_constant_factor_per_column_is_left_alone():
    """A constant [1, C, 1, W] operand is the element-wise unit's as it stands (no transposes)."""
    def body(bb, x):
        return relax.op.multiply(x, relax.const(np.full((1, 4, 1, 6), 0.5, np.float32)))
    mod = _function([("x", (1, 4, 5, 6))], body)
    assert "relax.permute_dims" not in _ops(per_row_products(mod))
