/*
 * test_stories260k.c — a real trained model (../shared/models/stories260K):
 * greedy from [1] reproduces reference.greedy.json's ids exactly and its first
 * logits within 1e-4; and the two emulated MLX conversions
 * (../shared/vectors/mlx-quant/emulated) reproduce their teacher-forced
 * logits within 1e-3 and their greedy ids.
 */
#include <string.h>

#include "kernels/kn_cpu.h"
#include "test_model.h"
#include "weights/wt_safetensors.h"

static int32_t greedy(eng_runtime *rt, const int32_t *prompt, int32_t n, const int32_t *want,
                      int32_t n_want, const json_t *stop, float *first_logits, kiln_err *err)
{
    int64_t vocab = mdl_vocab(rt->model);
    eng_seq *s;
    if (eng_seq_create(prompt, n, &s, err)) return 0;
    int32_t i = 0;
    for (; i < n_want; i++) {
        eng_step_item it = {.seq = s, .max_tokens = 64};
        if (eng_step_run(rt->cx, rt->kv, &it, 1, rt->ns, rt->logits, rt->logit_rows, err)) break;
        if (i == 0 && first_logits) memcpy(first_logits, rt->logits, sizeof(float) * (size_t)vocab);
        int32_t t = tm_argmax(rt->logits, vocab);
        if (t != want[i]) break;
        eng_seq_append(s, t, err);
    }
    eng_seq_free(s, rt->kv);
    (void)stop;
    return i;
}

static void test_stories260k_greedy_matches_reference(void)
{
    char dir[512], path[600];
    test_shared_path(dir, sizeof dir, "models/stories260K");
    if (!test_path_exists(dir)) TEST_SKIP("%s is absent", dir);
    snprintf(path, sizeof path, "%s/reference.greedy.json", dir);
    json_t *ref = json_load_file(path, 0, NULL);
    ASSERT_TRUE(ref != NULL);
    int32_t np, nw;
    int32_t *prompt = tm_json_ids(json_object_get(ref, "prompt_ids"), &np);
    int32_t *want = tm_json_ids(json_object_get(ref, "tokens"), &nw);
    kiln_err err;
    eng_runtime *rt = tm_open(dir, 512, 1, 1, NULL, &err);
    if (!rt) TEST_FAIL_("%s", err.msg);
    float first[512];
    int32_t got = greedy(rt, prompt, np, want, nw, json_object_get(ref, "stop"), first, &err);
    json_t *fl = json_object_get(ref, "first_logits");
    double d = 0;
    for (size_t i = 0; i < json_array_size(fl); i++) {
        double x = fabs(json_real_value(json_array_get(fl, i)) - first[i]);
        if (x > d) d = x;
    }
    fprintf(stderr, "  stories260K: %d/%d greedy ids match, first logits max diff %.3g\n",
            (int)got, (int)nw, d);
    eng_runtime_close(rt);
    free(prompt);
    free(want);
    json_decref(ref);
    ASSERT_EQ_I64(got, nw);
    ASSERT_TRUE(d <= 1e-4);
}

static void check_emulated(const char *name)
{
    char rel[256], dir[512], path[600];
    snprintf(rel, sizeof rel, "vectors/mlx-quant/emulated/%s", name);
    test_shared_path(dir, sizeof dir, rel);
    if (!test_path_exists(dir)) TEST_SKIP("%s is absent", dir);
    kiln_err err;
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    wt_st *st;
    if (wt_st_open(path, &st, &err)) TEST_FAIL_("%s", err.msg);
    const wt_tensor *tt = wt_st_find(st, "teacher_forced_tokens");
    const wt_tensor *tl = wt_st_find(st, "teacher_forced_logits");
    ASSERT_TRUE(tt && tl && tt->dtype == WT_I32 && tl->dtype == WT_F32);
    int32_t n = (int32_t)tt->numel;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    memcpy(ids, tt->data, sizeof(int32_t) * (size_t)n);
    eng_runtime *rt = tm_open_mode(dir, 512, 1, 1, NULL, "exact", &err);
    if (!rt) TEST_FAIL_("%s: %s", name, err.msg);
    int64_t vocab = mdl_vocab(rt->model);
    size_t cnt = (size_t)n * (size_t)vocab;
    float *rows = malloc(sizeof(float) * cnt);
    ASSERT_OK(tm_logits(rt, ids, n, 0, rows, &err));
    double d = tm_max_abs_diff(rows, tl->data, cnt);
    snprintf(path, sizeof path, "%s/reference.json", dir);
    json_t *ref = json_load_file(path, 0, NULL);
    int32_t np, nw;
    int32_t *prompt = tm_json_ids(json_object_get(ref, "prompt_ids"), &np);
    int32_t *want = tm_json_ids(json_object_get(ref, "greedy_tokens"), &nw);
    int32_t got = greedy(rt, prompt, np, want, nw, NULL, NULL, &err);
    /* (after the exact runs: the kernel mode is process-wide) the default mode (int8 for 4-bit): within its documented distance of the
     * reference (docs/kernels.md: 0.25 measured on the 4-bit snapshot), and
     * the same bits whole, in chunks of 5 and at 2 threads */
    eng_runtime *r8 = tm_open(dir, 512, 1, 1, NULL, &err), *r82 = tm_open(dir, 512, 1, 2, NULL, &err);
    ASSERT_TRUE(r8 && r82);
    float *a = malloc(sizeof(float) * cnt), *b = malloc(sizeof(float) * cnt);
    ASSERT_OK(tm_logits(r8, ids, n, 0, a, &err));
    ASSERT_OK(tm_logits(r82, ids, n, 5, b, &err));
    double d8 = tm_max_abs_diff(a, tl->data, cnt);
    fprintf(stderr, "  %s: default mode %s: max diff %.3g, chunked/2 threads %s\n", name,
            kn_matmul_mode(), d8, memcmp(a, b, sizeof(float) * cnt) ? "DIFFER" : "bitwise equal");
    ASSERT_TRUE(memcmp(a, b, sizeof(float) * cnt) == 0);
    ASSERT_TRUE(d8 <= 1.0);
    free(a);
    free(b);
    eng_runtime_close(r8);
    eng_runtime_close(r82);
    fprintf(stderr, "  %s: teacher-forced max diff %.3g, %d/%d greedy ids match\n", name, d,
            (int)got, (int)nw);
    free(prompt);
    free(want);
    json_decref(ref);
    free(rows);
    free(ids);
    eng_runtime_close(rt);
    wt_st_close(st);
    ASSERT_TRUE(d <= 1e-3);
    ASSERT_EQ_I64(got, nw);
}

static void test_mlx_bf16_4bit_matches_reference(void)
{
    check_emulated("stories260K-mlx-bf16-4bit");
}

static void test_mlx_f16_mixed_3_6_matches_reference(void)
{
    check_emulated("stories260K-mlx-f16-mixed_3_6-g32");
}

int main(void)
{
    RUN(test_stories260k_greedy_matches_reference);
    RUN(test_mlx_bf16_4bit_matches_reference);
    RUN(test_mlx_f16_mixed_3_6_matches_reference);
    return TEST_DONE();
}
