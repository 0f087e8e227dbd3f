/* winograd.c - the CONV engine's Winograd mode: F(2x2, 3x3), as NVDLA computes it.
 *
 * accel.h (accel_conv_mode) defines the arithmetic and its bound; sim/reference.py is its NumPy
 * twin. The hardware's steps, each one function here:
 *   1. weight pre-transform (NVDLA's compiler does it): U = G g G^T per kernel and folded
 *      channel, in fp32 and stored in the weight precision (halves for FP16). Done once, by
 *      accel_conv_pack_weights (conv_winograd_pack) when the weights are packed; a run without
 *      packed weights transforms them into scratch on every run;
 *   2. input transform (CSC/CMAC's pre-addition): V = B^T d B per 4x4 tile and folded channel,
 *      rounded to the multipliers' operand precision (half for FP16);
 *   3. the MAC array: M[xi] = sum over channels of U[xi] V[xi], 16 independent products per
 *      tile instead of 36: a GEMM per xi;
 *   4. output transform (CACC's post-addition): Y = A^T M A, 2x2 outputs per tile, then the SDP
 *      epilogue on the block's finished output rows while they are in cache.
 * A stride s is folded into channels (channel (c, a, b) reads in[c][y*s + a][x*s + b]), so the
 * transforms always see a stride-1 3x3 convolution of C*s*s channels. A grouped convolution
 * runs as one such convolution per group (as NVDLA's compiler splits it): group gi reads input
 * channels gi*C/groups .. and writes kernels gi*K/groups .., with its own packed weights.
 *
 * INT8 is exact (accel.h: the int32 accumulators equal direct convolution's bit for bit), so the
 * engine computes an INT8 Winograd CONV with the direct kernels (conv/i8_impls.c's list) and only
 * the cost model sees the mode; sim/reference.py's conv2d_winograd computes the integer
 * transforms and the tests hold them equal to direct convolution.
 *
 * Layout and order. The packed weights are, per group, [16 xi][K/8 kernel blocks][C' channels]
 * [8 kernels] (K and C' per group, K rounded up with zero kernels), the rows of the GEMM's 8-kernel micro-kernel. The tiles of
 * an image are taken in blocks of whole tile rows; per block, V is [16][C'][tiles] with the
 * tiles along the vectors (16 tiles per AVX-512 vector: the input transform reads a tile row's
 * 4x4 windows from two loads and a permute per row of the window). Every M element is the fused
 * multiply-add chain over the channels from 0 up, starting from 0: the same bits whatever the
 * block, the thread count and the vector width (the portable path computes the same chain with
 * fmaf). Threads: pool.c's loops, items of (block, part of the kernels), a participant's
 * buffers in its own workspace slot. winograd_c16.c computes the same bits on C16 tensors with
 * this file's plan, weights and transform arithmetic (winograd.h).
 */
#include <math.h>
#include <string.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "winograd.h"

/* builds with AVX2 and FMA but not AVX-512: the MAC array one xi at a time over all of an
 * item's kernels (wino_gemm_xi_avx2), M [16][kernels][ntp] */
#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#define WINO_XI_OUTER 1
#else
#define WINO_XI_OUTER 0
#endif

enum {
  PACK_MAGIC = 0x47574341,    /* "ACWG" */
  PACK_HEADER = 64
};

static int64_t round16(int64_t x) { return (x + 15) & ~(int64_t)15; }

/* The weight side of the plan (all that packing needs: no spatial size). */
static wino_plan weight_plan(const conv_geometry* g) {
  wino_plan P = {.g = g, .s = g->stride_h, .groups = g->groups};
  P.cg = g->c / g->groups;
  P.kg = g->k / g->groups;
  P.cf = P.cg * P.s * P.s;
  P.kblocks = (P.kg + KB - 1) / KB;
  return P;
}

#if WINO_XI_OUTER
/* Tile rows per block on the xi-outer path (0: the whole image, kept one block whatever the
 * threads). A block's MAC array reads all of U once (16 CF KP floats) and streams its V and M
 * (16 (CF + KP) floats a tile) through once each. Where U outweighs the image's V and M (deep
 * layers on small planes: 256 channels on 14x14), the image is one block, read U once, and the
 * threads split its kernels; else blocks whose V and M fill twice the L2 (sysconf's figure,
 * V_BUDGET's where the system does not say): fewer blocks read U fewer times, and beyond that
 * the transforms' traffic leaves the cache (docs/winograd.md). */
static int64_t wino_xi_fit(const wino_plan* P) {
  const int64_t kp = P->kblocks * KB, tiles = P->tiles_h * P->tiles_w;
  if (P->cf * kp >= (P->cf + kp) * tiles) return 0;
  const int64_t l2 = conv_l2_bytes();
  return 2 * (l2 > 0 ? l2 : V_BUDGET) / (16 * (P->cf + kp) * (int64_t)sizeof(float)) / P->tiles_w;
}
#endif

/* Block b: rows tiles_h * b / blocks up to the next block's first. */
wino_plan wino_make_plan(const conv_geometry* g, int32_t num_threads) {
  wino_plan P = weight_plan(g);
  P.tiles_h = (g->out_h + 1) / 2;
  P.tiles_w = (g->out_w + 1) / 2;
#if WINO_XI_OUTER
  int64_t fit = wino_xi_fit(&P);
  const int whole = fit == 0;
#else
  int64_t fit = V_BUDGET / (16 * (int64_t)sizeof(float) * P.cf) / P.tiles_w;
  const int whole = 0;
#endif
  if (fit < 1 || whole) fit = whole ? P.tiles_h : 1;
  if (fit > P.tiles_h) fit = P.tiles_h;
  P.blocks = (P.tiles_h + fit - 1) / fit;
  const int64_t team = g->n == 1 && num_threads > 1 && !whole ? num_threads : 1;
  P.blocks = (P.blocks + team - 1) / team * team;
  if (P.blocks > P.tiles_h) P.blocks = P.tiles_h;
  P.rows = (P.tiles_h + P.blocks - 1) / P.blocks; /* the largest block's */
  P.ntp = round16(P.rows * P.tiles_w);
  /* The vector transform reads up to 2 * tx0 + 33 for the last vector of a tile row. */
  P.sw = 2 * round16(P.tiles_w) + 2;
  return P;
}

int wino_team_size(int64_t items, int32_t num_threads) {
  if (num_threads < 1) num_threads = 1;
  if (num_threads > WS_THREAD_SLOTS) num_threads = WS_THREAD_SLOTS;
  return (int)(items < num_threads ? items : num_threads);
}

int64_t wino_items(const wino_plan* P, int64_t kblocks, int32_t num_threads, int64_t* parts) {
  const int64_t blocks = P->g->n * P->groups * P->blocks;
  *parts = 1;
  if (blocks < num_threads) *parts = (num_threads + blocks - 1) / blocks;
  if (*parts > kblocks) *parts = kblocks;
  return blocks * *parts;
}

/* ---- 1. the weight pre-transform ------------------------------------------------------- */

typedef struct pack_header {
  uint32_t magic;
  int32_t k, c, kernel_h, kernel_w, stride, half, groups;
} pack_header;

/* Floats of all groups' packed weights. */
static int64_t packed_floats(const wino_plan* P) { return P->groups * wino_group_floats(P); }

size_t conv_winograd_packed_bytes(const conv_geometry* g) {
  const wino_plan P = weight_plan(g);
  return PACK_HEADER + (size_t)packed_floats(&P) * sizeof(float);
}

int conv_winograd_packed_matches(const conv_geometry* g, int half, const void* packed) {
  pack_header h;
  memcpy(&h, packed, sizeof h);
  return h.magic == PACK_MAGIC && h.k == g->k && h.c == g->c && h.kernel_h == g->kernel_h &&
         h.kernel_w == g->kernel_w && h.stride == g->stride_h && h.half == half &&
         h.groups == g->groups;
}

static const float* conv_winograd_packed_weights(const void* packed) {
  return (const float*)((const char*)packed + PACK_HEADER);
}

static float weight_at(const void* weights, int half, int64_t i) {
  if (!half) return ((const float*)weights)[i];
  float f;
  half_to_float((const uint16_t*)weights + i, &f, 1);
  return f;
}

/* U[group][xi][kb][cf][k % KB] = G g G^T in fp32, in the order of NVDLA's compiler (G g first,
 * each sum from 0 up), rounded to half when the weights are halves; kernels past a group's K
 * are zero. */
typedef struct weights_job {
  const wino_plan* P;
  const void* weights;
  int half;
  float* U;
} weights_job;

/* Item: kernel k (rounded up to KB per group) of group gi, its transforms for every folded
 * channel. */
static void transform_kernel(void* ctx, int64_t item, int participant) {
  static const float G[4][3] = {{1, 0, 0}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0, 0, 1}};
  const weights_job* J = ctx;
  const wino_plan* P = J->P;
  const conv_geometry* g = P->g;
  const void* weights = J->weights;
  const int half = J->half;
  const int64_t K = P->kg, CF = P->cf, s = P->s, KBL = P->kblocks;
  const int64_t gi = item / (KBL * KB), k = item % (KBL * KB);
  float* U = J->U + gi * wino_group_floats(P);
  (void)participant;
  for (int64_t cf = 0; cf < CF; ++cf) {
    const int64_t c = cf / (s * s), a = (cf / s) % s, b = cf % s;
    float g3[3][3];
    for (int r = 0; r < 3; ++r) {
      for (int q = 0; q < 3; ++q) {
        const int64_t y = r * s + a, x = q * s + b;
        g3[r][q] = k < K && y < g->kernel_h && x < g->kernel_w
                       ? weight_at(weights, half,
                                   (((gi * K + k) * P->cg + c) * g->kernel_h + y) *
                                           g->kernel_w + x)
                       : 0.0f;
      }
    }
    float t[4][3];
    for (int m = 0; m < 4; ++m) {
      for (int p = 0; p < 3; ++p) {
        float acc = 0.0f;
        for (int n = 0; n < 3; ++n) acc += G[m][n] * g3[n][p];
        t[m][p] = acc;
      }
    }
    for (int r = 0; r < 4; ++r) {
      for (int q = 0; q < 4; ++q) {
        float acc = 0.0f;
        for (int n = 0; n < 3; ++n) acc += t[r][n] * G[q][n];
        if (half) round_to_half(&acc, 1);
        U[(((r * 4 + q) * KBL + k / KB) * CF + cf) * KB + k % KB] = acc;
      }
    }
  }
}

static void transform_weights(const wino_plan* P, const void* weights, int half, float* U,
                              int nth) {
  weights_job J = {.P = P, .weights = weights, .half = half, .U = U};
  pool_for(nth, P->groups * P->kblocks * KB, transform_kernel, &J);
}

void conv_winograd_pack(const conv_geometry* g, const void* weights, int half, void* dst) {
  const wino_plan P = weight_plan(g);
  const pack_header h = {.magic = PACK_MAGIC, .k = g->k, .c = g->c, .kernel_h = g->kernel_h,
                         .kernel_w = g->kernel_w, .stride = g->stride_h, .half = half,
                         .groups = g->groups};
  memset(dst, 0, PACK_HEADER);
  memcpy(dst, &h, sizeof h);
  transform_weights(&P, weights, half, (float*)((char*)dst + PACK_HEADER), 1);
}

/* ---- 2. the input transform ------------------------------------------------------------ */

/* Rows 2*ty0 .. 2*ty0 + 2*nrows + 1 of folded channel cf of `img` (the group's first input
 * channel), zero-padded, into X[row][0 .. sw). */
static void stage_rows(const wino_plan* P, const float* img, int64_t cf, int64_t ty0,
                       int64_t nrows, float* X) {
  const conv_geometry* g = P->g;
  const int64_t s = P->s, c = cf / (s * s), a = (cf / s) % s, b = cf % s, sw = P->sw;
  /* folded columns xx with 0 <= xx*s + b - pad_left < w */
  int64_t x_lo = 0, x_hi = sw;
  while (x_lo < sw && x_lo * s + b - g->pad_left < 0) ++x_lo;
  while (x_hi > x_lo && (x_hi - 1) * s + b - g->pad_left >= g->w) --x_hi;
  for (int64_t yy = 0; yy < 2 * nrows + 2; ++yy) {
    float* row = X + yy * sw;
    const int64_t y = (2 * ty0 + yy) * s + a - g->pad_top;
    if (y < 0 || y >= g->h || x_lo >= x_hi) {
      memset(row, 0, (size_t)sw * sizeof(float));
      continue;
    }
    const float* src = img + (c * g->h + y) * g->w;
    memset(row, 0, (size_t)x_lo * sizeof(float));
    if (s == 1) {
      memcpy(row + x_lo, src + x_lo + b - g->pad_left, (size_t)(x_hi - x_lo) * sizeof(float));
    } else {
      for (int64_t xx = x_lo; xx < x_hi; ++xx) row[xx] = src[xx * s + b - g->pad_left];
    }
    memset(row + x_hi, 0, (size_t)(sw - x_hi) * sizeof(float));
  }
}

/* V[xi][cf][t] for the block's tiles t = r * tiles_w + tx from the staged rows X: B^T d B,
 * rows first, then columns, one rounding per addition; rounded to half for FP16. */
#ifdef __AVX512F__
/* B^T d B of the 16 tiles tx0 .. tx0 + 15 of a tile row (`rows`: its 4 staged input rows, sw
 * apart) into v[xi], rows first, then columns; rounded to half for FP16. */
static inline void input_tiles(const float* rows, int64_t sw, int64_t tx0, int half,
                               __m512 v[16]) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28,
                                         30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  __m512 d[4][4];
  for (int i = 0; i < 4; ++i) {
    const float* p = rows + i * sw + 2 * tx0;
    const __m512 a0 = _mm512_loadu_ps(p), a1 = _mm512_loadu_ps(p + 16);
    const __m512 b0 = _mm512_loadu_ps(p + 2), b1 = _mm512_loadu_ps(p + 18);
    d[i][0] = _mm512_permutex2var_ps(a0, even, a1);
    d[i][1] = _mm512_permutex2var_ps(a0, odd, a1);
    d[i][2] = _mm512_permutex2var_ps(b0, even, b1);
    d[i][3] = _mm512_permutex2var_ps(b0, odd, b1);
  }
  wino_input_transform(d, half, v);
}

/* Y = A^T m A of the 16 tiles tx0 .. of tile row ty (m[xi]), rows first ((m0 + m1) + m2,
 * (m1 - m2) - m3), then columns, stored into the output plane (the columns and rows past
 * the output are not). */
static inline void output_tiles(const __m512 m[16], int64_t ty, int64_t tx0, int64_t out_h,
                                int64_t ow, float* plane) {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
  const int prows = 2 * ty + 1 < out_h ? 2 : 1;
  __m512 y[2][2];
  wino_output_transform(m, prows, y);
  const int64_t cols = ow - 2 * tx0 < 32 ? ow - 2 * tx0 : 32;
  const __mmask16 m0 = cols >= 16 ? 0xFFFF : (__mmask16)((1u << cols) - 1);
  const __mmask16 m1 = cols <= 16 ? 0 : (__mmask16)(((uint64_t)1 << (cols - 16)) - 1);
  for (int p = 0; p < prows; ++p) {
    float* dst = plane + (2 * ty + p) * ow + 2 * tx0;
    _mm512_mask_storeu_ps(dst, m0, _mm512_permutex2var_ps(y[p][0], lo, y[p][1]));
    _mm512_mask_storeu_ps(dst + 16, m1, _mm512_permutex2var_ps(y[p][0], hi, y[p][1]));
  }
}
#endif

static void transform_input(const wino_plan* P, const float* X, int64_t nrows, int64_t cf,
                            int half, float* V) {
  const int64_t tw = P->tiles_w, sw = P->sw, ntp = P->ntp, CF = P->cf;
  for (int64_t r = 0; r < nrows; ++r) {
    const float* rows = X + 2 * r * sw;
    float* dst = V + cf * ntp + r * tw;
#ifdef __AVX512F__
    for (int64_t tx0 = 0; tx0 < tw; tx0 += 16) {
      const __mmask16 mask = tw - tx0 >= 16 ? 0xFFFF : (__mmask16)((1u << (tw - tx0)) - 1);
      __m512 v[16];
      input_tiles(rows, sw, tx0, half, v);
      for (int xi = 0; xi < 16; ++xi) {
        _mm512_mask_storeu_ps(dst + xi * CF * ntp + tx0, mask, v[xi]);
      }
    }
#elif defined(__AVX2__) && defined(__FMA__)
    wino_input_row_avx2(rows, sw, tw, half, dst, CF * ntp);
#else
    for (int64_t tx = 0; tx < tw; ++tx) {
      float d[4][4], t[4][4];
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j) d[i][j] = rows[i * sw + 2 * tx + j];
      }
      for (int j = 0; j < 4; ++j) {
        t[0][j] = d[0][j] - d[2][j];
        t[1][j] = d[1][j] + d[2][j];
        t[2][j] = d[2][j] - d[1][j];
        t[3][j] = d[1][j] - d[3][j];
      }
      for (int i = 0; i < 4; ++i) {
        float v[4] = {t[i][0] - t[i][2], t[i][1] + t[i][2], t[i][2] - t[i][1],
                      t[i][1] - t[i][3]};
        if (half) round_to_half(v, 4);
        for (int j = 0; j < 4; ++j) dst[(i * 4 + j) * CF * ntp + tx] = v[j];
      }
    }
#endif
  }
}

/* ---- 3. the MAC array: M[KB][ntp] = U[KB][CF]^T-rows x V[CF][ntp] ---------------------- */

#ifdef __AVX512F__
/* KB kernels x NV vectors of tiles, starting at tile t. */
#define GEMM_PANEL(NV)                                                                       \
  static void gemm_panel_##NV(const float* U, const float* V, int64_t CF, int64_t ntp,        \
                              int64_t t, float* M, const float* next) {                       \
    __m512 acc[KB][NV];                                                                      \
    for (int r = 0; r < KB; ++r)                                                             \
      for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_setzero_ps();                          \
    const float* v = V + t;                                                                  \
    for (int64_t c = 0; c < CF; ++c, v += ntp, U += KB) {                                    \
      if (next != NULL && (c & 1) == 0) _mm_prefetch((const char*)(next + c * KB), _MM_HINT_T0); \
      __m512 x[NV];                                                                          \
      for (int j = 0; j < NV; ++j) x[j] = _mm512_loadu_ps(v + 16 * j);                       \
      for (int r = 0; r < KB; ++r) {                                                         \
        const __m512 u = _mm512_set1_ps(U[r]);                                               \
        for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_fmadd_ps(u, x[j], acc[r][j]);        \
      }                                                                                      \
    }                                                                                        \
    for (int r = 0; r < KB; ++r)                                                             \
      for (int j = 0; j < NV; ++j) _mm512_storeu_ps(M + r * ntp + t + 16 * j, acc[r][j]);    \
  }
GEMM_PANEL(1)
GEMM_PANEL(2)
GEMM_PANEL(3)
#endif

#if !WINO_XI_OUTER /* x86-64-v3 builds: wino_gemm_xi_avx2 and wino_item's own loop */
/* M[r][t] = sum over c from 0 up of U[c][r] V[c][t] (fused multiply-adds from 0), for the
 * tiles t < nt16 (a multiple of 16). `next` (or NULL): the U panel the following call reads,
 * fetched into cache meanwhile (packed weights come from memory: a deep layer's are 4-16 MB,
 * and per (xi, kernel block) the panels lie 16 pages apart, which the hardware prefetcher
 * picks up too late). */
static void gemm(const float* U, const float* V, int64_t CF, int64_t ntp, int64_t nt16,
                 float* M, const float* next) {
#ifdef __AVX512F__
  int64_t t = 0;
  for (; t + 48 <= nt16; t += 48) gemm_panel_3(U, V, CF, ntp, t, M, t == 0 ? next : NULL);
  if (nt16 - t == 32) gemm_panel_2(U, V, CF, ntp, t, M, t == 0 ? next : NULL);
  if (nt16 - t == 16) gemm_panel_1(U, V, CF, ntp, t, M, t == 0 ? next : NULL);
#else
  (void)next;
  for (int r = 0; r < KB; ++r) {
    for (int64_t t = 0; t < nt16; ++t) {
      float acc = 0.0f;
      for (int64_t c = 0; c < CF; ++c) acc = fmaf(U[c * KB + r], V[c * ntp + t], acc);
      M[r * ntp + t] = acc;
    }
  }
#endif
}

/* The same products for a group of nk < KB kernels (a depthwise conv's groups have one): only
 * its kernels' rows of M, each the same fused multiply-add chain over the channels from 0. */
static void gemm_narrow(const float* U, const float* V, int64_t CF, int64_t ntp, int64_t nt16,
                        float* M, int nk) {
  for (int r = 0; r < nk; ++r) {
#ifdef __AVX512F__
    for (int64_t t = 0; t < nt16; t += 16) {
      __m512 acc = _mm512_setzero_ps();
      for (int64_t c = 0; c < CF; ++c) {
        acc = _mm512_fmadd_ps(_mm512_set1_ps(U[c * KB + r]), _mm512_loadu_ps(V + c * ntp + t),
                              acc);
      }
      _mm512_storeu_ps(M + r * ntp + t, acc);
    }
#else
    for (int64_t t = 0; t < nt16; ++t) {
      float acc = 0.0f;
      for (int64_t c = 0; c < CF; ++c) acc = fmaf(U[c * KB + r], V[c * ntp + t], acc);
      M[r * ntp + t] = acc;
    }
#endif
  }
}

/* ---- 4. the output transform ----------------------------------------------------------- */

/* Y = A^T m A for kernel row r of the block's M ([16][KB][ntp]) into the output plane's rows
 * 2*ty0 ..: rows first ((m0 + m1) + m2, (m1 - m2) - m3), then columns. */
static void transform_output(const wino_plan* P, const float* M, int r, int64_t ty0,
                             int64_t nrows, float* plane) {
  const conv_geometry* g = P->g;
  const int64_t tw = P->tiles_w, ntp = P->ntp, ow = g->out_w;
  for (int64_t rr = 0; rr < nrows; ++rr) {
    const int64_t ty = ty0 + rr;
#ifdef __AVX512F__
    for (int64_t tx0 = 0; tx0 < tw; tx0 += 16) {
      const __mmask16 mask = tw - tx0 >= 16 ? 0xFFFF : (__mmask16)((1u << (tw - tx0)) - 1);
      __m512 m[16];
      for (int xi = 0; xi < 16; ++xi) {
        m[xi] = _mm512_maskz_loadu_ps(mask, M + (xi * KB + r) * ntp + rr * tw + tx0);
      }
      output_tiles(m, ty, tx0, g->out_h, ow, plane);
    }
#else
    for (int64_t tx = 0; tx < tw; ++tx) {
      float m[4][4], o[2][4];
      for (int xi = 0; xi < 16; ++xi) m[xi / 4][xi % 4] = M[(xi * KB + r) * ntp + rr * tw + tx];
      for (int j = 0; j < 4; ++j) {
        o[0][j] = m[0][j] + m[1][j] + m[2][j];
        o[1][j] = m[1][j] - m[2][j] - m[3][j];
      }
      for (int p = 0; p < 2 && 2 * ty + p < g->out_h; ++p) {
        const float y[2] = {o[p][0] + o[p][1] + o[p][2], o[p][1] - o[p][2] - o[p][3]};
        for (int q = 0; q < 2 && 2 * tx + q < ow; ++q) plane[(2 * ty + p) * ow + 2 * tx + q] = y[q];
      }
    }
#endif
  }
}
#endif

const float* wino_weights(const wino_plan* P, const float* weights, const void* packed,
                          int half, workspace* ws, int32_t num_threads) {
  if (packed != NULL) return conv_winograd_packed_weights(packed);
  float* scratch = workspace_get(ws, WS_WINOGRAD_WEIGHTS, packed_floats(P) * sizeof(float));
  if (scratch == NULL) return NULL;
  transform_weights(P, weights, 0, scratch,
                    wino_team_size(P->groups * P->kblocks * KB, num_threads));
  if (half) round_to_half(scratch, packed_floats(P));
  return scratch;
}

/* ---- the engine ------------------------------------------------------------------------ */

/* Floats of one thread's buffers: staged rows, V [16][CF][ntp], M [16][KB][ntp]. */
static int64_t thread_floats(const wino_plan* P) {
#if WINO_XI_OUTER /* M of every kernel, then a packed panel of 24 tiles (32-byte aligned) */
  return (2 * P->rows + 2) * P->sw + 16 * (P->cf + P->kblocks * KB) * P->ntp + P->cf * 24 + 8;
#endif
  return (2 * P->rows + 2) * P->sw + 16 * (P->cf + KB) * P->ntp;
}

/* Item = (image and group, block of tile rows, part of the kernel blocks), part innermost. */
typedef struct wino_job {
  const wino_plan* P;
  const float* in;
  const float* U;
  int half;
  float* out;
  const sdp_f32* ep;
  float* const* buffers; /* per participant */
  int64_t parts;
} wino_job;

static void wino_item(void* ctx, int64_t item, int participant) {
  const wino_job* J = ctx;
  const wino_plan* P = J->P;
  const conv_geometry* g = P->g;
  const float* in = J->in;
  const sdp_f32* ep = J->ep;
  const int half = J->half;
  const int64_t K = P->kg, CF = P->cf, ohw = (int64_t)g->out_h * g->out_w, ntp = P->ntp;
  const int64_t parts = J->parts;
  float* out = J->out;
  float* X = J->buffers[participant];
  float* V = X + (2 * P->rows + 2) * P->sw;
  float* M = V + 16 * CF * ntp;
  const int64_t part = item % parts, block = item / parts;
  const int64_t b = block % P->blocks, image_group = block / P->blocks;
  const int64_t img = image_group / P->groups, gi = image_group % P->groups;
  const float* U = J->U + gi * wino_group_floats(P);
  int64_t ty0, nrows;
  wino_block_rows(P, b, &ty0, &nrows);
  const int64_t nt16 = round16(nrows * P->tiles_w);
  const float* base = in + (img * g->c + gi * P->cg) * g->h * g->w;
  const int64_t y0 = 2 * ty0, y1 = 2 * (ty0 + nrows) < g->out_h ? 2 * (ty0 + nrows) : g->out_h;
#ifdef __AVX512F__
  if (CF == 1 && K == 1) { /* a depthwise group: each tile's products in registers, no V or M */
    const int64_t at = (img * g->k + gi) * ohw;
    __m512 u[16];
    for (int xi = 0; xi < 16; ++xi) u[xi] = _mm512_set1_ps(U[xi * KB]);
    stage_rows(P, base, 0, ty0, nrows, X);
    for (int64_t rr = 0; rr < nrows; ++rr) {
      for (int64_t tx0 = 0; tx0 < P->tiles_w; tx0 += 16) {
        __m512 m[16];
        input_tiles(X + 2 * rr * P->sw, P->sw, tx0, half, m);
        for (int xi = 0; xi < 16; ++xi) m[xi] = _mm512_fmadd_ps(u[xi], m[xi], _mm512_setzero_ps());
        output_tiles(m, ty0 + rr, tx0, g->out_h, g->out_w, out + at);
      }
    }
    if (ep != NULL) {
      const int64_t first = at + y0 * g->out_w, count = (y1 - y0) * g->out_w;
      sdp_f32_span(ep, (int32_t)gi, out + first,
                   ep->ew_operand != NULL ? ep->ew_operand + first : NULL, count);
    }
    return;
  }
#endif
  for (int64_t cf = 0; cf < CF; ++cf) {
    stage_rows(P, base, cf, ty0, nrows, X);
    transform_input(P, X, nrows, cf, half, V);
    /* the lanes past the block's tiles feed only discarded M columns: keep them finite */
    for (int xi = 0; xi < 16; ++xi) {
      float* row = V + (xi * CF + cf) * ntp;
      for (int64_t t = nrows * P->tiles_w; t < nt16; ++t) row[t] = 0.0f;
    }
  }
  const int64_t kb0 = P->kblocks * part / parts, kb1 = P->kblocks * (part + 1) / parts;
#if WINO_XI_OUTER
  {
    const int64_t kp = (kb1 - kb0) * KB, nk = K - kb0 * KB < kp ? K - kb0 * KB : kp;
    float* panel = (float*)(((uintptr_t)(M + 16 * kp * ntp) + 31) & ~(uintptr_t)31);
    for (int xi = 0; xi < 16; ++xi)
      wino_gemm_xi_avx2(U + (xi * P->kblocks + kb0) * CF * KB, V + xi * CF * ntp, CF, ntp, nt16,
                        M + xi * kp * ntp, nk, panel);
    for (int64_t r = 0; r < nk; ++r) {
      const int64_t k = gi * K + kb0 * KB + r, at = (img * g->k + k) * ohw;
      for (int64_t rr = 0; rr < nrows; ++rr) {
        const int64_t ty = ty0 + rr;
        wino_output_row_avx2(M + r * ntp + rr * P->tiles_w, kp * ntp, P->tiles_w,
                             2 * ty + 1 < g->out_h ? 2 : 1, out + at + 2 * ty * g->out_w,
                             g->out_w);
      }
      if (ep != NULL) {
        const int64_t first = at + y0 * g->out_w, count = (y1 - y0) * g->out_w;
        sdp_f32_span(ep, (int32_t)k, out + first,
                     ep->ew_operand != NULL ? ep->ew_operand + first : NULL, count);
      }
    }
  }
#else
  for (int64_t kb = kb0; kb < kb1; ++kb) {
    for (int xi = 0; xi < 16; ++xi) {
      const int64_t nxi = xi < 15 ? xi + 1 : 0, nkb = xi < 15 ? kb : kb + 1;
      if (K < KB) {
        gemm_narrow(U + xi * CF * KB, V + xi * CF * ntp, CF, ntp, nt16, M + xi * KB * ntp,
                    (int)K);
      } else {
        gemm(U + (xi * P->kblocks + kb) * CF * KB, V + xi * CF * ntp, CF, ntp, nt16,
             M + xi * KB * ntp, nkb < kb1 ? U + (nxi * P->kblocks + nkb) * CF * KB : NULL);
      }
    }
    for (int r = 0; r < KB && kb * KB + r < K; ++r) {
      const int64_t k = gi * K + kb * KB + r, at = (img * g->k + k) * ohw;
      transform_output(P, M, r, ty0, nrows, out + at);
      if (ep != NULL) {
        const int64_t first = at + y0 * g->out_w, count = (y1 - y0) * g->out_w;
        sdp_f32_span(ep, (int32_t)k, out + first,
                     ep->ew_operand != NULL ? ep->ew_operand + first : NULL, count);
      }
    }
  }
#endif
}

accel_status conv_winograd_f32(const conv_geometry* g, const float* in, const float* weights,
                               const void* packed, int half, float* out,
                               const sdp_f32* epilogue, workspace* ws, int32_t num_threads) {
  const wino_plan P = wino_make_plan(g, num_threads);
  int64_t parts;
  const int64_t items = wino_items(&P, P.kblocks, num_threads, &parts);
  const int nth = wino_team_size(items, num_threads);
  const float* U = wino_weights(&P, weights, packed, half, ws, num_threads);
  if (U == NULL) return ACCEL_ERR_NO_MEMORY;
  float* buffers[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    buffers[t] = workspace_get(ws, t, (size_t)thread_floats(&P) * sizeof(float));
    if (buffers[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  const wino_job J = {.P = &P, .in = in, .U = U, .half = half, .out = out, .ep = epilogue,
                      .buffers = buffers, .parts = parts};
  pool_for(nth, items, wino_item, (void*)&J);
  return ACCEL_OK;
}
