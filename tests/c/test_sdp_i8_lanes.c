/* The INT8 converter's lane forms on AVX2 (csrc/sdp_i8_lanes.h: sdp_i8_lanes8_form,
 * sdp_i8_lanes8_add, sdp_i8_lanes8_run) against sdp_one (sdp_i8_span_scalar), bit for bit.
 *
 * The conv kernels call the forms with a bound on their accumulators (vmax) that sdp_i8_span
 * cannot know, so the forms that need one (2-6: no clamp, the conv forms, the bias folded into
 * the accumulators) run only through them; here every form a channel's prepared converter
 * allows runs on values within the bound: random converters shaped as the compiler's (shifts
 * 0..40, multipliers up to 2^15 - 1, biases small and near the int32 range, a BN shifter above
 * the channels' own shifts, every out_zero, CLIP bounds), residual adds with every operand
 * code, and the values +-vmax, 0, +-1 and random ones within the bound. Each form must have run
 * on some converter, so a change of the prepare functions that stops a form cannot pass
 * unnoticed. A LUT activation's lane form (sdp_i8_lanes_prepare_lut, sdp_i8_lanes8_lut_u /
 * _run_lut: every input converter form, its t against sdp_one's too, ties of the rounding
 * included) runs on a smooth table's plan. Built and run by tests/sim/test_sdp_i8_lanes.py
 * with the library's sources.
 * Output: one line per failure, then "N passed, M failed".
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels.h"
#include "sdp_i8_internal.h"
#include "sdp_i8_lanes.h"

/* The conv layer's verbosity switch (csrc/conv/impl.c, not linked here): off. */
int conv_verbose(void) { return 0; }

#ifdef __AVX2__

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static int64_t uniform(int64_t lo, int64_t hi) { /* [lo, hi] */
  return lo + (int64_t)(next() % (uint64_t)(hi - lo + 1));
}

enum { C = 8, N = 203 }; /* channels per case; values per channel (a tail of 11) */

static int passed, failed;
static int form_runs[8], add_runs[5][2];

static void check(const char* what, int form, int lean, int ch, const sdp_i8* p,
                  const int32_t* v, const int8_t* o, const int8_t* got, int64_t n) {
  int8_t want[N];
  sdp_i8_span_scalar(p, ch, v, o, want, n);
  for (int64_t i = 0; i < n; ++i)
    if (got[i] != want[i]) {
      ++failed;
      if (failed <= 20)
        printf("FAIL %s form %d lean %d: channel %d v %d o %d bias %d mul %d rshift %d shift_max "
               "%d out_zero %d: %d, want %d\n",
               what, form, lean, ch, v[i], o != NULL ? o[i] : 0, p->bias[ch], p->mul[ch],
               p->rshift[ch], p->shift_max, p->out_zero, got[i], want[i]);
      return;
    }
  ++passed;
}

/* Random values of one channel within |v| <= vmax, the extremes among them. */
static void values(int32_t* v, int64_t vmax) {
  const int64_t fixed[] = {vmax, -vmax, 0, 1, -1};
  for (int i = 0; i < N; ++i) {
    int64_t x;
    if (i < 5) x = fixed[i];
    else if (i % 3 == 0) x = uniform(-vmax, vmax);
    else x = uniform(-(vmax >> uniform(0, 20)), vmax >> uniform(0, 20));
    v[i] = (int32_t)(x > INT32_MAX ? INT32_MAX : x < INT32_MIN ? INT32_MIN : x);
  }
}

/* One case: C channels' converters as a layer's. */
static void one_case(int index) {
  int32_t bias[C];
  int16_t mul[C];
  uint8_t rshift[C];
  /* a conv's shifts (17..40), else small ones (the direct product), a few apart: a BN
   * shifter far above a channel's shift saturates BS, where no lane form is exact */
  const int64_t s0 = (index / 2) % 4 != 3 ? uniform(19, 40) : uniform(2, 16);
  for (int c = 0; c < C; ++c) {
    rshift[c] = (uint8_t)(s0 - uniform(0, 2));
    mul[c] = (int16_t)(index % 7 == 5 && c == 0 ? 0 : uniform(1, 32767));
    const int64_t b = index % 5 == 4 ? uniform(INT32_MIN / 2, INT32_MAX / 2)
                                       : uniform(-(1 << 20), 1 << 20);
    bias[c] = (int32_t)(c == 1 && index % 6 == 1 ? (index % 12 == 1 ? INT32_MAX : INT32_MIN) : b);
  }
  sdp_i8 p;
  memset(&p, 0, sizeof(p));
  p.bias = bias;
  p.mul = mul;
  p.rshift = rshift;
  p.shift_max = 0;
  for (int c = 0; c < C; ++c) p.shift_max = rshift[c] > p.shift_max ? rshift[c] : p.shift_max;
  if (index % 3 == 2) p.shift_max += (int32_t)uniform(0, 3); /* a BN shifter above them */
  const accel_activation acts[3] = {ACCEL_ACT_NONE, ACCEL_ACT_RELU, ACCEL_ACT_CLIP};
  p.act = acts[index % 3];
  p.out_zero = (int32_t)(index % 4 == 0 ? -128 : uniform(-128, 127));
  p.clip_lo = -128;
  p.clip_hi = 127;
  if (p.act == ACCEL_ACT_CLIP) {
    p.clip_lo = (int32_t)uniform(-128, 0);
    p.clip_hi = (int32_t)uniform(p.clip_lo, 127);
  }
  const int add = index % 2 == 1;
  int8_t opnd[N];
  if (add) {
    p.ew_op = ACCEL_EW_ADD;
    p.ew_zero = (int32_t)uniform(-128, 127);
    p.ew_mul = (int32_t)uniform(1, 32767);
    p.ew_shift = (int32_t)uniform(0, 30);
    if (index % 8 == 1) { /* the compiler's: out_mul 1 (or 0), no output shift */
      p.out_mul = index % 16 == 1 ? 1 : 0;
      p.out_shift = 0;
    } else {
      p.out_mul = (int32_t)uniform(-32768, 32767);
      p.out_shift = (int32_t)uniform(0, 30);
    }
    for (int i = 0; i < N; ++i) opnd[i] = (int8_t)(i < 256 ? i - 128 : uniform(-128, 127));
  }
  const int64_t bounds[4] = {255 * 128 * 9, 255 * 128 * 1152, (int64_t)1 << 30, (int64_t)1 << 31};
  for (int b = 0; b < 4; ++b) {
    const int64_t vmax = bounds[b];
    sdp_i8_lane_cvt cvt[C];
    sdp_i8_lane_add a;
    int8_t lo, hi;
    const int ok = add ? sdp_i8_lanes_prepare_add(&p, 0, C, vmax, cvt, &a, &lo, &hi)
                       : sdp_i8_lanes_prepare(&p, 0, C, vmax, cvt, &lo, &hi);
    if (!ok) continue;
    for (int c = 0; c < C; ++c) {
      int32_t v[N], vb[N];
      int8_t y[N];
      values(v, vmax);
      const sdp_i8_lane_cvt* e = cvt + c;
      if (add) {
        /* forms: 1 any; 2 exact; 3 exact, s <= 16 (no add or shift); 4 exact, s >= 17 */
        const int best = !e->exact ? 1 : e->shift == 0 && e->add == 0 ? 3 : 4;
        for (int f = 1; f <= 4; ++f) {
          if (f > 1 && !e->exact) break;
          if ((f == 3 || f == 4) && f != best) continue;
          for (int lean = 0; lean <= a.lean; ++lean) {
            sdp_i8_lane_add a2 = a;
            a2.lean = lean;
            sdp_i8_lanes8_run(e, &a2, f, lo, hi, v, opnd, y, N);
            check("add", f, lean, c, &p, v, opnd, y, N);
            ++add_runs[f][lean];
          }
        }
        continue;
      }
      const int best = sdp_i8_lane_form(e);
      int forms[8], nf = 0;
      forms[nf++] = 0;
      if (best == 7) forms[nf++] = 7;
      for (int f = 1; f <= 4 && best != 7; ++f)
        if (f <= best) forms[nf++] = f;
      for (int i = 0; i < nf; ++i) {
        sdp_i8_lanes8_run(e, NULL, forms[i], lo, hi, v, NULL, y, N);
        check("cvt", forms[i], 0, c, &p, v, NULL, y, N);
        ++form_runs[forms[i]];
      }
      /* forms 5 and 6: the bias already in the accumulators (exact: v + bias inside int32) */
      if (best >= 3 && best != 7) {
        for (int i = 0; i < N; ++i) vb[i] = v[i] + e->bias;
        const int f = best == 4 ? 5 : 6;
        sdp_i8_lanes8_run(e, NULL, f, lo, hi, vb, NULL, y, N);
        check("cvt", f, 0, c, &p, v, NULL, y, N);
        ++form_runs[f];
        if (best == 4) { /* form 4's channels take form 3 too (so 6) */
          sdp_i8_lanes8_run(e, NULL, 6, lo, hi, vb, NULL, y, N);
          check("cvt", 6, 0, c, &p, v, NULL, y, N);
          ++form_runs[6];
        }
      }
    }
  }
}

/* A LUT activation through sdp_i8_lanes_prepare_lut and sdp_i8_lanes8_run_lut (every input
 * converter form: the direct product, the split ones for s >= 17 and s <= 16): a smooth table
 * (LO a tanh of +-20000, LE and both slopes at LO's first entry, so the codes fall back above
 * LO), channels' converters that spread t over LO, values at the int32 limits too. */
static int lut_runs[3];
static void lut_case(int index) {
  static accel_lut_int8 l;
  for (int i = 0; i < ACCEL_LUT_LO_ENTRIES; ++i) {
    const double x = (i - 128) / 40.0;
    l.lo[i] = (int16_t)(20000.0 * (1.0 - 2.0 / (1.0 + __builtin_exp(2.0 * x))));
  }
  for (int j = 0; j < ACCEL_LUT_LE_ENTRIES; ++j) l.le[j] = l.lo[0];
  l.lo_index_select = 16;
  l.le_index_select = 16;
  l.lo_start = -(1 << 23) + (int32_t)uniform(-1000, 1000);
  l.le_start = l.lo_start - (64 << 16);
  int32_t bias[C];
  int16_t mul[C];
  uint8_t rshift[C];
  const int64_t s0 = index % 3 == 0 ? uniform(17, 24) : index % 3 == 1 ? uniform(1, 16) : 0;
  for (int c = 0; c < C; ++c) {
    rshift[c] = (uint8_t)s0;
    mul[c] = (int16_t)uniform(1, 32767);
    bias[c] = (int32_t)uniform(-(1 << 20), 1 << 20);
  }
  sdp_i8 p;
  memset(&p, 0, sizeof(p));
  p.bias = bias;
  p.mul = mul;
  p.rshift = rshift;
  p.shift_max = (int32_t)s0;
  p.act = ACCEL_ACT_TANH;
  p.lut = &l;
  p.out_mul = 1;
  p.out_shift = 7;
  p.out_zero = (int32_t)uniform(-20, 20);
  p.clip_lo = -128;
  p.clip_hi = 127;
  struct sdp_i8_lut_plan* P = sdp_i8_lut_plan_new(&p, (int64_t)1 << 24);
  if (P == NULL) {
    ++failed;
    printf("FAIL lut case %d: no plan\n", index);
    return;
  }
  p.lut_plan = P;
  sdp_i8_lane_cvt cvt[C];
  sdp_i8_lane_lut L;
  if (sdp_i8_lanes_prepare_lut(&p, 0, C, (int64_t)1 << 31, cvt, &L) && L.bytes == NULL) {
    for (int c = 0; c < C; ++c) {
      int32_t v[N];
      int8_t y[N];
      for (int i = 0; i < N; ++i) { /* t over [-2^24, 2^24]: LO and beyond both ends */
        const int64_t t = uniform(-(1 << 24), 1 << 24);
        int64_t x = (t << s0) / mul[c] - bias[c];
        if (i < 2) x = i == 0 ? INT32_MIN : INT32_MAX;
        if (i >= 2 && i < 34 && s0 >= 1 && s0 <= 16) { /* a tie of rhaz: (x mul) mod 2^s = 2^(s-1) */
          int64_t x0 = x + bias[c];
          for (int64_t k = 0; k < ((int64_t)1 << s0); ++k, ++x0)
            if ((((x0 * mul[c]) % ((int64_t)1 << s0)) + ((int64_t)1 << s0)) % ((int64_t)1 << s0) ==
                ((int64_t)1 << (s0 - 1))) {
              x = x0 - bias[c];
              break;
            }
        }
        v[i] = (int32_t)(x > INT32_MAX ? INT32_MAX : x < INT32_MIN ? INT32_MIN : x);
      }
      /* t itself (u = t - base) against sdp_one's: a wrong rounding of t shows in the codes
       * only where it crosses a code's threshold */
      const chan_params cp = channel_params(&p, c);
      const int form = sdp_i8_lane_lut_form(cvt + c);
      for (int i = 0; i + 8 <= N; i += 8) {
        const __m256i x8 = _mm256_loadu_si256((const __m256i*)(const void*)(v + i));
        const __m256i u8 = form == 2   ? sdp_i8_lanes8_lut_u(cvt + c, &L, x8, 2)
                           : form == 1 ? sdp_i8_lanes8_lut_u(cvt + c, &L, x8, 1)
                                       : sdp_i8_lanes8_lut_u(cvt + c, &L, x8, 0);
        int32_t u[8];
        _mm256_storeu_si256((__m256i*)(void*)u, u8);
        for (int j = 0; j < 8; ++j) {
          const int64_t xc = v[i + j] < cvt[c].vlo ? cvt[c].vlo : v[i + j] > cvt[c].vhi ? cvt[c].vhi : v[i + j];
          /* the direct form: t unclamped, within the plan's guard bins (sdp_i8_lanes8_lut_u) */
          const int64_t t0 = lut_input(&cp, xc + bias[c]);
          const int64_t reach = (int64_t)P->guard << P->w;
          const int64_t t = (form == 2 ? t0 : clamp64(t0, L.t_lo, L.t_hi)) - L.base;
          if (form == 2 && (t0 < L.t_lo - reach || t0 > L.t_hi + reach)) {
            ++failed;
            if (failed <= 20) printf("FAIL lut t form 2: v %d: t %lld beyond the guard bins\n", v[i + j], (long long)t0);
          }
          if (u[j] != t) {
            ++failed;
            if (failed <= 20) printf("FAIL lut t form %d: v %d: u %d, want %lld\n", form, v[i + j], u[j], (long long)t);
          }
        }
      }
      sdp_i8_lanes8_run_lut(cvt + c, &L, v, y, N);
      check("lut", sdp_i8_lane_lut_form(cvt + c), 0, c, &p, v, NULL, y, N);
      ++lut_runs[sdp_i8_lane_lut_form(cvt + c)];
    }
  }
  sdp_i8_lut_plan_free(P);
}

int main(void) {
  printf("AVX2 lanes\n");
  for (int i = 0; i < 60; ++i) lut_case(i);
  for (int f = 0; f < 3; ++f)
    if (lut_runs[f] == 0) {
      ++failed;
      printf("FAIL the LUT's form %d never ran\n", f);
    }
  for (int i = 0; i < 3000; ++i) one_case(i);
  for (int f = 0; f < 8; ++f)
    if (form_runs[f] == 0) {
      ++failed;
      printf("FAIL form %d never ran\n", f);
    }
  for (int f = 1; f <= 4; ++f)
    if (add_runs[f][0] == 0 || (f != 3 && add_runs[f][1] == 0)) {
      ++failed;
      printf("FAIL the residual add's form %d (lean or not) never ran\n", f);
    }
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
#else
/* A build without AVX2 has no 8-lane forms: the preparations decline (sdp_i8_span converts). */
int main(void) {
  int16_t mul = 1;
  uint8_t rshift = 20;
  sdp_i8 p;
  memset(&p, 0, sizeof(p));
  p.mul = &mul;
  p.rshift = &rshift;
  p.shift_max = 20;
  p.clip_lo = -128;
  p.clip_hi = 127;
  sdp_i8_lane_cvt cvt;
  int8_t lo, hi;
  const int ok = sdp_i8_lanes_prepare(&p, 0, 1, 1 << 20, &cvt, &lo, &hi);
  printf("no AVX2\n%d passed, %d failed\n", !ok, ok);
  return ok;
}
#endif
