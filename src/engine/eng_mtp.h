/*
 * eng_mtp.h — the Qwen3.5 multi-token-prediction head as a drafter
 * (`--spec mtp`; docs/speculative.md, MTP; the head itself: mdl_load_mtp,
 * docs/hybrid.md, MTP).
 *
 *   eng_mtp *m; eng_mtp_open(model_dir, target_rt, &m, &err);
 *   after every target step: eng_mtp_feed(m, jobs, n)   // verified positions + tapped hidden
 *   before the next:         eng_mtp_draft(m, rows, k, out, n)
 *   eng_mtp_row_free(m, &row); eng_mtp_close(m);
 *
 * A drafting row's head sequence follows the target: after each target step
 * the positions it verified are fed to the head with the target's
 * final-normed hidden state at each (the step's hidden-state tap) and the
 * token after it, in one batched head forward over every such row; the head's
 * output at the last one predicts the first draft, and k - 1 more batched
 * passes (the head's own output hidden state and its previous draft) predict
 * the rest; their K/V is truncated right after, so the head only ever holds
 * verified positions. The head needs the target's hidden state at every
 * position it reads: where the target did not compute them (a prefix hit, a
 * resume, a row fed with a gap) the head starts over at the first position it
 * has, with relative positions (RoPE is shift-invariant): its drafts then see
 * a shorter context (fewer accepted), never a wrong output (exact-match
 * verification). Its K/V lives in a pool of its own (one layer, a block per
 * target block), never published, never in the tier.
 * Threads: engine thread only.
 */
#ifndef KILN_ENG_MTP_H
#define KILN_ENG_MTP_H

#include <stdint.h>

#include "engine/eng_draft.h"
#include "engine/eng_runtime.h"

typedef struct eng_mtp eng_mtp;

/* One request's head state (in the request, zeroed = nothing yet). */
typedef struct {
    eng_seq *seq;  /* OWNED (eng_mtp_row_free): head position i = absolute start + i; its
                      token i is the target's token at start + i + 1 */
    int32_t start; /* absolute position of head position 0 */
    int32_t next;  /* absolute: positions [start, next) fed */
    float *h;      /* OWNED [hidden]: the head's output hidden state at position next - 1 */
    int32_t d1;    /* its argmax there: the draft for position next + 1; -1 = none */
} eng_mtp_row;

typedef struct {
    eng_mtp_row *row;     /* BORROWED */
    const int32_t *toks;  /* BORROWED: the target's tokens, known up to n_toks */
    int32_t n_toks;
    int32_t p0, n;        /* absolute positions [p0, p0 + n) verified, n_toks > p0 + n */
    const float *hidden;  /* BORROWED [n, hidden]: the target's tapped rows of them */
} eng_mtp_feed_job;

typedef struct {
    uint64_t forwards; /* batched head forwards (feeds and draft passes) */
    uint64_t fed;      /* positions fed */
    uint64_t restarts; /* rows that started over (no hidden state for a gap) */
    uint64_t drafted;  /* tokens proposed */
    uint64_t weights_bytes, kv_bytes;
} eng_mtp_info;

/* API */
/* Opens the head of the target's snapshot dir (mdl_load_mtp) on the
 * target's compute threads, with a one-layer KV pool of the target's block
 * count and size. KILN_E_NOT_FOUND without mtp.*, KILN_E_UNSUPPORTED for
 * other architectures. *out is new: eng_mtp_close (after every row's free). */
kiln_code eng_mtp_open(const char *dir, eng_runtime *target, eng_mtp **out, kiln_err *err);
void eng_mtp_close(eng_mtp *m); /* NULL is a no-op */
void eng_mtp_row_free(eng_mtp *m, eng_mtp_row *row); /* its blocks back; zeroed */
/* Feeds verified positions (jobs with n >= 1) in one batched head forward;
 * each row's d1 and h then describe its next position. A row whose K/V does
 * not fit the head's pool is dropped (it starts over at its next feed). */
kiln_code eng_mtp_feed(eng_mtp *m, eng_mtp_feed_job *jobs, int32_t n, kiln_err *err);
/* Drafts k[i] tokens for row i into out[i * ENG_SEQ_MAX_DRAFT ...] (n_out[i]
 * of them: 0 when the row has no d1 or its head is not at `at[i]`, the
 * target's verified length) in max(k) - 1 batched passes after d1. */
kiln_code eng_mtp_draft(eng_mtp *m, eng_mtp_row **rows, const int32_t *at, const int32_t *k,
                        int32_t *out, int32_t *n_out, int32_t n, kiln_err *err);
eng_mtp_info eng_mtp_get_info(const eng_mtp *m); /* weights_bytes: the head's own */
/* What the head of dir costs a target with resolved options `target` (for
 * --memory-budget, like a draft model: eng_draft_cost): fixed bytes (its own
 * weights, step scratch, its and the target's hidden-state taps, logits) and
 * the bytes of one block of its one-layer pool (one block per target block).
 * Maps the head's weights to size them (reads none but its norms). */
kiln_code eng_mtp_cost_of(const char *dir, const eng_runtime_opts *target, eng_draft_cost *out,
                          kiln_err *err);

#endif
