/*
 * bench_pool.c — per-op synchronisation cost of the compute pool: back-to-back
 * kn_pool_for calls, one chunk per thread.
 * A 1B decode step issues ~200 pool calls, so 1 µs per call is 0.2 ms per token.
 *
 *   bench_pool [--threads N] [--calls N]
 *   bench=pool threads=2 work_us=5 calls=50000 median_us=... overhead_us=... p90_us=...
 * caller_cpu_us_per_call=...
 *
 * Every chunk busy-waits a fixed wall time (0, 1, 5, 20, 100 µs), so a call
 * ideally lasts exactly that; overhead_us is the median call's rest.
 * Prints figures only; never passes or fails on time.
 */
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kn_pool.h"
#include "util/plat.h"

typedef struct {
    double work_s; /* busy time per chunk */
    alignas(64) volatile uint64_t sink[8][8];
} work_ctx;

/* Each chunk busy-waits work_s seconds of wall time: the ideal call lasts
 * exactly work_s, so anything above it is the pool's cost. */
static void work_fn(void *vctx, int64_t b, int64_t e, int tid)
{
    (void)b;
    (void)e;
    work_ctx *c = vctx;
    if (c->work_s <= 0) {
        c->sink[tid & 7][0]++;
        return;
    }
    double t0 = plat_now();
    while (plat_now() - t0 < c->work_s)
        c->sink[tid & 7][0]++;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int threads = 2;
    int64_t calls = 200000;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--calls") == 0 && i + 1 < argc)
            calls = atoll(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--threads N] [--calls N]\n", argv[0]);
            return 2;
        }
    }
    kiln_err err;
    kn_pool *pool;
    if (kn_pool_create(threads, &pool, &err) != KILN_OK) {
        fprintf(stderr, "bench_pool: %s\n", err.msg);
        return 1;
    }
    static const double works_us[] = {0, 1, 5, 20, 100};
    double *t = malloc(sizeof *t * (size_t)calls);
    if (!t) return 1;
    for (size_t w = 0; w < sizeof works_us / sizeof *works_us; w++) {
        work_ctx c;
        memset(&c, 0, sizeof c);
        c.work_s = works_us[w] * 1e-6;
        int64_t nc = works_us[w] >= 20 ? calls / 20 : calls / (works_us[w] >= 5 ? 4 : 1);
        double c0 = cpu_now();
        for (int64_t k = 0; k < nc; k++) {
            double t0 = plat_now();
            kn_pool_for(pool, threads, 1, work_fn, &c);
            t[k] = plat_now() - t0;
        }
        double cpu = (cpu_now() - c0) / (double)nc;
        qsort(t, (size_t)nc, sizeof *t, cmp_d);
        /* median and 90th percentile: a loaded machine deschedules threads now and then */
        double med = t[nc / 2], p90 = t[nc * 9 / 10];
        printf("bench=pool threads=%d work_us=%g calls=%lld median_us=%.3f overhead_us=%.3f "
               "p90_us=%.3f "
               "caller_cpu_us_per_call=%.3f\n",
               threads, works_us[w], (long long)nc, med * 1e6, med * 1e6 - works_us[w], p90 * 1e6,
               cpu * 1e6);
        fflush(stdout);
    }
    free(t);
    kn_pool_destroy(pool);
    return 0;
}
