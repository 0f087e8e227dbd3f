/* conv_f32.c - the CONV engine (fp32): convolution with the SDP epilogue fused per tile. */
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>
#include <string.h>

#include "kernels.h"

/* ---- geometry helpers ---------------------------------------------------------------- */

typedef struct conv_plan {
  const conv_geometry* g;
  int64_t cg, mg;        /* input / output channels per group */
  int64_t kd;            /* GEMM depth: cg * kernel_h * kernel_w */
  int64_t hw, ohw;       /* input / output plane sizes */
  int64_t kc;            /* depth block */
} conv_plan;

/* ---- the AVX-512 GEMM micro-kernel ---------------------------------------------------- */

#define MR 8        /* output channels per micro-tile */
#define NV 3        /* 16-float vectors of output positions per micro-tile */
#define NR (NV * 16)

/* c[m][0..16*nv) (+)= sum_k a[m*lda + k] * b[k*16*nv + ..]; the last vector stored under `tail`. */
static inline __attribute__((always_inline)) void ukr_body(const int mr, const int nv, int64_t kc,
                                                           const float* a, int64_t lda,
                                                           const float* b, float* c, int64_t ldc,
                                                           int accumulate, __mmask16 tail) {
  __m512 acc[MR][NV];
  for (int m = 0; m < mr; ++m) {
    for (int v = 0; v < nv; ++v) {
      const __mmask16 mk = v == nv - 1 ? tail : (__mmask16)0xFFFF;
      acc[m][v] = accumulate ? _mm512_maskz_loadu_ps(mk, c + m * ldc + 16 * v) : _mm512_setzero_ps();
    }
  }
  const float* ar[MR];
  for (int m = 0; m < mr; ++m) ar[m] = a + m * lda;
  for (int64_t k = 0; k < kc; ++k) {
    __m512 bv[NV];
    for (int v = 0; v < nv; ++v) bv[v] = _mm512_load_ps(b + 16 * v);
    b += 16 * nv;
    for (int m = 0; m < mr; ++m) {
      const __m512 av = _mm512_set1_ps(ar[m][k]);
      for (int v = 0; v < nv; ++v) acc[m][v] = _mm512_fmadd_ps(av, bv[v], acc[m][v]);
    }
  }
  for (int m = 0; m < mr; ++m) {
    for (int v = 0; v < nv; ++v) {
      const __mmask16 mk = v == nv - 1 ? tail : (__mmask16)0xFFFF;
      _mm512_mask_storeu_ps(c + m * ldc + 16 * v, mk, acc[m][v]);
    }
  }
}

typedef void (*ukr_fn)(int64_t, const float*, int64_t, const float*, float*, int64_t, int,
                       __mmask16);

#define UKR(M_, V_)                                                                        \
  static void ukr_##M_##_##V_(int64_t kc, const float* a, int64_t lda, const float* b,      \
                              float* c, int64_t ldc, int accumulate, __mmask16 tail) {      \
    ukr_body(M_, V_, kc, a, lda, b, c, ldc, accumulate, tail);                               \
  }
#define UKR_ROW(M_) UKR(M_, 1) UKR(M_, 2) UKR(M_, 3)
UKR_ROW(1)
UKR_ROW(2)
UKR_ROW(3)
UKR_ROW(4)
UKR_ROW(5)
UKR_ROW(6)
UKR_ROW(7)
UKR_ROW(8)

static const ukr_fn ukr_table[MR + 1][NV + 1] = {
    {0, 0, 0, 0},
    {0, ukr_1_1, ukr_1_2, ukr_1_3},
    {0, ukr_2_1, ukr_2_2, ukr_2_3},
    {0, ukr_3_1, ukr_3_2, ukr_3_3},
    {0, ukr_4_1, ukr_4_2, ukr_4_3},
    {0, ukr_5_1, ukr_5_2, ukr_5_3},
    {0, ukr_6_1, ukr_6_2, ukr_6_3},
    {0, ukr_7_1, ukr_7_2, ukr_7_3},
    {0, ukr_8_1, ukr_8_2, ukr_8_3},
};

/* ---- im2col packing into NR-wide panels ------------------------------------------------ */

/* A run of panel lanes that map to one output row of one image. */
typedef struct seg {
  const float* img; /* input of this image and group, channel 0 */
  int32_t y, x0, len, lane0;
} seg;

static inline __mmask16 lane_mask(int64_t n) {
  return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
}

static inline void zero_run(float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) _mm512_mask_storeu_ps(dst + i, lane_mask(n - i), _mm512_setzero_ps());
}

/* dst[i] = row[ix0 + i*stride] for i < len, zero where the index leaves [0, w). */
static inline void copy_run(float* dst, const float* row, int64_t ix0, int64_t len, int64_t stride,
                            int64_t w) {
  int64_t lo = 0, hi = len;
  if (ix0 < 0) lo = (-ix0 + stride - 1) / stride;
  if (ix0 > w - 1) {
    hi = 0;
  } else {
    const int64_t last = (w - 1 - ix0) / stride + 1;
    if (last < hi) hi = last;
  }
  if (hi <= lo) {
    zero_run(dst, len);
    return;
  }
  if (lo > 0) zero_run(dst, lo);
  const float* src = row + ix0 + lo * stride;
  const int64_t n = hi - lo;
  float* d = dst + lo;
  if (stride == 1) {
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 mk = lane_mask(n - i);
      _mm512_mask_storeu_ps(d + i, mk, _mm512_maskz_loadu_ps(mk, src + i));
    }
  } else if (stride == 2) {
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    for (int64_t i = 0; i < n; i += 16) {
      const int64_t cnt = n - i < 16 ? n - i : 16;       /* outputs in this chunk */
      const int64_t span = 2 * cnt - 1;                  /* source floats they need */
      const __m512 v0 = _mm512_maskz_loadu_ps(lane_mask(span), src + 2 * i);
      const __m512 v1 = _mm512_maskz_loadu_ps(lane_mask(span > 16 ? span - 16 : 0), src + 2 * i + 16);
      _mm512_mask_storeu_ps(d + i, lane_mask(cnt), _mm512_permutex2var_ps(v0, even, v1));
    }
  } else {
    for (int64_t i = 0; i < n; ++i) d[i] = src[i * stride];
  }
  if (hi < len) zero_run(dst + hi, len - hi);
}

/* Pack depth rows [p0, p0+kc) of the columns described by segs into one panel of width pw. */
static void pack_panel(const conv_plan* P, const seg* segs, int nsegs, int64_t p0, int64_t kc,
                       int64_t pw, float* dst) {
  const conv_geometry* g = P->g;
  const int64_t R = g->kernel_h, S = g->kernel_w, H = g->h, W = g->w;
  int64_t c = p0 / (R * S), r = (p0 / S) % R, s = p0 % S;
  int64_t w = 0;
  for (int i = 0; i < nsegs; ++i) w += segs[i].len;
  for (int64_t kk = 0; kk < kc; ++kk) {
    float* d = dst + kk * pw;
    if (w < pw) zero_run(d + w, pw - w); /* lanes past the last column: masked on store */
    for (int i = 0; i < nsegs; ++i) {
      const seg* sg = &segs[i];
      const int64_t iy = (int64_t)sg->y * g->stride_h - g->pad_top + r * g->dilation_h;
      if (iy < 0 || iy >= H) {
        zero_run(d + sg->lane0, sg->len);
      } else {
        const float* row = sg->img + c * P->hw + iy * W;
        copy_run(d + sg->lane0, row, (int64_t)sg->x0 * g->stride_w - g->pad_left + s * g->dilation_w,
                 sg->len, g->stride_w, W);
      }
    }
    if (++s == S) {
      s = 0;
      if (++r == R) {
        r = 0;
        ++c;
      }
    }
  }
}

/* ---- the GEMM path --------------------------------------------------------------------- */

/* One tile: output channels [m0, m1) of group grp, columns [n0, n0+ncols) of image b. */
static void gemm_tile(const conv_plan* P, const float* in, const float* weights, float* out,
                      const sdp_f32* ep, int64_t b, int64_t grp, int64_t m0, int64_t m1,
                      int64_t n0, int64_t ncols, float* bbuf) {
  const conv_geometry* g = P->g;
  const int64_t ow = g->out_w;
  const float* img = in + (b * g->c + grp * P->cg) * P->hw;
  const int64_t npanels = (ncols + NR - 1) / NR;
  float* cbase = out + (b * g->k + grp * P->mg) * P->ohw + n0;
  const float* abase = weights + grp * P->mg * P->kd;

  for (int64_t p0 = 0; p0 < P->kd; p0 += P->kc) {
    const int64_t kc = P->kd - p0 < P->kc ? P->kd - p0 : P->kc;
    const int last = p0 + kc == P->kd;
    for (int64_t j = 0; j < npanels; ++j) {
      const int64_t c0 = j * NR;
      const int64_t w = ncols - c0 < NR ? ncols - c0 : NR;
      const int64_t pw = (w + 15) / 16 * 16;
      seg segs[NR];
      int nsegs = 0;
      for (int64_t lane = 0; lane < w;) {
        const int64_t n = n0 + c0 + lane;
        const int64_t y = n / ow, x = n % ow;
        int64_t len = ow - x;
        if (len > w - lane) len = w - lane;
        segs[nsegs++] = (seg){img, (int32_t)y, (int32_t)x, (int32_t)len, (int32_t)lane};
        lane += len;
      }
      float* bp = bbuf + j * NR * kc;
      pack_panel(P, segs, nsegs, p0, kc, pw, bp);
    }
    for (int64_t m = m0; m < m1; m += MR) {
      const int64_t mr = m1 - m < MR ? m1 - m : MR;
      for (int64_t j = 0; j < npanels; ++j) {
        const int64_t c0 = j * NR;
        const int64_t w = ncols - c0 < NR ? ncols - c0 : NR;
        const int64_t nv = (w + 15) / 16;
        const __mmask16 tail = lane_mask(w - (nv - 1) * 16);
        ukr_table[mr][nv](kc, abase + m * P->kd + p0, P->kd, bbuf + j * NR * kc,
                          cbase + m * P->ohw + c0, P->ohw, p0 > 0, tail);
      }
      if (last && ep != NULL) {
        for (int64_t i = 0; i < mr; ++i) {
          const int64_t ch = grp * P->mg + m + i;
          const int64_t off = (b * g->k + ch) * P->ohw + n0;
          sdp_f32_span(ep, (int32_t)ch, out + off, ep->ew_operand ? ep->ew_operand + off : NULL,
                       ncols);
        }
      }
    }
  }
}

accel_status conv_f32(const conv_geometry* g, const float* in, const float* weights, float* out,
                      const sdp_f32* epilogue, workspace* ws, int32_t num_threads) {
  conv_plan P;
  P.g = g;
  P.cg = g->c / g->groups;
  P.mg = g->k / g->groups;
  P.kd = P.cg * g->kernel_h * g->kernel_w;
  P.hw = (int64_t)g->h * g->w;
  P.ohw = (int64_t)g->out_h * g->out_w;
  {
    const int64_t kc_max = 320;
    const int64_t nb = (P.kd + kc_max - 1) / kc_max;
    P.kc = (P.kd + nb - 1) / nb;
  }
  if (num_threads < 1) num_threads = 1;
  if (num_threads > WS_THREAD_SLOTS) num_threads = WS_THREAD_SLOTS;

  /* Tiles: split each image's columns into panels groups; add output-channel chunks when there
   * are fewer column tiles than threads. */
  const int64_t panels_img = (P.ohw + NR - 1) / NR;
  int64_t max_panels = (512 * 1024) / (P.kc * NR * 4);
  if (max_panels < 1) max_panels = 1;
  int64_t ntiles = (panels_img + max_panels - 1) / max_panels;
  const int64_t outer = (int64_t)g->n * g->groups;
  while (outer * ntiles % num_threads != 0 && ntiles < panels_img) ++ntiles;
  if (outer * ntiles < num_threads && ntiles < panels_img) ntiles = panels_img;
  int64_t mchunks = 1;
  const int64_t mblocks = (P.mg + MR - 1) / MR;
  while (outer * ntiles * mchunks < num_threads && mchunks < mblocks) ++mchunks;
  const int64_t items = outer * ntiles * mchunks;
  const int64_t tile_panels_max = (panels_img + ntiles - 1) / ntiles;

  float* bufs[WS_THREAD_SLOTS];
  for (int t = 0; t < num_threads; ++t) {
    bufs[t] = workspace_get(ws, t, (size_t)(tile_panels_max * NR * P.kc) * sizeof(float));
    if (bufs[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  const int nth = (int)(items < num_threads ? items : num_threads);

#pragma omp parallel num_threads(nth)
  {
    const int t = omp_get_thread_num();
    const int64_t i0 = items * t / nth, i1 = items * (t + 1) / nth;
    for (int64_t it = i0; it < i1; ++it) {
      const int64_t mc = it % mchunks;
      const int64_t tile = (it / mchunks) % ntiles;
      const int64_t bg = it / (mchunks * ntiles);
      const int64_t b = bg / g->groups, grp = bg % g->groups;
      const int64_t pa = panels_img * tile / ntiles, pb = panels_img * (tile + 1) / ntiles;
      const int64_t n0 = pa * NR;
      const int64_t n1 = pb * NR < P.ohw ? pb * NR : P.ohw;
      const int64_t m0 = mblocks * mc / mchunks * MR;
      int64_t m1 = mblocks * (mc + 1) / mchunks * MR;
      if (m1 > P.mg) m1 = P.mg;
      gemm_tile(&P, in, weights, out, epilogue, b, grp, m0, m1, n0, n1 - n0, bufs[t]);
    }
  }
  return ACCEL_OK;
}
