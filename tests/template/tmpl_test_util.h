/*
 * tmpl_test_util.h — shared by tests/unit/test_tmpl_*.c (included as
 * "../template/tmpl_test_util.h"): render a template with a JSON context (and given
 * options) to a string, or to "ERR(code): message".
 */
#ifndef KILN_TMPL_TEST_UTIL_H
#define KILN_TMPL_TEST_UTIL_H

#include <jansson.h>

#include "template/tmpl.h"
#include "test.h"

/* Returns a malloc'd string: the render, or "ERR(<code>): <message>". */
static inline char *tt_render_opt(const char *src, const char *ctx_json, const tmpl_options *opt)
{
    kiln_err err;
    tmpl_template *t = NULL;
    tmpl_value *ctx = NULL;
    char *out = NULL, *res;
    size_t n;
    if (tmpl_compile(src, strlen(src), opt, &t, &err) != KILN_OK) goto fail;
    if (ctx_json) {
        json_error_t je;
        json_t *j = json_loads(ctx_json, 0, &je);
        if (!j) {
            fprintf(stderr, "bad test JSON: %s\n", je.text);
            abort();
        }
        kiln_code rc = tmpl_value_from_json(j, &ctx, &err);
        json_decref(j);
        if (rc != KILN_OK) goto fail;
    }
    if (tmpl_render(t, ctx, &out, &n, &err) != KILN_OK) goto fail;
    if (strlen(out) != n) {
        fprintf(stderr, "render length %zu != strlen %zu\n", n, strlen(out));
        abort();
    }
    tmpl_value_free(ctx);
    tmpl_free(t);
    return out;
fail:
    tmpl_value_free(ctx);
    tmpl_free(t);
    res = malloc(strlen(err.msg) + 40);
    sprintf(res, "ERR(%s): %s", kiln_code_name(err.code), err.msg);
    return res;
}

static inline char *tt_render(const char *src, const char *ctx_json)
{
    return tt_render_opt(src, ctx_json, NULL);
}

/* ASSERT_RENDER(template, context_json_or_NULL, expected) */
#define ASSERT_RENDER(src, ctx, want)                                                              \
    do {                                                                                           \
        char *got_ = tt_render((src), (ctx));                                                      \
        int same_ = strcmp(got_, (want)) == 0;                                                     \
        if (!same_) {                                                                              \
            fprintf(stderr, "  FAIL %s:%d: %s\n    want: \"%s\"\n    got:  \"%s\"\n", __FILE__,    \
                    __LINE__, (src), (want), got_);                                                \
            free(got_);                                                                            \
            test_case_failed_ = 1;                                                                 \
            return;                                                                                \
        }                                                                                          \
        free(got_);                                                                                \
    } while (0)

/* ASSERT_RENDER_ERR(template, context, code, substring of the message) */
#define ASSERT_RENDER_ERR(src, ctx, code, sub)                                                     \
    do {                                                                                           \
        char *got_ = tt_render((src), (ctx));                                                      \
        char want_[64];                                                                            \
        snprintf(want_, sizeof want_, "ERR(%s): ", kiln_code_name(code));                          \
        if (strncmp(got_, want_, strlen(want_)) != 0 || !strstr(got_, (sub))) {                    \
            fprintf(stderr, "  FAIL %s:%d: %s\n    want: %s...%s\n    got:  \"%s\"\n", __FILE__,   \
                    __LINE__, (src), want_, (sub), got_);                                          \
            free(got_);                                                                            \
            test_case_failed_ = 1;                                                                 \
            return;                                                                                \
        }                                                                                          \
        free(got_);                                                                                \
    } while (0)

#endif
