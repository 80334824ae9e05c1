/*
 * kn_attn.h — attention for one sequence over its paged K/V.
 *
 * K and V of one layer live in fixed-size blocks of `block_tokens` tokens, each
 * block [block_tokens, n_kv_heads] records of head_dim values in a kn_kv_fmt
 * (kn_kvq.h): `fmt_full` for blocks j < full_blocks, `fmt` after (the
 * --quantized-kv-start split); `k_blocks[j]` points at the j-th block of the
 * sequence (its block table, resolved). Quantized records are decoded inside
 * the kernel, one row at a time, into per-thread scratch. Query i (of n_q new
 * tokens) sits at position pos0 + i and sees keys at positions
 * max(0, p - window + 1) .. p (window 0 = unlimited), causal.
 *
 *   kn_attn_args a = {...};
 *   kn_attn_heads(&a, 0, a.n_heads, scratch);  // scratch: kn_attn_scratch_floats(&a)
 */
#ifndef KILN_KN_ATTN_H
#define KILN_KN_ATTN_H

#include <stdint.h>

#include "kernels/kn_kvq.h"

typedef struct {
    const float *q;  /* [n_q, n_heads, head_dim] */
    float *out;      /* [n_q, n_heads, head_dim] */
    int32_t n_q;     /* new tokens */
    int32_t pos0;    /* position of the first new token */
    int32_t n_heads, n_kv_heads, head_dim;
    float scale;     /* score multiplier, usually head_dim^-0.5 */
    float softcap;   /* 0 = none; else scores = softcap * tanh(scores / softcap) */
    int32_t window;  /* 0 = full attention */
    const void *const *k_blocks; /* [ceil((pos0+n_q)/block_tokens)] BORROWED */
    const void *const *v_blocks;
    int32_t block_tokens;
    kn_kv_fmt fmt;      /* records of blocks >= full_blocks ({0} = f32) */
    kn_kv_fmt fmt_full; /* records of blocks < full_blocks */
    int32_t full_blocks;
} kn_attn_args;

/* API */
/* Computes heads [h0, h1) for every query. Per (query, head) the reduction order
 * over keys is fixed (ascending positions), independent of n_q and threads. */
void kn_attn_heads(const kn_attn_args *a, int32_t h0, int32_t h1, float *scratch);
/* Scratch floats one call needs (scores for the longest row). */
int64_t kn_attn_scratch_floats(const kn_attn_args *a);

#endif
