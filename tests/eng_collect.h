/*
 * eng_collect.h — an engine request's whole event stream, gathered for the
 * engine tests (test_eng_*.c): tokens with their logprob and best
 * alternative, text, finish, and the last event's counts; same() compares two
 * results bitwise (the identity the engine promises whatever shares a step).
 */
#ifndef KILN_ENG_COLLECT_H
#define KILN_ENG_COLLECT_H

#include <stdio.h>
#include <string.h>

#include "engine/eng_engine.h"

#define COLLECT_MAXT 1024

typedef struct {
    int32_t toks[COLLECT_MAXT];
    float lp[COLLECT_MAXT];
    int32_t top0[COLLECT_MAXT]; /* the best alternative's id at each token (-1: none asked) */
    int n_toks;
    char text[16384];
    size_t text_len;
    eng_finish finish;
    int32_t cached, prompt_tokens, completion_tokens, steps;
    int32_t accepted, rejected; /* speculative decoding */
    char stop_matched[64];      /* copied: the event's pointer lives as long as the handle */
    char err[256];              /* an error event's message */
} collected;

/* Reads h's events until the last one (DONE or ERROR) into *c: 0, or -1 when
 * no event came for two minutes. */
static inline int collect(eng_handle *h, collected *c)
{
    memset(c, 0, sizeof *c);
    eng_event ev;
    while (eng_handle_next(h, &ev, 120000) == 0) {
        if (ev.text_len && c->text_len + ev.text_len < sizeof c->text) {
            memcpy(c->text + c->text_len, ev.text, ev.text_len);
            c->text_len += ev.text_len;
        }
        if (ev.kind == ENG_EV_TOKEN && c->n_toks < COLLECT_MAXT) {
            c->lp[c->n_toks] = ev.so.logprob;
            c->top0[c->n_toks] = ev.so.n_top ? ev.so.top_ids[0] : -1;
            c->toks[c->n_toks++] = ev.token;
        }
        int last = ev.kind != ENG_EV_TOKEN;
        if (last) {
            c->finish = ev.kind == ENG_EV_ERROR ? ENG_FINISH_ERROR : ev.finish;
            c->cached = ev.cached_tokens;
            c->prompt_tokens = ev.prompt_tokens;
            c->completion_tokens = ev.completion_tokens;
            c->steps = ev.steps;
            c->accepted = ev.spec_accepted;
            c->rejected = ev.spec_rejected;
            if (ev.stop_matched)
                snprintf(c->stop_matched, sizeof c->stop_matched, "%s", ev.stop_matched);
            if (ev.kind == ENG_EV_ERROR) snprintf(c->err, sizeof c->err, "%s", ev.err.msg);
        }
        eng_event_clear(&ev);
        if (last) return 0;
    }
    return -1;
}

/* Tokens, logprobs, alternatives, text, finish and count, bitwise. */
static inline int same(const collected *a, const collected *b)
{
    return a->n_toks == b->n_toks && a->finish == b->finish && a->text_len == b->text_len &&
           a->completion_tokens == b->completion_tokens &&
           memcmp(a->toks, b->toks, sizeof(int32_t) * (size_t)a->n_toks) == 0 &&
           memcmp(a->lp, b->lp, sizeof(float) * (size_t)a->n_toks) == 0 &&
           memcmp(a->top0, b->top0, sizeof(int32_t) * (size_t)a->n_toks) == 0 &&
           memcmp(a->text, b->text, a->text_len) == 0;
}

#endif
