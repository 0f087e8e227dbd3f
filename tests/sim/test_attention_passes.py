"""Multi-head attention as engine passes (accel_codegen/sim/decompose.attention_passes): per
head a BDMA copy of Q's head rows, a CONV reading K's head channels (a view of its surface)
with Q's rows as its weights (the scores transposed: the keys along W), the softmax over W on
the PDP (max and sum) and the SDP (per-channel operands), a BDMA copy of V's head rows, a CONV
reading them with the exponentials as its weights and its SDP normalising the sums, and a
BDMA copy into the output's channels of the head. In FP16 the exponentials' pass is the
scores CONV again (exp of its fp32 accumulator, not of the scores rounded to half) and the
reciprocal's last Newton step a CONV summing the exponentials in fp32, giving the remainder of
1 / sum beyond its half, which the values' runs apply (E V r_lo, then E V r + that).

Every pass equals the NumPy reference (reference.run_chain) given the same inputs bit for
bit, the CONVs too (the reference sums in the simulator's fp32 order, csrc/conv/f32_order.h),
and so does the whole; it is within 1e-5 of the output scale of float64 maths in fp32, SQNR
>= 50 dB in fp16.
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
    x = np.ascontiguousarray(q[:, :, None, None]).astype(dtype)
    inputs = {"k": np.ascontiguousarray(k.T[None, :, None, :]).astype(dtype),
              "v": np.ascontiguousarray(v[:, :, None, None]).astype(dtype)}
    convs = []

    def both(p, ops, data, out):
        ours, _ = DEVICE.run(ops, np.ascontiguousarray(data), label=p.role)
        theirs = ref.run_chain(ops, data)
        if any(isinstance(op, Conv) and op.weights.shape[1] > 1 for op in ops):
            convs.append(p.role)
        assert_same(ours, theirs, p.role)
        return ours

    tensors = decomposition.run(both, x, inputs)
    # FP16: the exponentials' pass recomputes the scores, the last Newton step sums E^T, and
    # E V is formed twice: times 1 / sum's remainder, then times its half plus that
    # each head's scores, then (the softmax's passes once over every head's rows) its other
    # CONVs head by head
    before, after = ("scores",), ("values",)
    if precision == "fp16":
        before, after = ("scores",), ("softmax.exp", "softmax.newton.sum", "values.remainder",
                                      "values")
    per_head = [(h, role) for h in range(heads) for role in before]
    if precision == "fp16":
        per_head += [(h, role) for role in after[:2] for h in range(heads)]
        after = after[2:]
    per_head += [(h, role) for h in range(heads) for role in after]
    assert convs == [f"attention.h{h}.{role}" for h, role in per_head]
    assert not any("tree" in role or ".lo" in role for role in convs)
    ours = decomposition.tensor(tensors, "o")[:, :, 0, 0].astype(np.float64)
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
    assert_same(y, y_ref)


def test_the_softmax_runs_along_w_and_the_cost_model_prices_every_pass():
    t, heads, d = 197, 3, 64
    decomposition = dc.attention_passes(t, heads, d, 0.125, "fp32")
    roles = [p.role for p in decomposition.passes]
    # per head: Q's rows, scores, V's rows, P V with the normalisation in its SDP, the merge;
    # once over the three heads' scores [1, 3 T, 1, T]: 3 PDP max passes (197 = 8 x 25
    # padded, 5, 5), -max, exp, 3 PDP sums (power-of-two windows: 8, 8, 4 over 256),
    # 1/average: 5 runs a head and 9, no channel trees (14 a head before the heads shared
    # the softmax's runs)
    assert len(roles) == 5 * heads + 9, roles
    # each pass's role says which it is (a run's label): the max and sum passes numbered
    assert [r for r in roles if r.startswith("attention.softmax.max")] == \
        ["attention.softmax.max1", "attention.softmax.max2", "attention.softmax.max3"]
    assert len(set(roles)) == len(roles)
    sums = [p for p in decomposition.passes if p.role.startswith("attention.softmax.sum")]
    assert [p.ops[0].kernel for p in sums] == [(1, 8), (1, 8), (1, 4)]
    assert {decomposition.shapes[p.input] for p in sums[:1]} == {(1, heads * t, 1, t)}
    scores = next(p for p in decomposition.passes if p.role == "attention.h1.scores")
    assert decomposition.views[scores.input][:3] == ("k", d, d)  # K's head: a view, no copy
    cycles, runs = dc.estimate_passes("nv_full", decomposition)
    assert cycles == sum(s.cycles for _, s in runs) > 0
    stats = dict(runs)["attention.h0.scores"]
    assert stats.macs == t * t * d
    # Q [T, d] is fetched as dense weights: as many bytes as K [d, T], its data
    conv = stats.ops[0]
    assert conv.weight_bytes == conv.input_bytes > 0


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_many_keys_keep_the_reciprocal_in_its_table(precision, rng):
    """5000 keys pad to 8192 (power-of-two windows): the average falls below 2^-12, so a pass
    scales it back by 2 before the reciprocal (FP16's table starts at 2^-15)."""
    t, tk, d = 3, 5000, 8
    decomposition = dc.attention_passes(t, 1, d, 1 / np.sqrt(d), precision, tk)
    assert [p.role for p in decomposition.passes].count("attention.softmax.total") == 1
    dtype = dc.dtype_for(precision)
    q, k, v, _ = _tokens(rng, False, t, tk, 1, d)
    q, k, v = (m.astype(dtype) for m in (q, k, v))
    y, _ = dc.run_passes(DEVICE, decomposition, np.ascontiguousarray(q[:, :, None, None]),
                         inputs={"k": np.ascontiguousarray(k.T[None, :, None, :]),
                                 "v": np.ascontiguousarray(v[:, :, None, None])})
    expected = _attention64(q, k, v, 1, d, 1 / np.sqrt(d), {})
    tolerance = 1e-5 if precision == "fp32" else 4e-3  # fp16: measured 1.9e-3
    assert np.abs(y[:, :, 0, 0] - expected).max() <= tolerance * np.abs(expected).max()


def test_bad_shapes_are_refused():
    with pytest.raises(AccelInvalidError, match="heads"):
        dc.attention_passes(4, 0, 8)
    with pytest.raises(AccelInvalidError, match="beyond"):
        dc.attention_passes(4, 2, 8, channels={"k": (16, 8)})


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("per_window", [False, True], ids=["bias", "bias_and_mask"])
def test_windows_with_a_bias_equal_the_reference_and_the_maths(per_window, precision, rng):
    """Swin's windows (attention within each block of T rows) with a bias added to the
    scaled scores by the scores' SDP: one [T, T] per head, or per window and head (a shifted
    window's mask added): every pass as the reference's, the whole as float64 maths."""
    windows, t, heads, d = 3, 5, 2, 4
    dtype = dc.dtype_for(precision)
    c = heads * d
    q, k, v = (rng.standard_normal((windows * t, c)).astype(dtype) for _ in range(3))
    bias = rng.standard_normal((windows if per_window else 1, heads, t, t)).astype(np.float32)
    if per_window:
        bias[1, :, :2, 2:] -= 100.0  # a mask: these keys are another region's
    scale = 1 / np.sqrt(d)
    decomposition = dc.attention_passes(t, heads, d, scale, precision, windows=windows,
                                        bias=bias)
    x = q.reshape(1, -1, 1, 1)
    inputs = {"k": np.ascontiguousarray(k.reshape(windows, t, c).transpose(0, 2, 1)
                                        ).reshape(1, windows * c, 1, t),
              "v": v.reshape(1, -1, 1, 1)}

    def both(p, ops, data, out):
        ours, _ = DEVICE.run(ops, np.ascontiguousarray(data), label=p.role)
        theirs = ref.run_chain(ops, data)
        if any(isinstance(op, Conv) and op.weights.shape[1] > 1 for op in ops):
            tolerance = 2e-6 if precision == "fp32" else 2 ** -10
            scale_ = float(np.abs(theirs.astype(np.float64)).max()) or 1.0
            assert np.abs(ours.astype(np.float64) - theirs).max() <= tolerance * scale_, p.role
        else:
            assert_same(ours, theirs)
        return ours

    tensors = decomposition.run(both, x, inputs)
    ours = decomposition.tensor(tensors, "o").reshape(windows * t, c).astype(np.float64)
    expected = []
    for w in range(windows):
        rows = slice(w * t, (w + 1) * t)
        for h in range(heads):
            cols = slice(h * d, (h + 1) * d)
            s = scale * q[rows, cols].astype(np.float64) @ k[rows, cols].astype(np.float64).T
            s += bias[w if per_window else 0, h].astype(dtype)
            e = np.exp(s - s.max(1, keepdims=True))
            expected.append(((w, h), (e / e.sum(1, keepdims=True)) @ v[rows, cols]))
    full = np.zeros_like(ours)
    for (w, h), o in expected:
        full[w * t:(w + 1) * t, h * d:(h + 1) * d] = o
    if precision == "fp32":
        assert np.abs(ours - full).max() <= 1e-5 * np.abs(full).max()
    else:
        assert sqnr(ours, full) >= 50
    roles = [p.role for p in decomposition.passes]
    assert "attention.w2.h1.scores" in roles and "attention.h0.scores" not in roles


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_scale_per_head_scales_each_heads_scores_and_exponentials(precision, rng):
    """Swin-V2's learnt logit scale, one factor per head: the scores' SDP and (FP16) the
    exponentials' pass, which recomputes the scores, each take their head's factor."""
    t, heads, d = 9, 3, 8
    scales = [0.3, 0.5, 0.7]
    dtype = dc.dtype_for(precision)
    q, k, v, _ = _tokens(rng, False, t, t, heads, d)
    q, k, v = (m.astype(dtype) for m in (q, k, v))
    decomposition = dc.attention_passes(t, heads, d, scales, precision)
    y, _ = dc.run_passes(DEVICE, decomposition, np.ascontiguousarray(q[:, :, None, None]),
                         inputs={"k": np.ascontiguousarray(k.T[None, :, None, :]),
                                 "v": np.ascontiguousarray(v[:, :, None, None])})
    expected = np.concatenate([_attention64(q[:, h * d:(h + 1) * d], k[:, h * d:(h + 1) * d],
                                            v[:, h * d:(h + 1) * d], 1, d, s, {})
                               for h, s in enumerate(scales)], 1)
    ours = y[:, :, 0, 0].astype(np.float64)
    if precision == "fp32":
        assert np.abs(ours - expected).max() <= 1e-5 * np.abs(expected).max()
    else:
        assert sqnr(ours, expected) >= 50


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_computed_key_bias_is_an_input_every_head_reads(precision, rng):
    """A padding mask's bias (BERT's (1 - mask) * -10000, one value per key) computed by
    other runs and copied to the T queries' channels, [1, T, 1, Tk]: an input of the passes
    (not a constant), every head's scores SDP adding all of it; the padded keys get no
    weight; device and reference the same bits."""
    t, heads, d = 6, 2, 8
    dtype = dc.dtype_for(precision)
    q, k, v, _ = _tokens(rng, False, t, t, heads, d)
    q, k, v = (m.astype(dtype) for m in (q, k, v))
    row = np.where(np.arange(t) < 4, 0.0, -10000.0).astype(np.float32)
    decomposition = dc.attention_passes(t, heads, d, 1 / np.sqrt(d), precision, key_bias=True)
    assert "bias" in decomposition.inputs and "bias" not in decomposition.constants
    x = np.ascontiguousarray(q[:, :, None, None])
    inputs = {"k": np.ascontiguousarray(k.T[None, :, None, :]),
              "v": np.ascontiguousarray(v[:, :, None, None]),
              "bias": np.broadcast_to(row.astype(dtype), (1, t, 1, t)).copy()}
    y, _ = dc.run_passes(DEVICE, decomposition, x, inputs=inputs)
    assert_same(y, ref.run_decomposition(decomposition, x, inputs))
    kept = _attention64(q, k[:4], v[:4], heads, d, 1 / np.sqrt(d), {})
    ours = y[:, :, 0, 0].astype(np.float64)
    if precision == "fp32":
        assert np.abs(ours - kept).max() <= 1e-5 * np.abs(kept).max()
    else:
        assert sqnr(ours, kept) >= 50
    with pytest.raises(AccelInvalidError, match="key bias"):
        dc.attention_passes(t, heads, d, precision=precision, key_bias=True,
                            bias=np.zeros((1, heads, t, t), np.float32))


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_batch_of_sentences_reads_each_its_own_key_bias(precision, rng):
    """A padded batch of sentences (attention within each block of T rows, as Swin's
    windows) with each sentence's padding-mask row copied to its queries, [1, B T, 1, Tk]:
    sentence w's heads read block w; a sentence's result equals its attention over its real
    keys alone, and device and reference give the same bits."""
    windows, t, heads, d = 3, 6, 2, 4
    valid = (6, 2, 4)
    dtype = dc.dtype_for(precision)
    c = heads * d
    q, k, v = (rng.standard_normal((windows * t, c)).astype(dtype) for _ in range(3))
    # float32's lowest, as Hugging Face adds it (saturated to half's largest in fp16)
    lowest = -65504.0 if precision == "fp16" else float(np.finfo(np.float32).min)
    rows = np.array([np.where(np.arange(t) < n, 0.0, lowest) for n in valid], np.float32)
    decomposition = dc.attention_passes(t, heads, d, 1 / np.sqrt(d), precision,
                                        windows=windows, key_bias=True)
    assert decomposition.shapes["bias"] == (1, windows * t, 1, t)
    x = q.reshape(1, -1, 1, 1)
    inputs = {"k": np.ascontiguousarray(k.reshape(windows, t, c).transpose(0, 2, 1)
                                        ).reshape(1, windows * c, 1, t),
              "v": v.reshape(1, -1, 1, 1),
              "bias": np.repeat(rows.astype(dtype), t, axis=0).reshape(1, windows * t, 1, t)}
    y, _ = dc.run_passes(DEVICE, decomposition, x, inputs=inputs)
    assert_same(y, ref.run_decomposition(decomposition, x, inputs))
    ours = y.reshape(windows * t, c).astype(np.float64)
    for w, n in enumerate(valid):
        block = slice(w * t, (w + 1) * t)
        kept = _attention64(q[block], k[block][:n], v[block][:n], heads, d, 1 / np.sqrt(d), {})
        if precision == "fp32":
            assert np.abs(ours[block] - kept).max() <= 1e-5 * np.abs(kept).max(), w
        else:
            assert sqnr(ours[block], kept) >= 50, w


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_key_bias_per_head_reads_each_heads_own_block(precision, rng):
    """A sequence-first batch's images are heads of one image (torch's key_padding_mask at
    batch B: image b's heads b heads ..): the computed bias is one block per head, [1, heads
    T, 1, Tk] (``key_bias="head"``), head h's scores SDP adding block h. Here 2 images of 2
    heads, image 1's last keys masked by float32's lowest (fp16: half's largest): each
    image's heads equal their attention over their real keys alone; device and reference
    the same bits."""
    images, per_image, t, d = 2, 2, 6, 4
    heads, valid = images * per_image, (6, 3)
    dtype = dc.dtype_for(precision)
    q, k, v, _ = _tokens(rng, False, t, t, heads, d)
    q, k, v = (m.astype(dtype) for m in (q, k, v))
    lowest = -65504.0 if precision == "fp16" else float(np.finfo(np.float32).min)
    rows = np.array([np.where(np.arange(t) < n, 0.0, lowest) for n in valid], np.float32)
    decomposition = dc.attention_passes(t, heads, d, 1 / np.sqrt(d), precision,
                                        key_bias="head")
    assert decomposition.shapes["bias"] == (1, heads * t, 1, t)
    blocks = np.repeat(rows, per_image, axis=0)  # head h reads image h // per_image's row
    x = np.ascontiguousarray(q[:, :, None, None])
    inputs = {"k": np.ascontiguousarray(k.T[None, :, None, :]),
              "v": np.ascontiguousarray(v[:, :, None, None]),
              "bias": np.repeat(blocks.astype(dtype)[:, None, :], t, axis=1).reshape(
                  1, heads * t, 1, t)}
    y, _ = dc.run_passes(DEVICE, decomposition, x, inputs=inputs)
    assert_same(y, ref.run_decomposition(decomposition, x, inputs))
    ours = y[:, :, 0, 0].astype(np.float64)
    for b, n in enumerate(valid):
        cols = slice(b * per_image * d, (b + 1) * per_image * d)
        kept = _attention64(q[:, cols], k[:n, cols], v[:n, cols], per_image, d,
                            1 / np.sqrt(d), {})
        if precision == "fp32":
            assert np.abs(ours[:, cols] - kept).max() <= 1e-5 * np.abs(kept).max(), b
        else:
            assert sqnr(ours[:, cols], kept) >= 50, b
    with pytest.raises(AccelInvalidError, match="key_bias"):
        dc.attention_passes(t, heads, d, precision=precision, key_bias="rows")


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("heads", [1, 2])
def test_a_value_head_size_other_than_the_keys(heads, precision, rng):
    """value_dim: V's heads (and the output's) dv columns where Q's and K's are d (SAGAN's
    self-attention over a feature map: q and k of C/8 channels, v of C). The values CONV
    reads V_h as [1, Tk, 1, dv] with the same E^T weights; each pass is the reference's bit
    for bit, the whole the maths'."""
    t, tk, d, dv = 10, 12, 4, 24
    dtype = dc.dtype_for(precision)
    q, k = (rng.standard_normal((n, heads * d)).astype(dtype) for n in (t, tk))
    v = rng.standard_normal((tk, heads * dv)).astype(dtype)
    decomposition = dc.attention_passes(t, heads, d, 1.0, precision, tk, value_dim=dv)
    assert decomposition.shapes["o"] == (t, heads * dv, 1, 1)
    x = np.ascontiguousarray(q[:, :, None, None])
    inputs = {"k": np.ascontiguousarray(k.T[None, :, None, :]),
              "v": np.ascontiguousarray(v[:, :, None, None])}
    y, _ = dc.run_passes(DEVICE, decomposition, x, inputs=inputs)
    assert_same(y, ref.run_decomposition(decomposition, x, inputs))
    expected = []
    for h in range(heads):
        s = q[:, h * d:(h + 1) * d].astype(np.float64) @ k[:, h * d:(h + 1) * d].T
        e = np.exp(s - s.max(1, keepdims=True))
        expected.append(e / e.sum(1, keepdims=True) @ v[:, h * dv:(h + 1) * dv])
    expected = np.concatenate(expected, 1)
    ours = y[:, :, 0, 0].astype(np.float64)
    if precision == "fp32":
        assert np.abs(ours - expected).max() <= 1e-5 * np.abs(expected).max()
    else:
        assert sqnr(ours, expected) >= 50
    with pytest.raises(AccelInvalidError, match="value_dim"):
        dc.attention_passes(t, heads, d, value_dim=0)
    with pytest.raises(AccelInvalidError, match="beyond"):
        dc.attention_passes(t, heads, d, value_dim=dv, channels={"v": (heads * d, 0)})


def _probabilities64(q, k, heads, d, scale, groups, t):
    """The mean of each ``groups`` consecutive heads' softmax(scale Q_h K_h^T), windows of
    ``t`` rows one after the other."""
    windows = q.shape[0] // t
    p = []
    for w in range(windows):
        for h in range(heads):
            qh = q[w * t:(w + 1) * t, h * d:(h + 1) * d].astype(np.float64)
            kh = k[w * t:(w + 1) * t, h * d:(h + 1) * d].astype(np.float64)
            s = scale * qh @ kh.T
            e = np.exp(s - s.max(1, keepdims=True))
            p.append(e / e.sum(1, keepdims=True))
    p = np.stack(p)
    return p.reshape(-1, groups, t, t).mean(1)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("windows,heads,groups", [(1, 4, 4), (2, 4, 4), (1, 8, 4),
                                                   (2, 4, 1)])
def test_the_head_averaged_probabilities(windows, heads, groups, precision, rng):
    """need_weights=True's probabilities: the scores and the softmax as the core's, then one
    SDP pass normalises every head's rows (FP16: two, 1 / sum's remainder first) and one CONV
    of ones averages each group of heads (attention_passes' ``groups``): no V, no copies.
    Within 1e-5 of float64 maths' scale in fp32, 60 dB in fp16."""
    t, d = 16, 16
    dtype = dc.dtype_for(precision)
    q = rng.standard_normal((windows * t, heads * d)).astype(np.float32)
    k = rng.standard_normal((windows * t, heads * d)).astype(np.float32)
    scale = 1 / np.sqrt(d)
    decomposition = dc.attention_passes(t, heads, d, scale, precision, windows=windows,
                                        groups=groups)
    assert "v" not in decomposition.inputs
    x = q.reshape(decomposition.shapes["x"]).astype(dtype)
    kk = k.reshape(windows, t, heads * d).transpose(0, 2, 1).reshape(
        decomposition.shapes["k"]).astype(dtype)
    y, stats = dc.run_passes(DEVICE, decomposition, x, inputs={"k": kk})
    assert_same(y, ref.run_decomposition(decomposition, x, {"k": kk}))
    images = windows * heads // groups
    assert y.shape == (1, images, t, t)
    expected = _probabilities64(q.astype(dtype), k.astype(dtype), heads, d, scale, groups, t)
    ours = y.reshape(images, t, t).astype(np.float64)
    if precision == "fp32":
        assert np.abs(ours - expected).max() <= 1e-5 * np.abs(expected).max()
    else:
        assert sqnr(ours, expected) >= 60
    roles = [p.role for p in decomposition.passes]
    assert not any("values" in role or "merge" in role or "queries" in role and heads == 1
                   for role in roles)
    # one head a group (average_attn_weights=False): P is the output, no mean
    assert roles[-1] == ("attention.probabilities" if groups == 1 else
                         "attention.probabilities.mean")
