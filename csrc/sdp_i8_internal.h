/* sdp_i8_internal.h - what the INT8 SDP converter's files share (internal to them).
 *
 * The converter is one definition (sdp_one, sdp_i8.c) and several exact vector forms of it;
 * they live in three files (sdp_i8.c: the definition, the dispatch and independent runs;
 * sdp_i8_avx512.c: the general and fast vector paths and the conv epilogue's lane forms;
 * sdp_i8_lut.c: the LUT activations' plan and lanes). The scalar steps and the int64-lane
 * front end are static inline here so that every file computes them from the one text.
 */
#ifndef ACCEL_SDP_I8_INTERNAL_H
#define ACCEL_SDP_I8_INTERNAL_H

#include <stdint.h>

#include "kernels.h"

/* The vector paths need these four AVX-512 subsets; a build without them runs sdp_one. */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
    defined(__AVX512VL__)
#define SDP_I8_VECTOR 1
#include <immintrin.h>
#else
#define SDP_I8_VECTOR 0
#endif

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
 * prelu_mul 1). pre = shift_max - shift: NVDLA's BS multiplies the channel by 2^pre so that
 * BN's one shifter (shift_max) divides every channel by its own 2^shift (accel.h). */
typedef struct chan_params {
  int64_t bias, mul, shift, prelu_mul, pre;
} chan_params;

static inline chan_params channel_params(const sdp_i8* p, int32_t ch) {
  chan_params c;
  c.bias = p->bias != NULL ? p->bias[ch] : 0;
  c.mul = p->mul != NULL ? p->mul[ch] : 1;
  c.shift = p->rshift != NULL ? p->rshift[ch] : 0;
  c.prelu_mul = p->prelu_mul != NULL ? p->prelu_mul[ch] : 1;
  c.pre = p->shift_max > c.shift ? p->shift_max - c.shift : 0;
  return c;
}

/* BS's shift as applied: pre >= 31 saturates any t != 0 as 31 does (bs_out). */
static inline int64_t bs_pre(int64_t pre) { return pre < 31 ? pre : 31; }

/* BS's output: sat32(t 2^pre), t = v + bias in NVDLA's 33-bit ALU (|t| < 2^33). |t| > 2^31
 * saturates whatever pre is, and pre >= 31 saturates any t != 0, so the shift is taken on t
 * clamped to 2^31 by at most 31 (< 2^63). */
static inline int64_t bs_out(int64_t t, int64_t pre) {
  const int64_t lim = (int64_t)1 << 31;
  t = t < -lim ? -lim : t > lim ? lim : t;
  return sat32(t * ((int64_t)1 << bs_pre(pre)));
}

/* The exact forms below are written for sat32(rhaz(sat32(v + bias) * mul, shift)), which is
 * NVDLA's BS -> BN whenever BS does not saturate, |t| 2^pre <= INT32_MAX. They stay exact for a
 * channel when every |t| beyond `threshold` gives an int8 code saturated on t's side both ways
 * (the form's own threshold: rhaz and the clamps are monotonic) and BS does not saturate up to
 * it: then a larger |t| gives BS's output >= threshold 2^pre and the same saturated code. */
static inline int bs_exact_to(const chan_params* c, int64_t threshold) {
  return c->pre == 0 || threshold <= (INT32_MAX >> bs_pre(c->pre));
}

/* The smallest t >= 0 from which rhaz(t * mul, s) >= r in magnitude (0 for mul 0, whose
 * output is constant; INT64_MAX when it cannot be held). */
static inline int64_t code_threshold(int64_t mul, int64_t s, int64_t r) {
  const int64_t m = mul < 0 ? -mul : mul;
  if (m == 0) return 0;
  if (s > 40 || r > ((int64_t)1 << 20)) return INT64_MAX;
  return ((r << s) + m - 1) / m;
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
  int32_t multi;      /* bins with more than one change (LUT_PLAN_MULTI) */
  const struct sdp_i8_lut_bytes* bytes; /* the same codes as byte tables (VBMI builds, multi
                                         * 0: sdp_i8_lanes.h), or NULL */
  uint32_t bins[];
};

enum { LUT_PLAN_MIN_ELEMENTS = 1 << 16, LUT_PLAN_MULTI = 0xFFFF };

#if SDP_I8_VECTOR
/* ---- AVX-512: 16 values per step, as two halves of 8 int64 lanes ------------------------- */

typedef struct vec_params {
  __m512i bias, mul, half, shift, prelu_mul;           /* per lane (one channel here) */
  __m512i pre;                                         /* BS's 2^pre, pre <= 31 (bs_out) */
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

static inline __m512i sat32x8(const vec_params* q, __m512i x) {
  return _mm512_min_epi64(_mm512_max_epi64(x, q->lo32), q->hi32);
}

/* Step 3, the element-wise op, of t and the operand's converted e (both inside int32). */
static inline __attribute__((always_inline)) __m512i ew8(const vec_params* q, __m512i t,
                                                         __m512i e, int ew) {
  if (ew == ACCEL_EW_ADD) t = sat32x8(q, _mm512_add_epi64(t, e));
  if (ew == ACCEL_EW_MUL) t = sat32x8(q, _mm512_mul_epi32(t, e)); /* both within int32 */
  if (ew == ACCEL_EW_MAX) t = _mm512_max_epi64(t, e);
  if (ew == ACCEL_EW_MIN) t = _mm512_min_epi64(t, e);
  return t;
}

/* Steps 1-3 (BS, BN, element-wise op) on 8 values: t, inside int32. q->shift and q->half
 * are BN's (shift_max), q->pre each lane's BS power (bs_out). */
static inline __attribute__((always_inline)) __m512i front8(const vec_params* q, __m512i v,
                                                            __m128i op, int has_mul, int ew) {
  const __m512i lim = _mm512_set1_epi64((int64_t)1 << 31);
  __m512i t = _mm512_add_epi64(v, q->bias);
  t = _mm512_min_epi64(_mm512_max_epi64(t, _mm512_sub_epi64(q->zero, lim)), lim);
  t = sat32x8(q, _mm512_sllv_epi64(t, q->pre));
  if (has_mul) t = sat32x8(q, rhaz8(_mm512_mul_epi32(t, q->mul), q->half, q->shift));
  if (ew != ACCEL_EW_NONE) {
    const __m512i o = _mm512_sub_epi64(_mm512_cvtepi8_epi64(op), q->ew_zero);
    const __m512i e = sat32x8(q, rhaz8(_mm512_mullo_epi64(o, q->ew_mul), q->ew_half, q->ew_shift));
    t = ew8(q, t, e, ew);
  }
  return t;
}
/* The general path's lanes for one channel: every lane holds channel c's parameters
 * (sdp_i8_avx512.c's span and planes, sdp_i8_lut.c's front8 fallback). */
static inline void channel_vectors(const chan_params* c, vec_params* q) {
  q->bias = _mm512_set1_epi64(c->bias);
  q->mul = _mm512_set1_epi64(c->mul);
  q->half = half_of(c->shift + c->pre);
  q->shift = _mm512_set1_epi64(c->shift + c->pre);
  q->pre = _mm512_set1_epi64(bs_pre(c->pre));
  q->prelu_mul = _mm512_set1_epi64(c->prelu_mul);
}

/* The parameters every channel shares. */
static inline void call_params(const sdp_i8* p, vec_params* q) {
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
  q->pre = q->zero;
  q->clip_lo = _mm_set1_epi8((char)p->clip_lo);
  q->clip_hi = _mm_set1_epi8((char)p->clip_hi);
}

/* BS's powers and BN's shift for the lanes of channels [ch, ch + 8) (mask m), each lane its
 * own channel (channel_params' pre and shift_max). */
static inline void bn_lanes(const sdp_i8* p, vec_params* q, int64_t ch, __mmask8 m) {
  const __m512i one = _mm512_set1_epi64(1);
  const __m512i own = p->rshift != NULL
                          ? _mm512_cvtepu8_epi64(_mm_maskz_loadu_epi8(m, p->rshift + ch))
                          : q->zero;
  const __m512i s_max = _mm512_max_epi64(_mm512_set1_epi64(p->shift_max), own);
  q->pre = _mm512_min_epi64(_mm512_sub_epi64(s_max, own), _mm512_set1_epi64(31));
  q->shift = s_max;
  q->half = _mm512_mask_sllv_epi64(q->zero, _mm512_cmpgt_epi64_mask(s_max, q->zero), one,
                                   _mm512_sub_epi64(s_max, one));
}

/* sdp_i8_avx512.c: sdp_i8_span and sdp_i8_channels without a LUT. */
void sdp_i8_span_avx512(const sdp_i8* p, int32_t ch, const int32_t* v, const int8_t* operand,
                        int8_t* y, int64_t count);
void sdp_i8_channels_avx512(const sdp_i8* p, int32_t first, const int32_t* v,
                            const int8_t* operand, int8_t* y, int64_t count);
int sdp_i8_planes_avx512(const sdp_i8* p, int32_t c, int64_t hw, const int8_t* in, int8_t* out,
                         int64_t p0, int64_t p1);
/* sdp_i8_lut.c: sdp_i8_span and sdp_i8_channels with a LUT activation. */
void sdp_i8_span_lut(const sdp_i8* p, int32_t ch, const int32_t* v, const int8_t* operand,
                     int8_t* y, int64_t count);
void sdp_i8_channels_lut(const sdp_i8* p, int32_t first, const int32_t* v,
                         const int8_t* operand, int8_t* y, int64_t count);
#endif

#endif /* ACCEL_SDP_I8_INTERNAL_H */
