/*
 * tmpl_ops.c — operators on values: == and `in` equality, arithmetic (Python's
 * floor division and modulo), comparisons, string concatenation, slicing and the
 * stable sort behind the sort/dictsort filters.
 *
 * Where @huggingface/jinja and Python Jinja2 differ, the former wins when its tests
 * pin it: `+` with a string operand concatenates ("1" + 2 -> "12"); `x in list`
 * compares without bool/number coercion (1 in [true] is false); sort is
 * case-insensitive by default and refuses mixed types. Elsewhere Python wins:
 * -7 % 3 == 2, division by zero is an error, strings compare with < and >.
 * Integer overflow turns the result into a float.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_int.h"

static bool is_num(const tmpl_value *v)
{
    return v->kind == TV_INT || v->kind == TV_FLOAT || v->kind == TV_BOOL;
}

static double num_f(const tmpl_value *v)
{
    return v->kind == TV_FLOAT ? v->u.f : v->kind == TV_INT ? (double)v->u.i : (double)v->u.b;
}

static int64_t num_i(const tmpl_value *v)
{
    return v->kind == TV_INT ? v->u.i : v->u.b;
}

static bool eq_impl(const tmpl_value *a, const tmpl_value *b, bool strict, int depth)
{
    if (a == b) return true;
    if (depth > 200) return false;
    if (is_num(a) && is_num(b)) {
        if (strict && ((a->kind == TV_BOOL) != (b->kind == TV_BOOL))) return false;
        if (a->kind != TV_FLOAT && b->kind != TV_FLOAT) return num_i(a) == num_i(b);
        return num_f(a) == num_f(b);
    }
    /* undefined == none, as @huggingface/jinja (JavaScript's undefined == null) has it */
    if (!strict && (a->kind == TV_UNDEF || a->kind == TV_NONE) &&
        (b->kind == TV_UNDEF || b->kind == TV_NONE))
        return true;
    if (a->kind != b->kind) return false;
    switch (a->kind) {
    case TV_UNDEF:
    case TV_NONE:
        return true;
    case TV_STR:
        return a->u.s.len == b->u.s.len && !memcmp(a->u.s.p, b->u.s.p, a->u.s.len);
    case TV_LIST:
        if (a->u.l.n != b->u.l.n) return false;
        for (size_t i = 0; i < a->u.l.n; i++)
            if (!eq_impl(a->u.l.items[i], b->u.l.items[i], strict, depth + 1)) return false;
        return true;
    case TV_DICT:
        if (a->u.d.n != b->u.d.n) return false;
        for (size_t i = 0; i < a->u.d.n; i++) {
            const tmpl_value *k = a->u.d.keys[i];
            const tmpl_value *o = tv_dict_get(b, k->u.s.p, k->u.s.len);
            if (!o || !eq_impl(a->u.d.vals[i], o, strict, depth + 1)) return false;
        }
        return true;
    default:
        return false; /* namespaces and functions: identity only */
    }
}

bool tv_eq(const tmpl_value *a, const tmpl_value *b)
{
    return eq_impl(a, b, false, 0);
}

bool tv_strict_eq(const tmpl_value *a, const tmpl_value *b)
{
    return eq_impl(a, b, true, 0);
}

static int cmp_bytes(const char *a, size_t an, const char *b, size_t bn, bool fold)
{
    size_t n = an < bn ? an : bn;
    for (size_t i = 0; i < n; i++) {
        unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
        if (fold) {
            if (x >= 'A' && x <= 'Z') x = (unsigned char)(x + 32);
            if (y >= 'A' && y <= 'Z') y = (unsigned char)(y + 32);
        }
        if (x != y) return x < y ? -1 : 1;
    }
    return an < bn ? -1 : an > bn;
}

int tv_compare(tmpl_rt *rt, const tmpl_node *at, const tmpl_value *a, const tmpl_value *b,
               bool case_sensitive, bool *ok)
{
    if ((a->kind == TV_NONE && b->kind == TV_NONE) || (a->kind == TV_UNDEF && b->kind == TV_UNDEF))
        return 0;
    if (is_num(a) && is_num(b)) {
        double x = num_f(a), y = num_f(b);
        if (a->kind != TV_FLOAT && b->kind != TV_FLOAT) {
            int64_t p = num_i(a), q = num_i(b);
            return p < q ? -1 : p > q;
        }
        return x < y ? -1 : x > y;
    }
    if (a->kind == TV_STR && b->kind == TV_STR)
        return cmp_bytes(a->u.s.p, a->u.s.len, b->u.s.p, b->u.s.len, !case_sensitive);
    if (*ok)
        rt_fail(rt, at, KILN_E_INVALID, "cannot compare %s with %s", tv_kind_name(a),
                tv_kind_name(b));
    *ok = false;
    return 0;
}

/* ------------------------------------------------------------------ arithmetic */

static tmpl_value *arith(tmpl_rt *rt, const tmpl_node *at, int op, tmpl_value *l, tmpl_value *r)
{
    bool ints = l->kind != TV_FLOAT && r->kind != TV_FLOAT;
    double a = num_f(l), b = num_f(r);
    int64_t x = ints ? num_i(l) : 0, y = ints ? num_i(r) : 0, z;
    switch (op) {
    case BOP_ADD:
        if (!ints) return tv_float(rt, a + b);
        if (__builtin_add_overflow(x, y, &z)) return tv_float(rt, a + b);
        return tv_int(rt, z);
    case BOP_SUB:
        if (!ints) return tv_float(rt, a - b);
        if (__builtin_sub_overflow(x, y, &z)) return tv_float(rt, a - b);
        return tv_int(rt, z);
    case BOP_MUL:
        if (!ints) return tv_float(rt, a * b);
        if (__builtin_mul_overflow(x, y, &z)) return tv_float(rt, a * b);
        return tv_int(rt, z);
    case BOP_DIV:
        if (b == 0) return rt_fail(rt, at, KILN_E_INVALID, "division by zero");
        return tv_float(rt, a / b);
    case BOP_FLOORDIV:
        if (b == 0) return rt_fail(rt, at, KILN_E_INVALID, "integer division or modulo by zero");
        if (!ints) return tv_float(rt, floor(a / b));
        if (x == INT64_MIN && y == -1) return tv_float(rt, -(double)x);
        z = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) z--;
        return tv_int(rt, z);
    case BOP_MOD:
        if (b == 0) return rt_fail(rt, at, KILN_E_INVALID, "integer division or modulo by zero");
        if (!ints) {
            double m = fmod(a, b);
            if (m != 0 && ((m < 0) != (b < 0))) m += b;
            return tv_float(rt, m);
        }
        if (y == -1) return tv_int(rt, 0);
        z = x % y;
        if (z != 0 && ((z < 0) != (y < 0))) z += y;
        return tv_int(rt, z);
    case BOP_POW:
        if (a == 0 && b < 0)
            return rt_fail(rt, at, KILN_E_INVALID, "0.0 cannot be raised to a negative power");
        if (ints && y >= 0) {
            int64_t acc = 1, base = x;
            bool over = false;
            for (int64_t e = y; e > 0 && !over; e >>= 1) {
                if (e & 1) over |= __builtin_mul_overflow(acc, base, &acc);
                if (e > 1) over |= __builtin_mul_overflow(base, base, &base);
            }
            if (!over) return tv_int(rt, acc);
        }
        {
            double p = pow(a, b);
            if (!isfinite(p))
                return rt_fail(rt, at, KILN_E_INVALID,
                               "exponentiation result is not a finite real number");
            return tv_float(rt, p);
        }
    }
    return rt_fail(rt, at, KILN_E_INTERNAL, "bad arithmetic operator");
}

static tmpl_value *concat(tmpl_rt *rt, tmpl_value *l, tmpl_value *r)
{
    tmpl_sb b = {0};
    if (!tv_write_str(rt, &b, l) || !tv_write_str(rt, &b, r)) {
        sb_free(&b);
        return NULL;
    }
    return sb_take(rt, &b);
}

static tmpl_value *repeat(tmpl_rt *rt, const tmpl_node *at, tmpl_value *seq, int64_t n)
{
    if (n < 0) n = 0;
    if (seq->kind == TV_STR) {
        if (seq->u.s.len && (uint64_t)n > rt->out_max / seq->u.s.len)
            return rt_fail(rt, at, KILN_E_TOO_LARGE,
                           "string repetition too large: %zu bytes x %lld exceeds the output limit "
                           "of %zu bytes",
                           seq->u.s.len, (long long)n, rt->out_max);
        tmpl_sb b = {0};
        for (int64_t i = 0; i < n; i++)
            if (!sb_put(rt, &b, seq->u.s.p, seq->u.s.len)) return sb_free(&b), NULL;
        return sb_take(rt, &b);
    }
    if (seq->u.l.n && (uint64_t)n > (rt->mem_max / sizeof(void *)) / seq->u.l.n)
        return rt_fail(rt, at, KILN_E_TOO_LARGE, "list repetition too large");
    tmpl_value *l = tv_list(rt, (size_t)n * seq->u.l.n);
    if (!l) return NULL;
    for (int64_t i = 0; i < n; i++)
        for (size_t k = 0; k < seq->u.l.n; k++)
            l->u.l.items[l->u.l.n++] = tv_ref(seq->u.l.items[k]);
    return l;
}

tmpl_value *tv_contains(tmpl_rt *rt, const tmpl_node *at, tmpl_value *needle, tmpl_value *hay,
                        bool negate)
{
    bool found = false;
    switch (hay->kind) {
    case TV_UNDEF:
        break;
    case TV_LIST:
        for (size_t i = 0; i < hay->u.l.n && !found; i++)
            found = tv_strict_eq(hay->u.l.items[i], needle);
        break;
    case TV_STR:
        if (needle->kind != TV_STR)
            return rt_fail(rt, at, KILN_E_INVALID, "'in <string>' requires a string, not %s",
                           tv_kind_name(needle));
        found = needle->u.s.len == 0 ||
                (needle->u.s.len <= hay->u.s.len &&
                 str_find(hay->u.s.p, hay->u.s.len, needle->u.s.p, needle->u.s.len, 0) != SIZE_MAX);
        break;
    case TV_DICT:
    case TV_NS:
        found = needle->kind == TV_STR && tv_dict_get(hay, needle->u.s.p, needle->u.s.len);
        break;
    default:
        return rt_fail(rt, at, KILN_E_INVALID, "argument of type %s is not iterable",
                       tv_kind_name(hay));
    }
    return TV_BOOLV(found != negate);
}

tmpl_value *tv_binop(tmpl_rt *rt, const tmpl_node *at, int op, tmpl_value *l, tmpl_value *r)
{
    switch (op) {
    case BOP_EQ:
        return TV_BOOLV(tv_eq(l, r));
    case BOP_NE:
        return TV_BOOLV(!tv_eq(l, r));
    case BOP_IN:
    case BOP_NOTIN:
        return tv_contains(rt, at, l, r, op == BOP_NOTIN);
    case BOP_CONCAT:
        return concat(rt, l, r);
    default:
        break;
    }
    static const char *const names[] = {
        [BOP_LT] = "<",        [BOP_GT] = ">",  [BOP_LE] = "<=", [BOP_GE] = ">=",
        [BOP_ADD] = "+",       [BOP_SUB] = "-", [BOP_MUL] = "*", [BOP_DIV] = "/",
        [BOP_FLOORDIV] = "//", [BOP_MOD] = "%", [BOP_POW] = "**"};
    const char *name = op < (int)(sizeof names / sizeof names[0]) && names[op] ? names[op] : "?";
    if (l->kind == TV_UNDEF || r->kind == TV_UNDEF)
        return rt_fail(rt, at, KILN_E_INVALID, "cannot apply '%s' to an undefined value", name);
    if (op >= BOP_LT && op <= BOP_GE) {
        bool ok = true;
        if (!((is_num(l) && is_num(r)) || (l->kind == TV_STR && r->kind == TV_STR)))
            return rt_fail(rt, at, KILN_E_INVALID, "'%s' is not supported between %s and %s", name,
                           tv_kind_name(l), tv_kind_name(r));
        int c = tv_compare(rt, at, l, r, true, &ok);
        if (!ok) return NULL;
        if (is_num(l) && (isnan(num_f(l)) || isnan(num_f(r)))) return TV_BOOLV(false);
        return TV_BOOLV(op == BOP_LT   ? c < 0
                        : op == BOP_GT ? c > 0
                        : op == BOP_LE ? c <= 0
                                       : c >= 0);
    }
    if (is_num(l) && is_num(r)) return arith(rt, at, op, l, r);
    if (op == BOP_ADD) {
        if (l->kind == TV_LIST && r->kind == TV_LIST) {
            tmpl_value *x = tv_list(rt, l->u.l.n + r->u.l.n);
            if (!x) return NULL;
            for (size_t i = 0; i < l->u.l.n; i++)
                x->u.l.items[x->u.l.n++] = tv_ref(l->u.l.items[i]);
            for (size_t i = 0; i < r->u.l.n; i++)
                x->u.l.items[x->u.l.n++] = tv_ref(r->u.l.items[i]);
            return x;
        }
        if ((l->kind == TV_STR || r->kind == TV_STR) && l->kind != TV_NONE && r->kind != TV_NONE)
            return concat(rt, l, r);
    }
    if (op == BOP_MUL) {
        if ((l->kind == TV_STR || l->kind == TV_LIST) && (r->kind == TV_INT || r->kind == TV_BOOL))
            return repeat(rt, at, l, num_i(r));
        if ((r->kind == TV_STR || r->kind == TV_LIST) && (l->kind == TV_INT || l->kind == TV_BOOL))
            return repeat(rt, at, r, num_i(l));
    }
    return rt_fail(rt, at, KILN_E_INVALID, "unsupported operand types for %s: %s and %s", name,
                   tv_kind_name(l), tv_kind_name(r));
}

/* ------------------------------------------------------------------ slicing */

static bool slice_arg(tmpl_rt *rt, const tmpl_node *at, tmpl_value *v, bool *given, int64_t *out)
{
    *given = false;
    if (v->kind == TV_UNDEF || v->kind == TV_NONE) return true;
    if (v->kind != TV_INT && v->kind != TV_BOOL) {
        rt_fail(rt, at, KILN_E_INVALID, "slice indices must be integers, not %s", tv_kind_name(v));
        return false;
    }
    *given = true;
    *out = num_i(v);
    return true;
}

tmpl_value *tv_slice(tmpl_rt *rt, const tmpl_node *at, tmpl_value *obj, tmpl_value *start,
                     tmpl_value *stop, tmpl_value *step)
{
    if (obj->kind != TV_LIST && obj->kind != TV_STR)
        return rt_fail(rt, at, KILN_E_INVALID, "cannot slice %s", tv_kind_name(obj));
    bool hs, he, hp;
    int64_t s = 0, e = 0, p = 1;
    if (!slice_arg(rt, at, start, &hs, &s) || !slice_arg(rt, at, stop, &he, &e) ||
        !slice_arg(rt, at, step, &hp, &p))
        return NULL;
    if (p == 0) return rt_fail(rt, at, KILN_E_INVALID, "slice step cannot be zero");
    size_t *offs = NULL; /* code point offsets of a string, plus its end */
    int64_t len;
    if (obj->kind == TV_LIST) {
        len = (int64_t)obj->u.l.n;
    } else {
        size_t n = utf8_cplen(obj->u.s.p, obj->u.s.len);
        offs = malloc((n + 1) * sizeof *offs);
        if (!offs) return rt_nomem(rt);
        size_t k = 0;
        uint32_t cp;
        for (size_t i = 0; i < obj->u.s.len; i += utf8_next(obj->u.s.p, obj->u.s.len, i, &cp))
            offs[k++] = i;
        offs[k] = obj->u.s.len;
        len = (int64_t)n;
    }
    if (p > 0) {
        if (!hs)
            s = 0;
        else if (s < 0 && (s += len) < 0)
            s = 0;
        else if (s > len)
            s = len;
        if (!he)
            e = len;
        else if (e < 0 && (e += len) < 0)
            e = 0;
        else if (e > len)
            e = len;
    } else {
        if (!hs)
            s = len - 1;
        else if (s < 0 && (s += len) < 0)
            s = -1;
        else if (s >= len)
            s = len - 1;
        if (!he)
            e = -1;
        else if (e < 0 && (e += len) < 0)
            e = -1;
        else if (e >= len)
            e = len - 1;
    }
    tmpl_value *r;
    if (obj->kind == TV_LIST) {
        r = tv_list(rt, (size_t)(p > 0 ? (e > s ? e - s : 0) : (s > e ? s - e : 0)));
        if (r)
            for (int64_t i = s; p > 0 ? i < e : i > e; i += p)
                r->u.l.items[r->u.l.n++] = tv_ref(obj->u.l.items[i]);
    } else {
        tmpl_sb b = {0};
        bool ok = true;
        for (int64_t i = s; ok && (p > 0 ? i < e : i > e); i += p)
            ok = sb_put(rt, &b, obj->u.s.p + offs[i], offs[i + 1] - offs[i]);
        r = ok ? sb_take(rt, &b) : (sb_free(&b), NULL);
    }
    free(offs);
    return r;
}

/* ------------------------------------------------------------------ sorting */

typedef struct {
    tmpl_rt *rt;
    const tmpl_node *at;
    tmpl_value **keys;
    bool reverse, cs, ok;
} sortctx;

static int sort_cmp(sortctx *c, size_t a, size_t b)
{
    int r = tv_compare(c->rt, c->at, c->keys[a], c->keys[b], c->cs, &c->ok);
    return c->reverse ? -r : r;
}

static void merge_sort(sortctx *c, size_t *idx, size_t *tmp, size_t n)
{
    if (n < 2 || !c->ok) return;
    size_t h = n / 2;
    merge_sort(c, idx, tmp, h);
    merge_sort(c, idx + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = sort_cmp(c, idx[j], idx[i]) < 0 ? idx[j++] : idx[i++];
    while (i < h)
        tmp[k++] = idx[i++];
    while (j < n)
        tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

bool tv_sort(tmpl_rt *rt, const tmpl_node *at, tmpl_value **items, size_t n, bool reverse,
             bool case_sensitive, const char *attr, size_t attr_len)
{
    sortctx c = {.rt = rt, .at = at, .reverse = reverse, .cs = case_sensitive, .ok = true};
    size_t *idx = malloc((n + 1) * sizeof *idx), *tmp = malloc((n + 1) * sizeof *tmp);
    tmpl_value **sorted = malloc((n + 1) * sizeof *sorted);
    c.keys = calloc(n + 1, sizeof *c.keys);
    bool ok = false;
    if (!idx || !tmp || !sorted || !c.keys) {
        rt_nomem(rt);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        idx[i] = i;
        c.keys[i] = attr ? tv_attr_path(rt, items[i], attr, attr_len) : tv_ref(items[i]);
    }
    merge_sort(&c, idx, tmp, n);
    if (!c.ok) goto out;
    for (size_t i = 0; i < n; i++)
        sorted[i] = items[idx[i]];
    if (n) memcpy(items, sorted, n * sizeof *items); /* items is NULL for an empty list */
    ok = true;
out:
    if (c.keys)
        for (size_t i = 0; i < n; i++)
            tv_decref(rt, c.keys[i]);
    free(c.keys);
    free(idx);
    free(tmp);
    free(sorted);
    return ok;
}
