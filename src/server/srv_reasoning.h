/*
 * srv_reasoning.h — splits generated text into `reasoning` (inside a
 * think block) and `content`, incrementally, for streaming and not.
 *
 *   srv_think t;
 *   srv_think_start(&t, style, true, prompt, len);       // or srv_think_init (<think> tags)
 *   srv_think_push(&t, text, n, &content, &reasoning);   // per token
 *   srv_think_flush(&t, &content, &reasoning);           // at the end
 *
 * Styles (what the model writes around its reasoning):
 *   SRV_THINK_TAGS     <think>…</think>                  (Qwen3, DeepSeek-R1, …)
 *   SRV_THINK_CHANNEL  <|channel>thought\n…<channel|>    (Gemma 4; "thought\n" is a label,
 *                                                         not reasoning)
 * A tag or label split across pushes is held back until it is complete or
 * ruled out. Newlines right after the close tag are dropped (models write
 * "</think>\n\n"). When the prompt itself ends inside an open block (templates
 * that open it for the model), the split starts in reasoning.
 */
#ifndef KILN_SRV_REASONING_H
#define KILN_SRV_REASONING_H

#include <stdbool.h>
#include <stddef.h>

#include "server/srv_buf.h"
#include "tokenizer/tok.h"

typedef enum { SRV_THINK_TAGS, SRV_THINK_CHANNEL, SRV_THINK_COUNT } srv_think_style;

typedef struct {
    const char *open, *close; /* the tags */
    const char *label;        /* markup right after open ("" none) */
} srv_think_marks;

typedef struct {
    srv_think_style style;
    bool enabled;     /* false: everything is content */
    bool label;       /* at the start of a block: a label may still come */
    bool inside;      /* in a think block */
    bool after_close; /* just left one: drop leading newlines */
    bool leading;     /* only a block at the very start counts (a grammar constrains the rest:
                         "<think>" later is text, e.g. inside a JSON string); set after init */
    bool content;     /* non-whitespace content emitted */
    char hold[16];    /* a possible partial tag */
    size_t n_hold;
} srv_think;

/* API */
/* <think> tags. */
void srv_think_init(srv_think *t, bool enabled, bool start_inside);
/* Any style; starts inside when prompt[0..len) ends inside an open block. */
void srv_think_start(srv_think *t, srv_think_style style, bool enabled, const char *prompt,
                     size_t len);
const srv_think_marks *srv_think_marks_of(srv_think_style style);
/* The style a chat model writes: the tokenizer's pieces (tok may be NULL),
 * else the template text (may be NULL); -1 when it shows none. */
int srv_think_detect(const tok_tokenizer *tok, const char *template_text);
/* Are the style's tags special tokens of tok (so detokenizing must keep them)? */
bool srv_think_needs_special(srv_think_style style, const tok_tokenizer *tok);
/* Does the rendered prompt end inside an open <think> block? */
bool srv_think_prompt_open(const char *prompt, size_t len);
bool srv_think_prompt_open_as(srv_think_style style, const char *prompt, size_t len);
/* Appends the split of s[0..n) to content and reasoning; -1 when out of memory. */
int srv_think_push(srv_think *t, const char *s, size_t n, srv_buf *content, srv_buf *reasoning);
int srv_think_flush(srv_think *t, srv_buf *content, srv_buf *reasoning);

#endif
