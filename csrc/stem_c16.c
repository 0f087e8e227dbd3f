/* stem_c16.c - the CONV engine's image-layer convolution: NCHW input of a few channels (the
 * network's image, c <= 4), channel-blocked (C16) output, so the C16 layers after it need no
 * conversion (MLAS's NCHW -> NCHWc kernel does the same).
 *
 * Input [n][c][h][w] (c <= 4: an image's pixels, NVDLA's image-input formats hold at most 4
 * channels; with so few channels there is no channel block to vectorise over, and every layer
 * after it has 16 or more), output [n][k/16][oh][ow][16], k a multiple of 16. Any kernel size,
 * stride 1 or 2 each way, any padding, no dilation, one group.
 *
 * Loops: items are (image, strip of STEM_STRIP output rows); an item first copies the input
 * rows its outputs read into its own zero-padded buffer [c][rows][wp] (in L1/L2: a 224-wide
 * image's strip is 24-36 KB), then, per group of up to STEM_GROUP (2) blocks of 16 output
 * channels and per output row, tiles of NP positions x NB blocks (12 x 1, 14 x 2; 8 x 3 and
 * 6 x 4 for larger groups: up to 28 accumulators): per depth NB weight vector loads and NP
 * broadcast input pixels. The weights are packed per call, per group [depth][16 * blocks]
 * (18.8 KB for ResNet's 7x7 stem).
 * With a pool after it (conv_c16_stem_pool, ResNet's stem), each strip then pools the rows it
 * completes while they are in L2; with one thread the conv rows go to a ring in L2.
 *
 * Bits: as conv_f32 on the NCHW tensors where it sums every output in 32-deep blocks
 * (conv_f32_dot_tail == 0: its implicit GEMM, or the packed panels without a dot-product tail;
 * the image layers of MobileNet and ResNet take the implicit GEMM; a 1-channel input takes its
 * depthwise paths, another order, and is refused): depth d runs over (c, r, s); each block of 32
 * consecutive d (a last, shorter one when the depth is not a multiple of 32) is summed from zero
 * with one fmadd per d in order, and added to the running total (total + block); then the
 * one-pass epilogue as conv/f32_implicit_avx512.c's ep_vec. Padding taps do their fmadd with the
 * +0 of the padded buffer, as conv_f32's padded copy (so a non-finite weight gives its NaN
 * there). Results do not depend on the thread count or the strips. conv_f32 does not read an
 * image-input pixel format (pixel_bytes): it changes nothing here.
 */
#include <stdint.h>
#include <string.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "kernels.h"

#ifdef __AVX512F__

/* groups of 2 blocks (12 x 2 tiles): a group's weights (18.8 KB for ResNet's stem, not 37.6)
 * and an output row's input rows stay in L1 together (ResNet-50's f0.0 x0.986 against 4) */
enum { STEM_STRIP = 4, STEM_GROUP = 2, STEM_BLOCK = 32 /* conv_f32's SUM_BLOCK */ };

/* ---- the micro-kernel: NP positions of a row x NB blocks of 16 output channels ---- */

#define P14(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)
#define DECL(p) __m512 a##p##_0, a##p##_1, a##p##_2, a##p##_3;
#define ZERO1(p, q) if (NB > q) a##p##_##q = _mm512_setzero_ps();
#define ZERO(p) \
  if (NP > p) { ZERO1(p, 0) ZERO1(p, 1) ZERO1(p, 2) ZERO1(p, 3) }
#define FMA1(p, q) if (NB > q) a##p##_##q = _mm512_fmadd_ps(w##q, b, a##p##_##q);
#define FMA(p)                                          \
  if (NP > p) {                                         \
    const __m512 b = _mm512_set1_ps(ib[p * ST]);        \
    FMA1(p, 0) FMA1(p, 1) FMA1(p, 2) FMA1(p, 3)         \
  }
#define TADD1(p, q) \
  if (NB > q) a##p##_##q = _mm512_add_ps(_mm512_load_ps(total + (p * 4 + q) * 16), a##p##_##q);
#define TADD(p) \
  if (NP > p) { TADD1(p, 0) TADD1(p, 1) TADD1(p, 2) TADD1(p, 3) }
#define TST1(p, q) if (NB > q) _mm512_store_ps(total + (p * 4 + q) * 16, a##p##_##q);
#define TST(p) \
  if (NP > p) { TST1(p, 0) TST1(p, 1) TST1(p, 2) TST1(p, 3) }
#define OUT1(p, q)                                                                         \
  if (NB > q)                                                                              \
    _mm512_storeu_ps(out + q * os + p * 16,                                                \
                     e == NULL ? a##p##_##q                                                \
                               : c16_ep_apply(e, a##p##_##q, q,                                \
                                          e->operand != NULL ? e->operand + q * os + p * 16 \
                                                             : NULL));
#define OUT(p) \
  if (NP > p) { OUT1(p, 0) OUT1(p, 1) OUT1(p, 2) OUT1(p, 3) }

/* in: the tile's first position's tap (0, 0) in channel 0 of the padded buffer (positions ST
 * apart); off[d]: depth d's offset from it; w: the packed weights of the tile's first block
 * (rows ld apart); out: the tile's first output (blocks os apart); e: the epilogue or NULL. */
static inline __attribute__((always_inline)) void kbody(const int NP, const int NB, const int ST,
                                                        int64_t kd, const float* in,
                                                        const int64_t* off, const float* w,
                                                        int64_t ld, float* out, int64_t os,
                                                        const c16_ep* e) {
  float total[14 * 4 * 16] __attribute__((aligned(64))); /* the blocks' running sums */
  P14(DECL)
  P14(ZERO)
  /* Block 0 sums into the accumulators; each later block is stored first, summed from zero
   * and added to the stored total (conv_f32's uki_body) */
  for (int64_t k0 = 0; k0 < kd; k0 += STEM_BLOCK) {
    const int64_t k1 = kd - k0 < STEM_BLOCK ? kd : k0 + STEM_BLOCK;
    if (k0 > 0) {
      P14(TST)
      P14(ZERO)
    }
    for (int64_t d = k0; d < k1; ++d) {
      const float* ib = in + off[d];
      const float* wb = w + d * ld;
      const __m512 w0 = _mm512_load_ps(wb);
      const __m512 w1 = NB > 1 ? _mm512_load_ps(wb + 16) : w0;
      const __m512 w2 = NB > 2 ? _mm512_load_ps(wb + 32) : w0;
      const __m512 w3 = NB > 3 ? _mm512_load_ps(wb + 48) : w0;
      P14(FMA)
    }
    if (k0 > 0) { P14(TADD) }
  }
  P14(OUT)
}

typedef void (*kfn)(int64_t, const float*, const int64_t*, const float*, int64_t, float*,
                    int64_t, const c16_ep*);
#define KDEF(N, B, S)                                                                        \
  static void k##N##_##B##_##S(int64_t kd, const float* in, const int64_t* off,              \
                               const float* w, int64_t ld, float* out, int64_t os,           \
                               const c16_ep* e) {                                           \
    kbody(N, B, S, kd, in, off, w, ld, out, os, e);                                          \
  }
#define K6(B, S) KDEF(1, B, S) KDEF(2, B, S) KDEF(3, B, S) KDEF(4, B, S) KDEF(5, B, S) \
                 KDEF(6, B, S)
#define K8(B, S) K6(B, S) KDEF(7, B, S) KDEF(8, B, S)
#define K12(B, S) K8(B, S) KDEF(9, B, S) KDEF(10, B, S) KDEF(11, B, S) KDEF(12, B, S)
#define K14(B, S) K12(B, S) KDEF(13, B, S) KDEF(14, B, S)
K12(1, 1) K14(2, 1) K8(3, 1) K6(4, 1) K12(1, 2) K14(2, 2) K8(3, 2) K6(4, 2)
#define T6(B, S) 0, k1_##B##_##S, k2_##B##_##S, k3_##B##_##S, k4_##B##_##S, k5_##B##_##S, \
                 k6_##B##_##S
#define T8(B, S) T6(B, S), k7_##B##_##S, k8_##B##_##S
#define T12(B, S) T8(B, S), k9_##B##_##S, k10_##B##_##S, k11_##B##_##S, k12_##B##_##S
#define T14(B, S) T12(B, S), k13_##B##_##S, k14_##B##_##S
/* ktab[stride_w - 1][NB - 1][NP] */
static const kfn ktab[2][4][15] = {{{T12(1, 1)}, {T14(2, 1)}, {T8(3, 1)}, {T6(4, 1)}},
                                   {{T12(1, 2)}, {T14(2, 2)}, {T8(3, 2)}, {T6(4, 2)}}};
/* positions per tile of NB blocks; 2 blocks x 14 (28 accumulators, 2 weights, a broadcast:
 * 31 registers) split a 112-wide row into 8 full tiles (ResNet-50's f0.0 x0.974-0.996) */
static const int tile_max[5] = {0, 12, 14, 8, 6};

/* ---- the job ---- */

typedef struct stem_job {
  const conv_geometry* g;
  const float* in;
  const float* packed;  /* per group of STEM_GROUP blocks: [kd][16 * blocks] */
  const int64_t* off;   /* depth (c, r, s)'s offset in a strip buffer */
  float* bufs;          /* per participant, buf_floats apart: a strip's padded rows */
  float* out;
  const sdp_f32* ep;    /* one-pass, or NULL */
  int64_t rows, wp, buf_floats, ohw, strips;
  /* the pool over out (conv_c16_stem_pool), or NULL: pout its output, pooled[n * out_h] the
   * rows pooled in the items; per participant its last item and its run's first conv row */
  const pdp_geometry* pg;
  float* pout;
  uint8_t* pooled;
  int64_t* last;
  int64_t* run_first;
  int64_t ring; /* > 0: out is a ring of this many rows per block (conv_c16_stem_pool) */
} stem_job;

/* The input rows of output rows [y0, y1) of image img, zero-padded: buffer row i is padded
 * row y0 * stride_h + i, column j padded column j. */
static void fill_strip(const stem_job* J, int64_t img, int64_t y0, int64_t y1, float* buf) {
  const conv_geometry* g = J->g;
  const int64_t H = g->h, W = g->w, wp = J->wp;
  const int64_t rows = (y1 - y0 - 1) * g->stride_h + g->kernel_h;
  int64_t x0 = g->pad_left, x1 = W + g->pad_left; /* the padded columns that hold input */
  if (x1 > wp) x1 = wp;
  if (x0 > x1) x0 = x1;
  for (int64_t c = 0; c < g->c; ++c) {
    const float* src = J->in + (img * g->c + c) * H * W;
    for (int64_t i = 0; i < rows; ++i) {
      float* row = buf + (c * J->rows + i) * wp;
      const int64_t iy = y0 * g->stride_h + i - g->pad_top;
      if (iy < 0 || iy >= H || x0 == x1) {
        memset(row, 0, (size_t)wp * sizeof(float));
        continue;
      }
      memset(row, 0, (size_t)x0 * sizeof(float));
      memcpy(row + x0, src + iy * W + x0 - g->pad_left, (size_t)(x1 - x0) * sizeof(float));
      memset(row + x1, 0, (size_t)(wp - x1) * sizeof(float));
    }
  }
}

/* The pool rows whose last conv row is in [y0, y1), while the strip is in L2; a row that also
 * reads conv rows of a strip this participant did not just compute before is left to the pass
 * after the items (the bits do not change: each row is pdp_c16's). */
static void pool_strip(const stem_job* J, int64_t item, int participant, int64_t img,
                       int64_t y0, int64_t y1) {
  const pdp_geometry* pg = J->pg;
  const int64_t first_row =
      J->last[participant] == item - 1 && item % J->strips != 0 ? J->run_first[participant] : y0;
  J->last[participant] = item;
  J->run_first[participant] = first_row;
  if (y1 == J->g->out_h) y1 = INT64_MAX; /* the last strip takes rows that end in padding */
  for (int32_t oy = 0; oy < pg->out_h; ++oy) {
    int32_t f, lo, hi;
    pool_window(oy, pg->stride_h, pg->pad_top, pg->kernel_h, pg->h, &f, &lo, &hi);
    if (hi <= lo || f + hi - 1 < y0 || f + hi - 1 >= y1 || f + lo < first_row) continue;
    if (J->ring > 0) pdp_c16_ring_row(pg, J->out, (int32_t)J->ring, J->pout, img, oy);
    else pdp_c16_rows(pg, J->out, J->pout, img, oy, oy + 1);
    J->pooled[img * pg->out_h + oy] = 1;
  }
}

static void stem_item(void* ctx, int64_t item, int participant) {
  const stem_job* J = ctx;
  const conv_geometry* g = J->g;
  const int64_t k = g->k, ow = g->out_w, ohw = J->ohw;
  const int64_t os = J->ring > 0 ? J->ring * ow * 16 : ohw * 16;
  const int64_t kd = (int64_t)g->c * g->kernel_h * g->kernel_w;
  const int64_t img = item / J->strips, strip = item % J->strips;
  const int64_t y0 = strip * STEM_STRIP,
                y1 = y0 + STEM_STRIP < g->out_h ? y0 + STEM_STRIP : g->out_h;
  float* buf = J->bufs + participant * J->buf_floats;
  fill_strip(J, img, y0, y1, buf);
  const sdp_f32* ep = J->ep;
  for (int64_t grp = 0; grp * STEM_GROUP * 16 < k; ++grp) {
    const int64_t ch0 = grp * STEM_GROUP * 16;
    const int64_t nb = (k - ch0) / 16 < STEM_GROUP ? (k - ch0) / 16 : STEM_GROUP;
    const float* w = J->packed + ch0 * kd;
    float* out = J->ring > 0 ? J->out + ch0 * J->ring * ow : J->out + (img * k + ch0) * ohw;
    c16_ep e = {.scale = NULL, .shift = NULL, .operand = NULL, .act = ACCEL_ACT_NONE, .lo = 0.0f,
                .hi = 0.0f};
    const float* operand = NULL;
    if (ep != NULL) {
      e.scale = ep->scale != NULL ? ep->scale + ch0 : NULL;
      e.shift = ep->shift != NULL ? ep->shift + ch0 : NULL;
      e.act = ep->act;
      e.lo = ep->clip_min;
      e.hi = ep->clip_max;
      if (ep->ew_op == ACCEL_EW_ADD) operand = ep->ew_operand + (img * k + ch0) * ohw;
    }
    const int64_t tile = tile_max[nb], tiles = (ow + tile - 1) / tile;
    const kfn* kt = ktab[g->stride_w - 1][nb - 1];
    for (int64_t y = y0; y < y1; ++y) {
      const float* row = buf + (y - y0) * g->stride_h * J->wp;
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t x0 = ow * t / tiles, x1 = ow * (t + 1) / tiles, at = (y * ow + x0) * 16;
        e.operand = operand != NULL ? operand + at : NULL;
        const int64_t to = J->ring > 0 ? (y % J->ring * ow + x0) * 16 : at;
        kt[x1 - x0](kd, row + x0 * g->stride_w, J->off, w, nb * 16, out + to, os,
                    ep != NULL ? &e : NULL);
      }
    }
  }
  if (J->pg != NULL) pool_strip(J, item, participant, img, y0, y1);
}

static int kernel_fits(const conv_geometry* g) {
  return g->groups == 1 && g->dilation_h == 1 && g->dilation_w == 1 && g->stride_h >= 1 &&
         g->stride_h <= 2 && g->stride_w >= 1 && g->stride_w <= 2 && g->kernel_h >= 1 &&
         g->kernel_w >= 1 && g->c >= 1 && g->c <= 4 && g->k > 0 && g->k % 16 == 0 &&
         g->out_h > 0 && g->out_w > 0 && g->pad_top >= 0 && g->pad_left >= 0;
}

int conv_c16_stem_fits(const conv_geometry* g, const sdp_f32* epilogue) {
  return kernel_fits(g) && conv_f32_dot_tail(g) == 0 &&
         c16_epilogue_fits(epilogue);
}

static size_t round64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

static accel_status stem_run(const conv_geometry* g, const float* in, const float* weights,
                             float* out, const sdp_f32* epilogue, workspace* ws,
                             int32_t num_threads, const pdp_geometry* pg, float* pout) {
  if (g->n == 0) return ACCEL_OK;
  if (num_threads < 1) num_threads = 1;
  if (num_threads > WS_THREAD_SLOTS) num_threads = WS_THREAD_SLOTS;
  const int64_t kh = g->kernel_h, kw = g->kernel_w, kd = (int64_t)g->c * kh * kw, k = g->k;
  const int64_t strips = (g->out_h + STEM_STRIP - 1) / STEM_STRIP;
  const int64_t items = (int64_t)g->n * strips;
  const int nth = (int)(items < num_threads ? items : num_threads);
  const int64_t rows = (STEM_STRIP - 1) * (int64_t)g->stride_h + kh;
  const int64_t wp = (int64_t)(g->out_w - 1) * g->stride_w + kw;
  const int64_t buf_floats = ((g->c * rows * wp) + 15) & ~(int64_t)15;
  /* WS_C16_WEIGHTS: the packed weights, the depth offsets, the strip buffers */
  const size_t wbytes = round64((size_t)(k * kd) * sizeof(float));
  const size_t obytes = round64((size_t)kd * sizeof(int64_t));
  const size_t bbytes = (size_t)(nth * buf_floats) * sizeof(float);
  const size_t pbytes = pg != NULL ? round64((size_t)g->n * pg->out_h) : 0;
  const size_t sbytes = pg != NULL ? 2 * WS_THREAD_SLOTS * sizeof(int64_t) : 0;
  char* base = workspace_get(ws, WS_C16_WEIGHTS, wbytes + obytes + bbytes + pbytes + sbytes);
  if (base == NULL) return ACCEL_ERR_NO_MEMORY;
  float* packed = (float*)base;
  int64_t* off = (int64_t*)(base + wbytes);
  /* the 1x1 kernel's layout ([k/64][d][64]); not c16_pack_pointwise, which transposes
   * 16 x 16 blocks of a depth that is a multiple of 16 (here 27 or 147) */
  for (int64_t ch0 = 0; ch0 < k; ch0 += STEM_GROUP * 16) {
    const int64_t cols = k - ch0 < STEM_GROUP * 16 ? k - ch0 : STEM_GROUP * 16;
    float* p = packed + ch0 * kd;
    for (int64_t d = 0; d < kd; ++d)
      for (int64_t j = 0; j < cols; ++j) p[d * cols + j] = weights[(ch0 + j) * kd + d];
  }
  for (int64_t d = 0; d < kd; ++d) /* d = (c, r, s) */
    off[d] = (d / (kh * kw)) * rows * wp + (d / kw % kh) * wp + d % kw;
  uint8_t* pooled = (uint8_t*)(base + wbytes + obytes + bbytes);
  int64_t* last = (int64_t*)(base + wbytes + obytes + bbytes + pbytes);
  if (pg != NULL) {
    memset(pooled, 0, pbytes);
    for (int i = 0; i < WS_THREAD_SLOTS; ++i) last[i] = -2;
  }
  stem_job J = {.g = g, .in = in, .packed = packed, .off = off,
                .bufs = (float*)(base + wbytes + obytes), .out = out, .ep = epilogue, .rows = rows,
                .wp = wp, .buf_floats = buf_floats, .ohw = (int64_t)g->out_h * g->out_w,
                .strips = strips, .pg = pg, .pout = pout, .pooled = pooled, .last = last,
                .run_first = last + WS_THREAD_SLOTS, .ring = 0};
  /* One participant takes the strips in order: the conv rows the pool still reads (a strip
   * and the kernel_h - 1 rows before it) in a ring at the start of out, which stays in L2
   * (no 3.2 MB of scratch written and read back). Not with an element-wise operand (read in
   * out's layout) */
  if (pg != NULL && nth == 1 && pg->kernel_h <= PDP_C16_RING_MAX &&
      (epilogue == NULL || epilogue->ew_op != ACCEL_EW_ADD))
    J.ring = STEM_STRIP + pg->kernel_h - 1;
  pool_for(nth, items, stem_item, (void*)&J);
  if (pg != NULL) /* the rows left by the items (strips split between participants) */
    for (int64_t img = 0; img < g->n; ++img)
      for (int32_t oy = 0; oy < pg->out_h; ++oy)
        if (!pooled[img * pg->out_h + oy]) pdp_c16_rows(pg, out, pout, img, oy, oy + 1);
  return ACCEL_OK;
}

accel_status conv_c16_stem(const conv_geometry* g, const float* in, const float* weights,
                           float* out, const sdp_f32* epilogue, workspace* ws,
                           int32_t num_threads) {
  return stem_run(g, in, weights, out, epilogue, ws, num_threads, NULL, NULL);
}

accel_status conv_c16_stem_pool(const conv_geometry* g, const float* in, const float* weights,
                                float* conv_out, const pdp_geometry* pool, float* out,
                                const sdp_f32* epilogue, workspace* ws, int32_t num_threads) {
  return stem_run(g, in, weights, conv_out, epilogue, ws, num_threads, pool, out);
}

#endif /* __AVX512F__ (without it device.c runs no C16 kernel) */
