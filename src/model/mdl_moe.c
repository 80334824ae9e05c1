/*
 * mdl_moe.c — the mixture-of-experts feed-forward kind: a router picks each
 * token's top-k experts and their weights, the tokens of the step are grouped
 * by expert so that each expert's matrices are read once per step for every
 * token routed to it (decode reads only the chosen experts), and the weighted
 * expert outputs are summed. Gemma 4 (26B-A4B) runs a dense MLP beside the
 * experts (design/models/gemma4.md §4.4):
 *
 *   h1 = post_norm_1(mlp(pre_ffn_norm(x)))           the dense branch (mdl_mlp)
 *   r  = RMSNorm(x) · router.scale · H^-1/2;  logits = r · router.projᵀ
 *   top-k by logit; w = softmax over the k chosen logits · per_expert_scale[e]
 *   h2 = post_norm_2(Σ_e w_e · down_e(gelu(gate_e u) ⊙ up_e u)),  u = pre_norm_2(x)
 *   out = h1 + h2        (the step then applies post_feedforward_layernorm)
 *
 * The same kind without the dense branch, with the router on the block's
 * normed input and softmax over all experts (renorm off) is Qwen3-MoE's.
 *
 * Determinism: a token's experts depend only on its own logits; ties go to
 * the lower expert id. Its output is accumulated expert by expert in
 * ascending id order, each expert's rows by the same batch-invariant matmul
 * as dense layers (kn_matmul, every weight format), so a token's result is
 * bitwise the same whatever else is in the step.
 * Tensors (after the layer prefix; mdl_moe_load takes any of these layouts):
 *   router.proj [E, H], router.scale [H], router.per_expert_scale [E]   (Gemma 4)
 *   experts.gate_up_proj [E, 2F, H] + experts.down_proj [E, H, F]        (HF, fused)
 *   experts.switch_glu.{gate,up,down}_proj(.weight/.scales/.biases)     (mlx-lm)
 *   mlp.gate [E, H]; mlp.switch_mlp.* (mlx) or mlp.experts.e.* (HF)      (Qwen3-MoE)
 * Contract: reads s->h (pre_ffn_norm(x)) and s->x, leaves the output in s->h.
 */
#include "kernels/kn_ops.h"
#include "model/mdl_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    float *u;       /* [T, H] expert input */
    float *r;       /* [T, H] router input */
    float *logits;  /* [T, E] */
    int32_t *sel;   /* [T, k] chosen experts, ascending id */
    float *wsel;    /* [T, k] their weights */
    int32_t *first; /* [E + 1] start of each expert's entries in list */
    int32_t *fill;  /* [E] */
    int32_t *list;  /* [T * k] token * k + slot, grouped by expert */
    float *a;       /* [T, H] one expert's gathered inputs */
    float *y;       /* [T, H] its outputs */
    float *acc;     /* [T, H] */
} moe_scratch;

/* ---------------------------------------------------------------- sizing */

size_t mdl_moe_scratch_bytes(const mdl_plan *p, int64_t T)
{
    if (p->max_experts == 0) return 0;
    size_t f = (size_t)T * (size_t)(5 * p->hidden + p->max_experts + p->max_top_k);
    size_t i = (size_t)T * 2 * (size_t)p->max_top_k + 2 * (size_t)p->max_experts + 1;
    return sizeof(moe_scratch) + 4 * (f + i) + 64 * 12;
}

kiln_code mdl_moe_alloc(mdl_step *s, arena *a, kiln_err *err)
{
    const mdl_plan *p = &s->m->plan;
    s->moe = NULL;
    if (p->max_experts == 0) return KILN_OK;
    int64_t T = s->T, H = p->hidden, k = p->max_top_k;
    moe_scratch *ms = ARENA_ARRAY(a, moe_scratch, 1);
    if (!ms) return kiln_fail(err, KILN_E_INTERNAL, "model step: scratch arena too small");
    ms->u = ARENA_ARRAY(a, float, T *H);
    ms->r = ARENA_ARRAY(a, float, T *H);
    ms->a = ARENA_ARRAY(a, float, T *H);
    ms->y = ARENA_ARRAY(a, float, T *H);
    ms->acc = ARENA_ARRAY(a, float, T *H);
    ms->logits = ARENA_ARRAY(a, float, T * p->max_experts);
    ms->wsel = ARENA_ARRAY(a, float, T *k);
    ms->sel = ARENA_ARRAY(a, int32_t, T * k);
    ms->list = ARENA_ARRAY(a, int32_t, T * k);
    ms->first = ARENA_ARRAY(a, int32_t, p->max_experts + 1);
    ms->fill = ARENA_ARRAY(a, int32_t, p->max_experts);
    if (!ms->u || !ms->r || !ms->a || !ms->y || !ms->acc || !ms->logits || !ms->wsel || !ms->sel ||
        !ms->list || !ms->first || !ms->fill)
        return kiln_fail(err, KILN_E_INTERNAL, "model step: scratch arena too small");
    s->moe = ms;
    return KILN_OK;
}

/* ---------------------------------------------------------------- routing */

/* Top-k of one token's logits (ties: the lower id) and their weights. */
static void route_token(const mdl_moe_plan *mp, const float *expert_scale, const float *lg,
                        int32_t *sel, float *w)
{
    int32_t E = mp->n_experts, k = mp->top_k;
    int32_t pick[64] = {0};
    float val[64] = {0};
    for (int32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (int32_t e = 0; e < E; e++) {
            int taken = 0;
            for (int32_t i = 0; i < j && !taken; i++)
                taken = pick[i] == e;
            if (!taken && (best < 0 || lg[e] > lg[best])) best = e;
        }
        pick[j] = best;
        val[j] = lg[best];
    }
    /* softmax over the chosen (renorm) or over all experts, in a fixed order */
    float mx = val[0], sum = 0.0f;
    if (mp->renorm) {
        for (int32_t j = 0; j < k; j++)
            sum += val[j] = expf(val[j] - mx);
    } else {
        for (int32_t e = 0; e < E; e++)
            mx = lg[e] > mx ? lg[e] : mx;
        for (int32_t e = 0; e < E; e++)
            sum += expf(lg[e] - mx);
        for (int32_t j = 0; j < k; j++)
            val[j] = expf(val[j] - mx);
    }
    for (int32_t j = 0; j < k; j++) {
        val[j] /= sum;
        if (expert_scale) val[j] *= expert_scale[pick[j]];
    }
    /* ascending expert id: the order the token's outputs are summed in */
    for (int32_t j = 0; j < k; j++) {
        int32_t m = j;
        for (int32_t i = j + 1; i < k; i++)
            if (pick[i] < pick[m]) m = i;
        int32_t te = pick[j];
        float tv = val[j];
        pick[j] = pick[m], val[j] = val[m];
        pick[m] = te, val[m] = tv;
        sel[j] = pick[j];
        w[j] = val[j];
    }
}

static void route_rows(void *ctx, int64_t t0, int64_t t1, int tid)
{
    (void)tid;
    mdl_step *s = ctx;
    moe_scratch *ms = s->moe;
    const mdl_moe_plan *mp = &s->ly->p->moe;
    for (int64_t t = t0; t < t1; t++)
        route_token(mp, s->ly->moe.expert_scale, ms->logits + t * mp->n_experts,
                    ms->sel + t * mp->top_k, ms->wsel + t * mp->top_k);
}

/* Counting sort of the (token, slot) pairs by expert: ascending tokens within
 * each expert. */
static void group_by_expert(moe_scratch *ms, int64_t T, int32_t E, int32_t k)
{
    memset(ms->first, 0, sizeof(int32_t) * (size_t)(E + 1));
    for (int64_t i = 0; i < T * k; i++)
        ms->first[ms->sel[i] + 1]++;
    for (int32_t e = 0; e < E; e++)
        ms->first[e + 1] += ms->first[e];
    memcpy(ms->fill, ms->first, sizeof(int32_t) * (size_t)E);
    for (int64_t i = 0; i < T * k; i++)
        ms->list[ms->fill[ms->sel[i]]++] = (int32_t)i;
}

/* ---------------------------------------------------------------- experts */

typedef struct {
    mdl_step *s;
    const int32_t *ent; /* the expert's entries (token * k + slot) */
    int64_t n;
    int32_t k;
} expert_job;

static void gather_rows(void *ctx, int64_t i0, int64_t i1, int tid)
{
    (void)tid;
    expert_job *j = ctx;
    moe_scratch *ms = j->s->moe;
    int64_t H = j->s->m->plan.hidden;
    for (int64_t i = i0; i < i1; i++)
        memcpy(ms->a + i * H, ms->u + (int64_t)(j->ent[i] / j->k) * H, sizeof(float) * (size_t)H);
}

static void act_rows(void *ctx, int64_t i0, int64_t i1, int tid)
{
    (void)tid;
    expert_job *j = ctx;
    const mdl_layer_plan *p = j->s->ly->p;
    int64_t F = p->moe.ffn_dim;
    float *g = j->s->g, *u = j->s->u;
    for (int64_t i = i0; i < i1; i++) {
        if (p->act == MDL_ACT_GELU_TANH)
            kn_gelu_tanh_mul(g + i * F, g + i * F, u + i * F, F);
        else
            kn_silu_mul(g + i * F, g + i * F, u + i * F, F);
    }
}

/* acc[token] += w * y[i]: one entry per token within an expert, so no two
 * threads touch one row. */
static void scatter_rows(void *ctx, int64_t i0, int64_t i1, int tid)
{
    (void)tid;
    expert_job *j = ctx;
    moe_scratch *ms = j->s->moe;
    int64_t H = j->s->m->plan.hidden;
    for (int64_t i = i0; i < i1; i++) {
        int32_t e = j->ent[i];
        kn_axpy(ms->acc + (int64_t)(e / j->k) * H, ms->wsel[e], ms->y + i * H, H);
    }
}

static void run_expert(mdl_step *s, int32_t e)
{
    moe_scratch *ms = s->moe;
    const mdl_moe *mo = &s->ly->moe;
    const mdl_moe_plan *mp = &s->ly->p->moe;
    expert_job j = {.s = s,
                    .ent = ms->list + ms->first[e],
                    .n = ms->first[e + 1] - ms->first[e],
                    .k = mp->top_k};
    if (j.n == 0) return; /* never read: decode touches only the chosen experts */
    int64_t grain = j.n > 64 ? 16 : 1;
    kn_pool_for(s->pool, j.n, grain, gather_rows, &j);
    kn_matmul(s->pool, &mo->gate[e], ms->a, j.n, s->g);
    kn_matmul(s->pool, &mo->up[e], ms->a, j.n, s->u);
    kn_pool_for(s->pool, j.n, grain, act_rows, &j);
    kn_matmul(s->pool, &mo->down[e], s->g, j.n, ms->y);
    kn_pool_for(s->pool, j.n, grain, scatter_rows, &j);
}

/* ---------------------------------------------------------------- the stage */

void mdl_moe_forward(mdl_step *s)
{
    moe_scratch *ms = s->moe;
    const mdl_layer *ly = s->ly;
    const mdl_moe *mo = &ly->moe;
    const mdl_moe_plan *mp = &ly->p->moe;
    int64_t T = s->T, H = s->m->plan.hidden;
    /* expert and router inputs, before the dense branch overwrites s->h */
    if (mp->dense_branch)
        mdl_norm_rows(s, ms->u, s->x, mo->pre_norm_2, H);
    else
        memcpy(ms->u, s->h, sizeof(float) * (size_t)(T * H));
    const float *rin = ms->u;
    if (mp->input == MDL_ROUTER_ON_RESIDUAL) {
        mdl_norm_rows(s, ms->r, s->x, mo->router_scale, H);
        rin = ms->r;
    } else if (mp->dense_branch) {
        rin = s->h;
    }
    kn_matmul(s->pool, &mo->router, rin, T, ms->logits);
    kn_pool_for(s->pool, T, s->grain, route_rows, s);
    if (mp->dense_branch) {
        mdl_mlp_forward(s); /* s->h = the dense MLP of pre_ffn_norm(x) */
        mdl_norm_rows(s, s->h, s->h, mo->post_norm_1, H);
    }
    group_by_expert(ms, T, mp->n_experts, mp->top_k);
    memset(ms->acc, 0, sizeof(float) * (size_t)(T * H));
    for (int32_t e = 0; e < mp->n_experts; e++)
        run_expert(s, e);
    if (mp->dense_branch) {
        mdl_norm_rows(s, ms->acc, ms->acc, mo->post_norm_2, H);
        kn_add(s->h, ms->acc, T * H);
    } else {
        memcpy(s->h, ms->acc, sizeof(float) * (size_t)(T * H));
    }
}

/* ---------------------------------------------------------------- loading */

/* The experts' matrices in whichever layout the checkpoint has. */
static kiln_code load_experts(mdl_model *m, int32_t L, const char *lp, kiln_err *err)
{
    mdl_moe *mo = &m->layers[L].moe;
    const mdl_moe_plan *mp = &m->plan.layer[L].moe;
    int64_t E = mp->n_experts, F = mp->ffn_dim, H = m->plan.hidden;
    char path[320], name[340];
    kiln_code rc;
    snprintf(path, sizeof path, "%s.experts.gate_up_proj", lp);
    snprintf(name, sizeof name, "%s.weight", path);
    if (mdl_has_tensor(m, path) || mdl_has_tensor(m, name)) { /* HF: fused, rows gate then up */
        const char *gu = mdl_has_tensor(m, path) ? path : name;
        if ((rc = mdl_load_experts(m, path, gu, E, 2 * F, 0, F, H, mo->gate, err)) ||
            (rc = mdl_load_experts(m, path, gu, E, 2 * F, F, F, H, mo->up, err)))
            return rc;
        snprintf(path, sizeof path, "%s.experts.down_proj", lp);
        snprintf(name, sizeof name, "%s.weight", path);
        return mdl_load_experts(m, path, mdl_has_tensor(m, path) ? path : name, E, H, 0, H, F,
                                mo->down, err);
    }
    static const char *const split[] = {"experts.switch_glu", "mlp.switch_mlp"};
    for (size_t i = 0; i < sizeof split / sizeof *split; i++) {
        snprintf(name, sizeof name, "%s.%s.gate_proj.weight", lp, split[i]);
        if (!mdl_has_tensor(m, name)) continue;
        static const char *const proj[] = {"gate_proj", "up_proj", "down_proj"};
        kn_mat *dst[] = {mo->gate, mo->up, mo->down};
        for (int j = 0; j < 3; j++) {
            int64_t R = j < 2 ? F : H, C = j < 2 ? H : F;
            snprintf(path, sizeof path, "%s.%s.%s", lp, split[i], proj[j]);
            snprintf(name, sizeof name, "%s.weight", path);
            if ((rc = mdl_load_experts(m, path, name, E, R, 0, R, C, dst[j], err))) return rc;
        }
        return KILN_OK;
    }
    for (int64_t e = 0; e < E; e++) { /* one module per expert (HF Qwen-MoE style) */
        static const char *const proj[] = {"gate_proj", "up_proj", "down_proj"};
        kn_mat *dst[] = {&mo->gate[e], &mo->up[e], &mo->down[e]};
        for (int j = 0; j < 3; j++) {
            snprintf(path, sizeof path, "%s.mlp.experts.%lld.%s", lp, (long long)e, proj[j]);
            if ((rc = mdl_load_mat(m, path, j < 2 ? F : H, j < 2 ? H : F, dst[j], err))) {
                if (e == 0 && j == 0)
                    return kiln_fail(err, KILN_E_NOT_FOUND,
                                     "missing tensor '%s.experts.gate_up_proj' (nor the "
                                     "switch_glu or per-expert layouts)",
                                     lp);
                return rc;
            }
        }
    }
    return KILN_OK;
}

kiln_code mdl_moe_load(mdl_model *m, int32_t L, const char *lp, kiln_err *err)
{
    mdl_moe *mo = &m->layers[L].moe;
    const mdl_moe_plan *mp = &m->plan.layer[L].moe;
    int64_t E = mp->n_experts, H = m->plan.hidden;
    float add = m->plan.norm_add;
    char n[320];
    kiln_code rc;
    if (mp->top_k > 64 || mp->top_k < 1 || mp->top_k > E)
        return kiln_fail(err, KILN_E_UNSUPPORTED, "layer %d: top-%d of %d experts", (int)L,
                         (int)mp->top_k, (int)E);
    mo->gate = calloc((size_t)E, sizeof *mo->gate);
    mo->up = calloc((size_t)E, sizeof *mo->up);
    mo->down = calloc((size_t)E, sizeof *mo->down);
    if (!mo->gate || !mo->up || !mo->down)
        return kiln_fail(err, KILN_E_NOMEM, "layer %d: out of memory", (int)L);
    char w[340];
    snprintf(n, sizeof n, "%s.router.proj", lp); /* Gemma 4; Qwen3-MoE: mlp.gate */
    snprintf(w, sizeof w, "%s.weight", n);
    if (!mdl_has_tensor(m, w)) snprintf(n, sizeof n, "%s.mlp.gate", lp);
    if ((rc = mdl_load_mat(m, n, E, H, &mo->router, err))) return rc;
    if (mp->input == MDL_ROUTER_ON_RESIDUAL) {
        snprintf(n, sizeof n, "%s.router.scale", lp);
        if ((rc = mdl_load_vec(m, n, H, 0, 0.0f, &mo->router_scale, err))) return rc;
        float root = 1.0f / sqrtf((float)H);
        for (int64_t i = 0; i < H; i++)
            mo->router_scale[i] *= root;
    }
    if (mp->per_expert_scale) {
        snprintf(n, sizeof n, "%s.router.per_expert_scale", lp);
        if ((rc = mdl_load_vec(m, n, E, 0, 0.0f, &mo->expert_scale, err))) return rc;
    }
    if ((rc = load_experts(m, L, lp, err))) return rc;
    if (!mp->dense_branch) return KILN_OK;
    snprintf(n, sizeof n, "%s.mlp", lp);
    if ((rc = mdl_mlp_load(m, L, n, err))) return rc;
    snprintf(n, sizeof n, "%s.pre_feedforward_layernorm_2.weight", lp);
    if ((rc = mdl_load_vec(m, n, H, 0, add, &mo->pre_norm_2, err))) return rc;
    snprintf(n, sizeof n, "%s.post_feedforward_layernorm_1.weight", lp);
    if ((rc = mdl_load_vec(m, n, H, 0, add, &mo->post_norm_1, err))) return rc;
    snprintf(n, sizeof n, "%s.post_feedforward_layernorm_2.weight", lp);
    return mdl_load_vec(m, n, H, 0, add, &mo->post_norm_2, err);
}

void mdl_moe_free(mdl_moe *e)
{
    free(e->router_scale);
    free(e->expert_scale);
    free(e->gate);
    free(e->up);
    free(e->down);
    free(e->pre_norm_2);
    free(e->post_norm_1);
    free(e->post_norm_2);
}
