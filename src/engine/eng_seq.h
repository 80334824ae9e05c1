/*
 * eng_seq.h — one sequence's token history and KV block table, and the batched
 * step over many sequences.
 *
 *   eng_seq *s; eng_seq_create(prompt, n, &s, &err);
 *   eng_seq_attach_prefix(s, kv, ns);            // share cached full blocks (zero copy)
 *   while (eng_seq_pending(s) > 0) {             // prefill in chunks
 *       eng_step_item it = {.seq = s, .max_tokens = 256};
 *       eng_step_run(cx, kv, &it, 1, ns, logits, &err);
 *   }
 *   eng_seq_append(s, tok, &err);                // then decode: one pending token per step
 *   eng_seq_free(s, kv);
 *
 * Tokens [0, n_cached) have K/V in the blocks; [n_cached, n_tokens) are
 * pending. Blocks are published (content-addressed) as soon as they are full,
 * so later sequences with the same prefix reuse them. A sequence only ever
 * writes positions >= n_cached, which lie in blocks it alone holds: shared
 * blocks are always full and before n_cached.
 *
 * KV groups (kv_layout.h): the sequence has one block table per group of the
 * pool, all covering the same positions (entry j = positions [j*bt, (j+1)*bt))
 * and published under the same hash chain (the pool salts it per group).
 * In a group with a window W > 0 (its layers see at most the last W
 * positions), after each step the sequence gives back the blocks its next
 * query can no longer read (kv_window_first_block): their entries become -1
 * (entries [0, n_dropped[g])), the pool keeps them CACHED under their hash
 * like any finished block. Attention never reads a dropped entry
 * (mdl_forward checks). Such a group so holds at most kv_seq_max_blocks,
 * while a full-attention group keeps every block.
 *
 * Recurrent state (hybrid models, docs/hybrid.md): the sequence holds one
 * working state block (the state after its n_cached tokens; the step updates
 * it in place) and its latest boundary snapshot (`snap`: the state after
 * snap_block * bt tokens). The step writes snapshots at the block boundaries
 * it crosses that are due — every state_every-th (the cadence, kv_pool_config),
 * a branch boundary the prefix attach found, and the last one of the step —
 * and publishes them under the KV blocks' hash chain (salted for the state
 * group), so a later sequence resumes at the deepest boundary that has both
 * every group's KV and a state snapshot. The latest snapshot is published too
 * when the sequence is freed or preempted, or passes the end of its prompt;
 * truncation (rollback) restores the deepest snapshot at or before its target
 * and replays the tokens after it — except right after a step that verified
 * drafts, which kept the state after every position it ran (dstate): there
 * the state after the accepted run is copied into the working state and
 * nothing is replayed.
 */
#ifndef KILN_ENG_SEQ_H
#define KILN_ENG_SEQ_H

#include <stdint.h>

#include "kv/kv_pool.h"
#include "model/mdl_model.h"

#define ENG_SEQ_MAX_DRAFT 16 /* drafts one step verifies per sequence (= ENG_SPEC_MAX_DRAFT) */

typedef struct {
    int32_t *tokens; /* OWNED [cap] */
    int32_t n_tokens, cap;
    int32_t n_cached;                   /* tokens whose K/V are in blocks */
    int32_t n_prefix_hit;               /* tokens taken from cached blocks at attach */
    kv_block_id *blocks[KV_MAX_GROUPS]; /* OWNED [cap_blocks] per KV group; each entry holds
                              one reference, except the dropped ones [0, n_dropped[g]),
                              which are -1 */
    int32_t n_blocks, cap_blocks;       /* entries of every group's table */
    int32_t n_dropped[KV_MAX_GROUPS];   /* leading entries given back: older than the window */
    int n_groups;                       /* the pool's groups (set at the first reserve/attach) */
    uint64_t *hashes;                   /* OWNED [cap_blocks]: hash chain of full blocks */
    int32_t n_published;                /* blocks [0, n_published) are full and hashed */
    int32_t n_prompt;                   /* tokens at create (the prompt) */
    /* recurrent state (pools with state blocks; -1 / 0 otherwise) */
    kv_block_id state; /* one reference: the state after n_cached tokens */
    kv_block_id snap;  /* one reference: the state after snap_block * bt tokens */
    int32_t snap_block;
    uint64_t snap_hash;   /* chain hash of boundary snap_block; 0 = unknown */
    int32_t branch_block; /* a boundary whose KV others share (attach): snapshot it */
    int32_t n_draft; /* the last n_draft tokens are speculative drafts being verified
                        (eng_spec.h): blocks holding them are not published, a window
                        keeps what the first of them reads, RoPE scales for the rest */
    /* recurrent state of a step that verifies drafts (eng_seq_draft_states): dstate[j]
     * (one reference each) receives the state after dstate_pos + 1 + j tokens, i.e.
     * after the verified token and each draft but the last, plus after the last one
     * when the step ends on a block boundary; eng_seq_truncate picks the accepted
     * one and gives the others back */
    kv_block_id dstate[ENG_SEQ_MAX_DRAFT + 1];
    int32_t n_dstate;
    int32_t dstate_pos; /* n_cached when the step ran */
    int32_t dstate_at[ENG_SEQ_MAX_DRAFT + 1]; /* the step's snapshot positions (mdl_seq.snap_pos) */
} eng_seq;

typedef struct {
    eng_seq *seq;
    int32_t max_tokens;  /* at most this many pending tokens this step (>= 1) */
    int32_t all_logits;  /* 1: logits for every token run, else only the last (if it
                            is the sequence's last pending token) */
    const mdl_lora_set *lora; /* BORROWED or NULL: the sequence's LoRA adapters; its full
                            blocks are published under mdl_lora_set_ns(lora, ns) */
    /* OUT (set by eng_step_run) */
    int32_t n_run;       /* tokens run */
    int32_t n_logits;    /* rows written to logits for this item */
} eng_step_item;

/* API */
/* Copies the prompt. *out is new: eng_seq_free. */
kiln_code eng_seq_create(const int32_t *prompt, int32_t n, eng_seq **out, kiln_err *err);
void eng_seq_free(eng_seq *s, kv_pool *kv); /* releases its blocks; NULL is a no-op */
kiln_code eng_seq_append(eng_seq *s, int32_t tok, kiln_err *err);
static inline int32_t eng_seq_pending(const eng_seq *s)
{
    return s->n_tokens - s->n_cached;
}
/* Reuses published blocks matching the start of the tokens (all but the last
 * token stay pending so the step yields logits). Returns tokens reused. A hit
 * ending at block e needs every group's blocks that the first pending token
 * reads: all of [0, e) in a full group, only the window's in a sliding group
 * (the hash chain of block j already covers every token before it; earlier
 * ones are not pinned, not even looked up). The longest e that every group
 * can serve is taken. */
int32_t eng_seq_attach_prefix(eng_seq *s, kv_pool *kv, uint64_t ns);
/* Makes sure blocks cover positions [0, n_positions). KILN_E_BUDGET when the pool is full. */
kiln_code eng_seq_reserve(eng_seq *s, kv_pool *kv, int32_t n_positions, kiln_err *err);
/* Forgets every K/V block (preemption): tokens stay, all become pending again;
 * published blocks stay cached, so a later attach_prefix often gets them back. */
void eng_seq_drop_kv(eng_seq *s, kv_pool *kv);
/* Drops tokens after n (speculative rollback / retries); n >= n_cached is pure
 * bookkeeping, n < n_cached forgets K/V past n. With a window, blocks given
 * back that the new end reads again are taken back from the prefix cache (or
 * the tier); when one is gone, all K/V is forgotten and recomputed.
 * Recurrent state (rollback): the state is not trimmable; the sequence goes
 * back to the deepest state snapshot at or before n (its latest, else a
 * published one from RAM or the tier, else position 0) and the tokens from
 * there to n become pending again: the next steps replay them, giving the
 * same bits as the first time. */
void eng_seq_truncate(eng_seq *s, kv_pool *kv, int32_t n);
/* Recurrent state for d drafts about to be verified (the sequence has one
 * pending token, n_cached = n_tokens - 1 - d is not yet counted: call it
 * before the drafts' step, with its last verified token pending): takes the
 * state blocks that keep the state after each verified position of that
 * step (see dstate), so a rejection picks the state after the accepted run
 * instead of replaying from a snapshot. Blocks come from what the pool has
 * (free or cached, never preempting): returns the drafts covered (<= d;
 * d unchanged in a pool without state blocks). */
int32_t eng_seq_draft_states(eng_seq *s, kv_pool *kv, int32_t d);

/* Publishes the full blocks within positions [0, min(upto, n_cached)) not yet
 * published (eng_step_run does it up to the first draft; a verified draft's
 * block is published as the token is emitted). ns 0: nothing. */
void eng_seq_publish(eng_seq *s, kv_pool *kv, uint64_t ns, int32_t upto);

/* Blocks the sequence holds now in every group (not counting dropped entries). */
static inline int32_t eng_seq_blocks_held(const eng_seq *s)
{
    int32_t n = 0;
    for (int g = 0; g < s->n_groups; g++)
        n += s->n_blocks - s->n_dropped[g];
    return n;
}

/* One batched step: runs up to max_tokens pending tokens of every item through
 * mdl_forward, marks them cached, publishes full blocks. logits receives the
 * rows in item order: [Σ n_logits, vocab], at most logit_rows rows. With a
 * window, gives back each sequence's blocks out of its next query's window. ns 0 turns
 * the prefix cache off (nothing is published; attach_prefix finds nothing)
 * (KILN_E_INVALID when the items would need more). */
kiln_code eng_step_run(mdl_ctx *cx, kv_pool *kv, eng_step_item *items, int32_t n_items,
                       uint64_t ns, float *logits, int32_t logit_rows, kiln_err *err);

#endif
