/* internal.h - what the runtime's files share: chain validation, profiling, the observers. The
 * resolved chain, the cost model's entry points and accel_fail are in csrc/cost_model.h. */
#ifndef ACCEL_RUNTIME_INTERNAL_H_
#define ACCEL_RUNTIME_INTERNAL_H_

#include "accel/accel.h"
#include "cost_model.h"
#include "kernels.h"

const char* precision_name(accel_precision precision);

/* An SDP descriptor's operands as the fp32 kernels take them (device.c); FP16 evaluates the
 * LUT activations through the LUT model, FP32 exactly. */
sdp_f32 sdp_operands(const accel_sdp_desc* d);

/* Validate a chain against `cfg` and infer its shapes. With need_data, every buffer the run
 * reads or writes must be non-NULL and aligned (accel_estimate passes 0). With output NULL,
 * the final shape is not checked. */
accel_status chain_resolve(const accel_config* cfg, const accel_op* ops, int32_t num_ops,
                           const accel_tensor* input, const accel_tensor* output,
                           accel_mode mode, int need_data, resolved_chain* out);

/* Append a run's records to the process profile when profiling is enabled. */
void profile_record(const accel_run_stats* run, const accel_op_stats* ops);
/* Whether profiling is enabled (a run costs itself only when someone reads the cost). */
int profile_enabled(void);

/* Hand a tensor to the calibration observer, if one is set. */
void observe(const char* label, int32_t op_index, const accel_tensor* tensor);
/* Whether an observer is set (so a run prepares what it would hand over only then). */
int observing(void);
/* Hand a finished run to the recorder, if one is set (accel_set_recorder). */
void record_run(const char* label, const accel_op* ops, int32_t num_ops,
                const accel_tensor* input, const accel_tensor* output, accel_mode mode);

#endif /* ACCEL_RUNTIME_INTERNAL_H_ */
