/*
 * gr_regex.c — JSON Schema `pattern` regular expressions (ECMA-262 syntax)
 * as grammar expressions.
 *
 * Supported: literals and escapes (\t \n \r \v \f \0 \xHH \uHHHH \u{H..} \cX,
 * escaped punctuation), `.`, classes [..] / [^..] with ranges and \d \w \s
 * \D \W \S inside or outside, groups ( ), (?: ), (?<name> ), alternation,
 * quantifiers * + ? {n} {n,} {n,m} (lazy forms: the same language), and the
 * anchors ^ and $ at the start and end of a top-level alternative.
 * Refused with KILN_E_UNSUPPORTED naming the construct: backreferences,
 * lookaround, \b \B, \p{..}, anchors elsewhere.
 *
 * Semantics: JSON Schema patterns are unanchored (a string matches when some
 * substring does), so a branch without ^ gets any characters before it and one
 * without $ any after. Validators differ on classes: ECMA's \d \w \s are ASCII
 * (\s plus Unicode spaces) while Python's re (Debian python3-jsonschema) makes
 * them Unicode. Every class here is the intersection of both readings, so a
 * generated string matches under either: \d = [0-9], \w = [A-Za-z0-9_];
 * negated \D \W and negated classes holding \d or \w are limited to ASCII;
 * \S and [^\s] exclude both languages' spaces; `.` excludes \n \r U+2028 U+2029.
 * With `json`, every character is spelled as inside a JSON string (characters
 * JSON must escape appear as escapes; gr_json_class).
 */
#include "grammar/gr_int.h"

#include <stdlib.h>
#include <string.h>

#define RX_MAX_NEST 100
#define RX_MAX_REPEAT 10000

typedef struct {
    gr_builder *b;
    const char *s, *p, *end;
    bool json;
    int depth;
    kiln_err *err;
} rx;

typedef struct {
    uint32_t *v; /* pairs */
    size_t n, cap;
    bool ascii_only; /* negation must stay inside ASCII (\d \w in a negated class) */
} cset;

static int cs_add(cset *c, uint32_t lo, uint32_t hi)
{
    if (c->n == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 16;
        uint32_t *p = realloc(c->v, sizeof *p * 2 * nc);
        if (!p) return -1;
        c->v = p;
        c->cap = nc;
    }
    c->v[2 * c->n] = lo;
    c->v[2 * c->n + 1] = hi;
    c->n++;
    return 0;
}

static kiln_code rx_fail(rx *r, kiln_code code, const char *what)
{
    long at = (long)(r->p - r->s);
    gr_b_fail(r->b, code, "pattern '%.60s': %s (at offset %ld)", r->s, what, at);
    if (r->err) *r->err = r->b->err;
    return code;
}

/* ECMA \s plus Python's Unicode whitespace (\x1c-\x1f, \x85). */
static const uint32_t SPACES[] = {0x09,   0x0D,   0x1C,   0x20,   0x85,   0x85,   0xA0,   0xA0,
                                  0x1680, 0x1680, 0x2000, 0x200A, 0x2028, 0x2029, 0x202F, 0x202F,
                                  0x205F, 0x205F, 0x3000, 0x3000, 0xFEFF, 0xFEFF};

/* Adds shorthand class c (d w s, upper case negated) to set; neg_ctx: inside [^..]. */
static int shorthand(cset *cs, char c, bool neg_ctx)
{
    switch (c) {
    case 'd':
        if (neg_ctx) cs->ascii_only = true;
        return cs_add(cs, '0', '9');
    case 'w':
        if (neg_ctx) cs->ascii_only = true;
        return cs_add(cs, '0', '9') || cs_add(cs, 'A', 'Z') || cs_add(cs, '_', '_') ||
               cs_add(cs, 'a', 'z');
    case 's':
        if (neg_ctx) return 0; /* [^\s]: handled by the caller adding the spaces */
        return cs_add(cs, '\t', '\r') || cs_add(cs, ' ', ' ') || cs_add(cs, 0xA0, 0xA0) ||
               cs_add(cs, 0x1680, 0x1680) || cs_add(cs, 0x2000, 0x200A) ||
               cs_add(cs, 0x2028, 0x2029) || cs_add(cs, 0x202F, 0x202F) ||
               cs_add(cs, 0x205F, 0x205F) || cs_add(cs, 0x3000, 0x3000) ||
               cs_add(cs, 0xFEFF, 0xFEFF);
    case 'D': /* ASCII non-digits */
        return cs_add(cs, 0, '0' - 1) || cs_add(cs, '9' + 1, 0x7F);
    case 'W':
        return cs_add(cs, 0, '0' - 1) || cs_add(cs, '9' + 1, 'A' - 1) ||
               cs_add(cs, 'Z' + 1, '_' - 1) || cs_add(cs, '_' + 1, 'a' - 1) ||
               cs_add(cs, 'z' + 1, 0x7F);
    case 'S': { /* everything but both languages' spaces */
        uint32_t next = 0;
        for (size_t i = 0; i < sizeof SPACES / sizeof *SPACES; i += 2) {
            if (SPACES[i] > next && cs_add(cs, next, SPACES[i] - 1)) return -1;
            next = SPACES[i + 1] + 1;
        }
        return cs_add(cs, next, GR_MAX_CP);
    }
    }
    return -1;
}

static int hexv(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static uint32_t utf8_next(rx *r)
{
    const unsigned char *u = (const unsigned char *)r->p;
    size_t left = (size_t)(r->end - r->p);
    uint32_t cp = u[0];
    int n = cp < 0x80 ? 1 : (cp >> 5) == 6 ? 2 : (cp >> 4) == 14 ? 3 : (cp >> 3) == 30 ? 4 : 0;
    if (n == 0 || (size_t)n > left) {
        r->p++;
        return 0xFFFD;
    }
    if (n > 1) cp &= (1u << (7 - n)) - 1;
    for (int i = 1; i < n; i++)
        cp = cp << 6 | (u[i] & 0x3F);
    r->p += n;
    return cp;
}

/* An escape after '\': a code point (>= 0), a shorthand letter as -(letter), or
 * -1 after an error. in_class: \b is backspace there. */
static int64_t escape(rx *r, bool in_class)
{
    if (r->p >= r->end) return rx_fail(r, KILN_E_INVALID, "pattern ends with '\\'"), -1;
    char c = *r->p++;
    switch (c) {
    case 'd':
    case 'D':
    case 'w':
    case 'W':
    case 's':
    case 'S':
        return -(int64_t)c;
    case 't':
        return '\t';
    case 'n':
        return '\n';
    case 'r':
        return '\r';
    case 'v':
        return '\v';
    case 'f':
        return '\f';
    case '0':
        if (r->p < r->end && *r->p >= '0' && *r->p <= '9')
            return rx_fail(r, KILN_E_UNSUPPORTED, "octal escapes are not supported"), -1;
        return 0;
    case 'b':
        if (in_class) return '\b';
        return rx_fail(r, KILN_E_UNSUPPORTED, "word boundaries (\\b) are not supported"), -1;
    case 'B':
        return rx_fail(r, KILN_E_UNSUPPORTED, "word boundaries (\\B) are not supported"), -1;
    case 'c':
        if (r->p < r->end && ((*r->p >= 'a' && *r->p <= 'z') || (*r->p >= 'A' && *r->p <= 'Z')))
            return (uint32_t)(*r->p++ % 32);
        return rx_fail(r, KILN_E_INVALID, "bad \\c escape"), -1;
    case 'x': {
        int h, l;
        if (r->end - r->p < 2 || (h = hexv(r->p[0])) < 0 || (l = hexv(r->p[1])) < 0)
            return rx_fail(r, KILN_E_INVALID, "bad \\x escape"), -1;
        r->p += 2;
        return h * 16 + l;
    }
    case 'u': {
        uint32_t v = 0;
        if (r->p < r->end && *r->p == '{') {
            r->p++;
            int n = 0;
            while (r->p < r->end && *r->p != '}' && n < 7) {
                int h = hexv(*r->p++);
                if (h < 0) return rx_fail(r, KILN_E_INVALID, "bad \\u{...} escape"), -1;
                v = v * 16 + (uint32_t)h;
                n++;
            }
            if (r->p >= r->end || *r->p != '}' || !n || v > GR_MAX_CP)
                return rx_fail(r, KILN_E_INVALID, "bad \\u{...} escape"), -1;
            r->p++;
            return v;
        }
        for (int i = 0; i < 4; i++) {
            int h = r->p < r->end ? hexv(*r->p) : -1;
            if (h < 0) return rx_fail(r, KILN_E_INVALID, "bad \\u escape"), -1;
            v = v * 16 + (uint32_t)h;
            r->p++;
        }
        if (v >= 0xD800 && v <= 0xDFFF)
            return rx_fail(r, KILN_E_UNSUPPORTED, "surrogate escapes are not supported"), -1;
        return v;
    }
    case 'p':
    case 'P':
        return rx_fail(r, KILN_E_UNSUPPORTED,
                       "Unicode property escapes (\\p{...}) are not supported"),
               -1;
    case 'k':
        return rx_fail(r, KILN_E_UNSUPPORTED, "backreferences are not supported"), -1;
    default:
        if (c >= '1' && c <= '9')
            return rx_fail(r, KILN_E_UNSUPPORTED, "backreferences are not supported"), -1;
        r->p--;
        return utf8_next(r); /* identity escape: \. \/ \- \\ ... */
    }
}

/* The expression for a code point class (spelled for JSON when r->json). */
static gr_expr class_expr(rx *r, cset *cs, bool negate)
{
    gr_builder *b = r->b;
    gr_expr e;
    if (!negate) {
        e = r->json ? gr_json_class(b, cs->v, cs->n) : gr_class(b, cs->v, cs->n, false);
        return e;
    }
    /* complement first (gr_class normalizes), then re-read it as pairs */
    gr_expr c = gr_class(b, cs->v, cs->n, true);
    if (c < 0) return -1;
    const gr_node *nd = gr_b_node(b, c);
    if (nd->kind == GR_E_NONE) return c;
    size_t np = (size_t)nd->b;
    uint32_t *pairs = malloc(sizeof *pairs * 2 * (np + 1));
    if (!pairs) return gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory"), -1;
    size_t k = 0;
    for (size_t i = 0; i < np; i++) {
        uint32_t lo = b->ranges[nd->a + 2 * i], hi = b->ranges[nd->a + 2 * i + 1];
        if (cs->ascii_only) {
            if (lo > 0x7F) continue;
            if (hi > 0x7F) hi = 0x7F;
        }
        pairs[2 * k] = lo;
        pairs[2 * k + 1] = hi;
        k++;
    }
    e = r->json ? gr_json_class(b, pairs, k) : gr_class(b, pairs, k, false);
    free(pairs);
    return e;
}

static gr_expr bracket(rx *r)
{
    r->p++; /* [ */
    bool neg = r->p < r->end && *r->p == '^';
    if (neg) r->p++;
    cset cs = {0};
    gr_expr e = -1;
    bool first = true;
    while (r->p < r->end && (*r->p != ']' || first)) {
        first = false;
        int64_t lo;
        if (*r->p == '\\') {
            r->p++;
            lo = escape(r, true);
            if (lo == -1) goto out;
            if (lo < 0) {
                char sh = (char)-lo;
                if (neg && sh == 's') {
                    for (size_t i = 0; i < sizeof SPACES / sizeof *SPACES; i += 2)
                        if (cs_add(&cs, SPACES[i], SPACES[i + 1])) goto nomem;
                } else if (neg && (sh == 'D' || sh == 'W' || sh == 'S')) {
                    rx_fail(r, KILN_E_UNSUPPORTED, "negated shorthand inside a negated class");
                    goto out;
                } else if (shorthand(&cs, sh, neg)) {
                    goto nomem;
                }
                continue;
            }
        } else if (*r->p == '[' && r->p + 1 < r->end && r->p[1] == ':') {
            rx_fail(r, KILN_E_UNSUPPORTED, "POSIX classes ([:alpha:]) are not ECMAScript");
            goto out;
        } else {
            lo = utf8_next(r);
        }
        int64_t hi = lo;
        if (r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') {
            r->p++;
            if (*r->p == '\\') {
                r->p++;
                hi = escape(r, true);
                if (hi == -1) goto out;
                if (hi < 0) {
                    rx_fail(r, KILN_E_INVALID, "a class shorthand cannot end a range");
                    goto out;
                }
            } else {
                hi = utf8_next(r);
            }
            if (hi < lo) {
                rx_fail(r, KILN_E_INVALID, "character range out of order");
                goto out;
            }
        }
        if (cs_add(&cs, (uint32_t)lo, (uint32_t)hi)) goto nomem;
    }
    if (r->p >= r->end) {
        rx_fail(r, KILN_E_INVALID, "unterminated character class");
        goto out;
    }
    r->p++;
    e = class_expr(r, &cs, neg);
    goto out;
nomem:
    gr_b_fail(r->b, KILN_E_NOMEM, "grammar: out of memory");
out:
    free(cs.v);
    return e;
}

static gr_expr single(rx *r, uint32_t lo, uint32_t hi)
{
    cset cs = {0};
    if (cs_add(&cs, lo, hi)) return gr_b_fail(r->b, KILN_E_NOMEM, "grammar: out of memory"), -1;
    gr_expr e = class_expr(r, &cs, false);
    free(cs.v);
    return e;
}

static gr_expr alternation(rx *r, bool top, bool *anch_start, bool *anch_end);

static bool number(rx *r, int32_t *out)
{
    const char *s = r->p;
    int64_t v = 0;
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
        v = v * 10 + (*r->p++ - '0');
        if (v > RX_MAX_REPEAT) v = RX_MAX_REPEAT + 1;
    }
    *out = (int32_t)v;
    return r->p > s;
}

/* After an atom: its quantifier, if any. */
static gr_expr quantify(rx *r, gr_expr x)
{
    if (r->p >= r->end || x < 0) return x;
    int32_t lo, hi;
    char c = *r->p;
    if (c == '*')
        lo = 0, hi = -1;
    else if (c == '+')
        lo = 1, hi = -1;
    else if (c == '?')
        lo = 0, hi = 1;
    else if (c == '{') {
        const char *save = r->p;
        r->p++;
        if (!number(r, &lo)) { /* not a quantifier: a literal '{' (Annex B) */
            r->p = save;
            return x;
        }
        hi = lo;
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            if (!number(r, &hi)) hi = -1;
        }
        if (r->p >= r->end || *r->p != '}') {
            r->p = save;
            return x;
        }
        if (lo > RX_MAX_REPEAT || hi > RX_MAX_REPEAT)
            return rx_fail(r, KILN_E_UNSUPPORTED, "repetition count over 10000"), -1;
        if (hi >= 0 && hi < lo)
            return rx_fail(r, KILN_E_INVALID, "repetition {m,n} with n < m"), -1;
    } else {
        return x;
    }
    r->p++;
    if (r->p < r->end && *r->p == '?') r->p++; /* lazy: same language */
    if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '?'))
        return rx_fail(r, KILN_E_INVALID, "nothing to repeat"), -1;
    return gr_rep(r->b, x, lo, hi);
}

static gr_expr any_char(rx *r)
{
    cset cs = {0};
    gr_expr e = -1;
    if (cs_add(&cs, 0, 9) || cs_add(&cs, 11, 12) || cs_add(&cs, 14, 0x2027) ||
        cs_add(&cs, 0x202A, GR_MAX_CP))
        gr_b_fail(r->b, KILN_E_NOMEM, "grammar: out of memory");
    else
        e = class_expr(r, &cs, false);
    free(cs.v);
    return e;
}

/* A concatenation; stops at '|', ')' or the end. */
static gr_expr concat(rx *r, bool top, bool *anch_start, bool *anch_end)
{
    gr_expr items[256];
    int n = 0;
    bool first = true;
    while (r->p < r->end && *r->p != '|' && *r->p != ')') {
        char c = *r->p;
        gr_expr x;
        if (c == '^') {
            if (!top || !first)
                return rx_fail(r, KILN_E_UNSUPPORTED, "'^' inside a pattern is not supported"), -1;
            *anch_start = true;
            r->p++;
            continue;
        }
        first = false;
        if (c == '$') {
            r->p++;
            if (!top || (r->p < r->end && *r->p != '|'))
                return rx_fail(r, KILN_E_UNSUPPORTED, "'$' inside a pattern is not supported"), -1;
            *anch_end = true;
            continue;
        }
        if (c == '(') {
            r->p++;
            if (r->p < r->end && *r->p == '?') {
                r->p++;
                if (r->p < r->end && *r->p == ':') {
                    r->p++;
                } else if (r->p < r->end && *r->p == '<' && r->p + 1 < r->end && r->p[1] != '=' &&
                           r->p[1] != '!') {
                    while (r->p < r->end && *r->p != '>')
                        r->p++;
                    if (r->p >= r->end)
                        return rx_fail(r, KILN_E_INVALID, "unterminated group name"), -1;
                    r->p++;
                } else {
                    return rx_fail(r, KILN_E_UNSUPPORTED,
                                   "lookaround assertions are not supported"),
                           -1;
                }
            }
            if (++r->depth > RX_MAX_NEST)
                return rx_fail(r, KILN_E_INVALID, "groups nested too deeply"), -1;
            bool s = false, e = false;
            x = alternation(r, false, &s, &e);
            r->depth--;
            if (x < 0) return -1;
            if (r->p >= r->end || *r->p != ')')
                return rx_fail(r, KILN_E_INVALID, "missing ')'"), -1;
            r->p++;
        } else if (c == '[') {
            x = bracket(r);
        } else if (c == '.') {
            r->p++;
            x = any_char(r);
        } else if (c == '\\') {
            r->p++;
            int64_t e = escape(r, false);
            if (e == -1) return -1;
            if (e < 0) {
                cset cs = {0};
                if (shorthand(&cs, (char)-e, false)) {
                    free(cs.v);
                    return gr_b_fail(r->b, KILN_E_NOMEM, "grammar: out of memory"), -1;
                }
                x = class_expr(r, &cs, false);
                free(cs.v);
            } else {
                x = single(r, (uint32_t)e, (uint32_t)e);
            }
        } else if (c == '*' || c == '+' || c == '?') {
            return rx_fail(r, KILN_E_INVALID, "nothing to repeat"), -1;
        } else {
            uint32_t cp = utf8_next(r);
            x = single(r, cp, cp);
        }
        x = quantify(r, x);
        if (x < 0) return -1;
        if (n == 256) {
            gr_expr f = gr_seq(r->b, items, (size_t)n);
            items[0] = f;
            n = 1;
        }
        items[n++] = x;
    }
    return gr_seq(r->b, items, (size_t)n);
}

static gr_expr any_star(rx *r)
{
    cset cs = {0};
    gr_expr e = -1;
    if (cs_add(&cs, 0, GR_MAX_CP))
        gr_b_fail(r->b, KILN_E_NOMEM, "grammar: out of memory");
    else
        e = class_expr(r, &cs, false);
    free(cs.v);
    return gr_rep(r->b, e, 0, -1);
}

static gr_expr alternation(rx *r, bool top, bool *anch_start, bool *anch_end)
{
    gr_expr alts[128];
    int n = 0;
    for (;;) {
        bool s = false, e = false;
        gr_expr x = concat(r, top, &s, &e);
        if (x < 0) return -1;
        if (top) { /* unanchored ends match anything */
            gr_expr parts[3];
            int k = 0;
            if (!s) parts[k++] = any_star(r);
            parts[k++] = x;
            if (!e) parts[k++] = any_star(r);
            x = gr_seq(r->b, parts, (size_t)k);
        }
        if (n == 128) {
            gr_expr f = gr_alt(r->b, alts, (size_t)n);
            alts[0] = f;
            n = 1;
        }
        alts[n++] = x;
        if (r->p < r->end && *r->p == '|') {
            r->p++;
            continue;
        }
        break;
    }
    (void)anch_start;
    (void)anch_end;
    return gr_alt(r->b, alts, (size_t)n);
}

kiln_code gr_regex_add(gr_builder *b, const char *re, size_t len, bool json, gr_expr *out,
                       kiln_err *err)
{
    *out = -1;
    rx r = {.b = b, .s = re, .p = re, .end = re + len, .json = json, .err = err};
    if (b->failed) {
        if (err) *err = b->err;
        return b->err.code;
    }
    bool s = false, e = false;
    gr_expr x = alternation(&r, true, &s, &e);
    if (x >= 0 && r.p < r.end) {
        rx_fail(&r, KILN_E_INVALID, "unmatched ')'");
        x = -1;
    }
    if (x < 0 || b->failed) {
        if (err) *err = b->err;
        return b->failed ? b->err.code : KILN_E_INVALID;
    }
    *out = x;
    return KILN_OK;
}
