/* host.c - what the host's kernels cost, the figures the compiler's layout plan weighs
 * (compiler/codegen/layouts.py: which tensors of an fp32 function stay C16). They belong to the
 * host the code runs on, not to the compiler: the table below is one machine's
 * (docs/kernels.md, "Host-speed figures"), and ACCEL_HOST_C16 replaces any of its rows on
 * another host. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The cases the plan tells apart, and what a case's C16 kernel saves: `fraction` of the NCHW
 * kernel's time, at the NCHW kernel's `flops` per second (FLOPs: the direct convolution's).
 * The "convert" row is not a kernel: `flops` holds the bytes per second a conversion reads and
 * writes together (a conversion reads and writes each byte of the tensor once). */
typedef struct host_figure {
  const char* name;
  double fraction;
  double flops;
} host_figure;

enum {
  POINTWISE_784, /* 1x1 on 784 or more output positions */
  POINTWISE_196, /* 1x1 on 196 to 783 */
  POINTWISE,     /* 1x1 on fewer */
  DEPTHWISE_S1,
  DEPTHWISE_S2,
  WINOGRAD,      /* a conv in WINOGRAD mode (any kernel) */
  DENSE3X3_784,  /* a dense 3x3 on 784 or more output positions */
  CONVERT,
  NFIGURES
};

/* The Sapphire Rapids VM of docs/whole_network_time.md, measured in networks: a 1x1 on 28x28
 * or larger planes runs faster C16, on 14x14 level, on 7x7 slower (the weights come from
 * memory and the C16 kernel overlaps that less); a depthwise 3x3 saves more at stride 2, where
 * the NCHW kernel is slow; Winograd's C16 kernel takes 0.66-0.79 of the NCHW time; a dense 3x3
 * gains on 28x28 and larger outputs only. Kernels not listed save nothing: they run C16 to
 * spare conversions. */
static host_figure figures[NFIGURES] = {
    [POINTWISE_784] = {"pointwise_784", 0.2, 150e9},
    [POINTWISE_196] = {"pointwise_196", 0.0, 150e9},
    [POINTWISE] = {"pointwise", -0.1, 150e9},
    [DEPTHWISE_S1] = {"depthwise_s1", 0.3, 35e9},
    [DEPTHWISE_S2] = {"depthwise_s2", 0.4, 13e9},
    [WINOGRAD] = {"winograd", 0.28, 215e9},
    [DENSE3X3_784] = {"dense3x3_784", 0.1, 150e9},
    [CONVERT] = {"convert", 0.0, 29e9},
};

/* ACCEL_HOST_C16 read once: the figures after its rows, or the message of its first bad
 * entry (then every query fails with it). */
static pthread_once_t read_once = PTHREAD_ONCE_INIT;
static char bad_entry[160];

static double parse_number(const char* text, const char* end, int* ok) {
  char buf[64];
  const size_t n = (size_t)(end - text);
  if (n == 0 || n >= sizeof buf) {
    *ok = 0;
    return 0;
  }
  memcpy(buf, text, n);
  buf[n] = '\0';
  char* stop;
  errno = 0;
  const double v = strtod(buf, &stop);
  *ok = *stop == '\0' && errno == 0 && isfinite(v);
  return v;
}

/* One entry "name=fraction:flops" ("convert=bytes_per_second"); 0 when it is malformed. */
static int apply_entry(const char* entry, const char* end) {
  const char* eq = memchr(entry, '=', (size_t)(end - entry));
  if (eq == NULL) return 0;
  for (int i = 0; i < NFIGURES; ++i) {
    host_figure* f = &figures[i];
    if ((size_t)(eq - entry) != strlen(f->name) || memcmp(entry, f->name, strlen(f->name)) != 0)
      continue;
    int ok;
    if (i == CONVERT) {
      const double rate = parse_number(eq + 1, end, &ok);
      if (!ok || rate <= 0) return 0;
      f->flops = rate;
      return 1;
    }
    const char* colon = memchr(eq + 1, ':', (size_t)(end - eq - 1));
    if (colon == NULL) return 0;
    const double fraction = parse_number(eq + 1, colon, &ok);
    if (!ok || fraction >= 1) return 0;
    const double flops = parse_number(colon + 1, end, &ok);
    if (!ok || flops <= 0) return 0;
    f->fraction = fraction;
    f->flops = flops;
    return 1;
  }
  return 0;
}

static void read_environment(void) {
  const char* env = getenv("ACCEL_HOST_C16");
  if (env == NULL || *env == '\0') return;
  /* every entry, an empty one too (a leading, doubled or trailing comma): it is malformed */
  for (const char* p = env; p != NULL;) {
    const char* comma = strchr(p, ',');
    const char* end = comma != NULL ? comma : p + strlen(p);
    if (!apply_entry(p, end)) {
      snprintf(bad_entry, sizeof bad_entry,
               "ACCEL_HOST_C16 entry '%.*s' is not name=fraction:flops (fraction below 1, "
               "flops positive; convert=bytes_per_second) with a name of docs/kernels.md's table",
               (int)(end - p) > 80 ? 80 : (int)(end - p), p);
      return;
    }
    p = comma != NULL ? comma + 1 : NULL;
  }
}

static accel_status figures_ready(void) {
  pthread_once(&read_once, read_environment);
  return bad_entry[0] != '\0' ? accel_fail(ACCEL_ERR_INVALID, "%s", bad_entry) : ACCEL_OK;
}

accel_status accel_host_c16_saving(int32_t kernel_h, int32_t kernel_w, int32_t groups,
                                   int32_t group_channels, int32_t stride, int32_t winograd,
                                   int64_t out_elements, int64_t positions, double* seconds) {
  if (seconds == NULL) return accel_fail(ACCEL_ERR_NULL, "seconds pointer is NULL");
  *seconds = 0;
  if (kernel_h < 1 || kernel_w < 1 || groups < 1 || group_channels < 1 || stride < 1 ||
      out_elements < 1 || positions < 1 || positions > out_elements)
    return accel_fail(ACCEL_ERR_INVALID,
                      "C16 saving of kernel %dx%d, groups %d, group channels %d, stride %d, "
                      "%lld output elements on %lld positions: every one must be positive and "
                      "the positions at most the elements",
                      kernel_h, kernel_w, groups, group_channels, stride,
                      (long long)out_elements, (long long)positions);
  const accel_status st = figures_ready();
  if (st != ACCEL_OK) return st;
  int row;
  if (winograd)
    row = WINOGRAD;
  else if (kernel_h == 1 && kernel_w == 1)
    row = positions >= 784 ? POINTWISE_784 : positions >= 196 ? POINTWISE_196 : POINTWISE;
  else if (group_channels == 1 && groups > 1)
    row = stride == 1 ? DEPTHWISE_S1 : stride == 2 ? DEPTHWISE_S2 : -1;
  else if (kernel_h == 3 && kernel_w == 3 && groups == 1 && positions >= 784)
    row = DENSE3X3_784;
  else
    row = -1;
  if (row < 0) return ACCEL_OK;
  /* the NCHW kernel's time (the direct convolution's FLOPs at its rate) times the fraction,
   * multiplied left to right in double */
  *seconds = figures[row].fraction * 2 * (double)out_elements * group_channels * kernel_h *
             kernel_w / figures[row].flops;
  return ACCEL_OK;
}

accel_status accel_host_conversion_seconds(double* per_byte) {
  if (per_byte == NULL) return accel_fail(ACCEL_ERR_NULL, "per_byte pointer is NULL");
  *per_byte = 0;
  const accel_status st = figures_ready();
  if (st != ACCEL_OK) return st;
  *per_byte = 2 / figures[CONVERT].flops;
  return ACCEL_OK;
}

uint32_t accel_host_isa(void) {
  uint32_t isa = 0;
#if defined(__AVX2__) && defined(__FMA__)
  isa |= ACCEL_ISA_AVX2;
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  isa |= ACCEL_ISA_AVX512;
#endif
#if defined(__AVX512VNNI__)
  isa |= ACCEL_ISA_AVX512_VNNI;
#endif
#if defined(__AVX512VBMI__)
  isa |= ACCEL_ISA_AVX512_VBMI;
#endif
#if defined(__AMX_TILE__) && defined(__AMX_INT8__)
  isa |= ACCEL_ISA_AMX;
#endif
  return isa;
}
