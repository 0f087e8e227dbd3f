/* conv/f32_dw_c16_avx512.c - FP32 depthwise 3x3 and 5x5 CONV on NCHW tensors through a
 * channel-blocked copy (impl "dw_c16_avx512").
 *
 * The row kernel (conv/f32_dw_rows_avx512.c) puts a row's positions in the lanes: a 7- or
 * 14-wide plane fills 7 or 14 of 16, and a stride-2 row needs two permutes per loaded vector.
 * Here 16 channels of one position fill the lanes instead (dw_c16.c's way, without its C16
 * tensors): per item (image, block of 16 channels, band of output rows) the band's input rows
 * are transposed into a zero-padded [rows][columns][16] copy in the participant's scratch,
 * the outputs computed there in blocks of up to DCB positions of a row (no masks, no
 * permutes: the padding is in the copy), and transposed back into the 16 NCHW planes, where
 * the epilogue runs on the band (epilogue_span, as the row kernel), or, for a scale / shift
 * and sigmoid, silu, hardsigmoid or hardswish, on the C16 outputs before (dwc_ep_c16). A block of fewer than 16
 * channels (C % 16) fills the other lanes with zeros and stores none of them.
 *
 * Sums: each output is sum over taps t = r * K + s, in that order, of w[t] * x by one fused
 * multiply-add each, from zero, x = 0 in the padding (those taps still do their FMA, with a
 * zero): the row kernel's sums exactly (conv/f32_order.h), so the bits do not depend on
 * which of the two ran.
 */
#include "conv/f32.h"

#ifdef __AVX512F__
#define AI static inline __attribute__((always_inline))

enum { DCB = 8 };                    /* output positions of a row computed at once */
enum { DWC_SCRATCH = 96 * 1024 };    /* bytes of copy and output a band aims for (L2) */

/* N (<= DCB) outputs of a row at stride ST from the copy's K rows (row0, rows rs floats
 * apart, at the block's first column), taps wp ([K * K][16]); o: N vectors. */
AI void dwc_block(const int K, const int ST, const int N, const float* row0, int64_t rs,
                  const float* wp, float* o) {
  __m512 acc[DCB];
#pragma GCC unroll 8
  for (int k = 0; k < N; ++k) acc[k] = _mm512_setzero_ps();
#pragma GCC unroll 5
  for (int r = 0; r < K; ++r) {
    __m512 v[(DCB - 1) * 2 + 5];
    const int nv = (N - 1) * ST + K;
#pragma GCC unroll 19
    for (int j = 0; j < nv; ++j) v[j] = _mm512_load_ps(row0 + r * rs + j * 16);
#pragma GCC unroll 5
    for (int s = 0; s < K; ++s) {
      const __m512 w = _mm512_load_ps(wp + (r * K + s) * 16);
#pragma GCC unroll 8
      for (int k = 0; k < N; ++k) acc[k] = _mm512_fmadd_ps(w, v[k * ST + s], acc[k]);
    }
  }
#pragma GCC unroll 8
  for (int k = 0; k < N; ++k) _mm512_store_ps(o + k * 16, acc[k]);
}

/* One output row: ow positions from the copy's rows at row0 into o. */
typedef void (*dwc_row_fn)(const float* row0, int64_t rs, int64_t ow, const float* wp, float* o);
#define DWC_ROW(K_, ST_)                                                                      \
  static void dwc_row_##K_##_##ST_(const float* row0, int64_t rs, int64_t ow, const float* wp,\
                                   float* o) {                                                \
    int64_t x = 0;                                                                            \
    for (; x + DCB <= ow; x += DCB)                                                           \
      dwc_block(K_, ST_, DCB, row0 + x * ST_ * 16, rs, wp, o + x * 16);                       \
    switch (ow - x) {                                                                         \
      case 1: dwc_block(K_, ST_, 1, row0 + x * ST_ * 16, rs, wp, o + x * 16); break;          \
      case 2: dwc_block(K_, ST_, 2, row0 + x * ST_ * 16, rs, wp, o + x * 16); break;          \
      case 3: dwc_block(K_, ST_, 3, row0 + x * ST_ * 16, rs, wp, o + x * 16); break;          \
      case 4: dwc_block(K_, ST_, 4, row0 + x * ST_ * 16, rs, wp, o + x * 16); break;          \
      case 5: dwc_block(K_, ST_, 5, row0 + x * ST_ * 16, rs, wp, o + x * 16); break;          \
      case 6: dwc_block(K_, ST_, 6, row0 + x * ST_ * 16, rs, wp, o + x * 16); break;          \
      case 7: dwc_block(K_, ST_, 7, row0 + x * ST_ * 16, rs, wp, o + x * 16); break;          \
      default: break;                                                                         \
    }                                                                                         \
  }
DWC_ROW(3, 1) DWC_ROW(3, 2) DWC_ROW(5, 1) DWC_ROW(5, 2)

static dwc_row_fn dwc_row(const conv_geometry* g) {
  const int k = g->kernel_h, st = g->stride_h;
  if (k == 3) return st == 1 ? dwc_row_3_1 : dwc_row_3_2;
  return st == 1 ? dwc_row_5_1 : dwc_row_5_2;
}

typedef struct dwc_job {
  const conv_plan* P;
  const float* in;
  const float* weights;
  float* out;
  const sdp_f32* ep;
  int ep_c16; /* the epilogue on the C16 outputs before they go back (dwc_ep_c16) */
  dwc_row_fn row;
  int64_t ncb, bands, band_rows;
  int64_t pw;          /* positions of a copy row: the padded input's columns */
  int64_t copy_floats; /* of a participant's scratch before its output rows */
  float* scratch[WS_THREAD_SLOTS];
} dwc_job;

/* Item: (image, channel block, band of output rows), bands innermost. */
static void dwc_item(void* ctx, int64_t item, int participant) {
  const dwc_job* J = ctx;
  const conv_plan* P = J->P;
  const conv_geometry* g = P->g;
  const int64_t band = item % J->bands, plane = item / J->bands;
  const int64_t b = plane / J->ncb, c0 = plane % J->ncb * 16;
  const int nch = g->c - c0 < 16 ? (int)(g->c - c0) : 16;
  const int64_t H = g->h, W = g->w, OW = g->out_w, K = g->kernel_h, st = g->stride_h;
  const int64_t y0 = band * J->band_rows;
  const int64_t y1 = y0 + J->band_rows < g->out_h ? y0 + J->band_rows : g->out_h;
  const int64_t iy0 = y0 * st - g->pad_top, nin = (y1 - 1 - y0) * st + K;
  const int64_t pl = g->pad_left, pw = J->pw, rs = pw * 16;
  float* copy = J->scratch[participant];
  float* outs = copy + J->copy_floats;

  /* the taps of the 16 channels, [K * K][16]: channel l's K * K taps are row l of a
   * 16 x (K * K) matrix, transposed 16 columns at a time */
  float wp[32 * 16] __attribute__((aligned(64)));
  for (int64_t t0 = 0; t0 < K * K; t0 += 16) {
    const __mmask16 tm = lane_mask(K * K - t0);
    __m512 v[16];
#pragma GCC unroll 16
    for (int l = 0; l < 16; ++l)
      v[l] = _mm512_maskz_loadu_ps(l < nch ? tm : 0, J->weights + (c0 + l) * P->kd + t0);
    transpose_16x16(v);
#pragma GCC unroll 16
    for (int t = 0; t < 16; ++t) _mm512_store_ps(wp + (t0 + t) * 16, v[t]);
  }

  /* the band's input rows, transposed, zero outside the plane: the rows inside it are
   * contiguous in each channel's plane, so they are transposed 16 positions at a time
   * whatever the row length, each position stored at its row and column of the copy */
  const float* src = J->in + (b * g->c + c0) * P->hw;
  const int64_t ia = iy0 < 0 ? -iy0 : 0;                        /* first copy row inside */
  const int64_t ib = iy0 + nin > H ? H - iy0 : nin;             /* past the last */
  for (int64_t i = 0; i < nin; ++i) {
    float* crow = copy + i * rs;
    if (i < ia || i >= ib) {
      memset(crow, 0, (size_t)rs * sizeof(float));
    } else {
      memset(crow, 0, (size_t)pl * 16 * sizeof(float));
      memset(crow + (pl + W) * 16, 0, (size_t)(pw - pl - W) * 16 * sizeof(float));
    }
  }
  const float* first = src + (iy0 + ia) * W;
  const int64_t nx = (ib - ia) * W;
  int32_t* at = (int32_t*)(outs + J->band_rows * OW * 16); /* each position's copy offset */
  for (int64_t r = ia, q = 0; r < ib; ++r)
    for (int64_t x = 0; x < W; ++x) at[q++] = (int32_t)((r * pw + pl + x) * 16);
  for (int64_t q0 = 0; q0 < nx; q0 += 16) {
    const int64_t n = nx - q0 < 16 ? nx - q0 : 16;
    const __mmask16 xm = lane_mask(n);
    __m512 v[16];
#pragma GCC unroll 16
    for (int l = 0; l < 16; ++l) /* a lane past the block's channels loads nothing */
      v[l] = _mm512_maskz_loadu_ps(l < nch ? xm : 0, first + l * P->hw + q0);
    transpose_16x16(v);
    if (n == 16) {
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) _mm512_store_ps(copy + at[q0 + i], v[i]);
    } else {
      for (int i = 0; i < n; ++i) _mm512_store_ps(copy + at[q0 + i], v[i]);
    }
  }

  /* the outputs, [band rows * OW][16] */
  for (int64_t y = y0; y < y1; ++y)
    J->row(copy + (y - y0) * st * rs, rs, OW, wp, outs + (y - y0) * OW * 16);
  const int64_t nq = (y1 - y0) * OW, at0 = (b * g->k + c0) * P->ohw + y0 * OW;
  if (J->ep_c16) { /* the epilogue on the block's vectors (lanes past nch: discarded) */
    const sdp_f32* ep = J->ep;
    float sc[16], sh[16];
    for (int l = 0; l < 16; ++l) {
      sc[l] = ep->scale != NULL && l < nch ? ep->scale[c0 + l] : 1.0f;
      sh[l] = ep->shift != NULL && l < nch ? ep->shift[c0 + l] : 0.0f;
    }
    activation_affine_c16(ep->act, outs, nq, ep->scale != NULL ? sc : NULL,
                          ep->shift != NULL ? sh : NULL);
  }

  /* back into the planes (a band's rows are contiguous in each), then the epilogue */
  for (int64_t q0 = 0; q0 < nq; q0 += 16) {
    const int64_t n = nq - q0 < 16 ? nq - q0 : 16;
    __m512 v[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i)
      v[i] = _mm512_maskz_load_ps(i < n ? (__mmask16)0xFFFF : 0, outs + (q0 + i) * 16);
    transpose_16x16(v);
    const __mmask16 qm = lane_mask(n);
    for (int l = 0; l < nch; ++l) _mm512_mask_storeu_ps(J->out + at0 + l * P->ohw + q0, qm, v[l]);
  }
  if (J->ep != NULL && !J->ep_c16)
    for (int l = 0; l < nch; ++l) epilogue_span(J->ep, c0 + l, J->out, at0 + l * P->ohw, nq);
}

/* Whether the epilogue is sdp_f32_span's scale / shift and activation pass (activation_affine:
 * no element-wise operand, no LUT, not one of the one-pass epilogues) of an activation that
 * activation_affine_c16 computes on 16 channels' vectors: then it runs on the band's C16
 * outputs, the same steps per value (the bits of the per-channel spans), in full vectors. */
static int dwc_ep_c16(const sdp_f32* ep) {
  return ep != NULL && !sdp_f32_one_pass(ep) && !sdp_f32_has_x(ep) &&
         ep->ew_op == ACCEL_EW_NONE && ep->lut == NULL &&
         (ep->act == ACCEL_ACT_SIGMOID || ep->act == ACCEL_ACT_SILU ||
          ep->act == ACCEL_ACT_HARDSIGMOID || ep->act == ACCEL_ACT_HARDSWISH);
}

/* Square 3x3 and 5x5 depthwise kernels (one input channel per output channel) at stride 1 or
 * 2 in both directions, without dilation, padding inside the kernel (the copy's columns). */
static int dwc_supports(const conv_f32_call* c) {
  const conv_plan* P = c->P;
  const conv_geometry* g = P->g;
  return P->cg == 1 && P->mg == 1 && g->kernel_h == g->kernel_w &&
         (g->kernel_h == 3 || g->kernel_h == 5) && g->stride_h == g->stride_w &&
         (g->stride_h == 1 || g->stride_h == 2) && g->dilation_h == 1 && g->dilation_w == 1 &&
         g->pad_top >= 0 && g->pad_left >= 0 && g->pad_top < g->kernel_h &&
         g->pad_left < g->kernel_w && g->pixel_bytes == 0;
}

/* Where measured faster than the row kernel (docs/kernels.md): 5x5 kernels (25 taps
 * per output: the copy's cost is spread thin), and rows of at most 8 outputs, which leave
 * the row kernel's lanes half empty; 3x3 on wider rows stays on the row kernel (level on
 * 14x14, 4-12 % slower on 28x28 and larger: the transposes cost what the lanes gain). */
static int dwc_applies(const conv_f32_call* c) {
  const conv_geometry* g = c->P->g;
  return dwc_supports(c) && (g->kernel_h == 5 || g->out_w <= 8);
}

static accel_status dwc_run(const conv_f32_call* c) {
  const conv_plan* P = c->P;
  const conv_geometry* g = P->g;
  const int64_t ncb = (g->c + 15) / 16, OH = g->out_h, OW = g->out_w, st = g->stride_h;
  const int64_t K = g->kernel_h;
  /* copy columns: the padded input's, at least what the last output reads */
  int64_t pw = g->pad_left + g->w;
  if ((OW - 1) * st + K > pw) pw = (OW - 1) * st + K;
  /* band rows: the copy and output rows of a band in about DWC_SCRATCH bytes */
  int64_t band_rows = (DWC_SCRATCH / 64 - (K - st) * pw) / (st * pw + OW);
  if (band_rows < 1) band_rows = 1;
  if (band_rows > OH) band_rows = OH;

  int nth = c->nth;
  const int64_t planes = (int64_t)g->n * ncb;
  if (planes * OH * OW * 16 < 16384) nth = 1; /* a few microseconds: not worth a worker */
  if (nth > 1 && planes * ((OH + band_rows - 1) / band_rows) < 4 * nth) {
    /* more bands when there are too few items to share (at least 64 positions each) */
    int64_t bands = (4 * nth + planes - 1) / planes;
    const int64_t most = OH * OW / 64 > 1 ? OH * OW / 64 : 1;
    if (bands > most) bands = most;
    if (bands > OH) bands = OH;
    if ((OH + bands - 1) / bands < band_rows) band_rows = (OH + bands - 1) / bands;
  }
  const int64_t bands = (OH + band_rows - 1) / band_rows;
  const int64_t items = planes * bands;
  if (nth > items) nth = (int)items;

  dwc_job J = {.P = P, .in = c->in, .weights = c->weights, .out = c->out, .ep = c->ep,
               .ep_c16 = dwc_ep_c16(c->ep), .row = dwc_row(g), .ncb = ncb, .bands = bands, .band_rows = band_rows, .pw = pw,
               .copy_floats = 0, .scratch = {0}};
  J.copy_floats = (int64_t)round64((size_t)((band_rows - 1) * st + K) * pw * 16 * sizeof(float)) /
                  (int64_t)sizeof(float);
  const size_t bytes = (size_t)J.copy_floats * sizeof(float) +
                       (size_t)band_rows * OW * 16 * sizeof(float) +
                       (size_t)((band_rows - 1) * st + K) * g->w * sizeof(int32_t);
  for (int t = 0; t < nth; ++t)
    if ((J.scratch[t] = workspace_get(c->ws, t, bytes)) == NULL) return ACCEL_ERR_NO_MEMORY;
  pool_for(nth, items, dwc_item, &J);
  return ACCEL_OK;
}

const conv_f32_impl conv_f32_dw_c16_avx512_impl = {.name = "dw_c16_avx512", .applies = dwc_applies,
                                                   .supports = dwc_supports, .run = dwc_run,
                                                   .dot_tail = NULL};
#endif /* __AVX512F__ */
