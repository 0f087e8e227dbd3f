/* conv3x3.c - a study, not part of the library (helper nchwc3,
 * docs/notebook/whole_network_time_log.md):
 * an NCHW16c fp32 direct 3x3 convolution (pad 1, stride 1/2), AVX-512, BN+ReLU epilogue in
 * registers, single thread: the next C16 kernel for ResNet's 3x3 layers.
 * Input [C/16][H][W][16], output [K/16][OH][OW][16], weights packed once [K/64][C*9][64] in
 * d = (c*3 + r)*3 + s order.
 * Summation order (bit-exact with ref3): for each output, d runs over (c, r, s); 32-step blocks
 * each summed from zero by fmadd in increasing d, block sums added in order to a running total,
 * then max(0, total*scale + shift) (mul, add).  Padded taps are skipped: a block accumulator can
 * never be -0 (it starts at +0, and x + (+-0) never yields -0 unless x = -0), so skipping a
 * product of 0 is bit-identical to adding it.  Likewise an all-padded block adds +0 to a total
 * that can never be -0.
 * Micro-kernel: NP (<= 6) positions along an output row x 64 output channels (4 zmm) = 24
 * accumulators; per tap 4 weight loads + NP broadcasts + 4*NP FMAs. Totals live in the output
 * tile between blocks (first block stored, later blocks load+add+store, last block + epilogue).
 * Build: gcc -O3 -march=native -ffp-contract=off conv3x3.c -o conv3x3 -lm
 * Run:   ./conv3x3 C H W K STRIDE [CB SR reps]   env COLD=1 (32 MB sweep + touch input)
 *   CB: channels per depth chunk (multiple of 32, chunk ends on a block boundary; 0 = all C)
 *   SR: output rows per strip (0 = all rows)
 * Loop order: strips of SR output rows > depth chunks of CB channels > 64-channel groups >
 *             rows in strip > tiles along the row.
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

/* Generic micro-kernel: NR output rows x NX positions (NP = NR*NX positions) x NB blocks of 16
 * output channels, NB*NP <= 28 accumulators.  Position p = i*NX + j.  The 9 taps of a channel are
 * unrolled; LE/RE: the tile's first/last column touches the left/right padding (skip s=0 / s=2
 * for j=0 / j=NX-1); TP/BT: the tile's first/last row touches the top/bottom padding. */
#define Q4(X, p) X(p, 0) X(p, 1) X(p, 2) X(p, 3)
#define DECL1(p, q) __m512 a##p##q = _mm512_setzero_ps();
#define DECL(p) Q4(DECL1, p)
#define ZERO1(p, q) if (NB > q) a##p##q = _mm512_setzero_ps();
#define ZERO(p) if (NP > p) { Q4(ZERO1, p) }
#define PI(p) ((p) / NX)
#define PJ(p) ((p) % NX)
#define SKIP(p)                                                                       \
  ((LE && PJ(p) == 0 && s == 0) || (RE && PJ(p) == NX - 1 && s == 2) ||               \
   (TP && PI(p) == 0 && r == 0) || (BT && PI(p) == NR - 1 && r == 2))
#define FMA1(p, q) if (NB > q) a##p##q = _mm512_fmadd_ps(w##q, b, a##p##q);
#define FMA(p)                                                                        \
  if (NP > p && !SKIP(p)) {                                                           \
    const __m512 b = _mm512_set1_ps(ib[PI(p) * ST * rs + (PJ(p) * ST + s) * 16]);     \
    Q4(FMA1, p)                                                                       \
  }
#define PO(p) ((PI(p) * tw + PJ(p)) * 16)
#define LDADD1(p, q) if (NB > q) a##p##q = _mm512_add_ps(_mm512_load_ps(tot + q * os + PO(p)), a##p##q);
#define LDADD(p) if (NP > p) { Q4(LDADD1, p) }
#define STT1(p, q) if (NB > q) _mm512_store_ps(tot + q * os + PO(p), a##p##q);
#define STT(p) if (NP > p) { Q4(STT1, p) }
#define EPI1(p, q)                                    \
  if (NB > q) {                                       \
    __m512 t = _mm512_mul_ps(a##p##q, s##q);          \
    t = _mm512_add_ps(t, h##q);                       \
    t = _mm512_max_ps(_mm512_setzero_ps(), t);        \
    _mm512_store_ps(tot + q * os + PO(p), t);         \
  }
#define EPI(p) if (NP > p) { Q4(EPI1, p) }
#define ALLP(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)
#define FLUSH                                                              \
  if (first) { ALLP(STT) first = 0; } else { ALLP(LDADD) ALLP(STT) }       \
  ALLP(ZERO)

/* in: channel c0's plane at tap (0,0) of position (0,0) (may point into the padding);
 * cbs: channel-block stride, rs: input row stride (floats).  w: this group's weights at c0
 * ([cn*9][16*NB]).  tot: output tile (block stride os0, row stride OW = ow0 positions).
 * ph: d offset of c0 within its 32-block (chunks may end inside a block: the partial sums are
 * parked in pb).  first: the tile holds no total yet; last: this chunk ends the depth. */
static inline __attribute__((always_inline)) void kbody(
    const int NB, const int NR, const int NX, const int ST, const int LE, const int RE,
    const int TP, const int BT, int64_t cn, const float* in, int64_t cbs, int64_t rs,
    const float* w, float* tot, const int64_t os0, const int64_t ow0, int first, int last,
    const float* sc, const float* sh, int64_t ph, float* pb) {
  const int NP = NR * NX, GW = 16 * NB;
  int64_t os = os0, tw = ow0;
  float* const tot0 = tot;
  ALLP(DECL)
  if (ph) { tot = pb; os = 16 * NP; tw = NX; ALLP(LDADD) tot = tot0; os = os0; tw = ow0; }
  int64_t d = ph, dn = 32;
  const int64_t de = ph + cn * 9;
  for (int64_t c = 0; c < cn; ++c) {
    const float* ic = in + (c >> 4) * cbs + (c & 15);
    const float* wc = w + c * 9 * GW;
#pragma GCC unroll 3
    for (int r = 0; r < 3; ++r) {
      const float* ib = ic + r * rs;
#pragma GCC unroll 3
      for (int s = 0; s < 3; ++s) {
        const float* wb = wc + (r * 3 + s) * GW;
        const __m512 w0 = _mm512_load_ps(wb);
        const __m512 w1 = NB > 1 ? _mm512_load_ps(wb + 16) : w0;
        const __m512 w2 = NB > 2 ? _mm512_load_ps(wb + 32) : w0;
        const __m512 w3 = NB > 3 ? _mm512_load_ps(wb + 48) : w0;
        ALLP(FMA)
        ++d;
        if (__builtin_expect(d == dn, 0) && d < de) {
          FLUSH
          dn += 32;
        }
      }
    }
  }
  if (de & 31) { /* chunk ends inside a block: park the partial block sums */
    tot = pb; os = 16 * NP; tw = NX; ALLP(STT) return;
  }
  if (!first) { ALLP(LDADD) }
  if (last) {
    const __m512 s0 = _mm512_load_ps(sc), s1 = NB > 1 ? _mm512_load_ps(sc + 16) : s0,
                 s2 = NB > 2 ? _mm512_load_ps(sc + 32) : s0, s3 = NB > 3 ? _mm512_load_ps(sc + 48) : s0;
    const __m512 h0 = _mm512_load_ps(sh), h1 = NB > 1 ? _mm512_load_ps(sh + 16) : h0,
                 h2 = NB > 2 ? _mm512_load_ps(sh + 32) : h0, h3 = NB > 3 ? _mm512_load_ps(sh + 48) : h0;
    ALLP(EPI)
  } else {
    ALLP(STT)
  }
}

typedef void (*kfn)(int64_t, const float*, int64_t, int64_t, const float*, float*, int64_t,
                    int64_t, int, int, const float*, const float*, int64_t, float*);
#define KDEF(B, R, N, S, F)                                                                      \
  static void k##B##_##R##_##N##_##S##_##F(int64_t cn, const float* in, int64_t cbs, int64_t rs,  \
                                           const float* w, float* tot, int64_t os, int64_t ow,    \
                                           int first, int last, const float* sc,                  \
                                           const float* sh, int64_t ph, float* pb) {              \
    kbody(B, R, N, S, (F) >> 3 & 1, (F) >> 2 & 1, (F) >> 1 & 1, (F) & 1, cn, in, cbs, rs, w, tot, \
          os, ow, first, last, sc, sh, ph, pb);                                                   \
  }
#define KF(B, R, N, S)                                                                         \
  KDEF(B, R, N, S, 0) KDEF(B, R, N, S, 1) KDEF(B, R, N, S, 2) KDEF(B, R, N, S, 3)              \
  KDEF(B, R, N, S, 4) KDEF(B, R, N, S, 5) KDEF(B, R, N, S, 6) KDEF(B, R, N, S, 7)              \
  KDEF(B, R, N, S, 8) KDEF(B, R, N, S, 9) KDEF(B, R, N, S, 10) KDEF(B, R, N, S, 11)            \
  KDEF(B, R, N, S, 12) KDEF(B, R, N, S, 13) KDEF(B, R, N, S, 14) KDEF(B, R, N, S, 15)
#define KFT(B, R, N, S)                                                                        \
  {k##B##_##R##_##N##_##S##_0, k##B##_##R##_##N##_##S##_1, k##B##_##R##_##N##_##S##_2,         \
   k##B##_##R##_##N##_##S##_3, k##B##_##R##_##N##_##S##_4, k##B##_##R##_##N##_##S##_5,         \
   k##B##_##R##_##N##_##S##_6, k##B##_##R##_##N##_##S##_7, k##B##_##R##_##N##_##S##_8,         \
   k##B##_##R##_##N##_##S##_9, k##B##_##R##_##N##_##S##_10, k##B##_##R##_##N##_##S##_11,       \
   k##B##_##R##_##N##_##S##_12, k##B##_##R##_##N##_##S##_13, k##B##_##R##_##N##_##S##_14,      \
   k##B##_##R##_##N##_##S##_15}
/* NB=4: 1 row x 1..6; NB=2: 1..2 rows x 1..7 */
#define KS(S)                                                                                  \
  KF(4, 1, 1, S) KF(4, 1, 2, S) KF(4, 1, 3, S) KF(4, 1, 4, S) KF(4, 1, 5, S) KF(4, 1, 6, S)    \
  KF(2, 1, 1, S) KF(2, 1, 2, S) KF(2, 1, 3, S) KF(2, 1, 4, S) KF(2, 1, 5, S) KF(2, 1, 6, S)    \
  KF(2, 1, 7, S) KF(2, 2, 1, S) KF(2, 2, 2, S) KF(2, 2, 3, S) KF(2, 2, 4, S) KF(2, 2, 5, S)    \
  KF(2, 2, 6, S) KF(2, 2, 7, S) KF(2, 1, 8, S) KF(2, 1, 9, S) KF(2, 1, 10, S) KF(2, 1, 11, S)   \
  KF(2, 1, 12, S) KF(2, 1, 13, S) KF(2, 1, 14, S)
KS(1) KS(2)
#define KTS(S)                                                                                  \
  {{{KFT(4, 1, 1, S), KFT(4, 1, 2, S), KFT(4, 1, 3, S), KFT(4, 1, 4, S), KFT(4, 1, 5, S), \
      KFT(4, 1, 6, S)}, {{0}}},                                                                 \
   {{KFT(2, 1, 1, S), KFT(2, 1, 2, S), KFT(2, 1, 3, S), KFT(2, 1, 4, S), KFT(2, 1, 5, S), \
      KFT(2, 1, 6, S), KFT(2, 1, 7, S), KFT(2, 1, 8, S), KFT(2, 1, 9, S), KFT(2, 1, 10, S),     \
      KFT(2, 1, 11, S), KFT(2, 1, 12, S), KFT(2, 1, 13, S), KFT(2, 1, 14, S)},                                                        \
    {KFT(2, 2, 1, S), KFT(2, 2, 2, S), KFT(2, 2, 3, S), KFT(2, 2, 4, S), KFT(2, 2, 5, S),       \
     KFT(2, 2, 6, S), KFT(2, 2, 7, S)}}}
/* ktab[stride-1][NB==2][NR-1][NX-1][flags] */
static const kfn ktab[2][2][2][14][16] = {KTS(1), KTS(2)};

static int g_pf = 0, g_pfd = 1, g_wl = 1;
/* weight slice of group g, channels [c0, c0+cn): g_wl 0: [K/GW][C*9][GW]; g_wl 1 (chunk-major,
 * the kernel's loop order, one sequential stream): [C/CB][K/GW][cn*9][GW] */
#define WOFF(g, c0, cn) (g_wl ? (c0) * 9 * K + (g) * (cn) * 9 * GW : ((g) * C + (c0)) * 9 * GW)
typedef struct {
  int64_t C, H, W, K, st, OH, OW;
  int64_t CB, SR, NB, NR;
  int ntile, tx[16], tn[16]; /* tiles along an output row */
  float* pbuf;               /* parked partial block sums per (group, row band, tile) */
} cfg;

static void conv3(const cfg* f, const float* in, const float* wp, float* out, const float* sc,
                  const float* sh) {
  const int64_t C = f->C, H = f->H, W = f->W, K = f->K, st = f->st, OH = f->OH, OW = f->OW;
  const int64_t cbs = H * W * 16, rs = W * 16, os = OH * OW * 16, NB = f->NB, GW = 16 * NB,
                G = K / GW, NR = f->NR;
  const int64_t CB = f->CB, SR = f->SR;
  const int nb2 = NB == 2;
  for (int64_t y0 = 0; y0 < OH; y0 += SR) {
    const int64_t y1 = y0 + SR < OH ? y0 + SR : OH;
    for (int64_t c0 = 0; c0 < C; c0 += CB) {
      const int64_t cn = C - c0 < CB ? C - c0 : CB;
      const float* inc = in + (c0 / 16) * cbs;
      for (int64_t g = 0; g < G; ++g) {
        const float* wg = wp + WOFF(g, c0, cn);
        /* software prefetch of the next (group, chunk)'s weights, spread over this one's tiles */
        const char* pfp = NULL;
        int64_t pfl = 0, pfi = 0;
        const int64_t pfn = (y1 - y0 + NR - 1) / NR * f->ntile;
        if (g_pf) { /* g_pfd steps ahead in (chunk, group) order, within this strip */
          int64_t gg = g + g_pfd, cc = c0;
          while (gg >= G && cc < C) { gg -= G; cc += CB; }
          if (cc < C) {
            pfl = C - cc < CB ? C - cc : CB;
            pfp = (const char*)(wp + WOFF(gg, cc, pfl));
          }
          pfl = pfl * 9 * GW * 4 / 64; /* lines */
        }
        for (int64_t y = y0; y < y1; y += NR) {
          const int nr = y + NR <= y1 ? (int)NR : (int)(y1 - y);
          const int64_t iy = y * st - 1;
          const int tp = iy < 0, bt = (y + nr - 1) * st + 1 >= H;
          for (int t = 0; t < f->ntile; ++t) {
            const int64_t x0 = f->tx[t];
            const int np = f->tn[t];
            const int64_t ix = x0 * st - 1;
            const int le = ix < 0, re = (x0 + np - 1) * st + 1 >= W;
            if (pfp) {
              const int64_t l0 = pfi * pfl / pfn, l1 = (pfi + 1) * pfl / pfn;
              ++pfi;
              if (g_pf == 1)
                for (int64_t l = l0; l < l1; ++l) _mm_prefetch(pfp + l * 64, _MM_HINT_T1);
              else
                for (int64_t l = l0; l < l1; ++l) _mm_prefetch(pfp + l * 64, _MM_HINT_T0);
            }
            ktab[st - 1][nb2][nr - 1][np - 1][le * 8 + re * 4 + tp * 2 + bt](
                cn, inc + iy * rs + ix * 16, cbs, rs, wg,
                out + (g * NB * OH * OW + y * OW + x0) * 16, os, OW, c0 == 0, c0 + cn == C,
                sc + g * GW, sh + g * GW, (c0 * 9) & 31,
                f->pbuf + ((g * OH + y) * f->ntile + t) * 28 * 16);
          }
        }
      }
    }
  }
}

/* ---------------- reference: exactly the prescribed order ---------------- */
static void ref3(const cfg* f, const float* in16, const float* w /*[K][C][3][3]*/, float* out16,
                 const float* sc, const float* sh) {
  const int64_t C = f->C, H = f->H, W = f->W, K = f->K, st = f->st, OH = f->OH, OW = f->OW;
  for (int64_t k = 0; k < K; ++k)
    for (int64_t y = 0; y < OH; ++y)
      for (int64_t x = 0; x < OW; ++x) {
        float total = 0.0f, acc = 0.0f;
        int64_t d = 0, nb = 0;
        for (int64_t c = 0; c < C; ++c)
          for (int r = 0; r < 3; ++r)
            for (int s = 0; s < 3; ++s) {
              const int64_t iy = y * st + r - 1, ix = x * st + s - 1;
              const float xv = (iy < 0 || iy >= H || ix < 0 || ix >= W)
                                   ? 0.0f
                                   : in16[((c / 16) * H * W + iy * W + ix) * 16 + c % 16];
              acc = fmaf(w[((k * C + c) * 3 + r) * 3 + s], xv, acc);
              if (++d % 32 == 0) {
                total = nb++ == 0 ? acc : total + acc;
                acc = 0.0f;
              }
            }
        if (d % 32) total = nb++ == 0 ? acc : total + acc;
        float v = total * sc[k];
        v = v + sh[k];
        v = 0.0f > v ? 0.0f : v;
        out16[((k / 16) * OH * OW + y * OW + x) * 16 + k % 16] = v;
      }
}

static int cmpd(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: C H W K STRIDE [CB SR reps]\n");
    return 1;
  }
  cfg f;
  memset(&f, 0, sizeof f);
  f.C = atoi(argv[1]); f.H = atoi(argv[2]); f.W = atoi(argv[3]); f.K = atoi(argv[4]);
  f.st = atoi(argv[5]);
  f.CB = argc > 6 ? atoi(argv[6]) : 0;
  f.SR = argc > 7 ? atoi(argv[7]) : 0;
  const int reps = argc > 8 ? atoi(argv[8]) : 30;
  if (f.CB <= 0 || f.CB > f.C) f.CB = f.C;
  f.OH = (f.H + 2 - 3) / f.st + 1;
  f.OW = (f.W + 2 - 3) / f.st + 1;
  if (f.SR <= 0) f.SR = f.OH;
  if (f.C % 32 || f.K % 64 || f.CB % 16 || (f.st != 1 && f.st != 2)) {
    fprintf(stderr, "C %% 32, CB %% 16, K %% 64, stride 1/2 required\n");
    return 1;
  }
  /* balanced tiles of <= MAXNP positions along an output row */
  g_pf = getenv("PF") ? atoi(getenv("PF")) : 0;
  g_wl = getenv("WL") ? atoi(getenv("WL")) : 1;
  g_pfd = getenv("PFD") ? atoi(getenv("PFD")) : 1;
  f.NB = getenv("NB") ? atoi(getenv("NB")) : 4;
  f.NR = f.NB == 2 && getenv("NR") ? atoi(getenv("NR")) : 1;
  const int maxnp = getenv("NPMAX") ? atoi(getenv("NPMAX")) : (f.NB == 4 ? 6 : 7);
  f.ntile = (int)((f.OW + maxnp - 1) / maxnp);
  for (int t = 0, x = 0; t < f.ntile; ++t) {
    const int n = (int)((f.OW - x) / (f.ntile - t) + ((f.OW - x) % (f.ntile - t) ? 1 : 0));
    f.tx[t] = x; f.tn[t] = n; x += n;
  }
  const int64_t C = f.C, K = f.K, ni = C * f.H * f.W, no = K * f.OH * f.OW, nw = K * C * 9;
  float *in = xalloc(ni * 4), *w = xalloc(nw * 4), *wp = xalloc(nw * 4);
  f.pbuf = xalloc((K / 32) * f.OH * f.ntile * 28 * 16 * 4);
  float *sc = xalloc(K * 4), *sh = xalloc(K * 4), *ref = xalloc(no * 4), *out = xalloc(no * 4);
  memset(out, 0, no * 4);
  for (int64_t i = 0; i < ni; ++i) in[i] = rnd();
  for (int64_t i = 0; i < nw; ++i) w[i] = rnd();
  for (int64_t i = 0; i < K; ++i) { sc[i] = rnd(); sh[i] = rnd(); }
  /* pack weights [K][C][3][3] -> [K/64][C*9][64] (outside the timed call) */
  const int64_t GW = 16 * f.NB;
  for (int64_t g = 0; g < K / GW; ++g)
    for (int64_t d = 0; d < C * 9; ++d)
      for (int64_t q = 0; q < GW; ++q) {
        const int64_t c0 = d / 9 / f.CB * f.CB, cn = C - c0 < f.CB ? C - c0 : f.CB;
        wp[WOFF(g, c0, cn) + (d - c0 * 9) * GW + q] = w[(g * GW + q) * C * 9 + d];
      }
  const int cold = getenv("COLD") ? atoi(getenv("COLD")) : 0;
  size_t nf = (size_t)8 << 20;
  float* fl = cold ? xalloc(nf * 4) : NULL;
  if (fl) memset(fl, 0, nf * 4);
  double ts[1024];
  int nts = 0;
  ref3(&f, in, w, ref, sc, sh);
  int bad = 0;
  for (int r = 0; r < reps + 3; ++r) {
    if (cold) {
      for (size_t i = 0; i < nf; i += 16) fl[i] = (float)r;
      for (int64_t i = 0; i < ni; i += 16) in[i] += 0.0f;
    }
    double t0 = tnow();
    conv3(&f, in, wp, out, sc, sh);
    double t = tnow() - t0;
    if (r >= 3) ts[nts++] = t;
    bad |= memcmp(out, ref, no * 4) != 0;
  }
  qsort(ts, nts, sizeof(double), cmpd);
  const double flops = 2.0 * C * K * 9 * f.OH * f.OW;
  printf("N16c %ldx%ldx%ld->%ld s%ld CB %ld SR %ld nb%ld nr%ld np%d: min %.4f ms (%.1f) med %.4f ms (%.1f GFLOP/s) bits %s\n",
         (long)C, (long)f.H, (long)f.W, (long)K, (long)f.st, (long)f.CB, (long)f.SR, (long)f.NB, (long)f.NR, maxnp,
         ts[0] * 1e3, flops / ts[0] / 1e9, ts[nts / 2] * 1e3, flops / ts[nts / 2] / 1e9,
         bad ? "MISMATCH" : "equal");
  return bad ? 3 : 0;
}
