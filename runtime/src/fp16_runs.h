/* fp16_runs.h - FP16 runs' shorter ways (fp16_runs.c) and the widening they share with
 * device.c's general path. */
#ifndef ACCEL_RUNTIME_FP16_RUNS_H_
#define ACCEL_RUNTIME_FP16_RUNS_H_

#include <stdint.h>

#include "accumulators.h"
#include "cost_model.h"
#include "kernels.h"

/* What the shorter ways use of the device: its scratch, its kept accumulators, its threads. */
typedef struct fp16_scratch {
  workspace* ws;
  accumulator_store* kept;
  int32_t num_threads;
} fp16_scratch;

/* Widen `count` halves into *cursor and advance it; NULL stays NULL. */
const float* fp16_widen(const void* halves, int64_t count, float** cursor);

/* Run an FP16 chain a shorter way where one applies (a lone SDP; a CONV and its SDP whose
 * weights are data, or whose packed filters are all the same; none while an observer
 * watches): 1 when it ran, *status its result; 0 when the caller runs it the general way. */
int fp16_run_shorter(const fp16_scratch* scratch, const resolved_chain* chain,
                     const accel_tensor* input, const accel_tensor* output,
                     accel_status* status);

#endif /* ACCEL_RUNTIME_FP16_RUNS_H_ */
