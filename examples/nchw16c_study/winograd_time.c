/* winograd_time.c - a timing harness, not part of the library: Winograd mode's fp32 kernels on
 * one 3x3 stride-1 pad-1 layer, 1 thread, thread CPU time (docs/kernels.md, the C16 section).
 * Per call, interleaved: csrc/winograd.c on NCHW, csrc/winograd_c16.c on C16, and a C16 run
 * converted around winograd.c (what a C16 run without the C16 kernel costs). The two kernels'
 * outputs are checked equal bit for bit first.
 * Build (from the repository root):
 *   gcc -O3 -march=native -ffp-contract=off -w -Icsrc -Iruntime/include -Iruntime/src \
 *     -o winograd_time examples/nchw16c_study/winograd_time.c csrc/winograd.c \
 *     csrc/winograd_c16.c csrc/sdp.c csrc/pool.c csrc/workspace.c csrc/lut.c csrc/lut_tables.c \
 *     csrc/half.c csrc/layout.c runtime/src/errors.c -lpthread -lm
 * Run: ./winograd_time C HW K EPILOGUE COLD ROUNDS CALLS
 *   EPILOGUE 1: scale + shift + ReLU, 2: + residual add; COLD 1: a 32 MB sweep and the output
 *   flushed before each call. Prints, per kernel, the range and median over ROUNDS of each
 *   round's minimum of CALLS calls, and of the C16 / NCHW ratio per round.
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"

static double thread_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static float random_value(void) { return (float)rand() / RAND_MAX - 0.5f; }

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static void evict(float* sweep, size_t sweep_floats, const float* p, size_t n) {
  for (size_t i = 0; i < sweep_floats; i += 16) sweep[i] += 1.0f;
  for (size_t i = 0; i < n; i += 16) _mm_clflush(p + i);
  _mm_mfence();
}

static void print_range(const char* what, double* v, int n, double unit) {
  qsort(v, n, sizeof *v, by_value);
  printf("%s %.3f-%.3f (med %.3f)", what, v[0] * unit, v[n - 1] * unit, v[n / 2] * unit);
}

enum { NCHW, C16, CONVERTED, KINDS };

int main(int argc, char** argv) {
  if (argc < 8) {
    fprintf(stderr, "usage: %s C HW K EPILOGUE COLD ROUNDS CALLS\n", argv[0]);
    return 2;
  }
  const int C = atoi(argv[1]), HW = atoi(argv[2]), K = atoi(argv[3]), epk = atoi(argv[4]);
  const int cold = atoi(argv[5]), rounds = atoi(argv[6]), calls = atoi(argv[7]);
  const conv_geometry g = {.n = 1, .c = C, .h = HW, .w = HW, .k = K, .out_h = HW, .out_w = HW,
                           .kernel_h = 3, .kernel_w = 3, .stride_h = 1, .stride_w = 1,
                           .pad_top = 1, .pad_left = 1, .dilation_h = 1, .dilation_w = 1,
                           .groups = 1};
  const int64_t hw = (int64_t)HW * HW;
  const size_t ni = (size_t)C * hw, nw = (size_t)K * C * 9, no = (size_t)K * hw;
  float* in = aligned_alloc(64, ni * 4);
  float* in16 = aligned_alloc(64, ni * 4);
  float* scratch_in = aligned_alloc(64, ni * 4);
  float* w = aligned_alloc(64, nw * 4);
  float* out = aligned_alloc(64, no * 4);
  float* out16 = aligned_alloc(64, no * 4);
  float* scratch_out = aligned_alloc(64, no * 4);
  float* opd = aligned_alloc(64, no * 4);
  float* opd16 = aligned_alloc(64, no * 4);
  float* scratch_opd = aligned_alloc(64, no * 4);
  float* scale = malloc(K * 4);
  float* shift = malloc(K * 4);
  for (size_t i = 0; i < ni; ++i) in[i] = random_value();
  for (size_t i = 0; i < nw; ++i) w[i] = random_value();
  for (size_t i = 0; i < no; ++i) opd[i] = random_value();
  for (int i = 0; i < K; ++i) scale[i] = random_value(), shift[i] = random_value();
  layout_to_c16(1, C, hw, in, in16, 1);
  layout_to_c16(1, K, hw, opd, opd16, 1);
  sdp_f32 ep = {.scale = scale, .shift = shift, .act = ACCEL_ACT_RELU};
  if (epk == 2) ep.ew_op = ACCEL_EW_ADD, ep.ew_operand = opd;
  sdp_f32 ep16 = ep, ep_converted = ep;
  if (epk == 2) ep16.ew_operand = opd16, ep_converted.ew_operand = scratch_opd;
  workspace ws;
  memset(&ws, 0, sizeof ws);
  void* packed = aligned_alloc(64, (conv_winograd_packed_bytes(&g) + 63) & ~(size_t)63);
  conv_winograd_pack(&g, w, 0, packed);
  const size_t sweep_floats = (size_t)8 << 20;
  float* sweep = calloc(sweep_floats, 4);

  conv_winograd_f32(&g, in, w, packed, 0, out, &ep, &ws, 1);
  conv_winograd_c16(&g, in16, w, packed, out16, &ep16, &ws, 1);
  layout_from_c16(1, K, hw, out16, scratch_out, 1);
  if (memcmp(scratch_out, out, no * 4) != 0) {
    printf("the C16 kernel's output differs from winograd.c's\n");
    return 1;
  }
  double* t[KINDS + 1];
  for (int k = 0; k <= KINDS; ++k) t[k] = malloc(rounds * sizeof(double));
  for (int r = 0; r <= rounds; ++r) { /* round 0 warms up */
    double best[KINDS] = {1e9, 1e9, 1e9};
    for (int i = 0; i < calls; ++i) {
      for (int j = 0; j < KINDS; ++j) {
        const int kind = (r + i + j) % KINDS;
        if (cold) evict(sweep, sweep_floats, kind == NCHW ? out : out16, no);
        const double t0 = thread_seconds();
        if (kind == NCHW) {
          conv_winograd_f32(&g, in, w, packed, 0, out, &ep, &ws, 1);
        } else if (kind == C16) {
          conv_winograd_c16(&g, in16, w, packed, out16, &ep16, &ws, 1);
        } else {
          layout_from_c16(1, C, hw, in16, scratch_in, 1);
          if (epk == 2) layout_from_c16(1, K, hw, opd16, scratch_opd, 1);
          conv_winograd_f32(&g, scratch_in, w, packed, 0, scratch_out, &ep_converted, &ws, 1);
          layout_to_c16(1, K, hw, scratch_out, out16, 1);
        }
        const double s = thread_seconds() - t0;
        if (s < best[kind]) best[kind] = s;
      }
    }
    if (r == 0) continue;
    for (int k = 0; k < KINDS; ++k) t[k][r - 1] = best[k];
    t[KINDS][r - 1] = best[C16] / best[NCHW];
  }
  printf("%d -> %d 3x3 on %dx%d, epilogue %d, %s output:", C, K, HW, HW, epk,
         cold ? "cold" : "warm");
  print_range(" NCHW ms", t[NCHW], rounds, 1e3);
  print_range(", C16 ms", t[C16], rounds, 1e3);
  print_range(", converted ms", t[CONVERTED], rounds, 1e3);
  print_range(", C16/NCHW", t[KINDS], rounds, 1);
  printf("\n");
  return 0;
}
