/*
 * kn_avx2_load.h — static inline AVX2 helpers shared by the x86 matmul files:
 * loading weights, scales and biases stored as f32/f16/bf16 as f32 lanes, and
 * the MLX affine bias term (Σ_g bias_g · Σ_{i in g} x_i) every affine kernel
 * adds the same way. Include only from files built with -mavx2 -mfma -mf16c.
 */
#ifndef KILN_KN_AVX2_LOAD_H
#define KILN_KN_AVX2_LOAD_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kn_mat.h"
#include "kernels/x86/kn_avx2_math.h"

/* 8 consecutive values of a row stored in fmt, from element c, as f32 lanes. */
static inline __m256 ld_w(const void *row, int64_t c, kn_fmt fmt)
{
    if (fmt == KN_F32) return _mm256_loadu_ps((const float *)row + c);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + c));
    if (fmt == KN_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Scale or bias number i stored in fmt, as f32. */
static inline float ld_sf(const void *p, kn_fmt fmt, int64_t i)
{
    if (fmt == KN_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    if (fmt == KN_BF16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    return _cvtsh_ss(h);
}

/* 8 consecutive scales/biases as f32 (full chunk) */
static inline __m256 ld_sf8(const void *p, kn_fmt fmt, int64_t i)
{
    return ld_w(p, i, fmt);
}

/* max |x_i| over 64 consecutive floats: the scale of an activation block. */
static inline float kn_amax64(const float *x)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < 8; k++) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    return _mm_cvtss_f32(h);
}

/* xsum[g] = Σ of group g of x: 8-lane chunk sums in order, then hsum8. */
static inline void group_sums(const float *x, int64_t cols, int64_t gs, float *xsum)
{
    for (int64_t c0 = 0, g = 0; c0 < cols; c0 += gs, g++) {
        __m256 s = _mm256_loadu_ps(x + c0);
        for (int64_t k = 8; k < gs; k += 8)
            s = _mm256_add_ps(s, _mm256_loadu_ps(x + c0 + k));
        xsum[g] = kn_hsum256(s);
    }
}

/* Σ_g bias[g] · xsum[g]: 8-group vectors, hsum8, then the scalar tail. */
static inline float bias_dot(const void *b, kn_fmt sf, int64_t off, const float *xsum, int64_t ng)
{
    __m256 a = _mm256_setzero_ps();
    int64_t g = 0;
    for (; g + 8 <= ng; g += 8)
        a = _mm256_fmadd_ps(ld_sf8(b, sf, off + g), _mm256_loadu_ps(xsum + g), a);
    float s = kn_hsum256(a);
    for (; g < ng; g++)
        s += ld_sf(b, sf, off + g) * xsum[g];
    return s;
}

#endif
