/* conv/impl.c - what the CONV implementation lists share: forcing an implementation by name
 * (ACCEL_CONV_IMPL) and saying which one ran (ACCEL_VERBOSE), both read once per process.
 * docs/kernels.md lists the names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels.h"

/* -2: not read yet. Every thread reads the same environment: a benign race. */
static int verbose_level = -2;
static const char* forced_names;
static int forced_read;

int conv_verbose(void) {
  int v = __atomic_load_n(&verbose_level, __ATOMIC_RELAXED);
  if (v == -2) {
    const char* env = getenv("ACCEL_VERBOSE");
    v = env != NULL && env[0] != '\0' && env[0] != '0';
    __atomic_store_n(&verbose_level, v, __ATOMIC_RELAXED);
  }
  return v;
}

const char* conv_impl_forced(void) {
  if (!__atomic_load_n(&forced_read, __ATOMIC_ACQUIRE)) {
    const char* env = getenv("ACCEL_CONV_IMPL");
    __atomic_store_n(&forced_names, env != NULL && env[0] != '\0' ? env : NULL,
                     __ATOMIC_RELAXED);
    __atomic_store_n(&forced_read, 1, __ATOMIC_RELEASE);
  }
  return __atomic_load_n(&forced_names, __ATOMIC_RELAXED);
}

int conv_impl_named(const char* names, const char* name) {
  const size_t n = strlen(name);
  for (const char* p = names; p != NULL && *p != '\0';) {
    const char* end = strchr(p, ',');
    const size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
    if (len == n && memcmp(p, name, n) == 0) return 1;
    p = end != NULL ? end + 1 : NULL;
  }
  return 0;
}

/* The label of the run the calling thread executes (accel_run sets it around the run), so that
 * a verbose line names its layer: kernels are called on the thread that called accel_run. */
static _Thread_local const char* verbose_label;

void conv_verbose_run(const char* label) { verbose_label = label; }

void conv_verbose_line(const char* precision, const conv_geometry* g, const char* impl) {
  /* oneDNN's verbose problem descriptor: mb, groups, channels, then each axis's input, output,
   * kernel, stride, dilation and padding sizes; then the run's label (empty without one) */
  fprintf(stderr,
          "accel_verbose,conv,%s,%s,mb%d_g%d_ic%doc%d_ih%doh%dkh%dsh%ddh%dph%d_iw%dow%dkw%dsw%d"
          "dw%dpw%d,%s\n",
          precision, impl, g->n, g->groups, g->c, g->k, g->h, g->out_h, g->kernel_h, g->stride_h,
          g->dilation_h, g->pad_top, g->w, g->out_w, g->kernel_w, g->stride_w, g->dilation_w,
          g->pad_left, verbose_label != NULL ? verbose_label : "");
}

/* A cache's size in bytes, sysconf's figure for `name` (0 when the system does not say), read
 * once into `cached`: the kernels size their tiles by it rather than by one CPU's figure. */
static int64_t cache_bytes(int64_t* cached, int name) {
  int64_t v = __atomic_load_n(cached, __ATOMIC_RELAXED); /* benign race: every thread computes the same value */
  if (v < 0) {
    const long bytes = name >= 0 ? sysconf(name) : 0;
    v = bytes > 0 ? bytes : 0;
    __atomic_store_n(cached, v, __ATOMIC_RELAXED);
  }
  return v;
}

int64_t conv_l1_bytes(void) {
  static int64_t cached = -1;
#ifdef _SC_LEVEL1_DCACHE_SIZE
  return cache_bytes(&cached, _SC_LEVEL1_DCACHE_SIZE);
#else
  return cache_bytes(&cached, -1);
#endif
}

int64_t conv_l2_bytes(void) {
  static int64_t cached = -1;
#ifdef _SC_LEVEL2_CACHE_SIZE
  return cache_bytes(&cached, _SC_LEVEL2_CACHE_SIZE);
#else
  return cache_bytes(&cached, -1);
#endif
}
