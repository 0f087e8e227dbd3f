/* conv_i8.c - the CONV engine in INT8: int32 accumulation, the SDP converters as epilogue.
 *
 * acc[k][pos] = sum over the window of (in - in_zero) * w, exact in int32 (padding reads as
 * in_zero: it contributes 0), then the SDP converters (sdp_i8_span) on every output, so fused
 * and independent runs give identical codes whatever the thread count (integer sums do not
 * depend on the order).
 *
 * Paths (AVX-512 VNNI builds), chosen by measurement (figures: docs/kernels.md):
 *  - implicit GEMM (C/groups >= 2): vpdpbusd multiplies u8 by s8, so the input is copied once
 *    per image with its sign bit flipped (u = in + 128; padding byte in_zero + 128), padded,
 *    split into stride phases and 4 channels interleaved per position; depth step (c/4, r, s)
 *    is that copy at a constant offset, over a grid of out_h rows of out_w + (largest column
 *    shift) positions whose extra columns are computed and dropped. acc = sum(u * w) -
 *    (128 + in_zero) * sum(w), modulo 2^32 (exact: the true sum fits int32), with the weight
 *    sums kept beside the packed weights and the correction as the micro-kernel's initial
 *    accumulator. Micro-kernel 8 channels x 48 positions, 24 zmm accumulators; tiles of up to
 *    8 panels, split between the threads so that the busiest has the fewest panels. Grouped
 *    convolutions are one GEMM per group.
 *  - AMX (builds for AMX-TILE and AMX-INT8, where CPUID, the OS and Linux's
 *    ARCH_REQ_XCOMP_PERM grant the tiles; checked once; accel_int8_amx / ACCEL_INT8_AMX=0
 *    switch it off): the implicit GEMM on tiles, for every layer the implicit, small-grid and
 *    flat 1x1 paths would take that has >= 4 blocks of 4 input channels and >= 16 depth steps
 *    (conv_amx). TDPBSUD multiplies s8 weights (A: 16 channels x 16 depth steps x 4 bytes) by
 *    the copy as it lies (B: 16 consecutive 4-channel blocks at one tap are rows a constant
 *    stride apart, 16 positions 64 contiguous bytes); depth tile = (chunk of up to 16 blocks,
 *    tap), the last chunk starting early with zero weights on the blocks already covered, so
 *    nothing past the copy is read. 32 channels x 32 positions per micro-tile (4 C, 2 A, 2 B
 *    tiles), from the offset correction, stored to a [32][256] tile the implicit GEMM's
 *    epilogue converts; without dropped columns and with converters in lanes, from zero, the
 *    codes of every 64 positions made straight after their micro-tiles, adding the
 *    correction. A 1x1 layer's single depth tile keeps its A tiles over a unit. ResNet's 3x3
 *    layers run at ~2.5x the VNNI kernel's speed (figures: docs/whole_network_time.md).
 *    Packed weights hold both layouts where AMX is available.
 *  - channels along the vector (where the implicit GEMM's vectors of 16 grid positions would
 *    hold over 3 % more lanes than there are outputs: every ResNet 3x3 layer, the 7x7 and
 *    14x14 ones most): 8 output channels per ymm vector, each position's 4 input bytes
 *    broadcast, on the implicit GEMM's copy (conv_small).
 *  - few input channels (C <= 3, an RGB stem), AVX-512 VBMI builds: a kernel row's C * kw
 *    taps packed densely into 4-byte words (ResNet's 7x7 stem: 6 words a row, not 7 words of 3
 *    useful bytes), the grid the output itself (conv_stem).
 *  - im2col: explicit columns over (image, position) for batched fully connected layers (one
 *    position per image) and grids mostly made of dropped columns. Outputs of one position per
 *    image get the SDP along the channels (sdp_i8_channels, the same arithmetic).
 *  - matrix-vector, at most 8 columns in all (a fully connected layer on one image): one 64-byte
 *    weight load holds two depth steps of 8 channels, one vpdpbusd per load and column, every
 *    lane useful.
 *  - depthwise (one input channel per group), AVX-512 VBMI builds: by output rows, no copy;
 *    each input row of a block of 8 output rows is loaded once per 16 output columns and
 *    vpermb places each column's 4 taps in its 32-bit lane for vpdpbusd (MobileNetV2's 17
 *    depthwise layers: 2.27 ms with the copy kernel, 1.42 ms; 1 thread, thread CPU time).
 *  - depthwise otherwise (no VBMI, or taps too wide for one 64-byte load): direct, an int16
 *    copy of the plane and vpdpwssd on pairs of taps.
 * Other builds: the portable path (direct, scalar, uint32 accumulators). Built with
 * CONV_I8_TEST_PATHS, CONV_I8_PATH=p|i|c|d forces a path where it applies (tests only;
 * d: the depthwise copy kernel).
 * The epilogue runs on each row of a finished tile while it is in L1, after the tile's output
 * runs are moved down over the dropped columns (memmove's rep movsb is slow on such short
 * overlapping moves); sdp_i8.c has exact fast paths for the common converters. Where the
 * common converter or the residual add applies to every channel in int32 lanes
 * (sdp_i8_lanes.h, prepared once per call), GEMMs without dropped columns convert each panel
 * right after the micro-kernel, the other GEMM kernels each tile's channel rows (with the
 * residual operand read at the output's offset), the depthwise kernels each band (common
 * converter only), and small depthwise planes in registers: no sdp_i8_span call per row.
 * Packed weights (accel_conv_pack_weights, once in the generated code's loader): packing on
 * every call would cost as much as a deep layer's convolution.
 * Threads: every path's loops run on pool.c (the caller and whichever workers are awake
 * claim items; no barrier waits for a thread that is not running); an AMX item loads the tile
 * configuration on the thread that runs it and releases the tiles at its end. Scratch:
 * workspace slots 0..nth-1 per participant, WS_CONV_I8_FIRST (kernels.h) .. WS_BOFF shared (the
 * depthwise tables among them kept from run to run), reserved before the loops.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* syscall (the AMX permission) */
#endif
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
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>
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
  GEMV_COLS = 8,      /* at most this many columns in all: matrix-vector products */
  AMB = 32,           /* AMX: output channels per block (two A tiles of 16 rows) */
  AKT = 16            /* AMX: 4-channel blocks per depth tile (a tile row's 64 bytes) */
};
_Static_assert((int)WS_BOFF < (int)WORKSPACE_SLOTS, "conv_i8.c's shared workspace slots");

typedef int32_t __attribute__((may_alias)) i32_alias;

static size_t round64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

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

static void make_plan(const conv_geometry* g, plan* P) {
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

/* ---- AMX: whether this process may use the tiles ------------------------------------------
 * Compiled in where the compiler targets AMX-TILE and AMX-INT8 (-march=native on a Sapphire
 * Rapids); used where CPUID reports both, the OS enables the tile state in XCR0 and Linux
 * grants this process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA):
 * checked once (pthread_once). ACCEL_INT8_AMX=0 in the environment, or conv_i8_amx(0),
 * turns the path off (the VNNI paths then run as on machines without AMX). */
#ifdef CONV_I8_AMX
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static int amx_have;            /* written once, under amx_once */
static atomic_int amx_want = 1; /* the switch (conv_i8_amx) */

static void amx_probe(void) {
  uint32_t a, b, c, d;
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0), "c"(0));
  if (a < 7) return;
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
  if (!((c >> 27) & 1)) return; /* OSXSAVE: xgetbv is there */
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
  if (!((d >> 24) & 1) || !((d >> 25) & 1)) return; /* AMX-TILE, AMX-INT8 */
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return; /* XTILECFG, XTILEDATA enabled by the OS */
  if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0)
    return;
  const char* env = getenv("ACCEL_INT8_AMX");
  if (env != NULL && env[0] == '0') atomic_store(&amx_want, 0);
  amx_have = 1;
}

static int amx_available(void) {
  pthread_once(&amx_once, amx_probe);
  return amx_have;
}

int conv_i8_amx(int request) {
  if (!amx_available()) return 0;
  if (request >= 0) atomic_store(&amx_want, request != 0);
  return atomic_load(&amx_want);
}
#else
int conv_i8_amx(int request) {
  (void)request;
  return 0;
}
#endif

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
 *                 conv_i8_amx. */
enum {
  PACK_MAGIC = 0x38494341 /* "ACI8" */,
  LAYOUT_PLAIN = 1,
  LAYOUT_VNNI = 2,
  LAYOUT_AMX = 3,
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
 * the products. MobileNetV2's 1x1 expansions with AMX / VNNI (1 thread, interleaved runs,
 * in the network): 16 -> 96 at 112x112 (4 steps) 0.36 / 0.24 ms, 24 -> 144 at 56x56 (6) 0.15 /
 * 0.10, 32 -> 192 at 28x28 (8) 0.050 / 0.039; the whole network 3.45 / 3.19 ms. */
enum { AMX_MIN_C4 = 4, AMX_MIN_KD4 = 16 };

#ifdef CONV_I8_VNNI
/* Whether packed weights hold the AMX layout too (AMX available, whether on or not). */
static int amx_packed(const plan* P) {
#ifdef CONV_I8_AMX
  return P->cg > 1 && P->c4 >= AMX_MIN_C4 && P->kd4 >= AMX_MIN_KD4 && amx_available();
#else
  (void)P;
  return 0;
#endif
}
#endif

static int layout_of(const plan* P) {
#ifdef CONV_I8_VNNI
  if (P->cg == 1) return LAYOUT_PLAIN;
  return amx_packed(P) ? LAYOUT_AMX : LAYOUT_VNNI;
#else
  (void)P;
  return LAYOUT_PLAIN;
#endif
}

/* The layout's weight bytes (LAYOUT_AMX: its VNNI part's; the header's data_bytes). */
static size_t data_bytes(const plan* P, int layout) {
  const conv_geometry* g = P->g;
  if (layout == LAYOUT_PLAIN) return round64((size_t)g->k * (size_t)P->kd);
  return round64((size_t)(g->groups * P->mblocks * P->kd4 * MR * 4));
}

static size_t wsum_bytes(const plan* P, int layout) {
  if (layout == LAYOUT_PLAIN) return 0;
  return round64((size_t)(P->g->groups * P->mblocks * MR) * sizeof(int32_t));
}

/* LAYOUT_AMX's tiles, and their weight sums. */
static size_t amx_data_bytes(const plan* P) {
  return (size_t)(P->g->groups * P->ablocks * P->nk * 2 * 1024);
}

static size_t amx_wsum_bytes(const plan* P) {
  return round64((size_t)(P->g->groups * P->ablocks * AMB) * sizeof(int32_t));
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
static void pack_amx_block(const plan* P, const int8_t* w, int64_t grp, int64_t ab, int8_t* data,
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

/* Block (grp, mb) of LAYOUT_VNNI, and its rows' weight sums. Written in order, 4 bytes per
 * (step, row) from the 4 channels' rows of taps (each read rs times while in L1): the
 * destination-scattered order (one byte per 32) took 1.9 ms for 512x512x3x3. */
static void pack_block(const plan* P, const int8_t* w, int64_t grp, int64_t mb, int8_t* data,
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
  int32_t* wsum = (int32_t*)(data + data_bytes(&P, layout));
  memset(wsum, 0, wsum_bytes(&P, layout));
  for (int64_t grp = 0; grp < g->groups; ++grp)
    for (int64_t mb = 0; mb < P.mblocks; ++mb) pack_block(&P, weights, grp, mb, data, wsum);
  if (layout == LAYOUT_AMX) {
    int8_t* xdata = (int8_t*)wsum + wsum_bytes(&P, layout);
    int32_t* xsum = (int32_t*)(xdata + amx_data_bytes(&P));
    memset(xsum, 0, amx_wsum_bytes(&P));
    for (int64_t grp = 0; grp < g->groups; ++grp)
      for (int64_t ab = 0; ab < P.ablocks; ++ab) pack_amx_block(&P, weights, grp, ab, xdata, xsum);
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

/* ---- portable path: direct, one output plane at a time ------------------------------------
 * Each tap adds (in - in_zero) * w over the output columns whose input lies inside the image
 * (padding contributes 0). Accumulators are uint32: int32 arithmetic modulo 2^32, exact as long
 * as the true sum fits int32 (the compiler's bound). Items of the loop (pool_for): output
 * planes (image, channel). */
typedef struct portable_job {
  const plan* P;
  int32_t in_zero;
  const int8_t* in;
  const int8_t* w;
  int8_t* out;
  const sdp_i8* ep;
  uint32_t* const* accs; /* per participant: one output plane of accumulators */
} portable_job;

/* Channel k's int32 values v converted by the SDP into out[at, at + n), its element-wise
 * operand (if any) read at the same offset. */
static inline void convert_at(const sdp_i8* ep, int64_t k, const int32_t* v, int8_t* out,
                              int64_t at, int64_t n) {
  sdp_i8_span(ep, (int32_t)k, v, ep->ew_operand != NULL ? ep->ew_operand + at : NULL, out + at,
              n);
}

static void portable_item(void* ctx, int64_t plane, int participant) {
  const portable_job* J = ctx;
  const plan* P = J->P;
  const conv_geometry* g = P->g;
  const int8_t* w = J->w;
  const int32_t in_zero = J->in_zero;
  const int64_t H = g->h, W = g->w, ow = g->out_w, sw = g->stride_w;
  uint32_t* acc = J->accs[participant];
  const int64_t b = plane / g->k, k = plane % g->k, grp = k / P->mg;
  memset(acc, 0, (size_t)P->ohw * sizeof(uint32_t));
  for (int64_t c = 0; c < P->cg; ++c) {
    const int8_t* src = J->in + (b * g->c + grp * P->cg + c) * P->hw;
    for (int64_t r = 0; r < g->kernel_h; ++r)
      for (int64_t s = 0; s < g->kernel_w; ++s) {
        const int32_t wv = w[k * P->kd + c * P->rs + r * g->kernel_w + s];
        if (wv == 0) continue;
        const int64_t dy = r * g->dilation_h - g->pad_top;
        const int64_t dx = s * g->dilation_w - g->pad_left;
        /* output columns with input column ox * sw + dx inside [0, W) */
        int64_t lo = dx >= 0 ? 0 : (-dx + sw - 1) / sw;
        int64_t hi = dx > W - 1 ? 0 : (W - 1 - dx) / sw + 1;
        if (hi > ow) hi = ow;
        if (lo >= hi) continue;
        for (int64_t oy = 0; oy < g->out_h; ++oy) {
          const int64_t iy = oy * g->stride_h + dy;
          if (iy < 0 || iy >= H) continue;
          const int8_t* row = src + iy * W + dx;
          uint32_t* a = acc + oy * ow;
          for (int64_t ox = lo; ox < hi; ++ox)
            a[ox] += (uint32_t)(((int32_t)row[ox * sw] - in_zero) * wv);
        }
      }
  }
  const sdp_i8* ep = J->ep;
  const int64_t at = plane * P->ohw;
  convert_at(ep, k, (const int32_t*)acc, J->out, at, P->ohw);
}

static accel_status conv_portable(const plan* P, int32_t in_zero, const int8_t* in,
                                  const int8_t* w, int8_t* out, const sdp_i8* ep, workspace* ws,
                                  int nth) {
  const conv_geometry* g = P->g;
  const int64_t planes = (int64_t)g->n * g->k;
  if (nth > planes) nth = (int)planes;
  uint32_t* accs[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    accs[t] = workspace_get(ws, t, (size_t)P->ohw * sizeof(uint32_t));
    if (accs[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  const portable_job J = {P, in_zero, in, w, out, ep, accs};
  pool_for(nth, planes, portable_item, (void*)&J);
  return ACCEL_OK;
}

#ifdef CONV_I8_VNNI
/* The epilogue of column `col` of a tile whose rows are channels k0.. (rows of them) with one
 * output position per image: those outputs are consecutive, from out + at. */
static void epilogue_column(const sdp_i8* ep, const int32_t* tile, int64_t ldc, int64_t col,
                            int64_t rows, int64_t k0, int64_t at, int8_t* out) {
  int32_t v[AMB];
  for (int64_t m = 0; m < rows; ++m) v[m] = tile[m * ldc + col];
  sdp_i8_channels(ep, (int32_t)k0, v, ep->ew_operand != NULL ? ep->ew_operand + at : NULL,
                  out + at, rows);
}

/* ---- VNNI micro-kernel ---------------------------------------------------------------------
 * c[m][0..16*nv) = sum over depth steps k of the dot products (4 bytes each) of the u8 columns
 * at b + off[k] (16 positions x 4 channels per vector) with the s8 weight word a[k][m]. */
static inline __attribute__((always_inline)) void ukr(const int nv, int64_t kd4, const int8_t* a,
                                                      const uint8_t* b, const int64_t* off,
                                                      const int32_t* corr, int32_t* c,
                                                      int64_t ldc) {
  /* the accumulators start at the (negated) correction */
#define INIT(m) __m512i c##m##0 = _mm512_set1_epi32(corr[m]), c##m##1 = c##m##0, c##m##2 = c##m##0;
  INIT(0) INIT(1) INIT(2) INIT(3) INIT(4) INIT(5) INIT(6) INIT(7)
#undef INIT
  for (int64_t k = 0; k < kd4; ++k) {
    const uint8_t* bk = b + off[k];
    const __m512i b0 = _mm512_loadu_si512(bk);
    const __m512i b1 = nv > 1 ? _mm512_loadu_si512(bk + 64) : b0;
    const __m512i b2 = nv > 2 ? _mm512_loadu_si512(bk + 128) : b0;
    const i32_alias* ak = (const i32_alias*)(a + k * MR * 4);
#define ROW(m)                                                   \
  {                                                              \
    const __m512i av = _mm512_set1_epi32(ak[m]);                 \
    c##m##0 = _mm512_dpbusd_epi32(c##m##0, b0, av);              \
    if (nv > 1) c##m##1 = _mm512_dpbusd_epi32(c##m##1, b1, av);  \
    if (nv > 2) c##m##2 = _mm512_dpbusd_epi32(c##m##2, b2, av);  \
  }
    ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5) ROW(6) ROW(7)
#undef ROW
  }
#define ST(m)                                                    \
  _mm512_storeu_si512(c + m * ldc, c##m##0);                     \
  if (nv > 1) _mm512_storeu_si512(c + m * ldc + 16, c##m##1);    \
  if (nv > 2) _mm512_storeu_si512(c + m * ldc + 32, c##m##2);
  ST(0) ST(1) ST(2) ST(3) ST(4) ST(5) ST(6) ST(7)
#undef ST
}

typedef void (*ukr_fn)(int64_t, const int8_t*, const uint8_t*, const int64_t*, const int32_t*,
                       int32_t*, int64_t);
#define UKR(NV_)                                                                            \
  static void ukr##NV_(int64_t k, const int8_t* a, const uint8_t* b, const int64_t* o,      \
                       const int32_t* corr, int32_t* c, int64_t l) {                        \
    ukr(NV_, k, a, b, o, corr, c, l);                                                       \
  }
UKR(1)
UKR(2)
UKR(3)
static const ukr_fn ukr_table[4] = {0, ukr1, ukr2, ukr3};

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
  int split;                  /* the form every row has (sdp_i8_lanes_form): 2, 1 or 0 */
  const sdp_i8_lane_add* add; /* the residual add (every row split), or NULL */
  const int8_t* opnd;         /* its operand codes, laid out as out */
  int wide;                   /* rows readable to NR values whatever cols (a tile's) */
  const int32_t* corr;        /* codes_of_panel_corr: row m's values are c[m][.] + corr[m] */
} panel_codes;

/* q of the 16 values v of converter e (split: its form); with a residual add (add: 1 any,
 * 2 lean), of the 16 operand codes in o (split: the add's channel form). */
static inline __attribute__((always_inline)) __m512i q_of(const panel_codes* E,
                                                          const sdp_i8_lane_cvt* e, __m512i v,
                                                          __m128i o, int split, int add) {
  if (!add) return sdp_i8_lanes_form(e, v, split);
  return sdp_i8_lanes_add(E->add, e, v, _mm512_cvtepi8_epi32(o), split, add == 2);
}

/* One step of 64 values of each row from column i (panel: of at most NR, read unmasked). */
static inline __attribute__((always_inline)) void panel_step(const panel_codes* E,
                                                              const int32_t* c, int64_t ldc,
                                                              int64_t i, int split, int add,
                                                              int panel, int corr) {
  const __m512i lo = _mm512_set1_epi8(E->lo), hi = _mm512_set1_epi8(E->hi);
  const int64_t n = E->cols - i;
  const __mmask16 k0 = lane_mask(n), k1 = lane_mask(n - 16), k2 = lane_mask(n - 32),
                  k3 = lane_mask(n - 48);
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
    const __m512i cm = corr ? _mm512_set1_epi32(E->corr[m]) : _mm512_setzero_si512();
    __m512i v0 = panel ? _mm512_loadu_si512(r) : _mm512_maskz_loadu_epi32(k0, r);
    __m512i v1 = panel ? _mm512_loadu_si512(r + 16) : _mm512_maskz_loadu_epi32(k1, r + 16);
    __m512i v2 = panel ? _mm512_loadu_si512(r + 32) : _mm512_maskz_loadu_epi32(k2, r + 32);
    __m512i v3 = panel ? v2 : _mm512_maskz_loadu_epi32(k3, r + 48);
    if (corr) {
      v0 = _mm512_add_epi32(v0, cm);
      v1 = _mm512_add_epi32(v1, cm);
      v2 = _mm512_add_epi32(v2, cm);
      v3 = _mm512_add_epi32(v3, cm);
    }
    const __m512i q0 = q_of(E, e, v0, _mm512_castsi512_si128(o), split, add);
    const __m512i q1 = q_of(E, e, v1, _mm512_extracti32x4_epi32(o, 1), split, add);
    const __m512i q2 = q_of(E, e, v2, _mm512_extracti32x4_epi32(o, 2), split, add);
    const __m512i q3 = panel ? q2 : q_of(E, e, v3, _mm512_extracti32x4_epi32(o, 3), split, add);
    const __m512i y = sdp_i8_codes64(q0, q1, q2, q3);
    _mm512_mask_storeu_epi8(out + m * ldo, keep, _mm512_min_epi8(_mm512_max_epi8(y, lo), hi));
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
  if (E->add != NULL) {
    const int lean = E->add->lean ? 2 : 1;
    if (E->split == 3 && lean == 2) panel_body(E, c, ldc, 3, 2, corr);
    else if (E->split == 2 && lean == 2) panel_body(E, c, ldc, 2, 2, corr);
    else if (lean == 2) panel_body(E, c, ldc, 1, 2, corr);
    else if (E->split == 3) panel_body(E, c, ldc, 3, 1, corr);
    else if (E->split == 2) panel_body(E, c, ldc, 2, 1, corr);
    else panel_body(E, c, ldc, 1, 1, corr);
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

/* The form every one of the rows' converters has: 4 / 3 the conv form (sdp_i8_lanes.h), 2 split
 * without clamp, 1 split, 0 any
 * (a residual add's: 3 without clamp and shifts <= 16, 2 without clamp, 1 any). */
static int rows_form(const sdp_i8_lane_cvt* cvt, int64_t rows, int add) {
  int split = add ? 3 : 4;
  for (int64_t m = 0; m < rows; ++m) {
    const int form = add ? 1 + cvt[m].exact + (cvt[m].exact && cvt[m].shift == 0 && cvt[m].add == 0)
                         : cvt[m].k == 16 ? 1 + cvt[m].exact + cvt[m].conv : 0;
    split = form < split ? form : split;
  }
  return split;
}

/* dst[i] = src[i] for i < n; dst may equal src or lie below it (memmove's rep movsb is slow
 * on such short overlapping moves). */
static void move_down(const int32_t* src, int32_t* dst, int64_t n) {
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

static void codes_of_run(const sdp_i8_lane_cvt* e, int8_t lo, int8_t hi, const int32_t* v,
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

/* Accumulators of panels [p0, p1) x block mb of group grp into tile[MR][TILE * NR]:
 * sum(u * w) - (128 + in_zero) * sum(w), modulo 2^32 (exact: the true sum fits int32). */
/* Without pre-packed weights: workspace for packing them on this call (the parallel region
 * fills it), which the kernel then reads as if they had come packed. 0 when out of memory. */
static int reserve_packing(const plan* P, workspace* ws, int8_t** pdata, int32_t** psum,
                           const int8_t** apack, const int32_t** wsum) {
  const size_t db = data_bytes(P, LAYOUT_VNNI);
  char* p = workspace_get(ws, WS_PACK, db + wsum_bytes(P, LAYOUT_VNNI));
  if (p == NULL) return 0;
  *apack = *pdata = (int8_t*)p;
  *wsum = *psum = (int32_t*)(p + db);
  return 1;
}

static void gemm_tile(const plan* P, const bsrc* B, const int8_t* apack, const int32_t* wsum,
                      int32_t in_zero, int64_t grp, int64_t mb, int64_t p0, int64_t p1,
                      int32_t* tile, const panel_codes* E) {
  const int64_t blk = grp * P->mblocks + mb;
  const int8_t* a = apack + blk * P->kd4 * MR * 4;
  const uint8_t* b = B->base + grp * B->group_bytes;
  int32_t corr[MR];
  for (int m = 0; m < MR; ++m)
    corr[m] = (int32_t)((uint32_t)(128 + in_zero) * (uint32_t)wsum[blk * MR + m]);
  /* -corr[m] below: corr is never INT32_MIN in practice, but negate modulo 2^32 anyway */
  for (int m = 0; m < MR; ++m) corr[m] = (int32_t)(0u - (uint32_t)corr[m]);
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t left = B->ncols - p * NR;
    const int nv = left >= NR ? 3 : (int)((left + 15) / 16);
    int32_t* c = tile + (p - p0) * NR;
    ukr_table[nv](P->kd4, a, b + p * NR * 4, B->off, corr, c, TILE * NR);
    if (E != NULL) { /* grid columns p * NR.. are output positions */
      panel_codes e = *E;
      e.out += p * NR;
      if (e.add != NULL) e.opnd += p * NR;
      e.cols = left < NR ? left : NR;
      codes_of_panel(&e, c, TILE * NR);
    }
  }
}

/* Tiles of panels, and the threads' shares of the units (group, tile, block of MR channels),
 * tile-major so that a thread runs every block over a tile's input while it is in cache.
 * Thread t of `team` takes units [units * t / team, units * (t + 1) / team); tile i covers
 * panels [npanels * i / ntiles, npanels * (i + 1) / ntiles). The tile count is the one of the
 * few smallest (tiles of at most TILE panels) that gives the busiest thread the fewest panels:
 * 18 panels on 2 threads as 8 + 8 + 2 would give one thread twice the other's work. */
static int64_t choose_tiles(int64_t npanels, int64_t mblocks, int64_t groups, int nth) {
  const int64_t base = (npanels + TILE - 1) / TILE;
  if (nth == 1 || groups * base * mblocks > 4096) return base;
  int64_t best = base, best_load = INT64_MAX;
  for (int64_t nt = base; nt <= npanels && nt <= base + 2 * nth; ++nt) {
    const int64_t units = groups * nt * mblocks;
    int64_t worst = 0;
    for (int t = 0; t < nth; ++t) {
      int64_t load = 0;
      for (int64_t u = units * t / nth; u < units * (t + 1) / nth; ++u) {
        const int64_t tl = u / mblocks % nt;
        load += npanels * (tl + 1) / nt - npanels * tl / nt;
      }
      if (load > worst) worst = load;
    }
    if (worst < best_load) {
      best_load = worst;
      best = nt;
    }
  }
  return best;
}

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

static void imp_make_plan(const plan* P, imp_plan* Q) {
  const conv_geometry* g = P->g;
  const int64_t sh = g->stride_h, sw = g->stride_w;
  const int64_t rq = (int64_t)(g->kernel_h - 1) * g->dilation_h / sh;
  const int64_t sq = (int64_t)(g->kernel_w - 1) * g->dilation_w / sw;
  Q->nph = sh * sw;
  for (int64_t ph = 0; ph < Q->nph; ++ph) Q->phase[ph] = Q->slot[ph] = (int8_t)ph;
  Q->wq = g->out_w + sq;
  Q->hq = g->out_h + rq;
  Q->plane = Q->hq * Q->wq;
  Q->gbytes = P->c4 * Q->nph * Q->plane * 4;
  Q->ncols = (int64_t)(g->out_h - 1) * Q->wq + g->out_w;
}

/* The implicit GEMM copies only the phases some tap reads: a 1x1 convolution at stride 2
 * (ResNet's downsampling branches) reads one phase in four, and copying all four took about
 * a third of the layer (1x1/2 256 -> 512 at 56x56: 0.82 ms against 0.49 for ONNX Runtime). */
static void imp_used_phases(const plan* P, imp_plan* Q) {
  const conv_geometry* g = P->g;
  const int64_t sh = g->stride_h, sw = g->stride_w;
  for (int64_t ph = 0; ph < sh * sw; ++ph) Q->slot[ph] = -1;
  for (int64_t r = 0; r < g->kernel_h; ++r)
    for (int64_t s = 0; s < g->kernel_w; ++s)
      Q->slot[(r * g->dilation_h % sh) * sw + s * g->dilation_w % sw] = 0;
  Q->nph = 0;
  for (int64_t ph = 0; ph < sh * sw; ++ph)
    if (Q->slot[ph] == 0) {
      Q->slot[ph] = (int8_t)Q->nph;
      Q->phase[Q->nph++] = (int8_t)ph;
    }
  Q->gbytes = P->c4 * Q->nph * Q->plane * 4;
}

/* Grid reads run up to 47 positions past a group's copy (the last panel) and the last vector
 * 64 bytes: slack after the copy. */
enum { COPY_SLACK = NR * 4 + 64 };

static void imp_offsets(const plan* P, const imp_plan* Q, int64_t* off) {
  const conv_geometry* g = P->g;
  const int64_t sh = g->stride_h, sw = g->stride_w;
  int64_t k = 0;
  for (int64_t c4 = 0; c4 < P->c4; ++c4)
    for (int64_t r = 0; r < g->kernel_h; ++r)
      for (int64_t s = 0; s < g->kernel_w; ++s) {
        const int64_t ry = r * g->dilation_h, sx = s * g->dilation_w;
        const int64_t ph = Q->slot[(ry % sh) * sw + sx % sw];
        off[k++] = ((c4 * Q->nph + ph) * Q->plane + (ry / sh) * Q->wq + sx / sw) * 4;
      }
}

/* The implicit GEMM's input copy (its slack filled with the input's zero) and the depth
 * steps' offsets, in the workspace; 0 when memory runs out. */
static int imp_reserve_copy(const plan* P, const imp_plan* Q, int32_t in_zero, workspace* ws,
                            uint8_t** copy, int64_t** off) {
  const size_t copy_bytes = (size_t)(P->g->groups * Q->gbytes);
  *copy = workspace_get(ws, WS_COPY, copy_bytes + COPY_SLACK);
  *off = workspace_get(ws, WS_OFF, (size_t)P->kd4 * sizeof(int64_t));
  if (*copy == NULL || *off == NULL) return 0;
  memset(*copy + copy_bytes, (uint8_t)in_zero ^ 0x80, COPY_SLACK);
  imp_offsets(P, Q, *off);
  return 1;
}

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

/* Copy row positions [0, wq) from 4 channel rows: position xq holds column xq of rows[j]
 * (already offset by the row's first column) for xq in [lo, hi), the padding byte `fill`
 * elsewhere and for a missing channel (rows[j] NULL). Masked loads read only [lo, hi): no
 * byte outside the rows is touched. */
static void interleave4(const int8_t* const* rows, int64_t lo, int64_t hi, int64_t wq,
                        int8_t fill, uint8_t* d) {
  const __m512i pad = _mm512_set1_epi8(fill);
  for (int64_t x = 0; x < wq; x += 64) {
    const __mmask64 in = inside_mask(x, lo, hi);
    __m512i v[4];
    for (int j = 0; j < 4; ++j)
      v[j] = rows[j] != NULL && in ? _mm512_mask_loadu_epi8(pad, in, rows[j] + x) : pad;
    interleave4_store(v, x, wq, d);
  }
}

/* interleave4 at column stride 2: position xq holds column 2 xq of rows[j]. The even bytes are
 * picked in registers (vpmovwb of two 64-byte loads whose masks hold only the bytes read), so
 * no staging row: gathering into a row first and loading it back (a store-forwarding stall per
 * load) made the stride-2 copy a fifth of ResNet's 3x3/2 layers. */
static void interleave4_s2(const int8_t* const* rows, int64_t lo, int64_t hi, int64_t wq,
                           int8_t fill, uint8_t* d) {
  const __m512i pad = _mm512_set1_epi8(fill);
  for (int64_t x = 0; x < wq; x += 64) {
    const __mmask64 in = inside_mask(x, lo, hi);
    /* the bytes from column 2 (x + a) to 2 (x + b - 1), [a, b) the positions inside */
    const int64_t a = lo > x ? lo - x : 0, b = hi < x + 64 ? hi - x : 64;
    const __mmask64 m0 = in ? inside_mask(0, 2 * a, 2 * b - 1) : 0;
    const __mmask64 m1 = in ? inside_mask(64, 2 * a, 2 * b - 1) : 0;
    __m512i v[4];
    for (int j = 0; j < 4; ++j) {
      if (rows[j] == NULL || !in) {
        v[j] = pad;
        continue;
      }
      const __m256i e0 = _mm512_cvtepi16_epi8(_mm512_maskz_loadu_epi8(m0, rows[j] + 2 * x));
      const __m256i e1 =
          _mm512_cvtepi16_epi8(_mm512_maskz_loadu_epi8(m1, rows[j] + 2 * x + 64));
      v[j] = _mm512_mask_blend_epi8(
          in, pad, _mm512_inserti64x4(_mm512_castsi256_si512(e0), e1, 1));
    }
    interleave4_store(v, x, wq, d);
  }
}

/* Build copy row (grp, c4, phase, yq) of image `img` (its channel 0). Strides 1 and 2 read
 * the input rows in place (a copy through tmp first cost about a fifth of MobileNetV2's
 * whole int8 time); larger strides gather the row's columns into tmp: 4 rows of
 * ldt >= wq + 16 bytes. */
static void imp_build_row(const plan* P, const imp_plan* Q, const int8_t* img, int64_t grp,
                          int64_t c4, int64_t ph, int64_t yq, uint8_t* copy, int32_t in_zero,
                          int8_t* tmp, int64_t ldt) {
  const conv_geometry* g = P->g;
  const int64_t sw = g->stride_w, W = g->w, wq = Q->wq;
  uint8_t* d = copy + grp * Q->gbytes + ((c4 * Q->nph + ph) * Q->hq + yq) * wq * 4;
  const int64_t py = Q->phase[ph] / sw, px = Q->phase[ph] % sw;
  const int64_t iy = yq * g->stride_h + py - g->pad_top;
  const int8_t zb = (int8_t)in_zero;
  if (iy < 0 || iy >= g->h) {
    memset(d, (uint8_t)zb ^ 0x80, (size_t)wq * 4);
    return;
  }
  /* columns xq whose input column xq*sw + x0 lies inside [0, W) */
  const int64_t x0 = px - g->pad_left;
  int64_t lo = x0 >= 0 ? 0 : (-x0 + sw - 1) / sw;
  int64_t hi = x0 > W - 1 ? 0 : (W - 1 - x0) / sw + 1;
  if (hi > wq) hi = wq;
  if (lo > hi) lo = hi;
  const int8_t* rows[4];
  for (int j = 0; j < 4; ++j) {
    const int64_t c = c4 * 4 + j;
    if (c >= P->cg) { /* a missing channel: zero weights, any byte */
      rows[j] = NULL;
      continue;
    }
    const int8_t* src = img + ((grp * P->cg + c) * g->h + iy) * W + x0;
    if (sw <= 2) {
      rows[j] = src;
      continue;
    }
    int8_t* t = tmp + j * ldt;
    rows[j] = t;
    for (int64_t xq = lo; xq < hi; ++xq) t[xq] = src[xq * sw];
  }
  if (sw == 2) {
    interleave4_s2(rows, lo, hi, wq, zb, d);
  } else {
    interleave4(rows, lo, hi, wq, zb, d);
  }
}

/* A run of a tile's grid positions that are outputs: tile column `col`, output `o`. */
typedef struct seg {
  int64_t col, o, len;
} seg;

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
  const sdp_i8_lane_cvt* cvt; /* every channel's converter in lanes, or NULL */
  int8_t lo, hi;              /* and the codes' bounds */
  const sdp_i8_lane_add* add; /* the residual add in lanes (with cvt), or NULL */
  sdp_i8_lane_add add_consts; /* its constants */
} imp_job;

/* J->cvt (and J->add for a residual add) when every channel's converter has the lane form
 * (sdp_i8_lanes.h), prepared once per call into a workspace slot; else NULL: sdp_i8_span per
 * row. Outputs of one position per image convert along the channels instead. 0 when out of
 * memory. */
static int imp_prepare_lanes(const plan* P, const sdp_i8* ep, workspace* ws, imp_job* J) {
  const conv_geometry* g = P->g;
  J->cvt = NULL;
  J->add = NULL;
  if (P->ohw <= 1) return 1;
  sdp_i8_lane_cvt* cvt = workspace_get(ws, WS_CVT, (size_t)g->k * sizeof(sdp_i8_lane_cvt));
  if (cvt == NULL) return 0;
  const int64_t vmax = P->kd * 255 * 128; /* |v|: depth x |in - in_zero| x |w| */
  if (sdp_i8_lanes_prepare(ep, 0, g->k, vmax, cvt, &J->lo, &J->hi)) {
    J->cvt = cvt;
  } else if (sdp_i8_lanes_prepare_add(ep, 0, g->k, vmax, cvt, &J->add_consts, &J->lo, &J->hi)) {
    J->cvt = cvt;
    J->add = &J->add_consts;
  }
  return 1;
}

/* The codes of a tile's rows of channels k0.. (rows of them, ldc apart, cols values each) at
 * output offset `at` of channel k0 (the operand at the same offset), in lanes. */
static void imp_codes_of_rows(const imp_job* J, int64_t k0, int64_t rows, const int32_t* c,
                              int64_t ldc, int64_t at, int64_t cols, int wide) {
  const panel_codes E = {J->cvt + k0, J->out + at, J->P->ohw, rows, cols, J->lo, J->hi,
                         rows_form(J->cvt + k0, rows, J->add != NULL), J->add,
                         J->add != NULL ? J->ep->ew_operand + at : NULL, wide, NULL};
  codes_of_panel(&E, c, ldc);
}

static void imp_pack_item(void* ctx, int64_t blk, int participant) {
  const imp_job* J = ctx;
  (void)participant;
  pack_block(J->P, J->weights, blk / J->P->mblocks, blk % J->P->mblocks, J->pdata, J->psum);
}

/* A 1x1 convolution with stride 1 and no padding copies each channel's plane as it is (wq =
 * W, hq = H): a block of 4 channels is one row of h * w positions, built in segments of
 * FLAT_SEG positions (row by row, a 7x7 plane cost about 60 cycles per row of 7 positions:
 * more than the GEMM after it for MobileNetV2's 960 -> 320). Item = (grp, c4, segment). */
enum { FLAT_SEG = 4096 };

static int imp_flat(const conv_geometry* g) {
  return g->kernel_h == 1 && g->kernel_w == 1 && g->stride_h == 1 && g->stride_w == 1 &&
         g->pad_top == 0 && g->pad_left == 0 && g->out_h == g->h && g->out_w == g->w;
}

static void imp_build_flat(const imp_job* J, int64_t item) {
  const plan* P = J->P;
  const int64_t part = item % J->flat_segs, c4 = item / J->flat_segs % P->c4;
  const int64_t grp = item / J->flat_segs / P->c4;
  const int64_t p0 = part * FLAT_SEG, n = P->hw - p0 < FLAT_SEG ? P->hw - p0 : FLAT_SEG;
  const int8_t* img = J->in + J->b * J->P->g->c * P->hw;
  const int8_t* rows[4];
  for (int j = 0; j < 4; ++j) {
    const int64_t c = c4 * 4 + j;
    rows[j] = c < P->cg ? img + (grp * P->cg + c) * P->hw + p0 : NULL;
  }
  uint8_t* d = (uint8_t*)J->B->base + grp * J->Q->gbytes + (c4 * P->hw + p0) * 4;
  interleave4(rows, 0, n, n, (int8_t)J->in_zero, d);
}

static void imp_build_item(void* ctx, int64_t chunk, int participant) {
  const imp_job* J = ctx;
  if (J->flat_segs > 0) {
    imp_build_flat(J, chunk);
    return;
  }
  int8_t* tmp = (int8_t*)(J->scratch[participant] + J->tile_bytes);
  const int8_t* img = J->in + J->b * J->P->g->c * J->P->hw;
  const imp_plan* Q = J->Q;
  const int64_t r0 = chunk * J->rows_per_item;
  const int64_t r1 = r0 + J->rows_per_item < J->nbuild ? r0 + J->rows_per_item : J->nbuild;
  /* row r0 = (grp, c4, phase, yq), then counted on (the divisions per row cost as much as a
   * short row's copy) */
  int64_t yq = r0 % Q->hq, rest = r0 / Q->hq;
  int64_t ph = rest % Q->nph;
  rest /= Q->nph;
  int64_t c4 = rest % J->P->c4, grp = rest / J->P->c4;
  for (int64_t item = r0; item < r1; ++item) {
    imp_build_row(J->P, Q, img, grp, c4, ph, yq, (uint8_t*)J->B->base, J->in_zero, tmp,
                  J->ldt);
    if (++yq < Q->hq) continue;
    yq = 0;
    if (++ph < Q->nph) continue;
    ph = 0;
    if (++c4 < J->P->c4) continue;
    c4 = 0;
    ++grp;
  }
}

static void tile_codes(const imp_job* J, int32_t* tile, int64_t ldc, int64_t n0, int64_t n1,
                       int64_t rows, int64_t k0);

/* Unit u = (group, tile, block of MR channels) of image b: its GEMM, then the epilogue. */
static void imp_unit_item(void* ctx, int64_t u, int participant) {
  const imp_job* J = ctx;
  const plan* P = J->P;
  const imp_plan* Q = J->Q;
  const conv_geometry* g = P->g;
  const sdp_i8* ep = J->ep;
  const int64_t b = J->b, tiles = J->tiles, npanels = J->B->npanels;
  int32_t* tile = (int32_t*)J->scratch[participant];
  const int64_t mb = u % P->mblocks, tl = u / P->mblocks % tiles;
  const int64_t grp = u / (P->mblocks * tiles);
  const int64_t p0 = npanels * tl / tiles, p1 = npanels * (tl + 1) / tiles;
  const int64_t rows = P->mg - mb * MR < MR ? P->mg - mb * MR : MR;
  const int64_t k0 = grp * P->mg + mb * MR;
  if (J->cvt != NULL && Q->wq == g->out_w) {
    /* grid column n is output position n: each panel's codes straight after its GEMM */
    const int64_t at = (b * g->k + k0) * P->ohw;
    const panel_codes E = {J->cvt + k0, J->out + at, P->ohw, rows, 0, J->lo, J->hi,
                           rows_form(J->cvt + k0, rows, J->add != NULL), J->add,
                           J->add != NULL ? ep->ew_operand + at : NULL, 1, NULL};
    gemm_tile(P, J->B, J->apack, J->wsum, J->in_zero, grp, mb, p0, p1, tile, &E);
    return;
  }
  gemm_tile(P, J->B, J->apack, J->wsum, J->in_zero, grp, mb, p0, p1, tile, NULL);
  tile_codes(J, tile, TILE * NR, p0 * NR, p1 * NR < Q->ncols ? p1 * NR : Q->ncols, rows, k0);
}

/* The codes of a tile of sums of grid columns [n0, n1) (at most TILE * NR), rows of channels
 * k0.. (ldc apart) of image J->b: its outputs' runs moved down over the dropped columns, then
 * converted. */
static void tile_codes(const imp_job* J, int32_t* tile, int64_t ldc, int64_t n0, int64_t n1,
                       int64_t rows, int64_t k0) {
  const plan* P = J->P;
  const imp_plan* Q = J->Q;
  const conv_geometry* g = P->g;
  const sdp_i8* ep = J->ep;
  const int64_t b = J->b;
  /* the tile's outputs, as runs of grid columns */
  seg segs[TILE * NR + 1];
  int nseg = 0;
  for (int64_t n = n0; n < n1;) {
    const int64_t y = n / Q->wq, x = n % Q->wq;
    if (x >= g->out_w) {
      n += Q->wq - x;
      continue;
    }
    const int64_t len = g->out_w - x < n1 - n ? g->out_w - x : n1 - n;
    const int64_t o = y * g->out_w + x;
    if (nseg > 0 && segs[nseg - 1].col + segs[nseg - 1].len == n - n0 &&
        segs[nseg - 1].o + segs[nseg - 1].len == o) {
      segs[nseg - 1].len += len; /* no garbage columns between: one run */
    } else {
      segs[nseg++] = (seg){n - n0, o, len};
    }
    n += len;
  }
  if (nseg == 0) return;
  const int64_t o0 = segs[0].o, cnt = segs[nseg - 1].o + segs[nseg - 1].len - o0;
  if (P->ohw == 1) { /* one output per channel: along the channels */
    epilogue_column(ep, tile, ldc, segs[0].col, rows, k0, b * g->k + k0, J->out);
    return;
  }
  for (int64_t m = 0; m < rows; ++m) {
    int32_t* row = tile + m * ldc;
    for (int i = 0; i < nseg; ++i)
      if (segs[i].col != segs[i].o - o0)
        move_down(row + segs[i].col, row + (segs[i].o - o0), segs[i].len);
    if (J->cvt != NULL) continue; /* all rows at once below */
    const int64_t k = k0 + m;
    convert_at(ep, k, row, J->out, (b * g->k + k) * P->ohw + o0, cnt);
  }
  if (J->cvt != NULL)
    imp_codes_of_rows(J, k0, rows, tile, ldc, (b * g->k + k0) * P->ohw + o0, cnt, 1);
}

static accel_status conv_implicit(const plan* P, int32_t in_zero, const int8_t* in,
                                  const int8_t* apack, const int32_t* wsum, const int8_t* weights,
                                  int8_t* out, const sdp_i8* ep, workspace* ws, int nth) {
  const conv_geometry* g = P->g;
  imp_plan Q;
  imp_make_plan(P, &Q);
  imp_used_phases(P, &Q);
  const int64_t npanels = (Q.ncols + NR - 1) / NR;
  const int64_t tiles = choose_tiles(npanels, P->mblocks, g->groups, nth);
  const int64_t units = g->groups * tiles * P->mblocks;
  if (nth > units) nth = (int)units;
  const int64_t nbuild = g->groups * P->c4 * Q.nph * Q.hq;
  const int pack_now = apack == NULL;
  int8_t* pdata = NULL;
  int32_t* psum = NULL;
  if (pack_now && !reserve_packing(P, ws, &pdata, &psum, &apack, &wsum)) {
    return ACCEL_ERR_NO_MEMORY;
  }
  uint8_t* copy;
  int64_t* off;
  if (!imp_reserve_copy(P, &Q, in_zero, ws, &copy, &off)) return ACCEL_ERR_NO_MEMORY;
  const int64_t ldt = (Q.wq + 16 + 63) & ~(int64_t)63;
  const size_t tile_bytes = (size_t)MR * TILE * NR * sizeof(int32_t);
  char* scratch[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    scratch[t] = workspace_get(ws, t, tile_bytes + (size_t)(4 * ldt));
    if (scratch[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  const bsrc B = {copy, Q.gbytes, off, Q.ncols, npanels, tiles};
  /* copy rows in items of about 4 KiB (a claim per row would cost as much as a short row) */
  int64_t rows_per_item = 4096 / (Q.wq * 4) + 1;
  if (rows_per_item * 4 * nth > nbuild) rows_per_item = nbuild / (4 * nth) + 1;
  imp_job J = {P, &Q, &B, in_zero, in, weights, apack, wsum, pdata, psum, out, ep, scratch,
               tile_bytes, ldt, rows_per_item, nbuild, tiles, 0, 0, NULL, 0, 0, NULL, {0}};
  if (!imp_prepare_lanes(P, ep, ws, &J)) return ACCEL_ERR_NO_MEMORY;
  int64_t nbuild_items = (nbuild + rows_per_item - 1) / rows_per_item;
  if (imp_flat(g)) {
    J.flat_segs = (P->hw + FLAT_SEG - 1) / FLAT_SEG;
    nbuild_items = g->groups * P->c4 * J.flat_segs;
  }
  if (pack_now) pool_for(nth, g->groups * P->mblocks, imp_pack_item, &J);
  for (int64_t b = 0; b < g->n; ++b) { /* the copy is rebuilt for each image */
    J.b = b;
    pool_for(nth, nbuild_items, imp_build_item, &J);
    pool_for(nth, units, imp_unit_item, &J);
  }
  return ACCEL_OK;
}

/* ---- output channels along the vector (small grids, dropped columns) ----------------------
 * The implicit GEMM puts 16 grid positions in a vector: a 7x7 output (49 positions, 61 grid
 * columns with the 3x3 window's dropped ones) fills 64 lanes, so ResNet's 7x7 layers computed
 * 31 % more than their outputs (3x3 512 -> 512 at 7x7 in ResNet-18: 0.76 ms against ONNX
 * Runtime's 0.58; 0.81 -> 0.65 ms with this kernel, 1 thread, Device.run included).
 * Here a vector holds 8 output channels (one MR block of the packed weights: 32 bytes per
 * depth step, a ymm operand as it lies) and each output position's 4 input bytes of a depth
 * step are broadcast to it: vpdpbusd on ymm ran two a cycle on this project's Zen 4 (224-235
 * GMAC/s against 231 on zmm), and no lane is wasted on a dropped column. The
 * input is the implicit GEMM's copy (imp_build_item); a micro-tile is SP positions (any
 * positions: each has its own pointer into the copy) x SV blocks of MR channels, 24 ymm
 * accumulators. The sums are those of the implicit GEMM (the same correction), transposed to
 * channel rows for the epilogue. */
enum { SP = 8, SV = 3, SMALL_CHUNK = 32 /* position tiles a unit at most */ };

/* c[m * ldc + p] = t[p][m / MR] lane m % MR, for positions p < np and blocks < nv: 8 x 8
 * transposes of int32. */
static __attribute__((noinline)) void skr_store(const __m256i (*t)[SV], int np, int nv,
                                                int32_t* c, int64_t ldc) {
  const __mmask8 keep = (__mmask8)((1u << np) - 1u);
  for (int v = 0; v < nv; ++v) {
    const __m256i t0 = _mm256_unpacklo_epi32(t[0][v], t[1][v]);
    const __m256i t1 = _mm256_unpackhi_epi32(t[0][v], t[1][v]);
    const __m256i t2 = _mm256_unpacklo_epi32(t[2][v], t[3][v]);
    const __m256i t3 = _mm256_unpackhi_epi32(t[2][v], t[3][v]);
    const __m256i t4 = _mm256_unpacklo_epi32(t[4][v], t[5][v]);
    const __m256i t5 = _mm256_unpackhi_epi32(t[4][v], t[5][v]);
    const __m256i t6 = _mm256_unpacklo_epi32(t[6][v], t[7][v]);
    const __m256i t7 = _mm256_unpackhi_epi32(t[6][v], t[7][v]);
    const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    const __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
    const __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
    int32_t* cv = c + v * MR * ldc;
    _mm256_mask_storeu_epi32(cv, keep, _mm256_permute2x128_si256(u0, u4, 0x20));
    _mm256_mask_storeu_epi32(cv + ldc, keep, _mm256_permute2x128_si256(u1, u5, 0x20));
    _mm256_mask_storeu_epi32(cv + 2 * ldc, keep, _mm256_permute2x128_si256(u2, u6, 0x20));
    _mm256_mask_storeu_epi32(cv + 3 * ldc, keep, _mm256_permute2x128_si256(u3, u7, 0x20));
    _mm256_mask_storeu_epi32(cv + 4 * ldc, keep, _mm256_permute2x128_si256(u0, u4, 0x31));
    _mm256_mask_storeu_epi32(cv + 5 * ldc, keep, _mm256_permute2x128_si256(u1, u5, 0x31));
    _mm256_mask_storeu_epi32(cv + 6 * ldc, keep, _mm256_permute2x128_si256(u2, u6, 0x31));
    _mm256_mask_storeu_epi32(cv + 7 * ldc, keep, _mm256_permute2x128_si256(u3, u7, 0x31));
  }
}

static inline __attribute__((always_inline)) void skr(const int np, const int nv, int64_t kd4,
                                                      const int8_t* a, int64_t ablk,
                                                      const uint8_t* const* bp,
                                                      const int64_t* off, const int32_t* corr,
                                                      int32_t* c, int64_t ldc) {
  const __m256i i0 = _mm256_loadu_si256((const __m256i*)corr);
  const __m256i i1 = nv > 1 ? _mm256_loadu_si256((const __m256i*)(corr + MR)) : i0;
  const __m256i i2 = nv > 2 ? _mm256_loadu_si256((const __m256i*)(corr + 2 * MR)) : i0;
#define SDECL(p) __m256i c##p##0 = i0, c##p##1 = i1, c##p##2 = i2;
  SDECL(0) SDECL(1) SDECL(2) SDECL(3) SDECL(4) SDECL(5) SDECL(6) SDECL(7)
#undef SDECL
  const uint8_t *b0 = bp[0], *b1 = bp[np > 1 ? 1 : 0], *b2 = bp[np > 2 ? 2 : 0],
                *b3 = bp[np > 3 ? 3 : 0], *b4 = bp[np > 4 ? 4 : 0], *b5 = bp[np > 5 ? 5 : 0],
                *b6 = bp[np > 6 ? 6 : 0], *b7 = bp[np > 7 ? 7 : 0];
  for (int64_t k = 0; k < kd4; ++k) {
    const int64_t o = off[k];
    const int8_t* ak = a + k * MR * 4;
    const __m256i w0 = _mm256_loadu_si256((const __m256i*)ak);
    const __m256i w1 = nv > 1 ? _mm256_loadu_si256((const __m256i*)(ak + ablk)) : w0;
    const __m256i w2 = nv > 2 ? _mm256_loadu_si256((const __m256i*)(ak + 2 * ablk)) : w0;
#define SPOS(p)                                                                    \
  if (np > p) {                                                                    \
    const __m256i x = _mm256_set1_epi32(*(const i32_alias*)(b##p + o));            \
    c##p##0 = _mm256_dpbusd_epi32(c##p##0, x, w0);                                 \
    if (nv > 1) c##p##1 = _mm256_dpbusd_epi32(c##p##1, x, w1);                     \
    if (nv > 2) c##p##2 = _mm256_dpbusd_epi32(c##p##2, x, w2);                     \
  }
    SPOS(0) SPOS(1) SPOS(2) SPOS(3) SPOS(4) SPOS(5) SPOS(6) SPOS(7)
#undef SPOS
  }
  /* the accumulators through L1 (transposing them here made the compiler spill them in the
   * loop), then each block's 8 x 8 (positions x channels) to channel rows */
  __m256i t[SP][SV];
#define SST(p)                 \
  t[p][0] = c##p##0;           \
  if (nv > 1) t[p][1] = c##p##1; \
  if (nv > 2) t[p][2] = c##p##2;
  SST(0) SST(1) SST(2) SST(3) SST(4) SST(5) SST(6) SST(7)
#undef SST
  skr_store(t, np, nv, c, ldc);
}

typedef void (*skr_fn)(int64_t, const int8_t*, int64_t, const uint8_t* const*, const int64_t*,
                       const int32_t*, int32_t*, int64_t);
#define SKR(NP_, NV_)                                                                       \
  static void skr##NP_##_##NV_(int64_t k, const int8_t* a, int64_t ablk,                   \
                               const uint8_t* const* bp, const int64_t* o,                 \
                               const int32_t* corr, int32_t* c, int64_t ldc) {             \
    skr(NP_, NV_, k, a, ablk, bp, o, corr, c, ldc);                                         \
  }
#define SKR3(NP_) SKR(NP_, 1) SKR(NP_, 2) SKR(NP_, 3)
SKR3(1) SKR3(2) SKR3(3) SKR3(4) SKR3(5) SKR3(6) SKR3(7) SKR3(8)
#undef SKR3
#undef SKR
#define SKR_ROW(NP_) {skr##NP_##_1, skr##NP_##_2, skr##NP_##_3}
static const skr_fn skr_table[SP][SV] = {SKR_ROW(1), SKR_ROW(2), SKR_ROW(3), SKR_ROW(4),
                                         SKR_ROW(5), SKR_ROW(6), SKR_ROW(7), SKR_ROW(8)};
#undef SKR_ROW

/* Whether the implicit GEMM's panels would compute over 3 % more lanes than there are outputs
 * (their lanes: 16 per started vector of each panel of NR grid columns). Measured, 1 thread:
 * 3x3 layers gain 2.6 % at 56x56 (3.6 % more lanes), 4 % at 28x28 (8 %), 9 % at 14x14
 * (14 %), 19 % at 7x7 (31 %); 1x1 layers at 14x14 (6 %) are even. */
static int small_grid_pays(const plan* P, const imp_plan* Q) {
  if (P->ohw < SP) return 0;
  const int64_t full = Q->ncols / NR, rest = Q->ncols % NR;
  const int64_t lanes = full * NR + (rest + 15) / 16 * 16;
  return 100 * lanes > 103 * P->ohw;
}

/* Unit u = (group, chunk of position tiles, set of channel blocks) of image b: its tiles,
 * then the epilogue of each channel over their positions. The channel blocks are split into
 * sets of at most SV as evenly as can be, the positions into tiles of at most SP, and the
 * tiles into chunks of at most SMALL_CHUNK (so that a unit's sums stay in L1), more when
 * there are too few units to share evenly among the threads. Consecutive units share a
 * chunk's input. */
typedef struct small_job {
  const imp_job* J;
  int64_t sets, ptiles, chunks, ldr;
} small_job;

static void small_unit_item(void* ctx, int64_t u, int participant) {
  const small_job* S = ctx;
  const imp_job* J = S->J;
  const plan* P = J->P;
  const imp_plan* Q = J->Q;
  const conv_geometry* g = P->g;
  const sdp_i8* ep = J->ep;
  const int64_t set = u % S->sets, chunk = u / S->sets % S->chunks;
  const int64_t grp = u / S->sets / S->chunks;
  const int64_t t0 = S->ptiles * chunk / S->chunks, t1 = S->ptiles * (chunk + 1) / S->chunks;
  const int64_t first = P->ohw * t0 / S->ptiles, cnt = P->ohw * t1 / S->ptiles - first;
  const int64_t mb0 = P->mblocks * set / S->sets, mb1 = P->mblocks * (set + 1) / S->sets;
  const int nv = (int)(mb1 - mb0);
  int32_t* rows = (int32_t*)J->scratch[participant]; /* [SV * MR][ldr]: the chunk's sums */
  const int64_t ldr = S->ldr;
  const int64_t blk = grp * P->mblocks + mb0;
  int32_t corr[SV * MR];
  for (int64_t m = 0; m < nv * MR; ++m)
    corr[m] = (int32_t)(0u - (uint32_t)(128 + J->in_zero) * (uint32_t)J->wsum[blk * MR + m]);
  const int8_t* a = J->apack + blk * P->kd4 * MR * 4;
  const int64_t ablk = P->kd4 * MR * 4;
  const uint8_t* base = J->B->base + grp * Q->gbytes;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t o0 = P->ohw * t / S->ptiles, o1 = P->ohw * (t + 1) / S->ptiles;
    const uint8_t* bp[SP];
    for (int64_t o = o0; o < o1; ++o)
      bp[o - o0] = base + 4 * ((o / g->out_w) * Q->wq + o % g->out_w);
    skr_table[o1 - o0 - 1][nv - 1](P->kd4, a, ablk, bp, J->B->off, corr, rows + o0 - first,
                                   ldr);
  }
  const int64_t chans = (mb1 * MR < P->mg ? mb1 * MR : P->mg) - mb0 * MR;
  if (J->cvt != NULL) {
    const int64_t k0 = grp * P->mg + mb0 * MR;
    imp_codes_of_rows(J, k0, chans, rows, ldr, (J->b * g->k + k0) * P->ohw + first, cnt, 0);
    return;
  }
  for (int64_t m = 0; m < chans; ++m) {
    const int32_t* row = rows + m * ldr;
    const int64_t k = grp * P->mg + mb0 * MR + m;
    const int64_t at = (J->b * g->k + k) * P->ohw + first;
    convert_at(ep, k, row, J->out, at, cnt);
  }
}

static accel_status conv_small(const plan* P, int32_t in_zero, const int8_t* in,
                               const int8_t* apack, const int32_t* wsum, const int8_t* weights,
                               int8_t* out, const sdp_i8* ep, workspace* ws, int nth) {
  const conv_geometry* g = P->g;
  imp_plan Q;
  imp_make_plan(P, &Q);
  imp_used_phases(P, &Q);
  const int64_t sets = (P->mblocks + SV - 1) / SV, ptiles = (P->ohw + SP - 1) / SP;
  /* at least 8 units a thread when there are several: units are claimed one at a time, so
   * the last one claimed is at most an eighth of a thread's work (11 units of a 14x14 layer
   * with 256 channels on 2 threads kept one thread 6/5 as long as the other) */
  int64_t chunks = (ptiles + SMALL_CHUNK - 1) / SMALL_CHUNK;
  if (nth > 1 && g->groups * sets * chunks < 8 * nth) {
    chunks = (8 * nth + g->groups * sets - 1) / (g->groups * sets);
    if (chunks > ptiles) chunks = ptiles;
  }
  const int64_t units = g->groups * sets * chunks;
  const int64_t ldr = ((ptiles + chunks - 1) / chunks + 1) * SP; /* a chunk's positions, + SP */
  if (nth > units) nth = (int)units;
  const int64_t nbuild = g->groups * P->c4 * Q.nph * Q.hq;
  const int pack_now = apack == NULL;
  int8_t* pdata = NULL;
  int32_t* psum = NULL;
  if (pack_now && !reserve_packing(P, ws, &pdata, &psum, &apack, &wsum)) {
    return ACCEL_ERR_NO_MEMORY;
  }
  uint8_t* copy;
  int64_t* off;
  if (!imp_reserve_copy(P, &Q, in_zero, ws, &copy, &off)) return ACCEL_ERR_NO_MEMORY;
  const int64_t ldt = (Q.wq + 16 + 63) & ~(int64_t)63;
  const size_t rows_bytes = (size_t)(SV * MR * ldr) * sizeof(int32_t);
  const size_t scratch_bytes = rows_bytes > (size_t)(4 * ldt) ? rows_bytes : (size_t)(4 * ldt);
  char* scratch[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    scratch[t] = workspace_get(ws, t, scratch_bytes);
    if (scratch[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  const bsrc B = {copy, Q.gbytes, off, Q.ncols, 0, 0};
  int64_t rows_per_item = 4096 / (Q.wq * 4) + 1;
  if (rows_per_item * 4 * nth > nbuild) rows_per_item = nbuild / (4 * nth) + 1;
  /* the copy's tmp rows (strides > 2) sit at the start of each scratch: tile_bytes 0 */
  imp_job J = {P, &Q, &B, in_zero, in, weights, apack, wsum, pdata, psum, out, ep, scratch,
               0, ldt, rows_per_item, nbuild, 0, 0, 0, NULL, 0, 0, NULL, {0}};
  if (!imp_prepare_lanes(P, ep, ws, &J)) return ACCEL_ERR_NO_MEMORY;
  const small_job S = {&J, sets, ptiles, chunks, ldr};
  int64_t nbuild_items = (nbuild + rows_per_item - 1) / rows_per_item;
  if (imp_flat(g)) {
    J.flat_segs = (P->hw + FLAT_SEG - 1) / FLAT_SEG;
    nbuild_items = g->groups * P->c4 * J.flat_segs;
  }
  if (pack_now) pool_for(nth, g->groups * P->mblocks, imp_pack_item, &J);
  for (int64_t b = 0; b < g->n; ++b) { /* the copy is rebuilt for each image */
    J.b = b;
    pool_for(nth, nbuild_items, imp_build_item, &J);
    pool_for(nth, units, small_unit_item, (void*)&S);
  }
  return ACCEL_OK;
}

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
 * they are (imp_unit_item). */
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
  const int64_t tiles = choose_tiles(npanels, P->mblocks, 1, nth);
  const int64_t units = tiles * P->mblocks;
  if (nth > units) nth = (int)units;
  const size_t tile_bytes = (size_t)MR * TILE * NR * sizeof(int32_t);
  char* scratch[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    scratch[t] = workspace_get(ws, t, tile_bytes);
    if (scratch[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  const bsrc B = {copy, Q.gbytes, off, Q.ncols, npanels, tiles};
  imp_job J = {&D, &Q, &B, in_zero, in, weights, apack, wsum, NULL, NULL, out, ep, scratch,
               tile_bytes, 0, 0, 0, tiles, 0, 0, NULL, 0, 0, NULL, {0}};
  if (!imp_prepare_lanes(P, ep, ws, &J)) return ACCEL_ERR_NO_MEMORY;
  S.P = P;
  S.Q = &Q;
  S.T = T;
  S.in = in;
  S.in_zero = in_zero;
  S.copy = copy;
  for (int64_t b = 0; b < g->n; ++b) { /* the copy is rebuilt for each image */
    S.b = J.b = b;
    pool_for(nth, S.rphases * Q.hq, stem_build_item, &S);
    pool_for(nth, units, imp_unit_item, &J);
  }
  return ACCEL_OK;
}
#endif /* __AVX512VBMI__ */

/* ---- im2col: explicit columns (batched fully connected, grids mostly garbage) ------------
 * Columns j = (image, output position) over all images, in chunks; depth step k of column j
 * at cols + grp * group_bytes + (k * ldb + j) * 4. */
static void col_build_row(const plan* P, const int8_t* in, int32_t in_zero, int64_t grp,
                          int64_t k, int64_t j0, int64_t nc, int64_t ldb, uint8_t* dst) {
  const conv_geometry* g = P->g;
  const int64_t c4 = k / P->rs, rs = k % P->rs, r = rs / g->kernel_w, s = rs % g->kernel_w;
  const uint8_t pad = (uint8_t)in_zero ^ 0x80;
  const int64_t ow = g->out_w;
  const int64_t c_lo = c4 * 4, full = c_lo + 4 <= P->cg;
  for (int64_t j = 0; j < nc; ++j) {
    const int64_t col = j0 + j, b = col / P->ohw, pos = col % P->ohw;
    const int64_t iy = pos / ow * g->stride_h - g->pad_top + r * g->dilation_h;
    const int64_t ix = pos % ow * g->stride_w - g->pad_left + s * g->dilation_w;
    uint8_t* d = dst + 4 * j;
    if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w) {
      d[0] = d[1] = d[2] = d[3] = pad;
      continue;
    }
    const int8_t* src = in + (b * g->c + grp * P->cg + c_lo) * P->hw + iy * g->w + ix;
    if (full && P->hw == 1) {
      uint32_t v;
      memcpy(&v, src, 4);
      v ^= 0x80808080u;
      memcpy(d, &v, 4);
      continue;
    }
    for (int64_t jj = 0; jj < 4; ++jj)
      d[jj] = c_lo + jj < P->cg ? (uint8_t)src[jj * P->hw] ^ 0x80 : pad;
  }
  memset(dst + 4 * nc, pad, (size_t)(4 * (ldb - nc)));
}

/* ---- matrix-vector products: at most GEMV_COLS columns in all -----------------------------
 * A panel of 16 positions would be mostly empty. Instead each 64-byte load of a weight block
 * holds two depth steps of its 8 rows, and the column's matching vector holds those steps' 4
 * input bytes, each repeated over 8 lanes: one vpdpbusd per 64 weight bytes and column, all
 * lanes useful; the halves are added at the end. xp[j][k2] = (step 2k2, step 2k2 + 1) of
 * column j (an odd last step reads weights under a mask). */
#define GV_ACC(j) __m512i s##j = _mm512_setzero_si512();
#define GV_STEP(j) \
  if (nc > j) s##j = _mm512_dpbusd_epi32(s##j, _mm512_load_si512(xp + (j) * kd2 + k2), w);
#define GV_END(j)                                                                        \
  if (nc > j) {                                                                          \
    const __m256i r = _mm256_add_epi32(                                                  \
        _mm256_add_epi32(_mm512_castsi512_si256(s##j), _mm512_extracti64x4_epi64(s##j, 1)), \
        cv);                                                                             \
    int32_t v[MR];                                                                       \
    _mm256_storeu_si256((__m256i*)v, r);                                                 \
    for (int m = 0; m < MR; ++m) tile[m * TILE * NR + (j)] = v[m];                       \
  }

static inline __attribute__((always_inline)) void gemv_body(const int nc, int64_t kd4,
                                                            const int8_t* a, const __m512i* xp,
                                                            const int32_t* corr, int32_t* tile) {
  const int64_t kd2 = (kd4 + 1) / 2, full = kd4 / 2;
  GV_ACC(0) GV_ACC(1) GV_ACC(2) GV_ACC(3) GV_ACC(4) GV_ACC(5) GV_ACC(6) GV_ACC(7)
  for (int64_t k2 = 0; k2 < kd2; ++k2) {
    const __m512i w = k2 < full ? _mm512_loadu_si512(a + k2 * 64)
                                : _mm512_maskz_loadu_epi32((__mmask16)0xFF, a + k2 * 64);
    GV_STEP(0) GV_STEP(1) GV_STEP(2) GV_STEP(3) GV_STEP(4) GV_STEP(5) GV_STEP(6) GV_STEP(7)
  }
  const __m256i cv = _mm256_loadu_si256((const __m256i*)corr);
  GV_END(0) GV_END(1) GV_END(2) GV_END(3) GV_END(4) GV_END(5) GV_END(6) GV_END(7)
}

/* One column: four accumulators over interleaved steps, so that vpdpbusd's latency is hidden. */
static void gemv1(int64_t kd4, const int8_t* a, const __m512i* xp, const int32_t* corr,
                  int32_t* tile) {
  const int64_t kd2 = (kd4 + 1) / 2, full = kd4 / 2;
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
  int64_t k2 = 0;
  for (; k2 + 4 <= full; k2 += 4) {
    s0 = _mm512_dpbusd_epi32(s0, _mm512_load_si512(xp + k2), _mm512_loadu_si512(a + k2 * 64));
    s1 = _mm512_dpbusd_epi32(s1, _mm512_load_si512(xp + k2 + 1),
                             _mm512_loadu_si512(a + k2 * 64 + 64));
    s2 = _mm512_dpbusd_epi32(s2, _mm512_load_si512(xp + k2 + 2),
                             _mm512_loadu_si512(a + k2 * 64 + 128));
    s3 = _mm512_dpbusd_epi32(s3, _mm512_load_si512(xp + k2 + 3),
                             _mm512_loadu_si512(a + k2 * 64 + 192));
  }
  for (; k2 < kd2; ++k2) {
    const __m512i w = k2 < full ? _mm512_loadu_si512(a + k2 * 64)
                                : _mm512_maskz_loadu_epi32((__mmask16)0xFF, a + k2 * 64);
    s0 = _mm512_dpbusd_epi32(s0, _mm512_load_si512(xp + k2), w);
  }
  s0 = _mm512_add_epi32(_mm512_add_epi32(s0, s1), _mm512_add_epi32(s2, s3));
  const int nc = 1;
  const __m256i cv = _mm256_loadu_si256((const __m256i*)corr);
  GV_END(0)
}

typedef void (*gemv_fn)(int64_t, const int8_t*, const __m512i*, const int32_t*, int32_t*);
#define GEMV(NC_)                                                                          \
  static void gemv##NC_(int64_t kd4, const int8_t* a, const __m512i* xp, const int32_t* corr, \
                        int32_t* tile) {                                                   \
    gemv_body(NC_, kd4, a, xp, corr, tile);                                                \
  }
GEMV(2)
GEMV(3)
GEMV(4)
GEMV(5)
GEMV(6)
GEMV(7)
GEMV(8)
static const gemv_fn gemv_table[GEMV_COLS + 1] = {0,      gemv1, gemv2, gemv3, gemv4,
                                                  gemv5, gemv6, gemv7, gemv8};

/* Columns' pair vectors of group grp from the explicit columns: xp[j][k2], kd2 per column. */
static void gemv_build(const plan* P, const uint8_t* cols, int64_t ldb, int64_t nc, int64_t k2,
                       __m512i* xp) {
  const int64_t kd2 = (P->kd4 + 1) / 2;
  for (int64_t j = 0; j < nc; ++j) {
    uint32_t lo, hi = 0;
    memcpy(&lo, cols + (2 * k2 * ldb + j) * 4, 4);
    if (2 * k2 + 1 < P->kd4) memcpy(&hi, cols + ((2 * k2 + 1) * ldb + j) * 4, 4);
    xp[j * kd2 + k2] = _mm512_inserti64x4(_mm512_set1_epi32((int32_t)lo),
                                          _mm256_set1_epi32((int32_t)hi), 1);
  }
}

/* im2col's loops (pool_for items): packing, column rows, gemv columns, units of chunk j0. */
typedef struct col_job {
  const plan* P;
  int32_t in_zero;
  const int8_t* in;
  const int8_t* weights;
  const int8_t* apack;
  const int32_t* wsum;
  int8_t* pdata;
  int32_t* psum;
  int8_t* out;
  const sdp_i8* ep;
  int32_t* const* tiles_buf; /* per participant */
  uint8_t* cols;
  const int64_t* off;
  __m512i* xp;
  int64_t gbytes, ldb, j0, nc, npanels, tiles;
  int gemv;
  int64_t kd2;
} col_job;

static void col_pack_item(void* ctx, int64_t blk, int participant) {
  const col_job* J = ctx;
  (void)participant;
  pack_block(J->P, J->weights, blk / J->P->mblocks, blk % J->P->mblocks, J->pdata, J->psum);
}

static void col_build_item(void* ctx, int64_t row, int participant) {
  const col_job* J = ctx;
  const int64_t grp = row / J->P->kd4, k = row % J->P->kd4;
  (void)participant;
  col_build_row(J->P, J->in, J->in_zero, grp, k, J->j0, J->nc, J->ldb,
                J->cols + grp * J->gbytes + k * J->ldb * 4);
}

static void col_gemv_build_item(void* ctx, int64_t row, int participant) {
  const col_job* J = ctx;
  const int64_t grp = row / J->kd2;
  (void)participant;
  gemv_build(J->P, J->cols + grp * J->gbytes, J->ldb, J->nc, row % J->kd2,
             J->xp + grp * J->nc * J->kd2);
}

static void col_unit_item(void* ctx, int64_t u, int participant) {
  const col_job* J = ctx;
  const plan* P = J->P;
  const conv_geometry* g = P->g;
  const sdp_i8* ep = J->ep;
  int32_t* tile = J->tiles_buf[participant];
  const int64_t nc = J->nc, j0 = J->j0, tiles = J->tiles, npanels = J->npanels;
  const bsrc B = {J->cols, J->gbytes, J->off, nc, npanels, tiles};
  const int64_t mb = u % P->mblocks, tl = u / P->mblocks % tiles;
  const int64_t grp = u / (P->mblocks * tiles);
  const int64_t p0 = npanels * tl / tiles, p1 = npanels * (tl + 1) / tiles;
  if (J->gemv) {
    const int64_t blk = grp * P->mblocks + mb;
    int32_t corr[MR];
    for (int m = 0; m < MR; ++m)
      corr[m] = (int32_t)(0u - (uint32_t)(128 + J->in_zero) * (uint32_t)J->wsum[blk * MR + m]);
    gemv_table[nc](P->kd4, J->apack + blk * P->kd4 * MR * 4, J->xp + grp * nc * J->kd2, corr,
                   tile);
  } else {
    gemm_tile(P, &B, J->apack, J->wsum, J->in_zero, grp, mb, p0, p1, tile, NULL);
  }
  const int64_t n0 = p0 * NR, n1 = p1 * NR < nc ? p1 * NR : nc;
  const int64_t rows = P->mg - mb * MR < MR ? P->mg - mb * MR : MR;
  if (P->ohw == 1) { /* one output per image and channel: along the channels */
    const int64_t k0 = grp * P->mg + mb * MR;
    for (int64_t j = n0; j < n1; ++j)
      epilogue_column(ep, tile, TILE * NR, j - n0, rows, k0, (j0 + j) * g->k + k0, J->out);
    return;
  }
  for (int64_t m = 0; m < rows; ++m) {
    int32_t* row = tile + m * TILE * NR;
    const int64_t k = grp * P->mg + mb * MR + m;
    for (int64_t j = n0; j < n1;) {
      const int64_t col = j0 + j, b = col / P->ohw, pos = col % P->ohw;
      const int64_t len = P->ohw - pos < n1 - j ? P->ohw - pos : n1 - j;
      const int64_t at = (b * g->k + k) * P->ohw + pos;
      convert_at(ep, k, row + (j - n0), J->out, at, len);
      j += len;
    }
  }
}

static accel_status conv_im2col(const plan* P, int32_t in_zero, const int8_t* in,
                                const int8_t* apack, const int32_t* wsum, const int8_t* weights,
                                int8_t* out, const sdp_i8* ep, workspace* ws, int nth) {
  const conv_geometry* g = P->g;
  const int64_t total = (int64_t)g->n * P->ohw;
  /* columns per chunk: about 4 MB of them, whole panels */
  int64_t chunk = ((int64_t)4 << 20) / (g->groups * P->kd4 * 4) / NR * NR;
  if (chunk < NR) chunk = NR;
  if (chunk > total) chunk = total;
  const int64_t ldb = (chunk + 15) & ~(int64_t)15;
  const int64_t gbytes = P->kd4 * ldb * 4;
  const int64_t units_max =
      g->groups * (((chunk + NR - 1) / NR + TILE - 1) / TILE) * P->mblocks;
  if (nth > units_max) nth = (int)units_max;
  const int pack_now = apack == NULL;
  int8_t* pdata = NULL;
  int32_t* psum = NULL;
  if (pack_now && !reserve_packing(P, ws, &pdata, &psum, &apack, &wsum)) {
    return ACCEL_ERR_NO_MEMORY;
  }
  const size_t cols_bytes = (size_t)(g->groups * gbytes);
  uint8_t* cols = workspace_get(ws, WS_COPY, cols_bytes + COPY_SLACK);
  int64_t* off = workspace_get(ws, WS_OFF, (size_t)P->kd4 * sizeof(int64_t));
  if (cols == NULL || off == NULL) return ACCEL_ERR_NO_MEMORY;
  memset(cols + cols_bytes, (uint8_t)in_zero ^ 0x80, COPY_SLACK);
  for (int64_t k = 0; k < P->kd4; ++k) off[k] = k * ldb * 4;
  const size_t tile_bytes = (size_t)MR * TILE * NR * sizeof(int32_t);
  int32_t* tiles_buf[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    tiles_buf[t] = workspace_get(ws, t, tile_bytes);
    if (tiles_buf[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  const int64_t npack = pack_now ? g->groups * P->mblocks : 0;
  const int64_t nrows = g->groups * P->kd4;
  const int gemv = total <= GEMV_COLS;
  const int64_t kd2 = (P->kd4 + 1) / 2;
  __m512i* xp = NULL;
  if (gemv) {
    xp = workspace_get(ws, WS_XP, (size_t)(g->groups * total * kd2) * sizeof(__m512i));
    if (xp == NULL) return ACCEL_ERR_NO_MEMORY;
  }

  col_job J = {P, in_zero, in, weights, apack, wsum, pdata, psum, out, ep, tiles_buf, cols, off,
               xp, gbytes, ldb, 0, 0, 0, 0, total <= GEMV_COLS, kd2};
  if (npack > 0) pool_for(nth, npack, col_pack_item, &J);
  for (int64_t j0 = 0; j0 < total; j0 += chunk) { /* the columns are rebuilt for each chunk */
    J.j0 = j0;
    J.nc = total - j0 < chunk ? total - j0 : chunk;
    J.npanels = (J.nc + NR - 1) / NR;
    J.tiles = choose_tiles(J.npanels, P->mblocks, g->groups, nth);
    pool_for(nth, nrows, col_build_item, &J);
    if (J.gemv) pool_for(nth, g->groups * kd2, col_gemv_build_item, &J);
    pool_for(nth, g->groups * J.tiles * P->mblocks, col_unit_item, &J);
  }
  return ACCEL_OK;
}

/* ---- depthwise (one input channel per group): direct ---------------------------------------
 * The plane is copied as int16 (in - in_zero, padding 0) in the phase-split layout above, so
 * grid position n is sum over taps t of w[t] * copy[off[t] + n]: a 1-D correlation. vpdpwssd
 * multiplies int16 pairs and adds both products: two taps whose offsets differ by 1 (adjacent
 * columns of one phase: s and s + stride_w / dilation_w) share one instruction, with the weight
 * word (w_a, w_b); a lone tap has (w, 0). A 32-bit load at copy + off + n holds positions n and
 * n + 1, so even outputs come from loads at even distances and odd outputs from loads one
 * element further; they are interleaved at the end. 64 outputs per step. */
typedef struct dw_term {
  int64_t off;       /* copy offset of the first tap */
  int32_t ta, tb;    /* taps (r * kernel_w + s); tb < 0: a lone tap */
} dw_term;

/* The terms: taps paired with the tap one column (of their phase) to the right. */
static int64_t dw_terms(const plan* P, const imp_plan* Q, dw_term* terms) {
  const conv_geometry* g = P->g;
  const int64_t sh = g->stride_h, sw = g->stride_w, S = g->kernel_w;
  const int64_t step = sw % g->dilation_w == 0 ? sw / g->dilation_w : 0; /* s -> s + step */
  int64_t n = 0;
  for (int64_t r = 0; r < g->kernel_h; ++r) {
    const int64_t ry = r * g->dilation_h;
    for (int64_t s = 0; s < S; ++s) {
      /* s was taken as the partner of s - step when (s - step) sits first in its pair */
      if (step > 0 && s >= step && (s / step) % 2 == 1) continue;
      const int64_t sx = s * g->dilation_w;
      const int64_t ph = (ry % sh) * sw + sx % sw;
      dw_term t;
      t.off = ph * Q->plane + (ry / sh) * Q->wq + sx / sw;
      t.ta = (int32_t)(r * S + s);
      t.tb = step > 0 && s + step < S ? (int32_t)(r * S + s + step) : -1;
      terms[n++] = t;
    }
  }
  return n;
}

/* The int16 copy of plane `src`, phase by phase. */
static void dw_build(const plan* P, const imp_plan* Q, const int8_t* src, int32_t in_zero,
                     int16_t* copy) {
  const conv_geometry* g = P->g;
  const int64_t sw = g->stride_w, W = g->w, wq = Q->wq;
  const __m512i zv = _mm512_set1_epi16((int16_t)in_zero);
  for (int64_t ph = 0; ph < Q->nph; ++ph) {
    const int64_t py = ph / sw, px = ph % sw, x0 = px - g->pad_left;
    int64_t lo = x0 >= 0 ? 0 : (-x0 + sw - 1) / sw;
    int64_t hi = x0 > W - 1 ? 0 : (W - 1 - x0) / sw + 1;
    if (hi > wq) hi = wq;
    if (lo > hi) lo = hi;
    for (int64_t yq = 0; yq < Q->hq; ++yq) {
      int16_t* d = copy + ph * Q->plane + yq * wq;
      const int64_t iy = yq * g->stride_h + py - g->pad_top;
      if (iy < 0 || iy >= g->h) {
        memset(d, 0, (size_t)wq * sizeof(int16_t));
        continue;
      }
      const int8_t* row = src + iy * W + x0;
      for (int64_t xq = 0; xq < lo; ++xq) d[xq] = 0;
      /* whole vectors, zero past hi: they run into the next row (built after this one) or
       * the zeroed slack (which only garbage columns read), never into a row built before */
      if (sw == 1) {
        for (int64_t xq = lo; xq < hi; xq += 32) {
          const int64_t n = hi - xq < 32 ? hi - xq : 32;
          const __mmask32 m = n == 32 ? ~(__mmask32)0 : (((__mmask32)1 << n) - 1);
          const __m512i v = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(m, row + xq));
          _mm512_storeu_si512(d + xq, _mm512_maskz_sub_epi16(m, v, zv));
        }
      } else if (sw == 2) {
        for (int64_t xq = lo; xq < hi; xq += 32) { /* the even bytes of 63 */
          const int64_t n = hi - xq < 32 ? hi - xq : 32;
          const __mmask64 m2 = ((__mmask64)1 << (2 * n - 1)) - 1;
          const __m512i b = _mm512_maskz_loadu_epi8(m2, row + 2 * xq);
          const __m512i v = _mm512_srai_epi16(_mm512_slli_epi16(b, 8), 8);
          const __mmask32 m = n == 32 ? ~(__mmask32)0 : (((__mmask32)1 << n) - 1);
          _mm512_storeu_si512(d + xq, _mm512_maskz_sub_epi16(m, v, zv));
        }
      } else {
        for (int64_t xq = lo; xq < hi; ++xq) d[xq] = (int16_t)(row[xq * sw] - in_zero);
      }
      for (int64_t xq = hi; xq < wq; ++xq) d[xq] = 0;
    }
  }
}

/* grid[n] for n < ngrid (rounded up to 64) = sum of the terms. */
static void dw_grid(const int16_t* copy, const dw_term* terms, const int32_t* words,
                    int64_t nterms, int64_t ngrid, int32_t* grid) {
  const __m512i lo_idx = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i hi_idx =
      _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  for (int64_t n = 0; n < ngrid; n += 64) {
    __m512i e0 = _mm512_setzero_si512(), o0 = e0, e1 = e0, o1 = e0;
    for (int64_t t = 0; t < nterms; ++t) {
      const __m512i wv = _mm512_set1_epi32(words[t]);
      const int16_t* b = copy + terms[t].off + n;
      e0 = _mm512_dpwssd_epi32(e0, _mm512_loadu_si512(b), wv);
      o0 = _mm512_dpwssd_epi32(o0, _mm512_loadu_si512(b + 1), wv);
      e1 = _mm512_dpwssd_epi32(e1, _mm512_loadu_si512(b + 32), wv);
      o1 = _mm512_dpwssd_epi32(o1, _mm512_loadu_si512(b + 33), wv);
    }
    _mm512_store_si512(grid + n, _mm512_permutex2var_epi32(e0, lo_idx, o0));
    _mm512_store_si512(grid + n + 16, _mm512_permutex2var_epi32(e0, hi_idx, o0));
    _mm512_store_si512(grid + n + 32, _mm512_permutex2var_epi32(e1, lo_idx, o1));
    _mm512_store_si512(grid + n + 48, _mm512_permutex2var_epi32(e1, hi_idx, o1));
  }
}

/* The depthwise loop (pool_for items): planes [item * chunk, ...) of the input. */
typedef struct dw_job {
  const plan* P;
  const imp_plan* Q;
  int32_t in_zero;
  const int8_t* in;
  const int8_t* w;
  int8_t* out;
  const sdp_i8* ep;
  char* const* bufs; /* per participant: the int16 copy, the grid, the weight words */
  const dw_term* terms;
  int64_t nterms, ngrid, planes, chunk;
  size_t copy_bytes, grid_bytes;
} dw_job;

static void dw_item(void* ctx, int64_t item, int participant) {
  const dw_job* J = ctx;
  const plan* P = J->P;
  const imp_plan* Q = J->Q;
  const conv_geometry* g = P->g;
  const sdp_i8* ep = J->ep;
  char* buf = J->bufs[participant];
  int16_t* copy = (int16_t*)buf;
  int32_t* grid = (int32_t*)(buf + J->copy_bytes);
  int32_t* words = (int32_t*)(buf + J->copy_bytes + J->grid_bytes);
  const int64_t taps = P->rs, p1 = (item + 1) * J->chunk;
  for (int64_t pl = item * J->chunk; pl < p1 && pl < J->planes; ++pl) {
    const int64_t b = pl / g->c, c = pl % g->c;
    dw_build(P, Q, J->in + pl * P->hw, J->in_zero, copy);
    for (int64_t j = 0; j < P->mg; ++j) {
      const int64_t k = c * P->mg + j;
      const int8_t* wk = J->w + k * taps;
      for (int64_t t = 0; t < J->nterms; ++t) {
        const uint32_t wa = (uint16_t)(int16_t)wk[J->terms[t].ta];
        const uint32_t wb = J->terms[t].tb >= 0 ? (uint16_t)(int16_t)wk[J->terms[t].tb] : 0u;
        words[t] = (int32_t)(wa | wb << 16);
      }
      dw_grid(copy, J->terms, words, J->nterms, J->ngrid, grid);
      if (Q->wq != g->out_w)
        for (int64_t y = 1; y < g->out_h; ++y)
          move_down(grid + y * Q->wq, grid + y * g->out_w, g->out_w);
      const int64_t at = (b * g->k + k) * P->ohw;
      convert_at(ep, k, grid, J->out, at, P->ohw);
    }
  }
}

static accel_status conv_dw(const plan* P, int32_t in_zero, const int8_t* in, const int8_t* w,
                            int8_t* out, const sdp_i8* ep, workspace* ws, int nth) {
  const conv_geometry* g = P->g;
  imp_plan Q;
  imp_make_plan(P, &Q);
  const int64_t planes = (int64_t)g->n * g->c, taps = P->rs;
  if (nth > planes) nth = (int)planes;
  const int64_t ngrid = (int64_t)g->out_h * Q.wq, ngrid_r = (ngrid + 63) & ~(int64_t)63;
  /* reads reach off + n + 64 for n < ngrid_r: past the planes by the largest column shift and
   * 64 + 63 more */
  const int64_t copy_n = Q.nph * Q.plane + (Q.wq - g->out_w) + 128;
  /* the build's whole-vector stores reach 31 elements past a row: within that slack */
  const size_t copy_bytes = round64((size_t)copy_n * sizeof(int16_t));
  const size_t grid_bytes = round64((size_t)ngrid_r * sizeof(int32_t));
  const size_t words_bytes = round64((size_t)taps * sizeof(int32_t));
  dw_term* terms = workspace_get(ws, WS_OFF, (size_t)taps * sizeof(dw_term));
  if (terms == NULL) return ACCEL_ERR_NO_MEMORY;
  const int64_t nterms = dw_terms(P, &Q, terms);
  char* bufs[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    bufs[t] = workspace_get(ws, t, copy_bytes + grid_bytes + words_bytes);
    if (bufs[t] == NULL) return ACCEL_ERR_NO_MEMORY;
    int16_t* copy = (int16_t*)bufs[t];
    memset(copy + Q.nph * Q.plane, 0, (size_t)(copy_n - Q.nph * Q.plane) * sizeof(int16_t));
  }
  int64_t chunk = 8192 / (P->ohw * P->mg + 1);
  if (chunk > planes / (4 * nth)) chunk = planes / (4 * nth);
  if (chunk < 1) chunk = 1;
  const dw_job J = {P, &Q, in_zero, in, w, out, ep, bufs, terms, nterms, ngrid, planes, chunk,
                    copy_bytes, grid_bytes};
  pool_for(nth, (planes + chunk - 1) / chunk, dw_item, (void*)&J);
  return ACCEL_OK;
}
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
static uint32_t dw_weight_words(const dwr_plan* D, const conv_geometry* g, const int8_t* wk,
                                __m512i* wv) {
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
  dwr_args A = {rows, rmask, D->idx, wv,
                _mm512_set1_epi32((int32_t)(0u - (uint32_t)(128 + in_zero) * sum)),
                _mm512_set1_epi8((char)in_zero), kh, g->stride_h, g->dilation_h, nq, ow, 0, W, sw,
                g->pad_left};
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
  const dws_key key = {g->h, g->w, g->out_h, g->out_w, g->kernel_h, g->kernel_w, g->stride_h,
                       g->stride_w, g->dilation_h, g->dilation_w, g->pad_top, g->pad_left, nq};
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
 * with a converter (cvt not NULL) as codes into y, 64 per step, straight from the registers. */
static void dws_plane(const conv_geometry* g, const dwr_plan* D, const dws_entry* tab,
                      const int8_t* src, int32_t in_zero, const int8_t* wk, int32_t* grid,
                      const sdp_i8_lane_cvt* cvt, int8_t lo, int8_t hi, int8_t* y) {
  const int64_t kh = g->kernel_h, nq = D->nq, ohw = (int64_t)g->out_h * g->out_w;
  __m512i wv[ACCEL_MAX_CONV_KERNEL * DWR_WORDS];
  const uint32_t sum = dw_weight_words(D, g, wk, wv);
  const __m512i init = _mm512_set1_epi32((int32_t)(0u - (uint32_t)(128 + in_zero) * sum));
  const __m512i padu = _mm512_set1_epi8((char)(in_zero ^ 0x80));
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
        dws_plane(g, D, J->small, src, J->in_zero, J->w + k * P->rs, grid, cvt, J->lo, J->hi,
                  J->out + at);
        if (cvt == NULL)
          convert_at(ep, k, grid, J->out, at, P->ohw);
        continue;
      }
      for (int64_t oy0 = 0; oy0 < g->out_h; oy0 += D->band) {
        const int64_t oy1 = oy0 + D->band < g->out_h ? oy0 + D->band : g->out_h;
        dwr_band(P, D, src, J->in_zero, J->w + k * P->rs, oy0, oy1, grid);
        const int64_t at = (b * g->k + k) * P->ohw + oy0 * ow;
        if (cvt != NULL)
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
  dwr_job J = {P, D, in_zero, in, w, out, ep, grids, planes, chunk, small, NULL, 0, 0};
  sdp_i8_lane_cvt* cvt = workspace_get(ws, WS_CVT, (size_t)g->k * sizeof(sdp_i8_lane_cvt));
  if (cvt == NULL) return ACCEL_ERR_NO_MEMORY;
  if (sdp_i8_lanes_prepare(ep, 0, g->k, P->kd * 255 * 128, cvt, &J.lo, &J.hi)) J.cvt = cvt;
  pool_for(nth, (planes + chunk - 1) / chunk, dwr_item, (void*)&J);
  return ACCEL_OK;
}
#endif /* __AVX512VBMI__ */

/* Whether explicit columns pay: positions of several images share panels (fully connected),
 * or most of the implicit grid would be garbage (large dilation on small outputs). */
static int im2col_pays(const plan* P, const imp_plan* Q) {
  const conv_geometry* g = P->g;
  return (g->n > 1 && P->ohw < NR) || Q->ncols > 2 * P->ohw + NR ||
         (int64_t)g->n * P->ohw <= GEMV_COLS;
}

#ifdef CONV_I8_AMX
/* ---- AMX: the implicit GEMM on tiles -------------------------------------------------------
 * TDPBSUD: C[16 channels][16 positions] (int32) += A[16 channels][16 depth steps x 4 bytes]
 * (s8 weights, LAYOUT_AMX) . B[16 depth steps][16 positions x 4 bytes] (u8: the implicit
 * GEMM's copy as it lies). Depth tile d = (chunk j, tap t) is kc consecutive 4-channel blocks
 * of the copy at tap t: B's rows are the copy at offset off(first_j, t) + 4 n, nph * plane * 4
 * bytes apart, 64 bytes (16 positions) each. The accumulators start at the offset correction
 * (the implicit GEMM's), so the sums are exactly its sums. Micro-tile 32 channels x 32
 * positions: C tiles 0-3, A tiles 4-5, B tiles 6-7 (rows and bytes set by the job's
 * configuration: A kc * 4 bytes a row, B kc rows). Unit = (group, run of at most AMX_NT
 * 16-position tiles, block of AMB channels): its tiles into the participant's [AMB][AMX_LDC]
 * sums, then the implicit GEMM's epilogue (tile_codes). Each item loads the configuration on
 * the thread that runs it (the tile state is per thread) and releases the tiles at its end. */
enum { AMX_NT = 16, AMX_LDC = AMX_NT * 16 };

typedef struct __attribute__((aligned(64))) amx_cfg {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} amx_cfg;

typedef struct amx_job {
  amx_cfg cfg;
  const imp_job* J;
  const int64_t* boff; /* depth tile d's B offset in its group's copy */
  int64_t bstride;     /* bytes between B's rows (consecutive 4-channel blocks) */
  int64_t ntt, tiles;  /* 16-position tiles of the grid; runs of them (units per block) */
} amx_job;

/* One depth tile into the C tiles: B's tiles from bd, A's from ad (NULL: loaded already). */
static inline __attribute__((always_inline)) void amx_step(const int nm, const int nn,
                                                           const int8_t* ad, const uint8_t* bd,
                                                           int64_t bstride) {
  if (ad != NULL) _tile_loadd(4, ad, 64);
  _tile_loadd(6, bd, bstride);
  _tile_dpbsud(0, 4, 6);
  if (nn > 1) {
    _tile_loadd(7, bd + 64, bstride);
    _tile_dpbsud(1, 4, 7);
  }
  if (nm > 1) {
    if (ad != NULL) _tile_loadd(5, ad + 1024, 64);
    _tile_dpbsud(2, 5, 6);
    if (nn > 1) _tile_dpbsud(3, 5, 7);
  }
}

static inline __attribute__((always_inline)) void amx_block(const int nm, const int nn,
                                                            int64_t nk, const int8_t* a,
                                                            const uint8_t* b,
                                                            const int64_t* boff,
                                                            int64_t bstride,
                                                            const int32_t* corr, int32_t* c) {
  /* corr NULL: the sums start at 0 (the codes add the correction); a NULL: one depth tile,
   * whose A tiles are loaded already */
  if (corr != NULL) {
    _tile_loadd(0, corr, 64);
    if (nn > 1) _tile_loadd(1, corr, 64);
    if (nm > 1) _tile_loadd(2, corr + 256, 64);
    if (nm > 1 && nn > 1) _tile_loadd(3, corr + 256, 64);
  } else {
    _tile_zero(0);
    if (nn > 1) _tile_zero(1);
    if (nm > 1) _tile_zero(2);
    if (nm > 1 && nn > 1) _tile_zero(3);
  }
  if (a == NULL) {
    amx_step(nm, nn, NULL, b + boff[0], bstride);
  } else {
    for (int64_t d = 0; d < nk; ++d) amx_step(nm, nn, a + d * 2048, b + boff[d], bstride);
  }
  _tile_stored(0, c, AMX_LDC * 4);
  if (nn > 1) _tile_stored(1, c + 16, AMX_LDC * 4);
  if (nm > 1) _tile_stored(2, c + 16 * AMX_LDC, AMX_LDC * 4);
  if (nm > 1 && nn > 1) _tile_stored(3, c + 16 * AMX_LDC + 16, AMX_LDC * 4);
}

typedef void (*amx_fn)(int64_t, const int8_t*, const uint8_t*, const int64_t*, int64_t,
                       const int32_t*, int32_t*);
#define AMXK(NM_, NN_)                                                                      \
  static void amx_block_##NM_##_##NN_(int64_t nk, const int8_t* a, const uint8_t* b,       \
                                      const int64_t* boff, int64_t bs, const int32_t* corr, \
                                      int32_t* c) {                                         \
    amx_block(NM_, NN_, nk, a, b, boff, bs, corr, c);                                       \
  }
AMXK(1, 1)
AMXK(1, 2)
AMXK(2, 1)
AMXK(2, 2)
#undef AMXK
static const amx_fn amx_table[2][2] = {{amx_block_1_1, amx_block_1_2},
                                       {amx_block_2_1, amx_block_2_2}};

static void amx_pack_item(void* ctx, int64_t blk, int participant) {
  const imp_job* J = ctx;
  (void)participant;
  pack_amx_block(J->P, J->weights, blk / J->P->ablocks, blk % J->P->ablocks, J->pdata, J->psum);
}

static void amx_unit_item(void* ctx, int64_t u, int participant) {
  const amx_job* X = ctx;
  const imp_job* J = X->J;
  const plan* P = J->P;
  const int64_t ab = u % P->ablocks, tl = u / P->ablocks % X->tiles;
  const int64_t grp = u / (P->ablocks * X->tiles);
  const int64_t t0 = X->ntt * tl / X->tiles, t1 = X->ntt * (tl + 1) / X->tiles;
  const int64_t rows = P->mg - ab * AMB < AMB ? P->mg - ab * AMB : AMB;
  const int nm = rows > 16 ? 2 : 1;
  const int64_t blk = grp * P->ablocks + ab;
  int32_t corr[AMB * 16] __attribute__((aligned(64)));
  for (int64_t m = 0; m < nm * 16; ++m) {
    const uint32_t sum = (uint32_t)J->wsum[blk * AMB + m];
    const int32_t v = (int32_t)(0u - (uint32_t)(128 + J->in_zero) * sum);
    for (int n = 0; n < 16; ++n) corr[m * 16 + n] = v;
  }
  int32_t* tile = (int32_t*)J->scratch[participant];
  const int8_t* a = J->apack + blk * P->nk * 2048;
  const uint8_t* base = J->B->base + grp * J->Q->gbytes;
  const int64_t k0 = grp * P->mg + ab * AMB, ncols = J->Q->ncols;
  /* grid column n is output position n (no dropped columns) and the converters are in lanes:
   * the codes of every two micro-tiles (64 positions) straight after them, while their sums
   * are in L1 */
  const int direct = J->cvt != NULL && J->Q->wq == P->g->out_w;
  panel_codes E;
  int32_t crow[AMB];
  if (direct) {
    const int64_t at = (J->b * P->g->k + k0) * P->ohw;
    for (int64_t m = 0; m < nm * 16; ++m) crow[m] = corr[m * 16];
    E = (panel_codes){J->cvt + k0, J->out + at, P->ohw, rows, 0, J->lo, J->hi,
                      rows_form(J->cvt + k0, rows, J->add != NULL), J->add,
                      J->add != NULL ? J->ep->ew_operand + at : NULL, 0, crow};
  }
  _tile_loadconfig(&X->cfg);
  /* one depth tile (a 1x1 layer of at most 16 channel blocks): its A tiles once */
  const int keep_a = P->nk == 1;
  if (keep_a) {
    _tile_loadd(4, a, 64);
    if (nm > 1) _tile_loadd(5, a + 1024, 64);
  }
  int64_t done = t0; /* direct: the codes of tiles [t0, done) are made */
  for (int64_t t = t0; t < t1; t += 2) {
    const int nn = t + 1 < t1 ? 2 : 1;
    amx_table[nm - 1][nn - 1](P->nk, keep_a ? NULL : a, base + 64 * t, X->boff,
                              X->bstride, direct ? NULL : corr, tile + (t - t0) * 16);
    if (direct && (t + nn - done == 4 || t + nn == t1)) {
      /* 64 positions at a time: one step of the lanes' converter, no lane wasted */
      panel_codes e = E;
      e.out += done * 16;
      if (e.add != NULL) e.opnd += done * 16;
      e.cols = (t + nn) * 16 < ncols ? (t + nn - done) * 16 : ncols - done * 16;
      codes_body(&e, tile + (done - t0) * 16, AMX_LDC, 1);
      done = t + nn;
    }
  }
  _tile_release();
  if (direct) return;
  tile_codes(J, tile, AMX_LDC, t0 * 16, t1 * 16 < ncols ? t1 * 16 : ncols, rows, k0);
}

static accel_status conv_amx(const plan* P, int32_t in_zero, const int8_t* in,
                             const int8_t* apack, const int32_t* wsum, const int8_t* weights,
                             int8_t* out, const sdp_i8* ep, workspace* ws, int nth) {
  const conv_geometry* g = P->g;
  imp_plan Q;
  imp_make_plan(P, &Q);
  imp_used_phases(P, &Q);
  const int64_t ntt = (Q.ncols + 15) / 16;
  int64_t tiles = (ntt + AMX_NT - 1) / AMX_NT;
  while (nth > 1 && tiles < ntt && g->groups * tiles * P->ablocks < 4 * nth) ++tiles;
  const int64_t units = g->groups * tiles * P->ablocks;
  if (nth > units) nth = (int)units;
  const int64_t nbuild = g->groups * P->c4 * Q.nph * Q.hq;
  const int pack_now = apack == NULL;
  int8_t* pdata = NULL;
  int32_t* psum = NULL;
  if (pack_now) {
    const size_t db = amx_data_bytes(P);
    char* p = workspace_get(ws, WS_PACK, db + amx_wsum_bytes(P));
    if (p == NULL) return ACCEL_ERR_NO_MEMORY;
    apack = pdata = (int8_t*)p;
    wsum = psum = (int32_t*)(p + db);
  }
  uint8_t* copy;
  int64_t* off;
  if (!imp_reserve_copy(P, &Q, in_zero, ws, &copy, &off)) return ACCEL_ERR_NO_MEMORY;
  int64_t* boff = workspace_get(ws, WS_BOFF, (size_t)P->nk * sizeof(int64_t));
  if (boff == NULL) return ACCEL_ERR_NO_MEMORY;
  for (int64_t j = 0; j < P->nch; ++j) {
    const int64_t first = AKT * j < P->c4 - P->kc ? AKT * j : P->c4 - P->kc;
    for (int64_t t = 0; t < P->rs; ++t) boff[j * P->rs + t] = off[first * P->rs + t];
  }
  const int64_t ldt = (Q.wq + 16 + 63) & ~(int64_t)63;
  const size_t tile_bytes = (size_t)AMB * AMX_LDC * sizeof(int32_t);
  char* scratch[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    scratch[t] = workspace_get(ws, t, tile_bytes + (size_t)(4 * ldt));
    if (scratch[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  const bsrc B = {copy, Q.gbytes, off, Q.ncols, 0, 0};
  int64_t rows_per_item = 4096 / (Q.wq * 4) + 1;
  if (rows_per_item * 4 * nth > nbuild) rows_per_item = nbuild / (4 * nth) + 1;
  imp_job J = {P, &Q, &B, in_zero, in, weights, apack, wsum, pdata, psum, out, ep, scratch,
               tile_bytes, ldt, rows_per_item, nbuild, 0, 0, 0, NULL, 0, 0, NULL, {0}};
  if (!imp_prepare_lanes(P, ep, ws, &J)) return ACCEL_ERR_NO_MEMORY;
  int64_t nbuild_items = (nbuild + rows_per_item - 1) / rows_per_item;
  if (imp_flat(g)) {
    J.flat_segs = (P->hw + FLAT_SEG - 1) / FLAT_SEG;
    nbuild_items = g->groups * P->c4 * J.flat_segs;
  }
  amx_job X;
  memset(&X, 0, sizeof X);
  X.cfg.palette = 1;
  for (int i = 0; i < 4; ++i) {
    X.cfg.colsb[i] = 64;
    X.cfg.rows[i] = 16;
  }
  for (int i = 4; i < 6; ++i) {
    X.cfg.colsb[i] = (uint16_t)(P->kc * 4);
    X.cfg.rows[i] = 16;
  }
  for (int i = 6; i < 8; ++i) {
    X.cfg.colsb[i] = 64;
    X.cfg.rows[i] = (uint8_t)P->kc;
  }
  X.J = &J;
  X.boff = boff;
  X.bstride = Q.nph * Q.plane * 4;
  X.ntt = ntt;
  X.tiles = tiles;
  if (pack_now) pool_for(nth, g->groups * P->ablocks, amx_pack_item, &J);
  for (int64_t b = 0; b < g->n; ++b) { /* the copy is rebuilt for each image */
    J.b = b;
    pool_for(nth, nbuild_items, imp_build_item, &J);
    pool_for(nth, units, amx_unit_item, &X);
  }
  return ACCEL_OK;
}
#endif /* CONV_I8_AMX */
#endif /* CONV_I8_VNNI */

accel_status conv_i8(const conv_geometry* g, int32_t in_zero, const int8_t* in,
                     const int8_t* weights, const void* packed, int8_t* out,
                     const sdp_i8* epilogue, workspace* ws, int32_t num_threads) {
  plan P;
  make_plan(g, &P);
  int nth = num_threads < 1 ? 1 : num_threads > WS_THREAD_SLOTS ? WS_THREAD_SLOTS : num_threads;
  const int8_t* raw = weights;
  const int8_t* apack = NULL; /* packed weights in LAYOUT_VNNI, */
  const int32_t* wsum = NULL;
  const int8_t* xpack = NULL; /* in LAYOUT_AMX */
  const int32_t* xsum = NULL;
  if (packed != NULL) {
    pack_header h;
    memcpy(&h, packed, sizeof h);
    const int8_t* data = (const int8_t*)packed + HEADER;
    if (h.layout == LAYOUT_PLAIN) {
      raw = data;
    } else {
      apack = data;
      wsum = (const int32_t*)(const void*)(data + h.data_bytes);
      if (h.layout == LAYOUT_AMX) {
        xpack = (const int8_t*)wsum + wsum_bytes(&P, LAYOUT_VNNI);
        xsum = (const int32_t*)(const void*)(xpack + amx_data_bytes(&P));
      }
    }
  }
#ifdef CONV_I8_TEST_PATHS /* tests only: CONV_I8_PATH=p|i|c|d forces a path where it applies */
  const char* fp = getenv("CONV_I8_PATH");
  const char force = fp != NULL ? fp[0] : 0;
#else
  const char force = 0;
#endif
#ifdef CONV_I8_VNNI
  if (force != 'p') {
    if (P.cg == 1) {
#ifdef __AVX512VBMI__
      dwr_plan D;
      if (force != 'd' && dwr_make_plan(g, &D))
        return conv_dw_rows(&P, &D, in_zero, in, raw, out, epilogue, ws, nth);
#endif
      return conv_dw(&P, in_zero, in, raw, out, epilogue, ws, nth);
    }
    imp_plan Q;
    imp_make_plan(&P, &Q);
    const int im2col = im2col_pays(&P, &Q);
    if (force == 'c' || (force != 'i' && im2col))
      return conv_im2col(&P, in_zero, in, apack, wsum, weights, out, epilogue, ws, nth);
#ifdef __AVX512VBMI__
    stem_plan T;
    if (force != 'i' && stem_make_plan(&P, &T))
      return conv_stem(&P, &T, in_zero, in, weights, out, epilogue, ws, nth);
#endif
#ifdef CONV_I8_AMX
    /* the tiles: AMX on and a layer its layout is packed for (amx_packed), explicit columns
     * ruled out above (the RGB stem's kernel has C <= 3: never one) */
    if (force != 'i' && amx_packed(&P) && conv_i8_amx(-1))
      return conv_amx(&P, in_zero, in, xpack, xsum, weights, out, epilogue, ws, nth);
#endif
    if (force != 'i' && small_grid_pays(&P, &Q))
      return conv_small(&P, in_zero, in, apack, wsum, weights, out, epilogue, ws, nth);
    return conv_implicit(&P, in_zero, in, apack, wsum, weights, out, epilogue, ws, nth);
  }
#endif
  (void)force;
  (void)apack;
  (void)wsum;
  (void)xpack;
  (void)xsum;
  return conv_portable(&P, in_zero, in, raw, out, epilogue, ws, nth);
}
