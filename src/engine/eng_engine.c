/*
 * eng_engine.c — the engine thread: admission, continuous batching, sampling,
 * detokenization with stop strings, events to client threads.
 *
 * A request's life (the function that moves it):
 *   WAITING  -> RUNNING   engine_admit()     a batch slot and KV room for its prompt
 *   RUNNING  -> WAITING   engine_preempt()   the KV pool ran dry: its blocks are
 *                                            released (published ones stay cached)
 *   RUNNING  -> FINISHED  req_finish()       EOS, stop string, length, cancel, error;
 *                                            an embedding request when its prompt is done
 * Each step (engine_step): every running sequence with one pending token
 * decodes; sequences still prefilling get chunks of at most prefill_chunk
 * tokens while the step's token budget lasts. One eng_step_run for all.
 *
 * Invariants:
 *   (1) a handle is referenced by the client until eng_handle_release and by the
 *       engine from eng_submit until its DONE/ERROR event is queued
 *   (2) text emitted never contains a prefix of a stop string that could still
 *       complete: hold-back keeps the longest suffix that is a stop prefix
 *   (3) only the engine thread touches seq, rng, stream, and the running list
 *   (4) an embedding request (p.pooling) never samples: its hidden rows come from the
 *       step's tap (mdl_ctx_set_hidden_out, on only for steps that carry one) and its
 *       pool restarts whenever its KV is dropped (preemption recomputes every row)
 * Threads: client threads call eng_submit / eng_handle_*; e->mu guards the wait
 * queue and stats, h->mu guards a handle's event queue.
 */
#include "engine/eng_engine.h"
#include "engine/eng_admit.h"
#include "engine/eng_ckpt.h"
#include "kernels/kn_cpu.h"
#include "util/kiln_assert.h"
#include "util/kiln_log.h"
#include "util/plat.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct eng_handle {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;              /* under mu: client + engine */
    eng_event *evq;        /* OWNED ring of events, under mu */
    size_t ev_head, ev_count, ev_cap;
    int ended;             /* DONE/ERROR queued */
    int drained;           /* DONE/ERROR handed to the client */
    _Atomic int cancel;
    /* the request, copied at submit */
    eng_params p;
    int32_t *prompt;       /* OWNED */
    eng_bias *bias;        /* OWNED */
    char *stops[ENG_MAX_STOP]; /* OWNED */
    int32_t *stop_ids;     /* OWNED */
    int32_t *gtrig;        /* OWNED: grammar trigger ids */
    int32_t *ends;         /* OWNED: ids that end it (EOS unless ignore_eos, stop ids) */
    int32_t n_ends;
    eng_gstate *gs;        /* OWNED (engine thread): the grammar's state; NULL = none */
    /* engine-thread state */
    eng_seq *seq;          /* OWNED while running */
    tok_stream *ts;        /* OWNED while running */
    eng_rng rng;
    char *hold;            /* OWNED: decoded text not yet emitted (stop-string hold-back) */
    size_t hold_len, hold_cap;
    int32_t n_generated, cached_tokens;
    int32_t n_steps;       /* steps it took part in (engine thread) */
    int admitted_once;
    uint64_t kv_proj;      /* projected KV bytes charged while running (--kv-budget) */
    uint64_t ckpt_id;      /* generation checkpoint identity; 0 = checkpoints off */
    int32_t ckpt_blocks;   /* full blocks already handed to the tier */
    int32_t resumed;       /* tokens replayed from a checkpoint */
    eng_handle *next;      /* wait queue link, under e->mu */
    double t_submit;
    /* speculative decoding (engine thread): this request's draft cap (0 = not
     * drafting), its adaptive state, what it drafted */
    int32_t spec_max;
    eng_spec_method spec_method; /* NGRAM or DRAFT while spec_max > 0 */
    eng_spec_row spec;
    int32_t spec_accepted, spec_rejected;
    eng_seq *dseq;         /* OWNED while running: the draft model's sequence (eng_draft.h) */
    eng_mtp_row mtp;       /* OWNED: the MTP head's state of this row (eng_mtp.h) */
    double *pool;          /* OWNED [hidden]: embedding accumulator (p.pooling), engine thread */
};

/* draft_pick's context: a constrained row and its history */
typedef struct eng_draft_pick {
    eng_handle *h;
    const int32_t *hist; /* BORROWED: the row's tokens */
    int32_t n_hist;
    void *scratch;       /* BORROWED: the sampler's scratch */
} eng_draft_pick;

struct eng_engine {
    eng_runtime *rt;           /* BORROWED */
    const tok_tokenizer *tok;  /* BORROWED */
    eng_engine_opts o;
    uint64_t ns;               /* prefix-cache namespace; 0 = cache off */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stopping;              /* under mu */
    eng_handle *wait_head, *wait_tail; /* under mu */
    int32_t n_waiting;         /* under mu */
    eng_handle **running;      /* OWNED array [max_seqs], engine thread */
    int32_t n_running;
    eng_step_item *items;      /* OWNED [max_seqs] */
    eng_handle **owners;       /* OWNED [max_seqs]: the handle of each item */
    eng_stats stats;           /* under mu */
    uint64_t kv_running;       /* engine thread: projected KV of the running list */
    eng_kv_cost kv_cost;       /* what a sequence's K/V costs per group (--kv-budget) */
    int head_waiting;          /* engine thread: the head already counted as a kv-budget wait */
    int32_t leases;            /* under mu: execution leases held; no step starts while > 0 */
    int in_step;               /* under mu: the engine thread is between admission and step end */
    eng_ssd *ssdw;             /* OWNED: SSD write-behind; NULL without a tier */
    int shutting_down;         /* engine thread: the stop loop cancels what is left */
    double s_per_token;        /* engine thread: EWMA of step seconds per token (steps of
                                  >= ENG_MIN_PREFILL_SLICE tokens); 0 = not measured yet */
    eng_gmask *gm;             /* OWNED: grammar masks (vocabulary, worker) */
    eng_gstate **gjobs;        /* OWNED [max_seqs]: states whose masks this step needs */
    float *hidden;             /* OWNED [hidden_rows, hidden]: the hidden-state tap for steps with
                                  embedding requests; made at the first one, kept after */
    int32_t hidden_rows;
    eng_spec_cost spec_cost;   /* engine thread: measured step seconds by token count */
    double draft_s_pos;        /* engine thread: EWMA seconds of one batched draft-model pass
                                  (a draft position over the step's drafting rows); 0 = unknown */
    eng_spec_stats spec_acc;   /* engine thread: counters of the step in progress */
    eng_spec_stats spec_acc_m[ENG_SPEC_METHODS]; /* the same by the rows' method */
    eng_draft_job *djobs;      /* OWNED [max_seqs] with a draft model: this step's draft jobs */
    int32_t *dbuf;             /* OWNED [max_seqs x ENG_SPEC_MAX_DRAFT]: their tokens */
    int32_t *djob_item;        /* OWNED [max_seqs]: the step item of each job */
    struct eng_draft_pick *dpick; /* OWNED [max_seqs]: draft_pick's context per job */
    eng_mtp_feed_job *mjobs;   /* OWNED [max_seqs] with an MTP head: this step's feeds */
    eng_mtp_row **mrows;       /* OWNED [max_seqs]: this step's MTP drafting rows ... */
    int32_t *mat, *mk, *mout, *mn, *mitem; /* OWNED: ... their verified length, length asked,
                                  drafts [max_seqs x ENG_SEQ_MAX_DRAFT], count, step item */
    double mtp_s_pos;          /* engine thread: EWMA seconds of one batched head pass */
};

/* ---------------------------------------------------------------- handles and events */

eng_params eng_params_default(void)
{
    eng_params p;
    memset(&p, 0, sizeof p);
    p.max_tokens = 256;
    p.sp = eng_sampling_default();
    p.skip_special = true;
    return p;
}

eng_engine_opts eng_engine_opts_default(void)
{
    eng_engine_opts o = {.max_queue = 64,
                         .max_step_tokens = 0,
                         .prefill_chunk = 256,
                         .max_stall_s = 1.0,
                         .prefix_cache = true,
                         .ssd_writebehind = true,
                         .ckpt_max_age_s = 86400,
                         .ckpt_cancel_keep_s = 300,
                         .spec = eng_spec_opts_default()};
    return o;
}

const char *eng_finish_name(eng_finish f)
{
    switch (f) {
    case ENG_FINISH_STOP: return "stop";
    case ENG_FINISH_LENGTH: return "length";
    case ENG_FINISH_CANCELLED: return "cancelled";
    case ENG_FINISH_ERROR: return "error";
    default: return "none";
    }
}

void eng_event_clear(eng_event *ev)
{
    if (!ev) return;
    free(ev->text);
    ev->text = NULL;
    ev->text_len = 0;
    free(ev->embedding);
    ev->embedding = NULL;
    ev->n_embedding = 0;
}

static void handle_free(eng_handle *h)
{
    for (size_t i = 0; i < h->ev_count; i++) eng_event_clear(&h->evq[(h->ev_head + i) % h->ev_cap]);
    free(h->evq);
    free(h->prompt);
    free(h->bias);
    for (int i = 0; i < ENG_MAX_STOP; i++) free(h->stops[i]);
    free(h->stop_ids);
    free(h->gtrig);
    free(h->ends);
    eng_gstate_free(h->gs);
    gr_grammar_release(h->p.grammar);
    mdl_lora_set_release(&h->p.lora);
    free(h->hold);
    free(h->pool);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h);
}

static void handle_unref(eng_handle *h)
{
    pthread_mutex_lock(&h->mu);
    int left = --h->refs;
    pthread_mutex_unlock(&h->mu);
    if (left == 0) handle_free(h);
}

/* Queues an event (takes ownership of ev->text). Never fails: when memory for
 * the ring runs out the event's text is dropped and an ERROR replaces a DONE. */
/* Queues ev for the client. Invariant: after every push a slot is free, so
 * the one terminal event (DONE or ERROR, which allocates nothing more) always
 * fits; a token event that would take the last slot when the queue cannot
 * grow is refused (-1, ev->text freed) and the caller ends the request with
 * an error: the client sees an error, never a gap in the text. */
static int handle_push(eng_handle *h, eng_event *ev)
{
    pthread_mutex_lock(&h->mu);
    KILN_ASSERT(h->ev_count < h->ev_cap); /* the invariant: eng_submit allocates the ring */
    if (ev->kind == ENG_EV_TOKEN && h->ev_count + 1 == h->ev_cap) {
        size_t nc = h->ev_cap * 2;
        eng_event *nq = malloc(nc * sizeof *nq);
        if (!nq) {
            pthread_mutex_unlock(&h->mu);
            free(ev->text);
            ev->text = NULL;
            return -1;
        }
        for (size_t i = 0; i < h->ev_count; i++) nq[i] = h->evq[(h->ev_head + i) % h->ev_cap];
        free(h->evq);
        h->evq = nq;
        h->ev_head = 0;
        h->ev_cap = nc;
    }
    h->evq[(h->ev_head + h->ev_count) % h->ev_cap] = *ev;
    h->ev_count++;
    if (ev->kind != ENG_EV_TOKEN) h->ended = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return 0;
}

int eng_handle_next(eng_handle *h, eng_event *ev, int timeout_ms)
{
    memset(ev, 0, sizeof *ev);
    struct timespec dl;
    if (timeout_ms >= 0) {
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += timeout_ms / 1000;
        dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&h->mu);
    while (h->ev_count == 0 && !h->drained) {
        if (timeout_ms < 0) pthread_cond_wait(&h->cv, &h->mu);
        else if (pthread_cond_timedwait(&h->cv, &h->mu, &dl) == ETIMEDOUT) {
            pthread_mutex_unlock(&h->mu);
            return 1;
        }
    }
    if (h->ev_count == 0) {
        pthread_mutex_unlock(&h->mu);
        return -1;
    }
    *ev = h->evq[h->ev_head];
    h->ev_head = (h->ev_head + 1) % h->ev_cap;
    h->ev_count--;
    if (ev->kind != ENG_EV_TOKEN) h->drained = 1;
    pthread_mutex_unlock(&h->mu);
    return 0;
}

void eng_handle_cancel(eng_handle *h)
{
    atomic_store(&h->cancel, 1);
}

void eng_handle_release(eng_handle *h)
{
    if (!h) return;
    atomic_store(&h->cancel, 1);
    handle_unref(h);
}

/* ---------------------------------------------------------------- submit */

static kiln_code copy_params(eng_handle *h, const eng_params *p, kiln_err *err)
{
    h->p = *p;
    h->p.grammar = NULL; /* set once retained, below */
    h->p.lora.n = 0;     /* likewise */
    h->prompt = malloc(sizeof(int32_t) * (size_t)p->n_prompt);
    if (!h->prompt) return kiln_fail(err, KILN_E_NOMEM, "request: out of memory");
    memcpy(h->prompt, p->prompt, sizeof(int32_t) * (size_t)p->n_prompt);
    h->p.prompt = h->prompt;
    if (p->sp.n_bias > 0) {
        h->bias = malloc(sizeof(eng_bias) * (size_t)p->sp.n_bias);
        if (!h->bias) return kiln_fail(err, KILN_E_NOMEM, "request: out of memory");
        memcpy(h->bias, p->sp.logit_bias, sizeof(eng_bias) * (size_t)p->sp.n_bias);
    }
    h->p.sp.logit_bias = h->bias;
    for (int i = 0; i < p->n_stop; i++) {
        h->stops[i] = strdup(p->stop[i]);
        if (!h->stops[i]) return kiln_fail(err, KILN_E_NOMEM, "request: out of memory");
        h->p.stop[i] = h->stops[i];
    }
    if (p->n_stop_ids > 0) {
        h->stop_ids = malloc(sizeof(int32_t) * (size_t)p->n_stop_ids);
        if (!h->stop_ids) return kiln_fail(err, KILN_E_NOMEM, "request: out of memory");
        memcpy(h->stop_ids, p->stop_ids, sizeof(int32_t) * (size_t)p->n_stop_ids);
    }
    h->p.stop_ids = h->stop_ids;
    if (p->n_grammar_triggers > 0) {
        h->gtrig = malloc(sizeof(int32_t) * (size_t)p->n_grammar_triggers);
        if (!h->gtrig) return kiln_fail(err, KILN_E_NOMEM, "request: out of memory");
        memcpy(h->gtrig, p->grammar_triggers, sizeof(int32_t) * (size_t)p->n_grammar_triggers);
    }
    h->p.grammar_triggers = h->gtrig;
    if (p->grammar) gr_grammar_retain(p->grammar); /* released in handle_free */
    h->p.grammar = p->grammar;
    /* the adapters too: a server may unload one while this request runs on it */
    mdl_lora_set_retain(&p->lora);
    h->p.lora = p->lora;
    return KILN_OK;
}

/* Positions a request can occupy: prompt + max_tokens, at most the context. */
static int64_t projected_tokens(const eng_engine *e, const eng_params *p)
{
    int64_t t = (int64_t)p->n_prompt + p->max_tokens;
    return t < e->rt->o.ctx ? t : e->rt->o.ctx;
}

/* Its K/V bytes, each group's window-capped (eng_kv_cost_seq). */
static uint64_t seq_projection(const eng_engine *e, const eng_params *p)
{
    return eng_kv_cost_seq(&e->kv_cost, projected_tokens(e, p));
}

static kiln_code validate(const eng_engine *e, const eng_params *p, kiln_err *err)
{
    int64_t vocab = mdl_vocab(e->rt->model);
    int32_t ctx = e->rt->o.ctx;
    if (p->n_prompt < 1) return kiln_fail(err, KILN_E_INVALID, "the prompt is empty");
    if (p->pooling < ENG_POOL_NONE || p->pooling > ENG_POOL_MEAN_SQRT_LEN)
        return kiln_fail(err, KILN_E_INVALID, "unknown pooling mode %d", (int)p->pooling);
    if (p->n_prompt >= ctx)
        return kiln_fail(err, KILN_E_INVALID,
                         "the prompt (%d tokens) leaves no room in the context (%d tokens)",
                         (int)p->n_prompt, (int)ctx);
    for (int32_t i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= vocab)
            return kiln_fail(err, KILN_E_INVALID, "prompt token %d is out of range (vocab %lld)",
                             (int)p->prompt[i], (long long)vocab);
    if (p->max_tokens < 1)
        return kiln_fail(err, KILN_E_INVALID, "max_tokens must be >= 1, got %d", (int)p->max_tokens);
    if (p->n_stop < 0 || p->n_stop > ENG_MAX_STOP)
        return kiln_fail(err, KILN_E_INVALID, "at most %d stop strings", ENG_MAX_STOP);
    if (p->lora.n < 0 || p->lora.n > MDL_LORA_MAX_STACK)
        return kiln_fail(err, KILN_E_INVALID, "at most %d adapters per request", MDL_LORA_MAX_STACK);
    for (int i = 0; i < p->lora.n; i++)
        if (!mdl_lora_for_model(p->lora.a[i], e->rt->model) || !isfinite(p->lora.scale[i]))
            return kiln_fail(err, KILN_E_INVALID, "adapter %d: not loaded for this model, or its "
                             "scale is not a finite number", i);
    for (int i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !p->stop[i][0])
            return kiln_fail(err, KILN_E_INVALID, "stop strings must not be empty");
    if (p->spec < ENG_SPEC_DEFAULT || p->spec > ENG_SPEC_MTP)
        return kiln_fail(err, KILN_E_INVALID, "unknown speculative method %d", (int)p->spec);
    if (p->spec == ENG_SPEC_MTP && !e->o.mtp)
        return kiln_fail(err, KILN_E_INVALID,
                         "speculative method \"mtp\" needs the model's MTP head (kiln serve "
                         "--spec mtp)");
    if (p->spec == ENG_SPEC_DRAFT && !e->o.draft)
        return kiln_fail(err, KILN_E_INVALID,
                         "speculative method \"draft\" needs a draft model (kiln serve "
                         "--draft-model DIR)");
    if (p->spec_max_draft < 0 || p->spec_max_draft > ENG_SPEC_MAX_DRAFT)
        return kiln_fail(err, KILN_E_INVALID, "speculative max_draft must be in 0..%d, got %d",
                         ENG_SPEC_MAX_DRAFT, (int)p->spec_max_draft);
    if (p->n_grammar_triggers < 0 || p->n_grammar_triggers > 64 || (p->n_grammar_triggers && !p->grammar))
        return kiln_fail(err, KILN_E_INVALID, "grammar triggers need a grammar (at most 64)");
    for (int32_t i = 0; i < p->n_grammar_triggers; i++)
        if (p->grammar_triggers[i] < 0 || p->grammar_triggers[i] >= vocab)
            return kiln_fail(err, KILN_E_INVALID, "grammar trigger token %d is out of range",
                             (int)p->grammar_triggers[i]);
    if (e->o.kv_budget_bytes) {
        uint64_t proj = seq_projection(e, p);
        if (proj > e->o.kv_budget_bytes)
            return kiln_fail(
                err, KILN_E_BUDGET,
                "the request's projected KV cache (%d prompt + %d max_tokens = %lld tokens%s x "
                "%llu bytes%s = %llu bytes) is over the --kv-budget of %llu bytes",
                (int)p->n_prompt, (int)p->max_tokens, (long long)projected_tokens(e, p),
                e->kv_cost.window[e->kv_cost.n_groups - 1] ? ", sliding layers only their window"
                                                           : "",
                (unsigned long long)e->o.kv_bytes_per_token,
                e->kv_cost.full_positions
                    ? ", the f32 positions before --quantized-kv-start at more"
                    : "",
                (unsigned long long)proj, (unsigned long long)e->o.kv_budget_bytes);
    }
    return eng_sampling_validate(&p->sp, vocab, err);
}

kiln_code eng_submit(eng_engine *e, const eng_params *p, eng_handle **out, kiln_err *err)
{
    *out = NULL;
    kiln_code rc = validate(e, p, err);
    if (rc) return rc;
    eng_handle *h = calloc(1, sizeof *h);
    if (!h) return kiln_fail(err, KILN_E_NOMEM, "request: out of memory");
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    h->refs = 2; /* (1) client + engine */
    h->ev_cap = 16; /* the event ring exists from the start: the terminal event always fits */
    h->evq = malloc(h->ev_cap * sizeof *h->evq);
    if (!h->evq) {
        handle_free(h);
        return kiln_fail(err, KILN_E_NOMEM, "request: out of memory");
    }
    if ((rc = copy_params(h, p, err))) {
        handle_free(h);
        return rc;
    }
    h->t_submit = plat_now();
    pthread_mutex_lock(&e->mu);
    if (e->stopping) {
        pthread_mutex_unlock(&e->mu);
        handle_free(h);
        return kiln_fail(err, KILN_E_BUSY, "the server is shutting down");
    }
    if (e->n_waiting >= e->o.max_queue) {
        pthread_mutex_unlock(&e->mu);
        handle_free(h);
        return kiln_fail(err, KILN_E_BUSY, "too many requests waiting (%d); try again later",
                         (int)e->o.max_queue);
    }
    if (e->wait_tail) e->wait_tail->next = h;
    else e->wait_head = h;
    e->wait_tail = h;
    e->n_waiting++;
    e->stats.requests_total++;
    pthread_cond_broadcast(&e->cv); /* the engine and lease waiters share cv */
    pthread_mutex_unlock(&e->mu);
    *out = h;
    return KILN_OK;
}

/* ---------------------------------------------------------------- finishing */

static int is_stop_token(const eng_engine *e, const eng_handle *h, int32_t tok)
{
    if (!h->p.ignore_eos) {
        const wt_config *c = mdl_config(e->rt->model);
        for (int i = 0; i < c->n_eos; i++)
            if (c->eos_ids[i] == tok) return 1;
        if (tok_eos_id(e->tok) == tok) return 1;
    }
    for (int32_t i = 0; i < h->p.n_stop_ids; i++)
        if (h->p.stop_ids[i] == tok) return 1;
    return 0;
}

/* The grammar's state and the ids that end the request (engine thread, at
 * first admission). */
static kiln_code grammar_setup(eng_engine *e, eng_handle *h, kiln_err *err)
{
    const wt_config *c = mdl_config(e->rt->model);
    h->ends = malloc(sizeof(int32_t) * (size_t)(c->n_eos + 1 + h->p.n_stop_ids + 1));
    if (!h->ends) return kiln_fail(err, KILN_E_NOMEM, "request: out of memory");
    if (!h->p.ignore_eos) {
        for (int i = 0; i < c->n_eos; i++) h->ends[h->n_ends++] = c->eos_ids[i];
        if (tok_eos_id(e->tok) >= 0) h->ends[h->n_ends++] = tok_eos_id(e->tok);
    }
    for (int32_t i = 0; i < h->p.n_stop_ids; i++) h->ends[h->n_ends++] = h->p.stop_ids[i];
    pthread_mutex_lock(&e->mu);
    e->stats.grammar_requests++;
    pthread_mutex_unlock(&e->mu);
    return eng_gstate_create(e->gm, h->p.grammar, h->p.grammar_triggers, h->p.n_grammar_triggers,
                             &h->gs, err);
}

/* Takes the first n bytes of the hold-back buffer as a new string (OWNED by the caller). */
static char *hold_take(eng_handle *h, size_t n)
{
    char *t = malloc(n + 1);
    if (!t) return NULL;
    if (n) {
        memcpy(t, h->hold, n);
        memmove(h->hold, h->hold + n, h->hold_len - n);
        h->hold_len -= n;
    }
    t[n] = '\0';
    return t;
}

/* What becomes of a finished request's generation checkpoint:
 *   stop, length, error  removed now (a retry starts afresh; an error may
 *                        come from the checkpoint itself)
 *   cancelled by its client  kept ckpt_cancel_keep_s for a retry to resume,
 *                        then removed by the tier's writer thread
 *   cancelled by a shutdown  kept: the retry after the restart resumes
 *                        (checkpoints older than ckpt_max_age_s expire). */
static void ckpt_finish(eng_engine *e, eng_handle *h, eng_finish why)
{
    if (why != ENG_FINISH_CANCELLED)
        kv_ssd_remove(e->o.ssd, KV_SSD_CKPT, h->ckpt_id);
    else if (!e->shutting_down)
        kv_ssd_expire_in(e->o.ssd, KV_SSD_CKPT, h->ckpt_id, e->o.ckpt_cancel_keep_s);
}

static void req_finish(eng_engine *e, eng_handle *h, eng_finish why, const char *stop_matched,
                       const kiln_err *err)
{
    eng_event ev;
    memset(&ev, 0, sizeof ev);
    if (why == ENG_FINISH_ERROR && err) {
        ev.kind = ENG_EV_ERROR;
        ev.err = *err;
    } else {
        ev.kind = ENG_EV_DONE;
        if (why != ENG_FINISH_STOP || !stop_matched) {
            /* no stop string matched: what was held back is text after all */
            int oom = 0;
            if (h->ts && why != ENG_FINISH_CANCELLED) {
                const char *t;
                size_t n;
                oom = tok_stream_flush(h->ts, &t, &n, NULL) != KILN_OK;
                if (!oom && n) {
                    char *nb = realloc(h->hold, h->hold_len + n + 1);
                    oom = !nb;
                    if (nb) {
                        h->hold = nb;
                        memcpy(h->hold + h->hold_len, t, n);
                        h->hold_len += n;
                    }
                }
            }
            if (!oom && h->hold_len && why != ENG_FINISH_CANCELLED) {
                ev.text_len = h->hold_len;
                ev.text = hold_take(h, h->hold_len);
                oom = !ev.text;
            }
            if (oom) { /* the end of the text is lost: say so instead of ending short */
                ev.kind = ENG_EV_ERROR;
                ev.text_len = 0;
                kiln_fail(&ev.err, KILN_E_NOMEM, "out of memory while finishing the output");
                why = ENG_FINISH_ERROR;
            }
        }
    }
    ev.finish = why;
    ev.stop_matched = stop_matched;
    if (ev.kind == ENG_EV_DONE && why == ENG_FINISH_STOP && h->p.pooling && h->pool) {
        int64_t H = mdl_config(e->rt->model)->hidden;
        ev.embedding = malloc(sizeof(float) * (size_t)H);
        if (ev.embedding) {
            eng_pool_finish(h->p.pooling, h->pool, H, h->p.n_prompt, ev.embedding);
            ev.n_embedding = (int32_t)H;
        } else {
            ev.kind = ENG_EV_ERROR;
            kiln_fail(&ev.err, KILN_E_NOMEM, "out of memory for an embedding");
        }
    }
    ev.prompt_tokens = h->p.n_prompt;
    ev.completion_tokens = h->n_generated;
    ev.cached_tokens = h->cached_tokens;
    ev.steps = h->n_steps;
    ev.resumed_tokens = h->resumed;
    ev.spec_accepted = h->spec_accepted;
    ev.spec_rejected = h->spec_rejected;
    if (h->ckpt_id) ckpt_finish(e, h, why);
    if (h->seq) {
        eng_seq_free(h->seq, e->rt->kv);
        h->seq = NULL;
    }
    if (e->o.mtp) eng_mtp_row_free(e->o.mtp, &h->mtp);
    if (h->dseq) {
        eng_draft_seq_free(e->o.draft, h->dseq);
        h->dseq = NULL;
    }
    tok_stream_destroy(h->ts);
    h->ts = NULL;
    eng_gstate_free(h->gs);
    h->gs = NULL;
    pthread_mutex_lock(&e->mu);
    e->stats.requests_finished++;
    if (why == ENG_FINISH_CANCELLED) e->stats.requests_cancelled++;
    if (why == ENG_FINISH_ERROR) e->stats.requests_failed++;
    e->stats.prompt_tokens += (uint64_t)h->p.n_prompt;
    e->stats.completion_tokens += (uint64_t)h->n_generated;
    e->stats.cached_tokens += (uint64_t)h->cached_tokens;
    e->stats.kv = kv_pool_get_stats(e->rt->kv); /* blocks freed above: visible at DONE */
    if (e->o.draft) e->stats.draft = eng_draft_get_info(e->o.draft); /* its sequence too */
    pthread_mutex_unlock(&e->mu);
    (void)handle_push(h, &ev); /* a terminal event always fits (handle_push's invariant) */
    handle_unref(h);           /* (1) the engine's reference */
}

/* ---------------------------------------------------------------- stop strings */

/* Length of the longest suffix of s[0..n) that is a proper prefix of a stop string. */
static size_t stop_holdback(const eng_handle *h, const char *s, size_t n)
{
    size_t best = 0;
    for (int i = 0; i < h->p.n_stop; i++) {
        size_t sl = strlen(h->p.stop[i]);
        for (size_t k = sl - 1 < n ? sl - 1 : n; k > best; k--)
            if (memcmp(s + n - k, h->p.stop[i], k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

/* Earliest full stop-string match in s[0..n): position, or -1; *which = index. */
static long stop_find(const eng_handle *h, const char *s, size_t n, int *which)
{
    long best = -1;
    for (int i = 0; i < h->p.n_stop; i++) {
        size_t sl = strlen(h->p.stop[i]);
        for (size_t at = 0; at + sl <= n; at++)
            if (memcmp(s + at, h->p.stop[i], sl) == 0) {
                if (best < 0 || (long)at < best) {
                    best = (long)at;
                    *which = i;
                }
                break;
            }
    }
    return best;
}

/* ---------------------------------------------------------------- per-token */

static void ckpt_save(eng_engine *e, eng_handle *h);

/* A token's text could not be handed over (out of memory): the request ends
 * with an error rather than a reply with a gap. Returns 1 (h is gone). */
static int token_oom(eng_engine *e, eng_handle *h)
{
    kiln_err err;
    kiln_fail(&err, KILN_E_NOMEM, "out of memory while streaming the output");
    req_finish(e, h, ENG_FINISH_ERROR, NULL, &err);
    return 1;
}

/* A sampled token: decode, match stops, emit. Returns 1 when the request ended. */
static int req_token(eng_engine *e, eng_handle *h, int32_t tok, const eng_sample_out *so)
{
    kiln_err err;
    h->n_generated++;
    int stop = is_stop_token(e, h, tok);
    if (h->gs && eng_gstate_accept(h->gs, tok, stop, &err) != KILN_OK) {
        req_finish(e, h, ENG_FINISH_ERROR, NULL, &err);
        return 1;
    }
    if (stop) {
        req_finish(e, h, ENG_FINISH_STOP, NULL, NULL);
        return 1;
    }
    const char *piece = NULL;
    size_t plen = 0;
    kiln_code trc = tok_stream_push(h->ts, tok, &piece, &plen, &err);
    if (trc == KILN_E_NOMEM) {
        req_finish(e, h, ENG_FINISH_ERROR, NULL, &err); /* a token without its text: an error */
        return 1;
    }
    if (trc) plen = 0; /* an id past the tokenizer (the model's padding rows): no text */
    if (plen) {
        if (h->hold_len + plen + 1 > h->hold_cap) {
            size_t nc = (h->hold_len + plen + 1) * 2;
            char *nb = realloc(h->hold, nc);
            if (!nb) {
                kiln_fail(&err, KILN_E_NOMEM, "out of memory while decoding");
                req_finish(e, h, ENG_FINISH_ERROR, NULL, &err);
                return 1;
            }
            h->hold = nb;
            h->hold_cap = nc;
        }
        memcpy(h->hold + h->hold_len, piece, plen);
        h->hold_len += plen;
    }
    eng_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = ENG_EV_TOKEN;
    ev.token = tok;
    if (h->p.want_logprobs) ev.so = *so;
    int which = -1;
    long at = h->p.n_stop ? stop_find(h, h->hold, h->hold_len, &which) : -1;
    if (at >= 0) {
        ev.text_len = (size_t)at;
        ev.text = hold_take(h, (size_t)at);
        if (!ev.text || handle_push(h, &ev)) return token_oom(e, h);
        h->hold_len = 0;
        req_finish(e, h, ENG_FINISH_STOP, h->p.stop[which], NULL);
        return 1;
    }
    size_t keep = h->p.n_stop ? stop_holdback(h, h->hold, h->hold_len) : 0;
    ev.text_len = h->hold_len - keep;
    ev.text = hold_take(h, ev.text_len);
    if (!ev.text || handle_push(h, &ev)) return token_oom(e, h);
    if (eng_gstate_done(h->gs)) { /* the grammar allows nothing more */
        req_finish(e, h, ENG_FINISH_STOP, NULL, NULL);
        return 1;
    }
    if (h->n_generated >= h->p.max_tokens || h->seq->n_tokens + 1 > e->rt->o.ctx) {
        /* a grammar's output that is complete at the limit stopped, it was not cut */
        req_finish(e, h, eng_gstate_complete(h->gs) ? ENG_FINISH_STOP : ENG_FINISH_LENGTH, NULL, NULL);
        return 1;
    }
    if (eng_seq_append(h->seq, tok, &err) != KILN_OK) {
        req_finish(e, h, ENG_FINISH_ERROR, NULL, &err);
        return 1;
    }
    if (h->ckpt_id && h->n_generated % e->o.ckpt_every == 0) ckpt_save(e, h);
    return 0;
}

/* ---------------------------------------------------------------- scheduling */

/* Drops running[i], whose projection was proj, without touching the handle
 * (it may be freed already: req_finish drops the engine's reference). */
static void running_drop(eng_engine *e, int32_t i, uint64_t proj)
{
    KILN_ASSERT(e->kv_running >= proj);
    e->kv_running -= proj;
    memmove(&e->running[i], &e->running[i + 1], sizeof *e->running * (size_t)(e->n_running - i - 1));
    e->n_running--;
}

static void running_remove(eng_engine *e, int32_t i)
{
    uint64_t proj = e->running[i]->kv_proj;
    e->running[i]->kv_proj = 0;
    running_drop(e, i, proj);
}

static int32_t blocks_for(const eng_engine *e, int32_t tokens)
{
    int32_t bt = e->rt->o.block_tokens;
    return (tokens + bt - 1) / bt;
}

static int ckpt_resume(eng_engine *e, eng_handle *h);

/* 1 when the MTP head follows h (it drafts with it): its steps tap the hidden state. */
static int mtp_follows(const eng_engine *e, const eng_handle *h)
{
    return e->o.mtp && h->spec_max > 0 && h->spec_method == ENG_SPEC_MTP;
}

/* At first admission: whether and how far this request drafts (embeddings
 * never sample). Constrained rows draft what their grammar allows. Models
 * with recurrent state draft too: the drafts' step keeps the state after
 * each position (eng_seq_draft_states), a rejection picks the accepted one. */
_Static_assert(ENG_SPEC_MAX_DRAFT <= ENG_SEQ_MAX_DRAFT, "a sequence keeps states for every draft");
static void spec_setup(eng_engine *e, eng_handle *h)
{
    eng_spec_method m = h->p.spec == ENG_SPEC_DEFAULT ? e->o.spec.method : h->p.spec;
    h->spec_max = 0;
    if ((m != ENG_SPEC_NGRAM && (m != ENG_SPEC_DRAFT || !e->o.draft) &&
         (m != ENG_SPEC_MTP || !e->o.mtp)) ||
        h->p.pooling)
        return;
    h->spec_method = m;
    h->spec_max = h->p.spec_max_draft > 0 ? h->p.spec_max_draft : e->o.spec.max_draft;
    eng_spec_row_init(&h->spec, &e->o.spec, h->spec_max);
}

/* First admission of an embedding request: its sequence, its pool, and the
 * engine's hidden-state tap (made once, the first time one is needed). */
static kiln_code embed_admit(eng_engine *e, eng_handle *h, kiln_err *err)
{
    int64_t H = mdl_config(e->rt->model)->hidden;
    if (!e->hidden) {
        int32_t rows = e->rt->o.max_step_tokens;
        e->hidden = malloc(sizeof(float) * (size_t)rows * (size_t)H);
        if (!e->hidden) return kiln_fail(err, KILN_E_NOMEM, "embeddings: no memory for the hidden-state tap");
        e->hidden_rows = rows;
        KLOG_INFO("engine", "embeddings: hidden-state tap rows=%d bytes=%llu", (int)rows,
                  (unsigned long long)((size_t)rows * (size_t)H * sizeof(float)));
    }
    h->pool = malloc(sizeof(double) * (size_t)H);
    if (!h->pool) return kiln_fail(err, KILN_E_NOMEM, "embeddings: out of memory");
    eng_pool_init(h->p.pooling, h->pool, H);
    return eng_seq_create(h->prompt, h->p.n_prompt, &h->seq, err);
}

/* Moves waiting requests into the batch while there are slots and KV room for
 * their whole token history (so admission does not immediately preempt). */
static void engine_admit(eng_engine *e)
{
    for (;;) {
        if (e->n_running >= e->rt->o.max_seqs) return;
        pthread_mutex_lock(&e->mu);
        eng_handle *h = e->wait_head;
        if (!h) {
            pthread_mutex_unlock(&e->mu);
            return;
        }
        int32_t need = blocks_for(e, (h->seq ? h->seq->n_tokens : h->p.n_prompt) + 1);
        if (e->n_running > 0 && !kv_pool_can_hold(e->rt->kv, need)) {
            pthread_mutex_unlock(&e->mu);
            return;
        }
        /* --kv-budget: the head waits until running sequences leave room; it
         * is never overtaken (FIFO). With nothing running it always fits,
         * since eng_submit refused projections over the whole budget. */
        uint64_t proj = e->o.kv_budget_bytes ? seq_projection(e, &h->p) : 0;
        if (proj && e->kv_running + proj > e->o.kv_budget_bytes) {
            KILN_ASSERT(e->n_running > 0);
            if (!e->head_waiting) e->stats.kv_budget_waits++;
            e->head_waiting = 1;
            pthread_mutex_unlock(&e->mu);
            return;
        }
        e->head_waiting = 0;
        e->wait_head = h->next;
        if (!e->wait_head) e->wait_tail = NULL;
        h->next = NULL;
        e->n_waiting--;
        pthread_mutex_unlock(&e->mu);
        kiln_err err;
        if (!h->seq && h->p.pooling) {
            if (embed_admit(e, h, &err) != KILN_OK) {
                req_finish(e, h, ENG_FINISH_ERROR, NULL, &err);
                continue;
            }
        } else if (!h->seq) {
            if (eng_seq_create(h->prompt, h->p.n_prompt, &h->seq, &err) != KILN_OK ||
                tok_stream_create(e->tok, h->p.skip_special ? TOK_SKIP_SPECIAL : 0, &h->ts,
                                  &err) != KILN_OK) {
                req_finish(e, h, ENG_FINISH_ERROR, NULL, &err);
                continue;
            }
            eng_rng_seed(&h->rng, h->p.sp.seed);
            spec_setup(e, h);
            if (h->p.grammar && (grammar_setup(e, h, &err) != KILN_OK)) {
                req_finish(e, h, ENG_FINISH_ERROR, NULL, &err);
                continue;
            }
            /* prime the detokenizer with the last prompt token so the first
             * generated piece gets the spacing it has after the prompt
             * (SentencePiece strips the leading space of a text's first token) */
            const char *t;
            size_t n;
            if (tok_stream_push(h->ts, h->prompt[h->p.n_prompt - 1], &t, &n, &err) ==
                KILN_E_NOMEM) {
                req_finish(e, h, ENG_FINISH_ERROR, NULL, &err); /* else its text would leak out */
                continue;
            }
            /* after grammar_setup: the replay advances the parse state token by token */
            if (e->o.ckpt_every > 0 && ckpt_resume(e, h)) continue; /* ended in the replay */
        }
        /* pooling every position needs every row computed: no cached prefix stands in */
        int32_t hit = eng_pool_needs_all(h->p.pooling) ? 0 : eng_seq_attach_prefix(h->seq, e->rt->kv, mdl_lora_set_ns(&h->p.lora, e->ns));
        if (!h->admitted_once) h->cached_tokens = hit < h->p.n_prompt ? hit : h->p.n_prompt;
        h->admitted_once = 1;
        h->kv_proj = proj;
        e->kv_running += proj;
        e->running[e->n_running++] = h;
    }
}

/* Releases the KV of the most recently admitted sequence other than `keep`
 * and puts it back at the head of the queue. Returns 0 if none could go. */
static int engine_preempt(eng_engine *e, const eng_handle *keep)
{
    for (int32_t i = e->n_running - 1; i >= 0; i--) {
        eng_handle *h = e->running[i];
        if (h == keep) continue;
        eng_seq_drop_kv(h->seq, e->rt->kv);
        if (h->dseq) eng_draft_seq_drop(e->o.draft, h->dseq); /* recomputed when it drafts again */
        if (e->o.mtp) eng_mtp_row_free(e->o.mtp, &h->mtp); /* starts over where the target
                                                               recomputes */
        if (h->pool) eng_pool_init(h->p.pooling, h->pool, mdl_config(e->rt->model)->hidden); /* (4) */
        running_remove(e, i);
        pthread_mutex_lock(&e->mu);
        h->next = e->wait_head;
        e->wait_head = h;
        if (!e->wait_tail) e->wait_tail = h;
        e->n_waiting++;
        e->stats.preemptions++;
        pthread_mutex_unlock(&e->mu);
        KLOG_INFO("engine", "preempted a sequence: kv pool full (running=%d)", (int)e->n_running);
        return 1;
    }
    return 0;
}

/* Cancelled requests still in the queue leave at once (they may sit behind
 * a head that waits for a batch slot, KV room or the kv budget). */
static void drop_cancelled_waiting(eng_engine *e)
{
    eng_handle *gone = NULL;
    pthread_mutex_lock(&e->mu);
    eng_handle **pp = &e->wait_head, *last = NULL;
    while (*pp) {
        eng_handle *h = *pp;
        if (atomic_load(&h->cancel)) {
            *pp = h->next;
            h->next = gone;
            gone = h;
            e->n_waiting--;
            e->head_waiting = 0; /* the head may have changed: count its next wait anew */
        } else {
            last = h;
            pp = &h->next;
        }
    }
    e->wait_tail = last;
    pthread_mutex_unlock(&e->mu);
    while (gone) {
        eng_handle *h = gone;
        gone = h->next;
        h->next = NULL;
        req_finish(e, h, ENG_FINISH_CANCELLED, NULL, NULL);
    }
}

static void drop_cancelled(eng_engine *e)
{
    for (int32_t i = 0; i < e->n_running;) {
        eng_handle *h = e->running[i];
        if (atomic_load(&h->cancel)) {
            running_remove(e, i);
            req_finish(e, h, ENG_FINISH_CANCELLED, NULL, NULL);
        } else {
            i++;
        }
    }
}

/* Drafts for the decoding rows, from what the planned step leaves: its token
 * budget, logit rows and free KV blocks (drafting never preempts anyone), and
 * only while the cost rule says the step's useful tokens per second go up
 * (eng_spec_pays: measured step times; a step already compute-bound by many
 * rows or prefill does not pay for drafts). A row's drafts are appended to its
 * sequence (n_draft) and run with logits at every position. */
/* Appends row k's d drafts (buf) to its sequence with KV blocks for them (as
 * many as fit: drafting never preempts) and makes the item run 1 + d tokens
 * with logits at every position. Returns the drafts taken. */
static int32_t spec_take(eng_engine *e, int32_t k, const int32_t *buf, int32_t d)
{
    eng_handle *h = e->owners[k];
    eng_seq *s = h->seq;
    int32_t n0 = s->n_tokens, bt = e->rt->o.block_tokens, j = 0;
    while (j < d && eng_seq_append(s, buf[j], NULL) == KILN_OK) j++;
    d = j;
    kiln_err err;
    if (d && eng_seq_reserve(s, e->rt->kv, s->n_cached + 1 + d, &err) != KILN_OK) {
        int32_t fit = s->n_blocks * bt - (s->n_cached + 1); /* the pool is dry: what fits */
        if (fit < d) d = fit > 0 ? fit : 0;
    }
    d = eng_seq_draft_states(s, e->rt->kv, d); /* recurrent layers: a state per position */
    s->n_tokens = n0 + d;
    if (d < 1) return 0;
    s->n_draft = d;
    h->spec.pending = d;
    e->items[k].max_tokens = 1 + d;
    e->items[k].all_logits = 1;
    return d;
}

/* eng_draft_job.pick for a constrained row: the draft model's argmax under the
 * grammar's mask of the state after the drafts so far (pushed one by one; the
 * caller unwinds them after the run), so its drafts are sentences the row may
 * verify. */
static int32_t draft_pick(void *user, float *logits, int64_t vocab, const int32_t *drafts, int32_t n)
{
    eng_draft_pick *dp = user;
    eng_handle *h = dp->h;
    kiln_err err;
    if (n > 0 && eng_gstate_push(h->gs, drafts[n - 1], &err) != KILN_OK) return -1;
    eng_sampling greedy = eng_sampling_default();
    greedy.temperature = 0;
    eng_rng rng;
    eng_rng_seed(&rng, 0); /* greedy: never drawn */
    eng_sample_out so;
    int32_t left = h->p.max_tokens - h->n_generated - n;
    int32_t t = eng_gstate_sample(h->gs, &greedy, logits, vocab, dp->hist, dp->n_hist, h->ends,
                                  h->n_ends, left, &rng, dp->scratch, &so, &err);
    return t < 0 ? -1 : t;
}

static void spec_plan(eng_engine *e, int32_t n)
{
    int32_t T = 0, rows = 0, nj = 0;
    for (int32_t k = 0; k < n; k++) {
        T += e->items[k].max_tokens;
        rows += e->items[k].max_tokens == eng_seq_pending(e->items[k].seq);
        e->owners[k]->spec.pending = 0;
    }
    double work = (double)T, t0 = 0;
    const wt_config *c = mdl_config(e->rt->model);
    int32_t buf[ENG_SPEC_MAX_DRAFT], dlong = 0; /* dlong: the longest draft-model job so far */
    int32_t nm = 0, mlong = 0; /* MTP rows of the step, the longest */
    for (int32_t k = 0; k < n; k++) {
        eng_handle *h = e->owners[k];
        eng_seq *s = h->seq;
        if (!h->spec_max || e->items[k].max_tokens != 1 || eng_seq_pending(s) != 1) continue;
        int32_t n0 = s->n_tokens;
        int32_t kmax = e->o.spec.adaptive ? h->spec.k : h->spec_max;
        int32_t lim[] = {h->p.max_tokens - h->n_generated - 1, e->rt->o.ctx - n0 - 1,
                         e->o.max_step_tokens - T, e->rt->logit_rows - rows};
        for (size_t i = 0; i < sizeof lim / sizeof *lim; i++)
            if (lim[i] < kmax) kmax = lim[i];
        /* dynamic NTK scales RoPE by the known length: past the original
         * context a draft's position would not rotate as plain decoding does */
        if (c->rope.type == WT_ROPE_DYNAMIC && n0 + kmax > c->rope.original_max_pos) kmax = 0;
        if (kmax < 1) continue;
        if (!t0) t0 = plat_now();
        if (h->spec_method == ENG_SPEC_DRAFT) {
            /* a draft model always proposes kmax tokens and running it costs: the
             * cost rule decides first, with the passes this row adds to the
             * batched draft run (rows share them) priced at their measured time;
             * the drafts come from one batched run below */
            double extra = kmax > dlong ? (double)(kmax - dlong) * e->draft_s_pos : 0;
            if (e->o.spec.adaptive && !eng_spec_pays_with(&e->spec_cost, e->s_per_token, T, work,
                                                          kmax, h->spec.rate * kmax, extra)) {
                eng_spec_row_skipped(&h->spec);
                e->spec_acc.skipped_cost++;
                e->spec_acc_m[ENG_SPEC_DRAFT].skipped_cost++;
                continue;
            }
            e->djobs[nj] = (eng_draft_job){.seq = &h->dseq, .toks = s->tokens, .n_toks = n0,
                                           .k = kmax, .out = e->dbuf + (size_t)nj * ENG_SPEC_MAX_DRAFT,
                                           .pick = h->gs ? draft_pick : NULL,
                                           .pick_user = &e->dpick[nj]};
            e->dpick[nj] = (eng_draft_pick){.h = h, .hist = s->tokens, .n_hist = n0,
                                            .scratch = e->rt->sample_scratch};
            e->djob_item[nj++] = k;
            if (kmax > dlong) dlong = kmax;
            T += kmax; /* held for it: the drafts come back at most this long */
            rows += kmax;
            work += h->spec.rate * kmax;
            continue;
        }
        if (h->spec_method == ENG_SPEC_MTP) {
            /* the head proposes kmax from its state after the last verified position,
             * in kmax - 1 batched passes after the first: priced like a draft model's */
            double extra = kmax > mlong ? (double)(kmax - mlong) * e->mtp_s_pos : 0;
            if (e->o.spec.adaptive && !eng_spec_pays_with(&e->spec_cost, e->s_per_token, T, work,
                                                          kmax, h->spec.rate * kmax, extra)) {
                eng_spec_row_skipped(&h->spec);
                e->spec_acc.skipped_cost++;
                e->spec_acc_m[ENG_SPEC_MTP].skipped_cost++;
                continue;
            }
            e->mrows[nm] = &h->mtp;
            e->mat[nm] = s->n_cached;
            e->mk[nm] = kmax;
            e->mitem[nm++] = k;
            if (kmax > mlong) mlong = kmax;
            T += kmax;
            rows += kmax;
            work += h->spec.rate * kmax;
            continue;
        }
        int32_t d = eng_spec_ngram_draft(s->tokens, n0, e->o.spec.ngram_min, e->o.spec.ngram_max,
                                         kmax, buf);
        /* draft tokens checked against the grammar: only what it allows is verified */
        if (d > 0 && h->gs) d = eng_gstate_draft_prefix(h->gs, buf, d, h->ends, h->n_ends);
        if (d < 1) continue;
        if (e->o.spec.adaptive &&
            !eng_spec_pays(&e->spec_cost, e->s_per_token, T, work, d, h->spec.rate * d)) {
            eng_spec_row_skipped(&h->spec);
            e->spec_acc.skipped_cost++;
            e->spec_acc_m[ENG_SPEC_NGRAM].skipped_cost++;
            continue;
        }
        d = spec_take(e, k, buf, d);
        T += d;
        rows += d;
        work += h->spec.rate * d;
    }
    if (nj) { /* every draft-model row of the step in one batched drafting run */
        kiln_err err;
        double td = plat_now();
        kiln_code drc = eng_draft_run(e->o.draft, e->djobs, nj, &err);
        if (!drc && dlong > 0) { /* one pass per draft position, catch-up included */
            double r = (plat_now() - td) / (double)dlong;
            e->draft_s_pos = e->draft_s_pos > 0 ? 0.7 * e->draft_s_pos + 0.3 * r : r;
        }
        if (drc != KILN_OK) {
            KLOG_WARN("spec", "draft model failed, this step verifies no draft: %s", err.msg);
            nj = 0;
        }
        for (int32_t i = 0; i < nj; i++) {
            eng_draft_job *j = &e->djobs[i];
            eng_handle *h = e->owners[e->djob_item[i]];
            if (h->gs) eng_gstate_unwind(h->gs); /* draft_pick's pushes */
            int32_t d = j->n_out;
            if (d > 0 && h->gs) d = eng_gstate_draft_prefix(h->gs, j->out, d, h->ends, h->n_ends);
            if (d > 0) d = spec_take(e, e->djob_item[i], j->out, d);
            if (d < 1) eng_draft_rollback(e->o.draft, h->dseq, h->seq->n_tokens);
        }
    }
    if (nm) { /* every MTP row of the step in one batched drafting run */
        kiln_err err;
        double tm = plat_now();
        kiln_code mrc = eng_mtp_draft(e->o.mtp, e->mrows, e->mat, e->mk, e->mout, e->mn, nm, &err);
        if (!mrc && mlong > 1) {
            double r = (plat_now() - tm) / (double)(mlong - 1);
            e->mtp_s_pos = e->mtp_s_pos > 0 ? 0.7 * e->mtp_s_pos + 0.3 * r : r;
        }
        if (mrc != KILN_OK) {
            KLOG_WARN("spec", "MTP head failed, this step verifies no MTP draft: %s", err.msg);
            nm = 0;
        }
        for (int32_t i = 0; i < nm; i++) {
            eng_handle *h = e->owners[e->mitem[i]];
            int32_t d = e->mn[i], *mb = e->mout + (size_t)i * ENG_SEQ_MAX_DRAFT;
            if (d > 0 && h->gs) d = eng_gstate_draft_prefix(h->gs, mb, d, h->ends, h->n_ends);
            if (d > 0) spec_take(e, e->mitem[i], mb, d);
        }
    }
    if (t0) e->spec_acc.draft_s += plat_now() - t0;
}

/* A row that ran its last token and d drafts: each position is sampled as
 * plain decoding samples it (same logits, same history, the draw keyed by the
 * position); drafts are accepted while each equals that sample, and the
 * samples up to the first mismatch are emitted. KV past the accepted drafts is
 * given back. Returns 1 when the request ended (h may be gone). */
static int spec_verify(eng_engine *e, eng_handle *h, float *lg)
{
    double t0 = plat_now();
    eng_seq *s = h->seq;
    int64_t vocab = mdl_vocab(e->rt->model);
    int32_t d = h->spec.pending, n0 = s->n_tokens - d, m = 0, gend = 0;
    int32_t out[ENG_SPEC_MAX_DRAFT + 1];
    eng_sample_out so[ENG_SPEC_MAX_DRAFT + 1];
    kiln_err gerr;
    for (int32_t j = 0; j <= d; j++) {
        float *row = lg + (size_t)j * (size_t)vocab;
        eng_rng_at(&h->rng, n0 + j);
        if (!h->gs) {
            out[j] = eng_sample_row(&h->p.sp, row, vocab, s->tokens, n0 + j, &h->rng,
                                    e->rt->sample_scratch, &so[j]);
        } else { /* under the mask of the state after the accepted drafts (pushed) */
            int32_t left = h->p.max_tokens - (h->n_generated + j), room = e->rt->o.ctx - (n0 + j);
            out[j] = eng_gstate_sample(h->gs, &h->p.sp, row, vocab, s->tokens, n0 + j, h->ends,
                                       h->n_ends, left < room ? left : room, &h->rng,
                                       e->rt->sample_scratch, &so[j], &gerr);
            if (out[j] < 0) { /* plain decoding ends here too, after the accepted drafts */
                gend = out[j];
                break;
            }
        }
        if (j == d || out[j] != s->tokens[n0 + j]) break;
        if (h->gs && eng_gstate_push(h->gs, out[j], &gerr) != KILN_OK) break;
        m++;
    }
    eng_gstate_unwind(h->gs);
    h->spec.pending = 0;
    s->n_draft = 0;
    eng_seq_truncate(s, e->rt->kv, n0 + m); /* the rejected drafts' K/V and blocks go */
    if (h->dseq) eng_draft_rollback(e->o.draft, h->dseq, n0 + m); /* and the drafter's */
    s->n_tokens = n0; /* the accepted drafts come back as they are emitted (same ids) */
    eng_spec_row_update(&h->spec, h->spec_max, d, m);
    h->spec_rejected += d - m;
    eng_spec_stats *st = &e->spec_acc;
    st->rows++;
    st->drafted += (uint64_t)d;
    st->accepted += (uint64_t)m;
    st->emitted += (uint64_t)m + (gend ? 0 : 1);
    st->verify_s += plat_now() - t0;
    eng_spec_stats *sm = &e->spec_acc_m[h->spec_method];
    sm->rows++;
    sm->drafted += (uint64_t)d;
    sm->accepted += (uint64_t)m;
    sm->emitted += (uint64_t)m + (gend ? 0 : 1);
    for (int32_t j = 0; j < m + (gend ? 0 : 1); j++) {
        if (j < m) h->spec_accepted++;
        /* what plain decoding has published when it samples out[j]: so a stop
         * inside the accepted run leaves the cache as plain decoding does */
        eng_seq_publish(s, e->rt->kv, mdl_lora_set_ns(&h->p.lora, e->ns), n0 + j);
        if (req_token(e, h, out[j], &so[j])) return 1;
    }
    if (gend) { /* -2: a sentence nothing may end (ignore_eos): complete; -1: an error */
        eng_seq_publish(s, e->rt->kv, mdl_lora_set_ns(&h->p.lora, e->ns), n0 + m);
        req_finish(e, h, gend == -2 ? ENG_FINISH_STOP : ENG_FINISH_ERROR, NULL, &gerr);
        return 1;
    }
    return 0;
}

/* Picks this step's work: decodes first, then prefill chunks under the budget;
 * reserves KV blocks (preempting when the pool is dry). Returns the item count. */
static int32_t engine_plan(eng_engine *e)
{
    int32_t budget = e->o.max_step_tokens, n = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && n > 0 && e->o.max_stall_s > 0 && e->s_per_token > 0) {
            /* streams are decoding: prefill only what keeps this step near max_stall_s */
            double fit = e->o.max_stall_s / e->s_per_token - (double)n;
            int32_t cap = fit > (double)budget ? budget : (int32_t)fit;
            if (cap < ENG_MIN_PREFILL_SLICE) cap = ENG_MIN_PREFILL_SLICE;
            if (cap < budget) budget = cap;
        }
        for (int32_t i = 0; i < e->n_running; i++) {
            eng_handle *h = e->running[i];
            int32_t pend = eng_seq_pending(h->seq);
            int decode = pend == 1;
            if ((pass == 0) != decode || budget <= 0) continue;
            int32_t take = pend < e->o.prefill_chunk ? pend : e->o.prefill_chunk;
            if (take > budget) take = budget;
            kiln_err err;
            while (eng_seq_reserve(h->seq, e->rt->kv, h->seq->n_cached + take, &err) != KILN_OK) {
                if (err.code != KILN_E_BUDGET || !engine_preempt(e, h)) {
                    kiln_fail(&err, KILN_E_BUDGET,
                              "the KV cache cannot hold this sequence (%d tokens)",
                              (int)h->seq->n_tokens);
                    running_remove(e, i);
                    req_finish(e, h, ENG_FINISH_ERROR, NULL, &err);
                    return -1; /* the running list changed: plan again */
                }
                return -1;
            }
            e->owners[n] = h;
            e->items[n++] = (eng_step_item){
                .seq = h->seq, .max_tokens = take, .lora = h->p.lora.n > 0 ? &h->p.lora : NULL};
            budget -= take;
        }
    }
    spec_plan(e, n);
    return n;
}

/* A row with NaN logits (a model whose weights or activations overflowed):
 * they are never drawn (eng_sample.c); one WARN per engine, counted in
 * /stats. When nothing finite was left (tok < 0) the request ends with an
 * error. Returns 1 when h was finished. Engine thread. */
static int sample_degenerate(eng_engine *e, eng_handle *h, int32_t tok, const eng_sample_out *so)
{
    if (so->n_nan) {
        pthread_mutex_lock(&e->mu);
        int first = e->stats.nan_logit_rows++ == 0;
        pthread_mutex_unlock(&e->mu);
        if (first)
            KLOG_WARN("engine",
                      "the model produced NaN logits (%d in this row): they are never sampled; "
                      "counted in /stats engine.nan_logit_rows",
                      (int)so->n_nan);
    }
    if (tok >= 0) return 0;
    kiln_err err;
    if (so->n_nan)
        kiln_fail(&err, KILN_E_CORRUPT,
                  "the model produced no finite logit (NaN or -inf for every token): its "
                  "weights or activations are broken");
    else
        kiln_fail(&err, KILN_E_INVALID,
                  "no token can be sampled: logit_bias and penalties leave every logit at -inf");
    for (int32_t i = 0; i < e->n_running; i++)
        if (e->running[i] == h) {
            running_remove(e, i);
            break;
        }
    req_finish(e, h, ENG_FINISH_ERROR, NULL, &err);
    return 1;
}

/* An embedding request's rows of this step go into its pool; once its whole
 * prompt has run, it is finished with the pooled vector. */
static void embed_rows(eng_engine *e, eng_handle *h, int32_t hrow, int32_t n_run)
{
    int64_t H = mdl_config(e->rt->model)->hidden;
    int32_t pos0 = h->seq->n_cached - n_run;
    eng_pool_add(h->p.pooling, h->pool, e->hidden + (size_t)hrow * (size_t)H, n_run, H, pos0,
                 h->p.n_prompt);
    if (eng_seq_pending(h->seq) > 0) return;
    for (int32_t i = 0; i < e->n_running; i++)
        if (e->running[i] == h) {
            running_remove(e, i);
            break;
        }
    req_finish(e, h, ENG_FINISH_STOP, NULL, NULL);
}

static void engine_step(eng_engine *e)
{
    int32_t n;
    while ((n = engine_plan(e)) < 0) {
    }
    if (n == 0) return;
    kiln_err err;
    double t0 = plat_now();
    /* grammar masks of the rows that get logits: computed while the model runs */
    int32_t ng = 0;
    for (int32_t k = 0; k < n; k++)
        if (e->owners[k]->gs && e->items[k].max_tokens == eng_seq_pending(e->items[k].seq))
            e->gjobs[ng++] = e->owners[k]->gs;
    if (ng) eng_gmask_begin(e->gm, e->gjobs, ng);
    /* (4) the tap is on only for steps with an embedding request or a row the
     * MTP head follows (it reads the target's hidden state at every position) */
    int pooled = 0;
    for (int32_t k = 0; k < n && !pooled; k++)
        pooled = e->owners[k]->p.pooling != ENG_POOL_NONE || mtp_follows(e, e->owners[k]);
    if (pooled) mdl_ctx_set_hidden_out(e->rt->cx, e->hidden, e->hidden_rows);
    kiln_code rc = eng_step_run(e->rt->cx, e->rt->kv, e->items, n, e->ns, e->rt->logits,
                                 e->rt->logit_rows, &err);
    if (pooled) mdl_ctx_set_hidden_out(e->rt->cx, NULL, 0);
    int32_t nf = 0; /* MTP feeds: rows still running after their tokens are handled */
    int64_t Hd = mdl_config(e->rt->model)->hidden;
    if (ng) eng_gmask_end(e->gm);
    int64_t vocab = mdl_vocab(e->rt->model);
    int32_t row = 0, toks = 0, spec_rows = 0;
    for (int32_t k = 0; k < n; k++) {
        eng_handle *h = e->owners[k];
        int32_t hrow = toks; /* this item's first row in the tap */
        toks += e->items[k].n_run;
        h->n_steps++;
        int32_t p0 = e->items[k].seq->n_cached - e->items[k].n_run; /* its first position */
        int feed = !rc && mtp_follows(e, h);
#define MTP_FEED()                                                                                 \
    do {                                                                                           \
        if (feed && h->seq->n_cached > p0)                                                         \
            e->mjobs[nf++] = (eng_mtp_feed_job){.row = &h->mtp, .toks = h->seq->tokens,           \
                                                .n_toks = h->seq->n_tokens, .p0 = p0,             \
                                                .n = h->seq->n_cached - p0,                       \
                                                .hidden = e->hidden + (size_t)hrow * (size_t)Hd}; \
    } while (0)
        if (rc) {
            for (int32_t i = 0; i < e->n_running; i++)
                if (e->running[i] == h) running_remove(e, i);
            req_finish(e, h, ENG_FINISH_ERROR, NULL, &err);
            continue;
        }
        if (h->p.pooling) {
            if (e->items[k].n_logits) row++; /* its logits row is skipped, never sampled */
            embed_rows(e, h, hrow, e->items[k].n_run);
            continue;
        }
        if (e->items[k].n_logits == 0) {
            MTP_FEED(); /* a prefill chunk: its positions' next tokens are the prompt's */
            continue;
        }
        float *lg = e->rt->logits + (size_t)row * (size_t)vocab;
        row += e->items[k].n_logits;
        eng_sample_out so;
        int32_t at = -1;
        for (int32_t i = 0; i < e->n_running && at < 0; i++)
            if (e->running[i] == h) at = i;
        uint64_t proj = h->kv_proj;
        if (h->spec.pending) {
            spec_rows++;
            if (spec_verify(e, h, lg)) {
                if (at >= 0) running_drop(e, at, proj); /* h may be gone */
            } else {
                MTP_FEED(); /* the verified positions: the last one and the accepted drafts */
            }
            continue;
        }
        int32_t tok;
        eng_rng_at(&h->rng, h->seq->n_tokens); /* the draw is keyed by the position */
        if (!h->gs) {
            tok = eng_sample_row(&h->p.sp, lg, vocab, h->seq->tokens, h->seq->n_tokens, &h->rng,
                                 e->rt->sample_scratch, &so);
        } else {
            int32_t left = h->p.max_tokens - h->n_generated, room = e->rt->o.ctx - h->seq->n_tokens;
            kiln_err gerr;
            tok = eng_gstate_sample(h->gs, &h->p.sp, lg, vocab, h->seq->tokens, h->seq->n_tokens,
                                    h->ends, h->n_ends, left < room ? left : room, &h->rng,
                                    e->rt->sample_scratch, &so, &gerr);
            if (tok < 0) { /* -2: a sentence nothing may end (ignore_eos): it is complete */
                if (at >= 0) running_remove(e, at);
                req_finish(e, h, tok == -2 ? ENG_FINISH_STOP : ENG_FINISH_ERROR, NULL, &gerr);
                continue;
            }
        }
        if ((so.n_nan || tok < 0) && sample_degenerate(e, h, tok, &so)) continue; /* h is gone */
        if (req_token(e, h, tok, &so)) {
            if (at >= 0) running_drop(e, at, proj); /* h may be gone */
        } else {
            MTP_FEED();
        }
#undef MTP_FEED
    }
    if (nf) {
        kiln_err merr;
        if (eng_mtp_feed(e->o.mtp, e->mjobs, nf, &merr) != KILN_OK)
            KLOG_WARN("spec", "MTP head: a feed failed, its rows start over: %s", merr.msg);
    }
    double dt = plat_now() - t0;
    if (!rc && toks >= ENG_MIN_PREFILL_SLICE) {
        /* small steps are dominated by streaming the weights, not per-token work */
        double r = dt / (double)toks;
        e->s_per_token = e->s_per_token > 0 ? 0.7 * e->s_per_token + 0.3 * r : r;
    }
    if (!rc) eng_spec_cost_add(&e->spec_cost, toks, dt);
    if (spec_rows) e->spec_acc.steps++;
    pthread_mutex_lock(&e->mu);
    eng_spec_stats *sa = &e->spec_acc, *st = &e->stats.spec;
    st->steps += sa->steps;
    st->rows += sa->rows;
    st->drafted += sa->drafted;
    st->accepted += sa->accepted;
    st->emitted += sa->emitted;
    st->skipped_cost += sa->skipped_cost;
    st->draft_s += sa->draft_s;
    st->verify_s += sa->verify_s;
    memset(sa, 0, sizeof *sa);
    for (int m = 0; m < ENG_SPEC_METHODS; m++) {
        eng_spec_stats *a = &e->spec_acc_m[m], *b = &e->stats.spec_by[m];
        b->rows += a->rows;
        b->drafted += a->drafted;
        b->accepted += a->accepted;
        b->emitted += a->emitted;
        b->skipped_cost += a->skipped_cost;
        memset(a, 0, sizeof *a);
    }
    if (e->o.draft) e->stats.draft = eng_draft_get_info(e->o.draft);
    e->stats.steps++;
    e->stats.step_tokens += (uint64_t)toks;
    e->stats.busy_s += dt;
    pthread_mutex_unlock(&e->mu);
}

/* Under e->mu: sleeps up to 50 ms or until signalled (submit, release, stop). */
static void lease_wait(eng_engine *e)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_nsec += 50 * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&e->cv, &e->mu, &dl);
}

void eng_engine_lease_acquire(eng_engine *e)
{
    pthread_mutex_lock(&e->mu);
    int32_t held = ++e->leases;
    e->stats.leases = held;
    while (e->in_step && !e->stopping)
        pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    KLOG_INFO("engine", "lease acquired (held=%d)", (int)held);
}

void eng_engine_lease_release(eng_engine *e)
{
    pthread_mutex_lock(&e->mu);
    KILN_ASSERT(e->leases > 0);
    e->leases--;
    e->stats.leases = e->leases;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    KLOG_INFO("engine", "lease released");
}

static void engine_wait_for_work(eng_engine *e);

static void *engine_main(void *arg)
{
    eng_engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        engine_wait_for_work(e);
        int stopping = e->stopping;
        if (!stopping && e->leases > 0) {
            /* leased: no step; wake now and then to let cancelled requests go */
            lease_wait(e);
            pthread_mutex_unlock(&e->mu);
            drop_cancelled(e);
            drop_cancelled_waiting(e);
            continue;
        }
        e->in_step = !stopping;
        pthread_mutex_unlock(&e->mu);
        if (stopping) break;
        drop_cancelled(e);
        drop_cancelled_waiting(e);
        if (e->ssdw) eng_ssd_step_begin(e->ssdw);
        engine_admit(e);
        drop_cancelled(e);
        engine_step(e);
        pthread_mutex_lock(&e->mu);
        e->in_step = 0;
        pthread_cond_broadcast(&e->cv); /* lease_acquire waits for the step's end */
        e->stats.running = e->n_running;
        e->stats.waiting = e->n_waiting;
        e->stats.kv = kv_pool_get_stats(e->rt->kv); /* the pool is engine-thread only */
        e->stats.kv_projected_bytes = e->kv_running;
        bool idle = e->n_running == 0 && !e->wait_head;
        pthread_mutex_unlock(&e->mu);
        if (e->ssdw) eng_ssd_work(e->ssdw, idle); /* SSD: flush passes; write-behind when idle */
    }
    /* shutting down: everything still here is cancelled */
    e->shutting_down = 1;
    while (e->n_running > 0) {
        eng_handle *h = e->running[e->n_running - 1];
        e->n_running--;
        req_finish(e, h, ENG_FINISH_CANCELLED, NULL, NULL);
    }
    for (;;) {
        pthread_mutex_lock(&e->mu);
        eng_handle *h = e->wait_head;
        if (h) {
            e->wait_head = h->next;
            e->n_waiting--;
        }
        pthread_mutex_unlock(&e->mu);
        if (!h) break;
        req_finish(e, h, ENG_FINISH_CANCELLED, NULL, NULL);
    }
    return NULL;
}

/* ---------------------------------------------------------------- SSD tier */

/* Under e->mu: sleeps until a request, a stop, or SSD work (flush pass or
 * write-behind while idle) is due. */
static void engine_wait_for_work(eng_engine *e)
{
    int ms;
    while (!e->stopping && !e->leases && !e->wait_head && e->n_running == 0 &&
           (ms = e->ssdw ? eng_ssd_wait_ms(e->ssdw) : -1) != 0) {
        if (ms < 0) {
            pthread_cond_wait(&e->cv, &e->mu);
            continue;
        }
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += (long)ms * 1000000L;
        if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&e->cv, &e->mu, &dl);
    }
}

/* Generation checkpoints (eng_ckpt.h). Persists h's state; engine thread. */
static void ckpt_save(eng_engine *e, eng_handle *h)
{
    if (eng_ckpt_save(e->o.ssd, e->rt->kv, h->ckpt_id, h->seq, h->p.n_prompt, h->n_generated,
                      &h->rng, &h->ckpt_blocks)) {
        pthread_mutex_lock(&e->mu);
        e->stats.ckpt_saved++;
        pthread_mutex_unlock(&e->mu);
    }
}

/* At first admission: replays the checkpoint of an identical earlier request
 * (its tokens go out as text again: a retry is a new response) and restores
 * the PRNG. Returns 1 when the request ended during the replay (h is gone). */
static int ckpt_resume(eng_engine *e, eng_handle *h)
{
    h->ckpt_id = eng_ckpt_identity(&h->p, mdl_lora_set_ns(&h->p.lora, e->rt->ns));
    eng_ckpt ck;
    if (eng_ckpt_load(e->o.ssd, h->ckpt_id, h->p.n_prompt, &ck, NULL) != KILN_OK) return 0;
    if (ck.n_gen >= h->p.max_tokens) { /* cannot come from this request: ignore */
        eng_ckpt_clear(&ck);
        return 0;
    }
    eng_sample_out so;
    memset(&so, 0, sizeof so);
    for (int32_t i = 0; i < ck.n_gen; i++) {
        h->resumed++;
        if (req_token(e, h, ck.gen[i], &so)) {
            eng_ckpt_clear(&ck);
            return 1;
        }
    }
    h->rng = ck.rng;
    h->ckpt_blocks = 0;
    KLOG_INFO("engine", "resumed a generation from its checkpoint tokens=%d", (int)ck.n_gen);
    eng_ckpt_clear(&ck);
    pthread_mutex_lock(&e->mu);
    e->stats.ckpt_resumed++;
    pthread_mutex_unlock(&e->mu);
    return 0;
}

kiln_code eng_cache_flush(eng_engine *e, int timeout_ms, eng_flush_result *r, kiln_err *err)
{
    memset(r, 0, sizeof *r);
    if (!e->ssdw) return kiln_fail(err, KILN_E_UNSUPPORTED, "no SSD cache: start with --ssd-cache DIR");
    uint64_t ticket = eng_ssd_flush_request(e->ssdw);
    pthread_mutex_lock(&e->mu);
    pthread_cond_broadcast(&e->cv); /* the engine may be asleep */
    pthread_mutex_unlock(&e->mu);
    eng_ssd_flush_wait(e->ssdw, ticket, timeout_ms, r);
    return KILN_OK;
}

/* ---------------------------------------------------------------- lifecycle */

kiln_code eng_engine_start(eng_runtime *rt, const tok_tokenizer *tok, const eng_engine_opts *o,
                           eng_engine **out, kiln_err *err)
{
    *out = NULL;
    if (rt->o.max_seqs > 256)
        return kiln_fail(err, KILN_E_INVALID, "batch of %d sequences is over 256", (int)rt->o.max_seqs);
    eng_engine *e = calloc(1, sizeof *e);
    if (!e) return kiln_fail(err, KILN_E_NOMEM, "engine: out of memory");
    e->rt = rt;
    e->tok = tok;
    e->o = *o;
    if (!o->ssd) e->o.ckpt_every = 0; /* checkpoints live in the SSD tier */
    e->ns = o->prefix_cache ? rt->ns : 0;
    if (e->o.max_step_tokens <= 0 || e->o.max_step_tokens > rt->o.max_step_tokens)
        e->o.max_step_tokens = rt->o.max_step_tokens;
    if (e->o.max_step_tokens < rt->o.max_seqs) e->o.max_step_tokens = rt->o.max_seqs;
    if (e->o.prefill_chunk <= 0) e->o.prefill_chunk = e->o.max_step_tokens;
    if (e->o.max_queue < 0) e->o.max_queue = 0;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->running = calloc((size_t)rt->o.max_seqs, sizeof *e->running);
    e->items = calloc((size_t)rt->o.max_seqs, sizeof *e->items);
    e->owners = calloc((size_t)rt->o.max_seqs, sizeof *e->owners);
    e->gjobs = calloc((size_t)rt->o.max_seqs, sizeof *e->gjobs);
    kiln_err gerr;
    if (!e->running || !e->items || !e->owners || !e->gjobs ||
        eng_gmask_create(tok, &e->gm, &gerr) != KILN_OK) {
        eng_engine_stop(e);
        return kiln_fail(err, KILN_E_NOMEM, "engine: out of memory");
    }
    e->stats.kv_block_tokens = rt->o.block_tokens;
    kiln_err serr;
    if (eng_spec_opts_validate(&e->o.spec, &serr) != KILN_OK) {
        eng_engine_stop(e);
        return kiln_fail(err, KILN_E_INVALID, "%s", serr.msg);
    }
    if (e->o.spec.method == ENG_SPEC_DRAFT && !e->o.draft) {
        eng_engine_stop(e);
        return kiln_fail(err, KILN_E_INVALID, "--spec draft needs a draft model (--draft-model DIR)");
    }
    if (e->o.spec.method == ENG_SPEC_MTP && !e->o.mtp) {
        eng_engine_stop(e);
        return kiln_fail(err, KILN_E_INVALID, "--spec mtp needs the model's MTP head (mtp.*)");
    }
    if (e->o.mtp) { /* its feeds and drafts, and the target's hidden-state tap */
        size_t ms = (size_t)rt->o.max_seqs;
        int64_t H = mdl_config(rt->model)->hidden;
        e->mjobs = calloc(ms, sizeof *e->mjobs);
        e->mrows = calloc(ms, sizeof *e->mrows);
        e->mat = calloc(ms, sizeof *e->mat);
        e->mk = calloc(ms, sizeof *e->mk);
        e->mn = calloc(ms, sizeof *e->mn);
        e->mitem = calloc(ms, sizeof *e->mitem);
        e->mout = calloc(ms * ENG_SEQ_MAX_DRAFT, sizeof *e->mout);
        if (!e->hidden) {
            e->hidden_rows = rt->o.max_step_tokens;
            e->hidden = malloc(sizeof(float) * (size_t)e->hidden_rows * (size_t)H);
        }
        if (!e->mjobs || !e->mrows || !e->mat || !e->mk || !e->mn || !e->mitem || !e->mout ||
            !e->hidden) {
            eng_engine_stop(e);
            return kiln_fail(err, KILN_E_NOMEM, "engine: out of memory");
        }
    }
    if (e->o.draft) {
        const eng_runtime *drt = eng_draft_runtime(e->o.draft);
        if (drt->o.max_seqs < rt->o.max_seqs || drt->o.ctx < rt->o.ctx ||
            mdl_vocab(drt->model) != mdl_vocab(rt->model)) {
            eng_engine_stop(e);
            return kiln_fail(err, KILN_E_INVALID, "the draft model was opened for another target");
        }
        size_t ms = (size_t)rt->o.max_seqs;
        e->djobs = calloc(ms, sizeof *e->djobs);
        e->dbuf = calloc(ms * ENG_SPEC_MAX_DRAFT, sizeof *e->dbuf);
        e->djob_item = calloc(ms, sizeof *e->djob_item);
        e->dpick = calloc(ms, sizeof *e->dpick);
        if (!e->djobs || !e->dbuf || !e->djob_item || !e->dpick) {
            eng_engine_stop(e);
            return kiln_fail(err, KILN_E_NOMEM, "engine: out of memory");
        }
        e->stats.draft_on = true;
        e->stats.draft = eng_draft_get_info(e->o.draft);
    }
    e->stats.spec_method = e->o.spec.method;
    e->stats.spec_max_draft = e->o.spec.max_draft;
    snprintf(e->stats.kv_format, sizeof e->stats.kv_format, "%s", rt->kv_desc);
    e->stats.isa = kn_isa_name();
    e->stats.matmul = kn_matmul_mode();
    e->stats.kv_bytes_per_token =
        kv_pool_block_bytes(kv_pool_cfg(rt->kv)) / (uint64_t)rt->o.block_tokens;
    /* --kv-budget projections: each group at its bytes, window-capped, the
     * f32 positions before --quantized-kv-start at theirs */
    const kv_pool_config *kc = kv_pool_cfg(rt->kv);
    const kv_layout *kl = kv_pool_layout(rt->kv);
    eng_kv_cost_init(&e->kv_cost, kl, kc->fmt, kc->block_tokens, kc->max_chunk);
    const wt_config *mc = mdl_config(rt->model); /* sliding windows: /stats kv */
    e->stats.kv_window = rt->o.kv_window;
    e->stats.kv_seq_max_blocks =
        kv_seq_max_blocks(kl->window[0], kc->max_chunk, kc->block_tokens, rt->o.ctx);
    e->stats.kv_n_groups = kl->n_groups;
    e->stats.kv_state_every = kc->state_every;
    for (int g = 0; g < kl->n_groups; g++) {
        e->stats.kv_group_window[g] = kl->window[g];
        e->stats.kv_group_layers[g] = kv_layout_layers(kl, g);
        e->stats.kv_group_bytes_per_token[g] = e->kv_cost.bpt[g];
    }
    e->stats.kv_sliding_window = 0;
    for (int32_t L = 0; L < mdl_get_plan(rt->model)->n_layers; L++)
        if (mdl_get_plan(rt->model)->layer[L].window > e->stats.kv_sliding_window)
            e->stats.kv_sliding_window = mdl_get_plan(rt->model)->layer[L].window;
    e->stats.kv_sliding_layers = eng_fit_sliding_layers(mc);
    e->stats.kv_bytes_per_token_full_layers =
        eng_fit_kv_bytes_layers(mc, kc->fmt, KV_CLASS_MAIN, 0);
    e->stats.kv_bytes_per_token_sliding_layers =
        eng_fit_kv_bytes_layers(mc, kc->fmt, KV_CLASS_MAIN, 1);
    e->stats.kv = kv_pool_get_stats(rt->kv);
    if (o->ssd) { /* SSD tier: spill-on-evict + RAM-miss loads in the pool, write-behind here */
        kiln_err werr;
        kv_ssd_attach(o->ssd, rt->kv);
        /* stale checkpoints go now and, on a long-running server, every minute */
        int n = kv_ssd_set_ckpt_max_age(o->ssd, o->ckpt_max_age_s);
        if (n) KLOG_INFO("engine", "removed stale generation checkpoints n=%d", n);
        if (eng_ssd_create(o->ssd, rt->kv, o->ssd_writebehind, &e->ssdw, &werr) != KILN_OK) {
            eng_engine_stop(e);
            return kiln_fail(err, werr.code, "%s", werr.msg);
        }
    }
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        eng_engine_stop(e);
        return kiln_fail(err, KILN_E_NOMEM, "engine: cannot start its thread");
    }
    e->thread_started = 1;
    *out = e;
    return KILN_OK;
}

void eng_engine_stop(eng_engine *e)
{
    if (!e) return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stopping = 1;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    if (e->ssdw) kv_ssd_attach(NULL, e->rt->kv); /* the tier may close before the pool */
    eng_ssd_free(e->ssdw);
    free(e->running);
    free(e->items);
    free(e->owners);
    free(e->gjobs);
    free(e->djobs);
    free(e->mjobs);
    free(e->mrows);
    free(e->mat);
    free(e->mk);
    free(e->mn);
    free(e->mitem);
    free(e->mout);
    free(e->dbuf);
    free(e->djob_item);
    free(e->dpick);
    eng_gmask_destroy(e->gm);
    free(e->hidden);
    free(e);
}

eng_stats eng_get_stats(eng_engine *e)
{
    pthread_mutex_lock(&e->mu);
    eng_stats s = e->stats;
    s.waiting = e->n_waiting;
    pthread_mutex_unlock(&e->mu);
    s.grammar = eng_gmask_get_stats(e->gm); /* its own lock */
    if (e->o.ssd) { /* kv_ssd locks inside */
        s.ssd_on = true;
        s.ssd = kv_ssd_get_stats(e->o.ssd);
    }
    return s;
}
