"""The Program (compiler/program.py): the runs of a partitioned module, lowered once, with the
tensors they read and write; mixed code's converting runs inserted in one place; precisions
re-assigned without lowering the layers again."""
import pytest

from accel_codegen import AccelInvalidError
from accel_codegen.compiler.partition import layer_keys, match_composites
from accel_codegen.compiler.program import assign_precisions, lower_module


@pytest.fixture(scope="module")
def matched():
    """A concat of a conv and a residual block with a downsample branch, then a dense head,
    matched for int8 on nv_full."""
    import torch
    from torch import nn

    from accel_codegen import frontend

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.a = nn.Conv2d(3, 8, 3, padding=1)
            self.b = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8))
            self.down = nn.Sequential(nn.Conv2d(3, 8, 1, 2), nn.BatchNorm2d(8))
            self.pool = nn.MaxPool2d(2)
            self.fc = nn.Linear(16 * 4 * 4, 4)

        def forward(self, x):
            y = torch.cat([self.pool(torch.relu(self.a(x))),
                           torch.relu(self.b(x) + self.down(x))], 1)
            return self.fc(torch.flatten(y, 1))

    mod, params = frontend.from_pytorch(Net().eval(), (torch.randn(1, 3, 8, 8),))
    return match_composites(mod, params, config="nv_full", precision="int8")


def test_runs_know_their_tensors(matched):
    program = lower_module(matched, "int8")
    runs = {run.key: run for run in program.runs}
    branch, after = [run for run in program.runs if run.part in ("a", "b")]
    assert branch.branch and branch.writes is None and after.writes is not None
    assert branch.output is after.operand  # the branch's output: the next run's operand
    copies = [run for run in program.runs if run.part.startswith("c")]
    assert len(copies) == 2 and {run.output for run in copies} == {copies[0].writes}
    # every tensor a run reads was written by an earlier run or is the function's input
    function = program.functions[0]
    written = set(function.function.params)
    for run in program.runs:
        assert run.precision == "int8" and not run.converts
        assert run.reads["input"] in written, run.key
        if run.writes is not None:
            written.add(run.writes)
    assert [run.key for run in program.runs] == list(runs)


def test_converting_runs_follow_a_change_of_precision(matched):
    keys = layer_keys(matched)
    program = lower_module(matched, "int8")
    assignment = {k: ("fp16" if i == 0 else "int8") for i, k in enumerate(keys)}
    mixed = assign_precisions(program, assignment)
    lowered = lower_module(matched, "mixed", assignment)
    assert [(r.key, r.precision, r.converts) for r in mixed.runs] == \
        [(r.key, r.precision, r.converts) for r in lowered.runs]
    converting = [run for run in mixed.runs if run.converts]
    assert [run.key for run in converting] == [keys[0] + "x"]
    assert converting[0].precision == "fp16" and not converting[0].planned
    # the layers are the program's: not lowered again
    assert {id(c.layer) for c in mixed.functions[0].calls} == \
        {id(c.layer) for c in program.functions[0].calls}
    uniform = assign_precisions(program, dict.fromkeys(keys, "int8"))
    assert not any(run.converts for run in uniform.runs)


def test_a_layer_without_a_precision_is_named(matched):
    keys = layer_keys(matched)
    with pytest.raises(AccelInvalidError, match=f"layer {keys[-1]} has precision None"):
        lower_module(matched, "mixed", {k: "int8" for k in keys[:-1]})


def test_the_program_of_a_build_is_the_runs_it_profiles():
    """program_of: the planned Program the code was printed from, as JSON data; its runs are
    the profiled runs, in order, its conv modes the partition report's, its tensors named by
    the parameter or the layer key that produces them."""
    import json

    import numpy as np
    import torch
    import tvm
    from torch import nn

    import accel_codegen as ac
    from accel_codegen import frontend

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                        nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)).eval()
    x = torch.randn(1, 3, 16, 16)
    mod, params = frontend.from_pytorch(net, (x,))
    config = ac.AccelConfig.preset("nv_full").replace(sram_bytes=64 << 10)
    partitioned = ac.partition_for_accel(mod, params, config=config)
    program = ac.program_of(partitioned)
    assert json.loads(json.dumps(program)) == program and program["precision"] == "fp32"
    runs = [run for function in program["functions"] for run in function["runs"]]
    with ac.profile() as prof:
        ac.virtual_machine(ac.build(partitioned))["main"](tvm.runtime.tensor(x.numpy()))
    assert [run["label"] for run in runs] == [record.label for record in prof.records]
    modes = {op.key: op.conv_mode for op in ac.partition_report(partitioned).ops if op.offloaded}
    assert {run["key"]: run["conv"]["mode"] for run in runs} == modes
    function = program["functions"][0]
    first, second = runs
    assert first["reads"] == {"input": function["inputs"][0]} and first["writes"] == "f0.0"
    assert second["reads"]["input"] == "f0.0" and function["layers"][1]["reads"] == ["f0.0"]
    assert first["in_shape"] == [1, 3, 16, 16] and second["out_shape"] == [1, 16, 8, 8]
    assert "output" in first["sram"] and "input" in second["sram"]  # f0.0 lives in SRAM
    assert np.all([run["in_layout"] in ("nchw", "c16") for run in runs])


def test_program_of_refuses_a_module_that_is_not_partitioned(matched):
    import accel_codegen as ac

    with pytest.raises(AccelInvalidError, match="not partitioned"):
        ac.program_of(matched)


def test_an_int8_program_carries_its_quantisation():
    """Each int8 run's quantisation is a field of the Run (codegen/int8_plan.py), set before
    the C is printed: the Program JSON shows each run's input, operand and output scales and
    its converters, the same as the module's record of every tensor the runs read and write;
    an fp32 program has none."""
    import torch
    from torch import nn

    import accel_codegen as ac
    from accel_codegen import frontend
    from accel_codegen.sim.observer import INPUT

    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
            self.b = nn.Conv2d(8, 8, 3, padding=1)

        def forward(self, x):
            y = self.a(x)
            return torch.sigmoid(self.b(y) + y)

    net = Net().eval()
    x = torch.randn(1, 3, 8, 8)
    mod, params = frontend.from_pytorch(net, (x,))
    partitioned = ac.partition_for_accel(mod, params, precision="int8",
                                         calibration=[[x.numpy()]])
    runs = [run for f in ac.program_of(partitioned)["functions"] for run in f["runs"]]
    used = ac.calibration_of(partitioned, used=True).tensors
    assert len(runs) == 3 and all(run["quant"] is not None for run in runs)
    for run, out_index in zip(runs, (1, 1, 0)):  # the SDP's output (the sigmoid's own run)
        quant, key = run["quant"], run["key"]
        assert quant["input"] == {"scale": used[(key, INPUT)].scale,
                                  "zero": used[(key, INPUT)].zero}
        assert quant["output"]["scale"] == used[(key, out_index)].scale
        converters = quant["converters"]
        assert len(converters["bias"]) == len(converters["mul"]) == 8
        assert all(0 <= shift <= 37 for shift in converters["rshift"])
    conv, residual, sigmoid = runs
    # the residual's operand is the first layer's output, in its codes; the sigmoid a table
    assert residual["quant"]["operand"] == residual["quant"]["input"] == \
        conv["quant"]["output"]
    assert residual["quant"]["converters"]["ew"]["extra_bits"] > 0
    assert sigmoid["quant"]["input"] == residual["quant"]["output"]
    assert sigmoid["quant"]["converters"]["lut"] is not None
    assert conv["quant"]["converters"]["lut"] is None and conv["quant"]["operand"] is None
    fp32 = ac.program_of(ac.partition_for_accel(mod, params))
    assert all(run["quant"] is None for f in fp32["functions"] for run in f["runs"])
