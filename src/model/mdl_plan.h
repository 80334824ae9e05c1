/*
 * mdl_plan.h — what every layer of a model is, from config.json alone: its
 * mixer (softmax attention, or a recurrent mixer), its attention geometry
 * (heads, head_dim, window, the layer whose K/V it reads, its RoPE), and its
 * feed-forward kind. A model family is a rule that turns a config into a plan;
 * the loader (mdl_load.c) then finds tensors for each layer's kinds and the
 * step (mdl_forward.c) runs each layer through its kinds' functions.
 *
 *   mdl_plan p;  mdl_plan_build(&cfg, &p, &err);
 *   for (int32_t L = 0; L < p.n_layers; L++)
 *       if (mdl_plan_stores_kv(&p, L)) bytes += 2 * p.layer[L].n_kv_heads * p.layer[L].head_dim *
 * 4; mdl_plan_free(&p);
 *
 * The plan is what `kiln fit`, the KV pool's shape and the step scratch are
 * sized from, before any weight is mapped, so all three agree with the model
 * that loads.
 * Errors: KILN_E_INVALID for a config whose layer rules contradict each other,
 * KILN_E_UNSUPPORTED for kinds kiln does not run.
 */
#ifndef KILN_MDL_PLAN_H
#define KILN_MDL_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/kv_layout.h"
#include "util/kiln_err.h"
#include "weights/wt_config.h"

#define MDL_MAX_ROPES 4

typedef enum {
    MDL_MIX_ATTN = 0, /* softmax attention over the paged KV cache */
    MDL_MIX_DELTANET, /* gated DeltaNet: a recurrent state per sequence, no KV (mdl_delta.c) */
} mdl_mixer_kind;

typedef enum {
    MDL_FFN_DENSE = 0, /* down(act(gate(x)) * up(x)) */
    MDL_FFN_MOE,       /* routed experts (mdl_moe.c), optionally beside a dense MLP */
} mdl_ffn_kind;

/* What a router reads. */
typedef enum {
    MDL_ROUTER_ON_INPUT = 0, /* the FFN block's normed input (Qwen3-MoE style) */
    MDL_ROUTER_ON_RESIDUAL,  /* RMSNorm(x) without weight x router.scale x hidden^-1/2, x the
                                residual (Gemma 4) */
} mdl_router_input;

/* A mixture-of-experts feed-forward block (ffn == MDL_FFN_MOE). */
typedef struct {
    int32_t n_experts, top_k;
    int64_t ffn_dim; /* each expert's intermediate width */
    mdl_router_input input;
    bool renorm;           /* weights = softmax over the k chosen logits; else softmax over
                              all experts, taken at the chosen ones */
    bool per_expert_scale; /* router.per_expert_scale[e] multiplies expert e's weight */
    bool dense_branch;     /* a dense MLP (width ffn_dim of the layer) runs beside the
                              experts, each branch with its own norms (Gemma 4) */
} mdl_moe_plan;

typedef enum { MDL_ACT_SILU = 0, MDL_ACT_GELU_TANH } mdl_act;

/* One rotary embedding (layers of different kinds may use different ones). */
typedef struct {
    int32_t head_dim; /* of the heads it rotates */
    int32_t rot;      /* rotated dims: pairs (i, i + rot/2) for i < rot/2 */
    double theta;     /* rope_theta */
    wt_rope scaling;  /* type, factor, ... (WT_ROPE_NONE = plain) */
    int64_t max_pos;  /* max_position_embeddings (yarn / dynamic fall back to it) */
} mdl_rope_spec;

typedef struct {
    mdl_mixer_kind mixer;
    /* attention */
    int32_t n_heads, n_kv_heads, head_dim;
    int32_t window;     /* 0: full attention; W: a query at p sees p-W+1 .. p */
    int32_t kv_src;     /* the layer whose K/V this layer reads: itself, or a donor
                           (KV-shared layers compute and store none) */
    int32_t rope;       /* index into mdl_plan.rope; -1 = no RoPE */
    float attn_scale;   /* score multiplier (head_dim^-0.5 unless the family says) */
    float attn_softcap; /* 0 = none; scores = c * tanh(scores / c) */
    bool qk_norm;       /* per-head RMSNorm of q and k with weights */
    bool v_norm;        /* per-head RMSNorm of v without weight (Gemma 4) */
    bool k_eq_v;        /* no v_proj: V is the raw K projection (before k_norm and RoPE);
                           K and V are still stored apart (they differ after their norms) */
    bool q_bias, k_bias, v_bias, o_bias;
    bool attn_gate; /* q_proj emits [query, gate] per head; out = attn * sigmoid(gate) */
    /* gated DeltaNet (MDL_MIX_DELTANET): key/value heads and dims, conv kernel */
    int32_t lin_k_heads, lin_v_heads, lin_k_dim, lin_v_dim, conv_k;
    /* feed-forward */
    mdl_ffn_kind ffn;
    int64_t ffn_dim; /* intermediate width of this layer's dense MLP */
    mdl_act act;
    bool mlp_bias;
    mdl_moe_plan moe; /* ffn == MDL_FFN_MOE */
    /* after the feed-forward block */
    bool pli;          /* per-layer input gate (mdl_pli.c; width mdl_plan.pli_dim) */
    bool layer_scalar; /* the residual is multiplied by layers.L.layer_scalar when present */
} mdl_layer_plan;

typedef struct {
    int32_t n_layers;
    mdl_layer_plan *layer; /* OWNED [n_layers]; freed by mdl_plan_free */
    int32_t n_ropes;
    mdl_rope_spec rope[MDL_MAX_ROPES];
    int64_t hidden, vocab;
    float embed_scale;   /* embeddings are multiplied by it (Gemma: sqrt(hidden)) */
    float logit_softcap; /* 0 = none; logits = c * tanh(logits / c) */
    float norm_add;      /* added to stored RMSNorm weights at load (1 for `1 + w` norms) */
    bool sandwich_norms; /* Gemma: post_attention_layernorm after the mixer, pre/post_feedforward
                            norms around the FFN (Llama's post_attention_layernorm is pre-FFN) */
    int64_t pli_dim, pli_vocab; /* per-layer inputs (Gemma 4 e2b/e4b): width per layer and rows
                                   of embed_tokens_per_layer; 0 = none */
    /* maxima over layers (scratch sizing) */
    int64_t max_q, max_kv, max_ffn; /* floats per token: n_heads*head_dim, n_kv*head_dim, ffn */
    int32_t max_heads, max_kv_heads, max_head_dim;
    int32_t max_experts, max_top_k; /* over MoE layers (0: none) */
    int64_t rope_floats; /* Σ over ropes of rot: cos/sin floats per token */
    int64_t max_mix;     /* floats per token of mixer scratch (gated q_proj output,
                            DeltaNet projections); 0 when no layer needs it */
    int32_t max_lin_dv;  /* largest DeltaNet value head (per-thread kernel scratch) */
} mdl_plan;

/* API */
/* Layers that are KV-shared (read a donor's K/V), MoE layers. */
int32_t mdl_plan_count_shared(const mdl_plan *p);
int32_t mdl_plan_count_moe(const mdl_plan *p);
/* The plan of cfg's family. *p is filled (its layer array OWNED: mdl_plan_free). */
kiln_code mdl_plan_build(const wt_config *cfg, mdl_plan *p, kiln_err *err);
void mdl_plan_free(mdl_plan *p);
/* The KV layout the plan needs (kv_layout.h): the layers that store K/V, each
 * in its geometry, in groups by window: group 0 the full-attention layers (if
 * any), then one group per distinct window. keep_all: every window 0 (the
 * sequence keeps every block; tests compare against it). KILN_E_UNSUPPORTED
 * past KV_FMT_MAX_LAYERS layers or KV_MAX_GROUPS windows. */
kiln_code mdl_kv_layout(const mdl_plan *p, int keep_all, kv_layout *out, kiln_err *err);
/* f32 values of a DeltaNet layer's state per sequence: the conv's last K-1
 * pre-conv rows [(K-1), C] then S [Hv, Dk, Dv] (C = 2 Hk Dk + Hv Dv); 0 for
 * other kinds. */
int64_t mdl_plan_state_floats(const mdl_layer_plan *l);
/* 1 when layer L writes K/V of its own into the cache (an attention layer that
 * is its own kv_src). */
static inline int mdl_plan_stores_kv(const mdl_plan *p, int32_t L)
{
    return p->layer[L].mixer == MDL_MIX_ATTN && p->layer[L].kv_src == L;
}

#endif
