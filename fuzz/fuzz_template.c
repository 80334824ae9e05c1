/*
 * fuzz_template.c — arbitrary bytes as a chat template: lex, parse and render with a
 * small fixed chat context and tight limits. Every input must end in KILN_OK or an
 * error value; crashes, leaks and sanitizer reports are bugs.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl.h"

static const char *CONTEXT =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"hi \\u00e9\"}, "
    "{\"type\": \"image\"}]},"
    " {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"type\": \"function\", "
    "\"function\":"
    " {\"name\": \"f\", \"arguments\": {\"x\": 1.5, \"y\": [true, null]}}}]},"
    " {\"role\": \"tool\", \"content\": \"42\"}, {\"role\": \"user\", \"content\": \"and?\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
    "{\"type\": \"object\"}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"n\": 3, "
    "\"enable_thinking\": false}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tmpl_value *ctx; /* built once; never changed by renders */
    kiln_err err;
    if (!ctx) {
        json_t *j = json_loads(CONTEXT, 0, NULL);
        if (!j || tmpl_value_from_json(j, &ctx, &err) != KILN_OK) abort();
        json_decref(j);
    }
    tmpl_options opt = tmpl_options_default();
    opt.max_depth = 200;
    opt.max_loop_iter = 20000;
    opt.max_output = 1 << 20;
    opt.max_memory = 64 << 20;
    opt.fixed_now = 1752148800;
    tmpl_template *t = NULL;
    if (tmpl_compile((const char *)data, size, &opt, &t, &err) != KILN_OK) return 0;
    char *out = NULL;
    size_t n = 0;
    if (tmpl_render(t, ctx, &out, &n, &err) == KILN_OK) {
        if (strlen(out) > n) abort(); /* NUL-terminated at n */
        free(out);
    }
    tmpl_free(t);
    return 0;
}
