/* conv/i8.h - the INT8 CONV family's shared definitions (internal to csrc/conv/i8_*.c).
 *
 * The plan of a geometry, the packed weights' layouts, the VNNI GEMM's byte source, input copy
 * and epilogue in lanes, which several implementations share (conv/i8_gemm_vnni.c), and the
 * implementation interface of conv/i8_impls.c's list. Small helpers are static inline here so
 * that every kernel file inlines them as the one file did.
 */
#ifndef ACCEL_CONV_I8_H_
#define ACCEL_CONV_I8_H_

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__)
#define CONV_I8_VNNI 1
#include <immintrin.h>
#endif

#if defined(CONV_I8_VNNI) && defined(__AMX_TILE__) && defined(__AMX_INT8__)
#define CONV_I8_AMX 1
#endif

#include "kernels.h"
#include "sdp_i8_lanes.h"

enum {
  MR = 8,             /* output channels per micro-tile */
  NR = 48,            /* grid positions per micro-tile (3 vectors of 16) */
  TILE = 8,           /* panels of NR positions per work unit */
  WS_PACK = WS_CONV_I8_FIRST,       /* shared slots: weights packed on this call, */
  WS_COPY = WS_PACK + 1,            /* the input copy (implicit) or columns (im2col), */
  WS_OFF = WS_PACK + 2,             /* the depth steps' offsets, */
  WS_XP = WS_PACK + 3,              /* the columns of the matrix-vector path, */
  WS_CVT = WS_PACK + 4,             /* the channels' converters in lanes (sdp_i8_lanes.h), */
  WS_DWS = WS_PACK + 5,             /* the small-plane depthwise tables' directory, */
  DWS_CACHE = 4,                    /* the tables, kept in slots WS_DWS + 1 .. + DWS_CACHE, */
  WS_BOFF = WS_DWS + DWS_CACHE + 1, /* AMX: the depth tiles' offsets */
  WS_LANES = WS_BOFF + 1,           /* the channels' lane converters, kept (i8_lanes_cached) */
  GEMV_COLS = 8,      /* at most this many columns in all: matrix-vector products */
  AMB = 32,           /* AMX: output channels per block (two A tiles of 16 rows) */
  AKT = 16            /* AMX: 4-channel blocks per depth tile (a tile row's 64 bytes) */
};
_Static_assert((int)WS_LANES < (int)WORKSPACE_SLOTS, "conv/i8.h's shared workspace slots");

typedef int32_t __attribute__((may_alias)) i32_alias;

static inline size_t round64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

/* A convolution's derived sizes. */
typedef struct plan {
  const conv_geometry* g;
  int64_t cg, mg;      /* input / output channels per group */
  int64_t rs, kd;      /* taps per channel, depth per group (cg * rs) */
  int64_t c4, kd4;     /* VNNI: 4-channel blocks per group, depth steps (c4 * rs) */
  int64_t mblocks;     /* MR-channel blocks per group */
  int64_t hw, ohw;
  int64_t kc, nch, nk; /* AMX: c4 blocks per depth tile (<= 16), tiles per tap, depth tiles */
  int64_t ablocks;     /* AMX: AMB-channel blocks per group */
} plan;

static inline void make_plan(const conv_geometry* g, plan* P) {
  P->g = g;
  P->cg = g->c / g->groups;
  P->mg = g->k / g->groups;
  P->rs = (int64_t)g->kernel_h * g->kernel_w;
  P->kd = P->cg * P->rs;
  P->c4 = (P->cg + 3) / 4;
  P->kd4 = P->c4 * P->rs;
  P->mblocks = (P->mg + MR - 1) / MR;
  P->hw = (int64_t)g->h * g->w;
  P->ohw = (int64_t)g->out_h * g->out_w;
  P->kc = P->c4 < AKT ? P->c4 : AKT;
  P->nch = (P->c4 + AKT - 1) / AKT;
  P->nk = P->nch * P->rs;
  P->ablocks = (P->mg + AMB - 1) / AMB;
}

/* ---- packed weights ----------------------------------------------------------------------
 * A 64-byte header, then the layout the kernel reads:
 *   LAYOUT_PLAIN: the weights as given, [K][C/groups][R][S] (depthwise, and builds without
 *                 VNNI);
 *   LAYOUT_VNNI:  per group and block of MR output channels, [c4][r][s][MR][4] s8 (4 input
 *                 channels of one output channel form the 32-bit word vpdpbusd multiplies;
 *                 channels past C/groups and rows past K/groups are 0), followed by the
 *                 int32 weight sums [group][block][MR] of the +128 offset correction;
 *   LAYOUT_AMX:   LAYOUT_VNNI (data_bytes of it, then its sums), followed by, per group and
 *                 block of AMB output channels, per depth tile d = (chunk j,
 *                 tap t) (d = j * rs + t), two A tiles of 16 rows x 64 bytes (rows: output
 *                 channels; bytes 4i..4i+3 of a row: the 4 input channels of 4-channel block
 *                 first_j + i at tap t, i < kc), first_j = min(16 j, c4 - kc): the last chunk
 *                 starts early rather than past the copy, its blocks already covered by chunk
 *                 j - 1 having zero weights. Zero past kc, C/groups and K/groups. Then the
 *                 int32 weight sums [group][block][AMB]. Where AMX is available (a grouped
 *                 or dense convolution of at least AMX_MIN_C4 4-channel blocks): both
 *                 layouts, since the path depends on the input's size (explicit columns,
 *                 matrix-vector), which packing does not know, and on the switch
 *                 conv_i8_amx.
 *   LAYOUT_I16:   builds with AVX2 but not AVX-512 VNNI (conv/i8_gemm_avx2.c), grouped and
 *                 dense convolutions: per group and block of MR output channels, [kd2][MR]
 *                 32-bit words, kd2 = ceil(kd / 2): word (j, m) holds row m's weights of depth
 *                 2j (low int16) and 2j + 1 (high int16; 0 past kd), sign-extended, so one
 *                 broadcast word is vpmaddwd's pair; rows past K/groups are 0. No sums: the
 *                 kernel subtracts in_zero from the input, exactly, in int16. Twice the bytes of
 *                 the weights, read in place by the GEMM with no widening in its loop.
 *   LAYOUT_I16T:  the same builds, stride-1 kxk layers (i8_tap_major): per group
 *                 and block of MR output channels, [rs][cg2][MR] 32-bit words, cg2 =
 *                 ceil(C/groups / 2): word (t, p, m) holds row m's weights of input channels 2p
 *                 (low int16) and 2p + 1 (high; 0 past C/groups) at tap t, so a tap's depth
 *                 rows pair channels as the input copy pairs them (conv/i8_gemm_avx2.c).
 *   LAYOUT_I16W:  the same builds, stride-1 3x3 layers of one group that the exact Winograd
 *                 kernel takes (i8_winograd_fits: 32 channels or more, within its bound):
 *                 LAYOUT_I16T's words (data_bytes of it), then per block of MR output
 *                 channels [16][cg2][MR] 32-bit words: word
 *                 (xi, p, m) holds position xi = 4i + j of row m's 4 G g G^T (exact integers
 *                 within +-1152) for input channels 2p (low int16) and 2p + 1 (high; 0 past
 *                 C) (conv/i8_winograd_avx2.c). */
enum {
  PACK_MAGIC = 0x38494341 /* "ACI8" */,
  LAYOUT_PLAIN = 1,
  LAYOUT_VNNI = 2,
  LAYOUT_AMX = 3,
  LAYOUT_I16 = 4,
  LAYOUT_I16T = 5,
  LAYOUT_I16W = 6,
  HEADER = 64
};

typedef struct pack_header {
  uint32_t magic;
  int32_t layout;
  int32_t k, c, kernel_h, kernel_w, groups, mr;
  uint64_t data_bytes;     /* weight bytes after the header (64-byte multiple) */
} pack_header;

/* AMX: with fewer 4-channel blocks (C/groups < 13) a product's depth is mostly zeros; with
 * fewer depth steps the tiles' loads and stores (the initial correction, the sums) outweigh
 * the products, and VNNI was faster on MobileNetV2's 1x1 expansions of 4-8 depth steps
 * (docs/kernels.md, conv/i8.h). */
enum { AMX_MIN_C4 = 4, AMX_MIN_KD4 = 16 };

/* The layout's weight bytes (LAYOUT_AMX: its VNNI part's; the header's data_bytes). */
static inline size_t data_bytes(const plan* P, int layout) {
  const conv_geometry* g = P->g;
  if (layout == LAYOUT_PLAIN) return round64((size_t)g->k * (size_t)P->kd);
  if (layout == LAYOUT_I16)
    return round64((size_t)(g->groups * P->mblocks * ((P->kd + 1) / 2) * MR) * sizeof(int32_t));
  if (layout == LAYOUT_I16T || layout == LAYOUT_I16W) {
    const size_t words = (size_t)(g->groups * P->mblocks * ((P->cg + 1) / 2) * MR);
    return round64(words * (size_t)P->rs * sizeof(int32_t)) +
           (layout == LAYOUT_I16W ? round64(words * 16 * sizeof(int32_t)) : 0);
  }
  return round64((size_t)(g->groups * P->mblocks * P->kd4 * MR * 4));
}

static inline size_t wsum_bytes(const plan* P, int layout) {
  if (layout == LAYOUT_PLAIN || layout == LAYOUT_I16 || layout == LAYOUT_I16T ||
      layout == LAYOUT_I16W)
    return 0;
  return round64((size_t)(P->g->groups * P->mblocks * MR) * sizeof(int32_t));
}

/* LAYOUT_AMX's tiles, and their weight sums. */
static inline size_t amx_data_bytes(const plan* P) {
  return (size_t)(P->g->groups * P->ablocks * P->nk * 2 * 1024);
}

static inline size_t amx_wsum_bytes(const plan* P) {
  return round64((size_t)(P->g->groups * P->ablocks * AMB) * sizeof(int32_t));
}

/* Whether packed weights hold the AMX layout too (AMX available, whether on or not;
 * conv/i8_amx.c). */
int i8_amx_packed(const plan* P);
/* Block (grp, mb) of LAYOUT_VNNI / (grp, ab) of LAYOUT_AMX and their rows' weight sums
 * (conv/i8_pack.c). */
void i8_pack_block(const plan* P, const int8_t* w, int64_t grp, int64_t mb, int8_t* data,
                   int32_t* wsum);
void i8_pack_amx_block(const plan* P, const int8_t* w, int64_t grp, int64_t ab, int8_t* data,
                       int32_t* wsum);
/* LAYOUT_I16's / LAYOUT_I16T's words of every group and block (conv/i8_pack.c). */
void i8_pack_i16(const plan* P, const int8_t* w, int32_t* data);
void i8_pack_i16t(const plan* P, const int8_t* w, int32_t* data);
/* Whether an AVX2 build packs this layer's weights tap by tap (LAYOUT_I16T: stride-1 kxk
 * layers, which the implicit GEMM takes; the column GEMM reads either layout), from the fields
 * packing knows (no spatial size) (conv/i8_gemm_avx2.c). */
int i8_tap_major(const plan* P);
/* Whether an AVX2 build packs this layer for the exact Winograd kernel too (LAYOUT_I16W: a
 * stride-1 3x3 layer of one group, deep enough for it to pay, whose sums times 4 fit int32),
 * and its words (conv/i8_winograd_avx2.c). */
int i8_winograd_fits(const plan* P);
void i8_pack_i16w(const plan* P, const int8_t* w, int32_t* data);

/* Channel k's int32 values v converted by the SDP into out[at, at + n), its element-wise
 * operand (if any) read at the same offset. */
static inline void convert_at(const sdp_i8* ep, int64_t k, const int32_t* v, int8_t* out,
                              int64_t at, int64_t n) {
  sdp_i8_span(ep, (int32_t)k, v, ep->ew_operand != NULL ? ep->ew_operand + at : NULL, out + at,
              n);
}

/* ---- the implementation interface (conv/i8_impls.c) --------------------------------------
 * One call's operands: the weights as given, and the packed ones in each layout the packing
 * made (NULL where it made none; raw: the plain weights, packed or not). */
typedef struct conv_i8_call {
  const plan* P;
  int32_t in_zero;
  const int8_t* in;
  const int8_t* weights; /* as given: the kernels that pack on the call read these */
  const int8_t* raw;
  const int32_t* i16;    /* LAYOUT_I16, */
  const int32_t* i16t;   /* LAYOUT_I16T (or LAYOUT_I16W's first part), */
  const int32_t* i16w;   /* LAYOUT_I16W's Winograd words, */
  const int8_t* apack;   /* LAYOUT_VNNI, */
  const int32_t* wsum;
  const int8_t* xpack;   /* LAYOUT_AMX */
  const int32_t* xsum;
  int8_t* out;
  const sdp_i8* ep;
  workspace* ws;
  int nth;
} conv_i8_call;

/* An implementation: applies, whether the list picks it for this call (the geometry, the CPU
 * and the measured preference; the first in the list that applies runs); supports, whether it
 * computes this geometry at all (ACCEL_CONV_IMPL forces it only then; NULL: applies); run. */
typedef struct conv_i8_impl {
  const char* name;
  int (*applies)(const conv_i8_call* c);
  int (*supports)(const conv_i8_call* c);
  accel_status (*run)(const conv_i8_call* c);
} conv_i8_impl;

/* The converters of channels [0, k) of p for |v| <= vmax, kept in the device's workspace from
 * run to run (conv/i8_lanes_cache.c, every build). */
const sdp_i8_lane_cvt* i8_lanes_cached(const sdp_i8* p, int64_t k, int64_t vmax, int add_ok,
                                       workspace* ws, int* kind, int8_t* lo, int8_t* hi,
                                       sdp_i8_lane_add* add);

extern const conv_i8_impl conv_i8_portable_impl;
#ifdef __AVX2__
extern const conv_i8_impl conv_i8_dw_madd_avx2_impl, conv_i8_stem_madd_avx2_impl;
#endif
#if defined(__AVX2__) && !defined(CONV_I8_VNNI)
extern const conv_i8_impl conv_i8_winograd16_avx2_impl, conv_i8_implicit16_avx2_impl,
    conv_i8_gemm_avx2_impl;
#endif
#ifdef CONV_I8_VNNI
extern const conv_i8_impl conv_i8_dw_vnni_impl, conv_i8_im2col_vnni_impl, conv_i8_small_vnni_impl,
    conv_i8_implicit_vnni_impl;
#ifdef __AVX512VBMI__
extern const conv_i8_impl conv_i8_dw_rows_vbmi_impl, conv_i8_stem_vbmi_impl;
#endif
#ifdef CONV_I8_AMX
extern const conv_i8_impl conv_i8_amx_impl;
#endif
#endif

/* A 1x1 convolution with stride 1 and no padding: each output plane's positions are the input
 * plane's (the implicit GEMM's flat copy, the AVX2 GEMM's column rows). */
static inline int imp_flat(const conv_geometry* g) {
  return g->kernel_h == 1 && g->kernel_w == 1 && g->stride_h == 1 && g->stride_w == 1 &&
         g->pad_top == 0 && g->pad_left == 0 && g->out_h == g->h && g->out_w == g->w;
}

/* The form every one of the rows' converters has (the VNNI GEMMs' panels; the AVX2 GEMM's
 * residual adds): 4 / 3 the conv form (sdp_i8_lanes.h), 2 split
 * without clamp, 1 split, 0 any
 * (a residual add's: 4 without clamp and shifts >= 17, 3 without clamp and shifts <= 16, 2
 * without clamp, 1 any: 3 and 4 are not ordered, rows of both take 2). */
static inline int rows_form(const sdp_i8_lane_cvt* cvt, int64_t rows, int add) {
  if (add) {
    int low = 0, high = 0; /* rows with shifts <= 16 / >= 17 */
    for (int64_t m = 0; m < rows; ++m) {
      if (!cvt[m].exact) return 1;
      if (cvt[m].shift == 0 && cvt[m].add == 0) low = 1;
      else high = 1;
    }
    return low && high ? 2 : high ? 4 : 3;
  }
  int split = 4;
  for (int64_t m = 0; m < rows; ++m) {
    const int form = cvt[m].k == 16 ? 1 + cvt[m].exact + cvt[m].conv : 0;
    split = form < split ? form : split;
  }
  return split;
}

#ifdef CONV_I8_VNNI
/* The epilogue of column `col` of a tile whose rows are channels k0.. (rows of them) with one
 * output position per image: those outputs are consecutive, from out + at. */
static inline void epilogue_column(const sdp_i8* ep, const int32_t* tile, int64_t ldc, int64_t col,
                                   int64_t rows, int64_t k0, int64_t at, int8_t* out) {
  int32_t v[AMB];
  for (int64_t m = 0; m < rows; ++m) v[m] = tile[m * ldc + col];
  sdp_i8_channels(ep, (int32_t)k0, v, ep->ew_operand != NULL ? ep->ew_operand + at : NULL,
                  out + at, rows);
}

static inline __mmask16 lane_mask(int64_t n) {
  return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* The codes of rows of int32 values still in L1 (a panel just computed, or a tile's channel
 * rows), converted in lanes (sdp_i8_lanes.h) with each row's converter: rows m < E->rows, their
 * first E->cols values at c + m * ldc, the codes at E->out + m * E->ldo and a residual add's
 * operand codes (E->add) at E->opnd + m * E->ldo. The converters are prepared once per call:
 * no sdp_i8_span call (and its set-up) per row. (Converting inside the micro-kernel, before
 * the store, made GCC spill its 24 accumulators in the depth loop.) */
typedef struct panel_codes {
  const sdp_i8_lane_cvt* cvt; /* the rows' converters */
  int8_t* out;
  int64_t ldo, rows, cols;
  int8_t lo, hi;
  int split;                  /* the form every row has (sdp_i8_lanes_form): 6 .. 0 */
  const sdp_i8_lane_add* add; /* the residual add (every row split), or NULL */
  const int8_t* opnd;         /* its operand codes, laid out as out */
  int wide;                   /* rows readable to NR values whatever cols (a tile's) */
  const int32_t* corr;        /* codes_of_panel_corr: row m's values are c[m][.] + corr[m] */
  const sdp_i8_lane_lut* lut; /* a LUT activation's plan (cvt: the rows' t converters), or NULL */
} panel_codes;

/* q of the 16 values v of converter e (split: its form); with a residual add (add: 1 any,
 * 2 lean), of the 16 operand codes in o (split: the add's channel form). */
static inline __attribute__((always_inline)) __m512i q_of(const panel_codes* E,
                                                          const sdp_i8_lane_cvt* e, __m512i v,
                                                          __m128i o, int split, int add) {
  if (!add) return sdp_i8_lanes_form(e, v, split);
  return sdp_i8_lanes_add(E->add, e, v, _mm512_cvtepi8_epi32(o), split, add == 2);
}

/* Row m's 64 values from r (panel: NR of them, read unmasked, v3 = v2; else masked by k), plus
 * the row's correction (corr: codes_of_panel_corr): panel_step's and panel_step_lut's loads. */
static inline __attribute__((always_inline)) void panel_load(const panel_codes* E,
                                                              const int32_t* r, int64_t m,
                                                              const __mmask16* k, int panel,
                                                              int corr, __m512i* v0, __m512i* v1,
                                                              __m512i* v2, __m512i* v3) {
  *v0 = panel ? _mm512_loadu_si512(r) : _mm512_maskz_loadu_epi32(k[0], r);
  *v1 = panel ? _mm512_loadu_si512(r + 16) : _mm512_maskz_loadu_epi32(k[1], r + 16);
  *v2 = panel ? _mm512_loadu_si512(r + 32) : _mm512_maskz_loadu_epi32(k[2], r + 32);
  *v3 = panel ? *v2 : _mm512_maskz_loadu_epi32(k[3], r + 48);
  if (corr) {
    const __m512i cm = _mm512_set1_epi32(E->corr[m]);
    *v0 = _mm512_add_epi32(*v0, cm);
    *v1 = _mm512_add_epi32(*v1, cm);
    *v2 = _mm512_add_epi32(*v2, cm);
    *v3 = _mm512_add_epi32(*v3, cm);
  }
}

/* One step of 64 values of each row from column i (panel: of at most NR, read unmasked). */
static inline __attribute__((always_inline)) void panel_step(const panel_codes* E,
                                                              const int32_t* c, int64_t ldc,
                                                              int64_t i, int split, int add,
                                                              int panel, int corr) {
  const __m512i lo = _mm512_set1_epi8(E->lo), hi = _mm512_set1_epi8(E->hi);
  const int64_t n = E->cols - i;
  const __mmask16 k[4] = {lane_mask(n), lane_mask(n - 16), lane_mask(n - 32), lane_mask(n - 48)};
  const __mmask64 keep = n >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1;
  /* locals: the code stores could alias E's fields */
  const int64_t rows = E->rows, ldo = E->ldo;
  const sdp_i8_lane_cvt* cvt = E->cvt;
  int8_t* out = E->out + i;
  const int8_t* opnd = add ? E->opnd + i : NULL;
  for (int64_t m = 0; m < rows; ++m) {
    const sdp_i8_lane_cvt* e = cvt + m;
    const int32_t* r = c + m * ldc + i;
    __m512i o = _mm512_setzero_si512();
    if (add) o = _mm512_maskz_loadu_epi8(keep, opnd + m * ldo);
    __m512i v0, v1, v2, v3;
    panel_load(E, r, m, k, panel, corr, &v0, &v1, &v2, &v3);
    /* vectors with no value to store are not converted (their lanes are masked off): the
     * small-grid kernel's rows of 196 values (14x14) took 16 conversions for 13 vectors */
    const __m512i q0 = q_of(E, e, v0, _mm512_castsi512_si128(o), split, add);
    __m512i q1 = q0, q2 = q0, q3 = q0;
    if (n > 16) q1 = q_of(E, e, v1, _mm512_extracti32x4_epi32(o, 1), split, add);
    if (n > 32) q2 = q_of(E, e, v2, _mm512_extracti32x4_epi32(o, 2), split, add);
    if (panel) q3 = q2;
    else if (n > 48) q3 = q_of(E, e, v3, _mm512_extracti32x4_epi32(o, 3), split, add);
    const __m512i y = sdp_i8_codes64(q0, q1, q2, q3);
    _mm512_mask_storeu_epi8(out + m * ldo, keep, _mm512_min_epi8(_mm512_max_epi8(y, lo), hi));
  }
}

#ifdef __AVX512VBMI__
/* Four masks of 16 lanes as one of 64 (a: lanes 0-15). */
static inline __mmask64 lut_masks64(__mmask16 a, __mmask16 b, __mmask16 c, __mmask16 d) {
  return _mm512_kunpackd(_mm512_kunpackw(d, c), _mm512_kunpackw(b, a));
}

/* The codes of four vectors of 16 values v (rows e[0..3]'s: one row four times, or a packed
 * panel's vectors of several rows) through the byte tables: Q: the byte form (every row lq,
 * L->q), its thresholds outside the tables compared on v (G of them, -1: B->g); else u by
 * sdp_i8_lanes_lut_u. M: B->m, -1 where not a constant here; DC: the shortcuts taken (bits of
 * B->shape: sdp_i8_lut_bytes_core's S; -1: B->shape at run time), with Q only; T: the tables
 * in registers (sdp_i8_lut_tables_to), or NULL. */
static inline __attribute__((always_inline)) __m512i lut_bytes_of(
    const sdp_i8_lane_lut* L, const sdp_i8_lane_cvt* const* e, const __m512i* v, const int Q,
    const int M, const int G, const int DC, const __m512i* T) {
  const sdp_i8_lut_bytes* B = L->bytes;
  if (!Q)
    return sdp_i8_lut_bytes64_mg(B, sdp_i8_lanes_lut_u(e[0], L, v[0]),
                                 sdp_i8_lanes_lut_u(e[1], L, v[1]),
                                 sdp_i8_lanes_lut_u(e[2], L, v[2]),
                                 sdp_i8_lanes_lut_u(e[3], L, v[3]), M, G);
  const int bg = G >= 0 ? G : B->g;
  __mmask64 gm[2] = {0, 0};
  for (int i = 0; i < bg && i < 2; ++i) {
    __mmask16 k[4];
    for (int r = 0; r < 4; ++r)
      k[r] = _mm512_cmpge_epi32_mask(v[r], _mm512_set1_epi32(e[r]->qg[i]));
    gm[i] = lut_masks64(k[0], k[1], k[2], k[3]);
  }
  return sdp_i8_lut_bytes_core(B, sdp_i8_lanes_lut_q(e[0], v[0]), sdp_i8_lanes_lut_q(e[1], v[1]),
                               sdp_i8_lanes_lut_q(e[2], v[2]), sdp_i8_lanes_lut_q(e[3], v[3]), 1,
                               gm, bg < 2 ? bg : 2, M, DC, T);
}

/* panel_step_lut through the plan's byte tables (Q, M, G, DC: lut_bytes_of's). The tables are the
 * layer's, the same for every row; only u is the row's. So a panel's rows of NR = 48 values
 * (the VNNI GEMM's panels) go four at a time: their 12 vectors through 3 lookups of 64 instead
 * of 4 (each lookup costs the same for 48 values as for 64), the codes stored as six masked
 * pieces. */
static inline __attribute__((always_inline)) void panel_step_lut_bytes(
    const panel_codes* E, const int32_t* c, int64_t ldc, int64_t i, int panel, int corr,
    const int Q, const int M, const int G, const int DC) {
  const int64_t n = E->cols - i;
  const __mmask16 k[4] = {lane_mask(n), lane_mask(n - 16), lane_mask(n - 32), lane_mask(n - 48)};
  const __mmask64 keep = n >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1;
  const int64_t rows = E->rows, ldo = E->ldo;
  const sdp_i8_lane_cvt* cvt = E->cvt;
  const sdp_i8_lane_lut L = *E->lut;
  int8_t* out = E->out + i;
  /* the tables in registers for the step's rows (Q, M known): the code stores, int8, could
   * alias them, so the compiler would load them again for every 64 codes */
  __m512i TR[4 * (1 + 3 * 2)];
  const __m512i* T = NULL;
  if (Q && M >= 0 && M <= 2) {
    sdp_i8_lut_tables_to(L.bytes, M, DC, TR);
    T = TR;
  }
  int64_t m = 0;
  _Static_assert(NR == 48, "four rows of a panel are three vectors of 64 codes");
  if (panel && n == NR)
    for (; m + 4 <= rows; m += 4) {
      __m512i v[12];
      const sdp_i8_lane_cvt* e[12];
      for (int r = 0; r < 4; ++r) {
        __m512i v3;
        panel_load(E, c + (m + r) * ldc + i, m + r, k, 1, corr, v + 3 * r, v + 3 * r + 1,
                   v + 3 * r + 2, &v3);
        e[3 * r] = e[3 * r + 1] = e[3 * r + 2] = cvt + m + r;
      }
      /* codes of rows m..m+3 at bytes 48 r .. 48 r + 47 of the three vectors' 192 */
      const __m512i y0 = lut_bytes_of(&L, e, v, Q, M, G, DC, T);
      const __m512i y1 = lut_bytes_of(&L, e + 4, v + 4, Q, M, G, DC, T);
      const __m512i y2 = lut_bytes_of(&L, e + 8, v + 8, Q, M, G, DC, T);
      int8_t* o = out + m * ldo;
      _mm512_mask_storeu_epi8(o, 0x0000FFFFFFFFFFFFull, y0);
      _mm512_mask_storeu_epi8(o + ldo - 48, 0xFFFF000000000000ull, y0);
      _mm512_mask_storeu_epi8(o + ldo + 16, 0x00000000FFFFFFFFull, y1);
      _mm512_mask_storeu_epi8(o + 2 * ldo - 32, 0xFFFFFFFF00000000ull, y1);
      _mm512_mask_storeu_epi8(o + 2 * ldo + 32, 0x000000000000FFFFull, y2);
      _mm512_mask_storeu_epi8(o + 3 * ldo - 16, 0xFFFFFFFFFFFF0000ull, y2);
    }
  for (; m < rows; ++m) {
    __m512i v[4];
    panel_load(E, c + m * ldc + i, m, k, panel, corr, v, v + 1, v + 2, v + 3);
    const sdp_i8_lane_cvt* e[4] = {cvt + m, cvt + m, cvt + m, cvt + m};
    _mm512_mask_storeu_epi8(out + m * ldo, keep, lut_bytes_of(&L, e, v, Q, M, G, DC, T));
  }
}
#endif

/* The byte tables' shapes the kernels have unrolled (M slots, one outside threshold, the
 * shortcuts S of sdp_i8_lut_bytes.shape they take): sigmoid's (one slot of one size of change),
 * hardswish's (one slot, D in two regions of j), SiLU's (two: D in two regions, then a slot of
 * one size, hashed), each with the borrow's compare (bits 16 + k) first, and the same without
 * the shortcuts the tables of other scales may lack (SiLU's window where its slot is not
 * hashed). A hashed slot's bit goes with its dc or region bit (its D is not looked up). */
#define LUT_SHAPE_OF(M_, S_) ((M_) << 24 | (S_))
#define LUT_SHAPES                                                                              \
  LUT_SHAPE(1, 0x10001) LUT_SHAPE(1, 0x10010) LUT_SHAPE(2, 0x32012) LUT_SHAPE(1, 0x001)        \
  LUT_SHAPE(1, 0x010) LUT_SHAPE(1, 0x000) LUT_SHAPE(2, 0x212)                                 \
  LUT_SHAPE(2, 0x012) LUT_SHAPE(2, 0x002) LUT_SHAPE(2, 0x000)

/* The unrolled shape (LUT_SHAPE_OF) that byte tables B run through: the first of LUT_SHAPES
 * with B's slots and one outside threshold whose shortcuts B has (a subset of B->shape: every
 * table is whole either way), or -1: the loops over B->m and B->g. */
static inline int lut_bytes_shape(const sdp_i8_lut_bytes* B) {
  if (B->g != 1) return -1;
#define LUT_SHAPE(M_, S_) \
  if (B->m == (M_) && (B->shape & (S_)) == (S_)) return LUT_SHAPE_OF(M_, S_);
  LUT_SHAPES
#undef LUT_SHAPE
  return -1;
}

/* panel_step for a LUT activation (E->lut): 64 values of each row from column i. */
static inline __attribute__((always_inline)) void panel_step_lut(const panel_codes* E,
                                                                  const int32_t* c, int64_t ldc,
                                                                  int64_t i, int panel,
                                                                  int corr) {
#ifdef __AVX512VBMI__
  const sdp_i8_lut_bytes* B = E->lut->bytes;
  if (B != NULL) { /* the plan's byte tables: no gathers; the compiler's tables' shapes unrolled */
    const int q = E->lut->q;
    switch (q ? lut_bytes_shape(B) : -1) {
#define LUT_SHAPE(M_, S_) \
  case LUT_SHAPE_OF(M_, S_): panel_step_lut_bytes(E, c, ldc, i, panel, corr, 1, M_, 1, S_); return;
      LUT_SHAPES
#undef LUT_SHAPE
      default: break;
    }
    if (q)
      panel_step_lut_bytes(E, c, ldc, i, panel, corr, 1, -1, -1, -1);
    else if (B->m == 1 && B->g == 1)
      panel_step_lut_bytes(E, c, ldc, i, panel, corr, 0, 1, 1, 0);
    else if (B->m == 2 && B->g == 1)
      panel_step_lut_bytes(E, c, ldc, i, panel, corr, 0, 2, 1, 0);
    else
      panel_step_lut_bytes(E, c, ldc, i, panel, corr, 0, -1, -1, 0);
    return;
  }
#endif
  const int64_t n = E->cols - i;
  const __mmask16 k[4] = {lane_mask(n), lane_mask(n - 16), lane_mask(n - 32), lane_mask(n - 48)};
  const __mmask64 keep = n >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1;
  const int64_t rows = E->rows, ldo = E->ldo;
  const sdp_i8_lane_cvt* cvt = E->cvt;
  const sdp_i8_lane_lut L = *E->lut;
  int8_t* out = E->out + i;
  for (int64_t m = 0; m < rows; ++m) {
    const sdp_i8_lane_cvt* e = cvt + m;
    const int32_t* r = c + m * ldc + i;
    __m512i v0, v1, v2, v3;
    panel_load(E, r, m, k, panel, corr, &v0, &v1, &v2, &v3);
    const __m512i q0 = sdp_i8_lanes_lut(e, &L, v0);
    const __m512i q1 = sdp_i8_lanes_lut(e, &L, v1);
    const __m512i q2 = sdp_i8_lanes_lut(e, &L, v2);
    const __m512i q3 = panel ? q2 : sdp_i8_lanes_lut(e, &L, v3);
    _mm512_mask_storeu_epi8(out + m * ldo, keep, sdp_i8_lut_codes64(q0, q1, q2, q3));
  }
}

static inline __attribute__((always_inline)) void panel_body(const panel_codes* E,
                                                              const int32_t* c, int64_t ldc,
                                                              int split, int add, int corr) {
  if (E->wide && E->cols <= NR) {
    panel_step(E, c, ldc, 0, split, add, 1, corr);
    return;
  }
  for (int64_t i = 0; i < E->cols; i += 64) panel_step(E, c, ldc, i, split, add, 0, corr);
}

static inline __attribute__((always_inline)) void codes_body(const panel_codes* E,
                                                               const int32_t* c, int64_t ldc,
                                                               int corr) {
  if (E->lut != NULL) {
    if (E->wide && E->cols <= NR) panel_step_lut(E, c, ldc, 0, 1, corr);
    else
      for (int64_t i = 0; i < E->cols; i += 64) panel_step_lut(E, c, ldc, i, 0, corr);
  } else if (E->add != NULL) {
    const int lean = E->add->lean ? 2 : 1;
    if (E->split == 4 && lean == 2) panel_body(E, c, ldc, 4, 2, corr);
    else if (E->split == 4) panel_body(E, c, ldc, 4, 1, corr);
    else if (E->split == 3 && lean == 2) panel_body(E, c, ldc, 3, 2, corr);
    else if (E->split == 2 && lean == 2) panel_body(E, c, ldc, 2, 2, corr);
    else if (lean == 2) panel_body(E, c, ldc, 1, 2, corr);
    else if (E->split == 3) panel_body(E, c, ldc, 3, 1, corr);
    else if (E->split == 2) panel_body(E, c, ldc, 2, 1, corr);
    else panel_body(E, c, ldc, 1, 1, corr);
  } else if (E->split == 5) {
    panel_body(E, c, ldc, 5, 0, corr);
  } else if (E->split == 6) {
    panel_body(E, c, ldc, 6, 0, corr);
  } else if (E->split == 4) {
    panel_body(E, c, ldc, 4, 0, corr);
  } else if (E->split == 3) {
    panel_body(E, c, ldc, 3, 0, corr);
  } else if (E->split == 2) {
    panel_body(E, c, ldc, 2, 0, corr);
  } else if (E->split == 1) {
    panel_body(E, c, ldc, 1, 0, corr);
  } else {
    panel_body(E, c, ldc, 0, 0, corr);
  }
}

static inline __attribute__((always_inline)) void codes_of_panel(const panel_codes* E,
                                                                   const int32_t* c, int64_t ldc) {
  codes_body(E, c, ldc, 0);
}

/* The form of rows whose accumulators start at their bias as well as at the correction (a
 * GEMM's initial values, corr[m] for rows m < rows, changed here): form 3 becomes 6, which adds
 * no bias; any other form is returned as it is and corr left alone (a residual add, a LUT or a
 * clamped converter adds its bias after the clamp). Form 4 as 5 was slower in the implicit
 * GEMM's panels (1x1 layers with ReLU 2-5 %, the same build either way: docs/kernels.md), form
 * 3 as 6 faster (ResNet-50's linear 64 -> 256 at 56x56 5-7 %). */
static inline int fold_bias(const sdp_i8_lane_cvt* cvt, int64_t rows, int form, int32_t* corr) {
  if (form != 3) return form;
  for (int64_t m = 0; m < rows; ++m)
    corr[m] = (int32_t)((uint32_t)corr[m] + (uint32_t)cvt[m].bias);
  return 6;
}

/* dst[i] = src[i] for i < n; dst may equal src or lie below it (memmove's rep movsb is slow
 * on such short overlapping moves). */
static inline void move_down(const int32_t* src, int32_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lane_mask(n - i);
    _mm512_mask_storeu_epi32(dst + i, m, _mm512_maskz_loadu_epi32(m, src + i));
  }
}

#ifdef __AVX512VBMI__ /* the depthwise row kernel's */
/* codes of count accumulators of one channel (converter e), 64 per step. */
static inline __attribute__((always_inline)) void run_body(const sdp_i8_lane_cvt* e, int8_t lo,
                                                           int8_t hi, const int32_t* v, int8_t* y,
                                                           int64_t count, int split) {
  const __m512i l = _mm512_set1_epi8(lo), h = _mm512_set1_epi8(hi);
  for (int64_t i = 0; i < count; i += 64) {
    const int64_t n = count - i;
    const __mmask16 m0 = lane_mask(n), m1 = lane_mask(n - 16), m2 = lane_mask(n - 32),
                    m3 = lane_mask(n - 48);
    const __m512i q0 = sdp_i8_lanes_form(e, _mm512_maskz_loadu_epi32(m0, v + i), split);
    const __m512i q1 = sdp_i8_lanes_form(e, _mm512_maskz_loadu_epi32(m1, v + i + 16), split);
    const __m512i q2 = sdp_i8_lanes_form(e, _mm512_maskz_loadu_epi32(m2, v + i + 32), split);
    const __m512i q3 = sdp_i8_lanes_form(e, _mm512_maskz_loadu_epi32(m3, v + i + 48), split);
    const __mmask64 keep = n >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1;
    _mm512_mask_storeu_epi8(y + i, keep,
                            _mm512_min_epi8(_mm512_max_epi8(sdp_i8_codes64(q0, q1, q2, q3), l), h));
  }
}

static inline void codes_of_run(const sdp_i8_lane_cvt* e, int8_t lo, int8_t hi, const int32_t* v,
                                int8_t* y, int64_t count) {
  if (e->k == 16 && e->conv == 2) run_body(e, lo, hi, v, y, count, 4);
  else if (e->k == 16 && e->conv) run_body(e, lo, hi, v, y, count, 3);
  else if (e->k == 16 && e->exact) run_body(e, lo, hi, v, y, count, 2);
  else if (e->k == 16) run_body(e, lo, hi, v, y, count, 1);
  else run_body(e, lo, hi, v, y, count, 0);
}
#endif

/* ---- the GEMM over a byte source B --------------------------------------------------------
 * Depth step k of column n of group grp is the 4 bytes at base + grp * group_bytes + off[k] +
 * 4n (u8 = in + 128; padding and missing channels = in_zero + 128). */
typedef struct bsrc {
  const uint8_t* base;
  int64_t group_bytes;
  const int64_t* off;
  int64_t ncols, npanels, tiles;
} bsrc;

/* ---- implicit GEMM: a padded, stride-phase-split copy of the input ------------------------
 * Output (y, x) and tap (r, s) read padded input row y*sh + r*dh, column x*sw + s*dw: phase
 * (r*dh % sh, s*dw % sw) of the padded input at row y + r*dh/sh, column x + s*dw/sw. Each phase
 * plane is stored as hq rows of wq = out_w + (largest column shift) positions, 4 channels per
 * position, so depth step (c4, r, s) is the copy at a constant offset over a grid of
 * (out_h - 1) * wq + out_w positions, of which the first out_w of each row are outputs. */
enum { MAX_PHASES = ACCEL_MAX_CONV_STRIDE * ACCEL_MAX_CONV_STRIDE };

typedef struct imp_plan {
  int64_t nph, wq, hq, plane; /* phases, phase plane columns / rows / positions */
  int64_t gbytes;             /* copy bytes per group: c4 * nph * plane * 4 */
  int64_t ncols;              /* grid positions */
  int8_t phase[MAX_PHASES];   /* the copy's phases: index -> py * stride_w + px */
  int8_t slot[MAX_PHASES];    /* py * stride_w + px -> index in the copy (-1: not copied) */
} imp_plan;


/* Grid reads run up to 47 positions past a group's copy (the last panel) and the last vector
 * 64 bytes: slack after the copy. */
enum { COPY_SLACK = NR * 4 + 64 };

/* Positions [x, x + 64) of a copy row, up to wq: 4 bytes each from the channels' vectors v,
 * the sign bit flipped (u8 = s8 + 128). Byte then word unpacks interleave within each 128-bit
 * lane, and a 4x4 transpose of the lanes puts the positions in order (16 positions per step
 * with 128-bit unpacks and inserts cost about 3x the instructions). */
static inline __attribute__((always_inline)) void interleave4_store(const __m512i* v, int64_t x,
                                                                   int64_t wq, uint8_t* d) {
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  {
    /* lane L: t0 / t1 = channel pairs (0, 1) of positions 16L + 0..7 / 8..15, t2 / t3 (2, 3) */
    const __m512i t0 = _mm512_unpacklo_epi8(v[0], v[1]), t1 = _mm512_unpackhi_epi8(v[0], v[1]);
    const __m512i t2 = _mm512_unpacklo_epi8(v[2], v[3]), t3 = _mm512_unpackhi_epi8(v[2], v[3]);
    /* lane L of q_i: positions 16L + 4i .. 16L + 4i + 3, 4 channels each */
    const __m512i q0 = _mm512_unpacklo_epi16(t0, t2), q1 = _mm512_unpackhi_epi16(t0, t2);
    const __m512i q2 = _mm512_unpacklo_epi16(t1, t3), q3 = _mm512_unpackhi_epi16(t1, t3);
    const __m512i r0 = _mm512_shuffle_i64x2(q0, q1, 0x44), r1 = _mm512_shuffle_i64x2(q2, q3, 0x44);
    const __m512i r2 = _mm512_shuffle_i64x2(q0, q1, 0xEE), r3 = _mm512_shuffle_i64x2(q2, q3, 0xEE);
    __m512i o[4];
    o[0] = _mm512_shuffle_i64x2(r0, r1, 0x88); /* positions 0..15: lane 0 of q0..q3 */
    o[1] = _mm512_shuffle_i64x2(r0, r1, 0xDD);
    o[2] = _mm512_shuffle_i64x2(r2, r3, 0x88);
    o[3] = _mm512_shuffle_i64x2(r2, r3, 0xDD);
    const int64_t left = wq - x;
    for (int i = 0; i < 4 && 16 * i < left; ++i) {
      const int64_t n = left - 16 * i;
      const __mmask64 m = n >= 16 ? ~(__mmask64)0 : (((__mmask64)1 << (4 * n)) - 1);
      _mm512_mask_storeu_epi8(d + 4 * (x + 16 * i), m, _mm512_xor_si512(o[i], flip));
    }
  }
}

/* Positions of [x, x + 64) inside [lo, hi). */
static inline __mmask64 inside_mask(int64_t x, int64_t lo, int64_t hi) {
  const int64_t a = lo > x ? lo - x : 0, b = hi < x + 64 ? hi - x : 64;
  return a >= b ? 0
                : (b == 64 ? ~(__mmask64)0 : (((__mmask64)1 << b) - 1)) &
                      ~(((__mmask64)1 << a) - 1);
}

/* A run of a tile's grid positions that are outputs: tile column `col`, output `o`. */
typedef struct seg {
  int64_t col, o, len;
} seg;

/* A stride-1 copy of one phase (nph 1) built a plane at a time (imp_build_plane): step s holds
 * copy positions [64 s, 64 s + 64) of a 4-channel block's plane (hq x wq, the padding included);
 * for each channel the input bytes of those positions lie within the 64 bytes from `base` of
 * its plane (a copy row is at least as wide as an input row at stride 1, so 64 consecutive
 * copy positions span at most 64 input bytes), and byte i of the step is byte idx[i] of them
 * where bit i of `inside` is set (the padding byte elsewhere); `load`: those of the 64 bytes
 * inside the plane. */
typedef struct plane_step {
  uint8_t idx[64];
  uint64_t inside, load;
  int64_t base;
} plane_step;

/* The implicit GEMM's loops (pool_for items): packing, copy rows, units. */
typedef struct imp_job {
  const plan* P;
  const imp_plan* Q;
  const bsrc* B;
  int32_t in_zero;
  const int8_t* in;
  const int8_t* weights;
  const int8_t* apack;
  const int32_t* wsum;
  int8_t* pdata;
  int32_t* psum;
  int8_t* out;
  const sdp_i8* ep;
  char* const* scratch; /* per participant: the tile, then 4 rows of tmp */
  size_t tile_bytes;
  int64_t ldt, rows_per_item, nbuild, tiles, b;
  int64_t flat_segs; /* > 0: the copy is built as flat segments (imp_build_flat) */
  int s2_pairs;       /* 1: a 1x1/2 copy built a plane at a time (imp_build_s2_plane) */
  const plane_step* steps; /* a stride-1 copy built a plane at a time (imp_build_plane), */
  int64_t nsteps;          /* its steps per plane */
  const sdp_i8_lane_cvt* cvt; /* every channel's converter in lanes, or NULL */
  int8_t lo, hi;              /* and the codes' bounds */
  const sdp_i8_lane_add* add; /* the residual add in lanes (with cvt), or NULL */
  sdp_i8_lane_add add_consts; /* its constants */
  const sdp_i8_lane_lut* lut; /* a LUT activation's plan in lanes (cvt: t), or NULL */
  sdp_i8_lane_lut lut_consts; /* its constants */
} imp_job;

/* A 1x1 convolution with stride 1 and no padding copies each channel's plane as it is (wq =
 * W, hq = H): a block of 4 channels is one row of h * w positions, built in segments of
 * FLAT_SEG positions (row by row, a 7x7 plane cost about 60 cycles per row of 7 positions:
 * more than the GEMM after it for MobileNetV2's 960 -> 320). Item = (grp, c4, segment). */
enum { FLAT_SEG = 4096 };

/* A 1x1 convolution at stride 2 without padding whose output rows are at most 32 positions
 * (ResNet's downsampling branches): its copy (one phase, hq = out_h, wq = out_w) is built a
 * block of 4 channels' plane at a time, two output rows to a vector (a merge-masked load of
 * both rows' bytes, then vpmovwb: AVX512BW, no VBMI), instead of row by row (about 0.05 ms of ResNet-50's 1x1/2 256 -> 512 on
 * Zen 5, short rows of 28 positions each paying the row's set-up). Item = (grp, c4). */
static inline int imp_flat_s2(const conv_geometry* g, const imp_plan* Q) {
  return g->kernel_h == 1 && g->kernel_w == 1 && g->stride_h == 2 && g->stride_w == 2 &&
         g->pad_top == 0 && g->pad_left == 0 && 2 * (g->out_h - 1) < g->h &&
         2 * (g->out_w - 1) < g->w && g->out_w <= 32 && Q->nph == 1 && Q->wq == g->out_w &&
         Q->hq == g->out_h;
}


/* ---- the shared VNNI GEMM and input copy (conv/i8_gemm_vnni.c) ------------------------- */
int i8_reserve_packing(const plan* P, workspace* ws, int8_t** pdata, int32_t** psum,
                       const int8_t** apack, const int32_t** wsum);
/* Accumulators of panels [p0, p1) x block mb of group grp into tile[MR][TILE * NR]:
 * sum(u * w) - (128 + in_zero) * sum(w), modulo 2^32 (exact: the true sum fits int32). */
void i8_gemm_tile(const plan* P, const bsrc* B, const int8_t* apack, const int32_t* wsum,
                  int32_t in_zero, int64_t grp, int64_t mb, int64_t p0, int64_t p1,
                  int32_t* tile, const panel_codes* E);
int64_t i8_choose_tiles(int64_t npanels, int64_t mblocks, int64_t groups, int nth);
void i8_imp_make_plan(const plan* P, imp_plan* Q);
void i8_imp_used_phases(const plan* P, imp_plan* Q);
int i8_imp_reserve_copy(const plan* P, const imp_plan* Q, int32_t in_zero, workspace* ws,
                        uint8_t** copy, int64_t** off);
int i8_imp_prepare_lanes(const plan* P, const sdp_i8* ep, workspace* ws, imp_job* J);
int i8_imp_plane_steps(const plan* P, const imp_plan* Q, workspace* ws, imp_job* J);
void i8_imp_codes_of_rows(const imp_job* J, int64_t k0, int64_t rows, const int32_t* c,
                          int64_t ldc, int64_t at, int64_t cols, int wide, int split);
void i8_imp_pack_item(void* ctx, int64_t blk, int participant);
void i8_imp_build_item(void* ctx, int64_t chunk, int participant);
void i8_tile_codes(const imp_job* J, int32_t* tile, int64_t ldc, int64_t n0, int64_t n1,
                   int64_t rows, int64_t k0);
void i8_imp_unit_item(void* ctx, int64_t u, int participant);
#endif /* CONV_I8_VNNI */

#endif /* ACCEL_CONV_I8_H_ */
