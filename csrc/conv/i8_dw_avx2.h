/* conv/i8_dw_avx2.h - what the AVX2 int8 depthwise kernel's two paths share (conv/i8_dw_avx2.c:
 * the bands; conv/i8_dw_planes_avx2.c: small planes, eight channels in the lanes): the
 * channels' converters in registers and where a block's vectors go. Private to those files. */
#ifndef ACCEL_CONV_I8_DW_AVX2_H
#define ACCEL_CONV_I8_DW_AVX2_H

#include "conv/i8.h"
#include "sdp_i8_internal.h" /* SDP_I8_AVX2: the build whose LUT constants are the 8-lane forms' */

#ifdef __AVX2__
#include <immintrin.h>

/* Where a block's vectors go: FORM < 0, int32 into acc + p (converted later by
 * sdp_i8_span); else codes into cb + p through the channel's lane converter e
 * (sdp_i8_lanes.h: FORM its form, or DWA_FORM_ANY: eform, known at run time), 32 at a time
 * (missing vectors as 0: junk codes past the block, in the buffer's slack). A LUT activation
 * (lut: its plan in lanes, e the channel's t converter): DWA_FORM_LUT2 the direct form (2),
 * DWA_FORM_LUT eform (sdp_i8_lane_lut_form's); the LUT's codes need no clamp. */
enum { DWA_FORM_ANY = 9, DWA_FORM_LUT = 10, DWA_FORM_LUT2 = 11 };

typedef struct dwa_sink {
  int32_t* acc;
  int8_t* cb;
  const sdp_i8_lane_cvt* e;
  const sdp_i8_lane_lut* lut;
  int eform;
  int8_t lo, hi;
} dwa_sink;

static inline __attribute__((always_inline)) void dwa_emit(const int FORM, const int NV,
                                                          const __m256i* v, int64_t p,
                                                          const dwa_sink* k) {
  if (FORM < 0) {
    for (int j = 0; j < NV; ++j) _mm256_storeu_si256((__m256i*)(k->acc + p + 8 * j), v[j]);
    return;
  }
  if (FORM == DWA_FORM_LUT || FORM == DWA_FORM_LUT2) {
    for (int j = 0; j < NV; j += 4) {
      __m256i q[4];
      for (int i = 0; i < 4; ++i)
        q[i] = j + i >= NV ? _mm256_setzero_si256()
                           : sdp_i8_lanes8_lut(k->e, k->lut, v[j + i],
                                               FORM == DWA_FORM_LUT2 ? 2 : k->eform);
      _mm256_storeu_si256((__m256i*)(k->cb + p + 8 * j), sdp_i8_codes32(q[0], q[1], q[2], q[3]));
    }
    return;
  }
  const __m256i lo = _mm256_set1_epi8(k->lo), hi = _mm256_set1_epi8(k->hi);
  for (int j = 0; j < NV; j += 4) {
    __m256i q[4];
    for (int i = 0; i < 4; ++i)
      q[i] = j + i >= NV ? _mm256_setzero_si256()
             : FORM == DWA_FORM_ANY ? sdp_i8_lanes8_form(k->e, v[j + i], k->eform)
                                    : sdp_i8_lanes8_form(k->e, v[j + i], FORM);
    const __m256i c = _mm256_min_epi8(_mm256_max_epi8(sdp_i8_codes32(q[0], q[1], q[2], q[3]), lo), hi);
    _mm256_storeu_si256((__m256i*)(k->cb + p + 8 * j), c);
  }
}

/* The channels' converters in registers (dwa_lanes): cvt NULL where they convert by
 * convert_at (sdp_i8_span) after the sums. */
typedef struct dwa_cvt {
  const sdp_i8_lane_cvt* cvt; /* the channels' lane converters (a LUT's: its t converters) */
  const sdp_i8_lane_lut* lut; /* a LUT activation's plan in lanes (lut_consts), or NULL */
  int form;                   /* the common converter's form (rows_form) */
  int8_t lo, hi;              /* its codes' bounds */
  sdp_i8_lane_lut lut_consts;
} dwa_cvt;

/* Channel k's sink in registers (C->cvt not NULL): its form among dwa_emit's. */
static inline dwa_sink dwa_sink_of(const dwa_cvt* C, int64_t k, int8_t* cb, int* FORM) {
  const dwa_sink s = {.cb = cb, .e = C->cvt + k, .lut = C->lut,
                      .eform = C->lut != NULL ? sdp_i8_lane_lut_form(C->cvt + k) : C->form,
                      .lo = C->lo, .hi = C->hi};
  *FORM = C->lut != NULL ? (s.eform == 2 ? DWA_FORM_LUT2 : DWA_FORM_LUT)
          : C->form == 4 || C->form == 3 ? C->form : DWA_FORM_ANY;
  return s;
}

/* The channels' converters of the call in lanes (C->cvt), else C->cvt NULL (conv/i8_dw_avx2.c);
 * 0 when out of memory. */
int dwa_lanes(const plan* P, const sdp_i8* ep, workspace* ws, dwa_cvt* C);

/* A band's rows of codes, Eo apart in cb, to out, ow apart (ow <= Eo) (conv/i8_dw_avx2.c). */
void dwa_rows_out(const int8_t* cb, int64_t rows, int64_t ow, int64_t Eo, int8_t* out);

/* The layer on the small planes' path (conv/i8_dw_planes_avx2.c): 1 where its geometry is the
 * path's (one channel per group, a multiplier of 1, 8 channels or more, planes of at most
 * DWC_MAX_OUT outputs, a copy that fits), the call's status in *status; 0 where it is not (the
 * bands take it). */
int dwc_conv(const plan* P, int32_t in_zero, const int8_t* in, const int8_t* w, int8_t* out,
             const sdp_i8* ep, workspace* ws, int nth, accel_status* status);

#endif /* __AVX2__ */
#endif /* ACCEL_CONV_I8_DW_AVX2_H */
