/* sdp_i8_lut.c - the INT8 SDP converter with a LUT activation: the per-layer plan of codes by
 * input ranges (sdp_i8_lut_plan) and the table in 16 int32 lanes (sdp_i8_span_lut,
 * sdp_i8_channels_lut). Both give sdp_one's codes exactly (sdp_i8.c); the identities are stated
 * at the plan's struct (sdp_i8_internal.h) and at lut_vec below.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "sdp_i8_internal.h"
#include "sdp_i8_lanes.h"

/* The integer LUT itself (accel_lut_int8 in accel.h), exact in int64: the definition every
 * build's conversions (sdp_one, the plans and lanes below, sdp_i8_avx2.c) give the codes of. */

static inline int64_t rhaz64(int64_t p, int64_t s) {
  const int64_t half = s > 0 ? (int64_t)1 << (s - 1) : 0;
  const int64_t a = ((p < 0 ? -p : p) + half) >> s;
  return p < 0 ? -a : a;
}

/* Interpolation between entries i and i + 1 at offset d (>= 0) from the table's start. */
static inline int64_t lut_int8_hit(const int16_t* entries, int64_t d, int32_t select) {
  const int64_t i = d >> select;
  const int64_t r = d & (((int64_t)1 << select) - 1);
  const int64_t f = select >= 16 ? r >> (select - 16) : r << (16 - select);
  return rhaz64((int64_t)entries[i] * (65536 - f) + (int64_t)entries[i + 1] * f, 16);
}

int64_t lut_int8_eval(const accel_lut_int8* l, int64_t t) {
  int64_t y;
  const int64_t lo = t - l->lo_start, le = t - l->le_start;
  const int64_t le_end = (int64_t)l->le_start + ((int64_t)(ACCEL_LUT_LE_ENTRIES - 1)
                                                 << l->le_index_select);
  if (lo >= 0 && lo < ((int64_t)(ACCEL_LUT_LO_ENTRIES - 1) << l->lo_index_select)) {
    y = lut_int8_hit(l->lo, lo, l->lo_index_select);
  } else if (le >= 0 && t < le_end) {
    y = lut_int8_hit(l->le, le, l->le_index_select);
  } else if (le < 0) {
    y = l->le[0] + rhaz64(le * l->underflow_scale, l->underflow_shift);
  } else {
    y = l->le[ACCEL_LUT_LE_ENTRIES - 1] + rhaz64((t - le_end) * l->overflow_scale,
                                                 l->overflow_shift);
  }
  return y < INT32_MIN ? INT32_MIN : y > INT32_MAX ? INT32_MAX : y;
}

#if SDP_I8_VECTOR || SDP_I8_AVX2 /* the plans: both vector builds convert through them */

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

#ifdef __AVX512VBMI__
/* The bins plan's code at t (clamped to the plan's range as its users clamp it). */
static int plan_code(const struct sdp_i8_lut_plan* P, int64_t t) {
  t = clamp64(t, P->t_lo, P->t_hi);
  const int64_t u = t - P->base;
  const uint32_t b = P->bins[u >> P->w];
  const int64_t off = u & (((int64_t)1 << P->w) - 1);
  return (int)(int8_t)(uint8_t)(off >= (int64_t)(b & 0xFFFF) ? b >> 24 : b >> 16);
}

/* sdp_i8_lut_bytes's code at u (the scalar form of sdp_i8_lut_bytes64) */
static int bytes_code(const sdp_i8_lut_bytes* B, int64_t u) {
  const int64_t w = (u < 0 ? 0 : u < B->u_hi ? u : B->u_hi) << B->up;
  const int64_t j = w >> 16, o = w & 0xFFFF;
  uint8_t code = B->f[0][j];
  for (int k = 0; k < B->m; ++k)
    if (o >= (B->f[1 + 3 * k][j] | B->f[2 + 3 * k][j] << 8)) code += B->f[3 + 3 * k][j];
  for (int i = 0; i < B->g; ++i)
    if (u >= B->gt[i]) code += B->gd[i];
  return (int)(int8_t)code;
}

/* With the origin at `origin` and intervals of 2^e, the fewest thresholds outside the
 * intervals' (*g: the changes outside the 256 intervals and those past the first *m of an
 * interval) for the cheapest *m (a threshold per interval costs about twice one outside:
 * three table lookups against one compare of four vectors); *m -1 where none fits. *margin:
 * how far the changes inside the intervals keep from their ends (the nearest one's u, or
 * u_hi + 1 less the last one's), which the byte form of a channel's front needs
 * (sdp_i8_lanes.c's lut_byte_form: a clamp of v that moves t by up to a step of v). */
static void bytes_fit(const int64_t* pos, int64_t n, int64_t origin, int e, int* m, int* g,
                      int64_t* margin) {
  int per[256] = {0};
  const int64_t u_hi = ((int64_t)1 << (e + 8)) - 1;
  int outside = 0;
  int64_t lo = u_hi + 1, hi = -1;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t u = pos[i] - origin;
    if (u < 0 || u > u_hi) {
      ++outside;
      continue;
    }
    lo = u < lo ? u : lo;
    hi = u > hi ? u : hi;
    if ((u & (((int64_t)1 << e) - 1)) != 0) ++per[u >> e];
  }
  *margin = hi < 0 ? u_hi : lo < u_hi + 1 - hi ? lo : u_hi + 1 - hi;
  *m = -1;
  int best = 0;
  for (int mm = 0; mm <= SDP_I8_LUT_BYTES_M; ++mm) {
    int over = outside;
    for (int j = 0; j < 256; ++j) over += per[j] > mm ? per[j] - mm : 0;
    if (over <= SDP_I8_LUT_BYTES_G && (*m < 0 || 2 * mm + over < best)) {
      *m = mm;
      *g = over;
      best = 2 * mm + over;
    }
  }
}

/* The bins plan P (no multi bins) as byte tables into B: 1, or 0 where its changes need more
 * than SDP_I8_LUT_BYTES_M per interval or SDP_I8_LUT_BYTES_G outside the 256 intervals. The
 * changes: where the code at t differs from the code at t - 1 (at a bin's start, or at its
 * threshold); the origin just below one of the first few (those below it are thresholds
 * outside), the widest intervals first, then the fewest thresholds. */
static int bytes_build(const struct sdp_i8_lut_plan* P, sdp_i8_lut_bytes* B) {
  const int64_t count = P->bins_count, width = (int64_t)1 << P->w;
  int64_t* pos = malloc((size_t)(2 * count + 1) * sizeof(int64_t));
  int* delta = malloc((size_t)(2 * count + 1) * sizeof(int));
  if (pos == NULL || delta == NULL) {
    free(pos);
    free(delta);
    return 0;
  }
  int64_t n = 0;
  int prev = plan_code(P, P->base);
  for (int64_t k = 0; k < count; ++k) {
    const int64_t s = P->base + k * width;
    const int gs = plan_code(P, s);
    if (gs != prev) pos[n] = s, delta[n++] = gs - prev;
    const int64_t off = P->bins[k] & 0xFFFF;
    prev = gs;
    if (off != 0 && s + off <= P->t_hi) {
      const int ge = plan_code(P, s + off);
      if (ge != gs) pos[n] = s + off, delta[n++] = ge - gs;
      prev = ge;
    }
  }
  memset(B, 0, sizeof(*B));
  /* the origin just below one of the first changes, or up to 2^15 lower where that costs no
   * more lookups and keeps the changes further from the intervals' ends (the byte form's
   * margin: at least a step of v, up to 2^15 values of t) */
  int e = -1, slots = 0, best = 0;
  int64_t origin = 0, best_margin = -1;
  for (int ee = 16; ee >= 0 && e < 0 && n > 0; --ee)
    for (int i = 0; i <= SDP_I8_LUT_BYTES_G && i < n; ++i)
      for (int64_t d = 0; d <= ((int64_t)1 << 15); d += 256) {
        int m, g;
        int64_t margin;
        bytes_fit(pos, n, pos[i] - 1 - d, ee, &m, &g, &margin);
        if (m >= 0 && (e < 0 || 2 * m + g < best || (2 * m + g == best && margin > best_margin))) {
          e = ee;
          origin = pos[i] - 1 - d;
          slots = m;
          best = 2 * m + g;
          best_margin = margin;
        }
      }
  if (n == 0) e = 16; /* constant codes: B alone */
  int ok = e >= 0;
  if (ok) {
    int per[256] = {0};
    const int64_t u_hi = ((int64_t)1 << (e + 8)) - 1, low = ((int64_t)1 << e) - 1;
    B->origin = (int32_t)(n > 0 ? origin : P->base);
    B->u_hi = (int32_t)u_hi;
    B->up = 16 - e;
    for (int j = 0; j < 256; ++j)
      B->f[0][j] = (uint8_t)plan_code(P, (int64_t)B->origin + ((int64_t)j << e));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t u = pos[i] - B->origin;
      if (u < 0 || u > u_hi) { /* outside: a threshold of its own (below: out of B too) */
        B->gt[B->g] = (int32_t)u;
        B->gd[B->g++] = (uint8_t)delta[i];
        if (u < 0)
          for (int j = 0; j < 256; ++j) B->f[0][j] = (uint8_t)(B->f[0][j] - delta[i]);
      } else if ((u & low) != 0 && per[u >> e] == slots) { /* past the interval's slots: */
        B->gt[B->g] = (int32_t)u;                            /* out of the later starts' B */
        B->gd[B->g++] = (uint8_t)delta[i];
        for (int64_t j = (u >> e) + 1; j < 256; ++j) B->f[0][j] = (uint8_t)(B->f[0][j] - delta[i]);
      } else if ((u & low) != 0) {
        const int64_t j = u >> e, k = per[j]++, t = (u & low) << B->up;
        B->f[1 + 3 * k][j] = (uint8_t)t;
        B->f[2 + 3 * k][j] = (uint8_t)(t >> 8);
        B->f[3 + 3 * k][j] = (uint8_t)delta[i];
        if (per[j] > B->m) B->m = per[j];
      }
    }
    /* a slot whose changes all have one size c (sigmoid's: +1) needs no D lookup: its unused
     * entries become T 0 (always passed) with D c, taken out of B (sdp_i8_lut_bytes.dc) */
    for (int k = 0; k < B->m; ++k) {
      int c = 0, one = 1;
      for (int j = 0; j < 256; ++j)
        if ((B->f[1 + 3 * k][j] | B->f[2 + 3 * k][j]) != 0) {
          one = one && (c == 0 || c == B->f[3 + 3 * k][j]);
          c = B->f[3 + 3 * k][j];
        }
      if (!one || c == 0) continue;
      for (int j = 0; j < 256; ++j)
        if ((B->f[1 + 3 * k][j] | B->f[2 + 3 * k][j]) == 0) {
          B->f[3 + 3 * k][j] = (uint8_t)c;
          B->f[0][j] = (uint8_t)(B->f[0][j] - c);
        }
      B->dc[k] = (uint8_t)c;
    }
    /* a slot whose changes are dlo below interval jr and dhi from it (SiLU's and hardswish's
     * first: -1 then +1 about their minimum) needs no D lookup either: its unused entries
     * become T 0 with the D of their region, taken out of B (sdp_i8_lut_bytes.jr) */
    for (int k = 0; k < B->m; ++k) {
      if (B->dc[k] != 0) continue;
      int n_lo = 0, jr = -1, ok_r = 1;
      uint8_t dlo = 0, dhi = 0;
      for (int j = 0; j < 256 && ok_r; ++j) {
        if ((B->f[1 + 3 * k][j] | B->f[2 + 3 * k][j]) == 0) continue;
        const uint8_t d = B->f[3 + 3 * k][j];
        if (n_lo++ == 0) dlo = d;
        else if (jr < 0 && d != dlo) jr = j, dhi = d;
        else ok_r = d == (jr < 0 ? dlo : dhi);
      }
      if (!ok_r || jr < 0) continue;
      for (int j = 0; j < 256; ++j)
        if ((B->f[1 + 3 * k][j] | B->f[2 + 3 * k][j]) == 0) {
          B->f[3 + 3 * k][j] = j >= jr ? dhi : dlo;
          B->f[0][j] = (uint8_t)(B->f[0][j] - B->f[3 + 3 * k][j]);
        }
      B->jr[k] = (uint8_t)jr;
      B->dlo[k] = dlo;
      B->dhi[k] = dhi;
      B->shape |= 1 << (4 + k);
    }
    /* a slot whose used entries lie in 128 consecutive intervals: a window (SiLU's second) */
    for (int k = 0; k < B->m; ++k) {
      const int own_d = B->dc[k] == 0 && !((B->shape >> (4 + k)) & 1);
      int lo = 256, hi = -1;
      for (int j = 0; j < 256; ++j)
        if ((B->f[1 + 3 * k][j] | B->f[2 + 3 * k][j] | (own_d ? B->f[3 + 3 * k][j] : 0)) != 0) {
          lo = j < lo ? j : lo;
          hi = j;
        }
      const int w0 = lo < 128 ? lo : 128;
      if (hi < 0 || hi >= w0 + 128) continue;
      B->w0[k] = (uint8_t)w0;
      B->shape |= 1 << (8 + k);
    }
    for (int k = 0; k < B->m; ++k) B->shape |= (B->dc[k] != 0) << k;
    /* a slot with no D lookup whose used entries differ in j mod 64: hashed (SiLU's second
     * slot: its five intervals span 67, past one vpermb's 64); the positions no used entry
     * takes keep T 0 with their own interval, j = that position, itself unused (a used one
     * would be there) */
    for (int k = 0; k < B->m; ++k) {
      if (!((B->shape >> k) & 1) && !((B->shape >> (4 + k)) & 1)) continue;
      int taken = 1;
      for (int h = 0; h < 64; ++h) B->hs[k][2][h] = (uint8_t)h;
      uint64_t at = 0;
      for (int j = 0; j < 256 && taken; ++j) {
        if ((B->f[1 + 3 * k][j] | B->f[2 + 3 * k][j]) == 0) continue;
        taken = !((at >> (j & 63)) & 1);
        at |= (uint64_t)1 << (j & 63);
        B->hs[k][0][j & 63] = B->f[1 + 3 * k][j];
        B->hs[k][1][j & 63] = B->f[2 + 3 * k][j];
        B->hs[k][2][j & 63] = (uint8_t)j;
      }
      for (int j = 0; j < 256 && taken; ++j) { /* the kernels' lookup, checked at every j */
        const int own = B->hs[k][2][j & 63] == j;
        taken = (own ? B->hs[k][0][j & 63] : 0) == B->f[1 + 3 * k][j] &&
                (own ? B->hs[k][1][j & 63] : 0) == B->f[2 + 3 * k][j];
      }
      if (taken) B->shape |= 1 << (12 + k);
      else memset(B->hs[k], 0, sizeof(B->hs[k]));
    }
    /* a slot with no T in [1, 255]: the borrow's compare (sdp_i8_lut_bytes.hs's comment) */
    for (int k = 0; k < B->m; ++k) {
      int small = 0;
      for (int j = 0; j < 256; ++j) small |= B->f[2 + 3 * k][j] == 0 && B->f[1 + 3 * k][j] != 0;
      if (!small) B->shape |= 1 << (16 + k);
    }
  }
  /* checked where either form's code can change: the changes, the intervals' starts, the ends */
  const int64_t bottom = (int64_t)P->t_lo - B->origin, top = (int64_t)P->t_hi - B->origin;
  for (int64_t i = 0; ok && i < n; ++i) {
    const int64_t u = pos[i] - B->origin;
    ok = bytes_code(B, u) == plan_code(P, pos[i]) && bytes_code(B, u - 1) == plan_code(P, pos[i] - 1);
  }
  for (int64_t j = 0; ok && j < 256; ++j) {
    const int64_t u = j << (16 - B->up);
    ok = u > top || (bytes_code(B, u) == plan_code(P, B->origin + u) &&
                     bytes_code(B, u - 1) == plan_code(P, B->origin + u - 1));
  }
  ok = ok && bytes_code(B, bottom) == plan_code(P, P->t_lo) &&
       bytes_code(B, top) == plan_code(P, P->t_hi);
  /* the lanes take u = t - origin in int32 (bytes_code above in int64): a plan whose clamp
   * spans more than that keeps its bins */
  ok = ok && bottom >= INT32_MIN && top <= INT32_MAX;
  free(pos);
  free(delta);
  return ok;
}
#endif

static struct sdp_i8_lut_plan* plan_build(const sdp_i8* p, int bins_only) {
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
  /* guard bins (sdp_i8_internal.h): t moves by at most 2^15 per unit of v (an int16
   * multiplier), so a channel's clamp of v leaves t within 2^15 of [t_lo, t_hi]; one more bin
   * for the rounding (lanes_lut_channels checks each channel's reach against them) */
  const int64_t guard = ((int64_t)1 << 15 >> w) + 2 < LUT_PLAN_GUARD ? ((int64_t)1 << 15 >> w) + 2
                                                                       : LUT_PLAN_GUARD;
  const size_t bins_bytes =
      sizeof(struct sdp_i8_lut_plan) + (size_t)(count + 2 * guard) * sizeof(uint32_t);
  /* then the byte tables, then the changes (at most two a bin: its start and its threshold) */
  const size_t changes_at = ((bins_bytes + 7) & ~(size_t)7) + sizeof(sdp_i8_lut_bytes);
  struct sdp_i8_lut_plan* plan = malloc(changes_at + (size_t)(2 * count) * sizeof(int32_t));
  if (plan == NULL) return NULL;
  plan->bytes = NULL;
  plan->changes_count = 0;
  plan->changes = (const int32_t*)(const void*)((const char*)plan + changes_at);
  plan->guard = (int32_t)guard;
  plan->bins = plan->store + guard;
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
  for (int64_t g = 1; g <= guard; ++g) { /* copies of the constant end bins */
    plan->bins[-g] = plan->bins[0];
    plan->bins[count - 1 + g] = plan->bins[count - 1];
  }
  int64_t changes = 0, multi = 0;
  for (int64_t k = 0; k < count; ++k) {
    changes += (plan->bins[k] & 0xFFFF) != 0;
    multi += (plan->bins[k] & 0xFFFF) == LUT_PLAN_MULTI;
  }
  plan->multi = (int32_t)multi;
  if (multi == 0) { /* the changes: a bin's start where its code is not the last bin's end's,
                     * and its threshold */
    int32_t* at = (int32_t*)(void*)((char*)plan + changes_at);
    int32_t n = 0;
    for (int64_t k = 0; k < count; ++k) {
      const uint32_t word = plan->bins[k];
      const uint32_t prev = k > 0 ? plan->bins[k - 1] >> 24 : (word >> 16) & 0xFF;
      if (((word >> 16) & 0xFF) != prev) at[n++] = (int32_t)(base + (k << w));
      if ((word & 0xFFFF) != 0 && ((word >> 16) & 0xFF) != word >> 24)
        at[n++] = (int32_t)(base + (k << w) + (word & 0xFFFF));
    }
    plan->changes_count = n;
  }
  uint64_t h = 1469598103934665603ull;
  for (int32_t i = 0; i < plan->changes_count; ++i)
    h = (h ^ (uint32_t)plan->changes[i]) * 1099511628211ull;
  plan->changes_hash = h;
#ifdef __AVX512VBMI__
  sdp_i8_lut_bytes* bytes = (sdp_i8_lut_bytes*)(void*)((char*)plan + ((bins_bytes + 7) & ~(size_t)7));
  if (multi == 0 && !bins_only && bytes_build(plan, bytes)) plan->bytes = bytes;
#else
  (void)bins_only;
#endif
  if (conv_verbose()) { /* ACCEL_VERBOSE: which path converts the LUT layer */
    /* bytes: the byte tables' changes per interval, -1 without them; g: their thresholds
     * outside the intervals' slots (a compare of the four vectors each); s: their shortcuts
     * (sdp_i8_lut_bytes.shape, hexadecimal) */
    fprintf(stderr,
            "accel_verbose,sdp,int8,lut_plan,bins%lld_w%d_changes%lld_bytes%d_g%d_s%x_multi%lld\n",
            (long long)count, w, (long long)(changes - multi),
            plan->bytes != NULL ? plan->bytes->m : -1, plan->bytes != NULL ? plan->bytes->g : 0,
            plan->bytes != NULL ? (unsigned)plan->bytes->shape : 0u, (long long)multi);
  }
  return plan;
}

/* ---- plans kept between runs -------------------------------------------------------------
 * A plan is a function of what G reads (the table, the output converter, the CLIP bounds),
 * not of the run: a network's LUT layer gets the same plan at every inference. Building one
 * (~2000 bins, each bisected on the scalar definition) cost more than converting many layers'
 * outputs (EfficientNet-B0's SiLU layers built one per run), so plans are kept, keyed by those
 * bytes (compared whole: equal keys are equal functions, whoever allocated the table), with a
 * reference count per run that holds one.
 * A key is planned once the runs that asked for it have converted LUT_PLAN_MIN_ELEMENTS values
 * in all (a layer's first inference, or a tiny layer's later one); until then its runs take
 * the lanes without a plan. A higher bound left a network's small LUT layers (YOLOv8n's at
 * 10x10 and 20x20) without plans for their first few inferences, each then far slower than the
 * steady ones (docs/kernels.md, "Session 20"). The slots hold a large network's LUT layers
 * (EfficientNet-B7 has about 220): with fewer slots than layers, every inference would evict
 * and rebuild them. */
typedef struct plan_key {
  accel_lut_int8 lut;
  int32_t out_mul, out_shift, out_zero, clip, clip_lo, clip_hi;
  int32_t bins_only; /* ACCEL_SDP_I8_LUT=bins: no byte tables (read per run, a plan apart) */
} plan_key;

enum { PLAN_SLOTS = 512 };

typedef struct plan_slot {
  plan_key key;
  uint64_t hash, used;    /* used: the cache's clock at the last request (0: empty slot) */
  int64_t elements;       /* values the requests of this key have asked to convert */
  struct sdp_i8_lut_plan* plan;
  int32_t refs;           /* runs holding plan */
  int32_t failed;         /* plan_build refused this key (NULL): do not retry */
} plan_slot;

static struct {
  pthread_mutex_t lock;
  uint64_t clock;
  plan_slot slot[PLAN_SLOTS];
} plans = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void plan_key_of(const sdp_i8* p, int bins_only, plan_key* k) {
  memset(k, 0, sizeof(*k)); /* padding too: keys are compared and hashed as bytes */
  memcpy(&k->lut, p->lut, sizeof(k->lut));
  k->out_mul = p->out_mul;
  k->out_shift = p->out_shift;
  k->out_zero = p->out_zero;
  k->clip = p->act == ACCEL_ACT_CLIP;
  k->clip_lo = p->clip_lo;
  k->clip_hi = p->clip_hi;
  k->bins_only = bins_only;
}

/* FNV-1a's steps over the key's 8-byte words (a byte at a time, the ~700 bytes were a chain of
 * dependent multiplies in every LUT run's call); the slot compares the bytes whole anyway. */
static uint64_t plan_hash(const plan_key* k) {
  const unsigned char* b = (const unsigned char*)k;
  uint64_t h = 1469598103934665603ull;
  size_t i = 0;
  for (; i + 8 <= sizeof(*k); i += 8) {
    uint64_t w;
    memcpy(&w, b + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < sizeof(*k); ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h; /* only compared for equality (plan_slot_of): no finaliser */
}

/* The slot of key k (inserting it, evicting the least recently used slot no run holds), or
 * NULL when every slot is held; under plans.lock. */
static plan_slot* plan_slot_of(const plan_key* k, uint64_t h) {
  plan_slot* victim = NULL;
  for (int i = 0; i < PLAN_SLOTS; ++i) {
    plan_slot* s = &plans.slot[i];
    if (s->used != 0 && s->hash == h && memcmp(&s->key, k, sizeof(*k)) == 0) return s;
    if (s->refs == 0 && (victim == NULL || s->used < victim->used)) victim = s;
  }
  if (victim == NULL) return NULL;
  free(victim->plan);
  memset(victim, 0, sizeof(*victim));
  victim->key = *k;
  victim->hash = h;
  return victim;
}

struct sdp_i8_lut_plan* sdp_i8_lut_plan_new(const sdp_i8* p, int64_t elements) {
  const char* env = lut_env(); /* "bins": the plan without its byte tables */
  if (p->lut == NULL || (env != NULL && *env != '\0' && strcmp(env, "bins") != 0)) return NULL;
  const int bins_only = env != NULL && strcmp(env, "bins") == 0;
  plan_key k;
  plan_key_of(p, bins_only, &k);
  const uint64_t h = plan_hash(&k);
  pthread_mutex_lock(&plans.lock);
  plan_slot* s = plan_slot_of(&k, h);
  if (s == NULL) { /* every slot held by a run: plan this run alone, as before the cache */
    pthread_mutex_unlock(&plans.lock);
    return elements >= LUT_PLAN_MIN_ELEMENTS ? plan_build(p, bins_only) : NULL;
  }
  s->used = ++plans.clock;
  s->elements += elements;
  if (s->plan == NULL && !s->failed && s->elements >= LUT_PLAN_MIN_ELEMENTS) {
    /* built under the lock: another thread asking for the same key waits for it */
    s->plan = plan_build(p, bins_only);
    s->failed = s->plan == NULL;
  }
  struct sdp_i8_lut_plan* plan = s->plan;
  if (plan != NULL) ++s->refs;
  pthread_mutex_unlock(&plans.lock);
  return plan;
}

void sdp_i8_lut_plan_free(struct sdp_i8_lut_plan* plan) {
  if (plan == NULL) return;
  pthread_mutex_lock(&plans.lock);
  for (int i = 0; i < PLAN_SLOTS; ++i)
    if (plans.slot[i].plan == plan) {
      --plans.slot[i].refs;
      pthread_mutex_unlock(&plans.lock);
      return;
    }
  pthread_mutex_unlock(&plans.lock);
  free(plan); /* built outside the cache */
}

#else
struct sdp_i8_lut_plan* sdp_i8_lut_plan_new(const sdp_i8* p, int64_t elements) {
  return (void)p, (void)elements, NULL; /* no plans without vector lanes */
}
void sdp_i8_lut_plan_free(struct sdp_i8_lut_plan* plan) { (void)plan; }
#endif

#if SDP_I8_VECTOR
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

/* lut_t32_plan's scalars (sdp_i8_internal.h) in 16 lanes */
static void lut_front_plan(const chan_params* c, lut_front* f) {
  lut_t32 t;
  lut_t32_plan(c, &t);
  f->form = t.form;
  f->vmin = _mm512_set1_epi32(t.vmin);
  f->vmax = _mm512_set1_epi32(t.vmax);
  f->bias = _mm512_set1_epi32(t.bias);
  f->mul = _mm512_set1_epi32(t.mul);
  f->low16 = _mm512_set1_epi32(0xFFFF);
  f->add = _mm512_set1_epi32(t.add);
  f->shift = _mm_cvtsi32_si128(t.shift);
  f->left = _mm_cvtsi32_si128(t.left);
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

/* t of the 16 values x (mask k) of channel c: lut_front32 where its bounds hold, else front8's
 * int64 steps (q set up at the first such step) */
static inline __attribute__((always_inline)) __m512i span_t(const sdp_i8* p, const chan_params* c,
                                                            int lanes32, const lut_front* f,
                                                            vec_params* q, int* q_ready,
                                                            __m512i x, __mmask16 k,
                                                            const int8_t* operand, int64_t at) {
  __m512i t = _mm512_setzero_si512();
  int ok = 0;
  if (lanes32) t = lut_front32(f, x, k, &ok);
  if (ok) return t;
  if (!*q_ready) {
    call_params(p, q);
    channel_vectors(c, q);
    *q_ready = 1;
  }
  const __m128i op = p->ew_op != ACCEL_EW_NONE ? _mm_maskz_loadu_epi8(k, operand + at)
                                               : _mm_setzero_si128();
  return lut_front64(p, q, q, x, op);
}

void sdp_i8_span_lut(const sdp_i8* p, int32_t ch, const int32_t* v, const int8_t* operand,
                     int8_t* y, int64_t count) {
  const chan_params c = channel_params(p, ch);
  lut_vec L; /* the table's, set up at its first use (with a plan most calls never need it:
              * a depthwise layer calls once per plane, 49 values at 7x7) */
  int L_ready = 0;
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
#ifdef __AVX512VBMI__
  if (P != NULL && P->bytes != NULL) { /* 64 codes a step through the byte tables */
    const sdp_i8_lut_bytes* B = P->bytes;
    const __m512i origin = _mm512_set1_epi32(B->origin);
    for (int64_t i = 0; i < count; i += 64) {
      __m512i u[4];
      for (int s = 0; s < 4; ++s) {
        const int64_t at = i + 16 * s;
        const __mmask16 k = at < count ? tail_mask(count - at) : 0;
        const __m512i x = _mm512_maskz_loadu_epi32(k, v + at);
        const __m512i t = span_t(p, &c, lanes32, &f, &q, &q_ready, x, k, operand, at);
        u[s] = _mm512_sub_epi32(_mm512_min_epi32(_mm512_max_epi32(t, p_lo), p_hi), origin);
      }
      const int64_t n = count - i;
      _mm512_mask_storeu_epi8(y + i, n >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1,
                              sdp_i8_lut_bytes64(B, u[0], u[1], u[2], u[3]));
    }
    return;
  }
#endif
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 k = tail_mask(count - i);
    const __m512i x = _mm512_maskz_loadu_epi32(k, v + i);
    const __m512i t = span_t(p, &c, lanes32, &f, &q, &q_ready, x, k, operand, i);
    if (P != NULL) {
      const __m512i tc = _mm512_min_epi32(_mm512_max_epi32(t, p_lo), p_hi);
      const __m512i u = _mm512_sub_epi32(tc, p_base);
      const __m512i g = _mm512_i32gather_epi32(_mm512_srl_epi32(u, p_w), P->bins, 4);
      const __m512i off = _mm512_and_si512(g, p_low16);
      if (!_mm512_mask_cmpeq_epi32_mask(k, off, p_multi)) {
        const __mmask16 above = _mm512_cmpge_epi32_mask(_mm512_and_si512(u, p_mask), off);
        const __m512i code = _mm512_srlv_epi32(g, _mm512_mask_blend_epi32(above, p_16, p_24));
        _mm_mask_storeu_epi8(y + i, k, _mm512_cvtepi32_epi8(code));
        continue;
      }
    }
    if (!L_ready) {
      lut_vectors(p, &L);
      L_ready = 1;
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
  bn_lanes(p, q, ch, m);
}

/* sdp_i8_channels with a LUT: front8 with each lane's channel, then the same lut16. */
void sdp_i8_channels_lut(const sdp_i8* p, int32_t first, const int32_t* v,
                         const int8_t* operand, int8_t* y, int64_t count) {
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
#endif
