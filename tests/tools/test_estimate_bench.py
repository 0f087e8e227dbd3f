"""estimate() against what a real run's profile records, its precision checks, the sweep's
sanity, and the benchmark's Python API (a Relax module without PyTorch)."""
import numpy as np
import pytest

import accel_codegen as ac
from accel_codegen import AccelConfig, AccelInvalidError, AccelUnsupportedError
from accel_codegen.tools.bench import format_table, run_bench
from accel_codegen.sim.costs import engine_names
from accel_codegen.tools.estimation import (estimate, format_sweep, mac_array, model_runs, sweep,
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
    assert report.total_energy_pj == prof.totals["energy_pj"] > 0
    assert [(layer.label, layer.cycles, layer.bytes_read, layer.bytes_written, layer.energy_pj,
             layer.dram_energy_pj, layer.ops) for layer in report.layers] == \
        [(r.label, r.cycles, r.bytes_read, r.bytes_written, r.energy_pj, r.dram_energy_pj,
          r.ops) for r in prof.records]
    assert report.host_ops == 0
    assert report.frames_per_s == pytest.approx(1e9 / report.total_cycles)
    # The stem reads the function's 3-channel input: image input, in the estimate and the run.
    assert report.layers[0].engines == "CONV(image)+SDP+PDP" == engine_names(prof.records[0])
    assert all("(image)" not in layer.engines for layer in report.layers[1:])


def test_the_code_generator_picks_image_input_and_multi_batch_where_the_config_has_them():
    """LeNet-5 on a batch of 4 (int8), on nv_full with a 16 KiB CBUF (so that fc1's 48,000
    weight bytes do not fit): its first conv reads the 1-channel input as R8 pixels, its three
    dense layers fetch their weights once for the four images; without the batch feature each
    image fetches fc1's again. The built run computes what PyTorch does, and its profile is
    the estimate, cycle for cycle (the generated C sets the fields the estimate assumed)."""
    from accel_codegen import frontend, models
    from accel_codegen.sim.config import AccelConfig
    from conftest import random_inputs, sqnr, torch_forward

    model, (x,) = models.get_model("lenet5", batch=4)
    mod, params = frontend.from_pytorch(model, (x,))
    calibration = random_inputs(tuple(x.shape), 4, seed=5)
    config = AccelConfig.preset("nv_full").replace(name="cbuf16k", cbuf_bytes=16 * 1024)
    single = config.replace(name="cbuf16k_single", features=tuple(
        f for f in config.features if f != "batch"))
    batched = estimate(mod, params, config=config, precision="int8")
    assert [layer.engines.split("+")[0] for layer in batched.layers] == \
        ["CONV(image)", "CONV", "CONV(batch)", "CONV(batch)", "CONV(batch)"]
    unbatched = estimate(mod, params, config=single, precision="int8")
    assert [layer.engines.split("+")[0] for layer in unbatched.layers] == \
        ["CONV(image)", "CONV", "CONV", "CONV", "CONV"]
    assert unbatched.layers[2].bytes_read - batched.layers[2].bytes_read == 3 * 400 * 120
    exe = ac.build(mod, params, config=config, precision="int8", calibration=calibration)
    vm = ac.virtual_machine(exe)
    with ac.profile() as prof:
        y = run_main(vm, x.numpy())
    assert [(layer.label, layer.cycles, layer.bytes_read) for layer in batched.layers] == \
        [(r.label, r.cycles, r.bytes_read) for r in prof.records]
    assert sqnr(y, torch_forward(model, x)) > 25


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
    assert f"energy {report.total_energy_pj / 1e6:,.1f} uJ per frame (DRAM" in text
    data = report.to_dict()
    assert data["total_cycles"] == report.total_cycles and len(data["layers"]) == 5
    assert data["total_energy_pj"] == report.total_energy_pj == sum(
        layer["energy_pj"] for layer in data["layers"])
    assert data["frames_per_joule"] == pytest.approx(1e12 / report.total_energy_pj)
    assert data["total_energy_pj"] == pytest.approx(
        sum(data[f"{part}_energy_pj"] for part in ("mac", "cbuf", "dram", "engine")))
    assert set(data["layers"][0]) >= {"label", "primitive", "engines", "macs", "cycles",
                                      "bytes_read", "bytes_written", "utilization"}
    assert 0 < data["utilization"] <= 1
    assert [label for label, *_ in model_runs(mod, params)] == \
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
    report = estimate(mod, params, config="nv_full")
    assert full["total_cycles"] == report.total_cycles
    assert full["total_energy_pj"] == report.total_energy_pj
    assert full["frames_per_joule"] == report.frames_per_joule
    assert "frames/s" in format_sweep(result) and "frames/J" in format_sweep(result)


def test_every_sweep_point_equals_estimate_there(zoo):
    """The sweep partitions once per partition (COST_FIELDS never change it) and costs each
    configuration in one call: every figure equals estimate() at that point, also where the
    points differ in features (nv_small has no element-wise unit: the residual adds stay
    apart) and in energies."""
    mod, params, _ = zoo("resnet18").imported
    full, small = AccelConfig.preset("nv_full"), AccelConfig.preset("nv_small")
    points = [({"point": 0}, full), ({"point": 1}, small),
              ({"point": 2}, full.replace(atomic_c=32, atomic_k=8, cbuf_bytes=128 * 1024,
                                          dram_pj_per_byte=100.0, name="x")),
              ({"point": 3}, small.replace(dram_bytes_per_s=1e9, mac_int8_pj=0.0))]
    rows = sweep(mod, params, points, precision="int8", progress=False)["points"]
    for row, (_, config) in zip(rows, points):
        report = estimate(mod, params, config=config, precision="int8")
        expected = {**report.totals(), "layers": len(report.layers),
                    "host_ops": report.host_ops,
                    "memory_bound_share": report.memory_bound_cycles / report.total_cycles}
        del expected["seconds"], expected["memory_bound_cycles"], expected["macs"]
        assert {key: row[key] for key in expected} == expected, config.name
    assert rows[0]["layers"] != rows[1]["layers"]  # two partitions


def test_sweep_equals_estimate_with_memory_choices(zoo):
    """Where the code generator's memory choices change the chains (feature maps and weights in
    SRAM, sparse weights), the sweep applies them per configuration and Winograd pick, as a
    build and estimate() do: points share a partition but differ in the MAC array and CBUF (so
    in bytes, plans and picks)."""
    mod, params, _ = zoo("resnet18", keep_params_as_input=True).imported
    rng = np.random.default_rng(0)
    params = {name: np.asarray(value) for name, value in params.items()}
    pruned = {name: np.where(rng.random(value.shape) < 0.7, 0, value).astype(value.dtype)
              if value.ndim == 4 else value for name, value in params.items()}
    full = AccelConfig.preset("nv_full")
    sram = full.replace(sram_bytes=1 << 20, name="sram")
    points = [({"point": 0}, sram), ({"point": 1}, sram.replace(atomic_c=32, atomic_k=16,
                                                                 cbuf_bytes=256 * 1024,
                                                                 name="sram-small")),
              ({"point": 2}, full), ({"point": 3}, full.replace(dram_bytes_per_s=2e9, name="d2"))]
    for precision in ("int8", "fp16"):
        rows = sweep(mod, pruned, points, precision=precision, progress=False)["points"]
        for row, (_, config) in zip(rows, points):
            report = estimate(mod, pruned, config=config, precision=precision)
            assert row["total_cycles"] == report.total_cycles, (precision, config.name)
            assert row["dram_bytes"] == report.totals()["dram_bytes"], (precision, config.name)
            assert row["total_energy_pj"] == report.totals()["total_energy_pj"]
        assert rows[0]["sram_bytes"] > 0 and rows[2]["sram_bytes"] == 0
        assert rows[2]["dram_bytes"] < sweep(mod, params, points[2:3], precision=precision,
                                             progress=False)["points"][0]["dram_bytes"]


def test_run_bench_on_a_relax_module_skips_pytorch(zoo):
    mod, params, x = zoo("lenet5").imported
    result = run_bench(mod, [x], modes=["fused", "decomposed", "pytorch"], repeat=2,
                       progress=False, per_layer=True)
    assert set(result["modes"]) == {"fused", "decomposed"}
    assert "pytorch" in result["skipped"]
    report = estimate(mod, params)
    fused, decomposed = result["modes"]["fused"], result["modes"]["decomposed"]
    assert fused["cycles"] == report.total_cycles
    assert fused["energy_pj"] == report.total_energy_pj
    assert fused["frames_per_joule"] == report.frames_per_joule
    assert decomposed["energy_pj"] > fused["energy_pj"]  # the intermediates' DRAM traffic
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

    from accel_codegen.tools.progress import ProgressBar

    stream = io.StringIO()
    bar = ProgressBar("work", enabled=True, stream=stream)
    for done in range(4):
        bar(done, 3)
    assert "work: 100%" in stream.getvalue() and "3/3" in stream.getvalue()  # tqdm's bar
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


def test_the_per_layer_bench_takes_the_conv_modes_of_the_planned_program():
    """bench --per-layer times each layer with the CONV modes its code has (the planned
    Program's, Winograd chosen with the memory plan), not a per-layer decision of its own."""
    from accel_codegen import frontend
    from accel_codegen.tools.estimation import model_runs
    from test_program_reference import _config, tiny_cnn

    model, inputs = tiny_cnn()
    mod, params = frontend.from_pytorch(model, inputs)
    config = _config("nv_full_sram")
    runs = model_runs(mod, params, config=config)
    program = ac.program_of(ac.partition_for_accel(mod, params, config=config))
    emitted = {run["label"]: run["modes"] or {} for function in program["functions"]
               for run in function["runs"]}
    assert {label: modes["fused"] for label, _, _, modes in runs} == emitted
    assert any(modes["fused"].get("mode") == "winograd" for *_, modes in runs)
