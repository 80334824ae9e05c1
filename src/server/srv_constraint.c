/*
 * srv_constraint.c — request formats and tool calls as one grammar (see
 * srv_constraint.h).
 *
 * The grammar continues the prompt: for a forced call it starts where
 * srv_tool_prefill's text ends, so both are written here, per family:
 *   family       prefill (required / named)                      grammar
 *   hermes       <tool_call>\n / ... {"name": "N", "arguments":   CALL </tool_call> [more]
 *   qwen3_coder  <tool_call>\n / ... <function=N>\n                XML call </tool_call> [more]
 *   llama3       {"name": " / {"name": "N", "parameters":          rest of the object
 *   mistral      [TOOL_CALLS] / [TOOL_CALLS][{"name": "N", ...     the JSON array
 *   mistral v11  [TOOL_CALLS] / [TOOL_CALLS]N[ARGS]                arguments (named only)
 *   gemma4       <|tool_call>call: / <|tool_call>call:N             [N]{ARGS}<tool_call|> [more]
 * Auto: hermes/qwen3_coder: text without the call markers, then calls;
 * llama3: a call object, or text that does not start with '{'; mistral: the
 * call array after the [TOOL_CALLS] token (a trigger: it is special).
 * Gemma 4's arguments are its own syntax, with its special tokens as
 * terminals (gr_special); in auto mode its calls start at the <|tool_call>
 * token (a trigger). FunctionGemma (<start_function_call>): prefill only.
 * Threads: no shared state; HTTP threads.
 */
#include "server/srv_constraint.h"
#include "server/srv_json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- parsing */

static kiln_code bad(kiln_err *err, char *param, const char *name, const char *msg)
{
    snprintf(param, 64, "%s", name);
    return kiln_fail(err, KILN_E_INVALID, "%s", msg);
}

static kiln_code set_schema(srv_request *r, const json_t *schema, bool strict, const char *field,
                            char *param, kiln_err *err)
{
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return bad(err, param, field, "the JSON schema must be an object");
    if (srv_json_check_depth(schema, false, "the JSON schema", err)) {
        snprintf(param, 64, "%s", field);
        return err->code;
    }
    r->format = SRV_FMT_JSON_SCHEMA;
    r->schema = json_deep_copy(schema);
    r->schema_strict = strict;
    snprintf(r->format_param, sizeof r->format_param, "%s", field);
    return r->schema ? KILN_OK : kiln_fail(err, KILN_E_NOMEM, "out of memory");
}

kiln_code srv_parse_format(const json_t *root, srv_request *r, char *param, kiln_err *err)
{
    const json_t *rf = json_object_get(root, "response_format");
    const json_t *gb = json_object_get(root, "grammar");
    const json_t *js = json_object_get(root, "json_schema");
    int given = 0;
    if (rf && !json_is_null(rf)) {
        if (!json_is_object(rf))
            return bad(err, param, "response_format", "'response_format' must be an object");
        const char *ty = json_string_value(json_object_get(rf, "type"));
        if (!ty)
            return bad(err, param, "response_format", "'response_format' needs a string 'type'");
        if (!strcmp(ty, "json_object")) {
            r->format = SRV_FMT_JSON_OBJECT;
            snprintf(r->format_param, sizeof r->format_param, "response_format");
            given++;
        } else if (!strcmp(ty, "json_schema")) {
            const json_t *j = json_object_get(rf, "json_schema");
            if (!json_is_object(j))
                return bad(err, param, "response_format",
                           "'response_format.json_schema' must be an object "
                           "with 'name' and 'schema'");
            const json_t *name = json_object_get(j, "name"), *strict = json_object_get(j, "strict");
            if (name && !json_is_string(name))
                return bad(err, param, "response_format",
                           "'response_format.json_schema.name' must be a string");
            if (strict && !json_is_boolean(strict) && !json_is_null(strict))
                return bad(err, param, "response_format",
                           "'response_format.json_schema.strict' must be a boolean");
            const json_t *schema = json_object_get(j, "schema");
            if (!schema || json_is_null(schema)) {
                r->format = SRV_FMT_JSON_OBJECT; /* no schema: any JSON object */
                snprintf(r->format_param, sizeof r->format_param, "response_format");
            } else {
                kiln_code rc =
                    set_schema(r, schema, json_is_true(strict), "response_format", param, err);
                if (rc) return rc;
            }
            given++;
        } else if (strcmp(ty, "text")) {
            snprintf(param, 64, "response_format");
            return kiln_fail(err, KILN_E_UNSUPPORTED,
                             "'response_format' type '%.32s' is not supported "
                             "(text, json_object, json_schema)",
                             ty);
        }
    }
    if (js && !json_is_null(js)) {
        kiln_code rc = set_schema(r, js, false, "json_schema", param, err);
        if (rc) return rc;
        given++;
    }
    if (gb && !json_is_null(gb)) {
        if (!json_is_string(gb))
            return bad(err, param, "grammar", "'grammar' must be a string (GBNF)");
        if (json_string_length(gb) > 1 << 20)
            return bad(err, param, "grammar", "'grammar' is over 1 MiB");
        r->format = SRV_FMT_GRAMMAR;
        r->grammar = strdup(json_string_value(gb));
        snprintf(r->format_param, sizeof r->format_param, "grammar");
        if (!r->grammar) return kiln_fail(err, KILN_E_NOMEM, "out of memory");
        given++;
    }
    if (given > 1)
        return bad(err, param, r->format_param,
                   "give at most one of 'response_format' (json), "
                   "'json_schema' and 'grammar'");
    return KILN_OK;
}

/* ---------------------------------------------------------------- prefill */

static int dupf(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int dupf(char **out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    *out = n < 0 ? NULL : malloc((size_t)n + 1);
    if (!*out) return -1;
    va_start(ap, fmt);
    vsnprintf(*out, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return n;
}

/* Mistral's newer format: [TOOL_CALLS]NAME[ARGS]{...} ([ARGS] is a token). */
static bool mistral_v11(const tok_tokenizer *tok)
{
    return tok && tok_piece_to_id(tok, "[ARGS]", 6) >= 0;
}

char *srv_tool_prefill(srv_tc_family f, const srv_request *r, const tok_tokenizer *tok)
{
    if (r->tool_choice != SRV_TOOLS_REQUIRED && r->tool_choice != SRV_TOOLS_NAMED) return NULL;
    bool named = r->tool_choice == SRV_TOOLS_NAMED;
    const char *nm = named ? r->tool_name : "";
    char *out = NULL;
    int rc = -1;
    switch (f) {
    case SRV_TC_HERMES:
        rc = named ? dupf(&out, "<tool_call>\n{\"name\": \"%s\", \"arguments\": ", nm)
                   : dupf(&out, "<tool_call>\n");
        break;
    case SRV_TC_QWEN3_CODER:
        rc = named ? dupf(&out, "<tool_call>\n<function=%s>\n", nm) : dupf(&out, "<tool_call>\n");
        break;
    case SRV_TC_LLAMA3:
        rc = named ? dupf(&out, "{\"name\": \"%s\", \"parameters\": ", nm)
                   : dupf(&out, "{\"name\": \"");
        break;
    case SRV_TC_MISTRAL:
        if (mistral_v11(tok))
            rc = named ? dupf(&out, "[TOOL_CALLS]%s[ARGS]", nm) : dupf(&out, "[TOOL_CALLS]");
        else
            rc = named ? dupf(&out, "[TOOL_CALLS][{\"name\": \"%s\", \"arguments\": ", nm)
                       : dupf(&out, "[TOOL_CALLS]");
        break;
    case SRV_TC_GEMMA:
        rc = named ? dupf(&out, "<start_function_call>call:%s{", nm)
                   : dupf(&out, "<start_function_call>call:");
        break;
    case SRV_TC_GEMMA4: /* the grammar writes the arguments' '{' on (gemma4_calls) */
        rc = named ? dupf(&out, "<|tool_call>call:%s", nm) : dupf(&out, "<|tool_call>call:");
        break;
    default:
        break;
    }
    return rc < 0 ? NULL : out;
}

/* ---------------------------------------------------------------- grammar pieces */

typedef struct {
    gr_builder *b;
    const srv_request *r;
    const srv_cctx *cx;
    srv_error *e;
    const char *field; /* the request field the current piece came from */
} cb;

static int fail_from(cb *c, const kiln_err *err)
{
    *c->e = srv_error_from(err, c->field);
    return -1;
}

static const json_t *tool_fn(const json_t *t)
{
    const json_t *fn = json_object_get(t, "function");
    return fn ? fn : t;
}

/* Gemma 4's arguments are an object (call:NAME{...}): the schema's type,
 * pinned to "object" on a copy (OWNED), or NULL with err (a 400). */
static json_t *object_only(const json_t *p, const char *tool, kiln_err *err)
{
    if (json_is_true(p) || (json_is_object(p) && !json_object_size(p)))
        return json_pack("{s:s, s:b}", "type", "object", "additionalProperties", 1);
    const json_t *ty = json_object_get(p, "type");
    bool ok = !ty || (json_is_string(ty) && !strcmp(json_string_value(ty), "object"));
    size_t i;
    json_t *e;
    json_array_foreach(ty, i, e) ok |= json_is_string(e) && !strcmp(json_string_value(e), "object");
    if (!json_is_object(p) || !ok) {
        kiln_fail(err, KILN_E_UNSUPPORTED,
                  "tool '%.64s': Gemma 4's call arguments are an object "
                  "(call:NAME{...}); the parameters schema must allow type \"object\"",
                  tool ? tool : "");
        return NULL;
    }
    json_t *q = json_deep_copy(p);
    if (!q || json_object_set_new(q, "type", json_string("object"))) {
        json_decref(q);
        kiln_fail(err, KILN_E_NOMEM, "out of memory");
        return NULL;
    }
    return q;
}

/* A tool's arguments: its parameters (or input_schema) under its strictness,
 * in JSON (syn NULL) or in syn (Gemma 4). */
static gr_expr tool_args_as(cb *c, const json_t *t, const gr_value_syntax *syn)
{
    const json_t *fn = tool_fn(t);
    const json_t *p = json_object_get(fn, "parameters");
    if (!p) p = json_object_get(fn, "input_schema");
    bool strict =
        json_is_true(json_object_get(fn, "strict")) || json_is_true(json_object_get(t, "strict"));
    json_t *any = NULL;
    gr_expr x = -1;
    kiln_err err;
    if (!p || json_is_null(p))
        p = any = json_pack("{s:s, s:b}", "type", "object", "additionalProperties", 1);
    else if (syn && !(p = any = object_only(p, json_string_value(json_object_get(fn, "name")), &err)))
        return fail_from(c, &err);
    if (!p) {
        kiln_fail(&err, KILN_E_NOMEM, "out of memory");
        return fail_from(c, &err);
    }
    if (gr_builder_add_json_schema_as(c->b, p, strict, syn, &x, &err)) {
        char msg[256];
        snprintf(msg, sizeof msg, "tool '%s': %s", json_string_value(json_object_get(fn, "name")),
                 err.msg);
        snprintf(err.msg, sizeof err.msg, "%s", msg);
        json_decref(any);
        return fail_from(c, &err);
    }
    json_decref(any);
    return x;
}

static gr_expr tool_args(cb *c, const json_t *t)
{
    return tool_args_as(c, t, NULL);
}

/* The JSON string literal of s, or (from_open) without its opening quote. */
static gr_expr json_lit(cb *c, const char *s, bool from_open)
{
    json_t *j = json_string(s);
    char *t = j ? srv_json_dump(j, NULL) : NULL; /* kiln's malloc: free() is right */
    json_decref(j);
    gr_expr x = t ? gr_str(c->b, t + (from_open ? 1 : 0)) : -1;
    free(t);
    return x;
}

/* The tools a call may name: all, or the named one. */
static bool tool_allowed(const cb *c, const json_t *t)
{
    if (c->r->tool_choice != SRV_TOOLS_NAMED) return true;
    const char *n = json_string_value(json_object_get(tool_fn(t), "name"));
    return n && !strcmp(n, c->r->tool_name);
}

/* {"name": "N", "<key>": ARGS} over the tools; after_quote: the text so far
 * ends with `{"name": "` (Llama 3's required prefill). */
static gr_expr json_call(cb *c, const char *key, bool after_quote)
{
    gr_builder *b = c->b;
    gr_expr ws = gr_json_ws(b);
    gr_expr alts[128];
    size_t n = 0, i;
    json_t *t;
    json_array_foreach(c->r->tools, i, t)
    {
        if (!tool_allowed(c, t) || n == 128) continue;
        gr_expr args = tool_args(c, t);
        if (args < 0) return -1;
        char kq[64];
        snprintf(kq, sizeof kq, "\"%s\"", key);
        gr_expr x[] = {
            json_lit(c, json_string_value(json_object_get(tool_fn(t), "name")), after_quote),
            ws,
            gr_str(b, ","),
            ws,
            gr_str(b, kq),
            ws,
            gr_str(b, ":"),
            ws,
            args,
            ws,
            gr_str(b, "}")};
        alts[n++] = gr_seq(b, x, 11);
    }
    gr_expr body = gr_alt(b, alts, n);
    if (after_quote) return body;
    gr_expr open[] = {gr_str(b, "{"), ws, gr_str(b, "\"name\""), ws, gr_str(b, ":"), ws, body};
    return gr_seq(b, open, 7);
}

/* The rest of a named JSON call after its prefill: ARGS ws "}". */
static gr_expr json_named_rest(cb *c)
{
    size_t i;
    json_t *t;
    json_array_foreach(c->r->tools, i, t) if (tool_allowed(c, t))
    {
        gr_expr args = tool_args(c, t);
        if (args < 0) return -1;
        gr_expr x[] = {args, gr_json_ws(c->b), gr_str(c->b, "}")};
        return gr_seq(c->b, x, 3);
    }
    return gr_alt(c->b, NULL, 0);
}

/* Qwen3-Coder: <parameter=P>\nV\n</parameter> per property (required ones
 * always, in schema order), V a string's raw text or another type's JSON. */
static const char *const XML_MARKS[] = {"</parameter>", "<parameter=", "</function>"};

static gr_expr xml_value(cb *c, const json_t *ps)
{
    gr_builder *b = c->b;
    const json_t *ty = json_object_get(ps, "type");
    /* the type srv_toolcall.c coerces the text by: a string (also with no
     * type at all) keeps the raw text; others are parsed as JSON */
    const char *t = json_string_value(ty);
    if (json_is_array(ty)) {
        size_t i;
        json_t *e;
        t = NULL;
        json_array_foreach(ty, i,
                           e) if (!t && json_is_string(e) && strcmp(json_string_value(e), "null"))
            t = json_string_value(e);
    }
    if (!t || !strcmp(t, "string")) {
        const json_t *en = json_object_get(ps, "enum"), *k = json_object_get(ps, "const");
        if (en || k) { /* raw texts of the allowed strings */
            gr_expr alts[256];
            size_t n = 0, i;
            json_t *v;
            if (k && json_is_string(k)) alts[n++] = gr_str(b, json_string_value(k));
            json_array_foreach(en, i, v) if (json_is_string(v) && n < 256) alts[n++] =
                gr_str(b, json_string_value(v));
            return gr_alt(b, alts, n);
        }
        const json_t *mn = json_object_get(ps, "minLength"), *mx = json_object_get(ps, "maxLength");
        const json_t *pat = json_object_get(ps, "pattern"), *fmt = json_object_get(ps, "format");
        if (mn || mx || pat || fmt) {
            /* a bounded or patterned raw string: no '<' at all (so no marker),
             * the bounds and the pattern, intersected */
            static const uint32_t lt[] = {'<', '<'};
            kiln_err err;
            if (fmt) {
                kiln_fail(&err, KILN_E_UNSUPPORTED,
                          "tools: 'format' on a string parameter is not "
                          "supported in the Qwen3-Coder call format");
                return fail_from(c, &err);
            }
            int32_t lo = json_is_integer(mn) ? (int32_t)json_integer_value(mn) : 0;
            int32_t hi = json_is_integer(mx) ? (int32_t)json_integer_value(mx) : -1;
            if (lo < 0 || lo > 100000 || hi > 100000 || (hi >= 0 && hi < lo)) {
                kiln_fail(&err, KILN_E_INVALID, "tools: bad minLength/maxLength");
                return fail_from(c, &err);
            }
            gr_expr parts[2];
            int np = 0;
            parts[np++] = gr_rep(b, gr_class(b, lt, 1, true), lo, hi);
            if (pat) {
                if (!json_is_string(pat) ||
                    gr_regex(b, json_string_value(pat), false, &parts[np], &err))
                    return fail_from(c, &err);
                np++;
            }
            return gr_intersect(b, parts, (size_t)np);
        }
        return gr_text_without(b, XML_MARKS, 3);
    }
    gr_expr x;
    kiln_err err;
    if (gr_builder_add_json_schema(c->b, ps, true, &x, &err)) return fail_from(c, &err);
    return x;
}

static gr_expr xml_params(cb *c, const json_t *t)
{
    gr_builder *b = c->b;
    const json_t *fn = tool_fn(t);
    const json_t *p = json_object_get(fn, "parameters");
    if (!p) p = json_object_get(fn, "input_schema");
    const json_t *props = json_object_get(p, "properties"), *req = json_object_get(p, "required");
    gr_expr ws = gr_json_ws(b);
    gr_expr items[256];
    size_t n = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)props, k, v)
    {
        if (n == 256) break;
        bool required = false;
        size_t i;
        json_t *r;
        json_array_foreach(req, i, r) required |=
            json_is_string(r) && !strcmp(json_string_value(r), k);
        char open[320];
        snprintf(open, sizeof open, "<parameter=%s>\n", k);
        gr_expr val = xml_value(c, v);
        if (val < 0) return -1;
        gr_expr x[] = {gr_str(b, open), val, gr_str(b, "\n</parameter>"), ws};
        gr_expr item = gr_seq(b, x, 4);
        items[n++] = required ? item : gr_rep(b, item, 0, 1);
    }
    return gr_seq(b, items, n);
}

/* <function=N>\n PARAMS </function> over the tools (named: the params onward). */
static gr_expr xml_call(cb *c, bool named_rest)
{
    gr_builder *b = c->b;
    gr_expr alts[128];
    size_t n = 0, i;
    json_t *t;
    json_array_foreach(c->r->tools, i, t)
    {
        if (!tool_allowed(c, t) || n == 128) continue;
        gr_expr params = xml_params(c, t);
        if (params < 0) return -1;
        char open[320];
        snprintf(open, sizeof open, "<function=%s>\n",
                 json_string_value(json_object_get(tool_fn(t), "name")));
        gr_expr x[] = {named_rest ? gr_seq(b, NULL, 0) : gr_str(b, open), params,
                       gr_str(b, "</function>")};
        alts[n++] = gr_seq(b, x, 3);
    }
    return gr_alt(b, alts, n);
}

/* A whole tagged call: <tool_call>\n CALL \n</tool_call> (Hermes / Qwen3-Coder). */
static gr_expr tagged_call(cb *c)
{
    gr_builder *b = c->b;
    gr_expr ws = gr_json_ws(b);
    gr_expr call =
        c->cx->family == SRV_TC_QWEN3_CODER ? xml_call(c, false) : json_call(c, "arguments", false);
    gr_expr x[] = {gr_str(b, "<tool_call>"), ws, call, ws, gr_str(b, "</tool_call>")};
    return gr_seq(b, x, 5);
}

/* What follows the first call: more calls when parallel, then nothing. */
static gr_expr more_calls(cb *c)
{
    if (!c->r->parallel_tool_calls) return gr_seq(c->b, NULL, 0);
    return gr_rep(c->b, gr_seq2(c->b, gr_json_ws(c->b), tagged_call(c)), 0, -1);
}

/* Mistral's JSON array of calls, after [TOOL_CALLS]: [CALL (, CALL)*]. */
static gr_expr mistral_array(cb *c)
{
    gr_builder *b = c->b;
    gr_expr ws = gr_json_ws(b);
    gr_expr call = json_call(c, "arguments", false);
    gr_expr more =
        c->r->parallel_tool_calls
            ? gr_rep(b,
                     gr_seq(b,
                            (gr_expr[]){gr_str(b, ","), ws, json_call(c, "arguments", false), ws},
                            4),
                     0, -1)
            : gr_seq(b, NULL, 0);
    gr_expr x[] = {gr_str(b, "["), ws, call, ws, more, gr_str(b, "]")};
    return gr_seq(b, x, 6);
}

/* ---------------------------------------------------------------- Gemma 4 */

/* Gemma 4: <|tool_call>call:NAME{key:value,...}<tool_call|>, strings between
 * <|"|> and raw inside, keys bare (the chat template's format_argument with
 * escape_keys=False; srv_toolcall.c's gemma_object reads it back). The
 * markers are special tokens in Gemma 4's tokenizer: the grammar names them
 * by id (gr_special), so the model writes each as the one token, and no
 * string or key may spell their text with ordinary tokens (the parser would
 * stop there). A tokenizer without them as special tokens gets their text. */
#define G4_QUOTE "<|\"|>"
#define G4_OPEN "<|tool_call>"
#define G4_CLOSE "<tool_call|>"
static const char *const G4_FORBID[] = {G4_QUOTE, G4_CLOSE, G4_OPEN};

static gr_expr g4_mark(cb *c, const char *text)
{
    const tok_tokenizer *tok = c->cx->tok;
    int32_t id = tok ? tok_piece_to_id(tok, text, strlen(text)) : -1;
    if (id >= 0 && tok_is_special(tok, id)) return gr_special(c->b, id);
    return gr_str(c->b, text);
}

/* One call after `call:` over the allowed tools (NAME{ARGS}), and with
 * *named_args the named tool's {ARGS} alone (its name is in the prefill). */
static gr_expr g4_call(cb *c, gr_expr *named_args)
{
    gr_builder *b = c->b;
    gr_value_syntax syn = {.quote = g4_mark(c, G4_QUOTE),
                           .quote_text = G4_QUOTE,
                           .forbid = G4_FORBID,
                           .n_forbid = sizeof G4_FORBID / sizeof *G4_FORBID};
    gr_expr alts[128];
    size_t n = 0, i;
    json_t *t;
    *named_args = gr_alt(b, NULL, 0);
    json_array_foreach(c->r->tools, i, t)
    {
        if (!tool_allowed(c, t) || n == 128) continue;
        const char *name = json_string_value(json_object_get(tool_fn(t), "name"));
        if (!name || !*name || strlen(name) >= 256 || strpbrk(name, "{ \t\r\n")) {
            kiln_err err; /* the parser reads the name up to '{' or a space */
            kiln_fail(&err, KILN_E_UNSUPPORTED,
                      "tool name '%.64s' cannot be written in Gemma 4's call syntax",
                      name ? name : "");
            return fail_from(c, &err);
        }
        gr_expr args = tool_args_as(c, t, &syn);
        if (args < 0) return -1;
        if (c->r->tool_choice == SRV_TOOLS_NAMED) *named_args = args;
        alts[n++] = gr_seq2(b, gr_str(b, name ? name : ""), args);
    }
    return gr_alt(b, alts, n);
}

/* The calls after <|tool_call>: `call:` unless the prefill wrote it (forced),
 * the call (named: its arguments, the name is in the prefill), its end
 * marker, then more calls when parallel. */
static gr_expr g4_calls(cb *c, bool forced)
{
    gr_builder *b = c->b;
    gr_expr named_args;
    gr_expr call = g4_call(c, &named_args);
    if (call < 0) return -1;
    gr_expr close = g4_mark(c, G4_CLOSE), head = gr_str(b, "call:");
    gr_expr more = gr_seq(b, NULL, 0);
    if (c->r->parallel_tool_calls) {
        gr_expr x[] = {g4_mark(c, G4_OPEN), head, call, close};
        more = gr_rep(b, gr_seq(b, x, 4), 0, -1);
    }
    gr_expr first = !forced                                 ? gr_seq2(b, head, call)
                    : c->r->tool_choice == SRV_TOOLS_NAMED ? named_args
                                                            : call;
    gr_expr x[] = {first, close, more};
    return gr_seq(b, x, 3);
}

/* Auto: free until the model writes <|tool_call> (a special token: the
 * trigger), then held like a forced call. 0 with *trig set, -2 when the
 * tokenizer has no such special token (free). */
static int g4_trigger(cb *c, int32_t *trig)
{
    const tok_tokenizer *tok = c->cx->tok;
    int32_t id = tok ? tok_piece_to_id(tok, G4_OPEN, strlen(G4_OPEN)) : -1;
    if (id < 0 || !tok_is_special(tok, id)) return -2;
    *trig = id;
    return 0;
}

/* ---------------------------------------------------------------- the rest */

/* tool_choice required / named, continuing srv_tool_prefill's text. */
static gr_expr forced_calls(cb *c)
{
    gr_builder *b = c->b;
    gr_expr ws = gr_json_ws(b);
    bool named = c->r->tool_choice == SRV_TOOLS_NAMED;
    switch (c->cx->family) {
    case SRV_TC_HERMES:
    case SRV_TC_QWEN3_CODER: {
        gr_expr first = c->cx->family == SRV_TC_QWEN3_CODER ? xml_call(c, named)
                        : named                             ? json_named_rest(c)
                                                            : json_call(c, "arguments", false);
        gr_expr x[] = {first, ws, gr_str(b, "</tool_call>"), more_calls(c)};
        return gr_seq(b, x, 4);
    }
    case SRV_TC_LLAMA3:
        return named ? json_named_rest(c) : json_call(c, "parameters", true);
    case SRV_TC_MISTRAL:
        if (mistral_v11(c->cx->tok)) { /* [TOOL_CALLS]N[ARGS] written: the arguments */
            if (!named) {
                kiln_err err;
                kiln_fail(&err, KILN_E_UNSUPPORTED,
                          "'tool_choice' required with several tools cannot "
                          "be enforced in Mistral's [TOOL_CALLS]name[ARGS] format: name the tool");
                c->field = "tool_choice";
                return fail_from(c, &err);
            }
            size_t i;
            json_t *t;
            json_array_foreach(c->r->tools, i, t) if (tool_allowed(c, t)) return tool_args(c, t);
            return gr_alt(b, NULL, 0);
        }
        if (named) {
            gr_expr x[] = {json_named_rest(c), ws, gr_str(b, "]")};
            return gr_seq(b, x, 3);
        }
        return gr_seq2(b, gr_rep(b, gr_str(b, " "), 0, 1), mistral_array(c));
    case SRV_TC_GEMMA4:
        return g4_calls(c, true);
    default:
        return -2; /* not constrained (FunctionGemma: prefill only) */
    }
}

/* Any text; with `nostart`, empty or not starting with '{' after whitespace. */
static gr_expr free_text(cb *c, bool nostart)
{
    gr_builder *b = c->b;
    static const uint32_t any[] = {0, 0x10FFFF};
    gr_expr all = gr_rep(b, gr_class(b, any, 1, false), 0, -1);
    if (!nostart) return all;
    static const uint32_t ws[] = {'\t', '\n', '\r', '\r', ' ', ' '},
                          first[] = {'\t', '\n', '\r', '\r', ' ', ' ', '{', '{'};
    gr_expr x[] = {gr_rep(b, gr_class(b, ws, 3, false), 0, -1), gr_class(b, first, 4, true), all};
    return gr_rep(b, gr_seq(b, x, 3), 0, 1);
}

/* tool_choice auto: free text, and calls that follow the family's syntax.
 * content: the format's grammar (-1 none): then the content must be it. */
static gr_expr auto_calls(cb *c, gr_expr content, int32_t *trig, int32_t *n_trig)
{
    gr_builder *b = c->b;
    gr_expr ws = gr_json_ws(b);
    switch (c->cx->family) {
    case SRV_TC_HERMES:
    case SRV_TC_QWEN3_CODER: {
        static const char *const marks[] = {"<tool_call>", "<function="};
        gr_expr calls = gr_seq2(b, tagged_call(c), more_calls(c));
        if (content >= 0) return gr_alt2(b, content, gr_seq2(b, ws, calls));
        return gr_seq2(b, gr_text_without(b, marks, 2), gr_rep(b, calls, 0, 1));
    }
    case SRV_TC_LLAMA3: {
        gr_expr call = gr_seq2(b, ws, json_call(c, "parameters", false));
        return gr_alt2(b, call, content >= 0 ? content : free_text(c, true));
    }
    case SRV_TC_MISTRAL: {
        int32_t id = tok_piece_to_id(c->cx->tok, "[TOOL_CALLS]", 12);
        if (content >= 0 || mistral_v11(c->cx->tok) || id < 0) {
            if (content < 0) return -2; /* v11 or no marker token: free */
            kiln_err err;
            kiln_fail(
                &err, KILN_E_UNSUPPORTED,
                "a response format together with tools in auto mode is "
                "not supported for Mistral's tool-call format; use tool_choice none or required");
            c->field = "response_format";
            return fail_from(c, &err);
        }
        trig[(*n_trig)++] = id;
        return gr_seq2(b, gr_rep(b, gr_str(b, " "), 0, 1), mistral_array(c));
    }
    case SRV_TC_GEMMA4: {
        int32_t id;
        if (content < 0 && !g4_trigger(c, &id)) {
            trig[(*n_trig)++] = id;
            return g4_calls(c, false);
        }
        if (content < 0) return -2; /* no <|tool_call> token: free */
        kiln_err err;
        kiln_fail(&err, KILN_E_UNSUPPORTED,
                  "a response format together with tools in auto mode is "
                  "not supported for Gemma 4's tool-call format; use tool_choice none or required");
        c->field = "response_format";
        return fail_from(c, &err);
    }
    default:
        if (content >= 0) {
            kiln_err err;
            kiln_fail(&err, KILN_E_UNSUPPORTED,
                      "a response format together with tools in auto mode is "
                      "not supported for this model's tool-call format");
            c->field = "response_format";
            return fail_from(c, &err);
        }
        return -2;
    }
}

/* The format's grammar (-2: none). */
static gr_expr content_grammar(cb *c)
{
    gr_builder *b = c->b;
    const srv_request *r = c->r;
    kiln_err err;
    gr_expr v = -2;
    c->field = r->format_param[0] ? r->format_param : NULL;
    if (r->format == SRV_FMT_JSON_OBJECT) {
        json_t *any = json_pack("{s:s, s:b}", "type", "object", "additionalProperties", 1);
        if (gr_builder_add_json_schema(b, any, false, &v, &err)) v = -1;
        json_decref(any);
    } else if (r->format == SRV_FMT_JSON_SCHEMA) {
        if (gr_builder_add_json_schema(b, r->schema, r->schema_strict, &v, &err)) v = -1;
    } else if (r->format == SRV_FMT_GRAMMAR) {
        gr_rule root;
        if (gr_builder_add_gbnf(b, r->grammar, strlen(r->grammar), "user-", &root, &err))
            return fail_from(c, &err);
        return gr_ref(b, root);
    } else {
        return -2;
    }
    if (v < 0) return fail_from(c, &err);
    gr_expr ws = gr_json_ws(b);
    gr_expr x[] = {ws, v, ws};
    return gr_seq(b, x, 3);
}

/* The output may start with a think block (or is inside one). */
static gr_expr think_wrap(cb *c, gr_expr body, int32_t *trig, int32_t *n_trig)
{
    gr_builder *b = c->b;
    const tok_tokenizer *tok = c->cx->tok;
    const srv_think_marks *m = srv_think_marks_of(c->cx->think_style);
    const char *const close[] = {m->close};
    int32_t cid = tok_piece_to_id(tok, m->close, strlen(m->close)),
            oid = tok_piece_to_id(tok, m->open, strlen(m->open));
    bool close_special = cid >= 0 && tok_is_special(tok, cid),
         open_special = oid >= 0 && tok_is_special(tok, oid);
    if (c->cx->think_open) {
        if (close_special) { /* the grammar starts after the token */
            trig[(*n_trig)++] = cid;
            return body;
        }
        gr_expr x[] = {gr_text_without(b, close, 1), gr_str(b, m->close), body};
        return gr_seq(b, x, 3);
    }
    if (c->cx->think_maybe && !open_special && !close_special) {
        gr_expr blk[] = {gr_str(b, m->open), gr_text_without(b, close, 1), gr_str(b, m->close)};
        return gr_seq2(b, gr_rep(b, gr_seq(b, blk, 3), 0, 1), body);
    }
    return body;
}

/* ---------------------------------------------------------------- cache key */

typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} kbuf;

static void kput(kbuf *k, const char *s, size_t n)
{
    if (k->oom) return;
    if (k->n + n + 1 > k->cap) {
        size_t nc = (k->n + n + 1) * 2;
        char *q = realloc(k->p, nc);
        if (!q) {
            k->oom = true;
            return;
        }
        k->p = q;
        k->cap = nc;
    }
    memcpy(k->p + k->n, s, n);
    k->n += n;
}

/* A length-prefixed field, so that no two inputs spell the same key. */
static void kfield(kbuf *k, const char *s, size_t n)
{
    char hdr[24];
    int m = snprintf(hdr, sizeof hdr, "%zu:", n);
    kput(k, hdr, (size_t)m);
    kput(k, s ? s : "", n);
}

static void kjson(kbuf *k, const json_t *j)
{
    /* schema order is meaningful (properties are generated in it): no sorting */
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    if (j && !s) k->oom = true;
    kfield(k, s, s ? strlen(s) : 0);
    free(s);
}

/* Everything srv_constraint_build reads, canonically: the key of the compile
 * cache. The tokenizer is the server's one (fixed per cache). OWNED or NULL. */
static char *cache_key(const srv_request *r, const srv_cctx *cx, size_t *len)
{
    kbuf k = {0};
    char hdr[160];
    int m =
        snprintf(hdr, sizeof hdr,
                 "kiln-grammar-1 api=%d fmt=%d strict=%d tc=%d par=%d fam=%d "
                 "open=%d maybe=%d style=%d ws=%d ms=%d|",
                 (int)r->api, (int)r->format, (int)r->schema_strict, (int)r->tool_choice,
                 (int)r->parallel_tool_calls, (int)cx->family, (int)cx->think_open,
                 (int)cx->think_maybe, (int)cx->think_style, (int)cx->ws_max, (int)cx->compile_ms);
    kput(&k, hdr, (size_t)m);
    kfield(&k, r->tool_name, r->tool_name ? strlen(r->tool_name) : 0);
    kfield(&k, r->grammar, r->grammar ? strlen(r->grammar) : 0);
    kjson(&k, r->schema);
    kjson(&k, r->tools);
    if (k.oom) {
        free(k.p);
        return NULL;
    }
    *len = k.n;
    return k.p;
}

static int build_uncached(const srv_request *r, const srv_cctx *cx, gr_grammar **g, int32_t *trig,
                          int32_t *n_trig, srv_error *e);

int srv_constraint_build(const srv_request *r, const srv_cctx *cx, gr_grammar **g, int32_t *trig,
                         int32_t *n_trig, srv_error *e)
{
    *g = NULL;
    *n_trig = 0;
    memset(e, 0, sizeof *e);
    bool tools = r->tools && cx->family != SRV_TC_NONE && r->api != SRV_API_COMPLETION;
    if (r->format == SRV_FMT_TEXT && !tools) return 0;
    size_t klen = 0;
    char *key = cx->cache ? cache_key(r, cx, &klen) : NULL;
    size_t alen = 0;
    if (key &&
        gr_cache_get(cx->cache, key, klen, g, trig, sizeof(int32_t) * SRV_MAX_TRIGGERS, &alen)) {
        *n_trig = (int32_t)(alen / sizeof(int32_t));
        free(key);
        return 0;
    }
    int rc = build_uncached(r, cx, g, trig, n_trig, e);
    if (!rc && key && *g) {
        kiln_err err;
        /* out of memory only costs the reuse: the request has its grammar */
        (void)gr_cache_put(cx->cache, key, klen, *g, trig, sizeof(int32_t) * (size_t)*n_trig, &err);
    }
    free(key);
    return rc;
}

static int build_uncached(const srv_request *r, const srv_cctx *cx, gr_grammar **g, int32_t *trig,
                          int32_t *n_trig, srv_error *e)
{
    bool tools = r->tools && cx->family != SRV_TC_NONE && r->api != SRV_API_COMPLETION;
    bool forced =
        tools && (r->tool_choice == SRV_TOOLS_REQUIRED || r->tool_choice == SRV_TOOLS_NAMED);
    gr_options o = gr_options_default();
    o.json_ws_max = cx->ws_max;
    if (tools && cx->family == SRV_TC_GEMMA4) o.json_ws_max = 0; /* as the template writes it */
    o.max_ms = cx->compile_ms;
    kiln_err err;
    gr_builder *b;
    if (gr_builder_create(&o, &b, &err)) {
        *e = srv_error_from(&err, NULL);
        return -1;
    }
    cb c = {.b = b, .r = r, .cx = cx, .e = e, .field = "tools"};
    int rc = -1;
    gr_expr body;
    if (forced) {
        body = forced_calls(&c); /* the prefill already closed any think block */
    } else {
        gr_expr content = content_grammar(&c);
        if (content == -1) goto done;
        if (tools) c.field = "tools";
        body = tools ? auto_calls(&c, content >= 0 ? content : -1, trig, n_trig) : content;
        if (body == -2 && content >= 0) body = content;
        /* Gemma 4's calls start at their own trigger, wherever the model is:
         * a think block before them needs no grammar */
        bool g4 = tools && cx->family == SRV_TC_GEMMA4 && content < 0;
        if (body >= 0 && r->api != SRV_API_COMPLETION && (content >= 0 || *n_trig) && !g4)
            body = think_wrap(&c, body, trig, n_trig);
    }
    if (body == -2) { /* nothing to enforce */
        rc = 0;
        goto done;
    }
    if (body < 0) {
        if (!e->message[0] && gr_builder_error(b, &err)) *e = srv_error_from(&err, c.field);
        goto done;
    }
    gr_rule root = gr_rule_new(b, "output");
    if (gr_rule_define(b, root, body, &err) || gr_builder_compile(b, root, g, &err)) {
        if (!e->message[0]) *e = srv_error_from(&err, c.field);
        goto done;
    }
    rc = 0;
done:
    if (rc && !e->message[0]) {
        kiln_fail(&err, KILN_E_INTERNAL, "grammar construction failed");
        *e = srv_error_from(&err, c.field);
    }
    gr_builder_destroy(b);
    return rc;
}
