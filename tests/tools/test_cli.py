"""The command-line tool: every subcommand on a small model, argument errors (exit status and
message), the bench JSON contract, the plots, the fast paths that must not import tvm, and the
precisions: int8 (calibrated on seeded random inputs) and fp16 through partition, compile,
run and accuracy."""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from accel_codegen.tools.cli import main
from conftest import run_cli, run_main, torch_forward

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# --- fast paths and usage ---------------------------------------------------------------------

def test_help_and_usage_errors_do_not_import_tvm():
    """`--help` and argument errors answer without the seconds-long `import tvm`."""
    code = textwrap.dedent("""
        import sys
        from accel_codegen.tools.cli import main
        statuses = []
        for argv in (["--help"], ["sweep", "--help"], ["sweep", "lenet5", "--macs", "64,x",
                     "--dram-gbps", "1"], ["compile", "lenet5", "-o", "model.txt"],
                     ["partition", "missing.onnx"], ["bench", "lenet5", "--config", "nv_tiny"],
                     ["partition", "nosuchnet"], ["accuracy", "lenet5"],
                     ["partition", "lenet5", "--precision", "fp16", "--config", "nv_small"],
                     ["compile", "lenet5", "-o", "m.so", "--precision", "fp16",
                      "--calibration", "4"]):
            try:
                statuses.append(main(argv))
            except SystemExit as e:
                statuses.append(e.code)
        print("STATUSES", statuses, "tvm" in sys.modules)
        """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd="/", timeout=120)
    last = proc.stdout.strip().splitlines()[-1]
    assert last == "STATUSES [0, 0, 2, 1, 1, 1, 1, 2, 1, 1] False", proc.stdout + proc.stderr


def test_python_dash_m_runs_the_tool():
    proc = subprocess.run([sys.executable, "-m", "accel_codegen", "--help"], capture_output=True,
                          text=True, cwd="/", timeout=120)
    assert proc.returncode == 0
    for command in ("partition", "compile", "run", "accuracy", "bench", "sweep", "estimate"):
        assert command in proc.stdout


@pytest.mark.parametrize("command", ["partition", "compile", "run", "accuracy", "bench", "sweep",
                                     "estimate"])
def test_every_subcommand_has_help(capsys, command):
    status, out, _ = run_cli(capsys, command, "--help")
    assert status == 0 and "usage: accel-codegen " + command in out


def test_no_subcommand_is_a_usage_error(capsys):
    status, _, err = run_cli(capsys)
    assert status == 2 and "required" in err


# --- partition --------------------------------------------------------------------------------

def test_partition_zoo_model(capsys):
    status, out, err = run_cli(capsys, "partition", "lenet5")
    assert status == 0, err
    assert "operators offloaded" in out and "accel.conv2d_bias_relu_maxpool" in out


def test_partition_decomposed_on_a_config_file(capsys, tmp_path):
    config = tmp_path / "small_dram.json"
    config.write_text(json.dumps({"base": "nv_small", "dram_bytes_per_s": 1e9}))
    status, out, err = run_cli(capsys, "partition", "lenet5", "--config", config, "--no-fuse")
    assert status == 0, err
    assert "partition for nv_small (decomposed, fp32)" in out


def test_partition_python_function(capsys, tmp_path):
    """A file.py:function model, which imports a file beside it (as `python file.py` would)."""
    (tmp_path / "my_model_blocks.py").write_text(textwrap.dedent("""
        from torch import nn

        def block():
            return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        """))
    source = tmp_path / "my_model.py"
    source.write_text(textwrap.dedent("""
        import torch

        from my_model_blocks import block

        def build():
            return block().eval(), (torch.randn(1, 3, 16, 16),)

        def not_a_pair():
            return 42
        """))
    status, out, err = run_cli(capsys, "partition", f"{source}:build")
    assert status == 0, err
    assert "accel.conv2d_bias_bn_relu" in out
    status, _, err = run_cli(capsys, "partition", f"{source}:nowhere")
    assert status == 1 and "has no function 'nowhere'" in err
    status, _, err = run_cli(capsys, "partition", f"{source}:not_a_pair")
    assert status == 1 and "must return (torch_module, example_inputs_tuple)" in err


def test_partition_onnx_file(capsys, tmp_path, zoo):
    from accel_codegen import frontend

    lenet = zoo("lenet5")
    path = frontend.export_onnx(lenet.model, (lenet.x,), tmp_path / "lenet5.onnx")
    status, out, err = run_cli(capsys, "partition", path)
    assert status == 0, err
    assert "accel.conv2d_bias_relu_maxpool" in out


def test_partition_onnx_file_with_a_dynamic_batch(capsys, tmp_path):
    """A symbolic input dimension (scikit-learn's and many PyTorch exports declare the batch
    so) is fixed to 1, as the example inputs are: otherwise every operator stays on the host
    with [runtime-shape]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["h"], name="dense"),
         helper.make_node("Add", ["h", "B"], ["a"], name="bias"),
         helper.make_node("Relu", ["a"], ["Y"], name="relu")],
        "mlp", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W"),
         numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "B")])
    path = tmp_path / "mlp.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    status, out, err = run_cli(capsys, "partition", str(path))
    assert status == 0, err
    assert "3 of 3 operators offloaded" in out and "runtime-shape" not in out, out


@pytest.mark.parametrize("argv, message", [
    (["partition", "nosuchnet"], "unknown model 'nosuchnet'"),
    (["partition", "missing.onnx"], "ONNX file 'missing.onnx' does not exist"),
    (["partition", "missing.py:build"], "model file 'missing.py' does not exist"),
    (["partition", "model.py"], "name the function too"),
    (["partition", "lenet5", "--config", "nv_tiny"], "unknown configuration 'nv_tiny'"),
    (["partition", "lenet5", "--config", "missing.json"], "config file 'missing.json' does not"),
], ids=["bad-model-name", "missing-onnx", "missing-py", "py-without-function",
        "bad-preset", "missing-config"])
def test_partition_argument_errors(capsys, argv, message):
    status, out, err = run_cli(capsys, *argv)
    assert status == 1, (out, err)
    assert message in err and err.startswith("accel-codegen partition: error:")
    assert "Traceback" not in err


@pytest.mark.parametrize("content, message", [
    ("{not json", "is not valid JSON"),
    ('{"base": "nv_full", "macs": 4}', "unknown config fields ['macs']"),
    ('{"base": "nv_full", "atomic_c": 0}', "atomic_c"),
    ("[1, 2]", "must hold a JSON object"),
], ids=["syntax", "unknown-field", "invalid-value", "not-an-object"])
def test_bad_config_json(capsys, tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    status, _, err = run_cli(capsys, "partition", "lenet5", "--config", path)
    assert status == 1 and message in err, err


# --- compile and run --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cli")
    library, x = directory / "lenet5.so", directory / "x.npy"
    status = main(["compile", "lenet5", "-o", str(library), "--save-input", str(x)])
    assert status == 0
    return library, x


def test_compile_writes_a_library_and_its_input(compiled):
    library, x = compiled
    assert library.stat().st_size > 0
    assert np.load(x).shape == (1, 1, 32, 32)


@pytest.mark.parametrize("argv, message", [
    (["compile", "lenet5", "-o", "model.txt"], "output path 'model.txt' must end in .so"),
    (["compile", "lenet5", "-o", "no/such/dir/model.so"], "directory 'no/such/dir'"),
    (["compile", "nosuchnet", "-o", "model.so"], "unknown model 'nosuchnet'"),
], ids=["not-so", "missing-dir", "bad-model"])
def test_compile_argument_errors(capsys, argv, message):
    status, _, err = run_cli(capsys, *argv)
    assert status == 1 and message in err, err


def test_compile_needs_an_output(capsys):
    status, _, err = run_cli(capsys, "compile", "lenet5")
    assert status == 2 and "-o/--output" in err


def test_run_matches_pytorch_and_profiles(capsys, compiled, tmp_path, zoo):
    library, x = compiled
    y = tmp_path / "y.npy"
    status, out, err = run_cli(capsys, "run", library, "--input", x, "--output", y, "--profile")
    assert status == 0, err
    expected = torch_forward(zoo("lenet5").model, np.load(x))
    np.testing.assert_allclose(np.load(y), expected, rtol=1e-4, atol=1e-4)
    assert "accel.conv2d_bias_relu_maxpool" in out and "total" in out and "frames/s" in out


@pytest.mark.parametrize("case, message", [
    ("missing-library", "library 'missing.so' does not exist"),
    ("not-so", "is not a .so library"),
    ("missing-input", "input file 'nothing.npy' does not exist"),
    ("not-npy", "is not a .npy array"),
    ("wrong-shape", "running"),
    ("bad-output", "must end in .npy"),
])
def test_run_argument_errors(capsys, compiled, tmp_path, case, message):
    library, x = compiled
    args = {"missing-library": ["missing.so", "--input", x],
            "not-so": [x, "--input", x],
            "missing-input": [library, "--input", "nothing.npy"],
            "not-npy": [library, "--input", library],
            "wrong-shape": [library, "--input", tmp_path / "wrong.npy"],
            "bad-output": [library, "--input", x, "--output", "y.txt"]}[case]
    np.save(tmp_path / "wrong.npy", np.zeros((1, 3, 8, 8), np.float32))
    status, _, err = run_cli(capsys, "run", *args)
    assert status == 1 and message in err, err
    assert "Traceback" not in err


# --- estimate, bench, sweep -------------------------------------------------------------------

def test_estimate_command(capsys, tmp_path):
    out_json = tmp_path / "e.json"
    status, out, err = run_cli(capsys, "estimate", "lenet5", "--config", "nv_small", "--json",
                               out_json)
    assert status == 0, err
    assert "frames/s" in out and "nv_small" in out and "uJ per frame (DRAM" in out
    data = json.loads(out_json.read_text())
    assert data["total_cycles"] == sum(layer["cycles"] for layer in data["layers"])
    assert data["total_energy_pj"] == pytest.approx(sum(layer["energy_pj"]
                                                        for layer in data["layers"]))


def test_estimate_precision_errors(capsys):
    status, _, err = run_cli(capsys, "estimate", "lenet5", "--config", "nv_small",
                             "--precision", "fp16")
    assert status == 1 and "nv_small has no fp16" in err
    status, _, err = run_cli(capsys, "estimate", "lenet5", "--precision", "fp64")
    assert status == 2 and "invalid choice: 'fp64'" in err


def test_estimate_int8_decomposed(capsys):
    """Costs need no calibration, and decomposed int8 is estimated (not generated)."""
    status, out, err = run_cli(capsys, "estimate", "lenet5", "--precision", "int8", "--no-fuse")
    assert status == 0, err
    assert "int8, decomposed" in out and "calibration" not in err


def test_bench_json_contract_and_plot(capsys, tmp_path):
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    status, out, err = run_cli(capsys, "bench", "lenet5", "--repeat", "2", "--host-repeat", "1",
                               "--threads", "1", "--json", out_json, "--plot", out_png)
    assert status == 0, err
    data = json.loads(out_json.read_text())
    assert data["threads"] == 1
    assert set(data["modes"]) == {"fused", "decomposed", "host", "pytorch", "fused_int8",
                                  "ort_fp32", "ort_int8"}, data["skipped"]
    assert set(data["vs_ort"]) == {"fp32", "int8"}
    for mode, entry in data["modes"].items():
        assert set(entry["wall_ms"]) >= {"median", "min", "max"}, mode
        assert entry["wall_ms"]["min"] <= entry["wall_ms"]["median"] <= entry["wall_ms"]["max"]
    for mode in ("fused", "decomposed", "fused_int8"):
        entry = data["modes"][mode]
        for key in ("cycles", "bytes_read", "bytes_written", "frames_per_s", "utilization",
                    "energy_pj", "frames_per_joule"):
            assert entry[key] > 0, (mode, key)
    assert data["modes"]["fused"]["bytes_read"] + data["modes"]["fused"]["bytes_written"] < \
        data["modes"]["decomposed"]["bytes_read"] + data["modes"]["decomposed"]["bytes_written"]
    assert out_png.read_bytes()[:8] == PNG_MAGIC
    for mode in ("fused", "decomposed", "host", "pytorch", "fused_int8", "ort_fp32", "ort_int8"):
        assert mode in out
    assert "simulator fp32 (fused) vs ONNX Runtime" in out


def test_bench_per_layer(capsys):
    status, out, err = run_cli(capsys, "bench", "lenet5", "--modes", "fused,decomposed",
                               "--repeat", "2", "--per-layer")
    assert status == 0, err
    assert "KB fused" in out and "ms decomp" in out and "f0.4 accel.dense_bias" in out


@pytest.mark.parametrize("argv, status, message", [
    (["bench", "lenet5", "--modes", "fused,gpu"], 2, "unknown mode(s) 'gpu'"),
    (["bench", "lenet5", "--repeat", "0"], 2, "must be at least 1"),
    (["bench", "lenet5", "--json", "out.txt"], 1, "must end in .json"),
    (["bench", "lenet5", "--plot", "out.jpg"], 1, "must end in .png"),
    (["bench", "nosuchnet"], 1, "unknown model 'nosuchnet'"),
], ids=["bad-mode", "zero-repeat", "json-suffix", "plot-suffix", "bad-model"])
def test_bench_argument_errors(capsys, argv, status, message):
    got, _, err = run_cli(capsys, *argv)
    assert got == status and message in err, err


def test_sweep_table_json_plot(capsys, tmp_path):
    out_json, out_png = tmp_path / "sweep.json", tmp_path / "sweep.png"
    status, out, err = run_cli(capsys, "sweep", "lenet5", "--macs", "64,2048", "--dram-gbps",
                               "1,5,20", "--cbuf-kib", "64,512", "--json", out_json,
                               "--plot", out_png)
    assert status == 0, err
    data = json.loads(out_json.read_text())
    assert len(data["points"]) == 2 * 3 * 2
    assert {(p["atomic_c"], p["atomic_k"]) for p in data["points"]} == {(8, 8), (64, 32)}
    assert out_png.read_bytes()[:8] == PNG_MAGIC
    assert "frames/s" in out and "frames/J" in out
    for point in data["points"]:
        assert point["frames_per_joule"] == pytest.approx(1e12 / point["total_energy_pj"])


@pytest.mark.parametrize("argv, status, message", [
    (["--macs", "64,abc", "--dram-gbps", "1"], 2, "not a comma-separated list of integers"),
    (["--macs", "64,-8", "--dram-gbps", "1"], 2, "give positive integers"),
    (["--macs", "100", "--dram-gbps", "1"], 1, "MACs = 100: give powers of two"),
    (["--macs", "64", "--dram-gbps", "fast"], 2, "not a comma-separated list of numbers"),
    (["--macs", "64", "--dram-gbps", "1", "--config", "nv_small", "--precision", "fp16"], 1,
     "has no fp16 (its precisions: fp32, int8)"),
    (["--macs", "64", "--dram-gbps", "1", "--precision", "int16"], 2, "invalid choice: 'int16'"),
    (["--dram-gbps", "1"], 2, "--macs"),
], ids=["macs-not-int", "macs-negative", "macs-not-power-of-two", "dram-not-number",
        "precision-not-on-config", "precision-not-generated", "macs-missing"])
def test_sweep_argument_errors(capsys, argv, status, message):
    got, _, err = run_cli(capsys, "sweep", "lenet5", *argv)
    assert got == status and message in err, err


def test_sweep_int8(capsys):
    status, out, err = run_cli(capsys, "sweep", "lenet5", "--macs", "64,2048", "--dram-gbps", "5",
                               "--precision", "int8")
    assert status == 0, err
    assert "sweep of lenet5 (int8, fused)" in out


# --- precisions: partition, compile, run, accuracy -------------------------------------------

def test_partition_int8_with_its_calibration(capsys, tmp_path):
    out_json = tmp_path / "p.json"
    status, out, err = run_cli(capsys, "partition", "lenet5", "--precision", "int8",
                               "--calibration", "4", "--calibration-method", "max",
                               "--json", out_json)
    assert status == 0, err
    assert "partition for nv_full (fused, int8): 22 of 22 operators offloaded" in out
    assert "int8 calibration: max on 4 random N(0, 1) inputs (seed 1234)" in err
    assert json.loads(out_json.read_text())["precision"] == "int8"


def test_partition_int8_without_equalisation_nor_bias_correction(capsys):
    status, out, err = run_cli(capsys, "partition", "lenet5", "--precision", "int8",
                               "--calibration", "2", "--no-equalize", "--no-bias-correction")
    assert status == 0, err
    assert ("int8 calibration: mse on 2 random N(0, 1) inputs (seed 1234); cross-layer "
            "equalisation off; bias correction off") in err


def test_partition_fp16(capsys):
    status, out, err = run_cli(capsys, "partition", "lenet5", "--precision", "fp16")
    assert status == 0, err
    assert "(fused, fp16)" in out and "calibration" not in err


@pytest.fixture(scope="module")
def compiled_int8(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cli_int8")
    library, x = directory / "lenet5_int8.so", directory / "x.npy"
    status = main(["compile", "lenet5", "-o", str(library), "--save-input", str(x),
                   "--precision", "int8", "--calibration", "8", "--seed", "7"])
    assert status == 0
    return library, x


def test_compiled_int8_library_runs_the_seeded_calibration(capsys, compiled_int8, tmp_path):
    """The library runs int8, and its output is bit for bit that of an in-process build
    calibrated on the same seeded random inputs: the scales travel with the library."""
    import accel_codegen as ac
    from accel_codegen import bench, cli

    library, x = compiled_int8
    y = tmp_path / "y.npy"
    status, out, err = run_cli(capsys, "run", library, "--input", x, "--output", y,
                               "--precision", "int8")
    assert status == 0, err
    assert "accelerator precision: int8" in out
    model = bench.load_model("lenet5")
    exe = ac.build(model.mod, model.params, precision="int8",
                   calibration=cli.random_inputs(model, 8, 7))
    expected = run_main(ac.virtual_machine(exe), np.load(x))
    assert np.array_equal(np.load(y), expected)


def test_run_refuses_a_library_of_another_precision(capsys, compiled_int8, compiled):
    status, _, err = run_cli(capsys, "run", compiled_int8[0], "--input", compiled_int8[1],
                             "--precision", "fp32")
    assert status == 1 and "runs int8 on the accelerator, not fp32" in err, err
    assert "compile --precision fp32" in err and "Traceback" not in err
    status, out, err = run_cli(capsys, "run", compiled[0], "--input", compiled[1], "--profile")
    assert status == 0 and "accelerator precision: fp32" in out, err


def test_accuracy_int8_table_and_json(capsys, tmp_path):
    """The figures are accuracy_report's on calibration inputs drawn with the seed and
    evaluation inputs drawn with seed + 1."""
    import accel_codegen as ac
    from accel_codegen import bench, cli

    out_json = tmp_path / "accuracy.json"
    status, out, err = run_cli(capsys, "accuracy", "lenet5", "--precision", "int8",
                               "--calibration", "8", "--inputs", "4", "--seed", "3",
                               "--json", out_json)
    assert status == 0, err
    assert out.startswith("int8 on nv_full vs fp32 over 4 inputs, calibration mse on 8 "
                          "inputs: output SQNR")
    assert "evaluation: 4 random N(0, 1) inputs (seed 4)" in err
    data = json.loads(out_json.read_text())
    assert (data["precision"], data["inputs"], data["calibration_samples"]) == ("int8", 4, 8)
    # a sane int8 LeNet-5 on 8 calibration inputs (24.9 dB on the zoo's weights since
    # f8b77e1); the figure itself is checked against the API's below
    assert len(data["tensors"]) == 7 and data["output_sqnr_db"] >= 20.0
    assert 0.0 <= data["top1_agreement"] <= 1.0
    model = bench.load_model("lenet5")
    report = ac.accuracy_report(model.mod, model.params, cli.random_inputs(model, 4, 4),
                                precision="int8", calibration=cli.random_inputs(model, 8, 3))
    assert data["output_sqnr_db"] == report.output_sqnr_db


def test_accuracy_fp16(capsys):
    status, out, err = run_cli(capsys, "accuracy", "lenet5", "--precision", "fp16", "--inputs",
                               "2")
    assert status == 0, err
    assert out.startswith("fp16 on nv_full vs fp32 over 2 inputs: output SQNR")
    assert "calibration" not in err


@pytest.mark.parametrize("argv, status, message", [
    (["partition", "lenet5", "--precision", "fp16", "--config", "nv_small"], 1,
     "configuration nv_small has no fp16"),
    (["compile", "lenet5", "-o", "m.so", "--precision", "fp16", "--config", "nv_small"], 1,
     "configuration nv_small has no fp16"),
    (["accuracy", "lenet5", "--precision", "fp16", "--config", "nv_small"], 1,
     "configuration nv_small has no fp16"),
    (["partition", "lenet5", "--precision", "int8", "--no-fuse", "--calibration", "2"], 1,
     "int8 code is generated for fused chains"),
    (["accuracy", "lenet5", "--precision", "int8", "--no-fuse", "--calibration", "2"], 1,
     "int8 code is generated for fused chains"),
    (["partition", "lenet5", "--precision", "int8", "--calibration-method", "minmax"], 2,
     "invalid choice: 'minmax'"),
    (["partition", "lenet5", "--precision", "fp16", "--calibration", "4"], 1,
     "--calibration: for int8 and mixed only (the precision is fp16)"),
    (["compile", "lenet5", "-o", "m.so", "--calibration-method", "max"], 1,
     "--calibration-method: for int8 and mixed only (the precision is fp32)"),
    (["partition", "lenet5", "--precision", "int8", "--calibration", "0"], 2,
     "must be at least 1"),
    (["accuracy", "lenet5", "--precision", "int8", "--seed", "-1"], 2, "must be at least 0"),
    (["accuracy", "lenet5", "--precision", "fp32"], 2, "invalid choice: 'fp32'"),
    (["accuracy", "lenet5"], 2, "--precision"),
    (["accuracy", "lenet5", "--precision", "fp16", "--inputs", "0"], 1,
     "--inputs 0: give at least one input"),
    (["run", "model.so", "--input", "x.npy", "--precision", "int16"], 2,
     "invalid choice: 'int16'"),
    (["bench", "lenet5", "--precision", "int8"], 2, "unrecognized arguments: --precision"),
    (["partition", "lenet5", "--precision", "fp16", "--no-equalize", "--no-bias-correction"],
     1, "--no-equalize and --no-bias-correction: for int8 only (the precision is fp16)"),
], ids=["fp16-nv_small-partition", "fp16-nv_small-compile", "fp16-nv_small-accuracy",
        "int8-no-fuse", "int8-no-fuse-accuracy", "unknown-method", "calibration-with-fp16",
        "method-with-fp32", "zero-calibration", "negative-seed", "accuracy-of-fp32",
        "accuracy-without-precision", "zero-inputs", "run-int16", "bench-fp32-only",
        "ptq-options-with-fp16"])
def test_precision_argument_errors(capsys, argv, status, message):
    got, _, err = run_cli(capsys, *argv)
    assert got == status and message in err, err
    assert "Traceback" not in err
