/*
 * bench_lora.c — what LoRA adapters cost in the batched decode step
 * (docs/lora.md): decode tok/s of B streams with no adapter, every stream on
 * one adapter, or the streams spread over K adapters, the scenarios
 * interleaved round by round so they share the machine's load.
 *
 *   bench_lora --model DIR --lora DIR [--lora DIR ...] [--threads N] [--steps N] [--rounds N]
 *   scenario=base b=1 tok_s=... | scenario=lora1 b=1 ... | scenario=base b=8 ... | scenario=mixK
 * b=8 ...
 *
 * Prints figures only (medians over rounds); never passes or fails on time.
 */
#include "engine/eng_runtime.h"
#include "engine/eng_seq.h"
#include "model/mdl_lora.h"
#include "util/plat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXB 8

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* tok/s of `steps` decode steps of b streams (after a 32-token prefill each). */
static double run(eng_runtime *rt, int b, const mdl_lora_set *sets, int n_sets, int steps)
{
    kiln_err err;
    eng_seq *s[MAXB];
    int32_t prompt[32];
    for (int i = 0; i < 32; i++)
        prompt[i] = 3 + (i * 37) % 400;
    eng_step_item it[MAXB];
    for (int i = 0; i < b; i++) {
        prompt[0] = 3 + i;
        if (eng_seq_create(prompt, 32, &s[i], &err)) return -1;
        it[i] = (eng_step_item){
            .seq = s[i], .max_tokens = 32, .lora = n_sets ? &sets[i % n_sets] : NULL};
    }
    if (eng_step_run(rt->cx, rt->kv, it, b, 0, rt->logits, rt->logit_rows, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    double t0 = plat_now();
    for (int k = 0; k < steps; k++) {
        for (int i = 0; i < b; i++) {
            eng_seq_append(s[i], 5 + (k + i) % 300, &err);
            it[i].max_tokens = 1;
        }
        if (eng_step_run(rt->cx, rt->kv, it, b, 0, rt->logits, rt->logit_rows, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return -1;
        }
    }
    double dt = plat_now() - t0;
    for (int i = 0; i < b; i++)
        eng_seq_free(s[i], rt->kv);
    return (double)b * steps / dt;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *loras[8];
    int n_lora = 0, threads = 0, steps = 32, rounds = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model"))
            model = argv[i + 1];
        else if (!strcmp(argv[i], "--lora") && n_lora < 8)
            loras[n_lora++] = argv[i + 1];
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps"))
            steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = atoi(argv[i + 1]);
    }
    if (!model || !n_lora || steps < 1 || rounds < 1 || rounds > 16) {
        fprintf(stderr, "usage: bench_lora --model DIR --lora DIR [--lora DIR ...] [--threads N] "
                        "[--steps N] [--rounds N]\n");
        return 2;
    }
    kiln_err err;
    eng_runtime_opts o = eng_runtime_opts_default();
    o.ctx = 512;
    o.max_seqs = MAXB;
    if (threads > 0) o.n_threads = threads;
    eng_runtime *rt = NULL;
    if (eng_runtime_open(model, &o, &rt, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    mdl_lora *a[8];
    mdl_lora_set sets[8];
    for (int i = 0; i < n_lora; i++) {
        if (mdl_lora_load(rt->model, loras[i], &a[i], &err)) {
            fprintf(stderr, "%s: %s\n", loras[i], err.msg);
            return 1;
        }
        sets[i] = (mdl_lora_set){.n = 1, .a = {a[i]}, .scale = {1}};
        mdl_lora_info in = mdl_lora_get_info(a[i]);
        printf("adapter %s rank=%d modules=%d bytes=%llu\n", loras[i], (int)in.rank,
               (int)in.n_modules, (unsigned long long)in.bytes);
    }
    struct {
        const char *name;
        int b, n_sets;
    } sc[] = {{"base", 1, 0},
              {"lora1", 1, 1},
              {"base", MAXB, 0},
              {"lora1", MAXB, 1},
              {"mix", MAXB, n_lora}};
    enum { NS = sizeof sc / sizeof *sc };
    double r[NS][16];
    for (int k = 0; k < rounds; k++)
        for (int j = 0; j < NS; j++)
            r[j][k] = run(rt, sc[j].b, sets, sc[j].n_sets, steps);
    for (int j = 0; j < NS; j++) {
        qsort(r[j], (size_t)rounds, sizeof(double), cmp_d);
        printf("scenario=%s%s b=%d adapters=%d threads=%d steps=%d tok_s=%.1f\n", sc[j].name,
               !strcmp(sc[j].name, "mix") ? "" : "", sc[j].b, sc[j].n_sets, rt->o.n_threads, steps,
               r[j][rounds / 2]);
    }
    for (int i = 0; i < n_lora; i++)
        mdl_lora_free(a[i]);
    eng_runtime_close(rt);
    return 0;
}
