/* cost_model.c - what the modelled hardware spends on a chain: MACs, cycles, memory traffic.
 *
 * NVDLA's own estimate, per layer: time = the long pole of MAC-array cycles, DRAM transfer
 * cycles and on-chip SRAM (secondary memory) cycles. Specifics of this model:
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
 *   cycles for 3x3 stride 1 with aligned sizes. A grouped conv runs group by group (NVDLA's
 *   compiler splits it): C and K per group, the cycles times the groups. macs counts the 16 products per tile, folded
 *   channel and kernel over the real tiles (ceil(out/2) per side). The pre-transformed weights
 *   are 4x4 per kernel and folded channel, stored as FP16 halves, or as int16 for INT8 (4 G g
 *   G^T, accel.h): 16/9 of direct's weight bytes in FP16, 32/9 in INT8, read from memory and
 *   held in CBUF at that size (so they take as many more weight banks).
 * - CBUF is cbuf_banks banks, split per convolution between input data and weights in whole
 *   banks (the descriptor's data_banks / weight_banks, chosen by the code generator with
 *   accel_conv_banks(), NVDLA's compiler policy). What does not fit its banks is re-read: the
 *   input's shared rows when it streams in slices, the weights once per image or per slice
 *   (see conv_reads); a multi_batch conv fetches its weights once per group of the images its
 *   data banks hold. Sparse weights cost their mask and non-zero values.
 * - DRAM: every stream rounds up to whole bursts; each burst written costs the amortised
 *   read/write turnaround; a run (FUSED) or op (INDEPENDENT) that touches DRAM waits the read
 *   latency once. Streams the op's sram bits place in the secondary memory cost its
 *   bandwidth instead (memory_cycles: DRAM; sram_cycles: SRAM; the op takes the long pole).
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
 * - Direct mode, where the CACC's credits hold one stripe (nv_small int8): a kernel group's
 *   stripe also waits for the previous stripe's delivery to the SDP and the credits' round trip
 *   (cacc_credit_stall; from NVDLA's RTL), so a layer of few weight blocks per group (a 1x1
 *   conv of few channels, a depthwise conv) is bound by the delivery, not the MACs.
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
 *   its channels are spread over. A repeated copy (accel_bdma_desc.repeat) moves what its
 *   repeat + 1 copies would, repeat by repeat: one run's fixed cost instead of repeat + 1.
 * - Energy (accel.h, accel_config's per-action energies): each op's action counts times their
 *   energies. MACs are the useful ones (idle lanes are not charged). A CONV writes into CBUF the
 *   bytes it reads from memory (re-reads included); it reads one atomic-C entry of data per
 *   MAC-array cycle and, per stripe of ACCEL_CONV_STRIPE output positions, every atomic-C x
 *   atomic-K weight block of its loops once (Winograd: a block is 4x4 transformed weights of
 *   atomic_c / 16 folded channels, and its positions are the 2x2 output tiles). SDP, PDP, CDP: elements processed (the PDP's and
 *   CDP's input elements). Every byte read or written counts as DRAM traffic. A run's energy is
 *   the sum of its ops' in either mode (fusion saves the energy of the bytes it does not move).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cost_model.h"

/* src into dst (size bytes), cut to fit and terminated, as snprintf's "%s" (whose format
 * parsing, on every run's names and label, was about 0.5 % of a MobileNet's int8 inference);
 * returns the length written. */
static size_t copy_text(char* dst, size_t size, const char* src) {
  size_t n = 0;
  while (n + 1 < size && src[n] != '\0') ++n;
  memcpy(dst, src, n);
  dst[n] = '\0';
  return n;
}

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

/* Elements an engine processes for an n x c x h x w cube: it works on whole memory atoms, so
 * the channels pad up to the atom's (NVDLA's trace tests: sdp_1x1x1 and sdp_1x1x8 take the same
 * cycles and write the same bytes). */
static int64_t atom_elements(const accel_config* cfg, int64_t n, int64_t c, int64_t h, int64_t w,
                             accel_precision p) {
  return n * h * w * position_bytes(cfg, c, p) / hw_element_bytes(p);
}

/* Bytes per cycle the memory reads: its bandwidth, or one burst per accepted read request when
 * that is less (NVDLA's DMAs ask for one burst per request; dram_read_request_cycles 0: the
 * requests set no limit). */
static double dram_read_bytes_per_cycle(const accel_config* cfg) {
  const double beats = cfg->dram_bytes_per_s / cfg->clock_hz;
  if (cfg->dram_read_request_cycles <= 0) return beats;
  const double requests = (double)cfg->dram_burst_bytes / cfg->dram_read_request_cycles;
  return requests < beats ? requests : beats;
}

/* MAC-array cycles one weight block takes over `positions` output positions: the positions
 * go in stripes of ACCEL_CONV_STRIPE that share the block, and each stripe lasts at least the
 * cmac_weight_load_cycles the next block takes to load into the MAC cells. */
static int64_t stripe_cycles(const accel_config* cfg, int64_t positions) {
  const int64_t load = cfg->cmac_weight_load_cycles;
  const int64_t full = positions / ACCEL_CONV_STRIPE, rest = positions % ACCEL_CONV_STRIPE;
  return full * (ACCEL_CONV_STRIPE > load ? ACCEL_CONV_STRIPE : load) +
         (rest == 0 ? 0 : rest > load ? rest : load);
}

/* NVDLA's CACC returns the CSC one credit per output position it has delivered to the SDP, and
 * the CSC sends a stripe's last package (the one that completes its positions) only while it
 * holds credits for the whole stripe (NV_NVDLA_CSC_sg: credit_ready, credit_cnt starting at
 * NVDLA_CC_CREDIT_SIZE = 2 x atomic K). Where that pool is one stripe of ACCEL_CONV_STRIPE
 * positions (nv_small), a stripe that computes faster than the one before it is delivered
 * waits. The figures below are the RTL's pipeline (nvdla/hw, nv_small branch), not a fit. */

/* Cycles from the CSC popping a stripe's last package to the CACC reading that package's
 * first position from its delivery buffer: the CSC 22 (the package's flop 1; the data
 * loader's balance with its PRA cell 5 (CSC_DL_PRA_LATENCY) and its own pipe 4; the request
 * 2; CBUF's read 6 (NVDLA_CBUF_READ_LATENCY); the response, output and sc2mac flops 3);
 * CMAC 6 to the result's valid (input retiming 2, MAC_PD_LATENCY 2, output retiming 2);
 * CACC 8 (the calculator's 3 flops that align the data, CACC_CELL_FINAL_LATENCY 2, dlv_valid
 * 1, CACC_D_RAM_WRITE_LATENCY 1, the delivery buffer's entry count 1). */
#define CACC_FIRST_READ_CYCLES 36
/* Cycles from a position's last beat to the SDP to its credit counting in the CSC: the CACC's
 * credit flop, the CSC's input flop (the credit crosses a partition), credit_cnt. */
#define CACC_CREDIT_RETURN_CYCLES 3

/* The CACC's delivery buffer: each position's entry is atomic K accumulators wide whatever
 * the kernel group's count (a group of one kernel delivers the same 8 lanes on nv_small), sent
 * in atomic K / SDP throughput beats; the next entry is read only once the last beat has left
 * (NV_NVDLA_CACC_delivery_buffer: data_left_mask), one cycle more per position. */
typedef struct {
  int64_t beats;                       /* beats per position */
  int64_t next_read;                   /* earliest cycle the buffer reads its next entry */
  int64_t popped;                      /* positions whose last package the CSC has sent */
  int64_t credit[ACCEL_CONV_STRIPE];   /* when each of the last pool positions credits back */
  int64_t pop, len;                    /* the last stripe's pop cycle and package cycles */
} cacc_credits;

/* The CSC pops the last package of a stripe of `positions` (each of its `blocks` packages
 * `len` cycles in the CSC) at the later of when its packages are ready and when the pool
 * holds `positions` credits; its positions then enter the delivery buffer one a cycle.
 * Returns the cycles it waited for credits. */
static int64_t cacc_pop_stripe(cacc_credits* c, int64_t positions, int64_t blocks, int64_t len,
                               int first) {
  const int64_t pool = ACCEL_CONV_STRIPE;
  int64_t pop = first ? 0 : c->pop + c->len + (blocks - 1) * len, stall = 0;
  const int64_t need = c->popped + positions - pool;  /* positions that must have credited */
  if (!first && need > 0 && c->credit[(need - 1) % pool] > pop) {
    stall = c->credit[(need - 1) % pool] - pop;
    pop += stall;
  }
  for (int64_t m = 0; m < positions; ++m) {
    const int64_t ready = pop + CACC_FIRST_READ_CYCLES + m;
    const int64_t read = ready > c->next_read ? ready : c->next_read;
    c->credit[(c->popped + m) % pool] = read + c->beats + CACC_CREDIT_RETURN_CYCLES;
    c->next_read = read + c->beats + 1;
  }
  c->popped += positions, c->pop = pop, c->len = len;
  return stall;
}

/* Cycles the CSC waits for the CACC's credits over a direct convolution: per image, kernel
 * group after kernel group, each in stripes of ACCEL_CONV_STRIPE positions and a last shorter
 * one (stripe_cycles), each stripe `blocks` packages. A full stripe takes the whole pool, so
 * when it pops nothing else is in delivery: the full stripes after the first of a group each
 * wait the same, computed once. Charged where the pool, 2 x atomic K, is one stripe. */
static int64_t cacc_credit_stall(const accel_config* cfg, accel_precision p,
                                 int64_t groups_run, int64_t image, int64_t blocks) {
  if (2 * atomic_k_at(cfg, p) != ACCEL_CONV_STRIPE || cfg->sdp_throughput <= 0 ||
      groups_run <= 0 || image <= 0 || blocks <= 0)
    return 0;
  cacc_credits c = {.beats = ceil_div(atomic_k_at(cfg, p), cfg->sdp_throughput)};
  const int64_t full = image / ACCEL_CONV_STRIPE, rest = image % ACCEL_CONV_STRIPE;
  const int64_t full_len = stripe_cycles(cfg, ACCEL_CONV_STRIPE), rest_len = stripe_cycles(cfg, rest);
  /* a full stripe popped at 0 with nothing in delivery, and the next full one's wait */
  cacc_credits probe = {.beats = c.beats};
  cacc_pop_stripe(&probe, ACCEL_CONV_STRIPE, blocks, full_len, 1);
  const int64_t full_wait = cacc_pop_stripe(&probe, ACCEL_CONV_STRIPE, blocks, full_len, 0);
  int64_t stall = 0;
  for (int64_t group = 0; group < groups_run; ++group) {
    if (full > 0) {
      stall += cacc_pop_stripe(&c, ACCEL_CONV_STRIPE, blocks, full_len, group == 0);
      if (full > 2) {  /* the middle full stripes: each pops full_wait after its package time */
        const int64_t skipped = full - 2;
        stall += skipped * full_wait;
        c.pop += skipped * (blocks * full_len + full_wait);
        c.popped += skipped * ACCEL_CONV_STRIPE;
        for (int64_t m = 0; m < ACCEL_CONV_STRIPE; ++m)  /* the last skipped one's delivery */
          c.credit[(c.popped - ACCEL_CONV_STRIPE + m) % ACCEL_CONV_STRIPE] =
              c.pop + CACC_FIRST_READ_CYCLES + m * (c.beats + 1) + c.beats +
              CACC_CREDIT_RETURN_CYCLES;
        c.next_read = c.pop + CACC_FIRST_READ_CYCLES + ACCEL_CONV_STRIPE * (c.beats + 1);
      }
      if (full > 1) stall += cacc_pop_stripe(&c, ACCEL_CONV_STRIPE, blocks, full_len, 0);
    }
    if (rest > 0) stall += cacc_pop_stripe(&c, rest, blocks, rest_len, group == 0 && full == 0);
  }
  return stall;
}

/* The most input rows one output row reads that are stored (padding rows are not): its
 * window of `reach` rows clipped to the input, so at most the input's height (a kernel taller
 * than its input reads every row, never more). At least one row. */
static int64_t row_input_rows(const conv_geometry* g) {
  const int64_t reach = (int64_t)(g->kernel_h - 1) * g->dilation_h + 1;
  int64_t most = 1;
  for (int64_t y = 0; y < g->out_h && most < reach; ++y) {
    const int64_t top = y * g->stride_h - g->pad_top;
    const int64_t lo = top > 0 ? top : 0;
    const int64_t hi = top + reach < g->h ? top + reach : g->h;
    if (hi - lo > most) most = hi - lo;
  }
  return most;
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

/* Bytes of a conv's weights as stored: dense, or NVDLA's sparse format (a mask bit per weight,
 * the non-zero weights, a 4-byte group size per kernel group). */
static int64_t weight_stream_bytes(const accel_config* cfg, const conv_geometry* g,
                                   const accel_conv_desc* d) {
  const int64_t eb = hw_element_bytes(d->precision);
  const int64_t count = (int64_t)g->k * (g->c / g->groups) * g->kernel_h * g->kernel_w;
  if (d->weight_format != ACCEL_WEIGHTS_SPARSE) return count * eb;
  const int64_t kernel_groups =
      (int64_t)g->groups * ceil_div(g->k / g->groups, atomic_k_at(cfg, d->precision));
  return ceil_div(count, 8) + d->weights_nonzero * eb + 4 * kernel_groups;
}

/* Bytes of one kernel as CBUF holds it: Winograd's pre-transformed 4x4 per folded channel
 * (fp16 halves, int16 for INT8), else dense (sparse weights are expanded in CBUF). */
static int64_t stored_kernel_bytes(const conv_geometry* g, const accel_conv_desc* d) {
  if (d->mode == ACCEL_CONV_WINOGRAD) { /* equal strides: validated */
    return (int64_t)(g->c / g->groups) * g->stride_h * g->stride_h * 16 * 2;
  }
  return (int64_t)(g->c / g->groups) * g->kernel_h * g->kernel_w * hw_element_bytes(d->precision);
}

/* Bytes of a conv's weights as it reads them from memory: Winograd's pre-transformed weights,
 * else dense or sparse (weight_stream_bytes). */
static int64_t conv_weight_bytes(const accel_config* cfg, const conv_geometry* g,
                                 const accel_conv_desc* d) {
  if (d->mode == ACCEL_CONV_WINOGRAD) return (int64_t)g->k * stored_kernel_bytes(g, d);
  return weight_stream_bytes(cfg, g, d);
}

int64_t accel_conv_weight_bytes(const accel_config* cfg, const accel_conv_desc* conv,
                                int32_t in_c) {
  if (cfg == NULL || conv == NULL || in_c < 1 || conv->groups < 1 || conv->out_c < 1 ||
      in_c % conv->groups != 0 || conv->out_c % conv->groups != 0 || conv->kernel_h < 1 ||
      conv->kernel_w < 1 || conv->precision < ACCEL_INT8 || conv->precision >= ACCEL_PRECISION_COUNT ||
      cfg->atomic_k < 2) {
    accel_fail(ACCEL_ERR_INVALID, "accel_conv_weight_bytes: invalid conv or configuration");
    return 0;
  }
  const conv_geometry g = {.c = in_c, .k = conv->out_c, .kernel_h = conv->kernel_h,
                           .kernel_w = conv->kernel_w, .groups = conv->groups,
                           .stride_h = conv->stride_h, .stride_w = conv->stride_w};
  return conv_weight_bytes(cfg, &g, conv);
}

int64_t accel_feature_bytes(const accel_config* cfg, const accel_tensor* t) {
  if (cfg == NULL || t == NULL || cfg->memory_atom_bytes < 1 || t->n < 0 || t->c < 0 ||
      t->h < 0 || t->w < 0 || t->precision < ACCEL_INT8 || t->precision >= ACCEL_PRECISION_COUNT) {
    accel_fail(ACCEL_ERR_INVALID, "accel_feature_bytes: invalid tensor or configuration");
    return 0;
  }
  return feature_bytes(cfg, t->n, t->c, t->h, t->w, t->precision);
}

void conv_bank_needs(const accel_config* cfg, const conv_geometry* g, const accel_conv_desc* d,
                     conv_banks* out) {
  const accel_precision p = d->precision;
  const int64_t bank = cfg->cbuf_bytes / cfg->cbuf_banks;
  const int64_t row_bytes = input_row_bytes(cfg, g, p);
  const int64_t kernel_bytes = stored_kernel_bytes(g, d);
  const int64_t k_per_group = g->k / g->groups;
  const int64_t group_k = k_per_group < atomic_k_at(cfg, p) ? k_per_group : atomic_k_at(cfg, p);
  /* Multi-batch: the data banks are sized for a whole group of images (one weight fetch). */
  const int64_t images = g->multi_batch ? (g->n < ACCEL_MAX_BATCH ? g->n : ACCEL_MAX_BATCH) : 1;
  out->bank_bytes = bank;
  out->data_all = (int32_t)ceil_div(row_bytes * g->h * images, bank);
  out->data_min = (int32_t)ceil_div(row_bytes * row_input_rows(g), bank);
  out->weight_all = (int32_t)ceil_div((int64_t)g->k * kernel_bytes, bank);
  out->weight_min = (int32_t)ceil_div(group_k * kernel_bytes, bank);
  out->reserved = d->weight_format == ACCEL_WEIGHTS_SPARSE;
}

void conv_bank_policy(const conv_banks* need, int32_t banks, int32_t* data, int32_t* weights) {
  const int64_t free = (int64_t)banks - need->reserved;
  const int64_t options[3] = {need->weight_all, 2 * (int64_t)need->weight_min, need->weight_min};
  for (int i = 0; i < 3; ++i) {  /* the whole input with all, two or one kernel group(s) */
    if (options[i] + need->data_all <= free) {
      *data = need->data_all;
      *weights = (int32_t)options[i];
      return;
    }
  }
  /* Partial height: the weights within the compiler's default half of the banks. */
  int64_t w = need->weight_min;
  for (int i = 0; i < 3; ++i) {
    if (options[i] <= banks / 2) {
      w = options[i];
      break;
    }
  }
  /* A kernel group too large to sit beside one output row's input streams in parts. */
  const int64_t room = free - need->data_min > 1 ? free - need->data_min : 1;
  if (w > room) w = room;
  *weights = (int32_t)w;
  *data = (int32_t)(free - w > 1 ? free - w : 1);
}

void conv_bank_minimum(const conv_banks* need, int32_t banks, int32_t* data, int32_t* weights) {
  const int64_t free = (int64_t)banks - need->reserved;
  const int64_t room = free - need->data_min > 1 ? free - need->data_min : 1;
  *weights = (int32_t)(need->weight_min < room ? need->weight_min : room);
  *data = (int32_t)(need->data_min < free - 1 ? need->data_min : (free - 1 > 1 ? free - 1 : 1));
}

/* Input and weight bytes a convolution reads, for the whole batch, with `data_banks` and
 * `weight_banks` of CBUF (NVDLA's bank split):
 * - the input fits its banks: each image is read once; else it streams in horizontal slices of
 *   as many rows as its banks hold (at least one output row's), re-reading shared rows;
 * - the weights (conv_weight_bytes: Winograd's pre-transformed, or dense or sparse) fit theirs:
 *   read once for the batch; else they stream through once per image, or once per slice when
 *   the input is sliced too; a multi_batch conv whose input fits fetches them once per group of
 *   up to ACCEL_MAX_BATCH images its data banks hold together (NVDLA's multi-batch mode). */
static void conv_reads(const accel_config* cfg, const conv_geometry* g, const accel_conv_desc* d,
                       int32_t data_banks, int32_t weight_banks, int64_t* input_bytes,
                       int64_t* weight_bytes, int64_t* slices_out) {
  conv_banks need;
  conv_bank_needs(cfg, g, d, &need);
  const int64_t row_bytes = input_row_bytes(cfg, g, d->precision);
  const int64_t weights = conv_weight_bytes(cfg, g, d);
  const int64_t data_room = (int64_t)data_banks * need.bank_bytes;
  int64_t slices = 1;
  const int input_fits = row_bytes * g->h <= data_room;
  const int64_t image = sliced_input_reads(g, row_bytes, input_fits ? INT64_MAX : data_room,
                                           &slices);
  int64_t weight_passes = 1;
  if (need.weight_all > weight_banks) {
    int64_t batch = 1;
    if (g->multi_batch && input_fits) {
      batch = image > 0 ? data_room / image : 1;
      batch = batch < ACCEL_MAX_BATCH ? (batch > 1 ? batch : 1) : ACCEL_MAX_BATCH;
    }
    weight_passes = ceil_div(g->n, batch) * slices;
  }
  *input_bytes = image * g->n;
  *weight_bytes = weights * weight_passes;
  *slices_out = slices;
}

/* Cycles to bring a conv's input and weight bytes into CBUF, each stream from its memory
 * (accel_op.sram): the DRAM's at its read rate and the SRAM's at its bandwidth, in parallel. */
static int64_t conv_load_cycles(const accel_config* cfg, uint32_t sram, int64_t input,
                                int64_t weights) {
  const int64_t from_sram = (sram & ACCEL_SRAM_INPUT ? input : 0) +
                            (sram & ACCEL_SRAM_WEIGHTS ? weights : 0);
  const double dram = (double)(input + weights - from_sram) / dram_read_bytes_per_cycle(cfg);
  const double on_chip = from_sram > 0 && cfg->sram_bytes_per_s > 0
                             ? (double)from_sram * cfg->clock_hz / cfg->sram_bytes_per_s
                             : 0.0;
  return (int64_t)ceil(dram > on_chip ? dram : on_chip);
}

static void cost_conv(const accel_config* cfg, const resolved_op* r, int output_on_chip,
                      accel_op_stats* s) {
  const conv_geometry* g = &r->conv;
  const accel_conv_desc* d = &r->op->conv;
  const accel_precision p = d->precision;
  const int64_t c_group = g->c / g->groups, k_group = g->k / g->groups;
  const int64_t positions = (int64_t)g->n * g->out_h * g->out_w;
  const int winograd = r->op->conv.mode == ACCEL_CONV_WINOGRAD;
  copy_text(s->op, sizeof s->op, winograd ? "conv2d_winograd" :
            g->pixel_bytes ? "conv2d_image" :
            g->multi_batch ? "conv2d_batch" : g->groups == 1 ? "conv2d" :
            (c_group == 1 && k_group == 1) ? "conv2d_depthwise" : "conv2d_grouped");
  s->macs = positions * g->k * c_group * g->kernel_h * g->kernel_w;
  /* The weight blocks the MAC array loads, each once per stripe of its data positions. */
  int64_t weight_blocks = (int64_t)g->groups * ceil_div(c_group, cfg->atomic_c) *
                          ceil_div(k_group, atomic_k_at(cfg, p)) * g->kernel_h * g->kernel_w;
  int64_t block_positions = positions;
  if (winograd) { /* equal strides, feature data: validated; each group on its own */
    const int64_t folded_c = c_group * g->stride_h * g->stride_h;
    const int64_t lanes = cfg->atomic_c >= 16 ? cfg->atomic_c / 16 : 1;
    /* An array narrower than a 4x4 tile (atomic C < 16) takes 16 / atomic C cycles per tile
     * and channel: it performs at most atomic C x atomic K products a cycle, as in direct
     * mode, so utilisation (the products performed over the array's) stays within 100 %. */
    const int64_t passes = cfg->atomic_c >= 16 ? 1 : ceil_div(16, cfg->atomic_c);
    s->macs = (int64_t)g->n * ceil_div(g->out_h, 2) * ceil_div(g->out_w, 2) * 16 * folded_c *
              g->k;
    /* each block: 4x4 transformed weights of `lanes` channels, one per 2x2 output tile */
    block_positions = (int64_t)g->n * ceil_div(g->out_h, 4) * 2 * ceil_div(g->out_w, 4) * 2;
    weight_blocks = (int64_t)g->groups * ceil_div(folded_c, lanes) *
                    ceil_div(k_group, atomic_k_at(cfg, p));
    s->mac_cycles = block_positions * weight_blocks * passes;
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
  /* Direct mode: a stripe shorter than a weight block's load waits for the load. A stripe
   * holds one image's positions, or in multi-batch mode the whole batch's (NVDLA's batch
   * mode exists to lengthen the stripes of fully connected layers). */
  int64_t busy = s->mac_cycles;
  if (!winograd && !g->pixel_bytes) {
    const int64_t image = (int64_t)g->out_h * g->out_w;
    busy = g->multi_batch ? weight_blocks * stripe_cycles(cfg, image * g->n)
                          : (int64_t)g->n * weight_blocks * stripe_cycles(cfg, image);
    const int64_t kernel_groups = (int64_t)g->groups * ceil_div(k_group, atomic_k_at(cfg, p));
    if (!g->multi_batch)
      busy += cacc_credit_stall(cfg, p, g->n * kernel_groups, image, weight_blocks / kernel_groups);
  }
  s->data_banks = r->data_banks, s->weight_banks = r->weight_banks;
  int64_t slices = 1, once_input = 0, once_weights = 0, one = 1;
  conv_reads(cfg, g, d, r->data_banks, r->weight_banks, &s->input_bytes, &s->weight_bytes,
             &slices);
  once_input = sliced_input_reads(g, input_row_bytes(cfg, g, p), INT64_MAX, &one) * g->n;
  once_weights = conv_weight_bytes(cfg, g, d);
  s->reread_bytes = s->input_bytes + s->weight_bytes - once_input - once_weights;
  /* CBUF loading (NVDLA's CDMA fills the banks, then CSC and CMAC start): the first MAC waits
   * for the input its data banks hold and the first kernel group's weights; later kernel
   * groups, images and slices load while the array works on the earlier ones, and the work
   * on the last of them (the tail) follows the last byte loaded. The CONV's compute_cycles
   * are this span, from its first data to its last MAC: the longer of the two paths. */
  const int64_t kernel_groups = (int64_t)g->groups * ceil_div(k_group, atomic_k_at(cfg, p));
  const int64_t first_kernels = k_group < atomic_k_at(cfg, p) ? k_group : atomic_k_at(cfg, p);
  const int64_t data_room = (int64_t)r->data_banks * (cfg->cbuf_bytes / cfg->cbuf_banks);
  const int64_t image_input = once_input / (g->n > 0 ? g->n : 1);
  const int64_t first_input = image_input < data_room || data_room <= 0 ? image_input : data_room;
  const int64_t first_weights = once_weights * first_kernels / (g->k > 0 ? g->k : 1);
  const int64_t tail = busy / ((int64_t)g->n * kernel_groups * slices);
  s->compute_cycles = busy + conv_load_cycles(cfg, r->op->sram, first_input, first_weights);
  const int64_t loaded = conv_load_cycles(cfg, r->op->sram, s->input_bytes, s->weight_bytes) + tail;
  if (loaded > s->compute_cycles) s->compute_cycles = loaded;
  s->bytes_written =
      output_on_chip ? 0 : feature_bytes(cfg, g->n, g->k, g->out_h, g->out_w, p);
  /* CBUF: what CDMA brings in is written once; the MAC array reads one atomic-C entry of data
   * per cycle and each weight block of its loops once per stripe of output positions. */
  const int64_t eb = hw_element_bytes(p);
  s->cbuf_write_bytes = s->input_bytes + s->weight_bytes;
  s->cbuf_read_bytes = s->mac_cycles * cfg->atomic_c * eb +
                       ceil_div(block_positions, ACCEL_CONV_STRIPE) * weight_blocks *
                           cfg->atomic_c * atomic_k_at(cfg, p) * eb;
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
  const int x_units = sdp_desc_has_x(d);
  const char* parts[4] = {x_units ? "x" : "", affine ? "scale_shift" : "", ew_names[d->ew_op],
                          activation_name(d->act)};
  for (int i = 0; i < 4 && used + 1 < sizeof name; ++i) {
    if (parts[i][0] == '\0') continue;
    used += copy_text(name + used, sizeof name - used, used == 3 ? ":" : "+");
    used += copy_text(name + used, sizeof name - used, parts[i]);
  }
  copy_text(s->op, sizeof s->op, d->convert ? "sdp:convert" : name);
  const int64_t elements = (int64_t)r->in_n * r->in_c * r->in_h * r->in_w;
  const int64_t tensor = feature_bytes(cfg, r->in_n, r->in_c, r->in_h, r->in_w, p);
  const int uses_y_unit = d->ew_op != ACCEL_EW_NONE || lut_activation(d->act) || x_units;
  s->compute_cycles = ceil_div(atom_elements(cfg, r->in_n, r->in_c, r->in_h, r->in_w, p),
                               uses_y_unit ? cfg->sdp_ew_throughput : cfg->sdp_throughput);
  s->engine_energy_pj = (double)elements * cfg->sdp_pj_per_element;
  const int64_t per_channel =
      p == ACCEL_INT8 ? 4 * (d->bias != NULL) + 2 * (d->mul != NULL) + (d->rshift != NULL) +
                            2 * (d->act == ACCEL_ACT_PRELU)
                      : ((d->scale != NULL) + (d->shift != NULL) + (d->act == ACCEL_ACT_PRELU)) *
                            hw_element_bytes(p);
  s->weight_bytes = per_channel * r->in_c;
  s->input_bytes = input_on_chip ? 0 : tensor;
  /* a per-channel operand (ew_per_channel) is read once per image and channel */
  s->operand_bytes = d->ew_op == ACCEL_EW_NONE ? 0
                     : d->ew_per_channel ? (int64_t)r->in_n * r->in_c * hw_element_bytes(p)
                                         : tensor;
  /* the X units' operands (accel_sdp_x): a per-element one is read as a tensor, a per-channel
   * one once per channel, each by its unit's own read DMA */
  const accel_sdp_x* units[2] = {&d->x1, &d->x2};
  for (int u = 0; u < 2; ++u) {
    const void* ops[2] = {units[u]->alu, units[u]->mul};
    const int32_t unit_per_channel[2] = {units[u]->alu_per_channel, units[u]->mul_per_channel};
    for (int k = 0; k < 2; ++k) {
      if (ops[k] == NULL) continue;
      if (unit_per_channel[k]) {
        s->weight_bytes += (int64_t)r->in_c * hw_element_bytes(p);
      } else {
        s->operand_bytes += tensor;
      }
    }
  }
  /* A converting SDP writes the other precision (accel_sdp_desc.convert). */
  const int64_t written =
      d->convert ? feature_bytes(cfg, r->in_n, r->in_c, r->in_h, r->in_w,
                                 run_output_precision(r->op, p))
                 : tensor;
  s->bytes_written = output_on_chip ? 0 : written;
}

/* Windows still open past the image's end on one axis, which NVDLA's PDP flushes after it
 * (floor(far padding / stride), at most 7), and how many of those it flushes in bubbles at the
 * end of each but the last line (or surface): the ones the next line's first outputs do not
 * overlap (NV_NVDLA_PDP_CORE_cal1d / cal2d: flush_num, first_out_num, bubble_num). */
static void pdp_flush(int64_t out, int64_t stride, int64_t kernel, int64_t size, int64_t pad,
                      int64_t* at_end, int64_t* between) {
  const int64_t far_pad = (out - 1) * stride + kernel - size - pad;
  int64_t flush = far_pad > 0 ? far_pad / stride : 0;
  if (flush > 7) flush = 7;
  int64_t first_out = kernel - pad;
  if (flush > 0 && size <= 8 && size + pad < kernel) {
    /* A small image (its first window reaches past it): only the far padding beyond that
     * window, when it is a whole number (1 to 6) of strides, is flushed. */
    const int64_t remain = size + pad + far_pad - kernel;
    flush = remain > 0 && remain % stride == 0 && remain / stride <= 6 ? remain / stride : 0;
    first_out = size;
  }
  *at_end = flush;
  *between = flush > 0 && flush >= first_out ? flush - first_out + 1 : 0;
}

static void cost_pdp(const accel_config* cfg, const resolved_op* r, int input_on_chip,
                     accel_op_stats* s) {
  const pdp_geometry* g = &r->pdp;
  const accel_precision p = r->op->pdp.precision;
  copy_text(s->op, sizeof s->op, g->pool == ACCEL_POOL_MAX ? "pdp:max" : "pdp:avg");
  s->compute_cycles = ceil_div(atom_elements(cfg, g->n, g->c, g->h, g->w, p), cfg->pdp_throughput);
  /* While it flushes, the PDP takes no input: each bubble is one output position (a line of
   * out_w positions in height) at the atom's elements per cycle. Pads up to stride - 1 (the
   * usual pooling) flush nothing. */
  const int64_t surfaces = g->n * (position_bytes(cfg, g->c, p) / cfg->memory_atom_bytes);
  int64_t end_w, between_w, end_h, between_h;
  pdp_flush(g->out_w, g->stride_w, g->kernel_w, g->w, g->pad_left, &end_w, &between_w);
  pdp_flush(g->out_h, g->stride_h, g->kernel_h, g->h, g->pad_top, &end_h, &between_h);
  const int64_t bubbles = (surfaces * g->h - 1) * between_w + end_w +
                          ((surfaces - 1) * between_h + end_h) * g->out_w;
  s->compute_cycles += ceil_div(bubbles * atom_elements(cfg, 1, 1, 1, 1, p), cfg->pdp_throughput);
  s->engine_energy_pj = (double)g->n * g->c * g->h * g->w * cfg->pdp_pj_per_element;
  s->input_bytes = input_on_chip ? 0 : feature_bytes(cfg, g->n, g->c, g->h, g->w, p);
  s->bytes_written = feature_bytes(cfg, g->n, g->c, g->out_h, g->out_w, p);
}

/* The CDP reads its input from memory and writes its output there (never on the fly). */
static void cost_cdp(const accel_config* cfg, const resolved_op* r, accel_op_stats* s) {
  const cdp_geometry* g = &r->cdp;
  const accel_precision p = r->op->cdp.precision;
  copy_text(s->op, sizeof s->op, "cdp:lrn");
  s->compute_cycles = ceil_div(atom_elements(cfg, g->n, g->c, g->h, g->w, p), cfg->cdp_throughput);
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
  copy_text(s->op, sizeof s->op, "bdma:copy");
  s->compute_cycles = 0;
  /* each repeat moves its line's surfaces: the bytes of repeat + 1 one-level copies */
  int64_t read = 0, written = 0;
  for (int64_t k = 0; k <= d->repeat; ++k) {
    read += surfaces_touched(d->src_offset + k * d->src_repeat_stride, d->src_stride,
                             d->channels, per_surface);
    written += surfaces_touched(d->dst_offset + k * d->dst_repeat_stride, d->dst_stride,
                                d->channels, per_surface);
  }
  s->input_bytes = positions * surface_bytes * read;
  s->bytes_written = positions * surface_bytes * written;
}

/* RUBIK contract (memory to memory, like the BDMA): it reads the channel-extended cube once and
 * writes the contracted one once. The input is stored as its sx*sy phase groups, each starting
 * on its own atom surface (NVDLA's D_CONTRACT_STRIDE_0 = ceil(C' x bytes / 32) surfaces per
 * group: the convolution that wrote each phase padded its C' channels to whole atoms); the
 * output is a feature tensor of C' channels. Its data path moves rubik_bytes_per_cycle bytes
 * per cycle each way (reads and writes overlap), so its compute cycles are the larger
 * stream over that width; the memory is usually the long pole. No engine energy: like the
 * BDMA's copies, its energy is the bytes it moves (finish_op). */
static void cost_rubik(const accel_config* cfg, const resolved_op* r, accel_op_stats* s) {
  const accel_rubik_desc* d = &r->op->rubik;
  const int64_t phases = (int64_t)d->stride_x * d->stride_y;
  const int64_t positions = (int64_t)r->in_n * r->in_h * r->in_w;
  copy_text(s->op, sizeof s->op, "rubik:contract");
  s->input_bytes = positions * phases * position_bytes(cfg, r->out_c, d->precision);
  s->bytes_written = feature_bytes(cfg, r->out_n, r->out_c, r->out_h, r->out_w, d->precision);
  const int64_t larger = s->input_bytes > s->bytes_written ? s->input_bytes : s->bytes_written;
  s->compute_cycles = ceil_div(larger, cfg->rubik_bytes_per_cycle);
}

/* Where an op's bytes go. Every stream is in DRAM unless the op's accel_op.sram bit puts it in
 * the secondary memory (a CONV's weights may be there; SDP parameters always come from DRAM);
 * DRAM moves whole bursts, each stream rounded up. */
static int64_t round_to_bursts(const accel_config* cfg, int64_t bytes) {
  return ceil_div(bytes, cfg->dram_burst_bytes) * cfg->dram_burst_bytes;
}

static void place_streams(const accel_config* cfg, uint32_t sram, accel_op_stats* s) {
  const int64_t reads[3] = {s->input_bytes, s->operand_bytes, s->weight_bytes};
  const uint32_t bits[3] = {ACCEL_SRAM_INPUT, ACCEL_SRAM_OPERAND,
                            s->engine == ACCEL_ENGINE_CONV ? ACCEL_SRAM_WEIGHTS : 0};
  for (int i = 0; i < 3; ++i) {
    if (sram & bits[i]) {
      s->sram_read_bytes += reads[i];
    } else {
      s->dram_read_bytes += round_to_bursts(cfg, reads[i]);
    }
  }
  if (sram & ACCEL_SRAM_OUTPUT) {
    s->sram_write_bytes = s->bytes_written;
  } else {
    s->dram_write_bytes = round_to_bursts(cfg, s->bytes_written);
  }
}

/* DRAM cycles of some traffic: its bytes at the bandwidth (the reads no faster than the read
 * requests go), the turnaround per burst written, and the latency of the first read, which
 * nothing hides when the transfer is short. */
static int64_t dram_cycles(const accel_config* cfg, int64_t read_bytes, int64_t write_bytes) {
  if (read_bytes + write_bytes == 0) return 0;
  const double both = (double)(read_bytes + write_bytes) * cfg->clock_hz / cfg->dram_bytes_per_s;
  const double reads = (double)read_bytes / dram_read_bytes_per_cycle(cfg);
  const double transfer = reads > both ? reads : both;
  const double turnaround =
      (double)(write_bytes / cfg->dram_burst_bytes) * cfg->dram_turnaround_cycles;
  return cfg->dram_latency_cycles + (int64_t)ceil(transfer + turnaround);
}

static int64_t sram_cycles(const accel_config* cfg, int64_t bytes) {
  if (bytes == 0 || cfg->sram_bytes_per_s <= 0) return 0;
  return (int64_t)ceil((double)bytes * cfg->clock_hz / cfg->sram_bytes_per_s);
}

static int64_t max3(int64_t a, int64_t b, int64_t c) {
  const int64_t ab = a > b ? a : b;
  return ab > c ? ab : c;
}

/* An engine's fixed cycles per layer (accel_config's *_pipeline_cycles). */
static int64_t pipeline_cycles(const accel_config* cfg, accel_engine engine) {
  switch (engine) {
    case ACCEL_ENGINE_CONV: return cfg->conv_pipeline_cycles;
    case ACCEL_ENGINE_SDP: return cfg->sdp_pipeline_cycles;
    case ACCEL_ENGINE_PDP: return cfg->pdp_pipeline_cycles;
    case ACCEL_ENGINE_CDP: return cfg->cdp_pipeline_cycles;
    default: return 0;
  }
}

/* A layer's cycles: its engines' fixed pipeline cycles, then the long pole of the compute
 * (which starts when the first read returns, dram_latency_cycles after the start) and the
 * transfers. */
static int64_t layer_cycles(const accel_config* cfg, int64_t pipeline, int64_t compute,
                            int64_t dram_read, int64_t memory, int64_t sram) {
  const int64_t wait = dram_read > 0 ? cfg->dram_latency_cycles : 0;
  return pipeline + max3(compute + wait, memory, sram);
}

static void finish_op(const accel_config* cfg, uint32_t sram, accel_op_stats* s) {
  s->bytes_read = s->input_bytes + s->weight_bytes + s->operand_bytes;
  place_streams(cfg, sram, s);
  s->memory_cycles = dram_cycles(cfg, s->dram_read_bytes, s->dram_write_bytes);
  s->sram_cycles = sram_cycles(cfg, s->sram_read_bytes + s->sram_write_bytes);
  s->cycles = layer_cycles(cfg, pipeline_cycles(cfg, s->engine), s->compute_cycles,
                           s->dram_read_bytes, s->memory_cycles, s->sram_cycles);
  /* The memory interfaces' energy: DRAM bytes as moved (whole bursts) and SRAM bytes. */
  s->dram_energy_pj = (double)(s->dram_read_bytes + s->dram_write_bytes) * cfg->dram_pj_per_byte +
                      (double)(s->sram_read_bytes + s->sram_write_bytes) * cfg->sram_pj_per_byte;
  s->energy_pj = s->mac_energy_pj + s->cbuf_energy_pj + s->dram_energy_pj + s->engine_energy_pj;
}

/* Whether op i is a CONV whose accumulators go on the fly to the SDP at i + 1 in any mode. */
static int conv_feeds_sdp(const resolved_chain* chain, int32_t i) {
  return i >= 0 && i + 1 < chain->num_ops && chain->ops[i].op->engine == ACCEL_ENGINE_CONV &&
         chain->ops[i].op->conv.precision != ACCEL_FP32;
}

int op_input_on_chip(const resolved_chain* chain, int32_t i) {
  return (chain->mode == ACCEL_MODE_FUSED && i > 0) || conv_feeds_sdp(chain, i - 1);
}

int op_output_on_chip(const resolved_chain* chain, int32_t i) {
  return (chain->mode == ACCEL_MODE_FUSED && i + 1 < chain->num_ops) || conv_feeds_sdp(chain, i);
}

int64_t stored_feature_bytes(const accel_config* cfg, int64_t n, int64_t c, int64_t h, int64_t w,
                             accel_precision p) {
  return feature_bytes(cfg, n, c, h, w, p);
}

void cost_chain(const accel_config* cfg, const resolved_chain* chain, const char* label,
                accel_run_stats* run, accel_op_stats* ops) {
  memset(run, 0, sizeof *run);
  copy_text(run->label, sizeof run->label, label != NULL ? label : "");
  run->mode = chain->mode;
  run->num_ops = chain->num_ops;
  const int fused = chain->mode == ACCEL_MODE_FUSED;
  int64_t longest_compute = 0, independent_cycles = 0, dram_read = 0, dram_write = 0;
  int64_t pipeline = 0;
  accel_precision precision = ACCEL_FP32;
  for (int32_t i = 0; i < chain->num_ops; ++i) {
    const resolved_op* r = &chain->ops[i];
    accel_op_stats* s = &ops[i];
    memset(s, 0, sizeof *s);
    s->engine = r->op->engine;
    const int input_on_chip = op_input_on_chip(chain, i);
    const int output_on_chip = op_output_on_chip(chain, i);
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
      case ACCEL_ENGINE_RUBIK: /* alone in its run: memory to memory */
        s->precision = precision = r->op->rubik.precision;
        cost_rubik(cfg, r, s);
        break;
      case ACCEL_ENGINE_COUNT: /* refused by chain_resolve */
        break;
    }
    finish_op(cfg, r->op->sram, s);
    pipeline += pipeline_cycles(cfg, s->engine);
    run->macs += s->macs;
    run->mac_cycles += s->mac_cycles;
    run->bytes_read += s->bytes_read;
    run->bytes_written += s->bytes_written;
    run->mac_energy_pj += s->mac_energy_pj;
    run->cbuf_energy_pj += s->cbuf_energy_pj;
    run->dram_energy_pj += s->dram_energy_pj;
    run->engine_energy_pj += s->engine_energy_pj;
    run->energy_pj += s->energy_pj;
    dram_read += s->dram_read_bytes;
    dram_write += s->dram_write_bytes;
    run->sram_bytes += s->sram_read_bytes + s->sram_write_bytes;
    run->memory_cycles += s->memory_cycles;
    run->sram_cycles += s->sram_cycles;
    longest_compute = s->compute_cycles > longest_compute ? s->compute_cycles : longest_compute;
    independent_cycles += s->cycles;
  }
  run->dram_bytes = dram_read + dram_write;
  if (fused) {  /* one pipeline: one first-read latency, the whole traffic */
    run->memory_cycles = dram_cycles(cfg, dram_read, dram_write);
    run->sram_cycles = sram_cycles(cfg, run->sram_bytes);
    run->cycles = layer_cycles(cfg, pipeline, longest_compute, dram_read, run->memory_cycles,
                               run->sram_cycles);
  } else {
    run->cycles = independent_cycles;
  }
  const double peak = (double)accel_config_macs_per_cycle(cfg, precision);
  run->utilization = run->cycles > 0 ? (double)run->macs / ((double)run->cycles * peak) : 0.0;
}
