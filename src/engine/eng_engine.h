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

#include "engine/eng_runtime.h"
#include "engine/eng_sample.h"
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
} eng_params;

typedef enum { ENG_EV_TOKEN, ENG_EV_DONE, ENG_EV_ERROR } eng_event_kind;

typedef struct {
    eng_event_kind kind;
    /* TOKEN */
    int32_t token;
    char *text;              /* OWNED: new text (may be empty while a stop string is held back); eng_event_clear */
    size_t text_len;
    eng_sample_out so;       /* when want_logprobs */
    /* DONE (a final text tail may come with it in text) */
    eng_finish finish;
    int32_t prompt_tokens, completion_tokens, cached_tokens;
    const char *stop_matched; /* BORROWED from the handle: the stop string that ended it, or NULL */
    /* ERROR */
    kiln_err err;
} eng_event;

typedef struct {
    int32_t max_queue;        /* waiting requests before eng_submit says KILN_E_BUSY */
    int32_t max_step_tokens;  /* token budget per step (decode + prefill chunks) */
    int32_t prefill_chunk;    /* max prefill tokens of one sequence per step */
    bool prefix_cache;        /* share KV blocks of common prefixes (default true) */
} eng_engine_opts;

typedef struct {
    int32_t running, waiting;
    uint64_t requests_total, requests_finished, requests_cancelled, requests_failed;
    uint64_t prompt_tokens, completion_tokens, cached_tokens;
    uint64_t steps, step_tokens, preemptions;
    double busy_s;            /* wall time inside steps */
    kv_pool_stats kv;
    int32_t kv_block_tokens;
    char kv_format[128];         /* kv_format_describe of the pool's format */
    uint64_t kv_bytes_per_token; /* main-class block bytes / block_tokens (what `kiln fit` says) */
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

#endif
