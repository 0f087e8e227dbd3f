/* conv/f32_dw_rows_avx512.c - FP32 depthwise 3x3 and 5x5 CONV by output rows, no copy
 * (impl "dw_rows_avx512").
 *
 * - depthwise: 3x3 and 5x5 at stride 1 or 2 by output rows straight from the input plane
 * (blocks of 4 rows share each input row's loads and shifts; 8 when a row is one vector, or
 * at stride 1 on planes in half the L1d, where measured: two FMA units want 8 chains); other
 * kernels as a 1-D correlation over the same padded phase copy. Both sum the taps in the same
 * order.
 */
#include "conv/f32.h"

#ifdef __AVX512F__
/* ---- depthwise by output rows: no copy of the plane ---------------------------------------- */

/* Output rows computed at once (R: 4, or 8: dwr_kernel says where): each input row is loaded
 * (zeros past the plane's edges) and shifted into its taps once for every row of the block that
 * reads it. A row's sum is a chain of K*K dependent fused multiply-adds; 8 rows keep 8 chains
 * going, which two FMA units of 4 cycles' latency need (docs/kernels.md,
 * conv/f32_dw_rows_avx512.c): rows of one vector, and on Zen 5 stride-1 planes that fit in half
 * the L1d too; wider planes at stride 2 or past half the L1d lost with 8. */
enum { DWR_ROWS = 8 }; /* the most */

/* Output plane (offset `at` of out) of channel ch from input plane src and its taps w, for a
 * K x K kernel at stride ST in both directions, no dilation (compile-time constants: every
 * loop below unrolls, the accumulators and source vectors stay in registers). Each output is
 * sum over taps t = r * K + s, in that order, of w[t] * x (x zero in the padding) by one fused
 * multiply-add each, from zero: the copy-based kernel's sums exactly. Rows past the plane are
 * computed from zeros and not stored. The epilogue runs on finished rows while in L1. PF: the
 * next block's rows prefetched. */
static inline __attribute__((always_inline)) void dwr_body(const int K, const int ST,
                                                           const int R, const int PF,
                                                           const conv_plan* P, const float* src,
                                                           const float* w, float* out, int64_t at,
                                                           const sdp_f32* ep, int64_t ch) {
  const conv_geometry* g = P->g;
  const int64_t H = g->h, W = g->w, oh = g->out_h, ow = g->out_w;
  enum { NI = (DWR_ROWS - 1) * 2 + 9 }; /* input rows of a block, at most (K <= 9, ST <= 2) */
  const int ni = (R - 1) * ST + K;
  const int nq = ST == 1 ? 1 + (K - 1 + 15) / 16 : 1 + ((K - 1) / 2 + 15) / 16 + ((K - 1) & 1);
  const __m512i even = lanes_2x(0), odd = lanes_2x(1);
  float* dst = out + at;
  int64_t ep_row = 0; /* first row the epilogue has not seen */
  for (int64_t y0 = 0; y0 < oh; y0 += R) {
    const int64_t nr = oh - y0 < R ? oh - y0 : R;
    const int64_t iy0 = y0 * ST - g->pad_top;
    for (int64_t x0 = 0; x0 < ow; x0 += 16) {
      const int64_t base = x0 * ST - g->pad_left; /* input column of lane 0, tap 0 */
      __mmask16 cm[2 * SRCV];
#pragma GCC unroll 16
      for (int q = 0; q < nq * ST; ++q) cm[q] = col_mask(base + 16 * q, W);
      __m512 acc[DWR_ROWS];
#pragma GCC unroll 8
      for (int j = 0; j < R; ++j) acc[j] = _mm512_setzero_ps();
#pragma GCC unroll 24
      for (int i = 0; i < ni && i < NI; ++i) {
        const int64_t iy = iy0 + i;
        const int inside = iy >= 0 && iy < H;
        const float* row = src + (inside ? iy * W : 0);
        __m512 ev[SRCV], od[SRCV];
#pragma GCC unroll 8
        for (int q = 0; q < nq; ++q) {
          if (ST == 1) {
            ev[q] = _mm512_maskz_loadu_ps(inside ? cm[q] : 0, row + base + 16 * q);
          } else {
            const __m512 lo = _mm512_maskz_loadu_ps(inside ? cm[2 * q] : 0, row + base + 32 * q);
            const __m512 hi =
                _mm512_maskz_loadu_ps(inside ? cm[2 * q + 1] : 0, row + base + 32 * q + 16);
            ev[q] = _mm512_permutex2var_ps(lo, even, hi);
            od[q] = _mm512_permutex2var_ps(lo, odd, hi);
          }
        }
#pragma GCC unroll 16
        for (int s = 0; s < K; ++s) {
          const __m512 t = ST == 1 ? shifted(ev, s) : shifted((s & 1) ? od : ev, s >> 1);
#pragma GCC unroll 8
          for (int j = 0; j < R; ++j) {
            const int r = i - j * ST;
            if (r >= 0 && r < K) acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(w[r * K + s]), t, acc[j]);
          }
        }
      }
      if (PF) { /* the rows the next block reads first, at this step's columns, on their way
                 * to L1 meanwhile (dwr_kernel says where) */
        const int64_t reach = 16 * ST + K - 1;
        for (int64_t iy = iy0 + ni > 0 ? iy0 + ni : 0; iy < iy0 + ni + R * ST && iy < H; ++iy)
          for (int64_t c = 0; c < reach; c += 16)
            _mm_prefetch((const char*)(src + iy * W + base + c), _MM_HINT_T0);
      }
      const __mmask16 m = lane_mask(ow - x0);
      float* o0 = dst + y0 * ow + x0;
#pragma GCC unroll 8
      for (int j = 0; j < R; ++j)
        if (j < nr) _mm512_mask_storeu_ps(o0 + j * ow, m, acc[j]);
    }
    const int64_t done = y0 + nr;
    if (ep != NULL && ((done - ep_row) * ow >= 1024 || done == oh)) {
      epilogue_span(ep, ch, out, at + ep_row * ow, (done - ep_row) * ow);
      ep_row = done;
    }
  }
}

#define DWR(K_, ST_, R_, PF_)                                                                 \
  static void dwr_##K_##_##ST_##_##R_##_##PF_(const conv_plan* P, const float* src,           \
                                              const float* w, float* out, int64_t at,         \
                                              const sdp_f32* ep, int64_t ch) {                \
    dwr_body(K_, ST_, R_, PF_, P, src, w, out, at, ep, ch);                                   \
  }
#define DWR2(K_, ST_, R_) DWR(K_, ST_, R_, 0) DWR(K_, ST_, R_, 1)
DWR2(3, 1, 4) DWR2(3, 2, 4) DWR2(5, 1, 4) DWR2(5, 2, 4)
DWR2(3, 1, 8) DWR2(3, 2, 8) DWR2(5, 1, 8) DWR2(5, 2, 8)

/* The row kernel for this geometry, or NULL: square 3x3 and 5x5 kernels, strides 1 and 2 in
 * both directions, no dilation (MobileNets', EfficientNets'); the rest take the copy. */
static f32_dw_plane_fn dwr_kernel(const conv_plan* P) {
  const conv_geometry* g = P->g;
  if (g->kernel_h != g->kernel_w || g->stride_h != g->stride_w || g->dilation_h != 1 ||
      g->dilation_w != 1)
    return NULL;
  const int k = g->kernel_h, st = g->stride_h;
  /* the next block's rows prefetched where the plane is over half the L1d (a 112x112 plane:
   * 50 KB), where the hardware prefetchers follow a block's rows badly; on smaller planes the
   * prefetches only cost (docs/kernels.md, conv/f32_dw_rows_avx512.c) */
  const int64_t l1 = P->l1 > 0 ? P->l1 : 32768;
  const int pf = (int64_t)g->h * g->w * (int64_t)sizeof(float) > l1 / 2;
  /* blocks of 8 rows, where measured (two FMA units: see conv_plan.panels_outer): rows of one
   * vector, and at stride 1 planes in half the L1d (4 rows a block are 4 FMA chains a step;
   * Zen 5: 144 x 56x56 x0.86-0.87, 88 x 28x28 x0.89; but 32 x 112x112 x1.15 and at stride 2
   * 72 x 56x56 x1.15, 144 x 56x56 x1.05) */
  const int one = P->panels_outer && (g->out_w <= 16 || (st == 1 && !pf));
#define PICK(K_, ST_)                                                                     \
  (one ? (pf ? dwr_##K_##_##ST_##_8_1 : dwr_##K_##_##ST_##_8_0)                           \
       : (pf ? dwr_##K_##_##ST_##_4_1 : dwr_##K_##_##ST_##_4_0))
  if (k == 3 && st == 1) return PICK(3, 1);
  if (k == 3 && st == 2) return PICK(3, 2);
  if (k == 5 && st == 1) return PICK(5, 1);
  if (k == 5 && st == 2) return PICK(5, 2);
  return NULL;
}

static int dw_rows_applies(const conv_f32_call* c) {
  return c->P->cg == 1 && dwr_kernel(c->P) != NULL;
}

static accel_status dw_rows_run(const conv_f32_call* c) {
  return f32_dw_planes_run(c, dwr_kernel(c->P));
}

const conv_f32_impl conv_f32_dw_rows_avx512_impl = {.name = "dw_rows_avx512",
                                                    .applies = dw_rows_applies, .supports = NULL,
                                                    .run = dw_rows_run, .dot_tail = NULL};
#endif /* __AVX512F__ */
