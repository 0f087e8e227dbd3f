"""Mixed int8/fp16 precision through the whole flow: a build with each layer in its own
precision (converting runs between them), its ends against the plain int8 and fp16 builds, its
profile against the estimate, the search for a target output SQNR, the CLI flags, and the
errors for bad targets and assignments."""
import math

import pytest

import accel_codegen as ac
from accel_codegen import AccelInvalidError, AccelUnsupportedError
from accel_codegen.compiler.partition import layer_keys, match_composites
from conftest import random_inputs, run_all, run_cli, run_main, sqnr

CALIBRATION = 4
# The small CNN below on these inputs (the search calibrates on 3 and holds 1 back): all-int8
# about 47 dB, all-fp16 about 71 dB against the fp32 build (the fully connected layer adds
# most of int8's noise), so this target needs layers of each. (On LeNet-5 the cheapest assignment above 50 dB is all-fp16: its layers are so small
# that a converting run costs more than int8 saves.)
TARGET_DB = 50.0
# A conv stack that int8 runs 1.4x faster than fp16 on nv_full, and a classifier.
SMALL_CNN = """
import torch


class SmallCnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.convs = torch.nn.ModuleList(
            [torch.nn.Conv2d(3 if i == 0 else 64, 64, 3, padding=1) for i in range(4)])
        self.fc = torch.nn.Linear(64, 10)

    def forward(self, x):
        for conv in self.convs:
            x = torch.relu(conv(x))
        return self.fc(x.mean((2, 3)))


def small_cnn():
    return SmallCnn().eval(), (torch.randn(1, 3, 32, 32),)
"""
# ResNet-18 with every other layer int8 measured 33.5 dB against fp32 (all-int8 29.9 dB, all-fp16
# 55.2 dB); the bound leaves about 5 dB of margin.
RESNET_ALTERNATING_MIN_DB = 28.0


@pytest.fixture(scope="module")
def lenet(zoo):
    lenet = zoo("lenet5")
    return lenet.mod, random_inputs(tuple(lenet.x.shape), CALIBRATION, 1234)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("mixed") / "small_cnn.py"
    path.write_text(SMALL_CNN)
    return path


@pytest.fixture(scope="module")
def small(model_file):
    """(Relax module, calibration inputs) of SMALL_CNN."""
    from accel_codegen import frontend
    from accel_codegen.tools.model_spec import load_callable

    model, inputs = load_callable(f"{model_file}:small_cnn")()
    mod, _ = frontend.from_pytorch(model, inputs)
    return mod, random_inputs((1, 3, 32, 32), CALIBRATION, 1234)


@pytest.fixture(scope="module")
def search(small):
    """The search for TARGET_DB and the module it built."""
    mod, calibration = small
    part = ac.partition_for_accel(mod, precision="mixed", calibration=calibration,
                                  target_sqnr_db=TARGET_DB)
    return ac.mixed_precision_of(part), part


def _keys(mod):
    return layer_keys(match_composites(mod, config="nv_full", precision="int8"))


# --- builds with a given assignment -------------------------------------------------------------

def test_the_all_int8_and_all_fp16_ends_are_the_plain_builds(lenet):
    mod, calibration = lenet
    int8 = ac.partition_for_accel(mod, precision="int8", calibration=calibration,
                                  equalize=False)  # mixed builds do not equalise
    keys = _keys(mod)
    with pytest.raises(AccelInvalidError, match="equalize=True"):
        ac.partition_for_accel(mod, precision="mixed", calibration=ac.calibration_of(
            ac.partition_for_accel(mod, precision="int8", calibration=calibration)),
            layer_precisions={k: "int8" for k in keys})
    plain = {"int8": int8, "fp16": ac.partition_for_accel(mod, precision="fp16")}
    for precision, reference in plain.items():
        mixed = ac.partition_for_accel(mod, precision="mixed",
                                       calibration=ac.calibration_of(int8),
                                       layer_precisions={k: precision for k in keys})
        assert run_all(ac.virtual_machine(ac.build(mixed)), calibration).tobytes() == \
            run_all(ac.virtual_machine(ac.build(reference)), calibration).tobytes()
        assert not any("sdp.convert = 1" in s for s in ac.generated_sources(mixed).values())
        assert ac.estimate(mod, precision="mixed", layer_precisions={
            k: precision for k in keys}).total_cycles == \
            ac.estimate(mod, precision=precision).total_cycles


def test_a_mixed_resnet_runs_as_estimated_and_matches_fp32(zoo):
    """ResNet-18, every other layer int8: residual operands cross between precisions too. On
    nv_full with 1 MiB of SRAM and weight compression, so that the memory plan (feature maps
    and weights in SRAM, sparse weights) takes each layer's precision."""
    from accel_codegen import AccelConfig

    base = AccelConfig.preset("nv_full")
    config = base.replace(name="nv_full_sram", sram_bytes=1 << 20, features=tuple(
        sorted(set(base.features) | {"weight_compression"})))
    mod, _, _ = zoo("resnet18").imported
    calibration = random_inputs(tuple(zoo("resnet18").x.shape), 2, 1234)
    keys = _keys(mod)
    chosen = {k: "int8" if i % 2 else "fp16" for i, k in enumerate(keys)}
    part = ac.partition_for_accel(mod, config=config, precision="mixed",
                                  calibration=calibration, layer_precisions=chosen)
    vm = ac.virtual_machine(ac.build(part))
    with ac.profile() as prof:
        out = run_main(vm, calibration[0])
    reference = run_main(ac.virtual_machine(ac.build(mod, precision="fp32")), calibration[0])
    assert sqnr(out, reference) >= RESNET_ALTERNATING_MIN_DB
    assert {op.precision for op in prof.ops} == {"int8", "fp16"}
    assert prof.totals["sram_bytes"] > 0
    estimate = ac.estimate(mod, config=config, precision="mixed", layer_precisions=chosen)
    assert [(layer.label, layer.cycles, layer.bytes_read, layer.bytes_written)
            for layer in estimate.layers] == \
        [(r.label, r.cycles, r.bytes_read, r.bytes_written) for r in prof.records]
    converts = [layer for layer in estimate.layers if layer.label.endswith("x convert")]
    assert converts and all(layer.engines == "SDP" for layer in converts)
    report = ac.partition_report(part)
    assert report.precision == "mixed" and report.layer_precisions == chosen
    assert "layers by precision: 9 int8, 10 fp16" in str(report)
    assert "accel int8" in str(report) and "accel fp16" in str(report)


# --- the search ---------------------------------------------------------------------------------

def test_the_search_meets_the_target_between_the_two_ends(small, search):
    mod, calibration = small
    result, part = search
    assert result.int8.sqnr_db < TARGET_DB < result.fp16.sqnr_db
    assert set(result.layer_precisions.values()) == {"int8", "fp16"}
    assert result.int8.cycles < result.point.cycles < result.fp16.cycles
    assert result.int8.cycles == ac.estimate(mod, precision="int8").total_cycles
    assert result.fp16.cycles == ac.estimate(mod, precision="fp16").total_cycles
    # Measured again, independently: the built module on the inputs it calibrated on (the
    # first three) and on the one the search held back from calibration (the last).
    assert (result.samples, result.held_back, result.outputs) == (CALIBRATION - 1, 1, 1)
    reference_vm = ac.virtual_machine(ac.build(mod, precision="fp32"))
    vm = ac.virtual_machine(ac.build(part))
    for inputs, searched in ((calibration[:-1], result.point.sqnr_db),
                             (calibration[-1:], result.point.held_back_sqnr_db)):
        measured = sqnr(run_all(vm, inputs), run_all(reference_vm, inputs))
        assert measured == pytest.approx(searched, abs=1e-9)
        assert measured >= TARGET_DB
    assert ac.estimate(mod, precision="mixed", layer_precisions=result.layer_precisions
                       ).total_cycles == result.point.cycles
    # No measured point that meets the target costs fewer cycles.
    assert all(p.cycles >= result.point.cycles for p in result.path if p.meets(TARGET_DB))
    assert ac.partition_report(part).layer_precisions == result.layer_precisions


def test_the_search_builds_its_ends_and_the_points_it_measures_only(small, search):
    """The layers are ranked by emulated int8 in the fp32 build (no build per layer, as
    before: 2 + one per layer + the points measured); every build is a measured point."""
    mod, _ = small
    result, _ = search
    measured = sum(p.measured for p in result.path)
    assert result.builds <= measured < len(_keys(mod)) + 2
    assert result.int8.measured and result.fp16.measured


def test_the_emulated_sensitivities_rank_the_layers_as_builds_do(small, search):
    """Each layer alone in int8 (every other fp16), built and run: the two layers that cost
    the output most (the last conv and the classifier, about 50 dB against 71 dB for the
    others) are the two the emulation ranks first, in the search's figures."""
    mod, calibration = small
    result, part = search
    reference = run_all(ac.virtual_machine(ac.build(mod, precision="fp32")), calibration[:-1])
    keys, scales = list(result.layer_precisions), ac.calibration_of(part)
    built = {}
    for key in keys:
        alone = {k: "int8" if k == key else "fp16" for k in keys}
        vm = ac.virtual_machine(ac.build(ac.partition_for_accel(
            mod, precision="mixed", calibration=scales, layer_precisions=alone)))
        built[key] = sqnr(run_all(vm, calibration[:-1]), reference)
    worst_built = sorted(keys, key=built.get)[:2]
    assert set(sorted(keys, key=result.sensitivity_db.get)[:2]) == set(worst_built)
    assert set(result.order[:2]) == set(worst_built)


@pytest.mark.parametrize("guess", [1, 10, 37, 38, 39, 90, 120])
def test_the_first_point_meeting_the_target_is_found_in_few_builds(guess):
    """From a guess far off the edge (the emulated prediction may miss by many layers), the
    steps double until the edge is bracketed, then halve: the first point that meets the
    target, in a number of measurements that grows with the logarithm of the miss."""
    from accel_codegen.flows.mixed import _first_meeting

    edge, measured = 38, []

    def meets(k):
        measured.append(k)
        return k >= edge

    assert _first_meeting(120, guess, meets) == edge
    miss = abs(guess - edge) + 1
    assert len(measured) <= 2 * math.ceil(math.log2(miss)) + 2, measured


def test_a_target_all_int8_meets_chooses_all_int8(small, search):
    mod, calibration = small
    from accel_codegen.quantization import calibration as calibration_pass

    low = search[0].int8.worst_sqnr_db - 1.0  # on the calibration and held-back inputs
    calls = []  # the progress the tools draw (a bar on a terminal): each build reported
    before = calibration_pass.progress_factory
    calibration_pass.progress_factory = lambda label: lambda done, total: calls.append(
        (label, done, total))
    try:
        part = ac.partition_for_accel(mod, precision="mixed", calibration=calibration,
                                      target_sqnr_db=low)
    finally:
        calibration_pass.progress_factory = before
    result = ac.mixed_precision_of(part)
    assert set(result.layer_precisions.values()) == {"int8"}
    searched = [(done, total) for label, done, total in calls
                if label == "mixed-precision search"]
    assert searched[0][0] == 0 and searched[-1] == (result.builds, result.builds)
    assert [done for done, _ in searched] == list(range(result.builds + 1))
    assert any(label == "calibration" for label, _, _ in calls)


@pytest.mark.parametrize("target", [0, -3.0, float("inf"), float("nan"), "40", True, None],
                         ids=["zero", "negative", "inf", "nan", "string", "bool", "none"])
def test_bad_targets_are_refused_by_name(lenet, target):
    mod, calibration = lenet
    message = "needs target_sqnr_db" if target is None else "target_sqnr_db = "
    with pytest.raises(AccelInvalidError, match=message):
        ac.partition_for_accel(mod, precision="mixed", calibration=calibration,
                               target_sqnr_db=target)


def test_a_target_beyond_all_fp16_is_out_of_reach(lenet):
    mod, calibration = lenet
    with pytest.raises(AccelInvalidError, match=r"target_sqnr_db = 200 is out of reach: "
                                                r"all-fp16 gives \d+\.\d\d dB"):
        ac.partition_for_accel(mod, precision="mixed", calibration=calibration,
                               target_sqnr_db=200)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"precision": "int8", "calibration": "CALIB", "target_sqnr_db": 40}, AccelInvalidError,
     "are for precision='mixed'"),
    ({"precision": "mixed", "target_sqnr_db": 40}, AccelInvalidError,
     "mixed precision needs calibration"),
    ({"precision": "mixed", "calibration": "CALIB", "target_sqnr_db": 40,
      "layer_precisions": {}}, AccelInvalidError, "one of them"),
    ({"precision": "mixed", "calibration": "CALIB", "layer_precisions": {"f0.0": "int8"}},
     AccelInvalidError, "must name every layer"),
    ({"precision": "mixed", "calibration": "CALIB", "layer_precisions": "KEYS:int4"},
     AccelInvalidError, "each layer is 'int8' or 'fp16'"),
    ({"precision": "mixed", "calibration": "CALIB", "target_sqnr_db": 40, "fuse": False},
     AccelUnsupportedError, "fused chains"),
    ({"precision": "mixed", "calibration": "CALIB", "target_sqnr_db": 40,
      "config": "nv_small"}, AccelUnsupportedError, "has no fp16"),
], ids=["target-with-int8", "no-calibration", "target-and-assignment", "missing-layers",
        "unknown-precision", "decomposed", "nv_small"])
def test_mixed_precision_errors(lenet, kwargs, error, message):
    mod, calibration = lenet
    kwargs = dict(kwargs)
    if kwargs.get("calibration") == "CALIB":
        kwargs["calibration"] = calibration
    if kwargs.get("layer_precisions") == "KEYS:int4":
        kwargs["layer_precisions"] = {k: "int4" for k in _keys(mod)}
    with pytest.raises(error, match=message):
        ac.partition_for_accel(mod, **kwargs)


def test_estimate_of_mixed_needs_an_assignment(lenet):
    with pytest.raises(AccelInvalidError, match="give layer_precisions"):
        ac.estimate(lenet[0], precision="mixed")


# --- the accuracy report -----------------------------------------------------------------------

def test_accuracy_report_of_a_mixed_build(small):
    """Every tensor of a mixed build is compared with its fp32 counterpart in the precision
    of its layer (int8 ones dequantised with their scale; a converting run is no tensor of its
    own); the all-int8 assignment reports what the plain int8 build does, tensor for tensor;
    promoting every other layer (the classifier, which adds most of int8's noise, among
    them) raises the output SQNR."""
    mod, calibration = small
    evaluation = random_inputs((1, 3, 32, 32), 2, 1235)
    keys = _keys(mod)
    alternating = {k: "int8" if i % 2 == 0 else "fp16" for i, k in enumerate(keys)}
    mixed = ac.accuracy_report(mod, inputs=evaluation, precision="mixed",
                               calibration=calibration, layer_precisions=alternating)
    all_int8 = ac.accuracy_report(mod, inputs=evaluation, precision="mixed",
                                  calibration=calibration,
                                  layer_precisions=dict.fromkeys(keys, "int8"))
    plain = ac.accuracy_report(mod, inputs=evaluation, precision="int8",
                               calibration=calibration, equalize=False)
    assert mixed.layer_precisions == alternating and plain.layer_precisions is None
    assert [t.label for t in mixed.tensors] == [t.label for t in plain.tensors]
    assert {t.key for t in mixed.tensors} >= set(keys)
    for t in mixed.tensors:
        int8 = alternating[t.key] == "int8"
        assert (t.scale is not None) == int8, t.label
        assert 20 < t.sqnr_db < 90, t.label
    assert [(t.label, t.sqnr_db, t.scale) for t in all_int8.tensors] == \
        [(t.label, t.sqnr_db, t.scale) for t in plain.tensors]
    assert all_int8.output_sqnr_db == plain.output_sqnr_db
    assert mixed.output_sqnr_db > plain.output_sqnr_db + 3
    text = str(mixed)
    assert f"mixed ({len(keys) - len(keys) // 2} int8 and {len(keys) // 2} fp16 layers)" in text
    assert "prec" in text.splitlines()[1]


# --- the command line ---------------------------------------------------------------------------

def test_cli_accuracy_of_a_mixed_build(capsys, model_file):
    status, out, err = run_cli(capsys, "accuracy", f"{model_file}:small_cnn", "--precision",
                               "mixed", "--target-sqnr", TARGET_DB, "--calibration",
                               CALIBRATION, "--inputs", 2)
    assert status == 0, err
    header = next(line for line in out.splitlines() if line.startswith("mixed ("))
    assert "fp16 layers) on nv_full vs fp32 over 2 inputs" in header
    assert float(header.split("output SQNR")[1].split("dB")[0]) > 40

def test_cli_compiles_and_runs_a_mixed_build(capsys, tmp_path, model_file):
    status, out, err = run_cli(capsys, "compile", f"{model_file}:small_cnn", "-o",
                               tmp_path / "small.so",
                               "--save-input", tmp_path / "x.npy", "--precision", "mixed",
                               "--target-sqnr", TARGET_DB, "--calibration", CALIBRATION)
    assert status == 0, err
    assert f"mixed precision for {TARGET_DB:g} dB output SQNR" in out
    assert "partition for nv_full (fused, mixed)" in out
    chosen = float(out.split("chosen")[1].split("cycles")[1].split("dB")[0])
    assert chosen >= TARGET_DB
    status, out, err = run_cli(capsys, "run", tmp_path / "small.so", "-i", tmp_path / "x.npy",
                               "--precision", "mixed")
    assert status == 0, err
    assert "accelerator precision: fp16, int8" in out


def test_cli_partition_lists_each_layers_precision(capsys, model_file):
    status, out, err = run_cli(capsys, "partition", f"{model_file}:small_cnn", "--precision",
                               "mixed",
                               "--target-sqnr", TARGET_DB, "--calibration", CALIBRATION)
    assert status == 0, err
    assert "layers by precision:" in out
    assert "accel int8" in out and "accel fp16" in out


@pytest.mark.parametrize("argv, status, message", [
    (["--precision", "mixed"], 1, "--precision mixed needs --target-sqnr DB"),
    (["--precision", "mixed", "--target-sqnr", "-5"], 1,
     "target_sqnr_db = -5.0 must be a positive, finite number of dB"),
    (["--precision", "mixed", "--target-sqnr", "loud"], 2, "'loud' is not a number of dB"),
    (["--precision", "int8", "--target-sqnr", "40"], 1,
     "--target-sqnr: for --precision mixed only"),
    (["--precision", "mixed", "--target-sqnr", "40", "--config", "nv_small"], 1,
     "has no fp16"),
], ids=["no-target", "negative", "not-a-number", "not-mixed", "nv_small"])
def test_cli_refuses_bad_mixed_arguments(capsys, argv, status, message):
    got, out, err = run_cli(capsys, "partition", "lenet5", *argv)
    assert got == status
    assert message in err
