"""Multi-head attention whole on the accelerator (issue 29, item 3): torch's
nn.MultiheadAttention and nn.TransformerEncoderLayer, from PyTorch and from ONNX, become one
external function whose attention core is one layer of engine passes
(sim/decompose.attention_passes: per head the scores transposed, a CONV reading K's head
with Q's head rows as its weights, the softmax along W on the PDP and the SDP, a CONV reading
V's head rows with the probabilities as its weights, a BDMA copy into the head's channels); fp32 within 1e-4 of the output scale of PyTorch, fp16 against PyTorch's .half();
int8 runs the attention core in fp16 between converting runs (nv_small, int8 only, keeps it
on the host with its reason)."""
import copy

import numpy as np
import pytest
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from conftest import assert_close, run_main, sqnr, torch_forward

T, C, HEADS = 10, 48, 3


class SelfAttention(torch.nn.Module):
    def __init__(self, c=C, heads=HEADS, batch_first=True):
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(c, heads, batch_first=batch_first)

    def forward(self, x):
        return self.attention(x, x, x, need_weights=False)[0]


def _encoder(layers=1):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(C, HEADS, dim_feedforward=2 * C, dropout=0.0,
                                             batch_first=True)
    model = layer if layers == 1 else torch.nn.TransformerEncoder(
        layer, layers, enable_nested_tensor=False)
    return model.eval()


def _x(seed=0):
    return np.random.default_rng(seed).standard_normal((1, T, C)).astype(np.float32)


def _check_runs(model, mod, params, precision):
    vm = ac.virtual_machine(ac.build(mod, params=params, precision=precision))
    for seed in (1, 2):  # K and V change per call: read where their runs wrote them
        x = _x(seed)
        expected = torch_forward(model, x)
        ours = run_main(vm, x)
        if precision == "fp32":
            assert_close(ours, expected, 1e-4)
        else:
            half = torch_forward(copy.deepcopy(model).half(),
                                 torch.from_numpy(x).half()).astype(np.float32)
            ours_db, half_db = sqnr(ours, expected), sqnr(half, expected)
            # measured 63.5 against 66.4 dB: the passes round to half between steps where
            # PyTorch's half kernels keep fp32 (docs/transformer_ops.md)
            assert ours_db >= half_db - 3.5, (ours_db, half_db)


def test_fp16_attention_against_float64_is_within_1db_of_pytorch_half():
    """SQNR against a float64 run: ours and PyTorch's .half(), T = 10 (issue 29's goal: within
    1 dB). Measured 65.1 / 65.9 and 62.5 / 63.3 dB; 64.9 and 62.0 (gaps of 1.0 and 1.3 dB)
    while the exponentials read the scores rounded to half and 1 / sum came from the PDP's
    averages rounded to half; 63.4 and 60.9 (gaps of 2.4 dB) before the softmax was
    normalised in the P V CONV's SDP (docs/transformer_ops.md: fp16 accuracy)."""
    torch.manual_seed(0)
    model = SelfAttention().eval()
    mod, params = from_pytorch(model, (torch.from_numpy(_x()),))
    vm = ac.virtual_machine(ac.build(mod, params=params, precision="fp16"))
    for seed in (1, 2):
        x = _x(seed)
        with torch.no_grad():
            exact = copy.deepcopy(model).double()(torch.from_numpy(x).double()).numpy()
            half = copy.deepcopy(model).half()(torch.from_numpy(x).half()).float().numpy()
        ours_db, half_db = sqnr(run_main(vm, x), exact), sqnr(half, exact)
        assert ours_db >= half_db - 1.0, (seed, ours_db, half_db)


def test_fp16_batch_of_two_is_within_1db_of_pytorch_half_over_eight_seeds():
    """nn.MultiheadAttention(batch_first=True) on [2, T, C], seeds 1 to 8: SQNR against float64
    within 1 dB of PyTorch's .half() on every seed (issue 29's goal). Measured gaps of -0.42 dB
    at worst, -0.16 on average; -1.85 and -1.10 while the exponentials went through exp's own
    table (half its interpolation error is softmax_exp's) and 1 / sum was rounded to half
    before the P V CONV's SDP applied it (now its remainder too: values.remainder)."""
    torch.manual_seed(0)
    model = SelfAttention(batch_first=True).eval()
    xs = [np.random.default_rng(seed).standard_normal((2, T, C)).astype(np.float32)
          for seed in range(1, 9)]
    mod, params = from_pytorch(model, (torch.from_numpy(xs[0]),))
    vm = ac.virtual_machine(ac.build(mod, params=params, precision="fp16"))
    for seed, x in enumerate(xs, 1):
        with torch.no_grad():
            exact = copy.deepcopy(model).double()(torch.from_numpy(x).double()).numpy()
            half = copy.deepcopy(model).half()(torch.from_numpy(x).half()).float().numpy()
        ours_db, half_db = sqnr(run_main(vm, x), exact), sqnr(half, exact)
        assert ours_db >= half_db - 1.0, (seed, ours_db, half_db)


@pytest.mark.parametrize("batch_first", [False])  # True: the encoder layers below
def test_multihead_attention_is_one_layer_of_one_function(batch_first):
    torch.manual_seed(0)
    model = SelfAttention(batch_first=batch_first).eval()
    x = _x() if batch_first else _x().transpose(1, 0, 2).copy()
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    for precision in ("fp32", "fp16"):
        report = ac.partition_report(mod, params, precision=precision)
        assert report.host == [] and len(report.functions) == 1, report
        primitives = [p for ps in report.functions.values() for p in ps]
        assert primitives.count("accel.attention") == 1, report
        # the q, k, v and output projections around it: four dense layers over the tokens
        assert sum(p.startswith("accel.token_dense") for p in primitives) == 4, report


def test_sequence_first_batch_of_two_is_one_function_within_the_goals():
    """nn.MultiheadAttention(batch_first=False) on [T, 2, C]: the two images' rows alternate,
    so each image's heads are more heads of one image of T rows of 2C channels (image b's
    head h the head b heads + h); before, the packed projection's selects stayed host takes
    (2 functions). fp32 within 1e-4 of the output scale (measured 2.9e-7 and 3.5e-7), fp16
    within 1 dB of PyTorch's .half() against float64 (63.2 / 64.0 and 62.6 / 63.4 dB)."""
    torch.manual_seed(0)
    model = SelfAttention(batch_first=False).eval()
    xs = [np.random.default_rng(seed).standard_normal((T, 2, C)).astype(np.float32)
          for seed in (1, 2)]
    mod, params = from_pytorch(model, (torch.from_numpy(xs[0]),))
    for precision in ("fp32", "fp16"):
        report = ac.partition_report(mod, params, precision=precision)
        assert report.host == [] and len(report.functions) == 1, report
        primitives = [p for ps in report.functions.values() for p in ps]
        assert primitives.count("accel.attention") == 1, report
        vm = ac.virtual_machine(ac.build(mod, params=params, precision=precision))
        for x in xs:
            ours = run_main(vm, x)
            if precision == "fp32":
                assert_close(ours, torch_forward(model, x), 1e-4)
                continue
            with torch.no_grad():
                exact = copy.deepcopy(model).double()(torch.from_numpy(x).double()).numpy()
                half = copy.deepcopy(model).half()(torch.from_numpy(x).half()).float().numpy()
            assert sqnr(ours, exact) >= sqnr(half, exact) - 1.0


def test_batch_first_batch_of_two_is_the_sequence_first_function():
    """nn.MultiheadAttention(batch_first=True) on [2, T, C]: torch.export projects the
    transposed input by a batched matmul whose weight is a broadcast_to of W^T, read back as
    the dense layer of its rows (rewrites.broadcast_weight_matmuls), so the core is the
    sequence-first batch's above between two transposes: one function (before: 20 of 27
    operators in 3, the broadcasts, the batched matmul and the packed projection's selects on
    the host). fp32 within 1e-4 of the output scale (measured 4.4e-7, 2.5e-7); fp16 the
    sequence-first build's output bit for bit (its SQNR against float64 and .half()'s: the
    test above)."""
    torch.manual_seed(0)
    model = SelfAttention(batch_first=True).eval()
    sequence_first = SelfAttention(batch_first=False).eval()
    sequence_first.load_state_dict(model.state_dict())
    xs = [np.random.default_rng(seed).standard_normal((2, T, C)).astype(np.float32)
          for seed in (1, 2)]
    mod, params = from_pytorch(model, (torch.from_numpy(xs[0]),))
    report = ac.partition_report(mod, params)
    assert report.host == [] and len(report.functions) == 1, report
    primitives = [p for ps in report.functions.values() for p in ps]
    assert primitives.count("accel.attention") == 1, report
    vm = ac.virtual_machine(ac.build(mod, params=params))
    for x in xs:
        assert_close(run_main(vm, x), torch_forward(model, x), 1e-4)
    vm = ac.virtual_machine(ac.build(mod, params=params, precision="fp16"))
    seq_mod, seq_params = from_pytorch(
        sequence_first, (torch.from_numpy(xs[0].transpose(1, 0, 2).copy()),))
    seq_vm = ac.virtual_machine(ac.build(seq_mod, params=seq_params, precision="fp16"))
    for x in xs:
        np.testing.assert_array_equal(
            run_main(vm, x), run_main(seq_vm, x.transpose(1, 0, 2).copy()).transpose(1, 0, 2))


@pytest.mark.parametrize("layers,precision", [(1, "fp32"), (1, "fp16"), (2, "fp32")])
def test_transformer_encoder_is_one_function(layers, precision):
    model = _encoder(layers)
    mod, params = from_pytorch(model, (torch.from_numpy(_x()),))
    report = ac.partition_report(mod, params, precision=precision)
    assert len(report.offloaded) >= 0.95 * len(report.ops) and len(report.functions) == 1, \
        report
    primitives = [p for ps in report.functions.values() for p in ps]
    assert primitives.count("accel.attention") == layers, report
    if layers == 1:  # two layers: the same runs twice
        _check_runs(model, mod, params, precision)


def test_onnx_partitions_like_pytorch(tmp_path):
    model = _encoder()
    x = torch.from_numpy(_x())
    torch_report = ac.partition_report(*from_pytorch(model, (x,)))
    path = tmp_path / "encoder.onnx"
    export_onnx(model, (x,), path)
    mod, params = from_onnx(path)
    report = ac.partition_report(mod, params)
    assert len(report.functions) == len(torch_report.functions) == 1, report
    assert len(report.offloaded) >= 0.95 * len(report.ops), report
    primitives = [p for ps in report.functions.values() for p in ps]
    assert primitives.count("accel.attention") == 1, report
    vm = ac.virtual_machine(ac.build(mod, params=params))
    assert_close(run_main(vm, _x(3)), torch_forward(model, _x(3)), 1e-4)


class _HandWritten(torch.nn.Module):
    """Attention written out by hand with a scalar factor where torch's modules put none:
    after the query's projection, before its head split (``scaled``: the scores' scale is
    that one factor), or on V's heads (outside the softmax: it scales the output)."""

    def __init__(self, factor_on):
        super().__init__()
        torch.manual_seed(0)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(C, C) for _ in range(4))
        self.factor_on = factor_on

    def forward(self, x):  # x: [T, C]
        d = C // HEADS
        heads = lambda t: t.view(1, T, HEADS, d).transpose(1, 2)  # noqa: E731
        if self.factor_on == "q":
            q = heads(self.q(x) * d ** -0.5)
        else:
            q = heads(self.q(x)) * d ** -0.5
        v = self.v(x).view(1, T, HEADS, d)
        v = (v * 0.5).transpose(1, 2) if self.factor_on == "v" else v.transpose(1, 2)
        p = torch.softmax(q @ heads(self.k(x)).transpose(-1, -2), dim=-1)
        return self.o((p @ v).transpose(1, 2).reshape(T, C))


@pytest.mark.parametrize("factor_on", ["q", "v"])
def test_hand_written_attention_applies_each_scalar_factor_once(factor_on):
    model = _HandWritten(factor_on).eval()
    x = _x()[0]
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    vm = ac.virtual_machine(ac.build(mod, params=params, precision="fp32"))
    x = _x(1)[0]
    assert_close(run_main(vm, x), torch_forward(model, x), 1e-4)


def test_int8_runs_attention_in_fp16_where_the_configuration_has_it():
    """int8 code runs the attention core in fp16 between converting runs (its softmax's sums
    and its computed K and V weights: engines.fp16_in_int8); nv_small, int8 only, keeps it on
    the host saying why."""
    torch.manual_seed(0)
    model = SelfAttention().eval()
    x = _x()
    mod, params = from_pytorch(model, (torch.from_numpy(x),))
    report = ac.partition_report(mod, params, precision="int8", calibration=[(x,)])
    assert not report.host and len(report.functions) == 1, report
    assert {op.precision for op in report.ops if op.op == "relax.nn.attention"} == {"fp16"}
    assert any("sum of exponentials" in why for why in report.fp16_layers().values()), report
    small = ac.partition_report(mod, params, config="nv_small", precision="int8",
                                calibration=[(x,)])
    reasons = {op.op: op.reason for op in small.host}
    assert "attention in an int8 build runs in fp16" in reasons["relax.nn.attention"], small
    assert "fp16 is not supported by configuration nv_small" in reasons["relax.nn.attention"]


class CrossAttention(torch.nn.Module):
    """A DETR-style decoder step: learned queries attend to themselves, then to a memory of
    other tokens (the value; the key the memory plus a position embedding, as DETR's), each
    nn.MultiheadAttention."""

    def __init__(self, queries=6):
        super().__init__()
        self.queries = torch.nn.Parameter(torch.randn(1, queries, C))
        self.position = torch.nn.Parameter(0.1 * torch.randn(1, T, C))
        self.self_attention = torch.nn.MultiheadAttention(C, HEADS, batch_first=True)
        self.cross = torch.nn.MultiheadAttention(C, HEADS, batch_first=True)
        self.norm1, self.norm2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)

    def forward(self, memory):
        q = self.queries.expand(memory.shape[0], -1, -1)
        t = self.norm1(q + self.self_attention(q, q, q, need_weights=False)[0])
        return self.norm2(t + self.cross(t, memory + self.position, memory,
                                          need_weights=False)[0])


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_cross_attention_is_one_function(precision):
    """With a query other than its key and value, torch's MultiheadAttention projects each by
    a slice of its in_proj_weight and in_proj_bias: slices of constants, which fold
    (rewrites.constant_broadcasts_and_takes). Before, they and the bias adds stayed on the
    host, a DETR-style decoder in 3 external functions."""
    torch.manual_seed(0)
    model = CrossAttention().eval()
    memory = torch.from_numpy(np.random.default_rng(5).standard_normal((2, T, C)).astype(
        np.float32))
    partitioned = ac.partition_for_accel(*from_pytorch(model, (memory,)), precision=precision)
    report = ac.partition_report(partitioned)
    assert report.host == [] and len(report.functions) == 1, report
    expected = torch_forward(model, memory)
    ours = run_main(ac.virtual_machine(ac.build(partitioned)), memory)
    if precision == "fp32":
        assert_close(ours, expected, 1e-4)
    else:
        with torch.no_grad():
            half = copy.deepcopy(model).half()(memory.half()).float().numpy()
        assert sqnr(ours, expected) >= sqnr(half, expected) - 1.0
