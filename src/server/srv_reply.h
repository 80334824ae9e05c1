/*
 * srv_reply.h — the OpenAI response shapes: chat.completion and
 * text_completion objects, their streaming chunks, usage, and logprobs.
 *
 *   srv_reply_meta m = {SRV_API_CHAT, "chatcmpl-1", time(NULL), "qwen3"};
 *   json_t *c = srv_reply_chunk(&m, 0, json_pack("{s:s}", "content", "Hi"), NULL, NULL);
 *
 * Every builder returns a new object OWNED by the caller (NULL on OOM) and
 * takes ownership of the json_t arguments it is given ("stolen"), even on failure.
 */
#ifndef KILN_SRV_REPLY_H
#define KILN_SRV_REPLY_H

#include <jansson.h>
#include <stdint.h>

#include "engine/eng_sample.h"
#include "server/srv_openai.h"
#include "tokenizer/tok.h"

typedef struct {
    srv_api api;
    char id[48];       /* "chatcmpl-…" or "cmpl-…" */
    int64_t created;   /* Unix seconds */
    const char *model; /* BORROWED: the served model id */
} srv_reply_meta;

/* API */
json_t *srv_reply_usage(int32_t prompt_tokens, int32_t completion_tokens, int32_t cached_tokens);
/* One streaming chunk with one choice. chat: `delta` is the delta object;
 * completions: `delta` is the text (a JSON string). finish NULL = null. */
json_t *srv_reply_chunk(const srv_reply_meta *m, int index, json_t *delta /* stolen */,
                        const char *finish, json_t *logprobs /* stolen, may be NULL */);
/* The last chunk of include_usage: empty choices and the usage. */
json_t *srv_reply_usage_chunk(const srv_reply_meta *m, json_t *usage /* stolen */);
/* One choice of a full response; reasoning may be NULL. */
json_t *srv_reply_choice(const srv_reply_meta *m, int index, json_t *text /* stolen */,
                         json_t *reasoning /* stolen or NULL */, const char *finish,
                         json_t *logprobs /* stolen or NULL */);
json_t *srv_reply_full(const srv_reply_meta *m, json_t *choices /* stolen */,
                       json_t *usage /* stolen */);

/* Anthropic: the message object of /v1/messages (content [] when text is NULL). */
json_t *srv_reply_anthropic(const srv_reply_meta *m, json_t *text /* stolen or NULL */,
                            json_t *thinking /* stolen or NULL */, const char *stop_reason,
                            const char *stop_sequence, int32_t input_tokens,
                            int32_t output_tokens, int32_t cached_tokens);

/* Tool calls. An id unique to (request, choice, call): prefix "call_" or "toolu_". */
void srv_reply_call_id(char out[48], const char *prefix, const char *req_id, int choice, size_t i);
/* OpenAI message.tool_calls entry: {id, type: "function", function: {name, arguments}}. */
json_t *srv_reply_tool_call(const char *id, const char *name, const char *args);
/* Streaming: the deltas of call i — first {index, id, type, function: {name,
 * arguments: ""}}, then {index, function: {arguments}}; each a delta object. */
json_t *srv_reply_tool_call_delta(size_t i, const char *id, const char *name, const char *args);
/* Anthropic tool_use block {type, id, name, input} (input parsed from args). */
json_t *srv_reply_tool_use(const char *id, const char *name, const char *args);
/* Adds completion_tokens_details.reasoning_tokens to an OpenAI usage object. */
void srv_reply_usage_reasoning(json_t *usage, int32_t reasoning_tokens);
/* Adds completion_tokens_details.accepted_prediction_tokens /
 * rejected_prediction_tokens (speculative decoding's draft tokens) to an
 * OpenAI usage object that has completion_tokens_details. */
void srv_reply_usage_predictions(json_t *usage, int32_t accepted, int32_t rejected);

/* Logprobs. Chat: {"content": [entry...]} with entry {token, logprob, bytes,
 * top_logprobs: [{token, logprob, bytes}]}. Completions: {tokens,
 * token_logprobs, top_logprobs: [{token: logprob}], text_offset}. */
json_t *srv_logprobs_new(srv_api api);
/* Appends so's token to lp; text_offset is the completion-text offset (completions). */
int srv_logprobs_add(json_t *lp, srv_api api, const tok_tokenizer *tok, const eng_sample_out *so,
                     int64_t text_offset);

#endif
