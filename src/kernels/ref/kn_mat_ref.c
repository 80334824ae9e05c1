/*
 * kn_mat_ref.c — portable matmul and row conversion for every format: the oracle.
 *
 * Per (t, r) the reduction is one double accumulator over columns in ascending
 * order (rounded to f32 at the end), so it depends only on cols: batch
 * invariant by construction. Weights are converted/dequantized one chunk (a
 * quant group, or 128 values) at a time and reused for a tile of 4 tokens.
 * Dequantization is scale*q + bias in f32 with two roundings (no FMA), which
 * is what the golden vectors hold (mlx-quant-format.md §3.1).
 * Affine matrices with kn_qx_ok() (4-bit, and 8-bit if KN_QX_BITS8) use the quantized-activation
 * math of kn_int.h instead (mm_ref_qx): the same int16 levels and exact int32
 * block sums as the AVX2 kernel, combined in double.
 */
#include <math.h>
#include <string.h>

#include "kernels/kn_int.h"
#include "util/half.h"

KN_NO_CONTRACT

#define TOK_TILE 4
#define FLOAT_CHUNK 128

float kn_ref_sf(const void *p, kn_fmt fmt, int64_t i)
{
    switch (fmt) {
    case KN_F16: return kiln_f16_to_f32(((const uint16_t *)p)[i]);
    case KN_BF16: return kiln_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* Code i of a row's LSB-first bit stream (words never read past the group). */
static inline uint32_t code_at(const uint32_t *row, int64_t i, int bits)
{
    uint64_t p = (uint64_t)i * (uint64_t)bits;
    uint32_t sh = (uint32_t)(p & 31), mask = (1u << bits) - 1u;
    uint64_t v = row[p >> 5] >> sh;
    if (sh + (uint32_t)bits > 32) v |= (uint64_t)row[(p >> 5) + 1] << (32 - sh);
    return (uint32_t)v & mask;
}

void kn_ref_row_chunk(const kn_mat *W, int64_t r, int64_t c0, int64_t len, float *out)
{
    int64_t cols = W->cols;
    switch (W->fmt) {
    case KN_F32: memcpy(out, (const float *)W->w + r * cols + c0, (size_t)len * 4); return;
    case KN_F16:
    case KN_BF16: {
        const uint16_t *s = (const uint16_t *)W->w + r * cols + c0;
        for (int64_t i = 0; i < len; i++) out[i] = kn_ref_sf(s, W->fmt, i);
        return;
    }
    case KN_QAFFINE: {
        const uint32_t *row = (const uint32_t *)W->w + r * (cols * W->bits / 32);
        int64_t ng = cols / W->group;
        for (int64_t i = 0; i < len; i++) {
            int64_t c = c0 + i, g = c / W->group;
            float s = kn_ref_sf(W->scales, W->sfmt, r * ng + g);
            float b = kn_ref_sf(W->biases, W->sfmt, r * ng + g);
            float q = (float)code_at(row, c, W->bits);
            float sq = s * q;
            out[i] = sq + b;
        }
        return;
    }
    }
}

/* Quantized activations (kn_int.h, kn_qx_ok): block b of x -> q[64], d_b. */
static float qx_block(const float *x, int16_t *q)
{
    float amax = 0;
    for (int i = 0; i < KN_QX_BLOCK; i++) {
        float a = fabsf(x[i]);
        if (a > amax) amax = a;
    }
    float inv = amax > 0 ? 32767.0f / amax : 0.0f, d = amax > 0 ? amax / 32767.0f : 0.0f;
    for (int i = 0; i < KN_QX_BLOCK; i++) {
        float v = x[i] * inv, hi = rintf(v);
        q[i] = (int16_t)hi;
        q[KN_QX_BLOCK + i] = (int16_t)lrintf((v - hi) * 32768.0f);
    }
    return d;
}

/* The kn_qx_ok math for one token: double accumulation of the exact int32
 * block sums times the f32 product s_g·d_b, plus the bias term. */
static void mm_ref_qx(const kn_mat *W, const float *x, int64_t n, float *y, int64_t r0, int64_t r1)
{
    const int64_t cols = W->cols, rows = W->rows, gs = W->group, ng = cols / gs;
    const int64_t nb = cols / KN_QX_BLOCK, part = gs < KN_QX_BLOCK ? gs : KN_QX_BLOCK;
    int16_t q[2 * KN_QX_MAX_COLS]; /* per block: 64 hi, then 64 lo */
    float d[KN_QX_MAX_COLS / KN_QX_BLOCK];
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * cols;
        for (int64_t b = 0; b < nb; b++) d[b] = qx_block(xt + b * KN_QX_BLOCK, q + 2 * b * KN_QX_BLOCK);
        for (int64_t r = r0; r < r1; r++) {
            const uint32_t *row = (const uint32_t *)W->w + r * (cols * W->bits / 32);
            double acc = 0;
            for (int64_t c0 = 0; c0 < cols; c0 += part) {
                int32_t ihi = 0, ilo = 0;
                for (int64_t c = c0; c < c0 + part; c++) {
                    int32_t code = (int32_t)code_at(row, c, W->bits);
                    int64_t at = c + c / KN_QX_BLOCK * KN_QX_BLOCK; /* block b starts at 2·64·b */
                    ihi += code * q[at];
                    ilo += code * q[at + KN_QX_BLOCK];
                }
                float sd = kn_ref_sf(W->scales, W->sfmt, r * ng + c0 / gs) * d[c0 / KN_QX_BLOCK];
                acc += (double)sd * ((double)ihi + (double)ilo / 32768.0);
            }
            for (int64_t g = 0; g < ng; g++) {
                double xs = 0;
                for (int64_t c = g * gs; c < (g + 1) * gs; c++) xs += xt[c];
                acc += (double)kn_ref_sf(W->biases, W->sfmt, r * ng + g) * xs;
            }
            y[t * rows + r] = (float)acc;
        }
    }
}

static void mm_ref(const kn_mat *W, const float *x, int64_t n, float *y, int64_t r0, int64_t r1)
{
    if (kn_qx_ok(W)) {
        mm_ref_qx(W, x, n, y, r0, r1);
        return;
    }
    int64_t cols = W->cols, rows = W->rows;
    int64_t chunk = W->fmt == KN_QAFFINE ? W->group : FLOAT_CHUNK;
    float buf[FLOAT_CHUNK];
    for (int64_t r = r0; r < r1; r++) {
        for (int64_t t0 = 0; t0 < n; t0 += TOK_TILE) {
            int64_t nt = n - t0 < TOK_TILE ? n - t0 : TOK_TILE;
            double acc[TOK_TILE] = {0};
            for (int64_t c0 = 0; c0 < cols; c0 += chunk) {
                int64_t len = cols - c0 < chunk ? cols - c0 : chunk;
                kn_ref_row_chunk(W, r, c0, len, buf);
                for (int64_t t = 0; t < nt; t++) {
                    const float *xt = x + (t0 + t) * cols + c0;
                    double a = acc[t];
                    for (int64_t i = 0; i < len; i++) a += (double)buf[i] * (double)xt[i];
                    acc[t] = a;
                }
            }
            for (int64_t t = 0; t < nt; t++) y[(t0 + t) * rows + r] = (float)acc[t];
        }
    }
}

static void mat_row_ref(const kn_mat *W, int64_t r, float *out)
{
    kn_ref_row_chunk(W, r, 0, W->cols, out);
}

void kn_ref_install_mat(kn_ops *t)
{
    t->mm_f32 = mm_ref;
    t->mm_f16 = mm_ref;
    t->mm_bf16 = mm_ref;
    static const int bits[] = {2, 3, 4, 5, 6, 8};
    for (int i = 0; i < 6; i++) t->mm_q[bits[i]] = mm_ref;
    t->mat_row = mat_row_ref;
}
