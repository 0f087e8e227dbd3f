/* conv/i8_stem_vbmi.c - INT8 CONV of few input channels (an RGB stem), AVX-512 VBMI builds
 * (impl "stem_vbmi").
 *
 * few input channels (C <= 3, an RGB stem), AVX-512 VBMI builds: a kernel row's C * kw
 * taps packed densely into 4-byte words (ResNet's 7x7 stem: 6 words a row, not 7 words of 3
 * useful bytes), the grid the output itself (conv_stem).
 */
#include "conv/i8.h"

#ifdef CONV_I8_VNNI
#ifdef __AVX512VBMI__
/* ---- few input channels (an RGB stem): a kernel row's taps packed densely into words -----
 * With C = 3 each of the implicit GEMM's 4-byte words holds 3 channels and a zero: ResNet's
 * 7x7 stem spent a quarter of its multiply-adds on zeros (49 depth steps of 3 useful bytes).
 * Here the C * kw taps of a kernel row, in (s, c) order, fill W4 = ceil(C kw / 4) words (7x7,
 * C = 3: 6 words, 42 steps instead of 49). Copy plane (row phase, word w) holds at column x of
 * row yq the bytes (s, c) = divmod(4w + j, C), j < 4, of input row yq sh + py - pad_top at
 * column x sw - pad_left + s: a column's taps lie inside its words, so the grid is the output
 * itself, no dropped columns. 16 columns of a plane are one vpermb per channel from one
 * 64-byte load of that channel's row. The weights are repacked to match on each call (K * kh
 * * W4 words: 10 KB for ResNet's stem), then the implicit GEMM's tiles and epilogue run as
 * they are (i8_imp_unit_item). */
enum { STEM_MAX_C = 3, STEM_MAX_W4 = (STEM_MAX_C * ACCEL_MAX_CONV_KERNEL + 3) / 4 };

typedef struct stem_plan {
  int64_t w4, taps;             /* words per kernel row, bytes used of them (C * kw) */
  __m512i idx[STEM_MAX_W4];     /* plane w, byte 4p + j: column p sw + s of the load */
  __mmask64 chan[STEM_MAX_W4][STEM_MAX_C]; /* plane w: the bytes from channel c */
} stem_plan;

static int stem_make_plan(const plan* P, stem_plan* T) {
  const conv_geometry* g = P->g;
  if (g->groups != 1 || g->c > STEM_MAX_C || g->dilation_w != 1) return 0;
  T->taps = (int64_t)g->c * g->kernel_w;
  T->w4 = (T->taps + 3) / 4;
  /* fewer depth steps than the implicit GEMM, and 16 columns' taps within one 64-byte load */
  if (T->w4 >= g->kernel_w || 15 * g->stride_w + g->kernel_w > 64) return 0;
  for (int64_t w = 0; w < T->w4; ++w) {
    uint8_t idx[64];
    for (int c = 0; c < STEM_MAX_C; ++c) T->chan[w][c] = 0;
    for (int64_t lane = 0; lane < 64; ++lane) {
      const int64_t p = lane / 4, t = 4 * w + lane % 4;
      idx[lane] = 0;
      if (t >= T->taps) continue; /* a zero weight: the lane keeps the padding byte */
      idx[lane] = (uint8_t)(p * g->stride_w + t / g->c);
      T->chan[w][t % g->c] |= (__mmask64)1 << lane;
    }
    T->idx[w] = _mm512_loadu_si512(idx);
  }
  return 1;
}

typedef struct stem_job {
  const plan* P;
  const imp_plan* Q; /* planes (row phase, word): nph = row phases * w4, wq = out_w */
  const stem_plan* T;
  const int8_t* in;
  int32_t in_zero;
  uint8_t* copy;
  int64_t rphases, b;
  int8_t rphase[ACCEL_MAX_CONV_STRIDE]; /* row phase index -> py */
} stem_job;

/* Copy row yq of row phase i (item = i * hq + yq) of image b, every word's plane. */
static void stem_build_item(void* ctx, int64_t item, int participant) {
  const stem_job* S = ctx;
  const plan* P = S->P;
  const imp_plan* Q = S->Q;
  const stem_plan* T = S->T;
  const conv_geometry* g = P->g;
  (void)participant;
  const int64_t i = item / Q->hq, yq = item % Q->hq;
  const int64_t iy = yq * g->stride_h + S->rphase[i] - g->pad_top;
  const uint8_t fill = (uint8_t)S->in_zero ^ 0x80;
  uint8_t* d0 = S->copy + (i * T->w4 * Q->hq + yq) * Q->wq * 4; /* plane (i, w) at + w * plane */
  if (iy < 0 || iy >= g->h) {
    for (int64_t w = 0; w < T->w4; ++w) memset(d0 + w * Q->plane * 4, fill, (size_t)Q->wq * 4);
    return;
  }
  const __m512i pad = _mm512_set1_epi8((char)S->in_zero), flip = _mm512_set1_epi8((char)0x80);
  const int8_t* img = S->in + (S->b * g->c * g->h + iy) * g->w;
  for (int64_t x0 = 0; x0 < Q->wq; x0 += 16) {
    const int64_t col0 = x0 * g->stride_w - g->pad_left; /* the load's first column */
    const __mmask64 in = inside_mask(col0, 0, g->w) ;
    __m512i rows[STEM_MAX_C];
    for (int c = 0; c < g->c; ++c)
      rows[c] = in ? _mm512_mask_loadu_epi8(pad, in, img + c * P->hw + col0) : pad;
    const int64_t n = Q->wq - x0 < 16 ? Q->wq - x0 : 16;
    const __mmask64 store = n == 16 ? ~(__mmask64)0 : (((__mmask64)1 << (4 * n)) - 1);
    for (int64_t w = 0; w < T->w4; ++w) {
      __m512i v = pad;
      for (int c = 0; c < g->c; ++c)
        v = _mm512_mask_permutexvar_epi8(v, T->chan[w][c], T->idx[w], rows[c]);
      _mm512_mask_storeu_epi8(d0 + w * Q->plane * 4 + x0 * 4, store, _mm512_xor_si512(v, flip));
    }
  }
}

static accel_status conv_stem(const plan* P, const stem_plan* T, int32_t in_zero,
                              const int8_t* in, const int8_t* weights, int8_t* out,
                              const sdp_i8* ep, workspace* ws, int nth) {
  const conv_geometry* g = P->g;
  const int64_t sh = g->stride_h, dh = g->dilation_h, kh = g->kernel_h, kw = g->kernel_w;
  stem_job S;
  int8_t rslot[ACCEL_MAX_CONV_STRIDE];
  for (int64_t py = 0; py < sh; ++py) rslot[py] = -1;
  for (int64_t r = 0; r < kh; ++r) rslot[r * dh % sh] = 0;
  S.rphases = 0;
  for (int64_t py = 0; py < sh; ++py)
    if (rslot[py] == 0) {
      rslot[py] = (int8_t)S.rphases;
      S.rphase[S.rphases++] = (int8_t)py;
    }
  imp_plan Q;
  Q.wq = g->out_w;
  Q.hq = g->out_h + (kh - 1) * dh / sh;
  Q.plane = Q.hq * Q.wq;
  Q.nph = S.rphases * T->w4;
  Q.gbytes = Q.nph * Q.plane * 4;
  Q.ncols = (int64_t)g->out_h * g->out_w;
  plan D = *P; /* the GEMM's depth: kh * w4 steps */
  D.kd4 = kh * T->w4;
  /* the weights in the packed layout of these steps, and their sums */
  const size_t db = round64((size_t)(P->mblocks * D.kd4 * MR * 4));
  char* wp = workspace_get(ws, WS_PACK, db + round64((size_t)(P->mblocks * MR) * 4));
  const size_t copy_bytes = (size_t)Q.gbytes;
  uint8_t* copy = workspace_get(ws, WS_COPY, copy_bytes + COPY_SLACK);
  int64_t* off = workspace_get(ws, WS_OFF, (size_t)D.kd4 * sizeof(int64_t));
  if (wp == NULL || copy == NULL || off == NULL) return ACCEL_ERR_NO_MEMORY;
  int8_t* apack = (int8_t*)wp;
  int32_t* wsum = (int32_t*)(wp + db);
  memset(wp, 0, db + round64((size_t)(P->mblocks * MR) * 4));
  for (int64_t m = 0; m < g->k; ++m) {
    const int8_t* wm = weights + m * g->c * kh * kw; /* [C][kh][kw] of channel m */
    int32_t sum = 0;
    for (int64_t c = 0; c < g->c; ++c)
      for (int64_t r = 0; r < kh; ++r)
        for (int64_t s = 0; s < kw; ++s) {
          const int8_t v = wm[(c * kh + r) * kw + s];
          const int64_t t = s * g->c + c; /* byte t % 4 of word t / 4 */
          apack[((m / MR * D.kd4 + r * T->w4 + t / 4) * MR + m % MR) * 4 + t % 4] = v;
          sum += v;
        }
    wsum[m] = sum;
  }
  for (int64_t r = 0; r < kh; ++r)
    for (int64_t w = 0; w < T->w4; ++w)
      off[r * T->w4 + w] =
          ((rslot[r * dh % sh] * T->w4 + w) * Q.plane + (r * dh / sh) * Q.wq) * 4;
  memset(copy + copy_bytes, (uint8_t)in_zero ^ 0x80, COPY_SLACK);
  const int64_t npanels = (Q.ncols + NR - 1) / NR;
  const int64_t tiles = i8_choose_tiles(npanels, P->mblocks, 1, nth);
  const int64_t units = tiles * P->mblocks;
  if (nth > units) nth = (int)units;
  const size_t tile_bytes = (size_t)MR * TILE * NR * sizeof(int32_t);
  char* scratch[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    scratch[t] = workspace_get(ws, t, tile_bytes);
    if (scratch[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  const bsrc B = {.base = copy, .group_bytes = Q.gbytes, .off = off, .ncols = Q.ncols,
                  .npanels = npanels, .tiles = tiles};
  imp_job J = {.P = &D, .Q = &Q, .B = &B, .in_zero = in_zero, .in = in, .weights = weights,
               .apack = apack, .wsum = wsum, .out = out, .ep = ep, .scratch = scratch,
               .tile_bytes = tile_bytes, .tiles = tiles};
  if (!i8_imp_prepare_lanes(P, ep, ws, &J)) return ACCEL_ERR_NO_MEMORY;
  S.P = P;
  S.Q = &Q;
  S.T = T;
  S.in = in;
  S.in_zero = in_zero;
  S.copy = copy;
  for (int64_t b = 0; b < g->n; ++b) { /* the copy is rebuilt for each image */
    S.b = J.b = b;
    pool_for(nth, S.rphases * Q.hq, stem_build_item, &S);
    pool_for(nth, units, i8_imp_unit_item, &J);
  }
  return ACCEL_OK;
}

static int stem_applies(const conv_i8_call* c) {
  stem_plan T;
  return c->P->cg != 1 && stem_make_plan(c->P, &T);
}

static accel_status stem_run(const conv_i8_call* c) {
  stem_plan T;
  stem_make_plan(c->P, &T);
  return conv_stem(c->P, &T, c->in_zero, c->in, c->weights, c->out, c->ep, c->ws, c->nth);
}

const conv_i8_impl conv_i8_stem_vbmi_impl = {.name = "stem_vbmi", .applies = stem_applies,
                                             .supports = NULL, .run = stem_run};
#endif /* __AVX512VBMI__ */
#endif /* CONV_I8_VNNI */
