/* chain.c - validation of a chain of engine ops and inference of the shapes it produces.
 *
 * Every field of every descriptor is checked here, before any kernel runs, and a failure names
 * the op, the field and its value. Kernels trust what passes.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

static accel_status check_sdp_int8(const accel_sdp_desc* d, int32_t channels, const char* where,
                                   int need_data) {
  if (d->scale != NULL || d->shift != NULL || d->prelu_slope != NULL) {
    return accel_fail(ACCEL_ERR_INVALID,
                      "%s: scale, shift and prelu_slope are float parameters; INT8 uses bias, "
                      "mul, rshift and prelu_mul", where);
  }
  if (lut_activation(d->act) && d->lut == NULL) {
    return accel_fail(ACCEL_ERR_NULL, "%s: act = %s needs its INT8 tables (lut)", where,
                      activation_name(d->act));
  }
  if (!lut_activation(d->act) && d->lut != NULL) {
    return accel_fail(ACCEL_ERR_INVALID, "%s: lut is set but act = %s is not a lookup-table "
                      "activation", where, activation_name(d->act));
  }
  RANGE("in_zero", d->in_zero, INT8_MIN, INT8_MAX)
  RANGE("ew_zero", d->ew_zero, INT8_MIN, INT8_MAX)
  RANGE("out_zero", d->out_zero, INT8_MIN, INT8_MAX)
  RANGE("ew_mul", d->ew_mul, INT16_MIN, INT16_MAX)
  RANGE("out_mul", d->out_mul, INT16_MIN, INT16_MAX)
  RANGE("ew_shift", d->ew_shift, 0, ACCEL_MAX_SHIFT)
  RANGE("out_shift", d->out_shift, 0, ACCEL_MAX_SHIFT)
  RANGE("prelu_shift", d->prelu_shift, 0, ACCEL_MAX_SHIFT)
  if (d->act == ACCEL_ACT_CLIP) {
    RANGE("clip_lo", d->clip_lo, INT8_MIN, INT8_MAX)
    RANGE("clip_hi", d->clip_hi, d->clip_lo, INT8_MAX)
  }
  if (need_data && d->lut != NULL) {
    accel_status st = check_array(d->lut, 4, "int32", "sdp", " lut");
    if (st != ACCEL_OK) return st;
    const accel_lut_int8* l = d->lut;
    RANGE("lut lo_index_select", l->lo_index_select, 0, 31)
    RANGE("lut le_index_select", l->le_index_select, 0, 31)
    RANGE("lut underflow_scale", l->underflow_scale, INT16_MIN, INT16_MAX)
    RANGE("lut overflow_scale", l->overflow_scale, INT16_MIN, INT16_MAX)
    RANGE("lut underflow_shift", l->underflow_shift, 0, ACCEL_MAX_SHIFT)
    RANGE("lut overflow_shift", l->overflow_shift, 0, ACCEL_MAX_SHIFT)
  }
  if (need_data && d->rshift != NULL) {
    for (int32_t c = 0; c < channels; ++c) {
      if (d->rshift[c] > ACCEL_MAX_SHIFT) {
        return accel_fail(ACCEL_ERR_INVALID, "%s: rshift[%d] = %d is outside [0, %d]", where, c,
                          d->rshift[c], ACCEL_MAX_SHIFT);
      }
    }
  }
  return ACCEL_OK;
}

/* Outside INT8 the converter fields must be absent, so nothing is silently ignored. */
static accel_status check_sdp_no_int8(const accel_sdp_desc* d, const char* where) {
  if (d->bias != NULL || d->mul != NULL || d->rshift != NULL || d->prelu_mul != NULL ||
      d->in_zero != 0 || d->ew_zero != 0 || d->ew_mul != 0 || d->ew_shift != 0 ||
      d->prelu_shift != 0 || d->out_mul != 0 || d->out_shift != 0 || d->out_zero != 0 ||
      d->clip_lo != 0 || d->clip_hi != 0 || d->lut != NULL) {
    return accel_fail(ACCEL_ERR_INVALID,
                      "%s: INT8 converter fields (bias, mul, rshift, zero points, lut, ...) are set "
                      "in precision %s", where, precision_name(d->precision));
  }
  return ACCEL_OK;
}

/* A converting SDP (convert = 1): INT8 <-> FP16, nothing else set. */
static accel_status check_sdp_convert(const accel_config* cfg, const accel_sdp_desc* d,
                                      const char* where) {
  if (d->convert == 0) {
    return accel_fail(ACCEL_ERR_INVALID, "%s: cvt_scale and cvt_zero are for a converting SDP "
                      "(convert = 1)", where);
  }
  if (d->convert != 1) {
    return accel_fail(ACCEL_ERR_INVALID, "%s: convert = %d must be 0 or 1", where, d->convert);
  }
  if (d->precision != ACCEL_INT8 && d->precision != ACCEL_FP16) {
    return accel_fail(ACCEL_ERR_INVALID, "%s: convert is INT8 <-> FP16; the SDP's precision is "
                      "%s", where, precision_name(d->precision));
  }
  const accel_precision to = d->precision == ACCEL_INT8 ? ACCEL_FP16 : ACCEL_INT8;
  accel_status st = check_precision(cfg, to, where);
  if (st != ACCEL_OK) return st;
  if (d->scale != NULL || d->shift != NULL || d->ew_op != ACCEL_EW_NONE ||
      d->act != ACCEL_ACT_NONE || d->prelu_slope != NULL || d->bias != NULL || d->mul != NULL ||
      d->rshift != NULL || d->prelu_mul != NULL || d->lut != NULL || d->in_zero != 0 ||
      d->ew_zero != 0 || d->ew_mul != 0 || d->ew_shift != 0 || d->prelu_shift != 0 ||
      d->out_mul != 0 || d->out_shift != 0 || d->out_zero != 0 || d->clip_lo != 0 ||
      d->clip_hi != 0 || d->ew_per_channel != 0 || sdp_desc_has_x(d) ||
      d->x1.alu_per_channel != 0 || d->x1.mul_per_channel != 0 || d->x2.alu_per_channel != 0 ||
      d->x2.mul_per_channel != 0) {
    return accel_fail(ACCEL_ERR_INVALID, "%s: a converting SDP (convert = 1) sets only "
                      "cvt_scale and cvt_zero", where);
  }
  if (!(d->cvt_scale > 0.0f) || isinf(d->cvt_scale)) {
    return accel_fail(ACCEL_ERR_INVALID, "%s: cvt_scale = %g must be positive and finite", where,
                      (double)d->cvt_scale);
  }
  RANGE("cvt_zero", d->cvt_zero, INT8_MIN, INT8_MAX)
  return ACCEL_OK;
}

static accel_status resolve_sdp(const accel_config* cfg, resolved_op* r, const char* where,
                                int need_data) {
  const accel_sdp_desc* d = &r->op->sdp;
  accel_status st = check_precision(cfg, d->precision, where);
  if (st != ACCEL_OK) return st;
  if (d->convert != 0 || d->cvt_scale != 0.0f || d->cvt_zero != 0) {
    st = check_sdp_convert(cfg, d, where);
    if (st != ACCEL_OK) return st;
    r->out_n = r->in_n, r->out_c = r->in_c, r->out_h = r->in_h, r->out_w = r->in_w;
    return ACCEL_OK;
  }
  RANGE("ew_op", d->ew_op, ACCEL_EW_NONE, ACCEL_EW_COUNT - 1)
  RANGE("act", d->act, ACCEL_ACT_NONE, ACCEL_ACT_COUNT - 1)
  if (d->ew_op != ACCEL_EW_NONE && !(cfg->features & ACCEL_FEATURE_ELEMENTWISE)) {
    return accel_fail(ACCEL_ERR_UNSUPPORTED,
                      "%s: element-wise ops need the SDP element-wise unit, which %s lacks",
                      where, cfg->name);
  }
  const int int8 = d->precision == ACCEL_INT8;
  st = int8 ? check_sdp_int8(d, r->in_c, where, need_data) : check_sdp_no_int8(d, where);
  if (st != ACCEL_OK) return st;
  if (lut_activation(d->act) && !(cfg->features & ACCEL_FEATURE_LUT)) {
    return accel_fail(ACCEL_ERR_UNSUPPORTED,
                      "%s: act = %s needs the SDP lookup table, which %s lacks", where,
                      activation_name(d->act), cfg->name);
  }
  if (!int8 && d->act == ACCEL_ACT_CLIP && !(d->clip_min <= d->clip_max)) {
    return accel_fail(ACCEL_ERR_INVALID, "%s: clip_min = %g must not exceed clip_max = %g",
                      where, (double)d->clip_min, (double)d->clip_max);
  }
  RANGE("ew_per_channel", d->ew_per_channel, 0, 1)
  if (d->ew_per_channel && d->ew_op == ACCEL_EW_NONE) {
    return accel_fail(ACCEL_ERR_INVALID, "%s: ew_per_channel = 1 needs an ew_op", where);
  }
  RANGE("x1.alu_per_channel", d->x1.alu_per_channel, 0, 1)
  RANGE("x1.mul_per_channel", d->x1.mul_per_channel, 0, 1)
  RANGE("x2.alu_per_channel", d->x2.alu_per_channel, 0, 1)
  RANGE("x2.mul_per_channel", d->x2.mul_per_channel, 0, 1)
  const accel_sdp_x* units[2] = {&d->x1, &d->x2};
  for (int u = 0; u < 2; ++u) {
    const char* unit = u == 0 ? "x1" : "x2";
    if (units[u]->alu == NULL && units[u]->mul == NULL) {
      if (units[u]->alu_per_channel || units[u]->mul_per_channel) {
        return accel_fail(ACCEL_ERR_INVALID, "%s: %s.*_per_channel is set without its operand",
                          where, unit);
      }
      continue;
    }
    if (int8) {
      return accel_fail(ACCEL_ERR_UNSUPPORTED, "%s: %s's operands (the X units read from "
                        "memory) run in FP32 and FP16 only, not INT8", where, unit);
    }
    if (!(cfg->features & ACCEL_FEATURE_ELEMENTWISE)) {
      return accel_fail(ACCEL_ERR_UNSUPPORTED, "%s: %s's operands need the SDP's operand read "
                        "DMA (the element-wise feature), which %s lacks", where, unit, cfg->name);
    }
  }
  if (need_data) {
    const int64_t eb = element_bytes(d->precision);
    const char* type = precision_name(d->precision);
    const struct { const void* ptr; const char* name; int needed; int64_t bytes; const char* type; }
        params[] = {
            {d->scale, ": scale", 0, eb, type}, {d->shift, ": shift", 0, eb, type},
            {d->ew_operand, ": ew_operand", d->ew_op != ACCEL_EW_NONE, eb, type},
            {d->prelu_slope, ": prelu_slope", !int8 && d->act == ACCEL_ACT_PRELU, eb, type},
            {d->bias, ": bias", 0, 4, "int32"}, {d->mul, ": mul", 0, 2, "int16"},
            {d->prelu_mul, ": prelu_mul", int8 && d->act == ACCEL_ACT_PRELU, 2, "int16"},
            {d->x1.alu, ": x1.alu", 0, eb, type}, {d->x1.mul, ": x1.mul", 0, eb, type},
            {d->x2.alu, ": x2.alu", 0, eb, type}, {d->x2.mul, ": x2.mul", 0, eb, type}};
    for (size_t i = 0; i < sizeof params / sizeof params[0]; ++i) {
      if (params[i].ptr == NULL && !params[i].needed) continue;
      st = check_array(params[i].ptr, params[i].bytes, params[i].type, where, params[i].name);
      if (st != ACCEL_OK) return st;
    }
  }
  r->out_n = r->in_n;
  r->out_c = r->in_c;
  r->out_h = r->in_h;
  r->out_w = r->in_w;
  return ACCEL_OK;
}

static accel_status resolve_pdp(const accel_config* cfg, resolved_op* r, const char* where) {
  const accel_pdp_desc* d = &r->op->pdp;
  accel_status st = check_precision(cfg, d->precision, where);
  if (st != ACCEL_OK) return st;
  RANGE("pool", d->pool, ACCEL_POOL_MAX, ACCEL_POOL_COUNT - 1)
  if (d->kernel_h > ACCEL_MAX_POOL_KERNEL || d->kernel_w > ACCEL_MAX_POOL_KERNEL) {
    return accel_fail(ACCEL_ERR_UNSUPPORTED,
                      "%s: pooling kernel %dx%d exceeds the PDP limit of %d per side", where,
                      d->kernel_h, d->kernel_w, ACCEL_MAX_POOL_KERNEL);
  }
  RANGE("kernel_h", d->kernel_h, 1, ACCEL_MAX_POOL_KERNEL)
  RANGE("kernel_w", d->kernel_w, 1, ACCEL_MAX_POOL_KERNEL)
  RANGE("stride_h", d->stride_h, 1, ACCEL_MAX_POOL_STRIDE)
  RANGE("stride_w", d->stride_w, 1, ACCEL_MAX_POOL_STRIDE)
  RANGE("pad_top", d->pad_top, 0, d->kernel_h - 1)
  RANGE("pad_bottom", d->pad_bottom, 0, d->kernel_h - 1)
  RANGE("pad_left", d->pad_left, 0, d->kernel_w - 1)
  RANGE("pad_right", d->pad_right, 0, d->kernel_w - 1)
  RANGE("count_include_pad", d->count_include_pad, 0, 1)
  if (d->precision == ACCEL_INT8) {
    RANGE("zero", d->zero, INT8_MIN, INT8_MAX)
    if (d->pool == ACCEL_POOL_AVG && !d->count_include_pad &&
        (d->pad_top | d->pad_bottom | d->pad_left | d->pad_right) != 0) {
      return accel_fail(ACCEL_ERR_UNSUPPORTED,
                        "%s: an INT8 average over the in-image elements only "
                        "(count_include_pad = 0 with padding %d,%d,%d,%d): NVDLA's PDP divides "
                        "by the whole window", where, d->pad_top, d->pad_bottom, d->pad_left,
                        d->pad_right);
    }
  } else {
    RANGE("zero", d->zero, 0, 0)
  }
  const int64_t padded_h = (int64_t)r->in_h + d->pad_top + d->pad_bottom;
  const int64_t padded_w = (int64_t)r->in_w + d->pad_left + d->pad_right;
  if (d->kernel_h > padded_h || d->kernel_w > padded_w) {
    return accel_fail(ACCEL_ERR_SHAPE,
                      "%s: the %dx%d pooling window is larger than the padded %lldx%lld input",
                      where, d->kernel_h, d->kernel_w, (long long)padded_h, (long long)padded_w);
  }
  r->out_n = r->in_n;
  r->out_c = r->in_c;
  r->out_h = (int32_t)((padded_h - d->kernel_h) / d->stride_h + 1);
  r->out_w = (int32_t)((padded_w - d->kernel_w) / d->stride_w + 1);
  /* A window that starts inside the bottom/right padding would hold no image element. */
  if ((int64_t)(r->out_h - 1) * d->stride_h - d->pad_top >= r->in_h ||
      (int64_t)(r->out_w - 1) * d->stride_w - d->pad_left >= r->in_w) {
    return accel_fail(ACCEL_ERR_SHAPE, "%s: the last pooling window lies entirely in the padding",
                      where);
  }
  r->pdp = (pdp_geometry){
      .n = r->in_n, .c = r->in_c, .h = r->in_h, .w = r->in_w,
      .out_h = r->out_h, .out_w = r->out_w,
      .kernel_h = d->kernel_h, .kernel_w = d->kernel_w,
      .stride_h = d->stride_h, .stride_w = d->stride_w,
      .pad_top = d->pad_top, .pad_left = d->pad_left,
      .pool = d->pool, .count_include_pad = d->count_include_pad};
  return ACCEL_OK;
}
static accel_status resolve_cdp(const accel_config* cfg, resolved_op* r, const char* where) {
  const accel_cdp_desc* d = &r->op->cdp;
  accel_status st = check_engine(cfg, ACCEL_FEATURE_CDP, "CDP", where);
  if (st == ACCEL_OK) st = check_precision(cfg, d->precision, where);
  if (st != ACCEL_OK) return st;
  RANGE("local_size", d->local_size, 1, ACCEL_MAX_TENSOR_ELEMENTS)
  if (d->local_size % 2 == 0 || d->local_size < 3 || d->local_size > ACCEL_MAX_CDP_LOCAL_SIZE) {
    return accel_fail(ACCEL_ERR_UNSUPPORTED, "%s: local_size = %d: NVDLA's CDP normalises over "
                      "3, 5, 7 or 9 channels", where, d->local_size);
  }
  if (d->precision == ACCEL_INT8) {
    const accel_cdp_int8* p = d->int8;
    if (p == NULL) {
      return accel_fail(ACCEL_ERR_INVALID, "%s: an INT8 CDP needs its tables (int8 is NULL)",
                        where);
    }
    RANGE("int8.le_index_select", p->le_index_select, -32, 31)
    RANGE("int8.lo_index_select", p->lo_index_select, -32, 31)
    RANGE("int8.le_index_offset", p->le_index_offset, -128, 127)
    RANGE("int8.le_exponent", p->le_exponent, 0, 1)
    RANGE("int8.le_uflow_scale", p->le_uflow_scale, INT16_MIN, INT16_MAX)
    RANGE("int8.le_oflow_scale", p->le_oflow_scale, INT16_MIN, INT16_MAX)
    RANGE("int8.lo_uflow_scale", p->lo_uflow_scale, INT16_MIN, INT16_MAX)
    RANGE("int8.lo_oflow_scale", p->lo_oflow_scale, INT16_MIN, INT16_MAX)
    RANGE("int8.le_uflow_shift", p->le_uflow_shift, 0, 31)
    RANGE("int8.le_oflow_shift", p->le_oflow_shift, 0, 31)
    RANGE("int8.lo_uflow_shift", p->lo_uflow_shift, 0, 31)
    RANGE("int8.lo_oflow_shift", p->lo_oflow_shift, 0, 31)
    RANGE("int8.uflow_priority", p->uflow_priority, 0, 1)
    RANGE("int8.oflow_priority", p->oflow_priority, 0, 1)
    RANGE("int8.hybrid_priority", p->hybrid_priority, 0, 1)
    RANGE("int8.datin_offset", p->datin_offset, -128, 127)
    RANGE("int8.datin_scale", p->datin_scale, INT16_MIN, INT16_MAX)
    RANGE("int8.datin_shift", p->datin_shift, 0, 31)
    RANGE("int8.datout_offset", p->datout_offset, -(1 << 24), (1 << 24) - 1)
    RANGE("int8.datout_scale", p->datout_scale, INT16_MIN, INT16_MAX)
    RANGE("int8.datout_shift", p->datout_shift, 0, 63)
    RANGE("int8.sqsum_bypass", p->sqsum_bypass, 0, 1)
    RANGE("int8.mul_bypass", p->mul_bypass, 0, 1)
    const int64_t limit = (int64_t)1 << 37;
    if (p->le_start < -limit || p->le_start >= limit || p->le_end < -limit ||
        p->le_end >= limit || p->lo_start < -limit || p->lo_start >= limit ||
        p->lo_end < -limit || p->lo_end >= limit) {
      return accel_fail(ACCEL_ERR_INVALID, "%s: int8 table starts and ends must be 38-bit "
                        "signed values", where);
    }
    r->out_n = r->in_n, r->out_c = r->in_c, r->out_h = r->in_h, r->out_w = r->in_w;
    r->cdp = (cdp_geometry){.n = r->in_n, .c = r->in_c, .h = r->in_h, .w = r->in_w,
                            .local_size = d->local_size};
    return ACCEL_OK;
  }
  /* A positive base keeps the power defined for every beta. */
  if (!(isfinite(d->alpha) && d->alpha >= 0.0f)) {
    return accel_fail(ACCEL_ERR_INVALID, "%s: alpha = %g must be finite and >= 0", where,
                      (double)d->alpha);
  }
  if (!isfinite(d->beta)) {
    return accel_fail(ACCEL_ERR_INVALID, "%s: beta = %g must be finite", where, (double)d->beta);
  }
  if (!(isfinite(d->k) && d->k > 0.0f)) {
    return accel_fail(ACCEL_ERR_INVALID, "%s: k = %g must be finite and > 0", where,
                      (double)d->k);
  }
  r->out_n = r->in_n, r->out_c = r->in_c, r->out_h = r->in_h, r->out_w = r->in_w;
  r->cdp = (cdp_geometry){.n = r->in_n, .c = r->in_c, .h = r->in_h, .w = r->in_w,
                          .local_size = d->local_size, .alpha = d->alpha, .beta = d->beta,
                          .k = d->k};
  return ACCEL_OK;
}

/* BDMA: the copied channel ranges must lie inside both surfaces and write no channel twice;
 * the output is (n, dst_channels, h, w). Last channels in int64: each of three int32 products
 * and sums stays below 2^63. */
static accel_status resolve_bdma(const accel_config* cfg, resolved_op* r, const char* where) {
  const accel_bdma_desc* d = &r->op->bdma;
  accel_status st = check_engine(cfg, ACCEL_FEATURE_BDMA, "BDMA", where);
  if (st == ACCEL_OK) st = check_precision(cfg, d->precision, where);
  if (st != ACCEL_OK) return st;
  RANGE("src_offset", d->src_offset, 0, INT32_MAX)
  RANGE("src_stride", d->src_stride, 1, INT32_MAX)
  RANGE("channels", d->channels, 1, INT32_MAX)
  RANGE("dst_offset", d->dst_offset, 0, INT32_MAX)
  RANGE("dst_stride", d->dst_stride, 1, INT32_MAX)
  RANGE("dst_channels", d->dst_channels, 1, INT32_MAX)
  RANGE("repeat", d->repeat, 0, INT32_MAX)
  RANGE("src_repeat_stride", d->src_repeat_stride, 0, INT32_MAX)
  RANGE("dst_repeat_stride", d->dst_repeat_stride, 0, INT32_MAX)
  const int64_t src_last = (int64_t)d->src_offset + (int64_t)d->repeat * d->src_repeat_stride +
                           (int64_t)(d->channels - 1) * d->src_stride;
  if (src_last >= r->in_c) {
    return accel_fail(ACCEL_ERR_SHAPE,
                      "%s: src_offset = %d + repeat = %d x src_repeat_stride = %d + (channels = "
                      "%d - 1) x src_stride = %d reads channel %lld, the input has %d channels",
                      where, d->src_offset, d->repeat, d->src_repeat_stride, d->channels,
                      d->src_stride, (long long)src_last, r->in_c);
  }
  const int64_t dst_span = (int64_t)(d->channels - 1) * d->dst_stride;
  const int64_t dst_last =
      (int64_t)d->dst_offset + (int64_t)d->repeat * d->dst_repeat_stride + dst_span;
  if (dst_last >= d->dst_channels) {
    return accel_fail(ACCEL_ERR_INVALID,
                      "%s: dst_offset = %d + repeat = %d x dst_repeat_stride = %d + (channels = "
                      "%d - 1) x dst_stride = %d writes channel %lld, dst_channels = %d", where,
                      d->dst_offset, d->repeat, d->dst_repeat_stride, d->channels, d->dst_stride,
                      (long long)dst_last, d->dst_channels);
  }
  /* blocks one after another, or interleaved: each written channel is one (r, i) */
  if (d->repeat > 0 && !(d->dst_repeat_stride > dst_span) &&
      !(d->dst_repeat_stride >= 1 && d->dst_stride > (int64_t)d->repeat * d->dst_repeat_stride)) {
    return accel_fail(ACCEL_ERR_INVALID,
                      "%s: dst_repeat_stride = %d with repeat = %d, channels = %d and dst_stride "
                      "= %d writes some channel twice (the repeats' blocks must follow one "
                      "another, dst_repeat_stride > %lld, or interleave, 1 <= dst_repeat_stride "
                      "and repeat x dst_repeat_stride < dst_stride)", where,
                      d->dst_repeat_stride, d->repeat, d->channels, d->dst_stride,
                      (long long)dst_span);
  }
  r->out_n = r->in_n;
  r->out_c = d->dst_channels;
  r->out_h = r->in_h;
  r->out_w = r->in_w;
  return ACCEL_OK;
}
/* RUBIK contract (accel_rubik_desc): the factors, the channels they divide, NVDLA's 8192
 * limit per dimension; the output is (n, C / (sx*sy), H*sy, W*sx). */
static accel_status resolve_rubik(const accel_config* cfg, resolved_op* r, const char* where) {
  const accel_rubik_desc* d = &r->op->rubik;
  accel_status st = check_engine(cfg, ACCEL_FEATURE_RUBIK, "RUBIK", where);
  if (st == ACCEL_OK) st = check_precision(cfg, d->precision, where);
  if (st != ACCEL_OK) return st;
  RANGE("mode", d->mode, ACCEL_RUBIK_CONTRACT, ACCEL_RUBIK_MODE_COUNT - 1)
  if (d->mode != ACCEL_RUBIK_CONTRACT) {
    return accel_fail(ACCEL_ERR_UNSUPPORTED, "%s: mode = %s: the simulator models contract "
                      "only (split and merge change the memory format, which its dense "
                      "tensors do not have)", where,
                      d->mode == ACCEL_RUBIK_SPLIT ? "split" : "merge");
  }
  RANGE("stride_x", d->stride_x, 1, ACCEL_MAX_RUBIK_STRIDE)
  RANGE("stride_y", d->stride_y, 1, ACCEL_MAX_RUBIK_STRIDE)
  const int32_t phases = d->stride_x * d->stride_y;
  if (r->in_c % phases != 0) {
    return accel_fail(ACCEL_ERR_SHAPE, "%s: input channels %d are not a multiple of stride_x "
                      "= %d x stride_y = %d (one channel group per output phase)", where,
                      r->in_c, d->stride_x, d->stride_y);
  }
  r->out_n = r->in_n;
  r->out_c = r->in_c / phases;
  const int64_t out_h = (int64_t)r->in_h * d->stride_y, out_w = (int64_t)r->in_w * d->stride_x;
  const struct { const char* name; int64_t value; } dims[] = {
      {"input width", r->in_w}, {"input height", r->in_h}, {"input channels", r->in_c},
      {"output width", out_w}, {"output height", out_h}, {"output channels", r->out_c}};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; ++i) {
    if (dims[i].value > ACCEL_MAX_RUBIK_DIM) {
      return accel_fail(ACCEL_ERR_UNSUPPORTED, "%s: %s = %lld exceeds RUBIK's %d", where,
                        dims[i].name, (long long)dims[i].value, ACCEL_MAX_RUBIK_DIM);
    }
  }
  r->out_h = (int32_t)out_h;
  r->out_w = (int32_t)out_w;
  return ACCEL_OK;
}

static accel_precision op_precision(const accel_op* op) {
  switch (op->engine) {
    case ACCEL_ENGINE_CONV: return op->conv.precision;
    case ACCEL_ENGINE_SDP: return op->sdp.precision;
    case ACCEL_ENGINE_PDP: return op->pdp.precision;
    case ACCEL_ENGINE_CDP: return op->cdp.precision;
    case ACCEL_ENGINE_BDMA: return op->bdma.precision;
    case ACCEL_ENGINE_RUBIK: return op->rubik.precision;
    case ACCEL_ENGINE_COUNT: break; /* refused before */
  }
  return ACCEL_FP32;
}

static int64_t tensor_count(const accel_tensor* t) {
  return (int64_t)t->n * t->c * t->h * t->w;
}

typedef struct operand_range {
  const void* ptr;
  int64_t bytes;
  const char* name;
} operand_range;

/* Every buffer an op reads besides its input (present ones only): weights and packed weights,
 * the SDP's per-channel parameters and element-wise operand. eb: the data's element bytes. */
static int operand_ranges(const accel_op* op, const resolved_op* r, int64_t eb,
                          operand_range* ranges) {
  int count = 0;
#define OPERAND(pointer, size, label)                                                          \
  if ((pointer) != NULL) ranges[count++] = (operand_range){(pointer), (size), (label)};
  if (op->engine == ACCEL_ENGINE_CONV) {
    OPERAND(op->conv.weights, weight_count(&r->conv) * eb, "weights")
    OPERAND(op->conv.weights_packed, (int64_t)op->conv.weights_packed_bytes, "weights_packed")
  } else if (op->engine == ACCEL_ENGINE_SDP) {
    const accel_sdp_desc* d = &op->sdp;
    const int prelu = d->act == ACCEL_ACT_PRELU;
    OPERAND(d->ew_op != ACCEL_EW_NONE ? d->ew_operand : NULL,
            (int64_t)r->in_n * r->in_c * (d->ew_per_channel ? 1 : (int64_t)r->in_h * r->in_w) *
                eb, "ew_operand")
    OPERAND(d->scale, r->in_c * eb, "scale")
    OPERAND(d->shift, r->in_c * eb, "shift")
    OPERAND(prelu ? d->prelu_slope : NULL, r->in_c * eb, "prelu_slope")
    OPERAND(d->bias, (int64_t)r->in_c * 4, "bias")
    OPERAND(d->mul, (int64_t)r->in_c * 2, "mul")
    OPERAND(d->rshift, (int64_t)r->in_c, "rshift")
    OPERAND(prelu ? d->prelu_mul : NULL, (int64_t)r->in_c * 2, "prelu_mul")
    OPERAND(d->lut, (int64_t)sizeof(accel_lut_int8), "lut")
    const int64_t whole = (int64_t)r->in_n * r->in_c * r->in_h * r->in_w;
    OPERAND(d->x1.alu, (d->x1.alu_per_channel ? r->in_c : whole) * eb, "x1.alu")
    OPERAND(d->x1.mul, (d->x1.mul_per_channel ? r->in_c : whole) * eb, "x1.mul")
    OPERAND(d->x2.alu, (d->x2.alu_per_channel ? r->in_c : whole) * eb, "x2.alu")
    OPERAND(d->x2.mul, (d->x2.mul_per_channel ? r->in_c : whole) * eb, "x2.mul")
  }
#undef OPERAND
  return count;
}

/* The ops' secondary-memory bits (see accel_sram_stream): known bits, an SRAM to use, streams
 * that go to memory, and the run's SRAM tensors within its size. */
static accel_status check_sram(const accel_config* cfg, const resolved_chain* chain,
                               accel_precision p) {
  const uint32_t known = ACCEL_SRAM_INPUT | ACCEL_SRAM_OPERAND | ACCEL_SRAM_OUTPUT |
                         ACCEL_SRAM_WEIGHTS;
  int64_t footprint = 0;
  for (int32_t i = 0; i < chain->num_ops; ++i) {
    const resolved_op* r = &chain->ops[i];
    const uint32_t bits = r->op->sram;
    if (bits == 0) continue;
    const char* engine = engine_name(r->op->engine);
    if (bits & ~known) {
      return accel_fail(ACCEL_ERR_INVALID, "op %d (%s): sram = 0x%x has unknown bits", i,
                        engine, bits);
    }
    if (cfg->sram_bytes == 0) {
      return accel_fail(ACCEL_ERR_UNSUPPORTED, "op %d (%s): sram = 0x%x, but configuration %s "
                        "has no SRAM (sram_bytes = 0)", i, engine, bits, cfg->name);
    }
    const int64_t in_bytes = stored_feature_bytes(cfg, r->in_n, r->in_c, r->in_h, r->in_w, p);
    if ((bits & ACCEL_SRAM_INPUT) && op_input_on_chip(chain, i)) {
      return accel_fail(ACCEL_ERR_INVALID, "op %d (%s): sram INPUT bit, but its input comes on "
                        "the fly from op %d, not from memory", i, engine, i - 1);
    }
    if ((bits & ACCEL_SRAM_OUTPUT) && op_output_on_chip(chain, i)) {
      return accel_fail(ACCEL_ERR_INVALID, "op %d (%s): sram OUTPUT bit, but its output goes on "
                        "the fly to op %d, not to memory", i, engine, i + 1);
    }
    if ((bits & ACCEL_SRAM_OPERAND) &&
        (r->op->engine != ACCEL_ENGINE_SDP || r->op->sdp.ew_op == ACCEL_EW_NONE)) {
      return accel_fail(ACCEL_ERR_INVALID, "op %d (%s): sram OPERAND bit without an element-wise "
                        "operand", i, engine);
    }
    if ((bits & ACCEL_SRAM_WEIGHTS) && r->op->engine != ACCEL_ENGINE_CONV) {
      return accel_fail(ACCEL_ERR_INVALID, "op %d (%s): sram WEIGHTS bit on an op without "
                        "weights (CONV only)", i, engine);
    }
    if (bits & ACCEL_SRAM_WEIGHTS) {
      footprint += accel_conv_weight_bytes(cfg, &r->op->conv, r->in_c);
    }
    /* An intermediate in SRAM is written by one op and read by the next: count it once. */
    const int from_previous = i > 0 && (chain->ops[i - 1].op->sram & ACCEL_SRAM_OUTPUT);
    if ((bits & ACCEL_SRAM_INPUT) && !from_previous) footprint += in_bytes;
    if (bits & ACCEL_SRAM_OPERAND) footprint += in_bytes;
    if (bits & ACCEL_SRAM_OUTPUT) {
      footprint += stored_feature_bytes(cfg, r->out_n, r->out_c, r->out_h, r->out_w, p);
    }
  }
  if (footprint > cfg->sram_bytes) {
    return accel_fail(ACCEL_ERR_INVALID, "the run places %lld bytes in SRAM, configuration %s "
                      "has sram_bytes = %lld", (long long)footprint, cfg->name,
                      (long long)cfg->sram_bytes);
  }
  return ACCEL_OK;
}


/* "op i (ENGINE)" into where, without snprintf's cost on every run (i < 10 in a chain). */
static void op_where(char* where, size_t size, int32_t i, const char* engine) {
  size_t n = 0;
  const char head[] = {'o', 'p', ' ', (char)('0' + i % 10), ' ', '('};
  for (size_t j = 0; j < sizeof head && n + 1 < size; ++j) where[n++] = head[j];
  for (; *engine != '\0' && n + 2 < size; ++engine) where[n++] = *engine;
  where[n++] = ')';
  where[n] = '\0';
}

accel_status chain_resolve(const accel_config* cfg, const accel_op* ops, int32_t num_ops,
                           const accel_tensor* input, const accel_tensor* output,
                           accel_mode mode, int need_data, resolved_chain* out) {
  if (ops == NULL) return accel_fail(ACCEL_ERR_NULL, "ops is NULL");
  if (num_ops < 1 || num_ops > ACCEL_MAX_CHAIN_OPS) {
    return accel_fail(ACCEL_ERR_INVALID, "num_ops = %d is outside [1, %d]", num_ops,
                      ACCEL_MAX_CHAIN_OPS);
  }
  if (mode != ACCEL_MODE_FUSED && mode != ACCEL_MODE_INDEPENDENT) {
    return accel_fail(ACCEL_ERR_INVALID, "mode = %d is not an accel_mode", (int)mode);
  }
  accel_status st = check_tensor(cfg, input, "input", need_data);
  if (st != ACCEL_OK) return st;
  if (output != NULL) {
    st = check_tensor(cfg, output, "output", need_data);
    if (st != ACCEL_OK) return st;
  }

  memset(out, 0, sizeof *out);
  out->num_ops = num_ops;
  out->mode = mode;
  int32_t n = input->n, c = input->c, h = input->h, w = input->w;
  int last_engine = -1;
  for (int32_t i = 0; i < num_ops; ++i) {
    resolved_op* r = &out->ops[i];
    r->op = &ops[i];
    r->in_n = n, r->in_c = c, r->in_h = h, r->in_w = w;
    char where[48];
    op_where(where, sizeof where, i, engine_name(ops[i].engine));
    if (ops[i].engine < ACCEL_ENGINE_CONV || ops[i].engine >= ACCEL_ENGINE_COUNT) {
      return accel_fail(ACCEL_ERR_INVALID, "op %d: engine = %d is not an accel_engine", i,
                        (int)ops[i].engine);
    }
    if (mode == ACCEL_MODE_FUSED && ops[i].engine == ACCEL_ENGINE_CDP && num_ops > 1) {
      return accel_fail(ACCEL_ERR_INVALID,
                        "%s: the CDP reads and writes memory, outside the fused CONV -> SDP -> "
                        "PDP pipe: a FUSED run holds it alone (chain it in INDEPENDENT mode)",
                        where);
    }
    if (ops[i].engine == ACCEL_ENGINE_SDP && ops[i].sdp.convert && num_ops != 1) {
      return accel_fail(ACCEL_ERR_INVALID,
                        "%s: a converting SDP runs alone (num_ops = %d, must be 1)", where,
                        num_ops);
    }
    if (ops[i].engine == ACCEL_ENGINE_BDMA && num_ops != 1) {
      return accel_fail(ACCEL_ERR_INVALID,
                        "%s: a BDMA copy runs alone (num_ops = %d, must be 1): it is not part of "
                        "the CONV -> SDP -> PDP pipe", where, num_ops);
    }
    if (ops[i].engine == ACCEL_ENGINE_RUBIK && num_ops != 1) {
      return accel_fail(ACCEL_ERR_INVALID,
                        "%s: a RUBIK contract runs alone (num_ops = %d, must be 1): it reads "
                        "and writes memory, outside the CONV -> SDP -> PDP pipe", where, num_ops);
    }
    if (mode == ACCEL_MODE_FUSED && (int)ops[i].engine <= last_engine) {
      return accel_fail(ACCEL_ERR_INVALID,
                        "%s: a fused chain runs CONV -> SDP -> PDP, each at most once, in "
                        "that order", where);
    }
    last_engine = (int)ops[i].engine;
    if (op_precision(&ops[i]) != input->precision) {
      return accel_fail(ACCEL_ERR_INVALID, "%s: precision %s differs from the input's %s", where,
                        precision_name(op_precision(&ops[i])), precision_name(input->precision));
    }
    if (i > 0 && ops[i].engine == ACCEL_ENGINE_CONV &&
        ops[i].conv.pixel_format != ACCEL_PIXEL_NONE) {
      return accel_fail(ACCEL_ERR_INVALID, "%s: image input (pixel_format %d) reads the run's "
                        "input: the CONV must be op 0", where, (int)ops[i].conv.pixel_format);
    }
    switch (ops[i].engine) {
      case ACCEL_ENGINE_CONV: st = resolve_conv(cfg, r, where, need_data); break;
      case ACCEL_ENGINE_SDP: st = resolve_sdp(cfg, r, where, need_data); break;
      case ACCEL_ENGINE_PDP: st = resolve_pdp(cfg, r, where); break;
      case ACCEL_ENGINE_CDP: st = resolve_cdp(cfg, r, where); break;
      case ACCEL_ENGINE_BDMA: st = resolve_bdma(cfg, r, where); break;
      case ACCEL_ENGINE_RUBIK: st = resolve_rubik(cfg, r, where); break;
      case ACCEL_ENGINE_COUNT: break; /* refused above */
    }
    if (st != ACCEL_OK) return st;
    if (ops[i].engine == ACCEL_ENGINE_CONV && ops[i].conv.precision != ACCEL_FP32 &&
        (i + 1 == num_ops || ops[i + 1].engine != ACCEL_ENGINE_SDP)) {
      return accel_fail(ACCEL_ERR_INVALID,
                        "%s: a %s CONV must be followed by an SDP, which converts its "
                        "accumulators", where, precision_name(ops[i].conv.precision));
    }
    if (i > 0 && ops[i].engine == ACCEL_ENGINE_SDP && ops[i - 1].engine == ACCEL_ENGINE_CONV &&
        ops[i].sdp.in_zero != 0) {
      return accel_fail(ACCEL_ERR_INVALID,
                        "%s: in_zero = %d is for an SDP that reads memory; after a CONV it "
                        "reads accumulators, which have none", where, ops[i].sdp.in_zero);
    }
    if ((int64_t)r->out_n * r->out_c * r->out_h * r->out_w > ACCEL_MAX_TENSOR_ELEMENTS) {
      return accel_fail(ACCEL_ERR_INVALID, "%s: the output of %d x %d x %d x %d elements exceeds "
                        "the limit of %d", where, r->out_n, r->out_c, r->out_h, r->out_w,
                        ACCEL_MAX_TENSOR_ELEMENTS);
    }
    n = r->out_n, c = r->out_c, h = r->out_h, w = r->out_w;
  }
  st = check_sram(cfg, out, input->precision);
  if (st != ACCEL_OK) return st;
  if (output == NULL) return ACCEL_OK;
  if (ops[0].engine == ACCEL_ENGINE_BDMA &&
      (output->n != n || output->c != c || output->h != h || output->w != w)) {
    return accel_fail(ACCEL_ERR_SHAPE,
                      "output tensor is %dx%dx%dx%d but the BDMA copy writes %dx%dx%dx%d (the "
                      "input's n, h, w and dst_channels = %d)", output->n, output->c,
                      output->h, output->w, n, c, h, w, ops[0].bdma.dst_channels);
  }
  if (output->n != n || output->c != c || output->h != h || output->w != w) {
    return accel_fail(ACCEL_ERR_SHAPE,
                      "output tensor is %dx%dx%dx%d but the chain produces %dx%dx%dx%d",
                      output->n, output->c, output->h, output->w, n, c, h, w);
  }
  /* The element-wise operands of a run with a C16 output are C16 too (accel_layout): whole
   * atoms of 16. */
  if (output->layout == ACCEL_LAYOUT_C16 || input->layout == ACCEL_LAYOUT_C16) {
    for (int32_t i = 0; i < num_ops; ++i) {
      if (ops[i].engine == ACCEL_ENGINE_SDP && ops[i].sdp.ew_per_channel) {
        return accel_fail(ACCEL_ERR_UNSUPPORTED, "op %d (SDP): a per-channel element-wise "
                          "operand (ew_per_channel) runs on NCHW tensors only", i);
      }
      const accel_sdp_desc* d = &ops[i].sdp;
      if (ops[i].engine == ACCEL_ENGINE_SDP && sdp_desc_has_x(d)) {
        return accel_fail(ACCEL_ERR_UNSUPPORTED, "op %d (SDP): the X units' operands (x1, x2) "
                          "run on NCHW tensors only", i);
      }
    }
  }
  if (output->layout == ACCEL_LAYOUT_C16) {
    for (int32_t i = 0; i < num_ops; ++i) {
      const resolved_op* r = &out->ops[i];
      if (ops[i].engine == ACCEL_ENGINE_SDP && ops[i].sdp.ew_op != ACCEL_EW_NONE &&
          r->in_c % ACCEL_C16_CHANNELS != 0) {
        return accel_fail(ACCEL_ERR_INVALID,
                          "op %d (SDP): its element-wise operand has %d channels: a run with a "
                          "C16 output takes C16 operands, a multiple of %d channels", i, r->in_c,
                          ACCEL_C16_CHANNELS);
      }
    }
  }
  const accel_precision writes = run_output_precision(&ops[0], input->precision);
  if (output->precision != writes) {
    return accel_fail(ACCEL_ERR_INVALID, "output precision %s differs from the %s the run "
                      "writes", precision_name(output->precision), precision_name(writes));
  }
  if (need_data) {
    /* Only a chain of SDP ops may work in place; anything else must not overlap its input. */
    int all_sdp = 1;
    for (int32_t i = 0; i < num_ops; ++i) all_sdp &= ops[i].engine == ACCEL_ENGINE_SDP;
    const char* in_lo = (const char*)input->data;
    const char* in_hi = in_lo + tensor_count(input) * element_bytes(input->precision);
    const char* out_lo = (const char*)output->data;
    const char* out_hi = out_lo + tensor_count(output) * element_bytes(output->precision);
    const int overlap = in_lo < out_hi && out_lo < in_hi;
    if (overlap && ops[0].engine == ACCEL_ENGINE_RUBIK) {
      return accel_fail(ACCEL_ERR_INVALID,
                        "op 0 (RUBIK): output data %p overlaps input data %p (a contract needs "
                        "separate source and destination)", output->data, input->data);
    }
    if (overlap && ops[0].engine == ACCEL_ENGINE_BDMA) {
      return accel_fail(ACCEL_ERR_INVALID,
                        "op 0 (BDMA): output data %p overlaps input data %p (a copy needs "
                        "separate source and destination)", output->data, input->data);
    }
    if (overlap && !(all_sdp && in_lo == out_lo)) {
      return accel_fail(ACCEL_ERR_INVALID,
                        "output data %p overlaps input data %p (only SDP chains run in place)",
                        output->data, input->data);
    }
    /* Engines read their operands while the output is written: none may share its memory. */
    const int64_t eb = element_bytes(output->precision);
    const int64_t out_bytes = out_hi - out_lo;
    for (int32_t i = 0; i < num_ops; ++i) {
      const resolved_op* r = &out->ops[i];
      operand_range operands[16];
      const int count = operand_ranges(&ops[i], r, eb, operands);
      for (int j = 0; j < count; ++j) {
        if (ranges_overlap(operands[j].ptr, operands[j].bytes, out_lo, out_bytes)) {
          return accel_fail(ACCEL_ERR_INVALID, "op %d (%s): %s %p overlaps the output data %p",
                            i, engine_name(ops[i].engine), operands[j].name, operands[j].ptr,
                            output->data);
        }
      }
    }
  }
  return ACCEL_OK;
}

accel_status accel_chain_shapes(const accel_config* cfg, const accel_op* ops, int32_t num_ops,
                                const accel_tensor* input, accel_mode mode, accel_tensor* shapes) {
  accel_status st = accel_config_validate(cfg);
  if (st != ACCEL_OK) return st;
  if (shapes == NULL) return accel_fail(ACCEL_ERR_NULL, "shapes is NULL");
  resolved_chain chain;
  st = chain_resolve(cfg, ops, num_ops, input, NULL, mode, 0, &chain);
  if (st != ACCEL_OK) return st;
  for (int32_t i = 0; i < num_ops; ++i) {
    const resolved_op* r = &chain.ops[i];
    shapes[i] = (accel_tensor){.data = NULL, .n = r->out_n, .c = r->out_c, .h = r->out_h,
                               .w = r->out_w,
                               .precision = run_output_precision(r->op, input->precision)};
  }
  return ACCEL_OK;
}
