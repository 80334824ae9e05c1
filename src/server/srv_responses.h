/*
 * srv_responses.h — the OpenAI Responses API (POST /v1/responses): request
 * bodies rewritten onto srv_request (api SRV_API_RESPONSES), and the response
 * object / stream events built from a generation's text and tool calls.
 *
 *   srv_parse_responses(store, body, len, &req, param, &err);   // 404 for an unknown previous_response_id
 *   srv_resp *o = srv_resp_new(&meta);
 *   srv_resp_begin(o, &sse);                                    // stream only
 *   srv_resp_text(o, &sse, reasoning, rn, content, cn);         // per token (sse NULL: collect)
 *   srv_resp_call(o, &sse, call_id, name, args);                // or, streaming its arguments:
 *   srv_resp_call_open(o, &sse, call_id, name); srv_resp_call_delta(o, &sse, frag, n)...;
 *   srv_resp_call_close(o, &sse, true);
 *   json_t *resp = srv_resp_end(o, &sse, "completed", usage);   // the full response object
 *   srv_resp_free(o);
 *
 * Input items: a string (one user message) or {type: "message", role,
 * content: string | [{type: input_text|output_text, text}]}, {type:
 * "function_call", call_id, name, arguments}, {type: "function_call_output",
 * call_id, output}; reasoning items are skipped. `instructions` becomes a
 * system message that is not carried to the next response (as OpenAI does).
 */
#ifndef KILN_SRV_RESPONSES_H
#define KILN_SRV_RESPONSES_H

#include <jansson.h>

#include "server/srv_buf.h"
#include "server/srv_openai.h"
#include "server/srv_reply.h"
#include "server/srv_rstore.h"

typedef struct srv_resp srv_resp;

/* API */
/* Same contract as srv_parse_request; store (BORROWED) resolves
 * previous_response_id (KILN_E_NOT_FOUND when unknown or expired). */
kiln_code srv_parse_responses(srv_rstore *store, const char *body, size_t len, srv_request *out,
                              char *param, kiln_err *err);
/* m is copied. NULL on OOM. */
srv_resp *srv_resp_new(const srv_reply_meta *m, const srv_request *r);
void srv_resp_free(srv_resp *o); /* NULL is a no-op */
/* Streaming: response.created and response.in_progress. */
int srv_resp_begin(srv_resp *o, srv_buf *out);
/* New reasoning and content text; out NULL when not streaming. */
int srv_resp_text(srv_resp *o, srv_buf *out, const char *reasoning, size_t rn, const char *content,
                  size_t cn);
int srv_resp_call(srv_resp *o, srv_buf *out, const char *call_id, const char *name, const char *args);
/* A function_call item whose arguments arrive in fragments: output_item.added,
 * function_call_arguments.delta per fragment, and at close .done and
 * output_item.done with the whole arguments (status "incomplete" when
 * !complete: the call turned out malformed, it is not one of the calls). */
int srv_resp_call_open(srv_resp *o, srv_buf *out, const char *call_id, const char *name);
int srv_resp_call_delta(srv_resp *o, srv_buf *out, const char *frag, size_t n);
int srv_resp_call_close(srv_resp *o, srv_buf *out, bool complete);
/* Closes the open item; returns the response object (OWNED); streaming
 * appends response.completed (or .incomplete) with it. usage stolen. */
json_t *srv_resp_end(srv_resp *o, srv_buf *out, const char *status, json_t *usage);
/* Streaming: response.failed. */
int srv_resp_fail(srv_resp *o, srv_buf *out, const char *message);
/* The output as one chat assistant message (content, tool_calls) for the store; OWNED. */
json_t *srv_resp_chat_message(const srv_resp *o);
/* Usage in the Responses spelling from OpenAI-style numbers. */
json_t *srv_resp_usage(int32_t input, int32_t output, int32_t cached, int32_t reasoning);

#endif
