/* conv/f32_copy_avx512.c - the padded, stride-phase-split copy of the input that the FP32
 * implicit GEMM and the depthwise copy kernel read. */
#include "conv/f32.h"

#ifdef __AVX512F__

void f32_imp_make_plan(const conv_plan* P, imp_plan* Q, int allow_direct) {
  const conv_geometry* g = P->g;
  const f32_grid q = f32_implicit_grid(g); /* conv/f32_order.h: the tail rule reads it too */
  const int64_t rqmax = ((int64_t)(g->kernel_h - 1) * g->dilation_h) / g->stride_h;
  /* a 1x1 stride-1 unpadded geometry's grid is its input's (wq = w) either way */
  Q->direct = allow_direct && q.direct;
  Q->nph = q.nph;
  Q->sqmax = q.sqmax;
  Q->wq = q.wq;
  Q->hq = Q->direct ? g->h : g->out_h + rqmax;
  Q->plane = Q->direct ? P->hw : Q->hq * Q->wq;
  Q->ncols = q.ncols;
  Q->npanels = (Q->ncols + NR - 1) / NR;
}

/* Floats of one image-group's padded copy, with zeroed slack: grid reads reach sqmax floats
 * past the last plane (63 more for depthwise, which reads whole groups of four vectors). */
int64_t f32_imp_copy_floats(const conv_plan* P, const imp_plan* Q) {
  return P->cg * Q->nph * Q->plane + Q->sqmax + 64;
}

/* Build phase plane `idx` = (c, py, px) of the padded copy of image-group input `img`. */
void f32_imp_build_plane(const conv_plan* P, const imp_plan* Q, const float* img, int64_t idx,
                         float* dst) {
  const conv_geometry* g = P->g;
  const int64_t c = idx / Q->nph, ph = idx % Q->nph;
  const int64_t py = ph / g->stride_w, px = ph % g->stride_w;
  const int64_t sh = g->stride_h, sw = g->stride_w, W = g->w, wq = Q->wq;
  const float* src = img + c * P->hw;
  float* d = dst + idx * Q->plane;
  /* columns xq with input column xq*sw + px - pad_left inside [0, W) */
  const int64_t x0 = px - g->pad_left;
  int64_t lo = x0 >= 0 ? 0 : (-x0 + sw - 1) / sw;
  int64_t hi = x0 > W - 1 ? 0 : (W - 1 - x0) / sw + 1;
  if (hi > wq) hi = wq;
  if (lo > hi) lo = hi;
  for (int64_t yq = 0; yq < Q->hq; ++yq) {
    const int64_t iy = yq * sh + py - g->pad_top;
    float* dr = d + yq * wq;
    if (iy < 0 || iy >= g->h || lo == hi) {
      memset(dr, 0, (size_t)wq * sizeof(float));
      continue;
    }
    const float* row = src + iy * W + x0;
    for (int64_t xq = 0; xq < lo; ++xq) dr[xq] = 0.0f;
    if (sw == 1) {
      memcpy(dr + lo, row + lo, (size_t)(hi - lo) * sizeof(float));
    } else if (sw == 2) {
      const __m512i even = lanes_2x(0);
      for (int64_t xq = lo; xq < hi; xq += 16) {
        const int64_t cnt = hi - xq < 16 ? hi - xq : 16, span = 2 * cnt - 1;
        const __m512 v0 = _mm512_maskz_loadu_ps(lane_mask(span), row + 2 * xq);
        const __m512 v1 = _mm512_maskz_loadu_ps(lane_mask(span - 16), row + 2 * xq + 16);
        _mm512_mask_storeu_ps(dr + xq, lane_mask(cnt), _mm512_permutex2var_ps(v0, even, v1));
      }
    } else {
      for (int64_t xq = lo; xq < hi; ++xq) dr[xq] = row[xq * sw];
    }
    for (int64_t xq = hi; xq < wq; ++xq) dr[xq] = 0.0f;
  }
}

/* Offsets of the depth rows in the padded copy. */
void f32_imp_offsets(const conv_plan* P, const imp_plan* Q, int64_t* off) {
  const conv_geometry* g = P->g;
  const int64_t sh = g->stride_h, sw = g->stride_w;
  int64_t kk = 0;
  for (int64_t c = 0; c < P->cg; ++c)
    for (int64_t r = 0; r < g->kernel_h; ++r)
      for (int64_t s = 0; s < g->kernel_w; ++s) {
        const int64_t ry = r * g->dilation_h, sx = s * g->dilation_w;
        const int64_t ph = (ry % sh) * sw + sx % sw;
        off[kk++] = (c * Q->nph + ph) * Q->plane + (ry / sh) * Q->wq + sx / sw;
      }
}
#endif /* __AVX512F__ */
