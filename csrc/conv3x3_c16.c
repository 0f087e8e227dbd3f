/* conv3x3_c16.c - the CONV engine's dense 3x3 convolution on channel-blocked (C16) fp32
 * activations, stride 1 or 2 each way.
 *
 * Input [n][c/16][h][w][16], output [n][k/16][oh][ow][16]. Weights [k][c][3][3], which are
 * [k][9c], packed in panels of a tile's blocks of 16 output channels (2 at stride 1, 4 at
 * stride 2: pack_panel), each [9c][16 * blocks], depth d = (c * 3 + r) * 3 + s; packed once
 * at load (conv_c16_3x3_pack, accel_conv_pack_weights) or per call into WS_C16_WEIGHTS.
 *
 * Loops (the study examples/nchw16c_study/conv3x3.c): the input is first copied, per image and
 * block of 16 channels, into a zero-padded plane of the rows and columns the outputs read
 * (WS_C16_WEIGHTS, after the packed weights), at stride 2 on inputs over 1 MB only its left
 * edge, the other tiles reading the input itself (edge_only); items are (image, group of 4
 * blocks of 16 output channels, strip of C3_STRIP1 or C3_STRIP output rows), so that every
 * item writes its own outputs; in an item, per chunk of C3_CHUNK input channels, per panel,
 * row by row, tiles (each strip prefetching a share of the next group's weights into L2, the
 * copy the first group's): a micro-kernel of NP positions x NB blocks (up to 7 x 2 at stride
 * 1, 6 x 4 at stride 2), per tap NB weight vector loads and NP broadcasts, the 9 taps of a
 * channel unrolled; the tiles of 7 x 2 and of 4-6 positions x 4 blocks in inline assembly
 * (a7_2_1, a4_4_2 ..: 2-5 % faster than GCC's code for them). A panel's chunk of weights
 * (37 KB at stride 1) stays in L1 across the strip's tiles. The running totals of the 32-deep
 * blocks stay in the output tile between blocks and chunks; the one-pass epilogue is applied
 * in registers before the last store.
 * Padding taps: a padding row's are skipped where every weight is finite (all_finite, at
 * packing), and so are a padding column's in the 7 x 2 tiles at stride 1 with one column of
 * padding (a7l_2_1, a7r_2_1: the tile's first position's tap s = 0, its last's s = 2; 5 % of
 * the FMAs on 14x14 outputs, 256 -> 256 x0.96-1.01 in ResNet-50); other tiles compute theirs
 * (on 7x7 outputs, 9 % more FMAs, the kernel measured slower than conv_f32 at >= 256 input
 * channels and fits refuses: slower_than_nchw, docs/kernels.md).
 *
 * Bits: as conv_f32 on the NCHW tensors, whichever of its paths the geometry takes (the implicit
 * GEMM or the packed panels: both sum the same way). Each output's depth d runs over (c, r, s);
 * it is summed in blocks of 32 consecutive d, each from zero with one fmadd per d in order (a
 * last, shorter block when 9c % 32 != 0), the block sums added in order to a running total; then
 * the epilogue as conv/f32_implicit_avx512.c's ep_vec. The padding taps that run do their fmadd
 * with a +0 read from the padded copy, as conv_f32's padded copy and panels do (a non-finite
 * weight, with which none is skipped, gives conv_f32's NaN there; with finite weights a skipped
 * one would have added an exact zero to a sum that is never -0). Where conv_f32's packed path
 * sums dot products along the depth instead (conv_f32_dot_tail: an image's last ohw % 16 <= 8
 * positions, every position when ohw <= 8), those positions are summed in its order
 * (tail_depths): lane l of 16 takes depths l, l + 16, ... by one fmadd each, then
 * _mm512_reduce_add_ps. Results do not depend on the thread count, the strips or the chunks.
 * Where conv_f32 takes another path (BLAS: a batch of 1x1 planes, no AVX-512) fits refuses the
 * geometry, and the run is converted around.
 */
#include <stdint.h>
#include <string.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "kernels.h"

/* conv_c16_3x3_pack's buffer: this header, then the panels. */
enum { C3_PACK_HEADER = 64, C3_PACK_MAGIC = 0x33363143 /* "C163" */ };
typedef struct c3_pack_header {
  int32_t magic, k, c, panel;
  int32_t finite; /* every weight finite (all_finite) */
} c3_pack_header;

/* Whether every weight is finite: then a padding tap's fmadd (w * +0 added to a running sum
 * that is never -0) changes nothing and may be skipped; an inf or NaN weight makes it NaN. */
static int all_finite(const float* x, int64_t n) {
  uint32_t top = 0; /* an all-ones exponent: inf or NaN */
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    memcpy(&bits, x + i, sizeof bits);
    const uint32_t e = bits & 0x7f800000u;
    top |= e == 0x7f800000u;
  }
  return top == 0;
}

/* Blocks of 16 output channels per panel of packed weights, which is also a tile's: 2 at
 * stride 1 (tiles of 7 positions x 2 blocks), 4 at stride 2 (6 x 4), the faster shape at each
 * stride (docs/kernels.md). */
static int64_t panel_blocks(const conv_geometry* g) { return g->stride_w == 1 ? 2 : 4; }

/* Panel p of the weights [k][9c]: its blocks' rows as [9c][16 * blocks], at (p * blocks * 16)
 * * 9c in packed (c16_pack_pointwise: one group of up to 4 blocks). A tile reads its panel's
 * rows with a stride the compiler knows (16 * NB), not the rows of a 4-block group read 2
 * blocks at a time: 4-6 % faster on ResNet's 3x3 layers (docs/kernels.md). */
static void pack_panel(const conv_geometry* g, int64_t p, const float* weights, float* packed) {
  const int64_t depth = 9 * (int64_t)g->c, k0 = p * panel_blocks(g) * 16;
  const int64_t kn = g->k - k0 < panel_blocks(g) * 16 ? g->k - k0 : panel_blocks(g) * 16;
  c16_pack_pointwise(kn, depth, weights + k0 * depth, packed + k0 * depth);
}

static int geometry_fits(const conv_geometry* g) {
  return g->kernel_h == 3 && g->kernel_w == 3 && g->stride_h >= 1 && g->stride_h <= 2 &&
         g->stride_w >= 1 && g->stride_w <= 2 && g->dilation_h == 1 && g->dilation_w == 1 &&
         g->groups == 1 && g->c > 0 && g->k > 0 && g->c % 16 == 0 && g->k % 16 == 0;
}

#ifdef __AVX512F__

#define C3_TILE 6   /* output positions per micro-tile, along a row */
#define C3_GROUP 4  /* blocks of 16 output channels per group */
#define C3_STRIP 4  /* output rows per item at stride 2 */
#define C3_STRIP1 7 /* and at stride 1: a chunk's weights (37 KB) serve 14 tiles of 14x14, not 8
                     * (ResNet-50's 256 -> 256 on 14x14 x0.95-1.02, median 0.98) */
#define C3_CHUNK 32 /* input channels per pass over an item's tiles: 9 blocks of 32 depths */

static inline int64_t group_blocks(int64_t k, int64_t g) {
  const int64_t left = k / 16 - g * C3_GROUP;
  return left < C3_GROUP ? left : C3_GROUP;
}

/* ---- the micro-kernel: NP positions of a row x NB blocks of 16 output channels ---- */

#define DECL(p) __m512 a##p##_0, a##p##_1, a##p##_2, a##p##_3;
#define ZERO1(p, q) if (NB > q) a##p##_##q = _mm512_setzero_ps();
#define ZERO(p) \
  if (NP > p) { ZERO1(p, 0) ZERO1(p, 1) ZERO1(p, 2) ZERO1(p, 3) }
#define FMA1(p, q) if (NB > q) a##p##_##q = _mm512_fmadd_ps(w##q, b, a##p##_##q);
#define FMA(p)                                                  \
  if (NP > p) {                                                 \
    const __m512 b = _mm512_set1_ps(ib[(p * ST + s) * 16]);     \
    FMA1(p, 0) FMA1(p, 1) FMA1(p, 2) FMA1(p, 3)                 \
  }
#define LDADD1(p, q) \
  if (NB > q) a##p##_##q = _mm512_add_ps(_mm512_loadu_ps(out + q * os + p * 16), a##p##_##q);
#define LDADD(p) \
  if (NP > p) { LDADD1(p, 0) LDADD1(p, 1) LDADD1(p, 2) LDADD1(p, 3) }
#define ST1(p, q) if (NB > q) _mm512_storeu_ps(out + q * os + p * 16, a##p##_##q);
#define ST(p) \
  if (NP > p) { ST1(p, 0) ST1(p, 1) ST1(p, 2) ST1(p, 3) }
#define EPI1(p, q)                                                                           \
  if (NB > q)                                                                                \
    _mm512_storeu_ps(out + q * os + p * 16,                                                  \
                     c16_ep_apply(e, a##p##_##q, q,                                              \
                              e->operand != NULL ? e->operand + q * os + p * 16 : NULL));
#define EPI(p) \
  if (NP > p) { EPI1(p, 0) EPI1(p, 1) EPI1(p, 2) EPI1(p, 3) }
#define ALLP(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6)
#define BLOCK_END /* a 32-deep block ends: its sum into the running total */ \
  {                                                                        \
    if (first) {                                                           \
      first = 0;                                                           \
    } else {                                                               \
      ALLP(LDADD)                                                          \
    }                                                                      \
    ALLP(ST)                                                               \
    ALLP(ZERO)                                                             \
    dn += 32;                                                              \
  }

/* in: the tile's first position's tap (0, 0) in channel block 0 of the padded copy (channel
 * blocks cbs apart, rows rs apart, positions ST columns apart); w: the packed weights of the
 * tile's first block ([9c] rows, ld apart); out: the tile's outputs (blocks os apart); e: the
 * epilogue, or NULL. NB * NP <= 24 accumulators. */
static inline __attribute__((always_inline)) void kbody(const int NP, const int NB, const int ST,
                                                        int64_t c, int64_t c0, int64_t c1,
                                                        const float* in, int64_t cbs,
                                                        int64_t rs, const float* w, float* out,
                                                        int64_t os, int rlo, int rhi,
                                                        const c16_ep* e) {
  const int64_t ld = NB * 16; /* a compile-time row stride: the tile's own panel */
  ALLP(DECL)
  ALLP(ZERO)
  int first = c0 == 0;
  int64_t d = c0 * 9, dn = d + 32;
  const int64_t de = c * 9;
  for (int64_t ci = c0; ci < c1; ++ci) {
    const float* ic = in + (ci >> 4) * cbs + (ci & 15);
    const float* wc = w + ci * 9 * ld;
#pragma GCC unroll 3
    for (int r = 0; r < 3; ++r) {
      if (r < rlo || r >= rhi) { /* a padding row: its fmadds would add exact zeros */
        d += 3;
        if (__builtin_expect(d >= dn, 0) && dn < de) BLOCK_END
        continue;
      }
      const float* ib = ic + r * rs;
#pragma GCC unroll 3
      for (int s = 0; s < 3; ++s) {
        const float* wb = wc + (r * 3 + s) * ld;
        const __m512 w0 = _mm512_load_ps(wb);
        const __m512 w1 = NB > 1 ? _mm512_load_ps(wb + 16) : w0;
        const __m512 w2 = NB > 2 ? _mm512_load_ps(wb + 32) : w0;
        const __m512 w3 = NB > 3 ? _mm512_load_ps(wb + 48) : w0;
        ALLP(FMA)
        if (__builtin_expect(++d == dn, 0) && d < de) BLOCK_END
      }
    }
  }
  if (c1 < c) return; /* the chunk's last block was added at its last tap */
  if (!first) { ALLP(LDADD) }
  if (e != NULL) {
    ALLP(EPI)
  } else {
    ALLP(ST)
  }
}

typedef void (*kfn)(int64_t, int64_t, int64_t, const float*, int64_t, int64_t, const float*,
                    float*, int64_t, int, int, const c16_ep*);
#define KDEF(N, B, S)                                                                      \
  static void k##N##_##B##_##S(int64_t c, int64_t c0, int64_t c1, const float* in,         \
                               int64_t cbs, int64_t rs, const float* w, float* out,        \
                               int64_t os, int rlo, int rhi, const c16_ep* e) {            \
    kbody(N, B, S, c, c0, c1, in, cbs, rs, w, out, os, rlo, rhi, e);                       \
  }
#define KROW(B, S) \
  KDEF(1, B, S) KDEF(2, B, S) KDEF(3, B, S) KDEF(4, B, S) KDEF(5, B, S) KDEF(6, B, S)
/* 7 x 2 and 4-6 x 4: in assembly below */
KROW(1, 1) KROW(2, 1) KDEF(7, 1, 1) KROW(1, 2) KROW(2, 2) KROW(3, 2)
KDEF(1, 4, 2) KDEF(2, 4, 2) KDEF(3, 4, 2)

/* ---- the tiles in assembly: 7 x 2 (stride 1) and 4-6 positions x 4 blocks (stride 2) ----
 * (At stride 2 a row of ResNet's outputs splits into tiles of 4-6 positions: 28 into 5 and 6,
 * 14 into 4 and 5.) The same arithmetic as kbody's in MLAS's order (per tap NP broadcasts, then
 * per block of 16 output channels one weight load and NP fmadds; accumulators zeroed by
 * vpxord). Same fmadds in the same order per output (vfmadd231ps acc, w, b is
 * _mm512_fmadd_ps(w, b, acc)), the same block ends (vaddps out, acc as GCC compiles
 * _mm512_add_ps(load(out), acc)), the same skipped padding rows. Accumulator of position p,
 * block q: zmm(p * NB + q); weight vector zmm24; broadcasts zmm25-31 (7 x 2: the row's weights
 * zmm14-19, C3_COLS). One call runs a chunk of channels [c0, c1), c0 a multiple of 32, so that
 * its depth 9 * c0 starts a 32-deep block: a counter of the block's taps left, and at zero the
 * block end (C3_BE: the sums added to the running totals in the output tile and stored, the
 * accumulators zeroed), done as long as blocks are left that end before the depth (nbe); at the
 * depth's end the sums stay in the accumulators, returned in registers for the epilogue in C.
 * The block end is copied out of line at each site, its state in registers: called (call/ret)
 * with its state in memory it cost the 7 x 2 tile ~8 % of its time (the tile's body alone ran
 * at 88 % of the FMA peak). Hot in L1, every tile shape ran closer to the
 * FMA peak than GCC's code (docs/kernels.md, conv3x3_c16.c). */
typedef struct c3_asm_st {
  float* o[4];      /* the tile's outputs in blocks 0..NB-1 (0) */
  int64_t cb_next;  /* bytes from channel 16 of a block of 16 to channel 0 of the next (32) */
  int64_t nbe;      /* block ends left to store (40) */
  int64_t add;      /* nonzero: the outputs hold running totals (48) */
  int64_t mask;     /* bit r: kernel row r reads input, not padding (56) */
  int64_t n;        /* channels left (64) */
  const float* ic;  /* the chunk's first channel's input (72) */
  const float* w;   /* the chunk's weights (80) */
  int64_t rs;       /* bytes from an input row to the next (88) */
} c3_asm_st;

#define C3S(x) #x
#define C3X(x) C3S(x)
#define C3_BR0 25
#define C3_BR1 26
#define C3_BR2 27
#define C3_BR3 28
#define C3_BR4 29
#define C3_BR5 30
#define C3_BR6 31
/* (position, accumulator) of block q of an NP x NB tile: C3_L<NP>_<NB>_<q> */
#define C3_L7_2_0(X) X(0, 0) X(1, 2) X(2, 4) X(3, 6) X(4, 8) X(5, 10) X(6, 12)
#define C3_L7_2_1(X) X(0, 1) X(1, 3) X(2, 5) X(3, 7) X(4, 9) X(5, 11) X(6, 13)
#define C3_L4_4_0(X) X(0, 0) X(1, 4) X(2, 8) X(3, 12)
#define C3_L4_4_1(X) X(0, 1) X(1, 5) X(2, 9) X(3, 13)
#define C3_L4_4_2(X) X(0, 2) X(1, 6) X(2, 10) X(3, 14)
#define C3_L4_4_3(X) X(0, 3) X(1, 7) X(2, 11) X(3, 15)
#define C3_L5_4_0(X) C3_L4_4_0(X) X(4, 16)
#define C3_L5_4_1(X) C3_L4_4_1(X) X(4, 17)
#define C3_L5_4_2(X) C3_L4_4_2(X) X(4, 18)
#define C3_L5_4_3(X) C3_L4_4_3(X) X(4, 19)
#define C3_L6_4_0(X) C3_L5_4_0(X) X(5, 20)
#define C3_L6_4_1(X) C3_L5_4_1(X) X(5, 21)
#define C3_L6_4_2(X) C3_L5_4_2(X) X(5, 22)
#define C3_L6_4_3(X) C3_L5_4_3(X) X(5, 23)
/* every accumulator of the tile */
#define C3_ALL2(NP, X) C3_L##NP##_2_0(X) C3_L##NP##_2_1(X)
#define C3_ALL4(NP, X) C3_L##NP##_4_0(X) C3_L##NP##_4_1(X) C3_L##NP##_4_2(X) C3_L##NP##_4_3(X)
/* position p's broadcast of tap s of the row at A */
#define C3_B(ST, A, s, p) \
  "vbroadcastss 64*(" #p "*" #ST "+" #s ")" A ", %%zmm" C3X(C3_BR##p) "\n\t"
#define C3_BN4(ST, A, s) C3_B(ST, A, s, 0) C3_B(ST, A, s, 1) C3_B(ST, A, s, 2) C3_B(ST, A, s, 3)
#define C3_BN5(ST, A, s) C3_BN4(ST, A, s) C3_B(ST, A, s, 4)
#define C3_BN6(ST, A, s) C3_BN5(ST, A, s) C3_B(ST, A, s, 5)
#define C3_BN7(ST, A, s) C3_BN6(ST, A, s) C3_B(ST, A, s, 6)
/* The 7 x 2 tile without a padding column's taps (edge_taps): position 0's tap s = 0 (7l),
 * position 6's tap s = 2 (7r) */
#define C3_L7l_2_0(X) X(1, 2) X(2, 4) X(3, 6) X(4, 8) X(5, 10) X(6, 12)
#define C3_L7l_2_1(X) X(1, 3) X(2, 5) X(3, 7) X(4, 9) X(5, 11) X(6, 13)
#define C3_L7r_2_0(X) X(0, 0) X(1, 2) X(2, 4) X(3, 6) X(4, 8) X(5, 10)
#define C3_L7r_2_1(X) X(0, 1) X(1, 3) X(2, 5) X(3, 7) X(4, 9) X(5, 11)
#define C3_BN7l(ST, A, s) \
  C3_B(ST, A, s, 1) C3_B(ST, A, s, 2) C3_B(ST, A, s, 3) C3_B(ST, A, s, 4) C3_B(ST, A, s, 5) \
  C3_B(ST, A, s, 6)
#define C3_BN7r(ST, A, s) C3_BN6(ST, A, s)
#define C3_F(p, a) "vfmadd231ps %%zmm" C3X(C3_BR##p) ", %%zmm24, %%zmm" #a "\n\t"
/* block q's weight vector of tap (r, s) */
#define C3_W(NB, r, s, q) "vmovaps 64*(" #NB "*(3*" #r "+" #s ")+" #q ")(%%rdi), %%zmm24\n\t"
#define C3_Q2(NP, r, s) C3_W(2, r, s, 0) C3_L##NP##_2_0(C3_F) C3_W(2, r, s, 1) C3_L##NP##_2_1(C3_F)
#define C3_Q4(NP, r, s)                                                                        \
  C3_W(4, r, s, 0) C3_L##NP##_4_0(C3_F) C3_W(4, r, s, 1) C3_L##NP##_4_1(C3_F)                \
  C3_W(4, r, s, 2) C3_L##NP##_4_2(C3_F) C3_W(4, r, s, 3) C3_L##NP##_4_3(C3_F)
/* tap (r, s) of the row at A, then one tap fewer left in the block: at zero, its end */
/* A block's end, out of line (subsection 1) and back to the site's label 7: unless no block is
 * left to end before the depth's end (r8), the sums added to the running totals (if any, r9)
 * in the output tile (block q at r10 + q) and stored, the accumulators zeroed. */
#define C3_A0(p, a) "vaddps 64*" #p "(%%r10), %%zmm" #a ", %%zmm" #a "\n\t"
#define C3_A1(p, a) "vaddps 64*" #p "(%%r11), %%zmm" #a ", %%zmm" #a "\n\t"
#define C3_A2(p, a) "vaddps 64*" #p "(%%r12), %%zmm" #a ", %%zmm" #a "\n\t"
#define C3_A3(p, a) "vaddps 64*" #p "(%%r13), %%zmm" #a ", %%zmm" #a "\n\t"
#define C3_S0(p, a) "vmovups %%zmm" #a ", 64*" #p "(%%r10)\n\t"
#define C3_S1(p, a) "vmovups %%zmm" #a ", 64*" #p "(%%r11)\n\t"
#define C3_S2(p, a) "vmovups %%zmm" #a ", 64*" #p "(%%r12)\n\t"
#define C3_S3(p, a) "vmovups %%zmm" #a ", 64*" #p "(%%r13)\n\t"
#define C3_Z(p, a) "vpxord %%zmm" #a ", %%zmm" #a ", %%zmm" #a "\n\t"
#define C3_BLK2(NP, X) C3_L##NP##_2_0(X##0) C3_L##NP##_2_1(X##1)
#define C3_BLK4(NP, X) \
  C3_L##NP##_4_0(X##0) C3_L##NP##_4_1(X##1) C3_L##NP##_4_2(X##2) C3_L##NP##_4_3(X##3)
#define C3_BE(NP, NB)                                                                          \
  ".subsection 1\n\t" "8:\n\t"                                                                 \
  "test %%r8, %%r8\n\t" "jz 72f\n\t" "dec %%r8\n\t" "test %%r9, %%r9\n\t" "jz 71f\n\t"          \
  C3_BLK##NB(NP, C3_A) "71:\n\t" C3_BLK##NB(NP, C3_S) "mov $1, %%r9d\n\t" C3_ALL##NB(NP, C3_Z) \
  "72:\n\t" "add $32, %%rdx\n\t" "jmp 7b\n\t" ".subsection 0\n\t"
/* tap (r, s) of the row at A, then one tap fewer left in the block (rdx): at zero, its end */
#define C3_TAP(NF, NP, NB, ST, A, r, s) \
  C3_BN##NF(ST, A, s) C3_Q##NB(NF, r, s) "dec %%rdx\n\t" "jz 8f\n\t" "7:\n\t" C3_BE(NP, NB)
/* At stride 1 the 7 x 2 tile's row of 3 taps reads 9 columns, column j for taps s = 0..2 of
 * positions j - s (GCC's code does the same): with the row's 6 weight vectors in zmm14-19
 * (tap s, block q: zmm(14 + 2s + q)), one broadcast per column (9 a row, not 21), then the
 * fmadds that use it. Each accumulator still gets its taps in order s = 0, 1, 2 (columns j,
 * j + 1, j + 2); a row that a block end splits (fewer than 3 taps left in the block) takes
 * C3_TAP's order. (C3_TAP's order for every row ran slower than GCC's code.) */
#define C3_CB(A, j, b) "vbroadcastss 64*" #j A ", %%zmm" #b "\n\t"
#define C3_CF(b, w0, w1, a0, a1)                                                               \
  "vfmadd231ps %%zmm" #b ", %%zmm" #w0 ", %%zmm" #a0 "\n\t"                                   \
  "vfmadd231ps %%zmm" #b ", %%zmm" #w1 ", %%zmm" #a1 "\n\t"
#define C3_CW(r, s, q, z) "vmovaps 64*(2*(3*" #r "+" #s ")+" #q ")(%%rdi), %%zmm" #z "\n\t"
#define C3_COL0(A) C3_CB(A, 0, 25) C3_CF(25, 14, 15, 0, 1)
#define C3_COL8(A) C3_CB(A, 8, 26) C3_CF(26, 18, 19, 12, 13)
#define C3_NOCOL(A)
#define C3_COLS(A, r, C0, C8)                                                                  \
  C3_CW(r, 0, 0, 14) C3_CW(r, 0, 1, 15) C3_CW(r, 1, 0, 16) C3_CW(r, 1, 1, 17)                  \
  C3_CW(r, 2, 0, 18) C3_CW(r, 2, 1, 19)                                                        \
  C0(A)                                                                                        \
  C3_CB(A, 1, 26) C3_CF(26, 14, 15, 2, 3) C3_CF(26, 16, 17, 0, 1)                              \
  C3_CB(A, 2, 27) C3_CF(27, 14, 15, 4, 5) C3_CF(27, 16, 17, 2, 3) C3_CF(27, 18, 19, 0, 1)      \
  C3_CB(A, 3, 28) C3_CF(28, 14, 15, 6, 7) C3_CF(28, 16, 17, 4, 5) C3_CF(28, 18, 19, 2, 3)      \
  C3_CB(A, 4, 29) C3_CF(29, 14, 15, 8, 9) C3_CF(29, 16, 17, 6, 7) C3_CF(29, 18, 19, 4, 5)      \
  C3_CB(A, 5, 30) C3_CF(30, 14, 15, 10, 11) C3_CF(30, 16, 17, 8, 9) C3_CF(30, 18, 19, 6, 7)    \
  C3_CB(A, 6, 31) C3_CF(31, 14, 15, 12, 13) C3_CF(31, 16, 17, 10, 11) C3_CF(31, 18, 19, 8, 9)  \
  C3_CB(A, 7, 25) C3_CF(25, 16, 17, 12, 13) C3_CF(25, 18, 19, 10, 11)                          \
  C8(A)
#define C3_FAST2(NP, A, r, C0, C8)                                                             \
  "cmp $3, %%rdx\n\t" "jl 4f\n\t"                                                              \
  C3_COLS(A, r, C0, C8) "sub $3, %%rdx\n\t" "jz 8f\n\t" "7:\n\t" C3_BE(NP, 2) "jmp 6f\n\t"     \
  "4:\n\t"
#define C3_FAST4(NP, A, r, C0, C8)
/* kernel row r (input row at A), unless a padding row (bit r of the mask clear): then its 3
 * taps only counted */
#define C3_ROW(NP, NB, ST, A, r, N0, N2, C0, C8)                                               \
  "testq $1<<" #r ", 56(%[st])\n\t" "jz 5f\n\t" C3_FAST##NB(NP, A, r, C0, C8)                  \
  C3_TAP(N0, NP, NB, ST, A, r, 0) C3_TAP(NP, NP, NB, ST, A, r, 1)                               \
  C3_TAP(N2, NP, NB, ST, A, r, 2)                                                              \
  "jmp 6f\n\t"                                                                                 \
  "5:\n\t" "sub $3, %%rdx\n\t" "jle 8f\n\t" "7:\n\t" C3_BE(NP, NB) "6:\n\t"
/* The chunk's code: input rsi (rows rcx bytes apart), weights rdi, the block's taps left rdx,
 * channels left rax; the outputs r10-r13 */
#define C3_ASM(NP, NB, ST, N0, N2, C0, C8)                                                     \
  "mov 72(%[st]), %%rsi\n\t" "mov 80(%[st]), %%rdi\n\t" "mov 88(%[st]), %%rcx\n\t"             \
  "mov $32, %%edx\n\t" "mov 64(%[st]), %%rax\n\t" "mov 40(%[st]), %%r8\n\t"                    \
  "mov 48(%[st]), %%r9\n\t" "mov 0(%[st]), %%r10\n\t" "mov 8(%[st]), %%r11\n\t"                \
  "mov 16(%[st]), %%r12\n\t" "mov 24(%[st]), %%r13\n\t" C3_ALL##NB(NP, C3_Z)                   \
  "1:\n\t"                                                                                     \
  C3_ROW(NP, NB, ST, "(%%rsi)", 0, N0, N2, C0, C8)                                             \
  C3_ROW(NP, NB, ST, "(%%rsi,%%rcx,1)", 1, N0, N2, C0, C8)                                     \
  C3_ROW(NP, NB, ST, "(%%rsi,%%rcx,2)", 2, N0, N2, C0, C8)                                     \
  "add $4, %%rsi\n\t" "add $9*64*" #NB ", %%rdi\n\t" "dec %%rax\n\t" "jz 9f\n\t"               \
  "test $15, %%rax\n\t" "jnz 1b\n\t" "add 32(%[st]), %%rsi\n\t" "jmp 1b\n\t"                   \
  "9:\n\t" "mov %%r9, 48(%[st])\n\t"

#define C3_REG(p, r) register __m512 z##r __asm__("zmm" #r);
#define C3_OUT(p, r) "=v"(z##r),
#define C3_ARR(p, r) acc[r] = z##r;
/* kbody (NP, NB, ST) in assembly; the same arguments */
#define C3_KASM(NP, NB, ST) C3_KASMV(a##NP##_##NB##_##ST, NP, NB, ST, NP, NP, C3_COL0, C3_COL8)
/* (NAME, the tile, the lists of taps s = 0 and 2 (N0, N2), the first and last columns' code) */
#define C3_KASMV(NAME, NP, NB, ST, N0, N2, C0, C8)                                             \
  static void NAME(int64_t c, int64_t c0, int64_t c1, const float* in,                         \
                                  int64_t cbs, int64_t rs, const float* w, float* out,         \
                                  int64_t os, int rlo, int rhi, const c16_ep* e) {             \
    c3_asm_st st = {.o = {out, out + os, NB > 2 ? out + 2 * os : NULL,                         \
                          NB > 3 ? out + 3 * os : NULL},                                       \
                    .cb_next = (cbs - 16) * 4, .nbe = 0, .add = c0 != 0,                       \
                    .mask = (7 >> (3 - rhi)) & (7 << rlo), .n = c1 - c0,                       \
                    .ic = in + (c0 >> 4) * cbs, .w = w + c0 * 9 * NB * 16, .rs = rs * 4};      \
    const int64_t last = 9 * c1 < 9 * c - 1 ? 9 * c1 : 9 * c - 1;                             \
    st.nbe = last / 32 - 9 * c0 / 32; /* the block ends before the depth's end */              \
    C3_ALL##NB(NP, C3_REG)                                                                     \
    __asm__ volatile(C3_ASM(NP, NB, ST, N0, N2, C0, C8)                                        \
                     : C3_ALL##NB(NP, C3_OUT) "+m"(st)                                         \
                     : [st] "r"(&st)                                                           \
                     : "memory", "cc", "rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10",   \
                       "r11", "r12", "r13", C3_CLOB##NB##_##NP);                               \
    if (c1 < c) return; /* the chunk's last block was stored at its last tap */               \
    __m512 acc[NP * NB];                                                                       \
    C3_ALL##NB(NP, C3_ARR)                                                                     \
    c3_tile_end(NP, NB, acc, st.add, out, os, e);                                              \
  }
#define C3_CLOB_HI "xmm24", "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31"
#define C3_CLOB4_6 C3_CLOB_HI
#define C3_CLOB2_7 "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", \
                   "xmm22", "xmm23", C3_CLOB_HI
#define C3_CLOB4_5 "xmm20", "xmm21", "xmm22", "xmm23", C3_CLOB_HI
#define C3_CLOB4_4 "xmm16", "xmm17", "xmm18", "xmm19", C3_CLOB4_5

/* The last block's sums of an assembly tile: added to the running totals, then the epilogue
 * or the store, as kbody's end. */
static inline __attribute__((always_inline)) void c3_tile_end(const int NP, const int NB,
                                                             __m512* acc, int64_t add,
                                                             float* out, int64_t os,
                                                             const c16_ep* e) {
#pragma GCC unroll 28
  for (int i = 0; i < NP * NB; ++i) {
    const int p = i / NB, q = i % NB;
    if (add) acc[i] = _mm512_add_ps(_mm512_loadu_ps(out + q * os + p * 16), acc[i]);
  }
  if (e != NULL) {
#pragma GCC unroll 28
    for (int i = 0; i < NP * NB; ++i) {
      const int p = i / NB, q = i % NB;
      _mm512_storeu_ps(out + q * os + p * 16,
                       c16_ep_apply(e, acc[i], q,
                                    e->operand != NULL ? e->operand + q * os + p * 16 : NULL));
    }
  } else {
#pragma GCC unroll 28
    for (int i = 0; i < NP * NB; ++i) _mm512_storeu_ps(out + (i % NB) * os + (i / NB) * 16, acc[i]);
  }
}

C3_KASM(7, 2, 1) C3_KASM(6, 4, 2) C3_KASM(5, 4, 2) C3_KASM(4, 4, 2)
C3_KASMV(a7l_2_1, 7, 2, 1, 7l, 7, C3_NOCOL, C3_COL8)
C3_KASMV(a7r_2_1, 7, 2, 1, 7, 7r, C3_COL0, C3_NOCOL)
C3_KASMV(a7lr_2_1, 7, 2, 1, 7l, 7r, C3_NOCOL, C3_NOCOL)

#define KTAB(B, S) 0, k1_##B##_##S, k2_##B##_##S, k3_##B##_##S, k4_##B##_##S, k5_##B##_##S, \
                   k6_##B##_##S
/* [NB - 1][NP]: at stride 1 up to 7 positions of 1 or 2 blocks, at stride 2 6 of 1-4 */
static const kfn ktab1[2][8] = {{KTAB(1, 1), k7_1_1}, {KTAB(2, 1), a7_2_1}};
static const kfn ktab2[4][7] = {{KTAB(1, 2)}, {KTAB(2, 2)}, {KTAB(3, 2)},
                                {0, k1_4_2, k2_4_2, k3_4_2, a4_4_2, a5_4_2, a6_4_2}};


/* ---- the job ---- */

typedef struct c3_job {
  const conv_geometry* g;
  const float* in;
  const float* weights; /* [k][9c] as given: the tail reads its rows */
  float* packed;
  float* copy;          /* the padded input: [n][c/16][hp][ew][16], its first ew columns */
  const int64_t* tap;   /* the tail's depths' offsets from a position's tap (0, 0) */
  float* cols;          /* the tail positions' columns: per participant, TAIL_MAX x 9c */
  float* out;
  const sdp_f32* ep;    /* one-pass, or NULL */
  int64_t hp, wp, ohw, groups, strips, tail, n_items, strip_rows; /* C3_STRIP or C3_STRIP1 */
  int64_t ew; /* the columns of the padded plane copied: wp, or the left edge's (direct) */
  int direct; /* the tiles past the left edge read the input itself (edge_only) */
  int finite; /* every weight finite: the padding rows' taps may be skipped */
  int edge_taps; /* and the padding columns' of the 7 x 2 tiles */
  int pf0; /* prefetch the first group's weights during the copy (packed at load) */
} c3_job;

/* Whether only the left edge needs the padded copy, the other tiles reading the input itself:
 * the padding rows' taps are skipped (every weight finite), no tap reads a padding column
 * right of the input, only a row's first tile (up to C3_TILE positions at stride 2) one on the
 * left; and the input and its copy would not fit in L2 together (2 MB). In ResNet-50 the
 * copy of 128 x 56x56 (1.6 MB read, 1.7 MB written) was an eighth of its 3x3/2, which ran
 * faster without it; 256 x 28x28 (0.8 MB) ran the same or slower (docs/kernels.md). */
static int edge_only(const conv_geometry* g, int finite) {
  return finite && g->stride_w == 2 && g->pad_left <= 2 &&
         (int64_t)(g->out_w - 1) * g->stride_w + 3 <= (int64_t)g->pad_left + g->w &&
         (int64_t)g->n * g->c * g->h * g->w * (int64_t)sizeof(float) > (1 << 20);
}

static void pack_item(void* ctx, int64_t item, int participant) {
  const c3_job* J = ctx;
  (void)participant;
  pack_panel(J->g, item, J->weights, J->packed);
}

/* Item = (image, block of 16 input channels): its plane, zero-padded; and a share of the first
 * group's packed weights prefetched into L2 (the later groups' are prefetched by the strips
 * before them, conv_item): in a network they come from memory, and the first strip stalled on
 * them (ResNet-50's 256 -> 256 on 14x14 x0.96-0.99, docs/kernels.md). */
static void copy_item(void* ctx, int64_t item, int participant) {
  const c3_job* J = ctx;
  (void)participant;
  const conv_geometry* g = J->g;
  const int64_t H = g->h, W = g->w, hp = J->hp, wp = J->ew;
  const float* src = J->in + item * H * W * 16;
  float* dst = J->copy + item * hp * wp * 16;
  int64_t x0 = g->pad_left, x1 = W + g->pad_left; /* the padded columns that hold input */
  if (x1 > wp) x1 = wp;
  if (x0 > x1) x0 = x1;
  const int64_t setup = (int64_t)g->n * (g->c / 16),
                lines = J->pf0 ? group_blocks(g->k, 0) * 9 * g->c : 0, /* 16 floats a line */
                l0 = lines * item / setup, l1 = lines * (item + 1) / setup;
  const char* pf = (const char*)J->packed + l0 * 64;
  int64_t pf_left = l1 - l0;
  const int64_t pf_step = (pf_left + hp - 1) / hp;
  for (int64_t i = 0; i < hp; ++i) {
    for (int64_t k = 0; k < pf_step && pf_left > 0; ++k, --pf_left, pf += 64)
      _mm_prefetch(pf, _MM_HINT_T1);
    float* row = dst + i * wp * 16;
    const int64_t iy = i - g->pad_top;
    if (iy < 0 || iy >= H || x0 == x1) {
      memset(row, 0, (size_t)(wp * 16) * sizeof(float));
      continue;
    }
    memset(row, 0, (size_t)(x0 * 16) * sizeof(float));
    memcpy(row + x0 * 16, src + (iy * W + x0 - g->pad_left) * 16,
           (size_t)((x1 - x0) * 16) * sizeof(float));
    memset(row + x1 * 16, 0, (size_t)((wp - x1) * 16) * sizeof(float));
  }
}

/* The tail: the outputs at positions [ohw - tail, ohw) of an image, summed as conv_f32's dot
 * products (dot_body): per position and block of 16 output channels, 16 lane sums (lane l:
 * depths l, l + 16, ..., one fmadd each) reduced as _mm512_reduce_add_ps; then the epilogue.
 * The lane sums wait in `lanes` while conv_item passes over the depth chunk by chunk: each
 * chunk's packed weights are then in L1 or L2 from its tiles (read again afterwards, they
 * came from L2 or memory at a few GB/s: one tail position cost a tenth of a layer,
 * docs/kernels.md). */
enum { TAIL_MAX = 8 }; /* conv_f32's TMAX */

/* cols: the tail positions' columns of image img, [tail][9c]. */
static void tail_gather(const c3_job* J, int64_t img, float* cols) {
  const conv_geometry* g = J->g;
  const int64_t depth = 9 * (int64_t)g->c, ow = g->out_w, t0 = J->ohw - J->tail;
  if (J->direct) { /* from the input, +0 in the padding */
    const int64_t H = g->h, W = g->w;
    const float* plane = J->in + img * (g->c / 16) * H * W * 16;
    for (int64_t t = 0; t < J->tail; ++t) {
      const int64_t oy = (t0 + t) / ow, ox = (t0 + t) % ow;
      for (int64_t r = 0; r < 3; ++r)
        for (int64_t sc = 0; sc < 3; ++sc) {
          const int64_t iy = oy * g->stride_h - g->pad_top + r,
                        ix = ox * g->stride_w - g->pad_left + sc;
          const int in_plane = iy >= 0 && iy < H && ix >= 0 && ix < W;
          const float* at = plane + (iy * W + ix) * 16;
          float* col = cols + t * depth + r * 3 + sc;
          for (int64_t ci = 0; ci < g->c; ++ci)
            col[ci * 9] = in_plane ? at[(ci >> 4) * H * W * 16 + (ci & 15)] : 0.0f;
        }
    }
    return;
  }
  const float* plane = J->copy + img * (g->c / 16) * J->hp * J->wp * 16;
  for (int64_t t = 0; t < J->tail; ++t) {
    const float* at =
        plane + (((t0 + t) / ow) * g->stride_h * J->wp + ((t0 + t) % ow) * g->stride_w) * 16;
    for (int64_t dd = 0; dd < depth; ++dd) cols[t * depth + dd] = at[J->tap[dd]];
  }
}

/* Lane l of positions [t0, t0 + NT) x blocks [qa, qa + NQ) over depths [d0, d1) (d0 % 16 ==
 * 0): per depth one weight vector per block and one broadcast per position for NT x NQ
 * fmadds, each lane sum in a register over its depths in order. (A position and block at a
 * time loaded a weight vector per fmadd: 256 -> 256 on 14x14 x0.95-0.96 in a C harness.) */
static inline __attribute__((always_inline)) void tail_lane(const int NT, const int NQ,
                                                           const float* w, int64_t ld,
                                                           const float* cols, int64_t depth,
                                                           float* lanes, int64_t nb, int64_t t0,
                                                           int64_t qa, int l, int64_t d0,
                                                           int64_t d1) {
  __m512 acc[4][4];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t)
#pragma GCC unroll 4
    for (int q = 0; q < NQ; ++q)
      acc[t][q] = _mm512_load_ps(lanes + ((t0 + t) * nb + qa + q) * 256 + l * 16);
  for (int64_t dd = d0 + l; dd < d1; dd += 16) {
    __m512 wv[4];
#pragma GCC unroll 4
    for (int q = 0; q < NQ; ++q) wv[q] = _mm512_load_ps(w + dd * ld + q * 16);
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      const __m512 b = _mm512_set1_ps(cols[(t0 + t) * depth + dd]);
#pragma GCC unroll 4
      for (int q = 0; q < NQ; ++q) acc[t][q] = _mm512_fmadd_ps(wv[q], b, acc[t][q]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t)
#pragma GCC unroll 4
    for (int q = 0; q < NQ; ++q)
      _mm512_store_ps(lanes + ((t0 + t) * nb + qa + q) * 256 + l * 16, acc[t][q]);
}

/* The lane sums of group grp's blocks [qa, qb) (one panel) over depths [d0, d1). */
static void tail_depths(const c3_job* J, int64_t grp, int64_t qa, int64_t qb,
                        const float* cols, float* lanes, int64_t d0, int64_t d1) {
  const conv_geometry* g = J->g;
  const int64_t depth = 9 * (int64_t)g->c;
  const int64_t nb = group_blocks(g->k, grp), qn = qb - qa, ld = 16 * qn;
  const float* w = J->packed + (grp * C3_GROUP + qa) * 16 * depth;
  for (int64_t t0 = 0; t0 < J->tail; t0 += 4) {
    const int64_t nt = J->tail - t0 < 4 ? J->tail - t0 : 4;
    for (int l = 0; l < 16; ++l) {
#define TL(NT, NQ) tail_lane(NT, NQ, w, ld, cols, depth, lanes, nb, t0, qa, l, d0, d1)
#define TLQ(NT) \
  switch (qn) { case 1: TL(NT, 1); break; case 2: TL(NT, 2); break; case 3: TL(NT, 3); break; \
                default: TL(NT, 4); break; }
      switch (nt) { case 1: TLQ(1) break; case 2: TLQ(2) break; case 3: TLQ(3) break;
                    default: TLQ(4) break; }
#undef TLQ
#undef TL
    }
  }
}

/* The tail's outputs of group grp: the lane sums reduced, then the epilogue (e, with operand
 * the group's first block's, or NULL). out: the group's first block. */
static void tail_store(const c3_job* J, int64_t grp, const float* lanes, const c16_ep* e,
                       const float* operand, float* out) {
  const int64_t nb = group_blocks(J->g->k, grp), ohw = J->ohw, t0 = ohw - J->tail;
  for (int64_t t = 0; t < J->tail; ++t)
    for (int64_t q = 0; q < nb; ++q) {
      const float* lq = lanes + (t * nb + q) * 256;
      __m512 lane[16];
#pragma GCC unroll 16
      for (int l = 0; l < 16; ++l) lane[l] = _mm512_load_ps(lq + l * 16);
      __m512 v = c16_lanes_reduced(lane);
      const int64_t at = q * ohw * 16 + (t0 + t) * 16;
      if (e != NULL) v = c16_ep_apply(e, v, (int)q, operand != NULL ? operand + at : NULL);
      _mm512_storeu_ps(out + at, v);
    }
}

/* Item = (image, group, strip of output rows), strips innermost: the items that follow each
 * other share the group's weights (2.4 MB for 256 -> 256, more than L2: with groups innermost
 * each strip fetched them again, docs/kernels.md). */
static void conv_item(void* ctx, int64_t item, int participant) {
  const c3_job* J = ctx;
  const conv_geometry* g = J->g;
  const int64_t c = g->c, k = g->k, ow = g->out_w, ohw = J->ohw, os = ohw * 16;
  const int64_t strip = item % J->strips, grp = (item / J->strips) % J->groups,
                img = item / (J->groups * J->strips);
  const int64_t nb = group_blocks(k, grp);
  const int64_t y0 = strip * J->strip_rows,
                y1 = y0 + J->strip_rows < g->out_h ? y0 + J->strip_rows : g->out_h;
  const int64_t cbs = J->hp * J->ew * 16, rs = J->ew * 16;
  const float* in = J->copy + img * (c / 16) * cbs;
  /* direct: the input itself, (0, 0) at the padded plane's (pad_top, pad_left) */
  const int64_t dcbs = (int64_t)g->h * g->w * 16, drs = (int64_t)g->w * 16;
  const float* din = J->in + img * (c / 16) * dcbs - (g->pad_top * drs + g->pad_left * 16);
  float* out = J->out + (img * k + grp * C3_GROUP * 16) * ohw;
  const sdp_f32* ep = J->ep;
  c16_ep e = {.scale = NULL, .shift = NULL, .operand = NULL, .act = ACCEL_ACT_NONE, .lo = 0.0f,
              .hi = 0.0f};
  const float* operand = NULL;
  if (ep != NULL) {
    e.scale = ep->scale != NULL ? ep->scale + grp * C3_GROUP * 16 : NULL;
    e.shift = ep->shift != NULL ? ep->shift + grp * C3_GROUP * 16 : NULL;
    e.act = ep->act;
    e.lo = ep->clip_min;
    e.hi = ep->clip_max;
    if (ep->ew_op == ACCEL_EW_ADD) operand = ep->ew_operand + (img * k + grp * C3_GROUP * 16) * ohw;
  }
  /* The tail's lane sums, when this item holds it */
  const int tail_here = J->tail > 0 && y1 == g->out_h;
  float lanes[TAIL_MAX * C3_GROUP * 16 * 16] __attribute__((aligned(64)));
  float* cols = J->cols + (int64_t)participant * TAIL_MAX * 9 * c;
  if (tail_here) {
    tail_gather(J, img, cols);
    memset(lanes, 0, (size_t)(J->tail * nb * 16 * 16) * sizeof(float));
  }
  /* Per chunk of C3_CHUNK input channels, per panel (of 2 blocks at stride 1, 4 at stride 2),
   * row by row, tiles of up to 7 positions (stride 1) or 6 */
  const int64_t pb = panel_blocks(g), tile = pb == 2 ? 7 : 6;
  const int64_t blocked = ohw - J->tail; /* positions summed in 32-deep blocks */
  /* The next group's weights into L2, each strip a share spread over its tiles: in a network
   * they come from memory (~10 GB/s), and fetched on demand by the group's first strip they
   * stalled its tiles (docs/kernels.md, conv3x3_c16.c) */
  const char* pf = NULL;
  int64_t pf_left = 0, pf_step = 0;
  if (item + 1 < J->n_items) {
    const int64_t ng = (grp + 1) % J->groups, nnb = group_blocks(k, ng);
    const int64_t bytes = nnb * 16 * 9 * c * (int64_t)sizeof(float);
    const int64_t lines = (bytes + 63) / 64, l0 = lines * strip / J->strips,
                  l1 = lines * (strip + 1) / J->strips;
    pf = (const char*)(J->packed + ng * C3_GROUP * 16 * 9 * c) + l0 * 64;
    pf_left = l1 - l0;
    const int64_t calls = ((c + C3_CHUNK - 1) / C3_CHUNK) * ((nb + pb - 1) / pb) * (y1 - y0) *
                          ((ow + tile - 1) / tile);
    pf_step = (pf_left + calls - 1) / calls;
  }
  for (int64_t c0 = 0; c0 < c; c0 += C3_CHUNK) {
    const int64_t c1 = c0 + C3_CHUNK < c ? c0 + C3_CHUNK : c;
    for (int64_t q = 0; q < nb; q += pb) {
      const int64_t qn = nb - q < pb ? nb - q : pb;
      const float* w = J->packed + (grp * C3_GROUP + q) * 16 * 9 * c;
      c16_ep eq = e;
      if (eq.scale != NULL) eq.scale += q * 16;
      if (eq.shift != NULL) eq.shift += q * 16;
      for (int64_t y = y0; y < y1; ++y) {
        int64_t xe = blocked - y * ow; /* the row's blocked positions: [0, xe) */
        if (xe > ow) xe = ow;
        if (xe <= 0) continue;
        const int64_t tiles = (xe + tile - 1) / tile;
        const float* row = in + y * g->stride_h * rs;
        const float* drow = din + y * g->stride_h * drs;
        /* the kernel rows r that read input rows (not padding): all 3 unless a weight is
         * inf or NaN, whose product with a padding +0 is NaN as in conv_f32 */
        const int64_t iy = y * g->stride_h - g->pad_top;
        const int rlo = J->finite && iy < 0 ? (int)-iy : 0;
        const int rhi = J->finite && iy + 3 > g->h ? (int)(g->h - iy) : 3;
        for (int64_t t = 0; t < tiles; ++t) {
          const int64_t x0 = xe * t / tiles, x1 = xe * (t + 1) / tiles, at = (y * ow + x0) * 16;
          eq.operand = operand != NULL ? operand + q * os + at : NULL;
          kfn kf = pb == 2 ? ktab1[qn - 1][x1 - x0] : ktab2[qn - 1][x1 - x0];
          if (kf == a7_2_1 && J->edge_taps) {
            const int l = x0 == 0, r = x1 + 1 == g->pad_left + g->w;
            kf = l && r ? a7lr_2_1 : l ? a7l_2_1 : r ? a7r_2_1 : kf;
          }
          for (int64_t i = 0; i < pf_step && pf_left > 0; ++i, --pf_left, pf += 64)
            _mm_prefetch(pf, _MM_HINT_T1);
          if (J->direct && x0 > 0)
            kf(c, c0, c1, drow + x0 * g->stride_w * 16, dcbs, drs, w, out + q * os + at, os, rlo,
               rhi, ep != NULL ? &eq : NULL);
          else
            kf(c, c0, c1, row + x0 * g->stride_w * 16, cbs, rs, w, out + q * os + at, os, rlo,
               rhi, ep != NULL ? &eq : NULL);
        }
      }
      if (tail_here) tail_depths(J, grp, q, q + qn, cols, lanes, 9 * c0, 9 * c1);
    }
  }
  if (tail_here) {
    e.operand = NULL;
    tail_store(J, grp, lanes, ep != NULL ? &e : NULL, operand, out);
  }
}

/* Where the kernel measured slower than conv_f32 (docs/kernels.md): outputs of fewer than 64
 * positions (padding taps 18 % of a 7x7 plane's FMAs) from 256 or more input channels (a
 * group's 0.6-1.2 MB of weights streamed from L2 for every tile), 0.67-0.96x on ResNet's 7x7
 * layers; the run is converted around instead (0.1 MB each way). */
static int slower_than_nchw(const conv_geometry* g) {
  return (int64_t)g->out_h * g->out_w < 64 && g->c >= 256;
}

int conv_c16_3x3_fits(const conv_geometry* g, const sdp_f32* epilogue) {
  return geometry_fits(g) && conv_f32_dot_tail(g) >= 0 && !slower_than_nchw(g) &&
         g->pad_top <= 2 &&
         g->pad_left <= 2 && g->out_h > 0 && g->out_w > 0 && g->pixel_bytes == 0 &&
         c16_epilogue_fits(epilogue);
}

static size_t round64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

accel_status conv_c16_3x3(const conv_geometry* g, const float* in, const float* weights,
                          const void* prepacked, float* out, const sdp_f32* epilogue,
                          workspace* ws, int32_t num_threads) {
  const int64_t ohw = (int64_t)g->out_h * g->out_w;
  if (ohw == 0 || g->n == 0) return ACCEL_OK;
  if (num_threads < 1) num_threads = 1;
  if (num_threads > WS_THREAD_SLOTS) num_threads = WS_THREAD_SLOTS;
  const int64_t depth = 9 * (int64_t)g->c;
  const int64_t hp = (int64_t)(g->out_h - 1) * g->stride_h + 3;
  const int64_t wp = (int64_t)(g->out_w - 1) * g->stride_w + 3;
  const int64_t tail = conv_f32_dot_tail(g);
  const int64_t groups = (g->k + C3_GROUP * 16 - 1) / (C3_GROUP * 16);
  const int64_t srows = g->stride_w == 1 ? C3_STRIP1 : C3_STRIP;
  const int64_t strips = (g->out_h + srows - 1) / srows;
  const int64_t items = (int64_t)g->n * strips * groups;
  const int nth = (int)(items < num_threads ? items : num_threads);
  /* WS_C16_WEIGHTS: the packed weights (unless prepacked), the padded copy, the tail's depth
   * offsets and columns */
  const size_t wbytes = prepacked != NULL ? 0 : round64((size_t)(g->k * depth) * sizeof(float));
  int finite;
  if (prepacked != NULL) {
    c3_pack_header h;
    memcpy(&h, prepacked, sizeof h);
    finite = h.finite;
  } else {
    finite = all_finite(weights, (int64_t)g->k * depth);
  }
  const int direct = edge_only(g, finite);
  const int64_t edge = (C3_TILE - 1) * g->stride_w + 3; /* a first tile's columns */
  const int64_t ew = direct && edge < wp ? edge : wp;
  const int64_t copy_floats = (int64_t)g->n * (g->c / 16) * hp * ew * 16;
  const size_t cbytes = round64((size_t)copy_floats * sizeof(float));
  const size_t tbytes = tail > 0 ? round64((size_t)depth * sizeof(int64_t)) : 0;
  const size_t lbytes = tail > 0 ? (size_t)(nth * TAIL_MAX * depth) * sizeof(float) : 0;
  char* base = workspace_get(ws, WS_C16_WEIGHTS, wbytes + cbytes + tbytes + lbytes);
  if (base == NULL) return ACCEL_ERR_NO_MEMORY;
  int64_t* tap = (int64_t*)(base + wbytes + cbytes);
  c3_job J = {.g = g, .in = in, .weights = weights,
              .packed = prepacked != NULL
                            ? (float*)((const char*)prepacked + C3_PACK_HEADER)
                            : (float*)base,
              .copy = (float*)(base + wbytes), .tap = tap,
              .cols = (float*)(base + wbytes + cbytes + tbytes), .out = out, .ep = epilogue,
              .hp = hp, .wp = wp, .ohw = ohw, .groups = groups, .strips = strips, .tail = tail,
              .n_items = items, .strip_rows = srows, .ew = ew, .direct = direct, .finite = finite,
              .edge_taps = finite && g->stride_w == 1 && g->pad_left == 1,
              .pf0 = prepacked != NULL};
  if (tail > 0) /* depth (ci, r, s) at a position's tap (0, 0) of channel block 0 */
    for (int64_t dd = 0; dd < depth; ++dd) {
      const int64_t ci = dd / 9, r = dd % 9 / 3, s = dd % 3;
      tap[dd] = (ci / 16) * hp * wp * 16 + (r * wp + s) * 16 + ci % 16;
    }
  const int64_t setup = (int64_t)g->n * (g->c / 16);
  pool_for(setup < num_threads ? (int)setup : num_threads, setup, copy_item, &J);
  const int64_t panels = (g->k / 16 + panel_blocks(g) - 1) / panel_blocks(g);
  if (prepacked == NULL) pool_for(panels < num_threads ? (int)panels : num_threads, panels,
                                  pack_item, &J);
  pool_for(nth, items, conv_item, &J);
  return ACCEL_OK;
}

#endif /* __AVX512F__ (without it device.c runs no C16 kernel) */

int conv_c16_3x3_packs(const conv_geometry* g) { return geometry_fits(g); }

size_t conv_c16_3x3_packed_bytes(const conv_geometry* g) {
  return C3_PACK_HEADER + (size_t)g->k * g->c * 9 * sizeof(float);
}

void conv_c16_3x3_pack(const conv_geometry* g, const float* weights, void* packed) {
  const c3_pack_header h = {.magic = C3_PACK_MAGIC, .k = g->k, .c = g->c,
                            .panel = (int32_t)panel_blocks(g),
                            .finite = all_finite(weights, (int64_t)g->k * 9 * g->c)};
  memset(packed, 0, C3_PACK_HEADER);
  memcpy(packed, &h, sizeof h);
  for (int64_t p = 0; p * panel_blocks(g) * 16 < g->k; ++p)
    pack_panel(g, p, weights, (float*)((char*)packed + C3_PACK_HEADER));
}

int conv_c16_3x3_packed_matches(const conv_geometry* g, const void* packed) {
  c3_pack_header h;
  memcpy(&h, packed, sizeof h);
  return h.magic == C3_PACK_MAGIC && h.k == g->k && h.c == g->c && h.panel == panel_blocks(g);
}
