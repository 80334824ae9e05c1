/*
 * kn_delta.c — public entry points of the gated DeltaNet kernels; each
 * forwards to the variant kn_init() installed.
 */
#include "kernels/kn_delta.h"

#include "kernels/kn_int.h"

void kn_conv_silu(float *x, int64_t stride, int32_t n, float *hist, int64_t hstride, const float *w,
                  int32_t K, int64_t c0, int64_t c1)
{
    kn_get()->conv_silu(x, stride, n, hist, hstride, w, K, c0, c1);
}

void kn_gdn_step(float *S, int32_t dk, int32_t dv, int32_t n, const float *q, const float *k,
                 int64_t qk_stride, const float *v, int64_t v_stride, const float *g,
                 const float *beta, int64_t gb_stride, float *o, int64_t o_stride, float *tmp)
{
    kn_get()->gdn_step(S, dk, dv, n, q, k, qk_stride, v, v_stride, g, beta, gb_stride, o, o_stride,
                       tmp);
}
