/* dw_c16.c - fp32 depthwise 3x3 convolution on C16 activations ([n][c/16][h][w][16]).
 *
 * Sums, bit for bit, as conv_f32's depthwise row kernel (dwr_body, conv/f32_dw_rows_avx512.c)
 * on the NCHW tensors: each output is sum over taps t = r * 3 + s, in that order, of w[t] * x
 * by one fused multiply-add each, from zero, x = 0 outside the input plane (those taps still do
 * their FMA, with a zero); then the one-pass epilogue in registers (kernels.h's c16_epi, in
 * sdp.c's order, as ep_vec in conv/f32_implicit_avx512.c).
 *
 * Design (an NCHW16c study, docs/notebook/whole_network_time_log.md): per 16-channel block the 9
 * tap vectors (weights packed per call into WS_C16_WEIGHTS as [c/16][9][16]) and the epilogue's
 * vectors stay in registers; per output row, blocks of up to XB = 8 output positions keep 8
 * independent chains of 9 FMAs; each input vector a block needs is loaded once (stride 1: XB + 2
 * per input row for 3 * XB FMAs; stride 2: 2 * XB + 1). Rows outside the plane read a zero row
 * (in the same workspace slot), columns outside read zero vectors, checked only in the edge
 * blocks. Threads: pool_for items are (image, channel block, band of output rows): disjoint
 * outputs, each computed the same way whatever the thread count. */
#include <string.h>

#include "kernels.h"

#ifdef __AVX512F__
#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

enum { XB = 8 }; /* output positions per block */

/* Input vector at column ix of a row (CHECK: zero outside [0, W)). */
AI __m512 ld(const float* row, int64_t ix, int64_t W, int CHECK) {
  if (CHECK && (ix < 0 || ix >= W)) return _mm512_setzero_ps();
  return _mm512_loadu_ps(row + ix * 16);
}

/* N (<= XB) outputs at columns ox0.. of one output row; rows: the 3 input rows it reads. */
AI void dw_block(const int N, const int ST, const int CHECK, const int EK,
                 const float* const rows[3], int64_t ox0, int64_t W, const __m512 wv[9],
                 __m512 sc, __m512 sh, __m512 lo, __m512 hi, const float* opd, float* o) {
  __m512 acc[XB];
#pragma GCC unroll 8
  for (int k = 0; k < N; ++k) acc[k] = _mm512_setzero_ps();
  const int nv = (N - 1) * ST + 3;
  const int64_t base = ox0 * ST - 1; /* pad_left == 1 */
#pragma GCC unroll 3
  for (int r = 0; r < 3; ++r) {
    __m512 v[(XB - 1) * 2 + 3];
#pragma GCC unroll 17
    for (int j = 0; j < nv; ++j) v[j] = ld(rows[r], base + j, W, CHECK);
#pragma GCC unroll 3
    for (int s = 0; s < 3; ++s)
#pragma GCC unroll 8
      for (int k = 0; k < N; ++k) acc[k] = _mm512_fmadd_ps(wv[r * 3 + s], v[k * ST + s], acc[k]);
  }
#pragma GCC unroll 8
  for (int k = 0; k < N; ++k)
    _mm512_storeu_ps(o + k * 16, c16_epi(EK, acc[k], sc, sh, lo, hi, opd + k * 16));
}

/* The epilogue's vectors by value (in registers: 1 us less on 1024 channels of 7x7 than
 * through a pointer): scale (1 when none), shift (-0.0 when none), the clip's bounds. */
typedef void (*blk_fn)(const float* const rows[3], int64_t ox0, int64_t W, const __m512 wv[9],
                       __m512 sc, __m512 sh, __m512 lo, __m512 hi, const float* opd, float* o);

#define BLK(N, ST, CK, EK)                                                                     \
  static void blk_##N##_##ST##_##CK##_##EK(const float* const rows[3], int64_t ox0, int64_t W,  \
                                           const __m512 wv[9], __m512 sc, __m512 sh,          \
                                           __m512 lo, __m512 hi, const float* opd, float* o) { \
    dw_block(N, ST, CK, EK, rows, ox0, W, wv, sc, sh, lo, hi, opd, o);                         \
  }
#define BLKS(ST, CK, EK)                                                                       \
  BLK(1, ST, CK, EK) BLK(2, ST, CK, EK) BLK(3, ST, CK, EK) BLK(4, ST, CK, EK)                  \
  BLK(5, ST, CK, EK) BLK(6, ST, CK, EK) BLK(7, ST, CK, EK) BLK(8, ST, CK, EK)
#define BLKS4(EK) BLKS(1, 0, EK) BLKS(1, 1, EK) BLKS(2, 0, EK) BLKS(2, 1, EK)
#define TAB(ST, CK, EK)                                                                        \
  {blk_1_##ST##_##CK##_##EK, blk_2_##ST##_##CK##_##EK, blk_3_##ST##_##CK##_##EK,                \
   blk_4_##ST##_##CK##_##EK, blk_5_##ST##_##CK##_##EK, blk_6_##ST##_##CK##_##EK,                \
   blk_7_##ST##_##CK##_##EK, blk_8_##ST##_##CK##_##EK}
#define TAB4(EK) {{TAB(1, 0, EK), TAB(1, 1, EK)}, {TAB(2, 0, EK), TAB(2, 1, EK)}}

BLKS4(0) BLKS4(1) BLKS4(2) BLKS4(3) BLKS4(4) BLKS4(5) BLKS4(6)

/* [EK][stride - 1][check][N - 1] */
static const blk_fn blk_tab[7][2][2][XB] = {TAB4(0), TAB4(1), TAB4(2), TAB4(3),
                                            TAB4(4), TAB4(5), TAB4(6)};

typedef struct dw_job {
  const conv_geometry* g;
  const float* in;
  const float* wp;       /* [c/16][9][16] */
  const float* zero_row; /* w * 16 zeros */
  float* out;
  const sdp_f32* ep;
  int ek;
  int64_t ncb, bands, band_rows;
} dw_job;

/* Item: (image, channel block, band of output rows), bands innermost. */
static void dw_item(void* ctx, int64_t item, int participant) {
  const dw_job* J = ctx;
  const conv_geometry* g = J->g;
  (void)participant;
  const int64_t band = item % J->bands, plane = item / J->bands; /* image * ncb + block */
  const int64_t cb = plane % J->ncb;
  const int64_t H = g->h, W = g->w, OH = g->out_h, OW = g->out_w, st = g->stride_h;
  const int64_t y0 = band * J->band_rows;
  const int64_t y1 = y0 + J->band_rows < OH ? y0 + J->band_rows : OH;
  const blk_fn* interior = blk_tab[J->ek][st - 1][0];
  const blk_fn* edge = blk_tab[J->ek][st - 1][1];

  __m512 wv[9];
  for (int t = 0; t < 9; ++t) wv[t] = _mm512_load_ps(J->wp + (cb * 9 + t) * 16);
  const sdp_f32* ep = J->ep;
  const c16_epi_vectors e = c16_epi_load(ep, cb);
  const float* src = J->in + plane * H * W * 16;
  const int64_t obase = plane * OH * OW * 16;
  float* dst = J->out + obase;
  const float* opd = ep != NULL && ep->ew_op == ACCEL_EW_ADD ? ep->ew_operand + obase : dst;

  for (int64_t oy = y0; oy < y1; ++oy) {
    const float* rows[3];
    for (int r = 0; r < 3; ++r) {
      const int64_t iy = oy * st + r - 1; /* pad_top == 1 */
      rows[r] = iy >= 0 && iy < H ? src + iy * W * 16 : J->zero_row;
    }
    float* orow = dst + oy * OW * 16;
    const float* oprow = opd + oy * OW * 16;
    for (int64_t ox0 = 0; ox0 < OW; ox0 += XB) {
      const int64_t n = OW - ox0 < XB ? OW - ox0 : XB;
      const int64_t first = ox0 * st - 1, last = (ox0 + n - 1) * st + 1;
      const int check = first < 0 || last >= W;
      (check ? edge : interior)[n - 1](rows, ox0, W, wv, e.sc, e.sh, e.lo, e.hi,
                                       oprow + ox0 * 16, orow + ox0 * 16);
    }
  }
}

int conv_c16_depthwise_fits(const conv_geometry* g, const sdp_f32* epilogue) {
  return g->n >= 1 && g->c >= 16 && g->c % 16 == 0 && g->k == g->c && g->groups == g->c &&
         g->kernel_h == 3 && g->kernel_w == 3 && g->stride_h == g->stride_w &&
         (g->stride_h == 1 || g->stride_h == 2) && g->pad_top == 1 && g->pad_left == 1 &&
         g->dilation_h == 1 && g->dilation_w == 1 && g->pixel_bytes == 0 && g->h >= 1 &&
         g->w >= 1 && g->out_h >= 1 && g->out_w >= 1 &&
         c16_epilogue_fits(epilogue);
}

accel_status conv_c16_depthwise(const conv_geometry* g, const float* in, const float* weights,
                                float* out, const sdp_f32* epilogue, workspace* ws,
                                int32_t num_threads) {
  const int64_t ncb = g->c / 16, W = g->w, OH = g->out_h, OW = g->out_w;
  /* the packed weights, then a zero row */
  const size_t wbytes = (size_t)ncb * 9 * 16 * sizeof(float);
  float* wp = workspace_get(ws, WS_C16_WEIGHTS, wbytes + (size_t)W * 16 * sizeof(float));
  if (wp == NULL) return ACCEL_ERR_NO_MEMORY;
  for (int64_t cb = 0; cb < ncb; ++cb)
    for (int t = 0; t < 9; ++t)
      for (int l = 0; l < 16; ++l) wp[(cb * 9 + t) * 16 + l] = weights[(cb * 16 + l) * 9 + t];
  float* zero_row = wp + ncb * 9 * 16;
  memset(zero_row, 0, (size_t)W * 16 * sizeof(float));

  const int ek = c16_epi_kind(epilogue);

  int nth = num_threads < 1 ? 1 : num_threads;
  if (nth > WS_THREAD_SLOTS) nth = WS_THREAD_SLOTS;
  const int64_t planes = (int64_t)g->n * ncb, outputs = planes * OH * OW * 16;
  if (outputs < 16384) nth = 1; /* a few microseconds: not worth waking a worker */
  /* bands of output rows when there are too few planes to share (at least 64 positions each) */
  int64_t bands = 1;
  if (nth > 1 && planes < 4 * nth) {
    bands = (4 * nth + planes - 1) / planes;
    const int64_t most = OH * OW / 64 > 1 ? OH * OW / 64 : 1;
    if (bands > most) bands = most;
    if (bands > OH) bands = OH;
  }
  const int64_t band_rows = (OH + bands - 1) / bands;
  bands = (OH + band_rows - 1) / band_rows;
  const int64_t items = planes * bands;
  if (nth > items) nth = (int)items;
  dw_job J = {.g = g, .in = in, .wp = wp, .zero_row = zero_row, .out = out, .ep = epilogue,
              .ek = ek, .ncb = ncb, .bands = bands, .band_rows = band_rows};
  pool_for(nth, items, dw_item, &J);
  return ACCEL_OK;
}

#endif /* __AVX512F__ (without it device.c runs no C16 kernel) */
