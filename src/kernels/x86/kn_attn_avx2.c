/*
 * kn_attn_avx2.c — AVX2+FMA attention over paged K/V (contract: kn_attn.h,
 * oracle: ref/kn_attn_ref.c). Per (query, head), in ascending key position:
 * scores = scale · q·k (8-lane FMA over head_dim, masked tail, fixed hsum),
 * optional softcap, then exp(s - max) vectorized over the score row, Σ in
 * 8-lane chunks from the row start, V accumulated with FMA, times 1/Σ.
 * Nothing depends on n_q, h0/h1 or threads (batch invariance).
 */
#if defined(__x86_64__)
#include <math.h>
#include <string.h>

#include "kernels/kn_int.h"
#include "kernels/x86/kn_avx2_math.h"

static inline const float *kv_at(const float *const *blocks, const kn_attn_args *a, int32_t p,
                                 int32_t kvh)
{
    return blocks[p / a->block_tokens] +
           ((int64_t)(p % a->block_tokens) * a->n_kv_heads + kvh) * a->head_dim;
}

static inline float dot_hd(const float *q, const float *k, int32_t hd, __m256i tail)
{
    __m256 acc = _mm256_setzero_ps();
    int32_t e = 0;
    for (; e + 8 <= hd; e += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + e), _mm256_loadu_ps(k + e), acc);
    if (e < hd) acc = _mm256_fmadd_ps(_mm256_maskload_ps(q + e, tail), _mm256_maskload_ps(k + e, tail), acc);
    return kn_hsum256(acc);
}

static void attn_one(const kn_attn_args *a, int32_t i, int32_t h, float *scores, float *acc)
{
    int32_t hd = a->head_dim, p = a->pos0 + i;
    int32_t kvh = h / (a->n_heads / a->n_kv_heads);
    int32_t lo = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0, nk = p - lo + 1;
    const float *q = a->q + ((int64_t)i * a->n_heads + h) * hd;
    __m256i tail = kn_tail_mask(hd & 7);
    float m = -INFINITY;
    for (int32_t j = lo; j <= p; j++) {
        float s = dot_hd(q, kv_at(a->k_blocks, a, j, kvh), hd, tail) * a->scale;
        if (a->softcap > 0) s = a->softcap * tanhf(s / a->softcap);
        scores[j - lo] = s;
        m = s > m ? s : m;
    }
    __m256 mv = _mm256_set1_ps(m), sum = _mm256_setzero_ps();
    int32_t j = 0;
    for (; j + 8 <= nk; j += 8) {
        __m256 e = kn_exp256(_mm256_sub_ps(_mm256_loadu_ps(scores + j), mv));
        _mm256_storeu_ps(scores + j, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (j < nk) {
        __m256i t = kn_tail_mask(nk - j);
        __m256 e = kn_exp256(_mm256_sub_ps(_mm256_maskload_ps(scores + j, t), mv));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(t));
        _mm256_maskstore_ps(scores + j, t, e);
        sum = _mm256_add_ps(sum, e);
    }
    memset(acc, 0, sizeof(float) * (size_t)(hd + 8));
    int32_t h8 = hd & ~7;
    for (int32_t jj = lo; jj <= p; jj++) {
        __m256 w = _mm256_set1_ps(scores[jj - lo]);
        const float *v = kv_at(a->v_blocks, a, jj, kvh);
        int32_t e = 0;
        for (; e < h8; e += 8)
            _mm256_storeu_ps(acc + e, _mm256_fmadd_ps(w, _mm256_loadu_ps(v + e), _mm256_loadu_ps(acc + e)));
        if (e < hd)
            _mm256_storeu_ps(acc + e, _mm256_fmadd_ps(w, _mm256_maskload_ps(v + e, tail), _mm256_loadu_ps(acc + e)));
    }
    __m256 inv = _mm256_set1_ps(1.0f / kn_hsum256(sum));
    float *o = a->out + ((int64_t)i * a->n_heads + h) * hd;
    int32_t e = 0;
    for (; e < h8; e += 8) _mm256_storeu_ps(o + e, _mm256_mul_ps(_mm256_loadu_ps(acc + e), inv));
    if (e < hd) _mm256_maskstore_ps(o + e, tail, _mm256_mul_ps(_mm256_loadu_ps(acc + e), inv));
}

static void attn_heads_avx2(const kn_attn_args *a, int32_t h0, int32_t h1, float *scratch)
{
    float *acc = scratch;                      /* [head_dim + 8] */
    float *scores = scratch + a->head_dim + 8; /* [pos0 + n_q] */
    for (int32_t i = 0; i < a->n_q; i++)
        for (int32_t h = h0; h < h1; h++) attn_one(a, i, h, scores, acc);
}

void kn_avx2_install_attn(kn_ops *t)
{
    t->attn_heads = attn_heads_avx2;
}
#endif
