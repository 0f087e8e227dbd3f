/* conv/i8_small_vnni.c - INT8 CONV with output channels along the vector, on the implicit
 * GEMM's copy (impl "small_vnni").
 *
 * channels along the vector (where the implicit GEMM's vectors of 16 grid positions would
 * hold over 3 % more lanes than there are outputs: every ResNet 3x3 layer, the 7x7 and
 * 14x14 ones most): 16 output channels per zmm vector, each position's 4 input bytes
 * broadcast, on the implicit GEMM's copy (conv_small).
 */
#include "conv/i8.h"

#ifdef CONV_I8_VNNI
/* ---- output channels along the vector (small grids, dropped columns) ----------------------
 * The implicit GEMM puts 16 grid positions in a vector: a 7x7 output (49 positions, 61 grid
 * columns with the 3x3 window's dropped ones) fills 64 lanes, so ResNet's 7x7 layers computed
 * 31 % more than their outputs (docs/kernels.md, conv/i8_small_vnni.c).
 * Here a vector holds 16 output channels (two MR blocks of the packed weights: 32 bytes each
 * per depth step, joined in the register) and each output position's 4 input bytes of a depth
 * step are broadcast to it, so no lane is wasted on a dropped column. The input is the
 * implicit GEMM's copy (i8_imp_build_item); a micro-tile is SP positions (any positions: each
 * has its own pointer into the copy) x up to SZ blocks of MR channels (3 zmm vectors), 24 zmm
 * accumulators. The sums are those of the implicit GEMM (the same correction), transposed to
 * channel rows for the epilogue. */
enum { SP = 8, SZ = 6, SMALL_CHUNK = 32 /* position tiles a unit at most */ };

/* c[m * ldc + p] = t[p][m / MR] lane m % MR, for positions p < np and blocks < nv: 8 x 8
 * transposes of int32. */
static __attribute__((noinline)) void skr_store(const __m256i (*t)[SZ], int np, int nv,
                                                int32_t* c, int64_t ldc) {
  const __mmask8 keep = (__mmask8)((1u << np) - 1u);
  for (int v = 0; v < nv; ++v) {
    const __m256i t0 = _mm256_unpacklo_epi32(t[0][v], t[1][v]);
    const __m256i t1 = _mm256_unpackhi_epi32(t[0][v], t[1][v]);
    const __m256i t2 = _mm256_unpacklo_epi32(t[2][v], t[3][v]);
    const __m256i t3 = _mm256_unpackhi_epi32(t[2][v], t[3][v]);
    const __m256i t4 = _mm256_unpacklo_epi32(t[4][v], t[5][v]);
    const __m256i t5 = _mm256_unpackhi_epi32(t[4][v], t[5][v]);
    const __m256i t6 = _mm256_unpacklo_epi32(t[6][v], t[7][v]);
    const __m256i t7 = _mm256_unpackhi_epi32(t[6][v], t[7][v]);
    const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    const __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
    const __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
    int32_t* cv = c + v * MR * ldc;
    _mm256_mask_storeu_epi32(cv, keep, _mm256_permute2x128_si256(u0, u4, 0x20));
    _mm256_mask_storeu_epi32(cv + ldc, keep, _mm256_permute2x128_si256(u1, u5, 0x20));
    _mm256_mask_storeu_epi32(cv + 2 * ldc, keep, _mm256_permute2x128_si256(u2, u6, 0x20));
    _mm256_mask_storeu_epi32(cv + 3 * ldc, keep, _mm256_permute2x128_si256(u3, u7, 0x20));
    _mm256_mask_storeu_epi32(cv + 4 * ldc, keep, _mm256_permute2x128_si256(u0, u4, 0x31));
    _mm256_mask_storeu_epi32(cv + 5 * ldc, keep, _mm256_permute2x128_si256(u1, u5, 0x31));
    _mm256_mask_storeu_epi32(cv + 6 * ldc, keep, _mm256_permute2x128_si256(u2, u6, 0x31));
    _mm256_mask_storeu_epi32(cv + 7 * ldc, keep, _mm256_permute2x128_si256(u3, u7, 0x31));
  }
}

typedef void (*skr_fn)(int64_t, const int8_t*, int64_t, const uint8_t* const*, const int64_t*,
                       const int32_t*, int32_t*, int64_t);

/* The micro-tile: SP positions x nb blocks of MR channels (blocks 2v and 2v + 1 in zmm vector
 * v: ablk apart in the packed weights); with nb odd the last vector's upper lanes have zero
 * weights. zmm rather than the ymm (8 channels a vector) this kernel had: on Zen 5 (full
 * 512-bit datapaths) vpdpbusd runs two a cycle on zmm as on ymm (4 cycles' latency), so zmm
 * does twice the products a cycle; on Zen 4 both widths ran 2 x 256 bits a cycle
 * (docs/kernels.md). */
static inline __attribute__((always_inline)) void skz(const int np, const int nb, int64_t kd4,
                                                      const int8_t* a, int64_t ablk,
                                                      const uint8_t* const* bp,
                                                      const int64_t* off, const int32_t* corr,
                                                      int32_t* c, int64_t ldc) {
  const int nz = (nb + 1) / 2;
  const __m512i i0 = _mm512_loadu_si512(corr);
  const __m512i i1 = nz > 1 ? _mm512_loadu_si512(corr + 2 * MR) : i0;
  const __m512i i2 = nz > 2 ? _mm512_loadu_si512(corr + 4 * MR) : i0;
#define ZDECL(p) __m512i c##p##0 = i0, c##p##1 = i1, c##p##2 = i2;
  ZDECL(0) ZDECL(1) ZDECL(2) ZDECL(3) ZDECL(4) ZDECL(5) ZDECL(6) ZDECL(7)
#undef ZDECL
  const uint8_t *b0 = bp[0], *b1 = bp[np > 1 ? 1 : 0], *b2 = bp[np > 2 ? 2 : 0],
                *b3 = bp[np > 3 ? 3 : 0], *b4 = bp[np > 4 ? 4 : 0], *b5 = bp[np > 5 ? 5 : 0],
                *b6 = bp[np > 6 ? 6 : 0], *b7 = bp[np > 7 ? 7 : 0];
  for (int64_t k = 0; k < kd4; ++k) {
    const int64_t o = off[k];
    const int8_t* ak = a + k * MR * 4;
#define WY(j) _mm256_loadu_si256((const __m256i*)(ak + (j) * ablk))
#define WZ(v)                                                                              \
  (2 * (v) + 1 < nb ? _mm512_inserti64x4(_mm512_castsi256_si512(WY(2 * (v))), WY(2 * (v) + 1), 1) \
                    : _mm512_zextsi256_si512(WY(2 * (v))))
    const __m512i w0 = WZ(0);
    const __m512i w1 = nz > 1 ? WZ(1) : w0;
    const __m512i w2 = nz > 2 ? WZ(2) : w0;
#undef WZ
#undef WY
#define ZPOS(p)                                                                    \
  if (np > p) {                                                                    \
    const __m512i x = _mm512_set1_epi32(*(const i32_alias*)(b##p + o));            \
    c##p##0 = _mm512_dpbusd_epi32(c##p##0, x, w0);                                 \
    if (nz > 1) c##p##1 = _mm512_dpbusd_epi32(c##p##1, x, w1);                     \
    if (nz > 2) c##p##2 = _mm512_dpbusd_epi32(c##p##2, x, w2);                     \
  }
    ZPOS(0) ZPOS(1) ZPOS(2) ZPOS(3) ZPOS(4) ZPOS(5) ZPOS(6) ZPOS(7)
#undef ZPOS
  }
  __m256i t[SP][SZ];
#define ZST(p)                                                                     \
  t[p][0] = _mm512_castsi512_si256(c##p##0);                                       \
  t[p][1] = _mm512_extracti64x4_epi64(c##p##0, 1);                                 \
  if (nz > 1) {                                                                    \
    t[p][2] = _mm512_castsi512_si256(c##p##1);                                     \
    t[p][3] = _mm512_extracti64x4_epi64(c##p##1, 1);                               \
  }                                                                                \
  if (nz > 2) {                                                                    \
    t[p][4] = _mm512_castsi512_si256(c##p##2);                                     \
    t[p][5] = _mm512_extracti64x4_epi64(c##p##2, 1);                               \
  }
  ZST(0) ZST(1) ZST(2) ZST(3) ZST(4) ZST(5) ZST(6) ZST(7)
#undef ZST
  skr_store(t, np, nb, c, ldc);
}

#define SKZ(NP_, NB_)                                                                       \
  static void skz##NP_##_##NB_(int64_t k, const int8_t* a, int64_t ablk,                   \
                               const uint8_t* const* bp, const int64_t* o,                 \
                               const int32_t* corr, int32_t* c, int64_t ldc) {             \
    skz(NP_, NB_, k, a, ablk, bp, o, corr, c, ldc);                                         \
  }
#define SKZ6(NP_) SKZ(NP_, 1) SKZ(NP_, 2) SKZ(NP_, 3) SKZ(NP_, 4) SKZ(NP_, 5) SKZ(NP_, 6)
SKZ6(1) SKZ6(2) SKZ6(3) SKZ6(4) SKZ6(5) SKZ6(6) SKZ6(7) SKZ6(8)
#undef SKZ6
#undef SKZ
#define SKZ_ROW(NP_) \
  {skz##NP_##_1, skz##NP_##_2, skz##NP_##_3, skz##NP_##_4, skz##NP_##_5, skz##NP_##_6}
static const skr_fn skz_table[SP][SZ] = {SKZ_ROW(1), SKZ_ROW(2), SKZ_ROW(3), SKZ_ROW(4),
                                         SKZ_ROW(5), SKZ_ROW(6), SKZ_ROW(7), SKZ_ROW(8)};
#undef SKZ_ROW

/* Whether the implicit GEMM's panels would compute enough more lanes than there are outputs
 * (their lanes: 16 per started vector of each panel of NR grid columns): over 3 % more, or for
 * 1x1 kernels over 15 % more. Measured, 1 thread: 3x3 layers gain 2.6 % at 56x56 (3.6 % more
 * lanes), 4 % at 28x28 (8 %), 9 % at 14x14 (14 %), 19 % at 7x7 (31 %). A 1x1 kernel's depth
 * is a ninth of a 3x3's over the same channels, so the per-output costs this kernel adds (the
 * transposes to channel rows, the epilogue over them) weigh more: its 1x1 layers at 14x14 (6 %
 * more lanes) ran 1-15 % slower than the implicit GEMM's, at 7x7 (31 %) 3-13 % faster
 * (docs/kernels.md, conv/i8_small_vnni.c). */
static int small_grid_pays(const plan* P, const imp_plan* Q) {
  if (P->ohw < SP) return 0;
  const int64_t full = Q->ncols / NR, rest = Q->ncols % NR;
  const int64_t lanes = full * NR + (rest + 15) / 16 * 16;
  const int pointwise = P->g->kernel_h == 1 && P->g->kernel_w == 1;
  return 100 * lanes > (pointwise ? 115 : 103) * P->ohw;
}

/* Unit u = (group, chunk of position tiles, set of channel blocks) of image b: its tiles,
 * then the epilogue of each channel over their positions. The channel blocks are split, in
 * pairs (a zmm vector's 16 channels), into sets of at most SZ as evenly as can be, the
 * positions into tiles of at most SP, and the tiles into chunks of at most SMALL_CHUNK (a
 * unit's int32 sums: with 16-channel pairs, up to SZ x 8 channels x 256 positions, 48 KiB, an
 * L1d's worth on Zen 5; re-measured there with 48-channel sets: chunks of 16, 24 and 48 tiles
 * within 1-4 % of 32 on ResNet's 3x3 layers, none better: docs/kernels.md), more when there
 * are too few units to share evenly among the threads. Consecutive units share a chunk's
 * input. */
typedef struct small_job {
  const imp_job* J;
  int64_t sets, ptiles, chunks, ldr;
  int64_t sw, sh; /* a position's / an output row's step in the copy's columns / rows */
} small_job;

static void small_unit_item(void* ctx, int64_t u, int participant) {
  const small_job* S = ctx;
  const imp_job* J = S->J;
  const plan* P = J->P;
  const imp_plan* Q = J->Q;
  const conv_geometry* g = P->g;
  const sdp_i8* ep = J->ep;
  const int64_t set = u % S->sets, chunk = u / S->sets % S->chunks;
  const int64_t grp = u / S->sets / S->chunks;
  const int64_t t0 = S->ptiles * chunk / S->chunks, t1 = S->ptiles * (chunk + 1) / S->chunks;
  const int64_t first = P->ohw * t0 / S->ptiles, cnt = P->ohw * t1 / S->ptiles - first;
  const int64_t pairs = (P->mblocks + 1) / 2; /* of MR blocks */
  const int64_t mb0 = 2 * (pairs * set / S->sets);
  int64_t mb1 = 2 * (pairs * (set + 1) / S->sets);
  if (mb1 > P->mblocks) mb1 = P->mblocks;
  const int nv = (int)(mb1 - mb0);
  int32_t* rows = (int32_t*)J->scratch[participant]; /* [SZ * MR][ldr]: the chunk's sums */
  const int64_t ldr = S->ldr;
  const int64_t blk = grp * P->mblocks + mb0;
  int32_t corr[SZ * MR] = {0};
  for (int64_t m = 0; m < nv * MR; ++m)
    corr[m] = (int32_t)(0u - (uint32_t)(128 + J->in_zero) * (uint32_t)J->wsum[blk * MR + m]);
  const int64_t chans = (mb1 * MR < P->mg ? mb1 * MR : P->mg) - mb0 * MR;
  const int64_t kc0 = grp * P->mg + mb0 * MR;
  /* the linear conv form: the bias in the initial values too (fold_bias) */
  const int split = J->cvt != NULL && J->add == NULL && J->lut == NULL
                        ? fold_bias(J->cvt + kc0, chans, rows_form(J->cvt + kc0, chans, 0), corr)
                        : -1;
  const int8_t* a = J->apack + blk * P->kd4 * MR * 4;
  const int64_t ablk = P->kd4 * MR * 4;
  /* the positions' copy addresses counted on from the chunk's first output (a division per
   * position cost about 1 % of ResNet-50's int8 time) */
  const int64_t skip = 4 * (S->sh * Q->wq - S->sw * g->out_w);
  int64_t ox = first % g->out_w;
  const uint8_t* bq =
      J->B->base + grp * Q->gbytes + 4 * ((first / g->out_w) * S->sh * Q->wq + ox * S->sw);
  for (int64_t t = t0, o0 = first; t < t1; ++t) {
    const int64_t o1 = P->ohw * (t + 1) / S->ptiles;
    const uint8_t* bp[SP];
    for (int64_t o = o0; o < o1; ++o) {
      bp[o - o0] = bq;
      bq += 4 * S->sw;
      if (++ox == g->out_w) {
        ox = 0;
        bq += skip;
      }
    }
    skz_table[o1 - o0 - 1][nv - 1](P->kd4, a, ablk, bp, J->B->off, corr, rows + o0 - first,
                                   ldr);
    o0 = o1;
  }
  if (J->cvt != NULL) {
    i8_imp_codes_of_rows(J, kc0, chans, rows, ldr, (J->b * g->k + kc0) * P->ohw + first, cnt, 0,
                         split);
    return;
  }
  for (int64_t m = 0; m < chans; ++m) {
    const int32_t* row = rows + m * ldr;
    const int64_t k = grp * P->mg + mb0 * MR + m;
    const int64_t at = (J->b * g->k + k) * P->ohw + first;
    convert_at(ep, k, row, J->out, at, cnt);
  }
}

static accel_status conv_small(const plan* P, int32_t in_zero, const int8_t* in,
                               const int8_t* apack, const int32_t* wsum, const int8_t* weights,
                               int8_t* out, const sdp_i8* ep, workspace* ws, int nth) {
  const conv_geometry* g = P->g;
  imp_plan Q;
  i8_imp_make_plan(P, &Q);
  i8_imp_used_phases(P, &Q);
  /* Strided, with every stride phase read (3x3/2): the copy at unit stride instead, the grid
   * of the stride-1 convolution whose every sh-th row and sw-th column are the outputs (each
   * position has its own address here). The same bytes as the phases', in half as many rows,
   * twice as long: the stride-2 copy of short rows (ResNet's 3x3/2 layers at 14x14 and 7x7,
   * 4 phases of 8-15 positions a row) cost about a tenth of those layers. */
  conv_geometry g1 = *g;
  plan P1 = *P;
  const plan* PB = P; /* the copy's plan */
  int64_t sw = 1, sh = 1;
  if (Q.nph > 1 && Q.nph == (int64_t)g->stride_h * g->stride_w) {
    g1.stride_h = g1.stride_w = 1;
    g1.out_h = (g->out_h - 1) * g->stride_h + 1;
    g1.out_w = (g->out_w - 1) * g->stride_w + 1;
    make_plan(&g1, &P1);
    i8_imp_make_plan(&P1, &Q);
    PB = &P1;
    sw = g->stride_w;
    sh = g->stride_h;
  }
  const int64_t sets = ((P->mblocks + 1) / 2 + SZ / 2 - 1) / (SZ / 2);
  const int64_t ptiles = (P->ohw + SP - 1) / SP;
  /* at least 8 units a thread when there are several: units are claimed one at a time, so
   * the last one claimed is at most an eighth of a thread's work (11 units of a 14x14 layer
   * with 256 channels on 2 threads kept one thread 6/5 as long as the other) */
  int64_t chunks = (ptiles + SMALL_CHUNK - 1) / SMALL_CHUNK;
  if (nth > 1 && g->groups * sets * chunks < 8 * nth) {
    chunks = (8 * nth + g->groups * sets - 1) / (g->groups * sets);
    if (chunks > ptiles) chunks = ptiles;
  }
  const int64_t units = g->groups * sets * chunks;
  const int64_t ldr = ((ptiles + chunks - 1) / chunks + 1) * SP; /* a chunk's positions, + SP */
  if (nth > units) nth = (int)units;
  const int64_t nbuild = g->groups * P->c4 * Q.nph * Q.hq;
  const int pack_now = apack == NULL;
  int8_t* pdata = NULL;
  int32_t* psum = NULL;
  if (pack_now && !i8_reserve_packing(P, ws, &pdata, &psum, &apack, &wsum)) {
    return ACCEL_ERR_NO_MEMORY;
  }
  uint8_t* copy;
  int64_t* off;
  if (!i8_imp_reserve_copy(PB, &Q, in_zero, ws, &copy, &off)) return ACCEL_ERR_NO_MEMORY;
  const int64_t ldt = (Q.wq + 16 + 63) & ~(int64_t)63;
  const size_t rows_bytes = (size_t)(SZ * MR * ldr) * sizeof(int32_t);
  const size_t scratch_bytes = rows_bytes > (size_t)(4 * ldt) ? rows_bytes : (size_t)(4 * ldt);
  char* scratch[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    scratch[t] = workspace_get(ws, t, scratch_bytes);
    if (scratch[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  const bsrc B = {.base = copy, .group_bytes = Q.gbytes, .off = off, .ncols = Q.ncols, .npanels = 0,
                  .tiles = 0};
  int64_t rows_per_item = 4096 / (Q.wq * 4) + 1;
  if (rows_per_item * 4 * nth > nbuild) rows_per_item = nbuild / (4 * nth) + 1;
  /* the copy's tmp rows (strides > 2) sit at the start of each scratch: tile_bytes 0 */
  imp_job J = {.P = P, .Q = &Q, .B = &B, .in_zero = in_zero, .in = in, .weights = weights,
               .apack = apack, .wsum = wsum, .pdata = pdata, .psum = psum, .out = out,
               .ep = ep, .scratch = scratch, .ldt = ldt, .rows_per_item = rows_per_item,
               .nbuild = nbuild};
  if (!i8_imp_prepare_lanes(P, ep, ws, &J)) return ACCEL_ERR_NO_MEMORY;
  const small_job S = {.J = &J, .sets = sets, .ptiles = ptiles, .chunks = chunks, .ldr = ldr,
                       .sw = sw, .sh = sh};
  int64_t nbuild_items = (nbuild + rows_per_item - 1) / rows_per_item;
  if (imp_flat(g)) {
    J.flat_segs = (P->hw + FLAT_SEG - 1) / FLAT_SEG;
    nbuild_items = g->groups * P->c4 * J.flat_segs;
  } else if (PB == P && imp_flat_s2(g, &Q)) {
    J.s2_pairs = 1;
    nbuild_items = g->groups * P->c4;
  } else {
    if (!i8_imp_plane_steps(PB, &Q, ws, &J)) return ACCEL_ERR_NO_MEMORY;
    if (J.steps != NULL) nbuild_items = g->groups * P->c4;
  }
  if (pack_now) pool_for(nth, g->groups * P->mblocks, i8_imp_pack_item, &J);
  imp_job JB = J; /* the copy's job: its plan */
  JB.P = PB;
  for (int64_t b = 0; b < g->n; ++b) { /* the copy is rebuilt for each image */
    J.b = JB.b = b;
    pool_for(nth, nbuild_items, i8_imp_build_item, &JB);
    pool_for(nth, units, small_unit_item, (void*)&S);
  }
  return ACCEL_OK;
}

static int small_supports(const conv_i8_call* c) { return c->P->cg != 1; }

static int small_applies(const conv_i8_call* c) {
  if (c->P->cg == 1) return 0;
  imp_plan Q;
  i8_imp_make_plan(c->P, &Q);
  return small_grid_pays(c->P, &Q);
}

static accel_status small_run(const conv_i8_call* c) {
  return conv_small(c->P, c->in_zero, c->in, c->apack, c->wsum, c->weights, c->out, c->ep, c->ws,
                    c->nth);
}

const conv_i8_impl conv_i8_small_vnni_impl = {.name = "small_vnni", .applies = small_applies,
                                              .supports = small_supports, .run = small_run};
#endif /* CONV_I8_VNNI */
