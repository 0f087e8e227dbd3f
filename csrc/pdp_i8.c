/* pdp_i8.c - the PDP engine in INT8: max and average pooling with the input's zero point.
 *
 * Max compares codes (the zero point does not change the order; padding never wins). Average,
 * NVDLA's (nvdla/doc precision.rst, the C model's pdp): S = the sum of the window's codes, each
 * padded position reading as the zero point (PAD_VALUE), times the 0.16 fixed-point reciprocals
 * of the kernel's width and height that NVDLA's compiler programs (RECIP_KERNEL_WIDTH /
 * HEIGHT = floor(2^16 / k)), each product rounded half away from zero:
 * out = sat8(rhaz(rhaz(S * rw, 16) * rh, 16)). The divisor is always the whole window.
 *
 * Global average pooling (one output per plane, the window the whole plane) sums each plane
 * with one vpsadbw (two on AVX2) and finishes 16 planes at once (pool_global). AVX2 builds
 * without AVX-512 sum the windows of non-overlapping averages up to 8 wide straight from the
 * codes (vpshufb, vpsadbw: pool_blocks) and finish in 8 int32 lanes.
 * Wide outputs go an output row at a time: for strides 1 and 2, 32 columns per AVX-512 step,
 * every tap of the window folded into one register (int16 lanes), lanes outside a tap's image
 * columns left alone (a pass over the row per tap reloads the accumulators a masked store just
 * wrote); AVX2 builds take max pools of strides 1 and 2 16 or 32 columns a step in int8
 * lanes (max_row_avx2); other strides tap by tap, portably. Averages over non-overlapping
 * windows from the top left (the passes of a wide or global average) sum column by column
 * (pool_blocks); max pools of stride 1 across narrower outputs by rows of window maxima
 * (pool_narrow_max); other outputs narrower than 16 columns go window by window. Figures:
 * docs/kernels.md.
 */
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__SSE4_1__)
#include <immintrin.h>
#endif

/* POOL_AVX2: the AVX2 forms of the average's column sums, window sums, finish and global sums,
 * for builds without the AVX-512 ones (whose code is unchanged). */
#if defined(__AVX2__) && !(defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__))
#define POOL_AVX2 1
#endif

#include "kernels.h"

enum { COLS = 1024, NARROW = 16 }; /* output columns per pass (a stack row of int32) */

/* p / 2^16 rounded half away from zero (|p| < 2^62). */
static inline int64_t rhaz16(int64_t p) {
  const int64_t a = ((p < 0 ? -p : p) + (1 << 15)) >> 16;
  return p < 0 ? -a : a;
}

/* NVDLA's average of a window whose codes sum to `sum` over `inside` image elements: the
 * padded positions read as the zero point; see the top of the file. */
static inline int8_t nvdla_avg_r(const pdp_geometry* g, int32_t zero, int32_t sum,
                                 int32_t inside, int64_t rw, int64_t rh) {
  const int64_t S = sum + (int64_t)zero * (g->kernel_h * g->kernel_w - inside);
  const int64_t y = rhaz16(rhaz16(S * rw) * rh);
  return (int8_t)(y < -128 ? -128 : y > 127 ? 127 : y);
}

/* the same with the reciprocals computed here (rw, rh: RECIP_KERNEL_WIDTH / HEIGHT; a caller
 * finishing many windows computes them once: two divisions per window were most of a 14x14
 * plane's 7x7 pass) */
static inline int8_t nvdla_avg(const pdp_geometry* g, int32_t zero, int32_t sum, int32_t inside) {
  return nvdla_avg_r(g, zero, sum, inside, (1 << 16) / g->kernel_w, (1 << 16) / g->kernel_h);
}

/* Window by window: few output columns, where a pass per tap would be mostly overhead. */
static void pool_narrow(const pdp_geometry* g, int32_t zero, const int8_t* in, int8_t* out) {
  for (int32_t oy = 0; oy < g->out_h; ++oy) {
    int32_t y0, r0, r1;
    pool_window(oy, g->stride_h, g->pad_top, g->kernel_h, g->h, &y0, &r0, &r1);
    for (int32_t ox = 0; ox < g->out_w; ++ox) {
      int32_t x0, s0, s1;
      pool_window(ox, g->stride_w, g->pad_left, g->kernel_w, g->w, &x0, &s0, &s1);
      int32_t acc = g->pool == ACCEL_POOL_MAX ? -128 : 0;
      for (int32_t r = r0; r < r1; ++r) {
        const int8_t* row = in + (int64_t)(y0 + r) * g->w + x0;
        if (g->pool == ACCEL_POOL_MAX) {
          for (int32_t s = s0; s < s1; ++s) acc = acc > row[s] ? acc : row[s];
        } else {
          for (int32_t s = s0; s < s1; ++s) acc += row[s];
        }
      }
      out[(int64_t)oy * g->out_w + ox] =
          g->pool == ACCEL_POOL_AVG ? nvdla_avg(g, zero, acc, (r1 - r0) * (s1 - s0)) : (int8_t)acc;
    }
  }
}

#ifdef __SSE4_1__
/* Max pooling with horizontal stride 1 on outputs narrower than 16 columns (SPP's cascade of
 * 5x5 stride-1 pools on 13x13 planes): each input row's window maxima in one 16-byte vector
 * (a max per tap of the row shifted, the columns outside the image reading -128), then each
 * output row the maximum of its window's rows. Max is exact in any order, and -128 where the
 * window leaves the image gives what leaving those columns out gives (pool_narrow starts each
 * window at -128 too). Window by window took 25 scalar steps per output of a 5x5 pool. */
enum { NARROW_MAX_ROWS = 512 };

static int narrow_max_applies(const pdp_geometry* g) {
  return g->pool == ACCEL_POOL_MAX && g->stride_w == 1 && g->out_w < NARROW &&
         g->kernel_w <= 16 && g->h <= NARROW_MAX_ROWS && g->pad_left >= 0 &&
         g->pad_left + g->w <= 32;
}

static void pool_narrow_max(const pdp_geometry* g, const int8_t* in, int8_t* out) {
  __m128i rows[NARROW_MAX_ROWS];
  int8_t row[48]; /* the image row at pad_left, -128 around it; loads reach row[30] */
  memset(row, 0x80, sizeof row);
  for (int32_t y = 0; y < g->h; ++y) {
    memcpy(row + g->pad_left, in + (int64_t)y * g->w, (size_t)g->w);
    __m128i m = _mm_loadu_si128((const __m128i*)row);
    for (int32_t s = 1; s < g->kernel_w; ++s)
      m = _mm_max_epi8(m, _mm_loadu_si128((const __m128i*)(row + s)));
    rows[y] = m;
  }
  for (int32_t oy = 0; oy < g->out_h; ++oy) {
    int32_t y0, r0, r1;
    pool_window(oy, g->stride_h, g->pad_top, g->kernel_h, g->h, &y0, &r0, &r1);
    __m128i m = _mm_set1_epi8(-128);
    for (int32_t r = r0; r < r1; ++r) m = _mm_max_epi8(m, rows[y0 + r]);
    int8_t codes[16];
    _mm_storeu_si128((__m128i*)codes, m);
    memcpy(out + (int64_t)oy * g->out_w, codes, (size_t)g->out_w);
  }
}
#endif

/* One tap over output columns [lo, hi) of a row, portably (any stride): acc holds the running
 * maxima (codes) or the sums of the codes. */
static void tap_scalar(int is_max, int32_t sw, const int8_t* src, int32_t* acc, int64_t lo,
                       int64_t hi) {
  for (int64_t j = lo; j < hi; ++j) {
    const int32_t v = src[j * sw];
    acc[j] = is_max ? (acc[j] > v ? acc[j] : v) : acc[j] + v;
  }
}

#ifdef POOL_AVX2
/* The codes at columns j .. j + 31 (j .. j + 15) of a tap's row. Stride 1 reads them in place;
 * stride 2 takes the even bytes, the first half's as the low bytes of byte pairs from 2j and the
 * second half's as the high bytes of pairs from one byte earlier, so a block never reads past
 * its last column's byte (the plane's last), then packs the pairs' chosen bytes exactly
 * (packus of 0..255). The 32-wide packus leaves the lanes in the order 0-7, 16-23, 8-15, 24-31,
 * which max_row_avx2 puts right once per output block. */
static inline __m256i tap_codes32(int32_t sw, const int8_t* src, int64_t j) {
  if (sw == 1) return _mm256_loadu_si256((const __m256i*)(const void*)(src + j));
  const __m256i a = _mm256_loadu_si256((const __m256i*)(const void*)(src + 2 * j));
  const __m256i b = _mm256_loadu_si256((const __m256i*)(const void*)(src + 2 * j + 31));
  return _mm256_packus_epi16(_mm256_and_si256(a, _mm256_set1_epi16(0xFF)),
                             _mm256_srli_epi16(b, 8));
}

static inline __m128i tap_codes16(int32_t sw, const int8_t* src, int64_t j) {
  if (sw == 1) return _mm_loadu_si128((const __m128i*)(const void*)(src + j));
  const __m128i a = _mm_loadu_si128((const __m128i*)(const void*)(src + 2 * j));
  const __m128i b = _mm_loadu_si128((const __m128i*)(const void*)(src + 2 * j + 15));
  return _mm_packus_epi16(_mm_and_si128(a, _mm_set1_epi16(0xFF)), _mm_srli_epi16(b, 8));
}

/* One output row of a max pool of stride 1 or 2 on AVX2, which has no masked byte loads: the
 * columns every tap sees inside the image in int8 lanes, 32 at a time (16 on rows of 16-31 such
 * columns; the maximum of codes is exact in any order and needs no widening), the last block
 * ending at the last such column and overlapping the one before (the maximum is idempotent);
 * the edge columns, where some tap leaves the image, tap by tap (tap_scalar, from -128: padding
 * never wins). The scalar loop stored a running maximum per code and tap. */
static void max_row_avx2(int32_t sw, const int8_t* const* srcs, const int64_t* lo,
                         const int64_t* hi, int32_t ntaps, int64_t nc, int32_t* acc,
                         int8_t* dst) {
  int64_t v0 = 0, v1 = nc; /* the columns inside every tap */
  for (int32_t t = 0; t < ntaps; ++t) {
    v0 = lo[t] > v0 ? lo[t] : v0;
    v1 = hi[t] < v1 ? hi[t] : v1;
  }
  int64_t left = nc, right = nc; /* the columns left to taps: [0, left) and [right, nc) */
  if (v1 - v0 >= 32) {
    for (int64_t j = v0;; j += 32) {
      if (j > v1 - 32) j = v1 - 32;
      __m256i m = _mm256_set1_epi8(-128);
      for (int32_t t = 0; t < ntaps; ++t) m = _mm256_max_epi8(m, tap_codes32(sw, srcs[t], j));
      if (sw == 2) m = _mm256_permute4x64_epi64(m, _MM_SHUFFLE(3, 1, 2, 0));
      _mm256_storeu_si256((__m256i*)(void*)(dst + j), m);
      if (j == v1 - 32) break;
    }
    left = v0;
    right = v1;
  } else if (v1 - v0 >= 16) {
    for (int64_t j = v0;; j = v1 - 16) {
      __m128i m = _mm_set1_epi8(-128);
      for (int32_t t = 0; t < ntaps; ++t) m = _mm_max_epi8(m, tap_codes16(sw, srcs[t], j));
      _mm_storeu_si128((__m128i*)(void*)(dst + j), m);
      if (j == v1 - 16) break;
    }
    left = v0;
    right = v1;
  }
  const int64_t spans[2][2] = {{0, left}, {right, nc}};
  for (int k = 0; k < 2; ++k) {
    const int64_t a = spans[k][0], b = spans[k][1];
    if (a >= b) continue;
    for (int64_t i = a; i < b; ++i) acc[i] = -128;
    for (int32_t t = 0; t < ntaps; ++t)
      tap_scalar(1, sw, srcs[t], acc, lo[t] > a ? lo[t] : a, hi[t] < b ? hi[t] : b);
    for (int64_t i = a; i < b; ++i) dst[i] = (int8_t)acc[i];
  }
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
/* Strides 1 and 2: 32 output columns at a time, every tap of the window folded into one
 * register (a pass per tap would reload and store the row's accumulators after each tap, and
 * masked stores do not forward to the next load: 3x slower), lanes outside a tap's
 * [lo, hi) left alone. Sums of codes fit int16 (64 taps x 128). */
static void row_block(int is_max, int32_t sw, const int8_t* const* srcs, const int64_t* lo,
                      const int64_t* hi, int32_t ntaps, int64_t j, int64_t n, int32_t* acc) {
  __m512i a = is_max ? _mm512_set1_epi16(-128) : _mm512_setzero_si512();
  for (int32_t t = 0; t < ntaps; ++t) {
    const int64_t l = lo[t] > j ? lo[t] - j : 0, h = hi[t] < j + n ? hi[t] - j : n;
    if (l >= h) continue;
    const __mmask32 m = (__mmask32)((((uint64_t)1 << h) - 1) & ~(((uint64_t)1 << l) - 1));
    __m512i v;
    if (sw == 1) {
      v = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(m, srcs[t] + j));
    } else { /* bytes 2l .. 2h - 2: the low byte of each pair, sign-extended */
      const __mmask64 m2 = (((__mmask64)1 << (2 * h - 1)) - 1) & ~(((__mmask64)1 << (2 * l)) - 1);
      const __m512i w = _mm512_maskz_loadu_epi8(m2, srcs[t] + 2 * j);
      v = _mm512_srai_epi16(_mm512_slli_epi16(w, 8), 8);
    }
    a = is_max ? _mm512_mask_max_epi16(a, m, a, v) : _mm512_mask_add_epi16(a, m, a, v);
  }
  const __mmask16 m0 = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
  const __mmask16 m1 = n >= 32 ? (__mmask16)0xFFFF : n <= 16 ? 0 : (__mmask16)((1u << (n - 16)) - 1u);
  _mm512_mask_storeu_epi32(acc + j, m0, _mm512_cvtepi16_epi32(_mm512_castsi512_si256(a)));
  _mm512_mask_storeu_epi32(acc + j + 16, m1, _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(a, 1)));
}
#define ROW_BLOCKS 1
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
/* rhaz16 in int32 lanes, exact for |p| < 2^31 - 2^15. */
static inline __m512i rhaz16_x16(__m512i p) {
  const __m512i half = _mm512_set1_epi32(1 << 15);
  const __m512i a = _mm512_srli_epi32(_mm512_add_epi32(_mm512_abs_epi32(p), half), 16);
  return _mm512_mask_sub_epi32(a, _mm512_cmplt_epi32_mask(p, _mm512_setzero_si512()),
                               _mm512_setzero_si512(), a);
}
#endif

#ifdef POOL_AVX2
/* rhaz16 in 8 int32 lanes, exact for |p| < 2^31 - 2^15 (vpsignd gives 0 where p is 0, whose
 * rounded magnitude is 0 anyway). */
static inline __m256i rhaz16_x8(__m256i p) {
  const __m256i a =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_abs_epi32(p), _mm256_set1_epi32(1 << 15)), 16);
  return _mm256_sign_epi32(a, p);
}
#endif

/* dst[j] = NVDLA's average of column j's window: acc[j] sums its codes over in_rows x inside[j]
 * image elements. In 16 int32 lanes where AVX-512 is, 8 on AVX2: nvdla_avg's int64 steps stay inside
 * int32 because a window holds at most 8 x 8 codes: |S| <= 64 x 128 = 2^13 and the reciprocals
 * are at most 2^16, so each product is below 2^29 in magnitude (the same values, so the same
 * roundings); the scalar loop took most of an 8x8/8 pass over 112x112 planes. */
_Static_assert(ACCEL_MAX_POOL_KERNEL <= 8, "finish_avg's int32 lanes need windows of <= 64");
static void finish_avg(const pdp_geometry* g, const int32_t* acc, const int32_t* inside,
                       int32_t in_rows, int32_t zero, int64_t nc, int8_t* dst) {
  int64_t j = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  const __m512i area = _mm512_set1_epi32(g->kernel_h * g->kernel_w), z = _mm512_set1_epi32(zero);
  const __m512i rows = _mm512_set1_epi32(in_rows);
  const __m512i rw = _mm512_set1_epi32((1 << 16) / g->kernel_w);
  const __m512i rh = _mm512_set1_epi32((1 << 16) / g->kernel_h);
  for (; j < nc; j += 16) {
    const __mmask16 m = nc - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (nc - j)) - 1u);
    const __m512i in = _mm512_mullo_epi32(rows, _mm512_maskz_loadu_epi32(m, inside + j));
    const __m512i S = _mm512_add_epi32(_mm512_maskz_loadu_epi32(m, acc + j),
                                       _mm512_mullo_epi32(z, _mm512_sub_epi32(area, in)));
    const __m512i y = rhaz16_x16(_mm512_mullo_epi32(rhaz16_x16(_mm512_mullo_epi32(S, rw)), rh));
    _mm_mask_storeu_epi8(dst + j, m, _mm512_cvtsepi32_epi8(y));
  }
#elif defined(POOL_AVX2)
  /* the same int32 steps in 8 lanes (rhaz16_x8), whole vectors; the tail scalar */
  const __m256i area = _mm256_set1_epi32(g->kernel_h * g->kernel_w), z = _mm256_set1_epi32(zero);
  const __m256i rows = _mm256_set1_epi32(in_rows);
  const __m256i rw = _mm256_set1_epi32((1 << 16) / g->kernel_w);
  const __m256i rh = _mm256_set1_epi32((1 << 16) / g->kernel_h);
  for (; j < nc; j += 8) { /* a tail of n < 8: vpmaskmovd loads, the codes stored via a copy */
    const int64_t n = nc - j < 8 ? nc - j : 8;
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)n),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i in = _mm256_mullo_epi32(
        rows, _mm256_maskload_epi32((const int*)(const void*)(inside + j), m));
    const __m256i S =
        _mm256_add_epi32(_mm256_maskload_epi32((const int*)(const void*)(acc + j), m),
                         _mm256_mullo_epi32(z, _mm256_sub_epi32(area, in)));
    const __m256i y = rhaz16_x8(_mm256_mullo_epi32(rhaz16_x8(_mm256_mullo_epi32(S, rw)), rh));
    /* sat8(sat16(y)) = sat8(y) */
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1));
    if (n == 8) {
      _mm_storel_epi64((__m128i*)(void*)(dst + j), _mm_packs_epi16(w, w));
    } else {
      int8_t codes[16];
      _mm_storeu_si128((__m128i*)(void*)codes, _mm_packs_epi16(w, w));
      memcpy(dst + j, codes, (size_t)n);
    }
  }
#endif
  const int64_t rw1 = (1 << 16) / g->kernel_w, rh1 = (1 << 16) / g->kernel_h;
  for (; j < nc; ++j) dst[j] = nvdla_avg_r(g, zero, acc[j], in_rows * inside[j], rw1, rh1);
}

static void pool_rows(const pdp_geometry* g, int32_t zero, const int8_t* in, int8_t* out) {
  const int32_t W = g->w, sw = g->stride_w, kw = g->kernel_w;
  const int is_max = g->pool == ACCEL_POOL_MAX;
  enum { TAPS = ACCEL_MAX_POOL_KERNEL * ACCEL_MAX_POOL_KERNEL };
  int32_t acc[COLS], inside[COLS];
  int64_t lo[ACCEL_MAX_POOL_KERNEL], hi[ACCEL_MAX_POOL_KERNEL];
  int64_t tlo[TAPS], thi[TAPS];
  const int8_t* srcs[TAPS];
  for (int32_t c0 = 0; c0 < g->out_w; c0 += COLS) {
    const int32_t nc = g->out_w - c0 < COLS ? g->out_w - c0 : COLS;
    /* tap s sees columns j with input column (c0 + j) * sw - pad_left + s inside [0, W) */
    for (int32_t s = 0; s < kw; ++s) {
      const int64_t base = (int64_t)c0 * sw - g->pad_left + s;
      lo[s] = base >= 0 ? 0 : (-base + sw - 1) / sw;
      hi[s] = base > W - 1 ? 0 : (W - 1 - base) / sw + 1;
      if (hi[s] > nc) hi[s] = nc;
    }
    if (!is_max) { /* each column's image elements per row */
      for (int32_t j = 0; j < nc; ++j) {
        const int32_t x0 = (c0 + j) * sw - g->pad_left;
        const int32_t s0 = x0 < 0 ? -x0 : 0;
        const int32_t s1 = x0 + kw > W ? W - x0 : kw;
        inside[j] = s1 - s0;
      }
    }
    for (int32_t oy = 0; oy < g->out_h; ++oy) {
      const int32_t y0 = oy * g->stride_h - g->pad_top;
      const int32_t r0 = y0 < 0 ? -y0 : 0;
      const int32_t r1 = y0 + g->kernel_h > g->h ? g->h - y0 : g->kernel_h;
      int32_t ntaps = 0;
      for (int32_t r = r0; r < r1; ++r)
        for (int32_t s = 0; s < kw; ++s) {
          if (lo[s] >= hi[s]) continue;
          srcs[ntaps] = in + (int64_t)(y0 + r) * W + (int64_t)c0 * sw - g->pad_left + s;
          tlo[ntaps] = lo[s];
          thi[ntaps] = hi[s];
          ++ntaps;
        }
      int8_t* dst = out + (int64_t)oy * g->out_w + c0;
#ifdef POOL_AVX2
      if (is_max && sw <= 2) {
        max_row_avx2(sw, srcs, tlo, thi, ntaps, nc, acc, dst);
        continue;
      }
#endif
      int64_t j = 0;
#ifdef ROW_BLOCKS
      if (sw <= 2) {
        for (; j < nc; j += 32)
          row_block(is_max, sw, srcs, tlo, thi, ntaps, j, nc - j < 32 ? nc - j : 32, acc);
      }
#endif
      if (j < nc) {
        for (int32_t i = 0; i < nc; ++i) acc[i] = is_max ? -128 : 0;
        for (int32_t t = 0; t < ntaps; ++t) tap_scalar(is_max, sw, srcs[t], acc, tlo[t], thi[t]);
      }
      if (is_max) {
        for (int32_t i = 0; i < nc; ++i) dst[i] = (int8_t)acc[i];
      } else {
        finish_avg(g, acc, inside, r1 - r0, zero, nc, dst);
      }
    }
  }
}

/* Global average pooling (the window is the whole unpadded plane: at most 8x8 = 64 codes):
 * planes [p0, p1) of hw codes each, 16 at a time: each plane's sum from one masked 64-byte load
 * (vpsadbw on the codes + 128; AVX2: two 32-byte loads from 16 codes up, 49 scalar additions
 * a 7x7 plane before), then finish_avg on the 16 sums at once. Window by window
 * (pool_narrow) took ~100 cycles per 7x7 plane. */
static void pool_global(const pdp_geometry* g, int32_t zero, const int8_t* in, int8_t* out,
                        int64_t p0, int64_t p1) {
  const int64_t hw = (int64_t)g->h * g->w;
  int32_t acc[16], inside[16];
  for (int j = 0; j < 16; ++j) inside[j] = g->w;
#ifdef POOL_AVX2
  uint8_t keep[64]; /* 0xFF on a plane's bytes */
  for (int i = 0; i < 64; ++i) keep[i] = i < hw ? 0xFF : 0;
  const __m256i keep0 = _mm256_loadu_si256((const __m256i*)(const void*)keep);
  const __m256i keep1 = _mm256_loadu_si256((const __m256i*)(const void*)(keep + 32));
#endif
  for (int64_t p = p0; p < p1; p += 16) {
    const int64_t n = p1 - p < 16 ? p1 - p : 16;
#if defined(__AVX512F__) && defined(__AVX512BW__)
    const __mmask64 m = hw >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << hw) - 1;
    const __m512i flip = _mm512_maskz_mov_epi8(m, _mm512_set1_epi8((char)0x80));
    for (int64_t j = 0; j < n; ++j) {
      const __m512i u = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, in + (p + j) * hw), flip);
      acc[j] = (int32_t)(_mm512_reduce_add_epi64(_mm512_sad_epu8(u, _mm512_setzero_si512())) -
                         128 * hw);
    }
#else
    int64_t j = 0;
#ifdef POOL_AVX2
    /* planes of 16 codes or more: two 32-byte loads (one up to 32 codes), vpsadbw on the codes
     * + 128 with the bytes past the plane masked to 0; a plane whose loads would pass the
     * item's last plane (the buffer's end at most) is copied into a zeroed row first */
    if (hw >= 16) {
      const int64_t reach = hw > 32 ? 64 : 32;
      for (; j < n; ++j) {
        const int8_t* src = in + (p + j) * hw;
        int8_t row[64] = {0};
        if ((p1 - p - j) * hw < reach) {
          memcpy(row, src, (size_t)hw);
          src = row;
        }
        __m256i s = _mm256_sad_epu8(
            _mm256_and_si256(_mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(const void*)src),
                                              _mm256_set1_epi8((char)0x80)),
                             keep0),
            _mm256_setzero_si256());
        if (hw > 32)
          s = _mm256_add_epi64(
              s, _mm256_sad_epu8(_mm256_and_si256(_mm256_xor_si256(_mm256_loadu_si256(
                                                      (const __m256i*)(const void*)(src + 32)),
                                                  _mm256_set1_epi8((char)0x80)),
                                                  keep1),
                                 _mm256_setzero_si256()));
        const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        acc[j] = (int32_t)(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1) - 128 * hw);
      }
    }
#endif
    for (; j < n; ++j) {
      int32_t sum = 0;
      for (int64_t i = 0; i < hw; ++i) sum += in[(p + j) * hw + i];
      acc[j] = sum;
    }
#endif
    finish_avg(g, acc, inside, g->h, zero, n, out + p);
  }
}

/* Average over non-overlapping windows from the top left (stride = kernel, no top or left
 * padding; windows at the bottom and right may be cut by the plane's edge, NVDLA's padding
 * counts the rest): the passes of a wide or global average (compiler/layer.py, PoolSpec.passes).
 * Each output row sums its input rows into int16 column sums (<= 8 x 128 in magnitude), then
 * each window sums its columns: every code read once, where window by window (pool_narrow)
 * reads them one at a time. The sums are the window's codes, as pool_narrow's. AVX2 builds
 * sum whole windows of 2..8 columns without the column sums (vpsadbw), the rest as above with
 * 16 / 8 columns a step (the scalar loops took 0.7-0.9 ns a code: docs/kernels.md). `readable`:
 * the bytes from `in` to the input's end, which the 16-byte loads stay within. */
enum { BLOCK_COLS = 4096 };

static int blocks_apply(const pdp_geometry* g) {
  return g->pool == ACCEL_POOL_AVG && g->stride_h == g->kernel_h && g->stride_w == g->kernel_w &&
         g->pad_top == 0 && g->pad_left == 0 && g->w <= BLOCK_COLS &&
         (int64_t)g->out_h * g->kernel_h < (int64_t)g->h + g->kernel_h &&
         (int64_t)g->out_w * g->kernel_w < (int64_t)g->w + g->kernel_w;
}

static void pool_blocks(const pdp_geometry* g, int32_t zero, const int8_t* in, int8_t* out,
                        int64_t readable) {
  (void)readable;
  const int32_t W = g->w, kh = g->kernel_h, kw = g->kernel_w;
  int16_t col[BLOCK_COLS];
  int32_t sum[BLOCK_COLS], inside[BLOCK_COLS];
  for (int32_t ox = 0; ox < g->out_w; ++ox)
    inside[ox] = W - ox * kw < kw ? W - ox * kw : kw; /* the window's columns in the plane */
#ifdef POOL_AVX2
  const int32_t whole = W / kw < g->out_w ? W / kw : g->out_w; /* windows inside the plane */
  int8_t pick[16]; /* vpshufb's: two windows of a 16-byte load, each into its own 8 bytes */
  for (int32_t i = 0; i < 8; ++i) {
    pick[i] = i < kw ? (int8_t)i : (int8_t)-128;
    pick[8 + i] = i < kw ? (int8_t)(kw + i) : (int8_t)-128;
  }
#endif
  for (int32_t oy = 0; oy < g->out_h; ++oy) {
    const int32_t y0 = oy * kh, rows = g->h - y0 < kh ? g->h - y0 : kh;
    int32_t x = 0, ox0 = 0; /* windows [0, ox0) summed already, from column ox0 kw on */
#ifdef POOL_AVX2
    if (kw >= 2 && kw <= 8) {
      /* whole windows straight from the codes: 16 bytes from a window's first column hold two
       * windows, vpshufb puts each in its own 8 bytes (the rest zeroed) and vpsadbw sums each
       * 8 bytes (of the codes + 128), the rows added in int64: 4 windows per 256-bit step,
       * then 2 per 128-bit one; loads reach 16 bytes from their column, within `readable`
       * (the last row's load decides) */
      const int64_t last = (int64_t)(y0 + rows - 1) * W;
      const __m128i idx = _mm_loadu_si128((const __m128i*)(const void*)pick);
      const __m256i idx2 = _mm256_broadcastsi128_si256(idx);
      const __m256i flip = _mm256_set1_epi8((char)0x80);
      for (; ox0 + 4 <= whole && last + (int64_t)kw * (ox0 + 2) + 16 <= readable; ox0 += 4) {
        __m256i a = _mm256_setzero_si256();
        for (int32_t r = 0; r < rows; ++r) {
          const int8_t* q = in + (int64_t)(y0 + r) * W + (int64_t)kw * ox0;
          __m256i v;
          if (kw == 8) { /* the windows lie as vpsadbw sums them */
            v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(const void*)q), flip);
          } else {
            v = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i*)(const void*)q)),
                _mm_loadu_si128((const __m128i*)(const void*)(q + 2 * kw)), 1);
            v = _mm256_shuffle_epi8(_mm256_xor_si256(v, flip), idx2);
          }
          a = _mm256_add_epi64(a, _mm256_sad_epu8(v, _mm256_setzero_si256()));
        }
        /* each sum < 2^16: its low dword, less the 128 added to each of kw x rows codes */
        const __m256i d = _mm256_sub_epi32(
            _mm256_permutevar8x32_epi32(a, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)),
            _mm256_set1_epi32(128 * kw * rows));
        _mm_storeu_si128((__m128i*)(void*)(sum + ox0), _mm256_castsi256_si128(d));
      }
      for (; ox0 + 2 <= whole && last + (int64_t)kw * ox0 + 16 <= readable; ox0 += 2) {
        __m128i a = _mm_setzero_si128();
        for (int32_t r = 0; r < rows; ++r) {
          const __m128i v = _mm_loadu_si128(
              (const __m128i*)(const void*)(in + (int64_t)(y0 + r) * W + (int64_t)kw * ox0));
          a = _mm_add_epi64(a, _mm_sad_epu8(_mm_shuffle_epi8(_mm_xor_si128(v, _mm256_castsi256_si128(flip)), idx),
                                            _mm_setzero_si128()));
        }
        const __m128i d = _mm_sub_epi32(_mm_shuffle_epi32(a, _MM_SHUFFLE(2, 0, 2, 0)),
                                        _mm_set1_epi32(128 * kw * rows));
        _mm_storel_epi64((__m128i*)(void*)(sum + ox0), d);
      }
      x = kw * ox0;
    }
    /* the other columns' sums in int16 lanes, 16 and then 8 columns a step */
    for (; x + 16 <= W; x += 16) {
      __m256i a = _mm256_setzero_si256();
      for (int32_t r = 0; r < rows; ++r)
        a = _mm256_add_epi16(a, _mm256_cvtepi8_epi16(_mm_loadu_si128(
                                    (const __m128i*)(const void*)(in + (int64_t)(y0 + r) * W + x))));
      _mm256_storeu_si256((__m256i*)(void*)(col + x), a);
    }
    for (; x + 8 <= W; x += 8) {
      __m128i a = _mm_setzero_si128();
      for (int32_t r = 0; r < rows; ++r)
        a = _mm_add_epi16(a, _mm_cvtepi8_epi16(_mm_loadl_epi64(
                                 (const __m128i*)(const void*)(in + (int64_t)(y0 + r) * W + x))));
      _mm_storeu_si128((__m128i*)(void*)(col + x), a);
    }
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    for (; x < W; x += 32) { /* 32 columns a step, the rows summed in registers */
      const __mmask32 m = W - x >= 32 ? ~(__mmask32)0 : (__mmask32)((1u << (W - x)) - 1u);
      __m512i a = _mm512_setzero_si512();
      for (int32_t r = 0; r < rows; ++r)
        a = _mm512_add_epi16(a, _mm512_cvtepi8_epi16(
                                    _mm256_maskz_loadu_epi8(m, in + (int64_t)(y0 + r) * W + x)));
      _mm512_mask_storeu_epi16(col + x, m, a);
    }
#endif
    for (; x < W; ++x) {
      int16_t c = 0;
      for (int32_t r = 0; r < rows; ++r) c = (int16_t)(c + in[(int64_t)(y0 + r) * W + x]);
      col[x] = c;
    }
    for (int32_t ox = ox0; ox < g->out_w; ++ox) {
      const int16_t* c = col + ox * kw;
      int32_t t = 0;
      for (int32_t s = 0; s < inside[ox]; ++s) t += c[s];
      sum[ox] = t;
    }
    finish_avg(g, sum, inside, rows, zero, g->out_w, out + (int64_t)oy * g->out_w);
  }
}

typedef struct pdp_job {
  const pdp_geometry* g;
  int32_t zero;
  const int8_t* in;
  int8_t* out;
  int64_t planes, per_item;
  int global; /* AVG over whole unpadded planes: pool_global */
} pdp_job;

/* Planes [item * per_item, ...) (pool_for items). */
static void pdp_item(void* ctx, int64_t item, int participant) {
  const pdp_job* J = ctx;
  const pdp_geometry* g = J->g;
  const int64_t in_plane = (int64_t)g->h * g->w, out_plane = (int64_t)g->out_h * g->out_w;
  (void)participant;
  if (J->global) {
    const int64_t p1 = (item + 1) * J->per_item;
    pool_global(g, J->zero, J->in, J->out, item * J->per_item, p1 < J->planes ? p1 : J->planes);
    return;
  }
  for (int64_t plane = item * J->per_item; plane < (item + 1) * J->per_item && plane < J->planes;
       ++plane) {
    if (blocks_apply(g)) {
      pool_blocks(g, J->zero, J->in + plane * in_plane, J->out + plane * out_plane,
                  (J->planes - plane) * in_plane);
    } else if (g->out_w < NARROW) {
#ifdef __SSE4_1__
      if (narrow_max_applies(g)) {
        pool_narrow_max(g, J->in + plane * in_plane, J->out + plane * out_plane);
        continue;
      }
#endif
      pool_narrow(g, J->zero, J->in + plane * in_plane, J->out + plane * out_plane);
    } else {
      pool_rows(g, J->zero, J->in + plane * in_plane, J->out + plane * out_plane);
    }
  }
}

void pdp_i8(const pdp_geometry* g, int32_t zero, const int8_t* in, int8_t* out,
            int32_t num_threads) {
  const int64_t planes = (int64_t)g->n * g->c;
  const int64_t in_plane = (int64_t)g->h * g->w;
  const int participants = planes * in_plane > 32768 && num_threads > 1 ? num_threads : 1;
  /* items of about 16 KiB of input */
  const int64_t per_item = 16384 / (in_plane + 1) + 1;
  const int global = g->pool == ACCEL_POOL_AVG && g->out_h == 1 && g->out_w == 1 &&
                     g->kernel_h == g->h && g->kernel_w == g->w && g->pad_top == 0 &&
                     g->pad_left == 0 && in_plane <= 64;
  const pdp_job J = {.g = g, .zero = zero, .in = in, .out = out, .planes = planes,
                     .per_item = per_item, .global = global};
  pool_for(participants, (planes + per_item - 1) / per_item, pdp_item, (void*)&J);
}
