/*
 * tvm_glue.h - the fixed part of every external function the code generator emits: the tvm-ffi
 * C ABI (see the shared TVM notes) around the simulator's runtime API.
 *
 * Each external function is a translation unit of its own. It fills one accel_glue_function
 * with its tables (argument shapes, constant types, scratch sizes) and its state, writes its
 * layers as a function `int run_layers(float** a)` that calls the accel_glue_* helpers below,
 * and exports its two entry points with ACCEL_GLUE_EXPORT:
 *
 *   __tvm_ffi_<symbol>(args...)         inputs in parameter order, then outputs (destination-
 *                                       passing style): checks every argument (a compact fp32
 *                                       CPU tensor of the expected shape), sets the device up
 *                                       at the first call, runs the layers under a lock
 *   __tvm_ffi___init_<symbol>(array)    the constant loader: checks every constant, then holds
 *                                       them; weights packed from the old ones are dropped
 *
 * and a destructor the dynamic loader runs when the library is unloaded (the last reference to
 * its module dropped): it releases what the function holds (accel_glue_release), so a process
 * that builds and drops many models does not keep every one's constants, packed weights and
 * scratch.
 *
 * Errors are raised with TVMFFIErrorSetRaisedFromCStr under the name of an accel_codegen
 * exception class (AccelInvalidError, AccelShapeError, ...), which accel_codegen registers with
 * tvm-ffi: Python sees that class; a process without accel_codegen sees a RuntimeError with the
 * same text. A message raised while a run is under way starts with that run's names (the
 * source model's layer and the run label, which the generated code sets in `layer` before each
 * run); any other starts with the function's name ("external function f0"); each ends with
 * the exported symbol, in parentheses: a detail (a fused function's symbol names its every
 * op, often hundreds of characters).
 *
 * Compiled by the C tests against a stand-in for tvm-ffi and run under the sanitizers
 * (tests/c/test_glue.c).
 */
#ifndef ACCEL_TVM_GLUE_H_
#define ACCEL_TVM_GLUE_H_

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tvm/ffi/c_api.h>

#include "accel/accel.h"

/* What one argument must be: a compact float32 CPU tensor of this shape. */
typedef struct accel_glue_arg {
  const char* what;             /* "input 0 (x)", "output 0 (y)" */
  int32_t ndim;
  const int64_t* shape;
} accel_glue_arg;

/* The DLPack type of one constant. */
typedef struct accel_glue_dtype {
  int32_t code, bits;
} accel_glue_dtype;

/* One external function: its tables (read-only) and its state (set by the glue). */
typedef struct accel_glue_function {
  const char* name;             /* "external function f0": starts an error outside a run */
  const char* symbol;           /* the exported symbol: the last detail of every error */
  void (*fill_config)(accel_config* config); /* the configuration it was compiled for */
  int (*run_layers)(float** a); /* the generated layers: 0, or -1 with the error raised */
  int32_t num_inputs, num_outputs;
  const accel_glue_arg* args;   /* num_inputs + num_outputs */
  int32_t num_constants;
  const int64_t* const_counts;  /* values of each constant */
  const accel_glue_dtype* const_types;
  const void** constants;       /* state: the data of each constant, set by the loader */
  void** const_objects;         /* state: the tensors the loader holds a reference to */
  int32_t num_temps;
  const int64_t* temp_bytes;
  void** temps;                 /* state: scratch buffers, allocated at the first call */
  int32_t num_packed;
  void** packed;                /* state: weights packed at the first call */
  size_t* packed_bytes;
  pthread_mutex_t* lock;        /* one accelerator: calls queue */
  accel_config config;          /* state: set up at the first call */
  accel_device* device;         /* state: NULL until set up */
  const char* layer;            /* state: the run under way ("layer1.0.conv1 (run f0.3 ...)"),
                                   set by the generated code, NULL between calls */
} accel_glue_function;

static inline int accel_glue_raise(const accel_glue_function* f, const char* kind,
                                   const char* format, ...) {
  char message[2048];
  int used = snprintf(message, sizeof message, "%s: ", f->layer != NULL ? f->layer : f->name);
  used = used < 0 ? 0 : used < (int)sizeof message ? used : (int)sizeof message - 1;
  va_list args;
  va_start(args, format);
  int more = vsnprintf(message + used, sizeof message - (size_t)used, format, args);
  va_end(args);
  used += more < 0 ? 0 : more;
  used = used < (int)sizeof message ? used : (int)sizeof message - 1;
  if (f->layer != NULL) {
    snprintf(message + used, sizeof message - (size_t)used, " (%s, symbol %s)", f->name,
             f->symbol);
  } else {
    snprintf(message + used, sizeof message - (size_t)used, " (symbol %s)", f->symbol);
  }
  TVMFFIErrorSetRaisedFromCStr(kind, message);
  return -1;
}

/* A runtime status as the accel_codegen exception of the same meaning. */
static inline int accel_glue_raise_status(const accel_glue_function* f, accel_status status,
                                          const char* where) {
  const char* kind = "AccelError";
  switch ((int)status) {
    case ACCEL_ERR_INVALID: kind = "AccelInvalidError"; break;
    case ACCEL_ERR_SHAPE: kind = "AccelShapeError"; break;
    case ACCEL_ERR_UNSUPPORTED: kind = "AccelUnsupportedError"; break;
    case ACCEL_ERR_NULL: case ACCEL_ERR_ALIGNMENT: kind = "AccelBufferError"; break;
    case ACCEL_ERR_NO_MEMORY: kind = "AccelMemoryError"; break;
    case ACCEL_ERR_NOT_FOUND: kind = "AccelNotFoundError"; break;
    default: break;
  }
  return accel_glue_raise(f, kind, "%s%s [%s]", where, accel_last_error(),
                          accel_status_name(status));
}

static inline const DLTensor* accel_glue_dltensor(const TVMFFIAny* value) {
  if (value->type_index == kTVMFFITensor) {
    return (const DLTensor*)((const char*)value->v_obj + sizeof(TVMFFIObject));
  }
  if (value->type_index == kTVMFFIDLTensorPtr) return (const DLTensor*)value->v_ptr;
  return NULL;
}

/* The data of argument i, or NULL with the error raised. */
static inline float* accel_glue_tensor_data(const accel_glue_function* f, const TVMFFIAny* value,
                                            const accel_glue_arg* arg) {
  const DLTensor* t = accel_glue_dltensor(value);
  if (t == NULL) {
    accel_glue_raise(f, "AccelInvalidError", "%s is not a tensor (type index %d)", arg->what,
                     (int)value->type_index);
    return NULL;
  }
  if (t->dtype.code != kDLFloat || t->dtype.bits != 32 || t->dtype.lanes != 1) {
    accel_glue_raise(f, "AccelInvalidError", "%s has dtype code %d bits %d, expected float32",
                     arg->what, (int)t->dtype.code, (int)t->dtype.bits);
    return NULL;
  }
  if (t->device.device_type != kDLCPU) {
    accel_glue_raise(f, "AccelInvalidError", "%s is on device type %d, expected the CPU",
                     arg->what, (int)t->device.device_type);
    return NULL;
  }
  if (t->ndim != arg->ndim) {
    accel_glue_raise(f, "AccelShapeError", "%s has %d dimensions, expected %d", arg->what,
                     (int)t->ndim, (int)arg->ndim);
    return NULL;
  }
  int64_t stride = 1;
  for (int i = arg->ndim - 1; i >= 0; --i) {
    if (t->shape[i] != arg->shape[i]) {
      accel_glue_raise(f, "AccelShapeError", "%s has size %lld in dimension %d, expected %lld",
                       arg->what, (long long)t->shape[i], i, (long long)arg->shape[i]);
      return NULL;
    }
    if (t->strides != NULL && arg->shape[i] != 1 && t->strides[i] != stride) {
      accel_glue_raise(f, "AccelBufferError", "%s is not compact (stride %lld in dimension %d)",
                       arg->what, (long long)t->strides[i], i);
      return NULL;
    }
    stride *= arg->shape[i];
  }
  if (t->data == NULL) {
    accel_glue_raise(f, "AccelBufferError", "%s has no data", arg->what);
    return NULL;
  }
  return (float*)((char*)t->data + t->byte_offset);
}

/* The loaded libaccel lays out the structs this code fills as its header did (checked by the
 * constant loader and the first call's set-up: a function may have no constants). */
static inline int accel_glue_check_abi(const accel_glue_function* f) {
  if (accel_abi_version() == ACCEL_ABI_VERSION) return 0;
  return accel_glue_raise(f, "AccelLibraryError",
                          "libaccel has ABI version %d, this code was built against version %d: "
                          "export the model again with the installed accel-codegen",
                          (int)accel_abi_version(), (int)ACCEL_ABI_VERSION);
}

/* The shared device of the function's configuration and its scratch; a failed set-up is tried
 * again by the next call. */
static inline int accel_glue_setup(accel_glue_function* f) {
  if (accel_glue_check_abi(f) != 0) return -1;
  accel_config config;
  memset(&config, 0, sizeof config);
  f->fill_config(&config);
  accel_device* device = NULL;
  const accel_status status = accel_device_shared(&config, &device);
  if (status != ACCEL_OK) return accel_glue_raise_status(f, status, "");
  for (int32_t i = 0; i < f->num_temps; ++i) {
    if (f->temps[i] == NULL) f->temps[i] = accel_buffer_alloc((size_t)f->temp_bytes[i]);
    if (f->temps[i] == NULL) return accel_glue_raise(f, "AccelMemoryError", "out of memory");
  }
  f->config = config;
  f->device = device; /* last */
  return 0;
}

/* Data entering or leaving the accelerator (fp32 <-> the function's precision). */
static inline int accel_glue_convert(const accel_glue_function* f, const void* src,
                                     accel_precision from, void* dst, accel_precision to,
                                     int64_t count, float scale, int32_t zero) {
  const accel_status status = accel_convert(src, from, dst, to, count, scale, zero);
  return status == ACCEL_OK ? 0 : accel_glue_raise_status(f, status, "");
}

/* A token tensor moved between its rows and its NCHW surface (accel_transpose). */
static inline int accel_glue_transpose(const accel_glue_function* f, const void* src, void* dst,
                                       int64_t batch, int64_t rows, int64_t cols,
                                       int32_t element_bytes) {
  const accel_status status = accel_transpose(src, dst, batch, rows, cols, element_bytes);
  return status == ACCEL_OK ? 0 : accel_glue_raise_status(f, status, "");
}

/* The weights of conv op `op` packed once, in slot `slot`, for the kernel: int8 in its layout,
 * fp16 widened (NVDLA's compiler pre-formats weights too). */
static inline int accel_glue_pack_weights(accel_glue_function* f, accel_op* op, int32_t in_c,
                                          int32_t slot) {
  if (f->packed[slot] == NULL) {
    size_t bytes = 0;
    accel_status status = accel_conv_pack_weights(&f->config, &op->conv, in_c, NULL, &bytes);
    if (status != ACCEL_OK) return accel_glue_raise_status(f, status, "");
    void* buffer = accel_buffer_alloc(bytes); /* ACCEL_PACKED_ALIGNMENT or more */
    if (buffer == NULL) return accel_glue_raise(f, "AccelMemoryError", "out of memory");
    status = accel_conv_pack_weights(&f->config, &op->conv, in_c, buffer, &bytes);
    if (status != ACCEL_OK) {
      accel_buffer_free(buffer);
      return accel_glue_raise_status(f, status, "");
    }
    f->packed[slot] = buffer;
    f->packed_bytes[slot] = bytes;
  }
  op->conv.weights_packed = f->packed[slot];
  op->conv.weights_packed_bytes = f->packed_bytes[slot];
  return 0;
}

/* Batch norm (and a bias) whose parameters are runtime inputs, folded on each call. */
static inline int accel_glue_fold_batch_norm(const accel_glue_function* f, int32_t channels,
                                             const float* gamma, const float* beta,
                                             const float* mean, const float* var,
                                             const float* bias, float epsilon, float* scale,
                                             float* shift) {
  const accel_status status =
      accel_fold_batch_norm(channels, gamma, beta, mean, var, bias, epsilon, scale, shift);
  return status == ACCEL_OK ? 0 : accel_glue_raise_status(f, status, "");
}

/* One accelerator run (a layer) on NCHW shapes, labelled for the profile: its input in
 * `in_precision` and `in_layout`, its output in `out_precision` (the same but for a converting
 * SDP) and `out_layout` (a run's element-wise operands: that layout too). */
static inline int accel_glue_run_layer(const accel_glue_function* f, const accel_op* ops,
                                       int32_t num_ops, const void* in, const int32_t* in_shape,
                                       void* out, const int32_t* out_shape, accel_mode mode,
                                       const char* label, accel_precision in_precision,
                                       accel_precision out_precision, accel_layout in_layout,
                                       accel_layout out_layout) {
  accel_tensor input, output;
  memset(&input, 0, sizeof input);
  memset(&output, 0, sizeof output);
  input.data = (void*)in;
  input.n = in_shape[0], input.c = in_shape[1], input.h = in_shape[2], input.w = in_shape[3];
  input.precision = in_precision;
  input.layout = in_layout;
  output.data = out;
  output.n = out_shape[0], output.c = out_shape[1];
  output.h = out_shape[2], output.w = out_shape[3];
  output.precision = out_precision;
  output.layout = out_layout;
  const accel_status status =
      accel_run(f->device, ops, num_ops, &input, &output, mode, label, NULL, NULL);
  if (status != ACCEL_OK) {
    char where[160];  /* the run's label, unless the generated code named the run already */
    snprintf(where, sizeof where, "layer %s: ", label);
    return accel_glue_raise_status(f, status, f->layer != NULL ? "" : where);
  }
  return 0;
}

/* The constant loader: one array of tensors, all checked before any is taken. */
static inline int accel_glue_init(accel_glue_function* f, const TVMFFIAny* args, int32_t num_args,
                                  TVMFFIAny* result) {
  if (accel_glue_check_abi(f) != 0) return -1;
  if (num_args != 1 || args[0].type_index != kTVMFFIArray) {
    return accel_glue_raise(f, "AccelInvalidError", "__init: expected one array of constants");
  }
  const TVMFFISeqCell* cell =
      (const TVMFFISeqCell*)((const char*)args[0].v_obj + sizeof(TVMFFIObject));
  if (cell->size != f->num_constants) {
    return accel_glue_raise(f, "AccelInvalidError", "__init: %lld constants, expected %d",
                            (long long)cell->size, (int)f->num_constants);
  }
  const TVMFFIAny* items = (const TVMFFIAny*)cell->data;
  for (int32_t i = 0; i < f->num_constants; ++i) {
    const DLTensor* t = accel_glue_dltensor(&items[i]);
    if (t == NULL) {
      return accel_glue_raise(f, "AccelInvalidError", "__init: constant %d is not a tensor",
                              (int)i);
    }
    if (t->dtype.code != f->const_types[i].code || t->dtype.bits != f->const_types[i].bits ||
        t->dtype.lanes != 1) {
      return accel_glue_raise(f, "AccelInvalidError",
                              "__init: constant %d has type code %d, %d bits, expected type "
                              "code %d, %d bits", (int)i, (int)t->dtype.code,
                              (int)t->dtype.bits, (int)f->const_types[i].code,
                              (int)f->const_types[i].bits);
    }
    int64_t count = 1;
    for (int d = 0; d < t->ndim; ++d) count *= t->shape[d];
    if (count != f->const_counts[i]) {
      return accel_glue_raise(f, "AccelInvalidError", "__init: constant %d has %lld values, "
                              "expected %lld", (int)i, (long long)count,
                              (long long)f->const_counts[i]);
    }
  }
  pthread_mutex_lock(f->lock); /* no call runs while the constants change */
  for (int32_t i = 0; i < f->num_constants; ++i) {
    const DLTensor* t = accel_glue_dltensor(&items[i]);
    /* Hold the constant for as long as this library is loaded, or until the next load. */
    void* object = items[i].type_index == kTVMFFITensor ? items[i].v_obj : NULL;
    if (object != NULL) TVMFFIObjectIncRef(object);
    if (f->const_objects[i] != NULL) TVMFFIObjectDecRef(f->const_objects[i]);
    f->const_objects[i] = object;
    f->constants[i] = (const char*)t->data + t->byte_offset;
  }
  for (int32_t i = 0; i < f->num_packed; ++i) { /* new weights: pack again */
    accel_buffer_free(f->packed[i]);
    f->packed[i] = NULL;
    f->packed_bytes[i] = 0;
  }
  pthread_mutex_unlock(f->lock);
  result->type_index = kTVMFFIInt;
  result->v_int64 = 0;
  return 0;
}

/* Everything the function holds, released: its references to the constants, the packed
 * weights and the scratch (the state as before the first load). Run by the destructor when the
 * library is unloaded: no module of it is left to call the function. */
static inline void accel_glue_release(accel_glue_function* f) {
  pthread_mutex_lock(f->lock);
  for (int32_t i = 0; i < f->num_constants; ++i) {
    if (f->const_objects[i] != NULL) TVMFFIObjectDecRef(f->const_objects[i]);
    f->const_objects[i] = NULL;
    f->constants[i] = NULL;
  }
  for (int32_t i = 0; i < f->num_packed; ++i) {
    accel_buffer_free(f->packed[i]);
    f->packed[i] = NULL;
    f->packed_bytes[i] = 0;
  }
  for (int32_t i = 0; i < f->num_temps; ++i) {
    accel_buffer_free(f->temps[i]);
    f->temps[i] = NULL;
  }
  f->device = NULL; /* the shared device stays with libaccel; set up again at a next call */
  pthread_mutex_unlock(f->lock);
}

/* The function itself: arguments checked, then the layers under the lock. */
static inline int accel_glue_call(accel_glue_function* f, const TVMFFIAny* args, int32_t num_args,
                                  TVMFFIAny* result) {
  const int32_t expected = f->num_inputs + f->num_outputs;
  if (num_args != expected) {
    return accel_glue_raise(f, "AccelInvalidError", "%d arguments, expected %d", (int)num_args,
                            (int)expected);
  }
  float* stack_args[16];
  float** a = expected <= 16 ? stack_args : (float**)malloc(sizeof(float*) * (size_t)expected);
  if (a == NULL) return accel_glue_raise(f, "AccelMemoryError", "out of memory");
  int status = 0;
  for (int32_t i = 0; i < expected && status == 0; ++i) {
    a[i] = accel_glue_tensor_data(f, &args[i], &f->args[i]);
    if (a[i] == NULL) status = -1;
  }
  if (status == 0) {
    pthread_mutex_lock(f->lock);
    status = f->device == NULL ? accel_glue_setup(f) : 0;
    if (status == 0) status = f->run_layers(a);
    f->layer = NULL; /* the runs are over: a next error is the function's */
    pthread_mutex_unlock(f->lock);
  }
  if (a != stack_args) free(a);
  if (status != 0) return -1;
  result->type_index = kTVMFFINone;
  result->v_int64 = 0;
  return 0;
}

/* The two exported entry points of external function `symbol`, described by `function`, and
 * the destructor that releases its state when the library is unloaded (dlclose). */
#ifdef __cplusplus
#define ACCEL_GLUE_EXTERN extern "C"
#else
#define ACCEL_GLUE_EXTERN
#endif
#define ACCEL_GLUE_EXPORT(symbol, function)                                                  \
  ACCEL_GLUE_EXTERN TVM_FFI_DLL_EXPORT int __tvm_ffi_##symbol(                              \
      void* self, const TVMFFIAny* args, int32_t num_args, TVMFFIAny* result) {              \
    (void)self;                                                                              \
    return accel_glue_call(&(function), args, num_args, result);                             \
  }                                                                                          \
  ACCEL_GLUE_EXTERN TVM_FFI_DLL_EXPORT int __tvm_ffi___init_##symbol(                       \
      void* self, const TVMFFIAny* args, int32_t num_args, TVMFFIAny* result) {              \
    (void)self;                                                                              \
    return accel_glue_init(&(function), args, num_args, result);                             \
  }                                                                                          \
  __attribute__((destructor)) static void accel_glue_unload_##symbol(void) {                 \
    accel_glue_release(&(function));                                                        \
  }

#endif /* ACCEL_TVM_GLUE_H_ */
