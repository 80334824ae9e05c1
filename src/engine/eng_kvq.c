/*
 * eng_kvq.c — KV-format quality against f32 KV (contract: eng_kvq.h).
 * Everything is deterministic: greedy decoding, fixed start token, one thread
 * count per run, so the report and its test are reproducible bit for bit.
 */
#include "engine/eng_kvq.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t *ids;
    int32_t n, cap;
} tok_buf;

static int keep_token(void *user, int32_t tok, const eng_sample_out *so)
{
    (void)so;
    tok_buf *b = user;
    if (b->n < b->cap) b->ids[b->n++] = tok;
    return 0;
}

/* Greedy from `start`; b receives up to `n` tokens. */
static kiln_code greedy(eng_runtime *rt, int32_t start, int32_t n, tok_buf *b, kiln_err *err)
{
    eng_sampling sp = eng_sampling_default();
    sp.temperature = 0;
    eng_gen_result res;
    b->n = 0;
    return eng_generate(rt, &start, 1, &sp, n, 1, keep_token, b, &res, err);
}

/* Logits of every position of ids (fresh sequence, no prefix reuse). */
static kiln_code all_rows(eng_runtime *rt, const int32_t *ids, int32_t n, float *rows,
                          kiln_err *err)
{
    eng_seq *s;
    kiln_code rc = eng_seq_create(ids, n, &s, err);
    if (rc) return rc;
    rc = eng_prefill(rt, s, 1, rows, err);
    eng_seq_free(s, rt->kv);
    return rc;
}

/* log-softmax of x into lp (double). */
static void log_softmax(const float *x, int64_t n, double *lp)
{
    double m = -INFINITY, s = 0;
    for (int64_t i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
    for (int64_t i = 0; i < n; i++)
        s += exp((double)x[i] - m);
    double l = m + log(s);
    for (int64_t i = 0; i < n; i++)
        lp[i] = (double)x[i] - l;
}

static int64_t argmax(const float *x, int64_t n)
{
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static eng_runtime_opts sized(const eng_runtime_opts *o, int32_t positions)
{
    eng_runtime_opts r = *o;
    r.max_seqs = 1;
    r.n_blocks = 0;
    if (r.ctx < positions + 1) r.ctx = positions + 1;
    return r;
}

kiln_code eng_kvq_measure(const char *dir, const eng_runtime_opts *base,
                          const eng_runtime_opts *cand, int32_t n_cand, int32_t positions,
                          eng_kvq_result *out, kiln_err *err)
{
    if (positions < 1 || positions > 1 << 20 || n_cand < 0)
        return kiln_fail(err, KILN_E_INVALID, "kvq: %d positions", (int)positions);
    eng_runtime_opts ro = sized(base, positions);
    ro.kv_quant = KV_QUANT_OFF;
    ro.kv_quant_start = 0;
    ro.kv_fmt = NULL;
    eng_runtime *rt = NULL;
    kiln_code rc = eng_runtime_open(dir, &ro, &rt, err);
    if (rc) return rc;
    int64_t vocab = mdl_vocab(rt->model);
    int32_t n = positions + 1, bos = mdl_config(rt->model)->bos_id;
    int32_t start = bos >= 0 && bos < vocab ? bos : (vocab > 1 ? 1 : 0);
    tok_buf ref = {malloc(sizeof(int32_t) * (size_t)n), 0, n};
    tok_buf got = {malloc(sizeof(int32_t) * (size_t)n), 0, n};
    float *rows_ref = malloc(sizeof(float) * (size_t)vocab * (size_t)n);
    float *rows = malloc(sizeof(float) * (size_t)vocab * (size_t)n);
    double *lp = malloc(sizeof(double) * (size_t)vocab),
           *lq = malloc(sizeof(double) * (size_t)vocab);
    int32_t *teacher = malloc(sizeof(int32_t) * (size_t)n);
    if (!ref.ids || !got.ids || !rows_ref || !rows || !lp || !lq || !teacher) {
        rc = kiln_fail(err, KILN_E_NOMEM, "kvq: out of memory");
        goto done;
    }
    if ((rc = greedy(rt, start, positions, &ref, err))) goto done;
    teacher[0] = start;
    memcpy(teacher + 1, ref.ids, sizeof(int32_t) * (size_t)ref.n);
    int32_t nt = ref.n + 1;
    if ((rc = all_rows(rt, teacher, nt, rows_ref, err))) goto done;
    eng_runtime_close(rt);
    rt = NULL;
    for (int32_t c = 0; c < n_cand; c++) {
        eng_runtime_opts co = sized(&cand[c], positions);
        if ((rc = eng_runtime_open(dir, &co, &rt, err))) goto done;
        eng_kvq_result *r = &out[c];
        memset(r, 0, sizeof *r);
        snprintf(r->kv_format, sizeof r->kv_format, "%s", rt->kv_desc);
        r->kv_bytes_per_token =
            kv_pool_block_bytes(kv_pool_cfg(rt->kv)) / (uint64_t)rt->o.block_tokens;
        if ((rc = greedy(rt, start, positions, &got, err))) goto done;
        r->greedy_len = ref.n;
        while (r->greedy_same < got.n && r->greedy_same < ref.n &&
               got.ids[r->greedy_same] == ref.ids[r->greedy_same])
            r->greedy_same++;
        if ((rc = all_rows(rt, teacher, nt, rows, err))) goto done;
        double sum = 0, esum = 0;
        int32_t agree = 0;
        r->margin_min = INFINITY;
        r->div_margin = -1;
        if (r->greedy_same < ref.n && r->greedy_same < got.n) {
            /* row greedy_same predicted the first differing token, after the
             * same prefix in both runs */
            const float *a = rows_ref + (size_t)r->greedy_same * (size_t)vocab;
            r->div_margin = (double)a[ref.ids[r->greedy_same]] - a[got.ids[r->greedy_same]];
        }
        for (int32_t t = 0; t < nt; t++) {
            const float *a = rows_ref + (size_t)t * (size_t)vocab,
                        *b = rows + (size_t)t * (size_t)vocab;
            double emax = 0, top = -INFINITY, second = -INFINITY;
            for (int64_t i = 0; i < vocab; i++) {
                double e = fabs((double)a[i] - b[i]);
                emax = e > emax ? e : emax;
                if (a[i] > top) {
                    second = top;
                    top = a[i];
                } else if (a[i] > second) {
                    second = a[i];
                }
            }
            esum += emax;
            if (vocab > 1 && top - second < r->margin_min) r->margin_min = top - second;
            log_softmax(a, vocab, lp);
            log_softmax(b, vocab, lq);
            double kl = 0;
            for (int64_t i = 0; i < vocab; i++)
                kl += exp(lp[i]) * (lp[i] - lq[i]);
            if (kl < 0) kl = 0; /* rounding */
            sum += kl;
            if (kl > r->kl_max) r->kl_max = kl;
            agree += argmax(a, vocab) == argmax(b, vocab);
        }
        r->positions = nt;
        r->kl_mean = sum / nt;
        r->top1_agree = (double)agree / nt;
        r->logit_err = esum / nt;
        if (!isfinite(r->margin_min)) r->margin_min = 0;
        eng_runtime_close(rt);
        rt = NULL;
    }
done:
    eng_runtime_close(rt);
    free(ref.ids);
    free(got.ids);
    free(rows_ref);
    free(rows);
    free(lp);
    free(lq);
    free(teacher);
    return rc;
}
