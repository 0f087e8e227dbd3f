/* bdma.c - the BDMA engine: strided copies of channel planes, bit for bit, any element size. */
#include <string.h>

#include "kernels.h"

/* Plane copies, a few per pool_for item (about 64 KiB each). */
typedef struct bdma_job {
  const bdma_geometry* g;
  size_t plane;
  const void* src;
  void* dst;
  int64_t copies, per_item;
} bdma_job;

static void copy_item(void* ctx, int64_t item, int participant) {
  const bdma_job* J = ctx;
  const bdma_geometry* g = J->g;
  (void)participant;
  const int64_t end = (item + 1) * J->per_item < J->copies ? (item + 1) * J->per_item : J->copies;
  for (int64_t k = item * J->per_item; k < end; ++k) {
    const int64_t b = k / g->channels, i = k % g->channels;
    const int64_t from = b * g->in_c + g->src_offset + i * g->src_stride;
    const int64_t to = b * g->out_c + g->dst_offset + i * g->dst_stride;
    memcpy((char*)J->dst + (size_t)to * J->plane, (const char*)J->src + (size_t)from * J->plane,
           J->plane);
  }
}

void bdma_copy(const bdma_geometry* g, size_t element_bytes, const void* src, void* dst,
               int32_t num_threads) {
  const int64_t copies = (int64_t)g->n * g->channels;
  const size_t plane = (size_t)g->hw * element_bytes;
  const int64_t per_item = (int64_t)(65536 / (plane + 1)) + 1;
  const bdma_job J = {g, plane, src, dst, copies, per_item};
  pool_for(copies * g->hw > 262144 ? num_threads : 1, (copies + per_item - 1) / per_item,
           copy_item, (void*)&J);
}
