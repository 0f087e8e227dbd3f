/* rubik.c - the RUBIK engine's contract mode: the channel-extended cube of a deconvolution's
 * output phases rearranged into sx x sy blocks of pixels, bit for bit, any element size. */
#include <string.h>

#include "kernels.h"

typedef struct rubik_job {
  const rubik_geometry* g;
  size_t eb;
  const char* src;
  char* dst;
  int64_t rows, per_item;
} rubik_job;

/* An output row of sx source rows interleaved element by element. Elements of 1, 2, 4 or 8
 * bytes move as values of that size (fixed-size memcpys, which GCC turns into loads and
 * stores and vectorises for sx 2: a nearest upsampling's int8 rows); a memcpy call per
 * element cost more than the copy. */
#define INTERLEAVE(BYTES)                                                                  \
  if (sx == 2) {                                                                           \
    const char* restrict a = in[0];                                                        \
    const char* restrict b = in[1];                                                        \
    for (int64_t x = 0; x < w; ++x) {                                                      \
      char u[BYTES], v[BYTES];                                                             \
      memcpy(u, a + x * BYTES, BYTES);                                                     \
      memcpy(v, b + x * BYTES, BYTES);                                                     \
      memcpy(out + 2 * x * BYTES, u, BYTES);                                               \
      memcpy(out + (2 * x + 1) * BYTES, v, BYTES);                                         \
    }                                                                                      \
    return;                                                                                \
  }                                                                                        \
  for (int64_t t = 0; t < sx; ++t) {                                                       \
    const char* restrict s = in[t];                                                        \
    for (int64_t x = 0; x < w; ++x) {                                                      \
      char u[BYTES];                                                                       \
      memcpy(u, s + x * BYTES, BYTES);                                                     \
      memcpy(out + (x * sx + t) * BYTES, u, BYTES);                                        \
    }                                                                                      \
  }                                                                                        \
  return;

static void interleave(char* restrict out, const char* const* in, int64_t sx, int64_t w,
                       size_t eb) {
  switch (eb) {
    case 1: INTERLEAVE(1)
    case 2: INTERLEAVE(2)
    case 4: INTERLEAVE(4)
    case 8: INTERLEAVE(8)
    default:
      for (int64_t t = 0; t < sx; ++t)
        for (int64_t x = 0; x < w; ++x)
          memcpy(out + (size_t)(x * sx + t) * eb, in[t] + (size_t)x * eb, eb);
  }
}
#undef INTERLEAVE

/* Output row y*sy + a of output channel c reads row y of the sx input channels
 * (a*sx + t)*out_c + c, t < sx. An item is per_item consecutive output rows (about 16 KiB):
 * an int8 upsampling's rows are tens of bytes, too little work for a pool item each. */
static void contract_rows(void* ctx, int64_t item, int participant) {
  const rubik_job* J = ctx;
  const rubik_geometry* g = J->g;
  (void)participant;
  const int64_t out_h = (int64_t)g->h * g->sy, out_w = (int64_t)g->w * g->sx;
  const int64_t in_c = (int64_t)g->out_c * g->sx * g->sy;
  const size_t eb = J->eb;
  const int64_t first = item * J->per_item;
  const int64_t last = first + J->per_item < J->rows ? first + J->per_item : J->rows;
  const char* in[ACCEL_MAX_RUBIK_STRIDE];
  for (int64_t r = first; r < last; ++r) {
    const int64_t row = r % out_h, plane = r / out_h; /* plane = b * out_c + c */
    const int64_t b = plane / g->out_c, c = plane % g->out_c;
    const int64_t y = row / g->sy, a = row % g->sy;
    char* out = J->dst + (size_t)r * (size_t)out_w * eb;
    for (int64_t t = 0; t < g->sx; ++t) {
      const int64_t channel = (a * g->sx + t) * g->out_c + c;
      in[t] = J->src + (size_t)(((b * in_c + channel) * g->h + y) * g->w) * eb;
    }
    if (g->sx == 1) memcpy(out, in[0], (size_t)g->w * eb);
    else interleave(out, in, g->sx, g->w, eb);
  }
}

void rubik_contract(const rubik_geometry* g, size_t element_bytes, const void* src, void* dst,
                    int32_t num_threads) {
  const int64_t rows = (int64_t)g->n * g->out_c * g->h * g->sy;
  const int64_t row_bytes = (int64_t)g->w * g->sx * (int64_t)element_bytes;
  const int64_t elements = rows * g->w * g->sx;
  const int64_t per_item = 16384 / (row_bytes + 1) + 1;
  const rubik_job J = {.g = g, .eb = element_bytes, .src = src, .dst = dst, .rows = rows,
                       .per_item = per_item};
  pool_for(elements > 262144 ? num_threads : 1, (rows + per_item - 1) / per_item, contract_rows,
           (void*)&J);
}
