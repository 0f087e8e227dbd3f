"""affines_into_convs folds a bias only where it is per channel: a [k] bias broadcasts along
W, and when W == k the shapes alone do not tell them apart (a wrong answer before)."""
import numpy as np
import tvm
from tvm import relax

from accel_codegen.compiler.rewrites import affines_into_convs


def _module(bias: np.ndarray) -> tvm.IRModule:
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((4, 3, 1, 1)).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 3, 8, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, relax.const(weight)))
            y = bb.emit(relax.op.add(y, relax.const(bias)))
            y = bb.emit(relax.op.multiply(y, relax.const(np.float32(2.0))))
            out = bb.emit_output(relax.op.add(y, relax.const(np.float32(0.5))))
        bb.emit_func_output(out)
    return bb.get()


def _run(mod: tvm.IRModule, x: np.ndarray) -> np.ndarray:
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def test_a_bias_along_w_is_not_folded_as_per_channel():
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 4)).astype("float32")
    bias = np.arange(4, dtype="float32")
    for shape, folds in (((4,), False), ((1, 4, 1, 1), True)):
        mod = _module(bias.reshape(shape))
        new = affines_into_convs(mod)
        assert ("multiply" not in new["main"].script()) == folds, shape
        np.testing.assert_allclose(_run(new, x), _run(mod, x), rtol=1e-5, atol=1e-5)
