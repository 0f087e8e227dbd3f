/* conv_f32.c - the CONV engine (fp32): convolution with the SDP epilogue fused per tile.
 *
 * Paths, chosen by measurement (figures: docs/kernels.md). All GEMM-like paths compute
 * out[k][pos] = sum over depth of w[k][d] * col[d][pos] with AVX-512 micro-kernels over 48
 * positions (positions along the vectors, so results land in NCHW rows directly): 8 channels
 * (24 accumulators) on the implicit GEMM, 4 channels with the running totals of the 32-deep
 * blocks in 12 more registers on packed panels:
 *  - implicit GEMM: the input is copied once per call, zero-padded and split into its stride
 *    phases (a 1x1 kernel's one phase only: a 1x1/2 downsample copies a quarter), so that
 *    every depth row (c, r, s) of the im2col matrix is that copy at a constant offset; the
 *    kernel reads it in place over a grid of out_h rows of wq >= out_w columns and stores each
 *    vector's outputs past the few garbage columns. Used where the garbage is
 *    < 1/12 and the depth <= 2304 (a deeper weight panel no longer streams well from L2); with
 *    stride-2 phases only up to 1024 deep (512 where the packed panels stay in L1, below).
 *    Where the packed panels stay in L1 (measured on Sapphire Rapids), a tile's first block of
 *    channels reading the input in place fetches each next panel's rows (the input comes from
 *    L3 or memory), and a panel 96-170 deep of a tile with >= 16 channel blocks is copied into
 *    a contiguous buffer that stays in L1 while the blocks pass over it (the same sums).
 *  - packed: im2col per tile into 48-wide panels (vector shifts for stride 1 and 2), weights
 *    read in place and the next block's prefetched. The depth is blocked by a multiple of 32
 *    (so the 32-deep sums start at the same depths whatever the block, and the bits do not
 *    depend on it): by up to 512, channel blocks outermost, so the kernel's weight rows stay in
 *    L1 (measured on Zen 4, 32 KB L1d); where a 48 x 128 panel fits in half the L1d (sysconf:
 *    48 KB on Sapphire Rapids) by up to 128, panels outermost, each panel staying in L1 while
 *    the channels pass over it in passes of 128 KB of weights, and threads split a layer's
 *    channels rather than its image when it has more channels than positions. A tile of one
 *    panel (a 7x7 image) up to 2048 deep with >= 4 MB of weights packs every block first and
 *    runs them inside passes of 16 channels: it reads each weight once, each row front to back
 *    (4 KB pages, few TLB misses). Without panels (<= 8 positions an image) the whole depth in
 *    one block.
 *    An image's last < 16 positions are dot products along the depth instead of a mostly
 *    empty vector.
 *  - depthwise: 3x3 and 5x5 at stride 1 or 2 by output rows straight from the input plane
 *    (blocks of 4 rows share each input row's loads and shifts; 8 when a row is one vector,
 *    where measured: two FMA units want 8 chains); other kernels as a 1-D correlation over
 *    the same padded phase copy. Both sum the taps in the same order.
 *  - OpenBLAS (scipy-openblas32): batched fully connected layers (one output position per
 *    image), and the portable path without AVX-512. Not for convolutions: its thread pool and
 *    ours would spin against each other.
 * The epilogue (sdp_f32_span) runs on each block of 8 channels' finished outputs of a tile,
 * while they are in L1/L2; the implicit GEMM applies the one-pass epilogues (scale, shift, add,
 * ReLU / clip) in registers before its store instead, in the same order. Every output is summed in an order fixed by the geometry alone, so
 * results do not depend on the thread count, and fused equals unfused bit for bit.
 * Threads: pool.c's loops (the caller claims items with whichever workers are awake; no
 * OpenMP, whose idle threads spin and whose barriers wait for a descheduled thread); work
 * split in (positions x channel blocks), OpenBLAS kept at one thread. Scratch: workspace slots
 * only, reserved before the parallel loops; a participant's slot is its number.
 */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "kernels.h"

#ifndef CONV_KC_MAX
#define CONV_KC_MAX 512 /* depth block of the packed path: 8 weight rows of it stay in L1 */
#endif
/* Depth block of the packed path where a 48-wide panel of CONV_KC_L1 rows (24 KB) fits in half
 * the L1 data cache (48 KB on Intel's Golden Cove cores): the panel then stays in L1 while every
 * block of output channels passes over it, panels outermost. With a smaller L1 (32 KB on Zen 4)
 * neither depth keeps a panel there, and CONV_KC_MAX with channel blocks outermost measured
 * faster (docs/whole_network_time.md). */
#ifndef CONV_KC_L1
#define CONV_KC_L1 128
#endif

typedef struct conv_plan {
  const conv_geometry* g;
  int64_t cg, mg; /* input / output channels per group */
  int64_t kd;     /* GEMM depth: cg * kernel_h * kernel_w */
  int64_t hw, ohw; /* input / output plane sizes */
  int64_t kc;     /* depth block of the packed path: a multiple of 32 (SUM_BLOCK) below kd, so
                   * the 32-deep sums start at the same depths whatever it is */
  int panels_outer; /* a 48 x CONV_KC_L1 panel fits in half the L1d (l1_keeps_panel): the
                     * packed path's panels stay in L1, outermost. The choices measured on the
                     * one such machine (Sapphire Rapids, whose two 512-bit FMA units came with
                     * it) key on it too; with 32 KB (Zen 4) the old ones stay. */
  int pointwise;  /* 1x1, stride 1, no padding: output position n reads input position n */
} conv_plan;

static void epilogue_span(const sdp_f32* ep, int64_t ch, float* out, int64_t at, int64_t count) {
  sdp_f32_span(ep, (int32_t)ch, out + at, ep->ew_operand != NULL ? ep->ew_operand + at : NULL,
               count);
}

/* ---- OpenBLAS paths -------------------------------------------------------------------- */

/* One threading layer: pool.c. OpenBLAS runs single-threaded inside our parallel loops.
 * This build of scipy-openblas32 declares scipy_openblas_set_num_threads_local but does not
 * export it, so the (process-wide) count is set to 1, once, and left there. */
static void blas_single_threaded(void) {
  if (scipy_openblas_get_num_threads() != 1) scipy_openblas_set_num_threads(1);
}

/* Depth rows [p0, p0+kc) of the im2col column of output position (y, x) of image-group input
 * img, zero-padded to a multiple of 16. */
static void pack_col(const conv_plan* P, const float* img, int64_t y, int64_t x, int64_t p0,
                     int64_t kc, float* dst) {
  const conv_geometry* g = P->g;
  const int64_t S = g->kernel_w, RS = (int64_t)g->kernel_h * S;
  int64_t c = p0 / RS, r = (p0 % RS) / S, s = p0 % S;
  const int64_t y0 = y * g->stride_h - g->pad_top, x0 = x * g->stride_w - g->pad_left;
  for (int64_t kk = 0; kk < kc; ++kk) {
    const int64_t iy = y0 + r * g->dilation_h, ix = x0 + s * g->dilation_w;
    dst[kk] = iy >= 0 && iy < g->h && ix >= 0 && ix < g->w ? img[c * P->hw + iy * g->w + ix] : 0.0f;
    if (++s == S) {
      s = 0;
      if (++r == g->kernel_h) {
        r = 0;
        ++c;
      }
    }
  }
  for (int64_t kk = kc; kk & 15; ++kk) dst[kk] = 0.0f;
}

/* Columns [n0, n0+nt) of the im2col matrix of image-group input img, as rows of nt. */
static void im2col_tile(const conv_plan* P, const float* img, int64_t n0, int64_t nt, float* col) {
  const conv_geometry* g = P->g;
  const int64_t ow = g->out_w;
  int64_t kk = 0;
  for (int64_t c = 0; c < P->cg; ++c)
    for (int64_t r = 0; r < g->kernel_h; ++r)
      for (int64_t s = 0; s < g->kernel_w; ++s, ++kk) {
        float* d = col + kk * nt;
        const float* plane = img + c * P->hw;
        int64_t y = n0 / ow, x = n0 % ow;
        for (int64_t j = 0; j < nt; ++j) {
          const int64_t iy = y * g->stride_h - g->pad_top + r * g->dilation_h;
          const int64_t ix = x * g->stride_w - g->pad_left + s * g->dilation_w;
          d[j] = iy >= 0 && iy < g->h && ix >= 0 && ix < g->w ? plane[iy * g->w + ix] : 0.0f;
          if (++x == ow) {
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
  im2col_tile(P, J->in + (b * g->c + grp * P->cg) * P->hw, n0, ncols, col);
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
  blas_job J = {P, in, weights, out, ep, cols, nt, tiles, mchunks};
  pool_for(nth, items, blas_tile_item, &J);
  return ACCEL_OK;
}

/* One output position per image (fully connected as a convolution) with a batch: per group,
 * out[b][k] = sum_kk w[k][kk] * col_b[kk], as sgemms over chunks of output channels, W (the
 * big operand) as the row matrix: t[k][b] = W x cols^T (measured 85 GFLOP/s against 37 for
 * out = cols x W^T, whose weight copying dominates), then transposed into the output with the
 * epilogue. Chunks have a fixed size, not one per thread: sgemm's summation order depends on
 * the shape of the call, and the bits must not depend on the thread count. The im2col column
 * of an image is its input when the window covers it exactly; otherwise it is packed. */
enum { FC_CHUNK_ROWS = 64 };
typedef struct fc_job {
  const conv_plan* P;
  const float* in;
  const float* weights;
  float* out;
  const sdp_f32* ep;
  float* cols;
  float* const* tmp; /* per participant */
  const float* bt;   /* the current group's columns */
  int64_t ldb, grp;
} fc_job;

static void fc_pack_item(void* ctx, int64_t b, int participant) {
  const fc_job* J = ctx;
  const conv_plan* P = J->P;
  (void)participant;
  pack_col(P, J->in + (b * P->g->c + J->grp * P->cg) * P->hw, 0, 0, 0, P->kd,
           J->cols + b * J->ldb);
}

static void fc_chunk_item(void* ctx, int64_t chunk, int participant) {
  const fc_job* J = ctx;
  const conv_plan* P = J->P;
  const conv_geometry* g = P->g;
  float* t_k_b = J->tmp[participant];
  const int64_t m0 = chunk * FC_CHUNK_ROWS;
  const int64_t m1 = m0 + FC_CHUNK_ROWS < P->mg ? m0 + FC_CHUNK_ROWS : P->mg;
  const int64_t ch0 = J->grp * P->mg + m0;
  scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)(m1 - m0),
                    (blasint)g->n, (blasint)P->kd, 1.0f, J->weights + ch0 * P->kd,
                    (blasint)P->kd, J->bt, (blasint)J->ldb, 0.0f, t_k_b, (blasint)g->n);
  for (int64_t b = 0; b < g->n; ++b)
    for (int64_t m = 0; m < m1 - m0; ++m) {
      J->out[b * g->k + ch0 + m] = t_k_b[m * g->n + b];
      if (J->ep != NULL) epilogue_span(J->ep, ch0 + m, J->out, b * g->k + ch0 + m, 1);
    }
}

static accel_status conv_fc_batch(const conv_plan* P, const float* in, const float* weights,
                                  float* out, const sdp_f32* ep, workspace* ws, int num_threads) {
  const conv_geometry* g = P->g;
  const int covers = g->pad_top == 0 && g->pad_left == 0 && g->dilation_h == 1 &&
                     g->dilation_w == 1 && g->kernel_h == g->h && g->kernel_w == g->w;
  const int64_t ldb = covers ? (int64_t)g->c * P->hw : (P->kd + 15) & ~(int64_t)15;
  const int64_t chunks = (P->mg + FC_CHUNK_ROWS - 1) / FC_CHUNK_ROWS;
  int64_t threads = num_threads < chunks ? num_threads : chunks;
  if (threads > WS_THREAD_SLOTS - 1) threads = WS_THREAD_SLOTS - 1;
  const int nth = (int)threads;
  float* cols = NULL;
  if (!covers) {
    cols = workspace_get(ws, 0, (size_t)(g->n * ldb) * sizeof(float));
    if (cols == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  float* tmp[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    tmp[t] = workspace_get(ws, t + 1, (size_t)(FC_CHUNK_ROWS * g->n) * sizeof(float));
    if (tmp[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  blas_single_threaded();
  fc_job J = {P, in, weights, out, ep, cols, tmp, NULL, ldb, 0};
  for (int64_t grp = 0; grp < g->groups; ++grp) {
    J.grp = grp;
    if (!covers) pool_for(nth, g->n, fc_pack_item, &J);
    J.bt = covers ? in + grp * P->cg * P->hw : cols;
    pool_for(nth, chunks, fc_chunk_item, &J);
  }
  return ACCEL_OK;
}

#ifdef __AVX512F__
/* ---- AVX-512 micro-kernels ------------------------------------------------------------- */

static size_t round64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

#define MR 8        /* output channels per micro-tile */
#define NV 3        /* 16-float vectors of output positions per micro-tile */
#define NR (NV * 16)

static inline __mmask16 lane_mask(int64_t n) {
  return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* Accumulators are named variables: gcc keeps an array of vectors in memory and stores it on
 * every iteration. */
#define ALL_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define ACC_ROW(m) __m512 c##m##0 = _mm512_setzero_ps(), c##m##1 = c##m##0, c##m##2 = c##m##0;
#define ACC_ZERO(m) if (mr > m) c##m##0 = c##m##1 = c##m##2 = _mm512_setzero_ps();
/* Depth steps each accumulator sums from zero before its block joins the running total: a
 * long sequential sum's rounding error grows with its length (EfficientNet-B0's 672-deep 1x1
 * projections lost 2.5x PyTorch's precision, #13); in blocks of 32 it grows with
 * 32 + depth / 32 (a 672-deep sum: 1.4e-7 of the output's RMS against 4.6e-7 in one run). */
#define SUM_BLOCK 32
#define ACC_FMA(m, aval)                                                   \
  if (mr > m) {                                                            \
    const __m512 av = _mm512_set1_ps(aval);                                \
    c##m##0 = _mm512_fmadd_ps(av, b0, c##m##0);                            \
    if (nv > 1) c##m##1 = _mm512_fmadd_ps(av, b1, c##m##1);                \
    if (nv > 2) c##m##2 = _mm512_fmadd_ps(av, b2, c##m##2);                \
  }

/* Packed: c[m][0..16*nv) (+)= sum_k a[m*lda + k] * b[k*16*nv + ..] for m < mr <= PR, the
 * last vector under `tail`; b is a packed panel, a the weights as they are. Each block's sum
 * joins the running total in registers (12 accumulators and 12 totals), so c is read once
 * (accumulate) and written once: half the rows of the implicit kernel's tile, since adding
 * every 32-deep block through c cost 8-10 % of ResNet-50's 14x14 and 7x7 layers. pf (or
 * NULL): the next block of weights (PR rows of kc from pf, lda apart), fetched into cache
 * meanwhile: a deep layer's weights come from memory, in streams whose rows are often a power
 * of two apart. */
enum { PR = 4 }; /* rows of a packed micro-tile */
#define PR_ROWS(X) X(0) X(1) X(2) X(3)
#define PK_TOTAL(m) __m512 t##m##0 = _mm512_setzero_ps(), t##m##1 = t##m##0, t##m##2 = t##m##0;
#define PK_LOAD(m)                                                                      \
  if (mr > m) {                                                                         \
    t##m##0 = _mm512_maskz_loadu_ps(t0, c + m * ldc);                                   \
    if (nv > 1) t##m##1 = _mm512_maskz_loadu_ps(t1, c + m * ldc + 16);                  \
    if (nv > 2) t##m##2 = _mm512_maskz_loadu_ps(tail, c + m * ldc + 32);                \
  }
#define PK_ADD(m)                                                                       \
  if (mr > m) {                                                                         \
    t##m##0 = _mm512_add_ps(t##m##0, c##m##0);                                          \
    if (nv > 1) t##m##1 = _mm512_add_ps(t##m##1, c##m##1);                              \
    if (nv > 2) t##m##2 = _mm512_add_ps(t##m##2, c##m##2);                              \
  }
#define PK_MOVE(m)                                                                      \
  if (mr > m) {                                                                         \
    t##m##0 = c##m##0;                                                                  \
    if (nv > 1) t##m##1 = c##m##1;                                                      \
    if (nv > 2) t##m##2 = c##m##2;                                                      \
  }
#define PK_STORE(m)                                                                     \
  if (mr > m) {                                                                         \
    _mm512_mask_storeu_ps(c + m * ldc, t0, t##m##0);                                    \
    if (nv > 1) _mm512_mask_storeu_ps(c + m * ldc + 16, t1, t##m##1);                   \
    if (nv > 2) _mm512_mask_storeu_ps(c + m * ldc + 32, tail, t##m##2);                 \
  }
#define PK_AROW(m) const float* a##m = a + (mr > m ? m : 0) * lda;

static inline __attribute__((always_inline)) void ukr_body(const int mr, const int nv, int64_t kc,
                                                           const float* a, int64_t lda,
                                                           const float* b, float* c, int64_t ldc,
                                                           int accumulate, __mmask16 tail,
                                                           const float* pf) {
  const __mmask16 t0 = nv == 1 ? tail : (__mmask16)0xFFFF;
  const __mmask16 t1 = nv == 2 ? tail : (__mmask16)0xFFFF;
  PR_ROWS(ACC_ROW)
  PR_ROWS(PK_TOTAL)
  PR_ROWS(PK_AROW)
  if (accumulate) {
    PR_ROWS(PK_LOAD)
  }
  for (int64_t k0 = 0; k0 < kc; k0 += SUM_BLOCK) { /* total (+)= each block's own sum */
    const int64_t k1 = kc - k0 < SUM_BLOCK ? kc : k0 + SUM_BLOCK;
    PR_ROWS(ACC_ZERO)
    if (pf != NULL) /* lines k/16 of the next weight block's rows k/4 % 4 for this block's k */
      for (int64_t k = k0; k < k1; k += 4)
        _mm_prefetch((const char*)(pf + (k >> 2 & 3) * lda + (k >> 4) * 16), _MM_HINT_T0);
    /* unrolled: fewer loop uops on the FMA ports (the packed layers 2-3 % faster) */
    _Pragma("GCC unroll 4")
    for (int64_t k = k0; k < k1; ++k) {
      const __m512 b0 = _mm512_load_ps(b);
      const __m512 b1 = nv > 1 ? _mm512_load_ps(b + 16) : b0;
      const __m512 b2 = nv > 2 ? _mm512_load_ps(b + 32) : b0;
      b += 16 * nv;
      ACC_FMA(0, a0[k]) ACC_FMA(1, a1[k]) ACC_FMA(2, a2[k]) ACC_FMA(3, a3[k])
    }
    if (accumulate || k0 > 0) {
      PR_ROWS(PK_ADD)
    } else {
      PR_ROWS(PK_MOVE)
    }
  }
  PR_ROWS(PK_STORE)
}

typedef void (*ukr_fn)(int64_t, const float*, int64_t, const float*, float*, int64_t, int,
                       __mmask16, const float*);
#define UKR(M_, V_)                                                                        \
  static void ukr_##M_##_##V_(int64_t kc, const float* a, int64_t lda, const float* b,      \
                              float* c, int64_t ldc, int accumulate, __mmask16 tail,        \
                              const float* pf) {                                             \
    ukr_body(M_, V_, kc, a, lda, b, c, ldc, accumulate, tail, pf);                           \
  }
UKR(1, 1) UKR(1, 2) UKR(1, 3) UKR(2, 1) UKR(2, 2) UKR(2, 3)
UKR(3, 1) UKR(3, 2) UKR(3, 3) UKR(4, 1) UKR(4, 2) UKR(4, 3)

/* Implicit: depth row k of the tile starts at b + off[k] in a padded copy of the input, read
 * unaligned, the last vector under `tail` (a whole panel's unmasked, in a copy of the kernel
 * of its own: ResNet's 7x7/2 stem and the 1x1 layers 1-4 % faster, the same sums); A packed
 * as [k][MR] (one pointer: eight row pointers plus the offsets run gcc out of registers). The
 * whole depth in one call, so the results go straight to the output, compacted past each
 * row's garbage columns as `d` says. */
typedef struct vdest {
  int64_t o[NV];             /* output offset of lane 0 */
  __mmask16 m1[NV], m2[NV];  /* lanes in this output row / in the next one */
  int64_t gap;               /* grid columns that are not outputs: the next row's store shift */
} vdest;

/* A one-pass SDP epilogue (sdp_f32_one_pass) applied in registers before the store, step by
 * step in span_one_pass's order (sdp.c), so the bits equal the separate pass's: x * scale,
 * + shift, + operand, then ReLU as max(0, x) (x < 0 ? 0 : x: NaN and -0 stay) or the clip as
 * min(hi, max(lo, x)). A separate pass over a tile's outputs cost 13 % of a 64 -> 256 1x1
 * layer on 56x56 (its depth is short: 64 FMAs per output). Rows are the tile's channels. */
typedef struct reg_ep {
  const float* scale;   /* [MR] at the tile's first channel, or NULL */
  const float* shift;   /* [MR] likewise, or NULL */
  const float* operand; /* ew_operand at the tile's first channel (rows ldo apart), or NULL */
  accel_activation act; /* NONE, RELU or CLIP */
  float lo, hi;
} reg_ep;

static inline __attribute__((always_inline)) __m512 ep_vec(const reg_ep* e, int m, __m512 t,
                                                           int64_t at, __mmask16 m1,
                                                           __mmask16 m2, int64_t gap) {
  if (e->scale != NULL) t = _mm512_mul_ps(t, _mm512_set1_ps(e->scale[m]));
  if (e->shift != NULL) t = _mm512_add_ps(t, _mm512_set1_ps(e->shift[m]));
  if (e->operand != NULL) { /* each lane's operand sits where the lane is stored */
    __m512 x = _mm512_maskz_loadu_ps(m1, e->operand + at);
    if (m2) x = _mm512_mask_loadu_ps(x, m2, e->operand + at - gap);
    t = _mm512_add_ps(t, x);
  }
  if (e->act == ACCEL_ACT_RELU) {
    t = _mm512_max_ps(_mm512_setzero_ps(), t); /* 0 > t ? 0 : t */
  } else if (e->act == ACCEL_ACT_CLIP) {
    t = _mm512_max_ps(_mm512_set1_ps(e->lo), t); /* lo > t ? lo : t */
    t = _mm512_min_ps(_mm512_set1_ps(e->hi), t); /* hi < t ? hi : t */
  }
  return t;
}

#define IM_STORE1(m, v)                                                          \
  {                                                                              \
    float* o_ = out + m * ldo + d->o[v];                                         \
    const __m512 r_ = e != NULL ? ep_vec(e, m, c##m##v, m * ldo + d->o[v], d->m1[v], \
                                         d->m2[v], d->gap)                       \
                                : c##m##v;                                       \
    _mm512_mask_storeu_ps(o_, d->m1[v], r_);                                     \
    if (d->m2[v]) _mm512_mask_storeu_ps(o_ - d->gap, d->m2[v], r_);              \
  }
#define IM_STORE(m)                                                              \
  if (mr > m) {                                                                  \
    IM_STORE1(m, 0)                                                              \
    if (nv > 1) IM_STORE1(m, 1)                                                  \
    if (nv > 2) IM_STORE1(m, 2)                                                  \
  }

#define TOTAL_ADD(m)                                                             \
  if (mr > m) {                                                                  \
    c##m##0 = _mm512_add_ps(_mm512_load_ps(total + m * NR), c##m##0);            \
    if (nv > 1) c##m##1 = _mm512_add_ps(_mm512_load_ps(total + m * NR + 16), c##m##1); \
    if (nv > 2) c##m##2 = _mm512_add_ps(_mm512_load_ps(total + m * NR + 32), c##m##2); \
  }
#define TOTAL_STORE(m)                                                           \
  if (mr > m) {                                                                  \
    _mm512_store_ps(total + m * NR, c##m##0);                                    \
    if (nv > 1) _mm512_store_ps(total + m * NR + 16, c##m##1);                   \
    if (nv > 2) _mm512_store_ps(total + m * NR + 32, c##m##2);                   \
  }

static inline __attribute__((always_inline)) void uki_body(const int mr, const int nv,
                                                           const int full, int64_t kd,
                                                           const float* a, const float* b,
                                                           const int64_t* off, float* out,
                                                           int64_t ldo, const vdest* d,
                                                           __mmask16 tail, const reg_ep* e,
                                                           const float* pfb) {
  const __mmask16 t0 = nv == 1 ? tail : (__mmask16)0xFFFF;
  const __mmask16 t1 = nv == 2 ? tail : (__mmask16)0xFFFF;
  float total[MR * NR] __attribute__((aligned(64))); /* the blocks' running sums */
  ALL_ROWS(ACC_ROW)
  /* the element-wise operand (a residual written layers ago, often out of cache) is fetched
   * while the sums run: a cold 64 -> 256 1x1 + add on 56x56 1.33-1.38 -> 1.23-1.25 ms */
  if (e != NULL && e->operand != NULL)
    for (int m = 0; m < mr; ++m)
      for (int v = 0; v < nv; ++v)
        _mm_prefetch((const char*)(e->operand + m * ldo + d->o[v]), _MM_HINT_T0);
  /* Block 0 sums into the accumulators; each later block is stored first, summed from zero,
   * and added to the stored total (written before it is read: no uninitialised reads). */
  for (int64_t k0 = 0; k0 < kd; k0 += SUM_BLOCK) {
    const int64_t k1 = kd - k0 < SUM_BLOCK ? kd : k0 + SUM_BLOCK;
    if (k0 > 0) {
      ALL_ROWS(TOTAL_STORE)
      ALL_ROWS(ACC_ZERO)
    }
    for (int64_t k = k0; k < k1; ++k) {
      const float* bk = b + off[k];
      if (pfb != NULL) { /* the next panel's row k (its first pass: the input comes from L3) */
        const char* q = (const char*)(pfb + off[k]);
        _mm_prefetch(q, _MM_HINT_T0);
        _mm_prefetch(q + 64, _MM_HINT_T0);
        _mm_prefetch(q + 128, _MM_HINT_T0);
        _mm_prefetch(q + 188, _MM_HINT_T0); /* its last float, when the row is unaligned */
      }
      const __m512 b0 = _mm512_maskz_loadu_ps(t0, bk);
      const __m512 b1 = nv > 1 ? _mm512_maskz_loadu_ps(t1, bk + 16) : b0;
      const __m512 b2 = nv < 3 ? b0 : full ? _mm512_loadu_ps(bk + 32)
                                           : _mm512_maskz_loadu_ps(tail, bk + 32);
      const float* ak = a + k * MR;
      ACC_FMA(0, ak[0]) ACC_FMA(1, ak[1]) ACC_FMA(2, ak[2]) ACC_FMA(3, ak[3])
      ACC_FMA(4, ak[4]) ACC_FMA(5, ak[5]) ACC_FMA(6, ak[6]) ACC_FMA(7, ak[7])
    }
    if (k0 > 0) {
      ALL_ROWS(TOTAL_ADD)
    }
  }
  ALL_ROWS(IM_STORE)
}

typedef void (*uki_fn)(int64_t, const float*, const float*, const int64_t*, float*, int64_t,
                       const vdest*, __mmask16, const reg_ep*, const float*);
#define UKI(M_, V_)                                                                          \
  static void uki_##M_##_##V_(int64_t kd, const float* a, const float* b, const int64_t* off, \
                              float* out, int64_t ldo, const vdest* d, __mmask16 tail,        \
                              const reg_ep* e, const float* pfb) {                            \
    if (V_ == NV && tail == (__mmask16)0xFFFF) /* a whole panel: the last vector unmasked */ \
      uki_body(M_, V_, 1, kd, a, b, off, out, ldo, d, tail, e, pfb);                          \
    else                                                                                     \
      uki_body(M_, V_, 0, kd, a, b, off, out, ldo, d, tail, e, pfb);                          \
  }

/* Tail columns (an image's last < 16 outputs, TMAX at most): mr rows x t columns of dot
 * products along the depth, 16 lanes each. The lane partial sums live in `state` between
 * depth blocks and are summed into c[j + m*ldc] after the last one. */
enum { TMAX = 8 };
#define DT_ROW(m) __m512 d##m##0 = _mm512_setzero_ps(), d##m##1 = d##m##0, d##m##2 = d##m##0;
#define DT_LOAD(m)                                                                   \
  if (mr > m) {                                                                      \
    d##m##0 = _mm512_load_ps(state + (m * TMAX) * 16);                               \
    if (t > 1) d##m##1 = _mm512_load_ps(state + (m * TMAX + 1) * 16);                \
    if (t > 2) d##m##2 = _mm512_load_ps(state + (m * TMAX + 2) * 16);                \
  }
#define DT_FMA(m)                                                                    \
  if (mr > m) {                                                                      \
    const __m512 av = _mm512_maskz_loadu_ps(mk, a + m * lda + k);                    \
    d##m##0 = _mm512_fmadd_ps(av, b0, d##m##0);                                      \
    if (t > 1) d##m##1 = _mm512_fmadd_ps(av, b1, d##m##1);                           \
    if (t > 2) d##m##2 = _mm512_fmadd_ps(av, b2, d##m##2);                           \
  }
#define DT_END(m)                                                                    \
  if (mr > m) {                                                                      \
    if (last) {                                                                      \
      c[m * ldc] = _mm512_reduce_add_ps(d##m##0);                                    \
      if (t > 1) c[m * ldc + 1] = _mm512_reduce_add_ps(d##m##1);                     \
      if (t > 2) c[m * ldc + 2] = _mm512_reduce_add_ps(d##m##2);                     \
    } else {                                                                         \
      _mm512_store_ps(state + (m * TMAX) * 16, d##m##0);                             \
      if (t > 1) _mm512_store_ps(state + (m * TMAX + 1) * 16, d##m##1);              \
      if (t > 2) _mm512_store_ps(state + (m * TMAX + 2) * 16, d##m##2);              \
    }                                                                                \
  }

static inline __attribute__((always_inline)) void dot_body(const int mr, const int t, int64_t kc,
                                                           const float* a, int64_t lda,
                                                           const float* bt, int64_t ldb,
                                                           float* state, float* c, int64_t ldc,
                                                           int first, int last, const float* pf) {
  ALL_ROWS(DT_ROW)
  if (!first) {
    ALL_ROWS(DT_LOAD)
  }
  for (int64_t k = 0; k < kc; k += 16) {
    const __mmask16 mk = lane_mask(kc - k); /* bt is zero-padded; a is not */
    if (pf != NULL) /* the next rows' lines at this depth: a classifier's weights stream from
                     * memory, 8 rows at a time */
      for (int m = 0; m < MR; ++m) _mm_prefetch((const char*)(pf + m * lda + k), _MM_HINT_T0);
    const __m512 b0 = _mm512_load_ps(bt + k);
    const __m512 b1 = t > 1 ? _mm512_load_ps(bt + ldb + k) : b0;
    const __m512 b2 = t > 2 ? _mm512_load_ps(bt + 2 * ldb + k) : b0;
    ALL_ROWS(DT_FMA)
  }
  ALL_ROWS(DT_END)
}

typedef void (*dot_fn)(int64_t, const float*, int64_t, const float*, int64_t, float*, float*,
                       int64_t, int, int, const float*);
#define DOT(M_, T_)                                                                          \
  static void dot_##M_##_##T_(int64_t kc, const float* a, int64_t lda, const float* bt,       \
                              int64_t ldb, float* state, float* c, int64_t ldc, int first,    \
                              int last, const float* pf) {                                    \
    dot_body(M_, T_, kc, a, lda, bt, ldb, state, c, ldc, first, last, pf);                    \
  }

#define KERNELS_ROW(M_) UKI(M_, 1) UKI(M_, 2) UKI(M_, 3) \
  DOT(M_, 1) DOT(M_, 2) DOT(M_, 3)
KERNELS_ROW(1)
KERNELS_ROW(2)
KERNELS_ROW(3)
KERNELS_ROW(4)
KERNELS_ROW(5)
KERNELS_ROW(6)
KERNELS_ROW(7)
KERNELS_ROW(8)

#define TABLE(P_) {                                                                   \
    {0, 0, 0, 0},                      {0, P_##1_1, P_##1_2, P_##1_3},                 \
    {0, P_##2_1, P_##2_2, P_##2_3},    {0, P_##3_1, P_##3_2, P_##3_3},                 \
    {0, P_##4_1, P_##4_2, P_##4_3},    {0, P_##5_1, P_##5_2, P_##5_3},                 \
    {0, P_##6_1, P_##6_2, P_##6_3},    {0, P_##7_1, P_##7_2, P_##7_3},                 \
    {0, P_##8_1, P_##8_2, P_##8_3}}
static const ukr_fn ukr_table[PR + 1][NV + 1] = {{0, 0, 0, 0}, {0, ukr_1_1, ukr_1_2, ukr_1_3},
                                                 {0, ukr_2_1, ukr_2_2, ukr_2_3},
                                                 {0, ukr_3_1, ukr_3_2, ukr_3_3},
                                                 {0, ukr_4_1, ukr_4_2, ukr_4_3}};
static const uki_fn uki_table[MR + 1][NV + 1] = TABLE(uki_);
static const dot_fn dot_table[MR + 1][4] = TABLE(dot_);

/* ---- the packed path: im2col into NR-wide panels, tails as dot products ------------------ */

/* A run of panel lanes that map to one output row of one image. */
typedef struct seg {
  const float* img; /* input of this image and group, channel 0 */
  int32_t y, x0, len, lane0;
} seg;

static inline __m512i iota16(void) {
  return _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
}

/* Even (0, 2, .. 30) or odd source lanes of a pair of vectors, for _mm512_permutex2var_ps. */
static inline __m512i lanes_2x(int odd) {
  return _mm512_add_epi32(_mm512_slli_epi32(iota16(), 1), _mm512_set1_epi32(odd));
}

/* Lanes of a source vector whose input column base + lane lies in [0, w). */
static inline __mmask16 col_mask(int64_t base, int64_t w) {
  const __m512i ix = _mm512_add_epi32(iota16(), _mm512_set1_epi32((int32_t)base));
  return _mm512_cmp_epi32_mask(ix, _mm512_setzero_si512(), _MM_CMPINT_NLT) &
         _mm512_cmp_epi32_mask(ix, _mm512_set1_epi32((int32_t)w), _MM_CMPINT_LT);
}

/* Elements [sh, sh+16) of the concatenation v[0], v[1], ... */
static inline __m512 shifted(const __m512* v, int64_t sh) {
  const int64_t q = sh >> 4, rem = sh & 15;
  if (rem == 0) return v[q];
  const __m512i idx = _mm512_add_epi32(iota16(), _mm512_set1_epi32((int32_t)rem));
  return _mm512_permutex2var_ps(v[q], idx, v[q + 1]);
}

/* Source vectors a segment may need, at most: outputs (3 vectors) plus the tap offsets. */
enum { SRCV = 8 };

/* Taps s_lo..s_hi of one row segment of nvo <= 2 vectors at stride st (1 or 2), each tap's
 * offset s*dw below 16 source vectors' worth: the source columns stay in registers (e: the
 * columns at stride 1, the even ones at stride 2; o: the odd ones), each tap a shift of them.
 * (An array of source vectors went through the stack: 7 % of a 3x3 layer on 14x14, 15 % of a
 * 3x3/2 on 56x56.) Row s lands at dr + (s - s_lo) * pw, clipped to `room` lanes. */
static inline __attribute__((always_inline)) void pack_segment(
    const int nvo, const int st, const float* row, int64_t base, int64_t W, int64_t s_lo,
    int64_t s_hi, int64_t dw, int64_t room, float* dr, int64_t pw) {
  __m512 e0, e1, e2 = _mm512_setzero_ps(), o0 = e2, o1 = e2, o2 = e2;
#define SRC(q) _mm512_maskz_loadu_ps(col_mask(base + 16 * (q), W), row + base + 16 * (q))
  if (st == 1) {
    e0 = SRC(0);
    e1 = SRC(1);
    if (nvo > 1) e2 = SRC(2);
  } else {
    const __m512i even = lanes_2x(0), odd = lanes_2x(1);
    __m512 lo = SRC(0), hi = SRC(1);
    e0 = _mm512_permutex2var_ps(lo, even, hi);
    o0 = _mm512_permutex2var_ps(lo, odd, hi);
    lo = SRC(2), hi = SRC(3);
    e1 = _mm512_permutex2var_ps(lo, even, hi);
    o1 = _mm512_permutex2var_ps(lo, odd, hi);
    if (nvo > 1) {
      lo = SRC(4), hi = SRC(5);
      e2 = _mm512_permutex2var_ps(lo, even, hi);
      o2 = _mm512_permutex2var_ps(lo, odd, hi);
    }
  }
#undef SRC
  const __mmask16 m0 = lane_mask(room), m1 = lane_mask(room - 16);
  for (int64_t s = s_lo; s < s_hi; ++s, dr += pw) {
    const int64_t off = s * dw;
    const int odd_phase = st == 2 && (off & 1);
    const __m512i idx =
        _mm512_add_epi32(iota16(), _mm512_set1_epi32((int32_t)(st == 1 ? off : off >> 1)));
    const __m512 a0 = odd_phase ? o0 : e0, a1 = odd_phase ? o1 : e1;
    _mm512_mask_storeu_ps(dr, m0, _mm512_permutex2var_ps(a0, idx, a1));
    if (nvo > 1)
      _mm512_mask_storeu_ps(dr + 16, m1,
                            _mm512_permutex2var_ps(a1, idx, odd_phase ? o2 : e2));
  }
}

/* Pack the rows (c, r, s) for s in [s_lo, s_hi) of one panel: im2col of the columns in segs.
 * Row s goes to d + (s - s_lo) * pw. Whole vectors are stored (clipped to the panel width):
 * a segment's overrun lands in lanes a later segment or the final tail clear overwrites. */
static void pack_cr(const conv_plan* P, const seg* segs, int nsegs, int64_t c, int64_t r,
                    int64_t s_lo, int64_t s_hi, int64_t pw, float* d) {
  const conv_geometry* g = P->g;
  const int64_t H = g->h, W = g->w, st = g->stride_w, dw = g->dilation_w;
  const int64_t offmax = (s_hi - 1) * dw;
  for (int i = 0; i < nsegs; ++i) {
    const seg* sg = &segs[i];
    const int64_t nvo = (sg->len + 15) >> 4;
    const int64_t iy = (int64_t)sg->y * g->stride_h - g->pad_top + r * g->dilation_h;
    if (iy < 0 || iy >= H) {
      for (int64_t s = s_lo; s < s_hi; ++s) {
        float* dr = d + (s - s_lo) * pw + sg->lane0;
        for (int64_t j = 0; j < nvo; ++j)
          _mm512_mask_storeu_ps(dr + 16 * j, lane_mask(pw - sg->lane0 - 16 * j),
                                _mm512_setzero_ps());
      }
      continue;
    }
    const float* row = sg->img + c * P->hw + iy * W;
    const int64_t base = (int64_t)sg->x0 * st - g->pad_left; /* input column of lane 0, tap 0 */
    if (nvo <= 2 && (st == 1 || st == 2) && offmax < 16 * st) {
      const int64_t room = pw - sg->lane0;
      if (st == 1 && nvo == 1)
        pack_segment(1, 1, row, base, W, s_lo, s_hi, dw, room, d + sg->lane0, pw);
      else if (st == 1)
        pack_segment(2, 1, row, base, W, s_lo, s_hi, dw, room, d + sg->lane0, pw);
      else if (nvo == 1)
        pack_segment(1, 2, row, base, W, s_lo, s_hi, dw, room, d + sg->lane0, pw);
      else
        pack_segment(2, 2, row, base, W, s_lo, s_hi, dw, room, d + sg->lane0, pw);
    } else if (st == 1 && nvo + (offmax >> 4) + 1 <= SRCV) {
      __m512 v[SRCV];
      const int64_t nq = nvo + (offmax >> 4) + ((offmax & 15) != 0);
      for (int64_t q = 0; q < nq; ++q) {
        const int64_t b0 = base + 16 * q;
        v[q] = _mm512_maskz_loadu_ps(col_mask(b0, W), row + b0);
      }
      for (int64_t s = s_lo; s < s_hi; ++s) {
        float* dr = d + (s - s_lo) * pw + sg->lane0;
        for (int64_t j = 0; j < nvo; ++j)
          _mm512_mask_storeu_ps(dr + 16 * j, lane_mask(pw - sg->lane0 - 16 * j),
                                shifted(v + j, s * dw));
      }
    } else if (st == 2 && nvo + (offmax >> 5) + 1 <= SRCV) {
      /* Split the source into even and odd columns once; tap s then reads one phase, shifted. */
      __m512 ev[SRCV], od[SRCV];
      const __m512i even = lanes_2x(0), odd = lanes_2x(1);
      const int64_t nq = nvo + ((offmax >> 1) >> 4) + (((offmax >> 1) & 15) != 0 || (offmax & 1));
      for (int64_t q = 0; q < nq; ++q) {
        const int64_t b0 = base + 32 * q, b1 = b0 + 16;
        const __m512 lo = _mm512_maskz_loadu_ps(col_mask(b0, W), row + b0);
        const __m512 hi = _mm512_maskz_loadu_ps(col_mask(b1, W), row + b1);
        ev[q] = _mm512_permutex2var_ps(lo, even, hi);
        od[q] = _mm512_permutex2var_ps(lo, odd, hi);
      }
      for (int64_t s = s_lo; s < s_hi; ++s) {
        const int64_t o = s * dw;
        const __m512* ph = (o & 1) ? od : ev;
        float* dr = d + (s - s_lo) * pw + sg->lane0;
        for (int64_t j = 0; j < nvo; ++j)
          _mm512_mask_storeu_ps(dr + 16 * j, lane_mask(pw - sg->lane0 - 16 * j),
                                shifted(ph + j, o >> 1));
      }
    } else {
      for (int64_t s = s_lo; s < s_hi; ++s) {
        float* dr = d + (s - s_lo) * pw + sg->lane0;
        for (int64_t l = 0; l < sg->len; ++l) {
          const int64_t ix = base + l * st + s * dw;
          dr[l] = ix >= 0 && ix < W ? row[ix] : 0.0f;
        }
      }
    }
  }
}

/* Pack depth rows [p0, p0+kc) of the columns described by segs into one panel of width pw. */
static void pack_panel(const conv_plan* P, const seg* segs, int nsegs, int64_t p0, int64_t kc,
                       int64_t pw, float* dst) {
  const conv_geometry* g = P->g;
  const int64_t S = g->kernel_w, RS = (int64_t)g->kernel_h * S;
  for (int64_t kk = 0; kk < kc;) {
    const int64_t p = p0 + kk, c = p / RS, rs = p % RS, r = rs / S, s_lo = rs % S;
    const int64_t s_hi = S < s_lo + (kc - kk) ? S : s_lo + (kc - kk);
    pack_cr(P, segs, nsegs, c, r, s_lo, s_hi, pw, dst + kk * pw);
    kk += s_hi - s_lo;
  }
  int64_t w = 0;
  for (int i = 0; i < nsegs; ++i) w += segs[i].len;
  if (w < pw) { /* lanes past the last column: computed, never stored; keep them finite */
    const __mmask16 mk = (__mmask16)(lane_mask(pw - (w & ~15)) & ~lane_mask(w & 15));
    for (int64_t kk = 0; kk < kc; ++kk)
      _mm512_mask_storeu_ps(dst + kk * pw + (w & ~15), mk, _mm512_setzero_ps());
  }
}

/* ---- tiles of the packed path -------------------------------------------------------- */

/* rows x w floats at src (rows ld apart) into rows of pw (a multiple of 16) at dst, the lanes
 * past w zero: a pointwise conv's panel, whose depth rows are the input's channel rows. */
static void pack_rows(const float* src, int64_t ld, int64_t rows, int64_t w, int64_t pw,
                      float* dst) {
  for (int64_t r = 0; r < rows; ++r, src += ld, dst += pw)
    for (int64_t x = 0; x < pw; x += 16)
      _mm512_store_ps(dst + x, _mm512_maskz_loadu_ps(lane_mask(w - x), src + x));
}

typedef struct tile_bufs {
  float* bp;    /* packed panels: panels x kc x NR */
  float* bt;    /* tail columns: TMAX x ldbt */
  float* state; /* tail partial sums: mchunk x TMAX x 16 */
} tile_bufs;

/* Channels [m, m + MR) of a tile (channels [m0, m1)) over its panel j (packed at bp), depth
 * block [p0, p0 + kc): the block of MR rows in micro-tiles of PR. On panel 0 the kernel fetches
 * the next weight block (whatever the depth: the weights of a 7x7 layer with 160 input channels
 * come cold too): this depth block's next MR rows, or the next depth block's first. */
static void panel_rows(const conv_plan* P, const float* bp, const float* abase, float* cbase,
                       int64_t m0, int64_t m1, int64_t m, int64_t j, int64_t vcols, int64_t p0,
                       int64_t kc, int last) {
  const int64_t mr = m1 - m < MR ? m1 - m : MR;
  const float* a = abase + m * P->kd + p0;
  const float* pf = j != 0                ? NULL
                    : m + MR + MR <= m1   ? a + MR * P->kd
                    : !last && m + MR >= m1 ? abase + m0 * P->kd + p0 + kc
                                            : NULL;
  const int64_t c0 = j * NR;
  const int64_t w = vcols - c0 < NR ? vcols - c0 : NR;
  const int64_t nv = (w + 15) / 16;
  const __mmask16 tail = lane_mask(w - (nv - 1) * 16);
  for (int64_t h = 0; h < mr; h += PR)
    ukr_table[mr - h < PR ? mr - h : PR][nv](kc, a + h * P->kd, P->kd, bp,
                                             cbase + (m + h) * P->ohw + c0, P->ohw, p0 > 0, tail,
                                             pf != NULL ? pf + h * P->kd : NULL);
}

/* Depth block [p0, p0 + kc) of a tile's npanels panels (at bp, NR * kc floats apart) and
 * ntail tail columns (at bt, ldbt apart). */
static void pack_block(const conv_plan* P, const float* img, int64_t n0, int64_t vcols,
                       int64_t npanels, int64_t ntail, int64_t p0, int64_t kc, float* bp,
                       float* bt, int64_t ldbt) {
  const int64_t ow = P->g->out_w;
  for (int64_t j = 0; j < npanels; ++j) {
    const int64_t c0 = j * NR;
    const int64_t w = vcols - c0 < NR ? vcols - c0 : NR;
    const int64_t pw = (w + 15) & ~(int64_t)15;
    if (P->pointwise) { /* the panel's depth rows are input rows: copy, zero past w */
      pack_rows(img + p0 * P->hw + n0 + c0, P->hw, kc, w, pw, bp + j * NR * kc);
      continue;
    }
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
    pack_panel(P, segs, nsegs, p0, kc, pw, bp + j * NR * kc);
  }
  for (int64_t j = 0; j < ntail; ++j) {
    const int64_t n = n0 + vcols + j;
    pack_col(P, img, n / ow, n % ow, p0, kc, bt + j * ldbt);
  }
}

/* One tile: output channels [m0, m1) of group grp, columns [n0, n0+ncols) of image b; the last
 * ntail columns go through the dot kernel. Depth blocks outermost, or (pass_rows > 0) inside
 * passes of pass_rows channels; either way each output's blocks run in depth order, so the
 * bits are the same. The epilogue runs on each block of MR channels right after its last
 * depth block, while it is in cache. */
static void gemm_tile(const conv_plan* P, const float* in, const float* weights, float* out,
                      const sdp_f32* ep, int64_t b, int64_t grp, int64_t m0, int64_t m1,
                      int64_t n0, int64_t ncols, int64_t ntail, const tile_bufs* tb,
                      int64_t pass_rows) {
  const conv_geometry* g = P->g;
  const float* img = in + (b * g->c + grp * P->cg) * P->hw;
  const int64_t vcols = ncols - ntail;
  const int64_t npanels = (vcols + NR - 1) / NR;
  float* cbase = out + (b * g->k + grp * P->mg) * P->ohw + n0;
  const float* abase = weights + grp * P->mg * P->kd;

  if (pass_rows > 0) {
    /* Depth blocks inside passes of pass_rows channels, every block packed first: each weight
     * row is then read front to back in one pass (a few pages at a time), not a slice of
     * every row per depth block (thousands of 4 KB pages, each a TLB miss). */
    const int64_t ldbt = (P->kd + 15) & ~(int64_t)15;
    for (int64_t p0 = 0; p0 < P->kd; p0 += P->kc) {
      const int64_t kc = P->kd - p0 < P->kc ? P->kd - p0 : P->kc;
      pack_block(P, img, n0, vcols, npanels, ntail, p0, kc, tb->bp + p0 * npanels * NR,
                 tb->bt + p0, ldbt);
    }
    for (int64_t mp = m0; mp < m1; mp += pass_rows) {
      const int64_t me = m1 - mp < pass_rows ? m1 : mp + pass_rows;
      for (int64_t p0 = 0; p0 < P->kd; p0 += P->kc) {
        const int64_t kc = P->kd - p0 < P->kc ? P->kd - p0 : P->kc;
        const int last = p0 + kc == P->kd;
        const float* bp = tb->bp + p0 * npanels * NR;
        for (int64_t m = mp; m < me; m += MR) {
          const int64_t mr = me - m < MR ? me - m : MR;
          const float* a = abase + m * P->kd + p0;
          /* the next block this order reads: the pass's next rows, its next depth block's
           * first rows, or the next pass's first */
          const float* pf = m + MR < me ? a + MR * P->kd
                            : !last     ? abase + mp * P->kd + p0 + kc
                            : me < m1   ? abase + me * P->kd
                                        : NULL;
          for (int64_t j = 0; j < npanels; ++j) {
            const int64_t c0 = j * NR;
            const int64_t w = vcols - c0 < NR ? vcols - c0 : NR;
            const int64_t nv = (w + 15) / 16;
            const __mmask16 tail = lane_mask(w - (nv - 1) * 16);
            for (int64_t h = 0; h < mr; h += PR)
              ukr_table[mr - h < PR ? mr - h : PR][nv](
                  kc, a + h * P->kd, P->kd, bp + j * NR * kc, cbase + (m + h) * P->ohw + c0,
                  P->ohw, p0 > 0, tail, j == 0 && pf != NULL ? pf + h * P->kd : NULL);
          }
          for (int64_t j = 0; j < ntail; j += 3) {
            const int64_t t = ntail - j < 3 ? ntail - j : 3;
            dot_table[mr][t](kc, a, P->kd, tb->bt + j * ldbt + p0, ldbt,
                             tb->state + ((m - m0) * TMAX + j) * 16,
                             cbase + m * P->ohw + vcols + j, P->ohw, p0 == 0, last, NULL);
          }
          if (last && ep != NULL) {
            for (int64_t i = 0; i < mr; ++i) {
              const int64_t ch = grp * P->mg + m + i;
              epilogue_span(ep, ch, out, (b * g->k + ch) * P->ohw + n0, ncols);
            }
          }
        }
      }
    }
    return;
  }

  const int64_t ldbt = (P->kc + 15) & ~(int64_t)15;
  for (int64_t p0 = 0; p0 < P->kd; p0 += P->kc) {
    const int64_t kc = P->kd - p0 < P->kc ? P->kd - p0 : P->kc;
    const int last = p0 + kc == P->kd;
    pack_block(P, img, n0, vcols, npanels, ntail, p0, kc, tb->bp, tb->bt, ldbt);
    /* Panels outermost where a panel's depth block stays in L1 meanwhile (P->panels_outer),
     * over the channels in passes of 128 KB of weights (their rows are often a power of two
     * apart: all of 1024 -> 512's 512 rows in one pass took 1.45-1.50 ms on 14x14, 1.29 in
     * passes of 256 rows); otherwise each block of MR channels passes over every panel in
     * turn. The next weight block is fetched on the first panel either way. */
    const int pouter = P->panels_outer && npanels > 1;
    if (pouter) {
      int64_t rows = (128 * 1024 / (int64_t)sizeof(float)) / kc / MR * MR;
      if (rows < MR) rows = MR;
      for (int64_t mp = m0; mp < m1; mp += rows)
        for (int64_t j = 0; j < npanels; ++j)
          for (int64_t m = mp; m < m1 && m < mp + rows; m += MR)
            panel_rows(P, tb->bp + j * NR * kc, abase, cbase, m0, m1, m, j, vcols, p0, kc,
                       last);
    }
    for (int64_t m = m0; m < m1; m += MR) {
      const int64_t mr = m1 - m < MR ? m1 - m : MR;
      const float* a = abase + m * P->kd + p0;
      if (!pouter)
        for (int64_t j = 0; j < npanels; ++j)
          panel_rows(P, tb->bp + j * NR * kc, abase, cbase, m0, m1, m, j, vcols, p0, kc, last);
      for (int64_t j = 0; j < ntail; j += 3) {
        const int64_t t = ntail - j < 3 ? ntail - j : 3;
        dot_table[mr][t](kc, a, P->kd, tb->bt + j * ldbt, ldbt,
                         tb->state + ((m - m0) * TMAX + j) * 16, cbase + m * P->ohw + vcols + j,
                         P->ohw, p0 == 0, last,
                         npanels == 0 && j == 0 && m + MR + MR <= m1 ? a + MR * P->kd : NULL);
      }
      if (last && ep != NULL) {
        for (int64_t i = 0; i < mr; ++i) {
          const int64_t ch = grp * P->mg + m + i;
          epilogue_span(ep, ch, out, (b * g->k + ch) * P->ohw + n0, ncols);
        }
      }
    }
  }
}

typedef struct packed_job {
  const conv_plan* P;
  const float* in;
  const float* weights;
  float* out;
  const sdp_f32* ep;
  const tile_bufs* bufs; /* per participant */
  int64_t ntail, panels_img, ntiles, mchunks, mblocks, pass_rows;
} packed_job;

/* Item it = (image-group, tile, chunk of output channels), chunk innermost. */
static void packed_item(void* ctx, int64_t it, int participant) {
  const packed_job* J = ctx;
  const conv_plan* P = J->P;
  const conv_geometry* g = P->g;
  const int64_t mchunks = J->mchunks, ntiles = J->ntiles, mblocks = J->mblocks;
  const int64_t mc = it % mchunks;
  const int64_t tile = (it / mchunks) % ntiles;
  const int64_t bg = it / (mchunks * ntiles);
  const int64_t b = bg / g->groups, grp = bg % g->groups;
  const int64_t pa = J->panels_img * tile / ntiles, pb = J->panels_img * (tile + 1) / ntiles;
  const int64_t n0 = pa * NR;
  const int64_t n1 = tile == ntiles - 1 ? P->ohw : pb * NR;
  const int64_t m0 = mblocks * mc / mchunks * MR;
  int64_t m1 = mblocks * (mc + 1) / mchunks * MR;
  if (m1 > P->mg) m1 = P->mg;
  gemm_tile(P, J->in, J->weights, J->out, J->ep, b, grp, m0, m1, n0, n1 - n0,
            tile == ntiles - 1 ? J->ntail : 0, &J->bufs[participant], J->pass_rows);
}

static accel_status conv_packed(const conv_plan* P, const float* in, const float* weights,
                                float* out, const sdp_f32* ep, workspace* ws, int num_threads) {
  const conv_geometry* g = P->g;
  /* An image's columns: whole vectors in NR-wide panels, then up to TMAX dot-product columns.
   * Tiles split an image's panels (the last tile takes the tail) so that a depth block of them
   * stays in L2, in a multiple of the thread count when possible; output-channel chunks are
   * added when there are fewer tiles than threads. */
  const int64_t ntail = P->ohw % 16 <= TMAX ? P->ohw % 16 : 0;
  const int64_t panels_img = (P->ohw - ntail + NR - 1) / NR;
  int64_t max_panels = (512 * 1024) / (P->kc * NR * 4);
  if (max_panels < 1) max_panels = 1;
  int64_t ntiles = panels_img == 0 ? 1 : (panels_img + max_panels - 1) / max_panels;
  const int64_t outer = (int64_t)g->n * g->groups;
  /* Where the panels stay in L1 and a tile's weights outweigh its inputs (more channels than
   * positions: the 14x14 and 7x7 layers), threads split the channels, not the image: each
   * then streams its part of the weights once, not all of them (ResNet-50 at 2 threads, its
   * 14x14 layers by tiles: 10-20 % slower than with 512-deep blocks) */
  const int split_channels = P->panels_outer && P->mg >= P->ohw;
  while (!split_channels && outer * ntiles % num_threads != 0 && ntiles < panels_img) ++ntiles;
  const int64_t mblocks = (P->mg + MR - 1) / MR;
  int64_t mchunks = 1;
  while (outer * ntiles * mchunks < num_threads && mchunks < mblocks) ++mchunks;
  const int64_t items = outer * ntiles * mchunks;
  const int64_t tile_panels_max = (panels_img + ntiles - 1) / ntiles;
  const int64_t mchunk_max = (mblocks + mchunks - 1) / mchunks * MR;

  /* One panel a tile (a 7x7 image), a few depth blocks, >= 4 MB of weights: each read once, so
   * passes of 16 channels over the whole depth (every block packed first) read each row front
   * to back, not a 512-byte slice of every row per block (1024 -> 2048 1x1/2 on 14x14: 1.95 ->
   * 1.72 ms alone, weights cold). A deeper panel (3x3 on 7x7, 4608 deep), several (14x14) or
   * smaller weights (MobileNet-v2's 960 -> 320, 320 -> 1280 on 7x7: 4-12 %) measured slower. */
  const int64_t pass_rows = P->panels_outer && tile_panels_max == 1 && P->kd > P->kc &&
                                    P->kd <= 2048 && P->mg * P->kd >= (1 << 20)
                                ? 16
                                : 0;
  const int64_t depth = pass_rows > 0 ? P->kd : P->kc; /* packed at once */
  const size_t bp_bytes = round64((size_t)(tile_panels_max * NR * depth) * sizeof(float));
  const size_t bt_bytes = round64((size_t)(TMAX * ((depth + 15) & ~(int64_t)15)) * sizeof(float));
  const size_t st_bytes = round64((size_t)(mchunk_max * TMAX * 16) * sizeof(float));
  const int nth = (int)(items < num_threads ? items : num_threads);
  tile_bufs bufs[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    char* base = workspace_get(ws, t, bp_bytes + bt_bytes + st_bytes);
    if (base == NULL) return ACCEL_ERR_NO_MEMORY;
    bufs[t].bp = (float*)base;
    bufs[t].bt = (float*)(base + bp_bytes);
    bufs[t].state = (float*)(base + bp_bytes + bt_bytes);
  }

  packed_job J = {P,      in,         weights, out,    ep,      bufs,
                  ntail,  panels_img, ntiles,  mchunks, mblocks, pass_rows};
  pool_for(nth, items, packed_item, &J);
  return ACCEL_OK;
}

/* ---- the implicit-GEMM path: a padded, stride-phase-split copy of the input ------------- */

/* Output (y, x) and tap (r, s) read padded input row y*sh + r*dh, column x*sw + s*dw. Splitting
 * the padded input into its sh x sw stride phases makes that phase (r*dh % sh, s*dw % sw) at
 * row y + r*dh/sh, column x + s*dw/sw: with each phase plane stored as rows of wq columns, the
 * depth row (c, r, s) of the GEMM's B matrix is the plane itself, shifted by a constant offset,
 * over a grid of oh x wq positions of which the first ow of each row are outputs. */
typedef struct imp_plan {
  int64_t wq, hq;       /* phase plane columns (>= out_w + the largest column shift) and rows */
  int64_t plane;        /* floats per phase plane */
  int64_t nph;          /* phases copied: stride_h * stride_w, or 1 for a 1x1 kernel (its one
                         * tap reads phase (0, 0) only) */
  int64_t ncols;        /* oh * wq grid positions */
  int64_t npanels;      /* NR-wide panels over the grid */
  int64_t sqmax;        /* largest column shift of a tap */
  int direct;           /* the input itself is the padded copy: 1x1, stride 1, no padding */
} imp_plan;

static void imp_make_plan(const conv_plan* P, imp_plan* Q, int allow_direct) {
  const conv_geometry* g = P->g;
  const int64_t sh = g->stride_h, sw = g->stride_w;
  const int64_t rqmax = ((int64_t)(g->kernel_h - 1) * g->dilation_h) / sh;
  const int64_t sqmax = ((int64_t)(g->kernel_w - 1) * g->dilation_w) / sw;
  Q->direct = allow_direct && g->kernel_h == 1 && g->kernel_w == 1 && sh == 1 && sw == 1 &&
              g->pad_top == 0 &&
              g->pad_left == 0 && g->out_h == g->h && g->out_w == g->w;
  Q->nph = g->kernel_h == 1 && g->kernel_w == 1 ? 1 : sh * sw; /* 1x1/2: one phase of four */
  Q->sqmax = sqmax;
  if (Q->direct) {
    Q->wq = g->w;
    Q->hq = g->h;
    Q->plane = P->hw;
  } else if (sw == 1) {
    /* Stride 1: rows overlap their padding. A row of wq >= w + pad_left columns ends in zeros;
     * a tap reading past it lands in the next row's left padding, zero as well, as long as
     * wq >= out_w + sqmax - pad_left. */
    const int64_t need = (int64_t)g->out_w + sqmax - g->pad_left;
    Q->wq = (int64_t)g->w + g->pad_left > need ? (int64_t)g->w + g->pad_left : need;
    if (Q->wq < g->out_w) Q->wq = g->out_w;
    Q->hq = g->out_h + rqmax;
    Q->plane = Q->hq * Q->wq;
  } else {
    Q->wq = g->out_w + sqmax;
    Q->hq = g->out_h + rqmax;
    Q->plane = Q->hq * Q->wq;
  }
  Q->ncols = (int64_t)g->out_h * Q->wq;
  Q->npanels = (Q->ncols + NR - 1) / NR;
}

/* Floats of one image-group's padded copy, with zeroed slack: grid reads reach sqmax floats
 * past the last plane (63 more for depthwise, which reads whole groups of four vectors). */
static int64_t imp_copy_floats(const conv_plan* P, const imp_plan* Q) {
  return P->cg * Q->nph * Q->plane + Q->sqmax + 64;
}

/* Build phase plane `idx` = (c, py, px) of the padded copy of image-group input `img`. */
static void imp_build_plane(const conv_plan* P, const imp_plan* Q, const float* img, int64_t idx,
                            float* dst) {
  const conv_geometry* g = P->g;
  const int64_t c = idx / Q->nph, ph = idx % Q->nph;
  const int64_t py = ph / g->stride_w, px = ph % g->stride_w;
  const int64_t sh = g->stride_h, sw = g->stride_w, W = g->w, wq = Q->wq;
  const float* src = img + c * P->hw;
  float* d = dst + idx * Q->plane;
  /* columns xq with input column xq*sw + px - pad_left inside [0, W) */
  const int64_t x0 = px - g->pad_left;
  int64_t lo = x0 >= 0 ? 0 : (-x0 + sw - 1) / sw;
  int64_t hi = x0 > W - 1 ? 0 : (W - 1 - x0) / sw + 1;
  if (hi > wq) hi = wq;
  if (lo > hi) lo = hi;
  for (int64_t yq = 0; yq < Q->hq; ++yq) {
    const int64_t iy = yq * sh + py - g->pad_top;
    float* dr = d + yq * wq;
    if (iy < 0 || iy >= g->h || lo == hi) {
      memset(dr, 0, (size_t)wq * sizeof(float));
      continue;
    }
    const float* row = src + iy * W + x0;
    for (int64_t xq = 0; xq < lo; ++xq) dr[xq] = 0.0f;
    if (sw == 1) {
      memcpy(dr + lo, row + lo, (size_t)(hi - lo) * sizeof(float));
    } else if (sw == 2) {
      const __m512i even = lanes_2x(0);
      for (int64_t xq = lo; xq < hi; xq += 16) {
        const int64_t cnt = hi - xq < 16 ? hi - xq : 16, span = 2 * cnt - 1;
        const __m512 v0 = _mm512_maskz_loadu_ps(lane_mask(span), row + 2 * xq);
        const __m512 v1 = _mm512_maskz_loadu_ps(lane_mask(span - 16), row + 2 * xq + 16);
        _mm512_mask_storeu_ps(dr + xq, lane_mask(cnt), _mm512_permutex2var_ps(v0, even, v1));
      }
    } else {
      for (int64_t xq = lo; xq < hi; ++xq) dr[xq] = row[xq * sw];
    }
    for (int64_t xq = hi; xq < wq; ++xq) dr[xq] = 0.0f;
  }
}

/* Offsets of the depth rows in the padded copy. */
static void imp_offsets(const conv_plan* P, const imp_plan* Q, int64_t* off) {
  const conv_geometry* g = P->g;
  const int64_t sh = g->stride_h, sw = g->stride_w;
  int64_t kk = 0;
  for (int64_t c = 0; c < P->cg; ++c)
    for (int64_t r = 0; r < g->kernel_h; ++r)
      for (int64_t s = 0; s < g->kernel_w; ++s) {
        const int64_t ry = r * g->dilation_h, sx = s * g->dilation_w;
        const int64_t ph = (ry % sh) * sw + sx % sw;
        off[kk++] = (c * Q->nph + ph) * Q->plane + (ry / sh) * Q->wq + sx / sw;
      }
}

/* 8 rows of 16 depths (r[m] = w[m][k .. k+16)) as 16 depths of 8 rows at d: pairs of rows
 * interleaved (unpack), then quads (shuffle): a_j / b_j hold rows 0-3 / 4-7 at depth 4i + j in
 * 128-bit lane i; interleaving their lanes puts depths j and j + 4 (c_j) or j + 8 and j + 12
 * (e_j) in the two halves of one vector, and each stored vector is two of those halves. */
static inline void transpose_8x16(const __m512* r, float* d) {
  const __m512 t0 = _mm512_unpacklo_ps(r[0], r[1]), t1 = _mm512_unpackhi_ps(r[0], r[1]);
  const __m512 t2 = _mm512_unpacklo_ps(r[2], r[3]), t3 = _mm512_unpackhi_ps(r[2], r[3]);
  const __m512 t4 = _mm512_unpacklo_ps(r[4], r[5]), t5 = _mm512_unpackhi_ps(r[4], r[5]);
  const __m512 t6 = _mm512_unpacklo_ps(r[6], r[7]), t7 = _mm512_unpackhi_ps(r[6], r[7]);
  const __m512 a[4] = {_mm512_shuffle_ps(t0, t2, 0x44), _mm512_shuffle_ps(t0, t2, 0xEE),
                       _mm512_shuffle_ps(t1, t3, 0x44), _mm512_shuffle_ps(t1, t3, 0xEE)};
  const __m512 b[4] = {_mm512_shuffle_ps(t4, t6, 0x44), _mm512_shuffle_ps(t4, t6, 0xEE),
                       _mm512_shuffle_ps(t5, t7, 0x44), _mm512_shuffle_ps(t5, t7, 0xEE)};
  const __m512i lanes01 = _mm512_set_epi32(23, 22, 21, 20, 7, 6, 5, 4, 19, 18, 17, 16, 3, 2, 1, 0);
  const __m512i lanes23 =
      _mm512_set_epi32(31, 30, 29, 28, 15, 14, 13, 12, 27, 26, 25, 24, 11, 10, 9, 8);
  __m512 c[4], e[4];
  for (int j = 0; j < 4; ++j) {
    c[j] = _mm512_permutex2var_ps(a[j], lanes01, b[j]); /* depths j, j + 4 */
    e[j] = _mm512_permutex2var_ps(a[j], lanes23, b[j]); /* depths j + 8, j + 12 */
  }
  for (int q = 0; q < 2; ++q) { /* depths 2q, 2q + 1 and 4 + 2q, 5 + 2q; then 8 more */
    _mm512_storeu_ps(d + (2 * q) * MR, _mm512_shuffle_f32x4(c[2 * q], c[2 * q + 1], 0x44));
    _mm512_storeu_ps(d + (4 + 2 * q) * MR, _mm512_shuffle_f32x4(c[2 * q], c[2 * q + 1], 0xEE));
    _mm512_storeu_ps(d + (8 + 2 * q) * MR, _mm512_shuffle_f32x4(e[2 * q], e[2 * q + 1], 0x44));
    _mm512_storeu_ps(d + (12 + 2 * q) * MR, _mm512_shuffle_f32x4(e[2 * q], e[2 * q + 1], 0xEE));
  }
}

/* Weights of group grp as MR-row blocks [block][k][MR] (rows past K/groups are zero): 16
 * depths at a time by transposes (the scalar loop was 4.5 % of a 512 -> 256 1x1 layer on
 * 28x28), the last kd % 16 one by one. */
static void pack_a(const conv_plan* P, const float* weights, int64_t grp, int64_t block,
                   float* apack) {
  const float* w = weights + (grp * P->mg + block * MR) * P->kd;
  const int64_t rows = P->mg - block * MR < MR ? P->mg - block * MR : MR;
  float* d = apack + block * P->kd * MR;
  int64_t k = 0;
  for (; k + 16 <= P->kd; k += 16) {
    __m512 r[MR];
    for (int64_t m = 0; m < MR; ++m)
      r[m] = m < rows ? _mm512_loadu_ps(w + m * P->kd + k) : _mm512_setzero_ps();
    transpose_8x16(r, d + k * MR);
  }
  for (; k < P->kd; ++k)
    for (int64_t m = 0; m < MR; ++m) d[k * MR + m] = m < rows ? w[m * P->kd + k] : 0.0f;
}

/* Destinations of the vectors of panel j (grid positions j*NR ...). With garbage columns this
 * needs wq >= 16, so that a vector meets at most one row end. */
static void imp_vdest(const conv_plan* P, const imp_plan* Q, int64_t j, vdest* d) {
  const int64_t wq = Q->wq, ow = P->g->out_w;
  d->gap = wq - ow;
  for (int v = 0; v < NV; ++v) {
    const int64_t n = j * NR + 16 * v;
    const int64_t y = n / wq, x = n % wq;
    const int64_t wrap = wq - x; /* lanes before the row end */
    d->o[v] = y * ow + x;
    const unsigned live = lane_mask(Q->ncols - n);
    if (wq == ow) { /* no garbage columns: every live lane is an output, in order */
      d->m1[v] = (__mmask16)live;
      d->m2[v] = 0;
      continue;
    }
    d->m1[v] = (__mmask16)(lane_mask(ow - x) & live);
    d->m2[v] = (__mmask16)(wrap < 16 ? (lane_mask(wrap + ow) & ~lane_mask(wrap) & live) : 0u);
  }
}

/* Blocks of channels a tile needs before its panels are packed (see conv_implicit). */
#ifndef IMP_PACK_BLOCKS
#define IMP_PACK_BLOCKS 16
#endif

/* Panels per tile, at most: the epilogue then finds a block of MR channels' outputs in L1. */
#ifndef IMP_MAX_PANELS
#define IMP_MAX_PANELS 16
#endif

/* The one-pass epilogue's operands at channel ch0 and output offset at0 (read only where
 * sdp_f32_one_pass(ep)). */
static reg_ep reg_ep_at(const sdp_f32* ep, int64_t ch0, int64_t at0) {
  if (ep == NULL) return (reg_ep){NULL, NULL, NULL, ACCEL_ACT_NONE, 0.0f, 0.0f};
  return (reg_ep){ep->scale != NULL ? ep->scale + ch0 : NULL,
                  ep->shift != NULL ? ep->shift + ch0 : NULL,
                  ep->ew_op == ACCEL_EW_ADD ? ep->ew_operand + at0 : NULL, ep->act,
                  ep->clip_min, ep->clip_max};
}

/* One tile of the grid: panels [pa, pb) x output channels [m0, m1) of image b, group grp; each
 * block of MR channels gets the epilogue on the tile's outputs right after its last panel. */
static void imp_tile(const conv_plan* P, const imp_plan* Q, const float* src, const int64_t* off,
                     const float* apack, float* out, const sdp_f32* ep, int64_t b, int64_t grp,
                     int64_t m0, int64_t m1, int64_t pa, int64_t pb, float* pbuf,
                     const int64_t* poff) {
  const conv_geometry* g = P->g;
  const int64_t ow = g->out_w, wq = Q->wq;
  const int64_t n0 = pa * NR;
  const int64_t n1 = pb * NR < Q->ncols ? pb * NR : Q->ncols;
  /* the tile's outputs: [o0, o1) */
  const int64_t x0 = n0 % wq, x1 = (n1 - 1) % wq;
  const int64_t o0 = n0 / wq * ow + (x0 < ow ? x0 : ow);
  const int64_t o1 = (n1 - 1) / wq * ow + (x1 < ow ? x1 + 1 : ow);
  vdest d[IMP_MAX_PANELS];
  for (int64_t j = pa; j < pb; ++j) imp_vdest(P, Q, j, &d[j - pa]);
  const int in_regs = ep != NULL && sdp_f32_one_pass(ep);
  if (pbuf != NULL && m1 - m0 >= IMP_PACK_BLOCKS * MR) {
    /* Panels outermost, each copied first into a contiguous buffer that stays in L1 while
     * every block of channels passes over it (see conv_implicit): the same sums. */
    for (int64_t j = pa; j < pb; ++j) {
      const int64_t w = Q->ncols - j * NR < NR ? Q->ncols - j * NR : NR;
      const int64_t nv = (w + 15) / 16;
      const __mmask16 tail = lane_mask(w - 16 * (nv - 1));
      const float* bj = src + j * NR;
      const int fetch = Q->direct && (j + 1) * NR < Q->ncols; /* the input comes from L3 */
      for (int64_t k = 0; k < P->kd; ++k) {
        const float* q = bj + off[k];
        float* dk = pbuf + k * NR;
        if (fetch) {
          _mm_prefetch((const char*)(q + NR), _MM_HINT_T0);
          _mm_prefetch((const char*)(q + NR + 16), _MM_HINT_T0);
          _mm_prefetch((const char*)(q + NR + 32), _MM_HINT_T0);
          _mm_prefetch((const char*)(q + NR + 47), _MM_HINT_T0);
        }
        for (int64_t v = 0; v < nv; ++v)
          _mm512_store_ps(dk + 16 * v, _mm512_maskz_loadu_ps(v == nv - 1 ? tail : 0xFFFF,
                                                             q + 16 * v));
      }
      for (int64_t m = m0; m < m1; m += MR) {
        const int64_t mr = m1 - m < MR ? m1 - m : MR;
        const int64_t ch0 = grp * P->mg + m, at0 = (b * g->k + ch0) * P->ohw;
        const reg_ep e = reg_ep_at(ep, ch0, at0);
        uki_table[mr][nv](P->kd, apack + m / MR * P->kd * MR, pbuf, poff, out + at0, P->ohw,
                          &d[j - pa], tail, in_regs ? &e : NULL, NULL);
      }
    }
    if (ep != NULL && !in_regs && o1 > o0)
      for (int64_t ch = grp * P->mg + m0; ch < grp * P->mg + m1; ++ch)
        epilogue_span(ep, ch, out, (b * g->k + ch) * P->ohw + o0, o1 - o0);
    return;
  }
  for (int64_t m = m0; m < m1; m += MR) {
    const int64_t mr = m1 - m < MR ? m1 - m : MR;
    const float* a = apack + m / MR * P->kd * MR;
    const int64_t ch0 = grp * P->mg + m, at0 = (b * g->k + ch0) * P->ohw;
    float* orow = out + at0;
    const reg_ep e = reg_ep_at(ep, ch0, at0);
    for (int64_t j = pa; j < pb; ++j) {
      const int64_t w = Q->ncols - j * NR < NR ? Q->ncols - j * NR : NR;
      const int64_t nv = (w + 15) / 16;
      /* read in place (not a copy just built), the input comes from L3: the tile's first
       * block of channels fetches each next panel's (256 -> 64 1x1 on 56x56, input in L3:
       * 0.697-0.728 -> 0.663-0.684 ms; 256 -> 128 1.39-1.40 -> 1.31-1.36) */
      const float* pfb = P->panels_outer && Q->direct && m == m0 && (j + 1) * NR < Q->ncols
                             ? src + (j + 1) * NR
                             : NULL; /* (on Zen 4 the same fetch was 3 % slower: helper f32) */
      uki_table[mr][nv](P->kd, a, src + j * NR, off, orow, P->ohw, &d[j - pa],
                        lane_mask(w - 16 * (nv - 1)), in_regs ? &e : NULL, pfb);
    }
    if (ep != NULL && !in_regs && o1 > o0)
      for (int64_t i = 0; i < mr; ++i) {
        const int64_t ch = grp * P->mg + m + i;
        epilogue_span(ep, ch, out, (b * g->k + ch) * P->ohw + o0, o1 - o0);
      }
  }
}

/* The implicit GEMM's loops (pool_for items): the padded copy and packed weights, then tiles. */
typedef struct imp_job {
  const conv_plan* P;
  const imp_plan* Q;
  const float* weights;
  const float* img; /* the current image-group's input */
  float* copy;
  const float* src; /* the grid the kernel reads: img (direct) or copy */
  const int64_t* off;
  float* apack;
  float* out;
  const sdp_f32* ep;
  int64_t nbuild, b, grp, ntiles, mchunks, mblocks;
  char* panels;        /* per participant, panel_bytes apart: a packed panel; or NULL */
  size_t panel_bytes;
  const int64_t* poff; /* the packed panel's depth offsets: k * NR */
} imp_job;

/* Item idx < nbuild: phase plane idx of the copy; past it, block idx - nbuild of the weights. */
static void imp_build_item(void* ctx, int64_t idx, int participant) {
  const imp_job* J = ctx;
  (void)participant;
  if (idx < J->nbuild) {
    imp_build_plane(J->P, J->Q, J->img, idx, J->copy);
  } else {
    pack_a(J->P, J->weights, J->grp, idx - J->nbuild, J->apack);
  }
}

/* Item = (tile of panels, chunk of channel blocks), chunk innermost. */
static void imp_tile_item(void* ctx, int64_t it, int participant) {
  const imp_job* J = ctx;
  const conv_plan* P = J->P;
  const int64_t tile = it / J->mchunks, mc = it % J->mchunks, np = J->Q->npanels;
  const int64_t pa = np * tile / J->ntiles, pb = np * (tile + 1) / J->ntiles;
  const int64_t mb0 = J->mblocks * mc / J->mchunks, mb1 = J->mblocks * (mc + 1) / J->mchunks;
  const int64_t m1 = mb1 * MR < P->mg ? mb1 * MR : P->mg;
  imp_tile(P, J->Q, J->src, J->off, J->apack, J->out, J->ep, J->b, J->grp, mb0 * MR, m1, pa, pb,
           J->panels != NULL ? (float*)(J->panels + participant * J->panel_bytes) : NULL,
           J->poff);
}

static accel_status conv_implicit(const conv_plan* P, const float* in, const float* weights,
                                  float* out, const sdp_f32* ep, workspace* ws, int num_threads) {
  const conv_geometry* g = P->g;
  imp_plan Q;
  imp_make_plan(P, &Q, 1);
  const int64_t mblocks = (P->mg + MR - 1) / MR;

  /* Work: tiles of at most max_panels panels, whose input rows (all channels) stay in L2 while
   * every block of channels passes over them. With threads, at least 4 items per thread (items
   * are claimed as the threads come: a late thread finds fewer left), first by smaller tiles,
   * then by splitting the channel blocks. */
  const int64_t row_bytes = P->cg * Q.nph * Q.wq * (int64_t)sizeof(float);
  int64_t rows = (512 * 1024) / row_bytes - (g->kernel_h - 1) * g->dilation_h / g->stride_h;
  if (rows < 1) rows = 1;
  int64_t max_panels = rows * Q.wq / NR;
  if (max_panels > IMP_MAX_PANELS) max_panels = IMP_MAX_PANELS;
  if (max_panels < 1) max_panels = 1;
  int64_t ntiles = (Q.npanels + max_panels - 1) / max_panels, mchunks = 1;
  if (num_threads > 1) {
    const int64_t want = 4 * (int64_t)num_threads;
    if (ntiles < want) ntiles = Q.npanels < want ? Q.npanels : want;
    while (ntiles * mchunks < want && mchunks < mblocks) ++mchunks;
  }
  const int64_t items = ntiles * mchunks;
  const int nth = (int)(items < num_threads ? items : num_threads);

  /* Where the packed panels stay in L1 (P->panels_outer) and a panel of 96-170 depth rows
   * fits in 32 KB, tiles of at least IMP_PACK_BLOCKS blocks of channels copy each panel into a
   * contiguous buffer first and pass every block over it (Sapphire Rapids, medians of 5: 128 ->
   * 512 1x1 on 28x28 0.699 -> 0.667 ms, 128 -> 256 on 56x56 1.36 -> 1.25; not with 8 blocks,
   * 32 -> 64 on 112x112 0.42 -> 0.44, nor 64 deep: 64 -> 128 on 112x112 gained 1.56 -> 1.45
   * alone, but ResNet-50's 64 -> 256 on 56x56 lost in the network, 0.45 -> 0.71 ms at 2
   * threads; 24 -> 144 on 56x56 0.157 -> 0.166). */
  const int packb = P->panels_outer && P->kd >= 96 &&
                    P->kd * NR * (int64_t)sizeof(float) <= 32 * 1024 &&
                    mblocks / mchunks >= IMP_PACK_BLOCKS;
  /* Slot 0, shared: the padded copy, the depth offsets and the packed weights (and the packed
   * panels' offsets and a panel per participant). */
  const size_t copy_bytes = Q.direct ? 0 : round64((size_t)imp_copy_floats(P, &Q) * sizeof(float));
  const size_t off_bytes = round64((size_t)P->kd * sizeof(int64_t));
  const size_t apack_bytes = round64((size_t)(mblocks * MR * P->kd) * sizeof(float));
  const size_t panel_bytes = packb ? round64((size_t)(P->kd * NR) * sizeof(float)) : 0;
  char* shared = workspace_get(ws, 0, copy_bytes + 2 * off_bytes + apack_bytes +
                                          (size_t)nth * panel_bytes);
  if (shared == NULL) return ACCEL_ERR_NO_MEMORY;
  float* copy = (float*)shared;
  int64_t* off = (int64_t*)(shared + copy_bytes);
  float* apack = (float*)(shared + copy_bytes + off_bytes);
  int64_t* poff = (int64_t*)(shared + copy_bytes + off_bytes + apack_bytes);
  char* panels = packb ? shared + copy_bytes + 2 * off_bytes + apack_bytes : NULL;
  imp_offsets(P, &Q, off);
  if (packb)
    for (int64_t k = 0; k < P->kd; ++k) poff[k] = k * NR;
  if (!Q.direct) {
    const int64_t n = imp_copy_floats(P, &Q), used = P->cg * Q.nph * Q.plane;
    memset(copy + used, 0, (size_t)(n - used) * sizeof(float));
  }
  imp_job J = {P,    &Q,      weights,    NULL,   copy,    NULL,    off,         apack,
               out,  ep,      Q.direct ? 0 : P->cg * Q.nph, 0, 0, ntiles, mchunks, mblocks,
               panels, panel_bytes, poff};
  for (int64_t gb = 0; gb < (int64_t)g->n * g->groups; ++gb) {
    J.grp = gb / g->n; /* group outer: weights packed once each */
    J.b = gb % g->n;
    J.img = in + (J.b * g->c + J.grp * P->cg) * P->hw;
    J.src = Q.direct ? J.img : copy;
    const int64_t npack = J.b == 0 ? mblocks : 0;
    pool_for(nth, J.nbuild + npack, imp_build_item, &J);
    pool_for(nth, items, imp_tile_item, &J);
  }
  return ACCEL_OK;
}

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
      imp_build_plane(P, J->Q, J->in + plane * P->hw, ph, copy);
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
  imp_make_plan(P, &Q, 0);
  const int64_t planes = (int64_t)g->n * g->c; /* input planes; each feeds mg outputs */
  const int nth = (int)(planes < num_threads ? planes : num_threads);
  /* the copy reads up to 63 floats past its grid: imp_copy_floats has that slack */
  const size_t copy_bytes = round64((size_t)imp_copy_floats(P, &Q) * sizeof(float));
  const size_t grid_bytes = round64((size_t)(Q.ncols + 64) * sizeof(float));
  const size_t off_bytes = round64((size_t)P->kd * sizeof(int64_t));
  char* bufs[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    bufs[t] = workspace_get(ws, t, copy_bytes + grid_bytes + off_bytes);
    if (bufs[t] == NULL) return ACCEL_ERR_NO_MEMORY;
    float* copy = (float*)bufs[t];
    const int64_t used = Q.nph * Q.plane;
    memset(copy + used, 0, copy_bytes - (size_t)used * sizeof(float));
    imp_offsets(P, &Q, (int64_t*)(bufs[t] + copy_bytes + grid_bytes));
  }

  /* a few planes per item when they are small */
  int64_t chunk = (int64_t)(8192 / (P->ohw * P->mg + 1));
  if (chunk > planes / (4 * nth)) chunk = planes / (4 * nth);
  if (chunk < 1) chunk = 1;
  dw_job J = {P, &Q, in, weights, out, ep, bufs, copy_bytes, grid_bytes, chunk, planes};
  pool_for(nth, (planes + chunk - 1) / chunk, dw_item, &J);
  return ACCEL_OK;
}

/* ---- depthwise by output rows: no copy of the plane ---------------------------------------- */

/* Output rows computed at once (R: 4, or 8 for rows of one vector): each input row is loaded
 * (zeros past the plane's edges) and shifted into its taps once for every row of the block that
 * reads it. A row's sum is a chain of K*K dependent fused multiply-adds; 8 rows keep 8 chains
 * going, which two FMA units of 4 cycles' latency need (Sapphire Rapids: 960 channels on 7x7
 * 0.051 -> 0.043 ms, 384 on 14x14 0.039 -> 0.034; planes wider than a vector have their chains
 * already and gain nothing). */
enum { DWR_ROWS = 8 }; /* the most */

/* Output plane (offset `at` of out) of channel ch from input plane src and its taps w, for a
 * K x K kernel at stride ST in both directions, no dilation (compile-time constants: every
 * loop below unrolls, the accumulators and source vectors stay in registers). Each output is
 * sum over taps t = r * K + s, in that order, of w[t] * x (x zero in the padding) by one fused
 * multiply-add each, from zero: the copy-based kernel's sums exactly. Rows past the plane are
 * computed from zeros and not stored. The epilogue runs on finished rows while in L1. */
static inline __attribute__((always_inline)) void dwr_body(const int K, const int ST,
                                                           const int R,
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

typedef void (*dwr_fn)(const conv_plan*, const float*, const float*, float*, int64_t,
                       const sdp_f32*, int64_t);
#define DWR(K_, ST_, R_)                                                                      \
  static void dwr_##K_##_##ST_##_##R_(const conv_plan* P, const float* src, const float* w,   \
                                      float* out, int64_t at, const sdp_f32* ep, int64_t ch) {\
    dwr_body(K_, ST_, R_, P, src, w, out, at, ep, ch);                                        \
  }
DWR(3, 1, 4) DWR(3, 2, 4) DWR(5, 1, 4) DWR(5, 2, 4)
DWR(3, 1, 8) DWR(3, 2, 8) DWR(5, 1, 8) DWR(5, 2, 8)

/* The row kernel for this geometry, or NULL: square 3x3 and 5x5 kernels, strides 1 and 2 in
 * both directions, no dilation (MobileNets', EfficientNets'); the rest take the copy. */
static dwr_fn dwr_kernel(const conv_plan* P) {
  const conv_geometry* g = P->g;
  if (g->kernel_h != g->kernel_w || g->stride_h != g->stride_w || g->dilation_h != 1 ||
      g->dilation_w != 1)
    return NULL;
  /* rows of one vector, where measured (two FMA units: see conv_plan.panels_outer) */
  const int one = P->panels_outer && g->out_w <= 16;
  const int k = g->kernel_h, st = g->stride_h;
  if (k == 3 && st == 1) return one ? dwr_3_1_8 : dwr_3_1_4;
  if (k == 3 && st == 2) return one ? dwr_3_2_8 : dwr_3_2_4;
  if (k == 5 && st == 1) return one ? dwr_5_1_8 : dwr_5_1_4;
  if (k == 5 && st == 2) return one ? dwr_5_2_8 : dwr_5_2_4;
  return NULL;
}

typedef struct dwr_job {
  const conv_plan* P;
  const float* in;
  const float* weights;
  float* out;
  const sdp_f32* ep;
  dwr_fn kernel;
  int64_t chunk, planes;
} dwr_job;

/* Item: output planes [item * chunk, ...). */
static void dwr_item(void* ctx, int64_t item, int participant) {
  const dwr_job* J = ctx;
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

static accel_status conv_depthwise_rows(const conv_plan* P, dwr_fn kernel, const float* in,
                                        const float* weights, float* out, const sdp_f32* ep,
                                        int num_threads) {
  const conv_geometry* g = P->g;
  const int64_t planes = (int64_t)g->n * g->k;
  const int nth = (int)(planes < num_threads ? planes : num_threads);
  int64_t chunk = (int64_t)(8192 / (P->ohw + 1)); /* a few planes per item when they are small */
  if (chunk > planes / (4 * nth)) chunk = planes / (4 * nth);
  if (chunk < 1) chunk = 1;
  dwr_job J = {P, in, weights, out, ep, kernel, chunk, planes};
  pool_for(nth, (planes + chunk - 1) / chunk, dwr_item, &J);
  return ACCEL_OK;
}

#endif /* __AVX512F__ */

/* 1 when a packed panel of CONV_KC_L1 depth rows fits in half the L1 data cache (sysconf's
 * figure, read once; 0 when the system does not say). */
static int l1_keeps_panel(void) {
  static int cached = -1; /* benign race: every thread computes the same value */
  int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (v < 0) {
    long l1 = 0;
#ifdef _SC_LEVEL1_DCACHE_SIZE
    l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE);
#endif
    v = l1 > 0 && (long)(48 * CONV_KC_L1 * sizeof(float)) * 2 <= l1;
    __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
  }
  return v;
}

/* conv_f32's plan of a geometry and the path it takes: 'f' a batch of fully connected rows,
 * 'r' depthwise by rows (dwr_kernel), 'c' depthwise through the padded copy, 'i' the implicit
 * GEMM, 'p' the packed path, 'b' BLAS tiles (no AVX-512). */
static char f32_plan(const conv_geometry* g, conv_plan* out) {
  conv_plan P;
  P.g = g;
  P.cg = g->c / g->groups;
  P.mg = g->k / g->groups;
  P.kd = P.cg * g->kernel_h * g->kernel_w;
  P.hw = (int64_t)g->h * g->w;
  P.ohw = (int64_t)g->out_h * g->out_w;
  {
    P.panels_outer = l1_keeps_panel();
    const int64_t kc_max = P.panels_outer ? CONV_KC_L1 : CONV_KC_MAX;
    const int64_t nb = (P.kd + kc_max - 1) / kc_max;
    P.kc = ((P.kd + nb - 1) / nb + 31) & ~(int64_t)31; /* a multiple of SUM_BLOCK */
    /* no panels (at most 8 positions: dot products only): the whole depth at once, a
     * classifier's weight rows streamed once (2048 -> 1000 with its weights out of cache: 128-
     * deep blocks 0.71-0.72 ms, 512-deep 0.61) */
    if (P.kc > P.kd || P.ohw <= 8) P.kc = P.kd;
  }
  P.pointwise = g->kernel_h == 1 && g->kernel_w == 1 && g->stride_h == 1 && g->stride_w == 1 &&
                g->pad_top == 0 && g->pad_left == 0 && g->out_h == g->h && g->out_w == g->w;
  *out = P;
#ifdef CONV_F32_TEST_PATHS /* tests only: CONV_F32_PATH=b|p|i|c forces a path where it applies
                             (c: depthwise through the padded copy) */
  const char* fp = getenv("CONV_F32_PATH");
  const char force = fp != NULL ? fp[0] : 0;
#else
  const char force = 0;
#endif
  if (force == 'b') return 'b';
  if (P.ohw == 1 && g->n > 1 && P.cg > 1) return 'f';
#ifdef __AVX512F__
  if (P.cg == 1 && force != 'p') return force != 'c' && dwr_kernel(&P) != NULL ? 'r' : 'c';
  imp_plan Q;
  imp_make_plan(&P, &Q, 1);
  /* Implicit GEMM where measured faster: enough columns (tails cost a panel), few garbage
   * columns, a depth whose weight panel streams well from L2 (the packed path blocks it), and
   * with stride 2 only a small depth and every phase copied used (a 1x1/2 copies its one). */
  const int imp_ok = g->stride_h <= 2 && g->stride_w <= 2 && (Q.direct || Q.wq >= 16);
  const int all_phases = Q.nph == 1 || (g->kernel_h >= g->stride_h && g->kernel_w >= g->stride_w &&
                                        g->dilation_h == 1 && g->dilation_w == 1);
  /* (With the packed panels in L1 the packed path wins the stride-2 phases from 576 deep: 128
   * 3x3/2 on 56x56 1.83-1.85 -> 1.55-1.58 ms, 64 -> 128 0.88 -> 0.83.) */
  const int imp_good = (Q.wq - g->out_w) * 12 <= Q.wq && Q.ncols >= 512 && P.kd <= 2304 &&
                       all_phases && (Q.nph == 1 || P.kd <= (P.panels_outer ? 512 : 1024));
  if (imp_ok && (force == 'i' || (force != 'p' && imp_good))) return 'i';
  return 'p';
#else
  return 'b';
#endif
}

int conv_f32_dot_tail(const conv_geometry* g) {
  conv_plan P;
  switch (f32_plan(g, &P)) {
#ifdef __AVX512F__
    case 'i':
      return 0;
    case 'p':
      return (int)(P.ohw % 16 <= TMAX ? P.ohw % 16 : 0);
#endif
    default:
      return -1;
  }
}

accel_status conv_f32(const conv_geometry* g, const float* in, const float* weights, float* out,
                      const sdp_f32* epilogue, workspace* ws, int32_t num_threads) {
  conv_plan P;
  const char path = f32_plan(g, &P);
  if (num_threads < 1) num_threads = 1;
  if (num_threads > WS_THREAD_SLOTS) num_threads = WS_THREAD_SLOTS;
  switch (path) {
    case 'f':
      return conv_fc_batch(&P, in, weights, out, epilogue, ws, num_threads);
#ifdef __AVX512F__
    case 'r':
      return conv_depthwise_rows(&P, dwr_kernel(&P), in, weights, out, epilogue, num_threads);
    case 'c':
      return conv_depthwise(&P, in, weights, out, epilogue, ws, num_threads);
    case 'i':
      return conv_implicit(&P, in, weights, out, epilogue, ws, num_threads);
    case 'p':
      return conv_packed(&P, in, weights, out, epilogue, ws, num_threads);
#endif
    default:
      return conv_blas_tiles(&P, in, weights, out, epilogue, ws, num_threads);
  }
}
