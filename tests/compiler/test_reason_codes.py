"""Stable reason codes beside the partition report's host reasons (issue 30): each sentence the
zoo's models give on the presets has its code, the codes are documented once, and the report's
JSON and text carry them."""
import json
from pathlib import Path

import pytest

from accel_codegen.compiler.reasons import OTHER, codes, reason_code

# Reasons the zoo's models give on nv_full and nv_small in fp32, fp16 and int8.
SENTENCES = {
    "no accelerator primitive for relax.permute_dims": "no-primitive",
    "a run-time shape check (match_cast) runs on the host": "runtime-shape",
    "input: precision fp16 is not supported by configuration nv_small": "config-lacks-precision",
    "op 0 (BDMA): configuration nv_small has no BDMA engine": "config-lacks-engine",
    "int8 calibration runs it in fp32: op 0 (BDMA): configuration nv_small has no BDMA engine":
        "config-lacks-engine",
    "op 0 (SDP): element-wise ops need the SDP element-wise unit, which nv_small lacks":
        "config-lacks-engine",
    "op 0 (SDP): act = silu needs the SDP lookup table, which nv_small lacks":
        "config-lacks-engine",
    "the bias is not a constant (a runtime input, or computed by another operator); fp16 code "
    "needs constant weights and parameters (bind inputs as params)": "not-constant",
    "op 0 (CDP): precision int8: the simulator's CDP has no INT8 local response normalisation "
    "yet (fp32 and fp16 are)": "precision",
    "a layer norm in int8 is not generated: its variance and 1/sqrt have a dynamic range no "
    "per-tensor int8 scale covers": "precision",
    "a layer_norm in an int8 build runs in fp16 (its variance and 1/sqrt have a dynamic "
    "range no per-tensor int8 scale covers): precision fp16 is not supported by configuration "
    "nv_small (its precisions: int8)": "config-lacks-precision",
    "the input is 3-D [1, 64, 32]; the engines take NCHW or [N, C]": "layout",
    "batched matmul (3-D input): the CONV engine runs dense layers, [N, C] x [C, K]": "layout",
    "the reshape before the dense layer is not a flatten": "layout",
    "the SDP runs scale/shift, then the element-wise op, then the activation; this chain has "
    "another order": "chain-order",
    "supported alone, but left on the host by the partitioner (its operand is produced by a "
    "neighbour that could not be fused with it)": "left-by-partitioner",
    "relax.nn.max_pool2d with dilation [2, 2]": "unsupported-attribute",
    "conv2d data_layout is NHWC; the CONV engine takes NCHW": "layout",
    "adaptive_avg_pool2d from 7x7 to 3x3: the windows differ in size": "unsupported-attribute",
}


@pytest.mark.parametrize("sentence", list(SENTENCES))
def test_each_reason_has_its_code(sentence):
    assert reason_code(sentence) == SENTENCES[sentence]


def test_codes_are_documented_once_and_an_unknown_reason_is_other():
    assert reason_code("a reason of a kind nobody wrote yet") == OTHER
    assert reason_code(None) is None
    assert len(set(codes())) == len(codes())
    doc = (Path(__file__).parents[2] / "docs" / "report-schema.md").read_text()
    for code in codes():
        assert f"| `{code}` |" in doc, code


def test_report_json_and_text_carry_the_codes():
    import tvm
    from tvm import relax

    import accel_codegen as ac

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 8, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.sin(x))
            out = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(out)
    report = ac.partition_report(bb.get())
    host = [op for op in report.ops if not op.offloaded]
    assert [(op.op, op.code) for op in host] == [("relax.sin", "no-primitive")]
    data = json.loads(json.dumps(report.to_dict()))
    assert [op["code"] for op in data["ops"]] == [op.code for op in report.ops]
    assert "[no-primitive] no accelerator primitive for relax.sin" in str(report)
    from accel_codegen.tools.report import format_op_type_summary, op_type_summary

    summary = op_type_summary(report)
    assert summary[0]["reasons"] == [{"reason": host[0].reason, "code": "no-primitive",
                                      "count": 1}]
    assert "[no-primitive]" in format_op_type_summary(summary)
