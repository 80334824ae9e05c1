/*
 * eng_grammar.h — constrained decoding inside the engine: each request's
 * grammar state, token masks computed beside the forward pass, sampling under
 * a mask with a length budget.
 *
 *   eng_gmask *gm;  eng_gmask_create(tok, &gm, &err);          // per engine
 *   eng_gstate *gs; eng_gstate_create(gm, grammar, triggers, n, &gs, &err);   // per request
 *   eng_gmask_begin(gm, states, n);     // before the step's forward pass: masks start
 *   ... mdl forward ...
 *   eng_gmask_end(gm);                  // after it: masks are ready
 *   tok = eng_gstate_sample(gs, ...);   // processors -> mask -> filters -> draw
 *   eng_gstate_accept(gs, tok, &err);   // advances the parse; eng_gstate_done ends it
 *
 * A state is WAITING until one of its trigger tokens is sampled (special tokens
 * such as Mistral's [TOOL_CALLS]; no triggers = ACTIVE from the first token),
 * then ACTIVE. Masks depend only on the parse state, which is final before
 * the step, so one worker thread computes them while the model runs.
 * The length budget: with R tokens left (max_tokens and the context), a token
 * after which the text cannot be completed within R-1 bytes is not drawn
 * (docs/structured-output.md): output that fits its budget always finishes.
 * Threads: everything from the engine thread; the worker only touches the
 * states handed to eng_gmask_begin until eng_gmask_end returns.
 */
#ifndef KILN_ENG_GRAMMAR_H
#define KILN_ENG_GRAMMAR_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/eng_sample.h"
#include "grammar/gr.h"
#include "tokenizer/tok.h"

typedef struct eng_gmask eng_gmask;
typedef struct eng_gstate eng_gstate;

typedef struct {
    uint64_t masks;          /* masks computed */
    double mask_s;           /* time computing them (worker) */
    double wait_s;           /* time the engine waited for them after its forward pass */
    uint64_t budget_redraws; /* draws repeated under the length budget */
} eng_gmask_stats;

/* API */
/* tok BORROWED (outlives gm). The vocabulary is built on first use. */
kiln_code eng_gmask_create(const tok_tokenizer *tok, eng_gmask **out, kiln_err *err);
void eng_gmask_destroy(eng_gmask *gm); /* NULL is a no-op; joins the worker */
eng_gmask_stats eng_gmask_get_stats(const eng_gmask *gm);
/* g is retained; triggers copied. */
kiln_code eng_gstate_create(eng_gmask *gm, gr_grammar *g, const int32_t *triggers,
                            int32_t n_triggers, eng_gstate **out, kiln_err *err);
void eng_gstate_free(eng_gstate *gs); /* NULL is a no-op */
bool eng_gstate_active(const eng_gstate *gs);
bool eng_gstate_done(const eng_gstate *gs);     /* the grammar allows nothing more */
bool eng_gstate_complete(const eng_gstate *gs); /* ACTIVE or DONE, and the output is a sentence */
/* Starts computing the masks of the ACTIVE states among states[0..n). */
void eng_gmask_begin(eng_gmask *gm, eng_gstate *const *states, int32_t n);
void eng_gmask_end(eng_gmask *gm);
/* Draws a token under the state's mask (computed by begin/end, or now).
 * stop_ids[0..n_stop): the ids that end the request (EOS, stop tokens): allowed
 * only where the text is a sentence of the grammar. remaining: tokens left
 * including this one. Returns the token, or -1 with *err set; -2 when nothing
 * may follow and the request must end (a sentence, but no id may end it). */
int32_t eng_gstate_sample(eng_gstate *gs, const eng_sampling *sp, float *logits, int64_t vocab,
                          const int32_t *hist, int64_t n_hist,     /* penalties' history */
                          const int32_t *stop_ids, int32_t n_stop, /* ids that end it */
                          int32_t remaining, eng_rng *rng, void *scratch, eng_sample_out *out,
                          kiln_err *err); /* OUT */
/* Advances over a sampled (or replayed) token. */
kiln_code eng_gstate_accept(eng_gstate *gs, int32_t tok, bool is_stop, kiln_err *err);

/* Speculative decoding (docs/speculative.md). The longest prefix of the draft
 * toks[0..n) the state can verify: tokens the grammar allows (checked by
 * advancing and rolling back), cut before an end id, and while WAITING before
 * a trigger (the parse state stays the same through it). */
int32_t eng_gstate_draft_prefix(eng_gstate *gs, const int32_t *toks, int32_t n,
                                const int32_t *ends, int32_t n_ends);
/* During verification: advances over an accepted draft token so the next
 * position is sampled under its own mask; eng_gstate_unwind undoes every push
 * (the emitted tokens are then accepted as usual). */
kiln_code eng_gstate_push(eng_gstate *gs, int32_t tok, kiln_err *err);
void eng_gstate_unwind(eng_gstate *gs);

#endif
