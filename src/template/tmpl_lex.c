/*
 * tmpl_lex.c — template source -> tokens, as @huggingface/jinja tokenizes.
 *
 * Stages, each a pass over the text that keeps, for every byte, its offset in the
 * original source (so errors report the user's line:column):
 *   1. drop one trailing "\n" (Jinja's keep_trailing_newline=False);
 *   2. lstrip_blocks: spaces/tabs from a line start up to "{%", "{#" or "{-" go;
 *   3. trim_blocks: a "\n" right after "%}", "#}" or "-}" goes;
 *   4. transformers' {% generation %} / {% endgeneration %} tags disappear
 *      (with the whitespace on a side marked "-");
 *   5. scanning: text outside tags; inside tags, names, numbers, strings, operators;
 *      "{%-" / "-%}" (and {{- -}}, {#- -#}) trim whitespace (JavaScript's \s).
 * A "-" or "+" after an operator, "(" "[" "{" "," ":" or the start of a tag is a
 * sign: glued to a following number ("-1" is one literal) or a unary operator.
 * Errors: KILN_E_INVALID "template:LINE:COL: ..." (unterminated string or comment,
 * bad escape, unexpected character); KILN_E_NOMEM.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_int.h"

typedef struct {
    char *s;
    uint32_t *map; /* map[i] = source offset of s[i]; map[n] = source length */
    size_t n, cap;
} mbuf;

static bool mb_put(mbuf *m, char c, uint32_t at)
{
    if (m->n + 2 > m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 1024;
        char *s = realloc(m->s, nc);
        if (!s) return false;
        m->s = s;
        uint32_t *map = realloc(m->map, nc * sizeof *map);
        if (!map) return false;
        m->map = map;
        m->cap = nc;
    }
    m->s[m->n] = c;
    m->map[m->n++] = at;
    return true;
}

static void mb_free(mbuf *m)
{
    free(m->s);
    free(m->map);
    memset(m, 0, sizeof *m);
}

void tmpl_linecol(const char *src, size_t len, uint32_t pos, uint32_t *line, uint32_t *col)
{
    uint32_t l = 1, c = 1;
    for (size_t i = 0; i < pos && i < len; i++) {
        if (src[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)src[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

/* ------------------------------------------------------------------ preprocessing */

static bool line_start(const mbuf *in, size_t i)
{
    if (i == 0) return true;
    char p = in->s[i - 1];
    if (p == '\n' || p == '\r') return true;
    /* JS multiline ^ also follows U+2028 / U+2029 (E2 80 A8/A9) */
    return i >= 3 && (unsigned char)in->s[i - 3] == 0xE2 && (unsigned char)in->s[i - 2] == 0x80 &&
           ((unsigned char)p == 0xA8 || (unsigned char)p == 0xA9);
}

static bool pass_lstrip(const mbuf *in, mbuf *out)
{
    for (size_t i = 0; i < in->n;) {
        if (line_start(in, i)) {
            size_t j = i;
            while (j < in->n && (in->s[j] == ' ' || in->s[j] == '\t'))
                j++;
            if (j > i && j + 1 < in->n && in->s[j] == '{' &&
                (in->s[j + 1] == '#' || in->s[j + 1] == '%' || in->s[j + 1] == '-'))
                i = j;
        }
        if (i >= in->n) break;
        if (!mb_put(out, in->s[i], in->map[i])) return false;
        i++;
    }
    return true;
}

static bool pass_trim(const mbuf *in, mbuf *out)
{
    for (size_t i = 0; i < in->n; i++) {
        if (!mb_put(out, in->s[i], in->map[i])) return false;
        if (in->s[i] == '}' && i > 0 && i + 1 < in->n && in->s[i + 1] == '\n' &&
            (in->s[i - 1] == '#' || in->s[i - 1] == '%' || in->s[i - 1] == '-'))
            i++; /* drop the newline */
    }
    return true;
}

/* Matches "{%" "-"? \s* "end"? "generation" \s* "-"? "%}" at i; returns its length. */
static size_t gen_tag(const mbuf *in, size_t i, bool *lstrip, bool *rstrip)
{
    const char *s = in->s;
    size_t n = in->n, j = i;
    if (j + 2 > n || s[j] != '{' || s[j + 1] != '%') return 0;
    j += 2;
    *lstrip = j < n && s[j] == '-';
    if (*lstrip) j++;
    for (size_t w; (w = js_space(s, n, j));)
        j += w;
    if (j + 3 <= n && !memcmp(s + j, "end", 3)) j += 3;
    if (j + 10 > n || memcmp(s + j, "generation", 10)) return 0;
    j += 10;
    for (size_t w; (w = js_space(s, n, j));)
        j += w;
    *rstrip = j < n && s[j] == '-';
    if (*rstrip) j++;
    if (j + 2 > n || s[j] != '%' || s[j + 1] != '}') return 0;
    return j + 2 - i;
}

static bool pass_generation(const mbuf *in, mbuf *out)
{
    size_t floor = 0; /* output bytes before this may not be trimmed (earlier matches) */
    for (size_t i = 0; i < in->n;) {
        bool ls, rs;
        size_t len = in->s[i] == '{' ? gen_tag(in, i, &ls, &rs) : 0;
        if (!len) {
            if (!mb_put(out, in->s[i], in->map[i])) return false;
            i++;
            continue;
        }
        if (ls) { /* drop the whitespace run already copied before the tag */
            while (out->n > floor) {
                size_t k = out->n - 1;
                while (k > floor && ((unsigned char)out->s[k] & 0xC0) == 0x80)
                    k--;
                if (!js_space(out->s, out->n, k)) break;
                out->n = k;
            }
        }
        i += len;
        if (rs)
            for (size_t w; (w = js_space(in->s, in->n, i));)
                i += w;
        floor = out->n;
    }
    return true;
}

/* ------------------------------------------------------------------ scanning */

typedef struct {
    const char *s;
    const uint32_t *map;
    size_t n, i;
    tmpl_toks *out;
    kiln_err *err;
    const char *src;
    size_t src_len;
} lexer;

static kiln_code lex_fail(lexer *L, size_t at, kiln_code code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static kiln_code lex_fail(lexer *L, size_t at, kiln_code code, const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    uint32_t line, col;
    tmpl_linecol(L->src, L->src_len, at < L->n ? L->map[at] : (uint32_t)L->src_len, &line, &col);
    return kiln_fail(L->err, code, "template:%u:%u: %s", line, col, msg);
}

static tmpl_tok *last_tok(lexer *L)
{
    return L->out->n ? &L->out->v[L->out->n - 1] : NULL;
}

static kiln_code push(lexer *L, uint8_t kind, size_t at, const char *s, size_t len)
{
    tmpl_toks *t = L->out;
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 64;
        tmpl_tok *v = realloc(t->v, nc * sizeof *v);
        if (!v) return kiln_fail(L->err, KILN_E_NOMEM, "template: out of memory");
        t->v = v;
        t->cap = nc;
    }
    char *copy = malloc(len + 1);
    if (!copy) return kiln_fail(L->err, KILN_E_NOMEM, "template: out of memory");
    if (len) memcpy(copy, s, len);
    copy[len] = '\0';
    t->v[t->n++] = (tmpl_tok){
        .kind = kind, .pos = at < L->n ? L->map[at] : (uint32_t)L->src_len, .s = copy, .len = len};
    return KILN_OK;
}

static void strip_trailing(lexer *L)
{
    tmpl_tok *t = last_tok(L);
    if (!t || t->kind != T_TEXT) return;
    while (t->len > 0) {
        size_t k = t->len - 1;
        while (k > 0 && ((unsigned char)t->s[k] & 0xC0) == 0x80)
            k--;
        if (!js_space(t->s, t->len, k)) break;
        t->len = k;
    }
    t->s[t->len] = '\0';
    if (t->len == 0) {
        free(t->s);
        L->out->n--;
    }
}

static void skip_space(lexer *L)
{
    for (size_t w; (w = js_space(L->s, L->n, L->i));)
        L->i += w;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static kiln_code lex_string(lexer *L)
{
    char q = L->s[L->i];
    size_t start = L->i++;
    char *buf = malloc(L->n - L->i + 1), *o = buf;
    if (!buf) return kiln_fail(L->err, KILN_E_NOMEM, "template: out of memory");
    uint32_t pending_hi = 0; /* a \uD8xx waiting for its low surrogate */
    while (L->i < L->n && L->s[L->i] != q) {
        char c = L->s[L->i];
        if (c != '\\') {
            *o++ = c;
            L->i++;
            continue;
        }
        if (++L->i >= L->n) break;
        char e = L->s[L->i++];
        if (e == 'x' || e == 'u') {
            int len = e == 'x' ? 2 : 4;
            uint32_t v = 0;
            for (int k = 0; k < len; k++) {
                int h = L->i + (size_t)k < L->n ? hexval(L->s[L->i + (size_t)k]) : -1;
                if (h < 0) {
                    free(buf);
                    return lex_fail(L, L->i - 2, KILN_E_INVALID,
                                    "invalid hexadecimal escape sequence");
                }
                v = v * 16 + (uint32_t)h;
            }
            L->i += (size_t)len;
            if (v >= 0xD800 && v < 0xDC00) {
                pending_hi = v;
                continue;
            }
            if (v >= 0xDC00 && v < 0xE000 && pending_hi) {
                v = 0x10000 + ((pending_hi - 0xD800) << 10) + (v - 0xDC00);
            } else if (v >= 0xD800 && v < 0xE000) {
                v = 0xFFFD;
            }
            pending_hi = 0;
            o += utf8_put(o, v); /* never longer than the escape it replaces */
            continue;
        }
        char r;
        switch (e) {
        case 'n':
            r = '\n';
            break;
        case 't':
            r = '\t';
            break;
        case 'r':
            r = '\r';
            break;
        case 'b':
            r = '\b';
            break;
        case 'f':
            r = '\f';
            break;
        case 'v':
            r = '\v';
            break;
        case '\'':
            r = '\'';
            break;
        case '"':
            r = '"';
            break;
        case '\\':
            r = '\\';
            break;
        default:
            free(buf);
            return lex_fail(L, L->i - 2, KILN_E_INVALID, "unexpected escaped character: %c", e);
        }
        *o++ = r;
    }
    if (L->i >= L->n) {
        free(buf);
        return lex_fail(L, start, KILN_E_INVALID, "unterminated string literal");
    }
    L->i++; /* closing quote */
    kiln_code c = push(L, T_STR, start, buf, (size_t)(o - buf));
    free(buf);
    return c;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_word(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static kiln_code lex_comment(lexer *L)
{
    size_t start = L->i;
    L->i += 2;
    bool strip_before = L->i < L->n && L->s[L->i] == '-';
    if (strip_before) L->i++;
    size_t body = L->i;
    while (L->i + 1 < L->n && !(L->s[L->i] == '#' && L->s[L->i + 1] == '}'))
        L->i++;
    if (L->i + 1 >= L->n) return lex_fail(L, start, KILN_E_INVALID, "missing end of comment tag");
    bool strip_after = L->i > body && L->s[L->i - 1] == '-';
    if (strip_before) strip_trailing(L);
    kiln_code c = push(L, T_COMMENT, start, "", 0);
    L->i += 2;
    if (strip_after) skip_space(L);
    return c;
}

static const struct {
    const char *seq;
    uint8_t kind;
} OPS[] = {
    {"{%", T_OPEN_STMT}, {"%}", T_CLOSE_STMT}, {"{{", T_OPEN_EXPR}, {"}}", T_CLOSE_EXPR},
    {"(", T_LPAREN},     {")", T_RPAREN},      {"{", T_LBRACE},     {"}", T_RBRACE},
    {"[", T_LBRACKET},   {"]", T_RBRACKET},    {",", T_COMMA},      {".", T_DOT},
    {":", T_COLON},      {"|", T_PIPE},        {"<=", T_CMP},       {">=", T_CMP},
    {"==", T_CMP},       {"!=", T_CMP},        {"<", T_CMP},        {">", T_CMP},
    {"+", T_ADD},        {"-", T_ADD},         {"~", T_ADD},        {"**", T_POW},
    {"*", T_MUL},        {"//", T_MUL},        {"/", T_MUL},        {"%", T_MUL},
    {"=", T_EQ},
};

static kiln_code lex_number(lexer *L, size_t start, bool after_dot)
{
    while (L->i < L->n && is_digit(L->s[L->i]))
        L->i++;
    if (!after_dot && L->i + 1 < L->n && L->s[L->i] == '.' && is_digit(L->s[L->i + 1])) {
        L->i++;
        while (L->i < L->n && is_digit(L->s[L->i]))
            L->i++;
    }
    /* Jinja2's exponent form (1e3, 2.5E-7); @huggingface/jinja has none */
    if (!after_dot && L->i + 1 < L->n && (L->s[L->i] == 'e' || L->s[L->i] == 'E')) {
        size_t j = L->i + 1;
        if (j < L->n && (L->s[j] == '+' || L->s[j] == '-')) j++;
        if (j < L->n && is_digit(L->s[j])) {
            L->i = j;
            while (L->i < L->n && is_digit(L->s[L->i]))
                L->i++;
        }
    }
    return push(L, T_NUM, start, L->s + start, L->i - start);
}

static kiln_code lex_in_tag(lexer *L, int *brace_depth)
{
    char c = L->s[L->i];
    tmpl_tok *last = last_tok(L);
    if (c == '-' || c == '+') {
        uint8_t lk = last ? last->kind : T_TEXT;
        if (lk == T_TEXT) return lex_fail(L, L->i, KILN_E_INVALID, "unexpected character: %c", c);
        if (!(lk == T_NAME || lk == T_NUM || lk == T_STR || lk == T_RPAREN || lk == T_RBRACKET)) {
            size_t start = L->i++;
            if (L->i < L->n && is_digit(L->s[L->i])) return lex_number(L, start, false);
            return push(L, T_UNARY, start, L->s + start, 1);
        }
    }
    for (size_t k = 0; k < sizeof OPS / sizeof OPS[0]; k++) {
        size_t len = strlen(OPS[k].seq);
        if (OPS[k].kind == T_CLOSE_EXPR && *brace_depth > 0) continue;
        if (L->i + len > L->n || memcmp(L->s + L->i, OPS[k].seq, len)) continue;
        if (OPS[k].kind == T_OPEN_EXPR) *brace_depth = 0;
        if (OPS[k].kind == T_LBRACE) ++*brace_depth;
        if (OPS[k].kind == T_RBRACE) --*brace_depth;
        size_t start = L->i;
        L->i += len;
        return push(L, OPS[k].kind, start, OPS[k].seq, len);
    }
    if (c == '\'' || c == '"') return lex_string(L);
    if (is_digit(c)) return lex_number(L, L->i, last && last->kind == T_DOT);
    if (is_word(c)) {
        size_t start = L->i;
        while (L->i < L->n && is_word(L->s[L->i]))
            L->i++;
        return push(L, T_NAME, start, L->s + start, L->i - start);
    }
    if ((unsigned char)c >= 0x80) {
        uint32_t cp;
        utf8_next(L->s, L->n, L->i, &cp);
        return lex_fail(L, L->i, KILN_E_INVALID, "unexpected character: U+%04X", cp);
    }
    return lex_fail(L, L->i, KILN_E_INVALID, "unexpected character: %c", c);
}

static kiln_code scan(lexer *L)
{
    int brace_depth = 0;
    kiln_code rc;
    while (L->i < L->n) {
        tmpl_tok *last = last_tok(L);
        if (!last || last->kind == T_CLOSE_STMT || last->kind == T_CLOSE_EXPR ||
            last->kind == T_COMMENT) {
            size_t start = L->i;
            while (L->i < L->n &&
                   !(L->s[L->i] == '{' && L->i + 1 < L->n &&
                     (L->s[L->i + 1] == '%' || L->s[L->i + 1] == '{' || L->s[L->i + 1] == '#')))
                L->i++;
            if (L->i > start) {
                if ((rc = push(L, T_TEXT, start, L->s + start, L->i - start))) return rc;
                continue;
            }
        }
        if (L->i + 1 < L->n && L->s[L->i] == '{' && L->s[L->i + 1] == '#') {
            if ((rc = lex_comment(L))) return rc;
            continue;
        }
        if (L->i + 2 < L->n && L->s[L->i] == '{' && L->s[L->i + 2] == '-' &&
            (L->s[L->i + 1] == '%' || L->s[L->i + 1] == '{')) {
            bool stmt = L->s[L->i + 1] == '%';
            strip_trailing(L);
            if ((rc = push(L, stmt ? T_OPEN_STMT : T_OPEN_EXPR, L->i, stmt ? "{%" : "{{", 2)))
                return rc;
            if (!stmt) brace_depth = 0;
            L->i += 3;
            continue;
        }
        skip_space(L);
        if (L->i >= L->n) break;
        if (L->i + 2 < L->n && L->s[L->i] == '-' && L->s[L->i + 2] == '}' &&
            (L->s[L->i + 1] == '%' || L->s[L->i + 1] == '}')) {
            bool stmt = L->s[L->i + 1] == '%';
            if ((rc = push(L, stmt ? T_CLOSE_STMT : T_CLOSE_EXPR, L->i, stmt ? "%}" : "}}", 2)))
                return rc;
            L->i += 3;
            skip_space(L);
            continue;
        }
        if ((rc = lex_in_tag(L, &brace_depth))) return rc;
    }
    return KILN_OK;
}

void tmpl_toks_free(tmpl_toks *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->v[i].s);
    free(t->v);
    memset(t, 0, sizeof *t);
}

kiln_code tmpl_lex(const char *src, size_t len, const tmpl_options *opt, tmpl_toks *out,
                   kiln_err *err)
{
    memset(out, 0, sizeof *out);
    if (len >= UINT32_MAX / 2)
        return kiln_fail(err, KILN_E_TOO_LARGE, "template: source of %zu bytes is too large", len);
    mbuf a = {0}, b = {0};
    kiln_code rc = KILN_OK;
    size_t n = len;
    if (n > 0 && src[n - 1] == '\n') n--;
    for (size_t i = 0; i < n; i++)
        if (!mb_put(&a, src[i], (uint32_t)i)) goto nomem;
    if (opt->lstrip_blocks) {
        if (!pass_lstrip(&a, &b)) goto nomem;
        mb_free(&a);
        a = b;
        memset(&b, 0, sizeof b);
    }
    if (opt->trim_blocks) {
        if (!pass_trim(&a, &b)) goto nomem;
        mb_free(&a);
        a = b;
        memset(&b, 0, sizeof b);
    }
    if (!pass_generation(&a, &b)) goto nomem;
    mb_free(&a);
    if (!mb_put(&b, '\0', (uint32_t)len)) goto nomem; /* map[n] = end of source */
    b.n--;
    lexer L = {
        .s = b.s, .map = b.map, .n = b.n, .out = out, .err = err, .src = src, .src_len = len};
    rc = scan(&L);
    if (rc == KILN_OK) rc = push(&L, T_EOF, b.n, "", 0);
    mb_free(&b);
    if (rc != KILN_OK) tmpl_toks_free(out);
    return rc;
nomem:
    mb_free(&a);
    mb_free(&b);
    return kiln_fail(err, KILN_E_NOMEM, "template: out of memory");
}
