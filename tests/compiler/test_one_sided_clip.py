"""rewrites.clip_from_bounds on an ONNX Clip of one bound: a float tensor's becomes clip(x, lo,
inf); an integer tensor's stays the maximum it is (clip's infinite bound has no integer form,
and TVM's build failed on it)."""
import numpy as np
import tvm
from onnx import TensorProto, helper
from tvm import relax

from accel_codegen.compiler import frontend


def _clip_model(elem: int, dtype: str):
    x = helper.make_tensor_value_info("x", elem, [4])
    y = helper.make_tensor_value_info("y", elem, [4])
    lo = helper.make_tensor("lo", elem, [], np.array([1], dtype))
    graph = helper.make_graph([helper.make_node("Clip", ["x", "lo"], ["y"])], "g", [x], [y],
                              [lo])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _run(mod, x: np.ndarray) -> np.ndarray:
    mod = mod[0] if isinstance(mod, tuple) else mod
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def test_float_clip_of_one_bound_is_a_clip():
    mod = frontend.from_onnx(_clip_model(TensorProto.FLOAT, "float32"))
    text = str(mod[0] if isinstance(mod, tuple) else mod)
    assert "R.clip" in text
    x = np.array([-5, 0, 3, 7], "float32")
    np.testing.assert_array_equal(_run(mod, x), np.maximum(x, 1))


def test_int_clip_of_one_bound_builds_and_computes_the_maximum():
    mod = frontend.from_onnx(_clip_model(TensorProto.INT32, "int32"))
    text = str(mod[0] if isinstance(mod, tuple) else mod)
    assert "R.clip" not in text
    x = np.array([-5, 0, 3, 7], "int32")
    np.testing.assert_array_equal(_run(mod, x), np.maximum(x, 1))
