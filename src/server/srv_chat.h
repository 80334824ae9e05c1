/*
 * srv_chat.h — a request's messages → prompt token ids: the model's chat
 * template rendered the way transformers' apply_chat_template does, then
 * tokenized without adding BOS twice.
 *
 *   srv_chat *c;  srv_chat_load(model_dir, &c, &err);    // once, at start
 *   srv_chat_prompt(c, tok, &req, 1, &ids, &n, &text, &err);
 *   free(ids); free(text);  srv_chat_free(c);
 *
 * BOS: the template usually writes bos_token itself. The rendered text is
 * tokenized with special-token parsing and without the tokenizer's post
 * processor; BOS is prepended only when the tokenizer adds one and the text
 * does not already start with it.
 */
#ifndef KILN_SRV_CHAT_H
#define KILN_SRV_CHAT_H

#include <stdbool.h>
#include <stdint.h>

#include "server/srv_error.h"
#include "server/srv_openai.h"
#include "tokenizer/tok.h"

typedef struct srv_chat srv_chat;

/* API */
/* *out is NULL with KILN_E_NOT_FOUND when the model has no chat template
 * (callers then refuse /v1/chat/completions); OWNED by the caller (srv_chat_free). */
kiln_code srv_chat_load(const char *model_dir, srv_chat **out, kiln_err *err);
void srv_chat_free(srv_chat *c); /* NULL is a no-op */
/* Bounds every later render: at most max_output bytes of text and max_memory
 * bytes of template values alive (0 = the template engine's defaults, 64 MiB
 * and 512 MiB). Past either, srv_chat_prompt fails with KILN_E_INVALID naming
 * the limit. What a render holds is also reserved in the request memory
 * account (kiln_reqmem_reserve) while it runs; when others hold it,
 * srv_chat_prompt fails with KILN_E_BUSY (srv_chat_error: a 503).
 * Call before any render (not thread-safe against one). */
void srv_chat_set_limits(srv_chat *c, size_t max_output, size_t max_memory);
/* Renders r->messages (+ tools, template kwargs). default_thinking (-1 leave to
 * the template, 0 off, 1 on) sets enable_thinking unless the request did.
 * Tools with a template that never reads `tools` are KILN_E_INVALID. r->prefill,
 * when set, is appended to the rendered text (the model continues from it).
 * OUT: *ids (free), *n, *text (the rendered prompt, free; text may be NULL). */
/* The HTTP error for a failed srv_chat_prompt: KILN_E_BUSY (the request memory
 * account is held by other requests) is 503 overloaded + Retry-After, not the
 * engine queue's 429. */
srv_error srv_chat_error(const kiln_err *err, const char *param);
kiln_code srv_chat_prompt(const srv_chat *c, const tok_tokenizer *tok, const srv_request *r,
                          int default_thinking, int32_t **ids, int32_t *n, char **text,
                          kiln_err *err);
/* The template text (the tool_use variant when tools and the model has one);
 * BORROWED from c. */
const char *srv_chat_template_text(const srv_chat *c, bool tools);
/* Plain text → ids with the tokenizer's special tokens (BOS) as HF does for
 * completions. OUT: *ids (free), *n. */
kiln_code srv_text_prompt(const tok_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                          int32_t *n, kiln_err *err);
/* Tokenizes rendered chat text (BOS rule above). */
kiln_code srv_chat_tokenize(const tok_tokenizer *tok, const char *text, size_t len,
                            int32_t **ids, int32_t *n, kiln_err *err);

#endif
