/* winograd_avx2.c - the Winograd mode's steps 2-4 (winograd.c) with 8-lane vectors: the path
 * of builds without AVX-512 (x86-64-v3). The MAC-array GEMM replaced a scalar fmaf loop that
 * made ResNet-50's 3x3 layers the x86-64-v3 build's slowest part, the input and output
 * transforms scalar loops; the GEMM now runs one xi at a time over every kernel of an item from
 * a packed panel of tiles (wino_gemm_xi_avx2; the costs then and now: docs/winograd.md). Every
 * M element is the
 * same fused multiply-add chain over the channels from 0 up, starting from 0, and every
 * transform the same additions in the same order, as winograd.c's other paths compute them:
 * the same bits; only the tiles are taken 8 at a time.
 */
#include "winograd.h"

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#include <immintrin.h>

static inline __m256i lanes_below(int64_t n) {
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)(n < 0 ? 0 : n > 8 ? 8 : n)), iota);
}

/* The even (*e) and odd (*o) elements of the 16 floats at p: elements 0, 2, .. 14 and 1, .. 15
 * (shuffles pair them within 128-bit halves, the 64-bit permute puts the halves in order). */
static inline void deinterleave(const float* p, __m256* e, __m256* o) {
  const __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
  *e = _mm256_castpd_ps(_mm256_permute4x64_pd(
      _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))), 0xD8));
  *o = _mm256_castpd_ps(_mm256_permute4x64_pd(
      _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))), 0xD8));
}

void wino_input_row_avx2(const float* rows, int64_t sw, int64_t tw, int half, float* dst,
                         int64_t xstride) {
  for (int64_t tx0 = 0; tx0 < tw; tx0 += 8) {
    const int64_t n = tw - tx0 < 8 ? tw - tx0 : 8;
    const __m256i mask = lanes_below(n);
    __m256 d[4][4], t[4][4];
    for (int i = 0; i < 4; ++i) { /* tile tx's window columns 2 tx .. 2 tx + 3 of row i */
      const float* p = rows + i * sw + 2 * tx0;
      deinterleave(p, &d[i][0], &d[i][1]);
      deinterleave(p + 2, &d[i][2], &d[i][3]);
    }
    for (int j = 0; j < 4; ++j) {
      t[0][j] = _mm256_sub_ps(d[0][j], d[2][j]);
      t[1][j] = _mm256_add_ps(d[1][j], d[2][j]);
      t[2][j] = _mm256_sub_ps(d[2][j], d[1][j]);
      t[3][j] = _mm256_sub_ps(d[1][j], d[3][j]);
    }
    for (int i = 0; i < 4; ++i) {
      const __m256 v[4] = {_mm256_sub_ps(t[i][0], t[i][2]), _mm256_add_ps(t[i][1], t[i][2]),
                           _mm256_sub_ps(t[i][2], t[i][1]), _mm256_sub_ps(t[i][1], t[i][3])};
      for (int j = 0; j < 4; ++j) {
        float* q = dst + (i * 4 + j) * xstride + tx0;
        if (n == 8) {
          _mm256_storeu_ps(q, v[j]);
        } else {
          _mm256_maskstore_ps(q, mask, v[j]);
        }
        if (half) round_to_half(q, n);
      }
    }
  }
}

void wino_output_row_avx2(const float* M, int64_t xstride, int64_t tw, int prows, float* dst,
                          int64_t ow) {
  for (int64_t tx0 = 0; tx0 < tw; tx0 += 8) {
    const int64_t n = tw - tx0 < 8 ? tw - tx0 : 8;
    const __m256i mask = lanes_below(n);
    __m256 m[16], o[2][4];
    for (int xi = 0; xi < 16; ++xi)
      m[xi] = n == 8 ? _mm256_loadu_ps(M + xi * xstride + tx0)
                     : _mm256_maskload_ps(M + xi * xstride + tx0, mask);
    for (int j = 0; j < 4; ++j) {
      o[0][j] = _mm256_add_ps(_mm256_add_ps(m[j], m[4 + j]), m[8 + j]);
      o[1][j] = _mm256_sub_ps(_mm256_sub_ps(m[4 + j], m[8 + j]), m[12 + j]);
    }
    const int64_t cols = ow - 2 * tx0 < 16 ? ow - 2 * tx0 : 16;
    for (int p = 0; p < prows; ++p) {
      const __m256 y0 = _mm256_add_ps(_mm256_add_ps(o[p][0], o[p][1]), o[p][2]);
      const __m256 y1 = _mm256_sub_ps(_mm256_sub_ps(o[p][1], o[p][2]), o[p][3]);
      /* columns 2 tx, 2 tx + 1 of the tiles side by side */
      const __m256 lo = _mm256_unpacklo_ps(y0, y1), hi = _mm256_unpackhi_ps(y0, y1);
      const __m256 c0 = _mm256_permute2f128_ps(lo, hi, 0x20);
      const __m256 c1 = _mm256_permute2f128_ps(lo, hi, 0x31);
      float* q = dst + p * ow + 2 * tx0;
      if (cols == 16) {
        _mm256_storeu_ps(q, c0);
        _mm256_storeu_ps(q + 8, c1);
      } else {
        _mm256_maskstore_ps(q, lanes_below(cols), c0);
        _mm256_maskstore_ps(q + 8, lanes_below(cols - 8), c1);
      }
    }
  }
}

/* The accumulators are named variables: in an array gcc stored all 12 to the stack after every
 * channel's FMAs (twice the instructions of the FMAs themselves). */
#define WP_ROWS(X) X(0) X(1) X(2) X(3)
#define WP_ACC(r) __m256 a##r##0 = _mm256_setzero_ps(), a##r##1 = a##r##0, a##r##2 = a##r##0;

/* NR_ (<= 4) rows of one xi's M (ldm apart) over the NV_ vectors of tiles of a packed panel b
 * ([CF][AN]): each the FMA chain over the channels from 0, starting from 0. */
enum { AN = 24 }; /* tiles of a packed panel */
#define XP_FMA(r)                                                          \
  if (NR_ > r) {                                                           \
    const __m256 w = _mm256_broadcast_ss(u + r);                           \
    a##r##0 = _mm256_fmadd_ps(w, x0, a##r##0);                             \
    if (NV_ > 1) a##r##1 = _mm256_fmadd_ps(w, x1, a##r##1);                \
    if (NV_ > 2) a##r##2 = _mm256_fmadd_ps(w, x2, a##r##2);                \
  }
#define XP_STORE(r)                                                              \
  if (NR_ > r) {                                                                 \
    float* m = M + r * ldm;                                                      \
    _mm256_storeu_ps(m, a##r##0);                                                \
    if (NV_ > 1) _mm256_storeu_ps(m + 8, a##r##1);                               \
    if (NV_ > 2) _mm256_storeu_ps(m + 16, a##r##2);                              \
  }
static inline __attribute__((always_inline)) void xi_panel(const int NR_, const int NV_,
                                                           const float* u, const float* b,
                                                           int64_t CF, float* M, int64_t ldm) {
  WP_ROWS(WP_ACC)
  _Pragma("GCC unroll 4")
  for (int64_t c = 0; c < CF; ++c, b += AN, u += KB) {
    const __m256 x0 = _mm256_load_ps(b);
    const __m256 x1 = NV_ > 1 ? _mm256_load_ps(b + 8) : x0;
    const __m256 x2 = NV_ > 2 ? _mm256_load_ps(b + 16) : x0;
    WP_ROWS(XP_FMA)
  }
  WP_ROWS(XP_STORE)
}
typedef void (*xi_fn)(const float*, const float*, int64_t, float*, int64_t);
#define XI_PANEL(R_, V_)                                                                   \
  static void xi_panel_##R_##_##V_(const float* u, const float* b, int64_t CF, float* M,    \
                                   int64_t ldm) {                                          \
    xi_panel(R_, V_, u, b, CF, M, ldm);                                                    \
  }
XI_PANEL(4, 1) XI_PANEL(4, 2) XI_PANEL(4, 3) XI_PANEL(1, 1) XI_PANEL(1, 2) XI_PANEL(1, 3)
static const xi_fn xi_table[2][4] = {{0, xi_panel_1_1, xi_panel_1_2, xi_panel_1_3},
                                     {0, xi_panel_4_1, xi_panel_4_2, xi_panel_4_3}};

void wino_gemm_xi_avx2(const float* U, const float* V, int64_t CF, int64_t ntp, int64_t nt,
                       float* M, int64_t nk, float* panel) {
  for (int64_t t = 0; t < nt; t += AN) {
    const int64_t w = nt - t < AN ? nt - t : AN; /* a multiple of 8 */
    const int nv = (int)(w / 8);
    for (int64_t c = 0; c < CF; ++c) /* the panel's channel rows side by side: one stream */
      for (int j = 0; j < nv; ++j)
        _mm256_store_ps(panel + c * AN + 8 * j, _mm256_loadu_ps(V + c * ntp + t + 8 * j));
    for (int64_t k = 0; k < nk;) {
      const float* u = U + (k / KB) * CF * KB + k % KB;
      if (nk - k >= 4 && k % KB <= KB - 4) {
        xi_table[1][nv](u, panel, CF, M + k * ntp + t, ntp);
        k += 4;
      } else {
        xi_table[0][nv](u, panel, CF, M + k * ntp + t, ntp);
        k += 1;
      }
    }
  }
}
#endif
