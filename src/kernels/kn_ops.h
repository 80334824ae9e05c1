/*
 * kn_ops.h — small vector kernels used by the model's block: norms,
 * activations, softmax, dot products, RoPE. All f32, dispatched like kn_mat.
 *
 *   kn_rmsnorm(out, x, w, hidden, 1e-5f, 0.0f);
 *   kn_silu_mul(h, gate, up, ffn);
 */
#ifndef KILN_KN_OPS_H
#define KILN_KN_OPS_H

#include <stdint.h>

/* API */
/* out = x / sqrt(mean(x²) + eps) * (w + w_offset); w_offset is 1 for Gemma-style norms.
 * w may be NULL (no weight: scale 1). out may alias x. Sum in a fixed order. */
void kn_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps,
                float w_offset);
/* out[i] = silu(gate[i]) * up[i]; out may alias gate. */
void kn_silu_mul(float *out, const float *gate, const float *up, int64_t n);
/* out[i] = gelu_tanh(gate[i]) * up[i]. */
void kn_gelu_tanh_mul(float *out, const float *gate, const float *up, int64_t n);
/* In place: x = softmax(x) over n (max-subtracted). */
void kn_softmax(float *x, int64_t n);
float kn_dot(const float *x, const float *y, int64_t n);
/* y += a * x */
void kn_axpy(float *y, float a, const float *x, int64_t n);
/* y += x */
void kn_add(float *y, const float *x, int64_t n);
/* RoPE, rotate-half (HF/NeoX) layout, on one head vector x[head_dim]: for
 * i < rot/2, (x[i], x[i + rot/2]) is rotated by angle pos * inv_freq[i].
 * cos_sin holds [rot/2] cos then [rot/2] sin for this position. */
void kn_rope_neox(float *x, int64_t rot, const float *cos_sin);

#endif
