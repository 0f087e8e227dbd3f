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
 * Where an implementation computes an output as a dot product instead (the packed path's last
 * ohw % 16 positions of an image when at most TMAX), 16 lane partial sums run along the depth
 * (lane l taking depths l, l + 16, ..., one FMA each, carried across the cache blocks, not in
 * 32-deep blocks) and are reduced in GCC's
 * _mm512_reduce_add_ps order: that tail's length is conv_f32_dot_tail(g) (0: no tail; -1: a
 * path of another order), which the C16 kernels read to reproduce it (c16_lanes_reduced,
 * kernels.h).
 *
 * Depthwise kernels sum a window's taps r * kw + s in order, one FMA each, from zero.
 *
 * Which implementation runs may depend on the host (the L1d size: f32_impls.c's
 * l1_keeps_panel; ACCEL_L1D_BYTES overrides it), never the thread count, and the bits never
 * depend on either. The host only picks between implementations whose sums are equal: the
 * implicit and packed paths sum alike except at the packed path's dot-product tail, so a
 * geometry with such a tail takes the implicit GEMM wherever its choice would depend on the
 * host (f32_implicit_avx512.c's implicit_applies); the depth blocks and depthwise row blocks
 * that the L1d chooses do not change the order. tests/sim/test_conv_impls.py runs the paths
 * with the L1d sizes other hosts report (32, 48, 64 KiB) and compares the bits.
 */
#ifndef ACCEL_CONV_F32_ORDER_H_
#define ACCEL_CONV_F32_ORDER_H_

#include <stdint.h>

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

#endif /* ACCEL_CONV_F32_ORDER_H_ */
