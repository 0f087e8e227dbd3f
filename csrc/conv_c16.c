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
 * (up to 24 accumulators), per input channel NB weight vector loads and NP broadcasts; the
 * full tile, 6 x 4, in inline assembly (k6_4_asm: GCC's code for it ran at 82 % of the FMA
 * peak hot in L1, this at 88 %; 3-7 % of each 1x1 layer of ResNet-50). The running totals of
 * the 32-deep blocks stay in the output tile between depth chunks; the one-pass epilogue is
 * applied in registers after the last chunk, before the store. An image's first strip (of 16
 * tiles or more) prefetches the next depth chunk's weights (or the next group's first) into
 * L2 while it runs a chunk's tiles: in a network a deep layer's weights come cold, read once
 * on a 14x14 plane.
 *
 * Bits: as conv_f32 (the contract: conv/f32_order.h): each output's depth is summed in blocks of
 * 32 (SUM_BLOCK) consecutive input channels, each from zero with one fmadd per channel in channel
 * order (a last block of 16 when c % 32 == 16), the block sums added in order to a running total;
 * then the epilogue as conv/f32_implicit_avx512.c's ep_vec (x * scale, + shift, + operand, then
 * ReLU as max(0, x) or the clip as min(hi, max(lo, x))). The order is fixed by the geometry
 * alone: results do not depend on the thread count, the strip or the chunk (C16_CHUNK a multiple
 * of 32).
 * Where conv_f32 sums dot products along the depth instead (its packed path's tail positions,
 * conv_f32_dot_tail: the last hw % 16 <= 8 positions of an image, every position at hw <= 8),
 * this kernel sums those positions in the same order (tail_chunk, tail_store: the lane sums
 * kept transposed, so that no weights need transposing); where conv_f32 runs OpenBLAS
 * (hw == 1, n > 1) fits refuses the geometry, and the run is converted around.
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

/* The 6 x 4 tile (every full tile of a group of 4 blocks) in assembly. GCC's code for kbody
 * (6, 4) ran a 32-deep block at 82 % of the FMA peak hot in L1 (its first fmadd of a block
 * copied each weight vector for a zero accumulator, and it kept 24 output addresses on the
 * stack); this order (MLAS's: 6 broadcasts, then per block of 16 output channels one weight
 * load and 6 fmadds; accumulators zeroed by vpxord) ran it at 88 %. The arithmetic is
 * kbody's: per output, the block's channels one fmadd each from +0 in channel order
 * (vfmadd231ps acc, w, b is _mm512_fmadd_ps(w, b, acc)), then one add to the running total.
 * Accumulator of position p, block q: zmm(4p + q); weight vector zmm24; broadcasts zmm26-31. */
#define K64_B6(P, j)                                                                           \
  "vbroadcastss 4*" #j "(%[" P "]), %%zmm26\n\t"                                             \
  "vbroadcastss 4*" #j "+64(%[" P "]), %%zmm27\n\t"                                          \
  "vbroadcastss 4*" #j "+128(%[" P "]), %%zmm28\n\t"                                         \
  "vbroadcastss 4*" #j "+192(%[" P "]), %%zmm29\n\t"                                         \
  "vbroadcastss 4*" #j "+256(%[" P "]), %%zmm30\n\t"                                         \
  "vbroadcastss 4*" #j "+320(%[" P "]), %%zmm31\n\t"
#define K64_Q(h, j, q, a0, a1, a2, a3, a4, a5)                                                 \
  "vmovaps 256*" #h "+256*" #j "+64*" #q "(%[w]), %%zmm24\n\t"                                \
  "vfmadd231ps %%zmm26, %%zmm24, %%zmm" #a0 "\n\t"                                           \
  "vfmadd231ps %%zmm27, %%zmm24, %%zmm" #a1 "\n\t"                                           \
  "vfmadd231ps %%zmm28, %%zmm24, %%zmm" #a2 "\n\t"                                           \
  "vfmadd231ps %%zmm29, %%zmm24, %%zmm" #a3 "\n\t"                                           \
  "vfmadd231ps %%zmm30, %%zmm24, %%zmm" #a4 "\n\t"                                           \
  "vfmadd231ps %%zmm31, %%zmm24, %%zmm" #a5 "\n\t"
/* input channel j of the half at P (its first weight row h of the block) */
#define K64_CH(P, h, j)                                                                        \
  K64_B6(P, j) K64_Q(h, j, 0, 0, 4, 8, 12, 16, 20) K64_Q(h, j, 1, 1, 5, 9, 13, 17, 21)         \
  K64_Q(h, j, 2, 2, 6, 10, 14, 18, 22) K64_Q(h, j, 3, 3, 7, 11, 15, 19, 23)
#define K64_HALF(P, h)                                                                         \
  K64_CH(P, h, 0) K64_CH(P, h, 1) K64_CH(P, h, 2) K64_CH(P, h, 3) K64_CH(P, h, 4)              \
  K64_CH(P, h, 5) K64_CH(P, h, 6) K64_CH(P, h, 7) K64_CH(P, h, 8) K64_CH(P, h, 9)              \
  K64_CH(P, h, 10) K64_CH(P, h, 11) K64_CH(P, h, 12) K64_CH(P, h, 13) K64_CH(P, h, 14)         \
  K64_CH(P, h, 15)
#define K64_Z(r) "vpxord %%zmm" #r ", %%zmm" #r ", %%zmm" #r "\n\t"
#define K64_Z4(a, b, c, d) K64_Z(a) K64_Z(b) K64_Z(c) K64_Z(d)
/* position p's 4 outputs: oq + 64 * p bytes */
#define K64_ADD1(q, p, r) "vaddps 64*" #p "(%[o" #q "]), %%zmm" #r ", %%zmm" #r "\n\t"
#define K64_ST1(q, p, r) "vmovups %%zmm" #r ", 64*" #p "(%[o" #q "])\n\t"
#define K64_P(X, p, r0, r1, r2, r3) X(0, p, r0) X(1, p, r1) X(2, p, r2) X(3, p, r3)
#define K64_ALL(X)                                                                             \
  K64_P(X, 0, 0, 1, 2, 3) K64_P(X, 1, 4, 5, 6, 7) K64_P(X, 2, 8, 9, 10, 11)                    \
  K64_P(X, 3, 12, 13, 14, 15) K64_P(X, 4, 16, 17, 18, 19) K64_P(X, 5, 20, 21, 22, 23)

/* One 32-deep block: i0, i1: its two 16-channel halves' inputs (the tile's first position);
 * w: its 32 weight rows of 64; o0..o3: the tile's outputs in blocks 0..3, their running
 * totals (add != 0: the block sum is added to them) or nothing yet (add == 0). */
static inline __attribute__((always_inline)) void k64_block(const float* i0, const float* i1,
                                                            const float* w, float* o0,
                                                            float* o1, float* o2, float* o3,
                                                            int64_t add) {
  __asm__ volatile(
      K64_Z4(0, 1, 2, 3) K64_Z4(4, 5, 6, 7) K64_Z4(8, 9, 10, 11) K64_Z4(12, 13, 14, 15)
      K64_Z4(16, 17, 18, 19) K64_Z4(20, 21, 22, 23)
      K64_HALF("i0", 0) K64_HALF("i1", 16)
      "test %[add], %[add]\n\t"
      "jz 1f\n\t"
      K64_ALL(K64_ADD1)
      "1:\n\t"
      K64_ALL(K64_ST1)
      :
      : [i0] "r"(i0), [i1] "r"(i1), [w] "r"(w), [o0] "r"(o0), [o1] "r"(o1), [o2] "r"(o2),
        [o3] "r"(o3), [add] "r"(add)
      : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
        "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16",
        "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm26",
        "xmm27", "xmm28", "xmm29", "xmm30", "xmm31");
}

/* k64_block's sums of the last 32-deep block of outputs with an epilogue are left in zmm0-23
 * (register variables as the outputs of the assembly), for the epilogue in registers. */
#define K64_OUT(r) "=v"(a##r)
#define K64_REG(r) register __m512 a##r __asm__("zmm" #r);

/* kbody (6, 4) through k64_block where the depth is whole 32-deep blocks. */
static void k6_4_asm(int64_t cd, const float* in, int64_t cs, const float* w, float* out,
                     int64_t os, int first, int last, const c16_ep* e) {
  float *o1 = out + os, *o2 = out + 2 * os, *o3 = out + 3 * os;
  const int64_t cn = last && e != NULL ? cd - 32 : cd; /* the blocks stored by the assembly */
  for (int64_t c0 = 0; c0 < cn; c0 += 32) {
    const float* i0 = in + (c0 / 16) * cs;
    k64_block(i0, i0 + cs, w + c0 * 64, out, o1, o2, o3, !(first && c0 == 0));
  }
  if (cn == cd) return;
  const float* i0 = in + (cn / 16) * cs;
  const float* i1 = i0 + cs;
  const float* wb = w + cn * 64;
  K64_REG(0) K64_REG(1) K64_REG(2) K64_REG(3) K64_REG(4) K64_REG(5) K64_REG(6) K64_REG(7)
  K64_REG(8) K64_REG(9) K64_REG(10) K64_REG(11) K64_REG(12) K64_REG(13) K64_REG(14)
  K64_REG(15) K64_REG(16) K64_REG(17) K64_REG(18) K64_REG(19) K64_REG(20) K64_REG(21)
  K64_REG(22) K64_REG(23)
  __asm__ volatile(
      K64_Z4(0, 1, 2, 3) K64_Z4(4, 5, 6, 7) K64_Z4(8, 9, 10, 11) K64_Z4(12, 13, 14, 15)
      K64_Z4(16, 17, 18, 19) K64_Z4(20, 21, 22, 23)
      K64_HALF("i0", 0) K64_HALF("i1", 16)
      : K64_OUT(0), K64_OUT(1), K64_OUT(2), K64_OUT(3), K64_OUT(4), K64_OUT(5), K64_OUT(6),
        K64_OUT(7), K64_OUT(8), K64_OUT(9), K64_OUT(10), K64_OUT(11), K64_OUT(12),
        K64_OUT(13), K64_OUT(14), K64_OUT(15), K64_OUT(16), K64_OUT(17), K64_OUT(18),
        K64_OUT(19), K64_OUT(20), K64_OUT(21), K64_OUT(22), K64_OUT(23)
      : [i0] "r"(i0), [i1] "r"(i1), [w] "r"(wb)
      : "memory", "xmm24", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31");
  /* The epilogue as c16_epi of a compile-time kind (c16_ep_apply's run-time tests, repeated
   * for every vector because a store may alias e, cost 12 % of 64 -> 256 on 56x56): its
   * steps, order and bits are c16_ep_apply's (a missing scale multiplies by 1, a missing
   * shift adds -0.0). */
  const int add = !(first && cn == 0);
  const int ek = 1 + (e->operand != NULL) * 3 +
                 (e->act == ACCEL_ACT_RELU ? 1 : e->act == ACCEL_ACT_CLIP ? 2 : 0);
  __m512 sc[4], sh[4];
  for (int q = 0; q < 4; ++q) {
    sc[q] = e->scale != NULL ? _mm512_loadu_ps(e->scale + q * 16) : _mm512_set1_ps(1.0f);
    sh[q] = e->shift != NULL ? _mm512_loadu_ps(e->shift + q * 16) : _mm512_set1_ps(-0.0f);
  }
  const __m512 lo = _mm512_set1_ps(e->lo), hi = _mm512_set1_ps(e->hi);
  const float* opd = e->operand;
#define K64_E(EK, p, q, r)                                                                     \
  {                                                                                            \
    __m512 t = a##r;                                                                           \
    if (add) t = _mm512_add_ps(_mm512_loadu_ps(out + q * os + p * 16), t);                     \
    _mm512_storeu_ps(out + q * os + p * 16,                                                    \
                     c16_epi(EK, t, sc[q], sh[q], lo, hi, opd + q * os + p * 16));             \
  }
#define K64_EP(EK, p, r0, r1, r2, r3)                                                          \
  K64_E(EK, p, 0, r0) K64_E(EK, p, 1, r1) K64_E(EK, p, 2, r2) K64_E(EK, p, 3, r3)
#define K64_EPI(EK)                                                                            \
  case EK:                                                                                     \
    K64_EP(EK, 0, 0, 1, 2, 3) K64_EP(EK, 1, 4, 5, 6, 7) K64_EP(EK, 2, 8, 9, 10, 11)            \
    K64_EP(EK, 3, 12, 13, 14, 15) K64_EP(EK, 4, 16, 17, 18, 19)                                \
    K64_EP(EK, 5, 20, 21, 22, 23) break;
  switch (ek) {
    K64_EPI(1) K64_EPI(2) K64_EPI(3) K64_EPI(4) K64_EPI(5) K64_EPI(6)
  }
}

#define KDEF(N, B)                                                                            \
  static void k##N##_##B(int64_t cd, const float* in, int64_t cs, const float* w, float* out, \
                         int64_t os, int first, int last, const c16_ep* e) {                  \
    if (N == 6 && B == 4 && cd % 32 == 0) {                                                   \
      k6_4_asm(cd, in, cs, w, out, os, first, last, e);                                       \
      return;                                                                                 \
    }                                                                                         \
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
 * _mm512_reduce_add_ps. The lane sums are kept transposed, a vector per lane across 16 output
 * channels, so that a packed weight row (16 output channels of one input channel) is the
 * vector to multiply by the broadcast input: no transpose. (Transposing the weights per 16x16
 * block instead, with the lane sums in memory, cost 7 % of 1024 -> 256 on 14x14 for its 4
 * tail positions of 196.) One depth chunk's part, while its packed weights are in L1; lanes:
 * [T][nb][16 lanes][16 channels], carried from chunk to chunk, here in registers: per position
 * TP (1 or 2) and half of the lanes, 8 * TP accumulators. */
static inline __attribute__((always_inline)) void tail_lanes(const int TP, int64_t nb, int64_t q,
                                                             int64_t c0, int64_t cd,
                                                             const float* w, const float* x,
                                                             int64_t cs, float* lq) {
  const int64_t ld = nb * 16, ls = nb * 256; /* lanes' stride from one position to the next */
  for (int lh = 0; lh < 16; lh += 8) {
    __m512 a[8], b[8];
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      a[l] = _mm512_load_ps(lq + (lh + l) * 16);
      b[l] = TP > 1 ? _mm512_load_ps(lq + ls + (lh + l) * 16) : a[l];
    }
    for (int64_t sub = c0; sub < c0 + cd; sub += 16) {
      const float* wb = w + (sub + lh) * ld + q * 16;
      const float* xb = x + sub / 16 * cs + lh;
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) {
        const __m512 wv = _mm512_load_ps(wb + l * ld);
        a[l] = _mm512_fmadd_ps(wv, _mm512_set1_ps(xb[l]), a[l]);
        if (TP > 1) b[l] = _mm512_fmadd_ps(wv, _mm512_set1_ps(xb[16 + l]), b[l]);
      }
    }
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      _mm512_store_ps(lq + (lh + l) * 16, a[l]);
      if (TP > 1) _mm512_store_ps(lq + ls + (lh + l) * 16, b[l]);
    }
  }
}

static void tail_chunk(int64_t T, int64_t nb, int64_t c0, int64_t cd, const float* w,
                       const float* in, int64_t cs, float* lanes) {
  for (int64_t q = 0; q < nb; ++q) {
    int64_t t = 0;
    for (; t + 2 <= T; t += 2)
      tail_lanes(2, nb, q, c0, cd, w, in + t * 16, cs, lanes + (t * nb + q) * 256);
    if (t < T) tail_lanes(1, nb, q, c0, cd, w, in + t * 16, cs, lanes + (t * nb + q) * 256);
  }
}

/* The tail's outputs from its lane sums, with the epilogue as EPI1. */
static void tail_store(int64_t T, int64_t nb, const float* lanes, float* out, int64_t os,
                       const c16_ep* e, const float* operand) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t q = 0; q < nb; ++q) {
      const float* lq = lanes + ((t * nb + q) * 16) * 16;
      __m512 lane[16];
#pragma GCC unroll 16
      for (int l = 0; l < 16; ++l) lane[l] = _mm512_load_ps(lq + l * 16);
      __m512 v = c16_lanes_reduced(lane);
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
  c16_ep e = {.scale = NULL, .shift = NULL, .operand = NULL, .act = ACCEL_ACT_NONE, .lo = 0.0f,
              .hi = 0.0f};
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
    /* An image's first strip reads each group's weights first: the next chunk's (past the
     * last, the next group's first chunk, which follows it in `packed`) are prefetched into L2,
     * spread over this chunk's tiles. In a network the weights of a deep layer (1-4 MB) come
     * from L3 or memory, and a 14x14 plane is one strip, so every chunk's first tile waited
     * for them (measured: docs/kernels.md, conv_c16.c).
     * Into L2, not L1: the chunk being read fills most of L1. In the network, 1 thread:
     * ResNet-50's 14x14 1x1 layers 3-12 % faster, MobileNet-v1's 2-8 %; 56x56 and 28x28
     * level (a later strip finds the weights in L2 and prefetches nothing). Not on planes of
     * fewer than 16 tiles: on 7x7 (8 tiles, 64 lines before each) MobileNet-v1's 1024 -> 1024
     * measured 0-8 % slower with it, its 512 -> 1024 level. */
    const float* pf = w + (c0 + cd) * nb * 16;
    const int64_t tiles = (b1 - s0 + C16_TILE - 1) / C16_TILE;
    int64_t pf_lines = 0, pf_step = 0;
    if (strip == 0 && tiles >= 16) {
      const int64_t next_nb = last ? group_blocks(k, grp + 1) : nb;
      const int64_t next_c0 = last ? 0 : c0 + cd;
      const int64_t next_cd = c - next_c0 < C16_CHUNK ? c - next_c0 : C16_CHUNK;
      pf_lines = next_nb > 0 ? next_cd * next_nb : 0; /* a channel's row: nb lines of 64 B */
      pf_step = (pf_lines + tiles - 1) / tiles;
    }
    for (int64_t p = s0; p < b1; p += C16_TILE) {
      const int np = b1 - p < C16_TILE ? (int)(b1 - p) : C16_TILE;
      for (int64_t i = 0; i < pf_step && pf_lines > 0; ++i, --pf_lines, pf += 16)
        _mm_prefetch((const char*)pf, _MM_HINT_T1);
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
  c16_job J = {.g = g, .in = strided ? phase : in, .weights = weights, .packed = packed, .out = out,
               .ep = epilogue, .hw = hw, .groups = (g->k + C16_GROUP * 16 - 1) / (C16_GROUP * 16),
               .strips = blocked > C16_STRIP ? (blocked + C16_STRIP - 1) / C16_STRIP : 1,
               .pack_chunks = (g->c + C16_CHUNK - 1) / C16_CHUNK, .tail = tail,
               .strided = strided ? in : NULL, .phase = phase, .pack_items = 0};
  J.pack_items = prepacked != NULL ? 0 : J.groups * J.pack_chunks;
  const int64_t prepare = J.pack_items + (strided ? (int64_t)g->n * (g->c / 16) : 0);
  if (prepare > 0)
    pool_for(prepare < num_threads ? (int)prepare : num_threads, prepare, prepare_item, &J);
  const int64_t items = (int64_t)g->n * J.strips * J.groups;
  pool_for(items < num_threads ? (int)items : num_threads, items, conv_item, &J);
  return ACCEL_OK;
}

#else /* no AVX-512: no C16 kernel (device.c), but weights still packed at load as with it */

void c16_pack_pointwise(int64_t k, int64_t c, const float* weights, float* packed) {
  for (int64_t g = 0; g * 64 < k; ++g) {
    const int64_t nb = k / 16 - g * 4 < 4 ? k / 16 - g * 4 : 4;
    for (int64_t ci = 0; ci < c; ++ci)
      for (int64_t q = 0; q < nb * 16; ++q)
        packed[g * 64 * c + ci * nb * 16 + q] = weights[(g * 64 + q) * c + ci];
  }
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
