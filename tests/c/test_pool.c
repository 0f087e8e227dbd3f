/*
 * test_pool.c - the kernels' thread pool (csrc/pool.c) on its own: every item runs exactly once
 * whatever the participants and item counts, many short loops in a row, a worker that has gone
 * to sleep wakes for the next loop, a loop started inside an item or by several threads at once
 * runs on its caller, and a forked child starts workers of its own. No assertion reads a clock:
 * a test that needs a worker waits for one (at most WAIT_S seconds, then fails).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels.h"

static int passed, failed;

#define EXPECT(cond, ...)                                    \
  do {                                                       \
    if (cond) {                                              \
      ++passed;                                              \
    } else {                                                 \
      ++failed;                                              \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      printf(__VA_ARGS__);                                   \
      printf("\n");                                          \
    }                                                        \
  } while (0)

enum { WAIT_S = 20 };

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* ---- every item once ------------------------------------------------------------------- */
typedef struct {
  _Atomic int* runs;     /* per item */
  _Atomic int bad_participant;
  int participants;
} count_ctx;

static void count_item(void* ctx, int64_t item, int participant) {
  count_ctx* c = ctx;
  atomic_fetch_add(&c->runs[item], 1);
  if (participant < 0 || participant >= c->participants) atomic_store(&c->bad_participant, 1);
}

static int run_and_check(int participants, int64_t items) {
  _Atomic int* runs = calloc((size_t)(items > 0 ? items : 1), sizeof *runs);
  const int limit = participants < 1 ? 1 : participants > WS_THREAD_SLOTS ? WS_THREAD_SLOTS
                                                                           : participants;
  count_ctx c = {runs, 0, limit};
  pool_for(participants, items, count_item, &c);
  int ok = !atomic_load(&c.bad_participant);
  for (int64_t i = 0; i < items; ++i) ok = ok && atomic_load(&runs[i]) == 1;
  free(runs);
  return ok;
}

static void test_every_item_once(void) {
  const int participants[] = {0, 1, 2, 3, 4, 8, WS_THREAD_SLOTS, WS_THREAD_SLOTS + 7};
  const int64_t items[] = {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 4099, 100000};
  for (size_t p = 0; p < sizeof participants / sizeof *participants; ++p)
    for (size_t i = 0; i < sizeof items / sizeof *items; ++i)
      EXPECT(run_and_check(participants[p], items[i]), "participants %d, items %lld",
             participants[p], (long long)items[i]);
  pool_for(2, -5, count_item, NULL); /* nothing to do: fn is never called */
  ++passed;
}

/* ---- many short loops ------------------------------------------------------------------ */
static void add_item(void* ctx, int64_t item, int participant) {
  (void)participant;
  atomic_fetch_add((_Atomic int64_t*)ctx, item + 1);
}

static void test_many_short_loops(void) {
  uint64_t state = 2026112413ULL;
  int64_t expected = 0, wrong = 0;
  _Atomic int64_t sum = 0;
  for (int r = 0; r < 200000; ++r) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const int64_t items = 1 + (int64_t)((state >> 33) % 40);
    const int participants = 1 + (int)((state >> 20) % 3);
    atomic_store(&sum, 0);
    pool_for(participants, items, add_item, &sum);
    expected = items * (items + 1) / 2;
    wrong += atomic_load(&sum) != expected;
  }
  EXPECT(wrong == 0, "%lld of 200000 short loops summed wrongly", (long long)wrong);
}

/* ---- a sleeping worker wakes ----------------------------------------------------------- */
/* Each item waits until every item of the loop has started: the loop completes only if a
 * worker claimed an item while the caller was inside another. */
typedef struct {
  _Atomic int started;
  int items;
  _Atomic int timed_out;
  _Atomic int by_worker;
} meet_ctx;

static void meet_item(void* ctx, int64_t item, int participant) {
  (void)item;
  meet_ctx* m = ctx;
  if (participant > 0) atomic_fetch_add(&m->by_worker, 1);
  atomic_fetch_add(&m->started, 1);
  const double deadline = seconds() + WAIT_S;
  while (atomic_load(&m->started) < m->items) {
    if (seconds() > deadline) {
      atomic_store(&m->timed_out, 1);
      return;
    }
  }
}

static int meet(int participants) {
  meet_ctx m = {0, participants, 0, 0};
  pool_for(participants, participants, meet_item, &m);
  return !atomic_load(&m.timed_out) && atomic_load(&m.by_worker) == participants - 1;
}

static void test_sleeping_workers_wake(void) {
  for (int round = 0; round < 4; ++round) {
    sleep_ms(30); /* far longer than a worker spins: it is asleep when the loop starts */
    EXPECT(meet(2), "round %d: a sleeping worker did not take the second item", round);
  }
  EXPECT(meet(2) && meet(2), "back-to-back loops (the worker still spinning)");
  sleep_ms(30);
  EXPECT(meet(3), "three participants after a sleep");
}

/* ---- re-entrance and concurrent callers ------------------------------------------------- */
typedef struct {
  _Atomic int64_t inner_sum;
  _Atomic int inner_participant_bad;
} outer_ctx;

static void inner_item(void* ctx, int64_t item, int participant) {
  outer_ctx* o = ctx;
  if (participant != 0) atomic_store(&o->inner_participant_bad, 1); /* runs on its caller */
  atomic_fetch_add(&o->inner_sum, item + 1);
}

static void outer_item(void* ctx, int64_t item, int participant) {
  (void)item;
  (void)participant;
  pool_for(2, 10, inner_item, ctx); /* the workers are busy with this loop */
}

static void test_loop_inside_an_item(void) {
  outer_ctx o = {0, 0};
  pool_for(2, 64, outer_item, &o);
  EXPECT(atomic_load(&o.inner_sum) == 64 * 55, "inner sum %lld",
         (long long)atomic_load(&o.inner_sum));
  EXPECT(!atomic_load(&o.inner_participant_bad), "a nested loop ran on a worker");
}

static void* caller_thread(void* arg) {
  int* ok = arg;
  for (int r = 0; r < 3000 && *ok; ++r) *ok = run_and_check(2 + r % 2, 1 + r % 50);
  return NULL;
}

static void test_concurrent_callers(void) {
  pthread_t t[3];
  int ok[3] = {1, 1, 1};
  for (int i = 0; i < 3; ++i) pthread_create(&t[i], NULL, caller_thread, &ok[i]);
  for (int i = 0; i < 3; ++i) pthread_join(t[i], NULL);
  EXPECT(ok[0] && ok[1] && ok[2], "three threads' loops: %d %d %d", ok[0], ok[1], ok[2]);
}

/* ---- fork ------------------------------------------------------------------------------ */
static void test_fork_child_has_its_own_workers(void) {
  EXPECT(meet(2), "before fork");
  fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    sleep_ms(30);
    const int ok = meet(2) && run_and_check(2, 1000) && meet(2);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  EXPECT(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
             WEXITSTATUS(status) == 0,
         "the forked child's loops (status %d)", status);
  EXPECT(meet(2), "the parent after fork");
}

int main(void) {
  test_every_item_once();
  test_many_short_loops();
  test_sleeping_workers_wake();
  test_loop_inside_an_item();
  test_concurrent_callers();
  test_fork_child_has_its_own_workers();
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1; /* returns with the workers still waiting: they end with it */
}
