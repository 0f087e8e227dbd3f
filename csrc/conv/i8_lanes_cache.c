/* conv/i8_lanes_cache.c - the channels' lane converters (sdp_i8_lanes.h) kept from run to
 * run, for every build (the VNNI GEMM's epilogue, the VBMI rows kernel and the AVX2 depthwise
 * kernel call it; the converters' forms exist in 16 and 8 lanes). */
#include "conv/i8.h"

/* Preparing them (sdp_i8_lanes_prepare, _add) costs tens of cycles per channel on every call:
 * 4 % of MobileNetV2's int8 time, 1.5 % of ResNet-50's (1 thread, perf on the Zen 4 machine;
 * docs/measurements.md; on an AVX2 build without the cache the depthwise kernel prepared
 * per call: docs/kernels.md). A device's workspace keeps the converters of the calls it ran in one
 * arena (slot WS_LANES), keyed by the SDP's scalars, its converter arrays (address and
 * contents: the bytes are compared on every hit, so an array rewritten in place, or another at
 * a freed one's address, prepares again) and the accumulators' bound; a network's layers hit in
 * the order they ran before. Full: emptied, and filled again. LUT activations are not kept
 * (their plan lives elsewhere, sdp_i8_lut.c). */
enum { LANES_ENTRIES = 256, LANES_ARENA = 4 << 20 };

typedef struct lanes_entry {
  const int32_t* bias;
  const int16_t* mul;
  const uint8_t* rshift;
  int64_t vmax, off;   /* off: the converters' offset in the arena, then the arrays' copies */
  int32_t k, ew_op, act, ew_zero, ew_mul, ew_shift, out_mul, out_shift, out_zero, clip_lo,
      clip_hi, shift_max;
  int32_t kind;        /* 0: no lane form, 1: the common converter, 2: the residual add */
  int8_t lo, hi;
  sdp_i8_lane_add add;
} lanes_entry;

typedef struct lanes_cache {
  int64_t n, used, next; /* entries, arena bytes used, the entry the next call likely hits */
  lanes_entry e[LANES_ENTRIES];
} lanes_cache;

static size_t lanes_bytes(int64_t k) {
  return round64((size_t)k * sizeof(sdp_i8_lane_cvt)) + round64((size_t)k * 7);
}

static int lanes_key_is(const lanes_entry* e, const sdp_i8* p, int64_t k, int64_t vmax) {
  return e->bias == p->bias && e->mul == p->mul && e->rshift == p->rshift && e->k == k &&
         e->vmax == vmax && e->ew_op == (int32_t)p->ew_op && e->act == (int32_t)p->act &&
         e->ew_zero == p->ew_zero && e->ew_mul == p->ew_mul && e->ew_shift == p->ew_shift &&
         e->out_mul == p->out_mul && e->out_shift == p->out_shift &&
         e->out_zero == p->out_zero && e->clip_lo == p->clip_lo && e->clip_hi == p->clip_hi &&
         e->shift_max == p->shift_max;
}

/* The arrays' copies after an entry's converters: bias (4k bytes), mul (2k), rshift (k). */
static int lanes_arrays_equal(const char* copy, const sdp_i8* p, int64_t k) {
  return (p->bias == NULL || memcmp(copy, p->bias, (size_t)k * 4) == 0) &&
         (p->mul == NULL || memcmp(copy + 4 * k, p->mul, (size_t)k * 2) == 0) &&
         (p->rshift == NULL || memcmp(copy + 6 * k, p->rshift, (size_t)k) == 0);
}

/* The converters of channels [0, k) of p for |v| <= vmax (sdp_i8_lanes_prepare, else _add),
 * from the cache or prepared into it: *kind 1 / 2 as above with *lo, *hi (and *add for 2), 0
 * without a lane form; NULL only when out of memory. add_ok: the caller takes the residual
 * add's form. */
const sdp_i8_lane_cvt* i8_lanes_cached(const sdp_i8* p, int64_t k, int64_t vmax, int add_ok,
                                       workspace* ws, int* kind, int8_t* lo, int8_t* hi,
                                       sdp_i8_lane_add* add) {
  *kind = 0;
  const int fresh = ws->bytes[WS_LANES] == 0;
  char* arena = workspace_get(ws, WS_LANES, LANES_ARENA);
  if (arena == NULL) return NULL;
  lanes_cache* C = (lanes_cache*)(void*)arena;
  if (fresh) C->n = C->used = C->next = 0;
  const int64_t header = (int64_t)round64(sizeof(lanes_cache));
  const int64_t need = (int64_t)lanes_bytes(k);
  if (header + need > LANES_ARENA || p->lut != NULL) { /* not kept: prepared into WS_CVT */
    sdp_i8_lane_cvt* cvt = workspace_get(ws, WS_CVT, (size_t)k * sizeof(sdp_i8_lane_cvt));
    if (cvt == NULL) return NULL;
    if (sdp_i8_lanes_prepare(p, 0, (int32_t)k, vmax, cvt, lo, hi)) *kind = 1;
    else if (add_ok && sdp_i8_lanes_prepare_add(p, 0, (int32_t)k, vmax, cvt, add, lo, hi))
      *kind = 2;
    return cvt;
  }
  for (int64_t j = 0; j < C->n; ++j) {
    const int64_t i = (C->next + j) % C->n;
    const lanes_entry* e = &C->e[i];
    if (!lanes_key_is(e, p, k, vmax)) continue;
    const char* cvt = arena + header + e->off;
    if (!lanes_arrays_equal(cvt + round64((size_t)k * sizeof(sdp_i8_lane_cvt)), p, k)) continue;
    C->next = i + 1 < C->n ? i + 1 : 0;
    *kind = e->kind == 2 && !add_ok ? 0 : e->kind;
    *lo = e->lo;
    *hi = e->hi;
    *add = e->add;
    return (const sdp_i8_lane_cvt*)(const void*)cvt;
  }
  if (C->n == LANES_ENTRIES || header + C->used + need > LANES_ARENA) C->n = C->used = C->next = 0;
  lanes_entry* e = &C->e[C->n];
  char* at = arena + header + C->used;
  sdp_i8_lane_cvt* cvt = (sdp_i8_lane_cvt*)(void*)at;
  *e = (lanes_entry){.bias = p->bias, .mul = p->mul, .rshift = p->rshift, .vmax = vmax,
                     .off = C->used, .k = (int32_t)k, .ew_op = (int32_t)p->ew_op,
                     .act = (int32_t)p->act, .ew_zero = p->ew_zero, .ew_mul = p->ew_mul,
                     .ew_shift = p->ew_shift, .out_mul = p->out_mul,
                     .out_shift = p->out_shift, .out_zero = p->out_zero,
                     .clip_lo = p->clip_lo, .clip_hi = p->clip_hi, .shift_max = p->shift_max,
                     .kind = 0, .lo = 0, .hi = 0};
  if (sdp_i8_lanes_prepare(p, 0, (int32_t)k, vmax, cvt, &e->lo, &e->hi)) e->kind = 1;
  else if (sdp_i8_lanes_prepare_add(p, 0, (int32_t)k, vmax, cvt, &e->add, &e->lo, &e->hi))
    e->kind = 2;
  char* copy = at + round64((size_t)k * sizeof(sdp_i8_lane_cvt));
  if (p->bias != NULL) memcpy(copy, p->bias, (size_t)k * 4);
  if (p->mul != NULL) memcpy(copy + 4 * k, p->mul, (size_t)k * 2);
  if (p->rshift != NULL) memcpy(copy + 6 * k, p->rshift, (size_t)k);
  C->used += need;
  C->next = ++C->n < LANES_ENTRIES ? C->n : 0;
  *kind = e->kind == 2 && !add_ok ? 0 : e->kind;
  *lo = e->lo;
  *hi = e->hi;
  *add = e->add;
  return cvt;
}
