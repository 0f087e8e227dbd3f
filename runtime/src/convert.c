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
    memcpy(dst, src, (size_t)count * sizeof(float));
  } else {
    return accel_fail(ACCEL_ERR_UNSUPPORTED, "no conversion from %s to %s",
                      precision_name(from), precision_name(to));
  }
  return ACCEL_OK;
}
