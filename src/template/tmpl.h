/*
 * tmpl.h — chat templates: a Jinja2 interpreter with the semantics of
 * @huggingface/jinja (what transformers.js renders), Python Jinja2 where that
 * library has no opinion. Depends only on util/ (and jansson for JSON input).
 *
 *   tmpl_template *t; kiln_err err; char *text; size_t n;
 *   if (tmpl_compile(src, strlen(src), NULL, &t, &err) != KILN_OK) fail(err.msg);
 *   tmpl_value *ctx; tmpl_value_from_json(context_json, &ctx, &err);
 *   if (tmpl_render(t, ctx, &text, &n, &err) != KILN_OK) fail(err.msg);
 *   free(text); tmpl_value_free(ctx); tmpl_free(t);
 *
 * Or in one call, as the server does:
 *   tmpl_render_chat(src, messages, tools, NULL, true, "<s>", "</s>", &text, &n, &err);
 *
 * Errors: KILN_E_INVALID with "template:LINE:COL: message" for syntax and
 * runtime errors; raise_exception(msg) gives KILN_E_INVALID with msg verbatim;
 * KILN_E_TOO_LARGE when a limit (depth, loop iterations, output, memory) is hit;
 * KILN_E_NOMEM when malloc fails. Nothing here aborts on any input.
 * Threads: a compiled template is immutable and may be rendered from several
 * threads at once; a context value must not be mutated while it is rendered.
 */
#ifndef KILN_TMPL_H
#define KILN_TMPL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/kiln_err.h"

typedef struct tmpl_template tmpl_template; /* opaque: a compiled template */
typedef struct tmpl_value tmpl_value;       /* opaque: a refcounted Jinja value */

typedef struct {
    bool trim_blocks;       /* drop the first newline after a block tag (transformers: true) */
    bool lstrip_blocks;     /* strip spaces/tabs before a block tag at line start (true) */
    uint32_t max_depth;     /* nesting of statements, expressions and calls; 0 = 500
                               (about 200 KB of stack: a render needs a thread with 256 KB+) */
    uint64_t max_loop_iter; /* loop iterations per render, all loops; 0 = 1,000,000 */
    size_t max_output;      /* bytes of rendered text (any captured block too); 0 = 64 MiB */
    size_t max_memory;      /* bytes of values alive during one render; 0 = 512 MiB */
    int64_t fixed_now;      /* != 0: strftime_now() formats this Unix time, in UTC (tests);
                               0: the real clock, local time (as transformers does) */
    /* Optional memory account shared with other work (the server's request
     * memory): what a render holds (its values and text buffers) is reserved
     * here as it grows, in 64 KiB steps, and released when the render ends.
     * acct_reserve(ctx, bytes, total) takes bytes more, total being what the
     * render would then hold; it answers KILN_OK, KILN_E_BUSY (others hold the
     * account now) or KILN_E_TOO_LARGE (total can never fit), and the render
     * stops with that code, its message naming acct_name. */
    kiln_code (*acct_reserve)(void *ctx, size_t bytes, size_t total);
    void (*acct_release)(void *ctx, size_t bytes);
    void *acct_ctx;
    const char *acct_name; /* e.g. "--request-memory"; NULL: "the memory account" */
} tmpl_options;

/* tmpl_options_default(): trim_blocks and lstrip_blocks true, limits at their defaults. */
tmpl_options tmpl_options_default(void);

/* API: compile and render */
/* Compiles src[0..len). opt NULL means tmpl_options_default(). *out is OWNED by the
 * caller (tmpl_free). Syntax errors: KILN_E_INVALID, "template:LINE:COL: ...". */
kiln_code tmpl_compile(const char *src, size_t len, const tmpl_options *opt, tmpl_template **out,
                       kiln_err *err);
void tmpl_free(tmpl_template *t); /* NULL is a no-op */

/* Renders t with context (a dict from tmpl_value_dict_new/tmpl_value_from_json, or NULL).
 * *out: OWNED by the caller (free()), NUL-terminated, *out_len bytes (out_len may be NULL).
 * context is read, never changed. */
kiln_code tmpl_render(const tmpl_template *t, const tmpl_value *context, char **out,
                      size_t *out_len, kiln_err *err);

/* API: values (for building contexts). Every constructor returns a new value OWNED by
 * the caller, or NULL when out of memory; setters take ownership of the value they are
 * given, even when they fail. */
tmpl_value *tmpl_value_none(void);
tmpl_value *tmpl_value_bool(bool b);
tmpl_value *tmpl_value_int(int64_t i);
tmpl_value *tmpl_value_float(double f);
tmpl_value *tmpl_value_string(const char *s, size_t len);
tmpl_value *tmpl_value_cstring(const char *s);
tmpl_value *tmpl_value_list_new(void);
tmpl_value *tmpl_value_dict_new(void); /* ordered: keys keep their insertion order */
kiln_code tmpl_value_list_append(tmpl_value *list, tmpl_value *item, kiln_err *err);
/* Sets (replaces) key in dict; keeps the key's first position. */
kiln_code tmpl_value_dict_set(tmpl_value *dict, const char *key, tmpl_value *v, kiln_err *err);
kiln_code tmpl_value_dict_setn(tmpl_value *dict, const char *key, size_t key_len, tmpl_value *v,
                               kiln_err *err);
/* JSON -> value: object -> ordered dict, array -> list, integer -> int, real -> float. */
kiln_code tmpl_value_from_json(const json_t *j, tmpl_value **out, kiln_err *err);
tmpl_value *tmpl_value_ref(tmpl_value *v); /* +1 reference; returns v */
void tmpl_value_free(tmpl_value *v);       /* -1 reference; NULL is a no-op */

/* API: chat helpers */
/* Renders a chat template the way transformers' apply_chat_template does: the
 * context holds messages, tools (none when NULL), documents (none), add_generation_prompt,
 * bos_token / eos_token (when not NULL), then every key of extra_vars (an object such
 * as {"enable_thinking": false, "pad_token": "<pad>"}, may be NULL), which win. */
kiln_code tmpl_render_chat(const char *template_text,  /* NUL-terminated Jinja source */
                           const json_t *messages,     /* array of {role, content, ...} */
                           const json_t *tools,        /* array or NULL */
                           const json_t *extra_vars,   /* object or NULL */
                           bool add_generation_prompt, /* append the assistant header */
                           const char *bos,            /* bos_token or NULL */
                           const char *eos,            /* eos_token or NULL */
                           char **out,                 /* OUT: OWNED by the caller */
                           size_t *out_len,            /* OUT: bytes (may be NULL) */
                           kiln_err *err);

/* The same context as a value, to render with a template compiled once (the server
 * caches tmpl_compile's result per model: compiling a large template takes ms).
 * *out: OWNED by the caller (tmpl_value_free). */
kiln_code tmpl_chat_context(const json_t *messages, const json_t *tools, const json_t *extra_vars,
                            bool add_generation_prompt, const char *bos, const char *eos,
                            tmpl_value **out, kiln_err *err);

/* Renders with a whole JSON context object (as `kiln template --context FILE` reads it):
 * messages, optional tools, add_generation_prompt, any other variables. special_tokens
 * (object or NULL, e.g. from tmpl_chat_load) supplies bos_token etc. unless the context
 * sets them; tools and documents default to none. */
kiln_code tmpl_render_json(const char *template_text, const json_t *context,
                           const json_t *special_tokens, char **out, size_t *out_len,
                           kiln_err *err);
/* tmpl_render_json's context as a value. *out: OWNED by the caller. */
kiln_code tmpl_json_context(const json_t *context, const json_t *special_tokens, tmpl_value **out,
                            kiln_err *err);

/* A model folder's chat template and special tokens. */
typedef struct {
    char *template_text;    /* OWNED: NUL-terminated Jinja source */
    json_t *special_tokens; /* OWNED: {"bos_token": "<s>", ...}; strings only */
} tmpl_chat_files;

/* Finds the template of model_dir: chat_template.jinja, else chat_template.json
 * ({"chat_template": ...}), else tokenizer_config.json "chat_template" — a string, or a
 * list of {name, template} where "tool_use" is taken when has_tools and it exists, else
 * "default". Special tokens (bos/eos/unk/sep/pad/cls/mask) come from
 * tokenizer_config.json as strings or AddedToken objects ({"content": ...}).
 * KILN_E_NOT_FOUND when the folder has no chat template. */
kiln_code tmpl_chat_load(const char *model_dir, bool has_tools, tmpl_chat_files *out,
                         kiln_err *err);
void tmpl_chat_files_free(tmpl_chat_files *f);

#endif
