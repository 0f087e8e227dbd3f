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

/* Independent mode: planes, a few per pool_for item (about 16 KiB of data each). */
typedef struct run_job {
  const sdp_f32* p;
  int32_t c;
  int64_t hw, planes, per_item;
  const float* in;
  float* out;
} run_job;

static void run_item(void* ctx, int64_t item, int participant) {
  const run_job* J = ctx;
  (void)participant;
  const int64_t end = (item + 1) * J->per_item < J->planes ? (item + 1) * J->per_item : J->planes;
  for (int64_t plane = item * J->per_item; plane < end; ++plane) {
    const int64_t offset = plane * J->hw;
    float* dst = J->out + offset;
    if (dst != J->in + offset) {
      for (int64_t i = 0; i < J->hw; ++i) dst[i] = J->in[offset + i];
    }
    const float* operand = J->p->ew_operand != NULL ? J->p->ew_operand + offset : NULL;
    sdp_f32_span(J->p, (int32_t)(plane % J->c), dst, operand, J->hw);
  }
}

void sdp_f32_run(const sdp_f32* p, int32_t n, int32_t c, int64_t hw, const float* in, float* out,
                 int32_t num_threads) {
  const int64_t planes = (int64_t)n * c;
  const int64_t per_item = 4096 / (hw + 1) + 1;
  const run_job J = {p, c, hw, planes, per_item, in, out};
  pool_for(planes * hw > 32768 ? num_threads : 1, (planes + per_item - 1) / per_item, run_item,
           (void*)&J);
}
