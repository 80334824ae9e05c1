/*
 * mdl_plan.c — config.json → per-layer kinds and geometry, one rule per family.
 *
 * Llama family (Llama, Mistral, Qwen2, Qwen3): every layer is softmax attention
 * (one RoPE, GQA, head_dim^-0.5 scale) + a SwiGLU MLP. Sliding windows: Mistral
 * slides on every layer; Qwen2/3 with use_sliding_window on layers >=
 * max_window_layers (wt_config.h). Qwen3 adds per-head q/k norms, Qwen2 q/k/v
 * biases (attention_bias), Llama optional attention/MLP biases.
 * Qwen3.5 hybrid (plan_qwen35): every full_attention_interval-th layer is gated
 * attention (q/k norms, partial RoPE, sigmoid output gate), the others gated
 * DeltaNet (docs/hybrid.md); SwiGLU MLPs; `1 + w` norms in HF-layout files
 * (the loader decides: mdl_load.c, never the config).
 * Gemma 3 / Gemma 4: mdl_plan_gemma.c (mdl_family.h).
 * A new family adds a rule here (its layer kinds), tensors in its loader, and
 * nothing in the step: the step runs kinds, not families.
 */
#include "model/mdl_plan.h"
#include "model/mdl_family.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t mdl_plan_state_floats(const mdl_layer_plan *l)
{
    if (l->mixer != MDL_MIX_DELTANET) return 0;
    int64_t C = 2 * (int64_t)l->lin_k_heads * l->lin_k_dim + (int64_t)l->lin_v_heads * l->lin_v_dim;
    return (int64_t)(l->conv_k - 1) * C +
           (int64_t)l->lin_v_heads * l->lin_k_dim * (int64_t)l->lin_v_dim;
}

static void plan_maxima(mdl_plan *p)
{
    for (int32_t L = 0; L < p->n_layers; L++) {
        const mdl_layer_plan *l = &p->layer[L];
        int64_t q = (int64_t)l->n_heads * l->head_dim, kv = (int64_t)l->n_kv_heads * l->head_dim;
        int64_t mix = 0;
        if (l->mixer == MDL_MIX_DELTANET) { /* qkv, z, b, a, output (mdl_delta.c) */
            int64_t vd = (int64_t)l->lin_v_heads * l->lin_v_dim;
            mix = 2 * (int64_t)l->lin_k_heads * l->lin_k_dim + vd + vd + 2 * l->lin_v_heads + vd;
            if (l->lin_v_dim > p->max_lin_dv) p->max_lin_dv = l->lin_v_dim;
        } else if (l->attn_gate) {
            mix = 2 * q; /* the raw q_proj output: [query, gate] per head */
        }
        if (mix > p->max_mix) p->max_mix = mix;
        if (q > p->max_q) p->max_q = q;
        if (kv > p->max_kv) p->max_kv = kv;
        if (l->ffn_dim > p->max_ffn) p->max_ffn = l->ffn_dim;
        if (l->ffn == MDL_FFN_MOE) {
            if (l->moe.ffn_dim > p->max_ffn) p->max_ffn = l->moe.ffn_dim;
            if (l->moe.n_experts > p->max_experts) p->max_experts = l->moe.n_experts;
            if (l->moe.top_k > p->max_top_k) p->max_top_k = l->moe.top_k;
        }
        if (l->n_heads > p->max_heads) p->max_heads = l->n_heads;
        if (l->n_kv_heads > p->max_kv_heads) p->max_kv_heads = l->n_kv_heads;
        if (l->head_dim > p->max_head_dim) p->max_head_dim = l->head_dim;
    }
    if (p->pli_dim > p->max_ffn) p->max_ffn = p->pli_dim; /* the gate's [T, P] rows use s->g */
    p->rope_floats = 0;
    for (int32_t r = 0; r < p->n_ropes; r++)
        p->rope_floats += p->rope[r].rot;
}

/* Rotated dims: head_dim x partial_rotary_factor, even. */
static int32_t rope_dims(int64_t head_dim, double prf)
{
    if (!(prf > 0)) prf = 1.0;
    return (int32_t)((double)head_dim * prf) & ~1;
}

static kiln_code plan_llama(const wt_config *c, mdl_plan *p, kiln_err *err)
{
    int32_t rot = rope_dims(c->head_dim, c->rope.partial_rotary_factor);
    if (rot <= 0 || rot > c->head_dim)
        return kiln_fail(err, KILN_E_INVALID, "config.json: rotary dims %d for head_dim %d",
                         (int)rot, (int)c->head_dim);
    p->n_ropes = 1;
    p->rope[0] = (mdl_rope_spec){.head_dim = (int32_t)c->head_dim,
                                 .rot = rot,
                                 .theta = c->rope_theta,
                                 .scaling = c->rope,
                                 .max_pos = c->max_pos};
    for (int32_t L = 0; L < p->n_layers; L++) {
        mdl_layer_plan *l = &p->layer[L];
        l->mixer = MDL_MIX_ATTN;
        l->n_heads = (int32_t)c->n_heads;
        l->n_kv_heads = (int32_t)c->n_kv_heads;
        l->head_dim = (int32_t)c->head_dim;
        l->kv_src = L;
        l->rope = 0;
        l->attn_scale = 1.0f / sqrtf((float)c->head_dim);
        l->qk_norm = c->qk_norm;
        l->q_bias = l->k_bias = l->v_bias = c->attention_bias;
        l->window = 0;
        if (c->sliding_window > 0 && (c->max_window_layers <= 0 || L >= c->max_window_layers))
            l->window = (int32_t)c->sliding_window;
        l->ffn = MDL_FFN_DENSE;
        l->ffn_dim = c->intermediate;
        l->act = MDL_ACT_SILU;
        l->mlp_bias = c->mlp_bias;
    }
    p->embed_scale = 1.0f;
    p->norm_add = 0.0f;
    return KILN_OK;
}

/* Qwen3.5: the config's layer_linear (wt_config_qwen35 checked it against
 * full_attention_interval) picks each layer's mixer. */
static kiln_code plan_qwen35(const wt_config *c, mdl_plan *p, kiln_err *err)
{
    kiln_code rc = plan_llama(c, p, err); /* attention geometry, rope, MLP */
    if (rc) return rc;
    if (!c->layer_linear)
        return kiln_fail(err, KILN_E_INVALID, "config.json: hybrid model without layer types");
    if (c->lin_conv < 1 || c->lin_conv > 64)
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "config.json: linear_conv_kernel_dim %lld (kiln runs 1..64)",
                         (long long)c->lin_conv);
    for (int32_t L = 0; L < p->n_layers; L++) {
        mdl_layer_plan *l = &p->layer[L];
        l->attn_gate = c->attn_output_gate;
        if (!c->layer_linear[L]) continue;
        l->mixer = MDL_MIX_DELTANET;
        l->n_heads = l->n_kv_heads = 0;
        l->kv_src = -1;
        l->rope = -1;
        l->qk_norm = l->attn_gate = false;
        l->q_bias = l->k_bias = l->v_bias = false;
        l->lin_k_heads = (int32_t)c->lin_k_heads;
        l->lin_v_heads = (int32_t)c->lin_v_heads;
        l->lin_k_dim = (int32_t)c->lin_k_dim;
        l->lin_v_dim = (int32_t)c->lin_v_dim;
        l->conv_k = (int32_t)c->lin_conv;
    }
    p->norm_add = 1.0f; /* HF layout; mdl_load keys it on the checkpoint's layout */
    return KILN_OK;
}

kiln_code mdl_plan_build(const wt_config *c, mdl_plan *p, kiln_err *err)
{
    memset(p, 0, sizeof *p);
    if (c->n_layers <= 0 || c->n_layers > 4096 || c->head_dim <= 0 || c->head_dim > 65536 ||
        c->n_heads <= 0 || c->n_kv_heads <= 0 || c->sliding_window > INT32_MAX)
        return kiln_fail(err, KILN_E_INVALID, "config.json: %lld layers of %lld heads x %lld",
                         (long long)c->n_layers, (long long)c->n_heads, (long long)c->head_dim);
    p->n_layers = (int32_t)c->n_layers;
    p->hidden = c->hidden;
    p->vocab = c->vocab;
    p->layer = calloc((size_t)p->n_layers, sizeof *p->layer);
    if (!p->layer) return kiln_fail(err, KILN_E_NOMEM, "model plan: out of memory");
    kiln_code rc;
    switch (c->arch) {
    case WT_ARCH_LLAMA:
    case WT_ARCH_MISTRAL:
    case WT_ARCH_QWEN2:
    case WT_ARCH_QWEN3:
        rc = plan_llama(c, p, err);
        break;
    case WT_ARCH_QWEN3_5:
        rc = plan_qwen35(c, p, err);
        break;
    case WT_ARCH_GEMMA3:
    case WT_ARCH_GEMMA3_MM:
        rc = mdl_plan_gemma3(c, p, err);
        break;
    case WT_ARCH_GEMMA4:
    case WT_ARCH_GEMMA4_TEXT:
        rc = mdl_plan_gemma4(c, p, err);
        break;
    default:
        rc = kiln_fail(err, KILN_E_UNSUPPORTED, "architecture '%s' has no layer plan",
                       c->architecture);
    }
    if (rc) {
        mdl_plan_free(p);
        return rc;
    }
    plan_maxima(p);
    return KILN_OK;
}

kiln_code mdl_kv_layout(const mdl_plan *p, int keep_all, kv_layout *out, kiln_err *err)
{
    memset(out, 0, sizeof *out);
    if (p->n_layers > KV_FMT_MAX_LAYERS)
        return kiln_fail(err, KILN_E_UNSUPPORTED, "%d layers (kiln's KV cache takes at most %d)",
                         (int)p->n_layers, KV_FMT_MAX_LAYERS);
    out->n_layers = p->n_layers;
    int any_full = 0, any_state = 0;
    for (int32_t L = 0; L < p->n_layers; L++) {
        int64_t sf = mdl_plan_state_floats(&p->layer[L]);
        if (sf > UINT32_MAX)
            return kiln_fail(err, KILN_E_UNSUPPORTED, "layer %d: recurrent state too large",
                             (int)L);
        out->state_floats[L] = (uint32_t)sf;
        any_state |= sf > 0;
    }
    for (int32_t L = 0; L < p->n_layers; L++)
        any_full |= mdl_plan_stores_kv(p, L) && p->layer[L].window == 0;
    out->n_groups = any_full; /* group 0: full attention */
    for (int32_t L = 0; L < p->n_layers; L++) {
        const mdl_layer_plan *l = &p->layer[L];
        out->head_dim[L] = l->head_dim > 0 ? l->head_dim : p->max_head_dim;
        out->n_kv_heads[L] = l->n_kv_heads;
        out->group[L] = -1;
        if (!mdl_plan_stores_kv(p, L)) continue;
        int g = 0;
        if (l->window > 0) {
            g = any_full;
            while (g < out->n_groups && out->window[g] != l->window)
                g++;
            if (g == out->n_groups) {
                if (g == KV_MAX_GROUPS)
                    return kiln_fail(err, KILN_E_UNSUPPORTED,
                                     "more than %d distinct sliding windows", KV_MAX_GROUPS - 1);
                out->window[out->n_groups++] = l->window;
            }
        }
        out->group[L] = (int8_t)g;
    }
    if (out->n_groups == 0 && !any_state)
        return kiln_fail(err, KILN_E_UNSUPPORTED, "no layer stores K/V or recurrent state");
    if (keep_all) kv_layout_keep_all(out);
    return KILN_OK;
}

int32_t mdl_plan_count_shared(const mdl_plan *p)
{
    int32_t n = 0;
    for (int32_t L = 0; L < p->n_layers; L++)
        n += p->layer[L].mixer == MDL_MIX_ATTN && p->layer[L].kv_src != L;
    return n;
}

int32_t mdl_plan_count_moe(const mdl_plan *p)
{
    int32_t n = 0;
    for (int32_t L = 0; L < p->n_layers; L++)
        n += p->layer[L].ffn == MDL_FFN_MOE;
    return n;
}

void mdl_plan_free(mdl_plan *p)
{
    free(p->layer);
    p->layer = NULL;
}
