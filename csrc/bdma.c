/* bdma.c - the BDMA engine: strided copies of channel planes, bit for bit, any element size. */
#include <string.h>

#include "kernels.h"

/* Copies of `span` consecutive planes each (span 1, or every channel of an image where both
 * strides are 1), a few per pool_for item (about 64 KiB each). */
typedef struct bdma_job {
  const bdma_geometry* g;
  size_t plane;
  const void* src;
  void* dst;
  int64_t copies, per_item, per_image, span;
} bdma_job;

static void copy_item(void* ctx, int64_t item, int participant) {
  const bdma_job* J = ctx;
  const bdma_geometry* g = J->g;
  (void)participant;
  const int64_t end = (item + 1) * J->per_item < J->copies ? (item + 1) * J->per_item : J->copies;
  for (int64_t k = item * J->per_item; k < end; ++k) {
    const int64_t b = k / J->per_image, i = k % J->per_image * J->span;
    const int64_t from = b * g->in_c + g->src_offset + i * g->src_stride;
    const int64_t to = b * g->out_c + g->dst_offset + i * g->dst_stride;
    memcpy((char*)J->dst + (size_t)to * J->plane, (const char*)J->src + (size_t)from * J->plane,
           J->plane * (size_t)J->span);
  }
}

void bdma_copy(const bdma_geometry* g, size_t element_bytes, const void* src, void* dst,
               int32_t num_threads) {
  /* consecutive channels into consecutive channels are one block per image: one copy (a
   * head's columns of a token's row were as many copies of one element as the head has) */
  const int64_t span =
      g->src_stride == 1 && g->dst_stride == 1 && g->channels > 1 ? g->channels : 1;
  const int64_t per_image = g->channels / span, copies = (int64_t)g->n * per_image;
  const size_t plane = (size_t)g->hw * element_bytes;
  const int64_t per_item = (int64_t)(65536 / (plane * (size_t)span + 1)) + 1;
  const bdma_job J = {.g = g, .plane = plane, .src = src, .dst = dst, .copies = copies,
                      .per_item = per_item, .per_image = per_image, .span = span};
  pool_for((int64_t)g->n * g->channels * g->hw > 262144 ? num_threads : 1,
           (copies + per_item - 1) / per_item, copy_item, (void*)&J);
}
