/*
 * eng_draft.h — a draft model for speculative decoding (`--draft-model DIR`,
 * `--spec draft`): a second, small model with the target's vocabulary that
 * proposes k tokens per row, greedily, for the target to verify in its one
 * batched step (eng_engine.c spec_plan / spec_verify).
 *
 *   eng_draft *d;  eng_draft_open(dir, target_rt, target_tok, &o, &d, &err);
 *   eng_draft_job j = {.seq = &row_draft_seq, .toks = s->tokens, .n_toks = s->n_tokens,
 *                      .k = 4, .out = buf};
 *   eng_draft_run(d, &j, 1, &err);                 // j.n_out tokens in buf
 *   eng_draft_seq_free(d, row_draft_seq);          // when the row ends
 *   eng_draft_close(d);
 *
 * The drafter is its own eng_runtime: its own weights, its own KV pool (so
 * the target's prefix cache and SSD tier never see a draft block; the draft
 * pool has its own prefix cache, in its own namespace, and no tier), sharing
 * the target's compute threads. Each drafting row has a draft sequence in that
 * pool. eng_draft_run brings every row's draft sequence to the target's
 * verified tokens (the common prefix is kept; what differs — rejected
 * drafts — is truncated, blocks given back; what is new — the prompt after a
 * prefill or a prefix hit, the emitted tokens — is appended), then runs all
 * rows together: catch-up chunks and one draft-model forward per draft
 * position for every row that still drafts, batched like the target's step.
 * A row's catch-up runs at most one chunk (the step's token budget, shared
 * by the rows) per call: a row still behind after it drafts nothing this time
 * and goes on at the next call.
 * Draft tokens are the draft model's argmax (greedy): deterministic, so exact
 * match verification costs nothing against rejection sampling
 * (docs/speculative.md) and the output never depends on the drafter.
 *
 * Errors: open refuses a vocabulary that differs from the target's (size, or
 * the bytes of any id; the message names the first mismatching id). A
 * recurrent (hybrid) draft model's sequences roll back through its pool's
 * snapshot + replay (eng_seq_truncate). A row whose draft KV does not fit the draft pool
 * drafts nothing this step (its draft KV is dropped, it catches up later).
 * Threads: engine thread only.
 */
#ifndef KILN_ENG_DRAFT_H
#define KILN_ENG_DRAFT_H

#include <stdint.h>

#include "engine/eng_runtime.h"
#include "tokenizer/tok.h"

typedef struct eng_draft eng_draft;

typedef struct {
    eng_seq **seq;        /* IN/OUT: the row's draft sequence; NULL = made here. OWNED by
                             the caller, freed with eng_draft_seq_free */
    const int32_t *toks;  /* BORROWED: the target's verified tokens */
    int32_t n_toks;       /* >= 1 */
    int32_t k;            /* draft tokens wanted (0..ENG_SPEC_MAX_DRAFT) */
    int32_t *out;         /* OUT [k] */
    int32_t n_out;        /* OUT: tokens drafted (0 when the draft pool could not hold the row) */
    /* optional (a constrained row): picks draft n from the draft model's logits
     * (writable) after drafts[0..n), called for n = 0, 1, ... in order; -1
     * ends the row's draft. NULL = the argmax */
    int32_t (*pick)(void *user, float *logits, int64_t vocab, const int32_t *drafts, int32_t n);
    void *pick_user;
} eng_draft_job;

typedef struct {
    char dir[512];          /* the draft model's folder */
    char arch[64];          /* its architecture */
    int64_t layers, hidden; /* its shape */
    uint64_t weights_bytes; /* as mapped */
    uint64_t kv_bytes;      /* its KV pool (every block) */
    kv_pool_stats kv;       /* its pool's counts */
    uint64_t forwards;      /* draft-model forward passes (batched: one per catch-up chunk or
                               draft position over every drafting row) */
    uint64_t catchup_tokens;/* tokens run to bring draft sequences to the target's */
    uint64_t drafted;       /* tokens proposed */
    uint64_t dropped_rows;  /* rows that found no room in the draft pool */
    uint64_t deferred_rows; /* rows whose catch-up took more than one chunk: one chunk ran,
                               drafting waited for the next step */
} eng_draft_info;

/* API */
/* 0 when the vocabularies match: the same model vocabulary size and tokenizer
 * size, and for every id the same bytes (tok_token_bytes) and special flag;
 * else KILN_E_INVALID naming the first mismatching id. */
kiln_code eng_draft_check_vocab(const tok_tokenizer *target, int64_t target_vocab,
                                const tok_tokenizer *draft, int64_t draft_vocab, kiln_err *err);
/* Opens dir as the drafter of target: its ctx, block size, batch and step
 * size follow the target's; n_blocks: its KV pool (0 = as many as the
 * target's pool). Shares target's compute threads (target must outlive it).
 * *out is new: eng_draft_close. */
kiln_code eng_draft_open(const char *dir, eng_runtime *target, const tok_tokenizer *target_tok,
                         int32_t n_blocks, eng_draft **out, kiln_err *err);
void eng_draft_close(eng_draft *d); /* NULL is a no-op; every draft sequence freed first */
/* The runtime options a drafter of target opens with (for `kiln fit` and
 * --memory-budget: the same sizing). */
eng_runtime_opts eng_draft_opts(const eng_runtime_opts *target, int32_t n_blocks);
/* What a drafter of target (resolved options: ctx, batch, threads, block
 * size) costs, read from dir's config.json and safetensors headers (no weight
 * is read), with the sizing eng_draft_open opens with: fixed bytes (weights,
 * step scratch, logits, tables) and the KV bytes of one of its blocks (its
 * pool has one block per target block). */
typedef struct {
    uint64_t weights_bytes; /* of fixed_bytes */
    uint64_t fixed_bytes;
    uint64_t block_bytes;
} eng_draft_cost;
kiln_code eng_draft_cost_of(const char *dir, const eng_runtime_opts *target, eng_draft_cost *out,
                            kiln_err *err);
/* Drafts for n rows (n <= the target's batch), batched. */
kiln_code eng_draft_run(eng_draft *d, eng_draft_job *jobs, int32_t n, kiln_err *err);
/* After verification: the row's draft sequence keeps at most n tokens (the
 * rejected drafts' K/V and blocks go back at once). */
void eng_draft_rollback(eng_draft *d, eng_seq *s, int32_t n);
/* A preempted row's draft K/V goes (tokens stay; recomputed when it drafts again). */
void eng_draft_seq_drop(eng_draft *d, eng_seq *s);
void eng_draft_seq_free(eng_draft *d, eng_seq *s); /* NULL is a no-op */
eng_draft_info eng_draft_get_info(const eng_draft *d);
const eng_runtime *eng_draft_runtime(const eng_draft *d);

#endif
