/*
 * eng_mtp.c — the MTP head as a drafter (eng_mtp.h; docs/speculative.md).
 * Row states: NONE (seq NULL) -> FED (eng_mtp_feed: positions [start, next)
 * in the head's K/V, d1/h describe next) -> drafting passes append and run
 * draft positions, truncated back to FED before eng_mtp_draft returns.
 * Invariant: between calls a row's seq holds exactly next - start tokens,
 * all cached (verified positions only).
 */
#include "engine/eng_mtp.h"
#include "util/kiln_log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct eng_mtp {
    mdl_model *m;   /* OWNED: the head (mdl_load_mtp) */
    kv_pool *kv;    /* OWNED: its K/V */
    mdl_ctx *cx;    /* OWNED: on the target's threads */
    kv_format fmt;
    int32_t max_seqs, max_tokens;
    int64_t H, V;
    mdl_seq *seqs;  /* OWNED [max_seqs] */
    int32_t *job;   /* OWNED [max_seqs]: the job / row of each mdl_seq */
    float *tap;     /* OWNED [max_tokens, H]: the head's output hidden states */
    float *logits;  /* OWNED [max_seqs, V] */
    eng_mtp_info info;
};

kiln_code eng_mtp_open(const char *dir, eng_runtime *target, eng_mtp **out, kiln_err *err)
{
    *out = NULL;
    eng_mtp *m = calloc(1, sizeof *m);
    if (!m) return kiln_fail(err, KILN_E_NOMEM, "mtp: out of memory");
    kiln_code rc = mdl_load_mtp(dir, &m->m, err);
    kv_layout l;
    if (!rc) rc = mdl_kv_layout(mdl_get_plan(m->m), 0, &l, err);
    if (!rc) rc = kv_format_init_dims(&m->fmt, KV_QUANT_OFF, 0, 0, l.n_layers, l.head_dim, err);
    if (!rc) {
        kv_pool_config kc = {.n_blocks = target->o.n_blocks,
                             .block_tokens = target->o.block_tokens,
                             .fmt = &m->fmt,
                             .max_chunk = target->o.max_step_tokens,
                             .layout = &l};
        rc = kv_pool_create(&kc, &m->kv, err);
    }
    m->max_seqs = target->o.max_seqs;
    m->max_tokens = target->o.max_step_tokens;
    if (!rc)
        rc = mdl_ctx_create(m->m, target->pool, m->max_tokens, m->max_seqs, target->o.ctx, &m->cx,
                            err);
    if (!rc) {
        m->H = mdl_get_plan(m->m)->hidden;
        m->V = mdl_vocab(m->m);
        m->seqs = calloc((size_t)m->max_seqs, sizeof *m->seqs);
        m->job = calloc((size_t)m->max_seqs, sizeof *m->job);
        m->tap = malloc(sizeof(float) * (size_t)m->max_tokens * (size_t)m->H);
        m->logits = malloc(sizeof(float) * (size_t)m->max_seqs * (size_t)m->V);
        if (!m->seqs || !m->job || !m->tap || !m->logits)
            rc = kiln_fail(err, KILN_E_NOMEM, "mtp: out of memory");
    }
    if (rc) {
        eng_mtp_close(m);
        return rc;
    }
    mdl_ctx_set_hidden_out(m->cx, m->tap, m->max_tokens);
    m->info.weights_bytes = mdl_mtp_own_bytes(m->m);
    m->info.kv_bytes = kv_pool_get_stats(m->kv).bytes;
    KLOG_INFO("spec", "mtp head of %s: kv_blocks=%d kv_bytes=%llu", dir, (int)target->o.n_blocks,
              (unsigned long long)m->info.kv_bytes);
    *out = m;
    return KILN_OK;
}

void eng_mtp_close(eng_mtp *m)
{
    if (!m) return;
    mdl_ctx_free(m->cx);
    kv_pool_destroy(m->kv);
    mdl_free(m->m);
    free(m->seqs);
    free(m->job);
    free(m->tap);
    free(m->logits);
    free(m);
}

void eng_mtp_row_free(eng_mtp *m, eng_mtp_row *row)
{
    if (row->seq) eng_seq_free(row->seq, m->kv);
    free(row->h);
    memset(row, 0, sizeof *row);
    row->d1 = -1;
}

static int32_t argmax(const float *r, int64_t n)
{
    int32_t best = -1;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(r[i]) && (best < 0 || r[i] > r[best])) best = (int32_t)i;
    return best;
}

/* Runs the n_seq prepared sequences (one logit row each); each one's last
 * tapped row goes to its row's h. */
static kiln_code run(eng_mtp *m, int32_t n_seq, kiln_err *err)
{
    m->info.forwards++;
    return mdl_forward(m->cx, m->kv, m->seqs, n_seq, m->logits, err);
}

kiln_code eng_mtp_feed(eng_mtp *m, eng_mtp_feed_job *jobs, int32_t n, kiln_err *err)
{
    int32_t ns = 0;
    for (int32_t i = 0; i < n && ns < m->max_seqs; i++) {
        eng_mtp_feed_job *j = &jobs[i];
        eng_mtp_row *r = j->row;
        if (j->n < 1 || j->n_toks <= j->p0 + j->n) continue;
        if (r->seq && r->next != j->p0) { /* a gap: no hidden state for it, start over */
            eng_seq_free(r->seq, m->kv);
            r->seq = NULL;
            m->info.restarts++;
        }
        r->d1 = -1;
        kiln_code rc;
        if (!r->seq) {
            rc = eng_seq_create(j->toks + j->p0 + 1, j->n, &r->seq, err);
            r->start = j->p0;
        } else {
            rc = KILN_OK;
            for (int32_t t = 0; t < j->n && !rc; t++)
                rc = eng_seq_append(r->seq, j->toks[j->p0 + 1 + t], err);
        }
        if (!rc && !r->h && !(r->h = malloc(sizeof(float) * (size_t)m->H)))
            rc = kiln_fail(err, KILN_E_NOMEM, "mtp: out of memory");
        int32_t pos0 = j->p0 - r->start;
        if (!rc) rc = eng_seq_reserve(r->seq, m->kv, pos0 + j->n, err);
        if (rc) { /* no room (or memory): this row drafts nothing until it starts over */
            if (r->seq) eng_seq_free(r->seq, m->kv);
            r->seq = NULL;
            if (rc != KILN_E_BUDGET) return rc;
            continue;
        }
        m->seqs[ns] = (mdl_seq){.tokens = r->seq->tokens + pos0, .n_tokens = j->n, .pos0 = pos0,
                                .n_logits = 1, .state = -1, .hidden_in = j->hidden};
        for (int g = 0; g < r->seq->n_groups; g++)
            m->seqs[ns].blocks[g] = r->seq->blocks[g];
        m->job[ns++] = i;
    }
    if (!ns) return KILN_OK;
    kiln_code rc = run(m, ns, err);
    int32_t row = 0;
    for (int32_t s = 0; s < ns; s++) {
        eng_mtp_feed_job *j = &jobs[m->job[s]];
        eng_mtp_row *r = j->row;
        row += j->n;
        if (rc) { /* nothing trustworthy in its K/V: start over */
            eng_seq_free(r->seq, m->kv);
            r->seq = NULL;
            continue;
        }
        r->seq->n_cached += j->n;
        r->next = j->p0 + j->n;
        memcpy(r->h, m->tap + (size_t)(row - 1) * (size_t)m->H, sizeof(float) * (size_t)m->H);
        r->d1 = argmax(m->logits + (size_t)s * (size_t)m->V, m->V);
        m->info.fed += (uint64_t)j->n;
    }
    return rc;
}

kiln_code eng_mtp_draft(eng_mtp *m, eng_mtp_row **rows, const int32_t *at, const int32_t *k,
                        int32_t *out, int32_t *n_out, int32_t n, kiln_err *err)
{
    int32_t kmax = 0;
    for (int32_t i = 0; i < n; i++) {
        eng_mtp_row *r = rows[i];
        n_out[i] = 0;
        if (!r->seq || r->d1 < 0 || r->next != at[i] || k[i] < 1) continue;
        out[(size_t)i * ENG_SEQ_MAX_DRAFT] = r->d1;
        n_out[i] = 1;
        if (k[i] > kmax) kmax = k[i];
    }
    kiln_code rc = KILN_OK;
    for (int32_t j = 1; j < kmax && !rc; j++) {
        int32_t ns = 0;
        for (int32_t i = 0; i < n && ns < m->max_seqs; i++) {
            eng_mtp_row *r = rows[i];
            if (n_out[i] != j || k[i] <= j) continue;
            int32_t pos = r->next - r->start + j - 1; /* the head position of draft j - 1 */
            if (eng_seq_append(r->seq, out[(size_t)i * ENG_SEQ_MAX_DRAFT + j - 1], NULL) ||
                eng_seq_reserve(r->seq, m->kv, pos + 1, NULL)) {
                r->seq->n_tokens = pos; /* no room: this row's draft ends here */
                continue;
            }
            m->seqs[ns] = (mdl_seq){.tokens = r->seq->tokens + pos, .n_tokens = 1, .pos0 = pos,
                                    .n_logits = 1, .state = -1, .hidden_in = r->h};
            for (int g = 0; g < r->seq->n_groups; g++)
                m->seqs[ns].blocks[g] = r->seq->blocks[g];
            m->job[ns++] = i;
        }
        if (!ns) break;
        rc = run(m, ns, err);
        for (int32_t s = 0; s < ns && !rc; s++) {
            int32_t i = m->job[s];
            eng_mtp_row *r = rows[i];
            r->seq->n_cached++;
            memcpy(r->h, m->tap + (size_t)s * (size_t)m->H, sizeof(float) * (size_t)m->H);
            out[(size_t)i * ENG_SEQ_MAX_DRAFT + j] = argmax(m->logits + (size_t)s * (size_t)m->V, m->V);
            n_out[i]++;
        }
    }
    for (int32_t i = 0; i < n; i++) { /* back to the verified positions (invariant) */
        eng_mtp_row *r = rows[i];
        if (!n_out[i]) continue;
        m->info.drafted += (uint64_t)n_out[i];
        r->d1 = -1; /* h was moved on by the passes: the next feed sets both */
        eng_seq_truncate(r->seq, m->kv, r->next - r->start);
    }
    if (rc)
        for (int32_t i = 0; i < n; i++)
            n_out[i] = 0;
    return rc;
}

kiln_code eng_mtp_cost_of(const char *dir, const eng_runtime_opts *t, eng_draft_cost *out,
                          kiln_err *err)
{
    memset(out, 0, sizeof *out);
    mdl_model *m = NULL;
    kv_pool *kv = NULL;
    kv_format fmt;
    kv_layout l;
    kiln_code rc = mdl_load_mtp(dir, &m, err);
    if (!rc) rc = mdl_kv_layout(mdl_get_plan(m), 0, &l, err);
    if (!rc) rc = kv_format_init_dims(&fmt, KV_QUANT_OFF, 0, 0, l.n_layers, l.head_dim, err);
    if (!rc) { /* a one-block pool: the bytes of a block as eng_mtp_open's pool has them */
        kv_pool_config kc = {.n_blocks = 1, .block_tokens = t->block_tokens, .fmt = &fmt,
                             .max_chunk = t->max_step_tokens, .layout = &l};
        rc = kv_pool_create(&kc, &kv, err);
    }
    if (!rc) {
        uint64_t H = (uint64_t)mdl_get_plan(m)->hidden, V = (uint64_t)mdl_vocab(m);
        uint64_t T = (uint64_t)t->max_step_tokens, S = (uint64_t)t->max_seqs;
        out->weights_bytes = mdl_mtp_own_bytes(m);
        out->fixed_bytes = out->weights_bytes +
                           mdl_scratch_bytes(mdl_get_plan(m), t->n_threads, t->max_step_tokens,
                                             t->max_seqs, t->ctx, NULL) +
                           2 * T * H * sizeof(float) + S * V * sizeof(float);
        out->block_bytes = kv_pool_get_stats(kv).bytes;
    }
    kv_pool_destroy(kv);
    mdl_free(m);
    return rc;
}

eng_mtp_info eng_mtp_get_info(const eng_mtp *m)
{
    eng_mtp_info in = m->info;
    in.kv_bytes = kv_pool_get_stats(m->kv).bytes;
    return in;
}
