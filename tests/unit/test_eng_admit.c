/*
 * test_eng_admit.c — the --memory-budget plan: exact fit, one byte short,
 * model alone over the budget, the pool capped at batch x ctx, every counted
 * byte inside the budget; KILN_CONTEXT_LIMIT narrowing and parsing; KV
 * projections; the fit report JSON (stories260K's config and headers).
 */
#include <jansson.h>

#include "engine/eng_admit.h"
#include "engine/eng_fit_report.h"
#include "test.h"
#include "weights/wt_set.h"

static wt_config cfg;
static uint64_t weights;
static int loaded;

static int load(void)
{
    if (loaded) return 1;
    char dir[512];
    test_shared_path(dir, sizeof dir, "models/stories260K");
    if (!test_path_exists(dir)) return 0;
    kiln_err err;
    wt_set *ws;
    if (wt_config_load(dir, &cfg, &err) || wt_set_open(dir, &ws, &err)) return 0;
    weights = wt_set_bytes(ws);
    wt_set_close(ws);
    loaded = 1;
    return 1;
}

static eng_runtime_opts opts(int32_t ctx, int32_t batch)
{
    eng_runtime_opts o = eng_runtime_opts_default();
    o.ctx = ctx;
    o.max_seqs = batch;
    o.n_threads = 2;
    return o;
}

/* A plan with a budget large enough for anything: its fixed part and block cost. */
static eng_admit_plan generous(int32_t ctx, int32_t batch, uint64_t overhead)
{
    eng_admit_in in = eng_admit_in_default();
    in.budget_bytes = (uint64_t)1 << 40;
    in.overhead_bytes = overhead;
    in.ctx_explicit = 1;
    eng_runtime_opts o = opts(ctx, batch);
    eng_admit_plan p;
    kiln_err err;
    if (eng_admit_compute(&cfg, weights, &o, &in, &p, &err)) memset(&p, 0, sizeof p);
    return p;
}

static void test_no_budget_keeps_the_runtime_defaults(void)
{
    if (!load()) TEST_SKIP("stories260K absent");
    eng_admit_in in = eng_admit_in_default();
    eng_runtime_opts o = opts(0, 4);
    eng_admit_plan p;
    kiln_err err;
    ASSERT_OK(eng_admit_compute(&cfg, weights, &o, &in, &p, &err));
    ASSERT_EQ_I64(p.ctx, 512); /* stories260K: max_position_embeddings 512 */
    ASSERT_EQ_I64(p.n_blocks, (512 / 16 + 1) * 4);
    ASSERT_EQ_I64(p.enforced_context, 0); /* nothing explicit: never refused on an estimate */
    ASSERT_EQ_I64(p.source, ENG_LIMIT_MODEL);
    ASSERT_EQ_U64(p.usable_bytes, 0);
    o = opts(300, 4);
    in.ctx_explicit = 1;
    ASSERT_OK(eng_admit_compute(&cfg, weights, &o, &in, &p, &err));
    ASSERT_EQ_I64(p.enforced_context, 300);
    ASSERT_EQ_I64(p.source, ENG_LIMIT_CTX);
}

static void test_budget_that_exactly_fits_a_context(void)
{
    if (!load()) TEST_SKIP("stories260K absent");
    eng_admit_plan g = generous(256, 4, 1000000);
    ASSERT_TRUE(g.block_bytes > 0);
    ASSERT_EQ_I64(g.n_blocks, (256 / 16 + 1) * 4); /* generous: capped at batch x ctx */
    eng_admit_in in = eng_admit_in_default();
    in.overhead_bytes = 1000000;
    in.ctx_explicit = 1;
    in.budget_bytes = g.fixed_bytes + 16 * g.block_bytes; /* one sequence of 256 tokens, exactly */
    eng_runtime_opts o = opts(256, 4);
    eng_admit_plan p;
    kiln_err err;
    ASSERT_OK(eng_admit_compute(&cfg, weights, &o, &in, &p, &err));
    ASSERT_EQ_I64(p.max_safe_context, 256);
    ASSERT_EQ_I64(p.ctx, 256);
    ASSERT_EQ_I64(p.n_blocks, 16);
    ASSERT_EQ_U64(p.usable_bytes, 16 * g.block_bytes);
    ASSERT_EQ_I64(p.source, ENG_LIMIT_CTX); /* the budget did not narrow anything */
    ASSERT_EQ_I64(p.enforced_context, 256);
    /* one byte less: the last block no longer fits, the context shrinks */
    in.budget_bytes--;
    ASSERT_OK(eng_admit_compute(&cfg, weights, &o, &in, &p, &err));
    ASSERT_TRUE(p.max_safe_context < 256 && p.max_safe_context >= 240);
    ASSERT_EQ_I64(p.source, ENG_LIMIT_BUDGET);
    ASSERT_TRUE((int64_t)p.n_blocks * 16 >= p.max_safe_context);
    ASSERT_TRUE(p.fixed_bytes + (uint64_t)p.n_blocks * p.block_bytes <= in.budget_bytes);
}

static void test_every_counted_byte_is_inside_the_budget(void)
{
    if (!load()) TEST_SKIP("stories260K absent");
    for (uint64_t b = 5000000; b < 13000000; b += 777777) {
        eng_admit_in in = eng_admit_in_default();
        in.budget_bytes = b;
        in.overhead_bytes = 2000000;
        eng_runtime_opts o = opts(0, 8);
        eng_admit_plan p;
        kiln_err err;
        ASSERT_OK(eng_admit_compute(&cfg, weights, &o, &in, &p, &err));
        ASSERT_TRUE(p.fit.total_bytes + p.overhead_bytes <= b);
        ASSERT_EQ_I64(p.fit.o.n_blocks, p.n_blocks);
        ASSERT_EQ_I64(p.fit.o.ctx, p.ctx);
        ASSERT_TRUE((int64_t)p.n_blocks * 16 >= p.ctx);  /* one full sequence fits */
        ASSERT_TRUE(p.n_blocks <= (p.ctx / 16 + 2) * 8); /* never more than batch x ctx */
    }
}

/* --quantized-kv-start with a budget: the pool holds f32 blocks beside the
 * quantized ones, and the plan must count them at their own size. (It used to
 * count every block at the quantized size: with start 128 the pool came out
 * at 2x what the budget left for it.) For every budget the whole plan stays
 * inside it, one sequence of the planned context fits in each class, and the
 * context is the largest that does (16 tokens more does not fit). */
static void test_quantized_kv_start_plan_stays_inside_the_budget(void)
{
    if (!load()) TEST_SKIP("stories260K absent");
    for (int32_t start = 32; start <= 512; start *= 4) {
        for (uint64_t b = 3000000; b < 9000000; b += 555555) {
            eng_admit_in in = eng_admit_in_default();
            in.budget_bytes = b;
            in.overhead_bytes = 2000000;
            eng_runtime_opts o = opts(0, 2);
            o.kv_quant = KV_QUANT_4;
            o.kv_quant_start = start;
            eng_admit_plan p;
            kiln_err err;
            kiln_code rc = eng_admit_compute(&cfg, weights, &o, &in, &p, &err);
            if (rc == KILN_E_BUDGET) continue; /* too small for any context */
            ASSERT_OK(rc);
            ASSERT_TRUE(p.fit.total_bytes + p.overhead_bytes <= b);
            ASSERT_TRUE(p.fit.kv_bytes_per_token_full > p.fit.kv_bytes_per_token);
            int32_t need = (p.ctx + 15) / 16, need_full = (start + 15) / 16;
            if (need_full > need) need_full = need;
            ASSERT_TRUE(p.fit.o.n_blocks_full >= need_full);
            ASSERT_TRUE(p.n_blocks - p.fit.o.n_blocks_full >= need - need_full);
            if (p.source == ENG_LIMIT_BUDGET) { /* the budget narrowed it: 16 more do not fit */
                eng_runtime_opts o2 = o;
                o2.ctx = p.ctx + 16;
                o2.n_blocks = need + 1;
                eng_fit f;
                eng_fit_compute(&cfg, weights, &o2, &f);
                ASSERT_TRUE(f.total_bytes + in.overhead_bytes > b);
            }
        }
    }
}

static void test_model_alone_over_the_budget_is_refused_with_numbers(void)
{
    if (!load()) TEST_SKIP("stories260K absent");
    eng_admit_in in = eng_admit_in_default();
    in.budget_bytes = weights; /* the weights fit, nothing else does */
    eng_runtime_opts o = opts(0, 1);
    eng_admit_plan p;
    kiln_err err;
    ASSERT_EQ_I64(eng_admit_compute(&cfg, weights, &o, &in, &p, &err), KILN_E_BUDGET);
    ASSERT_TRUE(strstr(err.msg, "leaves no room for any context") != NULL);
    ASSERT_TRUE(strstr(err.msg, "weights 0.001 GB") != NULL);
}

static void test_context_limit_env_narrows_never_enlarges(void)
{
    if (!load()) TEST_SKIP("stories260K absent");
    eng_admit_plan g = generous(512, 2, 0);
    eng_admit_in in = eng_admit_in_default();
    in.budget_bytes = g.fixed_bytes + 20 * g.block_bytes;
    in.env_limit = 100;
    eng_runtime_opts o = opts(0, 2);
    eng_admit_plan p;
    kiln_err err;
    ASSERT_OK(eng_admit_compute(&cfg, weights, &o, &in, &p, &err));
    ASSERT_EQ_I64(p.ctx, 100);
    ASSERT_EQ_I64(p.enforced_context, 100);
    ASSERT_EQ_I64(p.source, ENG_LIMIT_ENV);
    ASSERT_TRUE(p.max_safe_context > 100);
    int32_t safe = p.max_safe_context;
    in.env_limit = 100000;
    ASSERT_OK(eng_admit_compute(&cfg, weights, &o, &in, &p, &err));
    ASSERT_EQ_I64(p.ctx, safe);
    ASSERT_EQ_I64(p.source, ENG_LIMIT_BUDGET);
    /* without a budget the env limit alone narrows the default context */
    in = eng_admit_in_default();
    in.env_limit = 64;
    ASSERT_OK(eng_admit_compute(&cfg, weights, &o, &in, &p, &err));
    ASSERT_EQ_I64(p.ctx, 64);
    ASSERT_EQ_I64(p.enforced_context, 64);
    ASSERT_EQ_I64(p.n_blocks, (64 / 16 + 1) * 2);
}

static void test_parse_context_limit(void)
{
    int32_t v = -1;
    kiln_err err;
    ASSERT_OK(eng_admit_parse_limit(NULL, &v, &err));
    ASSERT_EQ_I64(v, 0);
    ASSERT_OK(eng_admit_parse_limit("", &v, &err));
    ASSERT_EQ_I64(v, 0);
    ASSERT_OK(eng_admit_parse_limit("4096", &v, &err));
    ASSERT_EQ_I64(v, 4096);
    const char *bad[] = {"0", "1", "-5", "abc", "12x", " 5", "+5", "99999999999", "1e3"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ASSERT_EQ_I64(eng_admit_parse_limit(bad[i], &v, &err), KILN_E_INVALID);
        ASSERT_TRUE(strstr(err.msg, "KILN_CONTEXT_LIMIT") != NULL);
    }
}

static void test_seq_projection_and_overhead(void)
{
    ASSERT_EQ_U64(eng_admit_seq_kv_bytes(6144, 128), 786432);
    ASSERT_EQ_U64(eng_admit_seq_kv_bytes(6144, 0), 0);
    /* --quantized-kv-start 32 at 16 tokens a block: 32 positions at f32 */
    ASSERT_EQ_U64(eng_admit_seq_kv_bytes_split(640, 2048, 32, 100), 32 * 2048 + 68 * 640);
    ASSERT_EQ_U64(eng_admit_seq_kv_bytes_split(640, 2048, 32, 20), 20 * 2048);
    ASSERT_EQ_U64(eng_admit_seq_kv_bytes_split(640, 2048, 0, 100), 100 * 640);
    ASSERT_EQ_U64(eng_admit_seq_kv_bytes_split(640, 2048, 32, 0), 0);
    ASSERT_EQ_U64(eng_admit_overhead_bytes(1000, 100, 0, 2),
                  (16u << 20) + 10000 + 400 + (2u << 20));
}

static void test_fit_report_json_has_the_plan(void)
{
    if (!load()) TEST_SKIP("stories260K absent");
    eng_admit_plan g = generous(256, 2, 5000);
    char *js = eng_fit_report_json(&g.fit, &g, 0);
    ASSERT_TRUE(js != NULL);
    json_error_t je;
    json_t *j = json_loads(js, 0, &je);
    free(js);
    ASSERT_TRUE(j != NULL);
    ASSERT_EQ_I64(json_integer_value(json_object_get(j, "ctx")), 256);
    ASSERT_EQ_I64(json_integer_value(json_object_get(j, "kv_blocks")), g.n_blocks);
    ASSERT_EQ_I64(json_integer_value(json_object_get(j, "max_safe_context")), 256);
    ASSERT_EQ_I64(json_integer_value(json_object_get(j, "overhead_bytes")), 5000);
    ASSERT_TRUE(json_is_null(json_object_get(j, "bandwidth_gb_s")));
    ASSERT_TRUE(json_is_null(json_object_get(j, "predicted_decode_tok_s")));
    ASSERT_STR_EQ(json_string_value(json_object_get(j, "context_limit_source")), "ctx");
    json_decref(j);
    js = eng_fit_report_json(&g.fit, NULL, 10.0);
    j = json_loads(js, 0, &je);
    free(js);
    ASSERT_TRUE(j != NULL);
    ASSERT_NEAR_F32(json_real_value(json_object_get(j, "bandwidth_gb_s")), 10.0, 1e-9);
    ASSERT_TRUE(json_object_get(j, "max_safe_context") == NULL);
    json_decref(j);
}

int main(void)
{
    RUN(test_no_budget_keeps_the_runtime_defaults);
    RUN(test_budget_that_exactly_fits_a_context);
    RUN(test_every_counted_byte_is_inside_the_budget);
    RUN(test_model_alone_over_the_budget_is_refused_with_numbers);
    RUN(test_quantized_kv_start_plan_stays_inside_the_budget);
    RUN(test_context_limit_env_narrows_never_enlarges);
    RUN(test_parse_context_limit);
    RUN(test_seq_projection_and_overhead);
    RUN(test_fit_report_json_has_the_plan);
    if (loaded) wt_config_free(&cfg);
    return TEST_DONE();
}
