"""The rewrites before matching, cached per (module, params) (issue 30: a session partitioning
one import for several targets runs them once): a repeat hits and gives the same module; a
weight changed in place, a function of the module set anew, a changed source name or another
module misses and is rewritten."""
import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax

from accel_codegen.compiler import partition
from accel_codegen.compiler.source_names import name_of, span_of


def _module(name: str = "features.0") -> tvm.IRModule:
    """main(x, w, b) = relu(conv2d(pad(x), w) + b): the zero padding folds into the conv."""
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 8, 8), "float32"))
    w = relax.Var("w", relax.TensorType((8, 4, 3, 3), "float32"))
    b = relax.Var("b", relax.TensorType((1, 8, 1, 1), "float32"))
    with builder.function("main", [x, w, b]):
        with builder.dataflow():
            padded = builder.emit(relax.op.nn.pad(x, [0, 0, 0, 0, 1, 1, 1, 1]))
            conv = relax.op.nn.conv2d(padded, w)
            conv = builder.emit(relax.Call(conv.op, conv.args, conv.attrs, conv.ty_args,
                                           span_of(name)))
            out = builder.emit_output(relax.op.nn.relu(relax.op.add(conv, b)))
        builder.emit_func_output(out)
    return builder.get()


def _params(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"w": rng.standard_normal((8, 4, 3, 3)).astype("float32"),
            "b": rng.standard_normal((1, 8, 1, 1)).astype("float32")}


@pytest.fixture
def cache(monkeypatch):
    fresh = partition._RewriteCache()
    monkeypatch.setattr(partition, "REWRITE_CACHE", fresh)
    return fresh


def _conv(mod: tvm.IRModule):
    return next(b.value for block in mod["main"].body.blocks for b in block.bindings
                if getattr(b.value.op, "name", "") == "relax.nn.conv2d")


def test_a_repeat_hits_and_gives_the_module_rewritten_anew(cache):
    mod, params = _module(), _params()
    first = partition.rewritten(mod, params)
    again = partition.rewritten(mod, params)
    assert (cache.hits, cache.misses) == (1, 1)
    assert tvm_ffi.structural_equal(again, partition._rewrite_for_matching(mod, params))
    assert list(_conv(again).attrs.padding) == [1, 1, 1, 1]  # the pad folded
    # each call its own module: setting a function in one leaves the cache's whole
    first["main"] = _module()["main"]
    assert tvm_ffi.structural_equal(partition.rewritten(mod, params), again)
    # the matchings of two precisions and presets share it
    partition.match_composites(mod, params, config="nv_small", precision="int8")
    assert cache.hits == 3


def test_a_weight_changed_in_place_misses(cache):
    mod, params = _module(), _params()
    before = partition.rewritten(mod, params)
    params["w"][0, 0, 0, 0] += 1.0
    after = partition.rewritten(mod, params)
    assert (cache.hits, cache.misses) == (0, 2)
    weight = _conv(after).args[1].value.numpy()
    assert weight[0, 0, 0, 0] == params["w"][0, 0, 0, 0]
    assert not tvm_ffi.structural_equal(before, after)


def test_another_source_name_or_module_misses(cache):
    params = _params()
    partition.rewritten(_module("features.0"), params)
    renamed = partition.rewritten(_module("backbone.conv"), params)
    assert (cache.hits, cache.misses) == (0, 2)
    assert name_of(_conv(renamed)) == "backbone.conv"
    partition.rewritten(_module("features.0"), _params(seed=1))
    assert cache.misses == 3


def test_a_function_set_in_the_module_misses(cache):
    mod, params = _module("features.0"), _params()
    partition.rewritten(mod, params)
    mod["main"] = _module("head")["main"]
    assert name_of(_conv(partition.rewritten(mod, params))) == "head"
    assert (cache.hits, cache.misses) == (0, 2)
