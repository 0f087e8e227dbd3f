/* bdma.c - the BDMA engine: strided copies of channel planes, bit for bit, any element size. */
#include <string.h>

#include "kernels.h"

void bdma_copy(const bdma_geometry* g, size_t element_bytes, const void* src, void* dst,
               int32_t num_threads) {
  const int64_t copies = (int64_t)g->n * g->channels;
  const size_t plane = (size_t)g->hw * element_bytes;
#pragma omp parallel for num_threads(num_threads) schedule(static) \
    if (copies * g->hw > 262144 && copies > 1)
  for (int64_t k = 0; k < copies; ++k) {
    const int64_t b = k / g->channels, i = k % g->channels;
    const int64_t from = b * g->in_c + g->src_offset + i * g->src_stride;
    const int64_t to = b * g->out_c + g->dst_offset + i * g->dst_stride;
    memcpy((char*)dst + (size_t)to * plane, (const char*)src + (size_t)from * plane, plane);
  }
}
