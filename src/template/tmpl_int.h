/*
 * tmpl_int.h — what template/ files share and nothing outside template/ includes:
 * the value layout, the AST, tokens and the render runtime.
 *
 * Values (tmpl_value.c). Every value is a refcounted heap object except the four
 * immortal singletons (undefined, none, true, false). Two kinds of owner:
 *   external   built through the public API (tmpl.h); a render never touches their
 *              refcounts, so one context may be read by several renders;
 *   render     built during a render: linked on the runtime's list and counted in
 *              rt->mem; freed when their count drops to 0, and whatever is left
 *              (reference cycles through namespaces or caller closures, and values
 *              released more than 64 containers deep, left in place so that
 *              freeing never recurses without bound) is swept by rt_sweep() when
 *              the render ends.
 * Invariants:
 *   (1) an external value never points to a render value;
 *   (2) only namespaces, scopes, and containers still being built are mutated;
 *       everything a template can see is otherwise immutable;
 *   (3) every tmpl_value * returned by an eval/filter/method function is owned (+1)
 *       by the caller; NULL means rt->err has been filled.
 */
#ifndef KILN_TMPL_INT_H
#define KILN_TMPL_INT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "template/tmpl.h"

/* ------------------------------------------------------------------ values */

typedef enum {
    TV_UNDEF,
    TV_NONE,
    TV_BOOL,
    TV_INT,
    TV_FLOAT,
    TV_STR,
    TV_LIST,  /* also tuples */
    TV_DICT,  /* ordered; keys are TV_STR */
    TV_NS,    /* namespace(): a mutable dict */
    TV_FUNC,  /* builtin (bound or global), macro, or call-block caller */
    TV_SCOPE, /* a variable scope: dict + parent */
} tv_kind;

typedef enum { FN_BUILTIN, FN_MACRO, FN_CALLER } fn_kind;

typedef struct tmpl_rt tmpl_rt;
typedef struct tmpl_node tmpl_node;
typedef struct tmpl_builtin tmpl_builtin;

struct tmpl_value {
    uint32_t refcnt;
    uint8_t kind;     /* tv_kind */
    uint8_t external; /* 1: public-API or immortal value; refcount untouched by renders */
    tmpl_value *gc_prev, *gc_next; /* render values: rt's list */
    size_t bytes;                  /* accounted size (render values) */
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            size_t len;
            char *p; /* inline after the struct, NUL-terminated */
        } s;
        struct {
            tmpl_value **items;
            size_t n, cap;
        } l;
        struct {
            tmpl_value **keys, **vals;
            size_t n, cap;
            tmpl_value *parent; /* TV_SCOPE only */
        } d;
        struct {
            uint8_t fk; /* fn_kind */
            const tmpl_builtin *bi;
            tmpl_value *self;      /* bound receiver (methods) or NULL */
            const tmpl_node *node; /* macro / call block */
            tmpl_value *scope;     /* caller: the scope of the call block */
        } fn;
    } u;
};

/* Arguments of a call: positional then keyword. Values are borrowed. */
typedef struct {
    tmpl_value **pos;
    size_t npos;
    const char **kw_names;
    tmpl_value **kw_vals;
    size_t nkw;
} tmpl_args;

typedef tmpl_value *(*tmpl_builtin_fn)(tmpl_rt *rt, const tmpl_node *at, tmpl_value *self,
                                       const tmpl_args *a);
struct tmpl_builtin {
    const char *name;
    tmpl_builtin_fn fn;
};

extern tmpl_value tmpl_undef_v, tmpl_none_v, tmpl_true_v, tmpl_false_v;
#define TV_UNDEFINED (&tmpl_undef_v)
#define TV_NONEV (&tmpl_none_v)
#define TV_BOOLV(c) ((c) ? &tmpl_true_v : &tmpl_false_v)

/* ------------------------------------------------------------------ AST */

typedef enum {
    /* statements */
    N_TEXT,    /* s */
    N_OUTPUT,  /* {{ a }} */
    N_IF,      /* a: test, body, els */
    N_FOR,     /* a: target, b: iterable, c: filter or NULL, body, els */
    N_SET,     /* a: target, b: value */
    N_SETBLK,  /* a: target, body */
    N_MACRO,   /* s: name, args: params, body; flags: MF_* */
    N_CALLBLK, /* a: N_CALL, args: caller params, body; flags: MF_* */
    N_FILTBLK, /* a: N_FILTER with a == NULL, body */
    N_BREAK,
    N_CONTINUE,
    /* expressions */
    N_INT,     /* i */
    N_FLOAT,   /* f */
    N_STR,     /* s */
    N_NAME,    /* s */
    N_LIST,    /* args */
    N_TUPLE,   /* args */
    N_DICT,    /* args: key, value, key, value ... */
    N_UNARY,   /* op: '-', '+', '!' (not); a */
    N_BINARY,  /* op: BOP_*; a, b */
    N_TERNARY, /* a: cond, b: then, c: else */
    N_SELECT,  /* b if a (no else): undefined when a is false */
    N_ATTR,    /* a.s  (or a.i when flags & AF_INDEX) */
    N_INDEX,   /* a[b] */
    N_SLICE,   /* a[b:c:d] (each may be NULL) */
    N_CALL,    /* a(args) */
    N_FILTER,  /* a | s(args) */
    N_TEST,    /* a is [not] s(args); flags: 1 = negated */
    N_KWARG,   /* s = a */
    N_SPREAD,  /* *a */
    N_KWSPREAD /* **a */
} node_kind;

enum {
    BOP_OR = 1,
    BOP_AND,
    BOP_EQ,
    BOP_NE,
    BOP_LT,
    BOP_GT,
    BOP_LE,
    BOP_GE,
    BOP_IN,
    BOP_NOTIN,
    BOP_ADD,
    BOP_SUB,
    BOP_CONCAT,
    BOP_MUL,
    BOP_DIV,
    BOP_FLOORDIV,
    BOP_MOD,
    BOP_POW
};
enum { MF_KWARGS = 1, MF_VARARGS = 2, AF_INDEX = 4 };

struct tmpl_node {
    uint8_t kind, op, flags;
    uint32_t pos; /* byte offset in the original source */
    tmpl_node *a, *b, *c, *d;
    tmpl_node **args; /* arguments / list items / params */
    tmpl_node **body, **els;
    uint32_t nargs, nbody, nels;
    const char *s; /* NUL-terminated; bytes may contain NUL, see slen */
    size_t slen;
    int64_t i;
    double f;
};

/* ------------------------------------------------------------------ tokens */

typedef enum {
    T_TEXT,
    T_NUM,
    T_STR,
    T_NAME,
    T_EQ,
    T_LPAREN,
    T_RPAREN,
    T_OPEN_STMT,
    T_CLOSE_STMT,
    T_OPEN_EXPR,
    T_CLOSE_EXPR,
    T_LBRACKET,
    T_RBRACKET,
    T_LBRACE,
    T_RBRACE,
    T_COMMA,
    T_DOT,
    T_COLON,
    T_PIPE,
    T_ADD,
    T_MUL,
    T_POW,
    T_CMP,
    T_UNARY,
    T_COMMENT,
    T_EOF
} tok_kind;

typedef struct {
    uint8_t kind;
    uint32_t pos; /* source offset */
    char *s;      /* OWNED by the token list (text, names, operators, string literals) */
    size_t len;
} tmpl_tok;

typedef struct {
    tmpl_tok *v;
    size_t n, cap;
} tmpl_toks;

/* A chunked allocator for the AST; freed in one go. */
typedef struct tmpl_chunk tmpl_chunk;

struct tmpl_template {
    tmpl_options opt;
    char *src; /* OWNED copy of the source, for line:column */
    size_t src_len;
    tmpl_node **body;
    uint32_t nbody;
    tmpl_chunk *chunks;
};

/* ------------------------------------------------------------------ runtime */

typedef struct {
    char *p;
    size_t len, cap;
    struct tmpl_rt *rt; /* set by the first sb_put with a render: cap is in rt->sb_mem */
} tmpl_sb;

struct tmpl_rt {
    const tmpl_template *t;
    kiln_err *err;
    bool failed;
    tmpl_value gc; /* list sentinel */
    size_t mem, mem_max, out_max;
    size_t sb_mem; /* capacity of the live text builders (not bounded by mem_max) */
    size_t held;   /* reserved from opt.acct_reserve: >= mem + sb_mem, never lowered */
    uint64_t iters, iters_max;
    uint32_t depth, depth_max;
    uint32_t cur_pos;    /* source offset of the node being evaluated (for errors) */
    uint32_t free_depth; /* nesting of tv_decref releasing children (bounded) */
    tmpl_value *context; /* the caller's dict (external) or NULL */
    tmpl_value *globals; /* TV_SCOPE with range, namespace, ... */
};

/* tmpl_lex.c */
kiln_code tmpl_lex(const char *src, size_t len, const tmpl_options *opt, tmpl_toks *out,
                   kiln_err *err);
void tmpl_toks_free(tmpl_toks *t);
void tmpl_linecol(const char *src, size_t len, uint32_t pos, uint32_t *line, uint32_t *col);

/* tmpl_parse.c */
kiln_code tmpl_parse(tmpl_template *t, const tmpl_toks *toks, kiln_err *err);
void tmpl_chunks_free(tmpl_chunk *c);

/* tmpl_value.c */
tmpl_value *tv_alloc(tmpl_rt *rt, uint8_t kind, size_t extra);
void tv_incref(tmpl_value *v);
void tv_decref(tmpl_rt *rt, tmpl_value *v);
static inline tmpl_value *tv_ref(tmpl_value *v)
{
    tv_incref(v);
    return v;
}
tmpl_value *tv_int(tmpl_rt *rt, int64_t i);
tmpl_value *tv_float(tmpl_rt *rt, double f);
tmpl_value *tv_str(tmpl_rt *rt, const char *s, size_t len);
tmpl_value *tv_cstr(tmpl_rt *rt, const char *s);
tmpl_value *tv_list(tmpl_rt *rt, size_t cap);
tmpl_value *tv_dict(tmpl_rt *rt, uint8_t kind /* TV_DICT, TV_NS, TV_SCOPE */);
bool tv_list_push(tmpl_rt *rt, tmpl_value *l, tmpl_value *item); /* takes item */
bool tv_dict_set(tmpl_rt *rt, tmpl_value *d, const char *k, size_t klen, tmpl_value *v);
bool tv_dict_setk(tmpl_rt *rt, tmpl_value *d, tmpl_value *key, tmpl_value *v); /* takes both */
tmpl_value *tv_dict_get(const tmpl_value *d, const char *k, size_t klen); /* borrowed or NULL */
tmpl_value *tv_func(tmpl_rt *rt, uint8_t fk, const tmpl_builtin *bi, tmpl_value *self,
                    const tmpl_node *node, tmpl_value *scope);
void rt_init(tmpl_rt *rt, const tmpl_template *t, kiln_err *err);
void rt_sweep(tmpl_rt *rt);
bool rt_charge(tmpl_rt *rt, size_t bytes);
bool rt_account(tmpl_rt *rt);
void rt_release(tmpl_rt *rt);

/* tmpl_str.c: builders, Jinja str(), numbers, UTF-8 */
bool sb_put(tmpl_rt *rt, tmpl_sb *b, const char *s, size_t n);
bool sb_putc(tmpl_rt *rt, tmpl_sb *b, char c);
bool sb_printf(tmpl_rt *rt, tmpl_sb *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
tmpl_value *sb_take(tmpl_rt *rt, tmpl_sb *b); /* the builder's bytes as a TV_STR; frees b */
void sb_free(tmpl_sb *b);
bool tv_write_str(tmpl_rt *rt, tmpl_sb *b, const tmpl_value *v); /* Jinja output form */
tmpl_value *tv_to_str(tmpl_rt *rt, tmpl_value *v);               /* owned TV_STR */
void fmt_float(char *buf, size_t n, double f);                   /* Python repr */
bool tv_truthy(const tmpl_value *v);
const char *tv_kind_name(const tmpl_value *v);
size_t utf8_next(const char *s, size_t len, size_t i, uint32_t *cp); /* bytes of one cp */
size_t utf8_put(char *out, uint32_t cp);
size_t utf8_cplen(const char *s, size_t len);
size_t js_space(const char *s, size_t len, size_t i); /* bytes of a JS \s char at i, or 0 */
bool py_space(uint32_t cp);
/* Offset of the first n[0..nn) in h[from..hn), or SIZE_MAX. */
size_t str_find(const char *h, size_t hn, const char *n, size_t nn, size_t from);

/* tmpl_json.c */
typedef struct {
    int indent; /* < 0: none */
    bool ensure_ascii, sort_keys, undef_as_null;
    const char *item_sep, *key_sep;
} tmpl_json_opt;
bool tv_write_json(tmpl_rt *rt, tmpl_sb *b, const tmpl_value *v, const tmpl_json_opt *o, int depth);
bool json_write_string(tmpl_rt *rt, tmpl_sb *b, const char *s, size_t n, bool ascii);

/* tmpl_eval.c */
tmpl_value *rt_fail(tmpl_rt *rt, const tmpl_node *at, kiln_code code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
tmpl_value *rt_nomem(tmpl_rt *rt);
tmpl_value *tv_call(tmpl_rt *rt, const tmpl_node *at, tmpl_value *fn, const tmpl_args *a,
                    tmpl_value *env);
tmpl_value *tv_getattr(tmpl_rt *rt, const tmpl_node *at, tmpl_value *obj, tmpl_value *key);
tmpl_value *tv_attr_path(tmpl_rt *rt, tmpl_value *obj, const char *path, size_t len);
bool rt_enter(tmpl_rt *rt, const tmpl_node *at);
static inline void rt_leave(tmpl_rt *rt)
{
    rt->depth--;
}

/* tmpl_ops.c */
bool tv_eq(const tmpl_value *a, const tmpl_value *b);        /* == */
bool tv_strict_eq(const tmpl_value *a, const tmpl_value *b); /* `in`, equalto */
int tv_compare(tmpl_rt *rt, const tmpl_node *at, const tmpl_value *a, const tmpl_value *b,
               bool case_sensitive, bool *ok); /* sort order */
tmpl_value *tv_binop(tmpl_rt *rt, const tmpl_node *at, int op, tmpl_value *l, tmpl_value *r);
tmpl_value *tv_contains(tmpl_rt *rt, const tmpl_node *at, tmpl_value *needle, tmpl_value *hay,
                        bool negate);
tmpl_value *tv_slice(tmpl_rt *rt, const tmpl_node *at, tmpl_value *obj, tmpl_value *start,
                     tmpl_value *stop, tmpl_value *step);
bool tv_sort(tmpl_rt *rt, const tmpl_node *at, tmpl_value **items, size_t n, bool reverse,
             bool case_sensitive, const char *attr, size_t attr_len);

/* tmpl_filters.c */
tmpl_value *tmpl_filter(tmpl_rt *rt, const tmpl_node *at, const char *name, tmpl_value *v,
                        const tmpl_args *a, tmpl_value *env);
tmpl_value *tmpl_test(tmpl_rt *rt, const tmpl_node *at, const char *name, tmpl_value *v,
                      const tmpl_args *a, bool *result);
tmpl_value *tmpl_list_of(tmpl_rt *rt, const tmpl_node *at, tmpl_value *v); /* iterate */

/* tmpl_methods.c */
const tmpl_builtin *tmpl_method(const tmpl_value *self, const char *name, size_t len);
tmpl_value *tmpl_globals(tmpl_rt *rt); /* a new TV_SCOPE with the global functions */
tmpl_value *arg_get(const tmpl_args *a, size_t i, const char *kw); /* borrowed or NULL */
tmpl_value *str_strip(tmpl_rt *rt, tmpl_value *s, tmpl_value *chars, bool left, bool right);
tmpl_value *str_case(tmpl_rt *rt, tmpl_value *s, int mode); /* 0 lower 1 upper 2 title 3 cap */
tmpl_value *str_replace(tmpl_rt *rt, const tmpl_node *at, tmpl_value *s, tmpl_value *old,
                        tmpl_value *nw, tmpl_value *count);
tmpl_value *dict_items(tmpl_rt *rt, tmpl_value *d);
tmpl_value *dict_dictsort(tmpl_rt *rt, const tmpl_node *at, tmpl_value *d, const tmpl_args *a);

#endif
