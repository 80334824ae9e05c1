/*
 * bench_attn.c — decode attention cost at depth: one new token attending over
 * N cached positions in every layer of a model shape (default the
 * Llama-3.2-1B shape: 16 layers, 32 query / 8 KV heads, head_dim 64), per KV
 * format, split over KV heads on the pool as the model does.
 *
 *   bench_attn [--threads 2] [--ctx 512,4096,16384] [--kv f32,f16,q8,q4]
 *              [--layers 16] [--heads 32] [--kv-heads 8] [--head-dim 64]
 *              [--step-ms X]
 *   bench=attn kv=q8 ctx=4096 layers=16 ms_per_token=... kv_bytes=... gbps=...
 *       [decode_ratio_vs_first=...]
 *
 * Each layer's K/V is its own allocation (the working set streams from
 * memory as in a real decode). --step-ms is the rest of a decode step
 * (matmuls, norms: `kiln bench` decode ms/token minus its attention share);
 * with it, decode_ratio_vs_first = (step + attn(N)) / (step + attn(first N)).
 * Prints figures only; never passes or fails on time.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kn_attn.h"
#include "kernels/kn_cpu.h"
#include "kernels/kn_kvq.h"
#include "kernels/kn_pool.h"
#include "util/plat.h"

#define BLOCK 16

typedef struct {
    kn_attn_args a;
    float *scratch[64];
    int64_t scratch_floats;
} job;

static void heads_fn(void *vctx, int64_t b, int64_t e, int tid)
{
    job *j = vctx;
    int32_t group = j->a.n_heads / j->a.n_kv_heads;
    for (int64_t g = b; g < e; g++)
        kn_attn_heads(&j->a, (int32_t)(g * group), (int32_t)((g + 1) * group), j->scratch[tid]);
}

static int parse_list(const char *s, int64_t *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *end;
        out[n++] = strtoll(s, &end, 10);
        s = *end == ',' ? end + 1 : end;
        if (end == s && *s) return 0;
    }
    return n;
}

int main(int argc, char **argv)
{
    int threads = 2, layers = 16, heads = 32, kv_heads = 8, head_dim = 64;
    int64_t ctxs[8] = {512, 4096, 16384};
    int n_ctx = 3;
    const char *kvs = "f32,f16,q8,q4";
    double step_ms = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--ctx") == 0 && i + 1 < argc)
            n_ctx = parse_list(argv[++i], ctxs, 8);
        else if (strcmp(argv[i], "--kv") == 0 && i + 1 < argc)
            kvs = argv[++i];
        else if (strcmp(argv[i], "--layers") == 0 && i + 1 < argc)
            layers = atoi(argv[++i]);
        else if (strcmp(argv[i], "--heads") == 0 && i + 1 < argc)
            heads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--kv-heads") == 0 && i + 1 < argc)
            kv_heads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--head-dim") == 0 && i + 1 < argc)
            head_dim = atoi(argv[++i]);
        else if (strcmp(argv[i], "--step-ms") == 0 && i + 1 < argc)
            step_ms = atof(argv[++i]);
        else {
            fprintf(
                stderr,
                "usage: %s [--threads N] [--ctx 512,4096,16384] [--kv f32,f16,q8,q4] [--layers N] "
                "[--heads N] [--kv-heads N] [--head-dim N] [--step-ms X]\n",
                argv[0]);
            return 2;
        }
    }
    if (threads < 1 || threads > 64 || layers < 1 || heads < 1 || kv_heads < 1 ||
        heads % kv_heads || head_dim < 8 || head_dim % 8 || n_ctx < 1) {
        fprintf(stderr, "bench_attn: bad shape or list\n");
        return 2;
    }
    kiln_err err;
    kn_pool *pool;
    if (kn_init(NULL, &err) != KILN_OK || kn_pool_create(threads, &pool, &err) != KILN_OK) {
        fprintf(stderr, "bench_attn: %s\n", err.msg);
        return 1;
    }
    char list[64];
    snprintf(list, sizeof list, "%s", kvs);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        kn_kv_fmt f = {KN_KV_F32, 0, 0};
        int32_t g64 = head_dim < 64 ? head_dim : 64, rot = kn_kv_rot_block(head_dim);
        if (strcmp(tok, "f16") == 0)
            f.dtype = KN_KV_F16;
        else if (strcmp(tok, "bf16") == 0)
            f.dtype = KN_KV_BF16;
        else if (strcmp(tok, "q8") == 0)
            f = (kn_kv_fmt){KN_KV_Q8, g64, rot};
        else if (strcmp(tok, "q4") == 0)
            f = (kn_kv_fmt){KN_KV_Q4, g64, rot};
        else if (strcmp(tok, "f32") != 0) {
            fprintf(stderr, "bench_attn: unknown KV format %s\n", tok);
            return 2;
        }
        size_t rec = kn_kv_rec_bytes(f, head_dim), block_bytes = rec * (size_t)kv_heads * BLOCK;
        double first_ms = 0;
        for (int c = 0; c < n_ctx; c++) {
            int64_t n = ctxs[c], nb = (n + BLOCK - 1) / BLOCK;
            /* one block of real records (random rows), copied everywhere */
            uint8_t *proto = malloc(block_bytes);
            float *row = malloc(sizeof(float) * (size_t)head_dim);
            uint64_t x = 0x1234567;
            for (int r = 0; r < BLOCK * kv_heads; r++) {
                for (int d = 0; d < head_dim; d++) {
                    x = x * 6364136223846793005ull + 1442695040888963407ull;
                    row[d] = (float)((double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
                }
                kn_kv_store(f, row, head_dim, proto + (size_t)r * rec);
            }
            uint8_t **kv = calloc((size_t)layers * 2, sizeof *kv);
            const void **tab = calloc((size_t)layers * 2 * (size_t)nb, sizeof *tab);
            int ok = proto && row && kv && tab;
            for (int l = 0; ok && l < 2 * layers; l++) {
                kv[l] = malloc(block_bytes * (size_t)nb);
                if (!kv[l]) {
                    ok = 0;
                    break;
                }
                for (int64_t b = 0; b < nb; b++) {
                    memcpy(kv[l] + (size_t)b * block_bytes, proto, block_bytes);
                    tab[(size_t)l * (size_t)nb + (size_t)b] = kv[l] + (size_t)b * block_bytes;
                }
            }
            float *q = malloc(sizeof(float) * (size_t)heads * (size_t)head_dim);
            float *out = malloc(sizeof(float) * (size_t)heads * (size_t)head_dim);
            job j;
            memset(&j, 0, sizeof j);
            if (ok && q && out) {
                for (int i = 0; i < heads * head_dim; i++)
                    q[i] = (float)sin(i * 0.37);
                j.a = (kn_attn_args){.q = q,
                                     .out = out,
                                     .n_q = 1,
                                     .pos0 = (int32_t)(n - 1),
                                     .n_heads = heads,
                                     .n_kv_heads = kv_heads,
                                     .head_dim = head_dim,
                                     .scale = 1.0f / sqrtf((float)head_dim),
                                     .block_tokens = BLOCK,
                                     .fmt = f,
                                     .fmt_full = f};
                j.scratch_floats = kn_attn_scratch_floats(&j.a);
                for (int t = 0; t < threads; t++) {
                    j.scratch[t] = malloc(sizeof(float) * (size_t)j.scratch_floats);
                    if (!j.scratch[t]) ok = 0;
                }
            } else {
                ok = 0;
            }
            if (!ok) {
                fprintf(stderr, "bench_attn: out of memory at ctx %" PRId64 "\n", n);
                return 1;
            }
            /* reps: enough for ~0.5 s, at least 3; median of per-token times */
            double best = 1e30;
            int reps = 0;
            double t_all = plat_now();
            while (reps < 3 || (plat_now() - t_all < 0.5 && reps < 200)) {
                double t0 = plat_now();
                for (int l = 0; l < layers; l++) {
                    j.a.k_blocks = tab + (size_t)(2 * l) * (size_t)nb;
                    j.a.v_blocks = tab + (size_t)(2 * l + 1) * (size_t)nb;
                    kn_pool_for(pool, kv_heads, 1, heads_fn, &j);
                }
                double dt = plat_now() - t0;
                if (dt < best) best = dt;
                reps++;
            }
            double ms = best * 1e3, bytes = (double)block_bytes * (double)nb * 2.0 * layers;
            if (c == 0) first_ms = ms;
            printf("bench=attn kv=%s ctx=%" PRId64 " layers=%d threads=%d ms_per_token=%.3f "
                   "kv_mb=%.1f gbps=%.2f",
                   tok, n, layers, threads, ms, bytes / 1e6, bytes / best / 1e9);
            if (step_ms > 0)
                printf(" decode_ratio_vs_first=%.3f", (step_ms + ms) / (step_ms + first_ms));
            printf("\n");
            fflush(stdout);
            for (int t = 0; t < threads; t++)
                free(j.scratch[t]);
            for (int l = 0; l < 2 * layers; l++)
                free(kv[l]);
            free(kv);
            free(tab);
            free(proto);
            free(row);
            free(q);
            free(out);
        }
    }
    kn_pool_destroy(pool);
    return 0;
}
