/* config.c - the hardware presets (the only copy of these constants) and config checks.
 *
 * Figures from NVDLA's published configurations (hw/spec/defs/nv_*.spec and the primer):
 * MAC array atomic C x K, CBUF size, memory atom, SDP/PDP throughputs, precisions. The clock is
 * the primer's 1 GHz; DRAM bandwidths are our assumptions within the primer's 1..20 GB/s range.
 * Every preset has the CDP (the notes list no CDP among nv_small's missing units); its
 * throughput follows the PDP's, as the notes give for nv_large (PDP/CDP 8) and nv_small (1).
 * nv_small has no BDMA: NVDLA's nv_small.spec defines BDMA_DISABLE (with
 * SECONDARY_MEMIF_DISABLE); nv_large and nv_full have it.
 *
 * Energies per action (picojoules) from Horowitz, "Computing's energy problem (and what we can
 * do about it)", ISSCC 2014, 45 nm, 0.9 V: integer add 8/32-bit 0.03/0.1, multiply 8-bit 0.2;
 * fp add 16/32-bit 0.4/0.9, fp multiply 16/32-bit 1.1/3.7; a 64-bit (8-byte) SRAM read of an
 * 8 KB / 32 KB / 1 MB array 10 / 20 / 100; DRAM 1.3-2.6 nJ per 64 bits. Derived:
 *   mac_int8_pj        0.2 (8-bit mult) + 0.1 (32-bit add: the int32 accumulator) = 0.3
 *   mac_fp16_pj        1.1 (fp16 mult) + 0.9 (fp32 add: the fp32 accumulator)     = 2.0
 *   cbuf (read, write) per byte of one bank: nv_full / nv_large 32 KiB banks 20 / 8 = 2.5;
 *                      nv_small 4 KiB banks, the table's smallest (8 KB) row: 10 / 8 = 1.25;
 *                      the table gives one figure per access: a write is charged as a read
 *   dram_pj_per_byte   1.3 nJ / 8 = 162.5 (the low end of the range)
 *   sram_pj_per_byte   the 1 MB row: 100 / 8 = 12.5
 *   sdp_pj_per_element a 32-bit multiply and add (fp32 datapath; int32 for int8): 3.7 + 0.9 = 4.6
 *   pdp_pj_per_element a 32-bit add (a max compares: charged as an add)           = 0.9
 *   cdp_pj_per_element square 3.7 + window sum in and out 2 x 0.9 + the scaling multiply 3.7
 *                      = 9.2 (the power's lookup table is not charged)
 *
 * Image input: every preset (the CDMA's image path, cdma/NV_NVDLA_CDMA_img.v, is in every
 * configuration's RTL; no spec switch removes it). Multi-batch: nv_full only (nv_large.spec and
 * nv_small.spec define BATCH_DISABLE; nvdla/sw's TargetConfig gives batch mode to nv_full, with
 * a maximum batch of 32).
 * Memory system (ABI 5), from the same spec files where they say it:
 * - cbuf_banks: CBUF_BANK_NUMBER (nv_full, nv_large 16 banks of 512 x 64 B = 32 KiB; nv_small
 *   32 banks of 512 x 8 B = 4 KiB).
 * - dram_burst_bytes: PRIMARY_MEMIF_WIDTH x PRIMARY_MEMIF_MAX_BURST_LENGTH (1 in every spec):
 *   the smallest request the DMA makes, 512 bits (nv_full), 256 (nv_large), 64 (nv_small).
 * - dram_latency_cycles: PRIMARY_MEMIF_LATENCY, the read latency the DMA's buffers are sized to
 *   cover (1200, 1024, 64 cycles): a run waits it once for its first data.
 * - dram_turnaround_cycles: an assumption (the specs say nothing): a DDR4-class read->write->
 *   read switch costs about 15 ns (tWTR_L 7.5 ns plus the read-to-write gap), and a controller
 *   that groups writes 32 bursts at a time spreads it to 0.5 cycle per burst written at 1 GHz.
 * - sram_bytes: 0 in every preset: SECONDARY_MEMIF_ENABLE (nv_full, nv_large) gives the
 *   interface, the SoC decides whether an SRAM sits behind it (set sram_bytes to model one).
 *   sram_bytes_per_s: SECONDARY_MEMIF_WIDTH at the 1 GHz clock (512 bits: 64 GB/s, 256 bits:
 *   32 GB/s); nv_small has no secondary interface (0).
 * - ACCEL_FEATURE_WEIGHT_COMPRESSION: WEIGHT_COMPRESSION_ENABLE in nv_full only.
 *
 * Calibrated against NVDLA's nv_small RTL (ABI 8; the 70 trace tests the RTL passes, their
 * cycles to the last output write in ../shared/nvdla-traces/rtl_results.tsv; docs/nvdla_rtl.md
 * has the per-test table). Played with the testbench's memory (32 cycles of read latency, one
 * 8-byte beat per cycle, a read request every other cycle):
 * - dram_read_request_cycles: the memory accepts a read request (one burst) every this many
 *   cycles; 0: no limit beyond the bandwidth, every preset's (a DRAM controller queues
 *   requests, and the presets' bandwidths are already assumptions); the testbench's 2 is the
 *   rate at which the convolutions' CBUF loading runs in dc_8x8x36_4x4x36x16_dilation,
 *   dc_6x8x192_3x3x192x32 and dc_4x1x8192_1x1x8192x1 (8-byte requests: 4 bytes per cycle).
 * - cmac_weight_load_cycles: one atomic-C x atomic-K weight block goes into the MAC cells one
 *   kernel per cycle from nv_small's 8-byte CBUF entries: atomic K = 8 cycles; a stripe of
 *   fewer output positions waits for it (dc_6x8x192: 6 positions, dc_8x8x36: 4,
 *   dc_4x1x8192: 2; all three are off by 30-70 % without it). nv_large / nv_full: 16, NVDLA's
 *   normal stripe (ACCEL_CONV_STRIPE) hides it, as their 64-byte entries deliver a kernel's
 *   atomic C per cycle; not validated against an RTL.
 * - *_pipeline_cycles: per layer and engine, from its first register write to its last output
 *   write, beyond the read latency and the data's own cycles: programming, pipeline fill and
 *   drain, the write's latency. Fitted to the smallest tests and the constant part of the
 *   streaming ones: SDP 52 (sdp_1x1x1 86 cycles, every SDP cube takes 78-96 more than its
 *   elements), PDP 54 (pdp_1x1x1 94, pdp_8x8x32_1x1 2,133 for 2,048 elements), CDP 80
 *   (cdp_1x1x1 120, cdp_1x1x31 144), CONV 86 on top of the SDP it feeds (dc_1x1x8_1x1x8x1 179,
 *   the large convolutions' constant). Pipeline depths in cycles do not grow with the array
 *   width: nv_large and nv_full take nv_small's (unvalidated).
 *
 * RUBIK (ABI 9): nv_small.spec defines RUBIK_DISABLE (the hardware manual's small example:
 * "Rubik function support = No"). rubik_bytes_per_cycle: an assumption (the documents give
 * no RUBIK rate, only its 80-100 % memory efficiency): one beat of its memory interface per
 * cycle each way, PRIMARY_MEMIF_WIDTH: 64 bytes (nv_full's 512 bits), 32 (nv_large's 256),
 * 8 (nv_small's 64, unused there).
 */
#include <math.h>
#include <string.h>

#include "internal.h"

#define BIT(p) (1u << (p))
/* The 45 nm energies above (their arithmetic is there); only the CBUF's, which depends on the
 * bank size, differs between presets. */
#define ENERGY_45NM(cbuf_pj)                                                                 \
  .mac_int8_pj = 0.3, .mac_fp16_pj = 2.0, .cbuf_read_pj_per_byte = (cbuf_pj),                \
  .cbuf_write_pj_per_byte = (cbuf_pj), .dram_pj_per_byte = 162.5, .sram_pj_per_byte = 12.5,  \
  .sdp_pj_per_element = 4.6, .pdp_pj_per_element = 0.9, .cdp_pj_per_element = 9.2

/* The figures fitted to nv_small's RTL above that every preset shares. */
#define RTL_CALIBRATED                                                                       \
  .dram_read_request_cycles = 0, .conv_pipeline_cycles = 86, .sdp_pipeline_cycles = 52,      \
  .pdp_pipeline_cycles = 54, .cdp_pipeline_cycles = 80

static const accel_config presets[] = {
    {.name = "nv_small", .atomic_c = 8, .atomic_k = 8, .cbuf_bytes = 128 * 1024,
     .memory_atom_bytes = 8, .sdp_throughput = 1, .sdp_ew_throughput = 1, .pdp_throughput = 1,
     .cdp_throughput = 1, .clock_hz = 1e9, .dram_bytes_per_s = 2e9,
     .precisions = BIT(ACCEL_INT8), .features = ACCEL_FEATURE_CDP | ACCEL_FEATURE_IMAGE_INPUT,
     .cbuf_banks = 32, .dram_burst_bytes = 8, .dram_latency_cycles = 64,
     .dram_turnaround_cycles = 0.5, .sram_bytes = 0, .sram_bytes_per_s = 0,
     .cmac_weight_load_cycles = 8, RTL_CALIBRATED, .rubik_bytes_per_cycle = 8,
     ENERGY_45NM(1.25)},
    {.name = "nv_large", .atomic_c = 64, .atomic_k = 32, .cbuf_bytes = 512 * 1024,
     .memory_atom_bytes = 32, .sdp_throughput = 16, .sdp_ew_throughput = 4, .pdp_throughput = 8,
     .cdp_throughput = 8, .clock_hz = 1e9, .dram_bytes_per_s = 10e9,
     .precisions = BIT(ACCEL_INT8),
     .features = ACCEL_FEATURE_LUT | ACCEL_FEATURE_ELEMENTWISE | ACCEL_FEATURE_RUBIK |
                 ACCEL_FEATURE_CDP | ACCEL_FEATURE_BDMA | ACCEL_FEATURE_IMAGE_INPUT,
     .cbuf_banks = 16, .dram_burst_bytes = 32, .dram_latency_cycles = 1024,
     .dram_turnaround_cycles = 0.5, .sram_bytes = 0, .sram_bytes_per_s = 32e9,
     .cmac_weight_load_cycles = ACCEL_CONV_STRIPE, RTL_CALIBRATED, .rubik_bytes_per_cycle = 32,
     ENERGY_45NM(2.5)},
    {.name = "nv_full", .atomic_c = 64, .atomic_k = 32, .cbuf_bytes = 512 * 1024,
     .memory_atom_bytes = 32, .sdp_throughput = 16, .sdp_ew_throughput = 4, .pdp_throughput = 8,
     .cdp_throughput = 8, .clock_hz = 1e9, .dram_bytes_per_s = 20e9,
     .precisions = BIT(ACCEL_INT8) | BIT(ACCEL_INT16) | BIT(ACCEL_FP16),
     .features = ACCEL_FEATURE_LUT | ACCEL_FEATURE_ELEMENTWISE | ACCEL_FEATURE_WINOGRAD |
                 ACCEL_FEATURE_RUBIK | ACCEL_FEATURE_CDP | ACCEL_FEATURE_BDMA |
                 ACCEL_FEATURE_IMAGE_INPUT | ACCEL_FEATURE_BATCH |
                 ACCEL_FEATURE_WEIGHT_COMPRESSION,
     .cbuf_banks = 16, .dram_burst_bytes = 64, .dram_latency_cycles = 1200,
     .dram_turnaround_cycles = 0.5, .sram_bytes = 0, .sram_bytes_per_s = 64e9,
     .cmac_weight_load_cycles = ACCEL_CONV_STRIPE, RTL_CALIBRATED, .rubik_bytes_per_cycle = 64,
     ENERGY_45NM(2.5)},
};

int32_t accel_num_presets(void) { return (int32_t)(sizeof presets / sizeof presets[0]); }

const char* accel_preset_name(int32_t index) {
  return index >= 0 && index < accel_num_presets() ? presets[index].name : NULL;
}

int32_t accel_abi_version(void) { return ACCEL_ABI_VERSION; }

accel_status accel_config_preset(const char* name, accel_config* out) {
  if (name == NULL) return accel_fail(ACCEL_ERR_NULL, "preset name is NULL");
  if (out == NULL) return accel_fail(ACCEL_ERR_NULL, "output config is NULL");
  for (int32_t i = 0; i < accel_num_presets(); ++i) {
    if (strcmp(presets[i].name, name) == 0) {
      *out = presets[i];
      return ACCEL_OK;
    }
  }
  return accel_fail(ACCEL_ERR_NOT_FOUND,
                    "unknown preset '%.64s' (known: nv_small, nv_large, nv_full)", name);
}

static int is_power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

accel_status accel_config_validate(const accel_config* cfg) {
  if (cfg == NULL) return accel_fail(ACCEL_ERR_NULL, "config is NULL");
  if (memchr(cfg->name, '\0', sizeof cfg->name) == NULL) {
    return accel_fail(ACCEL_ERR_INVALID, "config name is not NUL-terminated within %d bytes",
                      ACCEL_NAME_LEN);
  }
#define CHECK_RANGE(field, lo, hi)                                                         \
  if (cfg->field < (lo) || cfg->field > (hi)) {                                            \
    return accel_fail(ACCEL_ERR_INVALID, "config %s: %s = %lld is outside [%lld, %lld]",    \
                      cfg->name, #field, (long long)cfg->field, (long long)(lo),            \
                      (long long)(hi));                                                     \
  }
  CHECK_RANGE(atomic_c, 1, 1024)
  CHECK_RANGE(atomic_k, 2, 1024)
  CHECK_RANGE(cbuf_bytes, 1024, (int64_t)1 << 32)
  CHECK_RANGE(memory_atom_bytes, 1, 4096)
  CHECK_RANGE(sdp_throughput, 1, 1024)
  CHECK_RANGE(sdp_ew_throughput, 1, 1024)
  CHECK_RANGE(pdp_throughput, 1, 1024)
  CHECK_RANGE(cdp_throughput, 1, 1024)
  CHECK_RANGE(cbuf_banks, 2, 1024)
  CHECK_RANGE(dram_burst_bytes, 1, 4096)
  CHECK_RANGE(dram_latency_cycles, 0, 1000000)
  CHECK_RANGE(sram_bytes, 0, (int64_t)1 << 40)
  CHECK_RANGE(dram_read_request_cycles, 0, 1024)
  CHECK_RANGE(cmac_weight_load_cycles, 0, 1024)
  CHECK_RANGE(conv_pipeline_cycles, 0, 1000000)
  CHECK_RANGE(sdp_pipeline_cycles, 0, 1000000)
  CHECK_RANGE(pdp_pipeline_cycles, 0, 1000000)
  CHECK_RANGE(cdp_pipeline_cycles, 0, 1000000)
  CHECK_RANGE(rubik_bytes_per_cycle, 1, 4096)
#undef CHECK_RANGE
  if (cfg->cbuf_bytes % cfg->cbuf_banks != 0) {
    return accel_fail(ACCEL_ERR_INVALID,
                      "config %s: cbuf_bytes = %lld is not a whole number of cbuf_banks = %d",
                      cfg->name, (long long)cfg->cbuf_bytes, cfg->cbuf_banks);
  }
  if (!(isfinite(cfg->dram_turnaround_cycles) && cfg->dram_turnaround_cycles >= 0 &&
        cfg->dram_turnaround_cycles <= 1e6)) {
    return accel_fail(ACCEL_ERR_INVALID,
                      "config %s: dram_turnaround_cycles = %g is outside [0, 1e6]", cfg->name,
                      cfg->dram_turnaround_cycles);
  }
  const int has_sram = cfg->sram_bytes > 0;
  if (!(isfinite(cfg->sram_bytes_per_s) && cfg->sram_bytes_per_s >= (has_sram ? 1e6 : 0) &&
        cfg->sram_bytes_per_s <= 1e14)) {
    return accel_fail(ACCEL_ERR_INVALID,
                      "config %s: sram_bytes_per_s = %g is outside [%g, 1e14]%s", cfg->name,
                      cfg->sram_bytes_per_s, has_sram ? 1e6 : 0.0,
                      has_sram ? " (sram_bytes > 0 needs a bandwidth)" : "");
  }
  if (!is_power_of_two(cfg->memory_atom_bytes)) {
    return accel_fail(ACCEL_ERR_INVALID, "config %s: memory_atom_bytes = %d is not a power of two",
                      cfg->name, cfg->memory_atom_bytes);
  }
  if (!(isfinite(cfg->clock_hz) && cfg->clock_hz >= 1e6 && cfg->clock_hz <= 1e11)) {
    return accel_fail(ACCEL_ERR_INVALID, "config %s: clock_hz = %g is outside [1e6, 1e11]",
                      cfg->name, cfg->clock_hz);
  }
  if (!(isfinite(cfg->dram_bytes_per_s) && cfg->dram_bytes_per_s >= 1e6 &&
        cfg->dram_bytes_per_s <= 1e13)) {
    return accel_fail(ACCEL_ERR_INVALID,
                      "config %s: dram_bytes_per_s = %g is outside [1e6, 1e13]", cfg->name,
                      cfg->dram_bytes_per_s);
  }
  const struct { const char* name; double value; } energies[] = {
      {"mac_int8_pj", cfg->mac_int8_pj}, {"mac_fp16_pj", cfg->mac_fp16_pj},
      {"cbuf_read_pj_per_byte", cfg->cbuf_read_pj_per_byte},
      {"cbuf_write_pj_per_byte", cfg->cbuf_write_pj_per_byte},
      {"dram_pj_per_byte", cfg->dram_pj_per_byte}, {"sram_pj_per_byte", cfg->sram_pj_per_byte},
      {"sdp_pj_per_element", cfg->sdp_pj_per_element},
      {"pdp_pj_per_element", cfg->pdp_pj_per_element},
      {"cdp_pj_per_element", cfg->cdp_pj_per_element}};
  for (size_t i = 0; i < sizeof energies / sizeof energies[0]; ++i) {
    if (!(isfinite(energies[i].value) && energies[i].value >= 0 && energies[i].value <= 1e9)) {
      return accel_fail(ACCEL_ERR_INVALID, "config %s: %s = %g is outside [0, 1e9] pJ",
                        cfg->name, energies[i].name, energies[i].value);
    }
  }
  const uint32_t known_precisions = BIT(ACCEL_INT8) | BIT(ACCEL_INT16) | BIT(ACCEL_FP16);
  if (cfg->precisions == 0 || (cfg->precisions & ~known_precisions) != 0) {
    return accel_fail(ACCEL_ERR_INVALID,
                      "config %s: precisions = 0x%x must be a non-empty set of int8, int16, fp16",
                      cfg->name, cfg->precisions);
  }
  const uint32_t known_features = ACCEL_FEATURE_LUT | ACCEL_FEATURE_ELEMENTWISE |
                                  ACCEL_FEATURE_WINOGRAD | ACCEL_FEATURE_RUBIK |
                                  ACCEL_FEATURE_CDP | ACCEL_FEATURE_BDMA |
                                  ACCEL_FEATURE_IMAGE_INPUT | ACCEL_FEATURE_BATCH |
                                  ACCEL_FEATURE_WEIGHT_COMPRESSION;
  if ((cfg->features & ~known_features) != 0) {
    return accel_fail(ACCEL_ERR_INVALID, "config %s: features = 0x%x has unknown bits",
                      cfg->name, cfg->features);
  }
  return ACCEL_OK;
}
