/* pool.c - parallel loops in which the caller never waits for a thread that has not started.
 *
 * OpenMP's fork-join makes the calling thread wait at every barrier for each team member to
 * arrive. On a shared machine a team member is often not running, and a 2-thread team then ran
 * a network several times slower than 1 thread (docs/kernels.md, pool.c). Here the items of a
 * loop are claimed one at a time from a shared counter by the caller and by whichever workers
 * are awake; the caller claims items until none is left and then waits only for the items a
 * worker has claimed. A worker that wakes late finds no item and goes back to sleep. Results do
 * not depend on who runs an item: every item writes its own outputs.
 *
 * Claims take a run of consecutive items, a share of what is left (guided scheduling): the
 * counter's cache line moves between the cores once per claim, about 0.1-0.2 us here, which
 * one claim per item paid on MobileNetV2 int8's ~5,000 items per inference (the copy loops'
 * items take 0.05-1 us). The share is small (1/4 of what is left with 2 threads, at least one
 * item) so that a worker descheduled right after a claim holds the caller up for little work,
 * and the last claims are single items, which keeps the threads' finishing times close.
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

enum { SPIN_ROUNDS = 4000 }; /* pauses a worker spins before it sleeps (~100 us here) */
enum { CLAIM_SHARE = 2 };    /* a claim takes 1 / (CLAIM_SHARE * participants) of what is left */

/* The claim counter and the finished count each on a cache line of their own: every claim
 * writes the first, the caller polls the second, and the items read the rest. */
typedef struct pool_job {
  pool_fn fn;
  void* ctx;
  int64_t items;
  int participants;
  _Alignas(64) _Atomic int64_t next; /* the first unclaimed item */
  _Alignas(64) _Atomic int64_t done; /* items finished */
} pool_job;

static struct {
  pthread_mutex_t busy;      /* held by the caller whose loop uses the workers */
  pthread_mutex_t sleep_mu;  /* guards the condition variable */
  pthread_cond_t wake;
  _Atomic(pool_job*) job;    /* the current loop, or NULL */
  _Atomic int active;        /* workers looking at or running the current loop */
  _Atomic int sleepers;
  int workers;               /* started, ids 1..workers (under busy) */
  _Alignas(64) _Atomic uint64_t generation; /* bumped when a loop starts; spinning workers
                                             * poll it, so it shares its line with nothing
                                             * that is written */
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
          NULL, 0, 0, 0, 0};

static void run_items(pool_job* j, int participant) {
  /* the share is worked out from where this participant's last claim ended (one access to the
   * counter's line per claim; a read before each claim cost another transfer of it); a worker
   * reads the counter once first, so that coming late it does not size its claim on items
   * the caller has already taken */
  const int64_t divisor = (int64_t)CLAIM_SHARE * j->participants;
  int64_t seen = participant == 0 ? 0 : atomic_load_explicit(&j->next, memory_order_relaxed);
  for (;;) {
    const int64_t share = (j->items - seen) / divisor > 1 ? (j->items - seen) / divisor : 1;
    const int64_t first = atomic_fetch_add(&j->next, share);
    if (first >= j->items) return;
    const int64_t end = first + share < j->items ? first + share : j->items;
    for (int64_t i = first; i < end; ++i) j->fn(j->ctx, i, participant);
    atomic_fetch_add(&j->done, end - first);
    seen = end;
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

/* The generation before the loop that starts a worker: a worker that started after that loop
 * was announced would otherwise take its generation as already seen and miss the loop. */
static _Atomic uint64_t spawn_generation;

static void* worker_main(void* arg) {
  const int id = (int)(intptr_t)arg;
  uint64_t seen = atomic_load(&spawn_generation);
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
  atomic_store(&spawn_generation, atomic_load(&pool.generation));
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
  pool_job j = {.fn = fn, .ctx = ctx, .items = items, .participants = participants, .next = 0,
                .done = 0};
  atomic_store(&pool.job, &j);
  atomic_fetch_add(&pool.generation, 1);
  if (atomic_load(&pool.sleepers) > 0) {
    /* a sleeper is either before its check of the generation (and sees the new one) or
     * waiting; signalled after the unlock, it does not wake into a mutex the caller holds */
    pthread_mutex_lock(&pool.sleep_mu);
    pthread_mutex_unlock(&pool.sleep_mu);
    pthread_cond_broadcast(&pool.wake);
  }
  run_items(&j, 0);
  while (atomic_load(&j.done) < items) POOL_PAUSE();
  atomic_store(&pool.job, NULL);
  while (atomic_load(&pool.active) > 0) POOL_PAUSE();
  pthread_mutex_unlock(&pool.busy);
}
