/* bdma.c - the BDMA engine: strided copies of channel planes, bit for bit, any element size. */
#include <string.h>

#include "kernels.h"

/* `count` blocks of `bytes` each, src_step / dst_step bytes apart. Blocks of 1, 2, 4 or 8 bytes
 * (planes of one element: a transpose viewed as R x S channels of one value each) move as
 * loads and stores of that size: a memcpy call per 4-byte plane cost more than the copy. */
#define COPY_BLOCKS(BYTES)                                                     \
  for (int64_t k = 0; k < count; ++k) {                                        \
    char v[BYTES];                                                             \
    memcpy(v, src + k * src_step, BYTES);                                      \
    memcpy(dst + k * dst_step, v, BYTES);                                      \
  }                                                                            \
  return;

static void copy_blocks(char* dst, const char* src, int64_t count, size_t bytes, int64_t src_step,
                        int64_t dst_step) {
  switch (bytes) {
    case 1: COPY_BLOCKS(1)
    case 2: COPY_BLOCKS(2)
    case 4: COPY_BLOCKS(4)
    case 8: COPY_BLOCKS(8)
    default:
      for (int64_t k = 0; k < count; ++k) memcpy(dst + k * dst_step, src + k * src_step, bytes);
  }
}
#undef COPY_BLOCKS

/* A copy's units: blocks of `span` consecutive planes (span 1, or a repeat's every channel
 * where both strides are 1), `per_line` of them per repeat (a line), `lines` = repeat + 1
 * lines per image; units run in that order, a few per pool_for item (about 64 KiB each). */
typedef struct bdma_job {
  const bdma_geometry* g;
  size_t plane, block;
  const char* src;
  char* dst;
  int64_t span, per_line, lines, units, per_item;
} bdma_job;

static void copy_item(void* ctx, int64_t item, int participant) {
  const bdma_job* J = ctx;
  const bdma_geometry* g = J->g;
  (void)participant;
  int64_t k = item * J->per_item;
  const int64_t end = k + J->per_item < J->units ? k + J->per_item : J->units;
  int64_t i = k % J->per_line, line = k / J->per_line;
  const int64_t src_step = (int64_t)J->plane * J->span * g->src_stride;
  const int64_t dst_step = (int64_t)J->plane * J->span * g->dst_stride;
  while (k < end) { /* the rest of a line at a time */
    const int64_t b = line / J->lines, r = line % J->lines;
    const int64_t m = J->per_line - i < end - k ? J->per_line - i : end - k;
    const int64_t from = b * g->in_c + g->src_offset + r * g->src_repeat_stride +
                         i * J->span * g->src_stride;
    const int64_t to = b * g->out_c + g->dst_offset + r * g->dst_repeat_stride +
                       i * J->span * g->dst_stride;
    copy_blocks(J->dst + (size_t)to * J->plane, J->src + (size_t)from * J->plane, m, J->block,
                src_step, dst_step);
    k += m;
    i = 0;
    ++line;
  }
}

void bdma_copy(const bdma_geometry* g, size_t element_bytes, const void* src, void* dst,
               int32_t num_threads) {
  /* consecutive channels into consecutive channels are one block per repeat of an image: one
   * copy (a head's columns of a token's row were as many copies of one element as the head
   * has) */
  const int64_t span =
      g->src_stride == 1 && g->dst_stride == 1 && g->channels > 1 ? g->channels : 1;
  const int64_t per_line = g->channels / span, lines = (int64_t)g->repeat + 1;
  const size_t plane = (size_t)g->hw * element_bytes, block = plane * (size_t)span;
  const int64_t units = (int64_t)g->n * lines * per_line;
  const int64_t per_item = (int64_t)(65536 / (block + 1)) + 1;
  const bdma_job J = {.g = g, .plane = plane, .block = block, .src = src, .dst = dst,
                      .span = span, .per_line = per_line, .lines = lines, .units = units,
                      .per_item = per_item};
  const int64_t elements = (int64_t)g->n * lines * g->channels * g->hw;
  pool_for(elements > 262144 ? num_threads : 1, (units + per_item - 1) / per_item, copy_item,
           (void*)&J);
}
