/*
 * test_tmpl_reference.c — the real chat templates of fetched tokenizers (llama3,
 * llama3_1, qwen3, gemma3, llama2 — the last has none) and Gemma 4's two template
 * revisions (kept in tests/template/gemma4/: no npm package ships them) render exactly as
 * @huggingface/jinja@0.5.11 renders them, for the conversations of
 * tests/template/conversations.json (system prompts, multi-part content, tools and
 * tool results, enable_thinking both ways, bad role orders that must raise).
 *
 * Expected renders: tests/template/reference_renders.json (made by
 * tests/template/make_reference.sh), or $KILN_TMPL_REFERENCE (the live run of
 * tests/cli/test_template_reference.sh). Templates: $KILN_BINARY_DIR/fetched-templates;
 * when absent this test fetches them with ../shared/tools/fetch_tokenizers.sh (npm),
 * and skips only when that fails. A reference error matches when kiln fails too;
 * errors raised by the template (raise_exception) must carry the same message.
 */
#include <jansson.h>

#include "template/tmpl.h"
#include "test.h"

static const char *const MODELS[] = {"llama3", "llama3_1", "qwen3", "gemma3", "llama2"};

static const char *binary_dir(void)
{
    const char *b = getenv("KILN_BINARY_DIR");
#ifdef KILN_BINARY_DIR
    if (!b) b = KILN_BINARY_DIR;
#endif
    return b ? b : ".";
}

static const char *source_dir(void)
{
    const char *s = getenv("KILN_SOURCE_DIR");
#ifdef KILN_SOURCE_DIR
    if (!s) s = KILN_SOURCE_DIR;
#endif
    return s ? s : ".";
}

static int models_present(const char *dir)
{
    char p[4096];
    for (size_t i = 0; i < sizeof MODELS / sizeof MODELS[0]; i++) {
        snprintf(p, sizeof p, "%s/%s/tokenizer_config.json", dir, MODELS[i]);
        if (!test_path_exists(p)) return 0;
    }
    return 1;
}

/* The fetched-templates folder, fetching it when needed; NULL when unavailable. */
static const char *templates_dir(char *buf, size_t n)
{
    const char *env = getenv("KILN_TMPL_MODELS");
    if (env)
        snprintf(buf, n, "%s", env);
    else
        snprintf(buf, n, "%s/fetched-templates", binary_dir());
    if (models_present(buf)) return buf;
    char tool[4096], cmd[8192];
    test_shared_path(tool, sizeof tool, "tools/fetch_tokenizers.sh");
    if (snprintf(cmd, sizeof cmd, "bash '%s' '%s' llama3 llama3_1 qwen3 gemma3 llama2 >&2", tool,
                 buf) >= (int)sizeof cmd)
        return NULL;
    fprintf(stderr, "  fetching tokenizers: %s\n", cmd);
    if (system(cmd) != 0 || !models_present(buf)) return NULL;
    return buf;
}

static json_t *find_conversation(json_t *convs, const char *name)
{
    size_t i;
    json_t *c;
    json_array_foreach(convs, i, c) if (!strcmp(json_string_value(json_object_get(c, "name")),
                                                name)) return json_object_get(c, "chat");
    return NULL;
}

typedef struct {
    int renders, errors, no_template, failed;
} tally;

static void check_case(const char *dir, json_t *ref, json_t *convs, tally *t)
{
    const char *model = json_string_value(json_object_get(ref, "model"));
    const char *conv = json_string_value(json_object_get(ref, "conversation"));
    char mdir[4096];
    if (!model || snprintf(mdir, sizeof mdir, "%s/%s", dir, model) >= (int)sizeof mdir) {
        t->failed++;
        return;
    }
    if (strncmp(model, "gemma4", 6) == 0) /* in the repo */
        snprintf(mdir, sizeof mdir, "%s/tests/template/gemma4/%s", source_dir(), model);
    json_t *chat = conv ? find_conversation(convs, conv) : NULL;
    kiln_err err;
    tmpl_chat_files files;
    bool has_tools = chat && json_array_size(json_object_get(chat, "tools")) > 0;
    kiln_code rc = tmpl_chat_load(mdir, has_tools, &files, &err);
    if (json_is_true(json_object_get(ref, "no_template"))) {
        if (rc == KILN_E_NOT_FOUND)
            t->no_template++;
        else {
            fprintf(stderr, "  %s: expected no chat template, got %s\n", model, kiln_code_name(rc));
            t->failed++;
        }
        if (rc == KILN_OK) tmpl_chat_files_free(&files);
        return;
    }
    if (!chat || rc != KILN_OK) {
        fprintf(stderr, "  %s/%s: %s\n", model, conv, chat ? err.msg : "unknown conversation");
        t->failed++;
        return;
    }
    char *out = NULL;
    size_t n = 0;
    rc = tmpl_render_json(files.template_text, chat, files.special_tokens, &out, &n, &err);
    json_t *want = json_object_get(ref, "rendered");
    const char *want_err = json_string_value(json_object_get(ref, "error"));
    if (want) {
        const char *w = json_string_value(want);
        size_t wn = json_string_length(want);
        if (rc != KILN_OK) {
            fprintf(stderr, "  %s/%s: render failed: %s\n", model, conv, err.msg);
            t->failed++;
        } else if (n != wn || memcmp(out, w, n)) {
            size_t i = 0;
            while (i < n && i < wn && out[i] == w[i])
                i++;
            fprintf(stderr, "  %s/%s: differs at byte %zu\n    want: %.80s\n    got:  %.80s\n",
                    model, conv, i, w + i, out + i);
            t->failed++;
        } else {
            t->renders++;
        }
    } else if (want_err) {
        /* a raise_exception message is kiln's message verbatim; other runtime errors
         * are worded by each implementation ("template:LINE:COL: ...") */
        bool raised = strncmp(err.msg, "template:", 9) != 0;
        if (rc == KILN_OK) {
            fprintf(stderr, "  %s/%s: expected error \"%s\", rendered instead\n", model, conv,
                    want_err);
            t->failed++;
        } else if (raised && strcmp(err.msg, want_err)) {
            fprintf(stderr, "  %s/%s: error \"%s\", expected \"%s\"\n", model, conv, err.msg,
                    want_err);
            t->failed++;
        } else {
            t->errors++;
        }
    }
    free(out);
    tmpl_chat_files_free(&files);
}

static void test_fetched_templates_match_hf_jinja(void)
{
    char dirbuf[4096], refp[4096], convp[4096];
    const char *dir = templates_dir(dirbuf, sizeof dirbuf);
    if (!dir) TEST_SKIP("tokenizers could not be fetched (npm unavailable?)");
    const char *env = getenv("KILN_TMPL_REFERENCE");
    if (env)
        snprintf(refp, sizeof refp, "%s", env);
    else
        snprintf(refp, sizeof refp, "%s/tests/template/reference_renders.json", source_dir());
    snprintf(convp, sizeof convp, "%s/tests/template/conversations.json", source_dir());
    json_error_t je;
    json_t *ref = json_load_file(refp, 0, &je), *convs = json_load_file(convp, 0, &je);
    ASSERT_TRUE(ref && convs);
    tally t = {0};
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(ref, "cases"), i, c) check_case(dir, c, convs, &t);
    fprintf(stderr,
            "  reference (%s): %d renders identical, %d errors matched, %d without a template, %d "
            "failed\n",
            refp, t.renders, t.errors, t.no_template, t.failed);
    json_decref(ref);
    json_decref(convs);
    ASSERT_EQ_I64(t.failed, 0);
    ASSERT_TRUE(t.renders > 0);
}

int main(void)
{
    RUN(test_fetched_templates_match_hf_jinja);
    return TEST_DONE();
}
