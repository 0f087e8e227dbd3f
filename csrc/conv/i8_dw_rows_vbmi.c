/* conv/i8_dw_rows_vbmi.c - INT8 depthwise CONV by output rows, no copy, AVX-512 VBMI builds
 * (impl "dw_rows_vbmi").
 *
 * depthwise (one input channel per group), AVX-512 VBMI builds: by output rows, no copy;
 * each input row of a block of 8 output rows is loaded once per 16 output columns and
 * vpermb places each column's 4 taps in its 32-bit lane for vpdpbusd: it saves the copy
 * kernel's copy of the plane, and measured faster (docs/kernels.md, conv/i8_dw_rows_vbmi.c).
 */
#include "conv/i8.h"

#ifdef CONV_I8_VNNI
#ifdef __AVX512VBMI__
/* ---- depthwise by output rows: no copy of the plane ---------------------------------------
 * vpdpbusd adds 4 byte products per 32-bit lane. Lane i of a vector of 16 output columns
 * (x0 + i) gets, for weight word q of kernel row r (taps 4q .. 4q + 3), the 4 input bytes at
 * columns (x0 + i) * sw - pad_left + (4q + t) * dw: one 64-byte load of the input row from
 * column x0 * sw - pad_left, its bytes outside the image the padding byte in_zero (a masked
 * load; a row outside the image loads nothing), the sign bit flipped (u8 = s8 + 128), and one
 * vpermb with a fixed index per q. Bytes of taps past kernel_w have weight 0. A block of
 * DWR_ROWS output rows loads and permutes each input row once and adds it into every output
 * row that uses it. Every tap reads a real or a padding byte, so acc = sum(u * w) -
 * (128 + in_zero) * sum(w), modulo 2^32 (exact: the true sum fits int32). It applies when 16
 * outputs' taps fit the 64 bytes (15 * sw + (kernel_w - 1) * dw < 64) and a block's input rows
 * fit DWR_IN; the common kernels (3x3 and 5x5, strides 1 and 2, no dilation) have a block
 * compiled for them, whose loops unroll into registers (the generic block spent most of its
 * time on loop control). */
enum { DWR_ROWS = 8, DWR_IN = 24, DWR_WORDS = 4, DWR_BAND = 2048 /* epilogue values */ };

/* One block: output rows oy .. oy + DWR_ROWS - 1 (those below `nr` stored, at grid + p * ow),
 * every 16 output columns. Input row j of the block starts at rows[j] (column 0) and is inside
 * the image where rmask[j] is all ones. */
typedef struct dwr_args {
  const int8_t* const* rows;
  const __mmask64* rmask;
  const __m512i* idx;   /* [nq] */
  const __m512i* wv;    /* [kh][nq] broadcast weight words */
  __m512i init;         /* the correction */
  __m512i padv;
  int64_t kh, sh, dh, nq, ow, nr, w, sw, pad_left;
} dwr_args;

static inline __attribute__((always_inline)) void dwr_block_body(
    const int64_t KH, const int64_t SH, const int64_t DH, const int64_t NQ, const dwr_args* A,
    int32_t* grid) {
  const int64_t nin = (DWR_ROWS - 1) * SH + (KH - 1) * DH + 1;
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  const int64_t W = A->w, ow = A->ow;
  for (int64_t x0 = 0; x0 < ow; x0 += 16) {
    const int64_t bx = x0 * A->sw - A->pad_left;
    const int64_t lo = bx < 0 ? -bx : 0, hi = W - bx < 64 ? W - bx : 64;
    const __mmask64 lm = lo >= hi ? 0
                                  : (hi == 64 ? ~(__mmask64)0 : (((__mmask64)1 << hi) - 1)) &
                                        ~(((__mmask64)1 << lo) - 1);
    const __mmask16 sm = lane_mask(ow - x0);
    __m512i pv[DWR_IN][DWR_WORDS];
    for (int64_t j = 0; j < nin; ++j) {
      const __m512i row = _mm512_xor_si512(
          _mm512_mask_loadu_epi8(A->padv, A->rmask[j] & lm, A->rows[j] + bx), flip);
      for (int64_t q = 0; q < NQ; ++q) pv[j][q] = _mm512_permutexvar_epi8(A->idx[q], row);
    }
    for (int64_t p = 0; p < DWR_ROWS; ++p) {
      __m512i acc = A->init;
      for (int64_t r = 0; r < KH; ++r)
        for (int64_t q = 0; q < NQ; ++q)
          acc = _mm512_dpbusd_epi32(acc, pv[p * SH + r * DH][q], A->wv[r * NQ + q]);
      if (p < A->nr) _mm512_mask_storeu_epi32(grid + p * ow + x0, sm, acc);
    }
  }
}

typedef void (*dwr_block_fn)(const dwr_args*, int32_t*);
static void dwr_block_any(const dwr_args* A, int32_t* grid) {
  dwr_block_body(A->kh, A->sh, A->dh, A->nq, A, grid);
}
#define DWR_BLOCK(KH_, SH_, NQ_)                                                              \
  static void dwr_block_##KH_##_##SH_(const dwr_args* A, int32_t* grid) {                    \
    dwr_block_body(KH_, SH_, 1, NQ_, A, grid);                                                \
  }
DWR_BLOCK(3, 1, 1)
DWR_BLOCK(3, 2, 1)
DWR_BLOCK(5, 1, 2)
DWR_BLOCK(5, 2, 2)

typedef struct dwr_plan {
  int64_t nq;    /* weight words per kernel row */
  int64_t band;  /* output rows per epilogue band (a multiple of DWR_ROWS) */
  dwr_block_fn block;
  __m512i idx[DWR_WORDS];
  /* kernel_h * nq <= 16 words of kernel_h * kernel_w <= 64 weights: one masked load and vpermb
   * (byte 4j + t of word j = r * nq + q is weight r * kernel_w + 4q + t); else byte by byte */
  int wvec;
  __mmask64 wload, wtake;
  __m512i widx;
} dwr_plan;

/* Channel weights wk as broadcast words wv[r * nq + q] (taps 4q .. 4q + 3 of kernel row r, 0
 * past kernel_w); returns their sum modulo 2^32 (the correction's factor). */
static inline __attribute__((always_inline)) uint32_t dw_weight_words(
    const dwr_plan* D, const conv_geometry* g, const int8_t* wk, __m512i* wv) {
  const int64_t kh = g->kernel_h, kw = g->kernel_w, nq = D->nq;
  if (D->wvec) {
    const __m512i words =
        _mm512_maskz_permutexvar_epi8(D->wtake, D->widx, _mm512_maskz_loadu_epi8(D->wload, wk));
    const __m512i sums =
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), words);
    int32_t w32[16];
    _mm512_storeu_si512(w32, words);
    for (int64_t j = 0; j < kh * nq; ++j) wv[j] = _mm512_set1_epi32(w32[j]);
    return (uint32_t)_mm512_reduce_add_epi32(sums);
  }
  uint32_t sum = 0;
  for (int64_t r = 0; r < kh; ++r)
    for (int64_t q = 0; q < nq; ++q) {
      uint32_t word = 0;
      for (int64_t t = 0; t < 4 && 4 * q + t < kw; ++t) {
        word |= (uint32_t)(uint8_t)wk[r * kw + 4 * q + t] << (8 * t);
        sum += (uint32_t)(int32_t)wk[r * kw + 4 * q + t];
      }
      wv[r * nq + q] = _mm512_set1_epi32((int32_t)word);
    }
  return sum;
}

static int dwr_make_plan(const conv_geometry* g, dwr_plan* D) {
  const int64_t sh = g->stride_h, dh = g->dilation_h, kh = g->kernel_h, kw = g->kernel_w;
  if (15 * (int64_t)g->stride_w + (kw - 1) * g->dilation_w >= 64) return 0;
  D->nq = (kw + 3) / 4;
  if (D->nq > DWR_WORDS || (DWR_ROWS - 1) * sh + (kh - 1) * dh + 1 > DWR_IN) return 0;
  const int64_t band = DWR_BAND / g->out_w / DWR_ROWS * DWR_ROWS;
  D->band = band < DWR_ROWS ? DWR_ROWS : band;
  D->block = dwr_block_any;
  if (kh == kw && dh == 1 && g->dilation_w == 1) {
    if (kh == 3 && sh == 1) D->block = dwr_block_3_1;
    if (kh == 3 && sh == 2) D->block = dwr_block_3_2;
    if (kh == 5 && sh == 1) D->block = dwr_block_5_1;
    if (kh == 5 && sh == 2) D->block = dwr_block_5_2;
  }
  D->wvec = kh * D->nq <= 16 && kh * kw <= 64;
  if (D->wvec) {
    uint8_t b[64] = {0};
    D->wtake = 0;
    for (int64_t r = 0; r < kh; ++r)
      for (int64_t s = 0; s < 4 * D->nq; ++s)
        if (s < kw) {
          const int64_t byte = 4 * (r * D->nq + s / 4) + s % 4;
          b[byte] = (uint8_t)(r * kw + s);
          D->wtake |= (__mmask64)1 << byte;
        }
    D->widx = _mm512_loadu_si512(b);
    D->wload = kh * kw >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (kh * kw)) - 1);
  }
  for (int64_t q = 0; q < D->nq; ++q) {
    uint8_t b[64];
    for (int i = 0; i < 16; ++i)
      for (int t = 0; t < 4; ++t)
        b[4 * i + t] = (uint8_t)((i * g->stride_w + (4 * q + t) * g->dilation_w) & 63);
    D->idx[q] = _mm512_loadu_si512(b);
  }
  return 1;
}

/* Output rows [oy0, oy1) of the plane at src for output channel weights wk into grid (rows of
 * out_w). */
static void dwr_band(const plan* P, const dwr_plan* D, const int8_t* src, int32_t in_zero,
                     const int8_t* wk, int64_t oy0, int64_t oy1, int32_t* grid) {
  const conv_geometry* g = P->g;
  const int64_t kh = g->kernel_h, nq = D->nq;
  const int64_t W = g->w, H = g->h, ow = g->out_w, sw = g->stride_w;
  __m512i wv[ACCEL_MAX_CONV_KERNEL * DWR_WORDS];
  const uint32_t sum = dw_weight_words(D, g, wk, wv);
  const int8_t* rows[DWR_IN];
  __mmask64 rmask[DWR_IN];
  dwr_args A = {.rows = rows, .rmask = rmask, .idx = D->idx, .wv = wv,
                .init = _mm512_set1_epi32((int32_t)(0u - (uint32_t)(128 + in_zero) * sum)),
                .padv = _mm512_set1_epi8((char)in_zero), .kh = kh, .sh = g->stride_h,
                .dh = g->dilation_h, .nq = nq, .ow = ow, .nr = 0, .w = W, .sw = sw,
                .pad_left = g->pad_left};
  const int64_t nin = (DWR_ROWS - 1) * g->stride_h + (kh - 1) * g->dilation_h + 1;
  for (int64_t oy = oy0; oy < oy1; oy += DWR_ROWS) {
    A.nr = oy1 - oy < DWR_ROWS ? oy1 - oy : DWR_ROWS;
    const int64_t ybase = oy * g->stride_h - g->pad_top;
    for (int64_t j = 0; j < nin; ++j) {
      const int64_t iy = ybase + j;
      const int inside = iy >= 0 && iy < H;
      rows[j] = src + (inside ? iy : 0) * W;
      rmask[j] = inside ? ~(__mmask64)0 : 0;
    }
    D->block(&A, grid + (oy - oy0) * ow);
  }
}

/* Small planes (at most DWS_OUT outputs): the block above computes whole rows of 16 lanes, and
 * a 7x7 plane's rows of 7 outputs used 7 of them and paid the block's set-up for 2 rows
 * (about 130 cycles per plane). Here the outputs go 16 at a time in raster order, rows
 * wrapping inside a vector: for vector v and kernel row r, one 64-byte load of the plane from
 * byte base[v][r] (masked to the plane; shared by the rows whose bases are equal), and a masked
 * vpermb per weight word with an index
 * and a mask computed once per call (bytes of taps outside the image: the padding byte). It
 * applies when every vector's taps of one kernel row lie within 64 bytes of the plane. */
enum { DWS_OUT = 256 };

typedef struct dws_entry { /* vector v, kernel row r */
  int64_t base;
  int64_t reuse;           /* the same base as the entry before: no new load */
  __mmask64 load;          /* bytes inside the plane */
  __mmask64 take[DWR_WORDS];
  __m512i idx[DWR_WORDS];
} dws_entry;

/* Vector v's lanes: the image row and column of tap (0, 0) of each output, and which lanes
 * are outputs. */
typedef struct dws_lanes {
  int64_t y[16], x[16];
  int valid[16];
} dws_lanes;

static void dws_lanes_of(const conv_geometry* g, int64_t v, dws_lanes* L) {
  int64_t oy = 16 * v / g->out_w, ox = 16 * v % g->out_w;
  for (int i = 0; i < 16; ++i) {
    L->valid[i] = oy < g->out_h;
    L->y[i] = oy * g->stride_h - g->pad_top;
    L->x[i] = ox * g->stride_w - g->pad_left;
    if (++ox == g->out_w) {
      ox = 0;
      ++oy;
    }
  }
}

/* The plane offset of tap s of kernel row r for lane i, -1 for padding, a lane past the
 * outputs or a tap past kernel_w. */
static inline int64_t dws_offset(const conv_geometry* g, const dws_lanes* L, int64_t i,
                                 int64_t r, int64_t s) {
  const int64_t iy = L->y[i] + r * g->dilation_h, ix = L->x[i] + s * g->dilation_w;
  const int inside =
      L->valid[i] && s < g->kernel_w && iy >= 0 && iy < g->h && ix >= 0 && ix < g->w;
  return inside ? iy * g->w + ix : -1;
}

/* The table, [v][r]; 0 when some vector's taps of a row do not fit one load. A vector whose
 * taps of all rows fit one load (every vector of a plane of at most 64 bytes) loads once.
 * Every offset is computed once per call (kernel_h * 4 nq <= DWS_TAPS). */
enum { DWS_TAPS = 64 };

static int dws_build(const conv_geometry* g, int64_t nq, dws_entry* tab) {
  const int64_t ohw = (int64_t)g->out_h * g->out_w, hw = (int64_t)g->h * g->w;
  const int64_t nvec = (ohw + 15) / 16, kh = g->kernel_h, nt = 4 * nq;
  if (kh * nt > DWS_TAPS) return 0;
  int64_t prev = -1;
  for (int64_t v = 0; v < nvec; ++v) {
    dws_lanes L;
    dws_lanes_of(g, v, &L);
    int32_t off[DWS_TAPS][16]; /* [r * nt + s][lane] */
    int64_t rlo[ACCEL_MAX_CONV_KERNEL], rhi[ACCEL_MAX_CONV_KERNEL], vlo = INT64_MAX, vhi = -1;
    for (int64_t r = 0; r < kh; ++r) {
      rlo[r] = INT64_MAX;
      rhi[r] = -1;
      for (int64_t t = 0; t < nt; ++t)
        for (int i = 0; i < 16; ++i) {
          const int64_t o = dws_offset(g, &L, i, r, t);
          off[r * nt + t][i] = (int32_t)o;
          if (o >= 0 && o < rlo[r]) rlo[r] = o;
          if (o > rhi[r]) rhi[r] = o;
        }
      if (rhi[r] >= 0 && rlo[r] < vlo) vlo = rlo[r];
      if (rhi[r] > vhi) vhi = rhi[r];
    }
    const int whole = hw <= 64 || vhi < 0 || vhi - vlo < 64;
    for (int64_t r = 0; r < kh; ++r) {
      dws_entry* e = tab + v * kh + r;
      const int64_t lo = hw <= 64 ? 0 : whole ? vlo : rlo[r], hi = whole ? vhi : rhi[r];
      if (hi >= 0 && hi - lo >= 64) return 0;
      e->base = hi >= 0 ? lo : 0;
      e->reuse = e->base == prev;
      prev = e->base;
      const int64_t n = hw - e->base < 64 ? hw - e->base : 64;
      e->load = n >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << n) - 1);
      for (int64_t q = 0; q < nq; ++q) {
        uint8_t b[64];
        __mmask64 take = 0;
        for (int64_t i = 0; i < 16; ++i)
          for (int64_t t = 0; t < 4; ++t) {
            const int64_t o = off[r * nt + 4 * q + t][i];
            b[4 * i + t] = (uint8_t)(o >= 0 ? o - e->base : 0);
            if (o >= 0) take |= (__mmask64)1 << (4 * i + t);
          }
        e->idx[q] = _mm512_loadu_si512(b);
        e->take[q] = take;
      }
    }
  }
  return 1;
}

/* The tables of the last few geometries, kept from call to call: a table depends on the
 * spatial geometry only (not on the channels or the data), MobileNets run each small-plane
 * geometry in several layers, and building one cost as much as a tenth of its layer (13K
 * cycles for 14x14). Slot WS_DWS holds the directory, slots WS_DWS + 1 + i the tables. */

typedef struct dws_key { /* all int64_t: no padding bytes for memcmp */
  int64_t h, w, out_h, out_w, kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w,
      pad_top, pad_left, nq;
} dws_key;

typedef struct dws_dir {
  dws_key key[DWS_CACHE];
  void* table[DWS_CACHE]; /* the slot's memory the entry was built in (a grown slot moves) */
  int8_t applies[DWS_CACHE]; /* 0: dws_build said the geometry has no table */
  int next;                  /* the entry the next new geometry replaces */
} dws_dir;

/* This geometry's table (*tab NULL when it has none); 0 when out of memory. Call it before a
 * parallel region (the workspace is not thread-safe). */
static int dws_table(const conv_geometry* g, int64_t nq, workspace* ws, const dws_entry** tab) {
  const dws_key key = {.h = g->h, .w = g->w, .out_h = g->out_h, .out_w = g->out_w,
                       .kernel_h = g->kernel_h, .kernel_w = g->kernel_w, .stride_h = g->stride_h,
                       .stride_w = g->stride_w, .dilation_h = g->dilation_h,
                       .dilation_w = g->dilation_w, .pad_top = g->pad_top, .pad_left = g->pad_left,
                       .nq = nq};
  const int fresh = ws->ptr[WS_DWS] == NULL;
  dws_dir* dir = workspace_get(ws, WS_DWS, sizeof(dws_dir));
  if (dir == NULL) return 0;
  if (fresh) memset(dir, 0, sizeof *dir);
  for (int i = 0; i < DWS_CACHE; ++i) {
    if (dir->table[i] != NULL && dir->table[i] == ws->ptr[WS_DWS + 1 + i] &&
        memcmp(&dir->key[i], &key, sizeof key) == 0) {
      *tab = dir->applies[i] ? dir->table[i] : NULL;
      return 1;
    }
  }
  const int i = dir->next;
  dir->next = (i + 1) % DWS_CACHE;
  dir->table[i] = NULL;
  const int64_t nvec = ((int64_t)g->out_h * g->out_w + 15) / 16;
  dws_entry* t =
      workspace_get(ws, WS_DWS + 1 + i, (size_t)(nvec * g->kernel_h) * sizeof(dws_entry));
  if (t == NULL) return 0;
  dir->key[i] = key;
  dir->applies[i] = (int8_t)dws_build(g, nq, t);
  dir->table[i] = t;
  *tab = dir->applies[i] ? t : NULL;
  return 1;
}

/* Vector v of a plane: its 16 accumulators. x holds the last loaded bytes (entries that reuse
 * them load nothing). */
static inline __attribute__((always_inline)) __m512i dws_vector(const dws_entry* tab, int64_t kh,
                                                                int64_t nq, int64_t v,
                                                                const int8_t* src,
                                                                const __m512i* wv, __m512i init,
                                                                __m512i padu, __m512i* x) {
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  __m512i acc = init;
  for (int64_t r = 0; r < kh; ++r) {
    const dws_entry* e = tab + v * kh + r;
    if (!e->reuse) *x = _mm512_xor_si512(_mm512_maskz_loadu_epi8(e->load, src + e->base), flip);
    for (int64_t q = 0; q < nq; ++q)
      acc = _mm512_dpbusd_epi32(acc, _mm512_mask_permutexvar_epi8(padu, e->take[q], e->idx[q], *x),
                                wv[r * nq + q]);
  }
  return acc;
}

/* A plane's codes with converter cvt (its form `split`), 64 per store. The common kernels
 * (3x3: one weight word a row; 5x5: two) have bodies compiled for them: with kh and nq
 * variables the four vectors' sums went through the stack and the row loops stayed loops
 * (MobileNets' 14x14 and 7x7 depthwise layers took 1.6x ONNX Runtime's time). */
static inline __attribute__((always_inline)) void dws_codes_body(
    const int64_t KH, const int64_t NQ, const int SPLIT, const dws_entry* tab, int64_t ohw,
    const int8_t* src, const __m512i* wv, __m512i init, __m512i padu,
    const sdp_i8_lane_cvt* cvt, int8_t lo, int8_t hi, int8_t* y) {
  const int64_t nvec = (ohw + 15) / 16;
  const __m512i l = _mm512_set1_epi8(lo), h = _mm512_set1_epi8(hi);
  __m512i x = _mm512_setzero_si512();
  for (int64_t v = 0; v < nvec; v += 4) {
    const __m512i q0 =
        sdp_i8_lanes_form(cvt, dws_vector(tab, KH, NQ, v, src, wv, init, padu, &x), SPLIT);
    __m512i q1 = q0, q2 = q0, q3 = q0; /* past the plane: codes not stored */
    if (v + 1 < nvec)
      q1 = sdp_i8_lanes_form(cvt, dws_vector(tab, KH, NQ, v + 1, src, wv, init, padu, &x), SPLIT);
    if (v + 2 < nvec)
      q2 = sdp_i8_lanes_form(cvt, dws_vector(tab, KH, NQ, v + 2, src, wv, init, padu, &x), SPLIT);
    if (v + 3 < nvec)
      q3 = sdp_i8_lanes_form(cvt, dws_vector(tab, KH, NQ, v + 3, src, wv, init, padu, &x), SPLIT);
    const int64_t n = ohw - 16 * v;
    const __mmask64 keep = n >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1;
    const __m512i codes = sdp_i8_codes64(q0, q1, q2, q3);
    _mm512_mask_storeu_epi8(y + 16 * v, keep, _mm512_min_epi8(_mm512_max_epi8(codes, l), h));
  }
}

/* dws_codes_body for a LUT activation through its plan's byte tables (sdp_i8_lut_bytes): each
 * vector's t offsets from the channel's converter, 64 codes from the tables. Q: the byte form
 * (L->q: every channel has it, sdp_i8_lanes_lut_q), whose front is four operations a vector
 * where the u form's is six to seven, and the tables' clamp of w goes (conv/i8.h's
 * lut_bytes_of). */
static inline __attribute__((always_inline)) void dws_lut_body(
    const int64_t KH, const int64_t NQ, const int Q, const dws_entry* tab, int64_t ohw,
    const int8_t* src, const __m512i* wv, __m512i init, __m512i padu, const sdp_i8_lane_cvt* cvt,
    const sdp_i8_lane_lut* L, int8_t* y) {
  const int64_t nvec = (ohw + 15) / 16;
  const sdp_i8_lane_cvt* const es[4] = {cvt, cvt, cvt, cvt};
  __m512i x = _mm512_setzero_si512();
  for (int64_t v = 0; v < nvec; v += 4) {
    __m512i a[4];
    a[0] = dws_vector(tab, KH, NQ, v, src, wv, init, padu, &x);
    a[1] = a[2] = a[3] = a[0]; /* past the plane: codes not stored */
    if (v + 1 < nvec) a[1] = dws_vector(tab, KH, NQ, v + 1, src, wv, init, padu, &x);
    if (v + 2 < nvec) a[2] = dws_vector(tab, KH, NQ, v + 2, src, wv, init, padu, &x);
    if (v + 3 < nvec) a[3] = dws_vector(tab, KH, NQ, v + 3, src, wv, init, padu, &x);
    const int64_t n = ohw - 16 * v;
    const __mmask64 keep = n >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1;
    _mm512_mask_storeu_epi8(y + 16 * v, keep, lut_bytes_of(L, es, a, Q, -1, -1, -1, NULL));
  }
}

#define DWS_LUT(NAME, KH_, NQ_, Q_)                                                            \
  static void NAME(int64_t kh, int64_t nq, const dws_entry* tab, int64_t ohw,                 \
                   const int8_t* src, const __m512i* wv, __m512i init, __m512i padu,           \
                   const sdp_i8_lane_cvt* cvt, const sdp_i8_lane_lut* L, int8_t* y) {          \
    (void)kh, (void)nq;                                                                        \
    dws_lut_body(KH_, NQ_, Q_, tab, ohw, src, wv, init, padu, cvt, L, y);                     \
  }
DWS_LUT(dws_lut_3, 3, 1, 0)
DWS_LUT(dws_lut_5, 5, 2, 0)
DWS_LUT(dws_lut_any, kh, nq, 0)
DWS_LUT(dws_lut_3_q, 3, 1, 1)
DWS_LUT(dws_lut_5_q, 5, 2, 1)
DWS_LUT(dws_lut_any_q, kh, nq, 1)
#undef DWS_LUT

/* A band's int32 values v (count of them) of channel converter e as LUT codes through the
 * plan's byte tables, 64 a step (Q, M, G, DC: conv/i8.h's lut_bytes_of; with the byte form
 * and the compiler's shapes the tables stay in registers over the band, as in
 * panel_step_lut_bytes). */
static inline __attribute__((always_inline)) void run_lut_body(
    const sdp_i8_lane_cvt* e, const sdp_i8_lane_lut* L, const int32_t* v, int8_t* y,
    int64_t count, const int Q, const int M, const int G, const int DC) {
  const sdp_i8_lane_cvt* const es[4] = {e, e, e, e};
  __m512i TR[4 * (1 + 3 * 2)];
  const __m512i* T = NULL;
  if (Q && M >= 0 && M <= 2) {
    sdp_i8_lut_tables_to(L->bytes, M, DC, TR);
    T = TR;
  }
  for (int64_t i = 0; i < count; i += 64) {
    const int64_t n = count - i;
    __m512i a[4];
    for (int r = 0; r < 4; ++r)
      a[r] = _mm512_maskz_loadu_epi32(lane_mask(n - 16 * r), v + i + 16 * r);
    const __mmask64 keep = n >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1;
    _mm512_mask_storeu_epi8(y + i, keep, lut_bytes_of(L, es, a, Q, M, G, DC, T));
  }
}

static void codes_of_run_lut(const sdp_i8_lane_cvt* e, const sdp_i8_lane_lut* L, const int32_t* v,
                             int8_t* y, int64_t count) {
  switch (L->q ? lut_bytes_shape(L->bytes) : -1) {
#define LUT_SHAPE(M_, S_) \
  case LUT_SHAPE_OF(M_, S_): run_lut_body(e, L, v, y, count, 1, M_, 1, S_); return;
    LUT_SHAPES
#undef LUT_SHAPE
    default: break;
  }
  if (L->q) run_lut_body(e, L, v, y, count, 1, -1, -1, -1);
  else run_lut_body(e, L, v, y, count, 0, -1, -1, 0);
}

typedef void (*dws_codes_fn)(int64_t, int64_t, const dws_entry*, int64_t, const int8_t*,
                             const __m512i*, __m512i, __m512i, const sdp_i8_lane_cvt*, int8_t,
                             int8_t, int8_t*);
#define DWS_CODES(NAME, KH_, NQ_, SPLIT_)                                                     \
  static void NAME(int64_t kh, int64_t nq, const dws_entry* tab, int64_t ohw,                 \
                   const int8_t* src, const __m512i* wv, __m512i init, __m512i padu,           \
                   const sdp_i8_lane_cvt* cvt, int8_t lo, int8_t hi, int8_t* y) {              \
    (void)kh, (void)nq;                                                                        \
    dws_codes_body(KH_, NQ_, SPLIT_, tab, ohw, src, wv, init, padu, cvt, lo, hi, y);          \
  }
DWS_CODES(dws_codes_3_4, 3, 1, 4)
DWS_CODES(dws_codes_3_3, 3, 1, 3)
DWS_CODES(dws_codes_3_2, 3, 1, 2)
DWS_CODES(dws_codes_3_1, 3, 1, 1)
DWS_CODES(dws_codes_3_0, 3, 1, 0)
DWS_CODES(dws_codes_5_4, 5, 2, 4)
DWS_CODES(dws_codes_5_3, 5, 2, 3)
DWS_CODES(dws_codes_5_2, 5, 2, 2)
DWS_CODES(dws_codes_5_1, 5, 2, 1)
DWS_CODES(dws_codes_5_0, 5, 2, 0)
DWS_CODES(dws_codes_any_4, kh, nq, 4)
DWS_CODES(dws_codes_any_3, kh, nq, 3)
DWS_CODES(dws_codes_any_2, kh, nq, 2)
DWS_CODES(dws_codes_any_1, kh, nq, 1)
DWS_CODES(dws_codes_any_0, kh, nq, 0)
#undef DWS_CODES

/* All outputs of one plane (src) for output channel weights wk: into grid (16-lane stores), or
 * with a converter (cvt not NULL) as codes into y, 64 per step, straight from the registers.
 * Inlined into dwr_item's loop over planes, with dw_weight_words: as calls (two per plane, each
 * with its 64-byte aligned frame) they were a fifth of a 7x7 plane's time on Zen 5
 * (docs/kernels.md, conv/i8_dw_rows_vbmi.c). */
static inline __attribute__((always_inline)) void dws_plane(
    const conv_geometry* g, const dwr_plan* D, const dws_entry* tab, const int8_t* src,
    int32_t in_zero, const int8_t* wk, int32_t* grid, const sdp_i8_lane_cvt* cvt,
    const sdp_i8_lane_lut* lut, int8_t lo, int8_t hi, int8_t* y) {
  const int64_t kh = g->kernel_h, nq = D->nq, ohw = (int64_t)g->out_h * g->out_w;
  __m512i wv[ACCEL_MAX_CONV_KERNEL * DWR_WORDS];
  const uint32_t sum = dw_weight_words(D, g, wk, wv);
  const __m512i init = _mm512_set1_epi32((int32_t)(0u - (uint32_t)(128 + in_zero) * sum));
  const __m512i padu = _mm512_set1_epi8((char)(in_zero ^ 0x80));
  if (cvt != NULL && lut != NULL) {
    if (lut->q)
      (kh == 3 && nq == 1   ? dws_lut_3_q
       : kh == 5 && nq == 2 ? dws_lut_5_q
                            : dws_lut_any_q)(kh, nq, tab, ohw, src, wv, init, padu, cvt, lut, y);
    else
      (kh == 3 && nq == 1   ? dws_lut_3
       : kh == 5 && nq == 2 ? dws_lut_5
                            : dws_lut_any)(kh, nq, tab, ohw, src, wv, init, padu, cvt, lut, y);
    return;
  }
  if (cvt == NULL) {
    __m512i x = _mm512_setzero_si512();
    for (int64_t v = 0; v < (ohw + 15) / 16; ++v)
      _mm512_storeu_si512(grid + 16 * v, dws_vector(tab, kh, nq, v, src, wv, init, padu, &x));
    return;
  }
  static const dws_codes_fn fns[3][5] = {
      {dws_codes_any_0, dws_codes_any_1, dws_codes_any_2, dws_codes_any_3, dws_codes_any_4},
      {dws_codes_3_0, dws_codes_3_1, dws_codes_3_2, dws_codes_3_3, dws_codes_3_4},
      {dws_codes_5_0, dws_codes_5_1, dws_codes_5_2, dws_codes_5_3, dws_codes_5_4}};
  const int shape = kh == 3 && nq == 1 ? 1 : kh == 5 && nq == 2 ? 2 : 0;
  const int split = cvt->k == 16 ? 1 + cvt->exact + cvt->conv : 0;
  fns[shape][split](kh, nq, tab, ohw, src, wv, init, padu, cvt, lo, hi, y);
}

/* The loop (pool_for items): planes [item * chunk, ...) of the input. */
typedef struct dwr_job {
  const plan* P;
  const dwr_plan* D;
  int32_t in_zero;
  const int8_t* in;
  const int8_t* w;
  int8_t* out;
  const sdp_i8* ep;
  int32_t* const* grids; /* per participant: a band of int32 outputs */
  int64_t planes, chunk;
  const dws_entry* small; /* small planes: the table of dws_plane, else NULL */
  const sdp_i8_lane_cvt* cvt; /* every channel's converter in lanes, or NULL: sdp_i8_span */
  const sdp_i8_lane_lut* lut; /* with cvt, a LUT plan's byte tables (cvt: t), or NULL */
  int8_t lo, hi;
} dwr_job;

static void dwr_item(void* ctx, int64_t item, int participant) {
  const dwr_job* J = ctx;
  const plan* P = J->P;
  const dwr_plan* D = J->D;
  const conv_geometry* g = P->g;
  const sdp_i8* ep = J->ep;
  const int64_t ow = g->out_w;
  int32_t* grid = J->grids[participant];
  const int64_t p1 = (item + 1) * J->chunk;
  for (int64_t pl = item * J->chunk; pl < p1 && pl < J->planes; ++pl) {
    const int64_t b = pl / g->c, c = pl % g->c;
    const int8_t* src = J->in + pl * P->hw;
    for (int64_t m = 0; m < P->mg; ++m) {
      const int64_t k = c * P->mg + m;
      const sdp_i8_lane_cvt* cvt = J->cvt != NULL ? J->cvt + k : NULL;
      if (J->small != NULL) {
        const int64_t at = (b * g->k + k) * P->ohw;
        dws_plane(g, D, J->small, src, J->in_zero, J->w + k * P->rs, grid, cvt, J->lut, J->lo,
                  J->hi, J->out + at);
        if (cvt == NULL)
          convert_at(ep, k, grid, J->out, at, P->ohw);
        continue;
      }
      for (int64_t oy0 = 0; oy0 < g->out_h; oy0 += D->band) {
        const int64_t oy1 = oy0 + D->band < g->out_h ? oy0 + D->band : g->out_h;
        dwr_band(P, D, src, J->in_zero, J->w + k * P->rs, oy0, oy1, grid);
        const int64_t at = (b * g->k + k) * P->ohw + oy0 * ow;
        if (cvt != NULL && J->lut != NULL)
          codes_of_run_lut(cvt, J->lut, grid, J->out + at, (oy1 - oy0) * ow);
        else if (cvt != NULL)
          codes_of_run(cvt, J->lo, J->hi, grid, J->out + at, (oy1 - oy0) * ow);
        else
          convert_at(ep, k, grid, J->out, at, (oy1 - oy0) * ow);
      }
    }
  }
}

static accel_status conv_dw_rows(const plan* P, const dwr_plan* D, int32_t in_zero,
                                 const int8_t* in, const int8_t* w, int8_t* out, const sdp_i8* ep,
                                 workspace* ws, int nth) {
  const conv_geometry* g = P->g;
  const int64_t planes = (int64_t)g->n * g->c;
  if (nth > planes) nth = (int)planes;
  const dws_entry* small = NULL;
  if (P->ohw <= DWS_OUT && !dws_table(g, D->nq, ws, &small)) return ACCEL_ERR_NO_MEMORY;
  /* whole 16-lane stores reach 15 columns past the band's last row (or the plane's end) */
  const size_t grid_bytes =
      round64((size_t)((D->band > g->out_h ? D->band : g->out_h) * g->out_w + 16) *
              sizeof(int32_t));
  int32_t* grids[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    grids[t] = workspace_get(ws, t, grid_bytes);
    if (grids[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  int64_t chunk = 8192 / (P->ohw * P->mg + 1);
  if (chunk > planes / (4 * nth)) chunk = planes / (4 * nth);
  if (chunk < 1) chunk = 1;
  dwr_job J = {.P = P, .D = D, .in_zero = in_zero, .in = in, .w = w, .out = out, .ep = ep,
               .grids = grids, .planes = planes, .chunk = chunk, .small = small, .cvt = NULL,
               .lut = NULL, .lo = 0, .hi = 0};
  int kind;
  sdp_i8_lane_add unused;
  const int64_t vmax = P->kd * 255 * 128;
  const sdp_i8_lane_cvt* cvt = i8_lanes_cached(ep, g->k, vmax, 0, ws, &kind, &J.lo, &J.hi, &unused);
  if (cvt == NULL) return ACCEL_ERR_NO_MEMORY;
  if (kind == 1) J.cvt = cvt;
  sdp_i8_lane_lut lut;
  if (kind == 0 && ep->lut != NULL) {
    /* a LUT activation in registers where its plan has byte tables (with the bins' gathers
     * the lanes were slower than sdp_i8_span per plane: docs/kernels.md); the channels'
     * constants are kept by sdp_i8_lanes.c */
    sdp_i8_lane_cvt* t = workspace_get(ws, WS_CVT, (size_t)g->k * sizeof(sdp_i8_lane_cvt));
    if (t == NULL) return ACCEL_ERR_NO_MEMORY;
    if (sdp_i8_lanes_prepare_lut(ep, 0, (int32_t)g->k, vmax, t, &lut) && lut.bytes != NULL) {
      J.cvt = t;
      J.lut = &lut;
    }
  }
  pool_for(nth, (planes + chunk - 1) / chunk, dwr_item, (void*)&J);
  return ACCEL_OK;
}

/* Depthwise layers whose window rows fit the kernel's 64-byte loads. */
static int dw_rows_applies(const conv_i8_call* c) {
  dwr_plan D;
  return c->P->cg == 1 && dwr_make_plan(c->P->g, &D);
}

static accel_status dw_rows_run(const conv_i8_call* c) {
  dwr_plan D;
  dwr_make_plan(c->P->g, &D);
  return conv_dw_rows(c->P, &D, c->in_zero, c->in, c->raw, c->out, c->ep, c->ws, c->nth);
}

const conv_i8_impl conv_i8_dw_rows_vbmi_impl = {.name = "dw_rows_vbmi", .applies = dw_rows_applies,
                                                .supports = NULL, .run = dw_rows_run};
#endif /* __AVX512VBMI__ */
#endif /* CONV_I8_VNNI */
