"""The PyTorch and ONNX frontends: clean imports, host builds that match PyTorch, errors."""

import numpy as np
import onnx
import pytest
import torch
import tvm
from conftest import assert_close, count_batch_norms, run_main, torch_forward
from tvm import relax

import accel_codegen as ac
from accel_codegen import AccelInvalidError, AccelShapeError, AccelUnsupportedError
from accel_codegen.compiler.frontend import bind_params, export_onnx, from_onnx, from_pytorch

# The TorchScript ONNX exporter and torch.export print deprecation notices that are not ours.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning",
                                        "ignore::FutureWarning", "ignore::UserWarning")


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
    """TVM's own CPU build of the module (accel_codegen.build_host: batch norm decomposed for
    inference, then tvm.compile for llvm), main run on the inputs."""
    return run_main(ac.virtual_machine(ac.build_host(mod)), *inputs)


# --------------------------------------------------------------------------------------
# PyTorch frontend
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["lenet5", "resnet18", "mobilenet_v1", "mixed_block"])
def test_from_pytorch_host_build_matches_torch(name, zoo):
    imported = zoo(name)  # from_pytorch(model, (x,)), once per session
    model, inputs, mod, params = imported.model, (imported.x,), imported.mod, imported.params
    assert params == {}
    bns = _batch_norms(mod)
    assert len(bns) == count_batch_norms(model)
    assert all(not bn.attrs.training and abs(float(bn.attrs.epsilon) - 1e-5) < 1e-9 for bn in bns)
    names = {op for op, _ in _ops(mod)}
    assert "relax.zeros_like" not in names, "max-pool leftovers survived the cleanup"
    host = ac.virtual_machine(zoo.host_build(name))  # _run_host's build, made once a session
    assert_close(run_main(host, *inputs), torch_forward(model, *inputs), rtol=1e-4, what=name)


def test_cleanup_removes_the_max_pool_leftovers(zoo):
    from tvm.relax.frontend.torch import from_exported_program

    lenet = zoo("lenet5")
    model, inputs = lenet.model, (lenet.x,)
    raw = from_exported_program(torch.export.export(model, inputs))
    assert "relax.zeros_like" in {op for op, _ in _ops(raw)}  # why from_pytorch cleans up
    mod = lenet.mod  # from_pytorch(model, inputs)
    assert "relax.zeros_like" not in {op for op, _ in _ops(mod)}


@pytest.mark.parametrize("name", ["lenet5", "mixed_block"])
def test_from_pytorch_keep_params_as_input(name, zoo):
    imported = zoo(name, keep_params_as_input=True)
    model, inputs, mod, params = imported.model, (imported.x,), imported.mod, imported.params
    expected = {"p_" + k.replace(".", "_"): v.numpy() for k, v in model.named_parameters()}
    assert list(params) == list(expected)
    for key, value in expected.items():
        assert params[key].dtype == np.float32 and np.array_equal(params[key], value), key
    assert [p.name for p in mod["main"].params] == ["x", *expected]
    # Buffers (batch-norm running statistics) stay constants.
    assert not any("running" in key for key in params)
    bound = bind_params(mod, params)
    assert [p.name for p in bound["main"].params] == ["x"]
    assert_close(_run_host(bound, inputs), torch_forward(model, *inputs), rtol=1e-4, what=name)


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
    assert_close(_run_host(mod, (x,)), torch_forward(Model(), x), what="custom op")


# --------------------------------------------------------------------------------------
# ONNX frontend
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,source", [("lenet5", "path"), ("lenet5", "proto"),
                                         ("mixed_block", "path"), ("resnet18", "path")])
def test_from_onnx_host_build_matches_torch(name, source, tmp_path, zoo):
    model, inputs = zoo(name).model, (zoo(name).x,)
    path = export_onnx(model, inputs, tmp_path / f"{name}.onnx")
    graph = onnx.load(str(path)).graph
    assert [i.name for i in graph.input] == ["x"]
    node_types = [n.op_type for n in graph.node]
    # batch norm is not folded into Conv
    assert node_types.count("BatchNormalization") == count_batch_norms(model)

    mod, params = from_onnx(path if source == "path" else onnx.load(str(path)))
    assert params == {} and [p.name for p in mod["main"].params] == ["x"]
    bns = _batch_norms(mod)
    assert len(bns) == count_batch_norms(model) and all(not bn.attrs.training for bn in bns)
    # DCE dropped the unused mean/var outputs of batch norm: only item 0 is read.
    items = []
    relax.analysis.post_order_visit(mod["main"].body, lambda e: items.append(e.index) if (
        isinstance(e, relax.TupleGetItem) and isinstance(e.tuple_value, relax.Var)) else None)
    assert set(items) <= {0}
    assert_close(_run_host(mod, inputs), torch_forward(model, *inputs), rtol=1e-4, what=name)


def test_from_onnx_keep_params_in_input(tmp_path, zoo):
    model, inputs = zoo("mixed_block").model, (zoo("mixed_block").x,)
    mod, params = from_onnx(export_onnx(model, inputs, tmp_path / "m.onnx"),
                            keep_params_in_input=True)
    state = {k: v.numpy() for k, v in model.state_dict().items() if "num_batches" not in k}
    assert set(params) == set(state)  # every initializer, running statistics included
    for key, value in state.items():
        assert np.array_equal(params[key], value), key
    assert [p.name for p in mod["main"].params][0] == "x"
    bound = bind_params(mod, params)
    assert [p.name for p in bound["main"].params] == ["x"]
    assert_close(_run_host(bound, inputs), torch_forward(model, *inputs), rtol=1e-4, what="bound")


# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------
@pytest.fixture
def lenet(zoo):
    """(model, (x,)) of the zoo's LeNet-5."""
    lenet = zoo("lenet5")
    return lenet.model, (lenet.x,)


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


def test_from_pytorch_a_converter_failing_is_a_typed_error(monkeypatch):
    """A converter that fails on its op's arguments raises what it raises (TVM's converter of
    the gathers torch made of F.unfold raised a bare ValueError, before unfold was imported
    whole: tests/flow/test_unfold_flow.py): the user gets the project's error naming the
    model and the converter's words."""
    from accel_codegen.compiler import frontend

    def broken(node, importer):
        raise ValueError("elu: cannot broadcast (3,) against (4,)")

    monkeypatch.setitem(frontend._MISSING_CONVERTERS, "elu.default", broken)
    with pytest.raises(AccelUnsupportedError, match=r"could not import ELU.*cannot broadcast"):
        from_pytorch(torch.nn.ELU(), (torch.randn(1, 8, 16, 16),))


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


def test_export_onnx_traces_the_given_inputs_only(tmp_path):
    """torch's exporter appends forward's further defaults to the traced inputs: exported as
    it is, nn.TransformerEncoderLayer's is_causal=False became a tensor that
    scaled_dot_product_attention refused. The layer exports, its parameters keep their names
    and the ONNX graph runs as the layer does; the caller's model is left as it was."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True).eval()
    x = torch.randn(1, 5, 16)
    path = export_onnx(layer, (x,), tmp_path / "layer.onnx")
    assert "forward" not in vars(layer)
    import onnx

    graph = onnx.load(str(path)).graph
    assert [i.name for i in graph.input] == ["src"]
    assert "linear1.weight" in {w.name for w in graph.initializer}
    mod, params = from_onnx(path)
    assert_close(run_main(ac.virtual_machine(ac.build(mod, params=params)), x.numpy()),
                 torch_forward(layer, x))


@pytest.fixture
def lenet_with_params(zoo):
    """(mod, params) of LeNet-5 imported with keep_params_as_input=True."""
    lenet = zoo("lenet5", keep_params_as_input=True)
    return lenet.mod, lenet.params


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


def test_importing_a_model_prints_no_warning_of_torchs_own(recwarn):
    """torch.export's pytree FutureWarning is noise the project triggers: it is silenced
    there, not left to every caller (nor to a global filter)."""
    import warnings

    from accel_codegen import models

    model, inputs = models.get_model("lenet5")
    warnings.simplefilter("always")
    from_pytorch(model, inputs)
    assert not [w for w in recwarn if "LeafSpec" in str(w.message)]


class TwoRelu6(torch.nn.Module):
    """conv + BN + ReLU6, conv + ReLU6: torch exports ReLU6 to ONNX as Clip(x, min, max) with
    the bounds as inputs, which TVM's importer spells isnan / where / maximum / minimum."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.conv2 = torch.nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        y = torch.nn.functional.relu6(self.bn(self.conv(x)))
        return torch.nn.functional.relu6(self.conv2(y))


def test_onnx_clip_partitions_as_the_pytorch_model_does(tmp_path):
    model, x = TwoRelu6().eval(), torch.randn(1, 3, 8, 8)
    export_onnx(model, (x,), tmp_path / "m.onnx")
    from_torch = ac.partition_report(ac.partition_for_accel(*from_pytorch(model, (x,))))
    partitioned = ac.partition_for_accel(*from_onnx(tmp_path / "m.onnx"))
    from_file = ac.partition_report(partitioned)
    assert from_file.host == [] and list(from_file.functions.values()) == \
        list(from_torch.functions.values()) == [["accel.conv2d_bias_bn_clip",
                                                 "accel.conv2d_bias_clip"]]
    assert_close(run_main(ac.virtual_machine(ac.build(partitioned)), x.numpy()),
                 torch_forward(model, x))


class Embedding(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(10, 8)

    def forward(self, tokens):
        return self.table(tokens)[:, 0]


def test_gathers_are_bounds_checked_and_build_without_tvm_warnings(capfd):
    """torch's frontend gathers in TVM's unchecked "fast" mode, which TVM warns about at every
    build; the import makes them wrapping (a negative index counts from the end, as torch reads
    it): the same values, and a quiet build."""
    model = Embedding().eval()
    tokens = torch.tensor([[3, 9, 0, 4]])
    mod, params = from_pytorch(model, (tokens,))
    modes = []
    relax.analysis.post_order_visit(mod["main"], lambda e: modes.append(str(e.attrs.mode)) if (
        isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.take") else None)
    assert modes and set(modes) == {"wrap"}
    capfd.readouterr()
    built = ac.virtual_machine(ac.build(ac.partition_for_accel(mod, params)))
    assert "Fast mode" not in capfd.readouterr().err
    np.testing.assert_array_equal(run_main(built, tokens.numpy()), model(tokens).detach().numpy())


class ChannelExtremes(torch.nn.Module):
    """CBAM's spatial attention reads the channels' max (torch.amax) and mean; amin over two
    axes without keepdim, and over all axes: ops TVM's PyTorch frontend has no converter for."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.attend = torch.nn.Conv2d(2, 1, 7, padding=3)

    def forward(self, x):
        y = self.conv(x)
        pooled = torch.cat([y.mean(1, keepdim=True), y.amax(1, keepdim=True)], 1)
        gated = y * torch.sigmoid(self.attend(pooled))
        return gated.amin((2, 3)) + gated.amax()


def test_amax_and_amin_import_and_run():
    """They import (they raised 'Unsupported function types'), stay on the host with their
    reason, and the answer is PyTorch's."""
    model, x = ChannelExtremes().eval(), np.random.default_rng(4).standard_normal(
        (1, 3, 10, 12)).astype(np.float32)
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    partitioned = ac.partition_for_accel(mod, params)
    report = ac.partition_report(partitioned)
    assert any(op.op == "relax.max" and not op.offloaded for op in report.ops), str(report)
    assert any(op.op == "relax.nn.conv2d" and op.offloaded for op in report.ops)
    built = ac.virtual_machine(ac.build(partitioned))
    np.testing.assert_allclose(run_main(built, x), model(torch.from_numpy(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activation", [torch.nn.SELU(), torch.nn.ELU(0.5), torch.nn.ELU()],
                         ids=["selu", "elu_0.5", "elu"])
def test_elu_keeps_its_scale(activation):
    """nn.SELU exports as aten's elu(x, alpha, scale); TVM's converter read alpha alone, so
    SELU came out 1.0507 times too small for x > 0 (0.13 off at a scale of 2.7), on the
    accelerator and on TVM's host build alike. Both now give PyTorch's answer, whole on the
    accelerator."""
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3, padding=1), activation).eval()
    x = torch.randn(1, 4, 6, 6) * 2
    mod, params = from_pytorch(model, (x,))
    expected = torch_forward(model, x)
    host = relax.build(bind_params(mod, params), target="llvm")
    assert_close(run_main(relax.VirtualMachine(host, tvm.cpu()), x), expected, rtol=1e-5)
    partitioned = ac.partition_for_accel(mod, params)
    assert ac.partition_report(partitioned).host == []
    assert_close(run_main(ac.virtual_machine(ac.build(partitioned)), x), expected, rtol=1e-5)
