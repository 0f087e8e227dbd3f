/* conv/i8_dw_avx2.c - INT8 CONV of few input channels per group with vpmaddwd on pairs of taps,
 * AVX2 builds (impls "dw_madd_avx2": depthwise, one input channel per group; "stem_madd_avx2":
 * 2 to DWA_MAX_CG input channels per group, an RGB stem, run only when forced: see
 * stem_applies).
 *
 * Output (y, x) of channel k is the sum over the group's input channels c and the taps (r, s)
 * of (in - in_zero) * w = sum of in * w - in_zero * sum of w, where padding reads as in_zero.
 * The kernel sums the raw values (int16, within [-128, 127], padding in_zero) and starts each
 * accumulator at -in_zero * (the channel's weight sum): no subtraction per element. Each int16
 * product is at most 128 * 128 in magnitude and vpmaddwd adds a pair in int32, so every sum is
 * exact (weights of -128 included); the sums wrap modulo 2^32 as the other kernels' (exact:
 * the true sum fits int32).
 *
 * The copy: each input row needed becomes a row of int16 values (a "plane row": the padded
 * row at column step csw) in the participant's buffer, the rows of one row phase (r*dh % sh)
 * in a plane, pads written once per call (the buffer is filled with in_zero; a row's image
 * columns are rewritten per row, never past them). Outputs are numbered p = y * Eo + x, a
 * band's output rows laid end to end with Eo - out_w junk columns each (computed, dropped):
 * every tap (r, s) is then its plane at a constant offset from p, so one loop runs over the
 * whole band in blocks of 64 outputs whatever the row width (7x7 planes too).
 *
 * vpmaddwd on 16 consecutive words at address a gives lane j the pair (a[2j], a[2j+1]):
 * - stride 2 ("direct"): the plane row is the padded row (csw 1, Eo = E / 2): at 2p + off,
 *   lane j holds taps s and s + 1 of output p + j: a term (s, s + 1) takes 8 outputs.
 * - other strides ("parity"): plane rows are one column phase (csw = sw; stride 1: the padded
 *   row itself, Eo = E): at p + off, lane j holds taps s and s + sw/dw of output p + 2j, at
 *   p + 1 + off of output p + 2j + 1; a term takes 16 outputs in two vectors, interleaved
 *   (unpack, permute) into order before the store.
 * A term is a pair of taps with the broadcast weight pair (w_a, w_b), a lone tap (w, 0): 3x3
 * kernels take 6 terms, 5x5 15, where the dilation breaks the pairs every tap is lone.
 *
 * Work items are bands of output rows of one image and group (about DWA_BAND outputs): the
 * band's plane rows of the group's input channels are built, then for each output channel of
 * the group the band's accumulators are computed and converted in registers where the
 * channels' converters have the lane form (sdp_i8_lanes.h) or, in the AVX2 build, a LUT
 * activation's (sdp_i8_lanes8_lut), their codes' rows copied to the output without the junk
 * columns; other converters (residual adds, a LUT before its plan exists or in an AVX-512
 * build): stored, moved down over the junk columns, and converted while in L1 (convert_at:
 * sdp_i8_span).
 */
#include "conv/i8.h"
#include "sdp_i8_internal.h" /* SDP_I8_AVX2: the build whose LUT constants are the 8-lane forms' */

#ifdef __AVX2__
#include <immintrin.h>

enum {
  DWA_MAX_CG = 4,  /* input channels per group: the stem's RGB(A); deeper groups: a GEMM */
  DWA_BAND = 2048, /* outputs per band: its accumulators and copy stay in L1 */
  DWA_SLACK = 128  /* accumulators past a band (blocks of 64) and words past the copy */
};

/* The geometry's planes, terms and copy sizes. */
typedef struct dwa_plan {
  int direct;       /* stride 2: see the file's comment */
  int64_t csw;      /* column step of a plane row in the padded row */
  int64_t nry, ncx; /* row phases, column phases */
  int64_t E, Eo;    /* words per plane row; outputs per output row in p */
  int64_t band;     /* output rows per band */
  int64_t hp;       /* plane rows per band: band + the largest row shift */
  int64_t plane;    /* words per plane: hp * E */
  int64_t cplane;   /* words per input channel: nry * ncx * plane */
  int64_t wb;       /* image columns of a plane row (csw 1) */
  int64_t nterms;
  int8_t ry[ACCEL_MAX_CONV_STRIDE]; /* row phase index -> row phase */
} dwa_plan;

typedef struct dwa_term {
  int64_t off;    /* words from the channel's copy to output 0's pair (direct: at 2p + off) */
  int32_t ta, tb; /* taps r * kernel_w + s; tb < 0: a lone tap */
} dwa_term;

static void dwa_make_plan(const plan* P, int nth, dwa_plan* D, dwa_term* terms) {
  const conv_geometry* g = P->g;
  const int64_t sh = g->stride_h, sw = g->stride_w, dh = g->dilation_h, dw = g->dilation_w;
  const int64_t R = g->kernel_h, S = g->kernel_w, ow = g->out_w;
  int8_t yslot[ACCEL_MAX_CONV_STRIDE];
  for (int64_t i = 0; i < ACCEL_MAX_CONV_STRIDE; ++i) yslot[i] = -1;
  D->nry = 0;
  for (int64_t r = 0; r < R; ++r)
    if (yslot[r * dh % sh] < 0) {
      yslot[r * dh % sh] = (int8_t)D->nry;
      D->ry[D->nry++] = (int8_t)(r * dh % sh);
    }
  D->direct = sw == 2;
  D->csw = D->direct ? 1 : sw;
  D->ncx = D->csw;
  const int64_t rq = (R - 1) * dh / sh;
  if (D->direct) {
    /* padded columns read: up to 2 (ow - 1) + (S - 1) dw; E even so that 2p = y E + 2x */
    D->E = (2 * (ow - 1) + (S - 1) * dw + 2) & ~(int64_t)1;
    D->Eo = D->E / 2;
  } else {
    D->E = ow + (S - 1) * dw / sw;
    D->Eo = D->E;
  }
  D->band = DWA_BAND / D->Eo;
  if (D->band < 1) D->band = 1;
  /* at least 4 items per participant where the rows allow (a stem is one group) */
  const int64_t planes = (int64_t)g->n * g->groups, want = 4 * (int64_t)nth;
  if (planes * ((g->out_h + D->band - 1) / D->band) < want) {
    const int64_t per = (want + planes - 1) / planes; /* bands per plane */
    const int64_t rows = (g->out_h + per - 1) / per;
    if (rows < D->band) D->band = rows;
  }
  if (D->band < 1) D->band = 1;
  if (D->band > g->out_h) D->band = g->out_h;
  D->hp = D->band + rq;
  D->plane = D->hp * D->E;
  D->cplane = D->nry * D->ncx * D->plane;
  int64_t wb = D->E - g->pad_left;
  if (wb > g->w) wb = g->w;
  D->wb = wb < 0 ? 0 : wb;
  /* terms: s pairs with s + step, its neighbour in the plane row */
  const int64_t step = D->direct ? (dw == 1) : (sw % dw == 0 ? sw / dw : 0);
  D->nterms = 0;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t s = 0; s < S; ++s) {
      if (step > 0 && (s / step) % 2 == 1) continue; /* the partner of s - step */
      const int64_t a = yslot[r * dh % sh], col = s * dw;
      dwa_term t;
      t.off = D->direct ? a * D->plane + r * dh / sh * D->E + col
                        : (a * D->ncx + col % sw) * D->plane + r * dh / sh * D->E + col / sw;
      t.ta = (int32_t)(r * S + s);
      t.tb = step > 0 && s + step < S ? (int32_t)(r * S + s + step) : -1;
      terms[D->nterms++] = t;
    }
}

/* An image row's n values into d as int16, never past d + n. */
static void dwa_image_row(const int8_t* row, int64_t n, int16_t* d) {
  if (n >= 16) {
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
      _mm256_storeu_si256((__m256i*)(d + j),
                          _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(row + j))));
    if (j < n) /* the last 16, overlapping */
      _mm256_storeu_si256((__m256i*)(d + n - 16),
                          _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(row + n - 16))));
  } else if (n >= 8) {
    _mm_storeu_si128((__m128i*)d, _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i*)row)));
    _mm_storeu_si128((__m128i*)(d + n - 8),
                     _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i*)(row + n - 8))));
  } else {
    for (int64_t j = 0; j < n; ++j) d[j] = row[j];
  }
}

/* The band's planes of input channel plane `src`: row phase a, column phase b, row i holds
 * input row (y0 + i) sh + ry[a] - pad_top at padded columns b + csw j. csw 1: the image
 * columns [pad_left, pad_left + wb) are written (the pads hold in_zero from the call's fill).
 * Image rows of 16 columns or more never write past them; shorter ones (where 16 bytes are
 * readable from the row and E - wb <= 16) write 16 values and then in_zero over the 16 words
 * after their image columns: their right pad and the next row's left pad, restored, and the
 * next row's columns, which it writes after. Padding rows write in_zero up to 15 words past
 * their image columns (into pads, later rows or the buffer's slack). */
static void dwa_build(const conv_geometry* g, const dwa_plan* D, const int8_t* src,
                      const int8_t* in_end, int16_t in_zero, int64_t y0, int16_t* copy) {
  const int64_t E = D->E, hp = D->hp, W = g->w, H = g->h, sh = g->stride_h;
  if (D->csw == 1) {
    const int64_t n = D->wb;
    const int short_rows = n == W && n < 16 && E - n <= 16;
    const __m256i z = _mm256_set1_epi16(in_zero);
    for (int64_t a = 0; a < D->nry; ++a) {
      int16_t* d = copy + a * D->plane + g->pad_left;
      int64_t iy = y0 * sh + D->ry[a] - g->pad_top;
      for (int64_t i = 0; i < hp; ++i, iy += sh, d += E) {
        if (iy < 0 || iy >= H) {
          for (int64_t j = 0; j < n; j += 16) _mm256_storeu_si256((__m256i*)(d + j), z);
          continue;
        }
        const int8_t* row = src + iy * W;
        if (short_rows && in_end - row >= 16) {
          _mm256_storeu_si256((__m256i*)d,
                              _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)row)));
          _mm256_storeu_si256((__m256i*)(d + n), z);
        } else {
          dwa_image_row(row, n, d);
        }
      }
    }
    return;
  }
  /* column phases of a stride of 3 or more: element by element */
  for (int64_t a = 0; a < D->nry; ++a)
    for (int64_t b = 0; b < D->ncx; ++b) {
      int16_t* d = copy + (a * D->ncx + b) * D->plane;
      for (int64_t i = 0; i < hp; ++i, d += E) {
        const int64_t iy = (y0 + i) * sh + D->ry[a] - g->pad_top;
        for (int64_t j = 0; j < E; ++j) {
          const int64_t ix = b + j * D->csw - g->pad_left;
          d[j] = iy >= 0 && iy < H && ix >= 0 && ix < W ? src[iy * W + ix] : in_zero;
        }
      }
    }
}

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

/* NB blocks of 16 outputs from p (parity): the even outputs' vector at p + off, the odd ones'
 * at p + 1 + off, interleaved into order. */
static inline __attribute__((always_inline)) void dwa_parity(
    const int FORM, const int NB, const int16_t* copy, int64_t cplane, int64_t cg,
    const dwa_term* terms, int64_t nterms, const int32_t* words, __m256i init, int64_t p,
    const dwa_sink* k) {
  __m256i e[4], o[4], v[8];
  for (int j = 0; j < NB; ++j) e[j] = o[j] = init;
  for (int64_t c = 0; c < cg; ++c) {
    const int16_t* cp = copy + c * cplane + p;
    const int32_t* wc = words + c * nterms;
    for (int64_t t = 0; t < nterms; ++t) {
      const __m256i wv = _mm256_set1_epi32(wc[t]);
      const int16_t* b = cp + terms[t].off;
      for (int j = 0; j < NB; ++j) {
        e[j] = _mm256_add_epi32(
            e[j], _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)(b + 16 * j)), wv));
        o[j] = _mm256_add_epi32(
            o[j], _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)(b + 16 * j + 1)), wv));
      }
    }
  }
  for (int j = 0; j < NB; ++j) {
    const __m256i lo = _mm256_unpacklo_epi32(e[j], o[j]); /* 0 1 2 3 | 8 9 10 11 */
    const __m256i hi = _mm256_unpackhi_epi32(e[j], o[j]); /* 4 5 6 7 | 12 13 14 15 */
    v[2 * j] = _mm256_permute2x128_si256(lo, hi, 0x20);
    v[2 * j + 1] = _mm256_permute2x128_si256(lo, hi, 0x31);
  }
  dwa_emit(FORM, 2 * NB, v, p, k);
}

/* NB blocks of 8 outputs from p (direct): at 2p + off. */
static inline __attribute__((always_inline)) void dwa_direct(
    const int FORM, const int NB, const int16_t* copy, int64_t cplane, int64_t cg,
    const dwa_term* terms, int64_t nterms, const int32_t* words, __m256i init, int64_t p,
    const dwa_sink* k) {
  __m256i s[8];
  for (int j = 0; j < NB; ++j) s[j] = init;
  for (int64_t c = 0; c < cg; ++c) {
    const int16_t* cp = copy + c * cplane + 2 * p;
    const int32_t* wc = words + c * nterms;
    for (int64_t t = 0; t < nterms; ++t) {
      const __m256i wv = _mm256_set1_epi32(wc[t]);
      const int16_t* b = cp + terms[t].off;
      for (int j = 0; j < NB; ++j)
        s[j] = _mm256_add_epi32(
            s[j], _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)(b + 16 * j)), wv));
    }
  }
  dwa_emit(FORM, NB, s, p, k);
}

/* The band's np outputs of one channel: blocks of 64 while more than 48 remain (the last may
 * run past the band: junk outputs, in the slack), then the fewest blocks of 16 (parity) or
 * 32 / 8 (direct). */
static inline __attribute__((always_inline)) void dwa_band(
    const int FORM, const dwa_plan* D, const int16_t* copy, int64_t cg, const dwa_term* terms,
    const int32_t* words, __m256i init, int64_t np, const dwa_sink* k) {
  const int64_t cp = D->cplane, nt = D->nterms;
  int64_t p = 0;
  if (D->direct) {
    for (; np - p > 48; p += 64) dwa_direct(FORM, 8, copy, cp, cg, terms, nt, words, init, p, k);
    for (; np - p > 16; p += 32) dwa_direct(FORM, 4, copy, cp, cg, terms, nt, words, init, p, k);
    for (; p < np; p += 8) dwa_direct(FORM, 1, copy, cp, cg, terms, nt, words, init, p, k);
  } else {
    for (; np - p > 48; p += 64) dwa_parity(FORM, 4, copy, cp, cg, terms, nt, words, init, p, k);
    if (np - p > 16) {
      dwa_parity(FORM, 2, copy, cp, cg, terms, nt, words, init, p, k);
      p += 32;
    }
    if (p < np) dwa_parity(FORM, 1, copy, cp, cg, terms, nt, words, init, p, k);
  }
}

/* A band's rows of codes, Eo apart in cb, to out, ow apart (ow < Eo). */
static void dwa_rows_out(const int8_t* cb, int64_t rows, int64_t ow, int64_t Eo, int8_t* out) {
  for (int64_t y = 0; y < rows; ++y) {
    const int8_t* s = cb + y * Eo;
    int8_t* d = out + y * ow;
    if (ow >= 16) {
      int64_t j = 0;
      for (; j + 16 <= ow; j += 16)
        _mm_storeu_si128((__m128i*)(d + j), _mm_loadu_si128((const __m128i*)(s + j)));
      if (j < ow)
        _mm_storeu_si128((__m128i*)(d + ow - 16), _mm_loadu_si128((const __m128i*)(s + ow - 16)));
    } else if (ow >= 8) {
      _mm_storel_epi64((__m128i*)d, _mm_loadl_epi64((const __m128i*)s));
      _mm_storel_epi64((__m128i*)(d + ow - 8), _mm_loadl_epi64((const __m128i*)(s + ow - 8)));
    } else {
      for (int64_t j = 0; j < ow; ++j) d[j] = s[j];
    }
  }
}

/* Output rows y = 1 .. rows - 1 from acc + y Eo to acc + y ow (Eo > ow), each moved down over
 * the junk columns before it, front to back (a row's destination ends before its source's
 * unread part: y ow + i < y Eo + i). Rows of 8 or more in vectors, loaded before they are
 * stored (the last, overlapping, reads values the first may have overwritten otherwise); the
 * accumulators' slack takes the reads past the last row. */
static void dwa_compact(int32_t* acc, int64_t rows, int64_t ow, int64_t Eo) {
  if (ow > 64) {
    for (int64_t y = 1; y < rows; ++y)
      memmove(acc + y * ow, acc + y * Eo, (size_t)ow * sizeof(int32_t));
    return;
  }
  for (int64_t y = 1; y < rows; ++y) {
    const int32_t* s = acc + y * Eo;
    int32_t* d = acc + y * ow;
    if (ow < 8) {
      /* 8 values where the 8 - ow past the row fall short of the next row's source */
      if (y * ow + 8 <= (y + 1) * Eo)
        _mm256_storeu_si256((__m256i*)d, _mm256_loadu_si256((const __m256i*)s));
      else
        for (int64_t i = 0; i < ow; ++i) d[i] = s[i];
      continue;
    }
    __m256i v[8];
    const int64_t nv = (ow + 7) / 8; /* the last vector ends at the row's end */
    for (int64_t i = 0; i < nv; ++i)
      v[i] = _mm256_loadu_si256((const __m256i*)(s + (i + 1 < nv ? 8 * i : ow - 8)));
    for (int64_t i = 0; i < nv; ++i)
      _mm256_storeu_si256((__m256i*)(d + (i + 1 < nv ? 8 * i : ow - 8)), v[i]);
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

/* The loop over the bands (pool_for items: image, group, band). */
typedef struct dwa_job {
  const plan* P;
  const dwa_plan* D;
  const dwa_term* terms;
  int32_t in_zero;
  const int8_t *in, *in_end;
  const int8_t* w;
  int8_t* out;
  const sdp_i8* ep;
  const dwa_cvt* C;
  char* const* bufs; /* per participant: the copy, the accumulators (or codes), the words */
  size_t copy_bytes, acc_bytes;
  int64_t bands;
} dwa_job;

static void dwa_item(void* ctx, int64_t item, int participant) {
  const dwa_job* J = ctx;
  const plan* P = J->P;
  const dwa_plan* D = J->D;
  const conv_geometry* g = P->g;
  char* buf = J->bufs[participant];
  int16_t* copy = (int16_t*)buf;
  int32_t* acc = (int32_t*)(buf + J->copy_bytes);
  int8_t* cb = (int8_t*)acc; /* the band's codes, Eo apart, where the converters are lanes */
  int32_t* words = (int32_t*)(buf + J->copy_bytes + J->acc_bytes);
  const int64_t band = item % J->bands, bg = item / J->bands;
  const int64_t b = bg / g->groups, grp = bg % g->groups;
  const int64_t y0 = band * D->band;
  const int64_t rows = g->out_h - y0 < D->band ? g->out_h - y0 : D->band;
  const int64_t cg = P->cg, ow = g->out_w, Eo = D->Eo, nterms = D->nterms;
  for (int64_t c = 0; c < cg; ++c)
    dwa_build(g, D, J->in + (b * g->c + grp * cg + c) * P->hw, J->in_end, (int16_t)J->in_zero,
              y0, copy + c * D->cplane);
  const int64_t np = rows * Eo; /* the band's outputs, junk columns included */
  for (int64_t j = 0; j < P->mg; ++j) {
    const int64_t k = grp * P->mg + j;
    const int8_t* wk = J->w + k * P->kd; /* [cg][kh][kw] */
    int64_t wsum = 0;
    for (int64_t i = 0; i < P->kd; ++i) wsum += wk[i];
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t t = 0; t < nterms; ++t) {
        const dwa_term* T = &J->terms[t];
        const uint32_t wa = (uint16_t)(int16_t)wk[c * P->rs + T->ta];
        const uint32_t wb = T->tb >= 0 ? (uint16_t)(int16_t)wk[c * P->rs + T->tb] : 0u;
        words[c * nterms + t] = (int32_t)(wa | wb << 16);
      }
    /* modulo 2^32, as the sums */
    const __m256i init = _mm256_set1_epi32((int32_t)(uint32_t)(-(int64_t)J->in_zero * wsum));
    if (J->C->cvt != NULL) { /* converted in registers */
      int form;
      const dwa_sink sink = dwa_sink_of(J->C, k, cb, &form);
      if (form == 4)
        dwa_band(4, D, copy, cg, J->terms, words, init, np, &sink);
      else if (form == 3)
        dwa_band(3, D, copy, cg, J->terms, words, init, np, &sink);
      else if (form == DWA_FORM_LUT2)
        dwa_band(DWA_FORM_LUT2, D, copy, cg, J->terms, words, init, np, &sink);
      else if (form == DWA_FORM_LUT)
        dwa_band(DWA_FORM_LUT, D, copy, cg, J->terms, words, init, np, &sink);
      else
        dwa_band(DWA_FORM_ANY, D, copy, cg, J->terms, words, init, np, &sink);
      dwa_rows_out(cb, rows, ow, Eo, J->out + ((b * g->k + k) * g->out_h + y0) * ow);
      continue;
    }
    const dwa_sink sink = {.acc = acc};
    dwa_band(-1, D, copy, cg, J->terms, words, init, np, &sink);
    if (Eo != ow) dwa_compact(acc, rows, ow, Eo);
    const int64_t at = ((b * g->k + k) * g->out_h + y0) * ow;
    convert_at(J->ep, k, acc, J->out, at, rows * ow);
  }
}

/* The channels' converters in lanes (sdp_i8_lanes.h) where every channel has the common
 * converter's lane form (|v| <= kd 255 128), kept from run to run (i8_lanes_cached), with the
 * form that serves them all (rows_form, conv/i8.h); in the AVX2 build, a LUT activation's plan
 * and its channels' t converters once per call (sdp_i8_lanes_prepare_lut, kept between calls:
 * through convert_at every band and channel set them up again, about 300 instructions, more
 * than the LUT of a 7x7 plane's 49 outputs, docs/kernels.md). Else C->cvt is NULL. 0 when out
 * of memory. */
static int dwa_lanes(const plan* P, const sdp_i8* ep, workspace* ws, dwa_cvt* C) {
  const int64_t k = P->g->k;
  C->cvt = NULL;
  C->lut = NULL;
#if SDP_I8_AVX2 /* an AVX-512 build's LUT constants are the 16-lane forms' */
  if (ep->lut != NULL) {
    if (ep->lut_plan == NULL) return 1; /* no plan yet (sdp_i8_lut.c): sdp_i8_span */
    sdp_i8_lane_cvt* cvt = workspace_get(ws, WS_CVT, (size_t)k * sizeof(sdp_i8_lane_cvt));
    if (cvt == NULL) return 0;
    if (sdp_i8_lanes_prepare_lut(ep, 0, (int32_t)k, P->kd * 255 * 128, cvt, &C->lut_consts)) {
      C->cvt = cvt;
      C->lut = &C->lut_consts;
    }
    return 1;
  }
#endif
  int kind;
  sdp_i8_lane_add unused;
  const sdp_i8_lane_cvt* cvt =
      i8_lanes_cached(ep, k, P->kd * 255 * 128, 0, ws, &kind, &C->lo, &C->hi, &unused);
  if (cvt == NULL) return 0;
  if (kind != 1) return 1;
  C->cvt = cvt;
  C->form = rows_form(cvt, k, 0);
  return 1;
}

/* ---- small planes: eight channels in the lanes -------------------------------------------
 * On a plane of a few hundred outputs (7x7, 14x14) the band loop's costs per channel (a band per
 * channel, its rows built one by one, the weight words, the junk columns: about 1,000
 * instructions per channel on 960x7 3x3, docs/kernels.md) outweigh its sums. Here eight
 * depthwise channels (one input and one output channel per group) share every instruction:
 * - the copy X: for each padded position (yp, xp) the plane reads, one vector of 16 words,
 *   lane c's pair (in_c[yp][xp], in_c[yp][xp + dw]) (at an even column stride the pairs start
 *   at even columns only, and X holds those); built per image row from a byte row B
 *   (B[xp] = the 8 channels' bytes at padded column xp, by an 8 x 16 byte transpose) with one
 *   unpack and one widening per position; padding rows are in_zero for the whole call;
 * - a term (r, s) & (r, s + 1) (or a lone tap with the pair (w, 0)) is the vector of the 8
 *   channels' weight pairs; output (y, x) adds vpmaddwd(X[y sh + r dh][x sw + s dw], term),
 *   every output the same sums as the band loop's (exact, in int32 modulo 2^32);
 * - 8 outputs at a time (their positions from a table; the last block ends at the plane's
 *   last output, overlapping the one before), converted there where every channel's converter
 *   has form 3 or 4 (dwc_lanes_codes: the 8 channels' constants in the lanes, the codes
 *   transposed as bytes), else their 8 x 8 accumulators transposed into each channel's row,
 *   which the channel's converter turns into codes (in lanes, else convert_at) written to its
 *   output plane. */
enum {
  DWC_MAX_OUT = 256,       /* outputs per plane for this path (14x14; 28x28 takes the bands) */
  DWC_MAX_COPY = 64 << 10  /* bytes of X (L1 and a half) */
};

typedef struct dwc_plan {
  int64_t hp, wx;      /* padded rows the plane reads, vectors per row of X (cs 1: even) */
  int64_t cs;          /* padded columns per vector of X: 2 at an even column stride */
  int64_t bn;          /* positions of the byte row B */
  int64_t nblk, arow;  /* blocks of 8 outputs; int32 values per channel row (multiple of 32) */
  int64_t nterms;
  size_t x_bytes, b_bytes, w_bytes, a_bytes, c_bytes;
} dwc_plan;

typedef struct dwc_term {
  int64_t off;     /* words from an output's position in X */
  int32_t ta, tb;  /* taps r * kernel_w + s; tb < 0: a lone tap */
} dwc_term;

/* The plane's sizes, terms and positions (pos: words from X to output p's pair, nblk * 8 of
 * them); 0 where this path does not take the geometry. */
static int dwc_make_plan(const plan* P, dwc_plan* D) {
  const conv_geometry* g = P->g;
  if (P->cg != 1 || P->mg != 1 || g->k < 8 || P->ohw > DWC_MAX_OUT) return 0;
  D->hp = (g->out_h - 1) * g->stride_h + (g->kernel_h - 1) * g->dilation_h + 1;
  const int64_t wp = (g->out_w - 1) * g->stride_w + (g->kernel_w - 1) * g->dilation_w + 1;
  /* an even column stride reads pairs from even columns only (x sw + s dw, s even): X holds
   * those, half the vectors to build */
  D->cs = g->stride_w % 2 == 0 ? 2 : 1;
  D->wx = D->cs == 2 ? (wp + 1) / 2 : (wp + 1) & ~(int64_t)1;
  D->x_bytes = round64((size_t)(D->hp * D->wx) * 32);
  if (D->x_bytes > DWC_MAX_COPY) return 0;
  /* B: X's columns and their partners (wx + dw + 1: pairs of positions per load), and the
   * image row's 16-column blocks from pad_left */
  int64_t bn = D->cs * D->wx + g->dilation_w + 1;
  const int64_t img = g->pad_left + (g->w > 16 ? g->w : 16);
  if (img > bn) bn = img;
  D->bn = bn;
  D->b_bytes = round64((size_t)bn * 8);
  D->nblk = (P->ohw + 7) / 8;
  D->arow = (D->nblk * 8 + 31) & ~(int64_t)31;
  D->nterms = 0;
  for (int64_t s = 0; s < g->kernel_w; s += 2) D->nterms += 1;
  D->nterms *= g->kernel_h;
  D->w_bytes = round64((size_t)D->nterms * 32 + 32);
  D->a_bytes = round64((size_t)(8 * D->arow) * sizeof(int32_t));
  D->c_bytes = round64((size_t)D->arow + 32 + (size_t)(8 * (P->kd + 3)));
  return 1;
}

/* The first output of block blk: 8 blk, the last block ending at the plane's last output
 * (overlapping the one before: its outputs computed twice, the same values) where the plane
 * has 8 or more; else 0 (the block repeats the last output). */
static inline int64_t dwc_block(int64_t ohw, int64_t blk) {
  return ohw < 8 ? 0 : 8 * blk < ohw - 8 ? 8 * blk : ohw - 8;
}

static void dwc_terms(const conv_geometry* g, const dwc_plan* D, dwc_term* terms, int64_t* pos) {
  const int64_t R = g->kernel_h, S = g->kernel_w;
  int64_t n = 0;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t s = 0; s < S; s += 2) {
      terms[n].off = (r * g->dilation_h * D->wx + s * g->dilation_w / D->cs) * 16;
      terms[n].ta = (int32_t)(r * S + s);
      terms[n].tb = s + 1 < S ? (int32_t)(r * S + s + 1) : -1;
      ++n;
    }
  const int64_t ohw = g->out_h * g->out_w;
  for (int64_t blk = 0; blk < D->nblk; ++blk)
    for (int64_t j = 0; j < 8; ++j) {
      int64_t q = dwc_block(ohw, blk) + j;
      if (q > ohw - 1) q = ohw - 1;
      const int64_t y = q / g->out_w, x = q % g->out_w;
      pos[blk * 8 + j] = (y * g->stride_h * D->wx + x * g->stride_w / D->cs) * 16;
    }
}

/* 16 columns of 8 rows (bytes) into 16 positions of 8 bytes each at d; the columns where
 * `keep` is 0 become z (a row shorter than 16: its right pad). */
static inline void dwc_transpose16(const int8_t* const* rows, int64_t at, __m128i keep, __m128i z,
                                   int8_t* d) {
  __m128i r[8], a[8], b[8];
  for (int c = 0; c < 8; ++c)
    r[c] = _mm_blendv_epi8(z, _mm_loadu_si128((const __m128i*)(rows[c] + at)), keep);
  for (int c = 0; c < 4; ++c) {
    a[2 * c] = _mm_unpacklo_epi8(r[2 * c], r[2 * c + 1]);     /* x0..7: c, c + 1 */
    a[2 * c + 1] = _mm_unpackhi_epi8(r[2 * c], r[2 * c + 1]); /* x8..15 */
  }
  for (int h = 0; h < 2; ++h) { /* channels 0-3 (h 0), 4-7 (h 1) */
    b[4 * h] = _mm_unpacklo_epi16(a[4 * h], a[4 * h + 2]);     /* x0..3 */
    b[4 * h + 1] = _mm_unpackhi_epi16(a[4 * h], a[4 * h + 2]); /* x4..7 */
    b[4 * h + 2] = _mm_unpacklo_epi16(a[4 * h + 1], a[4 * h + 3]);
    b[4 * h + 3] = _mm_unpackhi_epi16(a[4 * h + 1], a[4 * h + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    _mm_storeu_si128((__m128i*)(d + 32 * i), _mm_unpacklo_epi32(b[i], b[4 + i]));
    _mm_storeu_si128((__m128i*)(d + 32 * i + 16), _mm_unpackhi_epi32(b[i], b[4 + i]));
  }
}

/* The 8 accumulators of positions p..p+7 (lanes: channels) transposed into the channels' rows
 * a + c * arow + p. */
static inline void dwc_store8x8(const __m256i* v, int32_t* a, int64_t arow, int64_t p) {
  __m256i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {
    u[4 * h] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
    u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    _mm256_storeu_si256((__m256i*)(a + c * arow + p), _mm256_permute2x128_si256(u[c], u[4 + c], 0x20));
    _mm256_storeu_si256((__m256i*)(a + (c + 4) * arow + p),
                        _mm256_permute2x128_si256(u[c], u[4 + c], 0x31));
  }
}

typedef struct dwc_job {
  const plan* P;
  const dwc_plan* D;
  const dwc_term* terms;
  const int64_t* pos;
  int32_t in_zero;
  const int8_t *in, *in_end, *w;
  int8_t* out;
  const sdp_i8* ep;
  const dwa_cvt* C;
  char* const* bufs; /* per participant: X, B, the terms' weights, the rows, the codes */
  int64_t cgroups;   /* groups of 8 channels per image */
} dwc_job;

/* Channel k's row of ohw accumulators a into its output plane. */
static inline __attribute__((always_inline)) void dwc_codes(const int FORM, const dwc_job* J,
                                                            const dwa_sink* sink,
                                                            const int32_t* a, int8_t* cb,
                                                            int8_t* out) {
  const int64_t ohw = J->P->ohw;
  for (int64_t p = 0; p < ohw; p += 32) {
    __m256i v[4];
    for (int j = 0; j < 4; ++j) v[j] = _mm256_loadu_si256((const __m256i*)(a + p + 8 * j));
    dwa_emit(FORM, 4, v, p, sink);
  }
  dwa_rows_out(cb, 1, ohw, ohw, out);
}

/* Codes with the channels in the lanes. Where every channel converts by form 3 or 4 (the
 * conv converters, sdp_i8_lanes.h, whose comments state their identities; sdp_i8_lanes8_form
 * applies them with one channel's constants broadcast), a block's 8 accumulators (one output
 * position each, the 8 channels in the lanes) convert where they are with each lane's own
 * channel constants (the same steps; the shift per lane by vpsravd, equal to vpsrad's for
 * every count), and their codes are transposed as bytes: no 8 x 8 transpose of int32 values
 * and no pass per channel over a stored row (about 40 % of a 960x7 3x3 call's instructions
 * before, docs/kernels.md). */
typedef struct dwc_lanes {
  __m256i bias, add, mulh, mul, shift, zero, lo, hi;
} dwc_lanes;

/* The constants of channels k0 .. k0 + 7 (past the last: the last's). */
static void dwc_lanes_of(const dwa_cvt* C, int64_t k0, int64_t K, dwc_lanes* L) {
  int32_t bias[8], add[8], mulh[8], mul[8], shift[8], zero[8];
  for (int c = 0; c < 8; ++c) {
    const sdp_i8_lane_cvt* e = C->cvt + (k0 + c < K ? k0 + c : K - 1);
    /* form 4 adds `add`; form 3 rounds by 2^(shift - 1) there (sdp_i8_lanes8_form) */
    add[c] = C->form == 4 ? e->add : (int32_t)(1u << (e->shift - 1));
    bias[c] = e->bias, mulh[c] = (int32_t)((uint32_t)e->mul << 16), mul[c] = e->mul;
    shift[c] = e->shift, zero[c] = e->zero;
  }
  L->bias = _mm256_loadu_si256((const __m256i*)bias);
  L->add = _mm256_loadu_si256((const __m256i*)add);
  L->mulh = _mm256_loadu_si256((const __m256i*)mulh);
  L->mul = _mm256_loadu_si256((const __m256i*)mul);
  L->shift = _mm256_loadu_si256((const __m256i*)shift);
  L->zero = _mm256_loadu_si256((const __m256i*)zero);
  L->lo = _mm256_set1_epi8(C->lo);
  L->hi = _mm256_set1_epi8(C->hi);
}

/* q of one output position's 8 channels (before the int8 saturation): form 4 or 3. */
static inline __attribute__((always_inline)) __m256i dwc_lanes_q(const int FORM, const dwc_lanes* L,
                                                                 __m256i v) {
  const __m256i t = _mm256_add_epi32(v, L->bias);
  const __m256i a = FORM == 3 ? _mm256_abs_epi32(t) : t;
  const __m256i hp = _mm256_add_epi32(L->add, _mm256_madd_epi16(a, L->mulh));
  const __m256i lp = _mm256_mulhi_epu16(a, L->mul);
  const __m256i r = _mm256_srav_epi32(_mm256_add_epi32(hp, lp), L->shift);
  return FORM == 3 ? _mm256_add_epi32(L->zero, _mm256_sign_epi32(r, t)) : r;
}

/* The codes of outputs p .. p + 7 of the 8 channels (v: one vector a position) to outs[c] + p:
 * saturated to int8 as sdp_i8_codes32, clamped to [lo, hi], transposed as bytes. */
static inline __attribute__((always_inline)) void dwc_lanes_codes(const int FORM,
                                                                  const dwc_lanes* L,
                                                                  const __m256i* v,
                                                                  int8_t* const* outs, int64_t p) {
  __m256i q[8];
  for (int j = 0; j < 8; ++j) q[j] = dwc_lanes_q(FORM, L, v[j]);
  /* per 128-bit lane: byte 4 j + c holds position j's code of channel c (c4 .. c7 in the
   * upper lane); the shuffle makes it 4 c + j, and the unpacks put each channel's 8 codes in
   * one 64-bit half */
  const __m256i order = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
                                         0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  __m256i x = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  __m256i y = _mm256_packs_epi16(_mm256_packs_epi32(q[4], q[5]), _mm256_packs_epi32(q[6], q[7]));
  x = _mm256_shuffle_epi8(_mm256_min_epi8(_mm256_max_epi8(x, L->lo), L->hi), order);
  y = _mm256_shuffle_epi8(_mm256_min_epi8(_mm256_max_epi8(y, L->lo), L->hi), order);
  const __m256i a = _mm256_unpacklo_epi32(x, y); /* c0 c1 | c4 c5 */
  const __m256i b = _mm256_unpackhi_epi32(x, y); /* c2 c3 | c6 c7 */
  const __m128i h[4] = {_mm256_castsi256_si128(a), _mm256_castsi256_si128(b),
                         _mm256_extracti128_si256(a, 1), _mm256_extracti128_si256(b, 1)};
  for (int i = 0; i < 4; ++i) { /* channels 2 i and 2 i + 1 */
    _mm_storel_epi64((__m128i*)(outs[2 * i] + p), h[i]);
    _mm_storeh_pi((__m64*)(void*)(outs[2 * i + 1] + p), _mm_castsi128_ps(h[i])); /* movhps: unaligned */
  }
}

/* Every block's sums (8 outputs, dwc_block's), then FORM < 0: transposed into the channels'
 * rows of A; else their codes to outs (dwc_lanes_codes). */
static inline __attribute__((always_inline)) void dwc_blocks(const int FORM, const dwc_job* J,
                                                             const int16_t* X, const __m256i* W,
                                                             __m256i vinit, const dwc_lanes* L,
                                                             int8_t* const* outs, int32_t* A) {
  const dwc_plan* D = J->D;
  const int64_t nt = D->nterms, ohw = J->P->ohw;
  for (int64_t blk = 0; blk < D->nblk; ++blk) {
    const int64_t* q = J->pos + blk * 8;
    const int16_t *x0 = X + q[0], *x1 = X + q[1], *x2 = X + q[2], *x3 = X + q[3];
    const int16_t *x4 = X + q[4], *x5 = X + q[5], *x6 = X + q[6], *x7 = X + q[7];
    /* opaque to gcc, which otherwise adds X + q[j] + off per load (an lea each) */
    __asm__("" : "+r"(x0), "+r"(x1), "+r"(x2), "+r"(x3), "+r"(x4), "+r"(x5), "+r"(x6), "+r"(x7));
    __m256i v[8];
    for (int j = 0; j < 8; ++j) v[j] = vinit;
    for (int64_t t = 0; t < nt; ++t) {
      const int64_t o = J->terms[t].off;
      const __m256i wt = _mm256_load_si256(W + t);
#define DWC_ADD(j) \
  v[j] = _mm256_add_epi32(v[j], _mm256_madd_epi16(_mm256_load_si256((const __m256i*)(x##j + o)), wt));
      DWC_ADD(0) DWC_ADD(1) DWC_ADD(2) DWC_ADD(3) DWC_ADD(4) DWC_ADD(5) DWC_ADD(6) DWC_ADD(7)
#undef DWC_ADD
    }
    if (FORM < 0)
      dwc_store8x8(v, A, D->arow, dwc_block(ohw, blk));
    else
      dwc_lanes_codes(FORM, L, v, outs, dwc_block(ohw, blk));
  }
}

static void dwc_item(void* ctx, int64_t item, int participant) {
  const dwc_job* J = ctx;
  const plan* P = J->P;
  const dwc_plan* D = J->D;
  const conv_geometry* g = P->g;
  const int64_t b = item / J->cgroups, k0 = item % J->cgroups * 8, K = g->k;
  char* buf = J->bufs[participant];
  int16_t* X = (int16_t*)buf;
  int8_t* B = (int8_t*)(buf + D->x_bytes);
  __m256i* W = (__m256i*)(void*)(buf + D->x_bytes + D->b_bytes);
  int32_t* A = (int32_t*)(buf + D->x_bytes + D->b_bytes + D->w_bytes);
  int8_t* cb = (int8_t*)(buf + D->x_bytes + D->b_bytes + D->w_bytes + D->a_bytes);
  /* lanes past the last channel repeat it (computed, not written) */
  const int8_t* plane[8];
  const int8_t* wk[8];
  for (int c = 0; c < 8; ++c) {
    const int64_t k = k0 + c < K ? k0 + c : K - 1;
    plane[c] = J->in + (b * g->c + k) * P->hw;
    wk[c] = J->w + k * P->kd;
  }
  /* the terms' weight pairs (a term's taps ta and ta + 1: one 32-bit gather from each
   * channel's weights, bytes 0 and 1 widened) and the accumulators' start, -in_zero x the
   * weight sum (the pairs' sums by vpmaddwd). The channels' weights are consecutive (kd each);
   * where the gathers' 3 bytes past a group's last tap could leave the array, a padded copy. */
  const int64_t kd = P->kd;
  const int8_t* wsrc = J->w + k0 * kd;
  int64_t wstep = kd;
  if (k0 + 8 > K || (K - k0) * kd < 8 * kd + 3) {
    int8_t* wb = (int8_t*)cb; /* free until the codes: 8 (kd + 3) bytes (c_bytes) */
    for (int c = 0; c < 8; ++c) {
      for (int64_t i = 0; i < kd; ++i) wb[c * (kd + 3) + i] = wk[c][i];
      wb[c * (kd + 3) + kd] = wb[c * (kd + 3) + kd + 1] = wb[c * (kd + 3) + kd + 2] = 0;
    }
    wsrc = wb;
    wstep = kd + 3;
  }
  const __m256i widx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                          _mm256_set1_epi32((int32_t)wstep));
  __m256i wsum = _mm256_setzero_si256();
  for (int64_t t = 0; t < D->nterms; ++t) {
    const dwc_term* T = &J->terms[t];
    const __m256i x = _mm256_i32gather_epi32((const int*)(const void*)(wsrc + T->ta), widx, 1);
    const __m256i lo = _mm256_srai_epi32(_mm256_slli_epi32(x, 24), 24);
    const __m256i hi = T->tb >= 0
                           ? _mm256_slli_epi32(_mm256_srai_epi32(_mm256_slli_epi32(x, 16), 24), 16)
                           : _mm256_setzero_si256();
    const __m256i pair = _mm256_blend_epi16(lo, hi, 0xAA);
    wsum = _mm256_add_epi32(wsum, _mm256_madd_epi16(pair, _mm256_set1_epi16(1)));
    _mm256_store_si256(W + t, pair);
  }
  const __m256i vinit = _mm256_mullo_epi32(wsum, _mm256_set1_epi32(-J->in_zero));
  /* X's image rows (padding rows: in_zero from the call's fill) */
  const int64_t W8 = g->w, dw = g->dilation_w;
  const __m128i zb = _mm_set1_epi8((int8_t)J->in_zero), all = _mm_set1_epi8(-1);
  const __m128i keep = _mm_cmpgt_epi8(_mm_set1_epi8((int8_t)(W8 < 16 ? W8 : 16)),
                                      _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  for (int64_t yp = 0; yp < D->hp; ++yp) {
    const int64_t iy = yp - g->pad_top;
    if (iy < 0 || iy >= g->h) continue;
    const int8_t* rows[8];
    int8_t tmp[8][16];
    for (int c = 0; c < 8; ++c) rows[c] = plane[c] + iy * W8;
    if (W8 >= 16) {
      int64_t x = 0;
      for (; x + 16 <= W8; x += 16) dwc_transpose16(rows, x, all, zb, B + (g->pad_left + x) * 8);
      if (x < W8) dwc_transpose16(rows, W8 - 16, all, zb, B + (g->pad_left + W8 - 16) * 8);
    } else {
      /* the image's last rows (plane[7] is the last channel's): 16 readable bytes from a copy */
      if (J->in_end - rows[7] < 16) {
        for (int c = 0; c < 8; ++c) {
          memset(tmp[c], 0, 16);
          memcpy(tmp[c], rows[c], (size_t)W8);
          rows[c] = tmp[c];
        }
      }
      /* the 16 - W columns past the image: in_zero, the right pad */
      dwc_transpose16(rows, 0, keep, zb, B + g->pad_left * 8);
    }
    int16_t* xr = X + yp * D->wx * 16;
    if (D->cs == 2) { /* vector j: padded column 2 j and its partner */
      for (int64_t j = 0; j < D->wx; ++j) {
        const __m128i lo = _mm_loadl_epi64((const __m128i*)(B + 2 * j * 8));
        const __m128i hi = _mm_loadl_epi64((const __m128i*)(B + (2 * j + dw) * 8));
        _mm256_store_si256((__m256i*)(xr + j * 16), _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(lo, hi)));
      }
      continue;
    }
    for (int64_t xp = 0; xp < D->wx; xp += 2) {
      const __m128i lo = _mm_loadu_si128((const __m128i*)(B + xp * 8));
      const __m128i hi = _mm_loadu_si128((const __m128i*)(B + (xp + dw) * 8));
      _mm256_store_si256((__m256i*)(xr + xp * 16), _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(lo, hi)));
      _mm256_store_si256((__m256i*)(xr + xp * 16 + 16),
                         _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(lo, hi)));
    }
  }
  /* the sums, 8 outputs at a time: converted where they are (channels in lanes), or
   * transposed into the channels' rows and converted per channel below */
  const int64_t nk = K - k0 < 8 ? K - k0 : 8;
  if (J->C->cvt != NULL && J->C->lut == NULL && (J->C->form == 3 || J->C->form == 4) &&
      P->ohw >= 8) {
    dwc_lanes L;
    int8_t* outs[8];
    for (int c = 0; c < 8; ++c) /* lanes past the last channel: codes into A (unused here) */
      outs[c] = c < nk ? J->out + (b * K + k0 + c) * P->ohw : (int8_t*)A;
    dwc_lanes_of(J->C, k0, K, &L);
    if (J->C->form == 4)
      dwc_blocks(4, J, X, W, vinit, &L, outs, A);
    else
      dwc_blocks(3, J, X, W, vinit, &L, outs, A);
    return;
  }
  dwc_blocks(-1, J, X, W, vinit, NULL, NULL, A);
  /* the codes */
  for (int64_t c = 0; c < nk; ++c) {
    const int64_t k = k0 + c;
    int8_t* out = J->out + (b * K + k) * P->ohw;
    const int32_t* a = A + c * D->arow;
    if (J->C->cvt == NULL) {
      convert_at(J->ep, k, a, J->out, (b * K + k) * P->ohw, P->ohw);
      continue;
    }
    int form;
    const dwa_sink sink = dwa_sink_of(J->C, k, cb, &form);
    if (form == 4)
      dwc_codes(4, J, &sink, a, cb, out);
    else if (form == 3)
      dwc_codes(3, J, &sink, a, cb, out);
    else if (form == DWA_FORM_LUT2)
      dwc_codes(DWA_FORM_LUT2, J, &sink, a, cb, out);
    else if (form == DWA_FORM_LUT)
      dwc_codes(DWA_FORM_LUT, J, &sink, a, cb, out);
    else
      dwc_codes(DWA_FORM_ANY, J, &sink, a, cb, out);
  }
}

static accel_status conv_dwc(const plan* P, const dwc_plan* D, int32_t in_zero, const int8_t* in,
                             const int8_t* w, int8_t* out, const sdp_i8* ep, workspace* ws,
                             int nth) {
  const conv_geometry* g = P->g;
  dwc_term* terms = workspace_get(ws, WS_OFF, (size_t)D->nterms * sizeof(dwc_term) +
                                                  (size_t)D->nblk * 8 * sizeof(int64_t));
  if (terms == NULL) return ACCEL_ERR_NO_MEMORY;
  int64_t* pos = (int64_t*)(void*)(terms + D->nterms);
  dwc_terms(g, D, terms, pos);
  const int64_t cgroups = (g->k + 7) / 8, items = (int64_t)g->n * cgroups;
  if (nth > items) nth = (int)items;
  const size_t bytes = D->x_bytes + D->b_bytes + D->w_bytes + D->a_bytes + D->c_bytes;
  char* bufs[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    bufs[t] = workspace_get(ws, t, bytes);
    if (bufs[t] == NULL) return ACCEL_ERR_NO_MEMORY;
    /* the pads: in_zero for the whole call (padding rows of X, B's columns off the image) */
    int16_t* X = (int16_t*)bufs[t];
    for (size_t i = 0; i < D->x_bytes / 2; ++i) X[i] = (int16_t)in_zero;
    memset(bufs[t] + D->x_bytes, (int8_t)in_zero, D->b_bytes);
    /* the rows' values past the last block: read by the converter's last vectors (junk codes,
     * never written out), defined */
    memset(bufs[t] + D->x_bytes + D->b_bytes + D->w_bytes, 0, D->a_bytes);
  }
  dwa_cvt C;
  if (!dwa_lanes(P, ep, ws, &C)) return ACCEL_ERR_NO_MEMORY;
  dwc_job J = {.P = P, .D = D, .terms = terms, .pos = pos, .in_zero = in_zero, .in = in,
               .in_end = in + (int64_t)g->n * g->c * P->hw, .w = w, .out = out, .ep = ep,
               .C = &C, .bufs = bufs, .cgroups = cgroups};
  pool_for(nth, items, dwc_item, (void*)&J);
  return ACCEL_OK;
}

static accel_status conv_dwa(const plan* P, int32_t in_zero, const int8_t* in, const int8_t* w,
                             int8_t* out, const sdp_i8* ep, workspace* ws, int nth) {
  const conv_geometry* g = P->g;
  dwc_plan C;
  if (dwc_make_plan(P, &C)) return conv_dwc(P, &C, in_zero, in, w, out, ep, ws, nth);
  dwa_term* terms = workspace_get(ws, WS_OFF, (size_t)P->rs * sizeof(dwa_term));
  if (terms == NULL) return ACCEL_ERR_NO_MEMORY;
  dwa_plan D;
  dwa_make_plan(P, nth, &D, terms);
  const int64_t bands = (g->out_h + D.band - 1) / D.band;
  const int64_t items = (int64_t)g->n * g->groups * bands;
  if (nth > items) nth = (int)items;
  /* the last term's loads of a band's last block reach past its planes by less than a plane
   * row and a block: the slack, read (junk outputs) but never written by an image row */
  const size_t copy_words = (size_t)(P->cg * D.cplane + D.E + DWA_SLACK);
  const size_t copy_bytes = round64(copy_words * sizeof(int16_t));
  /* blocks of 64 outputs: the last stores up to 63 values past the band */
  const size_t acc_bytes = round64((size_t)(D.band * D.Eo + DWA_SLACK) * sizeof(int32_t));
  const size_t words_bytes = round64((size_t)(P->cg * D.nterms) * sizeof(int32_t));
  char* bufs[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    bufs[t] = workspace_get(ws, t, copy_bytes + acc_bytes + words_bytes);
    if (bufs[t] == NULL) return ACCEL_ERR_NO_MEMORY;
    /* the pads and the slack: in_zero for the whole call */
    int16_t* copy = (int16_t*)bufs[t];
    for (size_t i = 0; i < copy_words; ++i) copy[i] = (int16_t)in_zero;
  }
  dwa_cvt L;
  if (!dwa_lanes(P, ep, ws, &L)) return ACCEL_ERR_NO_MEMORY;
  dwa_job J = {.P = P, .D = &D, .terms = terms, .in_zero = in_zero, .in = in,
               .in_end = in + (int64_t)g->n * g->c * P->hw, .w = w, .out = out, .ep = ep,
               .C = &L, .bufs = bufs, .copy_bytes = copy_bytes, .acc_bytes = acc_bytes,
               .bands = bands};
  pool_for(nth, items, dwa_item, (void*)&J);
  return ACCEL_OK;
}

static int dw_applies(const conv_i8_call* c) { return c->P->cg == 1; }

/* Stems: forced only. gemm16_avx2 (conv/i8_gemm_avx2.c) packs a 3-channel 3x3 window's 27
 * taps into 14 pair words where the terms here take 18 (a row's lone tap per channel):
 * docs/kernels.md has the comparison. */
static int stem_applies(const conv_i8_call* c) {
  (void)c;
  return 0;
}

static int stem_supports(const conv_i8_call* c) {
  return c->P->cg > 1 && c->P->cg <= DWA_MAX_CG;
}

static accel_status dwa_run(const conv_i8_call* c) {
  return conv_dwa(c->P, c->in_zero, c->in, c->raw, c->out, c->ep, c->ws, c->nth);
}

const conv_i8_impl conv_i8_dw_madd_avx2_impl = {.name = "dw_madd_avx2", .applies = dw_applies,
                                                .supports = NULL, .run = dwa_run};
const conv_i8_impl conv_i8_stem_madd_avx2_impl = {.name = "stem_madd_avx2",
                                                  .applies = stem_applies,
                                                  .supports = stem_supports,
                                                  .run = dwa_run};
#endif /* __AVX2__ */
