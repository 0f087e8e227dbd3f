/* conv/i8_pack.c - the INT8 convolution's packed weights (accel_conv_pack_weights): the
 * layouts of conv/i8.h, packed once by the generated code's loader. */
#include "conv/i8.h"

static int layout_of(const plan* P) {
#ifdef CONV_I8_VNNI
  if (P->cg == 1) return LAYOUT_PLAIN;
  return i8_amx_packed(P) ? LAYOUT_AMX : LAYOUT_VNNI;
#elif defined(__AVX2__)
  return P->cg == 1          ? LAYOUT_PLAIN
         : i8_winograd_fits(P) ? LAYOUT_I16W
         : i8_tap_major(P)     ? LAYOUT_I16T
                               : LAYOUT_I16;
#else
  (void)P;
  return LAYOUT_PLAIN;
#endif
}


size_t conv_i8_packed_bytes(const conv_geometry* g) {
  plan P;
  make_plan(g, &P);
  const int layout = layout_of(&P);
  size_t bytes = HEADER + data_bytes(&P, layout) + wsum_bytes(&P, layout);
  if (layout == LAYOUT_AMX) bytes += amx_data_bytes(&P) + amx_wsum_bytes(&P);
  return bytes;
}

/* Block (grp, ab) of LAYOUT_AMX and its rows' weight sums. */
void i8_pack_amx_block(const plan* P, const int8_t* w, int64_t grp, int64_t ab, int8_t* data,
                       int32_t* wsum) {
  const int64_t blk = grp * P->ablocks + ab, rs = P->rs;
  const int64_t rows = P->mg - ab * AMB < AMB ? P->mg - ab * AMB : AMB;
  const int8_t* src = w + (grp * P->mg + ab * AMB) * P->kd; /* row m at src + m * kd */
  int8_t* d = data + blk * P->nk * 2048;
  memset(d, 0, (size_t)(P->nk * 2048));
  for (int64_t j = 0; j < P->nch; ++j) {
    const int64_t first = AKT * j < P->c4 - P->kc ? AKT * j : P->c4 - P->kc;
    for (int64_t t = 0; t < rs; ++t) {
      int8_t* dt = d + (j * rs + t) * 2048;
      for (int64_t m = 0; m < rows; ++m)
        for (int64_t i = 0; i < P->kc; ++i) {
          const int64_t b4 = first + i;
          if (b4 < AKT * j) continue; /* chunk j - 1's */
          for (int64_t q = 0; q < 4; ++q) {
            const int64_t c = 4 * b4 + q;
            if (c < P->cg) dt[m * 64 + 4 * i + q] = src[m * P->kd + c * rs + t];
          }
        }
    }
  }
  for (int64_t m = 0; m < AMB; ++m) {
    int32_t sum = 0;
    if (m < rows)
      for (int64_t i = 0; i < P->kd; ++i) sum += src[m * P->kd + i];
    wsum[blk * AMB + m] = sum;
  }
}

/* Block (grp, mb) of LAYOUT_VNNI, and its rows' weight sums. Written in order, 4 bytes per (step,
 * row) from the 4 channels' rows of taps (each read rs times while in L1): the
 * destination-scattered order (one byte per 32) was much slower (docs/kernels.md, conv/i8_pack.c).
 * */
void i8_pack_block(const plan* P, const int8_t* w, int64_t grp, int64_t mb, int8_t* data,
                   int32_t* wsum) {
  const int64_t blk = grp * P->mblocks + mb, rs = P->rs;
  const int64_t rows = P->mg - mb * MR < MR ? P->mg - mb * MR : MR;
  const int8_t* src = w + (grp * P->mg + mb * MR) * P->kd; /* row m at src + m * kd */
  int8_t* d = data + blk * P->kd4 * MR * 4;
  for (int64_t c4 = 0; c4 < P->c4; ++c4) {
    const int64_t nch = P->cg - 4 * c4 < 4 ? P->cg - 4 * c4 : 4;
    for (int64_t t = 0; t < rs; ++t) {
      int8_t* dt = d + (c4 * rs + t) * MR * 4;
      for (int64_t m = 0; m < MR; ++m)
        for (int64_t j = 0; j < 4; ++j)
          dt[m * 4 + j] = m < rows && j < nch ? src[m * P->kd + (4 * c4 + j) * rs + t] : 0;
    }
  }
  for (int64_t m = 0; m < MR; ++m) {
    int32_t sum = 0;
    if (m < rows)
      for (int64_t i = 0; i < P->kd; ++i) sum += src[m * P->kd + i];
    wsum[blk * MR + m] = sum;
  }
}

void i8_pack_i16(const plan* P, const int8_t* w, int32_t* data) {
  const int64_t kd = P->kd, kd2 = (kd + 1) / 2;
  for (int64_t grp = 0; grp < P->g->groups; ++grp)
    for (int64_t mb = 0; mb < P->mblocks; ++mb) {
      int32_t* d = data + (grp * P->mblocks + mb) * kd2 * MR;
      const int64_t rows = P->mg - mb * MR < MR ? P->mg - mb * MR : MR;
      const int8_t* src = w + (grp * P->mg + mb * MR) * kd; /* row m at src + m * kd */
      for (int64_t j = 0; j < kd2; ++j)
        for (int64_t m = 0; m < MR; ++m) {
          const int32_t lo = m < rows ? src[m * kd + 2 * j] : 0;
          const int32_t hi = m < rows && 2 * j + 1 < kd ? src[m * kd + 2 * j + 1] : 0;
          d[j * MR + m] = (int32_t)(((uint32_t)hi << 16) | ((uint32_t)lo & 0xFFFFu));
        }
    }
}

void i8_pack_i16t(const plan* P, const int8_t* w, int32_t* data) {
  const int64_t kd = P->kd, rs = P->rs, cg = P->cg, cg2 = (cg + 1) / 2;
  for (int64_t grp = 0; grp < P->g->groups; ++grp)
    for (int64_t mb = 0; mb < P->mblocks; ++mb) {
      int32_t* d = data + (grp * P->mblocks + mb) * rs * cg2 * MR;
      const int64_t rows = P->mg - mb * MR < MR ? P->mg - mb * MR : MR;
      const int8_t* src = w + (grp * P->mg + mb * MR) * kd; /* row m at src + m * kd */
      for (int64_t t = 0; t < rs; ++t)
        for (int64_t p = 0; p < cg2; ++p)
          for (int64_t m = 0; m < MR; ++m) {
            const int32_t lo = m < rows ? src[m * kd + 2 * p * rs + t] : 0;
            const int32_t hi = m < rows && 2 * p + 1 < cg ? src[m * kd + (2 * p + 1) * rs + t] : 0;
            d[(t * cg2 + p) * MR + m] = (int32_t)(((uint32_t)hi << 16) | ((uint32_t)lo & 0xFFFFu));
          }
    }
}

static void write_header(const plan* P, int layout, void* dst) {
  const conv_geometry* g = P->g;
  pack_header h;
  memset(&h, 0, sizeof h);
  h.magic = PACK_MAGIC;
  h.layout = layout;
  h.k = g->k;
  h.c = g->c;
  h.kernel_h = g->kernel_h;
  h.kernel_w = g->kernel_w;
  h.groups = g->groups;
  h.mr = MR;
  h.data_bytes = data_bytes(P, layout);
  memset(dst, 0, HEADER);
  memcpy(dst, &h, sizeof h);
}

void conv_i8_pack(const conv_geometry* g, const int8_t* weights, void* dst) {
  plan P;
  make_plan(g, &P);
  const int layout = layout_of(&P);
  write_header(&P, layout, dst);
  int8_t* data = (int8_t*)dst + HEADER;
  if (layout == LAYOUT_PLAIN) {
    const size_t n = (size_t)g->k * (size_t)P.kd;
    memcpy(data, weights, n);
    memset(data + n, 0, data_bytes(&P, layout) - n);
    return;
  }
  if (layout == LAYOUT_I16) {
    const size_t n = (size_t)(g->groups * P.mblocks * ((P.kd + 1) / 2) * MR) * sizeof(int32_t);
    i8_pack_i16(&P, weights, (int32_t*)(void*)data);
    memset(data + n, 0, data_bytes(&P, layout) - n);
    return;
  }
  if (layout == LAYOUT_I16T || layout == LAYOUT_I16W) {
    const size_t n =
        (size_t)(g->groups * P.mblocks * P.rs * ((P.cg + 1) / 2) * MR) * sizeof(int32_t);
    i8_pack_i16t(&P, weights, (int32_t*)(void*)data);
    memset(data + n, 0, data_bytes(&P, layout) - n);
#if defined(__AVX2__) && !defined(CONV_I8_VNNI)
    if (layout == LAYOUT_I16W)
      i8_pack_i16w(&P, weights, (int32_t*)(void*)(data + data_bytes(&P, LAYOUT_I16T)));
#endif
    return;
  }
  int32_t* wsum = (int32_t*)(data + data_bytes(&P, layout));
  memset(wsum, 0, wsum_bytes(&P, layout));
  for (int64_t grp = 0; grp < g->groups; ++grp)
    for (int64_t mb = 0; mb < P.mblocks; ++mb) i8_pack_block(&P, weights, grp, mb, data, wsum);
  if (layout == LAYOUT_AMX) {
    int8_t* xdata = (int8_t*)wsum + wsum_bytes(&P, layout);
    int32_t* xsum = (int32_t*)(xdata + amx_data_bytes(&P));
    memset(xsum, 0, amx_wsum_bytes(&P));
    for (int64_t grp = 0; grp < g->groups; ++grp)
      for (int64_t ab = 0; ab < P.ablocks; ++ab)
        i8_pack_amx_block(&P, weights, grp, ab, xdata, xsum);
  }
}

int conv_i8_packed_matches(const conv_geometry* g, const void* packed) {
  if (packed == NULL) return 0;
  plan P;
  make_plan(g, &P);
  pack_header h;
  memcpy(&h, packed, sizeof h);
  const int layout = layout_of(&P);
  return h.magic == PACK_MAGIC && h.layout == layout && h.k == g->k && h.c == g->c &&
         h.kernel_h == g->kernel_h && h.kernel_w == g->kernel_w && h.groups == g->groups &&
         h.mr == MR && h.data_bytes == data_bytes(&P, layout);
}
