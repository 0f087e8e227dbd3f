/* conv/f32_blas.c - FP32 CONV through OpenBLAS (impl "blas"): im2col tiles and one
 * single-threaded sgemm each. The portable path, last in the list: the only one without AVX-512. */
#include "conv/f32.h"
#ifdef __AVX2__
#include <immintrin.h>
#endif

/* Depth rows [p0, p0+kc) of columns [n0, n0+nt) of the im2col matrix of image-group input
 * img in panels of pw columns (f32.h): each row's positions an output row (and a panel) at a
 * time, the taps inside the plane copied as a run (a strided one at stride 2 and up), the
 * padding's zeros around them; the same values as one bounds check per element (which took
 * three quarters of an x86-64-v3 build's time on MobileNetV3-small). */
void f32_im2col_tile(const conv_plan* P, const float* img, int64_t n0, int64_t nt, int64_t p0,
                     int64_t kc, int64_t pw, float* col) {
  const conv_geometry* g = P->g;
  const int64_t ow = g->out_w, sw = g->stride_w;
  const int64_t S = g->kernel_w, RS = (int64_t)g->kernel_h * S;
  for (int64_t i = 0; i < kc; ++i) {
    const int64_t kk = p0 + i, c = kk / RS, r = kk % RS / S, s = kk % S;
    const float* plane = img + c * P->hw;
    float* panel = col + i * pw; /* row i of column j's panel */
    int64_t y = n0 / ow, x = n0 % ow, jp = 0; /* jp: column j's place in its panel */
    for (int64_t j = 0; j < nt;) {
      int64_t run = ow - x < nt - j ? ow - x : nt - j; /* this output row's, in this panel */
      if (run > pw - jp) run = pw - jp;
      float* d = panel + jp; /* column j */
      const int64_t iy = y * g->stride_h - g->pad_top + r * g->dilation_h;
      const int64_t ix0 = x * sw - g->pad_left + s * g->dilation_w; /* of position x */
      int64_t lo = 0, hi = 0; /* positions [lo, hi) of the run read inside the plane */
      if (iy >= 0 && iy < g->h && ix0 < g->w) {
        lo = ix0 >= 0 ? 0 : (-ix0 + sw - 1) / sw;
        hi = (g->w - 1 - ix0) / sw + 1;
        if (hi > run) hi = run;
        if (lo > hi) lo = hi;
      }
      for (int64_t t = 0; t < lo; ++t) d[t] = 0.0f;
      const int64_t at = iy * g->w + ix0; /* read only for t in [lo, hi) */
      if (sw == 1) {
        for (int64_t t = lo; t < hi; ++t) d[t] = plane[at + t];
      } else {
        int64_t t = lo;
#ifdef __AVX2__
        /* stride 2 (a ResNet stem's and downsampling 3x3's): the even elements of 16 read
         * inside the plane, 8 at a time, where gcc's loop gathered one element a step */
        if (sw == 2)
          for (; t + 8 <= hi && at + 2 * t + 16 <= P->hw; t += 8) {
            const __m256 a = _mm256_loadu_ps(plane + at + 2 * t);
            const __m256 b = _mm256_loadu_ps(plane + at + 2 * t + 8);
            _mm256_storeu_ps(d + t, _mm256_castpd_ps(_mm256_permute4x64_pd(
                                        _mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8)));
          }
#endif
        for (; t < hi; ++t) d[t] = plane[at + t * sw];
      }
      for (int64_t t = hi; t < run; ++t) d[t] = 0.0f;
      j += run;
      x += run;
      jp += run;
      if (jp == pw && j < nt) {
        jp = 0;
        panel += kc * pw;
      }
      if (x == ow) {
        x = 0;
        ++y;
      }
    }
  }
}

/* Portable path: per item, an im2col tile of columns and one single-threaded sgemm into the
 * output, then the epilogue on the tile. */
typedef struct blas_job {
  const conv_plan* P;
  const float* in;
  const float* weights;
  float* out;
  const sdp_f32* ep;
  float* const* cols; /* per participant */
  int64_t nt, tiles, mchunks;
} blas_job;

static void blas_tile_item(void* ctx, int64_t it, int participant) {
  const blas_job* J = ctx;
  const conv_plan* P = J->P;
  const conv_geometry* g = P->g;
  float* col = J->cols[participant];
  const int64_t mchunks = J->mchunks, tiles = J->tiles, nt = J->nt;
  const int64_t mc = it % mchunks, tile = it / mchunks % tiles, bg = it / (mchunks * tiles);
  const int64_t b = bg / g->groups, grp = bg % g->groups;
  const int64_t n0 = tile * nt, ncols = P->ohw - n0 < nt ? P->ohw - n0 : nt;
  const int64_t m0 = P->mg * mc / mchunks, m1 = P->mg * (mc + 1) / mchunks;
  f32_im2col_tile(P, J->in + (b * g->c + grp * P->cg) * P->hw, n0, ncols, 0, P->kd, ncols,
                  col);
  const int64_t ch0 = grp * P->mg + m0;
  scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)(m1 - m0),
                    (blasint)ncols, (blasint)P->kd, 1.0f, J->weights + ch0 * P->kd,
                    (blasint)P->kd, col, (blasint)ncols, 0.0f,
                    J->out + (b * g->k + ch0) * P->ohw + n0, (blasint)P->ohw);
  if (J->ep != NULL)
    for (int64_t ch = ch0; ch < ch0 + m1 - m0; ++ch)
      epilogue_span(J->ep, ch, J->out, (b * g->k + ch) * P->ohw + n0, ncols);
}

static accel_status conv_blas_tiles(const conv_plan* P, const float* in, const float* weights,
                                    float* out, const sdp_f32* ep, workspace* ws,
                                    int num_threads) {
  const conv_geometry* g = P->g;
  int64_t nt = ((int64_t)(256 * 1024) / P->kd) & ~(int64_t)15; /* tile: about 1 MB */
  if (nt < 16) nt = 16;
  if (nt > P->ohw) nt = P->ohw;
  const int64_t tiles = (P->ohw + nt - 1) / nt;
  const int64_t outer = (int64_t)g->n * g->groups * tiles;
  int64_t mchunks = 1;
  while (outer * mchunks < num_threads && mchunks * 16 < P->mg) ++mchunks;
  const int64_t items = outer * mchunks;
  const int nth = (int)(items < num_threads ? items : num_threads);
  float* cols[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    cols[t] = workspace_get(ws, t, (size_t)(P->kd * nt) * sizeof(float));
    if (cols[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  blas_single_threaded();
  blas_job J = {.P = P, .in = in, .weights = weights, .out = out, .ep = ep, .cols = cols, .nt = nt,
                .tiles = tiles, .mchunks = mchunks};
  pool_for(nth, items, blas_tile_item, &J);
  return ACCEL_OK;
}

static int blas_applies(const conv_f32_call* c) {
  (void)c;
  return 1;
}

static accel_status blas_run(const conv_f32_call* c) {
  return conv_blas_tiles(c->P, c->in, c->weights, c->out, c->ep, c->ws, c->nth);
}

const conv_f32_impl conv_f32_blas_impl = {.name = "blas", .applies = blas_applies, .supports = NULL,
                                          .run = blas_run, .dot_tail = NULL};
