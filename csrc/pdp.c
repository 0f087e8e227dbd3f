/* pdp.c - the PDP engine: max and average pooling (fp32). */
#include <math.h>

#include "kernels.h"

static void pool_plane(const pdp_geometry* g, const float* in, float* out) {
  const float full_window = (float)(g->kernel_h * g->kernel_w);
  for (int32_t oy = 0; oy < g->out_h; ++oy) {
    int32_t y0, r0, r1;
    pool_window(oy, g->stride_h, g->pad_top, g->kernel_h, g->h, &y0, &r0, &r1);
    for (int32_t ox = 0; ox < g->out_w; ++ox) {
      int32_t x0, s0, s1;
      pool_window(ox, g->stride_w, g->pad_left, g->kernel_w, g->w, &x0, &s0, &s1);
      float acc = g->pool == ACCEL_POOL_MAX ? -INFINITY : 0.0f;
      for (int32_t r = r0; r < r1; ++r) {
        const float* row = in + (int64_t)(y0 + r) * g->w + x0;
        if (g->pool == ACCEL_POOL_MAX) {
          for (int32_t s = s0; s < s1; ++s) {
            acc = (row[s] > acc || row[s] != row[s]) ? row[s] : acc; /* NaN wins, as in NumPy */
          }
        } else {
          for (int32_t s = s0; s < s1; ++s) acc += row[s];
        }
      }
      if (g->pool == ACCEL_POOL_AVG) {
        acc /= g->count_include_pad ? full_window : (float)((r1 - r0) * (s1 - s0));
      }
      out[(int64_t)oy * g->out_w + ox] = acc;
    }
  }
}

void pdp_f32(const pdp_geometry* g, const float* in, float* out, int32_t num_threads) {
  const int64_t planes = (int64_t)g->n * g->c;
  const int64_t in_plane = (int64_t)g->h * g->w, out_plane = (int64_t)g->out_h * g->out_w;
#pragma omp parallel for num_threads(num_threads) schedule(static) if (planes * in_plane > 32768)
  for (int64_t plane = 0; plane < planes; ++plane) {
    pool_plane(g, in + plane * in_plane, out + plane * out_plane);
  }
}
