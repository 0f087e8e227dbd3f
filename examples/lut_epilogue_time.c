/* lut_epilogue_time.c - a measuring tool, not part of the library: the int8 conv epilogue
 * alone, without its convolution. Issue 32, item 1 (an int8 LUT activation no slower per element
 * than twice ReLU's epilogue): lut_vs_relu.py --epilogues times whole conv + SDP layers, whose
 * convolution is in every figure; this times the VNNI GEMM's panel epilogue (conv/i8.h's
 * codes_of_panel, as i8_gemm_tile calls it: panels of MR = 8 channel rows x NR = 48 positions,
 * the rows' converters prepared once by sdp_i8_lanes_prepare / sdp_i8_lanes_prepare_lut) on the
 * 1x1 layers of lut_vs_relu.py (64 channels at 112x112; relu, none, silu, hardswish, sigmoid:
 * the compiler's tables and converters), the accumulators of each block of 8 channels in an L1
 * tile of 8 x 384 (the GEMM's just-computed panel), the codes stored to the whole output.
 * Every layer's codes are checked against sdp_i8_span_scalar first (the scalar definition) and
 * hashed. Thread CPU clock, rounds interleaved (the layers' order rotates by round), ns per
 * output: minimum and median over the rounds, and each against ReLU's.
 *
 * Build (from the repository root; the converter's sources and the library's flags):
 *   python examples/lut_vs_relu.py --dump-epilogues /tmp/lut_layers.txt
 *   gcc -O3 -DNDEBUG -std=gnu11 -march=native -ffp-contract=off -Iruntime/include -Icsrc \
 *       -Iruntime/src examples/lut_epilogue_time.c csrc/sdp_i8.c csrc/sdp_i8_avx2.c \
 *       csrc/sdp_i8_avx512.c csrc/sdp_i8_lanes.c csrc/sdp_i8_lut.c csrc/lut.c csrc/lut_tables.c \
 *       csrc/pool.c runtime/src/errors.c -lpthread -lm -o /tmp/lut_epilogue_time
 * Run:   /tmp/lut_epilogue_time [ROUNDS [CALLS [FILE]]]   (ACCEL_SDP_I8_LUT=bins: the bins)
 * Two builds (two source trees) run alternately compare two versions of the epilogue.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "conv/i8.h"
#include "sdp_i8_internal.h"

/* The conv layer's verbosity switch (csrc/conv/impl.c, not linked here): off. */
int conv_verbose(void) { return 0; }

#if defined(CONV_I8_VNNI)
enum { K = 64, HW = 112 * 112, TC = 384, NL = 5, LUT_WORDS = 169 };

typedef struct layer {
  sdp_i8 p;
  accel_lut_int8 lut;
  int32_t bias[K];
  int16_t mul[K];
  uint8_t rshift[K];
  int32_t v[K * TC];
  int32_t tile[K / MR][MR * TC];
  sdp_i8_lane_cvt cvt[K];
  sdp_i8_lane_lut L;
  int8_t lo, hi;
  int lut_lanes;
} layer;

static layer layers[NL];
static int8_t out[K * HW];

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* The layer's codes, panel by panel as i8_gemm_tile converts them. */
static void run(const layer* l) {
  for (int mb = 0; mb < K / MR; ++mb) {
    const int64_t k0 = mb * MR;
    const panel_codes E = {.cvt = l->cvt + k0, .out = out + k0 * HW, .ldo = HW, .rows = MR,
                           .cols = 0, .lo = l->lo, .hi = l->hi,
                           .split = l->lut_lanes ? 0 : rows_form(l->cvt + k0, MR, 0),
                           .add = NULL, .opnd = NULL, .wide = 1, .corr = NULL,
                           .lut = l->lut_lanes ? &l->L : NULL};
    for (int64_t p = 0; p * NR < HW; ++p) {
      panel_codes e = E;
      e.out += p * NR;
      e.cols = HW - p * NR < NR ? HW - p * NR : NR;
      codes_of_panel(&e, l->tile[mb] + (p % (TC / NR)) * NR, TC);
    }
  }
}

static int read_ints(FILE* f, int32_t* a, int n) {
  for (int i = 0; i < n; ++i)
    if (fscanf(f, "%d", &a[i]) != 1) return 0;
  return 1;
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 21, calls = argc > 2 ? atoi(argv[2]) : 10;
  FILE* f = fopen(argc > 3 ? argv[3] : "/tmp/lut_layers.txt", "r");
  if (f == NULL || rounds < 1 || calls < 1) {
    fprintf(stderr, "usage: %s [ROUNDS [CALLS [FILE]]] (FILE: lut_vs_relu.py --dump-epilogues)\n",
            argv[0]);
    return 2;
  }
  static const char* names[NL] = {"relu", "none", "silu", "hardswish", "sigmoid"};
  for (int n = 0; n < NL; ++n) {
    layer* l = &layers[n];
    int32_t head[5], words[LUT_WORDS], a[K];
    if (!read_ints(f, head, 5) || head[4] != LUT_WORDS || !read_ints(f, words, LUT_WORDS))
      return 1;
    memcpy(&l->lut, words, sizeof(l->lut));
    if (!read_ints(f, l->bias, K) || !read_ints(f, a, K)) return 1;
    for (int k = 0; k < K; ++k) l->mul[k] = (int16_t)a[k];
    if (!read_ints(f, a, K)) return 1;
    int32_t shift_max = 0;
    for (int k = 0; k < K; ++k) {
      l->rshift[k] = (uint8_t)a[k];
      shift_max = a[k] > shift_max ? a[k] : shift_max;
    }
    if (!read_ints(f, l->v, K * TC)) return 1;
    for (int k = 0; k < K; ++k)
      memcpy(l->tile[k / MR] + (k % MR) * TC, l->v + k * TC, TC * sizeof(int32_t));
    const int act = head[0];
    l->p = (sdp_i8){.shift_max = shift_max, .bias = l->bias, .mul = l->mul, .rshift = l->rshift,
                    .in_zero = 0, .ew_op = ACCEL_EW_NONE, .act = (accel_activation)act,
                    .out_mul = head[1], .out_shift = head[2], .out_zero = head[3],
                    .clip_lo = -128, .clip_hi = 127, .lut = act >= 4 ? &l->lut : NULL};
    const int64_t vmax = 4 * 255 * 128; /* the 1x1 layer's bound: depth x 255 x 128 */
    if (act >= 4) {
      l->p.lut_plan = sdp_i8_lut_plan_new(&l->p, (int64_t)1 << 24);
      l->lut_lanes = sdp_i8_lanes_prepare_lut(&l->p, 0, K, vmax, l->cvt, &l->L);
      if (!l->lut_lanes) {
        printf("%s: no lane form\n", names[n]);
        return 1;
      }
      const sdp_i8_lut_bytes* B = l->L.bytes;
      printf("%-10s byte tables: %s", names[n], B != NULL ? "yes" : "no (bins)");
      if (B != NULL)
        printf(", %d slot(s), %d outside threshold(s), byte form %d", B->m, B->g, l->L.q);
#ifdef LUT_SHAPES /* sdp_i8_lut_bytes.shape (since session 26) */
      if (B != NULL) printf(", shape 0x%x", (unsigned)B->shape);
#endif
      printf("\n");
    } else if (!sdp_i8_lanes_prepare(&l->p, 0, K, vmax, l->cvt, &l->lo, &l->hi)) {
      printf("%s: no lane form\n", names[n]);
      return 1;
    }
    run(l);
    int64_t bad = 0;
    for (int k = 0; k < K; ++k) {
      int8_t want[TC];
      sdp_i8_span_scalar(&l->p, k, l->v + k * TC, NULL, want, TC);
      for (int64_t i = 0; i < HW; ++i) bad += out[k * HW + i] != want[i % TC];
    }
    uint32_t h = 2166136261u;
    for (int64_t i = 0; i < (int64_t)K * HW; ++i) h = (h ^ (uint8_t)out[i]) * 16777619u;
    printf("%-10s %lld codes differ from sdp_i8_span_scalar, hash %08x\n", names[n],
           (long long)bad, h);
    if (bad != 0) return 1;
  }
  fclose(f);
  double* all = malloc(sizeof(double) * NL * rounds);
  if (all == NULL) return 1;
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  printf("load average %.2f at the start\n", load[0]);
  for (int r = 0; r < rounds; ++r)
    for (int n0 = 0; n0 < NL; ++n0) {
      const int n = (n0 + r) % NL;
      const double t0 = now();
      for (int c = 0; c < calls; ++c) run(&layers[n]);
      all[n * rounds + r] = (now() - t0) / calls / ((double)K * HW) * 1e9;
    }
  double med[NL], best[NL];
  for (int n = 0; n < NL; ++n) {
    double* a = all + n * rounds;
    for (int i = 1; i < rounds; ++i) /* insertion sort */
      for (int j = i; j > 0 && a[j] < a[j - 1]; --j) {
        const double x = a[j];
        a[j] = a[j - 1];
        a[j - 1] = x;
      }
    best[n] = a[0];
    med[n] = a[rounds / 2];
  }
  printf("the 1x1 layers' epilogue alone, ns per output (%d rounds of %d calls, thread clock)\n",
         rounds, calls);
  for (int n = 0; n < NL; ++n)
    printf("  %-10s min %.4f  median %.4f   x relu: min %.2f  median %.2f\n", names[n], best[n],
           med[n], best[n] / best[0], med[n] / med[0]);
  getloadavg(load, 3);
  printf("load average %.2f at the end\n", load[0]);
  free(all);
  return 0;
}
#else
int main(void) {
  printf("needs an AVX-512 VNNI build (-march=native on such a host)\n");
  return 0;
}
#endif
