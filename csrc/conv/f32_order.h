/* conv/f32_order.h - the FP32 CONV's summation-order contract, which every implementation in
 * conv/f32_impls.c's list and every C16 kernel (conv_c16.c, conv3x3_c16.c, stem_c16.c,
 * winograd_c16.c's direct parts) keeps.
 *
 * An output's sum over its depth (c, r, s in that order, c the slowest) is taken in blocks of
 * SUM_BLOCK consecutive depth steps: each block is summed from zero by one fused multiply-add
 * per step, then added to the running total (the first block is the total). A long sequential
 * sum's rounding error grows with its length (EfficientNet-B0's 672-deep 1x1 projections lost
 * 2.5x PyTorch's precision, #13); in blocks of 32 it grows with 32 + depth / 32. Any coarser
 * blocking of the depth (the packed path's cache blocks, f32_depth_block) is a multiple of
 * SUM_BLOCK, so the 32-deep blocks start at the same depths whatever it is: cache blocking never
 * changes the bits.
 *
 * An image's last f32_dot_tail(g) output positions (below: a rule of the geometry alone) are
 * dot products instead: 16 lane partial sums run along the depth (lane l taking depths l,
 * l + 16, ..., one FMA each from zero, zeros past the depth, carried across the cache blocks,
 * not in 32-deep blocks) and are reduced in GCC's _mm512_reduce_add_ps order
 * ((l8..15 + l0..7), then (upper 4 + lower 4), then (t0 + t2) + (t1 + t3)). The packed path,
 * narrow_avx512 and gemm_avx2 compute them so, the C16 kernels too (c16_lanes_reduced, kernels.h: they
 * read conv_f32_dot_tail, which is f32_dot_tail where conv_f32 sums in this order and -1 on
 * a path of another order: depthwise, OpenBLAS).
 *
 * Depthwise kernels (one input channel per group) sum a window's taps r * kw + s in order,
 * one FMA each, from zero.
 *
 * So every output's order is the geometry's, whichever implementation runs: the list's choice
 * (which may depend on the host: the L1d size, f32_impls.c's l1_keeps_panel, ACCEL_L1D_BYTES
 * overriding it) or one forced by ACCEL_CONV_IMPL; the thread count never matters. An
 * implementation that cannot sum a geometry's tail as dot products (the implicit GEMM) does
 * not take geometries with one (f32_implicit_chosen is never true there), and one that can
 * (packed_avx512, gemm_avx2) sums the tail positions in 32-deep blocks like the others where
 * the rule says 0. The exceptions are the OpenBLAS paths (fc_blas: a batch of fully connected
 * rows on every build; blas: builds without AVX2 and FMA), in OpenBLAS's order.
 * tests/sim/test_conv_impls.py runs the paths with the L1d sizes other hosts report (32, 48,
 * 64 KiB) and compares the bits; sim/reference.py's conv2d_f32 mirrors the rule and the order
 * (conv_dot_tail, implicit_gemm_chosen), and tests/sim/test_conv_order.py holds it to every
 * forced implementation's bits on random geometries.
 */
#ifndef ACCEL_CONV_F32_ORDER_H_
#define ACCEL_CONV_F32_ORDER_H_

#include <stdint.h>

#include "kernels.h"

/* Depth steps an accumulator sums from zero before its block joins the running total. */
#define SUM_BLOCK 32

/* The most tail positions summed as dot products (an image's last ohw % 16 when at most TMAX;
 * more go through a masked panel vector like the others). */
enum { TMAX = 8 };

/* The packed path's depth block: kd split into the fewest blocks of at most kc_max, each
 * rounded up to a multiple of SUM_BLOCK (the whole depth when that exceeds it). */
static inline int64_t f32_depth_block(int64_t kd, int64_t kc_max) {
  const int64_t nb = (kd + kc_max - 1) / kc_max;
  const int64_t kc = ((kd + nb - 1) / nb + SUM_BLOCK - 1) & ~(int64_t)(SUM_BLOCK - 1);
  return kc > kd ? kd : kc;
}

/* The implicit GEMM's grid of a geometry (conv/f32_copy_avx512.c's padded, stride-phase-split
 * copy): wq columns per row of out_h rows (ncols positions, of which the first out_w of each
 * row are outputs), nph phases copied, direct where the input itself is the copy (1x1, stride
 * 1, no padding), sqmax the largest column shift of a tap. Portable: the tail rule reads it on
 * every build. */
typedef struct f32_grid {
  int64_t wq, ncols, nph, sqmax;
  int direct;
} f32_grid;

static inline f32_grid f32_implicit_grid(const conv_geometry* g) {
  const int64_t sh = g->stride_h, sw = g->stride_w;
  f32_grid q;
  q.sqmax = ((int64_t)(g->kernel_w - 1) * g->dilation_w) / sw;
  q.direct = g->kernel_h == 1 && g->kernel_w == 1 && sh == 1 && sw == 1 && g->pad_top == 0 &&
             g->pad_left == 0 && g->out_h == g->h && g->out_w == g->w;
  q.nph = g->kernel_h == 1 && g->kernel_w == 1 ? 1 : sh * sw; /* 1x1/2: one phase of four */
  if (q.direct) {
    q.wq = g->w;
  } else if (sw == 1) {
    /* Stride 1: rows overlap their padding. A row of wq >= w + pad_left columns ends in zeros;
     * a tap reading past it lands in the next row's left padding, zero as well, as long as
     * wq >= out_w + sqmax - pad_left. */
    const int64_t need = (int64_t)g->out_w + q.sqmax - g->pad_left;
    q.wq = (int64_t)g->w + g->pad_left > need ? (int64_t)g->w + g->pad_left : need;
    if (q.wq < g->out_w) q.wq = g->out_w;
  } else {
    q.wq = g->out_w + q.sqmax;
  }
  q.ncols = (int64_t)g->out_h * q.wq;
  return q;
}

/* Whether the implicit GEMM computes g at all: not depthwise nor a batch of fully connected
 * rows, strides up to 2, and a grid of at least a vector's width (or the input itself). */
static inline int f32_implicit_computes(const conv_geometry* g) {
  const int64_t cg = g->c / g->groups, ohw = (int64_t)g->out_h * g->out_w;
  if (cg == 1 || (ohw == 1 && g->n > 1) || g->stride_h > 2 || g->stride_w > 2) return 0;
  const f32_grid q = f32_implicit_grid(g);
  return q.direct || q.wq >= 16;
}

/* Whether the FP32 list takes the implicit GEMM for g (f32_implicit_avx512.c's applies: where
 * it measured faster than the packed panels): enough columns (tails cost a panel), few garbage
 * columns, a depth whose weight panel streams well from L2 (the packed path blocks it), and with
 * stride 2 only a small depth and every phase copied used (a 1x1/2 copies its one). With the
 * packed panels in L1 (panels_outer: a 48 KB L1d) the packed path wins the stride-2 phases from
 * 576 deep (docs/kernels.md), but only where it has no dot-product tail: for a geometry with
 * one, panels_outer does not change the answer, so the tail rule below is the geometry's on
 * every host. */
static inline int f32_implicit_chosen(const conv_geometry* g, int panels_outer) {
  if (!f32_implicit_computes(g)) return 0;
  const f32_grid q = f32_implicit_grid(g);
  const int64_t ohw = (int64_t)g->out_h * g->out_w;
  const int64_t kd = (int64_t)(g->c / g->groups) * g->kernel_h * g->kernel_w;
  const int all_phases = q.nph == 1 || (g->kernel_h >= g->stride_h &&
                                        g->kernel_w >= g->stride_w && g->dilation_h == 1 &&
                                        g->dilation_w == 1);
  const int packed_tail = ohw % 16 != 0 && ohw % 16 <= TMAX;
  const int64_t strided_max = panels_outer && !packed_tail ? 512 : 1024;
  return (q.wq - g->out_w) * 12 <= q.wq && q.ncols >= 512 && kd <= 2304 && all_phases &&
         (q.nph == 1 || kd <= strided_max);
}

/* The dot-product tail of a geometry: an image's last ohw % 16 positions where that is 1 to
 * TMAX (a classifier's row, a 7x7 or 14x14 plane, ViT's 197 tokens: fewer positions than half
 * a 16-lane vector, which dot products along the depth fill) and the list does not take the
 * implicit GEMM (which has no such tail), else 0. Not defined for depthwise geometries (their
 * taps in order) nor a batch of fully connected rows (OpenBLAS). */
static inline int f32_dot_tail(const conv_geometry* g) {
  const int64_t t = (int64_t)g->out_h * g->out_w % 16;
  return t > 0 && t <= TMAX && !f32_implicit_chosen(g, 0) ? (int)t : 0;
}

#endif /* ACCEL_CONV_F32_ORDER_H_ */
