/*
 * tmpl_parse.c — tokens -> AST (tmpl_node), with @huggingface/jinja's grammar.
 *
 * Expression precedence, loosest first:
 *   a if b else c (and `a if b` = select)  >  or  >  and  >  not  >
 *   comparison / in / not in  >  + - ~  >  * / // %  >  **  >  is [not] test  >
 *   | filter  >  unary + -  >  call, .attr, [index], [a:b:c]  >  primary
 * Statements: if/elif/else, for/else (target may be a tuple; `for x in y if c`),
 * set (= value, tuple unpacking, ns.attr, block form), macro, call (with caller
 * parameters), filter blocks, break, continue. Beyond that library: tests take
 * arguments (`is divisibleby(3)`, `is sameas x`), tuples may end with a comma.
 * Nodes and their strings live in chunks owned by the template (tmpl_chunks_free).
 * Errors: KILN_E_INVALID "template:LINE:COL: ..."; nesting past 200 levels is refused.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl_int.h"

struct tmpl_chunk {
    tmpl_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

#define PARSE_MAX_DEPTH 200

typedef struct {
    tmpl_template *t;
    const tmpl_tok *tok;
    size_t n, i;
    kiln_err *err;
    int depth;
    bool failed;
} parser;

void tmpl_chunks_free(tmpl_chunk *c)
{
    while (c) {
        tmpl_chunk *n = c->next;
        free(c);
        c = n;
    }
}

static void *palloc(parser *P, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    tmpl_chunk *c = P->t->chunks;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 16384 ? n : 16384;
        c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->next = P->t->chunks;
        c->used = 0;
        c->cap = cap;
        P->t->chunks = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

static void *perr(parser *P, const tmpl_tok *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void *perr(parser *P, const tmpl_tok *at, const char *fmt, ...)
{
    if (P->failed) return NULL;
    P->failed = true;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    uint32_t line, col;
    tmpl_linecol(P->t->src, P->t->src_len, at->pos, &line, &col);
    kiln_fail(P->err, KILN_E_INVALID, "template:%u:%u: %s", line, col, msg);
    return NULL;
}

static void *pnomem(parser *P)
{
    if (!P->failed) kiln_fail(P->err, KILN_E_NOMEM, "template: out of memory");
    P->failed = true;
    return NULL;
}

static const tmpl_tok *cur(parser *P)
{
    return &P->tok[P->i < P->n ? P->i : P->n - 1];
}

static const tmpl_tok *peek(parser *P, size_t k)
{
    return &P->tok[P->i + k < P->n ? P->i + k : P->n - 1];
}

static bool is(parser *P, uint8_t kind)
{
    return cur(P)->kind == kind;
}

static bool is_name(parser *P, size_t k, const char *name)
{
    const tmpl_tok *t = peek(P, k);
    return t->kind == T_NAME && !strcmp(t->s, name);
}

static const tmpl_tok *expect(parser *P, uint8_t kind, const char *what)
{
    const tmpl_tok *t = cur(P);
    if (t->kind != kind) {
        if (t->kind == T_EOF) return perr(P, t, "unexpected end of template, expected %s", what);
        return perr(P, t, "expected %s, got '%s'", what, t->s);
    }
    P->i++;
    return t;
}

static tmpl_node *node(parser *P, uint8_t kind, const tmpl_tok *at)
{
    tmpl_node *n = palloc(P, sizeof *n);
    if (!n) return pnomem(P);
    n->kind = kind;
    n->pos = at->pos;
    return n;
}

static const char *pstrdup(parser *P, const char *s, size_t len)
{
    char *p = palloc(P, len + 1);
    if (!p) return pnomem(P);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

/* A growable node list built on the heap, then copied into the chunk. */
typedef struct {
    tmpl_node **v;
    uint32_t n, cap;
} nlist;

static bool nl_push(parser *P, nlist *l, tmpl_node *x)
{
    if (!x) return false;
    if (l->n == l->cap) {
        uint32_t nc = l->cap ? l->cap * 2 : 8;
        tmpl_node **v = realloc(l->v, nc * sizeof *v);
        if (!v) return pnomem(P), false;
        l->v = v;
        l->cap = nc;
    }
    l->v[l->n++] = x;
    return true;
}

static tmpl_node **nl_finish(parser *P, nlist *l, uint32_t *n)
{
    *n = l->n;
    tmpl_node **v = NULL;
    if (l->n) {
        v = palloc(P, l->n * sizeof *v);
        if (v)
            memcpy(v, l->v, l->n * sizeof *v);
        else
            pnomem(P);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
    return v;
}

static tmpl_node *parse_expr(parser *P);
static tmpl_node *parse_any(parser *P);
static tmpl_node *parse_primary(parser *P);
static tmpl_node *parse_unary_sign(parser *P);

static bool enter(parser *P)
{
    if (++P->depth > PARSE_MAX_DEPTH) {
        perr(P, cur(P), "template nested more than %d levels deep", PARSE_MAX_DEPTH);
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------ expressions */

/* parameters: names or name=default; call: positional, name=value, *a, **kw */
static bool parse_args(parser *P, bool params, tmpl_node *into)
{
    if (!expect(P, T_LPAREN, "'('")) return false;
    nlist args = {0};
    bool saw_kw = false;
    while (!is(P, T_RPAREN)) {
        if (P->failed) break;
        const tmpl_tok *at = cur(P);
        if (at->kind == T_EOF) {
            perr(P, at, "unexpected end of template in argument list");
            break;
        }
        tmpl_node *arg;
        if (!params && at->kind == T_POW) {
            P->i++;
            arg = node(P, N_KWSPREAD, at);
            if (arg) arg->a = parse_expr(P);
        } else if (!params && at->kind == T_MUL && !strcmp(at->s, "*")) {
            P->i++;
            arg = node(P, N_SPREAD, at);
            if (arg) arg->a = parse_expr(P);
        } else {
            arg = parse_expr(P);
            if (arg && is(P, T_EQ)) {
                P->i++;
                if (arg->kind != N_NAME) {
                    perr(P, at, "expected an identifier before '='");
                    break;
                }
                tmpl_node *kw = node(P, N_KWARG, at);
                if (!kw) break;
                kw->s = arg->s;
                kw->slen = arg->slen;
                kw->a = parse_expr(P);
                arg = kw;
                saw_kw = true;
            } else if (arg && params && arg->kind != N_NAME) {
                perr(P, at, "expected a parameter name");
                break;
            } else if (arg && saw_kw) {
                perr(P, at,
                     params ? "non-default argument follows default argument"
                            : "positional argument follows keyword argument");
                break;
            }
        }
        if (!nl_push(P, &args, arg)) break;
        if (is(P, T_COMMA))
            P->i++;
        else if (!is(P, T_RPAREN)) {
            perr(P, cur(P), "expected ',' or ')' in argument list");
            break;
        }
    }
    into->args = nl_finish(P, &args, &into->nargs);
    if (P->failed) return false;
    return expect(P, T_RPAREN, "')'") != NULL;
}

static tmpl_node *parse_call(parser *P, tmpl_node *callee);

static tmpl_node *parse_member(parser *P, tmpl_node *obj)
{
    while (obj && (is(P, T_DOT) || is(P, T_LBRACKET))) {
        const tmpl_tok *op = cur(P);
        P->i++;
        if (op->kind == T_DOT) {
            const tmpl_tok *t = cur(P);
            tmpl_node *n = node(P, N_ATTR, op);
            if (!n) return NULL;
            n->a = obj;
            if (t->kind == T_NAME) {
                n->s = pstrdup(P, t->s, t->len);
                n->slen = t->len;
            } else if (t->kind == T_NUM && !strpbrk(t->s, ".eE") && t->s[0] != '-' &&
                       t->s[0] != '+') {
                n->flags |= AF_INDEX;
                n->i = strtoll(t->s, NULL, 10);
            } else {
                return perr(P, t, "expected an identifier or integer after '.'");
            }
            P->i++;
            obj = n;
            continue;
        }
        /* [expr] or [a:b:c] */
        tmpl_node *parts[3] = {0};
        int np = 0;
        bool slice = false;
        while (!is(P, T_RBRACKET)) {
            if (P->failed) return NULL;
            if (is(P, T_EOF)) return perr(P, cur(P), "unexpected end of template in '[...]'");
            if (np >= 3) return perr(P, cur(P), "a slice takes at most 3 parts");
            if (is(P, T_COLON)) {
                parts[np++] = NULL;
                P->i++;
                slice = true;
            } else {
                parts[np++] = parse_expr(P);
                if (!parts[np - 1]) return NULL;
                if (is(P, T_COLON)) {
                    P->i++;
                    slice = true;
                } else if (!is(P, T_RBRACKET)) {
                    return perr(P, cur(P), "expected ']' or ':'");
                }
            }
        }
        if (np == 0) return perr(P, op, "expected an index or slice inside '[]'");
        P->i++;
        tmpl_node *n = node(P, slice ? N_SLICE : N_INDEX, op);
        if (!n) return NULL;
        n->a = obj;
        n->b = parts[0];
        n->c = parts[1];
        n->d = parts[2];
        obj = n;
    }
    return obj;
}

static tmpl_node *parse_call(parser *P, tmpl_node *callee)
{
    while (callee && is(P, T_LPAREN)) {
        tmpl_node *n = node(P, N_CALL, cur(P));
        if (!n) return NULL;
        n->a = callee;
        if (!parse_args(P, false, n)) return NULL;
        callee = parse_member(P, n);
    }
    return callee;
}

static tmpl_node *parse_call_member(parser *P)
{
    return parse_call(P, parse_member(P, parse_primary(P)));
}

static tmpl_node *parse_unary_sign(parser *P)
{
    const tmpl_tok *t = cur(P);
    if ((t->kind == T_UNARY || t->kind == T_ADD) && (t->s[0] == '-' || t->s[0] == '+') &&
        t->len == 1) {
        if (!enter(P)) return NULL;
        P->i++;
        tmpl_node *n = node(P, N_UNARY, t);
        if (n) {
            n->op = (uint8_t)t->s[0];
            n->a = parse_unary_sign(P);
        }
        P->depth--;
        return n && n->a ? n : NULL;
    }
    return parse_call_member(P);
}

static tmpl_node *parse_filter_expr(parser *P)
{
    tmpl_node *operand = parse_unary_sign(P);
    while (operand && is(P, T_PIPE)) {
        P->i++;
        const tmpl_tok *name = expect(P, T_NAME, "a filter name");
        if (!name) return NULL;
        tmpl_node *f = node(P, N_FILTER, name);
        if (!f) return NULL;
        f->a = operand;
        f->s = pstrdup(P, name->s, name->len);
        f->slen = name->len;
        if (is(P, T_LPAREN) && !parse_args(P, false, f)) return NULL;
        operand = f;
    }
    return operand;
}

static bool bare_test_arg(parser *P)
{
    const tmpl_tok *t = cur(P);
    if (t->kind == T_NUM || t->kind == T_STR || t->kind == T_LBRACKET || t->kind == T_LBRACE)
        return true;
    if (t->kind != T_NAME) return false;
    static const char *const stop[] = {"else", "or", "and", "if", "in", "is", "not"};
    for (size_t i = 0; i < sizeof stop / sizeof stop[0]; i++)
        if (!strcmp(t->s, stop[i])) return false;
    return true;
}

static tmpl_node *parse_test_expr(parser *P)
{
    tmpl_node *operand = parse_filter_expr(P);
    while (operand && is_name(P, 0, "is")) {
        P->i++;
        bool neg = is_name(P, 0, "not");
        if (neg) P->i++;
        const tmpl_tok *name = cur(P);
        if (name->kind != T_NAME) return perr(P, name, "expected a test name after 'is'");
        P->i++;
        tmpl_node *t = node(P, N_TEST, name);
        if (!t) return NULL;
        t->a = operand;
        t->flags = neg;
        t->s = pstrdup(P, name->s, name->len);
        t->slen = name->len;
        if (is(P, T_LPAREN)) {
            if (!parse_args(P, false, t)) return NULL;
        } else if (bare_test_arg(P)) {
            tmpl_node *arg = parse_primary(P);
            if (!arg) return NULL;
            arg = parse_member(P, arg);
            t->args = palloc(P, sizeof *t->args);
            if (!t->args) return pnomem(P);
            t->args[0] = arg;
            t->nargs = 1;
        }
        operand = t;
    }
    return operand;
}

static tmpl_node *binary(parser *P, const tmpl_tok *at, int op, tmpl_node *l, tmpl_node *r)
{
    if (!l || !r) return NULL;
    tmpl_node *n = node(P, N_BINARY, at);
    if (!n) return NULL;
    n->op = (uint8_t)op;
    n->a = l;
    n->b = r;
    return n;
}

static tmpl_node *parse_pow(parser *P)
{
    tmpl_node *l = parse_test_expr(P);
    while (l && is(P, T_POW)) {
        const tmpl_tok *op = cur(P);
        P->i++;
        l = binary(P, op, BOP_POW, l, parse_test_expr(P));
    }
    return l;
}

static tmpl_node *parse_mul(parser *P)
{
    tmpl_node *l = parse_pow(P);
    while (l && is(P, T_MUL)) {
        const tmpl_tok *op = cur(P);
        P->i++;
        int o = !strcmp(op->s, "*")    ? BOP_MUL
                : !strcmp(op->s, "/")  ? BOP_DIV
                : !strcmp(op->s, "//") ? BOP_FLOORDIV
                                       : BOP_MOD;
        l = binary(P, op, o, l, parse_pow(P));
    }
    return l;
}

static tmpl_node *parse_add(parser *P)
{
    tmpl_node *l = parse_mul(P);
    while (l && is(P, T_ADD)) {
        const tmpl_tok *op = cur(P);
        P->i++;
        int o = op->s[0] == '+' ? BOP_ADD : op->s[0] == '-' ? BOP_SUB : BOP_CONCAT;
        l = binary(P, op, o, l, parse_mul(P));
    }
    return l;
}

static tmpl_node *parse_compare(parser *P)
{
    tmpl_node *l = parse_add(P);
    while (l) {
        const tmpl_tok *op = cur(P);
        int o;
        if (is_name(P, 0, "not") && is_name(P, 1, "in")) {
            o = BOP_NOTIN;
            P->i += 2;
        } else if (is_name(P, 0, "in")) {
            o = BOP_IN;
            P->i++;
        } else if (op->kind == T_CMP) {
            const char *s = op->s;
            o = !strcmp(s, "==")   ? BOP_EQ
                : !strcmp(s, "!=") ? BOP_NE
                : !strcmp(s, "<")  ? BOP_LT
                : !strcmp(s, ">")  ? BOP_GT
                : !strcmp(s, "<=") ? BOP_LE
                                   : BOP_GE;
            P->i++;
        } else {
            break;
        }
        l = binary(P, op, o, l, parse_add(P));
    }
    return l;
}

static tmpl_node *parse_not(parser *P)
{
    if (is_name(P, 0, "not")) {
        const tmpl_tok *op = cur(P);
        if (!enter(P)) return NULL;
        P->i++;
        tmpl_node *n = node(P, N_UNARY, op);
        if (n) {
            n->op = '!';
            n->a = parse_not(P);
        }
        P->depth--;
        return n && n->a ? n : NULL;
    }
    return parse_compare(P);
}

static tmpl_node *parse_and(parser *P)
{
    tmpl_node *l = parse_not(P);
    while (l && is_name(P, 0, "and")) {
        const tmpl_tok *op = cur(P);
        P->i++;
        l = binary(P, op, BOP_AND, l, parse_not(P));
    }
    return l;
}

static tmpl_node *parse_or(parser *P)
{
    tmpl_node *l = parse_and(P);
    while (l && is_name(P, 0, "or")) {
        const tmpl_tok *op = cur(P);
        P->i++;
        l = binary(P, op, BOP_OR, l, parse_and(P));
    }
    return l;
}

static tmpl_node *parse_expr(parser *P)
{
    if (!enter(P)) return NULL;
    tmpl_node *a = parse_or(P);
    if (a && is_name(P, 0, "if")) {
        const tmpl_tok *at = cur(P);
        P->i++;
        tmpl_node *test = parse_or(P);
        if (!test) goto out;
        if (is_name(P, 0, "else")) {
            P->i++;
            tmpl_node *n = node(P, N_TERNARY, at);
            if (!n) goto fail;
            n->a = test;
            n->b = a;
            n->c = parse_expr(P);
            a = n->c ? n : NULL;
        } else {
            tmpl_node *n = node(P, N_SELECT, at);
            if (!n) goto fail;
            n->a = test;
            n->b = a;
            a = n;
        }
    }
out:
    P->depth--;
    return P->failed ? NULL : a;
fail:
    P->depth--;
    return NULL;
}

/* a or a, b, c -> tuple (primary=true: names / parenthesized only, for `for` targets) */
static tmpl_node *parse_sequence(parser *P, bool primary)
{
    const tmpl_tok *at = cur(P);
    tmpl_node *first = primary ? parse_primary(P) : parse_expr(P);
    if (!first || !is(P, T_COMMA)) return first;
    nlist items = {0};
    nl_push(P, &items, first);
    while (is(P, T_COMMA)) {
        P->i++;
        const tmpl_tok *t = cur(P);
        if (t->kind == T_RPAREN || t->kind == T_EQ || t->kind == T_CLOSE_STMT ||
            (t->kind == T_NAME && !strcmp(t->s, "in")))
            break; /* trailing comma */
        if (!nl_push(P, &items, primary ? parse_primary(P) : parse_expr(P))) break;
    }
    tmpl_node *n = node(P, N_TUPLE, at);
    if (n)
        n->args = nl_finish(P, &items, &n->nargs);
    else
        free(items.v);
    return P->failed ? NULL : n;
}

static tmpl_node *parse_primary(parser *P)
{
    const tmpl_tok *t = cur(P);
    if (!enter(P)) return NULL;
    tmpl_node *n = NULL;
    P->i++;
    switch (t->kind) {
    case T_NUM: {
        bool is_float = strpbrk(t->s, ".eE") != NULL;
        errno = 0;
        long long v = is_float ? 0 : strtoll(t->s, NULL, 10);
        if (!is_float && errno == ERANGE) is_float = true;
        n = node(P, is_float ? N_FLOAT : N_INT, t);
        if (n) {
            n->i = v;
            n->f = is_float ? strtod(t->s, NULL) : 0;
        }
        break;
    }
    case T_STR: {
        /* adjacent string literals concatenate */
        size_t total = t->len, k = P->i;
        while (k < P->n && P->tok[k].kind == T_STR)
            total += P->tok[k++].len;
        char *s = palloc(P, total + 1);
        if (!s) return pnomem(P);
        size_t o = 0;
        memcpy(s, t->s, t->len);
        o = t->len;
        while (is(P, T_STR)) {
            memcpy(s + o, cur(P)->s, cur(P)->len);
            o += cur(P)->len;
            P->i++;
        }
        s[o] = '\0';
        n = node(P, N_STR, t);
        if (n) {
            n->s = s;
            n->slen = o;
        }
        break;
    }
    case T_NAME:
        n = node(P, N_NAME, t);
        if (n) {
            n->s = pstrdup(P, t->s, t->len);
            n->slen = t->len;
        }
        break;
    case T_LPAREN:
        n = parse_sequence(P, false);
        if (n && !expect(P, T_RPAREN, "')'")) n = NULL;
        break;
    case T_LBRACKET: {
        nlist items = {0};
        while (!is(P, T_RBRACKET) && !P->failed) {
            if (is(P, T_EOF)) {
                perr(P, cur(P), "unexpected end of template in list literal");
                break;
            }
            if (!nl_push(P, &items, parse_expr(P))) break;
            if (is(P, T_COMMA))
                P->i++;
            else if (!is(P, T_RBRACKET))
                perr(P, cur(P), "expected ',' or ']' in list literal");
        }
        n = node(P, N_LIST, t);
        if (n)
            n->args = nl_finish(P, &items, &n->nargs);
        else
            free(items.v);
        if (n && !P->failed) P->i++;
        break;
    }
    case T_LBRACE: {
        nlist items = {0};
        while (!is(P, T_RBRACE) && !P->failed) {
            if (is(P, T_EOF)) {
                perr(P, cur(P), "unexpected end of template in dict literal");
                break;
            }
            if (!nl_push(P, &items, parse_expr(P))) break;
            if (!expect(P, T_COLON, "':' in dict literal")) break;
            if (!nl_push(P, &items, parse_expr(P))) break;
            if (is(P, T_COMMA))
                P->i++;
            else if (!is(P, T_RBRACE))
                perr(P, cur(P), "expected ',' or '}' in dict literal");
        }
        n = node(P, N_DICT, t);
        if (n)
            n->args = nl_finish(P, &items, &n->nargs);
        else
            free(items.v);
        if (n && !P->failed) P->i++;
        break;
    }
    case T_EOF:
        perr(P, t, "unexpected end of template");
        break;
    default:
        perr(P, t, "unexpected '%s'", t->s);
        break;
    }
    P->depth--;
    return P->failed ? NULL : n;
}

/* ------------------------------------------------------------------ statements */

static bool is_stmt(parser *P, const char *const *names, size_t nn)
{
    if (!is(P, T_OPEN_STMT) || peek(P, 1)->kind != T_NAME) return false;
    for (size_t i = 0; i < nn; i++)
        if (!strcmp(peek(P, 1)->s, names[i])) return true;
    return false;
}

/* Parses statements until one of `ends` (not consumed). */
static tmpl_node **parse_body(parser *P, const char *const *ends, size_t ne, uint32_t *n,
                              const tmpl_tok *opener)
{
    nlist l = {0};
    while (!P->failed && !is_stmt(P, ends, ne)) {
        if (is(P, T_EOF)) {
            perr(P, opener, "'%s' is never closed (expected {%% %s %%})", opener->s, ends[ne - 1]);
            break;
        }
        if (!nl_push(P, &l, parse_any(P))) break;
    }
    return nl_finish(P, &l, n);
}

static bool end_tag(parser *P, const char *name)
{
    if (!expect(P, T_OPEN_STMT, "'{%'")) return false;
    if (!is_name(P, 0, name)) return perr(P, cur(P), "expected '%s'", name), false;
    P->i++;
    return expect(P, T_CLOSE_STMT, "'%}'") != NULL;
}

static void mark_special_args(tmpl_node *n, tmpl_node **body, uint32_t nb);

static tmpl_node *parse_if(parser *P, const tmpl_tok *at)
{
    static const char *const ends[] = {"elif", "else", "endif"};
    tmpl_node *n = node(P, N_IF, at);
    if (!n) return NULL;
    if (!(n->a = parse_expr(P))) return NULL;
    if (!expect(P, T_CLOSE_STMT, "'%}'")) return NULL;
    n->body = parse_body(P, ends, 3, &n->nbody, at);
    if (P->failed) return NULL;
    if (is_name(P, 1, "elif")) {
        P->i += 2;
        const tmpl_tok *e = &P->tok[P->i - 1];
        if (!enter(P)) return NULL;
        tmpl_node *sub = parse_if(P, e);
        P->depth--;
        if (!sub) return NULL;
        n->els = palloc(P, sizeof *n->els);
        if (!n->els) return pnomem(P);
        n->els[0] = sub;
        n->nels = 1;
        return n; /* the nested if consumed {% endif %} */
    }
    if (is_name(P, 1, "else")) {
        P->i += 2;
        if (!expect(P, T_CLOSE_STMT, "'%}'")) return NULL;
        n->els = parse_body(P, ends + 2, 1, &n->nels, at);
        if (P->failed) return NULL;
    }
    return end_tag(P, "endif") ? n : NULL;
}

static tmpl_node *parse_for(parser *P, const tmpl_tok *at)
{
    static const char *const ends[] = {"else", "endfor"};
    tmpl_node *n = node(P, N_FOR, at);
    if (!n) return NULL;
    n->a = parse_sequence(P, true);
    if (!n->a) return NULL;
    if (n->a->kind != N_NAME && n->a->kind != N_TUPLE)
        return perr(P, at, "expected a name or tuple as the loop variable");
    if (!is_name(P, 0, "in")) return perr(P, cur(P), "expected 'in' after the loop variable");
    P->i++;
    tmpl_node *it = parse_expr(P);
    if (!it) return NULL;
    if (it->kind == N_SELECT) {
        n->b = it->b;
        n->c = it->a;
    } else {
        n->b = it;
    }
    if (!expect(P, T_CLOSE_STMT, "'%}'")) return NULL;
    n->body = parse_body(P, ends, 2, &n->nbody, at);
    if (P->failed) return NULL;
    if (is_name(P, 1, "else")) {
        P->i += 2;
        if (!expect(P, T_CLOSE_STMT, "'%}'")) return NULL;
        n->els = parse_body(P, ends + 1, 1, &n->nels, at);
        if (P->failed) return NULL;
    }
    return end_tag(P, "endfor") ? n : NULL;
}

static tmpl_node *parse_set(parser *P, const tmpl_tok *at)
{
    static const char *const ends[] = {"endset"};
    tmpl_node *target = parse_sequence(P, false);
    if (!target) return NULL;
    if (target->kind != N_NAME && target->kind != N_TUPLE && target->kind != N_ATTR)
        return perr(P, at, "cannot assign to this expression");
    if (is(P, T_EQ)) {
        P->i++;
        tmpl_node *n = node(P, N_SET, at);
        if (!n) return NULL;
        n->a = target;
        if (!(n->b = parse_sequence(P, false))) return NULL;
        return expect(P, T_CLOSE_STMT, "'%}'") ? n : NULL;
    }
    if (!expect(P, T_CLOSE_STMT, "'=' or '%}'")) return NULL;
    tmpl_node *n = node(P, N_SETBLK, at);
    if (!n) return NULL;
    n->a = target;
    n->body = parse_body(P, ends, 1, &n->nbody, at);
    if (P->failed) return NULL;
    return end_tag(P, "endset") ? n : NULL;
}

static tmpl_node *parse_macro(parser *P, const tmpl_tok *at)
{
    static const char *const ends[] = {"endmacro"};
    const tmpl_tok *name = expect(P, T_NAME, "a macro name");
    if (!name) return NULL;
    tmpl_node *n = node(P, N_MACRO, at);
    if (!n) return NULL;
    n->s = pstrdup(P, name->s, name->len);
    n->slen = name->len;
    if (!parse_args(P, true, n)) return NULL;
    if (!expect(P, T_CLOSE_STMT, "'%}'")) return NULL;
    n->body = parse_body(P, ends, 1, &n->nbody, at);
    if (P->failed) return NULL;
    mark_special_args(n, n->body, n->nbody);
    return end_tag(P, "endmacro") ? n : NULL;
}

static tmpl_node *parse_callblock(parser *P, const tmpl_tok *at)
{
    static const char *const ends[] = {"endcall"};
    tmpl_node *n = node(P, N_CALLBLK, at);
    if (!n) return NULL;
    if (is(P, T_LPAREN) && !parse_args(P, true, n)) return NULL;
    const tmpl_tok *ct = cur(P);
    tmpl_node *callee = parse_primary(P);
    if (!callee) return NULL;
    if (callee->kind != N_NAME) return perr(P, ct, "expected a macro name after 'call'");
    tmpl_node *call = node(P, N_CALL, ct);
    if (!call) return NULL;
    call->a = callee;
    if (!parse_args(P, false, call)) return NULL;
    n->a = call;
    if (!expect(P, T_CLOSE_STMT, "'%}'")) return NULL;
    n->body = parse_body(P, ends, 1, &n->nbody, at);
    if (P->failed) return NULL;
    mark_special_args(n, n->body, n->nbody);
    return end_tag(P, "endcall") ? n : NULL;
}

static tmpl_node *parse_filterblock(parser *P, const tmpl_tok *at)
{
    static const char *const ends[] = {"endfilter"};
    const tmpl_tok *name = expect(P, T_NAME, "a filter name");
    if (!name) return NULL;
    tmpl_node *f = node(P, N_FILTER, name);
    tmpl_node *n = node(P, N_FILTBLK, at);
    if (!f || !n) return NULL;
    f->s = pstrdup(P, name->s, name->len);
    f->slen = name->len;
    if (is(P, T_LPAREN) && !parse_args(P, false, f)) return NULL;
    n->a = f;
    if (!expect(P, T_CLOSE_STMT, "'%}'")) return NULL;
    n->body = parse_body(P, ends, 1, &n->nbody, at);
    if (P->failed) return NULL;
    return end_tag(P, "endfilter") ? n : NULL;
}

static tmpl_node *parse_stmt(parser *P)
{
    const tmpl_tok *open = cur(P);
    P->i++; /* {% */
    const tmpl_tok *at = cur(P);
    if (at->kind != T_NAME) return perr(P, at, "expected a statement name after '{%%'");
    P->i++;
    if (!enter(P)) return NULL;
    tmpl_node *n = NULL;
    const char *s = at->s;
    if (!strcmp(s, "if"))
        n = parse_if(P, at);
    else if (!strcmp(s, "for"))
        n = parse_for(P, at);
    else if (!strcmp(s, "set"))
        n = parse_set(P, at);
    else if (!strcmp(s, "macro"))
        n = parse_macro(P, at);
    else if (!strcmp(s, "call"))
        n = parse_callblock(P, at);
    else if (!strcmp(s, "filter"))
        n = parse_filterblock(P, at);
    else if (!strcmp(s, "break") || !strcmp(s, "continue")) {
        n = node(P, s[0] == 'b' ? N_BREAK : N_CONTINUE, at);
        if (n && !expect(P, T_CLOSE_STMT, "'%}'")) n = NULL;
    } else {
        perr(P, at, "unknown statement '%s'", s);
    }
    (void)open;
    P->depth--;
    return P->failed ? NULL : n;
}

static tmpl_node *parse_any(parser *P)
{
    const tmpl_tok *t = cur(P);
    switch (t->kind) {
    case T_TEXT: {
        P->i++;
        tmpl_node *n = node(P, N_TEXT, t);
        if (n) {
            n->s = pstrdup(P, t->s, t->len);
            n->slen = t->len;
        }
        return n;
    }
    case T_COMMENT:
        P->i++;
        return node(P, N_TEXT, t); /* empty text */
    case T_OPEN_STMT:
        return parse_stmt(P);
    case T_OPEN_EXPR: {
        P->i++;
        tmpl_node *n = node(P, N_OUTPUT, t);
        if (!n || !(n->a = parse_expr(P))) return NULL;
        return expect(P, T_CLOSE_EXPR, "'}}'") ? n : NULL;
    }
    default:
        return perr(P, t, "unexpected '%s'", t->s);
    }
}

/* kwargs / varargs: a macro (or call block) whose body names them accepts extra
 * keyword / positional arguments. */
static bool names_var(const tmpl_node *n, const char *name, int depth)
{
    if (!n || depth > 400) return false;
    if (n->kind == N_NAME && !strcmp(n->s, name)) return true;
    if (n->kind == N_MACRO) return false; /* a nested macro has its own */
    if (names_var(n->a, name, depth + 1) || names_var(n->b, name, depth + 1) ||
        names_var(n->c, name, depth + 1) || names_var(n->d, name, depth + 1))
        return true;
    for (uint32_t i = 0; i < n->nargs; i++)
        if (names_var(n->args[i], name, depth + 1)) return true;
    for (uint32_t i = 0; i < n->nbody; i++)
        if (names_var(n->body[i], name, depth + 1)) return true;
    for (uint32_t i = 0; i < n->nels; i++)
        if (names_var(n->els[i], name, depth + 1)) return true;
    return false;
}

static void mark_special_args(tmpl_node *n, tmpl_node **body, uint32_t nb)
{
    for (uint32_t i = 0; i < nb; i++) {
        if (names_var(body[i], "kwargs", 0)) n->flags |= MF_KWARGS;
        if (names_var(body[i], "varargs", 0)) n->flags |= MF_VARARGS;
    }
}

kiln_code tmpl_parse(tmpl_template *t, const tmpl_toks *toks, kiln_err *err)
{
    parser P = {.t = t, .tok = toks->v, .n = toks->n, .err = err};
    nlist body = {0};
    while (!P.failed && !is(&P, T_EOF))
        if (!nl_push(&P, &body, parse_any(&P))) break;
    t->body = nl_finish(&P, &body, &t->nbody);
    if (P.failed) return err ? err->code : KILN_E_INVALID;
    return KILN_OK;
}
