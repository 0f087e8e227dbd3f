/* device.c - devices and runs: validate a chain, execute it on the engines, cost it, record it. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

struct accel_device {
  accel_config config;
  int32_t num_threads;
  workspace ws; /* scratch reused across runs: per-thread tiles and the chain's intermediates */
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
  pthread_mutex_destroy(&dev->lock);
  free(dev);
}

/* The shared devices: a short list, searched by configuration content. */
enum { MAX_SHARED_DEVICES = 16 };
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static accel_device* shared_devices[MAX_SHARED_DEVICES];
static int32_t num_shared_devices;

/* Field by field: padding bytes of a caller's struct may hold anything. */
static int same_config(const accel_config* a, const accel_config* b) {
  return strncmp(a->name, b->name, sizeof a->name) == 0 && a->atomic_c == b->atomic_c &&
         a->atomic_k == b->atomic_k && a->cbuf_bytes == b->cbuf_bytes &&
         a->memory_atom_bytes == b->memory_atom_bytes &&
         a->sdp_throughput == b->sdp_throughput && a->sdp_ew_throughput == b->sdp_ew_throughput &&
         a->pdp_throughput == b->pdp_throughput && a->clock_hz == b->clock_hz &&
         a->dram_bytes_per_s == b->dram_bytes_per_s && a->precisions == b->precisions &&
         a->features == b->features;
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

static sdp_f32 sdp_operands(const accel_sdp_desc* d) {
  return (sdp_f32){.scale = d->scale, .shift = d->shift, .ew_op = d->ew_op,
                   .ew_operand = d->ew_operand, .act = d->act, .clip_min = d->clip_min,
                   .clip_max = d->clip_max, .prelu_slope = d->prelu_slope};
}

/* One op from src to dst (fp32). `epilogue` is an SDP fused into a CONV. */
static accel_status execute_op(accel_device* dev, const resolved_op* r, const sdp_f32* epilogue,
                               const float* src, float* dst) {
  switch (r->op->engine) {
    case ACCEL_ENGINE_CONV:
      return conv_f32(&r->conv, src, r->op->conv.weights, dst, epilogue, &dev->ws,
                      dev->num_threads);
    case ACCEL_ENGINE_SDP: {
      const sdp_f32 p = sdp_operands(&r->op->sdp);
      sdp_f32_run(&p, r->in_n, r->in_c, (int64_t)r->in_h * r->in_w, src, dst, dev->num_threads);
      return ACCEL_OK;
    }
    case ACCEL_ENGINE_PDP:
      pdp_f32(&r->pdp, src, dst, dev->num_threads);
      return ACCEL_OK;
  }
  return accel_fail(ACCEL_ERR_INVALID, "engine = %d is not an accel_engine", (int)r->op->engine);
}

static size_t output_bytes(const resolved_op* r) {
  return (size_t)r->out_n * r->out_c * r->out_h * r->out_w * sizeof(float);
}

/* FUSED: an SDP right after a CONV runs as the convolution's epilogue, on each tile while it
 * is in cache; a PDP after them reads the on-chip result (a scratch buffer standing in for the
 * pipeline's line buffers). INDEPENDENT: every op writes a full intermediate tensor. */
static accel_status execute_chain(accel_device* dev, const resolved_chain* chain,
                                  const float* input, float* output) {
  const float* src = input;
  int scratch = WS_CHAIN_A;
  for (int32_t i = 0; i < chain->num_ops; ++i) {
    const resolved_op* r = &chain->ops[i];
    const sdp_f32* epilogue = NULL;
    sdp_f32 fused_sdp;
    int32_t last = i;
    if (chain->mode == ACCEL_MODE_FUSED && r->op->engine == ACCEL_ENGINE_CONV &&
        i + 1 < chain->num_ops && chain->ops[i + 1].op->engine == ACCEL_ENGINE_SDP) {
      fused_sdp = sdp_operands(&chain->ops[i + 1].op->sdp);
      epilogue = &fused_sdp;
      last = i + 1;
    }
    float* dst = output;
    if (last + 1 < chain->num_ops) {
      dst = workspace_get(&dev->ws, scratch, output_bytes(&chain->ops[last]));
      if (dst == NULL) {
        return accel_fail(ACCEL_ERR_NO_MEMORY, "cannot allocate %zu bytes of scratch",
                          output_bytes(&chain->ops[last]));
      }
      scratch = scratch == WS_CHAIN_A ? WS_CHAIN_B : WS_CHAIN_A;
    }
    accel_status st = execute_op(dev, r, epilogue, src, dst);
    if (st != ACCEL_OK) return st;
    src = dst;
    i = last;
  }
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
  st = execute_chain(dev, &chain, input->data, output->data);
  pthread_mutex_unlock(&dev->lock);
  if (st != ACCEL_OK) return st;
  accel_run_stats run;
  accel_op_stats op_records[ACCEL_MAX_CHAIN_OPS];
  cost_chain(&dev->config, &chain, label, &run, op_records);
  profile_record(&run, op_records);
  if (run_stats != NULL) *run_stats = run;
  if (op_stats != NULL) memcpy(op_stats, op_records, sizeof op_records[0] * (size_t)num_ops);
  return ACCEL_OK;
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
