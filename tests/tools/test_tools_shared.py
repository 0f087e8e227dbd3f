"""The pieces the tools share: the MODEL grammar (accepted forms, rejected forms and their
messages), the CFG resolver, the table renderer, the cost totals and the progress callback."""
import io
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from accel_codegen import AccelConfig, AccelInvalidError
from accel_codegen.tools.config_files import resolve_config
from accel_codegen.sim.costs import CostTotals, energy_line, engine_names
from accel_codegen.tools.model_spec import (LoadedModel, ModelSpec, load_model, parse_model_spec,
                                            zoo_names)
from accel_codegen.tools.progress import ProgressBar, progress_callback, steps
from accel_codegen.sim.cost_report import cost_table
from accel_codegen.tables import Column, render_row, render_table


# --- MODEL ------------------------------------------------------------------------------------

@pytest.fixture
def model_files(tmp_path, monkeypatch):
    """A directory with net.py (a function `build`) and net.onnx (any bytes), as the cwd."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "net.py").write_text("def build():\n    return 42\n")
    (tmp_path / "net.onnx").write_bytes(b"not checked by the parser")
    return tmp_path


@pytest.mark.parametrize("text, expected", [
    ("lenet5", ModelSpec("zoo", "lenet5")),
    ("net.onnx", ModelSpec("onnx", "net.onnx", path="net.onnx")),
    ("net.py:build", ModelSpec("python", "net.py:build", path="net.py", function="build")),
])
def test_model_spec_accepts(model_files, text, expected):
    spec = parse_model_spec(text)
    assert spec == expected
    assert spec.name == {"zoo": "lenet5", "onnx": "net", "python": "build"}[spec.kind]


@pytest.mark.parametrize("text, message", [
    ("nosuchnet", "unknown model 'nosuchnet': give a zoo model ("),
    ("missing.onnx", "ONNX file 'missing.onnx' does not exist"),
    ("missing.py:build", "model file 'missing.py' does not exist"),
    ("net.py", "'net.py': name the function too, as file.py:function"),
    ("net.py:1st", "'net.py:1st': the part after ':' must be a function name"),
    ("net.py:", "'net.py:': the part after ':' must be a function name"),
])
def test_model_spec_rejects(model_files, text, message):
    with pytest.raises(AccelInvalidError) as info:
        parse_model_spec(text)
    assert str(info.value).startswith(message)


def test_unknown_model_lists_the_zoo():
    with pytest.raises(AccelInvalidError) as info:
        parse_model_spec("resnet19")
    assert str(info.value) == (f"unknown model 'resnet19': give a zoo model "
                               f"({', '.join(zoo_names())}), an .onnx file, or file.py:function")
    assert zoo_names() == sorted(zoo_names()) and "lenet5" in zoo_names()


def test_load_model_from_a_python_function(model_files):
    (model_files / "good.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn

        def build():
            return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval(), (torch.randn(1, 3, 8, 8),)
        """))
    model = load_model("good.py:build")
    assert isinstance(model, LoadedModel) and model.name == "build"
    assert [a.shape for a in model.inputs] == [(1, 3, 8, 8)] and model.torch_model is not None
    assert load_model(model) is model
    with pytest.raises(AccelInvalidError, match=r"net.py:build must return \(torch_module, "
                                                r"example_inputs_tuple\), got int"):
        load_model("net.py:build")
    with pytest.raises(AccelInvalidError, match="'net.py' has no function 'other'"):
        load_model("net.py:other")


def test_load_model_of_objects_needs_inputs():
    import tvm

    with pytest.raises(AccelInvalidError, match="a Relax module needs its example inputs"):
        load_model(tvm.IRModule())
    with pytest.raises(AccelInvalidError, match="a object needs its example inputs"):
        load_model(object())


def test_bench_keeps_the_loading_names():
    from accel_codegen import bench, model_spec

    assert bench.load_model is model_spec.load_model
    assert bench.LoadedModel is model_spec.LoadedModel


def test_parsing_does_not_import_tvm():
    code = textwrap.dedent("""
        import sys
        from accel_codegen.tools.config_files import resolve_config
        from accel_codegen.tools.model_spec import parse_model_spec
        parse_model_spec("lenet5")
        resolve_config("nv_small")
        print("tvm" in sys.modules)
        """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd="/").stdout  # not the source tree: see test_cli
    assert out.strip() == "False"


# --- CFG --------------------------------------------------------------------------------------

def test_resolve_config_forms(tmp_path):
    small = AccelConfig.preset("nv_small")
    assert resolve_config("nv_small") == small
    assert resolve_config(small) is small
    path = tmp_path / "fast.json"
    path.write_text(json.dumps({"base": "nv_small", "clock_hz": 2e9}))
    assert resolve_config(str(path)) == small.replace(clock_hz=2e9)
    assert resolve_config('{"base": "nv_small", "clock_hz": 2e9}') == small.replace(clock_hz=2e9)


@pytest.mark.parametrize("content, message", [
    (None, "config file '{path}' does not exist"),
    ("{not json", "config file '{path}' is not valid JSON: "),
    ("[1, 2]", "config file '{path}' must hold a JSON object"),
    ('{"base": "nv_full", "macs": 4}', "config file '{path}': unknown config fields ['macs']"),
])
def test_resolve_config_file_errors(tmp_path, content, message):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(AccelInvalidError) as info:
        resolve_config(str(path))
    assert str(info.value).startswith(message.format(path=path))


def test_resolve_config_rejects_unknown_presets_and_bad_text():
    names = ", ".join(AccelConfig.preset_names())
    with pytest.raises(AccelInvalidError) as info:
        resolve_config("nv_tiny")
    assert str(info.value) == (f"unknown configuration 'nv_tiny': give a preset ({names}) "
                               "or a .json file")
    with pytest.raises(AccelInvalidError, match="config JSON does not parse"):
        resolve_config("{nope")
    with pytest.raises(AccelInvalidError, match="got int"):
        resolve_config(3)


# --- tables and totals ------------------------------------------------------------------------

def test_render_table_layout():
    columns = [Column("name", 6, "<", clip=True), Column("MB", 7, spec=".2f"),
               Column("n", 5, spec=",", gap="  "), Column("", 0, "<")]
    text = render_table(columns, [["conv2d_bn", 1.5, 12345, "ok"], ["pool", None],
                                  "a line as it is"], footer=[["total", 1.5]])
    assert text.splitlines() == [
        "name        MB      n",
        "---------------------",
        "conv2d    1.50  12,345 ok",
        "pool         -",
        "a line as it is",
        "---------------------",
        "total     1.50"]
    assert render_row(columns, ["x"]) == "x     "
    with pytest.raises(ValueError, match="a row of 5 cells for 4 columns"):
        render_row(columns, [1, 2, 3, 4, 5])


class _Op:
    def __init__(self, engine):
        self.engine = engine


class _Run:
    """A RunStats-like record."""

    def __init__(self, label, cycles, macs=1000, ops=("CONV", "SDP")):
        self.label, self.mode, self.cycles, self.macs = label, "fused", cycles, macs
        self.mac_cycles, self.bytes_read, self.bytes_written = cycles // 2, 2000, 500
        self.utilization, self.ops = 0.5, tuple(_Op(e) for e in ops)
        self.mac_energy_pj, self.cbuf_energy_pj = 0.3 * macs, 250.0
        self.dram_energy_pj, self.engine_energy_pj = 162.5 * 2500, 46.0
        self.energy_pj = (self.mac_energy_pj + self.cbuf_energy_pj + self.dram_energy_pj +
                          self.engine_energy_pj)


def test_cost_totals():
    runs = [_Run("a", 100), _Run("b", 300, macs=3000)]
    totals = CostTotals.of(runs)
    energy = 1200.0 + 500.0 + 812500.0 + 92.0
    assert totals == CostTotals(macs=4000, mac_cycles=200, bytes_read=4000, bytes_written=1000,
                                cycles=400, energy_pj=energy, mac_energy_pj=1200.0,
                                cbuf_energy_pj=500.0, dram_energy_pj=812500.0,
                                engine_energy_pj=92.0)
    assert totals.bytes == 5000 and totals.seconds(1e9) == 400e-9
    assert totals.frames_per_s(1e9) == 1e9 / 400 and totals.utilization(20) == 0.5
    assert totals.frames_per_joule() == 1e12 / energy
    assert list(totals.to_dict()) == ["macs", "mac_cycles", "bytes_read", "bytes_written",
                                      "cycles", "energy_pj", "mac_energy_pj", "cbuf_energy_pj",
                                      "dram_energy_pj", "engine_energy_pj", "dram_bytes",
                                      "sram_bytes"]
    assert energy_line(totals).startswith(f"energy {energy / 1e6:,.1f} uJ per frame (DRAM "
                                          f"{812500 / energy:.1%}, MAC {1200 / energy:.1%},")
    empty = CostTotals.of([])
    assert empty.frames_per_s(1e9) is None and empty.utilization(20) == 0.0
    assert empty.frames_per_joule() is None and "(-)" in energy_line(empty)
    assert engine_names(runs[0]) == "CONV+SDP"


def test_cost_table():
    runs = [_Run("f0.0 accel.conv2d_bn_relu_with_a_label_longer_than_the_layer_column", 1234567),
            _Run("f0.1 accel.dense", 10, ops=("CONV", "SDP", "PDP", "SDP", "CONV")),
            _Run("f0.2c0 accel.concat", 0, macs=0, ops=("BDMA",))]
    lines = cost_table(runs, modes=True).splitlines()
    width = len("CONV+SDP+PDP+SDP+CONV")  # the engines column fits the longest name
    assert lines[0] == (f"{'#':>4} {'layer':<56} {'mode':<11} {'engines':<{width}} {'MMACs':>9} "
                        f"{'KB read':>9} {'KB written':>10} {'cycles':>11} {'uJ':>8} "
                        f"{'util':>6}")
    # a label wider than the column continues on the next line, broken after a "_"
    assert lines[2] == (f"{0:>4} {'f0.0 accel.conv2d_bn_relu_with_a_label_longer_than_the_':<56} "
                        f"{'fused':<11} {'CONV+SDP':<{width}} "
                        f"{0.001:>9.2f} {2.0:>9.1f} {0.5:>10.1f} {1234567:>11,} "
                        f"{runs[0].energy_pj / 1e6:>8.2f} {0.5:>6.1%}")
    assert lines[3] == f"{'':>4} layer_column"
    assert "CONV+SDP+PDP+SDP+CONV " in lines[4]
    # a run without a CONV: its MAC figures are not applicable ("-"), not 0
    assert lines[5].split()[-6:] == ["-", "2.0", "0.5", "0", f"{runs[2].energy_pj / 1e6:.2f}",
                                     "-"]
    total_uj = sum(r.energy_pj for r in runs) / 1e6
    assert lines[-1] == (f"{'':>4} {'total':<56} {'':<11} {'':<{width}} {0.002:>9.2f} "
                         f"{6.0:>9.1f} {1.5:>10.1f} {1234577:>11,} {total_uj:>8.2f}")
    narrow = cost_table(runs, engines_width=12, utilization_total=0.25).splitlines()
    assert narrow[-1].endswith(f"{1234577:>11,} {total_uj:>8.2f} {0.25:>6.1%}")
    assert "CONV+SDP+PDP " in narrow[4]  # engines cut to a given width
    assert "mode" not in narrow[0]
    short = cost_table(runs[1:]).splitlines()  # the column is as wide as the longest label
    assert short[0].startswith(f"{'#':>4} {'layer':<19} engines")


# --- progress ---------------------------------------------------------------------------------

def test_progress_callback_forms():
    calls = []
    callback = calls.append
    assert progress_callback(callback) is callback
    progress_callback(False)(1, 2)  # silent
    assert isinstance(progress_callback(True, "x"), ProgressBar)
    assert progress_callback(True).enabled
    with pytest.raises(AccelInvalidError, match="progress = 'yes'"):
        progress_callback("yes")
    step = steps(lambda done, total: calls.append((done, total)), 2)
    step()
    step()
    assert calls == [(0, 2), (1, 2), (2, 2)]


def test_progress_bar_finishes_an_empty_job():
    stream = io.StringIO()
    ProgressBar("none", enabled=True, stream=stream)(0, 0)
    assert "none:" in stream.getvalue() and "0/1" in stream.getvalue()
    assert stream.getvalue().endswith("\r")


def _counts_increase(calls):
    totals = {total for _, total in calls}
    done = [d for d, _ in calls]
    return len(totals) == 1 and done == list(range(len(calls))) and done[-1] == totals.pop()


def test_sweep_reports_progress_with_increasing_counts(zoo):
    from accel_codegen.tools.estimation import sweep, sweep_configs

    mod, params, _ = zoo("lenet5").imported
    calls = []
    points = sweep_configs("nv_full", [64, 2048], [1, 20])
    sweep(mod, params, points, progress=lambda done, total: calls.append((done, total)))
    assert calls[0] == (0, 4) and _counts_increase(calls)


def test_bench_reports_progress_with_increasing_counts(zoo):
    from accel_codegen.tools.bench import run_bench
    from accel_codegen.tools.estimation import model_runs

    mod, _, x = zoo("lenet5").imported
    calls = []
    result = run_bench(mod, [x], modes=["fused", "decomposed"], repeat=2, warmup=1,
                       per_layer_wall=True,
                       progress=lambda done, total: calls.append((done, total)))
    layers = len(model_runs(mod))
    # builds, warm-ups and timed runs of two modes, then every fused layer timed alone
    assert calls[-1] == (2 * (1 + 1 + 2) + layers,) * 2 and _counts_increase(calls)
    assert all("fused_wall_ms" in row for row in result["layers"])
    assert np.isfinite(result["modes"]["fused"]["wall_ms"]["median"])


def test_calibration_reports_its_progress_to_the_tools_bar():
    from accel_codegen.quantization import calibration
    from accel_codegen.tools.cli import terminal_progress

    calls = []
    before = calibration.progress_factory
    calibration.progress_factory = lambda label: lambda done, total: calls.append(
        (label, done, total))
    try:
        calibration.calibrate(lambda x: None, [np.zeros(2)] * 3)
    finally:
        calibration.progress_factory = before
    assert calls == [("calibration", d, 3) for d in range(4)]
    with terminal_progress():  # the command line's: a bar on a terminal, silent when piped
        assert calibration.progress_factory("calibration").enabled is sys.stderr.isatty()
    assert calibration.progress_factory is before
