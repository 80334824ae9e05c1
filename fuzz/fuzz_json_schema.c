/*
 * fuzz_json_schema.c — arbitrary bytes as a JSON Schema: when they parse as
 * JSON, compile under tight limits, then a short walk whose masks must agree
 * with accept_token and never lead into a dead end.
 */
#include "fuzz_gr_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t je;
    json_t *s = json_loadb((const char *)data, size, JSON_DECODE_ANY, &je);
    if (!s) return 0;
    gr_options o = fz_options();
    gr_grammar *g = NULL;
    kiln_err err;
    if (gr_compile_json_schema(s, &o, &g, &err) == KILN_OK) {
        fz_walk(g, data, size);
        gr_grammar_release(g);
    }
    json_decref(s);
    return 0;
}
