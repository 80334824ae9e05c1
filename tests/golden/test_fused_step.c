/*
 * test_fused_step.c — the fused step (q/k/v as one pool job, attention with
 * its norms/RoPE/K-V stores and gate, gate/up with the activation, residual
 * adds inside the producing job; at ≤ 16 tokens with KV heads a multiple of
 * the threads, q/k/v and attention as one job per KV head — chunks of 7 and
 * token by token take that path, the whole prompt and 3 threads on stories'
 * 4 KV heads the other; mdl_ctx_set_fused) gives the same logits,
 * bit for bit, as one pool job per op, on every model family the fixtures
 * have (Llama bf16, MLX 4-bit and mixed 3/6-bit, Qwen2 biases, Gemma 3
 * post-norms and GELU, Gemma 4 KV-shared layers and MoE, Qwen3.5 gated
 * attention and DeltaNet), for both kernel variants, 1–3 threads, a whole
 * prompt in one step, in chunks of 7, and token by token (decode).
 */
#include "test_model.h"

static const char *models[] = {
    "models/stories260K",
    "vectors/mlx-quant/emulated/stories260K-mlx-bf16-4bit",
    "vectors/mlx-quant/emulated/stories260K-mlx-f16-mixed_3_6-g32",
    "oracle/qwen2_f32/hf",
    "oracle/gemma3_f32/hf",
    "oracle-next/gemma4_e4b_like_f32/hf",
    "oracle-next/gemma4_moe_like_bf16/hf",
    "oracle-next/qwen3_5_like_bf16/hf",
};

#define N_TOK 37

/* *rows: new [N_TOK, vocab] logits (the caller frees); NULL on failure. */
static void run(const char *dir, const char *isa, int threads, int fused, int32_t chunk,
                const int32_t *ids, int64_t *vocab, float **rows)
{
    kiln_err err;
    *rows = NULL;
    eng_runtime *rt = tm_open(dir, 64, 1, threads, isa, &err);
    if (!rt) TEST_FAIL_("%s: %s", dir, err.msg);
    mdl_ctx_set_fused(rt->cx, fused);
    *vocab = mdl_vocab(rt->model);
    float *r = malloc(sizeof(float) * (size_t)N_TOK * (size_t)*vocab);
    kiln_code rc = r ? tm_logits(rt, ids, N_TOK, chunk, r, &err) : KILN_E_NOMEM;
    eng_runtime_close(rt);
    if (rc) {
        const char *why = r ? err.msg : "out of memory";
        free(r);
        TEST_FAIL_("%s: %s", dir, why);
    }
    *rows = r;
}

/* (variant, threads, chunk): every variant sees both attention paths (the
 * per-KV-head job at ≤ 16 tokens when the threads divide the KV heads, the
 * q/k/v job + per-(sequence, head) job otherwise); ref is slow, so fewer. */
static const struct {
    const char *isa;
    int threads;
    int32_t chunk;
} configs[] = {{"ref", 1, 0},  {"ref", 2, 1},  {"ref", 3, 7},  {"auto", 1, 7}, {"auto", 2, 0},
               {"auto", 2, 7}, {"auto", 2, 1}, {"auto", 3, 0}, {"auto", 3, 1}};

static void test_fused_equals_unfused(void)
{
    int seen = 0;
    for (size_t m = 0; m < sizeof models / sizeof *models; m++) {
        char dir[512];
        test_shared_path(dir, sizeof dir, models[m]);
        if (!test_path_exists(dir)) continue;
        seen++;
        for (size_t c = 0; c < sizeof configs / sizeof *configs; c++) {
            const char *isa = configs[c].isa;
            int threads = configs[c].threads;
            int32_t chunk = configs[c].chunk;
            int32_t ids[N_TOK];
            int64_t vocab = 0;
            for (int i = 0; i < N_TOK; i++)
                ids[i] = (int32_t)((i * 7919 + 3) % 256);
            float *a, *b;
            run(dir, isa, threads, 0, chunk, ids, &vocab, &a);
            run(dir, isa, threads, 1, chunk, ids, &vocab, &b);
            if (!a || !b) {
                free(a);
                free(b);
                return;
            }
            size_t n = (size_t)N_TOK * (size_t)vocab, diff = 0, varied = 0;
            for (size_t i = 0; i < n; i++)
                diff += memcmp(&a[i], &b[i], sizeof(float)) != 0;
            /* the logits are real: finite and not all equal */
            for (size_t i = 0; i < n; i++)
                varied += a[i] == a[i] && a[i] - a[i] == 0 && a[i] != a[0];
            free(a);
            free(b);
            if (diff || varied < n / 2)
                TEST_FAIL_("%s %s threads %d chunk %d: %zu of %zu logits differ (%zu finite, "
                           "varied)",
                           models[m], isa, threads, (int)chunk, diff, n, varied);
        }
    }
    if (!seen) TEST_SKIP("no model fixtures under the shared folder");
    fprintf(stderr, "  %d model fixtures: fused == unfused bitwise\n", seen);
}

int main(void)
{
    RUN(test_fused_equals_unfused);
    return TEST_DONE();
}
