/*
 * eng_engine.h — the serving engine: one engine thread that owns the model,
 * the KV pool and the scheduler, fed by any number of client threads.
 *
 *   eng_engine *e;  eng_engine_start(rt, tok, &opts, &e, &err);
 *   eng_params p = eng_params_default();  p.prompt = ids; p.n_prompt = n; p.max_tokens = 64;
 *   eng_handle *h;  if (eng_submit(e, &p, &h, &err)) ...;   // KILN_E_BUSY: queue full
 *   eng_event ev;
 *   while (eng_handle_next(h, &ev, -1) == 0) {              // blocks; -1 = no timeout
 *       if (ev.kind == ENG_EV_TOKEN) fwrite(ev.text, 1, ev.text_len, out);
 *       int last = ev.kind != ENG_EV_TOKEN;
 *       eng_event_clear(&ev);
 *       if (last) break;
 *   }
 *   eng_handle_release(h);          // after DONE/ERROR, or early: cancels the request
 *   eng_engine_stop(e);             // cancels what runs, joins the thread
 *
 * Every request goes through the same batched step (continuous batching):
 * each step runs one decode token for every running sequence plus prefill
 * chunks for new ones under a token budget. Prompts share KV blocks with any
 * cached prefix (zero copy). Text is detokenized in the engine so that stop
 * strings are matched on decoded text with hold-back: no part of a stop string
 * is ever emitted, and the match itself is excluded.
 * Threads: eng_submit / eng_handle_* / eng_get_stats from any thread.
 */
#ifndef KILN_ENG_ENGINE_H
#define KILN_ENG_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/eng_grammar.h"
#include "engine/eng_pool.h"
#include "engine/eng_runtime.h"
#include "engine/eng_sample.h"
#include "engine/eng_draft.h"
#include "engine/eng_mtp.h"
#include "engine/eng_spec.h"
#include "engine/eng_ssd.h"
#include "tokenizer/tok.h"

typedef struct eng_engine eng_engine;
typedef struct eng_handle eng_handle;

typedef enum { ENG_FINISH_NONE, ENG_FINISH_STOP, ENG_FINISH_LENGTH, ENG_FINISH_CANCELLED, ENG_FINISH_ERROR } eng_finish;

#define ENG_MAX_STOP 16

typedef struct {
    const int32_t *prompt;   /* BORROWED during eng_submit (copied) */
    int32_t n_prompt;
    int32_t max_tokens;      /* >= 1 */
    eng_sampling sp;         /* sp.logit_bias BORROWED during eng_submit (copied) */
    const char *stop[ENG_MAX_STOP]; /* BORROWED during eng_submit (copied); matched on text */
    int n_stop;
    const int32_t *stop_ids; /* extra token ids that stop (besides the model's EOS) */
    int32_t n_stop_ids;
    bool ignore_eos;         /* do not stop at the model's EOS ids */
    bool skip_special;       /* detokenize without special tokens (default true) */
    bool want_logprobs;      /* fill eng_event.so */
    uint64_t priority_seq;   /* FIFO order among equals; 0 = arrival */
    /* generation checkpoints (eng_ckpt.h): the seed was picked by the server, not
     * the client (a retry resumes from the stored PRNG state, not the seed), and
     * the choice index among n (told apart when seeds are random) */
    bool seed_random;
    int32_t choice;
    /* constrained decoding (eng_grammar.h, docs/structured-output.md): the
     * output must be a sentence of grammar (BORROWED during eng_submit, which
     * retains it), from the first token, or from after one of the trigger
     * tokens (special tokens such as [TOOL_CALLS]; BORROWED, copied) */
    gr_grammar *grammar;
    const int32_t *grammar_triggers;
    int32_t n_grammar_triggers;
    /* embeddings: not ENG_POOL_NONE makes this a prefill-only request whose final-normed
     * hidden states are pooled (eng_pool.h) into the DONE event's embedding; nothing is
     * sampled (max_tokens and sp are ignored). Modes that read every position take no
     * cached prefix (last-token pooling does). */
    eng_pooling pooling;
    /* LoRA adapters (mdl_lora.h), applied in order; n == 0 = the base model. The
     * adapters are BORROWED until the request's DONE/ERROR event; prefix-cache
     * blocks and generation checkpoints are keyed by the set and its scales. */
    mdl_lora_set lora;
    /* speculative decoding (eng_spec.h, docs/speculative.md): DEFAULT = the
     * engine's opts.spec; OFF, NGRAM or DRAFT (a 400 without a draft model) for this request. max_draft 0 = the
     * engine's (capped at ENG_SPEC_MAX_DRAFT). Never changes the tokens. */
    eng_spec_method spec;
    int32_t spec_max_draft;
} eng_params;

typedef enum { ENG_EV_TOKEN, ENG_EV_DONE, ENG_EV_ERROR } eng_event_kind;

typedef struct {
    eng_event_kind kind;
    /* TOKEN */
    int32_t token;
    char *
        text; /* OWNED: new text (may be empty while a stop string is held back); eng_event_clear */
    size_t text_len;
    eng_sample_out so;       /* when want_logprobs */
    /* DONE (a final text tail may come with it in text) */
    eng_finish finish;
    int32_t prompt_tokens, completion_tokens, cached_tokens;
    int32_t steps;            /* engine steps this request took part in (prefill chunks + decodes) */
    int32_t resumed_tokens;   /* tokens taken from a generation checkpoint (included in completion) */
    const char *stop_matched; /* BORROWED from the handle: the stop string that ended it, or NULL */
    int32_t spec_accepted;    /* draft tokens accepted (OpenAI accepted_prediction_tokens) */
    int32_t spec_rejected;    /* draft tokens verified and rejected (rejected_prediction_tokens) */
    float *embedding;         /* OWNED [n_embedding] (eng_event_clear): the pooled hidden state of
                                 an embedding request (finish STOP); NULL otherwise */
    int32_t n_embedding;
    /* ERROR */
    kiln_err err;
} eng_event;

#define ENG_MIN_PREFILL_SLICE 16

typedef struct {
    int32_t max_queue;        /* waiting requests before eng_submit says KILN_E_BUSY */
    int32_t max_step_tokens;  /* token budget per step (decode + prefill chunks) */
    int32_t prefill_chunk;    /* max prefill tokens of one sequence per step */
    /* While some stream is decoding, the prefill tokens of one step are capped
     * so the step takes about this long at the measured seconds per token
     * (at least ENG_MIN_PREFILL_SLICE tokens): a long prompt never freezes the
     * streams already running for a whole chunk. 0 = whole chunks. Results do
     * not change (prefill is chunking-invariant); only the timing does. */
    double max_stall_s;
    bool prefix_cache;        /* share KV blocks of common prefixes (default true) */
    /* --kv-budget: cap on the sum of running sequences' projected KV bytes
     * (eng_admit_seq_kv_bytes of n_prompt + max_tokens, window-capped:
     * eng_admit_seq_positions). A request whose
     * projection does not fit what is left waits at the head of the queue
     * (FIFO, nobody overtakes it); one over the whole budget is refused at
     * eng_submit with KILN_E_BUDGET. 0 = no cap. */
    uint64_t kv_budget_bytes;
    uint64_t
        kv_bytes_per_token; /* the KV format's bytes per position (eng_fit); needed with a cap */
    /* SSD tier (eng_ssd.h): BORROWED, NULL = none; attached to the runtime's pool */
    struct kv_ssd *ssd;
    bool ssd_writebehind;     /* queue published blocks while idle (default true) */
    int32_t ckpt_every;       /* generation checkpoint every N tokens (needs ssd); 0 = off */
    double ckpt_max_age_s;    /* checkpoints older than this are removed, at start and then
                                 every minute (default 1 day) */
    double ckpt_cancel_keep_s; /* a client-cancelled request's checkpoint is removed this long
                                  after (default 300 s; KILN_CKPT_CANCELLED_KEEP_S) */
    eng_spec_opts spec;       /* speculative decoding defaults (eng_spec_opts_default: off) */
    eng_draft *draft;         /* BORROWED, NULL = none: the draft model (--draft-model) that
                                 ENG_SPEC_DRAFT rows draft with; must outlive the engine */
    eng_mtp *mtp;             /* BORROWED, NULL = none: the model's MTP head (--spec mtp) that
                                 ENG_SPEC_MTP rows draft with; must outlive the engine */
} eng_engine_opts;

typedef struct {
    int32_t running, waiting;
    uint64_t requests_total, requests_finished, requests_cancelled, requests_failed;
    uint64_t prompt_tokens, completion_tokens, cached_tokens;
    uint64_t steps, step_tokens, preemptions;
    double busy_s;            /* wall time inside steps */
    kv_pool_stats kv;
    int32_t kv_block_tokens;
    uint64_t kv_projected_bytes; /* sum over running sequences (--kv-budget accounting) */
    uint64_t kv_budget_waits;    /* times the queue head waited for --kv-budget room */
    int32_t leases;              /* execution leases held (eng_engine_lease_acquire) */
    bool ssd_on;              /* an SSD tier is attached; ssd holds its counters */
    uint64_t ckpt_saved, ckpt_resumed; /* generation checkpoints queued / requests resumed */
    uint64_t nan_logit_rows;  /* logit rows with NaN entries (never sampled; eng_sample.c) */
    kv_ssd_stats ssd;
    char kv_format[128];         /* kv_format_describe of the pool's format */
    const char *isa, *matmul;    /* STATIC strings: kernel variant and matmul mode */
    uint64_t kv_bytes_per_token; /* main-class block bytes / block_tokens (what `kiln fit` says) */
    /* sliding windows (docs/kv.md): the pool's window cap (0 = none), the blocks one
     * sequence of ctx positions holds at most, and the bytes per position of each
     * layer kind (main class; they sum to kv_bytes_per_token) */
    int32_t kv_window, kv_sliding_window, kv_sliding_layers;
    int64_t kv_seq_max_blocks;
    uint64_t kv_bytes_per_token_full_layers, kv_bytes_per_token_sliding_layers;
    /* KV groups (kv_layout.h): each group's retention window (0: keeps every
     * position), layers and bytes per position; block counts in kv.group[] */
    int kv_n_groups;
    int32_t kv_group_window[KV_MAX_GROUPS], kv_group_layers[KV_MAX_GROUPS];
    uint64_t kv_group_bytes_per_token[KV_MAX_GROUPS];
    int32_t kv_state_every; /* hybrid models: the snapshot cadence in blocks (0: off) */
    /* constrained decoding */
    uint64_t grammar_requests;   /* requests with a grammar */
    eng_gmask_stats grammar;     /* masks computed, time, waits, budget redraws */
    /* speculative decoding: the server default and its counters */
    eng_spec_method spec_method;
    int32_t spec_max_draft;
    eng_spec_stats spec;
    eng_spec_stats spec_by[ENG_SPEC_METHODS]; /* by the rows' method ([ENG_SPEC_NGRAM],
                                  [ENG_SPEC_DRAFT]): rows, drafted, accepted, emitted,
                                  skipped_cost */
    bool draft_on;            /* a draft model is loaded; draft holds what it is and does */
    eng_draft_info draft;
} eng_stats;

/* API */
eng_params eng_params_default(void);
eng_engine_opts eng_engine_opts_default(void);
/* Starts the engine thread. rt and tok are BORROWED (must outlive the engine). */
kiln_code eng_engine_start(eng_runtime *rt, const tok_tokenizer *tok, const eng_engine_opts *o,
                           eng_engine **out, kiln_err *err);
/* Cancels running and waiting requests (they get DONE with ENG_FINISH_CANCELLED),
 * joins the thread and frees the engine. Handles stay valid until released. */
void eng_engine_stop(eng_engine *e);
/* Validates and enqueues a request. *out is a new handle: eng_handle_release. */
kiln_code eng_submit(eng_engine *e, const eng_params *p, eng_handle **out, kiln_err *err);
/* Waits up to timeout_ms (< 0: forever) for the next event. Returns 0 with *ev
 * filled, 1 on timeout, -1 when the stream is over (after DONE/ERROR was read). */
int eng_handle_next(eng_handle *h, eng_event *ev, int timeout_ms);
/* Asks the engine to stop this request soon (client gone). */
void eng_handle_cancel(eng_handle *h);
/* Drops the caller's reference; cancels the request if it is still running. */
void eng_handle_release(eng_handle *h);
void eng_event_clear(eng_event *ev);
eng_stats eng_get_stats(eng_engine *e);
const char *eng_finish_name(eng_finish f); /* "stop", "length", ... */
/* Execution lease (POST /admin/lease): while at least one is held no step
 * starts; requests still queue, cancellation and eng_engine_stop still work.
 * Acquire returns once the step in progress (if any) has finished; every
 * acquire needs one release, after which the engine resumes. Any thread. */
void eng_engine_lease_acquire(eng_engine *e);
void eng_engine_lease_release(eng_engine *e);
/* POST /admin/cache/flush: queues every published block not on disk (between
 * two steps) and waits up to timeout_ms for the queue to drain.
 * KILN_E_UNSUPPORTED without an SSD tier. Any thread. */
kiln_code eng_cache_flush(eng_engine *e, int timeout_ms, eng_flush_result *r, kiln_err *err);

#endif
