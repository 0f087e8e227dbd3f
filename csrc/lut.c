/* lut.c - the SDP's lookup-table activations: their exact fp32 form, their names, the model
 * of NVDLA's LUT that the FP16 SDP evaluates them with (semantics and error bounds: accel_lut
 * in accel.h; NumPy model: accel_codegen/sim/reference.py), and the INT8 LUT, whose tables
 * the compiler programs (accel_lut_int8). */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "kernels.h"

static const double SQRT1_2 = 0.70710678118654752440; /* 1 / sqrt(2) */
static const double SQRT_2_PI = 0.79788456080286535588; /* sqrt(2 / pi) */

/* GELU's tanh form in double: 0.5 t (1 + tanh(u)) = t / (1 + exp(-2 u)), u = sqrt(2 / pi) (t
 * + 0.044715 t^3), the exponent held to 709 (t = -inf gives -inf, not -inf / inf); the NumPy
 * reference computes the same operations (accel_codegen/sim/reference.py). */
static double gelu_tanh64(double t) {
  const double u = SQRT_2_PI * (t + 0.044715 * (t * t * t));
  double z = -2.0 * u;
  if (z > 709.0) z = 709.0;
  return t / (1.0 + exp(z));
}

const char* activation_name(accel_activation act) {
  switch (act) {
    case ACCEL_ACT_NONE: return "";
    case ACCEL_ACT_RELU: return "relu";
    case ACCEL_ACT_CLIP: return "clip";
    case ACCEL_ACT_PRELU: return "prelu";
    case ACCEL_ACT_SIGMOID: return "sigmoid";
    case ACCEL_ACT_TANH: return "tanh";
    case ACCEL_ACT_SILU: return "silu";
    case ACCEL_ACT_HARDSWISH: return "hardswish";
    case ACCEL_ACT_HARDSIGMOID: return "hardsigmoid";
    case ACCEL_ACT_GELU: return "gelu";
    case ACCEL_ACT_EXP: return "exp";
    case ACCEL_ACT_RSQRT: return "rsqrt";
    case ACCEL_ACT_RECIPROCAL: return "reciprocal";
    case ACCEL_ACT_GELU_TANH: return "gelu_tanh";
    case ACCEL_ACT_SOFTMAX_EXP: return "softmax_exp";
    case ACCEL_ACT_COUNT: break;
  }
  return "?";
}

int lut_activation(accel_activation act) {
  return act >= ACCEL_ACT_SIGMOID && act < ACCEL_ACT_COUNT;
}

/* The geometry of each LUT activation's tables, from ACCEL_ACT_SIGMOID on. Ranges: where the
 * function bends (LO, fine) and where it has flattened enough for 1/2-steps (LE); steps are
 * powers of two because NVDLA's index is a shift. Beyond LE the slope continues the function's
 * asymptote: 0 for the bounded ends, 1 for silu / hardswish / gelu above (they approach t),
 * and for exp its own derivative at the table's end, e^11 rounded to half. */
static const accel_lut lut_geometry[ACCEL_ACT_COUNT - ACCEL_ACT_SIGMOID] = {
    [ACCEL_ACT_SIGMOID - ACCEL_ACT_SIGMOID] = {-8.0f, 1.0f / 16, -16.0f, 0.5f, 0.0f, 0.0f},
    [ACCEL_ACT_TANH - ACCEL_ACT_SIGMOID] = {-4.0f, 1.0f / 32, -16.0f, 0.5f, 0.0f, 0.0f},
    [ACCEL_ACT_SILU - ACCEL_ACT_SIGMOID] = {-8.0f, 1.0f / 16, -32.0f, 1.0f, 0.0f, 1.0f},
    [ACCEL_ACT_HARDSWISH - ACCEL_ACT_SIGMOID] = {-4.0f, 1.0f / 32, -16.0f, 0.5f, 0.0f, 1.0f},
    [ACCEL_ACT_HARDSIGMOID - ACCEL_ACT_SIGMOID] = {-4.0f, 1.0f / 32, -16.0f, 0.5f, 0.0f, 0.0f},
    [ACCEL_ACT_GELU - ACCEL_ACT_SIGMOID] = {-4.0f, 1.0f / 32, -16.0f, 0.5f, 0.0f, 1.0f},
    [ACCEL_ACT_EXP - ACCEL_ACT_SIGMOID] = {-5.0f, 1.0f / 16, -21.0f, 0.5f, 0.0f, 59872.0f},
    /* LE in exponent mode (le_step 0, accel.h): one entry per octave from le_start, so the
     * table spans 64 octaves, which a linear table of 65 entries cannot; LO is the density
     * table where layer norm's variances and softmax's sums mostly lie. Flat ends: below
     * le_start (also 0, negatives and -inf) the first entry, above the last. */
    [ACCEL_ACT_RSQRT - ACCEL_ACT_SIGMOID] = {0.5f, 1.0f / 64, 0x1p-30f, 0.0f, 0.0f, 0.0f},
    [ACCEL_ACT_RECIPROCAL - ACCEL_ACT_SIGMOID] = {0.5f, 1.0f / 64, 0x1p-15f, 0.0f, 0.0f, 0.0f},
    [ACCEL_ACT_GELU_TANH - ACCEL_ACT_SIGMOID] = {-4.0f, 1.0f / 32, -16.0f, 0.5f, 0.0f, 1.0f},
    /* exp where softmax reads it, t - max <= 0 (a little above 0 where the max was rounded
     * to half): LO twice as fine as exp's, a quarter of its interpolation error; above 0 the
     * slope continues e^0 = 1, 1 + t (within t^2 / 2 of e^t). */
    [ACCEL_ACT_SOFTMAX_EXP - ACCEL_ACT_SIGMOID] = {-8.0f, 1.0f / 32, -32.0f, 0.5f, 0.0f, 1.0f},
};

accel_status accel_lut_info(accel_activation act, accel_lut* out) {
  if (out == NULL) return accel_fail(ACCEL_ERR_NULL, "accel_lut_info: out is NULL");
  if (!lut_activation(act)) {
    return accel_fail(ACCEL_ERR_INVALID, "accel_lut_info: act = %d (%s) is not a lookup-table "
                      "activation", (int)act, activation_name(act));
  }
  *out = lut_geometry[act - ACCEL_ACT_SIGMOID];
  return ACCEL_OK;
}

/* The function itself, in double: the source of the table entries. */
static double lut_function(accel_activation act, double t) {
  switch (act) {
    case ACCEL_ACT_SIGMOID: return 1.0 / (1.0 + exp(-t));
    case ACCEL_ACT_TANH: return tanh(t);
    case ACCEL_ACT_SILU: return t / (1.0 + exp(-t));
    case ACCEL_ACT_HARDSWISH: return t * fmin(fmax(t + 3.0, 0.0), 6.0) / 6.0;
    case ACCEL_ACT_HARDSIGMOID: return fmin(fmax(t + 3.0, 0.0), 6.0) / 6.0;
    case ACCEL_ACT_GELU: return 0.5 * t * erfc(-t * SQRT1_2);
    case ACCEL_ACT_EXP:
    case ACCEL_ACT_SOFTMAX_EXP: return exp(t);
    case ACCEL_ACT_RSQRT: return 1.0 / sqrt(t);
    case ACCEL_ACT_RECIPROCAL: return 1.0 / t;
    case ACCEL_ACT_GELU_TANH: return gelu_tanh64(t);
    default: return 0.0;
  }
}

/* Entries are 16-bit in NVDLA: each is the function rounded once, from double, to half. */
static float half_entry(double v) { return (float)(_Float16)v; }

static lut_table tables[ACCEL_ACT_COUNT - ACCEL_ACT_SIGMOID];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void build_tables(void) {
  for (int a = ACCEL_ACT_SIGMOID; a < ACCEL_ACT_COUNT; ++a) {
    const accel_lut* g = &lut_geometry[a - ACCEL_ACT_SIGMOID];
    lut_table* t = &tables[a - ACCEL_ACT_SIGMOID];
    t->lo_start = g->lo_start;
    t->lo_scale = 1.0f / g->lo_step; /* exact: a power of two */
    t->lo_end = g->lo_start + (ACCEL_LUT_LO_ENTRIES - 1) * g->lo_step;
    t->le_start = g->le_start;
    /* le_scale 0 marks LE's exponent mode (le_step 0): LE[i] = f(le_start 2^i) */
    const int exponent = g->le_step == 0.0f;
    t->le_scale = exponent ? 0.0f : 1.0f / g->le_step;
    t->le_end = exponent ? ldexpf(g->le_start, ACCEL_LUT_LE_ENTRIES - 1)
                         : g->le_start + (ACCEL_LUT_LE_ENTRIES - 1) * g->le_step;
    t->underflow_slope = g->underflow_slope;
    t->overflow_slope = g->overflow_slope;
    for (int i = 0; i < ACCEL_LUT_LO_ENTRIES; ++i) {
      t->lo[i] = half_entry(lut_function((accel_activation)a, g->lo_start + (double)i * g->lo_step));
    }
    for (int i = 0; i < ACCEL_LUT_LE_ENTRIES; ++i) {
      const double at = exponent ? ldexp((double)g->le_start, i)
                                 : g->le_start + (double)i * g->le_step;
      t->le[i] = half_entry(lut_function((accel_activation)a, at));
    }
  }
}

const lut_table* lut_get(accel_activation act) {
  if (!lut_activation(act)) return NULL;
  pthread_once(&tables_once, build_tables);
  return &tables[act - ACCEL_ACT_SIGMOID];
}

/* Linear interpolation in a table of `intervals` + 1 entries, for start <= t < start + range. */
static float interpolate(const float* entries, int32_t intervals, float start, float scale,
                         float t) {
  const float u = (t - start) * scale;
  int32_t i = (int32_t)u; /* u >= 0: truncation is floor */
  if (i > intervals - 1) i = intervals - 1; /* t just below the end can round up to it */
  const float f = u - (float)i;
  return entries[i] + (entries[i + 1] - entries[i]) * f;
}

/* LE's exponent mode (NVDLA's X table with linear_start 0): the index is the octave of t
 * above le_start's, i = e - log2(le_start) for t in [2^e, 2^(e+1)) (a normal float: le_start
 * is), and the fraction is t's position within its octave, f = (t - 2^e) 2^-e: both from t's
 * exponent bits, and every step exact (t - 2^e by Sterbenz, a product by a power of two). */
static float interpolate_octaves(const float* entries, float start, float t) {
  uint32_t tb, sb;
  memcpy(&tb, &t, sizeof tb);
  memcpy(&sb, &start, sizeof sb);
  const int32_t i = (int32_t)((tb >> 23) & 0xffu) - (int32_t)((sb >> 23) & 0xffu);
  const uint32_t base_bits = tb & 0x7f800000u;
  const uint32_t inverse_bits = (254u << 23) - base_bits; /* 2^-e */
  float base, inverse;
  memcpy(&base, &base_bits, sizeof base);
  memcpy(&inverse, &inverse_bits, sizeof inverse);
  const float f = (t - base) * inverse;
  return entries[i] + (entries[i + 1] - entries[i]) * f;
}

static float lut_eval(const lut_table* l, float t) {
  if (t != t) return t;
  if (t >= l->lo_start && t < l->lo_end) {
    return interpolate(l->lo, ACCEL_LUT_LO_ENTRIES - 1, l->lo_start, l->lo_scale, t);
  }
  if (t >= l->le_start && t < l->le_end) {
    if (l->le_scale == 0.0f) return interpolate_octaves(l->le, l->le_start, t);
    return interpolate(l->le, ACCEL_LUT_LE_ENTRIES - 1, l->le_start, l->le_scale, t);
  }
  /* A zero slope is the flat end itself, also for infinite t (inf * 0 would be NaN). */
  if (t < l->le_start) {
    return l->underflow_slope == 0.0f ? l->le[0]
                                      : l->le[0] + (t - l->le_start) * l->underflow_slope;
  }
  const float last = l->le[ACCEL_LUT_LE_ENTRIES - 1];
  return l->overflow_slope == 0.0f ? last : last + (t - l->le_end) * l->overflow_slope;
}

void lut_apply(const lut_table* l, float* x, int64_t count) {
  for (int64_t i = 0; i < count; ++i) x[i] = lut_eval(l, x[i]);
}

/* exp in fp32 (accel.h: FP32's sigmoid, silu and exp), in plain fp32 operations that the
 * compiler turns into vector code on any host (no libm call, no branch), so every build
 * gives the same bits, and so does the NumPy reference (exp_f32 in reference.py, the same
 * operations in the same order):
 *  - t is held to [-104, 89] (NaN stays): beyond, e^t rounds to 0 or overflows either way;
 *  - n = round(t log2(e)) by the 1.5 2^23 trick (ties to even), r = t - n ln2 in two steps
 *    (ln2's high part has 9 bits, so n * LN2_HI is exact for |n| <= 151);
 *  - e^r = 1 + r + r^2 q(r) on |r| <= ln2 / 2, q a degree-4 polynomial fitted to
 *    (e^r - 1 - r) / r^2 (truncation error 3.1e-9 relative);
 *  - times 2^n as two powers of two built from n's bits (2^h, 2^(n-h), h = n >> 1), each
 *    normal for the held t, so subnormal results round once.
 * Error, over every fp32 input against exp in double: at most 0.99 ulp (libm's expf: 0.51);
 * it overflows to infinity at the same inputs as libm's. */
static const float EXP_LOG2E = 1.44269502163f, EXP_ROUND = 12582912.0f; /* 1.5 2^23 */
static const float LN2_HI = 0.693359375f, LN2_LO = -2.12194440e-4f;
static const float EXP_Q0 = 4.999999404e-01f, EXP_Q1 = 1.666652113e-01f,
                   EXP_Q2 = 4.166838899e-02f, EXP_Q3 = 8.368745446e-03f,
                   EXP_Q4 = 1.381453942e-03f;

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
  const float k = c * EXP_LOG2E + EXP_ROUND;
  const float n = k - EXP_ROUND;
  float r = c - n * LN2_HI;
  r = r - n * LN2_LO;
  float q = EXP_Q4 * r + EXP_Q3;
  q = q * r + EXP_Q2;
  q = q * r + EXP_Q1;
  q = q * r + EXP_Q0;
  float p = (r * r) * q + r;
  p = p + 1.0f;
  uint32_t kb;
  memcpy(&kb, &k, sizeof kb);
  const uint32_t ni = kb - 0x4B400000u; /* n in two's complement (k's bits minus 1.5 2^23's) */
  const uint32_t h = (uint32_t)((int32_t)ni >> 1);
  const uint32_t b1 = (h + 127u) << 23, b2 = (ni - h + 127u) << 23;
  float s1, s2;
  memcpy(&s1, &b1, sizeof s1);
  memcpy(&s2, &b2, sizeof s2);
  return (p * s1) * s2;
}

#if defined(__AVX512F__)
#include <immintrin.h>

/* exp_f32 in 16 lanes, the same bits: the clamp as max / min with t second (MAXPS returns
 * its second operand for a NaN, so NaN stays as in the bit selection), and (p 2^h) 2^(n-h) as
 * one VSCALEFPS by n: p 2^h is exact (normal for the held t), so both round p 2^n once, to
 * the same value, subnormal or infinite results included. Two steps in one instruction each
 * where that rounds alike: n = (c log2e + 1.5 2^23) - 1.5 2^23 is c log2e rounded to the
 * nearest integer, ties to even (|c log2e| <= 151 < 2^22), which VRNDSCALEPS gives; and
 * c - n LN2_HI, whose product is exact (9 bits times 8), one FNMADD. Same operations otherwise,
 * in the same order, each rounded alone (no other FMA). Compared with the scalar steps over
 * all 2^32 inputs: the same bits (NaNs included); the SiLU pass 0.396 -> 0.359 ns a value
 * (C harness, Zen 4, 1 thread, thread clock). */
static inline __m512 exp_f32_x16(__m512 t) {
  __m512 c = _mm512_max_ps(_mm512_set1_ps(-104.0f), t);
  c = _mm512_min_ps(_mm512_set1_ps(89.0f), c);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(EXP_LOG2E)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), c);
  r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(LN2_LO)));
  __m512 q = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(EXP_Q4), r), _mm512_set1_ps(EXP_Q3));
  q = _mm512_add_ps(_mm512_mul_ps(q, r), _mm512_set1_ps(EXP_Q2));
  q = _mm512_add_ps(_mm512_mul_ps(q, r), _mm512_set1_ps(EXP_Q1));
  q = _mm512_add_ps(_mm512_mul_ps(q, r), _mm512_set1_ps(EXP_Q0));
  __m512 p = _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(r, r), q), r);
  p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
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

static void exp_pass(float* x, int64_t count) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) _mm512_storeu_ps(x + i, exp_f32_x16(_mm512_loadu_ps(x + i)));
  if (i < count) {
    const __mmask16 m = (__mmask16)((1u << (count - i)) - 1u);
    _mm512_mask_storeu_ps(x + i, m, exp_f32_x16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}
#elif defined(__AVX2__)
#include <immintrin.h>

/* exp_f32 in 8 lanes (an x86-64-v3 build), the same bits: the clamp as max / min with t second
 * (NaN stays, as in the bit selection), then exp_f32's operations in its order, each rounded
 * alone (no FMA but c - n LN2_HI, whose product is exact: exp_f32_x16), 2^n as its two powers
 * of two. GCC's vectorisation of the scalar loops kept the BN's scale and shift a pass of their
 * own and spilled the constants. */
static inline __m256 exp_f32_x8(__m256 t) {
  __m256 c = _mm256_max_ps(_mm256_set1_ps(-104.0f), t);
  c = _mm256_min_ps(_mm256_set1_ps(89.0f), c);
  const __m256 round = _mm256_set1_ps(EXP_ROUND);
  const __m256 k = _mm256_add_ps(_mm256_mul_ps(c, _mm256_set1_ps(EXP_LOG2E)), round);
  const __m256 n = _mm256_sub_ps(k, round);
#ifdef __FMA__
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), c);
#else
  __m256 r = _mm256_sub_ps(c, _mm256_mul_ps(n, _mm256_set1_ps(LN2_HI)));
#endif
  r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(LN2_LO)));
  __m256 q = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(EXP_Q4), r), _mm256_set1_ps(EXP_Q3));
  q = _mm256_add_ps(_mm256_mul_ps(q, r), _mm256_set1_ps(EXP_Q2));
  q = _mm256_add_ps(_mm256_mul_ps(q, r), _mm256_set1_ps(EXP_Q1));
  q = _mm256_add_ps(_mm256_mul_ps(q, r), _mm256_set1_ps(EXP_Q0));
  __m256 p = _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(r, r), q), r);
  p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
  const __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(k), _mm256_set1_epi32(0x4B400000));
  const __m256i h = _mm256_srai_epi32(ni, 1);
  const __m256i b1 = _mm256_slli_epi32(_mm256_add_epi32(h, _mm256_set1_epi32(127)), 23);
  const __m256i b2 =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, h), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(b1)), _mm256_castsi256_ps(b2));
}

static inline __m256 logistic_x8(__m256 t, int silu) {
  const __m256 neg = _mm256_xor_ps(t, _mm256_set1_ps(-0.0f));
  const __m256 d = _mm256_add_ps(_mm256_set1_ps(1.0f), exp_f32_x8(neg));
  return _mm256_div_ps(silu ? t : _mm256_set1_ps(1.0f), d);
}

/* x = sigmoid(x * s + b) or silu(...) in one pass, as the AVX-512 build's logistic_pass; the
 * last count % 8 values through the scalar exp_f32 (the same bits). */
static inline __attribute__((always_inline)) void logistic_pass(float* x, int64_t count,
                                                                float s, float b, int affine,
                                                                int silu) {
  const __m256 vs = _mm256_set1_ps(s), vb = _mm256_set1_ps(b);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256 t = _mm256_loadu_ps(x + i);
    if (affine & 2) t = _mm256_mul_ps(t, vs);
    if (affine & 1) t = _mm256_add_ps(t, vb);
    _mm256_storeu_ps(x + i, logistic_x8(t, silu));
  }
  for (; i < count; ++i) {
    float t = x[i];
    if (affine & 2) t = t * s;
    if (affine & 1) t = t + b;
    x[i] = (silu ? t : 1.0f) / (1.0f + exp_f32(-t));
  }
}

static void exp_pass(float* x, int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) _mm256_storeu_ps(x + i, exp_f32_x8(_mm256_loadu_ps(x + i)));
  for (; i < count; ++i) x[i] = exp_f32(x[i]);
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

#if defined(__AVX512F__) || defined(__AVX2__)
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

int activation_affine(accel_activation act, float* x, int64_t count, const float* s,
                      const float* b) {
  const int affine = (s != NULL) * 2 + (b != NULL);
  const float sv = s != NULL ? *s : 1.0f, bv = b != NULL ? *b : 0.0f;
  if (act == ACCEL_ACT_HARDSWISH || act == ACCEL_ACT_HARDSIGMOID) {
    hard_passes[act == ACCEL_ACT_HARDSWISH][affine](x, count, sv, bv);
    return 1;
  }
#if defined(__AVX512F__) || defined(__AVX2__)
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

/* GELU in FP32: t Phi(t), Phi(t) = erfc(-t / sqrt 2) / 2, in plain double operations (no libm
 * call, so 8 lanes of them; the NumPy reference's gelu_f64 does the same operations in the same
 * order), rounded to float once. With a = |t| / sqrt 2:
 *  - a < 1: erf(a) = a A(a^2), A of degree 11 fitted to erf(a) / a (relative error 1.4e-16),
 *    Phi = 1/2 +- erf(a) / 2;
 *  - 1 <= a <= 10.5: erfc(a) = exp(-a^2) B(1 / (a + 4) - 0.135), B of degree 15 fitted to
 *    exp(a^2) erfc(a) (relative error 4e-16), Phi = 1 - erfc(a) / 2 for t >= 0, erfc(a) / 2 below;
 *    beyond 10.5, Phi is 1 or 0 (|GELU(t)| < 1e-48 there for t < 0: -0 in float);
 *  - exp in double: n = round(x log2 e) (the 1.5 2^52 trick), r = x - n ln2 in two steps (ln2's
 *    high part has 33 bits: n LN2_HI exact), e^r by its Taylor series to degree 13 on |r| <=
 *    ln2 / 2 (truncation error 2e-17), times 2^n (exact or one rounding, either way).
 * Phi is within 1e-14 of its value relative, so GELU is within 0.5 + 1e-6 ulp of the exact
 * value (measured over 7,000 inputs against mpmath: 0.49994 ulp; the libm erfc form it replaced
 * gave the same float for each of 10^6 random inputs in [-15, 15]); NaN stays NaN, -inf gives NaN
 * (-inf times 0), as t erfc(...) / 2 did. */
static const double GELU_A[12] = {
    1.1283791670955126, -0.37612638903183515, 0.1128379167094405, -0.026866170643090832,
    0.005223977605955977, -0.0008548325921832884, 0.00012055293361789941,
    -1.4924708324571507e-05, 1.6447084274239356e-06, -1.6205964194101388e-07,
    1.3709519207384055e-08, -7.77682913736281e-10};
static const double GELU_B[16] = {
    0.15921348587767364, 2.379629345296726, 16.81081582883102, 104.19436117406323,
    563.0080875183819, 2620.722423404825, 10290.022841460313, 32766.264300610168,
    77548.52116997201, 100856.85243798897, -107830.48811859265, -851102.8690426609,
    -1280629.0521935227, 2912513.6829396607, 12374987.272467982, 1320276.9524882296};
static const double GELU_B_CENTRE = 0.135, GELU_FAR = 10.5;
static const double EXP64_LOG2E = 1.4426950408889634, EXP64_ROUND = 6755399441055744.0;
static const double EXP64_LN2_HI = 0x1.62e42fefa0000p-1, EXP64_LN2_LO = 1.6465717678215697e-12;
/* 1 / k!, k = 0 .. 13 */
static const double EXP64_C[14] = {1.0, 1.0, 0.5, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720,
                                   1.0 / 5040, 1.0 / 40320, 1.0 / 362880, 1.0 / 3628800,
                                   1.0 / 39916800, 1.0 / 479001600, 1.0 / 6227020800};

static inline double exp_f64(double x) {
  x = x < -708.0 ? -708.0 : x; /* NaN stays */
  const double k = x * EXP64_LOG2E + EXP64_ROUND;
  const double n = k - EXP64_ROUND;
  double r = x - n * EXP64_LN2_HI;
  r = r - n * EXP64_LN2_LO;
  double p = EXP64_C[13];
  for (int i = 12; i >= 0; --i) p = p * r + EXP64_C[i];
  if (n != n) return p * n; /* NaN */
  const uint64_t bits = (uint64_t)((int64_t)n + 1023) << 52; /* 2^n, normal for n >= -708 log2 e */
  double scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

static inline float gelu_f64(float t) {
  const double w = t;
  const double a = fabs(w) * SQRT1_2, q = a * a;
  double pa = GELU_A[11];
  for (int i = 10; i >= 0; --i) pa = pa * q + GELU_A[i];
  const double e = a * pa;
  const double v = 1.0 / (a + 4.0) - GELU_B_CENTRE;
  double pb = GELU_B[15];
  for (int i = 14; i >= 0; --i) pb = pb * v + GELU_B[i];
  const double g = a > GELU_FAR ? 0.0 : exp_f64(-q) * pb;
  const int positive = !signbit(w);
  const double phi = a < 1.0 ? (positive ? 0.5 + 0.5 * e : 0.5 - 0.5 * e)
                             : (positive ? 1.0 - 0.5 * g : 0.5 * g);
  return (float)(w * phi);
}

#if defined(__AVX512F__)
static inline __m512d exp_f64_x8(__m512d x) {
  x = _mm512_max_pd(x, _mm512_set1_pd(-708.0)); /* NaN: -708 (the result is not used) */
  const __m512d round = _mm512_set1_pd(EXP64_ROUND);
  const __m512d k = _mm512_add_pd(_mm512_mul_pd(x, _mm512_set1_pd(EXP64_LOG2E)), round);
  const __m512d n = _mm512_sub_pd(k, round);
  __m512d r = _mm512_sub_pd(x, _mm512_mul_pd(n, _mm512_set1_pd(EXP64_LN2_HI)));
  r = _mm512_sub_pd(r, _mm512_mul_pd(n, _mm512_set1_pd(EXP64_LN2_LO)));
  __m512d p = _mm512_set1_pd(EXP64_C[13]);
  for (int i = 12; i >= 0; --i)
    p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(EXP64_C[i]));
  return _mm512_scalef_pd(p, n);
}

/* gelu_f64 of 8 floats, the same operations in 8 double lanes, in its two branches: near
 * (a = |t| / sqrt 2 < 1: erf's polynomial) and far (the others, NaN included: erfc's
 * polynomial, its division and exp). Each lane's value is the one gelu_f64 selects. */
static inline __m512d gelu_phi_sign(__m512d w, __m512d low, __m512d high) {
  const __mmask8 positive =
      _mm512_cmp_epi64_mask(_mm512_castpd_si512(w), _mm512_setzero_si512(), _MM_CMPINT_NLT);
  return _mm512_mul_pd(w, _mm512_mask_blend_pd(positive, low, high));
}

static inline __m256 gelu_near_x8(__m256 t) {
  const __m512d w = _mm512_cvtps_pd(t);
  const __m512d a = _mm512_mul_pd(_mm512_abs_pd(w), _mm512_set1_pd(SQRT1_2));
  const __m512d q = _mm512_mul_pd(a, a);
  __m512d pa = _mm512_set1_pd(GELU_A[11]);
  for (int i = 10; i >= 0; --i)
    pa = _mm512_add_pd(_mm512_mul_pd(pa, q), _mm512_set1_pd(GELU_A[i]));
  const __m512d half = _mm512_set1_pd(0.5);
  const __m512d he = _mm512_mul_pd(half, _mm512_mul_pd(a, pa));
  return _mm512_cvtpd_ps(gelu_phi_sign(w, _mm512_sub_pd(half, he), _mm512_add_pd(half, he)));
}

static inline __m256 gelu_far_x8(__m256 t) {
  const __m512d w = _mm512_cvtps_pd(t);
  const __m512d a = _mm512_mul_pd(_mm512_abs_pd(w), _mm512_set1_pd(SQRT1_2));
  const __m512d q = _mm512_mul_pd(a, a);
  const __m512d v = _mm512_sub_pd(_mm512_div_pd(_mm512_set1_pd(1.0),
                                                _mm512_add_pd(a, _mm512_set1_pd(4.0))),
                                  _mm512_set1_pd(GELU_B_CENTRE));
  __m512d pb = _mm512_set1_pd(GELU_B[15]);
  for (int i = 14; i >= 0; --i)
    pb = _mm512_add_pd(_mm512_mul_pd(pb, v), _mm512_set1_pd(GELU_B[i]));
  const __m512d g = _mm512_maskz_mul_pd(
      _mm512_cmp_pd_mask(a, _mm512_set1_pd(GELU_FAR), _CMP_NGT_UQ),
      exp_f64_x8(_mm512_sub_pd(_mm512_setzero_pd(), q)), pb);
  const __m512d hg = _mm512_mul_pd(_mm512_set1_pd(0.5), g);
  return _mm512_cvtpd_ps(gelu_phi_sign(w, hg, _mm512_sub_pd(_mm512_set1_pd(1.0), hg)));
}

#define GELU_X16(branch)                                                                    \
  static inline __m512 gelu_##branch##_x16(__m512 t) {                                      \
    const __m256 lo = _mm512_castps512_ps256(t);                                            \
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(t), 1));     \
    return _mm512_castpd_ps(_mm512_insertf64x4(                                             \
        _mm512_castps_pd(_mm512_castps256_ps512(gelu_##branch##_x8(lo))),                   \
        _mm256_castps_pd(gelu_##branch##_x8(hi)), 1));                                      \
  }
GELU_X16(near)
GELU_X16(far)
#undef GELU_X16

/* The lanes of 16 floats that take the near branch: a = |t| / sqrt 2 < 1 in double, as
 * gelu_f64 decides (NaN: far). */
static inline __mmask16 gelu_near_lanes(__m512 t) {
  const __m512d r = _mm512_set1_pd(SQRT1_2), one = _mm512_set1_pd(1.0);
  const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(t));
  const __m512d hi = _mm512_cvtps_pd(
      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(t), 1)));
  const __mmask8 l = _mm512_cmp_pd_mask(_mm512_mul_pd(_mm512_abs_pd(lo), r), one, _CMP_LT_OQ);
  const __mmask8 h = _mm512_cmp_pd_mask(_mm512_mul_pd(_mm512_abs_pd(hi), r), one, _CMP_LT_OQ);
  return (__mmask16)(l | (h << 8));
}

/* Computing both branches in every lane cost 3-4 ns an element (a quarter of ViT-Ti's MLP
 * time). Instead, per chunk of the tensor, the elements are sorted by branch (compressed into
 * two buffers, in order), each buffer runs its branch alone in full vectors, and the results
 * are expanded back to their places: the same operations on each element, so the same bits.
 * The compress and expand are the register forms (their memory forms are slow on AMD Zen 4). */
enum { GELU_CHUNK = 1024 };

static inline void gelu_branch(float* buf, int64_t n, int near) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(buf + i);
    _mm512_storeu_ps(buf + i, near ? gelu_near_x16(v) : gelu_far_x16(v));
  }
  if (i < n) {
    const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(m, buf + i);
    _mm512_mask_storeu_ps(buf + i, m, near ? gelu_near_x16(v) : gelu_far_x16(v));
  }
}

static void gelu_pass(float* x, int64_t count) {
  float near[GELU_CHUNK], far[GELU_CHUNK];
  __mmask16 lanes[GELU_CHUNK / 16];
  for (int64_t c0 = 0; c0 < count; c0 += GELU_CHUNK) {
    const int64_t n = count - c0 < GELU_CHUNK ? count - c0 : GELU_CHUNK;
    float* chunk = x + c0;
    int64_t nn = 0, nf = 0;
    for (int64_t b = 0; b * 16 < n; ++b) {
      const int64_t len = n - b * 16 < 16 ? n - b * 16 : 16;
      const __mmask16 valid = (__mmask16)((1u << len) - 1u);
      const __m512 v = _mm512_maskz_loadu_ps(valid, chunk + b * 16);
      const __mmask16 mn = gelu_near_lanes(v) & valid, mf = (__mmask16)(~mn & valid);
      const int kn = __builtin_popcount(mn), kf = __builtin_popcount(mf);
      lanes[b] = mn;
      _mm512_mask_storeu_ps(near + nn, (__mmask16)((1u << kn) - 1u),
                            _mm512_maskz_compress_ps(mn, v));
      _mm512_mask_storeu_ps(far + nf, (__mmask16)((1u << kf) - 1u),
                            _mm512_maskz_compress_ps(mf, v));
      nn += kn;
      nf += kf;
    }
    gelu_branch(near, nn, 1);
    gelu_branch(far, nf, 0);
    int64_t pn = 0, pf = 0;
    for (int64_t b = 0; b * 16 < n; ++b) {
      const int64_t len = n - b * 16 < 16 ? n - b * 16 : 16;
      const __mmask16 valid = (__mmask16)((1u << len) - 1u);
      const __mmask16 mn = lanes[b], mf = (__mmask16)(~mn & valid);
      const int kn = __builtin_popcount(mn), kf = __builtin_popcount(mf);
      const __m512 from_near = _mm512_maskz_loadu_ps((__mmask16)((1u << kn) - 1u), near + pn);
      const __m512 from_far = _mm512_maskz_loadu_ps((__mmask16)((1u << kf) - 1u), far + pf);
      const __m512 r = _mm512_mask_expand_ps(_mm512_maskz_expand_ps(mn, from_near), mf, from_far);
      _mm512_mask_storeu_ps(chunk + b * 16, valid, r);
      pn += kn;
      pf += kf;
    }
  }
}
#else
static void gelu_pass(float* x, int64_t count) {
  for (int64_t i = 0; i < count; ++i) x[i] = gelu_f64(x[i]);
}
#endif

/* FP32: the functions themselves (accel.h): sigmoid, silu and exp through exp_f32, tanh
 * through tanh_f32; GELU through gelu_f64 (in double, rounded once); its tanh form in double as
 * t / (1 + exp(-2 u)), rounded once (1 + tanh cancels in fp32 for negative t). */
void activation_exact(accel_activation act, float* x, int64_t count) {
  switch (act) {
#if defined(__AVX512F__) || defined(__AVX2__)
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
      gelu_pass(x, count);
      break;
    case ACCEL_ACT_GELU_TANH:
      for (int64_t i = 0; i < count; ++i) x[i] = (float)gelu_tanh64(x[i]);
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

/* ---- INT8: the integer LUT (accel_lut_int8 in accel.h), exact in int64 ------------------ */

static inline int64_t rhaz64(int64_t p, int64_t s) {
  const int64_t half = s > 0 ? (int64_t)1 << (s - 1) : 0;
  const int64_t a = ((p < 0 ? -p : p) + half) >> s;
  return p < 0 ? -a : a;
}

/* Interpolation between entries i and i + 1 at offset d (>= 0) from the table's start. */
static inline int64_t lut_int8_hit(const int16_t* entries, int64_t d, int32_t select) {
  const int64_t i = d >> select;
  const int64_t r = d & (((int64_t)1 << select) - 1);
  const int64_t f = select >= 16 ? r >> (select - 16) : r << (16 - select);
  return rhaz64((int64_t)entries[i] * (65536 - f) + (int64_t)entries[i + 1] * f, 16);
}

int64_t lut_int8_eval(const accel_lut_int8* l, int64_t t) {
  int64_t y;
  const int64_t lo = t - l->lo_start, le = t - l->le_start;
  const int64_t le_end = (int64_t)l->le_start + ((int64_t)(ACCEL_LUT_LE_ENTRIES - 1)
                                                 << l->le_index_select);
  if (lo >= 0 && lo < ((int64_t)(ACCEL_LUT_LO_ENTRIES - 1) << l->lo_index_select)) {
    y = lut_int8_hit(l->lo, lo, l->lo_index_select);
  } else if (le >= 0 && t < le_end) {
    y = lut_int8_hit(l->le, le, l->le_index_select);
  } else if (le < 0) {
    y = l->le[0] + rhaz64(le * l->underflow_scale, l->underflow_shift);
  } else {
    y = l->le[ACCEL_LUT_LE_ENTRIES - 1] + rhaz64((t - le_end) * l->overflow_scale,
                                                 l->overflow_shift);
  }
  return y < INT32_MIN ? INT32_MIN : y > INT32_MAX ? INT32_MAX : y;
}
