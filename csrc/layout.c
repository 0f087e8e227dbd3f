/* layout.c - fp32 activations between NCHW and C16 ([n][c/16][hw][16]), exact copies.
 *
 * One pool_for item per (image, 16-channel block): its 16 planes of hw elements on one side,
 * its hw * 16 contiguous elements on the other. Runs of 16 positions go through a 16 x 16
 * transpose in registers (16 loads, 64 shuffles, 16 stores); the last hw % 16 positions are
 * copied one element at a time. Shuffles move bits: -0.0, NaN payloads and denormals stay. */
#include "kernels.h"

#ifdef __AVX512F__
#include <immintrin.h>
#endif

typedef struct layout_job {
  int64_t c, hw;
  const float* in;
  float* out;
} layout_job;

#ifdef __AVX512F__
/* r[i] = row i of a 16 x 16 block -> r[j] = column j. */
static inline __attribute__((always_inline)) void transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(u[i], u[4 + i], 0x88);
    t[4 + i] = _mm512_shuffle_f32x4(u[i], u[4 + i], 0xdd);
    t[8 + i] = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0x88);
    t[12 + i] = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0xdd);
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
    r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
  }
}
#endif

/* Item: image item / (c / 16), channel block item % (c / 16). */
static void to_item(void* ctx, int64_t item, int participant) {
  const layout_job* J = ctx;
  (void)participant;
  const int64_t hw = J->hw;
  const float* src = J->in + item * 16 * hw; /* [16][hw]: same offset in both layouts */
  float* dst = J->out + item * 16 * hw;      /* [hw][16] */
  int64_t p = 0;
#ifdef __AVX512F__
  for (; p + 16 <= hw; p += 16) {
    __m512 r[16];
#pragma GCC unroll 16
    for (int l = 0; l < 16; ++l) r[l] = _mm512_loadu_ps(src + l * hw + p);
    transpose16(r);
#pragma GCC unroll 16
    for (int q = 0; q < 16; ++q) _mm512_storeu_ps(dst + (p + q) * 16, r[q]);
  }
#endif
  for (; p < hw; ++p)
    for (int l = 0; l < 16; ++l) dst[p * 16 + l] = src[l * hw + p];
}

static void from_item(void* ctx, int64_t item, int participant) {
  const layout_job* J = ctx;
  (void)participant;
  const int64_t hw = J->hw;
  const float* src = J->in + item * 16 * hw; /* [hw][16] */
  float* dst = J->out + item * 16 * hw;      /* [16][hw] */
  int64_t p = 0;
#ifdef __AVX512F__
  for (; p + 16 <= hw; p += 16) {
    __m512 r[16];
#pragma GCC unroll 16
    for (int q = 0; q < 16; ++q) r[q] = _mm512_loadu_ps(src + (p + q) * 16);
    transpose16(r);
#pragma GCC unroll 16
    for (int l = 0; l < 16; ++l) _mm512_storeu_ps(dst + l * hw + p, r[l]);
  }
#endif
  for (; p < hw; ++p)
    for (int l = 0; l < 16; ++l) dst[l * hw + p] = src[p * 16 + l];
}

static void layout_run(int64_t n, int64_t c, int64_t hw, const float* in, float* out,
                       int32_t num_threads, pool_fn fn) {
  const int64_t items = n * (c / 16);
  if (items <= 0 || hw <= 0) return;
  int nth = num_threads < 1 ? 1 : num_threads;
  if (nth > WS_THREAD_SLOTS) nth = WS_THREAD_SLOTS;
  if (nth > items) nth = (int)items;
  if (items * 16 * hw < 32768) nth = 1; /* under 128 KiB: not worth waking a worker */
  layout_job J = {c, hw, in, out};
  pool_for(nth, items, fn, &J);
}

void layout_to_c16(int64_t n, int64_t c, int64_t hw, const float* in, float* out,
                   int32_t num_threads) {
  layout_run(n, c, hw, in, out, num_threads, to_item);
}

void layout_from_c16(int64_t n, int64_t c, int64_t hw, const float* in, float* out,
                     int32_t num_threads) {
  layout_run(n, c, hw, in, out, num_threads, from_item);
}
