/*
 * kn_kvq.c — the K/V record codec (contract: kn_kvq.h). Scalar, no FMA
 * contraction: the AVX2 decoder in x86/kn_attn_avx2.c reproduces these floats
 * bit for bit (code * scale, then + bias, both rounded in f32).
 */
#include "kernels/kn_kvq.h"

#include <math.h>
#include <string.h>

#include "kernels/kn_int.h"
#include "util/half.h"

KN_NO_CONTRACT

size_t kn_kv_rec_bytes(kn_kv_fmt f, int32_t n)
{
    switch (f.dtype) {
    case KN_KV_F16:
    case KN_KV_BF16:
        return (size_t)n * 2;
    case KN_KV_Q8:
        return (size_t)(n / f.group) * 8 + (size_t)n;
    case KN_KV_Q4:
        return (size_t)(n / f.group) * 8 + (size_t)n / 2;
    default:
        return (size_t)n * 4;
    }
}

const char *kn_kv_dtype_name(int32_t dtype)
{
    static const char *const names[KN_KV_DTYPE_COUNT] = {[KN_KV_F32] = "f32",
                                                         [KN_KV_F16] = "f16",
                                                         [KN_KV_BF16] = "bf16",
                                                         [KN_KV_Q8] = "q8",
                                                         [KN_KV_Q4] = "q4"};
    return dtype >= 0 && dtype < KN_KV_DTYPE_COUNT ? names[dtype] : "?";
}

int32_t kn_kv_rot_block(int32_t head_dim)
{
    if (head_dim < 2 || head_dim > KN_KV_ROT_ROW_MAX) return 0;
    int32_t b = head_dim & -head_dim; /* lowest set bit: largest power of two dividing it */
    if (b > KN_KV_ROT_MAX) b = KN_KV_ROT_MAX;
    return b >= 2 ? b : 0;
}

int32_t kn_kv_rot_of(kn_kv_fmt f, int32_t n)
{
    int32_t b = f.rot;
    if (b < 2 || b > KN_KV_ROT_MAX || (b & (b - 1)) || n > KN_KV_ROT_ROW_MAX || n % b) return 0;
    return b;
}

/* The first three butterfly stages (h = 1, 2, 4) of 8 values, in registers. */
static inline void fwht8(float *y)
{
    float a0 = y[0] + y[1], a1 = y[0] - y[1], a2 = y[2] + y[3], a3 = y[2] - y[3];
    float a4 = y[4] + y[5], a5 = y[4] - y[5], a6 = y[6] + y[7], a7 = y[6] - y[7];
    float b0 = a0 + a2, b2 = a0 - a2, b1 = a1 + a3, b3 = a1 - a3;
    float b4 = a4 + a6, b6 = a4 - a6, b5 = a5 + a7, b7 = a5 - a7;
    y[0] = b0 + b4;
    y[4] = b0 - b4;
    y[1] = b1 + b5;
    y[5] = b1 - b5;
    y[2] = b2 + b6;
    y[6] = b2 - b6;
    y[3] = b3 + b7;
    y[7] = b3 - b7;
}

/* Butterflies of stage h (h >= 8) over one block: 8 lanes at a time (fixed
 * trip count, so the compiler vectorizes it; elementwise, so the floats are
 * those of the one-at-a-time loop). */
static inline void fwht_stage(float *y, int32_t block, int32_t h)
{
    for (int32_t i = 0; i < block; i += 2 * h)
        for (int32_t j = i; j < i + h; j += 8) {
            float *u = y + j, *v = y + j + h;
            for (int k = 0; k < 8; k++) {
                float a = u[k], b = v[k];
                u[k] = a + b;
                v[k] = a - b;
            }
        }
}

void kn_kv_rotate(int32_t block, float *x, int32_t n)
{
    if (block < 2) return;
    /* 1/sqrt(block) rounded once; for block 4^k it is exact. Every output is
     * the same chain of roundings whatever the loop shape: one add or
     * subtract per stage, then the multiply. */
    float norm = (float)(1.0 / sqrt((double)block));
    for (int32_t o = 0; o + block <= n; o += block) {
        float *y = x + o;
        if (block >= 8) {
            for (int32_t i = 0; i < block; i += 8)
                fwht8(y + i);
            for (int32_t h = 8; h < block; h *= 2)
                fwht_stage(y, block, h);
        } else {
            for (int32_t h = 1; h < block; h *= 2)
                for (int32_t i = 0; i < block; i += 2 * h)
                    for (int32_t j = i; j < i + h; j++) {
                        float a = y[j], b = y[j + h];
                        y[j] = a + b;
                        y[j + h] = a - b;
                    }
        }
        for (int32_t i = 0; i < block; i++)
            y[i] *= norm;
    }
}

/* Codes for scale s and bias b: round to nearest (ties to even), clamped; NaN
 * becomes code 0. Returns the squared error of the decoded values. */
static double encode(const float *x, int32_t g, int levels, float s, float b, uint8_t *codes)
{
    double se = 0;
    for (int32_t i = 0; i < g; i++) {
        float v = s > 0 ? (x[i] - b) / s : 0.0f;
        if (!(v >= 0)) v = 0;
        if (v > (float)levels) v = (float)levels;
        codes[i] = (uint8_t)lrintf(v);
        float y = (float)codes[i] * s;
        double e = (double)(y + b) - (double)x[i];
        se += e * e;
    }
    return se;
}

/* One group: scale = (max - min) / levels, bias = min, then up to two
 * least-squares refits of (scale, bias) to the codes (x ≈ scale·code + bias),
 * each kept only if it lowers the squared error. Min/max leaves the extremes
 * exact and the rest uniformly off by up to half a step; the refit trades a
 * little of the extremes for the rest: ~12 % lower RMS error at 8 values per
 * group, ~4 % at 64 (docs/kv.md). Deterministic: double sums in index order. */
static void quant_group(const float *x, int32_t g, int levels, float *scale, float *bias,
                        uint8_t *codes)
{
    float mn = x[0], mx = x[0];
    for (int32_t i = 1; i < g; i++) {
        mn = x[i] < mn ? x[i] : mn;
        mx = x[i] > mx ? x[i] : mx;
    }
    float s = (mx - mn) / (float)levels;
    if (!(s > 0) || !isfinite(s)) s = 0;
    *scale = s;
    *bias = mn;
    double best = encode(x, g, levels, s, mn, codes);
    if (!(s > 0) || !(best > 0) || !isfinite(best)) return;
    uint8_t trial[512];
    const uint8_t *c = codes;
    for (int it = 0; it < 2; it++) {
        double sc = 0, sx = 0;
        for (int32_t i = 0; i < g; i++) {
            sc += c[i];
            sx += x[i];
        }
        double cm = sc / g, xm = sx / g, cc = 0, cx = 0;
        for (int32_t i = 0; i < g; i++) {
            cc += (c[i] - cm) * (c[i] - cm);
            cx += (c[i] - cm) * ((double)x[i] - xm);
        }
        if (!(cc > 0)) return;
        float ns = (float)(cx / cc), nb = (float)(xm - (cx / cc) * cm);
        if (!(ns > 0) || !isfinite(ns) || !isfinite(nb)) return;
        double se = encode(x, g, levels, ns, nb, trial);
        if (!(se < best)) return;
        best = se;
        *scale = ns;
        *bias = nb;
        memcpy(codes, trial, (size_t)g);
    }
}

void kn_kv_store(kn_kv_fmt f, const float *x, int32_t n, void *dst)
{
    uint8_t *d = dst;
    float xr[KN_KV_ROT_ROW_MAX];
    int32_t rot = kn_kv_rot_of(f, n);
    if (rot) {
        memcpy(xr, x, sizeof(float) * (size_t)n);
        kn_kv_rotate(rot, xr, n);
        x = xr;
    }
    switch (f.dtype) {
    case KN_KV_F16:
        for (int32_t i = 0; i < n; i++) {
            uint16_t h = kiln_f32_to_f16(x[i]);
            memcpy(d + 2 * i, &h, 2);
        }
        return;
    case KN_KV_BF16:
        for (int32_t i = 0; i < n; i++) {
            uint16_t h = kiln_f32_to_bf16(x[i]);
            memcpy(d + 2 * i, &h, 2);
        }
        return;
    case KN_KV_Q8:
    case KN_KV_Q4: {
        int32_t g = f.group, ng = n / g;
        int levels = f.dtype == KN_KV_Q8 ? 255 : 15;
        uint8_t *codes = d + (size_t)ng * 8;
        uint8_t tmp[512];
        for (int32_t j = 0; j < ng; j++) {
            float s, b;
            const float *xg = x + (size_t)j * g;
            if (f.dtype == KN_KV_Q8) {
                quant_group(xg, g, levels, &s, &b, codes + (size_t)j * g);
            } else {
                /* groups are at most head_dim (<= 512 by kv_format) */
                quant_group(xg, g, levels, &s, &b, tmp);
                uint8_t *c = codes + (size_t)j * g / 2;
                for (int32_t i = 0; i < g; i += 2)
                    c[i / 2] = (uint8_t)(tmp[i] | (tmp[i + 1] << 4));
            }
            memcpy(d + (size_t)j * 4, &s, 4);
            memcpy(d + (size_t)(ng + j) * 4, &b, 4);
        }
        return;
    }
    default:
        memcpy(d, x, sizeof(float) * (size_t)n);
        return;
    }
}

void kn_kv_load(kn_kv_fmt f, const void *src, int32_t n, float *out)
{
    const uint8_t *s = src;
    switch (f.dtype) {
    case KN_KV_F16:
        for (int32_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            out[i] = kiln_f16_to_f32(h);
        }
        return;
    case KN_KV_BF16:
        for (int32_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            out[i] = kiln_bf16_to_f32(h);
        }
        return;
    case KN_KV_Q8:
    case KN_KV_Q4: {
        int32_t g = f.group, ng = n / g;
        const uint8_t *codes = s + (size_t)ng * 8;
        for (int32_t j = 0; j < ng; j++) {
            float sc, b;
            memcpy(&sc, s + (size_t)j * 4, 4);
            memcpy(&b, s + (size_t)(ng + j) * 4, 4);
            for (int32_t i = j * g; i < (j + 1) * g; i++) {
                int c = f.dtype == KN_KV_Q8 ? codes[i] : (codes[i / 2] >> ((i & 1) * 4)) & 15;
                float v = (float)c * sc;
                out[i] = v + b;
            }
        }
        return;
    }
    default:
        memcpy(out, s, sizeof(float) * (size_t)n);
        return;
    }
}

void kn_kv_load_fast(kn_kv_fmt f, const void *src, int32_t n, float *out)
{
    kn_get()->kv_load(f, src, n, out);
}
