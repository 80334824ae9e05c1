/*
 * test_eng_embed.c — embedding requests in the serving engine (eng_params.pooling)
 * on the real stories260K: the pooled vector equals pooling the hidden-state tap by
 * hand, whatever the prefill chunking and whatever else runs in the batch;
 * generations beside them are unchanged; last-token pooling takes cached prefixes,
 * mean pooling does not; bad modes are refused. And eng_pool.c on its own.
 */
#include "engine/eng_engine.h"
#include "engine/eng_pool.h"
#include "test_model.h"

static eng_runtime *rt;
static tok_tokenizer *tok;
static char dir[512];
static int32_t chunk = 16;

static const int32_t prompt_a[] = {1, 403, 407, 261, 378, 432};
static const int32_t prompt_b[] = {1, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338,
                                   381, 261, 370, 268, 414, 444, 373, 280, 300, 301, 302, 303,
                                   304, 305, 306, 307, 308, 309, 310, 311, 312, 313, 314, 315};
#define NB ((int32_t)(sizeof prompt_b / sizeof *prompt_b))

static int skip_if_absent(void)
{
    test_shared_path(dir, sizeof dir, "models/stories260K");
    return !test_path_exists(dir);
}

static eng_engine *start(int max_seqs)
{
    kiln_err err;
    eng_runtime_opts o = eng_runtime_opts_default();
    o.ctx = 256;
    o.max_seqs = max_seqs;
    o.n_threads = 1;
    o.block_tokens = 8;
    o.max_step_tokens = 64;
    if (eng_runtime_open(dir, &o, &rt, &err)) return NULL;
    if (tok_load(dir, &tok, &err)) return NULL;
    eng_engine_opts eo = eng_engine_opts_default();
    eo.prefill_chunk = chunk;
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

typedef struct {
    float v[64];
    int32_t n, cached, prompt_tokens, completion_tokens;
    eng_finish finish;
    int32_t toks[64];
    int n_toks;
} result;

static int collect(eng_handle *h, result *r)
{
    memset(r, 0, sizeof *r);
    eng_event ev;
    while (eng_handle_next(h, &ev, 60000) == 0) {
        if (ev.kind == ENG_EV_TOKEN && r->n_toks < 64) r->toks[r->n_toks++] = ev.token;
        int last = ev.kind != ENG_EV_TOKEN;
        if (last) {
            r->finish = ev.kind == ENG_EV_ERROR ? ENG_FINISH_ERROR : ev.finish;
            r->cached = ev.cached_tokens;
            r->prompt_tokens = ev.prompt_tokens;
            r->completion_tokens = ev.completion_tokens;
            if (ev.embedding && ev.n_embedding <= 64) {
                memcpy(r->v, ev.embedding, sizeof(float) * (size_t)ev.n_embedding);
                r->n = ev.n_embedding;
            }
        }
        eng_event_clear(&ev);
        if (last) return 0;
    }
    return -1;
}

static eng_params embed_params(const int32_t *prompt, int32_t n, eng_pooling mode)
{
    eng_params p = eng_params_default();
    p.prompt = prompt;
    p.n_prompt = n;
    p.max_tokens = 1;
    p.pooling = mode;
    return p;
}

static kiln_code run_one(eng_engine *e, const eng_params *p, result *r, kiln_err *err)
{
    eng_handle *h;
    kiln_code rc = eng_submit(e, p, &h, err);
    if (rc) return rc;
    collect(h, r);
    eng_handle_release(h);
    return KILN_OK;
}

/* The same pooling done by hand: the whole prompt in one tapped step on a
 * fresh runtime, then eng_pool_* (float64 sums in position order). */
static void by_hand(const int32_t *prompt, int32_t n, eng_pooling mode, float *out)
{
    kiln_err err;
    eng_runtime *r2 = tm_open(dir, 256, 1, 1, NULL, &err);
    int64_t H = mdl_config(r2->model)->hidden;
    float *rows = calloc((size_t)(n * H), sizeof *rows);
    double acc[64];
    eng_seq *s;
    eng_seq_create(prompt, n, &s, &err);
    eng_step_item it = {.seq = s, .max_tokens = n};
    mdl_ctx_set_hidden_out(r2->cx, rows, n);
    eng_step_run(r2->cx, r2->kv, &it, 1, 0, r2->logits, r2->logit_rows, &err);
    eng_pool_init(mode, acc, H);
    eng_pool_add(mode, acc, rows, n, H, 0, n);
    eng_pool_finish(mode, acc, H, n, out);
    eng_seq_free(s, r2->kv);
    free(rows);
    eng_runtime_close(r2);
}

static void test_embedding_equals_pooling_the_tap_by_hand(void)
{
    if (skip_if_absent()) TEST_SKIP("stories260K absent");
    eng_engine *e = start(4);
    ASSERT_TRUE(e != NULL);
    kiln_err err;
    const eng_pooling modes[] = {ENG_POOL_MEAN, ENG_POOL_CLS, ENG_POOL_LAST, ENG_POOL_MAX,
                                 ENG_POOL_MEAN_SQRT_LEN};
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        eng_params p = embed_params(prompt_b, NB, modes[m]); /* 37 tokens: 3 chunks of 16 */
        result r;
        ASSERT_OK(run_one(e, &p, &r, &err));
        float want[64];
        by_hand(prompt_b, NB, modes[m], want);
        ASSERT_EQ_I64(r.finish, ENG_FINISH_STOP);
        ASSERT_EQ_I64(r.n, 64);
        ASSERT_EQ_I64(r.completion_tokens, 0);
        ASSERT_EQ_I64(r.prompt_tokens, NB);
        if (memcmp(r.v, want, sizeof want) != 0)
            TEST_FAIL_("%s: engine (chunks of %d) differs from one tapped step", eng_pool_name(modes[m]),
                       (int)chunk);
    }
    stop_all(e);
}

static void test_embeddings_and_generations_beside_each_other_are_unchanged(void)
{
    if (skip_if_absent()) TEST_SKIP("stories260K absent");
    eng_engine *e = start(8);
    ASSERT_TRUE(e != NULL);
    kiln_err err;
    enum { N = 6 };
    eng_params ps[N] = {embed_params(prompt_b, NB, ENG_POOL_MEAN), eng_params_default(),
                        embed_params(prompt_a, 6, ENG_POOL_LAST), eng_params_default(),
                        embed_params(prompt_b, 20, ENG_POOL_CLS), embed_params(prompt_a, 4, ENG_POOL_MAX)};
    ps[1].prompt = prompt_a;
    ps[1].n_prompt = 6;
    ps[1].max_tokens = 30;
    ps[1].sp.temperature = 0;
    ps[3].prompt = prompt_b;
    ps[3].n_prompt = 12;
    ps[3].max_tokens = 25;
    ps[3].sp.temperature = 0.9f;
    ps[3].sp.seed = 5;
    result alone[N], together[N];
    for (int i = 0; i < N; i++) ASSERT_OK(run_one(e, &ps[i], &alone[i], &err));
    eng_handle *hs[N];
    for (int i = 0; i < N; i++) ASSERT_OK(eng_submit(e, &ps[i], &hs[i], &err));
    for (int i = 0; i < N; i++) {
        collect(hs[i], &together[i]);
        eng_handle_release(hs[i]);
    }
    for (int i = 0; i < N; i++) {
        ASSERT_EQ_I64(together[i].finish, alone[i].finish);
        ASSERT_EQ_I64(together[i].n_toks, alone[i].n_toks);
        ASSERT_TRUE(!memcmp(together[i].toks, alone[i].toks, sizeof(int32_t) * (size_t)alone[i].n_toks));
        ASSERT_EQ_I64(together[i].n, alone[i].n);
        ASSERT_TRUE(!memcmp(together[i].v, alone[i].v, sizeof(float) * (size_t)alone[i].n));
    }
    ASSERT_TRUE(alone[1].n_toks > 5 && alone[0].n == 64);
    eng_stats st = eng_get_stats(e);
    for (int i = 0; i < 500 && (st.running || st.kv.n_active); i++) { /* stats follow the step */
        usleep(10000);
        st = eng_get_stats(e);
    }
    ASSERT_EQ_I64(st.running, 0);
    ASSERT_EQ_I64(st.kv.n_active, 0); /* every block came back */
    stop_all(e);
}

static void test_last_pooling_takes_a_cached_prefix_mean_does_not(void)
{
    if (skip_if_absent()) TEST_SKIP("stories260K absent");
    eng_engine *e = start(2);
    ASSERT_TRUE(e != NULL);
    kiln_err err;
    result a, b, c, d;
    eng_params last = embed_params(prompt_b, NB, ENG_POOL_LAST);
    eng_params mean = embed_params(prompt_b, NB, ENG_POOL_MEAN);
    ASSERT_OK(run_one(e, &last, &a, &err));
    ASSERT_OK(run_one(e, &last, &b, &err));
    ASSERT_OK(run_one(e, &mean, &c, &err));
    ASSERT_OK(run_one(e, &mean, &d, &err));
    stop_all(e);
    ASSERT_EQ_I64(a.cached, 0);
    ASSERT_TRUE(b.cached >= 32); /* the full blocks before the last token */
    ASSERT_TRUE(!memcmp(a.v, b.v, sizeof a.v));
    ASSERT_EQ_I64(c.cached, 0);
    ASSERT_EQ_I64(d.cached, 0);
    ASSERT_TRUE(!memcmp(c.v, d.v, sizeof c.v));
}

static void test_bad_pooling_mode_is_refused(void)
{
    if (skip_if_absent()) TEST_SKIP("stories260K absent");
    eng_engine *e = start(1);
    ASSERT_TRUE(e != NULL);
    kiln_err err;
    eng_params p = embed_params(prompt_a, 6, (eng_pooling)99);
    eng_handle *h = NULL;
    kiln_code rc = eng_submit(e, &p, &h, &err);
    stop_all(e);
    ASSERT_EQ_I64(rc, KILN_E_INVALID);
    ASSERT_TRUE(h == NULL);
}

static void test_pool_functions_do_not_depend_on_chunking(void)
{
    float rows[7 * 3];
    for (int i = 0; i < 21; i++) rows[i] = (float)((i * 37) % 11) - 5.0f + 0.125f * (float)i;
    const eng_pooling modes[] = {ENG_POOL_MEAN, ENG_POOL_CLS, ENG_POOL_LAST, ENG_POOL_MAX,
                                 ENG_POOL_MEAN_SQRT_LEN};
    for (size_t m = 0; m < 5; m++) {
        double one[3], split[3];
        float a[3], b[3];
        eng_pool_init(modes[m], one, 3);
        eng_pool_add(modes[m], one, rows, 7, 3, 0, 7);
        eng_pool_finish(modes[m], one, 3, 7, a);
        eng_pool_init(modes[m], split, 3);
        eng_pool_add(modes[m], split, rows, 2, 3, 0, 7);
        eng_pool_add(modes[m], split, rows + 6, 4, 3, 2, 7);
        eng_pool_add(modes[m], split, rows + 18, 1, 3, 6, 7);
        eng_pool_finish(modes[m], split, 3, 7, b);
        ASSERT_TRUE(!memcmp(a, b, sizeof a));
    }
    double acc[3];
    float out[3];
    eng_pool_init(ENG_POOL_MEAN, acc, 3);
    eng_pool_add(ENG_POOL_MEAN, acc, rows, 7, 3, 0, 7);
    eng_pool_finish(ENG_POOL_MEAN, acc, 3, 7, out);
    double want = 0;
    for (int t = 0; t < 7; t++) want += rows[t * 3];
    ASSERT_NEAR_F32(out[0], want / 7, 1e-6);
    eng_pool_init(ENG_POOL_LAST, acc, 3);
    eng_pool_add(ENG_POOL_LAST, acc, rows, 7, 3, 0, 7);
    eng_pool_finish(ENG_POOL_LAST, acc, 3, 7, out);
    ASSERT_TRUE(out[2] == rows[20]);
    eng_pooling p;
    ASSERT_EQ_I64(eng_pool_parse("cls", &p), 0);
    ASSERT_EQ_I64(p, ENG_POOL_CLS);
    ASSERT_TRUE(eng_pool_parse("weighted", &p) != 0);
    ASSERT_STR_EQ(eng_pool_name(ENG_POOL_MEAN_SQRT_LEN), "mean_sqrt_len");
}

int main(void)
{
    RUN(test_pool_functions_do_not_depend_on_chunking);
    RUN(test_embedding_equals_pooling_the_tap_by_hand);
    chunk = 5;
    RUN(test_embedding_equals_pooling_the_tap_by_hand);
    chunk = 16;
    RUN(test_embeddings_and_generations_beside_each_other_are_unchanged);
    RUN(test_last_pooling_takes_a_cached_prefix_mean_does_not);
    RUN(test_bad_pooling_mode_is_refused);
    return TEST_DONE();
}
