/* pdp_i8.c - the PDP engine in INT8: max and average pooling with the input's zero point.
 *
 * Max compares codes (the zero point does not change the order; padding never wins). Average:
 * S = sum of (in - zero) over the window's image elements, out = zero + S / d rounded half away
 * from zero, computed exactly as sign(S) * ((2|S| + d) / (2d)). Both walk an output row at a
 * time: for each window tap, one pass over the output columns the tap sees inside the image,
 * which gcc vectorises for stride 1.
 */
#include <stdint.h>

#include "kernels.h"

enum { COLS = 1024 }; /* output columns per pass (a stack row of int32) */

static void pool_rows(const pdp_geometry* g, int32_t zero, const int8_t* in, int8_t* out) {
  const int32_t W = g->w, sw = g->stride_w, kw = g->kernel_w;
  const int is_max = g->pool == ACCEL_POOL_MAX;
  int32_t acc[COLS];
  for (int32_t oy = 0; oy < g->out_h; ++oy) {
    const int32_t y0 = oy * g->stride_h - g->pad_top;
    const int32_t r0 = y0 < 0 ? -y0 : 0;
    const int32_t r1 = y0 + g->kernel_h > g->h ? g->h - y0 : g->kernel_h;
    for (int32_t c0 = 0; c0 < g->out_w; c0 += COLS) {
      const int32_t nc = g->out_w - c0 < COLS ? g->out_w - c0 : COLS;
      for (int32_t j = 0; j < nc; ++j) acc[j] = is_max ? -128 : 0;
      for (int32_t r = r0; r < r1; ++r) {
        const int8_t* row = in + (int64_t)(y0 + r) * W;
        for (int32_t s = 0; s < kw; ++s) {
          /* columns j with input column (c0 + j) * sw - pad_left + s inside [0, W) */
          const int64_t base = (int64_t)c0 * sw - g->pad_left + s;
          int64_t lo = base >= 0 ? 0 : (-base + sw - 1) / sw;
          int64_t hi = base > W - 1 ? 0 : (W - 1 - base) / sw + 1;
          if (hi > nc) hi = nc;
          if (lo >= hi) continue;
          const int8_t* src = row + base;
          if (is_max) {
            if (sw == 1) {
              for (int64_t j = lo; j < hi; ++j) acc[j] = acc[j] > src[j] ? acc[j] : src[j];
            } else {
              for (int64_t j = lo; j < hi; ++j) {
                const int32_t v = src[j * sw];
                acc[j] = acc[j] > v ? acc[j] : v;
              }
            }
          } else {
            if (sw == 1) {
              for (int64_t j = lo; j < hi; ++j) acc[j] += src[j] - zero;
            } else {
              for (int64_t j = lo; j < hi; ++j) acc[j] += src[j * sw] - zero;
            }
          }
        }
      }
      int8_t* dst = out + (int64_t)oy * g->out_w + c0;
      if (is_max) {
        for (int32_t j = 0; j < nc; ++j) dst[j] = (int8_t)acc[j];
        continue;
      }
      for (int32_t j = 0; j < nc; ++j) {
        int32_t d;
        if (g->count_include_pad) {
          d = g->kernel_h * kw;
        } else {
          const int32_t x0 = (c0 + j) * sw - g->pad_left;
          const int32_t s0 = x0 < 0 ? -x0 : 0;
          const int32_t s1 = x0 + kw > W ? W - x0 : kw;
          d = (r1 - r0) * (s1 - s0);
        }
        const int32_t S = acc[j];
        const int32_t a = (2 * (S < 0 ? -S : S) + d) / (2 * d);
        int32_t y = zero + (S < 0 ? -a : a);
        y = y < -128 ? -128 : y > 127 ? 127 : y; /* never needed: the mean stays in range */
        dst[j] = (int8_t)y;
      }
    }
  }
}

void pdp_i8(const pdp_geometry* g, int32_t zero, const int8_t* in, int8_t* out,
            int32_t num_threads) {
  const int64_t planes = (int64_t)g->n * g->c;
  const int64_t in_plane = (int64_t)g->h * g->w, out_plane = (int64_t)g->out_h * g->out_w;
  if (num_threads < 1) num_threads = 1;
#pragma omp parallel for num_threads(num_threads) schedule(static) if (planes * in_plane > 32768)
  for (int64_t plane = 0; plane < planes; ++plane) {
    pool_rows(g, zero, in + plane * in_plane, out + plane * out_plane);
  }
}
