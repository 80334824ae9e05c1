/*
 * srv_json.h — small jansson helpers for the server: strings from arbitrary
 * bytes (invalid UTF-8 becomes U+FFFD, so a response is always valid JSON) and
 * compact serialization.
 */
#ifndef KILN_SRV_JSON_H
#define KILN_SRV_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "util/kiln_err.h"

/* API */
/* Parses a request body: one JSON value, duplicate keys refused; \u0000 in a
 * string is accepted and read as U+FFFD (C strings end at a NUL). *out is new
 * (json_decref) on success; KILN_E_INVALID with line/column else. */
kiln_code srv_json_parse(const char *body, size_t len, json_t **out, kiln_err *err);
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
