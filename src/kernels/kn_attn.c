/*
 * kn_attn.c — public entry of attention over paged K/V; forwards to the variant
 * kn_init() installed. The scratch size is shared by every variant.
 */
#include "kernels/kn_attn.h"

#include "kernels/kn_int.h"

void kn_attn_heads(const kn_attn_args *a, int32_t h0, int32_t h1, float *scratch)
{
    kn_get()->attn_heads(a, h0, h1, scratch);
}

int64_t kn_attn_scratch_floats(const kn_attn_args *a)
{
    /* every variant fits: up to 8 query heads at once, each with a score row for
     * the longest query (pos0 + n_q keys), two padded head_dim accumulators and
     * two rotated copies of its query (rotated formats, one per block class),
     * plus one decoded K row and a tile of 16 decoded V rows (quantized formats) */
    return 8 * ((int64_t)a->pos0 + a->n_q) + 8 * 4 * ((int64_t)a->head_dim + 8) +
           17 * ((int64_t)a->head_dim + 8) + 16;
}
