/*
 * gr_gbnf.c — llama.cpp's GBNF grammar format into a builder.
 *
 *   root  ::= "{" ws pair ("," ws pair)* "}"     # comments run to the end of the line
 *   pair  ::= [a-z]+ ":" ws ( [0-9]{1,3} | "null" )
 *   ws    ::= [ \t\n]*
 *
 * Items: "literal", [class] / [^class] (ranges, escapes), `.` (any character),
 * rule names, ( groups ); postfix * + ? {m} {m,} {m,n} {,n}; `|` between
 * alternatives. As in llama.cpp a rule ends at a newline unless the newline is
 * inside parentheses or follows `::=` or `|`; kiln also continues a rule on a
 * line that starts with `|`. Escapes: \x.. \u.... \U........ \t \r \n \\ \" \[ \]
 * \- (code points). Rule names: letters, digits, '-' and '_'. The start rule
 * is `root`. Token references (<[id]>, <|name|>) name special tokens, which a
 * constraint never allows: they are refused (KILN_E_UNSUPPORTED).
 * Errors: KILN_E_INVALID with the line and column and what was expected.
 */
#include "grammar/gr_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NEST 200
#define MAX_REPEAT 100000

typedef struct {
    gr_builder *b;
    const char *s, *p, *end;
    const char *prefix;
    int depth;
    kiln_err *err;
    kiln_code rc;
} gp;

static kiln_code perr(gp *g, const char *what)
{
    if (g->rc) return g->rc;
    int line = 1, col = 1;
    for (const char *q = g->s; q < g->p && q < g->end; q++) {
        if (*q == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    kiln_code code = strstr(what, "not supported") ? KILN_E_UNSUPPORTED : KILN_E_INVALID;
    g->rc = gr_b_fail(g->b, code, "grammar: line %d column %d: %s", line, col, what);
    if (g->err) *g->err = g->b->err;
    return g->rc;
}

static bool word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* Skips spaces, tabs and comments; newlines too when nl_ok. */
static void space(gp *g, bool nl_ok)
{
    while (g->p < g->end) {
        char c = *g->p;
        if (c == ' ' || c == '\t' || (nl_ok && (c == '\n' || c == '\r'))) {
            g->p++;
        } else if (c == '#') {
            while (g->p < g->end && *g->p != '\n')
                g->p++;
        } else {
            break;
        }
    }
}

/* Decodes one UTF-8 character at p (invalid bytes count as U+FFFD, 1 byte). */
static uint32_t utf8_next(gp *g)
{
    const unsigned char *u = (const unsigned char *)g->p;
    size_t left = (size_t)(g->end - g->p);
    uint32_t cp = u[0];
    int n = cp < 0x80 ? 1 : (cp >> 5) == 6 ? 2 : (cp >> 4) == 14 ? 3 : (cp >> 3) == 30 ? 4 : 0;
    if (n == 0 || (size_t)n > left) {
        g->p++;
        return 0xFFFD;
    }
    if (n > 1) cp &= (1u << (7 - n)) - 1;
    for (int i = 1; i < n; i++) {
        if ((u[i] & 0xC0) != 0x80) {
            g->p++;
            return 0xFFFD;
        }
        cp = cp << 6 | (u[i] & 0x3F);
    }
    g->p += n;
    return cp;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class (escape or UTF-8); -1 after an error. */
static int64_t char_at(gp *g)
{
    if (g->p >= g->end) return perr(g, "unexpected end of grammar"), -1;
    if (*g->p != '\\') return utf8_next(g);
    g->p++;
    if (g->p >= g->end) return perr(g, "unexpected end after '\\'"), -1;
    char e = *g->p++;
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = g->p < g->end ? hexval(*g->p) : -1;
            if (h < 0) return perr(g, "expected hex digits in an escape"), -1;
            v = v << 4 | (uint32_t)h;
            g->p++;
        }
        if (v > GR_MAX_CP || (v >= 0xD800 && v <= 0xDFFF))
            return perr(g, "escape is not a Unicode scalar value"), -1;
        return v;
    }
    switch (e) {
    case 't':
        return '\t';
    case 'r':
        return '\r';
    case 'n':
        return '\n';
    case '\\':
    case '"':
    case '[':
    case ']':
    case '-':
    case '\'':
    case '/':
        return e;
    default:
        break;
    }
    g->p--;
    return perr(g, "unknown escape"), -1;
}

static gr_expr alternatives(gp *g, bool nested);

static gr_expr literal(gp *g)
{
    g->p++; /* " */
    char buf[256];
    size_t n = 0;
    char *big = NULL;
    size_t cap = 0;
    gr_expr e = -1;
    while (g->p < g->end && *g->p != '"') {
        if (*g->p == '\n') {
            perr(g, "newline inside a literal");
            goto out;
        }
        int64_t cp = char_at(g);
        if (cp < 0) goto out;
        uint8_t u[4];
        int k = gr_utf8_encode((uint32_t)cp, u);
        char *dst = big ? big : buf;
        size_t dcap = big ? cap : sizeof buf;
        if (n + 4 > dcap) {
            size_t nc = dcap * 2;
            char *nb = realloc(big, nc);
            if (!nb) {
                gr_b_fail(g->b, KILN_E_NOMEM, "grammar: out of memory");
                goto out;
            }
            if (!big) memcpy(nb, buf, n);
            big = nb;
            cap = nc;
            dst = big;
        }
        memcpy(dst + n, u, (size_t)k);
        n += (size_t)k;
    }
    if (g->p >= g->end) {
        perr(g, "unterminated literal");
        goto out;
    }
    g->p++;
    e = gr_lit(g->b, big ? big : buf, n);
out:
    free(big);
    return e;
}

static gr_expr char_class(gp *g)
{
    g->p++; /* [ */
    bool neg = g->p < g->end && *g->p == '^';
    if (neg) g->p++;
    uint32_t *pairs = NULL;
    size_t n = 0, cap = 0;
    gr_expr e = -1;
    while (g->p < g->end && *g->p != ']') {
        int64_t lo = char_at(g), hi;
        if (lo < 0) goto out;
        hi = lo;
        if (g->p + 1 < g->end && *g->p == '-' && g->p[1] != ']') {
            g->p++;
            hi = char_at(g);
            if (hi < 0) goto out;
            if (hi < lo) {
                perr(g, "character range is out of order");
                goto out;
            }
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            uint32_t *np = realloc(pairs, sizeof *np * 2 * cap);
            if (!np) {
                gr_b_fail(g->b, KILN_E_NOMEM, "grammar: out of memory");
                goto out;
            }
            pairs = np;
        }
        pairs[2 * n] = (uint32_t)lo;
        pairs[2 * n + 1] = (uint32_t)hi;
        n++;
    }
    if (g->p >= g->end) {
        perr(g, "unterminated character class");
        goto out;
    }
    g->p++;
    e = gr_class(g->b, pairs, n, neg);
out:
    free(pairs);
    return e;
}

static bool number(gp *g, int32_t *out)
{
    int64_t v = 0;
    const char *start = g->p;
    while (g->p < g->end && *g->p >= '0' && *g->p <= '9') {
        v = v * 10 + (*g->p++ - '0');
        if (v > MAX_REPEAT) {
            perr(g, "repetition count is too large (limit 100000)");
            return false;
        }
    }
    *out = (int32_t)v;
    return g->p > start;
}

/* {m}, {m,}, {m,n}, {,n} after an item */
static gr_expr braces(gp *g, gr_expr x)
{
    g->p++;
    space(g, false);
    int32_t lo = 0, hi = -1;
    bool have_lo = number(g, &lo);
    if (g->rc) return -1;
    space(g, false);
    if (g->p < g->end && *g->p == ',') {
        g->p++;
        space(g, false);
        if (!number(g, &hi)) hi = -1;
        if (g->rc) return -1;
        space(g, false);
    } else {
        if (!have_lo) return perr(g, "expected a number in '{...}'"), -1;
        hi = lo;
    }
    if (g->p >= g->end || *g->p != '}') return perr(g, "expected '}'"), -1;
    g->p++;
    if (hi >= 0 && hi < lo) return perr(g, "repetition {m,n} has n < m"), -1;
    return gr_rep(g->b, x, lo, hi);
}

static gr_rule rule_named(gp *g, const char *name, size_t n)
{
    char full[256];
    if (snprintf(full, sizeof full, "%s%.*s", g->prefix, (int)n, name) >= (int)sizeof full) {
        perr(g, "rule name is too long");
        return -1;
    }
    for (int32_t i = 0; i < g->b->n_rules; i++)
        if (!strcmp(g->b->rules[i].name, full)) return i;
    return gr_rule_new(g->b, full);
}

static gr_expr sequence(gp *g, bool nested)
{
    gr_expr items[512];
    int n = 0;
    for (;;) {
        space(g, nested);
        if (g->p >= g->end) break;
        char c = *g->p;
        gr_expr x;
        if (c == '"') {
            x = literal(g);
        } else if (c == '[') {
            x = char_class(g);
        } else if (c == '.') {
            g->p++;
            static const uint32_t any[] = {0, GR_MAX_CP};
            x = gr_class(g->b, any, 1, false);
        } else if (c == '(') {
            if (++g->depth > MAX_NEST) return perr(g, "parentheses nested too deeply"), -1;
            g->p++;
            x = alternatives(g, true);
            g->depth--;
            if (x < 0) return -1;
            space(g, true);
            if (g->p >= g->end || *g->p != ')') return perr(g, "expected ')'"), -1;
            g->p++;
        } else if (c == '<' || (c == '!' && g->p + 1 < g->end && g->p[1] == '<')) {
            return perr(g, "token references (<...>) are not supported: special tokens are never "
                           "allowed inside a constraint"),
                   -1;
        } else if (word_char(c)) {
            const char *nm = g->p;
            while (g->p < g->end && word_char(*g->p))
                g->p++;
            const char *save = g->p;
            space(g, false);
            if (g->end - g->p >= 3 && !memcmp(g->p, "::=", 3)) { /* the next rule begins */
                g->p = nm;
                break;
            }
            g->p = save;
            gr_rule r = rule_named(g, nm, (size_t)(save - nm));
            x = gr_ref(g->b, r);
        } else {
            break;
        }
        if (x < 0) return perr(g, "invalid item"), -1;
        /* postfix operators */
        for (;;) {
            space(g, false);
            if (g->p >= g->end) break;
            char o = *g->p;
            if (o == '*')
                x = gr_rep(g->b, x, 0, -1);
            else if (o == '+')
                x = gr_rep(g->b, x, 1, -1);
            else if (o == '?')
                x = gr_rep(g->b, x, 0, 1);
            else if (o == '{') {
                x = braces(g, x);
                if (x < 0) return -1;
                continue;
            } else
                break;
            g->p++;
            if (x < 0) return -1;
        }
        if (n == (int)(sizeof items / sizeof *items)) {
            gr_expr folded = gr_seq(g->b, items, (size_t)n);
            items[0] = folded;
            n = 1;
        }
        items[n++] = x;
    }
    return gr_seq(g->b, items, (size_t)n);
}

static gr_expr alternatives(gp *g, bool nested)
{
    gr_expr alts[256];
    int n = 0;
    for (;;) {
        gr_expr s = sequence(g, nested);
        if (s < 0) return -1;
        if (n == (int)(sizeof alts / sizeof *alts)) {
            gr_expr folded = gr_alt(g->b, alts, (size_t)n);
            alts[0] = folded;
            n = 1;
        }
        alts[n++] = s;
        space(g, nested);
        const char *save = g->p;
        if (!nested) { /* kiln: a top-level line starting with '|' continues the rule */
            space(g, true);
            if (g->p >= g->end || *g->p != '|') g->p = save;
        }
        if (g->p < g->end && *g->p == '|') {
            g->p++;
            space(g, true);
            continue;
        }
        break;
    }
    return gr_alt(g->b, alts, (size_t)n);
}

kiln_code gr_builder_add_gbnf(gr_builder *b, const char *text, size_t len, const char *prefix,
                              gr_rule *root, kiln_err *err)
{
    *root = -1;
    gp g = {.b = b,
            .s = text,
            .p = text,
            .end = text + len,
            .prefix = prefix ? prefix : "",
            .err = err};
    if (b->failed) {
        if (err) *err = b->err;
        return b->err.code;
    }
    gr_rule first = -1;
    for (;;) {
        space(&g, true);
        if (g.p >= g.end) break;
        const char *nm = g.p;
        while (g.p < g.end && word_char(*g.p))
            g.p++;
        if (g.p == nm) return perr(&g, "expected a rule name");
        size_t nlen = (size_t)(g.p - nm);
        space(&g, false);
        if (g.end - g.p < 3 || memcmp(g.p, "::=", 3)) return perr(&g, "expected '::='");
        g.p += 3;
        space(&g, true);
        gr_rule r = rule_named(&g, nm, nlen);
        if (r < 0) return perr(&g, "invalid rule");
        gr_expr body = alternatives(&g, false);
        if (body < 0) return g.rc ? g.rc : perr(&g, "invalid rule body");
        space(&g, false);
        if (g.p < g.end && *g.p != '\n' && *g.p != '\r')
            return perr(&g, "expected the end of the line");
        if (b->rules[r].body >= 0) {
            char msg[160];
            snprintf(msg, sizeof msg, "rule '%.*s' is defined twice", (int)nlen, nm);
            return perr(&g, msg);
        }
        b->rules[r].body = body;
        if (first < 0) first = r;
        if (gr_b_check_time(b)) {
            if (err) *err = b->err;
            return b->err.code;
        }
    }
    char rn[256];
    snprintf(rn, sizeof rn, "%sroot", g.prefix);
    for (int32_t i = 0; i < b->n_rules; i++)
        if (!strcmp(b->rules[i].name, rn)) *root = i;
    if (*root < 0) {
        g.p = g.end;
        return perr(&g, first < 0 ? "the grammar is empty" : "the grammar has no 'root' rule");
    }
    for (int32_t i = 0; i < b->n_rules; i++)
        if (b->rules[i].body < 0 && !strncmp(b->rules[i].name, g.prefix, strlen(g.prefix))) {
            char msg[200];
            snprintf(msg, sizeof msg, "rule '%s' is used but not defined",
                     b->rules[i].name + strlen(g.prefix));
            g.p = g.end;
            return perr(&g, msg);
        }
    return KILN_OK;
}

kiln_code gr_compile_gbnf(const char *text, size_t len, const gr_options *o, gr_grammar **out,
                          kiln_err *err)
{
    *out = NULL;
    gr_builder *b;
    kiln_code rc = gr_builder_create(o, &b, err);
    if (rc) return rc;
    gr_rule root;
    rc = gr_builder_add_gbnf(b, text, len, "", &root, err);
    if (!rc) rc = gr_builder_compile(b, root, out, err);
    gr_builder_destroy(b);
    return rc;
}
