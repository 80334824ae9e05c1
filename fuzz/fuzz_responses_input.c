/*
 * fuzz_responses_input.c — the Responses API's `input` items (message,
 * input_text / output_text parts, function_call, function_call_output,
 * reasoning, ...), `tools`, `text.format` and `instructions`, mapped onto the
 * chat request by srv_parse_responses, then the stored conversation
 * continued through previous_response_id.
 *
 * Input: byte 0 picks where the rest goes — 0: the whole body; 1: the value
 * of `input` in a body that also has tools and instructions; 2: the value of
 * `tools`; 3: the value of `text`; 4: the value of `instructions` — so the
 * mutator works inside the item shapes rather than on the envelope.
 * Checks beyond no crash / leak / UB:
 *   - a refusal has an error code and a param that fits its buffer;
 *   - an accepted request holds chat messages (each an object with a string
 *     role; an assistant's tool_calls each name a function), tools that each
 *     name a function, an object of template kwargs;
 *   - the conversation, stored as the server stores it, is continued by a
 *     follow-up naming it: the follow-up parses and holds every stored
 *     message plus its own input (what previous_response_id promises).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_responses.h"
#include "server/srv_rstore.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_messages(const json_t *msgs)
{
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) __builtin_trap();
    size_t i, k;
    json_t *m, *c;
    json_array_foreach(msgs, i, m)
    {
        if (!json_is_object(m) || !json_is_string(json_object_get(m, "role"))) __builtin_trap();
        json_t *calls = json_object_get(m, "tool_calls");
        if (!calls) continue;
        if (!json_is_array(calls)) __builtin_trap();
        json_array_foreach(calls, k, c)
        {
            if (!json_is_string(json_object_get(json_object_get(c, "function"), "name")))
                __builtin_trap();
        }
    }
}

static void check(const srv_request *r)
{
    if (r->api != SRV_API_RESPONSES) __builtin_trap();
    check_messages(r->messages);
    if (!json_is_object(r->template_kwargs)) __builtin_trap();
    if (r->tools) {
        if (json_array_size(r->tools) == 0) __builtin_trap();
        size_t i;
        json_t *t;
        json_array_foreach(r->tools, i, t)
        {
            json_t *fn =
                json_object_get(t, "function"); /* nested, or flat as srv_toolreq reads it */
            if (!json_is_string(json_object_get(fn ? fn : t, "name"))) __builtin_trap();
        }
    }
}

/* Wraps the fuzzed bytes as one field of an otherwise ordinary body. */
static char *wrap(int mode, const uint8_t *d, size_t n, size_t *len)
{
    static const char *const pre[] = {
        "",
        "{\"model\":\"m\",\"instructions\":\"Be "
        "brief.\",\"max_output_tokens\":16,\"tools\":[{\"type\":"
        "\"function\",\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{"
        "\"city\":{\"type\":\"string\"}}}}],\"input\":",
        "{\"model\":\"m\",\"input\":\"Weather in Paris?\",\"tool_choice\":\"auto\",\"tools\":",
        "{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":\"JSON please\"}],\"text\":",
        "{\"model\":\"m\",\"input\":\"hi\",\"instructions\":",
    };
    const char *p = pre[mode], *post = mode ? "}" : "";
    size_t pl = strlen(p), ql = strlen(post);
    char *b = malloc(pl + n + ql + 1);
    if (!b) return NULL;
    memcpy(b, p, pl);
    if (n) memcpy(b + pl, d, n);
    memcpy(b + pl + n, post, ql + 1);
    *len = pl + n + ql;
    return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    size_t len;
    char *body = wrap(data[0] % 5, data + 1, size - 1, &len);
    if (!body) return 0;
    srv_rstore *st = NULL;
    if (srv_rstore_create(3600, 1 << 20, &st, NULL)) {
        free(body);
        return 0;
    }
    srv_request r;
    char param[64];
    kiln_err err;
    kiln_code rc = srv_parse_responses(st, body, len, &r, param, &err);
    free(body);
    if (rc != KILN_OK) {
        if (strlen(param) >= 64 || err.code == KILN_OK) __builtin_trap();
        srv_rstore_destroy(st);
        return 0;
    }
    check(&r);
    /* what srv_gen keeps: the messages without instructions' system message,
     * plus the answer as an assistant message */
    json_t *conv = json_copy(r.messages);
    if (conv && r.instructions) json_array_remove(conv, 0);
    if (conv)
        json_array_append_new(conv, json_pack("{s:s, s:s}", "role", "assistant", "content", "ok"));
    size_t stored = json_array_size(conv);
    if (conv) srv_rstore_put(st, "resp_fuzz", conv);
    json_decref(conv);
    srv_request_free(&r);
    const char *next =
        "{\"model\":\"m\",\"previous_response_id\":\"resp_fuzz\",\"input\":\"and then?\"}";
    srv_request r2;
    rc = srv_parse_responses(st, next, strlen(next), &r2, param, &err);
    srv_rstore_stats ss = srv_rstore_get_stats(st);
    if (ss.entries == 1) { /* kept (not refused as larger than the cap) */
        if (rc != KILN_OK) {
            fprintf(stderr, "a stored conversation could not be continued: %s (%s)\n", err.msg,
                    param);
            __builtin_trap();
        }
        if (json_array_size(r2.messages) != stored + 1) __builtin_trap();
        check(&r2);
        srv_request_free(&r2);
    } else if (rc == KILN_OK) {
        srv_request_free(&r2);
    }
    srv_rstore_destroy(st);
    return 0;
}
