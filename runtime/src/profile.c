/* profile.c - the process-wide profile (every run's records while profiling is enabled) and the
 * calibration observer. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct run_entry {
  accel_run_stats run;
  int32_t first_op;
} run_entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int32_t enabled;
static run_entry* runs;
static int32_t num_runs, runs_capacity;
static accel_op_stats* op_stats;
static int32_t num_op_stats, op_stats_capacity;

/* Grow *array to hold `needed` items of `size` bytes; 0 when out of memory. */
static int reserve(void** array, int32_t* capacity, int32_t needed, size_t size) {
  if (needed <= *capacity) return 1;
  int32_t grown = *capacity > 0 ? *capacity * 2 : 256;
  while (grown < needed) grown *= 2;
  void* fresh = realloc(*array, (size_t)grown * size);
  if (fresh == NULL) return 0;
  *array = fresh;
  *capacity = grown;
  return 1;
}

void accel_profile_enable(int32_t enable) {
  pthread_mutex_lock(&lock);
  if (enable) num_runs = num_op_stats = 0;
  enabled = enable != 0;
  pthread_mutex_unlock(&lock);
}

int profile_enabled(void) {
  pthread_mutex_lock(&lock);
  const int on = enabled;
  pthread_mutex_unlock(&lock);
  return on;
}

void profile_record(const accel_run_stats* run, const accel_op_stats* op_records) {
  pthread_mutex_lock(&lock);
  /* A record that cannot be stored is dropped rather than failing the run it describes. */
  if (enabled && num_runs < INT32_MAX && num_op_stats <= INT32_MAX - run->num_ops &&
      reserve((void**)&runs, &runs_capacity, num_runs + 1, sizeof *runs) &&
      reserve((void**)&op_stats, &op_stats_capacity, num_op_stats + run->num_ops, sizeof *op_stats)) {
    runs[num_runs].run = *run;
    runs[num_runs].first_op = num_op_stats;
    memcpy(op_stats + num_op_stats, op_records, sizeof *op_stats * (size_t)run->num_ops);
    num_runs += 1;
    num_op_stats += run->num_ops;
  }
  pthread_mutex_unlock(&lock);
}

int32_t accel_profile_num_runs(void) {
  pthread_mutex_lock(&lock);
  const int32_t count = num_runs;
  pthread_mutex_unlock(&lock);
  return count;
}

int32_t accel_profile_num_ops(void) {
  pthread_mutex_lock(&lock);
  const int32_t count = num_op_stats;
  pthread_mutex_unlock(&lock);
  return count;
}

accel_status accel_profile_run(int32_t index, accel_run_stats* out, int32_t* first_op) {
  if (out == NULL) return accel_fail(ACCEL_ERR_NULL, "output run record is NULL");
  pthread_mutex_lock(&lock);
  const int32_t count = num_runs;
  if (index >= 0 && index < count) {
    *out = runs[index].run;
    if (first_op != NULL) *first_op = runs[index].first_op;
  }
  pthread_mutex_unlock(&lock);
  if (index < 0 || index >= count) {
    return accel_fail(ACCEL_ERR_NOT_FOUND, "run index %d is outside [0, %d)", index, count);
  }
  return ACCEL_OK;
}

accel_status accel_profile_op(int32_t index, accel_op_stats* out) {
  if (out == NULL) return accel_fail(ACCEL_ERR_NULL, "output op record is NULL");
  pthread_mutex_lock(&lock);
  const int32_t count = num_op_stats;
  if (index >= 0 && index < count) *out = op_stats[index];
  pthread_mutex_unlock(&lock);
  if (index < 0 || index >= count) {
    return accel_fail(ACCEL_ERR_NOT_FOUND, "op index %d is outside [0, %d)", index, count);
  }
  return ACCEL_OK;
}

static pthread_mutex_t observer_lock = PTHREAD_MUTEX_INITIALIZER;
static accel_observer observer;
static void* observer_user;

void accel_set_observer(accel_observer fn, void* user) {
  pthread_mutex_lock(&observer_lock);
  observer = fn;
  observer_user = user;
  pthread_mutex_unlock(&observer_lock);
}

int observing(void) {
  pthread_mutex_lock(&observer_lock);
  const int active = observer != NULL;
  pthread_mutex_unlock(&observer_lock);
  return active;
}

void observe(const char* label, int32_t op_index, const accel_tensor* tensor) {
  pthread_mutex_lock(&observer_lock);
  const accel_observer fn = observer;
  void* user = observer_user;
  pthread_mutex_unlock(&observer_lock);
  if (fn != NULL) fn(user, label != NULL ? label : "", op_index, tensor);
}

static accel_recorder recorder;
static void* recorder_user;

void accel_set_recorder(accel_recorder fn, void* user) {
  pthread_mutex_lock(&observer_lock);
  recorder = fn;
  recorder_user = user;
  pthread_mutex_unlock(&observer_lock);
}

void record_run(const char* label, const accel_op* ops, int32_t num_ops,
                const accel_tensor* input, const accel_tensor* output, accel_mode mode) {
  pthread_mutex_lock(&observer_lock);
  const accel_recorder fn = recorder;
  void* user = recorder_user;
  pthread_mutex_unlock(&observer_lock);
  if (fn != NULL) fn(user, label != NULL ? label : "", ops, num_ops, input, output, mode);
}
