/*
 * eng_admit.c — the --memory-budget plan (context limit and KV pool size),
 * KV projections for --kv-budget, and KILN_CONTEXT_LIMIT. See eng_admit.h for
 * what "max safe context" means.
 *
 * The plan uses eng_fit_compute for every byte it counts, so `kiln fit
 * --budget`, GET /fit and what eng_runtime_open allocates agree. Sizes that
 * depend on the context (step scratch: attention rows and block pointer
 * tables) are evaluated at the candidate context; the cost of one KV block is
 * the KV format's bytes per block plus its metadata, as eng_fit counts them.
 * With --quantized-kv-start a pool holds blocks of two sizes, so the block
 * count is found against the whole plan (blocks_left), never one block's cost.
 * Invariant: fits(C) is monotone (a larger C needs more blocks and at least
 * as much scratch), so the largest fitting C is found by bisection.
 */
#include "engine/eng_admit.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Binary, shared libraries, the HTTP and engine threads' stacks, allocator
 * slack: measured ~11 MB resident for a tiny model before any request. */
#define ADMIT_BASE_BYTES ((uint64_t)16 << 20)
#define ADMIT_SLOT_BYTES ((uint64_t)1 << 20)

eng_admit_in eng_admit_in_default(void)
{
    eng_admit_in in;
    memset(&in, 0, sizeof in);
    return in;
}

const char *eng_limit_source_name(eng_limit_source s)
{
    switch (s) {
    case ENG_LIMIT_CTX:
        return "ctx";
    case ENG_LIMIT_BUDGET:
        return "memory_budget";
    case ENG_LIMIT_ENV:
        return "KILN_CONTEXT_LIMIT";
    default:
        return "model";
    }
}

uint64_t eng_admit_overhead_bytes(uint64_t tokenizer_json_bytes, uint64_t tokenizer_config_bytes,
                                  uint64_t server_bytes, int32_t batch)
{
    return ADMIT_BASE_BYTES + 10 * tokenizer_json_bytes + 4 * tokenizer_config_bytes +
           server_bytes + (uint64_t)(batch > 0 ? batch : 1) * ADMIT_SLOT_BYTES;
}

static uint64_t file_size(const char *dir, const char *name)
{
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0 && st.st_size > 0 ? (uint64_t)st.st_size : 0;
}

uint64_t eng_admit_overhead_for_dir(const char *dir, uint64_t server_bytes, int32_t batch)
{
    return eng_admit_overhead_bytes(file_size(dir, "tokenizer.json"),
                                    file_size(dir, "tokenizer_config.json"), server_bytes, batch);
}

uint64_t eng_admit_seq_kv_bytes(uint64_t kv_bytes_per_token, int64_t tokens)
{
    return tokens > 0 ? kv_bytes_per_token * (uint64_t)tokens : 0;
}

uint64_t eng_admit_seq_kv_bytes_split(uint64_t kv_bytes_per_token, uint64_t full_bytes_per_token,
                                      int64_t full_positions, int64_t tokens)
{
    if (tokens <= 0) return 0;
    int64_t nf = full_positions < 0 ? 0 : full_positions < tokens ? full_positions : tokens;
    return full_bytes_per_token * (uint64_t)nf + kv_bytes_per_token * (uint64_t)(tokens - nf);
}

int64_t eng_admit_seq_positions(const eng_runtime_opts *o, int64_t tokens)
{
    if (tokens <= 0 || o->kv_window <= 0) return tokens > 0 ? tokens : 0;
    int64_t cap = kv_seq_max_blocks(o->kv_window, o->max_step_tokens, o->block_tokens, tokens) *
                  o->block_tokens;
    return tokens < cap ? tokens : cap;
}

kiln_code eng_admit_parse_limit(const char *s, int32_t *out, kiln_err *err)
{
    *out = 0;
    if (!s || !*s) return KILN_OK;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s || v < 2 || v > INT32_MAX || s[0] == '+' || s[0] == ' ')
        return kiln_fail(err, KILN_E_INVALID,
                         "KILN_CONTEXT_LIMIT must be a whole number of tokens >= 2, got '%.40s'",
                         s);
    *out = (int32_t)v;
    return KILN_OK;
}

/* ---------------------------------------------------------------- the plan */

typedef struct {
    const wt_config *c;
    uint64_t weights;
    eng_runtime_opts o; /* ctx and n_blocks vary */
    uint64_t overhead; /* process overhead + adapters */
    uint64_t adapters; /* of which LoRA adapters (for the refusal's words) */
    int32_t window0; /* group 0's retention window (its blocks per sequence are capped) */
    int n_groups;    /* KV groups: past group 0 the pool's cost is not linear in n_blocks */
    uint64_t draft_fixed, draft_block; /* a draft model: fixed bytes, KV bytes per block */
} planner;

/* Bytes that do not depend on the pool size at context ctx, and the cost of
 * one main-class block (its bytes and its pool metadata). */
static void fixed_at(const planner *p, int32_t ctx, uint64_t *fixed, uint64_t *block)
{
    eng_runtime_opts o = p->o;
    o.ctx = ctx;
    o.n_blocks = 1;
    eng_fit f1;
    eng_fit_compute(p->c, p->weights, &o, &f1);
    *block = f1.kv_bytes_per_token * (uint64_t)f1.o.block_tokens + 64; /* 64: metadata, eng_fit */
    *fixed = f1.total_bytes - f1.kv_pool_bytes - 64 + p->overhead + p->draft_fixed;
    *block += p->draft_block; /* the draft model's pool has one block per target block */
}

/* Everything counted for a pool of nb >= 1 blocks at context ctx. */
static uint64_t total_at(const planner *p, int32_t ctx, int64_t nb)
{
    eng_runtime_opts o = p->o;
    o.ctx = ctx;
    o.n_blocks = (int32_t)nb;
    eng_fit f;
    eng_fit_compute(p->c, p->weights, &o, &f);
    return f.total_bytes + p->overhead + p->draft_fixed + (uint64_t)nb * p->draft_block;
}

/* KV blocks a budget leaves at context ctx (0 when the fixed part alone is over).
 * One block class: (budget - fixed) / block. With --quantized-kv-start the pool
 * keeps a share of its blocks in the larger full-precision class, and with
 * several KV groups the other groups' blocks follow group 0's count
 * (eng_runtime_resolve), so the cost is not linear in the block count: the
 * largest count whose whole plan fits is found by bisection (the plan only
 * grows with the count), starting from the group-0 main-class bound. */
static int64_t blocks_left(const planner *p, int32_t ctx, uint64_t budget)
{
    uint64_t fixed, block;
    fixed_at(p, ctx, &fixed, &block);
    if (budget <= fixed || block == 0) return 0;
    uint64_t n = (budget - fixed) / block;
    int64_t hi = n > INT32_MAX ? INT32_MAX : (int64_t)n;
    if ((p->o.kv_quant_start <= 0 && p->n_groups <= 1) || hi == 0) return hi;
    int64_t lo = 0; /* fits; hi may not */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (total_at(p, ctx, mid) <= budget)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Blocks one sequence of `tokens` holds at most (window-capped). */
static int64_t blocks_for(const planner *p, int32_t tokens)
{
    return kv_seq_max_blocks(p->window0, p->o.max_step_tokens, p->o.block_tokens, tokens);
}

static int fits(const planner *p, int32_t ctx, uint64_t budget)
{
    return blocks_left(p, ctx, budget) >= blocks_for(p, ctx);
}

/* The pool for ctx: batch x ctx (+ prompt cache), or an explicit size. */
static int64_t blocks_wanted(const planner *p, const eng_runtime_opts *user, int32_t ctx,
                             int32_t extra)
{
    if (user->n_blocks > 0) return user->n_blocks;
    int64_t n = (blocks_for(p, ctx) + 1) * p->o.max_seqs + extra; /* eng_runtime_resolve */
    return n > INT32_MAX ? INT32_MAX : n;
}

static kiln_code refuse(const planner *p, uint64_t budget, kiln_err *err)
{
    eng_runtime_opts o = p->o;
    o.ctx = 2;
    o.n_blocks = 1;
    eng_fit f;
    eng_fit_compute(p->c, p->weights, &o, &f);
    uint64_t fixed, block;
    fixed_at(p, 2, &fixed, &block);
    char ad[48] = "";
    if (p->adapters) snprintf(ad, sizeof ad, ", LoRA adapters %.3f", (double)p->adapters / 1e9);
    return kiln_fail(
        err, KILN_E_BUDGET,
        "the memory budget of %.3f GB leaves no room for any context: weights %.3f GB "
        "+ fixed overhead %.3f GB (step scratch %.3f, logits %.3f, other %.3f, process "
        "%.3f%s, draft model %.3f) + one KV block %.6f GB = %.3f GB (batch %d, %d threads)",
        (double)budget / 1e9, (double)p->weights / 1e9, (double)(fixed - p->weights) / 1e9,
        (double)f.scratch_bytes / 1e9, (double)f.logits_bytes / 1e9,
        (double)(f.other_bytes - 64) / 1e9, (double)(p->overhead - p->adapters) / 1e9, ad,
        (double)p->draft_fixed / 1e9, (double)block / 1e9,
        (double)(fixed + block) / 1e9, (int)p->o.max_seqs, p->o.n_threads);
}

/* Largest ctx in [2, cap] that fits the budget; 0 when none. */
static int32_t max_safe(const planner *p, int32_t cap, uint64_t budget)
{
    if (cap < 2 || !fits(p, 2, budget)) return 0;
    int32_t lo = 2, hi = cap;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (fits(p, mid, budget))
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

kiln_code eng_admit_compute(const wt_config *c, uint64_t weights_bytes, const eng_runtime_opts *o,
                            const eng_admit_in *in, eng_admit_plan *out, kiln_err *err)
{
    memset(out, 0, sizeof *out);
    planner p = {.c = c,
                 .weights = weights_bytes,
                 .overhead = in->overhead_bytes + in->adapter_bytes,
                 .adapters = in->adapter_bytes,
                 .draft_fixed = in->draft_fixed_bytes,
                 .draft_block = in->draft_block_bytes};
    eng_runtime_opts user = *o;
    p.o = eng_runtime_resolve(c, &user); /* ctx cap: --ctx or min(model, 4096) */
    kv_layout l;
    if (eng_fit_kv_layout(c, p.o.kv_window_off, &l, NULL) == KILN_OK) {
        p.window0 = l.window[0];
        p.n_groups = l.n_groups;
    }
    int32_t cap = p.o.ctx;
    if (cap < 2)
        return kiln_fail(err, KILN_E_INVALID, "a context of %d tokens is too small", (int)cap);
    if (in->env_limit < 0 || in->env_limit == 1)
        return kiln_fail(err, KILN_E_INVALID, "KILN_CONTEXT_LIMIT must be >= 2");
    int32_t safe = cap, ctx;
    out->source = in->ctx_explicit ? ENG_LIMIT_CTX : ENG_LIMIT_MODEL;
    if (in->budget_bytes) {
        safe = max_safe(&p, cap, in->budget_bytes);
        if (safe == 0) return refuse(&p, in->budget_bytes, err);
        if (safe < cap) out->source = ENG_LIMIT_BUDGET;
    }
    ctx = safe;
    if (in->env_limit > 0 && in->env_limit < ctx) {
        ctx = in->env_limit; /* narrows, never enlarges */
        out->source = ENG_LIMIT_ENV;
    }
    int64_t nb = blocks_wanted(&p, &user, ctx, in->extra_blocks);
    uint64_t fixed, block;
    fixed_at(&p, ctx, &fixed, &block);
    if (in->budget_bytes) {
        int64_t left = blocks_left(&p, ctx, in->budget_bytes);
        if (nb > left) nb = left; /* >= blocks_for(ctx): fits(ctx) holds for ctx <= safe */
        out->usable_bytes = in->budget_bytes - fixed;
    }
    out->ctx = ctx;
    out->n_blocks = (int32_t)nb;
    out->max_safe_context = safe;
    out->enforced_context = in->budget_bytes || in->env_limit || in->ctx_explicit ? ctx : 0;
    out->budget_bytes = in->budget_bytes;
    out->overhead_bytes = in->overhead_bytes;
    out->adapter_bytes = in->adapter_bytes;
    out->fixed_bytes = fixed;
    out->block_bytes = block;
    eng_runtime_opts fo = p.o;
    fo.ctx = ctx;
    fo.n_blocks = out->n_blocks;
    eng_fit_compute(c, weights_bytes, &fo, &out->fit);
    if (in->draft_fixed_bytes || in->draft_block_bytes) {
        out->fit.draft_bytes = in->draft_fixed_bytes + (uint64_t)out->n_blocks * in->draft_block_bytes;
        out->fit.total_bytes += out->fit.draft_bytes;
    }
    return KILN_OK;
}
