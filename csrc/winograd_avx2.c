/* winograd_avx2.c - the Winograd mode's MAC-array GEMM (winograd.c, step 3) with 8-lane FMAs:
 * the path of builds without AVX-512 (x86-64-v3), whose scalar fmaf loop made ResNet-50's 3x3
 * layers the x86-64-v3 build's slowest part. Every M element is the same fused multiply-add
 * chain over the channels from 0 up, starting from 0, as winograd.c's other paths compute it:
 * the same bits; only the tiles are taken 8 at a time.
 */
#include "winograd.h"

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#include <immintrin.h>

/* Rows r0 .. r0 + NR_ - 1 (NR_ <= 4) of M over the tiles t .. t + 8 * NV_ - 1. */
static inline __attribute__((always_inline)) void wino_panel(const int NR_, const int NV_,
                                                             const float* U, const float* V,
                                                             int64_t CF, int64_t ntp, int64_t t,
                                                             int r0, float* M) {
  __m256 acc[4][3];
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < 3; ++j) acc[r][j] = _mm256_setzero_ps();
  const float* v = V + t;
  const float* u = U + r0;
  for (int64_t c = 0; c < CF; ++c, v += ntp, u += KB) {
    __m256 x[3];
    for (int j = 0; j < NV_; ++j) x[j] = _mm256_loadu_ps(v + 8 * j);
    for (int r = 0; r < NR_; ++r) {
      const __m256 w = _mm256_broadcast_ss(u + r);
      for (int j = 0; j < NV_; ++j) acc[r][j] = _mm256_fmadd_ps(w, x[j], acc[r][j]);
    }
  }
  for (int r = 0; r < NR_; ++r)
    for (int j = 0; j < NV_; ++j) _mm256_storeu_ps(M + (r0 + r) * ntp + t + 8 * j, acc[r][j]);
}

#define WINO_PANEL(R_, V_)                                                                  \
  static void wino_panel_##R_##_##V_(const float* U, const float* V, int64_t CF, int64_t ntp, \
                                     int64_t t, int r0, float* M) {                          \
    wino_panel(R_, V_, U, V, CF, ntp, t, r0, M);                                             \
  }
WINO_PANEL(4, 3) WINO_PANEL(4, 1) WINO_PANEL(1, 3) WINO_PANEL(1, 1)

void wino_gemm_avx2(const float* U, const float* V, int64_t CF, int64_t ntp, int64_t nt16,
                    float* M, int nk) {
  int r = 0;
  for (; r + 4 <= nk; r += 4) {
    int64_t t = 0;
    for (; t + 24 <= nt16; t += 24) wino_panel_4_3(U, V, CF, ntp, t, r, M);
    for (; t < nt16; t += 8) wino_panel_4_1(U, V, CF, ntp, t, r, M);
  }
  for (; r < nk; ++r) {
    int64_t t = 0;
    for (; t + 24 <= nt16; t += 24) wino_panel_1_3(U, V, CF, ntp, t, r, M);
    for (; t < nt16; t += 8) wino_panel_1_1(U, V, CF, ntp, t, r, M);
  }
}
#endif
