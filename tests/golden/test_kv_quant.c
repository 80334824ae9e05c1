/*
 * test_kv_quant.c — quantized KV end to end on real models: quality against
 * f32 KV (stories260K and an oracle model; thresholds set from measurement
 * with margin, docs/kv.md), batch invariance with quantized KV, prefix-cache
 * hits over quantized blocks, the --quantized-kv-start boundary, `kiln fit`
 * bytes == real pool bytes, and kv_config.json loaded from a model folder.
 * Runs under both kernel variants (ref, and AVX2 when present).
 */
#include "engine/eng_fit.h"
#include "engine/eng_kvq.h"
#include "kernels/kn_cpu.h"
#include "test_model.h"

#include <sys/stat.h>

static const char *isas[] = {"ref", "auto"};

static int stories(char *dir, size_t n)
{
    test_shared_path(dir, n, "models/stories260K");
    return test_path_exists(dir);
}

static eng_runtime *open_kv(const char *dir, const char *isa, kv_quant_mode q, int32_t start,
                            int32_t max_seqs, kiln_err *err)
{
    eng_runtime_opts o = eng_runtime_opts_default();
    o.ctx = 256;
    o.max_seqs = max_seqs;
    o.n_threads = 1;
    o.isa = isa;
    o.block_tokens = 8;
    o.kv_quant = q;
    o.kv_quant_start = start;
    eng_runtime *rt = NULL;
    return eng_runtime_open(dir, &o, &rt, err) == KILN_OK ? rt : NULL;
}

static void quality(const char *dir, const char *isa, eng_kvq_result r[4], kiln_err *err,
                    kiln_code *rc)
{
    eng_runtime_opts base = eng_runtime_opts_default(), c[4];
    base.n_threads = 1;
    base.isa = isa;
    kv_quant_mode m[4] = {KV_QUANT_F16, KV_QUANT_BF16, KV_QUANT_8, KV_QUANT_4};
    for (int i = 0; i < 4; i++) {
        c[i] = base;
        c[i].kv_quant = m[i];
    }
    *rc = eng_kvq_measure(dir, &base, c, 4, 256, r, err);
}

/* Measured (x86-64, both variants): f16 KL 5.7e-7, greedy 256/256; bf16 3.1e-5,
 * 256/256; q8 (g8 = head_dim, Hadamard-rotated) KL mean 2.15e-4 max 3.65e-3,
 * top-1 99.6%, mean max logit error 0.18, greedy 185/256: step 185 is the
 * run's closest tie (f32 top-2 margin 0.0042 logits), which only f16-level
 * error keeps (docs/kv.md); q4 KL mean 0.11, top-1 85.6%. Before rotation:
 * q8 3.3e-4 and 114/256, q4 0.27 and 80% (the bounds below exclude those). */
static void test_stories_quality(void)
{
    char dir[512];
    if (!stories(dir, sizeof dir)) TEST_SKIP("%s is absent", dir);
    for (int v = 0; v < 2; v++) {
        kiln_err err;
        kiln_code rc;
        eng_kvq_result r[4];
        quality(dir, isas[v], r, &err, &rc);
        ASSERT_OK(rc);
        for (int i = 0; i < 4; i++)
            fprintf(stderr,
                    "  %s %-5s KL mean %.3e max %.3e top1 %.4f greedy %d/%d logit err %.3g "
                    "div margin %.3g\n",
                    isas[v], r[i].kv_format, r[i].kl_mean, r[i].kl_max, r[i].top1_agree,
                    (int)r[i].greedy_same, (int)r[i].greedy_len, r[i].logit_err, r[i].div_margin);
        ASSERT_EQ_I64(r[0].positions, 257);
        ASSERT_EQ_I64(r[0].greedy_same, 256); /* f16: identical greedy */
        ASSERT_EQ_I64(r[1].greedy_same, 256); /* bf16: identical greedy */
        ASSERT_TRUE(r[0].kl_mean <= 1e-5 && r[0].kl_max <= 1e-4);
        ASSERT_TRUE(r[1].kl_mean <= 2e-4 && r[1].kl_max <= 2e-3);
        ASSERT_TRUE(r[0].logit_err <= 0.02);
        ASSERT_TRUE(r[0].margin_min > 0.004 && r[0].margin_min < 0.005); /* the near-tie */
        /* 8-bit: identical for the first 180 tokens, and where it differs it only
         * breaks a near-tie (f32 margin under 0.01 logits) */
        ASSERT_TRUE(r[2].greedy_same >= 180);
        ASSERT_TRUE(r[2].greedy_same == 256 || r[2].div_margin < 0.01);
        ASSERT_TRUE(r[2].kl_mean <= 3e-4 && r[2].kl_max <= 6e-3 && r[2].top1_agree >= 0.99);
        ASSERT_TRUE(r[2].logit_err <= 0.25);
        ASSERT_TRUE(r[3].kl_mean <= 0.2 && r[3].top1_agree >= 0.8);
        ASSERT_TRUE(r[3].kl_mean > r[2].kl_mean && r[2].kl_mean > r[1].kl_mean);
    }
}

/* A random-weight oracle model (near-flat distributions: KL is the signal,
 * greedy agreement is not). Measured: q8 KL mean 3.1e-6 max 1.6e-5; q4 mean
 * 9.2e-4 max 4.1e-3 (random weights have no outlier channels for the rotation
 * to spread: it is neutral here, within the estimate's noise). */
static void test_oracle_quality(void)
{
    char dir[512];
    test_shared_path(dir, sizeof dir, "oracle/llama_f32/hf");
    if (!test_path_exists(dir)) TEST_SKIP("%s is absent", dir);
    kiln_err err;
    kiln_code rc;
    eng_kvq_result r[4];
    quality(dir, "auto", r, &err, &rc);
    ASSERT_OK(rc);
    ASSERT_TRUE(r[0].kl_mean <= 1e-6 && r[0].greedy_same == 256);
    ASSERT_TRUE(r[2].kl_mean <= 1e-5 && r[2].kl_max <= 6e-5);
    ASSERT_TRUE(r[3].kl_mean <= 3e-3 && r[3].kl_max <= 1.5e-2);
}

static int32_t *teacher(int32_t n)
{
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    uint64_t x = 7;
    ids[0] = 1;
    for (int32_t i = 1; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = 3 + (int32_t)((x >> 33) % 500);
    }
    return ids;
}

/* One prefill vs chunks of 5 vs token by token: bitwise the same logits. */
static void test_batch_invariance_quantized(void)
{
    char dir[512];
    if (!stories(dir, sizeof dir)) TEST_SKIP("%s is absent", dir);
    const int32_t n = 70;
    int32_t *ids = teacher(n);
    for (int v = 0; v < 2; v++)
        for (int q = 0; q < 3; q++) {
            kiln_err err;
            kv_quant_mode m = q == 0 ? KV_QUANT_8 : KV_QUANT_4;
            eng_runtime *rt = open_kv(dir, isas[v], m, q == 2 ? 20 : 0, 1, &err);
            if (!rt) TEST_FAIL_("%s", err.msg);
            size_t sz = (size_t)n * 512;
            float *a = malloc(sz * 4), *b = malloc(sz * 4), *c = malloc(sz * 4);
            ASSERT_OK(tm_logits(rt, ids, n, 0, a, &err));
            ASSERT_OK(tm_logits(rt, ids, n, 5, b, &err));
            ASSERT_OK(tm_logits(rt, ids, n, 1, c, &err));
            int same = !memcmp(a, b, sz * 4) && !memcmp(a, c, sz * 4);
            eng_runtime_close(rt);
            free(a);
            free(b);
            free(c);
            if (!same)
                TEST_FAIL_("%s %s start %d: chunking changes logits", isas[v], kv_quant_name(m),
                           q == 2 ? 20 : 0);
        }
    free(ids);
}

/* Sequence B shares A's first blocks (zero copy) and its logits equal B's own
 * unshared run bit for bit. */
static void test_prefix_hits_quantized(void)
{
    char dir[512];
    if (!stories(dir, sizeof dir)) TEST_SKIP("%s is absent", dir);
    const int32_t n = 48;
    int32_t *a_ids = teacher(n), *b_ids = teacher(n);
    for (int32_t i = 35; i < n; i++)
        b_ids[i] = 3 + (b_ids[i] + 77) % 500; /* diverges at 35 */
    kv_quant_mode modes[] = {KV_QUANT_8, KV_QUANT_4};
    for (int q = 0; q < 2; q++) {
        kiln_err err;
        eng_runtime *rt = open_kv(dir, "auto", modes[q], q ? 16 : 0, 2, &err);
        if (!rt) TEST_FAIL_("%s", err.msg);
        float *ref = malloc((size_t)n * 512 * 4), *got = malloc((size_t)n * 512 * 4);
        ASSERT_OK(tm_logits(rt, b_ids, n, 0, ref, &err)); /* unshared (own namespace) */
        eng_seq *a, *b;
        ASSERT_OK(eng_seq_create(a_ids, n, &a, &err));
        ASSERT_OK(eng_prefill(rt, a, 0, NULL, &err)); /* publishes A's full blocks */
        ASSERT_OK(eng_seq_create(b_ids, n, &b, &err));
        int32_t hit = eng_seq_attach_prefix(b, rt->kv, rt->ns);
        ASSERT_EQ_I64(hit, 32); /* 4 full blocks of 8 before position 35 */
        for (int32_t j = 0; j < 4; j++)
            ASSERT_EQ_I64(b->blocks[0][j], a->blocks[0][j]);
        ASSERT_TRUE(kv_pool_refcnt(rt->kv, a->blocks[0][0]) == 2);
        ASSERT_OK(eng_prefill(rt, b, 1, got, &err));
        int same = !memcmp(got, ref + (size_t)hit * 512, (size_t)(n - hit) * 512 * 4);
        eng_seq_free(a, rt->kv);
        eng_seq_free(b, rt->kv);
        ASSERT_EQ_I64(kv_pool_check(rt->kv), 0);
        eng_runtime_close(rt);
        free(ref);
        free(got);
        if (!same) TEST_FAIL_("%s: shared-prefix logits differ", kv_quant_name(modes[q]));
    }
    free(a_ids);
    free(b_ids);
}

/* start 20 with 8-token blocks: blocks starting at 0, 8, 16 stay f32, so
 * positions < 24 give exactly the f32 logits and later ones do not. */
static void test_quantized_kv_start_boundary(void)
{
    char dir[512];
    if (!stories(dir, sizeof dir)) TEST_SKIP("%s is absent", dir);
    const int32_t n = 40;
    int32_t *ids = teacher(n);
    kiln_err err;
    eng_runtime *f32 = open_kv(dir, "auto", KV_QUANT_OFF, 0, 1, &err);
    eng_runtime *q = open_kv(dir, "auto", KV_QUANT_4, 20, 1, &err);
    if (!f32 || !q) TEST_FAIL_("%s", err.msg);
    float *a = malloc((size_t)n * 512 * 4), *b = malloc((size_t)n * 512 * 4);
    ASSERT_OK(tm_logits(f32, ids, n, 0, a, &err));
    ASSERT_OK(tm_logits(q, ids, n, 7, b, &err));
    ASSERT_TRUE(!memcmp(a, b, (size_t)24 * 512 * 4));
    int later_differ = 0;
    for (int32_t t = 24; t < n; t++)
        later_differ += memcmp(a + (size_t)t * 512, b + (size_t)t * 512, 512 * 4) != 0;
    ASSERT_TRUE(later_differ >= 15);
    ASSERT_TRUE(q->ns != f32->ns);
    ASSERT_STR_EQ(q->kv_desc, "q4g8@20");
    ASSERT_EQ_I64(kv_pool_get_stats(q->kv).n_blocks_full, 3);
    eng_runtime_close(f32);
    eng_runtime_close(q);
    free(a);
    free(b);
    free(ids);
}

/* `kiln fit` (eng_fit_compute / eng_fit_model) predicts exactly the pool the
 * runtime allocates, for every format, the split, and a kv_config.json. */
static void test_fit_matches_pool(void)
{
    char dir[512], tmp[] = "/tmp/kiln_kvq_XXXXXX", path[700], src[700];
    if (!stories(dir, sizeof dir)) TEST_SKIP("%s is absent", dir);
    ASSERT_TRUE(mkdtemp(tmp) != NULL);
    const char *files[] = {"config.json", "model.safetensors", "tokenizer.json",
                           "tokenizer_config.json", "generation_config.json"};
    for (int i = 0; i < 5; i++) {
        snprintf(src, sizeof src, "%s/%s", dir, files[i]);
        snprintf(path, sizeof path, "%s/%s", tmp, files[i]);
        if (test_path_exists(src)) ASSERT_TRUE(symlink(src, path) == 0);
    }
    snprintf(path, sizeof path, "%s/kv_config.json", tmp);
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    fputs("{\"default\": {\"bits\": 8, \"group_size\": 64},\n"
          " \"layers\": {\"0\": {\"bits\": 4}, \"4\": 16}}\n",
          f);
    fclose(f);
    kv_quant_mode modes[] = {KV_QUANT_OFF, KV_QUANT_F16, KV_QUANT_BF16,  KV_QUANT_8,
                             KV_QUANT_4,   KV_QUANT_4,   KV_QUANT_CONFIG};
    const char *want[] = {"f32", "f16", "bf16", "q8g8", "q4g8", "q4g8@40", "q4g8,q8g8x3,bf16"};
    for (int i = 0; i < 7; i++) {
        kiln_err err;
        eng_runtime_opts o = eng_runtime_opts_default();
        o.ctx = 200;
        o.max_seqs = 3;
        o.n_threads = 1;
        o.kv_quant = modes[i];
        o.kv_quant_start = i == 5 ? 40 : 0;
        eng_fit fit;
        ASSERT_OK(eng_fit_model(tmp, &o, &fit, &err));
        eng_runtime *rt = NULL;
        ASSERT_OK(eng_runtime_open(tmp, &o, &rt, &err));
        kv_pool_stats st = kv_pool_get_stats(rt->kv);
        ASSERT_STR_EQ(rt->kv_desc, want[i]);
        ASSERT_STR_EQ(fit.kv_format, want[i]);
        ASSERT_EQ_U64(fit.kv_pool_bytes, st.bytes);
        ASSERT_EQ_U64(fit.kv_bytes_per_token * (uint64_t)rt->o.block_tokens, st.block_bytes);
        ASSERT_EQ_U64(fit.kv_bytes_per_token_full * (uint64_t)rt->o.block_tokens,
                      i == 5 ? st.block_bytes_full : st.block_bytes);
        ASSERT_EQ_I64(fit.o.n_blocks_full, st.n_blocks_full);
        eng_fit again;
        eng_fit_compute(mdl_config(rt->model), fit.weights_bytes, &rt->o, &again);
        ASSERT_EQ_U64(again.kv_pool_bytes, st.bytes);
        ASSERT_EQ_U64(again.total_bytes, fit.total_bytes);
        eng_runtime_close(rt);
    }
    /* a bad kv_config.json refuses to start with the file named */
    f = fopen(path, "w");
    fputs("{\"layers\": {\"9\": 4}}", f);
    fclose(f);
    kiln_err err;
    eng_runtime_opts o = eng_runtime_opts_default();
    o.kv_quant = KV_QUANT_CONFIG;
    eng_runtime *rt = NULL;
    ASSERT_CODE(eng_runtime_open(tmp, &o, &rt, &err), KILN_E_INVALID);
    ASSERT_TRUE(strstr(err.msg, "kv_config.json") != NULL);
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/%s", tmp, files[i]);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/kv_config.json", tmp);
    unlink(path);
    rmdir(tmp);
}

int main(void)
{
    RUN(test_stories_quality);
    RUN(test_oracle_quality);
    RUN(test_batch_invariance_quantized);
    RUN(test_prefix_hits_quantized);
    RUN(test_quantized_kv_start_boundary);
    RUN(test_fit_matches_pool);
    return TEST_DONE();
}
