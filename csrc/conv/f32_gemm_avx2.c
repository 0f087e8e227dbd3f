/* conv/f32_gemm_avx2.c - FP32 CONV as a GEMM of 8-lane FMAs (impl "gemm_avx2"): the fp32 path
 * of builds without AVX-512 (x86-64-v3), in conv/f32_order.h's order, so such a build gives
 * the bits an AVX-512 build gives.
 *
 * im2col tiles written as panels (a2_im2col_panels: each 24 positions' depth rows contiguous),
 * a 4-channel x 24-position micro-kernel (12 accumulators of the 16 ymm registers) over them
 * with the weights read in place, each 32-deep block summed from zero by one FMA per depth step
 * and added to the output (the first block stored): the implicit and packed AVX-512 kernels'
 * sums. Per depth block (sized so that a panel of it fills half the L1d), panels outermost:
 * a panel stays in L1 while every block of 4 channels passes over it, rather than each
 * channel block reading the whole tile from L2, which an L2 of the tile's size holds badly
 * (docs/kernels.md). An image's last ohw % 16 positions are 16-lane dot products along the
 * depth, reduced in _mm512_reduce_add_ps's order, where conv/f32_order.h's f32_dot_tail says so
 * (a rule of the geometry that the AVX-512 paths keep too). A GEMM of one 32-deep block applies
 * a one-pass epilogue in the micro-kernel's store (a2_epi), the others in a pass over a chunk's
 * outputs while they are in L2. A strided 1x1 conv runs as the
 * pointwise GEMM over the one phase of its input that it reads, copied once (a2_run). On an
 * AVX-512 build the list's AVX-512 kernels run first and this one only when forced
 * (ACCEL_CONV_IMPL=gemm_avx2), which tests/sim/test_conv_impls.py uses to compare the bits. */
#include "conv/f32.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#include <math.h>

enum { AR = 4, AV = 3, AN = AV * 8 }; /* micro-tile: AR channels x AN positions */
enum { A2_NT = 16 * AN };             /* positions of a tile, at most */
enum { A2_KC_DEFAULT = 128 };         /* depth block where the L1d size is not known */
enum { A2_L2_DEFAULT = 256 << 10 };   /* L2 bytes assumed where the system does not say */
/* Output channels (per group), at most, of a pointwise GEMM whose full panels are read in place
 * from the input rows (a2_item): measured on MobileNetV2's projecting 1x1 layers (docs/kernels.md) */
enum { A2_IN_PLACE_MAX_MG = 32 };

/* Depth rows [p0, p0 + kc) of columns [n0, n0 + nt) of the im2col matrix of image-group input
 * img as panels of AN columns: column j of row i at col[(j / AN) * kc * AN + i * AN + j % AN]
 * (f32_im2col_tile's layout and values). */
static void a2_im2col_panels(const conv_plan* P, const float* img, int64_t n0, int64_t nt,
                             int64_t p0, int64_t kc, float* col) {
  if (P->pointwise) { /* row i is input channel p0 + i's positions: copies of the panels' runs */
    for (int64_t i = 0; i < kc; ++i) {
      const float* src = img + (p0 + i) * P->hw + n0;
      int64_t j = 0;
      for (; j + AN <= nt; j += AN) memcpy(col + j * kc + i * AN, src + j, AN * sizeof(float));
      if (j < nt) memcpy(col + j * kc + i * AN, src + j, (size_t)(nt - j) * sizeof(float));
    }
    return;
  }
  f32_im2col_tile(P, img, n0, nt, p0, kc, AN, col);
}

/* conv/f32_order.h's dot-product tail of this geometry: the one rule every build keeps. */
static int64_t a2_dot_tail(const conv_plan* P) { return f32_dot_tail(P->g); }

static inline __m256i lanes_below(int64_t n) {
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)(n < 0 ? 0 : n > 8 ? 8 : n)), iota);
}

/* c[m][0..w) (+)= sum over depth [0, kc) of a[m*lda + k] * b[k*ldb + 0..AN) for m < MR_, in
 * 32-deep blocks: each summed from zero, then added to c (stored into it when it is the first
 * block of the output: !accumulate && k0 == 0). b has AN readable columns (zeros past w). */
#define A2_ROWS(X) X(0) X(1) X(2) X(3)
#define A2_ACC(m) __m256 c##m##0 = _mm256_setzero_ps(), c##m##1 = c##m##0, c##m##2 = c##m##0;
#define A2_ZERO(m) if (MR_ > m) c##m##0 = c##m##1 = c##m##2 = _mm256_setzero_ps();
#define A2_FMA(m)                                                   \
  if (MR_ > m) {                                                    \
    const __m256 av = _mm256_broadcast_ss(a##m + k);                \
    c##m##0 = _mm256_fmadd_ps(av, b0, c##m##0);                     \
    c##m##1 = _mm256_fmadd_ps(av, b1, c##m##1);                     \
    c##m##2 = _mm256_fmadd_ps(av, b2, c##m##2);                     \
  }
#define A2_OUT1(m, v)                                                                      \
  {                                                                                        \
    float* p = c + m * ldc + 8 * v;                                                        \
    if (FULL || w >= 8 * (v + 1)) {                                                        \
      _mm256_storeu_ps(p, first ? c##m##v : _mm256_add_ps(_mm256_loadu_ps(p), c##m##v));  \
    } else if (w > 8 * v) { /* stored 4, 2, 1 lanes at a time: no vmaskmovps store */      \
      const __m256i mk = lanes_below(w - 8 * v);                                           \
      const __m256 t = first ? c##m##v : _mm256_add_ps(_mm256_maskload_ps(p, mk), c##m##v); \
      f32x8_store_first(p, t, w - 8 * v);                                                  \
    }                                                                                      \
  }
#define A2_OUT(m)     \
  if (MR_ > m) {      \
    A2_OUT1(m, 0)     \
    A2_OUT1(m, 1)     \
    A2_OUT1(m, 2)     \
  }
/* The output's final value (the depth's only block: EPI runs on one) with the epilogue in
 * registers (a2_epi): t * scale + shift, + the ADD operand, then max(lo, t) and min(hi, t), each
 * rounded, as sdp.c's span_one_pass. */
#define A2_EPI1(m, v)                                                                      \
  {                                                                                        \
    float* p = c + m * ldc + 8 * v;                                                        \
    __m256 t = _mm256_add_ps(_mm256_mul_ps(c##m##v, s##m), b##m);                          \
    if (FULL || w >= 8 * (v + 1)) {                                                        \
      if (EPI == 2) t = _mm256_add_ps(t, _mm256_loadu_ps(o + m * ldc + 8 * v));            \
      _mm256_storeu_ps(p, _mm256_min_ps(hi, _mm256_max_ps(lo, t)));                        \
    } else if (w > 8 * v) {                                                                \
      if (EPI == 2)                                                                        \
        t = _mm256_add_ps(t, _mm256_maskload_ps(o + m * ldc + 8 * v, lanes_below(w - 8 * v))); \
      f32x8_store_first(p, _mm256_min_ps(hi, _mm256_max_ps(lo, t)), w - 8 * v);            \
    }                                                                                      \
  }
#define A2_EPI(m)                                                                       \
  if (MR_ > m) {                                                                        \
    const __m256 s##m = _mm256_broadcast_ss(E->scale != NULL ? E->scale + ch + m : &one); \
    const __m256 b##m = _mm256_broadcast_ss(E->shift != NULL ? E->shift + ch + m : &nz);  \
    A2_EPI1(m, 0)                                                                       \
    A2_EPI1(m, 1)                                                                       \
    A2_EPI1(m, 2)                                                                       \
  }

/* A one-pass epilogue (sdp_f32_one_pass) applied by the micro-kernel to an output's final
 * block before its store, where a separate pass over the tile's outputs (epilogue_span) would
 * read and write them again: scale and shift per channel (NULL: none; multiplying by 1 and
 * adding -0 change no value, NaN and signed zeros included), the ADD operand (same layout as
 * the output) or NULL, and NONE / RELU / CLIP as the bounds [lo, hi] (NONE: -inf, +inf; RELU:
 * 0, +inf; max(lo, t) keeps NaN and -0 as span_one_pass's `t < lo ? lo : t` does). */
typedef struct a2_epi {
  const float* scale;
  const float* shift;
  const float* operand;
  float lo, hi;
} a2_epi;

static inline __attribute__((always_inline)) void a2_body(
    const int MR_, const int FULL, const int EPI, int64_t kc, const float* a, int64_t lda,
    const float* b, int64_t ldb, float* c, int64_t ldc, int accumulate, int64_t w,
    const float* pf, const float* pc, const a2_epi* E, int64_t ch, const float* o) {
  const float* a0 = a;
  const float* a1 = a + (MR_ > 1 ? 1 : 0) * lda;
  const float* a2 = a + (MR_ > 2 ? 2 : 0) * lda;
  const float* a3 = a + (MR_ > 3 ? 3 : 0) * lda;
  A2_ROWS(A2_ACC)
  if (pc != NULL) /* the next tile's outputs (AN floats a row: 3 lines at most) */
    for (int m = 0; m < AR; ++m) {
      _mm_prefetch((const char*)(pc + m * ldc), _MM_HINT_T0);
      _mm_prefetch((const char*)(pc + m * ldc + 16), _MM_HINT_T0);
      _mm_prefetch((const char*)(pc + m * ldc + AN - 1), _MM_HINT_T0);
    }
  for (int64_t k0 = 0; k0 < kc; k0 += SUM_BLOCK) {
    const int64_t k1 = kc - k0 < SUM_BLOCK ? kc : k0 + SUM_BLOCK;
    A2_ROWS(A2_ZERO)
    if (pf != NULL) /* the next rows' lines of this block meanwhile: weights stream from memory */
      for (int64_t k = k0; k < k1; k += 16)
        for (int m = 0; m < AR; ++m) _mm_prefetch((const char*)(pf + m * lda + k), _MM_HINT_T0);
    const float* bk = b + k0 * ldb;
    _Pragma("GCC unroll 4")
    for (int64_t k = k0; k < k1; ++k, bk += ldb) {
      const __m256 b0 = _mm256_loadu_ps(bk), b1 = _mm256_loadu_ps(bk + 8),
                   b2 = _mm256_loadu_ps(bk + 16);
      A2_ROWS(A2_FMA)
    }
    const int first = !accumulate && k0 == 0;
    if (EPI) { /* the depth's one block (a2_gemm): the output's final value */
      const float one = 1.0f, nz = -0.0f;
      const __m256 lo = _mm256_set1_ps(E->lo), hi = _mm256_set1_ps(E->hi);
      A2_ROWS(A2_EPI)
    } else {
      A2_ROWS(A2_OUT)
    }
  }
}

typedef void (*a2_fn)(int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t, int,
                      int64_t, const float*, const float*, const a2_epi*, int64_t, const float*);
#define A2_KERNEL(M_, F_, E_)                                                                 \
  static void a2_##M_##_##F_##_##E_(int64_t kc, const float* a, int64_t lda, const float* b,  \
                                    int64_t ldb, float* c, int64_t ldc, int accumulate,       \
                                    int64_t w, const float* pf, const float* pc,              \
                                    const a2_epi* E, int64_t ch, const float* o) {            \
    a2_body(M_, F_, E_, kc, a, lda, b, ldb, c, ldc, accumulate, w, pf, pc, E, ch, o);         \
  }
#define A2_KERNELS(E_)                                                                       \
  A2_KERNEL(1, 0, E_) A2_KERNEL(2, 0, E_) A2_KERNEL(3, 0, E_) A2_KERNEL(4, 0, E_)             \
  A2_KERNEL(1, 1, E_) A2_KERNEL(2, 1, E_) A2_KERNEL(3, 1, E_) A2_KERNEL(4, 1, E_)
A2_KERNELS(0) A2_KERNELS(1) A2_KERNELS(2)
/* [epilogue: none, in registers, in registers with an ADD operand][full panel][rows] */
static const a2_fn a2_table[3][2][AR + 1] = {
    {{0, a2_1_0_0, a2_2_0_0, a2_3_0_0, a2_4_0_0}, {0, a2_1_1_0, a2_2_1_0, a2_3_1_0, a2_4_1_0}},
    {{0, a2_1_0_1, a2_2_0_1, a2_3_0_1, a2_4_0_1}, {0, a2_1_1_1, a2_2_1_1, a2_3_1_1, a2_4_1_1}},
    {{0, a2_1_0_2, a2_2_0_2, a2_3_0_2, a2_4_0_2}, {0, a2_1_1_2, a2_2_1_2, a2_3_1_2, a2_4_1_2}}};

/* The 16 lanes lo (0..7), hi (8..15) summed in _mm512_reduce_add_ps's order (GCC's: halves,
 * then quarters, then pairs; kernels.h's c16_lanes_reduced). */
static inline float a2_reduce16(__m256 lo, __m256 hi) {
  const __m256 t3 = _mm256_add_ps(hi, lo);
  const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
  const __m128 t8 = _mm_add_ps(t6, _mm_movehl_ps(t6, t6)); /* t6[0] + t6[2], t6[1] + t6[3] */
  return _mm_cvtss_f32(_mm_add_ss(t8, _mm_movehdup_ps(t8)));
}

/* Dot products of weight rows a (lda apart, kd deep) with the tail column bt (zero past kd,
 * padded to a multiple of 16): lane l of 16 sums depths l, l + 16, ... by one FMA each (the
 * weights past kd read as zero), then the lanes reduced. Out: c[m * ldc] for m < mr. */
static void a2_dot(int64_t mr, int64_t kd, const float* a, int64_t lda, const float* bt,
                   float* c, int64_t ldc) {
  for (int64_t m = 0; m < mr; ++m) {
    const float* am = a + m * lda;
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    int64_t k = 0;
    for (; k + 16 <= kd; k += 16) {
      lo = _mm256_fmadd_ps(_mm256_loadu_ps(am + k), _mm256_load_ps(bt + k), lo);
      hi = _mm256_fmadd_ps(_mm256_loadu_ps(am + k + 8), _mm256_load_ps(bt + k + 8), hi);
    }
    if (k < kd) {
      const __m256 x0 = _mm256_maskload_ps(am + k, lanes_below(kd - k));
      const __m256 x1 = _mm256_maskload_ps(am + k + 8, lanes_below(kd - k - 8));
      lo = _mm256_fmadd_ps(x0, _mm256_load_ps(bt + k), lo);
      hi = _mm256_fmadd_ps(x1, _mm256_load_ps(bt + k + 8), hi);
    }
    c[m * ldc] = a2_reduce16(lo, hi);
  }
}

/* a2_dot's lane sums of rows a (lda apart, mr of them) with the nt tail columns bt (ldbt apart)
 * over depths [k0, k1) (k0 a multiple of 16, k1 one too or kd), carried in lanes[(r * nt + j) *
 * 16 ..] from one depth block to the next (from zero when first): the same FMAs per lane in the
 * same order as a2_dot over the whole depth, while the block's weight rows are in L1 from the
 * panels, not read again from memory after them. Columns 4 at a time (8 accumulators). */
static void a2_dot_block(int64_t mr, int64_t k0, int64_t k1, int64_t kd, const float* a,
                         int64_t lda, const float* bt, int64_t ldbt, int64_t nt, float* lanes,
                         int first) {
  for (int64_t r = 0; r < mr; ++r) {
    const float* am = a + r * lda;
    for (int64_t j0 = 0; j0 < nt; j0 += 4) {
      const int64_t nj = nt - j0 < 4 ? nt - j0 : 4;
      float* l = lanes + (r * nt + j0) * 16;
      __m256 lo[4], hi[4];
      for (int j = 0; j < 4; ++j) {
        lo[j] = j < nj && !first ? _mm256_loadu_ps(l + 16 * j) : _mm256_setzero_ps();
        hi[j] = j < nj && !first ? _mm256_loadu_ps(l + 16 * j + 8) : _mm256_setzero_ps();
      }
      const float* b = bt + j0 * ldbt;
      int64_t k = k0;
      for (; k + 16 <= k1; k += 16) {
        const __m256 x0 = _mm256_loadu_ps(am + k), x1 = _mm256_loadu_ps(am + k + 8);
        for (int j = 0; j < 4; ++j)
          if (j < nj) {
            lo[j] = _mm256_fmadd_ps(x0, _mm256_load_ps(b + j * ldbt + k), lo[j]);
            hi[j] = _mm256_fmadd_ps(x1, _mm256_load_ps(b + j * ldbt + k + 8), hi[j]);
          }
      }
      if (k < k1) { /* the depth's last, partial 16: weights past kd read as zero */
        const __m256 x0 = _mm256_maskload_ps(am + k, lanes_below(kd - k));
        const __m256 x1 = _mm256_maskload_ps(am + k + 8, lanes_below(kd - k - 8));
        for (int j = 0; j < 4; ++j)
          if (j < nj) {
            lo[j] = _mm256_fmadd_ps(x0, _mm256_load_ps(b + j * ldbt + k), lo[j]);
            hi[j] = _mm256_fmadd_ps(x1, _mm256_load_ps(b + j * ldbt + k + 8), hi[j]);
          }
      }
      for (int j = 0; j < 4; ++j)
        if (j < nj) {
          _mm256_storeu_ps(l + 16 * j, lo[j]);
          _mm256_storeu_ps(l + 16 * j + 8, hi[j]);
        }
    }
  }
}

typedef struct a2_job {
  const conv_plan* P;
  const float* in;
  const float* weights;
  float* out;
  const sdp_f32* ep;
  float* const* bufs; /* per participant: the tile's columns, then the tail columns */
  int64_t ntail, vcols, nt, ntiles, mchunks, mblocks, ldbt, kc;
  int64_t mc; /* channels a chunk of whose weights (mc x kc) stays in L2: a multiple of AR */
  int64_t mo; /* channels a chunk of whose outputs stays in L2 across the depth blocks */
  int epi;    /* 0: the epilogue (if any) as a pass over a chunk's outputs; 1, 2: in the
               * micro-kernel's last store (a2_epi E; 2: with its ADD operand), channel blocks
               * outside the panels (a2_item) */
  a2_epi E;
  int in_place; /* a pointwise GEMM of few output channels: full panels read from the input rows */
} a2_job;

/* Item it = (image-group, tile of positions, chunk of output channels), chunk innermost. A
 * tile's positions [n0, n0 + ncols) of the image's first vcols; the last tile also computes
 * the ntail dot-product positions. Depth blocks outermost, channel blocks of AR over every
 * panel of AN positions inside; each output's 32-deep blocks so run in depth order. */
static void a2_item(void* ctx, int64_t it, int participant) {
  const a2_job* J = ctx;
  const conv_plan* P = J->P;
  const conv_geometry* g = P->g;
  const int64_t mc = it % J->mchunks, tile = it / J->mchunks % J->ntiles;
  const int64_t bg = it / (J->mchunks * J->ntiles);
  const int64_t b = bg / g->groups, grp = bg % g->groups;
  const int64_t n0 = tile * J->nt;
  const int64_t ncols = J->vcols - n0 < J->nt ? J->vcols - n0 : J->nt;
  const int64_t ntail = tile == J->ntiles - 1 ? J->ntail : 0;
  const int64_t m0 = J->mblocks * mc / J->mchunks * AR;
  int64_t m1 = J->mblocks * (mc + 1) / J->mchunks * AR;
  if (m1 > P->mg) m1 = P->mg;
  const float* img = J->in + (b * g->c + grp * P->cg) * P->hw;
  float* cbase = J->out + (b * g->k + grp * P->mg) * P->ohw;
  const float* abase = J->weights + grp * P->mg * P->kd;
  const int64_t npanels = (ncols + AN - 1) / AN;
  float* col = J->bufs[participant];
  float* bt = col + ((J->nt + AN - 1) / AN * AN) * J->kc;

  /* the tail's columns over the whole depth; with panels, their lane sums ride along the depth
   * blocks (a2_dot_block) */
  const int fused_tail = ntail > 0 && ncols > 0;
  float* lanes = bt + TMAX * J->ldbt;
  for (int64_t j = 0; j < ntail; ++j) {
    const int64_t n = J->vcols + j;
    pack_col(P, img, n / g->out_w, n % g->out_w, 0, P->kd, bt + j * J->ldbt);
  }
  /* Channels in chunks of J->mc whose weight block stays in L2 while every panel passes over
   * it, inside the depth blocks: without, a layer of many channels (ViT-B's 3072) read its
   * weight block from memory once per panel. Where the item's outputs do not fit in L2 either
   * (a2_run), chunks of J->mo channels outside the depth blocks, so that a chunk's outputs
   * stay in L2 across them rather than come back from L3 at each; such a chunk builds the
   * panels of each depth block again (a copy for ViT-B's 1x1 layers: cheap beside the
   * block's GEMM). A chunk's tail lane sums and epilogue run while its outputs are in L2. */
  const int one_block = P->kd <= J->kc;
  for (int64_t mo = m0; mo < m1; mo += J->mo) {
    const int64_t mo1 = m1 - mo < J->mo ? m1 : mo + J->mo;
    for (int64_t p0 = 0; p0 < P->kd && ncols > 0; p0 += J->kc) {
      const int64_t kc = P->kd - p0 < J->kc ? P->kd - p0 : J->kc;
      const int64_t jlast = (npanels - 1) * AN, wlast = ncols - jlast;
      if (J->in_place) { /* the partial last panel alone copied (zeros past its columns) */
        if (wlast < AN) {
          a2_im2col_panels(P, img, n0 + jlast, wlast, p0, kc, col);
          for (int64_t kk = 0; kk < kc; ++kk)
            memset(col + kk * AN + wlast, 0, (size_t)(AN - wlast) * sizeof(float));
        }
      } else if (!one_block || mo == m0) {
        a2_im2col_panels(P, img, n0, ncols, p0, kc, col);
        if (wlast < AN) /* the last panel's columns: zeros past them */
          for (int64_t kk = 0; kk < kc; ++kk)
            memset(col + (npanels - 1) * kc * AN + kk * AN + wlast, 0,
                   (size_t)(AN - wlast) * sizeof(float));
      }
      if (J->epi) { /* one depth block (a2_gemm): each output's final value at its store */
        /* Channel blocks outside the panels: a block's 4 output rows are written in order,
         * panel after panel (each line whole before the next, the line 2 panels ahead
         * prefetched), where panels outermost wrote 96 bytes of every channel's row in turn.
         * The tile's panels are few (kc x 384 floats), so they stay in L1 / L2 meanwhile. */
        for (int64_t m = mo; m < mo1; m += AR) {
          const int64_t mr = mo1 - m < AR ? mo1 - m : AR;
          const float* a = abase + m * P->kd;
          for (int64_t j = 0; j < ncols; j += AN) {
            const int64_t w = ncols - j < AN ? ncols - j : AN;
            float* ct = cbase + m * P->ohw + n0 + j;
            a2_table[J->epi][w == AN][mr](kc, a, P->kd, col + (j / AN) * kc * AN, AN, ct, P->ohw,
                                          0, w, NULL, j + 3 * AN <= ncols ? ct + 2 * AN : NULL,
                                          &J->E, grp * P->mg + m,
                                          J->epi == 2 ? J->E.operand + (ct - J->out) : NULL);
            if (fused_tail && j + AN >= ncols)
              a2_dot_block(mr, 0, kc, P->kd, a, P->kd, bt, J->ldbt, ntail,
                           lanes + (m - m0) * ntail * 16, 1);
          }
        }
        continue;
      }
      for (int64_t mb = mo; mb < mo1; mb += J->mc) {
        const int64_t mb1 = mo1 - mb < J->mc ? mo1 : mb + J->mc;
        for (int64_t j = 0; j < ncols; j += AN) {
          const int64_t w = ncols - j < AN ? ncols - j : AN;
          /* A pointwise GEMM of few output channels (at most A2_IN_PLACE_MAX_MG) reads its full
           * panels from the input rows themselves (ldb: the plane), the next panel's rows
           * requested a share per channel block meanwhile: its panels serve too few channel
           * blocks for their copy (input from L3, panels written to and read back from L2) to
           * pay, which was a third of a 144 -> 24 layer's time. */
          const int ip = J->in_place && w == AN;
          const float* panel = ip ? img + p0 * P->hw + n0 + j
                               : col + (J->in_place ? 0 : j / AN) * kc * AN;
          const int64_t ldb = ip ? P->hw : AN;
          const int64_t nblocks = (mb1 - mb + AR - 1) / AR;
          const int fetch_next = J->in_place && j + 2 * AN <= ncols;
          for (int64_t m = mb; m < mb1; m += AR) {
            const int64_t mr = mb1 - m < AR ? mb1 - m : AR;
            if (fetch_next) {
              const int64_t bi = (m - mb) / AR;
              for (int64_t r = kc * bi / nblocks; r < kc * (bi + 1) / nblocks; ++r) {
                const float* q = img + (p0 + r) * P->hw + n0 + j + AN;
                _mm_prefetch((const char*)q, _MM_HINT_T0);
                _mm_prefetch((const char*)(q + AN - 1), _MM_HINT_T0);
              }
            }
            const float* a = abase + m * P->kd + p0;
            const float* pf = m + 2 * AR <= mb1 ? a + AR * P->kd : NULL;
            float* ct = cbase + m * P->ohw + n0 + j;
            /* the next tile's outputs meanwhile (from L2 or beyond at each depth block) */
            const float* pc = m + 2 * AR <= mb1 ? ct + AR * P->ohw : NULL;
            a2_table[0][w == AN][mr](kc, a, P->kd, panel, ldb, ct, P->ohw, p0 > 0, w, pf, pc,
                                     NULL, 0, NULL);
            if (fused_tail && j + AN >= ncols) /* the last panel: the rows are in L1 */
              a2_dot_block(mr, p0, p0 + kc, P->kd, a - p0, P->kd, bt, J->ldbt, ntail,
                           lanes + (m - m0) * ntail * 16, p0 == 0);
          }
        }
      }
    }
    if (fused_tail) {
      for (int64_t m = mo; m < mo1; ++m)
        for (int64_t j = 0; j < ntail; ++j) {
          const float* l = lanes + ((m - m0) * ntail + j) * 16;
          cbase[m * P->ohw + J->vcols + j] =
              a2_reduce16(_mm256_loadu_ps(l), _mm256_loadu_ps(l + 8));
        }
    } else if (ntail > 0) {
      for (int64_t m = mo; m < mo1; m += AR) {
        const int64_t mr = mo1 - m < AR ? mo1 - m : AR;
        for (int64_t j = 0; j < ntail; ++j)
          a2_dot(mr, P->kd, abase + m * P->kd, P->kd, bt + j * J->ldbt,
                 cbase + m * P->ohw + J->vcols + j, P->ohw);
      }
    }
    if (J->ep != NULL) { /* where the micro-kernel applied it, on the tail positions alone */
      const int64_t at = J->epi && ncols > 0 ? J->vcols : n0 < J->vcols ? n0 : J->vcols;
      const int64_t count = (ncols > 0 && !J->epi ? ncols : 0) + ntail;
      if (P->ohw == 1) { /* channels of one position side by side: one call (sdp_f32_channels) */
        const int64_t ch = grp * P->mg + mo;
        epilogue_channels(J->ep, ch, J->out, b * g->k + ch, mo1 - mo);
      } else if (count > 0) {
        for (int64_t m = mo; m < mo1; ++m) {
          const int64_t ch = grp * P->mg + m;
          epilogue_span(J->ep, ch, J->out, (b * g->k + ch) * P->ohw + at, count);
        }
      }
    }
  }
}

/* The GEMM of call c (its plan, input) with ntail dot-product positions (the tail rule of the
 * geometry the caller was given: a2_run). */
static accel_status a2_gemm(const conv_f32_call* c, int64_t ntail) {
  const conv_plan* P = c->P;
  const conv_geometry* g = P->g;
  const int64_t vcols = P->ohw - ntail;
  int64_t nt = vcols < A2_NT ? vcols : A2_NT;
  int64_t ntiles = nt > 0 ? (vcols + nt - 1) / nt : 1;
  const int64_t outer = (int64_t)g->n * g->groups;
  const int nthreads = c->nth;
  /* more, smaller tiles until every thread has an item, while a tile keeps 4 panels */
  while (outer * ntiles < nthreads && nt > 4 * AN) {
    nt = ((nt + 1) / 2 + AN - 1) / AN * AN;
    ntiles = (vcols + nt - 1) / nt;
  }
  const int64_t mblocks = (P->mg + AR - 1) / AR;
  int64_t mchunks = 1;
  while (outer * ntiles * mchunks < nthreads && mchunks < mblocks) ++mchunks;
  const int64_t items = outer * ntiles * mchunks;
  const int nth = (int)(items < nthreads ? items : nthreads);
  const int64_t ldbt = (P->kd + 15) & ~(int64_t)15;
  /* the depth block: a panel of it in half the L1d (any multiple of SUM_BLOCK gives the same
   * sums; a block's outputs are added to the output anyway, every 32 steps) */
  const int64_t ldb_max = (nt + AN - 1) / AN * AN;
  int64_t kc_max = P->l1 > 0 ? P->l1 / 2 / (AN * (int64_t)sizeof(float)) / SUM_BLOCK * SUM_BLOCK
                             : A2_KC_DEFAULT;
  if (kc_max < SUM_BLOCK) kc_max = SUM_BLOCK;
  const int64_t kc = f32_depth_block(P->kd, kc_max);
  /* a chunk's weight block in half the L2 (the panels and the outputs share the rest); where
   * an item's outputs exceed half of it, chunks of weights and outputs (mc x (kc + nt)) in
   * half, outermost; the channels split evenly */
  const int64_t m_item = (mblocks + mchunks - 1) / mchunks * AR;
  const int64_t l2 = P->l2 > 0 ? P->l2 : A2_L2_DEFAULT;
  const int chunks_outer = m_item * ldb_max * (int64_t)sizeof(float) > l2 / 2;
  int64_t mc = l2 / 2 / ((kc + (chunks_outer ? ldb_max : 0)) * (int64_t)sizeof(float));
  if (mc < AR) mc = AR;
  if (mc < m_item) {
    const int64_t n = (m_item + mc - 1) / mc;
    mc = ((m_item + n - 1) / n + AR - 1) / AR * AR;
  }
  const int64_t mo = chunks_outer ? mc : m_item;
  const size_t col_floats = (size_t)ldb_max * kc;
  const size_t bytes =
      (col_floats + (size_t)(TMAX * ldbt) + (size_t)(ntail * 16 * mblocks * AR)) * sizeof(float) +
      64;
  float* bufs[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    bufs[t] = workspace_get(c->ws, t, bytes);
    if (bufs[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  a2_job J = {.P = P, .in = c->in, .weights = c->weights, .out = c->out, .ep = c->ep, .bufs = bufs,
              .ntail = ntail, .vcols = vcols, .nt = nt, .ntiles = ntiles, .mchunks = mchunks,
              .mblocks = mblocks, .ldbt = ldbt, .kc = kc, .mc = mc, .mo = mo};
  /* A GEMM of one 32-deep block (MobileNets' shallow 1x1 layers, RGB stems: 27 deep) applies
   * a one-pass epilogue in the micro-kernel's store, so that its outputs, many for so little
   * arithmetic, are written once instead of written, then read and written again by
   * epilogue_span (docs/kernels.md). Deeper GEMMs keep the pass: their arithmetic hides it, and
   * the in-store form measured slower there (per-vector tests of the epilogue's fields). */
  const sdp_f32* ep = c->ep;
  if (ep != NULL && P->kd <= SUM_BLOCK && P->ohw > 1 && sdp_f32_one_pass(ep) &&
      !ep->ew_per_channel) {
    J.epi = ep->ew_op == ACCEL_EW_ADD ? 2 : 1;
    J.E = (a2_epi){.scale = ep->scale, .shift = ep->shift, .operand = ep->ew_operand,
                   .lo = ep->act == ACCEL_ACT_CLIP ? ep->clip_min
                         : ep->act == ACCEL_ACT_RELU ? 0.0f : -INFINITY,
                   .hi = ep->act == ACCEL_ACT_CLIP ? ep->clip_max : INFINITY};
  }
  J.in_place = P->pointwise && !J.epi && P->mg <= A2_IN_PLACE_MAX_MG;
  pool_for(nth, items, a2_item, &J);
  return ACCEL_OK;
}

/* A strided 1x1 conv without padding (ResNet's downsampling 1x1/2) reads one phase of its
 * input: rows y * stride_h, columns x * stride_w. Copied once into a plane of out_h x out_w
 * per channel, the conv is the pointwise (stride-1) GEMM over it, whose panels are row copies;
 * before, every chunk of output channels (a2_item) gathered the strided columns again from the
 * whole input, which for ResNet-50's 256 -> 512 /2 on 56x56 came from L3 five times a tile
 * (docs/kernels.md). The same products in the same order: only where the inputs come from
 * changes, and the tail rule stays the strided geometry's (a2_run passes it). */
typedef struct a2_phase_job {
  const conv_geometry* g;
  const float* in;
  float* out;
} a2_phase_job;

static void a2_phase_plane(void* ctx, int64_t plane, int participant) {
  (void)participant;
  const a2_phase_job* J = ctx;
  const conv_geometry* g = J->g;
  const int64_t sh = g->stride_h, sw = g->stride_w, ow = g->out_w;
  const float* src = J->in + plane * (int64_t)g->h * g->w;
  float* dst = J->out + plane * (int64_t)g->out_h * ow;
  for (int64_t y = 0; y < g->out_h; ++y) {
    const float* s = src + y * sh * g->w;
    float* d = dst + y * ow;
    int64_t x = 0;
    if (sw == 1) {
      memcpy(d, s, (size_t)ow * sizeof(float));
      continue;
    }
    if (sw == 2) /* the even elements of 16, 8 at a time, while the 16 lie in the row */
      for (; x + 8 <= ow && 2 * x + 16 <= g->w; x += 8) {
        const __m256 a = _mm256_loadu_ps(s + 2 * x), b = _mm256_loadu_ps(s + 2 * x + 8);
        _mm256_storeu_ps(d + x, _mm256_castpd_ps(_mm256_permute4x64_pd(
                                    _mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8)));
      }
    for (; x < ow; ++x) d[x] = s[x * sw];
  }
}

static int a2_phase_applies(const conv_geometry* g) {
  return g->kernel_h == 1 && g->kernel_w == 1 && (g->stride_h > 1 || g->stride_w > 1) &&
         g->pad_top == 0 && g->pad_left == 0 && g->out_h >= 1 && g->out_w >= 1 &&
         (int64_t)(g->out_h - 1) * g->stride_h < g->h &&
         (int64_t)(g->out_w - 1) * g->stride_w < g->w;
}

static accel_status a2_run(const conv_f32_call* c) {
  const conv_plan* P = c->P;
  const conv_geometry* g = P->g;
  const int64_t ntail = a2_dot_tail(P); /* the given geometry's rule, whichever input is read */
  if (!a2_phase_applies(g)) return a2_gemm(c, ntail);
  const int64_t planes = (int64_t)g->n * g->c;
  float* phase = workspace_get(c->ws, WS_CONV_F32_PHASE, (size_t)(planes * P->ohw) * sizeof(float));
  if (phase == NULL) return ACCEL_ERR_NO_MEMORY;
  a2_phase_job PJ = {.g = g, .in = c->in, .out = phase};
  pool_for(c->nth < planes ? c->nth : (int)planes, planes, a2_phase_plane, &PJ);
  conv_geometry g1 = *g;
  g1.h = g->out_h;
  g1.w = g->out_w;
  g1.stride_h = g1.stride_w = 1;
  conv_plan P1 = *P;
  P1.g = &g1;
  P1.hw = P->ohw;
  P1.pointwise = 1;
  conv_f32_call c1 = *c;
  c1.P = &P1;
  c1.in = phase;
  return a2_gemm(&c1, ntail);
}

/* Every geometry but depthwise (dw_avx2's) and a batch of fully connected rows (fc_blas's). */
static int a2_applies(const conv_f32_call* c) {
  return c->P->cg > 1 && !(c->P->ohw == 1 && c->P->g->n > 1);
}

static int a2_dot_tail_int(const conv_plan* P) { return (int)a2_dot_tail(P); }

const conv_f32_impl conv_f32_gemm_avx2_impl = {.name = "gemm_avx2", .applies = a2_applies,
                                               .supports = NULL, .run = a2_run,
                                               .dot_tail = a2_dot_tail_int};
#endif /* __AVX2__ && __FMA__ */
