/*
 * test_glue.c - accel/tvm_glue.h, the fixed C of every generated function, on its own: a
 * hand-written "generated" function (one conv + bias + ReLU layer) through the glue's entry
 * points, with tvm-ffi's three C calls replaced by recorders, so every argument check, the
 * constant loader, the first-call set-up and each error kind run under the sanitizers.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"

/* The glue's view of the library's ABI version: the library's own, or (abi_stand_in >= 0) that
 * of a library built with another layout of the structs. */
static int32_t abi_stand_in = -1;
static int32_t library_abi(void) { return abi_stand_in >= 0 ? abi_stand_in : accel_abi_version(); }
#define accel_abi_version library_abi
#include "accel/tvm_glue.h"
#undef accel_abi_version

/* ---- stand-ins for the tvm-ffi runtime --------------------------------------------------- */
static char raised_kind[64], raised_message[1024];
static int ref_balance;

void TVMFFIErrorSetRaisedFromCStr(const char* kind, const char* message) {
  snprintf(raised_kind, sizeof raised_kind, "%s", kind);
  snprintf(raised_message, sizeof raised_message, "%s", message);
}
int TVMFFIObjectIncRef(TVMFFIObjectHandle obj) { (void)obj; ++ref_balance; return 0; }
int TVMFFIObjectDecRef(TVMFFIObjectHandle obj) { (void)obj; --ref_balance; return 0; }

static int passed, failed;
#define EXPECT(cond, ...)                                                  \
  do {                                                                     \
    if (cond) {                                                            \
      ++passed;                                                            \
    } else {                                                               \
      ++failed;                                                            \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);               \
      printf(__VA_ARGS__);                                                 \
      printf(" [raised %s: %s]\n", raised_kind, raised_message);          \
    }                                                                      \
  } while (0)

/* ---- the "generated" function: y = relu(conv3x3(x, w) + b), x 1x2x4x4, y 1x3x4x4 ---------- */
static const int64_t k_shape0[4] = {1, 2, 4, 4};
static const int64_t k_shape1[4] = {1, 3, 4, 4};
static const accel_glue_arg k_args[2] = {{"input 0 (x)", 4, k_shape0},
                                         {"output 0 (y)", 4, k_shape1}};
static const int64_t k_const_count[2] = {54, 3};
static const accel_glue_dtype k_const_type[2] = {{kDLFloat, 32}, {kDLFloat, 32}};
static const void* k_const[2];
static void* k_const_object[2];
static const int64_t k_temp_bytes[1] = {64};
static void* k_temp[1];
static void* k_packed[1];
static size_t k_packed_bytes[1];
static pthread_mutex_t k_lock = PTHREAD_MUTEX_INITIALIZER;

static void fill_config(accel_config* config) { accel_config_preset("nv_full", config); }

static int run_layers(float** a);

static accel_glue_function k_fn = {
  "external function f0", "test_fn", fill_config, run_layers,
  1, 1, k_args,
  2, k_const_count, k_const_type, k_const, k_const_object,
  1, k_temp_bytes, k_temp,
  0, k_packed, k_packed_bytes, &k_lock};

static const char* named_run; /* the run's names the generated code would set (or none) */

static int run_layers(float** a) {
  k_fn.layer = named_run;
  accel_op ops[2];
  memset(ops, 0, sizeof ops);
  ops[0].engine = ACCEL_ENGINE_CONV;
  ops[0].conv.out_c = 3;
  ops[0].conv.kernel_h = 3, ops[0].conv.kernel_w = 3;
  ops[0].conv.stride_h = 1, ops[0].conv.stride_w = 1;
  ops[0].conv.pad_top = ops[0].conv.pad_left = ops[0].conv.pad_bottom = ops[0].conv.pad_right = 1;
  ops[0].conv.dilation_h = 1, ops[0].conv.dilation_w = 1;
  ops[0].conv.groups = 1;
  ops[0].conv.precision = ACCEL_FP32;
  ops[0].conv.weights = k_const[0];
  ops[1].engine = ACCEL_ENGINE_SDP;
  ops[1].sdp.shift = k_const[1];
  ops[1].sdp.act = ACCEL_ACT_RELU;
  ops[1].sdp.precision = ACCEL_FP32;
  static const int32_t in_shape[4] = {1, 2, 4, 4}, out_shape[4] = {1, 3, 4, 4};
  if (accel_glue_run_layer(&k_fn, ops, 2, a[0], in_shape, a[1], out_shape, ACCEL_MODE_FUSED,
                           "f0.0 test", ACCEL_FP32, ACCEL_FP32, ACCEL_LAYOUT_NCHW,
                           ACCEL_LAYOUT_NCHW) != 0) return -1;
  return 0;
}

ACCEL_GLUE_EXPORT(test_fn, k_fn)

/* ---- tvm-ffi values built by hand -------------------------------------------------------- */
typedef struct {
  TVMFFIObject header;
  DLTensor tensor;
} tensor_object;

static tensor_object make_tensor(float* data, int32_t ndim, int64_t* shape) {
  tensor_object t;
  memset(&t, 0, sizeof t);
  t.header.type_index = kTVMFFITensor;
  t.tensor.data = data;
  t.tensor.device.device_type = kDLCPU;
  t.tensor.ndim = ndim;
  t.tensor.dtype.code = kDLFloat, t.tensor.dtype.bits = 32, t.tensor.dtype.lanes = 1;
  t.tensor.shape = shape;
  return t;
}

static TVMFFIAny any_object(void* object) {
  TVMFFIAny value;
  memset(&value, 0, sizeof value);
  value.type_index = ((TVMFFIObject*)object)->type_index;
  value.v_obj = (TVMFFIObject*)object;
  return value;
}

typedef struct {
  TVMFFIObject header;
  TVMFFISeqCell cell;
} array_object;

static int call(TVMFFIAny* args, int32_t n) {
  TVMFFIAny result;
  memset(&result, 0, sizeof result);
  raised_kind[0] = raised_message[0] = '\0';
  return __tvm_ffi_test_fn(NULL, args, n, &result);
}

static int load(TVMFFIAny* items, int64_t count) {
  array_object array;
  memset(&array, 0, sizeof array);
  array.header.type_index = kTVMFFIArray;
  array.cell.data = items;
  array.cell.size = count;
  TVMFFIAny arg = any_object(&array), result;
  memset(&result, 0, sizeof result);
  raised_kind[0] = raised_message[0] = '\0';
  return __tvm_ffi___init_test_fn(NULL, &arg, 1, &result);
}

/* ---- the tests ----------------------------------------------------------------------------- */
int main(void) {
  float w[54], b[3], x[32], y[48];
  for (int i = 0; i < 54; ++i) w[i] = (float)((i % 7) - 3) / 8.0f;
  for (int i = 0; i < 3; ++i) b[i] = (float)i - 1.0f;
  for (int i = 0; i < 32; ++i) x[i] = (float)((i % 5) - 2);
  int64_t w_shape[4] = {3, 2, 3, 3}, b_shape[1] = {3}, x_shape[4] = {1, 2, 4, 4},
          y_shape[4] = {1, 3, 4, 4}, bad_shape[4] = {1, 2, 4, 5};
  tensor_object tw = make_tensor(w, 4, w_shape), tb = make_tensor(b, 1, b_shape);
  tensor_object tx = make_tensor(x, 4, x_shape), ty = make_tensor(y, 4, y_shape);

  /* the constant loader checks everything before it takes anything */
  TVMFFIAny constants[2] = {any_object(&tw), any_object(&tb)};
  EXPECT(accel_abi_version() == ACCEL_ABI_VERSION, "the library's ABI version");
  abi_stand_in = ACCEL_ABI_VERSION + 1; /* a library whose structs differ from this code's */
  char expected_abi[96];
  snprintf(expected_abi, sizeof expected_abi,
           "libaccel has ABI version %d, this code was built against version %d",
           ACCEL_ABI_VERSION + 1, ACCEL_ABI_VERSION);
  EXPECT(load(constants, 2) == -1 && strcmp(raised_kind, "AccelLibraryError") == 0 &&
             strstr(raised_message, expected_abi) && ref_balance == 0, "ABI version at load");
  abi_stand_in = -1;
  EXPECT(load(constants, 1) == -1 && strcmp(raised_kind, "AccelInvalidError") == 0 &&
             strstr(raised_message, "external function f0: __init: 1 constants, expected 2 "
                                    "(symbol test_fn)"), "count");
  tensor_object wrong_count = make_tensor(b, 1, b_shape);
  TVMFFIAny wrong[2] = {any_object(&wrong_count), any_object(&tb)};
  EXPECT(load(wrong, 2) == -1 && strstr(raised_message, "constant 0 has 3 values, expected 54"),
         "values");
  EXPECT(k_const[0] == NULL && ref_balance == 0, "nothing taken after a refusal");
  EXPECT(load(constants, 2) == 0 && k_const[0] == w && ref_balance == 2, "loaded");

  /* argument checks, each with its kind */
  TVMFFIAny args[2] = {any_object(&tx), any_object(&ty)};
  EXPECT(call(args, 1) == -1 && strcmp(raised_kind, "AccelInvalidError") == 0 &&
             strstr(raised_message, "external function f0: 1 arguments, expected 2"), "arity");
  tensor_object tbad = make_tensor(x, 4, bad_shape);
  TVMFFIAny bad_args[2] = {any_object(&tbad), any_object(&ty)};
  EXPECT(call(bad_args, 2) == -1 && strcmp(raised_kind, "AccelShapeError") == 0 &&
             strstr(raised_message, "input 0 (x) has size 5 in dimension 3, expected 4"),
         "shape");
  tensor_object tint = make_tensor(x, 4, x_shape);
  tint.tensor.dtype.code = kDLInt;
  TVMFFIAny int_args[2] = {any_object(&tint), any_object(&ty)};
  EXPECT(call(int_args, 2) == -1 && strstr(raised_message, "expected float32"), "dtype");
  TVMFFIAny none_args[2];
  memset(none_args, 0, sizeof none_args);
  EXPECT(call(none_args, 2) == -1 && strstr(raised_message, "is not a tensor"), "not a tensor");
  int64_t strides[4] = {64, 16, 4, 2};
  tensor_object tstrided = make_tensor(x, 4, x_shape);
  tstrided.tensor.strides = strides;
  TVMFFIAny strided_args[2] = {any_object(&tstrided), any_object(&ty)};
  EXPECT(call(strided_args, 2) == -1 && strcmp(raised_kind, "AccelBufferError") == 0,
         "not compact");
  EXPECT(k_fn.device == NULL, "no set-up before valid arguments");
  abi_stand_in = ACCEL_ABI_VERSION + 1; /* the first call's set-up checks it too */
  EXPECT(call(args, 2) == -1 && strcmp(raised_kind, "AccelLibraryError") == 0 &&
             strstr(raised_message, expected_abi) && k_fn.device == NULL,
         "ABI version at the first call");
  abi_stand_in = -1;

  /* a valid call: the result equals the reference loop */
  EXPECT(call(args, 2) == 0 && k_fn.device != NULL, "valid call");
  float max_error = 0.0f;
  for (int k = 0; k < 3; ++k)
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        float sum = 0.0f;
        for (int c = 0; c < 2; ++c)
          for (int r = 0; r < 3; ++r)
            for (int s = 0; s < 3; ++s) {
              const int yi = i + r - 1, xj = j + s - 1;
              if (yi >= 0 && yi < 4 && xj >= 0 && xj < 4)
                sum += x[(c * 4 + yi) * 4 + xj] * w[((k * 2 + c) * 3 + r) * 3 + s];
            }
        sum += b[k];
        const float expected = sum > 0.0f ? sum : 0.0f;
        const float error = fabsf(y[(k * 4 + i) * 4 + j] - expected);
        max_error = error > max_error ? error : max_error;
      }
  EXPECT(max_error < 1e-5f, "max error %g", (double)max_error);

  /* an engine's refusal comes back with the layer's label and the status's kind */
  tensor_object ty_alias = make_tensor(w, 4, y_shape); /* output over the weights */
  TVMFFIAny alias_args[2] = {any_object(&tx), any_object(&ty_alias)};
  EXPECT(call(alias_args, 2) == -1 && strcmp(raised_kind, "AccelInvalidError") == 0 &&
             strstr(raised_message, "layer f0.0 test: ") &&
             strstr(raised_message, "overlaps the output") &&
             strstr(raised_message, "[ACCEL_ERR_INVALID] (symbol test_fn)"),
         "engine refusal");
  /* a run the generated code named: its names first, the function and symbol last */
  named_run = "features.0 (run f0.0 test)";
  EXPECT(call(alias_args, 2) == -1 &&
             strstr(raised_message, "features.0 (run f0.0 test): ") == raised_message &&
             !strstr(raised_message, "layer f0.0 test") &&
             strstr(raised_message, "[ACCEL_ERR_INVALID] (external function f0, symbol test_fn)"),
         "named run: %s", raised_message);
  EXPECT(k_fn.layer == NULL, "no run under way after the call");
  EXPECT(call(bad_args, 2) == -1 &&
             strstr(raised_message, "external function f0: ") == raised_message,
         "an argument error is the function's: %s", raised_message);
  named_run = NULL;

  /* reloading the constants releases the old references */
  EXPECT(load(constants, 2) == 0 && ref_balance == 2, "reload keeps one reference each");
  /* unloading (the destructor) releases the constants, the packed weights and the scratch;
   * releasing twice (the destructor runs again at exit) is harmless */
  EXPECT(k_temp[0] != NULL && k_fn.device != NULL, "scratch and device set up by the calls");
  accel_glue_release(&k_fn);
  EXPECT(ref_balance == 0 && k_const_object[0] == NULL && k_const[1] == NULL &&
             k_temp[0] == NULL && k_fn.device == NULL, "released: balance %d", ref_balance);
  accel_glue_release(&k_fn);
  EXPECT(ref_balance == 0, "released twice: balance %d", ref_balance);
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
