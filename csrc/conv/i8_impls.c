/* conv/i8_impls.c - the CONV engine in INT8: the implementations in the order they are tried,
 * and conv_i8, the loop over them.
 *
 * acc[k][pos] = sum over the window of (in - in_zero) * w, exact in int32 (padding reads as
 * in_zero: it contributes 0), then the SDP converters (sdp_i8_span) on every output, so fused
 * and independent runs give identical codes whatever the thread count and whichever
 * implementation runs (integer sums do not depend on the order).
 *
 * The list, chosen by measurement (figures: docs/kernels.md; each file says what its kernel
 * does): depthwise layers by output rows (dw_rows_vbmi) or through an int16 copy (dw_vnni);
 * explicit columns where they pay (im2col_vnni: batched fully connected layers, grids mostly
 * dropped columns, matrix-vector products); an RGB stem's taps packed densely (stem_vbmi); AMX
 * tiles where the CPU and OS grant them (amx); output channels along the vector for small
 * grids (small_vnni); the implicit GEMM (implicit_vnni); in builds with AVX2 (and without
 * AVX-512 VNNI for gemm16_avx2), groups of one input channel (depthwise) with vpmaddwd on
 * pairs of taps (dw_madd_avx2: in VNNI builds dw_vnni takes them first, so it runs there only
 * when forced; stem_madd_avx2, the same kernel on 2-4 channels a group, only when forced), then
 * stride-1 3x3 layers of one group and 32 channels or more as an exact integer Winograd
 * F(2x2, 3x3) (winograd16_avx2, without AVX-512 VNNI), stride-1 kxk layers on wide planes as a GEMM reading an int16 copy of the input in place
 * (implicit16_avx2), grouped and dense layers as a GEMM of int16 pairs (gemm16_avx2); and last
 * the portable direct loops (portable). ACCEL_CONV_IMPL=name runs `name` where it supports the
 * geometry; ACCEL_VERBOSE=1 prints the one that ran (conv/impl.c).
 *
 * Common to the VNNI kernels: the epilogue runs on each row of a finished tile while it is in L1,
 * after the tile's output runs are moved down over the dropped columns (memmove's rep movsb is slow
 * on such short overlapping moves); sdp_i8_avx512.c has exact fast paths for the common
 * converters. Where the common converter or the residual add applies to every channel in int32
 * lanes (sdp_i8_lanes.h, prepared once per call), GEMMs without dropped columns convert each
 * panel right after the micro-kernel, the other GEMM kernels each tile's channel rows (with the
 * residual operand read at the output's offset), the depthwise kernels each band (common
 * converter only), and small depthwise planes in registers: no sdp_i8_span call per row.
 * Packed weights (accel_conv_pack_weights, once in the generated code's loader; i8_pack.c):
 * packing on every call would cost as much as a deep layer's convolution.
 * Threads: every path's loops run on pool.c (the caller and whichever workers are awake
 * claim items; no barrier waits for a thread that is not running); an AMX item loads the tile
 * configuration on the thread that runs it and releases the tiles at its end. Scratch:
 * workspace slots 0..nth-1 per participant, WS_CONV_I8_FIRST (kernels.h) .. WS_LANES shared (the
 * depthwise tables and the channels' lane converters among them kept from run to run, the
 * converters checked against their arrays' contents on every call: i8_lanes_cached),
 * reserved before the loops.
 */
#include "conv/i8.h"

static const conv_i8_impl* const impls[] = {
#ifdef CONV_I8_VNNI
#ifdef __AVX512VBMI__
    &conv_i8_dw_rows_vbmi_impl,
#endif
    &conv_i8_dw_vnni_impl,
    &conv_i8_im2col_vnni_impl,
#ifdef __AVX512VBMI__
    &conv_i8_stem_vbmi_impl,
#endif
#ifdef CONV_I8_AMX
    &conv_i8_amx_impl,
#endif
    &conv_i8_small_vnni_impl,
    &conv_i8_implicit_vnni_impl,
#endif
#ifdef __AVX2__ /* after the VNNI ones, which take every geometry where they are built */
    &conv_i8_dw_madd_avx2_impl,
    &conv_i8_stem_madd_avx2_impl,
#endif
#if defined(__AVX2__) && !defined(CONV_I8_VNNI)
    &conv_i8_winograd16_avx2_impl, /* stride-1 3x3 layers packed for it: 2.25x fewer products */
    &conv_i8_implicit16_avx2_impl, /* stride-1 kxk layers: no columns */
    &conv_i8_gemm_avx2_impl, /* after any specialised kernel of the AVX2 build */
#endif
    &conv_i8_portable_impl, /* always applies */
};
enum { NIMPLS = sizeof impls / sizeof impls[0] };

/* The implementation a call runs: the forced one where it supports the call, else the first
 * that applies. */
static const conv_i8_impl* pick(const conv_i8_call* c) {
  const char* forced = conv_impl_forced();
  if (forced != NULL)
    for (int i = 0; i < NIMPLS; ++i)
      if (conv_impl_named(forced, impls[i]->name) &&
          (impls[i]->supports != NULL ? impls[i]->supports : impls[i]->applies)(c))
        return impls[i];
  for (int i = 0; i < NIMPLS - 1; ++i)
    if (impls[i]->applies(c)) return impls[i];
  return impls[NIMPLS - 1];
}

accel_status conv_i8(const conv_geometry* g, int32_t in_zero, const int8_t* in,
                     const int8_t* weights, const void* packed, int8_t* out,
                     const sdp_i8* epilogue, workspace* ws, int32_t num_threads) {
  plan P;
  make_plan(g, &P);
  conv_i8_call c = {.P = &P, .in_zero = in_zero, .in = in, .weights = weights, .raw = weights,
                    .i16 = NULL, .i16t = NULL, .i16w = NULL, .apack = NULL, .wsum = NULL,
                    .xpack = NULL, .xsum = NULL, .out = out,
                    .ep = epilogue, .ws = ws,
                    .nth = num_threads < 1                   ? 1
                           : num_threads > WS_THREAD_SLOTS ? WS_THREAD_SLOTS
                                                           : num_threads};
  if (packed != NULL) {
    pack_header h;
    memcpy(&h, packed, sizeof h);
    const int8_t* data = (const int8_t*)packed + HEADER;
    if (h.layout == LAYOUT_PLAIN) {
      c.raw = data;
    } else if (h.layout == LAYOUT_I16) {
      c.i16 = (const int32_t*)(const void*)data;
    } else if (h.layout == LAYOUT_I16T || h.layout == LAYOUT_I16W) {
      c.i16t = (const int32_t*)(const void*)data;
      if (h.layout == LAYOUT_I16W)
        c.i16w = (const int32_t*)(const void*)(data + data_bytes(&P, LAYOUT_I16T));
    } else {
      c.apack = data;
      c.wsum = (const int32_t*)(const void*)(data + h.data_bytes);
      if (h.layout == LAYOUT_AMX) {
        c.xpack = (const int8_t*)c.wsum + wsum_bytes(&P, LAYOUT_VNNI);
        c.xsum = (const int32_t*)(const void*)(c.xpack + amx_data_bytes(&P));
      }
    }
  }
  const conv_i8_impl* impl = pick(&c);
  if (conv_verbose()) conv_verbose_line("int8", g, impl->name);
  return impl->run(&c);
}
