/* sdp_i8.c - the SDP engine in INT8: integer converters (semantics in accel.h).
 *
 * sdp_one is the definition, step by step in int64: t * mul is an int32 times an int16
 * (47 bits), rhaz adds half to the magnitude and shifts (0..62), each sat32 clamps. After
 * PRELU, t is not saturated (accel.h applies no sat32 there), so it may leave the int32 range:
 * the output converter then multiplies in full 64 bits (|t| < 2^47, |out_mul| <= 2^15).
 * It is the portable build's code and the reference the tests hold the vector code to.
 *
 * AVX-512: the general path runs exactly those steps on 8 int64 lanes (sdp8). The two
 * converters the compiler emits most have shorter exact forms, whose identities are stated at
 * span_fast and span_fast_add: bias + scale + NONE/RELU/CLIP with out_mul 0 (about 4x faster
 * than the general path; in int32 lanes, span_fast32, where its bounds allow), and the residual
 * add with an output converter (the conv kernels' in-register forms of both: sdp_i8_lanes.h,
 * prepared here). sdp_i8_channels runs
 * the general steps with each lane's own channel, for outputs of one position per image (fully
 * connected layers). A LUT activation runs span_lut / channels_lut: the table in 16 int32 lanes
 * with gathers (its identities at lut_vec); ACCEL_SDP_I8_LUT=scalar forces sdp_one instead.
 * A layer run of at least 2^16 values plans its LUT once (sdp_i8_lut_plan: the codes by bins
 * of the table's input, one gather and a compare per 16 values instead of the table's
 * arithmetic; ACCEL_SDP_I8_LUT=gather keeps the table in lanes, ACCEL_VERBOSE prints the
 * plan).
 * The CONV epilogue and sdp_i8_run both go through these, so fused and independent runs give
 * identical codes. Figures: docs/kernels.md.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "kernels.h"
#include "sdp_i8_lanes.h"

/* ---- scalar definition ------------------------------------------------------------------ */

static inline int64_t rhaz(int64_t p, int64_t s) {
  const int64_t half = s > 0 ? (int64_t)1 << (s - 1) : 0;
  const int64_t a = ((p < 0 ? -p : p) + half) >> s;
  return p < 0 ? -a : a;
}

static inline int64_t sat32(int64_t x) {
  return x < INT32_MIN ? INT32_MIN : x > INT32_MAX ? INT32_MAX : x;
}

static inline int64_t clamp64(int64_t x, int64_t lo, int64_t hi) {
  return x < lo ? lo : x > hi ? hi : x;
}

/* The per-channel parameters of one element, resolved (NULL arrays: bias 0, mul 1, shift 0,
 * prelu_mul 1). */
typedef struct chan_params {
  int64_t bias, mul, shift, prelu_mul;
} chan_params;

static inline chan_params channel_params(const sdp_i8* p, int32_t ch) {
  chan_params c;
  c.bias = p->bias != NULL ? p->bias[ch] : 0;
  c.mul = p->mul != NULL ? p->mul[ch] : 1;
  c.shift = p->rshift != NULL ? p->rshift[ch] : 0;
  c.prelu_mul = p->prelu_mul != NULL ? p->prelu_mul[ch] : 1;
  return c;
}

static inline int8_t sdp_one(const sdp_i8* p, const chan_params* c, int64_t v, int operand) {
  int64_t t = sat32(v + c->bias);
  t = sat32(rhaz(t * c->mul, c->shift));
  if (p->ew_op != ACCEL_EW_NONE) {
    const int64_t e = sat32(rhaz(((int64_t)operand - p->ew_zero) * p->ew_mul, p->ew_shift));
    switch (p->ew_op) {
      case ACCEL_EW_ADD: t = sat32(t + e); break;
      case ACCEL_EW_MUL: t = sat32(t * e); break;
      case ACCEL_EW_MAX: t = t > e ? t : e; break;
      case ACCEL_EW_MIN: t = t < e ? t : e; break;
      case ACCEL_EW_NONE:
      case ACCEL_EW_COUNT: break;
    }
  }
  if (p->act == ACCEL_ACT_RELU) {
    t = t < 0 ? 0 : t;
  } else if (p->act == ACCEL_ACT_PRELU && t < 0) {
    t = rhaz(t * c->prelu_mul, p->prelu_shift);
  } else if (p->lut != NULL) {
    t = lut_int8_eval(p->lut, t);
  }
  int64_t y = p->out_mul != 0 ? rhaz(t * p->out_mul, p->out_shift) : t;
  y = clamp64(y + p->out_zero, -128, 127);
  if (p->act == ACCEL_ACT_CLIP) y = clamp64(y, p->clip_lo, p->clip_hi);
  return (int8_t)y;
}

static __attribute__((unused)) void channels_scalar(const sdp_i8* p, int32_t first,
                                                   const int32_t* v, const int8_t* operand,
                                                   int8_t* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const chan_params c = channel_params(p, (int32_t)(first + i));
    y[i] = sdp_one(p, &c, v[i], operand != NULL ? operand[i] : 0);
  }
}

static __attribute__((unused)) void span_scalar(const sdp_i8* p, int32_t ch, const int32_t* v,
                                               const int8_t* operand, int8_t* y, int64_t count) {
  const chan_params c = channel_params(p, ch);
  for (int64_t i = 0; i < count; ++i)
    y[i] = sdp_one(p, &c, v[i], operand != NULL ? operand[i] : 0);
}

/* ---- a LUT activation's codes by input ranges (sdp_i8_lut_plan) ------------------------------
 * After the X converters the code is a function G of the LUT's input t alone (the table, the
 * output converter, sat8). Inside LO, t = lo_start + i 2^sel + d (0 <= d < 2^sel), the table
 * interpolates linearly between two entries, so y, and then the code, is monotonic in d: on
 * every bin of 2^w values of t inside one LO interval (w <= sel) the code is constant or
 * changes at one threshold, or (rarely) at two or more. Outside LO, G is monotonic on each LE
 * interval and on each slope; where it is constant on all of (-inf, lo_start) and on all of
 * (lo_end, +inf) (the compiler's tables: quantization/lut.py puts every code change inside
 * LO), t clamped to [lo_start - 1, lo_end + 1] gives the same code. The plan holds one word
 * per bin: bits 0-15 the offset in the bin from which the code is bits 24-31, below it bits
 * 16-23; offset 0xFFFF marks a bin with more than one change (its lanes take the table
 * arithmetic, lut16). The bin codes are G's own values (lut_code: lut_int8_eval and the output
 * converter of sdp_one), the threshold found by bisection, so the codes are sdp_one's
 * exactly. */
struct sdp_i8_lut_plan {
  int32_t t_lo, t_hi; /* t's clamp: the first and last bins' codes hold beyond them */
  int32_t base, w;    /* bin b holds t in [base + b 2^w, base + (b + 1) 2^w) */
  int32_t bins_count;
  uint32_t bins[];
};

enum { LUT_PLAN_MIN_ELEMENTS = 1 << 16, LUT_PLAN_MULTI = 0xFFFF };

static int lut_code(const sdp_i8* p, int64_t t) {
  const int64_t y = lut_int8_eval(p->lut, t);
  int64_t q = p->out_mul != 0 ? rhaz(y * p->out_mul, p->out_shift) : y;
  q = clamp64(q + p->out_zero, -128, 127);
  if (p->act == ACCEL_ACT_CLIP) q = clamp64(q, p->clip_lo, p->clip_hi);
  return (int)q;
}

/* The inputs where G's monotonic pieces start outside LO, and LO's ends (sorted; unused
 * places INT64_MAX): LE's entries' inputs (LE, then the overflow slope from the last; the
 * underflow slope below the first). Inside LO the pieces are LO's intervals, whose ends are
 * the bins'. */
enum { LUT_CUTS = ACCEL_LUT_LE_ENTRIES + 2 };

static void lut_cuts(const accel_lut_int8* l, int64_t* cut) {
  const int64_t a = l->lo_start;
  const int64_t b1 = a + ((int64_t)(ACCEL_LUT_LO_ENTRIES - 1) << l->lo_index_select);
  int n = 0;
  for (int64_t j = 0; j < ACCEL_LUT_LE_ENTRIES; ++j) {
    const int64_t c = (int64_t)l->le_start + (j << l->le_index_select);
    if (c <= a || c >= b1) cut[n++] = c;
  }
  cut[n++] = a;
  cut[n++] = b1;
  while (n < LUT_CUTS) cut[n++] = INT64_MAX;
  for (int i = 1; i < n; ++i) /* insertion: LE's entries are in order already */
    for (int j = i; j > 0 && cut[j - 1] > cut[j]; --j) {
      const int64_t x = cut[j];
      cut[j] = cut[j - 1];
      cut[j - 1] = x;
    }
}

/* Whether G is `code` throughout [a, b], given the cuts (the pieces are monotonic: constant
 * where both ends are `code`). */
static int lut_constant(const sdp_i8* p, const int64_t* cut, int64_t a, int64_t b, int code) {
  for (int i = 0; i < LUT_CUTS && a <= b; ++i) {
    if (cut[i] <= a || cut[i] > b) continue;
    if (lut_code(p, a) != code || lut_code(p, cut[i] - 1) != code) return 0;
    a = cut[i];
  }
  return a > b || (lut_code(p, a) == code && lut_code(p, b) == code);
}

static inline const char* lut_env(void) { return getenv("ACCEL_SDP_I8_LUT"); }

/* The bins: 2^w values of t, aligned on LO's intervals, over LO and as far beyond it as the
 * codes change (the compiler's tables: a few LE intervals), then at most LUT_PLAN_BINS. */
enum { LUT_PLAN_BINS = 4096 };

struct sdp_i8_lut_plan* sdp_i8_lut_plan_new(const sdp_i8* p, int64_t elements) {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
    defined(__AVX512VL__)
  const char* env = lut_env();
  if (p->lut == NULL || elements < LUT_PLAN_MIN_ELEMENTS || (env != NULL && *env != '\0'))
    return NULL;
  const accel_lut_int8* l = p->lut;
  const int32_t sel = l->lo_index_select;
  const int32_t w = sel > 3 ? sel - 3 : 0;
  if (sel < 0 || w > 15) return NULL;
  const int64_t a = l->lo_start, b = a + ((int64_t)(ACCEL_LUT_LO_ENTRIES - 1) << sel) - 1;
  const int64_t width = (int64_t)1 << w;
  int64_t cut[LUT_CUTS];
  lut_cuts(l, cut);
  /* below LO: the pieces from INT32_MIN up while G keeps its code there; the first that
   * does not starts the bins' range (d_lo); above LO likewise downwards from INT32_MAX */
  const int low = lut_code(p, INT32_MIN), high = lut_code(p, INT32_MAX);
  int64_t d_lo = a, d_hi = b, from = INT32_MIN;
  for (int i = 0; i <= LUT_CUTS; ++i) {
    const int64_t to = i < LUT_CUTS && cut[i] < a ? cut[i] - 1 : a - 1;
    if (to < from) continue;
    if (!lut_constant(p, cut, from, to, low)) {
      d_lo = from;
      break;
    }
    from = to + 1;
    if (from >= a) break;
  }
  int64_t upto = INT32_MAX;
  for (int i = LUT_CUTS - 1; i >= -1; --i) {
    const int64_t start = i >= 0 && cut[i] > b + 1 ? cut[i] : b + 1;
    if (start > upto) continue;
    if (!lut_constant(p, cut, start, upto, high)) {
      d_hi = upto;
      break;
    }
    upto = start - 1;
    if (upto <= b) break;
  }
  const int64_t below = (a - d_lo + width - 1) / width + 1; /* bins below LO, the first constant */
  const int64_t above = (d_hi - b + width - 1) / width + 1;
  const int64_t inner = (b + 1 - a) >> w, count = below + inner + above;
  const int64_t base = a - below * width, end = b + above * width; /* t's clamp */
  if (count > LUT_PLAN_BINS || base < INT32_MIN || end > INT32_MAX) return NULL;
  struct sdp_i8_lut_plan* plan = malloc(sizeof(*plan) + (size_t)count * sizeof(uint32_t));
  if (plan == NULL) return NULL;
  plan->t_lo = (int32_t)base;
  plan->t_hi = (int32_t)end;
  plan->base = (int32_t)base;
  plan->w = w;
  plan->bins_count = (int32_t)count;
#define LUT_BIN(off, below, above) \
  ((uint32_t)(off) | (uint32_t)(uint8_t)(below) << 16 | (uint32_t)(uint8_t)(above) << 24)
  int next = 0; /* the first cut above the bin's start */
  for (int64_t k = 0; k < count; ++k) {
    const int64_t s = base + (k << w), e = s + width - 1;
    while (next < LUT_CUTS && cut[next] <= s) ++next;
    const int gs = lut_code(p, s);
    if (next < LUT_CUTS && cut[next] <= e) { /* pieces meet in the bin: constant, or lanes */
      plan->bins[k] = lut_constant(p, cut, s, e, gs) ? LUT_BIN(0, gs, gs)
                                                      : LUT_BIN(LUT_PLAN_MULTI, 0, 0);
      continue;
    }
    const int ge = lut_code(p, e);
    if (gs == ge) {
      plan->bins[k] = LUT_BIN(0, gs, gs);
      continue;
    }
    /* G is monotonic on the bin: the inputs that give ge are a final run of (s, e] */
    int64_t lo = s + 1, hi = e;
    while (lo < hi) {
      const int64_t mid = lo + ((hi - lo) >> 1);
      if (lut_code(p, mid) == ge) hi = mid;
      else lo = mid + 1;
    }
    plan->bins[k] = lut_code(p, lo - 1) == gs ? LUT_BIN(lo - s, gs, ge)
                                              : LUT_BIN(LUT_PLAN_MULTI, 0, 0);
  }
#undef LUT_BIN
  if (conv_verbose()) { /* ACCEL_VERBOSE: which path converts the LUT layer */
    int64_t changes = 0, multi = 0;
    for (int64_t k = 0; k < count; ++k) {
      changes += (plan->bins[k] & 0xFFFF) != 0;
      multi += (plan->bins[k] & 0xFFFF) == LUT_PLAN_MULTI;
    }
    fprintf(stderr, "accel_verbose,sdp,int8,lut_plan,bins%lld_w%d_changes%lld_multi%lld\n",
            (long long)count, w, (long long)(changes - multi), (long long)multi);
  }
  return plan;
#else
  (void)p, (void)elements;
  return NULL;
#endif
}

void sdp_i8_lut_plan_free(struct sdp_i8_lut_plan* plan) { free(plan); }

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
    defined(__AVX512VL__)
/* ---- AVX-512: 16 values per step, as two halves of 8 int64 lanes ------------------------- */

typedef struct vec_params {
  __m512i bias, mul, half, shift, prelu_mul;           /* per lane (one channel here) */
  __m512i ew_zero, ew_mul, ew_half, ew_shift;
  __m512i prelu_half, prelu_shift;
  __m512i out_mul, out_half, out_shift, out_zero;
  __m512i lo32, hi32, zero;
  __m128i clip_lo, clip_hi;
} vec_params;

static inline __m512i half_of(int64_t s) {
  return _mm512_set1_epi64(s > 0 ? (int64_t)1 << (s - 1) : 0);
}

/* rhaz on 8 int64 lanes: |p| + half, logical shift, sign back. */
static inline __m512i rhaz8(__m512i p, __m512i half, __m512i shift) {
  const __mmask8 neg = _mm512_movepi64_mask(p);
  const __m512i a = _mm512_srlv_epi64(_mm512_add_epi64(_mm512_abs_epi64(p), half), shift);
  return _mm512_mask_sub_epi64(a, neg, _mm512_setzero_si512(), a);
}

/* Lanes [0, left) of a 16-lane step. */
static inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

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

static inline __m512i sat32x8(const vec_params* q, __m512i x) {
  return _mm512_min_epi64(_mm512_max_epi64(x, q->lo32), q->hi32);
}

/* Steps 1-3 (bias, multiplier, element-wise op) on 8 values: t, inside int32. */
static inline __attribute__((always_inline)) __m512i front8(const vec_params* q, __m512i v,
                                                            __m128i op, int has_mul, int ew) {
  __m512i t = sat32x8(q, _mm512_add_epi64(v, q->bias));
  if (has_mul) t = sat32x8(q, rhaz8(_mm512_mul_epi32(t, q->mul), q->half, q->shift));
  if (ew != ACCEL_EW_NONE) {
    const __m512i o = _mm512_sub_epi64(_mm512_cvtepi8_epi64(op), q->ew_zero);
    const __m512i e = sat32x8(q, rhaz8(_mm512_mullo_epi64(o, q->ew_mul), q->ew_half, q->ew_shift));
    if (ew == ACCEL_EW_ADD) t = sat32x8(q, _mm512_add_epi64(t, e));
    if (ew == ACCEL_EW_MUL) t = sat32x8(q, _mm512_mul_epi32(t, e)); /* both within int32 */
    if (ew == ACCEL_EW_MAX) t = _mm512_max_epi64(t, e);
    if (ew == ACCEL_EW_MIN) t = _mm512_min_epi64(t, e);
  }
  return t;
}

/* Steps 1-5 on 8 values (int64 lanes) of v and the 8 operand codes in the low bytes of `op`;
 * returns the 8 output codes in the low 8 bytes, before CLIP. Flags are compile-time constants
 * in each instantiation below. */
static inline __attribute__((always_inline)) __m128i sdp8(const sdp_i8* p, const vec_params* q,
                                                          __m512i v, __m128i op, int has_mul,
                                                          int ew, int act, int out_cvt) {
  __m512i t = front8(q, v, op, has_mul, ew);
  if (act == ACCEL_ACT_RELU) t = _mm512_max_epi64(t, q->zero);
  if (act == ACCEL_ACT_PRELU) {
    const __mmask8 neg = _mm512_movepi64_mask(t);
    const __m512i s = rhaz8(_mm512_mul_epi32(t, q->prelu_mul), q->prelu_half, q->prelu_shift);
    t = _mm512_mask_mov_epi64(t, neg, s);
  }
  if (out_cvt) {
    /* after PRELU t may exceed int32: full 64-bit product (|t| < 2^47) */
    const __m512i m = act == ACCEL_ACT_PRELU ? _mm512_mullo_epi64(t, q->out_mul)
                                             : _mm512_mul_epi32(t, q->out_mul);
    t = rhaz8(m, q->out_half, q->out_shift);
  }
  (void)p;
  return _mm512_cvtsepi64_epi8(_mm512_add_epi64(t, q->out_zero)); /* sat8 */
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
  const __m512i hz = _mm512_set1_epi64((s > 0 ? (int64_t)1 << (s - 1) : 0) + out_zero * ((int64_t)1 << s));
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

/* span_fast in int32 lanes, 16 values per step (about twice span_fast's rate), for mul > 0
 * where these identities keep every intermediate inside int32 (fast32_plan checks the bounds
 * in int64; otherwise span_fast runs):
 *  - only codes matter: with R = 128 + |out_zero| and T = ceil(R * 2^s / mul), any t >= T
 *    gives rhaz(t * mul, s) >= R, a code saturated high, as t = T does (rhaz and the clamps
 *    are monotonic); likewise t <= -T. So t is clamped to [-T, T] together with sat32(v + bias)
 *    (one min/max on v), and the product is at most R * 2^s + mul;
 *  - "direct" (small s): y = (p + (p < 0 ? -1 : 0) + 2^(s-1) + out_zero * 2^s) >> s with
 *    p = t * mul in int32 (s = 0: y = p + out_zero);
 *  - "split" (s >= 17, larger products): t = th * 2^16 + tl, 0 <= tl < 2^16, so
 *    p + 2^(s-1) - n = 2^16 * (th * mul + 2^(s-17)) + (tl * mul - n) with n = (t < 0), and
 *    floor(X / 2^s) = floor((th * mul + 2^(s-17) + floor((tl * mul - n) / 2^16)) / 2^(s-16)):
 *    two int32 products (tl * mul < 2^31) and arithmetic shifts, out_zero folded in. */
typedef struct fast32 {
  int32_t vlo, vhi, bias, mul, add, shift;
  int split;
} fast32;

static int fast32_plan(int64_t bias, int64_t mul, int64_t s, int64_t out_zero, fast32* f) {
  if (mul <= 0 || s > 40) return 0;
  const int64_t r = 128 + (out_zero < 0 ? -out_zero : out_zero);
  const int64_t t = ((r << s) + mul - 1) / mul; /* < 2^49: s <= 40, r <= 2^31 + 128 */
  if (r > ((int64_t)1 << 20)) return 0;
  const int64_t lo = INT32_MIN - (bias < 0 ? bias : 0), hi = INT32_MAX - (bias > 0 ? bias : 0);
  const int64_t vlo = -t - bias > lo ? -t - bias : lo, vhi = t - bias < hi ? t - bias : hi;
  const int64_t tmax_hi = vhi + bias, tmax_lo = -(vlo + bias);
  const int64_t tm = tmax_hi > tmax_lo ? tmax_hi : tmax_lo; /* |t| <= tm <= 2^31 */
  const int64_t limit = (int64_t)1 << 31;
  f->vlo = (int32_t)vlo;
  f->vhi = (int32_t)vhi;
  f->bias = (int32_t)bias;
  f->mul = (int32_t)mul;
  if (tm * mul + ((r + 1) << s) < limit) {
    f->split = 0;
    f->add = (int32_t)((s > 0 ? (int64_t)1 << (s - 1) : 0) + out_zero * ((int64_t)1 << s));
    f->shift = (int32_t)s;
    return 1;
  }
  if (s < 17) return 0;
  const int64_t add = ((int64_t)1 << (s - 17)) + out_zero * ((int64_t)1 << (s - 16));
  if ((tm / 65536 + 1) * mul + mul + 1 + (add < 0 ? -add : add) >= limit) return 0;
  f->split = 1;
  f->add = (int32_t)add;
  f->shift = (int32_t)(s - 16);
  return 1;
}

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

/* span_fast_add in int32 lanes, 16 values per step, where these identities keep every
 * intermediate inside int32 (add32_plan checks the bounds in int64; otherwise span_fast_add
 * runs). Only codes matter, as in span_fast32:
 *  - the output: with R = 128 + |out_zero| and T_out = ceil(R * 2^out_shift / |out_mul|), any
 *    |t| >= T_out gives a code saturated on t's side (times out_mul's sign), so t is clamped to
 *    [-T_out, T_out] before the output multiply, which then fits;
 *  - the sum: |e| <= E (the largest |e| over the 256 operand codes), so t2 >= T2 = T_out + E
 *    gives t2 + e >= T_out whatever the operand (likewise <= -T2); t2 need not be exact beyond
 *    T2, so no sat32 is needed on t2 or on the sum;
 *  - the channel converter: any t >= T1 = ceil(T2 * 2^s / mul) (mul > 0) gives rhaz(t * mul, s)
 *    >= T2, so t is clamped to [-T1, T1] together with sat32(v + bias) (one min/max on v);
 *    then either "direct" (the product and the rounding fit int32) or "split": t = th * 2^k +
 *    tl, 0 <= tl < 2^k, k = min(s, 16), and floor((t * mul + 2^(s-1) - n) / 2^s) (n = t < 0)
 *    = floor((th * mul + c_hi + floor((tl * mul + c_lo - n) / 2^k)) / 2^(s-k)), the half
 *    2^(s-1) in c_lo when s <= k, else 2^(s-1-k) in c_hi. */
typedef struct add32 {
  int32_t vlo, vhi, bias, mul, add, shift; /* the channel converter (direct: add, shift) */
  int32_t low_mask, k, c_lo, c_hi;         /* split: t's low k bits and the constants */
  int split;
  int32_t t_out, out_mul, out_add, out_shift;
} add32;

static int64_t abs64(int64_t x) { return x < 0 ? -x : x; }

static int add32_plan(const sdp_i8* p, int64_t bias, int64_t mul, int64_t s, add32* f) {
  const int64_t os = p->out_shift, om = p->out_mul;
  if (mul <= 0 || om == 0 || s > 40 || os > 30) return 0;
  const int64_t r = 128 + abs64(p->out_zero);
  const int64_t t_out = ((r << os) + abs64(om) - 1) / abs64(om);
  const int64_t out_add = (os > 0 ? (int64_t)1 << (os - 1) : 0) + p->out_zero * ((int64_t)1 << os);
  const int64_t limit = (int64_t)1 << 31;
  if (t_out * abs64(om) + abs64(out_add) + 1 >= limit) return 0;
  int64_t e_max = 0;
  for (int64_t code = -128; code <= 127; code += 255) {
    const int64_t e = rhaz((code - p->ew_zero) * p->ew_mul, p->ew_shift);
    e_max = abs64(e) > e_max ? abs64(e) : e_max;
  }
  const int64_t t2 = t_out + e_max; /* < 2^32: t_out * |om| < 2^31 is checked above */
  if (t2 > ((int64_t)1 << (61 - s))) return 0;
  const int64_t t1 = ((t2 << s) + mul - 1) / mul; /* <= 2^61 */
  const int64_t lo = INT32_MIN - (bias < 0 ? bias : 0), hi = INT32_MAX - (bias > 0 ? bias : 0);
  const int64_t vlo = -t1 - bias > lo ? -t1 - bias : lo, vhi = t1 - bias < hi ? t1 - bias : hi;
  const int64_t tm = vhi + bias > -(vlo + bias) ? vhi + bias : -(vlo + bias); /* |t| <= tm */
  /* |t2'| <= rhaz(tm * mul, s) <= tm * mul / 2^s + 1; the sum with e must fit */
  if (((tm * mul) >> s) + 1 + e_max >= limit) return 0;
  f->vlo = (int32_t)vlo;
  f->vhi = (int32_t)vhi;
  f->bias = (int32_t)bias;
  f->mul = (int32_t)mul;
  f->t_out = (int32_t)t_out;
  f->out_mul = (int32_t)om;
  f->out_add = (int32_t)out_add;
  f->out_shift = (int32_t)os;
  f->low_mask = f->k = f->c_lo = f->c_hi = 0; /* the split form's, unused by the direct one */
  if (tm * mul + (s > 0 ? (int64_t)1 << (s - 1) : 0) < limit) {
    f->split = 0;
    f->add = (int32_t)(s > 0 ? (int64_t)1 << (s - 1) : 0);
    f->shift = (int32_t)s;
    return 1;
  }
  if (s == 0) return 0; /* never: tm * mul <= t2 + mul, the direct form */
  const int64_t k = s < 16 ? s : 16;
  const int64_t c_lo = s - 1 < k ? (int64_t)1 << (s - 1) : 0;
  const int64_t c_hi = s - 1 >= k ? (int64_t)1 << (s - 1 - k) : 0;
  /* |th| <= tm / 2^k + 1; floor(low / 2^k) in [-1, mul + 1) (tl * mul + c_lo < 2^31) */
  if ((tm / ((int64_t)1 << k) + 1) * mul + c_hi + mul + 1 >= limit) return 0;
  f->split = 1;
  f->low_mask = (int32_t)(((int64_t)1 << k) - 1);
  f->k = (int32_t)k;
  f->c_lo = (int32_t)c_lo;
  f->c_hi = (int32_t)c_hi;
  f->shift = (int32_t)(s - k);
  return 1;
}

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

/* The parameters every channel shares. */
static void call_params(const sdp_i8* p, vec_params* q) {
  q->ew_zero = _mm512_set1_epi64(p->ew_zero);
  q->ew_mul = _mm512_set1_epi64(p->ew_mul);
  q->ew_half = half_of(p->ew_shift);
  q->ew_shift = _mm512_set1_epi64(p->ew_shift);
  q->prelu_half = half_of(p->prelu_shift);
  q->prelu_shift = _mm512_set1_epi64(p->prelu_shift);
  q->out_mul = _mm512_set1_epi64(p->out_mul);
  q->out_half = half_of(p->out_shift);
  q->out_shift = _mm512_set1_epi64(p->out_shift);
  q->out_zero = _mm512_set1_epi64(p->out_zero);
  q->lo32 = _mm512_set1_epi64(INT32_MIN);
  q->hi32 = _mm512_set1_epi64(INT32_MAX);
  q->zero = _mm512_setzero_si512();
  q->clip_lo = _mm_set1_epi8((char)p->clip_lo);
  q->clip_hi = _mm_set1_epi8((char)p->clip_hi);
}

/* One value per channel, channels first.., 8 lanes at a time: the general steps (sdp8) with
 * each lane's own channel parameters. */
static void channels_avx512(const sdp_i8* p, int32_t first, const int32_t* v,
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
    q.shift = p->rshift != NULL ? _mm512_cvtepu8_epi64(_mm_maskz_loadu_epi8(m, p->rshift + ch))
                                : q.zero;
    q.half = _mm512_mask_sllv_epi64(q.zero, _mm512_cmpgt_epi64_mask(q.shift, q.zero), one,
                                    _mm512_sub_epi64(q.shift, one));
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

static void span_avx512(const sdp_i8* p, int32_t ch, const int32_t* v, const int8_t* operand,
                        int8_t* y, int64_t count) {
  const chan_params c = channel_params(p, ch);
  if (p->ew_op == ACCEL_EW_NONE && p->out_mul == 0 && c.shift <= 55 &&
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
  q.bias = _mm512_set1_epi64(c.bias);
  q.mul = _mm512_set1_epi64(c.mul);
  q.half = half_of(c.shift);
  q.shift = _mm512_set1_epi64(c.shift);
  q.prelu_mul = _mm512_set1_epi64(c.prelu_mul);
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
/* ---- the INT8 LUT (accel_lut_int8) in 16 int32 lanes -------------------------------------
 * The same integers as lut_int8_eval (lut.c), in fewer bits:
 *  - hits: t is inside int32, so d = t - start, read as uint32, is exact for t >= start, and
 *    d < N << select becomes start <= t <= min(start + (N << select) - 1, INT32_MAX) (signed
 *    compares); the index is d >> select, the fraction (d & (2^select - 1)) shifted right by
 *    select - 16 or left by 16 - select (one of the two is 0), below 2^16;
 *  - one gather of 32 bits at entry i reads entries i and i + 1 (int16, little-endian; LE's
 *    entries follow LO's in accel_lut_int8, 257 entries on: i <= 255 in LO, <= 63 in LE, so
 *    the read stays inside the tables);
 *  - LO[i] (65536 - f) + LO[i+1] f = LO[i] 2^16 + (LO[i+1] - LO[i]) f lies in [-2^31, 2^31),
 *    so int32 arithmetic modulo 2^32 gives it exactly, and rhaz(p, 16) = (p + 2^15 + (p < 0 ?
 *    -1 : 0)) >> 16 (arithmetic) stays inside int32 (|y| <= 2^15: sat32 does nothing);
 *  - the slopes beyond LE ((t - le_start) * scale reaches 2^47) run in int64 lanes, only for
 *    the steps where some lane leaves both tables.
 * t itself (bias, multiplier, element-wise op) comes from front8's int64 steps, or, for one
 * channel with no element-wise op, from int32 lanes (lut_front32); the output converter runs
 * in int32 lanes where its identities hold (lut_vectors), else in int64 ones. */
typedef struct lut_vec {
  __m512i lo_start, lo_last, le_start, le_last, lo_sel, le_sel, lo_up, le_up, le_base, round;
  /* beyond LE, int64 lanes */
  __m512i le_first, le_final, le_start64, le_end64, u_scale, u_half, u_shift, o_scale, o_half,
      o_shift, lo32, hi32;
  const void* entries;
  /* output converter: out32: y = min(max(y, -clamp), clamp), q = (y + add + (neg & (y >> 31)))
   * >> shift in int32 lanes; else int64 lanes: rhaz(y * mul, shift) + zero */
  int out32;
  __m512i clamp, nclamp, oadd, oneg, omul, ohalf, oshift, ozero;
  __m128i osh;
} lut_vec;

static int64_t lut_last(int64_t start, int64_t entries, int32_t select) {
  const int64_t last = start + ((entries - 1) << select) - 1;
  return last < INT32_MAX ? last : INT32_MAX;
}

static void lut_vectors(const sdp_i8* p, lut_vec* L) {
  const accel_lut_int8* l = p->lut;
  const int32_t ls = l->lo_index_select, es = l->le_index_select;
  L->lo_start = _mm512_set1_epi32(l->lo_start);
  L->lo_last = _mm512_set1_epi32((int32_t)lut_last(l->lo_start, ACCEL_LUT_LO_ENTRIES, ls));
  L->le_start = _mm512_set1_epi32(l->le_start);
  L->le_last = _mm512_set1_epi32((int32_t)lut_last(l->le_start, ACCEL_LUT_LE_ENTRIES, es));
  L->lo_sel = _mm512_set1_epi32(ls);
  L->le_sel = _mm512_set1_epi32(es);
  L->lo_up = _mm512_set1_epi32(32 - ls);
  L->le_up = _mm512_set1_epi32(32 - es);
  L->le_base = _mm512_set1_epi32((int32_t)(offsetof(accel_lut_int8, le) / sizeof(int16_t)));
  L->round = _mm512_set1_epi32(1 << 15);
  L->le_first = _mm512_set1_epi64(l->le[0]);
  L->le_final = _mm512_set1_epi64(l->le[ACCEL_LUT_LE_ENTRIES - 1]);
  L->le_start64 = _mm512_set1_epi64(l->le_start);
  L->le_end64 = _mm512_set1_epi64((int64_t)l->le_start +
                                  ((int64_t)(ACCEL_LUT_LE_ENTRIES - 1) << es));
  L->u_scale = _mm512_set1_epi64(l->underflow_scale);
  L->u_half = half_of(l->underflow_shift);
  L->u_shift = _mm512_set1_epi64(l->underflow_shift);
  L->o_scale = _mm512_set1_epi64(l->overflow_scale);
  L->o_half = half_of(l->overflow_shift);
  L->o_shift = _mm512_set1_epi64(l->overflow_shift);
  L->lo32 = _mm512_set1_epi64(INT32_MIN);
  L->hi32 = _mm512_set1_epi64(INT32_MAX);
  L->entries = (const void*)l;
  /* Output: out_mul 0 or 1 is y + out_zero, or rhaz(y, s) + out_zero. Only the code matters:
   * with R = 128 + |out_zero|, any |y| >= R 2^s gives a code saturated on y's side, as y =
   * +-R 2^s does (rhaz and sat8 are monotonic), so y is clamped there; when R 2^s <= 2^29,
   * y + 2^(s-1) + out_zero 2^s stays inside int32. */
  const int64_t mul = p->out_mul == 0 ? 1 : p->out_mul, s = p->out_mul == 0 ? 0 : p->out_shift;
  const int64_t r = 128 + (p->out_zero < 0 ? -(int64_t)p->out_zero : p->out_zero);
  L->out32 = mul == 1 && s <= 29 && (r << s) <= ((int64_t)1 << 29);
  if (L->out32) {
    L->clamp = _mm512_set1_epi32((int32_t)(r << s));
    L->nclamp = _mm512_set1_epi32((int32_t)-(r << s));
    L->oadd = _mm512_set1_epi32((int32_t)((s > 0 ? (int64_t)1 << (s - 1) : 0) +
                                          (int64_t)p->out_zero * ((int64_t)1 << s)));
    L->oneg = _mm512_set1_epi32(s > 0 ? -1 : 0);
    L->osh = _mm_cvtsi32_si128((int32_t)s);
  }
  L->omul = _mm512_set1_epi64(mul);
  L->ohalf = half_of(s);
  L->oshift = _mm512_set1_epi64(s);
  L->ozero = _mm512_set1_epi64(p->out_zero);
}

/* y for 8 int64 lanes of t outside both tables: the slopes, then sat32 */
static inline __m512i lut_tails8(const lut_vec* L, __m512i t) {
  const __mmask8 under = _mm512_cmplt_epi64_mask(t, L->le_start64);
  const __m512i du = _mm512_sub_epi64(t, L->le_start64), dov = _mm512_sub_epi64(t, L->le_end64);
  const __m512i yu = _mm512_add_epi64(
      L->le_first, rhaz8(_mm512_mullo_epi64(du, L->u_scale), L->u_half, L->u_shift));
  const __m512i yo = _mm512_add_epi64(
      L->le_final, rhaz8(_mm512_mullo_epi64(dov, L->o_scale), L->o_half, L->o_shift));
  const __m512i y = _mm512_mask_mov_epi64(yo, under, yu);
  return _mm512_min_epi64(_mm512_max_epi64(y, L->lo32), L->hi32);
}

/* The LUT of 16 values t (int32 lanes; lanes outside `valid` are don't-cares); *far: whether
 * a lane in `valid` took a slope (its y may be any int32). */
static inline __m512i lut16(const lut_vec* L, __m512i t, __mmask16 valid, int* far) {
  const __mmask16 in_lo = _mm512_cmpge_epi32_mask(t, L->lo_start) &
                          _mm512_cmple_epi32_mask(t, L->lo_last);
  const __mmask16 in_le = _mm512_cmpge_epi32_mask(t, L->le_start) &
                          _mm512_cmple_epi32_mask(t, L->le_last);
  /* the table of each lane: LO where it hits (priority), else LE */
  const __m512i d = _mm512_sub_epi32(t, _mm512_mask_blend_epi32(in_lo, L->le_start, L->lo_start));
  __m512i index = _mm512_srlv_epi32(d, _mm512_mask_blend_epi32(in_lo, L->le_sel, L->lo_sel));
  index = _mm512_mask_add_epi32(index, (__mmask16)(in_le & ~in_lo), index, L->le_base);
  /* the select's low bits of d moved to the top, then down to 16 bits: frac(r, select) for
   * select >= 16 and < 16 alike (a shift by 32 gives 0: select 0) */
  const __m512i frac = _mm512_srli_epi32(
      _mm512_sllv_epi32(d, _mm512_mask_blend_epi32(in_lo, L->le_up, L->lo_up)), 16);
  const __mmask16 hit = in_lo | in_le;
  const __m512i pair = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), hit, index,
                                                   L->entries, 2);
  const __m512i e0_high = _mm512_slli_epi32(pair, 16); /* entry i 2^16 */
  const __m512i step = _mm512_sub_epi32(_mm512_srai_epi32(pair, 16),
                                        _mm512_srai_epi32(e0_high, 16));
  const __m512i pr = _mm512_add_epi32(e0_high, _mm512_mullo_epi32(step, frac));
  __m512i y = _mm512_srai_epi32(
      _mm512_add_epi32(_mm512_add_epi32(pr, L->round), _mm512_srai_epi32(pr, 31)), 16);
  const __mmask16 tails = (__mmask16)(valid & ~hit);
  *far = tails != 0;
  if (tails) {
    const __m512i lo = lut_tails8(L, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(t)));
    const __m512i hi = lut_tails8(L, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(t, 1)));
    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi64_epi32(lo)),
                                            _mm512_cvtepi64_epi32(hi), 1);
    y = _mm512_mask_mov_epi32(y, tails, both);
  }
  return y;
}

/* The output converter on 16 LUT results y: the codes. */
static inline __m128i lut_codes16(const lut_vec* L, __m512i y, int far) {
  if (L->out32) {
    /* table hits give |y| <= 2^15, which the sum below holds without the clamp */
    const __m512i c = far ? _mm512_min_epi32(_mm512_max_epi32(y, L->nclamp), L->clamp) : y;
    const __m512i q = _mm512_add_epi32(_mm512_add_epi32(c, L->oadd),
                                       _mm512_and_si512(_mm512_srai_epi32(c, 31), L->oneg));
    return _mm512_cvtsepi32_epi8(_mm512_sra_epi32(q, L->osh));
  }
  const __m512i lo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(y));
  const __m512i hi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(y, 1));
  const __m512i ql = _mm512_add_epi64(rhaz8(_mm512_mul_epi32(lo, L->omul), L->ohalf, L->oshift),
                                      L->ozero);
  const __m512i qh = _mm512_add_epi64(rhaz8(_mm512_mul_epi32(hi, L->omul), L->ohalf, L->oshift),
                                      L->ozero);
  return _mm_unpacklo_epi64(_mm512_cvtsepi64_epi8(ql), _mm512_cvtsepi64_epi8(qh));
}

/* t of 16 values through front8 (two halves of int64 lanes), back in int32 lanes */
static inline __m512i lut_front64(const sdp_i8* p, const vec_params* lo_q,
                                  const vec_params* hi_q, __m512i x, __m128i op) {
  const __m512i a = front8(lo_q, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(x)), op, 1,
                           p->ew_op);
  const __m512i b = front8(hi_q, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(x, 1)),
                           _mm_srli_si128(op, 8), 1, p->ew_op);
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi64_epi32(a)),
                            _mm512_cvtepi64_epi32(b), 1);
}

/* One channel's sat32(rhaz(sat32(v + bias) * mul, s)) in int32 lanes for mul >= 0 (p = t * mul
 * is negative when t is; mul = 0 gives 0 either way), for v in [vmin, vmax] where t = v + bias
 * stays inside int32 and |t| <= limit (a step with a lane outside runs front8 instead).
 * t = th 2^16 + tl (0 <= tl < 2^16), n = (t < 0), p = 2^16 th mul + tl mul:
 *  - s >= 17: rhaz(p, s) = (th mul + 2^(s-17) + ((tl mul - n) >> 16)) >> (s - 16) (fast32's
 *    split form), every term inside int32 for any int32 t and mul < 2^15 (limit INT32_MAX),
 *    and |result| <= 2^29: the sat32 does nothing;
 *  - 1 <= s <= 16: rhaz(p, s) = (th mul << (16 - s)) + ((tl mul + 2^(s-1) - n) >> s); the
 *    right term is exact in int32, the left one modulo 2^32, so the sum is exact while
 *    |result| < 2^31: limit = 2^30 2^s / mul keeps it <= 2^30 + 1 (no sat32);
 *  - s = 0: p itself, t * mul modulo 2^32, exact for |t| <= 2^30 / mul. */
typedef struct lut_front {
  __m512i vmin, vmax, bias, mul, add, low16;
  __m128i left, shift;
  int form; /* 2: s >= 17, 1: 1 <= s <= 16, 0: s = 0 */
} lut_front;

static void lut_front_plan(const chan_params* c, lut_front* f) {
  const int64_t s = c->shift, m = c->mul;
  int64_t limit = INT32_MAX;
  f->form = s >= 17 ? 2 : s >= 1 ? 1 : 0;
  if (f->form < 2 && m > 0) limit = (((int64_t)1 << 30) << s) / m;
  if (limit > INT32_MAX) limit = INT32_MAX;
  const int64_t vmin = -limit - c->bias, vmax = limit - c->bias;
  f->vmin = _mm512_set1_epi32((int32_t)(vmin > INT32_MIN ? vmin : INT32_MIN));
  f->vmax = _mm512_set1_epi32((int32_t)(vmax < INT32_MAX ? vmax : INT32_MAX));
  f->bias = _mm512_set1_epi32((int32_t)c->bias);
  f->mul = _mm512_set1_epi32((int32_t)m);
  f->low16 = _mm512_set1_epi32(0xFFFF);
  f->add = _mm512_set1_epi32(f->form == 2 ? (int32_t)((int64_t)1 << (s - 17))
                             : f->form == 1 ? 1 << (s - 1) : 0);
  f->shift = _mm_cvtsi32_si128((int32_t)(f->form == 2 ? s - 16 : s));
  f->left = _mm_cvtsi32_si128((int32_t)(16 - s));
}

/* t of 16 values by lut_front_plan's forms; *ok = 0 when a lane in `valid` is outside [vmin,
 * vmax] (then the caller takes front8's) */
static inline __m512i lut_front32(const lut_front* f, __m512i x, __mmask16 valid, int* ok) {
  *ok = !(_mm512_mask_cmplt_epi32_mask(valid, x, f->vmin) |
          _mm512_mask_cmpgt_epi32_mask(valid, x, f->vmax));
  const __m512i t = _mm512_add_epi32(x, f->bias);
  if (f->form == 0) return _mm512_mullo_epi32(t, f->mul);
  const __m512i th = _mm512_srai_epi32(t, 16), n = _mm512_srai_epi32(t, 31);
  const __m512i tl = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_and_si512(t, f->low16), f->mul),
                                      n);
  if (f->form == 2) {
    const __m512i q = _mm512_add_epi32(_mm512_add_epi32(_mm512_mullo_epi32(th, f->mul), f->add),
                                       _mm512_srai_epi32(tl, 16));
    return _mm512_sra_epi32(q, f->shift);
  }
  const __m512i lo = _mm512_sra_epi32(_mm512_add_epi32(tl, f->add), f->shift);
  return _mm512_add_epi32(_mm512_sll_epi32(_mm512_mullo_epi32(th, f->mul), f->left), lo);
}

static void span_lut(const sdp_i8* p, int32_t ch, const int32_t* v, const int8_t* operand,
                     int8_t* y, int64_t count) {
  const chan_params c = channel_params(p, ch);
  lut_vec L;
  lut_vectors(p, &L);
  vec_params q; /* front8's, set up at its first use (most calls take lut_front32 only) */
  int q_ready = 0;
  lut_front f;
  const int lanes32 = p->ew_op == ACCEL_EW_NONE && c.shift <= 40 && c.mul >= 0; /* n = (p < 0) */
  if (lanes32) lut_front_plan(&c, &f);
  /* the plan's codes by bins of t (sdp_i8_lut_plan), where the caller made one */
  const struct sdp_i8_lut_plan* P = p->lut_plan;
  const __m512i p_lo = _mm512_set1_epi32(P != NULL ? P->t_lo : 0);
  const __m512i p_hi = _mm512_set1_epi32(P != NULL ? P->t_hi : 0);
  const __m512i p_base = _mm512_set1_epi32(P != NULL ? P->base : 0);
  const __m128i p_w = _mm_cvtsi32_si128(P != NULL ? P->w : 0);
  const __m512i p_mask = _mm512_set1_epi32(P != NULL ? (1 << P->w) - 1 : 0);
  const __m512i p_low16 = _mm512_set1_epi32(0xFFFF), p_multi = _mm512_set1_epi32(LUT_PLAN_MULTI);
  const __m512i p_16 = _mm512_set1_epi32(16), p_24 = _mm512_set1_epi32(24);
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 k = tail_mask(count - i);
    const __m512i x = _mm512_maskz_loadu_epi32(k, v + i);
    __m512i t;
    int ok = 0;
    if (lanes32) t = lut_front32(&f, x, k, &ok);
    if (!ok) {
      if (!q_ready) {
        call_params(p, &q);
        q.bias = _mm512_set1_epi64(c.bias);
        q.mul = _mm512_set1_epi64(c.mul);
        q.half = half_of(c.shift);
        q.shift = _mm512_set1_epi64(c.shift);
        q_ready = 1;
      }
      const __m128i op = p->ew_op != ACCEL_EW_NONE ? _mm_maskz_loadu_epi8(k, operand + i)
                                                   : _mm_setzero_si128();
      t = lut_front64(p, &q, &q, x, op);
    }
    if (P != NULL) {
      const __m512i c = _mm512_min_epi32(_mm512_max_epi32(t, p_lo), p_hi);
      const __m512i u = _mm512_sub_epi32(c, p_base);
      const __m512i g = _mm512_i32gather_epi32(_mm512_srl_epi32(u, p_w), P->bins, 4);
      const __m512i off = _mm512_and_si512(g, p_low16);
      if (!_mm512_mask_cmpeq_epi32_mask(k, off, p_multi)) {
        const __mmask16 above = _mm512_cmpge_epi32_mask(_mm512_and_si512(u, p_mask), off);
        const __m512i code = _mm512_srlv_epi32(g, _mm512_mask_blend_epi32(above, p_16, p_24));
        _mm_mask_storeu_epi8(y + i, k, _mm512_cvtepi32_epi8(code));
        continue;
      }
    }
    int far;
    const __m512i u = lut16(&L, t, k, &far);
    _mm_mask_storeu_epi8(y + i, k, lut_codes16(&L, u, far));
  }
}

/* q's per-lane channel parameters for channels [ch, ch + 8) (mask m) */
static inline void lane_params(const sdp_i8* p, vec_params* q, int64_t ch, __mmask8 m) {
  const __m512i one = _mm512_set1_epi64(1);
  q->bias = p->bias != NULL ? _mm512_cvtepi32_epi64(_mm256_maskz_loadu_epi32(m, p->bias + ch))
                            : q->zero;
  q->mul = p->mul != NULL ? _mm512_cvtepi16_epi64(_mm_maskz_loadu_epi16(m, p->mul + ch)) : one;
  q->shift = p->rshift != NULL ? _mm512_cvtepu8_epi64(_mm_maskz_loadu_epi8(m, p->rshift + ch))
                               : q->zero;
  q->half = _mm512_mask_sllv_epi64(q->zero, _mm512_cmpgt_epi64_mask(q->shift, q->zero), one,
                                   _mm512_sub_epi64(q->shift, one));
}

/* sdp_i8_channels with a LUT: front8 with each lane's channel, then the same lut16. */
static void channels_lut(const sdp_i8* p, int32_t first, const int32_t* v, const int8_t* operand,
                         int8_t* y, int64_t count) {
  lut_vec L;
  lut_vectors(p, &L);
  vec_params lo_q, hi_q;
  call_params(p, &lo_q);
  hi_q = lo_q;
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 k = tail_mask(count - i);
    lane_params(p, &lo_q, first + i, (__mmask8)k);
    lane_params(p, &hi_q, first + i + 8, (__mmask8)(k >> 8));
    const __m512i x = _mm512_maskz_loadu_epi32(k, v + i);
    const __m128i op = operand != NULL ? _mm_maskz_loadu_epi8(k, operand + i) : _mm_setzero_si128();
    const __m512i t = lut_front64(p, &lo_q, &hi_q, x, op);
    int far;
    const __m512i u = lut16(&L, t, k, &far);
    _mm_mask_storeu_epi8(y + i, k, lut_codes16(&L, u, far));
  }
}

/* The lane form of the channels' converters (sdp_i8_lanes.h): span_avx512's fast32 case. */
int sdp_i8_lanes_prepare(const sdp_i8* p, int32_t first, int32_t count, int64_t vmax,
                         sdp_i8_lane_cvt* cvt, int8_t* lo, int8_t* hi) {
  if (p->lut != NULL || p->ew_op != ACCEL_EW_NONE || p->out_mul != 0 ||
      !(p->act == ACCEL_ACT_NONE || p->act == ACCEL_ACT_RELU || p->act == ACCEL_ACT_CLIP))
    return 0;
  *lo = (int8_t)(p->act == ACCEL_ACT_RELU ? p->out_zero
                 : p->act == ACCEL_ACT_CLIP ? p->clip_lo : -128);
  *hi = (int8_t)(p->act == ACCEL_ACT_CLIP ? p->clip_hi : 127);
  for (int32_t i = 0; i < count; ++i) {
    const chan_params c = channel_params(p, first + i);
    sdp_i8_lane_cvt* e = cvt + i;
    /* a conv's converter (mul > 0, shifts 17..40): the split form with t clamped to int32
     * only, no plan (fast32_plan's division was ~4 % of MobileNetV2's library time) */
    const int64_t s = c.shift;
    const int64_t add =
        s >= 17 && s <= 40 ? ((int64_t)1 << (s - 17)) + p->out_zero * ((int64_t)1 << (s - 16)) : 0;
    if (c.mul > 0 && c.shift >= 17 && c.shift <= 40 && abs64(add) < ((int64_t)1 << 29)) {
      e->vlo = (int32_t)(INT32_MIN - (c.bias < 0 ? c.bias : 0));
      e->vhi = (int32_t)(INT32_MAX - (c.bias > 0 ? c.bias : 0));
      e->bias = (int32_t)c.bias;
      e->mul = (int32_t)c.mul;
      e->add = (int32_t)add;
      e->shift = (int32_t)(c.shift - 16);
      e->k = 16;
      e->low = 0xFFFF;
      e->neg = -1;
      e->exact = vmax + abs64(c.bias) <= INT32_MAX;
      e->conv = e->exact ? 1 + (*lo >= p->out_zero) : 0;
      e->zero = p->out_zero;
      continue;
    }
    fast32 f;
    if (c.shift > 55 || !fast32_plan(c.bias, c.mul, c.shift, p->out_zero, &f)) return 0;
    e->vlo = f.vlo;
    e->vhi = f.vhi;
    e->bias = f.bias;
    e->mul = f.mul;
    e->add = f.add;
    e->shift = f.shift;
    e->k = f.split ? 16 : 0;
    e->low = f.split ? 0xFFFF : 0;
    e->neg = f.split || f.shift > 0 ? -1 : 0;
    /* no clamp: v + bias inside int32, |q| <= 2^30 + |add| + 2^15 inside int32 */
    e->exact = f.split && vmax + abs64(c.bias) <= INT32_MAX && abs64(f.add) < ((int64_t)1 << 29);
    e->conv = e->zero = 0;
  }
  return 1;
}

/* The residual add's lane form (sdp_i8_lanes.h), its bounds checked here in int64. */
int sdp_i8_lanes_prepare_add(const sdp_i8* p, int32_t first, int32_t count, int64_t vmax,
                             sdp_i8_lane_cvt* cvt, sdp_i8_lane_add* add, int8_t* lo, int8_t* hi) {
  if (p->lut != NULL || p->ew_op != ACCEL_EW_ADD ||
      !(p->act == ACCEL_ACT_NONE || p->act == ACCEL_ACT_RELU || p->act == ACCEL_ACT_CLIP))
    return 0;
  const int64_t limit = (int64_t)1 << 31;
  /* the channels: u = rhaz(t * mul, s) for |t| <= tm; the largest |u| over them */
  int64_t u_max = 0;
  for (int32_t i = 0; i < count; ++i) {
    const chan_params c = channel_params(p, first + i);
    const int64_t s = c.shift, mul = c.mul;
    if (mul <= 0 || s < 1 || s > 40) return 0;
    sdp_i8_lane_cvt* e = cvt + i;
    e->exact = vmax + abs64(c.bias) <= INT32_MAX;
    e->conv = e->zero = 0;
    const int64_t tm = e->exact ? vmax + abs64(c.bias) : limit; /* |t| */
    const int64_t k = s < 16 ? s : 16;
    e->vlo = (int32_t)(INT32_MIN - (c.bias < 0 ? c.bias : 0));
    e->vhi = (int32_t)(INT32_MAX - (c.bias > 0 ? c.bias : 0));
    e->bias = (int32_t)c.bias;
    e->mul = (int32_t)mul;
    e->k = (int32_t)k;
    e->low = (int32_t)(((int64_t)1 << k) - 1);
    e->neg = s <= 16 ? (int32_t)1 << (s - 1) : 0; /* lo_add */
    e->add = s > 16 ? (int32_t)1 << (s - 17) : 0;
    e->shift = (int32_t)(s - k);
    /* |th| <= tm / 2^k + 1 and (tl * mul + lo_add - n) >> k in [-1, mul] (tl * mul + lo_add
     * < 2^16 * 2^15 fits for k <= 16) */
    if ((tm / ((int64_t)1 << k) + 1) * mul + e->add + mul + 1 >= limit) return 0;
    const int64_t u = ((tm * mul) >> s) + 1;
    u_max = u > u_max ? u : u_max;
  }
  /* the operand: |x| <= 255 * 2^15 < 2^23, e = 0 from ew_shift 24 on */
  const int64_t es = p->ew_shift < 24 ? p->ew_shift : 0;
  const int64_t em = p->ew_shift < 24 ? p->ew_mul : 0;
  const int64_t half = es > 0 ? (int64_t)1 << (es - 1) : 0;
  add->ew_mul = (int32_t)em;
  add->ew_base = (int32_t)(half - (int64_t)p->ew_zero * em);
  add->ew_nlt = es > 0 ? (int32_t)half : INT32_MIN;
  add->ew_shift = (int32_t)es;
  int64_t e_max = 0;
  for (int64_t code = -128; code <= 127; code += 255) {
    const int64_t e = rhaz((code - p->ew_zero) * em, es);
    e_max = abs64(e) > e_max ? abs64(e) : e_max;
  }
  const int64_t w_max = u_max + e_max; /* |u + e|: no sat32 on u or on the sum */
  if (w_max >= limit) return 0;
  /* the output converter (out_mul 0: y = sat8(t + out_zero), the same as out_mul 1, shift 0) */
  const int64_t om = p->out_mul != 0 ? p->out_mul : 1, os = p->out_mul != 0 ? p->out_shift : 0;
  if (os > 30) return 0;
  const int64_t out_add = (os > 0 ? (int64_t)1 << (os - 1) : 0) + p->out_zero * ((int64_t)1 << os);
  int64_t w_hi = w_max;
  if (w_max * abs64(om) + abs64(out_add) + 1 >= limit) {
    /* |w| >= T_out saturates the code on w's side (add32_plan) */
    w_hi = (((128 + abs64(p->out_zero)) << os) + abs64(om) - 1) / abs64(om);
    if (w_hi * abs64(om) + abs64(out_add) + 1 >= limit) return 0;
  }
  add->w_hi = (int32_t)w_hi;
  add->w_lo = p->act == ACCEL_ACT_RELU ? 0 : (int32_t)-w_hi;
  add->out_mul = (int32_t)om;
  add->out_add = (int32_t)out_add;
  add->out_neg = os > 0 ? -1 : 0;
  add->out_shift = (int32_t)os;
  add->lean = p->act == ACCEL_ACT_RELU && om == 1 && w_hi == w_max;
  *lo = (int8_t)p->clip_lo; /* -128 / 127 unless CLIP */
  *hi = (int8_t)p->clip_hi;
  return 1;
}
#define SPAN_IMPL span_avx512
#define CHANNELS_IMPL channels_avx512
#define SPAN_LUT_IMPL span_lut
#define CHANNELS_LUT_IMPL channels_lut
#else
int sdp_i8_lanes_prepare(const sdp_i8* p, int32_t first, int32_t count, int64_t vmax,
                         sdp_i8_lane_cvt* cvt, int8_t* lo, int8_t* hi) {
  (void)p, (void)first, (void)count, (void)vmax, (void)cvt, (void)lo, (void)hi;
  return 0; /* no vector lanes in this build */
}
int sdp_i8_lanes_prepare_add(const sdp_i8* p, int32_t first, int32_t count, int64_t vmax,
                             sdp_i8_lane_cvt* cvt, sdp_i8_lane_add* add, int8_t* lo, int8_t* hi) {
  (void)p, (void)first, (void)count, (void)vmax, (void)cvt, (void)add, (void)lo, (void)hi;
  return 0;
}
#define SPAN_IMPL span_scalar
#define CHANNELS_IMPL channels_scalar
#define SPAN_LUT_IMPL span_scalar
#define CHANNELS_LUT_IMPL channels_scalar
#endif

/* ACCEL_SDP_I8_LUT=scalar in the environment (read once) sends LUT activations to the scalar
 * definition, as a build without AVX-512 runs them: the tests compare both paths. */
static int lut_scalar_forced;
static pthread_once_t lut_env_once = PTHREAD_ONCE_INIT;

static void read_lut_env(void) {
  const char* env = getenv("ACCEL_SDP_I8_LUT");
  lut_scalar_forced = env != NULL && strcmp(env, "scalar") == 0;
}

static int lut_scalar(void) {
  pthread_once(&lut_env_once, read_lut_env);
  return lut_scalar_forced;
}

void sdp_i8_span(const sdp_i8* p, int32_t channel, const int32_t* v, const int8_t* operand,
                 int8_t* y, int64_t count) {
  if (p->lut != NULL) {
    if (lut_scalar()) span_scalar(p, channel, v, operand, y, count);
    else SPAN_LUT_IMPL(p, channel, v, operand, y, count);
    return;
  }
  SPAN_IMPL(p, channel, v, operand, y, count);
}

void sdp_i8_channels(const sdp_i8* p, int32_t first, const int32_t* v, const int8_t* operand,
                     int8_t* y, int64_t count) {
  if (p->lut != NULL) {
    if (lut_scalar()) channels_scalar(p, first, v, operand, y, count);
    else CHANNELS_LUT_IMPL(p, first, v, operand, y, count);
    return;
  }
  CHANNELS_IMPL(p, first, v, operand, y, count);
}

/* Independent mode: v = in - in_zero, through sdp_i8_span in chunks of a stack buffer (planes of
 * one element: sdp_i8_channels along the channels); the chunks are pool_for items. */
enum { RUN_CHUNK = 2048 };

typedef struct run_job {
  const sdp_i8* p;
  int32_t c;
  int64_t hw, chunks;
  const int8_t* in;
  int8_t* out;
} run_job;

static void run_channels_item(void* ctx, int64_t it, int participant) {
  const run_job* J = ctx;
  const sdp_i8* p = J->p;
  int32_t v[RUN_CHUNK];
  (void)participant;
  const int64_t b = it / J->chunks, c0 = it % J->chunks * RUN_CHUNK;
  const int64_t cnt = J->c - c0 < RUN_CHUNK ? J->c - c0 : RUN_CHUNK;
  const int64_t at = b * J->c + c0;
  for (int64_t i = 0; i < cnt; ++i) v[i] = (int32_t)J->in[at + i] - p->in_zero;
  sdp_i8_channels(p, (int32_t)c0, v, p->ew_operand != NULL ? p->ew_operand + at : NULL,
                  J->out + at, cnt);
}

static void run_planes_item(void* ctx, int64_t it, int participant) {
  const run_job* J = ctx;
  const sdp_i8* p = J->p;
  int32_t v[RUN_CHUNK];
  (void)participant;
  const int64_t plane = it / J->chunks, i0 = it % J->chunks * RUN_CHUNK;
  const int64_t cnt = J->hw - i0 < RUN_CHUNK ? J->hw - i0 : RUN_CHUNK;
  const int64_t at = plane * J->hw + i0;
  for (int64_t i = 0; i < cnt; ++i) v[i] = (int32_t)J->in[at + i] - p->in_zero;
  sdp_i8_span(p, (int32_t)(plane % J->c), v, p->ew_operand != NULL ? p->ew_operand + at : NULL,
              J->out + at, cnt);
}

void sdp_i8_run(const sdp_i8* p, int32_t n, int32_t c, int64_t hw, const int8_t* in,
                int8_t* out, int32_t num_threads) {
  const int64_t planes = (int64_t)n * c;
  if (num_threads < 1) num_threads = 1;
  if (hw == 1) {
    const run_job J = {p, c, hw, (c + RUN_CHUNK - 1) / RUN_CHUNK, in, out};
    pool_for(planes > 32768 ? num_threads : 1, n * J.chunks, run_channels_item, (void*)&J);
    return;
  }
  sdp_i8 q = *p;
  struct sdp_i8_lut_plan* plan = NULL;
  if (p->lut != NULL && p->lut_plan == NULL && !lut_scalar()) {
    plan = sdp_i8_lut_plan_new(p, planes * hw);
    q.lut_plan = plan;
  }
  const run_job J = {&q, c, hw, (hw + RUN_CHUNK - 1) / RUN_CHUNK, in, out};
  pool_for(planes * hw > 32768 ? num_threads : 1, planes * J.chunks, run_planes_item, (void*)&J);
  sdp_i8_lut_plan_free(plan);
}
