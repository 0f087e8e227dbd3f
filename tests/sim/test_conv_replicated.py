"""A CONV whose filters all hold the same bits (FP16 layer norms' and softmaxes' CONV of ones
C -> C, sim/decompose.py's sum_broadcast) computes its first filter and copies it
(conv/f32_impls.c's conv_replicated): every output is still the reference's bits, with the
epilogue per channel after the copy, fused and independent, in fp32 and fp16. Each case runs
in a child process with ACCEL_VERBOSE=1 (read once per process), which says which path ran."""
from pathlib import Path

import numpy as np

from accel_codegen.sim import reference as ref
from accel_codegen.sim import Conv, Sdp
from conftest import run_verbose_child

CHILD = r"""
import json, sys
import numpy as np
sys.path[:0] = [".", ".."]  # the test module, and the conftest it imports
from test_conv_replicated import chain_of
from accel_codegen.sim import Device
dev = Device(num_threads=2)
out = []
for case in json.loads(sys.argv[1]):
    chain, x, mode = chain_of(*case)
    out.append(dev.run(chain, x, mode=mode)[0].tobytes().hex())
print(json.dumps(out))
"""

#: (n, c, h, w, k, kernel, padding, precision, act, same filters): ViT-Ti's layer norm sum
#: over 192 channels broadcast to 192 (a dot-product tail of 5), a 3x3 padded on a batch of 2,
#: a classifier row, 37 channels on 50 tokens; and filters that differ only in their last
#: weight, which must not take the shortcut
CASES = [(1, 192, 1, 197, 192, 1, 0, "fp16", None, True),
         (1, 192, 1, 197, 192, 1, 0, "fp32", "relu", True),
         (2, 24, 9, 11, 16, 3, 1, "fp32", "relu", True),
         (2, 24, 9, 11, 16, 3, 1, "fp16", "sigmoid", True),
         (1, 300, 1, 1, 30, 1, 0, "fp32", None, True),
         (1, 37, 1, 50, 37, 1, 0, "fp16", "softmax_exp", True),
         (1, 37, 1, 50, 37, 1, 0, "fp32", None, False)]


def chain_of(n, c, h, w, k, kernel, padding, precision, act, same, mode_index=0, packed=False):
    """The chain, its input and its mode for one case: every filter the first's (``same``)
    or the last filter's last weight changed; a per-channel scale and shift after it; the
    CONV's weights pre-packed (``packed``: as the generated code's, FP16's widened)."""
    rng = np.random.default_rng(n * 1000 + c + k)
    dt = np.float16 if precision == "fp16" else np.float32
    x = rng.standard_normal((n, c, h, w)).astype(dt)
    first = rng.standard_normal((1, c, kernel, kernel)).astype(dt)
    weights = np.repeat(first, k, axis=0)
    if not same:
        weights[-1, -1, -1, -1] += dt(1)
    scale = rng.uniform(-0.2, 0.2, k).astype(dt)
    shift = rng.standard_normal(k).astype(dt)
    conv = Conv(weights, padding=padding, precision=precision)
    chain = [conv.packed_for("nv_full") if packed else conv,
             Sdp(scale=scale, shift=shift, act=act, precision=precision)]
    return chain, x, ("fused", "independent")[mode_index]


def _conv_lines(cases):
    """The cases run in a child with ACCEL_VERBOSE=1: its CONV lines in order, its outputs."""
    lines, values = run_verbose_child(CHILD, cases, Path(__file__).parent)
    return iter([line for line in lines if line.startswith("accel_verbose,conv")]), values


def test_replicated_filters_give_the_references_bits_through_the_shortcut():
    cases = [case + (mode,) for case in CASES for mode in (0, 1)]
    verbose, values = _conv_lines(cases)
    for case, value in zip(cases, values):
        line = next(verbose)
        # an FP16 CONV whose weights are not packed keeps its accumulators: the second mode's
        # run of the same convolution takes them (runtime/src/accumulators.c)
        kept = ",kept," in line
        assert kept == (case[7] == "fp16" and case[-1] == 1), (case, line)
        if ",replicated," in line:  # its one filter's CONV follows
            assert "oc1_" in next(verbose), line
        chain, x, _ = chain_of(*case)
        expected = ref.run_chain(chain, x)
        y = np.frombuffer(bytes.fromhex(value), expected.dtype).reshape(expected.shape)
        assert np.array_equal(y, expected, equal_nan=True), (case, int((y != expected).sum()))
        assert kept or (",replicated," in line) == case[-2], (case, line)
    assert next(verbose, None) is None


def test_packed_fp16_replicated_filters_run_one_filter_into_the_sdp():
    """FP16 with packed weights (the generated code's): the first filter's sums once, the SDP
    over them as every channel's (runtime/src/fp16_runs.c's conv_fp16_replicated), the reference's bits; a
    CONV whose filters differ runs whole."""
    fp16 = [case for case in CASES if case[7] == "fp16"]
    differing = [fp16[0][:-1] + (False,)]
    cases = [case + (mode, True) for case in fp16 + differing for mode in (0, 1)]
    verbose, values = _conv_lines(cases)
    for case, value in zip(cases, values):
        line = next(verbose)
        assert ",replicated," not in line, (case, line)
        assert ("oc1_" in line) == case[9], (case, line)
        chain, x, _ = chain_of(*case)
        expected = ref.run_chain(chain, x)
        y = np.frombuffer(bytes.fromhex(value), expected.dtype).reshape(expected.shape)
        assert np.array_equal(y, expected, equal_nan=True), (case, int((y != expected).sum()))
    assert next(verbose, None) is None
