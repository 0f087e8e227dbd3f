"""compiler/recurrent.py (issue 33: captcha-whisperer's CRNN): a bidirectional LSTM unrolled by
torch's ONNX exporter over the columns of a conv map, as that CRNN is, against PyTorch.

The time-major steps ``take(reshape(permute(x, [3, 0, 1, 2])), t, axis 0)`` become columns of
the map, each direction's input Gemms one 1x1 convolution over the map's columns, and the
stacks of the outputs (a concat along axis 0, the backward one reversed) concats along the
last axis: the network runs whole, in one function."""
import numpy as np
import torch
import tvm

import accel_codegen as ac
from accel_codegen.compiler.frontend import export_onnx, from_onnx
from accel_codegen.compiler.partition import rewritten
from conftest import assert_close, build_and_run, sqnr, torch_forward


class _Direction(torch.nn.Module):
    """One LSTM direction stepped in Python (captcha-whisperer's ``_LSTM``): the exporter
    unrolls it into a Gather, two Gemms, a Split and the gates' ops per step."""

    def __init__(self, features: int, hidden: int):
        super().__init__()
        self.cell = torch.nn.LSTMCell(features, hidden)

    def forward(self, seq):
        state = (torch.zeros(seq.shape[1], self.cell.hidden_size),) * 2
        out = []
        for t in range(seq.shape[0]):
            state = self.cell(seq[t], state)
            out.append(state[0])
        return torch.stack(out, 0)


class TinyCrnn(torch.nn.Module):
    """A conv map [N, C, H, W] read as W steps of C H features, an LSTM each way, the two
    joined per step and projected to classes: [W, N, classes] (CTC's layout)."""

    def __init__(self, channels=6, height=2, hidden=8, classes=5, affine=False):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, channels, 3, padding=1, stride=2, bias=not affine)
        # captcha-whisperer's batch norm, folded to x * scale + shift after the conv
        self.affine = affine
        self.register_buffer("scale", torch.linspace(0.5, 1.5, channels).reshape(
            1, channels, 1, 1))
        self.register_buffer("shift", torch.linspace(-0.2, 0.3, channels).reshape(
            1, channels, 1, 1))
        self.forward_lstm = _Direction(channels * height, hidden)
        self.backward_lstm = _Direction(channels * height, hidden)
        self.fc = torch.nn.Linear(2 * hidden, classes)

    def forward(self, x):
        feature = self.conv(x)
        feature = torch.relu(feature * self.scale + self.shift if self.affine else feature)
        n, c, h, w = feature.shape
        seq = feature.permute(3, 0, 1, 2).reshape(w, n, c * h)
        ahead = self.forward_lstm(seq)
        behind = torch.flip(self.backward_lstm(torch.flip(seq, [0])), [0])
        return torch.cat([ahead, behind], 2) @ self.fc.weight.t() + self.fc.bias


def _model(tmp_path, name="crnn.onnx", **options):
    torch.manual_seed(0)
    model = TinyCrnn(**options).eval()
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 8)).astype(np.float32)
    return model, x, from_onnx(export_onnx(model, (torch.from_numpy(x),), tmp_path / name))


def _ops(mod) -> list:
    ops = []
    tvm.relax.analysis.post_order_visit(mod["main"], lambda e: ops.append(e.op.name) if hasattr(
        getattr(e, "op", None), "name") else None)
    return ops


def test_the_steps_are_columns_and_the_input_gemms_one_conv(tmp_path):
    model, x, (mod, params) = _model(tmp_path)
    ops = _ops(rewritten(mod, params))
    # no gather of a step; each direction's 4 input Gemms are one convolution (+ the trunk's)
    assert "relax.take" not in ops
    assert ops.count("relax.nn.conv2d") == 3
    assert ops.count("relax.matmul") == 2 * 3 + 1  # the state Gemms (not the zero first) + fc

    partitioned = ac.partition_for_accel(mod, params)
    report = ac.partition_report(partitioned)
    assert report.host == [] and len(report.functions) == 1, str(report)
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), 1e-4)


def test_the_steps_weight_transposes_stay_their_own(tmp_path):
    """The trunk's folded batch norm (conv * scale + shift) folds into the conv through TVM's
    rewrite_call, which merges equal expressions of the whole function: the state Gemms'
    transposes of their one W_hh became one, read by every step, and no dense layer could
    take it (\"an intermediate result is also used outside the chain\", 78 operators of the
    CRNN on the host); each reads the transposed constant itself again."""
    model, x, (mod, params) = _model(tmp_path, affine=True)
    partitioned = ac.partition_for_accel(mod, params)
    report = ac.partition_report(partitioned)
    assert report.host == [] and len(report.functions) == 1, str(report)
    assert_close(build_and_run(partitioned, x), torch_forward(model, x), 1e-4)


def test_the_gates_sum_is_an_elementwise_add_in_fp16(tmp_path):
    """Each step's gates are the state Gemm plus the input's (a computed [1, 4 hidden]
    tensor): as one value per channel of a [1, C] tensor it passed for a bias, which fp16
    and int8 code take only as constants (\\"the bias is not a constant\\", 2 operators a
    step); it is the element-wise adder's operand read from memory, as a residual add's."""
    model, x, (mod, params) = _model(tmp_path, affine=True)
    partitioned = ac.partition_for_accel(mod, params, precision="fp16")
    report = ac.partition_report(partitioned)
    assert report.host == [] and len(report.functions) == 1, str(report)
    assert sqnr(build_and_run(partitioned, x), torch_forward(model, x)) >= 40
