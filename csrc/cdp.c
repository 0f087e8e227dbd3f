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
  const cdp_job J = {g, in, out, planes, per_item};
  pool_for(planes * hw > 8192 ? num_threads : 1, (planes + per_item - 1) / per_item, cdp_item,
           (void*)&J);
}
