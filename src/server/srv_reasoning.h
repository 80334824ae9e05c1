/*
 * srv_reasoning.h — splits generated text into `reasoning` (inside
 * <think>…</think>) and `content`, incrementally, for streaming and not.
 *
 *   srv_think t; srv_think_init(&t, true, srv_think_prompt_open(prompt, len));
 *   srv_think_push(&t, text, n, &content, &reasoning);   // per token
 *   srv_think_flush(&t, &content, &reasoning);           // at the end
 *
 * A tag split across pushes is held back until it is complete or ruled out.
 * Newlines right after </think> are dropped (models write "</think>\n\n").
 * When the prompt itself ends inside an open <think> block (templates that
 * open it for the model), the split starts in reasoning.
 */
#ifndef KILN_SRV_REASONING_H
#define KILN_SRV_REASONING_H

#include <stdbool.h>
#include <stddef.h>

#include "server/srv_buf.h"

typedef struct {
    bool enabled;     /* false: everything is content */
    bool inside;      /* in a think block */
    bool after_close; /* just left one: drop leading newlines */
    bool leading;     /* only a block at the very start counts (a grammar constrains the rest:
                         "<think>" later is text, e.g. inside a JSON string); set after init */
    bool content;     /* non-whitespace content emitted */
    char hold[16];    /* a possible partial tag */
    size_t n_hold;
} srv_think;

/* API */
void srv_think_init(srv_think *t, bool enabled, bool start_inside);
/* Does the rendered prompt end inside an open <think> block? */
bool srv_think_prompt_open(const char *prompt, size_t len);
/* Appends the split of s[0..n) to content and reasoning; -1 when out of memory. */
int srv_think_push(srv_think *t, const char *s, size_t n, srv_buf *content, srv_buf *reasoning);
int srv_think_flush(srv_think *t, srv_buf *content, srv_buf *reasoning);

#endif
