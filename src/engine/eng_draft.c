/*
 * eng_draft.c — the draft model: vocabulary check, its runtime beside the
 * target's, and batched greedy drafting over many rows (eng_draft.h).
 *
 * A row's draft sequence, and the function that moves it:
 *   (none)   -> SYNCED    eng_draft_run()       created from the target's tokens, prefix attached
 *   SYNCED   -> DRAFTED   eng_draft_run()       catch-up + k-1 draft positions run; the k
 *                                               drafts are its last tokens (the last one pending)
 *   SYNCED   -> SYNCED    eng_draft_run()       catch-up longer than the step's chunk: one
 *                                               chunk runs, no draft this step (deferred)
 *   DRAFTED  -> SYNCED    eng_draft_rollback()  rejected drafts truncated (blocks back to the pool)
 *            or           eng_draft_run()       the common prefix with the target's tokens is
 *                                               kept, the rest truncated, the new tokens appended
 *   any      -> (no KV)   eng_draft_seq_drop()  preemption; tokens stay, recomputed later
 * Invariants:
 *   (1) a draft sequence's tokens [0, n_cached) are a prefix of what the
 *       draft model has seen: its K/V is the draft model's for those tokens,
 *       so its published blocks are valid for any later sequence of the pool
 *   (2) no draft block ever enters the target's pool (the drafter owns its pool)
 *   (3) before a forward, every row in it has at least one pending token and
 *       its blocks reserved (a row that cannot reserve leaves the batch)
 */
#include "engine/eng_draft.h"
#include "engine/eng_fit.h"
#include "engine/eng_spec.h"
#include "util/kiln_log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct eng_draft {
    eng_runtime *rt; /* OWNED: weights, KV pool, step context; compute threads borrowed */
    char dir[512];
    uint64_t forwards, catchup, drafted, dropped, deferred;
    eng_step_item *items; /* OWNED [max_seqs] */
    int32_t *job_of;      /* OWNED [max_seqs]: the job of each item */
};

kiln_code eng_draft_check_vocab(const tok_tokenizer *target, int64_t target_vocab,
                                const tok_tokenizer *draft, int64_t draft_vocab, kiln_err *err)
{
    if (target_vocab != draft_vocab)
        return kiln_fail(err, KILN_E_INVALID,
                         "draft model: its vocabulary has %lld ids, the target's %lld: a draft "
                         "model must share the target's tokenizer",
                         (long long)draft_vocab, (long long)target_vocab);
    int32_t nt = tok_vocab_size(target), nd = tok_vocab_size(draft);
    if (nt != nd)
        return kiln_fail(err, KILN_E_INVALID,
                         "draft model: its tokenizer has %d ids, the target's %d: a draft model "
                         "must share the target's tokenizer",
                         (int)nd, (int)nt);
    for (int32_t id = 0; id < nt; id++) {
        char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        kiln_code ra = tok_token_bytes(target, id, &a, &la, NULL);
        kiln_code rb = tok_token_bytes(draft, id, &b, &lb, NULL);
        int same = ra == rb && (ra != KILN_OK || (la == lb && memcmp(a, b, la) == 0)) &&
                   tok_is_special(target, id) == tok_is_special(draft, id);
        free(a);
        free(b);
        if (ra == KILN_E_NOMEM || rb == KILN_E_NOMEM)
            return kiln_fail(err, KILN_E_NOMEM, "draft model: out of memory checking the vocabulary");
        if (!same) {
            size_t pa = 0, pb = 0;
            const char *sa = tok_token_to_piece(target, id, &pa);
            const char *sb = tok_token_to_piece(draft, id, &pb);
            return kiln_fail(err, KILN_E_INVALID,
                             "draft model: token id %d differs from the target's ('%.*s' vs "
                             "'%.*s'): a draft model must share the target's tokenizer",
                             (int)id, (int)(sb ? (pb > 40 ? 40 : pb) : 6), sb ? sb : "(none)",
                             (int)(sa ? (pa > 40 ? 40 : pa) : 6), sa ? sa : "(none)");
        }
    }
    return KILN_OK;
}

eng_runtime_opts eng_draft_opts(const eng_runtime_opts *t, int32_t n_blocks)
{
    eng_runtime_opts o = eng_runtime_opts_default();
    o.n_threads = t->n_threads;
    o.ctx = t->ctx;
    o.block_tokens = t->block_tokens;
    o.max_seqs = t->max_seqs;
    o.max_step_tokens = t->max_step_tokens;
    o.isa = t->isa;
    o.matmul = t->matmul;
    /* its own KV format: the target's mode where it is a plain one (a
     * kv_config.json describes the target's layers, not the drafter's) */
    o.kv_quant = t->kv_quant == KV_QUANT_CONFIG ? KV_QUANT_OFF : t->kv_quant;
    o.kv_group = t->kv_group;
    o.n_blocks = n_blocks > 0 ? n_blocks : t->n_blocks;
    return o;
}

kiln_code eng_draft_cost_of(const char *dir, const eng_runtime_opts *target, eng_draft_cost *out,
                            kiln_err *err)
{
    memset(out, 0, sizeof *out);
    eng_fit f1, f2;
    eng_runtime_opts o = eng_draft_opts(target, 1);
    kiln_code rc = eng_fit_model(dir, &o, &f1, err);
    if (rc) return rc;
    o.n_blocks = 1025; /* the pool's bytes per block, metadata included */
    if ((rc = eng_fit_model(dir, &o, &f2, err))) return rc;
    out->weights_bytes = f1.weights_bytes;
    out->fixed_bytes = f1.total_bytes - f1.kv_pool_bytes;
    out->block_bytes = (f2.total_bytes - f1.total_bytes + 1023) / 1024;
    return KILN_OK;
}

kiln_code eng_draft_open(const char *dir, eng_runtime *target, const tok_tokenizer *target_tok,
                         int32_t n_blocks, eng_draft **out, kiln_err *err)
{
    *out = NULL;
    eng_draft *d = calloc(1, sizeof *d);
    if (!d) return kiln_fail(err, KILN_E_NOMEM, "draft model: out of memory");
    snprintf(d->dir, sizeof d->dir, "%s", dir);
    eng_runtime_opts o = eng_draft_opts(&target->o, n_blocks);
    o.pool = target->pool;
    tok_tokenizer *tok = NULL;
    kiln_code rc = eng_runtime_open(dir, &o, &d->rt, err);
    if (!rc) rc = tok_load(dir, &tok, err);
    if (!rc)
        rc = eng_draft_check_vocab(target_tok, mdl_vocab(target->model), tok,
                                   mdl_vocab(d->rt->model), err);
    tok_destroy(tok);
    if (!rc) {
        d->items = calloc((size_t)d->rt->o.max_seqs, sizeof *d->items);
        d->job_of = calloc((size_t)d->rt->o.max_seqs, sizeof *d->job_of);
        if (!d->items || !d->job_of) rc = kiln_fail(err, KILN_E_NOMEM, "draft model: out of memory");
    }
    if (rc) {
        eng_draft_close(d);
        return rc;
    }
    KLOG_INFO("spec", "draft model=%s arch=%s layers=%lld hidden=%lld kv_blocks=%d kv=%s", dir,
              mdl_config(d->rt->model)->architecture, (long long)mdl_config(d->rt->model)->n_layers,
              (long long)mdl_config(d->rt->model)->hidden, (int)d->rt->o.n_blocks, d->rt->kv_desc);
    *out = d;
    return KILN_OK;
}

void eng_draft_close(eng_draft *d)
{
    if (!d) return;
    eng_runtime_close(d->rt);
    free(d->items);
    free(d->job_of);
    free(d);
}

const eng_runtime *eng_draft_runtime(const eng_draft *d)
{
    return d->rt;
}

void eng_draft_seq_free(eng_draft *d, eng_seq *s)
{
    if (s) eng_seq_free(s, d->rt->kv);
}

void eng_draft_seq_drop(eng_draft *d, eng_seq *s)
{
    if (s) eng_seq_drop_kv(s, d->rt->kv);
}

void eng_draft_rollback(eng_draft *d, eng_seq *s, int32_t n)
{
    if (s) eng_seq_truncate(s, d->rt->kv, n);
}

eng_draft_info eng_draft_get_info(const eng_draft *d)
{
    eng_draft_info in;
    memset(&in, 0, sizeof in);
    const wt_config *c = mdl_config(d->rt->model);
    snprintf(in.dir, sizeof in.dir, "%s", d->dir);
    snprintf(in.arch, sizeof in.arch, "%s", c->architecture);
    in.layers = c->n_layers;
    in.hidden = c->hidden;
    in.weights_bytes = mdl_get_info(d->rt->model).weights_bytes;
    in.kv = kv_pool_get_stats(d->rt->kv);
    in.kv_bytes = in.kv.bytes;
    in.forwards = d->forwards;
    in.catchup_tokens = d->catchup;
    in.drafted = d->drafted;
    in.dropped_rows = d->dropped;
    in.deferred_rows = d->deferred;
    return in;
}

/* The target's tokens become the draft sequence's: the common prefix stays,
 * the rest (rejected drafts) is truncated, the new tokens are appended. At
 * least the last token stays pending, so the next forward yields its logits. */
static kiln_code sync_row(eng_draft *d, eng_draft_job *j, kiln_err *err)
{
    eng_seq *s = *j->seq;
    if (!s) {
        kiln_code rc = eng_seq_create(j->toks, j->n_toks, j->seq, err);
        if (rc) return rc;
        (void)eng_seq_attach_prefix(*j->seq, d->rt->kv, d->rt->ns); /* leaves one pending */
        return KILN_OK;
    }
    int32_t c = 0, lim = s->n_tokens < j->n_toks ? s->n_tokens : j->n_toks;
    while (c < lim && s->tokens[c] == j->toks[c]) c++;
    if (c > j->n_toks - 1) c = j->n_toks - 1;
    eng_seq_truncate(s, d->rt->kv, c);
    for (int32_t i = c; i < j->n_toks; i++) {
        kiln_code rc = eng_seq_append(s, j->toks[i], err);
        if (rc) return rc;
    }
    return KILN_OK; /* c <= n_toks - 1: the last token is pending */
}

/* The draft model's choice: the argmax (lowest id on ties; NaN never wins). */
static int32_t argmax(const float *row, int64_t n)
{
    int32_t best = -1;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(row[i]) && (best < 0 || row[i] > row[best])) best = (int32_t)i;
    return best;
}

kiln_code eng_draft_run(eng_draft *d, eng_draft_job *jobs, int32_t n, kiln_err *err)
{
    eng_runtime *rt = d->rt;
    int64_t vocab = mdl_vocab(rt->model);
    if (n > rt->o.max_seqs)
        return kiln_fail(err, KILN_E_INVALID, "draft: %d rows for a batch of %d", (int)n,
                         (int)rt->o.max_seqs);
    enum { ACTIVE = 0, DONE = 1 };
    int state[256];
    if (n > 256) return kiln_fail(err, KILN_E_INVALID, "draft: too many rows");
    for (int32_t i = 0; i < n; i++) {
        eng_draft_job *j = &jobs[i];
        j->n_out = 0;
        state[i] = DONE;
        if (j->k < 1 || j->n_toks < 1) continue;
        if (j->k > ENG_SPEC_MAX_DRAFT) j->k = ENG_SPEC_MAX_DRAFT;
        /* the drafts must fit the drafter's context too (it is the target's) */
        if (j->n_toks + j->k > rt->o.ctx) j->k = rt->o.ctx - j->n_toks;
        if (j->k < 1) continue;
        kiln_code rc = sync_row(d, j, err);
        if (rc) return rc;
        state[i] = ACTIVE;
    }
    /* Each pass: every active row with pending tokens runs a chunk (catch-up)
     * or its next draft position, all rows in one forward. A row whose last
     * pending token ran yields its next draft token. */
    for (;;) {
        int32_t m = 0, budget = rt->o.max_step_tokens, rows = 0;
        for (int32_t i = 0; i < n; i++) {
            eng_draft_job *j = &jobs[i];
            if (state[i] != ACTIVE) continue;
            eng_seq *s = *j->seq;
            if (eng_seq_pending(s) < 1) { /* the last draft becomes the next input */
                kiln_code rc = eng_seq_append(s, j->out[j->n_out - 1], err);
                if (rc) return rc;
            }
            int32_t pend = eng_seq_pending(s);
            int32_t take = pend < budget ? pend : budget;
            if (take < 1 || rows >= rt->logit_rows) continue; /* next pass */
            kiln_err rerr;
            if (eng_seq_reserve(s, rt->kv, s->n_cached + take, &rerr) != KILN_OK) {
                /* the draft pool is full: this row drafts nothing this step */
                eng_seq_drop_kv(s, rt->kv);
                j->n_out = 0;
                state[i] = DONE;
                d->dropped++;
                continue;
            }
            d->items[m] = (eng_step_item){.seq = s, .max_tokens = take};
            d->job_of[m++] = i;
            budget -= take;
            rows++;
            if (j->n_out == 0) d->catchup += (uint64_t)take;
        }
        if (m == 0) break;
        kiln_code rc = eng_step_run(rt->cx, rt->kv, d->items, m, rt->ns, rt->logits,
                                    rt->logit_rows, err);
        if (rc) return rc;
        d->forwards++;
        int32_t row = 0;
        for (int32_t k = 0; k < m; k++) {
            if (!d->items[k].n_logits) { /* a catch-up chunk short of the end: the row goes
                                            on next step, so a long prompt never stalls the
                                            step for its whole draft prefill */
                state[d->job_of[k]] = DONE;
                d->deferred++;
                continue;
            }
            eng_draft_job *j = &jobs[d->job_of[k]];
            const float *lg = rt->logits + (size_t)row * (size_t)vocab;
            int32_t t = j->pick ? j->pick(j->pick_user, rt->logits + (size_t)row * (size_t)vocab,
                                          vocab, j->out, j->n_out)
                                : argmax(lg, vocab);
            row += d->items[k].n_logits;
            if (t < 0) { /* no finite logit, or nothing the row allows: no more drafts */
                state[d->job_of[k]] = DONE;
                continue;
            }
            j->out[j->n_out++] = t;
            d->drafted++;
            if (j->n_out >= j->k) state[d->job_of[k]] = DONE;
        }
    }
    return KILN_OK;
}
