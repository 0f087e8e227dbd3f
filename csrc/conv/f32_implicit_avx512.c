/* conv/f32_implicit_avx512.c - FP32 CONV by implicit GEMM (impl "implicit_avx512"): the
 * 8-channel x 48-position micro-kernel reads the padded, stride-phase-split copy in place.
 *
 * - implicit GEMM: the input is copied once per call, zero-padded and split into its stride
 * phases (a 1x1 kernel's one phase only: a 1x1/2 downsample copies a quarter), so that
 * every depth row (c, r, s) of the im2col matrix is that copy at a constant offset; the
 * kernel reads it in place over a grid of out_h rows of wq >= out_w columns and stores each
 * vector's outputs past the few garbage columns. Used where the garbage is
 * < 1/12 and the depth <= 2304 (a deeper weight panel no longer streams well from L2); with
 * stride-2 phases only up to 1024 deep (512 where the packed panels stay in L1, below).
 * Where the packed panels stay in L1 (a 48 KB L1d: l1_keeps_panel), a tile's first block of
 * channels reading the input in place fetches each next panel's rows (the input comes from
 * L3 or memory), and a panel 96-170 deep of a tile with >= 16 channel blocks is copied into
 * a contiguous buffer that stays in L1 while the blocks pass over it (the same sums).
 */
#include "conv/f32.h"

#ifdef __AVX512F__
/* Implicit: depth row k of the tile starts at b + off[k] in a padded copy of the input, read
 * unaligned, the last vector under `tail` (a whole panel's unmasked, in a copy of the kernel
 * of its own: ResNet's 7x7/2 stem and the 1x1 layers 1-4 % faster, the same sums); A packed
 * as [k][MR] (one pointer: eight row pointers plus the offsets run gcc out of registers). The
 * whole depth in one call, so the results go straight to the output, compacted past each
 * row's garbage columns as `d` says. */

static inline __attribute__((always_inline)) __m512 ep_vec(const reg_ep* e, int m, __m512 t,
                                                           int64_t at, __mmask16 m1,
                                                           __mmask16 m2, int64_t gap) {
  if (e->scale != NULL) t = _mm512_mul_ps(t, _mm512_set1_ps(e->scale[m]));
  if (e->shift != NULL) t = _mm512_add_ps(t, _mm512_set1_ps(e->shift[m]));
  if (e->operand != NULL) { /* each lane's operand sits where the lane is stored */
    __m512 x = _mm512_maskz_loadu_ps(m1, e->operand + at);
    if (m2) x = _mm512_mask_loadu_ps(x, m2, e->operand + at - gap);
    t = _mm512_add_ps(t, x);
  }
  if (e->act == ACCEL_ACT_RELU) {
    t = _mm512_max_ps(_mm512_setzero_ps(), t); /* 0 > t ? 0 : t */
  } else if (e->act == ACCEL_ACT_CLIP) {
    t = _mm512_max_ps(_mm512_set1_ps(e->lo), t); /* lo > t ? lo : t */
    t = _mm512_min_ps(_mm512_set1_ps(e->hi), t); /* hi < t ? hi : t */
  }
  return t;
}

#define IM_STORE1(m, v)                                                          \
  {                                                                              \
    float* o_ = out + m * ldo + d->o[v];                                         \
    const __m512 r_ = e != NULL ? ep_vec(e, m, c##m##v, m * ldo + d->o[v], d->m1[v], \
                                         d->m2[v], d->gap)                       \
                                : c##m##v;                                       \
    _mm512_mask_storeu_ps(o_, d->m1[v], r_);                                     \
    if (d->m2[v]) _mm512_mask_storeu_ps(o_ - d->gap, d->m2[v], r_);              \
  }
#define IM_STORE(m)                                                              \
  if (mr > m) {                                                                  \
    IM_STORE1(m, 0)                                                              \
    if (nv > 1) IM_STORE1(m, 1)                                                  \
    if (nv > 2) IM_STORE1(m, 2)                                                  \
  }

#define TOTAL_ADD(m)                                                             \
  if (mr > m) {                                                                  \
    c##m##0 = _mm512_add_ps(_mm512_load_ps(total + m * NR), c##m##0);            \
    if (nv > 1) c##m##1 = _mm512_add_ps(_mm512_load_ps(total + m * NR + 16), c##m##1); \
    if (nv > 2) c##m##2 = _mm512_add_ps(_mm512_load_ps(total + m * NR + 32), c##m##2); \
  }
#define TOTAL_STORE(m)                                                           \
  if (mr > m) {                                                                  \
    _mm512_store_ps(total + m * NR, c##m##0);                                    \
    if (nv > 1) _mm512_store_ps(total + m * NR + 16, c##m##1);                   \
    if (nv > 2) _mm512_store_ps(total + m * NR + 32, c##m##2);                   \
  }

static inline __attribute__((always_inline)) void uki_body(const int mr, const int nv,
                                                           const int full, int64_t kd,
                                                           const float* a, const float* b,
                                                           const int64_t* off, float* out,
                                                           int64_t ldo, const vdest* d,
                                                           __mmask16 tail, const reg_ep* e,
                                                           const float* pfb) {
  const __mmask16 t0 = nv == 1 ? tail : (__mmask16)0xFFFF;
  const __mmask16 t1 = nv == 2 ? tail : (__mmask16)0xFFFF;
  float total[MR * NR] __attribute__((aligned(64))); /* the blocks' running sums */
  ALL_ROWS(ACC_ROW)
  /* the element-wise operand (a residual written layers ago, often out of cache) is fetched
   * while the sums run (docs/kernels.md, conv/f32_implicit_avx512.c) */
  if (e != NULL && e->operand != NULL)
    for (int m = 0; m < mr; ++m)
      for (int v = 0; v < nv; ++v)
        _mm_prefetch((const char*)(e->operand + m * ldo + d->o[v]), _MM_HINT_T0);
  /* Block 0 sums into the accumulators; each later block is stored first, summed from zero,
   * and added to the stored total (written before it is read: no uninitialised reads). */
  for (int64_t k0 = 0; k0 < kd; k0 += SUM_BLOCK) {
    const int64_t k1 = kd - k0 < SUM_BLOCK ? kd : k0 + SUM_BLOCK;
    if (k0 > 0) {
      ALL_ROWS(TOTAL_STORE)
      ALL_ROWS(ACC_ZERO)
    }
    for (int64_t k = k0; k < k1; ++k) {
      const float* bk = b + off[k];
      if (pfb != NULL) { /* the next panel's row k (its first pass: the input comes from L3) */
        const char* q = (const char*)(pfb + off[k]);
        _mm_prefetch(q, _MM_HINT_T0);
        _mm_prefetch(q + 64, _MM_HINT_T0);
        _mm_prefetch(q + 128, _MM_HINT_T0);
        _mm_prefetch(q + 188, _MM_HINT_T0); /* its last float, when the row is unaligned */
      }
      const __m512 b0 = _mm512_maskz_loadu_ps(t0, bk);
      const __m512 b1 = nv > 1 ? _mm512_maskz_loadu_ps(t1, bk + 16) : b0;
      const __m512 b2 = nv < 3 ? b0 : full ? _mm512_loadu_ps(bk + 32)
                                           : _mm512_maskz_loadu_ps(tail, bk + 32);
      const float* ak = a + k * MR;
      ACC_FMA(0, ak[0]) ACC_FMA(1, ak[1]) ACC_FMA(2, ak[2]) ACC_FMA(3, ak[3])
      ACC_FMA(4, ak[4]) ACC_FMA(5, ak[5]) ACC_FMA(6, ak[6]) ACC_FMA(7, ak[7])
    }
    if (k0 > 0) {
      ALL_ROWS(TOTAL_ADD)
    }
  }
  ALL_ROWS(IM_STORE)
}

typedef void (*uki_fn)(int64_t, const float*, const float*, const int64_t*, float*, int64_t,
                       const vdest*, __mmask16, const reg_ep*, const float*);
#define UKI(M_, V_)                                                                          \
  static void uki_##M_##_##V_(int64_t kd, const float* a, const float* b, const int64_t* off, \
                              float* out, int64_t ldo, const vdest* d, __mmask16 tail,        \
                              const reg_ep* e, const float* pfb) {                            \
    if (V_ == NV && tail == (__mmask16)0xFFFF) /* a whole panel: the last vector unmasked */ \
      uki_body(M_, V_, 1, kd, a, b, off, out, ldo, d, tail, e, pfb);                          \
    else                                                                                     \
      uki_body(M_, V_, 0, kd, a, b, off, out, ldo, d, tail, e, pfb);                          \
  }

F32_KERNEL_GRID(UKI)
static const uki_fn uki_table[MR + 1][NV + 1] = F32_KERNEL_TABLE(uki_);

/* 8 rows of 16 depths (r[m] = w[m][k .. k+16)) as 16 depths of 8 rows at d: pairs of rows
 * interleaved (unpack), then quads (shuffle): a_j / b_j hold rows 0-3 / 4-7 at depth 4i + j in
 * 128-bit lane i; interleaving their lanes puts depths j and j + 4 (c_j) or j + 8 and j + 12
 * (e_j) in the two halves of one vector, and each stored vector is two of those halves. */
static inline void transpose_8x16(const __m512* r, float* d) {
  const __m512 t0 = _mm512_unpacklo_ps(r[0], r[1]), t1 = _mm512_unpackhi_ps(r[0], r[1]);
  const __m512 t2 = _mm512_unpacklo_ps(r[2], r[3]), t3 = _mm512_unpackhi_ps(r[2], r[3]);
  const __m512 t4 = _mm512_unpacklo_ps(r[4], r[5]), t5 = _mm512_unpackhi_ps(r[4], r[5]);
  const __m512 t6 = _mm512_unpacklo_ps(r[6], r[7]), t7 = _mm512_unpackhi_ps(r[6], r[7]);
  const __m512 a[4] = {_mm512_shuffle_ps(t0, t2, 0x44), _mm512_shuffle_ps(t0, t2, 0xEE),
                       _mm512_shuffle_ps(t1, t3, 0x44), _mm512_shuffle_ps(t1, t3, 0xEE)};
  const __m512 b[4] = {_mm512_shuffle_ps(t4, t6, 0x44), _mm512_shuffle_ps(t4, t6, 0xEE),
                       _mm512_shuffle_ps(t5, t7, 0x44), _mm512_shuffle_ps(t5, t7, 0xEE)};
  const __m512i lanes01 = _mm512_set_epi32(23, 22, 21, 20, 7, 6, 5, 4, 19, 18, 17, 16, 3, 2, 1, 0);
  const __m512i lanes23 =
      _mm512_set_epi32(31, 30, 29, 28, 15, 14, 13, 12, 27, 26, 25, 24, 11, 10, 9, 8);
  __m512 c[4], e[4];
  for (int j = 0; j < 4; ++j) {
    c[j] = _mm512_permutex2var_ps(a[j], lanes01, b[j]); /* depths j, j + 4 */
    e[j] = _mm512_permutex2var_ps(a[j], lanes23, b[j]); /* depths j + 8, j + 12 */
  }
  for (int q = 0; q < 2; ++q) { /* depths 2q, 2q + 1 and 4 + 2q, 5 + 2q; then 8 more */
    _mm512_storeu_ps(d + (2 * q) * MR, _mm512_shuffle_f32x4(c[2 * q], c[2 * q + 1], 0x44));
    _mm512_storeu_ps(d + (4 + 2 * q) * MR, _mm512_shuffle_f32x4(c[2 * q], c[2 * q + 1], 0xEE));
    _mm512_storeu_ps(d + (8 + 2 * q) * MR, _mm512_shuffle_f32x4(e[2 * q], e[2 * q + 1], 0x44));
    _mm512_storeu_ps(d + (12 + 2 * q) * MR, _mm512_shuffle_f32x4(e[2 * q], e[2 * q + 1], 0xEE));
  }
}

/* Weights of group grp as MR-row blocks [block][k][MR] (rows past K/groups are zero): 16
 * depths at a time by transposes (the scalar loop was 4.5 % of a 512 -> 256 1x1 layer on
 * 28x28), the last kd % 16 one by one. */
static void pack_a(const conv_plan* P, const float* weights, int64_t grp, int64_t block,
                   float* apack) {
  const float* w = weights + (grp * P->mg + block * MR) * P->kd;
  const int64_t rows = P->mg - block * MR < MR ? P->mg - block * MR : MR;
  float* d = apack + block * P->kd * MR;
  int64_t k = 0;
  for (; k + 16 <= P->kd; k += 16) {
    __m512 r[MR];
    for (int64_t m = 0; m < MR; ++m)
      r[m] = m < rows ? _mm512_loadu_ps(w + m * P->kd + k) : _mm512_setzero_ps();
    transpose_8x16(r, d + k * MR);
  }
  for (; k < P->kd; ++k)
    for (int64_t m = 0; m < MR; ++m) d[k * MR + m] = m < rows ? w[m * P->kd + k] : 0.0f;
}

/* Destinations of the vectors of panel j (grid positions j*NR ...). With garbage columns this
 * needs wq >= 16, so that a vector meets at most one row end. */
static void imp_vdest(const conv_plan* P, const imp_plan* Q, int64_t j, vdest* d) {
  const int64_t wq = Q->wq, ow = P->g->out_w;
  d->gap = wq - ow;
  for (int v = 0; v < NV; ++v) {
    const int64_t n = j * NR + 16 * v;
    const int64_t y = n / wq, x = n % wq;
    const int64_t wrap = wq - x; /* lanes before the row end */
    d->o[v] = y * ow + x;
    const unsigned live = lane_mask(Q->ncols - n);
    if (wq == ow) { /* no garbage columns: every live lane is an output, in order */
      d->m1[v] = (__mmask16)live;
      d->m2[v] = 0;
      continue;
    }
    d->m1[v] = (__mmask16)(lane_mask(ow - x) & live);
    d->m2[v] = (__mmask16)(wrap < 16 ? (lane_mask(wrap + ow) & ~lane_mask(wrap) & live) : 0u);
  }
}

/* Blocks of channels a tile needs before its panels are packed (see conv_implicit). */
#ifndef IMP_PACK_BLOCKS
#define IMP_PACK_BLOCKS 16
#endif

/* Panels per tile, at most: the epilogue then finds a block of MR channels' outputs in L1. */
#ifndef IMP_MAX_PANELS
#define IMP_MAX_PANELS 16
#endif

/* The one-pass epilogue's operands at channel ch0 and output offset at0 (read only where
 * sdp_f32_one_pass(ep)). */
static reg_ep reg_ep_at(const sdp_f32* ep, int64_t ch0, int64_t at0) {
  if (ep == NULL) {
    return (reg_ep){.scale = NULL, .shift = NULL, .operand = NULL, .act = ACCEL_ACT_NONE,
                    .lo = 0.0f, .hi = 0.0f};
  }
  return (reg_ep){.scale = ep->scale != NULL ? ep->scale + ch0 : NULL,
                  .shift = ep->shift != NULL ? ep->shift + ch0 : NULL,
                  .operand = ep->ew_op == ACCEL_EW_ADD ? ep->ew_operand + at0 : NULL,
                  .act = ep->act, .lo = ep->clip_min, .hi = ep->clip_max};
}

/* One tile of the grid: panels [pa, pb) x output channels [m0, m1) of image b, group grp; each
 * block of MR channels gets the epilogue on the tile's outputs right after its last panel. */
static void imp_tile(const conv_plan* P, const imp_plan* Q, const float* src, const int64_t* off,
                     const float* apack, float* out, const sdp_f32* ep, int64_t b, int64_t grp,
                     int64_t m0, int64_t m1, int64_t pa, int64_t pb, float* pbuf,
                     const int64_t* poff) {
  const conv_geometry* g = P->g;
  const int64_t ow = g->out_w, wq = Q->wq;
  const int64_t n0 = pa * NR;
  const int64_t n1 = pb * NR < Q->ncols ? pb * NR : Q->ncols;
  /* the tile's outputs: [o0, o1) */
  const int64_t x0 = n0 % wq, x1 = (n1 - 1) % wq;
  const int64_t o0 = n0 / wq * ow + (x0 < ow ? x0 : ow);
  const int64_t o1 = (n1 - 1) / wq * ow + (x1 < ow ? x1 + 1 : ow);
  vdest d[IMP_MAX_PANELS];
  for (int64_t j = pa; j < pb; ++j) imp_vdest(P, Q, j, &d[j - pa]);
  const int in_regs = ep != NULL && sdp_f32_one_pass(ep);
  if (pbuf != NULL && m1 - m0 >= IMP_PACK_BLOCKS * MR) {
    /* Panels outermost, each copied first into a contiguous buffer that stays in L1 while
     * every block of channels passes over it (see conv_implicit): the same sums. */
    for (int64_t j = pa; j < pb; ++j) {
      const int64_t w = Q->ncols - j * NR < NR ? Q->ncols - j * NR : NR;
      const int64_t nv = (w + 15) / 16;
      const __mmask16 tail = lane_mask(w - 16 * (nv - 1));
      const float* bj = src + j * NR;
      const int fetch = Q->direct && (j + 1) * NR < Q->ncols; /* the input comes from L3 */
      for (int64_t k = 0; k < P->kd; ++k) {
        const float* q = bj + off[k];
        float* dk = pbuf + k * NR;
        if (fetch) {
          _mm_prefetch((const char*)(q + NR), _MM_HINT_T0);
          _mm_prefetch((const char*)(q + NR + 16), _MM_HINT_T0);
          _mm_prefetch((const char*)(q + NR + 32), _MM_HINT_T0);
          _mm_prefetch((const char*)(q + NR + 47), _MM_HINT_T0);
        }
        for (int64_t v = 0; v < nv; ++v)
          _mm512_store_ps(dk + 16 * v, _mm512_maskz_loadu_ps(v == nv - 1 ? tail : 0xFFFF,
                                                             q + 16 * v));
      }
      for (int64_t m = m0; m < m1; m += MR) {
        const int64_t mr = m1 - m < MR ? m1 - m : MR;
        const int64_t ch0 = grp * P->mg + m, at0 = (b * g->k + ch0) * P->ohw;
        const reg_ep e = reg_ep_at(ep, ch0, at0);
        uki_table[mr][nv](P->kd, apack + m / MR * P->kd * MR, pbuf, poff, out + at0, P->ohw,
                          &d[j - pa], tail, in_regs ? &e : NULL, NULL);
      }
    }
    if (ep != NULL && !in_regs && o1 > o0)
      for (int64_t ch = grp * P->mg + m0; ch < grp * P->mg + m1; ++ch)
        epilogue_span(ep, ch, out, (b * g->k + ch) * P->ohw + o0, o1 - o0);
    return;
  }
  for (int64_t m = m0; m < m1; m += MR) {
    const int64_t mr = m1 - m < MR ? m1 - m : MR;
    const float* a = apack + m / MR * P->kd * MR;
    const int64_t ch0 = grp * P->mg + m, at0 = (b * g->k + ch0) * P->ohw;
    float* orow = out + at0;
    const reg_ep e = reg_ep_at(ep, ch0, at0);
    for (int64_t j = pa; j < pb; ++j) {
      const int64_t w = Q->ncols - j * NR < NR ? Q->ncols - j * NR : NR;
      const int64_t nv = (w + 15) / 16;
      /* read in place (not a copy just built), the input comes from L3: the tile's first
       * block of channels fetches each next panel's (faster with the input in L3: docs/kernels.md,
       * conv/f32_implicit_avx512.c) */
      const float* pfb = P->panels_outer && Q->direct && m == m0 && (j + 1) * NR < Q->ncols
                             ? src + (j + 1) * NR
                             : NULL; /* (only there: with a 32 KB L1d it was slower) */
      uki_table[mr][nv](P->kd, a, src + j * NR, off, orow, P->ohw, &d[j - pa],
                        lane_mask(w - 16 * (nv - 1)), in_regs ? &e : NULL, pfb);
    }
    if (ep != NULL && !in_regs && o1 > o0)
      for (int64_t i = 0; i < mr; ++i) {
        const int64_t ch = grp * P->mg + m + i;
        epilogue_span(ep, ch, out, (b * g->k + ch) * P->ohw + o0, o1 - o0);
      }
  }
}

/* The implicit GEMM's loops (pool_for items): the padded copy and packed weights, then tiles. */
typedef struct imp_job {
  const conv_plan* P;
  const imp_plan* Q;
  const float* weights;
  const float* img; /* the current image-group's input */
  float* copy;
  const float* src; /* the grid the kernel reads: img (direct) or copy */
  const int64_t* off;
  float* apack;
  float* out;
  const sdp_f32* ep;
  int64_t nbuild, b, grp, ntiles, mchunks, mblocks;
  char* panels;        /* per participant, panel_bytes apart: a packed panel; or NULL */
  size_t panel_bytes;
  const int64_t* poff; /* the packed panel's depth offsets: k * NR */
} imp_job;

/* Item idx < nbuild: phase plane idx of the copy; past it, block idx - nbuild of the weights. */
static void imp_build_item(void* ctx, int64_t idx, int participant) {
  const imp_job* J = ctx;
  (void)participant;
  if (idx < J->nbuild) {
    f32_imp_build_plane(J->P, J->Q, J->img, idx, J->copy);
  } else {
    pack_a(J->P, J->weights, J->grp, idx - J->nbuild, J->apack);
  }
}

/* Item = (tile of panels, chunk of channel blocks), chunk innermost. */
static void imp_tile_item(void* ctx, int64_t it, int participant) {
  const imp_job* J = ctx;
  const conv_plan* P = J->P;
  const int64_t tile = it / J->mchunks, mc = it % J->mchunks, np = J->Q->npanels;
  const int64_t pa = np * tile / J->ntiles, pb = np * (tile + 1) / J->ntiles;
  const int64_t mb0 = J->mblocks * mc / J->mchunks, mb1 = J->mblocks * (mc + 1) / J->mchunks;
  const int64_t m1 = mb1 * MR < P->mg ? mb1 * MR : P->mg;
  imp_tile(P, J->Q, J->src, J->off, J->apack, J->out, J->ep, J->b, J->grp, mb0 * MR, m1, pa, pb,
           J->panels != NULL ? (float*)(J->panels + participant * J->panel_bytes) : NULL,
           J->poff);
}

static accel_status conv_implicit(const conv_plan* P, const float* in, const float* weights,
                                  float* out, const sdp_f32* ep, workspace* ws, int num_threads) {
  const conv_geometry* g = P->g;
  imp_plan Q;
  f32_imp_make_plan(P, &Q, 1);
  const int64_t mblocks = (P->mg + MR - 1) / MR;

  /* Work: tiles of at most max_panels panels, whose input rows (all channels) stay in L2 while
   * every block of channels passes over them. With threads, at least 4 items per thread (items
   * are claimed as the threads come: a late thread finds fewer left), first by smaller tiles,
   * then by splitting the channel blocks. */
  const int64_t row_bytes = P->cg * Q.nph * Q.wq * (int64_t)sizeof(float);
  int64_t rows = (512 * 1024) / row_bytes - (g->kernel_h - 1) * g->dilation_h / g->stride_h;
  if (rows < 1) rows = 1;
  int64_t max_panels = rows * Q.wq / NR;
  if (max_panels > IMP_MAX_PANELS) max_panels = IMP_MAX_PANELS;
  if (max_panels < 1) max_panels = 1;
  int64_t ntiles = (Q.npanels + max_panels - 1) / max_panels, mchunks = 1;
  if (num_threads > 1) {
    const int64_t want = 4 * (int64_t)num_threads;
    if (ntiles < want) ntiles = Q.npanels < want ? Q.npanels : want;
    while (ntiles * mchunks < want && mchunks < mblocks) ++mchunks;
  }
  const int64_t items = ntiles * mchunks;
  const int nth = (int)(items < num_threads ? items : num_threads);

  /* Where the packed panels stay in L1 (P->panels_outer) and a panel of 96-170 depth rows
   * fits in 32 KB, tiles of at least IMP_PACK_BLOCKS blocks of channels copy each panel into a
   * contiguous buffer first and pass every block over it; not with 8 blocks, nor 64 deep (a
   * gain alone, a loss in the network). Measured: docs/kernels.md, conv/f32_implicit_avx512.c. */
  const int packb = P->panels_outer && P->kd >= 96 &&
                    P->kd * NR * (int64_t)sizeof(float) <= 32 * 1024 &&
                    mblocks / mchunks >= IMP_PACK_BLOCKS;
  /* Slot 0, shared: the padded copy, the depth offsets and the packed weights (and the packed
   * panels' offsets and a panel per participant). */
  const size_t copy_bytes =
      Q.direct ? 0 : round64((size_t)f32_imp_copy_floats(P, &Q) * sizeof(float));
  const size_t off_bytes = round64((size_t)P->kd * sizeof(int64_t));
  const size_t apack_bytes = round64((size_t)(mblocks * MR * P->kd) * sizeof(float));
  const size_t panel_bytes = packb ? round64((size_t)(P->kd * NR) * sizeof(float)) : 0;
  char* shared = workspace_get(ws, 0, copy_bytes + 2 * off_bytes + apack_bytes +
                                          (size_t)nth * panel_bytes);
  if (shared == NULL) return ACCEL_ERR_NO_MEMORY;
  float* copy = (float*)shared;
  int64_t* off = (int64_t*)(shared + copy_bytes);
  float* apack = (float*)(shared + copy_bytes + off_bytes);
  int64_t* poff = (int64_t*)(shared + copy_bytes + off_bytes + apack_bytes);
  char* panels = packb ? shared + copy_bytes + 2 * off_bytes + apack_bytes : NULL;
  f32_imp_offsets(P, &Q, off);
  if (packb)
    for (int64_t k = 0; k < P->kd; ++k) poff[k] = k * NR;
  if (!Q.direct) {
    const int64_t n = f32_imp_copy_floats(P, &Q), used = P->cg * Q.nph * Q.plane;
    memset(copy + used, 0, (size_t)(n - used) * sizeof(float));
  }
  imp_job J = {.P = P, .Q = &Q, .weights = weights, .copy = copy, .off = off, .apack = apack,
               .out = out, .ep = ep, .nbuild = Q.direct ? 0 : P->cg * Q.nph, .ntiles = ntiles,
               .mchunks = mchunks, .mblocks = mblocks, .panels = panels,
               .panel_bytes = panel_bytes, .poff = poff};
  for (int64_t gb = 0; gb < (int64_t)g->n * g->groups; ++gb) {
    J.grp = gb / g->n; /* group outer: weights packed once each */
    J.b = gb % g->n;
    J.img = in + (J.b * g->c + J.grp * P->cg) * P->hw;
    J.src = Q.direct ? J.img : copy;
    const int64_t npack = J.b == 0 ? mblocks : 0;
    pool_for(nth, J.nbuild + npack, imp_build_item, &J);
    pool_for(nth, items, imp_tile_item, &J);
  }
  return ACCEL_OK;
}


/* Whether it computes this geometry in conv/f32_order.h's order: f32_implicit_computes, and
 * no dot-product tail (f32_dot_tail: this kernel sums every position in 32-deep blocks, so
 * ACCEL_CONV_IMPL does not force it onto a geometry whose tail the order gives to dot
 * products). */
static int implicit_supports(const conv_f32_call* c) {
  return f32_implicit_computes(c->P->g) && f32_dot_tail(c->P->g) == 0;
}

/* Where measured faster: f32_implicit_chosen (conv/f32_order.h), which the tail rule reads. */
static int implicit_applies(const conv_f32_call* c) {
  return f32_implicit_chosen(c->P->g, c->P->panels_outer);
}

static accel_status implicit_run(const conv_f32_call* c) {
  return conv_implicit(c->P, c->in, c->weights, c->out, c->ep, c->ws, c->nth);
}

static int implicit_dot_tail(const conv_plan* P) {
  (void)P;
  return 0;
}

const conv_f32_impl conv_f32_implicit_avx512_impl = {.name = "implicit_avx512",
                                                     .applies = implicit_applies,
                                                     .supports = implicit_supports,
                                                     .run = implicit_run,
                                                     .dot_tail = implicit_dot_tail};
#endif /* __AVX512F__ */
