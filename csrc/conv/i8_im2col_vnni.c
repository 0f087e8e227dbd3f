/* conv/i8_im2col_vnni.c - INT8 CONV by explicit columns, and matrix-vector products
 * (impl "im2col_vnni").
 *
 * im2col: explicit columns over (image, position) for batched fully connected layers (one
 * position per image) and grids mostly made of dropped columns. Outputs of one position per
 * image get the SDP along the channels (sdp_i8_channels, the same arithmetic).
 * matrix-vector, at most 8 columns in all (a fully connected layer on one image): one 64-byte
 * weight load holds two depth steps of 8 channels, one vpdpbusd per load and column, every
 * lane useful.
 */
#include "conv/i8.h"

#ifdef CONV_I8_VNNI
/* ---- im2col: explicit columns (batched fully connected, grids mostly garbage) ------------
 * Columns j = (image, output position) over all images, in chunks; depth step k of column j
 * at cols + grp * group_bytes + (k * ldb + j) * 4. */
static void col_build_row(const plan* P, const int8_t* in, int32_t in_zero, int64_t grp,
                          int64_t k, int64_t j0, int64_t nc, int64_t ldb, uint8_t* dst) {
  const conv_geometry* g = P->g;
  const int64_t c4 = k / P->rs, rs = k % P->rs, r = rs / g->kernel_w, s = rs % g->kernel_w;
  const uint8_t pad = (uint8_t)in_zero ^ 0x80;
  const int64_t ow = g->out_w;
  const int64_t c_lo = c4 * 4, full = c_lo + 4 <= P->cg;
  for (int64_t j = 0; j < nc; ++j) {
    const int64_t col = j0 + j, b = col / P->ohw, pos = col % P->ohw;
    const int64_t iy = pos / ow * g->stride_h - g->pad_top + r * g->dilation_h;
    const int64_t ix = pos % ow * g->stride_w - g->pad_left + s * g->dilation_w;
    uint8_t* d = dst + 4 * j;
    if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w) {
      d[0] = d[1] = d[2] = d[3] = pad;
      continue;
    }
    const int8_t* src = in + (b * g->c + grp * P->cg + c_lo) * P->hw + iy * g->w + ix;
    if (full && P->hw == 1) {
      uint32_t v;
      memcpy(&v, src, 4);
      v ^= 0x80808080u;
      memcpy(d, &v, 4);
      continue;
    }
    for (int64_t jj = 0; jj < 4; ++jj)
      d[jj] = c_lo + jj < P->cg ? (uint8_t)src[jj * P->hw] ^ 0x80 : pad;
  }
  memset(dst + 4 * nc, pad, (size_t)(4 * (ldb - nc)));
}

/* ---- matrix-vector products: at most GEMV_COLS columns in all -----------------------------
 * A panel of 16 positions would be mostly empty. Instead each 64-byte load of a weight block
 * holds two depth steps of its 8 rows, and the column's matching vector holds those steps' 4
 * input bytes, each repeated over 8 lanes: one vpdpbusd per 64 weight bytes and column, all
 * lanes useful; the halves are added at the end. xp[j][k2] = (step 2k2, step 2k2 + 1) of
 * column j (an odd last step reads weights under a mask). */
#define GV_ACC(j) __m512i s##j = _mm512_setzero_si512();
#define GV_STEP(j) \
  if (nc > j) s##j = _mm512_dpbusd_epi32(s##j, _mm512_load_si512(xp + (j) * kd2 + k2), w);
#define GV_END(j)                                                                        \
  if (nc > j) {                                                                          \
    const __m256i r = _mm256_add_epi32(                                                  \
        _mm256_add_epi32(_mm512_castsi512_si256(s##j), _mm512_extracti64x4_epi64(s##j, 1)), \
        cv);                                                                             \
    int32_t v[MR];                                                                       \
    _mm256_storeu_si256((__m256i*)v, r);                                                 \
    for (int m = 0; m < MR; ++m) tile[m * TILE * NR + (j)] = v[m];                       \
  }

static inline __attribute__((always_inline)) void gemv_body(const int nc, int64_t kd4,
                                                            const int8_t* a, const __m512i* xp,
                                                            const int32_t* corr, int32_t* tile) {
  const int64_t kd2 = (kd4 + 1) / 2, full = kd4 / 2;
  GV_ACC(0) GV_ACC(1) GV_ACC(2) GV_ACC(3) GV_ACC(4) GV_ACC(5) GV_ACC(6) GV_ACC(7)
  for (int64_t k2 = 0; k2 < kd2; ++k2) {
    const __m512i w = k2 < full ? _mm512_loadu_si512(a + k2 * 64)
                                : _mm512_maskz_loadu_epi32((__mmask16)0xFF, a + k2 * 64);
    GV_STEP(0) GV_STEP(1) GV_STEP(2) GV_STEP(3) GV_STEP(4) GV_STEP(5) GV_STEP(6) GV_STEP(7)
  }
  const __m256i cv = _mm256_loadu_si256((const __m256i*)corr);
  GV_END(0) GV_END(1) GV_END(2) GV_END(3) GV_END(4) GV_END(5) GV_END(6) GV_END(7)
}

/* One column: four accumulators over interleaved steps, so that vpdpbusd's latency is hidden. */
static void gemv1(int64_t kd4, const int8_t* a, const __m512i* xp, const int32_t* corr,
                  int32_t* tile) {
  const int64_t kd2 = (kd4 + 1) / 2, full = kd4 / 2;
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
  int64_t k2 = 0;
  for (; k2 + 4 <= full; k2 += 4) {
    s0 = _mm512_dpbusd_epi32(s0, _mm512_load_si512(xp + k2), _mm512_loadu_si512(a + k2 * 64));
    s1 = _mm512_dpbusd_epi32(s1, _mm512_load_si512(xp + k2 + 1),
                             _mm512_loadu_si512(a + k2 * 64 + 64));
    s2 = _mm512_dpbusd_epi32(s2, _mm512_load_si512(xp + k2 + 2),
                             _mm512_loadu_si512(a + k2 * 64 + 128));
    s3 = _mm512_dpbusd_epi32(s3, _mm512_load_si512(xp + k2 + 3),
                             _mm512_loadu_si512(a + k2 * 64 + 192));
  }
  for (; k2 < kd2; ++k2) {
    const __m512i w = k2 < full ? _mm512_loadu_si512(a + k2 * 64)
                                : _mm512_maskz_loadu_epi32((__mmask16)0xFF, a + k2 * 64);
    s0 = _mm512_dpbusd_epi32(s0, _mm512_load_si512(xp + k2), w);
  }
  s0 = _mm512_add_epi32(_mm512_add_epi32(s0, s1), _mm512_add_epi32(s2, s3));
  const int nc = 1;
  const __m256i cv = _mm256_loadu_si256((const __m256i*)corr);
  GV_END(0)
}

typedef void (*gemv_fn)(int64_t, const int8_t*, const __m512i*, const int32_t*, int32_t*);
#define GEMV(NC_)                                                                          \
  static void gemv##NC_(int64_t kd4, const int8_t* a, const __m512i* xp, const int32_t* corr, \
                        int32_t* tile) {                                                   \
    gemv_body(NC_, kd4, a, xp, corr, tile);                                                \
  }
GEMV(2)
GEMV(3)
GEMV(4)
GEMV(5)
GEMV(6)
GEMV(7)
GEMV(8)
static const gemv_fn gemv_table[GEMV_COLS + 1] = {0,      gemv1, gemv2, gemv3, gemv4,
                                                  gemv5, gemv6, gemv7, gemv8};

/* Columns' pair vectors of group grp from the explicit columns: xp[j][k2], kd2 per column. */
static void gemv_build(const plan* P, const uint8_t* cols, int64_t ldb, int64_t nc, int64_t k2,
                       __m512i* xp) {
  const int64_t kd2 = (P->kd4 + 1) / 2;
  for (int64_t j = 0; j < nc; ++j) {
    uint32_t lo, hi = 0;
    memcpy(&lo, cols + (2 * k2 * ldb + j) * 4, 4);
    if (2 * k2 + 1 < P->kd4) memcpy(&hi, cols + ((2 * k2 + 1) * ldb + j) * 4, 4);
    xp[j * kd2 + k2] = _mm512_inserti64x4(_mm512_set1_epi32((int32_t)lo),
                                          _mm256_set1_epi32((int32_t)hi), 1);
  }
}

/* im2col's loops (pool_for items): packing, column rows, gemv columns, units of chunk j0. */
typedef struct col_job {
  const plan* P;
  int32_t in_zero;
  const int8_t* in;
  const int8_t* weights;
  const int8_t* apack;
  const int32_t* wsum;
  int8_t* pdata;
  int32_t* psum;
  int8_t* out;
  const sdp_i8* ep;
  int32_t* const* tiles_buf; /* per participant */
  uint8_t* cols;
  const int64_t* off;
  __m512i* xp;
  int64_t gbytes, ldb, j0, nc, npanels, tiles;
  int gemv;
  int64_t kd2;
} col_job;

static void col_pack_item(void* ctx, int64_t blk, int participant) {
  const col_job* J = ctx;
  (void)participant;
  i8_pack_block(J->P, J->weights, blk / J->P->mblocks, blk % J->P->mblocks, J->pdata, J->psum);
}

static void col_build_item(void* ctx, int64_t row, int participant) {
  const col_job* J = ctx;
  const int64_t grp = row / J->P->kd4, k = row % J->P->kd4;
  (void)participant;
  col_build_row(J->P, J->in, J->in_zero, grp, k, J->j0, J->nc, J->ldb,
                J->cols + grp * J->gbytes + k * J->ldb * 4);
}

static void col_gemv_build_item(void* ctx, int64_t row, int participant) {
  const col_job* J = ctx;
  const int64_t grp = row / J->kd2;
  (void)participant;
  gemv_build(J->P, J->cols + grp * J->gbytes, J->ldb, J->nc, row % J->kd2,
             J->xp + grp * J->nc * J->kd2);
}

static void col_unit_item(void* ctx, int64_t u, int participant) {
  const col_job* J = ctx;
  const plan* P = J->P;
  const conv_geometry* g = P->g;
  const sdp_i8* ep = J->ep;
  int32_t* tile = J->tiles_buf[participant];
  const int64_t nc = J->nc, j0 = J->j0, tiles = J->tiles, npanels = J->npanels;
  const bsrc B = {.base = J->cols, .group_bytes = J->gbytes, .off = J->off, .ncols = nc,
                  .npanels = npanels, .tiles = tiles};
  const int64_t mb = u % P->mblocks, tl = u / P->mblocks % tiles;
  const int64_t grp = u / (P->mblocks * tiles);
  const int64_t p0 = npanels * tl / tiles, p1 = npanels * (tl + 1) / tiles;
  if (J->gemv) {
    const int64_t blk = grp * P->mblocks + mb;
    int32_t corr[MR];
    for (int m = 0; m < MR; ++m)
      corr[m] = (int32_t)(0u - (uint32_t)(128 + J->in_zero) * (uint32_t)J->wsum[blk * MR + m]);
    gemv_table[nc](P->kd4, J->apack + blk * P->kd4 * MR * 4, J->xp + grp * nc * J->kd2, corr,
                   tile);
  } else {
    i8_gemm_tile(P, &B, J->apack, J->wsum, J->in_zero, grp, mb, p0, p1, tile, NULL);
  }
  const int64_t n0 = p0 * NR, n1 = p1 * NR < nc ? p1 * NR : nc;
  const int64_t rows = P->mg - mb * MR < MR ? P->mg - mb * MR : MR;
  if (P->ohw == 1) { /* one output per image and channel: along the channels */
    const int64_t k0 = grp * P->mg + mb * MR;
    for (int64_t j = n0; j < n1; ++j)
      epilogue_column(ep, tile, TILE * NR, j - n0, rows, k0, (j0 + j) * g->k + k0, J->out);
    return;
  }
  for (int64_t m = 0; m < rows; ++m) {
    int32_t* row = tile + m * TILE * NR;
    const int64_t k = grp * P->mg + mb * MR + m;
    for (int64_t j = n0; j < n1;) {
      const int64_t col = j0 + j, b = col / P->ohw, pos = col % P->ohw;
      const int64_t len = P->ohw - pos < n1 - j ? P->ohw - pos : n1 - j;
      const int64_t at = (b * g->k + k) * P->ohw + pos;
      convert_at(ep, k, row + (j - n0), J->out, at, len);
      j += len;
    }
  }
}

static accel_status conv_im2col(const plan* P, int32_t in_zero, const int8_t* in,
                                const int8_t* apack, const int32_t* wsum, const int8_t* weights,
                                int8_t* out, const sdp_i8* ep, workspace* ws, int nth) {
  const conv_geometry* g = P->g;
  const int64_t total = (int64_t)g->n * P->ohw;
  /* columns per chunk: about 4 MB of them, whole panels */
  int64_t chunk = ((int64_t)4 << 20) / (g->groups * P->kd4 * 4) / NR * NR;
  if (chunk < NR) chunk = NR;
  if (chunk > total) chunk = total;
  const int64_t ldb = (chunk + 15) & ~(int64_t)15;
  const int64_t gbytes = P->kd4 * ldb * 4;
  const int64_t units_max =
      g->groups * (((chunk + NR - 1) / NR + TILE - 1) / TILE) * P->mblocks;
  if (nth > units_max) nth = (int)units_max;
  const int pack_now = apack == NULL;
  int8_t* pdata = NULL;
  int32_t* psum = NULL;
  if (pack_now && !i8_reserve_packing(P, ws, &pdata, &psum, &apack, &wsum)) {
    return ACCEL_ERR_NO_MEMORY;
  }
  const size_t cols_bytes = (size_t)(g->groups * gbytes);
  uint8_t* cols = workspace_get(ws, WS_COPY, cols_bytes + COPY_SLACK);
  int64_t* off = workspace_get(ws, WS_OFF, (size_t)P->kd4 * sizeof(int64_t));
  if (cols == NULL || off == NULL) return ACCEL_ERR_NO_MEMORY;
  memset(cols + cols_bytes, (uint8_t)in_zero ^ 0x80, COPY_SLACK);
  for (int64_t k = 0; k < P->kd4; ++k) off[k] = k * ldb * 4;
  const size_t tile_bytes = (size_t)MR * TILE * NR * sizeof(int32_t);
  int32_t* tiles_buf[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    tiles_buf[t] = workspace_get(ws, t, tile_bytes);
    if (tiles_buf[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  const int64_t npack = pack_now ? g->groups * P->mblocks : 0;
  const int64_t nrows = g->groups * P->kd4;
  const int gemv = total <= GEMV_COLS;
  const int64_t kd2 = (P->kd4 + 1) / 2;
  __m512i* xp = NULL;
  if (gemv) {
    xp = workspace_get(ws, WS_XP, (size_t)(g->groups * total * kd2) * sizeof(__m512i));
    if (xp == NULL) return ACCEL_ERR_NO_MEMORY;
  }

  col_job J = {.P = P, .in_zero = in_zero, .in = in, .weights = weights, .apack = apack,
               .wsum = wsum, .pdata = pdata, .psum = psum, .out = out, .ep = ep,
               .tiles_buf = tiles_buf, .cols = cols, .off = off, .xp = xp, .gbytes = gbytes,
               .ldb = ldb, .j0 = 0, .nc = 0, .npanels = 0, .tiles = 0, .gemv = total <= GEMV_COLS,
               .kd2 = kd2};
  if (npack > 0) pool_for(nth, npack, col_pack_item, &J);
  for (int64_t j0 = 0; j0 < total; j0 += chunk) { /* the columns are rebuilt for each chunk */
    J.j0 = j0;
    J.nc = total - j0 < chunk ? total - j0 : chunk;
    J.npanels = (J.nc + NR - 1) / NR;
    J.tiles = i8_choose_tiles(J.npanels, P->mblocks, g->groups, nth);
    pool_for(nth, nrows, col_build_item, &J);
    if (J.gemv) pool_for(nth, g->groups * kd2, col_gemv_build_item, &J);
    pool_for(nth, g->groups * J.tiles * P->mblocks, col_unit_item, &J);
  }
  return ACCEL_OK;
}

/* Whether explicit columns pay: positions of several images share panels (fully connected),
 * or most of the implicit grid would be garbage (large dilation on small outputs). */
static int im2col_pays(const plan* P, const imp_plan* Q) {
  const conv_geometry* g = P->g;
  return (g->n > 1 && P->ohw < NR) || Q->ncols > 2 * P->ohw + NR ||
         (int64_t)g->n * P->ohw <= GEMV_COLS;
}

static int im2col_supports(const conv_i8_call* c) { return c->P->cg != 1; }

static int im2col_applies(const conv_i8_call* c) {
  if (c->P->cg == 1) return 0;
  imp_plan Q;
  i8_imp_make_plan(c->P, &Q);
  return im2col_pays(c->P, &Q);
}

static accel_status im2col_run(const conv_i8_call* c) {
  return conv_im2col(c->P, c->in_zero, c->in, c->apack, c->wsum, c->weights, c->out, c->ep, c->ws,
                     c->nth);
}

const conv_i8_impl conv_i8_im2col_vnni_impl = {.name = "im2col_vnni", .applies = im2col_applies,
                                               .supports = im2col_supports, .run = im2col_run};
#endif /* CONV_I8_VNNI */
