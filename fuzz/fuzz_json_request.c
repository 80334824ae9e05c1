/*
 * fuzz_json_request.c — arbitrary bytes into the OpenAI request parser, as
 * a chat, a completions, an Anthropic messages and a Responses body. A
 * successful parse must give a request whose fields hold their documented
 * ranges; every path must free what it built. The same bytes are then fed as
 * model output to every tool-call parser, whole and split in two: calls must
 * carry valid JSON object arguments, and no input may crash or leak; and to
 * the think-block splitter in both styles (<think>, Gemma 4's <|channel>):
 * content and reasoning never hold more bytes than came in.
 */
#include <stdint.h>
#include <string.h>

#include "server/srv_anthropic.h"
#include "server/srv_reasoning.h"
#include "server/srv_responses.h"
#include "server/srv_toolcall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const srv_request *r)
{
    if (r->n < 1 || r->n > SRV_MAX_N) __builtin_trap();
    if (r->n_stop < 0 || r->n_stop > ENG_MAX_STOP) __builtin_trap();
    for (int i = 0; i < r->n_stop; i++)
        if (!r->stop[i] || !r->stop[i][0]) __builtin_trap();
    if (r->top_logprobs < 0 || r->top_logprobs > ENG_MAX_TOP_LOGPROBS) __builtin_trap();
    if (r->max_tokens < 0) __builtin_trap();
    if (r->sp.n_bias && r->sp.logit_bias != r->bias) __builtin_trap();
    if (!json_is_object(r->template_kwargs)) __builtin_trap();
    if (r->api != SRV_API_COMPLETION && json_array_size(r->messages) == 0) __builtin_trap();
    if (r->api == SRV_API_COMPLETION && !r->prompt && r->n_prompt_ids < 1) __builtin_trap();
    if (r->tools && json_array_size(r->tools) == 0) __builtin_trap();
    if (r->tool_choice == SRV_TOOLS_NAMED && (!r->tool_name || json_array_size(r->tools) != 1)) __builtin_trap();
}

static void tool_calls(const uint8_t *data, size_t size)
{
    for (int f = SRV_TC_NONE; f < SRV_TC_COUNT; f++) {
        srv_tc *p;
        if (srv_tc_create((srv_tc_family)f, NULL, &p, NULL)) return;
        srv_buf content = {0};
        size_t cut = size ? data[0] % (size + 1) : 0;
        srv_tc_push(p, (const char *)data, cut, &content);
        srv_tc_push(p, (const char *)data + cut, size - cut, &content);
        srv_tc_finish(p, &content);
        for (size_t i = 0; i < srv_tc_count(p); i++) {
            const char *name, *args;
            srv_tc_get(p, i, &name, &args);
            json_t *a = json_loads(args, JSON_ALLOW_NUL, NULL);
            if (!name[0] || !json_is_object(a)) __builtin_trap();
            json_decref(a);
        }
        srv_buf_free(&content);
        srv_tc_free(p);
    }
}

static void think_split(const uint8_t *data, size_t size)
{
    for (int st = 0; st < SRV_THINK_COUNT; st++) {
        srv_think t;
        size_t cut = size ? data[0] % (size + 1) : 0;
        /* the first `cut` bytes are the prompt: it may leave a block open */
        srv_think_start(&t, (srv_think_style)st, true, (const char *)data, cut);
        srv_buf c = {0}, r = {0};
        size_t half = cut + (size - cut) / 2;
        srv_think_push(&t, (const char *)data + cut, half - cut, &c, &r);
        srv_think_push(&t, (const char *)data + half, size - half, &c, &r);
        srv_think_flush(&t, &c, &r);
        if (c.len + r.len > size - cut) __builtin_trap();
        srv_buf_free(&c);
        srv_buf_free(&r);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int api = 0; api < 4; api++) {
        srv_request r;
        char param[64];
        kiln_err err;
        kiln_code rc = api == 3   ? srv_parse_responses(NULL, (const char *)data, size, &r, param, &err)
                       : api == 2 ? srv_parse_anthropic((const char *)data, size, &r, param, &err)
                                  : srv_parse_request(api ? SRV_API_COMPLETION : SRV_API_CHAT,
                                                      (const char *)data, size, &r, param, &err);
        if (rc != KILN_OK) {
            if (strlen(param) >= 64 || err.code == KILN_OK) __builtin_trap();
            continue;
        }
        check(&r);
        srv_request_free(&r);
    }
    tool_calls(data, size);
    think_split(data, size);
    return 0;
}
