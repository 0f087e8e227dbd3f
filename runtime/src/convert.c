/* convert.c - data crossing the accelerator's boundary: quantise, dequantise, narrow, widen. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "internal.h"

static int8_t quantize(float x, double scale, int32_t zero) {
  if (x != x) return (int8_t)zero;
  const double q = round((double)x / scale) + zero; /* round(): half away from zero */
  return (int8_t)(q < INT8_MIN ? INT8_MIN : q > INT8_MAX ? INT8_MAX : q);
}

/* The same codes 16 floats at a time without a division (the scalar loop's double division
 * and libm round, and even a vector double division, were a visible share of an int8
 * inference: docs/kernels.md, runtime/src/convert.c). x and scale are floats, so x / scale is never
 * within 2^-26 of a half-integer unless it is one exactly: the double quotient rounds as the
 * exact one does. Here m = trunc(|x| * (1 / scale)) in float (off by at most one near an
 * integer), clamped to 1024 (every code saturates from there, as does infinity); the exact
 * rounding of |x| / scale is then m + 1 when (m + 0.5) * scale - |x| <= 0, else m. One fused
 * multiply-add rounds that difference once, which keeps its sign (and zero) unless it falls
 * below the smallest float, which cannot happen for scale >= 2^-100 (a nonzero difference is
 * then a multiple of 2^-125 or at least 2^-102); smaller scales take the scalar loop. NaN
 * gives the zero point. Returns the elements done (whole vectors). */
static int64_t quantize_vector(const float* x, double scale, int32_t zero, int8_t* q,
                               int64_t count) {
#ifdef __AVX512F__
  if (!(scale >= 0x1p-100)) return 0;
  const __m512 inv = _mm512_set1_ps((float)(1.0 / scale)), s = _mm512_set1_ps((float)scale);
  const __m512 one = _mm512_set1_ps(1.0f), half = _mm512_set1_ps(0.5f);
  const __m512 top = _mm512_set1_ps(1024.0f), z = _mm512_set1_ps((float)zero);
  const __m512 lo = _mm512_set1_ps(INT8_MIN), hi = _mm512_set1_ps(INT8_MAX);
  const __m512i sign = _mm512_set1_epi32(INT32_MIN);
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 a = _mm512_abs_ps(v);
    /* min(NaN, top) is top: NaN lanes are replaced below */
    const __m512 m = _mm512_min_ps(
        _mm512_roundscale_ps(_mm512_mul_ps(a, inv), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC), top);
    const __m512 d = _mm512_fmsub_ps(_mm512_add_ps(m, half), s, a); /* m + 0.5 exact */
    const __mmask16 up = _mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_LE_OQ);
    const __m512 mag = _mm512_mask_add_ps(m, up, m, one);
    const __m512 signed_mag = _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(mag), _mm512_and_si512(_mm512_castps_si512(v), sign)));
    __m512 r = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(signed_mag, z), lo), hi);
    r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), r, z);
    _mm_storeu_si128((__m128i*)(q + i), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r)));
  }
  return i;
#elif defined(__AVX2__) && defined(__FMA__)
  /* the same steps 8 floats at a time (no mask registers: the rounding up and the NaN lanes
   * by blends; min_ps returns its second operand for a NaN, as the 16-lane form's does) */
  if (!(scale >= 0x1p-100)) return 0;
  const __m256 inv = _mm256_set1_ps((float)(1.0 / scale)), s = _mm256_set1_ps((float)scale);
  const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
  const __m256 top = _mm256_set1_ps(1024.0f), z = _mm256_set1_ps((float)zero);
  const __m256 lo = _mm256_set1_ps(INT8_MIN), hi = _mm256_set1_ps(INT8_MAX);
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN));
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 a = _mm256_andnot_ps(sign, v);
    const __m256 m = _mm256_min_ps(
        _mm256_round_ps(_mm256_mul_ps(a, inv), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC), top);
    const __m256 d = _mm256_fmsub_ps(_mm256_add_ps(m, half), s, a); /* m + 0.5 exact */
    const __m256 up = _mm256_cmp_ps(d, _mm256_setzero_ps(), _CMP_LE_OQ);
    const __m256 mag = _mm256_add_ps(m, _mm256_and_ps(up, one));
    const __m256 signed_mag = _mm256_or_ps(mag, _mm256_and_ps(v, sign));
    __m256 r = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(signed_mag, z), lo), hi);
    r = _mm256_blendv_ps(r, z, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256i c = _mm256_cvtps_epi32(r); /* integers in [-128, 127]: the packs keep them */
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
    _mm_storel_epi64((__m128i*)(q + i), _mm_packs_epi16(w, w));
  }
  return i;
#else
  (void)x, (void)scale, (void)zero, (void)q, (void)count;
  return 0;
#endif
}

static int64_t dequantize_vector(const int8_t* q, double scale, int32_t zero, float* x,
                                 int64_t count) {
#ifdef __AVX512F__
  const __m512d s = _mm512_set1_pd(scale), z = _mm512_set1_pd((double)zero);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i codes = _mm_loadl_epi64((const __m128i*)(q + i));
    const __m512d v = _mm512_cvtepi32_pd(_mm256_cvtepi8_epi32(codes));
    _mm256_storeu_ps(x + i, _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_sub_pd(v, z), s)));
  }
  return i;
#elif defined(__AVX2__)
  /* 4 doubles a vector: the scalar loop's double subtraction and product, then its rounding */
  const __m256d s = _mm256_set1_pd(scale), z = _mm256_set1_pd((double)zero);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256i codes = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(q + i)));
    const __m256d v0 = _mm256_cvtepi32_pd(_mm256_castsi256_si128(codes));
    const __m256d v1 = _mm256_cvtepi32_pd(_mm256_extracti128_si256(codes, 1));
    _mm_storeu_ps(x + i, _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_sub_pd(v0, z), s)));
    _mm_storeu_ps(x + i + 4, _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_sub_pd(v1, z), s)));
  }
  return i;
#else
  (void)q, (void)scale, (void)zero, (void)x, (void)count;
  return 0;
#endif
}

accel_status accel_convert(const void* src, accel_precision from, void* dst, accel_precision to,
                           int64_t count, float scale, int32_t zero) {
  if (src == NULL || dst == NULL) return accel_fail(ACCEL_ERR_NULL, "src or dst is NULL");
  if (count < 0) return accel_fail(ACCEL_ERR_INVALID, "count = %lld is negative", (long long)count);
  const int quantizing = from == ACCEL_FP32 && to == ACCEL_INT8;
  const int dequantizing = from == ACCEL_INT8 && to == ACCEL_FP32;
  if (quantizing || dequantizing) {
    if (!(scale > 0.0f) || isinf(scale)) {
      return accel_fail(ACCEL_ERR_INVALID, "scale = %g must be positive and finite",
                        (double)scale);
    }
    if (zero < INT8_MIN || zero > INT8_MAX) {
      return accel_fail(ACCEL_ERR_INVALID, "zero = %d is outside [-128, 127]", zero);
    }
  }
  const uintptr_t from_bytes = from == ACCEL_FP32 ? 4 : from == ACCEL_FP16 ? 2 : 1;
  const uintptr_t to_bytes = to == ACCEL_FP32 ? 4 : to == ACCEL_FP16 ? 2 : 1;
  if ((uintptr_t)src % from_bytes != 0) {
    return accel_fail(ACCEL_ERR_ALIGNMENT, "src = %p is not aligned to its %s elements", src,
                      precision_name(from));
  }
  if ((uintptr_t)dst % to_bytes != 0) {
    return accel_fail(ACCEL_ERR_ALIGNMENT, "dst = %p is not aligned to its %s elements", dst,
                      precision_name(to));
  }
  const char* s = src;
  const char* d = dst;
  if (count > 0 && s < d + count * (int64_t)to_bytes && d < s + count * (int64_t)from_bytes) {
    return accel_fail(ACCEL_ERR_INVALID, "src %p and dst %p overlap", src, dst);
  }
  if (quantizing) {
    const float* x = src;
    int8_t* q = dst;
    const int64_t done = quantize_vector(x, (double)scale, zero, q, count);
    for (int64_t i = done; i < count; ++i) q[i] = quantize(x[i], (double)scale, zero);
  } else if (dequantizing) {
    const int8_t* q = src;
    float* x = dst;
    const int64_t done = dequantize_vector(q, (double)scale, zero, x, count);
    for (int64_t i = done; i < count; ++i) x[i] = (float)(((double)q[i] - zero) * (double)scale);
  } else if (from == ACCEL_FP32 && to == ACCEL_FP16) {
    float_to_half(src, dst, count);
  } else if (from == ACCEL_FP16 && to == ACCEL_FP32) {
    half_to_float(src, dst, count);
  } else if (from == ACCEL_FP32 && to == ACCEL_FP32) {
    memcpy(dst, src, (size_t)count * sizeof(float));
  } else {
    return accel_fail(ACCEL_ERR_UNSUPPORTED, "no conversion from %s to %s",
                      precision_name(from), precision_name(to));
  }
  return ACCEL_OK;
}

/* Tiles of TILE x TILE elements: each tile's rows read and its columns written while both stay
 * in L1 (a row-major walk of a [197, 768] matrix writes a new cache line per element). */
enum { TRANSPOSE_TILE = 32 };

#define TRANSPOSE_TILES(T)                                                                 \
  static void transpose_##T(const T* s, T* d, int64_t rows, int64_t cols) {               \
    for (int64_t i0 = 0; i0 < rows; i0 += TRANSPOSE_TILE) {                               \
      const int64_t i1 = i0 + TRANSPOSE_TILE < rows ? i0 + TRANSPOSE_TILE : rows;         \
      for (int64_t j0 = 0; j0 < cols; j0 += TRANSPOSE_TILE) {                             \
        const int64_t j1 = j0 + TRANSPOSE_TILE < cols ? j0 + TRANSPOSE_TILE : cols;       \
        for (int64_t j = j0; j < j1; ++j)                                                 \
          for (int64_t i = i0; i < i1; ++i) d[j * rows + i] = s[i * cols + j];            \
      }                                                                                   \
    }                                                                                     \
  }
#ifdef __SSE2__
/* 1- and 2-byte elements (int8 and FP16 token tensors: an int8 transformer's attention moves
 * both) in whole blocks held in 16 or 8 SSE registers, B x B for B = 16 / element bytes:
 * the rows interleaved by elements, then by pairs, quads and halves, each register a column;
 * the scalar tiles (an element per load and store) take the ragged edges. The bits are moved,
 * never computed on. */
static void transpose_blocks_u8(const uint8_t* s, uint8_t* d, int64_t rows, int64_t cols) {
  for (int64_t i0 = 0; i0 + 16 <= rows; i0 += 16) {
    for (int64_t j0 = 0; j0 + 16 <= cols; j0 += 16) {
      __m128i a[16], b[16];
      for (int i = 0; i < 16; ++i)
        a[i] = _mm_loadu_si128((const __m128i*)(s + (i0 + i) * cols + j0));
      for (int i = 0; i < 16; i += 2) { /* row pairs: columns 0-7, 8-15 */
        b[i] = _mm_unpacklo_epi8(a[i], a[i + 1]);
        b[i + 1] = _mm_unpackhi_epi8(a[i], a[i + 1]);
      }
      for (int i = 0; i < 16; i += 4) { /* row quads: columns 0-3, 4-7, 8-11, 12-15 */
        a[i] = _mm_unpacklo_epi16(b[i], b[i + 2]);
        a[i + 1] = _mm_unpackhi_epi16(b[i], b[i + 2]);
        a[i + 2] = _mm_unpacklo_epi16(b[i + 1], b[i + 3]);
        a[i + 3] = _mm_unpackhi_epi16(b[i + 1], b[i + 3]);
      }
      for (int g = 0; g < 16; g += 8) /* row octets: columns 2k, 2k + 1 in b[g + k] */
        for (int k = 0; k < 4; ++k) {
          b[g + 2 * k] = _mm_unpacklo_epi32(a[g + k], a[g + 4 + k]);
          b[g + 2 * k + 1] = _mm_unpackhi_epi32(a[g + k], a[g + 4 + k]);
        }
      for (int k = 0; k < 8; ++k) { /* rows 0-7 with 8-15: columns 2k and 2k + 1 */
        _mm_storeu_si128((__m128i*)(d + (j0 + 2 * k) * rows + i0),
                         _mm_unpacklo_epi64(b[k], b[k + 8]));
        _mm_storeu_si128((__m128i*)(d + (j0 + 2 * k + 1) * rows + i0),
                         _mm_unpackhi_epi64(b[k], b[k + 8]));
      }
    }
  }
}

static void transpose_blocks_u16(const uint16_t* s, uint16_t* d, int64_t rows, int64_t cols) {
  for (int64_t i0 = 0; i0 + 8 <= rows; i0 += 8) {
    for (int64_t j0 = 0; j0 + 8 <= cols; j0 += 8) {
      __m128i a[8], b[8];
      for (int i = 0; i < 8; ++i)
        a[i] = _mm_loadu_si128((const __m128i*)(s + (i0 + i) * cols + j0));
      for (int i = 0; i < 8; i += 2) { /* row pairs: columns 0-3, 4-7 */
        b[i] = _mm_unpacklo_epi16(a[i], a[i + 1]);
        b[i + 1] = _mm_unpackhi_epi16(a[i], a[i + 1]);
      }
      for (int g = 0; g < 8; g += 4) /* row quads: columns 2k, 2k + 1 in a[g + k] */
        for (int k = 0; k < 2; ++k) {
          a[g + 2 * k] = _mm_unpacklo_epi32(b[g + k], b[g + 2 + k]);
          a[g + 2 * k + 1] = _mm_unpackhi_epi32(b[g + k], b[g + 2 + k]);
        }
      for (int k = 0; k < 4; ++k) { /* rows 0-3 with 4-7: columns 2k and 2k + 1 */
        _mm_storeu_si128((__m128i*)(d + (j0 + 2 * k) * rows + i0),
                         _mm_unpacklo_epi64(a[k], a[k + 4]));
        _mm_storeu_si128((__m128i*)(d + (j0 + 2 * k + 1) * rows + i0),
                         _mm_unpackhi_epi64(a[k], a[k + 4]));
      }
    }
  }
}
#endif

/* Element by element, what the blocks (B x B from the corner) leave: the rows below the last
 * whole block, then the columns right of it in the rows above. */
#define TRANSPOSE_EDGES(T, B, blocks)                                                      \
  static void transpose_##T(const T* s, T* d, int64_t rows, int64_t cols) {               \
    blocks(s, d, rows, cols);                                                             \
    const int64_t rb = rows - rows % (B), cb = cols - cols % (B);                         \
    for (int64_t j = 0; j < cols; ++j)                                                    \
      for (int64_t i = rb; i < rows; ++i) d[j * rows + i] = s[i * cols + j];             \
    for (int64_t j = cb; j < cols; ++j)                                                   \
      for (int64_t i = 0; i < rb; ++i) d[j * rows + i] = s[i * cols + j];                \
  }
#ifdef __SSE2__
TRANSPOSE_EDGES(uint8_t, 16, transpose_blocks_u8)
TRANSPOSE_EDGES(uint16_t, 8, transpose_blocks_u16)
#else
TRANSPOSE_TILES(uint8_t)
TRANSPOSE_TILES(uint16_t)
#endif
#undef TRANSPOSE_EDGES
#if !defined(__AVX512F__) && !defined(__AVX2__)
TRANSPOSE_TILES(uint32_t)
#endif
#undef TRANSPOSE_TILES

#ifdef __AVX512F__
/* 4-byte elements in blocks of 16 x 16 held in registers: 16 row loads, four rounds of
 * shuffles, 16 column stores (the scalar tiles moved an element per load and store, about
 * 1.5 ns an element on ViT-B's [197, 768] token tensors, a tenth of its time between runs).
 * Ragged blocks at the bottom and right edges load their rows with a mask (missing rows as
 * zeros) and store only the columns' existing lanes, so every byte written is a source byte and
 * nothing past either matrix is touched. The bits are moved, never computed on. */
static inline void transpose_block16(const uint32_t* s, uint32_t* d, int64_t rows, int64_t cols,
                                     int64_t nr, int64_t nc) {
  const __mmask16 load = (__mmask16)((1u << nc) - 1u), store = (__mmask16)((1u << nr) - 1u);
  __m512i r[16], t[16];
  for (int i = 0; i < 16; ++i)
    r[i] = i < nr ? _mm512_maskz_loadu_epi32(load, s + i * cols) : _mm512_setzero_si512();
  for (int i = 0; i < 16; i += 2) { /* 32-bit pairs */
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) { /* 64-bit pairs */
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  /* each r[i] now holds, per 128-bit lane L, column (i % 4) + 4 L of rows i - i % 4 .. + 3 */
  for (int i = 0; i < 4; ++i) { /* 128-bit lanes: rows 0-3 with 4-7, 8-11 with 12-15 */
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);      /* lanes 0, 2 of each */
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);  /* lanes 1, 3 */
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 4; ++i) {
    /* columns i, 4 + i, 8 + i, 12 + i: rows 0-7 from t[i] / t[i + 4], 8-15 from t[i + 8] / t[i + 12] */
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
    r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xdd);
  }
  for (int j = 0; j < nc; ++j) _mm512_mask_storeu_epi32(d + j * rows, store, r[j]);
}

static void transpose_uint32_t(const uint32_t* s, uint32_t* d, int64_t rows, int64_t cols) {
  for (int64_t i0 = 0; i0 < rows; i0 += TRANSPOSE_TILE) {
    const int64_t i1 = i0 + TRANSPOSE_TILE < rows ? i0 + TRANSPOSE_TILE : rows;
    for (int64_t j0 = 0; j0 < cols; j0 += TRANSPOSE_TILE) {
      const int64_t j1 = j0 + TRANSPOSE_TILE < cols ? j0 + TRANSPOSE_TILE : cols;
      for (int64_t i = i0; i < i1; i += 16)
        for (int64_t j = j0; j < j1; j += 16)
          transpose_block16(s + i * cols + j, d + j * rows + i, rows, cols,
                            i1 - i < 16 ? i1 - i : 16, j1 - j < 16 ? j1 - j : 16);
    }
  }
}
#elif defined(__AVX2__)
/* The same with AVX2's 8 x 8 blocks (hosts without AVX-512, which ran the scalar tiles: their
 * share of a ViT-Ti inference before and after is in docs/transformer_ops.md): 8 row loads,
 * three rounds of shuffles (32-bit pairs, 64-bit pairs, 128-bit halves), 8 column stores.
 * Ragged blocks load their rows' existing lanes (missing rows as zeros) and store only the
 * columns' existing lanes, as the AVX-512 path does; the shuffles move bits, never compute on
 * them. */
static inline __m256i lanes_below(int64_t n) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), index);
}

static inline void transpose_block8(const uint32_t* s, uint32_t* d, int64_t rows, int64_t cols,
                                    int64_t nr, int64_t nc) {
  const int whole = nr == 8 && nc == 8;
  const __m256i load = lanes_below(nc), store = lanes_below(nr);
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) {
    const int* row = (const int*)(s + i * cols);
    r[i] = whole ? _mm256_loadu_ps((const float*)row)
         : i < nr ? _mm256_castsi256_ps(_mm256_maskload_epi32(row, load)) : _mm256_setzero_ps();
  }
  for (int i = 0; i < 8; i += 2) { /* 32-bit pairs */
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) { /* 64-bit pairs */
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  /* r[i] (i < 4) holds columns i and 4 + i of rows 0-3; r[4 + i] the same of rows 4-7 */
  for (int i = 0; i < 4; ++i) { /* 128-bit halves */
    t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
    t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
  }
  for (int j = 0; j < nc; ++j) {
    if (nr == 8)
      _mm256_storeu_ps((float*)(d + j * rows), t[j]);
    else
      _mm256_maskstore_epi32((int*)(d + j * rows), store, _mm256_castps_si256(t[j]));
  }
}

static void transpose_uint32_t(const uint32_t* s, uint32_t* d, int64_t rows, int64_t cols) {
  for (int64_t i0 = 0; i0 < rows; i0 += TRANSPOSE_TILE) {
    const int64_t i1 = i0 + TRANSPOSE_TILE < rows ? i0 + TRANSPOSE_TILE : rows;
    for (int64_t j0 = 0; j0 < cols; j0 += TRANSPOSE_TILE) {
      const int64_t j1 = j0 + TRANSPOSE_TILE < cols ? j0 + TRANSPOSE_TILE : cols;
      for (int64_t i = i0; i < i1; i += 8)
        for (int64_t j = j0; j < j1; j += 8)
          transpose_block8(s + i * cols + j, d + j * rows + i, rows, cols,
                           i1 - i < 8 ? i1 - i : 8, j1 - j < 8 ? j1 - j : 8);
    }
  }
}
#endif

accel_status accel_transpose(const void* src, void* dst, int64_t batch, int64_t rows,
                             int64_t cols, int32_t element_bytes) {
  if (src == NULL || dst == NULL) return accel_fail(ACCEL_ERR_NULL, "src or dst is NULL");
  if (batch < 0 || rows < 0 || cols < 0) {
    return accel_fail(ACCEL_ERR_INVALID, "batch = %lld, rows = %lld, cols = %lld: one is "
                      "negative", (long long)batch, (long long)rows, (long long)cols);
  }
  if (element_bytes != 1 && element_bytes != 2 && element_bytes != 4) {
    return accel_fail(ACCEL_ERR_INVALID, "element_bytes = %d is not 1, 2 or 4", element_bytes);
  }
  if ((uintptr_t)src % (uintptr_t)element_bytes != 0 ||
      (uintptr_t)dst % (uintptr_t)element_bytes != 0) {
    return accel_fail(ACCEL_ERR_ALIGNMENT, "src = %p or dst = %p is not aligned to its %d-byte "
                      "elements", src, dst, element_bytes);
  }
  int64_t matrix, elements, bytes;
  if (__builtin_mul_overflow(rows, cols, &matrix) ||
      __builtin_mul_overflow(batch, matrix, &elements) ||
      __builtin_mul_overflow(elements, (int64_t)element_bytes, &bytes)) {
    return accel_fail(ACCEL_ERR_INVALID, "batch = %lld, rows = %lld, cols = %lld of %d-byte "
                      "elements: the tensor's byte count overflows int64", (long long)batch,
                      (long long)rows, (long long)cols, element_bytes);
  }
  const char* s = src;
  const char* d = dst;
  if (bytes > 0 && s < d + bytes && d < s + bytes) {
    return accel_fail(ACCEL_ERR_INVALID, "src %p and dst %p overlap", src, dst);
  }
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t at = b * matrix;
    if (element_bytes == 4) {
      transpose_uint32_t((const uint32_t*)src + at, (uint32_t*)dst + at, rows, cols);
    } else if (element_bytes == 2) {
      transpose_uint16_t((const uint16_t*)src + at, (uint16_t*)dst + at, rows, cols);
    } else {
      transpose_uint8_t((const uint8_t*)src + at, (uint8_t*)dst + at, rows, cols);
    }
  }
  return ACCEL_OK;
}
