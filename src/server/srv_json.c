/*
 * srv_json.c — jansson helpers: byte strings made safe for JSON, compact dumps.
 * Threads: no shared state.
 */
#include "server/srv_json.h"
#include "util/kiln_json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of the valid UTF-8 character at s (1..4), or 0 when s[0..len) does not
 * start with one (overlongs, surrogates and > U+10FFFF are invalid). */
static size_t utf8_char(const unsigned char *s, size_t len)
{
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    size_t n;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
    else return 0;
    if (len < n) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

json_t *srv_json_text(const char *s, size_t len)
{
    if (!s) return json_string("");
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len && u[i] && utf8_char(u + i, len - i)) i += utf8_char(u + i, len - i);
    if (i == len) return json_stringn(s, len);
    /* Slow path: rebuild with U+FFFD for each invalid byte (and NUL kept as is). */
    char *buf = malloc(len * 3 + 1);
    if (!buf) return NULL;
    size_t o = 0;
    for (i = 0; i < len;) {
        size_t n = u[i] ? utf8_char(u + i, len - i) : 1;
        if (n) {
            memcpy(buf + o, s + i, n);
            o += n;
            i += n;
        } else {
            memcpy(buf + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    json_t *j = json_stringn(buf, o);
    free(buf);
    return j;
}

/* Two passes of json_dumpb instead of json_dumps: jansson's dump ignores a
 * failed write of an object key into its growing buffer (dump.c, the unsorted
 * object branch), so under memory pressure json_dumps can return JSON with a
 * key missing. Writing into a buffer sized by a first pass never fails; the
 * only allocations left (cycle detection) report their failure. */
char *srv_json_dump(const json_t *j, size_t *len)
{
    const size_t flags = JSON_COMPACT | JSON_ENCODE_ANY;
    if (len) *len = 0;
    size_t n = j ? json_dumpb(j, NULL, 0, flags) : 0;
    char *s = n ? malloc(n + 1) : NULL;
    if (!s) return NULL;
    if (json_dumpb(j, s, n, flags) != n) {
        free(s);
        return NULL;
    }
    s[n] = 0;
    if (len) *len = n;
    return s;
}

size_t srv_utf8_valid_prefix(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        size_t n = utf8_char(u + i, len - i);
        if (!n) break;
        i += n;
    }
    return i;
}

json_t *srv_json_load_request(const char *body, size_t len, size_t flags, json_error_t *je)
{
    bool was = kiln_json_charge(true);
    json_t *j = json_loadb(body, len, flags, je);
    kiln_json_charge(was);
    return j;
}

/* Strings with U+0000 become the same text with U+FFFD in its place: every
 * consumer reads C strings, where a NUL would cut the text short in silence. */
static void replace_nul(json_t *j)
{
    if (json_is_string(j)) {
        const char *v = json_string_value(j);
        size_t n = json_string_length(j);
        if (!memchr(v, 0, n)) return;
        char *t = malloc(3 * n + 1);
        if (!t) return;
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            if (v[i]) {
                t[o++] = v[i];
            } else { /* EF BF BD */
                t[o++] = (char)0xef;
                t[o++] = (char)0xbf;
                t[o++] = (char)0xbd;
            }
        }
        json_string_setn_nocheck(j, t, o);
        free(t);
    } else if (json_is_array(j)) {
        for (size_t i = 0; i < json_array_size(j); i++) replace_nul(json_array_get(j, i));
    } else if (json_is_object(j)) {
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) replace_nul(v);
    }
}

static int has_nul_escape(const char *s, size_t n)
{
    for (const char *p = s; (p = memchr(p, '\\', n - (size_t)(p - s))) && n - (size_t)(p - s) >= 6; p++)
        if (!memcmp(p, "\\u0000", 6)) return 1;
    return 0;
}

kiln_code srv_json_parse(const char *body, size_t len, json_t **out, kiln_err *err)
{
    json_error_t je;
    *out = NULL;
    /* jansson's parser recurses once per level (up to its own 2048): the bytes
     * are scanned first, so a deep body costs a scan, not a deep parse */
    if (kiln_json_text_depth(body ? body : "", len, SRV_JSON_MAX_DEPTH) > SRV_JSON_MAX_DEPTH)
        return kiln_fail(err, KILN_E_INVALID,
                         "the request body nests arrays/objects more than %d levels deep "
                         "(kiln's limit for a request)",
                         SRV_JSON_MAX_DEPTH);
    /* \u0000 is valid JSON (a client sends back model output that held a NUL
     * byte): accepted, and replaced (replace_nul) before anyone reads it */
    uint64_t f0 = kiln_json_failures(); /* jansson may carry on after a failed allocation */
    *out = srv_json_load_request(body ? body : "", len,
                                 JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (kiln_json_failures() != f0) {
        json_decref(*out);
        *out = NULL;
        return kiln_fail(err, KILN_E_NOMEM, "out of memory reading the request");
    }
    if (!*out)
        return kiln_fail(err, KILN_E_INVALID, "invalid JSON at line %d column %d: %.120s", je.line,
                         je.column, je.text);
    if (has_nul_escape(body, len)) {
        bool was = kiln_json_charge(true);
        replace_nul(*out);
        kiln_json_charge(was);
        if (kiln_json_failures() != f0) {
            json_decref(*out);
            *out = NULL;
            return kiln_fail(err, KILN_E_NOMEM, "out of memory reading the request");
        }
    }
    return KILN_OK;
}

kiln_code srv_json_parse_object(const char *body, size_t len, json_t **out, kiln_err *err)
{
    kiln_code rc = srv_json_parse(body, len, out, err);
    if (rc) return rc;
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return kiln_fail(err, KILN_E_INVALID, "the request body must be a JSON object");
    }
    return KILN_OK;
}

kiln_code srv_json_check_depth(const json_t *v, bool as_text, const char *what, kiln_err *err)
{
    int d =
        as_text && json_is_string(v)
            ? kiln_json_text_depth(json_string_value(v), json_string_length(v), SRV_VALUE_MAX_DEPTH)
            : kiln_json_value_depth(v, SRV_VALUE_MAX_DEPTH);
    if (d <= SRV_VALUE_MAX_DEPTH) return KILN_OK;
    return kiln_fail(err, KILN_E_INVALID,
                     "%s nests arrays/objects more than %d levels deep (kiln's limit for a JSON "
                     "value inside a request)",
                     what, SRV_VALUE_MAX_DEPTH);
}
