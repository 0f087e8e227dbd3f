/* conv/f32_dw_rows_avx2.c - FP32 depthwise 3x3 and 5x5 CONV by output rows, no copy, with
 * 8-lane FMAs (impl "dw_rows_avx2"): x86-64-v3 builds' depthwise path for MobileNets' and
 * EfficientNets' kernels, in conv/f32_order.h's depthwise order (taps r * kw + s in order, one
 * FMA each from zero, the padding's zeros included), so it gives dw_avx2's and the AVX-512
 * kernels' bits.
 *
 * dw_avx2 copies every input plane padded and split into its stride phases, computes a grid of
 * out_h x (out_w + kw - 1) positions, copies the grid's rows out and then runs the epilogue: on
 * MobileNetV2's 7x7 and 14x14 planes that per-channel work was most of the layer's time
 * (docs/kernels.md). Here blocks of R output rows read the input rows in place: each input row
 * is loaded once per step and feeds every output row of the block that reads it; stride 2
 * takes the even and odd columns of two loads, each accumulator's lanes in the order those
 * loads' in-lane shuffle leaves them (outputs 0, 1, 4, 5, 2, 3, 6, 7: one vshufps per tap), put
 * in order once before the store. R rows x V vectors = 8 accumulators (two FMA
 * units of 4 cycles' latency want 8 chains): 4 rows of 2 vectors, or 8 rows of one vector
 * where a row is one vector. A row's last step ends at the row's end (overlapping the step
 * before) so that all its lanes are outputs. Steps across the plane's left or right edge read
 * each tap's vector masked (rows of one vector: the row's vectors, the taps' columns shifted out
 * of them; dr2_step); padding rows read zeros. The next block's rows are
 * prefetched, and the epilogue runs on finished rows while they are in L1.
 */
#include "conv/f32.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

/* What a step reads for a padding row: its widest reach, 16 * 2 + 4 columns (an edge step's
 * masked loads up to 16 + 4 + 8 + 8). */
static const float dr2_zeros[40] __attribute__((aligned(32)));

/* Lanes s .. s + 7 of a:b (s a constant, 0..7): one permute and one byte shift (literal
 * immediates: an unoptimised build does not fold s into them). */
#define DR2_ALIGNR(hi, lo, bytes) \
  _mm256_castsi256_ps(_mm256_alignr_epi8(_mm256_castps_si256(hi), _mm256_castps_si256(lo), bytes))
static inline __m256 dr2_shift(__m256 a, __m256 b, const int s) {
  const __m256 t = _mm256_permute2f128_ps(a, b, 0x21); /* lanes 4 .. 11 */
  switch (s) {
    case 0: return a;
    case 1: return DR2_ALIGNR(t, a, 4);
    case 2: return DR2_ALIGNR(t, a, 8);
    case 3: return DR2_ALIGNR(t, a, 12);
    case 4: return t;
    case 5: return DR2_ALIGNR(b, t, 4);
    case 6: return DR2_ALIGNR(b, t, 8);
    default: return DR2_ALIGNR(b, t, 12);
  }
}

enum { DR2_ACC = 8 };  /* accumulators: R rows x V vectors */
enum { DR2_ROWS = 19 }; /* input rows of a step, at most: (8 - 1) * 2 + 5 */
enum { DR2_MASKS = 12 }; /* an edge step's column masks, at most: V (K + 1) at stride 2 */
enum { DR2_VECS1 = 3 };  /* vectors of a one-vector row's edge step, at most: (16 + 4) / 8 */

/* The column masks of an edge step whose lane 0, tap 0 reads input column base of rows W wide:
 * lanes inside the row, per load of dr2_step (rows of 2 vectors: stride 1, vector v, tap s at
 * v * K + s; stride 2, the pair of even tap s at v * (K + 1) + s and + 1; rows of one vector:
 * the row's vector q at q). */
static inline __attribute__((always_inline)) void dr2_masks(const int K, const int ST,
                                                            const int V, int64_t base,
                                                            int64_t W, __m256i* cm) {
  if (V == 1) {
#pragma GCC unroll 5
    for (int q = 0; q < DR2_VECS1; ++q) cm[q] = lanes_inside8(base + 8 * q, W);
    return;
  }
#pragma GCC unroll 2
  for (int v = 0; v < V; ++v)
#pragma GCC unroll 8
    for (int s = 0; s < K; ++s) {
      if (ST == 1) {
        cm[v * K + s] = lanes_inside8(base + 8 * v + s, W);
      } else if ((s & 1) == 0) {
        cm[v * (K + 1) + s] = lanes_inside8(base + 16 * v + s, W);
        cm[v * (K + 1) + s + 1] = lanes_inside8(base + 16 * v + s + 8, W);
      }
    }
}

/* Stride 2's columns s, s + 2, .., s + 14 of a tap as the in-lane shuffle of two loads leaves
 * them: outputs 0, 1, 4, 5 | 2, 3, 6, 7 (dr2_in_order puts a sum in order). Every tap of an
 * accumulator comes in the same order, so each lane sums one output's taps in order, the
 * same bits as in order; only the accumulator is permuted, once, instead of every tap (the
 * vpermpd was half the stride-2 step's shuffles). */
static inline __m256 dr2_even(__m256 lo, __m256 hi) {
  return _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
}
static inline __m256 dr2_odd(__m256 lo, __m256 hi) {
  return _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
}
/* The even columns s .. s + 14 from loads at s (a) and s + 7 (b), in dr2_even's order: the
 * last even tap's, whose 16-column pair would read one column (s + 15) that no output uses,
 * past the row's end on the plane's last step. */
static inline __m256 dr2_even_last(__m256 a, __m256 b) {
  return _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 2, 0));
}
static inline __m256 dr2_in_order(__m256 v) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), _MM_SHUFFLE(3, 1, 2, 0)));
}

/* One step: R output rows x V vectors of a K x K kernel at stride ST, no dilation
 * (compile-time constants: the loops unroll, the accumulators stay in registers), from input
 * rows x[0], x[1], ... (each at the step's first column: tap (0, 0) of its first output; NULL:
 * a padding row, zeros). Output j, lane l of vector v sums taps t = r * K + s in order, by one
 * FMA each from zero, of w[t] times x[j * ST + r][(8v + l) * ST + s]: input rows ascending, and
 * within a row s ascending, is each accumulator's r * K + s order.
 * EDGE: the step's columns cross the plane's left or right edge. Each tap's vector is then a
 * vmaskmovps load masked by cm (dr2_masks: zeros outside the plane, no read outside it), where
 * rows of 2 vectors loaded the row's vectors masked once and shifted each tap's columns out of
 * them (vperm2f128 + vpalignr: two shuffles a tap and vector beside the FMA), as rows of one
 * vector still do; a first version copied the window to the stack (its loads waited on store
 * forwarding). On MobileNetV2's 14x14 and 28x28 planes every step is an edge step.
 * Stored: rows below nr, columns below n (rows o, o + ldo, ...). */
static inline __attribute__((always_inline)) void dr2_step(const int K, const int ST, const int R,
                                                           const int V, const int EDGE,
                                                           const float* const* x,
                                                           const __m256i* cm, const float* w,
                                                           float* o, int64_t ldo, int64_t nr,
                                                           int64_t n) {
  const int ni = (R - 1) * ST + K; /* input rows R output rows read */
  __m256 acc[DR2_ACC];
#pragma GCC unroll 8
  for (int a = 0; a < R * V; ++a) acc[a] = _mm256_setzero_ps();
#pragma GCC unroll 24
  for (int i = 0; i < ni; ++i) {
    const float* row = x[i];
    /* rows of one vector: the row's vectors loaded masked once (a padding row: zeros, no
     * load), each tap's columns shifted out of them (dr2_shift): a masked load per tap was
     * slower there, on 5x5 layers of 7x7 planes (docs/kernels.md) */
    const int nq = ST == 1 ? (8 + K - 1 + 7) / 8 : (16 + 2 * ((K - 1) / 2) + 7) / 8;
    __m256 e[DR2_VECS1];
    if (EDGE && V == 1) {
#pragma GCC unroll 3
      for (int q = 0; q < nq; ++q)
        e[q] = row != NULL ? _mm256_maskload_ps(row + 8 * q, cm[q]) : _mm256_setzero_ps();
    }
    if (row == NULL) row = dr2_zeros;
    __m256 lo[2], hi[2]; /* stride 2: the 16 columns of a pair of taps */
#pragma GCC unroll 8
    for (int s = 0; s < K; ++s) {
      __m256 xv[2];
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) {
        if (ST == 1) { /* columns 8v + s + l */
          xv[v] = !EDGE  ? _mm256_loadu_ps(row + 8 * v + s)
                  : V == 1 ? dr2_shift(e[0], e[1], s)
                           : _mm256_maskload_ps(row + 8 * v + s, cm[v * K + s]);
        } else { /* columns 16v + s + 2l: taps 2q and 2q + 1 are the even and odd columns of the
                  * same 16 */
          if ((s & 1) == 0) {
            if (EDGE && V == 1) {
              lo[v] = dr2_shift(e[0], e[1], s);
              hi[v] = dr2_shift(e[1], e[2], s);
            } else if (EDGE) {
              lo[v] = _mm256_maskload_ps(row + 16 * v + s, cm[v * (K + 1) + s]);
              hi[v] = _mm256_maskload_ps(row + 16 * v + s + 8, cm[v * (K + 1) + s + 1]);
            } else if (s == K - 1) { /* columns s .. s + 14 only: dr2_even_last */
              lo[v] = _mm256_loadu_ps(row + 16 * v + s);
              hi[v] = _mm256_loadu_ps(row + 16 * v + s + 7);
            } else {
              lo[v] = _mm256_loadu_ps(row + 16 * v + s);
              hi[v] = _mm256_loadu_ps(row + 16 * v + s + 8);
            }
          }
          xv[v] = (s & 1)                   ? dr2_odd(lo[v], hi[v])
                  : (!EDGE && s == K - 1) ? dr2_even_last(lo[v], hi[v])
                                          : dr2_even(lo[v], hi[v]);
        }
      }
#pragma GCC unroll 8
      for (int j = 0; j < R; ++j) {
        const int r = i - j * ST;
        if (r >= 0 && r < K) {
          const __m256 wv = _mm256_broadcast_ss(w + r * K + s);
#pragma GCC unroll 2
          for (int v = 0; v < V; ++v)
            acc[j * V + v] = _mm256_fmadd_ps(wv, xv[v], acc[j * V + v]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < R; ++j)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) {
      const int64_t left = n - 8 * v;
      float* p = o + j * ldo + 8 * v;
      if (j >= nr || left <= 0) continue;
      const __m256 t = ST == 2 ? dr2_in_order(acc[j * V + v]) : acc[j * V + v];
      if (left >= 8)
        _mm256_storeu_ps(p, t);
      else
        f32x8_store_first(p, t, left);
    }
}

/* Output plane (offset `at` of out) of channel ch from input plane src and its taps w: blocks
 * of R rows, steps of V vectors, the rows read in place (padding rows as zeros). The epilogue
 * runs on finished rows while they are in L1. */
static inline __attribute__((always_inline)) void dr2_body(const int K, const int ST, const int R,
                                                           const int V, const conv_plan* P,
                                                           const float* src, const float* w,
                                                           float* out, int64_t at,
                                                           const sdp_f32* ep, int64_t ch) {
  const conv_geometry* g = P->g;
  const int64_t H = g->h, W = g->w, oh = g->out_h, ow = g->out_w;
  const int ni = (R - 1) * ST + K;
  /* columns a step's outputs read: 8V + K - 1 at stride 1; 2 (8V - 1) + K at stride 2 (an
   * edge step's masked loads reach one column further, masked) */
  const int64_t reach = ST == 1 ? 8 * V + K - 1 : 16 * V + K - 2;
  const float* rows[DR2_ROWS];
  __m256i cm[DR2_MASKS];
  float* dst = out + at;
  int64_t ep_row = 0; /* first row the epilogue has not seen */
  for (int64_t y0 = 0; y0 < oh; y0 += R) {
    const int64_t nr = oh - y0 < R ? oh - y0 : R;
    const int64_t iy0 = y0 * ST - g->pad_top;
    for (int64_t xs = 0; xs < ow; xs += 8 * V) {
      /* the last step of a row at least one step wide ends at the row's end, overlapping the
       * step before (its outputs computed again, the same sums): all its lanes are outputs,
       * and at stride 2 it reads no column past the row's last, so it takes the in-place form
       * where it would have crossed the plane's edge for columns no output keeps */
      const int64_t x0 = xs + 8 * V > ow && ow >= 8 * V ? ow - 8 * V : xs;
      const int64_t base = x0 * ST - g->pad_left; /* input column of lane 0, tap s = 0 */
      for (int i = 0; i < ni; ++i) {
        const int64_t iy = iy0 + i;
        rows[i] = iy >= 0 && iy < H ? src + iy * W + base : NULL;
      }
      /* the rows the next block reads first, at these columns, on their way to L1 meanwhile:
       * a plane larger than the L1 comes from L2 or memory, and its rows, read a block at a
       * time, are streams the hardware prefetchers follow badly (MobileNetV2's stride-2 layer
       * on 112x112 planes was 1.5x slower than the copy without) */
      for (int64_t iy = iy0 + ni > 0 ? iy0 + ni : 0; iy < iy0 + ni + R * ST && iy < H; ++iy)
        for (int64_t c = 0; c < reach; c += 16)
          _mm_prefetch((const char*)(src + iy * W + base + c), _MM_HINT_T0);
      float* o = dst + y0 * ow + x0;
      if (base >= 0 && base + reach <= W) {
        dr2_step(K, ST, R, V, 0, rows, cm, w, o, ow, nr, ow - x0);
      } else {
        dr2_masks(K, ST, V, base, W, cm);
        dr2_step(K, ST, R, V, 1, rows, cm, w, o, ow, nr, ow - x0);
      }
    }
    const int64_t done = y0 + nr;
    if (ep != NULL && ((done - ep_row) * ow >= 1024 || done == oh)) {
      epilogue_span(ep, ch, out, at + ep_row * ow, (done - ep_row) * ow);
      ep_row = done;
    }
  }
}

#define DR2(K_, ST_, R_, V_)                                                                  \
  static void dr2_##K_##_##ST_##_##R_(const conv_plan* P, const float* src, const float* w,   \
                                      float* out, int64_t at, const sdp_f32* ep, int64_t ch) { \
    dr2_body(K_, ST_, R_, V_, P, src, w, out, at, ep, ch);                                    \
  }
DR2(3, 1, 4, 2) DR2(3, 2, 4, 2) DR2(5, 1, 4, 2) DR2(5, 2, 4, 2)
DR2(3, 1, 8, 1) DR2(3, 2, 8, 1) DR2(5, 1, 8, 1) DR2(5, 2, 8, 1)

/* The row kernel for this geometry, or NULL: square 3x3 and 5x5 kernels, strides 1 and 2 in
 * both directions, no dilation; the rest take dw_avx2's copy. */
static f32_dw_plane_fn dr2_kernel(const conv_plan* P) {
  const conv_geometry* g = P->g;
  if (g->kernel_h != g->kernel_w || g->stride_h != g->stride_w || g->dilation_h != 1 ||
      g->dilation_w != 1)
    return NULL;
  const int one = g->out_w <= 8; /* a row is one vector: 8 rows keep 8 chains */
  const int k = g->kernel_h, st = g->stride_h;
  if (k == 3 && st == 1) return one ? dr2_3_1_8 : dr2_3_1_4;
  if (k == 3 && st == 2) return one ? dr2_3_2_8 : dr2_3_2_4;
  if (k == 5 && st == 1) return one ? dr2_5_1_8 : dr2_5_1_4;
  if (k == 5 && st == 2) return one ? dr2_5_2_8 : dr2_5_2_4;
  return NULL;
}

static int dr2_applies(const conv_f32_call* c) {
  return c->P->cg == 1 && dr2_kernel(c->P) != NULL;
}

static accel_status dr2_run(const conv_f32_call* c) {
  return f32_dw_planes_run(c, dr2_kernel(c->P));
}

const conv_f32_impl conv_f32_dw_rows_avx2_impl = {.name = "dw_rows_avx2", .applies = dr2_applies,
                                                  .supports = NULL, .run = dr2_run,
                                                  .dot_tail = NULL};
#endif /* __AVX2__ && __FMA__ */
