"""Multi-head attention as engine passes (accel_codegen/sim/decompose.attention_passes): per
head a BDMA copy of K's head columns, a CONV whose weights are K (scores, scaled on its SDP),
the softmax's passes over the keys, and a CONV whose weights are V's head channels as they lie
in V's surface, written at the head's channels of the output.

Every pass equals the NumPy reference (reference.run_chain) given the same inputs: bit for
bit, except the two CONVs of a head, within the CONV's summation bound (the reference sums in
float64, the simulator in its fixed fp32 order, csrc/conv/f32_order.h); and the whole is
within 1e-5 of the output scale of float64 maths in fp32, SQNR >= 50 dB in fp16.
"""
import numpy as np
import pytest

from accel_codegen import AccelInvalidError, Device
from accel_codegen import reference as ref
from accel_codegen.sim import decompose as dc
from accel_codegen.sim.ops import Conv
from conftest import assert_same, sqnr

DEVICE = Device("nv_full", num_threads=2)
#: (tokens, kv tokens, heads, head size, packed): one head, three heads of a packed QKV
#: projection with fewer keys than queries, two heads of 32
CASES = [(7, 7, 1, 16, False), (9, 5, 3, 8, True), (12, 12, 2, 32, False)]


def _tokens(rng, cases_packed, t, tk, heads, d):
    """Q [T, Cq], K [Tk, Ck], V [Tk, Cv] token-major and their channels (size, first head)."""
    c = heads * d
    if cases_packed:  # one [T, 3C] projection, Q K V at channels 0, C, 2C (T = Tk here)
        rows = max(t, tk)
        qkv = rng.standard_normal((rows, 3 * c)).astype(np.float32)
        q, k, v = qkv[:t], qkv[:tk], qkv[:tk]
        return q, k, v, {"x": (3 * c, 0), "k": (3 * c, c), "v": (3 * c, 2 * c)}
    q, k, v = (rng.standard_normal((n, c)).astype(np.float32) for n in (t, tk, tk))
    return q, k, v, {}


def _attention64(q, k, v, heads, d, scale, channels):
    out = []
    for h in range(heads):
        parts = []
        for name, m in (("x", q), ("k", k), ("v", v)):
            first = channels.get(name, (0, 0))[1] + h * d
            parts.append(m[:, first:first + d].astype(np.float64))
        qh, kh, vh = parts
        s = scale * qh @ kh.T
        e = np.exp(s - s.max(1, keepdims=True))
        out.append((e / e.sum(1, keepdims=True)) @ vh)
    return np.concatenate(out, 1)  # [T, H d]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("t,tk,heads,d,packed", CASES)
def test_each_pass_equals_the_reference_and_the_whole_the_maths(t, tk, heads, d, packed,
                                                                 precision, rng):
    dtype = dc.dtype_for(precision)
    q, k, v, channels = _tokens(rng, packed, t, tk, heads, d)
    if packed and t != tk:  # K and V rows of the packed tensor: the first tk tokens
        channels = {name: value for name, value in channels.items()}
    scale = 1 / np.sqrt(d)
    decomposition = dc.attention_passes(t, heads, d, scale, precision, tk, channels)
    x = np.ascontiguousarray(q.T[None, :, None, :]).astype(dtype)
    inputs = {"k": np.ascontiguousarray(k[:, :, None, None]).astype(dtype),
              "v": np.ascontiguousarray(v.T[None, :, None, :]).astype(dtype)}
    convs = []

    def both(p, ops, data, out):
        ours, _ = DEVICE.run(ops, np.ascontiguousarray(data), label=p.role)
        theirs = ref.run_chain(ops, data)
        if any(isinstance(op, Conv) and op.weights.shape[1] > 1 for op in ops):
            convs.append(p.role)
            scale_ = float(np.abs(theirs.astype(np.float64)).max()) or 1.0
            tolerance = 2e-6 if precision == "fp32" else 2 ** -10
            assert np.abs(ours.astype(np.float64) - theirs).max() <= tolerance * scale_, p.role
        else:
            assert_same(ours, theirs)
        return ours

    tensors = decomposition.run(both, x, inputs)
    assert convs == [role for h in range(heads)
                     for role in (f"attention.h{h}.scores", f"attention.h{h}.values")]
    ours = decomposition.tensor(tensors, "o")[0, :, 0, :].T.astype(np.float64)
    expected = _attention64(q.astype(dtype), k.astype(dtype), v.astype(dtype), heads, d, scale,
                            channels)
    if precision == "fp32":
        assert np.abs(ours - expected).max() <= 1e-5 * np.abs(expected).max()
    else:
        assert sqnr(ours, expected) >= 50
    # the same passes end to end on the device, and their NumPy reference
    y, stats = dc.run_passes(DEVICE, decomposition, x, inputs=inputs)
    y_ref = ref.run_decomposition(decomposition, x, inputs)
    assert len(stats) == len(decomposition.passes)
    assert np.abs(y.astype(np.float64) - y_ref).max() <= 2e-3 * np.abs(y_ref).max()


def test_a_head_reads_k_and_v_where_they_lie_and_the_cost_model_prices_every_pass():
    t, heads, d = 197, 3, 64
    decomposition = dc.attention_passes(t, heads, d, 0.125, "fp32")
    roles = [p.role for p in decomposition.passes]
    assert roles.count("attention.h0.keys") == 1 and "attention.h0.values" in roles
    values = next(p for p in decomposition.passes if p.role == "attention.h1.values")
    assert decomposition.views[values.weights] == ("v", d, d)  # V's head: a view, no copy
    assert decomposition.views[values.output] == ("o", d, d)   # written at its channels
    cycles, runs = dc.estimate_passes("nv_full", decomposition)
    assert cycles == sum(s.cycles for _, s in runs) > 0
    scores = dict(runs)["attention.h0.scores"]
    assert scores.macs == t * t * d
    # K [T, d] is fetched as dense weights: as many bytes as Q [T, d], its data
    conv = scores.ops[0]
    assert conv.weight_bytes == conv.input_bytes > 0


def test_bad_shapes_are_refused():
    with pytest.raises(AccelInvalidError, match="heads"):
        dc.attention_passes(4, 0, 8)
    with pytest.raises(AccelInvalidError, match="beyond"):
        dc.attention_passes(4, 2, 8, channels={"k": (16, 8)})
