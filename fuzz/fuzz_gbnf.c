/*
 * fuzz_gbnf.c — arbitrary bytes as a GBNF grammar: parse, compile under tight
 * limits, then a short walk whose masks must agree with accept_token and never
 * lead into a dead end. Every input must end in KILN_OK or an error value.
 */
#include "fuzz_gr_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gr_options o = fz_options();
    gr_grammar *g = NULL;
    kiln_err err;
    if (gr_compile_gbnf((const char *)data, size, &o, &g, &err) != KILN_OK) return 0;
    fz_walk(g, data, size);
    gr_grammar_release(g);
    return 0;
}
