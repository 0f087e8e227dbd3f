/* convert.c - data crossing the accelerator's boundary: quantise, dequantise, narrow, widen. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

static int8_t quantize(float x, double scale, int32_t zero) {
  if (x != x) return (int8_t)zero;
  const double q = round((double)x / scale) + zero; /* round(): half away from zero */
  return (int8_t)(q < INT8_MIN ? INT8_MIN : q > INT8_MAX ? INT8_MAX : q);
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
  if ((from == ACCEL_FP32 && (uintptr_t)src % 4) || (to == ACCEL_FP32 && (uintptr_t)dst % 4) ||
      (from == ACCEL_FP16 && (uintptr_t)src % 2) || (to == ACCEL_FP16 && (uintptr_t)dst % 2)) {
    return accel_fail(ACCEL_ERR_ALIGNMENT, "src %p or dst %p is not aligned to its elements",
                      src, dst);
  }
  if (quantizing) {
    const float* x = src;
    int8_t* q = dst;
    for (int64_t i = 0; i < count; ++i) q[i] = quantize(x[i], (double)scale, zero);
  } else if (dequantizing) {
    const int8_t* q = src;
    float* x = dst;
    for (int64_t i = 0; i < count; ++i) x[i] = (float)(((double)q[i] - zero) * (double)scale);
  } else if (from == ACCEL_FP32 && to == ACCEL_FP16) {
    float_to_half(src, dst, count);
  } else if (from == ACCEL_FP16 && to == ACCEL_FP32) {
    half_to_float(src, dst, count);
  } else if (from == ACCEL_FP32 && to == ACCEL_FP32) {
    memmove(dst, src, (size_t)count * sizeof(float));
  } else {
    return accel_fail(ACCEL_ERR_UNSUPPORTED, "no conversion from %s to %s",
                      precision_name(from), precision_name(to));
  }
  return ACCEL_OK;
}
