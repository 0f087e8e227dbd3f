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
 *
 * Depthwise planes of a few hundred outputs take conv/i8_dw_planes_avx2.c's path (eight
 * channels in the lanes) where it applies (dwc_conv); the bands here take the others.
 */
#include "conv/i8_dw_avx2.h"

#ifdef __AVX2__

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

/* A band's rows of codes, Eo apart in cb, to out, ow apart (ow <= Eo). */
void dwa_rows_out(const int8_t* cb, int64_t rows, int64_t ow, int64_t Eo, int8_t* out) {
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
int dwa_lanes(const plan* P, const sdp_i8* ep, workspace* ws, dwa_cvt* C) {
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

static accel_status conv_dwa(const plan* P, int32_t in_zero, const int8_t* in, const int8_t* w,
                             int8_t* out, const sdp_i8* ep, workspace* ws, int nth) {
  const conv_geometry* g = P->g;
  accel_status small;
  if (dwc_conv(P, in_zero, in, w, out, ep, ws, nth, &small)) return small;
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
