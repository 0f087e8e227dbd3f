/* conv/i8_gemm_avx2.c - INT8 CONV as a GEMM of int16 pairs (impl "gemm16_avx2"): grouped and dense
 * convolutions in builds with AVX2 but not AVX-512 VNNI (x86-64-v3: Zen 3, Haswell..).
 *
 * Arithmetic: vpmaddwd on sign-extended int16 pairs, (in - in_zero) x w, two exact products and
 * their exact sum per 32-bit lane (|sum| <= 2 * 255 * 128), accumulated by vpaddd modulo 2^32:
 * the reference's int32 sum whenever that fits int32 (the compiler's bound), whatever the weights
 * (-128 included) and in_zero. vpmaddubsw (u8 x s8, 32 products per instruction) saturates its
 * int16 pair sums: (in + 128) x w reaches 2 * 255 * 128, so it is not used.
 *
 * Weights: LAYOUT_I16 (conv/i8.h), packed at load (packed on the call into the workspace when
 * the caller gives none). Input: per tile of output positions, im2col columns of (in - in_zero)
 * as int16 pairs of consecutive depth rows (padding reads as in_zero: 0), in panels of up to
 * G2_NR positions, [panel][kd2][width][2]; built from byte rows (padding = in_zero), interleaved
 * by unpack and vpmovsxbw (stride-2 rows gathered 16 bytes a step). A tile's columns stay in L2
 * (a quarter of it, sysconf's figure) while every G2_SB blocks of MR channels run over them: 6
 * channels x 16 positions per micro-kernel (the implicit GEMM's, below: the weights' word
 * broadcast, a panel's pair row in two registers; a call runs every 16-wide panel of a
 * one-chunk tile for its 6 channels). The blocks' int32 rows then go through the
 * channels' converters in L1: in lanes (sdp_i8_lanes8_run, the converters prepared once per
 * call) where every channel has a lane form, else sdp_i8_span. A tile's last panel of 8
 * keeping at most G2_TAIL positions (7x7 planes: 49 = 3 x 16 + 1) runs as matrix-vector
 * products (g2_tail). A depth whose panel (16
 * positions) exceeds half the L1 runs in depth chunks, when a chunk's weights of
 * every channel fit the L2: per chunk its columns (tiles of several panels, not one), per panel
 * (in L1) every block, the sums added to the int32 rows of all the item's channels (g2_item).
 * A single output position per image (fully connected layers, a kernel as large as its
 * input): matrix-vector products of the plain int8 weights, widened in registers
 * (g2_gemv_item), converted by sdp_i8_channels.
 * Threads: pool_for over (image, group, tile, chunk of channel blocks), the tiles sized so that
 * the busiest thread takes the fewest positions (g2_balanced).
 * Stride-1 kxk layers on wide planes run without columns (impl "implicit16_avx2", below): the
 * input copied once as int16 pairs of channels, read in place tap by tap against weights packed
 * tap by tap (LAYOUT_I16T), 6 channels x 16 positions a micro-kernel, which the column GEMM
 * also reads where that one is not chosen.
 */
#include "conv/i8.h"
#include "conv/i8_gemm_avx2.h"

#if defined(__AVX2__) && !defined(CONV_I8_VNNI)

enum {
  G2_NR = 16,             /* positions per panel (2 vectors of 8: the 6 x 16 micro-kernel's) */
  G2_MAX_PANELS = 24,     /* panels per tile, at most */
  G2_SB = 3,              /* packed blocks per pass of a one-chunk tile (24 rows: 4 calls of 6) */
  G2_TAIL = 4,            /* kept positions of an 8-wide last panel that g2_tail takes, at most */
  G2_MIN_L1 = 32 * 1024,    /* the L1 data cache's bytes when sysconf does not say */
  I16_NR = 16,              /* the implicit GEMM's positions per panel (its rows in registers) */
  I16_SHALLOW = 128         /* pair steps (taps x pairs) of a depth chunk up to which one call
                               runs every panel (docs/kernels.md) */
};

/* ---- micro-kernel ---------------------------------------------------------------------------
 * c[m][8v + i] = sum over pairs j of the pair products of row m's word of pair j and column
 * 8v + i of pair row j (b + j * bs: bs = 16 NV in a panel of columns, a plane's pairs in the
 * implicit GEMM's input copy), for m < MR_, v < NV; more: added to the values c holds (the sums
 * of the depth chunks or taps before this one), modulo 2^32. */
#define G2_ACC(m)                                                                           \
  __m256i c##m##0 = _mm256_setzero_si256(), c##m##1 = c##m##0, c##m##2 = c##m##0;          \
  if (MR_ > m && more) {                                                                    \
    c##m##0 = _mm256_loadu_si256((const __m256i*)(c + m * ldc));                            \
    if (NV > 1) c##m##1 = _mm256_loadu_si256((const __m256i*)(c + m * ldc + 8));            \
    if (NV > 2) c##m##2 = _mm256_loadu_si256((const __m256i*)(c + m * ldc + 16));           \
  }
#define G2_OUT(m)                                                                           \
  if (MR_ > m) {                                                                            \
    _mm256_storeu_si256((__m256i*)(c + m * ldc), c##m##0);                                  \
    if (NV > 1) _mm256_storeu_si256((__m256i*)(c + m * ldc + 8), c##m##1);                  \
    if (NV > 2) _mm256_storeu_si256((__m256i*)(c + m * ldc + 16), c##m##2);                 \
  }

/* The micro-kernel of both GEMMs, 6 channels x 8 NV positions (NV <= 2): the same sums over
 * ntaps taps of kc pairs each, row m's words from p[m] (pair j of tap t at p[m][t as + j MR]:
 * the rows may lie in two packed blocks) and the pair rows from b + 2 off[t] (bs apart), the
 * pair rows in registers (two loads a pair step; 12 accumulators, 2 rows, the word and a
 * product fill the 16 registers) and the accumulators across the taps (a call per tap cost a
 * sixth more in loads, stores and calls); np such panels a call, each ps int16 past the one
 * before (b) and 8 NV columns (c): the column GEMM's one-chunk tiles run all their 16-wide
 * panels in one call per 6 channels, where a call per panel cost shallow layers up to a third
 * more in set-up and calls (docs/kernels.md). */
#define G6_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define G6_PTR(m) const int32_t* const p##m = p[MR_ > m ? m : 0];
#define G6_MAC(m)                                                                \
  if (MR_ > m) {                                                                 \
    const __m256i w = _mm256_set1_epi32(p##m[o]);                                \
    c##m##0 = _mm256_add_epi32(c##m##0, _mm256_madd_epi16(w, b0));               \
    if (NV > 1) c##m##1 = _mm256_add_epi32(c##m##1, _mm256_madd_epi16(w, b1));   \
  }
static inline __attribute__((always_inline)) void g6t_body(const int MR_, const int NV,
                                                           int64_t kc, int64_t ntaps,
                                                           const int32_t* const* p, int64_t as,
                                                           const int16_t* bb, const int64_t* off,
                                                           int64_t bs, int32_t* c, int64_t ldc,
                                                           int more, int64_t np, int64_t ps) {
  G6_ROWS(G6_PTR)
  for (int64_t q = 0; q < np; ++q, bb += ps, c += 8 * NV) {
    G6_ROWS(G2_ACC)
    for (int64_t t = 0; t < ntaps; ++t) {
      const int16_t* b = bb + 2 * off[t];
      int64_t o = t * as;
      for (int64_t j = 0; j < kc; ++j, o += MR, b += bs) {
        __m256i b0 = _mm256_loadu_si256((const __m256i*)b);
        __m256i b1 = NV > 1 ? _mm256_loadu_si256((const __m256i*)(b + 16)) : b0;
        __asm__("" : "+x"(b0), "+x"(b1)); /* in registers: one load each, not one per row */
        G6_ROWS(G6_MAC)
      }
    }
    G6_ROWS(G2_OUT)
  }
}

#define G6T_KERNEL(M_, V_)                                                                    \
  static void g6t_##M_##_##V_(int64_t kc, int64_t ntaps, const int32_t* const* p, int64_t as, \
                              const int16_t* b, const int64_t* off, int64_t bs, int32_t* c,   \
                              int64_t ldc, int more, int64_t np, int64_t ps) {                \
    g6t_body(M_, V_, kc, ntaps, p, as, b, off, bs, c, ldc, more, np, ps);                     \
  }
G6T_KERNEL(1, 1) G6T_KERNEL(2, 1) G6T_KERNEL(3, 1) G6T_KERNEL(4, 1) G6T_KERNEL(5, 1)
G6T_KERNEL(6, 1) G6T_KERNEL(1, 2) G6T_KERNEL(2, 2) G6T_KERNEL(3, 2) G6T_KERNEL(4, 2)
G6T_KERNEL(5, 2) G6T_KERNEL(6, 2)
const g6t_fn g6t_table[3][G6_MR + 1] = {
    {0, 0, 0, 0, 0, 0, 0},
    {0, g6t_1_1, g6t_2_1, g6t_3_1, g6t_4_1, g6t_5_1, g6t_6_1},
    {0, g6t_1_2, g6t_2_2, g6t_3_2, g6t_4_2, g6t_5_2, g6t_6_2}};

/* ---- columns ------------------------------------------------------------------------------ */

/* Bytes [x, x + n) of a row: z everywhere (fill) or from src (copy), in 16-byte stores that may
 * write up to 15 bytes past the run (the row's next run or its slack overwrites them: runs are
 * written left to right); the loads stop at end, where the input ends (memcpy past it). */
static inline void g2_fill(int8_t* d, int8_t z, int64_t n) {
  const __m128i v = _mm_set1_epi8(z);
  for (int64_t i = 0; i < n; i += 16) _mm_storeu_si128((__m128i*)(d + i), v);
}

static inline void g2_copy(int8_t* d, const int8_t* src, int64_t n, const int8_t* end) {
  if (src + n + 15 > end) {
    memcpy(d, src, (size_t)n);
    return;
  }
  for (int64_t i = 0; i < n; i += 16)
    _mm_storeu_si128((__m128i*)(d + i), _mm_loadu_si128((const __m128i*)(src + i)));
}

/* d[i] = src[2i] for i < n, 16 a step (the even bytes of 32: masked to words, packed), the
 * same stores as g2_copy; the loads stop at end (scalar past it). */
static inline void g2_gather2(int8_t* d, const int8_t* src, int64_t n, const int8_t* end) {
  const __m128i even = _mm_set1_epi16(0x00FF);
  int64_t i = 0;
  for (; i < n && src + 2 * i + 32 <= end; i += 16) {
    const __m128i lo = _mm_and_si128(_mm_loadu_si128((const __m128i*)(src + 2 * i)), even);
    const __m128i hi = _mm_and_si128(_mm_loadu_si128((const __m128i*)(src + 2 * i + 16)), even);
    _mm_storeu_si128((__m128i*)(d + i), _mm_packus_epi16(lo, hi));
  }
  for (; i < n; ++i) d[i] = src[2 * i];
}

/* Depth row d (channel, tap) of the group's input img at positions [p0, p0 + nt), as bytes
 * (padding reads as in_zero): a pointer to ldb of them. Either in place in the input (a 1x1
 * layer with stride 1 and no padding whose ldb bytes lie inside it, which ends at end) or built
 * in dst (ldb + 32 bytes), where the bytes past nt (columns no output keeps) and a row past the
 * depth (whose weights are 0) read as in_zero: their products are discarded or 0, but every
 * byte the GEMM reads is written (valgrind's memcheck cannot see that x * 0 is defined). */
static const int8_t* g2_row(const plan* P, const int8_t* img, const int8_t* end, int64_t d,
                            int64_t p0, int64_t nt, int64_t ldb, int8_t z, int8_t* dst) {
  const conv_geometry* g = P->g;
  if (d >= P->kd) {
    g2_fill(dst, z, ldb);
    return dst;
  }
  const int64_t c = d / P->rs, t = d % P->rs, r = t / g->kernel_w, s = t % g->kernel_w;
  const int8_t* src = img + c * P->hw;
  const int64_t H = g->h, W = g->w, ow = g->out_w, sw = g->stride_w;
  if (imp_flat(g)) { /* 1x1, stride 1, no padding: the plane itself */
    if (src + p0 + ldb <= end) return src + p0;
    memcpy(dst, src + p0, (size_t)nt);
    g2_fill(dst + nt, z, ldb - nt);
    return dst;
  }
  const int64_t dy = r * g->dilation_h - g->pad_top, dx = s * g->dilation_w - g->pad_left;
  /* output columns whose input column ox * sw + dx lies inside [0, W) */
  const int64_t lo = dx >= 0 ? 0 : (-dx + sw - 1) / sw;
  int64_t hi = dx > W - 1 ? 0 : (W - 1 - dx) / sw + 1;
  if (hi > ow) hi = ow;
  int8_t* q = dst;
  for (int64_t p = p0, stop = p0 + nt; p < stop;) {
    const int64_t oy = p / ow, x0 = p % ow;
    const int64_t x1 = ow < x0 + (stop - p) ? ow : x0 + (stop - p);
    const int64_t iy = oy * g->stride_h + dy;
    const int64_t a = lo > x0 ? lo : x0, e = hi < x1 ? hi : x1;
    if (iy < 0 || iy >= H || a >= e) {
      g2_fill(q, z, x1 - x0);
    } else {
      g2_fill(q, z, a - x0);
      const int8_t* row = src + iy * W + dx;
      int8_t* o = q + (a - x0);
      if (sw == 1) g2_copy(o, row + a, e - a, end);
      else if (sw == 2) g2_gather2(o, row + 2 * a, e - a, end);
      else
        for (int64_t ox = a; ox < e; ++ox) o[ox - a] = row[ox * sw];
      g2_fill(q + (e - x0), z, x1 - e);
    }
    q += x1 - x0;
    p += x1 - x0;
  }
  g2_fill(q, z, ldb - nt);
  return dst;
}

/* The tile's columns: positions [p0, p0 + nt) of the group's input img, ldb of them (a multiple
 * of 8; those past nt read as in_zero), as int16 pairs (in - in_zero) of depth rows 2j, 2j + 1
 * for pairs j in [j0, j1) (kc = j1 - j0 of them): panel q of width wq = min(G2_NR, ldb - q G2_NR)
 * at col + q G2_NR kc 2, pair row j at + (j - j0) wq 2. rows: two byte rows of ldb + 32.
 * The pairs are the weights' (cg2: 0 for LAYOUT_I16's, depth rows 2j and 2j + 1; else
 * LAYOUT_I16T's, cg2 a tap: channels 2p and 2p + 1 at tap t for j = t cg2 + p, a channel past
 * the group's reading as in_zero). */
static void g2_columns(const plan* P, const int8_t* img, const int8_t* end, int32_t in_zero,
                       int64_t p0, int64_t nt, int64_t ldb, int64_t j0, int64_t j1, int16_t* col,
                       int8_t* rows, int64_t cg2) {
  const int64_t kc = j1 - j0;
  const int8_t z = (int8_t)in_zero;
  const __m256i z16 = _mm256_set1_epi16((int16_t)in_zero);
  for (int64_t j = j0; j < j1; ++j) {
    int64_t d0 = 2 * j, d1 = 2 * j + 1;
    if (cg2 > 0) {
      const int64_t t = j / cg2, ch = 2 * (j % cg2);
      d0 = ch * P->rs + t;
      d1 = ch + 1 < P->cg ? d0 + P->rs : P->kd; /* past the depth: in_zero */
    }
    const int8_t* r0 = g2_row(P, img, end, d0, p0, nt, ldb, z, rows);
    const int8_t* r1 = g2_row(P, img, end, d1, p0, nt, ldb, z, rows + ldb + 32);
    int16_t* dst = col + (j - j0) * (ldb < G2_NR ? ldb : G2_NR) * 2; /* panel 0's pair row j */
    for (int64_t p = 0; p < ldb; p += 8) {
      if (p > 0 && p % G2_NR == 0) { /* the next panel */
        const int64_t q = p / G2_NR, wq = ldb - p < G2_NR ? ldb - p : G2_NR;
        dst = col + (q * G2_NR * kc + (j - j0) * wq) * 2;
      }
      const __m128i x = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i*)(r0 + p)),
                                          _mm_loadl_epi64((const __m128i*)(r1 + p)));
      _mm256_storeu_si256((__m256i*)dst, _mm256_sub_epi16(_mm256_cvtepi8_epi16(x), z16));
      dst += 16;
    }
  }
}

/* ---- the GEMM ----------------------------------------------------------------------------- */

/* J's converters in lanes (conv/i8.h's WS_CVT) when every channel has a lane form for the
 * accumulators' bound, else none; 0 when out of memory. A LUT activation's (its plan's
 * constants, sdp_i8_lanes_prepare_lut, kept between calls) are prepared here once per call too:
 * through sdp_i8_span every row set them up again (a division and two evaluations of t), and
 * without the per-channel search that gives the direct form (docs/kernels.md). */
int g2_prepare_lanes(const plan* P, const sdp_i8* ep, workspace* ws, g2_job* J) {
  J->cvt = NULL;
  J->add = NULL;
  J->lut = NULL;
#if SDP_I8_AVX2
  const int64_t k = P->g->k;
  if (ep->ew_op != ACCEL_EW_NONE && ep->ew_op != ACCEL_EW_ADD) return 1;
  if (ep->lut != NULL && ep->lut_plan == NULL) return 1;
  sdp_i8_lane_cvt* cvt = workspace_get(ws, WS_CVT, (size_t)k * sizeof(sdp_i8_lane_cvt));
  if (cvt == NULL) return 0;
  const int64_t vmax = P->kd * 255 * 128; /* |v|: depth x |in - in_zero| x |w| */
  if (ep->lut != NULL) {
    if (sdp_i8_lanes_prepare_lut(ep, 0, (int32_t)k, vmax, cvt, &J->lut_consts)) {
      J->cvt = cvt;
      J->lut = &J->lut_consts;
    }
    return 1;
  }
  if (ep->ew_op == ACCEL_EW_NONE && sdp_i8_lanes_prepare(ep, 0, (int32_t)k, vmax, cvt, &J->lo,
                                                         &J->hi)) {
    int form = 4, direct = 0, split = 0;
    for (int64_t m = 0; m < k; ++m) {
      const int f = sdp_i8_lane_form(cvt + m);
      if (f == 7) direct = 1;
      else split = 1, form = f < form ? f : form;
    }
    J->form = direct ? (split ? 0 : 7) : form;
    J->cvt = cvt;
  } else if (ep->ew_op == ACCEL_EW_ADD &&
             sdp_i8_lanes_prepare_add(ep, 0, (int32_t)k, vmax, cvt, &J->add_consts, &J->lo,
                                      &J->hi)) {
    J->form = rows_form(cvt, k, 1);
    J->cvt = cvt;
    J->add = &J->add_consts;
  }
#else
  (void)P, (void)ep, (void)ws;
#endif
  return 1;
}

/* The micro-kernel over np panels from panel q of a tile's columns bq (kc pairs from pair j0;
 * width min(G2_NR, ldb - q G2_NR), every one of them when np > 1) for the group grp's channels
 * [k0, k0 + n), 6 a call (a call's rows may lie in two packed blocks): channel k0 + r's sums
 * in row r of acc (ldb apart), more: added to them. The implicit GEMM's kernel with one tap,
 * the panel's pair rows 2 wq int16 apart, the panels G2_NR kc pairs apart. */
static inline void g2_rows(const g2_job* J, int64_t grp, int64_t k0, int64_t n,
                           const int16_t* bq, int64_t q, int64_t ldb, int64_t j0, int64_t kc,
                           int32_t* acc, int more, int64_t np) {
  static const int64_t tap0 = 0;
  const int64_t wq = ldb - q * G2_NR < G2_NR ? ldb - q * G2_NR : G2_NR;
  for (int64_t r = 0; r < n; r += G6_MR) {
    const int64_t mr = n - r < G6_MR ? n - r : G6_MR;
    const int32_t* p[G6_MR];
    for (int64_t m = 0; m < mr; ++m) {
      const int64_t k = k0 + r + m;
      p[m] = J->w + ((grp * J->P->mblocks + k / MR) * J->kd2 + j0) * MR + k % MR;
    }
    g6t_table[wq / 8][mr](kc, 1, p, 0, bq, &tap0, 2 * wq, acc + r * ldb + q * G2_NR, ldb, more,
                          np, G2_NR * kc * 2);
  }
}

/* A tile's last panel when it is 8 wide and keeps at most G2_TAIL positions (a 7x7 plane's
 * 49th, a 14x14 plane's last 4): per block of MR channels, pair j's 8 weight words against
 * each kept position's broadcast column word, one vpmaddwd per pair and position for 8
 * channels, where the 6 x 8 micro-kernel spends one per 6 channels and 8 positions, the most of
 * them dropped. Channels [k0, k0 + n) of group grp (k0 a block's first), positions [0, t) of
 * the panel at bq (kc pairs from pair j0, pair rows 8 words apart) into columns [c0, c0 + t)
 * of acc's rows (ldb apart; row r: channel k0 + r), more: added to them. */
static inline __attribute__((always_inline)) void g2_tail_body(const int T, const g2_job* J,
                                                               int64_t grp, int64_t k0,
                                                               int64_t n, const int16_t* bq,
                                                               int64_t j0, int64_t kc,
                                                               int32_t* acc, int64_t c0,
                                                               int64_t ldb, int more) {
  const i32_alias* x = (const i32_alias*)(const void*)bq;
  for (int64_t r0 = 0; r0 < n; r0 += 2 * MR) { /* two blocks a pass (the second may be absent) */
    const int two = r0 + MR < n;
    const int32_t* a0 = J->w + ((grp * J->P->mblocks + (k0 + r0) / MR) * J->kd2 + j0) * MR;
    const int32_t* a1 = two ? a0 + J->kd2 * MR : a0;
    __m256i s0[G2_TAIL], s1[G2_TAIL];
    for (int p = 0; p < T; ++p) s0[p] = s1[p] = _mm256_setzero_si256();
    for (int64_t j = 0; j < kc; ++j) {
      const __m256i w0 = _mm256_loadu_si256((const __m256i*)(a0 + j * MR));
      const __m256i w1 = _mm256_loadu_si256((const __m256i*)(a1 + j * MR));
      for (int p = 0; p < T; ++p) {
        const __m256i xp = _mm256_set1_epi32(x[j * 8 + p]);
        s0[p] = _mm256_add_epi32(s0[p], _mm256_madd_epi16(xp, w0));
        s1[p] = _mm256_add_epi32(s1[p], _mm256_madd_epi16(xp, w1));
      }
    }
    for (int h = 0; h <= two; ++h) {
      const int64_t rb = r0 + h * MR, rows = n - rb < MR ? n - rb : MR;
      for (int p = 0; p < T; ++p) {
        int32_t v[MR];
        _mm256_storeu_si256((__m256i*)v, h ? s1[p] : s0[p]);
        for (int64_t m = 0; m < rows; ++m) {
          int32_t* d = acc + (rb + m) * ldb + c0 + p;
          *d = more ? (int32_t)((uint32_t)*d + (uint32_t)v[m]) : v[m];
        }
      }
    }
  }
}

static void g2_tail(int64_t t, const g2_job* J, int64_t grp, int64_t k0, int64_t n,
                    const int16_t* bq, int64_t j0, int64_t kc, int32_t* acc, int64_t c0,
                    int64_t ldb, int more) {
  switch (t) {
    case 1: g2_tail_body(1, J, grp, k0, n, bq, j0, kc, acc, c0, ldb, more); break;
    case 2: g2_tail_body(2, J, grp, k0, n, bq, j0, kc, acc, c0, ldb, more); break;
    case 3: g2_tail_body(3, J, grp, k0, n, bq, j0, kc, acc, c0, ldb, more); break;
    default: g2_tail_body(4, J, grp, k0, n, bq, j0, kc, acc, c0, ldb, more); break;
  }
}

/* Item = (image, group, tile, chunk of channel blocks), the chunk innermost. One depth chunk:
 * per G2_SB blocks of MR channels (24 rows: the 6-row micro-kernel's calls do not straddle a
 * pass), per 6 of them every 16-wide panel in one call, the panel of 8 (the last through
 * g2_tail where it takes it), then their rows converted. Several
 * (a deep layer): per depth chunk, its columns, then per panel (in L1) every block, added to
 * the int32 rows of all the item's channels, converted after the last chunk; the weights of
 * every block stream past a panel instead of the panels past a block's weights (a deep panel
 * is larger than L1, and a tile of positions whole-depth columns fit in L2 is a few panels,
 * each reading every weight from memory again). */
static void g2_item(void* ctx, int64_t it, int participant) {
  const g2_job* J = ctx;
  const plan* P = J->P;
  const conv_geometry* g = P->g;
  const int64_t mc = it % J->mchunks, tile = it / J->mchunks % J->ntiles;
  const int64_t bg = it / (J->mchunks * J->ntiles);
  const int64_t b = bg / g->groups, grp = bg % g->groups;
  const int64_t p0 = tile * J->nt, nt = P->ohw - p0 < J->nt ? P->ohw - p0 : J->nt;
  const int64_t ldb = (nt + 7) / 8 * 8, kd2 = J->kd2, kc = J->kc;
  const int64_t mb0 = P->mblocks * mc / J->mchunks, mb1 = P->mblocks * (mc + 1) / J->mchunks;
  int16_t* col = (int16_t*)(void*)J->bufs[participant];
  int32_t* acc = (int32_t*)(void*)(J->bufs[participant] + J->col_bytes);
  int8_t* rows = (int8_t*)(void*)(J->bufs[participant] + J->col_bytes + J->acc_bytes);
  const int8_t* img = J->in + (b * g->c + grp * P->cg) * P->hw;
  const int64_t npanels = (ldb + G2_NR - 1) / G2_NR;
  /* the panels of the 6 x 16 kernel: all but a last one of 8 keeping at most G2_TAIL */
  const int64_t last = (npanels - 1) * G2_NR, tv = nt - last;
  const int64_t nfull = ldb - last == 8 && tv <= G2_TAIL ? npanels - 1 : npanels;
  if (kc >= kd2) {
    g2_columns(P, img, J->in_end, J->in_zero, p0, nt, ldb, 0, kd2, col, rows, J->cg2);
    for (int64_t mb = mb0; mb < mb1; mb += G2_SB) {
      const int64_t k0 = mb * MR, e = (mb + G2_SB < mb1 ? mb + G2_SB : mb1) * MR;
      const int64_t nrows = (P->mg < e ? P->mg : e) - k0;
      const int64_t n16 = ldb < nfull * G2_NR ? nfull - 1 : nfull; /* 16-wide panels */
      if (n16 > 0) g2_rows(J, grp, k0, nrows, col, 0, ldb, 0, kd2, acc, 0, n16);
      if (n16 < nfull)
        g2_rows(J, grp, k0, nrows, col + n16 * G2_NR * kd2 * 2, n16, ldb, 0, kd2, acc, 0, 1);
      if (nfull < npanels)
        g2_tail(tv, J, grp, k0, nrows, col + last * kd2 * 2, 0, kd2, acc, last, ldb, 0);
      for (int64_t m = 0; m < nrows; ++m) {
        const int64_t k = grp * P->mg + k0 + m;
        g2_convert(J, k, acc + m * ldb, (b * g->k + k) * P->ohw + p0, nt);
      }
    }
    return;
  }
  for (int64_t j0 = 0; j0 < kd2; j0 += kc) {
    const int64_t kcc = kd2 - j0 < kc ? kd2 - j0 : kc;
    g2_columns(P, img, J->in_end, J->in_zero, p0, nt, ldb, j0, j0 + kcc, col, rows, J->cg2);
    const int64_t nk = (P->mg < mb1 * MR ? P->mg : mb1 * MR) - mb0 * MR;
    for (int64_t q = 0; q < nfull; ++q)
      g2_rows(J, grp, mb0 * MR, nk, col + q * G2_NR * kcc * 2, q, ldb, j0, kcc, acc, j0 > 0,
              1);
    if (nfull < npanels)
      g2_tail(tv, J, grp, mb0 * MR, nk, col + last * kcc * 2, j0, kcc, acc, last, ldb, j0 > 0);
  }
  for (int64_t mb = mb0; mb < mb1; ++mb) {
    const int64_t k0 = mb * MR, nrows = P->mg - k0 < MR ? P->mg - k0 : MR;
    for (int64_t m = 0; m < nrows; ++m) {
      const int64_t k = grp * P->mg + k0 + m;
      g2_convert(J, k, acc + ((mb - mb0) * MR + m) * ldb, (b * g->k + k) * P->ohw + p0, nt);
    }
  }
}

/* ---- matrix-vector products (one output position per image) ------------------------------ */

/* Item = (image, group, chunk of channel blocks): the column of the one position as int16
 * (in - in_zero), padded with 0 to a multiple of 16; then per block of MR channels their rows
 * of the plain weights ([K][C/groups][R][S] int8: half the bytes of LAYOUT_I16's, which a
 * product of one position streams once from memory), 16 a step widened in registers
 * (vpmovsxbw) against the column (vpmaddwd), one accumulator per channel, summed across lanes
 * at the block's end; the depth's last kd % 16 scalar. */
static void g2_gemv_item(void* ctx, int64_t it, int participant) {
  const g2_job* J = ctx;
  const plan* P = J->P;
  const conv_geometry* g = P->g;
  const int64_t mc = it % J->mchunks, bg = it / J->mchunks;
  const int64_t b = bg / g->groups, grp = bg % g->groups;
  const int64_t mb0 = P->mblocks * mc / J->mchunks, mb1 = P->mblocks * (mc + 1) / J->mchunks;
  const int64_t kd = P->kd, kd16 = kd / 16 * 16;
  int16_t* x = (int16_t*)(void*)J->bufs[participant];
  int8_t* rows = (int8_t*)(x + (kd + 31) / 16 * 16); /* two rows of 8 + 16 bytes */
  const int8_t* img = J->in + (b * g->c + grp * P->cg) * P->hw;
  const __m256i z16 = _mm256_set1_epi16((int16_t)J->in_zero);
  int64_t d = 0;
  if (imp_flat(g)) /* 1x1 on a 1x1 input: the depth is the input's channels */
    for (; d + 16 <= kd; d += 16)
      _mm256_storeu_si256((__m256i*)(x + d),
                          _mm256_sub_epi16(_mm256_cvtepi8_epi16(
                                               _mm_loadu_si128((const __m128i*)(img + d))),
                                           z16));
  for (; d < kd; ++d) /* the tile's builder with 8 positions, of which the first is kept */
    x[d] = (int16_t)(g2_row(P, img, J->in_end, d, 0, 1, 8, (int8_t)J->in_zero, rows)[0] -
                     J->in_zero);
  for (; d < (kd + 15) / 16 * 16; ++d) x[d] = 0;
  for (int64_t mb = mb0; mb < mb1; ++mb) {
    const int64_t k0 = grp * P->mg + mb * MR, nrows = P->mg - mb * MR < MR ? P->mg - mb * MR : MR;
    const int8_t* w[MR]; /* rows past the group's last channel read its row 0 (discarded) */
    for (int m = 0; m < MR; ++m) w[m] = J->raw + (k0 + (m < nrows ? m : 0)) * kd;
    __m256i s[MR];
    for (int m = 0; m < MR; ++m) s[m] = _mm256_setzero_si256();
    for (int64_t e = 0; e < kd16; e += 16) {
      const __m256i xv = _mm256_loadu_si256((const __m256i*)(x + e));
      for (int m = 0; m < MR; ++m)
        s[m] = _mm256_add_epi32(
            s[m], _mm256_madd_epi16(
                      _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(w[m] + e))), xv));
    }
    /* lane m of the sum: channel m's 8 lanes added (hadd twice, then the two halves) */
    const __m256i h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]),
                                         _mm256_hadd_epi32(s[2], s[3]));
    const __m256i h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]),
                                         _mm256_hadd_epi32(s[6], s[7]));
    int32_t v[MR];
    _mm256_storeu_si256((__m256i*)v,
                        _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20),
                                         _mm256_permute2x128_si256(h0, h1, 0x31)));
    for (int m = 0; m < MR; ++m) /* modulo 2^32, as the lanes */
      for (int64_t e = kd16; e < kd; ++e)
        v[m] = (int32_t)((uint32_t)v[m] + (uint32_t)(w[m][e] * x[e]));
    const int64_t at = b * g->k + k0;
    sdp_i8_channels(J->ep, (int32_t)k0, v,
                    J->ep->ew_operand != NULL ? J->ep->ew_operand + at : NULL, J->out + at,
                    nrows);
  }
}

/* The positions per tile of n positions in `tiles` tiles: of one size in whole panels when the
 * last tile keeps at least half of one (a last tile of a few positions reads every weight again
 * for them), else nt (tiles of 8-position panels cost more than a small last tile). */
static int64_t g2_even_tile(int64_t n, int64_t tiles, int64_t nt) {
  const int64_t even = (n + tiles - 1) / tiles;
  const int64_t whole = (even + G2_NR - 1) / G2_NR * G2_NR;
  if (2 * (n - (tiles - 1) * whole) >= whole) nt = whole;
  return nt < n ? nt : n;
}

/* The most positions (or rows) one of nth participants takes when pool_for hands out outer
 * planes' tiles of nt of n (each plane's last tile the rest) in order, each to the participant
 * that finishes first (the least loaded one, items taking time in proportion to their size).
 * Many items: about an even share (no simulation). */
static int64_t g2_busiest(int64_t n, int64_t nt, int64_t outer, int nth) {
  const int64_t tiles = (n + nt - 1) / nt;
  if (nth > WS_THREAD_SLOTS) nth = WS_THREAD_SLOTS;
  if (outer * tiles > 16 * (int64_t)nth) return (outer * n + nth - 1) / nth;
  int64_t load[WS_THREAD_SLOTS] = {0}, most = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t t = 0; t < tiles; ++t) {
      int m = 0;
      for (int i = 1; i < nth; ++i)
        if (load[i] < load[m]) m = i;
      load[m] += n - t * nt < nt ? n - t * nt : nt;
      if (load[m] > most) most = load[m];
    }
  return most;
}

/* Several participants: among the present tile size (nt of n, outer planes) and smaller ones
 * down to half of it (at least min; step: whole panels, or whole rows for the implicit GEMM),
 * the one whose busiest participant takes the fewest positions, where the tiles are the items
 * (at least one per participant; fewer: the channels are split instead), and the last keeps
 * at least min. A last round of items that leaves participants idle (3 tiles on 2 threads) or
 * a small last tile cost up to a quarter of a layer's time on 2 threads (docs/kernels.md). A
 * smaller size must gain over a sixteenth: smaller tiles read the weights more often. */
static int64_t g2_balanced(int64_t n, int64_t nt, int64_t outer, int nth, int64_t min,
                           int64_t step) {
  if (nth <= 1 || outer * ((n + nt - 1) / nt) < nth) return nt;
  int64_t best = nt, most = g2_busiest(n, nt, outer, nth);
  for (int64_t cand = nt / step * step; cand >= min && 2 * cand >= nt; cand -= step) {
    if (n % cand != 0 && n % cand < min) continue; /* a last tile of a few: every weight again */
    const int64_t m = g2_busiest(n, cand, outer, nth);
    if (16 * m < 15 * most) best = cand, most = m;
  }
  return best;
}

static accel_status g2_run(const conv_i8_call* c) {
  const plan* P = c->P;
  const conv_geometry* g = P->g;
  /* either packed layout (LAYOUT_I16T: stride-1 kxk layers the implicit GEMM does not take) */
  const int64_t cg2 = c->i16 == NULL && c->i16t != NULL ? (P->cg + 1) / 2 : 0;
  const int64_t kd2 = cg2 > 0 ? P->rs * cg2 : (P->kd + 1) / 2;
  const int32_t* w = cg2 > 0 ? c->i16t : c->i16;
  if (w == NULL && P->ohw > 1) { /* no packed weights: pack them on this call */
    int32_t* d = workspace_get(c->ws, WS_PACK, data_bytes(P, LAYOUT_I16));
    if (d == NULL) return ACCEL_ERR_NO_MEMORY;
    i8_pack_i16(P, c->weights, d);
    w = d;
  }
  const int64_t outer = (int64_t)g->n * g->groups;
  const int nthreads = c->nth;
  g2_job J = {.P = P, .in_zero = c->in_zero, .in = c->in,
              .in_end = c->in + (int64_t)g->n * g->c * P->hw, .w = w, .raw = c->raw,
              .out = c->out, .ep = c->ep,
              .kd2 = kd2, .cg2 = cg2};
  char* bufs[WS_THREAD_SLOTS];
  J.bufs = bufs;
  if (P->ohw == 1) {
    int64_t mchunks = 1;
    while (outer * mchunks < 4 * (int64_t)nthreads && mchunks < P->mblocks) mchunks *= 2;
    if (mchunks > P->mblocks) mchunks = P->mblocks;
    J.mchunks = mchunks;
    const int64_t items = outer * mchunks;
    const int nth = (int)(items < nthreads ? items : nthreads);
    for (int t = 0; t < nth; ++t) {
      bufs[t] = workspace_get(c->ws, t, (size_t)(P->kd + 31) / 16 * 16 * sizeof(int16_t) + 128);
      if (bufs[t] == NULL) return ACCEL_ERR_NO_MEMORY;
    }
    pool_for(nth, items, g2_gemv_item, &J);
    return ACCEL_OK;
  }
  if (!g2_prepare_lanes(P, c->ep, c->ws, &J)) return ACCEL_ERR_NO_MEMORY;
  /* depth chunks: a panel's chunk in half the L1 (one chunk when the depth allows) */
  const int64_t l1 = conv_l1_bytes();
  int64_t kc = (l1 > 0 ? l1 : G2_MIN_L1) / 2 / (G2_NR * 4);
  if (kc < 8) kc = 8;
  int64_t nchunks = (kd2 + kc - 1) / kc;
  kc = (kd2 + nchunks - 1) / nchunks;
  /* ... while the chunk's weights of every channel stay in the L2 (else each panel would read
   * them from memory: then whole-depth columns, the weights of one block at a time) */
  const int64_t l2 = conv_l2_bytes();
  const int64_t budget = l2 > 0 ? l2 / 4 : G2_MIN_TILE;
  if (nchunks > 1 && P->mblocks * MR * kc * 4 > 4 * budget) {
    nchunks = 1;
    kc = kd2;
  }
  /* the tile: its columns in a quarter of the L2, at least one panel, at most G2_MAX_PANELS */
  int64_t nt = budget / (kc * 4) / G2_NR * G2_NR;
  if (nt < G2_NR) nt = G2_NR;
  if (nt > G2_MAX_PANELS * G2_NR) nt = G2_MAX_PANELS * G2_NR;
  if (nt > P->ohw) nt = P->ohw;
  int64_t ntiles = (P->ohw + nt - 1) / nt;
  nt = g2_even_tile(P->ohw, ntiles, nt);
  ntiles = (P->ohw + nt - 1) / nt;
  /* more, smaller tiles until every thread has an item, while a tile keeps 2 panels (else the
   * threads share a tile's channels) */
  while (outer * ntiles < nthreads && nt >= 4 * G2_NR) {
    nt = g2_even_tile(P->ohw, ntiles + 1, ((P->ohw + ntiles) / (ntiles + 1) + 7) / 8 * 8);
    ntiles = (P->ohw + nt - 1) / nt;
  }
  nt = g2_balanced(P->ohw, nt, outer, nthreads, 2 * G2_NR, G2_NR);
  ntiles = (P->ohw + nt - 1) / nt;
  const int64_t ldb_max = (nt + 7) / 8 * 8;
  int64_t mchunks = 1;
  while (outer * ntiles * mchunks < nthreads && mchunks < P->mblocks) ++mchunks;
  /* several depth chunks: the item's int32 rows (all its channels) in a quarter of the L2 */
  while (nchunks > 1 && mchunks < P->mblocks &&
         (P->mblocks + mchunks - 1) / mchunks * MR * ldb_max * 4 > budget)
    ++mchunks;
  const int64_t acc_rows = (nchunks > 1 ? (P->mblocks + mchunks - 1) / mchunks : G2_SB) * MR;
  J.nt = nt;
  J.ntiles = ntiles;
  J.mchunks = mchunks;
  J.kc = nchunks > 1 ? kc : kd2;
  J.col_bytes = (int64_t)round64((size_t)(J.kc * ldb_max * 4));
  J.acc_bytes = (int64_t)round64((size_t)(acc_rows * ldb_max) * sizeof(int32_t));
  const int64_t items = outer * ntiles * mchunks;
  const int nth = (int)(items < nthreads ? items : nthreads);
  const size_t bytes = (size_t)(J.col_bytes + J.acc_bytes) + 2 * (size_t)ldb_max + 128;
  if (!g2_thread_buffers(c->ws, nth, bytes, bufs)) return ACCEL_ERR_NO_MEMORY;
  pool_for(nth, items, g2_item, &J);
  return ACCEL_OK;
}

/* ---- the implicit GEMM (stride 1, kernels larger than 1x1) --------------------------------
 * No columns: the input of each (image, group) is copied once per call as int16 pairs
 * (in - in_zero) of input channels 2p, 2p + 1, in planes padded to the hp x wp window the
 * output reads (padding 0), cg2 planes of pstride pairs. Output position (oy, ox) then reads
 * tap t of pair p at position oy wp + ox + off[t] of plane p (off[t] = r dh wp + s dw): a tap's
 * depth rows are one pair-plane apart, which the micro-kernel steps over (bs), against weights
 * packed tap by tap (LAYOUT_I16T). The GEMM runs over virtual positions v = oy wp + ox: the
 * columns ox >= ow (a row's last wp - ow) are computed and dropped, the price of reading the
 * copy in place. */

typedef struct i16_job {
  g2_job base; /* P, the converters, out; its columns' fields unused */
  const int32_t* w; /* LAYOUT_I16T */
  int16_t* x;       /* the pair copy */
  int64_t cg2, hp, wp, pstride, rows, ntiles, mchunks, chunk, ldb_max;
  const int64_t* off; /* per tap, in positions */
  char* const* bufs;  /* per participant: the item's int32 rows */
} i16_job;

int i8_tap_major(const plan* P) {
  const conv_geometry* g = P->g;
  return P->cg > 1 && P->rs > 1 && g->stride_h == 1 && g->stride_w == 1 && g->pad_top >= 0 &&
         g->pad_left >= 0;
}

void i16_pair_plane(const plan* P, const int8_t* in, int32_t in_zero, int64_t it, int64_t cg2,
                    int64_t hp, int64_t wp, int64_t pstride, int16_t* x) {
  const conv_geometry* g = P->g;
  const int64_t p = it % cg2, bg = it / cg2;
  const int64_t b = bg / g->groups, grp = bg % g->groups;
  const int64_t W = g->w, pl = g->pad_left;
  const int8_t* s0 = in + (b * g->c + grp * P->cg + 2 * p) * P->hw;
  const int8_t* s1 = 2 * p + 1 < P->cg ? s0 + P->hw : NULL; /* NULL: the high halves are 0 */
  const int8_t z = (int8_t)in_zero;
  const __m256i z16 = _mm256_set1_epi16((int16_t)z);
  const __m128i zb = _mm_set1_epi8(z);
  int16_t* d = x + it * pstride * 2;
  const int64_t n = W < wp - pl ? W : wp - pl; /* input columns the window reads */
  for (int64_t py = 0; py < hp; ++py, d += 2 * wp) {
    const int64_t iy = py - g->pad_top;
    if (iy < 0 || iy >= g->h || n <= 0) {
      memset(d, 0, (size_t)(2 * wp) * sizeof(int16_t));
      continue;
    }
    memset(d, 0, (size_t)(2 * pl) * sizeof(int16_t));
    const int8_t* r0 = s0 + iy * W;
    const int8_t* r1 = s1 != NULL ? s1 + iy * W : NULL;
    int16_t* o = d + 2 * pl;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m128i lo = _mm_loadl_epi64((const __m128i*)(r0 + i));
      const __m128i hi = r1 != NULL ? _mm_loadl_epi64((const __m128i*)(r1 + i)) : zb;
      _mm256_storeu_si256((__m256i*)(o + 2 * i),
                          _mm256_sub_epi16(_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(lo, hi)), z16));
    }
    for (; i < n; ++i) {
      o[2 * i] = (int16_t)(r0[i] - z);
      o[2 * i + 1] = (int16_t)(r1 != NULL ? r1[i] - z : 0);
    }
    memset(o + 2 * n, 0, (size_t)(2 * (wp - pl - n)) * sizeof(int16_t));
  }
  memset(d, 0, (size_t)(2 * (pstride - hp * wp)) * sizeof(int16_t));
}

/* Plane it of the copy (i16_pair_plane: the window's hp x wp). */
static void i16_copy_item(void* ctx, int64_t it, int participant) {
  (void)participant;
  const i16_job* J = ctx;
  i16_pair_plane(J->base.P, J->base.in, J->base.in_zero, it, J->cg2, J->hp, J->wp, J->pstride,
                 J->x);
}

/* Item = (image, group, tile of output rows, chunk of channel blocks). Per depth chunk of
 * pairs (every tap's weights of the chunk for the item's channels stay in L2), per panel of
 * I16_NR virtual positions (its chunk rows in L1), every block over every tap, added to the
 * int32 rows of the item's channels; then each row's kept columns moved together and
 * converted. A shallow chunk (at most I16_SHALLOW pair steps: a call's set-up is a large part
 * of it) runs per 6 channels one call over every 16-wide panel (the copy's rows from L2), the
 * panel of 8 after them. */
static void i16_item(void* ctx, int64_t it, int participant) {
  const i16_job* J = ctx;
  const plan* P = J->base.P;
  const conv_geometry* g = P->g;
  const int64_t mc = it % J->mchunks, tile = it / J->mchunks % J->ntiles;
  const int64_t bg = it / (J->mchunks * J->ntiles);
  const int64_t b = bg / g->groups, grp = bg % g->groups;
  const int64_t ow = g->out_w, wp = J->wp, cg2 = J->cg2, rs = P->rs;
  const int64_t oy0 = tile * J->rows, nrow = g->out_h - oy0 < J->rows ? g->out_h - oy0 : J->rows;
  const int64_t v0 = oy0 * wp, ldb = (nrow * wp + 7) / 8 * 8;
  const int64_t npanels = (ldb + I16_NR - 1) / I16_NR;
  const int64_t mb0 = P->mblocks * mc / J->mchunks, mb1 = P->mblocks * (mc + 1) / J->mchunks;
  const int64_t kf = mb0 * MR, nk = (P->mg < mb1 * MR ? P->mg : mb1 * MR) - kf;
  int32_t* acc = (int32_t*)(void*)J->bufs[participant];
  const int16_t* xb = J->x + bg * cg2 * J->pstride * 2;
  const int64_t n16 = ldb / I16_NR; /* the 16-wide panels; a last one of 8 after them */
  for (int64_t c0 = 0; c0 < cg2; c0 += J->chunk) {
    const int64_t kc = cg2 - c0 < J->chunk ? cg2 - c0 : J->chunk;
    const int16_t* bc = xb + (c0 * J->pstride + v0) * 2; /* panel 0 */
    const int shallow = kc * rs <= I16_SHALLOW;
    for (int64_t q = 0; q < npanels; q += shallow ? npanels : 1) {
      const int64_t wq = ldb - q * I16_NR < I16_NR ? ldb - q * I16_NR : I16_NR;
      for (int64_t r = 0; r < nk; r += G6_MR) { /* the item's channels kf + r.., 6 a call */
        const int64_t mr = nk - r < G6_MR ? nk - r : G6_MR;
        const int32_t* p[G6_MR];
        for (int64_t m = 0; m < mr; ++m) {
          const int64_t k = kf + r + m;
          p[m] = J->w + ((grp * P->mblocks + k / MR) * rs * cg2 + c0) * MR + k % MR;
        }
        int32_t* c = acc + r * ldb + q * I16_NR;
        if (!shallow) { /* panel q */
          g6t_table[wq / 8][mr](kc, rs, p, cg2 * MR, bc + q * I16_NR * 2, J->off,
                                2 * J->pstride, c, ldb, c0 > 0, 1, 0);
          continue;
        }
        if (n16 > 0) /* every panel */
          g6t_table[2][mr](kc, rs, p, cg2 * MR, bc, J->off, 2 * J->pstride, c, ldb, c0 > 0, n16,
                           2 * I16_NR);
        if (n16 < npanels)
          g6t_table[1][mr](kc, rs, p, cg2 * MR, bc + n16 * I16_NR * 2, J->off, 2 * J->pstride,
                           c + n16 * I16_NR, ldb, c0 > 0, 1, 0);
      }
    }
  }
  for (int64_t mb = mb0; mb < mb1; ++mb) {
    const int64_t k0 = mb * MR, nrows = P->mg - k0 < MR ? P->mg - k0 : MR;
    for (int64_t m = 0; m < nrows; ++m) {
      int32_t* row = acc + ((mb - mb0) * MR + m) * ldb;
      for (int64_t i = 1; i < nrow; ++i) { /* row i's ow kept values down to i ow (ascending:
                                               each load precedes the stores over it) */
        const int32_t* src = row + i * wp;
        int32_t* dst = row + i * ow;
        int64_t e = 0;
        for (; e + 8 <= ow; e += 8)
          _mm256_storeu_si256((__m256i*)(dst + e), _mm256_loadu_si256((const __m256i*)(src + e)));
        for (; e < ow; ++e) dst[e] = src[e];
      }
      const int64_t k = grp * P->mg + k0 + m;
      g2_convert(&J->base, k, row, (b * g->k + k) * P->ohw + oy0 * ow, nrow * ow);
    }
  }
}

static accel_status i16_run(const conv_i8_call* c) {
  const plan* P = c->P;
  const conv_geometry* g = P->g;
  const int32_t* w = c->i16t;
  if (w == NULL) { /* no packed weights: pack them on this call */
    int32_t* d = workspace_get(c->ws, WS_PACK, data_bytes(P, LAYOUT_I16T));
    if (d == NULL) return ACCEL_ERR_NO_MEMORY;
    i8_pack_i16t(P, c->weights, d);
    w = d;
  }
  i16_job J = {.base = {.P = P, .in_zero = c->in_zero, .in = c->in, .out = c->out, .ep = c->ep},
               .w = w};
  if (!g2_prepare_lanes(P, c->ep, c->ws, &J.base)) return ACCEL_ERR_NO_MEMORY;
  const int64_t kh = g->kernel_h, kw = g->kernel_w, rs = P->rs;
  J.cg2 = (P->cg + 1) / 2;
  J.wp = g->out_w + (kw - 1) * g->dilation_w;
  J.hp = g->out_h + (kh - 1) * g->dilation_h;
  /* the last tile's panels read up to 7 positions past its rows, and its last tap (kw - 1) dw
   * past the plane */
  J.pstride = J.hp * J.wp + (kw - 1) * g->dilation_w + 8;
  int64_t off[64];
  int64_t* offs = rs <= 64 ? off : workspace_get(c->ws, WS_OFF, (size_t)rs * sizeof(int64_t));
  if (offs == NULL) return ACCEL_ERR_NO_MEMORY;
  for (int64_t t = 0; t < rs; ++t)
    offs[t] = t / kw * g->dilation_h * J.wp + t % kw * g->dilation_w;
  J.off = offs;
  const int64_t planes = (int64_t)g->n * g->groups * J.cg2;
  J.x = workspace_get(c->ws, WS_COPY, (size_t)(planes * J.pstride * 2) * sizeof(int16_t));
  if (J.x == NULL) return ACCEL_ERR_NO_MEMORY;
  const int nthreads = c->nth;
  pool_for(planes < nthreads ? (int)planes : nthreads, planes, i16_copy_item, &J);
  /* the item's int32 rows in a quarter of the L2; tiles of whole output rows */
  const int64_t l2 = conv_l2_bytes();
  const int64_t budget = l2 > 0 ? l2 / 4 : G2_MIN_TILE;
  const int64_t outer = (int64_t)g->n * g->groups;
  int64_t mchunks = 1;
  int64_t rows = budget / (P->mblocks * MR * J.wp * 4);
  while (rows < 2 && mchunks < P->mblocks) { /* channels split until two rows fit */
    ++mchunks;
    rows = budget / ((P->mblocks + mchunks - 1) / mchunks * MR * J.wp * 4);
  }
  if (rows < 1) rows = 1;
  int64_t ntiles = (g->out_h + rows - 1) / rows;
  rows = (g->out_h + ntiles - 1) / ntiles; /* tiles of one size */
  while (outer * ntiles * mchunks < nthreads && rows > 1) { /* an item for every thread */
    --rows;
    ntiles = (g->out_h + rows - 1) / rows;
  }
  rows = g2_balanced(g->out_h, rows, outer, nthreads, (2 * I16_NR + J.wp - 1) / J.wp, 1);
  ntiles = (g->out_h + rows - 1) / rows;
  while (outer * ntiles * mchunks < nthreads && mchunks < P->mblocks) ++mchunks;
  J.rows = rows;
  J.ntiles = ntiles;
  J.mchunks = mchunks;
  /* depth chunks: a panel's chunk rows in half the L1 (kh rows of G2_NR + (kw - 1) dw pairs a
   * pair-plane; one chunk when the depth allows), and the chunk's weights of every tap for the
   * item's channels in a quarter of the L2 */
  const int64_t l1 = conv_l1_bytes();
  const int64_t item_rows = (P->mblocks + mchunks - 1) / mchunks * MR;
  int64_t chunk =
      (l1 > 0 ? l1 : G2_MIN_L1) / 2 / (kh * ((I16_NR + (kw - 1) * g->dilation_w) * 4 + 64));
  if (chunk > budget / (item_rows * rs * 4)) chunk = budget / (item_rows * rs * 4);
  if (chunk < 8) chunk = 8;
  const int64_t nchunks = (J.cg2 + chunk - 1) / chunk;
  J.chunk = (J.cg2 + nchunks - 1) / nchunks;
  J.ldb_max = (rows * J.wp + 7) / 8 * 8;
  const size_t bytes = round64((size_t)(item_rows * J.ldb_max) * sizeof(int32_t));
  const int64_t items = outer * ntiles * mchunks;
  const int nth = (int)(items < nthreads ? items : nthreads);
  char* bufs[WS_THREAD_SLOTS];
  if (!g2_thread_buffers(c->ws, nth, bytes, bufs)) return ACCEL_ERR_NO_MEMORY;
  J.bufs = bufs;
  pool_for(nth, items, i16_item, &J);
  return ACCEL_OK;
}

/* The layers packed tap by tap, with more than one output position (one: the matrix-vector
 * products), where a row's wp - ow dropped columns are at most a fifteenth of it: they cost
 * their share of the products, and the column GEMM wins on ResNet's 14x14 and 7x7 planes
 * (docs/kernels.md). */
static int i16_applies(const conv_i8_call* c) {
  const conv_geometry* g = c->P->g;
  const int64_t wp = g->out_w + (int64_t)(g->kernel_w - 1) * g->dilation_w;
  return i8_tap_major(c->P) && c->P->ohw > 1 && 15 * (wp - g->out_w) <= wp;
}
/* Forced: any stride-1 grouped or dense layer with more than one output position (a 1x1
 * layer's dropped columns are its padding's). */
static int i16_supports(const conv_i8_call* c) {
  const conv_geometry* g = c->P->g;
  return c->P->cg > 1 && g->stride_h == 1 && g->stride_w == 1 && c->P->ohw > 1 &&
         g->pad_top >= 0 && g->pad_left >= 0;
}

const conv_i8_impl conv_i8_implicit16_avx2_impl = {.name = "implicit16_avx2",
                                                   .applies = i16_applies,
                                                   .supports = i16_supports, .run = i16_run};

/* Grouped and dense convolutions: depthwise layers (one input channel per group) have their
 * own kernels and would use one pair in eight of a packed block here. */
static int g2_applies(const conv_i8_call* c) { return c->P->cg > 1; }
static int g2_supports(const conv_i8_call* c) {
  (void)c;
  return 1;
}

const conv_i8_impl conv_i8_gemm_avx2_impl = {.name = "gemm16_avx2", .applies = g2_applies,
                                             .supports = g2_supports, .run = g2_run};
#endif /* __AVX2__ && !CONV_I8_VNNI */
