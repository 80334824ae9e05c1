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
/* Row r of W as f32 (dequantized/converted): out[cols]. An embedding lookup. */
void kn_mat_row(const kn_mat *W, int64_t r, float *out);
/* Bytes of W as stored (weights + scales + biases). */
uint64_t kn_mat_bytes(const kn_mat *W);

#endif
