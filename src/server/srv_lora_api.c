/*
 * srv_lora_api.c — /v1/adapters (docs/lora.md, "Hot load"): GET lists the
 * adapters, POST {name, path} loads one from a folder under --lora-dir,
 * DELETE /v1/adapters/NAME unloads one (requests running on it finish on it).
 * Changes are admin actions: over the --unix socket, or over TCP when the
 * server has an --api-key (which the request then carried). A request never
 * makes the server read outside --lora-dir.
 */
#include "server/srv_int.h"
#include "server/srv_json.h"
#include "util/kiln_log.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static int fail(json_t **body, int kind, const char *param, const char *msg)
{
    srv_error e = srv_error_make(kind, param, "%s", msg);
    *body = srv_error_json(&e);
    return srv_error_status(kind);
}

static int fail_e(json_t **body, const srv_error *e)
{
    *body = srv_error_json(e);
    return srv_error_status(e->kind);
}

/* The names --lora takes: 1-64 of [A-Za-z0-9._-], not starting with '.'. */
static int name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64 || s[0] == '.') return 0;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == '-' || s[i] == '_' || s[i] == '.' || (s[i] >= '0' && s[i] <= '9') ||
              (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')))
            return 0;
    return 1;
}

/* path (relative to --lora-dir, or absolute) resolved with symlinks into out,
 * which must lie strictly inside --lora-dir. 0 ok, else the error's status. */
static int resolve_path(const srv_server *s, const char *path, char out[PATH_MAX], json_t **body)
{
    char root[PATH_MAX], joined[PATH_MAX + 8];
    if (!realpath(s->lora_dir, root))
        return fail(body, KILN_E_NOT_FOUND, "path", "the --lora-dir folder is gone");
    if (path[0] == '/')
        snprintf(joined, sizeof joined, "%s", path);
    else if ((size_t)snprintf(joined, sizeof joined, "%s/%s", root, path) >= sizeof joined)
        return fail(body, KILN_E_INVALID, "path", "'path' is too long");
    if (!realpath(joined, out))
        return fail(body, KILN_E_NOT_FOUND, "path",
                    errno == ENOENT ? "no such adapter folder under --lora-dir"
                                    : "the adapter folder cannot be read");
    size_t rl = strlen(root);
    if (strncmp(out, root, rl) != 0 || out[rl] != '/')
        return fail(body, SRV_E_FORBIDDEN, "path",
                    "'path' must name a folder inside the server's --lora-dir");
    return 0;
}

static int load(srv_server *s, const char *body_text, size_t len, json_t **body)
{
    kiln_err err;
    json_t *req;
    if (srv_json_parse_object(body_text, len, &req, &err)) {
        srv_error e = srv_error_from(&err, NULL);
        return fail_e(body, &e);
    }
    const char *name = json_string_value(json_object_get(req, "name"));
    const char *path = json_string_value(json_object_get(req, "path"));
    int status = 0;
    char real[PATH_MAX];
    if (!name || !name_ok(name))
        status = fail(body, KILN_E_INVALID, "name",
                      "'name' must be 1-64 of letters, digits, '-', '_' or '.'");
    else if (!path)
        status = fail(body, KILN_E_INVALID, "path",
                      "'path' (an adapter folder under --lora-dir) is required");
    else if (!strcmp(name, s->model_id))
        status = fail(body, SRV_E_CONFLICT, "name", "'name' is the served model's id");
    else if (srv_lora_has(&s->lora, name))
        status = fail(body, SRV_E_CONFLICT, "name",
                      "an adapter of that name is loaded (DELETE /v1/adapters/NAME first)");
    if (!status) status = resolve_path(s, path, real, body);
    if (status) {
        json_decref(req);
        return status;
    }
    uint64_t need = 0;
    mdl_lora *a = NULL;
    if (mdl_lora_dir_bytes(real, &need, &err) == KILN_OK && s->lora_hot_cap &&
        s->lora.hot_bytes + need > s->lora_hot_cap) {
        srv_error e = srv_error_make(
            KILN_E_BUDGET, "path",
            "the adapter needs %.1f MiB; adapters loaded while serving may hold %.1f MiB "
            "(--lora-memory) and hold %.1f MiB",
            (double)need / 1048576.0, (double)s->lora_hot_cap / 1048576.0,
            (double)s->lora.hot_bytes / 1048576.0);
        json_decref(req);
        return fail_e(body, &e);
    }
    if (mdl_lora_load(s->model, real, &a, &err)) {
        srv_error e = srv_error_from(&err, "path");
        if (e.kind != KILN_E_NOMEM) e.kind = KILN_E_INVALID; /* the folder's fault: a 400 */
        json_decref(req);
        return fail_e(body, &e);
    }
    mdl_lora_info in = mdl_lora_get_info(a);
    srv_error e;
    if (srv_lora_add(&s->lora, name, a, &e)) { /* a name loaded meanwhile */
        json_decref(req);
        return fail_e(body, &e);
    }
    KLOG_INFO("lora", "loaded adapter=%s dir=\"%s\" rank=%d bytes=%llu", name, real, (int)in.rank,
              (unsigned long long)in.bytes);
    *body = json_pack("{s:s, s:s, s:s, s:i, s:f, s:s, s:I}", "name", name, "object", "adapter",
                      "format", in.format == MDL_LORA_PEFT ? "peft" : "mlx-lm", "rank",
                      (int)in.rank, "scale", (double)in.scale, "targets", in.targets, "bytes",
                      (json_int_t)in.bytes);
    json_decref(req);
    return *body ? 200 : 500;
}

int srv_route_adapters(srv_server *s, const char *method, const char *rest, const char *body_text,
                       size_t len, int admin, json_t **body)
{
    *body = NULL;
    if (!strcmp(method, "GET") && !*rest) {
        *body = srv_lora_list(&s->lora);
        return *body ? 200 : 500;
    }
    int is_post = !strcmp(method, "POST") && !*rest;
    int is_delete = !strcmp(method, "DELETE") && rest[0] == '/' && rest[1];
    if (!is_post && !is_delete)
        return fail(body, SRV_E_METHOD, NULL,
                    "use GET or POST /v1/adapters, or DELETE /v1/adapters/NAME");
    if (!admin)
        return fail(body, SRV_E_FORBIDDEN, NULL,
                    "loading and unloading adapters is an admin action: use the --unix socket, "
                    "or start the server with --api-key");
    if (!s->model) return fail(body, SRV_E_LOADING, NULL, "the model is still loading");
    if (is_post) {
        if (!s->lora_dir)
            return fail(body, SRV_E_FORBIDDEN, NULL,
                        "the server has no --lora-dir: adapters load only from there");
        return load(s, body_text, len, body);
    }
    srv_error e;
    if (srv_lora_remove(&s->lora, rest + 1, &e)) return fail_e(body, &e);
    KLOG_INFO("lora", "unloaded adapter=%s", rest + 1);
    *body = json_pack("{s:s, s:s, s:b}", "name", rest + 1, "object", "adapter", "deleted", 1);
    return *body ? 200 : 500;
}
