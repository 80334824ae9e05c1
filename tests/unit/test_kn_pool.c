/*
 * test_kn_pool.c — the compute pool: every item exactly once in contiguous
 * whole-grain chunks, tids in range, NULL pool, sleep/wake, many tiny calls.
 */
#include <stdatomic.h>
#include <time.h>

#include "kernels/kn_pool.h"
#include "test.h"
#include "util/plat.h"

typedef struct {
    int64_t n, grain;
    int threads;
    atomic_int *hits;
    atomic_int bad;
    atomic_int calls;
} cover_ctx;

static void cover_fn(void *vctx, int64_t b, int64_t e, int tid)
{
    cover_ctx *c = vctx;
    atomic_fetch_add(&c->calls, 1);
    if (tid < 0 || tid >= c->threads || b >= e || b < 0 || e > c->n) atomic_fetch_add(&c->bad, 1);
    if (b % c->grain != 0) atomic_fetch_add(&c->bad, 1);
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&c->hits[i], 1);
}

static int cover_once(kn_pool *p, int threads, int64_t n, int64_t grain)
{
    cover_ctx c = {.n = n, .grain = grain, .threads = threads};
    c.hits = calloc((size_t)(n > 0 ? n : 1), sizeof *c.hits);
    atomic_init(&c.bad, 0);
    atomic_init(&c.calls, 0);
    kn_pool_for(p, n, grain, cover_fn, &c);
    int ok = atomic_load(&c.bad) == 0 && atomic_load(&c.calls) <= threads;
    for (int64_t i = 0; i < n; i++) ok &= atomic_load(&c.hits[i]) == 1;
    free(c.hits);
    return ok;
}

static void test_every_item_runs_once_in_whole_grain_chunks(void)
{
    kiln_err err;
    for (int th = 1; th <= 4; th++) {
        kn_pool *p;
        ASSERT_OK(kn_pool_create(th, &p, &err));
        ASSERT_EQ_I64(kn_pool_threads(p), th);
        static const int64_t ns[] = {0, 1, 2, 3, 7, 16, 17, 100, 1000, 4099};
        static const int64_t gs[] = {1, 2, 4, 16, 64};
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
            for (size_t j = 0; j < sizeof gs / sizeof *gs; j++)
                if (!cover_once(p, th, ns[i], gs[j])) {
                    kn_pool_destroy(p);
                    TEST_FAIL_("threads=%d n=%" PRId64 " grain=%" PRId64, th, ns[i], gs[j]);
                }
        kn_pool_destroy(p);
    }
}

static void test_null_pool_runs_on_caller(void)
{
    ASSERT_TRUE(cover_once(NULL, 1, 123, 5));
    ASSERT_EQ_I64(kn_pool_threads(NULL), 1);
    kn_pool_destroy(NULL);
}

static void test_both_threads_get_work(void)
{
    kiln_err err;
    kn_pool *p;
    ASSERT_OK(kn_pool_create(2, &p, &err));
    cover_ctx c = {.n = 64, .grain = 16, .threads = 2};
    c.hits = calloc(64, sizeof *c.hits);
    atomic_init(&c.bad, 0);
    atomic_init(&c.calls, 0);
    kn_pool_for(p, 64, 16, cover_fn, &c);
    free(c.hits);
    kn_pool_destroy(p);
    ASSERT_EQ_I64(atomic_load(&c.calls), 2);
}

typedef struct {
    int64_t sum[4][16]; /* per tid, padded */
} sum_ctx;

static void sum_fn(void *vctx, int64_t b, int64_t e, int tid)
{
    sum_ctx *c = vctx;
    for (int64_t i = b; i < e; i++) c->sum[tid][0] += i;
}

static void test_workers_wake_after_sleeping(void)
{
    kiln_err err;
    kn_pool *p;
    ASSERT_OK(kn_pool_create(3, &p, &err));
    for (int round = 0; round < 4; round++) {
        struct timespec ts = {0, 30 * 1000 * 1000}; /* long enough for workers to sleep */
        nanosleep(&ts, NULL);
        sum_ctx c;
        memset(&c, 0, sizeof c);
        kn_pool_for(p, 1000, 1, sum_fn, &c);
        ASSERT_EQ_I64(c.sum[0][0] + c.sum[1][0] + c.sum[2][0], 999 * 1000 / 2);
        ASSERT_TRUE(c.sum[1][0] > 0 && c.sum[2][0] > 0);
    }
    kn_pool_destroy(p);
}

static void test_many_small_calls_are_cheap(void)
{
    kiln_err err;
    kn_pool *p;
    ASSERT_OK(kn_pool_create(2, &p, &err));
    sum_ctx c;
    memset(&c, 0, sizeof c);
    int calls = 5000;
    double t0 = plat_now();
    for (int i = 0; i < calls; i++) kn_pool_for(p, 64, 16, sum_fn, &c);
    double us = (plat_now() - t0) * 1e6 / calls;
    fprintf(stderr, "  kn_pool_for overhead: %.2f us/call (2 threads)\n", us);
    ASSERT_EQ_I64(c.sum[0][0] + c.sum[1][0], (int64_t)calls * (63 * 64 / 2));
    kn_pool_destroy(p);
}

static void test_create_refuses_bad_thread_count(void)
{
    kiln_err err;
    kn_pool *p = (kn_pool *)&err;
    ASSERT_CODE(kn_pool_create(0, &p, &err), KILN_E_INVALID);
    ASSERT_TRUE(p == NULL);
}

int main(void)
{
    RUN(test_every_item_runs_once_in_whole_grain_chunks);
    RUN(test_null_pool_runs_on_caller);
    RUN(test_both_threads_get_work);
    RUN(test_workers_wake_after_sleeping);
    RUN(test_many_small_calls_are_cheap);
    RUN(test_create_refuses_bad_thread_count);
    return TEST_DONE();
}
