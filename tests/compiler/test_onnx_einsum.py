"""ONNX Einsum of a batched-matmul equation imported as Transposes and a MatMul
(frontend._einsums_as_matmuls): TVM's importer makes every Einsum a call_tir of TOPI's einsum,
which the partitioner cannot read. Each case against NumPy's einsum, and on the accelerator;
equations that are not one batched product keep TVM's kernel (on the host)."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import accel_codegen as ac
from accel_codegen.compiler.frontend import from_onnx
from conftest import assert_close, build_and_run


def _einsum_model(equation, a_shape, b_shape, out_shape):
    graph = helper.make_graph(
        [helper.make_node("Einsum", ["a", "b"], ["y"], equation=equation)], "einsum",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, a_shape),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, b_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("equation,a_shape,b_shape", [
    ("bhid,bhjd->bhij", (1, 2, 5, 8), (1, 2, 6, 8)),   # attention's scores
    ("bhij,bhjd->bhid", (1, 2, 5, 6), (1, 2, 6, 8)),   # its values
    ("ik,kj->ij", (5, 8), (8, 6)),                      # a plain matmul
    ("bik,bjk->bji", (2, 5, 8), (2, 6, 8)),             # the output transposed
    ("hbid, hbjd -> bhij", (2, 1, 5, 8), (2, 1, 6, 8)),  # batch labels reordered, spaces
    ("btc,dc->btd", (2, 5, 8), (6, 8)),                 # a linear layer, its weight 2-D
    ("btc,cd->tbd", (2, 5, 8), (8, 6)),
])
def test_a_batched_matmul_einsum_is_a_matmul(equation, a_shape, b_shape):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    expected = np.einsum(equation.replace(" ", ""), a, b)
    mod, params = from_onnx(_einsum_model(equation, a_shape, b_shape, expected.shape))
    report = ac.partition_report(mod, params)
    assert not any("einsum" in op.op for op in report.ops), str(report)
    assert_close(build_and_run(mod, a, b, params=params), expected, 1e-5)


@pytest.mark.parametrize("equation,a_shape,b_shape,out_shape", [
    ("bij,bjk->b", (2, 3, 4), (2, 4, 5), (2,)),  # a full reduction: not one product
    ("ij,ij->ij", (3, 4), (3, 4), (3, 4)),        # element-wise
])
def test_other_einsums_import_as_they_are(equation, a_shape, b_shape, out_shape):
    rng = np.random.default_rng(1)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    mod, params = from_onnx(_einsum_model(equation, a_shape, b_shape, out_shape))
    report = ac.partition_report(mod, params)
    assert [op.op for op in report.host] == ["relax.call_tir(einsum)"], str(report)
    assert_close(build_and_run(mod, a, b, params=params), np.einsum(equation, a, b), 1e-5)
