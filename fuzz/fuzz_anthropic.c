/*
 * fuzz_anthropic.c — Anthropic Messages request bodies (srv_anthropic.c:
 * system as a string or text blocks, content blocks text / image / tool_use /
 * tool_result / thinking, tools with input_schema, tool_choice auto / any /
 * tool / none, thinking, stop_sequences, metadata) mapped onto the chat
 * request, as /v1/messages and as /v1/messages/count_tokens (no max_tokens).
 *
 * Input: byte 0 picks where the rest goes — 0: the whole body; 1: the value
 * of `messages`; 2: the value of `tools` (with a tool_choice naming one);
 * 3: the value of `system`; 4: the content of a user message after an
 * assistant tool_use — so the mutator works inside the block shapes rather
 * than on the envelope.
 * Checks beyond no crash / leak / UB:
 *   - a refusal has an error code and a param that fits its buffer;
 *   - an accepted request holds chat messages (each an object with a string
 *     role; tool_calls each name a function and carry object or string
 *     arguments), tools that each name a function, object template kwargs,
 *     stop strings that are not empty;
 *   - /v1/messages and count_tokens agree: a body accepted with max_tokens
 *     is accepted without it, with the same messages and tools.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_anthropic.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const srv_request *r)
{
    if (r->api != SRV_API_ANTHROPIC) __builtin_trap();
    if (!json_is_array(r->messages) || json_array_size(r->messages) == 0) __builtin_trap();
    size_t i, k;
    json_t *m, *c;
    json_array_foreach(r->messages, i, m)
    {
        if (!json_is_object(m) || !json_is_string(json_object_get(m, "role"))) __builtin_trap();
        json_t *calls = json_object_get(m, "tool_calls");
        if (!calls) continue;
        if (!json_is_array(calls)) __builtin_trap();
        json_array_foreach(calls, k, c)
        {
            json_t *fn = json_object_get(c, "function");
            json_t *a = json_object_get(fn, "arguments");
            if (!json_is_string(json_object_get(fn, "name"))) __builtin_trap();
            if (a && !json_is_object(a) && !json_is_string(a)) __builtin_trap();
        }
    }
    if (!json_is_object(r->template_kwargs)) __builtin_trap();
    if (r->tools) {
        if (json_array_size(r->tools) == 0) __builtin_trap();
        json_t *t;
        json_array_foreach(r->tools, i, t)
        {
            json_t *fn =
                json_object_get(t, "function"); /* nested, or flat as srv_toolreq reads it */
            if (!json_is_string(json_object_get(fn ? fn : t, "name"))) __builtin_trap();
        }
    }
    for (int s = 0; s < r->n_stop; s++)
        if (!r->stop[s] || !r->stop[s][0]) __builtin_trap();
}

static char *wrap(int mode, const uint8_t *d, size_t n, size_t *len)
{
    static const char *const pre[] = {
        "",
        "{\"model\":\"m\",\"max_tokens\":16,\"system\":\"Be brief.\",\"messages\":",
        "{\"model\":\"m\",\"max_tokens\":16,\"messages\":[{\"role\":\"user\",\"content\":\"Weather?"
        "\"}],"
        "\"tool_choice\":{\"type\":\"tool\",\"name\":\"get_weather\"},\"tools\":",
        "{\"model\":\"m\",\"max_tokens\":16,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
        "\"system\":",
        "{\"model\":\"m\",\"max_tokens\":16,\"messages\":[{\"role\":\"user\",\"content\":\"Weather?"
        "\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":"
        "\"get_weather\",\"input\":{\"city\":\"Paris\"}}]},{\"role\":\"user\",\"content\":",
    };
    static const char *const post[] = {"", "}", "}", "}", "}]}"};
    int md = mode % 5;
    size_t pl = strlen(pre[md]), ql = strlen(post[md]);
    char *b = malloc(pl + n + ql + 1);
    if (!b) return NULL;
    memcpy(b, pre[md], pl);
    if (n) memcpy(b + pl, d, n);
    memcpy(b + pl + n, post[md], ql + 1);
    *len = pl + n + ql;
    return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    size_t len;
    char *body = wrap(data[0], data + 1, size - 1, &len);
    if (!body) return 0;
    srv_request r, rc_req;
    char param[64];
    kiln_err err;
    kiln_code rc = srv_parse_anthropic(body, len, &r, param, &err);
    if (rc != KILN_OK && (strlen(param) >= 64 || err.code == KILN_OK)) __builtin_trap();
    kiln_code rc2 = srv_parse_anthropic_ex(body, len, true, &rc_req, param, &err);
    if (rc2 != KILN_OK && (strlen(param) >= 64 || err.code == KILN_OK)) __builtin_trap();
    free(body);
    if (rc == KILN_OK) {
        check(&r);
        /* count_tokens reads the same body without requiring max_tokens */
        if (rc2 != KILN_OK) __builtin_trap();
        if (!json_equal(r.messages, rc_req.messages)) __builtin_trap();
        if (!r.tools != !rc_req.tools || (r.tools && !json_equal(r.tools, rc_req.tools)))
            __builtin_trap();
        srv_request_free(&r);
    }
    if (rc2 == KILN_OK) {
        if (rc_req.api != SRV_API_ANTHROPIC || !json_is_array(rc_req.messages)) __builtin_trap();
        srv_request_free(&rc_req);
    }
    return 0;
}
