"""The reports in the forms the field uses (issue 30): the per-layer CSV of an estimate, a
profiled run and a bench; the schema tag of every JSON report; the partition's summary per
operator type; the counterfactual cost of the host operators (--host-cost); the layer-by-layer
debugger; the bench's ratio column said to be a ratio of times measured side by side."""
import csv
import io
import json
import textwrap

import numpy as np
import pytest

from accel_codegen.tools.report import CSV_COLUMNS, csv_text, op_type_summary, schema, tagged
from conftest import run_cli

TINY = textwrap.dedent("""
    import torch


    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

        def forward(self, x):
            y = torch.relu(self.conv(x))
            y = torch.softmax(y, dim=2)
            return torch.sin(y) + y


    def model():
        torch.manual_seed(0)
        return Tiny().eval(), (torch.randn(1, 3, 8, 8),)
    """)


def _rows(text):
    return list(csv.DictReader(io.StringIO(text)))


def test_schema_tag():
    assert schema("estimate") == "accel-codegen/estimate/1"
    assert list(tagged("bench", {"a": 1, "schema": "old"})) == ["schema", "a"]
    with pytest.raises(ValueError, match="unknown report kind 'sweeps'"):
        schema("sweeps")


def test_estimate_csv_rows_add_up_to_the_report(zoo, tmp_path):
    from accel_codegen.tools.estimation import estimate

    mod, params, _ = zoo("lenet5").imported
    report = estimate(mod, params, config="nv_small", precision="int8")
    rows = _rows(report.to_csv(tmp_path / "e.csv").read_text())
    assert list(rows[0]) == list(CSV_COLUMNS)
    assert [r["layer"] for r in rows] == [layer.label for layer in report.layers]
    assert sum(int(r["cycles"]) for r in rows) == report.total_cycles
    assert sum(float(r["network_share"]) for r in rows) == pytest.approx(1.0)
    assert sum(float(r["energy_pj"]) for r in rows) == pytest.approx(report.total_energy_pj)
    assert {r["precision"] for r in rows} == {"int8"}
    # the first layer computes the model's first conv, its bias, ReLU and pool
    assert rows[0]["source_ops"].split() == ["relax.nn.conv2d", "relax.reshape", "relax.add",
                                             "relax.nn.relu", "relax.nn.max_pool2d"]
    peak = report.config.macs_per_cycle("int8")
    assert float(rows[1]["utilization"]) == pytest.approx(
        report.layers[1].macs / (report.layers[1].cycles * peak))
    data = report.to_dict()
    assert data["schema"] == "accel-codegen/estimate/1"
    assert data["layers"][0]["source_ops"] == rows[0]["source_ops"]
    assert data["layers"][0]["macs"] == report.layers[0].macs  # its own fields are kept


def test_csv_leaves_mac_figures_of_runs_without_a_conv_empty():
    from accel_codegen.tools.report import layer_rows

    class Op:
        def __init__(self, engine):
            self.engine, self.op, self.precision = engine, "", "fp16"

    class Run:
        label, mode, macs, cycles, utilization = "f0.1c0 accel.concat", "independent", 0, 50, 0.0
        bytes_read = bytes_written = 100
        energy_pj = 1.0
        ops = (Op("BDMA"),)

    (row,) = _rows(csv_text(layer_rows([Run()], peak_macs_per_cycle=64)))
    assert row["macs"] == "" and row["utilization"] == "" and row["engines"] == "BDMA"
    assert row["precision"] == "fp16" and row["cycles"] == "50"


def test_op_type_summary_groups_the_reasons():
    ops = [{"op": "relax.add", "offloaded": True, "reason": None},
           {"op": "relax.nn.softmax", "offloaded": False, "reason": "no primitive"},
           {"op": "relax.add", "offloaded": False, "reason": "a broadcast"},
           {"op": "relax.add", "offloaded": False, "reason": "a broadcast"},
           {"op": "relax.add", "offloaded": False, "reason": "int64"}]
    summary = op_type_summary({"ops": ops})
    assert summary == [
        {"op": "relax.add", "offloaded": 1, "host": 3,
         "reasons": [{"reason": "a broadcast", "code": "other", "count": 2},
                     {"reason": "int64", "code": "other", "count": 1}]},
        {"op": "relax.nn.softmax", "offloaded": 0, "host": 1,
         "reasons": [{"reason": "no primitive", "code": "other", "count": 1}]}]


def test_counterfactual_rooflines():
    from accel_codegen.sim.config import AccelConfig
    from accel_codegen.tools.host_cost import counterfactual

    config = AccelConfig.resolve("nv_full")  # 20 bytes a cycle of DRAM at 1 GHz
    sin = counterfactual("relax.sin", [[1, 8, 8, 8]], [1, 8, 8, 8], config, "fp32")
    # 512 elements in and out at 2 bytes: 2,048 bytes, 103 DRAM cycles; 512 / 16 = 32 SDP cycles
    assert (sin["engine"], sin["dram_bytes"], sin["dram_cycles"], sin["compute_cycles"],
            sin["cycles"]) == ("SDP", 2048, 103, 32, 103)
    assert sin["energy_pj"] == pytest.approx(2048 * 162.5 + 512 * 4.6)
    mm = counterfactual("relax.matmul", [[4, 64, 256], [256, 128]], [4, 64, 128], config, "int8")
    assert mm["macs"] == 4 * 64 * 128 * 256 and mm["engine"] == "CONV"
    assert mm["compute_cycles"] == 4 * 64 * 128 * 256 // config.macs_per_cycle("int8")
    assert counterfactual("relax.reshape", [[1, 8]], [8], config, "fp32")["cycles"] == 0
    assert counterfactual("relax.permute_dims", [[2, 3]], [3, 2], config, "fp32")["engine"] == \
        "BDMA"
    assert counterfactual("relax.nn.softmax", [[10]], [10], config, "fp32")["elements"] == 30


def test_partition_prints_op_types_and_ranks_host_costs(capsys, tmp_path):
    (tmp_path / "tiny.py").write_text(TINY)
    spec = f"{tmp_path / 'tiny.py'}:model"
    out_json, out_csv = tmp_path / "p.json", tmp_path / "h.csv"
    status, out, err = run_cli(capsys, "partition", spec, "--host-cost", "--json", out_json,
                               "--csv", out_csv)
    assert status == 0, err
    assert "delegation by operator type:" in out
    summary_line = next(line for line in out.splitlines() if line.startswith("relax.nn.softmax"))
    assert summary_line.split()[1:3] == ["0", "1"]
    data = json.loads(out_json.read_text())
    assert data["schema"] == "accel-codegen/partition/1"
    assert {e["op"] for e in data["op_types"]} >= {"relax.nn.conv2d", "relax.sin"}
    costs = data["host_costs"]
    assert sorted(c["op"] for c in costs) == ["relax.nn.softmax", "relax.sin"]
    assert all(c["host_ms"] > 0 for c in costs)  # measured, each compiled alone
    assert [c["saved_ms"] for c in costs] == sorted((c["saved_ms"] for c in costs), reverse=True)
    for c in costs:  # what a primitive saves: the host time less the accelerator's (1 GHz)
        assert c["saved_ms"] == pytest.approx(c["host_ms"] - c["cycles"] * 1e-6)
    sin = next(c for c in costs if c["op"] == "relax.sin")
    assert (sin["cycles"], sin["dram_bytes"], sin["kind"]) == (103, 2048, "unary")
    rows = _rows(out_csv.read_text())
    assert [r["op"] for r in rows] == [c["op"] for c in costs]


def test_debug_flags_the_first_layer_below_the_threshold(zoo):
    from accel_codegen.tools.debug import debug_report
    from accel_codegen.tools.model_spec import random_inputs

    mod, params, x = zoo("lenet5").imported
    report = debug_report(mod, params, random_inputs([x], 2, 1), config="nv_full",
                          calibration=random_inputs([x], 4, 0), threshold_db=100.0)
    assert [r.key for r in report.layers] == [f"f0.{i}" for i in range(5)]
    assert all(10 < r.sqnr_db < 100 and r.max_abs_error > 0 for r in report.layers)
    assert report.layers[-1].sqnr_db == pytest.approx(report.output_sqnr_db)
    assert [r.first_below for r in report.layers] == [True, False, False, False, False]
    # nv_full runs fp16 at half int8's MAC rate, with converting runs around the layer
    assert all(r.fp16_cycles > r.cycles > 0 for r in report.layers)
    text = str(report)
    assert "! first layer below the threshold: f0.0 accel.conv2d_bias_relu_maxpool " \
        "[features.{0,1,2}]" in text  # the source name, which --keep-float takes
    assert [r.source for r in report.layers][:2] == ["features.{0,1,2}", "features.{3,4,5}"]
    data = report.to_dict()
    assert data["schema"] == "accel-codegen/debug/1" and data["first_below"] == "f0.0"


def _softmax_head():
    import torch

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8 * 4 * 4, 10)

        def forward(self, x):
            return torch.softmax(self.fc(torch.relu(self.conv(x)).flatten(1)), dim=1)

    torch.manual_seed(0)
    return Head().eval(), torch.randn(1, 3, 4, 4)


def test_debug_shows_a_softmax_where_it_runs():
    """int8 on nv_small (no fp16) leaves the softmax on the host: a row says so, with the
    partition's reason (the table once said nothing of it); on nv_full int8 code runs it in
    fp16 between converting runs, a layer of its own; fp16 runs it in engine passes: its row
    is the layer's output against fp32's (once the last pass its key shared with fp32's,
    another tensor: 21 dB of a 69 dB output), named by its primitive, not a pass. Shapes are
    the source's (the dense layer's 1x10, not its surface 1x10x1x1), as the partition report
    has them."""
    from accel_codegen import frontend
    from accel_codegen.tools.debug import debug_report
    from accel_codegen.tools.model_spec import random_inputs

    model, x = _softmax_head()
    mod, params = frontend.from_pytorch(model, (x,))
    int8 = debug_report(mod, params, random_inputs([x.numpy()], 2, 1), config="nv_small",
                        calibration=random_inputs([x.numpy()], 2, 0))
    assert [(r.key, r.primitive, r.shape) for r in int8.layers] == [
        ("f0.0", "accel.conv2d_bias_relu", [1, 8, 4, 4]),
        ("f0.1", "accel.flatten_dense_bias", [1, 10])]
    assert [(op.op, op.source, op.code, op.after) for op in int8.host] == [
        ("relax.nn.softmax", "softmax", "config-lacks-precision", "f0.1")]
    text = str(int8).splitlines()
    dense = next(i for i, line in enumerate(text) if "accel.flatten_dense_bias" in line)
    assert text[dense + 1].split()[:3] == ["host", "relax.nn.softmax", "1x10"]
    assert "a softmax in an int8 build runs in fp16" in text[dense + 1]
    assert int8.to_dict()["host"][0]["reason"].startswith("a softmax in an int8 build")
    full = debug_report(mod, params, random_inputs([x.numpy()], 2, 1),
                        calibration=random_inputs([x.numpy()], 2, 0))
    assert full.host == []
    assert [(r.key, r.primitive) for r in full.layers][-1] == ("f0.2", "accel.softmax")
    fp16 = debug_report(mod, params, random_inputs([x.numpy()], 2, 1), precision="fp16")
    assert fp16.host == []
    softmax = fp16.layers[-1]
    assert (softmax.primitive, softmax.shape, softmax.source) == ("accel.softmax", [1, 10],
                                                                  "softmax")
    assert softmax.sqnr_db == pytest.approx(fp16.output_sqnr_db)


def test_debug_help_names_the_marks_its_table_prints(capsys):
    """The table marks the first layer below the threshold '!' and later ones '<': the help
    says the same (it once named '!' alone)."""
    from accel_codegen.tools.debug import DebugReport, LayerDebug

    def layer(i, sqnr, below, first):
        return LayerDebug(f"f0.{i}", "accel.conv2d", "relax.nn.conv2d", [1, 8, 4, 4], sqnr,
                          0.1, None, 100, None, below=below, first_below=first)

    report = DebugReport("nv_full", "int8", 30.0, 1, 20.0,
                         [layer(0, 40.0, False, False), layer(1, 25.0, True, True),
                          layer(2, 20.0, True, False)])
    rows = [line for line in str(report).splitlines() if "accel.conv2d" in line
            and not line.startswith("! first layer")]
    assert [row[:1] for row in rows] == [" ", "!", "<"]
    status, out, _ = run_cli(capsys, "debug", "--help")
    help_text = " ".join(out.split())
    assert status == 0
    assert "marked '!' and each later one below it '<'" in help_text
    assert "first layer whose SQNR is below DB '!' and later ones '<'" in help_text


def test_debug_table_and_csv_place_host_operators_alike():
    """The table and the CSV list the same rows in the same order (one definition: each host
    operator after the layer before it, one before the first), a host row giving the
    partition's reason with its code in both."""
    from accel_codegen.tools.debug import CSV_COLUMNS, DebugReport, HostOp, LayerDebug

    layers = [LayerDebug(f"f0.{i}", "accel.conv2d", "relax.nn.conv2d", [1, 8, 4, 4], 40.0, 0.1,
                         None, 100, None) for i in range(2)]
    host = [HostOp(0, "relax.reshape", [1, 3, 4, 4], "view", "layout", "a reshape", ""),
            HostOp(2, "relax.nn.softmax", [1, 8], "softmax", "precision", "int8", "f0.0")]
    report = DebugReport("nv_full", "int8", 30.0, 1, 40.0, layers, host=host)
    order = ["host", "f0.0", "host", "f0.1"]
    assert [getattr(item, "key", "host") for item in report.in_order()] == order
    rows = report.csv_rows()
    assert [row["key"] or row["primitive"] for row in rows] == order
    assert set(rows[0]) <= set(CSV_COLUMNS) and set(rows[1]) <= set(CSV_COLUMNS)
    assert (rows[2]["source"], rows[2]["source_ops"], rows[2]["shape"], rows[2]["host_reason"]) \
        == ("softmax", "relax.nn.softmax", "1x8", "[precision] int8")
    table = [line for line in str(report).splitlines()
             if line.split()[:1] in (["host"], ["f0.0"], ["f0.1"])]
    assert [line.split()[0] for line in table] == ["host", "f0.0", "host", "f0.1"]
    assert table[0].endswith("on the host (TVM, fp32): [layout] a reshape")
    assert table[2].endswith("on the host (TVM, fp32): [precision] int8")


def test_debug_cli_reads_an_npz_and_says_what_it_cannot_tell(capsys, tmp_path, zoo):
    x = zoo("lenet5").x_np
    np.savez(tmp_path / "data.npz", np.concatenate([x, -x]))  # a stack of two inputs
    status, out, err = run_cli(capsys, "debug", "lenet5", "--config", "nv_small", "--inputs",
                               tmp_path / "data.npz", "--calibration", "2", "--threshold", "0",
                               "--csv", tmp_path / "d.csv")
    assert status == 0, err
    assert "2 input(s) from" in err and "every layer is at or above 0 dB" in out
    assert "if fp16: nv_small has no fp16" in out
    rows = _rows((tmp_path / "d.csv").read_text())
    assert len(rows) == 5 and all(r["fp16_cycles"] == "" for r in rows)
    assert all(r["host_reason"] == "" for r in rows)  # lenet5: every operator offloaded
    status, _, err = run_cli(capsys, "debug", "lenet5", "--inputs", tmp_path / "x.txt")
    assert status == 1 and "a count of random inputs or an .npz file" in err


def test_bench_header_says_the_ratio_is_of_times_measured_side_by_side():
    from accel_codegen.tools.bench import format_table

    wall = {"median": 2.0, "min": 1.5, "max": 3.0, "runs": 3}
    result = {"model": "m", "config": {"name": "nv_full", "atomic_c": 64, "atomic_k": 32,
                                       "dram_bytes_per_s": 2e10, "clock_hz": 1e9},
              "threads": 1, "repeat": 3, "host_repeat": 1, "warmup": 1,
              "load_average": {"before": 0.0, "after": 0.0, "cpus": 2},
              "modes": {"pytorch": {"wall_ms": wall}, "host": {"wall_ms": {**wall,
                                                                            "median": 6.0}}}}
    text = format_table(result)
    assert "t/pytorch" in text and "vs pytorch" not in text
    assert "3.00x" in text and "measured in the same interleaved rounds" in text
    assert "charges fp32 tensors as fp16" not in text  # no simulator fp32 mode ran
    result["modes"]["fused"] = {"wall_ms": wall, "cycles": 10, "simulated_ms": 1e-5,
                                "frames_per_s": 1e8, "bytes_read": 2e6, "bytes_written": 1e6,
                                "utilization": 0.5, "energy_pj": 1e6}
    assert "charges fp32 tensors as fp16" in format_table(result)


def test_bench_plot_title_names_only_the_modes_that_ran():
    from accel_codegen.tools.plotting import bench_title

    assert bench_title({"model": "m", "modes": dict.fromkeys(
        ["fused", "decomposed", "host", "pytorch"])}) == \
        "m: fused vs decomposed on the simulated accelerator, TVM's host build and PyTorch eager"
    assert bench_title({"model": "m", "modes": dict.fromkeys(["fused", "ort_int8"])}) == \
        "m: fused on the simulated accelerator and ONNX Runtime int8"
    assert bench_title({"model": "m", "modes": {"pytorch": {}}}) == "m: PyTorch eager"


def test_error_lines_shorten_external_function_symbols():
    from accel_codegen.tools.cli import shorten_symbols

    symbol = ("fused_relax_nn_conv2d_relax_reshape_relax_add_relax_nn_relu_relax_nn_max_pool2d1"
              "_accel")
    line, details = shorten_symbols(f"in {symbol}: bad shape; fused_relax_add1_accel too")
    assert line == ("in fused_relax_nn_conv2d_re...pool2d1_accel: bad shape; "
                    "fused_relax_add1_accel too")  # a short symbol stays whole
    assert details == {"fused_relax_nn_conv2d_re...pool2d1_accel": symbol}


def test_run_csv_is_the_profile_and_agrees_with_the_estimate(capsys, tmp_path, zoo):
    import accel_codegen as ac
    from accel_codegen.tools.estimation import estimate

    mod, params, x = zoo("lenet5").imported
    library = tmp_path / "lenet5.so"
    ac.export_library(ac.build(mod, params, config="nv_full"), str(library))
    np.save(tmp_path / "x.npy", x)
    status, out, err = run_cli(capsys, "run", library, "--input", tmp_path / "x.npy",
                               "--csv", tmp_path / "run.csv")
    assert status == 0, err
    assert "(one row per accelerator run)" in out
    rows = _rows((tmp_path / "run.csv").read_text())
    expected = estimate(mod, params, config="nv_full").layer_rows()
    assert [r["layer"] for r in rows] == [e["layer"] for e in expected]
    assert [int(r["cycles"]) for r in rows] == [e["cycles"] for e in expected]
    assert [float(r["utilization"]) for r in rows] == pytest.approx(
        [e["utilization"] for e in expected])
    assert {r["precision"] for r in rows} == {"fp32"}
    status, _, err = run_cli(capsys, "run", library, "--random", "--csv", tmp_path / "r.txt")
    assert status == 1 and "--csv path" in err and "must end in .csv" in err


def test_bench_csv_has_the_simulator_modes_runs(capsys, tmp_path):
    out_csv, out_json = tmp_path / "b.csv", tmp_path / "b.json"
    status, _, err = run_cli(capsys, "bench", "lenet5", "--modes", "fused", "--repeat", "1",
                             "--csv", out_csv, "--json", out_json)
    assert status == 0, err
    rows = _rows(out_csv.read_text())
    data = json.loads(out_json.read_text())
    assert data["schema"] == "accel-codegen/bench/1"
    assert [r["bench_mode"] for r in rows] == ["fused"] * 5
    assert [r["layer"].split()[0] for r in rows] == [f"f0.{i}" for i in range(5)]
    assert {r["precision"] for r in rows} == {"fp32"}
    assert sum(int(r["cycles"]) for r in rows) == data["modes"]["fused"]["cycles"]
    assert rows[0]["source_ops"].startswith("relax.nn.conv2d ")


def test_host_reasons_read_alike_in_the_partition_report_and_the_debugger():
    """A host operator's reason, its code first, is formatted once (compiler.reasons.
    coded_reason): the partition report's summary and table and the debugger's table and CSV
    print the same text."""
    from accel_codegen.compiler.partition import OpRecord, PartitionReport
    from accel_codegen.compiler.reasons import coded_reason, reason_code
    from accel_codegen.tools.debug import DebugReport, HostOp

    reason = "no accelerator primitive for `relax.take`"
    assert coded_reason(reason) == f"[{reason_code(reason)}] {reason}"
    assert coded_reason(reason, "mine") == f"[mine] {reason}"
    op = OpRecord(0, "relax.take", [1, 4], False, reason=reason)
    text = coded_reason(reason)
    partition = str(PartitionReport("nv_full", True, [op]))
    assert f"1 x {text}" in partition and partition.rstrip().endswith(text)
    host = HostOp(0, op.op, op.shape, "", op.code, reason)
    debug = DebugReport("nv_full", "int8", 30.0, 1, 40.0, [], host=[host])
    assert host.why == text
    assert any(line.endswith(f"on the host (TVM, fp32): {text}")
               for line in str(debug).splitlines())
    assert debug.csv_rows()[0]["host_reason"] == text
