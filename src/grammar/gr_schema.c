/*
 * gr_schema.c — JSON Schema to grammar: the structure (references,
 * combinators, types, enum/const, objects, arrays). Strings and numbers are
 * in gr_schema_scalar.c. The supported subset and the refusals are listed in
 * docs/structured-output.md; everything here is exact or refused.
 *
 * A schema is compiled as a conjunction: a list of schema objects that must
 * all hold (allOf members and $ref targets are flattened into it). Keywords
 * of the same kind combine across the list (types intersect, properties
 * merge key by key into conjunctions of their own, bounds tighten, patterns
 * intersect). anyOf distributes over the rest of the list; oneOf does too,
 * but only when its alternatives provably exclude each other (else refused:
 * "exactly one" cannot be checked by a grammar). Each single schema object
 * becomes a rule of its own, memoized by address, so $ref recursion is a
 * recursive rule.
 * Generation choices (always a subset of what the schema allows):
 *   - without `type`, the types the keywords imply (`{}` is any value);
 *   - properties in schema order, required ones always, optional ones may be
 *     left out; with strict (OpenAI's), an object that does not say
 *     `additionalProperties` gets no others; others get extra keys without
 *     escapes that differ from every declared name;
 *   - numbers and strings as gr_schema_scalar.c says.
 * Errors: KILN_E_UNSUPPORTED names the keyword and where it is; KILN_E_INVALID
 * for a schema that is malformed or admits nothing.
 */
#include "grammar/gr_schema_int.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

enum {
    T_NULL = 1,
    T_BOOL = 2,
    T_OBJ = 4,
    T_ARR = 8,
    T_STR = 16,
    T_NUM = 32, /* numbers that are not integers */
    T_INT = 64,
    T_ALL = 127,
};

#define SC_MAX_DEPTH 64
#define SC_MAX_ALTS 256

/* Keywords a grammar cannot enforce (KILN_E_UNSUPPORTED); others outside the
 * handled ones are annotations or unknown, which validators ignore too. */
static const char *const UNSUPPORTED[] = {
    "if",          "then",        "else",        "dependentSchemas", "propertyNames",   "contains",
    "minContains", "maxContains", "$dynamicRef", "$recursiveRef",    "unevaluatedItems"};

/* Keywords that constrain values (used to refuse enum/const beside them). */
static const char *const CONSTRAINTS[] = {"properties",
                                          "required",
                                          "additionalProperties",
                                          "items",
                                          "prefixItems",
                                          "additionalItems",
                                          "minItems",
                                          "maxItems",
                                          "uniqueItems",
                                          "minLength",
                                          "maxLength",
                                          "pattern",
                                          "format",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum",
                                          "multipleOf",
                                          "minProperties",
                                          "maxProperties",
                                          "patternProperties",
                                          "unevaluatedProperties"};

gr_expr sc_fail(sc *c, kiln_code code, const char *fmt, ...)
{
    if (c->b->failed) return -1;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->path[0])
        gr_b_fail(c->b, code, "json_schema: %s (at %s)", msg, c->path);
    else
        gr_b_fail(c->b, code, "json_schema: %s", msg);
    return -1;
}

const json_t *sc_get(const json_t *const *list, int n, const char *key)
{
    for (int i = 0; i < n; i++) {
        const json_t *v = json_object_get(list[i], key);
        if (v) return v;
    }
    return NULL;
}

char *sc_dump(const json_t *v)
{
    return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

static size_t path_push(sc *c, const char *a, const char *b)
{
    size_t at = strlen(c->path);
    snprintf(c->path + at, sizeof c->path - at, "/%s%s%s", a, b ? "/" : "", b ? b : "");
    return at;
}

static void path_pop(sc *c, size_t at)
{
    c->path[at] = 0;
}

static json_t *keep_tmp(sc *c, json_t *j)
{
    if (!j) return NULL;
    if (c->n_tmp == c->cap_tmp) {
        int32_t nc = c->cap_tmp ? c->cap_tmp * 2 : 16;
        json_t **p = realloc(c->tmp, sizeof *p * (size_t)nc);
        if (!p) {
            json_decref(j);
            return NULL;
        }
        c->tmp = p;
        c->cap_tmp = nc;
    }
    c->tmp[c->n_tmp++] = j;
    return j;
}

/* ------------------------------------------------------------ references */

/* Resolves a local $ref ("#", "#/a/b", with ~0 ~1 and %XX); NULL (and an error) otherwise. */
static const json_t *resolve(sc *c, const char *ref)
{
    if (ref[0] != '#') {
        sc_fail(c, KILN_E_UNSUPPORTED,
                "'$ref': \"%.80s\" is not supported (only local references "
                "like \"#/$defs/name\")",
                ref);
        return NULL;
    }
    const json_t *cur = c->root;
    const char *p = ref + 1;
    if (*p && *p != '/') {
        sc_fail(c, KILN_E_UNSUPPORTED, "'$ref': anchors (\"%.80s\") are not supported", ref);
        return NULL;
    }
    while (*p == '/') {
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof tok) {
            char ch = *p++;
            if (ch == '~' && (*p == '0' || *p == '1'))
                ch = *p++ == '0' ? '~' : '/';
            else if (ch == '%' && p[0] && p[1]) {
                char hx[3] = {p[0], p[1], 0};
                char *e;
                long v = strtol(hx, &e, 16);
                if (!*e) {
                    ch = (char)v;
                    p += 2;
                }
            }
            tok[n++] = ch;
        }
        tok[n] = 0;
        if (json_is_object(cur)) {
            cur = json_object_get(cur, tok);
        } else if (json_is_array(cur)) {
            char *e;
            long i = strtol(tok, &e, 10);
            cur = *e || i < 0 ? NULL : json_array_get(cur, (size_t)i);
        } else {
            cur = NULL;
        }
        if (!cur) {
            sc_fail(c, KILN_E_INVALID, "'$ref': \"%.80s\" does not resolve", ref);
            return NULL;
        }
    }
    if (!json_is_object(cur) && !json_is_boolean(cur)) {
        sc_fail(c, KILN_E_INVALID, "'$ref': \"%.80s\" is not a schema", ref);
        return NULL;
    }
    return cur;
}

/* ------------------------------------------------------------ types */

static int type_bit(const char *t)
{
    if (!strcmp(t, "null")) return T_NULL;
    if (!strcmp(t, "boolean")) return T_BOOL;
    if (!strcmp(t, "object")) return T_OBJ;
    if (!strcmp(t, "array")) return T_ARR;
    if (!strcmp(t, "string")) return T_STR;
    if (!strcmp(t, "number")) return T_NUM | T_INT;
    if (!strcmp(t, "integer")) return T_INT;
    return -1;
}

/* The explicit `type` of s as a mask (T_ALL when absent); -1 on error. */
static int explicit_types(sc *c, const json_t *s)
{
    const json_t *t = json_object_get(s, "type");
    if (!t) return T_ALL;
    if (json_is_string(t)) {
        int b = type_bit(json_string_value(t));
        if (b < 0)
            sc_fail(c, KILN_E_INVALID, "'type': unknown type \"%.40s\"", json_string_value(t));
        return b;
    }
    if (!json_is_array(t))
        return sc_fail(c, KILN_E_INVALID, "'type' must be a string or an array"), -1;
    int m = 0;
    size_t i;
    const json_t *e;
    json_array_foreach(t, i, e)
    {
        int b = json_is_string(e) ? type_bit(json_string_value(e)) : -1;
        if (b < 0) return sc_fail(c, KILN_E_INVALID, "'type': bad entry"), -1;
        m |= b;
    }
    return m;
}

static int value_type(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_NULL:
        return T_NULL;
    case JSON_TRUE:
    case JSON_FALSE:
        return T_BOOL;
    case JSON_OBJECT:
        return T_OBJ;
    case JSON_ARRAY:
        return T_ARR;
    case JSON_STRING:
        return T_STR;
    case JSON_INTEGER:
        return T_INT;
    case JSON_REAL: {
        double d = json_real_value(v);
        return d == (double)(int64_t)d ? T_INT : T_NUM;
    }
    }
    return 0;
}

/* Types the keywords of s imply (what we generate without `type`). */
static int implied_types(const json_t *s)
{
    static const struct {
        const char *k;
        int t;
    } KW[] = {{"properties", T_OBJ},
              {"required", T_OBJ},
              {"additionalProperties", T_OBJ},
              {"minProperties", T_OBJ},
              {"maxProperties", T_OBJ},
              {"patternProperties", T_OBJ},
              {"items", T_ARR},
              {"prefixItems", T_ARR},
              {"minItems", T_ARR},
              {"maxItems", T_ARR},
              {"additionalItems", T_ARR},
              {"uniqueItems", T_ARR},
              {"minLength", T_STR},
              {"maxLength", T_STR},
              {"pattern", T_STR},
              {"format", T_STR},
              {"minimum", T_NUM | T_INT},
              {"maximum", T_NUM | T_INT},
              {"exclusiveMinimum", T_NUM | T_INT},
              {"exclusiveMaximum", T_NUM | T_INT},
              {"multipleOf", T_NUM | T_INT}};
    int m = 0;
    for (size_t i = 0; i < sizeof KW / sizeof *KW; i++)
        if (json_object_get(s, KW[i].k)) m |= KW[i].t;
    return m;
}

/* ------------------------------------------------------------ other value syntaxes */

static bool has_text(const char *s, size_t n, const char *t)
{
    size_t l = strlen(t);
    for (size_t k = 0; l && k + l <= n; k++)
        if (!memcmp(s + k, t, l)) return true;
    return false;
}

static bool forbidden_in(const sc *c, const char *s, size_t n)
{
    for (size_t i = 0; i < c->syn->n_forbid; i++)
        if (has_text(s, n, c->syn->forbid[i])) return true;
    return false;
}

static bool is_ws(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

/* A key in syn: bare when a reader taking everything up to ':' or '}' (edge
 * whitespace trimmed) gets it back, else between delimiters; -1 (a 400) when
 * neither can carry it. */
static gr_expr syn_key(sc *c, const char *k, size_t n)
{
    if (!n || n >= 256 || memchr(k, 0, n) || forbidden_in(c, k, n) ||
        has_text(k, n, c->syn->quote_text ? c->syn->quote_text : ""))
        return sc_fail(c, KILN_E_UNSUPPORTED,
                       "property name \"%.60s\" cannot be written in this call syntax "
                       "(empty, 256 bytes or more, or holding a delimiter)",
                       k);
    bool bare = !memchr(k, ':', n) && !memchr(k, '}', n) && !is_ws(k[0]) && !is_ws(k[n - 1]);
    gr_expr key = gr_lit(c->b, k, n);
    return bare ? key : sc_quoted(c, key);
}

/* The text of one value in syn (enum / const members); nothing matches a
 * string syn cannot spell (a valid subset). */
static gr_expr syn_literal(sc *c, const json_t *v, int depth)
{
    gr_builder *b = c->b;
    if (depth > 64) return sc_fail(c, KILN_E_UNSUPPORTED, "'enum'/'const' nested too deeply");
    if (json_is_string(v)) {
        const char *t = json_string_value(v);
        size_t n = json_string_length(v);
        if (forbidden_in(c, t, n)) return gr_alt(b, NULL, 0);
        return sc_quoted(c, gr_lit(b, t, n));
    }
    if (json_is_array(v) || json_is_object(v)) {
        size_t n = json_is_array(v) ? json_array_size(v) : json_object_size(v), k = 0;
        gr_expr *x = malloc(sizeof *x * (2 * n + 2));
        if (!x) return sc_fail(c, KILN_E_NOMEM, "out of memory");
        x[k++] = gr_str(b, json_is_array(v) ? "[" : "{");
        if (json_is_array(v)) {
            size_t i;
            json_t *e;
            json_array_foreach(v, i, e)
            {
                gr_expr it = syn_literal(c, e, depth + 1);
                x[k++] = i ? gr_seq2(b, gr_str(b, ","), it) : it;
            }
        } else {
            const char *key;
            json_t *e;
            json_object_foreach((json_t *)v, key, e)
            {
                gr_expr kv[] = {k > 1 ? gr_str(b, ",") : gr_seq(b, NULL, 0),
                                syn_key(c, key, strlen(key)), gr_str(b, ":"),
                                syn_literal(c, e, depth + 1)};
                x[k++] = gr_seq(b, kv, 4);
            }
        }
        x[k++] = gr_str(b, json_is_array(v) ? "]" : "}");
        gr_expr out = gr_seq(b, x, k);
        free(x);
        return out;
    }
    char *txt = sc_dump(v); /* numbers, true, false, null: as JSON writes them */
    if (!txt) return sc_fail(c, KILN_E_NOMEM, "out of memory");
    gr_expr e = gr_str(b, txt);
    free(txt);
    return e;
}

/* Any value in syn: strings raw between delimiters, bare keys
 * [A-Za-z0-9_.-]{1,64}, numbers as sc_syn_number, the rest as JSON. Returns
 * the value rule. */
static gr_rule syn_any_rule(sc *c)
{
    static const uint32_t KEY[] = {'-', '.', '0', '9', 'A', 'Z', '_', '_', 'a', 'z'};
    gr_builder *b = c->b;
    gr_rule value = gr_rule_new(b, "value"), object = gr_rule_new(b, "object"),
            array = gr_rule_new(b, "array"), string = gr_rule_new(b, "string");
    gr_expr ws = gr_json_ws(b), comma = gr_seq2(b, gr_str(b, ","), ws);
    gr_expr pv[] = {gr_rep(b, gr_class(b, KEY, 5, false), 1, 64), ws, gr_str(b, ":"), ws,
                    gr_ref(b, value), ws};
    gr_expr pair = gr_seq(b, pv, 6);
    gr_expr ob[] = {gr_str(b, "{"), ws,
                    gr_rep(b, gr_seq2(b, pair, gr_rep(b, gr_seq2(b, comma, pair), 0, -1)), 0, 1),
                    gr_str(b, "}")};
    gr_expr item = gr_seq2(b, gr_ref(b, value), ws);
    gr_expr ar[] = {gr_str(b, "["), ws,
                    gr_rep(b, gr_seq2(b, item, gr_rep(b, gr_seq2(b, comma, item), 0, -1)), 0, 1),
                    gr_str(b, "]")};
    gr_expr alts[] = {gr_ref(b, string), sc_syn_number(c, false), gr_str(b, "true"),
                      gr_str(b, "false"), gr_str(b, "null"), gr_ref(b, object),
                      gr_ref(b, array)};
    if (gr_rule_define(b, string, sc_quoted(c, sc_raw(c)), NULL) ||
        gr_rule_define(b, object, gr_seq(b, ob, 4), NULL) ||
        gr_rule_define(b, array, gr_seq(b, ar, 4), NULL) ||
        gr_rule_define(b, value, gr_alt(b, alts, 7), NULL))
        return -1;
    return value;
}

/* Any value (a schema of `true`, unlisted properties, unconstrained items). */
static gr_expr any_ref(sc *c)
{
    if (c->r_any < 0) c->r_any = c->syn ? syn_any_rule(c) : gr_json_any_rule(c->b);
    return c->r_any < 0 ? -1 : gr_ref(c->b, c->r_any);
}

/* ------------------------------------------------------------ conjunctions */

static gr_expr value_list(sc *c, const json_t *const *list, int n);

/* The rule for one schema object (memoized: recursion through $ref). */
static gr_expr value_one(sc *c, const json_t *s)
{
    if (json_is_true(s)) {
        return any_ref(c);
    }
    if (json_is_false(s)) return gr_alt(c->b, NULL, 0);
    if (!json_is_object(s))
        return sc_fail(c, KILN_E_INVALID, "a schema must be an object or a boolean");
    char *txt = json_dumps(s, JSON_COMPACT | JSON_SORT_KEYS);
    if (!txt) return sc_fail(c, KILN_E_NOMEM, "out of memory");
    uint64_t h = XXH3_64bits(txt, strlen(txt)) | 1;
    free(txt);
    if (c->n_memo * 2 >= c->cap_memo) { /* grow the table */
        int32_t nc = c->cap_memo ? c->cap_memo * 2 : 64;
        sc_memo *t = calloc((size_t)nc, sizeof *t);
        if (!t) return sc_fail(c, KILN_E_NOMEM, "out of memory");
        for (int32_t i = 0; i < c->cap_memo; i++)
            if (c->memo[i].h) {
                uint32_t j = (uint32_t)c->memo[i].h & (uint32_t)(nc - 1);
                while (t[j].h)
                    j = (j + 1) & (uint32_t)(nc - 1);
                t[j] = c->memo[i];
            }
        free(c->memo);
        c->memo = t;
        c->cap_memo = nc;
    }
    uint32_t j = (uint32_t)h & (uint32_t)(c->cap_memo - 1);
    for (; c->memo[j].h; j = (j + 1) & (uint32_t)(c->cap_memo - 1))
        if (c->memo[j].h == h &&
            (c->memo[j].s == s || json_equal((json_t *)c->memo[j].s, (json_t *)s)))
            return gr_ref(c->b, c->memo[j].r);
    gr_rule r = gr_rule_new(c->b, c->path[0] ? c->path : "schema");
    if (r < 0) return -1;
    c->memo[j] = (sc_memo){s, h, r};
    c->n_memo++;
    gr_expr body = value_list(c, &s, 1);
    if (body < 0 || gr_rule_define(c->b, r, body, NULL)) return -1;
    return gr_ref(c->b, r);
}

/* Adds s to list (flattening allOf and resolving $ref). -1 on error. */
static int flatten(sc *c, const json_t *s, const json_t **list, int *n, int depth)
{
    if (depth > SC_MAX_DEPTH)
        return sc_fail(c, KILN_E_UNSUPPORTED, "schema nesting too deep (a recursive allOf/$ref?)"),
               -1;
    if (json_is_true(s)) return 0;
    if (!json_is_object(s) && !json_is_false(s))
        return sc_fail(c, KILN_E_INVALID, "a schema must be an object or a boolean"), -1;
    if (*n >= SC_MAX_LIST) return sc_fail(c, KILN_E_UNSUPPORTED, "too many allOf/$ref members"), -1;
    list[(*n)++] = s;
    if (json_is_false(s)) return 0;
    const json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        if (!json_is_string(ref)) return sc_fail(c, KILN_E_INVALID, "'$ref' must be a string"), -1;
        const json_t *t = resolve(c, json_string_value(ref));
        if (!t || flatten(c, t, list, n, depth + 1)) return -1;
    }
    const json_t *all = json_object_get(s, "allOf");
    if (all) {
        if (!json_is_array(all) || !json_array_size(all))
            return sc_fail(c, KILN_E_INVALID, "'allOf' must be a non-empty array"), -1;
        size_t i;
        const json_t *e;
        json_array_foreach(all, i, e) if (flatten(c, e, list, n, depth + 1)) return -1;
    }
    return 0;
}

/* Is s only a $ref (besides annotations)? Then it is its target's rule. */
static bool pure_ref(const json_t *s)
{
    if (!json_object_get(s, "$ref")) return false;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v)
    {
        static const char *const ok[] = {"$ref",       "title",    "description", "$comment",
                                         "default",    "examples", "deprecated",  "readOnly",
                                         "writeOnly",  "$id",      "$schema",     "$defs",
                                         "definitions"};
        bool fine = false;
        for (size_t i = 0; i < sizeof ok / sizeof *ok && !fine; i++)
            fine = !strcmp(k, ok[i]);
        if (!fine) return false;
    }
    return true;
}

/* ------------------------------------------------------------ oneOf disjointness */

/* Types we generate from s alone (its top-level keywords). */
static int gen_types(sc *c, const json_t *s)
{
    if (!json_is_object(s)) return json_is_true(s) ? T_ALL : 0;
    int t = explicit_types(c, s);
    if (t < 0) return T_ALL;
    const json_t *e = json_object_get(s, "enum"), *k = json_object_get(s, "const");
    if (k) return t & value_type(k) ? value_type(k) : 0;
    if (json_is_array(e)) {
        int m = 0;
        size_t i;
        const json_t *v;
        json_array_foreach(e, i, v) m |= value_type(v);
        return t & m;
    }
    if (!json_object_get(s, "type")) {
        int im = implied_types(s);
        if (im) t = im;
    }
    return t;
}

/* Types s accepts (only explicit restrictions count). */
static int val_types(sc *c, const json_t *s)
{
    if (!json_is_object(s)) return json_is_true(s) ? T_ALL : 0;
    int t = explicit_types(c, s);
    if (t < 0) return T_ALL;
    const json_t *e = json_object_get(s, "enum"), *k = json_object_get(s, "const");
    if (k) t &= value_type(k);
    if (json_is_array(e)) {
        int m = 0;
        size_t i;
        const json_t *v;
        json_array_foreach(e, i, v) m |= value_type(v);
        t &= m;
    }
    if (t & T_NUM) t |= T_INT; /* integers are numbers */
    return t;
}

static bool in_values(const json_t *v, const json_t *s)
{
    const json_t *k = json_object_get(s, "const"), *e = json_object_get(s, "enum");
    if (k) return json_equal((json_t *)v, (json_t *)k);
    size_t i;
    const json_t *x;
    json_array_foreach(e, i, x) if (json_equal((json_t *)v, (json_t *)x)) return true;
    return false;
}

static bool has_values(const json_t *s)
{
    return json_is_object(s) &&
           (json_object_get(s, "const") || json_is_array(json_object_get(s, "enum")));
}

/* Every value of a's const/enum is rejected by b's const/enum. */
static bool values_rejected(const json_t *b, const json_t *a)
{
    if (!has_values(a) || !has_values(b)) return false;
    const json_t *k = json_object_get(a, "const");
    if (k) return !in_values(k, b);
    size_t i;
    const json_t *x;
    json_array_foreach(json_object_get(a, "enum"), i, x) if (in_values(x, b)) return false;
    return true;
}

static bool required_has(const json_t *s, const char *key)
{
    size_t i;
    const json_t *x;
    json_array_foreach(json_object_get(s, "required"), i,
                       x) if (json_is_string(x) && !strcmp(json_string_value(x), key)) return true;
    return false;
}

/* Does every instance we generate from a (within the conjunction ctx) fail b? */
static bool rejects(sc *c, const json_t *b, const json_t *a, const json_t *const *ctx, int nctx)
{
    if (json_is_false(a)) return true;
    if (!json_is_object(a) || !json_is_object(b)) return false;
    if (!(gen_types(c, a) & val_types(c, b))) return true;
    if (values_rejected(b, a)) return true;
    const json_t *bp = json_object_get(b, "properties"), *ap = json_object_get(a, "properties");
    /* a discriminator: a requires p with values b's p does not take */
    const char *k;
    const json_t *v;
    if (json_is_object(bp) && json_is_object(ap)) json_object_foreach((json_t *)ap, k, v)
        {
            const json_t *bv = json_object_get(bp, k);
            if (bv && required_has(a, k) && has_values(v) && values_rejected(bv, v)) return true;
        }
    /* b requires a key a never writes (a and the conjunction allow no others) */
    const json_t *req = json_object_get(b, "required");
    if (!json_is_array(req)) return false;
    size_t ri;
    const json_t *rq;
    json_array_foreach(req, ri, rq) if (json_is_string(rq))
    { /* a forbids it outright */
        const char *key = json_string_value(rq);
        const json_t *pv = json_is_object(ap) ? json_object_get(ap, key) : NULL;
        const json_t *nr = json_object_get(json_object_get(a, "not"), "required");
        if (json_is_false(pv) ||
            (json_array_size(nr) == 1 && json_is_string(json_array_get(nr, 0)) &&
             !strcmp(json_string_value(json_array_get(nr, 0)), key)))
            return true;
    }
    bool extras = false;
    const json_t *ap_a = json_object_get(a, "additionalProperties");
    if (ap_a ? !json_is_false(ap_a) : !c->strict) extras = true;
    for (int i = 0; i < nctx && !extras; i++) {
        const json_t *x = json_object_get(ctx[i], "additionalProperties");
        if (x ? !json_is_false(x) : false) extras = true;
    }
    if (extras) return false;
    size_t i;
    const json_t *r;
    json_array_foreach(req, i, r)
    {
        if (!json_is_string(r)) continue;
        const char *key = json_string_value(r);
        bool written = json_is_object(ap) && json_object_get(ap, key);
        for (int j = 0; j < nctx && !written; j++) {
            const json_t *p = json_object_get(ctx[j], "properties");
            written = json_is_object(p) && json_object_get(p, key);
        }
        if (!written) return true;
    }
    return false;
}

/* The target of a pure $ref alternative, for the checks above. */
static const json_t *alt_target(sc *c, const json_t *a)
{
    for (int hops = 0; hops < 8 && json_is_object(a) && pure_ref(a); hops++) {
        const json_t *t = resolve(c, json_string_value(json_object_get(a, "$ref")));
        if (!t) return NULL;
        a = t;
    }
    return a;
}

/* Explicit string length bounds of a conjunction ([0, -1] when none). */
static void str_bounds(const json_t *const *l, int n, int64_t *lo, int64_t *hi)
{
    *lo = 0;
    *hi = -1;
    for (int i = 0; i < n; i++) {
        const json_t *a = json_object_get(l[i], "minLength"),
                     *b = json_object_get(l[i], "maxLength");
        if (json_is_integer(a) && json_integer_value(a) > *lo) *lo = json_integer_value(a);
        if (json_is_integer(b) && (*hi < 0 || json_integer_value(b) < *hi))
            *hi = json_integer_value(b);
    }
}

/* Does every string we generate from `a` within ctx (only strings: ctx says
 * type string) have a length b forbids? */
static bool length_rejects(sc *c, const json_t *b, const json_t *a, const json_t *const *ctx,
                           int nctx)
{
    int t = explicit_types(c, a);
    for (int i = 0; i < nctx; i++)
        t &= explicit_types(c, ctx[i]);
    if (t != T_STR) return false;
    const json_t *al[SC_MAX_LIST];
    int n = 0;
    for (int i = 0; i < nctx && n < SC_MAX_LIST - 1; i++)
        al[n++] = ctx[i];
    al[n++] = a;
    int64_t alo, ahi, blo, bhi;
    str_bounds(al, n, &alo, &ahi);
    str_bounds(&b, 1, &blo, &bhi);
    return (ahi >= 0 && ahi < blo) || (bhi >= 0 && alo > bhi);
}

/* For oneOf alternative i: every other alternative must reject what i
 * generates. When none of the checks shows it, i is made to leave out a key
 * the other one requires (a synthetic {"properties": {k: false}} added to
 * *extra). Returns 0, or -1 (refused: may overlap). */
static int one_of_exclusions(sc *c, const json_t *alts, size_t i, const json_t *const *ctx,
                             int nctx, const json_t **extra, int *n_extra)
{
    const json_t *a = alt_target(c, json_array_get(alts, i));
    if (!a) return -1;
    for (size_t j = 0; j < json_array_size(alts); j++) {
        if (j == i) continue;
        const json_t *b = alt_target(c, json_array_get(alts, j));
        if (!b) return -1;
        if (rejects(c, b, a, ctx, nctx) || length_rejects(c, b, a, ctx, nctx)) continue;
        /* a key b requires that neither a nor the conjunction requires */
        const char *key = NULL;
        size_t k;
        json_t *r;
        json_array_foreach(json_object_get(b, "required"), k, r)
        {
            if (!json_is_string(r) || key) continue;
            bool needed = required_has(a, json_string_value(r));
            for (int m = 0; m < nctx && !needed; m++)
                needed = required_has(ctx[m], json_string_value(r));
            if (!needed) key = json_string_value(r);
        }
        if (!key || *n_extra >= SC_MAX_LIST / 2)
            return sc_fail(
                       c, KILN_E_UNSUPPORTED,
                       "'oneOf': alternatives %zu and %zu may both match one "
                       "value; kiln cannot enforce \"exactly one\" (use anyOf, or make them "
                       "exclusive with distinct types, const/enum values or required properties)",
                       i < j ? i : j, i < j ? j : i),
                   -1;
        json_t *x = keep_tmp(c, json_pack("{s:{s:b}}", "properties", key, 0));
        if (!x) return sc_fail(c, KILN_E_NOMEM, "out of memory"), -1;
        extra[(*n_extra)++] = x;
    }
    return 0;
}

/* ------------------------------------------------------------ enum / const */

static gr_expr literals(sc *c, const json_t *const *list, int n, int types)
{
    json_t *vals = NULL; /* the intersection so far (a new array), NULL = no set yet */
    for (int i = 0; i < n; i++) {
        const json_t *k = json_object_get(list[i], "const"), *e = json_object_get(list[i], "enum");
        if (!k && !e) continue;
        if (e && (!json_is_array(e) || !json_array_size(e))) {
            json_decref(vals);
            return sc_fail(c, KILN_E_INVALID, "'enum' must be a non-empty array");
        }
        json_t *set = json_array();
        if (!set || (k && json_array_append(set, (json_t *)k)) ||
            (e && json_array_extend(set, (json_t *)e))) {
            json_decref(set);
            json_decref(vals);
            return sc_fail(c, KILN_E_NOMEM, "out of memory");
        }
        if (vals) {
            json_t *keep = json_array();
            if (!keep) {
                json_decref(set);
                json_decref(vals);
                return sc_fail(c, KILN_E_NOMEM, "out of memory");
            }
            bool lost = false;
            size_t a, bb;
            json_t *x, *y;
            json_array_foreach(vals, a, x)
            {
                bool in = true;
                if (k && !json_equal(x, (json_t *)k)) in = false;
                if (in && e) {
                    in = false;
                    json_array_foreach(e, bb, y) if (json_equal(x, y)) in = true;
                }
                if (in && json_array_append(keep, x)) lost = true;
            }
            json_decref(vals);
            json_decref(set);
            vals = keep;
            if (lost) {
                json_decref(vals);
                return sc_fail(c, KILN_E_NOMEM, "out of memory");
            }
        } else {
            vals = set;
        }
    }
    gr_expr alts[SC_MAX_ALTS];
    int na = 0;
    size_t i;
    json_t *v;
    json_array_foreach(vals, i, v)
    {
        int t = value_type(v);
        if (!(t & types) && !(t == T_INT && (types & T_NUM))) continue;
        if (na == SC_MAX_ALTS) {
            gr_expr f = gr_alt(c->b, alts, (size_t)na);
            alts[0] = f;
            na = 1;
        }
        if (c->syn) {
            alts[na++] = syn_literal(c, v, 0);
            continue;
        }
        char *txt = sc_dump(v);
        if (!txt) {
            json_decref(vals);
            return sc_fail(c, KILN_E_NOMEM, "out of memory");
        }
        alts[na++] = gr_str(c->b, txt);
        free(txt);
    }
    json_decref(vals);
    return gr_alt(c->b, alts, (size_t)na);
}

/* ------------------------------------------------------------ objects */

/* Does `name` match the (unanchored) pattern? -1 when the pattern does not
 * compile. Declared names are plain text, so PCRE2 reads the ECMAScript
 * patterns schemas use the same way validators do. */
static int name_matches(const char *pattern, const char *name)
{
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re =
        pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL);
    if (!re) return -1;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = md ? pcre2_match(re, (PCRE2_SPTR)name, PCRE2_ZERO_TERMINATED, 0, 0, md, NULL) : -1;
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return rc >= 0 ? 1 : rc == PCRE2_ERROR_NOMATCH ? 0 : -1;
}

/* Is key k matched by one of s's patternProperties? (-1: a bad pattern) */
static int own_pattern(const json_t *s, const char *k)
{
    const json_t *pp = json_object_get(s, "patternProperties");
    const char *pat;
    json_t *v;
    json_object_foreach((json_t *)pp, pat, v)
    {
        int m = name_matches(pat, k);
        if (m) return m;
    }
    return 0;
}

typedef struct {
    const char *key;
    const json_t *schemas[SC_MAX_LIST];
    int n;
    bool required, forbidden;
} prop;

static const uint32_t PLAIN[] = {0x20, 0x21, 0x23, 0x5B, 0x5D, GR_MAX_CP}; /* unescaped */

/* "key" as a JSON string literal */
static gr_expr key_lit(sc *c, const char *key)
{
    if (c->syn) return syn_key(c, key, strlen(key));
    json_t *s = json_string(key);
    char *t = s ? sc_dump(s) : NULL;
    json_decref(s);
    if (!t) return sc_fail(c, KILN_E_NOMEM, "out of memory");
    gr_expr e = gr_str(c->b, t);
    free(t);
    return e;
}

/* A key for an extra property: a string without escapes, unequal to every
 * declared name (a rule of its own: a leaf, built once however often used). */
static gr_expr extra_key(sc *c, const prop *props, int np)
{
    static const uint32_t BARE[] = {'-', '.', '0', '9', 'A', 'Z', '_', '_', 'a', 'z'};
    gr_builder *b = c->b;
    const char **names = malloc(sizeof *names * (size_t)(np + 2));
    if (!names) return sc_fail(c, KILN_E_NOMEM, "out of memory");
    for (int i = 0; i < np; i++)
        names[i] = props[i].key;
    if (c->syn) names[np] = ""; /* a bare key is never empty */
    gr_expr body = c->syn ? gr_class_star_except(b, gr_class(b, BARE, 5, false), names,
                                                 (size_t)np + 1)
                          : gr_class_star_except(b, gr_class(b, PLAIN, 3, false), names, (size_t)np);
    free(names);
    gr_expr key = body;
    if (c->syn) { /* a reader keeps 255 bytes of a key: 64 characters */
        gr_expr both[] = {body, gr_rep(b, gr_class(b, BARE, 5, false), 1, 64)};
        key = gr_and(b, both, 2);
    } else {
        gr_expr q = gr_str(b, "\"");
        gr_expr x[] = {q, body, q};
        key = gr_seq(b, x, 3);
    }
    gr_rule r = gr_rule_new(b, "extra-key");
    if (r < 0 || gr_rule_define(b, r, key, NULL)) return -1;
    return gr_ref(b, r);
}

static prop *prop_get(prop **props, int *np, int *cap, const char *key)
{
    for (int i = 0; i < *np; i++)
        if (!strcmp((*props)[i].key, key)) return &(*props)[i];
    if (*np == *cap) {
        int nc = *cap ? *cap * 2 : 16;
        prop *p = realloc(*props, sizeof *p * (size_t)nc);
        if (!p) return NULL;
        *props = p;
        *cap = nc;
    }
    prop *p = &(*props)[(*np)++];
    memset(p, 0, sizeof *p);
    p->key = key;
    return p;
}

static gr_expr prop_value(sc *c, const prop *p)
{
    size_t at = path_push(c, "properties", p->key);
    gr_expr e;
    if (p->n == 0) {
        e = any_ref(c);
    } else if (p->n == 1) {
        e = value_one(c, p->schemas[0]);
    } else {
        e = value_list(c, p->schemas, p->n);
    }
    path_pop(c, at);
    return e;
}

static int get_count(sc *c, const json_t *const *list, int n, const char *key, bool take_max,
                     int64_t *out)
{
    *out = -1;
    for (int i = 0; i < n; i++) {
        const json_t *v = json_object_get(list[i], key);
        if (!v) continue;
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return sc_fail(c, KILN_E_INVALID, "'%s' must be a non-negative integer", key), -1;
        int64_t x = json_integer_value(v);
        if (*out < 0 || (take_max ? x > *out : x < *out)) *out = x;
    }
    return 0;
}

static gr_expr object_body(sc *c, prop *L, int k, bool extras, gr_expr extra_val, bool nonempty)
{
    gr_builder *b = c->b;
    gr_expr ws = gr_json_ws(b), colon = gr_str(b, ":"), comma = gr_seq2(b, gr_str(b, ","), ws);
    gr_expr *kv = malloc(sizeof *kv * (size_t)(k + 1));
    if (!kv) return sc_fail(c, KILN_E_NOMEM, "out of memory");
    for (int i = 0; i < k; i++) {
        gr_expr x[] = {key_lit(c, L[i].key), ws, colon, ws, prop_value(c, &L[i]), ws};
        kv[i] = gr_seq(b, x, 6);
    }
    gr_expr ekv = -1;
    if (extras) {
        gr_expr x[] = {extra_key(c, L, k), ws, colon, ws, extra_val, ws};
        ekv = gr_seq(b, x, 6);
    }
    int r = 0;
    while (r < k && !L[r].required)
        r++;
    /* suffix(i): the properties from i on, each after a comma, then extras */
    bool rules = (int64_t)(r + 1) * k > 64;
    gr_expr *suf = malloc(sizeof *suf * (size_t)(k + 2));
    if (!suf) {
        free(kv);
        return sc_fail(c, KILN_E_NOMEM, "out of memory");
    }
    gr_expr tail = extras ? gr_rep(b, gr_seq2(b, comma, ekv), 0, -1) : gr_seq(b, NULL, 0);
    suf[k] = tail;
    for (int i = k - 1; i >= 0; i--) {
        gr_expr item = gr_seq2(b, comma, kv[i]);
        if (!L[i].required) item = gr_rep(b, item, 0, 1);
        gr_expr next = suf[i + 1];
        if (rules && i + 1 <= r + 1) { /* shared by several alternatives: a rule */
            gr_rule R = gr_rule_new(b, "properties");
            if (R < 0 || gr_rule_define(b, R, next, NULL)) break;
            next = gr_ref(b, R);
        }
        suf[i] = gr_seq2(b, item, next);
        if (rules && i + 1 <= r + 1) suf[i + 1] = next;
    }
    gr_expr alts[SC_MAX_ALTS + 2];
    int na = 0;
    for (int i = 0; i <= r && i < k; i++) {
        if (na == SC_MAX_ALTS) {
            gr_expr f = gr_alt(b, alts, (size_t)na);
            alts[0] = f;
            na = 1;
        }
        alts[na++] = gr_seq2(b, kv[i], suf[i + 1]);
    }
    if (r == k) { /* nothing required */
        if (extras) alts[na++] = gr_seq2(b, ekv, gr_rep(b, gr_seq2(b, comma, ekv), 0, -1));
        if (!nonempty) alts[na++] = gr_seq(b, NULL, 0);
    }
    free(kv);
    free(suf);
    gr_expr x[] = {gr_str(b, "{"), ws, gr_alt(b, alts, (size_t)na), gr_str(b, "}")};
    return gr_seq(b, x, 4);
}

static gr_expr object_expr(sc *c, const json_t *const *list, int n)
{
    prop *props = NULL;
    int np = 0, cap = 0;
    gr_expr out = -1;
    for (int i = 0; i < n; i++) {
        const json_t *ps = json_object_get(list[i], "properties");
        if (ps && !json_is_object(ps)) {
            sc_fail(c, KILN_E_INVALID, "'properties' must be an object");
            goto done;
        }
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)ps, key, v)
        {
            prop *p = prop_get(&props, &np, &cap, key);
            if (!p) goto nomem;
            if (p->n < SC_MAX_LIST) p->schemas[p->n++] = v;
        }
        const json_t *pp = json_object_get(list[i], "patternProperties");
        if (pp && !json_is_object(pp)) {
            sc_fail(c, KILN_E_INVALID, "'patternProperties' must be an object");
            goto done;
        }
    }
    for (int i = 0; i < n; i++) {
        const json_t *req = json_object_get(list[i], "required");
        if (!req) continue;
        if (!json_is_array(req)) {
            sc_fail(c, KILN_E_INVALID, "'required' must be an array of strings");
            goto done;
        }
        size_t j;
        json_t *v;
        json_array_foreach(req, j, v)
        {
            if (!json_is_string(v)) {
                sc_fail(c, KILN_E_INVALID, "'required' must be an array of strings");
                goto done;
            }
            prop *p = prop_get(&props, &np, &cap, json_string_value(v));
            if (!p) goto nomem;
            p->required = true;
        }
    }
    /* patternProperties: a declared key a pattern matches takes that schema too;
     * no key is ever generated for a pattern alone (a valid subset) */
    bool patterns = false;
    for (int i = 0; i < n; i++) {
        const json_t *pp = json_object_get(list[i], "patternProperties");
        const char *pat;
        json_t *v;
        json_object_foreach((json_t *)pp, pat, v)
        {
            patterns = true;
            for (int k = 0; k < np; k++) {
                int m = name_matches(pat, props[k].key);
                if (m < 0) {
                    sc_fail(c, KILN_E_UNSUPPORTED,
                            "'patternProperties': pattern \"%.60s\" is not "
                            "supported",
                            pat);
                    goto done;
                }
                if (m && props[k].n < SC_MAX_LIST) props[k].schemas[props[k].n++] = v;
            }
        }
    }
    /* additionalProperties: each member's applies to keys outside its own
     * properties and patterns */
    bool said = false, extras = true;
    const json_t *extra_schemas[SC_MAX_LIST];
    int ne = 0;
    for (int i = 0; i < n; i++) {
        const json_t *ap = json_object_get(list[i], "additionalProperties");
        const json_t *up = json_object_get(list[i], "unevaluatedProperties");
        if (up && !json_is_boolean(up)) {
            sc_fail(c, KILN_E_UNSUPPORTED,
                    "'unevaluatedProperties' with a schema is not supported");
            goto done;
        }
        if (up && json_is_false(up)) { /* within a conjunction: the union of its properties */
            said = true;
            extras = false;
        }
        if (!ap) continue;
        said = true;
        if (json_is_true(ap)) continue;
        const json_t *own = json_object_get(list[i], "properties");
        for (int k = 0; k < np; k++)
            if (!json_object_get(own, props[k].key) && own_pattern(list[i], props[k].key) == 0) {
                if (json_is_false(ap))
                    props[k].forbidden = true;
                else if (props[k].n < SC_MAX_LIST)
                    props[k].schemas[props[k].n++] = ap;
            }
        if (json_is_false(ap))
            extras = false;
        else if (json_is_object(ap) && ne < SC_MAX_LIST)
            extra_schemas[ne++] = ap;
        else if (!json_is_object(ap)) {
            sc_fail(c, KILN_E_INVALID, "'additionalProperties' must be a boolean or a schema");
            goto done;
        }
    }
    if (!said) extras = !c->strict;
    if (patterns) extras = false;
    /* dependencies (array form) / dependentRequired: a present key needs
     * others: require them too when they may appear, else leave the key out */
    for (int i = 0; i < n; i++) {
        static const char *const dk[] = {"dependencies", "dependentRequired"};
        for (int d = 0; d < 2; d++) {
            const json_t *deps = json_object_get(list[i], dk[d]);
            if (deps && !json_is_object(deps)) {
                sc_fail(c, KILN_E_INVALID, "'%s' must be an object", dk[d]);
                goto done;
            }
            const char *key;
            json_t *v;
            json_object_foreach((json_t *)deps, key, v)
            {
                if (!json_is_array(v)) {
                    sc_fail(c, KILN_E_UNSUPPORTED, "'%s' with a schema is not supported", dk[d]);
                    goto done;
                }
                prop *a = NULL;
                for (int k = 0; k < np; k++)
                    if (!strcmp(props[k].key, key)) a = &props[k];
                if (!a || a->forbidden) continue;
                bool ok = true;
                size_t j;
                json_t *q;
                json_array_foreach(v, j, q)
                {
                    if (!json_is_string(q)) continue;
                    bool found = false;
                    for (int k = 0; k < np; k++)
                        if (!strcmp(props[k].key, json_string_value(q)))
                            found = !props[k].forbidden;
                    if (!found && !extras) ok = false;
                }
                if (!ok) {
                    if (a->required) { /* required, and its dependents cannot appear */
                        out = gr_alt(c->b, NULL, 0);
                        goto done;
                    }
                    a->forbidden = true;
                    continue;
                }
                json_array_foreach(v, j, q)
                {
                    if (!json_is_string(q)) continue;
                    prop *p = prop_get(&props, &np, &cap, json_string_value(q));
                    if (!p) goto nomem;
                    p->required = true;
                }
            }
        }
    }
    int k = 0, n_req = 0;
    for (int i = 0; i < np; i++) {
        if (props[i].forbidden) {
            if (props[i].required) { /* required but not allowed: no object */
                out = gr_alt(c->b, NULL, 0);
                goto done;
            }
            continue;
        }
        n_req += props[i].required;
        props[k++] = props[i];
    }
    int64_t minp, maxp;
    if (get_count(c, list, n, "minProperties", true, &minp) ||
        get_count(c, list, n, "maxProperties", false, &maxp))
        goto done;
    if (!said && !patterns && minp > k)
        extras = true; /* strict, but it needs more keys than it declares */
    bool nonempty = false;
    if (minp > n_req) {
        if (minp == 1)
            nonempty = true;
        else {
            sc_fail(c, KILN_E_UNSUPPORTED,
                    "'minProperties' above the number of required properties "
                    "is not supported");
            goto done;
        }
    }
    if (maxp >= 0) {
        if (maxp < n_req) {
            out = gr_alt(c->b, NULL, 0);
            goto done;
        }
        if (extras || k > maxp) {
            sc_fail(c, KILN_E_UNSUPPORTED,
                    "'maxProperties' below the number of allowed properties "
                    "is not supported");
            goto done;
        }
    }
    gr_expr extra_val = -1;
    if (extras) {
        size_t at = path_push(c, "additionalProperties", NULL);
        if (ne == 0) {
            extra_val = any_ref(c);
        } else {
            extra_val = ne == 1 ? value_one(c, extra_schemas[0]) : value_list(c, extra_schemas, ne);
        }
        path_pop(c, at);
    }
    out = object_body(c, props, k, extras, extra_val, nonempty);
    goto done;
nomem:
    sc_fail(c, KILN_E_NOMEM, "out of memory");
done:
    free(props);
    return c->b->failed ? -1 : out;
}

/* ------------------------------------------------------------ arrays */

static gr_expr array_expr(sc *c, const json_t *const *list, int n)
{
    gr_builder *b = c->b;
    size_t ntup = 0; /* tuple positions: prefixItems, or items as an array (drafts <= 2019) */
    for (int i = 0; i < n; i++) {
        const json_t *pi = json_object_get(list[i], "prefixItems"),
                     *it = json_object_get(list[i], "items");
        if (pi && !json_is_array(pi))
            return sc_fail(c, KILN_E_INVALID, "'prefixItems' must be an array");
        const json_t *P = pi ? pi : json_is_array(it) ? it : NULL;
        if (P && json_array_size(P) > ntup) ntup = json_array_size(P);
    }
    int64_t minI, maxI;
    if (get_count(c, list, n, "minItems", true, &minI) ||
        get_count(c, list, n, "maxItems", false, &maxI))
        return -1;
    for (int i = 0; i < n; i++) { /* uniqueItems: arrays of at most one item are (a valid subset) */
        const json_t *ui = json_object_get(list[i], "uniqueItems");
        if (!ui || !json_is_true(ui) || (maxI >= 0 && maxI <= 1)) continue;
        if (minI > 1)
            return sc_fail(c, KILN_E_UNSUPPORTED,
                           "'uniqueItems': true with minItems above 1 is not "
                           "supported (a grammar cannot compare items)");
        maxI = 1;
    }
    if (maxI >= 0 && minI > maxI) return gr_alt(b, NULL, 0);
    if (minI > 10000 || maxI > 10000)
        return sc_fail(c, KILN_E_UNSUPPORTED, "'minItems'/'maxItems' over 10000");
    if (maxI >= 0 && (int64_t)ntup > maxI) ntup = (size_t)maxI;
    gr_expr ws = gr_json_ws(b), comma = gr_seq2(b, gr_str(b, ","), ws);
    /* the element at position i: every member's schema for it */
    gr_expr *el = malloc(sizeof *el * (ntup + 1));
    if (!el) return sc_fail(c, KILN_E_NOMEM, "out of memory");
    for (size_t i = 0; i <= ntup; i++) {
        const json_t *sch[SC_MAX_LIST];
        int ns = 0;
        for (int m = 0; m < n; m++) {
            const json_t *pi = json_object_get(list[m], "prefixItems"),
                         *it = json_object_get(list[m], "items");
            const json_t *P = pi ? pi : json_is_array(it) ? it : NULL;
            const json_t *R = pi                  ? it
                              : json_is_array(it) ? json_object_get(list[m], "additionalItems")
                                                  : it;
            const json_t *s = i < ntup && P && i < json_array_size(P) ? json_array_get(P, i) : R;
            if (s && ns < SC_MAX_LIST) sch[ns++] = s;
        }
        char idx[24];
        snprintf(idx, sizeof idx, "%zu", i);
        size_t at = path_push(c, i < ntup ? "prefixItems" : "items", i < ntup ? idx : NULL);
        gr_expr v;
        if (ns == 0) {
            v = any_ref(c);
        } else {
            v = ns == 1 ? value_one(c, sch[0]) : value_list(c, sch, ns);
        }
        path_pop(c, at);
        el[i] = gr_seq2(b, v, ws);
    }
    gr_expr body;
    int64_t lo = minI < 0 ? 0 : minI;
    if (ntup == 0) {
        if (maxI == 0) {
            body = gr_seq(b, NULL, 0);
        } else {
            gr_expr more = gr_rep(b, gr_seq2(b, comma, el[0]), lo > 1 ? (int32_t)lo - 1 : 0,
                                  maxI < 0 ? -1 : (int32_t)maxI - 1);
            body = gr_seq2(b, el[0], more);
            if (lo == 0) body = gr_rep(b, body, 0, 1);
        }
    } else {
        int64_t tmin = lo > (int64_t)ntup ? lo - (int64_t)ntup : 0;
        int64_t tmax = maxI < 0 ? -1 : maxI - (int64_t)ntup;
        gr_expr tail = tmax == 0
                           ? gr_seq(b, NULL, 0)
                           : gr_rep(b, gr_seq2(b, comma, el[ntup]), (int32_t)tmin, (int32_t)tmax);
        for (size_t i = ntup; i-- > 0;) {
            gr_expr inner = gr_seq2(b, el[i], tail);
            tail = i == 0 ? inner : gr_seq2(b, comma, inner);
            if ((int64_t)i + 1 > lo) tail = gr_rep(b, tail, 0, 1);
        }
        body = tail;
    }
    free(el);
    gr_expr x[] = {gr_str(b, "["), ws, body, gr_str(b, "]")};
    return gr_seq(b, x, 4);
}

/* ------------------------------------------------------------ one conjunction */

static bool is_constraint(const char *k)
{
    for (size_t i = 0; i < sizeof CONSTRAINTS / sizeof *CONSTRAINTS; i++)
        if (!strcmp(k, CONSTRAINTS[i])) return true;
    return false;
}

static gr_expr distribute(sc *c, const json_t **list, int n, int at, const char *kw)
{
    const json_t *alts = json_object_get(list[at], kw);
    if (!json_is_array(alts) || !json_array_size(alts))
        return sc_fail(c, KILN_E_INVALID, "'%s' must be a non-empty array", kw);
    json_t *copy = keep_tmp(c, json_copy((json_t *)list[at]));
    if (!copy) return sc_fail(c, KILN_E_NOMEM, "out of memory");
    json_object_del(copy, kw);
    gr_expr out[SC_MAX_ALTS];
    int no = 0;
    size_t i;
    json_t *a;
    json_array_foreach(alts, i, a)
    {
        if (no == SC_MAX_ALTS)
            return sc_fail(c, KILN_E_UNSUPPORTED, "'%s' with over %d alternatives", kw,
                           SC_MAX_ALTS);
        const json_t *nl[SC_MAX_LIST], *extra[SC_MAX_LIST];
        int k = 0, ne = 0;
        for (int j = 0; j < n && k < SC_MAX_LIST - 1; j++)
            nl[k++] = j == at ? copy : list[j];
        if (!strcmp(kw, "oneOf") && one_of_exclusions(c, alts, i, nl, k, extra, &ne)) return -1;
        nl[k++] = a;
        for (int j = 0; j < ne && k < SC_MAX_LIST; j++)
            nl[k++] = extra[j];
        char idx[24];
        snprintf(idx, sizeof idx, "%zu", i);
        size_t p = path_push(c, kw, idx);
        out[no++] = value_list(c, nl, k);
        path_pop(c, p);
        if (c->b->failed) return -1;
    }
    return gr_alt(c->b, out, (size_t)no);
}

/* `not` the grammar can honour: {"type": ...} (those types are left out),
 * {"required": [...]} and {"anyOf": [{"required": [...]}, ...]} (one key of
 * each is left out: a synthetic {"properties": {k: false}} joins the list).
 * Anything else is refused. */
static int not_rules(sc *c, const json_t **list, int *n, int *excluded)
{
    for (int i = 0, n0 = *n; i < n0; i++) {
        const json_t *nt = json_object_get(list[i], "not");
        if (!nt) continue;
        if (json_is_false(nt)) continue; /* not false: anything */
        if (!json_is_object(nt)) return sc_fail(c, KILN_E_INVALID, "'not' must be a schema"), -1;
        const json_t *alts[SC_MAX_LIST];
        int na = 0;
        const json_t *any = json_object_get(nt, "anyOf");
        if (json_is_array(any) && json_object_size(nt) == 1) {
            size_t j;
            json_t *x;
            json_array_foreach(any, j, x) if (na < SC_MAX_LIST) alts[na++] = x;
        } else {
            alts[na++] = nt;
        }
        for (int k = 0; k < na; k++) {
            const json_t *x = alts[k], *ty = json_object_get(x, "type"),
                         *rq = json_object_get(x, "required");
            size_t keys = json_object_size(x) - (json_object_get(x, "description") ? 1 : 0) -
                          (json_object_get(x, "title") ? 1 : 0);
            if (ty && keys == 1) {
                int t = explicit_types(c, x);
                if (t < 0) return -1;
                *excluded |= t;
            } else if (json_is_array(rq) && json_array_size(rq) && keys == 1 &&
                       json_is_string(json_array_get(rq, 0))) {
                if (*n >= SC_MAX_LIST)
                    return sc_fail(c, KILN_E_UNSUPPORTED, "'not': too many rules"), -1;
                json_t *f = keep_tmp(c, json_pack("{s:{s:b}}", "properties",
                                                  json_string_value(json_array_get(rq, 0)), 0));
                if (!f) return sc_fail(c, KILN_E_NOMEM, "out of memory"), -1;
                list[(*n)++] = f;
            } else {
                return sc_fail(c, KILN_E_UNSUPPORTED,
                               "'not' is supported only with 'type' or "
                               "'required'"),
                       -1;
            }
        }
    }
    return 0;
}

static gr_expr value_list_inner(sc *c, const json_t *const *in, int n_in)
{
    if (n_in == 1 && json_is_object(in[0]) && pure_ref(in[0])) {
        const json_t *t = resolve(c, json_string_value(json_object_get(in[0], "$ref")));
        return t ? value_one(c, t) : -1;
    }
    const json_t *list[SC_MAX_LIST];
    int n = 0;
    for (int i = 0; i < n_in; i++)
        if (flatten(c, in[i], list, &n, 0)) return -1;
    for (int i = 0; i < n; i++)
        if (json_is_false(list[i])) return gr_alt(c->b, NULL, 0);
    for (int i = 0; i < n; i++) {
        if (json_object_get(list[i], "anyOf")) return distribute(c, list, n, i, "anyOf");
        if (json_object_get(list[i], "oneOf")) return distribute(c, list, n, i, "oneOf");
    }
    int excluded = 0; /* types `not` rules out */
    if (not_rules(c, list, &n, &excluded)) return -1;
    int types = T_ALL;
    bool explicit = false, values = false;
    for (int i = 0; i < n; i++) {
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)list[i], k, v)
        {
            for (size_t u = 0; u < sizeof UNSUPPORTED / sizeof *UNSUPPORTED; u++)
                if (!strcmp(k, UNSUPPORTED[u]))
                    return sc_fail(c, KILN_E_UNSUPPORTED, "'%s' is not supported", k);
        }
        int t = explicit_types(c, list[i]);
        if (t < 0) return -1;
        types &= t;
        explicit |= json_object_get(list[i], "type") != NULL;
        values |= json_object_get(list[i], "enum") || json_object_get(list[i], "const");
    }
    if (values) {
        for (int i = 0; i < n; i++) {
            const char *k;
            const json_t *v;
            json_object_foreach((json_t *)list[i], k, v) if (is_constraint(k)) return sc_fail(
                c, KILN_E_UNSUPPORTED, "'enum'/'const' together with '%s' is not supported", k);
        }
        return literals(c, list, n, types);
    }
    if (!explicit) {
        int im = 0;
        for (int i = 0; i < n; i++)
            im |= implied_types(list[i]);
        if (im) types = im;
    }
    if (excluded) {
        if ((excluded & T_INT) && !(excluded & T_NUM) && (types & T_NUM))
            return sc_fail(c, KILN_E_UNSUPPORTED,
                           "'not': {\"type\": \"integer\"} beside numbers is not supported");
        types &= ~excluded;
        if (excluded & T_NUM) types &= ~T_INT;
    }
    gr_expr alts[8];
    int na = 0;
    if (types & T_NULL) alts[na++] = gr_str(c->b, "null");
    if (types & T_BOOL) alts[na++] = gr_alt2(c->b, gr_str(c->b, "true"), gr_str(c->b, "false"));
    if (types & T_OBJ) alts[na++] = object_expr(c, list, n);
    if (types & T_ARR) alts[na++] = array_expr(c, list, n);
    if (types & T_STR) alts[na++] = sc_string(c, list, n);
    if (types & T_NUM)
        alts[na++] = sc_number(c, list, n, false);
    else if (types & T_INT)
        alts[na++] = sc_number(c, list, n, true);
    for (int i = 0; i < na; i++)
        if (alts[i] < 0) return -1;
    return gr_alt(c->b, alts, (size_t)na);
}

static gr_expr value_list(sc *c, const json_t *const *list, int n)
{
    if (++c->depth > SC_MAX_DEPTH) {
        c->depth--;
        return sc_fail(c, KILN_E_UNSUPPORTED, "schema nested more than %d levels", SC_MAX_DEPTH);
    }
    if (gr_b_check_time(c->b)) {
        c->depth--;
        return -1;
    }
    gr_expr e = value_list_inner(c, list, n);
    c->depth--;
    return c->b->failed ? -1 : e;
}

/* ------------------------------------------------------------ API */

kiln_code gr_builder_add_json_schema(gr_builder *b, const json_t *schema, bool strict, gr_expr *out,
                                     kiln_err *err)
{
    return gr_builder_add_json_schema_as(b, schema, strict, NULL, out, err);
}

kiln_code gr_builder_add_json_schema_as(gr_builder *b, const json_t *schema, bool strict,
                                        const gr_value_syntax *syn, gr_expr *out, kiln_err *err)
{
    *out = -1;
    sc c = {.b = b,
            .root = schema,
            .strict = strict,
            .r_string = -1,
            .r_number = -1,
            .r_integer = -1,
            .r_any = -1,
            .syn = syn,
            .raw = -1,
            .err = err};
    if (syn && syn->quote < 0 && !b->failed)
        gr_b_fail(b, KILN_E_INTERNAL, "grammar: a value syntax needs its string delimiter");
    if (!b->failed) {
        if (!json_is_object(schema) && !json_is_boolean(schema))
            sc_fail(&c, KILN_E_INVALID, "the schema must be an object or a boolean");
        else
            *out = value_one(&c, schema);
    }
    for (int32_t i = 0; i < c.n_tmp; i++)
        json_decref(c.tmp[i]);
    free(c.tmp);
    free(c.memo);
    if (b->failed) {
        *out = -1;
        if (err) *err = b->err;
        return b->err.code;
    }
    return KILN_OK;
}

kiln_code gr_compile_json_schema(const json_t *schema, const gr_options *o, gr_grammar **out,
                                 kiln_err *err)
{
    *out = NULL;
    gr_builder *b;
    kiln_code rc = gr_builder_create(o, &b, err);
    if (rc) return rc;
    gr_expr v;
    rc = gr_builder_add_json_schema(b, schema, b->o.json_strict, &v, err);
    if (!rc) {
        gr_rule root = gr_rule_new(b, "root");
        gr_expr ws = gr_json_ws(b);
        gr_expr x[] = {ws, v, ws};
        rc = gr_rule_define(b, root, gr_seq(b, x, 3), err);
        if (!rc) rc = gr_builder_compile(b, root, out, err);
    }
    gr_builder_destroy(b);
    return rc;
}
