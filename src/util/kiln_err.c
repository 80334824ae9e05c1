/*
 * kiln_err.c — filling and prefixing kiln_err; see kiln_err.h.
 */
#include "util/kiln_err.h"

#include <stdio.h>
#include <string.h>

kiln_code kiln_failv(kiln_err *err, kiln_code code, const char *fmt, va_list ap)
{
    if (err) {
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    }
    return code;
}

kiln_code kiln_fail(kiln_err *err, kiln_code code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kiln_failv(err, code, fmt, ap);
    va_end(ap);
    return code;
}

kiln_code kiln_err_prefix(kiln_err *err, const char *fmt, ...)
{
    if (!err) return KILN_E_INTERNAL;
    char head[256], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    /* Truncation is fine here: the message is for people and stays bounded. */
    size_t hl = strnlen(head, sizeof err->msg - 1);
    memcpy(err->msg, head, hl);
    size_t ol = strnlen(old, sizeof old);
    if (ol > sizeof err->msg - 1 - hl) ol = sizeof err->msg - 1 - hl;
    memcpy(err->msg + hl, old, ol);
    err->msg[hl + ol] = '\0';
    return err->code;
}

void kiln_err_clear(kiln_err *err)
{
    if (!err) return;
    err->code = KILN_OK;
    err->msg[0] = '\0';
}

const char *kiln_code_name(kiln_code code)
{
    static const char *const names[KILN_E_COUNT] = {
        [KILN_OK] = "ok",
        [KILN_E_INVALID] = "invalid",
        [KILN_E_TOO_LARGE] = "too_large",
        [KILN_E_BUDGET] = "budget",
        [KILN_E_BUSY] = "busy",
        [KILN_E_NOMEM] = "nomem",
        [KILN_E_IO] = "io",
        [KILN_E_CORRUPT] = "corrupt",
        [KILN_E_UNSUPPORTED] = "unsupported",
        [KILN_E_CANCELLED] = "cancelled",
        [KILN_E_NOT_FOUND] = "not_found",
        [KILN_E_INTERNAL] = "internal",
    };
    if ((int)code < 0 || code >= KILN_E_COUNT) return "unknown";
    return names[code];
}
