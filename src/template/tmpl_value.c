/*
 * tmpl_value.c — value allocation, refcounts, containers, the render's value
 * list and its sweep; the public value constructors and JSON -> value.
 *
 * Lifecycle of a render value (see tmpl_int.h, invariants (1)-(3)):
 *   tv_alloc()     links it on rt->gc and charges rt->mem (KILN_E_TOO_LARGE past max)
 *   tv_decref()    at 0: releases children, unlinks, frees
 *   rt_sweep()     frees whatever is still linked (cycles) without following children
 * External values (public API) carry external=1: tv_incref/tv_decref skip them during
 * renders; tmpl_value_free() releases them with an ordinary recursive refcount.
 */
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_int.h"

tmpl_value tmpl_undef_v = {.refcnt = 1, .kind = TV_UNDEF, .external = 2};
tmpl_value tmpl_none_v = {.refcnt = 1, .kind = TV_NONE, .external = 2};
tmpl_value tmpl_true_v = {.refcnt = 1, .kind = TV_BOOL, .external = 2, .u.b = true};
tmpl_value tmpl_false_v = {.refcnt = 1, .kind = TV_BOOL, .external = 2, .u.b = false};

/* ------------------------------------------------------------------ render list */

void rt_init(tmpl_rt *rt, const tmpl_template *t, kiln_err *err)
{
    memset(rt, 0, sizeof *rt);
    rt->t = t;
    rt->err = err;
    rt->gc.gc_next = rt->gc.gc_prev = &rt->gc;
    rt->mem_max = t->opt.max_memory;
    rt->out_max = t->opt.max_output;
    rt->iters_max = t->opt.max_loop_iter;
    rt->depth_max = t->opt.max_depth;
}

bool rt_charge(tmpl_rt *rt, size_t bytes)
{
    if (!rt) return true;
    if (bytes > rt->mem_max - rt->mem || rt->mem + bytes > rt->mem_max) {
        rt_fail(rt, NULL, KILN_E_TOO_LARGE, "template uses more than %zu bytes of memory",
                rt->mem_max);
        return false;
    }
    rt->mem += bytes;
    if (!rt_account(rt)) {
        rt->mem -= bytes;
        return false;
    }
    return true;
}

/* Keeps the shared account's reservation above mem + sb_mem (64 KiB steps,
 * so a render reserves a few times, not once per value). */
bool rt_account(tmpl_rt *rt)
{
    const tmpl_options *o = &rt->t->opt;
    size_t need = rt->mem + rt->sb_mem;
    if (!o->acct_reserve || need <= rt->held) return true;
    size_t step = (size_t)64 << 10, grow = (need - rt->held + step - 1) / step * step;
    kiln_code rc = o->acct_reserve(o->acct_ctx, grow, rt->held + grow);
    if (rc != KILN_OK) {
        const char *name = o->acct_name ? o->acct_name : "the memory account";
        if (rc == KILN_E_TOO_LARGE)
            rt_fail(rt, NULL, rc, "template needs more than %zu bytes of memory, more than %s holds",
                    rt->held + grow, name);
        else
            rt_fail(rt, NULL, rc == KILN_E_BUSY ? rc : KILN_E_NOMEM,
                    "template needs %zu bytes of %s, which other requests hold now: retry later",
                    rt->held + grow, name);
        return false;
    }
    rt->held += grow;
    return true;
}

void rt_release(tmpl_rt *rt)
{
    const tmpl_options *o = &rt->t->opt;
    if (rt->held && o->acct_release) o->acct_release(o->acct_ctx, rt->held);
    rt->held = 0;
}

static void free_storage(tmpl_value *v)
{
    if (v->kind == TV_LIST) free(v->u.l.items);
    if (v->kind == TV_DICT || v->kind == TV_NS || v->kind == TV_SCOPE) {
        free(v->u.d.keys);
        free(v->u.d.vals);
    }
    free(v);
}

void rt_sweep(tmpl_rt *rt)
{
    tmpl_value *v = rt->gc.gc_next;
    while (v != &rt->gc) {
        tmpl_value *next = v->gc_next;
        free_storage(v);
        v = next;
    }
    rt->gc.gc_next = rt->gc.gc_prev = &rt->gc;
    rt->mem = 0;
}

tmpl_value *tv_alloc(tmpl_rt *rt, uint8_t kind, size_t extra)
{
    size_t bytes = sizeof(tmpl_value) + extra;
    if (extra > SIZE_MAX / 2) return rt ? rt_nomem(rt) : NULL;
    if (rt && !rt_charge(rt, bytes)) return NULL;
    tmpl_value *v = calloc(1, bytes);
    if (!v) {
        if (rt) {
            rt->mem -= bytes;
            rt_nomem(rt);
        }
        return NULL;
    }
    v->refcnt = 1;
    v->kind = kind;
    v->bytes = bytes;
    if (rt) {
        v->gc_next = rt->gc.gc_next;
        v->gc_prev = &rt->gc;
        rt->gc.gc_next->gc_prev = v;
        rt->gc.gc_next = v;
    } else {
        v->external = 1;
    }
    return v;
}

void tv_incref(tmpl_value *v)
{
    if (v && !v->external) v->refcnt++;
}

static void release_children(tmpl_rt *rt, tmpl_value *v)
{
    switch (v->kind) {
    case TV_LIST:
        for (size_t i = 0; i < v->u.l.n; i++)
            tv_decref(rt, v->u.l.items[i]);
        break;
    case TV_DICT:
    case TV_NS:
    case TV_SCOPE:
        for (size_t i = 0; i < v->u.d.n; i++) {
            tv_decref(rt, v->u.d.keys[i]);
            tv_decref(rt, v->u.d.vals[i]);
        }
        if (v->u.d.parent) tv_decref(rt, v->u.d.parent);
        break;
    case TV_FUNC:
        if (v->u.fn.self) tv_decref(rt, v->u.fn.self);
        if (v->u.fn.scope) tv_decref(rt, v->u.fn.scope);
        break;
    default:
        break;
    }
}

void tv_decref(tmpl_rt *rt, tmpl_value *v)
{
    if (!v || v->external) return;
    if (--v->refcnt > 0) return;
    /* Deeply nested garbage (a list built as [[[...]]] in a loop) stays linked, with a
     * count of 0, for rt_sweep(): releasing it here would recurse once per level. */
    if (rt && rt->free_depth >= 64) return;
    v->gc_prev->gc_next = v->gc_next;
    v->gc_next->gc_prev = v->gc_prev;
    if (rt) {
        rt->mem -= v->bytes < rt->mem ? v->bytes : rt->mem;
        rt->free_depth++;
    }
    release_children(rt, v);
    if (rt) rt->free_depth--;
    free_storage(v);
}

/* ------------------------------------------------------------------ constructors */

tmpl_value *tv_int(tmpl_rt *rt, int64_t i)
{
    tmpl_value *v = tv_alloc(rt, TV_INT, 0);
    if (v) v->u.i = i;
    return v;
}

tmpl_value *tv_float(tmpl_rt *rt, double f)
{
    tmpl_value *v = tv_alloc(rt, TV_FLOAT, 0);
    if (v) v->u.f = f;
    return v;
}

tmpl_value *tv_str(tmpl_rt *rt, const char *s, size_t len)
{
    if (len > SIZE_MAX / 4) return rt ? rt_nomem(rt) : NULL;
    tmpl_value *v = tv_alloc(rt, TV_STR, len + 1);
    if (!v) return NULL;
    v->u.s.p = (char *)(v + 1);
    v->u.s.len = len;
    if (len) memcpy(v->u.s.p, s, len);
    v->u.s.p[len] = '\0';
    return v;
}

tmpl_value *tv_cstr(tmpl_rt *rt, const char *s)
{
    return tv_str(rt, s, strlen(s));
}

tmpl_value *tv_list(tmpl_rt *rt, size_t cap)
{
    tmpl_value *v = tv_alloc(rt, TV_LIST, 0);
    if (!v || !cap) return v;
    if (cap > SIZE_MAX / 64 || !rt_charge(rt, cap * sizeof(void *))) goto fail;
    v->bytes += cap * sizeof(void *);
    v->u.l.items = malloc(cap * sizeof(void *));
    if (!v->u.l.items) goto fail;
    v->u.l.cap = cap;
    return v;
fail:
    if (!rt)
        tmpl_value_free(v); /* an external value: tv_decref would skip it */
    else
        tv_decref(rt, v);
    return rt ? (rt->failed ? NULL : rt_nomem(rt)) : NULL;
}

tmpl_value *tv_dict(tmpl_rt *rt, uint8_t kind)
{
    return tv_alloc(rt, kind, 0);
}

static bool grow(tmpl_rt *rt, tmpl_value *owner, void ***arr, size_t *cap, size_t need)
{
    if (need <= *cap) return true;
    size_t nc = *cap ? *cap * 2 : 4;
    while (nc < need)
        nc *= 2;
    size_t add = (nc - *cap) * sizeof(void *);
    if (rt && !owner->external && !rt_charge(rt, add)) return false;
    void **p = realloc(*arr, nc * sizeof(void *));
    if (!p) {
        if (rt) rt_nomem(rt);
        return false;
    }
    if (!owner->external) owner->bytes += add;
    *arr = p;
    *cap = nc;
    return true;
}

bool tv_list_push(tmpl_rt *rt, tmpl_value *l, tmpl_value *item)
{
    if (!grow(rt, l, (void ***)&l->u.l.items, &l->u.l.cap, l->u.l.n + 1)) {
        tv_decref(rt, item);
        return false;
    }
    l->u.l.items[l->u.l.n++] = item;
    return true;
}

tmpl_value *tv_dict_get(const tmpl_value *d, const char *k, size_t klen)
{
    for (size_t i = 0; i < d->u.d.n; i++) {
        const tmpl_value *key = d->u.d.keys[i];
        if (key->u.s.len == klen && memcmp(key->u.s.p, k, klen) == 0) return d->u.d.vals[i];
    }
    return NULL;
}

bool tv_dict_setk(tmpl_rt *rt, tmpl_value *d, tmpl_value *key, tmpl_value *v)
{
    for (size_t i = 0; i < d->u.d.n; i++) {
        tmpl_value *k = d->u.d.keys[i];
        if (k->u.s.len == key->u.s.len && memcmp(k->u.s.p, key->u.s.p, k->u.s.len) == 0) {
            tv_decref(rt, d->u.d.vals[i]);
            d->u.d.vals[i] = v;
            tv_decref(rt, key);
            return true;
        }
    }
    size_t cap = d->u.d.cap;
    if (!grow(rt, d, (void ***)&d->u.d.keys, &cap, d->u.d.n + 1)) goto fail;
    size_t cap2 = d->u.d.cap;
    if (!grow(rt, d, (void ***)&d->u.d.vals, &cap2, d->u.d.n + 1)) goto fail;
    d->u.d.cap = cap < cap2 ? cap : cap2;
    d->u.d.keys[d->u.d.n] = key;
    d->u.d.vals[d->u.d.n] = v;
    d->u.d.n++;
    return true;
fail:
    if (!rt) { /* building external values (tmpl_value_*): tv_decref skips them, so free */
        tmpl_value_free(key);
        tmpl_value_free(v);
    } else {
        tv_decref(rt, key);
        tv_decref(rt, v);
    }
    return false;
}

bool tv_dict_set(tmpl_rt *rt, tmpl_value *d, const char *k, size_t klen, tmpl_value *v)
{
    for (size_t i = 0; i < d->u.d.n; i++) {
        tmpl_value *key = d->u.d.keys[i];
        if (key->u.s.len == klen && memcmp(key->u.s.p, k, klen) == 0) {
            tv_decref(rt, d->u.d.vals[i]);
            d->u.d.vals[i] = v;
            return true;
        }
    }
    tmpl_value *key = tv_str(d->external ? NULL : rt, k, klen);
    if (!key) {
        tv_decref(rt, v);
        if (rt && !rt->failed) rt_nomem(rt);
        return false;
    }
    return tv_dict_setk(rt, d, key, v);
}

tmpl_value *tv_func(tmpl_rt *rt, uint8_t fk, const tmpl_builtin *bi, tmpl_value *self,
                    const tmpl_node *node, tmpl_value *scope)
{
    tmpl_value *v = tv_alloc(rt, TV_FUNC, 0);
    if (!v) return NULL;
    v->u.fn.fk = fk;
    v->u.fn.bi = bi;
    v->u.fn.self = tv_ref(self);
    v->u.fn.node = node;
    v->u.fn.scope = tv_ref(scope);
    return v;
}

/* ------------------------------------------------------------------ public API */

static tmpl_value *ext_copy_singleton(tmpl_value *s)
{
    /* External singletons would be shared; give callers their own object instead so
     * that tmpl_value_free() is uniform. */
    tmpl_value *v = tv_alloc(NULL, s->kind, 0);
    if (v) v->u = s->u;
    return v;
}

tmpl_value *tmpl_value_none(void)
{
    return ext_copy_singleton(&tmpl_none_v);
}

tmpl_value *tmpl_value_bool(bool b)
{
    return ext_copy_singleton(b ? &tmpl_true_v : &tmpl_false_v);
}

tmpl_value *tmpl_value_int(int64_t i)
{
    return tv_int(NULL, i);
}

tmpl_value *tmpl_value_float(double f)
{
    return tv_float(NULL, f);
}

tmpl_value *tmpl_value_string(const char *s, size_t len)
{
    return tv_str(NULL, s, len);
}

tmpl_value *tmpl_value_cstring(const char *s)
{
    return tv_str(NULL, s, strlen(s));
}

tmpl_value *tmpl_value_list_new(void)
{
    return tv_list(NULL, 0);
}

tmpl_value *tmpl_value_dict_new(void)
{
    return tv_dict(NULL, TV_DICT);
}

tmpl_value *tmpl_value_ref(tmpl_value *v)
{
    if (v && v->external == 1) v->refcnt++;
    return v;
}

void tmpl_value_free(tmpl_value *v)
{
    if (!v || v->external != 1) return;
    if (--v->refcnt > 0) return;
    switch (v->kind) {
    case TV_LIST:
        for (size_t i = 0; i < v->u.l.n; i++)
            tmpl_value_free(v->u.l.items[i]);
        break;
    case TV_DICT:
        for (size_t i = 0; i < v->u.d.n; i++) {
            tmpl_value_free(v->u.d.keys[i]);
            tmpl_value_free(v->u.d.vals[i]);
        }
        break;
    default:
        break;
    }
    free_storage(v);
}

kiln_code tmpl_value_list_append(tmpl_value *list, tmpl_value *item, kiln_err *err)
{
    if (!list || list->kind != TV_LIST || list->external != 1 || !item) {
        tmpl_value_free(item);
        return kiln_fail(err, KILN_E_INVALID, "tmpl_value_list_append: not a list or no item");
    }
    if (!grow(NULL, list, (void ***)&list->u.l.items, &list->u.l.cap, list->u.l.n + 1)) {
        tmpl_value_free(item);
        return kiln_fail(err, KILN_E_NOMEM, "template value: out of memory");
    }
    list->u.l.items[list->u.l.n++] = item;
    return KILN_OK;
}

kiln_code tmpl_value_dict_set(tmpl_value *dict, const char *key, tmpl_value *v, kiln_err *err)
{
    return tmpl_value_dict_setn(dict, key, key ? strlen(key) : 0, v, err);
}

kiln_code tmpl_value_dict_setn(tmpl_value *dict, const char *key, size_t klen, tmpl_value *v,
                               kiln_err *err)
{
    if (!dict || dict->kind != TV_DICT || dict->external != 1 || !v || !key) {
        tmpl_value_free(v);
        return kiln_fail(err, KILN_E_INVALID, "tmpl_value_dict_set: not a dict or no value");
    }
    for (size_t i = 0; i < dict->u.d.n; i++) {
        tmpl_value *k = dict->u.d.keys[i];
        if (k->u.s.len == klen && memcmp(k->u.s.p, key, klen) == 0) {
            tmpl_value_free(dict->u.d.vals[i]);
            dict->u.d.vals[i] = v;
            return KILN_OK;
        }
    }
    tmpl_value *k = tv_str(NULL, key, klen);
    if (!k || !tv_dict_setk(NULL, dict, k, v)) {
        if (!k) tmpl_value_free(v);
        return kiln_fail(err, KILN_E_NOMEM, "template value: out of memory");
    }
    return KILN_OK;
}

/* NULL when out of memory, or (*too_deep set) when j nests deeper than
 * JSON_MAX_DEPTH: the recursion is bounded by that, whatever the input. */
#define JSON_MAX_DEPTH 512
static tmpl_value *from_json(const json_t *j, int depth, bool *too_deep)
{
    if (depth > JSON_MAX_DEPTH) {
        *too_deep = true;
        return NULL;
    }
    switch (json_typeof(j)) {
    case JSON_NULL:
        return tmpl_value_none();
    case JSON_TRUE:
        return tmpl_value_bool(true);
    case JSON_FALSE:
        return tmpl_value_bool(false);
    case JSON_INTEGER:
        return tv_int(NULL, (int64_t)json_integer_value(j));
    case JSON_REAL:
        return tv_float(NULL, json_real_value(j));
    case JSON_STRING:
        return tv_str(NULL, json_string_value(j), json_string_length(j));
    case JSON_ARRAY: {
        tmpl_value *l = tv_list(NULL, json_array_size(j));
        if (!l) return NULL;
        size_t i;
        json_t *e;
        json_array_foreach(j, i, e)
        {
            tmpl_value *c = from_json(e, depth + 1, too_deep);
            if (!c) {
                tmpl_value_free(l);
                return NULL;
            }
            l->u.l.items[l->u.l.n++] = c;
        }
        return l;
    }
    case JSON_OBJECT: {
        tmpl_value *d = tv_dict(NULL, TV_DICT);
        if (!d) return NULL;
        /* jansson keeps insertion order (JSON_PRESERVE_ORDER is the default since 2.x). */
        const char *k;
        size_t klen;
        json_t *e;
#ifdef json_object_keylen_foreach
        json_object_keylen_foreach((json_t *)j, k, klen, e)
#else
        json_object_foreach((json_t *)j, k, e)
#endif
        {
#ifndef json_object_keylen_foreach
            klen = strlen(k);
#endif
            tmpl_value *c = from_json(e, depth + 1, too_deep);
            tmpl_value *key = c ? tv_str(NULL, k, klen) : NULL;
            if (!c || !key || !tv_dict_setk(NULL, d, key, c)) {
                if (c && !key) tmpl_value_free(c);
                tmpl_value_free(d);
                return NULL;
            }
        }
        return d;
    }
    }
    return NULL;
}

kiln_code tmpl_value_from_json(const json_t *j, tmpl_value **out, kiln_err *err)
{
    *out = NULL;
    if (!j) return kiln_fail(err, KILN_E_INVALID, "template context: no JSON value");
    bool too_deep = false;
    *out = from_json(j, 0, &too_deep);
    if (!*out && too_deep) /* the caller's input, not a lack of memory */
        return kiln_fail(err, KILN_E_INVALID,
                         "template context: a value nests more than %d levels deep (the template "
                         "engine's limit)",
                         JSON_MAX_DEPTH);
    if (!*out) return kiln_fail(err, KILN_E_NOMEM, "template context: out of memory");
    return KILN_OK;
}
