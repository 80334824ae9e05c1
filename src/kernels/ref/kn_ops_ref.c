/*
 * kn_ops_ref.c — portable small vector kernels: the oracle for the SIMD ones.
 * Reductions (rmsnorm, softmax, dot) run in ascending index order in double.
 */
#include <math.h>

#include "kernels/kn_int.h"

KN_NO_CONTRACT

static void rmsnorm_ref(float *out, const float *x, const float *w, int64_t n, float eps,
                        float w_offset)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    float inv = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    for (int64_t i = 0; i < n; i++) {
        float v = x[i] * inv;
        out[i] = w ? v * (w[i] + w_offset) : v;
    }
}

static void silu_mul_ref(float *out, const float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

static void gelu_tanh_mul_ref(float *out, const float *gate, const float *up, int64_t n)
{
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        float t = tanhf(k * (g + 0.044715f * g * g * g));
        out[i] = 0.5f * g * (1.0f + t) * up[i];
    }
}

static void softmax_ref(float *x, int64_t n)
{
    if (n <= 0) return;
    float m = x[0];
    for (int64_t i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    float inv = (float)(1.0 / s);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

static float dot_ref(const float *x, const float *y, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * (double)y[i];
    return (float)s;
}

static void axpy_ref(float *y, float a, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

static void add_ref(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

static void rope_neox_ref(float *x, int64_t rot, const float *cs)
{
    int64_t h = rot / 2;
    for (int64_t i = 0; i < h; i++) {
        float a = x[i], b = x[i + h], c = cs[i], s = cs[h + i];
        x[i] = a * c - b * s;
        x[i + h] = b * c + a * s;
    }
}

void kn_ref_install_ops(kn_ops *t)
{
    t->rmsnorm = rmsnorm_ref;
    t->silu_mul = silu_mul_ref;
    t->gelu_tanh_mul = gelu_tanh_mul_ref;
    t->softmax = softmax_ref;
    t->dot = dot_ref;
    t->axpy = axpy_ref;
    t->add = add_ref;
    t->rope_neox = rope_neox_ref;
}
