/* cost_model.h - what the runtime and the cost model (cost_model.c) share: the resolved chain
 * the runtime validates and the cost model reads, the CBUF bank needs, the cost entry points,
 * and the runtime's error recorder (runtime/src/errors.c) through which the cost model's public
 * sizing functions report bad input. The cost model includes this, accel.h and kernels.h only,
 * never the runtime's private internal.h. */
#ifndef ACCEL_CSRC_COST_MODEL_H_
#define ACCEL_CSRC_COST_MODEL_H_

#include "accel/accel.h"
#include "kernels.h"

/* Record a failure for accel_last_error() and return `status`. */
accel_status accel_fail(accel_status status, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* One op of a validated chain, with the shapes it sees. */
typedef struct resolved_op {
  const accel_op* op;
  int32_t in_n, in_c, in_h, in_w;
  int32_t out_n, out_c, out_h, out_w;
  conv_geometry conv;  /* engine CONV */
  pdp_geometry pdp;    /* engine PDP */
  cdp_geometry cdp;    /* engine CDP */
  int32_t data_banks, weight_banks;  /* engine CONV: the CBUF split (given or the policy's) */
} resolved_op;

typedef struct resolved_chain {
  int32_t num_ops;
  accel_mode mode;
  resolved_op ops[ACCEL_MAX_CHAIN_OPS];
} resolved_chain;

/* The precision a run writes: its input's, or the other one of a converting SDP (convert). */
static inline accel_precision run_output_precision(const accel_op* op, accel_precision input) {
  if (op->engine != ACCEL_ENGINE_SDP || !op->sdp.convert) return input;
  return input == ACCEL_INT8 ? ACCEL_FP16 : ACCEL_INT8;
}

/* What a CONV needs of CBUF, in banks: the whole input (data_all), the input rows of one
 * output row (data_min), all weights (weight_all), one kernel group (weight_min), and the
 * bank a sparse weight mask takes (reserved). */
typedef struct conv_banks {
  int64_t bank_bytes;
  int32_t data_all, data_min, weight_all, weight_min, reserved;
} conv_banks;
void conv_bank_needs(const accel_config* cfg, const conv_geometry* g, const accel_conv_desc* d,
                     conv_banks* out);
/* NVDLA's compiler's choice of data and weight banks (see accel_conv_banks in accel.h). */
void conv_bank_policy(const conv_banks* need, int32_t banks, int32_t* data, int32_t* weights);
/* The fewest banks a split may give the data (one output row's input rows) and the weights
 * (one kernel group), each capped by what CBUF leaves beside the other's minimum. */
void conv_bank_minimum(const conv_banks* need, int32_t banks, int32_t* data, int32_t* weights);

/* Whether op i of a chain gets its input on the fly / hands its output on the fly (FUSED, or
 * an INT8/FP16 CONV feeding its SDP), rather than through memory. */
int op_input_on_chip(const resolved_chain* chain, int32_t i);
int op_output_on_chip(const resolved_chain* chain, int32_t i);
/* Bytes of a feature tensor as stored: each (n, h, w) position padded to whole memory atoms. */
int64_t stored_feature_bytes(const accel_config* cfg, int64_t n, int64_t c, int64_t h, int64_t w,
                             accel_precision p);

/* The cost model (csrc/cost_model.c): fill the op records and the run record of a chain. */
void cost_chain(const accel_config* cfg, const resolved_chain* chain, const char* label,
                accel_run_stats* run, accel_op_stats* ops);

#endif /* ACCEL_CSRC_COST_MODEL_H_ */
