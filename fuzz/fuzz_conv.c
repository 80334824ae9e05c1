/*
 * fuzz_conv.c — arbitrary bytes into the /v1/conversations surface (srv_conv_api.c
 * over a real SQLite store in a temporary folder): the first byte picks the method
 * and route (create, import, replace, patch, append, search, list, export), the
 * rest is the body or the search text. Every answer must be a JSON object (an error
 * carries "error"); a 200 create must read back; nothing may crash, leak or leave
 * the store unusable (a plain list must still work after every input).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_conv.h"
#include "server/srv_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static srv_conv_store *st;
static char dir[64];
static char first_id[SRV_CONV_ID_MAX];

static void cleanup(void)
{
    srv_conv_close(st);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "fuzz_conv: could not remove %s\n", dir);
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/kiln-fuzz-conv-XXXXXX");
    if (!mkdtemp(dir) || srv_conv_open(dir, &st, NULL) != KILN_OK) __builtin_trap();
    atexit(cleanup);
    json_t *d = json_pack("{s:s, s:[{s:s, s:s}]}", "title", "seed", "messages", "role", "user", "content", "hello");
    if (srv_conv_create(st, d, first_id, NULL) != KILN_OK) __builtin_trap();
    json_decref(d);
}

static int route(const char *method, const char *rest, const char *q, const char *body, size_t len,
                 json_t **out)
{
    srv_conv_call c = {.method = method, .rest = rest, .q = q, .body = body, .len = len};
    char att[160];
    int status = srv_conv_route(st, "", &c, out, att, sizeof att);
    if (!json_is_object(*out)) __builtin_trap();
    if (status != 200 && !json_object_get(*out, "error")) __builtin_trap();
    return status;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!st) setup();
    if (size < 1) return 0;
    char *body = malloc(size);
    if (!body) return 0;
    memcpy(body, data + 1, size - 1);
    body[size - 1] = 0; /* also a C string for the search text (cut at the first NUL) */
    char one[96], msgs[112];
    snprintf(one, sizeof one, "/%s", first_id);
    snprintf(msgs, sizeof msgs, "/%s/messages", first_id);
    json_t *out = NULL;
    int status;
    switch (data[0] % 8) {
    case 0:
        status = route("POST", "", NULL, body, size - 1, &out);
        if (status == 200) {
            json_t *got = NULL;
            const char *id = json_string_value(json_object_get(out, "id"));
            if (!id || srv_conv_get(st, id, &got, NULL) != KILN_OK) __builtin_trap();
            json_decref(got);
            srv_conv_delete(st, id, NULL); /* keep the store small */
        }
        break;
    case 1: route("POST", "/import", NULL, body, size - 1, &out); break;
    case 2: route("PUT", one, NULL, body, size - 1, &out); break;
    case 3: route("PATCH", one, NULL, body, size - 1, &out); break;
    case 4: route("POST", msgs, NULL, body, size - 1, &out); break;
    case 5: route("GET", "", body, NULL, 0, &out); break;
    case 6: route("GET", body, NULL, NULL, 0, &out); break;
    default: route("DELETE", body, NULL, NULL, 0, &out); break;
    }
    json_decref(out);
    out = NULL;
    if (route("GET", "", NULL, NULL, 0, &out) != 200) __builtin_trap();
    json_decref(out);
    /* imports and appends grow the store: start over now and then */
    json_t *list = NULL;
    int more = 0;
    if (srv_conv_list(st, NULL, 1000, 0, &list, &more, NULL) == KILN_OK && json_array_size(list) > 200) {
        size_t i;
        json_t *c;
        json_array_foreach(list, i, c) {
            const char *id = json_string_value(json_object_get(c, "id"));
            if (id && strcmp(id, first_id)) srv_conv_delete(st, id, NULL);
        }
    }
    json_decref(list);
    free(body);
    return 0;
}
