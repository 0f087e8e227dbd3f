/* accumulators.c - the fp32 accumulators of recent FP16 CONV runs whose weights are data (no
 * packed weights: attention's Q K^T and P V products), kept for a later run of the same
 * convolution.
 *
 * The FP16 attention computes each head's scores twice (the max's pass, then the
 * exponentials' pass, which reads them unrounded) and its P V products twice (with 1 / sum's
 * half, then its remainder): NVDLA runs each CONV twice, and the cost model counts both; the
 * simulator convolves once. A run takes kept accumulators only where its geometry, input and
 * weights equal, byte for byte, those they were computed from, so a kept result is the
 * result: the accumulators do not depend on when or on how many threads they were computed
 * (the summation-order contract). */
#include <stdlib.h>
#include <string.h>

#include "accumulators.h"

/* Each entry: one block of the accumulators, then the input's and the weights' bytes. */
static size_t entry_bytes(size_t acc_count, size_t data_bytes, size_t weight_bytes) {
  return acc_count * sizeof(float) + data_bytes + weight_bytes;
}

static int matches(const kept_accumulators* e, const conv_geometry* g, const void* data,
                   size_t data_bytes, const void* weights, size_t weight_bytes) {
  const char* block = (const char*)e->acc + e->acc_count * sizeof(float);
  return e->stamp != 0 && memcmp(&e->g, g, sizeof *g) == 0 && e->data_bytes == data_bytes &&
         e->weight_bytes == weight_bytes && memcmp(block, data, data_bytes) == 0 &&
         memcmp(block + data_bytes, weights, weight_bytes) == 0;
}

const float* accumulators_find(accumulator_store* s, const conv_geometry* g, const void* data,
                               size_t data_bytes, const void* weights, size_t weight_bytes) {
  for (int i = 0; i < KEPT_ACCUMULATORS; ++i) {
    kept_accumulators* e = &s->kept[i];
    if (matches(e, g, data, data_bytes, weights, weight_bytes)) {
      e->stamp = ++s->clock;
      return e->acc;
    }
  }
  return NULL;
}

float* accumulators_keep(accumulator_store* s, const conv_geometry* g, const void* data,
                         size_t data_bytes, const void* weights, size_t weight_bytes,
                         size_t acc_count) {
  kept_accumulators* e = &s->kept[0]; /* the least recently used (or an empty) entry */
  for (int i = 1; i < KEPT_ACCUMULATORS; ++i) {
    if (s->kept[i].stamp < e->stamp) e = &s->kept[i];
  }
  const size_t bytes = entry_bytes(acc_count, data_bytes, weight_bytes);
  if (bytes > e->capacity) {
    free(e->acc);
    e->acc = malloc(bytes);
    e->capacity = e->acc != NULL ? bytes : 0;
    if (e->acc == NULL) {
      e->stamp = 0;
      return NULL;
    }
  }
  char* block = (char*)e->acc + acc_count * sizeof(float);
  memcpy(block, data, data_bytes);
  memcpy(block + data_bytes, weights, weight_bytes);
  e->g = *g;
  e->data_bytes = data_bytes;
  e->weight_bytes = weight_bytes;
  e->acc_count = acc_count;
  e->stamp = 0; /* not found until the caller has filled the accumulators */
  return e->acc;
}

void accumulators_filled(accumulator_store* s, const float* acc) {
  for (int i = 0; i < KEPT_ACCUMULATORS; ++i) {
    if (s->kept[i].acc == acc) s->kept[i].stamp = ++s->clock;
  }
}

void accumulators_free(accumulator_store* s) {
  for (int i = 0; i < KEPT_ACCUMULATORS; ++i) free(s->kept[i].acc);
  memset(s, 0, sizeof *s);
}
