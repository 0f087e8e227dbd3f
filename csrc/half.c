/* half.c - IEEE binary16 storage of the FP16 engines: the engines compute in fp32 on widened
 * halves and round each output to half once (round to nearest even, as vcvtps2ph does). */
#include <immintrin.h>
#include <string.h>

#include "kernels.h"

static float scalar_widen(uint16_t h) {
  _Float16 v;
  memcpy(&v, &h, sizeof v);
  return (float)v;
}

static uint16_t scalar_narrow(float f) {
  const _Float16 v = (_Float16)f; /* round to nearest even */
  uint16_t h;
  memcpy(&h, &v, sizeof h);
  return h;
}

void half_to_float(const uint16_t* src, float* dst, int64_t count) {
  int64_t i = 0;
#ifdef __AVX512F__
  for (; i + 16 <= count; i += 16) {
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(src + i))));
  }
#endif
  for (; i < count; ++i) dst[i] = scalar_widen(src[i]);
}

void float_to_half(const float* src, uint16_t* dst, int64_t count) {
  int64_t i = 0;
#ifdef __AVX512F__
  for (; i + 16 <= count; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256((__m256i*)(dst + i), h);
  }
#endif
  for (; i < count; ++i) dst[i] = scalar_narrow(src[i]);
}

void round_to_half(float* x, int64_t count) {
  int64_t i = 0;
#ifdef __AVX512F__
  for (; i + 16 <= count; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(x + i),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm512_storeu_ps(x + i, _mm512_cvtph_ps(h));
  }
#endif
  for (; i < count; ++i) x[i] = scalar_widen(scalar_narrow(x[i]));
}

/* FP16 packed weights: a 64-byte header, then the weights widened to fp32 (the engine computes
 * on widened halves, so a layer widens its weights once, not on every run). */
enum { F16_MAGIC = 0x36484341 /* "ACH6" */, F16_HEADER = 64 };

typedef struct f16_header {
  uint32_t magic;
  int32_t k, c, kernel_h, kernel_w, groups;
  int32_t same_filters; /* conv_same_filters of the weights: a run need not compare them */
} f16_header;

static int64_t weight_count(const conv_geometry* g) {
  return (int64_t)g->k * (g->c / g->groups) * g->kernel_h * g->kernel_w;
}

size_t conv_f16_packed_bytes(const conv_geometry* g) {
  return F16_HEADER + (size_t)weight_count(g) * sizeof(float);
}

void conv_f16_pack(const conv_geometry* g, const uint16_t* weights, void* dst) {
  float* wide = (float*)((char*)dst + F16_HEADER);
  half_to_float(weights, wide, weight_count(g));
  const f16_header h = {.magic = F16_MAGIC, .k = g->k, .c = g->c, .kernel_h = g->kernel_h,
                        .kernel_w = g->kernel_w, .groups = g->groups,
                        .same_filters = conv_same_filters(g, wide)};
  memset(dst, 0, F16_HEADER);
  memcpy(dst, &h, sizeof h);
}

int conv_f16_packed_matches(const conv_geometry* g, const void* packed) {
  f16_header h;
  memcpy(&h, packed, sizeof h);
  return h.magic == F16_MAGIC && h.k == g->k && h.c == g->c && h.kernel_h == g->kernel_h &&
         h.kernel_w == g->kernel_w && h.groups == g->groups;
}

const float* conv_f16_packed_weights(const void* packed) {
  return (const float*)((const char*)packed + F16_HEADER);
}

int conv_f16_packed_same_filters(const void* packed) {
  f16_header h;
  memcpy(&h, packed, sizeof h);
  return h.same_filters;
}
