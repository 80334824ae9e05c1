/*
 * srv_openai.c — OpenAI request JSON → srv_request (see srv_openai.h).
 *
 * Every field is checked for type, then range, in that order; the first
 * failure wins and names its field. Nothing here allocates beyond the request
 * itself: a failed parse frees what it built (srv_request_free on the partial
 * struct), so a fuzzer sees no leaks.
 * Threads: no shared state; any HTTP thread.
 */
#include "server/srv_openai.h"
#include "server/srv_constraint.h"
#include "server/srv_json.h"
#include "util/kiln_json.h"
#include "server/srv_toolreq.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- helpers */

static kiln_code bad(kiln_err *err, char *param, const char *name, const char *fmt, const char *what)
{
    snprintf(param, 64, "%s", name);
    return kiln_fail(err, KILN_E_INVALID, fmt, name, what);
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "number";
    case JSON_TRUE:
    case JSON_FALSE: return "boolean";
    default: return "null";
    }
}

/* The field's value, or NULL when absent or null (null means "use the default"). */
static json_t *field(const json_t *o, const char *name)
{
    json_t *v = json_object_get(o, name);
    return v && !json_is_null(v) ? v : NULL;
}

static kiln_code get_number(const json_t *o, const char *name, double lo, double hi, double *out,
                            bool *seen, char *param, kiln_err *err)
{
    json_t *v = field(o, name);
    if (!v) return KILN_OK;
    if (!json_is_number(v)) return bad(err, param, name, "'%s' must be a number, got %s", type_name(v));
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) {
        snprintf(param, 64, "%s", name);
        return kiln_fail(err, KILN_E_INVALID, "'%s' must be between %g and %g, got %g", name, lo, hi, d);
    }
    *out = d;
    if (seen) *seen = true;
    return KILN_OK;
}

static kiln_code get_int(const json_t *o, const char *name, int64_t lo, int64_t hi, int64_t *out,
                         bool *seen, char *param, kiln_err *err)
{
    json_t *v = field(o, name);
    if (!v) return KILN_OK;
    int64_t i;
    if (json_is_integer(v)) i = (int64_t)json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
             fabs(json_real_value(v)) < 9e18)
        i = (int64_t)json_real_value(v);
    else
        return bad(err, param, name, "'%s' must be an integer, got %s", type_name(v));
    if (i < lo || i > hi) {
        snprintf(param, 64, "%s", name);
        if (hi == INT64_MAX) /* no upper bound worth naming */
            return kiln_fail(err, KILN_E_INVALID, "'%s' must be at least %lld, got %lld", name,
                             (long long)lo, (long long)i);
        return kiln_fail(err, KILN_E_INVALID, "'%s' must be between %lld and %lld, got %lld", name,
                         (long long)lo, (long long)hi, (long long)i);
    }
    *out = i;
    if (seen) *seen = true;
    return KILN_OK;
}

static kiln_code get_bool(const json_t *o, const char *name, bool *out, char *param, kiln_err *err)
{
    json_t *v = field(o, name);
    if (!v) return KILN_OK;
    if (!json_is_boolean(v)) return bad(err, param, name, "'%s' must be a boolean, got %s", type_name(v));
    *out = json_is_true(v);
    return KILN_OK;
}

/* ---------------------------------------------------------------- messages */

/* Content → a new JSON string (parts joined) or null; NULL with *err on error. */
static json_t *norm_content(const json_t *c, const char *role, char *param, kiln_err *err)
{
    if (!c || json_is_null(c)) {
        if (!strcmp(role, "assistant") || !strcmp(role, "tool")) return json_null();
        bad(err, param, "messages", "'%s' content must be a string or an array of parts, got %s",
            "null");
        return NULL;
    }
    if (json_is_string(c)) return json_copy((json_t *)c);
    if (!json_is_array(c)) {
        bad(err, param, "messages", "'%s': content must be a string or an array of parts, got %s",
            type_name(c));
        return NULL;
    }
    size_t total = 0, i;
    json_t *p;
    json_array_foreach(c, i, p) {
        json_t *type = json_object_get(p, "type"), *text = json_object_get(p, "text");
        if (!json_is_object(p) || !json_is_string(type)) {
            bad(err, param, "messages", "'%s': every content part must be an object with a 'type', got %s",
                json_is_object(p) ? "no type" : type_name(p));
            return NULL;
        }
        if (strcmp(json_string_value(type), "text") != 0) {
            snprintf(param, 64, "messages");
            kiln_fail(err, KILN_E_UNSUPPORTED, "content part type '%.64s' is not supported (text only)",
                      json_string_value(type));
            return NULL;
        }
        if (!json_is_string(text)) {
            bad(err, param, "messages", "'%s': a text part needs a string 'text', got %s",
                text ? type_name(text) : "nothing");
            return NULL;
        }
        total += json_string_length(text);
    }
    char *buf = malloc(total + 1);
    if (!buf) {
        kiln_fail(err, KILN_E_NOMEM, "out of memory");
        return NULL;
    }
    size_t o = 0;
    json_array_foreach(c, i, p) {
        json_t *text = json_object_get(p, "text");
        memcpy(buf + o, json_string_value(text), json_string_length(text));
        o += json_string_length(text);
    }
    json_t *s = json_stringn(buf, o);
    free(buf);
    if (!s) kiln_fail(err, KILN_E_NOMEM, "out of memory");
    return s;
}

static kiln_code parse_messages(const json_t *root, srv_request *r, char *param, kiln_err *err)
{
    json_t *m = json_object_get(root, "messages");
    if (!m || json_is_null(m)) return bad(err, param, "messages", "'%s' is required%s", "");
    if (!json_is_array(m)) return bad(err, param, "messages", "'%s' must be an array, got %s", type_name(m));
    if (json_array_size(m) == 0) return bad(err, param, "messages", "'%s' must not be empty%s", "");
    r->messages = json_array();
    if (!r->messages) return kiln_fail(err, KILN_E_NOMEM, "out of memory");
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    size_t i;
    json_t *msg;
    json_array_foreach(m, i, msg) {
        if (!json_is_object(msg))
            return bad(err, param, "messages", "'%s' entries must be objects, got %s", type_name(msg));
        json_t *role = json_object_get(msg, "role");
        if (!json_is_string(role))
            return bad(err, param, "messages", "'%s' entries need a string 'role', got %s",
                       role ? type_name(role) : "nothing");
        const char *rs = json_string_value(role);
        size_t k;
        for (k = 0; k < sizeof roles / sizeof *roles; k++)
            if (!strcmp(rs, roles[k])) break;
        if (k == sizeof roles / sizeof *roles) {
            snprintf(param, 64, "messages");
            return kiln_fail(err, KILN_E_INVALID,
                             "'messages[%zu].role' must be system, developer, user, assistant or "
                             "tool, got '%.32s'", i, rs);
        }
        json_t *content = norm_content(json_object_get(msg, "content"), rs, param, err);
        if (!content) return err->code;
        json_t *copy = json_copy(msg); /* keeps tool_calls, name, tool_call_id, ... */
        /* jansson's copy skips a key it cannot allocate: a short copy is out of memory */
        if (copy && json_object_size(copy) != json_object_size(msg)) {
            json_decref(copy);
            copy = NULL;
        }
        if (!copy || json_array_append_new(r->messages, copy)) {
            json_decref(content);
            return kiln_fail(err, KILN_E_NOMEM, "out of memory");
        }
        if (json_object_set_new(copy, "content", content) ||
            (!strcmp(rs, "developer") && json_object_set_new(copy, "role", json_string("system"))))
            return kiln_fail(err, KILN_E_NOMEM, "out of memory");
    }
    return srv_parse_tools(root, r, param, err);
}

/* ---------------------------------------------------------------- prompt (completions) */

static kiln_code parse_prompt(const json_t *root, srv_request *r, char *param, kiln_err *err)
{
    json_t *p = json_object_get(root, "prompt");
    if (!p || json_is_null(p)) return bad(err, param, "prompt", "'%s' is required%s", "");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
        p = json_array_get(p, 0);
    if (json_is_string(p)) {
        r->prompt_len = json_string_length(p);
        r->prompt = malloc(r->prompt_len + 1);
        if (!r->prompt) return kiln_fail(err, KILN_E_NOMEM, "out of memory");
        memcpy(r->prompt, json_string_value(p), r->prompt_len + 1);
        return KILN_OK;
    }
    if (!json_is_array(p))
        return bad(err, param, "prompt", "'%s' must be a string or an array of token ids, got %s",
                   type_name(p));
    size_t n = json_array_size(p), i;
    if (n == 0) return bad(err, param, "prompt", "'%s' must not be empty%s", "");
    if (n > INT32_MAX / 4) return bad(err, param, "prompt", "'%s' is too long%s", "");
    r->prompt_ids = malloc(n * sizeof *r->prompt_ids);
    if (!r->prompt_ids) return kiln_fail(err, KILN_E_NOMEM, "out of memory");
    json_t *v;
    json_array_foreach(p, i, v) {
        if (json_is_string(v) || json_is_array(v)) {
            snprintf(param, 64, "prompt");
            return kiln_fail(err, KILN_E_UNSUPPORTED, "batched prompts are not supported; send one "
                                                      "prompt per request (or use n)");
        }
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return bad(err, param, "prompt", "'%s' token ids must be integers >= 0, got %s", type_name(v));
        r->prompt_ids[i] = (int32_t)json_integer_value(v);
    }
    r->n_prompt_ids = (int32_t)n;
    return KILN_OK;
}

/* ---------------------------------------------------------------- sampling */

static kiln_code parse_stop(const json_t *root, srv_request *r, char *param, kiln_err *err)
{
    json_t *s = field(root, "stop");
    if (!s) return KILN_OK;
    if (json_is_string(s)) {
        if (json_string_length(s) == 0) return KILN_OK;
        r->stop[0] = strdup(json_string_value(s));
        if (!r->stop[0]) return kiln_fail(err, KILN_E_NOMEM, "out of memory");
        r->n_stop = 1;
        return KILN_OK;
    }
    if (!json_is_array(s))
        return bad(err, param, "stop", "'%s' must be a string or an array of strings, got %s", type_name(s));
    if (json_array_size(s) > ENG_MAX_STOP) {
        snprintf(param, 64, "stop");
        return kiln_fail(err, KILN_E_INVALID, "'stop' may hold at most %d strings, got %zu",
                         ENG_MAX_STOP, json_array_size(s));
    }
    size_t i;
    json_t *v;
    json_array_foreach(s, i, v) {
        if (!json_is_string(v))
            return bad(err, param, "stop", "'%s' entries must be strings, got %s", type_name(v));
        if (json_string_length(v) == 0) continue;
        if (strlen(json_string_value(v)) != json_string_length(v))
            return bad(err, param, "stop", "'%s' entries must not contain NUL%s", "");
        r->stop[r->n_stop] = strdup(json_string_value(v));
        if (!r->stop[r->n_stop]) return kiln_fail(err, KILN_E_NOMEM, "out of memory");
        r->n_stop++;
    }
    return KILN_OK;
}

static kiln_code parse_logit_bias(const json_t *root, srv_request *r, char *param, kiln_err *err)
{
    json_t *b = field(root, "logit_bias");
    if (!b) return KILN_OK;
    if (!json_is_object(b)) return bad(err, param, "logit_bias", "'%s' must be an object, got %s", type_name(b));
    size_t n = json_object_size(b);
    if (n == 0) return KILN_OK;
    if (n > 4096) return bad(err, param, "logit_bias", "'%s' may hold at most 4096 entries%s", "");
    r->bias = calloc(n, sizeof *r->bias);
    if (!r->bias) return kiln_fail(err, KILN_E_NOMEM, "out of memory");
    const char *key;
    json_t *v;
    json_object_foreach(b, key, v) {
        char *end;
        long long id = strtoll(key, &end, 10);
        if (end == key || *end || id < 0 || id > INT32_MAX)
            return bad(err, param, "logit_bias", "'%s' keys must be token ids, got '%.32s'", key);
        if (!json_is_number(v) || json_number_value(v) < -100 || json_number_value(v) > 100)
            return bad(err, param, "logit_bias", "'%s' values must be numbers in [-100, 100], got %s",
                       type_name(v));
        r->bias[r->sp.n_bias].token = (int32_t)id;
        r->bias[r->sp.n_bias].bias = (float)json_number_value(v);
        r->sp.n_bias++;
    }
    r->sp.logit_bias = r->bias;
    return KILN_OK;
}

static kiln_code parse_logprobs(const json_t *root, srv_request *r, char *param, kiln_err *err)
{
    kiln_code rc;
    int64_t top = 0;
    bool top_seen = false;
    if (r->api == SRV_API_CHAT) {
        if ((rc = get_bool(root, "logprobs", &r->logprobs, param, err))) return rc;
        if ((rc = get_int(root, "top_logprobs", 0, ENG_MAX_TOP_LOGPROBS, &top, &top_seen, param, err)))
            return rc;
        if (top_seen && top > 0) r->logprobs = true;
    } else {
        json_t *v = field(root, "logprobs");
        if (v && json_is_boolean(v)) {
            r->logprobs = json_is_true(v);
        } else if (v) {
            if ((rc = get_int(root, "logprobs", 0, ENG_MAX_TOP_LOGPROBS, &top, &top_seen, param, err)))
                return rc;
            r->logprobs = true;
        }
    }
    r->top_logprobs = (int32_t)top;
    r->sp.top_logprobs = r->top_logprobs;
    return KILN_OK;
}

static kiln_code parse_sampling(const json_t *root, srv_request *r, char *param, kiln_err *err)
{
    kiln_code rc;
    double d;
    int64_t i;
    bool seen = false;
#define NUM(name, lo, hi, dst, bit)                                                                \
    do {                                                                                           \
        seen = false;                                                                              \
        if ((rc = get_number(root, name, lo, hi, &d, &seen, param, err))) return rc;              \
        if (seen) (dst) = (float)d, r->set |= (bit);                                               \
    } while (0)
    NUM("temperature", 0, 2, r->sp.temperature, SRV_SET_TEMPERATURE);
    NUM("top_p", 0, 1, r->sp.top_p, SRV_SET_TOP_P);
    if ((r->set & SRV_SET_TOP_P) && !(d > 0))
        return bad(err, param, "top_p", "'%s' must be in (0, 1]%s", "");
    /* a valid top_p below float's range (1e-300) keeps the top token, as FLT_MIN does;
     * temperature and min_p that small round to 0: greedy / off, their limits */
    if ((r->set & SRV_SET_TOP_P) && r->sp.top_p < FLT_MIN) r->sp.top_p = FLT_MIN;
    NUM("min_p", 0, 1, r->sp.min_p, SRV_SET_MIN_P);
    NUM("repetition_penalty", 1e-3, 100, r->sp.repetition_penalty, SRV_SET_REP);
    NUM("presence_penalty", -2, 2, r->sp.presence_penalty, 0);
    NUM("frequency_penalty", -2, 2, r->sp.frequency_penalty, 0);
#undef NUM
    seen = false;
    if ((rc = get_int(root, "top_k", -1, INT32_MAX, &i, &seen, param, err))) return rc;
    if (seen) r->sp.top_k = i < 0 ? 0 : (int32_t)i, r->set |= SRV_SET_TOP_K;
    seen = false;
    if ((rc = get_int(root, "seed", INT64_MIN, INT64_MAX, &i, &seen, param, err))) return rc;
    if (seen) r->sp.seed = (uint64_t)i, r->set |= SRV_SET_SEED;
    if ((rc = parse_stop(root, r, param, err))) return rc;
    if ((rc = parse_logit_bias(root, r, param, err))) return rc;
    return parse_logprobs(root, r, param, err);
}

/* ---------------------------------------------------------------- options */

static kiln_code parse_thinking(const json_t *root, srv_request *r, char *param, kiln_err *err)
{
    json_t *kw = field(root, "chat_template_kwargs");
    if (kw && !json_is_object(kw))
        return bad(err, param, "chat_template_kwargs", "'%s' must be an object, got %s", type_name(kw));
    if (kw && srv_json_check_depth(kw, false, "'chat_template_kwargs'", err)) {
        snprintf(param, 64, "chat_template_kwargs");
        return err->code;
    }
    r->template_kwargs = kw ? json_deep_copy(kw) : json_object();
    if (!r->template_kwargs) return kiln_fail(err, KILN_E_NOMEM, "out of memory");
    json_t *effort = field(root, "reasoning_effort");
    if (effort) {
        if (!json_is_string(effort))
            return bad(err, param, "reasoning_effort", "'%s' must be a string, got %s", type_name(effort));
        static const char *const ok[] = {"none", "minimal", "low", "medium", "high"};
        const char *e = json_string_value(effort);
        size_t k;
        for (k = 0; k < sizeof ok / sizeof *ok; k++)
            if (!strcmp(e, ok[k])) break;
        if (k == sizeof ok / sizeof *ok)
            return bad(err, param, "reasoning_effort",
                       "'%s' must be none, minimal, low, medium or high, got '%.16s'", e);
        if (!json_object_get(r->template_kwargs, "enable_thinking"))
            json_object_set_new(r->template_kwargs, "enable_thinking", json_boolean(strcmp(e, "none") != 0));
        if (!json_object_get(r->template_kwargs, "reasoning_effort"))
            json_object_set_new(r->template_kwargs, "reasoning_effort", json_string(e));
    }
    r->thinking_set = json_object_get(r->template_kwargs, "enable_thinking") != NULL;
    return KILN_OK;
}

/* "adapters": [{"name": "sql", "scale": 0.5}, ...] (kiln's extension, docs/lora.md) */
static kiln_code parse_adapters(const json_t *root, srv_request *r, char *param, kiln_err *err)
{
    json_t *a = field(root, "adapters");
    if (!a) return KILN_OK;
    if (!json_is_array(a)) return bad(err, param, "adapters", "'%s' must be an array, got %s", type_name(a));
    if (json_array_size(a) > MDL_LORA_MAX_STACK)
        return bad(err, param, "adapters", "'%s' holds at most 8 adapters%s", "");
    r->has_adapters = true;
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v) {
        json_t *nm = json_is_object(v) ? json_object_get(v, "name") : NULL;
        json_t *sc = json_is_object(v) ? json_object_get(v, "scale") : NULL;
        if (!json_is_string(nm) || json_string_length(nm) == 0 || json_string_length(nm) > 128)
            return bad(err, param, "adapters", "each item of '%s' needs a \"name\" string%s", "");
        double scale = 1.0;
        if (sc && !json_is_null(sc)) {
            if (!json_is_number(sc) || !isfinite(json_number_value(sc)) ||
                fabs(json_number_value(sc)) > 1e6)
                return bad(err, param, "adapters", "'%s': \"scale\" must be a finite number%s", "");
            scale = json_number_value(sc);
        }
        r->adapter_names[r->n_adapters] = strdup(json_string_value(nm));
        if (!r->adapter_names[r->n_adapters]) return kiln_fail(err, KILN_E_NOMEM, "out of memory");
        r->adapter_scales[r->n_adapters++] = (float)scale;
    }
    return KILN_OK;
}

/* "speculative": {"method": "ngram"|"off", "max_draft": N} | "ngram" | "off" | true | false.
 * It never changes the output, only how fast it comes. */
static kiln_code parse_speculative(const json_t *root, srv_request *r, char *param, kiln_err *err)
{
    json_t *v = field(root, "speculative");
    if (!v || json_is_null(v)) return KILN_OK;
    if (json_is_boolean(v)) {
        r->spec = json_is_true(v) ? ENG_SPEC_NGRAM : ENG_SPEC_OFF;
        return KILN_OK;
    }
    json_t *m = v;
    if (json_is_object(v)) {
        m = field(v, "method");
        int64_t k = 0;
        bool seen = false;
        kiln_code rc = get_int(v, "max_draft", 0, ENG_SPEC_MAX_DRAFT, &k, &seen, param, err);
        if (rc) {
            snprintf(param, 64, "speculative.max_draft");
            return rc;
        }
        if (seen) {
            r->spec_max_draft = (int32_t)k;
            if (k == 0) r->spec = ENG_SPEC_OFF; /* no drafts at all */
        }
        if (!m) {
            if (r->spec == ENG_SPEC_DEFAULT && seen && k > 0) r->spec = ENG_SPEC_NGRAM;
            return KILN_OK;
        }
    } else if (!json_is_string(v)) {
        return bad(err, param, "speculative", "'%s' must be an object, a string or a boolean, got %s",
                   type_name(v));
    }
    if (!json_is_string(m))
        return bad(err, param, "speculative.method", "'%s' must be a string, got %s", type_name(m));
    kiln_err merr;
    eng_spec_method method;
    if (eng_spec_method_parse(json_string_value(m), &method, &merr) != KILN_OK) {
        snprintf(param, 64, "speculative.method");
        return kiln_fail(err, KILN_E_INVALID, "%s", merr.msg);
    }
    if (r->spec != ENG_SPEC_OFF) r->spec = method;
    return KILN_OK;
}

static kiln_code parse_options(const json_t *root, srv_request *r, char *param, kiln_err *err)
{
    kiln_code rc;
    int64_t i = 0;
    bool seen = false;
    json_t *model = field(root, "model");
    if (model) {
        if (!json_is_string(model)) return bad(err, param, "model", "'%s' must be a string, got %s", type_name(model));
        r->model = strdup(json_string_value(model));
        if (!r->model) return kiln_fail(err, KILN_E_NOMEM, "out of memory");
    }
    if ((rc = parse_adapters(root, r, param, err))) return rc;
    if ((rc = get_int(root, "max_tokens", 1, INT64_MAX, &i, &seen, param, err))) return rc;
    if (seen) r->max_tokens = i;
    seen = false;
    if ((rc = get_int(root, "max_completion_tokens", 1, INT64_MAX, &i, &seen, param, err))) return rc;
    if (seen) r->max_tokens = i;
    i = 1;
    if ((rc = get_int(root, "n", 1, SRV_MAX_N, &i, NULL, param, err))) return rc;
    r->n = (int32_t)i;
    if ((rc = get_bool(root, "stream", &r->stream, param, err))) return rc;
    json_t *so = field(root, "stream_options");
    if (so) {
        if (!json_is_object(so)) return bad(err, param, "stream_options", "'%s' must be an object, got %s", type_name(so));
        if ((rc = get_bool(so, "include_usage", &r->include_usage, param, err))) return rc;
    }
    if ((rc = get_bool(root, "echo", &r->echo, param, err))) return rc;
    if ((rc = get_bool(root, "ignore_eos", &r->ignore_eos, param, err))) return rc;
    if ((rc = get_bool(root, "skip_special_tokens", &r->skip_special, param, err))) return rc;
    if ((rc = get_bool(root, "add_generation_prompt", &r->add_generation_prompt, param, err))) return rc;
    return parse_speculative(root, r, param, err);
}

/* ---------------------------------------------------------------- API */

kiln_code srv_parse_request(srv_api api, const char *body, size_t len, srv_request *out,
                            char *param, kiln_err *err)
{
    memset(out, 0, sizeof *out);
    param[0] = 0;
    out->api = api;
    out->sp = eng_sampling_default();
    out->n = 1;
    out->skip_special = true;
    out->add_generation_prompt = true;
    out->parallel_tool_calls = true;
    uint64_t f0 = kiln_json_failures(); /* jansson may carry on after a failed allocation */
    json_t *root = NULL;
    kiln_code rc = srv_json_parse_object(body, len, &root, err);
    if (rc) return rc;
    if ((rc = api == SRV_API_CHAT ? parse_messages(root, out, param, err)
                                  : parse_prompt(root, out, param, err)))
        goto done;
    if ((rc = parse_options(root, out, param, err))) goto done;
    if ((rc = parse_sampling(root, out, param, err))) goto done;
    if ((rc = srv_parse_format(root, out, param, err))) goto done;
    rc = parse_thinking(root, out, param, err);
    if (!rc && kiln_json_failures() != f0) /* a copy or a set that jansson let fail */
        rc = kiln_fail(err, KILN_E_NOMEM, "out of memory reading the request");
done:
    json_decref(root);
    if (rc) srv_request_free(out);
    return rc;
}

void srv_request_free(srv_request *r)
{
    free(r->model);
    for (int i = 0; i < r->n_adapters; i++)
        free(r->adapter_names[i]);
    r->n_adapters = 0;
    json_decref(r->messages);
    json_decref(r->tools);
    free(r->tool_name);
    free(r->prefill);
    free(r->previous_response_id);
    json_decref(r->resp_echo);
    json_decref(r->template_kwargs);
    json_decref(r->schema);
    free(r->grammar);
    free(r->prompt);
    free(r->prompt_ids);
    free(r->bias);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    memset(r, 0, sizeof *r);
}
