/* conv/f32_fc_blas.c - FP32 CONV of one output position per image with a batch (fully
 * connected layers), as OpenBLAS sgemms (impl "fc_blas"). */
#include "conv/f32.h"


/* One output position per image (fully connected as a convolution) with a batch: per group,
 * out[b][k] = sum_kk w[k][kk] * col_b[kk], as sgemms over chunks of output channels, W (the big
 * operand) as the row matrix: t[k][b] = W x cols^T (measured over twice as fast as out = cols x
 * W^T, whose weight copying dominates: docs/kernels.md, conv/f32_fc_blas.c), then transposed into
 * the output with the epilogue. Chunks have a fixed size, not one per thread: sgemm's summation
 * order depends on the shape of the call, and the bits must not depend on the thread count. The
 * im2col column of an image is its input when the window covers it exactly; otherwise it is
 * packed. */
enum { FC_CHUNK_ROWS = 64 };
typedef struct fc_job {
  const conv_plan* P;
  const float* in;
  const float* weights;
  float* out;
  const sdp_f32* ep;
  float* cols;
  float* const* tmp; /* per participant */
  const float* bt;   /* the current group's columns */
  int64_t ldb, grp;
} fc_job;

static void fc_pack_item(void* ctx, int64_t b, int participant) {
  const fc_job* J = ctx;
  const conv_plan* P = J->P;
  (void)participant;
  pack_col(P, J->in + (b * P->g->c + J->grp * P->cg) * P->hw, 0, 0, 0, P->kd,
           J->cols + b * J->ldb);
}

static void fc_chunk_item(void* ctx, int64_t chunk, int participant) {
  const fc_job* J = ctx;
  const conv_plan* P = J->P;
  const conv_geometry* g = P->g;
  float* t_k_b = J->tmp[participant];
  const int64_t m0 = chunk * FC_CHUNK_ROWS;
  const int64_t m1 = m0 + FC_CHUNK_ROWS < P->mg ? m0 + FC_CHUNK_ROWS : P->mg;
  const int64_t ch0 = J->grp * P->mg + m0;
  scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)(m1 - m0),
                    (blasint)g->n, (blasint)P->kd, 1.0f, J->weights + ch0 * P->kd,
                    (blasint)P->kd, J->bt, (blasint)J->ldb, 0.0f, t_k_b, (blasint)g->n);
  for (int64_t b = 0; b < g->n; ++b)
    for (int64_t m = 0; m < m1 - m0; ++m) {
      J->out[b * g->k + ch0 + m] = t_k_b[m * g->n + b];
      if (J->ep != NULL) epilogue_span(J->ep, ch0 + m, J->out, b * g->k + ch0 + m, 1);
    }
}

static accel_status conv_fc_batch(const conv_plan* P, const float* in, const float* weights,
                                  float* out, const sdp_f32* ep, workspace* ws, int num_threads) {
  const conv_geometry* g = P->g;
  const int covers = g->pad_top == 0 && g->pad_left == 0 && g->dilation_h == 1 &&
                     g->dilation_w == 1 && g->kernel_h == g->h && g->kernel_w == g->w;
  const int64_t ldb = covers ? (int64_t)g->c * P->hw : (P->kd + 15) & ~(int64_t)15;
  const int64_t chunks = (P->mg + FC_CHUNK_ROWS - 1) / FC_CHUNK_ROWS;
  int64_t threads = num_threads < chunks ? num_threads : chunks;
  if (threads > WS_THREAD_SLOTS - 1) threads = WS_THREAD_SLOTS - 1;
  const int nth = (int)threads;
  float* cols = NULL;
  if (!covers) {
    cols = workspace_get(ws, 0, (size_t)(g->n * ldb) * sizeof(float));
    if (cols == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  float* tmp[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    tmp[t] = workspace_get(ws, t + 1, (size_t)(FC_CHUNK_ROWS * g->n) * sizeof(float));
    if (tmp[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  blas_single_threaded();
  fc_job J = {.P = P, .in = in, .weights = weights, .out = out, .ep = ep, .cols = cols, .tmp = tmp,
              .bt = NULL, .ldb = ldb, .grp = 0};
  for (int64_t grp = 0; grp < g->groups; ++grp) {
    J.grp = grp;
    if (!covers) pool_for(nth, g->n, fc_pack_item, &J);
    J.bt = covers ? in + grp * P->cg * P->hw : cols;
    pool_for(nth, chunks, fc_chunk_item, &J);
  }
  return ACCEL_OK;
}


static int fc_applies(const conv_f32_call* c) {
  return c->P->ohw == 1 && c->P->g->n > 1 && c->P->cg > 1;
}

static accel_status fc_run(const conv_f32_call* c) {
  return conv_fc_batch(c->P, c->in, c->weights, c->out, c->ep, c->ws, c->nth);
}

const conv_f32_impl conv_f32_fc_blas_impl = {.name = "fc_blas", .applies = fc_applies,
                                             .supports = NULL, .run = fc_run, .dot_tail = NULL};
