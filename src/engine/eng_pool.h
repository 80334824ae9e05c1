/*
 * eng_pool.h — pooling a sequence's final hidden states into one embedding, as
 * sentence-transformers' Pooling module does (mean, CLS, last token, max,
 * mean / sqrt(n)). The engine feeds it the rows of each prefill chunk
 * (mdl_ctx_set_hidden_out) and asks for the result when the prompt is done.
 *
 *   double acc[H];  eng_pool_init(ENG_POOL_MEAN, acc, H);
 *   eng_pool_add(ENG_POOL_MEAN, acc, rows, n, H, pos0, n_total);   // per chunk
 *   eng_pool_finish(ENG_POOL_MEAN, acc, H, n_total, out);           // float [H]
 *
 * Sums run in float64 in position order, so a result does not depend on how the
 * prompt was chunked or what else was in the batch.
 */
#ifndef KILN_ENG_POOL_H
#define KILN_ENG_POOL_H

#include <stdint.h>

typedef enum {
    ENG_POOL_NONE = 0,      /* not an embedding request: generate */
    ENG_POOL_MEAN,          /* mean over every token (pooling_mode_mean_tokens) */
    ENG_POOL_CLS,           /* the first token (pooling_mode_cls_token) */
    ENG_POOL_LAST,          /* the last token (pooling_mode_lasttoken; Qwen3-Embedding) */
    ENG_POOL_MAX,           /* elementwise max (pooling_mode_max_tokens) */
    ENG_POOL_MEAN_SQRT_LEN, /* sum / sqrt(n) (pooling_mode_mean_sqrt_len_tokens) */
} eng_pooling;

/* API */
const char *eng_pool_name(eng_pooling p);          /* "mean", "cls", "last", "max", "mean_sqrt_len" */
int eng_pool_parse(const char *s, eng_pooling *out); /* 0 on success */
/* Does the mode read every position (so a cached prefix cannot stand in for them)? */
int eng_pool_needs_all(eng_pooling p);
void eng_pool_init(eng_pooling p, double *acc, int64_t hidden);
/* rows [n, hidden]: positions pos0 .. pos0+n-1 of a sequence of n_total tokens. */
void eng_pool_add(eng_pooling p, double *acc, const float *rows, int32_t n, int64_t hidden,
                  int32_t pos0, int32_t n_total);
void eng_pool_finish(eng_pooling p, const double *acc, int64_t hidden, int32_t n_total, float *out);

#endif
