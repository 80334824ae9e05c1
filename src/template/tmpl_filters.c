/*
 * tmpl_filters.c — the `|` filters and the `is` tests.
 *
 * Filters: abs, batch, bool, capitalize, count, d/default, dictsort, e/escape,
 * first, float, format, indent, int, items, join, keys, last, length, list, lower, map,
 * reject, rejectattr, replace, reverse, round, safe, select, selectattr, sort,
 * string, sum, title, tojson, trim, unique, upper, values, wordcount, min, max.
 * Tests: boolean, callable, defined, divisibleby, eq/equalto/==, even, false, float,
 * ge/gt/le/lt/ne, in, integer, iterable, lower, mapping, none, number, odd, sameas,
 * sequence, string, true, undefined, upper.
 * Argument names and positions are Jinja2's; `sort` and `dictsort` order strings
 * case-insensitively unless case_sensitive=true, as both Jinja implementations do.
 * Errors: an unknown filter or test, or a filter applied to a type it does not take,
 * fail the render (KILN_E_INVALID) with the filter's name.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_int.h"

static bool present(const tmpl_value *v)
{
    return v && v->kind != TV_UNDEF && v->kind != TV_NONE;
}

static bool flag(const tmpl_args *a, size_t i, const char *kw)
{
    tmpl_value *v = arg_get(a, i, kw);
    return v && tv_truthy(v);
}

static tmpl_value *bad_type(tmpl_rt *rt, const tmpl_node *at, const char *f, tmpl_value *v)
{
    return rt_fail(rt, at, KILN_E_INVALID, "cannot apply filter '%s' to %s", f, tv_kind_name(v));
}

/* Anything a for loop can walk, as a list (owned). */
tmpl_value *tmpl_list_of(tmpl_rt *rt, const tmpl_node *at, tmpl_value *v)
{
    switch (v->kind) {
    case TV_LIST:
        return tv_ref(v);
    case TV_UNDEF:
        return tv_list(rt, 0);
    case TV_DICT:
    case TV_NS: {
        tmpl_value *l = tv_list(rt, v->u.d.n);
        if (l)
            for (size_t i = 0; i < v->u.d.n; i++)
                l->u.l.items[l->u.l.n++] = tv_ref(v->u.d.keys[i]);
        return l;
    }
    case TV_STR: {
        tmpl_value *l = tv_list(rt, 0);
        uint32_t cp;
        for (size_t i = 0; l && i < v->u.s.len;) {
            size_t w = utf8_next(v->u.s.p, v->u.s.len, i, &cp);
            tmpl_value *c = tv_str(rt, v->u.s.p + i, w);
            if (!c || !tv_list_push(rt, l, c)) return tv_decref(rt, l), NULL;
            i += w;
        }
        return l;
    }
    default:
        return rt_fail(rt, at, KILN_E_INVALID, "%s is not iterable", tv_kind_name(v));
    }
}

/* ------------------------------------------------------------------ tests */

static bool is_lower_upper(const tmpl_value *v, bool upper)
{
    if (v->kind != TV_STR) return false;
    bool any = false;
    for (size_t i = 0; i < v->u.s.len; i++) {
        char c = v->u.s.p[i];
        if (c >= 'a' && c <= 'z') {
            if (upper) return false;
            any = true;
        } else if (c >= 'A' && c <= 'Z') {
            if (!upper) return false;
            any = true;
        }
    }
    return any;
}

static bool cmp_test(tmpl_rt *rt, const tmpl_node *at, int op, tmpl_value *v, tmpl_value *o,
                     bool *res)
{
    tmpl_value *r = tv_binop(rt, at, op, v, o);
    if (!r) return false;
    *res = tv_truthy(r);
    tv_decref(rt, r);
    return true;
}

/* Returns non-NULL (a borrowed marker) on success with *res set; NULL on error. */
tmpl_value *tmpl_test(tmpl_rt *rt, const tmpl_node *at, const char *name, tmpl_value *v,
                      const tmpl_args *a, bool *result)
{
    tmpl_value *o = arg_get(a, 0, NULL);
    bool r = false;
    uint8_t k = v->kind;
    if (!strcmp(name, "defined"))
        r = k != TV_UNDEF;
    else if (!strcmp(name, "undefined"))
        r = k == TV_UNDEF;
    else if (!strcmp(name, "none") || !strcmp(name, "None"))
        r = k == TV_NONE;
    else if (!strcmp(name, "string"))
        r = k == TV_STR;
    else if (!strcmp(name, "number"))
        r = k == TV_INT || k == TV_FLOAT;
    else if (!strcmp(name, "integer"))
        r = k == TV_INT;
    else if (!strcmp(name, "float"))
        r = k == TV_FLOAT;
    else if (!strcmp(name, "boolean"))
        r = k == TV_BOOL;
    else if (!strcmp(name, "true") || !strcmp(name, "True"))
        r = k == TV_BOOL && v->u.b;
    else if (!strcmp(name, "false") || !strcmp(name, "False"))
        r = k == TV_BOOL && !v->u.b;
    else if (!strcmp(name, "mapping"))
        r = k == TV_DICT;
    else if (!strcmp(name, "iterable"))
        r = k == TV_LIST || k == TV_STR || k == TV_DICT;
    else if (!strcmp(name, "sequence"))
        r = k == TV_LIST || k == TV_STR || k == TV_DICT;
    else if (!strcmp(name, "callable"))
        r = k == TV_FUNC;
    else if (!strcmp(name, "lower"))
        r = is_lower_upper(v, false);
    else if (!strcmp(name, "upper"))
        r = is_lower_upper(v, true);
    else if (!strcmp(name, "odd") || !strcmp(name, "even")) {
        if (k != TV_INT)
            return rt_fail(rt, at, KILN_E_INVALID, "cannot test %s for %s", tv_kind_name(v), name);
        r = ((v->u.i % 2) != 0) == (name[0] == 'o');
    } else if (!strcmp(name, "divisibleby")) {
        if (k != TV_INT || !o || o->kind != TV_INT)
            return rt_fail(rt, at, KILN_E_INVALID, "divisibleby needs integers");
        if (o->u.i == 0) return rt_fail(rt, at, KILN_E_INVALID, "divisibleby 0");
        r = o->u.i == -1 || v->u.i % o->u.i == 0;
    } else if (!strcmp(name, "sameas")) {
        if (!o) return rt_fail(rt, at, KILN_E_INVALID, "sameas needs an argument");
        r = v == o ||
            (k == o->kind && (k == TV_NONE || k == TV_UNDEF || (k == TV_BOOL && v->u.b == o->u.b)));
    } else if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==")) {
        if (!o) return rt_fail(rt, at, KILN_E_INVALID, "%s needs an argument", name);
        r = tv_strict_eq(v, o);
    } else if (!strcmp(name, "in")) {
        if (!o) return rt_fail(rt, at, KILN_E_INVALID, "in needs an argument");
        tmpl_value *x = tv_contains(rt, at, v, o, false);
        if (!x) return NULL;
        r = tv_truthy(x);
    } else {
        static const struct {
            const char *n;
            int op;
        } cmps[] = {{"ne", BOP_NE}, {"!=", BOP_NE}, {"lt", BOP_LT},          {"<", BOP_LT},
                    {"gt", BOP_GT}, {">", BOP_GT},  {"le", BOP_LE},          {"<=", BOP_LE},
                    {"ge", BOP_GE}, {">=", BOP_GE}, {"greaterthan", BOP_GT}, {"lessthan", BOP_LT}};
        size_t i;
        for (i = 0; i < sizeof cmps / sizeof cmps[0]; i++)
            if (!strcmp(name, cmps[i].n)) break;
        if (i == sizeof cmps / sizeof cmps[0])
            return rt_fail(rt, at, KILN_E_INVALID, "unknown test '%s'", name);
        if (!o) return rt_fail(rt, at, KILN_E_INVALID, "%s needs an argument", name);
        if (!cmp_test(rt, at, cmps[i].op, v, o, &r)) return NULL;
    }
    *result = r;
    return TV_UNDEFINED;
}

/* ------------------------------------------------------------------ list filters */

static tmpl_value *f_sort(tmpl_rt *rt, const tmpl_node *at, tmpl_value *v, const tmpl_args *a)
{
    tmpl_value *l = tmpl_list_of(rt, at, v), *attr = arg_get(a, 2, "attribute");
    if (!l) return NULL;
    tmpl_value *copy = tv_list(rt, l->u.l.n);
    if (!copy) return tv_decref(rt, l), NULL;
    for (size_t i = 0; i < l->u.l.n; i++)
        copy->u.l.items[copy->u.l.n++] = tv_ref(l->u.l.items[i]);
    tv_decref(rt, l);
    char num[32];
    const char *ap = NULL;
    size_t al = 0;
    if (attr && attr->kind == TV_STR) {
        ap = attr->u.s.p;
        al = attr->u.s.len;
    } else if (attr && attr->kind == TV_INT) {
        al = (size_t)snprintf(num, sizeof num, "%lld", (long long)attr->u.i);
        ap = num;
    }
    if (!tv_sort(rt, at, copy->u.l.items, copy->u.l.n, flag(a, 0, "reverse"),
                 flag(a, 1, "case_sensitive"), ap, al))
        return tv_decref(rt, copy), NULL;
    return copy;
}

static tmpl_value *f_unique(tmpl_rt *rt, const tmpl_node *at, tmpl_value *v, const tmpl_args *a)
{
    tmpl_value *l = tmpl_list_of(rt, at, v), *attr = arg_get(a, 1, "attribute");
    bool cs = flag(a, 0, "case_sensitive");
    if (!l) return NULL;
    tmpl_value *out = tv_list(rt, l->u.l.n), *keys = tv_list(rt, l->u.l.n);
    if (!out || !keys) goto fail;
    for (size_t i = 0; i < l->u.l.n; i++) {
        tmpl_value *item = l->u.l.items[i];
        tmpl_value *key = present(attr) && attr->kind == TV_STR
                              ? tv_attr_path(rt, item, attr->u.s.p, attr->u.s.len)
                              : tv_ref(item);
        if (key && key->kind == TV_STR && !cs) {
            tmpl_value *low = str_case(rt, key, 0);
            tv_decref(rt, key);
            key = low;
        }
        if (!key) goto fail;
        bool seen = false;
        for (size_t k = 0; k < keys->u.l.n && !seen; k++)
            seen = tv_strict_eq(keys->u.l.items[k], key);
        if (seen) {
            tv_decref(rt, key);
            continue;
        }
        keys->u.l.items[keys->u.l.n++] = key;
        out->u.l.items[out->u.l.n++] = tv_ref(item);
    }
    tv_decref(rt, keys);
    tv_decref(rt, l);
    return out;
fail:
    tv_decref(rt, keys);
    tv_decref(rt, out);
    tv_decref(rt, l);
    return NULL;
}

/* select / reject / selectattr / rejectattr */
static tmpl_value *f_select(tmpl_rt *rt, const tmpl_node *at, tmpl_value *v, const tmpl_args *a,
                            bool keep, bool by_attr)
{
    tmpl_value *l = tmpl_list_of(rt, at, v);
    if (!l) return NULL;
    size_t first = by_attr ? 1 : 0;
    tmpl_value *attr = by_attr ? arg_get(a, 0, NULL) : NULL;
    if (by_attr && (!attr || attr->kind != TV_STR)) {
        tv_decref(rt, l);
        return rt_fail(rt, at, KILN_E_INVALID, "%s needs an attribute name",
                       keep ? "selectattr" : "rejectattr");
    }
    tmpl_value *test = arg_get(a, first, NULL);
    if (test && test->kind != TV_STR) {
        tv_decref(rt, l);
        return rt_fail(rt, at, KILN_E_INVALID, "the test name must be a string");
    }
    tmpl_args ta = {.pos = a->npos > first + 1 ? a->pos + first + 1 : NULL,
                    .npos = a->npos > first + 1 ? a->npos - first - 1 : 0};
    tmpl_value *out = tv_list(rt, l->u.l.n);
    if (!out) return tv_decref(rt, l), NULL;
    for (size_t i = 0; i < l->u.l.n; i++) {
        tmpl_value *item = l->u.l.items[i];
        tmpl_value *x = by_attr ? tv_attr_path(rt, item, attr->u.s.p, attr->u.s.len) : tv_ref(item);
        if (!x) goto fail;
        bool r;
        const char *tn = test ? test->u.s.p : NULL;
        if (by_attr && test && x->kind == TV_UNDEF && strcmp(tn, "defined") &&
            strcmp(tn, "undefined") && strcmp(tn, "none")) {
            r = false; /* a missing attribute fails the test (@huggingface/jinja) */
        } else if (test) {
            if (!tmpl_test(rt, at, test->u.s.p, x, &ta, &r)) {
                tv_decref(rt, x);
                goto fail;
            }
        } else {
            r = tv_truthy(x);
        }
        tv_decref(rt, x);
        if (r == keep) out->u.l.items[out->u.l.n++] = tv_ref(item);
    }
    tv_decref(rt, l);
    return out;
fail:
    tv_decref(rt, out);
    tv_decref(rt, l);
    return NULL;
}

static tmpl_value *f_map(tmpl_rt *rt, const tmpl_node *at, tmpl_value *v, const tmpl_args *a,
                         tmpl_value *env)
{
    tmpl_value *l = tmpl_list_of(rt, at, v);
    if (!l) return NULL;
    tmpl_value *attr = arg_get(a, a->npos, "attribute"), *def = arg_get(a, a->npos, "default");
    tmpl_value *fname = a->npos ? a->pos[0] : NULL;
    if (!attr && (!fname || fname->kind != TV_STR)) {
        tv_decref(rt, l);
        return rt_fail(rt, at, KILN_E_INVALID, "map needs attribute= or a filter name");
    }
    tmpl_args fa = {.pos = a->npos > 1 ? a->pos + 1 : NULL, .npos = a->npos > 1 ? a->npos - 1 : 0};
    tmpl_value *out = tv_list(rt, l->u.l.n);
    if (!out) return tv_decref(rt, l), NULL;
    for (size_t i = 0; i < l->u.l.n; i++) {
        tmpl_value *item = l->u.l.items[i], *x;
        if (attr) {
            if (attr->kind != TV_STR) {
                rt_fail(rt, at, KILN_E_INVALID, "map: attribute must be a string");
                goto fail;
            }
            x = tv_attr_path(rt, item, attr->u.s.p, attr->u.s.len);
            if (x && x->kind == TV_UNDEF && def) x = tv_ref(def);
        } else {
            x = tmpl_filter(rt, at, fname->u.s.p, item, &fa, env);
        }
        if (!x) goto fail;
        out->u.l.items[out->u.l.n++] = x;
    }
    tv_decref(rt, l);
    return out;
fail:
    tv_decref(rt, out);
    tv_decref(rt, l);
    return NULL;
}

static tmpl_value *f_join(tmpl_rt *rt, const tmpl_node *at, tmpl_value *v, const tmpl_args *a)
{
    tmpl_value *sep = arg_get(a, 0, "d"), *attr = arg_get(a, 1, "attribute");
    if (!sep) sep = arg_get(a, 0, "separator");
    if (sep && sep->kind != TV_STR)
        return rt_fail(rt, at, KILN_E_INVALID, "join: separator must be a string");
    tmpl_value *l = tmpl_list_of(rt, at, v);
    if (!l) return NULL;
    tmpl_sb b = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < l->u.l.n; i++) {
        if (i > 0 && sep) ok = sb_put(rt, &b, sep->u.s.p, sep->u.s.len);
        tmpl_value *x = present(attr) && attr->kind == TV_STR
                            ? tv_attr_path(rt, l->u.l.items[i], attr->u.s.p, attr->u.s.len)
                            : tv_ref(l->u.l.items[i]);
        ok = ok && x && tv_write_str(rt, &b, x);
        tv_decref(rt, x);
    }
    tv_decref(rt, l);
    if (!ok) return sb_free(&b), NULL;
    return sb_take(rt, &b);
}

static tmpl_value *f_batch(tmpl_rt *rt, const tmpl_node *at, tmpl_value *v, const tmpl_args *a)
{
    tmpl_value *cnt = arg_get(a, 0, "linecount"), *fill = arg_get(a, 1, "fill_with");
    if (!cnt || cnt->kind != TV_INT || cnt->u.i <= 0)
        return rt_fail(rt, at, KILN_E_INVALID, "batch needs a positive count");
    tmpl_value *l = tmpl_list_of(rt, at, v);
    if (!l) return NULL;
    size_t n = (size_t)cnt->u.i;
    tmpl_value *out = tv_list(rt, 0), *cur = NULL;
    if (!out) goto fail;
    for (size_t i = 0; i < l->u.l.n; i++) {
        if (!cur && !(cur = tv_list(rt, 0))) goto fail;
        if (!tv_list_push(rt, cur, tv_ref(l->u.l.items[i]))) goto fail;
        if (cur->u.l.n == n) {
            if (!tv_list_push(rt, out, cur)) {
                cur = NULL;
                goto fail;
            }
            cur = NULL;
        }
    }
    if (cur) {
        while (present(fill) && cur->u.l.n < n)
            if (!tv_list_push(rt, cur, tv_ref(fill))) goto fail;
        if (!tv_list_push(rt, out, cur)) {
            cur = NULL;
            goto fail;
        }
    }
    tv_decref(rt, l);
    return out;
fail:
    tv_decref(rt, cur);
    tv_decref(rt, out);
    tv_decref(rt, l);
    return NULL;
}

static tmpl_value *f_minmax(tmpl_rt *rt, const tmpl_node *at, tmpl_value *v, const tmpl_args *a,
                            bool max)
{
    tmpl_value *l = tmpl_list_of(rt, at, v);
    if (!l) return NULL;
    if (l->u.l.n == 0) {
        tv_decref(rt, l);
        return TV_UNDEFINED;
    }
    tmpl_value *attr = arg_get(a, 1, "attribute");
    tmpl_value **items = malloc(l->u.l.n * sizeof *items);
    if (!items) return tv_decref(rt, l), rt_nomem(rt);
    memcpy(items, l->u.l.items, l->u.l.n * sizeof *items);
    bool ok = tv_sort(rt, at, items, l->u.l.n, max, flag(a, 0, "case_sensitive"),
                      present(attr) && attr->kind == TV_STR ? attr->u.s.p : NULL,
                      present(attr) && attr->kind == TV_STR ? attr->u.s.len : 0);
    tmpl_value *r = ok ? tv_ref(items[0]) : NULL;
    free(items);
    tv_decref(rt, l);
    return r;
}

static tmpl_value *f_sum(tmpl_rt *rt, const tmpl_node *at, tmpl_value *v, const tmpl_args *a)
{
    tmpl_value *attr = arg_get(a, 0, "attribute"), *start = arg_get(a, 1, "start");
    tmpl_value *l = tmpl_list_of(rt, at, v);
    if (!l) return NULL;
    tmpl_value *acc = start ? tv_ref(start) : tv_int(rt, 0);
    for (size_t i = 0; acc && i < l->u.l.n; i++) {
        tmpl_value *x = present(attr) && attr->kind == TV_STR
                            ? tv_attr_path(rt, l->u.l.items[i], attr->u.s.p, attr->u.s.len)
                            : tv_ref(l->u.l.items[i]);
        tmpl_value *n = x ? tv_binop(rt, at, BOP_ADD, acc, x) : NULL;
        tv_decref(rt, x);
        tv_decref(rt, acc);
        acc = n;
    }
    tv_decref(rt, l);
    return acc;
}

/* ------------------------------------------------------------------ string filters */

static tmpl_value *f_indent(tmpl_rt *rt, const tmpl_node *at, tmpl_value *s, const tmpl_args *a)
{
    tmpl_value *w = arg_get(a, 0, "width");
    bool first = flag(a, 1, "first"), blank = flag(a, 2, "blank");
    char pad[256];
    const char *ind = pad;
    size_t il = 4;
    if (w && w->kind == TV_STR) {
        ind = w->u.s.p;
        il = w->u.s.len;
    } else if (w && w->kind == TV_INT) {
        il = w->u.i < 0 ? 0 : w->u.i > 255 ? 255 : (size_t)w->u.i;
    } else if (w && present(w)) {
        return rt_fail(rt, at, KILN_E_INVALID, "indent: width must be a number or string");
    }
    if (ind == pad) memset(pad, ' ', il);
    tmpl_sb b = {0};
    const char *p = s->u.s.p;
    size_t n = s->u.s.len, start = 0, line = 0;
    bool ok = true;
    for (;;) {
        size_t e = start;
        while (e < n && p[e] != '\n')
            e++;
        bool empty = e == start;
        if ((line > 0 || first) && (!empty || blank)) ok = ok && sb_put(rt, &b, ind, il);
        ok = ok && sb_put(rt, &b, p + start, e - start);
        if (e >= n || !ok) break;
        ok = sb_putc(rt, &b, '\n');
        start = e + 1;
        line++;
    }
    if (!ok) return sb_free(&b), NULL;
    return sb_take(rt, &b);
}

static tmpl_value *f_escape(tmpl_rt *rt, tmpl_value *v)
{
    tmpl_value *s = tv_to_str(rt, v);
    if (!s) return NULL;
    tmpl_sb b = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < s->u.s.len; i++) {
        char c = s->u.s.p[i];
        const char *r = c == '&'    ? "&amp;"
                        : c == '<'  ? "&lt;"
                        : c == '>'  ? "&gt;"
                        : c == '"'  ? "&#34;"
                        : c == '\'' ? "&#39;"
                                    : NULL;
        ok = r ? sb_put(rt, &b, r, strlen(r)) : sb_putc(rt, &b, c);
    }
    tv_decref(rt, s);
    if (!ok) return sb_free(&b), NULL;
    return sb_take(rt, &b);
}

static tmpl_value *f_wordcount(tmpl_rt *rt, tmpl_value *v)
{
    tmpl_value *s = tv_to_str(rt, v);
    if (!s) return NULL;
    int64_t n = 0;
    bool in = false;
    for (size_t i = 0; i < s->u.s.len; i++) {
        unsigned char c = (unsigned char)s->u.s.p[i];
        bool w =
            c >= 0x80 || c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
        if (w && !in) n++;
        in = w;
    }
    tv_decref(rt, s);
    return tv_int(rt, n);
}

/* Python's float(str) syntax, surrounding whitespace allowed. */
static bool parse_float(const char *s, size_t n, double *out)
{
    char buf[64];
    while (n && (*s == ' ' || *s == '\t' || *s == '\n'))
        s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n'))
        n--;
    if (n == 0 || n >= sizeof buf) return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (buf[i] == 'x' || buf[i] == 'X' || buf[i] == 'p' || buf[i] == 'P') return false;
    char *end;
    *out = strtod(buf, &end);
    return *end == '\0';
}

static tmpl_value *f_int(tmpl_rt *rt, const tmpl_node *at, tmpl_value *v, const tmpl_args *a)
{
    tmpl_value *def = arg_get(a, 0, "default");
    switch (v->kind) {
    case TV_INT:
        return tv_ref(v);
    case TV_BOOL:
        return tv_int(rt, v->u.b);
    case TV_FLOAT:
        if (!isfinite(v->u.f) || fabs(v->u.f) >= 9.2e18) break;
        return tv_int(rt, (int64_t)v->u.f);
    case TV_STR: {
        char buf[64], *end;
        size_t n = v->u.s.len < 63 ? v->u.s.len : 63;
        memcpy(buf, v->u.s.p, n);
        buf[n] = '\0';
        long long x = strtoll(buf, &end, 10);
        while (*end == ' ' || *end == '\n' || *end == '\t')
            end++;
        if (end != buf && *end == '\0' && v->u.s.len < 63) return tv_int(rt, x);
        double f;
        if (parse_float(v->u.s.p, v->u.s.len, &f) && isfinite(f) && fabs(f) < 9.2e18)
            return tv_int(rt, (int64_t)f);
        break;
    }
    default:
        break;
    }
    (void)at;
    return def ? tv_ref(def) : tv_int(rt, 0);
}

static tmpl_value *f_float(tmpl_rt *rt, tmpl_value *v, const tmpl_args *a)
{
    tmpl_value *def = arg_get(a, 0, "default");
    double f;
    switch (v->kind) {
    case TV_FLOAT:
        return tv_ref(v);
    case TV_INT:
        return tv_float(rt, (double)v->u.i);
    case TV_BOOL:
        return tv_float(rt, v->u.b);
    case TV_STR:
        if (parse_float(v->u.s.p, v->u.s.len, &f)) return tv_float(rt, f);
        break;
    default:
        break;
    }
    return def ? tv_ref(def) : tv_float(rt, 0.0);
}

static tmpl_value *f_round(tmpl_rt *rt, const tmpl_node *at, tmpl_value *v, const tmpl_args *a)
{
    tmpl_value *pv = arg_get(a, 0, "precision"), *mv = arg_get(a, 1, "method");
    if (v->kind != TV_INT && v->kind != TV_FLOAT && v->kind != TV_BOOL)
        return bad_type(rt, at, "round", v);
    double x = v->kind == TV_FLOAT ? v->u.f : v->kind == TV_INT ? (double)v->u.i : v->u.b;
    int64_t p = pv && pv->kind == TV_INT ? pv->u.i : 0;
    if (p > 15) p = 15;
    if (p < -15) p = -15;
    double m = pow(10.0, (double)p), y = x * m;
    const char *method = mv && mv->kind == TV_STR ? mv->u.s.p : "common";
    if (!strcmp(method, "ceil"))
        y = ceil(y);
    else if (!strcmp(method, "floor"))
        y = floor(y);
    else if (!strcmp(method, "common"))
        y = round(y);
    else
        return rt_fail(rt, at, KILN_E_INVALID, "round: method must be common, ceil or floor");
    return tv_float(rt, y / m);
}

/* "%s / %d" % args (the format filter) */
static tmpl_value *f_format(tmpl_rt *rt, const tmpl_node *at, tmpl_value *s, const tmpl_args *a)
{
    tmpl_sb b = {0};
    size_t ai = 0;
    for (size_t i = 0; i < s->u.s.len; i++) {
        char c = s->u.s.p[i];
        if (c != '%' || i + 1 >= s->u.s.len) {
            if (!sb_putc(rt, &b, c)) goto fail;
            continue;
        }
        char t = s->u.s.p[++i];
        if (t == '%') {
            if (!sb_putc(rt, &b, '%')) goto fail;
            continue;
        }
        tmpl_value *x = arg_get(a, ai++, NULL);
        if (!x) {
            rt_fail(rt, at, KILN_E_INVALID, "format: not enough arguments");
            goto fail;
        }
        if ((t == 'd' || t == 'i') && x->kind == TV_FLOAT) {
            if (!sb_printf(rt, &b, "%lld", (long long)x->u.f)) goto fail;
        } else if (!tv_write_str(rt, &b, x)) {
            goto fail;
        }
    }
    return sb_take(rt, &b);
fail:
    sb_free(&b);
    return NULL;
}

static tmpl_value *f_tojson(tmpl_rt *rt, const tmpl_node *at, tmpl_value *v, const tmpl_args *a)
{
    tmpl_json_opt o = {.indent = -1, .undef_as_null = true, .item_sep = ", ", .key_sep = ": "};
    tmpl_value *ind = arg_get(a, 0, "indent"), *seps = arg_get(a, a->npos, "separators");
    if (present(ind)) {
        if (ind->kind != TV_INT)
            return rt_fail(rt, at, KILN_E_INVALID, "tojson: indent must be an integer");
        o.indent = ind->u.i > 64 ? 64 : (int)ind->u.i;
        if (o.indent > 0) o.item_sep = ",";
    }
    o.ensure_ascii = flag(a, a->npos, "ensure_ascii");
    o.sort_keys = flag(a, a->npos, "sort_keys");
    if (present(seps)) {
        if (seps->kind != TV_LIST || seps->u.l.n != 2 || seps->u.l.items[0]->kind != TV_STR ||
            seps->u.l.items[1]->kind != TV_STR)
            return rt_fail(rt, at, KILN_E_INVALID,
                           "tojson: separators must be a tuple of two strings");
        o.item_sep = seps->u.l.items[0]->u.s.p;
        o.key_sep = seps->u.l.items[1]->u.s.p;
    }
    tmpl_sb b = {0};
    if (!tv_write_json(rt, &b, v, &o, 0)) return sb_free(&b), NULL;
    return sb_take(rt, &b);
}

/* String filters take strings, and numbers/booleans/undefined as their text; none,
 * lists, dicts and functions are refused (as @huggingface/jinja refuses them, where
 * Python would render "None" or a repr into the prompt). */
static tmpl_value *text_of(tmpl_rt *rt, const tmpl_node *at, const char *f, tmpl_value *v)
{
    if (v->kind == TV_NONE || v->kind == TV_LIST || v->kind == TV_DICT || v->kind == TV_NS ||
        v->kind == TV_FUNC)
        return bad_type(rt, at, f, v);
    return tv_to_str(rt, v);
}

static tmpl_value *str_or_convert(tmpl_rt *rt, const tmpl_node *at, const char *f, tmpl_value *v,
                                  int mode)
{
    tmpl_value *s = text_of(rt, at, f, v);
    if (!s) return NULL;
    tmpl_value *r = str_case(rt, s, mode);
    tv_decref(rt, s);
    return r;
}

static tmpl_value *f_length(tmpl_rt *rt, const tmpl_node *at, tmpl_value *v)
{
    switch (v->kind) {
    case TV_LIST:
        return tv_int(rt, (int64_t)v->u.l.n);
    case TV_DICT:
    case TV_NS:
        return tv_int(rt, (int64_t)v->u.d.n);
    case TV_STR:
        return tv_int(rt, (int64_t)utf8_cplen(v->u.s.p, v->u.s.len));
    case TV_UNDEF:
        return tv_int(rt, 0);
    default:
        return bad_type(rt, at, "length", v);
    }
}

static tmpl_value *f_first_last(tmpl_rt *rt, const tmpl_node *at, tmpl_value *v, bool last)
{
    tmpl_value *l = tmpl_list_of(rt, at, v);
    if (!l) return NULL;
    tmpl_value *r = l->u.l.n ? tv_ref(l->u.l.items[last ? l->u.l.n - 1 : 0]) : TV_UNDEFINED;
    tv_decref(rt, l);
    return r;
}

static tmpl_value *f_reverse(tmpl_rt *rt, const tmpl_node *at, tmpl_value *v)
{
    tmpl_value *l = tmpl_list_of(rt, at, v);
    if (!l) return NULL;
    tmpl_value *r = tv_list(rt, l->u.l.n);
    if (r)
        for (size_t i = l->u.l.n; i-- > 0;)
            r->u.l.items[r->u.l.n++] = tv_ref(l->u.l.items[i]);
    tv_decref(rt, l);
    if (r && v->kind == TV_STR) {
        tmpl_sb b = {0};
        bool ok = true;
        for (size_t i = 0; ok && i < r->u.l.n; i++)
            ok = tv_write_str(rt, &b, r->u.l.items[i]);
        tv_decref(rt, r);
        return ok ? sb_take(rt, &b) : (sb_free(&b), NULL);
    }
    return r;
}

/* ------------------------------------------------------------------ dispatch */

tmpl_value *tmpl_filter(tmpl_rt *rt, const tmpl_node *at, const char *name, tmpl_value *v,
                        const tmpl_args *a, tmpl_value *env)
{
    if (!rt_enter(rt, at)) return NULL;
    tmpl_value *r = NULL;
#define IS(x) (!strcmp(name, x))
    if (IS("safe"))
        r = tv_ref(v);
    else if (IS("tojson"))
        r = f_tojson(rt, at, v, a);
    else if (IS("string"))
        r = tv_to_str(rt, v);
    else if (IS("length") || IS("count"))
        r = f_length(rt, at, v);
    else if (IS("list"))
        r = tmpl_list_of(rt, at, v);
    else if (IS("first") || IS("last"))
        r = f_first_last(rt, at, v, name[0] == 'l');
    else if (IS("reverse"))
        r = f_reverse(rt, at, v);
    else if (IS("sort"))
        r = f_sort(rt, at, v, a);
    else if (IS("join"))
        r = f_join(rt, at, v, a);
    else if (IS("unique"))
        r = f_unique(rt, at, v, a);
    else if (IS("select") || IS("reject"))
        r = f_select(rt, at, v, a, name[0] == 's', false);
    else if (IS("selectattr") || IS("rejectattr"))
        r = f_select(rt, at, v, a, name[0] == 's', true);
    else if (IS("map"))
        r = f_map(rt, at, v, a, env);
    else if (IS("batch"))
        r = f_batch(rt, at, v, a);
    else if (IS("min") || IS("max"))
        r = f_minmax(rt, at, v, a, name[1] == 'a');
    else if (IS("sum"))
        r = f_sum(rt, at, v, a);
    else if (IS("upper"))
        r = str_or_convert(rt, at, name, v, 1);
    else if (IS("lower"))
        r = str_or_convert(rt, at, name, v, 0);
    else if (IS("title"))
        r = str_or_convert(rt, at, name, v, 2);
    else if (IS("capitalize"))
        r = str_or_convert(rt, at, name, v, 3);
    else if (IS("trim")) {
        tmpl_value *s = text_of(rt, at, name, v);
        r = s ? str_strip(rt, s, arg_get(a, 0, "chars"), true, true) : NULL;
        tv_decref(rt, s);
    } else if (IS("indent") || IS("replace") || IS("format")) {
        tmpl_value *s = text_of(rt, at, name, v);
        if (s)
            r = IS("indent")   ? f_indent(rt, at, s, a)
                : IS("format") ? f_format(rt, at, s, a)
                               : str_replace(rt, at, s, arg_get(a, 0, "old"), arg_get(a, 1, "new"),
                                             arg_get(a, 2, "count"));
        tv_decref(rt, s);
    } else if (IS("e") || IS("escape") || IS("forceescape"))
        r = f_escape(rt, v);
    else if (IS("wordcount"))
        r = f_wordcount(rt, v);
    else if (IS("int"))
        r = f_int(rt, at, v, a);
    else if (IS("float"))
        r = f_float(rt, v, a);
    else if (IS("bool"))
        r = TV_BOOLV(tv_truthy(v));
    else if (IS("abs")) {
        if (v->kind == TV_INT)
            r = v->u.i == INT64_MIN ? tv_float(rt, 9.2233720368547758e18)
                                    : tv_int(rt, v->u.i < 0 ? -v->u.i : v->u.i);
        else if (v->kind == TV_FLOAT)
            r = tv_float(rt, fabs(v->u.f));
        else if (v->kind == TV_BOOL)
            r = tv_int(rt, v->u.b);
        else
            r = bad_type(rt, at, name, v);
    } else if (IS("round"))
        r = f_round(rt, at, v, a);
    else if (IS("default") || IS("d")) {
        tmpl_value *def = arg_get(a, 0, "default_value");
        bool boolean = flag(a, 1, "boolean");
        r = v->kind == TV_UNDEF || (boolean && !tv_truthy(v))
                ? (def ? tv_ref(def) : tv_str(rt, "", 0))
                : tv_ref(v);
    } else if (IS("items")) {
        if (v->kind == TV_DICT || v->kind == TV_NS)
            r = dict_items(rt, v);
        else if (v->kind == TV_UNDEF)
            r = tv_list(rt, 0);
        else
            r = bad_type(rt, at, name, v);
    } else if (IS("keys") || IS("values")) {
        if (v->kind != TV_DICT && v->kind != TV_NS) {
            r = bad_type(rt, at, name, v);
        } else if ((r = tv_list(rt, v->u.d.n))) {
            tmpl_value **src = name[0] == 'k' ? v->u.d.keys : v->u.d.vals;
            for (size_t i = 0; i < v->u.d.n; i++)
                r->u.l.items[r->u.l.n++] = tv_ref(src[i]);
        }
    } else if (IS("dictsort")) {
        if (v->kind == TV_DICT || v->kind == TV_NS)
            r = dict_dictsort(rt, at, v, a);
        else
            r = bad_type(rt, at, name, v);
    } else {
        r = rt_fail(rt, at, KILN_E_INVALID, "unknown filter '%s'", name);
    }
#undef IS
    rt_leave(rt);
    return r;
}
