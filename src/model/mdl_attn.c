/*
 * mdl_attn.c — the softmax-attention mixer: one layer's q/k/v projections over
 * all T tokens of the step, per-token q/k norms and RoPE, K/V written into the
 * sequence's paged blocks, attention per (sequence, KV head) over its blocks,
 * and the output projection.
 *
 * Geometry (heads, head_dim, window, scale, RoPE, the layer whose K/V it reads)
 * comes from the layer's mdl_layer_plan, so layers of one model may differ.
 * Gated attention (attn_gate, Qwen3.5): q_proj emits per head head_dim query
 * values then head_dim gate values (into s->mix); the query is split off
 * before its norm and RoPE, and the attention output is multiplied by
 * sigmoid(gate) before o_proj.
 * Contract: reads s->h (the normed input, [T, H]), leaves the block's output in
 * s->h. Every per-token result depends only on that token's row and its
 * sequence's keys, reduced in a fixed order (batch and chunk invariance).
 */
#include "kernels/kn_attn.h"
#include "kernels/kn_ops.h"
#include "model/mdl_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Token t's q heads [h0, h1) and KV heads [k0, k1): qk-norm, RoPE, and (a
 * layer that stores K/V) K/V into the token's block slot of the layer's group.
 * Every head is handled on its own (its bytes depend on that row only), so any
 * split of heads or tokens gives the same bits. */
static void prep_token(mdl_step *s, int64_t t, int64_t h0, int64_t h1, int64_t k0, int64_t k1)
{
    const mdl_layer *ly = s->ly;
    const mdl_layer_plan *p = ly->p;
    float eps = (float)s->m->cfg.rms_eps;
    int64_t hd = p->head_dim, nh = p->n_heads, nkv = p->n_kv_heads;
    int32_t bt = kv_pool_cfg(s->kv)->block_tokens, L = p->kv_src;
    int stores = L == s->layer, g = kv_pool_layer_group(s->kv, L);
    const mdl_rope *rope = p->rope >= 0 ? &s->m->rope[p->rope] : NULL;
    float *q = s->q + t * nh * hd, *k = s->k + t * nkv * hd, *v = s->v + t * nkv * hd;
    const float *cs = rope ? s->cs[p->rope] + t * rope->rot : NULL;
    for (int64_t h = h0; h < h1; h++) {
        if (p->attn_gate) /* [query, gate] per head: the queries, packed */
            memcpy(q + h * hd, s->mix + (t * nh + h) * 2 * hd, sizeof(float) * (size_t)hd);
        if (ly->attn.q_norm) kn_rmsnorm(q + h * hd, q + h * hd, ly->attn.q_norm, hd, eps, 0.0f);
        if (rope) kn_rope_neox(q + h * hd, rope->rot, cs);
    }
    if (!stores) return; /* KV-shared: the donor wrote this step's K/V already */
    for (int64_t h = k0; h < k1; h++) {
        if (ly->attn.k_norm) kn_rmsnorm(k + h * hd, k + h * hd, ly->attn.k_norm, hd, eps, 0.0f);
        if (rope) kn_rope_neox(k + h * hd, rope->rot, cs);
        if (p->v_norm) kn_rmsnorm(v + h * hd, v + h * hd, NULL, hd, eps, 0.0f);
    }
    const mdl_seq *sq = &s->seqs[s->tok_seq[t]];
    int32_t pos = s->tok_pos[t];
    kv_block_id b = sq->blocks[g][pos / bt];
    kn_kv_fmt f = kv_pool_layer_fmt(s->kv, b, L);
    size_t rec = kn_kv_rec_bytes(f, (int32_t)hd), off = (size_t)(pos % bt) * (size_t)nkv * rec;
    uint8_t *kd = (uint8_t *)kv_pool_layer_k(s->kv, b, L) + off;
    uint8_t *vd = (uint8_t *)kv_pool_layer_v(s->kv, b, L) + off;
    for (int64_t h = k0; h < k1; h++) {
        kn_kv_store(f, k + h * hd, (int32_t)hd, kd + (size_t)h * rec);
        kn_kv_store(f, v + h * hd, (int32_t)hd, vd + (size_t)h * rec);
    }
}

/* Every head of tokens [t0, t1) (the unfused path). */
static void qkv_rows(void *ctx, int64_t t0, int64_t t1, int tid)
{
    (void)tid;
    mdl_step *s = ctx;
    const mdl_layer_plan *p = s->ly->p;
    for (int64_t t = t0; t < t1; t++)
        prep_token(s, t, 0, p->n_heads, 0, p->n_kv_heads);
}

/* att *= sigmoid(gate) for token t's heads [h0, h1). */
static void gate_token(mdl_step *s, int64_t t, int64_t h0, int64_t h1)
{
    const mdl_layer_plan *p = s->ly->p;
    int64_t hd = p->head_dim, nh = p->n_heads;
    for (int64_t h = h0; h < h1; h++) {
        float *a = s->att + (t * nh + h) * hd;
        const float *g = s->mix + (t * nh + h) * 2 * hd + hd;
        for (int64_t i = 0; i < hd; i++)
            a[i] *= 1.0f / (1.0f + expf(-g[i]));
    }
}

/* att *= sigmoid(gate) over tokens (the unfused path). */
static void gate_rows(void *ctx, int64_t t0, int64_t t1, int tid)
{
    (void)tid;
    mdl_step *s = ctx;
    for (int64_t t = t0; t < t1; t++)
        gate_token(s, t, 0, s->ly->p->n_heads);
}

/* One item = one (sequence, KV head): its query heads together, so the kernel
 * reads each K/V row once for the whole group. Fused (s->fused): the item
 * first prepares its heads of the sequence's tokens (prep_token: every K/V
 * row attention reads for this head is the sequence's own, written here in
 * token order before any is read) and gates its outputs afterwards, so the
 * stage is one pool job instead of three. */
static void attn_items(void *ctx, int64_t i0, int64_t i1, int tid)
{
    mdl_step *s = ctx;
    const mdl_layer_plan *p = s->ly->p;
    int32_t nkv = p->n_kv_heads, group = p->n_heads / p->n_kv_heads;
    kn_attn_args *aa = s->aa;
    float *scratch = s->scratch + (size_t)tid * (size_t)s->attn_scratch;
    for (int64_t i = i0; i < i1; i++) {
        int32_t sq = (int32_t)(i / nkv), g = (int32_t)(i % nkv);
        if (s->fused)
            for (int64_t t = s->row0[sq]; t < s->row0[sq + 1]; t++)
                prep_token(s, t, (int64_t)g * group, (int64_t)(g + 1) * group, g, g + 1);
        kn_attn_heads(&aa[sq], g * group, (g + 1) * group, scratch);
        if (s->fused && p->attn_gate)
            for (int64_t t = s->row0[sq]; t < s->row0[sq + 1]; t++)
                gate_token(s, t, (int64_t)g * group, (int64_t)(g + 1) * group);
    }
}

kiln_code mdl_attn_alloc(mdl_step *s, arena *a, kiln_err *err)
{
    int32_t bt = kv_pool_cfg(s->kv)->block_tokens;
    kn_attn_args *aa = ARENA_ARRAY(a, kn_attn_args, s->n_seqs);
    if (!aa) return kiln_fail(err, KILN_E_INTERNAL, "model step: scratch arena too small");
    for (int32_t i = 0; i < s->n_seqs; i++) {
        const mdl_seq *sq = &s->seqs[i];
        int32_t nb = (sq->pos0 + sq->n_tokens + bt - 1) / bt;
        const void **kp = ARENA_ARRAY(a, const void *, nb);
        const void **vp = ARENA_ARRAY(a, const void *, nb);
        if (!kp || !vp)
            return kiln_fail(err, KILN_E_INTERNAL, "model step: scratch arena too small");
        aa[i] = (kn_attn_args){.n_q = sq->n_tokens,
                               .pos0 = sq->pos0,
                               .k_blocks = kp,
                               .v_blocks = vp,
                               .block_tokens = bt};
    }
    s->aa = aa;
    return KILN_OK;
}

/* Points each sequence's attention at the K/V layer's blocks (its group's
 * table), this layer's geometry and its rows of q/att. */
static void bind_layer(mdl_step *s)
{
    const mdl_layer_plan *p = s->ly->p;
    int32_t L = p->kv_src, bt = kv_pool_cfg(s->kv)->block_tokens;
    int g = kv_pool_layer_group(s->kv, L);
    int64_t qd = (int64_t)p->n_heads * p->head_dim, row = 0;
    kn_attn_args *aa = s->aa;
    const kv_format *kf = kv_pool_cfg(s->kv)->fmt;
    for (int32_t i = 0; i < s->n_seqs; i++) {
        const mdl_seq *sq = &s->seqs[i];
        kn_attn_args *a = &aa[i];
        int32_t nb = (sq->pos0 + sq->n_tokens + bt - 1) / bt;
        const void **kp = (const void **)a->k_blocks, **vp = (const void **)a->v_blocks;
        const kv_block_id *tab = sq->blocks[g];
        for (int32_t j = 0; j < nb; j++) { /* -1: given back, out of the group's window */
            kp[j] = tab[j] >= 0 ? kv_pool_layer_k(s->kv, tab[j], L) : NULL;
            vp[j] = tab[j] >= 0 ? kv_pool_layer_v(s->kv, tab[j], L) : NULL;
        }
        /* a block's class follows from its index: the full-precision blocks
         * (--quantized-kv-start) are the sequence's first ones */
        int32_t nfull = 0;
        while (nfull < nb && kv_pool_class_of(s->kv, nfull) == KV_CLASS_FULL)
            nfull++;
        a->full_blocks = nfull;
        a->fmt = kv_format_at(kf, KV_CLASS_MAIN, L);
        a->fmt_full = kv_format_at(kf, KV_CLASS_FULL, L);
        a->n_heads = p->n_heads;
        a->n_kv_heads = p->n_kv_heads;
        a->head_dim = p->head_dim;
        a->scale = p->attn_scale;
        a->softcap = p->attn_softcap;
        a->window = p->window;
        a->q = s->q + row * qd;
        a->out = s->att + row * qd;
        row += sq->n_tokens;
    }
}

/* rows [r0, r1) of y = x·Wᵀ + b for every token of the step. */
static void proj_rows(mdl_step *s, const kn_mat *W, const float *b, float *y, int64_t r0,
                      int64_t r1)
{
    kn_matmul_rows(W, s->h, s->T, y, r0, r1);
    if (b)
        for (int64_t t = 0; t < s->T; t++)
            kn_add(y + t * W->rows + r0, b + r0, r1 - r0);
}

/* One item = KV head g for the whole step: its rows of q (the group's query
 * heads, with their gate rows when gated), of K and of V for every token,
 * then per sequence the prep, attention and gate of that group. No item
 * reads rows another item writes, so projections and attention need no
 * barrier between them. A chunk is a run of heads [g0, g1): their rows are
 * contiguous in each matrix. */
static void head_items(void *ctx, int64_t g0, int64_t g1, int tid)
{
    mdl_step *s = ctx;
    const mdl_attn *at = &s->ly->attn;
    const mdl_layer_plan *p = s->ly->p;
    int64_t hd = p->head_dim, group = p->n_heads / p->n_kv_heads,
            qr = (p->attn_gate ? 2 : 1) * group * hd, kd = (int64_t)p->n_kv_heads * hd;
    float *scratch = s->scratch + (size_t)tid * (size_t)s->attn_scratch;
    kn_attn_args *aa = s->aa;
    /* the chunk's heads' rows in one kernel call per matrix: x is quantized
     * once per call, as kn_matmul_multi does per chunk */
    proj_rows(s, &at->wq, at->bq, p->attn_gate ? s->mix : s->q, g0 * qr, g1 * qr);
    if (p->kv_src == s->layer) {
        proj_rows(s, &at->wk, at->bk, s->k, g0 * hd, g1 * hd);
        if (p->k_eq_v) /* V is the raw K projection; both are stored after their norms */
            for (int64_t t = 0; t < s->T; t++)
                memcpy(s->v + t * kd + g0 * hd, s->k + t * kd + g0 * hd,
                       sizeof(float) * (size_t)((g1 - g0) * hd));
        else
            proj_rows(s, &at->wv, at->bv, s->v, g0 * hd, g1 * hd);
    }
    for (int64_t g = g0; g < g1; g++)
        for (int32_t sq = 0; sq < s->n_seqs; sq++) {
            for (int64_t t = s->row0[sq]; t < s->row0[sq + 1]; t++)
                prep_token(s, t, g * group, (g + 1) * group, g, g + 1);
            kn_attn_heads(&aa[sq], (int32_t)(g * group), (int32_t)((g + 1) * group), scratch);
            if (p->attn_gate)
                for (int64_t t = s->row0[sq]; t < s->row0[sq + 1]; t++)
                    gate_token(s, t, g * group, (g + 1) * group);
        }
}

/* One token (single-stream decode) and KV heads that split evenly over the
 * threads: the per-head job above (one barrier instead of two). More tokens
 * keep q/k/v as one batched matmul and the finer (sequence, head) split for
 * attention: at 16 the per-head job made 8-stream decode of the 1B 4-bit
 * shape 2x slower (14.9 vs 29.6 tok/s, bench_lora b=8), since each head's
 * rows of q/k/v then run through the row-range kernel token by token. */
#define HEAD_JOB_MAX_TOKENS 1

/* The fused path (s->fused, no LoRA): q/k/v and attention as one job per KV
 * head (few tokens), or q/k/v as one pool job with their biases and then one
 * job per (sequence, KV head) that prepares, attends and gates; then o_proj
 * with its bias and (s->fold_residual) the residual add. */
static void attn_fused(mdl_step *s)
{
    const mdl_attn *at = &s->ly->attn;
    const mdl_layer_plan *p = s->ly->p;
    int64_t T = s->T;
    const kn_mat *W[3] = {&at->wq, &at->wk, &at->wv};
    const float *b[3] = {at->bq, at->bk, at->bv};
    float *y[3] = {p->attn_gate ? s->mix : s->q, s->k, s->v};
    int nm = p->kv_src != s->layer ? 1 : p->k_eq_v ? 2 : 3;
    if (T <= HEAD_JOB_MAX_TOKENS && p->n_kv_heads % kn_pool_threads(s->pool) == 0) {
        bind_layer(s);
        kn_pool_for(s->pool, p->n_kv_heads, 1, head_items, s);
    }
    else {
        kn_matmul_multi(s->pool, nm, W, b, s->h, T, y);
        if (nm == 2) /* V is the raw K projection; both are stored after their norms */
            memcpy(s->v, s->k, sizeof(float) * (size_t)(T * p->n_kv_heads * p->head_dim));
        bind_layer(s);
        kn_pool_for(s->pool, (int64_t)s->n_seqs * p->n_kv_heads, 1, attn_items, s);
    }
    if (s->fold_residual) kn_matmul_residual(s->pool, &at->wo, at->bo, s->att, T, s->h, s->x);
    else {
        kn_matmul(s->pool, &at->wo, s->att, T, s->h);
        mdl_add_bias_rows(s->h, at->bo, T, s->m->plan.hidden);
    }
}

void mdl_attn_forward(mdl_step *s)
{
    if (s->fused) {
        attn_fused(s);
        return;
    }
    kn_pool *pool = s->pool;
    const mdl_attn *at = &s->ly->attn;
    const mdl_layer_plan *p = s->ly->p;
    int64_t T = s->T, H = s->m->plan.hidden;
    int64_t qd = (int64_t)p->n_heads * p->head_dim, kd = (int64_t)p->n_kv_heads * p->head_dim;
    kn_matmul(pool, &at->wq, s->h, T, p->attn_gate ? s->mix : s->q);
    mdl_add_bias_rows(p->attn_gate ? s->mix : s->q, at->bq, T, p->attn_gate ? 2 * qd : qd);
    mdl_lora_apply(s, MDL_LT_Q, s->h, H, p->attn_gate ? s->mix : s->q, p->attn_gate ? 2 * qd : qd);
    if (p->kv_src == s->layer) {
        kn_matmul(pool, &at->wk, s->h, T, s->k);
        mdl_add_bias_rows(s->k, at->bk, T, kd);
        mdl_lora_apply(s, MDL_LT_K, s->h, H, s->k, kd);
        if (p->k_eq_v) { /* V is the raw K projection; both are stored after their norms */
            memcpy(s->v, s->k, sizeof(float) * (size_t)(T * kd));
        } else {
            kn_matmul(pool, &at->wv, s->h, T, s->v);
            mdl_add_bias_rows(s->v, at->bv, T, kd);
            mdl_lora_apply(s, MDL_LT_V, s->h, H, s->v, kd);
        }
    }
    kn_pool_for(pool, T, s->grain, qkv_rows, s);
    bind_layer(s);
    kn_pool_for(pool, (int64_t)s->n_seqs * p->n_kv_heads, 1, attn_items, s);
    if (p->attn_gate) kn_pool_for(pool, T, s->grain, gate_rows, s);
    kn_matmul(pool, &at->wo, s->att, T, s->h);
    mdl_add_bias_rows(s->h, at->bo, T, H);
    mdl_lora_apply(s, MDL_LT_O, s->att, qd, s->h, H);
}

kiln_code mdl_attn_load(mdl_model *m, int32_t L, const char *prefix, kiln_err *err)
{
    mdl_attn *a = &m->layers[L].attn;
    const mdl_layer_plan *p = &m->plan.layer[L];
    int64_t H = m->plan.hidden, qd = (int64_t)p->n_heads * p->head_dim,
            kd = (int64_t)p->n_kv_heads * p->head_dim;
    char n[320];
    kiln_code rc;
#define MAT(field, sub, r, c)                                                                      \
    snprintf(n, sizeof n, "%s.%s", prefix, sub);                                                   \
    if ((rc = mdl_load_mat(m, n, r, c, &a->field, err))) return rc
#define VEC(field, sub, len, opt)                                                                  \
    snprintf(n, sizeof n, "%s.%s", prefix, sub);                                                   \
    if ((rc = mdl_load_vec(m, n, len, opt, 0.0f, &a->field, err))) return rc
    /* a KV-shared layer reads its donor's K/V: its own k/v tensors, if the
     * checkpoint carries them, are never loaded (design/models/gemma4.md §3) */
    int stores = p->kv_src == L;
    int64_t qrows = p->attn_gate ? 2 * qd : qd; /* gated: [query, gate] per head */
    MAT(wq, "q_proj", qrows, H);
    if (stores) {
        MAT(wk, "k_proj", kd, H);
        VEC(bk, "k_proj.bias", kd, !p->k_bias);
        if (!p->k_eq_v) {
            MAT(wv, "v_proj", kd, H);
            VEC(bv, "v_proj.bias", kd, !p->v_bias);
        }
    }
    MAT(wo, "o_proj", H, qd);
    VEC(bq, "q_proj.bias", qrows, !p->q_bias);
    VEC(bo, "o_proj.bias", H, 1); /* Qwen2 has q/k/v biases only: o's when present */
    if (p->qk_norm) {
        snprintf(n, sizeof n, "%s.q_norm.weight", prefix);
        if ((rc = mdl_load_vec(m, n, p->head_dim, 0, m->plan.norm_add, &a->q_norm, err))) return rc;
        snprintf(n, sizeof n, "%s.k_norm.weight", prefix);
        if (stores && (rc = mdl_load_vec(m, n, p->head_dim, 0, m->plan.norm_add, &a->k_norm, err)))
            return rc;
    }
#undef MAT
#undef VEC
    return KILN_OK;
}

void mdl_attn_free(mdl_attn *a)
{
    float *vs[] = {a->q_norm, a->k_norm, a->bq, a->bk, a->bv, a->bo};
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++)
        free(vs[i]);
}
