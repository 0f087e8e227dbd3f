/*
 * accel/runtime_api.h - the runtime API of the simulated accelerator: configurations, devices
 * and runs, the accelerator's boundary, profiling, host kernels, memory, version and errors.
 *
 * Included by accel.h (include that): the instruction set it runs (engines, descriptors,
 * tensors, run statistics) is declared there, before this file. Plain C declarations, as
 * accel.h's, since the Python bindings read both through the C preprocessor.
 */
#ifndef ACCEL_RUNTIME_API_H_
#define ACCEL_RUNTIME_API_H_

#ifndef ACCEL_ACCEL_H_
#error "include accel/accel.h, which declares the instruction set this API runs"
#endif

/* ---- configurations -------------------------------------------------------------------- */

/* Number of presets, and preset `index`'s name (NULL when out of range). */
int32_t accel_num_presets(void);
const char* accel_preset_name(int32_t index);
/* Fill *out with the named preset ("nv_small", "nv_large", "nv_full"). */
accel_status accel_config_preset(const char* name, accel_config* out);
/* Check every field of a (user-given) configuration. */
accel_status accel_config_validate(const accel_config* cfg);
/* The CBUF split NVDLA's compiler would choose for a CONV (what accel_conv_desc.data_banks /
 * weight_banks = 0 mean), as nvdla/sw's ConvCoreNode::splitNodesInternal orders its options:
 *   1. the whole input and all weights fit: each gets what it needs;
 *   2. the whole input and two kernel groups (weights ping-pong, streamed once per image);
 *   3. the whole input and one kernel group;
 *   4. otherwise the input is split in horizontal slices (partial height, re-reading the rows
 *      slices share): the weights get what they need if that is at most half the banks (the
 *      compiler's default allotment), else two kernel groups, else one; the data the rest.
 * A sparse weight format reserves one more bank for the mask; Winograd's weights take banks at
 * their pre-transformed size; a multi_batch conv's whole input is its batch's (up to
 * ACCEL_MAX_BATCH images). `conv` needs its shape fields, modes, weight_format and
 * weights_nonzero, not its pointers. */
accel_status accel_conv_banks(const accel_config* cfg, const accel_conv_desc* conv,
                              const accel_tensor* input, int32_t* data_banks,
                              int32_t* weight_banks);
/* Bytes of a CONV's weights as its weight_format stores them (what one pass over them reads),
 * for an input of in_c channels (WINOGRAD mode: the pre-transformed 4x4 weights, C*s*s x K x
 * 16 x 2 bytes, which CBUF holds at that size too); 0 when the conv's fields are invalid (see accel_last_error). */
int64_t accel_conv_weight_bytes(const accel_config* cfg, const accel_conv_desc* conv,
                                int32_t in_c);
/* Bytes of a feature tensor (its shape and precision; data unused) as memory holds it: every
 * (n, h, w) position padded to whole memory atoms. 0 for an invalid tensor. */
int64_t accel_feature_bytes(const accel_config* cfg, const accel_tensor* tensor);
/* MACs the array performs per cycle at a precision: atomic_c x atomic_k for int8, half of
 * atomic_k for 16-bit data and fp32 (charged as fp16). 0 for an invalid precision. */
int64_t accel_config_macs_per_cycle(const accel_config* cfg, accel_precision precision);

/* ---- devices and runs ------------------------------------------------------------------ */

/* A device: a configuration plus the scratch memory and threads the simulator reuses. */
typedef struct accel_device accel_device;

accel_status accel_device_create(const accel_config* cfg, accel_device** out);
void accel_device_destroy(accel_device* dev);
/* The process-wide device for a configuration (created on first use, one per distinct
 * configuration, never destroyed): what generated code runs on, so that every external
 * function of a model shares one simulated accelerator and its scratch memory. */
accel_status accel_device_shared(const accel_config* cfg, accel_device** out);
/* The configuration the device was created with. */
accel_status accel_device_config(const accel_device* dev, accel_config* out);
/* Threads the kernels use (default: ACCEL_NUM_THREADS, else the number of online CPUs). */
accel_status accel_device_set_threads(accel_device* dev, int32_t num_threads);
int32_t accel_device_threads(const accel_device* dev);

/* Execute `ops` on `input`, writing `output`. `label` names the run in the profile (may be NULL).
 * run_stats and op_stats (an array of num_ops) receive the cost when not NULL. */
accel_status accel_run(accel_device* dev, const accel_op* ops, int32_t num_ops,
                       const accel_tensor* input, const accel_tensor* output, accel_mode mode,
                       const char* label, accel_run_stats* run_stats, accel_op_stats* op_stats);

/* Validate a chain without data and give each op's output shape (shapes: num_ops tensors,
 * data NULL); the last one is the shape accel_run's output must have. */
accel_status accel_chain_shapes(const accel_config* cfg, const accel_op* ops, int32_t num_ops,
                                const accel_tensor* input, accel_mode mode, accel_tensor* shapes);

/* The instruction sets this library's host kernels were compiled for (accel_isa bits): which
 * kernel implementations exist in this build (docs/kernels.md), e.g. the C16 kernels need
 * AVX-512. A build for -march=native has what its build machine has; AMX also needs the OS's
 * grant at run time. */
typedef enum accel_isa {
  ACCEL_ISA_AVX2 = 1,        /* AVX2 and FMA (x86-64-v3) */
  ACCEL_ISA_AVX512 = 2,      /* AVX-512 F, BW, VL */
  ACCEL_ISA_AVX512_VNNI = 4,
  ACCEL_ISA_AVX512_VBMI = 8,
  ACCEL_ISA_AMX = 16         /* AMX-TILE and AMX-INT8 */
} accel_isa;
uint32_t accel_host_isa(void);

/* Whether a run has a C16 kernel (accel_layout): 1 when, its output C16 and its input in
 * `input->layout`, it runs without conversions (input C16: C16 in and out; input NCHW: reads
 * NCHW and writes C16, as the image layer's convolution can); 0 when it would be converted
 * around (or the chain is invalid: see accel_chain_shapes). Tensors need shapes, not data. */
int32_t accel_c16_native(const accel_config* cfg, const accel_op* ops, int32_t num_ops,
                         const accel_tensor* input, accel_mode mode);

/* The cost of the same run without executing it: tensors need shapes, not data. */
accel_status accel_estimate(const accel_config* cfg, const accel_op* ops, int32_t num_ops,
                            const accel_tensor* input, const accel_tensor* output,
                            accel_mode mode, accel_run_stats* run_stats,
                            accel_op_stats* op_stats);

/* One chain of a batch estimate (ABI 5): its ops, input and output shapes (data unused), mode. */
typedef struct accel_chain {
  const accel_op* ops;
  int32_t num_ops;
  accel_tensor input;
  accel_tensor output;
  accel_mode mode;
} accel_chain;

/* accel_estimate for each of `num_chains` chains on one configuration, in one call (a sweep
 * costs a whole model per configuration this way). run_stats: num_chains records; op_stats
 * (may be NULL): the chains' ops one after another. On failure nothing after the failing chain
 * is written and the message names the chain's index. */
accel_status accel_estimate_chains(const accel_config* cfg, const accel_chain* chains,
                                   int32_t num_chains, accel_run_stats* run_stats,
                                   accel_op_stats* op_stats);

/* INT8 or FP16 CONV weights, or any Winograd CONV's, prepared for the simulator's kernel
 * (accel_conv_desc.weights_packed): INT8 in the kernel's layout (Winograd too: it runs the
 * direct kernel), FP16 widened to fp32, FP32 and FP16 in WINOGRAD mode pre-transformed (G g G^T
 * per kernel and folded channel, rounded to half for FP16: accel_conv_mode), as NVDLA's
 * compiler does once per network; direct FP32 1x1 weights (stride 1 or 2, no padding) and 3x3
 * weights (stride 1 or 2, no dilation), one group, multiples of 16 channels, in the layout of
 * the C16 kernels (accel_layout). Other direct FP32
 * weights are not packed (ACCEL_ERR_INVALID).
 * packed NULL: *packed_bytes receives the size needed. Otherwise packs conv->weights (which
 * must hold out_c x in_c/groups x kernel_h x kernel_w values: the library cannot see their
 * size) for an input of in_c channels into packed (*packed_bytes bytes, aligned to
 * ACCEL_PACKED_ALIGNMENT, not overlapping the weights). A run rejects a
 * packed buffer made for another weight shape (K, C, R, S, groups), stride (Winograd folds it)
 * or precision but cannot tell whether the
 * weights changed since: pack again when they do. Generated code packs once, at its first
 * call, and again after its constant loader runs. */
accel_status accel_conv_pack_weights(const accel_config* cfg, const accel_conv_desc* conv,
                                     int32_t in_c, void* packed, size_t* packed_bytes);

/* The lookup table geometry of a LUT activation (SIGMOID and after; see accel_lut). */
accel_status accel_lut_info(accel_activation act, accel_lut* out);

/* FP32 GELU's polynomials (ACCEL_ACT_GELU; csrc/lut.c: gelu_f32): C(x) = erfcx(x / sqrt 2) / 2
 * on each unit interval [n, n + 1), n = 0 .. ACCEL_GELU_INTERVALS - 1, as a polynomial of degree
 * ACCEL_GELU_DEGREE in d = x - (n + 0.5). Copies the floats the kernel evaluates into out:
 * out[j * ACCEL_GELU_INTERVALS + n] is d^j's coefficient on interval n; count must be
 * ACCEL_GELU_COEFFICIENTS (the NumPy reference reads its copy from here, so there is one). */
accel_status accel_gelu_coefficients(float* out, int32_t count);

/* Inference batch norm (and an optional preceding bias) as one SDP scale and shift:
 *   scale[c] = gamma[c] / sqrt(var[c] + epsilon)
 *   shift[c] = (bias[c] - mean[c]) * scale[c] + beta[c]
 * computed in double and rounded once. gamma NULL: 1; beta, bias NULL: 0. The compiler folds
 * constant parameters with this at build time, generated code folds runtime inputs with it. */
accel_status accel_fold_batch_norm(int32_t channels, const float* gamma, const float* beta,
                                   const float* mean, const float* var, const float* bias,
                                   float epsilon, float* scale, float* shift);

/* ---- the accelerator's boundary --------------------------------------------------------- */

/* Convert `count` values between fp32 and a storage precision, as generated code does where
 * data enters and leaves the accelerator (src and dst must not overlap):
 *   FP32 -> INT8   q = sat8(x / scale rounded half away from zero + zero), in double; NaN -> zero
 *   INT8 -> FP32   x = (float)(((double)q - zero) * scale)
 *   FP32 -> FP16   round to nearest even;  FP16 -> FP32 exact
 * scale must be positive and finite and zero in -128..127 for INT8; both are ignored otherwise. */
accel_status accel_convert(const void* src, accel_precision from, void* dst, accel_precision to,
                           int64_t count, float scale, int32_t zero);

/* For each of `batch` images, the row-major [rows, cols] matrix at src written transposed
 * ([cols, rows]) at dst, element by element as bytes (element_bytes 1, 2 or 4: an int8, fp16
 * or fp32 tensor, moved bit for bit); src and dst must not overlap. The generated code's moves
 * of token tensors between their rows and the simulator's NCHW surface, which NVDLA's feature
 * format does not need (docs/transformer_ops.md: Layout). Refused, naming the value: src or dst
 * NULL (ACCEL_ERR_NULL), a negative size, element_bytes not 1, 2 or 4, a byte count
 * (batch x rows x cols x element_bytes) beyond int64, or overlapping buffers (ACCEL_ERR_INVALID),
 * a buffer not aligned to its elements (ACCEL_ERR_ALIGNMENT). */
accel_status accel_transpose(const void* src, void* dst, int64_t batch, int64_t rows,
                             int64_t cols, int32_t element_bytes);

/* ---- profiling ------------------------------------------------------------------------- */

/* While enabled, every accel_run in the process appends its run and op records. Enabling
 * clears the previous records. */
void accel_profile_enable(int32_t enabled);
int32_t accel_profile_num_runs(void);
/* Run `index`'s record, and the index of its first op record (its ops follow contiguously). */
accel_status accel_profile_run(int32_t index, accel_run_stats* out, int32_t* first_op);
int32_t accel_profile_num_ops(void);
accel_status accel_profile_op(int32_t index, accel_op_stats* out);

/* The op_index an observer receives for what is not an op's output. */
enum {
  ACCEL_OBSERVE_INPUT = -1,        /* the run's input */
  ACCEL_OBSERVE_OPERAND_BASE = -2  /* SDP i's element-wise operand: ACCEL_OBSERVE_OPERAND_BASE - i */
};

/* Calibration and accuracy analysis: while an observer is set, every accel_run in the process
 * calls it with the run's input (ACCEL_OBSERVE_INPUT), with each SDP's element-wise operand
 * (ACCEL_OBSERVE_OPERAND_BASE - the SDP's index) and with the output of each engine pass
 * (op_index = the pass's last op), before the next pass starts, so it also sees what a fused
 * chain keeps on chip. A BDMA run's output (op_index 0) is the channels it copied, gathered as
 * an (n, channels, h, w) tensor: the destination's other channels are not the run's (they hold
 * whatever they held before). Tensors come as the engines hold them: INT8 codes for INT8 runs,
 * FP32 values otherwise (an FP16 run's halves widened). The tensor is valid during the call
 * only; the observer must not run the device. NULL removes the observer. */
typedef void (*accel_observer)(void* user, const char* label, int32_t op_index,
                               const accel_tensor* tensor);
void accel_set_observer(accel_observer observer, void* user);

/* Export (accel_codegen.sim.recorder, `accel-codegen export-nvdla`): while a recorder is set,
 * every accel_run in the process that succeeds calls it once, after the run, with the run's
 * ops (their descriptors and the operands they point to), its input and output tensors and
 * its mode, so the program a compiled model runs can be written out in another form. All of
 * it is valid during the call only; the recorder must not run the device. NULL removes it. */
typedef void (*accel_recorder)(void* user, const char* label, const accel_op* ops,
                               int32_t num_ops, const accel_tensor* input,
                               const accel_tensor* output, accel_mode mode);
void accel_set_recorder(accel_recorder recorder, void* user);

/* ---- host kernels ---------------------------------------------------------------------- */

/* Whether the simulator's INT8 convolutions run on the host CPU's AMX tiles (Intel AMX-INT8;
 * compiled in where the build targets it, used where CPUID, the OS and Linux's
 * ARCH_REQ_XCOMP_PERM grant it; ACCEL_INT8_AMX=0 in the environment turns it off). The codes
 * are the same bit for bit either way: this is speed only. request < 0 only asks; 0 turns the
 * AMX path off, 1 back on (process-wide, between runs). Returns 1 when it is on after the
 * call, 0 when off or unavailable. */
int32_t accel_int8_amx(int32_t request);

/* What the host's kernels cost, for the compiler's choice of the tensors an fp32 function keeps
 * C16 (compiler/codegen/layouts.py asks these; the figures are the runtime's because they are
 * the host's). The defaults are one machine's (docs/kernels.md, "Host-speed figures");
 * ACCEL_HOST_C16 in the environment (read once per process) replaces rows of the table:
 * comma-separated name=fraction:flops entries (convert=bytes_per_second), e.g.
 * ACCEL_HOST_C16=pointwise_784=0.1:120e9,convert=40e9. A malformed entry makes every query
 * fail with ACCEL_ERR_INVALID naming it. */
/* Seconds that a convolution saves on its C16 kernel against its NCHW kernel (negative: it
 * loses; 0 for the kernels the table does not list): the NCHW kernel's time, its direct FLOPs
 * (2 x out_elements x group_channels x kernel_h x kernel_w) at the case's rate, times the case's
 * fraction. The case: WINOGRAD mode (winograd nonzero), a 1x1 by its output positions (per
 * image: 784 or more, 196 or more, fewer), a depthwise conv (group_channels 1) by its largest
 * stride (1 or 2), a dense 3x3 on 784 or more positions. */
accel_status accel_host_c16_saving(int32_t kernel_h, int32_t kernel_w, int32_t groups,
                                   int32_t group_channels, int32_t stride, int32_t winograd,
                                   int64_t out_elements, int64_t positions, double* seconds);
/* Seconds per byte of a tensor that converting it between NCHW and C16 takes (it reads and
 * writes each byte once: 2 / the "convert" row's bytes per second). */
accel_status accel_host_conversion_seconds(double* per_byte);

/* ---- memory ----------------------------------------------------------------------------- */

/* A buffer for tensors, packed weights or scratch (tvm_glue.h's, the device's): 64-byte
 * aligned; from 2 MB on, 2 MB aligned and, on Linux, advised for transparent huge pages
 * (madvise), so that a layer streaming megabytes of weights or activations misses the TLB once
 * per 2 MB rather than per 4 KB page (ResNet-50 at 1 thread 2-3 % faster,
 * docs/whole_network_time.md). NULL when out of memory; release with accel_buffer_free. */
void* accel_buffer_alloc(size_t bytes);
void accel_buffer_free(void* buffer);

/* ---- version ---------------------------------------------------------------------------- */

/* The ACCEL_ABI_VERSION this library was built with. Code built against this header with
 * another version lays out the structs above differently: tvm_glue.h's constant loader (every
 * exported library's first call) and the Python bindings refuse to run with such a library. */
int32_t accel_abi_version(void);

/* ---- errors ---------------------------------------------------------------------------- */

/* The message of the calling thread's last failure: names the bad field and its value. */
const char* accel_last_error(void);
const char* accel_status_name(accel_status status);

#endif /* ACCEL_RUNTIME_API_H_ */
