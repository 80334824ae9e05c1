/*
 * eng_fit.h — what a model needs in memory, predicted from config.json and the
 * safetensors headers alone (no weight is read), with the same sizing
 * functions the runtime allocates with, so prediction and reality agree.
 *
 *   eng_runtime_opts o = eng_runtime_opts_default(); o.ctx = 4096; o.max_seqs = 8;
 *   eng_fit f; eng_fit_model("/models/x", &o, &f, &err);
 *   printf("%.2f GB\n", f.total_bytes / 1e9);
 *   int32_t ctx = eng_fit_max_ctx("/models/x", &o, 8e9, &err);   // for an 8 GB budget
 */
#ifndef KILN_ENG_FIT_H
#define KILN_ENG_FIT_H

#include <stdint.h>

#include "engine/eng_runtime.h"
#include "weights/wt_config.h"

/* What one sequence's K/V costs, per KV group (kv_layout.h): the bytes of a
 * position, the window that caps what a group holds, the f32 positions before
 * --quantized-kv-start. Built once (eng_kv_cost_init) and used by `kiln fit`,
 * --memory-budget and --kv-budget alike. */
typedef struct {
    int n_groups;
    int32_t block_tokens, max_chunk;
    int64_t full_positions;           /* block-granular; 0 without a split */
    int32_t window[KV_MAX_GROUPS];    /* retention: 0 keeps every position */
    uint64_t bpt[KV_MAX_GROUPS];      /* K+V bytes of a position, main class */
    uint64_t bpt_full[KV_MAX_GROUPS]; /* the same before --quantized-kv-start */
    uint64_t state_seq_bytes;         /* recurrent state one sequence holds (its working
                                         state and its latest snapshot); 0 without */
} eng_kv_cost;

/* One KV group's share of the plan. */
typedef struct {
    int32_t window;           /* retention window (0: keeps every position) */
    int32_t attn_window;      /* its layers' attention window (0: full attention) */
    int32_t layers;           /* layers that store K/V in it */
    uint64_t bytes_per_token; /* K+V of one position, main class */
    uint64_t bytes_per_token_full;
    int64_t seq_max_blocks;          /* blocks one sequence of ctx positions holds at most */
    int32_t n_blocks, n_blocks_full; /* its share of the pool */
} eng_fit_group;

typedef struct {
    eng_runtime_opts o;          /* the options with every default resolved */
    uint64_t weights_bytes;      /* tensors as mapped (the safetensors data) */
    uint64_t kv_bytes_per_token; /* K+V over all layers at the KV format's true bytes (scale/
                                    bias included); past --quantized-kv-start. A block holds
                                    every layer of its positions (docs/kv.md) */
    uint64_t kv_bytes_per_token_full_layers;    /* of it: the full-attention layers */
    uint64_t kv_bytes_per_token_sliding_layers; /* of it: the sliding-window layers */
    int32_t sliding_window;                     /* the model's window (0 = none) */
    int32_t sliding_layers;                     /* layers that use it and store K/V */
    int32_t kv_window;                /* o.kv_window: sequences hold only their window's blocks
                                         (every layer slides); 0 = not capped (a full layer needs
                                         every position, and a block holds every layer) */
    int64_t kv_seq_max_blocks;        /* blocks one sequence of ctx positions holds at most */
    uint64_t kv_seq_bytes;            /* KV bytes of one sequence of ctx positions (window-capped,
                                         the f32 blocks of --quantized-kv-start at their size) */
    uint64_t kv_bytes_per_token_full; /* the same before --quantized-kv-start (f32) */
    uint64_t kv_pool_bytes;           /* n_blocks_full x full block + the rest x main block bytes */
    char kv_format[128];              /* kv_format_describe */
    uint64_t scratch_bytes;      /* the step arena: activations of a full prefill chunk,
                                    attention scratch per thread */
    uint64_t logits_bytes;       /* logit rows x vocab x 4 */
    uint64_t other_bytes;        /* sampler scratch, norm/bias copies, tables */
    uint64_t total_bytes;        /* everything, a draft model's draft_bytes included */
    uint64_t draft_bytes;        /* a draft model (--draft-model): its weights, KV pool and
                                    transients (eng_draft_cost); 0 = none; set by the caller */
    uint64_t read_per_token; /* bytes streamed per decoded token at ctx/2 (weights + KV) */
    int n_kv_groups;         /* KV groups of the pool (kv_layout.h) */
    eng_fit_group kv_group[KV_MAX_GROUPS];
    int32_t kv_layers; /* layers that store K/V (KV-shared and recurrent ones do not) */
    eng_kv_cost kv_cost;
    /* recurrent state (hybrid models, docs/hybrid.md); zeros without recurrent layers */
    int32_t state_layers;      /* recurrent layers */
    uint64_t state_bytes;      /* one state: every recurrent layer of one sequence (f32) */
    uint64_t state_seq_bytes;  /* what one running sequence holds: working state + latest
                                  snapshot (2 x state_bytes), whatever its length */
    int32_t state_blocks;      /* state blocks in the pool (working, snapshots) */
    int32_t state_every;       /* snapshot cadence in KV blocks (0: none on a cadence) */
    uint64_t state_pool_bytes; /* state_blocks x state_bytes (not in kv_pool_bytes) */
} eng_fit;

/* API */
/* 1 when layer L attends through a sliding window (the model's plan). */
int eng_fit_layer_sliding(const wt_config *c, int64_t L);
int32_t eng_fit_sliding_layers(const wt_config *c);
/* The window every sequence's KV is capped at when the whole pool is one
 * sliding group (every layer that stores K/V slides), else 0; mixed models
 * cap their sliding groups apart (eng_fit.kv_group, docs/kv.md). */
int32_t eng_fit_kv_window(const wt_config *c);
/* The KV layout of a config's plan (kv_layout.h); keep_all: no window caps. */
kiln_code eng_fit_kv_layout(const wt_config *c, int keep_all, kv_layout *out, kiln_err *err);
/* K+V bytes of one position over the full-attention (sliding 0) or the
 * sliding-window (sliding 1) layers, in block class cls of format f. */
uint64_t eng_fit_kv_bytes_layers(const wt_config *c, const kv_format *f, int cls, int sliding);
/* The default snapshot cadence: every N blocks so that a snapshot costs at
 * most 8 x the KV of the N blocks it follows (1 when states are small). */
int32_t eng_fit_state_every(uint64_t state_bytes, uint64_t kv_block_bytes);
/* Costs of a layout in format f (block size, step chunk). */
void eng_kv_cost_init(eng_kv_cost *k, const kv_layout *l, const kv_format *f, int32_t block_tokens,
                      int32_t max_chunk);
/* Positions of a sequence of `tokens` that group g holds at once (window-capped). */
int64_t eng_kv_cost_positions(const eng_kv_cost *k, int g, int64_t tokens);
/* K/V bytes a sequence of `tokens` positions holds at most, over every group. */
uint64_t eng_kv_cost_seq(const eng_kv_cost *k, int64_t tokens);
/* Fills the defaults of o from the config (threads, ctx, pool size, logit rows,
 * the window cap). A sequence holds at most kv_seq_max_blocks(ctx) blocks; the
 * default pool is max_seqs x (that + 1). */
eng_runtime_opts eng_runtime_resolve(const wt_config *c, const eng_runtime_opts *o);
/* The plan for a config and weight size. */
void eng_fit_compute(const wt_config *c, uint64_t weights_bytes, const eng_runtime_opts *o,
                     eng_fit *out);
/* Reads dir's config.json and safetensors headers and plans. */
kiln_code eng_fit_model(const char *dir, const eng_runtime_opts *o, eng_fit *out, kiln_err *err);
/* The largest ctx (multiple of the block size, >= 1) whose total fits budget_bytes
 * with o's batch; 0 when not even the weights and one block fit. */
int32_t eng_fit_max_ctx(const wt_config *c, uint64_t weights_bytes, const eng_runtime_opts *o,
                        uint64_t budget_bytes);

/* Measures streaming read bandwidth (GB/s, decimal) over a 512 MiB buffer with
 * n_threads threads: best of 3 passes. 0 when the buffer cannot be allocated. */
double eng_measure_bandwidth(int n_threads);

#endif
