"""The build's Target and Precision (issue 28, item 2): Precision is accel.h's enum, string-valued;
Target.of checks the public keywords together; a frozen Target is what the flow hands the
compiler."""
import dataclasses
import json

import pytest

from accel_codegen._accel_ffi import lib
from accel_codegen.compiler.target import LayerPlan, Target
from accel_codegen.errors import AccelInvalidError, AccelUnsupportedError
from accel_codegen.sim.config import AccelConfig, Precision
from accel_codegen.sim.vocabulary import PRECISIONS


def test_precision_is_the_c_enum_and_a_string():
    assert [p.value for p in Precision] == [entry.name for entry in PRECISIONS]
    assert [p.code for p in Precision] == [getattr(lib, entry.c_name) for entry in PRECISIONS]
    assert Precision.INT8 == "int8" and {"int8": 1}[Precision.INT8] == 1
    assert f"{Precision.FP16}" == str(Precision.FP16) == "fp16"
    assert json.dumps({"precision": Precision.INT8}) == '{"precision": "int8"}'
    assert Precision.of("fp32") is Precision.FP32 and Precision.of(Precision.INT8) is Precision.INT8
    with pytest.raises(AccelInvalidError, match="unknown precision 'int4'"):
        Precision.of("int4")


def test_target_of_the_keywords():
    target = Target.of("nv_full", precision="int8", equalize=False)
    assert target.config == AccelConfig.preset("nv_full") and target.fuse and target.winograd
    assert target.precision is Precision.INT8 and target.chains is Precision.INT8
    assert (target.code, target.mixed, target.layer_precisions) == ("int8", False, None)
    assert target.equalize is False and target.weight_rounding == "nearest"
    with pytest.raises(dataclasses.FrozenInstanceError):
        target.fuse = False
    assert target.replace(fuse=False).fuse is False and target.fuse


def test_a_per_layer_plan_replaces_mixed():
    plan = {"f0.0": "int8", "f0.1": "fp16"}
    target = Target.of("nv_full", precision="mixed", layer_precisions=plan)
    assert target.mixed and target.code == "mixed" and target.chains is Precision.INT8
    assert target.precision == LayerPlan(((("f0.0", Precision.INT8), ("f0.1", Precision.FP16))))
    assert target.layer_precisions == plan
    searched = Target.of("nv_full", precision="mixed")  # the search fills the plan
    assert searched.mixed and not searched.precision.assigned
    assert searched.layer_precisions is None
    given_none = Target.of("nv_full", precision="mixed", layer_precisions={})
    assert given_none.precision.assigned and given_none.layer_precisions == {}


@pytest.mark.parametrize("keywords, error, message", [
    (dict(precision="int4"), AccelInvalidError, "unknown precision 'int4'"),
    (dict(precision="fp16", config="nv_small"), AccelUnsupportedError, "nv_small has no fp16"),
    (dict(precision="int8", fuse=False), AccelUnsupportedError, "fused chains"),
    (dict(precision="mixed", fuse=False), AccelUnsupportedError, "fused chains"),
    (dict(precision="mixed", config="nv_small"), AccelUnsupportedError, "nv_small has no fp16"),
    (dict(precision="mixed", weight_rounding="gptq"), AccelInvalidError, "switch of int8"),
    (dict(precision="mixed", equalize=True), AccelInvalidError, "does not equalise"),
    (dict(precision="mixed", layer_precisions={"f0.0": "fp32"}), AccelInvalidError,
     "each layer is 'int8' or 'fp16'"),
    (dict(precision="mixed", layer_precisions=["f0.0"]), AccelInvalidError, "must be a dict"),
    (dict(precision="int8", layer_precisions={}), AccelInvalidError, "are for precision='mixed'"),
    (dict(weight_rounding="round"), AccelInvalidError, "weight_rounding = 'round'"),
])
def test_target_of_refuses_what_cannot_be_built(keywords, error, message):
    with pytest.raises(error, match=message):
        Target.of(**keywords)


def test_the_code_generator_reads_its_options_as_the_target():
    plan = {"f0.0": "int8", "f0.1": "fp16"}
    for target in (Target.of("nv_small", precision="int8"),
                   Target.of("nv_full", precision="fp16", fuse=False, winograd=False),
                   Target.of("nv_full", precision="mixed", layer_precisions=plan)):
        options = target.options()
        assert json.loads(json.dumps(options)) == options  # what RunCodegen carries
        read = Target.from_options(options)
        assert (read.config, read.fuse, read.precision, read.winograd) == \
            (target.config, target.fuse, target.precision, target.winograd)
    assert read.layer_precisions == plan and options["precision"] == "mixed"


def test_an_estimate_takes_a_target_and_its_keywords_alike():
    import torch

    from accel_codegen import estimate, frontend

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 8, 1)).eval()
    mod, params = frontend.from_pytorch(model, (torch.randn(1, 3, 8, 8),))
    # decomposed int8 is estimated, not generated: the estimate's Target allows it
    keywords = {"config": "nv_small", "precision": "int8", "fuse": False, "winograd": False}
    with pytest.raises(AccelUnsupportedError, match="fused chains"):
        Target.of(keywords.pop("config"), **keywords)
    target = Target.of("nv_small", generated=False, **keywords)
    by_target = estimate(mod, params, target=target)
    by_keywords = estimate(mod, params, config="nv_small", **keywords)
    assert [(r.label, r.cycles) for r in by_target.layers] == \
        [(r.label, r.cycles) for r in by_keywords.layers] and by_target.total_cycles > 0
    assert not by_target.fuse and by_target.precision == "int8"
