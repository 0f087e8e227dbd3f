/* conv/i8_gemm_avx2.h - what the AVX2 INT8 GEMMs share (internal to conv/i8_gemm_avx2.c and
 * conv/i8_winograd_avx2.c): the 6 x 16 micro-kernel of int16 pairs, the job fields the channel
 * converters read, and the input copy as int16 pairs of channels in padded planes. */
#ifndef ACCEL_CONV_I8_GEMM_AVX2_H_
#define ACCEL_CONV_I8_GEMM_AVX2_H_

#include "conv/i8.h"
#include "sdp_i8_internal.h" /* SDP_I8_AVX2: the build has sdp_i8_lanes8_run */

#if defined(__AVX2__) && !defined(CONV_I8_VNNI)
#include <immintrin.h>

enum {
  G6_MR = 6,               /* output channels per micro-kernel call */
  G2_MIN_TILE = 48 * 1024  /* a tile's column bytes when the L2 does not say (a quarter of it) */
};

/* The micro-kernel (conv/i8_gemm_avx2.c), 6 x 8 NV positions: g6t_table[NV][rows](kc, ntaps,
 * p, as, b, off, bs, c, ldc, more, np, ps): c[m][i] (ldc apart) = (more: c's values +) the sum
 * over taps t < ntaps and pairs j < kc of p[m][t as + j MR] (a weight word) pair-multiplied by
 * word i of b + 2 off[t] + j bs (int16 units), modulo 2^32; np panels, each ps int16 of b and
 * 8 NV columns of c past the one before. */
typedef void (*g6t_fn)(int64_t, int64_t, const int32_t* const*, int64_t, const int16_t*,
                       const int64_t*, int64_t, int32_t*, int64_t, int, int64_t, int64_t);
extern const g6t_fn g6t_table[3][G6_MR + 1];

typedef struct g2_job {
  const plan* P;
  int32_t in_zero;
  const int8_t* in;
  const int8_t* in_end; /* past the input's last byte */
  const int32_t* w;     /* LAYOUT_I16 (not for one position per image) */
  const int8_t* raw;    /* the plain weights (one position per image) */
  int8_t* out;
  const sdp_i8* ep;
  char* const* bufs; /* per participant: the tile's columns, its int32 rows, two byte rows */
  int64_t kd2, nt, ntiles, mchunks, col_bytes, acc_bytes;
  int64_t kc; /* pairs per depth chunk (kd2: one chunk) */
  int64_t cg2; /* the weights' pairs: 0 LAYOUT_I16's, else LAYOUT_I16T's (cg2 a tap) */
  const sdp_i8_lane_cvt* cvt; /* every channel's converter in lanes, or NULL: sdp_i8_span */
  const sdp_i8_lane_add* add; /* with cvt: the residual add's constants, or NULL */
  sdp_i8_lane_add add_consts;
  const sdp_i8_lane_lut* lut; /* with cvt: a LUT activation's plan in lanes, or NULL */
  sdp_i8_lane_lut lut_consts;
  int form; /* the one lane form of every channel (sdp_i8_lane_form's, rows_form's with add) */
  int8_t lo, hi;
} g2_job;

/* Each of the call's nth threads its workspace slot of `bytes` (bufs[t]): 0 where one is not
 * to be had (the caller returns ACCEL_ERR_NO_MEMORY). */
static inline int g2_thread_buffers(workspace* ws, int nth, size_t bytes, char** bufs) {
  for (int t = 0; t < nth; ++t)
    if ((bufs[t] = workspace_get(ws, t, bytes)) == NULL) return 0;
  return 1;
}

/* Channel k's int32 row v (n values) into its codes at output offset `at`: in lanes with the
 * converters prepared once per call (no sdp_i8_span set-up per row), else sdp_i8_span. */
static inline void g2_convert(const g2_job* J, int64_t k, const int32_t* v, int64_t at,
                              int64_t n) {
#if SDP_I8_AVX2
  if (J->lut != NULL) {
    sdp_i8_lanes8_run_lut(J->cvt + k, J->lut, v, J->out + at, n);
    return;
  }
  if (J->cvt != NULL) {
    sdp_i8_lanes8_run(J->cvt + k, J->add, J->form, J->lo, J->hi, v,
                      J->add != NULL ? J->ep->ew_operand + at : NULL, J->out + at, n);
    return;
  }
#endif
  convert_at(J->ep, k, v, J->out, at, n);
}

/* J's converters in lanes for P's channels (none where a channel has no lane form); 0 when out
 * of memory (conv/i8_gemm_avx2.c). */
int g2_prepare_lanes(const plan* P, const sdp_i8* ep, workspace* ws, g2_job* J);

/* Plane `it` (= (image n * groups + group) * cg2 + pair p) of the input copied as int16 pairs
 * (in - in_zero) of the group's channels 2p and 2p + 1 (0 past the group's channels) into
 * x + it * pstride pairs: hp rows of wp pairs, the input's rows at [pad_top, pad_top + h) and
 * columns [pad_left, pad_left + w) (those that fit), 0 elsewhere and in the plane's slack
 * (conv/i8_gemm_avx2.c). */
void i16_pair_plane(const plan* P, const int8_t* in, int32_t in_zero, int64_t it, int64_t cg2,
                    int64_t hp, int64_t wp, int64_t pstride, int16_t* x);

#endif /* __AVX2__ && !CONV_I8_VNNI */
#endif
