/*
 * test_tmpl_chat.c — the value API (building contexts, JSON -> values), and the chat
 * helpers: tmpl_render_chat / tmpl_render_json build transformers' context, and
 * tmpl_chat_load finds a model folder's template (chat_template.jinja,
 * chat_template.json, tokenizer_config.json string or named list) and special tokens
 * (strings or AddedToken objects).
 */
#include <pthread.h>
#include <sys/stat.h>

#include "../template/tmpl_test_util.h"

static const char *CHATML =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

static void test_values_built_by_hand_render(void)
{
    kiln_err err;
    tmpl_value *ctx = tmpl_value_dict_new(), *l = tmpl_value_list_new();
    ASSERT_OK(tmpl_value_list_append(l, tmpl_value_int(1), &err));
    ASSERT_OK(tmpl_value_list_append(l, tmpl_value_float(2.5), &err));
    ASSERT_OK(tmpl_value_list_append(l, tmpl_value_string("x\0y", 3), &err));
    ASSERT_OK(tmpl_value_list_append(l, tmpl_value_bool(false), &err));
    ASSERT_OK(tmpl_value_list_append(l, tmpl_value_none(), &err));
    ASSERT_OK(tmpl_value_dict_set(ctx, "l", l, &err));
    ASSERT_OK(tmpl_value_dict_set(ctx, "k", tmpl_value_cstring("first"), &err));
    ASSERT_OK(tmpl_value_dict_set(ctx, "k", tmpl_value_cstring("second"), &err)); /* replaces */
    ASSERT_CODE(tmpl_value_list_append(ctx, tmpl_value_int(1), &err), KILN_E_INVALID);
    tmpl_template *t;
    const char *src = "{{ l | tojson }}|{{ k }}|{{ l[2] | length }}";
    ASSERT_OK(tmpl_compile(src, strlen(src), NULL, &t, &err));
    char *out;
    size_t n;
    ASSERT_OK(tmpl_render(t, ctx, &out, &n, &err));
    ASSERT_STR_EQ(out, "[1, 2.5, \"x\\u0000y\", false, null]|second|3");
    free(out);
    tmpl_free(t);
    tmpl_value_free(ctx);
}

static void test_json_keeps_key_order_and_types(void)
{
    ASSERT_RENDER("{% for k, v in o | items %}{{ k }}:{{ v }} {% endfor %}",
                  "{\"o\": {\"z\": 1, \"a\": 2.0, \"m\": [true, null], \"q\": \"s\"}}",
                  "z:1 a:2.0 m:[true, null] q:s ");
}

static void test_render_chat_builds_the_transformers_context(void)
{
    kiln_err err;
    json_t *msgs = json_loads("[{\"role\": \"user\", \"content\": \"hi\"}]", 0, NULL);
    json_t *extra = json_loads("{\"enable_thinking\": false}", 0, NULL);
    char *out;
    size_t n;
    ASSERT_OK(tmpl_render_chat(CHATML, msgs, NULL, NULL, true, NULL, NULL, &out, &n, &err));
    ASSERT_STR_EQ(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    free(out);
    const char *probe =
        "{{ bos_token }}|{{ eos_token }}|{{ tools is none }}|{{ documents is none }}|"
        "{{ enable_thinking }}|{{ add_generation_prompt }}";
    ASSERT_OK(tmpl_render_chat(probe, msgs, NULL, extra, false, "<s>", "</s>", &out, &n, &err));
    ASSERT_STR_EQ(out, "<s>|</s>|true|true|false|false");
    free(out);
    json_t *tools =
        json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]", 0, NULL);
    ASSERT_OK(tmpl_render_chat("{{ tools | tojson }}", msgs, tools, NULL, false, NULL, NULL, &out,
                               &n, &err));
    ASSERT_STR_EQ(out, "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]");
    free(out);
    ASSERT_CODE(tmpl_render_chat("{{ raise_exception('no tools allowed') }}", msgs, tools, NULL,
                                 false, NULL, NULL, &out, &n, &err),
                KILN_E_INVALID);
    ASSERT_STR_EQ(err.msg, "no tools allowed");
    ASSERT_CODE(tmpl_render_chat("{% if %}", msgs, NULL, NULL, false, NULL, NULL, &out, &n, &err),
                KILN_E_INVALID);
    ASSERT_CODE(tmpl_render_chat(CHATML, extra, NULL, NULL, false, NULL, NULL, &out, &n, &err),
                KILN_E_INVALID);
    json_decref(msgs);
    json_decref(extra);
    json_decref(tools);
}

static void test_render_json_context_wins_over_special_tokens(void)
{
    kiln_err err;
    json_t *ctx = json_loads("{\"messages\": [], \"eos_token\": \"E\", \"x\": 1}", 0, NULL);
    json_t *sp = json_loads("{\"bos_token\": \"B\", \"eos_token\": \"nope\"}", 0, NULL);
    char *out;
    ASSERT_OK(tmpl_render_json("{{ bos_token }}{{ eos_token }}{{ x }}{{ add_generation_prompt }}",
                               ctx, sp, &out, NULL, &err));
    ASSERT_STR_EQ(out, "BE1false");
    free(out);
    json_decref(ctx);
    json_decref(sp);
}

static int write_file(const char *dir, const char *name, const char *text)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (!f) return 0;
    fputs(text, f);
    fclose(f);
    return 1;
}

static void test_chat_load_finds_templates_and_tokens(void)
{
    char dir[] = "/tmp/kiln-tmpl-chat-XXXXXX";
    ASSERT_TRUE(mkdtemp(dir) != NULL);
    kiln_err err;
    tmpl_chat_files f;
    ASSERT_CODE(tmpl_chat_load(dir, false, &f, &err), KILN_E_NOT_FOUND);
    ASSERT_TRUE(write_file(
        dir, "tokenizer_config.json",
        "{\"model_max_length\": 1000000000000000019884624838656,"
        " \"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<s>\"}, \"eos_token\": "
        "\"</s>\","
        " \"pad_token\": null, \"chat_template\": [{\"name\": \"default\", \"template\": \"D\"},"
        " {\"name\": \"tool_use\", \"template\": \"T\"}]}"));
    ASSERT_OK(tmpl_chat_load(dir, false, &f, &err));
    ASSERT_STR_EQ(f.template_text, "D");
    ASSERT_STR_EQ(json_string_value(json_object_get(f.special_tokens, "bos_token")), "<s>");
    ASSERT_STR_EQ(json_string_value(json_object_get(f.special_tokens, "eos_token")), "</s>");
    ASSERT_TRUE(json_object_get(f.special_tokens, "pad_token") == NULL);
    tmpl_chat_files_free(&f);
    ASSERT_OK(tmpl_chat_load(dir, true, &f, &err));
    ASSERT_STR_EQ(f.template_text, "T");
    tmpl_chat_files_free(&f);
    ASSERT_TRUE(write_file(dir, "chat_template.json", "{\"chat_template\": \"J\"}"));
    ASSERT_OK(tmpl_chat_load(dir, true, &f, &err));
    ASSERT_STR_EQ(f.template_text, "J");
    tmpl_chat_files_free(&f);
    ASSERT_TRUE(write_file(dir, "chat_template.jinja", "{{ 'jinja file' }}"));
    ASSERT_OK(tmpl_chat_load(dir, true, &f, &err));
    ASSERT_STR_EQ(f.template_text, "{{ 'jinja file' }}");
    tmpl_chat_files_free(&f);
    char p[4096];
    const char *names[] = {"tokenizer_config.json", "chat_template.json", "chat_template.jinja"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

typedef struct {
    const tmpl_template *t;
    const tmpl_value *ctx;
    int ok;
} render_job;

static void *render_many(void *arg)
{
    render_job *j = arg;
    kiln_err err;
    j->ok = 1;
    for (int i = 0; i < 200 && j->ok; i++) {
        char *out;
        size_t n;
        if (tmpl_render(j->t, j->ctx, &out, &n, &err) != KILN_OK ||
            strcmp(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"))
            j->ok = 0;
        else
            free(out);
    }
    return NULL;
}

static void test_one_template_and_context_render_from_many_threads(void)
{
    kiln_err err;
    json_t *msgs = json_loads("[{\"role\": \"user\", \"content\": \"hi\"}]", 0, NULL);
    tmpl_value *ctx;
    tmpl_template *t;
    ASSERT_OK(tmpl_chat_context(msgs, NULL, NULL, true, "<s>", "</s>", &ctx, &err));
    ASSERT_OK(tmpl_compile(CHATML, strlen(CHATML), NULL, &t, &err));
    pthread_t th[4];
    render_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (render_job){.t = t, .ctx = ctx};
        ASSERT_TRUE(pthread_create(&th[i], NULL, render_many, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++)
        ASSERT_TRUE(jobs[i].ok);
    tmpl_free(t);
    tmpl_value_free(ctx);
    json_decref(msgs);
}

int main(void)
{
    RUN(test_values_built_by_hand_render);
    RUN(test_json_keeps_key_order_and_types);
    RUN(test_render_chat_builds_the_transformers_context);
    RUN(test_render_json_context_wins_over_special_tokens);
    RUN(test_chat_load_finds_templates_and_tokens);
    RUN(test_one_template_and_context_render_from_many_threads);
    return TEST_DONE();
}
