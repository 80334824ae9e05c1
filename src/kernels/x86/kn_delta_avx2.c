/*
 * kn_delta_avx2.c — AVX2+FMA gated DeltaNet kernels (contracts: kn_delta.h).
 * The delta rule vectorizes over the value dimension (8 lanes; the tail
 * through masked loads, so every lane sees the same formula) and reduces over
 * the key dimension in ascending order; the conv vectorizes over channels.
 * A lane's value depends only on its inputs: results never depend on how a
 * sequence's tokens are split between calls.
 */
#if defined(__x86_64__)
#include <math.h>
#include <string.h>

#include "kernels/kn_int.h"
#include "kernels/x86/kn_avx2_math.h"

#define AI static inline __attribute__((always_inline))

AI __m256 ld(const float *p, int32_t n)
{
    return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, kn_tail_mask(n));
}
AI void st(float *p, int32_t n, __m256 v)
{
    if (n >= 8)
        _mm256_storeu_ps(p, v);
    else
        _mm256_maskstore_ps(p, kn_tail_mask(n), v);
}

/* silu(x) = x / (1 + exp(-x)) */
AI __m256 silu8(__m256 x)
{
    __m256 e = kn_exp256(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

static void conv_silu_avx2(float *x, int64_t stride, int32_t n, float *hist, int64_t hstride,
                           const float *w, int32_t K, int64_t c0, int64_t c1)
{
    __m256 h[63], wv[64];
    __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t ch = c0; ch < c1; ch += 8) {
        int32_t m = c1 - ch < 8 ? (int32_t)(c1 - ch) : 8;
        /* taps of 8 channels: w[(ch + lane) * K + j] */
        __m256i off = _mm256_mullo_epi32(idx, _mm256_set1_epi32(K));
        for (int32_t j = 0; j < K; j++)
            wv[j] = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), w + ch * K + j, off,
                                             _mm256_castsi256_ps(kn_tail_mask(m)), 4);
        for (int32_t j = 0; j < K - 1; j++)
            h[j] = ld(hist + j * hstride + ch, m);
        for (int32_t t = 0; t < n; t++) {
            __m256 raw = ld(x + t * stride + ch, m), acc = _mm256_setzero_ps();
            for (int32_t j = 0; j < K - 1; j++)
                acc = _mm256_fmadd_ps(wv[j], h[j], acc);
            acc = _mm256_fmadd_ps(wv[K - 1], raw, acc);
            for (int32_t j = 0; j + 1 < K - 1; j++)
                h[j] = h[j + 1];
            if (K > 1) h[K - 2] = raw;
            st(x + t * stride + ch, m, silu8(acc));
        }
        for (int32_t j = 0; j < K - 1; j++)
            st(hist + j * hstride + ch, m, h[j]);
    }
}

static void gdn_step_avx2(float *S, int32_t dk, int32_t dv, int32_t n, const float *q,
                          const float *k, int64_t qk_stride, const float *v, int64_t v_stride,
                          const float *g, const float *beta, int64_t gb_stride, float *o,
                          int64_t o_stride, float *u)
{
    for (int32_t t = 0; t < n; t++) {
        const float *qt = q + t * qk_stride, *kt = k + t * qk_stride, *vt = v + t * v_stride;
        __m256 gt = _mm256_set1_ps(g[t * gb_stride]), bt = _mm256_set1_ps(beta[t * gb_stride]);
        float *ot = o + t * o_stride;
        for (int32_t b = 0; b < dv; b += 8) { /* S *= g; u = Sᵀk, a column block at a time */
            int32_t m = dv - b < 8 ? dv - b : 8;
            __m256 acc = _mm256_setzero_ps();
            for (int32_t a = 0; a < dk; a++) {
                float *row = S + (int64_t)a * dv + b;
                __m256 s = _mm256_mul_ps(ld(row, m), gt);
                st(row, m, s);
                acc = _mm256_fmadd_ps(s, _mm256_set1_ps(kt[a]), acc);
            }
            __m256 ub = _mm256_mul_ps(bt, _mm256_sub_ps(ld(vt + b, m), acc));
            st(u + b, m, ub);
            __m256 out = _mm256_setzero_ps(); /* S += k uᵀ; o = Sᵀq */
            for (int32_t a = 0; a < dk; a++) {
                float *row = S + (int64_t)a * dv + b;
                __m256 s = _mm256_fmadd_ps(_mm256_set1_ps(kt[a]), ub, ld(row, m));
                st(row, m, s);
                out = _mm256_fmadd_ps(s, _mm256_set1_ps(qt[a]), out);
            }
            st(ot + b, m, out);
        }
    }
}

void kn_avx2_install_delta(kn_ops *t)
{
    t->conv_silu = conv_silu_avx2;
    t->gdn_step = gdn_step_avx2;
}
#endif
