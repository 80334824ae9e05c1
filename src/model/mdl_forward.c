/*
 * mdl_forward.c — the one batched step: a ragged batch of sequences through
 * every layer, K/V written into paged blocks, logits for the rows asked for.
 *
 * Stages per layer (T = Σ n_i new tokens, all f32):
 *   h = rmsnorm(x)                      per token          (pool over tokens)
 *   q, k, v = h·Wqᵀ, h·Wkᵀ, h·Wvᵀ (+b)  once for all T     (kn_matmul, pool over rows)
 *   qk-norm, RoPE, K/V -> blocks        per token          (pool over tokens)
 *   attn = softmax(q·Kᵀ)·V              per (sequence, head) (pool over pairs)
 *   x += attn·Woᵀ;  x += down(silu(gate) * up)
 * Every per-token result depends only on that token's row and its sequence's
 * keys, each reduced in a fixed order: a sequence's logits are bitwise the same
 * whatever else is in the batch and however its prefill is chunked.
 * Scratch: one arena per context, sized at mdl_ctx_create, reset per step.
 * Threads: the engine thread calls; kernels fan out through the kn_pool.
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
    int32_t read_window;  /* every layer reads at most this many positions back; 0 = all */
    arena ar;             /* OWNED */
    float *hidden_out;    /* BORROWED [hidden_rows, hidden]: the hidden-state tap; NULL = off */
    int32_t hidden_rows;
};

/* Per-step view shared with the pool callbacks. */
typedef struct {
    mdl_ctx *cx;
    kv_pool *kv;
    const mdl_seq *seqs;
    int32_t n_seqs, T;
    const mdl_layer *ly;
    int32_t layer;
    const float *norm_w; /* the norm norm_rows applies */
    float *x, *h, *q, *k, *v, *att, *g, *u, *cs, *scratch;
    int32_t *tok_seq, *tok_pos;
    kn_attn_args *aa; /* [n_seqs] */
} step;

/* ---------------------------------------------------------------- sizing */

static size_t step_floats(const wt_config *c, int64_t T, int32_t rot)
{
    int64_t qd = c->n_heads * c->head_dim, kd = c->n_kv_heads * c->head_dim;
    return (size_t)T * (size_t)(2 * c->hidden + 2 * qd + 2 * kd + 2 * c->intermediate + rot);
}

size_t mdl_scratch_bytes(const wt_config *c, int n_threads, int32_t max_tokens, int32_t max_seqs,
                         int32_t max_ctx, int64_t *attn_floats)
{
    kn_attn_args probe = {.n_q = max_tokens < max_ctx ? max_tokens : max_ctx,
                          .n_heads = (int32_t)c->n_heads, .n_kv_heads = (int32_t)c->n_kv_heads,
                          .head_dim = (int32_t)c->head_dim, .block_tokens = 16};
    probe.pos0 = max_ctx - probe.n_q;
    int64_t s1 = kn_attn_scratch_floats(&probe);
    probe.n_q = 1;
    probe.pos0 = max_ctx - 1;
    int64_t s2 = kn_attn_scratch_floats(&probe);
    int64_t af = (s1 > s2 ? s1 : s2) + 16;
    if (attn_floats) *attn_floats = af;
    size_t max_blocks = (size_t)max_ctx + 1; /* pointer tables: at most one block per position */
    return sizeof(float) *
               (step_floats(c, max_tokens, mdl_rope_dims(c)) + (size_t)n_threads * (size_t)af) +
           sizeof(int32_t) * 2 * (size_t)max_tokens +
           (sizeof(kn_attn_args) + 2 * sizeof(void *) * max_blocks) * (size_t)max_seqs +
           64 * (16 + 2 * (size_t)max_seqs); /* 64-byte alignment of every arena array */
}

kiln_code mdl_ctx_create(const mdl_model *m, kn_pool *pool, int32_t max_tokens,
                         int32_t max_seqs, int32_t max_ctx, mdl_ctx **out, kiln_err *err)
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
    for (int64_t L = 0; L < m->cfg.n_layers; L++) {
        int32_t w = m->layers[L].window;
        if (w <= 0) {
            cx->read_window = 0; /* a full-attention layer reads every position */
            break;
        }
        if (w > cx->read_window) cx->read_window = w;
    }
    size_t bytes = mdl_scratch_bytes(&m->cfg, cx->n_threads, max_tokens, max_seqs, max_ctx,
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

/* ---------------------------------------------------------------- per-token stages */

static void add_bias_rows(float *y, const float *b, int64_t T, int64_t n)
{
    if (!b) return;
    for (int64_t t = 0; t < T; t++) kn_add(y + t * n, b, n);
}

static void norm_rows(void *ctx, int64_t t0, int64_t t1, int tid)
{
    step *s = ctx;
    const mdl_model *m = s->cx->m;
    const float *w = s->norm_w;
    for (int64_t t = t0; t < t1; t++)
        kn_rmsnorm(s->h + t * m->cfg.hidden, s->x + t * m->cfg.hidden, w, m->cfg.hidden,
                   (float)m->cfg.rms_eps, m->norm_offset);
}

/* qk-norm, RoPE, and K/V into the token's block slot. */
static void qkv_rows(void *ctx, int64_t t0, int64_t t1, int tid)
{
    step *s = ctx;
    const mdl_model *m = s->cx->m;
    const wt_config *c = &m->cfg;
    const mdl_layer *ly = s->ly;
    int64_t hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
    int32_t bt = kv_pool_cfg(s->kv)->block_tokens, rot = m->rope.rot;
    for (int64_t t = t0; t < t1; t++) {
        float *q = s->q + t * nh * hd, *k = s->k + t * nkv * hd, *v = s->v + t * nkv * hd;
        const float *cs = s->cs + t * rot;
        for (int64_t h = 0; h < nh; h++) {
            if (ly->q_norm)
                kn_rmsnorm(q + h * hd, q + h * hd, ly->q_norm, hd, (float)c->rms_eps,
                           m->norm_offset);
            kn_rope_neox(q + h * hd, rot, cs);
        }
        for (int64_t h = 0; h < nkv; h++) {
            if (ly->k_norm)
                kn_rmsnorm(k + h * hd, k + h * hd, ly->k_norm, hd, (float)c->rms_eps,
                           m->norm_offset);
            kn_rope_neox(k + h * hd, rot, cs);
        }
        /* each head's row is encoded on its own: its bytes depend on that row only */
        const mdl_seq *sq = &s->seqs[s->tok_seq[t]];
        int32_t pos = s->tok_pos[t];
        kv_block_id b = sq->blocks[pos / bt];
        kn_kv_fmt f = kv_pool_layer_fmt(s->kv, b, s->layer);
        size_t rec = kn_kv_rec_bytes(f, (int32_t)hd), off = (size_t)(pos % bt) * (size_t)nkv * rec;
        uint8_t *kd = (uint8_t *)kv_pool_layer_k(s->kv, b, s->layer) + off;
        uint8_t *vd = (uint8_t *)kv_pool_layer_v(s->kv, b, s->layer) + off;
        for (int64_t h = 0; h < nkv; h++) {
            kn_kv_store(f, k + h * hd, (int32_t)hd, kd + (size_t)h * rec);
            kn_kv_store(f, v + h * hd, (int32_t)hd, vd + (size_t)h * rec);
        }
    }
}

/* One item = one (sequence, KV head): its query heads together, so the kernel
 * reads each K/V row once for the whole group. */
static void attn_items(void *ctx, int64_t i0, int64_t i1, int tid)
{
    step *s = ctx;
    const wt_config *c = &s->cx->m->cfg;
    int32_t nkv = (int32_t)c->n_kv_heads, group = (int32_t)(c->n_heads / c->n_kv_heads);
    float *scratch = s->scratch + (size_t)tid * (size_t)s->cx->attn_scratch;
    for (int64_t i = i0; i < i1; i++) {
        int32_t sq = (int32_t)(i / nkv), g = (int32_t)(i % nkv);
        kn_attn_heads(&s->aa[sq], g * group, (g + 1) * group, scratch);
    }
}

static void silu_rows(void *ctx, int64_t t0, int64_t t1, int tid)
{
    step *s = ctx;
    int64_t F = s->cx->m->cfg.intermediate;
    for (int64_t t = t0; t < t1; t++) kn_silu_mul(s->g + t * F, s->g + t * F, s->u + t * F, F);
}

/* ---------------------------------------------------------------- the step */

static kiln_code check_batch(const mdl_ctx *cx, const mdl_seq *seqs, int32_t n_seqs, int32_t bt,
                             int32_t *T_out, kiln_err *err)
{
    if (n_seqs < 1 || n_seqs > cx->max_seqs)
        return kiln_fail(err, KILN_E_INVALID, "batch of %d sequences (limit %d)", (int)n_seqs,
                         (int)cx->max_seqs);
    int64_t T = 0, vocab = cx->m->cfg.vocab;
    for (int32_t i = 0; i < n_seqs; i++) {
        const mdl_seq *s = &seqs[i];
        if (s->n_tokens < 1 || s->pos0 < 0 || s->n_logits < 0 || s->n_logits > s->n_tokens ||
            (int64_t)s->pos0 + s->n_tokens > cx->max_ctx || !s->blocks || !s->tokens)
            return kiln_fail(err, KILN_E_INVALID,
                             "sequence %d: %d tokens at position %d do not fit the context (%d)",
                             (int)i, (int)s->n_tokens, (int)s->pos0, (int)cx->max_ctx);
        /* every block attention reads (the window of pos0 onward) must be held:
         * entries before it may have been given back (-1) */
        int64_t lo = cx->read_window > 0 ? (int64_t)s->pos0 - cx->read_window + 1 : 0;
        for (int64_t j = lo > 0 ? lo / bt : 0; j < ((int64_t)s->pos0 + s->n_tokens + bt - 1) / bt;
             j++)
            if (s->blocks[j] < 0)
                return kiln_fail(
                    err, KILN_E_INTERNAL,
                    "sequence %d: block %lld is read at position %d but was given back", (int)i,
                    (long long)j, (int)s->pos0);
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

static kiln_code step_alloc(step *s, kiln_err *err)
{
    mdl_ctx *cx = s->cx;
    const wt_config *c = &cx->m->cfg;
    arena *a = &cx->ar;
    int64_t T = s->T, qd = c->n_heads * c->head_dim, kd = c->n_kv_heads * c->head_dim;
    int32_t bt = kv_pool_cfg(s->kv)->block_tokens;
    s->x = ARENA_ARRAY(a, float, T * c->hidden);
    s->h = ARENA_ARRAY(a, float, T * c->hidden);
    s->q = ARENA_ARRAY(a, float, T * qd);
    s->att = ARENA_ARRAY(a, float, T * qd);
    s->k = ARENA_ARRAY(a, float, T * kd);
    s->v = ARENA_ARRAY(a, float, T * kd);
    s->g = ARENA_ARRAY(a, float, T * c->intermediate);
    s->u = ARENA_ARRAY(a, float, T * c->intermediate);
    s->cs = ARENA_ARRAY(a, float, T * cx->m->rope.rot);
    s->scratch = ARENA_ARRAY(a, float, (int64_t)cx->n_threads * cx->attn_scratch);
    s->tok_seq = ARENA_ARRAY(a, int32_t, T);
    s->tok_pos = ARENA_ARRAY(a, int32_t, T);
    s->aa = ARENA_ARRAY(a, kn_attn_args, s->n_seqs);
    if (!s->x || !s->h || !s->q || !s->att || !s->k || !s->v || !s->g || !s->u || !s->cs ||
        !s->scratch || !s->tok_seq || !s->tok_pos || !s->aa)
        return kiln_fail(err, KILN_E_INTERNAL, "model step: scratch arena too small");
    for (int32_t i = 0; i < s->n_seqs; i++) {
        const mdl_seq *sq = &s->seqs[i];
        int32_t nb = (sq->pos0 + sq->n_tokens + bt - 1) / bt;
        const void **kp = ARENA_ARRAY(a, const void *, nb);
        const void **vp = ARENA_ARRAY(a, const void *, nb);
        if (!kp || !vp) return kiln_fail(err, KILN_E_INTERNAL, "model step: scratch arena too small");
        s->aa[i] = (kn_attn_args){
            .n_q = sq->n_tokens,
            .pos0 = sq->pos0,
            .n_heads = (int32_t)c->n_heads,
            .n_kv_heads = (int32_t)c->n_kv_heads,
            .head_dim = (int32_t)c->head_dim,
            .scale = 1.0f / sqrtf((float)c->head_dim),
            .k_blocks = kp,
            .v_blocks = vp,
            .block_tokens = bt,
        };
    }
    return KILN_OK;
}

/* Points each sequence's attention at layer L's blocks and its rows of q/att. */
static void step_bind_layer(step *s, int32_t L)
{
    const wt_config *c = &s->cx->m->cfg;
    int64_t qd = c->n_heads * c->head_dim, row = 0;
    int32_t bt = kv_pool_cfg(s->kv)->block_tokens;
    for (int32_t i = 0; i < s->n_seqs; i++) {
        const mdl_seq *sq = &s->seqs[i];
        kn_attn_args *a = &s->aa[i];
        int32_t nb = (sq->pos0 + sq->n_tokens + bt - 1) / bt;
        const void **kp = (const void **)a->k_blocks, **vp = (const void **)a->v_blocks;
        for (int32_t j = 0; j < nb; j++) { /* -1: given back, out of every window */
            kp[j] = sq->blocks[j] >= 0 ? kv_pool_layer_k(s->kv, sq->blocks[j], L) : NULL;
            vp[j] = sq->blocks[j] >= 0 ? kv_pool_layer_v(s->kv, sq->blocks[j], L) : NULL;
        }
        /* a block's class follows from its index: the full-precision blocks
         * (--quantized-kv-start) are the sequence's first ones */
        const kv_format *kf = kv_pool_cfg(s->kv)->fmt;
        int32_t nfull = 0;
        while (nfull < nb && kv_pool_class_of(s->kv, nfull) == KV_CLASS_FULL)
            nfull++;
        a->full_blocks = nfull;
        a->fmt = kv_format_at(kf, KV_CLASS_MAIN, L);
        a->fmt_full = kv_format_at(kf, KV_CLASS_FULL, L);
        a->q = s->q + row * qd;
        a->out = s->att + row * qd;
        a->window = s->ly->window;
        row += sq->n_tokens;
    }
}

static void layer_forward(step *s, int32_t L)
{
    mdl_ctx *cx = s->cx;
    const wt_config *c = &cx->m->cfg;
    const mdl_layer *ly = &cx->m->layers[L];
    int64_t T = s->T, H = c->hidden, F = c->intermediate;
    int64_t qd = c->n_heads * c->head_dim, kd = c->n_kv_heads * c->head_dim;
    int64_t grain = T > 64 ? 16 : 1;
    s->ly = ly;
    s->layer = L;
    s->norm_w = ly->attn_norm;
    kn_pool_for(cx->pool, T, grain, norm_rows, s);
    kn_matmul(cx->pool, &ly->wq, s->h, T, s->q);
    kn_matmul(cx->pool, &ly->wk, s->h, T, s->k);
    kn_matmul(cx->pool, &ly->wv, s->h, T, s->v);
    add_bias_rows(s->q, ly->bq, T, qd);
    add_bias_rows(s->k, ly->bk, T, kd);
    add_bias_rows(s->v, ly->bv, T, kd);
    kn_pool_for(cx->pool, T, grain, qkv_rows, s);
    step_bind_layer(s, L);
    kn_pool_for(cx->pool, (int64_t)s->n_seqs * c->n_kv_heads, 1, attn_items, s);
    kn_matmul(cx->pool, &ly->wo, s->att, T, s->h);
    add_bias_rows(s->h, ly->bo, T, H);
    kn_add(s->x, s->h, T * H);
    s->norm_w = ly->ffn_norm;
    kn_pool_for(cx->pool, T, grain, norm_rows, s);
    kn_matmul(cx->pool, &ly->w_gate, s->h, T, s->g);
    kn_matmul(cx->pool, &ly->w_up, s->h, T, s->u);
    add_bias_rows(s->g, ly->b_gate, T, F);
    add_bias_rows(s->u, ly->b_up, T, F);
    kn_pool_for(cx->pool, T, grain, silu_rows, s);
    kn_matmul(cx->pool, &ly->w_down, s->g, T, s->h);
    add_bias_rows(s->h, ly->b_down, T, H);
    kn_add(s->x, s->h, T * H);
}

kiln_code mdl_forward(mdl_ctx *cx, kv_pool *kv, const mdl_seq *seqs, int32_t n_seqs,
                      float *logits, kiln_err *err)
{
    const mdl_model *m = cx->m;
    const wt_config *c = &m->cfg;
    step s = {.cx = cx, .kv = kv, .seqs = seqs, .n_seqs = n_seqs};
    kiln_code rc = check_batch(cx, seqs, n_seqs, kv_pool_cfg(kv)->block_tokens, &s.T, err);
    if (rc) return rc;
    if (cx->hidden_out && s.T > cx->hidden_rows)
        return kiln_fail(err, KILN_E_INVALID,
                         "step of %d tokens is over the hidden-state tap's %d rows", (int)s.T,
                         (int)cx->hidden_rows);
    arena_reset(&cx->ar);
    if ((rc = step_alloc(&s, err))) return rc;
    int64_t H = c->hidden, t = 0;
    int32_t rot = m->rope.rot;
    for (int32_t i = 0; i < n_seqs; i++) {
        const mdl_seq *sq = &seqs[i];
        for (int32_t j = 0; j < sq->n_tokens; j++, t++) {
            s.tok_seq[t] = i;
            s.tok_pos[t] = sq->pos0 + j;
            kn_mat_row(&m->embed, sq->tokens[j], s.x + t * H);
            if (m->embed_scale != 1.0f)
                for (int64_t d = 0; d < H; d++) s.x[t * H + d] *= m->embed_scale;
            int64_t rope_len = sq->rope_len > 0 ? sq->rope_len : (int64_t)sq->pos0 + sq->n_tokens;
            mdl_rope_cos_sin(&m->rope, c, sq->pos0 + j, rope_len, s.cs + t * rot);
        }
    }
    for (int32_t L = 0; L < (int32_t)c->n_layers; L++) layer_forward(&s, L);
    /* final norm on the rows that need logits, gathered densely into h */
    int64_t n_out = 0, row = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        for (int32_t j = seqs[i].n_tokens - seqs[i].n_logits; j < seqs[i].n_tokens; j++)
            kn_rmsnorm(s.h + (n_out++) * H, s.x + (row + j) * H, m->final_norm, H,
                       (float)c->rms_eps, m->norm_offset);
        row += seqs[i].n_tokens;
    }
    if (n_out > 0) kn_matmul(cx->pool, &m->lm_head, s.h, n_out, logits);
    if (cx->hidden_out) /* the same per-row norm as above: a row's bits do not depend on the batch
                         */
        for (int64_t r = 0; r < s.T; r++)
            kn_rmsnorm(cx->hidden_out + r * H, s.x + r * H, m->final_norm, H, (float)c->rms_eps,
                       m->norm_offset);
    return KILN_OK;
}
