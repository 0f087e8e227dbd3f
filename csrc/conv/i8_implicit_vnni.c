/* conv/i8_implicit_vnni.c - INT8 CONV by implicit GEMM on the padded, stride-phase-split copy
 * (impl "implicit_vnni").
 *
 * implicit GEMM (C/groups >= 2): vpdpbusd multiplies u8 by s8, so the input is copied once
 * per image with its sign bit flipped (u = in + 128; padding byte in_zero + 128), padded,
 * split into stride phases and 4 channels interleaved per position; depth step (c/4, r, s)
 * is that copy at a constant offset, over a grid of out_h rows of out_w + (largest column
 * shift) positions whose extra columns are computed and dropped. acc = sum(u * w) -
 * (128 + in_zero) * sum(w), modulo 2^32 (exact: the true sum fits int32), with the weight
 * sums kept beside the packed weights and the correction as the micro-kernel's initial
 * accumulator. Micro-kernel 8 channels x 48 positions, 24 zmm accumulators; tiles of up to
 * 8 panels, split between the threads so that the busiest has the fewest panels. Grouped
 * convolutions are one GEMM per group.
 */
#include "conv/i8.h"

#ifdef CONV_I8_VNNI
static accel_status conv_implicit(const plan* P, int32_t in_zero, const int8_t* in,
                                  const int8_t* apack, const int32_t* wsum, const int8_t* weights,
                                  int8_t* out, const sdp_i8* ep, workspace* ws, int nth) {
  const conv_geometry* g = P->g;
  imp_plan Q;
  i8_imp_make_plan(P, &Q);
  i8_imp_used_phases(P, &Q);
  const int64_t npanels = (Q.ncols + NR - 1) / NR;
  const int64_t tiles = i8_choose_tiles(npanels, P->mblocks, g->groups, nth);
  const int64_t units = g->groups * tiles * P->mblocks;
  if (nth > units) nth = (int)units;
  const int64_t nbuild = g->groups * P->c4 * Q.nph * Q.hq;
  const int pack_now = apack == NULL;
  int8_t* pdata = NULL;
  int32_t* psum = NULL;
  if (pack_now && !i8_reserve_packing(P, ws, &pdata, &psum, &apack, &wsum)) {
    return ACCEL_ERR_NO_MEMORY;
  }
  uint8_t* copy;
  int64_t* off;
  if (!i8_imp_reserve_copy(P, &Q, in_zero, ws, &copy, &off)) return ACCEL_ERR_NO_MEMORY;
  const int64_t ldt = (Q.wq + 16 + 63) & ~(int64_t)63;
  const size_t tile_bytes = (size_t)MR * TILE * NR * sizeof(int32_t);
  char* scratch[WS_THREAD_SLOTS];
  for (int t = 0; t < nth; ++t) {
    scratch[t] = workspace_get(ws, t, tile_bytes + (size_t)(4 * ldt));
    if (scratch[t] == NULL) return ACCEL_ERR_NO_MEMORY;
  }
  const bsrc B = {.base = copy, .group_bytes = Q.gbytes, .off = off, .ncols = Q.ncols,
                  .npanels = npanels, .tiles = tiles};
  /* copy rows in items of about 4 KiB (a claim per row would cost as much as a short row) */
  int64_t rows_per_item = 4096 / (Q.wq * 4) + 1;
  if (rows_per_item * 4 * nth > nbuild) rows_per_item = nbuild / (4 * nth) + 1;
  imp_job J = {.P = P, .Q = &Q, .B = &B, .in_zero = in_zero, .in = in, .weights = weights,
               .apack = apack, .wsum = wsum, .pdata = pdata, .psum = psum, .out = out,
               .ep = ep, .scratch = scratch, .tile_bytes = tile_bytes, .ldt = ldt,
               .rows_per_item = rows_per_item, .nbuild = nbuild, .tiles = tiles};
  if (!i8_imp_prepare_lanes(P, ep, ws, &J)) return ACCEL_ERR_NO_MEMORY;
  int64_t nbuild_items = (nbuild + rows_per_item - 1) / rows_per_item;
  if (imp_flat(g)) {
    J.flat_segs = (P->hw + FLAT_SEG - 1) / FLAT_SEG;
    nbuild_items = g->groups * P->c4 * J.flat_segs;
  } else if (imp_flat_s2(g, &Q)) {
    J.s2_pairs = 1;
    nbuild_items = g->groups * P->c4;
  } else {
    if (!i8_imp_plane_steps(P, &Q, ws, &J)) return ACCEL_ERR_NO_MEMORY;
    if (J.steps != NULL) nbuild_items = g->groups * P->c4;
  }
  if (pack_now) pool_for(nth, g->groups * P->mblocks, i8_imp_pack_item, &J);
  for (int64_t b = 0; b < g->n; ++b) { /* the copy is rebuilt for each image */
    J.b = b;
    pool_for(nth, nbuild_items, i8_imp_build_item, &J);
    pool_for(nth, units, i8_imp_unit_item, &J);
  }
  return ACCEL_OK;
}

static int implicit_applies(const conv_i8_call* c) { return c->P->cg != 1; }

static accel_status implicit_run(const conv_i8_call* c) {
  return conv_implicit(c->P, c->in_zero, c->in, c->apack, c->wsum, c->weights, c->out, c->ep,
                       c->ws, c->nth);
}

const conv_i8_impl conv_i8_implicit_vnni_impl = {.name = "implicit_vnni",
                                                 .applies = implicit_applies, .supports = NULL,
                                                 .run = implicit_run};
#endif /* CONV_I8_VNNI */
