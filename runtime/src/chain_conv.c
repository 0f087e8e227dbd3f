/* chain_conv.c - validation of a CONV op: its fields, weights (packed, sparse, Winograd),
 * pixel formats and CBUF banks; the CBUF split it gets (accel_conv_banks) and its weight
 * packing (accel_conv_pack_weights). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

/* The geometry of a conv's weights (spatial fields zero until the input is known). */
static conv_geometry weight_geometry(const accel_conv_desc* d, int32_t in_c) {
  return (conv_geometry){
      .c = in_c, .k = d->out_c, .kernel_h = d->kernel_h, .kernel_w = d->kernel_w,
      .stride_h = d->stride_h, .stride_w = d->stride_w,
      .pad_top = d->pad_top, .pad_left = d->pad_left,
      .dilation_h = d->dilation_h, .dilation_w = d->dilation_w, .groups = d->groups};
}

int64_t weight_count(const conv_geometry* g) {
  return (int64_t)g->k * (g->c / g->groups) * g->kernel_h * g->kernel_w;
}

/* What accel_conv_pack_weights makes of a conv's weights (accel_conv_desc.weights_packed): the
 * Winograd pre-transform for FP32 and FP16 in WINOGRAD mode, otherwise INT8's kernel layout
 * (an INT8 conv in either mode runs the int8 kernel list, conv/i8_impls.c) or FP16's widened
 * weights. */
typedef enum packing {
  PACKING_NONE, PACKING_INT8, PACKING_FP16, PACKING_WINOGRAD,
  PACKING_C16,    /* FP32 direct 1x1 weights for the C16 kernel (conv_c16.c) */
  PACKING_C16_3X3 /* FP32 direct 3x3 weights for the C16 kernel (conv3x3_c16.c) */
} packing;

static packing packing_of(const accel_conv_desc* d, int32_t in_c) {
  if (d->precision == ACCEL_INT8) return PACKING_INT8;
  if (d->mode == ACCEL_CONV_WINOGRAD) return PACKING_WINOGRAD;
  if (d->precision == ACCEL_FP16) return PACKING_FP16;
  const conv_geometry g = weight_geometry(d, in_c);
  if (d->precision != ACCEL_FP32) return PACKING_NONE;
  return conv_c16_packs(&g) ? PACKING_C16 : conv_c16_3x3_packs(&g) ? PACKING_C16_3X3
                                                                    : PACKING_NONE;
}

static size_t packed_size(packing p, const conv_geometry* g) {
  return p == PACKING_INT8 ? conv_i8_packed_bytes(g)
         : p == PACKING_FP16 ? conv_f16_packed_bytes(g)
         : p == PACKING_C16  ? conv_c16_packed_bytes(g)
         : p == PACKING_C16_3X3 ? conv_c16_3x3_packed_bytes(g)
                             : conv_winograd_packed_bytes(g);
}

static int packed_matches(packing p, const accel_conv_desc* d, const conv_geometry* g,
                          const void* packed) {
  return p == PACKING_INT8   ? conv_i8_packed_matches(g, packed)
         : p == PACKING_FP16 ? conv_f16_packed_matches(g, packed)
         : p == PACKING_C16  ? conv_c16_packed_matches(g, packed)
         : p == PACKING_C16_3X3 ? conv_c16_3x3_packed_matches(g, packed)
                             : conv_winograd_packed_matches(g, d->precision == ACCEL_FP16, packed);
}

/* The conv mode, and Winograd's conditions (accel_conv_mode in accel.h), each named. */
static accel_status check_winograd(const accel_config* cfg, const accel_conv_desc* d,
                                   int32_t in_c, const char* where) {
  RANGE("mode", d->mode, ACCEL_CONV_DIRECT, ACCEL_CONV_MODE_COUNT - 1)
  if (d->mode != ACCEL_CONV_WINOGRAD) return ACCEL_OK;
  const char* why = NULL;
  char text[96];
  if (!(cfg->features & ACCEL_FEATURE_WINOGRAD)) {
    snprintf(text, sizeof text, "configuration %.32s has no Winograd mode", cfg->name);
    why = text;
  } else if (d->dilation_h != 1 || d->dilation_w != 1) {
    snprintf(text, sizeof text, "dilation %dx%d (Winograd needs 1x1)", d->dilation_h,
             d->dilation_w);
    why = text;
  } else if (d->pixel_format != ACCEL_PIXEL_NONE) {
    snprintf(text, sizeof text, "image-input mode (Winograd reads feature data)");
    why = text;
  } else if (d->weight_format == ACCEL_WEIGHTS_SPARSE) {
    /* NVDLA's compiler never combines them: the pre-transformed weights are dense. */
    snprintf(text, sizeof text, "weight_format = SPARSE (Winograd's weights are dense)");
    why = text;
  } else if (d->stride_h != d->stride_w) {
    snprintf(text, sizeof text, "stride %dx%d (Winograd folds equal strides only)", d->stride_h,
             d->stride_w);
    why = text;
  } else if (d->groups > 1 && in_c == d->groups) {
    /* Split per group, a depthwise conv is one-channel convolutions: the cost model would give
     * them Winograd's finer channel packing (atomic_c / 16), a gain NVDLA does not document. */
    snprintf(text, sizeof text, "one input channel per group (depthwise runs direct)");
    why = text;
  } else if (!winograd_kernel_fits(d->kernel_h, d->kernel_w, d->stride_h)) {
    snprintf(text, sizeof text, "kernel %dx%d at stride %d is not 3x3 after stride folding",
             d->kernel_h, d->kernel_w, d->stride_h);
    why = text;
  }
  if (why != NULL) {
    return accel_fail(ACCEL_ERR_UNSUPPORTED, "%s: mode = winograd: %s", where, why);
  }
  return ACCEL_OK;
}

/* The fields of a conv that do not depend on the input's size. */
static accel_status check_conv_fields(const accel_config* cfg, const accel_conv_desc* d,
                                      int32_t in_c, const char* where) {
  RANGE("out_c", d->out_c, 1, ACCEL_MAX_TENSOR_ELEMENTS)
  RANGE("kernel_h", d->kernel_h, 1, ACCEL_MAX_CONV_KERNEL)
  RANGE("kernel_w", d->kernel_w, 1, ACCEL_MAX_CONV_KERNEL)
  RANGE("stride_h", d->stride_h, 1, ACCEL_MAX_CONV_STRIDE)
  RANGE("stride_w", d->stride_w, 1, ACCEL_MAX_CONV_STRIDE)
  RANGE("dilation_h", d->dilation_h, 1, ACCEL_MAX_CONV_DILATION)
  RANGE("dilation_w", d->dilation_w, 1, ACCEL_MAX_CONV_DILATION)
  RANGE("pad_top", d->pad_top, 0, ACCEL_MAX_CONV_PAD)
  RANGE("pad_bottom", d->pad_bottom, 0, ACCEL_MAX_CONV_PAD)
  RANGE("pad_left", d->pad_left, 0, ACCEL_MAX_CONV_PAD)
  RANGE("pad_right", d->pad_right, 0, ACCEL_MAX_CONV_PAD)
  RANGE("groups", d->groups, 1, ACCEL_MAX_TENSOR_ELEMENTS)
  if (in_c % d->groups != 0 || d->out_c % d->groups != 0) {
    return accel_fail(ACCEL_ERR_SHAPE,
                      "%s: groups = %d must divide input channels %d and out_c %d", where,
                      d->groups, in_c, d->out_c);
  }
  accel_status st = check_precision(cfg, d->precision, where);
  if (st != ACCEL_OK) return st;
  st = check_winograd(cfg, d, in_c, where);
  if (st != ACCEL_OK) return st;
  if (d->precision == ACCEL_INT8) {
    RANGE("in_zero", d->in_zero, INT8_MIN, INT8_MAX)
  } else {
    RANGE("in_zero", d->in_zero, 0, 0)
    if (d->weights_packed != NULL && packing_of(d, in_c) == PACKING_NONE) {
      return accel_fail(ACCEL_ERR_INVALID,
                        "%s: weights_packed is for INT8 and FP16 weights, Winograd mode and "
                        "FP32 1x1 and 3x3 weights for C16 runs, not these direct %s ones", where,
                        precision_name(d->precision));
    }
  }
  /* out_c and C/groups are below 2^31 and the window below 2^10: no overflow in two steps. */
  const int64_t window = (int64_t)d->kernel_h * d->kernel_w;
  const int64_t per_kernel = (int64_t)(in_c / d->groups) * window;
  const int64_t weights_total = per_kernel > ACCEL_MAX_TENSOR_ELEMENTS / d->out_c
                                   ? (int64_t)ACCEL_MAX_TENSOR_ELEMENTS + 1
                                   : per_kernel * d->out_c;
  if (weights_total > ACCEL_MAX_TENSOR_ELEMENTS) {
    return accel_fail(ACCEL_ERR_INVALID, "%s: %lld weights exceed the limit of %d", where,
                      (long long)weights_total, ACCEL_MAX_TENSOR_ELEMENTS);
  }
  if (d->precision == ACCEL_INT8 && per_kernel > ACCEL_MAX_INT8_DEPTH) {
    return accel_fail(ACCEL_ERR_UNSUPPORTED,
                      "%s: INT8 depth C/groups x R x S = %lld exceeds %d (the int32 accumulator "
                      "could overflow)", where, (long long)per_kernel, ACCEL_MAX_INT8_DEPTH);
  }
  return ACCEL_OK;
}

/* Image-input mode: a pixel's bytes and channels per format, and the precisions it feeds. */
static accel_status check_pixel_format(const accel_config* cfg, const resolved_op* r,
                                       const char* where, int32_t* bytes, int32_t* channels) {
  const accel_conv_desc* d = &r->op->conv;
  static const char* const names[] = {"NONE", "R8", "A8B8G8R8", "A16B16G16R16_F"};
  *bytes = *channels = 0;
  if (d->pixel_format < ACCEL_PIXEL_NONE || d->pixel_format >= ACCEL_PIXEL_COUNT) {
    return accel_fail(ACCEL_ERR_INVALID, "%s: pixel_format = %d is not an accel_pixel_format",
                      where, (int)d->pixel_format);
  }
  if (d->pixel_format == ACCEL_PIXEL_NONE) return ACCEL_OK;
  const char* name = names[d->pixel_format];
  if (!(cfg->features & ACCEL_FEATURE_IMAGE_INPUT)) {
    return accel_fail(ACCEL_ERR_UNSUPPORTED, "%s: configuration %s has no image-input mode "
                      "(pixel_format %s)", where, cfg->name, name);
  }
  const int int8_format = d->pixel_format != ACCEL_PIXEL_A16B16G16R16_F;
  if (int8_format != (d->precision == ACCEL_INT8)) {
    return accel_fail(ACCEL_ERR_INVALID, "%s: pixel_format %s holds %s pixels, the conv is %s",
                      where, name, int8_format ? "INT8" : "FP16", precision_name(d->precision));
  }
  *channels = d->pixel_format == ACCEL_PIXEL_R8 ? 1 : 4;
  *bytes = d->pixel_format == ACCEL_PIXEL_R8 ? 1 : d->pixel_format == ACCEL_PIXEL_A8B8G8R8 ? 4 : 8;
  if (r->in_c > *channels) {
    return accel_fail(ACCEL_ERR_SHAPE, "%s: pixel_format %s holds %d channels, the input has %d",
                      where, name, *channels, r->in_c);
  }
  if (d->groups != 1 || d->dilation_h != 1 || d->dilation_w != 1 || d->multi_batch) {
    return accel_fail(ACCEL_ERR_UNSUPPORTED, "%s: image input (pixel_format %s) is direct "
                      "convolution only: groups %d, dilation %dx%d, multi_batch %d (must be 1, "
                      "1x1, 0)", where, name, d->groups, d->dilation_h, d->dilation_w,
                      d->multi_batch);
  }
  return ACCEL_OK;
}

/* Non-zero weights as the hardware sees them (a negative zero is zero). */
static int64_t count_nonzero(const void* weights, accel_precision p, int64_t count) {
  int64_t nonzero = 0;
  for (int64_t i = 0; i < count; ++i) {
    switch (p) {
      case ACCEL_INT8: nonzero += ((const int8_t*)weights)[i] != 0; break;
      case ACCEL_FP16: nonzero += (((const uint16_t*)weights)[i] & 0x7fff) != 0; break;
      case ACCEL_FP32: nonzero += ((const float*)weights)[i] != 0.0f; break;
      default: break;
    }
  }
  return nonzero;
}

/* The weight format and the CBUF split of a resolved conv (its geometry known). */
static accel_status check_conv_memory(const accel_config* cfg, resolved_op* r, const char* where,
                                      int need_data) {
  const accel_conv_desc* d = &r->op->conv;
  const int64_t count = weight_count(&r->conv);
  if (d->weight_format < ACCEL_WEIGHTS_DENSE || d->weight_format >= ACCEL_WEIGHT_FORMAT_COUNT) {
    return accel_fail(ACCEL_ERR_INVALID, "%s: weight_format = %d is not an accel_weight_format",
                      where, (int)d->weight_format);
  }
  if (d->weight_format == ACCEL_WEIGHTS_DENSE && d->weights_nonzero != 0) {
    return accel_fail(ACCEL_ERR_INVALID, "%s: weights_nonzero = %lld is for SPARSE weights, "
                      "these are DENSE (give 0)", where, (long long)d->weights_nonzero);
  }
  if (d->weight_format == ACCEL_WEIGHTS_SPARSE) {
    if (!(cfg->features & ACCEL_FEATURE_WEIGHT_COMPRESSION)) {
      return accel_fail(ACCEL_ERR_UNSUPPORTED, "%s: weight_format = SPARSE needs weight "
                        "compression, which configuration %s lacks", where, cfg->name);
    }
    if (d->weights_nonzero < 0 || d->weights_nonzero > count) {
      return accel_fail(ACCEL_ERR_INVALID, "%s: weights_nonzero = %lld is outside [0, %lld] "
                        "(the conv has %lld weights)", where, (long long)d->weights_nonzero,
                        (long long)count, (long long)count);
    }
    if (need_data) {
      const int64_t nonzero = count_nonzero(d->weights, d->precision, count);
      if (nonzero != d->weights_nonzero) {
        return accel_fail(ACCEL_ERR_INVALID, "%s: weights_nonzero = %lld, the weights hold "
                          "%lld non-zero values", where, (long long)d->weights_nonzero,
                          (long long)nonzero);
      }
    }
  }
  conv_banks need;
  conv_bank_needs(cfg, &r->conv, d, &need);
  /* Both 0: the compiler's split (conv_bank_policy), held to the same limits as a given one,
   * so that the split accel_conv_banks returns, which a code generator then writes into the
   * descriptor, is one that runs. */
  const int policy = d->data_banks == 0 && d->weight_banks == 0;
  int32_t data = d->data_banks, weights = d->weight_banks;
  if (policy) conv_bank_policy(&need, cfg->cbuf_banks, &data, &weights);
  const char* split = policy ? " (the compiler's split)" : "";
  if (data < 1 || weights < 1 || (int64_t)data + weights + need.reserved > cfg->cbuf_banks) {
    if (policy) {
      return accel_fail(ACCEL_ERR_UNSUPPORTED,
                        "%s: the %d CBUF banks%s hold no split of input data and weights, one "
                        "bank each at least", where, cfg->cbuf_banks,
                        need.reserved ? " (one of them the sparse weights' mask)" : "");
    }
    return accel_fail(ACCEL_ERR_INVALID,
                      "%s: data_banks = %d + weight_banks = %d%s must be >= 1 each and fit the "
                      "%d CBUF banks (or both 0: the compiler's split)", where, d->data_banks,
                      d->weight_banks, need.reserved ? " + 1 mask bank" : "", cfg->cbuf_banks);
  }
  int32_t data_min = 0, weight_min = 0;
  conv_bank_minimum(&need, cfg->cbuf_banks, &data_min, &weight_min);
  if (weights < weight_min) {
    return accel_fail(ACCEL_ERR_UNSUPPORTED,
                      "%s: weight_banks = %d%s cannot hold one kernel group (%d banks of %lld "
                      "bytes)", where, weights, split, weight_min, (long long)need.bank_bytes);
  }
  if (data < data_min) {
    return accel_fail(ACCEL_ERR_UNSUPPORTED,
                      "%s: data_banks = %d%s cannot hold the input rows of one output row (%d "
                      "banks of %lld bytes)", where, data, split, data_min,
                      (long long)need.bank_bytes);
  }
  r->data_banks = data;
  r->weight_banks = weights;
  return ACCEL_OK;
}

accel_status resolve_conv(const accel_config* cfg, resolved_op* r, const char* where,
                          int need_data) {
  const accel_conv_desc* d = &r->op->conv;
  accel_status st = check_conv_fields(cfg, d, r->in_c, where);
  if (st != ACCEL_OK) return st;
  int32_t pixel_bytes = 0, pixel_channels = 0;
  st = check_pixel_format(cfg, r, where, &pixel_bytes, &pixel_channels);
  if (st != ACCEL_OK) return st;
  RANGE("multi_batch", d->multi_batch, 0, 1)
  if (d->multi_batch) {
    if (!(cfg->features & ACCEL_FEATURE_BATCH)) {
      return accel_fail(ACCEL_ERR_UNSUPPORTED, "%s: configuration %s has no multi-batch mode",
                        where, cfg->name);
    }
    if (d->kernel_h != 1 || d->kernel_w != 1 || r->in_h != 1 || r->in_w != 1) {
      return accel_fail(ACCEL_ERR_UNSUPPORTED,
                        "%s: multi_batch is for fully connected layers (a 1x1 kernel on a 1x1 "
                        "input), not a %dx%d kernel on %dx%d", where, d->kernel_h, d->kernel_w,
                        r->in_h, r->in_w);
    }
  }
  const int64_t reach_h = (int64_t)d->dilation_h * (d->kernel_h - 1) + 1;
  const int64_t reach_w = (int64_t)d->dilation_w * (d->kernel_w - 1) + 1;
  const int64_t padded_h = (int64_t)r->in_h + d->pad_top + d->pad_bottom;
  const int64_t padded_w = (int64_t)r->in_w + d->pad_left + d->pad_right;
  if (reach_h > padded_h || reach_w > padded_w) {
    return accel_fail(ACCEL_ERR_SHAPE,
                      "%s: the dilated %lldx%lld kernel is larger than the padded %lldx%lld input",
                      where, (long long)reach_h, (long long)reach_w, (long long)padded_h,
                      (long long)padded_w);
  }
  if (need_data) {
    st = check_buffer(d->weights, d->precision, where, ": weights");
    if (st != ACCEL_OK) return st;
  }
  r->out_n = r->in_n;
  r->out_c = d->out_c;
  r->out_h = (int32_t)((padded_h - reach_h) / d->stride_h + 1);
  r->out_w = (int32_t)((padded_w - reach_w) / d->stride_w + 1);
  r->conv = weight_geometry(d, r->in_c);
  r->conv.n = r->in_n, r->conv.h = r->in_h, r->conv.w = r->in_w;
  r->conv.out_h = r->out_h, r->conv.out_w = r->out_w;
  r->conv.pixel_bytes = pixel_bytes, r->conv.pixel_channels = pixel_channels;
  r->conv.multi_batch = d->multi_batch;
  st = check_conv_memory(cfg, r, where, need_data);
  if (st != ACCEL_OK) return st;
  if (d->weights_packed == NULL) {
    if (d->weights_packed_bytes != 0) {
      return accel_fail(ACCEL_ERR_INVALID, "%s: weights_packed_bytes = %zu without weights_packed",
                        where, d->weights_packed_bytes);
    }
    return ACCEL_OK;
  }
  /* The header is read only once the buffer is known to hold the whole packing. */
  const packing kind = packing_of(d, r->in_c);
  const size_t needed = packed_size(kind, &r->conv);
  if (d->weights_packed_bytes < needed) {
    return accel_fail(ACCEL_ERR_INVALID,
                      "%s: weights_packed_bytes = %zu, this %dx%dx%dx%d conv's packing needs %zu",
                      where, d->weights_packed_bytes, d->out_c, r->in_c / d->groups,
                      d->kernel_h, d->kernel_w, needed);
  }
  if ((uintptr_t)d->weights_packed % ACCEL_PACKED_ALIGNMENT != 0) {
    return accel_fail(ACCEL_ERR_ALIGNMENT, "%s: weights_packed = %p is not %d-byte aligned",
                      where, d->weights_packed, ACCEL_PACKED_ALIGNMENT);
  }
  if (!packed_matches(kind, d, &r->conv, d->weights_packed)) {
    return accel_fail(ACCEL_ERR_INVALID,
                      "%s: weights_packed %p was not packed for this %dx%dx%dx%d conv (groups %d)",
                      where, d->weights_packed, d->out_c, r->in_c / d->groups, d->kernel_h,
                      d->kernel_w, d->groups);
  }
  return ACCEL_OK;
}

accel_status accel_conv_pack_weights(const accel_config* cfg, const accel_conv_desc* conv,
                              int32_t in_c, void* packed, size_t* packed_bytes) {
  accel_status st = accel_config_validate(cfg);
  if (st != ACCEL_OK) return st;
  if (conv == NULL || packed_bytes == NULL) {
    return accel_fail(ACCEL_ERR_NULL, "conv or packed_bytes is NULL");
  }
  const char* where = "accel_conv_pack_weights";
  RANGE("in_c", in_c, 1, ACCEL_MAX_TENSOR_ELEMENTS)
  const packing kind = packing_of(conv, in_c);
  if (kind == PACKING_NONE) {
    return accel_fail(ACCEL_ERR_INVALID, "%s: precision %s in direct mode: only INT8 and FP16 "
                      "weights, Winograd mode's and FP32 1x1 and 3x3 weights for C16 runs (1x1: "
                      "stride 1, no padding; 3x3: stride 1 or 2; one group, no dilation, "
                      "multiples of 16 channels) are packed", where,
                      precision_name(conv->precision));
  }
  st = check_conv_fields(cfg, conv, in_c, where);
  if (st != ACCEL_OK) return st;
  const conv_geometry g = weight_geometry(conv, in_c);
  const size_t needed = packed_size(kind, &g);
  if (packed == NULL) {
    *packed_bytes = needed;
    return ACCEL_OK;
  }
  if (*packed_bytes < needed) {
    return accel_fail(ACCEL_ERR_INVALID, "%s: packed_bytes = %zu, %zu are needed", where,
                      *packed_bytes, needed);
  }
  if ((uintptr_t)packed % ACCEL_PACKED_ALIGNMENT != 0) {
    return accel_fail(ACCEL_ERR_ALIGNMENT, "%s: packed = %p is not %d-byte aligned", where,
                      packed, ACCEL_PACKED_ALIGNMENT);
  }
  st = check_buffer(conv->weights, conv->precision, "accel_conv_pack_weights", ": weights");
  if (st != ACCEL_OK) return st;
  if (ranges_overlap(packed, (int64_t)needed, conv->weights,
                     weight_count(&g) * element_bytes(conv->precision))) {
    return accel_fail(ACCEL_ERR_INVALID, "%s: packed %p overlaps the weights %p", where, packed,
                      conv->weights);
  }
  if (kind == PACKING_INT8) {
    conv_i8_pack(&g, conv->weights, packed);
  } else if (kind == PACKING_FP16) {
    conv_f16_pack(&g, conv->weights, packed);
  } else if (kind == PACKING_C16) {
    conv_c16_pack(&g, conv->weights, packed);
  } else if (kind == PACKING_C16_3X3) {
    conv_c16_3x3_pack(&g, conv->weights, packed);
  } else {
    conv_winograd_pack(&g, conv->weights, conv->precision == ACCEL_FP16, packed);
  }
  *packed_bytes = needed;
  return ACCEL_OK;
}

/* The INT8 converters of an SDP (the float fields must be unused). */

accel_status accel_conv_banks(const accel_config* cfg, const accel_conv_desc* conv,
                              const accel_tensor* input, int32_t* data_banks,
                              int32_t* weight_banks) {
  accel_status st = accel_config_validate(cfg);
  if (st != ACCEL_OK) return st;
  if (conv == NULL || input == NULL || data_banks == NULL || weight_banks == NULL) {
    return accel_fail(ACCEL_ERR_NULL, "accel_conv_banks: conv, input, data_banks or "
                      "weight_banks is NULL");
  }
  accel_op op;
  memset(&op, 0, sizeof op);
  op.engine = ACCEL_ENGINE_CONV;
  op.conv = *conv;
  op.conv.data_banks = op.conv.weight_banks = 0;
  op.conv.weights_packed = NULL;
  op.conv.weights_packed_bytes = 0;
  accel_tensor shape = *input;
  shape.data = NULL;
  shape.precision = conv->precision;
  shape.layout = ACCEL_LAYOUT_NCHW; /* the banks do not depend on it */
  resolved_chain chain;
  memset(&chain, 0, sizeof chain);
  chain.num_ops = 1;
  chain.mode = ACCEL_MODE_INDEPENDENT;
  resolved_op* r = &chain.ops[0];
  r->op = &op;
  r->in_n = shape.n, r->in_c = shape.c, r->in_h = shape.h, r->in_w = shape.w;
  st = check_tensor(cfg, &shape, "input", 0);
  if (st != ACCEL_OK) return st;
  st = resolve_conv(cfg, r, "accel_conv_banks", 0);
  if (st != ACCEL_OK) return st;
  *data_banks = r->data_banks;
  *weight_banks = r->weight_banks;
  return ACCEL_OK;
}
