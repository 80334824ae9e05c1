/*
 * tmpl_chat.c — chat-template conveniences: the context transformers builds for
 * apply_chat_template (messages, tools, documents, add_generation_prompt, special
 * tokens, extra kwargs), and finding a model folder's template and special tokens.
 * Errors: KILN_E_IO / KILN_E_NOT_FOUND / KILN_E_INVALID for files; render errors as
 * tmpl_render gives them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/tmpl.h"

static kiln_code set_json(tmpl_value *ctx, const char *key, const json_t *j, kiln_err *err)
{
    tmpl_value *v;
    kiln_code rc = tmpl_value_from_json(j, &v, err);
    if (rc != KILN_OK) return rc;
    return tmpl_value_dict_set(ctx, key, v, err);
}

static kiln_code render_with(const char *template_text, tmpl_value *ctx, char **out,
                             size_t *out_len, kiln_err *err)
{
    tmpl_template *t = NULL;
    kiln_code rc = tmpl_compile(template_text, strlen(template_text), NULL, &t, err);
    if (rc == KILN_OK) rc = tmpl_render(t, ctx, out, out_len, err);
    tmpl_free(t);
    return rc;
}

kiln_code tmpl_chat_context(const json_t *messages, const json_t *tools, const json_t *extra_vars,
                            bool add_generation_prompt, const char *bos, const char *eos,
                            tmpl_value **out, kiln_err *err)
{
    *out = NULL;
    if (!messages || !json_is_array(messages))
        return kiln_fail(err, KILN_E_INVALID, "chat template: messages must be an array");
    if (extra_vars && !json_is_object(extra_vars))
        return kiln_fail(err, KILN_E_INVALID, "chat template: extra variables must be an object");
    tmpl_value *ctx = tmpl_value_dict_new();
    if (!ctx) return kiln_fail(err, KILN_E_NOMEM, "chat template: out of memory");
    kiln_code rc = set_json(ctx, "messages", messages, err);
    if (rc == KILN_OK)
        rc = tools ? set_json(ctx, "tools", tools, err)
                   : tmpl_value_dict_set(ctx, "tools", tmpl_value_none(), err);
    if (rc == KILN_OK) rc = tmpl_value_dict_set(ctx, "documents", tmpl_value_none(), err);
    if (rc == KILN_OK)
        rc = tmpl_value_dict_set(ctx, "add_generation_prompt",
                                 tmpl_value_bool(add_generation_prompt), err);
    if (rc == KILN_OK && bos)
        rc = tmpl_value_dict_set(ctx, "bos_token", tmpl_value_cstring(bos), err);
    if (rc == KILN_OK && eos)
        rc = tmpl_value_dict_set(ctx, "eos_token", tmpl_value_cstring(eos), err);
    if (rc == KILN_OK && extra_vars) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)extra_vars, k, v)
        {
            if ((rc = set_json(ctx, k, v, err)) != KILN_OK) break;
        }
    }
    if (rc != KILN_OK) {
        tmpl_value_free(ctx);
        return rc;
    }
    *out = ctx;
    return KILN_OK;
}

kiln_code tmpl_render_chat(const char *template_text, const json_t *messages, const json_t *tools,
                           const json_t *extra_vars, bool add_generation_prompt, const char *bos,
                           const char *eos, char **out, size_t *out_len, kiln_err *err)
{
    *out = NULL;
    if (!template_text) return kiln_fail(err, KILN_E_INVALID, "chat template: no template");
    tmpl_value *ctx;
    kiln_code rc =
        tmpl_chat_context(messages, tools, extra_vars, add_generation_prompt, bos, eos, &ctx, err);
    if (rc != KILN_OK) return rc;
    rc = render_with(template_text, ctx, out, out_len, err);
    tmpl_value_free(ctx);
    return rc;
}

kiln_code tmpl_json_context(const json_t *context, const json_t *special_tokens, tmpl_value **out,
                            kiln_err *err)
{
    *out = NULL;
    if (!context || !json_is_object(context))
        return kiln_fail(err, KILN_E_INVALID, "template context must be a JSON object");
    tmpl_value *ctx = tmpl_value_dict_new();
    if (!ctx) return kiln_fail(err, KILN_E_NOMEM, "chat template: out of memory");
    kiln_code rc = KILN_OK;
    /* transformers' order: messages, tools, documents, add_generation_prompt, specials, kwargs */
    static const char *const first[] = {"messages", "tools", "documents"};
    for (size_t i = 0; rc == KILN_OK && i < 3; i++) {
        const json_t *v = json_object_get(context, first[i]);
        rc = v        ? set_json(ctx, first[i], v, err)
             : i == 0 ? KILN_OK
                      : tmpl_value_dict_set(ctx, first[i], tmpl_value_none(), err);
    }
    if (rc == KILN_OK && !json_object_get(context, "add_generation_prompt"))
        rc = tmpl_value_dict_set(ctx, "add_generation_prompt", tmpl_value_bool(false), err);
    if (rc == KILN_OK && special_tokens && json_is_object(special_tokens)) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)special_tokens, k, v)
        {
            if (json_object_get(context, k)) continue;
            if ((rc = set_json(ctx, k, v, err)) != KILN_OK) break;
        }
    }
    if (rc == KILN_OK) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)context, k, v)
        {
            if ((rc = set_json(ctx, k, v, err)) != KILN_OK) break;
        }
    }
    if (rc != KILN_OK) {
        tmpl_value_free(ctx);
        return rc;
    }
    *out = ctx;
    return KILN_OK;
}

kiln_code tmpl_render_json(const char *template_text, const json_t *context,
                           const json_t *special_tokens, char **out, size_t *out_len, kiln_err *err)
{
    *out = NULL;
    if (!template_text) return kiln_fail(err, KILN_E_INVALID, "chat template: no template");
    tmpl_value *ctx;
    kiln_code rc = tmpl_json_context(context, special_tokens, &ctx, err);
    if (rc != KILN_OK) return rc;
    rc = render_with(template_text, ctx, out, out_len, err);
    tmpl_value_free(ctx);
    return rc;
}

/* ------------------------------------------------------------------ model folders */

static char *read_file(const char *path, kiln_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                kiln_fail(err, KILN_E_NOMEM, "reading %s: out of memory", path);
                return NULL;
            }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0) break;
    }
    fclose(f);
    buf[len] = '\0';
    return buf;
}

static char *pick_template(const json_t *t, bool has_tools)
{
    if (json_is_string(t)) return strdup(json_string_value(t));
    const json_t *def = NULL, *tool = NULL;
    if (json_is_array(t)) {
        size_t i;
        json_t *e;
        json_array_foreach(t, i, e)
        {
            const char *name = json_string_value(json_object_get(e, "name"));
            const json_t *tt = json_object_get(e, "template");
            if (!name || !json_is_string(tt)) continue;
            if (!strcmp(name, "default")) def = tt;
            if (!strcmp(name, "tool_use")) tool = tt;
        }
    } else if (json_is_object(t)) {
        def = json_object_get(t, "default");
        tool = json_object_get(t, "tool_use");
    }
    const json_t *pick = has_tools && json_is_string(tool) ? tool : def;
    return json_is_string(pick) ? strdup(json_string_value(pick)) : NULL;
}

kiln_code tmpl_chat_load(const char *model_dir, bool has_tools, tmpl_chat_files *out, kiln_err *err)
{
    memset(out, 0, sizeof *out);
    char path[4096];
    kiln_err_clear(err);
    json_t *cfg = NULL;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", model_dir);
    char *text = read_file(path, err);
    if (text) {
        json_error_t je;
        /* real configs hold integers past 64 bits (model_max_length = 1e30) */
        cfg = json_loads(text, JSON_DECODE_INT_AS_REAL, &je);
        free(text);
        if (!cfg || !json_is_object(cfg)) {
            json_decref(cfg);
            return kiln_fail(err, KILN_E_INVALID, "%s:%d: %s", path, je.line, je.text);
        }
    } else if (err && err->code == KILN_E_NOMEM) {
        return KILN_E_NOMEM;
    }
    out->special_tokens = json_object();
    if (!out->special_tokens) goto nomem;
    static const char *const keys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                       "pad_token", "cls_token", "mask_token"};
    for (size_t i = 0; cfg && i < sizeof keys / sizeof keys[0]; i++) {
        const json_t *v = json_object_get(cfg, keys[i]);
        if (json_is_object(v)) v = json_object_get(v, "content");
        if (json_is_string(v) && json_string_length(v) > 0)
            json_object_set_new(out->special_tokens, keys[i], json_string(json_string_value(v)));
    }
    snprintf(path, sizeof path, "%s/chat_template.jinja", model_dir);
    out->template_text = read_file(path, err);
    if (!out->template_text) {
        snprintf(path, sizeof path, "%s/chat_template.json", model_dir);
        char *j = read_file(path, err);
        if (j) {
            json_t *doc = json_loads(j, JSON_DECODE_INT_AS_REAL, NULL);
            free(j);
            if (doc)
                out->template_text =
                    pick_template(json_object_get(doc, "chat_template"), has_tools);
            json_decref(doc);
        }
    }
    if (!out->template_text && cfg)
        out->template_text = pick_template(json_object_get(cfg, "chat_template"), has_tools);
    json_decref(cfg);
    if (!out->template_text) {
        tmpl_chat_files_free(out);
        return kiln_fail(err, KILN_E_NOT_FOUND, "%s has no chat template", model_dir);
    }
    return KILN_OK;
nomem:
    json_decref(cfg);
    tmpl_chat_files_free(out);
    return kiln_fail(err, KILN_E_NOMEM, "chat template: out of memory");
}

void tmpl_chat_files_free(tmpl_chat_files *f)
{
    if (!f) return;
    free(f->template_text);
    json_decref(f->special_tokens);
    memset(f, 0, sizeof *f);
}
