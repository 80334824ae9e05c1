/*
 * kn_ops_avx2.c — AVX2+FMA small vector kernels (same contracts as ref/kn_ops_ref.c).
 * Reductions use fixed 8-lane accumulators, a fixed horizontal tree, then the
 * tail in ascending order: the result depends only on the inputs and n.
 * Tails go through masked loads/stores so every element sees the same formula.
 */
#if defined(__x86_64__)
#include <math.h>

#include "kernels/kn_int.h"
#include "kernels/x86/kn_avx2_math.h"

#define AI static inline __attribute__((always_inline))

AI __m256 ld_tail(const float *p, int64_t n)
{
    return _mm256_maskload_ps(p, kn_tail_mask(n));
}
AI void st_tail(float *p, int64_t n, __m256 v)
{
    _mm256_maskstore_ps(p, kn_tail_mask(n), v);
}

static void rmsnorm_avx2(float *out, const float *x, const float *w, int64_t n, float eps,
                         float w_offset)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 u = _mm256_loadu_ps(x + i), v = _mm256_loadu_ps(x + i + 8);
        a0 = _mm256_fmadd_ps(u, u, a0);
        a1 = _mm256_fmadd_ps(v, v, a1);
    }
    for (; i < n; i += 8) {
        __m256 u = i + 8 <= n ? _mm256_loadu_ps(x + i) : ld_tail(x + i, n - i);
        a0 = _mm256_fmadd_ps(u, u, a0);
    }
    double ss = kn_hsum256(_mm256_add_ps(a0, a1));
    __m256 inv = _mm256_set1_ps((float)(1.0 / sqrt(ss / (double)n + (double)eps)));
    __m256 off = _mm256_set1_ps(w_offset);
    for (i = 0; i < n; i += 8) {
        int64_t m = n - i < 8 ? n - i : 8;
        __m256 v = _mm256_mul_ps(m == 8 ? _mm256_loadu_ps(x + i) : ld_tail(x + i, m), inv);
        if (w) {
            __m256 ww = m == 8 ? _mm256_loadu_ps(w + i) : ld_tail(w + i, m);
            v = _mm256_mul_ps(v, _mm256_add_ps(ww, off));
        }
        if (m == 8) _mm256_storeu_ps(out + i, v);
        else st_tail(out + i, m, v);
    }
}

/* g · sigmoid(k·g) · up, vectorized over 8; k = 1 (silu) or 2u/g (gelu below). */
AI __m256 sigmoid_mul(__m256 g, __m256 z, __m256 up)
{
    __m256 e = kn_exp256(_mm256_sub_ps(_mm256_setzero_ps(), z));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), up);
}

static void silu_mul_avx2(float *out, const float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i += 8) {
        int64_t m = n - i < 8 ? n - i : 8;
        __m256 g = m == 8 ? _mm256_loadu_ps(gate + i) : ld_tail(gate + i, m);
        __m256 u = m == 8 ? _mm256_loadu_ps(up + i) : ld_tail(up + i, m);
        __m256 v = sigmoid_mul(g, g, u);
        if (m == 8) _mm256_storeu_ps(out + i, v);
        else st_tail(out + i, m, v);
    }
}

/* gelu_tanh(g) = 0.5·g·(1 + tanh(u)) = g · sigmoid(2u), u = √(2/π)(g + 0.044715 g³). */
static void gelu_tanh_mul_avx2(float *out, const float *gate, const float *up, int64_t n)
{
    const __m256 k2 = _mm256_set1_ps(2.0f * 0.7978845608028654f), c = _mm256_set1_ps(0.044715f);
    for (int64_t i = 0; i < n; i += 8) {
        int64_t m = n - i < 8 ? n - i : 8;
        __m256 g = m == 8 ? _mm256_loadu_ps(gate + i) : ld_tail(gate + i, m);
        __m256 u = m == 8 ? _mm256_loadu_ps(up + i) : ld_tail(up + i, m);
        __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
        __m256 z = _mm256_mul_ps(k2, _mm256_fmadd_ps(c, g3, g));
        __m256 v = sigmoid_mul(g, z, u);
        if (m == 8) _mm256_storeu_ps(out + i, v);
        else st_tail(out + i, m, v);
    }
}

static void softmax_avx2(float *x, int64_t n)
{
    if (n <= 0) return;
    __m256 mv = _mm256_set1_ps(-INFINITY);
    for (int64_t i = 0; i < n; i += 8) {
        int64_t m = n - i < 8 ? n - i : 8;
        __m256 v = m == 8 ? _mm256_loadu_ps(x + i)
                          : _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), ld_tail(x + i, m),
                                             _mm256_castsi256_ps(kn_tail_mask(m)));
        mv = _mm256_max_ps(mv, v);
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    __m256 mx = _mm256_set1_ps(_mm_cvtss_f32(h));
    __m256 sum = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
        int64_t m = n - i < 8 ? n - i : 8;
        if (m == 8) {
            __m256 e = kn_exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), mx));
            _mm256_storeu_ps(x + i, e);
            sum = _mm256_add_ps(sum, e);
        } else {
            __m256 e = kn_exp256(_mm256_sub_ps(ld_tail(x + i, m), mx));
            e = _mm256_and_ps(e, _mm256_castsi256_ps(kn_tail_mask(m)));
            st_tail(x + i, m, e);
            sum = _mm256_add_ps(sum, e);
        }
    }
    __m256 inv = _mm256_set1_ps(1.0f / kn_hsum256(sum));
    for (int64_t i = 0; i < n; i += 8) {
        int64_t m = n - i < 8 ? n - i : 8;
        if (m == 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
        else st_tail(x + i, m, _mm256_mul_ps(ld_tail(x + i, m), inv));
    }
}

static float dot_avx2(const float *x, const float *y, int64_t n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
    }
    for (; i < n; i += 8) {
        int64_t m = n - i < 8 ? n - i : 8;
        __m256 u = m == 8 ? _mm256_loadu_ps(x + i) : ld_tail(x + i, m);
        __m256 v = m == 8 ? _mm256_loadu_ps(y + i) : ld_tail(y + i, m);
        a0 = _mm256_fmadd_ps(u, v, a0);
    }
    return kn_hsum256(_mm256_add_ps(a0, a1));
}

static void axpy_avx2(float *y, float a, const float *x, int64_t n)
{
    __m256 av = _mm256_set1_ps(a);
    for (int64_t i = 0; i < n; i += 8) {
        int64_t m = n - i < 8 ? n - i : 8;
        if (m == 8)
            _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
        else
            st_tail(y + i, m, _mm256_fmadd_ps(av, ld_tail(x + i, m), ld_tail(y + i, m)));
    }
}

static void add_avx2(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i += 8) {
        int64_t m = n - i < 8 ? n - i : 8;
        if (m == 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
        else st_tail(y + i, m, _mm256_add_ps(ld_tail(y + i, m), ld_tail(x + i, m)));
    }
}

static void rope_neox_avx2(float *x, int64_t rot, const float *cs)
{
    int64_t h = rot / 2;
    for (int64_t i = 0; i < h; i += 8) {
        int64_t m = h - i < 8 ? h - i : 8;
        __m256 a, b, c, s;
        if (m == 8) {
            a = _mm256_loadu_ps(x + i);
            b = _mm256_loadu_ps(x + h + i);
            c = _mm256_loadu_ps(cs + i);
            s = _mm256_loadu_ps(cs + h + i);
        } else {
            a = ld_tail(x + i, m);
            b = ld_tail(x + h + i, m);
            c = ld_tail(cs + i, m);
            s = ld_tail(cs + h + i, m);
        }
        __m256 r0 = _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s));
        __m256 r1 = _mm256_fmadd_ps(b, c, _mm256_mul_ps(a, s));
        if (m == 8) {
            _mm256_storeu_ps(x + i, r0);
            _mm256_storeu_ps(x + h + i, r1);
        } else {
            st_tail(x + i, m, r0);
            st_tail(x + h + i, m, r1);
        }
    }
}

void kn_avx2_install_ops(kn_ops *t)
{
    t->rmsnorm = rmsnorm_avx2;
    t->silu_mul = silu_mul_avx2;
    t->gelu_tanh_mul = gelu_tanh_mul_avx2;
    t->softmax = softmax_avx2;
    t->dot = dot_avx2;
    t->axpy = axpy_avx2;
    t->add = add_avx2;
    t->rope_neox = rope_neox_avx2;
}
#endif
