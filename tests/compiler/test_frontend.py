"""Model zoo and frontends: deterministic models, clean imports, host builds that match PyTorch."""

import numpy as np
import onnx
import pytest
import torch
import tvm
from conftest import assert_close
from tvm import relax

from accel_codegen import AccelInvalidError, AccelShapeError, AccelUnsupportedError
from accel_codegen.frontend import bind_params, export_onnx, from_onnx, from_pytorch
from accel_codegen.models import MODELS, get_model

# The TorchScript ONNX exporter and torch.export print deprecation notices that are not ours.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning",
                                        "ignore::FutureWarning", "ignore::UserWarning")

# name -> (example input shape at batch 1, output shape at batch 1)
ZOO = {
    "lenet5": ((1, 1, 32, 32), (1, 10)),
    "resnet18": ((1, 3, 224, 224), (1, 1000)),
    "resnet50": ((1, 3, 224, 224), (1, 1000)),
    "vgg11_bn": ((1, 3, 224, 224), (1, 1000)),
    "mobilenet_v1": ((1, 3, 224, 224), (1, 1000)),
    "mixed_block": ((1, 3, 32, 32), (1, 10)),
}


def _forward(model, inputs):
    with torch.no_grad():
        return model(*inputs).numpy()


def _ops(mod, func="main"):
    """Every relax.Call in a function, as (op name, call), in post order."""
    calls = []

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            calls.append((expr.op.name, expr))

    relax.analysis.post_order_visit(mod[func].body, visit)
    return calls


def _batch_norms(mod):
    return [call for name, call in _ops(mod) if name == "relax.nn.batch_norm"]


def _run_host(mod, inputs):
    """tvm.compile for llvm and run main on the torch inputs."""
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(x.numpy()) for x in inputs])
    return out.numpy()


def _count_bn(model):
    return sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())


# --------------------------------------------------------------------------------------
# Model zoo
# --------------------------------------------------------------------------------------
def test_registry_lists_the_zoo():
    assert sorted(MODELS) == sorted(ZOO)


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_model_is_deterministic_and_sane(name):
    in_shape, out_shape = ZOO[name]
    model, inputs = get_model(name, seed=0)
    again, inputs_again = get_model(name, seed=0)
    assert not model.training
    assert len(inputs) == 1 and tuple(inputs[0].shape) == in_shape
    assert torch.equal(inputs[0], inputs_again[0])
    state, state_again = model.state_dict(), again.state_dict()
    assert list(state) == list(state_again)
    assert all(torch.equal(state[k], state_again[k]) for k in state), "same seed, other weights"

    out = _forward(model, inputs)
    assert out.shape == out_shape and out.dtype == np.float32
    assert np.array_equal(out, _forward(again, inputs_again))
    assert np.isfinite(out).all()
    # Non-degenerate: the logits spread out but stay O(1)-ish after a deep stack.
    assert 0.3 < float(out.std()) < 30.0, f"{name}: output std {out.std():.3g}"

    other, other_inputs = get_model(name, seed=1)
    assert not torch.equal(other_inputs[0], inputs[0])
    assert not np.array_equal(_forward(other, inputs), out)


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_batch_norm_is_not_identity(name):
    model, _ = get_model(name)
    for bn in (m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)):
        assert 0.5 <= float(bn.running_var.min()) and float(bn.running_var.max()) <= 1.5
        assert 0.5 <= float(bn.weight.min()) and float(bn.weight.max()) <= 1.5
        assert float(bn.running_mean.abs().max()) > 0 and float(bn.bias.abs().max()) > 0
    assert _count_bn(model) == {"lenet5": 0, "resnet18": 20, "resnet50": 53, "vgg11_bn": 8,
                                "mobilenet_v1": 27, "mixed_block": 1}[name]


@pytest.mark.parametrize("name,batch", [("lenet5", 3), ("mixed_block", 2)])
def test_zoo_batch(name, batch):
    model, (x,) = get_model(name, batch=batch)
    assert x.shape[0] == batch and _forward(model, (x,)).shape[0] == batch


def test_zoo_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    get_model("lenet5", seed=7)
    assert torch.equal(torch.rand(4), expected)


def test_unknown_model_lists_the_known_ones():
    with pytest.raises(AccelInvalidError, match=r"unknown model 'resnet19'.*lenet5.*resnet18"):
        get_model("resnet19")


@pytest.mark.parametrize("kwargs,words", [
    ({"batch": 0}, "batch = 0"), ({"batch": 1.5}, "batch = 1.5"), ({"seed": -1}, "seed = -1"),
])
def test_bad_zoo_arguments(kwargs, words):
    with pytest.raises(AccelInvalidError, match=words):
        get_model("lenet5", **kwargs)


# --------------------------------------------------------------------------------------
# PyTorch frontend
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["lenet5", "resnet18", "mobilenet_v1", "mixed_block"])
def test_from_pytorch_host_build_matches_torch(name):
    model, inputs = get_model(name)
    mod, params = from_pytorch(model, inputs)
    assert params == {}
    bns = _batch_norms(mod)
    assert len(bns) == _count_bn(model)
    assert all(not bn.attrs.training and abs(float(bn.attrs.epsilon) - 1e-5) < 1e-9 for bn in bns)
    names = {op for op, _ in _ops(mod)}
    assert "relax.zeros_like" not in names, "max-pool leftovers survived the cleanup"
    assert_close(_run_host(mod, inputs), _forward(model, inputs), rtol=1e-4, what=name)


def test_cleanup_removes_the_max_pool_leftovers():
    from tvm.relax.frontend.torch import from_exported_program

    model, inputs = get_model("lenet5")
    raw = from_exported_program(torch.export.export(model, inputs))
    assert "relax.zeros_like" in {op for op, _ in _ops(raw)}  # why from_pytorch cleans up
    mod, _ = from_pytorch(model, inputs)
    assert "relax.zeros_like" not in {op for op, _ in _ops(mod)}


@pytest.mark.parametrize("name", ["lenet5", "mixed_block"])
def test_from_pytorch_keep_params_as_input(name):
    model, inputs = get_model(name)
    mod, params = from_pytorch(model, inputs, keep_params_as_input=True)
    expected = {"p_" + k.replace(".", "_"): v.numpy() for k, v in model.named_parameters()}
    assert list(params) == list(expected)
    for key, value in expected.items():
        assert params[key].dtype == np.float32 and np.array_equal(params[key], value), key
    assert [p.name for p in mod["main"].params] == ["x", *expected]
    # Buffers (batch-norm running statistics) stay constants.
    assert not any("running" in key for key in params)
    bound = bind_params(mod, params)
    assert [p.name for p in bound["main"].params] == ["x"]
    assert_close(_run_host(bound, inputs), _forward(model, inputs), rtol=1e-4, what=name)


# Registered once at import: torch refuses to register the same custom op twice.
@torch.library.custom_op("accel_test::double_relu", mutates_args=())
def _double_relu(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) * 2


@_double_relu.register_fake
def _(x):
    return torch.empty_like(x)


def test_custom_convert_map_is_passed_through():
    class Model(torch.nn.Module):
        def forward(self, x):
            return _double_relu(x) + 1

    def convert(node, importer):
        (x,) = importer.retrieve_args(node)
        bb = importer.block_builder
        return bb.emit(relax.op.multiply(relax.op.nn.relu(x), relax.const(2.0, "float32")))

    x = torch.randn(2, 5)
    mod, _ = from_pytorch(Model(), (x,), custom_convert_map={"double_relu.default": convert})
    assert "relax.nn.relu" in {op for op, _ in _ops(mod)}
    assert_close(_run_host(mod, (x,)), _forward(Model(), (x,)), what="custom op")


# --------------------------------------------------------------------------------------
# ONNX frontend
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,source", [("lenet5", "path"), ("lenet5", "proto"),
                                         ("mixed_block", "path"), ("resnet18", "path")])
def test_from_onnx_host_build_matches_torch(name, source, tmp_path):
    model, inputs = get_model(name)
    path = export_onnx(model, inputs, tmp_path / f"{name}.onnx")
    graph = onnx.load(str(path)).graph
    assert [i.name for i in graph.input] == ["x"]
    node_types = [n.op_type for n in graph.node]
    assert node_types.count("BatchNormalization") == _count_bn(model)  # not folded into Conv

    mod, params = from_onnx(path if source == "path" else onnx.load(str(path)))
    assert params == {} and [p.name for p in mod["main"].params] == ["x"]
    bns = _batch_norms(mod)
    assert len(bns) == _count_bn(model) and all(not bn.attrs.training for bn in bns)
    # DCE dropped the unused mean/var outputs of batch norm: only item 0 is read.
    items = []
    relax.analysis.post_order_visit(mod["main"].body, lambda e: items.append(e.index) if (
        isinstance(e, relax.TupleGetItem) and isinstance(e.tuple_value, relax.Var)) else None)
    assert set(items) <= {0}
    assert_close(_run_host(mod, inputs), _forward(model, inputs), rtol=1e-4, what=name)


def test_from_onnx_keep_params_in_input(tmp_path):
    model, inputs = get_model("mixed_block")
    mod, params = from_onnx(export_onnx(model, inputs, tmp_path / "m.onnx"),
                            keep_params_in_input=True)
    state = {k: v.numpy() for k, v in model.state_dict().items() if "num_batches" not in k}
    assert set(params) == set(state)  # every initializer, running statistics included
    for key, value in state.items():
        assert np.array_equal(params[key], value), key
    assert [p.name for p in mod["main"].params][0] == "x"
    bound = bind_params(mod, params)
    assert [p.name for p in bound["main"].params] == ["x"]
    assert_close(_run_host(bound, inputs), _forward(model, inputs), rtol=1e-4, what="bound")


# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lenet():
    return get_model("lenet5")


@pytest.mark.parametrize("case,words", [
    ("bare_tensor", r"tuple of torch.Tensor, got Tensor \(wrap a single tensor as \(x,\)\)"),
    ("list", "tuple of torch.Tensor, got list"),
    ("empty", "empty tuple"),
    ("number", r"example_inputs\[0\] is a float"),
    ("not_a_module", "model must be a torch.nn.Module, got function"),
])
def test_from_pytorch_rejects_bad_arguments(lenet, case, words):
    model, (x,) = lenet
    args = {"bare_tensor": (model, x), "list": (model, [x]), "empty": (model, ()),
            "number": (model, (1.0,)), "not_a_module": (lambda t: t, (x,))}[case]
    with pytest.raises(AccelInvalidError, match=words):
        from_pytorch(*args)


def test_from_pytorch_untraceable_model():
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x

    with pytest.raises(AccelUnsupportedError, match="torch.export could not trace DataDependent"):
        from_pytorch(DataDependent(), (torch.randn(3),))


def test_from_pytorch_unsupported_op():
    class Erfcx(torch.nn.Module):
        def forward(self, x):
            return torch.special.erfcx(x)

    with pytest.raises(AccelUnsupportedError, match=r"could not import Erfcx.*special_erfcx"):
        from_pytorch(Erfcx(), (torch.randn(3),))


def test_from_pytorch_wrong_input_shape(lenet):
    with pytest.raises(AccelUnsupportedError, match="torch.export could not trace LeNet5"):
        from_pytorch(lenet[0], (torch.randn(1, 3, 32, 32),))


@pytest.mark.parametrize("case,words", [
    ("missing", "does not exist"),
    ("directory", "does not exist or is not a file"),
    ("not_onnx", "is not a readable ONNX model"),
    ("number", "expected an onnx.ModelProto or a path, got int"),
])
def test_from_onnx_rejects_bad_arguments(tmp_path, case, words):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff\x00 not a protobuf \xff")
    arg = {"missing": tmp_path / "nope.onnx", "directory": tmp_path, "not_onnx": str(junk),
           "number": 3}[case]
    with pytest.raises(AccelInvalidError, match=words):
        from_onnx(arg)


def test_export_onnx_missing_directory(lenet, tmp_path):
    with pytest.raises(AccelInvalidError, match="does not exist"):
        export_onnx(*lenet, tmp_path / "no" / "such" / "dir.onnx")


@pytest.fixture(scope="module")
def lenet_with_params(lenet):
    return from_pytorch(*lenet, keep_params_as_input=True)


@pytest.mark.parametrize("case,error,words", [
    ("unknown", AccelInvalidError, r"params \['nope'\] match no parameter of 'main'"),
    ("shape", AccelShapeError, r"has shape \(3,\), but the parameter expects \(6,\)"),
    ("dtype", AccelShapeError, "has dtype float64, but the parameter expects float32"),
    ("not_a_dict", AccelInvalidError, "params must be a mapping"),
    ("function", AccelInvalidError, "function 'forward' is not in the module"),
])
def test_bind_params_rejects_bad_arguments(lenet_with_params, case, error, words):
    mod, params = lenet_with_params
    kwargs = {
        "unknown": {"params": {"nope": np.zeros(3, "float32")}},
        "shape": {"params": {"p_features_0_bias": np.zeros(3, "float32")}},
        "dtype": {"params": {"p_features_0_bias": np.zeros(6)}},
        "not_a_dict": {"params": list(params.values())},
        "function": {"params": params, "func_name": "forward"},
    }[case]
    with pytest.raises(error, match=words):
        bind_params(mod, **kwargs)


def test_bind_params_partially(lenet_with_params):
    mod, params = lenet_with_params
    bound = bind_params(mod, {"p_features_0_weight": params["p_features_0_weight"]})
    assert len(bound["main"].params) == len(mod["main"].params) - 1
    assert len(mod["main"].params) == 1 + len(params), "the input module was modified"
