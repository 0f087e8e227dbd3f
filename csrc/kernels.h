/*
 * kernels.h - the engines' arithmetic (internal to the library).
 *
 * The runtime validates descriptors and resolves them into the plain structs below; kernels
 * trust their arguments. Every kernel writes only into the buffers it is given and into the
 * workspace, which a device owns and reuses from run to run (fresh pages cost as much as a
 * small convolution on this class of machine).
 */
#ifndef ACCEL_KERNELS_H_
#define ACCEL_KERNELS_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "accel/accel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Record a failure for accel_last_error() and return `status` (runtime/src/errors.c; the
 * kernels' public entry points, such as accel_lut_info, report bad arguments with it). */
accel_status accel_fail(accel_status status, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A convolution's resolved geometry. */
typedef struct conv_geometry {
  int32_t n, c, h, w;                 /* input */
  int32_t k, out_h, out_w;            /* output */
  int32_t kernel_h, kernel_w;
  int32_t stride_h, stride_w;
  int32_t pad_top, pad_left;          /* bottom/right padding is implied by out_h/out_w */
  int32_t dilation_h, dilation_w;
  int32_t groups;
  int32_t pixel_bytes, pixel_channels; /* image input: a pixel's bytes and channels (0: feature) */
  int32_t multi_batch;                /* multi-batch mode (weights fetched once per batch) */
} conv_geometry;

/* A LUT activation's tables (accel_lut in accel.h), built once per process. */
typedef struct lut_table {
  float lo_start, lo_scale, lo_end;   /* scale = 1 / step */
  float le_start, le_scale, le_end;
  float underflow_slope, overflow_slope;
  float lo[ACCEL_LUT_LO_ENTRIES];     /* halves, widened */
  float le[ACCEL_LUT_LE_ENTRIES];
  /* each interval's two ends side by side (lo[i], lo[i + 1]): one 64-bit gather of an
   * interval where two 32-bit ones read its ends (lut_apply's lanes) */
  float lo_ends[2 * (ACCEL_LUT_LO_ENTRIES - 1)];
  float le_ends[2 * (ACCEL_LUT_LE_ENTRIES - 1)];
} lut_table;

/* An activation's name in reports and messages ("sigmoid"; "" for NONE), and whether it is a
 * lookup-table one (needs ACCEL_FEATURE_LUT, runs on the Y unit, no INT8 form). */
const char* activation_name(accel_activation act);
int lut_activation(accel_activation act);
/* The tables of a LUT activation (NULL for others); thread-safe, built on the first call. */
const lut_table* lut_get(accel_activation act);
/* x = LUT(x) in place: the FP16 SDP's evaluation. */
void lut_apply(const lut_table* lut, float* x, int64_t count);
/* GELU's tanh form in double (lut_tables.c): its table entries and its FP32 form. */
double gelu_tanh64(double t);
/* softplus in double (lut_tables.c): its table entries and, rounded once, its FP32 form. */
double softplus64(double t);
/* x = act(x) in place, exactly (FP32's LUT activations, with libm). */
void activation_exact(accel_activation act, float* x, int64_t count);
/* dst = act(in + value), the add rounded first (softmax's exp(s - max)): the bits of the add's
 * pass then activation_exact, in one pass where the build has one (exp: AVX-512, AVX2 + FMA). */
void activation_exact_shifted(accel_activation act, const float* in, float value, float* dst,
                              int64_t count);
/* x = act(x * s + b) in place (s, b: one channel's, either NULL for none) in one pass, the
 * same bits as the scale / shift pass then activation_exact; returns 0 (nothing done) where
 * the build has no such pass for act (hardswish, hardsigmoid and GELU have one on every
 * build, sigmoid and silu on AVX-512 and AVX2 builds). */
int activation_affine(accel_activation act, float* x, int64_t count, const float* s,
                      const float* b);
/* The same on `positions` positions of 16 channels side by side ([positions][16], lane l
 * channel l; s, b: 16 per-lane values, either NULL for none); the same bits per value. Returns
 * 0 (nothing done) for an act other than sigmoid, silu, hardsigmoid and hardswish, and on
 * builds without AVX-512. */
int activation_affine_c16(accel_activation act, float* x, int64_t positions, const float* s,
                          const float* b);

/* An SDP op with fp32 operands (see accel_sdp_desc for the semantics). */
typedef struct sdp_f32 {
  const float* scale;                 /* [C] or NULL */
  const float* shift;                 /* [C] or NULL */
  accel_eltwise ew_op;
  const float* ew_operand;            /* whole NCHW tensor, or NULL with ACCEL_EW_NONE */
  int32_t ew_per_channel;             /* 1: ew_operand is [N][C] (independent runs only) */
  accel_activation act;
  float clip_min, clip_max;
  const float* prelu_slope;           /* [C] or NULL */
  const lut_table* lut;               /* FP16 LUT activation: its tables; NULL computes it
                                       * exactly (FP32) */
  /* The X units' operands (accel_sdp_x), x[0] = X1, x[1] = X2: [C] or whole NCHW tensors;
   * any set makes the op a plain one (sdp_f32_one_pass 0), run by sdp_f32_run only. */
  struct {
    const float* alu;
    const float* mul;
    int32_t alu_per_channel, mul_per_channel;
  } x[2];
} sdp_f32;

/* 1 when an SDP reads X unit operands (accel_sdp_x): X1's or X2's ALU or multiplier operand
 * is set (their per-channel flags alone are not operands). The one test, on a descriptor
 * (sdp_desc_has_x: the runtime's checks and dispatch, the cost model's op name) and on the
 * kernels' operands (sdp_f32_has_x). */
#define SDP_HAS_X(x1, x2) \
  ((x1).alu != NULL || (x1).mul != NULL || (x2).alu != NULL || (x2).mul != NULL)
static inline int sdp_desc_has_x(const accel_sdp_desc* d) { return SDP_HAS_X(d->x1, d->x2); }
static inline int sdp_f32_has_x(const sdp_f32* p) { return SDP_HAS_X(p->x[0], p->x[1]); }

/* A pooling op's resolved geometry. */
typedef struct pdp_geometry {
  int32_t n, c, h, w;                 /* input */
  int32_t out_h, out_w;
  int32_t kernel_h, kernel_w, stride_h, stride_w, pad_top, pad_left;
  accel_pool pool;
  int32_t count_include_pad;
} pdp_geometry;

/* A local response normalisation (accel_cdp_desc), resolved. */
typedef struct cdp_geometry {
  int32_t n, c, h, w;
  int32_t local_size;
  double alpha, beta, k;
} cdp_geometry;

/* The image part of a pooling window along one axis: the window starts at `first` (output
 * index * stride - padding) and covers taps [lo, hi) inside the image of `size` elements. */
static inline void pool_window(int32_t out_index, int32_t stride, int32_t pad, int32_t kernel,
                               int32_t size, int32_t* first, int32_t* lo, int32_t* hi) {
  *first = out_index * stride - pad;
  *lo = *first < 0 ? -*first : 0;
  *hi = *first + kernel > size ? size - *first : kernel;
}

/* Scratch memory, one slot per thread plus shared slots, grown on demand and kept. */
enum { WORKSPACE_SLOTS = 64 };
typedef struct workspace {
  void* ptr[WORKSPACE_SLOTS];
  size_t bytes[WORKSPACE_SLOTS];
} workspace;

/* Slot `slot` with at least `bytes` bytes (64-byte aligned), or NULL when out of memory.
 * Not thread-safe: reserve every slot a kernel needs before its parallel region. */
void* workspace_get(workspace* ws, int slot, size_t bytes);
void workspace_free(workspace* ws);

/* The first slots belong to the threads of a parallel region; shared buffers come after.
 * Some slots keep data from run to run (the INT8 depthwise tables): no two kernels may
 * share a slot number. The INT8 CONV's are WS_CONV_I8_FIRST and up (conv/i8.h's enum). */
enum { WS_THREAD_SLOTS = 32, WS_CHAIN_A = 32, WS_CHAIN_B = 33,
       WS_FP16_WIDE = 34, /* an FP16 run's operands widened to fp32 */
       WS_WINOGRAD_WEIGHTS = 35, /* winograd.c's */
       WS_C16_WEIGHTS = 36,      /* conv_c16.c's and dw_c16.c's weights, packed per run */
       WS_LAYOUT_IN = 37, WS_LAYOUT_OUT = 38, /* a run's input and output in the other layout */
       WS_LAYOUT_OPERANDS = 39,  /* and its element-wise operands */
       WS_EW_BROADCAST = 40,     /* per-channel element-wise operands, broadcast (device.c) */
       WS_CONV_F32_PHASE = 41,   /* the phase a strided 1x1 conv reads (conv/f32_gemm_avx2.c) */
       WS_CONV_I8_FIRST = 42 };

/* A parallel loop (pool.c): fn(ctx, item, participant) for every item in [0, items), on the
 * caller (participant 0) and up to participants - 1 workers (1..), each item once; returns
 * when all are done. The caller never waits for a worker that has not started (OpenMP's
 * barriers do): items are claimed from a shared counter by whoever is running. */
typedef void (*pool_fn)(void* ctx, int64_t item, int participant);
void pool_for(int participants, int64_t items, pool_fn fn, void* ctx);

/* SDP on `count` consecutive elements x[0..count) that all belong to channel `channel`, in
 * place; `operand` points at the matching ew_operand elements (NULL when ew_op is NONE).
 * The CONV kernel calls this on its output tiles (fused mode) and the SDP engine on whole
 * planes (independent mode): one function, so both modes give identical bits. */
void sdp_f32_span(const sdp_f32* p, int32_t channel, float* x, const float* operand,
                  int64_t count);

/* sdp_f32_span's steps on n channels of one value each, side by side: x[i] and operand[i] (NULL
 * when ew_op is NONE) are channel ch0 + i's; the same bits as n spans of one value. For a
 * convolution's outputs at a single position (1x1 images: squeeze-excite, a dense layer). */
void sdp_f32_channels(const sdp_f32* p, int32_t ch0, float* x, const float* operand, int64_t n);

/* 1 when p is one of the common epilogues sdp_f32_span computes in one pass: scale and/or shift,
 * then ADD or no element-wise op, then NONE / RELU / CLIP, in that order, each step rounded.
 * A kernel may apply these in registers before its store, in the same order
 * (conv/f32_implicit_avx512.c). */
int sdp_f32_one_pass(const sdp_f32* p);
/* 1 when p ends in FP32's exact form of a lookup-table activation (sigmoid, silu, hardswish,
 * ...: activation_exact) after its scale / shift and ADD or no element-wise op: a C16 kernel
 * computes the steps before the activation as a one-pass epilogue (its act is neither RELU nor
 * CLIP, so it applies none), and the caller then applies the activation to the whole output,
 * element by element, which the layout does not change (device.c: run_c16_kernel). */
static inline int c16_post_activation(const sdp_f32* p) {
  return p != NULL && p->lut == NULL && lut_activation(p->act) &&
         (p->ew_op == ACCEL_EW_NONE || p->ew_op == ACCEL_EW_ADD);
}
/* Whether a C16 kernel takes this epilogue: none, or one pass (act NONE / RELU / CLIP: no
 * PReLU, no LUT) in registers, or one pass then a post activation (c16_post_activation), whose
 * ADD operand is given. */
static inline int c16_epilogue_fits(const sdp_f32* ep) {
  return ep == NULL || ((sdp_f32_one_pass(ep) || c16_post_activation(ep)) &&
                        (ep->ew_op != ACCEL_EW_ADD || ep->ew_operand != NULL));
}
/* x = act(x) over count values with up to num_threads threads (sdp.c): a post activation. */
void activation_exact_run(accel_activation act, float* x, int64_t count, int32_t num_threads);

/* out = SDP(in) over a whole [n][c][hw] tensor; in may equal out. */
void sdp_f32_run(const sdp_f32* p, int32_t n, int32_t c, int64_t hw, const float* in, float* out,
                 int32_t num_threads);

/* The whole-tensor operands of an FP16 SDP, as halves (NULL: none, or per channel in the
 * sdp_f32's widened arrays): the element-wise operand and the X units' (x[unit][0] ALU,
 * [1] multiplier). */
typedef struct sdp_f16_whole {
  const uint16_t* ew;
  const uint16_t* x[2][2];
} sdp_f16_whole;

/* sdp_f16_run's input: halves, or fp32 values (a CONV's accumulators), or fp32 values of one
 * channel an image [n][1][hw] that every channel reads (the sums of a CONV whose filters are
 * all the same: conv_f32_replicates). */
typedef struct sdp_f16_input {
  const uint16_t* halves;
  const float* wide;
  int32_t one_channel;
} sdp_f16_input;

/* out = SDP(in) over a whole [n][c][hw] tensor into halves, with p's per-channel operands
 * (scale, shift, PReLU slope, per-channel X unit operands) widened to fp32 and its whole ones
 * in h (p's own pointers for them unused; no ew_per_channel): sdp_f32_run's steps in fp32 on
 * the widened values, each output rounded to half once. In and out may be the same tensor;
 * an operand may be the output only if it is the same tensor (each chunk is read whole before
 * it is written). */
void sdp_f16_run(const sdp_f32* p, const sdp_f16_whole* h, int32_t n, int32_t c, int64_t hw,
                 sdp_f16_input in, uint16_t* out, int32_t num_threads);

/* ---- CONV implementations (csrc/conv/: one file per algorithm and precision) ------------
 * conv_f32 and conv_i8 try their lists' implementations in order (conv/f32_impls.c,
 * conv/i8_impls.c) and run the first that applies. ACCEL_CONV_IMPL=name[,name...] in the
 * environment runs a named one wherever it supports the geometry (tests, comparisons);
 * ACCEL_VERBOSE=1 prints one line per CONV call on stderr: precision, implementation,
 * geometry, the run's label (docs/kernels.md). Both are read once per process (conv/impl.c);
 * conv_verbose_run(label) names the run the calling thread executes (NULL: none). */
int conv_verbose(void);
void conv_verbose_run(const char* label);
const char* conv_impl_forced(void); /* ACCEL_CONV_IMPL, or NULL */
int64_t conv_l1_bytes(void);        /* the L1 data cache's bytes (sysconf; 0: not said) */
int64_t conv_l2_bytes(void);        /* the L2 cache's bytes (sysconf; 0: not said) */
int conv_impl_named(const char* names, const char* name); /* name in the comma-separated list */
void conv_verbose_line(const char* precision, const conv_geometry* g, const char* impl);

/* 1 when g and its one-filter form (k = 1) sum in conv/f32_order.h's order: where every filter
 * holds the same bits (conv_same_filters), each output is then the first filter's sum at its
 * position, whatever its channel (conv_f32 computes that one and copies it). */
int conv_f32_replicates(const conv_geometry* g);
/* 1 when every filter of g's weights holds the first's bits (half.c's packing asks too, so it
 * is here; a geometry whose first two filters differ costs one comparison). */
static inline int conv_same_filters(const conv_geometry* g, const float* weights) {
  const int64_t depth = (int64_t)(g->c / g->groups) * g->kernel_h * g->kernel_w;
  for (int32_t o = 1; o < g->k; ++o)
    if (memcmp(weights + o * depth, weights, (size_t)depth * sizeof(float)) != 0) return 0;
  return 1;
}

/* out = conv(in, weights), then the SDP epilogue on every output element when `epilogue` is
 * not NULL, exactly as sdp_f32_span would compute it on the finished convolution output.
 * weights: [K][C/groups][kernel_h][kernel_w]. Returns ACCEL_ERR_NO_MEMORY or ACCEL_OK. */
accel_status conv_f32(const conv_geometry* g, const float* in, const float* weights, float* out,
                      const sdp_f32* epilogue, workspace* ws, int32_t num_threads);

/* ---- channel-blocked fp32 activations (ACCEL_LAYOUT_C16 in accel.h) ------------------
 * A C16 tensor [n][c][h][w] is stored [n][c/16][h][w][16] (c a multiple of 16): the 16
 * channels of a position side by side, as NVDLA's feature atoms. The kernels below read and
 * write C16 and compute the same sums, bit for bit, as conv_f32 on the NCHW tensors; a run
 * whose ops have no C16 kernel is converted around (runtime/src/device.c). */

#ifdef __AVX2__
#include <immintrin.h>
/* 8-lane helpers of the AVX2 kernels (pdp.c's pools, conv/f32_dw_rows_avx2.c's rows) */
/* All ones in lanes l with 0 <= base + l < w: the columns base .. base + 7 inside a plane. */
static inline __m256i lanes_inside8(int64_t base, int64_t w) {
  const __m256i ix = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                      _mm256_set1_epi32((int32_t)base));
  return _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), ix),
                             _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)w), ix));
}

/* The even (odd) lanes of the pair lo:hi, in order: lanes 0, 2, .., 14 (1, 3, .., 15) of the
 * 16 (stride-2 windows' columns). */
static inline __m256 even_lanes8(__m256 lo, __m256 hi) {
  const __m256 t = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}
static inline __m256 odd_lanes8(__m256 lo, __m256 hi) {
  const __m256 t = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}
#endif

#ifdef __AVX512F__
#include <immintrin.h>
/* r[i] = row i of a 16 x 16 block of floats -> r[j] = column j (layout.c's conversions,
 * conv_c16.c's weights). */
static inline __attribute__((always_inline)) void transpose_16x16(__m512 r[16]) {
  __m512 t[16], u[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(u[i], u[4 + i], 0x88);
    t[4 + i] = _mm512_shuffle_f32x4(u[i], u[4 + i], 0xdd);
    t[8 + i] = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0x88);
    t[12 + i] = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0xdd);
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
    r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
  }
}

/* _mm512_reduce_add_ps for 16 channels at once: lane[l] holds lane l of each channel's 16 lane
 * sums (conv_f32's dot-product tail), reduced in GCC's order (avx512fintrin.h): the upper 8
 * lanes added to the lower 8, then 4 to 4, then lanes 0 + 2 and 1 + 3, then those two. The
 * C16 1x1 and dense 3x3 kernels' tail positions. */
static inline __attribute__((always_inline)) __m512 c16_lanes_reduced(const __m512 lane[16]) {
  __m512 t3[8], t6[4];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) t3[i] = _mm512_add_ps(lane[8 + i], lane[i]);
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) t6[i] = _mm512_add_ps(t3[4 + i], t3[i]);
  return _mm512_add_ps(_mm512_add_ps(t6[0], t6[2]), _mm512_add_ps(t6[1], t6[3]));
}

/* The one-pass epilogue as the 1x1, dense 3x3 and image-layer C16 kernels apply it, once per
 * output after the last depth block, with run-time branches: the steps and order of c16_epi
 * below. scale and shift point at the first channel of the kernel's group of blocks. */
typedef struct c16_ep {
  const float* scale;   /* or NULL */
  const float* shift;   /* or NULL */
  const float* operand; /* the ADD operand at the tile's output offset, or NULL */
  accel_activation act;
  float lo, hi;
} c16_ep;

/* Block q's 16 values t through e; operand: their 16 operand values, or NULL. */
static inline __attribute__((always_inline)) __m512 c16_ep_apply(const c16_ep* e, __m512 t,
                                                                 int64_t q,
                                                                 const float* operand) {
  if (e->scale != NULL) t = _mm512_mul_ps(t, _mm512_loadu_ps(e->scale + q * 16));
  if (e->shift != NULL) t = _mm512_add_ps(t, _mm512_loadu_ps(e->shift + q * 16));
  if (operand != NULL) t = _mm512_add_ps(t, _mm512_loadu_ps(operand));
  if (e->act == ACCEL_ACT_RELU) {
    t = _mm512_max_ps(_mm512_setzero_ps(), t);
  } else if (e->act == ACCEL_ACT_CLIP) {
    t = _mm512_max_ps(_mm512_set1_ps(e->lo), t);
    t = _mm512_min_ps(_mm512_set1_ps(e->hi), t);
  }
  return t;
}

/* The one-pass epilogue (sdp_f32_one_pass) of C16 kernels on 16 channels' values t, in sdp.c's
 * order, each step rounded: x * scale, + shift, + operand, then ReLU as max(0, x) or the clip
 * as min(hi, max(lo, x)) (-0 and NaN stay, as sdp.c's comparisons leave them). A missing scale
 * is a multiplication by 1 and a missing shift an addition of -0.0: both keep every value's
 * bits (an FMA never yields a signalling NaN). EK, a compile-time constant in a kernel:
 * c16_epi_kind's code. */
typedef struct c16_epi_vectors {
  __m512 sc, sh, lo, hi;
} c16_epi_vectors;

/* 0: no epilogue; else 1 + ADD * 3 + act (0 NONE, 1 RELU, 2 CLIP). */
static inline int c16_epi_kind(const sdp_f32* ep) {
  if (ep == NULL) return 0;
  return 1 + (ep->ew_op == ACCEL_EW_ADD) * 3 +
         (ep->act == ACCEL_ACT_RELU ? 1 : ep->act == ACCEL_ACT_CLIP ? 2 : 0);
}

/* The vectors of channels 16 * cb .. 16 * cb + 15 (ep may be NULL). */
static inline c16_epi_vectors c16_epi_load(const sdp_f32* ep, int64_t cb) {
  c16_epi_vectors e = {.sc = _mm512_set1_ps(1.0f), .sh = _mm512_set1_ps(-0.0f),
                       .lo = _mm512_setzero_ps(), .hi = _mm512_setzero_ps()};
  if (ep != NULL) {
    if (ep->scale != NULL) e.sc = _mm512_loadu_ps(ep->scale + cb * 16);
    if (ep->shift != NULL) e.sh = _mm512_loadu_ps(ep->shift + cb * 16);
    e.lo = _mm512_set1_ps(ep->clip_min);
    e.hi = _mm512_set1_ps(ep->clip_max);
  }
  return e;
}

/* opd: the operand's 16 values at t's position (read only with ADD). */
static inline __attribute__((always_inline)) __m512 c16_epi(const int EK, __m512 t, __m512 sc,
                                                             __m512 sh, __m512 lo, __m512 hi,
                                                             const float* opd) {
  if (EK == 0) return t;
  const int add = (EK - 1) / 3, act = (EK - 1) % 3;
  t = _mm512_mul_ps(t, sc);
  t = _mm512_add_ps(t, sh);
  if (add) t = _mm512_add_ps(t, _mm512_loadu_ps(opd));
  if (act == 1) {
    t = _mm512_max_ps(_mm512_setzero_ps(), t); /* 0 > t ? 0 : t: -0 and NaN stay */
  } else if (act == 2) {
    t = _mm512_max_ps(lo, t); /* lo > t ? lo : t */
    t = _mm512_min_ps(hi, t); /* hi < t ? hi : t */
  }
  return t;
}
#endif

/* [n][c][hw] -> [n][c/16][hw][16] and back (layout.c); c % 16 == 0, out does not overlap in. */
void layout_to_c16(int64_t n, int64_t c, int64_t hw, const float* in, float* out,
                   int32_t num_threads);
void layout_from_c16(int64_t n, int64_t c, int64_t hw, const float* in, float* out,
                     int32_t num_threads);
/* [n][c/16][h][w][16] -> [n][c][oh][ow] of the positions (2y, 2x) only (oh, ow <= half of h,
 * w rounded up): the phase a 1x1 stride-2 conv reads. */
void layout_from_c16_phase(int64_t n, int64_t c, int64_t h, int64_t w, int64_t oh, int64_t ow,
                           const float* in, float* out, int32_t num_threads);

/* 1x1 convolution, stride 1 or 2 (both ways), no padding, one group, c and k multiples of 16,
 * C16 in and out (conv_c16.c); the epilogue NULL or one-pass (sdp_f32_one_pass), its
 * element-wise operand C16 like the output. Stride 2 uses workspace slot 0. Returns
 * ACCEL_ERR_NO_MEMORY or ACCEL_OK. */
int conv_c16_pointwise_fits(const conv_geometry* g, const sdp_f32* epilogue);
/* packed: conv_c16_pack's of these weights, or NULL (the kernel packs them on every run). */
accel_status conv_c16_pointwise(const conv_geometry* g, const float* in, const float* weights,
                                const void* packed, float* out, const sdp_f32* epilogue,
                                workspace* ws, int32_t num_threads);
/* Weights packed once for conv_c16_pointwise (accel_conv_pack_weights): FP32 1x1 weights,
 * stride 1 or 2, no padding, one group, c and k multiples of 16 (the spatial sizes are not
 * read). */
int conv_c16_packs(const conv_geometry* g);
size_t conv_c16_packed_bytes(const conv_geometry* g);
void conv_c16_pack(const conv_geometry* g, const float* weights, void* packed);
int conv_c16_packed_matches(const conv_geometry* g, const void* packed);
/* [k][depth] weights (k and depth multiples of 16) as the C16 kernels read them: per group of
 * 4 blocks of 16 output channels, [depth][16 * blocks] (conv_c16.c). */
void c16_pack_pointwise(int64_t k, int64_t depth, const float* weights, float* packed);

/* Dense 3x3 convolution, stride 1 or 2 each way, padding <= 2 top and left, no dilation, one
 * group, c and k multiples of 16, C16 in and out (conv3x3_c16.c), where conv_f32 sums in
 * 32-deep blocks or dot-product tails (conv_f32_dot_tail >= 0) and not an output under 64
 * positions from >= 256 channels (slower there); the epilogue as above. */
int conv_c16_3x3_fits(const conv_geometry* g, const sdp_f32* epilogue);
/* packed: conv_c16_3x3_pack's of these weights, or NULL (packed on every run). */
accel_status conv_c16_3x3(const conv_geometry* g, const float* in, const float* weights,
                          const void* packed, float* out, const sdp_f32* epilogue,
                          workspace* ws, int32_t num_threads);
/* Weights packed once for conv_c16_3x3 (accel_conv_pack_weights): FP32 3x3 weights, stride 1
 * or 2, no dilation, one group, c and k multiples of 16 (the spatial sizes are not read). */
int conv_c16_3x3_packs(const conv_geometry* g);
size_t conv_c16_3x3_packed_bytes(const conv_geometry* g);
void conv_c16_3x3_pack(const conv_geometry* g, const float* weights, void* packed);
int conv_c16_3x3_packed_matches(const conv_geometry* g, const void* packed);

/* Depthwise 3x3 convolution (groups == c == k, a multiple of 16), stride 1 or 2 both ways,
 * padding 1 top and left, no dilation, C16 in and out (dw_c16.c); the epilogue as above. */
int conv_c16_depthwise_fits(const conv_geometry* g, const sdp_f32* epilogue);
accel_status conv_c16_depthwise(const conv_geometry* g, const float* in, const float* weights,
                                float* out, const sdp_f32* epilogue, workspace* ws,
                                int32_t num_threads);

/* The image layer's convolution: NCHW input of 2-4 channels, C16 output (stem_c16.c); any
 * kernel size, stride 1 or 2 each way, any padding, no dilation, one group, k a multiple of 16,
 * where conv_f32 sums every output in 32-deep blocks (conv_f32_dot_tail == 0); the epilogue
 * as above. Weights [k][c][kernel_h][kernel_w], packed per call. */
int conv_c16_stem_fits(const conv_geometry* g, const sdp_f32* epilogue);
accel_status conv_c16_stem(const conv_geometry* g, const float* in, const float* weights,
                           float* out, const sdp_f32* epilogue, workspace* ws,
                           int32_t num_threads);
/* The same, then the pool (pdp_c16's bits) over it into out, each strip's pool rows while the
 * strip is in L2 (ResNet's stem); conv_out: scratch of the conv's size (with one thread only
 * a ring of rows at its start is used). */
accel_status conv_c16_stem_pool(const conv_geometry* g, const float* in, const float* weights,
                                float* conv_out, const pdp_geometry* pool, float* out,
                                const sdp_f32* epilogue, workspace* ws, int32_t num_threads);

/* Max and average pooling (pdp.c's, every geometry it takes), C16 in and out (pdp_c16.c), the
 * same bits as pdp_f32: each output's taps in pdp.c's order, 16 channels per vector. */
int pdp_c16_fits(const pdp_geometry* g);
void pdp_c16(const pdp_geometry* g, const float* in, float* out, int32_t num_threads);
/* Output rows [oy0, oy1) of image img's planes (in and out: the whole tensors). */
void pdp_c16_rows(const pdp_geometry* g, const float* in, float* out, int64_t img, int32_t oy0,
                  int32_t oy1);
/* Output row oy of image img's planes from a ring of the input's rows (block b's input row y
 * at ring + (b * ring_rows + y % ring_rows) * w * 16); kernel_h <= PDP_C16_RING_MAX. */
enum { PDP_C16_RING_MAX = 8 };
void pdp_c16_ring_row(const pdp_geometry* g, const float* ring, int32_t ring_rows, float* out,
                      int64_t img, int32_t oy);

/* Positions of an image (its last ones) that conv_f32 sums as dot products along the depth
 * (16 lane partial sums, lane l taking depths l, l + 16, ..., then _mm512_reduce_add_ps), the
 * others in SUM_BLOCK-deep blocks; -1 when it takes a path of another order (a batch of fully
 * connected rows, BLAS tiles) or a depthwise one. The contract: conv/f32_order.h. */
int conv_f32_dot_tail(const conv_geometry* g);

/* Pooling, [n][c][h][w] -> [n][c][out_h][out_w]. */
void pdp_f32(const pdp_geometry* g, const float* in, float* out, int32_t num_threads);

/* Local response normalisation across channels (fp32 data; S, the base and the power in
 * double), [n][c][h][w] -> the same shape; out must not overlap in. */
void cdp_f32(const cdp_geometry* g, const float* in, float* out, int32_t num_threads);
/* The INT8 CDP, NVDLA's arithmetic (accel_cdp_int8 in accel.h), over [n][c][h][w] codes. */
void cdp_i8(const cdp_geometry* g, const accel_cdp_int8* p, const int8_t* in, int8_t* out,
            int32_t num_threads);

/* ---- INT8 (semantics in accel.h; reference: accel_codegen/reference.py) ---------------- */

/* An INT8 SDP op: accel_sdp_desc's converters, validated. clip_lo/clip_hi are -128/127 unless
 * act is CLIP. */
typedef struct sdp_i8 {
  const int32_t* bias;                /* [C] or NULL */
  const int16_t* mul;                 /* [C] or NULL */
  const uint8_t* rshift;              /* [C] or NULL */
  int32_t in_zero;
  accel_eltwise ew_op;
  const int8_t* ew_operand;           /* whole NCHW tensor, or NULL with ACCEL_EW_NONE */
  int32_t ew_per_channel;             /* 1: ew_operand is [N][C] (independent runs only) */
  int32_t ew_zero, ew_mul, ew_shift;
  accel_activation act;               /* NONE, RELU, CLIP, PRELU or a LUT one (with lut) */
  const int16_t* prelu_mul;           /* [C] or NULL */
  int32_t prelu_shift;
  int32_t out_mul, out_shift, out_zero;
  int32_t clip_lo, clip_hi;
  const accel_lut_int8* lut;          /* LUT activation's tables, or NULL */
  const struct sdp_i8_lut_plan* lut_plan; /* the LUT's codes by input ranges, or NULL */
  int32_t shift_max;                  /* the largest rshift over the op's channels (0 without
                                       * rshift): NVDLA's BN shifter, one per layer (accel.h) */
} sdp_i8;

/* A LUT activation's output codes as a function of its input t (sdp_i8_lut.c states the form),
 * kept from run to run by its table and output converter: NULL where it does not apply (no
 * AVX-512 or AVX2, fewer than ~64K elements converted by the runs of that table so far, codes that
 * change outside the LO table, ACCEL_SDP_I8_LUT set to "scalar" or "gather"); the caller
 * stores it in sdp_i8.lut_plan for the run and hands it back with sdp_i8_lut_plan_free. */
struct sdp_i8_lut_plan* sdp_i8_lut_plan_new(const sdp_i8* p, int64_t elements);
void sdp_i8_lut_plan_free(struct sdp_i8_lut_plan* plan);

/* The INT8 LUT at t (accel_lut_int8 in accel.h): the int32 result before the output
 * converter. */
int64_t lut_int8_eval(const accel_lut_int8* l, int64_t t);

/* SDP on `count` int32 values v[0..count) of channel `channel` (a CONV accumulator, or input
 * codes minus in_zero), writing int8 y[0..count); `operand` points at the matching ew_operand
 * codes (NULL when ew_op is NONE). The CONV epilogue and the SDP engine both call this, so
 * fused and independent runs give identical codes. */
void sdp_i8_span(const sdp_i8* p, int32_t channel, const int32_t* v, const int8_t* operand,
                 int8_t* y, int64_t count);

/* The same SDP on `count` values of the consecutive channels first, first + 1, ... (one
 * output position each: a fully connected layer's outputs), exactly as sdp_i8_span computes
 * each of them. */
void sdp_i8_channels(const sdp_i8* p, int32_t first, const int32_t* v, const int8_t* operand,
                     int8_t* y, int64_t count);

/* out = SDP(in) over a whole [n][c][hw] int8 tensor (v = in - in_zero); in may equal out. */
void sdp_i8_run(const sdp_i8* p, int32_t n, int32_t c, int64_t hw, const int8_t* in,
                int8_t* out, int32_t num_threads);

/* out = SDP(conv(in - in_zero, weights)): the int32 accumulators go through `epilogue`
 * (required: an INT8 CONV always feeds the SDP). packed: accel_conv_pack_weights() output for
 * this geometry, or NULL to pack into the workspace on this call. Returns ACCEL_ERR_NO_MEMORY
 * or ACCEL_OK. */
accel_status conv_i8(const conv_geometry* g, int32_t in_zero, const int8_t* in,
                     const int8_t* weights, const void* packed, int8_t* out,
                     const sdp_i8* epilogue, workspace* ws, int32_t num_threads);

/* Bytes of the packed weights of a geometry, and the packing itself (dst 64-byte aligned).
 * conv_i8_packed_matches: whether `packed` was made for this geometry. */
size_t conv_i8_packed_bytes(const conv_geometry* g);
void conv_i8_pack(const conv_geometry* g, const int8_t* weights, void* dst);
int conv_i8_packed_matches(const conv_geometry* g, const void* packed);
/* Whether INT8 convolutions run on AMX tiles where they pay (conv/i8_amx.c): request < 0 asks,
 * 0 turns the path off, 1 on where the CPU and OS have AMX; returns the state after. */
int conv_i8_amx(int request);

/* INT8 pooling with the input's zero point. */
void pdp_i8(const pdp_geometry* g, int32_t zero, const int8_t* in, int8_t* out,
            int32_t num_threads);

/* ---- Winograd F(2x2, 3x3) (accel_conv_mode in accel.h; reference: sim/reference.py) ---- */

/* Whether a kernel_h x kernel_w kernel at this stride is 3x3 once the stride is folded into
 * channels (the kernel condition of Winograd mode). */
static inline int winograd_kernel_fits(int32_t kernel_h, int32_t kernel_w, int32_t stride) {
  return (kernel_h + stride - 1) / stride == 3 && (kernel_w + stride - 1) / stride == 3;
}

/* FP32 (half = 0) or FP16 (half = 1: the operands are halves widened, the pre-transformed
 * weights and transformed input tiles are rounded to half) Winograd convolution of a geometry
 * that meets the conditions, then the epilogue (may be NULL) on the finished output, as
 * conv_f32's. packed: conv_winograd_pack() output for this geometry and `half` (the weights are
 * then not read), or NULL to pre-transform `weights` (fp32) into the workspace on this call.
 * Returns ACCEL_ERR_NO_MEMORY or ACCEL_OK. */
accel_status conv_winograd_f32(const conv_geometry* g, const float* in, const float* weights,
                               const void* packed, int half, float* out,
                               const sdp_f32* epilogue, workspace* ws, int32_t num_threads);

/* FP32 Winograd convolution on C16 tensors (winograd_c16.c): winograd.c's bits for a stride-1,
 * one-group 3x3 geometry, c and k multiples of 16, the epilogue NULL or one-pass with its
 * operand C16 like the output. packed: as conv_winograd_f32's (half = 0). */
int conv_winograd_c16_fits(const conv_geometry* g, const sdp_f32* epilogue);
accel_status conv_winograd_c16(const conv_geometry* g, const float* in, const float* weights,
                               const void* packed, float* out, const sdp_f32* epilogue,
                               workspace* ws, int32_t num_threads);

/* Winograd's packed weights (accel_conv_pack_weights of an FP32 or FP16 conv in WINOGRAD mode):
 * the pre-transform G g G^T, done once. weights: fp32 (half = 0) or halves (half = 1, the
 * transformed weights rounded to half); dst 64-byte aligned.
 * conv_winograd_packed_matches: whether `packed` was made for this geometry and precision. */
size_t conv_winograd_packed_bytes(const conv_geometry* g);
void conv_winograd_pack(const conv_geometry* g, const void* weights, int half, void* dst);
int conv_winograd_packed_matches(const conv_geometry* g, int half, const void* packed);

/* ---- BDMA ---------------------------------------------------------------------------- */

/* A channel copy's resolved geometry (accel_bdma_desc, validated): planes of hw elements,
 * the copy of `channels` planes run repeat + 1 times (no channel written twice). */
typedef struct bdma_geometry {
  int32_t n, in_c, out_c;             /* input [n][in_c][hw], output [n][out_c][hw] */
  int64_t hw;
  int32_t src_offset, src_stride, dst_offset, dst_stride, channels;
  int32_t repeat, src_repeat_stride, dst_repeat_stride;
} bdma_geometry;

/* out[b][dst_offset + r*dst_repeat_stride + i*dst_stride] =
 * in[b][src_offset + r*src_repeat_stride + i*src_stride] for r <= repeat, i < channels, as
 * bytes (element_bytes each); every other output plane is left untouched. */
void bdma_copy(const bdma_geometry* g, size_t element_bytes, const void* src, void* dst,
               int32_t num_threads);

/* ---- RUBIK ----------------------------------------------------------------------------- */

/* A contract's resolved geometry (accel_rubik_desc, validated): input [n][c][h][w] with
 * c = sx * sy * out_c, output [n][out_c][h * sy][w * sx]. */
typedef struct rubik_geometry {
  int32_t n, out_c, h, w, sx, sy;
} rubik_geometry;

/* out[b][c][y*sy + a][x*sx + t] = in[b][(a*sx + t)*out_c + c][y][x], as bytes (element_bytes
 * each): accel.h's contract. */
void rubik_contract(const rubik_geometry* g, size_t element_bytes, const void* src, void* dst,
                    int32_t num_threads);

/* ---- FP16 storage ---------------------------------------------------------------------- */

/* IEEE binary16 <-> fp32: widening is exact, narrowing rounds to nearest even. */
void half_to_float(const uint16_t* src, float* dst, int64_t count);
void float_to_half(const float* src, uint16_t* dst, int64_t count);
/* x = float(half(x)) in place: the rounding an FP16 engine applies to its fp32 result. */
void round_to_half(float* x, int64_t count);

/* FP16 packed conv weights (accel_conv_pack_weights): widened to fp32 once. */
size_t conv_f16_packed_bytes(const conv_geometry* g);
void conv_f16_pack(const conv_geometry* g, const uint16_t* weights, void* dst);
int conv_f16_packed_matches(const conv_geometry* g, const void* packed);
const float* conv_f16_packed_weights(const void* packed);
/* Whether the packed weights' filters all hold the same bits (conv_same_filters, at packing). */
int conv_f16_packed_same_filters(const void* packed);

#ifdef __cplusplus
}
#endif

#endif /* ACCEL_KERNELS_H_ */
