/*
 * srv_conv_api.c — the /v1/conversations REST surface over the store
 * (srv_conv.c); docs/webui.md lists it:
 *   GET    /v1/conversations[?q=TEXT&limit=N&offset=N]   list, or full-text search
 *   POST   /v1/conversations                             create
 *   GET    /v1/conversations/export                      every conversation (a download)
 *   POST   /v1/conversations/import                      an export, an array, or one
 *   GET    /v1/conversations/ID                          one, with its messages
 *   PUT    /v1/conversations/ID                          replace (title, system, settings, messages)
 *   PATCH  /v1/conversations/ID                          rename / change system or settings
 *   DELETE /v1/conversations/ID
 *   POST   /v1/conversations/ID/messages                 append (one message or an array)
 *   GET    /v1/conversations/ID/export                   one conversation (a download)
 * Every answer is JSON; errors use the OpenAI error shape (srv_error.c).
 * Threads: any HTTP thread; the store locks inside.
 */
#include "server/srv_conv.h"
#include "server/srv_error.h"
#include "server/srv_int.h"
#include "server/srv_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(json_t **body, int kind, const char *param, const char *msg)
{
    srv_error e = srv_error_make(kind, param, "%s", msg);
    *body = srv_error_json(&e);
    return srv_error_status(kind);
}

static int fail_err(json_t **body, const kiln_err *err)
{
    srv_error e = srv_error_from(err, NULL);
    *body = srv_error_json(&e);
    return srv_error_status(e.kind);
}

/* A query parameter as a bounded int; dflt when absent; -1 when malformed. */
static int int_arg(const char *s, int dflt, int max)
{
    if (!s || !*s) return dflt;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 0) return -1;
    return v > max ? max : (int)v;
}

static int answer_doc(srv_conv_store *st, const char *id, int status, json_t **body)
{
    kiln_err err;
    json_t *doc;
    if (srv_conv_get(st, id, &doc, &err)) return fail_err(body, &err);
    *body = doc;
    return status;
}

static int list_or_search(srv_conv_store *st, const srv_conv_call *c, json_t **body)
{
    int limit = int_arg(c->limit, 50, 1000), offset = int_arg(c->offset, 0, 1 << 30);
    if (limit < 1 || offset < 0)
        return fail(body, KILN_E_INVALID, limit < 1 ? "limit" : "offset",
                    "limit must be 1..1000 and offset >= 0");
    json_t *list;
    int more;
    kiln_err err;
    const char *q = c->q && c->q[0] ? c->q : NULL;
    if (srv_conv_list(st, q, limit, offset, &list, &more, &err)) return fail_err(body, &err);
    *body = json_pack("{s:s, s:o, s:b}", "object", "list", "data", list, "has_more", more);
    return *body ? 200 : 500;
}

static int parse_body(const srv_conv_call *c, json_t **doc, json_t **body)
{
    kiln_err err;
    if (srv_json_parse(c->body, c->len, doc, &err)) {
        fail_err(body, &err);
        return -1;
    }
    return 0;
}

/* A download: the export JSON with a file name for Content-Disposition. */
static int export(srv_conv_store *st, const char *id, json_t **body, char *attachment, size_t an)
{
    kiln_err err;
    json_t *doc;
    if (srv_conv_export(st, id, &doc, &err)) return fail_err(body, &err);
    snprintf(attachment, an, "%s%s.json", id ? "kiln-" : "kiln-conversations", id ? id : "");
    *body = doc;
    return 200;
}

static int one(srv_conv_store *st, const srv_conv_call *c, const char *id, json_t **body)
{
    kiln_err err;
    json_t *doc;
    const char *m = c->method;
    if (!strcmp(m, "GET")) return answer_doc(st, id, 200, body);
    if (!strcmp(m, "DELETE")) {
        if (srv_conv_delete(st, id, &err)) return fail_err(body, &err);
        *body = json_pack("{s:s, s:s, s:b}", "id", id, "object", "conversation.deleted", "deleted", 1);
        return 200;
    }
    if (strcmp(m, "PUT") && strcmp(m, "PATCH"))
        return fail(body, SRV_E_METHOD, NULL, "this route takes GET, PUT, PATCH or DELETE");
    if (parse_body(c, &doc, body)) return srv_error_status(KILN_E_INVALID);
    if (!strcmp(m, "PATCH") && json_object_get(doc, "messages")) {
        json_decref(doc);
        return fail(body, KILN_E_INVALID, "messages", "PATCH changes title, system, model or settings; "
                    "PUT replaces messages");
    }
    kiln_code rc = srv_conv_replace(st, id, doc, &err);
    json_decref(doc);
    return rc ? fail_err(body, &err) : answer_doc(st, id, 200, body);
}

int srv_conv_route(srv_conv_store *st, const char *why_off, const srv_conv_call *c, json_t **body,
                   char *attachment, size_t an)
{
    attachment[0] = 0;
    if (!st) {
        char msg[400];
        snprintf(msg, sizeof msg, "conversations are not stored on this server: %s",
                 why_off && why_off[0] ? why_off : "no data folder");
        return fail(body, SRV_E_LOADING, NULL, msg);
    }
    const char *r = c->rest ? c->rest : "";
    if (!strcmp(r, "/")) r = "";
    const char *m = c->method;
    if (!r[0]) {
        if (!strcmp(m, "GET")) return list_or_search(st, c, body);
        if (strcmp(m, "POST")) return fail(body, SRV_E_METHOD, NULL, "this route takes GET or POST");
        json_t *doc;
        if (parse_body(c, &doc, body)) return srv_error_status(KILN_E_INVALID);
        char id[SRV_CONV_ID_MAX];
        kiln_err err;
        kiln_code rc = srv_conv_create(st, doc, id, &err);
        json_decref(doc);
        return rc ? fail_err(body, &err) : answer_doc(st, id, 200, body);
    }
    if (r[0] != '/') return fail(body, SRV_E_ROUTE, NULL, "no such conversation route");
    r++;
    char id[SRV_CONV_ID_MAX];
    const char *slash = strchr(r, '/');
    size_t n = slash ? (size_t)(slash - r) : strlen(r);
    if (n == 0 || n >= sizeof id) return fail(body, SRV_E_ROUTE, NULL, "no such conversation route");
    memcpy(id, r, n);
    id[n] = 0;
    const char *sub = slash ? slash + 1 : NULL;
    if (sub && !strcmp(sub, "")) sub = NULL;
    if (!sub && !strcmp(id, "export")) {
        if (strcmp(m, "GET")) return fail(body, SRV_E_METHOD, NULL, "export takes GET");
        return export(st, NULL, body, attachment, an);
    }
    if (!sub && !strcmp(id, "import")) {
        if (strcmp(m, "POST")) return fail(body, SRV_E_METHOD, NULL, "import takes POST");
        json_t *doc, *ids;
        kiln_err err;
        if (parse_body(c, &doc, body)) return srv_error_status(KILN_E_INVALID);
        kiln_code rc = srv_conv_import(st, doc, &ids, &err);
        json_decref(doc);
        if (rc) return fail_err(body, &err);
        *body = json_pack("{s:s, s:i, s:o}", "object", "kiln.import", "imported",
                          (int)json_array_size(ids), "ids", ids);
        return 200;
    }
    if (!srv_conv_id_ok(id)) return fail(body, KILN_E_NOT_FOUND, NULL, "no such conversation");
    if (!sub) return one(st, c, id, body);
    if (!strcmp(sub, "export")) {
        if (strcmp(m, "GET")) return fail(body, SRV_E_METHOD, NULL, "export takes GET");
        return export(st, id, body, attachment, an);
    }
    if (!strcmp(sub, "messages")) {
        if (!strcmp(m, "GET")) {
            json_t *doc;
            int status = answer_doc(st, id, 200, &doc);
            if (status != 200) {
                *body = doc;
                return status;
            }
            *body = json_pack("{s:s, s:O}", "object", "list", "data", json_object_get(doc, "messages"));
            json_decref(doc);
            return 200;
        }
        if (strcmp(m, "POST")) return fail(body, SRV_E_METHOD, NULL, "messages takes GET or POST");
        json_t *doc;
        kiln_err err;
        if (parse_body(c, &doc, body)) return srv_error_status(KILN_E_INVALID);
        json_t *msgs = json_is_object(doc) && json_is_array(json_object_get(doc, "messages"))
                           ? json_object_get(doc, "messages")
                           : doc;
        long long first = 0;
        kiln_code rc = srv_conv_append(st, id, msgs, &first, &err);
        size_t added = json_is_array(msgs) ? json_array_size(msgs) : 1;
        json_decref(doc);
        if (rc) return fail_err(body, &err);
        *body = json_pack("{s:s, s:s, s:I, s:i}", "object", "conversation.messages.appended",
                          "conversation_id", id, "first_id", (json_int_t)first, "appended", (int)added);
        return 200;
    }
    return fail(body, SRV_E_ROUTE, NULL, "no such conversation route");
}
