"""An int8 concat of branches of different ranges (a YOLOX / FPN neck, issue 33): each branch
read by the concat alone writes its output straight in the concat's quantisation (the one
covering every branch's range), so the copies move codes (identity converters) and each
branch is rounded once; a branch that another op also reads keeps its own scale and its copy
rescales it into the concat's."""
import numpy as np
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import from_pytorch
from accel_codegen.compiler.partition import program_of
from conftest import build_and_run, ort_int8_sqnr, sqnr, torch_forward


class Neck(torch.nn.Module):
    def __init__(self, shared: bool):
        super().__init__()
        self.shared = shared
        self.small = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.large = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fuse = torch.nn.Conv2d(16, 8, 1)
        with torch.no_grad():
            self.large.weight *= 20  # a range about 20 times the other branch's

    def forward(self, x):
        a = torch.nn.functional.silu(self.small(x))
        b = torch.nn.functional.silu(self.large(x))
        y = self.fuse(torch.cat([a, b], 1))
        return y + a if self.shared else y  # a: read by the concat and the add


def _input(seed):
    return np.random.default_rng(seed).standard_normal((1, 3, 16, 16)).astype(np.float32)


def _runs(part):
    return {run["label"]: run["quant"] for f in program_of(part)["functions"]
            for run in f["runs"]}


def _identity(converters) -> bool:
    return all(m == 1 << s for m, s in zip(converters["mul"], converters["rshift"])) and \
        not any(converters["bias"])


def test_branches_write_in_the_concats_scale():
    torch.manual_seed(0)
    for shared in (False, True):
        model = Neck(shared).eval()
        part = ac.partition_for_accel(*from_pytorch(model, (torch.from_numpy(_input(0)),)),
                                      precision="int8",
                                      calibration=[(_input(s),) for s in range(1, 5)])
        runs = _runs(part)
        copies = [q for label, q in runs.items() if label.endswith("accel.concat")]
        branches = [q for label, q in runs.items() if label.endswith("conv2d_bias_silu")]
        assert len(copies) == 2 and len(branches) == 2, list(runs)
        if shared:  # the small branch is read twice: its own scale, its copy rescales
            assert branches[0]["output"] != copies[0]["output"]
            assert not _identity(copies[0]["converters"])
        else:
            assert all(b["output"] == copies[0]["output"] for b in branches), branches
            assert all(_identity(c["converters"]) for c in copies), copies
        x = _input(9)
        assert sqnr(build_and_run(part, x), torch_forward(model, x)) >= 30, shared


def test_a_concat_of_a_batch_is_whole_in_int8(tmp_path):
    """Along the channels of a batch of 2 each input's range is one per image: the copies
    move each input's codes in its own scale and one SDP pass rescales every channel with its
    input's converter (Layer.rescaled_rows). It was refused ("an int8 concat of batch 2 is not
    generated"), splitting DenseNet-, Inception- and GhostNet-style networks at batch 2 into
    3 to 9 external functions."""
    torch.manual_seed(0)
    model = Neck(shared=True).eval()
    x = np.concatenate([_input(0), _input(9)])
    calibration = [(np.concatenate([_input(s), _input(s + 10)]),) for s in range(1, 5)]
    part = ac.partition_for_accel(*from_pytorch(model, (torch.from_numpy(x),)),
                                  precision="int8", calibration=calibration)
    report = ac.partition_report(part)
    assert report.host == [] and len(report.functions) == 1, str(report)
    ours = sqnr(build_and_run(part, x), torch_forward(model, x))
    assert ours >= ort_int8_sqnr(model, x, [c for (c,) in calibration], tmp_path) - 1.0, ours
