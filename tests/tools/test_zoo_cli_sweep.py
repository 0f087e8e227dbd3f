"""Issue 30's goal: the command line on the zoo with every precision and preset, 0 crashes and
0 internal errors. Each command either succeeds or is refused with a one-line error that
names the reason (a preset without fp16, a precision that needs an option); an internal error
(exit status 3: a bug) or an error that is not a one-liner fails.

Within CI's time: every zoo model is estimated (matched and costed: fp32, fp16, int8) on
every preset; models whose operators exercise the int8 and mixed paths apart (a concat, a
channel shuffle, squeeze-excite, a token layer) are partitioned with code generated in every
precision; two are built and run. Each model is imported
once for the session, shared with the other modules' tests (the import is torch's, not the
command line's, concern).
"""
import re

import numpy as np
import pytest

from accel_codegen.sim.config import AccelConfig
from accel_codegen.tools import model_spec
from accel_codegen.tools.models import MODELS
from conftest import run_cli

PRESETS = AccelConfig.preset_names()
#: Models with the operators the int8 and mixed paths treat apart: LeNet-5 (the smallest),
#: SqueezeNet 1.1 (concats), ShuffleNet v2 (channel shuffle, split), MobileNetV3-small
#: (squeeze-excite, hardswish), mixed_block (layer norm, softmax, attention over tokens).
REPRESENTATIVE = ["lenet5", "squeezenet1_1", "shufflenet_v2", "mobilenet_v3_small",
                  "mixed_block"]

#: What a refusal may say: the configuration lacks the precision.
REFUSALS = re.compile(r"configuration \w+ has no fp16")


@pytest.fixture(scope="module", autouse=True)
def imported_once(zoo):
    """Each zoo MODEL imported once for the session (the commands re-run on the same import):
    the session's ZooCache, which other modules' tests share (conftest.zoo)."""
    load = model_spec.load_model

    def cached(spec, inputs=None):
        if inputs is not None or not isinstance(spec, str) or spec not in MODELS:
            return load(spec, inputs)
        imported = zoo(spec)
        x = imported.x
        return model_spec.LoadedModel(spec, imported.mod, imported.params,
                                      [np.ascontiguousarray(x.detach().numpy())],
                                      imported.model, (x,))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(model_spec, "load_model", cached)
        yield


def _check(capsys, *argv):
    """Run one command: success, or a one-line refusal naming a missing precision."""
    status, out, err = run_cli(capsys, *argv)
    command = " ".join(map(str, argv))
    assert status in (0, 1), f"{command}: exit status {status}\n{err[-3000:]}"
    assert "internal error" not in err and "Traceback" not in err, f"{command}:\n{err}"
    if status == 1:
        errors = [line for line in err.splitlines() if ": error: " in line]
        assert len(errors) == 1 and REFUSALS.search(errors[0]), f"{command}:\n{err}"
        precision = argv[argv.index("--precision") + 1]
        config = AccelConfig.preset(argv[argv.index("--config") + 1])
        assert precision in ("fp16", "mixed") and not config.supports("fp16"), \
            f"{command} refused, but {config.name} runs {precision}:\n{err}"
    return status, out


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_zoo_model_estimates_in_every_precision_on_every_preset(capsys, name):
    for config in PRESETS:
        for precision in ("fp32", "fp16", "int8"):
            status, out = _check(capsys, "estimate", name, "--config", config,
                                 "--precision", precision)
            assert status == 1 or "total" in out


@pytest.mark.parametrize("name", REPRESENTATIVE)
def test_partitions_in_every_precision(capsys, name):
    """Code generated in fp32, fp16 and int8 (calibrated) on the preset with the fewest
    engines (nv_small: no BDMA, int8 only) and on nv_full; mixed (a search: a build per layer)
    for the smallest model and the token layers, refused where the preset has no fp16. A
    mixed search over concats through the command line is
    tests/flow/test_mixed_precision_outputs.py's (a concat inside a function, a host op
    between two: the case that failed with an AttributeError, issue 30); squeezenet1_1's
    search repeated it, at more CPU time than that model's other partitions together."""
    for config in ("nv_small", "nv_full"):
        for precision in ("fp32", "fp16", "int8"):
            extra = ["--calibration", "2"] if precision == "int8" else []
            status, out = _check(capsys, "partition", name, "--config", config,
                                 "--precision", precision, *extra)
            assert status == 1 or "operators offloaded" in out
        if name in ("lenet5", "mixed_block"):
            status, out = _check(capsys, "partition", name, "--config", config, "--precision",
                                 "mixed", "--calibration", "2", "--target-sqnr", "30")
            assert status == (0 if config == "nv_full" else 1)


@pytest.mark.parametrize("name, config, precision", [
    ("squeezenet1_1", "nv_small", "int8"),  # concats stay on the host without a BDMA
    ("lenet5", "nv_full", "mixed"),
])
def test_built_libraries_run(capsys, tmp_path, name, config, precision):
    library = tmp_path / f"{name}.so"
    extra = ["--calibration", "2"] + (["--target-sqnr", "30"] if precision == "mixed" else [])
    status, _ = _check(capsys, "compile", name, "-o", library, "--config", config,
                       "--precision", precision, *extra)
    assert status == 0 and library.is_file()
    status, out = _check(capsys, "run", library, "--random", "--profile")
    assert status == 0 and f"{config} clock" in out
