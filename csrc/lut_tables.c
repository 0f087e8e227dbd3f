/* lut_tables.c - the model of NVDLA's LUT that the FP16 SDP evaluates its lookup-table
 * activations with (semantics and error bounds: accel_lut in accel.h; NumPy model:
 * accel_codegen/sim/reference.py): each activation's name, its tables' geometry, the float64
 * function their entries are rounded from, the tables (built once per process) and their
 * evaluation. The FP32 forms are lut.c's; the INT8 table, which the compiler programs, is
 * sdp_i8_lut.c's. */
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "kernels.h"

static const double SQRT1_2 = 0.70710678118654752440; /* 1 / sqrt(2) */
static const double SQRT_2_PI = 0.79788456080286535588; /* sqrt(2 / pi) */

/* GELU's tanh form in double: 0.5 t (1 + tanh(u)) = t / (1 + exp(-2 u)), u = sqrt(2 / pi) (t
 * + 0.044715 t^3), the exponent held to 709 (t = -inf gives -inf, not -inf / inf); the NumPy
 * reference computes the same operations (accel_codegen/sim/reference.py). */
double gelu_tanh64(double t) {
  const double u = SQRT_2_PI * (t + 0.044715 * (t * t * t));
  double z = -2.0 * u;
  if (z > 709.0) z = 709.0;
  return t / (1.0 + exp(z));
}

/* Mish in double (the tables' source): t tanh(ln(1 + e^t)), t itself from 30 on (tanh is 1
 * there); -inf gives NaN (-inf x 0), as PyTorch's. lut_math.mish64: the same libm calls. */
static double mish64(double t) { return t * tanh(t > 30.0 ? t : log1p(exp(t))); }

/* softplus in double (the tables' source and, rounded once, the FP32 SDP's): ln(1 + e^t)
 * through libm's log1p and exp, t itself from 30 on (ln(1 + e^-30) = 9.4e-14 is below half an
 * ulp of t in double from there: t rounds to itself either way, and e^t would overflow from
 * 710). -inf gives 0, NaN stays. lut_math.softplus64: the same libm calls. */
double softplus64(double t) { return t > 30.0 ? t : log1p(exp(t)); }

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
    case ACCEL_ACT_MISH: return "mish";
    case ACCEL_ACT_SOFTPLUS: return "softplus";
    case ACCEL_ACT_LOG: return "log";
    case ACCEL_ACT_COUNT: break;
  }
  return "?";
}

int lut_activation(accel_activation act) {
  return act >= ACCEL_ACT_SIGMOID && act < ACCEL_ACT_COUNT;
}

/* The geometry of each LUT activation's tables, from ACCEL_ACT_SIGMOID on: where the function
 * bends (LO, fine) and where it has flattened for 1/2-steps (LE); steps are powers of two (the
 * index is a shift). Beyond LE the slope is the asymptote's: 0 for the bounded ends, 1 for
 * silu / hardswish / gelu above, for exp its derivative at the table's end (e^11 in half). */
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
    [ACCEL_ACT_MISH - ACCEL_ACT_SIGMOID] = {-8.0f, 1.0f / 16, -32.0f, 1.0f, 0.0f, 1.0f},
    /* silu's too: softplus bends over the same [-8, 8) (softplus'' = sigmoid', at most 1/4
     * at 0) and has silu's ends, 0 below and t above */
    [ACCEL_ACT_SOFTPLUS - ACCEL_ACT_SIGMOID] = {-8.0f, 1.0f / 16, -32.0f, 1.0f, 0.0f, 1.0f},
    /* LE in exponent mode, as reciprocal's: ln's octaves from half's smallest subnormal
     * 2^-24; LO where log_softmax's sums of exponentials (1 .. C) mostly lie, [1, 9) */
    [ACCEL_ACT_LOG - ACCEL_ACT_SIGMOID] = {1.0f, 1.0f / 32, 0x1p-24f, 0.0f, 0.0f, 0.0f},
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
    case ACCEL_ACT_MISH: return mish64(t);
    case ACCEL_ACT_SOFTPLUS: return softplus64(t);
    case ACCEL_ACT_LOG: return log(t);
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
    for (int i = 0; i + 1 < ACCEL_LUT_LO_ENTRIES; ++i) {
      t->lo_ends[2 * i] = t->lo[i];
      t->lo_ends[2 * i + 1] = t->lo[i + 1];
    }
    for (int i = 0; i + 1 < ACCEL_LUT_LE_ENTRIES; ++i) {
      t->le_ends[2 * i] = t->le[i];
      t->le_ends[2 * i + 1] = t->le[i + 1];
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

#ifdef __AVX512F__
/* interpolate and interpolate_octaves in 16 lanes: the same operations, each rounded as the
 * scalar one's (the build has -ffp-contract=off); only the `valid` lanes read the entries,
 * interval i's two ends at once from `ends` (lut_table's lo_ends, le_ends): two gathers of 8
 * pairs, then the pairs' first and second halves picked apart. */
static inline __m512 interpolate_at16(const float* ends, __m512i i, __m512 f,
                                      __mmask16 valid) {
  const __m512i zero = _mm512_setzero_si512();
  const __m512 lanes0_7 = _mm512_castsi512_ps(_mm512_mask_i32gather_epi64(
      zero, (__mmask8)valid, _mm512_castsi512_si256(i), ends, 8));
  const __m512 lanes8_15 = _mm512_castsi512_ps(_mm512_mask_i32gather_epi64(
      zero, (__mmask8)(valid >> 8), _mm512_extracti64x4_epi64(i, 1), ends, 8));
  const __m512i firsts = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                           28, 30);
  const __m512 a = _mm512_permutex2var_ps(lanes0_7, firsts, lanes8_15);
  const __m512 b = _mm512_permutex2var_ps(
      lanes0_7, _mm512_add_epi32(firsts, _mm512_set1_epi32(1)), lanes8_15);
  return _mm512_add_ps(a, _mm512_mul_ps(_mm512_sub_ps(b, a), f));
}

static inline __m512 interpolate16(const float* ends, int32_t intervals, float start,
                                   float scale, __m512 t, __mmask16 valid) {
  const __m512 u = _mm512_mul_ps(_mm512_sub_ps(t, _mm512_set1_ps(start)), _mm512_set1_ps(scale));
  const __m512i i = _mm512_min_epi32(_mm512_cvttps_epi32(u), _mm512_set1_epi32(intervals - 1));
  const __m512 f = _mm512_sub_ps(u, _mm512_cvtepi32_ps(i));
  return interpolate_at16(ends, i, f, valid);
}
#endif

void lut_apply(const lut_table* l, float* x, int64_t count) {
  int64_t i = 0;
#ifdef __AVX512F__
  /* 16 values a step, each placed as lut_eval places it: LO, LE, below LE (the underflow
   * slope), above (the overflow slope: a softmax's exp of its max, t = 0), NaN (itself) */
  const __m512 lo_start = _mm512_set1_ps(l->lo_start), lo_end = _mm512_set1_ps(l->lo_end);
  const __m512 le_start = _mm512_set1_ps(l->le_start), le_end = _mm512_set1_ps(l->le_end);
  const __m512 first = _mm512_set1_ps(l->le[0]);
  const __m512 last = _mm512_set1_ps(l->le[ACCEL_LUT_LE_ENTRIES - 1]);
  const __m512 under_slope = _mm512_set1_ps(l->underflow_slope);
  const __m512 over_slope = _mm512_set1_ps(l->overflow_slope);
  const int octaves = l->le_scale == 0.0f;
  uint32_t start_bits;
  memcpy(&start_bits, &l->le_start, sizeof start_bits);
  const __m512i start_exponent = _mm512_set1_epi32((int32_t)((start_bits >> 23) & 0xffu));
  for (; i + 16 <= count; i += 16) {
    const __m512 t = _mm512_loadu_ps(x + i);
    const __mmask16 lo = _mm512_cmp_ps_mask(t, lo_start, _CMP_GE_OQ) &
                         _mm512_cmp_ps_mask(t, lo_end, _CMP_LT_OQ);
    const __mmask16 le = (__mmask16)~lo & _mm512_cmp_ps_mask(t, le_start, _CMP_GE_OQ) &
                         _mm512_cmp_ps_mask(t, le_end, _CMP_LT_OQ);
    __m512 y =
        interpolate16(l->lo_ends, ACCEL_LUT_LO_ENTRIES - 1, l->lo_start, l->lo_scale, t, lo);
    if (le) {
      __m512 z;
      if (octaves) { /* interpolate_octaves in lanes */
        const __m512i tb = _mm512_castps_si512(t);
        const __m512i base_bits = _mm512_and_si512(tb, _mm512_set1_epi32(0x7f800000));
        const __m512i k = _mm512_sub_epi32(_mm512_srli_epi32(base_bits, 23), start_exponent);
        const __m512 inverse = _mm512_castsi512_ps(
            _mm512_sub_epi32(_mm512_set1_epi32((int32_t)(254u << 23)), base_bits));
        const __m512 f = _mm512_mul_ps(_mm512_sub_ps(t, _mm512_castsi512_ps(base_bits)),
                                       inverse);
        z = interpolate_at16(l->le_ends, k, f, le);
      } else {
        z = interpolate16(l->le_ends, ACCEL_LUT_LE_ENTRIES - 1, l->le_start, l->le_scale, t, le);
      }
      y = _mm512_mask_blend_ps(le, y, z);
    }
    const __mmask16 rest = (__mmask16)~(lo | le);
    if (rest) { /* the slopes beyond LE; a zero slope is the flat end itself, infinities too */
      const __mmask16 nan = _mm512_cmp_ps_mask(t, t, _CMP_UNORD_Q);
      const __mmask16 under = rest & _mm512_cmp_ps_mask(t, le_start, _CMP_LT_OQ);
      const __mmask16 over = rest & (__mmask16)~(under | nan);
      const __m512 below =
          l->underflow_slope == 0.0f
              ? first
              : _mm512_add_ps(first, _mm512_mul_ps(_mm512_sub_ps(t, le_start), under_slope));
      const __m512 above =
          l->overflow_slope == 0.0f
              ? last
              : _mm512_add_ps(last, _mm512_mul_ps(_mm512_sub_ps(t, le_end), over_slope));
      y = _mm512_mask_blend_ps(under, y, below);
      y = _mm512_mask_blend_ps(over, y, above);
      y = _mm512_mask_blend_ps(nan, y, t);
    }
    _mm512_storeu_ps(x + i, y);
  }
#endif
  for (; i < count; ++i) x[i] = lut_eval(l, x[i]);
}
