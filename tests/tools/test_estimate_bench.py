"""estimate() against what a real run's profile records, its precision checks, the sweep's
sanity, and the benchmark's Python API (a Relax module without PyTorch)."""
import pytest

import accel_codegen as ac
from accel_codegen import AccelInvalidError, AccelUnsupportedError
from accel_codegen.bench import format_table, run_bench
from accel_codegen.sim.costs import engine_names
from accel_codegen.estimation import (estimate, format_sweep, mac_array, model_layers, sweep,
                                      sweep_configs)
from conftest import run_main


def _profiled(mod, params, x, config, fuse):
    vm = ac.virtual_machine(ac.build(mod, params, config=config, fuse=fuse))
    with ac.profile() as prof:
        run_main(vm, x)
    return prof


def test_estimate_equals_a_profiled_run_of_resnet18(zoo):
    mod, params, x = zoo("resnet18").imported
    report = estimate(mod, params, config="nv_full")
    prof = _profiled(mod, params, x, "nv_full", True)
    assert report.total_cycles == prof.totals["cycles"]
    assert report.bytes_read == prof.totals["bytes_read"]
    assert report.bytes_written == prof.totals["bytes_written"]
    assert report.macs == prof.totals["macs"]
    assert [(layer.label, layer.cycles, layer.bytes_read, layer.bytes_written)
            for layer in report.layers] == \
        [(r.label, r.cycles, r.bytes_read, r.bytes_written) for r in prof.records]
    assert report.host_ops == 0
    assert report.frames_per_s == pytest.approx(1e9 / report.total_cycles)


@pytest.mark.parametrize("config", ["nv_small", "nv_large"])
def test_estimate_equals_a_profiled_decomposed_run(zoo, config):
    mod, params, x = zoo("lenet5").imported
    report = estimate(mod, params, config=config, fuse=False)
    prof = _profiled(mod, params, x, config, False)
    assert [(layer.label, layer.mode, layer.cycles, layer.bytes_read + layer.bytes_written)
            for layer in report.layers] == \
        [(r.label, r.mode, r.cycles, r.bytes_read + r.bytes_written) for r in prof.records]


def test_report_table_and_dict(zoo):
    mod, params, _ = zoo("lenet5").imported
    report = estimate(mod, params, config="nv_small")
    text = str(report)
    assert "nv_small" in text and "total" in text and "frames/s" in text
    data = report.to_dict()
    assert data["total_cycles"] == report.total_cycles and len(data["layers"]) == 5
    assert set(data["layers"][0]) >= {"label", "primitive", "engines", "macs", "cycles",
                                      "bytes_read", "bytes_written", "utilization"}
    assert 0 < data["utilization"] <= 1
    assert [label for label, _, _ in model_layers(mod, params)] == \
        [layer.label for layer in estimate(mod, params).layers]


@pytest.mark.parametrize("config, precision, error, message", [
    ("nv_small", "fp16", AccelUnsupportedError, "nv_small has no fp16"),
    ("nv_full", "int16", AccelUnsupportedError, "emits fp32, fp16, int8 only"),
    ("nv_full", "fp64", AccelInvalidError, "unknown precision 'fp64'"),
])
def test_precision_checks(zoo, config, precision, error, message):
    mod, params, _ = zoo("lenet5").imported
    with pytest.raises(error, match=message):
        estimate(mod, params, config=config, precision=precision)


def test_estimate_rejects_a_non_module():
    with pytest.raises(AccelInvalidError, match="tvm.IRModule"):
        estimate("resnet18")


@pytest.mark.parametrize("macs, array", [(16, (2, 8)), (64, (8, 8)), (256, (32, 8)),
                                         (1024, (64, 16)), (2048, (64, 32)), (4096, (64, 64))])
def test_mac_array_mapping(macs, array):
    assert mac_array(macs) == array


@pytest.mark.parametrize("macs", [0, 8, 100, 1000])
def test_mac_array_rejects(macs):
    with pytest.raises(ValueError, match="powers of two"):
        mac_array(macs)


def test_more_dram_bandwidth_never_lowers_frames_per_s(zoo):
    mod, params, _ = zoo("resnet18").imported
    dram = [1, 2, 5, 10, 20, 50]
    result = sweep(mod, params, sweep_configs("nv_full", [256, 2048], dram, [128, 512]),
                   model_name="resnet18", progress=False)
    assert len(result["points"]) == 2 * 2 * len(dram)
    for macs in (256, 2048):
        for cbuf in (128, 512):
            series = [p for p in result["points"] if p["macs"] == macs and p["cbuf_kib"] == cbuf]
            fps = [p["frames_per_s"] for p in sorted(series, key=lambda p: p["dram_gbps"])]
            assert fps == sorted(fps), (macs, cbuf, fps)
            # Traffic depends on the CBUF, and on the bandwidth only through the compiler's
            # Winograd choice: a layer takes Winograd's larger pre-transformed weights only
            # where it still gets faster, which more bandwidth never undoes.
            traffic = [p["bytes"] for p in sorted(series, key=lambda p: p["dram_gbps"])]
            assert traffic == sorted(traffic), (macs, cbuf, traffic)
    # nv_full itself is one of the points: the sweep is estimate() on it.
    full = next(p for p in result["points"] if p["macs"] == 2048 and p["dram_gbps"] == 20
                and p["cbuf_kib"] == 512)
    assert full["total_cycles"] == estimate(mod, params, config="nv_full").total_cycles
    assert "frames/s" in format_sweep(result)


def test_run_bench_on_a_relax_module_skips_pytorch(zoo):
    mod, params, x = zoo("lenet5").imported
    result = run_bench(mod, [x], modes=["fused", "decomposed", "pytorch"], repeat=2,
                       progress=False, per_layer=True)
    assert set(result["modes"]) == {"fused", "decomposed"}
    assert "pytorch" in result["skipped"]
    assert result["modes"]["fused"]["cycles"] == estimate(mod, params).total_cycles
    assert len(result["layers"]) == 5
    assert "skipped" in format_table(result)


def test_run_bench_rejects_bad_arguments(zoo):
    mod, _, x = zoo("lenet5").imported
    with pytest.raises(AccelInvalidError, match="unknown modes"):
        run_bench(mod, [x], modes=["gpu"])
    with pytest.raises(AccelInvalidError, match="needs its example inputs"):
        run_bench(mod)
    with pytest.raises(AccelInvalidError, match="repeat"):
        run_bench(mod, [x], repeat=0)


def test_progress_bar_draws_on_a_terminal_only():
    import io

    from accel_codegen.progress import ProgressBar

    stream = io.StringIO()
    bar = ProgressBar("work", enabled=True, stream=stream)
    for done in range(4):
        bar(done, 3)
    assert "3/3 work" in stream.getvalue() and "[" + "#" * 30 + "]" in stream.getvalue()
    assert stream.getvalue().endswith("\r")  # finished: the line is cleared
    quiet = io.StringIO()  # StringIO.isatty() is False: a pipe
    bar = ProgressBar("work", stream=quiet)
    bar(1, 3)
    bar(3, 3)
    assert quiet.getvalue() == ""


def test_winograd_choice_estimate_equals_profile_and_report(zoo):
    """nv_full runs the 3x3 stride-1 convolutions where Winograd is faster in Winograd mode:
    the estimate, the profile and the partition report say which, and agree cycle for cycle;
    winograd=False keeps every convolution direct."""
    mod, params, x = zoo("resnet18").imported
    report = estimate(mod, params, config="nv_full", precision="fp16")
    vm = ac.virtual_machine(ac.build(mod, params, config="nv_full", precision="fp16"))
    with ac.profile() as prof:
        run_main(vm, x)
    assert [(layer.label, layer.engines, layer.cycles) for layer in report.layers] == \
        [(r.label, engine_names(r), r.cycles) for r in prof.records]
    winograd = [layer.label for layer in report.layers if "CONV(wg)" in layer.engines]
    assert winograd
    direct = estimate(mod, params, config="nv_full", precision="fp16", winograd=False)
    assert not any("CONV(wg)" in layer.engines for layer in direct.layers)
    assert report.total_cycles < direct.total_cycles
    assert all(a.cycles < b.cycles for a, b in zip(report.layers, direct.layers)
               if a.label in winograd)
    parts = ac.partition_report(mod, params, config="nv_full", precision="fp16")
    convs = [op for op in parts.offloaded if op.op == "relax.nn.conv2d"]
    assert {op.conv_mode for op in convs} >= {"winograd", "direct"}
    assert "(winograd)" in str(parts)
    on_large = estimate(mod, params, config="nv_large", precision="int8")
    assert not any("CONV(wg)" in layer.engines for layer in on_large.layers)


def test_winograd_reasons_of_the_choice(zoo):
    from accel_codegen.compiler.partition import match_composites
    from accel_codegen.compiler.walk import runs

    mod, params, _ = zoo("resnet18").imported
    config = ac.AccelConfig.preset("nv_full")
    layers = [run.layer for run in runs(match_composites(mod, params, config=config,
                                                         precision="int8"))]
    reasons = {layer.conv_mode(config, True, "int8")[1].split(" (")[0].split(" at ")[0]
               for layer in layers if layer.conv is not None}
    assert "" in reasons                                  # some run in Winograd mode
    assert "kernel 1x1" in reasons                        # a 1x1 projection
    assert "kernel 3x3" in reasons                        # 3x3 stride 2
    assert layers[0].conv_mode(config, True, "int8", winograd=False) == \
        ("direct", "winograd=False")
