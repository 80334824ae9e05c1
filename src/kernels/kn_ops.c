/*
 * kn_ops.c — public entry points of the small vector kernels;
 * each forwards to the variant kn_init() installed (lazily "auto" if a caller
 * forgot kn_init, so the table is never empty).
 */
#include "kernels/kn_ops.h"

#include "kernels/kn_int.h"

#define T() kn_get()

void kn_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps, float w_offset)
{
    T()->rmsnorm(out, x, w, n, eps, w_offset);
}
void kn_silu_mul(float *out, const float *gate, const float *up, int64_t n)
{
    T()->silu_mul(out, gate, up, n);
}
void kn_gelu_tanh_mul(float *out, const float *gate, const float *up, int64_t n)
{
    T()->gelu_tanh_mul(out, gate, up, n);
}
void kn_softmax(float *x, int64_t n)
{
    T()->softmax(x, n);
}
float kn_dot(const float *x, const float *y, int64_t n)
{
    return T()->dot(x, y, n);
}
void kn_axpy(float *y, float a, const float *x, int64_t n)
{
    T()->axpy(y, a, x, n);
}
void kn_add(float *y, const float *x, int64_t n)
{
    T()->add(y, x, n);
}
void kn_rope_neox(float *x, int64_t rot, const float *cos_sin)
{
    T()->rope_neox(x, rot, cos_sin);
}
