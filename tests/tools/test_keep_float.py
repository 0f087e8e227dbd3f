"""Layers kept out of int8 by their source-model names (keep_float= in Python, --keep-float on
the command line) and calibration / evaluation on the user's own data (--calibration-data,
accuracy --inputs DATA.npz) (issue 30)."""
import numpy as np
import pytest

import accel_codegen as ac
from accel_codegen.errors import AccelInvalidError, AccelUnsupportedError
from conftest import run_cli


def _examples(x, count=3):
    rng = np.random.default_rng(5)
    return [(rng.standard_normal(x.shape).astype(np.float32),) for _ in range(count)]


def test_kept_layers_run_in_fp16_and_the_rest_in_int8(zoo):
    mod, params, x = zoo("lenet5").imported
    examples = _examples(x)
    partitioned = ac.partition_for_accel(mod, params, precision="int8", calibration=examples,
                                         keep_float=["features.0", "classifier.5"])
    report = ac.partition_report(partitioned)
    chosen = report.layer_precisions
    kept = {op.key for op in report.offloaded
            if op.source in ("features.0", "classifier.5")}
    assert kept and {chosen[k] for k in kept} == {"fp16"}
    assert {p for k, p in chosen.items() if k not in kept} == {"int8"}
    # a module names every layer under it, a wildcard those it matches, a key its layer
    from accel_codegen.compiler.keep_float import keep_float_precisions
    from accel_codegen.compiler.partition import match_composites

    matched = match_composites(mod, params, precision="int8")
    assert keep_float_precisions(matched, ["features", "classifier.[0-2]", "f0.4"]) == {
        "f0.0": "fp16", "f0.1": "fp16", "f0.2": "fp16", "f0.3": "int8", "f0.4": "fp16"}
    # the name the reports and the debugger show for a layer
    assert keep_float_precisions(matched, ["classifier.{3,4}"])["f0.3"] == "fp16"


def test_keep_float_refusals(zoo):
    mod, params, x = zoo("lenet5").imported
    examples = _examples(x, 1)
    with pytest.raises(AccelInvalidError, match="'layer9' names no accelerator layer.*"
                       "features.0"):
        ac.partition_for_accel(mod, params, precision="int8", calibration=examples,
                               keep_float=["layer9"])
    with pytest.raises(AccelInvalidError, match="a list of layer names"):
        ac.partition_for_accel(mod, params, precision="int8", calibration=examples,
                               keep_float="features.0")
    with pytest.raises(AccelInvalidError, match="of an int8 build"):
        ac.partition_for_accel(mod, params, precision="fp16", keep_float=["features.0"])
    with pytest.raises(AccelUnsupportedError, match="kept layers in fp16: configuration "
                       "nv_small has no fp16"):
        ac.partition_for_accel(mod, params, config="nv_small", precision="int8",
                               calibration=examples, keep_float=["features.0"])


def test_cli_keeps_layers_and_reads_the_users_data(capsys, tmp_path, zoo):
    x = zoo("lenet5").x_np
    data = tmp_path / "data.npz"
    np.savez(data, x=np.stack([e[0] for e in _examples(x, 2)]))
    status, out, err = run_cli(capsys, "accuracy", "lenet5", "--precision", "int8",
                               "--calibration-data", data, "--inputs", data, "--keep-float",
                               "features.0", "--no-ort")
    assert status == 0, err
    assert "on 2 input(s) from" in err and "kept in fp16: features.0" in err
    assert "evaluation: 2 input(s) from" in err
    assert "fp16" in out
    for argv, message in (
            (["--precision", "fp16", "--keep-float", "features.0"], "of an int8 build"),
            (["--precision", "int8", "--config", "nv_small", "--keep-float", "features.0"],
             "nv_small does not have"),
            (["--precision", "int8", "--calibration", "2", "--calibration-data", data],
             "not both"),
            (["--precision", "int8", "--calibration-data", tmp_path / "none.npz"],
             "does not exist"),
            (["--precision", "int8", "--keep-float", "nowhere"], "'nowhere' names no")):
        status, _, err = run_cli(capsys, "partition", "lenet5", *argv)
        assert status == 1 and message in err, (argv, err)
