/* conv/i8_portable.c - INT8 CONV, portable (impl "portable"): the reference-equivalent path,
 * last in the list, run where no other implementation applies and in builds without VNNI. */
#include "conv/i8.h"

/* ---- portable path: direct, one output plane at a time ------------------------------------
 * Each tap adds (in - in_zero) * w over the output columns whose input lies inside the image
 * (padding contributes 0). Accumulators are uint32: int32 arithmetic modulo 2^32, exact as long
 * as the true sum fits int32 (the compiler's bound). Items of the loop (pool_for): output
 * planes (image, channel). */
typedef struct portable_job {
  const plan* P;
  int32_t in_zero;
  const int8_t* in;
  const int8_t* w;
  int8_t* out;
  const sdp_i8* ep;
  uint32_t* const* accs; /* per participant: one output plane of accumulators */
} portable_job;

static void portable_item(void* ctx, int64_t plane, int participant) {
  const portable_job* J = ctx;
  const plan* P = J->P;
  const conv_geometry* g = P->g;
  const int8_t* w = J->w;
  const int32_t in_zero = J->in_zero;
  const int64_t H = g->h, W = g->w, ow = g->out_w, sw = g->stride_w;
  uint32_t* acc = J->accs[participant];
  const int64_t b = plane / g->k, k = plane % g->k, grp = k / P->mg;
  memset(acc, 0, (size_t)P->ohw * sizeof(uint32_t));
  for (int64_t c = 0; c < P->cg; ++c) {
    const int8_t* src = J->in + (b * g->c + grp * P->cg + c) * P->hw;
    for (int64_t r = 0; r < g->kernel_h; ++r)
      for (int64_t s = 0; s < g->kernel_w; ++s) {
        const int32_t wv = w[k * P->kd + c * P->rs + r * g->kernel_w + s];
        if (wv == 0) continue;
        const int64_t dy = r * g->dilation_h - g->pad_top;
        const int64_t dx = s * g->dilation_w - g->pad_left;
        /* output columns with input column ox * sw + dx inside [0, W) */
        int64_t lo = dx >= 0 ? 0 : (-dx + sw - 1) / sw;
        int64_t hi = dx > W - 1 ? 0 : (W - 1 - dx) / sw + 1;
        if (hi > ow) hi = ow;
        if (lo >= hi) continue;
        for (int64_t oy = 0; oy < g->out_h; ++oy) {
          const int64_t iy = oy * g->stride_h + dy;
          if (iy < 0 || iy >= H) continue;
          const int8_t* row = src + iy * W + dx;
          uint32_t* a = acc + oy * ow;
          for (int64_t ox = lo; ox < hi; ++ox)
            a[ox] += (uint32_t)(((int32_t)row[ox * sw] - in_zero) * wv);
        }
      }
  }
  const sdp_i8* ep = J->ep;
  const int64_t at = plane * P->ohw;
  convert_at(ep, k, (const int32_t*)acc, J->out, at, P->ohw);
}

static accel_status conv_portable(const plan* P, int32_t in_zero, const int8_t* in,
                                  const int8_t* w, int8_t* out, const sdp_i8* ep, workspace* ws,
                                  int nth) {
  const conv_geometry* g = P->g;
  const int64_t planes = (int64_t)g->n * g->k;
  if (nth > planes) nth = (int)planes;
  uint32_t* accs[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    accs[t] = workspace_get(ws, t, (size_t)P->ohw * sizeof(uint32_t));
    if (accs[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  const portable_job J = {.P = P, .in_zero = in_zero, .in = in, .w = w, .out = out, .ep = ep,
                          .accs = accs};
  pool_for(nth, planes, portable_item, (void*)&J);
  return ACCEL_OK;
}

static int portable_applies(const conv_i8_call* c) {
  (void)c;
  return 1;
}

static accel_status portable_run(const conv_i8_call* c) {
  return conv_portable(c->P, c->in_zero, c->in, c->raw, c->out, c->ep, c->ws, c->nth);
}

const conv_i8_impl conv_i8_portable_impl = {.name = "portable", .applies = portable_applies,
                                            .supports = NULL, .run = portable_run};
