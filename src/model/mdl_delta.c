/*
 * mdl_delta.c — the gated DeltaNet mixer of hybrid models (Qwen3.5;
 * design/models/qwen3_5.md §4.2, docs/hybrid.md): one layer's projections
 * over all T tokens of the step, then per sequence the causal conv and the
 * gated delta rule carried in the sequence's state block, the gated RMSNorm
 * and the output projection.
 *
 * Per token (Hk key heads of Dk, Hv value heads of Dv, C = 2 Hk Dk + Hv Dv):
 *   qkv = h in_qkvᵀ [C]; z = h in_zᵀ [Hv Dv]; b = h in_bᵀ, a = h in_aᵀ [Hv]
 *   qkv = silu(causal_conv_K(qkv))            the conv's last K-1 raw rows: state
 *   q, k, v = split(qkv); q = q / |q| Dk^-½; k = k / |k|  (|x| = sqrt(Σx² + 1e-6))
 *   β = sigmoid(b); g = exp(-exp(A_log) softplus(a + dt_bias))
 *   per value head j (key head j / (Hv/Hk)): S_j *= g; u = β(v - S_jᵀk);
 *       S_j += k uᵀ; o = S_jᵀq                state: S [Hv, Dk, Dv]
 *   y = RMSNorm(o, norm) * silu(z) per value head; out = y out_projᵀ
 * State layout in the sequence's state block (kv_pool_state_layer): conv
 * rows [(K-1), C] oldest first, then S [Hv][Dk][Dv].
 *
 * Forms: the recurrence always runs in its step form, token by token in
 * position order (kn_gdn_step), for prefill chunks as for decode. A token's
 * result therefore depends only on the state before it and its own inputs: a
 * sequence's bits do not depend on how its prompt is chunked, on which
 * other rows share the step or on the thread count (docs/hybrid.md explains
 * why the chunked form of §4.3 is not used on CPUs).
 * Snapshots: a sequence may ask for copies of its state after given
 * positions (mdl_seq.snap_pos); the conv and the recurrence stop at each of
 * them and copy their part of the state into the snapshot's block.
 * Contract: reads s->h (the normed input, [T, H]), leaves the output in s->h.
 */
#include "kernels/kn_delta.h"
#include "kernels/kn_ops.h"
#include "model/mdl_int.h"
#include "util/half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONV_CHUNK 256 /* channels per conv work item */

typedef struct {
    int64_t Hk, Hv, Dk, Dv, C, K;
    float *qkv, *z, *b, *a, *o; /* [T, C], [T, Hv Dv], [T, Hv] x2, [T, Hv Dv] in s->mix */
} delta_view;

static delta_view view_of(const mdl_step *s)
{
    const mdl_layer_plan *p = s->ly->p;
    delta_view v = {.Hk = p->lin_k_heads,
                    .Hv = p->lin_v_heads,
                    .Dk = p->lin_k_dim,
                    .Dv = p->lin_v_dim,
                    .K = p->conv_k};
    v.C = 2 * v.Hk * v.Dk + v.Hv * v.Dv;
    int64_t T = s->T;
    v.qkv = s->mix;
    v.z = v.qkv + T * v.C;
    v.b = v.z + T * v.Hv * v.Dv;
    v.a = v.b + T * v.Hv;
    v.o = v.a + T * v.Hv;
    return v;
}

/* ---------------------------------------------------------------- conv */

/* One item = (sequence, block of CONV_CHUNK channels): the conv over the
 * sequence's rows, stopping at each snapshot to copy the history. */
static void conv_items(void *ctx, int64_t i0, int64_t i1, int tid)
{
    (void)tid;
    mdl_step *s = ctx;
    delta_view v = view_of(s);
    int64_t nblk = (v.C + CONV_CHUNK - 1) / CONV_CHUNK;
    int32_t L = s->layer;
    for (int64_t it = i0; it < i1; it++) {
        int32_t si = (int32_t)(it / nblk);
        int64_t c0 = (it % nblk) * CONV_CHUNK, c1 = c0 + CONV_CHUNK < v.C ? c0 + CONV_CHUNK : v.C;
        const mdl_seq *sq = &s->seqs[si];
        float *hist = kv_pool_state_layer(s->kv, sq->state, L);
        float *x = v.qkv + (int64_t)s->row0[si] * v.C;
        int32_t t = 0;
        for (int32_t k = 0; k < sq->n_snaps; k++) {
            int32_t end = sq->snap_pos[k] - sq->pos0;
            kn_conv_silu(x + (int64_t)t * v.C, v.C, end - t, hist, v.C, s->ly->delta.conv_w,
                         (int32_t)v.K, c0, c1);
            t = end;
            float *dst = kv_pool_state_layer(s->kv, sq->snap_blocks[k], L);
            for (int64_t r = 0; r < v.K - 1; r++)
                memcpy(dst + r * v.C + c0, hist + r * v.C + c0, sizeof(float) * (size_t)(c1 - c0));
        }
        if (t < sq->n_tokens)
            kn_conv_silu(x + (int64_t)t * v.C, v.C, sq->n_tokens - t, hist, v.C,
                         s->ly->delta.conv_w, (int32_t)v.K, c0, c1);
    }
}

/* ---------------------------------------------------------------- per token */

static float softplus(float x)
{
    return x > 20.0f ? x : log1pf(expf(x)); /* torch's threshold */
}

/* q, k normalised per key head; b -> beta, a -> decay g, per value head. */
static void prep_rows(void *ctx, int64_t t0, int64_t t1, int tid)
{
    (void)tid;
    mdl_step *s = ctx;
    delta_view v = view_of(s);
    const mdl_delta *d = &s->ly->delta;
    float qscale = 1.0f / sqrtf((float)v.Dk);
    for (int64_t t = t0; t < t1; t++) {
        float *row = v.qkv + t * v.C;
        for (int64_t part = 0; part < 2; part++) { /* q heads, then k heads */
            for (int64_t h = 0; h < v.Hk; h++) {
                float *x = row + part * v.Hk * v.Dk + h * v.Dk, ss = 0.0f;
                for (int64_t i = 0; i < v.Dk; i++)
                    ss += x[i] * x[i];
                float inv = 1.0f / sqrtf(ss + 1e-6f);
                if (part == 0) inv *= qscale;
                for (int64_t i = 0; i < v.Dk; i++)
                    x[i] *= inv;
            }
        }
        float *b = v.b + t * v.Hv, *a = v.a + t * v.Hv;
        for (int64_t j = 0; j < v.Hv; j++) {
            b[j] = 1.0f / (1.0f + expf(-b[j]));
            a[j] = expf(d->a_neg[j] * softplus(a[j] + d->dt_bias[j]));
        }
    }
}

/* ---------------------------------------------------------------- recurrence */

/* One item = (sequence, value head): its state S_j through the sequence's
 * tokens, copied into each snapshot on the way. */
static void rec_items(void *ctx, int64_t i0, int64_t i1, int tid)
{
    mdl_step *s = ctx;
    delta_view v = view_of(s);
    float *tmp = s->scratch + (size_t)tid * (size_t)s->attn_scratch;
    int32_t L = s->layer;
    int64_t conv = (v.K - 1) * v.C, hs = v.Dk * v.Dv, rep = v.Hv / v.Hk;
    for (int64_t it = i0; it < i1; it++) {
        int32_t si = (int32_t)(it / v.Hv);
        int64_t j = it % v.Hv, hk = j / rep, r0 = s->row0[si];
        const mdl_seq *sq = &s->seqs[si];
        float *S = kv_pool_state_layer(s->kv, sq->state, L) + conv + j * hs;
        const float *q = v.qkv + r0 * v.C + hk * v.Dk;
        const float *k = q + v.Hk * v.Dk;
        const float *val = v.qkv + r0 * v.C + 2 * v.Hk * v.Dk + j * v.Dv;
        const float *g = v.a + r0 * v.Hv + j, *beta = v.b + r0 * v.Hv + j;
        float *o = v.o + r0 * v.Hv * v.Dv + j * v.Dv;
        int32_t t = 0;
        for (int32_t kk = 0; kk <= sq->n_snaps; kk++) {
            int32_t end = kk < sq->n_snaps ? sq->snap_pos[kk] - sq->pos0 : sq->n_tokens;
            if (end > t)
                kn_gdn_step(S, (int32_t)v.Dk, (int32_t)v.Dv, end - t, q + t * v.C, k + t * v.C, v.C,
                            val + t * v.C, v.C, g + t * v.Hv, beta + t * v.Hv, v.Hv,
                            o + t * v.Hv * v.Dv, v.Hv * v.Dv, tmp);
            t = end;
            if (kk < sq->n_snaps)
                memcpy(kv_pool_state_layer(s->kv, sq->snap_blocks[kk], L) + conv + j * hs, S,
                       sizeof(float) * (size_t)hs);
        }
    }
}

/* y = RMSNorm(o, norm) * silu(z), per value head. */
static void gnorm_rows(void *ctx, int64_t t0, int64_t t1, int tid)
{
    (void)tid;
    mdl_step *s = ctx;
    delta_view v = view_of(s);
    float eps = (float)s->m->cfg.rms_eps;
    for (int64_t t = t0; t < t1; t++)
        for (int64_t j = 0; j < v.Hv; j++) {
            float *y = v.o + (t * v.Hv + j) * v.Dv;
            const float *z = v.z + (t * v.Hv + j) * v.Dv;
            kn_rmsnorm(y, y, s->ly->delta.norm, v.Dv, eps, 0.0f);
            for (int64_t i = 0; i < v.Dv; i++)
                y[i] *= z[i] / (1.0f + expf(-z[i]));
        }
}

void mdl_delta_forward(mdl_step *s)
{
    kn_pool *pool = s->pool;
    const mdl_delta *d = &s->ly->delta;
    delta_view v = view_of(s);
    int64_t T = s->T;
    kn_matmul(pool, &d->in_qkv, s->h, T, v.qkv);
    kn_matmul(pool, &d->in_z, s->h, T, v.z);
    kn_matmul(pool, &d->in_b, s->h, T, v.b);
    kn_matmul(pool, &d->in_a, s->h, T, v.a);
    kn_pool_for(pool, (int64_t)s->n_seqs * ((v.C + CONV_CHUNK - 1) / CONV_CHUNK), 1, conv_items, s);
    kn_pool_for(pool, T, s->grain, prep_rows, s);
    kn_pool_for(pool, (int64_t)s->n_seqs * v.Hv, 1, rec_items, s);
    kn_pool_for(pool, T, s->grain, gnorm_rows, s);
    kn_matmul(pool, &d->out, v.o, T, s->h);
}

/* ---------------------------------------------------------------- loading */

/* conv1d.weight as f32 [C, K]: HF stores [C, 1, K], mlx-lm [C, K, 1]. */
static kiln_code load_conv(mdl_model *m, const char *name, int64_t C, int64_t K, float **out,
                           kiln_err *err)
{
    *out = NULL;
    const wt_tensor *t = wt_set_find(m->ws, name);
    if (!t) return kiln_fail(err, KILN_E_NOT_FOUND, "missing tensor '%s'", name);
    int ok = t->ndim == 3 && t->shape[0] == C &&
             ((t->shape[1] == 1 && t->shape[2] == K) || (t->shape[1] == K && t->shape[2] == 1));
    if (!ok)
        return kiln_fail(err, KILN_E_CORRUPT,
                         "tensor '%s': expected [%lld, 1, %lld] (HF) or [%lld, %lld, 1] (mlx)",
                         name, (long long)C, (long long)K, (long long)C, (long long)K);
    float *w = malloc(sizeof(float) * (size_t)(C * K));
    if (!w) return kiln_fail(err, KILN_E_NOMEM, "tensor '%s': out of memory", name);
    const uint8_t *p = t->data;
    for (int64_t i = 0; i < C * K; i++) { /* both layouts are [C][K] in memory */
        uint16_t h;
        switch (t->dtype) {
        case WT_F32:
            memcpy(&w[i], p + 4 * i, 4);
            break;
        case WT_F16:
            memcpy(&h, p + 2 * i, 2);
            w[i] = kiln_f16_to_f32(h);
            break;
        case WT_BF16:
            memcpy(&h, p + 2 * i, 2);
            w[i] = kiln_bf16_to_f32(h);
            break;
        default:
            free(w);
            return kiln_fail(err, KILN_E_UNSUPPORTED, "tensor '%s': dtype %s is not a float", name,
                             wt_dtype_name(t->dtype));
        }
    }
    *out = w;
    return KILN_OK;
}

kiln_code mdl_delta_load(mdl_model *m, int32_t L, const char *prefix, kiln_err *err)
{
    mdl_delta *d = &m->layers[L].delta;
    const mdl_layer_plan *p = &m->plan.layer[L];
    int64_t H = m->plan.hidden, Hv = p->lin_v_heads, vd = Hv * p->lin_v_dim;
    int64_t C = 2 * (int64_t)p->lin_k_heads * p->lin_k_dim + vd;
    char n[320];
    kiln_code rc;
#define MAT(field, sub, r, c)                                                                      \
    snprintf(n, sizeof n, "%s.%s", prefix, sub);                                                   \
    if ((rc = mdl_load_mat(m, n, r, c, &d->field, err))) return rc
#define VEC(field, sub, len)                                                                       \
    snprintf(n, sizeof n, "%s.%s", prefix, sub);                                                   \
    if ((rc = mdl_load_vec(m, n, len, 0, 0.0f, &d->field, err))) return rc
    MAT(in_qkv, "in_proj_qkv", C, H);
    MAT(in_z, "in_proj_z", vd, H);
    MAT(in_b, "in_proj_b", Hv, H);
    MAT(in_a, "in_proj_a", Hv, H);
    MAT(out, "out_proj", H, vd);
    VEC(a_neg, "A_log", Hv);
    VEC(dt_bias, "dt_bias", Hv);
    VEC(norm, "norm.weight", p->lin_v_dim); /* the gated norm: always as stored */
#undef MAT
#undef VEC
    for (int64_t j = 0; j < Hv; j++)
        d->a_neg[j] = -expf(d->a_neg[j]);
    snprintf(n, sizeof n, "%s.conv1d.weight", prefix);
    return load_conv(m, n, C, p->conv_k, &d->conv_w, err);
}

void mdl_delta_free(mdl_delta *d)
{
    free(d->conv_w);
    free(d->a_neg);
    free(d->dt_bias);
    free(d->norm);
}
