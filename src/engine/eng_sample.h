/*
 * eng_sample.h — turning one row of logits into a token, per-sequence settings.
 *
 *   eng_sampling sp = eng_sampling_default();  sp.temperature = 0.7f; sp.seed = 42;
 *   eng_sampling_validate(&sp, vocab, &err);
 *   eng_rng rng; eng_rng_seed(&rng, sp.seed);
 *   eng_rng_at(&rng, n_hist);                       // the position being drawn
 *   int32_t tok = eng_sample_row(&sp, logits, vocab, hist, n_hist, &rng, scratch, &out);
 *
 * Order (mlx-lm's): processors on the logits (logit_bias, repetition penalty,
 * presence and frequency penalties over the last `penalty_window` tokens of
 * the history) → [a grammar's token mask] → log-softmax → top_p → min_p →
 * top_k (each masks on the same log-probabilities) → temperature → sample. temperature 0 is greedy (argmax,
 * lowest id on ties). Log-probabilities reported are the log-softmax after the
 * processors and before filters and temperature.
 * The RNG is counter-based: a draw is a hash of (key from the seed, absolute
 * position of the token drawn, draw index at that position), so the token at a
 * position is a pure function of (logits, seed, position), independent of how
 * many draws happened before or in what order rows are verified. That makes
 * speculative decoding exact (docs/speculative.md): a verified position draws
 * what plain decoding would have drawn there. The same seed and request give
 * the same tokens whatever else runs.
 */
#ifndef KILN_ENG_SAMPLE_H
#define KILN_ENG_SAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/kiln_err.h"

#define ENG_MAX_TOP_LOGPROBS 20

typedef struct {
    int32_t token;
    float bias;
} eng_bias;

typedef struct {
    float temperature;        /* >= 0; 0 = greedy */
    float top_p;              /* (0, 1]; 1 = off */
    int32_t top_k;            /* >= 0; 0 = off */
    float min_p;              /* [0, 1]; 0 = off */
    float repetition_penalty; /* > 0; 1 = off (CTRL-style: divide positive, multiply negative) */
    float presence_penalty;   /* [-2, 2] */
    float frequency_penalty;  /* [-2, 2] */
    int32_t penalty_window;   /* last N tokens of the history the penalties look at (>= 0) */
    const eng_bias *logit_bias; /* BORROWED from the request; [n_bias] */
    int32_t n_bias;
    uint64_t seed;
    int32_t top_logprobs;     /* 0..ENG_MAX_TOP_LOGPROBS alternatives to report */
} eng_sampling;

/* s[0]: key (splitmix64 of the seed); s[1]: the position being drawn;
 * s[2]: draws made at that position; s[3]: 0. Four words, as checkpoints store it. */
typedef struct {
    uint64_t s[4];
} eng_rng;

typedef struct {
    int32_t token;
    float logprob;
    int32_t n_top;
    int32_t top_ids[ENG_MAX_TOP_LOGPROBS];
    float top_logprobs[ENG_MAX_TOP_LOGPROBS];
} eng_sample_out;

/* API */
eng_sampling eng_sampling_default(void); /* greedy, no penalties, window 64 */
/* Range checks with a message naming the field (KILN_E_INVALID). */
kiln_code eng_sampling_validate(const eng_sampling *sp, int64_t vocab, kiln_err *err);
void eng_rng_seed(eng_rng *r, uint64_t seed); /* position 0 */
/* Moves to absolute position pos (index of the token about to be drawn in its
 * sequence); the draw counter restarts, so draws at pos never depend on the past. */
void eng_rng_at(eng_rng *r, int64_t pos);
double eng_rng_uniform(eng_rng *r); /* [0, 1): hash(key, pos, draw++) */
size_t eng_sample_scratch_bytes(int64_t vocab);
/* Samples one token. `logits` [vocab] is modified in place (processors applied).
 * history: the sequence's tokens so far (prompt + generated). scratch: at least
 * eng_sample_scratch_bytes(vocab), 64-byte aligned. out may be NULL. */
int32_t eng_sample_row(const eng_sampling *sp, float *logits, int64_t vocab,
                       const int32_t *history, int64_t n_history, eng_rng *rng, void *scratch,
                       eng_sample_out *out);
/* The same over the tokens whose bit is set in allow ([ceil(vocab/64)] words; a
 * grammar's mask): after the processors, before log-softmax, filters and
 * temperature, so every probability (and reported logprob) is the
 * distribution renormalized over the allowed tokens. allow NULL = all tokens
 * (bitwise eng_sample_row). Returns -1 when no token is allowed. */
int32_t eng_sample_row_masked(const eng_sampling *sp, float *logits, int64_t vocab,
                              const int32_t *history, int64_t n_history, const uint64_t *allow,
                              eng_rng *rng, void *scratch, eng_sample_out *out);

#endif
