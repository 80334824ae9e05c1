/*
 * kn_attn_ref.c — portable attention over paged K/V: the oracle.
 *
 * Per (query i, head h): two passes in ascending key position — scores
 * (scale · q·k, optional softcap) into scratch, then max, exp, the weighted
 * sum of V in the same order, and a final 1/Σ. Nothing depends on n_q, h0/h1
 * or threads (batch invariance). Quantized K/V records are decoded with
 * kn_kv_load into a one-row buffer right before use (no cache-sized copy).
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
    int32_t j = p / a->block_tokens;
    kn_kv_fmt f = j < a->full_blocks ? a->fmt_full : a->fmt;
    const uint8_t *rec = (const uint8_t *)blocks[j] +
                         ((size_t)(p % a->block_tokens) * (size_t)a->n_kv_heads + (size_t)kvh) *
                             kn_kv_rec_bytes(f, a->head_dim);
    if (f.dtype == KN_KV_F32) return (const float *)rec;
    kn_kv_load(f, rec, a->head_dim, buf);
    return buf;
}

static void attn_one(const kn_attn_args *a, int32_t i, int32_t h, float *scores, float *acc,
                     float *row)
{
    int32_t hd = a->head_dim, p = a->pos0 + i;
    int32_t kvh = h / (a->n_heads / a->n_kv_heads);
    int32_t lo = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
    const float *q = a->q + ((int64_t)i * a->n_heads + h) * hd;
    float m = -INFINITY;
    for (int32_t j = lo; j <= p; j++) {
        const float *k = kv_at(a->k_blocks, a, j, kvh, row);
        double d = 0;
        for (int32_t e = 0; e < hd; e++) d += (double)q[e] * (double)k[e];
        float s = (float)d * a->scale;
        if (a->softcap > 0) s = a->softcap * tanhf(s / a->softcap);
        scores[j - lo] = s;
        m = s > m ? s : m;
    }
    double sum = 0;
    memset(acc, 0, sizeof(float) * (size_t)hd);
    for (int32_t j = lo; j <= p; j++) {
        float w = expf(scores[j - lo] - m);
        sum += w;
        const float *v = kv_at(a->v_blocks, a, j, kvh, row);
        for (int32_t e = 0; e < hd; e++) acc[e] += w * v[e];
    }
    float inv = (float)(1.0 / sum);
    float *o = a->out + ((int64_t)i * a->n_heads + h) * hd;
    for (int32_t e = 0; e < hd; e++) o[e] = acc[e] * inv;
}

static void attn_heads_ref(const kn_attn_args *a, int32_t h0, int32_t h1, float *scratch)
{
    float *acc = scratch;                /* [head_dim] */
    float *scores = scratch + a->head_dim; /* [pos0 + n_q] */
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
