/* winograd_c16.c - the CONV engine's Winograd mode, F(2x2, 3x3), on channel-blocked (C16) fp32
 * activations: input [n][c/16][h][w][16], output [n][k/16][out_h][out_w][16].
 *
 * winograd.c's steps and bits for a stride-1, one-group FP32 convolution, with its plan of
 * blocks of tile rows, its items (block, part of the kernels) and pre-transformed weights, and
 * the transforms' arithmetic (winograd.h). Here a vector holds 16 channels of one tile where
 * winograd.c's holds 16 tiles of one channel, so each lane does the same operations:
 *   2. input transform: a tile's 4x4 window is 16 vector loads (zero outside the plane), no
 *      staging and no permutes; V is [16 xi][c/16][tiles][16];
 *   3. per xi a GEMM shaped as conv_c16.c's 1x1 kernel: NP tiles x NB blocks of 16 kernels,
 *      per channel NP broadcasts of V and NB weight vectors (each joined from two 8-kernel
 *      rows of the packed weights, [xi][k/8][c][8]: one packing serves both layouts); M is
 *      [16 xi][KG/16][tiles][16] for KG kernels at a time. Every M element is the fused
 *      multiply-add chain over the channels from 0 up, starting from 0: winograd.c's bits
 *      whatever the tiling;
 *   4. output transform per tile and 16 kernels, then the one-pass epilogue in registers
 *      (c16_epi: the bits of sdp_f32_span, which winograd.c applies) before the store.
 */
#include "winograd.h"

#ifdef __AVX512F__

int conv_winograd_c16_fits(const conv_geometry* g, const sdp_f32* epilogue) {
  return g->n >= 1 && g->groups == 1 && g->c >= 16 && g->c % 16 == 0 && g->k >= 16 &&
         g->k % 16 == 0 && g->kernel_h == 3 && g->kernel_w == 3 && g->stride_h == 1 &&
         g->stride_w == 1 && g->dilation_h == 1 && g->dilation_w == 1 && g->pixel_bytes == 0 &&
         g->h >= 1 && g->w >= 1 && g->out_h >= 1 && g->out_w >= 1 &&
         c16_epilogue_fits(epilogue);
}

#define AI static inline __attribute__((always_inline))

enum {
  NPT = 12, /* tiles per GEMM micro-kernel: 12 x 2 accumulators */
  KG = 32   /* kernels per pass through M: two blocks of 16 */
};

/* ---- 2. the input transform ------------------------------------------------------------ */

/* The vector at column x of an input row (NULL: a row outside the plane); CHECK: zero outside
 * the plane. */
AI __m512 window_at(const int CHECK, const float* row, int64_t x, int64_t w) {
  if (CHECK && (row == NULL || x < 0 || x >= w)) return _mm512_setzero_ps();
  return _mm512_loadu_ps(row + x * 16);
}

/* B^T d B of the tile whose window starts at column x0 of `rows`, into v[xi * xi_stride]. */
AI void input_tile(const int CHECK, const float* const rows[4], int64_t x0, int64_t w, float* v,
                   int64_t xi_stride) {
  __m512 d[4][4], t[16];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) d[i][j] = window_at(CHECK, rows[i], x0 + j, w);
  wino_input_transform(d, 0, t);
  for (int xi = 0; xi < 16; ++xi) _mm512_storeu_ps(v + xi * xi_stride, t[xi]);
}

/* V[xi][cb][t][16] for the block's tiles t = r * tiles_w + tx and every channel block cb of
 * the image `img`. */
static void transform_input(const wino_plan* P, const float* img, int64_t ty0, int64_t nrows,
                            float* V) {
  const conv_geometry* g = P->g;
  const int64_t CB = P->cf / 16, H = g->h, W = g->w, tw = P->tiles_w, ntp = P->ntp;
  const int64_t xi_stride = CB * ntp * 16;
  for (int64_t cb = 0; cb < CB; ++cb) {
    const float* plane = img + cb * H * W * 16;
    for (int64_t r = 0; r < nrows; ++r) {
      const float* rows[4];
      int inside = 1;
      for (int i = 0; i < 4; ++i) {
        const int64_t y = 2 * (ty0 + r) + i - g->pad_top;
        rows[i] = y >= 0 && y < H ? plane + y * W * 16 : NULL;
        inside &= rows[i] != NULL;
      }
      float* v = V + (cb * ntp + r * tw) * 16;
      for (int64_t tx = 0; tx < tw; ++tx) {
        const int64_t x0 = 2 * tx - g->pad_left;
        if (inside && x0 >= 0 && x0 + 3 < W) {
          input_tile(0, rows, x0, W, v + tx * 16, xi_stride);
        } else {
          input_tile(1, rows, x0, W, v + tx * 16, xi_stride);
        }
      }
    }
  }
}

/* ---- 3. the MAC array: per xi, M[q][t][16] = sum over c of U[c][k0 + 16 q ..] V[c][t] ---- */

/* NP tiles from t0 x NB blocks of 16 kernels. Ux: the packed weights of xi at the first
 * kernel's 8-kernel row block ([rows][CF][KB]); Vx: V of xi; Mx: M of xi. */
AI void gemm_tile(const int NP, const int NB, const float* Ux, int64_t CF, const float* Vx,
                  int64_t ntp, int64_t t0, float* Mx) {
  __m512 acc[NPT][2];
  for (int p = 0; p < NP; ++p)
    for (int q = 0; q < NB; ++q) acc[p][q] = _mm512_setzero_ps();
  for (int64_t c0 = 0; c0 < CF; c0 += 16) {
    const float* vb = Vx + ((c0 / 16) * ntp + t0) * 16;
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      __m512 w[2];
      for (int q = 0; q < NB; ++q) {
        const float* lo = Ux + (2 * q * CF + c0 + j) * KB;
        w[q] = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(lo)),
                                  _mm256_loadu_ps(lo + CF * KB), 1);
      }
      for (int p = 0; p < NP; ++p) {
        const __m512 b = _mm512_set1_ps(vb[p * 16 + j]);
        for (int q = 0; q < NB; ++q) acc[p][q] = _mm512_fmadd_ps(w[q], b, acc[p][q]);
      }
    }
  }
  for (int p = 0; p < NP; ++p)
    for (int q = 0; q < NB; ++q) _mm512_storeu_ps(Mx + (q * ntp + t0 + p) * 16, acc[p][q]);
}

typedef void (*gemm_fn)(const float* Ux, int64_t CF, const float* Vx, int64_t ntp, int64_t t0,
                        float* Mx);
#define GEMM(NP, NB)                                                                        \
  static void gemm_##NP##_##NB(const float* Ux, int64_t CF, const float* Vx, int64_t ntp,   \
                               int64_t t0, float* Mx) {                                     \
    gemm_tile(NP, NB, Ux, CF, Vx, ntp, t0, Mx);                                             \
  }
#define GEMMS(NB)                                                                           \
  GEMM(1, NB) GEMM(2, NB) GEMM(3, NB) GEMM(4, NB) GEMM(5, NB) GEMM(6, NB) GEMM(7, NB)       \
  GEMM(8, NB) GEMM(9, NB) GEMM(10, NB) GEMM(11, NB) GEMM(12, NB)
#define GEMM_ROW(NB)                                                                        \
  {gemm_1_##NB, gemm_2_##NB, gemm_3_##NB, gemm_4_##NB,  gemm_5_##NB,  gemm_6_##NB,          \
   gemm_7_##NB, gemm_8_##NB, gemm_9_##NB, gemm_10_##NB, gemm_11_##NB, gemm_12_##NB}
GEMMS(1)
GEMMS(2)
/* [NB - 1][NP - 1] */
static const gemm_fn gemm_tab[2][NPT] = {GEMM_ROW(1), GEMM_ROW(2)};

/* ---- 4. the output transform and the epilogue ------------------------------------------ */

/* Y = A^T m A of the block's tiles for one block of 16 kernels (Mq: its M, xi_stride apart),
 * then the epilogue (EK: c16_epi_kind's), into the output plane (opd: the operand's plane). */
AI void output_block(const int EK, const wino_plan* P, const float* Mq, int64_t xi_stride,
                     int64_t ty0, int64_t nrows, const c16_epi_vectors* e, const float* opd,
                     float* plane) {
  const int64_t tw = P->tiles_w, OH = P->g->out_h, OW = P->g->out_w;
  for (int64_t r = 0; r < nrows; ++r) {
    const int64_t ty = ty0 + r;
    const int prows = 2 * ty + 1 < OH ? 2 : 1;
    for (int64_t tx = 0; tx < tw; ++tx) {
      __m512 m[16], y[2][2];
      const float* tile = Mq + (r * tw + tx) * 16;
      for (int xi = 0; xi < 16; ++xi) m[xi] = _mm512_loadu_ps(tile + xi * xi_stride);
      wino_output_transform(m, prows, y);
      const int qcols = 2 * tx + 1 < OW ? 2 : 1;
      for (int p = 0; p < prows; ++p) {
        for (int q = 0; q < qcols; ++q) {
          const int64_t at = ((2 * ty + p) * OW + 2 * tx + q) * 16;
          _mm512_storeu_ps(plane + at, c16_epi(EK, y[p][q], e->sc, e->sh, e->lo, e->hi, opd + at));
        }
      }
    }
  }
}

typedef void (*output_fn)(const wino_plan* P, const float* Mq, int64_t xi_stride, int64_t ty0,
                          int64_t nrows, const c16_epi_vectors* e, const float* opd,
                          float* plane);
#define OUT(EK)                                                                               \
  static void output_##EK(const wino_plan* P, const float* Mq, int64_t xi_stride, int64_t ty0, \
                          int64_t nrows, const c16_epi_vectors* e, const float* opd,           \
                          float* plane) {                                                      \
    output_block(EK, P, Mq, xi_stride, ty0, nrows, e, opd, plane);                            \
  }
OUT(0) OUT(1) OUT(2) OUT(3) OUT(4) OUT(5) OUT(6)
static const output_fn output_tab[7] = {output_0, output_1, output_2, output_3,
                                        output_4, output_5, output_6};

/* ---- the engine ------------------------------------------------------------------------ */

/* Floats of one thread's buffers: V [16][CF][ntp], M [16][KG][ntp]. */
static int64_t thread_floats(const wino_plan* P) { return 16 * (P->cf + KG) * P->ntp; }

typedef struct wc16_job {
  const wino_plan* P;
  const float* in;
  const float* U;
  float* out;
  const sdp_f32* ep;
  int ek;
  float* const* buffers; /* per participant */
  int64_t parts, kgroups;
} wc16_job;

/* Item = (image, block of tile rows, part of the groups of KG kernels), part innermost. */
static void wc16_item(void* ctx, int64_t item, int participant) {
  const wc16_job* J = ctx;
  const wino_plan* P = J->P;
  const conv_geometry* g = P->g;
  const int64_t CF = P->cf, K = g->k, ntp = P->ntp, ohw = (int64_t)g->out_h * g->out_w;
  const int64_t part = item % J->parts, block = item / J->parts;
  const int64_t b = block % P->blocks, img = block / P->blocks;
  int64_t ty0, nrows;
  wino_block_rows(P, b, &ty0, &nrows);
  const int64_t nt = nrows * P->tiles_w;
  float* V = J->buffers[participant];
  float* M = V + 16 * CF * ntp;
  const int64_t v_xi = CF * ntp, m_xi = KG * ntp;
  transform_input(P, J->in + img * g->c * g->h * g->w, ty0, nrows, V);
  const int64_t kg0 = J->kgroups * part / J->parts, kg1 = J->kgroups * (part + 1) / J->parts;
  for (int64_t kg = kg0; kg < kg1; ++kg) {
    const int64_t k0 = kg * KG, nb = K - k0 >= KG ? KG / 16 : 1;
    for (int xi = 0; xi < 16; ++xi) {
      const float* Ux = J->U + ((xi * P->kblocks) + k0 / KB) * CF * KB;
      for (int64_t t0 = 0; t0 < nt; t0 += NPT) {
        const int64_t np = nt - t0 < NPT ? nt - t0 : NPT;
        gemm_tab[nb - 1][np - 1](Ux, CF, V + xi * v_xi, ntp, t0, M + xi * m_xi);
      }
    }
    for (int64_t q = 0; q < nb; ++q) {
      const int64_t kb = k0 / 16 + q, at = (img * (K / 16) + kb) * ohw * 16;
      const c16_epi_vectors e = c16_epi_load(J->ep, kb);
      const float* opd = J->ep != NULL && J->ep->ew_op == ACCEL_EW_ADD ? J->ep->ew_operand + at
                                                                       : J->out + at;
      output_tab[J->ek](P, M + q * ntp * 16, m_xi, ty0, nrows, &e, opd, J->out + at);
    }
  }
}
accel_status conv_winograd_c16(const conv_geometry* g, const float* in, const float* weights,
                               const void* packed, float* out, const sdp_f32* epilogue,
                               workspace* ws, int32_t num_threads) {
  const wino_plan P = wino_make_plan(g, num_threads);
  const int64_t kgroups = (g->k + KG - 1) / KG;
  int64_t parts;
  const int64_t items = wino_items(&P, kgroups, num_threads, &parts);
  const int nth = wino_team_size(items, num_threads);
  const float* U = wino_weights(&P, weights, packed, 0, ws, num_threads);
  if (U == NULL) return ACCEL_ERR_NO_MEMORY;
  float* buffers[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    buffers[t] = workspace_get(ws, t, (size_t)thread_floats(&P) * sizeof(float));
    if (buffers[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  const wc16_job J = {.P = &P, .in = in, .U = U, .out = out, .ep = epilogue,
                      .ek = c16_epi_kind(epilogue), .buffers = buffers, .parts = parts,
                      .kgroups = kgroups};
  pool_for(nth, items, wc16_item, (void*)&J);
  return ACCEL_OK;
}

#endif /* __AVX512F__ (without it device.c runs no C16 kernel) */
