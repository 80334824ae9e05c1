/*
 * bench_verify.c — what verifying drafts costs: one sequence's batched step
 * of 1 + d tokens (logits at every position, as speculative verification runs
 * it) against a plain decode step of 1 token, at a given depth, on a model.
 * Decode is bandwidth-bound, so the ratio is what each accepted draft token
 * saves (docs/speculative.md).
 *
 *   bench_verify --model DIR [--threads 2] [--depth 128] [--drafts 1,2,4,8]
 *                [--rounds 5] [--rows 1] [--states 0|1]
 *   bench=verify rows=1 depth=128 tokens=5 ms=... ratio_vs_1=...
 *
 * Steps of each size are interleaved round by round (the machine is shared:
 * the median of the rounds is printed). --rows N runs N sequences in the step
 * (the same shape for each). Prints figures only; never passes or fails.
 * Hybrid (recurrent) models: with --states 1 each step keeps the state after
 * every position (eng_seq_draft_states, as verification does) and every draft
 * is rejected (the kept state copied back, timed with the step); with
 * --states 0 every draft is accepted (no copies): the difference is what
 * keeping per-position states costs; with --states 2 every draft is rejected
 * and rolled back the general way (eng_seq_truncate: the latest block-boundary
 * snapshot, then the tokens after it replayed, inside the next step, as the
 * engine would). Each step moves the depth on by one (states 1, 2) or by
 * 1 + d (states 0).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/eng_runtime.h"
#include "util/plat.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *model = NULL, *drafts_s = "1,2,4,8";
    int threads = 2, depth = 128, rounds = 5, rows = 1, states = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model")) model = argv[i + 1];
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--depth")) depth = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--drafts")) drafts_s = argv[i + 1];
        else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rows")) rows = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--states")) states = atoi(argv[i + 1]);
    }
    if (!model || depth < 1 || rounds < 1 || rounds > 64 || rows < 1 || rows > 16) {
        fprintf(stderr, "usage: bench_verify --model DIR [--threads N] [--depth N] [--drafts "
                        "1,2,4] [--rounds N] [--rows N]\n");
        return 2;
    }
    int sizes[16] = {0}, n_sizes = 1; /* sizes[0] = 0 drafts: the plain decode step */
    for (const char *p = drafts_s; *p && n_sizes < 16;) {
        int d = atoi(p);
        if (d < 1 || d > 16) {
            fprintf(stderr, "bench_verify: drafts must be in 1..16\n");
            return 2;
        }
        sizes[n_sizes++] = d;
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    eng_runtime_opts o = eng_runtime_opts_default();
    o.n_threads = threads;
    o.ctx = depth + 64 + rounds * 16 * 17; /* hybrids move on by up to 1 + d per step */
    if (states == 2) o.max_step_tokens = 128; /* a replay of up to a block rides along */
    o.max_seqs = rows;
    o.max_step_tokens = 17 * rows > 64 ? 17 * rows : 64;
    eng_runtime *rt;
    kiln_err err;
    if (eng_runtime_open(model, &o, &rt, &err)) {
        fprintf(stderr, "bench_verify: %s\n", err.msg);
        return 1;
    }
    int64_t vocab = mdl_vocab(rt->model);
    eng_seq *seqs[16];
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)(depth + 32));
    for (int i = 0; i < depth + 32; i++) prompt[i] = 3 + (i * 7) % (int)(vocab > 400 ? 400 : vocab - 3);
    for (int r = 0; r < rows; r++) {
        if (eng_seq_create(prompt, depth, &seqs[r], &err) ||
            eng_prefill(rt, seqs[r], 0, NULL, &err)) {
            fprintf(stderr, "bench_verify: %s\n", err.msg);
            return 1;
        }
    }
    int hybrid = kv_pool_has_state(rt->kv);
    double ms[16][64];
    for (int round = 0; round < rounds; round++) {
        for (int k = 0; k < n_sizes; k++) {
            int n = 1 + sizes[k];
            eng_step_item it[16];
            int keep = hybrid && states && n > 1;
            for (int r = 0; r < rows; r++) {
                for (int j = 0; j < n; j++) eng_seq_append(seqs[r], prompt[depth + j], NULL);
                seqs[r]->n_draft = n - 1;
                if (keep && eng_seq_draft_states(seqs[r], rt->kv, n - 1) != n - 1) {
                    fprintf(stderr, "bench_verify: no room for %d states\n", n - 1);
                    return 1;
                }
                it[r] = (eng_step_item){.seq = seqs[r], .max_tokens = n, .all_logits = 1};
                int32_t pend = eng_seq_pending(seqs[r]);
                if (pend > n) /* states 2: the replay first, logits for the last token only */
                    it[r] = (eng_step_item){.seq = seqs[r], .max_tokens = pend};
            }
            double t0 = plat_now();
            if (eng_step_run(rt->cx, rt->kv, it, rows, 0, rt->logits, rt->logit_rows, &err)) {
                fprintf(stderr, "bench_verify: %s\n", err.msg);
                return 1;
            }
            for (int r = 0; r < rows; r++) {
                seqs[r]->n_draft = 0;
                if (!hybrid) /* back to the depth: the next size starts there */
                    eng_seq_truncate(seqs[r], rt->kv, depth);
                else if (keep || states == 2) /* every draft rejected: the kept state of the
                                                 first position, or a snapshot + replay */
                    eng_seq_truncate(seqs[r], rt->kv, seqs[r]->n_cached - (n - 1));
            }
            ms[k][round] = (plat_now() - t0) * 1e3;
        }
    }
    double base = 0;
    for (int k = 0; k < n_sizes; k++) {
        qsort(ms[k], (size_t)rounds, sizeof(double), cmp_d);
        double med = ms[k][rounds / 2];
        if (k == 0) base = med;
        printf("bench=verify rows=%d depth=%d tokens=%d%s ms=%.2f ratio_vs_1=%.3f\n", rows, depth,
               1 + sizes[k], hybrid ? (states == 2   ? " states=replay,rejected"
                               : states ? " states=kept,rejected"
                                        : " states=none,accepted")
                      : "",
               med, med / base);
    }
    for (int r = 0; r < rows; r++) eng_seq_free(seqs[r], rt->kv);
    free(prompt);
    eng_runtime_close(rt);
    return 0;
}
