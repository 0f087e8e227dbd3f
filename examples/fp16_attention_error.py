"""Where fp16 attention's error comes from, rounding by rounding: nn.MultiheadAttention(192, 3)
of examples/fp16_sqnr.py (T = 197), its core emulated in float64 with each rounding or table
of sim/decompose.attention_passes' FP16 passes switched on or off, SQNR against float64:

    python examples/fp16_attention_error.py

Columns: the core's SQNR against float64 attention of the same half q, k, v, and the layer's
output SQNR (the output projection in half after it) against the float64 layer. Rows: the
passes as built ("as built"), then each rounding removed alone, then the earlier passes
(the exponentials read from the scores rounded to half; 1 / sum from the PDP's averages
rounded to half three times). Emulated roundings: the scores to half (before the exp), the
exp LUT (its LO table's interpolation and half entries: reference.lut), E to half (the P V
CONV's weights), the averages, 1 / sum to half, the output O to half. The figures are in
docs/transformer_ops.md (fp16 accuracy); they do not depend on the CPU."""
import numpy as np
import torch

from accel_codegen.sim import reference
from fp16_sqnr import attention, sqnr

STEPS = ("scores", "lut", "e", "averages", "reciprocal", "o")


def half(a):
    return np.asarray(a, np.float64).astype(np.float16).astype(np.float64)


def core64(q, k, v, heads):
    d = q.shape[1] // heads
    out = np.zeros_like(q)
    for h in range(heads):
        c = slice(h * d, (h + 1) * d)
        s = q[:, c] @ k[:, c].T / np.sqrt(d)
        p = np.exp(s - s.max(1, keepdims=True))
        out[:, c] = (p / p.sum(1, keepdims=True)) @ v[:, c]
    return out


def averages(e):
    """The PDP's three averages over 8, 8, 4 keys (197 padded to 256), each rounded to half."""
    a = np.pad(e, ((0, 0), (0, 256 - e.shape[1])))
    for window in (8, 8, 4):
        a = half(a.reshape(a.shape[0], -1, window).astype(np.float32).sum(2, dtype=np.float32)
                 / np.float32(window))
    return a


def core(q, k, v, heads, rounded):
    """The passes' arithmetic, with the roundings in ``rounded`` (names of STEPS)."""
    d = q.shape[1] // heads
    out = np.zeros_like(q)
    for h in range(heads):
        c = slice(h * d, (h + 1) * d)
        s = (q[:, c] @ k[:, c].T).astype(np.float32) * np.float32(d ** -0.5)
        m = half(half(s).max(1, keepdims=True))  # the PDP's max of the scores in half
        s = half(s) if "scores" in rounded else s.astype(np.float64)
        t = (s - m).astype(np.float32)
        e = reference.lut("exp", t).astype(np.float64) if "lut" in rounded else \
            np.exp(t.astype(np.float64))
        e = half(e) if "e" in rounded else e
        a = averages(e) if "averages" in rounded else e.sum(1, keepdims=True) / 256
        r = half(1 / a) if "reciprocal" in rounded else 1 / a
        o = (e @ v[:, c]) * r / 256
        out[:, c] = half(o) if "o" in rounded else o
    return out


def main():
    model, x = attention(197)
    mha = model.attention
    heads, c = mha.num_heads, mha.embed_dim
    w, b = (t.detach().double().numpy() for t in (mha.in_proj_weight, mha.in_proj_bias))
    wo, bo = (t.detach().double().numpy() for t in (mha.out_proj.weight, mha.out_proj.bias))
    x64 = x.double().numpy()[0]
    qkv = x64 @ w.T + b
    exact = core64(qkv[:, :c], qkv[:, c:2 * c], qkv[:, 2 * c:], heads) @ wo.T + bo
    qkv = half(half(x64) @ half(w).T + half(b))  # the projections: one rounding each
    q, k, v = qkv[:, :c], qkv[:, c:2 * c], qkv[:, 2 * c:]
    core_exact = core64(q, k, v, heads)
    built = set(STEPS) - {"scores", "averages"}
    rows = [("as built", built)] + [(f"without {s}", built - {s}) for s in sorted(built)] + [
        ("earlier: + scores", built | {"scores"}), ("earlier: + averages", built | {"averages"}),
        ("earlier: both", set(STEPS)), ("only o", {"o"})]
    print(f"{'passes':28s} {'core dB':>8s} {'output dB':>10s}")
    for name, rounded in rows:
        o = core(q, k, v, heads, rounded)
        print(f"{name:28s} {sqnr(o, core_exact):8.2f} "
              f"{sqnr(half(o @ half(wo).T + half(bo)), exact):10.2f}")
    with torch.no_grad():
        def heads_of(a):
            return torch.from_numpy(a).half().reshape(1, -1, heads, c // heads).transpose(1, 2)
        o = torch.nn.functional.scaled_dot_product_attention(
            heads_of(q), heads_of(k), heads_of(v)).transpose(1, 2).reshape(-1, c)
        o = o.double().numpy()
        half_model = model.half()(x.half()).double().numpy()[0]
    print(f"{'PyTorch half (SDPA, .half())':28s} {sqnr(o, core_exact):8.2f} "
          f"{sqnr(half_model, exact):10.2f}")


if __name__ == "__main__":
    main()
