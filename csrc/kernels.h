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

#include "accel/accel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A convolution's resolved geometry. */
typedef struct conv_geometry {
  int32_t n, c, h, w;                 /* input */
  int32_t k, out_h, out_w;            /* output */
  int32_t kernel_h, kernel_w;
  int32_t stride_h, stride_w;
  int32_t pad_top, pad_left;          /* bottom/right padding is implied by out_h/out_w */
  int32_t dilation_h, dilation_w;
  int32_t groups;
} conv_geometry;

/* An SDP op with fp32 operands (see accel_sdp_desc for the semantics). */
typedef struct sdp_f32 {
  const float* scale;                 /* [C] or NULL */
  const float* shift;                 /* [C] or NULL */
  accel_eltwise ew_op;
  const float* ew_operand;            /* whole NCHW tensor, or NULL with ACCEL_EW_NONE */
  accel_activation act;
  float clip_min, clip_max;
  const float* prelu_slope;           /* [C] or NULL */
} sdp_f32;

/* A pooling op's resolved geometry. */
typedef struct pdp_geometry {
  int32_t n, c, h, w;                 /* input */
  int32_t out_h, out_w;
  int32_t kernel_h, kernel_w, stride_h, stride_w, pad_top, pad_left;
  accel_pool pool;
  int32_t count_include_pad;
} pdp_geometry;

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

/* The first slots belong to the threads of a parallel region; shared buffers come after. */
enum { WS_THREAD_SLOTS = 32, WS_CHAIN_A = 32, WS_CHAIN_B = 33 };

/* SDP on `count` consecutive elements x[0..count) that all belong to channel `channel`, in
 * place; `operand` points at the matching ew_operand elements (NULL when ew_op is NONE).
 * The CONV kernel calls this on its output tiles (fused mode) and the SDP engine on whole
 * planes (independent mode): one function, so both modes give identical bits. */
void sdp_f32_span(const sdp_f32* p, int32_t channel, float* x, const float* operand,
                  int64_t count);

/* out = SDP(in) over a whole [n][c][hw] tensor; in may equal out. */
void sdp_f32_run(const sdp_f32* p, int32_t n, int32_t c, int64_t hw, const float* in, float* out,
                 int32_t num_threads);

/* out = conv(in, weights), then the SDP epilogue on every output element when `epilogue` is
 * not NULL, exactly as sdp_f32_span would compute it on the finished convolution output.
 * weights: [K][C/groups][kernel_h][kernel_w]. Returns ACCEL_ERR_NO_MEMORY or ACCEL_OK. */
accel_status conv_f32(const conv_geometry* g, const float* in, const float* weights, float* out,
                      const sdp_f32* epilogue, workspace* ws, int32_t num_threads);

/* Pooling, [n][c][h][w] -> [n][c][out_h][out_w]. */
void pdp_f32(const pdp_geometry* g, const float* in, float* out, int32_t num_threads);

#ifdef __cplusplus
}
#endif

#endif /* ACCEL_KERNELS_H_ */
