/* device.c - devices and runs: validate a chain, execute it on the engines, cost it, record it. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accumulators.h"
#include "fp16_runs.h"
#include "internal.h"

struct accel_device {
  accel_config config;
  int32_t num_threads;
  workspace ws; /* scratch reused across runs: per-thread tiles and the chain's intermediates */
  accumulator_store kept; /* recent FP16 attention products' accumulators (accumulators.c) */
  pthread_mutex_t lock; /* one run at a time: the workspace is shared by every run */
};

static int32_t default_threads(void) {
  const char* env = getenv("ACCEL_NUM_THREADS");
  if (env != NULL) {
    const long v = strtol(env, NULL, 10);
    if (v >= 1 && v <= WS_THREAD_SLOTS) return (int32_t)v;
  }
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return cpus < 1 ? 1 : cpus > WS_THREAD_SLOTS ? WS_THREAD_SLOTS : (int32_t)cpus;
}

accel_status accel_device_create(const accel_config* cfg, accel_device** out) {
  if (out == NULL) return accel_fail(ACCEL_ERR_NULL, "device output pointer is NULL");
  *out = NULL;
  accel_status st = accel_config_validate(cfg);
  if (st != ACCEL_OK) return st;
  accel_device* dev = calloc(1, sizeof *dev);
  if (dev == NULL) return accel_fail(ACCEL_ERR_NO_MEMORY, "cannot allocate a device");
  dev->config = *cfg;
  dev->num_threads = default_threads();
  if (pthread_mutex_init(&dev->lock, NULL) != 0) {
    free(dev);
    return accel_fail(ACCEL_ERR_NO_MEMORY, "cannot create a device lock");
  }
  *out = dev;
  return ACCEL_OK;
}

void accel_device_destroy(accel_device* dev) {
  if (dev == NULL) return;
  workspace_free(&dev->ws);
  accumulators_free(&dev->kept);
  pthread_mutex_destroy(&dev->lock);
  free(dev);
}

/* The shared devices: a short list, searched by configuration content. */
enum { MAX_SHARED_DEVICES = 16 };
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static accel_device* shared_devices[MAX_SHARED_DEVICES];
static int32_t num_shared_devices;

/* Field by field, every field (the energy figures too: accel_run's stats charge them):
 * padding bytes of a caller's struct, and a name's bytes after its NUL, may hold anything.
 * A new accel_config field bumps ACCEL_ABI_VERSION (accel.h), which stops the build here. */
_Static_assert(ACCEL_ABI_VERSION == 14,
               "accel.h changed a layout: compare any new accel_config field in same_config, "
               "then update this version");
static int same_config(const accel_config* a, const accel_config* b) {
  return strncmp(a->name, b->name, sizeof a->name) == 0 && a->atomic_c == b->atomic_c &&
         a->atomic_k == b->atomic_k && a->cbuf_bytes == b->cbuf_bytes &&
         a->memory_atom_bytes == b->memory_atom_bytes &&
         a->sdp_throughput == b->sdp_throughput && a->sdp_ew_throughput == b->sdp_ew_throughput &&
         a->pdp_throughput == b->pdp_throughput && a->cdp_throughput == b->cdp_throughput &&
         a->clock_hz == b->clock_hz &&
         a->dram_bytes_per_s == b->dram_bytes_per_s && a->precisions == b->precisions &&
         a->features == b->features && a->mac_int8_pj == b->mac_int8_pj &&
         a->mac_fp16_pj == b->mac_fp16_pj &&
         a->cbuf_read_pj_per_byte == b->cbuf_read_pj_per_byte &&
         a->cbuf_write_pj_per_byte == b->cbuf_write_pj_per_byte &&
         a->dram_pj_per_byte == b->dram_pj_per_byte && a->sram_pj_per_byte == b->sram_pj_per_byte &&
         a->sdp_pj_per_element == b->sdp_pj_per_element &&
         a->pdp_pj_per_element == b->pdp_pj_per_element &&
         a->cdp_pj_per_element == b->cdp_pj_per_element && a->cbuf_banks == b->cbuf_banks &&
         a->dram_burst_bytes == b->dram_burst_bytes &&
         a->dram_latency_cycles == b->dram_latency_cycles &&
         a->dram_turnaround_cycles == b->dram_turnaround_cycles &&
         a->sram_bytes == b->sram_bytes && a->sram_bytes_per_s == b->sram_bytes_per_s &&
         a->dram_read_request_cycles == b->dram_read_request_cycles &&
         a->cmac_weight_load_cycles == b->cmac_weight_load_cycles &&
         a->conv_pipeline_cycles == b->conv_pipeline_cycles &&
         a->sdp_pipeline_cycles == b->sdp_pipeline_cycles &&
         a->pdp_pipeline_cycles == b->pdp_pipeline_cycles &&
         a->cdp_pipeline_cycles == b->cdp_pipeline_cycles &&
         a->rubik_bytes_per_cycle == b->rubik_bytes_per_cycle;
}

accel_status accel_device_shared(const accel_config* cfg, accel_device** out) {
  if (out == NULL) return accel_fail(ACCEL_ERR_NULL, "device output pointer is NULL");
  *out = NULL;
  accel_status st = accel_config_validate(cfg);
  if (st != ACCEL_OK) return st;
  pthread_mutex_lock(&shared_lock);
  for (int32_t i = 0; i < num_shared_devices && *out == NULL; ++i) {
    if (same_config(&shared_devices[i]->config, cfg)) *out = shared_devices[i];
  }
  if (*out == NULL) {
    if (num_shared_devices == MAX_SHARED_DEVICES) {
      st = accel_fail(ACCEL_ERR_NO_MEMORY, "more than %d distinct shared configurations",
                      MAX_SHARED_DEVICES);
    } else {
      st = accel_device_create(cfg, out);
      if (st == ACCEL_OK) shared_devices[num_shared_devices++] = *out;
    }
  }
  pthread_mutex_unlock(&shared_lock);
  return st;
}

accel_status accel_fold_batch_norm(int32_t channels, const float* gamma, const float* beta,
                                   const float* mean, const float* var, const float* bias,
                                   float epsilon, float* scale, float* shift) {
  if (channels < 1) return accel_fail(ACCEL_ERR_INVALID, "channels = %d must be positive", channels);
  if (mean == NULL || var == NULL || scale == NULL || shift == NULL) {
    return accel_fail(ACCEL_ERR_NULL, "batch norm mean, var, scale and shift must not be NULL");
  }
  if (!(epsilon >= 0.0f)) {
    return accel_fail(ACCEL_ERR_INVALID, "batch norm epsilon = %g must be >= 0", (double)epsilon);
  }
  for (int32_t c = 0; c < channels; ++c) {
    const double denominator = (double)var[c] + (double)epsilon;
    if (!(denominator > 0.0)) {
      return accel_fail(ACCEL_ERR_INVALID, "batch norm var[%d] + epsilon = %g is not positive", c,
                        denominator);
    }
    const double s = (gamma != NULL ? (double)gamma[c] : 1.0) / sqrt(denominator);
    const double b = bias != NULL ? (double)bias[c] : 0.0;
    scale[c] = (float)s;
    shift[c] = (float)((b - (double)mean[c]) * s + (beta != NULL ? (double)beta[c] : 0.0));
  }
  return ACCEL_OK;
}

accel_status accel_device_config(const accel_device* dev, accel_config* out) {
  if (dev == NULL || out == NULL) return accel_fail(ACCEL_ERR_NULL, "device or output is NULL");
  *out = dev->config;
  return ACCEL_OK;
}

accel_status accel_device_set_threads(accel_device* dev, int32_t num_threads) {
  if (dev == NULL) return accel_fail(ACCEL_ERR_NULL, "device is NULL");
  if (num_threads < 1 || num_threads > WS_THREAD_SLOTS) {
    return accel_fail(ACCEL_ERR_INVALID, "num_threads = %d is outside [1, %d]", num_threads,
                      WS_THREAD_SLOTS);
  }
  pthread_mutex_lock(&dev->lock);
  dev->num_threads = num_threads;
  pthread_mutex_unlock(&dev->lock);
  return ACCEL_OK;
}

int32_t accel_device_threads(const accel_device* dev) { return dev ? dev->num_threads : 0; }

int32_t accel_int8_amx(int32_t request) { return conv_i8_amx(request < 0 ? -1 : request != 0); }

/* FP16 evaluates the LUT activations through the LUT model, FP32 exactly. */
sdp_f32 sdp_operands(const accel_sdp_desc* d) {
  return (sdp_f32){.scale = d->scale, .shift = d->shift, .ew_op = d->ew_op,
                   .ew_operand = d->ew_operand, .ew_per_channel = d->ew_per_channel,
                   .act = d->act, .clip_min = d->clip_min,
                   .clip_max = d->clip_max, .prelu_slope = d->prelu_slope,
                   .lut = d->precision == ACCEL_FP16 ? lut_get(d->act) : NULL,
                   .x = {{d->x1.alu, d->x1.mul, d->x1.alu_per_channel, d->x1.mul_per_channel},
                         {d->x2.alu, d->x2.mul, d->x2.alu_per_channel, d->x2.mul_per_channel}}};
}

static sdp_i8 sdp_i8_operands(const accel_sdp_desc* d, int32_t channels) {
  const int clip = d->act == ACCEL_ACT_CLIP;
  int32_t shift_max = 0; /* NVDLA's one shifter for the layer: accel.h's INT8 SDP */
  for (int32_t c = 0; d->rshift != NULL && c < channels; ++c)
    shift_max = d->rshift[c] > shift_max ? d->rshift[c] : shift_max;
  return (sdp_i8){.shift_max = shift_max, .bias = d->bias, .mul = d->mul, .rshift = d->rshift,
                  .in_zero = d->in_zero, .ew_op = d->ew_op, .ew_operand = d->ew_operand,
                  .ew_per_channel = d->ew_per_channel, .ew_zero = d->ew_zero,
                  .ew_mul = d->ew_mul, .ew_shift = d->ew_shift, .act = d->act,
                  .prelu_mul = d->prelu_mul, .prelu_shift = d->prelu_shift,
                  .out_mul = d->out_mul, .out_shift = d->out_shift, .out_zero = d->out_zero,
                  .clip_lo = clip ? d->clip_lo : INT8_MIN, .clip_hi = clip ? d->clip_hi : INT8_MAX,
                  .lut = d->lut};
}

/* The bytes of one element of a tensor in `precision`. */
static size_t element_bytes(accel_precision precision) {
  return precision == ACCEL_INT8 ? 1 : precision == ACCEL_FP16 ? sizeof(uint16_t) : sizeof(float);
}

static int64_t output_count(const resolved_op* r) {
  return (int64_t)r->out_n * r->out_c * r->out_h * r->out_w;
}

/* The last op of the engine pass that starts at op i: a CONV takes the SDP after it along when
 * the chain is FUSED, and always in INT8 and FP16 (the accumulators leave through the SDP). */
static int32_t pass_end(const resolved_chain* chain, int32_t i, accel_precision precision) {
  const int pairs = chain->mode == ACCEL_MODE_FUSED || precision != ACCEL_FP32;
  return pairs && chain->ops[i].op->engine == ACCEL_ENGINE_CONV && i + 1 < chain->num_ops &&
                 chain->ops[i + 1].op->engine == ACCEL_ENGINE_SDP
             ? i + 1
             : i;
}

/* One engine pass, ops first..last, from src to dst. INT8 runs the integer kernels; FP32 (and
 * FP16, whose operands the caller has widened: `half`) the fp32 ones. A Winograd CONV runs
 * winograd.c's kernel (FP16's transformed operands rounded to half); an INT8 one the direct
 * kernel, whose accumulators it equals bit for bit (winograd.c). */
static accel_status execute_pass(accel_device* dev, const resolved_chain* chain, int32_t first,
                                 int32_t last, int half, const void* src, void* dst) {
  const resolved_op* r = &chain->ops[first];
  const accel_op* op = r->op;
  const accel_sdp_desc* epilogue = last > first ? &chain->ops[last].op->sdp : NULL;
  const int int8 = (op->engine == ACCEL_ENGINE_CONV ? op->conv.precision
                    : op->engine == ACCEL_ENGINE_SDP ? op->sdp.precision
                    : op->engine == ACCEL_ENGINE_PDP ? op->pdp.precision
                                                     : op->cdp.precision) == ACCEL_INT8;
  const int32_t threads = dev->num_threads;
  if (epilogue != NULL && !int8 && sdp_desc_has_x(epilogue)) {
    /* X unit operands: the CONV's fp32 accumulators first, then the SDP over them (the same
     * operations as on the fly; the kernels' epilogues take no X units) */
    accel_status st = execute_pass(dev, chain, first, first, half, src, dst);
    if (st != ACCEL_OK) return st;
    const resolved_op* e = &chain->ops[last];
    const sdp_f32 p = sdp_operands(epilogue);
    sdp_f32_run(&p, e->in_n, e->in_c, (int64_t)e->in_h * e->in_w, dst, dst, threads);
    return ACCEL_OK;
  }
  switch (op->engine) {
    case ACCEL_ENGINE_CONV:
      if (op->conv.mode == ACCEL_CONV_WINOGRAD && !int8) { /* INT8's is direct's, exactly */
        const sdp_f32 e = epilogue != NULL ? sdp_operands(epilogue) : (sdp_f32){0};
        if (conv_verbose()) conv_verbose_line(half ? "fp16" : "fp32", &r->conv, "winograd");
        return conv_winograd_f32(&r->conv, src, op->conv.weights, op->conv.weights_packed, half,
                                 dst, epilogue != NULL ? &e : NULL, &dev->ws, threads);
      }
      if (int8) {
        sdp_i8 e = sdp_i8_operands(epilogue, r->out_c);
        /* a LUT epilogue's codes by input ranges, planned once for the run */
        struct sdp_i8_lut_plan* plan =
            e.lut != NULL ? sdp_i8_lut_plan_new(&e, output_count(r)) : NULL;
        e.lut_plan = plan;
        const accel_status status = conv_i8(&r->conv, op->conv.in_zero, src, op->conv.weights,
                                            op->conv.weights_packed, dst, &e, &dev->ws, threads);
        sdp_i8_lut_plan_free(plan);
        return status;
      } else {
        const sdp_f32 e = epilogue != NULL ? sdp_operands(epilogue) : (sdp_f32){0};
        return conv_f32(&r->conv, src, op->conv.weights, dst, epilogue != NULL ? &e : NULL,
                        &dev->ws, threads);
      }
    case ACCEL_ENGINE_SDP: {
      const int64_t hw = (int64_t)r->in_h * r->in_w;
      if (int8) {
        const sdp_i8 p = sdp_i8_operands(&op->sdp, r->in_c);
        sdp_i8_run(&p, r->in_n, r->in_c, hw, src, dst, threads);
      } else {
        const sdp_f32 p = sdp_operands(&op->sdp);
        sdp_f32_run(&p, r->in_n, r->in_c, hw, src, dst, threads);
      }
      return ACCEL_OK;
    }
    case ACCEL_ENGINE_PDP:
      if (int8) {
        pdp_i8(&r->pdp, op->pdp.zero, src, dst, threads);
      } else {
        pdp_f32(&r->pdp, src, dst, threads);
      }
      return ACCEL_OK;
    case ACCEL_ENGINE_CDP:
      if (int8) {
        cdp_i8(&r->cdp, op->cdp.int8, src, dst, threads);
      } else {
        cdp_f32(&r->cdp, src, dst, threads);
      }
      return ACCEL_OK;
    case ACCEL_ENGINE_BDMA: /* runs alone, through execute_bdma */
    case ACCEL_ENGINE_RUBIK: /* runs alone, through execute_rubik */
    case ACCEL_ENGINE_COUNT:
      break;
  }
  return accel_fail(ACCEL_ERR_INVALID, "engine = %d is not a pipe engine", (int)op->engine);
}

/* FUSED: an SDP right after a CONV runs as the convolution's epilogue, on each tile while it
 * is in cache; a PDP after them reads the on-chip result (a scratch buffer standing in for the
 * pipeline's line buffers). INDEPENDENT: every pass writes a full intermediate tensor.
 * `precision` is the chain's; `element` the bytes of the data the kernels see (fp32 for FP16),
 * and `round_half` rounds every pass's output to half, as an FP16 engine's output converter
 * (the last pass's: the caller's narrowing of the output). */
static accel_status execute_chain(accel_device* dev, const resolved_chain* chain,
                                  accel_precision precision, size_t element, int round_half,
                                  const void* input, void* output, const char* label) {
  const int observed = label != NULL;
  const accel_precision seen = element == 1 ? ACCEL_INT8 : ACCEL_FP32; /* FP16 runs widened */
  if (observed) {
    const resolved_op* r = &chain->ops[0];
    const accel_tensor t = {.data = (void*)input, .n = r->in_n, .c = r->in_c, .h = r->in_h,
                            .w = r->in_w, .precision = seen};
    observe(label, ACCEL_OBSERVE_INPUT, &t);
  }
  const void* src = input;
  int scratch = WS_CHAIN_A;
  for (int32_t i = 0; i < chain->num_ops; ++i) {
    const int32_t last = pass_end(chain, i, precision);
    const int64_t count = output_count(&chain->ops[last]);
    void* dst = output;
    if (last + 1 < chain->num_ops) {
      dst = workspace_get(&dev->ws, scratch, (size_t)count * element);
      if (dst == NULL) {
        return accel_fail(ACCEL_ERR_NO_MEMORY, "cannot allocate %zu bytes of scratch",
                          (size_t)count * element);
      }
      scratch = scratch == WS_CHAIN_A ? WS_CHAIN_B : WS_CHAIN_A;
    }
    for (int32_t j = i; observed && j <= last; ++j) {
      const accel_sdp_desc* d = &chain->ops[j].op->sdp;
      if (chain->ops[j].op->engine != ACCEL_ENGINE_SDP || d->ew_op == ACCEL_EW_NONE) continue;
      const resolved_op* r = &chain->ops[j];
      accel_tensor t = {.data = (void*)d->ew_operand, .n = r->in_n, .c = r->in_c,
                        .h = r->in_h, .w = r->in_w, .precision = seen};
      if (d->ew_per_channel) { /* an operand kept [N][C] (broadcasts): observed whole */
        if (!observing()) continue;
        const int64_t planes = (int64_t)r->in_n * r->in_c, plane = (int64_t)r->in_h * r->in_w;
        char* whole = malloc((size_t)(planes * plane) * element);
        if (whole == NULL) {
          return accel_fail(ACCEL_ERR_NO_MEMORY, "cannot allocate %lld bytes to observe",
                            (long long)(planes * plane * (int64_t)element));
        }
        for (int64_t q = 0; q < planes; ++q)
          for (int64_t e = 0; e < plane; ++e)
            memcpy(whole + (size_t)(q * plane + e) * element,
                   (const char*)d->ew_operand + (size_t)q * element, element);
        t.data = whole;
        observe(label, ACCEL_OBSERVE_OPERAND_BASE - j, &t);
        free(whole);
        continue;
      }
      observe(label, ACCEL_OBSERVE_OPERAND_BASE - j, &t);
    }
    accel_status st = execute_pass(dev, chain, i, last, round_half, src, dst);
    if (st != ACCEL_OK) return st;
    /* the last pass's output is rounded by its narrowing (execute_chain_fp16: the same
     * rounding), unless an observer reads it widened */
    if (round_half && (last + 1 < chain->num_ops || observing())) round_to_half(dst, count);
    if (observed) {
      const resolved_op* r = &chain->ops[last];
      const accel_tensor t = {.data = dst, .n = r->out_n, .c = r->out_c, .h = r->out_h,
                              .w = r->out_w, .precision = seen};
      observe(label, last, &t);
    }
    src = dst;
    i = last;
  }
  return ACCEL_OK;
}

/* FP16: every half the chain reads is widened into scratch (conv weights come widened already
 * when they are packed, and pre-transformed in Winograd mode), the fp32 engines run on the
 * widened copies with each pass's output rounded to half, and the result is narrowed. A lone
 * SDP, a CONV whose weights are data and a CONV of identical packed filters (each with its SDP)
 * take shorter ways to the same bits (fp16_runs.c). */
static accel_status execute_chain_fp16(accel_device* dev, const resolved_chain* chain,
                                       const accel_tensor* input, const accel_tensor* output,
                                       const char* label) {
  accel_status done = ACCEL_OK;
  const fp16_scratch scratch = {.ws = &dev->ws, .kept = &dev->kept,
                                .num_threads = dev->num_threads};
  if (fp16_run_shorter(&scratch, chain, input, output, &done)) {
    return done;
  }
  const int64_t in_count = (int64_t)input->n * input->c * input->h * input->w;
  const int64_t out_count = (int64_t)output->n * output->c * output->h * output->w;
  int64_t total = in_count + out_count;
  for (int32_t i = 0; i < chain->num_ops; ++i) {
    const resolved_op* r = &chain->ops[i];
    if (r->op->engine == ACCEL_ENGINE_CONV && r->op->conv.weights_packed == NULL) {
      total += (int64_t)r->conv.k * (r->conv.c / r->conv.groups) * r->conv.kernel_h *
               r->conv.kernel_w;
    } else if (r->op->engine == ACCEL_ENGINE_SDP) {
      const int64_t whole = (int64_t)r->in_n * r->in_c * r->in_h * r->in_w;
      const accel_sdp_desc* d = &r->op->sdp;
      total += 3 * (int64_t)r->in_c + (d->ew_op != ACCEL_EW_NONE ? whole : 0);
      const accel_sdp_x* units[2] = {&d->x1, &d->x2};
      for (int u = 0; u < 2; ++u) {
        total += units[u]->alu == NULL ? 0 : units[u]->alu_per_channel ? r->in_c : whole;
        total += units[u]->mul == NULL ? 0 : units[u]->mul_per_channel ? r->in_c : whole;
      }
    }
  }
  float* cursor = workspace_get(&dev->ws, WS_FP16_WIDE, (size_t)total * sizeof(float));
  if (cursor == NULL) {
    return accel_fail(ACCEL_ERR_NO_MEMORY, "cannot allocate %zu bytes of scratch",
                      (size_t)total * sizeof(float));
  }
  resolved_chain wide = *chain;
  accel_op ops[ACCEL_MAX_CHAIN_OPS];
  for (int32_t i = 0; i < chain->num_ops; ++i) {
    const resolved_op* r = &chain->ops[i];
    ops[i] = *r->op;
    wide.ops[i].op = &ops[i];
    if (r->op->engine == ACCEL_ENGINE_CONV && r->op->conv.mode == ACCEL_CONV_WINOGRAD &&
        r->op->conv.weights_packed != NULL) {
      ops[i].conv.precision = ACCEL_FP32; /* pre-transformed halves: the kernel reads them */
    } else if (r->op->engine == ACCEL_ENGINE_CONV) {
      ops[i].conv.precision = ACCEL_FP32;
      ops[i].conv.weights_packed = NULL;
      ops[i].conv.weights_packed_bytes = 0;
      ops[i].conv.weights =
          r->op->conv.weights_packed != NULL
              ? conv_f16_packed_weights(r->op->conv.weights_packed)
              : fp16_widen(r->op->conv.weights,
                      (int64_t)r->conv.k * (r->conv.c / r->conv.groups) * r->conv.kernel_h *
                          r->conv.kernel_w, &cursor);
    } else if (r->op->engine == ACCEL_ENGINE_SDP) {
      accel_sdp_desc* d = &ops[i].sdp;
      /* The precision stays FP16: it selects the LUT model for LUT activations. */
      d->scale = fp16_widen(d->scale, r->in_c, &cursor);
      d->shift = fp16_widen(d->shift, r->in_c, &cursor);
      d->prelu_slope = d->act == ACCEL_ACT_PRELU ? fp16_widen(d->prelu_slope, r->in_c, &cursor) : NULL;
      const int64_t whole = (int64_t)r->in_n * r->in_c * r->in_h * r->in_w;
      d->ew_operand = d->ew_op != ACCEL_EW_NONE ? fp16_widen(d->ew_operand, whole, &cursor) : NULL;
      accel_sdp_x* units[2] = {&d->x1, &d->x2};
      for (int u = 0; u < 2; ++u) {
        units[u]->alu = fp16_widen(units[u]->alu, units[u]->alu_per_channel ? r->in_c : whole, &cursor);
        units[u]->mul = fp16_widen(units[u]->mul, units[u]->mul_per_channel ? r->in_c : whole, &cursor);
      }
    } else if (r->op->engine == ACCEL_ENGINE_PDP) {
      ops[i].pdp.precision = ACCEL_FP32;
    } else {
      ops[i].cdp.precision = ACCEL_FP32;
    }
  }
  const float* in = fp16_widen(input->data, in_count, &cursor);
  float* out = cursor;
  accel_status st = execute_chain(dev, &wide, ACCEL_FP16, sizeof(float), 1, in, out, label);
  if (st == ACCEL_OK) float_to_half(out, output->data, out_count);
  return st;
}

/* Hand the observer `count` elements of an FP16 run widened (into scratch), others as they are. */
static accel_status observe_as_held(accel_device* dev, const char* label, int32_t op_index,
                                    const void* data, int32_t n, int32_t c, int32_t h, int32_t w,
                                    accel_precision precision) {
  const int64_t count = (int64_t)n * c * h * w;
  accel_tensor t = {.data = (void*)data, .n = n, .c = c, .h = h, .w = w, .precision = precision};
  if (precision == ACCEL_FP16) {
    float* wide = workspace_get(&dev->ws, WS_FP16_WIDE, (size_t)count * sizeof(float));
    if (wide == NULL) {
      return accel_fail(ACCEL_ERR_NO_MEMORY, "cannot allocate %zu bytes of scratch",
                        (size_t)count * sizeof(float));
    }
    half_to_float(data, wide, count);
    t.data = wide;
    t.precision = ACCEL_FP32;
  }
  observe(label, op_index, &t);
  return ACCEL_OK;
}

/* BDMA: a byte copy in the tensors' own precision (never widened: a copy does not convert, and
 * the destination's other channels must stay as they are). An observer sees the input and the
 * copied channels, gathered from the destination into scratch. */
static accel_status execute_bdma(accel_device* dev, const resolved_chain* chain,
                                 const accel_tensor* input, const accel_tensor* output,
                                 const char* label) {
  const resolved_op* r = &chain->ops[0];
  const accel_bdma_desc* d = &r->op->bdma;
  const accel_precision p = d->precision;
  const size_t eb = element_bytes(p);
  const int64_t hw = (int64_t)r->in_h * r->in_w;
  const bdma_geometry g = {.n = r->in_n, .in_c = r->in_c, .out_c = r->out_c, .hw = hw,
                           .src_offset = d->src_offset, .src_stride = d->src_stride,
                           .dst_offset = d->dst_offset, .dst_stride = d->dst_stride,
                           .channels = d->channels, .repeat = d->repeat,
                           .src_repeat_stride = d->src_repeat_stride,
                           .dst_repeat_stride = d->dst_repeat_stride};
  const int watched = observing();
  accel_status st = ACCEL_OK;
  if (watched) {
    st = observe_as_held(dev, label, ACCEL_OBSERVE_INPUT, input->data, r->in_n, r->in_c,
                         r->in_h, r->in_w, p);
    if (st != ACCEL_OK) return st;
  }
  bdma_copy(&g, eb, input->data, output->data, dev->num_threads);
  if (!watched) return ACCEL_OK;
  /* the copied channels in the order copied: repeat by repeat */
  const int32_t copied_c = (d->repeat + 1) * d->channels; /* <= dst_channels: none written twice */
  const size_t bytes = (size_t)r->in_n * (size_t)copied_c * (size_t)hw * eb;
  void* copied = workspace_get(&dev->ws, WS_CHAIN_A, bytes);
  if (copied == NULL) {
    return accel_fail(ACCEL_ERR_NO_MEMORY, "cannot allocate %zu bytes of scratch", bytes);
  }
  const bdma_geometry gather = {.n = r->in_n, .in_c = r->out_c, .out_c = copied_c, .hw = hw,
                                .src_offset = d->dst_offset, .src_stride = d->dst_stride,
                                .dst_offset = 0, .dst_stride = 1, .channels = d->channels,
                                .repeat = d->repeat, .src_repeat_stride = d->dst_repeat_stride,
                                .dst_repeat_stride = d->channels};
  bdma_copy(&gather, eb, output->data, copied, dev->num_threads);
  return observe_as_held(dev, label, 0, copied, r->in_n, copied_c, r->in_h, r->in_w, p);
}

/* RUBIK contract: a byte copy in the tensors' own precision, like the BDMA's. An observer sees
 * the input and the output (op_index 0), as the engines hold them. */
static accel_status execute_rubik(accel_device* dev, const resolved_chain* chain,
                                  const accel_tensor* input, const accel_tensor* output,
                                  const char* label) {
  const resolved_op* r = &chain->ops[0];
  const accel_rubik_desc* d = &r->op->rubik;
  const accel_precision p = d->precision;
  const size_t eb = element_bytes(p);
  const rubik_geometry g = {.n = r->in_n, .out_c = r->out_c, .h = r->in_h, .w = r->in_w,
                            .sx = d->stride_x, .sy = d->stride_y};
  const int watched = observing();
  if (watched) {
    accel_status st = observe_as_held(dev, label, ACCEL_OBSERVE_INPUT, input->data, r->in_n,
                                      r->in_c, r->in_h, r->in_w, p);
    if (st != ACCEL_OK) return st;
  }
  rubik_contract(&g, eb, input->data, output->data, dev->num_threads);
  if (!watched) return ACCEL_OK;
  return observe_as_held(dev, label, 0, output->data, r->out_n, r->out_c, r->out_h, r->out_w, p);
}

/* A converting SDP (accel_sdp_desc.convert): accel_convert's values through FP32 scratch. */
static accel_status execute_convert(accel_device* dev, const resolved_chain* chain,
                                    const accel_tensor* input, const accel_tensor* output) {
  const resolved_op* r = &chain->ops[0];
  const accel_sdp_desc* d = &r->op->sdp;
  const int64_t count = (int64_t)r->in_n * r->in_c * r->in_h * r->in_w;
  float* wide = workspace_get(&dev->ws, WS_FP16_WIDE, (size_t)count * sizeof(float));
  if (wide == NULL) {
    return accel_fail(ACCEL_ERR_NO_MEMORY, "cannot allocate %zu bytes of scratch",
                      (size_t)count * sizeof(float));
  }
  accel_status st = accel_convert(input->data, input->precision, wide, ACCEL_FP32, count,
                                  d->cvt_scale, d->cvt_zero);
  if (st != ACCEL_OK) return st;
  return accel_convert(wide, ACCEL_FP32, output->data, output->precision, count, d->cvt_scale,
                       d->cvt_zero);
}

/* The C16 kernels a run can have (c16_kernel). */
typedef enum c16_kind {
  C16_NONE,
  C16_POINTWISE, /* conv_c16.c: 1x1, stride 1 or 2 */
  C16_DEPTHWISE, /* dw_c16.c */
  C16_DENSE_3X3, /* conv3x3_c16.c */
  C16_WINOGRAD,  /* winograd_c16.c */
  C16_POOL,      /* pdp_c16.c: a PDP alone */
  C16_STEM,      /* stem_c16.c: the image layer, NCHW in */
  C16_STEM_POOL, /* the same, then pdp_c16.c (ResNet's stem) */
} c16_kind;

/* The kernels' names in ACCEL_VERBOSE's lines (conv_verbose_line), as the CONV
 * implementations' (docs/kernels.md). */
static const char* const c16_names[] = {
    [C16_NONE] = "", [C16_POINTWISE] = "c16_pointwise", [C16_DEPTHWISE] = "c16_depthwise",
    [C16_DENSE_3X3] = "c16_dense_3x3", [C16_WINOGRAD] = "c16_winograd", [C16_POOL] = "c16_pool",
    [C16_STEM] = "c16_stem", [C16_STEM_POOL] = "c16_stem_pool"};

/* The C16 kernel of a run whose input is in layout in_layout and output C16, if it has one:
 * with a C16 input, a CONV alone or a FUSED CONV -> SDP whose geometry and epilogue
 * conv_c16.c, dw_c16.c, conv3x3_c16.c or winograd_c16.c take, or a PDP alone (pdp_c16.c);
 * with an NCHW input, such a CONV that stem_c16.c takes (the image layer), or one followed by
 * a PDP (ResNet's stem: the conv into C16 scratch, then pdp_c16.c). */
static c16_kind c16_kernel(const resolved_chain* chain, accel_layout in_layout) {
#ifndef __AVX512F__ /* the C16 kernels are AVX-512 code: without it every C16 run converts */
  (void)chain;
  (void)in_layout;
  return C16_NONE;
#else
  const resolved_op* r = &chain->ops[0];
  const int in_c16 = in_layout == ACCEL_LAYOUT_C16;
  if (r->op->engine == ACCEL_ENGINE_PDP)
    return in_c16 && chain->num_ops == 1 && pdp_c16_fits(&r->pdp) ? C16_POOL : C16_NONE;
  if (r->op->engine != ACCEL_ENGINE_CONV) return C16_NONE;
  const int32_t end = pass_end(chain, 0, ACCEL_FP32); /* the conv pass's last op */
  const int pooled = !in_c16 && chain->num_ops == end + 2 &&
                     chain->ops[end + 1].op->engine == ACCEL_ENGINE_PDP &&
                     pdp_c16_fits(&chain->ops[end + 1].pdp);
  if (chain->num_ops != end + 1 && !pooled) return C16_NONE;
  const sdp_f32 e = end == 1 ? sdp_operands(&chain->ops[1].op->sdp) : (sdp_f32){0};
  const sdp_f32* ep = end == 1 ? &e : NULL;
  /* a post activation runs on the kernel's output: before a fused pool it would come late */
  if (pooled && c16_post_activation(ep)) return C16_NONE;
  if (!in_c16)
    return r->op->conv.mode != ACCEL_CONV_WINOGRAD && conv_c16_stem_fits(&r->conv, ep)
               ? (pooled ? C16_STEM_POOL : C16_STEM)
               : C16_NONE;
  if (r->op->conv.mode == ACCEL_CONV_WINOGRAD)
    return conv_winograd_c16_fits(&r->conv, ep) ? C16_WINOGRAD : C16_NONE;
  if (conv_c16_pointwise_fits(&r->conv, ep)) return C16_POINTWISE;
  if (conv_c16_3x3_fits(&r->conv, ep)) return C16_DENSE_3X3;
  return conv_c16_depthwise_fits(&r->conv, ep) ? C16_DEPTHWISE : C16_NONE;
#endif
}

/* Scratch for `count` floats in `slot`. */
static float* scratch_floats(accel_device* dev, int slot, int64_t count) {
  float* p = workspace_get(&dev->ws, slot, (size_t)count * sizeof(float));
  if (p == NULL) {
    accel_fail(ACCEL_ERR_NO_MEMORY, "cannot allocate %zu bytes of scratch",
               (size_t)count * sizeof(float));
  }
  return p;
}

#ifdef __AVX512F__
/* The run on its C16 kernel (c16_kernel's answer, not C16_NONE); `end`: its conv pass's last
 * op (0 for a pool). */
static accel_status run_c16_kernel_alone(accel_device* dev, const resolved_chain* chain,
                                         c16_kind kernel, int32_t end,
                                         const accel_tensor* input,
                                         const accel_tensor* output) {
  const int32_t threads = dev->num_threads;
  const resolved_op* r = &chain->ops[0];
  const sdp_f32 e = end == 1 ? sdp_operands(&chain->ops[1].op->sdp) : (sdp_f32){0};
  const sdp_f32* ep = end == 1 ? &e : NULL;
  const float* w = r->op->conv.weights;
  const void* packed = r->op->conv.weights_packed;
  if (kernel != C16_POOL && conv_verbose())
    conv_verbose_line("fp32", &r->conv, c16_names[kernel]);
  switch (kernel) {
    case C16_POINTWISE:
      return conv_c16_pointwise(&r->conv, input->data, w, packed, output->data, ep, &dev->ws,
                                threads);
    case C16_DEPTHWISE:
      return conv_c16_depthwise(&r->conv, input->data, w, output->data, ep, &dev->ws, threads);
    case C16_DENSE_3X3:
      return conv_c16_3x3(&r->conv, input->data, w, packed, output->data, ep, &dev->ws,
                          threads);
    case C16_WINOGRAD:
      return conv_winograd_c16(&r->conv, input->data, w, packed, output->data, ep, &dev->ws,
                               threads);
    case C16_POOL:
      pdp_c16(&r->pdp, input->data, output->data, threads);
      return ACCEL_OK;
    case C16_STEM:
      return conv_c16_stem(&r->conv, input->data, w, output->data, ep, &dev->ws, threads);
    case C16_STEM_POOL: { /* the conv into C16 scratch, then the pool */
      const resolved_op* pool = &chain->ops[end + 1];
      float* conv_out = scratch_floats(dev, WS_CHAIN_A, (int64_t)pool->in_n * pool->in_c *
                                                            pool->in_h * pool->in_w);
      if (conv_out == NULL) return ACCEL_ERR_NO_MEMORY;
      return conv_c16_stem_pool(&r->conv, input->data, w, conv_out, &pool->pdp, output->data,
                                ep, &dev->ws, threads);
    }
    case C16_NONE:
      break;
  }
  return ACCEL_ERR_UNSUPPORTED; /* never: the caller runs a kernel it has */
}

/* The kernel, then a post activation (c16_post_activation) on its whole output. */
static accel_status run_c16_kernel(accel_device* dev, const resolved_chain* chain,
                                   c16_kind kernel, const accel_tensor* input,
                                   const accel_tensor* output) {
  const int32_t end = kernel != C16_POOL ? pass_end(chain, 0, ACCEL_FP32) : 0;
  const accel_status st = run_c16_kernel_alone(dev, chain, kernel, end, input, output);
  if (st != ACCEL_OK || end != 1) return st;
  const sdp_f32 e = sdp_operands(&chain->ops[1].op->sdp);
  if (c16_post_activation(&e)) {
    activation_exact_run(e.act, output->data,
                         (int64_t)output->n * output->c * output->h * output->w,
                         dev->num_threads);
  }
  return st;
}
#endif

/* The stride-1 geometry over the phase of a 1x1 stride-2 conv g whose phase run sums as g's
 * (conv_f32_dot_tail: the same dot-product tail, hence the same order for every output; -1,
 * refused, where conv_f32 takes OpenBLAS or has no AVX-512), or 0. */
static int phase_conv(const conv_geometry* g, conv_geometry* phase) {
  if (g->kernel_h != 1 || g->kernel_w != 1 || g->stride_h != 2 || g->stride_w != 2 ||
      g->pad_top != 0 || g->pad_left != 0 || g->dilation_h != 1 || g->dilation_w != 1 ||
      g->groups != 1 || g->pixel_bytes != 0 || g->c % 16 != 0 ||
      g->out_h > (g->h + 1) / 2 || g->out_w > (g->w + 1) / 2)
    return 0;
  *phase = *g;
  phase->h = g->out_h;
  phase->w = g->out_w;
  phase->stride_h = phase->stride_w = 1;
  const int tail = conv_f32_dot_tail(g);
  return tail >= 0 && tail == conv_f32_dot_tail(phase);
}

/* An FP32 run with a C16 tensor (accel_layout): its C16 kernel where it has one (c16_kernel:
 * the output C16, the input C16 or, for the image layer, NCHW) and no observer is set;
 * otherwise the NCHW kernels between conversions: the input (of a 1x1 stride-2 conv only the
 * phase it reads: phase_conv) and the element-wise operands (in the output's layout) into NCHW
 * scratch, the output back. A BDMA copy into a C16 output starts from the output's NCHW copy:
 * it writes only its destination channels. */
static accel_status execute_c16(accel_device* dev, const resolved_chain* chain,
                                const accel_tensor* input, const accel_tensor* output,
                                const char* label) {
  const int32_t threads = dev->num_threads;
  const int in_c16 = input->layout == ACCEL_LAYOUT_C16;
  const int out_c16 = output->layout == ACCEL_LAYOUT_C16;
#ifdef __AVX512F__
  const c16_kind kernel =
      out_c16 && !observing() ? c16_kernel(chain, input->layout) : C16_NONE;
  if (kernel != C16_NONE) return run_c16_kernel(dev, chain, kernel, input, output);
#endif
  const int64_t in_hw = (int64_t)input->h * input->w, out_hw = (int64_t)output->h * output->w;
  const float* src = input->data;
  resolved_chain plain = *chain;
  conv_geometry phase;
  const resolved_op* r0 = &chain->ops[0];
  if (in_c16 && !observing() && r0->op->engine == ACCEL_ENGINE_CONV &&
      r0->op->conv.mode != ACCEL_CONV_WINOGRAD && phase_conv(&r0->conv, &phase)) {
    /* only the phase the conv reads, a quarter of the input, converted (the conversion,
     * and the stride-2 panel packing, are smaller: docs/kernels.md, runtime/src/device.c) */
    float* nchw = scratch_floats(dev, WS_LAYOUT_IN,
                                 (int64_t)input->n * input->c * phase.h * phase.w);
    if (nchw == NULL) return ACCEL_ERR_NO_MEMORY;
    layout_from_c16_phase(input->n, input->c, input->h, input->w, phase.h, phase.w, input->data,
                          nchw, threads);
    plain.ops[0].conv = phase;
    plain.ops[0].in_h = phase.h;
    plain.ops[0].in_w = phase.w;
    src = nchw;
  } else if (in_c16) {
    float* nchw = scratch_floats(dev, WS_LAYOUT_IN, input->n * input->c * in_hw);
    if (nchw == NULL) return ACCEL_ERR_NO_MEMORY;
    layout_from_c16(input->n, input->c, in_hw, input->data, nchw, threads);
    src = nchw;
  }
  accel_op ops[ACCEL_MAX_CHAIN_OPS];
  if (out_c16) {
    int64_t total = 0;
    for (int32_t i = 0; i < chain->num_ops; ++i) {
      const resolved_op* ri = &chain->ops[i];
      if (ri->op->engine == ACCEL_ENGINE_SDP && ri->op->sdp.ew_op != ACCEL_EW_NONE)
        total += (int64_t)ri->in_n * ri->in_c * ri->in_h * ri->in_w;
    }
    float* cursor = total > 0 ? scratch_floats(dev, WS_LAYOUT_OPERANDS, total) : NULL;
    if (total > 0 && cursor == NULL) return ACCEL_ERR_NO_MEMORY;
    for (int32_t i = 0; i < chain->num_ops; ++i) {
      const resolved_op* ri = &chain->ops[i];
      ops[i] = *ri->op;
      plain.ops[i].op = &ops[i];
      if (ri->op->engine != ACCEL_ENGINE_SDP || ri->op->sdp.ew_op == ACCEL_EW_NONE) continue;
      layout_from_c16(ri->in_n, ri->in_c, (int64_t)ri->in_h * ri->in_w, ri->op->sdp.ew_operand,
                      cursor, threads);
      ops[i].sdp.ew_operand = cursor;
      cursor += (int64_t)ri->in_n * ri->in_c * ri->in_h * ri->in_w;
    }
  }
  float* dst = output->data;
  if (out_c16) {
    dst = scratch_floats(dev, WS_LAYOUT_OUT, output->n * output->c * out_hw);
    if (dst == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  accel_status st;
  const accel_engine first = chain->ops[0].op->engine;
  if (first == ACCEL_ENGINE_BDMA || first == ACCEL_ENGINE_RUBIK) {
    /* the BDMA writes some channels only: the others keep the output's */
    if (first == ACCEL_ENGINE_BDMA && out_c16)
      layout_from_c16(output->n, output->c, out_hw, output->data, dst, threads);
    const accel_tensor in = {.data = (void*)src, .n = input->n, .c = input->c, .h = input->h,
                             .w = input->w, .precision = ACCEL_FP32};
    const accel_tensor out = {.data = dst, .n = output->n, .c = output->c, .h = output->h,
                              .w = output->w, .precision = ACCEL_FP32};
    st = first == ACCEL_ENGINE_BDMA ? execute_bdma(dev, &plain, &in, &out, label)
                                    : execute_rubik(dev, &plain, &in, &out, label);
  } else {
    st = execute_chain(dev, &plain, ACCEL_FP32, sizeof(float), 0, src, dst, label);
  }
  if (st == ACCEL_OK && out_c16)
    layout_to_c16(output->n, output->c, out_hw, dst, output->data, threads);
  return st;
}

/* The chain's per-channel element-wise operands (accel_sdp_desc.ew_per_channel) broadcast to
 * whole NCHW tensors in the workspace, so that every kernel reads them as it reads any operand:
 * `local` gets the ops with those operands; *broadcast says whether there were any. The
 * modelled SDP reads the [N][C] values (the cost model counts those bytes); this copy is the
 * simulator's way of giving the kernels one operand format. */
static int broadcasts(const accel_op* ops, int32_t i) {
  if (ops[i].engine != ACCEL_ENGINE_SDP || !ops[i].sdp.ew_per_channel) return 0;
  /* an INT8 or FP32 SDP that runs alone (not a CONV's epilogue) reads [N][C] itself:
   * sdp_i8_run, sdp_f32_run */
  return ops[i].sdp.precision == ACCEL_FP16 || (i > 0 && ops[i - 1].engine == ACCEL_ENGINE_CONV);
}

/* `count` copies of one element of `bytes` bytes (1, 2 or 4) at dst, as elements of that size:
 * a byte loop (memcpy of a run-time size per element) was 2 % of a ViT-Ti call, its layer
 * norms' per-token operands. */
static void fill_plane(char* dst, const char* value, int64_t count, size_t bytes) {
  if (bytes == 1) {
    memset(dst, *value, (size_t)count);
  } else if (bytes == 2) {
    uint16_t v;
    memcpy(&v, value, sizeof v);
    uint16_t* d = (uint16_t*)(void*)dst; /* the scratch is 64-byte aligned, planes whole */
    for (int64_t j = 0; j < count; ++j) d[j] = v;
  } else {
    uint32_t v;
    memcpy(&v, value, sizeof v);
    uint32_t* d = (uint32_t*)(void*)dst;
    for (int64_t j = 0; j < count; ++j) d[j] = v;
  }
}

static accel_status broadcast_operands(accel_device* dev, const resolved_chain* chain,
                                       const accel_op* ops, int32_t num_ops, accel_op* local,
                                       int* broadcast) {
  size_t total = 0;
  *broadcast = 0;
  for (int32_t i = 0; i < num_ops; ++i) {
    local[i] = ops[i];
    const resolved_op* r = &chain->ops[i];
    if (!broadcasts(ops, i)) continue;
    const size_t eb = element_bytes(ops[i].sdp.precision);
    total += ((size_t)r->in_n * r->in_c * r->in_h * r->in_w * eb + 63) / 64 * 64;
  }
  if (total == 0) return ACCEL_OK;
  char* cursor = workspace_get(&dev->ws, WS_EW_BROADCAST, total);
  if (cursor == NULL) {
    return accel_fail(ACCEL_ERR_NO_MEMORY, "cannot allocate %zu bytes of scratch", total);
  }
  for (int32_t i = 0; i < num_ops; ++i) {
    const resolved_op* r = &chain->ops[i];
    accel_sdp_desc* d = &local[i].sdp;
    if (!broadcasts(ops, i)) continue;
    const size_t eb = element_bytes(d->precision);
    const int64_t planes = (int64_t)r->in_n * r->in_c, plane = (int64_t)r->in_h * r->in_w;
    const char* src = d->ew_operand;
    for (int64_t p = 0; p < planes; ++p)
      fill_plane(cursor + (size_t)(p * plane) * eb, src + (size_t)p * eb, plane, eb);
    d->ew_operand = cursor;
    d->ew_per_channel = 0;
    cursor += ((size_t)(planes * plane) * eb + 63) / 64 * 64;
  }
  *broadcast = 1;
  return ACCEL_OK;
}

accel_status accel_run(accel_device* dev, const accel_op* ops, int32_t num_ops,
                       const accel_tensor* input, const accel_tensor* output, accel_mode mode,
                       const char* label, accel_run_stats* run_stats, accel_op_stats* op_stats) {
  if (dev == NULL) return accel_fail(ACCEL_ERR_NULL, "device is NULL");
  resolved_chain chain;
  accel_status st = chain_resolve(&dev->config, ops, num_ops, input, output, mode, 1, &chain);
  if (st != ACCEL_OK) return st;
  pthread_mutex_lock(&dev->lock);
  /* The run executes `run` (per-channel operands broadcast) and is costed as `chain`. */
  accel_op local[ACCEL_MAX_CHAIN_OPS];
  int broadcast = 0;
  resolved_chain run = chain;
  st = broadcast_operands(dev, &chain, ops, num_ops, local, &broadcast);
  if (st == ACCEL_OK && broadcast) {
    st = chain_resolve(&dev->config, local, num_ops, input, output, mode, 1, &run);
  }
  if (st != ACCEL_OK) {
    pthread_mutex_unlock(&dev->lock);
    return st;
  }
  const int converts = chain.ops[0].op->engine == ACCEL_ENGINE_SDP && chain.ops[0].op->sdp.convert;
  const int c16 = input->layout == ACCEL_LAYOUT_C16 || output->layout == ACCEL_LAYOUT_C16;
  const accel_engine first = chain.ops[0].op->engine;
  conv_verbose_run(label); /* ACCEL_VERBOSE's lines name the run */
  switch (c16 ? -3 : first == ACCEL_ENGINE_BDMA ? -1 : first == ACCEL_ENGINE_RUBIK ? -4
                   : converts ? -2 : (int)input->precision) {
    case -3: /* FP32 with a C16 tensor (chain_resolve allows no other precision) */
      st = execute_c16(dev, &run, input, output, label != NULL ? label : "");
      break;
    case -1: /* the BDMA copies any precision as it is */
      st = execute_bdma(dev, &run, input, output, label != NULL ? label : "");
      break;
    case -4: /* so does the RUBIK */
      st = execute_rubik(dev, &run, input, output, label != NULL ? label : "");
      break;
    case -2:
      st = execute_convert(dev, &run, input, output);
      break;
    case ACCEL_FP16:
      st = execute_chain_fp16(dev, &run, input, output, label != NULL ? label : "");
      break;
    case ACCEL_INT8:
      st = execute_chain(dev, &run, ACCEL_INT8, 1, 0, input->data, output->data,
                         label != NULL ? label : "");
      break;
    default:
      st = execute_chain(dev, &run, ACCEL_FP32, sizeof(float), 0, input->data, output->data,
                         label != NULL ? label : "");
      break;
  }
  conv_verbose_run(NULL);
  pthread_mutex_unlock(&dev->lock);
  if (st != ACCEL_OK) return st;
  /* the cost only where someone reads it (the generated code passes no stats): 0.7 % of a
   * ViT-Ti call, 968 runs */
  if (run_stats != NULL || op_stats != NULL || profile_enabled()) {
    accel_run_stats stats;
    accel_op_stats op_records[ACCEL_MAX_CHAIN_OPS];
    cost_chain(&dev->config, &chain, label, &stats, op_records);
    profile_record(&stats, op_records);
    if (run_stats != NULL) *run_stats = stats;
    if (op_stats != NULL) memcpy(op_stats, op_records, sizeof op_records[0] * (size_t)num_ops);
  }
  record_run(label, ops, num_ops, input, output, mode);
  return ACCEL_OK;
}

int32_t accel_c16_native(const accel_config* cfg, const accel_op* ops, int32_t num_ops,
                         const accel_tensor* input, accel_mode mode) {
  if (input == NULL || accel_config_validate(cfg) != ACCEL_OK) return 0;
  if (input->layout != ACCEL_LAYOUT_NCHW && input->layout != ACCEL_LAYOUT_C16) return 0;
  accel_tensor shape = *input;
  shape.layout = ACCEL_LAYOUT_NCHW; /* validated as plain shapes: C16's conditions are below */
  resolved_chain chain;
  if (chain_resolve(cfg, ops, num_ops, &shape, NULL, mode, 0, &chain) != ACCEL_OK) return 0;
  return input->precision == ACCEL_FP32 &&
         (input->layout == ACCEL_LAYOUT_NCHW || input->c % ACCEL_C16_CHANNELS == 0) &&
         c16_kernel(&chain, input->layout) != C16_NONE;
}

accel_status accel_estimate(const accel_config* cfg, const accel_op* ops, int32_t num_ops,
                            const accel_tensor* input, const accel_tensor* output,
                            accel_mode mode, accel_run_stats* run_stats,
                            accel_op_stats* op_stats) {
  accel_status st = accel_config_validate(cfg);
  if (st != ACCEL_OK) return st;
  resolved_chain chain;
  st = chain_resolve(cfg, ops, num_ops, input, output, mode, 0, &chain);
  if (st != ACCEL_OK) return st;
  accel_run_stats run;
  accel_op_stats op_records[ACCEL_MAX_CHAIN_OPS];
  cost_chain(cfg, &chain, NULL, &run, op_records);
  if (run_stats != NULL) *run_stats = run;
  if (op_stats != NULL) memcpy(op_stats, op_records, sizeof op_records[0] * (size_t)num_ops);
  return ACCEL_OK;
}

accel_status accel_estimate_chains(const accel_config* cfg, const accel_chain* chains,
                                   int32_t num_chains, accel_run_stats* run_stats,
                                   accel_op_stats* op_stats) {
  accel_status st = accel_config_validate(cfg);
  if (st != ACCEL_OK) return st;
  if (num_chains < 0) return accel_fail(ACCEL_ERR_INVALID, "num_chains = %d < 0", num_chains);
  if (num_chains > 0 && (chains == NULL || run_stats == NULL)) {
    return accel_fail(ACCEL_ERR_NULL, "chains or run_stats is NULL");
  }
  for (int32_t i = 0; i < num_chains; ++i) {
    const accel_chain* c = &chains[i];
    resolved_chain chain;
    st = chain_resolve(cfg, c->ops, c->num_ops, &c->input, &c->output, c->mode, 0, &chain);
    if (st != ACCEL_OK) {
      char message[ACCEL_ERROR_LEN];
      snprintf(message, sizeof message, "%s", accel_last_error());
      return accel_fail(st, "chain %d: %s", i, message);
    }
    accel_op_stats op_records[ACCEL_MAX_CHAIN_OPS];
    cost_chain(cfg, &chain, NULL, &run_stats[i], op_records);
    if (op_stats != NULL) {
      memcpy(op_stats, op_records, sizeof op_records[0] * (size_t)c->num_ops);
      op_stats += c->num_ops;
    }
  }
  return ACCEL_OK;
}
