/*
 * srv_responses.c — /v1/responses requests and response objects (see
 * srv_responses.h).
 *
 * Output items, in the order the model produced them: a `reasoning` item
 * (summary text), a `message` item (one output_text part), `function_call`
 * items. While streaming, one item is open at a time:
 *   NONE      -> REASONING | MESSAGE   srv_resp_text()  (output_item.added, part added)
 *   REASONING -> MESSAGE               srv_resp_text()  (the reasoning item is done)
 *   any       -> NONE                  srv_resp_call(), srv_resp_end()  (item done)
 * Invariant: (1) o->items holds exactly the finished items, in output_index order;
 * the open item (if any) has output_index json_array_size(o->items).
 * Threads: a srv_resp belongs to one generation's thread.
 */
#include "server/srv_responses.h"
#include "server/srv_json.h"
#include "server/srv_sse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OPEN_NONE, OPEN_REASONING, OPEN_MESSAGE, OPEN_CALL };

struct srv_resp {
    srv_reply_meta m;
    char prev_id[64];      /* previous_response_id or "" */
    bool store;
    json_t *items;         /* OWNED: finished output items (1) */
    int open;              /* OPEN_* */
    char item_id[48];      /* the open item's id */
    srv_buf reasoning, text; /* OWNED: all reasoning / output text so far */
    srv_buf open_text;     /* OWNED: the open item's text */
    int64_t seq;           /* sequence_number of the next event */
    json_t *calls;         /* OWNED: chat-style tool_calls of the output */
    json_t *echo;          /* OWNED or NULL: request fields the response repeats (srv_request.resp_echo) */
    char call_id[48];      /* OPEN_CALL: its call_id */
    json_t *call_name;     /* OWNED, OPEN_CALL: its name (a JSON string) */
};

/* ---------------------------------------------------------------- request */

static kiln_code bad(kiln_err *err, char *param, const char *name, const char *msg)
{
    snprintf(param, 64, "%s", name);
    return kiln_fail(err, KILN_E_INVALID, "'%s' %s", name, msg);
}

/* Message content: a string, or parts {type: input_text|output_text|text, text}. */
static json_t *item_content(json_t *c, char *param, kiln_err *err)
{
    if (json_is_string(c)) return json_incref(c);
    if (!json_is_array(c)) {
        bad(err, param, "input", "message content must be a string or an array of parts");
        return NULL;
    }
    json_t *parts = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(c, i, p) {
        const char *ty = json_string_value(json_object_get(p, "type"));
        if (ty && (!strcmp(ty, "input_text") || !strcmp(ty, "output_text") || !strcmp(ty, "text"))) {
            json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text",
                                                   json_object_get(p, "text")));
        } else {
            json_decref(parts);
            snprintf(param, 64, "input");
            kiln_fail(err, KILN_E_UNSUPPORTED, "input part type '%.32s' is not supported (text only)",
                      ty ? ty : "?");
            return NULL;
        }
    }
    return parts;
}

/* Input items → chat messages appended to msgs. */
static kiln_code input_items(json_t *in, json_t *msgs, char *param, kiln_err *err)
{
    if (json_is_string(in)) {
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", in));
        return KILN_OK;
    }
    if (!json_is_array(in)) return bad(err, param, "input", "must be a string or an array of items");
    json_t *calls = NULL; /* consecutive function_call items → one assistant message */
    size_t i;
    json_t *it;
    json_array_foreach(in, i, it) {
        const char *ty = json_string_value(json_object_get(it, "type"));
        if (!ty && json_object_get(it, "role")) ty = "message";
        if (!ty) return bad(err, param, "input", "items need a 'type'");
        if (!strcmp(ty, "function_call")) {
            json_t *name = json_object_get(it, "name"), *args = json_object_get(it, "arguments");
            json_t *id = json_object_get(it, "call_id");
            if (!json_is_string(name)) return bad(err, param, "input", "function_call items need a 'name'");
            if (!calls) {
                calls = json_array();
                json_array_append_new(msgs, json_pack("{s:s, s:n, s:o}", "role", "assistant", "content",
                                                      "tool_calls", calls));
            }
            json_array_append_new(calls, json_pack("{s:o, s:s, s:{s:O, s:o}}", "id", id ? json_incref(id) : json_string(""),
                                                   "type", "function", "function", "name", name,
                                                   "arguments", args ? json_incref(args) : json_string("{}")));
            continue;
        }
        calls = NULL;
        if (!strcmp(ty, "function_call_output")) {
            json_t *out = json_object_get(it, "output"), *id = json_object_get(it, "call_id");
            json_t *c = out ? item_content(out, param, err) : json_string("");
            if (!c) return err->code;
            json_array_append_new(msgs, json_pack("{s:s, s:o, s:o}", "role", "tool", "content", c,
                                                  "tool_call_id", id ? json_incref(id) : json_string("")));
        } else if (!strcmp(ty, "message")) {
            json_t *role = json_object_get(it, "role");
            if (!json_is_string(role)) return bad(err, param, "input", "message items need a 'role'");
            json_t *c = item_content(json_object_get(it, "content"), param, err);
            if (!c) return err->code;
            json_array_append_new(msgs, json_pack("{s:O, s:o}", "role", role, "content", c));
        } else if (strcmp(ty, "reasoning") != 0) {
            snprintf(param, 64, "input");
            return kiln_fail(err, KILN_E_UNSUPPORTED, "input item type '%.32s' is not supported", ty);
        }
    }
    return KILN_OK;
}

/* Flat function tools {type, name, description, parameters} → chat tools. */
static kiln_code rewrite_tools(json_t *in, json_t *out, char *param, kiln_err *err)
{
    json_t *tools = json_object_get(in, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) return bad(err, param, "tools", "must be an array");
        json_t *oa = json_array();
        json_object_set_new(out, "tools", oa);
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            const char *ty = json_string_value(json_object_get(t, "type"));
            if (!ty || strcmp(ty, "function")) {
                snprintf(param, 64, "tools");
                return kiln_fail(err, KILN_E_UNSUPPORTED, "tool type '%.32s' is not supported (function only)",
                                 ty ? ty : "?");
            }
            json_t *fn = json_object();
            static const char *const keep[] = {"name", "description", "parameters", "strict"};
            for (size_t k = 0; k < sizeof keep / sizeof *keep; k++) {
                json_t *v = json_object_get(t, keep[k]);
                if (v && !json_is_null(v)) json_object_set(fn, keep[k], v);
            }
            json_array_append_new(oa, json_pack("{s:s, s:o}", "type", "function", "function", fn));
        }
    }
    json_t *tc = json_object_get(in, "tool_choice");
    if (json_is_object(tc)) {
        json_t *name = json_object_get(tc, "name");
        if (!json_is_string(name)) return bad(err, param, "tool_choice", "must name a function");
        json_object_set_new(out, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name));
    } else if (tc) {
        json_object_set(out, "tool_choice", tc);
    }
    return KILN_OK;
}

static kiln_code rewrite(srv_rstore *store, json_t *in, json_t *out, bool *instr, char *param, kiln_err *err)
{
    json_t *msgs = json_array();
    json_object_set_new(out, "messages", msgs);
    json_t *ins = json_object_get(in, "instructions");
    if (json_is_string(ins)) {
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content", ins));
        *instr = true;
    }
    json_t *prev = json_object_get(in, "previous_response_id");
    if (prev && !json_is_null(prev)) {
        if (!json_is_string(prev)) return bad(err, param, "previous_response_id", "must be a string");
        json_t *old = store ? srv_rstore_get(store, json_string_value(prev)) : NULL;
        if (!old) {
            snprintf(param, 64, "previous_response_id");
            return kiln_fail(err, KILN_E_NOT_FOUND, "Previous response with id '%.64s' not found "
                             "(unknown, expired, or stored with store: false)", json_string_value(prev));
        }
        json_array_extend(msgs, old);
        json_decref(old);
    }
    json_t *input = json_object_get(in, "input");
    if (!input || json_is_null(input)) return bad(err, param, "input", "is required");
    kiln_code rc = input_items(input, msgs, param, err);
    if (rc) return rc;
    static const char *const same[] = {"model", "temperature", "top_p", "stream", "parallel_tool_calls",
                                       "logit_bias", "seed", "top_k"};
    for (size_t k = 0; k < sizeof same / sizeof *same; k++) {
        json_t *v = json_object_get(in, same[k]);
        if (v) json_object_set(out, same[k], v);
    }
    json_t *mot = json_object_get(in, "max_output_tokens");
    if (mot) json_object_set(out, "max_tokens", mot);
    json_t *effort = json_object_get(json_object_get(in, "reasoning"), "effort");
    if (json_is_string(effort)) json_object_set(out, "reasoning_effort", effort);
    /* text.format {type: text|json_object|json_schema (name, schema, strict flat)} → response_format */
    json_t *text = json_object_get(in, "text");
    if (text && !json_is_null(text)) {
        json_t *fmt = json_object_get(text, "format");
        if (!json_is_object(text) || (fmt && !json_is_null(fmt) && !json_is_object(fmt)))
            return bad(err, param, "text", "must be an object with an object 'format'");
        const char *ty = json_string_value(json_object_get(fmt, "type"));
        if (ty && !strcmp(ty, "json_schema")) {
            json_t *js = json_object();
            static const char *const keys[] = {"name", "schema", "strict", "description"};
            for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
                json_t *v = json_object_get(fmt, keys[k]);
                if (v) json_object_set(js, keys[k], v);
            }
            json_object_set_new(out, "response_format", json_pack("{s:s, s:o}", "type", "json_schema", "json_schema", js));
        } else if (fmt && !json_is_null(fmt)) {
            json_object_set(out, "response_format", fmt);
        }
    }
    return rewrite_tools(in, out, param, err);
}

kiln_code srv_parse_responses(srv_rstore *store, const char *body, size_t len, srv_request *out,
                              char *param, kiln_err *err)
{
    memset(out, 0, sizeof *out);
    param[0] = 0;
    json_t *in;
    kiln_code prc = srv_json_parse_object(body, len, &in, err);
    if (prc) return prc;
    bool instr = false;
    json_t *oa = json_object();
    kiln_code rc = oa ? rewrite(store, in, oa, &instr, param, err) : kiln_fail(err, KILN_E_NOMEM, "out of memory");
    json_t *st = json_object_get(in, "store");
    bool do_store = !json_is_false(st);
    json_t *prev = json_object_get(in, "previous_response_id");
    char prev_id[64] = "";
    if (json_is_string(prev)) snprintf(prev_id, sizeof prev_id, "%s", json_string_value(prev));
    /* what the response object repeats of the request (the API's schema requires it) */
    json_t *echo = json_object();
    static const char *const echoed[] = {"instructions", "tools", "tool_choice", "temperature", "top_p",
                                         "metadata", "parallel_tool_calls", "max_output_tokens"};
    for (size_t k = 0; echo && k < sizeof echoed / sizeof *echoed; k++) {
        json_t *v = json_object_get(in, echoed[k]);
        if (v && !json_is_null(v) && json_object_set_new(echo, echoed[k], json_deep_copy(v))) {
            json_decref(echo);
            echo = NULL;
        }
    }
    /* a function tool as the response shows it: `strict` and `parameters` always there
     * (null: not given) */
    size_t ti;
    json_t *tool;
    json_array_foreach(json_object_get(echo, "tools"), ti, tool) {
        if (!json_is_object(tool)) continue;
        if (!json_object_get(tool, "strict")) json_object_set_new(tool, "strict", json_null());
        if (!json_object_get(tool, "parameters")) json_object_set_new(tool, "parameters", json_null());
    }
    json_decref(in);
    char *text = rc || !echo ? NULL : srv_json_dump(oa, NULL);
    json_decref(oa);
    if (rc) {
        json_decref(echo);
        return rc;
    }
    if (!text) {
        json_decref(echo);
        return kiln_fail(err, KILN_E_NOMEM, "out of memory");
    }
    rc = srv_parse_request(SRV_API_CHAT, text, strlen(text), out, param, err);
    free(text);
    if (rc) {
        json_decref(echo);
        if (!strcmp(param, "max_tokens")) snprintf(param, 64, "max_output_tokens");
        if (!strcmp(param, "messages")) snprintf(param, 64, "input");
        if (!strcmp(param, "response_format")) snprintf(param, 64, "text");
        return rc;
    }
    out->api = SRV_API_RESPONSES;
    if (!strcmp(out->format_param, "response_format")) snprintf(out->format_param, sizeof out->format_param, "text");
    out->store = do_store;
    out->instructions = instr;
    out->previous_response_id = prev_id[0] ? strdup(prev_id) : NULL;
    out->resp_echo = echo;
    return KILN_OK;
}

/* ---------------------------------------------------------------- response */

srv_resp *srv_resp_new(const srv_reply_meta *m, const srv_request *r)
{
    srv_resp *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    o->m = *m;
    o->items = json_array();
    o->calls = json_array();
    o->store = r->store;
    o->echo = json_incref(r->resp_echo);
    if (r->previous_response_id) snprintf(o->prev_id, sizeof o->prev_id, "%s", r->previous_response_id);
    if (!o->items || !o->calls) {
        srv_resp_free(o);
        return NULL;
    }
    return o;
}

void srv_resp_free(srv_resp *o)
{
    if (!o) return;
    json_decref(o->items);
    json_decref(o->calls);
    json_decref(o->call_name);
    json_decref(o->echo);
    srv_buf_free(&o->reasoning);
    srv_buf_free(&o->text);
    srv_buf_free(&o->open_text);
    free(o);
}

/* One stream event: {type: name, sequence_number, ...fields}. */
static int ev(srv_resp *o, srv_buf *out, const char *name, json_t *j /* stolen */)
{
    if (!out) {
        json_decref(j);
        return 0;
    }
    if (!j) return -1;
    json_object_set_new(j, "type", json_string(name));
    json_object_set_new(j, "sequence_number", json_integer(o->seq++));
    int rc = srv_sse_event(out, name, j);
    json_decref(j);
    return rc;
}

static json_t *response_obj(const srv_resp *o, const char *status, json_t *output, json_t *usage)
{
    json_t *r = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:o, s:n, s:n, s:b, s:o, s:o}", "id", o->m.id,
                          "object", "response", "created_at", (json_int_t)o->m.created, "status", status,
                          "model", o->m.model ? o->m.model : "", "output", output ? output : json_array(),
                          "usage", usage ? usage : json_null(), "error", "incomplete_details", "store",
                          o->store, "previous_response_id",
                          o->prev_id[0] ? json_string(o->prev_id) : json_null(), "parallel_tool_calls",
                          json_true());
    if (r && !strcmp(status, "incomplete"))
        json_object_set_new(r, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
    if (r && !usage) json_object_del(r, "usage"); /* optional, not nullable: absent until the end */
    /* the request's settings, as OpenAI repeats them (required by the API's schema) */
    static const struct { const char *key; const char *dflt; } echo[] = {
        {"instructions", NULL}, {"metadata", "{}"}, {"temperature", NULL}, {"top_p", NULL},
        {"tools", "[]"}, {"tool_choice", "\"auto\""}, {"parallel_tool_calls", "true"}, {"max_output_tokens", NULL},
    };
    for (size_t k = 0; r && k < sizeof echo / sizeof *echo; k++) {
        json_t *v = json_object_get(o->echo, echo[k].key);
        json_object_set_new(r, echo[k].key, v ? json_incref(v)
                                              : echo[k].dflt ? json_loads(echo[k].dflt, JSON_DECODE_ANY, NULL)
                                                             : json_null());
    }
    return r;
}

static json_t *reasoning_item(const srv_resp *o, const char *id)
{
    return json_pack("{s:s, s:s, s:[{s:s, s:o}], s:s}", "type", "reasoning", "id", id, "summary", "type",
                     "summary_text", "text", srv_json_text(o->open_text.p ? o->open_text.p : "", o->open_text.len),
                     "status", "completed");
}

static json_t *message_item(const srv_resp *o, const char *id, const char *status, bool with_text)
{
    json_t *content = with_text ? json_pack("[{s:s, s:o, s:[], s:[]}]", "type", "output_text", "text",
                                            srv_json_text(o->open_text.p ? o->open_text.p : "", o->open_text.len),
                                            "annotations", "logprobs")
                                : json_array();
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "type", "message", "id", id, "status", status, "role",
                     "assistant", "content", content);
}

/* The open function_call item ends: its arguments are whole (complete) or
 * the call turned out malformed after it was shown (status incomplete). */
static int close_call(srv_resp *o, srv_buf *out, bool complete)
{
    int rc = 0, idx = (int)json_array_size(o->items);
    json_t *ja = srv_json_text(o->open_text.p ? o->open_text.p : "", o->open_text.len);
    rc |= ev(o, out, "response.function_call_arguments.done",
             json_pack("{s:s, s:i, s:O, s:O}", "item_id", o->item_id, "output_index", idx, "name", o->call_name,
                       "arguments", ja));
    json_t *item = json_pack("{s:s, s:s, s:s, s:O, s:O, s:s}", "type", "function_call", "id", o->item_id,
                             "call_id", o->call_id, "name", o->call_name, "arguments", ja, "status",
                             complete ? "completed" : "incomplete");
    rc |= ev(o, out, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", idx, "item", item));
    rc |= json_array_append_new(o->items, item);
    if (complete) {
        json_t *args_obj = json_loadb(o->open_text.p ? o->open_text.p : "", o->open_text.len, JSON_ALLOW_NUL, NULL);
        rc |= json_array_append_new(o->calls, json_pack("{s:s, s:s, s:{s:O, s:o}}", "id", o->call_id, "type",
                                                        "function", "function", "name", o->call_name,
                                                        "arguments", args_obj ? args_obj : json_object()));
    }
    json_decref(ja);
    json_decref(o->call_name);
    o->call_name = NULL;
    o->open = OPEN_NONE;
    srv_buf_reset(&o->open_text);
    return rc;
}

static int close_item(srv_resp *o, srv_buf *out)
{
    if (o->open == OPEN_NONE) return 0;
    if (o->open == OPEN_CALL) return close_call(o, out, false);
    int rc = 0;
    int idx = (int)json_array_size(o->items);
    json_t *item;
    json_t *txt = srv_json_text(o->open_text.p ? o->open_text.p : "", o->open_text.len);
    if (o->open == OPEN_REASONING) {
        rc |= ev(o, out, "response.reasoning_summary_text.done",
                 json_pack("{s:s, s:i, s:i, s:O}", "item_id", o->item_id, "output_index", idx, "summary_index", 0, "text", txt));
        rc |= ev(o, out, "response.reasoning_summary_part.done",
                 json_pack("{s:s, s:i, s:i, s:{s:s, s:O}}", "item_id", o->item_id, "output_index", idx,
                           "summary_index", 0, "part", "type", "summary_text", "text", txt));
        item = reasoning_item(o, o->item_id);
    } else {
        rc |= ev(o, out, "response.output_text.done",
                 json_pack("{s:s, s:i, s:i, s:O, s:[]}", "item_id", o->item_id, "output_index", idx, "content_index", 0,
                           "text", txt, "logprobs"));
        rc |= ev(o, out, "response.content_part.done",
                 json_pack("{s:s, s:i, s:i, s:{s:s, s:O, s:[], s:[]}}", "item_id", o->item_id, "output_index", idx,
                           "content_index", 0, "part", "type", "output_text", "text", txt, "annotations",
                           "logprobs"));
        item = message_item(o, o->item_id, "completed", true);
    }
    json_decref(txt);
    rc |= ev(o, out, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", idx, "item", item));
    rc |= json_array_append_new(o->items, item);
    o->open = OPEN_NONE;
    srv_buf_reset(&o->open_text);
    return rc;
}

static int open_item(srv_resp *o, srv_buf *out, int kind)
{
    if (o->open == kind) return 0;
    int rc = close_item(o, out);
    int idx = (int)json_array_size(o->items);
    srv_reply_call_id(o->item_id, kind == OPEN_REASONING ? "rs_" : "msg_", o->m.id, 0, (size_t)idx + 1000);
    o->open = kind;
    if (kind == OPEN_REASONING) {
        rc |= ev(o, out, "response.output_item.added",
                 json_pack("{s:i, s:{s:s, s:s, s:[]}}", "output_index", idx, "item", "type", "reasoning", "id",
                           o->item_id, "summary"));
        rc |= ev(o, out, "response.reasoning_summary_part.added",
                 json_pack("{s:s, s:i, s:i, s:{s:s, s:s}}", "item_id", o->item_id, "output_index", idx,
                           "summary_index", 0, "part", "type", "summary_text", "text", ""));
    } else {
        rc |= ev(o, out, "response.output_item.added",
                 json_pack("{s:i, s:o}", "output_index", idx, "item", message_item(o, o->item_id, "in_progress", false)));
        rc |= ev(o, out, "response.content_part.added",
                 json_pack("{s:s, s:i, s:i, s:{s:s, s:s, s:[], s:[]}}", "item_id", o->item_id, "output_index", idx,
                           "content_index", 0, "part", "type", "output_text", "text", "", "annotations",
                           "logprobs"));
    }
    return rc;
}

int srv_resp_begin(srv_resp *o, srv_buf *out)
{
    int rc = ev(o, out, "response.created", json_pack("{s:o}", "response", response_obj(o, "in_progress", NULL, NULL)));
    return rc | ev(o, out, "response.in_progress", json_pack("{s:o}", "response", response_obj(o, "in_progress", NULL, NULL)));
}

int srv_resp_text(srv_resp *o, srv_buf *out, const char *reasoning, size_t rn, const char *content, size_t cn)
{
    int rc = 0;
    int idx;
    if (rn) {
        rc |= open_item(o, out, OPEN_REASONING);
        idx = (int)json_array_size(o->items);
        rc |= srv_buf_add(&o->open_text, reasoning, rn) | srv_buf_add(&o->reasoning, reasoning, rn);
        rc |= ev(o, out, "response.reasoning_summary_text.delta",
                 json_pack("{s:s, s:i, s:i, s:o}", "item_id", o->item_id, "output_index", idx, "summary_index", 0,
                           "delta", srv_json_text(reasoning, rn)));
    }
    if (cn) {
        rc |= open_item(o, out, OPEN_MESSAGE);
        idx = (int)json_array_size(o->items);
        rc |= srv_buf_add(&o->open_text, content, cn) | srv_buf_add(&o->text, content, cn);
        rc |= ev(o, out, "response.output_text.delta",
                 json_pack("{s:s, s:i, s:i, s:o, s:[]}", "item_id", o->item_id, "output_index", idx, "content_index", 0,
                           "delta", srv_json_text(content, cn), "logprobs"));
    }
    return rc;
}

int srv_resp_call_open(srv_resp *o, srv_buf *out, const char *call_id, const char *name)
{
    int rc = close_item(o, out);
    int idx = (int)json_array_size(o->items);
    srv_reply_call_id(o->item_id, "fc_", o->m.id, 1, (size_t)idx);
    snprintf(o->call_id, sizeof o->call_id, "%s", call_id);
    if (!(o->call_name = srv_json_text(name, strlen(name)))) return -1;
    o->open = OPEN_CALL;
    return rc | ev(o, out, "response.output_item.added",
                   json_pack("{s:i, s:{s:s, s:s, s:s, s:O, s:s, s:s}}", "output_index", idx, "item", "type",
                             "function_call", "id", o->item_id, "call_id", call_id, "name", o->call_name,
                             "arguments", "", "status", "in_progress"));
}

int srv_resp_call_delta(srv_resp *o, srv_buf *out, const char *frag, size_t n)
{
    if (o->open != OPEN_CALL || !n) return 0;
    int rc = srv_buf_add(&o->open_text, frag, n);
    return rc | ev(o, out, "response.function_call_arguments.delta",
                   json_pack("{s:s, s:i, s:o}", "item_id", o->item_id, "output_index",
                             (int)json_array_size(o->items), "delta", srv_json_text(frag, n)));
}

int srv_resp_call_close(srv_resp *o, srv_buf *out, bool complete)
{
    return o->open == OPEN_CALL ? close_call(o, out, complete) : 0;
}

int srv_resp_call(srv_resp *o, srv_buf *out, const char *call_id, const char *name, const char *args)
{
    int rc = srv_resp_call_open(o, out, call_id, name);
    rc |= srv_resp_call_delta(o, out, args, strlen(args));
    return rc | srv_resp_call_close(o, out, true);
}

json_t *srv_resp_end(srv_resp *o, srv_buf *out, const char *status, json_t *usage)
{
    close_item(o, out);
    json_t *r = response_obj(o, status, json_deep_copy(o->items), usage);
    if (r && out)
        ev(o, out, !strcmp(status, "completed") ? "response.completed" : "response.incomplete",
           json_pack("{s:O}", "response", r));
    return r;
}

int srv_resp_fail(srv_resp *o, srv_buf *out, const char *message)
{
    json_t *r = response_obj(o, "failed", json_deep_copy(o->items), NULL);
    if (r) json_object_set_new(r, "error", json_pack("{s:s, s:s}", "code", "server_error", "message", message));
    return ev(o, out, "response.failed", json_pack("{s:o}", "response", r));
}

json_t *srv_resp_chat_message(const srv_resp *o)
{
    json_t *m = json_pack("{s:s, s:o}", "role", "assistant", "content",
                          o->text.len || !json_array_size(o->calls) ? srv_json_text(o->text.p ? o->text.p : "", o->text.len)
                                                                    : json_null());
    if (m && json_array_size(o->calls)) json_object_set(m, "tool_calls", o->calls);
    return m;
}

json_t *srv_resp_usage(int32_t input, int32_t output, int32_t cached, int32_t reasoning)
{
    /* cache_write_tokens: a billing notion (tokens stored for extended prompt caching); kiln's
     * prefix cache costs nothing to write, so 0 */
    return json_pack("{s:i, s:i, s:i, s:{s:i, s:i}, s:{s:i}}", "input_tokens", (json_int_t)input, "output_tokens",
                     (json_int_t)output, "total_tokens", (json_int_t)input + output, "input_tokens_details",
                     "cached_tokens", (json_int_t)cached, "cache_write_tokens", 0, "output_tokens_details",
                     "reasoning_tokens", (json_int_t)reasoning);
}
