/* cost_model.c - what the modelled hardware spends on a chain: MACs, cycles, memory traffic.
 *
 * NVDLA's own estimate, per layer: time = the long pole of MAC-array cycles and DRAM transfer
 * cycles. Specifics of this model:
 * - MAC cycles count the array's real utilisation: every output position costs
 *   ceil(C_group / atomic_c) * ceil(K_group / atomic_k) * R * S cycles per group, so layers with
 *   few channels (the RGB stem, depthwise convolutions) leave most of the array idle.
 *   16-bit data (and fp32, the reference precision, charged as fp16) halve atomic K.
 * - Feature data is stored as atom cubes: each (n, h, w) position holds its channels padded up to
 *   whole memory atoms. Weights and per-channel parameters are stored densely.
 * - Winograd (accel_conv_mode): the array works on 4x4 transformed tiles, its atomic C lanes
 *   taking atomic_c / 16 channels x 16 tile elements per cycle (NVDLA's compiler pads channels
 *   to 4 per atom for it), and NVDLA's CMAC works on 4x4 output blocks (two 2x2 tiles per side;
 *   its compiler rounds the output up to multiples of 4). Per image:
 *     mac_cycles = ceil(out_h/4)*2 * ceil(out_w/4)*2 * ceil(C*s*s / (atomic_c/16)) * ceil(K/atomic_k)
 *   against direct's out_h*out_w * ceil(C/atomic_c) * ceil(K/atomic_k) * R*S: 16/36 of the
 *   cycles for 3x3 stride 1 with aligned sizes. macs counts the 16 products per tile, folded
 *   channel and kernel over the real tiles (ceil(out/2) per side). The pre-transformed weights
 *   are 4x4 per kernel and folded channel, stored as FP16 halves, or as int16 for INT8 (4 G g
 *   G^T, accel.h): 16/9 of direct's weight bytes in FP16, 32/9 in INT8, and as much more CBUF.
 * - CBUF holds the input and the weights of a convolution. When both do not fit, the layer is
 *   split as NVDLA's compiler splits it, and the forced re-reads are counted (see conv_reads).
 * - SDP, PDP and CDP cost elements / throughput; an SDP that uses the element-wise or LUT unit
 *   runs at the slower of its two units' rates. The CDP always reads and writes memory.
 * - Image input (pixel_format, NVDLA's image mode for the first layer): the input is read as
 *   pixels, a pixel's channels packed together (1, 4 or 8 bytes) and each line padded to a
 *   memory atom, instead of a whole atom per position. MAC cycles as NVDLA's convolution
 *   pipeline computes image input: channel pre-extension folds a kernel row (S pixels of the
 *   format's P channels, the unused 4th included) into one channel of S x P elements, and
 *   channel post-extension stacks L = 4 or 2 kernel rows more into it when L x S x P and
 *   L x stride_w x P fit in atomic C (NVDLA's limits: 16 and 32 of atomic C 64); a kernel row
 *   group that runs past the kernel costs a whole atomic operation (the hardware drops the
 *   extra lines). Every output position costs ceil(R / L) x ceil(L x S x P / atomic_c) x
 *   ceil(K / atomic_k) cycles: the 7x7 RGB stem takes 4 where direct convolution takes 49.
 * - Multi-batch (multi_batch, fully connected layers): the weights stream through once for up
 *   to ACCEL_MAX_BATCH images whose input vectors CBUF holds together beside one atomic-K group
 *   of kernels; without it each image fetches the weights again.
 * - FUSED: the intermediates between engines stay on chip and the engines work in a pipeline, so
 *   the chain costs the long pole of every engine's compute and all of its memory traffic.
 *   INDEPENDENT: every op reads its input and writes its output, one op after the other, except
 *   that an INT8 or FP16 CONV hands its accumulators to the SDP on the fly (CACC feeds SDP).
 * - INT8 SDP parameters are the converters: a 4-byte bias, a 2-byte multiplier and a 1-byte
 *   shift per channel (and a 2-byte PReLU multiplier).
 * - BDMA is pure data movement (compute_cycles 0; cycles = its bytes at the DRAM bandwidth). In
 *   the atom-cube layout a channel lives in a channel surface: the group of channels one memory
 *   atom holds at every (n, h, w) position (atom / element bytes channels; one channel when an
 *   element is wider than the atom). The engine moves whole atoms, so a copy reads, at every
 *   position, one atom of each input surface that holds a copied channel, and writes one atom
 *   of each output surface it writes into (a masked write: the surface's other channels keep
 *   their bytes, no read-modify-write is charged). A contiguous copy of C channels from channel
 *   0 thus costs exactly the feature data of a C-channel tensor, a concat of atom-aligned
 *   inputs moves each byte once, and a strided copy (a channel shuffle) pays for every surface
 *   its channels are spread over.
 * - Energy (accel.h, accel_config's per-action energies): each op's action counts times their
 *   energies. MACs are the useful ones (idle lanes are not charged). A CONV writes into CBUF the
 *   bytes it reads from memory (re-reads included); it reads one atomic-C entry of data per
 *   MAC-array cycle and, per stripe of ACCEL_CONV_STRIPE output positions, every atomic-C x
 *   atomic-K weight block of its loops once. SDP, PDP, CDP: elements processed (the PDP's and
 *   CDP's input elements). Every byte read or written counts as DRAM traffic. A run's energy is
 *   the sum of its ops' in either mode (fusion saves the energy of the bytes it does not move).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Bytes of one element as the hardware stores it: fp32 is charged as fp16. */
static int64_t hw_element_bytes(accel_precision p) { return p == ACCEL_INT8 ? 1 : 2; }

/* Atomic K at this precision: the int8 figure, halved for 16-bit data. */
static int64_t atomic_k_at(const accel_config* cfg, accel_precision p) {
  return p == ACCEL_INT8 ? cfg->atomic_k : cfg->atomic_k / 2;
}

int64_t accel_config_macs_per_cycle(const accel_config* cfg, accel_precision precision) {
  if (cfg == NULL || precision < ACCEL_INT8 || precision >= ACCEL_PRECISION_COUNT) return 0;
  return (int64_t)cfg->atomic_c * atomic_k_at(cfg, precision);
}

/* Bytes of one (n, h, w) position's channels, padded to whole memory atoms. */
static int64_t position_bytes(const accel_config* cfg, int64_t channels, accel_precision p) {
  return ceil_div(channels * hw_element_bytes(p), cfg->memory_atom_bytes) * cfg->memory_atom_bytes;
}

/* Bytes of one input line as the CONV reads it: pixels packed (image input) or positions of
 * atom-padded channels (feature data). */
static int64_t input_row_bytes(const accel_config* cfg, const conv_geometry* g, accel_precision p) {
  if (g->pixel_bytes == 0) return (int64_t)g->w * position_bytes(cfg, g->c, p);
  return ceil_div((int64_t)g->w * g->pixel_bytes, cfg->memory_atom_bytes) * cfg->memory_atom_bytes;
}

static int64_t feature_bytes(const accel_config* cfg, int64_t n, int64_t c, int64_t h, int64_t w,
                             accel_precision p) {
  return n * h * w * position_bytes(cfg, c, p);
}

/* Distinct input rows that `out_rows` consecutive output rows read (a window of `reach` rows
 * every `stride` rows: contiguous when the windows overlap or touch, with gaps otherwise). */
static int64_t slice_input_rows(const conv_geometry* g, int64_t out_rows) {
  const int64_t reach = (int64_t)(g->kernel_h - 1) * g->dilation_h + 1;
  return reach >= g->stride_h ? (out_rows - 1) * g->stride_h + reach : out_rows * reach;
}

/* Input bytes read for one image when the input streams through CBUF in horizontal slices of
 * as many rows as `budget` bytes hold (at least one output row's worth): every slice re-reads
 * the rows it shares with the previous one. Rows no window touches are never read. */
static int64_t sliced_input_reads(const conv_geometry* g, int64_t row_bytes, int64_t budget,
                                  int64_t* num_slices) {
  const int64_t rows_fit = budget / row_bytes;
  const int64_t reach = (int64_t)(g->kernel_h - 1) * g->dilation_h + 1;
  int64_t out_rows = 1;
  if (rows_fit >= reach) {
    out_rows = reach >= g->stride_h ? (rows_fit - reach) / g->stride_h + 1 : rows_fit / reach;
  }
  if (out_rows > g->out_h) out_rows = g->out_h;
  *num_slices = ceil_div(g->out_h, out_rows);
  int64_t rows = 0;
  for (int64_t first = 0; first < g->out_h; first += out_rows) {
    const int64_t last = first + out_rows < g->out_h ? first + out_rows : g->out_h;
    int64_t counted_to = 0; /* rows below this are already counted for this slice */
    for (int64_t y = first; y < last; ++y) {
      const int64_t top = y * g->stride_h - g->pad_top;
      const int64_t lo = top > counted_to ? top : counted_to;
      const int64_t hi = top + reach < g->h ? top + reach : g->h;
      if (hi > lo) rows += hi - lo;
      if (hi > counted_to) counted_to = hi;
    }
  }
  return rows * row_bytes;
}

/* Input and weight bytes a convolution reads, for the whole batch.
 * 1. Input and weights fit CBUF together: each is read once.
 * 2. One image fits with room for one atomic-K group of kernels: the image stays, the weights
 *    stream through once per image (read once when the batch is 1).
 * 3. The weights fit with room for a few input rows: the weights stay, the input streams in
 *    horizontal slices that re-read their overlapping rows.
 * 4. Neither fits: split CBUF in halves and take the cheaper of streaming all weights once per
 *    input slice, or the whole (sliced) input once per group of kernels. */
static void conv_reads(const accel_config* cfg, const conv_geometry* g, accel_precision p,
                       int64_t kernel_bytes_stored, int64_t* input_bytes, int64_t* weight_bytes) {
  const int64_t cbuf = cfg->cbuf_bytes;
  const int64_t row_bytes = input_row_bytes(cfg, g, p);
  int64_t one_slice = 1;
  /* The rows the convolution reads at all (a strided 1x1 skips some): the once-only cost. */
  const int64_t image = sliced_input_reads(g, row_bytes, INT64_MAX, &one_slice);
  const int64_t weights = (int64_t)g->k * kernel_bytes_stored;
  const int64_t k_per_group = g->k / g->groups;
  const int64_t kernel_bytes = weights / g->k;
  const int64_t group_k = k_per_group < atomic_k_at(cfg, p) ? k_per_group : atomic_k_at(cfg, p);
  const int64_t min_weights = group_k * kernel_bytes;
  const int64_t min_rows = slice_input_rows(g, 1) * row_bytes;
  int64_t slices = 1;

  if (image + weights <= cbuf) {
    *input_bytes = image * g->n;
    *weight_bytes = weights;
  } else if (image + min_weights <= cbuf) {
    /* Multi-batch: as many images as CBUF holds beside the kernels share one weight fetch. */
    int64_t batch = g->multi_batch ? (cbuf - min_weights) / image : 1;
    batch = batch < ACCEL_MAX_BATCH ? batch : ACCEL_MAX_BATCH;
    *input_bytes = image * g->n;
    *weight_bytes = weights * ceil_div(g->n, batch);
  } else if (weights + min_rows <= cbuf) {
    *input_bytes = sliced_input_reads(g, row_bytes, cbuf - weights, &slices) * g->n;
    *weight_bytes = weights;
  } else {
    const int64_t half = cbuf / 2;
    const int64_t sliced = sliced_input_reads(g, row_bytes, half, &slices);
    const int64_t kernel_groups = ceil_div(weights, half > min_weights ? half : min_weights);
    const int64_t weights_per_slice = sliced + weights * slices;  /* per image */
    const int64_t input_per_group = sliced * kernel_groups + weights;
    const int64_t best = weights_per_slice < input_per_group ? weights_per_slice : input_per_group;
    *input_bytes = (best == weights_per_slice ? sliced : sliced * kernel_groups) * g->n;
    *weight_bytes = (best == weights_per_slice ? weights * slices : weights) * g->n;
  }
}

static int64_t memory_cycles(const accel_config* cfg, int64_t bytes) {
  return (int64_t)ceil((double)bytes * cfg->clock_hz / cfg->dram_bytes_per_s);
}

static void finish_op(const accel_config* cfg, accel_op_stats* s) {
  s->bytes_read = s->input_bytes + s->weight_bytes + s->operand_bytes;
  s->memory_cycles = memory_cycles(cfg, s->bytes_read + s->bytes_written);
  s->cycles = s->compute_cycles > s->memory_cycles ? s->compute_cycles : s->memory_cycles;
  s->dram_energy_pj = (double)(s->bytes_read + s->bytes_written) * cfg->dram_pj_per_byte;
  s->energy_pj = s->mac_energy_pj + s->cbuf_energy_pj + s->dram_energy_pj + s->engine_energy_pj;
}

static void cost_conv(const accel_config* cfg, const resolved_op* r, int output_on_chip,
                      accel_op_stats* s) {
  const conv_geometry* g = &r->conv;
  const accel_precision p = r->op->conv.precision;
  const int64_t c_group = g->c / g->groups, k_group = g->k / g->groups;
  const int64_t positions = (int64_t)g->n * g->out_h * g->out_w;
  const int winograd = r->op->conv.mode == ACCEL_CONV_WINOGRAD;
  snprintf(s->op, sizeof s->op, "%s", winograd ? "conv2d_winograd" :
           g->pixel_bytes ? "conv2d_image" :
           g->multi_batch ? "conv2d_batch" : g->groups == 1 ? "conv2d" :
           (c_group == 1 && k_group == 1) ? "conv2d_depthwise" : "conv2d_grouped");
  s->macs = positions * g->k * c_group * g->kernel_h * g->kernel_w;
  int64_t kernel_bytes = c_group * g->kernel_h * g->kernel_w * hw_element_bytes(p);
  if (winograd) { /* groups 1, equal strides, feature data: validated */
    const int64_t folded_c = (int64_t)g->c * g->stride_h * g->stride_h;
    const int64_t lanes = cfg->atomic_c >= 16 ? cfg->atomic_c / 16 : 1;
    s->macs = (int64_t)g->n * ceil_div(g->out_h, 2) * ceil_div(g->out_w, 2) * 16 * folded_c *
              g->k;
    s->mac_cycles = (int64_t)g->n * ceil_div(g->out_h, 4) * 2 * ceil_div(g->out_w, 4) * 2 *
                    ceil_div(folded_c, lanes) * ceil_div(g->k, atomic_k_at(cfg, p));
    kernel_bytes = folded_c * 16 * 2; /* halves, or int16 for INT8 */
  } else if (g->pixel_bytes) {
    const int64_t row = (int64_t)g->kernel_w * g->pixel_channels; /* pre-extended channels */
    const int64_t step = (int64_t)g->stride_w * g->pixel_channels;
    int64_t lines = 4;
    while (lines > 1 && (lines * row > cfg->atomic_c || lines * step > cfg->atomic_c)) lines /= 2;
    s->mac_cycles = positions * ceil_div(g->kernel_h, lines) *
                    ceil_div(lines * row, cfg->atomic_c) * ceil_div(g->k, atomic_k_at(cfg, p));
  } else {
    s->mac_cycles = positions * g->groups * ceil_div(c_group, cfg->atomic_c) *
                    ceil_div(k_group, atomic_k_at(cfg, p)) * g->kernel_h * g->kernel_w;
  }
  s->compute_cycles = s->mac_cycles;
  int64_t once_input = 0, once_weights = 0;
  conv_reads(cfg, g, p, kernel_bytes, &s->input_bytes, &s->weight_bytes);
  accel_config unlimited = *cfg;
  unlimited.cbuf_bytes = INT64_MAX / 4; /* everything fits: each byte read once */
  conv_reads(&unlimited, g, p, kernel_bytes, &once_input, &once_weights);
  s->reread_bytes = s->input_bytes + s->weight_bytes - once_input - once_weights;
  s->bytes_written =
      output_on_chip ? 0 : feature_bytes(cfg, g->n, g->k, g->out_h, g->out_w, p);
  /* CBUF: what CDMA brings in is written once; the MAC array reads one atomic-C entry of data
   * per cycle and each weight block of its loops once per stripe of output positions. */
  const int64_t eb = hw_element_bytes(p);
  const int64_t weight_blocks = (int64_t)g->groups * ceil_div(c_group, cfg->atomic_c) *
                                ceil_div(k_group, atomic_k_at(cfg, p)) * g->kernel_h * g->kernel_w;
  s->cbuf_write_bytes = s->input_bytes + s->weight_bytes;
  s->cbuf_read_bytes = s->mac_cycles * cfg->atomic_c * eb +
                       ceil_div(positions, ACCEL_CONV_STRIPE) * weight_blocks * cfg->atomic_c *
                           atomic_k_at(cfg, p) * eb;
  s->cbuf_energy_pj = (double)s->cbuf_read_bytes * cfg->cbuf_read_pj_per_byte +
                      (double)s->cbuf_write_bytes * cfg->cbuf_write_pj_per_byte;
  s->mac_energy_pj =
      (double)s->macs * (p == ACCEL_INT8 ? cfg->mac_int8_pj : cfg->mac_fp16_pj);
}

static void cost_sdp(const accel_config* cfg, const resolved_op* r, int input_on_chip,
                     int output_on_chip, accel_op_stats* s) {
  const accel_sdp_desc* d = &r->op->sdp;
  const accel_precision p = d->precision;
  static const char* const ew_names[] = {"", "add", "mul", "max", "min"};
  char name[ACCEL_NAME_LEN] = "sdp";
  size_t used = strlen(name);
  const int affine = d->scale || d->shift || d->bias || d->mul;
  const char* parts[3] = {affine ? "scale_shift" : "", ew_names[d->ew_op],
                          activation_name(d->act)};
  for (int i = 0; i < 3; ++i) {
    if (parts[i][0] == '\0') continue;
    used += (size_t)snprintf(name + used, sizeof name - used, "%s%s",
                             used == 3 ? ":" : "+", parts[i]);
    if (used >= sizeof name) break;
  }
  snprintf(s->op, sizeof s->op, "%s", name);
  const int64_t elements = (int64_t)r->in_n * r->in_c * r->in_h * r->in_w;
  const int64_t tensor = feature_bytes(cfg, r->in_n, r->in_c, r->in_h, r->in_w, p);
  const int uses_y_unit = d->ew_op != ACCEL_EW_NONE || lut_activation(d->act);
  s->compute_cycles = ceil_div(elements, uses_y_unit ? cfg->sdp_ew_throughput : cfg->sdp_throughput);
  s->engine_energy_pj = (double)elements * cfg->sdp_pj_per_element;
  const int64_t per_channel =
      p == ACCEL_INT8 ? 4 * (d->bias != NULL) + 2 * (d->mul != NULL) + (d->rshift != NULL) +
                            2 * (d->act == ACCEL_ACT_PRELU)
                      : ((d->scale != NULL) + (d->shift != NULL) + (d->act == ACCEL_ACT_PRELU)) *
                            hw_element_bytes(p);
  s->weight_bytes = per_channel * r->in_c;
  s->input_bytes = input_on_chip ? 0 : tensor;
  s->operand_bytes = d->ew_op != ACCEL_EW_NONE ? tensor : 0;
  s->bytes_written = output_on_chip ? 0 : tensor;
}

static void cost_pdp(const accel_config* cfg, const resolved_op* r, int input_on_chip,
                     accel_op_stats* s) {
  const pdp_geometry* g = &r->pdp;
  const accel_precision p = r->op->pdp.precision;
  snprintf(s->op, sizeof s->op, "%s", g->pool == ACCEL_POOL_MAX ? "pdp:max" : "pdp:avg");
  s->compute_cycles = ceil_div((int64_t)g->n * g->c * g->h * g->w, cfg->pdp_throughput);
  s->engine_energy_pj = (double)g->n * g->c * g->h * g->w * cfg->pdp_pj_per_element;
  s->input_bytes = input_on_chip ? 0 : feature_bytes(cfg, g->n, g->c, g->h, g->w, p);
  s->bytes_written = feature_bytes(cfg, g->n, g->c, g->out_h, g->out_w, p);
}

/* The CDP reads its input from memory and writes its output there (never on the fly). */
static void cost_cdp(const accel_config* cfg, const resolved_op* r, accel_op_stats* s) {
  const cdp_geometry* g = &r->cdp;
  const accel_precision p = r->op->cdp.precision;
  snprintf(s->op, sizeof s->op, "%s", "cdp:lrn");
  s->compute_cycles = ceil_div((int64_t)g->n * g->c * g->h * g->w, cfg->cdp_throughput);
  s->engine_energy_pj = (double)g->n * g->c * g->h * g->w * cfg->cdp_pj_per_element;
  s->input_bytes = feature_bytes(cfg, g->n, g->c, g->h, g->w, p);
  s->bytes_written = s->input_bytes;
}

/* Channel surfaces the channels offset + i*stride (i < count) touch, `per_surface` channels each:
 * a step of a whole surface or more lands in a new surface every time; a smaller step visits
 * every surface between the first and the last. */
static int64_t surfaces_touched(int64_t offset, int64_t stride, int64_t count,
                                int64_t per_surface) {
  if (stride >= per_surface) return count;
  return (offset + (count - 1) * stride) / per_surface - offset / per_surface + 1;
}

static void cost_bdma(const accel_config* cfg, const resolved_op* r, accel_op_stats* s) {
  const accel_bdma_desc* d = &r->op->bdma;
  const int64_t eb = hw_element_bytes(d->precision);
  const int64_t atom = cfg->memory_atom_bytes;
  const int64_t per_surface = atom >= eb ? atom / eb : 1;
  const int64_t surface_bytes = position_bytes(cfg, per_surface, d->precision);
  const int64_t positions = (int64_t)r->in_n * r->in_h * r->in_w;
  snprintf(s->op, sizeof s->op, "%s", "bdma:copy");
  s->compute_cycles = 0;
  s->input_bytes = positions * surface_bytes *
                   surfaces_touched(d->src_offset, d->src_stride, d->channels, per_surface);
  s->bytes_written = positions * surface_bytes *
                     surfaces_touched(d->dst_offset, d->dst_stride, d->channels, per_surface);
}

/* Whether op i is a CONV whose accumulators go on the fly to the SDP at i + 1 in any mode. */
static int conv_feeds_sdp(const resolved_chain* chain, int32_t i) {
  return i >= 0 && i + 1 < chain->num_ops && chain->ops[i].op->engine == ACCEL_ENGINE_CONV &&
         chain->ops[i].op->conv.precision != ACCEL_FP32;
}

void cost_chain(const accel_config* cfg, const resolved_chain* chain, const char* label,
                accel_run_stats* run, accel_op_stats* ops) {
  memset(run, 0, sizeof *run);
  snprintf(run->label, sizeof run->label, "%s", label != NULL ? label : "");
  run->mode = chain->mode;
  run->num_ops = chain->num_ops;
  const int fused = chain->mode == ACCEL_MODE_FUSED;
  int64_t longest_compute = 0, independent_cycles = 0;
  accel_precision precision = ACCEL_FP32;
  for (int32_t i = 0; i < chain->num_ops; ++i) {
    const resolved_op* r = &chain->ops[i];
    accel_op_stats* s = &ops[i];
    memset(s, 0, sizeof *s);
    s->engine = r->op->engine;
    const int input_on_chip = (fused && i > 0) || conv_feeds_sdp(chain, i - 1);
    const int output_on_chip = (fused && i + 1 < chain->num_ops) || conv_feeds_sdp(chain, i);
    switch (r->op->engine) {
      case ACCEL_ENGINE_CONV:
        s->precision = precision = r->op->conv.precision;
        cost_conv(cfg, r, output_on_chip, s);
        break;
      case ACCEL_ENGINE_SDP:
        s->precision = precision = r->op->sdp.precision;
        cost_sdp(cfg, r, input_on_chip, output_on_chip, s);
        break;
      case ACCEL_ENGINE_PDP:
        s->precision = precision = r->op->pdp.precision;
        cost_pdp(cfg, r, input_on_chip, s);
        break;
      case ACCEL_ENGINE_CDP:
        s->precision = precision = r->op->cdp.precision;
        cost_cdp(cfg, r, s);
        break;
      case ACCEL_ENGINE_BDMA: /* alone in its run: memory to memory */
        s->precision = precision = r->op->bdma.precision;
        cost_bdma(cfg, r, s);
        break;
      case ACCEL_ENGINE_COUNT: /* refused by chain_resolve */
        break;
    }
    finish_op(cfg, s);
    run->macs += s->macs;
    run->mac_cycles += s->mac_cycles;
    run->bytes_read += s->bytes_read;
    run->bytes_written += s->bytes_written;
    run->mac_energy_pj += s->mac_energy_pj;
    run->cbuf_energy_pj += s->cbuf_energy_pj;
    run->dram_energy_pj += s->dram_energy_pj;
    run->engine_energy_pj += s->engine_energy_pj;
    run->energy_pj += s->energy_pj;
    longest_compute = s->compute_cycles > longest_compute ? s->compute_cycles : longest_compute;
    independent_cycles += s->cycles;
  }
  if (fused) {
    const int64_t chain_memory = memory_cycles(cfg, run->bytes_read + run->bytes_written);
    run->cycles = longest_compute > chain_memory ? longest_compute : chain_memory;
  } else {
    run->cycles = independent_cycles;
  }
  const double peak = (double)accel_config_macs_per_cycle(cfg, precision);
  run->utilization = run->cycles > 0 ? (double)run->macs / ((double)run->cycles * peak) : 0.0;
}
