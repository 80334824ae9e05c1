/*
 * srv_error.h — the one table that turns an error into an HTTP status and the
 * OpenAI error body {"error": {"message", "type", "param", "code"}}.
 *
 *   srv_error e = srv_error_from(&err, "temperature");
 *   json_t *body = srv_error_json(&e);     // OWNED by the caller
 *
 * No other server file knows HTTP status numbers for errors.
 */
#ifndef KILN_SRV_ERROR_H
#define KILN_SRV_ERROR_H

#include <jansson.h>

#include "util/kiln_err.h"

/* Errors that exist only at the HTTP level, numbered after the kiln codes. */
typedef enum {
    SRV_E_AUTH = KILN_E_COUNT + 1, /* missing or wrong API key (401) */
    SRV_E_ROUTE,                   /* unknown path (404) */
    SRV_E_METHOD,                  /* known path, wrong method (405) */
    SRV_E_CONTEXT,                 /* the prompt alone fills the context (400) */
    SRV_E_QUEUE,                   /* engine queue full (429) */
    SRV_E_LOADING,                 /* model not loaded yet / shutting down (503) */
    SRV_E_CTX_BUDGET,              /* the prompt alone fills the memory-admission limit (400) */
    SRV_E_KV_BUDGET,               /* the request alone is over --kv-budget (400) */
    SRV_E_OVERLOADED,              /* every connection slot or the request memory is busy (503) */
    SRV_E_CONFLICT,                /* the state forbids it: a name taken, the default adapter (409) */
    SRV_E_FORBIDDEN,               /* an admin action over TCP without --api-key (403) */
    SRV_E_END
} srv_ecode;

typedef struct {
    int kind;           /* a kiln_code or a srv_ecode */
    char message[256];
    char param[64];     /* "" = null */
} srv_error;

/* API */
/* From a kiln error; param may be NULL. KILN_E_BUSY becomes SRV_E_QUEUE (429). */
srv_error srv_error_from(const kiln_err *err, const char *param);
srv_error srv_error_make(int kind, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int srv_error_status(int kind);           /* HTTP status */
const char *srv_error_type(int kind);     /* OpenAI "type" */
const char *srv_error_code(int kind);     /* OpenAI "code" or NULL */
/* New {"error": {...}} object, OWNED by the caller (json_decref); NULL on OOM. */
json_t *srv_error_json(const srv_error *e);
/* The Anthropic shape: {"type": "error", "error": {"type", "message"}}; memory
 * admission errors keep their own type and add "code" (as the OpenAI shape). */
json_t *srv_error_json_anthropic(const srv_error *e);

#endif
