/*
 * gr_schema_int.h — shared by gr_schema.c (structure: refs, combinators,
 * objects, arrays) and gr_schema_scalar.c (strings, formats, numbers).
 */
#ifndef KILN_GR_SCHEMA_INT_H
#define KILN_GR_SCHEMA_INT_H

#include "grammar/gr_int.h"

#define SC_MAX_LIST 64

typedef struct {
    const json_t *s; /* BORROWED (the schema, or a kept copy) */
    uint64_t h;      /* hash of its canonical text: equal subschemas share a rule */
    gr_rule r;
} sc_memo;

typedef struct {
    gr_builder *b;
    const json_t *root;
    bool strict;
    sc_memo *memo;            /* OWNED: open-addressing table, schema (by content) -> its rule */
    int32_t n_memo, cap_memo; /* cap_memo: a power of two */
    struct {
        const char *name;
        gr_rule r;
    } fmt[32]; /* format name -> its string rule (name BORROWED from the schema) */
    int n_fmt;
    json_t **tmp; /* OWNED references: schema copies made while distributing anyOf */
    int32_t n_tmp, cap_tmp;
    gr_rule r_string, r_number, r_integer, r_any; /* shared rules, -1 until first use */
    const gr_value_syntax *syn; /* NULL: JSON; else strings raw between syn->quote */
    gr_expr raw;                /* syn: a string body (text without syn->forbid); -1 until used */
    int depth;
    char path[192]; /* where we are, for messages ("/properties/a/items") */
    kiln_err *err;
} sc;

/* Fails with code, prefixing the message with the schema path. Returns -1. */
gr_expr sc_fail(sc *c, kiln_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The first member of list[0..n) holding key, or NULL. */
const json_t *sc_get(const json_t *const *list, int n, const char *key);

/* gr_schema_scalar.c: the string / number / integer alternatives of a conjunction. */
gr_expr sc_string(sc *c, const json_t *const *list, int n);
gr_expr sc_number(sc *c, const json_t *const *list, int n, bool integer);
/* A JSON value as compact text (enum/const); *out OWNED (free). */
char *sc_dump(const json_t *v);
/* syn: a string body as raw text, and a string (syn->quote on both sides). */
gr_expr sc_raw(sc *c);
gr_expr sc_quoted(sc *c, gr_expr body);
/* syn: an unbounded integer / number a JSON reader reads back exactly (no
 * overflow: at most 18 integer digits, 2 exponent digits). */
gr_expr sc_syn_number(sc *c, bool integer);

#endif
