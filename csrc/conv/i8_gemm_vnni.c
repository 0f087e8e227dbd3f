/* conv/i8_gemm_vnni.c - the VNNI GEMM the INT8 implementations share: the micro-kernel, tiles
 * of panels over a byte source, the implicit GEMM's input copy and its units. */
#include "conv/i8.h"

#ifdef CONV_I8_VNNI
/* ---- VNNI micro-kernel ---------------------------------------------------------------------
 * c[m][0..16*nv) = sum over depth steps k of the dot products (4 bytes each) of the u8 columns
 * at b + off[k] (16 positions x 4 channels per vector) with the s8 weight word a[k][m]. */
static inline __attribute__((always_inline)) void ukr(const int nv, int64_t kd4, const int8_t* a,
                                                      const uint8_t* b, const int64_t* off,
                                                      const int32_t* corr, int32_t* c,
                                                      int64_t ldc) {
  /* the accumulators start at the (negated) correction */
#define INIT(m) __m512i c##m##0 = _mm512_set1_epi32(corr[m]), c##m##1 = c##m##0, c##m##2 = c##m##0;
  INIT(0) INIT(1) INIT(2) INIT(3) INIT(4) INIT(5) INIT(6) INIT(7)
#undef INIT
  for (int64_t k = 0; k < kd4; ++k) {
    const uint8_t* bk = b + off[k];
    const __m512i b0 = _mm512_loadu_si512(bk);
    const __m512i b1 = nv > 1 ? _mm512_loadu_si512(bk + 64) : b0;
    const __m512i b2 = nv > 2 ? _mm512_loadu_si512(bk + 128) : b0;
    const i32_alias* ak = (const i32_alias*)(a + k * MR * 4);
#define ROW(m)                                                   \
  {                                                              \
    const __m512i av = _mm512_set1_epi32(ak[m]);                 \
    c##m##0 = _mm512_dpbusd_epi32(c##m##0, b0, av);              \
    if (nv > 1) c##m##1 = _mm512_dpbusd_epi32(c##m##1, b1, av);  \
    if (nv > 2) c##m##2 = _mm512_dpbusd_epi32(c##m##2, b2, av);  \
  }
    ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5) ROW(6) ROW(7)
#undef ROW
  }
#define ST(m)                                                    \
  _mm512_storeu_si512(c + m * ldc, c##m##0);                     \
  if (nv > 1) _mm512_storeu_si512(c + m * ldc + 16, c##m##1);    \
  if (nv > 2) _mm512_storeu_si512(c + m * ldc + 32, c##m##2);
  ST(0) ST(1) ST(2) ST(3) ST(4) ST(5) ST(6) ST(7)
#undef ST
}

typedef void (*ukr_fn)(int64_t, const int8_t*, const uint8_t*, const int64_t*, const int32_t*,
                       int32_t*, int64_t);
#define UKR(NV_)                                                                            \
  static void ukr##NV_(int64_t k, const int8_t* a, const uint8_t* b, const int64_t* o,      \
                       const int32_t* corr, int32_t* c, int64_t l) {                        \
    ukr(NV_, k, a, b, o, corr, c, l);                                                       \
  }
UKR(1)
UKR(2)
UKR(3)
static const ukr_fn ukr_table[4] = {0, ukr1, ukr2, ukr3};


/* Accumulators of panels [p0, p1) x block mb of group grp into tile[MR][TILE * NR]:
 * sum(u * w) - (128 + in_zero) * sum(w), modulo 2^32 (exact: the true sum fits int32). */
/* Without pre-packed weights: workspace for packing them on this call (the parallel region
 * fills it), which the kernel then reads as if they had come packed. 0 when out of memory. */
int i8_reserve_packing(const plan* P, workspace* ws, int8_t** pdata, int32_t** psum,
                       const int8_t** apack, const int32_t** wsum) {
  const size_t db = data_bytes(P, LAYOUT_VNNI);
  char* p = workspace_get(ws, WS_PACK, db + wsum_bytes(P, LAYOUT_VNNI));
  if (p == NULL) return 0;
  *apack = *pdata = (int8_t*)p;
  *wsum = *psum = (int32_t*)(p + db);
  return 1;
}

void i8_gemm_tile(const plan* P, const bsrc* B, const int8_t* apack, const int32_t* wsum,
                  int32_t in_zero, int64_t grp, int64_t mb, int64_t p0, int64_t p1,
                  int32_t* tile, const panel_codes* E) {
  const int64_t blk = grp * P->mblocks + mb;
  const int8_t* a = apack + blk * P->kd4 * MR * 4;
  const uint8_t* b = B->base + grp * B->group_bytes;
  int32_t corr[MR];
  for (int m = 0; m < MR; ++m)
    corr[m] = (int32_t)((uint32_t)(128 + in_zero) * (uint32_t)wsum[blk * MR + m]);
  /* -corr[m] below: corr is never INT32_MIN in practice, but negate modulo 2^32 anyway */
  for (int m = 0; m < MR; ++m) corr[m] = (int32_t)(0u - (uint32_t)corr[m]);
  /* the linear conv form takes the bias in the accumulators' initial values (one addition
   * fewer per value in the epilogue: fold_bias) */
  panel_codes e0;
  if (E != NULL) {
    e0 = *E;
    if (E->add == NULL && E->lut == NULL && E->corr == NULL)
      e0.split = fold_bias(E->cvt, E->rows, E->split, corr);
  }
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t left = B->ncols - p * NR;
    const int nv = left >= NR ? 3 : (int)((left + 15) / 16);
    int32_t* c = tile + (p - p0) * NR;
    ukr_table[nv](P->kd4, a, b + p * NR * 4, B->off, corr, c, TILE * NR);
    if (E != NULL) { /* grid columns p * NR.. are output positions */
      panel_codes e = e0;
      e.out += p * NR;
      if (e.add != NULL) e.opnd += p * NR;
      e.cols = left < NR ? left : NR;
      codes_of_panel(&e, c, TILE * NR);
    }
  }
}

/* Tiles of panels, and the threads' shares of the units (group, tile, block of MR channels),
 * tile-major so that a thread runs every block over a tile's input while it is in cache.
 * Thread t of `team` takes units [units * t / team, units * (t + 1) / team); tile i covers
 * panels [npanels * i / ntiles, npanels * (i + 1) / ntiles). The tile count is the one of the
 * few smallest (tiles of at most TILE panels) that gives the busiest thread the fewest panels:
 * 18 panels on 2 threads as 8 + 8 + 2 would give one thread twice the other's work. */
int64_t i8_choose_tiles(int64_t npanels, int64_t mblocks, int64_t groups, int nth) {
  const int64_t base = (npanels + TILE - 1) / TILE;
  if (nth == 1 || groups * base * mblocks > 4096) return base;
  int64_t best = base, best_load = INT64_MAX;
  for (int64_t nt = base; nt <= npanels && nt <= base + 2 * nth; ++nt) {
    const int64_t units = groups * nt * mblocks;
    int64_t worst = 0;
    for (int t = 0; t < nth; ++t) {
      int64_t load = 0;
      for (int64_t u = units * t / nth; u < units * (t + 1) / nth; ++u) {
        const int64_t tl = u / mblocks % nt;
        load += npanels * (tl + 1) / nt - npanels * tl / nt;
      }
      if (load > worst) worst = load;
    }
    if (worst < best_load) {
      best_load = worst;
      best = nt;
    }
  }
  return best;
}

void i8_imp_make_plan(const plan* P, imp_plan* Q) {
  const conv_geometry* g = P->g;
  const int64_t sh = g->stride_h, sw = g->stride_w;
  const int64_t rq = (int64_t)(g->kernel_h - 1) * g->dilation_h / sh;
  const int64_t sq = (int64_t)(g->kernel_w - 1) * g->dilation_w / sw;
  Q->nph = sh * sw;
  for (int64_t ph = 0; ph < Q->nph; ++ph) Q->phase[ph] = Q->slot[ph] = (int8_t)ph;
  Q->wq = g->out_w + sq;
  Q->hq = g->out_h + rq;
  Q->plane = Q->hq * Q->wq;
  Q->gbytes = P->c4 * Q->nph * Q->plane * 4;
  Q->ncols = (int64_t)(g->out_h - 1) * Q->wq + g->out_w;
}

/* The implicit GEMM copies only the phases some tap reads: a 1x1 convolution at stride 2
 * (ResNet's downsampling branches) reads one phase in four, and copying all four took about
 * a third of the layer (docs/kernels.md, conv/i8_gemm_vnni.c). */
void i8_imp_used_phases(const plan* P, imp_plan* Q) {
  const conv_geometry* g = P->g;
  const int64_t sh = g->stride_h, sw = g->stride_w;
  for (int64_t ph = 0; ph < sh * sw; ++ph) Q->slot[ph] = -1;
  for (int64_t r = 0; r < g->kernel_h; ++r)
    for (int64_t s = 0; s < g->kernel_w; ++s)
      Q->slot[(r * g->dilation_h % sh) * sw + s * g->dilation_w % sw] = 0;
  Q->nph = 0;
  for (int64_t ph = 0; ph < sh * sw; ++ph)
    if (Q->slot[ph] == 0) {
      Q->slot[ph] = (int8_t)Q->nph;
      Q->phase[Q->nph++] = (int8_t)ph;
    }
  Q->gbytes = P->c4 * Q->nph * Q->plane * 4;
}

static void imp_offsets(const plan* P, const imp_plan* Q, int64_t* off) {
  const conv_geometry* g = P->g;
  const int64_t sh = g->stride_h, sw = g->stride_w;
  int64_t k = 0;
  for (int64_t c4 = 0; c4 < P->c4; ++c4)
    for (int64_t r = 0; r < g->kernel_h; ++r)
      for (int64_t s = 0; s < g->kernel_w; ++s) {
        const int64_t ry = r * g->dilation_h, sx = s * g->dilation_w;
        const int64_t ph = Q->slot[(ry % sh) * sw + sx % sw];
        off[k++] = ((c4 * Q->nph + ph) * Q->plane + (ry / sh) * Q->wq + sx / sw) * 4;
      }
}

/* The implicit GEMM's input copy (its slack filled with the input's zero) and the depth
 * steps' offsets, in the workspace; 0 when memory runs out. */
int i8_imp_reserve_copy(const plan* P, const imp_plan* Q, int32_t in_zero, workspace* ws,
                        uint8_t** copy, int64_t** off) {
  const size_t copy_bytes = (size_t)(P->g->groups * Q->gbytes);
  *copy = workspace_get(ws, WS_COPY, copy_bytes + COPY_SLACK);
  *off = workspace_get(ws, WS_OFF, (size_t)P->kd4 * sizeof(int64_t));
  if (*copy == NULL || *off == NULL) return 0;
  memset(*copy + copy_bytes, (uint8_t)in_zero ^ 0x80, COPY_SLACK);
  imp_offsets(P, Q, *off);
  return 1;
}

/* Copy row positions [0, wq) from 4 channel rows: position xq holds column xq of rows[j]
 * (already offset by the row's first column) for xq in [lo, hi), the padding byte `fill`
 * elsewhere and for a missing channel (rows[j] NULL). Masked loads read only [lo, hi): no
 * byte outside the rows is touched. */
static void interleave4(const int8_t* const* rows, int64_t lo, int64_t hi, int64_t wq,
                        int8_t fill, uint8_t* d) {
  const __m512i pad = _mm512_set1_epi8(fill);
  for (int64_t x = 0; x < wq; x += 64) {
    const __mmask64 in = inside_mask(x, lo, hi);
    __m512i v[4];
    for (int j = 0; j < 4; ++j)
      v[j] = rows[j] != NULL && in ? _mm512_mask_loadu_epi8(pad, in, rows[j] + x) : pad;
    interleave4_store(v, x, wq, d);
  }
}

/* interleave4 at column stride 2: position xq holds column 2 xq of rows[j]. The even bytes are
 * picked in registers (vpmovwb of two 64-byte loads whose masks hold only the bytes read), so
 * no staging row: gathering into a row first and loading it back (a store-forwarding stall per
 * load) made the stride-2 copy a fifth of ResNet's 3x3/2 layers. */
static void interleave4_s2(const int8_t* const* rows, int64_t lo, int64_t hi, int64_t wq,
                           int8_t fill, uint8_t* d) {
  const __m512i pad = _mm512_set1_epi8(fill);
  for (int64_t x = 0; x < wq; x += 64) {
    const __mmask64 in = inside_mask(x, lo, hi);
    /* the bytes from column 2 (x + a) to 2 (x + b - 1), [a, b) the positions inside */
    const int64_t a = lo > x ? lo - x : 0, b = hi < x + 64 ? hi - x : 64;
    const __mmask64 m0 = in ? inside_mask(0, 2 * a, 2 * b - 1) : 0;
    const __mmask64 m1 = in ? inside_mask(64, 2 * a, 2 * b - 1) : 0;
    __m512i v[4];
    for (int j = 0; j < 4; ++j) {
      if (rows[j] == NULL || !in) {
        v[j] = pad;
        continue;
      }
      const __m256i e0 = _mm512_cvtepi16_epi8(_mm512_maskz_loadu_epi8(m0, rows[j] + 2 * x));
      const __m256i e1 =
          _mm512_cvtepi16_epi8(_mm512_maskz_loadu_epi8(m1, rows[j] + 2 * x + 64));
      v[j] = _mm512_mask_blend_epi8(
          in, pad, _mm512_inserti64x4(_mm512_castsi256_si512(e0), e1, 1));
    }
    interleave4_store(v, x, wq, d);
  }
}

/* Build copy row (grp, c4, phase, yq) of image `img` (its channel 0). Strides 1 and 2 read
 * the input rows in place (a copy through tmp first cost about a fifth of MobileNetV2's
 * whole int8 time); larger strides gather the row's columns into tmp: 4 rows of
 * ldt >= wq + 16 bytes. */
static void imp_build_row(const plan* P, const imp_plan* Q, const int8_t* img, int64_t grp,
                          int64_t c4, int64_t ph, int64_t yq, uint8_t* copy, int32_t in_zero,
                          int8_t* tmp, int64_t ldt) {
  const conv_geometry* g = P->g;
  const int64_t sw = g->stride_w, W = g->w, wq = Q->wq;
  uint8_t* d = copy + grp * Q->gbytes + ((c4 * Q->nph + ph) * Q->hq + yq) * wq * 4;
  const int64_t py = Q->phase[ph] / sw, px = Q->phase[ph] % sw;
  const int64_t iy = yq * g->stride_h + py - g->pad_top;
  const int8_t zb = (int8_t)in_zero;
  if (iy < 0 || iy >= g->h) {
    memset(d, (uint8_t)zb ^ 0x80, (size_t)wq * 4);
    return;
  }
  /* columns xq whose input column xq*sw + x0 lies inside [0, W) */
  const int64_t x0 = px - g->pad_left;
  int64_t lo = x0 >= 0 ? 0 : (-x0 + sw - 1) / sw;
  int64_t hi = x0 > W - 1 ? 0 : (W - 1 - x0) / sw + 1;
  if (hi > wq) hi = wq;
  if (lo > hi) lo = hi;
  const int8_t* rows[4];
  for (int j = 0; j < 4; ++j) {
    const int64_t c = c4 * 4 + j;
    if (c >= P->cg) { /* a missing channel: zero weights, any byte */
      rows[j] = NULL;
      continue;
    }
    const int8_t* src = img + ((grp * P->cg + c) * g->h + iy) * W + x0;
    if (sw <= 2) {
      rows[j] = src;
      continue;
    }
    int8_t* t = tmp + j * ldt;
    rows[j] = t;
    for (int64_t xq = lo; xq < hi; ++xq) t[xq] = src[xq * sw];
  }
  if (sw == 2) {
    interleave4_s2(rows, lo, hi, wq, zb, d);
  } else {
    interleave4(rows, lo, hi, wq, zb, d);
  }
}

/* J->cvt (and J->add for a residual add) when every channel's converter has the lane form
 * (sdp_i8_lanes.h), kept from run to run (i8_lanes_cached); else NULL: sdp_i8_span per row.
 * Outputs of one position per image convert along the channels instead. 0 when out of
 * memory. */
int i8_imp_prepare_lanes(const plan* P, const sdp_i8* ep, workspace* ws, imp_job* J) {
  const conv_geometry* g = P->g;
  J->cvt = NULL;
  J->add = NULL;
  J->lut = NULL;
  if (P->ohw <= 1) return 1;
  const int64_t vmax = P->kd * 255 * 128; /* |v|: depth x |in - in_zero| x |w| */
  int kind;
  const sdp_i8_lane_cvt* cvt =
      i8_lanes_cached(ep, g->k, vmax, 1, ws, &kind, &J->lo, &J->hi, &J->add_consts);
  if (cvt == NULL) return 0;
  if (kind == 1) {
    J->cvt = cvt;
  } else if (kind == 2) {
    J->cvt = cvt;
    J->add = &J->add_consts;
  } else if (ep->lut != NULL) {
    sdp_i8_lane_cvt* t = workspace_get(ws, WS_CVT, (size_t)g->k * sizeof(sdp_i8_lane_cvt));
    if (t == NULL) return 0;
    if (sdp_i8_lanes_prepare_lut(ep, 0, g->k, vmax, t, &J->lut_consts)) {
      J->cvt = t;
      J->lut = &J->lut_consts;
    }
  }
  return 1;
}

/* The codes of a tile's rows of channels k0.. (rows of them, ldc apart, cols values each) at
 * output offset `at` of channel k0 (the operand at the same offset), in lanes; split: the rows'
 * form (fold_bias's where the bias is in the values), or -1: rows_form's. */
void i8_imp_codes_of_rows(const imp_job* J, int64_t k0, int64_t rows, const int32_t* c,
                          int64_t ldc, int64_t at, int64_t cols, int wide, int split) {
  const panel_codes E = {.cvt = J->cvt + k0, .out = J->out + at, .ldo = J->P->ohw, .rows = rows,
                         .cols = cols, .lo = J->lo, .hi = J->hi,
                         .split = split >= 0 ? split
                                             : rows_form(J->cvt + k0, rows, J->add != NULL),
                         .add = J->add,
                         .opnd = J->add != NULL ? J->ep->ew_operand + at : NULL, .wide = wide,
                         .corr = NULL, .lut = J->lut};
  codes_of_panel(&E, c, ldc);
}

void i8_imp_pack_item(void* ctx, int64_t blk, int participant) {
  const imp_job* J = ctx;
  (void)participant;
  i8_pack_block(J->P, J->weights, blk / J->P->mblocks, blk % J->P->mblocks, J->pdata, J->psum);
}

static void imp_build_flat(const imp_job* J, int64_t item) {
  const plan* P = J->P;
  const int64_t part = item % J->flat_segs, c4 = item / J->flat_segs % P->c4;
  const int64_t grp = item / J->flat_segs / P->c4;
  const int64_t p0 = part * FLAT_SEG, n = P->hw - p0 < FLAT_SEG ? P->hw - p0 : FLAT_SEG;
  const int8_t* img = J->in + J->b * J->P->g->c * P->hw;
  const int8_t* rows[4];
  for (int j = 0; j < 4; ++j) {
    const int64_t c = c4 * 4 + j;
    rows[j] = c < P->cg ? img + (grp * P->cg + c) * P->hw + p0 : NULL;
  }
  uint8_t* d = (uint8_t*)J->B->base + grp * J->Q->gbytes + (c4 * P->hw + p0) * 4;
  interleave4(rows, 0, n, n, (int8_t)J->in_zero, d);
}

/* imp_flat_s2's copy of block (grp, c4): output rows yq, yq + 1 (input rows 2 yq, 2 yq + 2)
 * as one vector of 2 wq <= 64 positions, their even bytes picked by vpmovwb of two loads in
 * which row yq + 1's bytes sit 2 wq bytes on (a merge-masked load from its row 2 wq bytes
 * back, inside the input: 2 W - 2 wq >= W - 1); no byte outside the rows is read. */
static void imp_build_s2_plane(const imp_job* J, int64_t item) {
  const plan* P = J->P;
  const conv_geometry* g = P->g;
  const int64_t c4 = item % P->c4, grp = item / P->c4;
  const int64_t W = g->w, wq = J->Q->wq, hq = J->Q->hq;
  const int8_t* img = J->in + J->b * g->c * P->hw;
  const __m512i pad = _mm512_set1_epi8((char)J->in_zero);
  const __mmask64 ma = inside_mask(0, 0, 2 * wq - 1), mb0 = inside_mask(0, 2 * wq, 4 * wq - 1);
  const __mmask64 mb1 = inside_mask(64, 2 * wq, 4 * wq - 1);
  const int8_t* src[4];
  for (int j = 0; j < 4; ++j) {
    const int64_t c = c4 * 4 + j;
    src[j] = c < P->cg ? img + (grp * P->cg + c) * P->hw : NULL;
  }
  uint8_t* d = (uint8_t*)J->B->base + grp * J->Q->gbytes + c4 * hq * wq * 4;
  for (int64_t yq = 0; yq < hq; yq += 2, d += 8 * wq) {
    const int two = yq + 1 < hq;
    __m512i v[4];
    for (int j = 0; j < 4; ++j) {
      if (src[j] == NULL) {
        v[j] = pad;
        continue;
      }
      const int8_t* ra = src[j] + 2 * yq * W;
      const int8_t* rb = ra + 2 * W - 2 * wq; /* row 2 yq + 2, 2 wq bytes back */
      __m512i l0 = _mm512_maskz_loadu_epi8(ma, ra), l1 = _mm512_setzero_si512();
      if (two) {
        l0 = _mm512_mask_loadu_epi8(l0, mb0, rb);
        l1 = _mm512_maskz_loadu_epi8(mb1, rb + 64);
      }
      v[j] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(l0)),
                                _mm512_cvtepi16_epi8(l1), 1);
    }
    interleave4_store(v, 0, two ? 2 * wq : wq, d);
  }
}

/* The steps of a plane-at-a-time copy (plane_step) of the stride-1, one-phase copy of P (no
 * stride-phase split: Q->nph 1, stride 1), in the workspace (WS_XP, which only the column
 * path uses otherwise): J->steps and J->nsteps; J->steps NULL (the copy built row by row) in
 * builds without VBMI, for planes of over 256 steps (16384 positions; the caller builds the
 * table alone before the copy's parallel loop, so it is capped: 256 steps, 24 KiB, hold
 * ResNet's 58 x 58 planes; larger planes were not measured), and, as a guard, where a step's
 * input bytes span more than 64. 0 when memory runs out. */
int i8_imp_plane_steps(const plan* P, const imp_plan* Q, workspace* ws, imp_job* J) {
  J->steps = NULL;
  J->nsteps = 0;
#ifdef __AVX512VBMI__
  const conv_geometry* g = P->g;
  if (Q->nph != 1 || g->stride_h != 1 || g->stride_w != 1) return 1;
  const int64_t plane = Q->plane, nsteps = (plane + 63) / 64, hw = P->hw;
  if (nsteps > 256) return 1;
  plane_step* st = workspace_get(ws, WS_XP, (size_t)nsteps * sizeof(plane_step));
  if (st == NULL) return 0;
  int64_t yq = 0, xq = 0; /* position p's copy row and column */
  for (int64_t s = 0; s < nsteps; ++s) {
    plane_step* t = st + s;
    memset(t->idx, 0, sizeof t->idx);
    t->inside = 0;
    t->base = -1;
    for (int i = 0; i < 64 && 64 * s + i < plane; ++i) {
      const int64_t iy = yq - g->pad_top, ix = xq - g->pad_left;
      if (iy >= 0 && iy < g->h && ix >= 0 && ix < g->w) {
        const int64_t o = iy * g->w + ix;
        if (t->base < 0) t->base = o;
        if (o - t->base >= 64) return 1; /* not at stride 1 (see plane_step): row by row */
        t->idx[i] = (uint8_t)(o - t->base);
        t->inside |= (uint64_t)1 << i;
      }
      if (++xq == Q->wq) {
        xq = 0;
        ++yq;
      }
    }
    if (t->base < 0) t->base = 0;
    t->load = inside_mask(0, 0, hw - t->base);
  }
  J->steps = st;
  J->nsteps = nsteps;
#else
  (void)P;
  (void)Q;
  (void)ws;
#endif
  return 1;
}

#ifdef __AVX512VBMI__
/* The plane of block (grp, c4) of a stride-1, one-phase copy, 64 positions a step
 * (i8_imp_plane_steps): each channel's bytes by vpermb from a masked load of its plane, the
 * padding blended in. Row by row, a 14x14 layer's rows of 16 positions each paid a
 * 64-position interleave and the row's set-up. */
static void imp_build_plane(const imp_job* J, int64_t item) {
  const plan* P = J->P;
  const int64_t c4 = item % P->c4, grp = item / P->c4;
  const int64_t plane = J->Q->plane;
  const int8_t* img = J->in + J->b * P->g->c * P->hw;
  const __m512i pad = _mm512_set1_epi8((char)J->in_zero);
  const int8_t* src[4];
  for (int j = 0; j < 4; ++j) {
    const int64_t c = c4 * 4 + j;
    src[j] = c < P->cg ? img + (grp * P->cg + c) * P->hw : NULL;
  }
  uint8_t* d = (uint8_t*)J->B->base + grp * J->Q->gbytes + c4 * plane * 4;
  for (int64_t s = 0; s < J->nsteps; ++s) {
    const plane_step* t = J->steps + s;
    const __m512i idx = _mm512_loadu_si512(t->idx);
    __m512i v[4];
    for (int j = 0; j < 4; ++j) {
      if (src[j] == NULL || t->inside == 0) {
        v[j] = pad;
        continue;
      }
      const __m512i x = _mm512_maskz_loadu_epi8(t->load, src[j] + t->base);
      v[j] = _mm512_mask_blend_epi8(t->inside, pad, _mm512_permutexvar_epi8(idx, x));
    }
    const int64_t n = plane - 64 * s < 64 ? plane - 64 * s : 64;
    interleave4_store(v, 0, n, d + 256 * s);
  }
}
#endif

void i8_imp_build_item(void* ctx, int64_t chunk, int participant) {
  const imp_job* J = ctx;
#ifdef __AVX512VBMI__
  if (J->steps != NULL) {
    imp_build_plane(J, chunk);
    return;
  }
#endif
  if (J->flat_segs > 0) {
    imp_build_flat(J, chunk);
    return;
  }
  if (J->s2_pairs) {
    imp_build_s2_plane(J, chunk);
    return;
  }
  int8_t* tmp = (int8_t*)(J->scratch[participant] + J->tile_bytes);
  const int8_t* img = J->in + J->b * J->P->g->c * J->P->hw;
  const imp_plan* Q = J->Q;
  const int64_t r0 = chunk * J->rows_per_item;
  const int64_t r1 = r0 + J->rows_per_item < J->nbuild ? r0 + J->rows_per_item : J->nbuild;
  /* row r0 = (grp, c4, phase, yq), then counted on (the divisions per row cost as much as a
   * short row's copy) */
  int64_t yq = r0 % Q->hq, rest = r0 / Q->hq;
  int64_t ph = rest % Q->nph;
  rest /= Q->nph;
  int64_t c4 = rest % J->P->c4, grp = rest / J->P->c4;
  for (int64_t item = r0; item < r1; ++item) {
    imp_build_row(J->P, Q, img, grp, c4, ph, yq, (uint8_t*)J->B->base, J->in_zero, tmp,
                  J->ldt);
    if (++yq < Q->hq) continue;
    yq = 0;
    if (++ph < Q->nph) continue;
    ph = 0;
    if (++c4 < J->P->c4) continue;
    c4 = 0;
    ++grp;
  }
}


/* Unit u = (group, tile, block of MR channels) of image b: its GEMM, then the epilogue. */
void i8_imp_unit_item(void* ctx, int64_t u, int participant) {
  const imp_job* J = ctx;
  const plan* P = J->P;
  const imp_plan* Q = J->Q;
  const conv_geometry* g = P->g;
  const sdp_i8* ep = J->ep;
  const int64_t b = J->b, tiles = J->tiles, npanels = J->B->npanels;
  int32_t* tile = (int32_t*)J->scratch[participant];
  const int64_t mb = u % P->mblocks, tl = u / P->mblocks % tiles;
  const int64_t grp = u / (P->mblocks * tiles);
  const int64_t p0 = npanels * tl / tiles, p1 = npanels * (tl + 1) / tiles;
  const int64_t rows = P->mg - mb * MR < MR ? P->mg - mb * MR : MR;
  const int64_t k0 = grp * P->mg + mb * MR;
  if (J->cvt != NULL && Q->wq == g->out_w) {
    /* grid column n is output position n: each panel's codes straight after its GEMM */
    const int64_t at = (b * g->k + k0) * P->ohw;
    const panel_codes E = {.cvt = J->cvt + k0, .out = J->out + at, .ldo = P->ohw, .rows = rows,
                           .cols = 0, .lo = J->lo, .hi = J->hi,
                           .split = rows_form(J->cvt + k0, rows, J->add != NULL), .add = J->add,
                           .opnd = J->add != NULL ? ep->ew_operand + at : NULL, .wide = 1,
                           .corr = NULL, .lut = J->lut};
    i8_gemm_tile(P, J->B, J->apack, J->wsum, J->in_zero, grp, mb, p0, p1, tile, &E);
    return;
  }
  i8_gemm_tile(P, J->B, J->apack, J->wsum, J->in_zero, grp, mb, p0, p1, tile, NULL);
  i8_tile_codes(J, tile, TILE * NR, p0 * NR, p1 * NR < Q->ncols ? p1 * NR : Q->ncols, rows, k0);
}

/* The codes of a tile of sums of grid columns [n0, n1) (at most TILE * NR), rows of channels
 * k0.. (ldc apart) of image J->b: its outputs' runs moved down over the dropped columns, then
 * converted. */
void i8_tile_codes(const imp_job* J, int32_t* tile, int64_t ldc, int64_t n0, int64_t n1,
                   int64_t rows, int64_t k0) {
  const plan* P = J->P;
  const imp_plan* Q = J->Q;
  const conv_geometry* g = P->g;
  const sdp_i8* ep = J->ep;
  const int64_t b = J->b;
  /* the tile's outputs, as runs of grid columns */
  seg segs[TILE * NR + 1];
  int nseg = 0;
  for (int64_t n = n0; n < n1;) {
    const int64_t y = n / Q->wq, x = n % Q->wq;
    if (x >= g->out_w) {
      n += Q->wq - x;
      continue;
    }
    const int64_t len = g->out_w - x < n1 - n ? g->out_w - x : n1 - n;
    const int64_t o = y * g->out_w + x;
    if (nseg > 0 && segs[nseg - 1].col + segs[nseg - 1].len == n - n0 &&
        segs[nseg - 1].o + segs[nseg - 1].len == o) {
      segs[nseg - 1].len += len; /* no garbage columns between: one run */
    } else {
      segs[nseg++] = (seg){n - n0, o, len};
    }
    n += len;
  }
  if (nseg == 0) return;
  const int64_t o0 = segs[0].o, cnt = segs[nseg - 1].o + segs[nseg - 1].len - o0;
  if (P->ohw == 1) { /* one output per channel: along the channels */
    epilogue_column(ep, tile, ldc, segs[0].col, rows, k0, b * g->k + k0, J->out);
    return;
  }
  for (int64_t m = 0; m < rows; ++m) {
    int32_t* row = tile + m * ldc;
    for (int i = 0; i < nseg; ++i)
      if (segs[i].col != segs[i].o - o0)
        move_down(row + segs[i].col, row + (segs[i].o - o0), segs[i].len);
    if (J->cvt != NULL) continue; /* all rows at once below */
    const int64_t k = k0 + m;
    convert_at(ep, k, row, J->out, (b * g->k + k) * P->ohw + o0, cnt);
  }
  if (J->cvt != NULL)
    i8_imp_codes_of_rows(J, k0, rows, tile, ldc, (b * g->k + k0) * P->ohw + o0, cnt, 1, -1);
}
#endif /* CONV_I8_VNNI */
