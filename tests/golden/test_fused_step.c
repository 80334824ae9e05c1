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
 *
 * The Gemma fixtures (Gemma 3 post-norms; Gemma 4 e4b-like: per-layer inputs,
 * KV-shared layers, sliding windows; Gemma 4 MoE: router, top-k experts and
 * the dense branch) also run as a ragged batch of three sequences — a step of
 * two prompts (16 tokens: the MoE's one-batch path), a step of two decodes
 * and a 19-token prompt (over 16: expert by expert, the unfused per-layer
 * inputs), then decode steps of three rows — at 1 and 2 threads: fused ==
 * unfused bit for bit, and each sequence's rows == that sequence run alone
 * (fused). And a single-sequence decode step of the fused step issues at most
 * 6 pool jobs per layer (+2), fewer than the unfused one (2 threads).
 */
#include "kernels/kn_pool.h"
#include "model/mdl_plan.h"
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

/* ---------------------------------------------------------------- batches */

static const char *gemma_models[] = {
    "oracle/gemma3_f32/hf",
    "oracle-next/gemma4_e4b_like_f32/hf",
    "oracle-next/gemma4_moe_like_bf16/hf",
};

#define B_SEQS 3
#define B_DECODE 6
static const int32_t b_prompt[B_SEQS] = {11, 5, 19};

static int32_t b_token(int seq, int i)
{
    return (int32_t)((i * 7919 + seq * 104729 + 11) % 251 + 1);
}

/* Rows per sequence in its own order: the prompt's positions, then one per
 * decode step (sequence 2 starts a step later). */
#define B_ROWS(q) (b_prompt[q] + B_DECODE - ((q) == 2))

/* Runs the schedule above (alone < 0: all three sequences in each step;
 * else only sequence `alone`, with the same tokens per step) and writes
 * sequence q's logits rows into out[q] ([B_ROWS(q), vocab]). */
static kiln_code run_batch(eng_runtime *rt, int alone, float **out, kiln_err *err)
{
    int64_t vocab = mdl_vocab(rt->model);
    eng_seq *sq[B_SEQS] = {0};
    int32_t done[B_SEQS] = {0};
    kiln_code rc = KILN_OK;
    for (int q = 0; q < B_SEQS && !rc; q++) {
        int32_t ids[32];
        for (int i = 0; i < b_prompt[q]; i++)
            ids[i] = b_token(q, i);
        rc = eng_seq_create(ids, b_prompt[q], &sq[q], err);
    }
    /* step 0: prompts 0 and 1; step 1: decodes of 0 and 1 + prompt 2; then
     * decodes of all three */
    for (int step = 0; !rc && step < B_DECODE + 1; step++) {
        eng_step_item it[B_SEQS];
        int who[B_SEQS], n = 0;
        for (int q = 0; q < B_SEQS && !rc; q++) {
            if (step == 0 && q == 2) continue;
            if (alone >= 0 && q != alone) continue;
            if (step > 0 && !(step == 1 && q == 2))
                rc = eng_seq_append(sq[q], b_token(q, 100 + step), err);
            it[n] = (eng_step_item){.seq = sq[q], .max_tokens = 32, .all_logits = 1};
            who[n++] = q;
        }
        if (rc || n == 0) continue;
        rc = eng_step_run(rt->cx, rt->kv, it, n, 0, rt->logits, rt->logit_rows, err);
        const float *row = rt->logits;
        for (int i = 0; !rc && i < n; i++) {
            int q = who[i];
            if (done[q] + it[i].n_logits > B_ROWS(q)) {
                rc = kiln_fail(err, KILN_E_INTERNAL, "sequence %d: too many rows", q);
                break;
            }
            memcpy(out[q] + (size_t)done[q] * (size_t)vocab, row,
                   sizeof(float) * (size_t)vocab * (size_t)it[i].n_logits);
            done[q] += it[i].n_logits;
            row += (size_t)vocab * (size_t)it[i].n_logits;
        }
    }
    for (int q = 0; q < B_SEQS; q++) {
        if (!rc && (alone < 0 || q == alone) && done[q] != B_ROWS(q))
            rc = kiln_fail(err, KILN_E_INTERNAL, "sequence %d: %d rows, expected %d", q,
                           (int)done[q], (int)B_ROWS(q));
        eng_seq_free(sq[q], rt->kv);
    }
    return rc;
}

static size_t count_diff(const float *a, const float *b, size_t n)
{
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

static void test_gemma_batch_fused_equals_unfused_and_alone(void)
{
    int seen = 0;
    for (size_t m = 0; m < sizeof gemma_models / sizeof *gemma_models; m++) {
        char dir[512];
        test_shared_path(dir, sizeof dir, gemma_models[m]);
        if (!test_path_exists(dir)) continue;
        seen++;
        for (int threads = 1; threads <= 2; threads++) {
            kiln_err err;
            eng_runtime *rt = tm_open(dir, 64, B_SEQS, threads, "auto", &err);
            if (!rt) TEST_FAIL_("%s: %s", dir, err.msg);
            size_t vocab = (size_t)mdl_vocab(rt->model);
            float *res[3][B_SEQS] = {{0}}; /* unfused batch, fused batch, fused alone */
            int ok = 1;
            for (int r = 0; r < 3; r++)
                for (int q = 0; q < B_SEQS; q++)
                    ok &= (res[r][q] = calloc((size_t)B_ROWS(q) * vocab, sizeof(float))) != NULL;
            kiln_code rc = ok ? KILN_OK : kiln_fail(&err, KILN_E_NOMEM, "out of memory");
            if (!rc) {
                mdl_ctx_set_fused(rt->cx, 0);
                rc = run_batch(rt, -1, res[0], &err);
            }
            mdl_ctx_set_fused(rt->cx, 1);
            if (!rc) rc = run_batch(rt, -1, res[1], &err);
            for (int q = 0; q < B_SEQS && !rc; q++)
                rc = run_batch(rt, q, res[2], &err);
            eng_runtime_close(rt);
            size_t d_fused = 0, d_alone = 0, n = 0, varied = 0;
            for (int q = 0; q < B_SEQS && !rc; q++) {
                size_t nq = (size_t)B_ROWS(q) * vocab;
                d_fused += count_diff(res[0][q], res[1][q], nq);
                d_alone += count_diff(res[1][q], res[2][q], nq);
                for (size_t i = 0; i < nq; i++)
                    varied += res[1][q][i] - res[1][q][i] == 0 && res[1][q][i] != res[1][q][0];
                n += nq;
            }
            for (int r = 0; r < 3; r++)
                for (int q = 0; q < B_SEQS; q++)
                    free(res[r][q]);
            if (rc) TEST_FAIL_("%s threads %d: %s", gemma_models[m], threads, err.msg);
            if (d_fused || d_alone || varied < n / 2)
                TEST_FAIL_("%s threads %d: of %zu logits, %zu differ fused vs unfused, %zu batch "
                           "vs alone (%zu finite, varied)",
                           gemma_models[m], threads, n, d_fused, d_alone, varied);
        }
    }
    if (!seen) TEST_SKIP("no Gemma fixtures under the shared folder");
    fprintf(stderr, "  %d Gemma fixtures: batched fused == unfused == alone bitwise\n", seen);
}

/* Pool jobs of one single-sequence decode step (2 threads), fused and not. */
static void test_gemma_decode_jobs(void)
{
    int seen = 0;
    for (size_t m = 0; m < sizeof gemma_models / sizeof *gemma_models; m++) {
        char dir[512];
        test_shared_path(dir, sizeof dir, gemma_models[m]);
        if (!test_path_exists(dir)) continue;
        seen++;
        kiln_err err;
        eng_runtime *rt = tm_open(dir, 64, 1, 2, "auto", &err);
        if (!rt) TEST_FAIL_("%s: %s", dir, err.msg);
        int64_t L = mdl_get_plan(rt->model)->n_layers;
        uint64_t jobs[2] = {0, 0};
        kiln_code rc = KILN_OK;
        for (int fused = 0; fused < 2 && !rc; fused++) {
            int32_t ids[9];
            for (int i = 0; i < 9; i++)
                ids[i] = b_token(0, i);
            eng_seq *sq = NULL;
            mdl_ctx_set_fused(rt->cx, fused);
            rc = eng_seq_create(ids, 8, &sq, &err);
            eng_step_item it = {.seq = sq, .max_tokens = 8};
            if (!rc) rc = eng_step_run(rt->cx, rt->kv, &it, 1, 0, rt->logits, 1, &err);
            if (!rc) rc = eng_seq_append(sq, ids[8], &err);
            uint64_t j0 = kn_pool_jobs(rt->pool);
            it = (eng_step_item){.seq = sq, .max_tokens = 1};
            if (!rc) rc = eng_step_run(rt->cx, rt->kv, &it, 1, 0, rt->logits, 1, &err);
            jobs[fused] = kn_pool_jobs(rt->pool) - j0;
            eng_seq_free(sq, rt->kv);
        }
        eng_runtime_close(rt);
        if (rc) TEST_FAIL_("%s: %s", gemma_models[m], err.msg);
        fprintf(stderr, "  %s: %d layers, %llu -> %llu pool jobs per decoded token\n",
                gemma_models[m], (int)L, (unsigned long long)jobs[0], (unsigned long long)jobs[1]);
        ASSERT_TRUE(jobs[1] < jobs[0]);
        ASSERT_TRUE(jobs[1] <= (uint64_t)(6 * L + 2));
    }
    if (!seen) TEST_SKIP("no Gemma fixtures under the shared folder");
}

int main(void)
{
    RUN(test_fused_equals_unfused);
    RUN(test_gemma_batch_fused_equals_unfused_and_alone);
    RUN(test_gemma_decode_jobs);
    return TEST_DONE();
}
