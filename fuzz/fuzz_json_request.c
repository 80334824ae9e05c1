/*
 * fuzz_json_request.c — arbitrary bytes into the OpenAI request parser, as
 * a chat, a completions and an Anthropic messages body. A successful parse must give a request
 * whose fields hold their documented ranges; every path must free what it built.
 */
#include <stdint.h>
#include <string.h>

#include "server/srv_anthropic.h"

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
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int api = 0; api < 3; api++) {
        srv_request r;
        char param[64];
        kiln_err err;
        kiln_code rc = api == 2 ? srv_parse_anthropic((const char *)data, size, &r, param, &err)
                                : srv_parse_request(api ? SRV_API_COMPLETION : SRV_API_CHAT,
                                                    (const char *)data, size, &r, param, &err);
        if (rc != KILN_OK) {
            if (strlen(param) >= 64 || err.code == KILN_OK) __builtin_trap();
            continue;
        }
        check(&r);
        srv_request_free(&r);
    }
    return 0;
}
