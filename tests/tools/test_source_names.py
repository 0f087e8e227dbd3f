"""Each layer named by the source model (issue 30): PyTorch module paths from torch.export and
ONNX node names, carried by the importers onto every Relax call and read back by the partition
report, the estimate's table, CSV and JSON, and the trace."""
import csv
import io
import json

import onnx
import pytest
import torch
from onnx import TensorProto, helper

from accel_codegen import partition_report
from accel_codegen.compiler import frontend
from accel_codegen.compiler.source_names import compress
from conftest import trained_attention_biases


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.downsample = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 1), torch.nn.BatchNorm2d(8))

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)) + self.downsample(x))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.layer1 = torch.nn.Sequential(Block())
        self.fc = torch.nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        x = self.layer1(self.stem(x))
        return self.fc(torch.sin(x).flatten(1))


def _net():
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(1, 3, 4, 4),)


def test_compress_writes_shared_module_paths_once():
    assert compress(["layer2.0.downsample.0", "layer2.0.downsample.1", "layer2.0.conv2",
                     "layer2.0.add"]) == "layer2.0.{downsample.{0,1},conv2,add}"
    assert compress(["conv1", "bn1", "conv1"]) == "conv1+bn1"
    assert compress(["/l/a/Conv", "/l/b/Relu"]) == "/l/{a/Conv,b/Relu}"
    assert compress([]) == ""


def test_pytorch_module_paths_reach_the_partition_report():
    model, x = _net()
    mod, _ = frontend.from_pytorch(model, x)
    report = partition_report(mod)
    by_op = [(op.op, op.source, op.offloaded) for op in report.ops]
    assert ("relax.nn.conv2d", "stem", True) in by_op
    assert ("relax.nn.conv2d", "layer1.0.downsample.0", True) in by_op
    assert ("relax.nn.batch_norm", "layer1.0.downsample.1", True) in by_op
    assert ("relax.add", "layer1.0.add", True) in by_op  # written in Block.forward
    assert ("relax.sin", "sin", False) in by_op  # a host op keeps its name too
    # the linear layer's weight transpose, which the importer adds, is the linear layer's
    assert {op.source for op in report.ops if op.op == "relax.permute_dims"} <= {"fc"}
    assert all(op.source for op in report.ops)
    assert "layer1.0.downsample.0" in str(report)
    assert json.loads(json.dumps(report.to_dict()))["ops"][0]["source"] == "stem"


def test_onnx_node_names_reach_the_partition_report():
    weight = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 1, 1], [0.5] * 12)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="body/conv"),
         helper.make_node("Relu", ["c"], ["r"], name="body/act"),
         helper.make_node("Sin", ["r"], ["y"])],  # unnamed: its output names it
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod, _ = frontend.from_onnx(model)
    report = partition_report(mod)
    assert [(op.op, op.source) for op in report.ops] == [
        ("relax.nn.conv2d", "body/conv"), ("relax.nn.relu", "body/act"), ("relax.sin", "y")]


def test_estimate_table_csv_json_and_trace_name_the_layers(tmp_path):
    from accel_codegen.tools.estimation import estimate

    model, x = _net()
    mod, _ = frontend.from_pytorch(model, x)
    report = estimate(mod, None, config="nv_full")
    rows = list(csv.DictReader(io.StringIO(report.to_csv(tmp_path / "e.csv").read_text())))
    sources = [row["source"] for row in rows]
    assert sources[0] == "stem"
    # the block's two convolutions run as one layer (a branch run, then the main one)
    assert sources[1] == sources[2] == "layer1.0.{conv,bn,downsample.{0,1},add,relu}"
    assert report.to_dict()["layers"][0]["source"] == "stem"
    assert "stem" in str(report).splitlines()[3] and "layer1.0." in str(report).splitlines()[4]
    from accel_codegen.tools.report import name_trace, source_names

    trace = name_trace(report.chrome_trace(), source_names(report.source_ops))
    named = {e["args"].get("source") for e in trace["traceEvents"] if e.get("ph") == "X"}
    assert "stem" in named


def test_a_library_remembers_its_build_and_run_names_its_layers(capsys, tmp_path):
    """A library written by export_library carries its configuration, precision and each
    layer's source names: `run` reports on the configuration it was compiled for (--config
    may not contradict it) and its --profile table, --csv and --trace name each layer as the
    estimate does."""
    import accel_codegen as ac
    from accel_codegen.tools.estimation import estimate
    from conftest import run_cli

    model, x = _net()
    mod, params = frontend.from_pytorch(model, x)
    library = tmp_path / "net.so"
    ac.export_library(ac.build(mod, params, config="nv_small"), library)
    info = ac.library_info(library)
    assert (info.config.name, info.precision, info.fuse) == ("nv_small", "fp32", True)
    assert info.names["f0.0"] == "stem"
    assert info.ops["f0.0"] == ["relax.nn.conv2d", "relax.reshape", "relax.add"]
    out_csv, out_trace = tmp_path / "run.csv", tmp_path / "run.json"
    status, out, err = run_cli(capsys, "run", library, "--random", "--profile",
                               "--csv", out_csv, "--trace", out_trace)
    assert status == 0, err
    assert "nv_small clock" in out
    table = [line.split() for line in out.splitlines() if line.strip().startswith(("0 ", "1 "))]
    assert table[0][1:3] == ["f0.0", "accel.conv2d_bias"] and "stem" in table[0], table
    rows = list(csv.DictReader(io.StringIO(out_csv.read_text())))
    expected = estimate(mod, params, config="nv_small").layer_rows()
    assert [(r["layer"], r["source"], r["source_ops"]) for r in rows] == \
        [(e["layer"], e["source"], e["source_ops"]) for e in expected]
    assert rows[0]["source"] == "stem" and rows[1]["source"].startswith("layer1.0.{")
    assert all(r["source_ops"] for r in rows)
    events = json.loads(out_trace.read_text())["traceEvents"]
    assert {e["args"].get("source") for e in events if e.get("ph") == "X"} >= {"stem"}
    status, _, err = run_cli(capsys, "run", library, "--random", "--config", "nv_full")
    assert status == 1 and "compiled for configuration nv_small, not nv_full" in err, err
    status, _, err = run_cli(capsys, "run", library, "--random", "--config", "nv_small")
    assert status == 0, err


class PooledNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.avgpool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(torch.flatten(self.avgpool(torch.relu(self.conv(x))), 1))


def test_a_rewritten_global_pool_keeps_its_name():
    """flattened_global_pools puts mean(x, [2, 3]) in the flatten's place: TVM's rewriter makes
    the new call without a span, so the pool lost its name (None in every report); it keeps
    the pool's (avgpool), through the partition and the estimate."""
    from accel_codegen.compiler import rewrites
    from accel_codegen.compiler.source_names import name_of
    from accel_codegen.tools.estimation import estimate

    torch.manual_seed(0)
    mod, params = frontend.from_pytorch(PooledNet().eval(), (torch.randn(1, 3, 8, 8),))
    rewritten = rewrites.flattened_global_pools(mod)
    means = [b.value for b in rewritten["main"].body.blocks[0].bindings
             if getattr(b.value, "op", None) is not None and
             getattr(b.value.op, "name", "") == "relax.mean"]
    assert len(means) == 1 and name_of(means[0]) == "avgpool"
    assert not [b for b in rewritten["main"].body.blocks[0].bindings
                if getattr(getattr(b.value, "op", None), "name", "") == "relax.reshape" and
                name_of(b.value) == "flatten"]  # the flatten is gone, into the pool
    report = partition_report(mod, params)
    assert [op.source for op in report.ops if op.op == "relax.mean"] == ["avgpool"]
    assert all(op.source for op in report.ops)
    rows = estimate(mod, params, config="nv_full").layer_rows()
    assert [r["source"] for r in rows if "avgpool" in r["layer"]] == ["avgpool"]


def test_tvmscript_spans_name_no_layer():
    """TVMScript's parser gives each call its file and line as a span: not a layer's name."""
    import tvm
    from tvm.script import relax as R

    @tvm.script.ir_module
    class Scripted:
        @R.function
        def main(x: R.Tensor((1, 4, 8, 8), "float32")):
            with R.dataflow():
                y = R.nn.relu(x)
                R.output(y)
            return y

    assert [op.source for op in partition_report(Scripted).ops] == [None]


def _layers(module, x, config="nv_small"):
    """(label, source) of each accelerator layer of ``module``'s estimate on ``config``."""
    import accel_codegen as ac

    mod, params = frontend.from_pytorch(module.eval(), (x,))
    layers = ac.estimate(mod, params, config=config).to_dict()["layers"]
    return [(layer["label"], layer["source"]) for layer in layers]


class ReluBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        return self.relu(self.relu(self.conv(x)) + x)


def test_layers_that_fusion_shares_keep_their_own_names():
    """Structurally equal matches share one composite function after FuseOpsByPattern (a
    standalone ReLU after each residual add, on a preset that leaves the add on the host):
    each layer is still named by its own block's module (source_names.name_call_sites), and
    the layer keys stay those of the shared composites (the mixed search's)."""
    from accel_codegen.compiler.partition import layer_keys, match_composites
    from accel_codegen.compiler.keep_float import layer_source_names
    from accel_codegen.tools.report import source_ops

    torch.manual_seed(0)
    model, x = torch.nn.Sequential(ReluBlock(), ReluBlock(), ReluBlock()), torch.randn(1, 4, 8, 8)
    names = [source for label, source in _layers(model, x) if label.endswith("accel.relu")]
    assert names == ["0.relu", "1.relu", "2.relu"], names
    mod, params = frontend.from_pytorch(model.eval(), (x,))
    matched = match_composites(mod, params, config="nv_small")
    keys = layer_keys(matched)
    assert list(source_ops(matched)) == keys == list(layer_source_names(matched))
    relus = [source_ops(matched).names[k] for k in keys if source_ops(matched)[k] == ["relax.nn.relu"]]
    assert relus == ["0.relu", "1.relu", "2.relu"]
    report = partition_report(mod, params, config="nv_small")
    assert [op.source for op in report.ops if op.op == "relax.nn.relu" and op.offloaded and
            op.primitive.endswith("accel.relu")] == ["0.relu", "1.relu", "2.relu"]


class TwoBranches(torch.nn.Module):
    """Two convolutions of one input, told apart only by their weights, and two poolings of
    one input, told apart only by their attributes."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.b = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.small = torch.nn.MaxPool2d(2)
        self.large = torch.nn.MaxPool2d(4)

    def forward(self, x):
        return (torch.relu(self.b(x)) + torch.relu(self.a(x)), self.small(x).sum() +
                self.large(x).sum())


def test_operators_of_one_input_are_told_apart_by_their_constants_and_attributes():
    """The key that follows a layer across fusion (source_names._Keys) reads an operator's
    constants, shape arguments and attributes besides its variables: reshape(x, A) and
    reshape(x, B), two convolutions of x with other weights or paddings differ."""
    import numpy as np
    from tvm import relax

    from accel_codegen.compiler.source_names import _Keys

    x = relax.Var("x", relax.TensorType((1, 4, 8, 8), "float32"))
    w1, w2 = (relax.const(np.full((4, 4, 3, 3), v, "float32")) for v in (1, 2))
    keys = _Keys()
    calls = [relax.op.reshape(x, (1, 256)), relax.op.reshape(x, (4, 64)),
             relax.op.nn.conv2d(x, w1), relax.op.nn.conv2d(x, w2),
             relax.op.nn.conv2d(x, w1, padding=1)]
    assert len({keys(call, {}) for call in calls}) == len(calls)
    assert keys(relax.op.reshape(x, (1, 256)), {}) == keys(calls[0], {})
    assert keys(relax.op.nn.conv2d(x, relax.const(np.full((4, 4, 3, 3), 2, "float32"))),
                {}) == keys(calls[3], {})

    torch.manual_seed(0)
    layers = dict((source, label) for label, source in _layers(TwoBranches(),
                                                               torch.randn(1, 4, 8, 8),
                                                               config="nv_full"))
    assert {"b+relu", "a+relu", "small", "large"} <= set(layers), layers


def test_attention_layers_keep_their_module_paths():
    """torch's MultiheadAttention packs q, k and v in one projection, which the attention
    rewrite splits into three dense layers and a core (compiler/attention.py): each is named
    by the attention module's path, the projections with their part (they once had no name),
    the output projection by its own module (``out_proj``, whose parameters the attention's
    ``forward`` reads without calling it: once named as the core), every operator of each
    layer named."""
    from accel_codegen.compiler.partition import match_composites
    from accel_codegen.tools.report import source_names, source_ops

    torch.manual_seed(0)
    model = trained_attention_biases(torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True), 2,
        enable_nested_tensor=False).eval())
    mod, params = frontend.from_pytorch(model, (torch.randn(1, 8, 16),))
    report = partition_report(mod, params)
    assert not report.host
    assert all(op.source for op in report.ops), [op.op for op in report.ops if not op.source]
    for i in range(2):
        attention = f"layers.{i}.self_attn"
        layers = [(op.primitive, op.source) for op in report.ops if op.op in (
            "relax.matmul", "relax.nn.attention") and op.source.startswith(attention)]
        assert layers == [("accel.token_dense_bias", f"{attention}.q"),
                          ("accel.token_dense_bias", f"{attention}.k"),
                          ("accel.token_dense_bias", f"{attention}.v"),
                          ("accel.attention", attention),
                          ("accel.token_dense_bias", f"{attention}.out_proj")], layers
    names = source_names(source_ops(match_composites(mod, params)))
    assert list(names.values())[:5] == ["layers.0.self_attn.q", "layers.0.self_attn.k",
                                        "layers.0.self_attn.v", "layers.0.self_attn",
                                        "layers.0.self_attn.out_proj"]
