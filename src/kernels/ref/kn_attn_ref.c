/*
 * kn_attn_ref.c — portable attention over paged K/V: the oracle.
 *
 * Per (query i, head h): two passes in ascending key position — scores
 * (scale · q·k, optional softcap) into scratch, then max, exp, the weighted
 * sum of V in the same order, and a final 1/Σ. Nothing depends on n_q, h0/h1
 * or threads (batch invariance). Quantized K/V records are decoded with
 * kn_kv_load into a one-row buffer right before use (no cache-sized copy).
 * Rotated formats (kn_kvq.h): the query is rotated like the keys of that
 * class, and the V sum of a rotated class is rotated back after the 1/Σ;
 * when the f32 prefix (fmt_full) and the rest rotate differently, each class
 * has its own accumulator and the two are added at the end.
 */
#include <math.h>
#include <string.h>

#include "kernels/kn_int.h"

KN_NO_CONTRACT

/* Row (position p, KV head kvh) as f32: in place for f32 records, else
 * decoded into buf. */
static inline const float *kv_at(const void *const *blocks, const kn_attn_args *a, int32_t p,
                                 int32_t kvh, float *buf)
{
    kn_kv_fmt f;
    const uint8_t *rec = kn_attn_rec(a, blocks, p, kvh, &f);
    if (f.dtype == KN_KV_F32) return (const float *)rec;
    kn_kv_load(f, rec, a->head_dim, buf);
    return buf;
}

/* scratch: acc[2][hd], qr[2][hd], scores[pos0 + n_q], row[hd] */
static void attn_one(const kn_attn_args *a, int32_t i, int32_t h, float *scores, float *acc,
                     float *row)
{
    int32_t hd = a->head_dim, p = a->pos0 + i;
    int32_t kvh = h / (a->n_heads / a->n_kv_heads);
    int32_t lo = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
    /* class c (0 = blocks < full_blocks, 1 = the rest): rotation, query, accumulator */
    int32_t rot[2] = {kn_kv_rot_of(a->fmt_full, hd), kn_kv_rot_of(a->fmt, hd)};
    int two = rot[0] != rot[1];
    int64_t first_main = (int64_t)a->full_blocks * a->block_tokens;
    const float *q0 = a->q + ((int64_t)i * a->n_heads + h) * hd, *q[2] = {q0, q0};
    float *qr = acc + 2 * hd;
    for (int c = 0; c < 1 + two; c++)
        if (rot[c]) {
            memcpy(qr + c * hd, q0, sizeof(float) * (size_t)hd);
            kn_kv_rotate(rot[c], qr + c * hd, hd);
            q[c] = qr + c * hd;
        }
    if (!two) q[1] = q[0];
    float m = -INFINITY;
    for (int32_t j = lo; j <= p; j++) {
        const float *k = kv_at(a->k_blocks, a, j, kvh, row);
        const float *qc = q[j >= first_main];
        double d = 0;
        for (int32_t e = 0; e < hd; e++)
            d += (double)qc[e] * (double)k[e];
        float s = (float)d * a->scale;
        if (a->softcap > 0) s = a->softcap * tanhf(s / a->softcap);
        scores[j - lo] = s;
        m = s > m ? s : m;
    }
    double sum = 0;
    memset(acc, 0, sizeof(float) * 2 * (size_t)hd);
    for (int32_t j = lo; j <= p; j++) {
        float w = expf(scores[j - lo] - m);
        sum += w;
        const float *v = kv_at(a->v_blocks, a, j, kvh, row);
        float *ac = acc + (two && j >= first_main ? hd : 0);
        for (int32_t e = 0; e < hd; e++)
            ac[e] += w * v[e];
    }
    float inv = (float)(1.0 / sum);
    float *o = a->out + ((int64_t)i * a->n_heads + h) * hd;
    for (int32_t e = 0; e < hd; e++) o[e] = acc[e] * inv;
    kn_kv_rotate(rot[0], o, hd);
    if (two) { /* the rotated-differently class: scaled, rotated back, added */
        float *t = acc + hd;
        for (int32_t e = 0; e < hd; e++)
            t[e] *= inv;
        kn_kv_rotate(rot[1], t, hd);
        for (int32_t e = 0; e < hd; e++)
            o[e] += t[e];
    }
}

static void attn_heads_ref(const kn_attn_args *a, int32_t h0, int32_t h1, float *scratch)
{
    float *acc = scratch;                      /* [2][head_dim] + rotated queries [2][head_dim] */
    float *scores = scratch + 4 * a->head_dim; /* [pos0 + n_q] */
    float *row = scores + a->pos0 + a->n_q; /* [head_dim]: one decoded K or V row */
    for (int32_t i = 0; i < a->n_q; i++)
        for (int32_t h = h0; h < h1; h++)
            attn_one(a, i, h, scores, acc, row);
}

void kn_ref_install_attn(kn_ops *t)
{
    t->attn_heads = attn_heads_ref;
    t->kv_load = kn_kv_load;
}
