/* sdp.c - the SDP engine: per-channel scale/shift, element-wise op, activation (fp32). */
#include <math.h>

#include "kernels.h"

/* Built with -ffp-contract=off: x * scale + shift rounds twice, as the NumPy reference does. */
void sdp_f32_span(const sdp_f32* p, int32_t channel, float* x, const float* operand,
                  int64_t count) {
  if (p->scale != NULL && p->shift != NULL) {
    const float s = p->scale[channel], b = p->shift[channel];
    for (int64_t i = 0; i < count; ++i) x[i] = x[i] * s + b;
  } else if (p->scale != NULL) {
    const float s = p->scale[channel];
    for (int64_t i = 0; i < count; ++i) x[i] = x[i] * s;
  } else if (p->shift != NULL) {
    const float b = p->shift[channel];
    for (int64_t i = 0; i < count; ++i) x[i] = x[i] + b;
  }

  switch (p->ew_op) {
    case ACCEL_EW_ADD:
      for (int64_t i = 0; i < count; ++i) x[i] = x[i] + operand[i];
      break;
    case ACCEL_EW_MUL:
      for (int64_t i = 0; i < count; ++i) x[i] = x[i] * operand[i];
      break;
    case ACCEL_EW_MAX:
      for (int64_t i = 0; i < count; ++i) {
        x[i] = (x[i] > operand[i] || x[i] != x[i]) ? x[i] : operand[i]; /* NaN wins */
      }
      break;
    case ACCEL_EW_MIN:
      for (int64_t i = 0; i < count; ++i) {
        x[i] = (x[i] < operand[i] || x[i] != x[i]) ? x[i] : operand[i]; /* NaN wins */
      }
      break;
    case ACCEL_EW_NONE:
    case ACCEL_EW_COUNT:
      break;
  }

  switch (p->act) {
    case ACCEL_ACT_RELU:
      for (int64_t i = 0; i < count; ++i) x[i] = x[i] < 0.0f ? 0.0f : x[i]; /* NaN stays */
      break;
    case ACCEL_ACT_CLIP: {
      const float lo = p->clip_min, hi = p->clip_max;
      for (int64_t i = 0; i < count; ++i) {
        const float t = x[i] < lo ? lo : x[i]; /* NaN stays */
        x[i] = t > hi ? hi : t;
      }
      break;
    }
    case ACCEL_ACT_PRELU: {
      const float a = p->prelu_slope[channel];
      for (int64_t i = 0; i < count; ++i) x[i] = x[i] >= 0.0f ? x[i] : x[i] * a;
      break;
    }
    case ACCEL_ACT_NONE:
    case ACCEL_ACT_COUNT:
      break;
    default: /* the lookup-table activations */
      if (p->lut != NULL) {
        lut_apply(p->lut, x, count);
      } else {
        activation_exact(p->act, x, count);
      }
      break;
  }
}

void sdp_f32_run(const sdp_f32* p, int32_t n, int32_t c, int64_t hw, const float* in, float* out,
                 int32_t num_threads) {
  const int64_t planes = (int64_t)n * c;
#pragma omp parallel for num_threads(num_threads) schedule(static) if (planes * hw > 32768)
  for (int64_t plane = 0; plane < planes; ++plane) {
    const int64_t offset = plane * hw;
    float* dst = out + offset;
    if (dst != in + offset) {
      for (int64_t i = 0; i < hw; ++i) dst[i] = in[offset + i];
    }
    const float* operand = p->ew_operand != NULL ? p->ew_operand + offset : NULL;
    sdp_f32_span(p, (int32_t)(plane % c), dst, operand, hw);
  }
}
