/*
 * test_mdl_hidden.c — the hidden-state tap of mdl_forward (mdl_ctx_set_hidden_out),
 * which embeddings pool from, on the real stories260K (tied embeddings):
 *   - every tapped row times the embedding matrix (float64) gives the logits the
 *     same step wrote (so the tap is the final-normed state the lm_head reads);
 *   - a sequence's rows are bitwise the same alone, chunked, or beside another
 *     sequence in the batch;
 *   - a step of more tokens than the tap holds is refused, and turning the tap
 *     off leaves the buffer alone.
 */
#include "test_model.h"
#include "weights/wt_safetensors.h"

static const int32_t A[] = {1, 403, 407, 261, 378, 101, 260, 262, 307, 270, 300, 285, 266};
static const int32_t B[] = {1, 320, 411, 287, 263, 290, 274};
#define NA ((int32_t)(sizeof A / sizeof *A))
#define NB ((int32_t)(sizeof B / sizeof *B))

static eng_runtime *open_model(char *dir, size_t n, kiln_err *err)
{
    test_shared_path(dir, n, "models/stories260K");
    if (!test_path_exists(dir)) return NULL;
    return tm_open(dir, 128, 2, 1, NULL, err);
}

/* Runs items of the given sequences once each (at most `chunk` tokens) with the tap on. */
static kiln_code tapped_step(eng_runtime *rt, eng_seq **seqs, int32_t n, int32_t chunk, float *rows,
                             int32_t max_rows, kiln_err *err)
{
    eng_step_item it[2];
    for (int32_t i = 0; i < n; i++)
        it[i] = (eng_step_item){.seq = seqs[i], .max_tokens = chunk};
    mdl_ctx_set_hidden_out(rt->cx, rows, max_rows);
    kiln_code rc = eng_step_run(rt->cx, rt->kv, it, n, 0, rt->logits, rt->logit_rows, err);
    mdl_ctx_set_hidden_out(rt->cx, NULL, 0);
    return rc;
}

static void test_hidden_rows_times_embeddings_are_the_logits(void)
{
    char dir[512], path[700];
    kiln_err err;
    eng_runtime *rt = open_model(dir, sizeof dir, &err);
    if (!rt && !test_path_exists(dir)) TEST_SKIP("%s is absent", dir);
    if (!rt) TEST_FAIL_("%s", err.msg);
    int64_t H = mdl_config(rt->model)->hidden, V = mdl_vocab(rt->model);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    wt_st *st;
    ASSERT_OK(wt_st_open(path, &st, &err));
    const wt_tensor *emb = wt_st_find(st, "model.embed_tokens.weight");
    ASSERT_TRUE(emb && emb->dtype == WT_F32 && (int64_t)emb->numel == V * H);
    const float *E = (const float *)emb->data;
    float *rows = calloc((size_t)(NA * H), sizeof *rows);
    eng_seq *s;
    ASSERT_OK(eng_seq_create(A, NA, &s, &err));
    ASSERT_OK(tapped_step(rt, &s, 1, NA, rows, NA, &err));
    /* the last row's logits came out of the same step */
    double worst = 0;
    for (int64_t v = 0; v < V; v++) {
        double d = 0;
        for (int64_t k = 0; k < H; k++)
            d += (double)rows[(NA - 1) * H + k] * (double)E[v * H + k];
        double e = fabs(d - (double)rt->logits[v]);
        if (e > worst) worst = e;
    }
    fprintf(stderr, "  hidden x embed vs logits: max diff %.3g\n", worst);
    double norm = 0;
    for (int64_t k = 0; k < H; k++)
        norm += (double)rows[k] * rows[k];
    eng_seq_free(s, rt->kv);
    free(rows);
    wt_st_close(st);
    eng_runtime_close(rt);
    ASSERT_TRUE(worst < 1e-4);
    ASSERT_TRUE(norm > 1e-3); /* the first row was written too */
}

static void test_hidden_rows_do_not_depend_on_batch_or_chunking(void)
{
    char dir[512];
    kiln_err err;
    eng_runtime *rt = open_model(dir, sizeof dir, &err);
    if (!rt && !test_path_exists(dir)) TEST_SKIP("%s is absent", dir);
    if (!rt) TEST_FAIL_("%s", err.msg);
    int64_t H = mdl_config(rt->model)->hidden;
    size_t ra = (size_t)(NA * H);
    float *alone = calloc(ra, sizeof *alone), *chunked = calloc(ra, sizeof *chunked);
    float *both = calloc((size_t)((NA + NB) * H), sizeof *both);
    eng_seq *s, *t;
    /* alone, one step */
    ASSERT_OK(eng_seq_create(A, NA, &s, &err));
    ASSERT_OK(tapped_step(rt, &s, 1, NA, alone, NA, &err));
    eng_seq_free(s, rt->kv);
    /* alone, chunks of 3 */
    ASSERT_OK(eng_seq_create(A, NA, &s, &err));
    for (int32_t at = 0; at < NA; at += 3)
        ASSERT_OK(tapped_step(rt, &s, 1, 3, chunked + at * H, 3, &err));
    eng_seq_free(s, rt->kv);
    /* beside B, B first */
    ASSERT_OK(eng_seq_create(A, NA, &s, &err));
    ASSERT_OK(eng_seq_create(B, NB, &t, &err));
    eng_seq *pair[2] = {t, s};
    ASSERT_OK(tapped_step(rt, pair, 2, NA, both, NA + NB, &err));
    eng_seq_free(s, rt->kv);
    eng_seq_free(t, rt->kv);
    int same_chunk = !memcmp(alone, chunked, ra * sizeof *alone);
    int same_batch = !memcmp(alone, both + NB * H, ra * sizeof *alone);
    free(alone);
    free(chunked);
    free(both);
    eng_runtime_close(rt);
    ASSERT_TRUE(same_chunk);
    ASSERT_TRUE(same_batch);
}

static void test_hidden_tap_too_small_is_refused_and_off_writes_nothing(void)
{
    char dir[512];
    kiln_err err;
    eng_runtime *rt = open_model(dir, sizeof dir, &err);
    if (!rt && !test_path_exists(dir)) TEST_SKIP("%s is absent", dir);
    if (!rt) TEST_FAIL_("%s", err.msg);
    int64_t H = mdl_config(rt->model)->hidden;
    float *rows = calloc((size_t)(NA * H), sizeof *rows);
    eng_seq *s;
    ASSERT_OK(eng_seq_create(A, NA, &s, &err));
    kiln_code rc = tapped_step(rt, &s, 1, NA, rows, NA - 1, &err);
    eng_seq_free(s, rt->kv);
    ASSERT_OK(eng_seq_create(A, NA, &s, &err));
    eng_step_item it = {.seq = s, .max_tokens = NA};
    ASSERT_OK(eng_step_run(rt->cx, rt->kv, &it, 1, 0, rt->logits, rt->logit_rows, &err));
    eng_seq_free(s, rt->kv);
    int untouched = 1;
    for (size_t i = 0; i < (size_t)(NA * H); i++)
        untouched &= rows[i] == 0.0f;
    free(rows);
    eng_runtime_close(rt);
    ASSERT_EQ_I64(rc, KILN_E_INVALID);
    ASSERT_TRUE(untouched);
}

int main(void)
{
    RUN(test_hidden_rows_times_embeddings_are_the_logits);
    RUN(test_hidden_rows_do_not_depend_on_batch_or_chunking);
    RUN(test_hidden_tap_too_small_is_refused_and_off_writes_nothing);
    return TEST_DONE();
}
