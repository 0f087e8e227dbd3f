/* sdp_i8_avx512.c - the INT8 SDP converter on AVX-512 lanes without a LUT: the general steps
 * on 8 int64 lanes (sdp8), the exact shorter forms of the converters the compiler emits most
 * (span_fast, span_fast32, span_fast_add, span_add32: identities stated at each). Every path
 * gives sdp_one's codes exactly (sdp_i8.c). (The conv epilogue's lane forms are prepared in
 * sdp_i8_lanes.c.)
 */
#include <stdint.h>

#include "kernels.h"
#include "sdp_i8_internal.h"
#include "sdp_i8_lanes.h"

#if SDP_I8_VECTOR
/* (p + add + (p < 0 ? -1 : 0)) >> shift, arithmetic, on 8 int64 lanes: rhaz(p, shift) when add
 * is 2^(shift-1), plus z when add also holds z * 2^shift (shift >= 1). */
static inline __m512i rounding_shift(__m512i p, __m512i add, __m512i shift) {
  return _mm512_srav_epi64(_mm512_add_epi64(_mm512_add_epi64(p, add), _mm512_srai_epi64(p, 63)),
                           shift);
}

/* sat32(v + bias) * mul of 16 int32 lanes as even (pe) and odd (po) int64 products; vlo/vhi
 * pre-clamp v so that the int32 add saturates exactly. */
static inline void biased_products(__m512i x, __m512i vlo, __m512i vhi, __m512i bias,
                                   __m512i mul, __m512i* pe, __m512i* po) {
  const __m512i t = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(x, vlo), vhi), bias);
  *pe = _mm512_mul_epi32(t, mul);
  *po = _mm512_mul_epi32(_mm512_srli_epi64(t, 32), mul);
}

/* Even and odd int64 lanes saturated to int8, interleaved back, clipped, stored (mask k). */
static inline void store_codes(__m512i pe, __m512i po, __m128i lo, __m128i hi, __mmask16 k,
                               int8_t* y) {
  __m128i r = _mm_unpacklo_epi8(_mm512_cvtsepi64_epi8(pe), _mm512_cvtsepi64_epi8(po));
  _mm_mask_storeu_epi8(y, k, _mm_min_epi8(_mm_max_epi8(r, lo), hi));
}

/* Steps 4-5 (the activation, the output converter) on sdp8's t; the codes before CLIP. */
static inline __attribute__((always_inline)) __m128i back8(const vec_params* q, __m512i t,
                                                           int act, int out_cvt) {
  if (act == ACCEL_ACT_RELU) t = _mm512_max_epi64(t, q->zero);
  if (act == ACCEL_ACT_PRELU) {
    const __mmask8 neg = _mm512_movepi64_mask(t);
    const __m512i s = rhaz8(_mm512_mul_epi32(t, q->prelu_mul), q->prelu_half, q->prelu_shift);
    t = _mm512_mask_mov_epi64(t, neg, sat32x8(q, s));
  }
  if (out_cvt) {
    t = rhaz8(_mm512_mul_epi32(t, q->out_mul), q->out_half, q->out_shift); /* t inside int32 */
  }
  return _mm512_cvtsepi64_epi8(_mm512_add_epi64(t, q->out_zero)); /* sat8 */
}

/* Steps 1-5 on 8 values (int64 lanes) of v and the 8 operand codes in the low bytes of `op`;
 * returns the 8 output codes in the low 8 bytes, before CLIP. Flags are compile-time constants
 * in each instantiation below. */
static inline __attribute__((always_inline)) __m128i sdp8(const sdp_i8* p, const vec_params* q,
                                                          __m512i v, __m128i op, int has_mul,
                                                          int ew, int act, int out_cvt) {
  (void)p;
  return back8(q, front8(q, v, op, has_mul, ew), act, out_cvt);
}

static inline __attribute__((always_inline)) void span_body(const sdp_i8* p, const vec_params* q,
                                                            const int32_t* v,
                                                            const int8_t* operand, int8_t* y,
                                                            int64_t count, int has_mul, int ew,
                                                            int act, int out_cvt) {
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 m = tail_mask(count - i);
    const __m512i x = _mm512_maskz_loadu_epi32(m, v + i);
    __m128i op = _mm_setzero_si128();
    if (ew != ACCEL_EW_NONE) op = _mm_maskz_loadu_epi8(m, operand + i);
    const __m128i lo = sdp8(p, q, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(x)), op, has_mul,
                            ew, act, out_cvt);
    const __m128i hi = sdp8(p, q, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(x, 1)),
                            _mm_srli_si128(op, 8), has_mul, ew, act, out_cvt);
    __m128i r = _mm_unpacklo_epi64(lo, hi);
    if (act == ACCEL_ACT_CLIP) r = _mm_min_epi8(_mm_max_epi8(r, q->clip_lo), q->clip_hi);
    _mm_mask_storeu_epi8(y + i, m, r);
  }
}

/* Instantiations: the common epilogues get their own loops, everything else the general one
 * (same steps, flags read at run time). */
typedef void (*span_fn)(const sdp_i8*, const vec_params*, const int32_t*, const int8_t*, int8_t*,
                        int64_t);
#define SPAN(NAME, MUL, EW, ACT, OUT)                                                          \
  static void NAME(const sdp_i8* p, const vec_params* q, const int32_t* v,                     \
                   const int8_t* operand, int8_t* y, int64_t count) {                          \
    span_body(p, q, v, operand, y, count, MUL, EW, ACT, OUT);                                  \
  }
SPAN(span_relu, 1, ACCEL_EW_NONE, ACCEL_ACT_RELU, 0)
SPAN(span_none, 1, ACCEL_EW_NONE, ACCEL_ACT_NONE, 0)
SPAN(span_clip, 1, ACCEL_EW_NONE, ACCEL_ACT_CLIP, 0)
SPAN(span_add_relu, 1, ACCEL_EW_ADD, ACCEL_ACT_RELU, 1)
SPAN(span_add_none, 1, ACCEL_EW_ADD, ACCEL_ACT_NONE, 1)
SPAN(span_add_clip, 1, ACCEL_EW_ADD, ACCEL_ACT_CLIP, 1)

static void span_general(const sdp_i8* p, const vec_params* q, const int32_t* v,
                         const int8_t* operand, int8_t* y, int64_t count) {
  const int out = p->out_mul != 0;
#define GEN_ACT(EW)                                                                           \
  switch (p->act) {                                                                           \
    case ACCEL_ACT_RELU:                                                                      \
      if (out) span_body(p, q, v, operand, y, count, 1, EW, ACCEL_ACT_RELU, 1);               \
      else span_body(p, q, v, operand, y, count, 1, EW, ACCEL_ACT_RELU, 0);                   \
      break;                                                                                  \
    case ACCEL_ACT_CLIP:                                                                      \
      if (out) span_body(p, q, v, operand, y, count, 1, EW, ACCEL_ACT_CLIP, 1);               \
      else span_body(p, q, v, operand, y, count, 1, EW, ACCEL_ACT_CLIP, 0);                   \
      break;                                                                                  \
    case ACCEL_ACT_PRELU:                                                                     \
      if (out) span_body(p, q, v, operand, y, count, 1, EW, ACCEL_ACT_PRELU, 1);              \
      else span_body(p, q, v, operand, y, count, 1, EW, ACCEL_ACT_PRELU, 0);                  \
      break;                                                                                  \
    default:                                                                                  \
      if (out) span_body(p, q, v, operand, y, count, 1, EW, ACCEL_ACT_NONE, 1);               \
      else span_body(p, q, v, operand, y, count, 1, EW, ACCEL_ACT_NONE, 0);                   \
      break;                                                                                  \
  }
  switch (p->ew_op) {
    case ACCEL_EW_ADD: GEN_ACT(ACCEL_EW_ADD) break;
    case ACCEL_EW_MUL: GEN_ACT(ACCEL_EW_MUL) break;
    case ACCEL_EW_MAX: GEN_ACT(ACCEL_EW_MAX) break;
    case ACCEL_EW_MIN: GEN_ACT(ACCEL_EW_MIN) break;
    default: GEN_ACT(ACCEL_EW_NONE) break;
  }
#undef GEN_ACT
}

/* The common converter (no element-wise op, out_mul 0, act NONE / RELU / CLIP), in fewer
 * steps with the same result:
 *  - sat32(v + bias) = min(max(v, INT32_MIN - min(bias, 0)), INT32_MAX - max(bias, 0)) + bias,
 *    in int32 lanes;
 *  - the products t * mul of the even and odd lanes (vpmuldq), int64;
 *  - rhaz(p, s) + out_zero = (p + 2^(s-1) + (p < 0 ? -1 : 0) + out_zero * 2^s) >> s, arithmetic
 *    shift (s >= 1; exact while out_zero * 2^s fits: s <= 55);
 *  - the sat32 after the multiply is dropped: sat8(sat32(x) + out_zero) = sat8(x + out_zero),
 *    and RELU (max(t, 0)) commutes with both clamps, so it becomes y = max(y, out_zero) on the
 *    codes, as CLIP is min(max(y, clip_lo), clip_hi). */
static void span_fast(const int32_t* v, int8_t* y, int64_t count, int64_t bias, int64_t mul,
                      int64_t s, int64_t out_zero, int32_t lo, int32_t hi) {
  const __m512i vlo = _mm512_set1_epi32((int32_t)(INT32_MIN - (bias < 0 ? bias : 0)));
  const __m512i vhi = _mm512_set1_epi32((int32_t)(INT32_MAX - (bias > 0 ? bias : 0)));
  const __m512i b = _mm512_set1_epi32((int32_t)bias), m = _mm512_set1_epi64(mul);
  const __m512i hz =
      _mm512_set1_epi64((s > 0 ? (int64_t)1 << (s - 1) : 0) + out_zero * ((int64_t)1 << s));
  const __m512i sh = _mm512_set1_epi64(s);
  const __m128i l8 = _mm_set1_epi8((char)lo), h8 = _mm_set1_epi8((char)hi);
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 k = tail_mask(count - i);
    __m512i pe, po;
    biased_products(_mm512_maskz_loadu_epi32(k, v + i), vlo, vhi, b, m, &pe, &po);
    if (s > 0) {
      pe = rounding_shift(pe, hz, sh);
      po = rounding_shift(po, hz, sh);
    } else {
      pe = _mm512_add_epi64(pe, hz);
      po = _mm512_add_epi64(po, hz);
    }
    store_codes(pe, po, l8, h8, k, y + i);
  }
}

/* span_fast32's plan (fast32, fast32_plan) and its identities: sdp_i8_internal.h. */

/* 16 codes of the int32 results y (saturated to int8, then clamped to [lo, hi]). */
static inline void store_codes32(__m512i y, __m128i lo, __m128i hi, __mmask16 k, int8_t* out) {
  const __m128i r = _mm512_cvtsepi32_epi8(y);
  _mm_mask_storeu_epi8(out, k, _mm_min_epi8(_mm_max_epi8(r, lo), hi));
}

/* The int32 lanes of span_fast32: the result before the int8 saturation. */
typedef struct fast32_vec {
  __m512i vlo, vhi, b, m, add, low16;
  __m128i sh;
} fast32_vec;

static inline fast32_vec fast32_vectors(const fast32* f) {
  fast32_vec c;
  c.vlo = _mm512_set1_epi32(f->vlo);
  c.vhi = _mm512_set1_epi32(f->vhi);
  c.b = _mm512_set1_epi32(f->bias);
  c.m = _mm512_set1_epi32(f->mul);
  c.add = _mm512_set1_epi32(f->add);
  c.low16 = _mm512_set1_epi32(0xFFFF);
  c.sh = _mm_cvtsi32_si128(f->shift);
  return c;
}

static inline __attribute__((always_inline)) __m512i fast32_lanes(const fast32_vec* c, __m512i x,
                                                                  int split, int shift) {
  const __m512i t = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(x, c->vlo), c->vhi), c->b);
  if (split) {
    const __m512i ph = _mm512_mullo_epi32(_mm512_srai_epi32(t, 16), c->m);
    const __m512i pl = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_and_si512(t, c->low16), c->m),
                                        _mm512_srai_epi32(t, 31));
    const __m512i q = _mm512_add_epi32(_mm512_add_epi32(ph, c->add), _mm512_srai_epi32(pl, 16));
    return _mm512_sra_epi32(q, c->sh);
  }
  const __m512i p = _mm512_mullo_epi32(t, c->m);
  const __m512i q = _mm512_add_epi32(p, c->add);
  if (!shift) return q;
  return _mm512_sra_epi32(_mm512_add_epi32(q, _mm512_srai_epi32(p, 31)), c->sh);
}

static inline __attribute__((always_inline)) void fast32_body(const fast32_vec* c,
                                                              const int32_t* v, int8_t* y,
                                                              int64_t count, int32_t lo,
                                                              int32_t hi, int split, int shift) {
  const __m512i l64 = _mm512_set1_epi8((char)lo), h64 = _mm512_set1_epi8((char)hi);
  int64_t i = 0;
  for (; i + 64 <= count; i += 64) {
    const __m512i r = sdp_i8_codes64(fast32_lanes(c, _mm512_loadu_si512(v + i), split, shift),
                              fast32_lanes(c, _mm512_loadu_si512(v + i + 16), split, shift),
                              fast32_lanes(c, _mm512_loadu_si512(v + i + 32), split, shift),
                              fast32_lanes(c, _mm512_loadu_si512(v + i + 48), split, shift));
    _mm512_storeu_si512(y + i, _mm512_min_epi8(_mm512_max_epi8(r, l64), h64));
  }
  const __m128i l8 = _mm512_castsi512_si128(l64), h8 = _mm512_castsi512_si128(h64);
  for (; i < count; i += 16) {
    const __mmask16 k = tail_mask(count - i);
    store_codes32(fast32_lanes(c, _mm512_maskz_loadu_epi32(k, v + i), split, shift), l8, h8, k,
                  y + i);
  }
}

static void span_fast32(const fast32* f, const int32_t* v, int8_t* y, int64_t count, int32_t lo,
                        int32_t hi) {
  const fast32_vec c = fast32_vectors(f);
  if (f->split) fast32_body(&c, v, y, count, lo, hi, 1, 1);
  else if (f->shift > 0) fast32_body(&c, v, y, count, lo, hi, 0, 1);
  else fast32_body(&c, v, y, count, lo, hi, 0, 0);
}

/* The residual converter (element-wise ADD, an output converter, act NONE / RELU / CLIP) with
 * the same devices as span_fast; besides:
 *  - e = rhaz((operand - ew_zero) * ew_mul, ew_shift) in int32 lanes: |(operand - ew_zero) *
 *    ew_mul| <= 255 * 2^15 < 2^23, so the sum with half cannot overflow for ew_shift < 24, and
 *    e = 0 for ew_shift >= 24 (the magnitude is below half); no sat32 is needed;
 *  - the output converter folds out_zero into the rounding as span_fast does (out_shift <= 55),
 *    RELU stays before it (a negative out_mul reverses the order). */
static void span_fast_add(const sdp_i8* p, const chan_params* c, const int32_t* v,
                          const int8_t* operand, int8_t* y, int64_t count) {
  const int64_t bias = c->bias, s = c->shift, es = p->ew_shift, os = p->out_shift;
  const __m512i vlo = _mm512_set1_epi32((int32_t)(INT32_MIN - (bias < 0 ? bias : 0)));
  const __m512i vhi = _mm512_set1_epi32((int32_t)(INT32_MAX - (bias > 0 ? bias : 0)));
  const __m512i b = _mm512_set1_epi32((int32_t)bias), m = _mm512_set1_epi64(c->mul);
  const __m512i h = _mm512_set1_epi64(s > 0 ? (int64_t)1 << (s - 1) : 0);
  const __m512i sh = _mm512_set1_epi64(s);
  const __m512i lo32 = _mm512_set1_epi64(INT32_MIN), hi32 = _mm512_set1_epi64(INT32_MAX);
  const __m512i ez = _mm512_set1_epi32(p->ew_zero), em = _mm512_set1_epi32(p->ew_mul);
  const __m512i eh = _mm512_set1_epi32(es > 0 && es < 24 ? 1 << (es - 1) : 0);
  const __m512i esh = _mm512_set1_epi32(es < 24 ? (int32_t)es : 0);
  const __m512i om = _mm512_set1_epi64(p->out_mul);
  const __m512i hz =
      _mm512_set1_epi64((os > 0 ? (int64_t)1 << (os - 1) : 0) + p->out_zero * ((int64_t)1 << os));
  const __m512i osh = _mm512_set1_epi64(os);
  const __m512i zero = _mm512_setzero_si512();
  const int relu = p->act == ACCEL_ACT_RELU;
  const __m128i l8 = _mm_set1_epi8((char)p->clip_lo), h8 = _mm_set1_epi8((char)p->clip_hi);
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 k = tail_mask(count - i);
    __m512i pe, po;
    biased_products(_mm512_maskz_loadu_epi32(k, v + i), vlo, vhi, b, m, &pe, &po);
    if (s > 0) {
      pe = rounding_shift(pe, h, sh);
      po = rounding_shift(po, h, sh);
    }
    pe = _mm512_min_epi64(_mm512_max_epi64(pe, lo32), hi32);
    po = _mm512_min_epi64(_mm512_max_epi64(po, lo32), hi32);
    __m512i e = zero;
    if (es < 24) {
      const __m512i o = _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(k, operand + i));
      e = _mm512_mullo_epi32(_mm512_sub_epi32(o, ez), em);
      if (es > 0)
        e = _mm512_srav_epi32(_mm512_add_epi32(_mm512_add_epi32(e, eh), _mm512_srai_epi32(e, 31)),
                              esh);
    }
    pe = _mm512_add_epi64(pe, _mm512_srai_epi64(_mm512_slli_epi64(e, 32), 32));
    po = _mm512_add_epi64(po, _mm512_srai_epi64(e, 32));
    pe = _mm512_min_epi64(_mm512_max_epi64(pe, lo32), hi32);
    po = _mm512_min_epi64(_mm512_max_epi64(po, lo32), hi32);
    if (relu) {
      pe = _mm512_max_epi64(pe, zero);
      po = _mm512_max_epi64(po, zero);
    }
    pe = _mm512_mul_epi32(pe, om);
    po = _mm512_mul_epi32(po, om);
    if (os > 0) {
      pe = rounding_shift(pe, hz, osh);
      po = rounding_shift(po, hz, osh);
    } else {
      pe = _mm512_add_epi64(pe, hz);
      po = _mm512_add_epi64(po, hz);
    }
    store_codes(pe, po, l8, h8, k, y + i);
  }
}

/* span_add32's plan (add32, add32_plan) and its identities: sdp_i8_internal.h. */

typedef struct add32_vec {
  __m512i vlo, vhi, b, m, add, c_lo, low, tlo, thi, om, oadd, ez, em, eh, zero;
  __m128i k, sh, osh, esh;
  int32_t es, shift, out_shift;
} add32_vec;

/* The int32 result of 16 values x with their operand codes o (int32 lanes), before the int8
 * saturation. */
static inline __attribute__((always_inline)) __m512i add32_lanes(const add32_vec* c, __m512i x,
                                                                 __m512i o, int relu, int split,
                                                                 int unit_out) {
  const __m512i t = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(x, c->vlo), c->vhi), c->b);
  __m512i u;
  if (split) {
    const __m512i lp = _mm512_add_epi32(
        _mm512_add_epi32(_mm512_mullo_epi32(_mm512_and_si512(t, c->low), c->m), c->c_lo),
        _mm512_srai_epi32(t, 31));
    const __m512i hp = _mm512_mullo_epi32(_mm512_sra_epi32(t, c->k), c->m);
    u = _mm512_sra_epi32(_mm512_add_epi32(_mm512_add_epi32(hp, c->add), _mm512_sra_epi32(lp, c->k)),
                         c->sh);
  } else {
    const __m512i pr = _mm512_mullo_epi32(t, c->m);
    u = _mm512_add_epi32(pr, c->add);
    if (c->shift > 0) u = _mm512_sra_epi32(_mm512_add_epi32(u, _mm512_srai_epi32(pr, 31)), c->sh);
  }
  if (c->es < 24) {
    __m512i e = _mm512_mullo_epi32(_mm512_sub_epi32(o, c->ez), c->em);
    if (c->es > 0)
      e = _mm512_sra_epi32(_mm512_add_epi32(_mm512_add_epi32(e, c->eh), _mm512_srai_epi32(e, 31)),
                           c->esh);
    u = _mm512_add_epi32(u, e);
  }
  if (relu) u = _mm512_max_epi32(u, c->zero);
  u = _mm512_min_epi32(_mm512_max_epi32(u, c->tlo), c->thi);
  const __m512i pr = unit_out ? u : _mm512_mullo_epi32(u, c->om);
  const __m512i q = _mm512_add_epi32(pr, c->oadd);
  if (c->out_shift == 0) return q;
  return _mm512_sra_epi32(_mm512_add_epi32(q, _mm512_srai_epi32(pr, 31)), c->osh);
}

static inline __attribute__((always_inline)) void add32_body(const add32_vec* c,
                                                             const int32_t* v,
                                                             const int8_t* operand, int8_t* y,
                                                             int64_t count, int relu, int split,
                                                             int unit_out, __m128i l8,
                                                             __m128i h8) {
  const __m512i l64 = _mm512_broadcast_i32x4(l8), h64 = _mm512_broadcast_i32x4(h8);
  int64_t i = 0;
  for (; i + 64 <= count; i += 64) {
    __m512i q[4];
    for (int j = 0; j < 4; ++j) {
      const __m512i o = c->es < 24 ? _mm512_cvtepi8_epi32(_mm_loadu_si128(
                                         (const __m128i*)(const void*)(operand + i + 16 * j)))
                                   : c->zero;
      q[j] = add32_lanes(c, _mm512_loadu_si512(v + i + 16 * j), o, relu, split, unit_out);
    }
    const __m512i r = sdp_i8_codes64(q[0], q[1], q[2], q[3]);
    _mm512_storeu_si512(y + i, _mm512_min_epi8(_mm512_max_epi8(r, l64), h64));
  }
  for (; i < count; i += 16) {
    const __mmask16 mk = tail_mask(count - i);
    const __m512i o = c->es < 24 ? _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mk, operand + i))
                                 : c->zero;
    store_codes32(add32_lanes(c, _mm512_maskz_loadu_epi32(mk, v + i), o, relu, split, unit_out),
                  l8, h8, mk, y + i);
  }
}

/* The instantiations: split or direct channel converter, out_mul 1 or any, RELU or not. */
static void span_add32(const sdp_i8* p, const add32* f, const int32_t* v, const int8_t* operand,
                       int8_t* y, int64_t count) {
  const int32_t es = p->ew_shift;
  add32_vec c;
  c.vlo = _mm512_set1_epi32(f->vlo);
  c.vhi = _mm512_set1_epi32(f->vhi);
  c.b = _mm512_set1_epi32(f->bias);
  c.m = _mm512_set1_epi32(f->mul);
  c.add = _mm512_set1_epi32(f->split ? f->c_hi : f->add);
  c.c_lo = _mm512_set1_epi32(f->c_lo);
  c.low = _mm512_set1_epi32(f->low_mask);
  c.k = _mm_cvtsi32_si128(f->k);
  c.sh = _mm_cvtsi32_si128(f->shift);
  c.tlo = _mm512_set1_epi32(-f->t_out);
  c.thi = _mm512_set1_epi32(f->t_out);
  c.om = _mm512_set1_epi32(f->out_mul);
  c.oadd = _mm512_set1_epi32(f->out_add);
  c.osh = _mm_cvtsi32_si128(f->out_shift);
  c.esh = _mm_cvtsi32_si128(es < 24 ? es : 0);
  c.ez = _mm512_set1_epi32(p->ew_zero);
  c.em = _mm512_set1_epi32(p->ew_mul);
  c.eh = _mm512_set1_epi32(es > 0 && es < 24 ? 1 << (es - 1) : 0);
  c.zero = _mm512_setzero_si512();
  c.es = es;
  c.shift = f->shift;
  c.out_shift = f->out_shift;
  const __m128i l8 = _mm_set1_epi8((char)p->clip_lo), h8 = _mm_set1_epi8((char)p->clip_hi);
  const int relu = p->act == ACCEL_ACT_RELU, unit = f->out_mul == 1;
#define ADD32(RELU, SPLIT, UNIT) add32_body(&c, v, operand, y, count, RELU, SPLIT, UNIT, l8, h8)
  if (relu) {
    if (f->split) {
      if (unit) ADD32(1, 1, 1); else ADD32(1, 1, 0);
    } else {
      if (unit) ADD32(1, 0, 1); else ADD32(1, 0, 0);
    }
  } else {
    if (f->split) {
      if (unit) ADD32(0, 1, 1); else ADD32(0, 1, 0);
    } else {
      if (unit) ADD32(0, 0, 1); else ADD32(0, 0, 0);
    }
  }
#undef ADD32
}

/* One value per channel, channels first.., 8 lanes at a time: the general steps (sdp8) with
 * each lane's own channel parameters. */
void sdp_i8_channels_avx512(const sdp_i8* p, int32_t first, const int32_t* v,
                            const int8_t* operand, int8_t* y, int64_t count) {
  vec_params q;
  call_params(p, &q);
  const __m512i one = _mm512_set1_epi64(1);
  const int out = p->out_mul != 0;
  for (int64_t i = 0; i < count; i += 8) {
    const __mmask8 m = count - i >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (count - i)) - 1u);
    const int64_t ch = first + i;
    q.bias = p->bias != NULL ? _mm512_cvtepi32_epi64(_mm256_maskz_loadu_epi32(m, p->bias + ch))
                             : q.zero;
    q.mul = p->mul != NULL ? _mm512_cvtepi16_epi64(_mm_maskz_loadu_epi16(m, p->mul + ch)) : one;
    bn_lanes(p, &q, ch, m);
    q.prelu_mul = p->prelu_mul != NULL
                      ? _mm512_cvtepi16_epi64(_mm_maskz_loadu_epi16(m, p->prelu_mul + ch))
                      : one;
    const __m512i x = _mm512_cvtepi32_epi64(_mm256_maskz_loadu_epi32(m, v + i));
    const __m128i op = operand != NULL ? _mm_maskz_loadu_epi8(m, operand + i) : _mm_setzero_si128();
    __m128i r = sdp8(p, &q, x, op, 1, p->ew_op, p->act, out);
    if (p->act == ACCEL_ACT_CLIP) r = _mm_min_epi8(_mm_max_epi8(r, q.clip_lo), q.clip_hi);
    _mm_mask_storeu_epi8(y + i, m, r);
  }
}

void sdp_i8_span_avx512(const sdp_i8* p, int32_t ch, const int32_t* v, const int8_t* operand,
                        int8_t* y, int64_t count) {
  const chan_params c = channel_params(p, ch);
  /* the exact forms hold for this channel where BS cannot saturate before the codes do */
  const int cvt_exact = bs_exact_to(&c, code_threshold(c.mul, c.shift, 128 + abs64(p->out_zero)));
  if (p->ew_op == ACCEL_EW_NONE && p->out_mul == 0 && c.shift <= 55 && cvt_exact &&
      (p->act == ACCEL_ACT_NONE || p->act == ACCEL_ACT_RELU || p->act == ACCEL_ACT_CLIP)) {
    const int32_t lo = p->act == ACCEL_ACT_RELU ? p->out_zero
                       : p->act == ACCEL_ACT_CLIP ? p->clip_lo : -128;
    const int32_t hi = p->act == ACCEL_ACT_CLIP ? p->clip_hi : 127;
    fast32 f;
    if (fast32_plan(c.bias, c.mul, c.shift, p->out_zero, &f)) {
      span_fast32(&f, v, y, count, lo, hi);
      return;
    }
    span_fast(v, y, count, c.bias, c.mul, c.shift, p->out_zero, lo, hi);
    return;
  }
  if (p->ew_op == ACCEL_EW_ADD && p->out_mul != 0 && p->out_shift <= 55 &&
      bs_exact_to(&c, add_threshold(p, &c)) &&
      (p->act == ACCEL_ACT_NONE || p->act == ACCEL_ACT_RELU || p->act == ACCEL_ACT_CLIP)) {
    add32 f;
    if (add32_plan(p, c.bias, c.mul, c.shift, &f)) {
      span_add32(p, &f, v, operand, y, count);
      return;
    }
    span_fast_add(p, &c, v, operand, y, count);
    return;
  }
  vec_params q;
  call_params(p, &q);
  channel_vectors(&c, &q);
  span_fn fn = span_general;
  if (p->ew_op == ACCEL_EW_NONE && p->out_mul == 0) {
    fn = p->act == ACCEL_ACT_RELU ? span_relu
         : p->act == ACCEL_ACT_NONE ? span_none
         : p->act == ACCEL_ACT_CLIP ? span_clip : span_general;
  } else if (p->ew_op == ACCEL_EW_ADD && p->out_mul != 0) {
    fn = p->act == ACCEL_ACT_RELU ? span_add_relu
         : p->act == ACCEL_ACT_NONE ? span_add_none
         : p->act == ACCEL_ACT_CLIP ? span_add_clip : span_general;
  }
  fn(p, &q, v, operand, y, count);
}

/* An independent run's planes [p0, p1) (of hw codes, c channels) whose element-wise operand is
 * one code per plane (ew_per_channel: squeeze-excite's x * s), without a LUT: the general steps
 * (sdp8's) on the input codes as they lie, the plane's e = sat32(rhaz((o - ew_zero) ew_mul,
 * ew_shift)) taken once (sdp_one's expression) and the call's constants set once. Planes too
 * small for sdp_i8.c's run_table (7x7, 14x14) went through a span call each, after the codes
 * were widened to int32 and the operand copied per value: 2-4 ns a value. */
static inline __attribute__((always_inline)) void planes_body(const sdp_i8* p, vec_params* q,
                                                              int32_t c, int64_t hw,
                                                              const int8_t* in, int8_t* out,
                                                              int64_t p0, int64_t p1, int ew,
                                                              int act, int out_cvt) {
  const __m512i in_zero = _mm512_set1_epi64(p->in_zero);
  const __m128i none = _mm_setzero_si128();
  for (int64_t plane = p0; plane < p1; ++plane) {
    const chan_params cp = channel_params(p, (int32_t)(plane % c));
    channel_vectors(&cp, q);
    const int64_t o = (int64_t)p->ew_operand[plane] - p->ew_zero;
    const __m512i e = _mm512_set1_epi64(sat32(rhaz(o * p->ew_mul, p->ew_shift)));
    const int8_t* x = in + plane * hw;
    int8_t* y = out + plane * hw;
    for (int64_t i = 0; i < hw; i += 16) {
      const __mmask16 m = tail_mask(hw - i);
      const __m128i b = _mm_maskz_loadu_epi8(m, x + i);
      const __m512i v0 = _mm512_sub_epi64(_mm512_cvtepi8_epi64(b), in_zero);
      const __m512i v1 = _mm512_sub_epi64(_mm512_cvtepi8_epi64(_mm_srli_si128(b, 8)), in_zero);
      const __m512i t0 = ew8(q, front8(q, v0, none, 1, ACCEL_EW_NONE), e, ew);
      const __m512i t1 = ew8(q, front8(q, v1, none, 1, ACCEL_EW_NONE), e, ew);
      __m128i r = _mm_unpacklo_epi64(back8(q, t0, act, out_cvt), back8(q, t1, act, out_cvt));
      if (act == ACCEL_ACT_CLIP) r = _mm_min_epi8(_mm_max_epi8(r, q->clip_lo), q->clip_hi);
      _mm_mask_storeu_epi8(y + i, m, r);
    }
  }
}

/* 1 where it ran planes_body (ew_per_channel MUL or ADD, no LUT), 0 where the caller must. */
int sdp_i8_planes_avx512(const sdp_i8* p, int32_t c, int64_t hw, const int8_t* in, int8_t* out,
                         int64_t p0, int64_t p1) {
  if (!p->ew_per_channel || p->lut != NULL || p->ew_operand == NULL ||
      (p->ew_op != ACCEL_EW_MUL && p->ew_op != ACCEL_EW_ADD)) {
    return 0;
  }
  vec_params q;
  call_params(p, &q);
  const int out_cvt = p->out_mul != 0;
#define PLANES_ACT(EW)                                                                      \
  switch (p->act) {                                                                         \
    case ACCEL_ACT_RELU:                                                                    \
      if (out_cvt) planes_body(p, &q, c, hw, in, out, p0, p1, EW, ACCEL_ACT_RELU, 1);       \
      else planes_body(p, &q, c, hw, in, out, p0, p1, EW, ACCEL_ACT_RELU, 0);               \
      break;                                                                                \
    case ACCEL_ACT_CLIP:                                                                    \
      if (out_cvt) planes_body(p, &q, c, hw, in, out, p0, p1, EW, ACCEL_ACT_CLIP, 1);       \
      else planes_body(p, &q, c, hw, in, out, p0, p1, EW, ACCEL_ACT_CLIP, 0);               \
      break;                                                                                \
    case ACCEL_ACT_PRELU:                                                                   \
      if (out_cvt) planes_body(p, &q, c, hw, in, out, p0, p1, EW, ACCEL_ACT_PRELU, 1);      \
      else planes_body(p, &q, c, hw, in, out, p0, p1, EW, ACCEL_ACT_PRELU, 0);              \
      break;                                                                                \
    default:                                                                                \
      if (out_cvt) planes_body(p, &q, c, hw, in, out, p0, p1, EW, ACCEL_ACT_NONE, 1);       \
      else planes_body(p, &q, c, hw, in, out, p0, p1, EW, ACCEL_ACT_NONE, 0);               \
      break;                                                                                \
  }
  if (p->ew_op == ACCEL_EW_MUL) {
    PLANES_ACT(ACCEL_EW_MUL)
  } else {
    PLANES_ACT(ACCEL_EW_ADD)
  }
#undef PLANES_ACT
  return 1;
}

#endif
