"""Matmuls of two computed operands (issue 29, item 3): a (batched) matmul whose operands
both come from runs is, per image (batch element, head), one CONV run whose weights another
run wrote (NVDLA's CONV fetches its weights from memory), its second operand transposed onto
the CONV's kernels by one BDMA transpose unless it is given as K^T (``rewrites.computed_matmuls``).
The motivating case: ``nn.MultiheadAttention`` with its default ``need_weights=True``
returning the head-averaged attention weights too, which the attention rewrite does not read
as one core (its probabilities leave the core): its two batched matmuls, the selects of the
packed projection and the head average all on the engines, one external function, in fp32,
fp16 and int8, from PyTorch and from its ONNX export. Also a standalone batched product of
two computed tensors, with and without the transpose."""
import copy

import numpy as np
import pytest
import torch
import tvm

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx, from_pytorch
from accel_codegen.quantization import ort_baseline
from conftest import assert_close, sqnr

T, C, HEADS = 16, 64, 4


class WeightsToo(torch.nn.Module):
    """Self-attention returning the output and the head-averaged attention weights."""

    def __init__(self):
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(C, HEADS, batch_first=True)

    def forward(self, x):
        y, w = self.attention(x, x, x)
        return y, w


class Products(torch.nn.Module):
    """``relu(x W1) relu(x W2)^T`` (K^T given: no transpose) or ``relu(x W1)^T relu(x W2)``
    (neither operand in the CONV's layout as it lies: the weights transposed first)."""

    def __init__(self, channels: int, transposed_keys: bool):
        super().__init__()
        self.w1 = torch.nn.Linear(channels, channels)
        self.w2 = torch.nn.Linear(channels, channels)
        self.transposed_keys = transposed_keys

    def forward(self, x):
        a, b = torch.relu(self.w1(x)), torch.relu(self.w2(x))
        if self.transposed_keys:
            return torch.matmul(a, b.transpose(-1, -2))
        return torch.matmul(a.transpose(-1, -2), b)


def _weights_too():
    torch.manual_seed(0)
    model = WeightsToo().eval()
    with torch.no_grad():  # torch starts the biases at 0; a trained model's are not
        torch.nn.init.normal_(model.attention.in_proj_bias, std=0.1)
        torch.nn.init.normal_(model.attention.out_proj.bias, std=0.1)
    return model, torch.randn(1, T, C)


def _outputs(model, x):
    with torch.no_grad():
        result = model(x)
    return [t.float().numpy() for t in (result if isinstance(result, tuple) else (result,))]


def _run(mod_or_partitioned, x, **options):
    """Every output of the build run on x, as NumPy arrays."""
    vm = ac.virtual_machine(ac.build(mod_or_partitioned, **options))
    out = vm["main"](tvm.runtime.tensor(np.ascontiguousarray(x)))
    return [out.numpy()] if hasattr(out, "numpy") else [out[i].numpy() for i in range(len(out))]


def _whole(report):
    assert report.host == [] and len(report.functions) == 1, str(report)


def test_need_weights_is_one_function_fp32_and_fp16():
    """Before: 35 of 40 operators in 6 functions (the packed projection's three selects and
    both batched matmuls on the host). fp32 within 1e-4 of each output's scale; fp16 within
    issue 29's 1 dB of PyTorch's .half() for both outputs (measured: y 0.15 dB below, the
    averaged probabilities 0.76 dB, 2.8 dB before the token softmax's fp16 passes took
    softmax_exp's table, a CONV's fp32 sum and 1 / sum's remainder: decompose._softmax_fp16;
    their exponentials, rounded to half before the product, are what is left:
    docs/transformer_ops.md)."""
    model, x = _weights_too()
    mod, params = from_pytorch(model, (x,))
    for precision in ("fp32", "fp16"):
        report = ac.partition_report(mod, params, precision=precision)
        _whole(report)
        # y from the attention core, w from a layer of the scores', softmax's and heads'
        # mean passes (need_weights=False's core and what w alone needs)
        primitives = [p for ps in report.functions.values() for p in ps]
        assert primitives.count("accel.attention") == 1, report
        assert primitives.count("accel.attention_weights") == 1, report
        assert "accel.dense" not in primitives, report
    expected = _outputs(model, x)
    for ours, theirs, what in zip(_run(mod, x.numpy(), params=params), expected, ("y", "w")):
        assert_close(ours, theirs, 1e-4, what)
    half = _outputs(copy.deepcopy(model).half(), x.half())
    for ours, theirs, halved, what, margin in zip(
            _run(mod, x.numpy(), params=params, precision="fp16"), expected, half, ("y", "w"),
            (1.0, 1.0)):
        print(f"fp16 {what}: ours {sqnr(ours, theirs):.2f} dB, PyTorch .half() "
              f"{sqnr(halved, theirs):.2f} dB")
        assert sqnr(ours, theirs) >= sqnr(halved, theirs) - margin, what


@pytest.mark.parametrize("batch_first,batch", [(True, 2), (False, 1), (False, 2)])
def test_need_weights_in_either_layout_and_a_batch_of_two(batch_first, batch):
    """A batch's images and a sequence-first batch's too: each (image, head) pair is one
    CONV of computed weights, the batch's heads of one batched matmul (fp32)."""
    torch.manual_seed(0)
    model = WeightsToo().eval()
    model.attention.batch_first = batch_first
    x = torch.randn(batch, T, C) if batch_first else torch.randn(T, batch, C)
    mod, params = from_pytorch(model, (x,))
    report = ac.partition_report(mod, params)
    _whole(report)
    # one attention core for y and one layer for w, whatever the batch and layout
    primitives = [p for ps in report.functions.values() for p in ps]
    assert primitives.count("accel.attention") == 1, report
    assert primitives.count("accel.attention_weights") == 1, report
    for ours, theirs, what in zip(_run(mod, x.numpy(), params=params), _outputs(model, x),
                                  ("y", "w")):
        assert_close(ours, theirs, 1e-4, what)


class WeightsOf(torch.nn.Module):
    """need_weights=True with a mask or every head's probabilities
    (``average_attn_weights=False``)."""

    def __init__(self, kind: str, batch_first: bool):
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(C, HEADS, batch_first=batch_first)
        self.kind = kind
        self.register_buffer("causal", torch.triu(torch.full((T, T), float("-inf")), 1))

    def forward(self, x, mask=None):
        if self.kind == "causal":
            return self.attention(x, x, x, attn_mask=self.causal)
        if self.kind == "padding":
            return self.attention(x, x, x, key_padding_mask=mask)
        return self.attention(x, x, x, average_attn_weights=False)


@pytest.mark.parametrize("kind,batch_first,batch", [
    ("causal", True, 1), ("padding", True, 2), ("padding", False, 2), ("heads", True, 1),
    ("heads", True, 2), ("heads", False, 2)])
def test_need_weights_with_a_mask_or_every_heads_probabilities(kind, batch_first, batch):
    """A causal mask's constant bias, a boolean key_padding_mask's computed one (its cast to
    float the one host operator, as with need_weights=False) and every head's probabilities
    (one head a group: the probabilities pass writes the output, no mean): the core and one
    accel.attention_weights layer, in one function, fp32 within 1e-4 of each output's
    scale."""
    torch.manual_seed(0)
    model = WeightsOf(kind, batch_first).eval()
    x = torch.randn(batch, T, C) if batch_first else torch.randn(T, batch, C)
    inputs = (x,)
    if kind == "padding":
        mask = torch.zeros(batch, T, dtype=torch.bool)
        mask[-1, -5:] = True
        inputs = (x, mask)
    mod, params = from_pytorch(model, inputs)
    report = ac.partition_report(mod, params)
    assert len(report.functions) == 1 and \
        [op.op for op in report.host] == (["relax.astype"] if kind == "padding" else []), \
        str(report)
    primitives = [p for ps in report.functions.values() for p in ps]
    assert primitives.count("accel.attention") == 1, report
    assert primitives.count("accel.attention_weights") == 1, report
    vm = ac.virtual_machine(ac.build(mod, params=params))
    out = vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(t.numpy())) for t in inputs])
    with torch.no_grad():
        expected = model(*inputs)
    for i, what in enumerate(("y", "w")):
        assert_close(out[i].numpy(), expected[i].numpy(), 1e-4, what)


def test_need_weights_costs_the_core_and_the_probabilities_alone():
    """need_weights=True is need_weights=False's module plus one layer of the scores', the
    softmax's, one normalising SDP's and the heads' mean CONV's runs: no values, no
    per-head copies of P, no layout copies (before: 260,625 cycles fp32 against the core's
    43,727, 57 reshapes and 19 slices of the heads' operands)."""
    model, x = _weights_too()

    class Output(torch.nn.Module):
        def __init__(self, attention):
            super().__init__()
            self.attention = attention

        def forward(self, x):
            return self.attention(x, x, x, need_weights=False)[0]

    def primitive(layer):
        return layer.primitive.split(":", 1)[0]

    both, params = from_pytorch(model, (x,))
    alone, alone_params = from_pytorch(Output(model.attention).eval(), (x,))
    for precision in ("fp32", "fp16"):
        ours = ac.estimate(both, params, config="nv_full", precision=precision)
        core = ac.estimate(alone, alone_params, config="nv_full", precision=precision)
        extra = [layer for layer in ours.layers
                 if primitive(layer) == "accel.attention_weights"]
        assert {primitive(layer) for layer in ours.layers} == \
            {primitive(layer) for layer in core.layers} | {"accel.attention_weights"}
        assert ours.total_cycles == core.total_cycles + sum(layer.cycles for layer in extra)
        roles = [layer.primitive.split(":", 1)[1] for layer in extra]
        assert not any("values" in role or "merge" in role for role in roles), roles
        assert roles[-1] == "attention.probabilities.mean", roles


def _ort_int8(model, x, calibration, tmp_path):
    """ONNX Runtime's static int8 of the export, calibrated on ``calibration``: both outputs."""
    quantized, _ = ort_baseline.quantize_int8_as_ort_can(
        export_onnx(model, (x,), tmp_path / "ort.onnx"), calibration, tmp_path)
    session = ort_baseline.session(quantized, threads=1)
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})


def _calibration(x):
    rng = np.random.default_rng(3)
    return [rng.standard_normal(x.shape).astype(np.float32) for _ in range(4)]


def test_need_weights_onnx_export_is_one_function_in_every_precision(tmp_path):
    """The export (its Gathers of the packed projection, MatMuls, ReduceMean) whole in fp32,
    fp16 and int8; int8 against ONNX Runtime's static int8 of the same file and calibration."""
    model, x = _weights_too()
    mod, params = from_onnx(export_onnx(model, (x,), tmp_path / "mha.onnx"))
    expected = _outputs(model, x)
    _whole(ac.partition_report(mod, params))
    for ours, theirs, what in zip(_run(mod, x.numpy(), params=params), expected, ("y", "w")):
        assert_close(ours, theirs, 1e-4, what)
    _whole(ac.partition_report(mod, params, precision="fp16"))
    half = _outputs(copy.deepcopy(model).half(), x.half())
    for ours, theirs, halved, what, margin in zip(
            _run(mod, x.numpy(), params=params, precision="fp16"), expected, half, ("y", "w"),
            (1.0, 1.0)):  # the margins: test_need_weights_is_one_function_fp32_and_fp16
        assert sqnr(ours, theirs) >= sqnr(halved, theirs) - margin, what
    calibration = _calibration(x)
    partitioned = ac.partition_for_accel(mod, params, precision="int8", calibration=calibration)
    _whole(ac.partition_report(partitioned))
    figures = {what: (sqnr(o, e), sqnr(t, e)) for what, o, t, e in zip(
        ("y", "w"), _run(partitioned, x.numpy()), _ort_int8(model, x, calibration, tmp_path),
        expected)}
    print("ONNX export, int8 (ours, ONNX Runtime) dB:", figures)
    assert all(ours >= theirs - 0.5 for ours, theirs in figures.values()), figures


def test_need_weights_in_int8_against_onnx_runtime(tmp_path):
    """The computed-weights layers and the softmax in fp16 inside the int8 function
    (engines.fp16_in_int8), the projections and the head average in int8; against ONNX
    Runtime's static int8 of the export calibrated on the same inputs: both outputs at
    least its figures (34.5 / 43.0 dB against 31.9 / 38.4)."""
    model, x = _weights_too()
    calibration = _calibration(x)
    mod, params = from_pytorch(model, (x,))
    partitioned = ac.partition_for_accel(mod, params, precision="int8", calibration=calibration)
    _whole(ac.partition_report(partitioned))
    ours = _run(partitioned, x.numpy())
    theirs = _ort_int8(model, x, calibration, tmp_path)
    expected = _outputs(model, x)
    figures = {what: (sqnr(o, e), sqnr(t, e))
               for what, o, t, e in zip(("y", "w"), ours, theirs, expected)}
    print("int8 (ours, ONNX Runtime) dB:", figures)
    assert all(ours >= theirs - 0.5 for ours, theirs in figures.values()), figures


@pytest.mark.parametrize("transposed_keys", [True, False])
@pytest.mark.parametrize("batch", [1, 2])
def test_a_batched_product_of_two_computed_tensors(batch, transposed_keys):
    torch.manual_seed(1)
    channels = 32
    model = Products(channels, transposed_keys).eval()
    x = torch.randn(batch, T, channels)
    mod, params = from_pytorch(model, (x,))
    for precision in ("fp32", "fp16"):
        report = ac.partition_report(mod, params, precision=precision)
        _whole(report)
        dense = [op for op in report.ops if op.op == "relax.matmul" and
                 op.primitive == "accel.dense"]
        assert len(dense) == batch, report  # one CONV of computed weights per image
    expected = _outputs(model, x)[0]
    assert_close(_run(mod, x.numpy(), params=params)[0], expected, 1e-5)
    half = _outputs(copy.deepcopy(model).half(), x.half())[0]
    ours = _run(mod, x.numpy(), params=params, precision="fp16")[0]
    assert sqnr(ours, expected) >= sqnr(half, expected) - 1.0
    # int8: the products in fp16 between converting runs (engines.fp16_in_int8), the
    # projections' int8 error as a 2-layer int8 network's (34.9 to 36.9 dB at batch 2)
    partitioned = ac.partition_for_accel(mod, params, precision="int8",
                                         calibration=_calibration(x))
    _whole(ac.partition_report(partitioned))
    assert sqnr(_run(partitioned, x.numpy())[0], expected) >= 30


def _relax_products(m: int, k: int, n: int, batch: int, weights=None):
    """matmul(a [batch, m, k], b [batch, k, n]) of two function inputs, or (``weights`` [n,
    k], a constant) each image's dense layer of those constant weights, written in Relax."""
    from tvm import relax

    bb = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType((batch, m, k), "float32"))
    b = relax.Var("b", relax.TensorType((batch, k, n), "float32"))
    with bb.function("main", [a] if weights is not None else [a, b]):
        with bb.dataflow():
            if weights is None:
                out = bb.emit_output(relax.op.matmul(a, b))
            else:
                rows = [bb.emit(relax.op.matmul(
                    bb.emit(relax.op.reshape(bb.emit(relax.op.strided_slice(
                        a, [0], [i], [i + 1])), [m, k])),
                    relax.op.permute_dims(relax.const(weights), [1, 0]))) for i in range(batch)]
                out = bb.emit_output(relax.op.concat(rows, 0))
        bb.emit_func_output(out)
    return bb.get()


def test_the_transpose_is_one_bdma_run_per_image_and_the_weights_fetch_is_charged():
    """B [K, N] as it lies is not the CONV's N kernels of K: each image's B is transposed
    once (a BDMA run), and the CONV reads the transposed copy as dense weights, charged as
    constant weights of that shape are (attention's CONVs alike)."""
    m, k, n, batch = 32, 16, 24, 2
    mod = _relax_products(m, k, n, batch)
    report = ac.partition_report(mod)
    _whole(report)
    assert [op.primitive for op in report.ops if op.op == "relax.permute_dims" and
            list(op.shape) == [1, n, k]].count("accel.transpose") == batch, report
    computed = [layer for layer in ac.estimate(mod, precision="fp32").layers
                if layer.primitive == "accel.dense"]
    weights = np.random.default_rng(3).standard_normal((n, k)).astype(np.float32) + 1.0
    constant = [layer for layer in ac.estimate(_relax_products(m, k, n, batch, weights),
                                               precision="fp32").layers
                if layer.primitive == "accel.dense"]
    assert len(computed) == len(constant) == batch, (computed, constant)
    for ours, theirs in zip(computed, constant):
        assert ours.macs == theirs.macs == m * k * n
        assert ours.bytes_read == theirs.bytes_read, (ours, theirs)
    rng = np.random.default_rng(4)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((batch, m, k), (batch, k, n)))
    vm = ac.virtual_machine(ac.build(mod))
    ours = vm["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b)).numpy()
    assert_close(ours, (a.astype(np.float64) @ b).astype(np.float32), 1e-5)


def test_batch_axes_that_broadcast_stay_on_the_host_with_the_reason():
    from tvm import relax

    bb = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType((2, T, 8), "float32"))
    b = relax.Var("b", relax.TensorType((1, 8, T), "float32"))
    with bb.function("main", [a, b]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.matmul(relax.op.nn.relu(a), relax.op.nn.relu(b)))
        bb.emit_func_output(out)
    host = {op.op: op.reason for op in ac.partition_report(bb.get()).host}
    assert "relax.matmul" in host and "broadcast" in host["relax.matmul"], host
