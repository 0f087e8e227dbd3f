"""ONNX Runtime as the baseline: its int8 model is really quantised and calibrated on our
calibration inputs, the accuracy report sets its SQNR beside ours, the benchmark's ratios
come from the measured times, and without onnxruntime both skip it with one stated reason.

onnxruntime is in the ``test`` extra: these tests run in CI, none is skipped for want of it.
No assertion is about how fast anything is (the machines are noisy)."""
import json
import math
import sys

import numpy as np
import pytest

import accel_codegen as ac
from accel_codegen import AccelInvalidError, frontend
from accel_codegen.quantization import ort_baseline
from accel_codegen.quantization.metrics import sqnr_db
from accel_codegen.tools import bench
from accel_codegen.tools.model_spec import random_inputs
from conftest import run_cli

SIM_AND_ORT = ["fused", "fused_int8", "ort_fp32", "ort_int8"]


@pytest.fixture(scope="module")
def lenet5_onnx(tmp_path_factory):
    """lenet5's ONNX export (the project's exporter) and its example input."""
    from accel_codegen.tools import models

    model, (x,) = models.get_model("lenet5")
    path = frontend.export_onnx(model, (x,), tmp_path_factory.mktemp("ort") / "lenet5.onnx")
    return path, x.numpy()


@pytest.fixture
def no_onnxruntime(monkeypatch):
    """As if onnxruntime were not installed: importing it raises ImportError."""
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    monkeypatch.setitem(sys.modules, "onnxruntime.quantization", None)


def _recording_quantizer(monkeypatch):
    """Wrap ort_baseline.quantize_int8: the calibration inputs of every call are recorded."""
    seen = []
    original = ort_baseline.quantize_int8

    def quantize(path, calibration, out_dir, *args, **kwargs):
        seen.append([tuple(np.array(a) for a in e) for e in calibration])
        return original(path, calibration, out_dir, *args, **kwargs)
    monkeypatch.setattr(ort_baseline, "quantize_int8", quantize)
    return seen


def _same_examples(a, b) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(np.array_equal(u, v) for u, v in zip(x, y))
        for x, y in zip(a, b))


# --- the int8 model ---------------------------------------------------------------------------

def test_ort_int8_model_is_quantised(lenet5_onnx, tmp_path):
    import onnx

    path, x = lenet5_onnx
    out = ort_baseline.quantize_int8(path, random_inputs([x], 4, 0), tmp_path)
    summary = ort_baseline.qdq_summary(out)
    assert summary["quantize_linear"] > 0 and summary["dequantize_linear"] > 0
    q = onnx.load(str(out))
    weights = [i for i in q.graph.initializer if len(i.dims) >= 2]
    # lenet5: 2 convolutions + 3 dense layers, every weight stored in int8 (per channel)
    assert summary["int8_initializers"] == 5
    assert {i.data_type for i in weights} == {onnx.TensorProto.INT8}
    conv_scales = [n for n in q.graph.node if n.op_type == "DequantizeLinear"
                   and any(i.name == n.input[0] and len(i.dims) == 4 for i in weights)]
    assert conv_scales and all(
        next(i for i in q.graph.initializer if i.name == n.input[1]).dims[0] > 1
        for n in conv_scales), "per-channel weight scales"
    # and it runs, close to fp32 but not equal to it
    fp32 = ort_baseline.run(ort_baseline.session(path, 1), (x,))
    int8 = ort_baseline.run(ort_baseline.session(out, 1), (x,))
    assert fp32.shape == int8.shape and not np.array_equal(fp32, int8)
    assert 10 < sqnr_db(np.sum(fp32 ** 2), np.sum((int8 - fp32) ** 2)) < 80


def test_reduce_range_stores_seven_bit_weights(lenet5_onnx, tmp_path):
    """ONNX Runtime's advice for x86 without VNNI (its u8 x s8 pairs summed in int16
    saturate): 7-bit weights, codes within [-64, 63]; the default uses the 8 bits."""
    import onnx
    from onnx import numpy_helper

    path, x = lenet5_onnx
    calibration = random_inputs([x], 4, 0)
    codes = {}
    for reduce_range in (False, True):
        folder = tmp_path / str(reduce_range)
        folder.mkdir()
        out = ort_baseline.quantize_int8(path, calibration, folder,
                                         ort_baseline.Int8Settings(reduce_range=reduce_range))
        q = onnx.load(str(out))
        codes[reduce_range] = max(int(np.abs(numpy_helper.to_array(i).astype(np.int32)).max())
                                  for i in q.graph.initializer
                                  if i.data_type == onnx.TensorProto.INT8 and len(i.dims) >= 2)
    assert codes[False] == 127 and codes[True] <= 64, codes
    assert "7-bit int8 weights" in ort_baseline.Int8Settings(reduce_range=True).describe()


def test_a_graph_onnx_runtime_cannot_pre_process_is_quantised_without_it(tmp_path):
    """ONNX Runtime's quant_pre_process asserts (`_infer_Reshape`) on torch's export of a
    pre-norm nn.TransformerEncoder; its documentation makes that step optional, so the
    comparison quantises without it and says so, where it used to crash `accuracy`."""
    import torch

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 2, 64, batch_first=True, norm_first=True)
    model = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval()
    x = torch.randn(1, 8, 32)
    path = frontend.export_onnx(model, (x,), tmp_path / "encoder.onnx")
    calibration = random_inputs([x.numpy()], 4, 0)
    with pytest.raises(ort_baseline.PreProcessError,
                       match=r"quant_pre_process failed on encoder.onnx: AssertionError in "):
        ort_baseline.quantize_int8(path, calibration, tmp_path)
    out, settings = ort_baseline.quantize_int8_as_ort_can(path, calibration, tmp_path)
    assert settings == ort_baseline.Int8Settings(pre_process=False)
    assert ort_baseline.qdq_summary(out)["int8_initializers"] > 0
    mod, params = frontend.from_onnx(path)
    report = ac.accuracy_report(mod, params, random_inputs([x.numpy()], 2, 1),
                                precision="int8", calibration=calibration, onnx_model=path)
    assert report.ort is not None and report.ort.settings["pre_process"] is False
    assert "without its pre-processing, which failed on this graph" in report.ort.describe()


def test_onnx_runtime_failures_are_typed(lenet5_onnx, tmp_path, monkeypatch):
    from onnxruntime import quantization

    def fails(*args, **kwargs):
        raise RuntimeError("some ONNX Runtime failure")
    monkeypatch.setattr(quantization, "quantize_static", fails)
    path, x = lenet5_onnx
    with pytest.raises(ac.AccelUnsupportedError,
                       match="quantize_static failed on .*RuntimeError in fails: some ONNX"):
        ort_baseline.quantize_int8_as_ort_can(path, random_inputs([x], 2, 0), tmp_path)


def test_activation_type_is_checked():
    with pytest.raises(AccelInvalidError, match="activation_type = 'int4'"):
        ort_baseline.Int8Settings(activation_type="int4")


@pytest.mark.parametrize("name, value", [("reduce_range", "no"), ("reduce_range", 1),
                                         ("per_channel", None), ("pre_process", "False")])
def test_switches_are_bools(name, value):
    with pytest.raises(AccelInvalidError, match=f"{name} = {value!r}: expected True or False"):
        ort_baseline.Int8Settings(**{name: value})
    assert getattr(ort_baseline.Int8Settings(**{name: True}), name) is True


# --- the accuracy report ----------------------------------------------------------------------

def test_accuracy_report_sets_ort_int8_beside_ours(zoo, lenet5_onnx, monkeypatch):
    mod, params, x = zoo("lenet5").imported
    path, _ = lenet5_onnx
    calibration = random_inputs([x], 8, 1234)
    seen = _recording_quantizer(monkeypatch)
    report = ac.accuracy_report(mod, params, random_inputs([x], 4, 1235), precision="int8",
                                calibration=iter(calibration), onnx_model=path)
    ort = report.ort
    assert ort is not None and report.ort_skipped is None
    assert _same_examples(seen[0], calibration), "ORT calibrates on our calibration inputs"
    assert ort.calibration_samples == report.calibration_samples == 8
    assert ort.int8_model["quantize_linear"] > 0
    # ORT fp32 is the same model as our fp32 reference; its int8 is finite and below it
    assert ort.fp32_sqnr_db > 80
    assert np.isfinite(ort.output_sqnr_db) and 10 < ort.output_sqnr_db < ort.fp32_sqnr_db
    assert report.ort_gap_db == pytest.approx(report.output_sqnr_db - ort.output_sqnr_db)
    data = json.loads(report.to_json())
    assert data["ort"]["gap_db"] == pytest.approx(report.ort_gap_db)
    assert data["ort"]["settings"]["quant_format"] == "QDQ"
    assert data["ort"]["settings"]["per_channel"] is True
    assert "ONNX Runtime 1.32.0 int8 (static QDQ" in str(report)
    assert "ours minus ONNX Runtime's" in str(report)


@pytest.mark.parametrize("case", ["fp16", "calibration-object"])
def test_accuracy_report_ort_argument_errors(zoo, lenet5_onnx, case):
    mod, params, x = zoo("lenet5").imported
    path, _ = lenet5_onnx
    if case == "fp16":
        kwargs, message = {"precision": "fp16"}, "int8 quantisation, not fp16"
    else:
        calibration = ac.calibration_of(ac.partition_for_accel(
            mod, params, precision="int8", calibration=random_inputs([x], 2, 0)))
        kwargs, message = {"precision": "int8", "calibration": calibration}, \
            "give calibration as example inputs"
    with pytest.raises(AccelInvalidError, match=message):
        ac.accuracy_report(mod, params, [x], onnx_model=path, **kwargs)


def test_accuracy_command_prints_ort_beside_ours(capsys, tmp_path):
    out_json = tmp_path / "a.json"
    status, out, err = run_cli(capsys, "accuracy", "lenet5", "--precision", "int8",
                               "--calibration", "4", "--inputs", "2", "--json", out_json)
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("int8 on nv_full") and lines[1].startswith("ONNX Runtime 1.32.0")
    data = json.loads(out_json.read_text())
    assert data["ort"]["calibration_samples"] == 4
    assert data["ort"]["gap_db"] == pytest.approx(data["output_sqnr_db"]
                                                  - data["ort"]["output_sqnr_db"])
    status, out, err = run_cli(capsys, "accuracy", "lenet5", "--precision", "int8",
                               "--calibration", "2", "--inputs", "1", "--no-ort")
    assert status == 0 and "ONNX Runtime" not in out, err


# --- the benchmark ----------------------------------------------------------------------------

def test_bench_ratios_come_from_the_measured_times(monkeypatch):
    from accel_codegen.flows import pipeline

    seen = _recording_quantizer(monkeypatch)
    builds = []
    original_build = pipeline.build

    def build(*args, **kwargs):
        builds.append(kwargs)
        return original_build(*args, **kwargs)
    monkeypatch.setattr(pipeline, "build", build)
    result = bench.run_bench("lenet5", modes=SIM_AND_ORT, repeat=3, warmup=1, threads=1,
                             calibration=6, seed=5, progress=False)
    assert list(result["modes"]) == SIM_AND_ORT and not result["skipped"]
    modes = result["modes"]
    for precision, (ours, theirs) in (("fp32", ("fused", "ort_fp32")),
                                      ("int8", ("fused_int8", "ort_int8"))):
        r = result["vs_ort"][precision]
        assert (r["simulator"], r["onnxruntime"]) == (ours, theirs)
        assert r["median"] == modes[theirs]["wall_ms"]["median"] / modes[ours]["wall_ms"]["median"]
        assert r["min"] == modes[theirs]["wall_ms"]["min"] / modes[ours]["wall_ms"]["min"]
        # the slowdown: the simulator's wall time over the modelled hardware's time
        slow = modes[ours]["slowdown"]
        assert slow["median"] == modes[ours]["wall_ms"]["median"] / modes[ours]["simulated_ms"]
        assert slow["min"] == modes[ours]["wall_ms"]["min"] / modes[ours]["simulated_ms"]
        # not > 1: a net as small as LeNet-5 can simulate faster than the modelled hardware
        # runs it (0.86 on a Zen 5), so only the ratio's definition is the code's to hold
        assert math.isfinite(slow["median"]) and slow["median"] > 0
        assert r["slowdown"] == slow["median"]
        assert "slowdown" not in modes[theirs]
    # fused_int8 and ort_int8 calibrate on the same inputs: 6 drawn with seed 5
    model = bench.load_model("lenet5")
    expected = random_inputs(model, 6, 5)
    int8_builds = [b for b in builds if b.get("precision") == "int8"]
    assert len(int8_builds) == 1 and _same_examples(int8_builds[0]["calibration"], expected)
    assert len(seen) == 1 and _same_examples(seen[0], expected)
    assert result["calibration"] == {"samples": 6, "inputs": "random N(0, 1), seed 5",
                                     "method": "mse"}
    ort = result["onnxruntime"]
    assert ort["version"] == "1.32.0" and ort["int8"]["quant_format"] == "QDQ"
    assert ort["int8_model"]["dequantize_linear"] > 0 and ort["int8_model"]["int8_initializers"]
    assert modes["fused_int8"]["cycles"] > 0
    assert "intra_op_num_threads=1" in result["thread_notes"]["ort_int8"]
    text = bench.format_table(result)
    assert "simulator fp32 (fused) vs ONNX Runtime 1.32.0 fp32: " in text
    assert "simulator int8 (fused_int8) vs ONNX Runtime 1.32.0 int8: " in text
    slow = f"; slowdown {bench._times(modes['fused']['slowdown']['median'])} (simulator wall time"
    assert slow in text and "slowdown" in text.splitlines()[1]  # a column of the mode table
    json.dumps(result)  # the JSON contract holds plain data


@pytest.mark.parametrize("ratio, words", [(0.5, "2.00x slower"), (1.0, "1.00x faster"),
                                          (1.25, "1.25x faster")])
def test_speed_words(ratio, words):
    assert bench._speed(ratio) == words


def test_ort_ratios_need_both_modes():
    wall = lambda median, low: {"wall_ms": {"median": median, "min": low}}  # noqa: E731
    ratios = bench.ort_ratios({"fused": wall(4.0, 3.0), "ort_fp32": wall(2.0, 1.5),
                               "fused_int8": wall(1.0, 1.0)})
    assert ratios == {"fp32": {"simulator": "fused", "onnxruntime": "ort_fp32",
                               "median": 0.5, "min": 0.5}}


def test_slowdown_is_wall_time_over_the_modelled_time():
    entry = {"wall_ms": {"median": 40.0, "min": 30.0}, "simulated_ms": 0.5}
    assert bench.slowdown(entry) == {"median": 80.0, "min": 60.0}
    assert bench.slowdown({"wall_ms": entry["wall_ms"]}) is None  # ONNX Runtime's modes
    ratios = bench.ort_ratios({"fused": {**entry, "slowdown": bench.slowdown(entry)},
                               "ort_fp32": {"wall_ms": {"median": 20.0, "min": 15.0}}})
    assert ratios["fp32"]["slowdown"] == 80.0 and ratios["fp32"]["median"] == 0.5
    assert (bench._times(1234.4), bench._times(80.0), bench._times(1.64),
            bench._times(0.864), bench._times(0.0412)) == \
        ("1,234x", "80x", "1.6x", "0.86x", "0.041x")


def test_bench_of_an_onnx_file_times_the_file(lenet5_onnx):
    path, _ = lenet5_onnx
    result = bench.run_bench(str(path), modes=["fused", "ort_fp32"], repeat=2, progress=False)
    assert set(result["modes"]) == {"fused", "ort_fp32"} and "fp32" in result["vs_ort"]


def test_bench_of_a_relax_module_skips_ort(zoo):
    mod, params, x = zoo("lenet5").imported
    result = bench.run_bench(mod, [x], modes=["fused", "ort_fp32"], repeat=2, progress=False)
    assert set(result["modes"]) == {"fused"} and result["vs_ort"] == {}
    assert "neither PyTorch nor an ONNX file" in result["skipped"]["ort_fp32"]


# --- onnxruntime absent -----------------------------------------------------------------------

def test_without_onnxruntime_bench_skips_ort_in_one_line(no_onnxruntime, capsys, tmp_path):
    assert "onnxruntime is not installed" in ort_baseline.unavailable()
    out_json = tmp_path / "b.json"
    status, out, err = run_cli(capsys, "bench", "lenet5", "--modes", "fused,ort_fp32,ort_int8",
                               "--repeat", "2", "--json", out_json)
    assert status == 0, err
    skipped = [line for line in out.splitlines() if "skipped" in line]
    assert len(skipped) == 1 and skipped[0].startswith("ort_fp32, ort_int8 skipped: "
                                                       "onnxruntime is not installed")
    assert "accel-codegen[ort]" in skipped[0]
    data = json.loads(out_json.read_text())
    assert set(data["modes"]) == {"fused"} and data["vs_ort"] == {}
    assert set(data["skipped"]) == {"ort_fp32", "ort_int8"} and "onnxruntime" not in data


def test_without_onnxruntime_accuracy_says_why(no_onnxruntime, zoo, lenet5_onnx, capsys):
    mod, params, x = zoo("lenet5").imported
    report = ac.accuracy_report(mod, params, [x], precision="int8",
                                calibration=random_inputs([x], 2, 0), onnx_model=lenet5_onnx[0])
    assert report.ort is None and "onnxruntime is not installed" in report.ort_skipped
    assert "ONNX Runtime int8 comparison skipped: onnxruntime is not installed" in str(report)
    status, out, err = run_cli(capsys, "accuracy", "lenet5", "--precision", "int8",
                               "--calibration", "2", "--inputs", "1")
    assert status == 0, err
    assert "ONNX Runtime int8 comparison skipped: onnxruntime is not installed" in out
