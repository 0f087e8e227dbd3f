/* pdp_c16.c - the PDP engine's max and average pooling on channel-blocked (C16) fp32 data.
 *
 * Input [n][c/16][h][w][16], output [n][c/16][out_h][out_w][16]: one vector holds a position's
 * 16 channels, so each output vector takes its window's image taps one at a time in pdp.c's
 * order, rows then columns: max as v > acc || v is NaN ? v : acc from -inf (a NaN wins, the
 * last one met; of equal taps, +0 and -0 included, the first met stays), average as the sum
 * from +0 then one division by kernel_h * kernel_w (count_include_pad) or by the window's
 * image taps. pdp.c's paths all give the bits of that order (its header), so these are
 * pdp_f32's bits whatever path it takes. Every geometry pdp.c takes (resolve_pdp's) is taken.
 * Items: bands of output rows of the planes (image, block of 16 channels) in order; the
 * results do not depend on the thread count.
 */
#include <math.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "kernels.h"

#ifdef __AVX512F__

/* Window row r's input row from its tap x0 on (tap s at + s * 16): rowp[r] if rowp is not
 * NULL, else row y0 + r of the plane in. */
static inline const float* window_row(const pdp_geometry* g, const float* in,
                                      const float* const* rowp, int32_t y0, int32_t r,
                                      int32_t x0) {
  return (rowp != NULL ? rowp[r] : in + (int64_t)(y0 + r) * g->w * 16) + (int64_t)x0 * 16;
}

/* Output row oy of one plane (in: its input plane, out: its output row); rowp, if not NULL,
 * holds window row r's input row at rowp[r] (in is then unused). */
static inline __attribute__((always_inline)) void pool_row(const int is_max,
                                                           const pdp_geometry* g,
                                                           const float* in,
                                                           const float* const* rowp,
                                                           float* out, int32_t oy) {
  const float full_window = (float)(g->kernel_h * g->kernel_w);
  int32_t y0, r0, r1;
  pool_window(oy, g->stride_h, g->pad_top, g->kernel_h, g->h, &y0, &r0, &r1);
  for (int32_t ox = 0; ox < g->out_w; ++ox) {
    int32_t x0, s0, s1;
    pool_window(ox, g->stride_w, g->pad_left, g->kernel_w, g->w, &x0, &s0, &s1);
    __m512 acc = _mm512_set1_ps(is_max ? -INFINITY : 0.0f);
    /* max: max_ps(v, acc) (v > acc ? v : acc, ties keep the first) and a sum that turns NaN
     * if a tap is NaN (or with infinities of both signs): then again tap by tap, a NaN v
     * winning */
    __m512 nan_check = _mm512_setzero_ps();
    for (int32_t r = r0; r < r1; ++r) {
      const float* row = window_row(g, in, rowp, y0, r, x0);
      for (int32_t s = s0; s < s1; ++s) {
        const __m512 v = _mm512_loadu_ps(row + s * 16);
        if (is_max) {
          acc = _mm512_max_ps(v, acc);
          nan_check = _mm512_add_ps(nan_check, v);
        } else {
          acc = _mm512_add_ps(acc, v);
        }
      }
    }
    if (is_max && _mm512_cmp_ps_mask(nan_check, nan_check, _CMP_UNORD_Q) != 0) {
      acc = _mm512_set1_ps(-INFINITY);
      for (int32_t r = r0; r < r1; ++r) {
        const float* row = window_row(g, in, rowp, y0, r, x0);
        for (int32_t s = s0; s < s1; ++s) {
          const __m512 v = _mm512_loadu_ps(row + s * 16);
          acc = _mm512_mask_mov_ps(_mm512_max_ps(v, acc),
                                   _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
        }
      }
    }
    if (!is_max)
      acc = _mm512_div_ps(acc, _mm512_set1_ps(g->count_include_pad
                                                  ? full_window
                                                  : (float)((r1 - r0) * (s1 - s0))));
    _mm512_storeu_ps(out + (int64_t)ox * 16, acc);
  }
}

static void max_row(const pdp_geometry* g, const float* in, float* out, int32_t oy) {
  pool_row(1, g, in, NULL, out, oy);
}

static void avg_row(const pdp_geometry* g, const float* in, float* out, int32_t oy) {
  pool_row(0, g, in, NULL, out, oy);
}

typedef struct pool_job {
  const pdp_geometry* g;
  const float* in;
  float* out;
  void (*row)(const pdp_geometry*, const float*, float*, int32_t);
  int64_t rows, per_item; /* output rows of all planes; a band's */
} pool_job;

static void pool_item(void* ctx, int64_t item, int participant) {
  const pool_job* J = ctx;
  const pdp_geometry* g = J->g;
  (void)participant;
  const int64_t in_plane = (int64_t)g->h * g->w * 16, out_row = (int64_t)g->out_w * 16;
  const int64_t end = (item + 1) * J->per_item < J->rows ? (item + 1) * J->per_item : J->rows;
  for (int64_t r = item * J->per_item; r < end; ++r) {
    const int64_t plane = r / g->out_h;
    J->row(g, J->in + plane * in_plane, J->out + r * out_row, (int32_t)(r % g->out_h));
  }
}

void pdp_c16_rows(const pdp_geometry* g, const float* in, float* out, int64_t img, int32_t oy0,
                  int32_t oy1) {
  const int64_t in_plane = (int64_t)g->h * g->w * 16, out_plane = (int64_t)g->out_h * g->out_w * 16;
  for (int64_t plane = img * (g->c / 16); plane < (img + 1) * (g->c / 16); ++plane)
    for (int32_t oy = oy0; oy < oy1; ++oy) {
      float* o = out + plane * out_plane + (int64_t)oy * g->out_w * 16;
      if (g->pool == ACCEL_POOL_MAX) max_row(g, in + plane * in_plane, o, oy);
      else avg_row(g, in + plane * in_plane, o, oy);
    }
}

void pdp_c16_ring_row(const pdp_geometry* g, const float* ring, int32_t ring_rows, float* out,
                      int64_t img, int32_t oy) {
  const float* rowp[PDP_C16_RING_MAX];
  int32_t y0, r0, r1;
  pool_window(oy, g->stride_h, g->pad_top, g->kernel_h, g->h, &y0, &r0, &r1);
  const int64_t row_floats = (int64_t)g->w * 16, out_plane = (int64_t)g->out_h * g->out_w * 16;
  for (int64_t b = 0; b < g->c / 16; ++b) {
    for (int32_t r = r0; r < r1; ++r)
      rowp[r] = ring + (b * ring_rows + (y0 + r) % ring_rows) * row_floats;
    float* o = out + ((img * (g->c / 16) + b) * out_plane + (int64_t)oy * g->out_w * 16);
    if (g->pool == ACCEL_POOL_MAX) pool_row(1, g, NULL, rowp, o, oy);
    else pool_row(0, g, NULL, rowp, o, oy);
  }
}

int pdp_c16_fits(const pdp_geometry* g) {
  return g->c % 16 == 0 && (g->pool == ACCEL_POOL_MAX || g->pool == ACCEL_POOL_AVG);
}

void pdp_c16(const pdp_geometry* g, const float* in, float* out, int32_t num_threads) {
  const int64_t rows = (int64_t)g->n * (g->c / 16) * g->out_h;
  if (rows == 0 || g->out_w == 0) return;
  /* bands of about 2048 taps' vectors; threads as pdp_f32 (past 32768 input floats) */
  const int64_t taps = (int64_t)g->out_w * g->kernel_h * g->kernel_w;
  const int64_t per_item = taps < 2048 ? 2048 / taps : 1;
  const int64_t items = (rows + per_item - 1) / per_item;
  const pool_job J = {.g = g, .in = in, .out = out,
                      .row = g->pool == ACCEL_POOL_MAX ? max_row : avg_row, .rows = rows,
                      .per_item = per_item};
  const int64_t floats = (int64_t)g->n * g->c * g->h * g->w;
  const int threads = floats > 32768 ? (items < num_threads ? (int)items : num_threads) : 1;
  pool_for(threads, items, pool_item, (void*)&J);
}

#endif /* __AVX512F__ (without it device.c runs no C16 kernel) */
