/*
 * srv_reply.c — OpenAI response objects (see srv_reply.h). Shapes follow the
 * OpenAI API reference: chat.completion / chat.completion.chunk and
 * text_completion (also the object of its chunks).
 * Threads: no shared state.
 */
#include "server/srv_reply.h"
#include "server/srv_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

json_t *srv_reply_usage(int32_t prompt_tokens, int32_t completion_tokens, int32_t cached_tokens)
{
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", (json_int_t)prompt_tokens,
                     "completion_tokens", (json_int_t)completion_tokens, "total_tokens",
                     (json_int_t)prompt_tokens + completion_tokens, "prompt_tokens_details",
                     "cached_tokens", (json_int_t)cached_tokens);
}

static json_t *base(const srv_reply_meta *m, const char *object)
{
    return json_pack("{s:s, s:s, s:I, s:s}", "id", m->id, "object", object, "created",
                     (json_int_t)m->created, "model", m->model ? m->model : "");
}

static json_t *opt(json_t *j)
{
    return j ? j : json_null();
}

json_t *srv_reply_chunk(const srv_reply_meta *m, int index, json_t *delta, const char *finish,
                        json_t *logprobs)
{
    int chat = m->api == SRV_API_CHAT;
    if (!delta) { /* it could not be built (out of memory): no chunk, never an empty one */
        json_decref(logprobs);
        return NULL;
    }
    json_t *o = base(m, chat ? "chat.completion.chunk" : "text_completion");
    json_t *choice = json_pack("{s:i, s:o, s:o, s:o}", "index", index, chat ? "delta" : "text",
                               delta, "logprobs", opt(logprobs),
                               "finish_reason", finish ? json_string(finish) : json_null());
    if (!o || !choice || json_object_set_new(o, "choices", json_pack("[o]", choice))) {
        if (!o) json_decref(choice); /* else json_pack took it, even when it failed */
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *srv_reply_usage_chunk(const srv_reply_meta *m, json_t *usage)
{
    json_t *o = base(m, m->api == SRV_API_CHAT ? "chat.completion.chunk" : "text_completion");
    if (!o || json_object_set_new(o, "choices", json_array())) { /* usage is stolen: free it */
        json_decref(usage);
        json_decref(o);
        return NULL;
    }
    if (json_object_set_new(o, "usage", opt(usage))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *srv_reply_choice(const srv_reply_meta *m, int index, json_t *text, json_t *reasoning,
                         const char *finish, json_t *logprobs)
{
    json_t *fin = finish ? json_string(finish) : json_null();
    if (m->api != SRV_API_CHAT) {
        json_decref(reasoning);
        return json_pack("{s:i, s:o, s:o, s:o}", "index", index, "text", opt(text), "logprobs",
                         opt(logprobs), "finish_reason", fin);
    }
    /* refusal: required by the API's schema; kiln never refuses */
    json_t *msg = json_pack("{s:s, s:o, s:n}", "role", "assistant", "content", opt(text), "refusal");
    if (msg && reasoning) {
        /* both spellings: `reasoning` (vLLM, OpenRouter) and `reasoning_content` (DeepSeek, llama.cpp) */
        json_object_set(msg, "reasoning_content", reasoning);
        json_object_set_new(msg, "reasoning", reasoning);
    } else {
        json_decref(reasoning);
    }
    return json_pack("{s:i, s:o, s:o, s:o}", "index", index, "message", msg, "logprobs",
                     opt(logprobs), "finish_reason", fin);
}

json_t *srv_reply_full(const srv_reply_meta *m, json_t *choices, json_t *usage)
{
    json_t *o = base(m, m->api == SRV_API_CHAT ? "chat.completion" : "text_completion");
    if (!o) { /* choices and usage are stolen: free them */
        json_decref(choices);
        json_decref(usage);
        return NULL;
    }
    if (json_object_set_new(o, "choices", opt(choices))) {
        json_decref(usage);
        json_decref(o);
        return NULL;
    }
    if (json_object_set_new(o, "usage", opt(usage))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *srv_reply_anthropic(const srv_reply_meta *m, json_t *text, json_t *thinking,
                            const char *stop_reason, const char *stop_sequence,
                            int32_t input_tokens, int32_t output_tokens, int32_t cached_tokens)
{
    json_t *content = json_array();
    if (thinking)
        json_array_append_new(content, json_pack("{s:s, s:o, s:s}", "type", "thinking", "thinking",
                                                 thinking, "signature", ""));
    if (text) json_array_append_new(content, json_pack("{s:s, s:o}", "type", "text", "text", text));
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:{s:i, s:i, s:i, s:i}}", "id", m->id,
                     "type", "message", "role", "assistant", "model", m->model ? m->model : "",
                     "content", content ? content : json_array(), "stop_reason",
                     stop_reason ? json_string(stop_reason) : json_null(), "stop_sequence",
                     stop_sequence ? srv_json_text(stop_sequence, strlen(stop_sequence)) : json_null(),
                     "usage", "input_tokens", (int)input_tokens, "output_tokens", (int)output_tokens,
                     "cache_creation_input_tokens", 0, "cache_read_input_tokens", (int)cached_tokens);
}

/* ---------------------------------------------------------------- tool calls */

void srv_reply_call_id(char out[48], const char *prefix, const char *req_id, int choice, size_t i)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the request id, then choice and index */
    for (const char *p = req_id; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    h = (h ^ (uint64_t)choice) * 1099511628211ull;
    h = (h ^ (uint64_t)i) * 1099511628211ull;
    h ^= h >> 29;
    uint64_t h2 = (h ^ 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull;
    h2 ^= h2 >> 31;
    snprintf(out, 48, "%s%016llx%08x", prefix, (unsigned long long)h, (unsigned)(h2 >> 32));
}

json_t *srv_reply_tool_call(const char *id, const char *name, const char *args)
{
    return json_pack("{s:s, s:s, s:{s:o, s:o}}", "id", id, "type", "function", "function", "name",
                     srv_json_text(name, strlen(name)), "arguments", srv_json_text(args, strlen(args)));
}

json_t *srv_reply_tool_call_delta(size_t i, const char *id, const char *name, const char *args)
{
    if (name)
        return json_pack("{s:[{s:i, s:s, s:s, s:{s:o, s:s}}]}", "tool_calls", "index", (json_int_t)i,
                         "id", id, "type", "function", "function", "name",
                         srv_json_text(name, strlen(name)), "arguments", "");
    return json_pack("{s:[{s:i, s:{s:o}}]}", "tool_calls", "index", (json_int_t)i, "function",
                     "arguments", srv_json_text(args, strlen(args)));
}

json_t *srv_reply_tool_use(const char *id, const char *name, const char *args)
{
    json_t *input = json_loads(args, JSON_ALLOW_NUL, NULL);
    return json_pack("{s:s, s:s, s:o, s:o}", "type", "tool_use", "id", id, "name",
                     srv_json_text(name, strlen(name)), "input", input ? input : json_object());
}

void srv_reply_usage_reasoning(json_t *usage, int32_t reasoning_tokens)
{
    if (usage)
        json_object_set_new(usage, "completion_tokens_details",
                            json_pack("{s:i}", "reasoning_tokens", (json_int_t)reasoning_tokens));
}

void srv_reply_usage_predictions(json_t *usage, int32_t accepted, int32_t rejected)
{
    json_t *d = usage ? json_object_get(usage, "completion_tokens_details") : NULL;
    if (!d) return;
    json_object_set_new(d, "accepted_prediction_tokens", json_integer(accepted));
    json_object_set_new(d, "rejected_prediction_tokens", json_integer(rejected));
}

/* ---------------------------------------------------------------- logprobs */

json_t *srv_logprobs_new(srv_api api)
{
    if (api == SRV_API_CHAT) return json_pack("{s:[], s:n}", "content", "refusal");
    return json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs",
                     "text_offset");
}

/* The token's text (special tokens included) and its raw bytes as a JSON array. */
static json_t *token_text(const tok_tokenizer *tok, int32_t id, json_t **bytes)
{
    char *s = NULL;
    size_t n = 0;
    kiln_err err;
    if (bytes) *bytes = NULL;
    if (tok_decode(tok, &id, 1, 0, &s, &n, &err) != KILN_OK) {
        if (err.code == KILN_E_NOMEM) return NULL; /* never an empty token in its place */
        s = NULL;
        n = 0;
    }
    /* SentencePiece decoders drop the leading space of a text's first piece;
     * a token on its own is not a text's start, so give "▁x" its space back. */
    const char *piece = tok_token_to_piece(tok, id, NULL);
    if (s && piece && !strncmp(piece, "\xE2\x96\x81", 3) && (n == 0 || s[0] != ' ')) {
        char *t = malloc(n + 2);
        if (!t) {
            free(s);
            return NULL;
        }
        t[0] = ' ';
        memcpy(t + 1, s, n + 1);
        free(s);
        s = t;
        n++;
    }
    if (bytes) {
        *bytes = json_array();
        for (size_t i = 0; i < n && *bytes; i++)
            json_array_append_new(*bytes, json_integer((unsigned char)s[i]));
    }
    json_t *j = srv_json_text(s ? s : "", n);
    free(s);
    if (!j && bytes) { /* the token did not make it: neither do its bytes */
        json_decref(*bytes);
        *bytes = NULL;
    }
    return j;
}

static double finite_lp(float lp)
{
    return lp < -9999.0f ? -9999.0 : (double)lp; /* -inf is not JSON */
}

int srv_logprobs_add(json_t *lp, srv_api api, const tok_tokenizer *tok, const eng_sample_out *so,
                     int64_t text_offset)
{
    int32_t n_top = so->n_top < 0 ? 0 : so->n_top > ENG_MAX_TOP_LOGPROBS ? ENG_MAX_TOP_LOGPROBS : so->n_top;
    if (api == SRV_API_CHAT) {
        json_t *bytes, *top = json_array();
        json_t *text = token_text(tok, so->token, &bytes);
        int bad = !text || !top;
        for (int32_t i = 0; i < n_top && !bad; i++) {
            json_t *tb, *tt = token_text(tok, so->top_ids[i], &tb);
            bad = !tt || json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token", opt(tt),
                                                              "logprob",
                                                              finite_lp(so->top_logprobs[i]),
                                                              "bytes", opt(tb)));
        }
        if (bad) { /* out of memory: no entry rather than one with a hole */
            json_decref(text);
            json_decref(bytes);
            json_decref(top);
            return -1;
        }
        json_t *e = json_pack("{s:o, s:f, s:o, s:o}", "token", opt(text), "logprob",
                              finite_lp(so->logprob), "bytes", opt(bytes), "top_logprobs", opt(top));
        return e ? json_array_append_new(json_object_get(lp, "content"), e) : -1;
    }
    json_t *top = json_object();
    int bad = !top;
    for (int32_t i = 0; i < n_top && !bad; i++) {
        json_t *tt = token_text(tok, so->top_ids[i], NULL);
        bad = !tt || json_object_set_new(top, json_string_value(tt),
                                         json_real(finite_lp(so->top_logprobs[i])));
        json_decref(tt);
    }
    if (bad) {
        json_decref(top);
        return -1;
    }
    json_t *tt = token_text(tok, so->token, NULL);
    if (!tt) {
        json_decref(top);
        return -1;
    }
    int rc = json_array_append_new(json_object_get(lp, "tokens"), tt);
    rc |= json_array_append_new(json_object_get(lp, "token_logprobs"), json_real(finite_lp(so->logprob)));
    rc |= json_array_append_new(json_object_get(lp, "top_logprobs"), opt(top));
    rc |= json_array_append_new(json_object_get(lp, "text_offset"), json_integer(text_offset));
    return rc ? -1 : 0;
}
