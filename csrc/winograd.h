/* winograd.h - what winograd.c (NCHW) and winograd_c16.c (C16) share: the plan of blocks and
 * threads, the pre-transformed weights, and the arithmetic of the input and output
 * transforms. Internal to csrc/. */
#ifndef ACCEL_WINOGRAD_H_
#define ACCEL_WINOGRAD_H_

#include "kernels.h"

enum {
  KB = 8,                /* kernels per row block of the packed weights (the NCHW GEMM's) */
  V_BUDGET = 512 * 1024  /* bytes of a block's transformed tiles (stays in L2) */
};

typedef struct wino_plan {
  const conv_geometry* g;
  int64_t s;                      /* stride, folded into channels */
  int64_t groups;                 /* each group a convolution of its own */
  int64_t cg, kg;                 /* input channels and kernels of a group */
  int64_t cf;                     /* folded channels of a group, C/groups*s*s */
  int64_t kblocks;                /* ceil(K/groups / KB) */
  int64_t tiles_h, tiles_w;       /* 2x2 output tiles per image */
  int64_t rows;                   /* tile rows of the largest block */
  int64_t blocks;                 /* blocks per image */
  int64_t ntp;                    /* a block's tiles, rounded up to 16: V's row length */
  int64_t sw;                     /* staged input row length (zero-padded folded row) */
} wino_plan;

/* Blocks of whole tile rows whose V fits the budget, as many per image as a multiple of the
 * threads when the image has the rows for it. The bits do not depend on the blocks. */
wino_plan wino_make_plan(const conv_geometry* g, int32_t num_threads);

/* Block b's first tile row and its number of tile rows. */
static inline void wino_block_rows(const wino_plan* P, int64_t b, int64_t* ty0, int64_t* nrows) {
  *ty0 = P->tiles_h * b / P->blocks;
  *nrows = P->tiles_h * (b + 1) / P->blocks - *ty0;
}

/* Threads for `items` independent pieces of work. */
int wino_team_size(int64_t items, int32_t num_threads);

/* Items (image and group, block, part of `kblocks` kernel blocks), part innermost: when there
 * are fewer blocks than threads, their kernels split in parts (each part transforms the
 * block's input itself: cheap beside its GEMMs). Sets *parts. */
int64_t wino_items(const wino_plan* P, int64_t kblocks, int32_t num_threads, int64_t* parts);

/* Floats of one group's packed weights: [16 xi][kblocks][cf][KB]. */
static inline int64_t wino_group_floats(const wino_plan* P) {
  return 16 * P->kblocks * P->cf * KB;
}

/* The pre-transformed weights U: packed's (conv_winograd_pack), or `weights` transformed into
 * the workspace (then rounded to half when `half`); NULL when out of memory. */
const float* wino_weights(const wino_plan* P, const float* weights, const void* packed,
                          int half, workspace* ws, int32_t num_threads);

#ifdef __AVX512F__
#include <immintrin.h>

/* V = B^T d B, rows first, then columns, one rounding per addition; rounded to half for FP16.
 * Each lane one tile and channel: the NCHW path's lanes are tiles, the C16 path's channels. */
static inline __attribute__((always_inline)) void wino_input_transform(__m512 d[4][4], int half,
                                                                        __m512 v[16]) {
  __m512 t[4][4];
  for (int j = 0; j < 4; ++j) {
    t[0][j] = _mm512_sub_ps(d[0][j], d[2][j]);
    t[1][j] = _mm512_add_ps(d[1][j], d[2][j]);
    t[2][j] = _mm512_sub_ps(d[2][j], d[1][j]);
    t[3][j] = _mm512_sub_ps(d[1][j], d[3][j]);
  }
  for (int i = 0; i < 4; ++i) {
    __m512* w = v + 4 * i;
    w[0] = _mm512_sub_ps(t[i][0], t[i][2]);
    w[1] = _mm512_add_ps(t[i][1], t[i][2]);
    w[2] = _mm512_sub_ps(t[i][2], t[i][1]);
    w[3] = _mm512_sub_ps(t[i][1], t[i][3]);
    for (int j = 0; j < 4 && half; ++j) {
      w[j] = _mm512_cvtph_ps(_mm512_cvtps_ph(w[j], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
  }
}

/* Y = A^T m A: output row p of the tile in o[p], rows first ((m0 + m1) + m2,
 * (m1 - m2) - m3), then columns (y[p][0], y[p][1]) for the rows p < prows. */
static inline __attribute__((always_inline)) void wino_output_transform(const __m512 m[16],
                                                                         int prows,
                                                                         __m512 y[2][2]) {
  __m512 o[2][4];
  for (int j = 0; j < 4; ++j) {
    o[0][j] = _mm512_add_ps(_mm512_add_ps(m[j], m[4 + j]), m[8 + j]);
    o[1][j] = _mm512_sub_ps(_mm512_sub_ps(m[4 + j], m[8 + j]), m[12 + j]);
  }
  for (int p = 0; p < prows; ++p) {
    y[p][0] = _mm512_add_ps(_mm512_add_ps(o[p][0], o[p][1]), o[p][2]);
    y[p][1] = _mm512_sub_ps(_mm512_sub_ps(o[p][1], o[p][2]), o[p][3]);
  }
}
#endif

/* The MAC array of builds with AVX2 and FMA but not AVX-512 (winograd_avx2.c), one xi at a time over every kernel of an item: rows k < nk of
 * M[k][t] (ntp apart) = the FMA chain over c from 0 of U[k / KB][c][k % KB] V[c][t] for the
 * tiles t < nt (a multiple of 8), V's tiles taken 24 at a time into `panel` ([CF][24], 32-byte
 * aligned), which then serves every kernel from L1 (winograd.c, wino_xi_outer). */
void wino_gemm_xi_avx2(const float* U, const float* V, int64_t CF, int64_t ntp, int64_t nt,
                       float* M, int64_t nk, float* panel);

/* The input transform of one tile row on such builds: V of tiles 0 .. tw - 1 of the 4 staged
 * rows `rows` (sw apart, readable to 2 * round16(tw) + 2) into dst[xi * xstride + tx], B^T d B
 * in winograd.c's order; rounded to half when `half`. */
void wino_input_row_avx2(const float* rows, int64_t sw, int64_t tw, int half, float* dst,
                         int64_t xstride);

/* The output transform of one tile row on such builds: M's tiles 0 .. tw - 1 (M[xi * xstride
 * + tx]) into output rows dst, dst + ow (the second when prows is 2), columns 0 .. ow - 1:
 * A^T m A in winograd.c's order. */
void wino_output_row_avx2(const float* M, int64_t xstride, int64_t tw, int prows, float* dst,
                          int64_t ow);

#endif /* ACCEL_WINOGRAD_H_ */
