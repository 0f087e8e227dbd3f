/* internal.h - what the runtime's files share: errors, the resolved chain, the cost model. */
#ifndef ACCEL_RUNTIME_INTERNAL_H_
#define ACCEL_RUNTIME_INTERNAL_H_

#include "accel/accel.h"
#include "kernels.h"

/* Record a failure for accel_last_error() and return `status`. */
accel_status accel_fail(accel_status status, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

const char* precision_name(accel_precision precision);

/* One op of a validated chain, with the shapes it sees. */
typedef struct resolved_op {
  const accel_op* op;
  int32_t in_n, in_c, in_h, in_w;
  int32_t out_n, out_c, out_h, out_w;
  conv_geometry conv;  /* engine CONV */
  pdp_geometry pdp;    /* engine PDP */
  cdp_geometry cdp;    /* engine CDP */
} resolved_op;

typedef struct resolved_chain {
  int32_t num_ops;
  accel_mode mode;
  resolved_op ops[ACCEL_MAX_CHAIN_OPS];
} resolved_chain;

/* Validate a chain against `cfg` and infer its shapes. With need_data, every buffer the run
 * reads or writes must be non-NULL and aligned (accel_estimate passes 0). With output NULL,
 * the final shape is not checked. */
accel_status chain_resolve(const accel_config* cfg, const accel_op* ops, int32_t num_ops,
                           const accel_tensor* input, const accel_tensor* output,
                           accel_mode mode, int need_data, resolved_chain* out);

/* The cost model (csrc/cost_model.c): fill the op records and the run record of a chain. */
void cost_chain(const accel_config* cfg, const resolved_chain* chain, const char* label,
                accel_run_stats* run, accel_op_stats* ops);

/* Append a run's records to the process profile when profiling is enabled. */
void profile_record(const accel_run_stats* run, const accel_op_stats* ops);

/* Hand a tensor to the calibration observer, if one is set. */
void observe(const char* label, int32_t op_index, const accel_tensor* tensor);
/* Whether an observer is set (so a run prepares what it would hand over only then). */
int observing(void);

#endif /* ACCEL_RUNTIME_INTERNAL_H_ */
