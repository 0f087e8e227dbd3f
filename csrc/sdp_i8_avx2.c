/* sdp_i8_avx2.c - the INT8 SDP converter on AVX2 (8 int32 lanes, no AVX-512): the int32-lane
 * forms of the converters the compiler emits most, sdp_one's codes exactly (sdp_i8.c):
 *  - the common converter (no element-wise op, out_mul 0, act NONE / RELU / CLIP: a conv's
 *    epilogue) and the residual add (element-wise ADD, NONE / RELU / CLIP) through the lane
 *    forms of sdp_i8_lanes.h (the ones conv kernels use in registers), prepared per span for
 *    any int32 value; sdp_i8_lanes8_run converts rows a kernel stored;
 *  - a LUT activation through the layer's plan of codes by bins of the table's input t
 *    (sdp_i8_lut_plan) in the lane form of sdp_i8_lanes.h too (sdp_i8_lanes8_lut: v clamped
 *    where t reaches the plan's ends, t in int32 lanes, each lane's bin word, the code below
 *    or above the bin's threshold), sdp_i8_lanes8_run_lut over a row.
 * 32 values a step (four vectors, packed to bytes together); a tail of fewer goes through a
 * padded copy. Everything else without a LUT (PRELU, MUL / MAX / MIN, channels whose
 * bounds the int32 forms do not hold, sdp_i8_channels) runs sdp_one's steps in 4 int64 lanes
 * (gen4 below: AVX2 lacks the AVX-512 forms' 64-bit arithmetic shifts and min/max, mask
 * registers and vpmovsdb); along the channels a LUT's table runs in 8 int32 lanes after gen4's
 * steps (channels_lut); a LUT without a plan or a lane form (a bin with two changes, mul <= 0,
 * BS saturating) runs sdp_one itself (sdp_i8_span_scalar).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"
#include "sdp_i8_internal.h"
#include "sdp_i8_lanes.h"

#if SDP_I8_AVX2

/* ---- the lane forms (sdp_i8_lanes.h) over a row -------------------------------------------- */

/* 32 values a step; a tail of fewer through a zero-padded copy (0 is a value as any other,
 * and code 0 gives v = -in_zero, within |v| <= 255). The values are int32 rows (codes 0: v)
 * or an independent run's int8 codes x (codes 1: v = x - zero, widened here: an int32 copy
 * stored and loaded again cost as much as the add's lanes, sdp_i8.c's run_planes_item). */
static inline __attribute__((always_inline)) void run_step(const sdp_i8_lane_cvt* e,
                                                           const sdp_i8_lane_add* a, int form,
                                                           int add, __m256i lo, __m256i hi,
                                                           const void* src, int codes,
                                                           __m256i zero, const int8_t* o,
                                                           int8_t* y) {
  __m256i q[4];
  for (int j = 0; j < 4; ++j) {
    const __m256i x =
        codes ? _mm256_sub_epi32(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                                     (const __m128i*)(const void*)((const int8_t*)src + 8 * j))),
                                 zero)
              : _mm256_loadu_si256((const __m256i*)(const void*)((const int32_t*)src + 8 * j));
    if (add)
      q[j] = sdp_i8_lanes8_add(
          a, e, x, _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(const void*)(o + 8 * j))),
          form, add == 2);
    else
      q[j] = sdp_i8_lanes8_form(e, x, form);
  }
  _mm256_storeu_si256((__m256i*)(void*)y,
                      _mm256_min_epi8(_mm256_max_epi8(sdp_i8_codes32(q[0], q[1], q[2], q[3]), lo),
                                      hi));
}

/* e and a are copied first, as in run_lut_body below (y's bytes may alias them). */
static inline __attribute__((always_inline)) void run_body(const sdp_i8_lane_cvt* ep,
                                                           const sdp_i8_lane_add* ap, int form,
                                                           int add, int8_t lo, int8_t hi,
                                                           const void* src, int codes,
                                                           int32_t in_zero, const int8_t* o,
                                                           int8_t* y, int64_t count) {
  const sdp_i8_lane_cvt ec = *ep;
  sdp_i8_lane_add ac;
  if (add) ac = *ap;
  const sdp_i8_lane_cvt* e = &ec;
  const sdp_i8_lane_add* a = add ? &ac : NULL;
  const __m256i l = _mm256_set1_epi8(lo), h = _mm256_set1_epi8(hi);
  const __m256i z = _mm256_set1_epi32(in_zero);
  const size_t size = codes ? 1 : sizeof(int32_t);
  int64_t i = 0;
  for (; i + 32 <= count; i += 32)
    run_step(e, a, form, add, l, h, (const char*)src + (size_t)i * size, codes, z,
             add ? o + i : NULL, y + i);
  if (i < count) {
    int32_t tv[32] = {0};
    int8_t to[32] = {0}, ty[32];
    memcpy(tv, (const char*)src + (size_t)i * size, (size_t)(count - i) * size);
    if (add) memcpy(to, o + i, (size_t)(count - i));
    run_step(e, a, form, add, l, h, tv, codes, z, to, ty);
    memcpy(y + i, ty, (size_t)(count - i));
  }
}

/* The row run's forms, each compiled for int32 rows (CODES 0) and for int8 codes (1). */
#define LANES8_RUN(CODES)                                                                      \
  if (add != NULL) {                                                                           \
    const int lean = add->lean;                                                                \
    switch (form) {                                                                            \
      case 4: if (lean) RUN(4, 2, CODES); else RUN(4, 1, CODES); break;                        \
      case 3: if (lean) RUN(3, 2, CODES); else RUN(3, 1, CODES); break;                        \
      case 2: if (lean) RUN(2, 2, CODES); else RUN(2, 1, CODES); break;                        \
      default: if (lean) RUN(1, 2, CODES); else RUN(1, 1, CODES); break;                       \
    }                                                                                          \
    return;                                                                                    \
  }                                                                                            \
  switch (form) {                                                                              \
    case 7: RUN(7, 0, CODES); break;                                                           \
    case 6: RUN(6, 0, CODES); break;                                                           \
    case 5: RUN(5, 0, CODES); break;                                                           \
    case 4: RUN(4, 0, CODES); break;                                                           \
    case 3: RUN(3, 0, CODES); break;                                                           \
    case 2: RUN(2, 0, CODES); break;                                                           \
    case 1: RUN(1, 0, CODES); break;                                                           \
    default: RUN(0, 0, CODES); break;                                                          \
  }

void sdp_i8_lanes8_run(const sdp_i8_lane_cvt* e, const sdp_i8_lane_add* add, int form, int8_t lo,
                       int8_t hi, const int32_t* v, const int8_t* operand, int8_t* y,
                       int64_t count) {
#define RUN(FORM, ADD, CODES) run_body(e, add, FORM, ADD, lo, hi, v, CODES, 0, operand, y, count)
  LANES8_RUN(0)
#undef RUN
}

/* sdp_i8_lanes8_run of an independent run's codes x, v = x - in_zero (|v| <= 255). */
static void lanes8_run_codes(const sdp_i8_lane_cvt* e, const sdp_i8_lane_add* add, int form,
                             int8_t lo, int8_t hi, const int8_t* x, int32_t in_zero,
                             const int8_t* operand, int8_t* y, int64_t count) {
#define RUN(FORM, ADD, CODES) \
  run_body(e, add, FORM, ADD, lo, hi, x, CODES, in_zero, operand, y, count)
  LANES8_RUN(1)
#undef RUN
}
#undef LANES8_RUN

/* 32 values of a row (v) into their codes (y): the four vectors' u first, then their bin
 * words, then the picks, so that the scalar loads of one vector overlap the others' arithmetic
 * (one vector at a time waited on each lookup in turn). */
static inline __attribute__((always_inline)) void run_lut_step(const sdp_i8_lane_cvt* e,
                                                               const sdp_i8_lane_lut* L,
                                                               const int32_t* v, int8_t* y,
                                                               int form) {
  const __m256i* x = (const __m256i*)(const void*)v;
  __m256i u[4], g[4];
  for (int k = 0; k < 4; ++k) u[k] = sdp_i8_lanes8_lut_u(e, L, _mm256_loadu_si256(x + k), form);
  for (int k = 0; k < 4; ++k) g[k] = sdp_i8_lanes8_lut_words(L, u[k]);
  _mm256_storeu_si256((__m256i*)(void*)y, sdp_i8_codes32(sdp_i8_lanes8_lut_pick(L, g[0], u[0]),
                                                         sdp_i8_lanes8_lut_pick(L, g[1], u[1]),
                                                         sdp_i8_lanes8_lut_pick(L, g[2], u[2]),
                                                         sdp_i8_lanes8_lut_pick(L, g[3], u[3])));
}

/* The constants are copied first: y's bytes may alias them, so through the pointers the
 * compiler loaded them again after every store of codes. */
static inline __attribute__((always_inline)) void run_lut_body(const sdp_i8_lane_cvt* ep,
                                                               const sdp_i8_lane_lut* Lp,
                                                               const int32_t* v, int8_t* y,
                                                               int64_t count, int form) {
  const sdp_i8_lane_cvt e = *ep;
  const sdp_i8_lane_lut L = *Lp;
  int64_t i = 0;
  for (; i + 32 <= count; i += 32) run_lut_step(&e, &L, v + i, y + i, form);
  if (i < count) { /* any padding: v is clamped */
    int32_t tv[32] = {0};
    int8_t ty[32];
    memcpy(tv, v + i, (size_t)(count - i) * sizeof(int32_t));
    run_lut_step(&e, &L, tv, ty, form);
    memcpy(y + i, ty, (size_t)(count - i));
  }
}

void sdp_i8_lanes8_run_lut(const sdp_i8_lane_cvt* e, const sdp_i8_lane_lut* L, const int32_t* v,
                           int8_t* y, int64_t count) {
  switch (sdp_i8_lane_lut_form(e)) {
    case 2: run_lut_body(e, L, v, y, count, 2); break;
    case 1: run_lut_body(e, L, v, y, count, 1); break;
    default: run_lut_body(e, L, v, y, count, 0); break;
  }
}

/* A span's LUT converter in the lane form (sdp_i8_lanes8_lut) without sdp_i8_lanes_prepare_lut's
 * search: v clamped to lut_t32_plan's [vmin, vmax], where the form is exact, and t then
 * clamped to the plan's [t_lo, t_hi]. A v beyond vmax has t >= t(vmax) (t is monotonic in v
 * for mul >= 0), so the same code when t(vmax) >= t_hi, which is checked on sdp_one's own t
 * (lut_input) where such a v exists; likewise below vmin. 0: the span takes sdp_one. */
static int span_lut_prepare(const sdp_i8* p, const chan_params* c, sdp_i8_lane_cvt* e,
                            sdp_i8_lane_lut* L) {
  const struct sdp_i8_lut_plan* P = p->lut_plan;
  if (P == NULL || P->multi != 0 || p->ew_op != ACCEL_EW_NONE || c->shift > 40 || c->mul < 0)
    return 0;
  lut_t32 f;
  lut_t32_plan(c, &f);
  if (f.vmin > f.vmax) return 0;
  if (f.vmax < INT32_MAX && lut_input(c, (int64_t)f.vmax + c->bias) < P->t_hi) return 0;
  if (f.vmin > INT32_MIN && lut_input(c, (int64_t)f.vmin + c->bias) > P->t_lo) return 0;
  memset(e, 0, sizeof(*e));
  sdp_i8_lane_cvt_set(e, f.vmin, f.vmax, f.bias, f.mul, f.add, f.shift);
  e->k = f.form == 2 ? 16 : 0;
  e->low = f.form == 2 ? 0 : f.left; /* s = 0: (th mul << 16) + tl mul, t0 mul exactly */
  e->neg = f.form == 0 ? 0 : -1;
  sdp_i8_lane_lut_of(P, L); /* forms 0 and 1: t clamped, then less the lanes' base */
  return 1;
}

/* ---- the general steps in 4 int64 lanes ---------------------------------------------------
 * sdp_one's steps as they are (BS, BN, the element-wise op, PRELU, the output converter) for
 * what the int32 forms do not cover (an element-wise MUL / MAX / MIN: squeeze-excite's x * s;
 * PRELU; output converters beyond the lane forms' bounds; one value per channel). AVX2 has 64-bit adds,
 * logical shifts, compares and vpmuldq (int32 x int32 -> int64), but no 64-bit min / max or
 * arithmetic shift: min / max are a compare and a blend, and rhaz shifts the magnitude
 * logically and puts the sign back (as sdp_i8_avx512.c's rhaz8 does). Every product has int32
 * factors (t after a sat32, mul / ew_mul / prelu_mul / out_mul inside int32), so vpmuldq is
 * exact; a count of 64 or more shifts to 0, so half = 1 << (s - 1) is 0 for s = 0. */
typedef struct gen4 {
  __m256i bias, mul, pre, shift, half; /* per lane: the channel's (span) or each lane's own */
  __m256i prelu_mul;
  __m256i ew_zero, ew_mul, ew_half, ew_shift, prelu_half, prelu_shift;
  __m256i out_mul, out_half, out_shift, out_zero;
  __m256i lo32, hi32, lim, nlim, lo8, hi8, clip_lo, clip_hi, zero, one;
} gen4;

static inline __m256i min64(__m256i a, __m256i b) {
  return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b));
}

static inline __m256i max64(__m256i a, __m256i b) {
  return _mm256_blendv_epi8(b, a, _mm256_cmpgt_epi64(a, b));
}

static inline __m256i rhaz4(__m256i p, __m256i half, __m256i shift, __m256i zero) {
  const __m256i neg = _mm256_cmpgt_epi64(zero, p);
  const __m256i mag = _mm256_sub_epi64(_mm256_xor_si256(p, neg), neg);
  const __m256i a = _mm256_srlv_epi64(_mm256_add_epi64(mag, half), shift);
  return _mm256_sub_epi64(_mm256_xor_si256(a, neg), neg);
}

static inline __m256i half4(__m256i shift, __m256i one) {
  return _mm256_sllv_epi64(one, _mm256_sub_epi64(shift, one));
}

static void gen4_call(const sdp_i8* p, gen4* g) {
  g->zero = _mm256_setzero_si256();
  g->one = _mm256_set1_epi64x(1);
  g->ew_zero = _mm256_set1_epi64x(p->ew_zero);
  g->ew_mul = _mm256_set1_epi64x(p->ew_mul);
  g->ew_shift = _mm256_set1_epi64x(p->ew_shift);
  g->ew_half = half4(g->ew_shift, g->one);
  g->prelu_shift = _mm256_set1_epi64x(p->prelu_shift);
  g->prelu_half = half4(g->prelu_shift, g->one);
  g->out_mul = _mm256_set1_epi64x(p->out_mul);
  g->out_shift = _mm256_set1_epi64x(p->out_shift);
  g->out_half = half4(g->out_shift, g->one);
  g->out_zero = _mm256_set1_epi64x(p->out_zero);
  g->lo32 = _mm256_set1_epi64x(INT32_MIN);
  g->hi32 = _mm256_set1_epi64x(INT32_MAX);
  g->lim = _mm256_set1_epi64x((int64_t)1 << 31);
  g->nlim = _mm256_set1_epi64x(-((int64_t)1 << 31));
  g->lo8 = _mm256_set1_epi64x(-128);
  g->hi8 = _mm256_set1_epi64x(127);
  g->clip_lo = _mm256_set1_epi64x(p->act == ACCEL_ACT_CLIP ? p->clip_lo : -128);
  g->clip_hi = _mm256_set1_epi64x(p->act == ACCEL_ACT_CLIP ? p->clip_hi : 127);
}

/* One channel's parameters in every lane (channel_params). */
static void gen4_channel(const chan_params* c, gen4* g) {
  g->bias = _mm256_set1_epi64x(c->bias);
  g->mul = _mm256_set1_epi64x(c->mul);
  g->pre = _mm256_set1_epi64x(bs_pre(c->pre));
  g->shift = _mm256_set1_epi64x(c->shift + c->pre);
  g->half = half4(g->shift, g->one);
  g->prelu_mul = _mm256_set1_epi64x(c->prelu_mul);
}

/* Channels [ch, ch + 4), each lane its own (channel_params: BN's shift max(shift_max, own),
 * BS's power min(shift_max - own, 31) where shift_max is larger); lanes past channel `last`
 * (a padded tail) take last's. */
static void gen4_lanes_to(const sdp_i8* p, int64_t ch, int64_t last, gen4* g) {
  int64_t b[4], m[4], pr[4], sh[4], pm[4];
  for (int i = 0; i < 4; ++i) {
    const chan_params c = channel_params(p, (int32_t)(ch + i < last ? ch + i : last));
    b[i] = c.bias, m[i] = c.mul, pr[i] = bs_pre(c.pre), sh[i] = c.shift + c.pre;
    pm[i] = c.prelu_mul;
  }
  g->bias = _mm256_setr_epi64x(b[0], b[1], b[2], b[3]);
  g->mul = _mm256_setr_epi64x(m[0], m[1], m[2], m[3]);
  g->pre = _mm256_setr_epi64x(pr[0], pr[1], pr[2], pr[3]);
  g->shift = _mm256_setr_epi64x(sh[0], sh[1], sh[2], sh[3]);
  g->half = half4(g->shift, g->one);
  g->prelu_mul = _mm256_setr_epi64x(pm[0], pm[1], pm[2], pm[3]);
}

/* gen4_lanes_to's parameters of channels [ch, ch + 4), all of them there, loaded as vectors
 * (channel_params and the inserts per lane were most of sdp_i8_channels' time: docs/kernels.md) */
static inline __attribute__((always_inline)) void gen4_lanes(const sdp_i8* p, int64_t ch,
                                                             gen4* g) {
  g->bias = p->bias != NULL ? _mm256_cvtepi32_epi64(
                                  _mm_loadu_si128((const __m128i*)(const void*)(p->bias + ch)))
                            : g->zero;
  g->mul = p->mul != NULL ? _mm256_cvtepi16_epi64(
                                _mm_loadl_epi64((const __m128i*)(const void*)(p->mul + ch)))
                          : g->one;
  g->prelu_mul = p->prelu_mul != NULL
                     ? _mm256_cvtepi16_epi64(
                           _mm_loadl_epi64((const __m128i*)(const void*)(p->prelu_mul + ch)))
                     : g->one;
  int32_t rs = 0;
  if (p->rshift != NULL) memcpy(&rs, p->rshift + ch, sizeof rs);
  /* pre = max(shift_max - shift, 0), BS's power min(pre, 31), BN's shift shift + pre */
  const __m128i own = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(rs));
  const __m128i pre =
      _mm_max_epi32(_mm_sub_epi32(_mm_set1_epi32(p->shift_max), own), _mm_setzero_si128());
  g->pre = _mm256_cvtepi32_epi64(_mm_min_epi32(pre, _mm_set1_epi32(31)));
  g->shift = _mm256_cvtepi32_epi64(_mm_add_epi32(own, pre));
  g->half = half4(g->shift, g->one);
}

/* t of 4 values v (int64 lanes) with their operand codes o (int64 lanes) after BS, BN and the
 * element-wise op: sdp_one's t before the activation, inside int32. */
static inline __attribute__((always_inline)) __m256i gen4_t(const gen4* g, __m256i v, __m256i o,
                                                            int ew) {
  /* BS: v + bias clamped to +-2^31, times 2^pre (<= 2^62), sat32 */
  __m256i t = min64(max64(_mm256_add_epi64(v, g->bias), g->nlim), g->lim);
  t = min64(max64(_mm256_sllv_epi64(t, g->pre), g->lo32), g->hi32);
  /* BN */
  t = rhaz4(_mm256_mul_epi32(t, g->mul), g->half, g->shift, g->zero);
  t = min64(max64(t, g->lo32), g->hi32);
  if (ew != ACCEL_EW_NONE) {
    const __m256i e0 = rhaz4(_mm256_mul_epi32(_mm256_sub_epi64(o, g->ew_zero), g->ew_mul),
                             g->ew_half, g->ew_shift, g->zero);
    const __m256i e = min64(max64(e0, g->lo32), g->hi32);
    if (ew == ACCEL_EW_ADD) t = min64(max64(_mm256_add_epi64(t, e), g->lo32), g->hi32);
    if (ew == ACCEL_EW_MUL) t = min64(max64(_mm256_mul_epi32(t, e), g->lo32), g->hi32);
    if (ew == ACCEL_EW_MAX) t = max64(t, e);
    if (ew == ACCEL_EW_MIN) t = min64(t, e);
  }
  return t;
}

/* The codes of 4 values t (int64 lanes inside int32: gen4_t's, or a LUT's y with act NONE)
 * after the activation and the output converter, clamped to [-128, 127] and CLIP's bounds. */
static inline __attribute__((always_inline)) __m256i gen4_out(const gen4* g, __m256i t, int act,
                                                              int out_cvt) {
  if (act == ACCEL_ACT_RELU) t = max64(t, g->zero);
  if (act == ACCEL_ACT_PRELU) {
    const __m256i n = rhaz4(_mm256_mul_epi32(t, g->prelu_mul), g->prelu_half, g->prelu_shift,
                            g->zero);
    t = _mm256_blendv_epi8(t, min64(max64(n, g->lo32), g->hi32), _mm256_cmpgt_epi64(g->zero, t));
  }
  if (out_cvt) t = rhaz4(_mm256_mul_epi32(t, g->out_mul), g->out_half, g->out_shift, g->zero);
  __m256i y = min64(max64(_mm256_add_epi64(t, g->out_zero), g->lo8), g->hi8);
  if (act == ACCEL_ACT_CLIP) y = min64(max64(y, g->clip_lo), g->clip_hi);
  return y;
}

/* The codes of 4 values v (int64 lanes) with their operand codes o (int64 lanes), clamped to
 * [-128, 127] and CLIP's bounds, in int64 lanes. */
static inline __attribute__((always_inline)) __m256i gen4_codes(const sdp_i8* p, const gen4* g,
                                                                __m256i v, __m256i o, int ew,
                                                                int act, int out_cvt) {
  (void)p;
  return gen4_out(g, gen4_t(g, v, o, ew), act, out_cvt);
}

/* 8 codes (int64 lanes' low dwords) of two gen4_codes results as 8 int32 lanes */
static inline __m256i gen4_join(__m256i a, __m256i b) {
  const __m256i idx = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  return _mm256_blend_epi32(_mm256_permutevar8x32_epi32(a, idx),
                            _mm256_permutevar8x32_epi32(b, idx), 0xF0);
}

/* 32 values a step (operand: NULL without an element-wise op); lanes: each lane's own channel
 * from `first` (sdp_i8_channels), else g holds the channel. */
static inline __attribute__((always_inline)) void gen4_step(const sdp_i8* p, gen4* g,
                                                            const int32_t* v, const int8_t* operand,
                                                            int8_t* y, int64_t first, int lanes,
                                                            int ew, int act, int out_cvt) {
  __m256i q[4];
  for (int j = 0; j < 4; ++j) {
    const __m256i x = _mm256_loadu_si256((const __m256i*)(const void*)(v + 8 * j));
    __m256i o = _mm256_setzero_si256();
    if (ew != ACCEL_EW_NONE)
      o = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(const void*)(operand + 8 * j)));
    if (lanes) gen4_lanes(p, first + 8 * j, g);
    const __m256i a = gen4_codes(p, g, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(x)),
                                 _mm256_cvtepi32_epi64(_mm256_castsi256_si128(o)), ew, act,
                                 out_cvt);
    if (lanes) gen4_lanes(p, first + 8 * j + 4, g);
    const __m256i b = gen4_codes(p, g, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(x, 1)),
                                 _mm256_cvtepi32_epi64(_mm256_extracti128_si256(o, 1)), ew, act,
                                 out_cvt);
    q[j] = gen4_join(a, b);
  }
  _mm256_storeu_si256((__m256i*)(void*)y, sdp_i8_codes32(q[0], q[1], q[2], q[3]));
}

static inline __attribute__((always_inline)) void gen4_body(const sdp_i8* p, gen4* g,
                                                            const int32_t* v, const int8_t* operand,
                                                            int8_t* y, int64_t count, int64_t first,
                                                            int lanes, int ew, int act,
                                                            int out_cvt) {
  int64_t i = 0;
  for (; i + 32 <= count; i += 32)
    gen4_step(p, g, v + i, operand != NULL ? operand + i : NULL, y + i, first + i, lanes, ew,
              act, out_cvt);
  if (i < count) {
    /* the tail through a zero-padded copy (one channel: the padding is any value of it) */
    int32_t tv[32] = {0};
    int8_t to[32] = {0}, ty[32];
    const int64_t n = count - i;
    memcpy(tv, v + i, (size_t)n * sizeof(int32_t));
    if (operand != NULL) memcpy(to, operand + i, (size_t)n);
    if (lanes) { /* one value per channel: no channels past the last to read */
      sdp_i8_channels_scalar(p, (int32_t)(first + i), v + i,
                             operand != NULL ? operand + i : NULL, y + i, n);
      return;
    }
    gen4_step(p, g, tv, to, ty, first + i, 0, ew, act, out_cvt);
    memcpy(y + i, ty, (size_t)n);
  }
}

/* The instantiations: the element-wise op and one channel or each lane's own at compile time,
 * the activation and the output converter read in the loop (invariant branches). */
#define GEN4(NAME, EW, LANES)                                                                  \
  static void NAME(const sdp_i8* p, gen4* g, const int32_t* v, const int8_t* operand,         \
                   int8_t* y, int64_t count, int64_t first) {                                  \
    gen4_body(p, g, v, operand, y, count, first, LANES, EW, p->act, p->out_mul != 0);          \
  }
GEN4(gen4_none, ACCEL_EW_NONE, 0)
GEN4(gen4_add, ACCEL_EW_ADD, 0)
GEN4(gen4_mul, ACCEL_EW_MUL, 0)
GEN4(gen4_max, ACCEL_EW_MAX, 0)
GEN4(gen4_min, ACCEL_EW_MIN, 0)
GEN4(gen4_none_lanes, ACCEL_EW_NONE, 1)
GEN4(gen4_add_lanes, ACCEL_EW_ADD, 1)
GEN4(gen4_mul_lanes, ACCEL_EW_MUL, 1)
GEN4(gen4_max_lanes, ACCEL_EW_MAX, 1)
GEN4(gen4_min_lanes, ACCEL_EW_MIN, 1)
#undef GEN4

typedef void (*gen4_fn)(const sdp_i8*, gen4*, const int32_t*, const int8_t*, int8_t*, int64_t,
                        int64_t);

static gen4_fn gen4_of(accel_eltwise ew, int lanes) {
  switch (ew) {
    case ACCEL_EW_ADD: return lanes ? gen4_add_lanes : gen4_add;
    case ACCEL_EW_MUL: return lanes ? gen4_mul_lanes : gen4_mul;
    case ACCEL_EW_MAX: return lanes ? gen4_max_lanes : gen4_max;
    case ACCEL_EW_MIN: return lanes ? gen4_min_lanes : gen4_min;
    default: return lanes ? gen4_none_lanes : gen4_none;
  }
}

/* ---- a LUT activation along the channels (sdp_i8_channels: fully connected layers) ---------
 * One value per channel, so no plan of codes by t per channel row: sdp_one's steps to t in
 * gen4's int64 lanes with each lane's channel (gen4_t), the table in 8 int32 lanes (lut8_y),
 * the output converter in gen4's lanes again (gen4_out, act NONE: the LUT's y is the value it
 * converts). The table's integers are lut_int8_eval's (lut.c), in int32 as sdp_i8_lut.c's lut16
 * states them: t inside int32, so d = t - start read as uint32 is exact for t >= start, and the
 * hit test d < (N - 1) 2^select is start <= t <= min(start + (N - 1) 2^select - 1, INT32_MAX);
 * the index d >> select, the fraction (d << (32 - select)) >> 16 (logical shifts; a count of
 * 32 gives 0, select 0); one 32-bit gather at entry i reads entries i and i + 1 (LE's follow
 * LO's in accel_lut_int8: i <= 255 in LO, 257 + i <= 320 in LE, inside the tables); e_i 2^16 +
 * (e_(i+1) - e_i) f is a convex combination of e_i 2^16 and e_(i+1) 2^16, inside int32, so
 * modulo-2^32 arithmetic gives it and rhaz(., 16) = (. + 2^15 - (. < 0)) >> 16. Lanes outside
 * both tables (the slopes beyond LE, rare) take lut_int8_eval itself. (sdp_one per value, which
 * this replaces, took two to three times as long: docs/kernels.md.) */
typedef struct lut8 {
  __m256i lo_start, lo_last, le_start, le_last, lo_sel, le_sel, lo_up, le_up, le_base;
  const accel_lut_int8* l;
} lut8;

static int32_t lut8_last(int64_t start, int64_t entries, int32_t select) {
  const int64_t last = start + ((entries - 1) << select) - 1;
  return (int32_t)(last < INT32_MAX ? last : INT32_MAX);
}

static void lut8_of(const accel_lut_int8* l, lut8* L) {
  L->lo_start = _mm256_set1_epi32(l->lo_start);
  L->lo_last = _mm256_set1_epi32(lut8_last(l->lo_start, ACCEL_LUT_LO_ENTRIES, l->lo_index_select));
  L->le_start = _mm256_set1_epi32(l->le_start);
  L->le_last = _mm256_set1_epi32(lut8_last(l->le_start, ACCEL_LUT_LE_ENTRIES, l->le_index_select));
  L->lo_sel = _mm256_set1_epi32(l->lo_index_select);
  L->le_sel = _mm256_set1_epi32(l->le_index_select);
  L->lo_up = _mm256_set1_epi32(32 - l->lo_index_select);
  L->le_up = _mm256_set1_epi32(32 - l->le_index_select);
  L->le_base = _mm256_set1_epi32((int32_t)(offsetof(accel_lut_int8, le) / sizeof(int16_t)));
  L->l = l;
}

/* lut_int8_eval of 8 values t (int32 lanes) */
static inline __attribute__((always_inline)) __m256i lut8_y(const lut8* L, __m256i t) {
  const __m256i ones = _mm256_set1_epi32(-1);
  const __m256i in_lo = _mm256_andnot_si256(
      _mm256_or_si256(_mm256_cmpgt_epi32(L->lo_start, t), _mm256_cmpgt_epi32(t, L->lo_last)), ones);
  const __m256i in_le = _mm256_andnot_si256(
      _mm256_or_si256(_mm256_cmpgt_epi32(L->le_start, t), _mm256_cmpgt_epi32(t, L->le_last)), ones);
  const __m256i hit = _mm256_or_si256(in_lo, in_le);
  /* the table of each lane: LO where it hits (priority), else LE */
  const __m256i d = _mm256_sub_epi32(t, _mm256_blendv_epi8(L->le_start, L->lo_start, in_lo));
  __m256i index = _mm256_srlv_epi32(d, _mm256_blendv_epi8(L->le_sel, L->lo_sel, in_lo));
  index = _mm256_add_epi32(index, _mm256_and_si256(_mm256_andnot_si256(in_lo, in_le), L->le_base));
  index = _mm256_and_si256(index, hit); /* a lane outside both reads entry 0, unused */
  const __m256i frac = _mm256_srli_epi32(
      _mm256_sllv_epi32(d, _mm256_blendv_epi8(L->le_up, L->lo_up, in_lo)), 16);
  const __m256i pair = _mm256_i32gather_epi32((const int*)(const void*)L->l, index, 2);
  const __m256i e0_high = _mm256_slli_epi32(pair, 16); /* entry i 2^16 */
  const __m256i step =
      _mm256_sub_epi32(_mm256_srai_epi32(pair, 16), _mm256_srai_epi32(e0_high, 16));
  const __m256i pr = _mm256_add_epi32(e0_high, _mm256_mullo_epi32(step, frac));
  __m256i y = _mm256_srai_epi32(
      _mm256_add_epi32(_mm256_add_epi32(pr, _mm256_set1_epi32(1 << 15)), _mm256_srai_epi32(pr, 31)),
      16);
  const int miss = ~_mm256_movemask_ps(_mm256_castsi256_ps(hit)) & 0xFF;
  if (miss) {
    int32_t tv[8], yv[8];
    _mm256_storeu_si256((__m256i*)(void*)tv, t);
    _mm256_storeu_si256((__m256i*)(void*)yv, y);
    for (int i = 0; i < 8; ++i)
      if (miss >> i & 1) yv[i] = (int32_t)lut_int8_eval(L->l, tv[i]);
    y = _mm256_loadu_si256((const __m256i*)(const void*)yv);
  }
  return y;
}

/* The codes of 8 values of channels [ch, ch + 8) (last INT64_MAX: all of them there; else
 * lanes past channel `last` take last's: a padded tail), sign-extended in int32 lanes. One
 * vector a step: the fully connected kernels convert 8 channels a call (g2_gemv_item), which
 * steps of 32 padded fourfold. */
static inline __attribute__((always_inline)) __m256i channels_lut8(const sdp_i8* p, gen4* g,
                                                                   const lut8* L,
                                                                   const int32_t* v,
                                                                   const int8_t* operand,
                                                                   int64_t ch, int64_t last,
                                                                   int ew, int out_cvt) {
  const __m256i x = _mm256_loadu_si256((const __m256i*)(const void*)v);
  __m256i o = _mm256_setzero_si256();
  if (ew != ACCEL_EW_NONE)
    o = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(const void*)operand));
  if (last == INT64_MAX) gen4_lanes(p, ch, g);
  else gen4_lanes_to(p, ch, last, g);
  const __m256i a = gen4_t(g, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(x)),
                           _mm256_cvtepi32_epi64(_mm256_castsi256_si128(o)), ew);
  if (last == INT64_MAX) gen4_lanes(p, ch + 4, g);
  else gen4_lanes_to(p, ch + 4, last, g);
  const __m256i b = gen4_t(g, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(x, 1)),
                           _mm256_cvtepi32_epi64(_mm256_extracti128_si256(o, 1)), ew);
  const __m256i u = lut8_y(L, gen4_join(a, b));
  return gen4_join(
      gen4_out(g, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(u)), ACCEL_ACT_NONE, out_cvt),
      gen4_out(g, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(u, 1)), ACCEL_ACT_NONE, out_cvt));
}

/* 8 codes (int32 lanes in [-128, 127]) as bytes into y */
static inline void store_codes8(int8_t* y, __m256i q) {
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
  _mm_storel_epi64((__m128i*)(void*)y, _mm_packs_epi16(w, w));
}

static inline __attribute__((always_inline)) void channels_lut_body(const sdp_i8* p,
                                                                    const int32_t* v,
                                                                    const int8_t* operand,
                                                                    int8_t* y, int64_t count,
                                                                    int64_t first, int ew,
                                                                    int out_cvt) {
  gen4 g;
  gen4_call(p, &g);
  lut8 L;
  lut8_of(p->lut, &L);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8)
    store_codes8(y + i, channels_lut8(p, &g, &L, v + i, ew != ACCEL_EW_NONE ? operand + i : NULL,
                                      first + i, INT64_MAX, ew, out_cvt));
  if (i < count) { /* through a padded copy, the lanes past the last channel given its own */
    int32_t tv[8] = {0};
    int8_t to[8] = {0}, ty[8];
    const int64_t n = count - i;
    memcpy(tv, v + i, (size_t)n * sizeof(int32_t));
    if (ew != ACCEL_EW_NONE) memcpy(to, operand + i, (size_t)n);
    store_codes8(ty, channels_lut8(p, &g, &L, tv, to, first + i, first + count - 1, ew, out_cvt));
    memcpy(y + i, ty, (size_t)n);
  }
}

static void channels_lut(const sdp_i8* p, int32_t first, const int32_t* v, const int8_t* operand,
                         int8_t* y, int64_t count) {
  const int out_cvt = p->out_mul != 0;
  switch (p->ew_op) {
    case ACCEL_EW_ADD: channels_lut_body(p, v, operand, y, count, first, ACCEL_EW_ADD, out_cvt); break;
    case ACCEL_EW_MUL: channels_lut_body(p, v, operand, y, count, first, ACCEL_EW_MUL, out_cvt); break;
    case ACCEL_EW_MAX: channels_lut_body(p, v, operand, y, count, first, ACCEL_EW_MAX, out_cvt); break;
    case ACCEL_EW_MIN: channels_lut_body(p, v, operand, y, count, first, ACCEL_EW_MIN, out_cvt); break;
    default: channels_lut_body(p, v, NULL, y, count, first, ACCEL_EW_NONE, out_cvt); break;
  }
}

void sdp_i8_channels_avx2(const sdp_i8* p, int32_t first, const int32_t* v,
                          const int8_t* operand, int8_t* y, int64_t count) {
  if (p->lut != NULL) {
    channels_lut(p, first, v, operand, y, count);
    return;
  }
  if (p->act > ACCEL_ACT_PRELU) { /* a LUT activation without its table: sdp_one */
    sdp_i8_channels_scalar(p, first, v, operand, y, count);
    return;
  }
  gen4 g;
  gen4_call(p, &g);
  gen4_of(p->ew_op, 1)(p, &g, v, p->ew_op != ACCEL_EW_NONE ? operand : NULL, y, count, first);
}

/* ---- squeeze-excite's x * s on small planes --------------------------------------------------
 * An independent run's planes whose element-wise operand is one code per plane (ew_per_channel
 * MUL, act NONE / RELU / CLIP, out_mul > 0: the compiler's x * s), in int32 lanes where the
 * plane's bounds allow, else its values through sdp_i8_span (gen4). With v = x - in_zero (x the
 * input code, so v takes 256 values at most) and e the plane's element-wise value (sdp_one's
 * expression, once per plane), sdp_one's steps are, for the channel's bias, mul, shift and pre
 * (BS's power) and the run's out_mul M and out_shift S:
 *   P = (v + bias) mul 2^pre, t1 = rhaz(P, shift + pre), t2 = t1 e (RELU: max(t2, 0)),
 *   y = rhaz(t2 M, S) + out_zero, saturated to int8 (then CLIP's bounds)
 * exactly, when no step saturates: |v + bias| 2^pre <= INT32_MAX (BS), |P| + 2^(shift+pre-1) <
 * 2^31 (P and its rounding in int32 lanes), |t1 e| <= INT32_MAX (the element-wise sat32) and
 * (|t2| M + 2^(S-1)) >> S < 2^30 (y in int32). P is linear in v and every later step monotonic
 * in its input, so the plane's largest magnitudes are at v's two ends, where they are checked.
 * rhaz(P, s) for P of either sign is (P + 2^(s-1) - (P < 0)) >> s (s >= 1; P itself for s = 0);
 * rhaz(t2 M, S) takes |t2| M in 64-bit lanes (vpmuludq on the even and odd dwords), adds half,
 * shifts logically and puts t2's sign back (vpsignd). The general steps in 4 int64 lanes
 * (gen4), after the codes were widened and the operand copied per value, took ~3x longer. */
typedef struct se_plane {
  int32_t bias, mul, shift, neg, half, e; /* bias: less in_zero; mul: times 2^pre */
} se_plane;

/* The plane's constants, 1 where the bounds above hold for it. */
static int se_plane_of(const sdp_i8* p, int32_t ch, int8_t operand, se_plane* k) {
  const chan_params c = channel_params(p, ch);
  const int64_t pre = bs_pre(c.pre), s = c.shift + c.pre;
  const int64_t x0 = -128 - (int64_t)p->in_zero + c.bias, x1 = 127 - (int64_t)p->in_zero + c.bias;
  const int64_t ax = x0 < 0 ? (-x0 > x1 ? -x0 : x1) : x1; /* the largest |v + bias| */
  if (pre >= 31 || s > 30 || (ax << pre) > INT32_MAX) return 0;
  const int64_t m = c.mul * ((int64_t)1 << pre);
  const int64_t half = s > 0 ? (int64_t)1 << (s - 1) : 0;
  if (ax * (m < 0 ? -m : m) + half >= ((int64_t)1 << 31)) return 0;
  const int64_t t0 = rhaz(x0 * m, s), t1 = rhaz(x1 * m, s);
  const int64_t at = (t0 < 0 ? -t0 : t0) > (t1 < 0 ? -t1 : t1) ? (t0 < 0 ? -t0 : t0)
                                                                : (t1 < 0 ? -t1 : t1);
  const int64_t e = sat32(rhaz(((int64_t)operand - p->ew_zero) * p->ew_mul, p->ew_shift));
  const int64_t t2 = at * (e < 0 ? -e : e);
  if (t2 > INT32_MAX) return 0;
  const int64_t oh = p->out_shift > 0 ? (int64_t)1 << (p->out_shift - 1) : 0;
  if ((t2 * p->out_mul + oh) >> p->out_shift >= ((int64_t)1 << 30)) return 0;
  k->bias = (int32_t)(c.bias - p->in_zero);
  k->mul = (int32_t)m;
  k->shift = (int32_t)s;
  k->neg = s > 0 ? -1 : 0;
  k->half = (int32_t)half;
  k->e = (int32_t)e;
  return 1;
}

/* 8 codes' y (int32 lanes, before the int8 saturation) of the plane k (act: RELU or not; the
 * run's M, its half and S in `om`, `oh`, `os`) */
static inline __attribute__((always_inline)) __m256i se_lanes(const se_plane* k, __m256i x,
                                                              int relu, __m256i om, __m256i oh,
                                                              __m128i os, __m256i oz) {
  const __m256i pr = _mm256_mullo_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(k->bias)),
                                        _mm256_set1_epi32(k->mul));
  const __m256i r = _mm256_add_epi32(
      _mm256_add_epi32(pr, _mm256_set1_epi32(k->half)),
      _mm256_and_si256(_mm256_srai_epi32(pr, 31), _mm256_set1_epi32(k->neg)));
  __m256i t = _mm256_mullo_epi32(_mm256_sra_epi32(r, _mm_cvtsi32_si128(k->shift)),
                                 _mm256_set1_epi32(k->e));
  if (relu) t = _mm256_max_epi32(t, _mm256_setzero_si256());
  const __m256i a = _mm256_abs_epi32(t);
  const __m256i ye = _mm256_srl_epi64(_mm256_add_epi64(_mm256_mul_epu32(a, om), oh), os);
  const __m256i yo =
      _mm256_srl_epi64(_mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), om), oh), os);
  const __m256i y = _mm256_blend_epi32(ye, _mm256_slli_epi64(yo, 32), 0xAA);
  return _mm256_add_epi32(_mm256_sign_epi32(y, t), oz);
}

/* One plane's hw codes x (channel ch, operand code o) into y, the plane's bounds checked
 * (se_plane_of), else its values through sdp_i8_span_avx2. */
static inline __attribute__((always_inline)) void se_plane_run(const sdp_i8* p, int32_t ch,
                                                               int8_t o, const int8_t* x,
                                                               int8_t* y, int64_t hw,
                                                               int relu) {
  se_plane k;
  if (!se_plane_of(p, ch, o, &k)) { /* the general steps */
    for (int64_t i = 0; i < hw; i += 256) {
      int32_t v[256];
      int8_t op[256];
      const int64_t n = hw - i < 256 ? hw - i : 256;
      for (int64_t j = 0; j < n; ++j) v[j] = (int32_t)x[i + j] - p->in_zero;
      memset(op, o, (size_t)n);
      sdp_i8_span_avx2(p, ch, v, op, y + i, n);
    }
    return;
  }
  const __m256i om = _mm256_set1_epi64x(p->out_mul);
  const __m256i oh = _mm256_set1_epi64x(p->out_shift > 0 ? (int64_t)1 << (p->out_shift - 1) : 0);
  const __m128i os = _mm_cvtsi32_si128(p->out_shift);
  const __m256i oz = _mm256_set1_epi32(p->out_zero);
  const __m256i lo = _mm256_set1_epi8((char)(p->act == ACCEL_ACT_CLIP ? p->clip_lo : -128));
  const __m256i hi = _mm256_set1_epi8((char)(p->act == ACCEL_ACT_CLIP ? p->clip_hi : 127));
  /* a tail of a plane of 32 codes or more: its last 32 again (the values in both steps get
   * the same codes), unless the output overwrote them (a run in place); else a copy */
  const int again = hw >= 32 && (x + hw <= y || y + hw <= x);
  for (int64_t i = 0; i < hw; i += 32) {
    int8_t tx[32] = {0}, ty[32];
    if (hw - i < 32 && again) i = hw - 32;
    const int whole = hw - i >= 32;
    if (!whole) memcpy(tx, x + i, (size_t)(hw - i));
    const __m256i b = _mm256_loadu_si256((const __m256i*)(const void*)(whole ? x + i : tx));
    const __m128i b0 = _mm256_castsi256_si128(b), b1 = _mm256_extracti128_si256(b, 1);
    const __m256i q = sdp_i8_codes32(
        se_lanes(&k, _mm256_cvtepi8_epi32(b0), relu, om, oh, os, oz),
        se_lanes(&k, _mm256_cvtepi8_epi32(_mm_srli_si128(b0, 8)), relu, om, oh, os, oz),
        se_lanes(&k, _mm256_cvtepi8_epi32(b1), relu, om, oh, os, oz),
        se_lanes(&k, _mm256_cvtepi8_epi32(_mm_srli_si128(b1, 8)), relu, om, oh, os, oz));
    const __m256i codes = _mm256_min_epi8(_mm256_max_epi8(q, lo), hi);
    if (whole) {
      _mm256_storeu_si256((__m256i*)(void*)(y + i), codes);
    } else {
      _mm256_storeu_si256((__m256i*)(void*)ty, codes);
      memcpy(y + i, ty, (size_t)(hw - i));
    }
  }
}

static int se_applies(const sdp_i8* p) {
  return p->ew_per_channel && p->lut == NULL && p->ew_operand != NULL &&
         p->ew_op == ACCEL_EW_MUL && p->out_mul > 0 && p->out_shift <= 62 &&
         (p->act == ACCEL_ACT_NONE || p->act == ACCEL_ACT_RELU || p->act == ACCEL_ACT_CLIP);
}

int sdp_i8_planes_avx2(const sdp_i8* p, int32_t c, int64_t hw, const int8_t* in, int8_t* out,
                       int64_t p0, int64_t p1) {
  if (!se_applies(p)) return 0;
  for (int64_t plane = p0; plane < p1; ++plane) {
    if (p->act == ACCEL_ACT_RELU)
      se_plane_run(p, (int32_t)(plane % c), p->ew_operand[plane], in + plane * hw,
                   out + plane * hw, hw, 1);
    else
      se_plane_run(p, (int32_t)(plane % c), p->ew_operand[plane], in + plane * hw,
                   out + plane * hw, hw, 0);
  }
  return 1;
}

int sdp_i8_plane_codes_avx2(const sdp_i8* p, int32_t ch, int8_t operand, const int8_t* x,
                            int8_t* y, int64_t count) {
  if (!se_applies(p)) return 0;
  if (p->act == ACCEL_ACT_RELU) se_plane_run(p, ch, operand, x, y, count, 1);
  else se_plane_run(p, ch, operand, x, y, count, 0);
  return 1;
}

/* ---- dispatch ------------------------------------------------------------------------------ */

/* The lane forms (sdp_i8_lanes.h) of channel ch for values |v| <= vmax (int32 values v, or with
 * x an independent run's codes, v = x - in_zero), without a LUT: 1 where they converted the
 * span, 0 where the caller must. vmax 2^31: any int32 value (forms 0, 1, 7
 * and the add's form 1); an independent run's v = code - in_zero (|v| <= 255) also takes the
 * forms without a clamp and the conv forms, and the add's forms for shifts of 16 or less, which
 * no add with any int32 value has (its product leaves int32): those ran gen4's int64 steps. */
static int span_lanes(const sdp_i8* p, int32_t ch, int64_t vmax, const int32_t* v,
                      const int8_t* x, const int8_t* operand, int8_t* y, int64_t count) {
  if (p->lut != NULL ||
      !(p->act == ACCEL_ACT_NONE || p->act == ACCEL_ACT_RELU || p->act == ACCEL_ACT_CLIP))
    return 0;
  sdp_i8_lane_cvt e;
  sdp_i8_lane_add a;
  int8_t lo, hi;
  if (p->ew_op == ACCEL_EW_NONE && sdp_i8_lanes_prepare(p, ch, 1, vmax, &e, &lo, &hi)) {
    if (x != NULL) lanes8_run_codes(&e, NULL, sdp_i8_lane_form(&e), lo, hi, x, p->in_zero, NULL, y, count);
    else sdp_i8_lanes8_run(&e, NULL, sdp_i8_lane_form(&e), lo, hi, v, NULL, y, count);
    return 1;
  }
  if (p->ew_op == ACCEL_EW_ADD && sdp_i8_lanes_prepare_add(p, ch, 1, vmax, &e, &a, &lo, &hi)) {
    /* the add's form of one row, as rows_form's (conv/i8.h): 3 / 4 without the clamp for
     * shifts <= 16 / >= 17, else 1 */
    const int form = !e.exact ? 1 : e.shift == 0 && e.add == 0 ? 3 : 4;
    if (x != NULL) lanes8_run_codes(&e, &a, form, lo, hi, x, p->in_zero, operand, y, count);
    else sdp_i8_lanes8_run(&e, &a, form, lo, hi, v, operand, y, count);
    return 1;
  }
  return 0;
}

int sdp_i8_codes_avx2(const sdp_i8* p, int32_t ch, const int8_t* x, const int8_t* operand,
                      int8_t* y, int64_t count) {
  return span_lanes(p, ch, 255, NULL, x, operand, y, count);
}

void sdp_i8_span_avx2(const sdp_i8* p, int32_t ch, const int32_t* v, const int8_t* operand,
                      int8_t* y, int64_t count) {
  const chan_params c = channel_params(p, ch);
  if (p->lut != NULL) {
    /* the plan's codes in lanes, set up per call (sdp_i8_lanes_prepare_lut's constants cost two
     * divisions and a dozen evaluations of t per channel: the conv kernels keep them per call) */
    sdp_i8_lane_cvt e;
    sdp_i8_lane_lut L;
    if (span_lut_prepare(p, &c, &e, &L)) {
      sdp_i8_lanes8_run_lut(&e, &L, v, y, count);
      return;
    }
  } else if (span_lanes(p, ch, (int64_t)1 << 31, v, NULL, operand, y, count)) {
    return;
  }
  if (p->lut != NULL || p->act > ACCEL_ACT_PRELU) { /* a LUT without its plan: sdp_one */
    sdp_i8_span_scalar(p, ch, v, operand, y, count);
    return;
  }
  gen4 g;
  gen4_call(p, &g);
  gen4_channel(&c, &g);
  gen4_of(p->ew_op, 0)(p, &g, v, p->ew_op != ACCEL_EW_NONE ? operand : NULL, y, count, ch);
}

#endif
