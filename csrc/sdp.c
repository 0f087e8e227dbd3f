/* sdp.c - the SDP engine: per-channel scale/shift, element-wise op, activation (fp32). */
#include <math.h>
#include <string.h>

#include "kernels.h"

/* The common epilogues (scale and/or shift, then ADD or nothing, then NONE / RELU / CLIP) in
 * one pass over x: the same operations in the same order as the step-by-step passes below, so
 * the same bits; one load and store of x instead of one per step (a ResNet residual block's
 * BN + add + ReLU took three). Flags are compile-time constants in each instantiation. */
static inline __attribute__((always_inline)) void span_one_pass(const float* src, float* x,
                                                                const float* operand,
                                                                int64_t count, float s, float b,
                                                                float lo, float hi, int scale,
                                                                int shift, int add, int act) {
  for (int64_t i = 0; i < count; ++i) {
    float t = src[i];
    if (scale) t = t * s;
    if (shift) t = t + b;
    if (add) t = t + operand[i];
    if (act == ACCEL_ACT_RELU) t = t < 0.0f ? 0.0f : t; /* NaN stays */
    if (act == ACCEL_ACT_CLIP) {
      t = t < lo ? lo : t; /* NaN stays */
      t = t > hi ? hi : t;
    }
    x[i] = t;
  }
}

#define ONE_PASS(NAME, SCALE, SHIFT, ADD)                                                     \
  static void NAME(const float* src, float* x, const float* operand, int64_t count, float s,  \
                   float b, float lo, float hi, accel_activation act) {                       \
    if (act == ACCEL_ACT_RELU)                                                                \
      span_one_pass(src, x, operand, count, s, b, lo, hi, SCALE, SHIFT, ADD, ACCEL_ACT_RELU); \
    else if (act == ACCEL_ACT_CLIP)                                                           \
      span_one_pass(src, x, operand, count, s, b, lo, hi, SCALE, SHIFT, ADD, ACCEL_ACT_CLIP); \
    else                                                                                      \
      span_one_pass(src, x, operand, count, s, b, lo, hi, SCALE, SHIFT, ADD, ACCEL_ACT_NONE); \
  }
ONE_PASS(pass_bn, 1, 1, 0)
ONE_PASS(pass_scale, 1, 0, 0)
ONE_PASS(pass_shift, 0, 1, 0)
ONE_PASS(pass_act, 0, 0, 0)
ONE_PASS(pass_bn_add, 1, 1, 1)
ONE_PASS(pass_scale_add, 1, 0, 1)
ONE_PASS(pass_shift_add, 0, 1, 1)
ONE_PASS(pass_add, 0, 0, 1)
#undef ONE_PASS

typedef void (*one_pass_fn)(const float*, float*, const float*, int64_t, float, float, float,
                            float, accel_activation);

int sdp_f32_one_pass(const sdp_f32* p) {
  return !sdp_f32_has_x(p) && (p->ew_op == ACCEL_EW_NONE || p->ew_op == ACCEL_EW_ADD) &&
         (p->act == ACCEL_ACT_NONE || p->act == ACCEL_ACT_RELU || p->act == ACCEL_ACT_CLIP);
}

/* x = SDP(src) for a one_pass op (src may equal x). */
static void span_from(const sdp_f32* p, int32_t channel, const float* src, float* x,
                      const float* operand, int64_t count) {
  static const one_pass_fn passes[2][4] = {{pass_act, pass_shift, pass_scale, pass_bn},
                                           {pass_add, pass_shift_add, pass_scale_add,
                                            pass_bn_add}};
  const int affine = (p->scale != NULL) * 2 + (p->shift != NULL);
  passes[p->ew_op == ACCEL_EW_ADD][affine](
      src, x, operand, count, p->scale != NULL ? p->scale[channel] : 1.0f,
      p->shift != NULL ? p->shift[channel] : 0.0f, p->clip_min, p->clip_max, p->act);
}

/* sdp_f32_span's element-wise and activation steps on n values after the affine step;
 * slope: the PReLU slope of value i at slope[i * slope_step] (step 0: one channel's). */
static inline __attribute__((always_inline)) void ew_act(const sdp_f32* p, float* x,
                                                         const float* operand, int64_t n,
                                                         const float* slope,
                                                         int64_t slope_step) {
  switch (p->ew_op) {
    case ACCEL_EW_ADD:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] + operand[i];
      break;
    case ACCEL_EW_MUL:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] * operand[i];
      break;
    case ACCEL_EW_MAX:
      for (int64_t i = 0; i < n; ++i) {
        x[i] = (x[i] > operand[i] || x[i] != x[i]) ? x[i] : operand[i]; /* NaN wins */
      }
      break;
    case ACCEL_EW_MIN:
      for (int64_t i = 0; i < n; ++i) {
        x[i] = (x[i] < operand[i] || x[i] != x[i]) ? x[i] : operand[i]; /* NaN wins */
      }
      break;
    case ACCEL_EW_NONE:
    case ACCEL_EW_COUNT:
      break;
  }

  switch (p->act) {
    case ACCEL_ACT_RELU:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] < 0.0f ? 0.0f : x[i]; /* NaN stays */
      break;
    case ACCEL_ACT_CLIP: {
      const float lo = p->clip_min, hi = p->clip_max;
      for (int64_t i = 0; i < n; ++i) {
        const float t = x[i] < lo ? lo : x[i]; /* NaN stays */
        x[i] = t > hi ? hi : t;
      }
      break;
    }
    case ACCEL_ACT_PRELU:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] >= 0.0f ? x[i] : x[i] * slope[i * slope_step];
      break;
    case ACCEL_ACT_NONE:
    case ACCEL_ACT_COUNT:
      break;
    default: /* the lookup-table activations */
      if (p->lut != NULL) {
        lut_apply(p->lut, x, n);
      } else {
        activation_exact(p->act, x, n);
      }
      break;
  }
}

/* Built with -ffp-contract=off: x * scale + shift rounds twice, as the NumPy reference does. */
void sdp_f32_span(const sdp_f32* p, int32_t channel, float* x, const float* operand,
                  int64_t count) {
  if (sdp_f32_one_pass(p)) {
    span_from(p, channel, x, x, operand, count);
    return;
  }
  /* scale / shift and FP32's sigmoid or silu in one pass where the build has one */
  if (p->ew_op == ACCEL_EW_NONE && p->lut == NULL &&
      activation_affine(p->act, x, count, p->scale != NULL ? p->scale + channel : NULL,
                        p->shift != NULL ? p->shift + channel : NULL)) {
    return;
  }
  if (p->scale != NULL && p->shift != NULL) {
    const float s = p->scale[channel], b = p->shift[channel];
    for (int64_t i = 0; i < count; ++i) x[i] = x[i] * s + b;
  } else if (p->scale != NULL) {
    const float s = p->scale[channel];
    for (int64_t i = 0; i < count; ++i) x[i] = x[i] * s;
  } else if (p->shift != NULL) {
    const float b = p->shift[channel];
    for (int64_t i = 0; i < count; ++i) x[i] = x[i] + b;
  }

  ew_act(p, x, operand, count, p->prelu_slope != NULL ? p->prelu_slope + channel : NULL, 0);
}

/* The SDP on n channels of one value each (x[i] is channel ch0 + i's, operand[i] its element-wise
 * operand): a convolution's outputs at a single position (squeeze-excite's 1x1 convolutions, a
 * classifier's dense layer), whose channels lie side by side. The steps of sdp_f32_span in its
 * order, each rounded alone, so the bits of n spans of one value each, without a call per
 * channel (which cost more than a 1x1 squeeze-excite layer's arithmetic). */
static void channels_steps(const sdp_f32* p, int32_t ch0, float* x, const float* operand,
                           int64_t n) {
  const float* s = p->scale != NULL ? p->scale + ch0 : NULL;
  const float* b = p->shift != NULL ? p->shift + ch0 : NULL;
  if (s != NULL && b != NULL) {
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] * s[i] + b[i];
  } else if (s != NULL) {
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] * s[i];
  } else if (b != NULL) {
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] + b[i];
  }

  ew_act(p, x, operand, n, p->prelu_slope != NULL ? p->prelu_slope + ch0 : NULL, 1);
}

void sdp_f32_channels(const sdp_f32* p, int32_t ch0, float* x, const float* operand, int64_t n) {
  if (sdp_f32_has_x(p) || p->ew_per_channel) { /* not a CONV epilogue: span by span */
    for (int64_t i = 0; i < n; ++i)
      sdp_f32_span(p, ch0 + (int32_t)i, x + i, operand != NULL ? operand + i : NULL, 1);
    return;
  }
  channels_steps(p, ch0, x, operand, n);
}

/* Planes of one value, [N, C, 1, 1] (a transformer's tokens, a row of C channels each; softmax's
 * [1, rows, 1, 1] reductions): each image's C values side by side, the per-channel operands as
 * vectors along them, in blocks of images per pool_for item. The steps of run_item's planes in
 * its order, each rounded alone: the X units, then sdp_f32_span's; an ew_per_channel operand
 * ([N][C]) is one value a plane, so element by element here. A plane a value through run_item
 * cost 1-1.5 ns a value (ViT-Ti's FP16 layer norm passes on 197 x 192). */
typedef struct rows_job {
  const sdp_f32* p;
  int32_t n, c, per_item;
  const float* in;
  float* out;
} rows_job;

static void rows_item(void* ctx, int64_t item, int participant) {
  const rows_job* J = ctx;
  const sdp_f32* p = J->p;
  (void)participant;
  const int32_t first = (int32_t)item * J->per_item;
  const int32_t end = first + J->per_item < J->n ? first + J->per_item : J->n;
  const int64_t c = J->c;
  if (J->out != J->in) {
    memmove(J->out + first * c, J->in + first * c, (size_t)((end - first) * c) * sizeof(float));
  }
  for (int32_t b = first; b < end; ++b) {
    const int64_t at = b * c;
    float* x = J->out + at;
    for (int u = 0; u < 2; ++u) { /* plane_x_units' steps: ((x + a1) * m1 + a2) * m2 */
      const float* alu = p->x[u].alu;
      const float* mul = p->x[u].mul;
      if (alu != NULL) {
        const float* a = p->x[u].alu_per_channel ? alu : alu + at;
        for (int64_t i = 0; i < c; ++i) x[i] = x[i] + a[i];
      }
      if (mul != NULL) {
        const float* m = p->x[u].mul_per_channel ? mul : mul + at;
        for (int64_t i = 0; i < c; ++i) x[i] = x[i] * m[i];
      }
    }
    channels_steps(p, 0, x, p->ew_operand != NULL ? p->ew_operand + at : NULL, c);
  }
}

/* Independent mode: planes, a few per pool_for item (about 16 KiB of data each). */
typedef struct run_job {
  const sdp_f32* p;
  int32_t c;
  int64_t hw, planes, per_item;
  const float* in;
  float* out;
} run_job;

/* A plane whose operand is one value (ew_per_channel): the same spans, on chunks of a buffer
 * holding that value, so each element meets the operations a broadcast operand would. */
enum { SAME = 1024 };

static void plane_per_channel(const sdp_f32* p, int32_t channel, const float* in, float* dst,
                              float value, int64_t hw) {
  if (p->ew_op == ACCEL_EW_MUL && p->act == ACCEL_ACT_NONE) {
    /* squeeze-excite's x * s: the steps of sdp_f32_span in one pass, value for the operand;
     * a missing scale as 1 and a missing shift as -0, which change no value (x * 1 and
     * x + -0 are x, -0 and NaN included) */
    const float s = p->scale != NULL ? p->scale[channel] : 1.0f;
    const float b = p->shift != NULL ? p->shift[channel] : -0.0f;
    for (int64_t i = 0; i < hw; ++i) dst[i] = (in[i] * s + b) * value;
    return;
  }
  if (p->ew_op == ACCEL_EW_ADD && p->scale == NULL && p->shift == NULL && p->lut == NULL &&
      lut_activation(p->act)) {
    /* softmax's exp(s - max): sdp_f32_span's steps (the add, then activation_exact), without
     * the operand buffer or a copy first, in one pass where the build has one */
    activation_exact_shifted(p->act, in, value, dst, hw);
    return;
  }
  float same[SAME];
  const int64_t filled = hw < SAME ? hw : SAME; /* a plane's worth: softmax's are 197 long */
  for (int64_t i = 0; i < filled; ++i) same[i] = value;
  for (int64_t i0 = 0; i0 < hw; i0 += SAME) {
    const int64_t cnt = hw - i0 < SAME ? hw - i0 : SAME;
    if (sdp_f32_one_pass(p)) {
      span_from(p, channel, in + i0, dst + i0, same, cnt);
      continue;
    }
    if (dst != in) {
      for (int64_t i = 0; i < cnt; ++i) dst[i0 + i] = in[i0 + i];
    }
    sdp_f32_span(p, channel, dst + i0, same, cnt);
  }
}

/* The X units (accel_sdp_x) on one plane, from in to dst: t = ((x + a1) * m1 + a2) * m2, each
 * step one fp32 operation, an operand per channel or per element (offset: the plane's first). */
static void plane_x_units(const sdp_f32* p, int32_t channel, int64_t offset, const float* in,
                          float* dst, int64_t hw) {
  if (dst != in) {
    for (int64_t i = 0; i < hw; ++i) dst[i] = in[i];
  }
  for (int u = 0; u < 2; ++u) {
    const float* alu = p->x[u].alu;
    const float* mul = p->x[u].mul;
    if (alu != NULL && p->x[u].alu_per_channel) {
      const float a = alu[channel];
      for (int64_t i = 0; i < hw; ++i) dst[i] = dst[i] + a;
    } else if (alu != NULL) {
      for (int64_t i = 0; i < hw; ++i) dst[i] = dst[i] + alu[offset + i];
    }
    if (mul != NULL && p->x[u].mul_per_channel) {
      const float m = mul[channel];
      for (int64_t i = 0; i < hw; ++i) dst[i] = dst[i] * m;
    } else if (mul != NULL) {
      for (int64_t i = 0; i < hw; ++i) dst[i] = dst[i] * mul[offset + i];
    }
  }
}

/* dst = (in * scale + shift) * operand, no activation (a layer norm's d * d, softmax's
 * Newton products): sdp_f32_span's steps in its order, each rounded alone, in one pass with no
 * copy first. */
static void span_mul(const sdp_f32* p, int32_t channel, const float* in, float* dst,
                     const float* operand, int64_t hw) {
  const float s = p->scale != NULL ? p->scale[channel] : 1.0f;
  const float b = p->shift != NULL ? p->shift[channel] : 0.0f;
  if (p->scale != NULL && p->shift != NULL) {
    for (int64_t i = 0; i < hw; ++i) dst[i] = (in[i] * s + b) * operand[i];
  } else if (p->scale != NULL) {
    for (int64_t i = 0; i < hw; ++i) dst[i] = (in[i] * s) * operand[i];
  } else if (p->shift != NULL) {
    for (int64_t i = 0; i < hw; ++i) dst[i] = (in[i] + b) * operand[i];
  } else {
    for (int64_t i = 0; i < hw; ++i) dst[i] = in[i] * operand[i];
  }
}

static void run_item(void* ctx, int64_t item, int participant) {
  const run_job* J = ctx;
  (void)participant;
  const int64_t end = (item + 1) * J->per_item < J->planes ? (item + 1) * J->per_item : J->planes;
  const int x_units = sdp_f32_has_x(J->p);
  for (int64_t plane = item * J->per_item; plane < end; ++plane) {
    const int64_t offset = plane * J->hw;
    float* dst = J->out + offset;
    const float* in = J->in + offset;
    if (x_units) { /* the X units first, then the rest of the op in place */
      plane_x_units(J->p, (int32_t)(plane % J->c), offset, in, dst, J->hw);
      in = dst;
    }
    if (J->p->ew_per_channel) {
      plane_per_channel(J->p, (int32_t)(plane % J->c), in, dst, J->p->ew_operand[plane],
                        J->hw);
      continue;
    }
    const float* operand = J->p->ew_operand != NULL ? J->p->ew_operand + offset : NULL;
    if (sdp_f32_one_pass(J->p)) { /* reads the input once, no copy first */
      span_from(J->p, (int32_t)(plane % J->c), in, dst, operand, J->hw);
      continue;
    }
    if (!x_units && J->p->ew_op == ACCEL_EW_MUL && J->p->act == ACCEL_ACT_NONE) {
      span_mul(J->p, (int32_t)(plane % J->c), in, dst, operand, J->hw);
      continue;
    }
    if (dst != in) {
      for (int64_t i = 0; i < J->hw; ++i) dst[i] = in[i];
    }
    sdp_f32_span(J->p, (int32_t)(plane % J->c), dst, operand, J->hw);
  }
}

void sdp_f32_run(const sdp_f32* p, int32_t n, int32_t c, int64_t hw, const float* in, float* out,
                 int32_t num_threads) {
  const int64_t planes = (int64_t)n * c;
  if (hw == 1) {
    const int32_t per_item = (int32_t)(4096 / c + 1);
    const rows_job J = {.p = p, .n = n, .c = c, .per_item = per_item, .in = in, .out = out};
    pool_for(planes > 32768 ? num_threads : 1, (n + per_item - 1) / per_item, rows_item,
             (void*)&J);
    return;
  }
  const int64_t per_item = 4096 / (hw + 1) + 1;
  const run_job J = {.p = p, .c = c, .hw = hw, .planes = planes, .per_item = per_item, .in = in,
                     .out = out};
  pool_for(planes * hw > 32768 ? num_threads : 1, (planes + per_item - 1) / per_item, run_item,
           (void*)&J);
}

/* FP16 out (sdp_f16_run): chunks of at most F16_CHUNK values, each widened into buffers in
 * L1 (the input, unless it is fp32, and every whole operand), through sdp_f32_run with the
 * per-channel operands offset to the chunk's first channel, then narrowed once into the
 * output. */
enum { F16_CHUNK = 1024 };

typedef struct f16_job {
  const sdp_f32* p;
  const sdp_f16_whole* h;
  int32_t n, c;
  int64_t hw, per_item; /* per_item: chunks per pool_for item */
  int64_t planes_per_chunk, pieces_per_plane, chunks_per_image;
  sdp_f16_input in;
  uint16_t* out;
} f16_job;

static void f16_chunk(const f16_job* J, int64_t chunk) {
  const int64_t image = chunk / J->chunks_per_image, k = chunk % J->chunks_per_image;
  int64_t ch0, planes, from, count;
  if (J->pieces_per_plane > 1) { /* planes longer than a chunk: pieces of one plane */
    ch0 = k / J->pieces_per_plane, planes = 1;
    from = (k % J->pieces_per_plane) * F16_CHUNK;
    count = J->hw - from < F16_CHUNK ? J->hw - from : F16_CHUNK;
  } else { /* whole planes of one image */
    ch0 = k * J->planes_per_chunk, from = 0;
    planes = J->c - ch0 < J->planes_per_chunk ? J->c - ch0 : J->planes_per_chunk;
    count = planes * J->hw;
  }
  const int64_t at = (image * J->c + ch0) * J->hw + from;
  float x[F16_CHUNK], ew[F16_CHUNK], units[2][2][F16_CHUNK];
  sdp_f32 q = *J->p;
  q.scale = q.scale != NULL ? q.scale + ch0 : NULL;
  q.shift = q.shift != NULL ? q.shift + ch0 : NULL;
  q.prelu_slope = q.prelu_slope != NULL ? q.prelu_slope + ch0 : NULL;
  const float* src = x;
  if (J->in.halves != NULL) {
    half_to_float(J->in.halves + at, x, count);
  } else if (!J->in.one_channel) {
    src = J->in.wide + at;
  } else { /* every channel's plane (or piece) is the image's one */
    const float* plane = J->in.wide + image * J->hw + from;
    const int64_t length = planes == 1 ? count : J->hw;
    for (int64_t i = 0; i < planes; ++i) {
      memcpy(x + i * length, plane, (size_t)length * sizeof(float));
    }
  }
  if (J->h->ew != NULL) {
    half_to_float(J->h->ew + at, ew, count);
    q.ew_operand = ew;
  }
  for (int u = 0; u < 2; ++u) {
    for (int m = 0; m < 2; ++m) {
      const float** operand = m ? &q.x[u].mul : &q.x[u].alu;
      if (J->h->x[u][m] != NULL) { /* whole: the chunk's values */
        half_to_float(J->h->x[u][m] + at, units[u][m], count);
        *operand = units[u][m];
      } else if (*operand != NULL) { /* per channel, widened already */
        *operand += ch0;
      }
    }
  }
  sdp_f32_run(&q, 1, (int32_t)planes, planes == 1 ? count : J->hw, src, x, 1);
  float_to_half(x, J->out + at, count);
}

static void f16_item(void* ctx, int64_t item, int participant) {
  const f16_job* J = ctx;
  (void)participant;
  const int64_t chunks = (int64_t)J->n * J->chunks_per_image;
  const int64_t end = (item + 1) * J->per_item < chunks ? (item + 1) * J->per_item : chunks;
  for (int64_t chunk = item * J->per_item; chunk < end; ++chunk) f16_chunk(J, chunk);
}

void sdp_f16_run(const sdp_f32* p, const sdp_f16_whole* h, int32_t n, int32_t c, int64_t hw,
                 sdp_f16_input in, uint16_t* out, int32_t num_threads) {
  f16_job J = {.p = p, .h = h, .n = n, .c = c, .hw = hw, .in = in, .out = out};
  if (hw > F16_CHUNK) {
    J.pieces_per_plane = (hw + F16_CHUNK - 1) / F16_CHUNK;
    J.planes_per_chunk = 1;
    J.chunks_per_image = c * J.pieces_per_plane;
  } else {
    J.pieces_per_plane = 1;
    J.planes_per_chunk = F16_CHUNK / hw;
    J.chunks_per_image = (c + J.planes_per_chunk - 1) / J.planes_per_chunk;
  }
  const int64_t chunks = (int64_t)n * J.chunks_per_image;
  J.per_item = 8; /* 8 chunks (16 KiB of halves an operand) a pool_for item */
  pool_for((int64_t)n * c * hw > 32768 ? num_threads : 1, (chunks + J.per_item - 1) / J.per_item,
           f16_item, &J);
}

/* activation_exact over a whole tensor, in chunks of 4096 values (a post activation). */
typedef struct act_job {
  accel_activation act;
  float* x;
  int64_t count;
} act_job;

enum { ACT_CHUNK = 4096 };

static void act_item(void* ctx, int64_t item, int participant) {
  const act_job* J = ctx;
  (void)participant;
  const int64_t at = item * ACT_CHUNK;
  activation_exact(J->act, J->x + at, J->count - at < ACT_CHUNK ? J->count - at : ACT_CHUNK);
}

void activation_exact_run(accel_activation act, float* x, int64_t count, int32_t num_threads) {
  const act_job J = {act, x, count};
  pool_for(count > 32768 ? num_threads : 1, (count + ACT_CHUNK - 1) / ACT_CHUNK, act_item,
           (void*)&J);
}
