/*
 * srv_toolreq.c — request-side tool fields (see srv_toolreq.h).
 * Threads: no shared state; any HTTP thread.
 * Errors: KILN_E_INVALID naming `tools`, `tool_choice`, `parallel_tool_calls`
 * or `messages`; KILN_E_NOMEM.
 */
#include "server/srv_toolreq.h"
#include "server/srv_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kiln_code bad(kiln_err *err, char *param, const char *name, const char *msg)
{
    snprintf(param, 64, "%s", name);
    return kiln_fail(err, KILN_E_INVALID, "%s", msg);
}

static const char *tool_name(const json_t *t)
{
    json_t *fn = json_object_get(t, "function");
    return json_string_value(json_object_get(fn ? fn : t, "name"));
}

/* tools: an array of {"type": "function", "function": {"name", "parameters"?}}. */
static kiln_code check_tools(const json_t *tools, char *param, kiln_err *err)
{
    if (!json_is_array(tools)) return bad(err, param, "tools", "'tools' must be an array");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *ty = json_string_value(json_object_get(t, "type"));
        if (!json_is_object(t) || (ty && strcmp(ty, "function")))
            return bad(err, param, "tools", "'tools' entries must be {\"type\": \"function\", \"function\": {...}}");
        const char *n = tool_name(t);
        if (!n || !n[0]) return bad(err, param, "tools", "every tool needs a 'function.name' string");
        json_t *fn = json_object_get(t, "function");
        json_t *params = json_object_get(fn ? fn : t, "parameters");
        if (params && !json_is_object(params) && !json_is_null(params))
            return bad(err, param, "tools", "a tool's 'parameters' must be a JSON schema object");
        char what[160];
        snprintf(what, sizeof what, "the parameters schema of tool '%.64s'", n);
        if (srv_json_check_depth(params, false, what, err)) {
            snprintf(param, 64, "tools");
            return err->code;
        }
    }
    return KILN_OK;
}

static kiln_code parse_choice(const json_t *root, srv_request *r, char *param, kiln_err *err)
{
    json_t *c = json_object_get(root, "tool_choice");
    r->tool_choice = SRV_TOOLS_AUTO;
    if (!c || json_is_null(c)) return KILN_OK;
    if (json_is_string(c)) {
        const char *s = json_string_value(c);
        if (!strcmp(s, "auto")) return KILN_OK;
        if (!strcmp(s, "none")) r->tool_choice = SRV_TOOLS_NONE;
        else if (!strcmp(s, "required") || !strcmp(s, "any")) r->tool_choice = SRV_TOOLS_REQUIRED;
        else return bad(err, param, "tool_choice", "'tool_choice' must be auto, none, required or "
                                                   "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        return KILN_OK;
    }
    json_t *fn = json_object_get(c, "function");
    const char *name = json_string_value(json_object_get(fn ? fn : c, "name"));
    if (!json_is_object(c) || !name)
        return bad(err, param, "tool_choice", "'tool_choice' must be auto, none, required or "
                                              "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    r->tool_choice = SRV_TOOLS_NAMED;
    r->tool_name = strdup(name);
    return r->tool_name ? KILN_OK : kiln_fail(err, KILN_E_NOMEM, "out of memory");
}

/* Keeps the tools the choice allows: none → no tools; named → that one. */
static kiln_code pick_tools(json_t *tools, srv_request *r, char *param, kiln_err *err)
{
    if (!json_array_size(tools) || r->tool_choice == SRV_TOOLS_NONE) {
        if (r->tool_choice == SRV_TOOLS_REQUIRED || r->tool_choice == SRV_TOOLS_NAMED)
            return bad(err, param, "tool_choice", "'tool_choice' asks for a tool call but 'tools' is empty");
        return KILN_OK;
    }
    if (r->tool_choice != SRV_TOOLS_NAMED) {
        r->tools = json_incref(tools);
        return KILN_OK;
    }
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *n = tool_name(t);
        if (n && !strcmp(n, r->tool_name)) {
            r->tools = json_pack("[O]", t);
            return r->tools ? KILN_OK : kiln_fail(err, KILN_E_NOMEM, "out of memory");
        }
    }
    snprintf(param, 64, "tool_choice");
    return kiln_fail(err, KILN_E_INVALID, "'tool_choice' names '%.64s', which is not in 'tools'", r->tool_name);
}

/* A deep copy of one assistant tool call, arguments parsed into an object. */
static json_t *norm_call(const json_t *call)
{
    json_t *c = json_deep_copy(call);
    if (!c) return NULL;
    if (!json_object_get(c, "type")) json_object_set_new(c, "type", json_string("function"));
    json_t *fn = json_object_get(c, "function");
    json_t *a = json_object_get(fn, "arguments");
    if (json_is_string(a)) {
        json_t *o = json_loads(json_string_value(a), 0, NULL);
        if (json_is_object(o)) json_object_set_new(fn, "arguments", o);
        else json_decref(o);
    } else if (fn && (!a || json_is_null(a))) { /* none: no arguments */
        json_object_set_new(fn, "arguments", json_object());
    }
    return c;
}

static kiln_code norm_messages(json_t *messages, char *param, kiln_err *err)
{
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        json_t *calls = json_object_get(m, "tool_calls");
        if (!calls || json_is_null(calls)) continue;
        if (!json_is_array(calls)) return bad(err, param, "messages", "'tool_calls' must be an array");
        json_t *out = json_array();
        size_t k;
        json_t *c;
        json_array_foreach(calls, k, c) {
            json_t *fn = json_object_get(c, "function");
            if (!json_is_object(c) || !json_is_string(json_object_get(fn, "name"))) {
                json_decref(out);
                return bad(err, param, "messages", "each 'tool_calls' entry needs 'function.name'");
            }
            json_t *args = json_object_get(fn, "arguments");
            if (args && !json_is_string(args) && !json_is_object(args) && !json_is_null(args)) {
                json_decref(out);
                return bad(err, param, "messages",
                           "a tool call's 'function.arguments' must be a JSON string (or an object)");
            }
            /* parsed (norm_call) and handed to the template: bounded first */
            char what[160];
            snprintf(what, sizeof what, "the arguments of tool call %zu of message %zu", k, i);
            if (srv_json_check_depth(json_object_get(fn, "arguments"), true, what, err)) {
                json_decref(out);
                snprintf(param, 64, "messages");
                return err->code;
            }
            json_array_append_new(out, norm_call(c));
        }
        json_object_set_new(m, "tool_calls", out);
    }
    return KILN_OK;
}

kiln_code srv_parse_tools(const json_t *root, srv_request *r, char *param, kiln_err *err)
{
    kiln_code rc;
    json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_null(tools) && (rc = check_tools(tools, param, err))) return rc;
    if ((rc = parse_choice(root, r, param, err))) return rc;
    json_t *ptc = json_object_get(root, "parallel_tool_calls");
    if (ptc && !json_is_null(ptc)) {
        if (!json_is_boolean(ptc)) return bad(err, param, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
        r->parallel_tool_calls = json_is_true(ptc);
    }
    if (json_is_array(tools) && (rc = pick_tools(tools, r, param, err))) return rc;
    if (!json_is_array(tools) && (r->tool_choice == SRV_TOOLS_REQUIRED || r->tool_choice == SRV_TOOLS_NAMED))
        return bad(err, param, "tool_choice", "'tool_choice' asks for a tool call but there are no 'tools'");
    return norm_messages(r->messages, param, err);
}
