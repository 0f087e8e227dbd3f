/* conv/i8_winograd_avx2.c - INT8 stride-1 3x3 CONV as an exact integer Winograd F(2x2, 3x3)
 * (impl "winograd16_avx2"): builds with AVX2 but not AVX-512 VNNI, layers of one group.
 *
 * Arithmetic: per 2x2 output tile, its 4x4 input window d of v = in - in_zero (|v| <= 255,
 * padding 0) becomes V = B^T d B (|V| <= 4 x 255: int16), the weights U = (2G) g (2G)^T
 * = 4 G g G^T (exact integers, |U| <= 9 x 128: int16; packed at load, LAYOUT_I16W), and for
 * each of the 16 positions xi a GEMM over the input channels, M[xi][k][tile] = sum_c
 * U[xi][k][c] V[xi][c][tile], on the 6 x 16 vpmaddwd micro-kernel of the column GEMM
 * (conv/i8_gemm_avx2.h: pairs of channels, each pair product and sum exact in int32);
 * then A^T M A = 4y, exactly 4 x the direct convolution's sum. Every sum above runs modulo
 * 2^32 (vpaddd), so the int32 result is 4y whenever |4y| < 2^31: it computes only layers
 * whose depth keeps 4 x depth x 255 x 128 within int32 (C <= 1827), and y = 4y >> 2
 * exactly; the channels' converters follow as in the other GEMMs, so the codes are the
 * reference's bit for bit. 16 products per tile and channel pair instead of 36: 2.25x fewer.
 *
 * Layout: the input copied once per call as int16 pairs of channels in planes padded to the
 * tiles' window (i16_pair_plane: 2 th + 2 rows of 2 tw + 2 pairs, th x tw tiles); per item
 * (image, band of tile rows, chunk of channel blocks) the band's V as [16][cg2][tiles] pair
 * words (the tiles as the GEMM's columns, row after row), then per 24 channels the 16 GEMMs
 * into M [16][24][tiles], each channel's output transform into its output rows and its
 * converter (g2_convert). The transforms run 8 tiles a vector: a row of the copy's words
 * split into even and odd columns (tile t's columns 2t..2t+3 are even t, odd t, even t + 1,
 * odd t + 1), 4 results written back interleaved.
 */
#include "conv/i8_gemm_avx2.h"

#if defined(__AVX2__) && !defined(CONV_I8_VNNI)

enum {
  W_XI = 16,      /* Winograd positions of a 4x4 tile */
  W_NR = 16,      /* tiles per micro-kernel panel */
  W_ROWS = 24,    /* channels per pass: their M rows (16 of them each) stay in L2 */
  W_MIN_TILES = 16, /* a band's tiles, at least (when the plane has them): one whole panel */
  W_MIN_C = 32      /* input channels, at least, where the list takes it: shallower layers
                       spend more on the transforms (per tile, 16 M values a channel written,
                       read and transformed) than the products save (docs/kernels.md) */
};

/* The layers it computes: stride-1 3x3, one group, 4 x depth x 255 x 128 within int32 (the
 * sums of 4y cannot wrap). */
static int w16_computes(const plan* P) {
  const conv_geometry* g = P->g;
  return g->groups == 1 && P->cg > 1 && g->kernel_h == 3 && g->kernel_w == 3 &&
         g->stride_h == 1 && g->stride_w == 1 && g->dilation_h == 1 && g->dilation_w == 1 &&
         g->pad_top >= 0 && g->pad_left >= 0 && 4 * P->kd * 255 * 128 <= INT32_MAX;
}

int i8_winograd_fits(const plan* P) { return w16_computes(P) && P->cg >= W_MIN_C; }

/* Row xi / 4 of 2G times g times column xi % 4 of (2G)^T, g = w's 3x3 taps. */
static int32_t w16_u(const int8_t* w, int64_t xi) {
  static const int g2[4][3] = {{2, 0, 0}, {1, 1, 1}, {1, -1, 1}, {0, 0, 2}};
  const int* a = g2[xi / 4];
  const int* b = g2[xi % 4];
  int32_t u = 0;
  for (int r = 0; r < 3; ++r)
    for (int s = 0; s < 3; ++s) u += a[r] * w[3 * r + s] * b[s];
  return u;
}

void i8_pack_i16w(const plan* P, const int8_t* w, int32_t* data) {
  const int64_t cg = P->cg, cg2 = (cg + 1) / 2, kd = P->kd;
  for (int64_t mb = 0; mb < P->mblocks; ++mb)
    for (int64_t xi = 0; xi < W_XI; ++xi)
      for (int64_t p = 0; p < cg2; ++p)
        for (int64_t m = 0; m < MR; ++m) {
          const int64_t k = mb * MR + m;
          int32_t lo = 0, hi = 0; /* 0 past the channels */
          if (k < P->mg) {
            const int8_t* src = w + k * kd + 2 * p * 9; /* channel 2p's taps */
            lo = w16_u(src, xi);
            if (2 * p + 1 < cg) hi = w16_u(src + 9, xi);
          }
          data[((mb * W_XI + xi) * cg2 + p) * MR + m] =
              (int32_t)(((uint32_t)hi << 16) | ((uint32_t)lo & 0xFFFFu));
        }
}

typedef struct w16_job {
  g2_job base; /* P, the converters, out */
  const int32_t* u; /* LAYOUT_I16W's Winograd words */
  int16_t* x;       /* the pair planes */
  int64_t cg2, th, tw, hp, wp, pstride, nb, nbands, mchunks, ldb, ldv;
  size_t v_bytes, m_bytes;
  char* const* bufs; /* per participant: V, M, one channel's output rows */
} w16_job;

static void w16_copy_item(void* ctx, int64_t it, int participant) {
  (void)participant;
  const w16_job* J = ctx;
  i16_pair_plane(J->base.P, J->base.in, J->base.in_zero, it, J->cg2, J->hp, J->wp, J->pstride,
                 J->x);
}

/* Words 0, 2, .., 14 (e) and 1, 3, .., 15 (o) of a (words 0-7) and b (8-15). */
static inline void w16_split(__m256i a, __m256i b, __m256i* e, __m256i* o) {
  const __m256i idx = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  a = _mm256_permutevar8x32_epi32(a, idx);
  b = _mm256_permutevar8x32_epi32(b, idx);
  *e = _mm256_permute2x128_si256(a, b, 0x20);
  *o = _mm256_permute2x128_si256(a, b, 0x31);
}

/* V[xi][p][f] (ldv apart per p, cg2 ldv per xi) of tiles f = (ty - ty0) tw + tx of tile rows
 * [ty0, ty0 + nb) from the pair planes at xb: rows first (t = B^T d over the window's 4 rows,
 * whole rows of words), then columns. 8 tiles a step: a row's last step computes up to 7
 * tiles past the row from the words after it (inside the plane or its slack) and writes them
 * where the next row's first tiles then go (f ascending); past the band's last tile the
 * columns up to ldb are zeroed. */
static void w16_input(const w16_job* J, const int16_t* xb, int64_t ty0, int64_t nb,
                      int32_t* V) {
  const int64_t wp = J->wp, tw = J->tw, ldv = J->ldv, cg2 = J->cg2, nt = nb * tw;
  for (int64_t p = 0; p < cg2; ++p) {
    const i32_alias* plane = (const i32_alias*)(const void*)(xb + p * J->pstride * 2);
    int32_t* vp = V + p * ldv;
    for (int64_t ty = ty0; ty < ty0 + nb; ++ty) {
      const i32_alias* r0 = plane + 2 * ty * wp;
      int64_t f = (ty - ty0) * tw;
      for (int64_t tx = 0; tx < tw; tx += 8, f += 8) {
        __m256i d[4][4]; /* row, then words 2tx + {0, 8, 2, 10} .. + 7 */
        for (int i = 0; i < 4; ++i)
          for (int q = 0; q < 4; ++q)
            d[i][q] = _mm256_loadu_si256(
                (const __m256i*)(r0 + i * wp + 2 * tx + (q & 1) * 8 + (q >> 1) * 2));
        for (int q = 0; q < 4; ++q) { /* B^T d: rows d0 - d2, d1 + d2, d2 - d1, d1 - d3 */
          const __m256i d0 = d[0][q], d1 = d[1][q], d2 = d[2][q], d3 = d[3][q];
          d[0][q] = _mm256_sub_epi16(d0, d2);
          d[1][q] = _mm256_add_epi16(d1, d2);
          d[2][q] = _mm256_sub_epi16(d2, d1);
          d[3][q] = _mm256_sub_epi16(d1, d3);
        }
        for (int i = 0; i < 4; ++i) { /* then B: columns e - e', o + e', e' - o, o - o' */
          __m256i e, o, e2, o2;
          w16_split(d[i][0], d[i][1], &e, &o);
          w16_split(d[i][2], d[i][3], &e2, &o2);
          int32_t* v = vp + 4 * i * cg2 * ldv + f;
          _mm256_storeu_si256((__m256i*)v, _mm256_sub_epi16(e, e2));
          _mm256_storeu_si256((__m256i*)(v + cg2 * ldv), _mm256_add_epi16(o, e2));
          _mm256_storeu_si256((__m256i*)(v + 2 * cg2 * ldv), _mm256_sub_epi16(e2, o));
          _mm256_storeu_si256((__m256i*)(v + 3 * cg2 * ldv), _mm256_sub_epi16(o, o2));
        }
      }
    }
    for (int64_t xi = 0; xi < W_XI; ++xi)
      _mm256_storeu_si256((__m256i*)(vp + xi * cg2 * ldv + nt), _mm256_setzero_si256());
  }
}

/* One channel's output rows [2 ty0, min(2 (ty0 + nb), oh)) (ow apart, from y) out of its M
 * rows (m: position xi at m + xi mstride, tile f at + f): A^T M A = 4y, then y = 4y >> 2
 * (exact), tile t's 2x2 written to columns 2t, 2t + 1 of two rows (those inside the plane). */
static void w16_output(const w16_job* J, const int32_t* m, int64_t mstride, int64_t ty0,
                       int64_t nb, int32_t* y) {
  const conv_geometry* g = J->base.P->g;
  const int64_t ow = g->out_w, oh = g->out_h, tw = J->tw;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t ty = ty0; ty < ty0 + nb; ++ty) {
    int32_t* y0 = y + 2 * (ty - ty0) * ow;
    const int two = 2 * ty + 1 < oh; /* the tile's second row is inside the plane */
    int64_t f = (ty - ty0) * tw;
    for (int64_t tx = 0; tx < tw; tx += 8, f += 8) {
      __m256i r[4][2];
      for (int i = 0; i < 4; ++i) { /* per row of M: its columns through A */
        const int32_t* mi = m + 4 * i * mstride + f;
        const __m256i m0 = _mm256_loadu_si256((const __m256i*)mi);
        const __m256i m1 = _mm256_loadu_si256((const __m256i*)(mi + mstride));
        const __m256i m2 = _mm256_loadu_si256((const __m256i*)(mi + 2 * mstride));
        const __m256i m3 = _mm256_loadu_si256((const __m256i*)(mi + 3 * mstride));
        r[i][0] = _mm256_add_epi32(_mm256_add_epi32(m0, m1), m2);
        r[i][1] = _mm256_sub_epi32(_mm256_sub_epi32(m1, m2), m3);
      }
      const int64_t n = ow - 2 * tx; /* columns left in the row */
      const __m256i k0 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)(n < 16 ? n : 16)), lane);
      const __m256i k1 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)(n < 16 ? n - 8 : 8)), lane);
      for (int a = 0; a < 1 + two; ++a) { /* output row 2 ty + a */
        __m256i ya[2];
        for (int b = 0; b < 2; ++b) {
          const __m256i s = a == 0 ? _mm256_add_epi32(_mm256_add_epi32(r[0][b], r[1][b]), r[2][b])
                                   : _mm256_sub_epi32(_mm256_sub_epi32(r[1][b], r[2][b]), r[3][b]);
          ya[b] = _mm256_srai_epi32(s, 2);
        }
        const __m256i lo = _mm256_unpacklo_epi32(ya[0], ya[1]); /* tiles 0, 1 | 4, 5 */
        const __m256i hi = _mm256_unpackhi_epi32(ya[0], ya[1]); /* tiles 2, 3 | 6, 7 */
        int32_t* dst = y0 + a * ow + 2 * tx;
        const __m256i c0 = _mm256_permute2x128_si256(lo, hi, 0x20);
        const __m256i c1 = _mm256_permute2x128_si256(lo, hi, 0x31);
        if (n >= 16) {
          _mm256_storeu_si256((__m256i*)dst, c0);
          _mm256_storeu_si256((__m256i*)(dst + 8), c1);
        } else {
          _mm256_maskstore_epi32(dst, k0, c0);
          _mm256_maskstore_epi32(dst + 8, k1, c1);
        }
      }
    }
  }
}

/* Item = (image, band of tile rows, chunk of channel blocks): the band's V, then per W_ROWS
 * channels the 16 GEMMs (per position, 6 channels a call over every panel of tiles: V[xi]'s
 * pair rows in L1 for the pass's calls) and each channel's output rows, converted. */
static void w16_item(void* ctx, int64_t it, int participant) {
  const w16_job* J = ctx;
  const plan* P = J->base.P;
  const conv_geometry* g = P->g;
  const int64_t mc = it % J->mchunks, band = it / J->mchunks % J->nbands;
  const int64_t b = it / (J->mchunks * J->nbands);
  const int64_t ty0 = band * J->nb, nb = J->th - ty0 < J->nb ? J->th - ty0 : J->nb;
  const int64_t cg2 = J->cg2, ldv = J->ldv, nt = nb * J->tw, ldb = (nt + 7) / 8 * 8;
  const int64_t n16 = ldb / W_NR, ow = g->out_w;
  const int64_t oy0 = 2 * ty0, nrow = g->out_h - oy0 < 2 * nb ? g->out_h - oy0 : 2 * nb;
  const int64_t mb0 = P->mblocks * mc / J->mchunks, mb1 = P->mblocks * (mc + 1) / J->mchunks;
  const int64_t kend = P->mg < mb1 * MR ? P->mg : mb1 * MR;
  int32_t* V = (int32_t*)(void*)J->bufs[participant];
  int32_t* M = (int32_t*)(void*)(J->bufs[participant] + J->v_bytes);
  int32_t* y = (int32_t*)(void*)(J->bufs[participant] + J->v_bytes + J->m_bytes);
  const int64_t mstride = W_ROWS * ldb; /* M[xi][r][f] at M + xi mstride + r ldb + f */
  memset(M + W_XI * mstride, 0, 8 * sizeof(int32_t)); /* read past the last row, discarded */
  w16_input(J, J->x + b * cg2 * J->pstride * 2, ty0, nb, V);
  static const int64_t tap0 = 0;
  for (int64_t k0 = mb0 * MR; k0 < kend; k0 += W_ROWS) {
    const int64_t nrows = kend - k0 < W_ROWS ? kend - k0 : W_ROWS;
    for (int64_t xi = 0; xi < W_XI; ++xi) {
      const int16_t* vx = (const int16_t*)(const void*)(V + xi * cg2 * ldv);
      for (int64_t r = 0; r < nrows; r += G6_MR) {
        const int64_t mr = nrows - r < G6_MR ? nrows - r : G6_MR;
        const int32_t* p[G6_MR];
        for (int64_t q = 0; q < mr; ++q) {
          const int64_t k = k0 + r + q;
          p[q] = J->u + ((k / MR * W_XI + xi) * cg2) * MR + k % MR;
        }
        int32_t* c = M + xi * mstride + r * ldb;
        if (n16 > 0)
          g6t_table[2][mr](cg2, 1, p, 0, vx, &tap0, 2 * ldv, c, ldb, 0, n16, 2 * W_NR);
        if (n16 * W_NR < ldb)
          g6t_table[1][mr](cg2, 1, p, 0, vx + n16 * W_NR * 2, &tap0, 2 * ldv, c + n16 * W_NR,
                           ldb, 0, 1, 0);
      }
    }
    for (int64_t r = 0; r < nrows; ++r) {
      const int64_t k = k0 + r;
      w16_output(J, M + r * ldb, mstride, ty0, nb, y);
      g2_convert(&J->base, k, y, (b * g->k + k) * P->ohw + oy0 * ow, nrow * ow);
    }
  }
}

/* The columns the GEMMs compute over th x tw tiles in bands of nb tile rows made even (each
 * band's tiles in whole panels of 8). */
static int64_t w16_columns(int64_t nb, int64_t th, int64_t tw) {
  const int64_t nbands = (th + nb - 1) / nb, even = (th + nbands - 1) / nbands;
  const int64_t last = th - (nbands - 1) * even;
  return (nbands - 1) * ((even * tw + 7) / 8 * 8) + (last * tw + 7) / 8 * 8;
}

static accel_status w16_run(const conv_i8_call* c) {
  const plan* P = c->P;
  const conv_geometry* g = P->g;
  w16_job J = {.base = {.P = P, .in_zero = c->in_zero, .in = c->in, .out = c->out, .ep = c->ep},
               .u = c->i16w};
  J.cg2 = (P->cg + 1) / 2;
  if (J.u == NULL) { /* not packed for this kernel: its words on this call */
    int32_t* d = workspace_get(
        c->ws, WS_PACK, (size_t)(P->mblocks * W_XI * J.cg2 * MR) * sizeof(int32_t));
    if (d == NULL) return ACCEL_ERR_NO_MEMORY;
    i8_pack_i16w(P, c->weights, d);
    J.u = d;
  }
  if (!g2_prepare_lanes(P, c->ep, c->ws, &J.base)) return ACCEL_ERR_NO_MEMORY;
  J.th = (g->out_h + 1) / 2;
  J.tw = (g->out_w + 1) / 2;
  J.hp = 2 * J.th + 2;
  J.wp = 2 * J.tw + 2;
  J.pstride = J.hp * J.wp + 16; /* a row's last step reads up to 14 words past the plane */
  const int64_t planes = (int64_t)g->n * J.cg2;
  J.x = workspace_get(c->ws, WS_COPY, (size_t)(planes * J.pstride * 2) * sizeof(int16_t));
  if (J.x == NULL) return ACCEL_ERR_NO_MEMORY;
  const int nthreads = c->nth;
  pool_for(planes < nthreads ? (int)planes : nthreads, planes, w16_copy_item, &J);
  /* bands of tile rows: their V in a quarter of the L2, at least a panel of tiles; or up to
   * half of it where the GEMMs then compute fewer columns in all (whole panels of 8: a row of
   * 26 tiles in 32 columns, three in 80) */
  const int64_t l2 = conv_l2_bytes();
  const int64_t budget = l2 > 0 ? l2 / 4 : G2_MIN_TILE;
  const int64_t row_bytes = W_XI * J.cg2 * J.tw * 4;
  int64_t nb = budget / row_bytes;
  if (nb < 1) nb = 1;
  while (nb * J.tw < W_MIN_TILES && nb < J.th) ++nb;
  if (nb > J.th) nb = J.th;
  for (int64_t cand = nb + 1; cand <= J.th && cand * row_bytes <= 2 * budget; ++cand)
    if (w16_columns(cand, J.th, J.tw) < w16_columns(nb, J.th, J.tw)) nb = cand;
  J.nbands = (J.th + nb - 1) / nb;
  J.nb = (J.th + J.nbands - 1) / J.nbands; /* bands of one size */
  J.nbands = (J.th + J.nb - 1) / J.nb;
  J.mchunks = 1;
  while ((int64_t)g->n * J.nbands * J.mchunks < nthreads && J.mchunks < P->mblocks) ++J.mchunks;
  const int64_t ldb = (J.nb * J.tw + 7) / 8 * 8;
  J.ldb = ldb;
  J.ldv = ldb + 8;
  J.v_bytes = round64((size_t)(W_XI * J.cg2 * J.ldv) * sizeof(int32_t));
  J.m_bytes = round64((size_t)(W_XI * W_ROWS * ldb + 8) * sizeof(int32_t));
  const size_t bytes = J.v_bytes + J.m_bytes + (size_t)(2 * J.nb * g->out_w + 16) * sizeof(int32_t);
  const int64_t items = (int64_t)g->n * J.nbands * J.mchunks;
  const int nth = (int)(items < nthreads ? items : nthreads);
  char* bufs[WS_THREAD_SLOTS];
  if (!g2_thread_buffers(c->ws, nth, bytes, bufs)) return ACCEL_ERR_NO_MEMORY;
  J.bufs = bufs;
  pool_for(nth, items, w16_item, &J);
  return ACCEL_OK;
}

/* Where packing made its words (i8_winograd_fits) and the plane has more than one output;
 * forced, every layer it computes. */
static int w16_applies(const conv_i8_call* c) {
  return c->i16w != NULL && c->P->ohw > 1 && i8_winograd_fits(c->P);
}
static int w16_supports(const conv_i8_call* c) { return w16_computes(c->P); }

const conv_i8_impl conv_i8_winograd16_avx2_impl = {.name = "winograd16_avx2",
                                                   .applies = w16_applies,
                                                   .supports = w16_supports, .run = w16_run};
#endif /* __AVX2__ && !CONV_I8_VNNI */
