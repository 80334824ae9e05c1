/*
 * srv_anthropic.c — /v1/messages request bodies → srv_request.
 *
 * The body is rewritten into the equivalent OpenAI chat body (system blocks →
 * a system message, text blocks joined, stop_sequences → stop, thinking →
 * chat_template_kwargs.enable_thinking) and validated by srv_parse_request,
 * so both APIs share one set of checks. Error params are renamed back.
 * Threads: no shared state.
 */
#include "server/srv_anthropic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kiln_code bad(kiln_err *err, char *param, const char *name, const char *msg)
{
    snprintf(param, 64, "%s", name);
    return kiln_fail(err, KILN_E_INVALID, "'%s' %s", name, msg);
}

/* Text of a string or an array of {"type":"text","text":...} blocks; new ref or NULL. */
static json_t *blocks_text(json_t *c)
{
    if (json_is_string(c)) return json_incref(c);
    if (!json_is_array(c)) return NULL;
    json_t *parts = json_array();
    size_t i;
    json_t *b;
    json_array_foreach(c, i, b) {
        json_t *type = json_object_get(b, "type");
        if (!json_is_string(type)) {
            json_decref(parts);
            return NULL;
        }
        /* tool_use / tool_result / image blocks become parts the OpenAI parser refuses */
        json_array_append_new(parts, json_deep_copy(b));
    }
    return parts;
}

static kiln_code rewrite(json_t *in, json_t *out, char *param, kiln_err *err)
{
    json_t *msgs = json_array();
    json_object_set_new(out, "messages", msgs);
    json_t *sys = json_object_get(in, "system");
    if (sys && !json_is_null(sys)) {
        json_t *t = blocks_text(sys);
        if (!t) return bad(err, param, "system", "must be a string or an array of text blocks");
        json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", "system", "content", t));
    }
    json_t *m = json_object_get(in, "messages");
    if (!json_is_array(m)) return bad(err, param, "messages", "must be an array");
    size_t i;
    json_t *msg;
    json_array_foreach(m, i, msg) {
        json_t *role = json_object_get(msg, "role");
        if (!json_is_string(role) || (strcmp(json_string_value(role), "user") != 0 &&
                                      strcmp(json_string_value(role), "assistant") != 0))
            return bad(err, param, "messages", "entries need role 'user' or 'assistant'");
        json_t *t = blocks_text(json_object_get(msg, "content"));
        if (!t) return bad(err, param, "messages", "content must be a string or an array of blocks");
        json_array_append_new(msgs, json_pack("{s:O, s:o}", "role", role, "content", t));
    }
    static const char *const same[] = {"model", "max_tokens", "temperature", "top_p", "top_k", "stream"};
    for (size_t k = 0; k < sizeof same / sizeof *same; k++) {
        json_t *v = json_object_get(in, same[k]);
        if (v) json_object_set(out, same[k], v);
    }
    if (!json_object_get(in, "max_tokens")) return bad(err, param, "max_tokens", "is required");
    json_t *stop = json_object_get(in, "stop_sequences");
    if (stop) json_object_set(out, "stop", stop);
    json_t *th = json_object_get(in, "thinking");
    if (json_is_object(th) && json_is_string(json_object_get(th, "type")))
        json_object_set_new(out, "chat_template_kwargs",
                            json_pack("{s:b}", "enable_thinking",
                                      !strcmp(json_string_value(json_object_get(th, "type")), "enabled")));
    return KILN_OK;
}

kiln_code srv_parse_anthropic(const char *body, size_t len, srv_request *out, char *param,
                              kiln_err *err)
{
    memset(out, 0, sizeof *out);
    param[0] = 0;
    json_error_t je;
    json_t *in = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!in)
        return kiln_fail(err, KILN_E_INVALID, "invalid JSON at line %d column %d: %.120s", je.line,
                         je.column, je.text);
    if (!json_is_object(in)) {
        json_decref(in);
        return kiln_fail(err, KILN_E_INVALID, "the request body must be a JSON object");
    }
    json_t *oa = json_object();
    kiln_code rc = oa ? rewrite(in, oa, param, err) : kiln_fail(err, KILN_E_NOMEM, "out of memory");
    json_t *temp = json_object_get(in, "temperature");
    if (!rc && json_is_number(temp) && json_number_value(temp) > 1.0)
        rc = bad(err, param, "temperature", "must be between 0 and 1");
    json_decref(in);
    char *text = rc ? NULL : json_dumps(oa, JSON_COMPACT);
    json_decref(oa);
    if (rc) return rc;
    if (!text) return kiln_fail(err, KILN_E_NOMEM, "out of memory");
    rc = srv_parse_request(SRV_API_CHAT, text, strlen(text), out, param, err);
    free(text);
    if (rc) {
        if (!strcmp(param, "stop")) snprintf(param, 64, "stop_sequences");
        return rc;
    }
    out->api = SRV_API_ANTHROPIC;
    return KILN_OK;
}
