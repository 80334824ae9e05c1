/*
 * bench_draft.c — what a draft model buys: the same greedy requests through
 * the engine with drafting off and with --draft-model drafting, rows at once,
 * interleaved round by round (the machine is shared: medians printed).
 *
 *   bench_draft --model DIR --draft DIR|ngram [--threads 2] [--rows 1] [--prompt 64]
 *               [--tokens 64] [--max-draft 4] [--rounds 3] [--fixed] [--bias ID:VAL ...]
 *   bench=draft rows=1 method=off tok_s=... | method=draft tok_s=... acceptance=...
 * (verified / accepted: draft tokens verified and accepted, from the requests'
 * own counts; declined: drafts the cost rule declined) 
 *
 * --fixed turns the adaptive rules off (every row drafts max_draft each step,
 * whatever the step cost model says): the raw effect of drafting, which the
 * cost rule otherwise weighs against measured step times. Outputs are
 * checked equal to drafting off (a mismatch is reported: it would be a bug).
 * --draft ngram drafts by prompt lookup instead (no draft model); --bias
 * (up to 8) adds a logit_bias to every request, which makes a random-weight
 * model's text repeat so n-gram drafts get accepted (hybrid targets: the
 * per-position recurrent states are then kept and picked).
 * Prints figures only; never passes or fails on time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/eng_engine.h"
#include "util/plat.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Runs `rows` copies (different prompts) at once; returns seconds, fills the
 * tokens of row 0 and the accepted / rejected totals. */
static eng_bias bias[8];
static int n_bias;

static double run(eng_engine *e, int rows, int32_t *prompts, int plen, int ntok, eng_spec_method m,
                  int32_t *out0, int64_t *acc, int64_t *rej, int *bad)
{
    eng_handle *h[64];
    kiln_err err;
    double t0 = plat_now();
    for (int r = 0; r < rows; r++) {
        eng_params p = eng_params_default();
        p.prompt = prompts + (size_t)r * (size_t)plen;
        p.n_prompt = plen;
        p.max_tokens = ntok;
        p.ignore_eos = true;
        p.sp.temperature = 0;
        p.spec = m;
        p.sp.logit_bias = n_bias ? bias : NULL;
        p.sp.n_bias = n_bias;
        if (eng_submit(e, &p, &h[r], &err)) {
            fprintf(stderr, "bench_draft: %s\n", err.msg);
            *bad = 1;
            return 0;
        }
    }
    for (int r = 0; r < rows; r++) {
        eng_event ev;
        int n = 0;
        while (eng_handle_next(h[r], &ev, -1) == 0) {
            if (ev.kind == ENG_EV_TOKEN && r == 0 && n < ntok) out0[n++] = ev.token;
            int last = ev.kind != ENG_EV_TOKEN;
            if (last) {
                *acc += ev.spec_accepted;
                *rej += ev.spec_rejected;
                if (ev.kind == ENG_EV_ERROR) *bad = 1;
            }
            eng_event_clear(&ev);
            if (last) break;
        }
        eng_handle_release(h[r]);
    }
    return plat_now() - t0;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *draft_dir = NULL;
    int threads = 2, rows = 1, plen = 64, ntok = 64, maxd = 4, rounds = 3, fixed = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--fixed")) {
            fixed = 1;
            continue;
        }
        if (i + 1 >= argc) break;
        if (!strcmp(argv[i], "--model")) model = argv[++i];
        else if (!strcmp(argv[i], "--draft")) draft_dir = argv[++i];
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rows")) rows = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prompt")) plen = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tokens")) ntok = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-draft")) maxd = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bias") && n_bias < 8) {
            const char *c = strchr(argv[++i], ':');
            bias[n_bias++] = (eng_bias){atoi(argv[i]), c ? (float)atof(c + 1) : 0.0f};
        }
    }
    int ngram = draft_dir && !strcmp(draft_dir, "ngram");
    eng_spec_method method = ngram ? ENG_SPEC_NGRAM : ENG_SPEC_DRAFT;
    if (!model || !draft_dir || rows < 1 || rows > 64 || plen < 1 || plen > 4096 || ntok < 1 ||
        ntok > 4096 || maxd < 1 || maxd > ENG_SPEC_MAX_DRAFT || rounds < 1 || rounds > 64) {
        fprintf(stderr, "usage: bench_draft --model DIR --draft DIR [--threads N] [--rows N] "
                        "[--prompt N] [--tokens N] [--max-draft N] [--rounds N] [--fixed]\n");
        return 2;
    }
    kiln_err err;
    eng_runtime_opts o = eng_runtime_opts_default();
    o.n_threads = threads;
    o.max_seqs = rows;
    o.ctx = plen + ntok + 32;
    eng_runtime *rt;
    tok_tokenizer *tok;
    eng_draft *d = NULL;
    if (eng_runtime_open(model, &o, &rt, &err) || tok_load(model, &tok, &err) ||
        (!ngram && eng_draft_open(draft_dir, rt, tok, 0, &d, &err))) {
        fprintf(stderr, "bench_draft: %s\n", err.msg);
        return 1;
    }
    eng_engine_opts eo = eng_engine_opts_default();
    eo.spec.max_draft = maxd;
    eo.spec.adaptive = !fixed;
    eo.draft = d;
    eo.prefix_cache = false; /* every round computes its prompt: the rounds are alike */
    eng_engine *e;
    if (eng_engine_start(rt, tok, &eo, &e, &err)) {
        fprintf(stderr, "bench_draft: %s\n", err.msg);
        return 1;
    }
    int64_t vocab = mdl_vocab(rt->model);
    int32_t *prompts = malloc(sizeof(int32_t) * (size_t)rows * (size_t)plen);
    int32_t *ref = malloc(sizeof(int32_t) * (size_t)ntok), *got = malloc(sizeof(int32_t) * (size_t)ntok);
    if (!prompts || !ref || !got) return 1;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < plen; i++)
            prompts[(size_t)r * (size_t)plen + (size_t)i] = (int32_t)(3 + (i * 37 + r * 11) % (vocab - 3));
    double t_off[64], t_on[64];
    int64_t acc = 0, rej = 0, a0 = 0, r0 = 0;
    int bad = 0, differ = 0;
    for (int k = 0; k < rounds; k++) {
        memset(ref, 0, sizeof(int32_t) * (size_t)ntok);
        memset(got, 0, sizeof(int32_t) * (size_t)ntok);
        t_off[k] = run(e, rows, prompts, plen, ntok, ENG_SPEC_OFF, ref, &a0, &r0, &bad);
        t_on[k] = run(e, rows, prompts, plen, ntok, method, got, &acc, &rej, &bad);
        differ |= memcmp(ref, got, sizeof(int32_t) * (size_t)ntok) != 0;
    }
    qsort(t_off, (size_t)rounds, sizeof *t_off, cmp_d);
    qsort(t_on, (size_t)rounds, sizeof *t_on, cmp_d);
    eng_stats st = eng_get_stats(e);
    double toks = (double)rows * ntok;
    printf("bench=draft rows=%d prompt=%d tokens=%d max_draft=%d adaptive=%d threads=%d method=off "
           "tok_s=%.2f\n",
           rows, plen, ntok, maxd, !fixed, rt->o.n_threads, toks / t_off[rounds / 2]);
    printf("bench=draft rows=%d prompt=%d tokens=%d max_draft=%d adaptive=%d threads=%d "
           "method=%s tok_s=%.2f speedup=%.2f verified=%llu accepted=%lld acceptance=%.3f "
           "declined=%llu draft_s=%.2f draft_forwards=%llu identical=%s%s\n",
           rows, plen, ntok, maxd, !fixed, rt->o.n_threads, eng_spec_method_name(method),
           toks / t_on[rounds / 2], t_off[rounds / 2] / t_on[rounds / 2], (unsigned long long)(acc + rej), (long long)acc,
           acc + rej ? (double)acc / (double)(acc + rej) : 0,
           (unsigned long long)st.spec.skipped_cost, st.spec.draft_s,
           (unsigned long long)st.draft.forwards, differ ? "NO" : "yes", bad ? " errors=yes" : "");
    eng_engine_stop(e);
    eng_draft_close(d);
    eng_runtime_close(rt);
    tok_destroy(tok);
    free(prompts);
    free(ref);
    free(got);
    return differ || bad;
}
