"""Behaviour kept across the compiler's refactorings (issue 28): small models' outputs (their
bytes' digest), their profiled cycles and the estimate's per-run cycles equal the reference
recorded in ``program_reference.json`` by the code before the refactoring.

The test checks the quick cases (three run, and SqueezeNet's four estimate-only ones);
``python tests/tools/test_program_reference.py`` checks every case (``--full`` adds the
estimate-only zoo networks) and prints what differs; ``--write`` records the reference (run it
on the commit whose behaviour is the reference; the estimate-only cases only with ``--full``
or named); ``--write`` with case names (``token_norm/nv_full_sram/fp16/fused``) records those
cases only, the others kept.
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import numpy as np

REFERENCE = Path(__file__).with_name("program_reference.json")


def tiny_cnn():
    """A residual CNN on 3x16x16 with what the planning passes act on: 16-channel tensors
    (C16 layouts), 3x3 convs (Winograd), a downsample branch, a depthwise conv, a concat, a
    pool and a dense head."""
    import torch
    from torch import nn

    from accel_codegen.tools.models import build_realistic

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False),
                                      nn.BatchNorm2d(16), nn.ReLU())
            self.a = nn.Sequential(nn.Conv2d(16, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32),
                                   nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1, bias=False),
                                   nn.BatchNorm2d(32))
            self.down = nn.Sequential(nn.Conv2d(16, 32, 1, 2, bias=False), nn.BatchNorm2d(32))
            self.dw = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False),
                                    nn.BatchNorm2d(32), nn.ReLU6())
            self.pw = nn.Conv2d(32, 16, 1)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(48, 10)

        def forward(self, x):
            x = self.stem(x)
            y = torch.relu(self.a(x) + self.down(x))
            z = torch.cat([self.dw(y), self.pw(y)], 1)
            return self.fc(torch.flatten(self.pool(z), 1))

    return build_realistic(Tiny, (3, 16, 16))


def c16_cnn():
    """A CNN on 3x32x32 whose fp32 tensors the layout plan keeps channel-blocked (C16: 1x1 and
    depthwise convs on 1,024 positions) and with a 3x3 conv that Winograd mode may take."""
    import torch
    from torch import nn

    from accel_codegen.tools.models import build_realistic

    def unit(cin, cout, kernel, groups=1):
        return [nn.Conv2d(cin, cout, kernel, padding=kernel // 2, groups=groups, bias=False),
                nn.BatchNorm2d(cout), nn.ReLU()]

    class C16(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(*unit(3, 16, 3))
            self.block = nn.Sequential(*unit(16, 16, 3, 16), *unit(16, 32, 1),
                                       *unit(32, 32, 3, 32), *unit(32, 32, 1))
            self.dense = nn.Sequential(*unit(32, 32, 3))
            self.head = nn.Sequential(nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                      nn.Linear(32, 10))

        def forward(self, x):
            y = self.block(self.stem(x))
            return self.head(torch.relu(self.dense(y) + y))

    return build_realistic(C16, (3, 32, 32))


def neck():
    """Transposed convolutions and nearest upsampling (a CONV or BDMA copies writing phases,
    then a RUBIK contract) beside a plain conv and an add, on 6x8x8."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    from accel_codegen.tools.models import build_realistic

    class Neck(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(6, 8, 3, padding=1)
            self.up1 = nn.ConvTranspose2d(8, 8, 2, 2)
            self.bn = nn.BatchNorm2d(8)
            self.up2 = nn.ConvTranspose2d(8, 4, 4, 2, padding=1, bias=False)

        def forward(self, x):
            y = torch.relu(self.conv(x))
            z = torch.relu(self.bn(self.up1(y))) + F.interpolate(y, scale_factor=2,
                                                                 mode="nearest")
            return torch.sigmoid(self.up2(z))

    return build_realistic(Neck, (6, 8, 8))


def token_norm():
    """relu(layer_norm(x W^T + b)) on 16 tokens of 32 channels: a layer norm's engine
    passes."""
    import torch
    from torch import nn

    from accel_codegen.tools.models import build_realistic

    class TokenNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(32, 48)
            self.ln = nn.LayerNorm(48)

        def forward(self, x):
            return torch.relu(self.ln(self.fc(x)))

    return build_realistic(TokenNorm, (16, 32))


def _config(name):
    """A preset, or ``<preset>_sram``: the preset with a 64 KiB SRAM behind its secondary
    memory interface (the memory plan's placements)."""
    from accel_codegen import AccelConfig

    if name.endswith("_sram"):
        return AccelConfig.preset(name[:-5]).replace(sram_bytes=64 << 10, name=name)
    return name


def _zoo(name):
    def get():
        from accel_codegen.tools.models import get_model
        return get_model(name)
    return get


MODELS = {"tiny_cnn": tiny_cnn, "c16_cnn": c16_cnn, "neck": neck, "token_norm": token_norm,
          "lenet5": _zoo("lenet5"), "mixed_block": _zoo("mixed_block")}
#: (model, config, precision, fuse): built, run and estimated
RUN_CASES = [("tiny_cnn", "nv_full", "fp32", True), ("tiny_cnn", "nv_full", "fp16", True),
             ("tiny_cnn", "nv_full", "int8", True), ("tiny_cnn", "nv_small", "int8", True),
             ("tiny_cnn", "nv_full", "mixed", True), ("tiny_cnn", "nv_full", "fp32", False),
             ("lenet5", "nv_full", "fp32", True), ("lenet5", "nv_small", "int8", True),
             ("mixed_block", "nv_full", "int8", True),
             ("c16_cnn", "nv_full", "fp32", True), ("c16_cnn", "nv_full_sram", "fp32", True),
             ("c16_cnn", "nv_full_sram", "fp16", True), ("tiny_cnn", "nv_full_sram", "int8", True),
             ("tiny_cnn", "nv_full_sram", "mixed", True),
             ("neck", "nv_full", "fp32", True), ("neck", "nv_full_sram", "int8", True),
             ("neck", "nv_full", "mixed", True), ("token_norm", "nv_full", "fp32", True),
             ("token_norm", "nv_full_sram", "fp16", True)]
#: zoo networks estimated only (``--full``)
ESTIMATE_CASES = [(m, c, p) for m in ("mobilenet_v2", "resnet18", "squeezenet1_1")
                  for c in ("nv_full", "nv_small") for p in ("fp32", "int8")] + \
    [("resnet18", "nv_full_sram", "int8"), ("mobilenet_v2", "nv_full_sram", "fp32")]
#: the test's cases: three run, and SqueezeNet's estimates (one import, about a second each:
#: its int8 classifier mean once ran as a 2.7 M-cycle depthwise conv that no quick case saw)
QUICK = {"c16_cnn/nv_full/fp32/fused", "tiny_cnn/nv_full_sram/mixed/fused",
         "tiny_cnn/nv_small/int8/fused"} | {
    f"squeezenet1_1/{c}/{p}/fused" for c in ("nv_full", "nv_small") for p in ("fp32", "int8")}


def _name(model, config, precision, fuse=True):
    return f"{model}/{config}/{precision}/{'fused' if fuse else 'decomposed'}"


def _relax(model_name):
    from accel_codegen import frontend

    model, inputs = MODELS.get(model_name, _zoo(model_name))()
    mod, params = frontend.from_pytorch(model, inputs)
    return mod, params, [np.asarray(x.numpy(), np.float32) for x in inputs]


def _assignment(mod, params, config):
    """Mixed code: the int8 partition's layers alternately int8 and fp16."""
    from accel_codegen.compiler.partition import layer_keys, match_composites

    keys = layer_keys(match_composites(mod, params, config=config, precision="int8"))
    return {k: ("int8", "fp16")[i % 2] for i, k in enumerate(keys)}


def run_case(model, config, precision, fuse) -> dict:
    """Output digest, profiled cycles and the estimate's per-run cycles of one case."""
    import tvm

    import accel_codegen as ac
    from accel_codegen.tools.model_spec import random_inputs

    mod, params, inputs = _relax(model)
    options = {"config": _config(config), "precision": precision, "fuse": fuse}
    estimate_options = dict(options)
    if precision in ("int8", "mixed"):
        options["calibration"] = random_inputs([inputs[0]], 3, 7)
    if precision == "mixed":
        options["layer_precisions"] = estimate_options["layer_precisions"] = \
            _assignment(mod, params, _config(config))
    vm = ac.virtual_machine(ac.build(mod, params, **options))
    with ac.profile() as prof:
        out = vm["main"](*(tvm.runtime.tensor(x) for x in inputs))
    outs = [out] if hasattr(out, "numpy") else list(out)
    digest = hashlib.sha256()
    for o in outs:
        digest.update(np.ascontiguousarray(o.numpy()).tobytes())
    report = ac.estimate(mod, params, **estimate_options)
    return {"output_sha256": digest.hexdigest(),
            "profiled_cycles": int(sum(r.cycles for r in prof.records)),
            "estimated_cycles": int(report.total_cycles),
            "layers": [[layer.label, int(layer.cycles)] for layer in report.layers]}


def estimate_case(model, config, precision, imported=None) -> dict:
    """The estimate's cycles of one case; ``imported``: the model's (mod, params, inputs),
    imported once for its cases."""
    import accel_codegen as ac

    mod, params, _ = imported or _relax(model)
    report = ac.estimate(mod, params, config=_config(config), precision=precision)
    return {"estimated_cycles": int(report.total_cycles),
            "layers": [[layer.label, int(layer.cycles)] for layer in report.layers]}


def compute(names=None, full=False) -> dict:
    result = {}
    for case in RUN_CASES:
        name = _name(*case)
        if names is None or name in names:
            result[name] = run_case(*case)
            print(name, result[name]["estimated_cycles"], flush=True, file=sys.stderr)
    imported = {}
    for case in ESTIMATE_CASES:
        name = _name(*case)
        if full or (names is not None and name in names):
            if case[0] not in imported:
                imported[case[0]] = _relax(case[0])
            result[name] = estimate_case(*case, imported=imported[case[0]])
            print(name, flush=True, file=sys.stderr)
    return result


def differences(got: dict, want: dict) -> list:
    """What differs between two results, case by case (the first differing run named)."""
    lines = []
    for name, figures in got.items():
        ref = want[name]
        for field in figures:
            if figures[field] == ref.get(field):
                continue
            if field == "layers":
                pairs = list(zip(figures[field], ref[field]))
                # past the shorter list: the first run one side has and the other has not
                first = next((p for p in pairs if p[0] != p[1]), None) or (
                    figures[field][len(pairs):len(pairs) + 1],
                    ref[field][len(pairs):len(pairs) + 1])
                lines.append(f"{name}: {len(figures[field])} runs (reference "
                             f"{len(ref[field])}); first difference {first}")
            else:
                lines.append(f"{name}: {field} {figures[field]} (reference {ref.get(field)})")
    return lines


def test_quick_cases_match_the_reference():
    want = json.loads(REFERENCE.read_text())
    got = compute(QUICK)
    assert set(got) == QUICK
    assert differences(got, want) == []


if __name__ == "__main__":
    full = "--full" in sys.argv
    if "--write" in sys.argv:
        cases = [a for a in sys.argv[1:] if not a.startswith("--")]
        # the cases not computed (others than those named; without --full, the estimate-only
        # ones) keep their records
        recorded = json.loads(REFERENCE.read_text())
        recorded.update(compute(set(cases) if cases else None, full=full))
        text = json.dumps(recorded, indent=1, sort_keys=True)
        # one line per run: [label, cycles]
        text = re.sub(r'\[\n\s+("[^"\n]*"),\n\s+(\d+)\n\s+\]', r"[\1, \2]", text)
        REFERENCE.write_text(text + "\n")
        print(f"wrote {REFERENCE}")
    else:
        wanted = json.loads(REFERENCE.read_text())
        found = differences(compute(full=full), wanted)
        print("\n".join(found) or "every case equals the reference")
        sys.exit(1 if found else 0)
