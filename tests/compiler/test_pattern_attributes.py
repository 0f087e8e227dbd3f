"""Op attributes the engines cannot honour keep the op on the host with the reason (issue 28):
every vocabulary-driven op's attributes are read or pinned (``vocabulary.Entry.relax_attrs``),
never ignored. And the annotated pattern table: small, and no larger with a new activation."""
import dataclasses

import numpy as np
import pytest
from tvm import relax

import accel_codegen as ac
from accel_codegen.compiler import chains, patterns
from accel_codegen.compiler.codegen import emit
from accel_codegen.sim import ops as sim_ops
from accel_codegen.sim import reference as sim_reference
from accel_codegen.sim import vocabulary

SHAPE = (1, 4, 8, 8)


def _module(build, shape=SHAPE):
    """main(x) = build(bb, x), one dataflow block."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(build(bb, x))
        bb.emit_func_output(out)
    return bb.get()


def _conv(bb, x, **attrs):
    w = relax.const(np.random.default_rng(0).standard_normal((8, 4, 3, 3)).astype(np.float32))
    return bb.emit(relax.op.nn.conv2d(x, w, padding=1, **attrs))


def _reason(mod, op, config="nv_full"):
    """The reason the report gives for the host op ``op`` (it must be on the host)."""
    report = ac.partition_report(ac.partition_for_accel(mod, config=config))
    reasons = [r.reason for r in report.host if r.op == op]
    assert reasons, f"{op} was offloaded: {report}"
    return reasons[0]


@pytest.mark.parametrize("build,op,words", [
    (lambda bb, x: relax.op.nn.max_pool2d(x, 3, 1, 2, dilation=2), "relax.nn.max_pool2d",
     "dilation"),
    (lambda bb, x: relax.op.nn.avg_pool2d(x, 2, 2, layout="NHWC"), "relax.nn.avg_pool2d",
     "layout is NHWC"),
    (lambda bb, x: relax.op.nn.avg_pool2d(x, 2, 2, out_layout="NHWC"), "relax.nn.avg_pool2d",
     "out_layout is NHWC"),
    (lambda bb, x: relax.op.nn.adaptive_avg_pool2d(x, 1, out_layout="NHWC"),
     "relax.nn.adaptive_avg_pool2d", "out_layout is NHWC"),
    (lambda bb, x: relax.op.mean(x, [1, 2], keepdims=True), "relax.mean",
     "mean over axes [1, 2]"),
    (lambda bb, x: relax.op.nn.prelu(x, relax.const(np.full(8, 0.1, np.float32)), axis=3),
     "relax.nn.prelu", "prelu over axis 3"),
    (lambda bb, x: relax.op.log(x), "relax.log", "no accelerator primitive"),
])
def test_an_attribute_the_engine_cannot_honour_keeps_the_op_on_the_host(build, op, words):
    assert words in _reason(_module(build), op)


@pytest.mark.parametrize("attrs,words", [
    ({"data_layout": "NHWC"}, "conv2d data_layout is NHWC"),
    ({"out_dtype": "float16"}, "conv2d out_dtype is float16"),
])
def test_a_conv_in_another_layout_or_dtype_stays_on_the_host(attrs, words):
    shape = (1, 8, 8, 4) if attrs.get("data_layout") == "NHWC" else SHAPE
    mod = _module(lambda bb, x: relax.op.nn.relu(_conv(bb, x, **attrs)), shape)
    assert words in _reason(mod, "relax.nn.conv2d")


def _with_softplus(monkeypatch, relax_attrs):
    """The vocabulary with its softplus row (added the documented way: one row) pinning
    ``relax_attrs`` instead (None: no softplus row), since only the compiler's side is under
    test."""
    table = vocabulary.ACTIVATIONS
    rows = tuple(e for e in table.entries if e.name != "softplus")
    if relax_attrs is not None:
        rows += (dataclasses.replace(table["softplus"], relax_attrs=relax_attrs),)
    extended = vocabulary.Table(table.c_type, table.what, table.sentinel, rows)
    for module in (vocabulary, sim_ops, sim_reference, emit):  # and where it is imported by name
        monkeypatch.setattr(module, "ACTIVATIONS", extended)


def _softplus_model(beta):
    return _module(lambda bb, x: relax.op.nn.softplus(_conv(bb, x), beta, 20.0))


def test_softplus_added_by_one_vocabulary_row_runs_only_with_the_engines_beta():
    report = ac.partition_report(ac.partition_for_accel(_softplus_model(1.0)))
    assert report.host == []
    assert [p for ps in report.functions.values() for p in ps] == ["accel.conv2d_softplus"]
    reason = _reason(_softplus_model(2.0), "relax.nn.softplus")
    assert "beta = 2" in reason and "computes beta = 1.0" in reason


def test_an_attribute_the_vocabulary_does_not_pin_keeps_the_op_on_the_host(monkeypatch):
    _with_softplus(monkeypatch, ())
    reason = _reason(_softplus_model(1.0), "relax.nn.softplus")
    assert "the engine's softplus has no beta" in reason


def test_the_table_is_small_and_a_new_activation_adds_no_entry(monkeypatch):
    size = len(patterns.pattern_table())
    assert size < 110  # 103 since the conv's constant factor (chains.constant_factor)
    _with_softplus(monkeypatch, None)
    assert len(patterns.pattern_table()) == size
    # every entry but the copies, LRN and custom primitives names its roles
    annotated = [e for e in chains.entries() if e.annotations]
    assert all("input" in e.annotations for e in annotated)
    assert {"conv", "weight", "bias", "bn", "act", "act:relu"} <= set(
        next(e for e in annotated if e.name == "accel.conv2d_bias_bn_{act}").annotations)


def test_a_scale_shift_with_the_constant_first_is_one_primitive():
    """ONNX's HardSigmoid: clip(c * x + d, 0, 1) with the constant as multiply's first operand
    (the matcher takes add and multiply in either order; the roles must read x as the data)."""
    def build(bb, x):
        scaled = bb.emit(relax.op.multiply(relax.const(np.float32(1 / 6)), bb.emit(
            relax.op.nn.relu(x))))
        return relax.op.clip(bb.emit(relax.op.add(scaled, relax.const(np.float32(0.5)))), 0, 1)

    report = ac.partition_report(ac.partition_for_accel(_module(build)))
    assert report.host == []
    assert [p for ps in report.functions.values() for p in ps] == [
        "accel.relu", "accel.multiply_add_clip"]
