/*
 * kn_mat.h — weight matrices in their stored format, and y = x · Wᵀ over them.
 *
 *   kn_mat W = { .fmt = KN_BF16, .rows = out, .cols = in, .w = mmap_ptr };
 *   kn_matmul(pool, &W, x, n_tok, y);   // x [n_tok, in] f32 -> y [n_tok, out] f32
 *
 * Weights stay in the stored format (mmap'd); kernels convert or dequantize on
 * the fly. MLX affine (§3 of shared/design/mlx-quant-format.md): row r, column
 * i, group g = i / group: w = scale[r][g] * q + bias[r][g], q read LSB-first
 * from the row's little-endian uint32 bit stream (code i at bits [i*b, i*b+b)).
 *
 * Batch invariance (a contract every variant keeps): y[t][r] is reduced in one
 * fixed order that depends only on `cols` (and the variant), never on n_tok,
 * on which rows or tokens share a tile, or on the thread split.
 */
#ifndef KILN_KN_MAT_H
#define KILN_KN_MAT_H

#include <stdint.h>

#include "kernels/kn_pool.h"

typedef enum { KN_F32, KN_F16, KN_BF16, KN_QAFFINE } kn_fmt;

typedef struct {
    kn_fmt fmt;
    int64_t rows, cols; /* [out, in] (HF / PyTorch layout: y = x · Wᵀ) */
    const void *w;      /* BORROWED (usually the mmap): [rows, cols] of fmt, or for
                           KN_QAFFINE uint32 [rows, cols*bits/32] */
    const void *scales; /* BORROWED, KN_QAFFINE only: [rows, cols/group] of sfmt */
    const void *biases; /* BORROWED, KN_QAFFINE only: [rows, cols/group] of sfmt */
    kn_fmt sfmt;        /* KN_F32, KN_F16 or KN_BF16 */
    int bits;           /* 2, 3, 4, 5, 6, 8 */
    int group;          /* 32, 64, 128 */
} kn_mat;

/* API */
/* y[t][r] = Σ_i x[t][i] · W[r][i] for t < n, r < W->rows. x: [n, cols], y: [n, rows],
 * both dense row-major f32. Threads over rows of W via pool (NULL = caller only). */
void kn_matmul(kn_pool *pool, const kn_mat *W, const float *x, int64_t n, float *y);
/* kn_matmul's rows [r0, r1) only, on the calling thread (inside a caller's own
 * pool job): y[t][r] bitwise what kn_matmul gives. */
void kn_matmul_rows(const kn_mat *W, const float *x, int64_t n, float *y, int64_t r0, int64_t r1);
/* Fused jobs (one pool barrier each; every y[t][r] bitwise what kn_matmul, the
 * bias add and the element-wise op done one after another would give). */
#define KN_MULTI_MAX 4
typedef enum { KN_ACT_SILU, KN_ACT_GELU_TANH } kn_act;
/* y[i] = x · W[i]ᵀ (+ b[i] when b and b[i] are not NULL) for nm ≤ KN_MULTI_MAX
 * matrices of the same cols that read the same x (q/k/v): their rows are
 * split over the threads as one range. */
void kn_matmul_multi(kn_pool *pool, int nm, const kn_mat *const *W, const float *const *b,
                     const float *x, int64_t n, float *const *y);
/* g = act(x·Gᵀ + bg) ⊙ (x·Uᵀ + bu) ([n, G->rows]; u is scratch of that shape;
 * bg, bu may be NULL): a chunk owns rows [r0, r1) of both G and U, so the
 * activation runs in the same job. */
void kn_matmul_glu(kn_pool *pool, const kn_mat *G, const kn_mat *U, const float *bg,
                   const float *bu, kn_act act, const float *x, int64_t n, float *g, float *u);
/* acc += x·Wᵀ + b (b may be NULL; tmp [n, W->rows] scratch): the residual add
 * of each chunk's rows in the job that made them. */
void kn_matmul_residual(kn_pool *pool, const kn_mat *W, const float *b, const float *x, int64_t n,
                        float *tmp, float *acc);
/* Row r of W as f32 (dequantized/converted): out[cols]. An embedding lookup. */
void kn_mat_row(const kn_mat *W, int64_t r, float *out);
/* Bytes of W as stored (weights + scales + biases). */
uint64_t kn_mat_bytes(const kn_mat *W);

#endif
