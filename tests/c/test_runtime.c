/*
 * test_runtime.c - the C library on its own, built with AddressSanitizer and
 * UndefinedBehaviorSanitizer in CI: every rejection path, the engines against naive loops,
 * fused == independent bit for bit, and a fuzz loop of random (often invalid) chains whose
 * buffers are sized exactly, so any read or write out of bounds stops the sanitizer run.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"

static int passed, failed;

#define EXPECT(cond, ...)                                                  \
  do {                                                                     \
    if (cond) {                                                            \
      ++passed;                                                            \
    } else {                                                               \
      ++failed;                                                            \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);               \
      printf(__VA_ARGS__);                                                 \
      printf(" [last error: %s]\n", accel_last_error());                  \
    }                                                                      \
  } while (0)

static uint64_t rng_state = 0x2026112203ULL;
static uint32_t rnd(void) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(rng_state >> 33);
}
static int rnd_int(int lo, int hi) { return lo + (int)(rnd() % (uint32_t)(hi - lo + 1)); }
static float rnd_float(void) { return (float)rnd() / 2147483648.0f - 1.0f; }

static float* random_buffer(int64_t count) {
  float* p = malloc(sizeof(float) * (size_t)(count > 0 ? count : 1));
  for (int64_t i = 0; i < count; ++i) p[i] = rnd_float();
  return p;
}

static accel_tensor tensor(void* data, int n, int c, int h, int w) {
  accel_tensor t = {.data = data, .n = n, .c = c, .h = h, .w = w, .precision = ACCEL_FP32};
  return t;
}

static accel_op conv_op(const float* weights, int k, int kernel, int stride, int pad, int groups) {
  accel_op op;
  memset(&op, 0, sizeof op);
  op.engine = ACCEL_ENGINE_CONV;
  op.conv.out_c = k;
  op.conv.kernel_h = op.conv.kernel_w = kernel;
  op.conv.stride_h = op.conv.stride_w = stride;
  op.conv.pad_top = op.conv.pad_bottom = op.conv.pad_left = op.conv.pad_right = pad;
  op.conv.dilation_h = op.conv.dilation_w = 1;
  op.conv.groups = groups;
  op.conv.precision = ACCEL_FP32;
  op.conv.weights = weights;
  return op;
}

static accel_op sdp_op(const float* scale, const float* shift, accel_activation act) {
  accel_op op;
  memset(&op, 0, sizeof op);
  op.engine = ACCEL_ENGINE_SDP;
  op.sdp.scale = scale;
  op.sdp.shift = shift;
  op.sdp.act = act;
  op.sdp.clip_min = 0.0f;
  op.sdp.clip_max = 6.0f;
  op.sdp.precision = ACCEL_FP32;
  return op;
}

static accel_op pdp_op(accel_pool pool, int kernel, int stride, int pad) {
  accel_op op;
  memset(&op, 0, sizeof op);
  op.engine = ACCEL_ENGINE_PDP;
  op.pdp.pool = pool;
  op.pdp.kernel_h = op.pdp.kernel_w = kernel;
  op.pdp.stride_h = op.pdp.stride_w = stride;
  op.pdp.pad_top = op.pdp.pad_bottom = op.pdp.pad_left = op.pdp.pad_right = pad;
  op.pdp.precision = ACCEL_FP32;
  return op;
}

static accel_op cdp_op(int local_size, float alpha, float beta, float k) {
  accel_op op;
  memset(&op, 0, sizeof op);
  op.engine = ACCEL_ENGINE_CDP;
  op.cdp.local_size = local_size;
  op.cdp.alpha = alpha;
  op.cdp.beta = beta;
  op.cdp.k = k;
  op.cdp.precision = ACCEL_FP32;
  return op;
}

/* The textbook seven loops: the C-side reference of the CONV semantics in accel.h. */
static void naive_conv(const accel_conv_desc* d, const float* in, int n, int c, int h, int w,
                       float* out, int oh, int ow) {
  const float* wt = d->weights;
  const int cg = c / d->groups, kg = d->out_c / d->groups;
  for (int b = 0; b < n; ++b)
    for (int k = 0; k < d->out_c; ++k)
      for (int y = 0; y < oh; ++y)
        for (int x = 0; x < ow; ++x) {
          double acc = 0.0;
          for (int ci = 0; ci < cg; ++ci)
            for (int r = 0; r < d->kernel_h; ++r)
              for (int s = 0; s < d->kernel_w; ++s) {
                const int iy = y * d->stride_h - d->pad_top + r * d->dilation_h;
                const int ix = x * d->stride_w - d->pad_left + s * d->dilation_w;
                if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                acc += (double)in[(((int64_t)b * c + (k / kg) * cg + ci) * h + iy) * w + ix] *
                       wt[(((int64_t)k * cg + ci) * d->kernel_h + r) * d->kernel_w + s];
              }
          out[(((int64_t)b * d->out_c + k) * oh + y) * ow + x] = (float)acc;
        }
}

static void test_presets_and_config_checks(void) {
  accel_config cfg;
  EXPECT(accel_num_presets() == 3, "%d presets", accel_num_presets());
  EXPECT(accel_preset_name(3) == NULL && accel_preset_name(-1) == NULL, "out of range name");
  EXPECT(accel_config_preset("nv_full", &cfg) == ACCEL_OK && cfg.atomic_c == 64, "nv_full");
  EXPECT(accel_config_preset("nv_tiny", &cfg) == ACCEL_ERR_NOT_FOUND, "unknown preset");
  EXPECT(strstr(accel_last_error(), "nv_tiny") != NULL, "message names the preset");
  EXPECT(accel_config_preset(NULL, &cfg) == ACCEL_ERR_NULL, "NULL name");
  EXPECT(accel_config_validate(NULL) == ACCEL_ERR_NULL, "NULL config");
  accel_config_preset("nv_small", &cfg);
  cfg.memory_atom_bytes = 12;
  EXPECT(accel_config_validate(&cfg) == ACCEL_ERR_INVALID, "atom not a power of two");
  accel_config_preset("nv_small", &cfg);
  memset(cfg.name, 'x', sizeof cfg.name);
  EXPECT(accel_config_validate(&cfg) == ACCEL_ERR_INVALID, "unterminated name");
  accel_config_preset("nv_small", &cfg);
  cfg.dram_bytes_per_s = NAN;
  EXPECT(accel_config_validate(&cfg) == ACCEL_ERR_INVALID, "NaN bandwidth");
  accel_device* dev = NULL;
  EXPECT(accel_device_create(&cfg, &dev) == ACCEL_ERR_INVALID && dev == NULL, "bad device");
  EXPECT(accel_device_create(NULL, &dev) == ACCEL_ERR_NULL, "NULL config device");
  EXPECT(accel_device_create(&cfg, NULL) == ACCEL_ERR_NULL, "NULL out device");
  accel_device_destroy(NULL); /* a no-op, like free(NULL) */
}

static void test_rejections(accel_device* dev) {
  float buf[64] = {0};
  float* misaligned = (float*)((char*)buf + 2);
  accel_tensor t = tensor(buf, 1, 1, 4, 4), o = tensor(buf + 32, 1, 1, 4, 4);
  accel_op relu = sdp_op(NULL, NULL, ACCEL_ACT_RELU);
  EXPECT(accel_run(NULL, &relu, 1, &t, &o, ACCEL_MODE_FUSED, NULL, NULL, NULL) == ACCEL_ERR_NULL,
         "NULL device");
  EXPECT(accel_run(dev, NULL, 1, &t, &o, ACCEL_MODE_FUSED, NULL, NULL, NULL) == ACCEL_ERR_NULL,
         "NULL ops");
  EXPECT(accel_run(dev, &relu, 1, NULL, &o, ACCEL_MODE_FUSED, NULL, NULL, NULL) == ACCEL_ERR_NULL,
         "NULL input");
  EXPECT(accel_run(dev, &relu, 0, &t, &o, ACCEL_MODE_FUSED, NULL, NULL, NULL) ==
             ACCEL_ERR_INVALID, "zero ops");
  EXPECT(accel_run(dev, &relu, 1, &t, &o, (accel_mode)3, NULL, NULL, NULL) == ACCEL_ERR_INVALID,
         "bad mode");
  accel_tensor bad = tensor(misaligned, 1, 1, 2, 2);
  EXPECT(accel_run(dev, &relu, 1, &bad, &o, ACCEL_MODE_FUSED, NULL, NULL, NULL) ==
             ACCEL_ERR_ALIGNMENT, "misaligned input");
  bad = tensor(NULL, 1, 1, 4, 4);
  EXPECT(accel_run(dev, &relu, 1, &t, &bad, ACCEL_MODE_FUSED, NULL, NULL, NULL) ==
             ACCEL_ERR_NULL, "NULL output data");
  bad = tensor(buf, 1, -3, 4, 4);
  EXPECT(accel_run(dev, &relu, 1, &bad, &o, ACCEL_MODE_FUSED, NULL, NULL, NULL) ==
             ACCEL_ERR_INVALID && strstr(accel_last_error(), "c = -3"), "negative channels");
  bad = tensor(buf, 1 << 20, 1 << 20, 1 << 20, 1 << 20);
  EXPECT(accel_run(dev, &relu, 1, &bad, &bad, ACCEL_MODE_FUSED, NULL, NULL, NULL) ==
             ACCEL_ERR_INVALID, "overflowing size");
  bad = tensor(buf + 32, 1, 1, 4, 3);
  EXPECT(accel_run(dev, &relu, 1, &t, &bad, ACCEL_MODE_FUSED, NULL, NULL, NULL) ==
             ACCEL_ERR_SHAPE, "output shape mismatch");
  bad = t;
  bad.precision = ACCEL_INT16;
  EXPECT(accel_run(dev, &relu, 1, &bad, &o, ACCEL_MODE_FUSED, NULL, NULL, NULL) ==
             ACCEL_ERR_UNSUPPORTED, "int16 not implemented");
  bad.precision = ACCEL_FP16;
  EXPECT(accel_run(dev, &relu, 1, &bad, &o, ACCEL_MODE_FUSED, NULL, NULL, NULL) ==
             ACCEL_ERR_INVALID && strstr(accel_last_error(), "differs"), "op precision differs");

  accel_op conv = conv_op(misaligned, 1, 1, 1, 0, 1);
  EXPECT(accel_run(dev, &conv, 1, &t, &o, ACCEL_MODE_FUSED, NULL, NULL, NULL) ==
             ACCEL_ERR_ALIGNMENT && strstr(accel_last_error(), "weights"), "misaligned weights");
  conv = conv_op(buf, 1, 1, 1, 0, 1);
  accel_tensor overlap = tensor(buf + 1, 1, 1, 4, 4);
  EXPECT(accel_run(dev, &conv, 1, &t, &overlap, ACCEL_MODE_FUSED, NULL, NULL, NULL) ==
             ACCEL_ERR_INVALID && strstr(accel_last_error(), "overlaps"), "overlapping conv");
  conv.conv.kernel_h = 0;
  EXPECT(accel_run(dev, &conv, 1, &t, &o, ACCEL_MODE_FUSED, NULL, NULL, NULL) ==
             ACCEL_ERR_INVALID && strstr(accel_last_error(), "kernel_h = 0"), "zero kernel");
  accel_op ops[2] = {sdp_op(NULL, NULL, ACCEL_ACT_RELU), conv_op(buf, 1, 1, 1, 0, 1)};
  EXPECT(accel_run(dev, ops, 2, &t, &o, ACCEL_MODE_FUSED, NULL, NULL, NULL) == ACCEL_ERR_INVALID,
         "fused order");
  accel_op pool = pdp_op(ACCEL_POOL_MAX, 9, 1, 0);
  EXPECT(accel_run(dev, &pool, 1, &t, &o, ACCEL_MODE_FUSED, NULL, NULL, NULL) ==
             ACCEL_ERR_UNSUPPORTED, "pool kernel limit");
  accel_op ew = sdp_op(NULL, NULL, ACCEL_ACT_NONE);
  ew.sdp.ew_op = ACCEL_EW_ADD;
  EXPECT(accel_run(dev, &ew, 1, &t, &o, ACCEL_MODE_FUSED, NULL, NULL, NULL) == ACCEL_ERR_NULL,
         "missing operand");
  accel_op lrn[2] = {cdp_op(5, 1e-4f, 0.75f, 1.0f), pdp_op(ACCEL_POOL_MAX, 2, 2, 0)};
  EXPECT(accel_run(dev, lrn, 2, &t, &o, ACCEL_MODE_FUSED, NULL, NULL, NULL) ==
             ACCEL_ERR_INVALID && strstr(accel_last_error(), "FUSED run holds it alone"),
         "fused CDP with another op");
  lrn[0].cdp.local_size = 4;
  EXPECT(accel_run(dev, lrn, 1, &t, &o, ACCEL_MODE_FUSED, NULL, NULL, NULL) ==
             ACCEL_ERR_UNSUPPORTED && strstr(accel_last_error(), "local_size = 4"),
         "even local size");
  lrn[0] = cdp_op(5, 1e-4f, 0.75f, 0.0f);
  EXPECT(accel_run(dev, lrn, 1, &t, &o, ACCEL_MODE_FUSED, NULL, NULL, NULL) ==
             ACCEL_ERR_INVALID && strstr(accel_last_error(), "k = 0"), "zero k");
  accel_op_stats op_stats;
  EXPECT(accel_profile_op(-1, &op_stats) == ACCEL_ERR_NOT_FOUND, "profile index");
  EXPECT(accel_profile_op(0, NULL) == ACCEL_ERR_NULL, "profile NULL");
  EXPECT(accel_device_set_threads(dev, 0) == ACCEL_ERR_INVALID, "zero threads");
}

/* The LUT geometry: every LUT activation has one (LO inside LE), nothing else does. */
static void test_lut_info(void) {
  accel_lut lut;
  EXPECT(accel_lut_info(ACCEL_ACT_RELU, &lut) == ACCEL_ERR_INVALID &&
             strstr(accel_last_error(), "relu"), "relu has no table");
  EXPECT(accel_lut_info(ACCEL_ACT_COUNT, &lut) == ACCEL_ERR_INVALID, "COUNT has no table");
  EXPECT(accel_lut_info(ACCEL_ACT_SIGMOID, NULL) == ACCEL_ERR_NULL, "NULL lut");
  for (int a = ACCEL_ACT_SIGMOID; a < ACCEL_ACT_COUNT; ++a) {
    EXPECT(accel_lut_info((accel_activation)a, &lut) == ACCEL_OK, "act %d has a table", a);
    const float lo_end = lut.lo_start + (ACCEL_LUT_LO_ENTRIES - 1) * lut.lo_step;
    /* le_step 0: LE in exponent mode (accel_lut), 64 octaves from le_start */
    const float le_end = lut.le_step == 0.0f
                             ? ldexpf(lut.le_start, ACCEL_LUT_LE_ENTRIES - 1)
                             : lut.le_start + (ACCEL_LUT_LE_ENTRIES - 1) * lut.le_step;
    EXPECT(lut.le_start <= lut.lo_start && lo_end <= le_end && lut.lo_step > 0.0f,
           "act %d: LO [%g, %g) inside LE [%g, %g)", a, (double)lut.lo_start, (double)lo_end,
           (double)lut.le_start, (double)le_end);
  }
}

/* Conv -> SDP -> PDP on random data: fused equals independent bit for bit, and both match the
 * naive convolution followed by the same SDP and pooling. */
static void test_engines_against_naive_loops(accel_device* dev) {
  const int n = 2, c = 6, h = 13, w = 11, k = 12;
  float* x = random_buffer((int64_t)n * c * h * w);
  float* wt = random_buffer((int64_t)k * c * 9);
  float* scale = random_buffer(k);
  float* shift = random_buffer(k);
  accel_op ops[3] = {conv_op(wt, k, 3, 1, 1, 1), sdp_op(scale, shift, ACCEL_ACT_RELU),
                     pdp_op(ACCEL_POOL_MAX, 2, 2, 0)};
  accel_tensor in = tensor(x, n, c, h, w);
  accel_tensor shapes[3];
  EXPECT(accel_chain_shapes(&(accel_config){0}, ops, 3, &in, ACCEL_MODE_FUSED, shapes) ==
             ACCEL_ERR_INVALID, "zeroed config rejected");
  accel_config cfg;
  accel_device_config(dev, &cfg);
  EXPECT(accel_chain_shapes(&cfg, ops, 3, &in, ACCEL_MODE_FUSED, shapes) == ACCEL_OK, "shapes");
  const int oh = shapes[2].h, ow = shapes[2].w;
  EXPECT(oh == 6 && ow == 5, "pooled shape %dx%d", oh, ow);
  const int64_t out_count = (int64_t)n * k * oh * ow;
  float* fused = malloc(sizeof(float) * (size_t)out_count);
  float* independent = malloc(sizeof(float) * (size_t)out_count);
  accel_tensor o1 = tensor(fused, n, k, oh, ow), o2 = tensor(independent, n, k, oh, ow);
  accel_run_stats s1, s2;
  EXPECT(accel_run(dev, ops, 3, &in, &o1, ACCEL_MODE_FUSED, "fused", &s1, NULL) == ACCEL_OK,
         "fused run");
  EXPECT(accel_run(dev, ops, 3, &in, &o2, ACCEL_MODE_INDEPENDENT, "independent", &s2, NULL) ==
             ACCEL_OK, "independent run");
  EXPECT(memcmp(fused, independent, sizeof(float) * (size_t)out_count) == 0, "bitwise equal");
  EXPECT(s1.bytes_read < s2.bytes_read && s1.bytes_written < s2.bytes_written, "traffic");

  float* conv_out = malloc(sizeof(float) * (size_t)n * k * h * w);
  naive_conv(&ops[0].conv, x, n, c, h, w, conv_out, h, w);
  double max_err = 0.0;
  for (int b = 0; b < n; ++b)
    for (int ch = 0; ch < k; ++ch)
      for (int y = 0; y < oh; ++y)
        for (int xx = 0; xx < ow; ++xx) {
          float best = -INFINITY;
          for (int r = 0; r < 2; ++r)
            for (int s = 0; s < 2; ++s) {
              float v = conv_out[(((int64_t)b * k + ch) * h + 2 * y + r) * w + 2 * xx + s];
              v = v * scale[ch] + shift[ch];
              v = v > 0.0f ? v : 0.0f;
              best = v > best ? v : best;
            }
          const double err = fabs(best - fused[(((int64_t)b * k + ch) * oh + y) * ow + xx]);
          max_err = err > max_err ? err : max_err;
        }
  EXPECT(max_err < 1e-4, "max error %g", max_err);
  free(x), free(wt), free(scale), free(shift), free(fused), free(independent), free(conv_out);
}

/* BDMA: a concat of two inputs into one destination, one run each (the destination's other
 * channels untouched, the bytes copied as they are), its cost as estimated, and its refusals:
 * a BDMA in a longer chain, a range past the input, overlapping tensors. */
static void test_bdma(accel_device* dev) {
  const int n = 2, h = 3, w = 5, hw = h * w, ca = 3, cb = 4, dst_c = 9;
  float* a = random_buffer((int64_t)n * ca * hw);
  float* b = random_buffer((int64_t)n * cb * hw);
  float* out = malloc(sizeof(float) * (size_t)(n * dst_c * hw));
  for (int i = 0; i < n * dst_c * hw; ++i) out[i] = -7.0f;
  accel_op op;
  memset(&op, 0, sizeof op);
  op.engine = ACCEL_ENGINE_BDMA;
  op.bdma = (accel_bdma_desc){.src_offset = 0, .src_stride = 1, .channels = ca, .dst_offset = 1,
                              .dst_stride = 1, .dst_channels = dst_c, .precision = ACCEL_FP32};
  accel_tensor in_a = tensor(a, n, ca, h, w), in_b = tensor(b, n, cb, h, w);
  accel_tensor o = tensor(out, n, dst_c, h, w);
  accel_op_stats run_op, estimated_op;
  accel_run_stats run, estimated;
  EXPECT(accel_run(dev, &op, 1, &in_a, &o, ACCEL_MODE_FUSED, "bdma a", &run, &run_op) ==
             ACCEL_OK, "bdma run a");
  op.bdma.channels = cb;
  op.bdma.dst_offset = 1 + ca;
  EXPECT(accel_run(dev, &op, 1, &in_b, &o, ACCEL_MODE_INDEPENDENT, "bdma b", NULL, NULL) ==
             ACCEL_OK, "bdma run b");
  int wrong = 0;
  for (int bi = 0; bi < n; ++bi)
    for (int c = 0; c < dst_c; ++c)
      for (int i = 0; i < hw; ++i) {
        const float got = out[((int64_t)bi * dst_c + c) * hw + i];
        const float want = c == 0 || c == dst_c - 1 ? -7.0f
                           : c <= ca ? a[((int64_t)bi * ca + c - 1) * hw + i]
                                     : b[((int64_t)bi * cb + c - 1 - ca) * hw + i];
        wrong += memcmp(&got, &want, sizeof got) != 0;
      }
  EXPECT(wrong == 0, "%d elements of the concat differ", wrong);
  accel_config cfg;
  accel_device_config(dev, &cfg);
  op.bdma.channels = ca;
  op.bdma.dst_offset = 1;
  EXPECT(accel_estimate(&cfg, &op, 1, &in_a, &o, ACCEL_MODE_FUSED, &estimated, &estimated_op) ==
             ACCEL_OK && estimated.cycles == run.cycles &&
             estimated_op.bytes_read == run_op.bytes_read &&
             run_op.bytes_written == (int64_t)n * hw * cfg.memory_atom_bytes &&
             run_op.compute_cycles == 0 && strcmp(run_op.op, "bdma:copy") == 0,
         "bdma cost: %lld cycles, %lld bytes written", (long long)run.cycles,
         (long long)run_op.bytes_written);

  accel_op chain[2] = {op, sdp_op(NULL, NULL, ACCEL_ACT_RELU)};
  EXPECT(accel_run(dev, chain, 2, &in_a, &o, ACCEL_MODE_INDEPENDENT, NULL, NULL, NULL) ==
             ACCEL_ERR_INVALID && strstr(accel_last_error(), "runs alone") != NULL,
         "a BDMA in a chain of two is refused");
  op.bdma.src_offset = 1;
  EXPECT(accel_run(dev, &op, 1, &in_a, &o, ACCEL_MODE_FUSED, NULL, NULL, NULL) ==
             ACCEL_ERR_SHAPE && strstr(accel_last_error(), "reads channel 3") != NULL,
         "a range past the input is refused");
  op.bdma.src_offset = 0;
  accel_tensor inside = tensor(out, n, ca, h, w);
  EXPECT(accel_run(dev, &op, 1, &inside, &o, ACCEL_MODE_FUSED, NULL, NULL, NULL) ==
             ACCEL_ERR_INVALID && strstr(accel_last_error(), "overlaps") != NULL,
         "overlapping tensors are refused");
  free(a), free(b), free(out);
}

/* RUBIK contract: a 3 x 2 contract against the naive loop of accel.h (bits as they are), its
 * cost as estimated, and its refusals: in a chain, channels not a multiple of the phases, a
 * factor out of range, overlapping tensors. */
static void test_rubik(accel_device* dev) {
  const int n = 2, c = 5, sx = 3, sy = 2, h = 4, w = 7, in_c = c * sx * sy;
  float* x = random_buffer((int64_t)n * in_c * h * w);
  float* out = malloc(sizeof(float) * (size_t)(n * in_c * h * w));
  accel_op op;
  memset(&op, 0, sizeof op);
  op.engine = ACCEL_ENGINE_RUBIK;
  op.rubik = (accel_rubik_desc){.mode = ACCEL_RUBIK_CONTRACT, .stride_x = sx, .stride_y = sy,
                                .precision = ACCEL_FP32};
  accel_tensor in = tensor(x, n, in_c, h, w), o = tensor(out, n, c, h * sy, w * sx);
  accel_op_stats run_op, estimated_op;
  accel_run_stats run, estimated;
  EXPECT(accel_run(dev, &op, 1, &in, &o, ACCEL_MODE_INDEPENDENT, "rubik", &run, &run_op) ==
             ACCEL_OK, "rubik run: %s", accel_last_error());
  int wrong = 0;
  for (int b = 0; b < n; ++b)
    for (int k = 0; k < c; ++k)
      for (int y = 0; y < h; ++y)
        for (int a = 0; a < sy; ++a)
          for (int xx = 0; xx < w; ++xx)
            for (int t = 0; t < sx; ++t) {
              const float got =
                  out[(((int64_t)b * c + k) * h * sy + y * sy + a) * w * sx + xx * sx + t];
              const float want = x[(((int64_t)b * in_c + (a * sx + t) * c + k) * h + y) * w + xx];
              wrong += memcmp(&got, &want, sizeof got) != 0;
            }
  EXPECT(wrong == 0, "%d elements of the contract differ", wrong);
  accel_config cfg;
  accel_device_config(dev, &cfg);
  EXPECT(accel_estimate(&cfg, &op, 1, &in, &o, ACCEL_MODE_INDEPENDENT, &estimated,
                        &estimated_op) == ACCEL_OK && estimated.cycles == run.cycles &&
             run_op.bytes_read == (int64_t)n * h * w * sx * sy * cfg.memory_atom_bytes &&
             run_op.bytes_written == run_op.bytes_read && run.macs == 0 &&
             strcmp(run_op.op, "rubik:contract") == 0,
         "rubik cost: %lld cycles, %lld bytes read", (long long)run.cycles,
         (long long)run_op.bytes_read);
  accel_op chain[2] = {op, sdp_op(NULL, NULL, ACCEL_ACT_RELU)};
  EXPECT(accel_run(dev, chain, 2, &in, &o, ACCEL_MODE_INDEPENDENT, NULL, NULL, NULL) ==
             ACCEL_ERR_INVALID && strstr(accel_last_error(), "runs alone") != NULL,
         "a RUBIK in a chain of two is refused");
  op.rubik.stride_x = 4;
  EXPECT(accel_run(dev, &op, 1, &in, &o, ACCEL_MODE_FUSED, NULL, NULL, NULL) ==
             ACCEL_ERR_SHAPE && strstr(accel_last_error(), "not a multiple") != NULL,
         "channels that are not a multiple of the phases are refused");
  op.rubik.stride_x = 33;
  EXPECT(accel_run(dev, &op, 1, &in, &o, ACCEL_MODE_FUSED, NULL, NULL, NULL) ==
             ACCEL_ERR_INVALID && strstr(accel_last_error(), "stride_x = 33") != NULL,
         "a factor beyond 32 is refused");
  op.rubik.stride_x = sx;
  accel_tensor inside = tensor(out, n, in_c, h, w);
  EXPECT(accel_run(dev, &op, 1, &inside, &o, ACCEL_MODE_FUSED, NULL, NULL, NULL) ==
             ACCEL_ERR_INVALID && strstr(accel_last_error(), "overlaps") != NULL,
         "overlapping tensors are refused");
  free(x), free(out);
}

/* Random chains, valid or not. Valid ones run on buffers of exactly the inferred size. */
static void fuzz_chains(accel_device* dev, int rounds) {
  accel_config cfg;
  accel_device_config(dev, &cfg);
  int ran = 0, rejected = 0;
  for (int round = 0; round < rounds; ++round) {
    const int n = rnd_int(1, 2), c = rnd_int(1, 12), h = rnd_int(1, 14), w = rnd_int(1, 14);
    const int num_ops = rnd_int(1, 4);
    accel_op ops[4];
    float* owned[16];
    int num_owned = 0;
    int ch = c;
    for (int i = 0; i < num_ops; ++i) {
      const int kind = rnd_int(0, 4);
      if (kind == 0) {
        const int groups = rnd_int(0, 3) == 0 ? ch : 1;
        const int k = groups == ch ? ch : rnd_int(1, 20);
        const int kernel = rnd_int(1, 4);
        owned[num_owned] = random_buffer((int64_t)k * (ch / groups) * kernel * kernel);
        ops[i] = conv_op(owned[num_owned++], k, kernel, rnd_int(1, 3), rnd_int(0, 2), groups);
        ops[i].conv.pad_right = rnd_int(-1, 3); /* sometimes invalid */
        ops[i].conv.dilation_w = rnd_int(1, 2);
        ch = k;
      } else if (kind == 1) {
        owned[num_owned] = random_buffer(ch);
        const float* scale = owned[num_owned++];
        owned[num_owned] = random_buffer(ch);
        ops[i] = sdp_op(rnd_int(0, 1) ? scale : NULL, owned[num_owned++],
                        (accel_activation)rnd_int(0, ACCEL_ACT_COUNT)); /* COUNT is invalid */
        ops[i].sdp.prelu_slope = scale;
      } else if (kind == 2) {
        ops[i] = pdp_op((accel_pool)rnd_int(0, 1), rnd_int(1, 9), rnd_int(1, 3), rnd_int(0, 2));
        ops[i].pdp.count_include_pad = rnd_int(0, 1);
      } else if (kind == 3) { /* sizes 3..9 (even ones refused), sometimes a non-positive k */
        ops[i] = cdp_op(rnd_int(2, 10), rnd_float() + 1.0f, rnd_float(), rnd_float() + 1.0f);
      } else { /* a BDMA copy, in range or not (and refused in a chain of several) */
        memset(&ops[i], 0, sizeof ops[i]);
        ops[i].engine = ACCEL_ENGINE_BDMA;
        ops[i].bdma = (accel_bdma_desc){
            .src_offset = rnd_int(0, ch), .src_stride = rnd_int(1, 3), .channels = rnd_int(1, ch),
            .dst_offset = rnd_int(-1, 4), .dst_stride = rnd_int(1, 4),
            .dst_channels = rnd_int(1, 3 * ch + 6), .precision = ACCEL_FP32};
        ch = ops[i].bdma.dst_channels;
      }
    }
    const accel_mode mode = (accel_mode)rnd_int(0, 1);
    float* x = random_buffer((int64_t)n * c * h * w);
    accel_tensor in = tensor(x, n, c, h, w), shapes[4];
    if (accel_chain_shapes(&cfg, ops, num_ops, &in, mode, shapes) != ACCEL_OK) {
      ++rejected;
    } else {
      const accel_tensor* last = &shapes[num_ops - 1];
      const int64_t count = (int64_t)last->n * last->c * last->h * last->w;
      float* out = malloc(sizeof(float) * (size_t)count);
      accel_tensor o = tensor(out, last->n, last->c, last->h, last->w);
      const accel_status st = accel_run(dev, ops, num_ops, &in, &o, mode, NULL, NULL, NULL);
      EXPECT(st == ACCEL_OK, "round %d: a chain that passed validation failed to run", round);
      ++ran;
      free(out);
    }
    free(x);
    for (int i = 0; i < num_owned; ++i) free(owned[i]);
  }
  EXPECT(ran > rounds / 10 && rejected > rounds / 10, "fuzz ran %d, rejected %d", ran, rejected);
}

/* accel_buffer_alloc: 64-byte aligned; from 2 MB on 2 MB aligned (huge pages); every byte
 * writable (the sanitizer run checks the bounds); 0 bytes still a buffer. */
static void test_buffers(void) {
  const size_t sizes[] = {0, 1, 100, 4096, (size_t)2 << 20, ((size_t)5 << 20) + 12};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    unsigned char* b = accel_buffer_alloc(sizes[i]);
    const size_t align = sizes[i] >= ((size_t)2 << 20) ? (size_t)2 << 20 : 64;
    EXPECT(b != NULL && (uintptr_t)b % align == 0, "%zu bytes at %p", sizes[i], (void*)b);
    if (b != NULL) memset(b, 0xa5, sizes[i]);
    accel_buffer_free(b);
  }
  accel_buffer_free(NULL);
}

int main(void) {
  accel_config cfg;
  accel_device* dev = NULL;
  accel_config_preset("nv_full", &cfg);
  if (accel_device_create(&cfg, &dev) != ACCEL_OK) {
    printf("cannot create a device: %s\n", accel_last_error());
    return 1;
  }
  accel_profile_enable(1);
  test_presets_and_config_checks();
  test_buffers();
  test_rejections(dev);
  test_lut_info();
  test_engines_against_naive_loops(dev);
  test_bdma(dev);
  test_rubik(dev);
  fuzz_chains(dev, 400);
  EXPECT(accel_profile_num_runs() > 0, "profile recorded %d runs", accel_profile_num_runs());
  accel_profile_enable(0);
  accel_device_destroy(dev);
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
