"""The timeline of a model: the estimate's Chrome trace is the profiled run's, cycle for cycle
(fused and decomposed builds); ``accel-codegen run --trace`` and ``estimate --trace`` write
it; plot_timeline draws it."""
import json

import pytest

import accel_codegen as ac
from accel_codegen.tools.estimation import estimate
from accel_codegen.tools.plotting import plot_timeline
from accel_codegen.tools.report import name_trace, source_names
from conftest import run_cli, run_main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _profiled_trace(mod, params, x, config, fuse):
    vm = ac.virtual_machine(ac.build(mod, params, config=config, fuse=fuse))
    with ac.profile() as prof:
        run_main(vm, x)
    return prof.chrome_trace(config)


@pytest.mark.parametrize("config, fuse", [("nv_full", True), ("nv_large", False)],
                         ids=["fused", "decomposed"])
def test_the_estimate_trace_is_the_profiled_run_trace(zoo, config, fuse):
    mod, params, x = zoo("lenet5").imported
    expected = _profiled_trace(mod, params, x, config, fuse)
    report = estimate(mod, params, config=config, fuse=fuse)
    trace = report.chrome_trace()
    assert trace == expected
    runs = [e for e in trace["traceEvents"] if e.get("cat") == "run"]
    assert [e["name"] for e in runs] == [layer.label for layer in report.layers]
    assert {e["args"]["mode"] for e in runs} == {"fused" if fuse else "independent"}
    assert trace["otherData"]["total_cycles"] == report.total_cycles


def test_estimate_writes_its_trace(zoo, tmp_path):
    mod, params, _ = zoo("lenet5").imported
    report = estimate(mod, params, config="nv_full")
    path = report.to_chrome_trace(tmp_path / "estimate.json")
    assert json.loads(path.read_text()) == report.chrome_trace()
    assert "ops" not in report.to_dict()["layers"][0]  # the JSON report is unchanged


@pytest.fixture(scope="module")
def compiled(tmp_path_factory, zoo):
    import numpy as np

    mod, params, x = zoo("lenet5").imported
    directory = tmp_path_factory.mktemp("trace")
    library, x_path = directory / "lenet5.so", directory / "x.npy"
    ac.export_library(ac.build(mod, params, config="nv_full"), str(library))
    np.save(x_path, x)
    return library, x_path


def test_run_writes_the_trace_and_its_plot(capsys, compiled, tmp_path, zoo):
    library, x = compiled
    out_json, out_png = tmp_path / "run.json", tmp_path / "run.png"
    status, out, err = run_cli(capsys, "run", library, "--input", x, "--trace", out_json,
                               "--trace-plot", out_png)
    assert status == 0, err
    assert f"wrote {out_json}" in out and f"wrote {out_png}" in out
    trace = json.loads(out_json.read_text())
    mod, params, _ = zoo("lenet5").imported
    report = estimate(mod, params, config="nv_full")  # named from the library's record
    assert trace == name_trace(report.chrome_trace(), source_names(report.source_ops))
    assert out_png.read_bytes()[:8] == PNG_MAGIC


def test_estimate_command_writes_the_same_trace(capsys, tmp_path, zoo):
    out_json, out_png = tmp_path / "estimate.json", tmp_path / "estimate.png"
    status, out, err = run_cli(capsys, "estimate", "lenet5", "--trace", out_json,
                               "--trace-plot", out_png)
    assert status == 0, err
    assert f"wrote {out_json}" in out and out_png.read_bytes()[:8] == PNG_MAGIC
    mod, params, _ = zoo("lenet5").imported
    report = estimate(mod, params)  # the command's trace names the source model's layers
    assert json.loads(out_json.read_text()) == name_trace(report.chrome_trace(),
                                                           source_names(report.source_ops))
    status, _, err = run_cli(capsys, "estimate", "lenet5", "--trace", tmp_path / "t.txt")
    assert status == 1 and "t.txt' must end in .json" in err, err


@pytest.mark.parametrize("argv, message", [
    (["--trace", "t.txt"], "t.txt' must end in .json"),
    (["--trace-plot", "t.svg"], "t.svg' must end in .png"),
    (["--trace", "t.json", "--config", "nv_small"],
     "compiled for configuration nv_full, not nv_small (--config)"),
], ids=["not-json", "not-png", "other-config"])
def test_run_trace_errors(capsys, compiled, tmp_path, argv, message):
    library, x = compiled
    argv = [str(tmp_path / a) if a.startswith("t.") else a for a in argv]
    status, _, err = run_cli(capsys, "run", library, "--input", x, *argv)
    assert status == 1 and message in err, err


def test_plot_timeline_draws_panels_and_windows(zoo, tmp_path):
    mod, params, _ = zoo("lenet5").imported
    fused = estimate(mod, params, config="nv_full").chrome_trace()
    decomposed = estimate(mod, params, config="nv_full", fuse=False).to_chrome_trace(
        tmp_path / "decomposed.json")
    for name, kwargs in (("all.png", {}), ("first.png", {"runs": 2}),
                         ("window.png", {"runs": (1, 3), "titles": ["fused", "decomposed"]})):
        trace = fused if name == "all.png" else [fused, decomposed]
        path = plot_timeline(trace, tmp_path / name, **kwargs)
        assert path.read_bytes()[:8] == PNG_MAGIC
