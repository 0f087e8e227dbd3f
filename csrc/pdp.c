/* pdp.c - the PDP engine: max and average pooling (fp32).
 *
 * Every output takes its window's taps in one order, rows then columns (max: a NaN wins, the
 * last one met; average: the sum in that order, then one division), so every path below gives
 * the same bits. Output rows of at least 8 columns with stride 1 or 2 go 16 columns per
 * AVX-512 step (8 per AVX2 step in an x86-64-v3 build), one tap at a time over the whole
 * vector: a tap outside the image columns reads -inf for max (never taken: neither greater nor
 * NaN) and +0 for the average (x + 0 = x for every sum that starts at +0). The scalar
 * window-by-window loop took three times the convolution before ResNet's 3x3/2 max pool. Max
 * pooling of such rows first takes each input row's maxima once (pool_plane_max_rows;
 * measured: docs/kernels.md, pdp.c). Global pooling (one output per plane) takes 8 planes at a
 * time (pool_global; AVX2 and AVX-512 builds 16 or 32, a plane per lane: pool_global_lanes). Other averages
 * (narrow rows, strides above 2: a wide pool's passes) take a row's windows inside the image
 * side by side, each in its own order (pool_row_inside).
 */
#include <math.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "kernels.h"

/* Output columns [ox_lo, ox_hi) of output row oy, window by window. */
static void pool_row_scalar(const pdp_geometry* g, const float* in, float* out, int32_t oy,
                            int32_t ox_lo, int32_t ox_hi) {
  const float full_window = (float)(g->kernel_h * g->kernel_w);
  int32_t y0, r0, r1;
  pool_window(oy, g->stride_h, g->pad_top, g->kernel_h, g->h, &y0, &r0, &r1);
  for (int32_t ox = ox_lo; ox < ox_hi; ++ox) {
    int32_t x0, s0, s1;
    pool_window(ox, g->stride_w, g->pad_left, g->kernel_w, g->w, &x0, &s0, &s1);
    float acc = g->pool == ACCEL_POOL_MAX ? -INFINITY : 0.0f;
    for (int32_t r = r0; r < r1; ++r) {
      const float* row = in + (int64_t)(y0 + r) * g->w + x0;
      if (g->pool == ACCEL_POOL_MAX) {
        for (int32_t s = s0; s < s1; ++s) {
          acc = (row[s] > acc || row[s] != row[s]) ? row[s] : acc; /* NaN wins, as in NumPy */
        }
      } else {
        for (int32_t s = s0; s < s1; ++s) acc += row[s];
      }
    }
    if (g->pool == ACCEL_POOL_AVG) {
      acc /= g->count_include_pad ? full_window : (float)((r1 - r0) * (s1 - s0));
    }
    out[(int64_t)oy * g->out_w + ox] = acc;
  }
}

#ifdef __AVX512F__
static inline __m512i iota16(void) {
  return _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
}

/* Lanes 1, 3, .. 31 of a pair of vectors. */
static inline __m512i lanes_odd(void) {
  return _mm512_add_epi32(_mm512_add_epi32(iota16(), iota16()), _mm512_set1_epi32(1));
}

/* Lanes whose input column base + lane lies in [0, w). */
static inline __mmask16 columns_inside(int64_t base, int64_t w) {
  const __m512i ix = _mm512_add_epi32(iota16(), _mm512_set1_epi32((int32_t)base));
  return _mm512_cmp_epi32_mask(ix, _mm512_setzero_si512(), _MM_CMPINT_NLT) &
         _mm512_cmp_epi32_mask(ix, _mm512_set1_epi32((int32_t)w), _MM_CMPINT_LT);
}

/* Output row oy, 16 columns at a time from ox = 0 (strides 1 and 2); the columns past the
 * last whole-or-partial vector are masked off at the store. */
static void pool_row_vector(const pdp_geometry* g, const float* in, float* out, int32_t oy) {
  const int is_max = g->pool == ACCEL_POOL_MAX;
  const int64_t sw = g->stride_w, W = g->w;
  const __m512 fill = _mm512_set1_ps(is_max ? -INFINITY : 0.0f);
  const __m512i even = _mm512_add_epi32(iota16(), iota16()); /* lanes 0, 2, .. 30 of a pair */
  int32_t y0, r0, r1;
  pool_window(oy, g->stride_h, g->pad_top, g->kernel_h, g->h, &y0, &r0, &r1);
  for (int64_t ox = 0; ox < g->out_w; ox += 16) {
    const int64_t live = g->out_w - ox < 16 ? g->out_w - ox : 16;
    const __mmask16 store = (__mmask16)((1u << live) - 1u);
    /* the image columns of each tap's one or two vectors, the same on every row */
    __mmask16 inside_lo[ACCEL_MAX_POOL_KERNEL], inside_hi[ACCEL_MAX_POOL_KERNEL];
    for (int32_t s = 0; s < g->kernel_w; ++s) {
      const int64_t base = ox * sw - g->pad_left + s; /* input column of lane 0 */
      inside_lo[s] = columns_inside(base, W);
      inside_hi[s] = sw == 1 ? 0 : columns_inside(base + 16, W);
    }
    __m512 acc = fill;
    for (int32_t r = r0; r < r1; ++r) {
      const float* row = in + (int64_t)(y0 + r) * W + ox * sw - g->pad_left;
      for (int32_t s = 0; s < g->kernel_w; ++s) {
        __m512 v;
        if (sw == 1) {
          v = _mm512_mask_loadu_ps(fill, inside_lo[s], row + s);
        } else {
          const __m512 lo = _mm512_mask_loadu_ps(fill, inside_lo[s], row + s);
          const __m512 hi = _mm512_mask_loadu_ps(fill, inside_hi[s], row + s + 16);
          v = _mm512_permutex2var_ps(lo, even, hi);
        }
        if (is_max) {
          /* v > acc ? v : acc (max_ps returns its second operand unless the first is greater,
           * so a NaN acc stays), then a NaN v wins */
          acc = _mm512_mask_mov_ps(_mm512_max_ps(v, acc), _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q),
                                   v);
        } else {
          acc = _mm512_add_ps(acc, v);
        }
      }
    }
    if (!is_max) {
      __m512 d;
      if (g->count_include_pad) {
        d = _mm512_set1_ps((float)(g->kernel_h * g->kernel_w));
      } else { /* per lane: the window's image columns times its image rows */
        const __m512i first = _mm512_sub_epi32(
            _mm512_mullo_epi32(_mm512_add_epi32(iota16(), _mm512_set1_epi32((int32_t)ox)),
                               _mm512_set1_epi32((int32_t)sw)),
            _mm512_set1_epi32(g->pad_left));
        const __m512i lo = _mm512_max_epi32(first, _mm512_setzero_si512());
        const __m512i hi = _mm512_min_epi32(
            _mm512_add_epi32(first, _mm512_set1_epi32(g->kernel_w)), _mm512_set1_epi32(g->w));
        const __m512i cols = _mm512_max_epi32(_mm512_sub_epi32(hi, lo), _mm512_set1_epi32(1));
        d = _mm512_cvtepi32_ps(_mm512_mullo_epi32(cols, _mm512_set1_epi32(r1 - r0)));
      }
      acc = _mm512_div_ps(acc, d);
    }
    _mm512_mask_storeu_ps(out + (int64_t)oy * g->out_w + ox, store, acc);
  }
}

/* Max pooling of a plane in two passes: each input row's maxima over the window's columns
 * once (a ring of the last kernel_h rows), then each output row's maximum over its rows: an
 * input row serves every output row whose window holds it (ResNet's 3x3/2 pool: 1.5 each).
 * Without NaN, v > acc ? v : acc in any grouping keeps the first largest tap met in the
 * rows-then-columns order, so the bits are the tap-by-tap loop's (+0 and -0 included). A NaN
 * must win wherever it is: returns 0 when the plane holds one, and the caller pools it tap
 * by tap. */
enum { RING_FLOATS = 8192 };

static int pool_plane_max_rows(const pdp_geometry* g, const float* in, float* out) {
  const int64_t sw = g->stride_w, W = g->w, ow = g->out_w, kh = g->kernel_h;
  const int64_t ldr = (ow + 15) & ~(int64_t)15;
  if (kh * ldr > RING_FLOATS) return 0;
  float ring[RING_FLOATS] __attribute__((aligned(64)));
  const __m512 fill = _mm512_set1_ps(-INFINITY);
  const __m512i even = _mm512_add_epi32(iota16(), iota16());
  __mmask16 nan = 0;
  int64_t next = 0; /* the first input row not in the ring yet */
  for (int32_t oy = 0; oy < g->out_h; ++oy) {
    int32_t y0, r0, r1;
    pool_window(oy, g->stride_h, g->pad_top, g->kernel_h, g->h, &y0, &r0, &r1);
    if (next < y0 + r0) next = y0 + r0;
    for (; next < y0 + r1; ++next) { /* row next's maxima over each output's columns */
      const float* row = in + next * W - g->pad_left;
      float* h = ring + (next % kh) * ldr;
      if (sw == 2 && g->kernel_w == 3) {
        /* ResNet's 3x3/2: the 33 input columns of 16 outputs from two loads and one lane,
         * the taps their even, odd and next even columns, in the taps' order (was: two loads
         * per tap) */
        const __m512i even2 = _mm512_add_epi32(even, _mm512_set1_epi32(2));
        for (int64_t ox = 0; ox < ow; ox += 16) {
          const int64_t base = 2 * ox - g->pad_left; /* input column of lane 0, tap 0 */
          const __m512 lo = _mm512_mask_loadu_ps(fill, columns_inside(base, W), row + 2 * ox);
          const __m512 hi =
              _mm512_mask_loadu_ps(fill, columns_inside(base + 16, W), row + 2 * ox + 16);
          const __mmask16 last = base + 32 >= 0 && base + 32 < W ? (__mmask16)0x8000 : 0;
          const __m512 t2 = _mm512_mask_loadu_ps( /* lane 15: column base + 32 */
              _mm512_mask_mov_ps(_mm512_permutex2var_ps(lo, even2, hi), 0x8000, fill), last,
              row + 2 * ox + 32 - 15);
          nan |= _mm512_cmp_ps_mask(lo, lo, _CMP_UNORD_Q);
          nan |= _mm512_cmp_ps_mask(hi, hi, _CMP_UNORD_Q);
          nan |= _mm512_cmp_ps_mask(t2, t2, _CMP_UNORD_Q);
          __m512 acc = _mm512_max_ps(_mm512_permutex2var_ps(lo, even, hi), fill);
          acc = _mm512_max_ps(_mm512_permutex2var_ps(lo, lanes_odd(), hi), acc);
          acc = _mm512_max_ps(t2, acc); /* v > acc ? v : acc, tap by tap */
          _mm512_store_ps(h + ox, acc);
        }
        continue;
      }
      for (int64_t ox = 0; ox < ow; ox += 16) {
        __m512 acc = fill;
        for (int32_t s = 0; s < g->kernel_w; ++s) {
          const int64_t base = ox * sw - g->pad_left + s; /* input column of lane 0 */
          __m512 v;
          if (sw == 1) {
            v = _mm512_mask_loadu_ps(fill, columns_inside(base, W), row + ox + s);
          } else {
            const __m512 lo = _mm512_mask_loadu_ps(fill, columns_inside(base, W), row + 2 * ox + s);
            const __m512 hi =
                _mm512_mask_loadu_ps(fill, columns_inside(base + 16, W), row + 2 * ox + s + 16);
            v = _mm512_permutex2var_ps(lo, even, hi);
          }
          nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
          acc = _mm512_max_ps(v, acc); /* v > acc ? v : acc */
        }
        _mm512_store_ps(h + ox, acc);
      }
    }
    for (int64_t ox = 0; ox < ow; ox += 16) {
      __m512 acc = fill;
      for (int32_t r = r0; r < r1; ++r)
        acc = _mm512_max_ps(_mm512_load_ps(ring + ((y0 + r) % kh) * ldr + ox), acc);
      const int64_t live = ow - ox < 16 ? ow - ox : 16;
      _mm512_mask_storeu_ps(out + (int64_t)oy * ow + ox, (__mmask16)((1u << live) - 1u), acc);
    }
  }
  return nan == 0;
}
#endif

#if !defined(__AVX512F__) && defined(__AVX2__)
/* The AVX-512 paths below in 8 lanes (an AVX2 build): the same taps in the same order, the
 * same fills (-inf for max, +0 for the average) where a tap lies outside the image columns,
 * the same per-lane divisor; so the same bits (pool_row_vector, pool_plane_max_rows, and
 * pool_tile with 8 planes a step). */
static inline __m256i iota8(void) { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }

/* Columns base .. base + 7 from p (p's lane 0 is column base), fill outside [0, w). */
static inline __m256 load_columns8(const float* p, int64_t base, int64_t w, __m256 fill) {
  if (base >= 0 && base + 8 <= w) return _mm256_loadu_ps(p);
  const __m256i m = lanes_inside8(base, w);
  return _mm256_blendv_ps(fill, _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
}

/* v > acc ? v : acc (MAXPS returns its second operand unless the first is greater, so a NaN
 * acc stays), then a NaN v wins. */
static inline __m256 max_tap8(__m256 acc, __m256 v) {
  return _mm256_blendv_ps(_mm256_max_ps(v, acc), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

/* acc + v with acc as the first source: of two NaNs the sum keeps acc's, as the scalar loop's
 * acc += v (a compiler may swap an intrinsic's operands, to fold a load into the second). */
static inline __m256 add_to8(__m256 acc, __m256 v) {
  __m256 sum;
  __asm__("vaddps %2, %1, %0" : "=x"(sum) : "x"(acc), "xm"(v));
  return sum;
}

static inline __m256i first_lanes8(int64_t live) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)live), iota8());
}

/* Columns from p under the mask m (all ones: lanes whose column lies in the image), fill
 * elsewhere: load_columns8 with its mask made once. */
static inline __m256 load_masked8(const float* p, __m256i m, __m256 fill) {
  return _mm256_blendv_ps(fill, _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
}

/* pool_row_vector in 8 lanes: output row oy, 8 columns at a time (strides 1 and 2). A
 * vector whose taps reach past an image side makes each load's mask once for all its rows
 * (as pool_row_vector does), not once per tap and row. */
static void pool_row_vector8(const pdp_geometry* g, const float* in, float* out, int32_t oy) {
  const int is_max = g->pool == ACCEL_POOL_MAX;
  const int64_t sw = g->stride_w, W = g->w, kw = g->kernel_w;
  const __m256 fill = _mm256_set1_ps(is_max ? -INFINITY : 0.0f);
  int32_t y0, r0, r1;
  pool_window(oy, g->stride_h, g->pad_top, g->kernel_h, g->h, &y0, &r0, &r1);
  for (int64_t ox = 0; ox < g->out_w; ox += 8) {
    const int64_t live = g->out_w - ox < 8 ? g->out_w - ox : 8;
    const int64_t base = ox * sw - g->pad_left; /* input column of lane 0, tap 0 */
    /* the loads' offsets from base: stride 1, tap s's at s; stride 2, the pair of taps s and
     * s + 1 (s even) at s and s + 8, so the last load ends at column base + last */
    const int64_t last = sw == 1 ? kw - 1 + 7 : ((kw - 1) & ~(int64_t)1) + 15;
    const int edge = base < 0 || base + last >= W;
    __m256i inside[ACCEL_MAX_POOL_KERNEL + 1]; /* the mask of the load at offset s (+ 8) */
    if (edge) {
      for (int64_t s = 0; s < kw; s += sw) {
        inside[s] = lanes_inside8(base + s, W);
        if (sw == 2) inside[s + 1] = lanes_inside8(base + s + 8, W);
      }
    }
    __m256 acc = fill;
    for (int32_t r = r0; r < r1; ++r) {
      const float* row = in + (int64_t)(y0 + r) * W + base;
      for (int32_t s = 0; s < kw; ++s) {
        __m256 v;
        if (sw == 1) {
          v = edge ? load_masked8(row + s, inside[s], fill) : _mm256_loadu_ps(row + s);
        } else { /* taps s and s + 1 from one pair of loads */
          const __m256 lo =
              edge ? load_masked8(row + s, inside[s], fill) : _mm256_loadu_ps(row + s);
          const __m256 hi =
              edge ? load_masked8(row + s + 8, inside[s + 1], fill) : _mm256_loadu_ps(row + s + 8);
          v = even_lanes8(lo, hi);
          if (s + 1 < g->kernel_w) {
            acc = is_max ? max_tap8(acc, v) : add_to8(acc, v);
            v = odd_lanes8(lo, hi);
            ++s;
          }
        }
        acc = is_max ? max_tap8(acc, v) : add_to8(acc, v);
      }
    }
    if (!is_max) {
      __m256 d;
      if (g->count_include_pad) {
        d = _mm256_set1_ps((float)(g->kernel_h * g->kernel_w));
      } else { /* per lane: the window's image columns times its image rows */
        const __m256i first = _mm256_sub_epi32(
            _mm256_mullo_epi32(_mm256_add_epi32(iota8(), _mm256_set1_epi32((int32_t)ox)),
                               _mm256_set1_epi32((int32_t)sw)),
            _mm256_set1_epi32(g->pad_left));
        const __m256i lo = _mm256_max_epi32(first, _mm256_setzero_si256());
        const __m256i hi = _mm256_min_epi32(
            _mm256_add_epi32(first, _mm256_set1_epi32(g->kernel_w)), _mm256_set1_epi32(g->w));
        const __m256i cols = _mm256_max_epi32(_mm256_sub_epi32(hi, lo), _mm256_set1_epi32(1));
        d = _mm256_cvtepi32_ps(_mm256_mullo_epi32(cols, _mm256_set1_epi32(r1 - r0)));
      }
      acc = _mm256_div_ps(acc, d);
    }
    float* dst = out + (int64_t)oy * g->out_w + ox;
    if (live == 8) {
      _mm256_storeu_ps(dst, acc);
    } else {
      _mm256_maskstore_ps(dst, first_lanes8(live), acc);
    }
  }
}

/* One input row's maxima over the kw taps of 8 outputs from output column ox (lane 0's tap 0
 * at input column base; row points at the row's column 0 less the left padding), taps in
 * order; *probe gets the sum of each lane's taps, NaN where a tap is (one add a tap instead of
 * a test a tap). KW and SW are constants in the common geometries (the tap loop unrolls);
 * EDGE 0 where every load lies inside the row (no mask, no test a load). */
static inline __attribute__((always_inline)) __m256 row_taps8(const float* row, int64_t ox,
                                                              int64_t base, int64_t W,
                                                              const int64_t kw, const int64_t sw,
                                                              const int edge, __m256 fill,
                                                              __m256* probe) {
  __m256 acc = fill, sum = _mm256_setzero_ps();
  for (int64_t s = 0; s < kw; ++s) {
    if (sw == 1) {
      const __m256 v =
          edge ? load_columns8(row + ox + s, base + s, W, fill) : _mm256_loadu_ps(row + ox + s);
      sum = _mm256_add_ps(sum, v);
      acc = _mm256_max_ps(v, acc); /* v > acc ? v : acc */
      continue;
    }
    /* stride 2: taps s and s + 1 are the even and odd lanes of one pair of loads; the probe
     * takes the taps, not the loads (an odd kernel's last pair's odd lanes are the next
     * vector's columns) */
    const float* p = row + 2 * ox + s;
    const __m256 lo = edge ? load_columns8(p, base + s, W, fill) : _mm256_loadu_ps(p);
    const __m256 hi = edge ? load_columns8(p + 8, base + s + 8, W, fill) : _mm256_loadu_ps(p + 8);
    const __m256 even = even_lanes8(lo, hi);
    sum = _mm256_add_ps(sum, even);
    acc = _mm256_max_ps(even, acc);
    if (s + 1 < kw) {
      const __m256 odd = odd_lanes8(lo, hi);
      sum = _mm256_add_ps(sum, odd);
      acc = _mm256_max_ps(odd, acc);
    }
    ++s;
  }
  *probe = sum;
  return acc;
}

/* Row `row`'s maxima into h (ldr floats) for every output column, and the NaN test's lanes
 * or-ed into *nan: the sum of a lane's taps is NaN where a tap is, or where +inf meets -inf
 * (a padding column's or the data's) or the sum overflows into it; the caller then pools the
 * plane tap by tap, with the same bits. The lanes past the plane's last output read columns
 * its windows may not read (at stride 2, those past the last window: an unpadded pool's last
 * column on an even width), so the last partial vector's are masked; every column a window
 * reads, a lane below reads. */
static inline __attribute__((always_inline)) void row_maxima8(const float* row, float* h,
                                                              int64_t ow, int64_t W,
                                                              int64_t pad_left, const int64_t kw,
                                                              const int64_t sw, __m256 fill,
                                                              __m256* nan) {
  /* the loads' reach from base: stride 1, kw - 1 + 8 columns; stride 2, pairs of 16 */
  const int64_t last = sw == 1 ? kw - 1 + 7 : ((kw - 1) & ~(int64_t)1) + 15;
  for (int64_t ox = 0; ox < ow; ox += 8) {
    const int64_t base = ox * sw - pad_left; /* input column of lane 0, tap 0 */
    __m256 probe, acc;
    if (base < 0 || base + last >= W) {
      acc = row_taps8(row, ox, base, W, kw, sw, 1, fill, &probe);
    } else {
      acc = row_taps8(row, ox, base, W, kw, sw, 0, fill, &probe);
    }
    __m256 unord = _mm256_cmp_ps(probe, probe, _CMP_UNORD_Q);
    if (ow - ox < 8) unord = _mm256_and_ps(unord, _mm256_castsi256_ps(first_lanes8(ow - ox)));
    *nan = _mm256_or_ps(*nan, unord);
    _mm256_store_ps(h + ox, acc);
  }
}

/* pool_plane_max_rows in 8 lanes: each input row's maxima over the window's columns once (a
 * ring of the last kernel_h rows), then each output row's maximum over its rows; the same
 * grouping argument (no NaN: the first largest tap stays in any grouping of v > acc ? v :
 * acc), so 0 where the plane may hold a NaN (row_maxima8). The row pass has its own copies
 * for ResNet's 3x3/2 and the 3x3/1 and 5x5/1 kernels (SPPF's), the taps unrolled. */
enum { RING_FLOATS = 8192 };

static int pool_plane_max_rows8(const pdp_geometry* g, const float* in, float* out) {
  const int64_t sw = g->stride_w, W = g->w, ow = g->out_w, kh = g->kernel_h, kw = g->kernel_w;
  const int64_t ldr = (ow + 7) & ~(int64_t)7;
  if (kh * ldr > RING_FLOATS) return 0;
  float ring[RING_FLOATS] __attribute__((aligned(32)));
  const __m256 fill = _mm256_set1_ps(-INFINITY);
  __m256 nan = _mm256_setzero_ps();
  int64_t next = 0; /* the first input row not in the ring yet */
  for (int32_t oy = 0; oy < g->out_h; ++oy) {
    int32_t y0, r0, r1;
    pool_window(oy, g->stride_h, g->pad_top, g->kernel_h, g->h, &y0, &r0, &r1);
    if (next < y0 + r0) next = y0 + r0;
    for (; next < y0 + r1; ++next) { /* row next's maxima over each output's columns */
      const float* row = in + next * W - g->pad_left;
      float* h = ring + (next % kh) * ldr;
      if (kw == 3 && sw == 2) {
        row_maxima8(row, h, ow, W, g->pad_left, 3, 2, fill, &nan);
      } else if (kw == 3 && sw == 1) {
        row_maxima8(row, h, ow, W, g->pad_left, 3, 1, fill, &nan);
      } else if (kw == 5 && sw == 1) {
        row_maxima8(row, h, ow, W, g->pad_left, 5, 1, fill, &nan);
      } else {
        row_maxima8(row, h, ow, W, g->pad_left, kw, sw, fill, &nan);
      }
    }
    const float* rows[ACCEL_MAX_POOL_KERNEL]; /* the window's ring rows, in order */
    for (int32_t r = r0; r < r1; ++r) rows[r - r0] = ring + ((y0 + r) % kh) * ldr;
    for (int64_t ox = 0; ox < ow; ox += 8) {
      __m256 acc = fill;
      for (int32_t r = 0; r < r1 - r0; ++r) acc = _mm256_max_ps(_mm256_load_ps(rows[r] + ox), acc);
      const int64_t live = ow - ox < 8 ? ow - ox : 8;
      float* dst = out + (int64_t)oy * ow + ox;
      if (live == 8) {
        _mm256_storeu_ps(dst, acc);
      } else {
        _mm256_maskstore_ps(dst, first_lanes8(live), acc);
      }
    }
  }
  return _mm256_movemask_ps(nan) == 0;
}
#endif

/* Average: output columns [ox_lo, ox_hi) of row oy whose windows lie inside the image columns,
 * side by side: each window's taps in its own order (rows, then columns) and the same scalar
 * adds as pool_row_scalar (NaN payloads too), but the windows' chains interleaved (one window
 * alone is a chain of dependent adds: an 8x8 average, a wide pool's pass, waited for 64 adds'
 * latency per output). Kept scalar: a vectorised loop could swap an add's operands, and
 * gathering the taps of 16 windows into lanes measured slower than the scalar loop. */
enum { ROW_BLOCK = 64 };

__attribute__((optimize("no-tree-vectorize"))) static void pool_row_inside(
    const pdp_geometry* g, const float* in, float* out, int32_t oy, int32_t ox_lo,
    int32_t ox_hi) {
  const int32_t kw = g->kernel_w, sw = g->stride_w;
  int32_t y0, r0, r1;
  pool_window(oy, g->stride_h, g->pad_top, g->kernel_h, g->h, &y0, &r0, &r1);
  const float divisor = g->count_include_pad ? (float)(g->kernel_h * kw) : (float)((r1 - r0) * kw);
  float acc[ROW_BLOCK];
  for (int32_t b = ox_lo; b < ox_hi; b += ROW_BLOCK) {
    const int32_t n = ox_hi - b < ROW_BLOCK ? ox_hi - b : ROW_BLOCK;
    for (int32_t j = 0; j < n; ++j) acc[j] = 0.0f;
    for (int32_t r = r0; r < r1; ++r) {
      const float* row = in + (int64_t)(y0 + r) * g->w + (int64_t)b * sw - g->pad_left;
      for (int32_t s = 0; s < kw; ++s)
        for (int32_t j = 0; j < n; ++j) acc[j] += row[(int64_t)j * sw + s];
    }
    float* dst = out + (int64_t)oy * g->out_w + b;
    for (int32_t j = 0; j < n; ++j) dst[j] = acc[j] / divisor;
  }
}

static void pool_plane(const pdp_geometry* g, const float* in, float* out) {
#ifdef __AVX512F__
  if (g->out_w >= 8 && (g->stride_w == 1 || g->stride_w == 2)) {
    if (g->pool == ACCEL_POOL_MAX && pool_plane_max_rows(g, in, out)) return;
    for (int32_t oy = 0; oy < g->out_h; ++oy) pool_row_vector(g, in, out, oy);
    return;
  }
#elif defined(__AVX2__)
  if (g->out_w >= 8 && (g->stride_w == 1 || g->stride_w == 2)) {
    if (g->pool == ACCEL_POOL_MAX && pool_plane_max_rows8(g, in, out)) return;
    for (int32_t oy = 0; oy < g->out_h; ++oy) pool_row_vector8(g, in, out, oy);
    return;
  }
#endif
  if (g->pool == ACCEL_POOL_AVG) {
    /* the columns whose windows lie inside the image: [lo, hi) */
    const int32_t sw = g->stride_w;
    int32_t lo = (g->pad_left + sw - 1) / sw;
    int32_t hi = g->w >= g->kernel_w ? (g->w - g->kernel_w + g->pad_left) / sw + 1 : 0;
    if (hi > g->out_w) hi = g->out_w;
    if (lo > hi) lo = hi;
    for (int32_t oy = 0; oy < g->out_h; ++oy) {
      pool_row_scalar(g, in, out, oy, 0, lo);
      pool_row_inside(g, in, out, oy, lo, hi);
      pool_row_scalar(g, in, out, oy, hi, g->out_w);
    }
    return;
  }
  for (int32_t oy = 0; oy < g->out_h; ++oy) pool_row_scalar(g, in, out, oy, 0, g->out_w);
}

/* Planes [0, planes) pooled to one output each (global pooling): the windows of 8 planes at
 * a time, tap by tap in the scalar order, so 8 independent chains of adds or compares instead
 * of one (a 7x7 average is otherwise 49 dependent adds per plane). */
enum { GLOBAL_BLOCK = 8 };

/* A global pool's one window: rows [r0, r1) from y0, columns [s0, s1) from x0 of each plane,
 * and its average's divisor. */
typedef struct global_window {
  int32_t y0, r0, r1, x0, s0, s1;
  float divisor;
} global_window;

static global_window global_window_of(const pdp_geometry* g) {
  global_window win;
  pool_window(0, g->stride_h, g->pad_top, g->kernel_h, g->h, &win.y0, &win.r0, &win.r1);
  pool_window(0, g->stride_w, g->pad_left, g->kernel_w, g->w, &win.x0, &win.s0, &win.s1);
  win.divisor = g->count_include_pad ? (float)(g->kernel_h * g->kernel_w)
                                     : (float)((win.r1 - win.r0) * (win.s1 - win.s0));
  return win;
}

static void pool_global(const pdp_geometry* g, const float* in, float* out, int64_t planes) {
  const int is_max = g->pool == ACCEL_POOL_MAX;
  const int64_t hw = (int64_t)g->h * g->w;
  const global_window win = global_window_of(g);
  int64_t p0 = 0;
  for (; p0 + GLOBAL_BLOCK <= planes; p0 += GLOBAL_BLOCK) {
    float acc[GLOBAL_BLOCK];
    for (int j = 0; j < GLOBAL_BLOCK; ++j) acc[j] = is_max ? -INFINITY : 0.0f;
    for (int32_t r = win.r0; r < win.r1; ++r) {
      const float* row = in + p0 * hw + (int64_t)(win.y0 + r) * g->w + win.x0;
      for (int32_t s = win.s0; s < win.s1; ++s) {
        for (int j = 0; j < GLOBAL_BLOCK; ++j) {
          const float v = row[j * hw + s];
          if (is_max) {
            acc[j] = (v > acc[j] || v != v) ? v : acc[j]; /* NaN wins, as in NumPy */
          } else {
            acc[j] += v;
          }
        }
      }
    }
    for (int j = 0; j < GLOBAL_BLOCK; ++j) out[p0 + j] = is_max ? acc[j] : acc[j] / win.divisor;
  }
  for (; p0 < planes; ++p0) pool_row_scalar(g, in + p0 * hw, out + p0, 0, 0, 1);
}

#if defined(__AVX512F__) || defined(__AVX2__)
/* Averages over windows that tile the image (kernel = stride, no padding, every window
 * inside: a wide pool's passes, 8x8/8 on 112x112) with too few or too wide windows for
 * pool_row_vector: 16 planes at a time (8 in an AVX2 build), a plane per lane, so each
 * window's sum is one vector add per tap, in the scalar order (row by row, left to right, from
 * +0). The rows of the planes are read a vector of columns at a time and transposed in
 * registers. */
#ifdef __AVX512F__
enum { TILE_PLANES = 16, TILE_MAX_OUT_W = 64 };
#else
enum { TILE_PLANES = 8, TILE_MAX_OUT_W = 64 };
#endif

/* Global pooling in vectors (pool_global_lanes): a plane per lane, TILE_PLANES planes a vector,
 * GLOBAL_GROUPS vectors side by side, as one vector's adds are a chain of dependent adds
 * (measured: docs/kernels.md, pdp.c). */
enum { GLOBAL_GROUPS = 2, GLOBAL_PLANES = TILE_PLANES * GLOBAL_GROUPS };

/* The taps of a global pool's window as rows of n taps, the first at `start` of a plane, a row
 * every w floats: a window of whole rows (every unpadded global pool) is one run in memory,
 * read as one row. */
typedef struct global_run {
  int64_t start, n;
  int32_t rows;
} global_run;

static global_run global_run_of(const pdp_geometry* g, const global_window* win) {
  const int whole_rows = win->x0 + win->s0 == 0 && win->s1 - win->s0 == g->w;
  return (global_run){
      .start = (int64_t)(win->y0 + win->r0) * g->w + win->x0 + win->s0,
      .n = whole_rows ? (int64_t)(win->r1 - win->r0) * g->w : win->s1 - win->s0,
      .rows = whole_rows ? 1 : win->r1 - win->r0};
}

static int pool_tiles_fit(const pdp_geometry* g) {
  /* windows past the right edge read no column of the image there: +0 for a sum that counts
   * them (x + 0 = x from +0 on), -inf for a max (never taken); an average that does not count
   * them divides by fewer taps, which the tiles do not */
  const int right_padding = (int64_t)g->out_w * g->kernel_w > g->w;
  return (g->pool == ACCEL_POOL_MAX || (g->pool == ACCEL_POOL_AVG &&
                                        (g->count_include_pad || !right_padding))) &&
         g->kernel_h == g->stride_h && g->kernel_w == g->stride_w && g->pad_top == 0 &&
         g->pad_left == 0 && (int64_t)g->out_h * g->kernel_h <= g->h &&
         (int64_t)(g->out_w - 1) * g->kernel_w < g->w && g->out_w <= TILE_MAX_OUT_W &&
         (int64_t)g->out_h * g->out_w > 1 &&
         !(g->out_w >= 8 && g->stride_w <= 2); /* pool_plane's vector rows take those */
}
#endif

#ifdef __AVX512F__

/* v[c] = column c of the 16 x 16 block whose rows are v[0..15]. */
static inline void transpose16(__m512 v[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]);
  }
  /* u[4 i + k], 128-bit lane L: rows 4i .. 4i+3 at column 4L + k */
  __m512 u[16];
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int k = 0; k < 4; ++k) {
    const __m512 a = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x44);
    const __m512 b = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xEE);
    const __m512 c = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x44);
    const __m512 d = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xEE);
    v[k] = _mm512_shuffle_f32x4(a, c, 0x88);
    v[4 + k] = _mm512_shuffle_f32x4(a, c, 0xDD);
    v[8 + k] = _mm512_shuffle_f32x4(b, d, 0x88);
    v[12 + k] = _mm512_shuffle_f32x4(b, d, 0xDD);
  }
}

/* acc + v with acc as the first source: of two NaNs the sum keeps acc's, as the scalar loop's
 * acc += v (a compiler may swap an intrinsic's operands, to fold a load into the second). */
static inline __m512 add_to(__m512 acc, __m512 v) {
  __m512 sum;
  __asm__("vaddps %2, %1, %0" : "=v"(sum) : "v"(acc), "vm"(v));
  return sum;
}

/* v > acc ? v : acc (MAXPS returns its second operand unless the first is greater, so a NaN
 * acc stays), and a NaN v wins (pool_row_vector's): the maximum taken only in the lanes whose
 * v is a number, v kept in the others (one masked MAXPS: a compare and two operations before) */
static inline __m512 max_tap16(__m512 acc, __m512 v) {
  return _mm512_mask_max_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v, acc);
}

/* pool_tile: 16 planes at a time, a plane per lane. A tap's window advances without a division
 * (one a block of 16 columns), and a window's running value stays in a register for its block
 * (windows of 8 columns, a wide pool's 8x8 passes and attention's softmax passes: two a
 * block); the outputs go back to their planes 16 columns at a time through the transpose where
 * a row has 16. Zen 5 (2026-12-01): with a tap's window found by a division and its
 * accumulator in an array indexed at run time, the 8x8/8 pass of 32 x 112x112 took 0.43
 * cycles a value (C harness, docs/kernels.md, pdp.c). The same taps in the same order as
 * before, so the same bits. */
static inline __attribute__((always_inline)) void pool_tile_body(const pdp_geometry* g,
                                                                 const float* in, float* out,
                                                                 const int is_max, const int np) {
  const int64_t hw = (int64_t)g->h * g->w, ohw = (int64_t)g->out_h * g->out_w;
  const int32_t kh = g->kernel_h, kw = g->kernel_w, ow = g->out_w, cols = ow * kw;
  const int32_t inside = cols < g->w ? cols : g->w; /* the image columns the windows read */
  const __m512 fill = _mm512_set1_ps(is_max ? -INFINITY : 0.0f);
  const __m512 divisor = _mm512_set1_ps((float)(kh * kw));
  __m512 acc[TILE_MAX_OUT_W];
  for (int32_t oy = 0; oy < g->out_h; ++oy) {
    for (int32_t j = 0; j < ow; ++j) acc[j] = fill;
    for (int32_t r = 0; r < kh; ++r) {
      const float* row = in + (int64_t)(oy * kh + r) * g->w;
      for (int32_t c0 = 0; c0 < cols; c0 += 16) {
        const int32_t n = cols - c0 < 16 ? cols - c0 : 16;
        const int32_t live = inside - c0 < 0 ? 0 : inside - c0 < 16 ? inside - c0 : 16;
        const __mmask16 m = (__mmask16)((1u << live) - 1u);
        __m512 v[16];
        if (live == 16) {
          for (int p = 0; p < TILE_PLANES; ++p)
            v[p] = p < np ? _mm512_loadu_ps(row + p * hw + c0) : fill;
        } else {
          for (int p = 0; p < TILE_PLANES; ++p)
            v[p] = p < np ? _mm512_mask_loadu_ps(fill, m, row + p * hw + c0) : fill;
        }
        transpose16(v);
        int32_t j = c0 / kw;
        if (kw == 8) { /* the block is windows j and j + 1 (n = 16), or j alone (n = 8) */
          for (int32_t h = 0; h < n; h += 8) {
            __m512 a = acc[j];
            for (int32_t c = 0; c < 8; ++c)
              a = is_max ? max_tap16(a, v[h + c]) : add_to(a, v[h + c]);
            acc[j++] = a;
          }
          continue;
        }
        /* window j's running value in a register, stored when the window or block ends
         * (through the array at every tap, each add waited on a store's forwarding) */
        int32_t at = c0 - j * kw; /* tap c0's column in its window */
        __m512 a = acc[j];
        for (int32_t c = 0; c < n; ++c) {
          a = is_max ? max_tap16(a, v[c]) : add_to(a, v[c]);
          if (++at == kw) {
            acc[j] = a;
            at = 0;
            if (++j == ow) break; /* the row's last tap */
            a = acc[j];
          }
        }
        if (j < ow) acc[j] = a;
      }
    }
    if (!is_max)
      for (int32_t j = 0; j < ow; ++j) acc[j] = _mm512_div_ps(acc[j], divisor);
    int32_t j0 = 0;
    for (; j0 + 16 <= ow; j0 += 16) { /* lane p of acc[j0 + k]: plane p's output j0 + k */
      __m512 t[16];
      for (int k = 0; k < 16; ++k) t[k] = acc[j0 + k];
      transpose16(t);
      for (int p = 0; p < np; ++p) _mm512_storeu_ps(out + p * ohw + (int64_t)oy * ow + j0, t[p]);
    }
    if (j0 < ow) { /* the row's last ow - j0 < 16 outputs: one transpose, stores of that many
                    * lanes (element by element through memory, they cost ViT's softmax max
                    * and sum passes of 25 outputs a row a tenth of their time) */
      const __mmask16 last = (__mmask16)((1u << (ow - j0)) - 1u);
      __m512 t[16];
      for (int k = 0; k < 16; ++k) t[k] = j0 + k < ow ? acc[j0 + k] : fill;
      transpose16(t);
      for (int p = 0; p < np; ++p)
        _mm512_mask_storeu_ps(out + p * ohw + (int64_t)oy * ow + j0, last, t[p]);
    }
  }
}

/* Global pooling (pool_global) in 16 lanes: the window's taps are read 16 at a time from 16
 * planes and transposed, then taken tap by tap in the scalar order (rows, then columns), so
 * the same bits as pool_global. (The AVX2 build's form in zmm registers: Zen 5 runs 512-bit
 * shuffles and adds at full width.) rows rows of n taps each, the first at in + start, a row
 * every stride floats. */
static inline __attribute__((always_inline)) void global_groups(
    const pdp_geometry* g, const float* in, float* out, int groups, int64_t start, int32_t rows,
    int64_t n, int64_t stride, float divisor) {
  const int is_max = g->pool == ACCEL_POOL_MAX;
  const int64_t hw = (int64_t)g->h * g->w;
  __m512 acc[GLOBAL_GROUPS];
  for (int k = 0; k < groups; ++k) acc[k] = _mm512_set1_ps(is_max ? -INFINITY : 0.0f);
  for (int32_t r = 0; r < rows; ++r) {
    const float* row = in + start + r * stride;
    for (int64_t c0 = 0; c0 < n; c0 += 16) {
      const int32_t taps = n - c0 < 16 ? (int32_t)(n - c0) : 16;
      const __mmask16 m = (__mmask16)((1u << taps) - 1u); /* lanes past the window: not read */
      for (int k = 0; k < groups; ++k) {
        __m512 v[16];
        for (int p = 0; p < 16; ++p) {
          const float* src = row + (int64_t)(16 * k + p) * hw + c0;
          v[p] = taps == 16 ? _mm512_loadu_ps(src) : _mm512_maskz_loadu_ps(m, src);
        }
        transpose16(v);
        for (int32_t c = 0; c < taps; ++c)
          acc[k] = is_max ? max_tap16(acc[k], v[c]) : add_to(acc[k], v[c]);
      }
    }
  }
  const __m512 d = _mm512_set1_ps(divisor);
  for (int k = 0; k < groups; ++k)
    _mm512_storeu_ps(out + 16 * k, is_max ? acc[k] : _mm512_div_ps(acc[k], d));
}

#elif defined(__AVX2__)
/* v[c] = column c of the 8 x 8 block whose rows are v[0..7]. */
static inline void transpose8(__m256 v[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]);
  }
  /* u[4 h + k], 128-bit lane L: rows 4h .. 4h+3 at column 4L + k */
  for (int h = 0; h < 2; ++h) {
    u[4 * h] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x20);
    v[4 + k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x31);
  }
}

/* pool_tile in 8 lanes: 8 planes at a time. A tap's window advances without a division (one a
 * block of 8 columns); windows of 8 columns (attention's softmax passes, a wide pool's 8x8
 * passes) are each one block of a row, their taps added in a register; the outputs go back to
 * their planes 8 columns at a time through the transpose (each a lane of its window's
 * vector). The same taps in the same order as before, so the same bits. */
static inline __attribute__((always_inline)) void pool_tile_body(const pdp_geometry* g,
                                                                 const float* in, float* out,
                                                                 const int is_max, const int np) {
  const int64_t hw = (int64_t)g->h * g->w, ohw = (int64_t)g->out_h * g->out_w;
  const int32_t kh = g->kernel_h, kw = g->kernel_w, ow = g->out_w, cols = ow * kw;
  const int32_t inside = cols < g->w ? cols : g->w; /* the image columns the windows read */
  const __m256 fill = _mm256_set1_ps(is_max ? -INFINITY : 0.0f);
  const __m256 divisor = _mm256_set1_ps((float)(kh * kw));
  __m256 acc[TILE_MAX_OUT_W];
  float avg[TILE_MAX_OUT_W][TILE_PLANES] __attribute__((aligned(32)));
  for (int32_t oy = 0; oy < g->out_h; ++oy) {
    for (int32_t j = 0; j < ow; ++j) acc[j] = fill;
    for (int32_t r = 0; r < kh; ++r) {
      const float* row = in + (int64_t)(oy * kh + r) * g->w;
      for (int32_t c0 = 0; c0 < cols; c0 += 8) {
        const int32_t n = cols - c0 < 8 ? cols - c0 : 8;
        __m256 v[8];
        for (int p = 0; p < TILE_PLANES; ++p)
          v[p] = p < np ? load_columns8(row + p * hw + c0, c0, inside, fill) : fill;
        transpose8(v);
        int32_t j = c0 / kw;
        if (kw == 8) { /* the block is window j: n = 8 */
          __m256 a = acc[j];
          for (int32_t c = 0; c < 8; ++c) a = is_max ? max_tap8(a, v[c]) : add_to8(a, v[c]);
          acc[j] = a;
          continue;
        }
        int32_t at = c0 - j * kw; /* tap c0's column in its window */
        for (int32_t c = 0; c < n; ++c) {
          acc[j] = is_max ? max_tap8(acc[j], v[c]) : add_to8(acc[j], v[c]);
          if (++at == kw) {
            at = 0;
            ++j;
          }
        }
      }
    }
    if (!is_max)
      for (int32_t j = 0; j < ow; ++j) acc[j] = _mm256_div_ps(acc[j], divisor);
    int32_t j0 = 0;
    for (; j0 + 8 <= ow; j0 += 8) { /* lane p of acc[j0 + k]: plane p's output j0 + k */
      __m256 t[8];
      for (int k = 0; k < 8; ++k) t[k] = acc[j0 + k];
      transpose8(t);
      for (int p = 0; p < np; ++p) _mm256_storeu_ps(out + p * ohw + (int64_t)oy * ow + j0, t[p]);
    }
    for (int32_t j = j0; j < ow; ++j) _mm256_store_ps(avg[j], acc[j]);
    for (int p = 0; p < np; ++p) {
      for (int32_t j = j0; j < ow; ++j) out[p * ohw + (int64_t)oy * ow + j] = avg[j][p];
    }
  }
}

/* Global pooling (pool_global) in 8 lanes: the window's taps are read 8 at a time from 8
 * planes and transposed, then taken tap by tap in the scalar order (rows, then columns), so
 * the same bits as pool_global. rows rows of n taps each, the first at in + start, a row every
 * stride floats. */
static inline __attribute__((always_inline)) void global_groups(
    const pdp_geometry* g, const float* in, float* out, int groups, int64_t start, int32_t rows,
    int64_t n, int64_t stride, float divisor) {
  const int is_max = g->pool == ACCEL_POOL_MAX;
  const int64_t hw = (int64_t)g->h * g->w;
  __m256 acc[GLOBAL_GROUPS];
  for (int k = 0; k < groups; ++k) acc[k] = _mm256_set1_ps(is_max ? -INFINITY : 0.0f);
  for (int32_t r = 0; r < rows; ++r) {
    const float* row = in + start + r * stride;
    for (int64_t c0 = 0; c0 < n; c0 += 8) {
      const int32_t taps = n - c0 < 8 ? (int32_t)(n - c0) : 8;
      const __m256i m = first_lanes8(taps); /* lanes past the window: not read, not taken */
      for (int k = 0; k < groups; ++k) {
        __m256 v[8];
        for (int p = 0; p < 8; ++p) {
          const float* src = row + (int64_t)(8 * k + p) * hw + c0;
          v[p] = taps == 8 ? _mm256_loadu_ps(src) : _mm256_maskload_ps(src, m);
        }
        transpose8(v);
        for (int32_t c = 0; c < taps; ++c)
          acc[k] = is_max ? max_tap8(acc[k], v[c]) : add_to8(acc[k], v[c]);
      }
    }
  }
  const __m256 d = _mm256_set1_ps(divisor);
  for (int k = 0; k < groups; ++k)
    _mm256_storeu_ps(out + 8 * k, is_max ? acc[k] : _mm256_div_ps(acc[k], d));
}

#endif

#if defined(__AVX512F__) || defined(__AVX2__)
/* np <= TILE_PLANES planes: a whole tile, or an image's last planes (planes % TILE_PLANES: the
 * lanes past them read nothing and store nothing), which took the scalar windows: on Zen 5 the
 * 15 planes left by ViT-Ti's 591 softmax rows cost its max pass of windows of 8 a fifth of its
 * time (docs/kernels.md, pdp.c). */
static void pool_tile(const pdp_geometry* g, const float* in, float* out, int np) {
  if (np == TILE_PLANES) {
    if (g->pool == ACCEL_POOL_MAX) {
      pool_tile_body(g, in, out, 1, TILE_PLANES);
    } else {
      pool_tile_body(g, in, out, 0, TILE_PLANES);
    }
  } else if (g->pool == ACCEL_POOL_MAX) {
    pool_tile_body(g, in, out, 1, np);
  } else {
    pool_tile_body(g, in, out, 0, np);
  }
}

/* Planes [0, the returned count), whole vectors of TILE_PLANES, pooled globally in lanes;
 * pool_global takes the rest. */
static int64_t pool_global_lanes(const pdp_geometry* g, const float* in, float* out,
                                 int64_t planes) {
  const int64_t hw = (int64_t)g->h * g->w;
  const global_window win = global_window_of(g);
  const global_run run = global_run_of(g, &win);
  int64_t p0 = 0;
  for (; p0 + GLOBAL_PLANES <= planes; p0 += GLOBAL_PLANES)
    global_groups(g, in + p0 * hw, out + p0, GLOBAL_GROUPS, run.start, run.rows, run.n, g->w,
                  win.divisor);
  for (; p0 + TILE_PLANES <= planes; p0 += TILE_PLANES)
    global_groups(g, in + p0 * hw, out + p0, 1, run.start, run.rows, run.n, g->w, win.divisor);
  return p0;
}
#endif

/* Planes, a few per pool_for item (about 16 KiB of input each; 16 with tiles). */
typedef struct pdp_job {
  const pdp_geometry* g;
  const float* in;
  float* out;
  int64_t planes, per_item;
  int tiles; /* pool_tile on every item (the last one's planes may be fewer) */
} pdp_job;

static void pdp_item(void* ctx, int64_t item, int participant) {
  const pdp_job* J = ctx;
  const pdp_geometry* g = J->g;
  const int64_t in_plane = (int64_t)g->h * g->w, out_plane = (int64_t)g->out_h * g->out_w;
  (void)participant;
  const int64_t first = item * J->per_item;
  const int64_t end = first + J->per_item < J->planes ? first + J->per_item : J->planes;
  if (out_plane == 1) {
    int64_t done = 0;
#if defined(__AVX512F__) || defined(__AVX2__)
    done = pool_global_lanes(g, J->in + first * in_plane, J->out + first, end - first);
#endif
    pool_global(g, J->in + (first + done) * in_plane, J->out + first + done,
                end - first - done);
    return;
  }
#if defined(__AVX512F__) || defined(__AVX2__)
  if (J->tiles) {
    pool_tile(g, J->in + first * in_plane, J->out + first * out_plane, (int)(end - first));
    return;
  }
#endif
  for (int64_t plane = first; plane < end; ++plane) {
    pool_plane(g, J->in + plane * in_plane, J->out + plane * out_plane);
  }
}

void pdp_f32(const pdp_geometry* g, const float* in, float* out, int32_t num_threads) {
  const int64_t planes = (int64_t)g->n * g->c;
  const int64_t in_plane = (int64_t)g->h * g->w;
  int tiles = 0;
  int64_t per_item = 4096 / (in_plane + 1) + 1;
#if defined(__AVX512F__) || defined(__AVX2__)
  /* global pooling: whole groups of pool_global_lanes' planes an item */
  if ((int64_t)g->out_h * g->out_w == 1)
    per_item = (per_item + GLOBAL_PLANES - 1) / GLOBAL_PLANES * GLOBAL_PLANES;
  tiles = planes >= TILE_PLANES && pool_tiles_fit(g);
  if (tiles) per_item = TILE_PLANES;
#endif
  const pdp_job J = {.g = g, .in = in, .out = out, .planes = planes, .per_item = per_item,
                     .tiles = tiles};
  pool_for(planes * in_plane > 32768 ? num_threads : 1, (planes + per_item - 1) / per_item,
           pdp_item, (void*)&J);
}
