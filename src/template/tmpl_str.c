/*
 * tmpl_str.c — text helpers for the template runtime: the string builder (bounded
 * by max_output), a value's output form (what {{ v }} prints), Python float repr,
 * truthiness, and UTF-8 / whitespace classification.
 *
 * Output form (@huggingface/jinja, which the tests pin): none and undefined print
 * nothing; booleans print true/false; lists, dicts and namespaces print as JSON with
 * ", " / ": " separators and undefined members as `undefined`; floats print as
 * Python's repr (1.0, 0.1, 1e-05).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_int.h"

/* ------------------------------------------------------------------ builder */

bool sb_put(tmpl_rt *rt, tmpl_sb *b, const char *s, size_t n)
{
    if (n == 0) return true;
    if (rt && (n > rt->out_max || b->len > rt->out_max - n)) {
        rt_fail(rt, NULL, KILN_E_TOO_LARGE, "template output exceeds %zu bytes", rt->out_max);
        return false;
    }
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->len + n + 1)
            nc *= 2;
        if (rt && nc > rt->out_max + 1) nc = rt->out_max + 1; /* never needs more (checked above) */
        char *p = realloc(b->p, nc);
        if (!p) {
            if (rt) rt_nomem(rt);
            return false;
        }
        b->p = p;
        if (rt && !b->rt) b->rt = rt;
        if (b->rt) b->rt->sb_mem += nc - b->cap;
        b->cap = nc;
        if (b->rt && !rt_account(b->rt)) return false;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return true;
}

bool sb_putc(tmpl_rt *rt, tmpl_sb *b, char c)
{
    return sb_put(rt, b, &c, 1);
}

bool sb_printf(tmpl_rt *rt, tmpl_sb *b, const char *fmt, ...)
{
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) return false;
    return sb_put(rt, b, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

tmpl_value *sb_take(tmpl_rt *rt, tmpl_sb *b)
{
    tmpl_value *v = tv_str(rt, b->p ? b->p : "", b->len);
    sb_free(b);
    return v;
}

void sb_free(tmpl_sb *b)
{
    if (b->rt) b->rt->sb_mem -= b->cap < b->rt->sb_mem ? b->cap : b->rt->sb_mem;
    b->rt = NULL;
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* ------------------------------------------------------------------ numbers */

/* Python repr(float): the shortest digits that round-trip; exponent form when the
 * decimal exponent is < -4 or >= 16; integral values keep ".0". */
void fmt_float(char *buf, size_t n, double f)
{
    if (isnan(f)) {
        snprintf(buf, n, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(buf, n, f < 0 ? "-inf" : "inf");
        return;
    }
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp = d.ddddde[+-]XX */
    char digits[24];
    int nd = 0;
    const char *p = tmp;
    bool neg = false;
    if (*p == '-') {
        neg = true;
        p++;
    }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    char out[64];
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (exp10 < -4 || exp10 >= 16) {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++)
                out[o++] = digits[i];
        }
        o += (size_t)snprintf(out + o, sizeof out - o, "e%c%02d", exp10 < 0 ? '-' : '+',
                              exp10 < 0 ? -exp10 : exp10);
    } else if (exp10 < 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < -exp10 - 1; i++)
            out[o++] = '0';
        for (int i = 0; i < nd; i++)
            out[o++] = digits[i];
    } else {
        for (int i = 0; i <= exp10; i++)
            out[o++] = i < nd ? digits[i] : '0';
        out[o++] = '.';
        if (nd > exp10 + 1)
            for (int i = exp10 + 1; i < nd; i++)
                out[o++] = digits[i];
        else
            out[o++] = '0';
    }
    out[o] = '\0';
    snprintf(buf, n, "%s", out);
}

/* ------------------------------------------------------------------ output form */

bool tv_write_str(tmpl_rt *rt, tmpl_sb *b, const tmpl_value *v)
{
    char buf[64];
    switch (v->kind) {
    case TV_UNDEF:
    case TV_NONE:
        return true;
    case TV_BOOL:
        return v->u.b ? sb_put(rt, b, "true", 4) : sb_put(rt, b, "false", 5);
    case TV_INT:
        snprintf(buf, sizeof buf, "%lld", (long long)v->u.i);
        return sb_put(rt, b, buf, strlen(buf));
    case TV_FLOAT:
        fmt_float(buf, sizeof buf, v->u.f);
        return sb_put(rt, b, buf, strlen(buf));
    case TV_STR:
        return sb_put(rt, b, v->u.s.p, v->u.s.len);
    case TV_LIST:
    case TV_DICT:
    case TV_NS: {
        tmpl_json_opt o = {.indent = -1, .item_sep = ", ", .key_sep = ": "};
        return tv_write_json(rt, b, v, &o, 0);
    }
    case TV_FUNC:
        return sb_put(rt, b, "<function>", 10);
    default:
        return true;
    }
}

tmpl_value *tv_to_str(tmpl_rt *rt, tmpl_value *v)
{
    if (v->kind == TV_STR) return tv_ref(v);
    tmpl_sb b = {0};
    if (!tv_write_str(rt, &b, v)) {
        sb_free(&b);
        return NULL;
    }
    return sb_take(rt, &b);
}

bool tv_truthy(const tmpl_value *v)
{
    switch (v->kind) {
    case TV_UNDEF:
    case TV_NONE:
        return false;
    case TV_BOOL:
        return v->u.b;
    case TV_INT:
        return v->u.i != 0;
    case TV_FLOAT:
        return v->u.f != 0.0 && !isnan(v->u.f);
    case TV_STR:
        return v->u.s.len > 0;
    case TV_LIST:
        return v->u.l.n > 0;
    case TV_DICT:
        return v->u.d.n > 0;
    default:
        return true;
    }
}

const char *tv_kind_name(const tmpl_value *v)
{
    static const char *const names[] = {"undefined", "none",     "boolean", "integer",
                                        "float",     "string",   "list",    "dict",
                                        "namespace", "function", "scope"};
    return v->kind < sizeof names / sizeof names[0] ? names[v->kind] : "?";
}

/* ------------------------------------------------------------------ UTF-8 */

/* Decodes one code point at s[i]; invalid bytes decode as themselves (one byte,
 * cp = 0xFFFD) so that every byte of the input is kept. Returns bytes consumed. */
size_t utf8_next(const char *s, size_t len, size_t i, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)s;
    unsigned c = u[i];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int n = c >= 0xF0 && c < 0xF5 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
    if (n == 0 || i + (size_t)n > len) goto bad;
    uint32_t v = c & (0xFF >> (n + 1));
    for (int k = 1; k < n; k++) {
        if ((u[i + k] & 0xC0) != 0x80) goto bad;
        v = (v << 6) | (u[i + k] & 0x3F);
    }
    if ((n == 3 && v < 0x800) || (n == 4 && (v < 0x10000 || v > 0x10FFFF))) goto bad;
    *cp = v;
    return (size_t)n;
bad:
    *cp = 0xFFFD;
    return 1;
}

size_t utf8_put(char *out, uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t utf8_cplen(const char *s, size_t len)
{
    size_t n = 0;
    uint32_t cp;
    for (size_t i = 0; i < len; i += utf8_next(s, len, i, &cp))
        n++;
    return n;
}

/* JavaScript's \s (what @huggingface/jinja trims and skips). */
static bool js_space_cp(uint32_t c)
{
    return c == 9 || c == 10 || c == 11 || c == 12 || c == 13 || c == 32 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

size_t js_space(const char *s, size_t len, size_t i)
{
    if (i >= len) return 0;
    uint32_t cp;
    size_t n = utf8_next(s, len, i, &cp);
    if (cp == 0xFFFD && n == 1 && (unsigned char)s[i] >= 0x80) return 0;
    return js_space_cp(cp) ? n : 0;
}

/* Python's str.isspace() for str.strip()/split() without arguments. */
bool py_space(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == 32 || (c >= 0x1C && c <= 0x1F) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

size_t str_find(const char *h, size_t hn, const char *n, size_t nn, size_t from)
{
    if (nn == 0) return from <= hn ? from : SIZE_MAX;
    for (size_t i = from; i + nn <= hn; i++)
        if (h[i] == n[0] && !memcmp(h + i, n, nn)) return i;
    return SIZE_MAX;
}
