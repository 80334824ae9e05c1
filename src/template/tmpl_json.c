/*
 * tmpl_json.c — the tojson filter's serializer, written to match Python's
 * json.dumps as transformers calls it (ensure_ascii=False by default; separators
 * ", " and ": ", or "," and ": " when indenting; sort_keys by code point) and
 * @huggingface/jinja's extensions (custom separators; undefined as null, or as
 * `undefined` when a list/dict is printed).
 * Errors: a function value cannot be serialized (KILN_E_INVALID); depth is bounded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_int.h"

bool json_write_string(tmpl_rt *rt, tmpl_sb *b, const char *s, size_t n, bool ascii)
{
    if (!sb_putc(rt, b, '"')) return false;
    size_t run = 0; /* start of bytes not yet copied */
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char ubuf[16];
        size_t step = 1;
        if (c == '"')
            esc = "\\\"";
        else if (c == '\\')
            esc = "\\\\";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c == '\b')
            esc = "\\b";
        else if (c == '\f')
            esc = "\\f";
        else if (c < 0x20 || (ascii && c == 0x7f)) {
            snprintf(ubuf, sizeof ubuf, "\\u%04x", c);
            esc = ubuf;
        } else if (c >= 0x80 && ascii) {
            uint32_t cp;
            step = utf8_next(s, n, i, &cp);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(ubuf, sizeof ubuf, "\\u%04x\\u%04x", 0xD800 + (cp >> 10),
                         0xDC00 + (cp & 0x3FF));
            } else {
                snprintf(ubuf, sizeof ubuf, "\\u%04x", cp);
            }
            esc = ubuf;
        }
        if (esc) {
            if (!sb_put(rt, b, s + run, i - run) || !sb_put(rt, b, esc, strlen(esc))) return false;
            i += step;
            run = i;
        } else {
            i++;
        }
    }
    return sb_put(rt, b, s + run, n - run) && sb_putc(rt, b, '"');
}

static bool newline_indent(tmpl_rt *rt, tmpl_sb *b, const tmpl_json_opt *o, int depth)
{
    if (!sb_putc(rt, b, '\n')) return false;
    for (int i = 0; i < depth * o->indent; i++)
        if (!sb_putc(rt, b, ' ')) return false;
    return true;
}

static int key_cmp(const void *a, const void *b)
{
    const tmpl_value *x = **(tmpl_value *const *const *)a, *y = **(tmpl_value *const *const *)b;
    size_t n = x->u.s.len < y->u.s.len ? x->u.s.len : y->u.s.len;
    int c = memcmp(x->u.s.p, y->u.s.p, n);
    if (c) return c;
    return x->u.s.len < y->u.s.len ? -1 : x->u.s.len > y->u.s.len;
}

static bool write_dict(tmpl_rt *rt, tmpl_sb *b, const tmpl_value *v, const tmpl_json_opt *o,
                       int depth)
{
    size_t n = v->u.d.n;
    if (n == 0) return sb_put(rt, b, "{}", 2);
    /* order[i] points at the key slot; values sit at the same index */
    tmpl_value *const **order = malloc(n * sizeof *order);
    if (!order) return rt_nomem(rt), false;
    for (size_t i = 0; i < n; i++)
        order[i] = &v->u.d.keys[i];
    if (o->sort_keys) qsort(order, n, sizeof *order, key_cmp);
    bool ok = sb_putc(rt, b, '{');
    for (size_t i = 0; ok && i < n; i++) {
        size_t idx = (size_t)(order[i] - v->u.d.keys);
        if (i > 0) ok = sb_put(rt, b, o->item_sep, strlen(o->item_sep));
        if (ok && o->indent > 0) ok = newline_indent(rt, b, o, depth + 1);
        const tmpl_value *k = v->u.d.keys[idx];
        ok = ok && json_write_string(rt, b, k->u.s.p, k->u.s.len, o->ensure_ascii) &&
             sb_put(rt, b, o->key_sep, strlen(o->key_sep)) &&
             tv_write_json(rt, b, v->u.d.vals[idx], o, depth + 1);
    }
    if (ok && o->indent > 0) ok = newline_indent(rt, b, o, depth);
    free(order);
    return ok && sb_putc(rt, b, '}');
}

bool tv_write_json(tmpl_rt *rt, tmpl_sb *b, const tmpl_value *v, const tmpl_json_opt *o, int depth)
{
    char buf[64];
    if (depth > 512) {
        rt_fail(rt, NULL, KILN_E_TOO_LARGE, "tojson: value nested too deeply");
        return false;
    }
    switch (v->kind) {
    case TV_UNDEF:
        return o->undef_as_null ? sb_put(rt, b, "null", 4) : sb_put(rt, b, "undefined", 9);
    case TV_NONE:
        return sb_put(rt, b, "null", 4);
    case TV_BOOL:
        return v->u.b ? sb_put(rt, b, "true", 4) : sb_put(rt, b, "false", 5);
    case TV_INT:
        snprintf(buf, sizeof buf, "%lld", (long long)v->u.i);
        return sb_put(rt, b, buf, strlen(buf));
    case TV_FLOAT:
        fmt_float(buf, sizeof buf, v->u.f);
        if (!strcmp(buf, "nan"))
            snprintf(buf, sizeof buf, "NaN");
        else if (!strcmp(buf, "inf"))
            snprintf(buf, sizeof buf, "Infinity");
        else if (!strcmp(buf, "-inf"))
            snprintf(buf, sizeof buf, "-Infinity");
        return sb_put(rt, b, buf, strlen(buf));
    case TV_STR:
        return json_write_string(rt, b, v->u.s.p, v->u.s.len, o->ensure_ascii);
    case TV_LIST: {
        if (v->u.l.n == 0) return sb_put(rt, b, "[]", 2);
        if (!sb_putc(rt, b, '[')) return false;
        for (size_t i = 0; i < v->u.l.n; i++) {
            if (i > 0 && !sb_put(rt, b, o->item_sep, strlen(o->item_sep))) return false;
            if (o->indent > 0 && !newline_indent(rt, b, o, depth + 1)) return false;
            if (!tv_write_json(rt, b, v->u.l.items[i], o, depth + 1)) return false;
        }
        if (o->indent > 0 && !newline_indent(rt, b, o, depth)) return false;
        return sb_putc(rt, b, ']');
    }
    case TV_DICT:
    case TV_NS:
        return write_dict(rt, b, v, o, depth);
    default:
        rt_fail(rt, NULL, KILN_E_INVALID, "cannot convert %s to JSON", tv_kind_name(v));
        return false;
    }
}
