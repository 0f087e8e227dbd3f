/* run_timer.c - an LD_PRELOAD timer around accel_run, for examples/whole_network_time.py.
 *
 * Records every run's label, first engine, op count, time and the gap since the previous run
 * ended, on CLOCK_THREAD_CPUTIME_ID (RUN_TIMER_CLOCK=thread: the calling thread's CPU time,
 * which a busy shared machine barely moves; meaningful with 1 thread) or CLOCK_MONOTONIC.
 * The real accel_run is looked up in the libaccel that Python loaded (RUN_TIMER_LIB).
 * run_timer_set_threads(n) makes every following run use n threads (accel_device_set_threads
 * on the run's device), so that one process can compare thread counts call by call.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accel/accel.h"

typedef accel_status (*run_fn)(accel_device*, const accel_op*, int32_t, const accel_tensor*,
                               const accel_tensor*, accel_mode, const char*, accel_run_stats*,
                               accel_op_stats*);
enum { MAX_EVENTS = 200000 };
typedef struct event {
  char label[64];
  int32_t engine, num_ops;
  double seconds, gap;
} event;
static event events[MAX_EVENTS];
static int32_t num_events;
static double last_end = -1.0;
static int32_t run_threads; /* 0: leave the device's thread count alone */

static double now(void) {
  static clockid_t clock_id = (clockid_t)-1;
  if (clock_id == (clockid_t)-1) {
    const char* c = getenv("RUN_TIMER_CLOCK");
    clock_id = c != NULL && strcmp(c, "thread") == 0 ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC;
  }
  struct timespec t;
  clock_gettime(clock_id, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

accel_status accel_run(accel_device* dev, const accel_op* ops, int32_t num_ops,
                       const accel_tensor* input, const accel_tensor* output, accel_mode mode,
                       const char* label, accel_run_stats* run_stats, accel_op_stats* op_stats) {
  static run_fn real;
  static accel_status (*set_threads)(accel_device*, int32_t);
  if (real == NULL) {
    void* lib = dlopen(getenv("RUN_TIMER_LIB"), RTLD_NOW | RTLD_NOLOAD);
    real = lib != NULL ? (run_fn)dlsym(lib, "accel_run") : NULL;
    set_threads = lib != NULL ? dlsym(lib, "accel_device_set_threads") : NULL;
    if (real == NULL || real == accel_run || set_threads == NULL) {
      fprintf(stderr, "run_timer: libaccel (RUN_TIMER_LIB) is not loaded\n");
      abort();
    }
  }
  if (run_threads > 0 && set_threads(dev, run_threads) != ACCEL_OK) {
    fprintf(stderr, "run_timer: cannot set %d threads\n", (int)run_threads);
    abort();
  }
  const double start = now();
  const accel_status st = real(dev, ops, num_ops, input, output, mode, label, run_stats, op_stats);
  const double end = now();
  if (num_events < MAX_EVENTS) {
    event* e = &events[num_events++];
    snprintf(e->label, sizeof e->label, "%s", label != NULL ? label : "");
    e->engine = ops != NULL && num_ops > 0 ? (int32_t)ops[0].engine : -1;
    e->num_ops = num_ops;
    e->seconds = end - start;
    e->gap = last_end < 0.0 ? 0.0 : start - last_end;
  }
  last_end = end;
  return st;
}

/* Forget what was recorded (before the timed runs). */
void run_timer_reset(void) {
  num_events = 0;
  last_end = -1.0;
}

/* Runs from now on use n threads (0: the device's own count). */
void run_timer_set_threads(int32_t n) { run_threads = n; }

/* The clock's current reading, so that Python times whole calls on the same clock. */
double run_timer_now(void) { return now(); }

/* Write the events as tab-separated lines; 0 on success. */
int run_timer_dump(const char* path) {
  FILE* f = fopen(path, "w");
  if (f == NULL) return -1;
  for (int32_t i = 0; i < num_events; ++i) {
    const event* e = &events[i];
    fprintf(f, "%s\t%d\t%d\t%.9f\t%.9f\n", e->label, e->engine, e->num_ops, e->seconds, e->gap);
  }
  return fclose(f);
}
