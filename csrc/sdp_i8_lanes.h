/* sdp_i8_lanes.h - the common INT8 converter on int32 lanes in registers (AVX-512 builds).
 *
 * The conv kernels convert their accumulators where they finish them, without storing the
 * int32 values and reloading them in sdp_i8_span (that store and reload, and the per-call set-up
 * of a converter, were most of MobileNetV2's epilogue: docs/whole_network_time.md). It covers
 * the converter a conv's epilogue has most (no element-wise operand, out_mul 0, act NONE /
 * RELU / CLIP, no LUT) where sdp_i8.c's int32-lane identities hold for the channel (fast32_plan
 * there); the codes are sdp_i8_span's exactly. One form serves every such channel (sdp_i8.c
 * states the identities):
 *   t = min(max(v, vlo), vhi) + bias                  (sat32(v + bias), clamped to +-T)
 *   q = ((t >> k) * mul + add + (((t & low) * mul + (neg & (t >> 31))) >> k)) >> shift
 * k = 16 (the split product, shift = s - 16) or k = 0, low = 0 (the direct product, shift = s;
 * neg = 0 when s = 0, where no rounding happens), out_zero folded into add; the code is
 * min(max(sat8(q), lo), hi). The split form needs no clamp to +-T at all while |add| < 2^29:
 * (t >> 16) * mul and (t & 0xFFFF) * mul fit for any int32 t (mul < 2^15), q is then
 * rhaz(t * mul, s) + out_zero itself, and sat8(sat32(x) + out_zero) = sat8(x + out_zero); so a
 * conv's converter (shifts 17..40) takes it with t = sat32(v + bias) and no plan, and without
 * even that clamp ("exact") when v + bias cannot leave int32 (|v| bounded by the caller).
 */
#ifndef ACCEL_SDP_I8_LANES_H
#define ACCEL_SDP_I8_LANES_H

#include <stdint.h>

#include "kernels.h"

/* One channel's constants. exact: the split form (k = 16) where |v| <= the caller's bound
 * keeps v + bias inside int32 and every step of the split product inside int32 without the
 * clamp (then the clamp may be skipped: the same codes, two operations fewer). */
typedef struct sdp_i8_lane_cvt {
  int32_t vlo, vhi, bias, mul, add, low, neg, k, shift, exact;
} sdp_i8_lane_cvt;

/* The constants of channels [first, first + count) into cvt[0..count), and the codes' bounds
 * (*lo, *hi), for values |v| <= vmax (a conv's accumulators: depth * 255 * 128); 1 when every
 * one of them has the lane form, else 0 (then the caller converts through sdp_i8_span). */
int sdp_i8_lanes_prepare(const sdp_i8* p, int32_t first, int32_t count, int64_t vmax,
                         sdp_i8_lane_cvt* cvt, int8_t* lo, int8_t* hi);

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>

/* q of 16 accumulators of one channel (before the int8 saturation); split: the caller knows
 * that c->k is 16 (the common case: a conv's shifts of 24-25), and the form's constants become
 * immediates; split 2: and c->exact, no clamp. */
static inline __attribute__((always_inline)) __m512i sdp_i8_lanes_form(const sdp_i8_lane_cvt* c,
                                                                       __m512i v, int split) {
  const __m512i t =
      split == 2 ? _mm512_add_epi32(v, _mm512_set1_epi32(c->bias))
                 : _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(v, _mm512_set1_epi32(c->vlo)),
                                                     _mm512_set1_epi32(c->vhi)),
                                    _mm512_set1_epi32(c->bias));
  const __m512i m = _mm512_set1_epi32(c->mul), sh = _mm512_set1_epi32(c->shift);
  if (split) {
    const __m512i hp = _mm512_mullo_epi32(_mm512_srai_epi32(t, 16), m);
    const __m512i lp = _mm512_add_epi32(
        _mm512_mullo_epi32(_mm512_and_si512(t, _mm512_set1_epi32(0xFFFF)), m),
        _mm512_srai_epi32(t, 31));
    const __m512i q = _mm512_add_epi32(_mm512_add_epi32(hp, _mm512_set1_epi32(c->add)),
                                       _mm512_srai_epi32(lp, 16));
    return _mm512_srav_epi32(q, sh);
  }
  const __m512i k = _mm512_set1_epi32(c->k);
  const __m512i hp = _mm512_mullo_epi32(_mm512_srav_epi32(t, k), m);
  const __m512i lp = _mm512_add_epi32(
      _mm512_mullo_epi32(_mm512_and_si512(t, _mm512_set1_epi32(c->low)), m),
      _mm512_and_si512(_mm512_srai_epi32(t, 31), _mm512_set1_epi32(c->neg)));
  const __m512i q =
      _mm512_add_epi32(_mm512_add_epi32(hp, _mm512_set1_epi32(c->add)), _mm512_srav_epi32(lp, k));
  return _mm512_srav_epi32(q, sh);
}

static inline __attribute__((always_inline)) __m512i sdp_i8_lanes(const sdp_i8_lane_cvt* c,
                                                                  __m512i v) {
  return sdp_i8_lanes_form(c, v, 0);
}

/* 64 codes of four vectors of q (values 0-15, 16-31, 32-47, 48-63), saturated to int8 in
 * order: two saturating packs (int32 -> int16 -> int8; sat8(sat16(x)) = sat8(x)) leave 128-bit
 * lane L holding values 4L..4L+3 of each vector, one vpermd puts them back in order. On Zen 4
 * this costs about a quarter of four vpmovsdb. */
static inline __m512i sdp_i8_codes64(__m512i q0, __m512i q1, __m512i q2, __m512i q3) {
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512i b = _mm512_packs_epi16(_mm512_packs_epi32(q0, q1), _mm512_packs_epi32(q2, q3));
  return _mm512_permutexvar_epi32(order, b);
}
#endif

#endif /* ACCEL_SDP_I8_LANES_H */
