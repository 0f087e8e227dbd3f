/* sdp_i8_lanes.c - the constants of the INT8 converter's lane forms (sdp_i8_lanes.h): the
 * channels' converters and the residual add's, checked in int64 (scalar code, one definition
 * for both vector builds: the 16-lane forms of AVX-512 and the 8-lane forms of AVX2 read the
 * same constants). A build without either has no lane forms: the preparations decline. (The
 * LUT activations' preparation, sdp_i8_lanes_prepare_lut, is sdp_i8_lut.c's.)
 */
#include <stdint.h>

#include "kernels.h"
#include "sdp_i8_internal.h"
#include "sdp_i8_lanes.h"

#if SDP_I8_VECTOR || SDP_I8_AVX2

/* bs_exact_to(c, T) for T = code_threshold(c->mul, c->shift, r) (add: T = add_threshold's,
 * r its t2, which the caller found no bound for when negative), without the division: the
 * lanes' set-up runs it for every channel of every conv call, and the division was most of
 * it. T = ceil(r 2^s / m) <= B exactly when r 2^s <= B m (m > 0; r 2^s < 2^61, B m < 2^46). */
static int bs_exact_within(const chan_params* c, int64_t r, int add) {
  if (c->pre == 0) return 1;
  const int64_t m = abs64(c->mul), s = c->shift;
  if (m == 0) return 1; /* T = 0 */
  if (s > 40 || (add ? r > ((int64_t)1 << (61 - s)) : r > ((int64_t)1 << 20))) return 0;
  return (r << s) <= (int64_t)(INT32_MAX >> bs_pre(c->pre)) * m;
}

int sdp_i8_lanes_prepare(const sdp_i8* p, int32_t first, int32_t count, int64_t vmax,
                         sdp_i8_lane_cvt* cvt, int8_t* lo, int8_t* hi) {
  if (p->lut != NULL || p->ew_op != ACCEL_EW_NONE || p->out_mul != 0 ||
      !(p->act == ACCEL_ACT_NONE || p->act == ACCEL_ACT_RELU || p->act == ACCEL_ACT_CLIP))
    return 0;
  *lo = (int8_t)(p->act == ACCEL_ACT_RELU ? p->out_zero
                 : p->act == ACCEL_ACT_CLIP ? p->clip_lo : -128);
  *hi = (int8_t)(p->act == ACCEL_ACT_CLIP ? p->clip_hi : 127);
  const int64_t r = 128 + abs64(p->out_zero);
  for (int32_t i = 0; i < count; ++i) {
    const chan_params c = channel_params(p, first + i);
    sdp_i8_lane_cvt* e = cvt + i;
    if (!bs_exact_within(&c, r, 0)) return 0;
    /* a conv's converter (mul > 0, shifts 17..40): the split form with t clamped to int32
     * only, no plan (fast32_plan divides per channel, and every conv layer prepares) */
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
  /* add_threshold's t2, the call's (no channel's): its t_out + the operand's largest |e| */
  const int64_t om0 = p->out_mul != 0 ? abs64(p->out_mul) : 1;
  const int64_t os0 = p->out_mul != 0 ? p->out_shift : 0;
  int64_t t2 = -1; /* -1: no bound (add_threshold's INT64_MAX) */
  if (os0 <= 30) {
    int64_t e_max = 0;
    for (int64_t code = -128; code <= 127; code += 255) {
      const int64_t e = rhaz((code - p->ew_zero) * p->ew_mul, p->ew_shift);
      e_max = abs64(e) > e_max ? abs64(e) : e_max;
    }
    t2 = ((((int64_t)128 + abs64(p->out_zero)) << os0) + om0 - 1) / om0 + e_max;
  }
  /* the channels: u = rhaz(t * mul, s) for |t| <= tm; the largest |u| over them */
  int64_t u_max = 0;
  for (int32_t i = 0; i < count; ++i) {
    const chan_params c = channel_params(p, first + i);
    const int64_t s = c.shift, mul = c.mul;
    if (mul <= 0 || s < 1 || s > 40 || t2 < 0 || !bs_exact_within(&c, t2, 1)) return 0;
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
#endif
