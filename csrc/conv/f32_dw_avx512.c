/* conv/f32_dw_avx512.c - FP32 depthwise CONV through the padded phase copy, as a 1-D
 * correlation (impl "dw_avx512").
 *
 * - depthwise: 3x3 and 5x5 at stride 1 or 2 by output rows straight from the input plane
 * (blocks of 4 rows share each input row's loads and shifts; 8 when a row is one vector,
 * where measured: two FMA units want 8 chains); other kernels as a 1-D correlation over
 * the same padded phase copy. Both sum the taps in the same order.
 */
#include "conv/f32.h"

#ifdef __AVX512F__
/* ---- depthwise (one input channel per output channel): direct ---------------------------- */

/* With the plane padded and split into stride phases as above, output grid position n (row
 * n / wq) is sum over taps t of w[t] * copy[off[t] + n]: a one-dimensional correlation, four
 * vectors at a time, into a scratch grid that is then compacted into the output plane. */
static void dw_plane(const conv_plan* P, const imp_plan* Q, const float* copy, const int64_t* off,
                     const float* w, float* grid, float* dst) {
  const conv_geometry* g = P->g;
  const int64_t taps = P->kd;
  for (int64_t n = 0; n < Q->ncols; n += 64) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t t = 0; t < taps; ++t) {
      const __m512 wv = _mm512_set1_ps(w[t]);
      const float* b = copy + off[t] + n;
      a0 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(b), a0);
      a1 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(b + 16), a1);
      a2 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(b + 32), a2);
      a3 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(b + 48), a3);
    }
    _mm512_store_ps(grid + n, a0);
    _mm512_store_ps(grid + n + 16, a1);
    _mm512_store_ps(grid + n + 32, a2);
    _mm512_store_ps(grid + n + 48, a3);
  }
  if (Q->wq == g->out_w) {
    memcpy(dst, grid, (size_t)P->ohw * sizeof(float));
  } else {
    for (int64_t y = 0; y < g->out_h; ++y)
      memcpy(dst + y * g->out_w, grid + y * Q->wq, (size_t)g->out_w * sizeof(float));
  }
}

typedef struct dw_job {
  const conv_plan* P;
  const imp_plan* Q;
  const float* in;
  const float* weights;
  float* out;
  const sdp_f32* ep;
  char* const* bufs; /* per participant: copy, grid, offsets */
  size_t copy_bytes, grid_bytes;
  int64_t chunk, planes;
} dw_job;

/* Item: input planes [item * chunk, ...), each to its mg output planes with the epilogue. */
static void dw_item(void* ctx, int64_t item, int participant) {
  const dw_job* J = ctx;
  const conv_plan* P = J->P;
  const conv_geometry* g = P->g;
  char* buf = J->bufs[participant];
  float* copy = (float*)buf;
  float* grid = (float*)(buf + J->copy_bytes);
  const int64_t* off = (const int64_t*)(buf + J->copy_bytes + J->grid_bytes);
  const int64_t p1 = (item + 1) * J->chunk < J->planes ? (item + 1) * J->chunk : J->planes;
  for (int64_t plane = item * J->chunk; plane < p1; ++plane) {
    const int64_t b = plane / g->c, ci = plane % g->c;
    for (int64_t ph = 0; ph < J->Q->nph; ++ph)
      f32_imp_build_plane(P, J->Q, J->in + plane * P->hw, ph, copy);
    for (int64_t j = 0; j < P->mg; ++j) {
      const int64_t k = ci * P->mg + j;
      const int64_t at = (b * g->k + k) * P->ohw;
      dw_plane(P, J->Q, copy, off, J->weights + k * P->kd, grid, J->out + at);
      if (J->ep != NULL) epilogue_span(J->ep, k, J->out, at, P->ohw);
    }
  }
}

static accel_status conv_depthwise(const conv_plan* P, const float* in, const float* weights,
                                   float* out, const sdp_f32* ep, workspace* ws, int num_threads) {
  const conv_geometry* g = P->g;
  imp_plan Q;
  f32_imp_make_plan(P, &Q, 0);
  const int64_t planes = (int64_t)g->n * g->c; /* input planes; each feeds mg outputs */
  const int nth = (int)(planes < num_threads ? planes : num_threads);
  /* the copy reads up to 63 floats past its grid: f32_imp_copy_floats has that slack */
  const size_t copy_bytes = round64((size_t)f32_imp_copy_floats(P, &Q) * sizeof(float));
  const size_t grid_bytes = round64((size_t)(Q.ncols + 64) * sizeof(float));
  const size_t off_bytes = round64((size_t)P->kd * sizeof(int64_t));
  char* bufs[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    bufs[t] = workspace_get(ws, t, copy_bytes + grid_bytes + off_bytes);
    if (bufs[t] == NULL) return ACCEL_ERR_NO_MEMORY;
    float* copy = (float*)bufs[t];
    const int64_t used = Q.nph * Q.plane;
    memset(copy + used, 0, copy_bytes - (size_t)used * sizeof(float));
    f32_imp_offsets(P, &Q, (int64_t*)(bufs[t] + copy_bytes + grid_bytes));
  }

  /* a few planes per item when they are small */
  int64_t chunk = (int64_t)(8192 / (P->ohw * P->mg + 1));
  if (chunk > planes / (4 * nth)) chunk = planes / (4 * nth);
  if (chunk < 1) chunk = 1;
  dw_job J = {.P = P, .Q = &Q, .in = in, .weights = weights, .out = out, .ep = ep, .bufs = bufs,
              .copy_bytes = copy_bytes, .grid_bytes = grid_bytes, .chunk = chunk, .planes = planes};
  pool_for(nth, (planes + chunk - 1) / chunk, dw_item, &J);
  return ACCEL_OK;
}


static int dw_applies(const conv_f32_call* c) { return c->P->cg == 1; }

static accel_status dw_run(const conv_f32_call* c) {
  return conv_depthwise(c->P, c->in, c->weights, c->out, c->ep, c->ws, c->nth);
}

const conv_f32_impl conv_f32_dw_avx512_impl = {.name = "dw_avx512", .applies = dw_applies,
                                               .supports = NULL, .run = dw_run, .dot_tail = NULL};
#endif /* __AVX512F__ */
