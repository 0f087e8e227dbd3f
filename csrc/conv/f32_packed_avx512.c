/* conv/f32_packed_avx512.c - FP32 CONV on packed panels (impl "packed_avx512"): im2col per
 * tile into 48-wide panels, a 4-channel micro-kernel with the 32-deep blocks' running totals
 * in registers (an 8-channel one on a panel of one vector: ukr_8_1), an image's last < 16
 * positions as dot products along the depth.
 *
 * - packed: im2col per tile into 48-wide panels (vector shifts for stride 1 and 2), weights
 * read in place and the next block's prefetched. The depth is blocked by a multiple of 32
 * (so the 32-deep sums start at the same depths whatever the block, and the bits do not
 * depend on it): by up to 512, channel blocks outermost, so the kernel's weight rows stay in
 * L1 (a 32 KB L1d); where a 48 x 128 panel fits in half the L1d (sysconf, a 48 KB L1d) by up
 * to 128, panels outermost, each panel staying in L1 while the channels pass over it in passes of
 * 128 KB of weights, and threads split a layer's channels rather than its image when it has more
 * channels than positions. A tile of one panel (a 7x7 image) up to 2048 deep with >= 4 MB of
 * weights packs every block first and runs them inside passes of 16 channels: it reads each weight
 * once, each row front to back (4 KB pages, few TLB misses); whatever the L1d, so does a tile
 * whose outputs outgrow L2 while its panels over the whole depth do not (a wide dense layer over
 * a transformer's tokens). With a 32 KB L1d, a depth of at most two blocks whose panels over
 * the whole depth fit in 3/4 of L2 (ViT-B's 768-deep token GEMMs) is one block
 * (whole_depth_block). Without panels (<= 8 positions an image) the whole depth in one
 * block.
 * An image's last < 16 positions are dot products along the depth instead of a mostly
 * empty vector.
 */
#include "conv/f32.h"

#ifdef __AVX512F__
/* Packed: c[m][0..16*nv) (+)= sum_k a[m*lda + k] * b[k*16*nv + ..] for m < mr <= PR, the
 * last vector under `tail`; b is a packed panel, a the weights as they are. Each block's sum
 * joins the running total in registers (12 accumulators and 12 totals), so c is read once
 * (accumulate) and written once: half the rows of the implicit kernel's tile, since adding
 * every 32-deep block through c cost 8-10 % of ResNet-50's 14x14 and 7x7 layers. pf (or
 * NULL): the next block of weights (PR rows of kc from pf, lda apart), fetched into cache
 * meanwhile: a deep layer's weights come from memory, in streams whose rows are often a power
 * of two apart. */
enum { PR = 4 }; /* rows of a packed micro-tile */
#define PR_ROWS(X) X(0) X(1) X(2) X(3)
#define PK_TOTAL(m) __m512 t##m##0 = _mm512_setzero_ps(), t##m##1 = t##m##0, t##m##2 = t##m##0;
#define PK_LOAD(m)                                                                      \
  if (mr > m) {                                                                         \
    t##m##0 = _mm512_maskz_loadu_ps(t0, c + m * ldc);                                   \
    if (nv > 1) t##m##1 = _mm512_maskz_loadu_ps(t1, c + m * ldc + 16);                  \
    if (nv > 2) t##m##2 = _mm512_maskz_loadu_ps(tail, c + m * ldc + 32);                \
  }
#define PK_ADD(m)                                                                       \
  if (mr > m) {                                                                         \
    t##m##0 = _mm512_add_ps(t##m##0, c##m##0);                                          \
    if (nv > 1) t##m##1 = _mm512_add_ps(t##m##1, c##m##1);                              \
    if (nv > 2) t##m##2 = _mm512_add_ps(t##m##2, c##m##2);                              \
  }
#define PK_MOVE(m)                                                                      \
  if (mr > m) {                                                                         \
    t##m##0 = c##m##0;                                                                  \
    if (nv > 1) t##m##1 = c##m##1;                                                      \
    if (nv > 2) t##m##2 = c##m##2;                                                      \
  }
#define PK_STORE(m)                                                                     \
  if (mr > m) {                                                                         \
    _mm512_mask_storeu_ps(c + m * ldc, t0, t##m##0);                                    \
    if (nv > 1) _mm512_mask_storeu_ps(c + m * ldc + 16, t1, t##m##1);                   \
    if (nv > 2) _mm512_mask_storeu_ps(c + m * ldc + 32, tail, t##m##2);                 \
  }
#define PK_AROW(m) const float* a##m = a + (mr > m ? m : 0) * lda;

static inline __attribute__((always_inline)) void ukr_body(const int mr, const int nv, int64_t kc,
                                                           const float* a, int64_t lda,
                                                           const float* b, float* c, int64_t ldc,
                                                           int accumulate, __mmask16 tail,
                                                           const float* pf) {
  const __mmask16 t0 = nv == 1 ? tail : (__mmask16)0xFFFF;
  const __mmask16 t1 = nv == 2 ? tail : (__mmask16)0xFFFF;
  PR_ROWS(ACC_ROW)
  PR_ROWS(PK_TOTAL)
  PR_ROWS(PK_AROW)
  if (accumulate) {
    PR_ROWS(PK_LOAD)
  }
  for (int64_t k0 = 0; k0 < kc; k0 += SUM_BLOCK) { /* total (+)= each block's own sum */
    const int64_t k1 = kc - k0 < SUM_BLOCK ? kc : k0 + SUM_BLOCK;
    PR_ROWS(ACC_ZERO)
    if (pf != NULL) /* lines k/16 of the next weight block's rows k/4 % 4 for this block's k */
      for (int64_t k = k0; k < k1; k += 4)
        _mm_prefetch((const char*)(pf + (k >> 2 & 3) * lda + (k >> 4) * 16), _MM_HINT_T0);
    /* unrolled: fewer loop uops on the FMA ports (the packed layers 2-3 % faster) */
    _Pragma("GCC unroll 4")
    for (int64_t k = k0; k < k1; ++k) {
      const __m512 b0 = _mm512_load_ps(b);
      const __m512 b1 = nv > 1 ? _mm512_load_ps(b + 16) : b0;
      const __m512 b2 = nv > 2 ? _mm512_load_ps(b + 32) : b0;
      b += 16 * nv;
      ACC_FMA(0, a0[k]) ACC_FMA(1, a1[k]) ACC_FMA(2, a2[k]) ACC_FMA(3, a3[k])
    }
    if (accumulate || k0 > 0) {
      PR_ROWS(PK_ADD)
    } else {
      PR_ROWS(PK_MOVE)
    }
  }
  PR_ROWS(PK_STORE)
}

typedef void (*ukr_fn)(int64_t, const float*, int64_t, const float*, float*, int64_t, int,
                       __mmask16, const float*);
#define UKR(M_, V_)                                                                        \
  static void ukr_##M_##_##V_(int64_t kc, const float* a, int64_t lda, const float* b,      \
                              float* c, int64_t ldc, int accumulate, __mmask16 tail,        \
                              const float* pf) {                                             \
    ukr_body(M_, V_, kc, a, lda, b, c, ldc, accumulate, tail, pf);                           \
  }
UKR(1, 1) UKR(1, 2) UKR(1, 3) UKR(2, 1) UKR(2, 2) UKR(2, 3)
UKR(3, 1) UKR(3, 2) UKR(3, 3) UKR(4, 1) UKR(4, 2) UKR(4, 3)


/* Tail columns (an image's last < 16 outputs, TMAX at most): mr rows x t columns of dot
 * products along the depth, 16 lanes each. The lane partial sums live in `state` between
 * depth blocks and are summed into c[j + m*ldc] after the last one. */
#define DT_ROW(m) __m512 d##m##0 = _mm512_setzero_ps(), d##m##1 = d##m##0, d##m##2 = d##m##0;
#define DT_LOAD(m)                                                                   \
  if (mr > m) {                                                                      \
    d##m##0 = _mm512_load_ps(state + (m * TMAX) * 16);                               \
    if (t > 1) d##m##1 = _mm512_load_ps(state + (m * TMAX + 1) * 16);                \
    if (t > 2) d##m##2 = _mm512_load_ps(state + (m * TMAX + 2) * 16);                \
  }
#define DT_FMA(m)                                                                    \
  if (mr > m) {                                                                      \
    const __m512 av = _mm512_maskz_loadu_ps(mk, a + m * lda + k);                    \
    d##m##0 = _mm512_fmadd_ps(av, b0, d##m##0);                                      \
    if (t > 1) d##m##1 = _mm512_fmadd_ps(av, b1, d##m##1);                           \
    if (t > 2) d##m##2 = _mm512_fmadd_ps(av, b2, d##m##2);                           \
  }
#define DT_END(m)                                                                    \
  if (mr > m) {                                                                      \
    if (last) {                                                                      \
      c[m * ldc] = _mm512_reduce_add_ps(d##m##0);                                    \
      if (t > 1) c[m * ldc + 1] = _mm512_reduce_add_ps(d##m##1);                     \
      if (t > 2) c[m * ldc + 2] = _mm512_reduce_add_ps(d##m##2);                     \
    } else {                                                                         \
      _mm512_store_ps(state + (m * TMAX) * 16, d##m##0);                             \
      if (t > 1) _mm512_store_ps(state + (m * TMAX + 1) * 16, d##m##1);              \
      if (t > 2) _mm512_store_ps(state + (m * TMAX + 2) * 16, d##m##2);              \
    }                                                                                \
  }

static inline __attribute__((always_inline)) void dot_body(const int mr, const int t, int64_t kc,
                                                           const float* a, int64_t lda,
                                                           const float* bt, int64_t ldb,
                                                           float* state, float* c, int64_t ldc,
                                                           int first, int last, const float* pf) {
  ALL_ROWS(DT_ROW)
  if (!first) {
    ALL_ROWS(DT_LOAD)
  }
  for (int64_t k = 0; k < kc; k += 16) {
    const __mmask16 mk = lane_mask(kc - k); /* bt is zero-padded; a is not */
    if (pf != NULL) /* the next rows' lines at this depth: a classifier's weights stream from
                     * memory, 8 rows at a time */
      for (int m = 0; m < MR; ++m) _mm_prefetch((const char*)(pf + m * lda + k), _MM_HINT_T0);
    const __m512 b0 = _mm512_load_ps(bt + k);
    const __m512 b1 = t > 1 ? _mm512_load_ps(bt + ldb + k) : b0;
    const __m512 b2 = t > 2 ? _mm512_load_ps(bt + 2 * ldb + k) : b0;
    ALL_ROWS(DT_FMA)
  }
  ALL_ROWS(DT_END)
}

typedef void (*dot_fn)(int64_t, const float*, int64_t, const float*, int64_t, float*, float*,
                       int64_t, int, int, const float*);
#define DOT(M_, T_)                                                                          \
  static void dot_##M_##_##T_(int64_t kc, const float* a, int64_t lda, const float* bt,       \
                              int64_t ldb, float* state, float* c, int64_t ldc, int first,    \
                              int last, const float* pf) {                                    \
    dot_body(M_, T_, kc, a, lda, bt, ldb, state, c, ldc, first, last, pf);                    \
  }

F32_KERNEL_GRID(DOT)
static const ukr_fn ukr_table[PR + 1][NV + 1] = {{0, 0, 0, 0}, {0, ukr_1_1, ukr_1_2, ukr_1_3},
                                                 {0, ukr_2_1, ukr_2_2, ukr_2_3},
                                                 {0, ukr_3_1, ukr_3_2, ukr_3_3},
                                                 {0, ukr_4_1, ukr_4_2, ukr_4_3}};
static const dot_fn dot_table[MR + 1][4] = F32_KERNEL_TABLE(dot_);

/* A panel of one vector (at most 16 columns: attention's values CONV over a head's 64
 * positions, 48 + 16; a 28x28 plane, 16 x 48 + 16) for MR = 8 channels at once: ukr_4_1 has
 * four accumulator chains, which two FMA units of four cycles' latency leave half idle. The
 * same sums as ukr_body's, in its order (each 32-deep block from zero, added to the running
 * total), so the same bits. */
static void ukr_8_1(int64_t kc, const float* a, int64_t lda, const float* b, float* c,
                    int64_t ldc, int accumulate, __mmask16 tail, const float* pf) {
  __m512 t[MR], s[MR];
  for (int m = 0; m < MR; ++m)
    t[m] = accumulate ? _mm512_maskz_loadu_ps(tail, c + m * ldc) : _mm512_setzero_ps();
  for (int64_t k0 = 0; k0 < kc; k0 += SUM_BLOCK) {
    const int64_t k1 = kc - k0 < SUM_BLOCK ? kc : k0 + SUM_BLOCK;
    for (int m = 0; m < MR; ++m) s[m] = _mm512_setzero_ps();
    if (pf != NULL) /* as ukr_body: the next block's lines, its 8 rows' at this depth */
      for (int64_t k = k0; k < k1; k += 4) {
        _mm_prefetch((const char*)(pf + (k >> 2 & 3) * lda + (k >> 4) * 16), _MM_HINT_T0);
        _mm_prefetch((const char*)(pf + ((k >> 2 & 3) + 4) * lda + (k >> 4) * 16), _MM_HINT_T0);
      }
    _Pragma("GCC unroll 2")
    for (int64_t k = k0; k < k1; ++k) {
      const __m512 bv = _mm512_load_ps(b + 16 * k);
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) s[m] = _mm512_fmadd_ps(_mm512_set1_ps(a[m * lda + k]), bv, s[m]);
    }
    for (int m = 0; m < MR; ++m)
      t[m] = accumulate || k0 > 0 ? _mm512_add_ps(t[m], s[m]) : s[m];
  }
  for (int m = 0; m < MR; ++m) _mm512_mask_storeu_ps(c + m * ldc, tail, t[m]);
}

/* ---- the packed path: im2col into NR-wide panels, tails as dot products ------------------ */

/* A run of panel lanes that map to one output row of one image. */
typedef struct seg {
  const float* img; /* input of this image and group, channel 0 */
  int32_t y, x0, len, lane0;
} seg;


/* Taps s_lo..s_hi of one row segment of nvo <= 2 vectors at stride st (1 or 2), each tap's
 * offset s*dw below 16 source vectors' worth: the source columns stay in registers (e: the
 * columns at stride 1, the even ones at stride 2; o: the odd ones), each tap a shift of them.
 * (An array of source vectors went through the stack: 7 % of a 3x3 layer on 14x14, 15 % of a
 * 3x3/2 on 56x56.) Row s lands at dr + (s - s_lo) * pw, clipped to `room` lanes. */
static inline __attribute__((always_inline)) void pack_segment(
    const int nvo, const int st, const float* row, int64_t base, int64_t W, int64_t s_lo,
    int64_t s_hi, int64_t dw, int64_t room, float* dr, int64_t pw) {
  __m512 e0, e1, e2 = _mm512_setzero_ps(), o0 = e2, o1 = e2, o2 = e2;
#define SRC(q) _mm512_maskz_loadu_ps(col_mask(base + 16 * (q), W), row + base + 16 * (q))
  if (st == 1) {
    e0 = SRC(0);
    e1 = SRC(1);
    if (nvo > 1) e2 = SRC(2);
  } else {
    const __m512i even = lanes_2x(0), odd = lanes_2x(1);
    __m512 lo = SRC(0), hi = SRC(1);
    e0 = _mm512_permutex2var_ps(lo, even, hi);
    o0 = _mm512_permutex2var_ps(lo, odd, hi);
    lo = SRC(2), hi = SRC(3);
    e1 = _mm512_permutex2var_ps(lo, even, hi);
    o1 = _mm512_permutex2var_ps(lo, odd, hi);
    if (nvo > 1) {
      lo = SRC(4), hi = SRC(5);
      e2 = _mm512_permutex2var_ps(lo, even, hi);
      o2 = _mm512_permutex2var_ps(lo, odd, hi);
    }
  }
#undef SRC
  const __mmask16 m0 = lane_mask(room), m1 = lane_mask(room - 16);
  for (int64_t s = s_lo; s < s_hi; ++s, dr += pw) {
    const int64_t off = s * dw;
    const int odd_phase = st == 2 && (off & 1);
    const __m512i idx =
        _mm512_add_epi32(iota16(), _mm512_set1_epi32((int32_t)(st == 1 ? off : off >> 1)));
    const __m512 a0 = odd_phase ? o0 : e0, a1 = odd_phase ? o1 : e1;
    _mm512_mask_storeu_ps(dr, m0, _mm512_permutex2var_ps(a0, idx, a1));
    if (nvo > 1)
      _mm512_mask_storeu_ps(dr + 16, m1,
                            _mm512_permutex2var_ps(a1, idx, odd_phase ? o2 : e2));
  }
}

/* Taps s_lo..s_hi (< st) of a row segment of len columns at stride st = 4 or 8 (a patch
 * embedding's 4x4/4 or 8x8/8: each window its own st columns): 16 columns at a time, the
 * st source vectors they span loaded once (zero outside the image) and each tap's 16 values
 * picked from them by st / 2 two-source permutes instead of element by element (Zen 5, C
 * harness, hot: ViT-Ti's 8x8/8 patch CONV 12 -> 192 on 112x112 271 -> 260 us, ViT-B's to 768
 * 931 -> 920, a 4x4/4 3 -> 96 on 224x224 168 -> 143; docs/kernels.md). Row s lands at
 * dr + (s - s_lo) * pw; the same values as that copy. */
static void pack_strided(const int st, const float* row, int64_t base, int64_t W, int64_t s_lo,
                         int64_t s_hi, int64_t len, float* dr, int64_t pw) {
  const int per = 32 / st; /* outputs a pair of source vectors holds */
  __m512i idx[4]; /* pair q: lane l (q per <= l < (q + 1) per) reads l st - 32 q */
  for (int q = 0; q < st / 2; ++q)
    idx[q] = _mm512_sub_epi32(_mm512_mullo_epi32(iota16(), _mm512_set1_epi32(st)),
                              _mm512_set1_epi32(32 * q));
  for (int64_t l0 = 0; l0 < len; l0 += 16) {
    const int64_t b0 = base + l0 * st;
    __m512 src[8];
    for (int q = 0; q < st; ++q)
      src[q] = _mm512_maskz_loadu_ps(col_mask(b0 + 16 * q, W), row + b0 + 16 * q);
    const __mmask16 live = lane_mask(len - l0);
    for (int64_t s = s_lo; s < s_hi; ++s) {
      const __m512i sv = _mm512_set1_epi32((int32_t)s);
      __m512 r = _mm512_permutex2var_ps(src[0], _mm512_add_epi32(idx[0], sv), src[1]);
      for (int q = 1; q < st / 2; ++q)
        r = _mm512_mask_mov_ps(r, (__mmask16)(((1u << per) - 1u) << (q * per)),
                               _mm512_permutex2var_ps(src[2 * q], _mm512_add_epi32(idx[q], sv),
                                                      src[2 * q + 1]));
      _mm512_mask_storeu_ps(dr + (s - s_lo) * pw + l0, live, r);
    }
  }
}

/* Pack the rows (c, r, s) for s in [s_lo, s_hi) of one panel: im2col of the columns in segs.
 * Row s goes to d + (s - s_lo) * pw. Whole vectors are stored (clipped to the panel width):
 * a segment's overrun lands in lanes a later segment or the final tail clear overwrites. */
static void pack_cr(const conv_plan* P, const seg* segs, int nsegs, int64_t c, int64_t r,
                    int64_t s_lo, int64_t s_hi, int64_t pw, float* d) {
  const conv_geometry* g = P->g;
  const int64_t H = g->h, W = g->w, st = g->stride_w, dw = g->dilation_w;
  const int64_t offmax = (s_hi - 1) * dw;
  for (int i = 0; i < nsegs; ++i) {
    const seg* sg = &segs[i];
    const int64_t nvo = (sg->len + 15) >> 4;
    const int64_t iy = (int64_t)sg->y * g->stride_h - g->pad_top + r * g->dilation_h;
    if (iy < 0 || iy >= H) {
      for (int64_t s = s_lo; s < s_hi; ++s) {
        float* dr = d + (s - s_lo) * pw + sg->lane0;
        for (int64_t j = 0; j < nvo; ++j)
          _mm512_mask_storeu_ps(dr + 16 * j, lane_mask(pw - sg->lane0 - 16 * j),
                                _mm512_setzero_ps());
      }
      continue;
    }
    const float* row = sg->img + c * P->hw + iy * W;
    const int64_t base = (int64_t)sg->x0 * st - g->pad_left; /* input column of lane 0, tap 0 */
    if (nvo <= 2 && (st == 1 || st == 2) && offmax < 16 * st) {
      const int64_t room = pw - sg->lane0;
      if (st == 1 && nvo == 1)
        pack_segment(1, 1, row, base, W, s_lo, s_hi, dw, room, d + sg->lane0, pw);
      else if (st == 1)
        pack_segment(2, 1, row, base, W, s_lo, s_hi, dw, room, d + sg->lane0, pw);
      else if (nvo == 1)
        pack_segment(1, 2, row, base, W, s_lo, s_hi, dw, room, d + sg->lane0, pw);
      else
        pack_segment(2, 2, row, base, W, s_lo, s_hi, dw, room, d + sg->lane0, pw);
    } else if (st == 1 && nvo + (offmax >> 4) + 1 <= SRCV) {
      __m512 v[SRCV];
      const int64_t nq = nvo + (offmax >> 4) + ((offmax & 15) != 0);
      for (int64_t q = 0; q < nq; ++q) {
        const int64_t b0 = base + 16 * q;
        v[q] = _mm512_maskz_loadu_ps(col_mask(b0, W), row + b0);
      }
      for (int64_t s = s_lo; s < s_hi; ++s) {
        float* dr = d + (s - s_lo) * pw + sg->lane0;
        for (int64_t j = 0; j < nvo; ++j)
          _mm512_mask_storeu_ps(dr + 16 * j, lane_mask(pw - sg->lane0 - 16 * j),
                                shifted(v + j, s * dw));
      }
    } else if (st == 2 && nvo + (offmax >> 5) + 1 <= SRCV) {
      /* Split the source into even and odd columns once; tap s then reads one phase, shifted. */
      __m512 ev[SRCV], od[SRCV];
      const __m512i even = lanes_2x(0), odd = lanes_2x(1);
      const int64_t nq = nvo + ((offmax >> 1) >> 4) + (((offmax >> 1) & 15) != 0 || (offmax & 1));
      for (int64_t q = 0; q < nq; ++q) {
        const int64_t b0 = base + 32 * q, b1 = b0 + 16;
        const __m512 lo = _mm512_maskz_loadu_ps(col_mask(b0, W), row + b0);
        const __m512 hi = _mm512_maskz_loadu_ps(col_mask(b1, W), row + b1);
        ev[q] = _mm512_permutex2var_ps(lo, even, hi);
        od[q] = _mm512_permutex2var_ps(lo, odd, hi);
      }
      for (int64_t s = s_lo; s < s_hi; ++s) {
        const int64_t o = s * dw;
        const __m512* ph = (o & 1) ? od : ev;
        float* dr = d + (s - s_lo) * pw + sg->lane0;
        for (int64_t j = 0; j < nvo; ++j)
          _mm512_mask_storeu_ps(dr + 16 * j, lane_mask(pw - sg->lane0 - 16 * j),
                                shifted(ph + j, o >> 1));
      }
    } else if ((st == 4 || st == 8) && dw == 1 && offmax < st) {
      pack_strided((int)st, row, base, W, s_lo, s_hi, sg->len, d + sg->lane0, pw);
    } else {
      for (int64_t s = s_lo; s < s_hi; ++s) {
        float* dr = d + (s - s_lo) * pw + sg->lane0;
        for (int64_t l = 0; l < sg->len; ++l) {
          const int64_t ix = base + l * st + s * dw;
          dr[l] = ix >= 0 && ix < W ? row[ix] : 0.0f;
        }
      }
    }
  }
}

/* Pack depth rows [p0, p0+kc) of the columns described by segs into one panel of width pw. */
static void pack_panel(const conv_plan* P, const seg* segs, int nsegs, int64_t p0, int64_t kc,
                       int64_t pw, float* dst) {
  const conv_geometry* g = P->g;
  const int64_t S = g->kernel_w, RS = (int64_t)g->kernel_h * S;
  for (int64_t kk = 0; kk < kc;) {
    const int64_t p = p0 + kk, c = p / RS, rs = p % RS, r = rs / S, s_lo = rs % S;
    const int64_t s_hi = S < s_lo + (kc - kk) ? S : s_lo + (kc - kk);
    pack_cr(P, segs, nsegs, c, r, s_lo, s_hi, pw, dst + kk * pw);
    kk += s_hi - s_lo;
  }
  int64_t w = 0;
  for (int i = 0; i < nsegs; ++i) w += segs[i].len;
  if (w < pw) { /* lanes past the last column: computed, never stored; keep them finite */
    const __mmask16 mk = (__mmask16)(lane_mask(pw - (w & ~15)) & ~lane_mask(w & 15));
    for (int64_t kk = 0; kk < kc; ++kk)
      _mm512_mask_storeu_ps(dst + kk * pw + (w & ~15), mk, _mm512_setzero_ps());
  }
}

/* ---- tiles of the packed path -------------------------------------------------------- */

/* rows x w floats at src (rows ld apart) into rows of pw (a multiple of 16) at dst, the lanes
 * past w zero: a pointwise conv's panel, whose depth rows are the input's channel rows. */
static void pack_rows(const float* src, int64_t ld, int64_t rows, int64_t w, int64_t pw,
                      float* dst) {
  for (int64_t r = 0; r < rows; ++r, src += ld, dst += pw)
    for (int64_t x = 0; x < pw; x += 16)
      _mm512_store_ps(dst + x, _mm512_maskz_loadu_ps(lane_mask(w - x), src + x));
}

typedef struct tile_bufs {
  float* bp;    /* packed panels: panels x kc x NR */
  float* bt;    /* tail columns: TMAX x ldbt */
  float* state; /* tail partial sums: mchunk x TMAX x 16 */
} tile_bufs;

/* Channels [m, m + MR) of a tile (channels [m0, m1)) over its panel j (packed at bp), depth
 * block [p0, p0 + kc): the block of MR rows in micro-tiles of PR. On panel 0 the kernel fetches
 * the next weight block (whatever the depth: the weights of a 7x7 layer with 160 input channels
 * come cold too): this depth block's next MR rows, or the next depth block's first. */
static void panel_rows(const conv_plan* P, const float* bp, const float* abase, float* cbase,
                       int64_t m0, int64_t m1, int64_t m, int64_t j, int64_t vcols, int64_t p0,
                       int64_t kc, int last) {
  const int64_t mr = m1 - m < MR ? m1 - m : MR;
  const float* a = abase + m * P->kd + p0;
  const float* pf = j != 0                ? NULL
                    : m + MR + MR <= m1   ? a + MR * P->kd
                    : !last && m + MR >= m1 ? abase + m0 * P->kd + p0 + kc
                                            : NULL;
  const int64_t c0 = j * NR;
  const int64_t w = vcols - c0 < NR ? vcols - c0 : NR;
  const int64_t nv = (w + 15) / 16;
  const __mmask16 tail = lane_mask(w - (nv - 1) * 16);
  if (nv == 1 && mr == MR) {
    ukr_8_1(kc, a, P->kd, bp, cbase + m * P->ohw + c0, P->ohw, p0 > 0, tail, pf);
    return;
  }
  for (int64_t h = 0; h < mr; h += PR)
    ukr_table[mr - h < PR ? mr - h : PR][nv](kc, a + h * P->kd, P->kd, bp,
                                             cbase + (m + h) * P->ohw + c0, P->ohw, p0 > 0, tail,
                                             pf != NULL ? pf + h * P->kd : NULL);
}

/* Depth block [p0, p0 + kc) of a tile's npanels panels (at bp, NR * kc floats apart) and
 * ntail tail columns (at bt, ldbt apart). */
static void pack_block(const conv_plan* P, const float* img, int64_t n0, int64_t vcols,
                       int64_t npanels, int64_t ntail, int64_t p0, int64_t kc, float* bp,
                       float* bt, int64_t ldbt) {
  const int64_t ow = P->g->out_w;
  for (int64_t j = 0; j < npanels; ++j) {
    const int64_t c0 = j * NR;
    const int64_t w = vcols - c0 < NR ? vcols - c0 : NR;
    const int64_t pw = (w + 15) & ~(int64_t)15;
    if (P->pointwise) { /* the panel's depth rows are input rows: copy, zero past w */
      pack_rows(img + p0 * P->hw + n0 + c0, P->hw, kc, w, pw, bp + j * NR * kc);
      continue;
    }
    seg segs[NR];
    int nsegs = 0;
    for (int64_t lane = 0; lane < w;) {
      const int64_t n = n0 + c0 + lane;
      const int64_t y = n / ow, x = n % ow;
      int64_t len = ow - x;
      if (len > w - lane) len = w - lane;
      segs[nsegs++] = (seg){.img = img, .y = (int32_t)y, .x0 = (int32_t)x, .len = (int32_t)len,
                            .lane0 = (int32_t)lane};
      lane += len;
    }
    pack_panel(P, segs, nsegs, p0, kc, pw, bp + j * NR * kc);
  }
  for (int64_t j = 0; j < ntail; ++j) {
    const int64_t n = n0 + vcols + j;
    pack_col(P, img, n / ow, n % ow, p0, kc, bt + j * ldbt);
  }
}

/* One tile: output channels [m0, m1) of group grp, columns [n0, n0+ncols) of image b; the last
 * ntail columns go through the dot kernel. Depth blocks outermost, or (pass_rows > 0) inside
 * passes of pass_rows channels; either way each output's blocks run in depth order, so the
 * bits are the same. The epilogue runs on each block of MR channels right after its last
 * depth block, while it is in cache. */
/* The epilogue of mr channels from ch of image b over columns n0 .. n0 + ncols: channel by channel,
 * or all at once where each is one position (a 1x1 image: squeeze-excite's convolutions, a
 * dense layer), the same bits. */
static inline void epilogue_rows(const conv_plan* P, const sdp_f32* ep, float* out, int64_t b,
                                 int64_t ch, int64_t mr, int64_t n0, int64_t ncols) {
  const int64_t at = (b * P->g->k + ch) * P->ohw + n0;
  if (P->ohw == 1) {
    epilogue_channels(ep, ch, out, at, mr);
    return;
  }
  for (int64_t i = 0; i < mr; ++i) epilogue_span(ep, ch + i, out, at + i * P->ohw, ncols);
}

static void gemm_tile(const conv_plan* P, const float* in, const float* weights, float* out,
                      const sdp_f32* ep, int64_t b, int64_t grp, int64_t m0, int64_t m1,
                      int64_t n0, int64_t ncols, int64_t ntail, const tile_bufs* tb,
                      int64_t pass_rows) {
  const conv_geometry* g = P->g;
  const float* img = in + (b * g->c + grp * P->cg) * P->hw;
  const int64_t vcols = ncols - ntail;
  const int64_t npanels = (vcols + NR - 1) / NR;
  float* cbase = out + (b * g->k + grp * P->mg) * P->ohw + n0;
  const float* abase = weights + grp * P->mg * P->kd;

  if (pass_rows > 0) {
    /* Depth blocks inside passes of pass_rows channels, every block packed first: each weight
     * row is then read front to back in one pass (a few pages at a time), not a slice of
     * every row per depth block (thousands of 4 KB pages, each a TLB miss). */
    const int64_t ldbt = (P->kd + 15) & ~(int64_t)15;
    for (int64_t p0 = 0; p0 < P->kd; p0 += P->kc) {
      const int64_t kc = P->kd - p0 < P->kc ? P->kd - p0 : P->kc;
      pack_block(P, img, n0, vcols, npanels, ntail, p0, kc, tb->bp + p0 * npanels * NR,
                 tb->bt + p0, ldbt);
    }
    for (int64_t mp = m0; mp < m1; mp += pass_rows) {
      const int64_t me = m1 - mp < pass_rows ? m1 : mp + pass_rows;
      for (int64_t p0 = 0; p0 < P->kd; p0 += P->kc) {
        const int64_t kc = P->kd - p0 < P->kc ? P->kd - p0 : P->kc;
        const int last = p0 + kc == P->kd;
        const float* bp = tb->bp + p0 * npanels * NR;
        for (int64_t m = mp; m < me; m += MR) {
          const int64_t mr = me - m < MR ? me - m : MR;
          const float* a = abase + m * P->kd + p0;
          /* the next block this order reads: the pass's next rows, its next depth block's
           * first rows, or the next pass's first */
          const float* pf = m + MR < me ? a + MR * P->kd
                            : !last     ? abase + mp * P->kd + p0 + kc
                            : me < m1   ? abase + me * P->kd
                                        : NULL;
          for (int64_t j = 0; j < npanels; ++j) {
            const int64_t c0 = j * NR;
            const int64_t w = vcols - c0 < NR ? vcols - c0 : NR;
            const int64_t nv = (w + 15) / 16;
            const __mmask16 tail = lane_mask(w - (nv - 1) * 16);
            if (nv == 1 && mr == MR) {
              ukr_8_1(kc, a, P->kd, bp + j * NR * kc, cbase + m * P->ohw + c0, P->ohw, p0 > 0,
                      tail, j == 0 ? pf : NULL);
              continue;
            }
            for (int64_t h = 0; h < mr; h += PR)
              ukr_table[mr - h < PR ? mr - h : PR][nv](
                  kc, a + h * P->kd, P->kd, bp + j * NR * kc, cbase + (m + h) * P->ohw + c0,
                  P->ohw, p0 > 0, tail, j == 0 && pf != NULL ? pf + h * P->kd : NULL);
          }
          for (int64_t j = 0; j < ntail; j += 3) {
            const int64_t t = ntail - j < 3 ? ntail - j : 3;
            dot_table[mr][t](kc, a, P->kd, tb->bt + j * ldbt + p0, ldbt,
                             tb->state + ((m - m0) * TMAX + j) * 16,
                             cbase + m * P->ohw + vcols + j, P->ohw, p0 == 0, last, NULL);
          }
          if (last && ep != NULL) epilogue_rows(P, ep, out, b, grp * P->mg + m, mr, n0, ncols);
        }
      }
    }
    return;
  }

  const int64_t ldbt = (P->kc + 15) & ~(int64_t)15;
  for (int64_t p0 = 0; p0 < P->kd; p0 += P->kc) {
    const int64_t kc = P->kd - p0 < P->kc ? P->kd - p0 : P->kc;
    const int last = p0 + kc == P->kd;
    pack_block(P, img, n0, vcols, npanels, ntail, p0, kc, tb->bp, tb->bt, ldbt);
    /* Panels outermost where a panel's depth block stays in L1 meanwhile (P->panels_outer), over
     * the channels in passes of 128 KB of weights (their rows are often a power of two apart, and
     * all rows in one pass measured slower: docs/kernels.md, conv/f32_packed_avx512.c); otherwise
     * each block of MR channels passes over every panel in turn. The next weight block is fetched
     * on the first panel either way. */
    const int pouter = P->panels_outer && npanels > 1;
    int64_t rows = MR; /* channels a pass (panels outermost inside it) */
    if (pouter) {
      rows = (128 * 1024 / (int64_t)sizeof(float)) / kc / MR * MR;
      if (rows < MR) rows = MR;
    }
    for (int64_t mp = m0; mp < m1; mp += rows) {
      const int64_t me = m1 - mp < rows ? m1 : mp + rows;
      if (pouter)
        for (int64_t j = 0; j + 1 < npanels; ++j)
          for (int64_t m = mp; m < me; m += MR)
            panel_rows(P, tb->bp + j * NR * kc, abase, cbase, m0, m1, m, j, vcols, p0, kc,
                       last);
      /* Each block of MR channels' last panel, tail dot products and epilogue together: the
       * dot products read the weight rows the panel just read (in L1). After the whole tile's
       * passes they came from L2 or memory again: on Zen 5, ViT-B's fc2 (3072 -> 768 over 197
       * tokens) spent 5 % of its time in dot_8_3's weight loads, for 2.5 % of its MACs. */
      for (int64_t m = mp; m < me; m += MR) {
        const int64_t mr = m1 - m < MR ? m1 - m : MR;
        const float* a = abase + m * P->kd + p0;
        for (int64_t j = pouter ? npanels - 1 : 0; j < npanels; ++j)
          panel_rows(P, tb->bp + j * NR * kc, abase, cbase, m0, m1, m, j, vcols, p0, kc, last);
        for (int64_t j = 0; j < ntail; j += 3) {
          const int64_t t = ntail - j < 3 ? ntail - j : 3;
          dot_table[mr][t](kc, a, P->kd, tb->bt + j * ldbt, ldbt,
                           tb->state + ((m - m0) * TMAX + j) * 16,
                           cbase + m * P->ohw + vcols + j, P->ohw, p0 == 0, last,
                           npanels == 0 && j == 0 && m + MR + MR <= m1 ? a + MR * P->kd : NULL);
        }
        if (last && ep != NULL) epilogue_rows(P, ep, out, b, grp * P->mg + m, mr, n0, ncols);
      }
    }
  }
}

typedef struct packed_job {
  const conv_plan* P;
  const float* in;
  const float* weights;
  float* out;
  const sdp_f32* ep;
  const tile_bufs* bufs; /* per participant */
  int64_t ntail, panels_img, ntiles, mchunks, mblocks, pass_rows;
} packed_job;

/* Item it = (image-group, tile, chunk of output channels), chunk innermost. */
static void packed_item(void* ctx, int64_t it, int participant) {
  const packed_job* J = ctx;
  const conv_plan* P = J->P;
  const conv_geometry* g = P->g;
  const int64_t mchunks = J->mchunks, ntiles = J->ntiles, mblocks = J->mblocks;
  const int64_t mc = it % mchunks;
  const int64_t tile = (it / mchunks) % ntiles;
  const int64_t bg = it / (mchunks * ntiles);
  const int64_t b = bg / g->groups, grp = bg % g->groups;
  const int64_t pa = J->panels_img * tile / ntiles, pb = J->panels_img * (tile + 1) / ntiles;
  const int64_t n0 = pa * NR;
  const int64_t n1 = tile == ntiles - 1 ? P->ohw : pb * NR;
  const int64_t m0 = mblocks * mc / mchunks * MR;
  int64_t m1 = mblocks * (mc + 1) / mchunks * MR;
  if (m1 > P->mg) m1 = P->mg;
  gemm_tile(P, J->in, J->weights, J->out, J->ep, b, grp, m0, m1, n0, n1 - n0,
            tile == ntiles - 1 ? J->ntail : 0, &J->bufs[participant], J->pass_rows);
}

/* 1 where the packed path takes the whole depth in one block, the image in one tile: on a host
 * whose L1d does not keep a 48 x CONV_KC_L1 panel (P->panels_outer 0: a 32 KB L1d, AMD Zen 4),
 * a depth above one CONV_KC_MAX block but at most two, whose panels over the whole depth fit in
 * 3/4 of L2 (P->l2, detected): a transformer's 768-deep token GEMMs over 197 tokens. Two depth
 * blocks wrote and read back every output between them, and a wide-output layer's passes (fc1)
 * packed the same panels; one block writes each output once, its epilogue right after
 * (measured: docs/transformer_ops.md, "Zen 4, session 23"). The bits are the same
 * (conv/f32_order.h: the 32-deep blocks start at the same depths). One thread only: with one
 * tile of the image, threads split the channels alone, and that was slower at 2 threads than
 * the depth blocks' tiles (docs/measurements.md, "Session 24: 2 threads"). */
static int whole_depth_block(const conv_plan* P) {
  const int64_t panels = (P->ohw - f32_dot_tail(P->g) + NR - 1) / NR;
  return !P->panels_outer && P->l2 > 0 && P->kd > P->kc && P->kd <= 2 * CONV_KC_MAX &&
         panels * NR * P->kd * (int64_t)sizeof(float) * 4 <= P->l2 * 3;
}

static accel_status conv_packed(const conv_plan* P0, const float* in, const float* weights,
                                float* out, const sdp_f32* ep, workspace* ws, int num_threads) {
  const conv_geometry* g = P0->g;
  const int one_block = num_threads <= 1 && whole_depth_block(P0);
  conv_plan whole = *P0;
  if (one_block) whole.kc = P0->kd;
  const conv_plan* P = &whole;
  /* An image's columns: whole vectors in NR-wide panels, then up to TMAX dot-product columns.
   * Tiles split an image's panels (the last tile takes the tail) so that a depth block of them
   * stays in L2, in a multiple of the thread count when possible; output-channel chunks are
   * added when there are fewer tiles than threads. */
  const int64_t ntail = f32_dot_tail(P->g); /* conv/f32_order.h */
  const int64_t panels_img = (P->ohw - ntail + NR - 1) / NR;
  int64_t max_panels = one_block ? panels_img : (512 * 1024) / (P->kc * NR * 4);
  if (max_panels < 1) max_panels = 1;
  int64_t ntiles = panels_img == 0 ? 1 : (panels_img + max_panels - 1) / max_panels;
  const int64_t outer = (int64_t)g->n * g->groups;
  /* Where the panels stay in L1 and a tile's weights outweigh its inputs (more channels than
   * positions: the 14x14 and 7x7 layers), threads split the channels, not the image: each
   * then streams its part of the weights once, not all of them (ResNet-50 at 2 threads, its
   * 14x14 layers by tiles: 10-20 % slower than with 512-deep blocks) */
  const int split_channels = P->panels_outer && P->mg >= P->ohw;
  while (!split_channels && outer * ntiles % num_threads != 0 && ntiles < panels_img) ++ntiles;
  const int64_t mblocks = (P->mg + MR - 1) / MR;
  int64_t mchunks = 1;
  while (outer * ntiles * mchunks < num_threads && mchunks < mblocks) ++mchunks;
  const int64_t items = outer * ntiles * mchunks;
  const int64_t tile_panels_max = (panels_img + ntiles - 1) / ntiles;
  const int64_t mchunk_max = (mblocks + mchunks - 1) / mchunks * MR;

  /* One panel a tile (a 7x7 image), a few depth blocks, >= 4 MB of weights: each read once, so
   * passes of 16 channels over the whole depth (every block packed first) read each row front to
   * back, not a 512-byte slice of every row per block, which measured faster. A deeper panel (3x3
   * on 7x7, 4608 deep), several (14x14) or smaller weights (MobileNet-v2's 7x7 layers) measured
   * slower (docs/kernels.md, conv/f32_packed_avx512.c). */
  /* On any L1d (panels outermost or not), the same where a tile's panels over the whole
   * depth fit in 3/4 of L2 (P->l2, detected; 768 KB of Zen 4's 1 MB) but its outputs do not
   * (a transformer's wide dense layers, ViT-B's fc1 over 197 tokens): a pass's running totals
   * then stay in cache across the depth blocks instead of every output being read and written
   * again per block, which measured 5-6 % faster there (docs/transformer_ops.md, "The matrix
   * products alone"). An unknown L2 (0) keeps the depth blocks outermost. */
  const int wide_outputs =
      P->l2 > 0 && tile_panels_max * NR * P->kd * (int64_t)sizeof(float) * 4 <= P->l2 * 3 &&
      P->mg * tile_panels_max * NR * (int64_t)sizeof(float) >= P->l2;
  /* Zen 5 (a 48 KB L1d, panels outermost in 128-deep blocks) measured the wide-output tiles the
   * same way: ViT-B's fc1 768 -> 3072 and the 768 -> 2304 shape over 197 tokens 92-95 -> 116-118
   * GMAC/s by the passes (the depth blocks outermost read and wrote their 2.4 MB of outputs from
   * L3 per 128-deep block), the bits the same (docs/kernels.md, conv/f32_*.c). */
  const int64_t pass_rows = P->kd > P->kc && ((P->panels_outer && tile_panels_max == 1 &&
                                               P->kd <= 2048 && P->mg * P->kd >= (1 << 20)) ||
                                              wide_outputs)
                                ? 16
                                : 0;
  const int64_t depth = pass_rows > 0 ? P->kd : P->kc; /* packed at once */
  const size_t bp_bytes = round64((size_t)(tile_panels_max * NR * depth) * sizeof(float));
  const size_t bt_bytes = round64((size_t)(TMAX * ((depth + 15) & ~(int64_t)15)) * sizeof(float));
  const size_t st_bytes = round64((size_t)(mchunk_max * TMAX * 16) * sizeof(float));
  const int nth = (int)(items < num_threads ? items : num_threads);
  tile_bufs bufs[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    char* base = workspace_get(ws, t, bp_bytes + bt_bytes + st_bytes);
    if (base == NULL) return ACCEL_ERR_NO_MEMORY;
    bufs[t].bp = (float*)base;
    bufs[t].bt = (float*)(base + bp_bytes);
    bufs[t].state = (float*)(base + bp_bytes + bt_bytes);
  }

  packed_job J = {.P = P, .in = in, .weights = weights, .out = out, .ep = ep, .bufs = bufs,
                  .ntail = ntail, .panels_img = panels_img, .ntiles = ntiles, .mchunks = mchunks,
                  .mblocks = mblocks, .pass_rows = pass_rows};
  pool_for(nth, items, packed_item, &J);
  return ACCEL_OK;
}


static int packed_applies(const conv_f32_call* c) {
  (void)c;
  return 1;
}

/* Every geometry but a batch of fully connected rows (fc_blas's) and depthwise ones (whose
 * taps conv/f32_order.h sums in order, not in 32-deep blocks: the dw kernels'). */
static int packed_supports(const conv_f32_call* c) {
  return c->P->cg > 1 && !(c->P->ohw == 1 && c->P->g->n > 1);
}

static accel_status packed_run(const conv_f32_call* c) {
  return conv_packed(c->P, c->in, c->weights, c->out, c->ep, c->ws, c->nth);
}

static int packed_dot_tail(const conv_plan* P) { return f32_dot_tail(P->g); }

const conv_f32_impl conv_f32_packed_avx512_impl = {.name = "packed_avx512",
                                                   .applies = packed_applies,
                                                   .supports = packed_supports, .run = packed_run,
                                                   .dot_tail = packed_dot_tail};
#endif /* __AVX512F__ */
