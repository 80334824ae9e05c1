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

/* One group: min/max, scale = (max - min) / levels, codes rounded to nearest
 * (ties to even), clamped; NaN inputs become code 0. */
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
    for (int32_t i = 0; i < g; i++) {
        float v = s > 0 ? (x[i] - mn) / s : 0.0f;
        if (!(v >= 0)) v = 0;
        if (v > (float)levels) v = (float)levels;
        codes[i] = (uint8_t)lrintf(v);
    }
}

void kn_kv_store(kn_kv_fmt f, const float *x, int32_t n, void *dst)
{
    uint8_t *d = dst;
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
