/*
 * kn_attn_avx2.c — AVX2+FMA attention over paged K/V (contract: kn_attn.h,
 * oracle: ref/kn_attn_ref.c). Per (query, head), in ascending key position:
 * scores = scale · q·k (8-lane FMA over head_dim, masked tail, fixed hsum),
 * optional softcap, then exp(s - max) vectorized over the score row, Σ in
 * 8-lane chunks from the row start, V accumulated with FMA, times 1/Σ.
 * Query heads sharing a KV head run together (K/V rows loaded once), each
 * with exactly the single-head arithmetic, so nothing depends on n_q, h0/h1
 * or threads (batch invariance). Quantized K/V rows (kn_kvq.h) are decoded
 * once per row for the whole head group by kv_load_avx2, which yields bitwise
 * the floats of the scalar kn_kv_load (f32 mul then add, exact conversions).
 * Rotated formats: as in ref, each head's query is rotated per block class
 * (scalar kn_kv_rotate), and each class's V sum is scaled by 1/Σ and rotated
 * back; a second accumulator only when the two classes rotate differently.
 */
#if defined(__x86_64__)
#include <math.h>
#include <string.h>

#include "kernels/kn_int.h"
#include "kernels/x86/kn_avx2_math.h"

/* Decodes one record; groups that are not a multiple of 8 wide take the
 * scalar decoder (same floats). */
static void kv_load_avx2(kn_kv_fmt f, const void *src, int32_t n, float *out)
{
    const uint8_t *s = src;
    if (f.dtype == KN_KV_F16 && n % 8 == 0) {
        for (int32_t i = 0; i < n; i += 8)
            _mm256_storeu_ps(out + i,
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 2 * i))));
        return;
    }
    if (f.dtype == KN_KV_BF16 && n % 8 == 0) {
        for (int32_t i = 0; i < n; i += 8) {
            __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + 2 * i)));
            _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
        }
        return;
    }
    if ((f.dtype == KN_KV_Q8 || f.dtype == KN_KV_Q4) && f.group % 8 == 0) {
        int32_t g = f.group, ng = n / g;
        const uint8_t *codes = s + (size_t)ng * 8;
        const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
        const __m256i nib = _mm256_set1_epi32(15);
        for (int32_t j = 0; j < ng; j++) {
            float sc, b;
            memcpy(&sc, s + (size_t)j * 4, 4);
            memcpy(&b, s + (size_t)(ng + j) * 4, 4);
            __m256 vs = _mm256_set1_ps(sc), vb = _mm256_set1_ps(b);
            for (int32_t i = j * g; i < (j + 1) * g; i += 8) {
                __m256i c;
                if (f.dtype == KN_KV_Q8) {
                    c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(codes + i)));
                } else {
                    uint32_t w;
                    memcpy(&w, codes + i / 2, 4);
                    c = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w), shifts), nib);
                }
                __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(c), vs);
                _mm256_storeu_ps(out + i, _mm256_add_ps(v, vb));
            }
        }
        return;
    }
    kn_kv_load(f, src, n, out);
}

/* Row (position p, KV head kvh) as f32: in place for f32 records, else
 * decoded into buf. */
static inline const float *kv_at(const void *const *blocks, const kn_attn_args *a, int32_t p,
                                 int32_t kvh, float *buf)
{
    kn_kv_fmt f;
    const uint8_t *rec = kn_attn_rec(a, blocks, p, kvh, &f);
    if (f.dtype == KN_KV_F32) return (const float *)rec;
    kv_load_avx2(f, rec, a->head_dim, buf);
    return buf;
}

/* Prefetches the record of position p (if p <= last) a few keys ahead: rows
 * of one KV head are n_kv_heads records apart inside a block and blocks lie
 * anywhere in the pool, so the hardware prefetcher alone leaves the loop
 * waiting on memory (measured ~1 GB/s without this). */
#define KV_PF_AHEAD 6
static inline void kv_prefetch(const void *const *blocks, const kn_attn_args *a, int32_t p,
                               int32_t last, int32_t kvh)
{
    if (p > last) return;
    kn_kv_fmt f;
    const char *rec = (const char *)kn_attn_rec(a, blocks, p, kvh, &f);
    size_t rb = kn_kv_rec_bytes(f, a->head_dim);
    for (size_t o = 0; o < rb; o += 64) _mm_prefetch(rec + o, _MM_HINT_T0);
    _mm_prefetch(rec + rb - 1, _MM_HINT_T0);
}

#define GMAX 8 /* query heads of one KV head processed together (K/V read once) */
#define VT 16  /* V rows per tile */

/* d[g] = q[g]·k for G heads: each 8-lane chunk of k loaded once; per head
 * one 8-lane FMA chain over head_dim and a fixed hsum (the chains of the
 * heads run in parallel). */
static inline __attribute__((always_inline)) void dot_group_n(const float *const *q, const float *k,
                                                               int32_t hd, __m256i tail, const int G,
                                                               float *d)
{
    __m256 acc[GMAX];
#pragma GCC unroll 8
    for (int g = 0; g < G; g++) acc[g] = _mm256_setzero_ps();
    int32_t e = 0;
    for (; e + 8 <= hd; e += 8) {
        __m256 kv = _mm256_loadu_ps(k + e);
#pragma GCC unroll 8
        for (int g = 0; g < G; g++) acc[g] = _mm256_fmadd_ps(_mm256_loadu_ps(q[g] + e), kv, acc[g]);
    }
    if (e < hd) {
        __m256 kv = _mm256_maskload_ps(k + e, tail);
#pragma GCC unroll 8
        for (int g = 0; g < G; g++) acc[g] = _mm256_fmadd_ps(_mm256_maskload_ps(q[g] + e, tail), kv, acc[g]);
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; g++) d[g] = kn_hsum256(acc[g]);
}

/* The common group sizes get their accumulators in registers. */
static inline void dot_group(const float *const *q, const float *k, int32_t hd, __m256i tail, int G,
                             float *d)
{
    switch (G) {
    case 1: dot_group_n(q, k, hd, tail, 1, d); break;
    case 2: dot_group_n(q, k, hd, tail, 2, d); break;
    case 4: dot_group_n(q, k, hd, tail, 4, d); break;
    case 8: dot_group_n(q, k, hd, tail, 8, d); break;
    default:
        for (int g = 0; g < G; g++) dot_group_n(q + g, k, hd, tail, 1, d + g);
    }
}
/* Heads [h, h+G) share KV head kvh: each key and value row is loaded once for
 * all G heads; per head the arithmetic is exactly the single-head sequence. */
static void attn_group(const kn_attn_args *a, int32_t i, int32_t h, int G, float *scratch)
{
    int32_t hd = a->head_dim, p = a->pos0 + i, rowlen = a->pos0 + a->n_q;
    int32_t kvh = h / (a->n_heads / a->n_kv_heads);
    int32_t lo = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0, nk = p - lo + 1;
    int32_t hp = hd + 8;
    float *acc = scratch;                /* [2][GMAX][hp]: per block class */
    float *qr = acc + 2 * GMAX * hp;     /* [2][GMAX][hp]: rotated queries */
    float *scores = qr + 2 * GMAX * hp;  /* [GMAX][rowlen] */
    float *row = scores + GMAX * rowlen; /* [hp]: one decoded K row */
    float *vbuf = row + hp;              /* [VT][hp]: decoded V rows of a tile */
    /* class c (0 = blocks < full_blocks, 1 = the rest): rotation, queries, accumulator */
    int32_t rot[2] = {kn_kv_rot_of(a->fmt_full, hd), kn_kv_rot_of(a->fmt, hd)};
    int two = rot[0] != rot[1];
    int64_t first_main = (int64_t)a->full_blocks * a->block_tokens;
    const float *q[2][GMAX];
    float m[GMAX];
    __m256i tail = kn_tail_mask(hd & 7);
    for (int g = 0; g < G; g++) {
        const float *q0 = a->q + ((int64_t)i * a->n_heads + h + g) * hd;
        for (int c = 0; c < 2; c++) {
            q[c][g] = q0;
            if (rot[c] && (c == 0 || two)) {
                float *t = qr + (c * GMAX + g) * hp;
                memcpy(t, q0, sizeof(float) * (size_t)hd);
                kn_kv_rotate(rot[c], t, hd);
                q[c][g] = t;
            }
        }
        if (!two) q[1][g] = q[0][g];
        m[g] = -INFINITY;
    }
    /* keys of class 0 are [lo, mid), of class 1 [mid, p]: ascending either way */
    int32_t mid = first_main < lo ? lo : first_main > p + 1 ? p + 1 : (int32_t)first_main;
    for (int c = 0; c < 2; c++) {
        const float *const *qc = q[c];
        for (int32_t j = c ? mid : lo, end = c ? p + 1 : mid; j < end; j++) {
            kv_prefetch(a->k_blocks, a, j + KV_PF_AHEAD, p, kvh);
            const float *k = kv_at(a->k_blocks, a, j, kvh, row);
            float d[GMAX];
            dot_group(qc, k, hd, tail, G, d);
            for (int g = 0; g < G; g++) {
                float s = d[g] * a->scale;
                if (a->softcap > 0) s = a->softcap * tanhf(s / a->softcap);
                scores[g * rowlen + j - lo] = s;
                m[g] = s > m[g] ? s : m[g];
            }
        }
    }
    float inv[GMAX];
    for (int g = 0; g < G; g++) {
        float *sc = scores + g * rowlen;
        __m256 mv = _mm256_set1_ps(m[g]), sum = _mm256_setzero_ps();
        int32_t j = 0;
        for (; j + 8 <= nk; j += 8) {
            __m256 e = kn_exp256(_mm256_sub_ps(_mm256_loadu_ps(sc + j), mv));
            _mm256_storeu_ps(sc + j, e);
            sum = _mm256_add_ps(sum, e);
        }
        if (j < nk) {
            __m256i t = kn_tail_mask(nk - j);
            __m256 e = kn_exp256(_mm256_sub_ps(_mm256_maskload_ps(sc + j, t), mv));
            e = _mm256_and_ps(e, _mm256_castsi256_ps(t));
            _mm256_maskstore_ps(sc + j, t, e);
            sum = _mm256_add_ps(sum, e);
        }
        inv[g] = 1.0f / kn_hsum256(sum);
    }
    memset(acc, 0, sizeof(float) * (size_t)((1 + two) * GMAX * hp));
    int32_t h8 = hd & ~7;
    /* V in tiles of VT keys inside each block class: the tile's rows (decoded
     * once if quantized) stay in L1 while each head's accumulator chunk (8
     * vectors) stays in registers over the tile. Per element the FMAs still
     * run over keys in ascending order: the same floats as one key at a time. */
    const float *vr[VT];
    for (int c = 0; c < 1 + two; c++) {
        float *acj = acc + (c ? GMAX * hp : 0);
        int32_t r0 = c ? mid : lo, r1 = two && !c ? mid : p + 1; /* [r0, r1) */
        for (int32_t t0 = r0; t0 < r1; t0 += VT) {
            int nt = r1 - t0 < VT ? r1 - t0 : VT;
            for (int t = 0; t < nt; t++) {
                kv_prefetch(a->v_blocks, a, t0 + t + KV_PF_AHEAD, p, kvh);
                vr[t] = kv_at(a->v_blocks, a, t0 + t, kvh, vbuf + (size_t)t * (size_t)hp);
            }
            for (int g = 0; g < G; g++) {
                float *ac = acj + g * hp;
                const float *sc = scores + g * rowlen + (t0 - lo);
                int32_t e0 = 0;
                for (; e0 + 64 <= h8; e0 += 64) {
                    __m256 r[8];
#pragma GCC unroll 8
                    for (int u = 0; u < 8; u++) r[u] = _mm256_loadu_ps(ac + e0 + 8 * u);
                    for (int t = 0; t < nt; t++) {
                        __m256 w = _mm256_broadcast_ss(sc + t);
                        const float *v = vr[t] + e0;
#pragma GCC unroll 8
                        for (int u = 0; u < 8; u++) r[u] = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 8 * u), r[u]);
                    }
#pragma GCC unroll 8
                    for (int u = 0; u < 8; u++) _mm256_storeu_ps(ac + e0 + 8 * u, r[u]);
                }
                for (; e0 < h8; e0 += 8) {
                    __m256 r = _mm256_loadu_ps(ac + e0);
                    for (int t = 0; t < nt; t++)
                        r = _mm256_fmadd_ps(_mm256_broadcast_ss(sc + t), _mm256_loadu_ps(vr[t] + e0), r);
                    _mm256_storeu_ps(ac + e0, r);
                }
                if (h8 < hd) {
                    __m256 r = _mm256_loadu_ps(ac + h8);
                    for (int t = 0; t < nt; t++)
                        r = _mm256_fmadd_ps(_mm256_broadcast_ss(sc + t), _mm256_maskload_ps(vr[t] + h8, tail), r);
                    _mm256_storeu_ps(ac + h8, r);
                }
            }
        }
    }
    for (int g = 0; g < G; g++) {
        __m256 iv = _mm256_set1_ps(inv[g]);
        float *o = a->out + ((int64_t)i * a->n_heads + h + g) * hd;
        for (int c = 0; c < 1 + two; c++) {
            /* class 0 straight into o; class 1 (only when it rotates differently)
             * scaled in place, rotated back, then added */
            float *ac = acc + (c * GMAX + g) * hp, *dst = c ? ac : o;
            int32_t e = 0;
            for (; e < h8; e += 8)
                _mm256_storeu_ps(dst + e, _mm256_mul_ps(_mm256_loadu_ps(ac + e), iv));
            if (e < hd)
                _mm256_maskstore_ps(dst + e, tail, _mm256_mul_ps(_mm256_loadu_ps(ac + e), iv));
            kn_kv_rotate(rot[c], dst, hd);
        }
        if (two)
            for (int32_t e = 0; e < hd; e++)
                o[e] += acc[(GMAX + g) * hp + e];
    }
}

static void attn_heads_avx2(const kn_attn_args *a, int32_t h0, int32_t h1, float *scratch)
{
    int32_t per_kv = a->n_heads / a->n_kv_heads;
    for (int32_t i = 0; i < a->n_q; i++)
        for (int32_t h = h0; h < h1;) {
            int32_t end = (h / per_kv + 1) * per_kv; /* first head of the next KV head */
            if (end > h1) end = h1;
            if (end > h + GMAX) end = h + GMAX;
            attn_group(a, i, h, (int)(end - h), scratch);
            h = end;
        }
}

void kn_avx2_install_attn(kn_ops *t)
{
    t->attn_heads = attn_heads_avx2;
    t->kv_load = kv_load_avx2;
}
#endif
