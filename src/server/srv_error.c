/*
 * srv_error.c — kiln_code / srv_ecode → HTTP status, OpenAI error type and
 * code. The table below is the only place in kiln where an error meets an
 * HTTP number; docs/server.md copies it.
 * Threads: pure functions over a constant table.
 */
#include "server/srv_error.h"
#include "server/srv_json.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    int status;
    const char *type;
    const char *code; /* NULL = JSON null */
} err_row;

static const err_row rows[SRV_E_END] = {
    [KILN_OK] = {200, "ok", NULL},
    [KILN_E_INVALID] = {400, "invalid_request_error", "invalid_value"},
    [KILN_E_TOO_LARGE] = {413, "invalid_request_error", "request_too_large"},
    [KILN_E_BUDGET] = {400, "invalid_request_error", "memory_budget_exceeded"},
    [KILN_E_BUSY] = {429, "rate_limit_error", "queue_full"},
    [KILN_E_NOMEM] = {500, "server_error", "out_of_memory"},
    [KILN_E_IO] = {500, "server_error", "io_error"},
    [KILN_E_CORRUPT] = {500, "server_error", "corrupt_data"},
    [KILN_E_UNSUPPORTED] = {400, "invalid_request_error", "unsupported"},
    [KILN_E_CANCELLED] = {503, "server_error", "cancelled"},
    [KILN_E_NOT_FOUND] = {404, "not_found_error", "not_found"},
    [KILN_E_INTERNAL] = {500, "server_error", "internal_error"},
    [KILN_E_COUNT] = {500, "server_error", "internal_error"},
    [SRV_E_AUTH] = {401, "authentication_error", "invalid_api_key"},
    [SRV_E_ROUTE] = {404, "not_found_error", "unknown_route"},
    [SRV_E_METHOD] = {405, "invalid_request_error", "method_not_allowed"},
    [SRV_E_CONTEXT] = {400, "invalid_request_error", "context_length_exceeded"},
    [SRV_E_QUEUE] = {429, "rate_limit_error", "queue_full"},
    [SRV_E_LOADING] = {503, "server_error", "unavailable"},
    [SRV_E_CTX_BUDGET] = {400, "memory_admission", "context_over_budget"},
    [SRV_E_KV_BUDGET] = {400, "memory_admission", "kv_over_budget"},
    [SRV_E_OVERLOADED] = {503, "server_error", "overloaded"},
    [SRV_E_CONFLICT] = {409, "invalid_request_error", "conflict"},
    [SRV_E_FORBIDDEN] = {403, "permission_error", "forbidden"},
};

static const err_row *row(int kind)
{
    if (kind < 0 || kind >= SRV_E_END || !rows[kind].type) return &rows[KILN_E_INTERNAL];
    return &rows[kind];
}

int srv_error_status(int kind)
{
    return row(kind)->status;
}

const char *srv_error_type(int kind)
{
    return row(kind)->type;
}

const char *srv_error_code(int kind)
{
    return row(kind)->code;
}

srv_error srv_error_from(const kiln_err *err, const char *param)
{
    srv_error e = {.kind = err ? (int)err->code : KILN_E_INTERNAL};
    if (e.kind == KILN_E_BUSY) e.kind = SRV_E_QUEUE;
    snprintf(e.message, sizeof e.message, "%s",
             err && err->msg[0] ? err->msg : kiln_code_name((kiln_code)e.kind));
    if (param) snprintf(e.param, sizeof e.param, "%s", param);
    return e;
}

srv_error srv_error_make(int kind, const char *param, const char *fmt, ...)
{
    srv_error e = {.kind = kind};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    if (param) snprintf(e.param, sizeof e.param, "%s", param);
    return e;
}

json_t *srv_error_json(const srv_error *e)
{
    const err_row *r = row(e->kind);
    return json_pack("{s:{s:o, s:s, s:o, s:o}}", "error", "message",
                     srv_json_text(e->message, strlen(e->message)), "type", r->type,
                     "param", e->param[0] ? json_string(e->param) : json_null(), "code",
                     r->code ? json_string(r->code) : json_null());
}

/* Anthropic error types by HTTP status (their API reference). */
json_t *srv_error_json_anthropic(const srv_error *e)
{
    int st = srv_error_status(e->kind);
    const char *type = st == 400 || st == 413 ? "invalid_request_error"
                       : st == 401            ? "authentication_error"
                       : st == 404            ? "not_found_error"
                       : st == 429            ? "rate_limit_error"
                       : st == 503            ? "overloaded_error"
                                              : "api_error";
    if (st == 413) type = "request_too_large";
    const err_row *r = row(e->kind);
    if (!strcmp(r->type, "memory_admission"))
        return json_pack("{s:s, s:{s:s, s:s, s:o}}", "type", "error", "error", "type", r->type,
                         "code", r->code, "message", srv_json_text(e->message, strlen(e->message)));
    return json_pack("{s:s, s:{s:s, s:o}}", "type", "error", "error", "type", type, "message",
                     srv_json_text(e->message, strlen(e->message)));
}
