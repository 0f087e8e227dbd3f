/* sdp_i8_lanes.h - the common INT8 converter on int32 lanes in registers (AVX-512: 16 lanes;
 * AVX2: 8 lanes, the section at the end).
 *
 * The conv kernels convert their accumulators where they finish them, without storing the int32
 * values and reloading them in sdp_i8_span (that store and reload, and the per-call set-up of a
 * converter, were most of MobileNetV2's epilogue: docs/whole_network_time.md). It covers the
 * converter a conv's epilogue has most (no element-wise operand, out_mul 0, act NONE / RELU / CLIP,
 * no LUT) where the int32-lane identities hold for the channel (fast32_plan, sdp_i8_internal.h);
 * the codes are sdp_i8_span's exactly. One form serves every such channel (sdp_i8_internal.h's
 * fast32 states the identities):
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
  /* conv: exact and a conv's converter (add = 2^(s-17) + out_zero 2^(s-16)): form 3 below,
   * q = out_zero +- ((|t| * mul + 2^(s-1)) >> s) with the product from vpmaddwd (|t|'s high
   * half) and vpmulhuw (its low half): no vpmulld (two uops on port 0 on Intel); conv 2: and
   * the codes' lower bound >= out_zero (RELU, ReLU6's CLIP): form 4, t < 0 taken as 0 (its
   * code is that bound either way), q = (th * mul + floor(tl * mul / 2^16) + add) >> (s - 16) */
  int32_t conv, zero;
  /* conv: mul << 16 (the high product's vpdpwssd operand), kept here so that a row's forms
   * 3-6 read it from memory (an embedded broadcast) instead of shifting mul and broadcasting
   * it from a general register: two fewer uops a row on Zen 5 (docs/kernels.md) */
  int32_t mulh;
  /* a LUT's byte form (sdp_i8_lanes_lut_q; lq 1 where the channel has it, AVX-512 builds with
   * byte tables): v clamped to [qlo, qhi], Q = v qmul + qadd modulo 2^32 holds u = t - origin
   * in its bytes 1-3, and the tables' outside thresholds as values of v: v >= qg[i] where
   * t >= origin + gt[i] */
  int32_t lq, qlo, qhi, qmul, qadd, qg[2];
} sdp_i8_lane_cvt;

/* The clamp of v, the bias and the product's constants of a channel's converter, from whichever
 * plan found them (fast32_plan, lut_t32_plan: one definition of the copy). */
static inline void sdp_i8_lane_cvt_set(sdp_i8_lane_cvt* e, int32_t vlo, int32_t vhi, int32_t bias,
                                       int32_t mul, int32_t add, int32_t shift) {
  e->vlo = vlo;
  e->vhi = vhi;
  e->bias = bias;
  e->mul = mul;
  e->add = add;
  e->shift = shift;
}

/* The constants of channels [first, first + count) into cvt[0..count), and the codes' bounds
 * (*lo, *hi), for values |v| <= vmax (a conv's accumulators: depth * 255 * 128); 1 when every
 * one of them has the lane form, else 0 (then the caller converts through sdp_i8_span). */
int sdp_i8_lanes_prepare(const sdp_i8* p, int32_t first, int32_t count, int64_t vmax,
                         sdp_i8_lane_cvt* cvt, int8_t* lo, int8_t* hi);

/* The residual add (element-wise ADD, act NONE / RELU / CLIP, no LUT) in lanes, where every
 * step stays exact inside int32 (sdp_i8_lanes_prepare_add checks the bounds in int64):
 *   t = v + bias                       (min(max(v, vlo), vhi) + bias: sat32, unless exact)
 *   u = (th * mul + add + ((tl * mul + lo_add - (t < 0)) >> k)) >> shift
 *       = rhaz(t * mul, s), t = th 2^k + tl, 0 <= tl < 2^k: k = s, lo_add = 2^(s-1) for s
 *       <= 16 (then add = shift = 0); k = 16, add = 2^(s-17), shift = s - 16 above (mul > 0).
 *       |u| stays inside int32 for the accumulators' bound: no sat32
 *   e = (x - (x < ew_nlt)) >> ew_shift,  x = o * ew_mul + ew_base
 *       = rhaz((o - ew_zero) * ew_mul, ew_shift) of the operand code o, the half in ew_base
 *       (x < half: the product is negative; ew_nlt = INT32_MIN when ew_shift is 0). |x| <
 *       2^23, so no sat32; ew_shift >= 24 gives e = 0 (ew_mul = ew_base = 0). The 16-lane
 *       form takes e as one vpmaddwd of d = o - ew_zero (int32 lanes, |d| <= 255: its low
 *       word is d, its high word -(d < 0)) by ew_mul's low word and 1 in the high one:
 *       d * ew_mul - (d < 0) = y - (y < 0) for ew_mul > 0, y the product; then e = (that +
 *       half) >> ew_shift. rhaz(y, s) = floor((y + 2^(s-1) - (y < 0)) / 2^s) for s >= 1 (y <
 *       0: -floor((-y + 2^(s-1)) / 2^s) = ceil((y - 2^(s-1)) / 2^s)); s = 0 (and ew_mul 0)
 *       takes high word 0 and half 0. Four operations for the five of the compare's form
 *       (ResNet-50's adds x0.975 on Zen 5, docs/kernels.md); ew_mul < 0 declines there.
 *   w = min(max(u + e, w_lo), w_hi)    (w_lo = 0 for RELU, which commutes with the clamp to
 *       +-T_out that keeps w * out_mul inside int32 where it could leave it: any |w| >= T_out
 *       gives a code saturated on w's side, as in add32_plan in sdp_i8_avx512.c)
 *   q = (p + out_add + (out_neg & (p >> 31))) >> out_shift,  p = w * out_mul
 *       (out_mul 0 is the identity: out_mul 1, out_shift 0; out_zero folded into out_add)
 * The codes are then min(max(sat8(q), lo), hi) with CLIP's bounds (-128 / 127 otherwise).
 * "lean" calls (RELU, out_mul 1 or 0, no clamp to T_out needed: the compiler's residual adds)
 * need neither the upper clamp nor the sign term (w >= 0): w = max(u + e, 0), q = (w +
 * out_add) >> out_shift. The channel's constants are an sdp_i8_lane_cvt's (lo_add in `neg`,
 * which this form has no other use for), the call's these: */
typedef struct sdp_i8_lane_add {
  int32_t ew_mul, ew_base, ew_nlt, ew_shift;
  /* the 16-lane form's e (sdp_i8_lanes_add): ew_mul in the low word of ew_mulw, 1 in its high
   * word when ew_shift > 0 (ew_mul > 0 there: sdp_i8_lanes_prepare_add) */
  int32_t ew_zero, ew_mulw, ew_half;
  int32_t w_lo, w_hi;
  int32_t out_mul, out_add, out_neg, out_shift;
  int lean;
} sdp_i8_lane_add;

/* sdp_i8_lanes_prepare for the residual add: the channels' converters and the call's
 * constants, for values |v| <= vmax; 1 when the lane form applies to every channel, else 0. */
int sdp_i8_lanes_prepare_add(const sdp_i8* p, int32_t first, int32_t count, int64_t vmax,
                             sdp_i8_lane_cvt* cvt, sdp_i8_lane_add* add, int8_t* lo, int8_t* hi);

/* A LUT activation in lanes (sdp_i8_lanes.c's constants): the layer's plan of codes by bins of the table's
 * input t (sdp_i8_lut_plan, sdp_i8_internal.h): t clamped to [t_lo, t_hi], one gather of its
 * bin's word, the code below or above the bin's threshold. Only plans with one change at most
 * per bin (multi 0: the compiler's tables) take it, so no lane needs the table's arithmetic.
 * t = sat32(rhaz(bs_out(v + bias, pre) * mul, s + pre)) is monotonic in v (mul > 0), and the
 * plan's code is constant beyond [t_lo, t_hi]: so v is clamped to [vlo, vhi], the values of v
 * + bias where t reaches t_lo and t_hi (sdp_i8_lanes_prepare_lut finds them), which keeps t
 * inside +-2^30 and BS unsaturated, where t = rhaz((v + bias) * mul, s) is, in int32 lanes
 * with n = (v + bias < 0) and v + bias = th 2^16 + tl (0 <= tl < 2^16):
 *   k = 16 (s >= 17): (th mul + 2^(s-17) + ((tl mul - n) >> 16)) >> (s - 16)  (fast32's split)
 *   k = 0 (s <= 16): (th mul << (16 - s)) + ((tl mul + 2^(s-1) - n) >> s)  (n = 0, no 2^(s-1)
 *   for s = 0), the left term modulo 2^32, the sum exact as t is inside int32.
 * The channel's sdp_i8_lane_cvt holds vlo, vhi, bias, mul, add (2^(s-17) / 2^(s-1) / 0), neg
 * (-1, or 0 for s = 0), k, shift (s - 16 / s) and in `low` the left shift 16 - s (k = 0).
 * exact = 1 marks the direct form instead, where x = v + bias (clamped as above) times mul stays
 * inside int32 with the plan's base folded in: u = t - base = (x mul + add + (x >> 31)) >> shift,
 * add = 2^(shift-1) - base 2^shift, rhaz's (x < 0) from x's sign as mul > 0 (s = 0 runs as
 * shift 1 with mul doubled: rhaz(p, 0) = p = (2p + 1 - (p < 0)) >> 1); u is clamped to [t_lo -
 * base, t_hi - base], the same clamp as t's (the 16-lane form; the AVX2 build's 8-lane form
 * needs no clamp: sdp_i8_lanes8_lut_u).
 * AVX-512 builds have three more forms (sdp_i8_lanes.c's lanes_lut_channels picks them;
 * the compiler's tables, shifts 4-12, took the split ones above with two vpmulld before):
 * exact = 2, the folded form: u = ((v mul + add) >> shift, logical) - low, v clamped to
 * [vlo, vhi] (the clamp above, narrowed to the caller's bound |v| <= vmax): q = v mul + add =
 * x mul + 2^(s-1) - o 2^s modulo 2^32 (the bias folded into add) with o the floor form's t at
 * the lowest x, so q's true value lies in [0, 2^32) (checked: twice int32's range, the
 * direct form's limit) and the wrapped sum is it; low = base - o. That is floor((x mul +
 * 2^(s-1)) / 2^s) - base: t, or t + 1 at a tie x mul = (2c - 1) 2^(s-1) with x < 0;
 * sdp_i8_lanes.c's lut_ties_clear takes the form only where no such tie over the x lands on
 * a change of the plan's code (at c; elsewhere t and t + 1 have one code). Five operations
 * per 16 values. exact = 3: the same without the clamp of v, where the bound alone keeps x
 * inside [vlo, vhi] + bias. exact = 4, the 16-bit split form, for 1 <= s <= 16 where the
 * bound keeps u inside int32 (no clamp): v mul + K = (A + a) 2^16 + (B + b) with A =
 * floor(v mul / 2^16) = vh mul + floor(vl mul / 2^16) (vpdpwssd of v's signed high word by
 * mulh, accumulating a = floor(K / 2^16) in add, plus vpmulhuw of its low word), B = (vl mul)
 * mod 2^16 (vpmullw; mul's high word is 0) and b = K mod 2^16 in low, K = bias mul + 2^(s-1)
 * - base 2^s: u = ((A + a) << (16 - s)) + ((B + b) >> s), exact modulo 2^32 as (A + a) 2^16
 * is a multiple of 2^s, and u inside int32 (checked at the bound's ends); no sign term (the
 * same tie check). Seven operations per 16 values, where the split form took fifteen. */
/* The plan's codes as byte tables (sdp_i8_lut.c builds them where VBMI is there: 64 codes with
 * byte permutes instead of four gathers of bin words, which Zen 4 runs at ~20 cycles each).
 * With u = t - origin (t inside the plan's clamp), w = min(max(u, 0), u_hi), u_hi = 2^(e+8) - 1
 * (e <= 16), and w' = w 2^up (up = 16 - e): byte 2 of w' is w's interval j (2^e values of t,
 * 256 of them), bytes 0-1 its offset o in the interval (times 2^up), and the code is
 *   B[j] + sum_k D_k[j] [o >= T_k[j]] + sum_i gd_i [u >= gt_i]   (modulo 256)
 * B[j] the code at the interval's start, T_k / D_k the interval's code changes (at most m;
 * an unused one T 0, D 0), gt / gd the changes outside the 256 intervals (at most
 * SDP_I8_LUT_BYTES_G: the compiler's tables change a code a few times just outside 256 2^16
 * values of t; one below the origin has gt < 0 and its change taken out of B). Each table is
 * 256 bytes: two register pairs of vpermi2b and a blend on j's top bit. The plan's builder
 * checks the codes against its bins at every change and interval start, where alone either
 * form's code can change. */
enum { SDP_I8_LUT_BYTES_M = 4, SDP_I8_LUT_BYTES_G = 6 };
typedef struct sdp_i8_lut_bytes {
  int32_t origin, u_hi, up, m, g;
  int32_t gt[SDP_I8_LUT_BYTES_G];
  uint8_t gd[SDP_I8_LUT_BYTES_G];
  /* dc[k] != 0: every entry of D_k is dc[k] (a slot whose changes have one size; its unused
   * entries T 0, always passed, their dc[k] taken out of B), so no lookup of D_k */
  uint8_t dc[SDP_I8_LUT_BYTES_M];
  /* Two more shortcuts a kernel may take (or not: the tables below hold them too), each saving
   * byte permutes, which Intel cores run at one 256-entry lookup per four shuffle-port cycles
   * (two uops each vpermi2b):
   * region D (shape bit 4 + k): D_k[j] = j >= jr[k] ? dhi[k] : dlo[k] for every j (a slot
   * whose changes are dlo below interval jr and dhi from it: SiLU's and hardswish's first slot,
   * -1 then +1 about their minimum; its unused entries T 0 with that D, taken out of B), so D_k
   * is a compare of j and a blend instead of a lookup;
   * window (shape bit 8 + k): T_k (and D_k, unless dc or region) are 0 outside the 128
   * intervals [w0[k], w0[k] + 128), so each is one vpermi2b of j - w0[k] zeroed outside them,
   * no second permute and no blend (SiLU's second slot: five intervals of 115..181). */
  uint8_t jr[SDP_I8_LUT_BYTES_M], dlo[SDP_I8_LUT_BYTES_M], dhi[SDP_I8_LUT_BYTES_M];
  uint8_t w0[SDP_I8_LUT_BYTES_M];
  /* Two more (session 27), for Intel cores, where a vpermi2b is two uops and a vpermb one:
   * hashed (shape bit 12 + k): a slot with D by dc or region whose used entries (T != 0) are
   * at most 64 and differ in j mod 64 (SiLU's second: five intervals), so hs[k][0] / [1] hold
   * their T's low / high bytes at j mod 64 and hs[k][2] their j; T_k is then two vpermb of j
   * (which reads j's low six bits) zeroed where hs[k][2] is not j: four uops where the window
   * takes six, whatever the used entries' span;
   * borrow (shape bit 16 + k): no entry of slot k has T in [1, 255] (high byte 0, low byte
   * not), so o >= T is oh less the borrow (ol < tl), saturated, against th: the saturation
   * errs only at oh = 0 = th < tl, which such a T rules out; three compares where the
   * high-then-low compare takes four (sdp_i8_lut_bytes_core). */
  uint8_t hs[SDP_I8_LUT_BYTES_M][3][64];
  /* bit k: dc[k] != 0; bit 4 + k: region D; bit 8 + k: window; bit 12 + k: hashed; bit 16 + k:
   * borrow (sdp_i8_lut_bytes_core's S) */
  int32_t shape;
  /* [0]: B; [1 + 3k]: T_k's low byte, [2 + 3k]: its high byte, [3 + 3k]: D_k */
  uint8_t f[1 + 3 * SDP_I8_LUT_BYTES_M][256];
} sdp_i8_lut_bytes;

typedef struct sdp_i8_lane_lut {
  int32_t t_lo, t_hi, base, w;
  int32_t q; /* 1: every channel of the call has the byte form (lq), the tables B->up 0 and
              * B->g <= 2 (sdp_i8_lanes_prepare_lut) */
  const uint32_t* bins;
  const sdp_i8_lut_bytes* bytes; /* the byte tables (base: their origin), or NULL: bins */
} sdp_i8_lane_lut;

/* The channels' t converters above and the plan's constants, for values |v| <= vmax; 1 when p
 * has a LUT activation with a plan of single-change bins, no element-wise op, and every channel
 * has the form (mul > 0, s <= 40, BS unsaturated up to the clamp), else 0 (the caller converts
 * through sdp_i8_span). */
int sdp_i8_lanes_prepare_lut(const sdp_i8* p, int32_t first, int32_t count, int64_t vmax,
                             sdp_i8_lane_cvt* cvt, sdp_i8_lane_lut* lut);

/* The plan's constants in lanes (sdp_i8_lanes_prepare_lut's, and sdp_i8_avx2.c's spans'): its
 * bins, or where it has them its byte tables, whose u is t less their origin; in the AVX2 build
 * u counts from the bins' middle (sdp_i8_lanes8_lut_u). Vector builds only. */
void sdp_i8_lane_lut_of(const struct sdp_i8_lut_plan* P, sdp_i8_lane_lut* lut);

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>

/* c + th * mul for the 16 lanes of t with th = t >> 16 in [-2^15, 2^15) and 0 < mul < 2^15
 * (the high words of t times mul, the low words times 0): one vpdpwssd where VNNI is there. */
static inline __attribute__((always_inline)) __m512i sdp_i8_high_product(__m512i c, __m512i t,
                                                                         int32_t mul) {
  const __m512i m = _mm512_set1_epi32((int32_t)((uint32_t)mul << 16));
#ifdef __AVX512VNNI__
  return _mm512_dpwssd_epi32(c, t, m);
#else
  return _mm512_add_epi32(c, _mm512_madd_epi16(t, m));
#endif
}

/* The same for a conv converter (forms 3-6), its mul << 16 read from e->mulh: a broadcast
 * from memory, not a shift and a broadcast from a general register per row. */
static inline __attribute__((always_inline)) __m512i sdp_i8_high_product_h(__m512i c, __m512i t,
                                                                           const sdp_i8_lane_cvt* e) {
  const __m512i m = _mm512_set1_epi32(e->mulh);
#ifdef __AVX512VNNI__
  return _mm512_dpwssd_epi32(c, t, m);
#else
  return _mm512_add_epi32(c, _mm512_madd_epi16(t, m));
#endif
}

/* q of 16 accumulators of one channel (before the int8 saturation); split: the caller knows
 * that c->k is 16 (the common case: a conv's shifts of 24-25), and the form's constants become
 * immediates; split 2: and c->exact, no clamp; split 3: and c->conv; 4: c->conv 2; 5 / 6:
 * forms 4 / 3 with the bias already in v (t = v: the VNNI GEMMs start their accumulators at
 * the bias, conv/i8_gemm_vnni.c; exact, so v + bias stays inside int32). Form 3:
 * |t| <= vmax + |bias| <= INT32_MAX (exact), so |t| = th 2^16 + tl with th < 2^15; th * mul
 * (vpmaddwd with mul in the high word) + floor(tl * mul / 2^16) (vpmulhuw with mul in the low
 * word) + 2^(s-17), shifted by s - 16, is floor((|t| * mul + 2^(s-1)) / 2^s) (2^(s-1) is a
 * multiple of 2^16), the magnitude of rhaz(t * mul, s); the sum stays below 2^30 + 2^23 +
 * 2^15. Form 4 takes t itself, of either sign (th = t >> 16 in [-2^15, 2^15)): the same sum is
 * floor((t * mul + 2^(s-1)) / 2^s) + out_zero, which for t < 0 is at most out_zero; rhaz's code
 * there is at most out_zero too, and the codes' lower bound lo >= out_zero (RELU, ReLU6's CLIP)
 * makes both lo: so no max(t, 0) (the callers clamp every code to [lo, hi]). */
static inline __attribute__((always_inline)) __m512i sdp_i8_lanes_form(const sdp_i8_lane_cvt* c,
                                                                       __m512i v, int split) {
  if (split == 4 || split == 5) {
    const __m512i t = split == 4 ? _mm512_add_epi32(v, _mm512_set1_epi32(c->bias)) : v;
    const __m512i hp = sdp_i8_high_product_h(_mm512_set1_epi32(c->add), t, c);
    const __m512i lp = _mm512_mulhi_epu16(t, _mm512_set1_epi32(c->mul));
    return _mm512_srav_epi32(_mm512_add_epi32(hp, lp), _mm512_set1_epi32(c->shift));
  }
  if (split == 3 || split == 6) {
    const __m512i t = split == 3 ? _mm512_add_epi32(v, _mm512_set1_epi32(c->bias)) : v;
    const __m512i a = _mm512_abs_epi32(t);
    const __m512i hp = sdp_i8_high_product_h(_mm512_set1_epi32(1 << (c->shift - 1)), a, c);
    const __m512i lp = _mm512_mulhi_epu16(a, _mm512_set1_epi32(c->mul));
    const __m512i r = _mm512_srav_epi32(_mm512_add_epi32(hp, lp), _mm512_set1_epi32(c->shift));
    const __m512i z = _mm512_set1_epi32(c->zero);
    return _mm512_mask_sub_epi32(_mm512_add_epi32(z, r),
                                 _mm512_cmplt_epi32_mask(t, _mm512_setzero_si512()), z, r);
  }
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

/* q of 16 values v of channel c with their operand codes o (int32 lanes), the residual add
 * a. form: 1 any channel, 2 c->exact (no sat32 clamp), 3 exact and s <= 16 (no add, shift),
 * 4 exact and s >= 17: u = rhaz(t * mul, s) as the conv's form 3 computes it (|t|'s halves by
 * vpmaddwd and vpmulhuw, then t's sign), without vpmulld; lean: a->lean. The operand's
 * product o * ew_mul by vpmaddwd (o's high word 0 or -1 times 0; ew_mul is int16: accel.h). */
static inline __attribute__((always_inline)) __m512i sdp_i8_lanes_add(const sdp_i8_lane_add* a,
                                                                      const sdp_i8_lane_cvt* c,
                                                                      __m512i v, __m512i o,
                                                                      int form, int lean) {
  if (form < 2)
    v = _mm512_min_epi32(_mm512_max_epi32(v, _mm512_set1_epi32(c->vlo)),
                         _mm512_set1_epi32(c->vhi));
  const __m512i t = _mm512_add_epi32(v, _mm512_set1_epi32(c->bias));
  __m512i u;
  if (form == 4) {
    const __m512i at = _mm512_abs_epi32(t);
    const __m512i hp = sdp_i8_high_product_h(_mm512_set1_epi32(c->add), at, c);
    const __m512i lp = _mm512_mulhi_epu16(at, _mm512_set1_epi32(c->mul));
    const __m512i r = _mm512_srav_epi32(_mm512_add_epi32(hp, lp), _mm512_set1_epi32(c->shift));
    u = _mm512_mask_sub_epi32(r, _mm512_cmplt_epi32_mask(t, _mm512_setzero_si512()),
                              _mm512_setzero_si512(), r);
  } else {
    const __m512i m = _mm512_set1_epi32(c->mul), k = _mm512_set1_epi32(c->k);
    const __m512i lp = _mm512_add_epi32(
        _mm512_add_epi32(_mm512_mullo_epi32(_mm512_and_si512(t, _mm512_set1_epi32(c->low)), m),
                         _mm512_set1_epi32(c->neg)),
        _mm512_srai_epi32(t, 31));
    u = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_srav_epi32(t, k), m),
                         _mm512_srav_epi32(lp, k));
    if (form < 3)
      u = _mm512_srav_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(c->add)),
                            _mm512_set1_epi32(c->shift));
  }
  const __m512i e = _mm512_srav_epi32(
      _mm512_add_epi32(_mm512_madd_epi16(_mm512_sub_epi32(o, _mm512_set1_epi32(a->ew_zero)),
                                         _mm512_set1_epi32(a->ew_mulw)),
                       _mm512_set1_epi32(a->ew_half)),
      _mm512_set1_epi32(a->ew_shift));
  if (lean) {
    const __m512i w = _mm512_max_epi32(_mm512_add_epi32(u, e), _mm512_setzero_si512());
    return _mm512_srav_epi32(_mm512_add_epi32(w, _mm512_set1_epi32(a->out_add)),
                             _mm512_set1_epi32(a->out_shift));
  }
  const __m512i w = _mm512_min_epi32(
      _mm512_max_epi32(_mm512_add_epi32(u, e), _mm512_set1_epi32(a->w_lo)),
      _mm512_set1_epi32(a->w_hi));
  const __m512i pr = _mm512_mullo_epi32(w, _mm512_set1_epi32(a->out_mul));
  const __m512i q = _mm512_add_epi32(
      _mm512_add_epi32(pr, _mm512_set1_epi32(a->out_add)),
      _mm512_and_si512(_mm512_srai_epi32(pr, 31), _mm512_set1_epi32(a->out_neg)));
  return _mm512_srav_epi32(q, _mm512_set1_epi32(a->out_shift));
}

/* The codes (each int32 lane's low byte) of 16 offsets u = t - base in [0, t_hi - base] through
 * the plan's bins: one gather of the bin's word, the code below or above its threshold. */
static inline __attribute__((always_inline)) __m512i sdp_i8_lanes_lut_bins(const sdp_i8_lane_lut* L,
                                                                           __m512i u) {
  const __m512i g = _mm512_i32gather_epi32(_mm512_srl_epi32(u, _mm_cvtsi32_si128(L->w)),
                                           (const void*)L->bins, 4);
  const __m512i low = _mm512_set1_epi32((1 << L->w) - 1);
  const __mmask16 above = _mm512_cmpge_epi32_mask(_mm512_and_si512(u, low),
                                                  _mm512_and_si512(g, _mm512_set1_epi32(0xFFFF)));
  return _mm512_srlv_epi32(g, _mm512_mask_blend_epi32(above, _mm512_set1_epi32(16),
                                                      _mm512_set1_epi32(24)));
}

/* Whether sdp_i8_lanes_lut_u may leave u unclamped: where L has byte tables. Their code is
 * constant below u = t_lo - origin (<= 0: w clamps to 0 there and every threshold gt is above
 * it) and above t_hi - origin (the tables hold the plan's clamped codes up to u_hi, and no
 * change lies beyond t_hi), so sdp_i8_lut_bytes64's own clamp of w suffices; u stays inside
 * int32 as the channel's clamp of v keeps t within 2^15 of the plan's ends, whose span is at
 * most 2^27 (4096 bins of at most 2^15). The bins' gather needs the clamp. */
static inline __attribute__((always_inline)) int sdp_i8_lut_bytes_unclamped(
    const sdp_i8_lane_lut* L) {
  return L->bytes != NULL;
}

/* u = t - base, t clamped to [t_lo, t_hi], of 16 accumulators v of channel c (the LUT plan
 * L's input converter, sdp_i8_lane_lut). */
static inline __attribute__((always_inline)) __m512i sdp_i8_lanes_lut_u(const sdp_i8_lane_cvt* c,
                                                                        const sdp_i8_lane_lut* L,
                                                                        __m512i v) {
  const __m512i m = _mm512_set1_epi32(c->mul);
  if (c->exact == 4) { /* the 16-bit split form: v mul + K = (A + a) 2^16 + (B + b) */
    const __m512i a = _mm512_add_epi32(sdp_i8_high_product_h(_mm512_set1_epi32(c->add), v, c),
                                       _mm512_mulhi_epu16(v, m));
    const __m512i b = _mm512_srl_epi32(_mm512_add_epi32(_mm512_mullo_epi16(v, m),
                                                        _mm512_set1_epi32(c->low)),
                                       _mm_cvtsi32_si128(c->shift));
    const __m512i u = _mm512_add_epi32(_mm512_sll_epi32(a, _mm_cvtsi32_si128(16 - c->shift)), b);
    if (sdp_i8_lut_bytes_unclamped(L)) return u;
    return _mm512_min_epi32(_mm512_max_epi32(u, _mm512_set1_epi32(L->t_lo - L->base)),
                            _mm512_set1_epi32(L->t_hi - L->base));
  }
  if (c->exact >= 2) { /* the folded form: u = t - base = ((v m + add) >> shift) - low */
    const __m512i vc = c->exact == 3 ? v
                                     : _mm512_min_epi32(_mm512_max_epi32(v, _mm512_set1_epi32(c->vlo)),
                                                        _mm512_set1_epi32(c->vhi));
    const __m512i q = _mm512_add_epi32(_mm512_mullo_epi32(vc, m), _mm512_set1_epi32(c->add));
    const __m512i u = _mm512_sub_epi32(_mm512_srl_epi32(q, _mm_cvtsi32_si128(c->shift)),
                                       _mm512_set1_epi32(c->low));
    if (sdp_i8_lut_bytes_unclamped(L)) return u;
    return _mm512_min_epi32(_mm512_max_epi32(u, _mm512_set1_epi32(L->t_lo - L->base)),
                            _mm512_set1_epi32(L->t_hi - L->base));
  }
  const __m512i x = _mm512_add_epi32(
      _mm512_min_epi32(_mm512_max_epi32(v, _mm512_set1_epi32(c->vlo)), _mm512_set1_epi32(c->vhi)),
      _mm512_set1_epi32(c->bias));
  if (c->exact) { /* the direct form: u = t - base from one product */
    const __m512i q = _mm512_add_epi32(
        _mm512_add_epi32(_mm512_mullo_epi32(x, m), _mm512_set1_epi32(c->add)),
        _mm512_srai_epi32(x, 31));
    /* byte tables: no clamp of u here (sdp_i8_lut_bytes64 clamps w and its codes are already
     * constant beyond the plan's ends: sdp_i8_lut_bytes_unclamped) */
    if (sdp_i8_lut_bytes_unclamped(L)) return _mm512_sra_epi32(q, _mm_cvtsi32_si128(c->shift));
    const __m512i u = _mm512_min_epi32(
        _mm512_max_epi32(_mm512_sra_epi32(q, _mm_cvtsi32_si128(c->shift)),
                         _mm512_set1_epi32(L->t_lo - L->base)),
        _mm512_set1_epi32(L->t_hi - L->base));
    return u;
  }
  const __m512i hp = _mm512_mullo_epi32(_mm512_srai_epi32(x, 16), m);
  const __m512i lp = _mm512_add_epi32(
      _mm512_mullo_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0xFFFF)), m),
      _mm512_and_si512(_mm512_srai_epi32(x, 31), _mm512_set1_epi32(c->neg)));
  const __m512i add = _mm512_set1_epi32(c->add);
  const __m128i sh = _mm_cvtsi32_si128(c->shift);
  const __m512i r =
      c->k == 16
          ? _mm512_sra_epi32(_mm512_add_epi32(_mm512_add_epi32(hp, add), _mm512_srai_epi32(lp, 16)),
                             sh)
          : _mm512_add_epi32(_mm512_sll_epi32(hp, _mm_cvtsi32_si128(c->low)),
                             _mm512_sra_epi32(_mm512_add_epi32(lp, add), sh));
  if (sdp_i8_lut_bytes_unclamped(L)) return _mm512_sub_epi32(r, _mm512_set1_epi32(L->base));
  const __m512i t = _mm512_min_epi32(_mm512_max_epi32(r, _mm512_set1_epi32(L->t_lo)),
                                     _mm512_set1_epi32(L->t_hi));
  return _mm512_sub_epi32(t, _mm512_set1_epi32(L->base));
}

/* The byte form of the LUT front (lq: sdp_i8_lanes.c's lut_byte_form finds its constants):
 * Q = min(max(v, qlo), qhi) qmul + qadd modulo 2^32, four operations per 16 values. With x =
 * v + bias (clamped), s <= 8, h = 2^(s-1) (0 for s = 0), qmul = mul 2^(8-s) and qadd = (bias
 * mul + h) 2^(8-s) - origin 2^8: Q = (x mul + h) 2^(8-s) - origin 2^8, so floor(Q / 2^8) =
 * floor((x mul + h) / 2^s) - origin = u (the folded form's t, which differs from rhaz's only at
 * ties that lut_ties_clear rules out on the plan's changes). The clamp [qlo, qhi] is where
 * that u lies in [0, u_hi]: then Q's true value lies in [0, 2^32) and the wrapped sum is it,
 * and bytes 1-3 of Q are u's bytes 0-2, the byte tables' offset and interval as they stand (no
 * shift, no subtraction, no clamp of u). Beyond the clamp the tables' code is their code at 0
 * or at u_hi (the builder keeps their changes a margin from both ends, and lut_byte_form
 * checks that a step of v stays inside it), and the thresholds outside the tables (B->gt) are
 * compares of v itself with qg (the v where t reaches them). */
static inline __attribute__((always_inline)) __m512i sdp_i8_lanes_lut_q(const sdp_i8_lane_cvt* c,
                                                                        __m512i v) {
  const __m512i x =
      _mm512_min_epi32(_mm512_max_epi32(v, _mm512_set1_epi32(c->qlo)), _mm512_set1_epi32(c->qhi));
  return _mm512_add_epi32(_mm512_mullo_epi32(x, _mm512_set1_epi32(c->qmul)),
                          _mm512_set1_epi32(c->qadd));
}

/* The 16 codes (one per int32 lane's low byte) of 16 accumulators v of channel c through the
 * LUT plan L (sdp_i8_lane_lut): the same word and compare as sdp_i8_span_lut's plan step. */
static inline __attribute__((always_inline)) __m512i sdp_i8_lanes_lut(const sdp_i8_lane_cvt* c,
                                                                      const sdp_i8_lane_lut* L,
                                                                      __m512i v) {
  return sdp_i8_lanes_lut_bins(L, sdp_i8_lanes_lut_u(c, L, v));
}

#ifdef __AVX512VBMI__
/* Byte b of each int32 lane of a and c (32 lanes) in order: lanes 0-31 of the result. */
static inline __attribute__((always_inline)) __m512i sdp_i8_byte_of(__m512i a, __m512i c,
                                                                     int b) {
  const __m512i idx = _mm512_add_epi8(
      _mm512_set_epi32(0x7C787470, 0x6C686460, 0x5C585450, 0x4C484440, 0x3C383430, 0x2C282420,
                       0x1C181410, 0x0C080400, 0x7C787470, 0x6C686460, 0x5C585450, 0x4C484440,
                       0x3C383430, 0x2C282420, 0x1C181410, 0x0C080400),
      _mm512_set1_epi8((char)b));
  return _mm512_permutex2var_epi8(a, idx, c);
}

/* Table f (256 bytes) at the 64 indices j; top: j's bit 7. */
static inline __attribute__((always_inline)) __m512i sdp_i8_lut_bytes_at(const uint8_t* f,
                                                                         __m512i j,
                                                                         __mmask64 top) {
  const __m512i r0 = _mm512_permutex2var_epi8(_mm512_loadu_si512(f), j,
                                              _mm512_loadu_si512(f + 64));
  const __m512i r1 = _mm512_permutex2var_epi8(_mm512_loadu_si512(f + 128), j,
                                              _mm512_loadu_si512(f + 192));
  return _mm512_mask_mov_epi8(r0, top, r1);
}

/* Table f's 128 entries from w0 at the 64 indices jw = j - w0 (modulo 256), 0 where jw >= 128
 * (in: jw < 128): a window's lookup (sdp_i8_lut_bytes.w0), from memory or (t != NULL) from its
 * two vectors in registers. */
static inline __attribute__((always_inline)) __m512i sdp_i8_lut_window_at(const uint8_t* f,
                                                                          const __m512i* t,
                                                                          __m512i jw,
                                                                          __mmask64 in) {
  return t != NULL ? _mm512_maskz_permutex2var_epi8(in, t[0], jw, t[1])
                   : _mm512_maskz_permutex2var_epi8(in, _mm512_loadu_si512(f), jw,
                                                    _mm512_loadu_si512(f + 64));
}

/* Table f at the 64 indices j from its four vectors t[0..3] (already in registers). */
static inline __attribute__((always_inline)) __m512i sdp_i8_lut_regs_at(const __m512i* t,
                                                                        __m512i j,
                                                                        __mmask64 top) {
  const __m512i r0 = _mm512_permutex2var_epi8(t[0], j, t[1]);
  const __m512i r1 = _mm512_permutex2var_epi8(t[2], j, t[3]);
  return _mm512_mask_mov_epi8(r0, top, r1);
}

/* The tables sdp_i8_lut_bytes_core reads with M slots and shortcuts S (both known, M <= 2),
 * into T (4 (1 + 3 M) vectors): a kernel keeps them in registers over its rows (its int8
 * stores could alias the tables, so the compiler would load them again for every 64 codes).
 * A hashed slot's three 64-byte tables go to T[4 (1 + 3k)], T[4 (2 + 3k)], T[4 (3 + 3k)]. */
static inline __attribute__((always_inline)) void sdp_i8_lut_tables_to(const sdp_i8_lut_bytes* B,
                                                                       const int M, const int S,
                                                                       __m512i* T) {
  for (int q = 0; q < 4; ++q) T[q] = _mm512_loadu_si512(B->f[0] + 64 * q);
  for (int k = 0; k < M; ++k)
    for (int t = 1 + 3 * k; t < 4 + 3 * k; ++t) {
      if ((S >> (12 + k)) & 1) { /* hashed */
        T[4 * t] = _mm512_loadu_si512(B->hs[k][t - 1 - 3 * k]);
        continue;
      }
      if (t == 3 + 3 * k && (((S >> k) | (S >> (4 + k))) & 1)) continue; /* no D lookup */
      const int window = (S >> (8 + k)) & 1;
      for (int q = 0; q < (window ? 2 : 4); ++q)
        T[4 * t + q] = _mm512_loadu_si512(B->f[t] + (window ? B->w0[k] : 0) + 64 * q);
    }
}

/* The 64 codes of four vectors w in [0, u_hi] (values 0-15, ..., 48-63) through the byte
 * tables B: by = 0, w = u (shifted by B->up), interval j its byte 2 and offset o its bytes 0-1;
 * by = 1, w = Q of the byte form (sdp_i8_lanes_lut_q, B->up 0: u in Q's bytes 1-3, so no shift
 * of u at all). gm: the outside thresholds' masks, already known (lane i of mask k: u >= gt_k).
 * M: B->m where the caller knows it (its loops unrolled), else -1; DC likewise the shortcuts
 * it takes (bits of B->shape: a subset of them, as the tables hold every entry either way),
 * else -1: B->shape. T: the tables in registers (four vectors each; a window's two, from
 * f + w0), or NULL. */
static inline __attribute__((always_inline)) __m512i sdp_i8_lut_bytes_core(
    const sdp_i8_lut_bytes* B, __m512i u0, __m512i u1, __m512i u2, __m512i u3, const int by,
    const __mmask64* gm, int bg, const int M, const int DC, const __m512i* T) {
  const int bm = M >= 0 ? M : B->m;
  const int S = DC >= 0 ? DC : B->shape;
  /* bytes by and by + 1 of 32 lanes by one permute (the low bytes in its lower half, the high
   * ones in its upper), the two halves of values joined by vshufi64x2: four operations for ol
   * and oh, where sdp_i8_byte_of per byte took six */
  const __m512i b01 = _mm512_add_epi8(
      _mm512_set_epi32(0x7D797571, 0x6D696561, 0x5D595551, 0x4D494541, 0x3D393531, 0x2D292521,
                       0x1D191511, 0x0D090501, 0x7C787470, 0x6C686460, 0x5C585450, 0x4C484440,
                       0x3C383430, 0x2C282420, 0x1C181410, 0x0C080400),
      _mm512_set1_epi8((char)by));
  const __m512i lo01 = _mm512_permutex2var_epi8(u0, b01, u1);
  const __m512i hi01 = _mm512_permutex2var_epi8(u2, b01, u3);
  const __m512i ol = _mm512_shuffle_i64x2(lo01, hi01, 0x44);
  const __m512i oh = _mm512_shuffle_i64x2(lo01, hi01, 0xEE);
  const __m512i j = _mm512_inserti64x4(sdp_i8_byte_of(u0, u1, 2 + by),
                                       _mm512_castsi512_si256(sdp_i8_byte_of(u2, u3, 2 + by)), 1);
  const __mmask64 top = _mm512_movepi8_mask(j);
#define SDP_I8_LUT_AT(t) \
  (T != NULL ? sdp_i8_lut_regs_at(T + 4 * (t), j, top) : sdp_i8_lut_bytes_at(B->f[t], j, top))
  __m512i code = SDP_I8_LUT_AT(0);
  for (int k = 0; k < bm; ++k) {
    __m512i tl, th, d;
    if ((S >> (12 + k)) & 1) { /* hashed: one vpermb a table, zeroed where j is not its own */
#define SDP_I8_LUT_HS(i) (T != NULL ? T[4 * (1 + i + 3 * k)] : _mm512_loadu_si512(B->hs[k][i]))
      const __mmask64 own = _mm512_cmpeq_epi8_mask(_mm512_permutexvar_epi8(j, SDP_I8_LUT_HS(2)), j);
      tl = _mm512_maskz_permutexvar_epi8(own, j, SDP_I8_LUT_HS(0));
      th = _mm512_maskz_permutexvar_epi8(own, j, SDP_I8_LUT_HS(1));
#undef SDP_I8_LUT_HS
      d = _mm512_setzero_si512(); /* dc or region: below */
    } else if ((S >> (8 + k)) & 1) { /* a window: one permute a table */
      const __m512i jw = _mm512_sub_epi8(j, _mm512_set1_epi8((char)B->w0[k]));
      const __mmask64 in = _mm512_cmplt_epu8_mask(jw, _mm512_set1_epi8((char)128));
#define SDP_I8_LUT_WIN(t) \
  sdp_i8_lut_window_at(B->f[t] + B->w0[k], T != NULL ? T + 4 * (t) : NULL, jw, in)
      tl = SDP_I8_LUT_WIN(1 + 3 * k);
      th = SDP_I8_LUT_WIN(2 + 3 * k);
      d = ((S >> k) | (S >> (4 + k))) & 1 ? _mm512_setzero_si512() : SDP_I8_LUT_WIN(3 + 3 * k);
#undef SDP_I8_LUT_WIN
    } else {
      tl = SDP_I8_LUT_AT(1 + 3 * k);
      th = SDP_I8_LUT_AT(2 + 3 * k);
      d = ((S >> k) | (S >> (4 + k))) & 1 ? _mm512_setzero_si512() : SDP_I8_LUT_AT(3 + 3 * k);
    }
    if ((S >> k) & 1) /* one size of change */
      d = _mm512_set1_epi8((char)B->dc[k]);
    else if ((S >> (4 + k)) & 1) /* two regions of j */
      d = _mm512_mask_blend_epi8(_mm512_cmpge_epu8_mask(j, _mm512_set1_epi8((char)B->jr[k])),
                                 _mm512_set1_epi8((char)B->dlo[k]),
                                 _mm512_set1_epi8((char)B->dhi[k]));
#undef SDP_I8_LUT_AT
    /* o >= T: the high bytes above, or equal and the low bytes at least; with the borrow
     * shortcut, oh less (ol < tl), saturated, at least th (sdp_i8_lut_bytes.hs's comment) */
    const __mmask64 pass =
        (S >> (16 + k)) & 1
            ? _mm512_cmpge_epu8_mask(_mm512_mask_subs_epu8(oh, _mm512_cmplt_epu8_mask(ol, tl), oh,
                                                           _mm512_set1_epi8(1)),
                                     th)
            : _mm512_cmpgt_epu8_mask(oh, th) |
                  _mm512_mask_cmpge_epu8_mask(_mm512_cmpeq_epi8_mask(oh, th), ol, tl);
    code = _mm512_mask_add_epi8(code, pass, code, d);
  }
  for (int i = 0; i < bg; ++i)
    code = _mm512_mask_add_epi8(code, gm[i], code, _mm512_set1_epi8((char)B->gd[i]));
  return code;
}

/* The 64 codes of u = t - origin in four vectors (values 0-15, ..., 48-63; t inside the
 * plan's clamp) through the byte tables B (sdp_i8_lut_bytes); M / G: B->m and B->g where the
 * caller knows them (a constant in its loop: the slots' and thresholds' loops unrolled, no
 * masks kept in memory), else -1. */
static inline __attribute__((always_inline)) __m512i sdp_i8_lut_bytes64_mg(
    const sdp_i8_lut_bytes* B, __m512i u0, __m512i u1, __m512i u2, __m512i u3, const int M,
    const int G) {
  const int bg = G >= 0 ? G : B->g;
  __mmask64 gm[SDP_I8_LUT_BYTES_G] = {0};
  for (int i = 0; i < bg; ++i) {
    const __m512i gt = _mm512_set1_epi32(B->gt[i]);
    const __mmask32 a = _mm512_kunpackw(_mm512_cmpge_epi32_mask(u1, gt),
                                        _mm512_cmpge_epi32_mask(u0, gt));
    const __mmask32 b = _mm512_kunpackw(_mm512_cmpge_epi32_mask(u3, gt),
                                        _mm512_cmpge_epi32_mask(u2, gt));
    gm[i] = _mm512_kunpackd(b, a);
  }
  const __m512i hi = _mm512_set1_epi32(B->u_hi), zero = _mm512_setzero_si512();
  u0 = _mm512_min_epi32(_mm512_max_epi32(u0, zero), hi);
  u1 = _mm512_min_epi32(_mm512_max_epi32(u1, zero), hi);
  u2 = _mm512_min_epi32(_mm512_max_epi32(u2, zero), hi);
  u3 = _mm512_min_epi32(_mm512_max_epi32(u3, zero), hi);
  if (B->up != 0) { /* intervals narrower than 2^16 (the compiler's tables: none) */
    const __m128i up = _mm_cvtsi32_si128(B->up);
    u0 = _mm512_sll_epi32(u0, up);
    u1 = _mm512_sll_epi32(u1, up);
    u2 = _mm512_sll_epi32(u2, up);
    u3 = _mm512_sll_epi32(u3, up);
  }
  return sdp_i8_lut_bytes_core(B, u0, u1, u2, u3, 0, gm, bg, M, -1, NULL);
}

static inline __attribute__((always_inline)) __m512i sdp_i8_lut_bytes64(
    const sdp_i8_lut_bytes* B, __m512i u0, __m512i u1, __m512i u2, __m512i u3) {
  return sdp_i8_lut_bytes64_mg(B, u0, u1, u2, u3, -1, -1);
}
#endif

/* 64 codes of four vectors of sdp_i8_lanes_lut (values 0-15, ..., 48-63), in order: each
 * lane's low byte (two byte permutes across register pairs with VBMI, else four truncations). */
static inline __m512i sdp_i8_lut_codes64(__m512i c0, __m512i c1, __m512i c2, __m512i c3) {
#ifdef __AVX512VBMI__
  const __m512i low = _mm512_set_epi32(0x7C787470, 0x6C686460, 0x5C585450, 0x4C484440,
                                       0x3C383430, 0x2C282420, 0x1C181410, 0x0C080400,
                                       0x7C787470, 0x6C686460, 0x5C585450, 0x4C484440,
                                       0x3C383430, 0x2C282420, 0x1C181410, 0x0C080400);
  const __m512i a = _mm512_permutex2var_epi8(c0, low, c1);
  const __m512i b = _mm512_permutex2var_epi8(c2, low, c3);
  return _mm512_inserti64x4(a, _mm512_castsi512_si256(b), 1);
#else
  const __m256i a = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(c0)),
                                            _mm512_cvtepi32_epi8(c1), 1);
  const __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(c2)),
                                            _mm512_cvtepi32_epi8(c3), 1);
  return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
#endif
}

/* 64 codes of four vectors of q (values 0-15, 16-31, 32-47, 48-63), saturated to int8 in
 * order: two saturating packs (int32 -> int16 -> int8; sat8(sat16(x)) = sat8(x)) leave 128-bit
 * lane L holding values 4L..4L+3 of each vector, one vpermd puts them back in order: fewer
 * cycles than four vpmovsdb (docs/kernels.md, sdp_i8_lanes.h). */
static inline __m512i sdp_i8_codes64(__m512i q0, __m512i q1, __m512i q2, __m512i q3) {
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512i b = _mm512_packs_epi16(_mm512_packs_epi32(q0, q1), _mm512_packs_epi32(q2, q3));
  return _mm512_permutexvar_epi32(order, b);
}
#endif

#if defined(__AVX2__)
#include <immintrin.h>

/* ---- AVX2: the same forms on 8 int32 lanes ----------------------------------------------------
 * For builds without AVX-512 (x86-64-v3: Zen 3, Haswell..; compiled in AVX-512 builds too, where
 * an AVX2 kernel may use them). The constants are the ones above, from the same prepare calls
 * (sdp_i8_lanes_prepare, _add), so the codes are sdp_i8_span's exactly, as the 16-lane forms'.
 * A conv kernel converts its accumulators where it finishes them:
 *   prepare once per call:  sdp_i8_lanes_prepare(p, 0, k, vmax, cvt, &lo, &hi) (else _add);
 *                           form = the smallest sdp_i8_lane_form(cvt + m) over the rows it runs
 *                           (one form per call keeps the branch out of the loop);
 *   per 8 values of row m:  q = sdp_i8_lanes8_form(cvt + m, v, form) (a residual add:
 *                           sdp_i8_lanes8_add(&add, cvt + m, v, o, form, add.lean));
 *   per 32 values:          codes = sdp_i8_codes32(q0, q1, q2, q3), clamped to [lo, hi] by
 *                           vpmaxsb / vpminsb, stored;
 * or, for int32 rows it stored, sdp_i8_lanes8_run (sdp_i8_avx2.c): no sdp_i8_span set-up per row.
 * A LUT activation: sdp_i8_lanes_prepare_lut once per call, then per 8 values
 * sdp_i8_lanes8_lut(cvt + m, &lut, v, sdp_i8_lane_lut_form(cvt + m)) (the codes themselves, no
 * clamp), or sdp_i8_lanes8_run_lut over a stored row.
 * Forms (split): 0 any channel; 7 k = 0 (the direct product, fast32's "direct"); 1 k = 16;
 * 2 k = 16 and exact (no clamp); 3 / 4 conv / conv 2; 5 / 6 forms 4 / 3 with the bias already
 * in v. AVX2 has no mask registers: form 3's sign comes back by vpsignd (|t| 0 gives r 0), and
 * without AVX-VNNI the high product is vpmaddwd then vpaddd. */

/* The cheapest form a channel's converter allows (the caller takes the smallest over its rows:
 * every form serves the channels of the forms above it, 7 and 0 aside: 7 only k = 0 rows, 0
 * any). Forms 5 and 6 are the caller's (its accumulators start at the bias). */
static inline int sdp_i8_lane_form(const sdp_i8_lane_cvt* e) {
  if (e->k == 16) return 1 + e->exact + e->conv;
  return e->k == 0 && e->low == 0 ? 7 : 0;
}

/* Forms 3 and 4 (5 / 6: 4 / 3 with the bias already in v) with their constants as vectors:
 * one channel's broadcast (sdp_i8_conv8_of: sdp_i8_lanes8_form), or in each lane its own
 * channel's (eight channels of one output position: conv/i8_dw_planes_avx2.c). The identities
 * are sdp_i8_lanes_form's (its comment states them); the shift per lane by vpsravd, as the
 * 16-lane form's (vpsrad's result for every count). add: form 4's c->add, form 3's
 * 2^(shift - 1); zero: form 3's out_zero. */
typedef struct sdp_i8_conv8 {
  __m256i bias, add, mulh, mul, shift, zero;
} sdp_i8_conv8;

/* L.add of channel c in form `form`. */
static inline int32_t sdp_i8_conv8_add(const sdp_i8_lane_cvt* c, int form) {
  return form == 4 || form == 5 ? c->add : (int32_t)(1u << (c->shift - 1));
}

/* Channel c's constants in every lane. */
static inline __attribute__((always_inline)) sdp_i8_conv8 sdp_i8_conv8_of(const sdp_i8_lane_cvt* c,
                                                                          int form) {
  sdp_i8_conv8 L;
  L.bias = _mm256_set1_epi32(c->bias);
  L.add = _mm256_set1_epi32(sdp_i8_conv8_add(c, form));
  L.mulh = _mm256_set1_epi32((int32_t)((uint32_t)c->mul << 16));
  L.mul = _mm256_set1_epi32(c->mul);
  L.shift = _mm256_set1_epi32(c->shift);
  L.zero = _mm256_set1_epi32(c->zero);
  return L;
}

/* Lane j: channel c + j's constants, the last one's past c + n - 1 (n >= 1). */
static inline sdp_i8_conv8 sdp_i8_conv8_lanes(const sdp_i8_lane_cvt* c, int64_t n, int form) {
  int32_t bias[8], add[8], mulh[8], mul[8], shift[8], zero[8];
  for (int j = 0; j < 8; ++j) {
    const sdp_i8_lane_cvt* e = c + (j < n ? j : n - 1);
    bias[j] = e->bias, add[j] = sdp_i8_conv8_add(e, form);
    mulh[j] = (int32_t)((uint32_t)e->mul << 16), mul[j] = e->mul;
    shift[j] = e->shift, zero[j] = e->zero;
  }
  sdp_i8_conv8 L;
  L.bias = _mm256_loadu_si256((const __m256i*)(const void*)bias);
  L.add = _mm256_loadu_si256((const __m256i*)(const void*)add);
  L.mulh = _mm256_loadu_si256((const __m256i*)(const void*)mulh);
  L.mul = _mm256_loadu_si256((const __m256i*)(const void*)mul);
  L.shift = _mm256_loadu_si256((const __m256i*)(const void*)shift);
  L.zero = _mm256_loadu_si256((const __m256i*)(const void*)zero);
  return L;
}

/* q of 8 accumulators (before the int8 saturation) by form 3, 4, 5 or 6 with L's constants. */
static inline __attribute__((always_inline)) __m256i sdp_i8_conv8_q(const int form,
                                                                   const sdp_i8_conv8* L,
                                                                   __m256i v) {
  const int sign = form == 3 || form == 6; /* |t|, then t's sign and out_zero */
  const __m256i t = form == 3 || form == 4 ? _mm256_add_epi32(v, L->bias) : v;
  const __m256i a = sign ? _mm256_abs_epi32(t) : t;
  const __m256i hp = _mm256_add_epi32(L->add, _mm256_madd_epi16(a, L->mulh));
  const __m256i lp = _mm256_mulhi_epu16(a, L->mul);
  const __m256i r = _mm256_srav_epi32(_mm256_add_epi32(hp, lp), L->shift);
  return sign ? _mm256_add_epi32(L->zero, _mm256_sign_epi32(r, t)) : r;
}

/* q of 8 accumulators of one channel (before the int8 saturation): sdp_i8_lanes_form's forms
 * (forms 3 to 6 by sdp_i8_conv8_q) and form 7, q = (t mul + add + (neg & n)) >>
 * shift with n = -(t < 0) (fast32's direct form: k = 0, low = 0). */
static inline __attribute__((always_inline)) __m256i sdp_i8_lanes8_form(const sdp_i8_lane_cvt* c,
                                                                        __m256i v, int split) {
  if (split >= 3 && split <= 6) {
    const sdp_i8_conv8 L = sdp_i8_conv8_of(c, split);
    return sdp_i8_conv8_q(split, &L, v);
  }
  const __m256i t =
      split == 2 ? _mm256_add_epi32(v, _mm256_set1_epi32(c->bias))
                 : _mm256_add_epi32(_mm256_min_epi32(_mm256_max_epi32(v, _mm256_set1_epi32(c->vlo)),
                                                     _mm256_set1_epi32(c->vhi)),
                                    _mm256_set1_epi32(c->bias));
  const __m256i m = _mm256_set1_epi32(c->mul);
  const __m128i sh = _mm_cvtsi32_si128(c->shift);
  if (split == 7) {
    const __m256i q = _mm256_add_epi32(
        _mm256_add_epi32(_mm256_mullo_epi32(t, m), _mm256_set1_epi32(c->add)),
        _mm256_and_si256(_mm256_srai_epi32(t, 31), _mm256_set1_epi32(c->neg)));
    return _mm256_sra_epi32(q, sh);
  }
  if (split) {
    const __m256i hp = _mm256_mullo_epi32(_mm256_srai_epi32(t, 16), m);
    const __m256i lp = _mm256_add_epi32(
        _mm256_mullo_epi32(_mm256_and_si256(t, _mm256_set1_epi32(0xFFFF)), m),
        _mm256_srai_epi32(t, 31));
    const __m256i q = _mm256_add_epi32(_mm256_add_epi32(hp, _mm256_set1_epi32(c->add)),
                                       _mm256_srai_epi32(lp, 16));
    return _mm256_sra_epi32(q, sh);
  }
  const __m128i k = _mm_cvtsi32_si128(c->k);
  const __m256i hp = _mm256_mullo_epi32(_mm256_sra_epi32(t, k), m);
  const __m256i lp = _mm256_add_epi32(
      _mm256_mullo_epi32(_mm256_and_si256(t, _mm256_set1_epi32(c->low)), m),
      _mm256_and_si256(_mm256_srai_epi32(t, 31), _mm256_set1_epi32(c->neg)));
  const __m256i q =
      _mm256_add_epi32(_mm256_add_epi32(hp, _mm256_set1_epi32(c->add)), _mm256_sra_epi32(lp, k));
  return _mm256_sra_epi32(q, sh);
}

/* q of 8 values v of channel c with their operand codes o (int32 lanes): sdp_i8_lanes_add's
 * forms 1-4 and lean (its comment states them). */
static inline __attribute__((always_inline)) __m256i sdp_i8_lanes8_add(const sdp_i8_lane_add* a,
                                                                       const sdp_i8_lane_cvt* c,
                                                                       __m256i v, __m256i o,
                                                                       int form, int lean) {
  if (form < 2)
    v = _mm256_min_epi32(_mm256_max_epi32(v, _mm256_set1_epi32(c->vlo)),
                         _mm256_set1_epi32(c->vhi));
  const __m256i t = _mm256_add_epi32(v, _mm256_set1_epi32(c->bias));
  __m256i u;
  if (form == 4) { /* the conv's form 3 (here add is 2^(shift - 1)) without out_zero */
    sdp_i8_conv8 L = sdp_i8_conv8_of(c, 4);
    L.zero = _mm256_setzero_si256();
    u = sdp_i8_conv8_q(6, &L, t);
  } else {
    const __m256i m = _mm256_set1_epi32(c->mul);
    const __m128i k = _mm_cvtsi32_si128(c->k);
    const __m256i lp = _mm256_add_epi32(
        _mm256_add_epi32(_mm256_mullo_epi32(_mm256_and_si256(t, _mm256_set1_epi32(c->low)), m),
                         _mm256_set1_epi32(c->neg)),
        _mm256_srai_epi32(t, 31));
    u = _mm256_add_epi32(_mm256_mullo_epi32(_mm256_sra_epi32(t, k), m), _mm256_sra_epi32(lp, k));
    if (form < 3)
      u = _mm256_sra_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(c->add)),
                           _mm_cvtsi32_si128(c->shift));
  }
  const __m256i x = _mm256_add_epi32(
      _mm256_madd_epi16(o, _mm256_set1_epi32((int32_t)(uint16_t)(int16_t)a->ew_mul)),
      _mm256_set1_epi32(a->ew_base));
  /* x - (x < ew_nlt): the compare's -1 added */
  const __m256i e = _mm256_sra_epi32(
      _mm256_add_epi32(x, _mm256_cmpgt_epi32(_mm256_set1_epi32(a->ew_nlt), x)),
      _mm_cvtsi32_si128(a->ew_shift));
  if (lean) {
    const __m256i w = _mm256_max_epi32(_mm256_add_epi32(u, e), _mm256_setzero_si256());
    return _mm256_sra_epi32(_mm256_add_epi32(w, _mm256_set1_epi32(a->out_add)),
                            _mm_cvtsi32_si128(a->out_shift));
  }
  const __m256i w = _mm256_min_epi32(
      _mm256_max_epi32(_mm256_add_epi32(u, e), _mm256_set1_epi32(a->w_lo)),
      _mm256_set1_epi32(a->w_hi));
  const __m256i pr = _mm256_mullo_epi32(w, _mm256_set1_epi32(a->out_mul));
  const __m256i q = _mm256_add_epi32(
      _mm256_add_epi32(pr, _mm256_set1_epi32(a->out_add)),
      _mm256_and_si256(_mm256_srai_epi32(pr, 31), _mm256_set1_epi32(a->out_neg)));
  return _mm256_sra_epi32(q, _mm_cvtsi32_si128(a->out_shift));
}

/* 32 codes of four vectors q (values 0-7, 8-15, 16-23, 24-31), saturated to int8, in order:
 * two saturating packs (sat8(sat16(x)) = sat8(x)) leave dword d of 128-bit lane L holding
 * values 4L..4L+3 of vector d; one vpermd puts them back in order. */
static inline __attribute__((always_inline)) __m256i sdp_i8_codes32(__m256i q0, __m256i q1,
                                                                    __m256i q2, __m256i q3) {
  const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
  return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* The LUT input converter's form of a channel (sdp_i8_lanes_prepare_lut's constants): 2 the
 * direct product (exact), 1 the split one with k = 16 (s >= 17), 0 with k = 0 (s <= 16). */
static inline int sdp_i8_lane_lut_form(const sdp_i8_lane_cvt* e) {
  return e->exact ? 2 : e->k == 16 ? 1 : 0;
}

/* u = t - base, t clamped to [t_lo, t_hi], of 8 accumulators v of channel c: the LUT plan L's
 * input converter (sdp_i8_lanes_lut_u's forms, whose comment states them; form: c's
 * sdp_i8_lane_lut_form, a constant in the caller's loop). The AVX2 build's constants differ in
 * two ways (sdp_i8_lanes.c's sdp_i8_lane_lut_of and lanes_lut_channels; an AVX-512 build's are
 * for the 16-lane forms only): base is the bins' middle, so u takes either sign, and the direct form
 * (2) takes no clamp of t: its channels' clamp of v keeps t within the plan's guard bins, whose
 * codes are the end bins' (sdp_i8_lut_plan), and the lookup reads them there. Form 2 is then
 * one product and five additions, shifts and compares before the lookup (forms 0 and 1: two
 * products and fifteen). */
static inline __attribute__((always_inline)) __m256i sdp_i8_lanes8_lut_u(const sdp_i8_lane_cvt* c,
                                                                         const sdp_i8_lane_lut* L,
                                                                         __m256i v, int form) {
  const __m256i x = _mm256_add_epi32(
      _mm256_min_epi32(_mm256_max_epi32(v, _mm256_set1_epi32(c->vlo)), _mm256_set1_epi32(c->vhi)),
      _mm256_set1_epi32(c->bias));
  const __m256i m = _mm256_set1_epi32(c->mul);
  const __m128i sh = _mm_cvtsi32_si128(c->shift);
  if (form == 2) { /* the direct form: u = t - base from one product, t inside the guard bins */
    (void)L;
    const __m256i q = _mm256_add_epi32(
        _mm256_add_epi32(_mm256_mullo_epi32(x, m), _mm256_set1_epi32(c->add)),
        _mm256_srai_epi32(x, 31));
    return _mm256_sra_epi32(q, sh);
  }
  const __m256i hp = _mm256_mullo_epi32(_mm256_srai_epi32(x, 16), m);
  const __m256i lp = _mm256_add_epi32(
      _mm256_mullo_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0xFFFF)), m),
      _mm256_and_si256(_mm256_srai_epi32(x, 31), _mm256_set1_epi32(c->neg)));
  const __m256i add = _mm256_set1_epi32(c->add);
  const __m256i r =
      form == 1
          ? _mm256_sra_epi32(_mm256_add_epi32(_mm256_add_epi32(hp, add), _mm256_srai_epi32(lp, 16)),
                             sh)
          : _mm256_add_epi32(_mm256_sll_epi32(hp, _mm_cvtsi32_si128(c->low)),
                             _mm256_sra_epi32(_mm256_add_epi32(lp, add), sh));
  const __m256i t = _mm256_min_epi32(_mm256_max_epi32(r, _mm256_set1_epi32(L->t_lo)),
                                     _mm256_set1_epi32(L->t_hi));
  return _mm256_sub_epi32(t, _mm256_set1_epi32(L->base));
}

/* The bin words of 8 offsets u = t - base (L->bins the bin of t = base: u of either sign, the
 * AVX2 build's base is the bins' middle, a whole number of bins from the first; u >> w then
 * indexes the guard bins too; L->bytes NULL: an AVX-512 VBMI build's plans with byte tables
 * count u from their origin instead). The words are 8 scalar loads put into the vector by
 * vpinsrd, not vpgatherdd, which was the slower of the two where measured (docs/kernels.md). */
static inline __attribute__((always_inline)) __m256i sdp_i8_lanes8_lut_words(const sdp_i8_lane_lut* L,
                                                                             __m256i u) {
  const __m256i j = _mm256_sra_epi32(u, _mm_cvtsi32_si128(L->w));
  const __m128i a = _mm256_castsi256_si128(j), b = _mm256_extracti128_si256(j, 1);
  const uint64_t a0 = (uint64_t)_mm_cvtsi128_si64(a), a1 = (uint64_t)_mm_extract_epi64(a, 1);
  const uint64_t b0 = (uint64_t)_mm_cvtsi128_si64(b), b1 = (uint64_t)_mm_extract_epi64(b, 1);
  const int* w = (const int*)(const void*)L->bins;
#define SDP_I8_BIN(q) w[(int32_t)(uint32_t)(q)] /* a signed index: bins points at the middle */
  __m128i lo = _mm_cvtsi32_si128(SDP_I8_BIN(a0));
  lo = _mm_insert_epi32(lo, SDP_I8_BIN(a0 >> 32), 1);
  lo = _mm_insert_epi32(lo, SDP_I8_BIN(a1), 2);
  lo = _mm_insert_epi32(lo, SDP_I8_BIN(a1 >> 32), 3);
  __m128i hi = _mm_cvtsi32_si128(SDP_I8_BIN(b0));
  hi = _mm_insert_epi32(hi, SDP_I8_BIN(b0 >> 32), 1);
  hi = _mm_insert_epi32(hi, SDP_I8_BIN(b1), 2);
  hi = _mm_insert_epi32(hi, SDP_I8_BIN(b1 >> 32), 3);
#undef SDP_I8_BIN
  return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

/* The codes (sign-extended int32) of 8 offsets u from their bin words g: the code below or
 * above the bin's threshold (u's low w bits are its offset in the bin, either sign). */
static inline __attribute__((always_inline)) __m256i sdp_i8_lanes8_lut_pick(const sdp_i8_lane_lut* L,
                                                                            __m256i g, __m256i u) {
  /* below the threshold (bits 0-15): the code in bits 16-23, moved up by 8; else bits 24-31 */
  const __m256i below = _mm256_cmpgt_epi32(_mm256_and_si256(g, _mm256_set1_epi32(0xFFFF)),
                                           _mm256_and_si256(u, _mm256_set1_epi32((1 << L->w) - 1)));
  return _mm256_srai_epi32(_mm256_sllv_epi32(g, _mm256_and_si256(below, _mm256_set1_epi32(8))), 24);
}

/* The codes of 8 offsets u through the plan's bins: their words, then the pick. */
static inline __attribute__((always_inline)) __m256i sdp_i8_lanes8_lut_bins(const sdp_i8_lane_lut* L,
                                                                            __m256i u) {
  return sdp_i8_lanes8_lut_pick(L, sdp_i8_lanes8_lut_words(L, u), u);
}

/* The 8 codes of 8 accumulators v of channel c through the LUT plan L (sdp_i8_lanes_prepare_lut's
 * constants, L->bytes NULL; form: sdp_i8_lane_lut_form's), sign-extended in int32 lanes:
 * sdp_i8_codes32 packs four of them. */
static inline __attribute__((always_inline)) __m256i sdp_i8_lanes8_lut(const sdp_i8_lane_cvt* c,
                                                                       const sdp_i8_lane_lut* L,
                                                                       __m256i v, int form) {
  return sdp_i8_lanes8_lut_bins(L, sdp_i8_lanes8_lut_u(c, L, v, form));
}

/* count int32 values v of one channel (converter e, form: sdp_i8_lane_form's or smaller; a
 * residual add: add and its operand codes, else NULL) converted into y, codes clamped to [lo,
 * hi]: for rows a kernel stored (sdp_i8_avx2.c; 32 per step, the tail through a padded copy). */
void sdp_i8_lanes8_run(const sdp_i8_lane_cvt* e, const sdp_i8_lane_add* add, int form, int8_t lo,
                       int8_t hi, const int32_t* v, const int8_t* operand, int8_t* y,
                       int64_t count);
/* The same for a LUT activation (sdp_i8_lanes8_lut: e and L from sdp_i8_lanes_prepare_lut). */
void sdp_i8_lanes8_run_lut(const sdp_i8_lane_cvt* e, const sdp_i8_lane_lut* L, const int32_t* v,
                           int8_t* y, int64_t count);
#endif

#endif /* ACCEL_SDP_I8_LANES_H */
