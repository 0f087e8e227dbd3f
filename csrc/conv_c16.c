/* conv_c16.c - the CONV engine's 1x1 convolution on channel-blocked (C16) fp32 activations.
 *
 * Input [n][c/16][hw][16], output [n][k/16][hw][16], weights [k][c] packed per call into
 * [k/64][c][64] (a last group of 1-3 blocks of 16 channels: [c][16 * blocks]) in the shared
 * workspace slot WS_C16_WEIGHTS (c16_pack_pointwise; pool_for items before the compute loop).
 *
 * Loops (the study examples/nchw16c_study/conv1x1.c, its mode 1, measured there): items
 * (image, strip of C16_STRIP positions, group of 4 blocks of 16 output channels), so that every
 * item writes its own outputs; in an item, depth chunks of C16_CHUNK channels, then tiles of 6
 * positions: a micro-kernel of NP (1..6) positions x NB (1..4) blocks of 16 output channels
 * (up to 24 accumulators), per input channel NB weight vector loads and NP broadcasts. The
 * running totals of the 32-deep blocks stay in the output tile between depth chunks; the
 * one-pass epilogue is applied in registers after the last chunk, before the store.
 *
 * Bits: as conv_f32 (its SUM_BLOCK): each output's depth is summed in blocks of 32 consecutive
 * input channels, each from zero with one fmadd per channel in channel order (a last block of
 * 16 when c % 32 == 16), the block sums added in order to a running total; then the epilogue
 * as conv_f32.c's ep_vec (x * scale, + shift, + operand, then ReLU as max(0, x) or the clip as
 * min(hi, max(lo, x))). The order is fixed by the geometry alone: results do not depend on the
 * thread count, the strip or the chunk (C16_CHUNK a multiple of 32).
 * Where conv_f32 sums dot products along the depth instead (its packed path's tail positions,
 * conv_f32_dot_tail: the last hw % 16 <= 8 positions of an image, every position at hw <= 8),
 * this kernel sums those positions in the same order (tail_chunk, tail_store); where conv_f32
 * runs OpenBLAS (hw == 1, n > 1) fits refuses the geometry, and the run is converted around.
 *
 * Stride 2 (ResNet's downsample): output (y, x) reads input (2y, 2x) only. conv_f32 copies
 * that one stride phase (imp_make_plan's nph = 1) or packs its columns, and sums each output
 * as above; so this kernel gathers the phase into C16 scratch (gather_item) and runs the
 * stride-1 loops over it, with conv_f32_dot_tail of the strided geometry.
 */
#include <stdint.h>
#include <string.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "kernels.h"


/* The weights' side of the kernel: 1x1, stride 1 or 2 (both ways), no padding, no dilation, one
 * group, multiples of 16 channels. */
static int pointwise_weights(const conv_geometry* g) {
  return g->kernel_h == 1 && g->kernel_w == 1 && g->stride_h == g->stride_w &&
         (g->stride_h == 1 || g->stride_h == 2) && g->pad_top == 0 && g->pad_left == 0 &&
         g->dilation_h == 1 && g->dilation_w == 1 && g->groups == 1 && g->c > 0 && g->k > 0 &&
         g->c % 16 == 0 && g->k % 16 == 0;
}

/* conv_c16_pack's buffer: this header, then c16_pack_pointwise's floats. */
enum { C16_PACK_HEADER = 64, C16_PACK_MAGIC = 0x36314331 /* "C16" */ };
typedef struct c16_pack_header {
  int32_t magic, k, c;
} c16_pack_header;

#ifdef __AVX512F__

#ifndef C16_STRIP
#define C16_STRIP 192 /* positions per item: 32 tiles of 6 */
#endif
#ifndef C16_CHUNK
#define C16_CHUNK 128 /* input channels per depth chunk: a multiple of 32 */
#endif
#define C16_TILE 6
#define C16_GROUP 4 /* blocks of 16 output channels per group */

/* ---- weight packing: [k][c] -> per group g of nb blocks, at g * 64 * c: [c][16 * nb] ---- */

/* Blocks of 16 output channels in group g. */
static inline int64_t group_blocks(int64_t k, int64_t g) {
  const int64_t left = k / 16 - g * C16_GROUP;
  return left < C16_GROUP ? left : C16_GROUP;
}

/* Group g's input channels [c0, c1) (multiples of 16). */
static void pack_part(int64_t k, int64_t c, const float* weights, float* packed, int64_t g,
                      int64_t c0, int64_t c1) {
  const int64_t nb = group_blocks(k, g), ld = nb * 16;
  float* dst = packed + g * C16_GROUP * 16 * c;
  for (int64_t ci = c0; ci < c1; ci += 16)
    for (int64_t qb = 0; qb < nb; ++qb) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = _mm512_loadu_ps(weights + (g * 64 + qb * 16 + i) * c + ci);
      transpose_16x16(r);
      for (int j = 0; j < 16; ++j) _mm512_storeu_ps(dst + (ci + j) * ld + qb * 16, r[j]);
    }
}

void c16_pack_pointwise(int64_t k, int64_t c, const float* weights, float* packed) {
  for (int64_t g = 0; g * C16_GROUP * 16 < k; ++g) pack_part(k, c, weights, packed, g, 0, c);
}

/* ---- the micro-kernel: NP positions x NB blocks of 16 output channels ---- */

#define DECL(p) __m512 a##p##0, a##p##1, a##p##2, a##p##3;
#define ZERO1(p, q) if (NB > q) a##p##q = _mm512_setzero_ps();
#define ZERO(p) \
  if (NP > p) { ZERO1(p, 0) ZERO1(p, 1) ZERO1(p, 2) ZERO1(p, 3) }
#define FMA1(p, q) if (NB > q) a##p##q = _mm512_fmadd_ps(w##q, b, a##p##q);
#define FMA(p)                                         \
  if (NP > p) {                                        \
    const __m512 b = _mm512_set1_ps(ib[p * 16 + j]);   \
    FMA1(p, 0) FMA1(p, 1) FMA1(p, 2) FMA1(p, 3)        \
  }
#define LDADD1(p, q) \
  if (NB > q) a##p##q = _mm512_add_ps(_mm512_loadu_ps(out + q * os + p * 16), a##p##q);
#define LDADD(p) \
  if (NP > p) { LDADD1(p, 0) LDADD1(p, 1) LDADD1(p, 2) LDADD1(p, 3) }
#define ST1(p, q) if (NB > q) _mm512_storeu_ps(out + q * os + p * 16, a##p##q);
#define ST(p) \
  if (NP > p) { ST1(p, 0) ST1(p, 1) ST1(p, 2) ST1(p, 3) }
#define EPI1(p, q)                                                                  \
  if (NB > q)                                                                       \
    _mm512_storeu_ps(out + q * os + p * 16,                                         \
                     c16_ep_apply(e, a##p##q, q,                                    \
                                  e->operand != NULL ? e->operand + q * os + p * 16 \
                                                     : NULL));
#define EPI(p) \
  if (NP > p) { EPI1(p, 0) EPI1(p, 1) EPI1(p, 2) EPI1(p, 3) }
#define ALLP(X) X(0) X(1) X(2) X(3) X(4) X(5)

/* One 16-channel half h of a 32-deep block: per channel NB weight vectors, NP broadcasts. */
#define C16_HALF(h)                                                                   \
  {                                                                                   \
    const float* ib = in + (c0 / 16 + h) * cs;                                        \
    const float* wb = w + (c0 + 16 * h) * (NB * 16);                                  \
    _Pragma("GCC unroll 16") for (int j = 0; j < 16; ++j) {                           \
      const __m512 w0 = _mm512_load_ps(wb + j * (NB * 16));                           \
      const __m512 w1 = NB > 1 ? _mm512_load_ps(wb + j * (NB * 16) + 16) : w0;        \
      const __m512 w2 = NB > 2 ? _mm512_load_ps(wb + j * (NB * 16) + 32) : w0;        \
      const __m512 w3 = NB > 3 ? _mm512_load_ps(wb + j * (NB * 16) + 48) : w0;        \
      ALLP(FMA)                                                                       \
    }                                                                                 \
  }

/* cd input channels (a multiple of 16; its 32-deep blocks start at multiples of 32 of the whole
 * depth) from in (channel block stride cs, positions 16 apart), weights w ([cd][NB * 16]) into
 * out (block stride os): first: no running total yet; last: the epilogue (e, or none). */
static inline __attribute__((always_inline)) void kbody(const int NP, const int NB, int64_t cd,
                                                        const float* in, int64_t cs,
                                                        const float* w, float* out, int64_t os,
                                                        int first, int last, const c16_ep* e) {
  ALLP(DECL)
  for (int64_t c0 = 0; c0 < cd; c0 += 32) {
    ALLP(ZERO)
    if (cd - c0 >= 32) { /* two 16-channel halves, unrolled (a runtime count cost 25 %) */
      C16_HALF(0)
      C16_HALF(1)
    } else {
      C16_HALF(0)
    }
    if (!(first && c0 == 0)) { ALLP(LDADD) }
    if (last && c0 + 32 >= cd) {
      if (e != NULL) {
        ALLP(EPI)
      } else {
        ALLP(ST)
      }
    } else {
      ALLP(ST)
    }
  }
}

typedef void (*kfn)(int64_t, const float*, int64_t, const float*, float*, int64_t, int, int,
                    const c16_ep*);
#define KDEF(N, B)                                                                            \
  static void k##N##_##B(int64_t cd, const float* in, int64_t cs, const float* w, float* out, \
                         int64_t os, int first, int last, const c16_ep* e) {                  \
    kbody(N, B, cd, in, cs, w, out, os, first, last, e);                                      \
  }
#define KROW(B) KDEF(1, B) KDEF(2, B) KDEF(3, B) KDEF(4, B) KDEF(5, B) KDEF(6, B)
KROW(1)
KROW(2)
KROW(3)
KROW(4)
#define KTAB(B) {0, k1_##B, k2_##B, k3_##B, k4_##B, k5_##B, k6_##B}
static const kfn ktab[5][7] = {{0}, KTAB(1), KTAB(2), KTAB(3), KTAB(4)};

/* The tail (conv_f32_dot_tail: an image's last T <= 8 positions) summed as conv_f32's packed
 * path sums it (dot_body): per output channel and position, 16 lane sums along the depth
 * (lane l: input channels l, l + 16, ..., one fmadd each, in order), then
 * _mm512_reduce_add_ps. One depth chunk's part, while its packed weights are in L1: a 16x16
 * transpose turns 16 input channels' vectors of block q into 16 output channels' rows. lanes:
 * [T][nb][16 channels][16 lanes], carried from chunk to chunk. */
static void tail_chunk(int64_t T, int64_t nb, int64_t c0, int64_t cd, const float* w,
                       const float* in, int64_t cs, float* lanes) {
  for (int64_t q = 0; q < nb; ++q)
    for (int64_t sub = c0; sub < c0 + cd; sub += 16) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_load_ps(w + (sub + i) * nb * 16 + q * 16);
      transpose_16x16(r); /* r[m]: output channel q * 16 + m, channels sub .. sub + 15 */
      for (int64_t t = 0; t < T; ++t) {
        const __m512 x = _mm512_loadu_ps(in + sub / 16 * cs + t * 16);
        float* l = lanes + ((t * nb + q) * 16) * 16;
        for (int m = 0; m < 16; ++m)
          _mm512_store_ps(l + m * 16, _mm512_fmadd_ps(r[m], x, _mm512_load_ps(l + m * 16)));
      }
    }
}

/* The tail's outputs from its lane sums, with the epilogue as EPI1. */
static void tail_store(int64_t T, int64_t nb, const float* lanes, float* out, int64_t os,
                       const c16_ep* e, const float* operand) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t q = 0; q < nb; ++q) {
      float sums[16] __attribute__((aligned(64)));
      const float* l = lanes + ((t * nb + q) * 16) * 16;
      for (int m = 0; m < 16; ++m) sums[m] = _mm512_reduce_add_ps(_mm512_load_ps(l + m * 16));
      __m512 v = _mm512_load_ps(sums);
      if (e != NULL)
        v = c16_ep_apply(e, v, q, operand != NULL ? operand + q * os + t * 16 : NULL);
      _mm512_storeu_ps(out + q * os + t * 16, v);
    }
}

/* ---- the loops ---- */

typedef struct c16_job {
  const conv_geometry* g;
  const float* in; /* the input, or at stride 2 its gathered phase: [n][c/16][hw][16] */
  const float* weights;
  float* packed;
  float* out;
  const sdp_f32* ep; /* one-pass, or NULL */
  int64_t hw, groups, strips, pack_chunks; /* hw: output positions per image */
  int64_t tail; /* an image's last positions, summed as conv_f32's dot products */
  const float* strided; /* stride 2: the input whose phase `phase` (then `in`) gathers */
  float* phase;
  int64_t pack_items;   /* the first items of the preparing loop pack, the rest gather */
} c16_job;

static void pack_item(const c16_job* J, int64_t item) {
  const int64_t c = J->g->c, g = item / J->pack_chunks, ch = item % J->pack_chunks;
  const int64_t c0 = ch * C16_CHUNK, c1 = c0 + C16_CHUNK < c ? c0 + C16_CHUNK : c;
  pack_part(J->g->k, c, J->weights, J->packed, g, c0, c1);
}

/* Stride 2: input positions (2y, 2x) of one image's block of 16 channels, in output order. */
static void gather_item(const c16_job* J, int64_t plane) {
  const conv_geometry* g = J->g;
  const int64_t w = g->w, ow = g->out_w;
  const float* src = J->strided + plane * (int64_t)g->h * w * 16;
  float* dst = J->phase + plane * J->hw * 16;
  for (int64_t y = 0; y < g->out_h; ++y) {
    const float* row = src + 2 * y * w * 16;
    for (int64_t x = 0; x < ow; ++x)
      _mm512_store_ps(dst + (y * ow + x) * 16, _mm512_loadu_ps(row + 2 * x * 16));
  }
}

/* Item < pack_items: a part of the packed weights; past it, a gathered plane. */
static void prepare_item(void* ctx, int64_t item, int participant) {
  const c16_job* J = ctx;
  (void)participant;
  if (item < J->pack_items) {
    pack_item(J, item);
  } else {
    gather_item(J, item - J->pack_items);
  }
}

/* Item = (image, strip, group), group innermost. */
static void conv_item(void* ctx, int64_t item, int participant) {
  const c16_job* J = ctx;
  (void)participant;
  const conv_geometry* g = J->g;
  const int64_t c = g->c, k = g->k, hw = J->hw, os = hw * 16;
  const int64_t grp = item % J->groups, strip = (item / J->groups) % J->strips,
                img = item / (J->groups * J->strips);
  const int64_t nb = group_blocks(k, grp);
  /* the last strip runs to the image's end: the tail rides with it (one pass over weights) */
  const int64_t s0 = strip * C16_STRIP, s1 = strip == J->strips - 1 ? hw : s0 + C16_STRIP;
  const int64_t b1 = s1 < hw - J->tail ? s1 : hw - J->tail; /* the blocks' positions end */
  const float* in = J->in + img * c * hw;
  float* out = J->out + (img * k + grp * 64) * hw;
  const float* w = J->packed + grp * 64 * c;
  const kfn* kt = ktab[nb];
  const sdp_f32* ep = J->ep;
  c16_ep e = {NULL, NULL, NULL, ACCEL_ACT_NONE, 0.0f, 0.0f};
  if (ep != NULL) {
    e.scale = ep->scale != NULL ? ep->scale + grp * 64 : NULL;
    e.shift = ep->shift != NULL ? ep->shift + grp * 64 : NULL;
    e.act = ep->act;
    e.lo = ep->clip_min;
    e.hi = ep->clip_max;
  }
  const float* operand = ep != NULL && ep->ew_op == ACCEL_EW_ADD
                             ? ep->ew_operand + (img * k + grp * 64) * hw
                             : NULL;
  const int64_t t0 = b1 > s0 ? b1 : s0, tail = s1 - t0; /* the tail, in the last strip */
  float lanes[8 * C16_GROUP * 16 * 16] __attribute__((aligned(64)));
  if (tail > 0) memset(lanes, 0, (size_t)(tail * nb * 16 * 16) * sizeof(float));
  for (int64_t c0 = 0; c0 < c; c0 += C16_CHUNK) {
    const int64_t cd = c - c0 < C16_CHUNK ? c - c0 : C16_CHUNK;
    const int first = c0 == 0, last = c0 + cd == c;
    for (int64_t p = s0; p < b1; p += C16_TILE) {
      const int np = b1 - p < C16_TILE ? (int)(b1 - p) : C16_TILE;
      if (operand != NULL) e.operand = operand + p * 16;
      kt[np](cd, in + (c0 / 16) * os + p * 16, os, w + c0 * nb * 16, out + p * 16, os, first,
             last, ep != NULL ? &e : NULL);
    }
    if (tail > 0) tail_chunk(tail, nb, c0, cd, w, in + t0 * 16, os, lanes);
  }
  if (tail > 0)
    tail_store(tail, nb, lanes, out + t0 * 16, os, ep != NULL ? &e : NULL,
               operand != NULL ? operand + t0 * 16 : NULL);
}

int conv_c16_pointwise_fits(const conv_geometry* g, const sdp_f32* epilogue) {
  /* stride 2: every output reads an input position (2y, 2x) inside the image */
  const int spatial = g->stride_h == 1
                          ? g->out_h == g->h && g->out_w == g->w
                          : g->out_h <= (g->h + 1) / 2 && g->out_w <= (g->w + 1) / 2;
  return conv_f32_dot_tail(g) >= 0 && pointwise_weights(g) && spatial && g->pixel_bytes == 0 &&
         c16_epilogue_fits(epilogue);
}

accel_status conv_c16_pointwise(const conv_geometry* g, const float* in, const float* weights,
                                const void* prepacked, float* out, const sdp_f32* epilogue,
                                workspace* ws, int32_t num_threads) {
  const int64_t hw = (int64_t)g->out_h * g->out_w;
  if (hw == 0 || g->n == 0) return ACCEL_OK;
  float* packed = prepacked != NULL
                      ? (float*)((const char*)prepacked + C16_PACK_HEADER)
                      : workspace_get(ws, WS_C16_WEIGHTS, (size_t)g->k * g->c * sizeof(float));
  if (packed == NULL) return ACCEL_ERR_NO_MEMORY;
  const int strided = g->stride_h == 2;
  /* slot 0: no participant of this kernel uses its own */
  float* phase =
      strided ? workspace_get(ws, 0, (size_t)((int64_t)g->n * g->c * hw) * sizeof(float)) : NULL;
  if (strided && phase == NULL) return ACCEL_ERR_NO_MEMORY;
  if (num_threads < 1) num_threads = 1;
  if (num_threads > WS_THREAD_SLOTS) num_threads = WS_THREAD_SLOTS;
  const int64_t tail = conv_f32_dot_tail(g), blocked = hw - tail;
  c16_job J = {g, strided ? phase : in, weights, packed, out, epilogue, hw,
               (g->k + C16_GROUP * 16 - 1) / (C16_GROUP * 16),
               blocked > C16_STRIP ? (blocked + C16_STRIP - 1) / C16_STRIP : 1,
               (g->c + C16_CHUNK - 1) / C16_CHUNK, tail, strided ? in : NULL, phase, 0};
  J.pack_items = prepacked != NULL ? 0 : J.groups * J.pack_chunks;
  const int64_t prepare = J.pack_items + (strided ? (int64_t)g->n * (g->c / 16) : 0);
  if (prepare > 0)
    pool_for(prepare < num_threads ? (int)prepare : num_threads, prepare, prepare_item, &J);
  const int64_t items = (int64_t)g->n * J.strips * J.groups;
  pool_for(items < num_threads ? (int)items : num_threads, items, conv_item, &J);
  return ACCEL_OK;
}

#else /* no AVX-512: no C16 kernel (the run is converted around) */

void c16_pack_pointwise(int64_t k, int64_t c, const float* weights, float* packed) {
  for (int64_t g = 0; g * 64 < k; ++g) {
    const int64_t nb = k / 16 - g * 4 < 4 ? k / 16 - g * 4 : 4;
    for (int64_t ci = 0; ci < c; ++ci)
      for (int64_t q = 0; q < nb * 16; ++q)
        packed[g * 64 * c + ci * nb * 16 + q] = weights[(g * 64 + q) * c + ci];
  }
}

int conv_c16_pointwise_fits(const conv_geometry* g, const sdp_f32* epilogue) {
  (void)g;
  (void)epilogue;
  return 0;
}

accel_status conv_c16_pointwise(const conv_geometry* g, const float* in, const float* weights,
                                const void* prepacked, float* out, const sdp_f32* epilogue,
                                workspace* ws, int32_t num_threads) {
  (void)g, (void)in, (void)weights, (void)prepacked, (void)out, (void)epilogue, (void)ws,
      (void)num_threads;
  return ACCEL_ERR_UNSUPPORTED; /* never called: fits is 0 */
}

#endif

int conv_c16_packs(const conv_geometry* g) { return pointwise_weights(g); }

size_t conv_c16_packed_bytes(const conv_geometry* g) {
  return C16_PACK_HEADER + (size_t)g->k * g->c * sizeof(float);
}

void conv_c16_pack(const conv_geometry* g, const float* weights, void* packed) {
  const c16_pack_header h = {C16_PACK_MAGIC, g->k, g->c};
  memset(packed, 0, C16_PACK_HEADER);
  memcpy(packed, &h, sizeof h);
  c16_pack_pointwise(g->k, g->c, weights, (float*)((char*)packed + C16_PACK_HEADER));
}

int conv_c16_packed_matches(const conv_geometry* g, const void* packed) {
  c16_pack_header h;
  memcpy(&h, packed, sizeof h);
  return h.magic == C16_PACK_MAGIC && h.k == g->k && h.c == g->c;
}
