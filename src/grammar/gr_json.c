/*
 * gr_json.c — JSON's lexical pieces as grammar expressions, and the grammar
 * of any JSON value (response_format json_object).
 *
 * Strings: a JSON string body is a sequence of characters, each either
 * unescaped (any code point but '"', '\' and U+0000..U+001F) or an escape
 * (\" \\ \/ \b \f \n \r \t, or \uXXXX naming a code point that is not a
 * surrogate: lone surrogates would make decoders disagree, and pairs would
 * make one character two for minLength/maxLength). A length bound counts
 * characters, an escape being one: exactly what a validator counts.
 * Numbers: JSON's syntax with at most 64 digits before and after the point
 * and 3 exponent digits (a value outside doubles or Python's integer parsing
 * limit would be no use to anyone; the language is a subset, never larger).
 * Whitespace between tokens: options' json_ws_max (gr_json_ws).
 */
#include "grammar/gr_int.h"

#include <stdlib.h>
#include <string.h>

#define NUM_DIGITS 64

static gr_expr cls(gr_builder *b, const char *spec)
{
    /* spec: pairs of characters "az09" = [a-z0-9] */
    uint32_t pairs[16];
    size_t n = strlen(spec) / 2;
    for (size_t i = 0; i < n && i < 8; i++) {
        pairs[2 * i] = (uint8_t)spec[2 * i];
        pairs[2 * i + 1] = (uint8_t)spec[2 * i + 1];
    }
    return gr_class(b, pairs, n, false);
}

/* One JSON string character, any code point. */
static gr_expr json_char(gr_builder *b)
{
    static const uint32_t unesc[] = {0x20, 0x21, 0x23, 0x5B, 0x5D, GR_MAX_CP};
    gr_expr plain = gr_class(b, unesc, 3, false);
    gr_expr simple = cls(b, "\"\"//\\\\bbffnnrrtt");
    gr_expr hex = cls(b, "09afAF");
    /* \uXXXX without D800..DFFF */
    gr_expr h1 = cls(b, "09acACefEF");
    gr_expr d1 = cls(b, "ddDD"), d2 = cls(b, "07");
    gr_expr not_sur[] = {h1, gr_rep(b, hex, 3, 3)};
    gr_expr sur_lo[] = {d1, d2, gr_rep(b, hex, 2, 2)};
    gr_expr u4 = gr_alt2(b, gr_seq(b, not_sur, 2), gr_seq(b, sur_lo, 3));
    gr_expr esc = gr_seq2(b, gr_str(b, "\\"), gr_alt2(b, simple, gr_seq2(b, gr_str(b, "u"), u4)));
    return gr_alt2(b, plain, esc);
}

/* A quoted JSON string of min..max characters (max < 0: unbounded). */
gr_expr gr_json_string(gr_builder *b, int32_t min, int32_t max)
{
    gr_expr q = gr_str(b, "\"");
    gr_expr body[] = {q, gr_rep(b, json_char(b), min, max), q};
    return gr_seq(b, body, 3);
}

gr_expr gr_json_class(gr_builder *b, const uint32_t *pairs, size_t n_pairs)
{
    /* the class minus the characters JSON must escape, plus their escapes */
    static const uint32_t must[] = {0, 0x1F, '"', '"', '\\', '\\'};
    if (b->failed) return -1;
    uint32_t *tmp = malloc(sizeof *tmp * 2 * (4 * n_pairs + 1));
    if (!tmp) return gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory"), -1;
    size_t k = 0;
    for (size_t i = 0; i < n_pairs; i++) {
        uint32_t lo = pairs[2 * i], hi = pairs[2 * i + 1];
        for (int m = 0; m < 3 && lo <= hi; m++) {
            uint32_t mlo = must[2 * m], mhi = must[2 * m + 1];
            if (mhi < lo || mlo > hi) continue;
            if (mlo > lo) {
                tmp[2 * k] = lo;
                tmp[2 * k + 1] = mlo - 1;
                k++;
            }
            lo = mhi + 1;
        }
        if (lo <= hi) {
            tmp[2 * k] = lo;
            tmp[2 * k + 1] = hi;
            k++;
        }
    }
    gr_expr alts[40];
    int n = 0;
    alts[n++] = gr_class(b, tmp, k, false);
    free(tmp);
    static const char hexd[] = "0123456789abcdef";
    for (uint32_t c = 0; c <= 0x5C; c++) {
        if (c > 0x1F && c != '"' && c != '\\') continue;
        bool in = false;
        for (size_t i = 0; i < n_pairs && !in; i++)
            in = pairs[2 * i] <= c && c <= pairs[2 * i + 1];
        if (!in) continue;
        char esc[8];
        switch (c) {
        case '"':
            strcpy(esc, "\\\"");
            break;
        case '\\':
            strcpy(esc, "\\\\");
            break;
        case '\n':
            strcpy(esc, "\\n");
            break;
        case '\t':
            strcpy(esc, "\\t");
            break;
        case '\r':
            strcpy(esc, "\\r");
            break;
        case '\b':
            strcpy(esc, "\\b");
            break;
        case '\f':
            strcpy(esc, "\\f");
            break;
        default:
            esc[0] = '\\', esc[1] = 'u', esc[2] = '0', esc[3] = '0';
            esc[4] = hexd[c >> 4], esc[5] = hexd[c & 15], esc[6] = 0;
        }
        alts[n++] = gr_str(b, esc);
    }
    return gr_alt(b, alts, (size_t)n);
}

/* -?(0|[1-9][0-9]{0,63}) */
gr_expr gr_json_integer(gr_builder *b)
{
    gr_expr digits = gr_seq2(b, cls(b, "19"), gr_rep(b, cls(b, "09"), 0, NUM_DIGITS - 1));
    gr_expr x[] = {gr_rep(b, gr_str(b, "-"), 0, 1), gr_alt2(b, gr_str(b, "0"), digits)};
    return gr_seq(b, x, 2);
}

gr_expr gr_json_number(gr_builder *b)
{
    gr_expr d = cls(b, "09");
    gr_expr frac = gr_seq2(b, gr_str(b, "."), gr_rep(b, d, 1, NUM_DIGITS));
    gr_expr ex[] = {cls(b, "eeEE"), gr_rep(b, cls(b, "++--"), 0, 1), gr_rep(b, d, 1, 3)};
    gr_expr x[] = {gr_json_integer(b), gr_rep(b, frac, 0, 1), gr_rep(b, gr_seq(b, ex, 3), 0, 1)};
    return gr_seq(b, x, 3);
}

/* ------------------------------------------------------------ any JSON value */

typedef struct {
    gr_rule value, object, array, string, number;
} any_rules;

static kiln_code any_define(gr_builder *b, any_rules *r, kiln_err *err)
{
    gr_expr ws = gr_json_ws(b);
    gr_expr v = gr_ref(b, r->value), s = gr_ref(b, r->string);
    gr_expr member_x[] = {s, ws, gr_str(b, ":"), ws, v, ws};
    gr_expr member = gr_seq(b, member_x, 6);
    gr_expr more_m[] = {gr_str(b, ","), ws, member};
    gr_expr members = gr_seq2(b, member, gr_rep(b, gr_seq(b, more_m, 3), 0, -1));
    gr_expr obj[] = {gr_str(b, "{"), ws, gr_rep(b, members, 0, 1), gr_str(b, "}")};
    gr_expr item = gr_seq2(b, v, ws);
    gr_expr more_i[] = {gr_str(b, ","), ws, item};
    gr_expr items = gr_seq2(b, item, gr_rep(b, gr_seq(b, more_i, 3), 0, -1));
    gr_expr arr[] = {gr_str(b, "["), ws, gr_rep(b, items, 0, 1), gr_str(b, "]")};
    gr_expr val[] = {gr_ref(b, r->object), gr_ref(b, r->array), s,
                     gr_ref(b, r->number), gr_str(b, "true"),   gr_str(b, "false"),
                     gr_str(b, "null")};
    kiln_code rc = gr_rule_define(b, r->object, gr_seq(b, obj, 4), err);
    if (!rc) rc = gr_rule_define(b, r->array, gr_seq(b, arr, 4), err);
    if (!rc) rc = gr_rule_define(b, r->value, gr_alt(b, val, 7), err);
    if (!rc) rc = gr_rule_define(b, r->string, gr_json_string(b, 0, -1), err);
    if (!rc) rc = gr_rule_define(b, r->number, gr_json_number(b), err);
    return rc;
}

gr_rule gr_json_any_rule(gr_builder *b)
{
    any_rules r = {gr_rule_new(b, "value"), gr_rule_new(b, "object"), gr_rule_new(b, "array"),
                   gr_rule_new(b, "string"), gr_rule_new(b, "number")};
    if (any_define(b, &r, NULL)) return -1;
    return r.value;
}

kiln_code gr_compile_json_any(const char *type, const gr_options *o, gr_grammar **out,
                              kiln_err *err)
{
    *out = NULL;
    gr_builder *b;
    kiln_code rc = gr_builder_create(o, &b, err);
    if (rc) return rc;
    any_rules r = {gr_rule_new(b, "value"), gr_rule_new(b, "object"), gr_rule_new(b, "array"),
                   gr_rule_new(b, "string"), gr_rule_new(b, "number")};
    gr_rule root = gr_rule_new(b, "root");
    rc = any_define(b, &r, err);
    if (!rc) {
        gr_rule body = !type ? r.value : !strcmp(type, "object") ? r.object : r.array;
        gr_expr ws = gr_json_ws(b);
        gr_expr x[] = {ws, gr_ref(b, body), ws};
        rc = gr_rule_define(b, root, gr_seq(b, x, 3), err);
    }
    if (!rc) rc = gr_builder_compile(b, root, out, err);
    gr_builder_destroy(b);
    return rc;
}
