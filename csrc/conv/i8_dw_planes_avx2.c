/* conv/i8_dw_planes_avx2.c - the AVX2 int8 depthwise kernel (dw_madd_avx2, conv/i8_dw_avx2.c) on
 * small planes: eight channels in the lanes.
 *
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
#include <string.h>

#include "conv/i8_dw_avx2.h"

#ifdef __AVX2__

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
 * conv converters), a block's 8 accumulators (one output position each, the 8 channels in the
 * lanes) convert where they are with each lane's own channel constants (sdp_i8_conv8_lanes,
 * sdp_i8_conv8_q: the steps sdp_i8_lanes8_form takes with one channel's), and their codes are
 * transposed as bytes: no 8 x 8 transpose of int32 values and no pass per channel over a
 * stored row (about 40 % of a 960x7 3x3 call's instructions before, docs/kernels.md). */
typedef struct dwc_lanes {
  sdp_i8_conv8 q;
  __m256i lo, hi;
} dwc_lanes;

/* The codes of outputs p .. p + 7 of the 8 channels (v: one vector a position) to outs[c] + p:
 * saturated to int8 as sdp_i8_codes32, clamped to [lo, hi], transposed as bytes. */
static inline __attribute__((always_inline)) void dwc_lanes_codes(const int FORM,
                                                                  const dwc_lanes* L,
                                                                  const __m256i* v,
                                                                  int8_t* const* outs, int64_t p) {
  __m256i q[8];
  for (int j = 0; j < 8; ++j) q[j] = sdp_i8_conv8_q(FORM, &L->q, v[j]);
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
    L.q = sdp_i8_conv8_lanes(J->C->cvt + k0, nk, J->C->form);
    L.lo = _mm256_set1_epi8(J->C->lo);
    L.hi = _mm256_set1_epi8(J->C->hi);
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

int dwc_conv(const plan* P, int32_t in_zero, const int8_t* in, const int8_t* w, int8_t* out,
             const sdp_i8* ep, workspace* ws, int nth, accel_status* status) {
  dwc_plan D;
  if (!dwc_make_plan(P, &D)) return 0;
  *status = conv_dwc(P, &D, in_zero, in, w, out, ep, ws, nth);
  return 1;
}
#endif /* __AVX2__ */
