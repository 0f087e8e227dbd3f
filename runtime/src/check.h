/* check.h - what the validation of a chain (chain.c, chain_conv.c) shares: the field checks of
 * check.c, each returning a status that names the field and its value. */
#ifndef ACCEL_RUNTIME_CHECK_H_
#define ACCEL_RUNTIME_CHECK_H_

#include <stdint.h>

#include "internal.h"

const char* engine_name(accel_engine engine);
/* Bytes of one element of `p` (0 for a value that is not an accel_precision). */
int64_t element_bytes(accel_precision p);
/* Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte (NULL never does). */
int ranges_overlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes);
/* An optional engine (an accel_feature bit) the configuration must have. */
accel_status check_engine(const accel_config* cfg, uint32_t feature, const char* engine,
                          const char* where);
/* The precision must exist, the configuration must have it and the simulator implement it. */
accel_status check_precision(const accel_config* cfg, accel_precision p, const char* what);
/* A non-NULL buffer aligned to its `bytes`-byte elements of type `type`, named `where` `what`. */
accel_status check_array(const void* ptr, int64_t bytes, const char* type, const char* where,
                         const char* what);
accel_status check_buffer(const void* ptr, accel_precision p, const char* where,
                          const char* what);
/* Positive dimensions within the limit, a known layout, a supported precision; with
 * need_data, its data buffer too. */
accel_status check_tensor(const accel_config* cfg, const accel_tensor* t, const char* what,
                          int need_data);

/* The number of weights a conv of geometry g reads (chain_conv.c). */
int64_t weight_count(const conv_geometry* g);
/* A CONV op's fields, weights and CBUF banks (chain_conv.c); fills r's output shape. */
accel_status resolve_conv(const accel_config* cfg, resolved_op* r, const char* where,
                          int need_data);

/* In a function with `where` (the op's name): return ACCEL_ERR_INVALID naming `field` when
 * `value` is outside [lo, hi]. */
#define RANGE(field, value, lo, hi)                                                            \
  if ((value) < (lo) || (value) > (hi)) {                                                      \
    return accel_fail(ACCEL_ERR_INVALID, "%s: %s = %d is outside [%d, %d]", where, field,      \
                      (int)(value), (int)(lo), (int)(hi));                                     \
  }

#endif /* ACCEL_RUNTIME_CHECK_H_ */
