/* conv/f32_copy_avx512.c - the padded, stride-phase-split copy of the input that the FP32
 * implicit GEMM and the depthwise copy kernel read. */
#include "conv/f32.h"

#ifdef __AVX512F__

void f32_imp_make_plan(const conv_plan* P, imp_plan* Q, int allow_direct) {
  const conv_geometry* g = P->g;
  const int64_t sh = g->stride_h, sw = g->stride_w;
  const int64_t rqmax = ((int64_t)(g->kernel_h - 1) * g->dilation_h) / sh;
  const int64_t sqmax = ((int64_t)(g->kernel_w - 1) * g->dilation_w) / sw;
  Q->direct = allow_direct && g->kernel_h == 1 && g->kernel_w == 1 && sh == 1 && sw == 1 &&
              g->pad_top == 0 &&
              g->pad_left == 0 && g->out_h == g->h && g->out_w == g->w;
  Q->nph = g->kernel_h == 1 && g->kernel_w == 1 ? 1 : sh * sw; /* 1x1/2: one phase of four */
  Q->sqmax = sqmax;
  if (Q->direct) {
    Q->wq = g->w;
    Q->hq = g->h;
    Q->plane = P->hw;
  } else if (sw == 1) {
    /* Stride 1: rows overlap their padding. A row of wq >= w + pad_left columns ends in zeros;
     * a tap reading past it lands in the next row's left padding, zero as well, as long as
     * wq >= out_w + sqmax - pad_left. */
    const int64_t need = (int64_t)g->out_w + sqmax - g->pad_left;
    Q->wq = (int64_t)g->w + g->pad_left > need ? (int64_t)g->w + g->pad_left : need;
    if (Q->wq < g->out_w) Q->wq = g->out_w;
    Q->hq = g->out_h + rqmax;
    Q->plane = Q->hq * Q->wq;
  } else {
    Q->wq = g->out_w + sqmax;
    Q->hq = g->out_h + rqmax;
    Q->plane = Q->hq * Q->wq;
  }
  Q->ncols = (int64_t)g->out_h * Q->wq;
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
