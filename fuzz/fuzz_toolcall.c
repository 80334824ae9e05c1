/*
 * fuzz_toolcall.c — model output into the tool-call parser of every family
 * (server/srv_toolcall.c: hermes, qwen3_coder, llama3, mistral, gemma, none),
 * fed in arbitrary chunks as streaming does, with or without a tools list
 * whose JSON schemas drive the coercion of string values to their types.
 *
 * Input: byte 0 picks the family (low 3 bits) and whether tools are given
 * (bit 3); byte 1 seeds the chunk sizes; the rest is the decoded text.
 * Checks, beyond no crash, no leak, no UB:
 *   - every call has a name and arguments that are a JSON object;
 *   - streaming and not agree: the content and the calls are the same
 *     whether the text is pushed whole or in chunks (a client sees one text);
 *   - the arguments streamed while a call is written (srv_tc_open_get) only
 *     grow, and a parsed call's arguments begin with all that was streamed
 *     for its serial: the fragments concatenate to the final arguments.
 */
#include <stdint.h>
#include <string.h>

#include "server/srv_toolcall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{"
    "\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
    "\"days\":{\"type\":\"integer\"},\"temp\":{\"type\":\"number\"},"
    "\"metric\":{\"type\":\"boolean\"},\"opts\":{\"type\":\"object\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},"
    "\"either\":{\"type\":[\"integer\",\"null\"]},\"any\":{}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"search\",\"parameters\":{"
    "\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"}}}}}]";

typedef struct {
    srv_buf content;
    srv_buf calls; /* name \0 args \0 ... */
} run_out;

#define MAX_SHOWN 64
typedef struct {
    size_t serial[MAX_SHOWN];
    srv_buf args[MAX_SHOWN]; /* what was streamed for serial[k] */
    size_t n;
} shown;

/* Records the open calls; -1 when a shown prefix changed. */
static int watch(srv_tc *p, shown *w)
{
    for (size_t k = 0; k < srv_tc_open_count(p); k++) {
        size_t serial, len, j;
        const char *name, *args;
        srv_tc_open_get(p, k, &serial, &name, &args, &len);
        if (!name[0]) return -1;
        for (j = 0; j < w->n && w->serial[j] != serial; j++) continue;
        if (j == w->n) {
            if (w->n == MAX_SHOWN) return 0;
            w->serial[w->n++] = serial;
        }
        srv_buf *b = &w->args[j];
        if (len < b->len || (b->len && memcmp(b->p, args, b->len))) return -1;
        if (srv_buf_add(b, args + b->len, len - b->len)) return 0;
    }
    return 0;
}

/* Runs the parser over text in chunks (chunk seed 0: all at once). Returns -1
 * when a call is malformed (the check that must never fire), 1 on OOM. */
static int run(srv_tc_family f, const json_t *tools, const char *text, size_t n, uint8_t seed,
               run_out *o)
{
    srv_tc *p;
    if (srv_tc_create(f, tools, &p, NULL)) return 1;
    shown w = {0};
    int grew = 0;
    uint32_t x = seed;
    for (size_t at = 0; at < n;) {
        size_t k = n - at;
        if (seed) {
            x = x * 1103515245u + 12345u;
            size_t c = 1 + (x >> 16) % 7; /* 1..7 bytes: splits every marker somewhere */
            if (c < k) k = c;
        }
        if (srv_tc_push(p, text + at, k, &o->content)) {
            srv_tc_free(p);
            for (size_t j = 0; j < w.n; j++) srv_buf_free(&w.args[j]);
            return 1;
        }
        grew |= watch(p, &w);
        at += k;
    }
    int rc = srv_tc_finish(p, &o->content) ? 1 : grew;
    for (size_t i = 0; !rc && i < srv_tc_count(p); i++) {
        const char *name, *args;
        srv_tc_get(p, i, &name, &args);
        json_t *a = json_loads(args, JSON_ALLOW_NUL, NULL);
        if (!name || !name[0] || !json_is_object(a)) rc = -1;
        json_decref(a);
        for (size_t j = 0; !rc && j < w.n; j++) /* streamed fragments are a prefix */
            if (w.serial[j] == srv_tc_serial(p, i) &&
                (strlen(args) < w.args[j].len || (w.args[j].len && memcmp(w.args[j].p, args, w.args[j].len))))
                rc = -1;
        if (!rc && (srv_buf_add(&o->calls, name, strlen(name) + 1) ||
                    srv_buf_add(&o->calls, args, strlen(args) + 1)))
            rc = 1;
    }
    srv_tc_free(p);
    for (size_t j = 0; j < w.n; j++) srv_buf_free(&w.args[j]);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    srv_tc_family f = (srv_tc_family)((data[0] & 7) % SRV_TC_COUNT);
    json_t *tools = data[0] & 8 ? json_loads(TOOLS, 0, NULL) : NULL;
    const char *text = (const char *)data + 2;
    size_t n = size - 2;
    uint8_t seed = data[1] ? data[1] : 1;
    run_out whole = {0}, parts = {0};
    int a = run(f, tools, text, n, 0, &whole);
    int b = run(f, tools, text, n, seed, &parts);
    if (a < 0 || b < 0) __builtin_trap(); /* a call without a name or object arguments */
    if (!a && !b &&
        (whole.content.len != parts.content.len || whole.calls.len != parts.calls.len ||
         (whole.content.len && memcmp(whole.content.p, parts.content.p, whole.content.len)) ||
         (whole.calls.len && memcmp(whole.calls.p, parts.calls.p, whole.calls.len))))
        __builtin_trap(); /* streaming would show another reply than non-streaming */
    srv_buf_free(&whole.content);
    srv_buf_free(&whole.calls);
    srv_buf_free(&parts.content);
    srv_buf_free(&parts.calls);
    json_decref(tools);
    return 0;
}
