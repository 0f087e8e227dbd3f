/* winograd.c - the CONV engine's Winograd mode: F(2x2, 3x3), as NVDLA computes it.
 *
 * accel.h (accel_conv_mode) defines the arithmetic and its bound; sim/reference.py is its NumPy
 * twin. The hardware's steps, each one function here:
 *   1. weight pre-transform (NVDLA's compiler does it): U = G g G^T per kernel and folded
 *      channel, in fp32 and stored in the weight precision (halves for FP16; 4 G g G^T as exact
 *      integers for INT8);
 *   2. input transform (CSC/CMAC's pre-addition): V = B^T d B per 4x4 tile and folded channel,
 *      rounded to the multipliers' operand precision (half for FP16);
 *   3. the MAC array: M[xi] = sum over channels of U[xi] V[xi], 16 independent products per
 *      tile instead of 36: here one GEMM per xi (sgemm; dgemm for INT8, exact on integers);
 *   4. output transform (CACC's post-addition): Y = A^T M A, 2x2 outputs per tile.
 * A stride s is folded into channels (channel (c, a, b) reads in[c][y*s + a][x*s + b]), so the
 * transforms always see a stride-1 3x3 convolution of C*s*s channels.
 *
 * INT8 is exact (accel.h: the int32 accumulators equal direct convolution's bit for bit), so
 * the engine computes an INT8 Winograd CONV with the direct kernel (conv_i8.c) and only the
 * cost model sees the mode; sim/reference.py's conv2d_winograd computes the integer transforms
 * and the tests hold them equal to direct convolution.
 *
 * Tiles are processed in blocks of a fixed size (so the GEMMs' summation order, and the bits,
 * do not depend on the thread count), one block per thread at a time.
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "kernels.h"

enum { TILE_BLOCK = 128 }; /* tiles per GEMM block */

/* One threading layer: OpenMP; OpenBLAS stays single-threaded inside our regions. */
static void blas_single_threaded(void) {
  if (scipy_openblas_get_num_threads() != 1) scipy_openblas_set_num_threads(1);
}

typedef struct wino_plan {
  const conv_geometry* g;
  int64_t s;          /* stride, folded into channels */
  int64_t cf;         /* folded channels C*s*s */
  int64_t tiles_h, tiles_w, tiles;  /* 2x2 output tiles per image */
  int64_t blocks;     /* TILE_BLOCK blocks per image */
} wino_plan;

static wino_plan make_plan(const conv_geometry* g) {
  wino_plan P = {.g = g, .s = g->stride_h};
  P.cf = (int64_t)g->c * P.s * P.s;
  P.tiles_h = (g->out_h + 1) / 2;
  P.tiles_w = (g->out_w + 1) / 2;
  P.tiles = P.tiles_h * P.tiles_w;
  P.blocks = (P.tiles + TILE_BLOCK - 1) / TILE_BLOCK;
  return P;
}

/* Threads for `items` independent pieces of work. */
static int team_size(int64_t items, int32_t num_threads) {
  if (num_threads < 1) num_threads = 1;
  if (num_threads > WS_THREAD_SLOTS) num_threads = WS_THREAD_SLOTS;
  return (int)(items < num_threads ? items : num_threads);
}

/* The folded 3x3 kernel of kernel k and folded channel cf = (c*s + a)*s + b. */
static void folded_kernel(const wino_plan* P, int64_t k, int64_t cf, double (*get)(const void*,
                          int64_t), const void* weights, double g3[3][3]) {
  const conv_geometry* g = P->g;
  const int64_t s = P->s, c = cf / (s * s), a = (cf / s) % s, b = cf % s;
  for (int r = 0; r < 3; ++r) {
    for (int q = 0; q < 3; ++q) {
      const int64_t y = r * s + a, x = q * s + b;
      g3[r][q] = y < g->kernel_h && x < g->kernel_w
                     ? get(weights, ((k * g->c + c) * g->kernel_h + y) * g->kernel_w + x)
                     : 0.0;
    }
  }
}

static double get_f32(const void* w, int64_t i) { return ((const float*)w)[i]; }

/* U[xi][k][cf] = G g G^T in fp32, in the order of NVDLA's compiler (G g first, each sum from
 * 0 up), rounded to half when the weights are halves. */
static void transform_weights_f32(const wino_plan* P, const float* weights, int half, float* U,
                                  int nth) {
  static const float G[4][3] = {{1, 0, 0}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0, 0, 1}};
  const int64_t K = P->g->k, CF = P->cf;
#pragma omp parallel for num_threads(nth) schedule(static)
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t cf = 0; cf < CF; ++cf) {
      double g3[3][3];
      folded_kernel(P, k, cf, get_f32, weights, g3);
      float t[4][3];
      for (int m = 0; m < 4; ++m) {
        for (int p = 0; p < 3; ++p) {
          float acc = 0.0f;
          for (int n = 0; n < 3; ++n) acc += G[m][n] * (float)g3[n][p];
          t[m][p] = acc;
        }
      }
      for (int r = 0; r < 4; ++r) {
        for (int q = 0; q < 4; ++q) {
          float acc = 0.0f;
          for (int n = 0; n < 3; ++n) acc += t[r][n] * G[q][n];
          U[((int64_t)(r * 4 + q) * K + k) * CF + cf] = acc;
        }
      }
    }
  }
  if (half) round_to_half(U, 16 * K * CF);
}

/* The 4x4 tile d of folded channel cf at tile t of image `img` (zero outside the image; INT8
 * passes values already minus in_zero through `get`). */
#define GATHER_TILE(T, P, img_base, cf, t, load)                                              \
  do {                                                                                       \
    const conv_geometry* g_ = (P)->g;                                                        \
    const int64_t s_ = (P)->s, c_ = (cf) / (s_ * s_), a_ = ((cf) / s_) % s_, b_ = (cf) % s_;  \
    const int64_t ty_ = (t) / (P)->tiles_w, tx_ = (t) % (P)->tiles_w;                         \
    for (int i_ = 0; i_ < 4; ++i_) {                                                         \
      const int64_t y_ = (2 * ty_ + i_) * s_ + a_ - g_->pad_top;                             \
      for (int j_ = 0; j_ < 4; ++j_) {                                                       \
        const int64_t x_ = (2 * tx_ + j_) * s_ + b_ - g_->pad_left;                          \
        d[i_][j_] = y_ >= 0 && y_ < g_->h && x_ >= 0 && x_ < g_->w                           \
                        ? (T)load((img_base) + (c_ * g_->h + y_) * g_->w + x_)                \
                        : (T)0;                                                              \
      }                                                                                      \
    }                                                                                        \
  } while (0)

/* V = B^T d B: rows first, then columns, one rounding per addition (two per element). */
#define INPUT_TRANSFORM(T, d, v)                                                             \
  do {                                                                                       \
    T t_[4][4];                                                                              \
    for (int j_ = 0; j_ < 4; ++j_) {                                                         \
      t_[0][j_] = d[0][j_] - d[2][j_];                                                       \
      t_[1][j_] = d[1][j_] + d[2][j_];                                                       \
      t_[2][j_] = d[2][j_] - d[1][j_];                                                       \
      t_[3][j_] = d[1][j_] - d[3][j_];                                                       \
    }                                                                                        \
    for (int i_ = 0; i_ < 4; ++i_) {                                                         \
      v[i_][0] = t_[i_][0] - t_[i_][2];                                                      \
      v[i_][1] = t_[i_][1] + t_[i_][2];                                                      \
      v[i_][2] = t_[i_][2] - t_[i_][1];                                                      \
      v[i_][3] = t_[i_][1] - t_[i_][3];                                                      \
    }                                                                                        \
  } while (0)

/* Y = A^T m A: rows first ((m0 + m1) + m2, (m1 - m2) - m3), then columns. */
#define OUTPUT_TRANSFORM(T, m, y)                                                            \
  do {                                                                                       \
    T o_[2][4];                                                                              \
    for (int j_ = 0; j_ < 4; ++j_) {                                                         \
      o_[0][j_] = m[0][j_] + m[1][j_] + m[2][j_];                                            \
      o_[1][j_] = m[1][j_] - m[2][j_] - m[3][j_];                                            \
    }                                                                                        \
    for (int p_ = 0; p_ < 2; ++p_) {                                                         \
      y[p_][0] = o_[p_][0] + o_[p_][1] + o_[p_][2];                                          \
      y[p_][1] = o_[p_][1] - o_[p_][2] - o_[p_][3];                                          \
    }                                                                                        \
  } while (0)

#define LOAD_F32(ptr) (*(ptr))

/* Bytes of one thread's block buffers: V [16][CF][TILE_BLOCK] and M [16][K][TILE_BLOCK]. */
static size_t block_bytes(const wino_plan* P, size_t element) {
  return (size_t)16 * (size_t)(P->cf + P->g->k) * TILE_BLOCK * element;
}

accel_status conv_winograd_f32(const conv_geometry* g, const float* in, const float* weights,
                               int half, float* out, const sdp_f32* epilogue, workspace* ws,
                               int32_t num_threads) {
  const wino_plan P = make_plan(g);
  const int64_t K = g->k, CF = P.cf, ohw = (int64_t)g->out_h * g->out_w;
  const int64_t items = g->n * P.blocks;
  const int nth = team_size(items, num_threads);
  float* U = workspace_get(ws, WS_WINOGRAD_WEIGHTS, (size_t)16 * K * CF * sizeof(float));
  if (U == NULL) return ACCEL_ERR_NO_MEMORY;
  float* buffers[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    buffers[t] = workspace_get(ws, t, block_bytes(&P, sizeof(float)));
    if (buffers[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  transform_weights_f32(&P, weights, half, U, team_size(K, num_threads));
  blas_single_threaded();
#pragma omp parallel for num_threads(nth) schedule(dynamic, 1)
  for (int64_t item = 0; item < items; ++item) {
    float* V = buffers[omp_get_thread_num()];
    float* M = V + 16 * CF * TILE_BLOCK;
    const int64_t img = item / P.blocks, t0 = (item % P.blocks) * TILE_BLOCK;
    const int64_t nt = P.tiles - t0 < TILE_BLOCK ? P.tiles - t0 : TILE_BLOCK;
    const float* base = in + img * g->c * g->h * g->w;
    for (int64_t cf = 0; cf < CF; ++cf) {
      for (int64_t t = 0; t < nt; ++t) {
        float d[4][4], v[4][4];
        GATHER_TILE(float, &P, base, cf, t0 + t, LOAD_F32);
        INPUT_TRANSFORM(float, d, v);
        for (int xi = 0; xi < 16; ++xi) V[(xi * CF + cf) * TILE_BLOCK + t] = v[xi / 4][xi % 4];
      }
    }
    if (half) round_to_half(V, 16 * CF * TILE_BLOCK);
    for (int xi = 0; xi < 16; ++xi) {
      scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)K, (blasint)nt,
                        (blasint)CF, 1.0f, U + xi * K * CF, (blasint)CF,
                        V + xi * CF * TILE_BLOCK, TILE_BLOCK, 0.0f, M + xi * K * TILE_BLOCK,
                        TILE_BLOCK);
    }
    for (int64_t k = 0; k < K; ++k) {
      float* plane = out + (img * K + k) * ohw;
      for (int64_t t = 0; t < nt; ++t) {
        float m[4][4], y[2][2];
        for (int xi = 0; xi < 16; ++xi) m[xi / 4][xi % 4] = M[(xi * K + k) * TILE_BLOCK + t];
        OUTPUT_TRANSFORM(float, m, y);
        const int64_t ty = (t0 + t) / P.tiles_w, tx = (t0 + t) % P.tiles_w;
        for (int p = 0; p < 2 && 2 * ty + p < g->out_h; ++p) {
          for (int q = 0; q < 2 && 2 * tx + q < g->out_w; ++q) {
            plane[(2 * ty + p) * g->out_w + 2 * tx + q] = y[p][q];
          }
        }
      }
    }
  }
  if (epilogue != NULL) {
    const int64_t planes = g->n * K;
#pragma omp parallel for num_threads(team_size(planes, num_threads)) schedule(static)
    for (int64_t pl = 0; pl < planes; ++pl) {
      sdp_f32_span(epilogue, (int32_t)(pl % K), out + pl * ohw,
                   epilogue->ew_operand != NULL ? epilogue->ew_operand + pl * ohw : NULL, ohw);
    }
  }
  return ACCEL_OK;
}
