/*
 * mdl_plan_gemma.c — the Gemma 3 and Gemma 4 layer plans
 * (design/models/gemma4.md §2–§5; docs/models.md).
 *
 * Both: layer_types pick each layer's kind — sliding (window W, head_dim,
 * the sliding RoPE, table 0) or full (no window, the full RoPE, table 1);
 * q/k norms with weights; tanh-GELU MLP; embeddings x sqrt(hidden); sandwich
 * norms (post-attention, pre/post-feedforward); tied head.
 *
 * Gemma 3: norms are `1 + w`; score scale query_pre_attn_scalar^-0.5;
 * attention soft-cap when attn_logit_softcapping is set; final soft-cap when
 * final_logit_softcapping is.
 *
 * Gemma 4: norms are `w`; v normalised without weight; score scale 1; full
 * layers use global_head_dim and the proportional RoPE, and with
 * attention_k_eq_v take V from the raw K projection with
 * num_global_key_value_heads; the last num_kv_shared_layers layers read the
 * K/V of the last earlier layer of their kind (kv_src) and store none, their
 * MLP doubled when use_double_wide_mlp; per-layer inputs (mdl_pli.c) when
 * hidden_size_per_layer_input > 0; a layer_scalar closes every layer; MoE
 * layers (enable_moe_block) route to top-k experts beside the dense MLP.
 */
#include <math.h>
#include <string.h>

#include "model/mdl_family.h"

/* Table 0: sliding layers' RoPE; table 1: full layers'. */
static kiln_code gemma_ropes(const wt_config *c, int64_t full_head_dim, mdl_plan *p, kiln_err *err)
{
    const wt_gemma *g = &c->gemma;
    int64_t hd[2] = {c->head_dim, full_head_dim};
    const wt_kind_rope *kr[2] = {&g->rope[WT_LAYER_SLIDING], &g->rope[WT_LAYER_FULL]};
    p->n_ropes = 2;
    for (int r = 0; r < 2; r++) {
        const wt_rope *sc = &kr[r]->rope;
        if (sc->type == WT_ROPE_PROPORTIONAL &&
            (int64_t)floor(sc->partial_rotary_factor * (double)hd[r] / 2.0) < 1)
            return kiln_fail(err, KILN_E_INVALID,
                             "config.json: partial_rotary_factor %g rotates no pair of head_dim %d",
                             sc->partial_rotary_factor, (int)hd[r]);
        if (hd[r] % 2)
            return kiln_fail(err, KILN_E_INVALID, "config.json: odd head_dim %d", (int)hd[r]);
        /* the whole head is "rotated": a proportional RoPE's frequencies past its
         * pairs are 0, and angle 0 is an exact identity (mdl_rope.c) */
        p->rope[r] = (mdl_rope_spec){.head_dim = (int32_t)hd[r],
                                     .rot = (int32_t)hd[r],
                                     .theta = kr[r]->theta,
                                     .scaling = *sc,
                                     .max_pos = c->max_pos};
    }
    return KILN_OK;
}

/* What both generations share per layer. */
static void gemma_layer(const wt_config *c, int32_t L, mdl_layer_plan *l)
{
    int sliding = c->gemma.layer_types[L] == WT_LAYER_SLIDING;
    l->mixer = MDL_MIX_ATTN;
    l->n_heads = (int32_t)c->n_heads;
    l->n_kv_heads = (int32_t)c->n_kv_heads;
    l->head_dim = (int32_t)c->head_dim;
    l->window = sliding ? (int32_t)c->sliding_window : 0;
    l->rope = sliding ? 0 : 1;
    l->kv_src = L;
    l->attn_scale = (float)c->gemma.attn_scale;
    l->attn_softcap = (float)c->gemma.attn_softcap;
    l->qk_norm = true;
    l->q_bias = l->k_bias = l->v_bias = c->attention_bias;
    l->ffn = MDL_FFN_DENSE;
    l->ffn_dim = c->intermediate;
    l->act = MDL_ACT_GELU_TANH;
}

static void gemma_model(const wt_config *c, mdl_plan *p, float norm_add)
{
    p->embed_scale = sqrtf((float)c->hidden);
    p->logit_softcap = (float)c->gemma.final_softcap;
    p->norm_add = norm_add;
    p->sandwich_norms = true;
}

kiln_code mdl_plan_gemma3(const wt_config *c, mdl_plan *p, kiln_err *err)
{
    kiln_code rc = gemma_ropes(c, c->head_dim, p, err);
    if (rc) return rc;
    for (int32_t L = 0; L < p->n_layers; L++)
        gemma_layer(c, L, &p->layer[L]);
    gemma_model(c, p, 1.0f);
    return KILN_OK;
}

/* donor(L) for a KV-shared layer: the last layer of the same kind before the
 * first shared one (HF kv_shared_layer_index, mlx-lm, mlx-bun). */
static int32_t gemma4_donor(const wt_config *c, int32_t L, int32_t first_shared)
{
    for (int32_t d = first_shared - 1; d >= 0; d--)
        if (c->gemma.layer_types[d] == c->gemma.layer_types[L]) return d;
    return -1;
}

kiln_code mdl_plan_gemma4(const wt_config *c, mdl_plan *p, kiln_err *err)
{
    const wt_gemma *g = &c->gemma;
    kiln_code rc = gemma_ropes(c, g->global_head_dim, p, err);
    if (rc) return rc;
    int32_t first_shared = p->n_layers - (int32_t)g->n_kv_shared;
    for (int32_t L = 0; L < p->n_layers; L++) {
        mdl_layer_plan *l = &p->layer[L];
        gemma_layer(c, L, l);
        int full = g->layer_types[L] == WT_LAYER_FULL;
        if (full) {
            l->head_dim = (int32_t)g->global_head_dim;
            l->k_eq_v = g->k_eq_v;
            if (g->k_eq_v) l->n_kv_heads = (int32_t)g->n_global_kv_heads;
        }
        l->v_norm = true;
        if (L >= first_shared) {
            l->kv_src = gemma4_donor(c, L, first_shared);
            if (l->kv_src < 0)
                return kiln_fail(err, KILN_E_INVALID,
                                 "config.json: KV-shared layer %d has no earlier %s layer to read",
                                 (int)L, full ? "full_attention" : "sliding_attention");
            if (g->double_wide_mlp) l->ffn_dim = 2 * c->intermediate;
        }
        if (c->moe.n_experts > 0) {
            l->ffn = MDL_FFN_MOE;
            l->moe = (mdl_moe_plan){.n_experts = (int32_t)c->moe.n_experts,
                                    .top_k = (int32_t)c->moe.top_k,
                                    .ffn_dim = c->moe.ffn,
                                    .input = MDL_ROUTER_ON_RESIDUAL,
                                    .renorm = true,
                                    .per_expert_scale = true,
                                    .dense_branch = true};
        }
        l->pli = g->pli_dim > 0;
        l->layer_scalar = true;
    }
    p->pli_dim = g->pli_dim;
    p->pli_vocab = g->pli_vocab;
    gemma_model(c, p, 0.0f);
    return KILN_OK;
}
