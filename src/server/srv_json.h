/*
 * srv_json.h — small jansson helpers for the server: strings from arbitrary
 * bytes (invalid UTF-8 becomes U+FFFD, so a response is always valid JSON) and
 * compact serialization.
 */
#ifndef KILN_SRV_JSON_H
#define KILN_SRV_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "util/kiln_err.h"

/* Depth limits, checked before anything recurses over the input (jansson's
 * parser, json_deep_copy, the template's values, the schema compiler): a
 * request body nests arrays/objects at most SRV_JSON_MAX_DEPTH levels (a byte
 * scan before the parse); a JSON value handed on as a unit — a tool's
 * parameters / input_schema, a response_format schema, a tool call's
 * arguments in the history (string or object), chat_template_kwargs — at most
 * SRV_VALUE_MAX_DEPTH levels from its own root. Deeper is a 400 naming the
 * limit (docs/server.md, Limits). */
#define SRV_JSON_MAX_DEPTH 128
#define SRV_VALUE_MAX_DEPTH 64

/* API */
/* json_loadb with this thread's jansson allocations charged to the request
 * memory account (util/kiln_json.h) while it runs: a request body's tree. */
json_t *srv_json_load_request(const char *body, size_t len, size_t flags, json_error_t *je);
/* Parses a request body: one JSON value nested at most SRV_JSON_MAX_DEPTH
 * levels (checked on the bytes first), duplicate keys refused; \u0000 in a
 * string is accepted and read as U+FFFD (C strings end at a NUL). *out is new
 * (json_decref) on success; KILN_E_INVALID with line/column else. */
kiln_code srv_json_parse(const char *body, size_t len, json_t **out, kiln_err *err);
/* KILN_E_INVALID, "WHAT nests arrays/objects more than 64 levels deep (the
 * limit, SRV_VALUE_MAX_DEPTH)" when v (a value, or JSON text when it is a
 * string and as_text) passes SRV_VALUE_MAX_DEPTH; KILN_OK else. */
kiln_code srv_json_check_depth(const json_t *v, bool as_text, const char *what, kiln_err *err);
/* srv_json_parse, and the value must be an object. */
kiln_code srv_json_parse_object(const char *body, size_t len, json_t **out, kiln_err *err);
/* New JSON string from len bytes (any bytes); NULL only when out of memory. */
json_t *srv_json_text(const char *s, size_t len);
/* Compact JSON text of j, OWNED by the caller (free()); NULL on OOM. *len may be NULL. */
char *srv_json_dump(const json_t *j, size_t *len);
/* Length of the longest prefix of s[0..len) that is valid UTF-8 up to a
 * complete character (an incomplete trailing sequence is left out). */
size_t srv_utf8_valid_prefix(const char *s, size_t len);

#endif
