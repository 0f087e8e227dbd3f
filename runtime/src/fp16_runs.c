/* fp16_runs.c - FP16 runs that take a shorter way than device.c's execute_chain_fp16 (widen the
 * whole chain's input, weights and operands into scratch, run the fp32 engines, narrow), to
 * the same bits (docs/kernels.md, "FP16 runs"): a lone SDP halves in and out in L1 chunks; a
 * CONV whose weights are data keeping its accumulators for a later run of the same
 * convolution (accumulators.c); a CONV of identical packed filters computing one filter. */
#include <stdint.h>
#include <string.h>

#include "accumulators.h"
#include "fp16_runs.h"
#include "internal.h"

/* Widen `count` halves into *cursor and advance it; NULL stays NULL. */
const float* fp16_widen(const void* halves, int64_t count, float** cursor) {
  if (halves == NULL) return NULL;
  float* dst = *cursor;
  half_to_float(halves, dst, count);
  *cursor += count;
  return dst;
}

/* Whether [a, a + bytes) and [b, b + bytes) are the same range or do not meet. */
static int same_or_apart(const void* a, const void* b, size_t bytes) {
  const char *x = a, *y = b;
  return x == y || x + bytes <= y || y + bytes <= x;
}

/* SDP op r of an FP16 run from `in` (sdp_f16_input: halves, or a CONV's fp32 accumulators) to
 * `out` (halves) in L1 chunks (sdp_f16_run), unless a tensor it reads overlaps the output other
 * than as the same tensor (the chunks read and write as they go): 0 then, nothing done. */
static int sdp_fp16_chunks(const fp16_scratch* scratch, const resolved_op* r,
                           sdp_f16_input in, void* out, accel_status* status) {
  const accel_sdp_desc* d = &r->op->sdp;
  const int64_t hw = (int64_t)r->in_h * r->in_w;
  const size_t bytes = (size_t)((int64_t)r->in_n * r->in_c * hw) * sizeof(uint16_t);
  const accel_sdp_x* units[2] = {&d->x1, &d->x2};
  sdp_f16_whole whole = {.ew = d->ew_op != ACCEL_EW_NONE ? d->ew_operand : NULL};
  int per_channel = 0; /* operands of C values to widen */
  if (d->ew_per_channel || (in.halves != NULL && !same_or_apart(in.halves, out, bytes)) ||
      (whole.ew != NULL && !same_or_apart(whole.ew, out, bytes))) {
    return 0;
  }
  for (int u = 0; u < 2; ++u) {
    const void* operands[2] = {units[u]->alu, units[u]->mul};
    const int32_t channel_wise[2] = {units[u]->alu_per_channel, units[u]->mul_per_channel};
    for (int m = 0; m < 2; ++m) {
      if (operands[m] == NULL) continue;
      if (channel_wise[m]) {
        ++per_channel;
      } else if (!same_or_apart(operands[m], out, bytes)) {
        return 0;
      } else {
        whole.x[u][m] = operands[m];
      }
    }
  }
  per_channel += 3; /* scale, shift, PReLU slope */
  float* cursor = workspace_get(scratch->ws, WS_FP16_WIDE, (size_t)per_channel * r->in_c *
                                                            sizeof(float));
  if (cursor == NULL) {
    *status = accel_fail(ACCEL_ERR_NO_MEMORY, "cannot allocate %zu bytes of scratch",
                         (size_t)per_channel * r->in_c * sizeof(float));
    return 1;
  }
  sdp_f32 p = sdp_operands(d); /* the precision stays FP16: the LUT model */
  p.scale = fp16_widen(d->scale, r->in_c, &cursor);
  p.shift = fp16_widen(d->shift, r->in_c, &cursor);
  p.prelu_slope = d->act == ACCEL_ACT_PRELU ? fp16_widen(d->prelu_slope, r->in_c, &cursor) : NULL;
  p.ew_operand = NULL;
  for (int u = 0; u < 2; ++u) {
    p.x[u].alu = units[u]->alu_per_channel ? fp16_widen(units[u]->alu, r->in_c, &cursor) : NULL;
    p.x[u].mul = units[u]->mul_per_channel ? fp16_widen(units[u]->mul, r->in_c, &cursor) : NULL;
  }
  sdp_f16_run(&p, &whole, r->in_n, r->in_c, hw, in, out, scratch->num_threads);
  *status = ACCEL_OK;
  return 1;
}

/* An FP16 run of one SDP, halves in and out. 1 when it ran (*status its result). */
static int sdp_fp16_alone(const fp16_scratch* scratch, const resolved_chain* chain,
                          const accel_tensor* input, const accel_tensor* output,
                          accel_status* status) {
  if (chain->num_ops != 1 || chain->ops[0].op->engine != ACCEL_ENGINE_SDP) return 0;
  const sdp_f16_input in = {.halves = input->data};
  return sdp_fp16_chunks(scratch, &chain->ops[0], in, output->data, status);
}

/* Whether the chain is a direct CONV on feature data and the SDP after it (its epilogue). */
static int direct_conv_then_sdp(const resolved_chain* chain) {
  const accel_op* conv = chain->ops[0].op;
  return chain->num_ops == 2 && conv->engine == ACCEL_ENGINE_CONV &&
         conv->conv.mode == ACCEL_CONV_DIRECT && chain->ops[0].conv.pixel_bytes == 0 &&
         chain->ops[1].op->engine == ACCEL_ENGINE_SDP;
}

/* An FP16 run of a direct CONV whose weights are data (none packed: attention's products) and
 * its SDP: the CONV's fp32 accumulators taken from an earlier run of the same convolution, or
 * computed and kept (accumulators.c), then the SDP over them in chunks. 1 when it ran. */
static int conv_fp16_kept(const fp16_scratch* scratch, const resolved_chain* chain,
                          const accel_tensor* input, const accel_tensor* output,
                          accel_status* status) {
  const resolved_op* r = &chain->ops[0];
  if (!direct_conv_then_sdp(chain)) return 0;
  const accel_conv_desc* d = &r->op->conv;
  const conv_geometry* g = &r->conv;
  const int64_t in_count = (int64_t)g->n * g->c * g->h * g->w;
  const int64_t weight_count = (int64_t)g->k * (g->c / g->groups) * g->kernel_h * g->kernel_w;
  const int64_t acc_count = (int64_t)r->out_n * r->out_c * r->out_h * r->out_w;
  const size_t data_bytes = (size_t)in_count * sizeof(uint16_t);
  const size_t weight_bytes = (size_t)weight_count * sizeof(uint16_t);
  const int64_t macs = acc_count * (g->c / g->groups) * g->kernel_h * g->kernel_w;
  if (d->weights_packed != NULL ||
      data_bytes + weight_bytes + (size_t)acc_count * sizeof(float) >
          KEPT_ACCUMULATORS_MAX_BYTES ||
      macs < KEPT_ACCUMULATORS_MIN_MACS * (in_count + weight_count)) {
    return 0;
  }
  const float* acc =
      accumulators_find(scratch->kept, g, input->data, data_bytes, d->weights, weight_bytes);
  if (acc != NULL && conv_verbose()) conv_verbose_line("fp16", g, "kept");
  if (acc == NULL) {
    float* kept = accumulators_keep(scratch->kept, g, input->data, data_bytes, d->weights,
                                    weight_bytes, (size_t)acc_count);
    float* wide = workspace_get(scratch->ws, WS_CHAIN_A,
                                (size_t)(in_count + weight_count) * sizeof(float));
    if (kept == NULL || wide == NULL) return 0; /* out of memory: the run as any other */
    half_to_float(input->data, wide, in_count);
    half_to_float(d->weights, wide + in_count, weight_count);
    const accel_status st =
        conv_f32(g, wide, wide + in_count, kept, NULL, scratch->ws, scratch->num_threads);
    if (st != ACCEL_OK) {
      *status = st;
      return 1;
    }
    accumulators_filled(scratch->kept, kept);
    acc = kept;
  }
  const sdp_f16_input in = {.wide = acc};
  return sdp_fp16_chunks(scratch, &chain->ops[1], in, output->data, status);
}

/* An FP16 run of a direct CONV with packed weights whose filters are all the same (a layer
 * norm's or softmax's sum over C broadcast by a CONV of ones C -> C: conv_f32_replicates) and
 * its SDP: the first filter's sums once, then the SDP over them as every channel's, in chunks.
 * The general path copied the sums to every channel in fp32 scratch, ran the SDP there and
 * narrowed the copies. 1 when it ran. */
static int conv_fp16_replicated(const fp16_scratch* scratch, const resolved_chain* chain,
                                const accel_tensor* input, const accel_tensor* output,
                                accel_status* status) {
  const resolved_op* r = &chain->ops[0];
  if (!direct_conv_then_sdp(chain) || r->op->conv.weights_packed == NULL) return 0;
  const conv_geometry* g = &r->conv;
  if (!conv_f16_packed_same_filters(r->op->conv.weights_packed) || !conv_f32_replicates(g)) {
    return 0;
  }
  const float* weights = conv_f16_packed_weights(r->op->conv.weights_packed);
  conv_geometry one = *g;
  one.k = 1;
  const int64_t in_count = (int64_t)g->n * g->c * g->h * g->w;
  const int64_t sums = (int64_t)g->n * g->out_h * g->out_w;
  float* wide = workspace_get(scratch->ws, WS_CHAIN_A, (size_t)(in_count + sums) * sizeof(float));
  if (wide == NULL) return 0; /* out of memory: the run as any other */
  half_to_float(input->data, wide, in_count);
  const accel_status st =
      conv_f32(&one, wide, weights, wide + in_count, NULL, scratch->ws, scratch->num_threads);
  if (st != ACCEL_OK) {
    *status = st;
    return 1;
  }
  const sdp_f16_input in = {.wide = wide + in_count, .one_channel = 1};
  return sdp_fp16_chunks(scratch, &chain->ops[1], in, output->data, status);
}

int fp16_run_shorter(const fp16_scratch* scratch, const resolved_chain* chain,
                     const accel_tensor* input, const accel_tensor* output,
                     accel_status* status) {
  if (observing()) return 0; /* an observer sees each step widened: the general way */
  return sdp_fp16_alone(scratch, chain, input, output, status) ||
         conv_fp16_kept(scratch, chain, input, output, status) ||
         conv_fp16_replicated(scratch, chain, input, output, status);
}
