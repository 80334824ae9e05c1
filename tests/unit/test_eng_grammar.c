/*
 * test_eng_grammar.c — constrained decoding in the serving engine on a real
 * model (stories260K, whose free output is never JSON): rows with different
 * schemas and free rows in one batch each give exactly the tokens they give
 * alone; outputs under the length budget always finish and parse; a trigger
 * token starts the constraint; a finished grammar ends the request even with
 * ignore_eos; the sampler's mask renormalizes.
 */
#include "engine/eng_engine.h"
#include "eng_collect.h"
#include "test_model.h"

#include <jansson.h>

static eng_runtime *rt;
static tok_tokenizer *tok;
static char dir[512];

static eng_engine *start(int max_seqs)
{
    kiln_err err;
    eng_runtime_opts o = eng_runtime_opts_default();
    o.ctx = 1024;
    o.max_seqs = max_seqs;
    o.n_threads = 1;
    o.block_tokens = 8;
    o.max_step_tokens = 128;
    if (eng_runtime_open(dir, &o, &rt, &err)) return NULL;
    if (tok_load(dir, &tok, &err)) return NULL;
    eng_engine_opts eo = eng_engine_opts_default();
    eo.prefill_chunk = 16;
    eo.max_stall_s = 0;
    eng_engine *e;
    if (eng_engine_start(rt, tok, &eo, &e, &err)) return NULL;
    return e;
}

static void stop_all(eng_engine *e)
{
    eng_engine_stop(e);
    eng_runtime_close(rt);
    tok_destroy(tok);
    rt = NULL;
    tok = NULL;
}

static gr_grammar *schema(const char *text)
{
    json_t *s = json_loads(text, 0, NULL);
    gr_grammar *g = NULL;
    kiln_err err;
    gr_options o = gr_options_default();
    o.json_ws_max = 4;
    if (!s || gr_compile_json_schema(s, &o, &g, &err)) fprintf(stderr, "  schema: %s\n", err.msg);
    json_decref(s);
    return g;
}

static const int32_t prompt_a[] = {1, 403, 407, 261, 378, 432};

static const char *SCHEMAS[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150}},\"required\":[\"name\",\"age\"]"
    "}",
    "{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\",\"blue\"]},\"minItems\":1,"
    "\"maxItems\":4}",
    "{\"anyOf\":[{\"type\":\"number\",\"exclusiveMinimum\":0},{\"type\":\"boolean\"}]}",
    "{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"},\"items\":{\"type\":"
    "\"array\","
    "\"items\":{\"type\":\"string\",\"format\":\"date\"}}},\"required\":[\"ok\",\"items\"]}",
};

static eng_params params(gr_grammar *g, uint64_t seed, int32_t max_tokens)
{
    eng_params p = eng_params_default();
    p.prompt = prompt_a;
    p.n_prompt = (int32_t)(sizeof prompt_a / sizeof *prompt_a);
    p.max_tokens = max_tokens;
    p.sp.temperature = 0.9f;
    p.sp.top_p = 0.95f;
    p.sp.seed = seed;
    p.grammar = g;
    return p;
}

static int is_json(const collected *c)
{
    json_error_t je;
    json_t *j = json_loadb(c->text, c->text_len, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &je);
    if (!j) fprintf(stderr, "  not JSON (%s): '%.*s'\n", je.text, (int)c->text_len, c->text);
    json_decref(j);
    return j != NULL;
}

static void test_batch_constrained_and_free_rows_each_equal_alone(void)
{
    test_shared_path(dir, sizeof dir, "models/stories260K");
    if (!test_path_exists(dir)) TEST_SKIP("stories260K absent");
    eng_engine *e = start(8);
    ASSERT_TRUE(e);
    gr_grammar *g[4];
    for (int i = 0; i < 4; i++)
        ASSERT_TRUE((g[i] = schema(SCHEMAS[i])));
    static collected alone[8], together[8];
    kiln_err err;
    for (int i = 0; i < 8; i++) {
        eng_params p = params(i < 4 ? g[i] : NULL, 100 + (uint64_t)i, 160);
        eng_handle *h;
        ASSERT_OK(eng_submit(e, &p, &h, &err));
        collect(h, &alone[i]);
        eng_handle_release(h);
    }
    eng_handle *hs[8];
    for (int i = 0; i < 8; i++) {
        eng_params p = params(i < 4 ? g[i] : NULL, 100 + (uint64_t)i, 160);
        ASSERT_OK(eng_submit(e, &p, &hs[i], &err));
    }
    for (int i = 0; i < 8; i++) {
        collect(hs[i], &together[i]);
        eng_handle_release(hs[i]);
    }
    for (int i = 0; i < 8; i++) {
        ASSERT_EQ_I64(together[i].n_toks, alone[i].n_toks);
        ASSERT_TRUE(
            !memcmp(together[i].toks, alone[i].toks, sizeof(int32_t) * (size_t)alone[i].n_toks));
        if (i < 4) {
            if (alone[i].finish != ENG_FINISH_STOP)
                fprintf(stderr, "  row %d: %s %s\n", i, eng_finish_name(alone[i].finish),
                        alone[i].err);
            ASSERT_EQ_I64(alone[i].finish, ENG_FINISH_STOP);
            ASSERT_TRUE(is_json(&alone[i]));
        }
    }
    /* the free rows are not JSON: the constraint did something */
    int free_json = 0;
    for (int i = 4; i < 8; i++)
        free_json += json_loadb(alone[i].text, alone[i].text_len, JSON_DECODE_ANY, NULL) != NULL;
    ASSERT_EQ_I64(free_json, 0);
    eng_stats st = eng_get_stats(e);
    ASSERT_EQ_I64(st.grammar_requests, 8);
    ASSERT_TRUE(st.grammar.masks > 0);
    for (int i = 0; i < 4; i++)
        gr_grammar_release(g[i]);
    stop_all(e);
}

static void test_length_budget_finishes_within_max_tokens(void)
{
    test_shared_path(dir, sizeof dir, "models/stories260K");
    if (!test_path_exists(dir)) TEST_SKIP("stories260K absent");
    eng_engine *e = start(4);
    ASSERT_TRUE(e);
    gr_grammar *g = schema(SCHEMAS[3]);
    ASSERT_TRUE(g);
    kiln_err err;
    for (int32_t mt = 30; mt <= 90; mt += 20) {
        for (uint64_t seed = 1; seed <= 3; seed++) {
            eng_params p = params(g, seed, mt);
            eng_handle *h;
            collected c;
            ASSERT_OK(eng_submit(e, &p, &h, &err));
            collect(h, &c);
            eng_handle_release(h);
            if (c.finish != ENG_FINISH_STOP)
                fprintf(stderr, "  max_tokens %d seed %d: %s after %d tokens: '%.*s'\n", (int)mt,
                        (int)seed, eng_finish_name(c.finish), c.n_toks, (int)c.text_len, c.text);

            ASSERT_EQ_I64(c.finish, ENG_FINISH_STOP);
            ASSERT_TRUE(c.n_toks <= mt);
            ASSERT_TRUE(is_json(&c));
        }
    }
    /* too few tokens for any sentence: no guarantee, cut at the length */
    eng_params p = params(g, 5, 5);
    eng_handle *h;
    collected c;
    ASSERT_OK(eng_submit(e, &p, &h, &err));
    collect(h, &c);
    eng_handle_release(h);
    ASSERT_EQ_I64(c.finish, ENG_FINISH_LENGTH);
    gr_grammar_release(g);
    stop_all(e);
}

static void test_finished_grammar_ends_even_with_ignore_eos(void)
{
    test_shared_path(dir, sizeof dir, "models/stories260K");
    if (!test_path_exists(dir)) TEST_SKIP("stories260K absent");
    eng_engine *e = start(2);
    ASSERT_TRUE(e);
    gr_grammar *g;
    kiln_err err;
    const char *gb = "root ::= \" The cat\" (\" sat\" | \" ran\"){1,2} \".\"\n";
    ASSERT_OK(gr_compile_gbnf(gb, strlen(gb), NULL, &g, &err));
    eng_params p = params(g, 3, 100);
    p.ignore_eos = true;
    eng_handle *h;
    collected c;
    ASSERT_OK(eng_submit(e, &p, &h, &err));
    collect(h, &c);
    eng_handle_release(h);
    ASSERT_EQ_I64(c.finish, ENG_FINISH_STOP);
    c.text[c.text_len] = 0;
    ASSERT_TRUE(!strcmp(c.text, " The cat sat.") || !strcmp(c.text, " The cat ran.") ||
                !strcmp(c.text, " The cat sat sat.") || !strcmp(c.text, " The cat sat ran.") ||
                !strcmp(c.text, " The cat ran sat.") || !strcmp(c.text, " The cat ran ran."));
    gr_grammar_release(g);
    stop_all(e);
}

static void test_trigger_token_starts_the_constraint(void)
{
    test_shared_path(dir, sizeof dir, "models/stories260K");
    if (!test_path_exists(dir)) TEST_SKIP("stories260K absent");
    eng_engine *e = start(2);
    ASSERT_TRUE(e);
    gr_grammar *g;
    kiln_err err;
    const char *gb = "root ::= \" [\" [0-9]{1,3} \"]\"\n";
    ASSERT_OK(gr_compile_gbnf(gb, strlen(gb), NULL, &g, &err));
    /* the trigger: the model's favourite first token, so it comes at once */
    eng_params p0 = params(NULL, 7, 1);
    p0.sp.temperature = 0;
    eng_handle *h;
    collected c;
    ASSERT_OK(eng_submit(e, &p0, &h, &err));
    collect(h, &c);
    eng_handle_release(h);
    int32_t trig = c.toks[0];
    eng_params p = params(g, 7, 40);
    p.sp.temperature = 0;
    p.grammar_triggers = &trig;
    p.n_grammar_triggers = 1;
    ASSERT_OK(eng_submit(e, &p, &h, &err));
    collect(h, &c);
    eng_handle_release(h);
    ASSERT_EQ_I64(c.toks[0], trig);
    ASSERT_EQ_I64(c.finish, ENG_FINISH_STOP);
    c.text[c.text_len] = 0;
    const char *after = strstr(c.text, " [");
    ASSERT_TRUE(after && after[strlen(after) - 1] == ']');
    gr_grammar_release(g);
    stop_all(e);
}

static void test_masked_sampler_renormalizes(void)
{
    float l[8] = {5, 1, 4, 3, 0, 2, 0, 0};
    uint64_t allow = (1u << 1) | (1u << 3) | (1u << 5);
    eng_sampling sp = eng_sampling_default();
    sp.top_logprobs = 3;
    eng_rng r;
    eng_rng_seed(&r, 1);
    static char scratch[4096] __attribute__((aligned(64)));
    eng_sample_out o;
    ASSERT_EQ_I64(eng_sample_row_masked(&sp, l, 8, NULL, 0, &allow, &r, scratch, &o), 3);
    double z = exp(1.0) + exp(3.0) + exp(2.0);
    ASSERT_NEAR_F32(o.logprob, 3.0 - log(z), 1e-5);
    ASSERT_EQ_I64(o.n_top, 3);
    ASSERT_EQ_I64(o.top_ids[2], 1);
    uint64_t none = 0;
    ASSERT_EQ_I64(eng_sample_row_masked(&sp, l, 8, NULL, 0, &none, &r, scratch, &o), -1);
}

/* A model with more logits than the tokenizer has ids (a padded embedding):
 * the draw stays among the mask's allowed ids however large the logits past
 * the tokenizer (and never reads past the mask: ASan). */
static void test_more_logits_than_tokenizer_ids(void)
{
    test_shared_path(dir, sizeof dir, "models/stories260K");
    if (!test_path_exists(dir)) TEST_SKIP("stories260K absent");
    kiln_err err;
    tok_tokenizer *t;
    ASSERT_OK(tok_load(dir, &t, &err));
    eng_gmask *gm;
    ASSERT_OK(eng_gmask_create(t, &gm, &err));
    gr_grammar *g = schema("{\"type\":\"integer\",\"minimum\":0,\"maximum\":9}");
    ASSERT_TRUE(g);
    eng_gstate *gs;
    ASSERT_OK(eng_gstate_create(gm, g, NULL, 0, &gs, &err));
    int64_t n_tok = tok_vocab_size(t), vocab = (n_tok + 63) / 64 * 64 + 300;
    float *l = calloc((size_t)vocab, sizeof *l);
    void *scratch = calloc((size_t)vocab, 64);
    ASSERT_TRUE(l && scratch);
    for (int64_t i = n_tok; i < vocab; i++)
        l[i] = 1e4f; /* ids no tokenizer token has: never drawn */
    eng_sampling sp = eng_sampling_default();
    sp.temperature = 1.0f;
    eng_rng r;
    eng_rng_seed(&r, 3);
    eng_sample_out o;
    for (int k = 0; k < 20; k++) {
        int32_t tk = eng_gstate_sample(gs, &sp, l, vocab, NULL, 0, NULL, 0, 8, &r, scratch, &o, &err);
        ASSERT_TRUE(tk >= 0 && tk < n_tok);
        size_t n;
        char *b = NULL;
        ASSERT_OK(tok_token_bytes(t, tk, &b, &n, NULL));
        ASSERT_TRUE(n >= 1);
        for (size_t i = 0; i < n; i++) /* the grammar's: digits, or whitespace around them */
            ASSERT_TRUE(strchr("0123456789 \t\n\r", b[i]) && b[i]);
        free(b);
    }
    free(l);
    free(scratch);
    eng_gstate_free(gs);
    gr_grammar_release(g);
    eng_gmask_destroy(gm);
    tok_destroy(t);
}

int main(void)
{
    RUN(test_masked_sampler_renormalizes);
    RUN(test_more_logits_than_tokenizer_ids);
    RUN(test_batch_constrained_and_free_rows_each_equal_alone);
    RUN(test_length_budget_finishes_within_max_tokens);
    RUN(test_finished_grammar_ends_even_with_ignore_eos);
    RUN(test_trigger_token_starts_the_constraint);
    return TEST_DONE();
}
