/* layout.c - fp32 activations between NCHW and C16 ([n][c/16][hw][16]), exact copies.
 *
 * One pool_for item per (image, 16-channel block): its 16 planes of hw elements on one side,
 * its hw * 16 contiguous elements on the other. Runs of 16 positions go through a 16 x 16
 * transpose in registers (16 loads, 64 shuffles, 16 stores); the last hw % 16 positions are
 * copied one element at a time. Shuffles move bits: -0.0, NaN payloads and denormals stay.
 * layout_from_c16_phase converts only the (even, even) positions (a 1x1 stride-2 conv's
 * input, device.c's phase_conv) the same way. */
#include "kernels.h"

typedef struct layout_job {
  int64_t c, hw; /* hw: an output plane's positions */
  const float* in;
  float* out;
  int64_t in_hw, in_w, ow; /* layout_from_c16_phase: the input plane and width, output width */
} layout_job;

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
    transpose_16x16(r);
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
    transpose_16x16(r);
#pragma GCC unroll 16
    for (int l = 0; l < 16; ++l) _mm512_storeu_ps(dst + l * hw + p, r[l]);
  }
#endif
  for (; p < hw; ++p)
    for (int l = 0; l < 16; ++l) dst[l * hw + p] = src[p * 16 + l];
}

/* from_item over the (even, even) positions of the input plane only: output position p is
 * input position (2 * (p / ow), 2 * (p % ow)). */
static void from_phase_item(void* ctx, int64_t item, int participant) {
  const layout_job* J = ctx;
  (void)participant;
  const int64_t hw = J->hw, ow = J->ow, w = J->in_w;
  const float* src = J->in + item * 16 * J->in_hw; /* [in_hw][16] */
  float* dst = J->out + item * 16 * hw;            /* [16][hw] */
  int64_t p = 0;
#ifdef __AVX512F__
  for (; p + 16 <= hw; p += 16) {
    __m512 r[16];
#pragma GCC unroll 16
    for (int q = 0; q < 16; ++q)
      r[q] = _mm512_loadu_ps(src + (2 * ((p + q) / ow) * w + 2 * ((p + q) % ow)) * 16);
    transpose_16x16(r);
#pragma GCC unroll 16
    for (int l = 0; l < 16; ++l) _mm512_storeu_ps(dst + l * hw + p, r[l]);
  }
#endif
  for (; p < hw; ++p)
    for (int l = 0; l < 16; ++l) dst[l * hw + p] = src[(2 * (p / ow) * w + 2 * (p % ow)) * 16 + l];
}

static void layout_run(int64_t n, layout_job* J, int32_t num_threads, pool_fn fn) {
  const int64_t items = n * (J->c / 16);
  if (items <= 0 || J->hw <= 0) return;
  int nth = num_threads < 1 ? 1 : num_threads;
  if (nth > WS_THREAD_SLOTS) nth = WS_THREAD_SLOTS;
  if (nth > items) nth = (int)items;
  if (items * 16 * J->hw < 32768) nth = 1; /* under 128 KiB: not worth waking a worker */
  pool_for(nth, items, fn, J);
}

void layout_to_c16(int64_t n, int64_t c, int64_t hw, const float* in, float* out,
                   int32_t num_threads) {
  layout_job J = {.c = c, .hw = hw, .in = in, .out = out, .in_hw = hw, .in_w = 0, .ow = 0};
  layout_run(n, &J, num_threads, to_item);
}

void layout_from_c16(int64_t n, int64_t c, int64_t hw, const float* in, float* out,
                     int32_t num_threads) {
  layout_job J = {.c = c, .hw = hw, .in = in, .out = out, .in_hw = hw, .in_w = 0, .ow = 0};
  layout_run(n, &J, num_threads, from_item);
}

void layout_from_c16_phase(int64_t n, int64_t c, int64_t h, int64_t w, int64_t oh, int64_t ow,
                           const float* in, float* out, int32_t num_threads) {
  layout_job J = {.c = c, .hw = oh * ow, .in = in, .out = out, .in_hw = h * w, .in_w = w, .ow = ow};
  layout_run(n, &J, num_threads, from_phase_item);
}
