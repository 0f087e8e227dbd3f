/* check.c - the field checks every engine's validation shares: tensors, buffers, precisions,
 * optional engines (declared in check.h). */
#include <stdint.h>

#include "check.h"

const char* engine_name(accel_engine engine) {
  switch (engine) {
    case ACCEL_ENGINE_CONV: return "CONV";
    case ACCEL_ENGINE_SDP: return "SDP";
    case ACCEL_ENGINE_PDP: return "PDP";
    case ACCEL_ENGINE_CDP: return "CDP";
    case ACCEL_ENGINE_BDMA: return "BDMA";
    case ACCEL_ENGINE_RUBIK: return "RUBIK";
    case ACCEL_ENGINE_COUNT: break;
  }
  return "?";
}

int64_t element_bytes(accel_precision p) {
  switch (p) {
    case ACCEL_INT8: return 1;
    case ACCEL_INT16:
    case ACCEL_FP16: return 2;
    case ACCEL_FP32: return 4;
    case ACCEL_PRECISION_COUNT: break;
  }
  return 0;
}

/* Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte (NULL never does). */
int ranges_overlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  if (a == NULL || b == NULL) return 0;
  const char* a_lo = (const char*)a;
  const char* b_lo = (const char*)b;
  return a_lo < b_lo + b_bytes && b_lo < a_lo + a_bytes;
}

/* An optional engine (an accel_feature bit) the configuration must have. */
accel_status check_engine(const accel_config* cfg, uint32_t feature, const char* engine,
                          const char* where) {
  if (!(cfg->features & feature)) {
    return accel_fail(ACCEL_ERR_UNSUPPORTED, "%s: configuration %s has no %s engine", where,
                      cfg->name, engine);
  }
  return ACCEL_OK;
}

/* The precision must exist, the configuration must have it (fp32 is the reference precision
 * every configuration accepts), and the simulator must implement it. */
accel_status check_precision(const accel_config* cfg, accel_precision p, const char* what) {
  if (element_bytes(p) == 0) {
    return accel_fail(ACCEL_ERR_INVALID, "%s: precision = %d is not an accel_precision", what, (int)p);
  }
  if (p != ACCEL_FP32 && (cfg->precisions & (1u << p)) == 0) {
    return accel_fail(ACCEL_ERR_UNSUPPORTED, "%s: precision %s is not supported by configuration %s",
                      what, precision_name(p), cfg->name);
  }
  if (p == ACCEL_INT16) {
    return accel_fail(ACCEL_ERR_UNSUPPORTED,
                      "%s: precision %s is not implemented by the simulator (int8, fp16 and fp32 "
                      "are)", what, precision_name(p));
  }
  return ACCEL_OK;
}

/* A buffer of `bytes`-byte elements of type `type`. */
/* The array's name is `where` followed by `what` (joined only for a message: a run checks
 * several arrays, and formatting each name cost about 1 % of a MobileNet's int8 inference). */
accel_status check_array(const void* ptr, int64_t bytes, const char* type,
                         const char* where, const char* what) {
  if (ptr == NULL) return accel_fail(ACCEL_ERR_NULL, "%s%s is NULL", where, what);
  if ((uintptr_t)ptr % (uintptr_t)bytes != 0) {
    return accel_fail(ACCEL_ERR_ALIGNMENT,
                      "%s%s = %p is not aligned to its %lld-byte %s elements", where, what, ptr,
                      (long long)bytes, type);
  }
  return ACCEL_OK;
}

accel_status check_buffer(const void* ptr, accel_precision p, const char* where,
                          const char* what) {
  return check_array(ptr, element_bytes(p), precision_name(p), where, what);
}

accel_status check_tensor(const accel_config* cfg, const accel_tensor* t, const char* what,
                          int need_data) {
  if (t == NULL) return accel_fail(ACCEL_ERR_NULL, "%s tensor is NULL", what);
  const int32_t dims[4] = {t->n, t->c, t->h, t->w};
  const char* names = "nchw";
  int64_t count = 1;
  for (int i = 0; i < 4; ++i) {
    if (dims[i] <= 0) {
      return accel_fail(ACCEL_ERR_INVALID, "%s tensor: %c = %d must be positive", what, names[i],
                        dims[i]);
    }
    count *= dims[i]; /* cannot overflow: checked against the limit at each step */
    if (count > ACCEL_MAX_TENSOR_ELEMENTS) {
      return accel_fail(ACCEL_ERR_INVALID,
                        "%s tensor: %d x %d x %d x %d elements exceed the limit of %d", what,
                        t->n, t->c, t->h, t->w, ACCEL_MAX_TENSOR_ELEMENTS);
    }
  }
  accel_status st = check_precision(cfg, t->precision, what);
  if (st != ACCEL_OK) return st;
  if (t->layout != ACCEL_LAYOUT_NCHW && t->layout != ACCEL_LAYOUT_C16) {
    return accel_fail(ACCEL_ERR_INVALID, "%s tensor: layout = %d is not an accel_layout", what,
                      (int)t->layout);
  }
  if (t->layout == ACCEL_LAYOUT_C16 &&
      (t->precision != ACCEL_FP32 || t->c % ACCEL_C16_CHANNELS != 0)) {
    return accel_fail(ACCEL_ERR_INVALID,
                      "%s tensor: layout C16 holds FP32 data with c a multiple of %d, not %s "
                      "with c = %d", what, ACCEL_C16_CHANNELS, precision_name(t->precision),
                      t->c);
  }
  if (need_data) return check_buffer(t->data, t->precision, what, " tensor data");
  return ACCEL_OK;
}
