/* conv/f32_dw_avx2.c - FP32 depthwise CONV with 8-lane FMAs (impl "dw_avx2"): the depthwise
 * path of builds without AVX-512 (x86-64-v3), in conv/f32_order.h's order for depthwise
 * kernels (taps r * kw + s in order, one FMA each from zero, the padding's zeros included), so
 * such a build gives the bits of dw_rows_avx512 and dw_avx512.
 *
 * Each input plane is copied padded and split into its stride phases (as the implicit GEMM's
 * copy, f32_copy_avx512.c): output (y, x) then reads, for tap (r, s), phase plane
 * (r*dh % sh, s*dw % sw) at row y + r*dh / sh, column x + s*dw / sw, so over a grid of
 * out_h x wq positions every tap is the phase plane at a constant offset: a 1-D correlation,
 * 8 vectors at a time (two FMA units of 4 cycles' latency want 8 chains), into a scratch grid
 * whose first out_w columns of each row are the outputs.
 */
#include "conv/f32.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

enum { DW2_V = 8, DW2_N = DW2_V * 8 }; /* vectors and positions of a step */

typedef struct dw2_plan {
  int64_t wq, hq, plane, nph, ncols, ncols_r, copy_floats;
} dw2_plan;

static void dw2_make_plan(const conv_plan* P, dw2_plan* Q) {
  const conv_geometry* g = P->g;
  const int64_t sh = g->stride_h, sw = g->stride_w;
  const int64_t rqmax = ((int64_t)(g->kernel_h - 1) * g->dilation_h) / sh;
  const int64_t sqmax = ((int64_t)(g->kernel_w - 1) * g->dilation_w) / sw;
  Q->wq = g->out_w + sqmax;
  Q->hq = g->out_h + rqmax;
  Q->plane = Q->hq * Q->wq;
  Q->nph = sh * sw;
  Q->ncols = (int64_t)g->out_h * Q->wq;
  Q->ncols_r = (Q->ncols + DW2_N - 1) / DW2_N * DW2_N;
  /* a step's last reads reach ncols_r - ncols + sqmax past the last phase plane */
  Q->copy_floats = Q->nph * Q->plane + (Q->ncols_r - Q->ncols) + sqmax + 8;
}

/* The padded phase copy of one input plane: phase (py, px) holds padded row i * sh + py,
 * column j * sw + px at i * wq + j (zeros outside the image), then zeroed slack. */
static void dw2_copy(const conv_plan* P, const dw2_plan* Q, const float* src, float* dst) {
  const conv_geometry* g = P->g;
  const int64_t sh = g->stride_h, sw = g->stride_w;
  /* rows outermost: the phases of one input row are taken while it is in L1 */
  for (int64_t i = 0; i < Q->hq; ++i)
    for (int64_t py = 0; py < sh; ++py)
      for (int64_t px = 0; px < sw; ++px) {
        float* row = dst + (py * sw + px) * Q->plane + i * Q->wq;
        const int64_t iy = i * sh + py - g->pad_top;
        if (iy < 0 || iy >= g->h) {
          memset(row, 0, (size_t)Q->wq * sizeof(float));
          continue;
        }
        /* columns j with input column j * sw + px - pad_left in [0, w) */
        const int64_t x0 = px - g->pad_left;
        int64_t jlo = x0 >= 0 ? 0 : (-x0 + sw - 1) / sw;
        int64_t jhi = x0 < g->w ? (g->w - 1 - x0) / sw + 1 : 0;
        if (jhi > Q->wq) jhi = Q->wq;
        if (jlo > jhi) jlo = jhi;
        const float* in = src + iy * g->w + x0;
        for (int64_t j = 0; j < jlo; ++j) row[j] = 0.0f;
        if (sw == 1) {
          memcpy(row + jlo, in + jlo, (size_t)(jhi - jlo) * sizeof(float));
        } else {
          int64_t j = jlo;
          if (sw == 2) /* 8 even columns of 16 at a time while the 16 lie in the row */
            for (; j + 8 <= jhi && x0 + 2 * j + 16 <= g->w; j += 8) {
              const __m256 v0 = _mm256_loadu_ps(in + 2 * j), v1 = _mm256_loadu_ps(in + 2 * j + 8);
              const __m256 e = _mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(2, 0, 2, 0));
              _mm256_storeu_ps(row + j, _mm256_castpd_ps(_mm256_permute4x64_pd(
                                            _mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0))));
            }
          for (; j < jhi; ++j) row[j] = in[j * sw];
        }
        for (int64_t j = jhi; j < Q->wq; ++j) row[j] = 0.0f;
      }
  memset(dst + Q->nph * Q->plane, 0, (size_t)(Q->copy_floats - Q->nph * Q->plane) * sizeof(float));
}

/* grid[n] = sum over taps t in order of w[t] * copy[off[t] + n], one FMA each from zero. */
static void dw2_grid(const dw2_plan* Q, int64_t taps, const int64_t* off, const float* copy,
                     const float* w, float* grid) {
  for (int64_t n = 0; n < Q->ncols_r; n += DW2_N) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
           a7 = a0;
    for (int64_t t = 0; t < taps; ++t) {
      const __m256 wv = _mm256_broadcast_ss(w + t);
      const float* b = copy + off[t] + n;
      a0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(b), a0);
      a1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(b + 8), a1);
      a2 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(b + 16), a2);
      a3 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(b + 24), a3);
      a4 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(b + 32), a4);
      a5 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(b + 40), a5);
      a6 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(b + 48), a6);
      a7 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(b + 56), a7);
    }
    _mm256_storeu_ps(grid + n, a0);
    _mm256_storeu_ps(grid + n + 8, a1);
    _mm256_storeu_ps(grid + n + 16, a2);
    _mm256_storeu_ps(grid + n + 24, a3);
    _mm256_storeu_ps(grid + n + 32, a4);
    _mm256_storeu_ps(grid + n + 40, a5);
    _mm256_storeu_ps(grid + n + 48, a6);
    _mm256_storeu_ps(grid + n + 56, a7);
  }
}

typedef struct dw2_job {
  const conv_plan* P;
  const dw2_plan* Q;
  const int64_t* off;
  const float* in;
  const float* weights;
  float* out;
  const sdp_f32* ep;
  float* const* bufs; /* per participant: the copy, then the grid */
} dw2_job;

/* Item = one input plane (image b, channel = group grp) and its mg output channels. */
static void dw2_item(void* ctx, int64_t it, int participant) {
  const dw2_job* J = ctx;
  const conv_plan* P = J->P;
  const dw2_plan* Q = J->Q;
  const conv_geometry* g = P->g;
  const int64_t b = it / g->groups, grp = it % g->groups;
  float* copy = J->bufs[participant];
  float* grid = copy + ((Q->copy_floats + 15) & ~(int64_t)15);
  dw2_copy(P, Q, J->in + (b * g->c + grp) * P->hw, copy);
  for (int64_t m = 0; m < P->mg; ++m) {
    const int64_t ch = grp * P->mg + m;
    float* dst = J->out + (b * g->k + ch) * P->ohw;
    dw2_grid(Q, P->kd, J->off, copy, J->weights + ch * P->kd, grid);
    if (Q->wq == g->out_w) {
      memcpy(dst, grid, (size_t)P->ohw * sizeof(float));
    } else {
      for (int64_t y = 0; y < g->out_h; ++y)
        memcpy(dst + y * g->out_w, grid + y * Q->wq, (size_t)g->out_w * sizeof(float));
    }
    if (J->ep != NULL) epilogue_span(J->ep, ch, J->out, (b * g->k + ch) * P->ohw, P->ohw);
  }
}

static accel_status dw2_run(const conv_f32_call* c) {
  const conv_plan* P = c->P;
  const conv_geometry* g = P->g;
  dw2_plan Q;
  dw2_make_plan(P, &Q);
  /* the taps' offsets into the copy, in tap order */
  int64_t* off = workspace_get(c->ws, WS_THREAD_SLOTS - 1, (size_t)P->kd * sizeof(int64_t));
  if (off == NULL) return ACCEL_ERR_NO_MEMORY;
  for (int64_t r = 0, t = 0; r < g->kernel_h; ++r)
    for (int64_t s = 0; s < g->kernel_w; ++s, ++t) {
      const int64_t ry = r * g->dilation_h, sx = s * g->dilation_w;
      off[t] = ((ry % g->stride_h) * g->stride_w + sx % g->stride_w) * Q.plane +
               ry / g->stride_h * Q.wq + sx / g->stride_w;
    }
  const int64_t items = (int64_t)g->n * g->groups;
  int nth = (int)(items < c->nth ? items : c->nth);
  if (nth > WS_THREAD_SLOTS - 1) nth = WS_THREAD_SLOTS - 1;
  const size_t bytes = (size_t)(((Q.copy_floats + 15) & ~(int64_t)15) + Q.ncols_r) * sizeof(float);
  float* bufs[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    bufs[t] = workspace_get(c->ws, t, bytes);
    if (bufs[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  dw2_job J = {.P = P, .Q = &Q, .off = off, .in = c->in, .weights = c->weights, .out = c->out,
               .ep = c->ep, .bufs = bufs};
  pool_for(nth, items, dw2_item, &J);
  return ACCEL_OK;
}

static int dw2_applies(const conv_f32_call* c) { return c->P->cg == 1; }

const conv_f32_impl conv_f32_dw_avx2_impl = {.name = "dw_avx2", .applies = dw2_applies,
                                             .supports = NULL, .run = dw2_run, .dot_tail = NULL};
#endif /* __AVX2__ && __FMA__ */
