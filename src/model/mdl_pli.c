/*
 * mdl_pli.c — per-layer inputs (Gemma 4 e2b/e4b; design/models/gemma4.md
 * §4.1, §4.5): every layer gets its own P-wide input per token, made once per
 * step from the token id and the scaled embedding, and gates it into the
 * residual after the layer's feed-forward block.
 *
 *   pe  = embed_tokens_per_layer[id] · sqrt(P)                 [L·P], layer i: cols iP..iP+P-1
 *   pr  = RMSNorm_P((x · per_layer_model_projectionᵀ) · H^-1/2, per_layer_projection_norm)
 *   pli = (pr + pe) · 2^-1/2                                   (mdl_pli_inputs, x scaled)
 *   layer i:  g = gelu_tanh(x · per_layer_input_gateᵀ) ⊙ pli[:, i]
 *             x += RMSNorm(g · per_layer_projectionᵀ, post_per_layer_input_norm)
 *
 * The table is gathered (one row per token), never streamed: at 4 bits it is
 * the largest tensor of e2b/e4b yet costs decode only L·P codes per token.
 * Every row depends only on its token: batch and chunk invariant.
 */
#include "kernels/kn_ops.h"
#include "model/mdl_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t mdl_pli_scratch_bytes(const mdl_plan *p, int n_threads, int64_t T)
{
    if (p->pli_dim == 0) return 0;
    int64_t lp = (int64_t)p->n_layers * p->pli_dim;
    int64_t tg = T < MDL_PLI_FUSED_MAX_TOKENS ? T : MDL_PLI_FUSED_MAX_TOKENS;
    return sizeof(float) * (size_t)((T + n_threads) * lp + n_threads * tg * p->pli_dim) + 64 * 3;
}

kiln_code mdl_pli_alloc(mdl_step *s, arena *a, kiln_err *err)
{
    const mdl_plan *p = &s->m->plan;
    s->pli = s->pli_tmp = s->pli_g = NULL;
    if (p->pli_dim == 0) return KILN_OK;
    int64_t lp = (int64_t)p->n_layers * p->pli_dim;
    int64_t tg = s->T < MDL_PLI_FUSED_MAX_TOKENS ? s->T : MDL_PLI_FUSED_MAX_TOKENS;
    int threads = kn_pool_threads(s->pool);
    s->pli = ARENA_ARRAY(a, float, (int64_t)s->T *lp);
    s->pli_tmp = ARENA_ARRAY(a, float, (int64_t)threads *lp);
    s->pli_g = ARENA_ARRAY(a, float, (int64_t)threads *tg * p->pli_dim);
    if (!s->pli || !s->pli_tmp || !s->pli_g)
        return kiln_fail(err, KILN_E_INTERNAL, "model step: scratch arena too small");
    return KILN_OK;
}

/* pr (already in s->pli) normed per layer, plus the table's row. */
static void input_rows(void *ctx, int64_t t0, int64_t t1, int tid)
{
    mdl_step *s = ctx;
    const mdl_model *m = s->m;
    int64_t P = m->plan.pli_dim, L = m->plan.n_layers, lp = L * P;
    float eps = (float)m->cfg.rms_eps, hs = 1.0f / sqrtf((float)m->plan.hidden);
    float ps = sqrtf((float)P), mix = 1.0f / sqrtf(2.0f);
    float *pe = s->pli_tmp + (int64_t)tid * lp;
    for (int64_t t = t0; t < t1; t++) {
        const mdl_seq *sq = &s->seqs[s->tok_seq[t]];
        int32_t id = sq->tokens[s->tok_pos[t] - sq->pos0];
        float *pr = s->pli + t * lp;
        kn_mat_row(&m->pli_embed, id, pe);
        for (int64_t i = 0; i < lp; i++)
            pr[i] *= hs;
        for (int64_t l = 0; l < L; l++)
            kn_rmsnorm(pr + l * P, pr + l * P, m->pli_norm, P, eps, 0.0f);
        for (int64_t i = 0; i < lp; i++)
            pr[i] = (pr[i] + pe[i] * ps) * mix;
    }
}

void mdl_pli_inputs(mdl_step *s)
{
    if (!s->pli) return;
    kn_matmul(s->pool, &s->m->pli_proj, s->x, s->T, s->pli);
    kn_pool_for(s->pool, s->T, s->grain, input_rows, s);
}

static void gate_rows(void *ctx, int64_t t0, int64_t t1, int tid)
{
    (void)tid;
    mdl_step *s = ctx;
    int64_t P = s->m->plan.pli_dim, lp = (int64_t)s->m->plan.n_layers * P;
    float *g = s->g;
    for (int64_t t = t0; t < t1; t++)
        kn_gelu_tanh_mul(g + t * P, g + t * P, s->pli + t * lp + (int64_t)s->layer * P, P);
}

/* One chunk of the fused job: the whole gate g = gelu(x·Gᵀ) ⊙ pli for every
 * token (P rows: each chunk makes its own copy, bitwise what kn_matmul and
 * gate_rows give, since every y[t][r] is independent of the row range), then
 * its rows [r0, r1) of the projection. A barrier less per layer for a second
 * read of the P×H gate (~1% of an e4b layer's bytes). */
static void fused_rows(void *ctx, int64_t r0, int64_t r1, int tid)
{
    mdl_step *s = ctx;
    const mdl_pli *g = &s->ly->pli;
    int64_t P = s->m->plan.pli_dim, lp = (int64_t)s->m->plan.n_layers * P, T = s->T;
    float *gt = s->pli_g + (int64_t)tid * T * P;
    kn_matmul_rows(&g->gate, s->x, T, gt, 0, P);
    for (int64_t t = 0; t < T; t++)
        kn_gelu_tanh_mul(gt + t * P, gt + t * P, s->pli + t * lp + (int64_t)s->layer * P, P);
    kn_matmul_rows(&g->proj, gt, T, s->h, r0, r1);
}

void mdl_pli_project(mdl_step *s)
{
    const mdl_pli *g = &s->ly->pli;
    int64_t T = s->T, H = s->m->plan.hidden;
    if (s->fused && T <= MDL_PLI_FUSED_MAX_TOKENS) {
        /* kn_matmul's grain rule, so the projection's chunks keep its row tiles */
        int64_t grain = H < (int64_t)kn_pool_threads(s->pool) * 16 ? 4 : 16;
        kn_pool_for(s->pool, H, grain, fused_rows, s);
        return;
    }
    kn_matmul(s->pool, &g->gate, s->x, T, s->g); /* [T, P]: P <= max_ffn (mdl_plan) */
    kn_pool_for(s->pool, T, s->grain, gate_rows, s);
    kn_matmul(s->pool, &g->proj, s->g, T, s->h);
}

void mdl_pli_forward(mdl_step *s)
{
    int64_t T = s->T, H = s->m->plan.hidden;
    mdl_pli_project(s);
    mdl_norm_rows(s, s->h, s->h, s->ly->pli.post_norm, H);
    kn_add(s->x, s->h, T * H);
}

kiln_code mdl_pli_load_model(mdl_model *m, kiln_err *err)
{
    const mdl_plan *p = &m->plan;
    if (p->pli_dim == 0) return KILN_OK;
    int64_t lp = (int64_t)p->n_layers * p->pli_dim;
    char n[200];
    kiln_code rc;
    snprintf(n, sizeof n, "%sembed_tokens_per_layer", m->prefix);
    if ((rc = mdl_load_mat(m, n, p->pli_vocab, lp, &m->pli_embed, err))) return rc;
    snprintf(n, sizeof n, "%sper_layer_model_projection", m->prefix);
    if ((rc = mdl_load_mat(m, n, lp, p->hidden, &m->pli_proj, err))) return rc;
    snprintf(n, sizeof n, "%sper_layer_projection_norm.weight", m->prefix);
    return mdl_load_vec(m, n, p->pli_dim, 0, p->norm_add, &m->pli_norm, err);
}

kiln_code mdl_pli_load(mdl_model *m, int32_t L, const char *lp, kiln_err *err)
{
    mdl_pli *g = &m->layers[L].pli;
    int64_t P = m->plan.pli_dim, H = m->plan.hidden;
    char n[320];
    kiln_code rc;
    snprintf(n, sizeof n, "%s.per_layer_input_gate", lp);
    if ((rc = mdl_load_mat(m, n, P, H, &g->gate, err))) return rc;
    snprintf(n, sizeof n, "%s.per_layer_projection", lp);
    if ((rc = mdl_load_mat(m, n, H, P, &g->proj, err))) return rc;
    snprintf(n, sizeof n, "%s.post_per_layer_input_norm.weight", lp);
    return mdl_load_vec(m, n, H, 0, m->plan.norm_add, &g->post_norm, err);
}

void mdl_pli_free(mdl_pli *g)
{
    free(g->post_norm);
}
