/* conv/f32_dw_planes.c - the per-plane driver of the FP32 depthwise kernels that compute one
 * output plane at a time from its input plane in place (dw_rows_avx2, dw_rows_avx512): the
 * planes of every image and channel split into pool items, a few planes per item where planes
 * are small, so that a 7x7 layer's items are not one plane's few hundred cycles each.
 */
#include "conv/f32.h"

typedef struct dw_planes_job {
  const conv_plan* P;
  const float* in;
  const float* weights;
  float* out;
  const sdp_f32* ep;
  f32_dw_plane_fn kernel;
  int64_t chunk, planes;
} dw_planes_job;

/* Item: output planes [item * chunk, ...); plane = image * k + channel, each channel reading
 * its group's input plane (k / mg) and its taps (kd of them). */
static void dw_planes_item(void* ctx, int64_t item, int participant) {
  const dw_planes_job* J = ctx;
  const conv_plan* P = J->P;
  const conv_geometry* g = P->g;
  (void)participant;
  const int64_t p1 = (item + 1) * J->chunk < J->planes ? (item + 1) * J->chunk : J->planes;
  for (int64_t plane = item * J->chunk; plane < p1; ++plane) {
    const int64_t b = plane / g->k, k = plane % g->k;
    J->kernel(P, J->in + (b * g->c + k / P->mg) * P->hw, J->weights + k * P->kd, J->out,
              plane * P->ohw, J->ep, k);
  }
}

accel_status f32_dw_planes_run(const conv_f32_call* c, f32_dw_plane_fn kernel) {
  const conv_plan* P = c->P;
  const conv_geometry* g = P->g;
  const int64_t planes = (int64_t)g->n * g->k;
  const int nth = (int)(planes < c->nth ? planes : c->nth);
  int64_t chunk = (int64_t)(8192 / (P->ohw + 1)); /* a few planes per item when they are small */
  if (chunk > planes / (4 * nth)) chunk = planes / (4 * nth);
  if (chunk < 1) chunk = 1;
  dw_planes_job J = {.P = P, .in = c->in, .weights = c->weights, .out = c->out, .ep = c->ep,
                     .kernel = kernel, .chunk = chunk, .planes = planes};
  pool_for(nth, (planes + chunk - 1) / chunk, dw_planes_item, &J);
  return ACCEL_OK;
}
