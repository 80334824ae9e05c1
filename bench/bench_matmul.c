/*
 * bench_matmul.c — matmul throughput per format on Llama-3.2-1B shapes, plus a
 * streaming-read memory bandwidth probe (1 GiB, kn_dot over pages, pool threads). Prints one
 * key=value line per configuration; never passes or fails on time.
 *
 *   bench_matmul [--quick] [--cold] [--no-membw] [--isa ref|avx2|auto] [--matmul exact|int8]
 * [--threads N] [--reps N]
 * [--fmt NAME]
 *                [--m ROWS] [--k COLS] [--n TOKENS[,TOKENS...]]
 *   --cold cycles through enough copies of the matrix (>= 256 MiB) that each
 *   call streams its weights from DRAM, as decode does; without it a small
 *   matrix stays in L2/L3 and the figure is the kernel's compute rate.
 *   bench=membw threads=2 gib=1 gbps=...
 *   bench=matmul isa=avx2 fmt=q4 bits=4 group=64 m=2048 k=2048 n=1 gbps=... gflops=... roofline=...
 *     caller_cpu_ms=... (best CPU time of the calling thread; with --threads 1, the whole
 *     matmul's CPU cost, which a loaded machine does not inflate the way it does wall time)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kn_cpu.h"
#include "kernels/kn_mat.h"
#include "kernels/kn_ops.h"
#include "kernels/kn_pool.h"
#include "util/half.h"
#include "util/plat.h"

typedef struct {
    const float *buf;
    float sum[8][16]; /* per tid, padded to a cache line */
} bw_ctx;

/* Items are 4 KiB pages; kn_dot(x, x) streams each page once with the same
 * SIMD loads the matmul kernels use. */
static void bw_fn(void *vctx, int64_t b, int64_t e, int tid)
{
    bw_ctx *c = vctx;
    c->sum[tid][0] += kn_dot(c->buf + b * 1024, c->buf + b * 1024, (e - b) * 1024);
}

/* Streaming read of `bytes` with the pool's threads; best of `reps`. */
static double membw(kn_pool *pool, size_t bytes, int reps)
{
    float *buf = malloc(bytes);
    if (!buf) return 0;
    for (size_t i = 0; i < bytes / 4; i++)
        buf[i] = (float)(i & 1023) * 1e-3f;
    bw_ctx c;
    memset(&c, 0, sizeof c);
    c.buf = buf;
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = plat_now();
        kn_pool_for(pool, (int64_t)(bytes / 4096), 64, bw_fn, &c);
        double dt = plat_now() - t0;
        double gbps = (double)bytes / dt / 1e9;
        if (gbps > best) best = gbps;
    }
    if (c.sum[0][0] == 42.0f) fprintf(stderr, "#");
    free(buf);
    return best;
}

/* CPU seconds of the calling thread: robust to other processes on a loaded
 * machine (with --threads 1 the caller does all the work). */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

typedef struct {
    const char *name;
    kn_fmt fmt;
    int bits;
} fmt_case;

static void fill_mat(kn_mat *m, void **w, void **s, void **b)
{
    uint64_t bytes = kn_mat_bytes(m);
    *w = malloc(bytes);
    uint32_t *u = *w;
    for (uint64_t i = 0; i < bytes / 4; i++)
        u[i] = rnd32() & 0x3f7f3f7fu; /* finite halves */
    *s = *b = NULL;
    if (m->fmt == KN_QAFFINE) {
        uint64_t ng = (uint64_t)m->rows * (uint64_t)(m->cols / m->group);
        uint16_t *ss = malloc(ng * 2), *bb = malloc(ng * 2);
        for (uint64_t i = 0; i < ng; i++) {
            ss[i] = kiln_f32_to_bf16(-0.01f);
            bb[i] = kiln_f32_to_bf16(0.1f);
        }
        *s = ss;
        *b = bb;
        m->scales = ss;
        m->biases = bb;
        m->sfmt = KN_BF16;
    }
    m->w = *w;
}

/* Comma-separated integers into out[max]; returns the count. */
static int parse_list(const char *s, int64_t *out, int max)
{
    int k = 0;
    while (*s && k < max) {
        char *end;
        out[k++] = strtoll(s, &end, 10);
        if (*end != ',') break;
        s = end + 1;
    }
    return k;
}

int main(int argc, char **argv)
{
    int quick = 0, threads = 2, cold = 0, reps_min = 3, no_membw = 0;
    int64_t only_m = 0, only_k = 0, ns[8] = {1, 64};
    int n_ns = 2;
    const char *isa = "auto", *only = NULL, *mm_mode = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--cold") == 0)
            cold = 1;
        else if (strcmp(argv[i], "--no-membw") == 0)
            no_membw = 1;
        else if (strcmp(argv[i], "--isa") == 0 && i + 1 < argc)
            isa = argv[++i];
        else if (strcmp(argv[i], "--matmul") == 0 && i + 1 < argc)
            mm_mode = argv[++i];
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps_min = atoi(argv[++i]);
        else if (strcmp(argv[i], "--fmt") == 0 && i + 1 < argc)
            only = argv[++i];
        else if (strcmp(argv[i], "--m") == 0 && i + 1 < argc)
            only_m = atoll(argv[++i]);
        else if (strcmp(argv[i], "--k") == 0 && i + 1 < argc)
            only_k = atoll(argv[++i]);
        else if (strcmp(argv[i], "--n") == 0 && i + 1 < argc)
            n_ns = parse_list(argv[++i], ns, 8);
        else {
            fprintf(stderr,
                    "usage: %s [--quick] [--cold] [--no-membw] [--isa ref|avx2|auto] [--matmul "
                    "exact|int8] [--threads N] "
                    "[--reps N]\n"
                    "          [--fmt NAME] [--m ROWS] [--k COLS] [--n TOKENS[,TOKENS...]]\n",
                    argv[0]);
            return 2;
        }
    }
    kiln_err err;
    if (kn_init_mode(isa, mm_mode, &err) != KILN_OK) {
        fprintf(stderr, "bench_matmul: %s\n", err.msg);
        return 1;
    }
    kn_pool *pool;
    if (kn_pool_create(threads, &pool, &err) != KILN_OK) {
        fprintf(stderr, "bench_matmul: %s\n", err.msg);
        return 1;
    }
    size_t bw_bytes = quick ? ((size_t)64 << 20) : ((size_t)1 << 30);
    double bw = no_membw ? 0 : membw(pool, bw_bytes, quick ? 2 : 5);
    if (!no_membw)
        printf("bench=membw threads=%d gib=%.3f gbps=%.2f\n", threads, (double)bw_bytes / (1 << 30),
               bw);
    fflush(stdout);

    static const fmt_case fmts[] = {
        {"f32", KN_F32, 0},    {"bf16", KN_BF16, 0},  {"f16", KN_F16, 0},
        {"q8", KN_QAFFINE, 8}, {"q6", KN_QAFFINE, 6}, {"q5", KN_QAFFINE, 5},
        {"q4", KN_QAFFINE, 4}, {"q3", KN_QAFFINE, 3}, {"q2", KN_QAFFINE, 2}};
    /* Llama-3.2-1B: q/o, k/v, gate/up, down, lm_head ([rows = out, cols = in]) */
    static const int64_t shapes[][2] = {
        {2048, 2048}, {512, 2048}, {8192, 2048}, {2048, 8192}, {128256, 2048}};
    int n_shapes = quick ? 1 : 5;
    for (size_t f = 0; f < sizeof fmts / sizeof *fmts; f++) {
        if (only && strcmp(only, fmts[f].name) != 0) continue;
        for (int si = 0; si < n_shapes; si++) {
            kn_mat m = {.fmt = fmts[f].fmt,
                        .rows = shapes[si][0],
                        .cols = shapes[si][1],
                        .bits = fmts[f].bits,
                        .group = 64};
            if (quick) m.rows = 256;
            if (m.fmt == KN_F32 && m.rows > 100000) continue; /* 1 GiB: skip */
            if (only_m && m.rows != only_m) continue;
            if (only_k && m.cols != only_k) continue;
            /* --cold: enough copies (>= 256 MiB) that every call streams its
             * weights from DRAM, as a decode step does (a 1B model is >> L3) */
            double bytes = (double)kn_mat_bytes(&m);
            int copies = cold ? (int)((256.0 * (1 << 20)) / bytes) + 1 : 1;
            if (copies > 256) copies = 256;
            kn_mat *mc = malloc(sizeof *mc * (size_t)copies);
            void **bufs = malloc(sizeof *bufs * 3 * (size_t)copies);
            for (int c = 0; c < copies; c++) {
                mc[c] = m;
                fill_mat(&mc[c], &bufs[3 * c], &bufs[3 * c + 1], &bufs[3 * c + 2]);
            }
            for (int ni = 0; ni < n_ns; ni++) {
                int64_t n = ns[ni];
                if (quick && n > 8) n = 8;
                float *x = malloc((size_t)(n * m.cols) * 4), *y = malloc((size_t)(n * m.rows) * 4);
                for (int64_t i = 0; i < n * m.cols; i++)
                    x[i] = (float)(rnd32() % 1000) * 1e-3f - 0.5f;
                kn_matmul(pool, &mc[0], x, n, y); /* warm */
                double min_s = quick ? 0.02 : (n == 1 ? 0.5 : 1.0), best = 1e30, total = 0,
                       best_cpu = 1e30;
                int reps = 0, ci = 0;
                while (total < min_s || reps < reps_min) {
                    double c0 = cpu_now(), t0 = plat_now();
                    kn_matmul(pool, &mc[ci], x, n, y);
                    double dt = plat_now() - t0, dc = cpu_now() - c0;
                    ci = (ci + 1) % copies;
                    total += dt;
                    reps++;
                    if (dt < best) best = dt;
                    if (dc < best_cpu) best_cpu = dc;
                }
                double gbps = bytes / best / 1e9, gflops = 2.0 * m.rows * m.cols * n / best / 1e9;
                printf("bench=matmul isa=%s fmt=%s bits=%d group=%d m=%lld k=%lld n=%lld cold=%d "
                       "ms=%.3f "
                       "gbps=%.2f gflops=%.2f roofline=%.2f caller_cpu_ms=%.3f\n",
                       kn_isa_name(), fmts[f].name, m.bits, m.fmt == KN_QAFFINE ? m.group : 0,
                       (long long)m.rows, (long long)m.cols, (long long)n, cold, best * 1e3, gbps,
                       gflops, bw > 0 ? gbps / bw : 0, best_cpu * 1e3);
                fflush(stdout);
                free(x);
                free(y);
            }
            for (int c = 0; c < 3 * copies; c++)
                free(bufs[c]);
            free(bufs);
            free(mc);
        }
    }
    kn_pool_destroy(pool);
    return 0;
}
