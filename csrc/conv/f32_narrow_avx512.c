/* conv/f32_narrow_avx512.c - FP32 pointwise CONVs to or from one channel (impl "narrow_avx512"):
 * a layer norm's or a softmax's sum over C as a CONV of ones to one channel, and its broadcasts
 * back (one channel to C, the centre and normalise passes), as decomposed by sim/decompose.py.
 *
 * Both are a few MACs per output, where the GEMM paths pay their fixed costs (the packed path
 * copies the whole input into panels and calls its micro-kernel per 4 channels x 48 positions
 * with one live accumulator row; the depthwise paths copy the plane padded): here the input rows
 * are read in place, sixteen positions to a vector, eight vectors at a time (two FMA units of
 * four cycles' latency want eight chains), and the epilogue runs on each finished span.
 *
 * The order is conv/f32_order.h's, bit for bit: to one channel, each position's sum over the
 * depth in 32-deep blocks (one FMA a step from zero, each block added to the running total), an
 * image's last f32_dot_tail(g) positions as 16 lane partial sums along the whole depth reduced
 * in _mm512_reduce_add_ps's order (the packed path carries them across its depth blocks, whose
 * starts are multiples of 16: the same lanes); from one channel (one input channel per group:
 * a depthwise geometry), each output one FMA from zero, w * x + 0.
 */
#include "conv/f32.h"

#ifdef __AVX512F__

/* Positions a work item covers: a multiple of 128 (eight vectors); enough items for two threads
 * on a 197-token surface is not worth a second thread's wake-up, so small planes stay whole. */
enum { NARROW_SPAN = 1024, NARROW_CH = 8 };

typedef struct narrow_job {
  const conv_plan* P;
  const float* in;
  const float* weights;
  float* out;
  const sdp_f32* ep;
  int64_t spans, chunks, body, tail; /* per image: position spans / channel chunks; body +
                                      * tail = ohw */
} narrow_job;

/* Sum over the depth of positions [n0, n0 + cnt) (cnt <= 128) of one image: x the image's
 * input at position n0, rows hw apart; up to eight vectors, the last under mask. */
static inline __attribute__((always_inline)) void to_one_block(const float* x, int64_t hw,
                                                              const float* w, int64_t kd,
                                                              int64_t cnt, float* dst) {
  __m512 t[8], s[8];
  const int nv = (int)((cnt + 15) >> 4);
  const __mmask16 last = lane_mask(cnt - (int64_t)(nv - 1) * 16);
  for (int v = 0; v < 8; ++v) t[v] = _mm512_setzero_ps();
  for (int64_t k0 = 0; k0 < kd; k0 += SUM_BLOCK) {
    const int64_t k1 = kd - k0 < SUM_BLOCK ? kd : k0 + SUM_BLOCK;
    for (int v = 0; v < 8; ++v) s[v] = _mm512_setzero_ps();
    if (cnt == 128) { /* 113..127 positions are eight vectors too: the last one masked below */
      for (int64_t k = k0; k < k1; ++k) {
        const __m512 wv = _mm512_set1_ps(w[k]);
        const float* r = x + k * hw;
#pragma GCC unroll 8
        for (int v = 0; v < 8; ++v) s[v] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(r + 16 * v), s[v]);
      }
    } else {
      for (int64_t k = k0; k < k1; ++k) {
        const __m512 wv = _mm512_set1_ps(w[k]);
        const float* r = x + k * hw;
        for (int v = 0; v < nv; ++v)
          s[v] = _mm512_fmadd_ps(
              wv, _mm512_maskz_loadu_ps(v == nv - 1 ? last : (__mmask16)0xFFFF, r + 16 * v),
              s[v]);
      }
    }
    for (int v = 0; v < nv; ++v) t[v] = k0 == 0 ? s[v] : _mm512_add_ps(t[v], s[v]);
  }
  for (int v = 0; v < nv; ++v)
    _mm512_mask_storeu_ps(dst + 16 * v, v == nv - 1 ? last : (__mmask16)0xFFFF, t[v]);
}

/* A dot-product tail position (conv/f32_order.h): lane l sums depths l, l + 16, ... */
static float to_one_dot(const float* x, int64_t hw, const float* w, int64_t kd) {
  __m512 d = _mm512_setzero_ps();
  const __m512i rows = _mm512_mullo_epi32(iota16(), _mm512_set1_epi32((int32_t)hw));
  for (int64_t k = 0; k < kd; k += 16) {
    const __mmask16 mk = lane_mask(kd - k);
    const __m512 a = _mm512_maskz_loadu_ps(mk, w + k);
    const __m512 b = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mk, rows, x + k * hw, 4);
    d = _mm512_fmadd_ps(a, b, d);
  }
  return _mm512_reduce_add_ps(d);
}

/* Item: image b's position span s (to one channel). */
static void to_one_item(void* ctx, int64_t it, int participant) {
  (void)participant;
  const narrow_job* J = ctx;
  const conv_plan* P = J->P;
  const int64_t b = it / J->spans, s = it % J->spans;
  const int64_t n0 = s * NARROW_SPAN;
  const int64_t n1 = s == J->spans - 1 ? P->ohw : n0 + NARROW_SPAN;
  const float* x = J->in + b * P->kd * P->hw;
  float* dst = J->out + b * P->ohw;
  const int64_t body_end = n1 < J->body ? n1 : J->body;
  for (int64_t n = n0; n < body_end; n += 128)
    to_one_block(x + n, P->hw, J->weights, P->kd, body_end - n < 128 ? body_end - n : 128,
                 dst + n);
  for (int64_t n = n0 > J->body ? n0 : J->body; n < n1; ++n)
    dst[n] = to_one_dot(x + n, P->hw, J->weights, P->kd);
  if (J->ep != NULL) epilogue_span(J->ep, 0, J->out, b * P->ohw + n0, n1 - n0);
}

/* Whether from_one_item applies ep in registers: sdp_f32_span's steps on a CONV output (no X
 * unit, no table, no per-channel operand), the element-wise op an add, a multiply or none and
 * the activation none, ReLU or a clip: a layer norm's centre (x * -1/C + x) and normalise
 * (x * gamma * d) passes. */
static int from_one_in_registers(const sdp_f32* ep) {
  return ep != NULL && !sdp_f32_has_x(ep) && !ep->ew_per_channel && ep->lut == NULL &&
         ep->prelu_slope == NULL &&
         (ep->ew_op == ACCEL_EW_NONE || ep->ew_op == ACCEL_EW_ADD || ep->ew_op == ACCEL_EW_MUL) &&
         (ep->act == ACCEL_ACT_NONE || ep->act == ACCEL_ACT_RELU || ep->act == ACCEL_ACT_CLIP);
}

/* The outputs of channel k from one input channel, w x + 0, then ep's steps in sdp_f32_span's
 * order, each rounded alone (x * scale, + shift, then + or * the operand, then max(0, x) or the
 * clip as max(lo, x), min(hi, x): NaN and -0 stay as in its `x < 0 ? 0 : x`), stored once: the
 * separate span re-read each row and cost a call per channel: on Zen 5 ViT-B's 25 centre and
 * 25 normalise passes (768 channels over 197 tokens) took 1.43 ms a call that way, 0.95 so
 * (docs/kernels.md, conv/f32_*.c). The same bits. */
static inline __attribute__((always_inline)) void from_one_row(const sdp_f32* ep, int64_t k,
                                                              const float* x, float w, float* dst,
                                                              const float* operand, int64_t n,
                                                              const int ew, const int act) {
  const __m512 wv = _mm512_set1_ps(w), zero = _mm512_setzero_ps();
  const int has_s = ep->scale != NULL, has_b = ep->shift != NULL;
  const __m512 sv = _mm512_set1_ps(has_s ? ep->scale[k] : 1.0f);
  const __m512 bv = _mm512_set1_ps(has_b ? ep->shift[k] : 0.0f);
  const __m512 lo = _mm512_set1_ps(ep->clip_min), hi = _mm512_set1_ps(ep->clip_max);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mk = lane_mask(n - i);
    __m512 t = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(mk, x + i), zero);
    if (has_s) t = _mm512_mul_ps(t, sv);
    if (has_b) t = _mm512_add_ps(t, bv);
    if (ew == ACCEL_EW_ADD) t = _mm512_add_ps(t, _mm512_maskz_loadu_ps(mk, operand + i));
    if (ew == ACCEL_EW_MUL) t = _mm512_mul_ps(t, _mm512_maskz_loadu_ps(mk, operand + i));
    if (act == ACCEL_ACT_RELU) t = _mm512_max_ps(zero, t); /* 0 > t ? 0 : t */
    if (act == ACCEL_ACT_CLIP) {
      t = _mm512_max_ps(lo, t); /* lo > t ? lo : t */
      t = _mm512_min_ps(hi, t); /* hi < t ? hi : t */
    }
    _mm512_mask_storeu_ps(dst + i, mk, t);
  }
}

#define FROM_ONE_ACTS(EW)                                                                     if (ep->act == ACCEL_ACT_RELU)                                                                from_one_row(ep, k, x, w, dst, operand, n, EW, ACCEL_ACT_RELU);                           else if (ep->act == ACCEL_ACT_CLIP)                                                           from_one_row(ep, k, x, w, dst, operand, n, EW, ACCEL_ACT_CLIP);                           else                                                                                          from_one_row(ep, k, x, w, dst, operand, n, EW, ACCEL_ACT_NONE);

static void from_one_fused(const sdp_f32* ep, int64_t k, const float* x, float w, float* dst,
                           const float* operand, int64_t n) {
  if (ep->ew_op == ACCEL_EW_ADD) {
    FROM_ONE_ACTS(ACCEL_EW_ADD)
  } else if (ep->ew_op == ACCEL_EW_MUL) {
    FROM_ONE_ACTS(ACCEL_EW_MUL)
  } else {
    FROM_ONE_ACTS(ACCEL_EW_NONE)
  }
}
#undef FROM_ONE_ACTS

/* Item: image b's channels [c * NARROW_CH, ...) from its one input channel. */
static void from_one_item(void* ctx, int64_t it, int participant) {
  (void)participant;
  const narrow_job* J = ctx;
  const conv_plan* P = J->P;
  const int64_t b = it / J->chunks, ch = it % J->chunks;
  const int64_t k0 = ch * NARROW_CH;
  const int64_t k1 = P->mg - k0 < NARROW_CH ? P->mg : k0 + NARROW_CH;
  const float* x = J->in + b * P->hw;
  const __m512 zero = _mm512_setzero_ps();
  if (from_one_in_registers(J->ep)) {
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t at = (b * P->mg + k) * P->ohw;
      from_one_fused(J->ep, k, x, J->weights[k], J->out + at,
                     J->ep->ew_operand != NULL ? J->ep->ew_operand + at : NULL, P->ohw);
    }
    return;
  }
  for (int64_t k = k0; k < k1; ++k) {
    const __m512 wv = _mm512_set1_ps(J->weights[k]);
    float* dst = J->out + (b * P->mg + k) * P->ohw;
    for (int64_t n = 0; n < P->ohw; n += 16) {
      const __mmask16 mk = lane_mask(P->ohw - n);
      _mm512_mask_storeu_ps(dst + n, mk,
                            _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(mk, x + n), zero));
    }
    if (J->ep != NULL) epilogue_span(J->ep, k, J->out, (b * P->mg + k) * P->ohw, P->ohw);
  }
}

/* One group, 1x1 at stride 1 without padding, and one output channel over a depth of at least
 * two, or one input channel; not a batch of fully connected rows (fc_blas's). */
static int narrow_applies(const conv_f32_call* c) {
  const conv_plan* P = c->P;
  if (!P->pointwise || P->g->groups != 1 || (P->ohw == 1 && P->g->n > 1)) return 0;
  if (P->hw > INT32_MAX / 16) return 0; /* to_one_dot's gather offsets, 15 rows apart, are int32 */
  return (P->mg == 1 && P->kd > 1) || P->cg == 1;
}

static accel_status narrow_run(const conv_f32_call* c) {
  const conv_plan* P = c->P;
  narrow_job J = {.P = c->P, .in = c->in, .weights = c->weights, .out = c->out, .ep = c->ep};
  if (P->cg == 1) {
    J.chunks = (P->mg + NARROW_CH - 1) / NARROW_CH;
    const int64_t items = P->g->n * J.chunks;
    pool_for((int)(items < c->nth ? items : c->nth), items, from_one_item, &J);
    return ACCEL_OK;
  }
  J.tail = f32_dot_tail(P->g);
  J.body = P->ohw - J.tail;
  J.spans = (P->ohw + NARROW_SPAN - 1) / NARROW_SPAN;
  const int64_t items = P->g->n * J.spans;
  pool_for((int)(items < c->nth ? items : c->nth), items, to_one_item, &J);
  return ACCEL_OK;
}

/* To one channel the tail rule is the geometry's (conv/f32_order.h); from one channel there is
 * none (a depthwise geometry: -1, as the depthwise paths say). */
static int narrow_dot_tail(const conv_plan* P) { return P->cg == 1 ? -1 : f32_dot_tail(P->g); }

const conv_f32_impl conv_f32_narrow_avx512_impl = {.name = "narrow_avx512",
                                                   .applies = narrow_applies,
                                                   .supports = NULL, .run = narrow_run,
                                                   .dot_tail = narrow_dot_tail};
#endif /* __AVX512F__ */
