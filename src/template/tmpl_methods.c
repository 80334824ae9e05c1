/*
 * tmpl_methods.c — methods templates call on strings (strip, split, replace,
 * startswith, format, ...) and dicts (get, items, keys, values), and the global
 * functions: range, namespace, dict, raise_exception, strftime_now.
 * Semantics are Python's (str.split / str.replace / str.strip with their argument
 * rules); case mapping is Unicode (utf8proc), one code point to one.
 * raise_exception(msg) fails the render with KILN_E_INVALID and msg verbatim.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "template/tmpl_int.h"

tmpl_value *arg_get(const tmpl_args *a, size_t i, const char *kw)
{
    if (i < a->npos) return a->pos[i];
    for (size_t k = 0; kw && k < a->nkw; k++)
        if (!strcmp(a->kw_names[k], kw)) return a->kw_vals[k];
    return NULL;
}

static bool present(const tmpl_value *v)
{
    return v && v->kind != TV_UNDEF && v->kind != TV_NONE;
}

static tmpl_value *want_str(tmpl_rt *rt, const tmpl_node *at, tmpl_value *v, const char *fn)
{
    if (v && v->kind == TV_STR) return v;
    return rt_fail(rt, at, KILN_E_INVALID, "%s() expects a string argument, got %s", fn,
                   v ? tv_kind_name(v) : "nothing");
}

/* ------------------------------------------------------------------ string helpers */

static bool in_chars(uint32_t cp, const tmpl_value *chars)
{
    if (!chars) return py_space(cp);
    uint32_t c;
    for (size_t i = 0; i < chars->u.s.len; i += utf8_next(chars->u.s.p, chars->u.s.len, i, &c)) {
        utf8_next(chars->u.s.p, chars->u.s.len, i, &c);
        if (c == cp) return true;
    }
    return false;
}

tmpl_value *str_strip(tmpl_rt *rt, tmpl_value *s, tmpl_value *chars, bool left, bool right)
{
    if (chars && chars->kind != TV_STR) chars = NULL;
    const char *p = s->u.s.p;
    size_t b = 0, e = s->u.s.len;
    uint32_t cp;
    if (left)
        while (b < e) {
            size_t w = utf8_next(p, e, b, &cp);
            if (!in_chars(cp, chars)) break;
            b += w;
        }
    if (right)
        while (e > b) {
            size_t k = e - 1;
            while (k > b && ((unsigned char)p[k] & 0xC0) == 0x80)
                k--;
            utf8_next(p, e, k, &cp);
            if (!in_chars(cp, chars)) break;
            e = k;
        }
    return tv_str(rt, p + b, e - b);
}

static bool cased(uint32_t c)
{
    return utf8proc_toupper((utf8proc_int32_t)c) != (utf8proc_int32_t)c ||
           utf8proc_tolower((utf8proc_int32_t)c) != (utf8proc_int32_t)c;
}

/* mode: 0 lower, 1 upper, 2 title (Python str.title), 3 capitalize */
tmpl_value *str_case(tmpl_rt *rt, tmpl_value *s, int mode)
{
    tmpl_sb b = {0};
    bool prev_cased = false, first = true;
    uint32_t cp;
    for (size_t i = 0; i < s->u.s.len;) {
        size_t w = utf8_next(s->u.s.p, s->u.s.len, i, &cp);
        bool bad = cp == 0xFFFD && w == 1 && (unsigned char)s->u.s.p[i] >= 0x80;
        uint32_t o = cp;
        if (!bad) {
            bool up = mode == 1 || (mode == 2 && !prev_cased) || (mode == 3 && first);
            o = (uint32_t)(up ? utf8proc_toupper((utf8proc_int32_t)cp)
                              : utf8proc_tolower((utf8proc_int32_t)cp));
            if (mode == 2) prev_cased = cased(cp);
        }
        char buf[4];
        bool ok = bad ? sb_put(rt, &b, s->u.s.p + i, 1) : sb_put(rt, &b, buf, utf8_put(buf, o));
        if (!ok) return sb_free(&b), NULL;
        first = false;
        i += w;
    }
    return sb_take(rt, &b);
}

tmpl_value *str_replace(tmpl_rt *rt, const tmpl_node *at, tmpl_value *s, tmpl_value *old,
                        tmpl_value *nw, tmpl_value *count)
{
    if (!want_str(rt, at, old, "replace") || !want_str(rt, at, nw, "replace")) return NULL;
    int64_t left = -1;
    if (present(count)) {
        if (count->kind != TV_INT)
            return rt_fail(rt, at, KILN_E_INVALID, "replace() count must be an integer");
        left = count->u.i;
    }
    tmpl_sb b = {0};
    const char *p = s->u.s.p;
    size_t n = s->u.s.len, i = 0;
    bool ok = true;
    if (old->u.s.len == 0) { /* insert before every code point and at the end */
        uint32_t cp;
        while (ok && i <= n) {
            if (left != 0) {
                ok = sb_put(rt, &b, nw->u.s.p, nw->u.s.len);
                if (left > 0) left--;
            }
            if (i == n) break;
            size_t w = utf8_next(p, n, i, &cp);
            ok = ok && sb_put(rt, &b, p + i, w);
            i += w;
        }
    } else {
        while (ok && left != 0) {
            size_t f = str_find(p, n, old->u.s.p, old->u.s.len, i);
            if (f == SIZE_MAX) break;
            ok = sb_put(rt, &b, p + i, f - i) && sb_put(rt, &b, nw->u.s.p, nw->u.s.len);
            i = f + old->u.s.len;
            if (left > 0) left--;
        }
        ok = ok && sb_put(rt, &b, p + i, n - i);
    }
    if (!ok) return sb_free(&b), NULL;
    return sb_take(rt, &b);
}

static bool push_str(tmpl_rt *rt, tmpl_value *l, const char *s, size_t n)
{
    tmpl_value *v = tv_str(rt, s, n);
    return v && tv_list_push(rt, l, v);
}

static tmpl_value *str_split(tmpl_rt *rt, const tmpl_node *at, tmpl_value *s, tmpl_value *sep,
                             tmpl_value *maxv)
{
    int64_t max = -1;
    if (present(maxv)) {
        if (maxv->kind != TV_INT)
            return rt_fail(rt, at, KILN_E_INVALID, "split() maxsplit must be an integer");
        max = maxv->u.i;
    }
    tmpl_value *l = tv_list(rt, 0);
    if (!l) return NULL;
    const char *p = s->u.s.p;
    size_t n = s->u.s.len, i = 0;
    uint32_t cp;
    if (!present(sep)) {
        for (;;) {
            while (i < n) { /* skip whitespace */
                size_t w = utf8_next(p, n, i, &cp);
                if (!py_space(cp)) break;
                i += w;
            }
            if (i >= n) break;
            if (max >= 0 && (int64_t)l->u.l.n >= max) {
                if (!push_str(rt, l, p + i, n - i)) goto fail;
                break;
            }
            size_t j = i;
            while (j < n) {
                size_t w = utf8_next(p, n, j, &cp);
                if (py_space(cp)) break;
                j += w;
            }
            if (!push_str(rt, l, p + i, j - i)) goto fail;
            i = j;
        }
        return l;
    }
    if (sep->kind != TV_STR) {
        rt_fail(rt, at, KILN_E_INVALID, "split() separator must be a string");
        goto fail;
    }
    if (sep->u.s.len == 0) {
        rt_fail(rt, at, KILN_E_INVALID, "empty separator");
        goto fail;
    }
    for (;;) {
        size_t f = (max < 0 || (int64_t)l->u.l.n < max)
                       ? str_find(p, n, sep->u.s.p, sep->u.s.len, i)
                       : SIZE_MAX;
        if (f == SIZE_MAX) {
            if (!push_str(rt, l, p + i, n - i)) goto fail;
            return l;
        }
        if (!push_str(rt, l, p + i, f - i)) goto fail;
        i = f + sep->u.s.len;
    }
fail:
    tv_decref(rt, l);
    return NULL;
}

static bool affix(const tmpl_value *s, const tmpl_value *x, bool end)
{
    if (x->u.s.len > s->u.s.len) return false;
    const char *p = end ? s->u.s.p + s->u.s.len - x->u.s.len : s->u.s.p;
    return !memcmp(p, x->u.s.p, x->u.s.len);
}

static tmpl_value *starts_ends(tmpl_rt *rt, const tmpl_node *at, tmpl_value *s, const tmpl_args *a,
                               bool end)
{
    tmpl_value *x = arg_get(a, 0, NULL);
    const char *fn = end ? "endswith" : "startswith";
    if (!x) return rt_fail(rt, at, KILN_E_INVALID, "%s() requires an argument", fn);
    if (x->kind == TV_STR) return TV_BOOLV(affix(s, x, end));
    if (x->kind == TV_LIST) {
        for (size_t i = 0; i < x->u.l.n; i++) {
            if (x->u.l.items[i]->kind != TV_STR)
                return rt_fail(rt, at, KILN_E_INVALID, "%s() tuple elements must be strings", fn);
            if (affix(s, x->u.l.items[i], end)) return TV_BOOLV(true);
        }
        return TV_BOOLV(false);
    }
    return rt_fail(rt, at, KILN_E_INVALID, "%s() argument must be a string or tuple of strings",
                   fn);
}

/* str.format: {} {0} {name}; conversions and format specs are accepted and ignored. */
static tmpl_value *str_format(tmpl_rt *rt, const tmpl_node *at, tmpl_value *s, const tmpl_args *a)
{
    tmpl_sb b = {0};
    const char *p = s->u.s.p;
    size_t n = s->u.s.len, auto_i = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if ((c == '{' || c == '}') && i + 1 < n && p[i + 1] == c) {
            if (!sb_putc(rt, &b, c)) goto fail;
            i++;
            continue;
        }
        if (c != '{') {
            if (!sb_putc(rt, &b, c)) goto fail;
            continue;
        }
        size_t j = i + 1;
        while (j < n && p[j] != '}')
            j++;
        if (j >= n) {
            rt_fail(rt, at, KILN_E_INVALID, "format(): single '{' encountered");
            goto fail;
        }
        size_t fe = i + 1;
        while (fe < j && p[fe] != '!' && p[fe] != ':')
            fe++;
        tmpl_value *v = NULL;
        if (fe == i + 1) {
            v = arg_get(a, auto_i++, NULL);
        } else if (p[i + 1] >= '0' && p[i + 1] <= '9') {
            v = arg_get(a, (size_t)strtoul(p + i + 1, NULL, 10), NULL);
        } else {
            for (size_t k = 0; k < a->nkw && !v; k++)
                if (strlen(a->kw_names[k]) == fe - i - 1 &&
                    !memcmp(a->kw_names[k], p + i + 1, fe - i - 1))
                    v = a->kw_vals[k];
        }
        if (!v) {
            rt_fail(rt, at, KILN_E_INVALID, "format(): missing argument for field %.*s",
                    (int)(fe - i - 1), p + i + 1);
            goto fail;
        }
        if (!tv_write_str(rt, &b, v)) goto fail;
        i = j;
    }
    return sb_take(rt, &b);
fail:
    sb_free(&b);
    return NULL;
}

/* ------------------------------------------------------------------ string methods */

#define METHOD(name)                                                                               \
    static tmpl_value *name(tmpl_rt *rt, const tmpl_node *at, tmpl_value *self, const tmpl_args *a)

METHOD(m_upper)
{
    (void)at;
    (void)a;
    return str_case(rt, self, 1);
}
METHOD(m_lower)
{
    (void)at;
    (void)a;
    return str_case(rt, self, 0);
}
METHOD(m_title)
{
    (void)at;
    (void)a;
    return str_case(rt, self, 2);
}
METHOD(m_capitalize)
{
    (void)at;
    (void)a;
    return str_case(rt, self, 3);
}
METHOD(m_strip)
{
    (void)at;
    return str_strip(rt, self, arg_get(a, 0, "chars"), true, true);
}
METHOD(m_lstrip)
{
    (void)at;
    return str_strip(rt, self, arg_get(a, 0, "chars"), true, false);
}
METHOD(m_rstrip)
{
    (void)at;
    return str_strip(rt, self, arg_get(a, 0, "chars"), false, true);
}
METHOD(m_startswith)
{
    return starts_ends(rt, at, self, a, false);
}
METHOD(m_endswith)
{
    return starts_ends(rt, at, self, a, true);
}
METHOD(m_split)
{
    return str_split(rt, at, self, arg_get(a, 0, "sep"), arg_get(a, 1, "maxsplit"));
}
METHOD(m_format)
{
    return str_format(rt, at, self, a);
}
METHOD(m_replace)
{
    return str_replace(rt, at, self, arg_get(a, 0, "old"), arg_get(a, 1, "new"),
                       arg_get(a, 2, "count"));
}

METHOD(m_count)
{
    tmpl_value *x = want_str(rt, at, arg_get(a, 0, "sub"), "count");
    if (!x) return NULL;
    if (x->u.s.len == 0) return tv_int(rt, (int64_t)utf8_cplen(self->u.s.p, self->u.s.len) + 1);
    int64_t c = 0;
    for (size_t i = 0;
         (i = str_find(self->u.s.p, self->u.s.len, x->u.s.p, x->u.s.len, i)) != SIZE_MAX;
         i += x->u.s.len)
        c++;
    return tv_int(rt, c);
}

METHOD(m_find)
{
    tmpl_value *x = want_str(rt, at, arg_get(a, 0, "sub"), "find");
    if (!x) return NULL;
    size_t f = str_find(self->u.s.p, self->u.s.len, x->u.s.p, x->u.s.len, 0);
    return tv_int(rt, f == SIZE_MAX ? -1 : (int64_t)utf8_cplen(self->u.s.p, f));
}

METHOD(m_join)
{
    tmpl_value *x = arg_get(a, 0, "iterable");
    if (!x) return rt_fail(rt, at, KILN_E_INVALID, "join() requires an argument");
    tmpl_value *l = tmpl_list_of(rt, at, x);
    if (!l) return NULL;
    tmpl_sb b = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < l->u.l.n; i++)
        ok = (i == 0 || sb_put(rt, &b, self->u.s.p, self->u.s.len)) &&
             tv_write_str(rt, &b, l->u.l.items[i]);
    tv_decref(rt, l);
    if (!ok) return sb_free(&b), NULL;
    return sb_take(rt, &b);
}

static const tmpl_builtin STR_METHODS[] = {
    {"upper", m_upper},       {"lower", m_lower},
    {"title", m_title},       {"capitalize", m_capitalize},
    {"strip", m_strip},       {"lstrip", m_lstrip},
    {"rstrip", m_rstrip},     {"startswith", m_startswith},
    {"endswith", m_endswith}, {"split", m_split},
    {"replace", m_replace},   {"format", m_format},
    {"count", m_count},       {"find", m_find},
    {"join", m_join},
};

/* ------------------------------------------------------------------ dict methods */

tmpl_value *dict_items(tmpl_rt *rt, tmpl_value *d)
{
    tmpl_value *l = tv_list(rt, d->u.d.n);
    if (!l) return NULL;
    for (size_t i = 0; i < d->u.d.n; i++) {
        tmpl_value *pair = tv_list(rt, 2);
        if (!pair) return tv_decref(rt, l), NULL;
        pair->u.l.items[0] = tv_ref(d->u.d.keys[i]);
        pair->u.l.items[1] = tv_ref(d->u.d.vals[i]);
        pair->u.l.n = 2;
        l->u.l.items[l->u.l.n++] = pair;
    }
    return l;
}

METHOD(m_get)
{
    tmpl_value *k = arg_get(a, 0, "key"), *def = arg_get(a, 1, "default");
    if (!k) return rt_fail(rt, at, KILN_E_INVALID, "get() requires a key");
    tmpl_value *v = k->kind == TV_STR ? tv_dict_get(self, k->u.s.p, k->u.s.len) : NULL;
    return tv_ref(v ? v : def ? def : TV_NONEV);
}

METHOD(m_items)
{
    (void)at;
    (void)a;
    return dict_items(rt, self);
}

METHOD(m_keys)
{
    (void)at;
    (void)a;
    tmpl_value *l = tv_list(rt, self->u.d.n);
    if (l)
        for (size_t i = 0; i < self->u.d.n; i++)
            l->u.l.items[l->u.l.n++] = tv_ref(self->u.d.keys[i]);
    return l;
}

METHOD(m_values)
{
    (void)at;
    (void)a;
    tmpl_value *l = tv_list(rt, self->u.d.n);
    if (l)
        for (size_t i = 0; i < self->u.d.n; i++)
            l->u.l.items[l->u.l.n++] = tv_ref(self->u.d.vals[i]);
    return l;
}

tmpl_value *dict_dictsort(tmpl_rt *rt, const tmpl_node *at, tmpl_value *d, const tmpl_args *a)
{
    tmpl_value *cs = arg_get(a, 0, "case_sensitive"), *by = arg_get(a, 1, "by"),
               *rev = arg_get(a, 2, "reverse");
    bool by_value = false;
    if (by && by->kind == TV_STR) {
        if (!strcmp(by->u.s.p, "value"))
            by_value = true;
        else if (strcmp(by->u.s.p, "key"))
            return rt_fail(rt, at, KILN_E_INVALID, "dictsort: by must be 'key' or 'value'");
    }
    tmpl_value *items = dict_items(rt, d);
    if (!items) return NULL;
    if (!tv_sort(rt, at, items->u.l.items, items->u.l.n, rev && tv_truthy(rev), cs && tv_truthy(cs),
                 by_value ? "1" : "0", 1)) {
        tv_decref(rt, items);
        return NULL;
    }
    return items;
}

METHOD(m_dictsort)
{
    return dict_dictsort(rt, at, self, a);
}

static const tmpl_builtin DICT_METHODS[] = {
    {"get", m_get},       {"items", m_items},       {"keys", m_keys},
    {"values", m_values}, {"dictsort", m_dictsort},
};

const tmpl_builtin *tmpl_method(const tmpl_value *self, const char *name, size_t len)
{
    const tmpl_builtin *tab = NULL;
    size_t n = 0;
    if (self->kind == TV_STR) {
        tab = STR_METHODS;
        n = sizeof STR_METHODS / sizeof STR_METHODS[0];
    } else if (self->kind == TV_DICT) {
        tab = DICT_METHODS;
        n = sizeof DICT_METHODS / sizeof DICT_METHODS[0];
    }
    for (size_t i = 0; i < n; i++)
        if (strlen(tab[i].name) == len && !memcmp(tab[i].name, name, len)) return &tab[i];
    return NULL;
}

/* ------------------------------------------------------------------ globals */

METHOD(g_raise_exception)
{
    (void)self;
    (void)at;
    tmpl_value *m = arg_get(a, 0, "message");
    if (rt->failed) return NULL;
    rt->failed = true;
    tmpl_sb b = {0};
    rt->failed = false;
    bool ok = m ? tv_write_str(rt, &b, m) : true;
    rt->failed = true;
    kiln_fail(rt->err, KILN_E_INVALID, "%s", ok && b.p ? b.p : "");
    sb_free(&b);
    return NULL;
}

METHOD(g_range)
{
    (void)self;
    int64_t v[3] = {0, 0, 1};
    size_t n = a->npos;
    if (n < 1 || n > 3) return rt_fail(rt, at, KILN_E_INVALID, "range() takes 1 to 3 arguments");
    for (size_t i = 0; i < n; i++) {
        tmpl_value *x = a->pos[i];
        if (x->kind != TV_INT && x->kind != TV_BOOL)
            return rt_fail(rt, at, KILN_E_INVALID, "range() arguments must be integers, got %s",
                           tv_kind_name(x));
        v[i] = x->kind == TV_INT ? x->u.i : x->u.b;
    }
    int64_t start = n == 1 ? 0 : v[0], stop = n == 1 ? v[0] : v[1], step = n == 3 ? v[2] : 1;
    if (step == 0) return rt_fail(rt, at, KILN_E_INVALID, "range() step must not be zero");
    double count = step > 0 ? ((double)stop - (double)start) / (double)step
                            : ((double)start - (double)stop) / (double)-step;
    if (count < 0) count = 0;
    if (count > (double)rt->iters_max)
        return rt_fail(rt, at, KILN_E_TOO_LARGE, "range() of %.0f items exceeds the loop limit",
                       count);
    size_t cnt = (size_t)count + 1;
    tmpl_value *l = tv_list(rt, cnt);
    if (!l) return NULL;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        tmpl_value *x = tv_int(rt, i);
        if (!x || !tv_list_push(rt, l, x)) return tv_decref(rt, l), NULL;
        if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
    }
    return l;
}

static bool fill_pairs(tmpl_rt *rt, const tmpl_node *at, tmpl_value *d, tmpl_value *src)
{
    if (src->kind == TV_DICT || src->kind == TV_NS) {
        for (size_t i = 0; i < src->u.d.n; i++)
            if (!tv_dict_setk(rt, d, tv_ref(src->u.d.keys[i]), tv_ref(src->u.d.vals[i])))
                return false;
        return true;
    }
    if (src->kind == TV_LIST) {
        for (size_t i = 0; i < src->u.l.n; i++) {
            tmpl_value *p = src->u.l.items[i];
            if (p->kind != TV_LIST || p->u.l.n != 2 || p->u.l.items[0]->kind != TV_STR) {
                rt_fail(rt, at, KILN_E_INVALID,
                        "expected a mapping or a list of [key, value] pairs");
                return false;
            }
            if (!tv_dict_setk(rt, d, tv_ref(p->u.l.items[0]), tv_ref(p->u.l.items[1])))
                return false;
        }
        return true;
    }
    rt_fail(rt, at, KILN_E_INVALID, "'%s' object is not iterable", tv_kind_name(src));
    return false;
}

static tmpl_value *make_mapping(tmpl_rt *rt, const tmpl_node *at, const tmpl_args *a, uint8_t kind,
                                const char *fn)
{
    if (a->npos > 1)
        return rt_fail(rt, at, KILN_E_INVALID, "%s expected at most 1 argument, got %zu", fn,
                       a->npos);
    tmpl_value *d = tv_dict(rt, kind);
    if (!d) return NULL;
    if (a->npos == 1 && !fill_pairs(rt, at, d, a->pos[0])) return tv_decref(rt, d), NULL;
    for (size_t k = 0; k < a->nkw; k++)
        if (!tv_dict_set(rt, d, a->kw_names[k], strlen(a->kw_names[k]), tv_ref(a->kw_vals[k])))
            return tv_decref(rt, d), NULL;
    return d;
}

METHOD(g_namespace)
{
    (void)self;
    return make_mapping(rt, at, a, TV_NS, "namespace");
}
METHOD(g_dict)
{
    (void)self;
    return make_mapping(rt, at, a, TV_DICT, "dict");
}

static const char *const MONTHS[] = {"January",   "February", "March",    "April",
                                     "May",       "June",     "July",     "August",
                                     "September", "October",  "November", "December"};
static const char *const DAYS[] = {"Sunday",   "Monday", "Tuesday", "Wednesday",
                                   "Thursday", "Friday", "Saturday"};

/* Python strftime for the codes templates use, in the C locale; "%-d" drops padding
 * (glibc); unknown codes are copied through. */
static bool strftime_py(tmpl_rt *rt, tmpl_sb *b, const char *f, size_t n, const struct tm *tm)
{
    for (size_t i = 0; i < n; i++) {
        if (f[i] != '%' || i + 1 >= n) {
            if (!sb_putc(rt, b, f[i])) return false;
            continue;
        }
        bool nopad = f[i + 1] == '-' && i + 2 < n;
        char c = f[i + 1 + nopad];
        int v = -1, w = 2;
        const char *s = NULL;
        char buf[32];
        switch (c) {
        case 'Y':
            v = tm->tm_year + 1900;
            w = 4;
            break;
        case 'y':
            v = tm->tm_year % 100;
            break;
        case 'm':
            v = tm->tm_mon + 1;
            break;
        case 'd':
            v = tm->tm_mday;
            break;
        case 'e':
            v = tm->tm_mday;
            break;
        case 'H':
            v = tm->tm_hour;
            break;
        case 'I':
            v = tm->tm_hour % 12 ? tm->tm_hour % 12 : 12;
            break;
        case 'M':
            v = tm->tm_min;
            break;
        case 'S':
            v = tm->tm_sec;
            break;
        case 'j':
            v = tm->tm_yday + 1;
            w = 3;
            break;
        case 'B':
            s = MONTHS[tm->tm_mon % 12];
            break;
        case 'A':
            s = DAYS[tm->tm_wday % 7];
            break;
        case 'p':
            s = tm->tm_hour < 12 ? "AM" : "PM";
            break;
        case '%':
            s = "%";
            break;
        case 'b':
        case 'a':
            snprintf(buf, sizeof buf, "%.3s",
                     c == 'b' ? MONTHS[tm->tm_mon % 12] : DAYS[tm->tm_wday % 7]);
            s = buf;
            break;
        default:
            if (!sb_put(rt, b, f + i, 2 + nopad)) return false;
            i += 1 + nopad;
            continue;
        }
        if (!s) {
            if (nopad)
                snprintf(buf, sizeof buf, "%d", v);
            else if (c == 'e')
                snprintf(buf, sizeof buf, "%2d", v);
            else
                snprintf(buf, sizeof buf, "%0*d", w, v);
            s = buf;
        }
        if (!sb_put(rt, b, s, strlen(s))) return false;
        i += 1 + nopad;
    }
    return true;
}

METHOD(g_strftime_now)
{
    (void)self;
    tmpl_value *f = want_str(rt, at, arg_get(a, 0, "format"), "strftime_now");
    if (!f) return NULL;
    struct tm tm;
    time_t now = rt->t->opt.fixed_now ? (time_t)rt->t->opt.fixed_now : time(NULL);
    if (rt->t->opt.fixed_now ? !gmtime_r(&now, &tm) : !localtime_r(&now, &tm))
        return rt_fail(rt, at, KILN_E_INTERNAL, "strftime_now: cannot read the clock");
    tmpl_sb b = {0};
    if (!strftime_py(rt, &b, f->u.s.p, f->u.s.len, &tm)) return sb_free(&b), NULL;
    return sb_take(rt, &b);
}

static const tmpl_builtin GLOBALS[] = {
    {"raise_exception", g_raise_exception},
    {"range", g_range},
    {"namespace", g_namespace},
    {"dict", g_dict},
    {"strftime_now", g_strftime_now},
};

tmpl_value *tmpl_globals(tmpl_rt *rt)
{
    tmpl_value *g = tv_dict(rt, TV_SCOPE);
    if (!g) return NULL;
    for (size_t i = 0; i < sizeof GLOBALS / sizeof GLOBALS[0]; i++) {
        tmpl_value *f = tv_func(rt, FN_BUILTIN, &GLOBALS[i], NULL, NULL, NULL);
        if (!f || !tv_dict_set(rt, g, GLOBALS[i].name, strlen(GLOBALS[i].name), f))
            return tv_decref(rt, g), NULL;
    }
    static const struct {
        const char *name;
        tmpl_value *v;
    } consts[] = {{"true", &tmpl_true_v}, {"false", &tmpl_false_v}, {"none", &tmpl_none_v},
                  {"True", &tmpl_true_v}, {"False", &tmpl_false_v}, {"None", &tmpl_none_v}};
    for (size_t i = 0; i < sizeof consts / sizeof consts[0]; i++)
        if (!tv_dict_set(rt, g, consts[i].name, strlen(consts[i].name), consts[i].v))
            return tv_decref(rt, g), NULL;
    return g;
}
