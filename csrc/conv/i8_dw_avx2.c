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
 * the group the band's accumulators are computed, moved down over the junk columns, and
 * converted while in L1 (convert_at: sdp_i8_span).
 */
#include "conv/i8.h"

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

/* Plane row d from input row `row` (NULL: a padding row): column i = padded column
 * px + csw i. csw 1: only the image columns [pad_left, pad_left + wb) are written (the pads
 * hold in_zero from the call's fill); image rows never write past them, padding rows may write
 * in_zero up to 15 words further (into pads, later rows or the buffer's slack). */
static void dwa_row(const conv_geometry* g, const dwa_plan* D, const int8_t* row, int64_t px,
                    int16_t in_zero, int16_t* d) {
  if (D->csw == 1) {
    int16_t* b = d + g->pad_left;
    const int64_t n = D->wb;
    if (row == NULL) {
      const __m256i z = _mm256_set1_epi16(in_zero);
      for (int64_t j = 0; j < n; j += 16) _mm256_storeu_si256((__m256i*)(b + j), z);
      return;
    }
    if (n >= 16) {
      int64_t j = 0;
      for (; j + 16 <= n; j += 16)
        _mm256_storeu_si256((__m256i*)(b + j),
                            _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(row + j))));
      if (j < n) /* the last 16, overlapping */
        _mm256_storeu_si256(
            (__m256i*)(b + n - 16),
            _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(row + n - 16))));
    } else if (n >= 8) {
      _mm_storeu_si128((__m128i*)b, _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i*)row)));
      _mm_storeu_si128((__m128i*)(b + n - 8),
                       _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i*)(row + n - 8))));
    } else {
      for (int64_t j = 0; j < n; ++j) b[j] = row[j];
    }
    return;
  }
  /* a column phase of a stride of 3 or more: element by element */
  for (int64_t i = 0; i < D->E; ++i) {
    const int64_t ix = px + i * D->csw - g->pad_left;
    d[i] = row != NULL && ix >= 0 && ix < g->w ? row[ix] : in_zero;
  }
}

/* The band's planes of input channel plane `src`: row phase a, column phase b, row i holds
 * input row (y0 + i) sh + ry[a] - pad_top. */
static void dwa_build(const conv_geometry* g, const dwa_plan* D, const int8_t* src,
                      int16_t in_zero, int64_t y0, int16_t* copy) {
  for (int64_t a = 0; a < D->nry; ++a)
    for (int64_t b = 0; b < D->ncx; ++b) {
      int16_t* pl = copy + (a * D->ncx + b) * D->plane;
      for (int64_t i = 0; i < D->hp; ++i) {
        const int64_t iy = (y0 + i) * g->stride_h + D->ry[a] - g->pad_top;
        dwa_row(g, D, iy >= 0 && iy < g->h ? src + iy * g->w : NULL, b, in_zero, pl + i * D->E);
      }
    }
}

/* NB blocks of 16 outputs from p (parity): the even outputs' vector at p + off, the odd ones'
 * at p + 1 + off, interleaved into order. */
static inline __attribute__((always_inline)) void dwa_parity(
    const int NB, const int16_t* copy, int64_t cplane, int64_t cg, const dwa_term* terms,
    int64_t nterms, const int32_t* words, __m256i init, int64_t p, int32_t* acc) {
  __m256i e[4], o[4];
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
    _mm256_storeu_si256((__m256i*)(acc + p + 16 * j), _mm256_permute2x128_si256(lo, hi, 0x20));
    _mm256_storeu_si256((__m256i*)(acc + p + 16 * j + 8),
                        _mm256_permute2x128_si256(lo, hi, 0x31));
  }
}

/* NB blocks of 8 outputs from p (direct): at 2p + off. */
static inline __attribute__((always_inline)) void dwa_direct(
    const int NB, const int16_t* copy, int64_t cplane, int64_t cg, const dwa_term* terms,
    int64_t nterms, const int32_t* words, __m256i init, int64_t p, int32_t* acc) {
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
  for (int j = 0; j < NB; ++j) _mm256_storeu_si256((__m256i*)(acc + p + 8 * j), s[j]);
}

/* The loop over the bands (pool_for items: image, group, band). */
typedef struct dwa_job {
  const plan* P;
  const dwa_plan* D;
  const dwa_term* terms;
  int32_t in_zero;
  const int8_t* in;
  const int8_t* w;
  int8_t* out;
  const sdp_i8* ep;
  char* const* bufs; /* per participant: the copy, the accumulators, the words */
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
  int32_t* words = (int32_t*)(buf + J->copy_bytes + J->acc_bytes);
  const int64_t band = item % J->bands, bg = item / J->bands;
  const int64_t b = bg / g->groups, grp = bg % g->groups;
  const int64_t y0 = band * D->band;
  const int64_t rows = g->out_h - y0 < D->band ? g->out_h - y0 : D->band;
  const int64_t cg = P->cg, ow = g->out_w, Eo = D->Eo, nterms = D->nterms;
  for (int64_t c = 0; c < cg; ++c)
    dwa_build(g, D, J->in + (b * g->c + grp * cg + c) * P->hw, (int16_t)J->in_zero, y0,
              copy + c * D->cplane);
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
    int64_t p = 0;
    if (D->direct) {
      for (; p + 64 <= np; p += 64)
        dwa_direct(8, copy, D->cplane, cg, J->terms, nterms, words, init, p, acc);
      for (; p + 32 <= np; p += 32)
        dwa_direct(4, copy, D->cplane, cg, J->terms, nterms, words, init, p, acc);
      for (; p < np; p += 8)
        dwa_direct(1, copy, D->cplane, cg, J->terms, nterms, words, init, p, acc);
    } else {
      for (; p + 64 <= np; p += 64)
        dwa_parity(4, copy, D->cplane, cg, J->terms, nterms, words, init, p, acc);
      for (; p < np; p += 16)
        dwa_parity(1, copy, D->cplane, cg, J->terms, nterms, words, init, p, acc);
    }
    /* rows to out_w apart: each moves down over the junk columns before it */
    if (Eo != ow)
      for (int64_t y = 1; y < rows; ++y)
        memmove(acc + y * ow, acc + y * Eo, (size_t)ow * sizeof(int32_t));
    const int64_t at = ((b * g->k + k) * g->out_h + y0) * ow;
    convert_at(J->ep, k, acc, J->out, at, rows * ow);
  }
}

static accel_status conv_dwa(const plan* P, int32_t in_zero, const int8_t* in, const int8_t* w,
                             int8_t* out, const sdp_i8* ep, workspace* ws, int nth) {
  const conv_geometry* g = P->g;
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
  const dwa_job J = {.P = P, .D = &D, .terms = terms, .in_zero = in_zero, .in = in, .w = w,
                     .out = out, .ep = ep, .bufs = bufs, .copy_bytes = copy_bytes,
                     .acc_bytes = acc_bytes, .bands = bands};
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
