/* conv/f32.h - the FP32 CONV family's shared definitions (internal to csrc/conv/f32_*.c).
 *
 * The plan of a geometry, the AVX-512 kernels' common macros and helpers, the implicit GEMM's
 * padded, stride-phase-split copy (conv/f32_copy_avx512.c; the depthwise kernel reads it too)
 * and the implementation interface of conv/f32_impls.c's list. The summation order every
 * implementation keeps is conv/f32_order.h's. Small helpers are static inline here so that
 * every kernel file inlines them as the one file did.
 */
#ifndef ACCEL_CONV_F32_H_
#define ACCEL_CONV_F32_H_

#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "kernels.h"
#include "conv/f32_order.h"

#ifndef CONV_KC_MAX
#define CONV_KC_MAX 512 /* depth block of the packed path: 8 weight rows of it stay in L1 */
#endif
/* Depth block of the packed path where a 48-wide panel of CONV_KC_L1 rows (24 KB) fits in half the
 * L1 data cache (a 48 KB L1d): the panel then stays in L1 while every block of output channels
 * passes over it, panels outermost. With a smaller L1 (32 KB) neither depth keeps a panel there,
 * and CONV_KC_MAX with channel blocks outermost measured faster (docs/whole_network_time.md). */
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
                     * packed path's panels stay in L1, outermost. The choices measured on such
                     * machines (Sapphire Rapids; Zen 5 server cores: two 512-bit FMA units
                     * came with the 48 KB L1d, docs/kernels.md) key on it too (the depthwise
                     * rows' 8-row blocks: measured on Zen 5 only; Intel client cores and Zen 5
                     * mobile, 48 KB with narrower FMA datapaths, take them unmeasured); with a
                     * 32 KB L1d the old ones stay. */
  int64_t l1;     /* the L1 data cache's size in bytes (l1d_bytes: ACCEL_L1D_BYTES or sysconf; 0
                   * when neither says) */
  int64_t l2;     /* the L2 cache's size in bytes (ACCEL_L2_BYTES or sysconf; 0 when neither
                   * says) */
  int pointwise;  /* 1x1, stride 1, no padding: output position n reads input position n */
} conv_plan;

static inline void epilogue_span(const sdp_f32* ep, int64_t ch, float* out, int64_t at,
                                 int64_t count) {
  sdp_f32_span(ep, (int32_t)ch, out + at, ep->ew_operand != NULL ? ep->ew_operand + at : NULL,
               count);
}

/* The epilogue of channels ch .. ch + n - 1 of an image whose outputs are single positions
 * (ohw 1), out + at the first: one call, not one per channel (sdp_f32_channels). */
static inline void epilogue_channels(const sdp_f32* ep, int64_t ch, float* out, int64_t at,
                                     int64_t n) {
  sdp_f32_channels(ep, (int32_t)ch, out + at, ep->ew_operand != NULL ? ep->ew_operand + at : NULL,
                   n);
}

/* ---- OpenBLAS (fc_blas, blas) and the packed path's column packing ------------------- */

/* One threading layer: pool.c. OpenBLAS runs single-threaded inside our parallel loops.
 * This build of scipy-openblas32 declares scipy_openblas_set_num_threads_local but does not
 * export it, so the (process-wide) count is set to 1, once, and left there. */
static inline void blas_single_threaded(void) {
  if (scipy_openblas_get_num_threads() != 1) scipy_openblas_set_num_threads(1);
}

/* Depth rows [p0, p0+kc) of the im2col column of output position (y, x) of image-group input
 * img, zero-padded to a multiple of 16. */
static inline void pack_col(const conv_plan* P, const float* img, int64_t y, int64_t x, int64_t p0,
                            int64_t kc, float* dst) {
  const conv_geometry* g = P->g;
  if (P->pointwise) { /* depth row p is input channel p at (y, x): a strided copy, no bounds */
    const float* src = img + p0 * P->hw + y * g->w + x;
    for (int64_t kk = 0; kk < kc; ++kk) dst[kk] = src[kk * P->hw];
    for (int64_t kk = kc; kk & 15; ++kk) dst[kk] = 0.0f;
    return;
  }
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

/* Depth rows [p0, p0+kc) of columns [n0, n0+nt) of the im2col matrix of image-group input
 * img in panels of pw columns: column j of row p0 + i at col[(j / pw) * kc * pw + i * pw +
 * j % pw] (pw >= nt: one panel, row p0 + i at col + i * pw, the blas path's; the AVX2 GEMM's
 * panels of 24). conv/f32_blas.c. */
void f32_im2col_tile(const conv_plan* P, const float* img, int64_t n0, int64_t nt, int64_t p0,
                     int64_t kc, int64_t pw, float* col);

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
/* The first n (1..7) lanes of v stored at p: 4, 2 and 1 at a time, where vmaskmovps's store
 * costs ~22 cycles on a Zen 3 (docs/kernels.md) against ~3 stores here. */
static inline void f32x8_store_first(float* p, __m256 v, int64_t n) {
  __m128 q = _mm256_castps256_ps128(v);
  if (n >= 4) {
    _mm_storeu_ps(p, q);
    q = _mm256_extractf128_ps(v, 1);
    p += 4;
    n -= 4;
  }
  if (n >= 2) {
    _mm_storel_pi((__m64*)p, q);
    q = _mm_movehl_ps(q, q);
    p += 2;
    n -= 2;
  }
  if (n > 0) _mm_store_ss(p, q);
}
#endif

/* ---- the implementation interface (conv/f32_impls.c) ------------------------------------ */
typedef struct conv_f32_call {
  const conv_plan* P;
  const float* in;
  const float* weights;
  float* out;
  const sdp_f32* ep;
  workspace* ws;
  int nth;
} conv_f32_call;

/* An implementation: applies, whether the list picks it for this call (the geometry, the CPU
 * and the measured preference; the first in the list that applies runs); supports, whether it
 * computes this geometry at all (ACCEL_CONV_IMPL forces it only then; NULL: applies); run;
 * dot_tail, conv_f32_dot_tail's answer for the geometry (NULL: -1, not reproduced by the C16
 * kernels; conv/f32_order.h). */
typedef struct conv_f32_impl {
  const char* name;
  int (*applies)(const conv_f32_call* c);
  int (*supports)(const conv_f32_call* c);
  accel_status (*run)(const conv_f32_call* c);
  int (*dot_tail)(const conv_plan* P);
} conv_f32_impl;

extern const conv_f32_impl conv_f32_fc_blas_impl, conv_f32_blas_impl;

/* A depthwise kernel's output plane (offset `at` of out) of channel ch from its input plane src
 * and its taps w, the epilogue ep included (dw_rows_avx2, dw_rows_avx512), and the driver that
 * runs one over every plane of a call on the pool (conv/f32_dw_planes.c). */
typedef void (*f32_dw_plane_fn)(const conv_plan* P, const float* src, const float* w,
                                float* out, int64_t at, const sdp_f32* ep, int64_t ch);
accel_status f32_dw_planes_run(const conv_f32_call* c, f32_dw_plane_fn kernel);
#if defined(__AVX2__) && defined(__FMA__)
extern const conv_f32_impl conv_f32_dw_rows_avx2_impl, conv_f32_dw_avx2_impl,
    conv_f32_gemm_avx2_impl;
#endif
#ifdef __AVX512F__
extern const conv_f32_impl conv_f32_dw_c16_avx512_impl, conv_f32_dw_rows_avx512_impl,
    conv_f32_dw_avx512_impl,
    conv_f32_implicit_avx512_impl, conv_f32_packed_avx512_impl, conv_f32_narrow_avx512_impl;
#endif

#ifdef __AVX512F__
/* ---- AVX-512 micro-kernels' common parts ----------------------------------------------- */

static inline size_t round64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

#define MR 8        /* output channels per micro-tile */
#define NV 3        /* 16-float vectors of output positions per micro-tile */
#define NR (NV * 16)

static inline __mmask16 lane_mask(int64_t n) {
  return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* Accumulators are named variables: gcc keeps an array of vectors in memory and stores it on
 * every iteration. */
/* A micro-kernel per tile shape: KERNEL(m, v) defines P_m_v for m = 1..MR rows and v = 1..NV
 * vectors; F32_KERNEL_TABLE(P_) is the [MR + 1][NV + 1] table of them (index 0 empty). */
#define F32_KERNEL_ROW(KERNEL, M_) KERNEL(M_, 1) KERNEL(M_, 2) KERNEL(M_, 3)
#define F32_KERNEL_GRID(KERNEL)                                                     \
  F32_KERNEL_ROW(KERNEL, 1) F32_KERNEL_ROW(KERNEL, 2) F32_KERNEL_ROW(KERNEL, 3)      \
  F32_KERNEL_ROW(KERNEL, 4) F32_KERNEL_ROW(KERNEL, 5) F32_KERNEL_ROW(KERNEL, 6)      \
  F32_KERNEL_ROW(KERNEL, 7) F32_KERNEL_ROW(KERNEL, 8)
#define F32_KERNEL_TABLE(P_) {                                                      \
    {0, 0, 0, 0},                      {0, P_##1_1, P_##1_2, P_##1_3},                 \
    {0, P_##2_1, P_##2_2, P_##2_3},    {0, P_##3_1, P_##3_2, P_##3_3},                 \
    {0, P_##4_1, P_##4_2, P_##4_3},    {0, P_##5_1, P_##5_2, P_##5_3},                 \
    {0, P_##6_1, P_##6_2, P_##6_3},    {0, P_##7_1, P_##7_2, P_##7_3},                 \
    {0, P_##8_1, P_##8_2, P_##8_3}}

#define ALL_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define ACC_ROW(m) __m512 c##m##0 = _mm512_setzero_ps(), c##m##1 = c##m##0, c##m##2 = c##m##0;
#define ACC_ZERO(m) if (mr > m) c##m##0 = c##m##1 = c##m##2 = _mm512_setzero_ps();
#define ACC_FMA(m, aval)                                                   \
  if (mr > m) {                                                            \
    const __m512 av = _mm512_set1_ps(aval);                                \
    c##m##0 = _mm512_fmadd_ps(av, b0, c##m##0);                            \
    if (nv > 1) c##m##1 = _mm512_fmadd_ps(av, b1, c##m##1);                \
    if (nv > 2) c##m##2 = _mm512_fmadd_ps(av, b2, c##m##2);                \
  }

/* Where the implicit micro-kernel's vectors of a grid panel land in the output (its garbage
 * columns skipped; conv/f32_implicit_avx512.c). */
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


/* ---- the implicit-GEMM path: a padded, stride-phase-split copy of the input ------------- */

/* Source vectors a segment may need, at most: outputs (3 vectors) plus the tap offsets. */
enum { SRCV = 8 };

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

/* The implicit GEMM's copy (conv/f32_copy_avx512.c): its plan, its size in floats, one plane
 * of it, the depth rows' offsets. */
void f32_imp_make_plan(const conv_plan* P, imp_plan* Q, int allow_direct);
int64_t f32_imp_copy_floats(const conv_plan* P, const imp_plan* Q);
void f32_imp_build_plane(const conv_plan* P, const imp_plan* Q, const float* img, int64_t idx,
                         float* dst);
void f32_imp_offsets(const conv_plan* P, const imp_plan* Q, int64_t* off);
#endif /* __AVX512F__ */

#endif /* ACCEL_CONV_F32_H_ */
