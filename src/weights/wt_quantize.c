/*
 * wt_quantize.c — MLX affine quantization of float32 matrices, bit-exact with
 * MLX's CPU backend (`quantize` in mlx/backend/cpu/quantized.cpp, as specified
 * in ../shared/design/mlx-quant-format.md §3.3), plus code packing.
 *
 * Every step is one correctly rounded float32 operation, in this order, per
 * group of gs values v (n_bins = 2^bits - 1, eps = 1e-7f):
 *   1. w_max = max(v), w_min = min(v)
 *   2. s = max((w_max - w_min) / n_bins, eps)
 *   3. |w_min| > |w_max| ? (edge = w_min, s > 0) : (edge = w_max, s = -s)
 *   4. q0 = rint(edge / s)                        (round half to even)
 *   5. q0 != 0 ? (scale = edge / q0, bias = edge) : (scale = s, bias = 0)
 *   6. q = clip(rint((v - bias) / scale), 0, n_bins)
 *   7. scale and bias are cast to the model dtype only after the codes exist.
 * Nothing here may be contracted into an FMA or evaluated in higher precision:
 * (v - bias) / scale has no multiply-add to fuse, and float_t is float on the
 * targets we build for (x86-64 SSE, arm64). The golden test
 * (tests/golden/test_mlxq_quantize.c) checks every bits x group x dtype vector.
 * Threads: pure functions; no state.
 */
#include "weights/wt_quantize.h"

#include <math.h>
#include <string.h>

#include "util/half.h"

/* ------------------------------------------------------------ conversions */

int wt_to_f32(wt_dtype dt, const void *src, int64_t n, float *dst)
{
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case WT_F32:
            memcpy(&dst[i], p + 4 * i, 4);
            break;
        case WT_F64: {
            double d;
            memcpy(&d, p + 8 * i, 8);
            dst[i] = (float)d;
            break;
        }
        case WT_F16: {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = kiln_f16_to_f32(h);
            break;
        }
        case WT_BF16: {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = kiln_bf16_to_f32(h);
            break;
        }
        default:
            return -1;
        }
    }
    return 0;
}

int wt_from_f32(wt_dtype dt, const float *src, int64_t n, void *dst)
{
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        switch (dt) {
        case WT_F32:
            memcpy(p + 4 * i, &src[i], 4);
            break;
        case WT_F16:
            h = kiln_f32_to_f16(src[i]);
            memcpy(p + 2 * i, &h, 2);
            break;
        case WT_BF16:
            h = kiln_f32_to_bf16(src[i]);
            memcpy(p + 2 * i, &h, 2);
            break;
        default:
            return -1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- groups */

int wt_affine_valid(int bits, int group_size)
{
    return (bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8) &&
           (group_size == 32 || group_size == 64 || group_size == 128);
}

void wt_affine_group(const float *v, int gs, int bits, float *scale, float *bias, uint8_t *codes)
{
    const float n_bins = (float)((1 << bits) - 1);
    const float eps = 1e-7f;
    float w_max = v[0], w_min = v[0];
    for (int i = 1; i < gs; i++) {
        w_max = v[i] > w_max ? v[i] : w_max;
        w_min = v[i] < w_min ? v[i] : w_min;
    }
    float s = (w_max - w_min) / n_bins;
    s = s > eps ? s : eps;
    bool min_side = fabsf(w_min) > fabsf(w_max);
    float edge = min_side ? w_min : w_max;
    if (!min_side) s = -s;
    float q0 = rintf(edge / s);
    float sc = s, bi = 0.0f;
    if (q0 != 0.0f) {
        sc = edge / q0;
        bi = edge;
    }
    for (int i = 0; i < gs; i++) {
        float q = rintf((v[i] - bi) / sc);
        q = q >= 0.0f ? (q > n_bins ? n_bins : q) : 0.0f; /* NaN -> 0 */
        codes[i] = (uint8_t)q;
    }
    *scale = sc;
    *bias = bi;
}

/* --------------------------------------------------------------- packing */

void wt_pack_codes(const uint8_t *codes, int64_t n, int bits, uint32_t *words)
{
    memset(words, 0, (size_t)(n * bits / 32) * sizeof *words);
    for (int64_t i = 0; i < n; i++) {
        uint64_t p = (uint64_t)i * (uint64_t)bits;
        uint32_t c = codes[i];
        words[p >> 5] |= c << (p & 31);
        if ((p & 31) + (uint64_t)bits > 32) words[(p >> 5) + 1] |= c >> (32 - (p & 31));
    }
}

void wt_unpack_codes(const uint32_t *words, int64_t n, int bits, uint8_t *codes)
{
    const uint32_t mask = (1u << bits) - 1u;
    for (int64_t i = 0; i < n; i++) {
        uint64_t p = (uint64_t)i * (uint64_t)bits;
        /* memcpy: a safetensors payload need not be 4-byte aligned in the file */
        const unsigned char *at = (const unsigned char *)words + 4 * (p >> 5);
        uint32_t w0, w1 = 0;
        memcpy(&w0, at, sizeof w0);
        if ((p & 31) + (uint64_t)bits > 32) memcpy(&w1, at + 4, sizeof w1);
        uint64_t v = (uint64_t)w0 | (uint64_t)w1 << 32;
        codes[i] = (uint8_t)((v >> (p & 31)) & mask);
    }
}

/* --------------------------------------------------------------- matrices */

kiln_code wt_quantize_affine(const float *w, int64_t rows, int64_t cols, int bits, int group_size,
                             wt_dtype dtype, uint32_t *packed, void *scales, void *biases,
                             uint8_t *codes, kiln_err *err)
{
    if (!wt_affine_valid(bits, group_size))
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "affine quantization: bits %d / group_size %d not supported (bits 2, 3, "
                         "4, 5, 6, 8; group_size 32, 64, 128)",
                         bits, group_size);
    if (dtype != WT_F32 && dtype != WT_F16 && dtype != WT_BF16)
        return kiln_fail(err, KILN_E_UNSUPPORTED, "affine quantization: scales as %s",
                         wt_dtype_name(dtype));
    if (rows < 0 || cols <= 0 || cols % group_size != 0)
        return kiln_fail(err, KILN_E_INVALID,
                         "affine quantization: %lld columns are not a multiple of group_size %d",
                         (long long)cols, group_size);
    const int64_t groups = cols / group_size, row_words = cols * bits / 32;
    const int64_t gwords = (int64_t)group_size * bits / 32;
    uint8_t gcodes[128];
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t g = 0; g < groups; g++) {
            const int64_t at = r * cols + g * group_size, gi = r * groups + g;
            float sc, bi;
            wt_affine_group(w + at, group_size, bits, &sc, &bi, gcodes);
            wt_pack_codes(gcodes, group_size, bits, packed + r * row_words + g * gwords);
            if (codes) memcpy(codes + at, gcodes, (size_t)group_size);
            if (dtype == WT_F32) {
                ((float *)scales)[gi] = sc;
                ((float *)biases)[gi] = bi;
            } else {
                uint16_t hs = dtype == WT_BF16 ? kiln_f32_to_bf16(sc) : kiln_f32_to_f16(sc);
                uint16_t hb = dtype == WT_BF16 ? kiln_f32_to_bf16(bi) : kiln_f32_to_f16(bi);
                memcpy((uint8_t *)scales + 2 * gi, &hs, 2);
                memcpy((uint8_t *)biases + 2 * gi, &hb, 2);
            }
        }
    }
    return KILN_OK;
}
