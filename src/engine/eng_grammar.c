/*
 * eng_grammar.c — grammar states of requests, the mask worker, sampling under
 * a mask and a length budget (see eng_grammar.h).
 *
 * State of a request's constraint (the function that moves it):
 *   WAITING -> ACTIVE   eng_gstate_accept()  a trigger token was sampled
 *   ACTIVE  -> DONE     eng_gstate_accept()  the grammar allows nothing more
 * The worker: eng_gmask_begin hands it a list of states and signals; it
 * computes each state's mask into the state's own buffer; eng_gmask_end waits
 * for the list to be done. Invariants:
 *   (1) between begin and end only the worker touches the listed states
 *   (2) a state's mask_ok is set only for its current parse state (accept clears it)
 * Threads: the engine thread, and the worker under (1).
 */
#include "engine/eng_grammar.h"
#include "util/kiln_assert.h"
#include "util/kiln_log.h"
#include "util/plat.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { GS_WAITING, GS_ACTIVE, GS_DONE };

struct eng_gstate {
    eng_gmask *gm;     /* BORROWED */
    gr_matcher *m;     /* OWNED */
    uint64_t *mask;    /* OWNED [words]: the allowed tokens of the current parse state */
    uint64_t *scratch; /* OWNED [words]: budget mask */
    bool mask_ok;      /* (2) */
    kiln_code mask_rc;
    kiln_err mask_err;
    int state;
    int32_t *triggers; /* OWNED */
    int32_t n_triggers;
    int32_t pushed;    /* speculative accepts to roll back (eng_gstate_push) */
    int saved_state;   /* state before the first push */
    bool in_push;
};

struct eng_gmask {
    const tok_tokenizer *tok; /* BORROWED */
    gr_vocab *v;              /* OWNED; built on first use */
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    eng_gstate **jobs; /* under mu: the list being worked on */
    int32_t n_jobs, cap_jobs;
    int pending;        /* under mu: a list was handed over and is not done */
    int stop;           /* under mu */
    eng_gmask_stats st; /* under mu */
};

/* ---------------------------------------------------------------- worker */

static void compute(eng_gstate *gs)
{
    gs->mask_rc = gr_matcher_mask(gs->m, gs->mask, &gs->mask_err);
    gs->mask_ok = gs->mask_rc == KILN_OK;
}

static void *worker(void *arg)
{
    eng_gmask *gm = arg;
    pthread_mutex_lock(&gm->mu);
    for (;;) {
        while (!gm->pending && !gm->stop)
            pthread_cond_wait(&gm->cv, &gm->mu);
        if (gm->stop) break;
        int32_t n = gm->n_jobs;
        eng_gstate **jobs = gm->jobs;
        pthread_mutex_unlock(&gm->mu);
        double t0 = plat_now();
        for (int32_t i = 0; i < n; i++)
            compute(jobs[i]); /* (1) */
        double dt = plat_now() - t0;
        pthread_mutex_lock(&gm->mu);
        gm->st.masks += (uint64_t)n;
        gm->st.mask_s += dt;
        gm->pending = 0;
        pthread_cond_broadcast(&gm->cv);
    }
    pthread_mutex_unlock(&gm->mu);
    return NULL;
}

kiln_code eng_gmask_create(const tok_tokenizer *tok, eng_gmask **out, kiln_err *err)
{
    *out = NULL;
    eng_gmask *gm = calloc(1, sizeof *gm);
    if (!gm) return kiln_fail(err, KILN_E_NOMEM, "grammar: out of memory");
    gm->tok = tok;
    pthread_mutex_init(&gm->mu, NULL);
    pthread_cond_init(&gm->cv, NULL);
    *out = gm;
    return KILN_OK;
}

void eng_gmask_destroy(eng_gmask *gm)
{
    if (!gm) return;
    if (gm->started) {
        pthread_mutex_lock(&gm->mu);
        gm->stop = 1;
        pthread_cond_broadcast(&gm->cv);
        pthread_mutex_unlock(&gm->mu);
        pthread_join(gm->thread, NULL);
    }
    pthread_mutex_destroy(&gm->mu);
    pthread_cond_destroy(&gm->cv);
    free(gm->jobs);
    gr_vocab_destroy(gm->v);
    free(gm);
}

eng_gmask_stats eng_gmask_get_stats(const eng_gmask *gm)
{
    eng_gmask_stats s;
    pthread_mutex_lock((pthread_mutex_t *)&gm->mu);
    s = gm->st;
    pthread_mutex_unlock((pthread_mutex_t *)&gm->mu);
    return s;
}

void eng_gmask_begin(eng_gmask *gm, eng_gstate *const *states, int32_t n)
{
    int32_t k = 0;
    pthread_mutex_lock(&gm->mu);
    if (n > gm->cap_jobs) {
        eng_gstate **p = realloc(gm->jobs, sizeof *p * (size_t)n);
        if (!p) {
            pthread_mutex_unlock(&gm->mu);
            return; /* the masks are computed at sampling time instead */
        }
        gm->jobs = p;
        gm->cap_jobs = n;
    }
    for (int32_t i = 0; i < n; i++)
        if (states[i] && states[i]->state == GS_ACTIVE && !states[i]->mask_ok)
            gm->jobs[k++] = states[i];
    gm->n_jobs = k;
    if (k && !gm->started) {
        gm->started = pthread_create(&gm->thread, NULL, worker, gm) == 0;
        if (!gm->started) KLOG_WARN("grammar", "no mask worker thread: masks computed in the step");
    }
    if (k && gm->started) {
        gm->pending = 1;
        pthread_cond_broadcast(&gm->cv);
    }
    pthread_mutex_unlock(&gm->mu);
}

void eng_gmask_end(eng_gmask *gm)
{
    double t0 = plat_now();
    pthread_mutex_lock(&gm->mu);
    int waited = gm->pending;
    while (gm->pending)
        pthread_cond_wait(&gm->cv, &gm->mu);
    if (waited) gm->st.wait_s += plat_now() - t0;
    gm->n_jobs = 0;
    pthread_mutex_unlock(&gm->mu);
}

/* ---------------------------------------------------------------- states */

kiln_code eng_gstate_create(eng_gmask *gm, gr_grammar *g, const int32_t *triggers,
                            int32_t n_triggers, eng_gstate **out, kiln_err *err)
{
    *out = NULL;
    if (!gm->v) {
        double t0 = plat_now();
        kiln_code rc = gr_vocab_create(gm->tok, &gm->v, err);
        if (rc) return rc;
        KLOG_INFO("grammar", "token trie built tokens=%d ms=%.1f", (int)gr_vocab_size(gm->v),
                  1e3 * (plat_now() - t0));
    }
    eng_gstate *gs = calloc(1, sizeof *gs);
    if (!gs) return kiln_fail(err, KILN_E_NOMEM, "grammar: out of memory");
    gs->gm = gm;
    size_t words = gr_vocab_words(gm->v);
    gs->mask = malloc(words * 8);
    gs->scratch = malloc(words * 8);
    if (n_triggers > 0) gs->triggers = malloc(sizeof *gs->triggers * (size_t)n_triggers);
    if (!gs->mask || !gs->scratch || (n_triggers > 0 && !gs->triggers)) {
        eng_gstate_free(gs);
        return kiln_fail(err, KILN_E_NOMEM, "grammar: out of memory");
    }
    kiln_code rc = gr_matcher_create(g, gm->v, &gs->m, err);
    if (rc) {
        eng_gstate_free(gs);
        return rc;
    }
    if (n_triggers > 0) memcpy(gs->triggers, triggers, sizeof *triggers * (size_t)n_triggers);
    gs->n_triggers = n_triggers;
    gs->state = n_triggers > 0 ? GS_WAITING : GS_ACTIVE;
    *out = gs;
    return KILN_OK;
}

void eng_gstate_free(eng_gstate *gs)
{
    if (!gs) return;
    gr_matcher_destroy(gs->m);
    free(gs->mask);
    free(gs->scratch);
    free(gs->triggers);
    free(gs);
}

bool eng_gstate_active(const eng_gstate *gs)
{
    return gs && gs->state == GS_ACTIVE;
}

bool eng_gstate_done(const eng_gstate *gs)
{
    return gs && gs->state == GS_DONE;
}

bool eng_gstate_complete(const eng_gstate *gs)
{
    return gs && gs->state != GS_WAITING && gr_matcher_accepting(gs->m);
}

static void bit_set(uint64_t *b, int32_t t)
{
    b[t >> 6] |= 1ull << (t & 63);
}

static void bit_clear(uint64_t *b, int32_t t)
{
    b[t >> 6] &= ~(1ull << (t & 63));
}

static bool bit_get(const uint64_t *b, int32_t t)
{
    return b[t >> 6] >> (t & 63) & 1;
}

/* The ids that end the request: only where the text is a sentence. */
static void stops_fix(const eng_gstate *gs, uint64_t *bits, const int32_t *stop_ids, int32_t n_stop,
                      int32_t vocab_bits)
{
    bool ok = gr_matcher_accepting(gs->m);
    for (int32_t i = 0; i < n_stop; i++) {
        int32_t t = stop_ids[i];
        if (t < 0 || t >= vocab_bits) continue;
        if (ok)
            bit_set(bits, t);
        else
            bit_clear(bits, t);
    }
}

int32_t eng_gstate_sample(eng_gstate *gs, const eng_sampling *sp, float *logits, int64_t vocab,
                          const int32_t *hist, int64_t n_hist, const int32_t *stop_ids,
                          int32_t n_stop, int32_t remaining, eng_rng *rng, void *scratch,
                          eng_sample_out *out, kiln_err *err)
{
    if (!gs || gs->state != GS_ACTIVE)
        return eng_sample_row_masked(sp, logits, vocab, hist, n_hist, NULL, rng, scratch, out);
    if (!gs->mask_ok) compute(gs);
    if (!gs->mask_ok) {
        if (err) *err = gs->mask_err;
        return -1;
    }
    eng_gmask *gm = gs->gm;
    int32_t nbits = gr_vocab_size(gm->v);
    if (nbits > vocab) nbits = (int32_t)vocab; /* ids past the model's logits cannot be drawn */
    size_t words = ((size_t)vocab + 63) / 64;
    if (words > gr_vocab_words(gm->v)) words = gr_vocab_words(gm->v);
    /* more logits than the tokenizer has ids (a padded embedding): the ids
     * past the mask's words are never allowed, and the sampler reads the mask
     * only that far */
    if (vocab > (int64_t)words * 64) vocab = (int64_t)words * 64;
    stops_fix(gs, gs->mask, stop_ids, n_stop, nbits);
    /* the model may have fewer logits than the tokenizer has ids: clear the tail */
    if ((int64_t)words * 64 > vocab)
        gs->mask[words - 1] &= vocab % 64 ? (1ull << (vocab % 64)) - 1 : ~0ull;
    int32_t tok =
        eng_sample_row_masked(sp, logits, vocab, hist, n_hist, gs->mask, rng, scratch, out);
    if (tok < 0) {
        if (gr_matcher_accepting(gs->m)) return -2; /* a sentence nothing may end: stop */
        kiln_fail(err, KILN_E_INTERNAL,
                  "grammar: no token can continue the output (the "
                  "tokenizer lacks the bytes the grammar needs)");
        return -1;
    }
    /* the length budget: after this token R-1 tokens are left, one byte each at worst */
    int32_t left = remaining - 1;
    bool is_stop = false;
    for (int32_t i = 0; i < n_stop && !is_stop; i++)
        is_stop = stop_ids[i] == tok;
    if (is_stop || left < 0 || gr_matcher_distance(gs->m) > remaining) return tok;
    if (gr_matcher_distance_after(gs->m, tok) <= left) return tok;
    kiln_code rc = gr_matcher_mask_within(gs->m, left, gs->scratch, err);
    if (rc) return -1;
    stops_fix(gs, gs->scratch, stop_ids, n_stop, nbits);
    for (size_t w = 0; w < words; w++)
        gs->scratch[w] &= gs->mask[w];
    if (!bit_get(gs->scratch, tok)) {
        eng_sampling plain = *sp; /* the processors already ran on these logits */
        plain.n_bias = 0;
        plain.repetition_penalty = 1.0f;
        plain.presence_penalty = plain.frequency_penalty = 0.0f;
        int32_t t2 = eng_sample_row_masked(&plain, logits, vocab, hist, n_hist, gs->scratch, rng,
                                           scratch, out);
        pthread_mutex_lock(&gm->mu);
        gm->st.budget_redraws++;
        pthread_mutex_unlock(&gm->mu);
        if (t2 >= 0) tok = t2;
    }
    return tok;
}

kiln_code eng_gstate_accept(eng_gstate *gs, int32_t tok, bool is_stop, kiln_err *err)
{
    if (!gs || gs->state == GS_DONE) return KILN_OK;
    if (gs->state == GS_WAITING) {
        for (int32_t i = 0; i < gs->n_triggers; i++)
            if (gs->triggers[i] == tok) gs->state = GS_ACTIVE;
        return KILN_OK;
    }
    if (is_stop) return KILN_OK; /* the request ends here */
    gs->mask_ok = false;
    kiln_code rc = gr_matcher_accept_token(gs->m, tok, err);
    if (rc) return rc;
    if (gr_matcher_done(gs->m)) gs->state = GS_DONE;
    return KILN_OK;
}

/* ---------------------------------------------------------------- speculative decoding */

static bool in_list(const int32_t *ids, int32_t n, int32_t tok)
{
    for (int32_t i = 0; i < n; i++)
        if (ids[i] == tok) return true;
    return false;
}

int32_t eng_gstate_draft_prefix(eng_gstate *gs, const int32_t *toks, int32_t n,
                                const int32_t *ends, int32_t n_ends)
{
    if (!gs) return n;
    if (gs->state == GS_DONE) return 0;
    int32_t k = 0;
    while (k < n && !in_list(ends, n_ends, toks[k]) &&
           !(gs->state == GS_WAITING && in_list(gs->triggers, gs->n_triggers, toks[k])))
        k++;
    if (gs->state == GS_WAITING || k == 0) return k;
    int32_t ok = gr_matcher_try_tokens(gs->m, toks, k);
    if (ok > 0 && gr_matcher_rollback(gs->m, ok, NULL) != KILN_OK) return 0;
    return ok;
}

kiln_code eng_gstate_push(eng_gstate *gs, int32_t tok, kiln_err *err)
{
    if (!gs) return KILN_OK;
    if (!gs->in_push) {
        gs->in_push = true;
        gs->saved_state = gs->state;
        gs->pushed = 0;
    }
    if (gs->state != GS_ACTIVE) return KILN_OK; /* WAITING: drafts hold no trigger */
    kiln_code rc = gr_matcher_accept_token(gs->m, tok, err);
    if (rc) return rc;
    gs->pushed++;
    gs->mask_ok = false;
    if (gr_matcher_done(gs->m)) gs->state = GS_DONE;
    return KILN_OK;
}

void eng_gstate_unwind(eng_gstate *gs)
{
    if (!gs || !gs->in_push) return;
    if (gs->pushed > 0) {
        kiln_code rc = gr_matcher_rollback(gs->m, gs->pushed, NULL);
        KILN_ASSERT(rc == KILN_OK); /* the pushes are on the matcher's history */
        gs->mask_ok = false;
    }
    gs->state = gs->saved_state;
    gs->pushed = 0;
    gs->in_push = false;
}
