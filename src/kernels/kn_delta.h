/*
 * kn_delta.h — kernels of the gated DeltaNet mixer (hybrid models,
 * docs/hybrid.md): the causal depthwise conv + SiLU over a sequence's
 * projections, and the gated delta rule in its step (recurrent) form.
 *
 *   kn_conv_silu(x, C, n, hist, C, w, K, 0, C);       // n rows, channels [0, C)
 *   kn_gdn_step(S, dk, dv, n, q, k, C, v, C, g, beta, hv, o, hv * dv, tmp);
 *
 * Both walk a sequence's tokens in order and carry their state between calls
 * (hist, S), so running n tokens at once or in any split gives the same bits:
 * a token's result depends only on the state before it and its own inputs,
 * never on n, the batch or the thread. Dispatched like kn_mat (kn_int.h).
 */
#ifndef KILN_KN_DELTA_H
#define KILN_KN_DELTA_H

#include <stdint.h>

/* API */
/* Causal depthwise conv of kernel K, then SiLU, in place over channels
 * [c0, c1) of n rows x[t * stride + ch]: out[t] = silu(Σ_{j<K} w[ch*K + j] *
 * in[t - (K-1) + j]) (tap K-1 takes the current row), summed over j in order.
 * hist [(K-1) rows, hstride] holds the K-1 previous raw rows, oldest first; it
 * is updated to the last K-1 raw rows. K <= 64. */
void kn_conv_silu(float *x, int64_t stride, int32_t n, float *hist, int64_t hstride, const float *w,
                  int32_t K, int64_t c0, int64_t c1);
/* The gated delta rule of one value head over n tokens, in order; S [dk, dv]
 * in place. Per token t (q_t, k_t [dk], v_t [dv], gate g_t, beta_t):
 *   S *= g_t;  u = beta_t (v_t - Sᵀk_t);  S += k_t uᵀ;  o_t = Sᵀq_t
 * Rows of q/k are qk_stride apart, of v v_stride, of g/beta gb_stride, of o
 * o_stride. tmp: dv floats of scratch. */
void kn_gdn_step(float *S, int32_t dk, int32_t dv, int32_t n, const float *q, const float *k,
                 int64_t qk_stride, const float *v, int64_t v_stride, const float *g,
                 const float *beta, int64_t gb_stride, float *o, int64_t o_stride, float *tmp);

#endif
