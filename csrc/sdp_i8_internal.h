/* sdp_i8_internal.h - what the INT8 SDP converter's files share (internal to them).
 *
 * The converter is one definition (sdp_one, sdp_i8.c) and several exact vector forms of it;
 * they live in five files (sdp_i8.c: the definition, the dispatch and independent runs;
 * sdp_i8_avx512.c: the general and fast vector paths; sdp_i8_lanes.c: the constants of the
 * lane forms conv kernels convert with (sdp_i8_lanes.h); sdp_i8_avx2.c: the AVX2 build's
 * paths; sdp_i8_lut.c: the LUT activations' plan and 16 lanes, their lane constants in
 * sdp_i8_lanes.c). The scalar steps and the
 * int64-lane front end are static inline here so that every file computes them from the one
 * text.
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

/* Without them, AVX2 (8 int32 lanes, no mask registers, no 64-bit arithmetic shifts) runs the
 * int32-lane forms of sdp_i8_avx2.c, its 4 int64 lanes (gen4) for the other converters, and
 * sdp_one for a LUT outside its plan. */
#if !SDP_I8_VECTOR && defined(__AVX2__)
#define SDP_I8_AVX2 1
#include <immintrin.h>
#else
#define SDP_I8_AVX2 0
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

/* ---- the int32-lane forms' plans (sdp_i8_avx512.c's span_fast32 / span_add32; fast32_plan
 * also in sdp_i8_lanes.c's converters, which both builds' lane forms and sdp_i8_avx2.c's spans
 * run): scalar int64 checks, shared so that every path takes a form under the same bounds -- */

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

static inline int fast32_plan(int64_t bias, int64_t mul, int64_t s, int64_t out_zero, fast32* f) {
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

static inline int64_t abs64(int64_t x) { return x < 0 ? -x : x; }

static inline int add32_plan(const sdp_i8* p, int64_t bias, int64_t mul, int64_t s, add32* f) {
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

/* A LUT activation's input t = sat32(rhaz(sat32(v + bias) * mul, s)) of one channel in int32
 * lanes, mul >= 0 (the identities: sdp_i8_lut.c's lut_front): the scalars sdp_i8_lut.c's
 * lut_front_plan broadcasts and sdp_i8_avx2.c's span_lut_prepare clamps v with. v in
 * [vmin, vmax] keeps t = v + bias inside int32 and |t| <= limit, where the form is exact and
 * BS's t 2^pre fits int32 (NVDLA's BS -> BN is then this one rounding); with bias -2^31 and
 * pre >= 31 no v does (limit 0, vmin 2^31: cast to int32 it read as INT32_MIN, every v), so the
 * range is empty (vmin > vmax) and every value takes the int64 / scalar steps. */
typedef struct lut_t32 {
  int32_t vmin, vmax, bias, mul, add, shift, left;
  int form; /* 2: s >= 17, 1: 1 <= s <= 16, 0: s = 0 */
} lut_t32;

static inline void lut_t32_plan(const chan_params* c, lut_t32* f) {
  const int64_t s = c->shift, m = c->mul;
  int64_t limit = INT32_MAX;
  f->form = s >= 17 ? 2 : s >= 1 ? 1 : 0;
  if (f->form < 2 && m > 0) limit = (((int64_t)1 << 30) << s) / m;
  if (limit > INT32_MAX) limit = INT32_MAX;
  if (limit > (INT32_MAX >> bs_pre(c->pre))) limit = INT32_MAX >> bs_pre(c->pre);
  const int64_t vmin = -limit - c->bias, vmax = limit - c->bias;
  const int empty = vmin > INT32_MAX || vmax < INT32_MIN;
  f->vmin = empty ? INT32_MAX : (int32_t)(vmin > INT32_MIN ? vmin : INT32_MIN);
  f->vmax = empty ? INT32_MIN : (int32_t)(vmax < INT32_MAX ? vmax : INT32_MAX);
  f->bias = (int32_t)c->bias;
  f->mul = (int32_t)m;
  f->add = f->form == 2 ? (int32_t)((int64_t)1 << (s - 17)) : f->form == 1 ? 1 << (s - 1) : 0;
  f->shift = (int32_t)(f->form == 2 ? s - 16 : s);
  f->left = (int32_t)(16 - s);
}

/* The table's input t of channel c for the ALU's sum x = v + bias (sdp_one's BS and BN). */
static inline int64_t lut_input(const chan_params* c, int64_t x) {
  return sat32(rhaz(bs_out(x, c->pre) * c->mul, c->shift + c->pre));
}

/* add32_plan's threshold t1 for any channel (bs_exact_to): from t1 on, the residual add's
 * code is saturated on t's side whatever the operand. */
static inline int64_t add_threshold(const sdp_i8* p, const chan_params* c) {
  const int64_t om = p->out_mul != 0 ? abs64(p->out_mul) : 1;
  const int64_t os = p->out_mul != 0 ? p->out_shift : 0;
  if (c->mul == 0) return 0;
  if (os > 30) return INT64_MAX;
  const int64_t t_out = ((((int64_t)128 + abs64(p->out_zero)) << os) + om - 1) / om;
  int64_t e_max = 0;
  for (int64_t code = -128; code <= 127; code += 255) {
    const int64_t e = rhaz((code - p->ew_zero) * p->ew_mul, p->ew_shift);
    e_max = abs64(e) > e_max ? abs64(e) : e_max;
  }
  const int64_t t2 = t_out + e_max, s = c->shift;
  if (s > 40 || t2 > ((int64_t)1 << (61 - s))) return INT64_MAX;
  return ((t2 << s) + abs64(c->mul) - 1) / abs64(c->mul);
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
  /* bins [0, bins_count), and `guard` copies of the first bin before it and of the last after
   * it (bins[-guard..-1], bins[bins_count..+guard)): both are constant, their codes hold beyond
   * t's clamp, so a lane whose t lies less than guard 2^w outside [t_lo, t_hi] reads its code
   * without the clamp (the AVX2 direct form, sdp_i8_lanes.h) */
  int32_t guard;
  /* the t where the code changes (code(t) != code(t - 1)), ascending, inside [t_lo, t_hi]:
   * changes_count of them (multi 0; else 0). sdp_i8_lanes.c's folded LUT form checks per
   * channel that no tie of rhaz's rounding lands on one (sdp_i8_lanes.h). */
  int32_t changes_count;
  const int32_t* changes;
  uint64_t changes_hash; /* FNV-1a's steps over them as 32-bit words (sdp_i8_lanes.c's cache
                          * filters by it before comparing them whole) */
  uint32_t* bins;     /* into store, past the guard below */
  uint32_t store[];
};

/* LUT_PLAN_GUARD: the guard bins at most (the compiler's tables have w = 13: 6 of them, enough
 * for a t step of 2^15 per unit of v, the largest int16 multiplier's) */
enum { LUT_PLAN_MIN_ELEMENTS = 1 << 12, LUT_PLAN_MULTI = 0xFFFF, LUT_PLAN_GUARD = 64 };

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

/* sdp_i8.c: sdp_one over a span / along the channels (the definition; the vector paths'
 * fallback for what their forms do not cover). */
void sdp_i8_span_scalar(const sdp_i8* p, int32_t ch, const int32_t* v, const int8_t* operand,
                        int8_t* y, int64_t count);

void sdp_i8_channels_scalar(const sdp_i8* p, int32_t first, const int32_t* v,
                            const int8_t* operand, int8_t* y, int64_t count);

#if SDP_I8_AVX2
/* sdp_i8_avx2.c: sdp_i8_span and sdp_i8_channels on AVX2 (its forms, else the scalar ones). */
void sdp_i8_span_avx2(const sdp_i8* p, int32_t ch, const int32_t* v, const int8_t* operand,
                      int8_t* y, int64_t count);
void sdp_i8_channels_avx2(const sdp_i8* p, int32_t first, const int32_t* v,
                          const int8_t* operand, int8_t* y, int64_t count);
/* sdp_i8_span_avx2 for an independent run's codes x, v = x - in_zero (|v| <= 255), where the
 * lane forms take that bound (no LUT; act NONE / RELU / CLIP; no element-wise op or ADD): 1
 * where it converted them, 0 where the caller must (through sdp_i8_span). */
int sdp_i8_codes_avx2(const sdp_i8* p, int32_t ch, const int8_t* x, const int8_t* operand,
                      int8_t* y, int64_t count);
/* An independent run's planes [p0, p1) of hw codes whose operand is one code per plane
 * (squeeze-excite's x * s: ew_per_channel MUL, act NONE / RELU / CLIP, out_mul > 0): 1 where it
 * converted them, 0 where the caller must (sdp_i8_planes_avx512's contract). */
int sdp_i8_planes_avx2(const sdp_i8* p, int32_t c, int64_t hw, const int8_t* in, int8_t* out,
                       int64_t p0, int64_t p1);
/* The same for count codes x of channel ch with the operand code `operand` (run_table's 256
 * codes of a plane): 1 where it converted them into y, 0 where the caller must. */
int sdp_i8_plane_codes_avx2(const sdp_i8* p, int32_t ch, int8_t operand, const int8_t* x,
                            int8_t* y, int64_t count);
#endif

#endif /* ACCEL_SDP_I8_INTERNAL_H */
