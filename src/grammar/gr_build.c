/*
 * gr_build.c — the grammar builder: expression nodes, rules, the first error.
 *
 * Every front end (GBNF, JSON Schema, regular expressions, the server's
 * tool-call syntax) writes into a builder; gr_compile.c turns it into DFAs.
 * Invariants:
 *   (1) a node only refers to nodes created before it (no cycles but through rules)
 *   (2) class ranges are sorted, disjoint, non-adjacent, and contain no surrogate
 *   (3) once failed, every constructor returns -1 and the first error is kept
 * Errors: KILN_E_NOMEM; KILN_E_INVALID for misuse of an expression or rule index.
 */
#include "grammar/gr_int.h"
#include "util/plat.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

gr_options gr_options_default(void)
{
    gr_options o = {
        .max_nfa_states = 1 << 20,
        .max_dfa_states = 1 << 18,
        .max_ms = 500,
        .json_ws_max = 20,
        .json_strict = true,
    };
    return o;
}

kiln_code gr_b_fail(gr_builder *b, kiln_code code, const char *fmt, ...)
{
    if (b->failed) return b->err.code;
    va_list ap;
    va_start(ap, fmt);
    kiln_failv(&b->err, code, fmt, ap);
    va_end(ap);
    b->failed = true;
    return code;
}

kiln_code gr_builder_error(const gr_builder *b, kiln_err *err)
{
    if (!b->failed) return KILN_OK;
    if (err) *err = b->err;
    return b->err.code;
}

kiln_code gr_b_check_time(gr_builder *b)
{
    if (b->failed) return b->err.code;
    if (b->o.max_ms > 0 && (plat_thread_cpu() - b->t_start) * 1e3 > b->o.max_ms)
        return gr_b_fail(b, KILN_E_INVALID, "grammar compile exceeded %d ms of CPU time",
                         (int)b->o.max_ms);
    return KILN_OK;
}

/* Grows *p (elements of size sz) to hold need; -1 on OOM or absurd size. */
static int grow(void **p, int32_t *cap, int64_t need, size_t sz)
{
    if (need <= *cap) return 0;
    if (need > INT32_MAX / 2) return -1;
    int64_t nc = *cap ? *cap : 64;
    while (nc < need)
        nc *= 2;
    void *q = realloc(*p, (size_t)nc * sz);
    if (!q) return -1;
    *p = q;
    *cap = (int32_t)nc;
    return 0;
}

kiln_code gr_builder_create(const gr_options *o, gr_builder **out, kiln_err *err)
{
    *out = NULL;
    gr_builder *b = calloc(1, sizeof *b);
    if (!b) return kiln_fail(err, KILN_E_NOMEM, "grammar: out of memory");
    b->o = o ? *o : gr_options_default();
    if (b->o.json_ws_max < 0) b->o.json_ws_max = 0;
    b->ws = -1;
    b->t_start = plat_thread_cpu();
    *out = b;
    return KILN_OK;
}

void gr_builder_destroy(gr_builder *b)
{
    if (!b) return;
    for (int32_t i = 0; i < b->n_rules; i++)
        free(b->rules[i].name);
    free(b->rules);
    free(b->nodes);
    free(b->kids);
    free(b->bytes);
    free(b->ranges);
    free(b);
}

const gr_node *gr_b_node(const gr_builder *b, gr_expr e)
{
    return &b->nodes[e];
}

static gr_expr node_new(gr_builder *b, gr_node n)
{
    if (b->failed) return -1;
    if (grow((void **)&b->nodes, &b->cap_nodes, (int64_t)b->n_nodes + 1, sizeof *b->nodes)) {
        gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
        return -1;
    }
    if (b->n_nodes >= b->o.max_nfa_states) {
        gr_b_fail(b, KILN_E_INVALID, "grammar compile exceeded %d states (expression nodes)",
                  (int)b->o.max_nfa_states);
        return -1;
    }
    b->nodes[b->n_nodes] = n;
    return b->n_nodes++;
}

static bool valid(const gr_builder *b, gr_expr e)
{
    return e >= 0 && e < b->n_nodes;
}

gr_expr gr_lit(gr_builder *b, const char *s, size_t n)
{
    if (b->failed) return -1;
    if (n == 0) return node_new(b, (gr_node){.kind = GR_E_EMPTY});
    if (n > (size_t)INT32_MAX / 4 ||
        grow((void **)&b->bytes, &b->cap_bytes, (int64_t)b->n_bytes + (int64_t)n, 1)) {
        gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
        return -1;
    }
    if (n) memcpy(b->bytes + b->n_bytes, s, n); /* s may be NULL when n is 0 */
    gr_expr e = node_new(b, (gr_node){.kind = GR_E_BYTES, .a = b->n_bytes, .b = (int32_t)n});
    if (e >= 0) b->n_bytes += (int32_t)n;
    return e;
}

gr_expr gr_special(gr_builder *b, int32_t id)
{
    if (b->failed) return -1;
    if (id < 0 || id > GR_SPECIAL_MAX_ID) {
        gr_b_fail(b, KILN_E_INVALID, "grammar: special token id %d out of range", (int)id);
        return -1;
    }
    uint8_t m[GR_SPECIAL_LEN];
    gr_special_marker(id, m);
    return gr_lit(b, (const char *)m, sizeof m);
}

gr_expr gr_str(gr_builder *b, const char *s)
{
    return gr_lit(b, s, strlen(s));
}

static int cmp_pair(const void *x, const void *y)
{
    const uint32_t *a = x, *c = y;
    return a[0] < c[0] ? -1 : a[0] > c[0];
}

gr_expr gr_class(gr_builder *b, const uint32_t *pairs, size_t n_pairs, bool negate)
{
    if (b->failed) return -1;
    if (n_pairs > (1u << 20)) {
        gr_b_fail(b, KILN_E_INVALID, "grammar: character class too large");
        return -1;
    }
    /* normalize: clamp, sort, merge, then complement and cut out surrogates */
    size_t cap = n_pairs * 2 + 4;
    uint32_t *v = malloc(cap * 2 * sizeof *v), *w = malloc(cap * 2 * sizeof *w);
    if (!v || !w) {
        free(v);
        free(w);
        gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
        return -1;
    }
    size_t n = 0;
    for (size_t i = 0; i < n_pairs; i++) {
        uint32_t lo = pairs[2 * i], hi = pairs[2 * i + 1];
        if (hi > GR_MAX_CP) hi = GR_MAX_CP;
        if (lo > hi) continue;
        v[2 * n] = lo;
        v[2 * n + 1] = hi;
        n++;
    }
    if (n > 1) /* qsort(NULL, 0) is undefined */
        qsort(v, n, 2 * sizeof *v, cmp_pair);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && v[2 * i] <= w[2 * m - 1] + 1) {
            if (v[2 * i + 1] > w[2 * m - 1]) w[2 * m - 1] = v[2 * i + 1];
        } else {
            w[2 * m] = v[2 * i];
            w[2 * m + 1] = v[2 * i + 1];
            m++;
        }
    }
    if (negate) { /* complement of w into v */
        size_t k = 0;
        uint32_t next = 0;
        for (size_t i = 0; i < m; i++) {
            if (w[2 * i] > next) {
                v[2 * k] = next;
                v[2 * k + 1] = w[2 * i] - 1;
                k++;
            }
            next = w[2 * i + 1] + 1;
        }
        if (next <= GR_MAX_CP) {
            v[2 * k] = next;
            v[2 * k + 1] = GR_MAX_CP;
            k++;
        }
        memcpy(w, v, k * 2 * sizeof *v);
        m = k;
    }
    /* (2) no surrogates: split ranges around D800..DFFF */
    size_t k = 0;
    for (size_t i = 0; i < m; i++) {
        uint32_t lo = w[2 * i], hi = w[2 * i + 1];
        if (lo < 0xD800 && hi >= 0xD800) {
            v[2 * k] = lo;
            v[2 * k + 1] = 0xD7FF;
            k++;
            lo = 0xE000;
        } else if (lo >= 0xD800 && lo <= 0xDFFF) {
            lo = 0xE000;
        }
        if (lo <= hi) {
            v[2 * k] = lo;
            v[2 * k + 1] = hi;
            k++;
        }
    }
    free(w);
    if (k == 0) {
        free(v);
        return node_new(b, (gr_node){.kind = GR_E_NONE});
    }
    if (grow((void **)&b->ranges, &b->cap_ranges, (int64_t)b->n_ranges + 2 * (int64_t)k,
             sizeof *b->ranges)) {
        free(v);
        gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
        return -1;
    }
    memcpy(b->ranges + b->n_ranges, v, k * 2 * sizeof *v);
    free(v);
    gr_expr e = node_new(b, (gr_node){.kind = GR_E_CLASS, .a = b->n_ranges, .b = (int32_t)k});
    if (e >= 0) b->n_ranges += 2 * (int32_t)k;
    return e;
}

static gr_expr list(gr_builder *b, gr_ekind kind, const gr_expr *xs, size_t n)
{
    if (b->failed) return -1;
    for (size_t i = 0; i < n; i++)
        if (!valid(b, xs[i])) {
            gr_b_fail(b, KILN_E_INTERNAL, "grammar: bad expression index");
            return -1;
        }
    if (n == 0) return node_new(b, (gr_node){.kind = kind == GR_E_SEQ ? GR_E_EMPTY : GR_E_NONE});
    if (n == 1) return xs[0];
    if (n > (size_t)INT32_MAX / 4 ||
        grow((void **)&b->kids, &b->cap_kids, (int64_t)b->n_kids + (int64_t)n, sizeof *b->kids)) {
        gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
        return -1;
    }
    memcpy(b->kids + b->n_kids, xs, n * sizeof *xs);
    gr_expr e = node_new(b, (gr_node){.kind = (uint8_t)kind, .a = b->n_kids, .b = (int32_t)n});
    if (e >= 0) b->n_kids += (int32_t)n;
    return e;
}

gr_expr gr_seq(gr_builder *b, const gr_expr *xs, size_t n)
{
    return list(b, GR_E_SEQ, xs, n);
}

gr_expr gr_alt(gr_builder *b, const gr_expr *xs, size_t n)
{
    return list(b, GR_E_ALT, xs, n);
}

gr_expr gr_seq2(gr_builder *b, gr_expr x, gr_expr y)
{
    gr_expr v[2] = {x, y};
    return gr_seq(b, v, 2);
}

gr_expr gr_alt2(gr_builder *b, gr_expr x, gr_expr y)
{
    gr_expr v[2] = {x, y};
    return gr_alt(b, v, 2);
}

gr_expr gr_rep(gr_builder *b, gr_expr x, int32_t min, int32_t max)
{
    if (b->failed) return -1;
    if (!valid(b, x)) {
        gr_b_fail(b, KILN_E_INTERNAL, "grammar: bad expression index");
        return -1;
    }
    if (min < 0 || (max >= 0 && max < min)) {
        gr_b_fail(b, KILN_E_INVALID, "grammar: repetition {%d,%d} is empty", (int)min, (int)max);
        return -1;
    }
    if (min == 1 && max == 1) return x;
    if (max == 0) return node_new(b, (gr_node){.kind = GR_E_EMPTY});
    return node_new(b, (gr_node){.kind = GR_E_REP, .a = x, .min = min, .max = max});
}

gr_rule gr_rule_new(gr_builder *b, const char *name)
{
    if (b->failed) return -1;
    if (grow((void **)&b->rules, &b->cap_rules, (int64_t)b->n_rules + 1, sizeof *b->rules)) {
        gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
        return -1;
    }
    char *nm = strdup(name ? name : "");
    if (!nm) {
        gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
        return -1;
    }
    b->rules[b->n_rules] = (gr_brule){.name = nm, .body = -1};
    return b->n_rules++;
}

gr_expr gr_ref(gr_builder *b, gr_rule r)
{
    if (b->failed) return -1;
    if (r < 0 || r >= b->n_rules) {
        gr_b_fail(b, KILN_E_INTERNAL, "grammar: bad rule index");
        return -1;
    }
    return node_new(b, (gr_node){.kind = GR_E_REF, .a = r});
}

kiln_code gr_rule_define(gr_builder *b, gr_rule r, gr_expr body, kiln_err *err)
{
    if (!b->failed && (r < 0 || r >= b->n_rules || !valid(b, body)))
        gr_b_fail(b, KILN_E_INTERNAL, "grammar: bad rule or expression index");
    if (!b->failed && b->rules[r].body >= 0)
        gr_b_fail(b, KILN_E_INVALID, "grammar: rule '%s' is defined twice", b->rules[r].name);
    if (b->failed) {
        if (err) *err = b->err;
        return b->err.code;
    }
    b->rules[r].body = body;
    return KILN_OK;
}

gr_expr gr_and(gr_builder *b, const gr_expr *xs, size_t n)
{
    if (n == 1) return xs[0];
    gr_expr body = list(b, GR_E_AND, xs, n);
    if (body < 0 || n == 0) return body;
    gr_rule r = gr_rule_new(b, "intersection");
    if (r < 0) return -1;
    b->rules[r].body = body;
    return gr_ref(b, r);
}

gr_expr gr_text_without(gr_builder *b, const char *const *patterns, size_t n)
{
    if (b->failed) return -1;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(patterns[i]);
        for (size_t k = 0; k < l; k++)
            if ((unsigned char)patterns[i][k] >= 0x80) {
                gr_b_fail(b, KILN_E_INVALID, "grammar: text_without patterns must be ASCII");
                return -1;
            }
        if (!l) {
            gr_b_fail(b, KILN_E_INVALID, "grammar: text_without pattern is empty");
            return -1;
        }
        total += l + 1;
    }
    if (n == 0 || total > 4096) {
        gr_b_fail(b, KILN_E_INVALID, "grammar: text_without needs 1 to 4096 bytes of patterns");
        return -1;
    }
    if (grow((void **)&b->bytes, &b->cap_bytes, (int64_t)b->n_bytes + (int64_t)total, 1)) {
        gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
        return -1;
    }
    int32_t at = b->n_bytes;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(patterns[i]) + 1;
        memcpy(b->bytes + b->n_bytes, patterns[i], l);
        b->n_bytes += (int32_t)l;
    }
    return node_new(b, (gr_node){.kind = GR_E_WITHOUT, .a = at, .b = (int32_t)total});
}

gr_expr gr_class_star_except(gr_builder *b, gr_expr cls, const char *const *names, size_t n)
{
    if (b->failed) return -1;
    if (!valid(b, cls) || b->nodes[cls].kind != GR_E_CLASS) {
        gr_b_fail(b, KILN_E_INTERNAL, "grammar: class_star_except needs a class");
        return -1;
    }
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += strlen(names[i]) + 1;
    if (total > (1u << 20) ||
        grow((void **)&b->bytes, &b->cap_bytes, (int64_t)b->n_bytes + (int64_t)total + 1, 1)) {
        gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
        return -1;
    }
    int32_t at = b->n_bytes;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(names[i]) + 1;
        memcpy(b->bytes + b->n_bytes, names[i], l);
        b->n_bytes += (int32_t)l;
    }
    return node_new(b, (gr_node){.kind = GR_E_EXCEPT, .a = cls, .b = at, .min = (int32_t)total});
}

kiln_code gr_regex(gr_builder *b, const char *re, bool json, gr_expr *out, kiln_err *err)
{
    return gr_regex_add(b, re, strlen(re), json, out, err);
}

gr_expr gr_intersect(gr_builder *b, const gr_expr *xs, size_t n)
{
    return gr_and(b, xs, n);
}

gr_expr gr_json_ws(gr_builder *b)
{
    if (b->failed) return -1;
    if (b->ws >= 0) return b->ws;
    if (b->o.json_ws_max <= 0) return b->ws = node_new(b, (gr_node){.kind = GR_E_EMPTY});
    /* one shared rule, called at every gap: inline, its counter would multiply
     * the states of every object and array rule by json_ws_max + 1 */
    static const uint32_t ws[] = {'\t', '\n', '\r', '\r', ' ', ' '};
    gr_expr c = gr_class(b, ws, 3, false);
    gr_rule r = gr_rule_new(b, "ws");
    if (r < 0) return -1;
    b->rules[r].body = gr_rep(b, c, 0, b->o.json_ws_max);
    return b->ws = gr_ref(b, r);
}
