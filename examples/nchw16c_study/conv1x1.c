/* conv1x1.c - a study, not part of the library: an NCHW16c fp32 1x1 convolution (AVX-512),
 * BN+ReLU epilogue in registers, to measure what channel-blocked activations (issue #14, item
 * 2) would give against the library's NCHW kernels (docs/notebook/whole_network_time_log.md,
 * "Channel-blocked activations: the size of the lever").
 * Input [C/16][HW][16], output [K/16][HW][16], weights packed [K/64][C][64].
 * Summation order (the library's): 32-deep blocks each summed from zero in channel order
 * (fmadd), block sums added to a running total in order, then y = max(0, total*scale + shift)
 * (mul, then add). Every run checks its outputs against a scalar reference, bit for bit.
 * Build: gcc -O3 -march=native -ffp-contract=off conv1x1.c -o conv1x1 -lm
 * Run:   ./conv1x1 C H W K [mode S CB reps]   (the docs' figures: mode 1, S 192, CB 128)
 *   env COLD=1 (32 MB sweep + touch input), ROT=n (rotate n outputs), PACK=1 (pack the weights
 *   inside the timed call), INL=1 (read NCHW input), CONV=1/2/3 (time NCHW -> NCHW16c, the
 *   reverse, or a memcpy of the input instead)
 *   mode 0: position strips of S outer, 64-channel groups, 6-position tiles, full depth per
 *           tile (block totals in a 1.5 KB stack buffer)
 *   mode 1: strips of S outer, depth chunks of CB, groups, tiles: totals in the output tile
 *   mode 2: strips of S outer, depth chunks of CB, groups, tiles: totals in a separate buffer
 *           [K/16][S][16]
 *   mode 3: groups outer, tiles over all positions, full depth per tile
 *   mode 4: strips of S outer, groups, depth chunks CB, tiles (weight chunk in L1, totals in
 *           a [4][S][16] buffer)
 *   CONV=1: time NCHW -> NCHW16c conversion of the input instead.
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double tnow(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
static float rnd(void) { return (float)rand() / RAND_MAX - 0.5f; }
static void* xalloc(size_t n) { return aligned_alloc(64, (n + 63) & ~(size_t)63); }

/* ---------------- kernel: NP positions x 4 blocks of 16 output channels ---------------- */
#define DECL(p) __m512 a##p##0, a##p##1, a##p##2, a##p##3;
#define ZERO(p) \
  if (NP > p) a##p##0 = a##p##1 = a##p##2 = a##p##3 = _mm512_setzero_ps();
#define FMA(p)                                         \
  if (NP > p) {                                        \
    const __m512 b = _mm512_set1_ps(L ? ib[j * cs + p] : ib[p * 16 + j]);   \
    a##p##0 = _mm512_fmadd_ps(w0, b, a##p##0);         \
    a##p##1 = _mm512_fmadd_ps(w1, b, a##p##1);         \
    a##p##2 = _mm512_fmadd_ps(w2, b, a##p##2);         \
    a##p##3 = _mm512_fmadd_ps(w3, b, a##p##3);         \
  }
#define LDADD(p)                                                             \
  if (NP > p) {                                                              \
    a##p##0 = _mm512_add_ps(_mm512_load_ps(tot + 0 * ts + p * 16), a##p##0); \
    a##p##1 = _mm512_add_ps(_mm512_load_ps(tot + 1 * ts + p * 16), a##p##1); \
    a##p##2 = _mm512_add_ps(_mm512_load_ps(tot + 2 * ts + p * 16), a##p##2); \
    a##p##3 = _mm512_add_ps(_mm512_load_ps(tot + 3 * ts + p * 16), a##p##3); \
  }
#define STT(p)                                        \
  if (NP > p) {                                       \
    _mm512_store_ps(tot + 0 * ts + p * 16, a##p##0);  \
    _mm512_store_ps(tot + 1 * ts + p * 16, a##p##1);  \
    _mm512_store_ps(tot + 2 * ts + p * 16, a##p##2);  \
    _mm512_store_ps(tot + 3 * ts + p * 16, a##p##3);  \
  }
#define EPI1(p, q)                                                                       \
  {                                                                                      \
    __m512 t = _mm512_mul_ps(a##p##q, s##q);                                             \
    t = _mm512_add_ps(t, h##q);                                                          \
    t = _mm512_max_ps(_mm512_setzero_ps(), t);                                           \
    if (NT) _mm512_stream_ps(out + q * os + p * 16, t); else _mm512_store_ps(out + q * os + p * 16, t); \
  }
#define EPI(p) \
  if (NP > p) { EPI1(p, 0) EPI1(p, 1) EPI1(p, 2) EPI1(p, 3) }
#define ALLP(X) X(0) X(1) X(2) X(3) X(4) X(5)


static inline __attribute__((always_inline)) void kbody(const int NP, const int NT, const int L, int64_t cd,
                                                         const float* in, int64_t cs,
                                                         const float* w, float* tot, int64_t ts,
                                                         int first, int last, float* out,
                                                         int64_t os, const float* sc,
                                                         const float* sh) {
  ALLP(DECL)
  for (int64_t c0 = 0; c0 < cd; c0 += 32) {
    ALLP(ZERO)
    for (int h = 0; h < 2; ++h) {
      const float* ib = L ? in + (c0 + 16 * h) * cs : in + (c0 / 16 + h) * cs;
      const float* wb = w + (c0 + 16 * h) * 64;
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) {
        const __m512 w0 = _mm512_load_ps(wb + j * 64);
        const __m512 w1 = _mm512_load_ps(wb + j * 64 + 16);
        const __m512 w2 = _mm512_load_ps(wb + j * 64 + 32);
        const __m512 w3 = _mm512_load_ps(wb + j * 64 + 48);
        ALLP(FMA)
      }
    }
    const int isfirst = first && c0 == 0, islast = last && c0 + 32 >= cd;
    if (!isfirst) { ALLP(LDADD) }
    if (islast) {
      const __m512 s0 = _mm512_load_ps(sc), s1 = _mm512_load_ps(sc + 16),
                   s2 = _mm512_load_ps(sc + 32), s3 = _mm512_load_ps(sc + 48);
      const __m512 h0 = _mm512_load_ps(sh), h1 = _mm512_load_ps(sh + 16),
                   h2 = _mm512_load_ps(sh + 32), h3 = _mm512_load_ps(sh + 48);
      ALLP(EPI)
    } else {
      ALLP(STT)
    }
  }
}

typedef void (*kfn)(int64_t, const float*, int64_t, const float*, float*, int64_t, int, int,
                    float*, int64_t, const float*, const float*);
#define KDEF(N, T, L)                                                                       \
  static void k##N##_##T##_##L(int64_t cd, const float* in, int64_t cs, const float* w,       \
                               float* tot, int64_t ts, int first, int last, float* out,       \
                               int64_t os, const float* sc, const float* sh) {                \
    kbody(N, T, L, cd, in, cs, w, tot, ts, first, last, out, os, sc, sh);                     \
  }
#define KROW(T, L) KDEF(1, T, L) KDEF(2, T, L) KDEF(3, T, L) KDEF(4, T, L) KDEF(5, T, L) KDEF(6, T, L)
KROW(0, 0) KROW(1, 0) KROW(0, 1) KROW(1, 1)
#define KTAB(T, L) {0, k1_##T##_##L, k2_##T##_##L, k3_##T##_##L, k4_##T##_##L, k5_##T##_##L, k6_##T##_##L}
static const kfn ktab[2][2][7] = {{KTAB(0, 0), KTAB(1, 0)}, {KTAB(0, 1), KTAB(1, 1)}};

static int g_pfo = 0;
typedef struct {
  int64_t C, K, HW;
  int mode, S, CB, nt, lay; /* lay 1: input NCHW */
  float* tbuf; /* mode 2/4 totals */
} cfg;

/* wp: [K/64][C][64]; in: [C/16][HW][16]; out: [K/16][HW][16] */
static void conv16(const cfg* f, const float* in, const float* wp, float* out, const float* sc,
                   const float* sh) {
  const int64_t C = f->C, K = f->K, HW = f->HW, cs = f->lay ? HW : HW * 16, os = HW * 16;
  /* input offsets: channel block c/16 at (c/16)*cb16, position p at p*ps */
  const int64_t cb16 = f->lay ? 16 * HW : HW * 16, ps = f->lay ? 1 : 16;
  const int64_t G = K / 64;
  const kfn* kt = ktab[f->lay][f->nt];
  float stk[4 * 6 * 16] __attribute__((aligned(64)));
  if (f->mode == 3) {
    for (int64_t g = 0; g < G; ++g)
      for (int64_t p = 0; p < HW; p += 6) {
        const int np = HW - p < 6 ? (int)(HW - p) : 6;
        kt[np](C, in + p * ps, cs, wp + g * C * 64, stk, 6 * 16, 1, 1,
               out + g * 4 * os + p * 16, os, sc + g * 64, sh + g * 64);
      }
    return;
  }
  const int64_t S = f->S;
  for (int64_t s0 = 0; s0 < HW; s0 += S) {
    const int64_t s1 = s0 + S < HW ? s0 + S : HW;
    if (f->mode == 0) {
      for (int64_t g = 0; g < G; ++g)
        for (int64_t p = s0; p < s1; p += 6) {
          const int np = s1 - p < 6 ? (int)(s1 - p) : 6;
          if (g_pfo) { /* fetch (for writing) the output lines of the tile pfo tiles ahead */
            const int64_t pp = p + 6 * g_pfo;
            if (pp + 6 <= HW)
              for (int q = 0; q < 4; ++q)
                for (int i = 0; i < 6; ++i)
                  _m_prefetchw(out + (g * 4 + q) * os + (pp + i) * 16);
          }
          kt[np](C, in + p * ps, cs, wp + g * C * 64, stk, 6 * 16, 1, 1,
                 out + g * 4 * os + p * 16, os, sc + g * 64, sh + g * 64);
        }
    } else if (f->mode == 1 || f->mode == 2) {
      const int64_t CB = f->CB;
      for (int64_t c0 = 0; c0 < C; c0 += CB) {
        const int64_t cd = C - c0 < CB ? C - c0 : CB;
        for (int64_t g = 0; g < G; ++g)
          for (int64_t p = s0; p < s1; p += 6) {
            const int np = s1 - p < 6 ? (int)(s1 - p) : 6;
            float* tot = f->mode == 1 ? out + g * 4 * os + p * 16
                                      : f->tbuf + g * 4 * S * 16 + (p - s0) * 16;
            kt[np](cd, in + (c0 / 16) * cb16 + p * ps, cs, wp + (g * C + c0) * 64, tot,
                   f->mode == 1 ? os : S * 16, c0 == 0, c0 + cd == C,
                   out + g * 4 * os + p * 16, os, sc + g * 64, sh + g * 64);
          }
      }
    } else if (f->mode == 4) {
      const int64_t CB = f->CB;
      for (int64_t g = 0; g < G; ++g)
        for (int64_t c0 = 0; c0 < C; c0 += CB) {
          const int64_t cd = C - c0 < CB ? C - c0 : CB;
          for (int64_t p = s0; p < s1; p += 6) {
            const int np = s1 - p < 6 ? (int)(s1 - p) : 6;
            kt[np](cd, in + (c0 / 16) * cb16 + p * ps, cs, wp + (g * C + c0) * 64,
                   f->tbuf + (p - s0) * 16, S * 16, c0 == 0, c0 + cd == C,
                   out + g * 4 * os + p * 16, os, sc + g * 64, sh + g * 64);
          }
        }
    }
  }
}

/* ---------------- reference: exactly the prescribed order ---------------- */
static void ref16(int64_t C, int64_t K, int64_t HW, const float* in16, const float* w /*[K][C]*/,
                  float* out16, const float* sc, const float* sh) {
  for (int64_t k = 0; k < K; ++k)
    for (int64_t p = 0; p < HW; ++p) {
      float total = 0.0f;
      for (int64_t b = 0; b < C / 32; ++b) {
        float acc = 0.0f;
        for (int64_t c = 32 * b; c < 32 * b + 32; ++c)
          acc = fmaf(w[k * C + c], in16[(c / 16) * HW * 16 + p * 16 + c % 16], acc);
        total = b == 0 ? acc : total + acc;
      }
      float y = total * sc[k];
      y = y + sh[k];
      y = 0.0f > y ? 0.0f : y;
      out16[(k / 16) * HW * 16 + p * 16 + k % 16] = y;
    }
}

/* ---------------- layout conversion ---------------- */
static inline void tr16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(u[i], u[4 + i], 0x88);
    t[4 + i] = _mm512_shuffle_f32x4(u[i], u[4 + i], 0xDD);
    t[8 + i] = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0x88);
    t[12 + i] = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0xDD);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
    r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xDD);
  }
}
/* NCHW [C][HW] -> [C/16][HW][16] (C % 16 == 0) */
static void to16(int64_t C, int64_t HW, const float* src, float* dst) {
  for (int64_t cb = 0; cb < C / 16; ++cb) {
    const float* s = src + cb * 16 * HW;
    float* d = dst + cb * HW * 16;
    int64_t p = 0;
    for (; p + 16 <= HW; p += 16) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(s + i * HW + p);
      tr16(r);
      for (int i = 0; i < 16; ++i) _mm512_store_ps(d + (p + i) * 16, r[i]);
    }
    for (; p < HW; ++p)
      for (int i = 0; i < 16; ++i) d[p * 16 + i] = s[i * HW + p];
  }
}
static void to16_scalar(int64_t C, int64_t HW, const float* src, float* dst) {
  for (int64_t c = 0; c < C; ++c)
    for (int64_t p = 0; p < HW; ++p) dst[(c / 16) * HW * 16 + p * 16 + c % 16] = src[c * HW + p];
}
/* [K/16][HW][16] -> NCHW */
static void from16(int64_t C, int64_t HW, const float* src, float* dst) {
  for (int64_t cb = 0; cb < C / 16; ++cb) {
    const float* s = src + cb * HW * 16;
    float* d = dst + cb * 16 * HW;
    int64_t p = 0;
    for (; p + 16 <= HW; p += 16) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_load_ps(s + (p + i) * 16);
      tr16(r);
      for (int i = 0; i < 16; ++i) _mm512_storeu_ps(d + i * HW + p, r[i]);
    }
    for (; p < HW; ++p)
      for (int i = 0; i < 16; ++i) d[i * HW + p] = s[p * 16 + i];
  }
}

/* weights [K][C] -> [K/64][C][64] by 16x16 transposes (C % 16 == 0) */
static void packw(int64_t C, int64_t K, const float* w, float* wp) {
  for (int64_t g = 0; g < K / 64; ++g)
    for (int64_t qb = 0; qb < 4; ++qb)
      for (int64_t c = 0; c < C; c += 16) {
        __m512 r[16];
        for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(w + (g * 64 + qb * 16 + i) * C + c);
        tr16(r);
        for (int j = 0; j < 16; ++j) _mm512_store_ps(wp + (g * C + c + j) * 64 + qb * 16, r[j]);
      }
}

static int cmpd(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: C H W K [mode S CB reps]\n");
    return 1;
  }
  const int64_t C = atoi(argv[1]), H = atoi(argv[2]), W = atoi(argv[3]), K = atoi(argv[4]);
  cfg f = {C, K, H * W, argc > 5 ? atoi(argv[5]) : 0, argc > 6 ? atoi(argv[6]) : 48,
           argc > 7 ? atoi(argv[7]) : 128, getenv("NT") ? atoi(getenv("NT")) : 0, getenv("INL") ? 1 : 0, NULL};
  g_pfo = getenv("PFO") ? atoi(getenv("PFO")) : 0;
  const int reps = argc > 8 ? atoi(argv[8]) : 30;
  const int cold = getenv("COLD") ? atoi(getenv("COLD")) : 0;
  int rot = getenv("ROT") ? atoi(getenv("ROT")) : 1;
  if (rot < 1) rot = 1;
  if (rot > 64) rot = 64;
  const int64_t HW = H * W, ni = C * HW, no = K * HW;
  if (C % 32 || K % 64) {
    fprintf(stderr, "C %% 32 and K %% 64 required\n");
    return 1;
  }
  float *x = xalloc(ni * 4), *in = xalloc(ni * 4), *w = xalloc(K * C * 4), *wp = xalloc(K * C * 4);
  float *sc = xalloc(K * 4), *sh = xalloc(K * 4), *ref = xalloc(no * 4);
  float* outs[64];
  for (int i = 0; i < rot; ++i) {
    outs[i] = xalloc(no * 4);
    memset(outs[i], 0, no * 4);
  }
  for (int64_t i = 0; i < ni; ++i) x[i] = rnd();
  for (int64_t i = 0; i < K * C; ++i) w[i] = rnd();
  for (int64_t i = 0; i < K; ++i) { sc[i] = rnd(); sh[i] = rnd(); }
  f.tbuf = xalloc((size_t)(K > 64 ? K : 64) * (f.S > 6 ? f.S : 6) * 4 + 64);
  /* layout conversion check */
  to16_scalar(C, HW, x, ref == NULL ? NULL : in);
  {
    float* t = xalloc(ni * 4);
    to16(C, HW, x, t);
    if (memcmp(t, in, ni * 4)) { fprintf(stderr, "to16 MISMATCH\n"); return 2; }
    float* b = xalloc(ni * 4);
    from16(C, HW, t, b);
    if (memcmp(b, x, ni * 4)) { fprintf(stderr, "from16 MISMATCH\n"); return 2; }
    free(t); free(b);
  }
  /* pack weights [K][C] -> [K/64][C][64] (outside the timed region) */
  for (int64_t g = 0; g < K / 64; ++g)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t q = 0; q < 64; ++q) wp[(g * C + c) * 64 + q] = w[(g * 64 + q) * C + c];
  {
    float* t = xalloc(K * C * 4);
    packw(C, K, w, t);
    if (memcmp(t, wp, K * C * 4)) { fprintf(stderr, "packw MISMATCH\n"); return 2; }
    free(t);
  }
  const int pack = getenv("PACK") ? atoi(getenv("PACK")) : 0; /* 1: pack inside the timed call */
  size_t nf = (size_t)8 << 20;
  float* fl = cold ? xalloc(nf * 4) : NULL;
  if (fl) memset(fl, 0, nf * 4);
  double ts[1024];
  int nts = 0;
  const int conv = getenv("CONV") ? atoi(getenv("CONV")) : 0;
  float* cdst = conv ? xalloc(ni * 4) : NULL;
  for (int r = 0; r < reps + 3; ++r) {
    if (cold) {
      for (size_t i = 0; i < nf; i += 16) fl[i] = (float)r;
      /* as the harness: the input was just written by the previous layer */
      float* src = conv == 0 && !f.lay ? in : x;
      for (int64_t i = 0; i < ni; i += 16) src[i] += 0.0f;
    }
    float* out = outs[r % rot];
    double t0 = tnow();
    if (conv == 1) to16(C, HW, x, cdst);
    else if (conv == 2) from16(C, HW, in, cdst);
    else if (conv == 3) memcpy(cdst, x, ni * 4);
    else {
      if (pack) packw(C, K, w, wp);
      conv16(&f, f.lay ? x : in, wp, out, sc, sh);
    }
    double t = tnow() - t0;
    if (r >= 3) ts[nts++] = t;
  }
  qsort(ts, nts, sizeof(double), cmpd);
  if (conv) {
    printf("conv%d %ldx%ldx%ld: min %.4f ms med %.4f ms (%.1f GB/s r+w at med)\n", conv,
           (long)C, (long)H, (long)W, ts[0] * 1e3, ts[nts / 2] * 1e3,
           2.0 * ni * 4 / ts[nts / 2] / 1e9);
    return 0;
  }
  ref16(C, K, HW, in, w, ref, sc, sh);
  int bad = 0;
  for (int i = 0; i < rot && i < reps + 3; ++i) bad |= memcmp(outs[i], ref, no * 4) != 0;
  const double flops = 2.0 * C * K * HW;
  printf("P%s%s %ldx%ldx%ld->%ld mode %d S %d CB %d: min %.4f ms (%.1f) med %.4f ms (%.1f GFLOP/s) bits %s\n",
         f.lay ? "nchw-in" : "", pack ? "+pack" : "", (long)C, (long)H, (long)W, (long)K, f.mode, f.S, f.CB, ts[0] * 1e3, flops / ts[0] / 1e9,
         ts[nts / 2] * 1e3, flops / ts[nts / 2] / 1e9, bad ? "MISMATCH" : "equal");
  return bad ? 3 : 0;
}
