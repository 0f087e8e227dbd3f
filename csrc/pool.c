/* pool.c - parallel loops in which the caller never waits for a thread that has not started.
 *
 * OpenMP's fork-join makes the calling thread wait at every barrier for each team member to
 * arrive. On a shared machine a team member is often not running (2 CPUs, a load of 8-10):
 * MobileNetV2 int8 then took 52-134 ms per inference with 2 threads against 16 ms with 1
 * (docs/whole_network_time.md). Here the items of a loop are claimed one at a time from a
 * shared counter by the caller and by whichever workers are awake; the caller claims items
 * until none is left and then waits only for the items a worker has claimed. A worker that
 * wakes late finds no item and goes back to sleep. Results do not depend on who runs an item:
 * every item writes its own outputs.
 *
 * One loop at a time uses the workers; a loop started while another is running (another
 * device, another thread) runs on its caller alone. Workers are created on first use (up to
 * WS_THREAD_SLOTS - 1), spin briefly between loops (a network's runs follow each other within
 * microseconds) and then sleep on a condition variable. After fork() the child has no
 * workers and starts afresh.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define POOL_PAUSE() _mm_pause()
#else
#define POOL_PAUSE() ((void)0)
#endif

enum { SPIN_ROUNDS = 4000 }; /* pauses a worker spins before it sleeps (tens of microseconds) */

typedef struct pool_job {
  pool_fn fn;
  void* ctx;
  int64_t items;
  int participants;
  _Atomic int64_t next; /* the next unclaimed item */
  _Atomic int64_t done; /* items finished */
} pool_job;

static struct {
  pthread_mutex_t busy;      /* held by the caller whose loop uses the workers */
  pthread_mutex_t sleep_mu;  /* guards the condition variable */
  pthread_cond_t wake;
  _Atomic(pool_job*) job;    /* the current loop, or NULL */
  _Atomic uint64_t generation; /* bumped when a loop starts */
  _Atomic int active;        /* workers looking at or running the current loop */
  _Atomic int sleepers;
  int workers;               /* started, ids 1..workers (under busy) */
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
          NULL, 0, 0, 0, 0};

static void run_items(pool_job* j, int participant) {
  for (;;) {
    const int64_t i = atomic_fetch_add(&j->next, 1);
    if (i >= j->items) return;
    j->fn(j->ctx, i, participant);
    atomic_fetch_add(&j->done, 1);
  }
}

/* Wait until the generation differs from `seen`: spin, then sleep. */
static uint64_t wait_for_loop(uint64_t seen) {
  for (int k = 0; k < SPIN_ROUNDS; ++k) {
    const uint64_t g = atomic_load(&pool.generation);
    if (g != seen) return g;
    POOL_PAUSE();
  }
  pthread_mutex_lock(&pool.sleep_mu);
  atomic_fetch_add(&pool.sleepers, 1);
  uint64_t g;
  while ((g = atomic_load(&pool.generation)) == seen) pthread_cond_wait(&pool.wake, &pool.sleep_mu);
  atomic_fetch_sub(&pool.sleepers, 1);
  pthread_mutex_unlock(&pool.sleep_mu);
  return g;
}

static void* worker_main(void* arg) {
  const int id = (int)(intptr_t)arg;
  uint64_t seen = atomic_load(&pool.generation);
  for (;;) {
    seen = wait_for_loop(seen);
    /* registered before looking: the caller does not return while active > 0, so a job
     * seen here stays alive until this worker is done with it */
    atomic_fetch_add(&pool.active, 1);
    pool_job* j = atomic_load(&pool.job);
    if (j != NULL && id < j->participants) run_items(j, id);
    atomic_fetch_sub(&pool.active, 1);
  }
  return NULL;
}

static void after_fork_in_child(void) {
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t fresh_cond = PTHREAD_COND_INITIALIZER;
  pool.busy = fresh;
  pool.sleep_mu = fresh;
  pool.wake = fresh_cond;
  atomic_store(&pool.job, NULL);
  atomic_store(&pool.active, 0);
  atomic_store(&pool.sleepers, 0);
  pool.workers = 0;
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void register_fork_handler(void) { pthread_atfork(NULL, NULL, after_fork_in_child); }

/* Start workers up to ids participants - 1 (fewer if the system refuses: the loop still
 * completes, on fewer threads). Called holding busy. */
static void ensure_workers(int participants) {
  pthread_once(&fork_once, register_fork_handler);
  while (pool.workers < participants - 1) {
    pthread_t t;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0) return;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    const int failed = pthread_create(&t, &attr, worker_main, (void*)(intptr_t)(pool.workers + 1));
    pthread_attr_destroy(&attr);
    if (failed) return;
    pool.workers += 1;
  }
}

void pool_for(int participants, int64_t items, pool_fn fn, void* ctx) {
  if (items <= 0) return;
  if (participants > WS_THREAD_SLOTS) participants = WS_THREAD_SLOTS;
  if (participants <= 1 || items == 1 || pthread_mutex_trylock(&pool.busy) != 0) {
    for (int64_t i = 0; i < items; ++i) fn(ctx, i, 0);
    return;
  }
  ensure_workers(participants);
  pool_job j = {fn, ctx, items, participants, 0, 0};
  atomic_store(&pool.job, &j);
  atomic_fetch_add(&pool.generation, 1);
  if (atomic_load(&pool.sleepers) > 0) {
    pthread_mutex_lock(&pool.sleep_mu);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.sleep_mu);
  }
  run_items(&j, 0);
  while (atomic_load(&j.done) < items) POOL_PAUSE();
  atomic_store(&pool.job, NULL);
  while (atomic_load(&pool.active) > 0) POOL_PAUSE();
  pthread_mutex_unlock(&pool.busy);
}
