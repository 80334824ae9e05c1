/*
 * srv_chat.c — chat template rendering and prompt tokenization (see srv_chat.h).
 * Holds the model's default template and, when the model has one, its
 * "tool_use" variant, read once at start.
 * Threads: a loaded srv_chat is immutable; any HTTP thread may render with it.
 * Errors: template failures (raise_exception, syntax, a render limit) are
 * KILN_E_INVALID, so the client gets a 400 with the template's message.
 */
#include "server/srv_chat.h"
#include "template/tmpl.h"
#include "util/kiln_json.h"

#include <stdlib.h>
#include <string.h>

struct srv_chat {
    tmpl_chat_files base;  /* OWNED */
    tmpl_chat_files tools; /* OWNED; template_text NULL when no separate tool template */
    size_t max_output;     /* render limits (srv_chat_set_limits); 0 = the template engine's */
    size_t max_memory;
};

kiln_code srv_chat_load(const char *model_dir, srv_chat **out, kiln_err *err)
{
    *out = NULL;
    srv_chat *c = calloc(1, sizeof *c);
    if (!c) return kiln_fail(err, KILN_E_NOMEM, "chat template: out of memory");
    kiln_code rc = tmpl_chat_load(model_dir, false, &c->base, err);
    if (rc) {
        srv_chat_free(c);
        return rc;
    }
    kiln_err e2;
    if (tmpl_chat_load(model_dir, true, &c->tools, &e2) != KILN_OK ||
        (c->tools.template_text && !strcmp(c->tools.template_text, c->base.template_text)))
        tmpl_chat_files_free(&c->tools);
    *out = c;
    return KILN_OK;
}

void srv_chat_free(srv_chat *c)
{
    if (!c) return;
    tmpl_chat_files_free(&c->base);
    tmpl_chat_files_free(&c->tools);
    free(c);
}

static const char *special(const tmpl_chat_files *f, const char *key)
{
    return json_string_value(json_object_get(f->special_tokens, key));
}

void srv_chat_set_limits(srv_chat *c, size_t max_output, size_t max_memory)
{
    c->max_output = max_output;
    c->max_memory = max_memory;
}

static kiln_code reqmem_reserve(void *ctx, size_t n, size_t total)
{
    (void)ctx;
    uint64_t cap = kiln_reqmem_cap();
    if (cap && total > cap) return KILN_E_TOO_LARGE; /* a 400: never fits */
    return kiln_reqmem_reserve(n) ? KILN_OK : KILN_E_BUSY;
}

static void reqmem_release(void *ctx, size_t n)
{
    (void)ctx;
    kiln_reqmem_release(n);
}

srv_error srv_chat_error(const kiln_err *err, const char *param)
{
    srv_error e = srv_error_from(err, param);
    if (err && err->code == KILN_E_BUSY) e.kind = SRV_E_OVERLOADED;
    return e;
}

/* The template compiled with c's limits, rendered over the chat context. */
static kiln_code render(const srv_chat *c, const tmpl_chat_files *f, const srv_request *r,
                        const json_t *vars, char **out, size_t *len, kiln_err *err)
{
    tmpl_value *ctx = NULL;
    tmpl_template *t = NULL;
    tmpl_options opt = tmpl_options_default();
    opt.max_output = c->max_output;
    opt.max_memory = c->max_memory;
    opt.acct_reserve = reqmem_reserve; /* renders count in --request-memory */
    opt.acct_release = reqmem_release;
    opt.acct_name = "--request-memory";
    kiln_code rc = tmpl_chat_context(r->messages, r->tools, vars, r->add_generation_prompt,
                                     special(f, "bos_token"), special(f, "eos_token"), &ctx, err);
    if (!rc) rc = tmpl_compile(f->template_text, strlen(f->template_text), &opt, &t, err);
    if (!rc) rc = tmpl_render(t, ctx, out, len, err);
    tmpl_free(t);
    tmpl_value_free(ctx);
    return rc;
}

const char *srv_chat_template_text(const srv_chat *c, bool tools)
{
    return tools && c->tools.template_text ? c->tools.template_text : c->base.template_text;
}

kiln_code srv_chat_tokenize(const tok_tokenizer *tok, const char *text, size_t len,
                            int32_t **ids, int32_t *n, kiln_err *err)
{
    *ids = NULL;
    *n = 0;
    int32_t *raw;
    size_t nraw;
    kiln_code rc = tok_encode(tok, text, len, TOK_PARSE_SPECIAL, &raw, &nraw, err);
    if (rc) return rc;
    int32_t bos = tok_bos_id(tok);
    const char *bos_text = tok_special_text(tok, TOK_SP_BOS);
    int add_bos = tok_adds_bos(tok) && bos >= 0 &&
                  !(bos_text && bos_text[0] && len >= strlen(bos_text) &&
                    !memcmp(text, bos_text, strlen(bos_text))) &&
                  !(nraw && raw[0] == bos);
    int32_t *o = malloc((nraw + 1) * sizeof *o);
    if (!o) {
        free(raw);
        return kiln_fail(err, KILN_E_NOMEM, "prompt: out of memory");
    }
    size_t k = 0;
    if (add_bos) o[k++] = bos;
    if (nraw) memcpy(o + k, raw, nraw * sizeof *o);
    free(raw);
    if (nraw + k > INT32_MAX) {
        free(o);
        return kiln_fail(err, KILN_E_TOO_LARGE, "prompt is too long");
    }
    *ids = o;
    *n = (int32_t)(nraw + k);
    return KILN_OK;
}

kiln_code srv_text_prompt(const tok_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                          int32_t *n, kiln_err *err)
{
    *ids = NULL;
    *n = 0;
    size_t nn;
    kiln_code rc = tok_encode(tok, text, len, TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL, ids, &nn, err);
    if (rc) return rc;
    if (nn > INT32_MAX) {
        free(*ids);
        *ids = NULL;
        return kiln_fail(err, KILN_E_TOO_LARGE, "prompt is too long");
    }
    *n = (int32_t)nn;
    return KILN_OK;
}

kiln_code srv_chat_prompt(const srv_chat *c, const tok_tokenizer *tok, const srv_request *r,
                          int default_thinking, int32_t **ids, int32_t *n, char **text,
                          kiln_err *err)
{
    *ids = NULL;
    *n = 0;
    if (text) *text = NULL;
    const tmpl_chat_files *f = r->tools && c->tools.template_text ? &c->tools : &c->base;
    if (r->tools && !strstr(f->template_text, "tools"))
        return kiln_fail(err, KILN_E_INVALID, "this model's chat template does not support tools "
                         "(it never reads the 'tools' variable); send the request without 'tools'");
    json_t *vars = r->template_kwargs ? json_deep_copy(r->template_kwargs) : json_object();
    if (!vars) return kiln_fail(err, KILN_E_NOMEM, "prompt: out of memory");
    /* the other special tokens are template variables too (pad_token, unk_token, ...) */
    const char *k;
    json_t *v;
    json_object_foreach(f->special_tokens, k, v) {
        if (!json_object_get(vars, k)) json_object_set(vars, k, v);
    }
    if (!r->thinking_set && default_thinking >= 0)
        json_object_set_new(vars, "enable_thinking", json_boolean(default_thinking));
    char *out = NULL;
    size_t len = 0;
    kiln_code rc = render(c, f, r, vars, &out, &len, err);
    json_decref(vars);
    if (rc) {
        /* a template limit (recursion depth, loop iterations, output, memory) that
         * this request's messages drove the template into: a 400 naming the limit,
         * not a 413 about the body */
        if (rc == KILN_E_TOO_LARGE) err->code = KILN_E_INVALID;
        return kiln_err_prefix(err, "chat template: ");
    }
    if (r->prefill && r->prefill[0]) {
        size_t pl = strlen(r->prefill);
        char *o2 = realloc(out, len + pl + 1);
        if (!o2) {
            free(out);
            return kiln_fail(err, KILN_E_NOMEM, "prompt: out of memory");
        }
        out = o2;
        memcpy(out + len, r->prefill, pl + 1);
        len += pl;
    }
    rc = srv_chat_tokenize(tok, out, len, ids, n, err);
    if (rc || !text) free(out);
    else *text = out;
    return rc;
}
