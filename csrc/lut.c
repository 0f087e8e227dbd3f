/* lut.c - the SDP's lookup-table activations in FP32: their exact forms (accel.h), in vectors
 * where the build has AVX-512 or AVX2 + FMA. The FP16 LUT model is lut_tables.c's, the INT8
 * LUT sdp_i8_lut.c's. */
#include <math.h>
#include <string.h>

#include "kernels.h"

/* The 8-lane passes need FMA as well as AVX2 (exp_f32 and gelu_f32 are defined with fused
 * multiply-adds); an AVX2 build without FMA, or without AVX2, runs the scalar forms. */
#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#define LUT_AVX2 1
#else
#define LUT_AVX2 0
#endif


/* a b + c rounded once: fmaf, one instruction where the target has FMA; in an x86-64 baseline
 * build libm's exact software fmaf, a call each (slower, the price of one definition of the
 * bits on every host: docs/kernels.md). The NumPy reference's fma_f32 rounds alike. */
static inline float fma_f32(float a, float b, float c) { return fmaf(a, b, c); }

/* exp in fp32 (accel.h: FP32's sigmoid, silu and exp), in fp32 operations and fused
 * multiply-adds (fma_f32, above: one rounding; no other libm call, no branch), so every build gives
 * the same bits, and so does the NumPy reference (exp_f32 in lut_math.py, the same operations
 * in the same order, its fma_f32 the same rounding). The multiply-adds fused (k, the second
 * reduction step, the polynomial's Horner steps and r + r^2 q) save 7 of its ~25 operations:
 *  - t is held to [-104, 89] (NaN stays): beyond, e^t rounds to 0 or overflows either way;
 *  - n = round(t log2(e)) by the 1.5 2^23 trick (ties to even), r = t - n ln2 in two steps
 *    (ln2's high part has 9 bits, so n * LN2_HI is exact for |n| <= 151);
 *  - e^r = 1 + r + r^2 q(r) on |r| <= ln2 / 2, q a degree-4 polynomial fitted to
 *    (e^r - 1 - r) / r^2 (truncation error 3.1e-9 relative);
 *  - times 2^n as two powers of two built from n's bits (2^h, 2^(n-h), h = n >> 1), each
 *    normal for the held t, so subnormal results round once.
 * Error, over every fp32 input against exp in double: at most 1.01 ulp (1.0095 at t = -59.92;
 * libm's expf: 0.51); it overflows to infinity at the same inputs as libm's. */
static const float EXP_LOG2E = 1.44269502163f, EXP_ROUND = 12582912.0f; /* 1.5 2^23 */
static const float LN2_HI = 0.693359375f, LN2_LO = -2.12194440e-4f;
static const float EXP_Q0 = 4.999999404e-01f, EXP_Q1 = 1.666652113e-01f,
                   EXP_Q2 = 4.166838899e-02f, EXP_Q3 = 8.368745446e-03f,
                   EXP_Q4 = 1.381453942e-03f;

/* e^(A + D) taken apart (exp_f32: D none, WITH_D 0; gelu_f32: A, D its tail): k = (A + D)
 * log2(e) + 1.5 2^23 rounded once, whose bits hold n = round((A + D) / ln 2) (ties to even,
 * |n| <= 151), r = A - n LN2_HI (exact), + D, - n LN2_LO, and p = 1 + r + r^2 q(r) returned,
 * every multiply-add fused; e^(A + D) = p 2^n (exp_scales). The NumPy reference's _exp_parts
 * is the same steps. */
static inline float exp_parts(float a, float d, const int with_d, float* k_out) {
  const float k = fma_f32(with_d ? a + d : a, EXP_LOG2E, EXP_ROUND);
  const float n = k - EXP_ROUND;
  float r = fma_f32(-n, LN2_HI, a); /* exact product */
  if (with_d) r = r + d;
  r = fma_f32(-n, LN2_LO, r);
  float q = fma_f32(EXP_Q4, r, EXP_Q3);
  q = fma_f32(q, r, EXP_Q2);
  q = fma_f32(q, r, EXP_Q1);
  q = fma_f32(q, r, EXP_Q0);
  const float p = fma_f32(r * r, q, r);
  *k_out = k;
  return p + 1.0f;
}

/* 2^h and 2^(n - h) as float bits, h = n >> 1, n from k's bits (k's minus 1.5 2^23's, two's
 * complement): each normal where the exps hold their arguments, multiplied in one at a time,
 * so a subnormal result rounds once. */
static inline void exp_scales(float k, uint32_t* b1, uint32_t* b2) {
  uint32_t kb;
  memcpy(&kb, &k, sizeof kb);
  const uint32_t ni = kb - 0x4B400000u;
  const uint32_t h = (uint32_t)((int32_t)ni >> 1);
  *b1 = (h + 127u) << 23;
  *b2 = (ni - h + 127u) << 23;
}

static inline float exp_f32(float t) {
  /* c = t held to [-104, 89] (NaN stays), by bit selection: a float ternary would keep the
   * loop scalar on SSE / AVX2 (no if-conversion while fp comparisons may trap) */
  const uint32_t low = 0xC2D00000u, high = 0x42B20000u; /* -104.0f, 89.0f */
  const uint32_t below = -(uint32_t)(t < -104.0f), above = -(uint32_t)(t > 89.0f);
  uint32_t tb;
  memcpy(&tb, &t, sizeof tb);
  tb = (tb & ~below) | (low & below);
  tb = (tb & ~above) | (high & above);
  float c;
  memcpy(&c, &tb, sizeof c);
  float k;
  const float p = exp_parts(c, 0.0f, 0, &k);
  uint32_t b1, b2;
  exp_scales(k, &b1, &b2);
  float s1, s2;
  memcpy(&s1, &b1, sizeof s1);
  memcpy(&s2, &b2, sizeof s2);
  return (p * s1) * s2;
}

/* Mish in fp32 (accel.h): tanh(ln(1 + e)) = n / (n + 2), n = e (e + 2), each step rounded
 * once; t itself above 20 (n overflows from 44). The vectors and lut_math.mish_f32 alike. */
static inline float mish_f32(float t) {
  const float e = exp_f32(t);
  const float n = e * (e + 2.0f);
  const float y = t * (n / (n + 2.0f));
  return t > 20.0f ? t : y;
}

#if defined(__AVX512F__)
#include <immintrin.h>

/* exp_f32 in 16 lanes, the same bits: the clamp as max / min with t second (MAXPS returns
 * its second operand for a NaN, so NaN stays as in the bit selection), exp_parts' operations
 * in its order (its multiply-adds as VFMADD, one rounding each), and (p 2^h) 2^(n-h) as one
 * VSCALEFPS by n: p 2^h is exact (normal for the held t), so both round p 2^n once, to the
 * same value, subnormal or infinite results included (docs/kernels.md: measured). */
/* exp_parts in 16 lanes, n itself (not k) returned in *n_out (k - 1.5 2^23, exact). */
static inline __m512 exp_parts_x16(__m512 a, __m512 d, const int with_d, __m512* n_out) {
  const __m512 round = _mm512_set1_ps(EXP_ROUND);
  const __m512 n = _mm512_sub_ps(
      _mm512_fmadd_ps(with_d ? _mm512_add_ps(a, d) : a, _mm512_set1_ps(EXP_LOG2E), round),
      round);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), a); /* exact product */
  if (with_d) r = _mm512_add_ps(r, d);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
  __m512 q = _mm512_fmadd_ps(_mm512_set1_ps(EXP_Q4), r, _mm512_set1_ps(EXP_Q3));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(EXP_Q2));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(EXP_Q1));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(EXP_Q0));
  const __m512 p = _mm512_fmadd_ps(_mm512_mul_ps(r, r), q, r);
  *n_out = n;
  return _mm512_add_ps(p, _mm512_set1_ps(1.0f));
}

static inline __m512 exp_f32_x16(__m512 t) {
  __m512 c = _mm512_max_ps(_mm512_set1_ps(-104.0f), t);
  c = _mm512_min_ps(_mm512_set1_ps(89.0f), c);
  __m512 n;
  const __m512 p = exp_parts_x16(c, c, 0, &n);
  return _mm512_scalef_ps(p, n);
}

/* sigmoid (SILU 0) or silu (SILU 1) of 16 values: 1 / (1 + e^-t), t / (1 + e^-t). */
static inline __m512 logistic_x16(__m512 t, int silu) {
  const __m512 neg = _mm512_castsi512_ps(
      _mm512_xor_si512(_mm512_castps_si512(t), _mm512_set1_epi32((int)0x80000000u)));
  const __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), exp_f32_x16(neg));
  return _mm512_div_ps(silu ? t : _mm512_set1_ps(1.0f), d);
}

/* x = sigmoid(x * s + b) or silu(...) in one pass (affine: 0 none, 1 shift, 2 scale, 3 both):
 * the SDP's steps in its order, each rounded alone, so the bits of the step-by-step passes. */
static inline __attribute__((always_inline)) void logistic_pass(float* x, int64_t count,
                                                                float s, float b, int affine,
                                                                int silu) {
  const __m512 vs = _mm512_set1_ps(s), vb = _mm512_set1_ps(b);
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m512 t = _mm512_loadu_ps(x + i);
    if (affine & 2) t = _mm512_mul_ps(t, vs);
    if (affine & 1) t = _mm512_add_ps(t, vb);
    _mm512_storeu_ps(x + i, logistic_x16(t, silu));
  }
  if (i < count) {
    const __mmask16 m = (__mmask16)((1u << (count - i)) - 1u);
    __m512 t = _mm512_maskz_loadu_ps(m, x + i);
    if (affine & 2) t = _mm512_mul_ps(t, vs);
    if (affine & 1) t = _mm512_add_ps(t, vb);
    _mm512_mask_storeu_ps(x + i, m, logistic_x16(t, silu));
  }
}

/* mish_f32 in 16 lanes, the same bits (t > 20, ordered: a NaN takes the formula's NaN) */
static inline __m512 mish_x16(__m512 t) {
  const __m512 two = _mm512_set1_ps(2.0f), e = exp_f32_x16(t);
  const __m512 n = _mm512_mul_ps(e, _mm512_add_ps(e, two));
  const __m512 y = _mm512_mul_ps(t, _mm512_div_ps(n, _mm512_add_ps(n, two)));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(t, _mm512_set1_ps(20.0f), _CMP_GT_OQ), y, t);
}

/* x = F(x) in 16 lanes, the last count % 16 values masked */
#define UNARY_PASS_X16(NAME, F)                                                      \
  static void NAME(float* x, int64_t count) {                                        \
    int64_t i = 0;                                                                   \
    for (; i + 16 <= count; i += 16) _mm512_storeu_ps(x + i, F(_mm512_loadu_ps(x + i))); \
    if (i < count) {                                                                 \
      const __mmask16 m = (__mmask16)((1u << (count - i)) - 1u);                     \
      _mm512_mask_storeu_ps(x + i, m, F(_mm512_maskz_loadu_ps(m, x + i)));           \
    }                                                                                \
  }
UNARY_PASS_X16(exp_pass, exp_f32_x16)
UNARY_PASS_X16(mish_pass, mish_x16)
#undef UNARY_PASS_X16

/* in + v with in as the first source (add_first_x8's reason: NaN payloads) */
static inline __m512 add_first_x16(__m512 a, __m512 b) {
  __m512 sum;
  __asm__("vaddps %2, %1, %0" : "=v"(sum) : "v"(a), "vm"(b));
  return sum;
}

/* dst = exp_f32(in + value) in one pass (softmax's exp(s - max)), the tail masked */
static void exp_shifted_pass(const float* in, float value, float* dst, int64_t count) {
  const __m512 v = _mm512_set1_ps(value);
  int64_t i = 0;
  for (; i + 16 <= count; i += 16)
    _mm512_storeu_ps(dst + i, exp_f32_x16(add_first_x16(_mm512_loadu_ps(in + i), v)));
  if (i < count) {
    const __mmask16 m = (__mmask16)((1u << (count - i)) - 1u);
    _mm512_mask_storeu_ps(dst + i, m,
                          exp_f32_x16(add_first_x16(_mm512_maskz_loadu_ps(m, in + i), v)));
  }
}
#elif LUT_AVX2
#include <immintrin.h>

/* exp_f32 in 8 lanes (an x86-64-v3 build), the same bits: the clamp as max / min with t second
 * (NaN stays, as in the bit selection), then exp_f32's operations in its order (its
 * multiply-adds as VFMADD, one rounding each), 2^n as its two powers of two (GCC's
 * vectorisation of the scalar loops kept the scale and shift a pass, spilled constants). */
/* exp_parts and exp_scales in 8 lanes */
static inline __m256 exp_parts_x8(__m256 a, __m256 d, const int with_d, __m256* k_out) {
  const __m256 round = _mm256_set1_ps(EXP_ROUND);
  const __m256 k =
      _mm256_fmadd_ps(with_d ? _mm256_add_ps(a, d) : a, _mm256_set1_ps(EXP_LOG2E), round);
  const __m256 n = _mm256_sub_ps(k, round);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), a); /* exact product */
  if (with_d) r = _mm256_add_ps(r, d);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
  __m256 q = _mm256_fmadd_ps(_mm256_set1_ps(EXP_Q4), r, _mm256_set1_ps(EXP_Q3));
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(EXP_Q2));
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(EXP_Q1));
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(EXP_Q0));
  const __m256 p = _mm256_fmadd_ps(_mm256_mul_ps(r, r), q, r);
  *k_out = k;
  return _mm256_add_ps(p, _mm256_set1_ps(1.0f));
}

static inline void exp_scales_x8(__m256 k, __m256i* b1, __m256i* b2) {
  const __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(k), _mm256_set1_epi32(0x4B400000));
  const __m256i h = _mm256_srai_epi32(ni, 1);
  *b1 = _mm256_slli_epi32(_mm256_add_epi32(h, _mm256_set1_epi32(127)), 23);
  *b2 = _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, h), _mm256_set1_epi32(127)), 23);
}

static inline __m256 exp_f32_x8(__m256 t) {
  __m256 c = _mm256_max_ps(_mm256_set1_ps(-104.0f), t);
  c = _mm256_min_ps(_mm256_set1_ps(89.0f), c);
  __m256 k;
  const __m256 p = exp_parts_x8(c, c, 0, &k);
  __m256i b1, b2;
  exp_scales_x8(k, &b1, &b2);
  return _mm256_mul_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(b1)), _mm256_castsi256_ps(b2));
}

/* e = exp_f32_x8(v) where only 1 + e is read (sigmoid, silu), with 2^n as one power of two:
 * v held to [-86, 89] instead of [-104, 89], so n - 1 (-125 .. 127) is a normal exponent and
 * e = (p 2^(n-1)) 2 rounds once (p 2^(n-1) is exact), as exp_f32's two-step product does: the
 * same e for v >= -86, and below, both e < 2^-124, so 1 + e is 1 either way; 5 operations
 * fewer. 2^(n-1)'s bits: (k's << 23) + (126 << 23) (1.5 2^23's bits in k shift out). */
static inline __m256 exp_for_logistic_x8(__m256 v) {
  __m256 c = _mm256_max_ps(_mm256_set1_ps(-86.0f), v); /* NaN stays */
  c = _mm256_min_ps(_mm256_set1_ps(89.0f), c);
  __m256 k;
  const __m256 p = exp_parts_x8(c, c, 0, &k);
  const __m256 half_scale = _mm256_castsi256_ps(_mm256_add_epi32(
      _mm256_slli_epi32(_mm256_castps_si256(k), 23), _mm256_set1_epi32(126 << 23)));
  return _mm256_mul_ps(_mm256_mul_ps(p, half_scale), _mm256_set1_ps(2.0f));
}

static inline __m256 logistic_x8(__m256 t, int silu) {
  const __m256 neg = _mm256_xor_ps(t, _mm256_set1_ps(-0.0f));
  const __m256 d = _mm256_add_ps(_mm256_set1_ps(1.0f), exp_for_logistic_x8(neg));
  return _mm256_div_ps(silu ? t : _mm256_set1_ps(1.0f), d);
}

/* The functions of the AVX2 passes; each call site passes a constant, so the always-inline
 * pass below becomes one loop per function. */
enum { PASS_SIGMOID, PASS_SILU, PASS_GELU, PASS_MISH };
static inline __m256 gelu_f32_x8(__m256 t); /* with gelu_f32, below */
static inline __m256 mish_x8(__m256 t);     /* with exp_any_x8, below */
static inline __attribute__((always_inline)) __m256 pass_function_x8(__m256 t, int function) {
  return function == PASS_GELU ? gelu_f32_x8(t) : function == PASS_MISH ? mish_x8(t)
                                                  : logistic_x8(t, function == PASS_SILU);
}

/* x = function(x * s + b) in one pass (affine: 2 scale, 1 shift), as the AVX-512 build's
 * logistic_pass and gelu_pass; the last count % 8 values in a vector of their own, zero-padded
 * (each lane's result is its value's alone: the scalar exp_f32 / gelu_f32 give the same bits at
 * several times the cost, and a 7x7 plane has one such vector, a 197-token plane five values). */
static inline __attribute__((always_inline)) void function_pass_x8(float* x, int64_t count,
                                                                   float s, float b, int affine,
                                                                   int function) {
  const __m256 vs = _mm256_set1_ps(s), vb = _mm256_set1_ps(b);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256 t = _mm256_loadu_ps(x + i);
    if (affine & 2) t = _mm256_mul_ps(t, vs);
    if (affine & 1) t = _mm256_add_ps(t, vb);
    _mm256_storeu_ps(x + i, pass_function_x8(t, function));
  }
  if (i < count) {
    float last[8] = {0.0f};
    memcpy(last, x + i, (size_t)(count - i) * sizeof(float));
    __m256 t = _mm256_loadu_ps(last);
    if (affine & 2) t = _mm256_mul_ps(t, vs);
    if (affine & 1) t = _mm256_add_ps(t, vb);
    _mm256_storeu_ps(last, pass_function_x8(t, function));
    memcpy(x + i, last, (size_t)(count - i) * sizeof(float));
  }
}

static inline __attribute__((always_inline)) void logistic_pass(float* x, int64_t count,
                                                                float s, float b, int affine,
                                                                int silu) {
  function_pass_x8(x, count, s, b, affine, silu ? PASS_SILU : PASS_SIGMOID);
}

/* exp_f32_x8 with 2^n as one power of two where every lane lies in [-86, 89] (as
 * exp_for_logistic_x8: n - 1 is then a normal exponent, p 2^(n-1) exact, and (p 2^(n-1)) 2
 * rounds once, as exp_f32's (p 2^h) 2^(n-h) does: the same bits), else exp_f32_x8 itself: a
 * vector with a lane below -86 or a NaN. Softmax's exp(s - max) lies there nearly always.
 * Checked equal to exp_f32_x8 over every fp32 input; measured: docs/kernels.md, lut.c. */
static inline __m256 exp_any_x8(__m256 t) {
  if (_mm256_movemask_ps(_mm256_cmp_ps(t, _mm256_set1_ps(-86.0f), _CMP_NGE_UQ)) != 0)
    return exp_f32_x8(t);
  const __m256 c = _mm256_min_ps(_mm256_set1_ps(89.0f), t);
  __m256 k;
  const __m256 p = exp_parts_x8(c, c, 0, &k);
  const __m256 half_scale = _mm256_castsi256_ps(_mm256_add_epi32(
      _mm256_slli_epi32(_mm256_castps_si256(k), 23), _mm256_set1_epi32(126 << 23)));
  return _mm256_mul_ps(_mm256_mul_ps(p, half_scale), _mm256_set1_ps(2.0f));
}

static void exp_pass(float* x, int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) _mm256_storeu_ps(x + i, exp_any_x8(_mm256_loadu_ps(x + i)));
  for (; i < count; ++i) x[i] = exp_f32(x[i]);
}

/* mish_f32 in 8 lanes, the same bits (exp_any_x8 is exp_f32's) */
static inline __m256 mish_x8(__m256 t) {
  const __m256 two = _mm256_set1_ps(2.0f), e = exp_any_x8(t);
  const __m256 n = _mm256_mul_ps(e, _mm256_add_ps(e, two));
  const __m256 y = _mm256_mul_ps(t, _mm256_div_ps(n, _mm256_add_ps(n, two)));
  return _mm256_blendv_ps(y, t, _mm256_cmp_ps(t, _mm256_set1_ps(20.0f), _CMP_GT_OQ));
}

static void mish_pass(float* x, int64_t count) { function_pass_x8(x, count, 1, 0, 0, PASS_MISH); }

/* in + v with in as the first source: of two NaNs the sum keeps in's, as the C expression
 * in[i] + value reads (a compiler may swap an intrinsic's operands, to fold a load) */
static inline __m256 add_first_x8(__m256 a, __m256 b) {
  __m256 sum;
  __asm__("vaddps %2, %1, %0" : "=x"(sum) : "x"(a), "xm"(b));
  return sum;
}

/* dst = exp_f32(in + value) in one pass (softmax's exp(s - max) plane), the last count % 8
 * values by a masked vector (each lane's result is its value's alone) instead of the add's own
 * pass and the scalar exp_f32 a value. */
static void exp_shifted_pass(const float* in, float value, float* dst, int64_t count) {
  const __m256 v = _mm256_set1_ps(value);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8)
    _mm256_storeu_ps(dst + i, exp_any_x8(add_first_x8(_mm256_loadu_ps(in + i), v)));
  if (i < count) {
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)(count - i)),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_ps(dst + i, m, exp_any_x8(add_first_x8(_mm256_maskload_ps(in + i, m), v)));
  }
}
#endif

/* hardswish (SWISH 1) or hardsigmoid (SWISH 0) of x * s + b in one pass (affine as
 * logistic_pass's): the scale / shift pass's steps then activation_exact's, each rounded alone,
 * in plain C on every build (GCC vectorises the loop: the clamp's comparisons become
 * max / min, which keep NaN and -0 as the comparisons do), so the bits of the two passes;
 * MobileNetV3's conv epilogues took the scale and shift as a pass of their own. */
static inline __attribute__((always_inline)) void hard_pass(float* x, int64_t count, float s,
                                                            float b, int affine, int swish) {
  for (int64_t i = 0; i < count; ++i) {
    float t = x[i];
    if (affine & 2) t = t * s;
    if (affine & 1) t = t + b;
    const float u = t + 3.0f;
    const float c = u < 0.0f ? 0.0f : u > 6.0f ? 6.0f : u; /* NaN stays */
    x[i] = swish ? t * c / 6.0f : c / 6.0f;
  }
}

typedef void (*affine_pass_fn)(float*, int64_t, float, float);
#define HARD_PASS(NAME, AFFINE, SWISH)                                    \
  static void NAME(float* x, int64_t count, float s, float b) {           \
    hard_pass(x, count, s, b, AFFINE, SWISH);                             \
  }
HARD_PASS(hardsigmoid_pass, 0, 0)
HARD_PASS(hardsigmoid_pass_shift, 1, 0)
HARD_PASS(hardsigmoid_pass_scale, 2, 0)
HARD_PASS(hardsigmoid_pass_bn, 3, 0)
HARD_PASS(hardswish_pass, 0, 1)
HARD_PASS(hardswish_pass_shift, 1, 1)
HARD_PASS(hardswish_pass_scale, 2, 1)
HARD_PASS(hardswish_pass_bn, 3, 1)
#undef HARD_PASS
static const affine_pass_fn hard_passes[2][4] = {
    {hardsigmoid_pass, hardsigmoid_pass_shift, hardsigmoid_pass_scale, hardsigmoid_pass_bn},
    {hardswish_pass, hardswish_pass_shift, hardswish_pass_scale, hardswish_pass_bn}};

#if defined(__AVX512F__) || LUT_AVX2
/* The sigmoid and silu passes of either build's logistic_pass, one per affine form. */
#define LOGISTIC_PASS(NAME, AFFINE, SILU)                                 \
  static void NAME(float* x, int64_t count, float s, float b) {           \
    logistic_pass(x, count, s, b, AFFINE, SILU);                          \
  }
LOGISTIC_PASS(sigmoid_pass, 0, 0)
LOGISTIC_PASS(sigmoid_pass_shift, 1, 0)
LOGISTIC_PASS(sigmoid_pass_scale, 2, 0)
LOGISTIC_PASS(sigmoid_pass_bn, 3, 0)
LOGISTIC_PASS(silu_pass, 0, 1)
LOGISTIC_PASS(silu_pass_shift, 1, 1)
LOGISTIC_PASS(silu_pass_scale, 2, 1)
LOGISTIC_PASS(silu_pass_bn, 3, 1)
#undef LOGISTIC_PASS
static const affine_pass_fn logistic_passes[2][4] = {
    {sigmoid_pass, sigmoid_pass_shift, sigmoid_pass_scale, sigmoid_pass_bn},
    {silu_pass, silu_pass_shift, silu_pass_scale, silu_pass_bn}};
#endif

#if defined(__AVX512F__)
/* activation_affine on positions of 16 channels side by side (a C16 block: lane l is channel
 * l, scale and shift per lane): per value the same steps in the same order, each rounded alone
 * (the clamp of the hard functions as max / min with the value second: NaN and -0 stay, as
 * the comparisons leave them). A channel-blocked copy's epilogue then runs in full vectors
 * before it goes back to NCHW planes, instead of one call per channel on short planes (16
 * values of a 7x7 plane's 49 in the last vector). */
int activation_affine_c16(accel_activation act, float* x, int64_t positions, const float* s,
                          const float* b) {
  const int kind = act == ACCEL_ACT_SIGMOID ? 0 : act == ACCEL_ACT_SILU ? 1
                   : act == ACCEL_ACT_HARDSIGMOID ? 2 : act == ACCEL_ACT_HARDSWISH ? 3 : -1;
  if (kind < 0) return 0;
  const __m512 vs = s != NULL ? _mm512_loadu_ps(s) : _mm512_set1_ps(1.0f);
  const __m512 vb = b != NULL ? _mm512_loadu_ps(b) : _mm512_setzero_ps();
  const __m512 zero = _mm512_setzero_ps(), three = _mm512_set1_ps(3.0f),
               six = _mm512_set1_ps(6.0f);
  for (int64_t i = 0; i < positions; ++i) {
    __m512 t = _mm512_loadu_ps(x + i * 16);
    if (s != NULL) t = _mm512_mul_ps(t, vs);
    if (b != NULL) t = _mm512_add_ps(t, vb);
    if (kind < 2) {
      t = logistic_x16(t, kind);
    } else {
      const __m512 c = _mm512_min_ps(six, _mm512_max_ps(zero, _mm512_add_ps(t, three)));
      t = _mm512_div_ps(kind == 3 ? _mm512_mul_ps(t, c) : c, six);
    }
    _mm512_storeu_ps(x + i * 16, t);
  }
  return 1;
}
#else
int activation_affine_c16(accel_activation act, float* x, int64_t positions, const float* s,
                          const float* b) {
  (void)act, (void)x, (void)positions, (void)s, (void)b;
  return 0;
}
#endif

static const affine_pass_fn gelu_passes[4]; /* with gelu_f32, below */

int activation_affine(accel_activation act, float* x, int64_t count, const float* s,
                      const float* b) {
  const int affine = (s != NULL) * 2 + (b != NULL);
  const float sv = s != NULL ? *s : 1.0f, bv = b != NULL ? *b : 0.0f;
  if (act == ACCEL_ACT_HARDSWISH || act == ACCEL_ACT_HARDSIGMOID) {
    hard_passes[act == ACCEL_ACT_HARDSWISH][affine](x, count, sv, bv);
    return 1;
  }
  if (act == ACCEL_ACT_GELU) {
    gelu_passes[affine](x, count, sv, bv);
    return 1;
  }
#if defined(__AVX512F__) || LUT_AVX2
  if (act == ACCEL_ACT_SIGMOID || act == ACCEL_ACT_SILU) {
    logistic_passes[act == ACCEL_ACT_SILU][affine](x, count, sv, bv);
    return 1;
  }
#endif
  return 0;
}

/* tanh in fp32 from plain fp32 operations as exp_f32 (the same bits on every host and in the
 * NumPy reference's tanh_f32): |t| < 0.625: t + t^3 P(t^2), P of degree 4 fitted to (tanh(t) -
 * t) / t^3 (truncation error 4.4e-9 relative; no cancellation near 0, where 1 - 2 / (e^2t + 1)
 * would lose t's digits); from 0.625: 1 - 2 / (exp_f32(2 |t|) + 1) with t's sign (the
 * cancellation there costs at most about one ulp). Both are computed and one is selected by
 * bits, so the loop has no branch; |tanh| < 1 and t's sign bit is set on the result. */
static const float TANH_P0 = -3.333328068e-01f, TANH_P1 = 1.333144158e-01f,
                   TANH_P2 = -5.373971164e-02f, TANH_P3 = 2.063908055e-02f,
                   TANH_P4 = -5.704979878e-03f;

static inline float tanh_f32(float t) {
  uint32_t tb;
  memcpy(&tb, &t, sizeof tb);
  const uint32_t sign = tb & 0x80000000u, ab = tb ^ sign;
  float a;
  memcpy(&a, &ab, sizeof a);
  const float z = t * t;
  float q = TANH_P4 * z + TANH_P3;
  q = q * z + TANH_P2;
  q = q * z + TANH_P1;
  q = q * z + TANH_P0;
  const float near = t + (t * z) * q;
  const float e = exp_f32(a + a);
  const float far = 1.0f - 2.0f / (e + 1.0f); /* NaN stays */
  uint32_t nb, fb;
  memcpy(&nb, &near, sizeof nb);
  memcpy(&fb, &far, sizeof fb);
  const uint32_t use_near = -(uint32_t)(a < 0.625f);
  /* t's sign on both: the polynomial's t + (-0) would turn -0 into +0 */
  const uint32_t rb = ((nb & use_near) | (fb & ~use_near)) | sign;
  float r;
  memcpy(&r, &rb, sizeof r);
  return r;
}

/* GELU in FP32: t Phi(t), Phi(t) = erfc(-t / sqrt 2) / 2, in fp32 operations and fused
 * multiply-adds (fma_f32; no other libm call, no branch; 16 lanes with AVX-512, 8 with AVX2 +
 * FMA, the same bits on every build and in the NumPy reference's gelu_f32, the same operations
 * in the same order, each rounded once: the reference's fma_f32 rounds a b + c once). With
 * x = |t| held to 15 (NaN: 15) and E = erfc(x / sqrt 2) / 2 = exp(-x^2 / 2) C(x):
 *  - C(x) = erfcx(x / sqrt 2) / 2 is smooth and within [0.025, 0.5]: on each unit interval
 *    [n, n + 1), n = trunc(x) = 0 .. 15, a degree-7 polynomial in d = x - (n + 0.5) (the
 *    Chebyshev interpolant at 8 points, scipy's erfcx, converted to powers of d and rounded
 *    to float: GELU_C[j][n] is d^j's coefficient), the 16 intervals' coefficients one vector
 *    each, so a lane's is a permutation by n (no gather, no division), evaluated by Horner's
 *    rule in 7 fused multiply-adds;
 *  - exp(-x^2 / 2) without x^2's rounding, which would cost up to 12 ulp at x = 15: sq = x^2
 *    rounded and sq_tail = fma(x, x, -sq), so x^2 = sq + sq_tail exactly (where x^2 is
 *    normal), A = -sq / 2 and D = -sq_tail / 2 (|D| <= ulp(A) / 2); one exp of A + D as
 *    exp_f32 takes its argument apart: k = round((A + D) / ln 2), r = (A - k ln2_hi, exact) +
 *    D - k ln2_lo, then 1 + r + r^2 q(r) and 2^k as two powers of two
 *    (2^h, 2^(k-h): -163 <= k <= 0, both normal), with C's value multiplied in before them:
 *    u = C p; the second exp of the two this took before (exp(A) exp(D)) is gone;
 *  - t < 0: GELU = ((t u) 2^h) 2^(k-h), the subnormal product last; otherwise t (1 - (u 2^h)
 *    2^(k-h)) (no cancellation: E <= 1/2); from |t| = 15 (and NaN) 2^(k-h) is taken as 0
 *    (the result is t or -0; exp(A) underflowed to 0 there before).
 * Error, against t erfc(-t / sqrt 2) / 2 in float64: at most 4.0 ulp (accel.h) of the result
 * (subnormal results: in units of 2^-149), measured over every fp32 input of [-15, 15] (3.986
 * at t = -5.962, 3.99 there before the multiply-adds were fused; with two exps it was 4.6,
 * 4.59 at t = -5.729; beyond, the result is t or -0, within half an ulp) and tested on a
 * sample (tests/sim/test_lut.py); PyTorch's and ONNX Runtime's 0.5 t (1 + erf(t / sqrt 2))
 * lose t's digits to the cancellation for t < -3 instead.
 * +-0 stays, NaN stays NaN, inf gives inf and -inf NaN (-inf times 0, as the formula). */
static const float GELU_C[ACCEL_GELU_DEGREE + 1][ACCEL_GELU_INTERVALS] = {
    {3.49618822e-01f, 2.05780670e-01f, 1.41331330e-01f, 1.06345154e-01f, 8.48033950e-02f,
     7.03426972e-02f, 6.00156747e-02f, 5.22930957e-02f, 4.63100448e-02f, 4.15432900e-02f,
     3.76588590e-02f, 3.44340578e-02f, 3.17149274e-02f, 2.93917321e-02f, 2.73842253e-02f,
     2.56323908e-02f},
    {-2.24132866e-01f, -9.02712792e-02f, -4.56139520e-02f, -2.67342422e-02f, -1.73270162e-02f,
     -1.20574636e-02f, -8.84039048e-03f, -6.74405182e-03f, -5.30691398e-03f, -4.28103982e-03f,
     -3.52426386e-03f, -2.95060663e-03f, -2.50571081e-03f, -2.15390348e-03f, -1.87101518e-03f,
     -1.64021412e-03f},
    {1.18777506e-01f, 3.51869836e-02f, 1.36482390e-02f, 6.38765423e-03f, 3.41591076e-03f,
     2.01332313e-03f, 1.27656804e-03f, 8.56353494e-04f, 6.00636122e-04f, 4.36705974e-04f,
     3.27044138e-04f, 2.51041289e-04f, 1.96770416e-04f, 1.57017843e-04f, 1.27252933e-04f,
     1.04535888e-04f},
    {-5.49153090e-02f, -1.24970172e-02f, -3.83113208e-03f, -1.45915383e-03f, -6.51806651e-04f,
     -3.28062190e-04f, -1.80899573e-04f, -1.07133579e-04f, -6.71690286e-05f, -4.41109260e-05f,
     -3.01001510e-05f, -2.12105842e-05f, -1.53601850e-05f, -1.13874939e-05f, -8.61585522e-06f,
     -6.63596666e-06f},
    {2.28036195e-02f, 4.10818215e-03f, 1.01734092e-03f, 3.20111780e-04f, 1.20686484e-04f,
     5.22430964e-05f, 2.51795555e-05f, 1.32127007e-05f, 7.42476595e-06f, 4.41301427e-06f,
     2.74812419e-06f, 1.77988636e-06f, 1.19202173e-06f, 8.21667754e-07f, 5.80756534e-07f,
     4.19600866e-07f},
    {-8.69226176e-03f, -1.26574573e-03f, -2.57369131e-04f, -6.77151547e-05f, -2.17342931e-05f,
     -8.14234136e-06f, -3.44558975e-06f, -1.60732463e-06f, -8.11563154e-07f, -4.37395300e-07f,
     -2.48939017e-07f, -1.48362787e-07f, -9.19746270e-08f, -5.89912332e-08f, -3.89745374e-08f,
     -2.64291060e-08f},
    {3.24527477e-03f, 3.82249535e-04f, 6.39942809e-05f, 1.41218034e-05f, 3.86923784e-06f,
     1.25723454e-06f, 4.67924480e-07f, 1.94310687e-07f, 8.82468214e-08f, 4.31627178e-08f,
     2.24662173e-08f, 1.23272512e-08f, 7.07694703e-09f, 4.22497504e-09f, 2.60998823e-09f,
     1.66150627e-09f},
    {-1.07207999e-03f, -1.05424508e-04f, -1.48699592e-05f, -2.79803294e-06f, -6.62230605e-07f,
     -1.88236868e-07f, -6.20055971e-08f, -2.30279511e-08f, -9.43995815e-09f, -4.20160973e-09f,
     -2.00424211e-09f, -1.01414344e-09f, -5.39927214e-10f, -3.00360625e-10f, -1.73685066e-10f,
     -1.03852926e-10f},
};

_Static_assert(sizeof GELU_C == ACCEL_GELU_COEFFICIENTS * sizeof(float),
               "ACCEL_GELU_COEFFICIENTS is GELU_C's size");

accel_status accel_gelu_coefficients(float* out, int32_t count) {
  if (out == NULL) return accel_fail(ACCEL_ERR_NULL, "accel_gelu_coefficients: out is NULL");
  if (count != ACCEL_GELU_COEFFICIENTS) {
    return accel_fail(ACCEL_ERR_INVALID, "accel_gelu_coefficients: count = %d, not %d",
                      (int)count, (int)ACCEL_GELU_COEFFICIENTS);
  }
  memcpy(out, GELU_C, sizeof GELU_C);
  return ACCEL_OK;
}

static inline float gelu_f32(float t) {
  uint32_t tb;
  memcpy(&tb, &t, sizeof tb);
  const uint32_t ab = tb & 0x7fffffffu;
  float a;
  memcpy(&a, &ab, sizeof a);
  const float x = a < 15.0f ? a : 15.0f; /* NaN: 15 (MINPS's choice) */
  const int32_t n = (int32_t)x;
  const float d = x - ((float)n + 0.5f);
  float q = GELU_C[7][n];
  for (int j = 6; j >= 0; --j) q = fma_f32(q, d, GELU_C[j][n]);
  const float sq = x * x, sq_tail = fma_f32(x, x, -sq); /* x^2 = sq + sq_tail exactly */
  const float big = sq * -0.5f, small = sq_tail * -0.5f; /* A, D */
  float k;
  const float u = q * exp_parts(big, small, 1, &k);
  uint32_t b1, b2;
  exp_scales(k, &b1, &b2);
  b2 &= -(uint32_t)(a < 15.0f);
  float s1, s2;
  memcpy(&s1, &b1, sizeof s1);
  memcpy(&s2, &b2, sizeof s2);
  return t < 0.0f ? ((t * u) * s1) * s2 : t * (1.0f - (u * s1) * s2);
}

/* x = gelu_f32(x * s + b) in one pass (affine: 2 scale, 1 shift, as logistic_pass), each step
 * rounded alone: the bits of the scale / shift pass then the GELU pass. A dense layer's bias
 * and GELU read and wrote its output twice. */
#if defined(__AVX512F__)
/* gelu_f32 in 16 lanes, the same operations (2^k from k's bits; one VSCALEFPS where |t| < 8) */
static inline __m512 gelu_f32_x16(__m512 t) {
  const __m512 a = _mm512_abs_ps(t);
  const __m512 x = _mm512_min_ps(a, _mm512_set1_ps(15.0f)); /* NaN: 15 */
  const __m512i n = _mm512_cvttps_epi32(x);
  const __m512 d = _mm512_sub_ps(x, _mm512_add_ps(_mm512_cvtepi32_ps(n), _mm512_set1_ps(0.5f)));
  __m512 q = _mm512_permutexvar_ps(n, _mm512_loadu_ps(GELU_C[7]));
  for (int j = 6; j >= 0; --j)
    q = _mm512_fmadd_ps(q, d, _mm512_permutexvar_ps(n, _mm512_loadu_ps(GELU_C[j])));
  const __m512 sq = _mm512_mul_ps(x, x), sq_tail = _mm512_fmsub_ps(x, x, sq);
  const __m512 big = _mm512_mul_ps(sq, _mm512_set1_ps(-0.5f));
  const __m512 small = _mm512_mul_ps(sq_tail, _mm512_set1_ps(-0.5f));
  __m512 nk;
  const __m512 u = _mm512_mul_ps(q, exp_parts_x16(big, small, 1, &nk));
  if (_mm512_cmp_ps_mask(a, _mm512_set1_ps(8.0f), _CMP_LT_OQ) == (__mmask16)0xffff) {
    /* every |t| < 8 (NaN fails): E = u 2^k normal, VSCALEFPS exact, so the bits of the two
     * steps below (gelu_f32_x8's narrow case): 9 operations fewer */
    const __m512 e = _mm512_scalef_ps(u, nk);
    const __m512 neg = _mm512_mul_ps(t, e);
    const __m512 pos = _mm512_mul_ps(t, _mm512_sub_ps(_mm512_set1_ps(1.0f), e));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(t, _mm512_setzero_ps(), _CMP_LT_OQ), pos, neg);
  }
  const __m512i ni = _mm512_cvtps_epi32(nk); /* an integer: exact */
  const __m512i h = _mm512_srai_epi32(ni, 1);
  const __m512 s1 = _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_add_epi32(h, _mm512_set1_epi32(127)), 23));
  const __mmask16 inside = _mm512_cmp_ps_mask(a, _mm512_set1_ps(15.0f), _CMP_LT_OQ);
  const __m512 s2 = _mm512_castsi512_ps(_mm512_maskz_mov_epi32(
      inside, _mm512_slli_epi32(_mm512_add_epi32(_mm512_sub_epi32(ni, h),
                                                 _mm512_set1_epi32(127)), 23)));
  const __m512 neg = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(t, u), s1), s2);
  const __m512 pos = _mm512_mul_ps(
      t, _mm512_sub_ps(_mm512_set1_ps(1.0f), _mm512_mul_ps(_mm512_mul_ps(u, s1), s2)));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(t, _mm512_setzero_ps(), _CMP_LT_OQ), pos, neg);
}

static inline __attribute__((always_inline)) void gelu_pass(float* x, int64_t count, float s,
                                                            float b, int affine) {
  const __m512 vs = _mm512_set1_ps(s), vb = _mm512_set1_ps(b);
  int64_t i = 0;
  for (; i < count; i += 16) {
    const __mmask16 m = count - i >= 16 ? (__mmask16)0xffff
                                        : (__mmask16)((1u << (count - i)) - 1u);
    __m512 t = _mm512_maskz_loadu_ps(m, x + i);
    if (affine & 2) t = _mm512_mul_ps(t, vs);
    if (affine & 1) t = _mm512_add_ps(t, vb);
    _mm512_mask_storeu_ps(x + i, m, gelu_f32_x16(t));
  }
}
#elif LUT_AVX2
/* A lane's coefficient j of 16 intervals: GELU_C[j]'s lower eight permuted by n's low 3 bits,
 * and, with `wide`, the upper eight too, taken where n >= 8 */
static inline __attribute__((always_inline)) __m256 gelu_coefficient_x8(int j, __m256i n,
                                                                        __m256 upper, int wide) {
  const __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(GELU_C[j]), n);
  if (!wide) return lo;
  const __m256 hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(GELU_C[j] + 8), n);
  return _mm256_blendv_ps(lo, hi, upper);
}

static inline __attribute__((always_inline)) __m256 gelu_polynomial_x8(__m256i n, __m256 upper,
                                                                       __m256 d, int wide) {
  __m256 q = gelu_coefficient_x8(7, n, upper, wide);
  for (int j = 6; j >= 0; --j)
    q = _mm256_fmadd_ps(q, d, gelu_coefficient_x8(j, n, upper, wide));
  return q;
}

/* gelu_f32 in 8 lanes. A vector whose lanes all lie below 8 (n < 8: nearly every vector of a
 * network's activations) takes the coefficients of the lower eight intervals alone, one
 * permutation each instead of two and a blend: the same coefficients, so the same bits. */
static inline __m256 gelu_f32_x8(__m256 t) {
  const __m256 a = _mm256_and_ps(t, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
  const __m256 x = _mm256_min_ps(a, _mm256_set1_ps(15.0f)); /* NaN: 15 */
  const __m256i n = _mm256_cvttps_epi32(x);
  const __m256i upper_bits = _mm256_cmpgt_epi32(n, _mm256_set1_epi32(7));
  const __m256 upper = _mm256_castsi256_ps(upper_bits);
  const __m256 d = _mm256_sub_ps(x, _mm256_add_ps(_mm256_cvtepi32_ps(n), _mm256_set1_ps(0.5f)));
  const int narrow = _mm256_testz_si256(upper_bits, upper_bits);
  const __m256 q = narrow ? gelu_polynomial_x8(n, upper, d, 0) : gelu_polynomial_x8(n, upper, d, 1);
  const __m256 sq = _mm256_mul_ps(x, x), sq_tail = _mm256_fmsub_ps(x, x, sq);
  const __m256 big = _mm256_mul_ps(sq, _mm256_set1_ps(-0.5f));
  const __m256 small = _mm256_mul_ps(sq_tail, _mm256_set1_ps(-0.5f));
  __m256 k;
  const __m256 u = _mm256_mul_ps(q, exp_parts_x8(big, small, 1, &k));
  if (narrow) {
    /* Every |t| < 8 (NaN and inf lanes have n = 15): -47 < k <= 0, so E = u 2^k is normal,
     * and one product by 2^k (bits (k's << 23) + (127 << 23)) gives (u 2^h) 2^(k-h), whose
     * steps are exact; t E = ((t u) 2^h) 2^(k-h) too (k = 0: both t u; k < 0: |t| > 0.83,
     * E > 6e-16, the product normal): the same bits as below for 10 operations fewer. */
    const __m256 e = _mm256_mul_ps(u, _mm256_castsi256_ps(_mm256_add_epi32(
        _mm256_slli_epi32(_mm256_castps_si256(k), 23), _mm256_set1_epi32(127 << 23))));
    const __m256 neg = _mm256_mul_ps(t, e);
    const __m256 pos = _mm256_mul_ps(t, _mm256_sub_ps(_mm256_set1_ps(1.0f), e));
    return _mm256_blendv_ps(pos, neg, _mm256_cmp_ps(t, _mm256_setzero_ps(), _CMP_LT_OQ));
  }
  __m256i b1, b2;
  exp_scales_x8(k, &b1, &b2);
  const __m256 s1 = _mm256_castsi256_ps(b1);
  const __m256 inside = _mm256_cmp_ps(a, _mm256_set1_ps(15.0f), _CMP_LT_OQ);
  const __m256 s2 = _mm256_and_ps(inside, _mm256_castsi256_ps(b2));
  const __m256 neg = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(t, u), s1), s2);
  const __m256 pos = _mm256_mul_ps(
      t, _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_mul_ps(_mm256_mul_ps(u, s1), s2)));
  return _mm256_blendv_ps(pos, neg, _mm256_cmp_ps(t, _mm256_setzero_ps(), _CMP_LT_OQ));
}

static inline __attribute__((always_inline)) void gelu_pass(float* x, int64_t count, float s,
                                                            float b, int affine) {
  function_pass_x8(x, count, s, b, affine, PASS_GELU);
}
#else
static inline __attribute__((always_inline)) void gelu_pass(float* x, int64_t count, float s,
                                                            float b, int affine) {
  for (int64_t i = 0; i < count; ++i) {
    float t = x[i];
    if (affine & 2) t = t * s;
    if (affine & 1) t = t + b;
    x[i] = gelu_f32(t);
  }
}
#endif

#define GELU_PASS(NAME, AFFINE) \
  static void NAME(float* x, int64_t count, float s, float b) { gelu_pass(x, count, s, b, AFFINE); }
GELU_PASS(gelu_pass_plain, 0)
GELU_PASS(gelu_pass_shift, 1)
GELU_PASS(gelu_pass_scale, 2)
GELU_PASS(gelu_pass_bn, 3)
#undef GELU_PASS
static const affine_pass_fn gelu_passes[4] = {gelu_pass_plain, gelu_pass_shift, gelu_pass_scale,
                                              gelu_pass_bn};

/* FP32: the functions themselves (accel.h): sigmoid, silu, mish and exp through exp_f32, tanh
 * through tanh_f32; GELU through gelu_f32 (fp32, within 4.6 ulp); its tanh form in double as
 * t / (1 + exp(-2 u)), rounded once (1 + tanh cancels in fp32 for negative t). */
void activation_exact(accel_activation act, float* x, int64_t count) {
  switch (act) {
#if defined(__AVX512F__) || LUT_AVX2
    case ACCEL_ACT_SIGMOID:
    case ACCEL_ACT_SILU:
      activation_affine(act, x, count, NULL, NULL);
      break;
    case ACCEL_ACT_EXP:
    case ACCEL_ACT_SOFTMAX_EXP:
      exp_pass(x, count);
      break;
#else
    case ACCEL_ACT_SIGMOID:
      for (int64_t i = 0; i < count; ++i) x[i] = 1.0f / (1.0f + exp_f32(-x[i]));
      break;
    case ACCEL_ACT_SILU:
      for (int64_t i = 0; i < count; ++i) x[i] = x[i] / (1.0f + exp_f32(-x[i]));
      break;
    case ACCEL_ACT_EXP:
    case ACCEL_ACT_SOFTMAX_EXP:
      for (int64_t i = 0; i < count; ++i) x[i] = exp_f32(x[i]);
      break;
#endif
    case ACCEL_ACT_TANH:
      for (int64_t i = 0; i < count; ++i) x[i] = tanh_f32(x[i]);
      break;
    case ACCEL_ACT_HARDSWISH: /* x (x + 3 held to [0, 6]) / 6, NaN stays */
    case ACCEL_ACT_HARDSIGMOID: /* (x + 3 held to [0, 6]) / 6 */
      activation_affine(act, x, count, NULL, NULL);
      break;
    case ACCEL_ACT_GELU:
      gelu_pass_plain(x, count, 1.0f, 0.0f);
      break;
    case ACCEL_ACT_GELU_TANH:
      for (int64_t i = 0; i < count; ++i) x[i] = (float)gelu_tanh64(x[i]);
      break;
    case ACCEL_ACT_MISH:
#if defined(__AVX512F__) || LUT_AVX2
      mish_pass(x, count);
#else
      for (int64_t i = 0; i < count; ++i) x[i] = mish_f32(x[i]);
#endif
      break;
    case ACCEL_ACT_SOFTPLUS: /* in double, rounded once */
      for (int64_t i = 0; i < count; ++i) x[i] = (float)softplus64(x[i]);
      break;
    case ACCEL_ACT_LOG: /* in double, rounded once: -inf at 0, NaN below */
      for (int64_t i = 0; i < count; ++i) x[i] = (float)log((double)x[i]);
      break;
    case ACCEL_ACT_RSQRT: /* two correctly rounded steps (IEEE sqrt and division) */
      for (int64_t i = 0; i < count; ++i) x[i] = 1.0f / sqrtf(x[i]);
      break;
    case ACCEL_ACT_RECIPROCAL: /* correctly rounded */
      for (int64_t i = 0; i < count; ++i) x[i] = 1.0f / x[i];
      break;
    default:
      break;
  }
}

void activation_exact_shifted(accel_activation act, const float* in, float value, float* dst,
                              int64_t count) {
#if defined(__AVX512F__) || LUT_AVX2
  if (act == ACCEL_ACT_EXP || act == ACCEL_ACT_SOFTMAX_EXP) {
    exp_shifted_pass(in, value, dst, count);
    return;
  }
#endif
  for (int64_t i = 0; i < count; ++i) dst[i] = in[i] + value;
  activation_exact(act, dst, count);
}
