/*
 * kn_mat_i8_ref.c — the portable int8-activation matmul for 4-bit weights
 * (the int8 matmul mode; math in kn_int.h): the same q and d as every variant, exact int32 sums of
 * code·q per group part, combined in double. The AVX2 variant is checked
 * against it (tests/unit/test_kn_mat.c).
 */
#include <math.h>

#include "kernels/kn_int.h"

/* 4-bit code i of a row (eight per little-endian word, LSB first). */
static uint32_t code4(const uint32_t *row, int64_t i)
{
    return (row[i >> 3] >> (4 * (i & 7))) & 15u;
}

/* Block of 64 x -> q (column order), returns d. */
static float i8_block(const float *x, int8_t *q)
{
    float amax = 0;
    for (int i = 0; i < KN_QX_BLOCK; i++) {
        float a = fabsf(x[i]);
        if (a > amax) amax = a;
    }
    float inv = amax > 0 ? 127.0f / amax : 0.0f, d = amax > 0 ? amax / 127.0f : 0.0f;
    for (int i = 0; i < KN_QX_BLOCK; i++)
        q[i] = (int8_t)rintf(x[i] * inv);
    return d;
}

static void mm_ref_i8(const kn_mat *W, const float *x, int64_t n, float *y, int64_t r0, int64_t r1)
{
    const int64_t cols = W->cols, rows = W->rows, gs = W->group, ng = cols / gs;
    const int64_t nb = cols / KN_QX_BLOCK, part = gs < KN_QX_BLOCK ? gs : KN_QX_BLOCK;
    int8_t q[KN_QX_MAX_COLS];
    float d[KN_QX_MAX_COLS / KN_QX_BLOCK];
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * cols;
        for (int64_t b = 0; b < nb; b++)
            d[b] = i8_block(xt + b * KN_QX_BLOCK, q + b * KN_QX_BLOCK);
        for (int64_t r = r0; r < r1; r++) {
            const uint32_t *row = (const uint32_t *)W->w + r * (cols / 8);
            double acc = 0;
            for (int64_t c0 = 0; c0 < cols; c0 += part) {
                int32_t isum = 0;
                for (int64_t c = c0; c < c0 + part; c++)
                    isum += (int32_t)code4(row, c) * q[c];
                float sd = kn_ref_sf(W->scales, W->sfmt, r * ng + c0 / gs) * d[c0 / KN_QX_BLOCK];
                acc += (double)sd * (double)isum;
            }
            for (int64_t g = 0; g < ng; g++) {
                double xs = 0;
                for (int64_t c = g * gs; c < (g + 1) * gs; c++)
                    xs += xt[c];
                acc += (double)kn_ref_sf(W->biases, W->sfmt, r * ng + g) * xs;
            }
            y[t * rows + r] = (float)acc;
        }
    }
}

static void mm_q4_ref_i8(const kn_mat *W, const float *x, int64_t n, float *y, int64_t r0,
                         int64_t r1)
{
    if (kn_i8_ok(W))
        mm_ref_i8(W, x, n, y, r0, r1);
    else
        kn->mm_q_base[4](W, x, n, y, r0, r1);
}

void kn_ref_install_mat_i8(kn_ops *t)
{
    t->mm_q[4] = mm_q4_ref_i8;
}
