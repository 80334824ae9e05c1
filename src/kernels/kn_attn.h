/*
 * kn_attn.h — attention for one sequence over its paged K/V.
 *
 * K and V of one layer live in fixed-size blocks of `block_tokens` tokens, each
 * block [block_tokens, n_kv_heads, head_dim] f32; `k_blocks[j]` points at the
 * j-th block of the sequence (its block table, resolved). Query i (of n_q new
 * tokens) sits at position pos0 + i and sees keys at positions
 * max(0, p - window + 1) .. p (window 0 = unlimited), causal.
 *
 *   kn_attn_args a = {...};
 *   kn_attn_heads(&a, 0, a.n_heads, scratch);  // scratch: kn_attn_scratch_floats(&a)
 */
#ifndef KILN_KN_ATTN_H
#define KILN_KN_ATTN_H

#include <stdint.h>

typedef struct {
    const float *q;  /* [n_q, n_heads, head_dim] */
    float *out;      /* [n_q, n_heads, head_dim] */
    int32_t n_q;     /* new tokens */
    int32_t pos0;    /* position of the first new token */
    int32_t n_heads, n_kv_heads, head_dim;
    float scale;     /* score multiplier, usually head_dim^-0.5 */
    float softcap;   /* 0 = none; else scores = softcap * tanh(scores / softcap) */
    int32_t window;  /* 0 = full attention */
    const float *const *k_blocks; /* [ceil((pos0+n_q)/block_tokens)] BORROWED */
    const float *const *v_blocks;
    int32_t block_tokens;
} kn_attn_args;

/* API */
/* Computes heads [h0, h1) for every query. Per (query, head) the reduction order
 * over keys is fixed (ascending positions), independent of n_q and threads. */
void kn_attn_heads(const kn_attn_args *a, int32_t h0, int32_t h1, float *scratch);
/* Scratch floats one call needs (scores for the longest row). */
int64_t kn_attn_scratch_floats(const kn_attn_args *a);

#endif
