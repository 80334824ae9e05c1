/*
 * kn_mat_i8_ref.c — the portable int8-activation matmul for 4-bit weights
 * (the int8 matmul mode; math in kn_int.h): the same q, d per 32 columns and Σ x̂ per
 * group as every variant, exact int32 sums of code·q per 32 columns, combined in double. The AVX2 variant is checked
 * against it (tests/unit/test_kn_mat.c).
 */
#include <math.h>

#include "kernels/kn_int.h"

/* 4-bit code i of a row (eight per little-endian word, LSB first). */
static uint32_t code4(const uint32_t *row, int64_t i)
{
    return (row[i >> 3] >> (4 * (i & 7))) & 15u;
}

/* 32 x -> q (column order), returns d. */
static float i8_half(const float *x, int8_t *q)
{
    float amax = 0;
    for (int i = 0; i < 32; i++) {
        float a = fabsf(x[i]);
        if (a > amax) amax = a;
    }
    float inv = amax > 0 ? 127.0f / amax : 0.0f, d = amax > 0 ? amax / 127.0f : 0.0f;
    for (int i = 0; i < 32; i++)
        q[i] = (int8_t)rintf(x[i] * inv);
    return d;
}

static void mm_ref_i8(const kn_mat *W, const float *x, int64_t n, float *y, int64_t r0, int64_t r1)
{
    const int64_t cols = W->cols, rows = W->rows, gs = W->group, ng = cols / gs;
    const int64_t nb = cols / KN_QX_BLOCK;
    int8_t q[KN_QX_MAX_COLS];
    float d[KN_QX_MAX_COLS / 32], xs[KN_QX_MAX_COLS / 32];
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * cols;
        for (int64_t b = 0; b < nb; b++) {
            int32_t s[2] = {0, 0};
            for (int h = 0; h < 2; h++) {
                int8_t *qh = q + b * KN_QX_BLOCK + 32 * h;
                d[2 * b + h] = i8_half(xt + b * KN_QX_BLOCK + 32 * h, qh);
                for (int i = 0; i < 32; i++)
                    s[h] += qh[i];
            }
            kn_i8_xsum(xs, b, gs, d[2 * b], d[2 * b + 1], s[0], s[1]);
        }
        for (int64_t r = r0; r < r1; r++) {
            const uint32_t *row = (const uint32_t *)W->w + r * (cols / 8);
            double acc = 0;
            for (int64_t c0 = 0; c0 < cols; c0 += 32) {
                int32_t isum = 0;
                for (int64_t c = c0; c < c0 + 32; c++)
                    isum += (int32_t)code4(row, c) * q[c];
                double sg = kn_ref_sf(W->scales, W->sfmt, r * ng + c0 / gs);
                acc += sg * (double)d[c0 / 32] * (double)isum;
            }
            for (int64_t g = 0; g < ng; g++)
                acc += (double)kn_ref_sf(W->biases, W->sfmt, r * ng + g) * xs[g];
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
