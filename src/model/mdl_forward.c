/*
 * mdl_forward.c — the one batched step: a ragged batch of sequences through
 * every layer, K/V written into paged blocks, logits for the rows asked for.
 *
 * Per layer (T = Σ n_i new tokens, all f32), each stage a kind's function:
 *   h = RMSNorm(x, in_norm)                 per token            (pool over tokens)
 *   h = mixer(h)                            mdl_attn_forward or mdl_delta_forward
 *                                                                (kinds: mdl_plan.h)
 *   h = RMSNorm(h, post_mix_norm)           when the family has it
 *   x += h
 *   h = ffn(RMSNorm(x, pre_ffn_norm))       mdl_mlp_forward or mdl_moe_forward
 *   h = RMSNorm(h, post_ffn_norm)           when the family has it
 *   x += h
 *   x += per-layer input gate               mdl_pli_forward (Gemma 4 e2b/e4b)
 *   x *= layer_scalar                       when the layer has one (Gemma 4)
 * then the final norm and the LM head on the rows that need logits (soft-capped
 * when the plan says). Every per-token result depends only on that token's row
 * and its sequence's keys, each reduced in a fixed order: a sequence's logits
 * are bitwise the same whatever else is in the batch and however its prefill
 * is chunked. A recurrent layer carries each sequence's state in its state
 * block from one step to the next (a sequence starting at position 0 starts
 * from zeros), walking the sequence's tokens in order.
 * Scratch: one arena per context, sized at mdl_ctx_create from the plan, reset
 * per step. Threads: the engine thread calls; kernels fan out through the kn_pool.
 */
#include "kernels/kn_attn.h"
#include "kernels/kn_ops.h"
#include "model/mdl_int.h"
#include "util/arena.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct mdl_ctx {
    const mdl_model *m;
    kn_pool *pool; /* BORROWED */
    int32_t max_tokens, max_seqs, max_ctx;
    int n_threads;
    int64_t attn_scratch; /* floats per thread */
    arena ar;             /* OWNED */
    float *hidden_out;    /* BORROWED [hidden_rows, hidden]: the hidden-state tap; NULL = off */
    int32_t hidden_rows;
    int unfused; /* mdl_ctx_set_fused(cx, 0): one pool job per op (tests, A/B) */
};

/* ---------------------------------------------------------------- sizing */

static size_t step_floats(const mdl_plan *p, int64_t T)
{
    return (size_t)T * (size_t)(2 * p->hidden + 2 * p->max_q + 2 * p->max_kv + 2 * p->max_ffn +
                                p->rope_floats + p->max_mix);
}

size_t mdl_scratch_bytes(const mdl_plan *p, int n_threads, int32_t max_tokens, int32_t max_seqs,
                         int32_t max_ctx, int64_t *attn_floats)
{
    kn_attn_args probe = {.n_q = max_tokens < max_ctx ? max_tokens : max_ctx,
                          .n_heads = p->max_heads,
                          .n_kv_heads = p->max_kv_heads,
                          .head_dim = p->max_head_dim,
                          .block_tokens = 16};
    probe.pos0 = max_ctx - probe.n_q;
    int64_t s1 = kn_attn_scratch_floats(&probe);
    probe.n_q = 1;
    probe.pos0 = max_ctx - 1;
    int64_t s2 = kn_attn_scratch_floats(&probe);
    int64_t af = (s1 > s2 ? s1 : s2) + 16;
    if (af < p->max_lin_dv + 16) af = p->max_lin_dv + 16; /* the delta rule's scratch */
    if (attn_floats) *attn_floats = af;
    size_t max_blocks = (size_t)max_ctx + 1; /* pointer tables: at most one block per position */
    return sizeof(float) * (step_floats(p, max_tokens) + (size_t)n_threads * (size_t)af) +
           sizeof(int32_t) * (4 * (size_t)max_tokens + (size_t)max_seqs + 2) + /* + LoRA tiles */
           mdl_moe_scratch_bytes(p, max_tokens) + mdl_pli_scratch_bytes(p, n_threads, max_tokens) +
           (sizeof(kn_attn_args) + 2 * sizeof(void *) * max_blocks) * (size_t)max_seqs +
           64 * (20 + MDL_MAX_ROPES + 2 * (size_t)max_seqs); /* 64-byte alignment of arrays */
}

kiln_code mdl_ctx_create(const mdl_model *m, kn_pool *pool, int32_t max_tokens, int32_t max_seqs,
                         int32_t max_ctx, mdl_ctx **out, kiln_err *err)
{
    *out = NULL;
    if (max_tokens < 1 || max_seqs < 1 || max_ctx < 1)
        return kiln_fail(err, KILN_E_INVALID, "model context: bad limits");
    mdl_ctx *cx = calloc(1, sizeof *cx);
    if (!cx) return kiln_fail(err, KILN_E_NOMEM, "model context: out of memory");
    cx->m = m;
    cx->pool = pool;
    cx->max_tokens = max_tokens;
    cx->max_seqs = max_seqs;
    cx->max_ctx = max_ctx;
    cx->n_threads = pool ? kn_pool_threads(pool) : 1;
    size_t bytes = mdl_scratch_bytes(&m->plan, cx->n_threads, max_tokens, max_seqs, max_ctx,
                                     &cx->attn_scratch);
    kiln_code rc = arena_init(&cx->ar, bytes, err);
    if (rc) {
        free(cx);
        return rc;
    }
    *out = cx;
    return KILN_OK;
}

void mdl_ctx_free(mdl_ctx *cx)
{
    if (!cx) return;
    arena_free(&cx->ar);
    free(cx);
}

size_t mdl_ctx_scratch_bytes(const mdl_ctx *cx)
{
    return cx->ar.cap;
}

void mdl_ctx_set_hidden_out(mdl_ctx *cx, float *rows, int32_t max_rows)
{
    cx->hidden_out = rows;
    cx->hidden_rows = rows ? max_rows : 0;
}

void mdl_ctx_set_fused(mdl_ctx *cx, int on)
{
    cx->unfused = !on;
}

/* ---------------------------------------------------------------- shared stages */

void mdl_add_bias_rows(float *y, const float *b, int64_t T, int64_t n)
{
    if (!b) return;
    for (int64_t t = 0; t < T; t++)
        kn_add(y + t * n, b, n);
}

typedef struct {
    mdl_step *s;
    float *out;
    const float *in, *w;
    int64_t n;
} norm_job;

static void norm_rows(void *ctx, int64_t t0, int64_t t1, int tid)
{
    (void)tid;
    norm_job *j = ctx;
    float eps = (float)j->s->m->cfg.rms_eps;
    for (int64_t t = t0; t < t1; t++)
        kn_rmsnorm(j->out + t * j->n, j->in + t * j->n, j->w, j->n, eps, 0.0f);
}

void mdl_norm_rows(mdl_step *s, float *out, const float *in, const float *w, int64_t n)
{
    norm_job j = {.s = s, .out = out, .in = in, .w = w, .n = n};
    kn_pool_for(s->pool, s->T, s->grain, norm_rows, &j);
}

/* ---------------------------------------------------------------- the step */

static kiln_code check_batch(const mdl_ctx *cx, const kv_pool *kv, const mdl_seq *seqs,
                             int32_t n_seqs, int32_t *T_out, kiln_err *err)
{
    int32_t bt = kv_pool_cfg(kv)->block_tokens;
    if (n_seqs < 1 || n_seqs > cx->max_seqs)
        return kiln_fail(err, KILN_E_INVALID, "batch of %d sequences (limit %d)", (int)n_seqs,
                         (int)cx->max_seqs);
    int64_t T = 0, vocab = cx->m->plan.vocab;
    for (int32_t i = 0; i < n_seqs; i++) {
        const mdl_seq *s = &seqs[i];
        if (s->n_tokens < 1 || s->pos0 < 0 || s->n_logits < 0 || s->n_logits > s->n_tokens ||
            (int64_t)s->pos0 + s->n_tokens > cx->max_ctx || !s->tokens)
            return kiln_fail(err, KILN_E_INVALID,
                             "sequence %d: %d tokens at position %d do not fit the context (%d)",
                             (int)i, (int)s->n_tokens, (int)s->pos0, (int)cx->max_ctx);
        /* every block attention reads (each group's window of pos0 onward) must
         * be held: entries before it may have been given back (-1) */
        for (int g = 0; g < kv_pool_n_groups(kv); g++) {
            if (!s->blocks[g])
                return kiln_fail(err, KILN_E_INVALID, "sequence %d: no block table for KV group %d",
                                 (int)i, g);
            int32_t first = kv_window_first_block(kv_pool_group_window(kv, g), bt, s->pos0);
            for (int64_t j = first; j < ((int64_t)s->pos0 + s->n_tokens + bt - 1) / bt; j++)
                if (s->blocks[g][j] < 0)
                    return kiln_fail(
                        err, KILN_E_INTERNAL,
                        "sequence %d: block %lld of KV group %d is read at position %d but was "
                        "given back",
                        (int)i, (long long)j, g, (int)s->pos0);
        }
        if (cx->m->mtp && !s->hidden_in)
            return kiln_fail(err, KILN_E_INVALID,
                             "sequence %d: an MTP head needs the target's hidden states",
                             (int)i);
        if (s->lora) {
            if (s->lora->n < 0 || s->lora->n > MDL_LORA_MAX_STACK)
                return kiln_fail(err, KILN_E_INVALID, "sequence %d: %d adapters (limit %d)", (int)i,
                                 (int)s->lora->n, MDL_LORA_MAX_STACK);
            for (int32_t k = 0; k < s->lora->n; k++)
                if (!mdl_lora_for_model(s->lora->a[k], cx->m))
                    return kiln_fail(err, KILN_E_INVALID,
                                     "sequence %d: adapter %d was not loaded for this model",
                                     (int)i, (int)k);
        }
        if (kv_pool_has_state(kv)) { /* recurrent layers: a working state, snapshots in order */
            if (s->state < 0)
                return kiln_fail(err, KILN_E_INVALID, "sequence %d: no recurrent state block",
                                 (int)i);
            for (int32_t k = 0; k < s->n_snaps; k++)
                if (!s->snap_pos || !s->snap_blocks || s->snap_blocks[k] < 0 ||
                    s->snap_blocks[k] == s->state || s->snap_pos[k] <= s->pos0 ||
                    s->snap_pos[k] > s->pos0 + s->n_tokens ||
                    (k > 0 && s->snap_pos[k] <= s->snap_pos[k - 1]))
                    return kiln_fail(err, KILN_E_INVALID,
                                     "sequence %d: state snapshot %d is out of order", (int)i,
                                     (int)k);
        }
        for (int32_t j = 0; j < s->n_tokens; j++)
            if (s->tokens[j] < 0 || s->tokens[j] >= vocab)
                return kiln_fail(err, KILN_E_INVALID, "token id %d is out of range (vocab %lld)",
                                 (int)s->tokens[j], (long long)vocab);
        T += s->n_tokens;
    }
    if (T > cx->max_tokens)
        return kiln_fail(err, KILN_E_INVALID, "step of %lld tokens is over the limit of %d",
                         (long long)T, (int)cx->max_tokens);
    *T_out = (int32_t)T;
    return KILN_OK;
}

static kiln_code step_alloc(mdl_step *s, kiln_err *err)
{
    mdl_ctx *cx = s->cx;
    const mdl_plan *p = &cx->m->plan;
    arena *a = &cx->ar;
    int64_t T = s->T;
    s->x = ARENA_ARRAY(a, float, T * p->hidden);
    s->h = ARENA_ARRAY(a, float, T * p->hidden);
    s->q = ARENA_ARRAY(a, float, T * p->max_q);
    s->att = ARENA_ARRAY(a, float, T * p->max_q);
    s->k = ARENA_ARRAY(a, float, T * p->max_kv);
    s->v = ARENA_ARRAY(a, float, T * p->max_kv);
    s->g = ARENA_ARRAY(a, float, T * p->max_ffn);
    s->u = ARENA_ARRAY(a, float, T * p->max_ffn);
    s->scratch = ARENA_ARRAY(a, float, (int64_t)cx->n_threads * cx->attn_scratch);
    s->tok_seq = ARENA_ARRAY(a, int32_t, T);
    s->tok_pos = ARENA_ARRAY(a, int32_t, T);
    s->row0 = ARENA_ARRAY(a, int32_t, s->n_seqs + 1);
    s->mix = p->max_mix > 0 ? ARENA_ARRAY(a, float, T * p->max_mix) : NULL;
    if (!s->x || !s->h || !s->q || !s->att || !s->k || !s->v || !s->g || !s->u || !s->scratch ||
        !s->tok_seq || !s->tok_pos || !s->row0 || (p->max_mix > 0 && !s->mix))
        return kiln_fail(err, KILN_E_INTERNAL, "model step: scratch arena too small");
    s->row0[0] = 0;
    for (int32_t i = 0; i < s->n_seqs; i++)
        s->row0[i + 1] = s->row0[i] + s->seqs[i].n_tokens;
    for (int32_t r = 0; r < p->n_ropes; r++)
        if (!(s->cs[r] = ARENA_ARRAY(a, float, T * p->rope[r].rot)))
            return kiln_fail(err, KILN_E_INTERNAL, "model step: scratch arena too small");
    kiln_code rc = mdl_attn_alloc(s, a, err);
    if (!rc) rc = mdl_moe_alloc(s, a, err);
    if (!rc) rc = mdl_pli_alloc(s, a, err);
    if (!rc) rc = mdl_lora_plan(s, a, err);
    return rc;
}

static void layer_unfused(mdl_step *s, int32_t L)
{
    const mdl_layer *ly = &s->m->layers[L];
    int64_t T = s->T, H = s->m->plan.hidden;
    mdl_norm_rows(s, s->h, s->x, ly->in_norm, H);
    switch (ly->p->mixer) {
    case MDL_MIX_ATTN:
        mdl_attn_forward(s);
        break;
    case MDL_MIX_DELTANET:
        mdl_delta_forward(s);
        break;
    }
    if (ly->post_mix_norm) mdl_norm_rows(s, s->h, s->h, ly->post_mix_norm, H);
    kn_add(s->x, s->h, T * H);
    mdl_norm_rows(s, s->h, s->x, ly->pre_ffn_norm, H);
    switch (ly->p->ffn) {
    case MDL_FFN_DENSE:
        mdl_mlp_forward(s);
        break;
    case MDL_FFN_MOE:
        mdl_moe_forward(s);
        break;
    }
    if (ly->post_ffn_norm) mdl_norm_rows(s, s->h, s->h, ly->post_ffn_norm, H);
    kn_add(s->x, s->h, T * H);
    if (ly->p->pli) mdl_pli_forward(s);
    if (ly->scalar != 1.0f) /* Gemma 4: the whole residual, last step of the layer */
        for (int64_t i = 0; i < T * H; i++)
            s->x[i] *= ly->scalar;
}

/* The element-wise work between two matmul jobs of a fused layer, per token
 * row, in the order layer_unfused does it:
 *   [moe_out] h = the MoE block's output (mdl_moe_out_row)
 *   [post]    h = RMSNorm(h, post)
 *   [add]     x += h
 *   [scale]   x *= scale
 *   [renorm]  h = RMSNorm(x, renorm)   (the next block's input)
 *   [moe_in]  the MoE block's inputs (mdl_moe_in_row)
 * Each is the same kernel call on the same row as there (norms and adds are
 * per row, the adds and the scale per element), so the bits match; one pool
 * job instead of up to four, none at T = 1. */
typedef struct {
    mdl_step *s;
    const float *post, *renorm;
    int moe_out, add, moe_in;
    float scale;
} row_job;

static void row_stage(void *ctx, int64_t t0, int64_t t1, int tid)
{
    (void)tid;
    const row_job *j = ctx;
    mdl_step *s = j->s;
    int64_t H = s->m->plan.hidden;
    float eps = (float)s->m->cfg.rms_eps;
    for (int64_t t = t0; t < t1; t++) {
        float *h = s->h + t * H, *x = s->x + t * H;
        if (j->moe_out) mdl_moe_out_row(s, t);
        if (j->post) kn_rmsnorm(h, h, j->post, H, eps, 0.0f);
        if (j->add) kn_add(x, h, H);
        if (j->scale != 1.0f)
            for (int64_t d = 0; d < H; d++)
                x[d] *= j->scale;
        if (j->renorm) kn_rmsnorm(h, x, j->renorm, H, eps, 0.0f);
        if (j->moe_in) mdl_moe_in_row(s, t);
    }
}

static void rows(mdl_step *s, row_job j)
{
    j.s = s;
    if (j.moe_out || j.post || j.add || j.scale != 1.0f || j.renorm || j.moe_in)
        kn_pool_for(s->pool, s->T, s->grain, row_stage, &j);
}

/* A layer of the fused step (s->fused): the kinds' fused jobs, with every
 * norm, residual add and scale between them in one row job, the next layer's
 * input norm included (s->h_ready). */
static void layer_fused(mdl_step *s, int32_t L)
{
    const mdl_layer *ly = &s->m->layers[L];
    const mdl_layer_plan *p = ly->p;
    int64_t H = s->m->plan.hidden;
    const float *next_norm = L + 1 < s->m->plan.n_layers ? s->m->layers[L + 1].in_norm : NULL;
    if (!s->h_ready) mdl_norm_rows(s, s->h, s->x, ly->in_norm, H);
    s->h_ready = 0;
    /* the attention stage adds its rows into x itself when nothing comes
     * between it and the residual add (the same x + h, element by element) */
    s->fold_residual = p->mixer == MDL_MIX_ATTN && !ly->post_mix_norm;
    switch (p->mixer) {
    case MDL_MIX_ATTN:
        mdl_attn_forward(s);
        break;
    case MDL_MIX_DELTANET:
        mdl_delta_forward(s);
        break;
    }
    rows(s, (row_job){.post = ly->post_mix_norm,
                      .add = !s->fold_residual,
                      .scale = 1.0f,
                      .renorm = ly->pre_ffn_norm,
                      .moe_in = p->ffn == MDL_FFN_MOE});
    s->fold_residual = p->ffn == MDL_FFN_DENSE && !ly->post_ffn_norm;
    switch (p->ffn) {
    case MDL_FFN_DENSE:
        mdl_mlp_forward(s);
        break;
    case MDL_FFN_MOE:
        mdl_moe_forward(s);
        break;
    }
    row_job end = {.moe_out = p->ffn == MDL_FFN_MOE,
                   .post = ly->post_ffn_norm,
                   .add = !s->fold_residual,
                   .scale = 1.0f};
    s->fold_residual = 0;
    if (p->pli) {
        rows(s, end);
        mdl_pli_project(s); /* h = the gate's projection; its norm and add follow */
        end = (row_job){.post = ly->pli.post_norm, .add = 1, .scale = 1.0f};
    }
    end.scale = ly->scalar;
    end.renorm = next_norm;
    rows(s, end);
    s->h_ready = next_norm != NULL;
}

/* Embedding rows (scaled when the family says) and each rope's cos/sin. */
static void embed_tokens(mdl_step *s)
{
    const mdl_model *m = s->m;
    const mdl_plan *p = &m->plan;
    int64_t H = p->hidden, t = 0;
    for (int32_t i = 0; i < s->n_seqs; i++) {
        const mdl_seq *sq = &s->seqs[i];
        int64_t rope_len = sq->rope_len > 0 ? sq->rope_len : (int64_t)sq->pos0 + sq->n_tokens;
        for (int32_t j = 0; j < sq->n_tokens; j++, t++) {
            s->tok_seq[t] = i;
            s->tok_pos[t] = sq->pos0 + j;
            kn_mat_row(&m->embed, sq->tokens[j], s->x + t * H);
            if (p->embed_scale != 1.0f)
                for (int64_t d = 0; d < H; d++)
                    s->x[t * H + d] *= p->embed_scale;
            for (int32_t r = 0; r < p->n_ropes; r++)
                mdl_rope_cos_sin(&m->rope[r], sq->pos0 + j, rope_len,
                                 s->cs[r] + t * m->rope[r].rot);
        }
    }
}

kiln_code mdl_forward(mdl_ctx *cx, kv_pool *kv, const mdl_seq *seqs, int32_t n_seqs, float *logits,
                      kiln_err *err)
{
    const mdl_model *m = cx->m;
    const mdl_plan *p = &m->plan;
    mdl_step s = {.cx = cx,
                  .pool = cx->pool,
                  .m = m,
                  .kv = kv,
                  .seqs = seqs,
                  .n_seqs = n_seqs,
                  .attn_scratch = cx->attn_scratch};
    kiln_code rc = check_batch(cx, kv, seqs, n_seqs, &s.T, err);
    if (rc) return rc;
    if (cx->hidden_out && s.T > cx->hidden_rows)
        return kiln_fail(err, KILN_E_INVALID,
                         "step of %d tokens is over the hidden-state tap's %d rows", (int)s.T,
                         (int)cx->hidden_rows);
    s.grain = s.T > 64 ? 16 : 1;
    for (int32_t i = 0; i < n_seqs; i++)
        if (seqs[i].lora && seqs[i].lora->n > 0) s.any_lora = 1;
    s.fused = !cx->unfused && !s.any_lora;
    arena_reset(&cx->ar);
    if ((rc = step_alloc(&s, err))) return rc;
    embed_tokens(&s);
    if (m->mtp) mdl_mtp_inputs(&s);
    if (kv_pool_has_state(kv)) /* a sequence at its start has a zero recurrent state */
        for (int32_t i = 0; i < n_seqs; i++)
            if (seqs[i].pos0 == 0) {
                size_t n;
                memset(kv_pool_block_data_mut(kv, seqs[i].state, &n), 0, kv_pool_state_bytes(kv));
                (void)n;
            }
    mdl_pli_inputs(&s);
    for (int32_t L = 0; L < p->n_layers; L++) {
        s.ly = &m->layers[L];
        s.layer = L;
        if (s.fused)
            layer_fused(&s, L);
        else
            layer_unfused(&s, L);
    }
    /* final norm on the rows that need logits, gathered densely into h */
    int64_t H = p->hidden, n_out = 0, row = 0;
    float eps = (float)m->cfg.rms_eps;
    for (int32_t i = 0; i < n_seqs; i++) {
        for (int32_t j = seqs[i].n_tokens - seqs[i].n_logits; j < seqs[i].n_tokens; j++)
            kn_rmsnorm(s.h + (n_out++) * H, s.x + (row + j) * H, m->final_norm, H, eps, 0.0f);
        row += seqs[i].n_tokens;
    }
    if (n_out > 0) kn_matmul(cx->pool, &m->lm_head, s.h, n_out, logits);
    if (n_out > 0 && p->logit_softcap > 0) {
        float c = p->logit_softcap;
        for (int64_t i = 0; i < n_out * p->vocab; i++)
            logits[i] = c * tanhf(logits[i] / c);
    }
    if (cx->hidden_out) /* the same per-row norm as above: a row's bits do not depend on the batch
                         */
        for (int64_t r = 0; r < s.T; r++)
            kn_rmsnorm(cx->hidden_out + r * H, s.x + r * H, m->final_norm, H, eps, 0.0f);
    return KILN_OK;
}
