/*
 * kiln_err.h — the one error convention: a kiln_code you return, a message the
 * caller owns (a fixed-size struct, never allocated, safe to copy across threads).
 *
 *   kiln_err err;
 *   if (wt_st_open(path, &st, &err) != KILN_OK)
 *       fprintf(stderr, "kiln: %s\n", err.msg);
 */
#ifndef KILN_ERR_H
#define KILN_ERR_H

#include <stdarg.h>

typedef enum {
    KILN_OK = 0,
    KILN_E_INVALID,     /* bad request, flag or config.json  (400) */
    KILN_E_TOO_LARGE,   /* body, prompt or count over a cap  (413) */
    KILN_E_BUDGET,      /* would exceed the memory/KV budget (400) */
    KILN_E_BUSY,        /* queue full                        (503) */
    KILN_E_NOMEM,       /* the OS refused memory */
    KILN_E_IO,          /* a read/write/open failed */
    KILN_E_CORRUPT,     /* on-disk bytes failed a check */
    KILN_E_UNSUPPORTED, /* model or feature combination we refuse */
    KILN_E_CANCELLED,   /* client gone or deadline passed */
    KILN_E_NOT_FOUND,   /* a named thing (file, tensor, model) does not exist */
    KILN_E_INTERNAL,    /* a kiln bug we could still report */
    KILN_E_COUNT
} kiln_code;

typedef struct {
    kiln_code code;
    char msg[256];
} kiln_err;

/* API */
/* Fills *err (if not NULL) and returns code. */
kiln_code kiln_fail(kiln_err *err, kiln_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
kiln_code kiln_failv(kiln_err *err, kiln_code code, const char *fmt, va_list ap);
/* Prepends context to err->msg ("loading x: " + old message); returns err->code. */
kiln_code kiln_err_prefix(kiln_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void kiln_err_clear(kiln_err *err);
const char *kiln_code_name(kiln_code code); /* "invalid", "io", ... */

#endif
