/*
 * kn_pool.c — persistent compute threads running one parallel-for at a time.
 *
 * Shape: chunk k of a job runs with tid k. kn_pool_for() splits [0, n) into
 * `parts` contiguous chunks of whole grains (depends only on n, grain and the
 * thread count), publishes the job and bumps `gen`; the caller runs chunk 0.
 * Chunk k (k >= 1) is claimed by whoever gets there first — worker k, or the
 * caller once its own chunk is done — by raising claimed[k] to the job's gen
 * (CAS; the value only grows). The caller then waits only for chunks a worker
 * claimed (done[k] == gen). A worker that is asleep or descheduled therefore
 * never stalls a step: the caller runs its chunk instead, with the same tid.
 *
 * Worker states: SPIN (polling gen with pause, about a millisecond) -> SLEEP
 * (condvar; counted in `sleepers`) -> back to SPIN after each job. The caller
 * signals the condvar only when someone sleeps, so back-to-back small calls
 * (a decode step issues hundreds) cost a few cache-line transfers each.
 * Invariants:
 *   (1) job fields are written before gen is bumped (release) and read by a
 *       worker only after it claimed a chunk of that gen (acquire): a claim
 *       for gen g succeeds only while the caller is still inside job g, so the
 *       fields cannot change under it;
 *   (2) a worker sleeps only after re-checking gen under `mu` with sleepers
 *       already incremented, and the caller takes `mu` before signalling, so a
 *       bump is never missed;
 *   (3) one kn_pool_for at a time (engine thread only); it returns after every
 *       chunk has finished, so ctx may live on the caller's stack; chunk k is
 *       run by exactly one thread, so per-tid scratch is never shared.
 * Errors: creation can fail (KILN_E_NOMEM / KILN_E_INTERNAL); the rest cannot.
 */
#include "kernels/kn_pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ volatile("yield" ::: "memory")
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPIN_ITERS 20000 /* pause iterations before a worker sleeps */
#define KN_POOL_MAX_THREADS 1024

typedef struct {
    kn_pool *pool;
    int tid;
} worker_arg;

typedef struct {
    alignas(64) atomic_uint claimed; /* gen of the last job whose chunk was claimed */
    atomic_uint done;                /* gen of the last job whose chunk a worker finished */
} chunk_slot;

struct kn_pool {
    int n_threads;
    int n_started; /* workers actually created (for destroy of a half-built pool) */
    pthread_t *threads;
    worker_arg *args;
    /* the job: written by the caller before gen is bumped (invariant 1) */
    kn_range_fn fn;
    void *ctx;
    int64_t n, grain, units, parts;
    chunk_slot *slots; /* [n_threads], 64-byte aligned */
    alignas(64) atomic_uint gen;
    alignas(64) atomic_int sleepers;
    atomic_bool stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool sync_ok;
    uint64_t jobs; /* kn_pool_for calls split over threads (caller-only) */
};

/* Chunk k of the job: whole grains, split as evenly as possible. */
static void chunk_range(const kn_pool *p, int k, int64_t *b, int64_t *e)
{
    int64_t ub = p->units * k / p->parts, ue = p->units * (k + 1) / p->parts;
    *b = ub * p->grain;
    *e = ue * p->grain < p->n ? ue * p->grain : p->n;
    if (*b > p->n) *b = p->n;
}

static void run_chunk(kn_pool *p, int tid)
{
    if (tid >= p->parts) return;
    int64_t b, e;
    chunk_range(p, tid, &b, &e);
    if (b < e) p->fn(p->ctx, b, e, tid);
}

static unsigned wait_for_job(kn_pool *p, unsigned seen)
{
    for (int i = 0; i < SPIN_ITERS; i++) {
        unsigned g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen || atomic_load_explicit(&p->stop, memory_order_relaxed)) return g;
        CPU_RELAX();
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    unsigned g;
    while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->cv, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

/* Raises slot k's claim to gen g; true if this thread got chunk k of job g. */
static bool claim(kn_pool *p, int k, unsigned g)
{
    unsigned old = atomic_load_explicit(&p->slots[k].claimed, memory_order_relaxed);
    while ((int)(g - old) > 0)
        if (atomic_compare_exchange_weak_explicit(&p->slots[k].claimed, &old, g, memory_order_acq_rel,
                                                  memory_order_relaxed))
            return true;
    return false;
}

static void *worker_main(void *arg)
{
    worker_arg *wa = arg;
    kn_pool *p = wa->pool;
    unsigned seen = 0; /* gen at creation: a late-starting worker must not skip job 1 */
    for (;;) {
        seen = wait_for_job(p, seen);
        if (atomic_load(&p->stop)) break;
        if (!claim(p, wa->tid, seen)) continue; /* the caller took it (or a newer job is up) */
        run_chunk(p, wa->tid);
        atomic_store_explicit(&p->slots[wa->tid].done, seen, memory_order_release);
    }
    return NULL;
}

kiln_code kn_pool_create(int n_threads, kn_pool **out, kiln_err *err)
{
    *out = NULL;
    if (n_threads < 1 || n_threads > KN_POOL_MAX_THREADS)
        return kiln_fail(err, KILN_E_INVALID, "kn_pool: %d threads (want 1..1024)", n_threads);
    kn_pool *p = calloc(1, sizeof *p);
    if (!p) return kiln_fail(err, KILN_E_NOMEM, "kn_pool: out of memory");
    p->n_threads = n_threads;
    atomic_init(&p->gen, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->stop, false);
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return kiln_fail(err, KILN_E_INTERNAL, "kn_pool: mutex init failed");
    }
    if (pthread_cond_init(&p->cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return kiln_fail(err, KILN_E_INTERNAL, "kn_pool: condvar init failed");
    }
    p->sync_ok = true;
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    p->args = calloc((size_t)n_threads, sizeof *p->args);
    p->slots = aligned_alloc(64, sizeof(chunk_slot) * (size_t)n_threads);
    if (!p->threads || !p->args || !p->slots) goto nomem;
    for (int t = 0; t < n_threads; t++) {
        atomic_init(&p->slots[t].claimed, 0);
        atomic_init(&p->slots[t].done, 0);
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)4 << 20);
    for (int t = 1; t < n_threads; t++) {
        p->args[t].pool = p;
        p->args[t].tid = t;
        if (pthread_create(&p->threads[t], &attr, worker_main, &p->args[t]) != 0) {
            pthread_attr_destroy(&attr);
            kn_pool_destroy(p);
            return kiln_fail(err, KILN_E_INTERNAL, "kn_pool: cannot start thread %d", t);
        }
        p->n_started = t;
    }
    pthread_attr_destroy(&attr);
    *out = p;
    return KILN_OK;
nomem:
    kn_pool_destroy(p);
    return kiln_fail(err, KILN_E_NOMEM, "kn_pool: out of memory");
}

void kn_pool_destroy(kn_pool *p)
{
    if (!p) return;
    if (p->sync_ok) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->stop, true);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        for (int t = 1; t <= p->n_started; t++) pthread_join(p->threads[t], NULL);
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
    }
    free(p->threads);
    free(p->args);
    free(p->slots);
    free(p);
}

int kn_pool_threads(const kn_pool *p)
{
    return p ? p->n_threads : 1;
}

uint64_t kn_pool_jobs(const kn_pool *p)
{
    return p ? p->jobs : 0;
}

void kn_pool_for(kn_pool *p, int64_t n, int64_t grain, kn_range_fn fn, void *ctx)
{
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t units = (n + grain - 1) / grain;
    int64_t parts = p ? p->n_threads : 1;
    if (parts > units) parts = units;
    if (parts <= 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    p->jobs++;
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->grain = grain;
    p->units = units;
    p->parts = parts;
    unsigned g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    atomic_store(&p->gen, g); /* seq_cst: pairs with the sleepers check (invariant 2) */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    run_chunk(p, 0);
    bool mine[KN_POOL_MAX_THREADS];
    for (int k = 1; k < p->n_threads; k++) {
        mine[k] = claim(p, k, g); /* an idle or descheduled worker's chunk: run it here */
        if (mine[k]) run_chunk(p, k);
    }
    for (int k = 1; k < p->n_threads; k++) {
        if (mine[k]) continue;
        for (unsigned spins = 0;
             atomic_load_explicit(&p->slots[k].done, memory_order_acquire) != g; spins++) {
            if (spins < 20000) CPU_RELAX();
            else sched_yield(); /* the worker was descheduled mid-chunk */
        }
    }
}
