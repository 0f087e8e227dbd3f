/* conv/i8_dw_vnni.c - INT8 depthwise CONV through an int16 copy of the plane
 * (impl "dw_vnni").
 *
 * depthwise otherwise (no VBMI, or taps too wide for one 64-byte load): direct, an int16
 * copy of the plane and vpdpwssd on pairs of taps.
 */
#include "conv/i8.h"

#ifdef CONV_I8_VNNI
/* ---- depthwise (one input channel per group): direct ---------------------------------------
 * The plane is copied as int16 (in - in_zero, padding 0) in the phase-split layout above, so
 * grid position n is sum over taps t of w[t] * copy[off[t] + n]: a 1-D correlation. vpdpwssd
 * multiplies int16 pairs and adds both products: two taps whose offsets differ by 1 (adjacent
 * columns of one phase: s and s + stride_w / dilation_w) share one instruction, with the weight
 * word (w_a, w_b); a lone tap has (w, 0). A 32-bit load at copy + off + n holds positions n and
 * n + 1, so even outputs come from loads at even distances and odd outputs from loads one
 * element further; they are interleaved at the end. 64 outputs per step. */
typedef struct dw_term {
  int64_t off;       /* copy offset of the first tap */
  int32_t ta, tb;    /* taps (r * kernel_w + s); tb < 0: a lone tap */
} dw_term;

/* The terms: taps paired with the tap one column (of their phase) to the right. */
static int64_t dw_terms(const plan* P, const imp_plan* Q, dw_term* terms) {
  const conv_geometry* g = P->g;
  const int64_t sh = g->stride_h, sw = g->stride_w, S = g->kernel_w;
  const int64_t step = sw % g->dilation_w == 0 ? sw / g->dilation_w : 0; /* s -> s + step */
  int64_t n = 0;
  for (int64_t r = 0; r < g->kernel_h; ++r) {
    const int64_t ry = r * g->dilation_h;
    for (int64_t s = 0; s < S; ++s) {
      /* s was taken as the partner of s - step when (s - step) sits first in its pair */
      if (step > 0 && s >= step && (s / step) % 2 == 1) continue;
      const int64_t sx = s * g->dilation_w;
      const int64_t ph = (ry % sh) * sw + sx % sw;
      dw_term t;
      t.off = ph * Q->plane + (ry / sh) * Q->wq + sx / sw;
      t.ta = (int32_t)(r * S + s);
      t.tb = step > 0 && s + step < S ? (int32_t)(r * S + s + step) : -1;
      terms[n++] = t;
    }
  }
  return n;
}

/* The int16 copy of plane `src`, phase by phase. */
static void dw_build(const plan* P, const imp_plan* Q, const int8_t* src, int32_t in_zero,
                     int16_t* copy) {
  const conv_geometry* g = P->g;
  const int64_t sw = g->stride_w, W = g->w, wq = Q->wq;
  const __m512i zv = _mm512_set1_epi16((int16_t)in_zero);
  for (int64_t ph = 0; ph < Q->nph; ++ph) {
    const int64_t py = ph / sw, px = ph % sw, x0 = px - g->pad_left;
    int64_t lo = x0 >= 0 ? 0 : (-x0 + sw - 1) / sw;
    int64_t hi = x0 > W - 1 ? 0 : (W - 1 - x0) / sw + 1;
    if (hi > wq) hi = wq;
    if (lo > hi) lo = hi;
    for (int64_t yq = 0; yq < Q->hq; ++yq) {
      int16_t* d = copy + ph * Q->plane + yq * wq;
      const int64_t iy = yq * g->stride_h + py - g->pad_top;
      if (iy < 0 || iy >= g->h) {
        memset(d, 0, (size_t)wq * sizeof(int16_t));
        continue;
      }
      const int8_t* row = src + iy * W + x0;
      for (int64_t xq = 0; xq < lo; ++xq) d[xq] = 0;
      /* whole vectors, zero past hi: they run into the next row (built after this one) or
       * the zeroed slack (which only garbage columns read), never into a row built before */
      if (sw == 1) {
        for (int64_t xq = lo; xq < hi; xq += 32) {
          const int64_t n = hi - xq < 32 ? hi - xq : 32;
          const __mmask32 m = n == 32 ? ~(__mmask32)0 : (((__mmask32)1 << n) - 1);
          const __m512i v = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(m, row + xq));
          _mm512_storeu_si512(d + xq, _mm512_maskz_sub_epi16(m, v, zv));
        }
      } else if (sw == 2) {
        for (int64_t xq = lo; xq < hi; xq += 32) { /* the even bytes of 63 */
          const int64_t n = hi - xq < 32 ? hi - xq : 32;
          const __mmask64 m2 = ((__mmask64)1 << (2 * n - 1)) - 1;
          const __m512i b = _mm512_maskz_loadu_epi8(m2, row + 2 * xq);
          const __m512i v = _mm512_srai_epi16(_mm512_slli_epi16(b, 8), 8);
          const __mmask32 m = n == 32 ? ~(__mmask32)0 : (((__mmask32)1 << n) - 1);
          _mm512_storeu_si512(d + xq, _mm512_maskz_sub_epi16(m, v, zv));
        }
      } else {
        for (int64_t xq = lo; xq < hi; ++xq) d[xq] = (int16_t)(row[xq * sw] - in_zero);
      }
      for (int64_t xq = hi; xq < wq; ++xq) d[xq] = 0;
    }
  }
}

/* grid[n] for n < ngrid (rounded up to 64) = sum of the terms. */
static void dw_grid(const int16_t* copy, const dw_term* terms, const int32_t* words,
                    int64_t nterms, int64_t ngrid, int32_t* grid) {
  const __m512i lo_idx = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i hi_idx =
      _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  for (int64_t n = 0; n < ngrid; n += 64) {
    __m512i e0 = _mm512_setzero_si512(), o0 = e0, e1 = e0, o1 = e0;
    for (int64_t t = 0; t < nterms; ++t) {
      const __m512i wv = _mm512_set1_epi32(words[t]);
      const int16_t* b = copy + terms[t].off + n;
      e0 = _mm512_dpwssd_epi32(e0, _mm512_loadu_si512(b), wv);
      o0 = _mm512_dpwssd_epi32(o0, _mm512_loadu_si512(b + 1), wv);
      e1 = _mm512_dpwssd_epi32(e1, _mm512_loadu_si512(b + 32), wv);
      o1 = _mm512_dpwssd_epi32(o1, _mm512_loadu_si512(b + 33), wv);
    }
    _mm512_store_si512(grid + n, _mm512_permutex2var_epi32(e0, lo_idx, o0));
    _mm512_store_si512(grid + n + 16, _mm512_permutex2var_epi32(e0, hi_idx, o0));
    _mm512_store_si512(grid + n + 32, _mm512_permutex2var_epi32(e1, lo_idx, o1));
    _mm512_store_si512(grid + n + 48, _mm512_permutex2var_epi32(e1, hi_idx, o1));
  }
}

/* The depthwise loop (pool_for items): planes [item * chunk, ...) of the input. */
typedef struct dw_job {
  const plan* P;
  const imp_plan* Q;
  int32_t in_zero;
  const int8_t* in;
  const int8_t* w;
  int8_t* out;
  const sdp_i8* ep;
  char* const* bufs; /* per participant: the int16 copy, the grid, the weight words */
  const dw_term* terms;
  int64_t nterms, ngrid, planes, chunk;
  size_t copy_bytes, grid_bytes;
} dw_job;

static void dw_item(void* ctx, int64_t item, int participant) {
  const dw_job* J = ctx;
  const plan* P = J->P;
  const imp_plan* Q = J->Q;
  const conv_geometry* g = P->g;
  const sdp_i8* ep = J->ep;
  char* buf = J->bufs[participant];
  int16_t* copy = (int16_t*)buf;
  int32_t* grid = (int32_t*)(buf + J->copy_bytes);
  int32_t* words = (int32_t*)(buf + J->copy_bytes + J->grid_bytes);
  const int64_t taps = P->rs, p1 = (item + 1) * J->chunk;
  for (int64_t pl = item * J->chunk; pl < p1 && pl < J->planes; ++pl) {
    const int64_t b = pl / g->c, c = pl % g->c;
    dw_build(P, Q, J->in + pl * P->hw, J->in_zero, copy);
    for (int64_t j = 0; j < P->mg; ++j) {
      const int64_t k = c * P->mg + j;
      const int8_t* wk = J->w + k * taps;
      for (int64_t t = 0; t < J->nterms; ++t) {
        const uint32_t wa = (uint16_t)(int16_t)wk[J->terms[t].ta];
        const uint32_t wb = J->terms[t].tb >= 0 ? (uint16_t)(int16_t)wk[J->terms[t].tb] : 0u;
        words[t] = (int32_t)(wa | wb << 16);
      }
      dw_grid(copy, J->terms, words, J->nterms, J->ngrid, grid);
      if (Q->wq != g->out_w)
        for (int64_t y = 1; y < g->out_h; ++y)
          move_down(grid + y * Q->wq, grid + y * g->out_w, g->out_w);
      const int64_t at = (b * g->k + k) * P->ohw;
      convert_at(ep, k, grid, J->out, at, P->ohw);
    }
  }
}

static accel_status conv_dw(const plan* P, int32_t in_zero, const int8_t* in, const int8_t* w,
                            int8_t* out, const sdp_i8* ep, workspace* ws, int nth) {
  const conv_geometry* g = P->g;
  imp_plan Q;
  i8_imp_make_plan(P, &Q);
  const int64_t planes = (int64_t)g->n * g->c, taps = P->rs;
  if (nth > planes) nth = (int)planes;
  const int64_t ngrid = (int64_t)g->out_h * Q.wq, ngrid_r = (ngrid + 63) & ~(int64_t)63;
  /* reads reach off + n + 64 for n < ngrid_r: past the planes by the largest column shift and
   * 64 + 63 more */
  const int64_t copy_n = Q.nph * Q.plane + (Q.wq - g->out_w) + 128;
  /* the build's whole-vector stores reach 31 elements past a row: within that slack */
  const size_t copy_bytes = round64((size_t)copy_n * sizeof(int16_t));
  const size_t grid_bytes = round64((size_t)ngrid_r * sizeof(int32_t));
  const size_t words_bytes = round64((size_t)taps * sizeof(int32_t));
  dw_term* terms = workspace_get(ws, WS_OFF, (size_t)taps * sizeof(dw_term));
  if (terms == NULL) return ACCEL_ERR_NO_MEMORY;
  const int64_t nterms = dw_terms(P, &Q, terms);
  char* bufs[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    bufs[t] = workspace_get(ws, t, copy_bytes + grid_bytes + words_bytes);
    if (bufs[t] == NULL) return ACCEL_ERR_NO_MEMORY;
    int16_t* copy = (int16_t*)bufs[t];
    memset(copy + Q.nph * Q.plane, 0, (size_t)(copy_n - Q.nph * Q.plane) * sizeof(int16_t));
  }
  int64_t chunk = 8192 / (P->ohw * P->mg + 1);
  if (chunk > planes / (4 * nth)) chunk = planes / (4 * nth);
  if (chunk < 1) chunk = 1;
  const dw_job J = {.P = P, .Q = &Q, .in_zero = in_zero, .in = in, .w = w, .out = out, .ep = ep,
                    .bufs = bufs, .terms = terms, .nterms = nterms, .ngrid = ngrid,
                    .planes = planes, .chunk = chunk, .copy_bytes = copy_bytes,
                    .grid_bytes = grid_bytes};
  pool_for(nth, (planes + chunk - 1) / chunk, dw_item, (void*)&J);
  return ACCEL_OK;
}

static int dw_applies(const conv_i8_call* c) { return c->P->cg == 1; }

static accel_status dw_run(const conv_i8_call* c) {
  return conv_dw(c->P, c->in_zero, c->in, c->raw, c->out, c->ep, c->ws, c->nth);
}

const conv_i8_impl conv_i8_dw_vnni_impl = {.name = "dw_vnni", .applies = dw_applies,
                                           .supports = NULL, .run = dw_run};
#endif /* CONV_I8_VNNI */
