"""Command-line options of issue 30: `sweep --no-winograd` keeps every convolution direct (it
was accepted and ignored), `--version`, `compile --dump-code DIR`, and `run` taking one .npz
(inputs by name or in order) or `--random` inputs."""
import json
import textwrap

import pytest

from conftest import run_cli

# Two 3x3 convolutions that Winograd makes cheaper on nv_full (stride 1, no groups).
CONV3X3 = textwrap.dedent("""
    import torch

    def build():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(),
                                    torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU()).eval()
        return model, (torch.randn(1, 16, 28, 28),)
    """)


@pytest.fixture
def conv_model(tmp_path):
    path = tmp_path / "conv3x3.py"
    path.write_text(CONV3X3)
    return f"{path}:build"


def test_sweep_no_winograd_is_honoured(capsys, tmp_path, conv_model):
    """--no-winograd gives the direct-convolution estimate at every point, different from the
    default (which takes Winograd where the cost model says it is faster)."""
    results = {}
    for flag in ((), ("--no-winograd",)):
        out_json = tmp_path / f"sweep{len(flag)}.json"
        status, out, err = run_cli(capsys, "sweep", conv_model, "--macs", "256,2048",
                                   "--dram-gbps", "20", "--precision", "int8", "--json",
                                   out_json, *flag)
        assert status == 0, err
        results[bool(flag)] = json.loads(out_json.read_text())
        assert ("every convolution direct" in out) == bool(flag), out
    assert results[True]["winograd"] is False and results[False]["winograd"] is True
    direct = [p["total_cycles"] for p in results[True]["points"]]
    default = [p["total_cycles"] for p in results[False]["points"]]
    assert direct != default
    status, out, err = run_cli(capsys, "estimate", conv_model, "--precision", "int8",
                               "--no-winograd", "--json", tmp_path / "e.json")
    assert status == 0, err
    nv_full = [p for p in results[True]["points"] if p["macs"] == 2048][0]
    assert nv_full["total_cycles"] == json.loads((tmp_path / "e.json").read_text())[
        "total_cycles"]


def test_version_names_the_package_and_its_dependencies_without_importing_tvm():
    """`accel-codegen --version` answers at once (no `import tvm`) with this package's version,
    the simulator library's ABI and the installed TVM and torch."""
    import importlib.metadata
    import subprocess
    import sys

    import accel_codegen

    code = textwrap.dedent("""
        import sys
        from accel_codegen.tools.cli import main
        try:
            main(["--version"])
        except SystemExit as exit_:
            print("STATUS", exit_.code, "tvm" in sys.modules)
        """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd="/", timeout=120)
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == "STATUS 0 False", proc.stdout + proc.stderr
    text = lines[0]
    assert text.startswith(f"accel-codegen {accel_codegen.__version__} (libaccel ABI ")
    for dist in ("apache-tvm", "torch"):
        assert f"{dist} {importlib.metadata.version(dist)}" in text


def test_compile_dump_code_writes_the_generated_c(capsys, tmp_path):
    """--dump-code DIR writes each external function's C as the API gives it
    (generated_sources), named by its run label prefix, and the symbols in functions.txt."""
    import accel_codegen as ac
    from accel_codegen.tools.model_spec import load_model

    directory = tmp_path / "code" / "lenet5"  # parents made
    status, _, err = run_cli(capsys, "compile", "lenet5", "-o", tmp_path / "l.so",
                             "--dump-code", directory)
    assert status == 0, err
    model = load_model("lenet5")
    sources = ac.generated_sources(ac.partition_for_accel(model.mod, model.params))
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        [f"f{i}.c" for i in range(len(sources))] + ["functions.txt"])
    listed = [line.split(" ", 1) for line in (directory / "functions.txt").read_text()
              .splitlines()]
    assert [symbol for _, symbol in listed] == list(sources)
    for name, symbol in listed:
        assert (directory / name).read_text() == sources[symbol]
    assert "accel_" in (directory / "f0.c").read_text()


def test_compile_dump_code_refuses_a_file(capsys, tmp_path):
    (tmp_path / "taken").write_text("")
    status, _, err = run_cli(capsys, "compile", "lenet5", "-o", tmp_path / "l.so",
                             "--dump-code", tmp_path / "taken")
    assert status == 1 and "--dump-code" in err and "is not a directory" in err, err
    assert not (tmp_path / "l.so").exists()


# --- run: inputs by name from an .npz, or drawn at random -------------------------------------

TWO_INPUTS = textwrap.dedent("""
    import torch

    class TwoInputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, image, bias):
            return torch.relu(self.conv(image)) + bias

    def build():
        torch.manual_seed(0)
        return TwoInputs().eval(), (torch.randn(1, 3, 8, 8), torch.randn(1, 4, 8, 8))
    """)


@pytest.fixture(scope="module")
def two_inputs(tmp_path_factory):
    """(directory holding two.so, its input names) for a model of two inputs."""
    from accel_codegen.tools import cli

    directory = tmp_path_factory.mktemp("two_inputs")
    (directory / "two.py").write_text(TWO_INPUTS)

    assert cli.main(["compile", f"{directory / 'two.py'}:build", "-o",
                     str(directory / "two.so")]) == 0
    return directory


def _run_output(capsys, directory, *argv):
    status, out, err = run_cli(capsys, "run", directory / "two.so", "--output",
                               directory / "y.npy", *argv)
    assert status == 0, err
    import numpy as np

    return np.load(directory / "y.npy"), out


def test_run_takes_named_and_positional_npz(capsys, two_inputs):
    import numpy as np

    import accel_codegen as ac

    rng = np.random.default_rng(7)
    image = rng.standard_normal((1, 3, 8, 8), dtype=np.float32)
    bias = rng.standard_normal((1, 4, 8, 8), dtype=np.float32)
    names = [name for name, _, _ in ac.virtual_machine(two_inputs / "two.so").input_specs()]
    assert names == ["image", "bias"]
    np.save(two_inputs / "image.npy", image)
    np.save(two_inputs / "bias.npy", bias)
    expected, _ = _run_output(capsys, two_inputs, "-i", two_inputs / "image.npy", "-i",
                              two_inputs / "bias.npy")
    np.savez(two_inputs / "named.npz", bias=bias, image=image)  # not in the model's order
    np.savez(two_inputs / "ordered.npz", image, bias)
    for archive in ("named.npz", "ordered.npz"):
        got, _ = _run_output(capsys, two_inputs, "-i", two_inputs / archive)
        np.testing.assert_array_equal(got, expected)
    np.savez(two_inputs / "wrong.npz", image=image, offset=bias)
    status, _, err = run_cli(capsys, "run", two_inputs / "two.so", "-i",
                             two_inputs / "wrong.npz")
    assert status == 1 and "missing: ['bias']" in err and "unknown: ['offset']" in err, err


def test_run_random_fills_the_inputs_with_a_seed(capsys, two_inputs):
    import numpy as np

    from accel_codegen.tools.model_spec import random_inputs

    got, out = _run_output(capsys, two_inputs, "--random", "--seed", "5")
    assert "image [1, 3, 8, 8] float32, bias [1, 4, 8, 8] float32" in out
    (image, bias) = random_inputs([np.zeros((1, 3, 8, 8), np.float32),
                                   np.zeros((1, 4, 8, 8), np.float32)], 1, 5)[0]
    np.savez(two_inputs / "drawn.npz", image=image, bias=bias)
    expected, _ = _run_output(capsys, two_inputs, "-i", two_inputs / "drawn.npz")
    np.testing.assert_array_equal(got, expected)
    other, _ = _run_output(capsys, two_inputs, "--random", "--seed", "6")
    assert not np.array_equal(other, got)


@pytest.mark.parametrize("argv, message", [
    ((), "give the inputs"),
    (("--random", "-i", "x.npy"), "not both"),
], ids=["no-inputs", "both"])
def test_run_input_errors(capsys, two_inputs, argv, message):
    status, _, err = run_cli(capsys, "run", two_inputs / "two.so", *argv)
    assert status == 1 and message in err, err


def test_partition_program_writes_the_program_of_the_build(capsys, tmp_path):
    """partition --program out.json: the Program the code is generated from (program_of),
    tagged with its schema; a path of another suffix is refused before the work."""
    import accel_codegen as ac
    from accel_codegen.tools.model_spec import load_model

    out = tmp_path / "program.json"
    status, _, err = run_cli(capsys, "partition", "lenet5", "--program", out)
    assert status == 0, err
    written = json.loads(out.read_text())
    assert written.pop("schema") == "accel-codegen/program/1"
    model = load_model("lenet5")
    assert written == ac.program_of(ac.partition_for_accel(model.mod, model.params))
    assert [run["key"] for run in written["functions"][0]["runs"]] == \
        [f"f0.{i}" for i in range(5)]
    status, _, err = run_cli(capsys, "partition", "lenet5", "--program", tmp_path / "p.txt")
    assert status != 0 and "--program path" in err and "must end in .json" in err
