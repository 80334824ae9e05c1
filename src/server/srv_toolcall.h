/*
 * srv_toolcall.h — tool calls parsed out of a model's decoded text, per
 * family, incrementally (the same parser serves streaming and not).
 *
 *   srv_tc_family f = srv_tc_detect(template_text, tok);      // or srv_tc_family_from_name
 *   srv_tc *p;  srv_tc_create(f, tools, &p, &err);
 *   srv_tc_push(p, text, n, &content);     // per token: appends text that is safe to show
 *   srv_tc_finish(p, &content);            // at the end: an unfinished call becomes content
 *   for (i = 0; i < srv_tc_count(p); i++) srv_tc_get(p, i, &name, &args);
 *   srv_tc_free(p);
 *
 * Streaming a call while it is written: after each push, srv_tc_open_get
 * shows the calls of the markup being parsed whose names are known, with the
 * prefix of their arguments text that can no longer change; each has a serial,
 * and when the call is parsed srv_tc_serial(p, i) is that serial and its args
 * begin with (and, whole, equal) every prefix shown: for hermes, llama3 and
 * mistral the arguments object as written less its whitespace, sent as its
 * bytes arrive; for qwen3_coder, gemma and gemma4 the rebuilt object's compact
 * text, one parameter at a time. A call shown and then found malformed (its
 * serial drops below srv_tc_settled without a call) becomes content as usual;
 * a stream has already shown its start.
 *
 * Families (the markup each one's chat template teaches):
 *   hermes       <tool_call>{"name": N, "arguments": {...}}</tool_call>   (Qwen2.5/3, Hermes)
 *   qwen3_coder  <tool_call><function=N><parameter=P>V</parameter></function></tool_call>
 *   llama3       {"name": N, "parameters": {...}} at the start, or after <|python_tag|>
 *   mistral      [TOOL_CALLS][{"name": N, "arguments": {...}}]  or  [TOOL_CALLS]N[ARGS]{...}
 *   gemma        <start_function_call>call:N{k:<escape>v<escape>,n:1}<end_function_call>
 *   gemma4       <|tool_call>call:N{k:<|"|>v<|"|>,n:1,o:{a:[1,2]}}<tool_call|>  (Gemma 4;
 *                the <|tool_response> the model writes after its calls is dropped)
 * Content streams until a marker appears; markup never reaches content; a
 * possible partial marker at the end of a push is held back; markers inside a
 * ``` code block are content. Arguments are always a JSON object, serialized;
 * where the format gives strings (qwen3_coder, gemma, gemma4) values are coerced by
 * the tool's JSON schema. A call that does not parse is returned as content.
 */
#ifndef KILN_SRV_TOOLCALL_H
#define KILN_SRV_TOOLCALL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/srv_buf.h"
#include "tokenizer/tok.h"
#include "util/kiln_err.h"

typedef enum {
    SRV_TC_NONE,
    SRV_TC_HERMES,
    SRV_TC_QWEN3_CODER,
    SRV_TC_LLAMA3,
    SRV_TC_MISTRAL,
    SRV_TC_GEMMA,
    SRV_TC_GEMMA4,
    SRV_TC_COUNT
} srv_tc_family;

typedef struct srv_tc srv_tc; /* opaque streaming parser, one per choice */

/* API */
/* The family whose markup the template text (or else the tokenizer's
 * vocabulary; tok may be NULL) shows; SRV_TC_NONE when none. */
srv_tc_family srv_tc_detect(const char *template_text, const tok_tokenizer *tok);
/* "hermes", "qwen3_coder", "llama3", "mistral", "gemma", "gemma4", "none"; -1 if unknown. */
int srv_tc_family_from_name(const char *name);
const char *srv_tc_family_name(srv_tc_family f);
/* Does the family's markup need special tokens kept in the decoded text? */
bool srv_tc_needs_special(srv_tc_family f);
/* tools (BORROWED, may be NULL; must outlive the parser): the request's
 * OpenAI tools, used to coerce string values. *out OWNED (srv_tc_free). */
kiln_code srv_tc_create(srv_tc_family f, const json_t *tools, srv_tc **out, kiln_err *err);
void srv_tc_free(srv_tc *p); /* NULL is a no-op */
/* Feeds s[0..n); appends what is now known to be content. -1 on OOM. */
int srv_tc_push(srv_tc *p, const char *s, size_t n, srv_buf *content);
/* End of output: a call still open is parsed if complete enough, else its
 * text (and anything held back) is appended to content. -1 on OOM. */
int srv_tc_finish(srv_tc *p, srv_buf *content);
/* Calls parsed so far (they only grow). */
size_t srv_tc_count(const srv_tc *p);
/* Call i: *name and *args (compact JSON object text) BORROWED from p. */
void srv_tc_get(const srv_tc *p, size_t i, const char **name, const char **args);
/* The serial call i had while it was open. */
size_t srv_tc_serial(const srv_tc *p, size_t i);
/* Calls open now (their names known), in order. Built on the first call
 * after a push (a parser nobody streams from never builds it). */
size_t srv_tc_open_count(srv_tc *p);
/* Open call k: *serial, *name (NUL-terminated) and args[0..*len) (not
 * NUL-terminated; whole UTF-8 characters), BORROWED until the next push. */
void srv_tc_open_get(const srv_tc *p, size_t k, size_t *serial, const char **name, const char **args,
                     size_t *len);
/* Every serial below this one is a parsed call or never will be one. */
size_t srv_tc_settled(const srv_tc *p);

#endif
