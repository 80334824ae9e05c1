/*
 * mdl_mlp.c — the gated feed-forward block: down(act(gate(x)) ⊙ up(x)), with
 * SiLU (Llama, Qwen, Mistral) or tanh-GELU (Gemma), optional biases.
 * Contract: reads s->h (the normed input, [T, H]), leaves the output in s->h.
 */
#include "kernels/kn_ops.h"
#include "model/mdl_int.h"

#include <stdio.h>
#include <stdlib.h>

static void act_rows(void *ctx, int64_t t0, int64_t t1, int tid)
{
    (void)tid;
    mdl_step *s = ctx;
    const mdl_layer_plan *p = s->ly->p;
    int64_t F = p->ffn_dim;
    for (int64_t t = t0; t < t1; t++) {
        if (p->act == MDL_ACT_GELU_TANH)
            kn_gelu_tanh_mul(s->g + t * F, s->g + t * F, s->u + t * F, F);
        else
            kn_silu_mul(s->g + t * F, s->g + t * F, s->u + t * F, F);
    }
}

void mdl_mlp_forward(mdl_step *s)
{
    const mdl_mlp *f = &s->ly->mlp;
    int64_t T = s->T, F = s->ly->p->ffn_dim, H = s->m->plan.hidden;
    if (s->fused) { /* two pool jobs: gate/up/act, then down (+ the residual add) */
        kn_matmul_glu(s->pool, &f->gate, &f->up, f->b_gate, f->b_up,
                      s->ly->p->act == MDL_ACT_GELU_TANH ? KN_ACT_GELU_TANH : KN_ACT_SILU, s->h,
                      T, s->g, s->u);
        if (s->fold_residual) kn_matmul_residual(s->pool, &f->down, f->b_down, s->g, T, s->h, s->x);
        else {
            kn_matmul(s->pool, &f->down, s->g, T, s->h);
            mdl_add_bias_rows(s->h, f->b_down, T, H);
        }
        return;
    }
    kn_matmul(s->pool, &f->gate, s->h, T, s->g);
    kn_matmul(s->pool, &f->up, s->h, T, s->u);
    mdl_add_bias_rows(s->g, f->b_gate, T, F);
    mdl_add_bias_rows(s->u, f->b_up, T, F);
    mdl_lora_apply(s, MDL_LT_GATE, s->h, H, s->g, F);
    mdl_lora_apply(s, MDL_LT_UP, s->h, H, s->u, F);
    kn_pool_for(s->pool, T, s->grain, act_rows, s);
    kn_matmul(s->pool, &f->down, s->g, T, s->h);
    mdl_add_bias_rows(s->h, f->b_down, T, H);
    mdl_lora_apply(s, MDL_LT_DOWN, s->g, F, s->h, H);
}

kiln_code mdl_mlp_load(mdl_model *m, int32_t L, const char *prefix, kiln_err *err)
{
    mdl_mlp *f = &m->layers[L].mlp;
    const mdl_layer_plan *p = &m->plan.layer[L];
    int64_t H = m->plan.hidden, F = p->ffn_dim;
    char n[320];
    kiln_code rc;
#define MAT(field, sub, r, c)                                                                      \
    snprintf(n, sizeof n, "%s.%s", prefix, sub);                                                   \
    if ((rc = mdl_load_mat(m, n, r, c, &f->field, err))) return rc
#define VEC(field, sub, len)                                                                       \
    snprintf(n, sizeof n, "%s.%s", prefix, sub);                                                   \
    if ((rc = mdl_load_vec(m, n, len, !p->mlp_bias, 0.0f, &f->field, err))) return rc
    MAT(gate, "gate_proj", F, H);
    MAT(up, "up_proj", F, H);
    MAT(down, "down_proj", H, F);
    VEC(b_gate, "gate_proj.bias", F);
    VEC(b_up, "up_proj.bias", F);
    VEC(b_down, "down_proj.bias", H);
#undef MAT
#undef VEC
    return KILN_OK;
}

void mdl_mlp_free(mdl_mlp *f)
{
    free(f->b_gate);
    free(f->b_up);
    free(f->b_down);
}
