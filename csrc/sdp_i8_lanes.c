/* sdp_i8_lanes.c - the constants of the INT8 converter's lane forms (sdp_i8_lanes.h): the
 * channels' converters and the residual add's, checked in int64 (scalar code, one definition
 * for both vector builds: the 16-lane forms of AVX-512 and the 8-lane forms of AVX2 read the
 * same constants), and a LUT activation's (sdp_i8_lanes_prepare_lut: each channel's clamp of v
 * where t reaches the plan's ends, kept between calls; the plan itself is sdp_i8_lut.c's). A
 * build without either has no lane forms: the preparations decline.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
      e->mulh = (int32_t)((uint32_t)c.mul << 16);
      continue;
    }
    fast32 f;
    if (c.shift > 55 || !fast32_plan(c.bias, c.mul, c.shift, p->out_zero, &f)) return 0;
    sdp_i8_lane_cvt_set(e, f.vlo, f.vhi, f.bias, f.mul, f.add, f.shift);
    e->k = f.split ? 16 : 0;
    e->low = f.split ? 0xFFFF : 0;
    e->neg = f.split || f.shift > 0 ? -1 : 0;
    /* no clamp: v + bias inside int32, |q| <= 2^30 + |add| + 2^15 inside int32 */
    e->exact = f.split && vmax + abs64(c.bias) <= INT32_MAX && abs64(f.add) < ((int64_t)1 << 29);
    e->conv = e->zero = e->mulh = 0;
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
    e->mulh = (int32_t)((uint32_t)mul << 16);
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
#if defined(__AVX512F__) && defined(__AVX512BW__)
  /* sdp_i8_lanes_add's e needs ew_mul >= 0 (the compiler's adds: a ratio of scales) */
  if (em < 0) return 0;
#endif
  add->ew_zero = em != 0 ? p->ew_zero : 0;
  add->ew_mulw = (int32_t)(((uint32_t)(es > 0) << 16) | (uint32_t)(uint16_t)em);
  add->ew_half = (int32_t)half;
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

/* The smallest x with lut_input(x) >= r, for mul > 0 (lut_input is then monotonic), where BS
 * does not saturate: rhaz(x mul, s) >= r is x mul + h >= r 2^s for r > 0 (h = 2^(s-1), 0 for
 * s = 0), and |x| mul + h < (1 - r) 2^s for x < 0 when r <= 0. The answer is checked (and
 * stepped to) on lut_input itself; outside +-2^32 it is clamped there (no int32 sum reaches
 * it); *ok = 0 where BS saturates on the way or the steps do not settle. */
static int64_t lut_reach(const chan_params* c, int64_t r, int* ok) {
  /* numerator a 2^(s-1) with a = 2r - 1 (r > 0) or 2(1 - r) - 1 (r <= 0), s >= 1; a 2^(s-1)
   * beyond 2^62 gives |x| > 2^32 (mul < 2^15), the clamp below, so int64 holds every case that
   * matters (a division per channel and call: no __int128) */
  const int64_t lim = (int64_t)1 << 32, s = c->shift, m = c->mul;
  const int64_t a = r > 0 ? 2 * r - 1 : 2 * (1 - r) - 1; /* >= 1, < 2^33 */
  int64_t x;
  if (s == 0) {
    x = r > 0 ? (r + m - 1) / m : -((1 - r + m - 1) / m - 1);
  } else if (s - 1 + (64 - __builtin_clzll((uint64_t)a)) > 62) {
    x = r > 0 ? lim + 1 : -lim - 1;
  } else {
    const int64_t num = a << (s - 1);
    x = r > 0 ? (num + m - 1) / m : -((num + m - 1) / m - 1);
  }
  if (x > lim) return lim;
  if (x < -lim) return -lim;
  int64_t y = (int64_t)x;
  if (!bs_exact_to(c, (y < 0 ? -y : y) + 2)) return *ok = 0;
  for (int i = 0; i < 4; ++i) {
    if (lut_input(c, y - 1) >= r) --y;
    else if (lut_input(c, y) < r) ++y;
    else return y;
  }
  return *ok = 0;
}

#if !SDP_I8_AVX2
/* Whether dropping rhaz's sign term from t = rhaz(x m, s) (floor((x m + 2^(s-1)) / 2^s)
 * instead) leaves every code of x in [xlo, xhi] as it is: the two differ only at the ties
 * x m = (2c - 1) 2^(s-1) with x < 0, where the floor is c and rhaz c - 1; a code differs only
 * if c is one of the plan's changes (c <= 0 there, as x m < 0). s >= 1 (the direct form runs
 * s = 0 as s = 1 with m even: the odd numerator has no tie). */
static int lut_ties_clear(const int32_t* change, int32_t n, int64_t m, int64_t s, int64_t xlo,
                          int64_t xhi) {
  for (int32_t i = 0; i < n && change[i] <= 0; ++i) {
    const int64_t num = (2 * (int64_t)change[i] - 1) * ((int64_t)1 << (s - 1)); /* |.| < 2^63 */
    if (num % m != 0) continue;
    const int64_t x = num / m;
    if (x < 0 && x >= xlo && x <= xhi) return 0;
  }
  return 1;
}
#endif

#if !SDP_I8_AVX2
/* floor(a / b) for b > 0 */
static int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/* Whether none of the byte tables' own changes (the plan's, less the thresholds outside them)
 * lies at u in (a, b]: their code is constant there. */
static int bytes_quiet(const struct sdp_i8_lut_plan* plan, const sdp_i8_lut_bytes* B, int64_t a,
                       int64_t b) {
  for (int32_t i = 0; i < plan->changes_count; ++i) {
    const int64_t u = (int64_t)plan->changes[i] - B->origin;
    int outside = 0;
    for (int k = 0; k < B->g; ++k) outside |= B->gt[k] == u;
    if (u > a && u <= b && !outside) return 0;
  }
  return 1;
}

/* The byte form of channel c's LUT front (sdp_i8_lanes_lut_q, whose comment states it) for
 * values |v| <= vmax, into e's lq, qlo, qhi, qmul, qadd and qg; lq 0 where it does not hold:
 * shifts above 8, BS saturating within the bound, a step of v across a change next to the
 * tables' ends, or a tie of the floor form on a change. */
static void lut_byte_form(const struct sdp_i8_lut_plan* plan, const chan_params* c, int64_t vmax,
                          sdp_i8_lane_cvt* e) {
  const sdp_i8_lut_bytes* B = plan->bytes;
  e->lq = 0;
  if (B == NULL || B->up != 0 || B->g > 2 || c->shift > 8 || c->mul <= 0 || vmax < 0 ||
      vmax >= INT32_MAX)
    return;
  const int64_t s = c->shift, m = c->mul, h = s > 0 ? (int64_t)1 << (s - 1) : 0;
  const int64_t O = B->origin, uh = B->u_hi, p2 = (int64_t)1 << s;
  const int64_t xlo = c->bias - vmax, xhi = c->bias + vmax; /* the bound's sums */
  if (xlo < INT32_MIN || xhi > INT32_MAX ||
      !bs_exact_to(c, (xlo < 0 ? -xlo : xlo) + 1) || !bs_exact_to(c, (xhi < 0 ? -xhi : xhi) + 1))
    return;
  /* F(x) = floor((x m + h) / 2^s) in [O, O + uh]: x in [xa, xb] */
  const int64_t xa = -floor_div(h - O * p2, m), xb = floor_div((O + uh + 1) * p2 - h - 1, m);
  const int64_t x0 = xa > xlo ? xa : xlo, x1 = xb < xhi ? xb : xhi;
  if (x0 > x1) return;
  /* below xa (t < O) the tables give their code at u = 0, and the clamp's F(xa) - O must not
   * pass one of their changes; above xb (t >= O + uh) likewise from F(xb) - O to uh */
  if (xa > xlo && !bytes_quiet(plan, B, 0, floor_div(xa * m + h, p2) - O)) return;
  if (xb < xhi && !bytes_quiet(plan, B, floor_div(xb * m + h, p2) - O, uh)) return;
  if (s >= 1 && !lut_ties_clear(plan->changes, plan->changes_count, m, s, x0, x1)) return;
  const int64_t q_lo = (x0 * m + h) * (256 / p2) - O * 256, q_hi = (x1 * m + h) * (256 / p2) - O * 256;
  if (q_lo < 0 || q_hi > (int64_t)UINT32_MAX) return; /* never: F - O in [0, uh] */
  for (int i = 0; i < B->g; ++i) { /* the outside thresholds as values of v */
    int ok = 1;
    const int64_t x = lut_reach(c, O + B->gt[i], &ok);
    if (!ok) return;
    const int64_t v = x - c->bias;
    e->qg[i] = (int32_t)(v < -vmax - 1 ? -vmax - 1 : v > vmax + 1 ? vmax + 1 : v);
  }
  e->qlo = (int32_t)(x0 - c->bias);
  e->qhi = (int32_t)(x1 - c->bias);
  e->qmul = (int32_t)(m * (256 / p2));
  e->qadd = (int32_t)(uint32_t)(uint64_t)((c->bias * m + h) * (256 / p2) - O * 256);
  e->lq = 1;
}
#endif

/* sdp_i8_lanes.h's LUT form: each channel's clamp of v (the sums x = v + bias where t reaches
 * the plan's t_lo and t_hi), inside which BS does not saturate and |t| <= 2^30 + 2^15. */
static int lanes_lut_channels(const sdp_i8* p, const sdp_i8_lane_lut* P, int32_t guard, int64_t vmax,
                              int32_t first, int32_t count, sdp_i8_lane_cvt* cvt) {
  for (int32_t i = 0; i < count; ++i) {
    const chan_params c = channel_params(p, first + i);
    if (c.mul <= 0 || c.shift > 40) return 0;
    /* x in [xlo, xhi]: t inside [t_lo - step, t_hi + step]; beyond, t's clamp gives the same
     * code. A sum beyond int32 is BS's clamp of it (bs_out: the same t as INT32_MIN / MAX) */
    int ok = 1;
    int64_t xlo = lut_reach(&c, (int64_t)P->t_lo + 1, &ok) - 1, xhi = lut_reach(&c, P->t_hi, &ok);
    if (!ok || xlo > xhi) return 0;
    xlo = xlo > INT32_MIN ? xlo : INT32_MIN;
    xhi = xhi < INT32_MAX ? xhi : INT32_MAX;
    if (!bs_exact_to(&c, xlo < 0 ? -xlo : xlo) || !bs_exact_to(&c, xhi < 0 ? -xhi : xhi))
      return 0;
    /* v clamped so that v + bias stays inside int32 too */
    const int64_t vlo = xlo - c.bias > INT32_MIN ? xlo - c.bias : INT32_MIN;
    const int64_t vhi = xhi - c.bias < INT32_MAX ? xhi - c.bias : INT32_MAX;
    if (vlo + c.bias < xlo || vhi + c.bias > xhi) return 0;
    const int64_t s = c.shift;
    sdp_i8_lane_cvt* e = cvt + i;
    memset(e, 0, sizeof(*e));
    e->vlo = (int32_t)vlo;
    e->vhi = (int32_t)vhi;
    e->bias = (int32_t)c.bias;
    e->mul = (int32_t)c.mul;
    e->k = s >= 17 ? 16 : 0;
    e->add = (int32_t)(s >= 17 ? (int64_t)1 << (s - 17) : s >= 1 ? (int64_t)1 << (s - 1) : 0);
    e->shift = (int32_t)(s >= 17 ? s - 16 : s);
    e->low = (int32_t)(s >= 17 ? 0 : 16 - s);
    e->neg = s >= 1 ? -1 : 0;
#if !SDP_I8_AVX2
    if (p->lut_plan != NULL) lut_byte_form(p->lut_plan, &c, vmax, e);
#endif
    /* the direct form (exact = 1, sdp_i8_lanes.h): u = t - base = (x m' + add' + (x >> 31))
     * >> s' with m' = mul, s' = s, or for s = 0 m' = 2 mul, s' = 1 (rhaz(p, 0) = p = (2p + 1 -
     * (p < 0)) >> 1); add' = 2^(s'-1) - base 2^s'. It holds where x m' + add' - 1 and x m' +
     * add' stay inside int32 over [xlo, xhi] (monotonic in x: the ends suffice). The AVX2
     * build's 8-lane form takes no clamp of t: its base is the plan's middle (sdp_i8_lane_lut_of),
     * which halves |x m' + add'|, and t over [xlo, xhi] must stay inside the guard bins. */
    const int64_t m2 = s == 0 ? 2 * c.mul : c.mul, s2 = s == 0 ? 1 : s;
    const int64_t add2 = ((int64_t)1 << (s2 - 1)) - ((int64_t)P->base << s2);
    const int64_t e_lo = xlo * m2 + add2 - 1, e_hi = xhi * m2 + add2;
#if SDP_I8_AVX2
    const int64_t reach = (int64_t)guard << P->w;
    const int covered = lut_input(&c, xlo) >= (int64_t)P->t_lo - reach &&
                        lut_input(&c, xhi) <= (int64_t)P->t_hi + reach;
    (void)vmax;
#else
    const int covered = 1;
    (void)guard;
#endif
#if !SDP_I8_AVX2
    /* the folded form (exact 2, sdp_i8_lanes.h) over the x the clamp of v to [vlo, vhi] and
     * the caller's bound |v| <= vmax leave, [fx_lo, fx_hi]: q = x m' + 2^(s'-1) - o 2^s' with
     * o the floor form's t at fx_lo, so q lies in [0, 2^32) where that span of t allows
     * (twice the direct form's int32, and the bound narrows it), the bias folded into add
     * modulo 2^32, no rhaz sign term where no tie lands on one of the plan's changes
     * (lut_ties_clear); exact 3 where the bound alone keeps x inside [xlo, xhi] (no clamp) */
    const int64_t vb = vmax < ((int64_t)1 << 40) ? vmax : (int64_t)1 << 40; /* no overflow */
    const int64_t fx_lo = vlo > -vb ? vlo + c.bias : c.bias - vb;
    const int64_t fx_hi = vhi < vb ? vhi + c.bias : c.bias + vb;
    const struct sdp_i8_lut_plan* plan = p->lut_plan;
    if (fx_lo <= fx_hi && s2 <= 30 && plan->changes_count > 0) {
      const int64_t o = (fx_lo * m2 + ((int64_t)1 << (s2 - 1))) >> s2; /* floor */
      const int64_t q_hi = fx_hi * m2 + ((int64_t)1 << (s2 - 1)) - (o << s2);
      if (q_hi <= (int64_t)UINT32_MAX &&
          lut_ties_clear(plan->changes, plan->changes_count, m2, s2, fx_lo, fx_hi)) {
        e->exact = vlo <= -vb && vhi >= vb ? 3 : 2;
        e->k = 0; /* no split form (rows_form, conv/i8.h, reads k: not for a LUT's rows) */
        e->vlo = (int32_t)(fx_lo - c.bias);
        e->vhi = (int32_t)(fx_hi - c.bias);
        e->mul = (int32_t)m2;
        e->add = (int32_t)(uint32_t)(uint64_t)(c.bias * m2 + ((int64_t)1 << (s2 - 1)) - (o << s2));
        e->shift = (int32_t)s2;
        e->low = (int32_t)((int64_t)P->base - o);
        continue;
      }
    }
    /* the 16-bit split form (exact 4, sdp_i8_lanes.h), no clamp of v: for 1 <= s <= 16, every
     * x = v + bias of the bound |v| <= vmax inside int32 and BS exact, u = t - base inside int32
     * at both ends (t is monotonic in x) and no tie on a change over them */
    const int64_t bx_lo = c.bias - vb, bx_hi = c.bias + vb;
    if (s >= 1 && s <= 16 && plan->changes_count > 0 && bx_lo >= INT32_MIN &&
        bx_hi <= INT32_MAX && bs_exact_to(&c, (bx_lo < 0 ? -bx_lo : bx_lo) + 1) &&
        bs_exact_to(&c, (bx_hi < 0 ? -bx_hi : bx_hi) + 1)) {
      const int64_t h = (int64_t)1 << (s - 1);
      const int64_t u_lo = ((bx_lo * c.mul + h) >> s) - P->base;
      const int64_t u_hi = ((bx_hi * c.mul + h) >> s) - P->base;
      if (u_lo >= INT32_MIN && u_hi <= INT32_MAX &&
          lut_ties_clear(plan->changes, plan->changes_count, c.mul, s, bx_lo, bx_hi)) {
        /* v mul + K, K = bias mul + 2^(s-1) - base 2^s = a 2^16 + b, 0 <= b < 2^16 */
        const int64_t K = c.bias * c.mul + h - (int64_t)P->base * ((int64_t)1 << s);
        e->exact = 4;
        e->k = 0;
        e->mul = (int32_t)c.mul;
        e->mulh = (int32_t)((uint32_t)c.mul << 16);
        e->add = (int32_t)(uint32_t)(uint64_t)(K >> 16);
        e->low = (int32_t)(K & 0xFFFF);
        e->shift = (int32_t)s;
        continue;
      }
    }
#endif
    if (s2 <= 30 && e_lo >= INT32_MIN && e_hi <= INT32_MAX && covered) {
      e->exact = 1;
      e->mul = (int32_t)m2;
      e->add = (int32_t)add2;
      e->shift = (int32_t)s2;
    }
  }
  return 1;
}

/* ---- the channels' lane constants kept between calls --------------------------------------
 * lanes_lut_channels costs two divisions and a dozen evaluations of lut_input per channel
 * (lut_reach), in every conv call of a LUT layer: EfficientNet-B0's ~11,000 SiLU channels
 * redid them at every inference. They are a function of the plan's t_lo, t_hi, base (the
 * direct form folds base in), w and guard bins, and of the channels' bias, mul, rshift and the
 * layer's shift_max, so they are kept keyed by those values (compared whole, as the plans are;
 * LANES_SLOTS entries, least recently used out). A network calls its layers in a cycle, so
 * one with more LUT layers than slots missed on every call (YOLOX's 80 with 64 slots): as
 * many slots as conv/i8_lanes_cache.c keeps converters for. */
typedef struct lanes_key {
  int32_t t_lo, t_hi, base, first, count, shift_max, has; /* has: which arrays are given */
  int32_t w, guard;
  int64_t vmax;          /* the caller's bound on |v| (the folded form's range) */
  int32_t changes_count; /* the plan's changes (exact 2 depends on them): their count and */
  uint64_t changes_hash; /* hash (sdp_i8_lut_plan); the changes themselves are compared
                         * whole with the channels' arrays (lanes_params) */
} lanes_key;

typedef struct lanes_slot {
  lanes_key key;
  uint64_t hash, used; /* used: the clock at the last request (0: empty) */
  unsigned char* params; /* the channels' bias, mul, rshift bytes as compared */
  sdp_i8_lane_cvt* cvt;  /* count entries, or NULL: the channels have no lane form */
} lanes_slot;

enum { LANES_SLOTS = 256 };

static struct {
  pthread_mutex_t lock;
  uint64_t clock;
  lanes_slot slot[LANES_SLOTS];
} lanes_cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

static uint64_t fnv_words(uint64_t h, const unsigned char* b, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, b + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* The channels' parameter arrays [first, first + count) (NULL where not given), as kept and
 * compared: bias, mul, rshift bytes one after the other. */
/* The arrays a slot's constants depend on beyond its key: the channels' bias, mul and rshift,
 * and the plan's changes (which of the exact forms the tie check allows: the key holds only
 * their count and hash, and a hash can collide) */
enum { LANES_PARTS = 4 };
typedef struct lanes_params {
  const unsigned char* part[LANES_PARTS];
  size_t bytes[LANES_PARTS], total;
} lanes_params;

static void lanes_params_of(const sdp_i8* p, const struct sdp_i8_lut_plan* P, int32_t first,
                            int32_t count, lanes_params* a) {
  a->part[0] = p->bias != NULL ? (const unsigned char*)(p->bias + first) : NULL;
  a->part[1] = p->mul != NULL ? (const unsigned char*)(p->mul + first) : NULL;
  a->part[2] = p->rshift != NULL ? (const unsigned char*)(p->rshift + first) : NULL;
  a->part[3] = (const unsigned char*)P->changes;
  a->bytes[0] = p->bias != NULL ? (size_t)count * sizeof(int32_t) : 0;
  a->bytes[1] = p->mul != NULL ? (size_t)count * sizeof(int16_t) : 0;
  a->bytes[2] = p->rshift != NULL ? (size_t)count : 0;
  a->bytes[3] = P->changes != NULL ? (size_t)P->changes_count * sizeof(int32_t) : 0;
  a->total = a->bytes[0] + a->bytes[1] + a->bytes[2] + a->bytes[3];
}

/* Whether kept bytes equal the arrays of a */
static int lanes_params_equal(const unsigned char* kept, const lanes_params* a) {
  for (int i = 0; i < LANES_PARTS; ++i) {
    if (a->bytes[i] != 0 && memcmp(kept, a->part[i], a->bytes[i]) != 0) return 0;
    kept += a->bytes[i];
  }
  return 1;
}

/* The plan's constants in lanes (sdp_i8_lanes.h). The AVX2 build's u is t less the bins' middle
 * (a whole number of bins from base: bins points at that bin, and the lanes index it with u >> w
 * of either sign), which keeps the direct form's product inside int32 over twice the range
 * (lanes_lut_channels). */
void sdp_i8_lane_lut_of(const struct sdp_i8_lut_plan* P, sdp_i8_lane_lut* lut) {
  lut->t_lo = P->t_lo;
  lut->t_hi = P->t_hi;
  lut->q = 0; /* sdp_i8_lanes_prepare_lut's, where every channel has the byte form */
  lut->base = P->bytes != NULL ? P->bytes->origin : P->base;
  lut->w = P->w;
  lut->bins = P->bins;
  lut->bytes = P->bytes;
#if SDP_I8_AVX2
  const int64_t middle = P->bins_count / 2;
  lut->base = (int32_t)(P->base + (middle << P->w));
  lut->bins = P->bins + middle;
#endif
}

int sdp_i8_lanes_prepare_lut(const sdp_i8* p, int32_t first, int32_t count, int64_t vmax,
                             sdp_i8_lane_cvt* cvt, sdp_i8_lane_lut* lut) {
  const struct sdp_i8_lut_plan* P = p->lut_plan;
  if (p->lut == NULL || P == NULL || P->multi != 0 || p->ew_op != ACCEL_EW_NONE ||
      p->act == ACCEL_ACT_RELU || p->act == ACCEL_ACT_PRELU || P->t_lo < -(1 << 30) ||
      P->t_hi > (1 << 30) || count <= 0)
    return 0;
  sdp_i8_lane_lut L;
  sdp_i8_lane_lut_of(P, &L);
  lanes_key k;
  memset(&k, 0, sizeof(k));
  k.t_lo = L.t_lo;
  k.t_hi = L.t_hi;
  k.base = L.base;
  k.first = first;
  k.count = count;
  k.shift_max = p->shift_max;
  k.w = P->w;
  k.guard = P->guard;
  k.vmax = vmax;
  k.changes_count = P->changes_count;
  k.changes_hash = P->changes_hash;
  k.has = (p->bias != NULL) | (p->mul != NULL) << 1 | (p->rshift != NULL) << 2;
  lanes_params a;
  lanes_params_of(p, P, first, count, &a);
  uint64_t h = fnv_words(1469598103934665603ull, (const unsigned char*)&k, sizeof(k));
  for (int i = 0; i < LANES_PARTS; ++i) h = fnv_words(h, a.part[i], a.bytes[i]);
  int ok = -1;
  pthread_mutex_lock(&lanes_cache.lock);
  lanes_slot* victim = &lanes_cache.slot[0];
  for (int i = 0; i < LANES_SLOTS; ++i) {
    lanes_slot* s = &lanes_cache.slot[i];
    if (s->used != 0 && s->hash == h && memcmp(&s->key, &k, sizeof(k)) == 0 &&
        lanes_params_equal(s->params, &a)) {
      s->used = ++lanes_cache.clock;
      ok = s->cvt != NULL;
      if (ok) memcpy(cvt, s->cvt, (size_t)count * sizeof(*cvt));
      break;
    }
    if (s->used < victim->used) victim = s;
  }
  pthread_mutex_unlock(&lanes_cache.lock);
  if (ok < 0) { /* not kept yet: computed outside the lock, then kept */
    ok = lanes_lut_channels(p, &L, P->guard, vmax, first, count, cvt);
    if (ok && conv_verbose()) { /* ACCEL_VERBOSE: how many channels have the byte form */
      int32_t n = 0;
      for (int32_t i = 0; i < count; ++i) n += cvt[i].lq;
      fprintf(stderr, "accel_verbose,sdp,int8,lut_lanes,channels%d_byte_form%d\n", (int)count,
              (int)n);
    }
    sdp_i8_lane_cvt* copy = ok ? malloc((size_t)count * sizeof(*cvt)) : NULL;
    unsigned char* params = malloc(a.total + 1);
    if (copy != NULL) memcpy(copy, cvt, (size_t)count * sizeof(*cvt));
    if (params != NULL) {
      unsigned char* at = params;
      for (int i = 0; i < LANES_PARTS; ++i) {
        if (a.bytes[i] != 0) memcpy(at, a.part[i], a.bytes[i]);
        at += a.bytes[i];
      }
    }
    if (params != NULL && (!ok || copy != NULL)) {
      pthread_mutex_lock(&lanes_cache.lock);
      free(victim->params);
      free(victim->cvt);
      victim->key = k;
      victim->hash = h;
      victim->used = ++lanes_cache.clock;
      victim->params = params;
      victim->cvt = copy;
      params = NULL;
      copy = NULL;
      pthread_mutex_unlock(&lanes_cache.lock);
    }
    free(params); /* out of memory: computed, not kept */
    free(copy);
  }
  if (!ok) return 0;
  /* the byte form where every channel has it (sdp_i8_lanes_lut_q) */
  L.q = L.bytes != NULL && L.bytes->up == 0 && L.bytes->g <= 2;
  for (int32_t i = 0; i < count && L.q; ++i) L.q = cvt[i].lq;
  *lut = L;
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
int sdp_i8_lanes_prepare_lut(const sdp_i8* p, int32_t first, int32_t count, int64_t vmax,
                             sdp_i8_lane_cvt* cvt, sdp_i8_lane_lut* lut) {
  (void)p, (void)first, (void)count, (void)vmax, (void)cvt, (void)lut;
  return 0; /* no vector lanes in this build */
}
#endif
