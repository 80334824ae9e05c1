/*
 * test_gemma.c — Gemma 3/4 behaviour beyond the logits goldens of
 * test_oracle.c (which check every position, chunked, token by token and
 * batched): the plan the configs become (layer kinds, windows, head dims, KV
 * sources, MLP widths), which layers store K/V and what a token costs, and
 * that a K=V layer stores K and V apart (V is never K's record).
 */
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "kv/kv_layout.h"
#include "model/mdl_plan.h"
#include "test_model.h"
#include "util/half.h"
#include "weights/wt_quantize.h"
#include "weights/wt_set.h"
#include "weights/wt_writer.h"

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

/* ---------------------------------------------------------------- quantized */

/* A float twin of a quantized snapshot: every quantized module's weights
 * dequantized (scale * q + bias, f32) under the same names, config.json
 * without "quantization". The reference a 4-bit run is compared against. */
typedef struct {
    const wt_set *ws;
    const wt_config *cfg;
    wt_write_tensor *t;
    const wt_tensor **src;
    int n;
} dq_ctx;

static kiln_code dq_fill(void *ctx, int i, void *dst, uint64_t nbytes, kiln_err *err)
{
    dq_ctx *d = ctx;
    const wt_tensor *w = d->src[i];
    char n[400];
    size_t len = strlen(w->name);
    if (w->dtype != WT_U32) { /* float: to f32 */
        wt_to_f32(w->dtype, w->data, w->numel, dst);
        return KILN_OK;
    }
    snprintf(n, sizeof n, "%.*s.scales", (int)(len - 7), w->name);
    const wt_tensor *s = wt_set_find(d->ws, n);
    snprintf(n, sizeof n, "%.*s.biases", (int)(len - 7), w->name);
    const wt_tensor *b = wt_set_find(d->ws, n);
    snprintf(n, sizeof n, "%.*s", (int)(len - 7), w->name);
    wt_qspec q = wt_config_quant_for(d->cfg, n, true);
    int64_t cols = w->shape[w->ndim - 1] * 32 / q.bits, rows = w->numel / w->shape[w->ndim - 1];
    float *out = dst, *sc = malloc(sizeof(float) * (size_t)s->numel),
          *bi = malloc(sizeof(float) * (size_t)b->numel);
    uint8_t *codes = malloc((size_t)cols);
    wt_to_f32(s->dtype, s->data, s->numel, sc);
    wt_to_f32(b->dtype, b->data, b->numel, bi);
    int64_t g = cols / q.group_size;
    for (int64_t r = 0; r < rows; r++) {
        wt_unpack_codes((const uint32_t *)w->data + r * (cols * q.bits / 32), cols, q.bits, codes);
        for (int64_t c = 0; c < cols; c++)
            out[r * cols + c] = sc[r * g + c / q.group_size] * codes[c] + bi[r * g + c / q.group_size];
    }
    free(sc);
    free(bi);
    free(codes);
    (void)nbytes;
    (void)err;
    return KILN_OK;
}

static kiln_code write_dequantized(const char *qdir, const char *out, kiln_err *err)
{
    wt_config cfg;
    wt_set *ws;
    kiln_code rc = wt_config_load(qdir, &cfg, err);
    if (rc || (rc = wt_set_open(qdir, &ws, err))) return rc;
    int n = wt_set_count(ws), k = 0;
    wt_write_tensor *t = calloc((size_t)n, sizeof *t);
    const wt_tensor **src = calloc((size_t)n, sizeof *src);
    for (int i = 0; i < n; i++) {
        const wt_tensor *w = wt_set_at(ws, i);
        size_t len = strlen(w->name);
        if (len > 7 && (strcmp(w->name + len - 7, ".scales") == 0 ||
                        strcmp(w->name + len - 7, ".biases") == 0))
            continue;
        t[k] = (wt_write_tensor){.name = w->name, .dtype = WT_F32, .ndim = w->ndim};
        memcpy(t[k].shape, w->shape, sizeof(int64_t) * (size_t)w->ndim);
        if (w->dtype == WT_U32) {
            char sn[400];
            snprintf(sn, sizeof sn, "%.*s", (int)(len - 7), w->name);
            t[k].shape[w->ndim - 1] = w->shape[w->ndim - 1] * 32 / wt_config_quant_for(&cfg, sn, true).bits;
        }
        src[k++] = w;
    }
    dq_ctx d = {.ws = ws, .cfg = &cfg, .t = t, .src = src, .n = k};
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    rc = wt_write_safetensors(path, t, k, NULL, 0, dq_fill, &d, err);
    snprintf(path, sizeof path, "%s/config.json", qdir);
    json_t *c = json_load_file(path, 0, NULL);
    json_object_del(c, "quantization");
    json_object_del(c, "quantization_config");
    snprintf(path, sizeof path, "%s/config.json", out);
    if (!rc && json_dump_file(c, path, 0) != 0) rc = kiln_fail(err, KILN_E_IO, "%s", path);
    json_decref(c);
    free(t);
    free(src);
    wt_set_close(ws);
    wt_config_free(&cfg);
    return rc;
}

/* `kiln quantize` writes mlx-community's layout: the prefix renamed to
 * language_model.model., fused gate_up experts split into switch_glu
 * gate/up and every expert quantized on its own rows (3-D codes, scales,
 * biases), the router at 8 bits, per_layer_model_projection left float, the
 * per-layer input table quantized. Its 4-bit logits equal, within the
 * goldens' tolerance, those of a float model holding exactly the
 * dequantized weights (a mis-sliced expert or table moves them by > 0.1). */
static int moe_layout(const wt_set *ws)
{
    const wt_tensor *g =
        wt_set_find(ws, "language_model.model.layers.0.experts.switch_glu.gate_proj.weight");
    const wt_tensor *gs =
        wt_set_find(ws, "language_model.model.layers.0.experts.switch_glu.gate_proj.scales");
    const wt_tensor *r = wt_set_find(ws, "language_model.model.layers.5.router.proj.weight");
    return g && gs && r && g->ndim == 3 && g->shape[0] == 8 && g->shape[1] == 32 &&
           g->shape[2] == 64 * 4 / 32 && gs->ndim == 3 && gs->shape[2] == 2 &&
           r->shape[1] == 64 * 8 / 32 && /* 8-bit router */
           wt_set_find(ws, "language_model.model.layers.0.experts.switch_glu.up_proj.biases") &&
           wt_set_find(ws, "language_model.model.layers.0.experts.switch_glu.down_proj.scales") &&
           !wt_set_find(ws, "model.language_model.layers.0.experts.gate_up_proj");
}

static int e4b_layout(const wt_set *ws)
{
    const wt_tensor *pe = wt_set_find(ws, "language_model.model.embed_tokens_per_layer.weight");
    const wt_tensor *pp = wt_set_find(ws, "language_model.model.per_layer_model_projection.weight");
    return pe && pp && pe->dtype == WT_U32 && pp->dtype != WT_U32 &&
           wt_set_find(ws, "language_model.model.embed_tokens_per_layer.scales") &&
           !wt_set_find(ws, "language_model.model.per_layer_model_projection.scales") &&
           wt_set_find(ws, "language_model.model.layers.0.per_layer_input_gate.scales");
}

static void check_quantized(const char *rel, int (*layout)(const wt_set *))
{
    char src[512];
    test_shared_path(src, sizeof src, rel);
    if (!test_path_exists(src)) TEST_SKIP("%s is absent", src);
    char tmp[] = "/tmp/kiln_gemma_q_XXXXXX";
    ASSERT_TRUE(mkdtemp(tmp) != NULL);
    char qdir[600], ddir[600], cmd[700];
    snprintf(qdir, sizeof qdir, "%s/q4", tmp);
    snprintf(ddir, sizeof ddir, "%s/dq", tmp);
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    kiln_err err;
    kiln_code rc = wt_quantize_snapshot(src, qdir, 4, 32, &err);
    if (!rc && mkdir(ddir, 0755) != 0) rc = kiln_fail(&err, KILN_E_IO, "mkdir %s", ddir);
    if (!rc) rc = write_dequantized(qdir, ddir, &err);
    wt_set *ws = NULL;
    if (!rc) rc = wt_set_open(qdir, &ws, &err);
    int lay = ws && layout(ws);
    wt_set_close(ws);
    /* exact: the MLX semantics this compares (the int8 default is ~1e-1 off) */
    eng_runtime *rq = rc ? NULL : tm_open_mode(qdir, 128, 2, 2, NULL, "exact", &err);
    eng_runtime *rd = rq ? tm_open_mode(ddir, 128, 2, 2, NULL, "exact", &err) : NULL;
    double d = INFINITY;
    if (rq && rd) {
        int32_t ids[40];
        for (int i = 0; i < 40; i++)
            ids[i] = (i * 211 + 17) % 8000;
        int64_t V = mdl_vocab(rq->model);
        float *a = malloc(sizeof(float) * 40 * (size_t)V), *b = malloc(sizeof(float) * 40 * (size_t)V);
        if (!tm_logits(rq, ids, 40, 7, a, &err) && !tm_logits(rd, ids, 40, 0, b, &err))
            d = tm_max_abs_diff(a, b, 40 * (size_t)V);
        free(a);
        free(b);
    }
    fprintf(stderr, "  %s 4-bit vs its dequantized float twin: max |diff| = %.3g\n", rel, d);
    eng_runtime_close(rq);
    eng_runtime_close(rd);
    if (system(cmd) != 0) fprintf(stderr, "  could not remove %s\n", tmp);
    if (!rq || !rd) TEST_FAIL_("%s: %s", rel, err.msg);
    if (!lay) TEST_FAIL_("%s: the quantized snapshot's layout is not mlx-lm's", rel);
    if (!(d <= 1e-3)) TEST_FAIL_("%s: %g", rel, d);
}

static void test_4bit_matches_its_dequantized_reference(void)
{
    check_quantized("oracle-next/gemma4_moe_like_bf16/hf", moe_layout);
    if (!test_case_failed_) check_quantized("oracle-next/gemma4_e4b_like_f32/hf", e4b_layout);
}

int main(void)
{
    RUN(test_e4b_plan_kv_sources_and_groups);
    RUN(test_moe_plan);
    RUN(test_k_eq_v_layer_stores_k_and_v_apart);
    RUN(test_4bit_matches_its_dequantized_reference);
    return TEST_DONE();
}
