/* conv/i8_amx.c - INT8 CONV on AMX tiles: the probe (conv_i8_amx) and the implicit GEMM on
 * tiles (impl "amx").
 *
 * AMX (builds for AMX-TILE and AMX-INT8, where CPUID, the OS and Linux's
 * ARCH_REQ_XCOMP_PERM grant the tiles; checked once; accel_int8_amx / ACCEL_INT8_AMX=0
 * switch it off): the implicit GEMM on tiles, for every layer the implicit, small-grid and
 * flat 1x1 paths would take that has >= 4 blocks of 4 input channels and >= 16 depth steps
 * (conv_amx). TDPBSUD multiplies s8 weights (A: 16 channels x 16 depth steps x 4 bytes) by
 * the copy as it lies (B: 16 consecutive 4-channel blocks at one tap are rows a constant
 * stride apart, 16 positions 64 contiguous bytes); depth tile = (chunk of up to 16 blocks,
 * tap), the last chunk starting early with zero weights on the blocks already covered, so
 * nothing past the copy is read. 32 channels x 32 positions per micro-tile (4 C, 2 A, 2 B
 * tiles), from the offset correction, stored to a [32][256] tile the implicit GEMM's
 * epilogue converts; without dropped columns and with converters in lanes, from zero, the
 * codes of every 64 positions made straight after their micro-tiles, adding the
 * correction. A 1x1 layer's single depth tile keeps its A tiles over a unit. ResNet's 3x3
 * layers run at ~2.5x the VNNI kernel's speed (figures: docs/whole_network_time.md).
 * Packed weights hold both layouts where AMX is available.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* syscall (the AMX permission) */
#endif
#include "conv/i8.h"

#ifdef CONV_I8_AMX
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* ---- AMX: whether this process may use the tiles ------------------------------------------
 * Compiled in where the compiler targets AMX-TILE and AMX-INT8 (-march=native on a CPU with
 * AMX); used where CPUID reports both, the OS enables the tile state in XCR0 and Linux
 * grants this process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA):
 * checked once (pthread_once). ACCEL_INT8_AMX=0 in the environment, or conv_i8_amx(0),
 * turns the path off (the VNNI paths then run as on machines without AMX). */
#ifdef CONV_I8_AMX
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static int amx_have;            /* written once, under amx_once */
static atomic_int amx_want = 1; /* the switch (conv_i8_amx) */

static void amx_probe(void) {
  uint32_t a, b, c, d;
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0), "c"(0));
  if (a < 7) return;
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
  if (!((c >> 27) & 1)) return; /* OSXSAVE: xgetbv is there */
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
  if (!((d >> 24) & 1) || !((d >> 25) & 1)) return; /* AMX-TILE, AMX-INT8 */
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return; /* XTILECFG, XTILEDATA enabled by the OS */
  if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0)
    return;
  const char* env = getenv("ACCEL_INT8_AMX");
  if (env != NULL && env[0] == '0') atomic_store(&amx_want, 0);
  amx_have = 1;
}

static int amx_available(void) {
  pthread_once(&amx_once, amx_probe);
  return amx_have;
}

int conv_i8_amx(int request) {
  if (!amx_available()) return 0;
  if (request >= 0) atomic_store(&amx_want, request != 0);
  return atomic_load(&amx_want);
}
#else
int conv_i8_amx(int request) {
  (void)request;
  return 0;
}
#endif

int i8_amx_packed(const plan* P) {
#ifdef CONV_I8_AMX
  return P->cg > 1 && P->c4 >= AMX_MIN_C4 && P->kd4 >= AMX_MIN_KD4 && amx_available();
#else
  (void)P;
  return 0;
#endif
}

#ifdef CONV_I8_AMX
/* ---- AMX: the implicit GEMM on tiles -------------------------------------------------------
 * TDPBSUD: C[16 channels][16 positions] (int32) += A[16 channels][16 depth steps x 4 bytes]
 * (s8 weights, LAYOUT_AMX) . B[16 depth steps][16 positions x 4 bytes] (u8: the implicit
 * GEMM's copy as it lies). Depth tile d = (chunk j, tap t) is kc consecutive 4-channel blocks
 * of the copy at tap t: B's rows are the copy at offset off(first_j, t) + 4 n, nph * plane * 4
 * bytes apart, 64 bytes (16 positions) each. The accumulators start at the offset correction
 * (the implicit GEMM's), so the sums are exactly its sums. Micro-tile 32 channels x 32
 * positions: C tiles 0-3, A tiles 4-5, B tiles 6-7 (rows and bytes set by the job's
 * configuration: A kc * 4 bytes a row, B kc rows). Unit = (group, run of at most AMX_NT
 * 16-position tiles, block of AMB channels): its tiles into the participant's [AMB][AMX_LDC]
 * sums, then the implicit GEMM's epilogue (i8_tile_codes). Each item loads the configuration on
 * the thread that runs it (the tile state is per thread) and releases the tiles at its end. */
enum { AMX_NT = 16, AMX_LDC = AMX_NT * 16 };

typedef struct __attribute__((aligned(64))) amx_cfg {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} amx_cfg;

typedef struct amx_job {
  amx_cfg cfg;
  const imp_job* J;
  const int64_t* boff; /* depth tile d's B offset in its group's copy */
  int64_t bstride;     /* bytes between B's rows (consecutive 4-channel blocks) */
  int64_t ntt, tiles;  /* 16-position tiles of the grid; runs of them (units per block) */
} amx_job;

/* One depth tile into the C tiles: B's tiles from bd, A's from ad (NULL: loaded already). */
static inline __attribute__((always_inline)) void amx_step(const int nm, const int nn,
                                                           const int8_t* ad, const uint8_t* bd,
                                                           int64_t bstride) {
  if (ad != NULL) _tile_loadd(4, ad, 64);
  _tile_loadd(6, bd, bstride);
  _tile_dpbsud(0, 4, 6);
  if (nn > 1) {
    _tile_loadd(7, bd + 64, bstride);
    _tile_dpbsud(1, 4, 7);
  }
  if (nm > 1) {
    if (ad != NULL) _tile_loadd(5, ad + 1024, 64);
    _tile_dpbsud(2, 5, 6);
    if (nn > 1) _tile_dpbsud(3, 5, 7);
  }
}

static inline __attribute__((always_inline)) void amx_block(const int nm, const int nn,
                                                            int64_t nk, const int8_t* a,
                                                            const uint8_t* b,
                                                            const int64_t* boff,
                                                            int64_t bstride,
                                                            const int32_t* corr, int32_t* c) {
  /* corr NULL: the sums start at 0 (the codes add the correction); a NULL: one depth tile,
   * whose A tiles are loaded already */
  if (corr != NULL) {
    _tile_loadd(0, corr, 64);
    if (nn > 1) _tile_loadd(1, corr, 64);
    if (nm > 1) _tile_loadd(2, corr + 256, 64);
    if (nm > 1 && nn > 1) _tile_loadd(3, corr + 256, 64);
  } else {
    _tile_zero(0);
    if (nn > 1) _tile_zero(1);
    if (nm > 1) _tile_zero(2);
    if (nm > 1 && nn > 1) _tile_zero(3);
  }
  if (a == NULL) {
    amx_step(nm, nn, NULL, b + boff[0], bstride);
  } else {
    for (int64_t d = 0; d < nk; ++d) amx_step(nm, nn, a + d * 2048, b + boff[d], bstride);
  }
  _tile_stored(0, c, AMX_LDC * 4);
  if (nn > 1) _tile_stored(1, c + 16, AMX_LDC * 4);
  if (nm > 1) _tile_stored(2, c + 16 * AMX_LDC, AMX_LDC * 4);
  if (nm > 1 && nn > 1) _tile_stored(3, c + 16 * AMX_LDC + 16, AMX_LDC * 4);
}

typedef void (*amx_fn)(int64_t, const int8_t*, const uint8_t*, const int64_t*, int64_t,
                       const int32_t*, int32_t*);
#define AMXK(NM_, NN_)                                                                      \
  static void amx_block_##NM_##_##NN_(int64_t nk, const int8_t* a, const uint8_t* b,       \
                                      const int64_t* boff, int64_t bs, const int32_t* corr, \
                                      int32_t* c) {                                         \
    amx_block(NM_, NN_, nk, a, b, boff, bs, corr, c);                                       \
  }
AMXK(1, 1)
AMXK(1, 2)
AMXK(2, 1)
AMXK(2, 2)
#undef AMXK
static const amx_fn amx_table[2][2] = {{amx_block_1_1, amx_block_1_2},
                                       {amx_block_2_1, amx_block_2_2}};

static void amx_pack_item(void* ctx, int64_t blk, int participant) {
  const imp_job* J = ctx;
  (void)participant;
  i8_pack_amx_block(J->P, J->weights, blk / J->P->ablocks, blk % J->P->ablocks, J->pdata, J->psum);
}

static void amx_unit_item(void* ctx, int64_t u, int participant) {
  const amx_job* X = ctx;
  const imp_job* J = X->J;
  const plan* P = J->P;
  const int64_t ab = u % P->ablocks, tl = u / P->ablocks % X->tiles;
  const int64_t grp = u / (P->ablocks * X->tiles);
  const int64_t t0 = X->ntt * tl / X->tiles, t1 = X->ntt * (tl + 1) / X->tiles;
  const int64_t rows = P->mg - ab * AMB < AMB ? P->mg - ab * AMB : AMB;
  const int nm = rows > 16 ? 2 : 1;
  const int64_t blk = grp * P->ablocks + ab;
  int32_t corr[AMB * 16] __attribute__((aligned(64)));
  for (int64_t m = 0; m < nm * 16; ++m) {
    const uint32_t sum = (uint32_t)J->wsum[blk * AMB + m];
    const int32_t v = (int32_t)(0u - (uint32_t)(128 + J->in_zero) * sum);
    for (int n = 0; n < 16; ++n) corr[m * 16 + n] = v;
  }
  int32_t* tile = (int32_t*)J->scratch[participant];
  const int8_t* a = J->apack + blk * P->nk * 2048;
  const uint8_t* base = J->B->base + grp * J->Q->gbytes;
  const int64_t k0 = grp * P->mg + ab * AMB, ncols = J->Q->ncols;
  /* grid column n is output position n (no dropped columns) and the converters are in lanes:
   * the codes of every two micro-tiles (64 positions) straight after them, while their sums
   * are in L1 */
  const int direct = J->cvt != NULL && J->Q->wq == P->g->out_w;
  panel_codes E;
  int32_t crow[AMB];
  if (direct) {
    const int64_t at = (J->b * P->g->k + k0) * P->ohw;
    for (int64_t m = 0; m < nm * 16; ++m) crow[m] = corr[m * 16];
    E = (panel_codes){.cvt = J->cvt + k0, .out = J->out + at, .ldo = P->ohw, .rows = rows,
                      .cols = 0, .lo = J->lo, .hi = J->hi,
                      .split = rows_form(J->cvt + k0, rows, J->add != NULL), .add = J->add,
                      .opnd = J->add != NULL ? J->ep->ew_operand + at : NULL, .wide = 0,
                      .corr = crow, .lut = J->lut};
  }
  _tile_loadconfig(&X->cfg);
  /* one depth tile (a 1x1 layer of at most 16 channel blocks): its A tiles once */
  const int keep_a = P->nk == 1;
  if (keep_a) {
    _tile_loadd(4, a, 64);
    if (nm > 1) _tile_loadd(5, a + 1024, 64);
  }
  int64_t done = t0; /* direct: the codes of tiles [t0, done) are made */
  for (int64_t t = t0; t < t1; t += 2) {
    const int nn = t + 1 < t1 ? 2 : 1;
    amx_table[nm - 1][nn - 1](P->nk, keep_a ? NULL : a, base + 64 * t, X->boff,
                              X->bstride, direct ? NULL : corr, tile + (t - t0) * 16);
    if (direct && (t + nn - done == 4 || t + nn == t1)) {
      /* 64 positions at a time: one step of the lanes' converter, no lane wasted */
      panel_codes e = E;
      e.out += done * 16;
      if (e.add != NULL) e.opnd += done * 16;
      e.cols = (t + nn) * 16 < ncols ? (t + nn - done) * 16 : ncols - done * 16;
      codes_body(&e, tile + (done - t0) * 16, AMX_LDC, 1);
      done = t + nn;
    }
  }
  _tile_release();
  if (direct) return;
  i8_tile_codes(J, tile, AMX_LDC, t0 * 16, t1 * 16 < ncols ? t1 * 16 : ncols, rows, k0);
}

static accel_status conv_amx(const plan* P, int32_t in_zero, const int8_t* in,
                             const int8_t* apack, const int32_t* wsum, const int8_t* weights,
                             int8_t* out, const sdp_i8* ep, workspace* ws, int nth) {
  const conv_geometry* g = P->g;
  imp_plan Q;
  i8_imp_make_plan(P, &Q);
  i8_imp_used_phases(P, &Q);
  const int64_t ntt = (Q.ncols + 15) / 16;
  int64_t tiles = (ntt + AMX_NT - 1) / AMX_NT;
  while (nth > 1 && tiles < ntt && g->groups * tiles * P->ablocks < 4 * nth) ++tiles;
  const int64_t units = g->groups * tiles * P->ablocks;
  if (nth > units) nth = (int)units;
  const int64_t nbuild = g->groups * P->c4 * Q.nph * Q.hq;
  const int pack_now = apack == NULL;
  int8_t* pdata = NULL;
  int32_t* psum = NULL;
  if (pack_now) {
    const size_t db = amx_data_bytes(P);
    char* p = workspace_get(ws, WS_PACK, db + amx_wsum_bytes(P));
    if (p == NULL) return ACCEL_ERR_NO_MEMORY;
    apack = pdata = (int8_t*)p;
    wsum = psum = (int32_t*)(p + db);
  }
  uint8_t* copy;
  int64_t* off;
  if (!i8_imp_reserve_copy(P, &Q, in_zero, ws, &copy, &off)) return ACCEL_ERR_NO_MEMORY;
  int64_t* boff = workspace_get(ws, WS_BOFF, (size_t)P->nk * sizeof(int64_t));
  if (boff == NULL) return ACCEL_ERR_NO_MEMORY;
  for (int64_t j = 0; j < P->nch; ++j) {
    const int64_t first = AKT * j < P->c4 - P->kc ? AKT * j : P->c4 - P->kc;
    for (int64_t t = 0; t < P->rs; ++t) boff[j * P->rs + t] = off[first * P->rs + t];
  }
  const int64_t ldt = (Q.wq + 16 + 63) & ~(int64_t)63;
  const size_t tile_bytes = (size_t)AMB * AMX_LDC * sizeof(int32_t);
  char* scratch[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    scratch[t] = workspace_get(ws, t, tile_bytes + (size_t)(4 * ldt));
    if (scratch[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  const bsrc B = {.base = copy, .group_bytes = Q.gbytes, .off = off, .ncols = Q.ncols, .npanels = 0,
                  .tiles = 0};
  int64_t rows_per_item = 4096 / (Q.wq * 4) + 1;
  if (rows_per_item * 4 * nth > nbuild) rows_per_item = nbuild / (4 * nth) + 1;
  imp_job J = {.P = P, .Q = &Q, .B = &B, .in_zero = in_zero, .in = in, .weights = weights,
               .apack = apack, .wsum = wsum, .pdata = pdata, .psum = psum, .out = out,
               .ep = ep, .scratch = scratch, .tile_bytes = tile_bytes, .ldt = ldt,
               .rows_per_item = rows_per_item, .nbuild = nbuild};
  if (!i8_imp_prepare_lanes(P, ep, ws, &J)) return ACCEL_ERR_NO_MEMORY;
  int64_t nbuild_items = (nbuild + rows_per_item - 1) / rows_per_item;
  if (imp_flat(g)) {
    J.flat_segs = (P->hw + FLAT_SEG - 1) / FLAT_SEG;
    nbuild_items = g->groups * P->c4 * J.flat_segs;
  }
  amx_job X;
  memset(&X, 0, sizeof X);
  X.cfg.palette = 1;
  for (int i = 0; i < 4; ++i) {
    X.cfg.colsb[i] = 64;
    X.cfg.rows[i] = 16;
  }
  for (int i = 4; i < 6; ++i) {
    X.cfg.colsb[i] = (uint16_t)(P->kc * 4);
    X.cfg.rows[i] = 16;
  }
  for (int i = 6; i < 8; ++i) {
    X.cfg.colsb[i] = 64;
    X.cfg.rows[i] = (uint8_t)P->kc;
  }
  X.J = &J;
  X.boff = boff;
  X.bstride = Q.nph * Q.plane * 4;
  X.ntt = ntt;
  X.tiles = tiles;
  if (pack_now) pool_for(nth, g->groups * P->ablocks, amx_pack_item, &J);
  for (int64_t b = 0; b < g->n; ++b) { /* the copy is rebuilt for each image */
    J.b = b;
    pool_for(nth, nbuild_items, i8_imp_build_item, &J);
    pool_for(nth, units, amx_unit_item, &X);
  }
  return ACCEL_OK;
}

/* The tiles: AMX on and a layer its layout is packed for (i8_amx_packed). */
static int amx_applies(const conv_i8_call* c) {
  return c->P->cg != 1 && i8_amx_packed(c->P) && conv_i8_amx(-1);
}

static accel_status amx_run(const conv_i8_call* c) {
  return conv_amx(c->P, c->in_zero, c->in, c->xpack, c->xsum, c->weights, c->out, c->ep, c->ws,
                  c->nth);
}

const conv_i8_impl conv_i8_amx_impl = {.name = "amx", .applies = amx_applies, .supports = NULL,
                                       .run = amx_run};
#endif /* CONV_I8_AMX */
