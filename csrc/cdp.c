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

void cdp_f32(const cdp_geometry* g, const float* in, float* out, int32_t num_threads) {
  const int64_t planes = (int64_t)g->n * g->c, hw = (int64_t)g->h * g->w;
#pragma omp parallel for num_threads(num_threads) schedule(static) if (planes * hw > 8192)
  for (int64_t plane = 0; plane < planes; ++plane) {
    const int64_t image = plane / g->c;
    normalise_plane(g, in + image * g->c * hw, (int32_t)(plane % g->c), out + plane * hw);
  }
}
