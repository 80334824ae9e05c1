/*
 * tmpl_eval.c — compiling (lex + parse) and rendering: statements write into a
 * string builder, expressions return owned values (tmpl_int.h invariant (3)).
 *
 * Scopes (TV_SCOPE values), innermost first:
 *   for-loop scope -> ... -> root scope (top-level set) -> context dict -> globals.
 * `set` writes the innermost scope, so a set inside a loop does not leak out (use a
 * namespace); `if` opens no scope. Macros see their caller's scope (dynamic scoping,
 * as @huggingface/jinja does); a call block's caller() sees the block's scope.
 * Loop control: {% break %} keeps what the iteration wrote so far; for/else renders
 * the else part only when the (filtered) sequence was empty (Jinja2 semantics).
 * Limits (tmpl_options): evaluation depth, total loop iterations, output bytes,
 * memory; each gives KILN_E_TOO_LARGE. Errors carry "template:LINE:COL: ".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_int.h"

enum { ST_OK, ST_BREAK, ST_CONTINUE, ST_ERR };

#define DEFAULT_DEPTH 500
#define DEFAULT_ITERS 1000000ULL
#define DEFAULT_OUTPUT (64u << 20)
#define DEFAULT_MEMORY (512u << 20)

/* ------------------------------------------------------------------ errors */

tmpl_value *rt_fail(tmpl_rt *rt, const tmpl_node *at, kiln_code code, const char *fmt, ...)
{
    if (rt->failed) return NULL;
    rt->failed = true;
    char msg[220];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    uint32_t line, col;
    tmpl_linecol(rt->t->src, rt->t->src_len, at ? at->pos : rt->cur_pos, &line, &col);
    kiln_fail(rt->err, code, "template:%u:%u: %s", line, col, msg);
    return NULL;
}

tmpl_value *rt_nomem(tmpl_rt *rt)
{
    if (rt->failed) return NULL;
    rt->failed = true;
    kiln_fail(rt->err, KILN_E_NOMEM, "template: out of memory");
    return NULL;
}

bool rt_enter(tmpl_rt *rt, const tmpl_node *at)
{
    if (rt->depth >= rt->depth_max) {
        rt_fail(rt, at, KILN_E_TOO_LARGE,
                "template recursion deeper than %u levels (the render's depth limit)",
                rt->depth_max);
        return false;
    }
    rt->depth++;
    return true;
}

/* ------------------------------------------------------------------ scopes */

static tmpl_value *lookup(tmpl_rt *rt, tmpl_value *env, const char *name, size_t len)
{
    for (tmpl_value *s = env; s; s = s->u.d.parent) {
        tmpl_value *v = tv_dict_get(s, name, len);
        if (v) return v;
    }
    if (rt->context) {
        tmpl_value *v = tv_dict_get(rt->context, name, len);
        if (v) return v;
    }
    tmpl_value *v = tv_dict_get(rt->globals, name, len);
    return v ? v : TV_UNDEFINED;
}

static bool scope_set(tmpl_rt *rt, tmpl_value *env, const char *name, size_t len, tmpl_value *v)
{
    return tv_dict_set(rt, env, name, len, tv_ref(v));
}

static tmpl_value *new_scope(tmpl_rt *rt, tmpl_value *parent)
{
    tmpl_value *s = tv_dict(rt, TV_SCOPE);
    if (s) s->u.d.parent = tv_ref(parent);
    return s;
}

/* ------------------------------------------------------------------ expressions */

static tmpl_value *eval(tmpl_rt *rt, const tmpl_node *n, tmpl_value *env);
static int exec_body(tmpl_rt *rt, tmpl_node *const *body, uint32_t nb, tmpl_value *env,
                     tmpl_sb *out);

/* Evaluated call arguments; owns its values (and the dicts whose keys name **kwargs). */
typedef struct {
    tmpl_args a;
    size_t cap_pos, cap_kw;
    tmpl_value *keep[8];
    size_t nkeep;
} argbuf;

static void args_free(tmpl_rt *rt, argbuf *b)
{
    for (size_t i = 0; i < b->a.npos; i++)
        tv_decref(rt, b->a.pos[i]);
    for (size_t i = 0; i < b->a.nkw; i++)
        tv_decref(rt, b->a.kw_vals[i]);
    for (size_t i = 0; i < b->nkeep; i++)
        tv_decref(rt, b->keep[i]);
    free(b->a.pos);
    free(b->a.kw_vals);
    free((void *)b->a.kw_names);
    memset(b, 0, sizeof *b);
}

static bool args_pos(tmpl_rt *rt, argbuf *b, tmpl_value *v)
{
    if (b->a.npos == b->cap_pos) {
        size_t nc = b->cap_pos ? b->cap_pos * 2 : 4;
        tmpl_value **p = realloc(b->a.pos, nc * sizeof *p);
        if (!p) return tv_decref(rt, v), rt_nomem(rt), false;
        b->a.pos = p;
        b->cap_pos = nc;
    }
    b->a.pos[b->a.npos++] = v;
    return true;
}

static bool args_kw(tmpl_rt *rt, const tmpl_node *at, argbuf *b, const char *name, tmpl_value *v)
{
    for (size_t i = 0; i < b->a.nkw; i++)
        if (!strcmp(b->a.kw_names[i], name)) {
            tv_decref(rt, v);
            rt_fail(rt, at, KILN_E_INVALID, "got multiple values for keyword argument '%s'", name);
            return false;
        }
    if (b->a.nkw == b->cap_kw) {
        size_t nc = b->cap_kw ? b->cap_kw * 2 : 4;
        tmpl_value **p = realloc(b->a.kw_vals, nc * sizeof *p);
        if (!p) return tv_decref(rt, v), rt_nomem(rt), false;
        b->a.kw_vals = p;
        const char **q = realloc((void *)b->a.kw_names, nc * sizeof *q);
        if (!q) return tv_decref(rt, v), rt_nomem(rt), false;
        b->a.kw_names = q;
        b->cap_kw = nc;
    }
    b->a.kw_names[b->a.nkw] = name;
    b->a.kw_vals[b->a.nkw++] = v;
    return true;
}

/* Positional values (with *spread) first, then keywords (with **spread), as Python. */
static bool eval_args(tmpl_rt *rt, tmpl_node *const *args, uint32_t n, tmpl_value *env, argbuf *b)
{
    memset(b, 0, sizeof *b);
    for (uint32_t i = 0; i < n; i++) {
        const tmpl_node *x = args[i];
        if (x->kind == N_KWARG || x->kind == N_KWSPREAD) continue;
        tmpl_value *v = eval(rt, x->kind == N_SPREAD ? x->a : x, env);
        if (!v) return false;
        if (x->kind == N_SPREAD) {
            if (v->kind != TV_LIST) {
                rt_fail(rt, x, KILN_E_INVALID, "cannot unpack non-list type %s", tv_kind_name(v));
                tv_decref(rt, v);
                return false;
            }
            for (size_t k = 0; k < v->u.l.n; k++)
                if (!args_pos(rt, b, tv_ref(v->u.l.items[k]))) return tv_decref(rt, v), false;
            tv_decref(rt, v);
        } else if (!args_pos(rt, b, v)) {
            return false;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        const tmpl_node *x = args[i];
        if (x->kind == N_KWARG) {
            tmpl_value *v = eval(rt, x->a, env);
            if (!v || !args_kw(rt, x, b, x->s, v)) return false;
        } else if (x->kind == N_KWSPREAD) {
            tmpl_value *v = eval(rt, x->a, env);
            if (!v) return false;
            if (v->kind != TV_DICT || b->nkeep == 8) {
                rt_fail(rt, x, KILN_E_INVALID, "argument after ** must be a mapping, not %s",
                        tv_kind_name(v));
                tv_decref(rt, v);
                return false;
            }
            b->keep[b->nkeep++] = v; /* the names point into v's keys */
            for (size_t k = 0; k < v->u.d.n; k++)
                if (!args_kw(rt, x, b, v->u.d.keys[k]->u.s.p, tv_ref(v->u.d.vals[k]))) return false;
        }
    }
    return true;
}

static tmpl_value *call_body(tmpl_rt *rt, const tmpl_node *at, const tmpl_node *def,
                             tmpl_node *const *params, uint32_t nparams, tmpl_node *const *body,
                             uint32_t nbody, const tmpl_args *a, tmpl_value *parent,
                             const char *display)
{
    tmpl_value *scope = new_scope(rt, parent);
    if (!scope) return NULL;
    size_t nkw = a->nkw;
    bool *used = calloc(nkw + 1, sizeof *used);
    if (!used) return tv_decref(rt, scope), rt_nomem(rt);
    tmpl_value *result = NULL;
    for (uint32_t i = 0; i < nparams; i++) {
        const tmpl_node *p = params[i];
        tmpl_value *v = i < a->npos ? a->pos[i] : NULL;
        for (size_t k = 0; !v && k < nkw; k++)
            if (!strcmp(a->kw_names[k], p->s)) {
                v = a->kw_vals[k];
                used[k] = true;
            }
        if (!scope_set(rt, scope, p->s, p->slen, v ? v : TV_UNDEFINED)) goto out;
    }
    tmpl_value *extra = NULL;
    if (def->flags & MF_KWARGS) {
        if (!(extra = tv_dict(rt, TV_DICT))) goto out;
        for (size_t k = 0; k < nkw; k++)
            if (!used[k] && !tv_dict_set(rt, extra, a->kw_names[k], strlen(a->kw_names[k]),
                                         tv_ref(a->kw_vals[k])))
                goto out_extra;
        if (!scope_set(rt, scope, "kwargs", 6, extra)) goto out_extra;
        tv_decref(rt, extra);
    } else {
        for (size_t k = 0; k < nkw; k++)
            if (!used[k]) {
                rt_fail(rt, at, KILN_E_INVALID, "macro %s takes no keyword argument '%s'", display,
                        a->kw_names[k]);
                goto out;
            }
    }
    if (def->flags & MF_VARARGS) {
        size_t nv = a->npos > nparams ? a->npos - nparams : 0;
        if (!(extra = tv_list(rt, nv))) goto out;
        for (size_t k = 0; k < nv; k++)
            extra->u.l.items[extra->u.l.n++] = tv_ref(a->pos[nparams + k]);
        if (!scope_set(rt, scope, "varargs", 7, extra)) goto out_extra;
        tv_decref(rt, extra);
    } else if (a->npos > nparams) {
        rt_fail(rt, at, KILN_E_INVALID, "macro %s takes not more than %u argument(s)", display,
                nparams);
        goto out;
    }
    /* defaults, evaluated in the macro's scope once every name is bound */
    for (uint32_t i = 0; i < nparams; i++) {
        const tmpl_node *p = params[i];
        if (p->kind != N_KWARG || tv_dict_get(scope, p->s, p->slen)->kind != TV_UNDEF) continue;
        bool given = i < a->npos;
        for (size_t k = 0; !given && k < nkw; k++)
            given = !strcmp(a->kw_names[k], p->s);
        if (given) continue;
        tmpl_value *dv = eval(rt, p->a, scope);
        if (!dv || !tv_dict_set(rt, scope, p->s, p->slen, dv)) goto out;
    }
    tmpl_sb sb = {0};
    int st = exec_body(rt, body, nbody, scope, &sb);
    if (st == ST_ERR) {
        sb_free(&sb);
        goto out;
    }
    result = sb_take(rt, &sb);
    goto out;
out_extra:
    tv_decref(rt, extra);
out:
    free(used);
    tv_decref(rt, scope);
    return result;
}

tmpl_value *tv_call(tmpl_rt *rt, const tmpl_node *at, tmpl_value *fn, const tmpl_args *a,
                    tmpl_value *env)
{
    if (fn->kind != TV_FUNC)
        return rt_fail(rt, at, KILN_E_INVALID, "cannot call %s: not a function", tv_kind_name(fn));
    if (!rt_enter(rt, at)) return NULL;
    tmpl_value *r = NULL;
    if (fn->u.fn.fk == FN_BUILTIN) {
        r = fn->u.fn.bi->fn(rt, at, fn->u.fn.self, a);
    } else if (fn->u.fn.fk == FN_MACRO) {
        const tmpl_node *m = fn->u.fn.node;
        char display[80];
        snprintf(display, sizeof display, "'%s'", m->s);
        r = call_body(rt, at, m, m->args, m->nargs, m->body, m->nbody, a, env, display);
    } else {
        const tmpl_node *cb = fn->u.fn.node;
        r = call_body(rt, at, cb, cb->args, cb->nargs, cb->body, cb->nbody, a, fn->u.fn.scope,
                      "None");
    }
    rt_leave(rt);
    return r;
}

static tmpl_value *bound_method(tmpl_rt *rt, tmpl_value *obj, const char *name, size_t len)
{
    const tmpl_builtin *bi = tmpl_method(obj, name, len);
    if (!bi) return TV_UNDEFINED;
    return tv_func(rt, FN_BUILTIN, bi, obj, NULL, NULL);
}

static tmpl_value *index_seq(tmpl_rt *rt, tmpl_value *obj, int64_t i)
{
    if (obj->kind == TV_LIST) {
        int64_t n = (int64_t)obj->u.l.n;
        if (i < 0) i += n;
        return i >= 0 && i < n ? tv_ref(obj->u.l.items[i]) : TV_UNDEFINED;
    }
    /* strings index by code point */
    const char *s = obj->u.s.p;
    size_t len = obj->u.s.len;
    if (i < 0) i += (int64_t)utf8_cplen(s, len);
    if (i < 0) return TV_UNDEFINED;
    uint32_t cp;
    for (size_t p = 0; p < len;) {
        size_t w = utf8_next(s, len, p, &cp);
        if (i-- == 0) return tv_str(rt, s + p, w);
        p += w;
    }
    return TV_UNDEFINED;
}

/* obj[key] and obj.key. Missing things are undefined, never errors. */
tmpl_value *tv_getattr(tmpl_rt *rt, const tmpl_node *at, tmpl_value *obj, tmpl_value *key)
{
    (void)at;
    bool skey = key->kind == TV_STR;
    switch (obj->kind) {
    case TV_DICT:
    case TV_NS:
        if (!skey) return TV_UNDEFINED;
        {
            tmpl_value *v = tv_dict_get(obj, key->u.s.p, key->u.s.len);
            if (v) return tv_ref(v);
        }
        return obj->kind == TV_DICT ? bound_method(rt, obj, key->u.s.p, key->u.s.len)
                                    : TV_UNDEFINED;
    case TV_LIST:
    case TV_STR:
        if (key->kind == TV_INT) return index_seq(rt, obj, key->u.i);
        if (key->kind == TV_BOOL) return index_seq(rt, obj, key->u.b);
        if (!skey) return TV_UNDEFINED;
        if (key->u.s.len == 6 && !memcmp(key->u.s.p, "length", 6))
            return tv_int(rt, obj->kind == TV_LIST ? (int64_t)obj->u.l.n
                                                   : (int64_t)utf8_cplen(obj->u.s.p, obj->u.s.len));
        return bound_method(rt, obj, key->u.s.p, key->u.s.len);
    default:
        if (!skey) return TV_UNDEFINED;
        return bound_method(rt, obj, key->u.s.p, key->u.s.len);
    }
}

/* "a.b.0" attribute paths (sort, map, selectattr...). Returns owned. */
tmpl_value *tv_attr_path(tmpl_rt *rt, tmpl_value *obj, const char *path, size_t len)
{
    tmpl_value *cur = tv_ref(obj);
    size_t i = 0;
    while (i <= len) {
        size_t j = i;
        while (j < len && path[j] != '.')
            j++;
        tmpl_value *next;
        if (cur->kind == TV_DICT || cur->kind == TV_NS) {
            next = tv_dict_get(cur, path + i, j - i);
            next = next ? tv_ref(next) : TV_UNDEFINED;
        } else if (cur->kind == TV_LIST) {
            char *end;
            char num[32];
            size_t nl = j - i < 31 ? j - i : 31;
            memcpy(num, path + i, nl);
            num[nl] = '\0';
            long long k = strtoll(num, &end, 10);
            next = nl && *end == '\0' && k >= 0 && (size_t)k < cur->u.l.n
                       ? tv_ref(cur->u.l.items[k])
                       : TV_UNDEFINED;
        } else {
            next = TV_UNDEFINED;
        }
        tv_decref(rt, cur);
        cur = next;
        if (cur->kind == TV_UNDEF) return cur;
        i = j + 1;
    }
    return cur;
}

static tmpl_value *eval_unary(tmpl_rt *rt, const tmpl_node *n, tmpl_value *env)
{
    tmpl_value *v = eval(rt, n->a, env);
    if (!v) return NULL;
    tmpl_value *r;
    if (n->op == '!') {
        r = TV_BOOLV(!tv_truthy(v));
    } else if (v->kind == TV_INT || v->kind == TV_BOOL) {
        int64_t x = v->kind == TV_BOOL ? v->u.b : v->u.i;
        r = n->op == '-' ? (x == INT64_MIN ? tv_float(rt, -(double)x) : tv_int(rt, -x))
                         : tv_int(rt, x);
    } else if (v->kind == TV_FLOAT) {
        r = tv_float(rt, n->op == '-' ? -v->u.f : v->u.f);
    } else {
        r = rt_fail(rt, n, KILN_E_INVALID, "unary '%c' is not defined for %s", n->op,
                    tv_kind_name(v));
    }
    tv_decref(rt, v);
    return r;
}

static tmpl_value *eval_seq(tmpl_rt *rt, const tmpl_node *n, tmpl_value *env)
{
    tmpl_value *l = tv_list(rt, n->nargs);
    if (!l) return NULL;
    for (uint32_t i = 0; i < n->nargs; i++) {
        tmpl_value *v = eval(rt, n->args[i], env);
        if (!v) return tv_decref(rt, l), NULL;
        l->u.l.items[l->u.l.n++] = v;
    }
    return l;
}

static tmpl_value *eval_dict(tmpl_rt *rt, const tmpl_node *n, tmpl_value *env)
{
    tmpl_value *d = tv_dict(rt, TV_DICT);
    if (!d) return NULL;
    for (uint32_t i = 0; i + 1 < n->nargs; i += 2) {
        tmpl_value *k = eval(rt, n->args[i], env);
        if (!k) goto fail;
        if (k->kind != TV_STR) {
            rt_fail(rt, n->args[i], KILN_E_INVALID, "dict keys must be strings, got %s",
                    tv_kind_name(k));
            tv_decref(rt, k);
            goto fail;
        }
        tmpl_value *v = eval(rt, n->args[i + 1], env);
        if (!v) {
            tv_decref(rt, k);
            goto fail;
        }
        if (!tv_dict_setk(rt, d, k, v)) goto fail;
    }
    return d;
fail:
    tv_decref(rt, d);
    return NULL;
}

static tmpl_value *eval_call(tmpl_rt *rt, const tmpl_node *n, tmpl_value *env)
{
    argbuf b;
    if (!eval_args(rt, n->args, n->nargs, env, &b)) {
        args_free(rt, &b);
        return NULL;
    }
    tmpl_value *fn = eval(rt, n->a, env), *r = NULL;
    if (fn) r = tv_call(rt, n, fn, &b.a, env);
    tv_decref(rt, fn);
    args_free(rt, &b);
    return r;
}

static tmpl_value *eval_filter(tmpl_rt *rt, const tmpl_node *n, tmpl_value *operand,
                               tmpl_value *env)
{
    argbuf b;
    if (!eval_args(rt, n->args, n->nargs, env, &b)) {
        args_free(rt, &b);
        return NULL;
    }
    tmpl_value *r = tmpl_filter(rt, n, n->s, operand, &b.a, env);
    args_free(rt, &b);
    return r;
}

static tmpl_value *eval_test(tmpl_rt *rt, const tmpl_node *n, tmpl_value *env)
{
    tmpl_value *v = eval(rt, n->a, env);
    if (!v) return NULL;
    argbuf b;
    bool res = false;
    tmpl_value *r = NULL;
    if (eval_args(rt, n->args, n->nargs, env, &b) && tmpl_test(rt, n, n->s, v, &b.a, &res))
        r = TV_BOOLV((n->flags & 1) ? !res : res);
    args_free(rt, &b);
    tv_decref(rt, v);
    return r;
}

static tmpl_value *eval_inner(tmpl_rt *rt, const tmpl_node *n, tmpl_value *env)
{
    tmpl_value *a, *b, *r;
    switch (n->kind) {
    case N_INT:
        return tv_int(rt, n->i);
    case N_FLOAT:
        return tv_float(rt, n->f);
    case N_STR:
        return tv_str(rt, n->s, n->slen);
    case N_NAME:
        return tv_ref(lookup(rt, env, n->s, n->slen));
    case N_LIST:
    case N_TUPLE:
        return eval_seq(rt, n, env);
    case N_DICT:
        return eval_dict(rt, n, env);
    case N_UNARY:
        return eval_unary(rt, n, env);
    case N_BINARY:
        if (!(a = eval(rt, n->a, env))) return NULL;
        if (n->op == BOP_AND || n->op == BOP_OR) {
            if (tv_truthy(a) == (n->op == BOP_OR)) return a;
            tv_decref(rt, a);
            return eval(rt, n->b, env);
        }
        if (!(b = eval(rt, n->b, env))) return tv_decref(rt, a), NULL;
        r = tv_binop(rt, n, n->op, a, b);
        tv_decref(rt, a);
        tv_decref(rt, b);
        return r;
    case N_TERNARY:
    case N_SELECT:
        if (!(a = eval(rt, n->a, env))) return NULL;
        r = tv_truthy(a) ? eval(rt, n->b, env)
                         : (n->kind == N_TERNARY ? eval(rt, n->c, env) : TV_UNDEFINED);
        tv_decref(rt, a);
        return r;
    case N_ATTR:
        if (!(a = eval(rt, n->a, env))) return NULL;
        b = (n->flags & AF_INDEX) ? tv_int(rt, n->i) : tv_str(rt, n->s, n->slen);
        r = b ? tv_getattr(rt, n, a, b) : NULL;
        tv_decref(rt, a);
        tv_decref(rt, b);
        return r;
    case N_INDEX:
        if (!(a = eval(rt, n->a, env))) return NULL;
        if (!(b = eval(rt, n->b, env))) return tv_decref(rt, a), NULL;
        r = tv_getattr(rt, n, a, b);
        tv_decref(rt, a);
        tv_decref(rt, b);
        return r;
    case N_SLICE: {
        tmpl_value *p[3] = {TV_UNDEFINED, TV_UNDEFINED, TV_UNDEFINED};
        const tmpl_node *pn[3] = {n->b, n->c, n->d};
        if (!(a = eval(rt, n->a, env))) return NULL;
        r = NULL;
        for (int i = 0; i < 3; i++)
            if (pn[i] && !(p[i] = eval(rt, pn[i], env))) goto slice_out;
        r = tv_slice(rt, n, a, p[0], p[1], p[2]);
    slice_out:
        for (int i = 0; i < 3; i++)
            tv_decref(rt, p[i]);
        tv_decref(rt, a);
        return r;
    }
    case N_CALL:
        return eval_call(rt, n, env);
    case N_FILTER:
        if (!(a = eval(rt, n->a, env))) return NULL;
        r = eval_filter(rt, n, a, env);
        tv_decref(rt, a);
        return r;
    case N_TEST:
        return eval_test(rt, n, env);
    default:
        return rt_fail(rt, n, KILN_E_INVALID, "this expression cannot be evaluated here");
    }
}

static tmpl_value *eval(tmpl_rt *rt, const tmpl_node *n, tmpl_value *env)
{
    if (!rt_enter(rt, n)) return NULL;
    uint32_t saved = rt->cur_pos;
    rt->cur_pos = n->pos;
    tmpl_value *r = eval_inner(rt, n, env);
    rt->cur_pos = saved;
    rt_leave(rt);
    return r;
}

/* ------------------------------------------------------------------ statements */

static bool assign(tmpl_rt *rt, const tmpl_node *target, tmpl_value *v, tmpl_value *env)
{
    if (target->kind == N_NAME) return scope_set(rt, env, target->s, target->slen, v);
    if (target->kind == N_TUPLE) {
        if (v->kind != TV_LIST) {
            rt_fail(rt, target, KILN_E_INVALID, "cannot unpack non-iterable %s", tv_kind_name(v));
            return false;
        }
        if (v->u.l.n != target->nargs) {
            rt_fail(rt, target, KILN_E_INVALID, "too %s values to unpack (expected %u, got %zu)",
                    v->u.l.n < target->nargs ? "few" : "many", target->nargs, v->u.l.n);
            return false;
        }
        for (uint32_t i = 0; i < target->nargs; i++) {
            if (target->args[i]->kind != N_NAME) {
                rt_fail(rt, target->args[i], KILN_E_INVALID, "can only unpack into names");
                return false;
            }
            if (!assign(rt, target->args[i], v->u.l.items[i], env)) return false;
        }
        return true;
    }
    /* N_ATTR: ns.attr = v */
    tmpl_value *obj = eval(rt, target->a, env);
    if (!obj) return false;
    bool ok = false;
    if (obj->kind != TV_NS)
        rt_fail(rt, target, KILN_E_INVALID, "cannot assign attribute on non-namespace object (%s)",
                tv_kind_name(obj));
    else if (target->flags & AF_INDEX)
        rt_fail(rt, target, KILN_E_INVALID, "cannot assign to a numeric attribute");
    else
        ok = tv_dict_set(rt, obj, target->s, target->slen, tv_ref(v));
    tv_decref(rt, obj);
    return ok;
}

static tmpl_value *loop_info(tmpl_rt *rt, tmpl_value *items, size_t i)
{
    size_t n = items->u.l.n;
    tmpl_value *d = tv_dict(rt, TV_DICT);
    if (!d) return NULL;
    bool ok =
        tv_dict_set(rt, d, "index", 5, tv_int(rt, (int64_t)i + 1)) &&
        tv_dict_set(rt, d, "index0", 6, tv_int(rt, (int64_t)i)) &&
        tv_dict_set(rt, d, "revindex", 8, tv_int(rt, (int64_t)(n - i))) &&
        tv_dict_set(rt, d, "revindex0", 9, tv_int(rt, (int64_t)(n - i - 1))) &&
        tv_dict_set(rt, d, "first", 5, TV_BOOLV(i == 0)) &&
        tv_dict_set(rt, d, "last", 4, TV_BOOLV(i + 1 == n)) &&
        tv_dict_set(rt, d, "length", 6, tv_int(rt, (int64_t)n)) &&
        tv_dict_set(rt, d, "previtem", 8, i > 0 ? tv_ref(items->u.l.items[i - 1]) : TV_UNDEFINED) &&
        tv_dict_set(rt, d, "nextitem", 8,
                    i + 1 < n ? tv_ref(items->u.l.items[i + 1]) : TV_UNDEFINED);
    if (!ok) {
        tv_decref(rt, d);
        return rt->failed ? NULL : rt_nomem(rt);
    }
    return d;
}

static bool count_iter(tmpl_rt *rt, const tmpl_node *at)
{
    if (++rt->iters > rt->iters_max) {
        rt_fail(rt, at, KILN_E_TOO_LARGE, "template ran more than %llu loop iterations",
                (unsigned long long)rt->iters_max);
        return false;
    }
    return true;
}

static int exec_for(tmpl_rt *rt, const tmpl_node *n, tmpl_value *env, tmpl_sb *out)
{
    tmpl_value *scope = new_scope(rt, env);
    if (!scope) return ST_ERR;
    int st = ST_ERR;
    tmpl_value *items = NULL, *src = eval(rt, n->b, scope), *seq = NULL;
    if (!src) goto out;
    if (!(seq = tmpl_list_of(rt, n->b, src))) goto out;
    if (n->c) { /* {% for x in xs if cond %}: filter first, loop.* counts what is kept */
        if (!(items = tv_list(rt, seq->u.l.n))) goto out;
        for (size_t i = 0; i < seq->u.l.n; i++) {
            if (!count_iter(rt, n)) goto out;
            if (!assign(rt, n->a, seq->u.l.items[i], scope)) goto out;
            tmpl_value *c = eval(rt, n->c, scope);
            if (!c) goto out;
            if (tv_truthy(c)) items->u.l.items[items->u.l.n++] = tv_ref(seq->u.l.items[i]);
            tv_decref(rt, c);
        }
    } else {
        items = tv_ref(seq);
    }
    st = ST_OK;
    for (size_t i = 0; i < items->u.l.n; i++) {
        if (!count_iter(rt, n)) {
            st = ST_ERR;
            break;
        }
        tmpl_value *loop = loop_info(rt, items, i);
        bool ok = loop && scope_set(rt, scope, "loop", 4, loop);
        tv_decref(rt, loop);
        if (!ok || !assign(rt, n->a, items->u.l.items[i], scope)) {
            st = ST_ERR;
            break;
        }
        int s = exec_body(rt, n->body, n->nbody, scope, out);
        if (s == ST_ERR) {
            st = ST_ERR;
            break;
        }
        if (s == ST_BREAK) break;
    }
    if (st == ST_OK && items->u.l.n == 0) st = exec_body(rt, n->els, n->nels, scope, out);
    if (st == ST_BREAK || st == ST_CONTINUE) st = ST_OK; /* loop control in else: ends here */
out:
    tv_decref(rt, items);
    tv_decref(rt, seq);
    tv_decref(rt, src);
    tv_decref(rt, scope);
    return st;
}

static int exec_capture(tmpl_rt *rt, const tmpl_node *n, tmpl_value *env, tmpl_value **out)
{
    tmpl_sb sb = {0};
    int st = exec_body(rt, n->body, n->nbody, env, &sb);
    if (st == ST_ERR) {
        sb_free(&sb);
        return ST_ERR;
    }
    *out = sb_take(rt, &sb);
    return *out ? st : ST_ERR;
}

static int exec_callblock(tmpl_rt *rt, const tmpl_node *n, tmpl_value *env, tmpl_sb *out)
{
    const tmpl_node *call = n->a;
    argbuf b;
    int st = ST_ERR;
    tmpl_value *caller = NULL, *inner = NULL, *fn = NULL, *r = NULL;
    if (!eval_args(rt, call->args, call->nargs, env, &b)) goto out;
    if (!(caller = tv_func(rt, FN_CALLER, NULL, NULL, n, env))) goto out;
    if (!(inner = new_scope(rt, env))) goto out;
    if (!scope_set(rt, inner, "caller", 6, caller)) goto out;
    if (!(fn = eval(rt, call->a, env))) goto out;
    if (!(r = tv_call(rt, call, fn, &b.a, inner))) goto out;
    st = tv_write_str(rt, out, r) ? ST_OK : ST_ERR;
out:
    args_free(rt, &b);
    tv_decref(rt, r);
    tv_decref(rt, fn);
    tv_decref(rt, inner);
    tv_decref(rt, caller);
    return st;
}

static int exec_node(tmpl_rt *rt, const tmpl_node *n, tmpl_value *env, tmpl_sb *out)
{
    tmpl_value *v = NULL, *r = NULL;
    int st = ST_OK;
    switch (n->kind) {
    case N_TEXT:
        return sb_put(rt, out, n->s, n->slen) ? ST_OK : ST_ERR;
    case N_OUTPUT:
        if (!(v = eval(rt, n->a, env))) return ST_ERR;
        st = tv_write_str(rt, out, v) ? ST_OK : ST_ERR;
        tv_decref(rt, v);
        return st;
    case N_IF:
        if (!(v = eval(rt, n->a, env))) return ST_ERR;
        st = tv_truthy(v) ? exec_body(rt, n->body, n->nbody, env, out)
                          : exec_body(rt, n->els, n->nels, env, out);
        tv_decref(rt, v);
        return st;
    case N_FOR:
        return exec_for(rt, n, env, out);
    case N_SET:
        if (!(v = eval(rt, n->b, env))) return ST_ERR;
        st = assign(rt, n->a, v, env) ? ST_OK : ST_ERR;
        tv_decref(rt, v);
        return st;
    case N_SETBLK:
        if (exec_capture(rt, n, env, &v) == ST_ERR) return ST_ERR;
        st = assign(rt, n->a, v, env) ? ST_OK : ST_ERR;
        tv_decref(rt, v);
        return st;
    case N_MACRO:
        if (!(v = tv_func(rt, FN_MACRO, NULL, NULL, n, NULL))) return ST_ERR;
        st = scope_set(rt, env, n->s, n->slen, v) ? ST_OK : ST_ERR;
        tv_decref(rt, v);
        return st;
    case N_CALLBLK:
        return exec_callblock(rt, n, env, out);
    case N_FILTBLK:
        if (exec_capture(rt, n, env, &v) == ST_ERR) return ST_ERR;
        r = eval_filter(rt, n->a, v, env);
        st = r && tv_write_str(rt, out, r) ? ST_OK : ST_ERR;
        tv_decref(rt, r);
        tv_decref(rt, v);
        return st;
    case N_BREAK:
        return ST_BREAK;
    case N_CONTINUE:
        return ST_CONTINUE;
    default:
        rt_fail(rt, n, KILN_E_INTERNAL, "statement kind %d cannot be executed", n->kind);
        return ST_ERR;
    }
}

static int exec_body(tmpl_rt *rt, tmpl_node *const *body, uint32_t nb, tmpl_value *env,
                     tmpl_sb *out)
{
    for (uint32_t i = 0; i < nb; i++) {
        const tmpl_node *n = body[i];
        if (!rt_enter(rt, n)) return ST_ERR;
        rt->cur_pos = n->pos;
        int st = exec_node(rt, n, env, out);
        rt_leave(rt);
        if (st != ST_OK) return st;
    }
    return ST_OK;
}

/* ------------------------------------------------------------------ API */

tmpl_options tmpl_options_default(void)
{
    return (tmpl_options){.trim_blocks = true, .lstrip_blocks = true};
}

void tmpl_free(tmpl_template *t)
{
    if (!t) return;
    tmpl_chunks_free(t->chunks);
    free(t->src);
    free(t);
}

kiln_code tmpl_compile(const char *src, size_t len, const tmpl_options *opt, tmpl_template **out,
                       kiln_err *err)
{
    *out = NULL;
    if (!src && len) return kiln_fail(err, KILN_E_INVALID, "template: no source");
    tmpl_template *t = calloc(1, sizeof *t);
    if (!t) return kiln_fail(err, KILN_E_NOMEM, "template: out of memory");
    t->opt = opt ? *opt : tmpl_options_default();
    if (!t->opt.max_depth) t->opt.max_depth = DEFAULT_DEPTH;
    if (!t->opt.max_loop_iter) t->opt.max_loop_iter = DEFAULT_ITERS;
    if (!t->opt.max_output) t->opt.max_output = DEFAULT_OUTPUT;
    if (!t->opt.max_memory) t->opt.max_memory = DEFAULT_MEMORY;
    t->src = malloc(len + 1);
    if (!t->src) {
        tmpl_free(t);
        return kiln_fail(err, KILN_E_NOMEM, "template: out of memory");
    }
    if (len) memcpy(t->src, src, len);
    t->src[len] = '\0';
    t->src_len = len;
    tmpl_toks toks;
    kiln_code rc = tmpl_lex(t->src, len, &t->opt, &toks, err);
    if (rc == KILN_OK) {
        rc = tmpl_parse(t, &toks, err);
        tmpl_toks_free(&toks);
    }
    if (rc != KILN_OK) {
        tmpl_free(t);
        return rc;
    }
    *out = t;
    return KILN_OK;
}

kiln_code tmpl_render(const tmpl_template *t, const tmpl_value *context, char **out,
                      size_t *out_len, kiln_err *err)
{
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!t) return kiln_fail(err, KILN_E_INVALID, "template: nothing compiled to render");
    if (context && context->kind != TV_DICT)
        return kiln_fail(err, KILN_E_INVALID, "template context must be a dict, got %s",
                         tv_kind_name(context));
    kiln_err local;
    if (!err) err = &local;
    tmpl_rt rt;
    rt_init(&rt, t, err);
    rt.context = (tmpl_value *)context;
    tmpl_sb sb = {0};
    int st = ST_ERR;
    rt.globals = tmpl_globals(&rt);
    tmpl_value *root = rt.globals ? new_scope(&rt, NULL) : NULL;
    if (root) st = exec_body(&rt, t->body, t->nbody, root, &sb);
    if (st == ST_BREAK || st == ST_CONTINUE) st = ST_OK; /* loop control outside a loop */
    tv_decref(&rt, root);
    tv_decref(&rt, rt.globals);
    rt_sweep(&rt);
    /* the text goes to the caller: what happens to it next is the caller's to count */
    rt_release(&rt);
    sb.rt = NULL;
    if (st == ST_ERR || rt.failed) {
        sb_free(&sb);
        if (!rt.failed) return kiln_fail(err, KILN_E_INTERNAL, "template: render failed");
        return err->code;
    }
    if (!sb.p && !sb_put(NULL, &sb, "", 0))
        return kiln_fail(err, KILN_E_NOMEM, "template: out of memory");
    if (!sb.p) {
        sb.p = calloc(1, 1);
        if (!sb.p) return kiln_fail(err, KILN_E_NOMEM, "template: out of memory");
    }
    *out = sb.p;
    if (out_len) *out_len = sb.len;
    return KILN_OK;
}
