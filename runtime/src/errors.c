/* errors.c - the calling thread's last error message. */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

static _Thread_local char last_error[ACCEL_ERROR_LEN];

accel_status accel_fail(accel_status status, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, args);
  va_end(args);
  return status;
}

const char* accel_last_error(void) { return last_error; }

const char* accel_status_name(accel_status status) {
  switch (status) {
    case ACCEL_OK: return "ACCEL_OK";
    case ACCEL_ERR_INVALID: return "ACCEL_ERR_INVALID";
    case ACCEL_ERR_SHAPE: return "ACCEL_ERR_SHAPE";
    case ACCEL_ERR_UNSUPPORTED: return "ACCEL_ERR_UNSUPPORTED";
    case ACCEL_ERR_NULL: return "ACCEL_ERR_NULL";
    case ACCEL_ERR_ALIGNMENT: return "ACCEL_ERR_ALIGNMENT";
    case ACCEL_ERR_NO_MEMORY: return "ACCEL_ERR_NO_MEMORY";
    case ACCEL_ERR_NOT_FOUND: return "ACCEL_ERR_NOT_FOUND";
  }
  return "ACCEL_ERR_UNKNOWN";
}

const char* precision_name(accel_precision precision) {
  switch (precision) {
    case ACCEL_INT8: return "int8";
    case ACCEL_INT16: return "int16";
    case ACCEL_FP16: return "fp16";
    case ACCEL_FP32: return "fp32";
    case ACCEL_PRECISION_COUNT: break;
  }
  return "unknown";
}
