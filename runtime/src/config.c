/* config.c - the hardware presets (the only copy of these constants) and config checks.
 *
 * Figures from NVDLA's published configurations (hw/spec/defs/nv_*.spec and the primer):
 * MAC array atomic C x K, CBUF size, memory atom, SDP/PDP throughputs, precisions. The clock is
 * the primer's 1 GHz; DRAM bandwidths are our assumptions within the primer's 1..20 GB/s range.
 * Every preset has the CDP (the notes list no CDP among nv_small's missing units); its
 * throughput follows the PDP's, as the notes give for nv_large (PDP/CDP 8) and nv_small (1).
 * nv_small has no BDMA: NVDLA's nv_small.spec defines BDMA_DISABLE (with
 * SECONDARY_MEMIF_DISABLE); nv_large and nv_full have it.
 */
#include <math.h>
#include <string.h>

#include "internal.h"

#define BIT(p) (1u << (p))

static const accel_config presets[] = {
    {.name = "nv_small", .atomic_c = 8, .atomic_k = 8, .cbuf_bytes = 128 * 1024,
     .memory_atom_bytes = 8, .sdp_throughput = 1, .sdp_ew_throughput = 1, .pdp_throughput = 1,
     .cdp_throughput = 1, .clock_hz = 1e9, .dram_bytes_per_s = 2e9,
     .precisions = BIT(ACCEL_INT8), .features = ACCEL_FEATURE_CDP},
    {.name = "nv_large", .atomic_c = 64, .atomic_k = 32, .cbuf_bytes = 512 * 1024,
     .memory_atom_bytes = 32, .sdp_throughput = 16, .sdp_ew_throughput = 4, .pdp_throughput = 8,
     .cdp_throughput = 8, .clock_hz = 1e9, .dram_bytes_per_s = 10e9,
     .precisions = BIT(ACCEL_INT8),
     .features = ACCEL_FEATURE_LUT | ACCEL_FEATURE_ELEMENTWISE | ACCEL_FEATURE_RUBIK |
                 ACCEL_FEATURE_CDP | ACCEL_FEATURE_BDMA},
    {.name = "nv_full", .atomic_c = 64, .atomic_k = 32, .cbuf_bytes = 512 * 1024,
     .memory_atom_bytes = 32, .sdp_throughput = 16, .sdp_ew_throughput = 4, .pdp_throughput = 8,
     .cdp_throughput = 8, .clock_hz = 1e9, .dram_bytes_per_s = 20e9,
     .precisions = BIT(ACCEL_INT8) | BIT(ACCEL_INT16) | BIT(ACCEL_FP16),
     .features = ACCEL_FEATURE_LUT | ACCEL_FEATURE_ELEMENTWISE | ACCEL_FEATURE_WINOGRAD |
                 ACCEL_FEATURE_RUBIK | ACCEL_FEATURE_CDP | ACCEL_FEATURE_BDMA},
};

int32_t accel_num_presets(void) { return (int32_t)(sizeof presets / sizeof presets[0]); }

const char* accel_preset_name(int32_t index) {
  return index >= 0 && index < accel_num_presets() ? presets[index].name : NULL;
}

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
#undef CHECK_RANGE
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
  const uint32_t known_precisions = BIT(ACCEL_INT8) | BIT(ACCEL_INT16) | BIT(ACCEL_FP16);
  if (cfg->precisions == 0 || (cfg->precisions & ~known_precisions) != 0) {
    return accel_fail(ACCEL_ERR_INVALID,
                      "config %s: precisions = 0x%x must be a non-empty set of int8, int16, fp16",
                      cfg->name, cfg->precisions);
  }
  const uint32_t known_features = ACCEL_FEATURE_LUT | ACCEL_FEATURE_ELEMENTWISE |
                                  ACCEL_FEATURE_WINOGRAD | ACCEL_FEATURE_RUBIK |
                                  ACCEL_FEATURE_CDP | ACCEL_FEATURE_BDMA;
  if ((cfg->features & ~known_features) != 0) {
    return accel_fail(ACCEL_ERR_INVALID, "config %s: features = 0x%x has unknown bits",
                      cfg->name, cfg->features);
  }
  return ACCEL_OK;
}
