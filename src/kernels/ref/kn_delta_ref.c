/*
 * kn_delta_ref.c — portable gated DeltaNet kernels (contracts: kn_delta.h).
 * Plain loops, every sum in ascending index order, no FMA contraction.
 */
#include <math.h>
#include <string.h>

#include "kernels/kn_int.h"

KN_NO_CONTRACT

static float silu(float x)
{
    return x / (1.0f + expf(-x));
}

static void conv_silu_ref(float *x, int64_t stride, int32_t n, float *hist, int64_t hstride,
                          const float *w, int32_t K, int64_t c0, int64_t c1)
{
    float h[64];
    for (int64_t ch = c0; ch < c1; ch++) {
        const float *wc = w + ch * K;
        for (int32_t j = 0; j < K - 1; j++)
            h[j] = hist[j * hstride + ch];
        for (int32_t t = 0; t < n; t++) {
            float raw = x[t * stride + ch], acc = 0.0f;
            for (int32_t j = 0; j < K - 1; j++)
                acc += wc[j] * h[j];
            acc += wc[K - 1] * raw;
            for (int32_t j = 0; j + 1 < K - 1; j++)
                h[j] = h[j + 1];
            if (K > 1) h[K - 2] = raw;
            x[t * stride + ch] = silu(acc);
        }
        for (int32_t j = 0; j < K - 1; j++)
            hist[j * hstride + ch] = h[j];
    }
}

static void gdn_step_ref(float *S, int32_t dk, int32_t dv, int32_t n, const float *q,
                         const float *k, int64_t qk_stride, const float *v, int64_t v_stride,
                         const float *g, const float *beta, int64_t gb_stride, float *o,
                         int64_t o_stride, float *u)
{
    for (int32_t t = 0; t < n; t++) {
        const float *qt = q + t * qk_stride, *kt = k + t * qk_stride, *vt = v + t * v_stride;
        float gt = g[t * gb_stride], bt = beta[t * gb_stride];
        float *ot = o + t * o_stride;
        memset(u, 0, sizeof(float) * (size_t)dv);
        for (int32_t a = 0; a < dk; a++) { /* S *= g; u = Sᵀk */
            float *row = S + (int64_t)a * dv, ka = kt[a];
            for (int32_t b = 0; b < dv; b++) {
                row[b] *= gt;
                u[b] += row[b] * ka;
            }
        }
        for (int32_t b = 0; b < dv; b++) {
            u[b] = bt * (vt[b] - u[b]);
            ot[b] = 0.0f;
        }
        for (int32_t a = 0; a < dk; a++) { /* S += k uᵀ; o = Sᵀq */
            float *row = S + (int64_t)a * dv, ka = kt[a], qa = qt[a];
            for (int32_t b = 0; b < dv; b++) {
                row[b] += ka * u[b];
                ot[b] += row[b] * qa;
            }
        }
    }
}

void kn_ref_install_delta(kn_ops *t)
{
    t->conv_silu = conv_silu_ref;
    t->gdn_step = gdn_step_ref;
}
