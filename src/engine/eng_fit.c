/*
 * eng_fit.c — memory planning; eng_runtime_open allocates exactly what
 * eng_fit_compute predicts (same functions), so `kiln fit` is honest.
 */
#include "engine/eng_fit.h"
#include "engine/eng_admit.h"
#include "engine/eng_sample.h"
#include "util/plat.h"
#include "weights/wt_set.h"

#include "kernels/kn_pool.h"

#include <stdlib.h>
#include <string.h>

/* The format o implies (a CONFIG request without a resolved format, or a bad
 * one, plans as uniform 8-bit / f32: eng_runtime_open reports the error). */
static void fit_format(const wt_config *c, const eng_runtime_opts *o, kv_format *f)
{
    if (eng_runtime_kv_format(NULL, c, o, f, NULL) == KILN_OK) return;
    eng_runtime_opts q = *o;
    q.kv_fmt = NULL;
    q.kv_quant = o->kv_quant == KV_QUANT_CONFIG ? KV_QUANT_8 : KV_QUANT_OFF;
    if (eng_runtime_kv_format(NULL, c, &q, f, NULL) == KILN_OK) return;
    q.kv_quant = KV_QUANT_OFF;
    q.kv_quant_start = 0;
    if (eng_runtime_kv_format(NULL, c, &q, f, NULL) == KILN_OK) return;
    int32_t nl = c->n_layers > KV_FMT_MAX_LAYERS ? KV_FMT_MAX_LAYERS : (int32_t)c->n_layers;
    kv_format_init(f, KV_QUANT_OFF, 0, 0, nl > 0 ? nl : 1,
                   c->head_dim > 0 && c->head_dim <= 65536 ? (int32_t)c->head_dim : 1, NULL);
}

kiln_code eng_fit_kv_layout(const wt_config *c, int keep_all, kv_layout *out, kiln_err *err)
{
    mdl_plan plan;
    kiln_code rc = mdl_plan_build(c, &plan, err);
    if (rc) return rc;
    rc = mdl_kv_layout(&plan, keep_all, out, err);
    mdl_plan_free(&plan);
    return rc;
}

/* The layout for sizing: the plan's, or (a config no plan takes) one uniform
 * group, so that `kiln fit` still prints something; eng_runtime_open refuses. */
static void fit_layout(const wt_config *c, int keep_all, kv_layout *l)
{
    if (eng_fit_kv_layout(c, keep_all, l, NULL) == KILN_OK) return;
    int32_t nl = c->n_layers > KV_FMT_MAX_LAYERS ? KV_FMT_MAX_LAYERS : (int32_t)c->n_layers;
    kv_layout_uniform(l, nl > 0 ? nl : 1, c->n_kv_heads > 0 ? (int32_t)c->n_kv_heads : 1,
                      c->head_dim > 0 && c->head_dim <= 65536 ? (int32_t)c->head_dim : 1, 0);
}

int eng_fit_layer_sliding(const wt_config *c, int64_t L)
{
    mdl_plan plan;
    if (mdl_plan_build(c, &plan, NULL) != KILN_OK) return 0;
    int w = L >= 0 && L < plan.n_layers && plan.layer[L].window > 0;
    mdl_plan_free(&plan);
    return w;
}

int32_t eng_fit_sliding_layers(const wt_config *c)
{
    mdl_plan plan;
    if (mdl_plan_build(c, &plan, NULL) != KILN_OK) return 0;
    int32_t n = 0;
    for (int32_t L = 0; L < plan.n_layers; L++) /* KV-shared layers store nothing */
        n += plan.layer[L].window > 0 && mdl_plan_stores_kv(&plan, L);
    mdl_plan_free(&plan);
    return n;
}

/* The whole pool is one group whose window caps it. */
static int32_t single_window(const kv_layout *l)
{
    return l->n_groups == 1 ? l->window[0] : 0;
}

int32_t eng_fit_kv_window(const wt_config *c)
{
    kv_layout l;
    if (eng_fit_kv_layout(c, 0, &l, NULL) != KILN_OK) return 0;
    return single_window(&l);
}

uint64_t eng_fit_kv_bytes_layers(const wt_config *c, const kv_format *f, int cls, int sliding)
{
    kv_layout l;
    fit_layout(c, 0, &l);
    uint64_t b = 0;
    for (int g = 0; g < l.n_groups; g++)
        if ((l.window[g] > 0) == !!sliding) b += kv_layout_bytes_per_token(&l, f, g, cls);
    return b;
}

void eng_kv_cost_init(eng_kv_cost *k, const kv_layout *l, const kv_format *f, int32_t block_tokens,
                      int32_t max_chunk)
{
    memset(k, 0, sizeof *k);
    k->n_groups = l->n_groups;
    k->block_tokens = block_tokens;
    k->max_chunk = max_chunk;
    if (kv_format_split(f) && block_tokens > 0)
        k->full_positions =
            ((int64_t)f->quant_start + block_tokens - 1) / block_tokens * block_tokens;
    for (int g = 0; g < l->n_groups; g++) {
        k->window[g] = l->window[g];
        k->bpt[g] = kv_layout_bytes_per_token(l, f, g, KV_CLASS_MAIN);
        k->bpt_full[g] =
            kv_format_split(f) ? kv_layout_bytes_per_token(l, f, g, KV_CLASS_FULL) : k->bpt[g];
    }
    k->state_seq_bytes = 2 * kv_layout_state_bytes(l);
}

int32_t eng_fit_state_every(uint64_t state_bytes, uint64_t kv_block_bytes)
{
    if (state_bytes == 0) return 0;
    if (kv_block_bytes == 0) return 1;
    uint64_t n = (state_bytes + 8 * kv_block_bytes - 1) / (8 * kv_block_bytes);
    return n < 1 ? 1 : n > 1024 ? 1024 : (int32_t)n;
}

int64_t eng_kv_cost_positions(const eng_kv_cost *k, int g, int64_t tokens)
{
    if (tokens <= 0) return 0;
    if (k->window[g] <= 0) return tokens;
    int64_t cap =
        kv_seq_max_blocks(k->window[g], k->max_chunk, k->block_tokens, tokens) * k->block_tokens;
    return tokens < cap ? tokens : cap;
}

uint64_t eng_kv_cost_seq(const eng_kv_cost *k, int64_t tokens)
{
    uint64_t b = tokens > 0 ? k->state_seq_bytes : 0;
    for (int g = 0; g < k->n_groups; g++) {
        int64_t pos = eng_kv_cost_positions(k, g, tokens);
        /* a capped group holds the last blocks of a long sequence: f32 ones only when
         * they reach back before the start (kv_pool_can_hold counts them alike) */
        int64_t first = tokens - pos, nf = k->full_positions - first;
        nf = nf < 0 ? 0 : nf > pos ? pos : nf;
        b += k->bpt_full[g] * (uint64_t)nf + k->bpt[g] * (uint64_t)(pos - nf);
    }
    return b;
}

/* KV bytes decode reads per token at position `at` for layers of one kind:
 * window 0 reads every position before at, else the last `window`; positions
 * before start are f32 (bpt_full), the rest bpt. */
static uint64_t kv_read_bytes(uint64_t bpt, uint64_t bpt_full, int64_t start, int64_t at,
                              int64_t window)
{
    int64_t lo = window > 0 && at > window ? at - window : 0;
    int64_t before = start < at ? start : at;
    before = before > lo ? before - lo : 0;
    return bpt_full * (uint64_t)before + bpt * (uint64_t)(at - lo - before);
}

/* Blocks a sequence of ctx holds in group 0 (+1), the default pool's per-sequence share. */
static int64_t per_seq_all(const kv_layout *l, const eng_runtime_opts *o)
{
    if (l->n_groups == 0) return 0;
    return kv_seq_max_blocks(l->window[0], o->max_step_tokens, o->block_tokens, o->ctx) + 1;
}

eng_runtime_opts eng_runtime_resolve(const wt_config *c, const eng_runtime_opts *in)
{
    eng_runtime_opts o = *in;
    if (o.n_threads <= 0) o.n_threads = plat_cpu_count();
    if (o.block_tokens <= 0) o.block_tokens = 16;
    if (o.max_seqs <= 0) o.max_seqs = 1;
    if (o.max_step_tokens <= 0) o.max_step_tokens = 512;
    if (o.ctx <= 0) o.ctx = c->max_pos > 0 && c->max_pos < 4096 ? (int32_t)c->max_pos : 4096;
    kv_layout l;
    fit_layout(c, o.kv_window_off, &l);
    o.kv_window = single_window(&l); /* the pool is one sliding group: all of it is capped */
    /* blocks one sequence of ctx holds per group (+1: a step may straddle one more) */
    int64_t per_seq[KV_MAX_GROUPS];
    for (int g = 0; g < l.n_groups; g++)
        per_seq[g] = kv_seq_max_blocks(l.window[g], o.max_step_tokens, o.block_tokens, o.ctx) + 1;
    if (o.n_blocks <= 0) {
        int64_t nb = per_seq[0] * o.max_seqs;
        o.n_blocks = nb > INT32_MAX ? INT32_MAX : (int32_t)nb;
    }
    /* the other groups get the same number of sequences' worth as group 0 */
    memset(o.group_blocks, 0, sizeof o.group_blocks);
    memset(o.group_blocks_full, 0, sizeof o.group_blocks_full);
    for (int g = 0; g < l.n_groups; g++) {
        int64_t nb =
            g == 0 ? o.n_blocks : ((int64_t)o.n_blocks * per_seq[g] + per_seq[0] - 1) / per_seq[0];
        o.group_blocks[g] = nb > INT32_MAX ? INT32_MAX : nb < 1 ? 1 : (int32_t)nb;
    }
    /* --quantized-kv-start: each sequence's first ceil(start / bt) blocks are
     * full precision; each group keeps that share of its blocks in that class */
    o.n_blocks_full = 0;
    if (o.kv_quant_start > 0) {
        kv_format f;
        fit_format(c, &o, &f);
        if (kv_format_split(&f)) {
            int64_t full = ((int64_t)o.kv_quant_start + o.block_tokens - 1) / o.block_tokens;
            for (int g = 0; g < l.n_groups; g++) {
                int64_t fg = full > per_seq[g] ? per_seq[g] : full;
                int64_t nf = ((int64_t)o.group_blocks[g] * fg + per_seq[g] - 1) / per_seq[g];
                o.group_blocks_full[g] = nf > o.group_blocks[g] ? o.group_blocks[g] : (int32_t)nf;
            }
            o.n_blocks_full = o.group_blocks_full[0];
        }
    }
    /* recurrent state: a working state and a latest snapshot per sequence, and a
     * snapshot cache of a quarter of the default KV pool's bytes, at least 64
     * states or 64 MiB, whichever is less (8..4096 states); the cadence from
     * the state's size (eng_fit_state_every) */
    uint64_t sb = kv_layout_state_bytes(&l);
    if (sb == 0) {
        o.state_blocks = 0;
        o.state_every = 0;
    } else {
        kv_format f;
        fit_format(c, &o, &f);
        uint64_t kvb =
            kv_layout_bytes_per_token(&l, &f, -1, KV_CLASS_MAIN) * (uint64_t)o.block_tokens;
        if (o.state_blocks <= 0) {
            uint64_t pool = kvb * (uint64_t)per_seq_all(&l, &o) * (uint64_t)o.max_seqs / 4;
            uint64_t floor = 64 * sb < ((uint64_t)64 << 20) ? 64 * sb : (uint64_t)64 << 20;
            uint64_t cache = (pool > floor ? pool : floor) / sb;
            cache = cache < 8 ? 8 : cache > 4096 ? 4096 : cache;
            o.state_blocks = 2 * o.max_seqs + (int32_t)cache;
        }
        if (o.state_every == 0) o.state_every = eng_fit_state_every(sb, kvb);
    }
    /* decode needs one logits row per sequence; all-position prefill (logits
     * --all, verification) runs in chunks of at most this many tokens */
    int32_t rows = o.max_seqs > 64 ? o.max_seqs : 64;
    if (rows > o.max_step_tokens) rows = o.max_step_tokens;
    if (rows < o.max_seqs) rows = o.max_seqs;
    o.logit_rows = rows;
    return o;
}

void eng_fit_compute(const wt_config *c, uint64_t weights_bytes, const eng_runtime_opts *in,
                     eng_fit *f)
{
    memset(f, 0, sizeof *f);
    f->o = eng_runtime_resolve(c, in);
    const eng_runtime_opts *o = &f->o;
    f->weights_bytes = weights_bytes;
    kv_format kf;
    fit_format(c, o, &kf);
    kv_format_describe(&kf, f->kv_format, sizeof f->kv_format);
    kv_layout attn, l; /* the layers' windows; what the pool keeps (kv_window_off: all) */
    fit_layout(c, 0, &attn);
    l = attn;
    if (o->kv_window_off) kv_layout_keep_all(&l);
    eng_kv_cost_init(&f->kv_cost, &l, &kf, o->block_tokens, o->max_step_tokens);
    f->n_kv_groups = l.n_groups;
    f->kv_layers = kv_layout_layers(&l, -1);
    uint64_t fl[2] = {0, 0}, sl[2] = {0, 0}; /* per class: full-attention and sliding groups */
    int32_t total_blocks = 0;
    for (int g = 0; g < l.n_groups; g++) {
        eng_fit_group *fg = &f->kv_group[g];
        fg->window = l.window[g];
        fg->attn_window = attn.window[g];
        fg->layers = kv_layout_layers(&l, g);
        fg->bytes_per_token = f->kv_cost.bpt[g];
        fg->bytes_per_token_full = f->kv_cost.bpt_full[g];
        fg->seq_max_blocks =
            kv_seq_max_blocks(l.window[g], o->max_step_tokens, o->block_tokens, o->ctx);
        fg->n_blocks = o->group_blocks[g];
        fg->n_blocks_full = o->group_blocks_full[g];
        for (int cls = 0; cls < 2; cls++) {
            uint64_t b = kv_layout_bytes_per_token(&l, &kf, g, cls);
            if (attn.window[g] > 0)
                sl[cls] += b;
            else
                fl[cls] += b;
        }
        f->kv_bytes_per_token += fg->bytes_per_token;
        f->kv_bytes_per_token_full += fg->bytes_per_token_full;
        /* the same sum kv_pool_create allocates */
        f->kv_pool_bytes += (fg->bytes_per_token_full * (uint64_t)fg->n_blocks_full +
                             fg->bytes_per_token * (uint64_t)(fg->n_blocks - fg->n_blocks_full)) *
                            (uint64_t)o->block_tokens;
        total_blocks += fg->n_blocks;
        if (attn.window[g] > f->sliding_window) f->sliding_window = attn.window[g];
    }
    f->kv_bytes_per_token_full_layers = fl[KV_CLASS_MAIN];
    f->kv_bytes_per_token_sliding_layers = sl[KV_CLASS_MAIN];
    f->sliding_layers = eng_fit_sliding_layers(c);
    f->kv_window = o->kv_window;
    f->kv_seq_max_blocks = f->kv_group[0].seq_max_blocks;
    f->kv_seq_bytes = eng_kv_cost_seq(&f->kv_cost, o->ctx) - f->kv_cost.state_seq_bytes;
    f->state_bytes = kv_layout_state_bytes(&l);
    f->state_seq_bytes = f->kv_cost.state_seq_bytes;
    f->state_blocks = o->state_blocks;
    f->state_every = o->state_every > 0 ? o->state_every : 0;
    f->state_pool_bytes = f->state_bytes * (uint64_t)o->state_blocks;
    for (int32_t L = 0; L < l.n_layers; L++)
        f->state_layers += l.state_floats[L] > 0;
    mdl_plan plan;
    uint64_t vecs = 0;
    mdl_params pp = {0};
    int have_plan = mdl_plan_build(c, &plan, NULL) == KILN_OK;
    if (have_plan) {
        f->scratch_bytes =
            mdl_scratch_bytes(&plan, o->n_threads, o->max_step_tokens, o->max_seqs, o->ctx, NULL);
        /* f32 copies of norms and biases */
        for (int32_t L = 0; L < plan.n_layers; L++) {
            const mdl_layer_plan *lp = &plan.layer[L];
            vecs += (uint64_t)(3 * plan.hidden + 2 * lp->head_dim +
                               (int64_t)(lp->n_heads + 2 * lp->n_kv_heads) * lp->head_dim +
                               2 * lp->ffn_dim) *
                    4;
            if (lp->ffn == MDL_FFN_MOE) /* router scale, extra norms, expert views */
                vecs += (uint64_t)(4 * plan.hidden + lp->moe.n_experts) * 4 +
                        3 * (uint64_t)lp->moe.n_experts * 80; /* sizeof(kn_mat) */
            if (lp->mixer == MDL_MIX_DELTANET) /* f32 conv taps, A, dt bias, gated norm */
                vecs += (uint64_t)((2 * (int64_t)lp->lin_k_heads * lp->lin_k_dim +
                                    (int64_t)lp->lin_v_heads * lp->lin_v_dim) *
                                       lp->conv_k +
                                   2 * lp->lin_v_heads + lp->lin_v_dim) *
                        4;
        }
        mdl_plan_params(&plan, c->tie_word_embeddings, &pp);
        mdl_plan_free(&plan);
    }
    f->logits_bytes = (uint64_t)o->logit_rows * (uint64_t)c->vocab * 4;
    /* sampler scratch; norm/bias copies; pool metadata and index */
    f->other_bytes = eng_sample_scratch_bytes(c->vocab) + vecs + (uint64_t)total_blocks * 64;
    f->total_bytes = f->weights_bytes + f->kv_pool_bytes + f->state_pool_bytes + f->scratch_bytes +
                     f->logits_bytes + f->other_bytes;
    /* decode streams every weight but the tables a token gathers one row of
     * (an untied embedding, Gemma's per-layer input table) and, in MoE layers,
     * only the top_k experts it is routed to (mdl_plan_params; bytes per
     * parameter those of the whole file, close enough for a prediction), a
     * hybrid's recurrent state (read and written), plus
     * the K/V of the context so far (ctx/2 on average; a sliding layer reads
     * only its window, whether or not its blocks are capped) */
    int64_t half = o->ctx / 2, start = kv_format_split(&kf) ? o->kv_quant_start : 0;
    f->read_per_token = weights_bytes;
    if (pp.total > 0)
        f->read_per_token = (uint64_t)((double)weights_bytes * (double)pp.decode / (double)pp.total);
    f->read_per_token += 2 * f->state_bytes; /* a state is read and written */
    for (int g = 0; g < attn.n_groups; g++)
        f->read_per_token += kv_read_bytes(kv_layout_bytes_per_token(&attn, &kf, g, KV_CLASS_MAIN),
                                           kv_layout_bytes_per_token(&attn, &kf, g, KV_CLASS_FULL),
                                           start, half, attn.window[g]);
}

kiln_code eng_fit_model(const char *dir, const eng_runtime_opts *o, eng_fit *out, kiln_err *err)
{
    wt_config c;
    kiln_code rc = wt_config_load(dir, &c, err);
    if (rc) return rc;
    wt_set *ws;
    if ((rc = wt_set_open(dir, &ws, err))) {
        wt_config_free(&c);
        return rc;
    }
    kv_format kf;
    if ((rc = eng_runtime_kv_format(dir, &c, o, &kf, err))) {
        wt_set_close(ws);
        wt_config_free(&c);
        return rc;
    }
    eng_runtime_opts oo = *o;
    oo.kv_fmt = &kf;
    eng_fit_compute(&c, mdl_weights_used_bytes(&c, ws), &oo, out);
    out->o.kv_fmt = NULL; /* kf dies here */
    wt_set_close(ws);
    wt_config_free(&c);
    return KILN_OK;
}

int32_t eng_fit_max_ctx(const wt_config *c, uint64_t weights_bytes, const eng_runtime_opts *in,
                        uint64_t budget)
{
    eng_runtime_opts o = *in;
    o.n_blocks = 0; /* derived from ctx */
    int32_t bt = o.block_tokens > 0 ? o.block_tokens : 16;
    int32_t lo = 0, hi = 1 << 24; /* in blocks of bt tokens */
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        o.ctx = mid * bt;
        eng_fit f;
        eng_fit_compute(c, weights_bytes, &o, &f);
        if (f.total_bytes <= budget)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo * bt;
}

/* ---------------------------------------------------------------- bandwidth */

typedef struct {
    const uint64_t *buf;
    uint64_t sums[64]; /* one per thread, never shared in a cache line that matters */
} bw_ctx;

static void bw_read(void *ctx, int64_t b, int64_t e, int tid)
{
    bw_ctx *c = ctx;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int64_t i = b; i + 3 < e; i += 4) {
        s0 += c->buf[i];
        s1 += c->buf[i + 1];
        s2 += c->buf[i + 2];
        s3 += c->buf[i + 3];
    }
    c->sums[tid & 63] += s0 + s1 + s2 + s3;
}

double eng_measure_bandwidth(int n_threads)
{
    size_t bytes = (size_t)512 << 20, n = bytes / 8;
    uint64_t *buf = malloc(bytes);
    if (!buf) return 0.0;
    for (size_t i = 0; i < n; i++)
        buf[i] = i;
    kn_pool *pool = NULL;
    if (n_threads > 1 && kn_pool_create(n_threads, &pool, NULL) != KILN_OK) pool = NULL;
    bw_ctx c = {.buf = buf};
    double best = 1e30;
    for (int pass = 0; pass < 3; pass++) {
        double t0 = plat_now();
        kn_pool_for(pool, (int64_t)n, 1 << 16, bw_read, &c);
        double dt = plat_now() - t0;
        if (dt < best) best = dt;
    }
    kn_pool_destroy(pool);
    free(buf);
    return best > 0 ? (double)bytes / best / 1e9 : 0.0;
}
