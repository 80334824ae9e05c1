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
 * The fused step (s->fused) splits the per-token work off into
 * mdl_moe_in_row / mdl_moe_out_row, which run inside the step's row jobs
 * before and after mdl_moe_forward, and issues the matmuls of a layer as
 * three pool jobs (moe_fused).
 */
#include "kernels/kn_ops.h"
#include "model/mdl_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One matrix of a fused MoE job (moe_job): rows of y = x·Wᵀ (+ b) for its n
 * input rows, or with U rows of act(x·Wᵀ + b) ⊙ (x·Uᵀ + bu), the GLU form. */
typedef struct {
    const kn_mat *W, *U; /* U NULL: a plain matmul */
    const float *b, *bu; /* biases or NULL */
    const float *x;      /* [n, W->cols] */
    int64_t n;
    float *y, *yu;  /* [n, W->rows]; yu: U's output (scratch) */
    int64_t v0, v1; /* its units in the job: a row is 1 unit, 2 in the GLU form */
} moe_piece;

/* Tokens up to which the chosen experts of the whole step run as two pool
 * jobs (their gathered inputs held at once: T·k rows); more tokens run
 * expert by expert (each expert's weights are still read once per step). */
#define MOE_FUSED_MAX_TOKENS 16

typedef struct {
    float *u;       /* [T, H] expert input */
    float *r;       /* [T, H] router input */
    float *logits;  /* [T, E] */
    int32_t *sel;   /* [T, k] chosen experts, ascending id */
    float *wsel;    /* [T, k] their weights */
    int32_t *first; /* [E + 1] start of each expert's entries in list */
    int32_t *fill;  /* [E] */
    int32_t *list;  /* [T * k] token * k + slot, grouped by expert */
    float *a;       /* [cap, H] one expert's gathered inputs (fused: every chosen expert's) */
    float *y;       /* [cap, H] its outputs */
    float *acc;     /* [T, H] */
    float *gg, *uu; /* [cap, max_ffn] the chosen experts' gate / up (fused) */
    int32_t *inv;   /* [T * k] entry (token * k + slot) -> its index in list (fused) */
    moe_piece *pc;  /* [max_experts + 2] */
    int onebatch;   /* this layer's experts ran as one batch: y holds every entry's output */
} moe_scratch;

/* Rows of a and y: every entry of the step when it is small enough to run
 * the chosen experts as one batch, else one expert's tokens (≤ T). Growing in
 * T, so the context's arena (sized at max_tokens) fits every step. */
static int64_t moe_cap(int64_t T, int64_t k)
{
    int64_t small = (T < MOE_FUSED_MAX_TOKENS ? T : MOE_FUSED_MAX_TOKENS) * k;
    return small > T ? small : T;
}

/* ---------------------------------------------------------------- sizing */

size_t mdl_moe_scratch_bytes(const mdl_plan *p, int64_t T)
{
    if (p->max_experts == 0) return 0;
    size_t cap = (size_t)moe_cap(T, p->max_top_k);
    size_t f = (size_t)T * (size_t)(3 * p->hidden + p->max_experts + p->max_top_k) +
               cap * (size_t)(2 * p->hidden + 2 * p->max_ffn);
    size_t i = (size_t)T * 3 * (size_t)p->max_top_k + 2 * (size_t)p->max_experts + 1;
    return sizeof(moe_scratch) + 4 * (f + i) + sizeof(moe_piece) * ((size_t)p->max_experts + 2) +
           64 * 16;
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
    int64_t cap = moe_cap(T, k);
    ms->a = ARENA_ARRAY(a, float, cap *H);
    ms->y = ARENA_ARRAY(a, float, cap *H);
    ms->gg = ARENA_ARRAY(a, float, cap * p->max_ffn);
    ms->uu = ARENA_ARRAY(a, float, cap * p->max_ffn);
    ms->inv = ARENA_ARRAY(a, int32_t, T * k);
    ms->pc = ARENA_ARRAY(a, moe_piece, p->max_experts + 2);
    ms->onebatch = 0;
    ms->acc = ARENA_ARRAY(a, float, T *H);
    ms->logits = ARENA_ARRAY(a, float, T * p->max_experts);
    ms->wsel = ARENA_ARRAY(a, float, T *k);
    ms->sel = ARENA_ARRAY(a, int32_t, T * k);
    ms->list = ARENA_ARRAY(a, int32_t, T * k);
    ms->first = ARENA_ARRAY(a, int32_t, p->max_experts + 1);
    ms->fill = ARENA_ARRAY(a, int32_t, p->max_experts);
    if (!ms->u || !ms->r || !ms->a || !ms->y || !ms->acc || !ms->logits || !ms->wsel || !ms->sel ||
        !ms->list || !ms->first || !ms->fill || !ms->gg || !ms->uu || !ms->inv || !ms->pc)
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
    if (s->fused) /* gate, up and the activation as one job */
        kn_matmul_glu(s->pool, &mo->gate[e], &mo->up[e], NULL, NULL,
                      s->ly->p->act == MDL_ACT_GELU_TANH ? KN_ACT_GELU_TANH : KN_ACT_SILU, ms->a,
                      j.n, s->g, s->u);
    else {
        kn_matmul(s->pool, &mo->gate[e], ms->a, j.n, s->g);
        kn_matmul(s->pool, &mo->up[e], ms->a, j.n, s->u);
        kn_pool_for(s->pool, j.n, grain, act_rows, &j);
    }
    kn_matmul(s->pool, &mo->down[e], s->g, j.n, ms->y);
    kn_pool_for(s->pool, j.n, grain, scatter_rows, &j);
}

/* ---------------------------------------------------------------- the fused step */

typedef struct {
    moe_piece *pc;
    int n;
    kn_act act;
} moe_job;

static void piece_rows(void *ctx, int64_t v0, int64_t v1, int tid)
{
    (void)tid;
    const moe_job *j = ctx;
    for (int i = 0; i < j->n; i++) {
        const moe_piece *p = &j->pc[i];
        if (p->v1 <= v0 || p->v0 >= v1) continue;
        int64_t mult = p->U ? 2 : 1, R = p->W->rows;
        int64_t a = (v0 > p->v0 ? v0 : p->v0) - p->v0, b = (v1 < p->v1 ? v1 : p->v1) - p->v0;
        int64_t r0 = a / mult, r1 = (b + mult - 1) / mult;
        if (r1 > R) r1 = R;
        if (r0 >= r1) continue;
        kn_matmul_rows(p->W, p->x, p->n, p->y, r0, r1);
        if (p->b)
            for (int64_t t = 0; t < p->n; t++)
                kn_add(p->y + t * R + r0, p->b + r0, r1 - r0);
        if (!p->U) continue;
        kn_matmul_rows(p->U, p->x, p->n, p->yu, r0, r1);
        if (p->bu)
            for (int64_t t = 0; t < p->n; t++)
                kn_add(p->yu + t * R + r0, p->bu + r0, r1 - r0);
        for (int64_t t = 0; t < p->n; t++) {
            float *g = p->y + t * R + r0;
            const float *u = p->yu + t * R + r0;
            if (j->act == KN_ACT_GELU_TANH)
                kn_gelu_tanh_mul(g, g, u, r1 - r0);
            else
                kn_silu_mul(g, g, u, r1 - r0);
        }
    }
}

/* The pieces as one pool job over their concatenated rows (a GLU piece's rows
 * count twice, for balance). Each piece starts on a multiple of the grain, so
 * a chunk's rows of a matrix start on a multiple of 8: every kernel's row tile
 * (4) stays whole, and each y[t][r] is bitwise what kn_matmul gives. */
static void run_pieces(mdl_step *s, moe_piece *pc, int n)
{
    const int64_t grain = 16;
    int64_t v = 0;
    for (int i = 0; i < n; i++) {
        pc[i].v0 = v;
        pc[i].v1 = v + pc[i].W->rows * (pc[i].U ? 2 : 1);
        v += (pc[i].v1 - pc[i].v0 + grain - 1) / grain * grain;
    }
    moe_job j = {pc, n, s->ly->p->act == MDL_ACT_GELU_TANH ? KN_ACT_GELU_TANH : KN_ACT_SILU};
    kn_pool_for(s->pool, v, grain, piece_rows, &j);
}

void mdl_moe_in_row(mdl_step *s, int64_t t)
{
    moe_scratch *ms = s->moe;
    const mdl_moe *mo = &s->ly->moe;
    const mdl_moe_plan *mp = &s->ly->p->moe;
    int64_t H = s->m->plan.hidden;
    float eps = (float)s->m->cfg.rms_eps;
    if (mp->dense_branch)
        kn_rmsnorm(ms->u + t * H, s->x + t * H, mo->pre_norm_2, H, eps, 0.0f);
    else
        memcpy(ms->u + t * H, s->h + t * H, sizeof(float) * (size_t)H);
    if (mp->input == MDL_ROUTER_ON_RESIDUAL)
        kn_rmsnorm(ms->r + t * H, s->x + t * H, mo->router_scale, H, eps, 0.0f);
}

void mdl_moe_out_row(mdl_step *s, int64_t t)
{
    moe_scratch *ms = s->moe;
    const mdl_moe *mo = &s->ly->moe;
    const mdl_moe_plan *mp = &s->ly->p->moe;
    int64_t H = s->m->plan.hidden, k = mp->top_k;
    float eps = (float)s->m->cfg.rms_eps;
    float *acc = ms->acc + t * H, *h = s->h + t * H;
    if (ms->onebatch) { /* the token's slots are in ascending expert id: the unfused order */
        memset(acc, 0, sizeof(float) * (size_t)H);
        for (int64_t j = 0; j < k; j++)
            kn_axpy(acc, ms->wsel[t * k + j], ms->y + (int64_t)ms->inv[t * k + j] * H, H);
    }
    if (mp->dense_branch) {
        kn_rmsnorm(h, h, mo->post_norm_1, H, eps, 0.0f);
        kn_rmsnorm(acc, acc, mo->post_norm_2, H, eps, 0.0f);
        kn_add(h, acc, H);
    } else {
        memcpy(h, acc, sizeof(float) * (size_t)H);
    }
}

/* mdl_moe_forward in the fused step: the row job before it made u and r
 * (mdl_moe_in_row), the one after it makes the output (mdl_moe_out_row).
 * Jobs: router + the dense gate/up; then (a step of ≤ MOE_FUSED_MAX_TOKENS
 * tokens) the dense down + every chosen expert's gate/up, and every chosen
 * expert's down: 3 per layer where the unfused step issues 3 per expert. */
static void moe_fused(mdl_step *s)
{
    moe_scratch *ms = s->moe;
    const mdl_layer *ly = s->ly;
    const mdl_moe *mo = &ly->moe;
    const mdl_mlp *f = &ly->mlp;
    const mdl_moe_plan *mp = &ly->p->moe;
    int64_t T = s->T, H = s->m->plan.hidden, k = mp->top_k, Fe = mp->ffn_dim;
    const float *rin = mp->input == MDL_ROUTER_ON_RESIDUAL ? ms->r
                       : mp->dense_branch                  ? s->h
                                                           : ms->u;
    moe_piece *pc = ms->pc;
    int n = 0;
    pc[n++] = (moe_piece){.W = &mo->router, .x = rin, .n = T, .y = ms->logits};
    if (mp->dense_branch)
        pc[n++] = (moe_piece){.W = &f->gate,
                              .U = &f->up,
                              .b = f->b_gate,
                              .bu = f->b_up,
                              .x = s->h,
                              .n = T,
                              .y = s->g,
                              .yu = s->u};
    run_pieces(s, pc, n);
    ms->onebatch = T <= MOE_FUSED_MAX_TOKENS;
    if (ms->onebatch)
        for (int64_t t = 0; t < T; t++)
            route_token(mp, mo->expert_scale, ms->logits + t * mp->n_experts, ms->sel + t * k,
                        ms->wsel + t * k);
    else
        kn_pool_for(s->pool, T, s->grain, route_rows, s);
    group_by_expert(ms, T, mp->n_experts, mp->top_k);
    if (ms->onebatch) {
        for (int64_t i = 0; i < T * k; i++) { /* every entry's input, grouped by expert */
            memcpy(ms->a + i * H, ms->u + (int64_t)(ms->list[i] / k) * H,
                   sizeof(float) * (size_t)H);
            ms->inv[ms->list[i]] = (int32_t)i;
        }
        n = 0;
        if (mp->dense_branch)
            pc[n++] = (moe_piece){.W = &f->down, .b = f->b_down, .x = s->g, .n = T, .y = s->h};
        for (int32_t e = 0; e < mp->n_experts; e++) {
            int64_t e0 = ms->first[e], ne = ms->first[e + 1] - e0;
            if (ne > 0)
                pc[n++] = (moe_piece){.W = &mo->gate[e],
                                      .U = &mo->up[e],
                                      .x = ms->a + e0 * H,
                                      .n = ne,
                                      .y = ms->gg + e0 * Fe,
                                      .yu = ms->uu + e0 * Fe};
        }
        run_pieces(s, pc, n);
        n = 0;
        for (int32_t e = 0; e < mp->n_experts; e++) {
            int64_t e0 = ms->first[e], ne = ms->first[e + 1] - e0;
            if (ne > 0)
                pc[n++] = (moe_piece){
                    .W = &mo->down[e], .x = ms->gg + e0 * Fe, .n = ne, .y = ms->y + e0 * H};
        }
        run_pieces(s, pc, n);
        return;
    }
    if (mp->dense_branch) { /* the dense down now: the experts below reuse s->g, s->u */
        kn_matmul(s->pool, &f->down, s->g, T, s->h);
        mdl_add_bias_rows(s->h, f->b_down, T, H);
    }
    memset(ms->acc, 0, sizeof(float) * (size_t)(T * H));
    for (int32_t e = 0; e < mp->n_experts; e++)
        run_expert(s, e);
}

/* ---------------------------------------------------------------- the stage */

void mdl_moe_forward(mdl_step *s)
{
    if (s->fused) {
        moe_fused(s);
        return;
    }
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
