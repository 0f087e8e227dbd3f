/* token_gemm_time.c - a measuring tool, not part of the library: the library's FP32 CONV
 * (conv_f32, csrc/conv/f32_impls.c: the implementation its list picks, packed_avx512 for these)
 * timed alone on a transformer's matrix products, against the FMA peak of the core it runs on.
 * Issue 29 / 32: are ViT's dense layers (1x1 CONVs over [1, C, 1, T] token surfaces) and
 * attention's score and value CONVs (weights another run wrote) short of the kernel's rate?
 *
 * Geometries: ViT-Ti/16 (C 192) and ViT-B/16 (C 768) q/k/v (one run each), proj, fc1, fc2 and
 * the fused qkv shape, 197 tokens, a bias epilogue; attention's scores (K_h [64, 197] as data,
 * Q_h [197, 64] as weights, a scale) and values (V_h [197, 64], E^T [197, 197] as weights, a
 * scale and a multiplier per position's operand), each with and without its epilogue. Thread
 * CPU clock, median (and minimum) of REPS calls after one warm-up; COLD=1 writes 16 MB between
 * calls (outside the timed part), so the call finds its operands out of cache as in a network.
 * The FMA peak: 12 independent chains of 16-lane fmadds, the same clock.
 *
 * Build (from the repository root; the library's sources, flags and OpenBLAS):
 *   OB=$(python -c "import scipy_openblas32 as s, os; print(os.path.dirname(s.get_lib_dir()))")
 *   gcc -O3 -DNDEBUG -std=gnu11 -march=native -ffp-contract=off -Iruntime/include -Icsrc \
 *       -Iruntime/src -I$OB/include examples/token_gemm_time.c csrc/?*.c csrc/conv/?*.c \
 *       runtime/src/?*.c -L$OB/lib -lscipy_openblas -Wl,-rpath,$OB/lib -lpthread -lm \
 *       -o /tmp/token_gemm_time
 * Run:   OPENBLAS_NUM_THREADS=1 /tmp/token_gemm_time [REPS [name filter]]
 * Each line prints a hash of the output bits: a change to the kernels that keeps the
 * summation-order contract (csrc/conv/f32_order.h) keeps every hash.
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* 16-lane fmadds a second on this core: 12 chains, enough to cover the FMA latency. */
static double fma_peak(void) {
  __m512 acc[12];
  const __m512 m = _mm512_set1_ps(1.0000001f), a = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps((float)i);
  const long n = 20000000;
  const double t0 = now();
  for (long k = 0; k < n; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], m, a);
  }
  const double t = now() - t0;
  float s = 0;
  for (int i = 0; i < 12; ++i) s += _mm512_reduce_add_ps(acc[i]);
  if (s == 1.2345f) puts(""); /* keeps the chains */
  return n * 12.0 * 16 / t / 1e9;
}

enum { EP_NONE, EP_BIAS, EP_SCALE, EP_SCALE_MUL };
typedef struct {
  const char* name;
  int c, k, t, ep;
} layer;

int main(int argc, char** argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 20;
  const char* only = argc > 2 ? argv[2] : NULL;
  const int cold = getenv("COLD") != NULL;
  static const layer layers[] = {
      {"ti q/k/v/proj c192 k192", 192, 192, 197, EP_BIAS},
      {"ti qkv c192 k576", 192, 576, 197, EP_BIAS},
      {"ti fc1 c192 k768", 192, 768, 197, EP_BIAS},
      {"ti fc2 c768 k192", 768, 192, 197, EP_BIAS},
      {"b q/k/v/proj c768 k768", 768, 768, 197, EP_BIAS},
      {"b qkv c768 k2304", 768, 2304, 197, EP_BIAS},
      {"b fc1 c768 k3072", 768, 3072, 197, EP_BIAS},
      {"b fc2 c3072 k768", 3072, 768, 197, EP_BIAS},
      {"scores c64 k197 t197", 64, 197, 197, EP_NONE},
      {"scores+scale", 64, 197, 197, EP_SCALE},
      {"values c197 k197 t64", 197, 197, 64, EP_NONE},
      {"values+scale*r", 197, 197, 64, EP_SCALE_MUL},
  };
  printf("FMA peak %.1f GMAC/s (fp32, one thread)%s\n", fma_peak(), cold ? ", COLD=1" : "");
  workspace ws;
  memset(&ws, 0, sizeof ws);
  char* junk = cold ? malloc(16 << 20) : NULL;
  for (size_t i = 0; i < sizeof layers / sizeof layers[0]; ++i) {
    const layer* q = &layers[i];
    if (only != NULL && strstr(q->name, only) == NULL) continue;
    const conv_geometry g = {.n = 1, .c = q->c, .h = 1, .w = q->t, .k = q->k, .out_h = 1,
                             .out_w = q->t, .kernel_h = 1, .kernel_w = 1, .stride_h = 1,
                             .stride_w = 1, .dilation_h = 1, .dilation_w = 1, .groups = 1};
    const size_t nin = (size_t)q->c * q->t, nw = (size_t)q->k * q->c, nout = (size_t)q->k * q->t;
    float* in = aligned_alloc(64, (nin * 4 + 63) / 64 * 64);
    float* w = aligned_alloc(64, (nw * 4 + 63) / 64 * 64);
    float* out = aligned_alloc(64, (nout * 4 + 63) / 64 * 64);
    float* per_channel = malloc((size_t)q->k * 4);
    float* operand = malloc(nout * 4);
    srand(1);
    for (size_t j = 0; j < nin; ++j) in[j] = rand() / (float)RAND_MAX - 0.5f;
    for (size_t j = 0; j < nw; ++j) w[j] = rand() / (float)RAND_MAX - 0.5f;
    for (int j = 0; j < q->k; ++j) per_channel[j] = 0.01f * j;
    for (size_t j = 0; j < nout; ++j) operand[j] = 1.0f + (float)(j / q->t) * 1e-3f;
    sdp_f32 ep;
    memset(&ep, 0, sizeof ep);
    ep.ew_op = ACCEL_EW_NONE;
    ep.act = ACCEL_ACT_NONE;
    if (q->ep == EP_BIAS) ep.shift = per_channel;
    if (q->ep == EP_SCALE || q->ep == EP_SCALE_MUL) ep.scale = per_channel;
    if (q->ep == EP_SCALE_MUL) {
      ep.ew_op = ACCEL_EW_MUL;
      ep.ew_operand = operand;
    }
    const sdp_f32* e = q->ep == EP_NONE ? NULL : &ep;
    double ts[1000];
    const int r = reps < 1 ? 1 : reps > 1000 ? 1000 : reps;
    conv_f32(&g, in, w, out, e, &ws, 1);
    for (int j = 0; j < r; ++j) {
      if (cold) memset(junk, j, 16 << 20);
      const double t0 = now();
      conv_f32(&g, in, w, out, e, &ws, 1);
      ts[j] = now() - t0;
    }
    qsort(ts, r, sizeof ts[0], by_value);
    const double macs = (double)q->c * q->k * q->t;
    unsigned long h = 0;
    for (size_t j = 0; j < nout; ++j) {
      unsigned u;
      memcpy(&u, &out[j], 4);
      h = h * 1000003u ^ u;
    }
    printf("%-24s %8.1f us  %5.1f GMAC/s (min %5.1f)  bits %016lx\n", q->name, ts[r / 2] * 1e6,
           macs / ts[r / 2] / 1e9, macs / ts[0] / 1e9, h);
    free(in), free(w), free(out), free(per_channel), free(operand);
  }
  free(junk);
  workspace_free(&ws);
  return 0;
}
