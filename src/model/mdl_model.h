/*
 * mdl_model.h — a loaded model and the one batched forward step.
 *
 *   mdl_model *m;  mdl_load("/models/qwen3", &m, &err);
 *   mdl_ctx *cx;   mdl_ctx_create(m, pool, 512, 8, 4096, &cx, &err);
 *   mdl_seq s = {.tokens = ids, .n_tokens = n, .pos0 = 0, .blocks = table, .n_logits = 1};
 *   mdl_forward(cx, kv, &s, 1, logits, &err);     // logits [Σ n_logits, vocab]
 *
 * One function for everything: each sequence contributes n_i new tokens at
 * positions pos0 .. pos0+n_i-1 with a block table covering [0, pos0+n_i). Linear
 * layers run once over the concatenated [Σn_i, hidden] activations; attention
 * runs per sequence over its blocks. Logits are computed only for the last
 * n_logits tokens of each sequence. Prefill chunks, single decode tokens and
 * multi-token verification all go through it. A sequence's results do not
 * depend on the rest of the batch or on how its prefill was chunked.
 */
#ifndef KILN_MDL_MODEL_H
#define KILN_MDL_MODEL_H

#include <stdint.h>

#include "kernels/kn_pool.h"
#include "kv/kv_pool.h"
#include "model/mdl_lora.h"
#include "model/mdl_plan.h"
#include "util/kiln_err.h"
#include "weights/wt_config.h"
#include "weights/wt_set.h"

typedef struct mdl_model mdl_model;
typedef struct mdl_ctx mdl_ctx;

typedef struct {
    const int32_t *tokens;                    /* [n_tokens] BORROWED */
    int32_t n_tokens;                         /* >= 1 */
    int32_t pos0;                             /* position of tokens[0] */
    const kv_block_id *blocks[KV_MAX_GROUPS]; /* BORROWED: per KV group (kv_layout.h) of the
                                  pool, a block table covering [0, pos0 + n_tokens); in a
                                  group with a window, entries before the window of pos0
                                  may be -1 (given back, never read) */
    int32_t n_logits;                         /* logits for the last n_logits tokens, 0..n_tokens */
    int32_t rope_len; /* sequence length dynamic-NTK RoPE scales for (HF uses the
                         length of the forward: the whole prompt at prefill, pos+1
                         when decoding); 0 = pos0 + n_tokens */
    /* recurrent layers (hybrid models, docs/hybrid.md) */
    kv_block_id state;              /* the sequence's working state block: the state after
                                       position pos0 - 1 (zeros at pos0 0), updated in place
                                       to the state after pos0 + n_tokens - 1; -1 when the
                                       model has no recurrent layer */
    int32_t n_snaps;                /* state snapshots this step writes */
    const int32_t *snap_pos;        /* BORROWED [n_snaps], ascending, each in
                                       (pos0, pos0 + n_tokens]: the state after position
                                       snap_pos[k] - 1 ... */
    const kv_block_id *snap_blocks; /* BORROWED [n_snaps]: ... is copied into this state block */
    const mdl_lora_set *lora; /* BORROWED or NULL: the LoRA adapters this sequence runs with
                                 (mdl_lora.h); NULL or n == 0 = the base model */
    const float *hidden_in; /* BORROWED [n_tokens, hidden]: an MTP head's second input
                               (mdl_load_mtp): the target's final-normed hidden state at
                               position pos0 + j, whose next token is tokens[j]; NULL for
                               every other model */
} mdl_seq;

typedef struct {
    uint64_t weights_bytes;      /* tensors used, as stored (mapped) */
    uint64_t n_params;           /* logical parameter count */
    uint64_t kv_bytes_per_token; /* f32 K+V over the layers that store K/V */
    uint64_t state_bytes;        /* f32 recurrent state of one sequence (hybrid models) */
    int32_t kv_layers, state_layers; /* layers that store K/V; recurrent layers */
    char layout[48];                 /* hybrid checkpoints: "HF (1+w norms)" or "mlx-lm"; else "" */
    char quant_desc[128];        /* e.g. "affine 4-bit g64 (bf16 scales)" or "bf16" */
} mdl_info;

/* API */
/* Loads dir (config.json, *.safetensors): maps the weights, checks every tensor's
 * shape against the config. *out is new: mdl_free frees it. */
kiln_code mdl_load(const char *dir, mdl_model **out, kiln_err *err);
void mdl_free(mdl_model *m); /* NULL is a no-op */
/* Loads the multi-token-prediction head of a Qwen3.5 snapshot (mtp.*,
 * docs/hybrid.md, MTP) as a model of its own: one gated-attention layer
 * (mtp.layers.0) whose input rows are fc([norm_e(embed(token)), norm_h(hidden)])
 * — every mdl_seq it runs carries hidden_in —, final norm mtp.norm, and the
 * snapshot's embeddings and lm_head. Its K/V (one layer) lives in a pool made
 * from its own plan. KILN_E_UNSUPPORTED for other architectures or more than
 * one MTP layer, KILN_E_NOT_FOUND when the snapshot has no mtp.* head.
 * *out is new: mdl_free. */
kiln_code mdl_load_mtp(const char *dir, mdl_model **out, kiln_err *err);
int mdl_is_mtp(const mdl_model *m); /* 1 for a model from mdl_load_mtp */
/* An MTP head's own weights (fc, its layer, norms), without the embeddings
 * and lm_head it shares with the model. */
uint64_t mdl_mtp_own_bytes(const mdl_model *m);
const wt_config *mdl_config(const mdl_model *m);
int64_t mdl_vocab(const mdl_model *m);
mdl_info mdl_get_info(const mdl_model *m);
/* One line per tensor group ("  mlp.down_proj     bf16" or "affine 3-bit g32 (f16 scales),
 * 6-bit in 2 of 5 layers") into buf; returns the length written (truncated to n-1). */
size_t mdl_describe_groups(const mdl_model *m, char *buf, size_t n);
/* The model's per-layer plan (lives as long as the model). */
const mdl_plan *mdl_get_plan(const mdl_model *m);
/* Parameters of a plan: in total, run per token (a MoE layer's top_k experts,
 * every gathered table), and streamed per decoded token (active less the
 * embedding tables a token only gathers a row of; a tied head streams). */
typedef struct {
    uint64_t total, active, decode;
} mdl_params;
void mdl_plan_params(const mdl_plan *p, int tied, mdl_params *out);
/* Bytes of the tensors the language model reads (towers of multimodal
 * checkpoints and unused tensors of KV-shared layers left out): what the
 * mapped weights cost in memory. Falls back to every tensor without a plan. */
uint64_t mdl_weights_used_bytes(const wt_config *c, const wt_set *ws);
/* The plan as lines for `kiln info` (layer kinds and windows, KV sharing,
 * experts, per-layer inputs, parameters per token); the length written. */
size_t mdl_describe_plan(const mdl_model *m, char *buf, size_t n);
/* A 64-bit identity of the model (config + tensor headers) for cache namespaces. */
uint64_t mdl_fingerprint(const mdl_model *m);

/* Execution context: scratch for at most max_tokens new tokens over at most
 * max_seqs sequences, each at most max_ctx positions long. pool may be NULL. */
kiln_code mdl_ctx_create(const mdl_model *m, kn_pool *pool, int32_t max_tokens, int32_t max_seqs,
                         int32_t max_ctx, mdl_ctx **out, kiln_err *err);
void mdl_ctx_free(mdl_ctx *cx);
/* The step arena mdl_ctx_create allocates for these limits (bytes), from the
 * plan alone (no weights needed); *attn_floats (may be NULL) gets the
 * per-thread attention scratch. */
size_t mdl_scratch_bytes(const mdl_plan *p, int n_threads, int32_t max_tokens, int32_t max_seqs,
                         int32_t max_ctx, int64_t *attn_floats);
size_t mdl_ctx_scratch_bytes(const mdl_ctx *cx);
/* The batched step. Writes K/V of the new tokens into their blocks and logits
 * [Σ n_logits, vocab] (sequence order). Errors: KILN_E_INVALID for a token id
 * out of range or a batch over the context's limits. */
kiln_code mdl_forward(mdl_ctx *cx, kv_pool *kv, const mdl_seq *seqs, int32_t n_seqs,
                      float *logits, kiln_err *err);
/* The hidden-state tap (embeddings): while rows is non-NULL, every mdl_forward
 * also writes the final-normed hidden state of every token it runs (what
 * transformers calls last_hidden_state) into rows [T, hidden], T = the step's
 * Σ n_tokens in batch order; a step of more than max_rows tokens fails with
 * KILN_E_INVALID. rows is BORROWED until the tap is set again; NULL turns it off. */
void mdl_ctx_set_hidden_out(mdl_ctx *cx, float *rows, int32_t max_rows);
/* Fused stages (default on): q/k/v as one pool job, attention with its
 * norms/RoPE/K-V stores, gate/up with the activation, residual adds inside the
 * producing job — fewer barriers per step, the same bits. Off (0): one pool
 * job per op, for tests that compare the two and for A/B timing. */
void mdl_ctx_set_fused(mdl_ctx *cx, int on);

#endif
