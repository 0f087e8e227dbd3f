/* cdp.c - the CDP engine: local response normalisation across channels (fp32 data).
 *
 * S, the base and the power run in double: the squares of floats are exact there, and the
 * sum of at most 9 of them, from the lowest channel up, is the NumPy reference's, so the one
 * rounding (of the quotient, to fp32) agrees with it. */
#include <math.h>

#include "kernels.h"

static void normalise_plane(const cdp_geometry* g, const float* image, int32_t c, float* out) {
  const int64_t hw = (int64_t)g->h * g->w;
  /* PyTorch's window: size/2 channels before, (size-1)/2 after, zero outside [0, C). */
  const int32_t first = c - g->local_size / 2 < 0 ? 0 : c - g->local_size / 2;
  const int32_t last = c + (g->local_size - 1) / 2 >= g->c ? g->c - 1 : c + (g->local_size - 1) / 2;
  const float* x = image + (int64_t)c * hw;
  for (int64_t i = 0; i < hw; ++i) {
    double sum = 0.0;
    for (int32_t j = first; j <= last; ++j) {
      const double v = image[(int64_t)j * hw + i];
      sum += v * v;
    }
    /* torch's order: the window's average, times alpha, plus k. */
    const double base = sum / g->local_size * g->alpha + g->k;
    out[i] = (float)((double)x[i] / pow(base, g->beta));
  }
}

/* Planes, a few per pool_for item (about 2,048 outputs each: a pow per output). */
typedef struct cdp_job {
  const cdp_geometry* g;
  const float* in;
  float* out;
  int64_t planes, per_item;
} cdp_job;

static void cdp_item(void* ctx, int64_t item, int participant) {
  const cdp_job* J = ctx;
  const cdp_geometry* g = J->g;
  const int64_t hw = (int64_t)g->h * g->w;
  (void)participant;
  const int64_t end = (item + 1) * J->per_item < J->planes ? (item + 1) * J->per_item : J->planes;
  for (int64_t plane = item * J->per_item; plane < end; ++plane) {
    const int64_t image = plane / g->c;
    normalise_plane(g, J->in + image * g->c * hw, (int32_t)(plane % g->c), J->out + plane * hw);
  }
}

void cdp_f32(const cdp_geometry* g, const float* in, float* out, int32_t num_threads) {
  const int64_t planes = (int64_t)g->n * g->c, hw = (int64_t)g->h * g->w;
  const int64_t per_item = 2048 / (hw + 1) + 1;
  const cdp_job J = {.g = g, .in = in, .out = out, .planes = planes, .per_item = per_item};
  pool_for(planes * hw > 8192 ? num_threads : 1, (planes + per_item - 1) / per_item, cdp_item,
           (void*)&J);
}

/* ---- INT8: NVDLA's CDP bit for bit (accel_cdp_int8 in accel.h; reference.cdp_int8) ---- */

static int64_t sat_bits(int64_t x, int bits) {
  const int64_t hi = ((int64_t)1 << (bits - 1)) - 1;
  return x > hi ? hi : x < -hi - 1 ? -hi - 1 : x;
}

/* x / 2^s rounded half away from zero; |x| < 2^62, so a shift beyond 62 gives 0. */
static int64_t rhaz_cdp(int64_t x, int32_t s) {
  if (s <= 0) return x;
  if (s > 62) return 0;
  const int64_t m = ((x < 0 ? -x : x) + ((int64_t)1 << (s - 1))) >> s;
  return x < 0 ? -m : m;
}

static int64_t cdp_slope(int64_t base, int64_t delta, int32_t scale, int32_t shift) {
  return sat_bits(base + sat_bits(rhaz_cdp(delta * scale, shift), 56), 16);
}

static int64_t cdp_interp(const int16_t* t, int64_t i, int64_t frac) {
  return sat_bits(t[i] + sat_bits(rhaz_cdp(((int64_t)t[i + 1] - t[i]) * frac, 16), 56), 16);
}

/* One table's outcome: -1 under, 1 over, 0 hit (value in *y). */
typedef struct cdp_side {
  int state;
  int64_t y;
} cdp_side;

static int64_t frac16(int64_t rem, int32_t bits) {
  return bits > 16 ? rem >> (bits - 16) : rem << (16 - bits);
}

static cdp_side cdp_linear(const int16_t* t, int32_t entries, int64_t s, int64_t start,
                           int64_t end, int32_t sel, int32_t us, int32_t ush, int32_t os,
                           int32_t osh) {
  const int64_t d = s - start;
  const int64_t index = sel < 0 ? (int64_t)((uint64_t)d << -sel) : d >> sel;
  cdp_side r;
  if (index < 0 || d <= 0) {
    r.state = -1, r.y = cdp_slope(t[0], d, us, ush);
  } else if (index >= entries - 1) {
    r.state = 1, r.y = cdp_slope(t[entries - 1], s - end, os, osh);
  } else {
    const int64_t frac = sel < 0 ? 0 : frac16(d & (((int64_t)1 << sel) - 1), sel);
    r.state = 0, r.y = cdp_interp(t, index, frac);
  }
  return r;
}

static cdp_side cdp_exponent(const accel_cdp_int8* p, int64_t s) {
  const int64_t d = s - p->le_start;
  const int32_t off = p->le_index_offset;
  int64_t index = -1;
  int32_t e = 0;
  if (d > 0) {
    e = 63 - __builtin_clzll((uint64_t)d);
    index = (int64_t)e - off;
  }
  cdp_side r;
  if (index < 0 || d <= 0) {
    const int64_t base = off < 0 ? 0 : (int64_t)1 << off;
    r.state = -1, r.y = cdp_slope(p->le[0], d - base, p->le_uflow_scale, p->le_uflow_shift);
  } else if (index >= ACCEL_LUT_LE_ENTRIES - 1) {
    r.state = 1;
    r.y = cdp_slope(p->le[ACCEL_LUT_LE_ENTRIES - 1], s - p->le_end, p->le_oflow_scale,
                    p->le_oflow_shift);
  } else {
    r.state = 0, r.y = cdp_interp(p->le, index, frac16(d - ((int64_t)1 << e), e));
  }
  return r;
}

static int64_t cdp_lookup(const accel_cdp_int8* p, int64_t s) {
  const cdp_side le = p->le_exponent
      ? cdp_exponent(p, s)
      : cdp_linear(p->le, ACCEL_LUT_LE_ENTRIES, s, p->le_start, p->le_end, p->le_index_select,
                   p->le_uflow_scale, p->le_uflow_shift, p->le_oflow_scale, p->le_oflow_shift);
  const cdp_side lo =
      cdp_linear(p->lo, ACCEL_LUT_LO_ENTRIES, s, p->lo_start, p->lo_end, p->lo_index_select,
                 p->lo_uflow_scale, p->lo_uflow_shift, p->lo_oflow_scale, p->lo_oflow_shift);
  if (le.state == -1 && lo.state == -1) return p->uflow_priority ? lo.y : le.y;
  if (le.state == 1 && lo.state == 1) return p->oflow_priority ? lo.y : le.y;
  if ((le.state == 0) != (lo.state == 0)) return le.state == 0 ? le.y : lo.y;
  return p->hybrid_priority ? lo.y : le.y;
}

typedef struct cdp_i8_job {
  const cdp_geometry* g;
  const accel_cdp_int8* p;
  const int8_t* in;
  int8_t* out;
} cdp_i8_job;

/* One image: the converted inputs of a position's channels, then each channel's window. */
static void cdp_i8_item(void* ctx, int64_t item, int participant) {
  const cdp_i8_job* J = ctx;
  const cdp_geometry* g = J->g;
  const accel_cdp_int8* p = J->p;
  const int64_t hw = (int64_t)g->h * g->w;
  const int64_t image = item / hw, pos = item % hw;
  const int8_t* x = J->in + image * g->c * hw + pos;
  int8_t* out = J->out + image * g->c * hw + pos;
  const int32_t half = g->local_size / 2;
  (void)participant;
  int64_t v[64];
  for (int32_t c0 = 0; c0 < g->c; c0 += 64 - 2 * ACCEL_MAX_CDP_LOCAL_SIZE) {
    /* channels [c0 - half, c0 + span + half) converted into v */
    const int32_t span = g->c - c0 < 64 - 2 * ACCEL_MAX_CDP_LOCAL_SIZE
                             ? g->c - c0 : 64 - 2 * ACCEL_MAX_CDP_LOCAL_SIZE;
    for (int32_t j = 0; j < span + 2 * half; ++j) {
      const int32_t c = c0 - half + j;
      v[j] = c < 0 || c >= g->c ? 0
             : sat_bits(rhaz_cdp(((int64_t)x[c * hw] - p->datin_offset) * p->datin_scale,
                                 p->datin_shift), 9);
    }
    for (int32_t k = 0; k < span; ++k) {
      const int64_t vc = v[k + half];
      int64_t s = 0;
      if (p->sqsum_bypass) {
        s = vc;
      } else {
        for (int32_t j = 0; j <= 2 * half; ++j) s += v[k + j] * v[k + j];
      }
      int64_t y = cdp_lookup(p, s);
      if (!p->mul_bypass) y *= vc;
      y = (int64_t)((uint64_t)y << 39) >> 39; /* the low 25 bits, two's complement */
      out[(int64_t)(c0 + k) * hw] = (int8_t)sat_bits(
          rhaz_cdp((y - p->datout_offset) * p->datout_scale, p->datout_shift), 8);
    }
  }
}

void cdp_i8(const cdp_geometry* g, const accel_cdp_int8* p, const int8_t* in, int8_t* out,
            int32_t num_threads) {
  const int64_t positions = (int64_t)g->n * g->h * g->w;
  const cdp_i8_job J = {.g = g, .p = p, .in = in, .out = out};
  pool_for(positions * g->c > 8192 ? num_threads : 1, positions, cdp_i8_item, (void*)&J);
}
