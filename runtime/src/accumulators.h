/* accumulators.h - kept fp32 accumulators of FP16 CONV runs (accumulators.c). */
#ifndef ACCEL_RUNTIME_ACCUMULATORS_H_
#define ACCEL_RUNTIME_ACCUMULATORS_H_

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

/* A device keeps this many: one per head of a layer's attention between its scores and its
 * exponentials (ViT-Ti 3, BERT-base 12), the least recently used replaced. */
enum { KEPT_ACCUMULATORS = 16 };
/* A run's accumulators are kept only up to this size, its input and weights included, and
 * only where the CONV does this many MACs or more per value of its input and weights: keeping
 * copies them and finding compares them, which pays only where convolving costs far more
 * (attention's Q K^T and P V: 98 and 48 in ViT-Ti; the FP16 softmax's sum of E^T by a CONV
 * of ones, 1: never run again). */
#define KEPT_ACCUMULATORS_MAX_BYTES ((size_t)4 << 20)
enum { KEPT_ACCUMULATORS_MIN_MACS = 16 };

typedef struct kept_accumulators {
  conv_geometry g;
  size_t data_bytes, weight_bytes, acc_count, capacity;
  float* acc; /* acc_count floats, then the input's and the weights' bytes */
  uint64_t stamp; /* last use; 0: empty or being filled */
} kept_accumulators;

typedef struct accumulator_store {
  kept_accumulators kept[KEPT_ACCUMULATORS];
  uint64_t clock;
} accumulator_store;

/* The kept accumulators of a CONV of geometry g on these input and weight bytes, or NULL. */
const float* accumulators_find(accumulator_store* s, const conv_geometry* g, const void* data,
                               size_t data_bytes, const void* weights, size_t weight_bytes);
/* A buffer of acc_count floats for the accumulators of a CONV of geometry g on these bytes
 * (copied), in place of the least recently used; found once accumulators_filled(acc) says the
 * caller has written them. NULL: out of memory (nothing kept). */
float* accumulators_keep(accumulator_store* s, const conv_geometry* g, const void* data,
                         size_t data_bytes, const void* weights, size_t weight_bytes,
                         size_t acc_count);
void accumulators_filled(accumulator_store* s, const float* acc);
void accumulators_free(accumulator_store* s);

#endif /* ACCEL_RUNTIME_ACCUMULATORS_H_ */
