/*
 * test_gemma.c — Gemma 3/4 behaviour beyond the logits goldens of
 * test_oracle.c (which check every position, chunked, token by token and
 * batched): the plan the configs become (layer kinds, windows, head dims, KV
 * sources, MLP widths), which layers store K/V and what a token costs, and
 * that a K=V layer stores K and V apart (V is never K's record).
 */
#include <math.h>

#include "kv/kv_layout.h"
#include "model/mdl_plan.h"
#include "test_model.h"

static eng_runtime *open_shared(const char *rel, kiln_err *err, int *skip)
{
    char dir[512];
    test_shared_path(dir, sizeof dir, rel);
    *skip = !test_path_exists(dir);
    if (*skip) return NULL;
    return tm_open(dir, 128, 2, 2, NULL, err);
}

#define OPEN_OR_SKIP(rt, rel)                                                                      \
    do {                                                                                           \
        int skip_;                                                                                 \
        rt = open_shared(rel, &err, &skip_);                                                       \
        if (skip_) TEST_SKIP("%s is absent", rel);                                                 \
        if (!rt) TEST_FAIL_("%s: %s", rel, err.msg);                                               \
    } while (0)

/* e4b-like: [S,S,S,F,S,S,S,F], layers 5, 6 read layer 4 and 7 reads 3
 * (the last earlier layer of their kind); only layers 0-4 store K/V. */
static void test_e4b_plan_kv_sources_and_groups(void)
{
    kiln_err err;
    eng_runtime *rt;
    OPEN_OR_SKIP(rt, "oracle-next/gemma4_e4b_like_f32/hf");
    const mdl_plan *p = mdl_get_plan(rt->model);
    static const int src[8] = {0, 1, 2, 3, 4, 4, 4, 3};
    int ok = p->n_layers == 8 && p->pli_dim == 16 && p->sandwich_norms && p->norm_add == 0.0f &&
             p->logit_softcap == 2.0f && fabsf(p->embed_scale - 8.0f) < 1e-6f;
    for (int L = 0; L < 8 && ok; L++) {
        const mdl_layer_plan *l = &p->layer[L];
        int full = L == 3 || L == 7;
        ok = l->kv_src == src[L] && l->window == (full ? 0 : 8) &&
             l->head_dim == (full ? 32 : 16) && l->n_kv_heads == 2 && l->n_heads == 4 &&
             l->ffn_dim == (L >= 5 ? 192 : 96) && l->v_norm && !l->k_eq_v && l->pli &&
             l->attn_scale == 1.0f && l->rope == (full ? 1 : 0) && l->act == MDL_ACT_GELU_TANH;
        if (!ok) fprintf(stderr, "  layer %d plan differs\n", L);
    }
    /* proportional RoPE on the global heads: the whole head, 4 of 16 pairs turn */
    ok = ok && p->rope[1].head_dim == 32 && p->rope[1].rot == 32 &&
         p->rope[1].scaling.type == WT_ROPE_PROPORTIONAL;
    const kv_layout *l = kv_pool_layout(rt->kv);
    for (int L = 0; L < 8 && ok; L++)
        ok = (L >= 5) == (l->group[L] < 0) && mdl_plan_stores_kv(p, L) == (L < 5);
    /* f32 K+V per token: 4 sliding layers 2x2x16x4 + the full one 2x2x32x4 */
    uint64_t bpt = kv_layout_bytes_per_token(l, kv_pool_cfg(rt->kv)->fmt, -1, KV_CLASS_MAIN);
    int groups = kv_pool_n_groups(rt->kv);
    eng_runtime_close(rt);
    ASSERT_TRUE(ok);
    ASSERT_EQ_I64(groups, 2);
    ASSERT_EQ_I64(bpt, 4 * 2 * 2 * 16 * 4 + 2 * 2 * 32 * 4);
}

/* MoE-like: layer 5 is full with K=V (1 KV head of 32), no v_proj; layers
 * 0-4 slide (window 12); every FFN is MoE (8 experts, top 2) beside a dense MLP. */
static void test_moe_plan(void)
{
    kiln_err err;
    eng_runtime *rt;
    OPEN_OR_SKIP(rt, "oracle-next/gemma4_moe_like_bf16/hf");
    const mdl_plan *p = mdl_get_plan(rt->model);
    int ok = p->n_layers == 6 && p->pli_dim == 0 && mdl_plan_count_moe(p) == 6 &&
             mdl_plan_count_shared(p) == 0 && p->max_experts == 8 && p->max_top_k == 2;
    for (int L = 0; L < 6 && ok; L++) {
        const mdl_layer_plan *l = &p->layer[L];
        ok = l->ffn == MDL_FFN_MOE && l->moe.n_experts == 8 && l->moe.top_k == 2 &&
             l->moe.ffn_dim == 32 && l->moe.dense_branch && l->moe.renorm &&
             l->moe.per_expert_scale && l->moe.input == MDL_ROUTER_ON_RESIDUAL &&
             l->ffn_dim == 96 && l->k_eq_v == (L == 5) && l->n_kv_heads == (L == 5 ? 1 : 2) &&
             l->window == (L == 5 ? 0 : 12);
    }
    eng_runtime_close(rt);
    ASSERT_TRUE(ok);
}

static double rms(const float *x, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return sqrt(s / n);
}

/* K and V of a K=V layer come from one projection but differ after their
 * norms and RoPE: both are stored, and V is the weightless RMS norm of the
 * raw projection (unit RMS), never K's record. */
static void test_k_eq_v_layer_stores_k_and_v_apart(void)
{
    kiln_err err;
    eng_runtime *rt;
    OPEN_OR_SKIP(rt, "oracle-next/gemma4_moe_like_bf16/hf");
    int32_t ids[20];
    for (int i = 0; i < 20; i++)
        ids[i] = 100 + 37 * i;
    eng_seq *s;
    ASSERT_OK(eng_seq_create(ids, 20, &s, &err));
    eng_step_item it = {.seq = s, .max_tokens = 20};
    kiln_code rc = eng_step_run(rt->cx, rt->kv, &it, 1, rt->ns, rt->logits, rt->logit_rows, &err);
    int g = kv_pool_layer_group(rt->kv, 5), bt = kv_pool_cfg(rt->kv)->block_tokens;
    int differ = 0, v_unit = 0, k_not_unit = 0;
    for (int pos = 0; !rc && pos < 20; pos++) {
        kv_block_id b = s->blocks[g][pos / bt];
        const float *k = (const float *)kv_pool_layer_k(rt->kv, b, 5) + (pos % bt) * 32;
        const float *v = (const float *)kv_pool_layer_v(rt->kv, b, 5) + (pos % bt) * 32;
        differ += memcmp(k, v, 32 * sizeof(float)) != 0;
        v_unit += fabs(rms(v, 32) - 1.0) < 1e-4;
        k_not_unit += fabs(rms(k, 32) - 1.0) > 1e-3;
    }
    eng_seq_free(s, rt->kv);
    eng_runtime_close(rt);
    ASSERT_OK(rc);
    ASSERT_EQ_I64(g, 0); /* the full-attention group */
    ASSERT_EQ_I64(differ, 20);
    ASSERT_EQ_I64(v_unit, 20);
    ASSERT_EQ_I64(k_not_unit, 20);
}

int main(void)
{
    RUN(test_e4b_plan_kv_sources_and_groups);
    RUN(test_moe_plan);
    RUN(test_k_eq_v_layer_stores_k_and_v_apart);
    return TEST_DONE();
}
