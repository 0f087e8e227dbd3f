/* conv/f32_impls.c - the CONV engine in FP32: the plan of a geometry, the implementations in
 * the order they are tried, and conv_f32, the loop over them.
 *
 * The list, chosen by measurement (figures: docs/kernels.md; each file says what its kernel
 * does): batched fully connected layers as OpenBLAS sgemms (fc_blas); pointwise CONVs to or from
 * one channel (a layer norm's sums and broadcasts) on the input rows in place (narrow_avx512);
 * depthwise 5x5, and 3x3 on
 * short rows, through a channel-blocked copy (dw_c16_avx512), other depthwise 3x3 by output
 * rows (dw_rows_avx512), other depthwise kernels through a padded phase copy
 * (dw_avx512); the implicit GEMM where its grid wastes few columns and its weight panel
 * streams well (implicit_avx512); packed panels otherwise (packed_avx512); without AVX-512
 * (x86-64-v3) depthwise 3x3 and 5x5 by output rows (dw_rows_avx2), other depthwise (dw_avx2)
 * and GEMM (gemm_avx2) kernels of 8-lane FMAs in the same order; and last OpenBLAS on im2col tiles (blas), for builds without AVX2 and FMA, in
 * OpenBLAS's order (its thread pool and ours would spin against each other on convolutions,
 * hence not used where a kernel of ours applies). Before the list, a CONV whose filters are all
 * the same (a sum over the channels broadcast to each: FP16's layer norms and softmaxes) runs
 * its first filter and copies it (conv_replicated).
 * ACCEL_CONV_IMPL=name runs `name` where it supports the geometry; ACCEL_VERBOSE=1 prints the
 * one that ran (conv/impl.c). Every output is summed in the order conv/f32_order.h states, so
 * results do not depend on the thread count, and fused equals unfused bit for bit.
 * The epilogue (sdp_f32_span) runs on each block of 8 channels' finished outputs of a tile,
 * while they are in L1/L2; the implicit GEMM applies the one-pass epilogues (scale, shift, add,
 * ReLU / clip) in registers before its store instead, in the same order.
 * Threads: pool.c's loops (the caller claims items with whichever workers are awake; no
 * OpenMP, whose idle threads spin and whose barriers wait for a descheduled thread); work
 * split in (positions x channel blocks), OpenBLAS kept at one thread. Scratch: workspace slots
 * only, reserved before the parallel loops; a participant's slot is its number.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "conv/f32.h"

static const conv_f32_impl* const impls[] = {
    &conv_f32_fc_blas_impl,
#ifdef __AVX512F__
    &conv_f32_narrow_avx512_impl, /* before the depthwise ones: one input channel to many */
    &conv_f32_dw_c16_avx512_impl,
    &conv_f32_dw_rows_avx512_impl,
    &conv_f32_dw_avx512_impl,
    &conv_f32_implicit_avx512_impl,
    &conv_f32_packed_avx512_impl, /* always applies: the AVX2 ones run only when forced */
#endif
#if defined(__AVX2__) && defined(__FMA__)
    &conv_f32_dw_rows_avx2_impl,
    &conv_f32_dw_avx2_impl,
    &conv_f32_gemm_avx2_impl,
#endif
    &conv_f32_blas_impl, /* always applies */
};
enum { NIMPLS = sizeof impls / sizeof impls[0] };

/* ACCEL_L1D_BYTES's or ACCEL_L2_BYTES's value in bytes: digits, then nothing (bytes), K (KiB)
 * or M (MiB), either case, clamped to L1D_MAX (*clamped set); -1 for anything else (the
 * setting is then ignored). */
enum { L1D_MAX = 1 << 30 }; /* past any L1d, and small enough that sizes derived from it fit */
static long cache_size_text(const char* text, int* clamped) {
  *clamped = 0;
  if (text[0] < '0' || text[0] > '9') return -1; /* no sign, no space, no empty number */
  errno = 0;
  char* end;
  const unsigned long long v = strtoull(text, &end, 10);
  unsigned long long unit = 1;
  if (*end == 'K' || *end == 'k') {
    unit = 1024, ++end;
  } else if (*end == 'M' || *end == 'm') {
    unit = 1024 * 1024, ++end;
  }
  if (*end != '\0') return -1;
  if (errno == ERANGE || v > L1D_MAX / unit) {
    *clamped = 1;
    return L1D_MAX;
  }
  return (long)(v * unit);
}

/* A cache size set by the environment variable `name` where set and valid (cache_size_text), else
 * -1. A setting that is not a size is ignored, as the library's other settings are (it never
 * aborts); ACCEL_VERBOSE says on stderr how a setting was read. */
static long cache_setting(const char* name) {
  const char* env = getenv(name);
  if (env == NULL || env[0] == '\0') return -1;
  int clamped;
  const long v = cache_size_text(env, &clamped);
  if (conv_verbose()) {
    if (v < 0)
      fprintf(stderr, "accel: %s=%s ignored: not a size (a number of bytes, or with a K or M "
                      "suffix)\n", name, env);
    else
      fprintf(stderr, "accel: %s=%s read as %ld bytes%s\n", name, env, v,
              clamped ? " (clamped)" : "");
  }
  return v;
}

/* The L1 data cache's size: ACCEL_L1D_BYTES where set and valid, which lets one host take the
 * choices another makes (tests/sim/test_conv_impls.py), else sysconf's figure (0 when the
 * system does not say). Read once. */
static long l1d_cached = -1;
static void l1d_read(void) {
  long v = cache_setting("ACCEL_L1D_BYTES");
  if (v < 0) {
#ifdef _SC_LEVEL1_DCACHE_SIZE
    v = sysconf(_SC_LEVEL1_DCACHE_SIZE);
#else
    v = 0;
#endif
  }
  l1d_cached = v < 0 ? 0 : v;
}

static long l1d_bytes(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, l1d_read);
  return l1d_cached;
}

/* The L2's size for the fp32 plans: ACCEL_L2_BYTES where set and valid (so that a test runs
 * the chunked loops of a small L2 on small geometries: tests/sim/test_conv_order.py), else
 * conv_l2_bytes (sysconf). The bits never depend on it (conv/f32_order.h). Read once. */
static long l2_cached = -1;
static void l2_read(void) {
  const long v = cache_setting("ACCEL_L2_BYTES");
  l2_cached = v >= 0 ? v : (long)conv_l2_bytes();
}

static long l2_bytes(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, l2_read);
  return l2_cached;
}

/* 1 when a packed panel of CONV_KC_L1 depth rows fits in half the L1 data cache. */
static int l1_keeps_panel(void) {
  static int cached = -1; /* benign race: every thread computes the same value */
  int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (v < 0) {
    const long l1 = l1d_bytes();
    v = l1 > 0 && (long)(48 * CONV_KC_L1 * sizeof(float)) * 2 <= l1;
    __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
  }
  return v;
}

static void f32_plan(const conv_geometry* g, conv_plan* P) {
  P->g = g;
  P->cg = g->c / g->groups;
  P->mg = g->k / g->groups;
  P->kd = P->cg * g->kernel_h * g->kernel_w;
  P->hw = (int64_t)g->h * g->w;
  P->ohw = (int64_t)g->out_h * g->out_w;
  P->panels_outer = l1_keeps_panel();
  P->l1 = l1d_bytes();
  P->l2 = l2_bytes();
  P->kc = f32_depth_block(P->kd, P->panels_outer ? CONV_KC_L1 : CONV_KC_MAX);
  /* no panels (at most 8 positions: dot products only): the whole depth at once, a
   * classifier's weight rows streamed once, faster than blocks of them (docs/kernels.md,
   * conv/f32_impls.c) */
  if (P->ohw <= 8) P->kc = P->kd;
  P->pointwise = g->kernel_h == 1 && g->kernel_w == 1 && g->stride_h == 1 && g->stride_w == 1 &&
                 g->pad_top == 0 && g->pad_left == 0 && g->out_h == g->h && g->out_w == g->w;
}

/* The implementation a call runs: the forced one where it supports the call, else the first
 * that applies. */
static const conv_f32_impl* pick(const conv_f32_call* c) {
  const char* forced = conv_impl_forced();
  if (forced != NULL)
    for (int i = 0; i < NIMPLS; ++i)
      if (conv_impl_named(forced, impls[i]->name) &&
          (impls[i]->supports != NULL ? impls[i]->supports : impls[i]->applies)(c))
        return impls[i];
  for (int i = 0; i < NIMPLS - 1; ++i)
    if (impls[i]->applies(c)) return impls[i];
  return impls[NIMPLS - 1];
}

int conv_f32_dot_tail(const conv_geometry* g) {
  conv_plan P;
  f32_plan(g, &P);
  const conv_f32_call c = {.P = &P, .in = NULL, .weights = NULL, .out = NULL, .ep = NULL,
                           .ws = NULL, .nth = 1};
  const conv_f32_impl* impl = pick(&c);
  return impl->dot_tail != NULL ? impl->dot_tail(&P) : -1;
}

/* Whether g and its one-filter form both sum in f32_order.h's order (not OpenBLAS's), so that
 * where every filter holds the same bits each output is the first filter's sum at its position:
 * FP16's layer norms and softmaxes broadcast a sum over C to every channel by a CONV of ones
 * C -> C (sim/decompose.py's sum_broadcast), as the hardware would. */
int conv_f32_replicates(const conv_geometry* g) {
  if (g->k < 2 || g->groups != 1 || g->pixel_bytes != 0 || g->multi_batch) return 0;
  conv_geometry one = *g;
  one.k = 1;
  return conv_f32_dot_tail(g) >= 0 && conv_f32_dot_tail(&one) >= 0;
}

/* The first filter's sums (conv/f32_order.h: an output's order is the geometry's, whatever
 * its filter), copied to every channel, then the epilogue over them (fused equals unfused). */
static accel_status conv_replicated(const conv_geometry* g, const float* in, const float* weights,
                                    float* out, const sdp_f32* epilogue, workspace* ws,
                                    int32_t num_threads) {
  conv_geometry one = *g;
  one.k = 1;
  const accel_status st = conv_f32(&one, in, weights, out, NULL, ws, num_threads);
  if (st != ACCEL_OK) return st;
  const int64_t plane = (int64_t)g->out_h * g->out_w;
  for (int64_t i = g->n - 1; i >= 0; --i) { /* image i's plane from i * plane to its place */
    float* image = out + i * g->k * plane;
    if (i > 0) memmove(image, out + i * plane, (size_t)plane * sizeof(float));
    for (int32_t o = 1; o < g->k; ++o) {
      memcpy(image + o * plane, image, (size_t)plane * sizeof(float));
    }
  }
  if (epilogue != NULL) sdp_f32_run(epilogue, g->n, g->k, plane, out, out, num_threads);
  return ACCEL_OK;
}

accel_status conv_f32(const conv_geometry* g, const float* in, const float* weights, float* out,
                      const sdp_f32* epilogue, workspace* ws, int32_t num_threads) {
  if (num_threads < 1) num_threads = 1;
  if (num_threads > WS_THREAD_SLOTS) num_threads = WS_THREAD_SLOTS;
  if (conv_f32_replicates(g) && conv_same_filters(g, weights)) {
    if (conv_verbose()) conv_verbose_line("fp32", g, "replicated");
    return conv_replicated(g, in, weights, out, epilogue, ws, num_threads);
  }
  conv_plan P;
  f32_plan(g, &P);
  const conv_f32_call c = {.P = &P, .in = in, .weights = weights, .out = out, .ep = epilogue,
                           .ws = ws, .nth = num_threads};
  const conv_f32_impl* impl = pick(&c);
  if (conv_verbose()) conv_verbose_line("fp32", g, impl->name);
  return impl->run(&c);
}
