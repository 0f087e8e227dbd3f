/* conv/i8_dw_avx2.c - INT8 CONV of few input channels per group with vpmaddwd on pairs of taps,
 * AVX2 builds (impls "dw_madd_avx2": depthwise, one input channel per group; "stem_madd_avx2":
 * 2 to DWA_MAX_CG input channels per group, an RGB stem, run only when forced: see
 * stem_applies).
 *
 * Output (y, x) of channel k is the sum over the group's input channels c and the taps (r, s)
 * of (in - in_zero) * w. With the input's stride phases split apart (as the implicit GEMM's
 * copy: tap (r, s) reads phase (r*dh % sh, s*dw % sw) at row y + r*dh / sh, column
 * x + s*dw / sw), every tap is its phase plane at a constant offset. Two taps of one kernel row
 * whose columns are adjacent in their phase plane (s and s + sw / dw, where dw divides sw) form
 * a term: the plane is stored as pair words, word x holding the int16 values at columns x and
 * x + 1, so one vpmaddwd of 8 words by the broadcast weight pair (w_a, w_b) adds both taps'
 * products to 8 consecutive outputs in int32 lanes (a lone tap's pair has w_b = 0). The values
 * are in - in_zero, within [-255, 255], and padding is 0: each int16 product is at most
 * 255 * 128 = 32640 in magnitude, and vpmaddwd adds the two in int32, so every sum is exact
 * (weights of -128 included), as the reference's; the sums over the terms wrap modulo 2^32 as
 * the other kernels' (exact: the true sum fits int32).
 *
 * Work items are bands of output rows of one image and group: the band's rows of the group's
 * input channels are built into the participant's copy (from one int16 row of the padded
 * input per input row: its phases' pair words by two loads and a blend), then for each output
 * channel of the group the band's accumulators are computed 4 vectors (32 outputs) at a time
 * over the band's output rows laid end to end, stored as the band's outputs (a row's last
 * vector runs into the next row, which is stored after it), and converted while in L1
 * (convert_at: sdp_i8_span). A band holds about DWA_BAND outputs.
 */
#include "conv/i8.h"

#ifdef __AVX2__
#include <immintrin.h>

enum {
  DWA_MAX_CG = 4,    /* input channels per group: the stem's RGB(A); deeper groups: a GEMM */
  DWA_BAND = 2048,   /* outputs per band: its accumulators and copy stay in L1 */
  DWA_V = 4,         /* vectors of 8 outputs per step anywhere in the band, */
  DWA_RUN = 8        /* and along one row (one address per term for all of them) */
};

/* The geometry's phases, terms and copy sizes. */
typedef struct dwa_plan {
  int64_t nry, nrx;        /* row / column phases used */
  int64_t rq, sq;          /* largest row / column shift of a tap in its phase plane */
  int64_t nvr;             /* vectors of 8 per output row */
  int64_t L;               /* words per copy row: nvr * 8 + sq, rounded up to 8 */
  int64_t band;            /* output rows per band */
  int64_t hb;              /* copy rows per phase plane of a band: band + rq */
  int64_t cplane;          /* words per input channel of a band's copy: nry * nrx * hb * L */
  int64_t ext;             /* int16 elements of the padded input row */
  int64_t nterms;
  int8_t ry[ACCEL_MAX_CONV_STRIDE], rx[ACCEL_MAX_CONV_STRIDE]; /* phase index -> py / px */
} dwa_plan;

typedef struct dwa_term {
  int64_t off;    /* words from the band copy's channel plane */
  int32_t ta, tb; /* taps r * kernel_w + s; tb < 0: a lone tap */
} dwa_term;

static void dwa_make_plan(const plan* P, int nth, dwa_plan* D, dwa_term* terms) {
  const conv_geometry* g = P->g;
  const int64_t sh = g->stride_h, sw = g->stride_w, dh = g->dilation_h, dw = g->dilation_w;
  int8_t yslot[ACCEL_MAX_CONV_STRIDE], xslot[ACCEL_MAX_CONV_STRIDE];
  for (int64_t i = 0; i < ACCEL_MAX_CONV_STRIDE; ++i) yslot[i] = xslot[i] = -1;
  D->nry = D->nrx = 0;
  for (int64_t r = 0; r < g->kernel_h; ++r)
    if (yslot[r * dh % sh] < 0) {
      yslot[r * dh % sh] = (int8_t)D->nry;
      D->ry[D->nry++] = (int8_t)(r * dh % sh);
    }
  for (int64_t s = 0; s < g->kernel_w; ++s)
    if (xslot[s * dw % sw] < 0) {
      xslot[s * dw % sw] = (int8_t)D->nrx;
      D->rx[D->nrx++] = (int8_t)(s * dw % sw);
    }
  D->rq = (g->kernel_h - 1) * dh / sh;
  D->sq = (g->kernel_w - 1) * dw / sw;
  D->nvr = (g->out_w + 7) / 8;
  D->L = (D->nvr * 8 + D->sq + 7) & ~(int64_t)7; /* whole vectors: no store crosses a row */
  D->band = DWA_BAND / g->out_w;
  if (D->band < 1) D->band = 1; /* rows wider than DWA_BAND: one a band (a divisor below) */
  /* at least 4 items per participant where the rows allow (a stem is one group) */
  const int64_t planes = (int64_t)g->n * g->groups, want = 4 * (int64_t)nth;
  if (planes * ((g->out_h + D->band - 1) / D->band) < want) {
    const int64_t per = (want + planes - 1) / planes; /* bands per plane */
    const int64_t rows = (g->out_h + per - 1) / per;
    if (rows < D->band) D->band = rows;
  }
  if (D->band < 1) D->band = 1;
  if (D->band > g->out_h) D->band = g->out_h;
  D->hb = D->band + D->rq;
  D->cplane = D->nry * D->nrx * D->hb * D->L;
  /* a phase row reads padded columns up to (L + 9) * sw + 8 in whole vectors; the row's
   * image columns are written whether or not an output reads them */
  D->ext = (D->L + 10) * sw + 16;
  if (D->ext < g->pad_left + g->w + 16) D->ext = g->pad_left + g->w + 16;
  /* terms: s pairs with s + step (the next column of its phase plane) */
  const int64_t step = sw % dw == 0 ? sw / dw : 0, S = g->kernel_w;
  D->nterms = 0;
  for (int64_t r = 0; r < g->kernel_h; ++r)
    for (int64_t s = 0; s < S; ++s) {
      if (step > 0 && (s / step) % 2 == 1) continue; /* the partner of s - step */
      dwa_term t;
      const int64_t slot = yslot[r * dh % sh] * D->nrx + xslot[s * dw % sw];
      t.off = (slot * D->hb + r * dh / sh) * D->L + s * dw / sw;
      t.ta = (int32_t)(r * S + s);
      t.tb = step > 0 && s + step < S ? (int32_t)(r * S + s + step) : -1;
      terms[D->nterms++] = t;
    }
}

/* Pair words of phase column px from the padded int16 row e: word x = e[x sw + px] and, above
 * it, e[(x + 1) sw + px], for x < L. */
static void dwa_pairs(const int16_t* e, int64_t sw, int64_t px, int64_t L, int32_t* d) {
  if (sw == 1) {
    for (int64_t x = 0; x < L; x += 8) {
      const __m256i a = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(e + px + x)));
      const __m256i b = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(e + px + x + 1)));
      _mm256_storeu_si256((__m256i*)(d + x), _mm256_or_si256(a, _mm256_slli_epi32(b, 16)));
    }
  } else if (sw == 2) {
    /* the low halves of a's words are e[2x + px], of b's e[2x + px + 2] */
    for (int64_t x = 0; x < L; x += 8) {
      const __m256i a = _mm256_loadu_si256((const __m256i*)(e + 2 * x + px));
      const __m256i b = _mm256_loadu_si256((const __m256i*)(e + 2 * x + px + 2));
      _mm256_storeu_si256((__m256i*)(d + x),
                          _mm256_blend_epi16(a, _mm256_slli_epi32(b, 16), 0xAA));
    }
  } else {
    for (int64_t x = 0; x < L; ++x)
      d[x] = (int32_t)((uint32_t)(uint16_t)e[x * sw + px] |
                       (uint32_t)(uint16_t)e[(x + 1) * sw + px] << 16);
  }
}

/* The padded input row: e[j] = row[j - pad_left] - in_zero inside the image, else 0. */
static void dwa_ext_row(const int8_t* row, int64_t W, int64_t pad_left, int32_t in_zero,
                        int64_t n, int16_t* e) {
  memset(e, 0, (size_t)n * sizeof(int16_t));
  int16_t* d = e + pad_left;
  const __m256i z = _mm256_set1_epi16((int16_t)in_zero);
  int64_t j = 0;
  for (; j + 16 <= W; j += 16)
    _mm256_storeu_si256(
        (__m256i*)(d + j),
        _mm256_sub_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(row + j))), z));
  for (; j < W; ++j) d[j] = (int16_t)(row[j] - in_zero);
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
  char* const* bufs; /* per participant: the copy, the accumulators, the words, the row */
  size_t copy_bytes, acc_bytes, words_bytes;
  int64_t bands;
} dwa_job;

/* The band copy of input channel plane `src`: phase (py, px) row i holds the pair words of
 * input row (y0 + i) sh + py - pad_top. */
static void dwa_build(const plan* P, const dwa_plan* D, const int8_t* src, int32_t in_zero,
                      int64_t y0, int16_t* e, int32_t* copy) {
  const conv_geometry* g = P->g;
  const int64_t sh = g->stride_h, sw = g->stride_w, L = D->L;
  for (int64_t i = 0; i < D->hb; ++i)
    for (int64_t a = 0; a < D->nry; ++a) {
      const int64_t iy = (y0 + i) * sh + D->ry[a] - g->pad_top;
      int32_t* d = copy + (a * D->nrx * D->hb + i) * L; /* phase (a, 0); (a, b) at + b hb L */
      if (iy < 0 || iy >= g->h) {
        for (int64_t b = 0; b < D->nrx; ++b)
          memset(d + b * D->hb * L, 0, (size_t)L * sizeof(int32_t));
        continue;
      }
      dwa_ext_row(src + iy * g->w, g->w, g->pad_left, in_zero, D->ext, e);
      for (int64_t b = 0; b < D->nrx; ++b) dwa_pairs(e, sw, D->rx[b], L, d + b * D->hb * L);
    }
}

/* NV vectors of accumulators: vector j at copy word cpos[j] (of each channel's plane), stored
 * at acc + apos[j], in order. */
static inline __attribute__((always_inline)) void dwa_vectors(
    const int NV, const int32_t* copy, int64_t cplane, int64_t cg, const dwa_term* terms,
    int64_t nterms, const int32_t* words, const int64_t* cpos, const int64_t* apos,
    int32_t* acc) {
  __m256i s[DWA_V];
  for (int j = 0; j < NV; ++j) s[j] = _mm256_setzero_si256();
  for (int64_t c = 0; c < cg; ++c) {
    const int32_t* cp = copy + c * cplane;
    const int32_t* wc = words + c * nterms;
    for (int64_t t = 0; t < nterms; ++t) {
      const __m256i wv = _mm256_set1_epi32(wc[t]);
      const int32_t* b = cp + terms[t].off;
      for (int j = 0; j < NV; ++j)
        s[j] = _mm256_add_epi32(
            s[j], _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)(b + cpos[j])), wv));
    }
  }
  for (int j = 0; j < NV; ++j) _mm256_storeu_si256((__m256i*)(acc + apos[j]), s[j]);
}

/* NV vectors along one row: at copy word cpos + 8 j, stored at acc + apos + 8 j. */
static inline __attribute__((always_inline)) void dwa_row(
    const int NV, const int32_t* copy, int64_t cplane, int64_t cg, const dwa_term* terms,
    int64_t nterms, const int32_t* words, int64_t cpos, int64_t apos, int32_t* acc) {
  __m256i s[DWA_RUN];
  for (int j = 0; j < NV; ++j) s[j] = _mm256_setzero_si256();
  for (int64_t c = 0; c < cg; ++c) {
    const int32_t* cp = copy + c * cplane + cpos;
    const int32_t* wc = words + c * nterms;
    for (int64_t t = 0; t < nterms; ++t) {
      const __m256i wv = _mm256_set1_epi32(wc[t]);
      const int32_t* b = cp + terms[t].off;
      for (int j = 0; j < NV; ++j)
        s[j] = _mm256_add_epi32(
            s[j], _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)(b + 8 * j)), wv));
    }
  }
  for (int j = 0; j < NV; ++j) _mm256_storeu_si256((__m256i*)(acc + apos + 8 * j), s[j]);
}

static void dwa_item(void* ctx, int64_t item, int participant) {
  const dwa_job* J = ctx;
  const plan* P = J->P;
  const dwa_plan* D = J->D;
  const conv_geometry* g = P->g;
  char* buf = J->bufs[participant];
  int32_t* copy = (int32_t*)buf;
  int32_t* acc = (int32_t*)(buf + J->copy_bytes);
  int32_t* words = (int32_t*)(buf + J->copy_bytes + J->acc_bytes);
  int16_t* e = (int16_t*)(buf + J->copy_bytes + J->acc_bytes + J->words_bytes);
  const int64_t band = item % J->bands, bg = item / J->bands;
  const int64_t b = bg / g->groups, grp = bg % g->groups;
  const int64_t y0 = band * D->band;
  const int64_t rows = g->out_h - y0 < D->band ? g->out_h - y0 : D->band;
  const int64_t cg = P->cg, ow = g->out_w, nvr = D->nvr, L = D->L, nterms = D->nterms;
  for (int64_t c = 0; c < cg; ++c)
    dwa_build(P, D, J->in + (b * g->c + grp * cg + c) * P->hw, J->in_zero, y0, e,
              copy + c * D->cplane);
  const int64_t nvec = rows * nvr;
  for (int64_t j = 0; j < P->mg; ++j) {
    const int64_t k = grp * P->mg + j;
    const int8_t* wk = J->w + k * P->kd; /* [cg][kh][kw] */
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t t = 0; t < nterms; ++t) {
        const dwa_term* T = &J->terms[t];
        const uint32_t wa = (uint16_t)(int16_t)wk[c * P->rs + T->ta];
        const uint32_t wb = T->tb >= 0 ? (uint16_t)(int16_t)wk[c * P->rs + T->tb] : 0u;
        words[c * nterms + t] = (int32_t)(wa | wb << 16);
      }
    if (nvr >= DWA_RUN) {
      /* runs of DWA_RUN vectors along each row, then of DWA_V, then single vectors: a row's
       * last vector runs into the next row, whose stores come after it */
      for (int64_t y = 0; y < rows; ++y) {
        const int64_t cy = y * L, ay = y * ow;
        int64_t x = 0;
        for (; x + DWA_RUN <= nvr; x += DWA_RUN)
          dwa_row(DWA_RUN, copy, D->cplane, cg, J->terms, nterms, words, cy + 8 * x,
                  ay + 8 * x, acc);
        for (; x + DWA_V <= nvr; x += DWA_V)
          dwa_row(DWA_V, copy, D->cplane, cg, J->terms, nterms, words, cy + 8 * x, ay + 8 * x,
                  acc);
        for (; x < nvr; ++x)
          dwa_row(1, copy, D->cplane, cg, J->terms, nterms, words, cy + 8 * x, ay + 8 * x, acc);
      }
    } else {
      /* narrow rows: the band's vectors laid end to end, DWA_V at a time in order */
      int64_t v = 0;
      for (; v + DWA_V <= nvec; v += DWA_V) {
        int64_t cpos[DWA_V], apos[DWA_V];
        for (int i = 0; i < DWA_V; ++i) {
          const int64_t y = (v + i) / nvr, x = (v + i) % nvr * 8;
          cpos[i] = y * L + x;
          apos[i] = y * ow + x;
        }
        dwa_vectors(DWA_V, copy, D->cplane, cg, J->terms, nterms, words, cpos, apos, acc);
      }
      for (; v < nvec; ++v) {
        const int64_t y = v / nvr, x = v % nvr * 8;
        const int64_t cpos = y * L + x, apos = y * ow + x;
        dwa_vectors(1, copy, D->cplane, cg, J->terms, nterms, words, &cpos, &apos, acc);
      }
    }
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
  const size_t copy_bytes = round64((size_t)(P->cg * D.cplane) * sizeof(int32_t));
  /* the last vector of the band's last row stores up to 7 values past it */
  const size_t acc_bytes = round64((size_t)(D.band * g->out_w + 8) * sizeof(int32_t));
  const size_t words_bytes = round64((size_t)(P->cg * D.nterms) * sizeof(int32_t));
  const size_t ext_bytes = round64((size_t)D.ext * sizeof(int16_t));
  char* bufs[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    bufs[t] = workspace_get(ws, t, copy_bytes + acc_bytes + words_bytes + ext_bytes);
    if (bufs[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  const dwa_job J = {.P = P, .D = &D, .terms = terms, .in_zero = in_zero, .in = in, .w = w,
                     .out = out, .ep = ep, .bufs = bufs, .copy_bytes = copy_bytes,
                     .acc_bytes = acc_bytes, .words_bytes = words_bytes, .bands = bands};
  pool_for(nth, items, dwa_item, (void*)&J);
  return ACCEL_OK;
}

static int dw_applies(const conv_i8_call* c) { return c->P->cg == 1; }

/* Stems: forced only. gemm16_avx2 (conv/i8_gemm_avx2.c) packs a 3-channel 3x3 window's 27
 * taps into 14 pair words where the terms here take 18 (a row's lone tap per channel), and
 * measured faster on 3x224 3x3/2 -> 32 and as fast on 7x7/2 -> 64 (docs/kernels.md). */
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
