/*
 * kn_int.h — the kernel table shared inside kernels/ (nothing outside includes it).
 *
 * kn_dispatch.c owns the one mutable global (`kn_table`), filled by kn_init():
 * kn_ref_install() first writes every entry, then each ISA install overwrites
 * only the entries it implements. Public wrappers (kn_mat.c, kn_ops.c,
 * kn_attn.c) call through `kn`.
 *
 * Matmul kernels compute y[t][r] for every token t < n and rows r in [r0, r1)
 * (y is the caller's full [n, rows] output). Invariant (batch invariance): the
 * value of y[t][r] depends only on x[t], row r of W and the variant — never on
 * n, r0, r1 or which other rows/tokens share a tile.
 */
#ifndef KILN_KN_INT_H
#define KILN_KN_INT_H

#include <stdint.h>

#include <stddef.h>

#include "kernels/kn_attn.h"
#include "kernels/kn_cpu.h"
#include "kernels/kn_mat.h"

/* Keep a*b+c as two roundings where bit-exactness vs golden vectors matters
 * (gcc ignores the STDC pragma; clang ignores GCC optimize). */
#if defined(__clang__)
#define KN_NO_CONTRACT _Pragma("STDC FP_CONTRACT OFF")
#elif defined(__GNUC__)
#define KN_NO_CONTRACT _Pragma("GCC optimize(\"fp-contract=off\")")
#else
#define KN_NO_CONTRACT
#endif

typedef void (*kn_matmul_fn)(const kn_mat *W, const float *x, int64_t n, float *y, int64_t r0,
                             int64_t r1);

typedef struct {
    const char *isa; /* "ref", "avx2": for logs and /stats */
    kn_matmul_fn mm_f32, mm_f16, mm_bf16;
    kn_matmul_fn mm_q[9];      /* KN_QAFFINE by bits (2,3,4,5,6,8); other slots NULL */
    kn_matmul_fn mm_q_base[9]; /* int8 mode: the exact entries, for shapes kn_i8_ok refuses */
    const char *mm_mode;       /* "exact" or "int8" */
    void (*mat_row)(const kn_mat *W, int64_t r, float *out);
    void (*rmsnorm)(float *out, const float *x, const float *w, int64_t n, float eps,
                    float w_offset);
    void (*silu_mul)(float *out, const float *gate, const float *up, int64_t n);
    void (*gelu_tanh_mul)(float *out, const float *gate, const float *up, int64_t n);
    void (*softmax)(float *x, int64_t n);
    float (*dot)(const float *x, const float *y, int64_t n);
    void (*axpy)(float *y, float a, const float *x, int64_t n);
    void (*add)(float *y, const float *x, int64_t n);
    void (*rope_neox)(float *x, int64_t rot, const float *cos_sin);
    void (*attn_heads)(const kn_attn_args *a, int32_t h0, int32_t h1, float *scratch);
    void (*kv_load)(kn_kv_fmt f, const void *src, int32_t n, float *out);
    /* gated DeltaNet (kn_delta.h) */
    void (*conv_silu)(float *x, int64_t stride, int32_t n, float *hist, int64_t hstride,
                      const float *w, int32_t K, int64_t c0, int64_t c1);
    void (*gdn_step)(float *S, int32_t dk, int32_t dv, int32_t n, const float *q, const float *k,
                     int64_t qk_stride, const float *v, int64_t v_stride, const float *g,
                     const float *beta, int64_t gb_stride, float *o, int64_t o_stride, float *tmp);
} kn_ops;

extern const kn_ops *kn; /* read-only after kn_init() */

/* The table, installed with "auto" first if a caller never ran kn_init(). */
static inline const kn_ops *kn_get(void)
{
    if (!kn->isa) (void)kn_init(NULL, NULL);
    return kn;
}

/* The record of position p, KV head kvh in a sequence's paged K or V
 * (blocks = a->k_blocks or a->v_blocks): its bytes, and in *f the format of
 * its block's class (fmt_full before full_blocks, fmt after). */
static inline const uint8_t *kn_attn_rec(const kn_attn_args *a, const void *const *blocks,
                                         int32_t p, int32_t kvh, kn_kv_fmt *f)
{
    int32_t j = p / a->block_tokens;
    *f = j < a->full_blocks ? a->fmt_full : a->fmt;
    return (const uint8_t *)blocks[j] +
           ((size_t)(p % a->block_tokens) * (size_t)a->n_kv_heads + (size_t)kvh) *
               kn_kv_rec_bytes(*f, a->head_dim);
}

/* Installers (each overwrites only what it implements). */
void kn_ref_install_mat(kn_ops *t);
void kn_ref_install_ops(kn_ops *t);
void kn_ref_install_attn(kn_ops *t);
void kn_ref_install_mat_i8(kn_ops *t); /* int8 mode: mm_q[4], mm_q[8] */
void kn_ref_install_delta(kn_ops *t);
#if defined(__x86_64__)
void kn_avx2_install_mat_i8(kn_ops *t);
void kn_avx512vnni_install_mat_i8(kn_ops *t); /* the same with vpdpbusd (AVX512-VNNI + VL) */
void kn_avx2_install_mat(kn_ops *t);
void kn_avx2_install_ops(kn_ops *t);
void kn_avx2_install_attn(kn_ops *t);
void kn_avx2_install_delta(kn_ops *t);
#endif

/* Quantized activations (every variant, same integers): for KN_QAFFINE 4-bit
 * (8-bit too if KN_QX_BITS8) matrices whose cols are a multiple of KN_QX_BLOCK (and at most
 * KN_QX_MAX_COLS), each token's x is quantized per 64-column block b to int16:
 *   amax_b = max_i |x_i|, d_b = amax_b / 32767, inv_b = 32767 / amax_b (both 0
 *   when amax_b is 0), q_i = round-to-nearest-even(x_i · inv_b)   (f32 ops)
 * and y[t][r] = Σ_b Σ_{g part of b} (s_g·d_b) · Σ_i code_i·q_i  (exact int32)
 *             + Σ_g bias_g · Σ_{i in g} x_i                       (exact x sums)
 * The quantization of row t depends only on row t: batch invariant. Relative
 * error per element ≤ 2^-16 of the block's largest |x|. */
#define KN_QX_BLOCK 64
#define KN_QX_MAX_COLS 32768
/* 8-bit works too (kernels and tests cover it when this is 1) but measured no
 * faster at decode (the f32 8-bit decoder is cheap) and ~40% slower at
 * prefill on Zen 3, so it is off: 8-bit keeps the f32 path. */
#ifndef KN_QX_BITS8
#define KN_QX_BITS8 0
#endif
static inline int kn_qx_ok(const kn_mat *W)
{
    return W->fmt == KN_QAFFINE && (W->bits == 4 || (KN_QX_BITS8 && W->bits == 8)) &&
           W->cols % KN_QX_BLOCK == 0 && W->cols <= KN_QX_MAX_COLS;
}

/* int8 activations (the int8 matmul mode, kn_cpu.h; the default for 4-bit):
 * for KN_QAFFINE 4-bit matrices with cols a multiple of KN_QX_BLOCK (at most
 * KN_QX_MAX_COLS), each token's x is quantized per 32 columns h (each 64-column
 * block b has two halves):
 *   amax_h = max_i |x_i|, d_h = amax_h / 127, inv_h = 127 / amax_h (both 0 when
 *   amax_h is 0), q_i = round-to-nearest-even(x_i · inv_h) in [-127, 127] (f32 ops)
 * and y[t][r] = Σ_h (s_g(h)·d_h) · Σ_{i in h} code_i·q_i          (exact int32)
 *             + Σ_g bias_g · X_g,   X_g = Σ_{halves h of g} d_h · Σ_{i in h} q_i
 * with X_g in f32, halves in ascending order (kn_i8_xsum): the sum of the
 * *quantized* x̂_i = d_h·q_i. So y = Σ w_i·x̂_i up to f32 rounding: the error
 * Σ w_i·(x̂_i − x_i) weighs each rounding by the centred weight w = s·code +
 * bias, as llama.cpp's Q4_0·Q8_0 does, and |x̂_i − x_i| ≤ amax_h/254 — the
 * Q8_0 activation block (32 wide, d = amax/127), with d kept in f32 where
 * Q8_0 rounds it to f16. (The first version used 64-wide blocks and exact x
 * sums in the bias term, which left Σ s·code_i·(x̂_i − x_i): codes average
 * 7.5, so its error was ~13× larger in KL on stories260K; docs/kernels.md.)
 * About 2× faster than the exact int16 levels on AVX2, and the path that
 * amortizes weights over several tokens. Other bit widths keep their exact
 * kernels in this mode (8-bit int8 was measured no faster end to end). */

/* Adds block b's halves to X (above): d0, d1 and s0, s1 = d and Σ q of the
 * block's first and second 32 columns; xsum has one slot per group. Every
 * variant makes X_g with these f32 operations. */
static inline void kn_i8_xsum(float *xsum, int64_t b, int64_t gs, float d0, float d1, int32_t s0,
                              int32_t s1)
{
    float p0 = d0 * (float)s0, p1 = d1 * (float)s1;
    if (gs == 32) {
        xsum[2 * b] = p0;
        xsum[2 * b + 1] = p1;
    } else if (gs == 64) {
        xsum[b] = p0 + p1;
    } else if (b % 2 == 0) {
        xsum[b / 2] = p0 + p1;
    } else {
        xsum[b / 2] = xsum[b / 2] + p0 + p1;
    }
}

static inline int kn_i8_ok(const kn_mat *W)
{
    return W->fmt == KN_QAFFINE && W->bits == 4 && W->cols % KN_QX_BLOCK == 0 &&
           W->cols <= KN_QX_MAX_COLS;
}

/* ref helpers other variants reuse */
/* Scale or bias number i of a row block stored in fmt (f32/f16/bf16) as f32. */
float kn_ref_sf(const void *p, kn_fmt fmt, int64_t i);
/* Dequantizes/converts cols [c0, c0+len) of row r: out[len]; exact (scale*q + bias
 * with two roundings for KN_QAFFINE). */
void kn_ref_row_chunk(const kn_mat *W, int64_t r, int64_t c0, int64_t len, float *out);

#endif
