/* sdp_i8.c - the SDP engine in INT8: integer converters (semantics in accel.h).
 *
 * sdp_one is the definition, step by step in int64, NVDLA's SDP units in order (accel.h):
 * BS (the 33-bit ALU's v + bias, times 2^pre, sat32: bs_out), BN (an int32 times an int16, 47
 * bits, rhaz by shift_max, sat32), the element-wise step, the activation (PRELU: an X unit's
 * multiplier in PReLU mode, sat32), the output converter. rhaz adds half to the magnitude and
 * shifts (0..62). It is the portable build's code and the reference the tests hold the vector
 * code to.
 *
 * AVX-512 (sdp_i8_avx512.c): the general path runs exactly those steps on 8 int64 lanes (sdp8). The
 * two converters the compiler emits most have shorter exact forms, whose identities are stated at
 * span_fast and span_fast_add: bias + scale + NONE/RELU/CLIP with out_mul 0 (no element-wise or
 * output step to run; in int32 lanes, span_fast32, where its bounds allow), and the residual add
 * with an output converter (the conv kernels' in-register forms of both: sdp_i8_lanes.h, prepared
 * in sdp_i8_avx512.c). sdp_i8_channels runs the general steps with each lane's own channel, for
 * outputs of one position per image (fully connected layers). A LUT activation (sdp_i8_lut.c) runs
 * sdp_i8_span_lut / sdp_i8_channels_lut: the table in 16 int32 lanes with gathers (its identities
 * at lut_vec); ACCEL_SDP_I8_LUT=scalar forces sdp_one instead. Once the runs of a table have
 * converted 2^16 values its LUT is planned, and the plan kept (sdp_i8_lut_plan: the codes by bins
 * of the table's input, one gather and a compare per 16 values instead of the table's arithmetic;
 * ACCEL_SDP_I8_LUT=gather keeps the table in lanes, ACCEL_VERBOSE prints the plan). Independent
 * runs whose codes are a function of each plane's input bytes look them up (run_table). What the
 * files share is in sdp_i8_internal.h.
 * AVX2 without AVX-512 (sdp_i8_avx2.c): the common converter, the residual add and a planned
 * LUT in 8 int32 lanes (the same int32 identities and plans), the other converters' steps in 4
 * int64 lanes (along the channels with a LUT: then the table in 8 int32 lanes), sdp_one for a
 * LUT span outside its plan.
 * The CONV epilogue and sdp_i8_run both go through these, so fused and independent runs give
 * identical codes. Figures: docs/kernels.md.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "sdp_i8_internal.h"

/* ---- scalar definition ------------------------------------------------------------------ */

static inline int8_t sdp_one(const sdp_i8* p, const chan_params* c, int64_t v, int operand) {
  int64_t t = bs_out(v + c->bias, c->pre);                 /* BS: ALU, times 2^pre */
  t = sat32(rhaz(t * c->mul, c->shift + c->pre));          /* BN: mul, shifter */
  if (p->ew_op != ACCEL_EW_NONE) {
    const int64_t e = sat32(rhaz(((int64_t)operand - p->ew_zero) * p->ew_mul, p->ew_shift));
    switch (p->ew_op) {
      case ACCEL_EW_ADD: t = sat32(t + e); break;
      case ACCEL_EW_MUL: t = sat32(t * e); break;
      case ACCEL_EW_MAX: t = t > e ? t : e; break;
      case ACCEL_EW_MIN: t = t < e ? t : e; break;
      case ACCEL_EW_NONE:
      case ACCEL_EW_COUNT: break;
    }
  }
  if (p->act == ACCEL_ACT_RELU) {
    t = t < 0 ? 0 : t;
  } else if (p->act == ACCEL_ACT_PRELU && t < 0) {
    t = sat32(rhaz(t * c->prelu_mul, p->prelu_shift));
  } else if (p->lut != NULL) {
    t = lut_int8_eval(p->lut, t);
  }
  int64_t y = p->out_mul != 0 ? rhaz(t * p->out_mul, p->out_shift) : t;
  y = clamp64(y + p->out_zero, -128, 127);
  if (p->act == ACCEL_ACT_CLIP) y = clamp64(y, p->clip_lo, p->clip_hi);
  return (int8_t)y;
}

static __attribute__((unused)) void channels_scalar(const sdp_i8* p, int32_t first,
                                                   const int32_t* v, const int8_t* operand,
                                                   int8_t* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const chan_params c = channel_params(p, (int32_t)(first + i));
    y[i] = sdp_one(p, &c, v[i], operand != NULL ? operand[i] : 0);
  }
}

static __attribute__((unused)) void span_scalar(const sdp_i8* p, int32_t ch, const int32_t* v,
                                               const int8_t* operand, int8_t* y, int64_t count) {
  const chan_params c = channel_params(p, ch);
  for (int64_t i = 0; i < count; ++i)
    y[i] = sdp_one(p, &c, v[i], operand != NULL ? operand[i] : 0);
}

#if SDP_I8_VECTOR
#define SPAN_IMPL sdp_i8_span_avx512
#define CHANNELS_IMPL sdp_i8_channels_avx512
#define SPAN_LUT_IMPL sdp_i8_span_lut
#define CHANNELS_LUT_IMPL sdp_i8_channels_lut
#elif SDP_I8_AVX2
#define SPAN_IMPL sdp_i8_span_avx2
#define CHANNELS_IMPL sdp_i8_channels_avx2
#define SPAN_LUT_IMPL sdp_i8_span_avx2
#define CHANNELS_LUT_IMPL sdp_i8_channels_avx2
#else
#define SPAN_IMPL span_scalar
#define CHANNELS_IMPL channels_scalar
#define SPAN_LUT_IMPL span_scalar
#define CHANNELS_LUT_IMPL channels_scalar
#endif

void sdp_i8_span_scalar(const sdp_i8* p, int32_t ch, const int32_t* v, const int8_t* operand,
                        int8_t* y, int64_t count) {
  span_scalar(p, ch, v, operand, y, count);
}

void sdp_i8_channels_scalar(const sdp_i8* p, int32_t first, const int32_t* v,
                            const int8_t* operand, int8_t* y, int64_t count) {
  channels_scalar(p, first, v, operand, y, count);
}

/* ACCEL_SDP_I8_LUT=scalar in the environment (read once) sends LUT activations to the scalar
 * definition, as a build without AVX-512 or AVX2 runs them: the tests compare both paths. */
static int lut_scalar_forced;
static pthread_once_t lut_env_once = PTHREAD_ONCE_INIT;

static void read_lut_env(void) {
  const char* env = getenv("ACCEL_SDP_I8_LUT");
  lut_scalar_forced = env != NULL && strcmp(env, "scalar") == 0;
}

static int lut_scalar(void) {
  pthread_once(&lut_env_once, read_lut_env);
  return lut_scalar_forced;
}

void sdp_i8_span(const sdp_i8* p, int32_t channel, const int32_t* v, const int8_t* operand,
                 int8_t* y, int64_t count) {
  if (p->lut != NULL) {
    if (lut_scalar()) span_scalar(p, channel, v, operand, y, count);
    else SPAN_LUT_IMPL(p, channel, v, operand, y, count);
    return;
  }
  SPAN_IMPL(p, channel, v, operand, y, count);
}

void sdp_i8_channels(const sdp_i8* p, int32_t first, const int32_t* v, const int8_t* operand,
                     int8_t* y, int64_t count) {
  if (p->lut != NULL) {
    if (lut_scalar()) channels_scalar(p, first, v, operand, y, count);
    else CHANNELS_LUT_IMPL(p, first, v, operand, y, count);
    return;
  }
  CHANNELS_IMPL(p, first, v, operand, y, count);
}

/* Independent mode: v = in - in_zero, through sdp_i8_span in chunks of a stack buffer (planes of
 * one element: sdp_i8_channels along the channels); the chunks are pool_for items. */
enum { RUN_CHUNK = 2048 };

typedef struct run_job {
  const sdp_i8* p;
  int32_t c;
  int64_t hw, chunks;
  const int8_t* in;
  int8_t* out;
} run_job;

static void run_channels_item(void* ctx, int64_t it, int participant) {
  const run_job* J = ctx;
  const sdp_i8* p = J->p;
  int32_t v[RUN_CHUNK];
  (void)participant;
  const int64_t b = it / J->chunks, c0 = it % J->chunks * RUN_CHUNK;
  const int64_t cnt = J->c - c0 < RUN_CHUNK ? J->c - c0 : RUN_CHUNK;
  const int64_t at = b * J->c + c0;
  for (int64_t i = 0; i < cnt; ++i) v[i] = (int32_t)J->in[at + i] - p->in_zero;
  sdp_i8_channels(p, (int32_t)c0, v, p->ew_operand != NULL ? p->ew_operand + at : NULL,
                  J->out + at, cnt);
}

/* Where a plane's codes are a function of its input bytes alone (a LUT activation without an
 * element-wise operand, or any converter whose operand is one value per channel:
 * ew_per_channel, squeeze-excite's x * s), the plane's 256 codes are converted once, through
 * sdp_i8_span itself (so the same codes as element by element), and the chunk is looked up in
 * them: two vpermi2b of 128 entries and a blend by the byte's top bit per 64 values where VBMI
 * is. Worth it where the converter costs several times the lookup per value (the LUT and the
 * element-wise paths), from TABLE_MIN values a chunk. */
enum { TABLE_MIN = 512 };

static int table_applies(const sdp_i8* p, int64_t cnt) {
  return cnt >= TABLE_MIN && (p->ew_per_channel || (p->lut != NULL && p->ew_op == ACCEL_EW_NONE));
}

static void run_table(const sdp_i8* p, int32_t ch, const int8_t* operand, const int8_t* in,
                      int8_t* out, int64_t cnt) {
  int32_t v[256];
  int8_t code[256], op[256];
#if SDP_I8_AVX2
  int8_t bytes[256]; /* squeeze-excite's x * s: its 256 codes in int32 lanes */
  for (int b = 0; b < 256; ++b) bytes[b] = (int8_t)(uint8_t)b;
  if (operand == NULL || !sdp_i8_plane_codes_avx2(p, ch, *operand, bytes, code, 256))
#endif
  {
    for (int b = 0; b < 256; ++b) v[b] = (int32_t)(int8_t)(uint8_t)b - p->in_zero;
    if (operand != NULL) memset(op, *operand, sizeof op);
    sdp_i8_span(p, ch, v, operand != NULL ? op : NULL, code, 256);
  }
#ifdef __AVX512VBMI__
  const __m512i t0 = _mm512_loadu_si512(code), t1 = _mm512_loadu_si512(code + 64);
  const __m512i t2 = _mm512_loadu_si512(code + 128), t3 = _mm512_loadu_si512(code + 192);
  for (int64_t i = 0; i < cnt; i += 64) {
    const __mmask64 k = cnt - i >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (cnt - i)) - 1;
    const __m512i x = _mm512_maskz_loadu_epi8(k, in + i);
    const __m512i lo = _mm512_permutex2var_epi8(t0, x, t1); /* bytes 0..127: codes 0..127 */
    const __m512i hi = _mm512_permutex2var_epi8(t2, x, t3); /* bytes 128..255 */
    _mm512_mask_storeu_epi8(out + i, k, _mm512_mask_blend_epi8(_mm512_movepi8_mask(x), lo, hi));
  }
#elif defined(__AVX2__)
  /* 32 bytes a step: the 16 rows of 16 codes looked up by the byte's low nibble (vpshufb), then
   * chosen by its high nibble's bits 4, 5, 6, 7 in a tree of blends (vpblendvb reads each
   * byte's top bit: x << 3, << 2, << 1 in 16-bit lanes put bits 4, 5, 6 there in every byte) */
  __m256i t[16];
  for (int k = 0; k < 16; ++k)
    t[k] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)(const void*)(code + 16 * k)));
  int64_t i = 0;
  for (; i + 32 <= cnt; i += 32) {
    const __m256i x = _mm256_loadu_si256((const __m256i*)(const void*)(in + i));
    const __m256i lo = _mm256_and_si256(x, _mm256_set1_epi8(0x0F));
    __m256i r[8];
    const __m256i b4 = _mm256_slli_epi16(x, 3);
    for (int k = 0; k < 8; ++k)
      r[k] = _mm256_blendv_epi8(_mm256_shuffle_epi8(t[2 * k], lo),
                                _mm256_shuffle_epi8(t[2 * k + 1], lo), b4);
    const __m256i b5 = _mm256_slli_epi16(x, 2);
    for (int k = 0; k < 4; ++k) r[k] = _mm256_blendv_epi8(r[2 * k], r[2 * k + 1], b5);
    const __m256i b6 = _mm256_slli_epi16(x, 1);
    for (int k = 0; k < 2; ++k) r[k] = _mm256_blendv_epi8(r[2 * k], r[2 * k + 1], b6);
    _mm256_storeu_si256((__m256i*)(void*)(out + i), _mm256_blendv_epi8(r[0], r[1], x));
  }
  for (; i < cnt; ++i) out[i] = code[(uint8_t)in[i]];
#else
  for (int64_t i = 0; i < cnt; ++i) out[i] = code[(uint8_t)in[i]];
#endif
}

static void run_planes_item(void* ctx, int64_t it, int participant) {
  const run_job* J = ctx;
  const sdp_i8* p = J->p;
  int32_t v[RUN_CHUNK];
  (void)participant;
  const int64_t plane = it / J->chunks, i0 = it % J->chunks * RUN_CHUNK;
  const int64_t cnt = J->hw - i0 < RUN_CHUNK ? J->hw - i0 : RUN_CHUNK;
  const int64_t at = plane * J->hw + i0;
  /* the element-wise operand of these values: [N][C] holds one per plane */
  const int8_t* operand = p->ew_operand == NULL ? NULL
                          : p->ew_per_channel   ? p->ew_operand + plane
                                                : p->ew_operand + at;
  if (table_applies(p, cnt)) {
    run_table(p, (int32_t)(plane % J->c), operand, J->in + at, J->out + at, cnt);
    return;
  }
  int8_t same[RUN_CHUNK];
  if (p->ew_per_channel) {
    memset(same, *operand, (size_t)cnt);
    operand = same;
  }
#if SDP_I8_AVX2
  /* the codes' bound admits the lane forms that sdp_i8_span cannot assume (a residual add of
   * shift <= 16: gen4's int64 steps, 4x the instructions); they read the codes themselves */
  if (sdp_i8_codes_avx2(p, (int32_t)(plane % J->c), J->in + at, operand, J->out + at, cnt))
    return;
#endif
  for (int64_t i = 0; i < cnt; ++i) v[i] = (int32_t)J->in[at + i] - p->in_zero;
  sdp_i8_span(p, (int32_t)(plane % J->c), v, operand, J->out + at, cnt);
}

/* Planes smaller than run_table's chunks whose operand is one code per plane (squeeze-excite's
 * x * s on 7x7 and 14x14), several to an item (about RUN_CHUNK values): sdp_i8_planes_avx512
 * (sdp_i8_planes_avx2 on AVX2), or plane by plane as run_planes_item where it declines. */
static int small_planes_apply(const sdp_i8* p, int64_t hw) {
  return (SDP_I8_VECTOR || SDP_I8_AVX2) && p->ew_per_channel && p->lut == NULL &&
         hw < TABLE_MIN && (p->ew_op == ACCEL_EW_MUL || p->ew_op == ACCEL_EW_ADD);
}

typedef struct planes_job {
  const sdp_i8* p;
  int32_t c;
  int64_t hw, planes, per_item;
  const int8_t* in;
  int8_t* out;
} planes_job;

static void run_small_planes_item(void* ctx, int64_t it, int participant) {
  const planes_job* J = ctx;
  const int64_t p0 = it * J->per_item;
  const int64_t p1 = p0 + J->per_item < J->planes ? p0 + J->per_item : J->planes;
#if SDP_I8_VECTOR
  if (sdp_i8_planes_avx512(J->p, J->c, J->hw, J->in, J->out, p0, p1)) return;
#elif SDP_I8_AVX2
  if (sdp_i8_planes_avx2(J->p, J->c, J->hw, J->in, J->out, p0, p1)) return;
#endif
  const run_job one = {.p = J->p, .c = J->c, .hw = J->hw, .chunks = 1, .in = J->in,
                       .out = J->out};
  for (int64_t plane = p0; plane < p1; ++plane) run_planes_item((void*)&one, plane, participant);
}

void sdp_i8_run(const sdp_i8* p, int32_t n, int32_t c, int64_t hw, const int8_t* in,
                int8_t* out, int32_t num_threads) {
  const int64_t planes = (int64_t)n * c;
  if (num_threads < 1) num_threads = 1;
  if (hw == 1) {
    const run_job J = {.p = p, .c = c, .hw = hw, .chunks = (c + RUN_CHUNK - 1) / RUN_CHUNK,
                       .in = in, .out = out};
    pool_for(planes > 32768 ? num_threads : 1, n * J.chunks, run_channels_item, (void*)&J);
    return;
  }
  if (small_planes_apply(p, hw)) {
    const int64_t per_item = RUN_CHUNK / hw + 1;
    const planes_job J = {.p = p, .c = c, .hw = hw, .planes = planes, .per_item = per_item,
                          .in = in, .out = out};
    pool_for(planes * hw > 32768 ? num_threads : 1, (planes + per_item - 1) / per_item,
             run_small_planes_item, (void*)&J);
    return;
  }
  sdp_i8 q = *p;
  struct sdp_i8_lut_plan* plan = NULL;
  if (p->lut != NULL && p->lut_plan == NULL && !lut_scalar()) {
    /* the values it converts: 256 per chunk where the chunks are looked up (run_table) */
    const int64_t chunks = (hw + RUN_CHUNK - 1) / RUN_CHUNK;
    plan = sdp_i8_lut_plan_new(p, table_applies(p, hw < RUN_CHUNK ? hw : RUN_CHUNK)
                                      ? planes * chunks * 256 : planes * hw);
    q.lut_plan = plan;
  }
  const run_job J = {.p = &q, .c = c, .hw = hw, .chunks = (hw + RUN_CHUNK - 1) / RUN_CHUNK,
                     .in = in, .out = out};
  pool_for(planes * hw > 32768 ? num_threads : 1, planes * J.chunks, run_planes_item, (void*)&J);
  sdp_i8_lut_plan_free(plan);
}