"""Attention's Q K^T for one head (issue 29, item 3): a matmul whose second operand is
computed is a CONV run that reads its weights from memory where the other run wrote them
(NVDLA's CONV fetches its weights, so this is what the hardware does), from Relax and from
PyTorch, fp32 and fp16, correct against PyTorch on every call; a lone P V's V transposed
onto the CONV's kernels first."""
import copy

import numpy as np
import pytest
import torch
from tvm import relax

import accel_codegen as ac
from accel_codegen.compiler.frontend import from_pytorch
from conftest import assert_close, run_main, sqnr, torch_forward

T, C, D = 12, 32, 16  # tokens, model channels, head size


class Scores(torch.nn.Module):
    """scores = Q K^T / sqrt(d) of one head, Q and K from the same tokens."""

    def __init__(self, c=C, d=D):
        super().__init__()
        self.q = torch.nn.Linear(c, d)
        self.k = torch.nn.Linear(c, d)
        self.d = d

    def forward(self, x):
        return self.q(x) @ self.k(x).transpose(-2, -1)


class ScoresValues(Scores):
    """softmax(Q K^T) V: the second matmul needs V transposed into the CONV's [K, C] weights."""

    def __init__(self, c=C, d=D):
        super().__init__(c, d)
        self.v = torch.nn.Linear(c, d)

    def forward(self, x):
        return torch.softmax(super().forward(x), -1) @ self.v(x)


def _relax_scores(t=T, d=D):
    """matmul(q, permute_dims(k)) of two function inputs, written in Relax."""
    bb = relax.BlockBuilder()
    q = relax.Var("q", relax.TensorType((t, d), "float32"))
    k = relax.Var("k", relax.TensorType((t, d), "float32"))
    with bb.function("main", [q, k]):
        with bb.dataflow():
            kt = bb.emit(relax.op.permute_dims(k, [1, 0]))
            out = bb.emit_output(relax.op.matmul(q, kt))
        bb.emit_func_output(out)
    return bb.get()


@pytest.fixture(scope="module")
def scores():
    torch.manual_seed(0)
    model = Scores().eval()
    return model, from_pytorch(model, (torch.randn(T, C),))


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_pytorch_scores_run_as_one_function_on_every_call(scores, precision):
    model, (mod, params) = scores
    report = ac.partition_report(mod, params, precision=precision)
    assert report.host == [] and len(report.functions) == 1, report
    vm = ac.virtual_machine(ac.build(mod, params=params, precision=precision))
    rng = np.random.default_rng(1)
    for _ in range(2):  # K changes per call: weights read where the run wrote them, not packed once
        x = rng.standard_normal((T, C)).astype(np.float32)
        expected = torch_forward(model, x)
        ours = run_main(vm, x)
        if precision == "fp32":
            assert_close(ours, expected, 1e-5)
        else:
            half = torch_forward(copy.deepcopy(model).half(),
                                 torch.from_numpy(x).half()).astype(np.float32)
            assert sqnr(ours, expected) >= sqnr(half, expected) - 1.0


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_relax_scores_of_two_inputs(precision):
    rng = np.random.default_rng(2)
    q, k = (rng.standard_normal((T, D)).astype(np.float32) for _ in range(2))
    mod = _relax_scores()
    report = ac.partition_report(mod, precision=precision)
    assert [op.primitive for op in report.offloaded] == ["accel.dense"] * 2, report
    ours = run_main(ac.virtual_machine(ac.build(mod, precision=precision)), q, k)
    expected = q.astype(np.float64) @ k.T.astype(np.float64)
    assert_close(ours, expected.astype(np.float32), 1e-5 if precision == "fp32" else 2e-3)


def test_estimate_charges_the_computed_weights_fetch():
    t, d = 64, 32
    layer, = ac.estimate(_relax_scores(t, d), precision="fp32").layers
    # the same matmul with K a constant: a computed K is fetched as those dense weights are
    k = np.random.default_rng(3).standard_normal((t, d)).astype(np.float32) + 1.0
    bb = relax.BlockBuilder()
    q = relax.Var("q", relax.TensorType((t, d), "float32"))
    with bb.function("main", [q]):
        with bb.dataflow():
            kt = bb.emit(relax.op.permute_dims(relax.const(k), [1, 0]))
            out = bb.emit_output(relax.op.matmul(q, kt))
        bb.emit_func_output(out)
    constant, = ac.estimate(bb.get(), precision="fp32").layers
    assert layer.macs == t * t * d
    assert layer.bytes_read == constant.bytes_read, (layer, constant)
    # q and K are the same size: half of what the run reads is its weights
    assert layer.bytes_read == 2 * layer.bytes_written * d // t, layer


def test_a_lone_values_product_transposes_v_onto_the_kernels():
    """P V with V [T, d] as computed: the CONV reads [d, T] kernels, so V is transposed first,
    one BDMA run (rewrites.computed_matmuls; before 2026-12-03 on the host: "dense weight is
    a runtime [C, K] input")."""
    torch.manual_seed(0)
    model = ScoresValues().eval()
    x = torch.randn(T, C)
    mod, params = from_pytorch(model, (x,))
    report = ac.partition_report(mod, params)
    assert report.host == [] and len(report.functions) == 1, str(report)
    assert "accel.transpose" in [op.primitive for op in report.ops], report
    assert_close(run_main(ac.virtual_machine(ac.build(mod, params=params)), x.numpy()),
                 torch_forward(model, x), 1e-5)


def test_in_int8_the_computed_weights_run_in_fp16():
    """int8 weights are quantised per kernel at compile time and a computed K has no such
    scales: int8 code runs the scores in fp16 between converting runs (engines.fp16_in_int8;
    before 2026-12-03, on the host: "int8 code needs constant weights")."""
    torch.manual_seed(0)
    model = Scores().eval()
    x = torch.randn(T, C)
    mod, params = from_pytorch(model, (x,))
    partitioned = ac.partition_for_accel(mod, params, precision="int8",
                                         calibration=[(x.numpy(),)])
    report = ac.partition_report(partitioned)
    assert report.host == [] and len(report.functions) == 1, str(report)
    assert [op.precision for op in report.ops if op.op == "relax.matmul"][-1] == "fp16", report
    # the projections' int8 error, not the scores': as a 3-layer int8 network gives
    assert sqnr(run_main(ac.virtual_machine(ac.build(partitioned)), x.numpy()),
                torch_forward(model, x)) >= 30
