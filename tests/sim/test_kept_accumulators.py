"""An FP16 CONV whose weights are data (not packed: attention's Q K^T and P V) keeps its fp32
accumulators, and a later run of the same convolution on the same bytes takes them instead of
convolving again (runtime/src/accumulators.c): the FP16 attention runs each head's scores and
P V products twice. Every run's output is the reference's bits, whatever was kept; a change
of one input value or one weight, another geometry, or an entry pushed out by 16 others is a
new convolution. Runs in a child process with ACCEL_VERBOSE=1 (read once per process), whose
lines say which runs took kept accumulators."""
from pathlib import Path

import numpy as np

from accel_codegen.sim import Conv, Sdp
from accel_codegen.sim import reference as ref
from conftest import run_verbose_child

CHILD = r"""
import json, sys
import numpy as np
sys.path[:0] = [".", ".."]  # the test module, and the conftest it imports
from test_kept_accumulators import chain_of
from accel_codegen.sim import Device
dev = Device(num_threads=2)
out = []
for case in json.loads(sys.argv[1]):
    chain, x = chain_of(*case)
    out.append(dev.run(chain, x, mode="independent")[0].tobytes().hex())
    print("accel_verbose,conv,run", file=sys.stderr, flush=True)
print(json.dumps(out))
"""

#: (seed, tokens, head size, SDP, change): a scores-like CONV [1, d, 1, T] with T kernels of d
#: (Q K^T of one head); SDP "scale" or "exp" (the scale, then the exponentials' per-channel
#: operand and LUT: the two passes of attention's scores); change "input" / "weight" alters
#: one value of the seed's data, "small" is a CONV of few MACs per value read (never kept)
CASES = [(1, 40, 32, "scale", None),
         (1, 40, 32, "exp", None),           # kept: the same CONV, another SDP
         (1, 40, 32, "scale", "input"),      # one input value changed: convolved again
         (1, 40, 32, "scale", "weight"),     # one weight changed: convolved again
         (1, 40, 32, "exp", None),           # the first entry is still kept
         (2, 40, 16, "scale", None),         # another geometry
         (3, 12, 32, "scale", "small")]      # 12 MACs per value: never kept
#: then 16 other convolutions, and the first again: pushed out, convolved again
CASES += [(10 + i, 40, 32, "scale", None) for i in range(16)] + [(1, 40, 32, "scale", None)]
KEPT = [False, True, False, False, True, False, False] + [False] * 17


def chain_of(seed, tokens, d, sdp, change):
    """One case's chain and input, in FP16; the same seed gives the same bytes."""
    rng = np.random.default_rng(seed)
    k = 1 if change == "small" else tokens
    x = rng.standard_normal((1, d, 1, tokens)).astype(np.float16)
    weights = (rng.standard_normal((k, d, 1, 1)) / 4).astype(np.float16)
    if change == "input":
        x[0, 3, 0, 5] += np.float16(1)
    if change == "weight":
        weights[-1, -1, 0, 0] += np.float16(1)
    scale = np.full(k, 0.125, np.float16)
    if sdp == "scale":
        op = Sdp(scale=scale, precision="fp16")
    else:
        op = Sdp(scale=scale, ew_op="add", ew_per_channel=True,
                 operand=-np.abs(rng.standard_normal((1, k))).astype(np.float16) - 1,
                 act="softmax_exp", precision="fp16")
    return [Conv(weights, precision="fp16"), op], x


def test_kept_accumulators_give_the_references_bits():
    stderr, values = run_verbose_child(CHILD, CASES, Path(__file__).parent)
    runs, lines = [], []
    for line in stderr:
        if line == "accel_verbose,conv,run":
            runs.append(lines)
            lines = []
        elif line.startswith("accel_verbose,conv"):
            lines.append(line)
    assert len(runs) == len(CASES)
    for case, kept, lines, value in zip(CASES, KEPT, runs, values):
        assert any(",kept," in line for line in lines) == kept, (case, lines)
        assert len(lines) == 1, (case, lines)  # kept: no convolution
        chain, x = chain_of(*case)
        expected = ref.run_chain(chain, x)
        y = np.frombuffer(bytes.fromhex(value), expected.dtype).reshape(expected.shape)
        assert np.array_equal(y, expected, equal_nan=True), (case, int((y != expected).sum()))
