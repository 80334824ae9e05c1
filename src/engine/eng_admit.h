/*
 * eng_admit.h — memory admission: how a --memory-budget becomes a context
 * limit and a KV pool size, what a request's KV is projected to cost (for
 * --kv-budget), and KILN_CONTEXT_LIMIT.
 *
 *   eng_admit_in in = eng_admit_in_default();
 *   in.budget_bytes = 2e9;  in.overhead_bytes = eng_admit_overhead_bytes(tok_json, tok_cfg, 0, 8);
 *   eng_admit_plan p;
 *   if (eng_admit_compute(&cfg, weights, &opts, &in, &p, &err)) ...;  // refused: err says why, in
 * numbers opts.ctx = p.ctx;  opts.n_blocks = p.n_blocks;  eng_runtime_open(dir, &opts, ...);
 *
 * "Max safe context" (docs/engine.md, Admission): the KV pool is ONE pool
 * shared by the batch. With a budget, everything that does not depend on the
 * number of KV blocks is subtracted first (weights as mapped, step scratch and
 * logits for the context, sampler scratch, norm copies, and the process
 * overhead outside the runtime); the pool gets what is left, capped at what
 * batch x ctx (+ --prompt-cache) would need. The max safe context is the
 * largest context C (<= --ctx, default min(model max, 4096)) for which that
 * pool still holds ONE sequence of C tokens (window-capped: kv_seq_max_blocks). When the pool holds
 * fewer than batch sequences at full length, the engine queues or preempts (the pool never grows).
 * The enforced context limit is min(max safe context, KILN_CONTEXT_LIMIT); the runtime is opened
 * with it as its ctx.
 */
#ifndef KILN_ENG_ADMIT_H
#define KILN_ENG_ADMIT_H

#include <stdint.h>

#include "engine/eng_fit.h"

/* Where the enforced context limit comes from (the tightest wins). */
typedef enum {
    ENG_LIMIT_MODEL,  /* the default ctx: min(model max, 4096); nothing explicit */
    ENG_LIMIT_CTX,    /* --ctx */
    ENG_LIMIT_BUDGET, /* --memory-budget: the max safe context */
    ENG_LIMIT_ENV,    /* KILN_CONTEXT_LIMIT */
} eng_limit_source;

typedef struct {
    uint64_t budget_bytes;   /* --memory-budget; 0 = none (nothing refused on an estimate) */
    uint64_t overhead_bytes; /* process memory outside the runtime (eng_admit_overhead_bytes) */
    uint64_t adapter_bytes;  /* LoRA adapters loaded beside the model (cli_loras_bytes) */
    int32_t env_limit;       /* KILN_CONTEXT_LIMIT; 0 = unset */
    int32_t extra_blocks;    /* --prompt-cache blocks on top of batch x ctx */
    int ctx_explicit;        /* 1: opts.ctx came from --ctx */
    /* a draft model (eng_draft_cost): its fixed bytes (weights, scratch, logits)
     * and the bytes its KV pool adds per target block (one draft block each) */
    uint64_t draft_fixed_bytes, draft_block_bytes;
} eng_admit_in;

typedef struct {
    int32_t ctx;              /* the runtime's ctx: the enforced limit */
    int32_t n_blocks;         /* KV pool blocks */
    int32_t max_safe_context; /* see the header comment; without a budget: ctx before
                                 KILN_CONTEXT_LIMIT */
    int32_t enforced_context; /* 0 when nothing explicit limits the context */
    eng_limit_source source;
    uint64_t budget_bytes; /* 0 = none */
    uint64_t overhead_bytes;
    uint64_t adapter_bytes; /* in.adapter_bytes: counted in fixed_bytes like the overhead */
    uint64_t fixed_bytes;  /* everything but the KV pool, overhead and adapters included */
    uint64_t usable_bytes; /* budget - fixed: room for the KV pool; 0 without a budget */
    uint64_t block_bytes;  /* one KV block incl. its pool metadata */
    eng_fit fit;           /* the plan at (ctx, n_blocks); fit.draft_bytes: the draft model's
                              share (fixed + n_blocks draft blocks), in fit.total_bytes */
} eng_admit_plan;

/* API */
eng_admit_in eng_admit_in_default(void);
/* Plans ctx and pool size for o (threads, batch, ctx cap, block size) inside
 * in->budget_bytes. KILN_E_BUDGET when the budget leaves no room for any
 * context (the message has the numbers); KILN_E_INVALID for a bad env limit. */
kiln_code eng_admit_compute(const wt_config *c, uint64_t weights_bytes, const eng_runtime_opts *o,
                            const eng_admit_in *in, eng_admit_plan *out, kiln_err *err);
/* Process memory outside the runtime, estimated from files so that `kiln fit`
 * and `kiln serve` agree: binary, libraries and thread stacks (a constant),
 * the tokenizer (10x tokenizer.json: measured ~7.5x resident, ~9x at load),
 * the chat template (4x tokenizer_config.json), server_bytes (the responses
 * store cap), 1 MiB per batch slot for request buffers. */
uint64_t eng_admit_overhead_bytes(uint64_t tokenizer_json_bytes, uint64_t tokenizer_config_bytes,
                                  uint64_t server_bytes, int32_t batch);
/* The same, reading the file sizes from a model folder (missing files count 0). */
uint64_t eng_admit_overhead_for_dir(const char *dir, uint64_t server_bytes, int32_t batch);
/* Projected KV bytes of one sequence of `tokens` positions at kv_bytes_per_token
 * (the KV format's bytes, from eng_fit). Give it eng_admit_seq_positions, not
 * the raw count, on a sliding-window model. */
uint64_t eng_admit_seq_kv_bytes(uint64_t kv_bytes_per_token, int64_t tokens);
/* The same with --quantized-kv-start: the first full_positions positions (the
 * blocks that start before the start, block-granular) cost full_bytes_per_token
 * (f32), the rest kv_bytes_per_token. */
uint64_t eng_admit_seq_kv_bytes_split(uint64_t kv_bytes_per_token, uint64_t full_bytes_per_token,
                                      int64_t full_positions, int64_t tokens);
/* Positions of a sequence of `tokens` that hold KV at once: all of them, or
 * with a window cap (o resolved: o->kv_window) at most kv_seq_max_blocks x
 * block_tokens (the window plus one step's chunk, block-granular). Only a
 * model whose every layer slides is capped: a block holds every layer, and a
 * full-attention layer needs every position (docs/kv.md). */
int64_t eng_admit_seq_positions(const eng_runtime_opts *o, int64_t tokens);
/* Parses KILN_CONTEXT_LIMIT: NULL or "" = unset (*out 0); a positive integer
 * >= 2 (a context must hold a prompt token and a generated one) else KILN_E_INVALID. */
kiln_code eng_admit_parse_limit(const char *s, int32_t *out, kiln_err *err);
const char *eng_limit_source_name(
    eng_limit_source s); /* "model", "ctx", "memory_budget", "KILN_CONTEXT_LIMIT" */

#endif
