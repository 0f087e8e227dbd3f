/*
 * accel.h - the simulated NVDLA-like accelerator: its instruction set and its runtime API.
 *
 * This is the one public header to include (the runtime API's declarations are in
 * accel/runtime_api.h, which it includes at its end). Generated code includes it, the Python package reads it through
 * cffi (preprocessed with ACCEL_CDEF defined, so it must stay plain C declarations), and the
 * hardware presets behind accel_config_preset() are the only copy of the hardware constants.
 *
 * The machine has these engines, as NVDLA does:
 *   CONV  direct convolution (CDMA -> CBUF -> CSC -> CMAC -> CACC); fully connected = 1x1 conv
 *   SDP   single data processor: per-channel scale/shift (bias, inference batch norm), an
 *         element-wise op with a second tensor, then an activation
 *   PDP   planar data processor: max / average pooling, kernel 1..8 per side
 *   CDP   channel data processor: local response normalisation across channels
 *   BDMA  bridge DMA: strided copies of channel surfaces from one tensor into another
 *         (concatenation, split / chunk, channel shuffle)
 *   RUBIK data reshape engine: contract mode, the depth-to-space rearrangement that ends
 *         NVDLA's deconvolution (accel_rubik_desc)
 * A run executes a chain of engine ops on one input tensor, either FUSED (CONV -> SDP -> PDP on
 * the fly: intermediates never reach memory) or INDEPENDENT (every op reads its input from memory
 * and writes its output back). Both modes give bit-identical values; their costs differ. The
 * CDP is not part of NVDLA's fused pipe: it always reads and writes memory (see accel_mode). A
 * BDMA or RUBIK op is not part of any chain: it runs alone (num_ops == 1), in either mode.
 *
 * Tensors are dense NCHW in host memory, which stands in for the accelerator's DRAM. The cost
 * model counts feature data as laid out in NVDLA's atom cubes: every (n, h, w) position holds
 * the channels padded up to a whole number of memory atoms.
 *
 * Every entry point returns an accel_status; on failure accel_last_error() names the bad field
 * and value. Nothing here aborts, exits or writes outside the buffers it is given.
 */
#ifndef ACCEL_ACCEL_H_
#define ACCEL_ACCEL_H_

#ifndef ACCEL_CDEF
#include <stddef.h>
#include <stdint.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

enum {
  ACCEL_ABI_VERSION = 14,  /* bumped when a struct below changes layout or tvm_glue.h needs a
                            * new function (4: CDP, BDMA; 5: the configuration fields of image
                            * input, Winograd, CBUF banks, DRAM, SRAM, weight compression and
                            * energy; 6: accel_tensor.layout; 7: accel_buffer_alloc; 8: the
                            * RTL-calibrated configuration fields; 9: RUBIK,
                            * accel_config.rubik_bytes_per_cycle; 10:
                            * accel_sdp_desc.ew_per_channel; 11: accel_cdp_desc.int8; 12:
                            * accel_transpose; 13: accel_sdp_desc.x1, x2; 14:
                            * accel_bdma_desc.repeat, src_repeat_stride, dst_repeat_stride) */
  ACCEL_MAX_CHAIN_OPS = 8, /* ops in one accel_run */
  ACCEL_MAX_CONV_KERNEL = 32,  /* CONV weight window per side (5-bit register field + 1) */
  ACCEL_MAX_CONV_STRIDE = 8,   /* CONV stride per side (3-bit register field + 1) */
  ACCEL_MAX_CONV_DILATION = 32,/* CONV dilation per side */
  ACCEL_MAX_CONV_PAD = 31,     /* CONV zero padding per side */
  ACCEL_MAX_POOL_KERNEL = 8,   /* PDP window per side */
  ACCEL_MAX_POOL_STRIDE = 16,  /* PDP stride per side */
  ACCEL_MAX_CDP_LOCAL_SIZE = 9,/* CDP window: NVDLA normalises over 3, 5, 7 or 9 channels */
  ACCEL_MAX_BATCH = 32,        /* CONV multi-batch: images sharing one weight fetch (NVDLA's
                                * MAX_BATCH_SIZE_32) */
  ACCEL_MAX_TENSOR_ELEMENTS = 2147483647, /* per tensor, so sizes fit the engines' counters */
  ACCEL_MAX_INT8_DEPTH = 65536, /* INT8 CONV C/groups x R x S: 255 x 128 x depth fits int32 */
  ACCEL_MAX_SHIFT = 62,        /* INT8 converter shifts: 0..ACCEL_MAX_SHIFT */
  ACCEL_PACKED_ALIGNMENT = 64, /* bytes: accel_conv_pack_weights() output alignment */
  ACCEL_NAME_LEN = 32,
  ACCEL_LABEL_LEN = 64,
  ACCEL_ERROR_LEN = 512,
  ACCEL_LUT_LE_ENTRIES = 65,   /* SDP lookup table: NVDLA's LE table size (64 intervals) */
  ACCEL_LUT_LO_ENTRIES = 257,  /* and its LO table size (256 intervals) */
  ACCEL_GELU_INTERVALS = 16,   /* FP32 GELU: unit intervals of |t| with a polynomial each */
  ACCEL_GELU_DEGREE = 7,       /* and their degree (accel_gelu_coefficients) */
  ACCEL_GELU_COEFFICIENTS = 128, /* (ACCEL_GELU_DEGREE + 1) x ACCEL_GELU_INTERVALS */
  ACCEL_C16_CHANNELS = 16,     /* channels of one atom of the C16 layout (accel_layout) */
  ACCEL_MAX_RUBIK_STRIDE = 32, /* RUBIK contract factor per side (5-bit register field + 1) */
  ACCEL_MAX_RUBIK_DIM = 8192,  /* RUBIK: width, height and channels of input and output (13-bit
                                * register fields + 1; NVDLA's unit description's limit) */
  ACCEL_CONV_STRIPE = 16       /* output positions that share one weight load in the MAC cells
                                * (NVDLA's stripe: 16 to 32 atomic operations; the cost model
                                * charges CBUF weight reads per 16) */
};

/* Status codes. New values are only ever appended. */
typedef enum accel_status {
  ACCEL_OK = 0,
  ACCEL_ERR_INVALID = 1,     /* a field is out of range (non-positive, overflowing, unknown enum) */
  ACCEL_ERR_SHAPE = 2,       /* tensor shapes do not agree with each other or with the ops */
  ACCEL_ERR_UNSUPPORTED = 3, /* valid, but the configuration lacks it (precision, engine, limit) */
  ACCEL_ERR_NULL = 4,        /* a required pointer is NULL */
  ACCEL_ERR_ALIGNMENT = 5,   /* a buffer is not aligned to its element size */
  ACCEL_ERR_NO_MEMORY = 6,   /* the simulator could not allocate its scratch memory */
  ACCEL_ERR_NOT_FOUND = 7    /* an unknown preset name or an index out of range */
} accel_status;

/* Data precisions. FP32 is the simulator's reference precision: every configuration accepts it
 * and the cost model charges it as FP16 (2-byte data, the 16-bit MAC rate). INT16 is not
 * implemented by the simulator.
 *
 * INT8 (bit-exact; accel_codegen/reference.py is the executable definition). A tensor holds
 * int8 codes q with real value (q - zero) * scale; scales live in the compiler, the machine
 * only sees zero points and integer converter parameters, as NVDLA's registers do. Weights are
 * symmetric int8. rhaz(p, s) = p / 2^s rounded half away from zero (NVDLA's converter
 * rounding); sat8 / sat32 clamp to the int8 / int32 range.
 *
 * FP16: IEEE binary16 storage (uint16_t bits) for data, weights and SDP parameters. Products
 * are exact, CONV accumulates in fp32, SDP and PDP compute in fp32 on widened halves, and each
 * engine rounds its output to half once (round to nearest even). The SDP's lookup-table
 * activations (sigmoid, tanh, silu, ...) are the exception: in FP16 they go through the LUT
 * model described at accel_lut, as NVDLA computes them, not through libm.
 *
 * A CONV in INT8 or FP16 must be followed by an SDP in the same chain: the accumulator
 * (int32 / fp32) always leaves through the SDP, which converts it to the output precision (on
 * NVDLA, CACC feeds SDP). In INDEPENDENT mode that CONV -> SDP pair still runs on the fly. */
typedef enum accel_precision {
  ACCEL_INT8 = 0,
  ACCEL_INT16 = 1,
  ACCEL_FP16 = 2,
  ACCEL_FP32 = 3,
  ACCEL_PRECISION_COUNT      /* not a precision: the number of them (stays last) */
} accel_precision;

/* Each enum below ends in a _COUNT sentinel; accel_codegen/sim/vocabulary.py holds one row per
 * value (a test checks both agree), and new values go just before the sentinel. */

/* Optional hardware units (accel_config.features bits). */
typedef enum accel_feature {
  ACCEL_FEATURE_LUT = 1,        /* SDP lookup-table activations: sigmoid, tanh, silu, ... */
  ACCEL_FEATURE_ELEMENTWISE = 2,/* SDP Y unit: element-wise op with a second tensor */
  ACCEL_FEATURE_WINOGRAD = 4,   /* CONV Winograd mode (accel_conv_mode) */
  ACCEL_FEATURE_RUBIK = 8,      /* RUBIK reshape engine: contract mode (accel_rubik_desc) */
  ACCEL_FEATURE_CDP = 16,       /* CDP engine: local response normalisation */
  ACCEL_FEATURE_BDMA = 32,      /* BDMA engine: channel copies (nv_small's spec disables it) */
  ACCEL_FEATURE_IMAGE_INPUT = 64, /* CONV image-input mode: pixel formats (ABI 5) */
  ACCEL_FEATURE_BATCH = 128,    /* CONV multi-batch mode for fully connected layers (ABI 5) */
  ACCEL_FEATURE_WEIGHT_COMPRESSION = 256 /* CONV reads sparse weights (ABI 5): see
                                 * accel_weight_format */
} accel_feature;

/* A hardware configuration. Presets come from accel_config_preset(); any other values a user
 * gives are checked by accel_config_validate(). */
typedef struct accel_config {
  char name[ACCEL_NAME_LEN];
  int32_t atomic_c;          /* input channels the MAC array consumes per cycle (atomic C) */
  int32_t atomic_k;          /* output channels per cycle at int8 (atomic K); halved for 16-bit */
  int64_t cbuf_bytes;        /* convolution buffer (CBUF) capacity, input and weights together */
  int32_t memory_atom_bytes; /* smallest memory access; each feature position pads to it */
  int32_t sdp_throughput;    /* SDP scale/shift + activation elements per cycle */
  int32_t sdp_ew_throughput; /* SDP element-wise and LUT elements per cycle */
  int32_t pdp_throughput;    /* PDP input elements per cycle */
  int32_t cdp_throughput;    /* CDP input elements per cycle (ABI 4) */
  double clock_hz;           /* engine clock */
  double dram_bytes_per_s;   /* memory bandwidth shared by all engines */
  uint32_t precisions;       /* bit (1u << accel_precision) set for each hardware precision */
  uint32_t features;         /* accel_feature bits */
  /* Energy per action, in picojoules (ABI 5), as Accelergy / Timeloop charge it: an op's energy
   * is the sum over its actions of count x energy (the cost model's accel_op_stats gives each
   * count). Each >= 0 and finite; 0 leaves that action uncharged. Defaults (config.c) derive
   * from Horowitz, "Computing's energy problem", ISSCC 2014, 45 nm at 0.9 V; docs/energy.md
   * shows the arithmetic. */
  double mac_int8_pj;        /* one int8 multiply-accumulate (8-bit multiply, int32 add) */
  double mac_fp16_pj;        /* one 16-bit MAC (fp16 multiply, fp32 add); fp32 (the reference
                              * precision, charged as fp16) and int16 are charged this */
  double cbuf_read_pj_per_byte;  /* CBUF read: the CONV's data and weight fetches from it */
  double cbuf_write_pj_per_byte; /* CBUF write: every byte the CONV brings in from memory */
  double dram_pj_per_byte;   /* every byte read from or written to DRAM (BDMA copies included) */
  double sram_pj_per_byte;   /* every byte over the secondary memory interface (on-chip SRAM) */
  double sdp_pj_per_element; /* one element through the SDP (scale/shift, element-wise, act) */
  double pdp_pj_per_element; /* one input element through the PDP */
  double cdp_pj_per_element; /* one element through the CDP */
  /* ABI 5: CBUF banks, DRAM efficiency, the secondary memory (SRAMIF) */
  int32_t cbuf_banks;        /* CBUF banks (cbuf_bytes / cbuf_banks bytes each, a whole number);
                              * a CONV splits them between its data and its weights */
  int32_t dram_burst_bytes;  /* smallest DRAM transfer: every stream rounds up to bursts */
  int32_t dram_latency_cycles;/* a run's first DRAM read waits this long: exposed when its
                              * transfer is too small to hide it (see accel_op_stats) */
  double dram_turnaround_cycles; /* cycles lost per burst written: the bus's read/write
                              * turnaround, amortised over the writes the controller groups */
  int64_t sram_bytes;        /* on-chip SRAM behind the secondary memory interface; 0: none */
  double sram_bytes_per_s;   /* its bandwidth (> 0 when sram_bytes > 0) */
  /* ABI 8: calibrated against NVDLA's nv_small RTL (docs/nvdla_rtl.md; config.c says which
   * trace tests fix each figure) */
  int32_t dram_read_request_cycles; /* cycles between two read requests the memory accepts,
                              * each one burst: reads move at most dram_burst_bytes per this
                              * many cycles (below the bandwidth when bursts are small);
                              * 0: no limit beyond dram_bytes_per_s */
  int32_t cmac_weight_load_cycles; /* cycles to load one atomic-C x atomic-K weight block into
                              * the MAC cells: a stripe of fewer output positions waits for it */
  int32_t conv_pipeline_cycles; /* fixed cycles per layer and engine: programming, pipeline */
  int32_t sdp_pipeline_cycles;  /* fill and drain, the last write's own latency (the read */
  int32_t pdp_pipeline_cycles;  /* latency is dram_latency_cycles); a fused run pays the sum */
  int32_t cdp_pipeline_cycles;  /* of its engines' */
  /* ABI 9 */
  int32_t rubik_bytes_per_cycle; /* RUBIK data path: bytes it reads (and writes) per cycle */
} accel_config;

/* How a tensor's elements lie in memory (accel_tensor.layout).
 *
 * NCHW: dense [n][c][h][w].
 * C16: channel-blocked, [n][c/16][h][w][16]: the ACCEL_C16_CHANNELS (16) channels of a
 *   position side by side, as NVDLA stores feature data in atoms of channels. FP32 only, c a
 *   multiple of 16. The
 *   element-wise operands of a run's SDP ops are in the layout of the run's output. Kept
 *   between runs, it spares the CPU kernels the conversions: 1x1 (stride 1 or 2) and
 *   depthwise 3x3 convolutions and pooling (a PDP run alone) read and write it directly (the
 *   same sums, bit for bit); every other run is converted to NCHW and back around its
 *   kernels, so any run accepts either layout and gives the same values. The cost model does not depend on the layout. */
typedef enum accel_layout {
  ACCEL_LAYOUT_NCHW = 0,
  ACCEL_LAYOUT_C16 = 1,
  ACCEL_LAYOUT_COUNT         /* not a layout: the number of them (stays last) */
} accel_layout;

/* A tensor in memory, element type `precision`. 2-D data [N, C] uses h = w = 1. */
typedef struct accel_tensor {
  void* data;                /* first element, aligned to the element size */
  int32_t n, c, h, w;
  accel_precision precision;
  accel_layout layout;       /* (ABI 6) NCHW (0) unless said */
} accel_tensor;

typedef enum accel_engine {
  ACCEL_ENGINE_CONV = 0,
  ACCEL_ENGINE_SDP = 1,
  ACCEL_ENGINE_PDP = 2,
  ACCEL_ENGINE_CDP = 3,
  ACCEL_ENGINE_BDMA = 4,
  ACCEL_ENGINE_RUBIK = 5,
  ACCEL_ENGINE_COUNT         /* not an engine: the number of them (stays last) */
} accel_engine;

/* How the CONV computes (accel_conv_desc.mode). Both modes compute the same convolution; their
 * rounding and their cost differ.
 *
 * WINOGRAD is NVDLA's F(2x2, 3x3): every 2x2 output tile of every kernel is
 *   Y = A^T [ sum over c of (G g_c G^T) . (B^T d_c B) ] A     (. element-wise, 16 products)
 * with g_c the 3x3 kernel slice of channel c, d_c the 4x4 input tile whose top left is the
 * tile's first output position times the stride, minus the padding, and
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]   G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1]
 *   A^T = [1 1 1 0; 0 1 -1 -1]
 * (the G of NVDLA's compiler, which pre-transforms the weights: 4x4 per kernel and channel
 * instead of 3x3). A stride s is folded into channels as NVDLA does: channel (c, a, b) of the
 * folded input is in[c][y*s + a][x*s + b] (a, b < s) and its kernel tap (r', s') is
 * weights[k][c][r'*s + a][s'*s + b] (0 beyond the kernel), a stride-1 convolution of C*s*s
 * channels with a ceil(R/s) x ceil(S/s) kernel.
 * A grouped conv is one such convolution per group (C and K per group), as NVDLA's compiler
 * splits it, except a depthwise one (one input channel per group), which runs direct.
 * Conditions (ACCEL_ERR_UNSUPPORTED otherwise, naming the one that fails): the
 * configuration has ACCEL_FEATURE_WINOGRAD; dilation 1; stride_h == stride_w = s;
 * ceil(kernel_h / s) == ceil(kernel_w / s) == 3 (3x3 stride 1, 5x5 or 6x6 stride 2, ...);
 * feature-data input; DENSE weights (NVDLA's compiler never compresses Winograd weights).
 * NVDLA's released compiler uses it for 3x3 stride 1, non-INT8 layers only.
 *
 * Numerics per precision. S = sum over c of |A^T| (|G| |g_c| |G^T| . |B^T| |d_c| |B|) |A|
 * (absolute values throughout; >= |exact result|), u = 2^-24, C' = C * s * s (C per group) and
 * gamma(n) = n u / (1 - n u). The accumulator (before the SDP) of either mode is within its
 * bound of the exact convolution; Winograd's:
 *   FP32  transforms, products, the sum over channels and the output transform in fp32:
 *         |acc - exact| <= gamma(C' + 11) S
 *   FP16  the pre-transformed weights are stored as halves (NVDLA's compiler rounds
 *         fp32(G g G^T) to the weight precision), the input transform is rounded to half
 *         (the fp16 multipliers' operand), products exact, sum and output transform in fp32:
 *         |acc - exact| <= ((1 + 2^-11)^2 (1 + gamma(C' + 11)) - 1) S   (about 2^-10 S)
 *         A transformed input tile reaches 4 max|d| and a transformed kernel 2.25 max|g|:
 *         inputs beyond 16376 in magnitude can overflow the half operand to infinity where
 *         direct convolution stays finite.
 *   INT8  exact: G g G^T is a multiple of 1/4, so the weights are pre-transformed to the int16
 *         values 4 G g G^T (|.| <= 1152) and the input transform of (in - in_zero) to 11-bit
 *         values (|.| <= 1020); products and sums are exact integers, and the output transform
 *         divides by 4 exactly. The int32 accumulator equals direct convolution's bit for bit.
 *         (NVDLA's released compiler keeps INT8 layers direct; this is the model's assumption
 *         of how its int8 Winograd keeps the transform exact.)
 * Direct convolution's FP32/FP16 accumulator is within gamma(C*R*S) sum |w| |x| of the exact
 * result. Per channel, S <= 64 max|g| max|d| where that sum is <= 9 max|g| max|d| (S weighs
 * every pair of a kernel tap and a tile element with 0, 1, 2 or 4, the pairs direct convolution
 * multiplies with 1), so Winograd's error can be several times direct's on inputs of uniform
 * magnitude (tests/sim/test_winograd.py measures both on random and adversarial inputs). */
typedef enum accel_conv_mode {
  ACCEL_CONV_DIRECT = 0,
  ACCEL_CONV_WINOGRAD = 1,
  ACCEL_CONV_MODE_COUNT      /* not a mode: the number of them (stays last) */
} accel_conv_mode;

/* CONV: convolution (direct, or Winograd: see accel_conv_mode).
 *   out[n][k][y][x] = sum over c < C/groups, r < kernel_h, s < kernel_w of
 *       in[n][g*C/groups + c][y*stride_h - pad_top + r*dilation_h][x*stride_w - pad_left + s*dilation_w]
 *       * weights[k][c][r][s],      g = k / (K/groups), input outside the image reads as 0
 *   out_h = (H + pad_top + pad_bottom - dilation_h*(kernel_h-1) - 1) / stride_h + 1 (same for w)
 * The sum runs in the precision's accumulator (fp32 for FP32/FP16, int32 for INT8). */
/* CONV input formats (accel_conv_desc.pixel_format). NONE is feature data, the format every
 * engine writes: each (n, h, w) position's channels padded to whole memory atoms. The others
 * are NVDLA's pixel formats for image input (the CDMA's image path): a pixel's channels packed
 * together, lines padded to a memory atom. Pixel bytes / channels the format holds / precision:
 *   R8               1 B,  1 channel,  INT8
 *   A8B8G8R8         4 B,  4 channels, INT8  (a 3-channel image leaves the 4th unused)
 *   A16B16G16R16_F   8 B,  4 channels, FP16 (and FP32, the reference, charged as FP16) */
typedef enum accel_pixel_format {
  ACCEL_PIXEL_NONE = 0,
  ACCEL_PIXEL_R8 = 1,
  ACCEL_PIXEL_A8B8G8R8 = 2,
  ACCEL_PIXEL_A16B16G16R16_F = 3,
  ACCEL_PIXEL_COUNT          /* not a format: the number of them (stays last) */
} accel_pixel_format;

typedef struct accel_conv_desc {
  int32_t out_c;             /* K, output channels; a multiple of groups */
  int32_t kernel_h, kernel_w;/* R, S >= 1 */
  int32_t stride_h, stride_w;/* >= 1 */
  int32_t pad_top, pad_bottom, pad_left, pad_right; /* >= 0, zero padding */
  int32_t dilation_h, dilation_w; /* >= 1 */
  int32_t groups;            /* >= 1, divides C and K; groups == C == K is depthwise */
  accel_precision precision; /* of input, weights and output */
  const void* weights;       /* [K][C/groups][R][S] in `precision` */
  /* ABI 2 */
  int32_t in_zero;           /* INT8: the input's zero point (-128..127); the sum runs over
                              * (in - in_zero), so padding reads as in_zero. 0 otherwise */
  const void* weights_packed;/* INT8, FP16, Winograd mode and FP32 1x1 (stride 1 or 2, no
                              * padding) or 3x3 (stride 1 or 2, no dilation), one group,
                              * multiples of 16 channels, optional:
                              * accel_conv_pack_weights() of these weights for this conv (NVDLA
                              * reads weights its compiler pre-formatted); NULL: the kernel
                              * packs (INT8, FP32 1x1 / 3x3 in a C16 run), widens (FP16) or
                              * pre-transforms (Winograd) them on every run. An NCHW FP32 run
                              * reads the weights as they are. */
  /* ABI 3 */
  size_t weights_packed_bytes; /* size of the weights_packed buffer (0 when it is NULL); a
                              * run refuses a buffer smaller than the packing needs */
  /* ABI 5 */
  accel_pixel_format pixel_format; /* image-input mode (ACCEL_FEATURE_IMAGE_INPUT): the input is
                              * pixel data. Same result as direct convolution; the tensor in host
                              * memory stays NCHW like every tensor (host memory stands in for
                              * DRAM; the layout is the cost model's). Limits, as NVDLA's: the
                              * first op of its run (it reads the run's input), input channels
                              * <= the format's, the format's precision, groups 1, no dilation,
                              * not with multi_batch. NVDLA folds the kernel width into the
                              * channels (pre-extension: S x channels) and, where they fit,
                              * 2 or 4 kernel rows more (post-extension): see cost_model.c */
  int32_t multi_batch;       /* 0 or 1 (ACCEL_FEATURE_BATCH): a fully connected layer (1x1
                              * kernel on a 1x1 input) fetches its weights once for up to
                              * ACCEL_MAX_BATCH images held in CBUF together (NVDLA's multi-batch
                              * mode); same result, fewer weight reads (see cost_model.c) */
  accel_conv_mode mode;      /* DIRECT (0) or WINOGRAD; FP32 and FP16 Winograd take the
                              * pre-transformed weights from weights_packed (FP32 too) when it
                              * is set, else transform them on every run; INT8 Winograd runs
                              * on INT8's (direct) packing */
  /* ABI 5, too: CBUF split and weight format (what NVDLA's compiler writes in its conv op) */
  int32_t data_banks;        /* CBUF banks for the input feature data, and */
  int32_t weight_banks;      /* for the weights: both 0 (the policy of accel_conv_banks()
                              * applies) or both >= 1 with data_banks + weight_banks (+ 1 for
                              * the weight mask when sparse) <= cfg.cbuf_banks; weight_banks
                              * must hold one kernel group (atomic K kernels) and data_banks
                              * the input rows of one output row, each as far as CBUF has room
                              * beside the other's minimum (beyond it, the cost model streams
                              * a kernel group in parts, a row in one-row slices) */
  int32_t weight_format;     /* accel_weight_format; SPARSE needs ACCEL_FEATURE_WEIGHT_COMPRESSION */
  int64_t weights_nonzero;   /* SPARSE: the number of non-zero weights (a run checks it
                              * against the weights; the cost model charges it); 0 otherwise */
} accel_conv_desc;

/* How a CONV's weights are stored in memory (the functional result never changes).
 *   DENSE   every weight, in `precision`.
 *   SPARSE  NVDLA's compressed format: a bit mask (one bit per weight, 1 = non-zero, in the
 *           packed weight order), the non-zero weights only, and a 4-byte group size per
 *           kernel group (atomic K kernels); the CONV expands them in CBUF. Bytes read:
 *           ceil(weights / 8) + weights_nonzero x element bytes + 4 x kernel groups; one CBUF
 *           bank holds the mask. Worth it when under about 7/8 of the weights are non-zero
 *           at int8 (15/16 at 16 bits). */
typedef enum accel_weight_format {
  ACCEL_WEIGHTS_DENSE = 0,
  ACCEL_WEIGHTS_SPARSE = 1,
  ACCEL_WEIGHT_FORMAT_COUNT  /* not a format: the number of them (stays last) */
} accel_weight_format;

typedef enum accel_eltwise {
  ACCEL_EW_NONE = 0,
  ACCEL_EW_ADD = 1,
  ACCEL_EW_MUL = 2,
  ACCEL_EW_MAX = 3,
  ACCEL_EW_MIN = 4,
  ACCEL_EW_COUNT             /* not an op: the number of them (stays last) */
} accel_eltwise;

/* Activations. From SIGMOID on, every activation is a lookup-table one: it needs
 * ACCEL_FEATURE_LUT, runs on the SDP's Y unit, and is computed
 *   FP32: the functions as written below, in fp32: sigmoid, silu and exp through the
 *         library's own exp (csrc/lut.c: exp_f32, fp32 operations and fused multiply-adds,
 *         each rounded once, the same bits on every host and in the NumPy reference, which
 *         rounds a multiply-add once exactly), at most 1.01 ulp from e^t over every fp32 input
 *         and infinite from the same input as libm's expf; tanh through tanh_f32 (the same
 *         way), at most 1.34 ulp from tanh(t) over every fp32 input; hardswish and
 *         hardsigmoid exactly as written; GELU in fp32 through the library's own
 *         polynomials per unit interval and exp_f32's steps (csrc/lut.c: gelu_f32, fp32
 *         operations and fused multiply-adds, the same bits on every host and in the NumPy
 *         reference): within 4.0 ulp
 *         of t erfc(-t / sqrt 2) / 2 (in units of 2^-149 for subnormal results), relative for
 *         negative t too (0.5 t (1 + erf) would cancel there); its tanh form in double,
 *         rounded once;
 *   FP16: through the LUT model (accel_lut), whose error bound per function is listed there;
 *   INT8: through integer tables the compiler programs (accel_lut_int8), as NVDLA's integer
 *         pipeline does: the function is whatever the tables hold. */
typedef enum accel_activation {
  ACCEL_ACT_NONE = 0,
  ACCEL_ACT_RELU = 1,        /* max(t, 0) */
  ACCEL_ACT_CLIP = 2,        /* min(max(t, clip_min), clip_max); ReLU6 is clip(0, 6) */
  ACCEL_ACT_PRELU = 3,       /* t >= 0 ? t : t * prelu_slope[c] */
  ACCEL_ACT_SIGMOID = 4,     /* 1 / (1 + exp(-t)) */
  ACCEL_ACT_TANH = 5,        /* tanh(t) */
  ACCEL_ACT_SILU = 6,        /* t / (1 + exp(-t)), i.e. t * sigmoid(t) */
  ACCEL_ACT_HARDSWISH = 7,   /* t * min(max(t + 3, 0), 6) / 6 */
  ACCEL_ACT_HARDSIGMOID = 8, /* min(max(t + 3, 0), 6) / 6 (PyTorch's definition) */
  ACCEL_ACT_GELU = 9,        /* 0.5 * t * (1 + erf(t / sqrt(2))), as 0.5 t erfc(-t / sqrt(2)) */
  ACCEL_ACT_EXP = 10,        /* exp(t) */
  /* The building blocks of layer norm and softmax, which NVDLA has no engine for
   * (accel_codegen/sim/decompose.py, docs/transformer_ops.md): over C of [N, C, H, W], sums
   * and maxima over C as BDMA + SDP halving trees (the PDP never pools across channels) or
   * sums as a 1x1 CONV of ones; x - mean, squares, products on the SDP's element-wise unit;
   * 1 / sqrt(var + eps) (eps the SDP's shift) and 1 / sum through these two, with Newton
   * steps on the SDP in FP16 (their runs and cycles per precision: docs/transformer_ops.md,
   * "Cost on nv_full", from decompose.estimate_passes). INT8 builds keep both in
   * FP16: no int8 tables for these (a pole at 0). FP32: 1.0f / sqrtf(t) (two correctly
   * rounded IEEE steps: at most 1.5 ulp from 1/sqrt(t), measured over every fp32 in [1, 4),
   * which repeats for every positive normal t) and 1.0f / t (correctly rounded); outside the
   * domain IEEE's answers: rsqrt NaN below 0, +inf at +0; reciprocal +-inf at +-0.
   * FP16: through the LUT with LE in exponent mode (accel_lut: rows rsqrt and reciprocal),
   * defined for t > 0 only: t below le_start (0, negatives, -inf, tiny t) gives the
   * underflow value LE[0] (32768 for both), t from le_end (and +inf) the last entry, never
   * NaN or inf; a NaN stays NaN. Not mapped from relax.rsqrt for that reason. */
  ACCEL_ACT_RSQRT = 11,      /* 1 / sqrt(t) */
  ACCEL_ACT_RECIPROCAL = 12, /* 1 / t */
  /* GELU's tanh form (PyTorch's approximate="tanh", ConvNeXt's and GPT's MLPs): 0.5 t (1 +
   * tanh(sqrt(2 / pi) (t + 0.044715 t^3))); FP32 in double, rounded once, as t / (1 +
   * exp(-2 u)), which does not cancel for negative t (u's exponent held to 709). */
  ACCEL_ACT_GELU_TANH = 13,
  /* exp(t) with a table for softmax's t - max <= 0 (attention's exponentials, FP16): FP32 as
   * ACCEL_ACT_EXP; FP16 a LO table twice as fine over [-8, 0) (accel_lut). */
  ACCEL_ACT_SOFTMAX_EXP = 14,
  /* Mish (YOLOv4's and Scaled-YOLOv4's activation): t tanh(softplus(t)) = t tanh(ln(1 +
   * e^t)). FP32 from exp_f32 as t (n / (n + 2)), n = e (e + 2), e = e^t (tanh(ln(1 + e)) is
   * n / (n + 2)), t itself above 20: within 4 ulp of mish in double for t >= -80 (3.87
   * measured; below, where |mish| < 2e-33, n nears the subnormals and the relative error
   * grows); -inf gives NaN (-inf x 0), as PyTorch's. */
  ACCEL_ACT_MISH = 15,
  /* softplus(t) = ln(1 + e^t) (PyTorch's beta 1, threshold 20: from t > 20 on PyTorch's t and
   * ln(1 + e^t) round to the same fp32). FP32 in double through libm as log1p(exp(t)), t
   * itself from 30 on, rounded once: within 0.51 ulp of softplus (correctly rounded but where
   * the double lies within libm's error of a rounding boundary); -inf gives 0, +inf +inf. */
  ACCEL_ACT_SOFTPLUS = 16,
  /* ln(t), for t > 0: log_softmax's log of the sum of exponentials (sim/decompose.py).
   * FP32 in double through libm's log, rounded once (within 0.51 ulp); outside the domain
   * IEEE's answers: -inf at +-0, NaN below 0. FP16 through the LUT with LE in exponent mode
   * (accel_lut: row log), defined for t > 0 only: t below le_start (0, negatives, -inf) gives
   * LE[0] = half(ln 2^-24), never NaN or -inf; so, as rsqrt and reciprocal, not mapped from
   * relax.log. INT8 builds keep it in FP16 (no int8 tables: its pole at 0). */
  ACCEL_ACT_LOG = 17,
  ACCEL_ACT_COUNT            /* not an activation: the number of them (stays last) */
} accel_activation;

/* The SDP lookup table (NVDLA's Y-unit LUT), as the FP16 SDP evaluates a LUT activation.
 * NVDLA has two tables, LE (65 entries) and LO (257 entries), each indexed linearly with a
 * power-of-two step (the hardware's index is a shift), with linear interpolation between
 * entries and programmable slopes beyond them. The model, for an fp32 value t:
 *   NaN                                  -> NaN
 *   lo_start <= t < lo_end (LO hit)      u = (t - lo_start) * (1 / lo_step), i = min(floor(u), 255)
 *                                        y = LO[i] + (LO[i+1] - LO[i]) * (u - i)
 *   else le_start <= t < le_end (LE hit) the same on LE, i <= 63 (LO has priority: finer)
 *   t < le_start  (underflow)            y = LE[0] + (t - le_start) * underflow_slope
 *   t >= le_end   (overflow)             y = LE[64] + (t - le_end) * overflow_slope
 * (a zero slope gives the end entry itself, also for infinite t). Every step is one fp32
 * operation (no fused multiply-add); lo_end = lo_start + 256 lo_step, le_end = le_start +
 * 64 le_step. Entries are the function at the grid points, computed once in double and rounded
 * to half (NVDLA's table entries are 16-bit): LO[i] = half(f(lo_start + i lo_step)). The FP16
 * SDP then rounds y to half, like any engine output.
 *
 * Tables (LO / LE ranges and steps; beyond LE: underflow / overflow slope) and error bounds.
 * E is the measured max |y - f(t)| of the tables with exact entries (interpolation and tails)
 * over every half and a 2.5e-6-spaced fp32 grid on [-40, 40]; with half entries and the half
 * output the measured error stays within E + 2^-10 |f(t)| (two roundings of 2^-11 each):
 *   sigmoid      LO [-8, 8) 1/16    LE [-16, 16) 1/2   slopes 0 / 0    E = 4.8e-5
 *   tanh         LO [-4, 4) 1/32    LE [-16, 16) 1/2   slopes 0 / 0    E = 9.5e-5
 *   silu         LO [-8, 8) 1/16    LE [-32, 32) 1     slopes 0 / 1    E = 2.5e-4
 *   hardswish    LO [-4, 4) 1/32    LE [-16, 16) 1/2   slopes 0 / 1    E = 4.2e-5
 *   hardsigmoid  LO [-4, 4) 1/32    LE [-16, 16) 1/2   slopes 0 / 0    E = 1e-7 (kinks on grid)
 *   gelu         LO [-4, 4) 1/32    LE [-16, 16) 1/2   slopes 0 / 1    E = 9.8e-5
 *   gelu_tanh    LO [-4, 4) 1/32    LE [-16, 16) 1/2   slopes 0 / 1    E = 9.8e-5
 *   mish         LO [-8, 8) 1/16    LE [-32, 32) 1     slopes 0 / 1    E = 3.2e-4
 *   softplus     LO [-8, 8) 1/16    LE [-32, 32) 1     slopes 0 / 1    E = 1.3e-4
 *   exp          LO [-5, 11) 1/16   LE [-21, 11) 1/2   slopes 0 / half(e^11) = 59872
 *       exp's bound is relative where its values are large: |y - e^t| <= 1.7e-4 + 1.5e-3 e^t
 *       for t < 11 (LE region, t < -5: interpolation is 3 % relative but below 1.7e-4
 *       absolute); from 11 the slope continues e^11 linearly (within 0.5 % while e^t is a
 *       half) and leaves the half range, rounding to infinity, from t = 11.0944 on (e^t
 *       from 11.0898 on). Below -21: half(e^-21) = 0.
 *   softmax_exp  LO [-8, 0) 1/32   LE [-32, 0) 1/2   slopes 0 / 1
 *       exp for softmax's t - max <= 0: |y - e^t| <= 1e-5 + 1.1e-3 e^t for t <= 0 (LO's
 *       interpolation a quarter of exp's table's: RMS relative error 2.8e-4 against
 *       exp's 4.4e-4 where e^t > 0.01); from 0 on 1 + t, within t^2 / 2 of e^t.
 * Flat ends (slope 0) leave at most |f(end) - f(+-inf)|: 1.2e-7 for sigmoid, 2.5e-14 for tanh,
 * 0 for hardsigmoid; silu, hardswish, gelu, gelu_tanh, mish and softplus continue as 0 below
 * and t above their LE table (softplus(-32) = 1.3e-14, softplus(32) - 32 the same).
 *
 * LE's exponent mode (NVDLA's X table: lut-programming.rst, "exponential mode", the mode of
 * its LRN table, with linear_start 0): le_step = 0 in accel_lut says so, and then LE holds
 * the function at powers of two, LE[i] = half(f(le_start 2^i)), le_start a power of two, so
 * LE covers [le_start, le_end = le_start 2^64), 64 octaves. For le_start <= t < le_end (and t
 * outside LO, which keeps priority) the index is t's octave, the fraction t's place in it:
 *   e = floor(log2 t) (t's exponent bits), i = e - log2(le_start), f = (t - 2^e) * 2^-e
 *   y = LE[i] + (LE[i+1] - LE[i]) * f        (each step one fp32 operation; f is exact)
 * Below le_start and from le_end the slopes (0 for both functions) apply as above. One entry
 * per octave is coarse, so LO (linear) is the density table where the values mostly lie.
 * Their bounds are relative, R = max |y - f(t)| / f(t) of the tables with exact entries; with
 * half entries and output the error stays within (R + 2^-10) f(t) where f(t) is a normal half
 * (measured on every positive half and 4e6 geometric points over LE's range):
 *   rsqrt        LO [0.5, 4.5) 1/64   LE 2^[-30, 34) octaves   slopes 0 / 0   R = 8.9e-5 / 4.6e-2
 *   reciprocal   LO [0.5, 4.5) 1/64   LE 2^[-15, 49) octaves   slopes 0 / 0   R = 2.4e-4 / 0.125
 * (R on LO / on LE.) On LE the chord over an octave is what limits (at most 4.6 % and
 * 12.5 %), so layer norm and softmax follow each in FP16 with Newton steps on the SDP
 * (sim/decompose.py). Beyond: rsqrt gives 32768 below 2^-30 and half(2^-17) = 7.6e-6 from
 * 2^34; reciprocal 32768 below 2^-15 and 0 from 2^49 (from 2^25 the entries are 0 already).
 * log crosses 0, so its bound is absolute, A = max |y - ln t| of the tables with exact
 * entries; with half entries and output within A + 2^-10 |ln t| + 2^-24 (same measurement):
 *   log          LO [1, 9) 1/32       LE 2^[-24, 40) octaves   slopes 0 / 0   A = 1.2e-4 / 6.0e-2
 * On LE the octave's chord of ln(1 + f) against f ln 2 is off by at most ln(1 / ln 2) - 1 +
 * ln 2 = 0.0597 (at f = 1 / ln 2 - 1): LO covers log_softmax's sums of exponentials, 1 to C,
 * for C up to 8 and wherever the sum stays below 9. Beyond: ln(2^-24) = -16.64 below 2^-24
 * (0, negatives, -inf), half(ln 2^40) = 27.72 from 2^40.
 */
typedef struct accel_lut {
  float lo_start, lo_step;   /* LO covers [lo_start, lo_start + 256 lo_step) */
  float le_start, le_step;   /* LE covers [le_start, le_start + 64 le_step), contains LO's */
  float underflow_slope, overflow_slope;
} accel_lut;

/* The SDP lookup table in INT8 (ABI 5): NVDLA's Y-unit LUT on the integer pipeline, with the
 * tables and registers the compiler programs for one layer (on NVDLA: the LUT entries and
 * S_LUT_* registers). Its input is t, the int32 value after the element-wise step; LO and LE
 * are linear tables whose step is 2^index_select units of t (the hardware's index is a
 * shift), entries int16, linear interpolation with a 16-bit fraction, programmable slopes
 * beyond LE:
 *   frac(r, s) = s >= 16 ? r >> (s - 16) : r << (16 - s)  (the 16 bits below the index)
 *   d = t - lo_start; 0 <= d < 256 << lo_index_select (LO hit):
 *       i = d >> lo_index_select, f = frac(d & (2^lo_index_select - 1), lo_index_select)
 *       y = rhaz(LO[i] * (65536 - f) + LO[i+1] * f, 16)
 *   else d = t - le_start; 0 <= d < 64 << le_index_select (LE hit): the same on LE
 *                                        (LO has priority: NVDLA's hybrid priority set to LO)
 *   else t < le_start (underflow): y = LE[0] + rhaz((t - le_start) * underflow_scale,
 *                                                   underflow_shift)
 *   else (overflow):               y = LE[64] + rhaz((t - le_end) * overflow_scale,
 *                                                   overflow_shift),
 *                                  le_end = le_start + (64 << le_index_select)
 *   y = sat32(y), exact in int64; the output converter then takes y to int8 codes.
 * LE's exponent mode (NVDLA's LRN table: index = log2(t - le_start) - le_index_offset) is
 * modelled in FP16 only (accel_lut): INT8 tables index linearly, rsqrt and reciprocal
 * included (the compiler's tables cover where the output codes change). Limits: index selects 0..31, slope scales int16,
 * slope shifts 0..ACCEL_MAX_SHIFT. The layout (644 bytes of entries, then int32 fields) is what
 * generated code stores as one int32 constant. */
typedef struct accel_lut_int8 {
  int16_t lo[ACCEL_LUT_LO_ENTRIES];  /* LO entries, the function at lo_start + i 2^lo_index_select */
  int16_t le[ACCEL_LUT_LE_ENTRIES];  /* LE entries, the function at le_start + i 2^le_index_select */
  int32_t lo_start, le_start;        /* table starts, in units of t */
  int32_t lo_index_select, le_index_select; /* log2 of each table's step in units of t, 0..31 */
  int32_t underflow_scale, underflow_shift; /* slope below LE: int16 scale, right shift */
  int32_t overflow_scale, overflow_shift;   /* slope above LE */
} accel_lut_int8;

/* One of NVDLA's SDP X units with its operands read from memory (ABI 13): NVDLA's X1 (BS)
 * and X2 (BN) units each hold an ALU and then a multiplier, whose operands are a register,
 * one value per kernel (channel) or one per element, fetched by the unit's own read DMA
 * (BRDMA, NRDMA). FP32 and FP16 only:
 *   t = (t + alu) * mul       (alu NULL: no add; mul NULL: no multiply; two roundings in fp32)
 * each operand [N][C][H][W] in the op's shape, or [C] with *_per_channel = 1 (NVDLA's
 * per-kernel mode), in the SDP's precision. The ALU is modelled as a sum only (NVDLA's also
 * takes a max, a min or an equality). A layer norm's last pass reads x, -mean and 1/sqrt
 * (var + eps) through them and rounds once (docs/transformer_ops.md). */
typedef struct accel_sdp_x {
  const void* alu;
  const void* mul;
  int32_t alu_per_channel, mul_per_channel;  /* 0 or 1 */
} accel_sdp_x;

/* SDP: the X units, per-channel affine, element-wise op, activation, in that order, one pass,
 * every step in fp32 (FP16: on widened halves, rounded to half once, at the output):
 *   t = ((x[n][c][h][w] + x1.alu) * x1.mul + x2.alu) * x2.mul   (accel_sdp_x; unset: skipped)
 *   t = t * scale[c] + shift[c]                   (scale NULL: 1, shift NULL: 0; two roundings)
 *   t = ew_op(t, ew_operand[n][c][h][w])          (ew_op NONE: skipped)
 *   y = act(t)
 * Bias is shift alone; inference batch norm folds to scale = gamma / sqrt(var + eps) and
 * shift = beta - mean * scale, and a conv bias folds into that same shift.
 *
 * INT8 replaces scale/shift/clip_min/clip_max/prelu_slope (which must be NULL / unused) by
 * integer converters, NVDLA's SDP units in their order (nvdla/doc precision.rst; the C model's
 * sdp_x; docs/nvdla_rtl.md). v = the CONV's int32 accumulator, or x - in_zero for an SDP that
 * reads its input from memory (NVDLA: the raw code, in_zero in the ALU's operand). S = the
 * largest rshift[c] over the op's channels (0 without rshift), p[c] = S - rshift[c]:
 *   BS: t = sat32((v + bias[c]) * 2^p[c])                   (bias NULL: 0)
 *       the ALU's sum in 33 bits (no saturation), the multiplier by 2^p[c], the shifter's sat32
 *   BN: t = sat32(rhaz(t * mul[c], S))                      (mul NULL: 1)
 *       the per-channel multiplier and the layer's one shifter: rhaz((v + bias) * mul, rshift)
 *       wherever BS does not saturate (|v + bias| 2^p <= INT32_MAX; p = 0: always)
 *   e = sat32(rhaz((ew_operand - ew_zero) * ew_mul, ew_shift)), t = sat32(t op e)
 *                                                           (op: add, mul, max, min)
 *   act: RELU t = max(t, 0); PRELU (an X unit's multiplier in PReLU mode) t < 0:
 *        t = sat32(rhaz(t * prelu_mul[c], prelu_shift)), t >= 0 passes
 *   LUT activations (SIGMOID and after): t = the table lookup of `lut` at t (accel_lut_int8)
 *   y = sat8(rhaz(t * out_mul, out_shift) + out_zero)       (out_mul 0: y = sat8(t + out_zero))
 *   CLIP: y = min(max(y, clip_lo), clip_hi)                 (output codes)
 * Multipliers are int16 values, shifts 0..ACCEL_MAX_SHIFT. With out_mul 0 the output step is
 * NVDLA's converter (offset -out_zero, scale 1, shift 0). Not NVDLA's (units nv_small lacks, or
 * none of NVDLA's): the element-wise step and the LUT (nv_full's EW and LUT), out_mul != 0 (NVDLA
 * subtracts an offset before its multiply), CLIP (no clip unit). On NVDLA the bias is BS's
 * 16-bit ALU operand shifted left (and BN's for the low bits, the export's split), 2^p[c] BS's
 * 16-bit multiplier (p <= 14), PReLU a third X unit's multiplier: the export refuses what
 * nv_small's registers cannot hold (docs/nvdla_rtl.md). */
typedef struct accel_sdp_desc {
  const void* scale;         /* [C] in `precision`, or NULL */
  const void* shift;         /* [C] in `precision`, or NULL */
  accel_eltwise ew_op;
  const void* ew_operand;    /* the op's output shape, NCHW ([N][C] with ew_per_channel); needs
                              * ACCEL_FEATURE_ELEMENTWISE */
  accel_activation act;
  float clip_min, clip_max;  /* ACCEL_ACT_CLIP bounds, clip_min <= clip_max */
  const void* prelu_slope;   /* [C] for ACCEL_ACT_PRELU */
  accel_precision precision;
  /* ABI 2: INT8 converters (all 0 / NULL in other precisions) */
  const int32_t* bias;       /* [C], accumulator units */
  const int16_t* mul;        /* [C] */
  const uint8_t* rshift;     /* [C], each 0..ACCEL_MAX_SHIFT */
  int32_t in_zero;           /* zero point of an input read from memory */
  int32_t ew_zero, ew_mul, ew_shift;   /* element-wise operand converter */
  const int16_t* prelu_mul;  /* [C] for ACCEL_ACT_PRELU */
  int32_t prelu_shift;
  int32_t out_mul, out_shift, out_zero;/* output converter */
  int32_t clip_lo, clip_hi;  /* ACCEL_ACT_CLIP bounds in output codes, -128 <= lo <= hi <= 127 */
  const accel_lut_int8* lut; /* (ABI 5) INT8 LUT activation: its tables; NULL otherwise */
  /* (ABI 5) Precision conversion, for mixed INT8/FP16 code (NVDLA's SDP reads one format and
   * writes another). convert = 1: this SDP, alone in its run with no other field set, writes
   * the other 8/16-bit precision: an INT8 SDP writes FP16, an FP16 SDP writes INT8 (the run's
   * output tensor is in that precision). cvt_scale (positive, finite) and cvt_zero
   * (-128..127) are the INT8 side's quantisation; the values are accel_convert's through FP32:
   *   INT8 -> FP16  y = half((float)((q - cvt_zero) * cvt_scale))   (round to nearest even)
   *   FP16 -> INT8  q = sat8(rhaz(x / cvt_scale) + cvt_zero), in double
   * Costed as an SDP pass that reads one precision and writes the other. An observer does not
   * see the run: the values it converts were observed where they were made. */
  int32_t convert;
  float cvt_scale;
  int32_t cvt_zero;
  /* (ABI 10) 1: ew_operand holds one value per image and channel, [N][C], read for every
   * position of that channel (NVDLA's per-kernel operand mode: squeeze-excite's x * s, whose
   * scale is a computed tensor); the op is otherwise as above, its converters included.
   * Needs ew_op; NCHW tensors only (ACCEL_ERR_UNSUPPORTED with a C16 layout). 0: [N][C][H][W]. */
  int32_t ew_per_channel;
  /* (ABI 13) The X units' operands read from memory (accel_sdp_x), applied first: FP32 and
   * FP16 (INT8: ACCEL_ERR_UNSUPPORTED), NCHW tensors only, and ACCEL_FEATURE_ELEMENTWISE (the
   * operand read DMA). Costed as operand bytes read, with the SDP's element-wise throughput
   * (one pass through the pipelined units, whatever they do). An observer does not see these
   * operands (only ew_operand). All zero: no X unit step. */
  accel_sdp_x x1, x2;
} accel_sdp_desc;

typedef enum accel_pool {
  ACCEL_POOL_MAX = 0,
  ACCEL_POOL_AVG = 1,
  ACCEL_POOL_COUNT           /* not a pool: the number of them (stays last) */
} accel_pool;

/* PDP: pooling over kernel_h x kernel_w windows (1..ACCEL_MAX_POOL_KERNEL per side).
 *   out[n][c][y][x] = reduce over r, s of in[n][c][y*stride_h - pad_top + r][x*stride_w - pad_left + s]
 *   max: padding never wins; avg: sum / (count_include_pad ? kernel_h*kernel_w : in-image count)
 *   out_h = (H + pad_top + pad_bottom - kernel_h) / stride_h + 1 (same for w)
 * Padding is smaller than the kernel, so every window holds at least one in-image element.
 * INT8 average, NVDLA's PDP bit for bit: S = the sum of the window's codes, each padded
 * position reading as the zero point (NVDLA's PAD_VALUE), out = sat8(rhaz(rhaz(S * rw, 16) *
 * rh, 16)) with rw = floor(2^16 / kernel_w), rh = floor(2^16 / kernel_h) (the 0.16 reciprocals
 * NVDLA's compiler programs: RECIP_KERNEL_WIDTH / HEIGHT, 0x5555 for 3). The divisor is always
 * the whole window: count_include_pad = 0 with padding is ACCEL_ERR_UNSUPPORTED in INT8. The
 * output keeps the input's scale and zero point. */
typedef struct accel_pdp_desc {
  accel_pool pool;
  int32_t kernel_h, kernel_w;
  int32_t stride_h, stride_w;
  int32_t pad_top, pad_bottom, pad_left, pad_right;
  int32_t count_include_pad; /* 0 or 1, average pooling only */
  accel_precision precision;
  /* ABI 2 */
  int32_t zero;              /* INT8: the input's (and output's) zero point */
} accel_pdp_desc;

/* CDP: local response normalisation across channels, PyTorch's LocalResponseNorm exactly:
 *   out[n][c][y][x] = in[n][c][y][x] / (k + alpha / local_size * S)^beta,
 *   S = sum of in[n][c'][y][x]^2 over c' in [c - local_size/2, c + (local_size-1)/2] within
 *       [0, C) (channels outside read as 0; the divisor stays local_size, as torch's
 *       zero-padded average does)
 * local_size: 3, 5, 7 or 9, the lengths NVDLA's CDP has (other sizes, valid in PyTorch, are
 * ACCEL_ERR_UNSUPPORTED). alpha >= 0, k > 0 (so the base is positive and the power defined),
 * beta any finite value.
 * FP32: S, the base and the power in double (the products of floats are exact, S sums them
 * from the lowest channel up), the quotient rounded once to fp32.
 * FP16: the FP32 computation on the widened halves, rounded once to half. NVDLA evaluates the
 * power through the CDP's own lookup table; that table is not modelled, so the simulator's
 * FP16 LRN is more accurate than the hardware's by up to that table's error.
 * INT8 (ABI 11): NVDLA's CDP bit for bit, with the registers and tables of `int8`
 * (accel_cdp_int8; alpha, beta and k are not read: the compiler folds them into the tables).
 * The input's and output's codes, the window of local_size channels as above:
 *   v = sat9(rhaz((x - datin_offset) * datin_scale, datin_shift))
 *   S = sum of v^2 over the window (S = v with sqsum_bypass)
 *   t = lookup(S), below (16 bits)
 *   y = t * v (t with mul_bypass), kept to its low 25 bits (two's complement)
 *   out = sat8(rhaz((y - datout_offset) * datout_scale, datout_shift))
 * lookup (nvdla/doc lut-programming.rst, the C model's CDP): rhaz rounds half away from zero,
 * a shift beyond 62 gives 0; each table gives hit, underflow or overflow:
 *   LE, linear (le_exponent 0): d = S - le_start, i = le_index_select >= 0 ? d >> sel
 *       : d << -sel; under: i < 0 or d <= 0; over: i >= 64; else hit at i with the fraction
 *       f = the sel bits below the index as 16 bits (r >> (sel - 16) or r << (16 - sel); 0
 *       for sel < 0); LO the same with lo_start, lo_index_select, 256.
 *   LE, exponent (le_exponent 1): e = floor(log2 d) for d > 0, i = e - le_index_offset;
 *       under: i < 0 or d <= 0; over: i >= 64; else f = (d - 2^e) as 16 fraction bits of e.
 *   hit:   sat16(T[i] + sat56(rhaz((T[i+1] - T[i]) * f, 16)))
 *   under: sat16(T[0] + sat56(rhaz(delta * uflow_scale, uflow_shift))), delta = S - start
 *          (LE exponent: minus 2^le_index_offset when that offset is >= 0)
 *   over:  sat16(T[last] + sat56(rhaz((S - end) * oflow_scale, oflow_shift)))
 *   both under: LO's if uflow_priority else LE's; both over: oflow_priority likewise; one
 *   hit: that one's; otherwise (both hit, or one under and one over): hybrid_priority. */
typedef struct accel_cdp_int8 {
  int64_t le_start, le_end, lo_start, lo_end;   /* in units of S (NVDLA: 38-bit registers) */
  int16_t le[ACCEL_LUT_LE_ENTRIES];
  int16_t lo[ACCEL_LUT_LO_ENTRIES];
  int32_t le_index_select, lo_index_select;    /* -32..31 */
  int32_t le_index_offset;                     /* -128..127 */
  int32_t le_exponent;                         /* 0 or 1 */
  int32_t le_uflow_scale, le_uflow_shift, le_oflow_scale, le_oflow_shift; /* int16, 0..31 */
  int32_t lo_uflow_scale, lo_uflow_shift, lo_oflow_scale, lo_oflow_shift;
  int32_t uflow_priority, oflow_priority, hybrid_priority;               /* 0 LE, 1 LO */
  int32_t datin_offset, datin_scale, datin_shift;     /* int8, int16, 0..31 */
  int32_t datout_offset, datout_scale, datout_shift;  /* 25-bit signed, int16, 0..63 */
  int32_t sqsum_bypass, mul_bypass;                   /* 0 or 1 */
} accel_cdp_int8;

typedef struct accel_cdp_desc {
  int32_t local_size;
  float alpha, beta, k;
  accel_precision precision;
  const accel_cdp_int8* int8; /* (ABI 11) INT8: the CDP's registers and tables; NULL otherwise */
} accel_cdp_desc;

/* BDMA: a strided copy of channels, bit for bit (a copy never converts). Input (n, C, h, w),
 * output (n, dst_channels, h, w); the copy of `channels` channels runs repeat + 1 times:
 *   for r <= repeat, i < channels:
 *     out[:, dst_offset + r*dst_repeat_stride + i*dst_stride]
 *         = in[:, src_offset + r*src_repeat_stride + i*src_stride]
 * Every other output channel is left untouched, so several runs fill one destination: a concat
 * is one run per input (dst_offset = the channels before it), a split / chunk one run per part
 * (src_offset = its first channel), a channel shuffle of g groups g runs with dst_stride = g
 * (run j: src_offset = j*C/g, channels = C/g, dst_offset = j). The repeat is NVDLA's second
 * level (its BDMA copies a line LINE_REPEAT + 1 times at the line strides, then that surface
 * SURF_REPEAT + 1 times at the surface strides; nvdla/doc, programming guide, "BDMA
 * programming"): a transpose of R x S "channels" (one element or line each) is one run,
 * channels = S read in order and written every R, repeated R times one row further (src
 * S, dst 1), where it was R runs. Any precision the simulator runs. Checks: the fields'
 * ranges below; the last channel read, src_offset + repeat*src_repeat_stride +
 * (channels-1)*src_stride < C (ACCEL_ERR_SHAPE); the last written, dst_offset +
 * repeat*dst_repeat_stride + (channels-1)*dst_stride < dst_channels (ACCEL_ERR_INVALID); no
 * channel written twice: with a repeat, the repeats' blocks follow one another
 * (dst_repeat_stride > (channels-1)*dst_stride) or interleave (dst_repeat_stride >= 1 and
 * dst_stride > repeat*dst_repeat_stride), ACCEL_ERR_INVALID otherwise (which copy lands last
 * would be the order's); the output tensor's n, h, w are the input's and its c is
 * dst_channels; input and output must not overlap. A BDMA op runs alone in its run (num_ops
 * == 1), in either mode: it is not part of the CONV -> SDP -> PDP pipe. Needs
 * ACCEL_FEATURE_BDMA (ACCEL_ERR_UNSUPPORTED otherwise). */
typedef struct accel_bdma_desc {
  int32_t src_offset;        /* first input channel read, >= 0 */
  int32_t src_stride;        /* input channel step, >= 1 */
  int32_t channels;          /* channels copied per repeat, >= 1 */
  int32_t dst_offset;        /* first output channel written, >= 0 */
  int32_t dst_stride;        /* output channel step, >= 1 */
  int32_t dst_channels;      /* channels of the output surface, >= 1 */
  accel_precision precision; /* element type of both tensors */
  int32_t repeat;            /* (ABI 14) further copies, >= 0 (0: one copy; NVDLA's
                              * SURF_REPEAT) */
  int32_t src_repeat_stride; /* (ABI 14) input channels from one copy's first to the next's,
                              * >= 0 (unused without a repeat) */
  int32_t dst_repeat_stride; /* (ABI 14) output channels from one copy's first to the next's,
                              * >= 0 (unused without a repeat) */
} accel_bdma_desc;

/* RUBIK modes (accel_rubik_desc.mode), NVDLA's D_MISC_CFG.RUBIK_MODE. SPLIT (a feature cube
 * into one plane per channel) and MERGE (the reverse) change only the memory format, which
 * the simulator's dense tensors do not have: they are refused (ACCEL_ERR_UNSUPPORTED). */
typedef enum accel_rubik_mode {
  ACCEL_RUBIK_CONTRACT = 0,
  ACCEL_RUBIK_SPLIT = 1,
  ACCEL_RUBIK_MERGE = 2,
  ACCEL_RUBIK_MODE_COUNT     /* not a mode: the number of them (stays last) */
} accel_rubik_mode;

/* RUBIK contract: the second hardware layer of NVDLA's deconvolution (nvdla/doc, unit
 * description "Deconvolution" and "RUBIK"). A transposed convolution of stride (sx, sy) is
 * first run as a convolution whose sx*sy output channel groups are its output phases, one
 * after another in C (the "channel-extended cube"); contract puts every group's values at its
 * phase of the sx x sy output block. Input (n, C, H, W), C = sx*sy*C'; output
 * (n, C', H*sy, W*sx):
 *   out[n][c][y*sy + a][x*sx + b] = in[n][(a*sx + b)*C' + c][y][x]
 *       for c < C', a < sy, b < sx, y < H, x < W
 * i.e. phase-major: input channel group a*sx + b (C' channels) fills row phase a, column
 * phase b (NVDLA's figure "Contract mode in RUBIK": group 1 lands right of group 0, group sx
 * below it). This is depth-to-space with the phase outermost (PyTorch's pixel_shuffle puts
 * the channel outermost: in[c*sx*sy + a*sx + b]). A copy, bit for bit, in any precision the
 * simulator runs. Checks: stride_x, stride_y in [1, ACCEL_MAX_RUBIK_STRIDE] (ACCEL_ERR_INVALID);
 * C a multiple of sx*sy (ACCEL_ERR_SHAPE); width, height and channels of input and output
 * <= ACCEL_MAX_RUBIK_DIM (ACCEL_ERR_UNSUPPORTED); the output tensor the shape above and not
 * overlapping the input. NVDLA also asks each group of C' channels to be whole 32-byte atoms:
 * in memory each group starts on its own atom surface (its convolution wrote it there, the
 * channels padded to the atom), which the cost model charges; the simulator's dense tensors
 * need no padding. Runs alone (num_ops == 1), in either mode, memory to memory. Needs
 * ACCEL_FEATURE_RUBIK (ACCEL_ERR_UNSUPPORTED otherwise: nv_small has none). */
typedef struct accel_rubik_desc {
  accel_rubik_mode mode;     /* CONTRACT (SPLIT and MERGE are refused) */
  int32_t stride_x;          /* sx: output columns per input column, >= 1 */
  int32_t stride_y;          /* sy: output rows per input row, >= 1 */
  accel_precision precision; /* element type of both tensors */
} accel_rubik_desc;

/* Which of an op's memory streams use the secondary memory (SRAMIF) instead of DRAM
 * (accel_op.sram bits). NVDLA's compiler places feature maps between layers there when they
 * fit; the engines read and write it directly, at cfg.sram_bytes_per_s. Weights may live there
 * too, resident: copied in once when the model's constants load (NVDLA's BDMA moves DRAM to
 * SRAM), which no inference pays for. A bit needs cfg.sram_bytes > 0 (ACCEL_ERR_UNSUPPORTED
 * otherwise) and a stream that goes to memory: INPUT on an op that reads its input from memory,
 * OPERAND on an SDP with an element-wise operand, OUTPUT on an op that writes its output to
 * memory, WEIGHTS on a CONV (ACCEL_ERR_INVALID otherwise). What a run places in SRAM
 * (atom-padded tensors, each stream counted on its own, and the weights as stored) must fit
 * cfg.sram_bytes. */
typedef enum accel_sram_stream {
  ACCEL_SRAM_INPUT = 1,      /* the op's input feature data */
  ACCEL_SRAM_OPERAND = 2,    /* the SDP's element-wise operand */
  ACCEL_SRAM_OUTPUT = 4,     /* the op's output */
  ACCEL_SRAM_WEIGHTS = 8     /* the CONV's weights (resident) */
} accel_sram_stream;

/* One engine op of a chain: `engine` says which descriptor is meant. */
typedef struct accel_op {
  accel_engine engine;
  union {
    accel_conv_desc conv;
    accel_sdp_desc sdp;
    accel_pdp_desc pdp;
    accel_cdp_desc cdp;      /* ABI 4 (the union's size is unchanged: conv is the largest) */
    accel_bdma_desc bdma;    /* ABI 4 */
    accel_rubik_desc rubik;  /* ABI 8 */
  };
  uint32_t sram;             /* ABI 5: accel_sram_stream bits; 0: every stream in DRAM */
} accel_op;

/* The CDP reads its input from memory and writes its output to memory on NVDLA: it is not part
 * of the fused CONV -> SDP -> PDP pipe. A FUSED run with a CDP is that CDP alone; an
 * INDEPENDENT chain may hold CDPs anywhere. */
typedef enum accel_mode {
  ACCEL_MODE_FUSED = 0,      /* on the fly: at most CONV, SDP, PDP, one each, in that order;
                              * or one CDP alone */
  ACCEL_MODE_INDEPENDENT = 1,/* any order; every intermediate goes through memory */
  ACCEL_MODE_COUNT           /* not a mode: the number of them (stays last) */
} accel_mode;

/* Cost of one executed op. Bytes are as laid out in memory (atom-padded feature data). */
typedef struct accel_op_stats {
  accel_engine engine;
  char op[ACCEL_NAME_LEN];   /* "conv2d", "sdp:scale_shift+add+relu", "pdp:max", "cdp:lrn",
                              * "bdma:copy", "rubik:contract", ... */
  accel_precision precision;
  int64_t macs;              /* multiply-accumulates the array performs: the convolution's
                              * own in direct mode, the 4x4 transformed products in Winograd
                              * mode (16 per 2x2 outputs, not 36) */
  int64_t mac_cycles;        /* MAC-array cycles with atomic C / K rounding (CONV only) */
  int64_t compute_cycles;    /* the engine's busy cycles: a CONV's from its first data to its
                              * last MAC (CBUF loading, then mac_cycles or a short stripe's
                              * weight loads), other engines' elements / throughput */
  int64_t input_bytes;       /* feature data read, re-reads included (0 when fed on the fly) */
  int64_t weight_bytes;      /* weights and per-channel parameters read, re-reads included */
  int64_t operand_bytes;     /* SDP element-wise second tensor read */
  int64_t reread_bytes;      /* the part of input+weight bytes that re-reads forced by CBUF */
  int64_t bytes_read;        /* input + weight + operand bytes */
  int64_t bytes_written;     /* 0 when the result goes on the fly to the next engine */
  int64_t memory_cycles;     /* DRAM cycles: the DRAM bytes below at the DRAM bandwidth, plus
                              * dram_turnaround_cycles per burst written, plus
                              * dram_latency_cycles once when any DRAM byte moves */
  int64_t cycles;            /* the engine's pipeline cycles (cfg.*_pipeline_cycles) +
                              * max(compute_cycles + dram_latency_cycles when it reads DRAM,
                              * memory_cycles, sram_cycles) */
  /* ABI 5: where the bytes go (for energy), and the CBUF split used */
  int64_t dram_read_bytes;   /* bytes read over DRAM, each stream rounded up to whole bursts */
  int64_t dram_write_bytes;  /* bytes written to DRAM, rounded up to whole bursts */
  int64_t sram_read_bytes;   /* bytes read from the secondary memory (accel_op.sram) */
  int64_t sram_write_bytes;  /* bytes written to it */
  int64_t sram_cycles;       /* the SRAM bytes at cfg.sram_bytes_per_s */
  int32_t data_banks, weight_banks; /* CONV: the CBUF split the run used */
  /* Energy (ABI 5; picojoules, the configuration's per-action energies times these counts). A
   * CONV writes into CBUF every byte it reads from memory (input_bytes + weight_bytes) and
   * reads from CBUF, per MAC-array cycle, one atomic-C entry of data (atomic_c elements) and,
   * once per stripe of ACCEL_CONV_STRIPE output positions, each atomic-C x atomic-K weight
   * block the cycles use (the MAC cells hold it for the stripe). Other engines touch no CBUF. */
  int64_t cbuf_read_bytes;   /* CONV: data + weight bytes read from CBUF */
  int64_t cbuf_write_bytes;  /* CONV: input + weight bytes written into CBUF */
  double mac_energy_pj;      /* macs x mac_<precision>_pj (idle lanes are not charged) */
  double cbuf_energy_pj;     /* the CBUF reads and writes */
  double dram_energy_pj;     /* the memory interfaces: DRAM bytes (burst-rounded) x
                              * dram_pj_per_byte + SRAM bytes x sram_pj_per_byte */
  double engine_energy_pj;   /* SDP / PDP / CDP elements processed x the engine's energy */
  double energy_pj;          /* the sum of the above */
} accel_op_stats;

/* Cost of one run (one chain). FUSED: the engines overlap, so cycles is the long pole of every
 * engine's compute and the chain's whole memory traffic. INDEPENDENT: the sum of the ops'. */
typedef struct accel_run_stats {
  char label[ACCEL_LABEL_LEN];
  accel_mode mode;
  int32_t num_ops;
  int64_t macs;
  int64_t mac_cycles;
  int64_t bytes_read;
  int64_t bytes_written;
  int64_t cycles;
  double utilization;        /* macs / (cycles * MACs the array has at this precision):
                              * the products performed over the array's, at most 1 */
  /* ABI 5: the sums of the ops' energies (picojoules), in either mode */
  double mac_energy_pj, cbuf_energy_pj, dram_energy_pj, engine_energy_pj;
  double energy_pj;
  /* ABI 5 */
  int64_t memory_cycles;     /* DRAM cycles of the run (FUSED: of the chain's whole DRAM
                              * traffic, one latency; INDEPENDENT: the ops' sum) */
  int64_t sram_cycles;       /* the same for the secondary memory */
  int64_t dram_bytes;        /* DRAM bytes read + written (burst-rounded) */
  int64_t sram_bytes;        /* SRAM bytes read + written */
} accel_run_stats;

/* The runtime API (configurations, devices and runs, profiling, memory, version, errors). */
#include "runtime_api.h"

#ifdef __cplusplus
}
#endif

#endif /* ACCEL_ACCEL_H_ */
