/*
 * srv_anthropic.c — /v1/messages request bodies → srv_request.
 *
 * The body is rewritten into the equivalent OpenAI chat body (system blocks →
 * a system message, text blocks joined, stop_sequences → stop, thinking →
 * chat_template_kwargs.enable_thinking, tools/input_schema → function tools,
 * tool_choice auto/any/tool/none → auto/required/named/none, tool_use blocks →
 * assistant tool_calls, tool_result blocks → role "tool" messages, thinking
 * blocks dropped, image blocks refused) and validated by srv_parse_request,
 * so both APIs share one set of checks. Error params are renamed back.
 * Threads: no shared state.
 */
#include "server/srv_anthropic.h"
#include "server/srv_json.h"

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
        json_array_append_new(parts, json_deep_copy(b));
    }
    return parts;
}

/* One message's blocks → OpenAI messages appended to msgs: text joined into
 * one message; tool_use → assistant tool_calls; tool_result → role "tool"
 * messages (before the user's text); thinking blocks are dropped (the model
 * wrote them; templates drop past reasoning too); image → unsupported. */
static kiln_code rewrite_blocks(const char *role, json_t *content, json_t *msgs, char *param, kiln_err *err)
{
    json_t *text = json_array(), *calls = json_array();
    size_t i;
    json_t *b;
    kiln_code rc = KILN_OK;
    json_array_foreach(content, i, b) {
        const char *ty = json_string_value(json_object_get(b, "type"));
        if (!ty) {
            rc = bad(err, param, "messages", "content blocks need a string 'type'");
            break;
        }
        if (!strcmp(ty, "text")) {
            json_array_append_new(text, json_deep_copy(b));
        } else if (!strcmp(ty, "image") || !strcmp(ty, "document")) {
            snprintf(param, 64, "messages");
            rc = kiln_fail(err, KILN_E_UNSUPPORTED, "'%s' content blocks are not supported: this server "
                           "has no vision or document input; send text only", ty);
            break;
        } else if (!strcmp(ty, "tool_use")) {
            json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name");
            json_t *input = json_object_get(b, "input");
            if (!json_is_string(name)) {
                rc = bad(err, param, "messages", "tool_use blocks need a string 'name'");
                break;
            }
            if (input && !json_is_object(input) && !json_is_null(input)) {
                /* the arguments of a call are an object; an array or a number
                 * would reach the template as something no tool takes */
                rc = bad(err, param, "messages", "tool_use blocks need an object 'input'");
                break;
            }
            if (json_is_null(input)) input = NULL;
            json_array_append_new(calls, json_pack("{s:o, s:s, s:{s:O, s:o}}", "id", id ? json_incref(id) : json_string(""),
                                                   "type", "function", "function", "name", name,
                                                   "arguments", input ? json_incref(input) : json_object()));
        } else if (!strcmp(ty, "tool_result")) {
            json_t *c = json_object_get(b, "content");
            json_t *t = c ? blocks_text(c) : json_string("");
            if (!t) {
                rc = bad(err, param, "messages", "tool_result content must be a string or blocks");
                break;
            }
            json_t *id = json_object_get(b, "tool_use_id");
            json_array_append_new(msgs, json_pack("{s:s, s:o, s:o}", "role", "tool", "content", t,
                                                  "tool_call_id", id ? json_incref(id) : json_string("")));
        } else if (!strcmp(ty, "thinking") || !strcmp(ty, "redacted_thinking")) {
            continue;
        } else {
            json_array_append_new(text, json_deep_copy(b)); /* the OpenAI parser names the bad type */
        }
    }
    if (!rc && (json_array_size(text) || json_array_size(calls) || !strcmp(role, "assistant"))) {
        json_t *m = json_pack("{s:s, s:o}", "role", role, "content",
                              json_array_size(text)    ? json_incref(text)
                              : json_array_size(calls) ? json_null()
                                                       : json_string(""));
        if (json_array_size(calls)) json_object_set(m, "tool_calls", calls);
        json_array_append_new(msgs, m);
    }
    json_decref(text);
    json_decref(calls);
    return rc;
}

/* tools [{name, description, input_schema}] and tool_choice → OpenAI's. */
static kiln_code rewrite_tools(json_t *in, json_t *out, char *param, kiln_err *err)
{
    json_t *tools = json_object_get(in, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) return bad(err, param, "tools", "must be an array");
        json_t *oa = json_array();
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            json_t *name = json_object_get(t, "name");
            if (!json_is_string(name)) {
                json_decref(oa);
                return bad(err, param, "tools", "entries need a string 'name'");
            }
            json_t *fn = json_pack("{s:O}", "name", name);
            json_t *d = json_object_get(t, "description"), *sch = json_object_get(t, "input_schema");
            if (json_is_string(d)) json_object_set(fn, "description", d);
            if (json_is_object(sch)) json_object_set(fn, "parameters", sch);
            json_array_append_new(oa, json_pack("{s:s, s:o}", "type", "function", "function", fn));
        }
        json_object_set_new(out, "tools", oa);
    }
    json_t *tc = json_object_get(in, "tool_choice");
    if (tc && !json_is_null(tc)) {
        const char *ty = json_string_value(json_object_get(tc, "type"));
        if (!ty) return bad(err, param, "tool_choice", "must be {\"type\": \"auto\"|\"any\"|\"tool\"|\"none\"}");
        if (!strcmp(ty, "tool")) {
            json_t *name = json_object_get(tc, "name");
            if (!json_is_string(name)) return bad(err, param, "tool_choice", "of type 'tool' needs a 'name'");
            json_object_set_new(out, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name));
        } else if (!strcmp(ty, "auto") || !strcmp(ty, "none")) {
            json_object_set_new(out, "tool_choice", json_string(ty));
        } else if (!strcmp(ty, "any")) {
            json_object_set_new(out, "tool_choice", json_string("required"));
        } else {
            return bad(err, param, "tool_choice", "type must be auto, any, tool or none");
        }
        if (json_is_true(json_object_get(tc, "disable_parallel_tool_use")))
            json_object_set_new(out, "parallel_tool_calls", json_false());
    }
    return KILN_OK;
}

static kiln_code rewrite(json_t *in, json_t *out, bool count_only, char *param, kiln_err *err)
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
        json_t *c = json_object_get(msg, "content");
        kiln_code rc;
        if (json_is_string(c)) {
            json_array_append_new(msgs, json_pack("{s:O, s:O}", "role", role, "content", c));
        } else if (!json_is_array(c)) {
            return bad(err, param, "messages", "content must be a string or an array of blocks");
        } else if ((rc = rewrite_blocks(json_string_value(role), c, msgs, param, err))) {
            return rc;
        }
    }
    /* logit_bias and seed are kiln extensions (as in the OpenAI API) */
    static const char *const same[] = {"model", "max_tokens", "temperature", "top_p", "top_k", "stream",
                                       "logit_bias", "seed"};
    for (size_t k = 0; k < sizeof same / sizeof *same; k++) {
        json_t *v = json_object_get(in, same[k]);
        if (v) json_object_set(out, same[k], v);
    }
    if (!count_only && !json_object_get(in, "max_tokens")) return bad(err, param, "max_tokens", "is required");
    json_t *stop = json_object_get(in, "stop_sequences");
    if (stop) json_object_set(out, "stop", stop);
    json_t *th = json_object_get(in, "thinking");
    if (json_is_object(th) && json_is_string(json_object_get(th, "type")))
        json_object_set_new(out, "chat_template_kwargs",
                            json_pack("{s:b}", "enable_thinking",
                                      !strcmp(json_string_value(json_object_get(th, "type")), "enabled")));
    return rewrite_tools(in, out, param, err);
}

kiln_code srv_parse_anthropic(const char *body, size_t len, srv_request *out, char *param,
                              kiln_err *err)
{
    return srv_parse_anthropic_ex(body, len, false, out, param, err);
}

kiln_code srv_parse_anthropic_ex(const char *body, size_t len, bool count_only, srv_request *out,
                                 char *param, kiln_err *err)
{
    memset(out, 0, sizeof *out);
    param[0] = 0;
    json_t *in;
    kiln_code prc = srv_json_parse_object(body, len, &in, err);
    if (prc) return prc;
    json_t *oa = json_object();
    kiln_code rc = oa ? rewrite(in, oa, count_only, param, err) : kiln_fail(err, KILN_E_NOMEM, "out of memory");
    json_t *temp = json_object_get(in, "temperature");
    if (!rc && json_is_number(temp) && json_number_value(temp) > 1.0)
        rc = bad(err, param, "temperature", "must be between 0 and 1");
    json_decref(in);
    char *text = rc ? NULL : srv_json_dump(oa, NULL);
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
