/*
 * eng_spec.h — speculative decoding: drafters, per-row draft length, and the
 * step cost model that decides how many draft tokens a step can afford.
 *
 *   int32_t d = eng_spec_ngram_draft(toks, n, nmin, nmax, k, out);   // prompt lookup
 *   eng_spec_cost_add(&cost, step_tokens, seconds);                  // after each step
 *   double t = eng_spec_cost_at(&cost, T, s_per_token);              // estimate a step of T
 *   eng_spec_row_update(&row, opts, drafted, accepted);              // after verification
 *
 * The engine (eng_engine.c) appends a row's drafts to its sequence, runs the
 * 1 + d tokens in the one batched step with logits at every position, and
 * accepts drafts while each equals the target's own sample at its position
 * (sampling is a pure function of logits, seed and position: eng_sample.h),
 * emitting the target's sample at the first mismatch. The output is therefore
 * token for token that of plain decoding; docs/speculative.md.
 * Threads: engine thread (pure functions and caller-owned state).
 */
#ifndef KILN_ENG_SPEC_H
#define KILN_ENG_SPEC_H

#include <stdint.h>

#include "util/kiln_err.h"

#define ENG_SPEC_MAX_DRAFT 16  /* draft tokens one row may verify per step */
#define ENG_SPEC_COST_MAX 1024 /* step sizes the cost model tracks one by one */

typedef enum {
    ENG_SPEC_DEFAULT = 0, /* per request: the server's default */
    ENG_SPEC_OFF,
    ENG_SPEC_NGRAM, /* prompt lookup: the sequence's own prompt and output */
    ENG_SPEC_DRAFT, /* a draft model (eng_draft.h, --draft-model) */
    ENG_SPEC_MTP,   /* the model's multi-token-prediction head (eng_mtp.h, --spec mtp) */
} eng_spec_method;
#define ENG_SPEC_METHODS 5 /* array size for counters indexed by method */

typedef struct {
    eng_spec_method method; /* server default: OFF, NGRAM or DRAFT (DRAFT needs a draft model) */
    int32_t max_draft;      /* 1..ENG_SPEC_MAX_DRAFT */
    int32_t ngram_min;      /* shortest suffix matched (>= 1) */
    int32_t ngram_max;      /* longest suffix matched, tried first */
    int adaptive;           /* 1: per-row draft length and the step cost rule (default);
                               0: always draft max_draft when the drafter has tokens (tests) */
} eng_spec_opts;

/* A row's drafting state (engine thread). */
typedef struct {
    int32_t k;       /* draft length to ask for next (adaptive), 1..max_draft */
    double rate;     /* EWMA of accepted / drafted: expected acceptance of a draft token */
    int32_t pending; /* draft tokens appended to the sequence for this step */
} eng_spec_row;

/* Step cost model: EWMA seconds of steps by their token count. */
typedef struct {
    float t[ENG_SPEC_COST_MAX + 1];
    uint8_t seen[ENG_SPEC_COST_MAX + 1];
} eng_spec_cost;

/* Counters (eng_stats.spec). */
typedef struct {
    uint64_t steps;        /* steps where some row verified drafts */
    uint64_t rows;         /* row verifications (a row with >= 1 draft token in a step) */
    uint64_t drafted;      /* draft tokens verified */
    uint64_t accepted;     /* draft tokens accepted (equal to the target's own sample) */
    uint64_t emitted;      /* tokens emitted by verifying rows (accepted + one per row) */
    uint64_t skipped_cost; /* rows that had a draft the cost rule declined */
    double draft_s;        /* time proposing drafts */
    double verify_s;       /* time sampling / comparing verified rows */
} eng_spec_stats;

/* API */
eng_spec_opts eng_spec_opts_default(void); /* off, max_draft 4, n-gram 1..3, adaptive */
kiln_code eng_spec_opts_validate(const eng_spec_opts *o, kiln_err *err);
const char *eng_spec_method_name(eng_spec_method m); /* "off", "ngram", "draft", "default" */
/* "off" / "ngram" / "draft" -> method; KILN_E_INVALID otherwise. */
kiln_code eng_spec_method_parse(const char *s, eng_spec_method *out, kiln_err *err);

/* Prompt lookup: finds the most recent earlier occurrence of the longest
 * suffix of toks[0..n) of length nmax down to nmin and copies up to k tokens
 * that followed it into out. Returns the draft length (0: no match). */
int32_t eng_spec_ngram_draft(const int32_t *toks, int32_t n, int32_t nmin, int32_t nmax, int32_t k,
                             int32_t *out);

void eng_spec_row_init(eng_spec_row *r, const eng_spec_opts *o, int32_t max_draft);
/* After a verification of `drafted` tokens of which `accepted` matched. */
void eng_spec_row_update(eng_spec_row *r, int32_t max_draft, int32_t drafted, int32_t accepted);
/* A row whose draft the cost rule declined drifts back toward trying again. */
void eng_spec_row_skipped(eng_spec_row *r);

void eng_spec_cost_add(eng_spec_cost *c, int32_t tokens, double seconds);
/* Estimated seconds of a step of T tokens: the measured EWMA, else linear
 * interpolation between the nearest measured sizes, else the nearest below
 * plus s_per_token per extra token (0 when unknown: optimistic, so that
 * drafting gets measured). Returns -1 when nothing is measured yet. */
double eng_spec_cost_at(const eng_spec_cost *c, int32_t T, double s_per_token);
/* The step rule: adding `d` draft tokens expected to yield `gain` accepted
 * tokens to a step of T tokens that already yields `work` useful tokens
 * (one per decoding row + prefill tokens) pays when the useful tokens per
 * second go up. With no measurement yet it pays. */
int eng_spec_pays(const eng_spec_cost *c, double s_per_token, int32_t T, double work, int32_t d,
                  double gain);
/* The same when drafting itself costs extra_s seconds more in the step (a
 * draft model's forwards): (work + gain) / (t(T + d) + extra_s) > work / t(T). */
int eng_spec_pays_with(const eng_spec_cost *c, double s_per_token, int32_t T, double work,
                       int32_t d, double gain, double extra_s);

#endif
