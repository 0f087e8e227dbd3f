/* rubik.c - the RUBIK engine's contract mode: the channel-extended cube of a deconvolution's
 * output phases rearranged into sx x sy blocks of pixels, bit for bit, any element size. */
#include <string.h>

#include "kernels.h"

typedef struct rubik_job {
  const rubik_geometry* g;
  size_t eb;
  const char* src;
  char* dst;
} rubik_job;

/* One output row per item: row y*sy + a of output channel c reads row y of the sx input
 * channels (a*sx + t)*out_c + c, t < sx, interleaving them column by column. */
static void contract_row(void* ctx, int64_t item, int participant) {
  const rubik_job* J = ctx;
  const rubik_geometry* g = J->g;
  (void)participant;
  const int64_t out_h = (int64_t)g->h * g->sy, out_w = (int64_t)g->w * g->sx;
  const int64_t row = item % out_h, plane = item / out_h; /* plane = b * out_c + c */
  const int64_t b = plane / g->out_c, c = plane % g->out_c;
  const int64_t y = row / g->sy, a = row % g->sy;
  const int64_t in_c = (int64_t)g->out_c * g->sx * g->sy;
  const size_t eb = J->eb;
  char* out = J->dst + (size_t)(plane * out_h + row) * (size_t)out_w * eb;
  for (int64_t t = 0; t < g->sx; ++t) {
    const int64_t channel = (a * g->sx + t) * g->out_c + c;
    const char* in = J->src + (size_t)(((b * in_c + channel) * g->h + y) * g->w) * eb;
    if (g->sx == 1) {
      memcpy(out, in, (size_t)g->w * eb);
      continue;
    }
    for (int64_t x = 0; x < g->w; ++x) {
      memcpy(out + (size_t)(x * g->sx + t) * eb, in + (size_t)x * eb, eb);
    }
  }
}

void rubik_contract(const rubik_geometry* g, size_t element_bytes, const void* src, void* dst,
                    int32_t num_threads) {
  const int64_t rows = (int64_t)g->n * g->out_c * g->h * g->sy;
  const int64_t elements = rows * g->w * g->sx;
  const rubik_job J = {.g = g, .eb = element_bytes, .src = src, .dst = dst};
  pool_for(elements > 262144 ? num_threads : 1, rows, contract_row, (void*)&J);
}
