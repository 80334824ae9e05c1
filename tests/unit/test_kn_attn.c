/*
 * test_kn_attn.c — paged attention: ref against a dense double-precision
 * formula (GQA, causal, window, softcap), every variant against ref, and
 * batch invariance (a query's output is bitwise the same whether computed
 * alone, in a chunk of new tokens, or with a different head split).
 */
#include "kernels/kn_attn.h"
#include "kernels/kn_cpu.h"
#include "test.h"

static uint64_t rng_state = 0x13198A2E03707344ull;
static float rndf(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(uint32_t)(rng_state >> 16) / 2147483648.0 - 1.0);
}

typedef struct {
    int32_t n_heads, n_kv, hd, bt, n_tok; /* n_tok: total positions in the cache */
    float *kv_mem;                        /* OWNED: all blocks, in shuffled order */
    const float **kb, **vb;               /* OWNED block tables */
    float *q;                             /* [n_tok, n_heads, hd] queries for every position */
} cache;

static cache make_cache(int32_t n_heads, int32_t n_kv, int32_t hd, int32_t bt, int32_t n_tok)
{
    cache c = {n_heads, n_kv, hd, bt, n_tok, NULL, NULL, NULL, NULL};
    int32_t nb = (n_tok + bt - 1) / bt;
    size_t bfl = (size_t)bt * n_kv * hd;
    c.kv_mem = malloc(2 * nb * bfl * 4);
    for (size_t i = 0; i < 2 * nb * bfl; i++) c.kv_mem[i] = rndf();
    c.kb = malloc(nb * sizeof *c.kb);
    c.vb = malloc(nb * sizeof *c.vb);
    for (int32_t j = 0; j < nb; j++) { /* non-contiguous: block j lives at slot (nb-1-j) */
        c.kb[j] = c.kv_mem + (size_t)(2 * (nb - 1 - j)) * bfl;
        c.vb[j] = c.kv_mem + (size_t)(2 * (nb - 1 - j) + 1) * bfl;
    }
    c.q = malloc((size_t)n_tok * n_heads * hd * 4);
    for (size_t i = 0; i < (size_t)n_tok * n_heads * hd; i++) c.q[i] = rndf() * 2;
    return c;
}

static void free_cache(cache *c)
{
    free(c->kv_mem);
    free(c->kb);
    free(c->vb);
    free(c->q);
}

static kn_attn_args args_for(const cache *c, int32_t pos0, int32_t n_q, float *out, float softcap,
                             int32_t window)
{
    kn_attn_args a = {.q = c->q + (size_t)pos0 * c->n_heads * c->hd,
                      .out = out,
                      .n_q = n_q,
                      .pos0 = pos0,
                      .n_heads = c->n_heads,
                      .n_kv_heads = c->n_kv,
                      .head_dim = c->hd,
                      .scale = 1.0f / sqrtf((float)c->hd),
                      .softcap = softcap,
                      .window = window,
                      .k_blocks = (const void *const *)c->kb,
                      .v_blocks = (const void *const *)c->vb,
                      .block_tokens = c->bt};
    return a;
}

static void run(const kn_attn_args *a, int32_t h0, int32_t h1)
{
    float *scratch = malloc((size_t)kn_attn_scratch_floats(a) * 4);
    kn_attn_heads(a, h0, h1, scratch);
    free(scratch);
}

/* Dense double reference for query position p, head h. */
static void dense(const cache *c, int32_t p, int32_t h, float softcap, int32_t window, double *o)
{
    int32_t kvh = h / (c->n_heads / c->n_kv), lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
    const float *q = c->q + ((size_t)p * c->n_heads + h) * c->hd;
    double *s = malloc((size_t)(p + 1) * sizeof *s), m = -1e300, sum = 0;
    for (int32_t j = lo; j <= p; j++) {
        const float *k = c->kb[j / c->bt] + ((size_t)(j % c->bt) * c->n_kv + kvh) * c->hd;
        double d = 0;
        for (int32_t e = 0; e < c->hd; e++) d += (double)q[e] * k[e];
        d /= sqrt((double)c->hd);
        if (softcap > 0) d = softcap * tanh(d / softcap);
        s[j] = d;
        if (d > m) m = d;
    }
    for (int32_t e = 0; e < c->hd; e++) o[e] = 0;
    for (int32_t j = lo; j <= p; j++) {
        double w = exp(s[j] - m);
        sum += w;
        const float *v = c->vb[j / c->bt] + ((size_t)(j % c->bt) * c->n_kv + kvh) * c->hd;
        for (int32_t e = 0; e < c->hd; e++) o[e] += w * v[e];
    }
    for (int32_t e = 0; e < c->hd; e++) o[e] /= sum;
    free(s);
}

static const char *variants[] = {"ref", "avx2"};

static int have(const char *v)
{
    kiln_err err;
    return kn_init(v, &err) == KILN_OK;
}

typedef struct {
    int32_t n_heads, n_kv, hd, bt, n_tok, window;
    float softcap;
} shape;

static const shape shapes[] = {
    {4, 4, 16, 4, 9, 0, 0},     {8, 2, 64, 16, 70, 0, 0},  {6, 3, 24, 8, 33, 5, 0},
    {4, 1, 64, 16, 50, 0, 30.f}, {2, 2, 80, 32, 100, 17, 50.f}, {32, 8, 64, 16, 40, 0, 0},
    {2, 1, 7, 3, 11, 0, 0},      {16, 1, 32, 8, 20, 0, 0}, /* 16 heads per KV head */
};
#define N_SHAPES ((int)(sizeof shapes / sizeof *shapes))

static void test_every_variant_matches_dense_reference(void)
{
    for (int vi = 0; vi < 2; vi++) {
        if (!have(variants[vi])) continue;
        for (int si = 0; si < N_SHAPES; si++) {
            const shape *s = &shapes[si];
            cache c = make_cache(s->n_heads, s->n_kv, s->hd, s->bt, s->n_tok);
            int32_t pos0 = s->n_tok / 3, n_q = s->n_tok - pos0;
            float *out = malloc((size_t)n_q * s->n_heads * s->hd * 4);
            kn_attn_args a = args_for(&c, pos0, n_q, out, s->softcap, s->window);
            run(&a, 0, s->n_heads);
            double *o = malloc((size_t)s->hd * sizeof *o);
            int ok = 1;
            for (int32_t i = 0; i < n_q && ok; i++)
                for (int32_t h = 0; h < s->n_heads && ok; h++) {
                    dense(&c, pos0 + i, h, s->softcap, s->window, o);
                    for (int32_t e = 0; e < s->hd; e++) {
                        float got = out[((size_t)i * s->n_heads + h) * s->hd + e];
                        if (!(fabs(got - o[e]) <= 2e-5)) {
                            fprintf(stderr, "  %s shape %d q %d h %d e %d: %.9g vs %.9g\n",
                                    variants[vi], si, i, h, e, got, o[e]);
                            ok = 0;
                            break;
                        }
                    }
                }
            free(o);
            free(out);
            free_cache(&c);
            if (!ok) TEST_FAIL_("variant %s shape %d", variants[vi], si);
        }
    }
}

static void test_output_is_bitwise_batch_invariant(void)
{
    for (int vi = 0; vi < 2; vi++) {
        if (!have(variants[vi])) continue;
        for (int si = 0; si < N_SHAPES; si++) {
            const shape *s = &shapes[si];
            cache c = make_cache(s->n_heads, s->n_kv, s->hd, s->bt, s->n_tok);
            size_t per = (size_t)s->n_heads * s->hd;
            float *all = malloc((size_t)s->n_tok * per * 4), *one = malloc((size_t)s->n_tok * per * 4);
            /* whole prompt at once, all heads */
            kn_attn_args a = args_for(&c, 0, s->n_tok, all, s->softcap, s->window);
            run(&a, 0, s->n_heads);
            /* token by token, heads split in two calls */
            for (int32_t p = 0; p < s->n_tok; p++) {
                kn_attn_args b = args_for(&c, p, 1, one + (size_t)p * per, s->softcap, s->window);
                int32_t mid = s->n_heads / 2;
                run(&b, 0, mid);
                run(&b, mid, s->n_heads);
            }
            int same = memcmp(all, one, (size_t)s->n_tok * per * 4) == 0;
            /* chunks of 3 */
            for (int32_t p = 0; p < s->n_tok; p += 3) {
                int32_t n = s->n_tok - p < 3 ? s->n_tok - p : 3;
                kn_attn_args b = args_for(&c, p, n, one + (size_t)p * per, s->softcap, s->window);
                run(&b, 0, s->n_heads);
            }
            same &= memcmp(all, one, (size_t)s->n_tok * per * 4) == 0;
            free(all);
            free(one);
            free_cache(&c);
            if (!same) TEST_FAIL_("variant %s shape %d not batch invariant", variants[vi], si);
        }
    }
}

static void test_avx2_matches_ref_closely(void)
{
    if (!have("avx2")) TEST_SKIP("no avx2 on this CPU");
    for (int si = 0; si < N_SHAPES; si++) {
        const shape *s = &shapes[si];
        cache c = make_cache(s->n_heads, s->n_kv, s->hd, s->bt, s->n_tok);
        size_t total = (size_t)s->n_tok * s->n_heads * s->hd;
        float *o1 = malloc(total * 4), *o2 = malloc(total * 4);
        kn_attn_args a = args_for(&c, 0, s->n_tok, o1, s->softcap, s->window);
        have("ref");
        run(&a, 0, s->n_heads);
        a.out = o2;
        have("avx2");
        run(&a, 0, s->n_heads);
        int ok = 1;
        for (size_t i = 0; i < total && ok; i++) ok = fabs((double)o1[i] - o2[i]) <= 3e-6;
        free(o1);
        free(o2);
        free_cache(&c);
        if (!ok) TEST_FAIL_("shape %d", si);
    }
}

/* ---------------------------------------------------------------- quantized K/V */

/* The same cache stored in format f (blocks [0, full) kept f32), and its
 * decoded f32 twin: what attention over f must equal bit for bit. */
typedef struct {
    uint8_t *mem;             /* OWNED encoded blocks */
    float *deq;               /* OWNED decoded blocks */
    const void **kb, **vb;    /* OWNED encoded block table */
    const float **dkb, **dvb; /* OWNED decoded block table */
} qcache;

static qcache make_qcache(const cache *c, kn_kv_fmt f, int32_t full)
{
    int32_t nb = (c->n_tok + c->bt - 1) / c->bt;
    size_t rec = kn_kv_rec_bytes(f, c->hd), rows = (size_t)c->bt * c->n_kv;
    size_t bfl = rows * c->hd;
    qcache q = {malloc(2 * nb * rows * (rec > 4 * (size_t)c->hd ? rec : 4 * (size_t)c->hd)),
                malloc(2 * nb * bfl * 4),
                malloc(nb * sizeof(void *)),
                malloc(nb * sizeof(void *)),
                malloc(nb * sizeof(float *)),
                malloc(nb * sizeof(float *))};
    size_t at = 0;
    for (int32_t j = 0; j < nb; j++)
        for (int kv = 0; kv < 2; kv++) {
            const float *src = kv ? c->vb[j] : c->kb[j];
            kn_kv_fmt fj = j < full ? (kn_kv_fmt){KN_KV_F32, 0, 0} : f;
            size_t r = kn_kv_rec_bytes(fj, c->hd);
            uint8_t *dst = q.mem + at;
            float *dq = q.deq + (size_t)(2 * j + kv) * bfl;
            for (size_t i = 0; i < rows; i++) {
                kn_kv_store(fj, src + i * c->hd, c->hd, dst + i * r);
                kn_kv_load(fj, dst + i * r, c->hd, dq + i * c->hd);
            }
            (kv ? q.vb : q.kb)[j] = dst;
            (kv ? q.dvb : q.dkb)[j] = dq;
            at += rows * r;
        }
    return q;
}

static void free_qcache(qcache *q)
{
    free(q->mem);
    free(q->deq);
    free(q->kb);
    free(q->vb);
    free(q->dkb);
    free(q->dvb);
}

static int32_t group_for(int32_t hd)
{
    for (int32_t g = 64; g >= 8; g /= 2)
        if (hd % g == 0) return g;
    return hd % 2 == 0 ? hd : 0;
}

/* Per format and variant: attention over the quantized blocks equals f32
 * attention over the decoded blocks bitwise (decoding happens in the kernel,
 * the reduction order is unchanged; a rotated format's twin is f32 with the
 * same rotation), with and without an f32 prefix block; and it is batch
 * invariant (whole prompt vs one token at a time vs chunks). */
static void test_quantized_equals_decoded_and_is_batch_invariant(void)
{
    const int32_t dts[] = {KN_KV_F16, KN_KV_BF16, KN_KV_Q8, KN_KV_Q4, KN_KV_Q8, KN_KV_Q4};
    for (int vi = 0; vi < 2; vi++) {
        if (!have(variants[vi])) continue;
        for (int si = 0; si < N_SHAPES; si++) {
            const shape *s = &shapes[si];
            for (int di = 0; di < 6; di++) {
                kn_kv_fmt f = {dts[di], 0, 0};
                if (f.dtype == KN_KV_Q8 || f.dtype == KN_KV_Q4) {
                    f.group = group_for(s->hd);
                    if (!f.group) continue;
                }
                if (di >= 4 && !(f.rot = kn_kv_rot_block(s->hd))) continue;
                for (int32_t full = 0; full <= 1; full++) {
                    cache c = make_cache(s->n_heads, s->n_kv, s->hd, s->bt, s->n_tok);
                    qcache q = make_qcache(&c, f, full);
                    size_t per = (size_t)s->n_heads * s->hd, total = (size_t)s->n_tok * per;
                    float *o_q = malloc(total * 4), *o_d = malloc(total * 4),
                          *o_t = malloc(total * 4);
                    kn_attn_args a = args_for(&c, 0, s->n_tok, o_q, s->softcap, s->window);
                    a.k_blocks = q.kb;
                    a.v_blocks = q.vb;
                    a.fmt = f;
                    a.full_blocks = full;
                    run(&a, 0, s->n_heads);
                    kn_attn_args d = args_for(&c, 0, s->n_tok, o_d, s->softcap, s->window);
                    d.k_blocks = (const void *const *)q.dkb;
                    d.v_blocks = (const void *const *)q.dvb;
                    d.fmt = (kn_kv_fmt){KN_KV_F32, 0, f.rot};
                    d.full_blocks = full;
                    run(&d, 0, s->n_heads);
                    int same = memcmp(o_q, o_d, total * 4) == 0;
                    for (int32_t p = 0; p < s->n_tok; p++) { /* token by token, heads split */
                        kn_attn_args b = a;
                        b.q = c.q + (size_t)p * per;
                        b.out = o_t + (size_t)p * per;
                        b.pos0 = p;
                        b.n_q = 1;
                        run(&b, 0, s->n_heads / 2);
                        run(&b, s->n_heads / 2, s->n_heads);
                    }
                    int inv = memcmp(o_q, o_t, total * 4) == 0;
                    for (int32_t p = 0; p < s->n_tok; p += 5) { /* chunks of 5 */
                        kn_attn_args b = a;
                        b.q = c.q + (size_t)p * per;
                        b.out = o_t + (size_t)p * per;
                        b.pos0 = p;
                        b.n_q = s->n_tok - p < 5 ? s->n_tok - p : 5;
                        run(&b, 0, s->n_heads);
                    }
                    inv &= memcmp(o_q, o_t, total * 4) == 0;
                    free(o_q);
                    free(o_d);
                    free(o_t);
                    free_qcache(&q);
                    free_cache(&c);
                    if (!same)
                        TEST_FAIL_("%s shape %d %s g%d rot %d full %d: differs from the decoded "
                                   "cache",
                                   variants[vi], si, kn_kv_dtype_name(f.dtype), (int)f.group,
                                   (int)f.rot, (int)full);
                    if (!inv)
                        TEST_FAIL_("%s shape %d %s: not batch invariant", variants[vi], si,
                                   kn_kv_dtype_name(f.dtype));
                }
            }
        }
    }
}

/* Rotated formats end to end: attention over rotated Q8 (with and without an
 * unrotated f32 prefix block) equals the dense formula over the decoded rows
 * rotated back, so the kernels rotate the query and un-rotate the output
 * correctly, per block class. Shapes include head_dim 80 (block 16) and 24 (8). */
static void test_rotated_matches_dense_on_unrotated_rows(void)
{
    for (int vi = 0; vi < 2; vi++) {
        if (!have(variants[vi])) continue;
        for (int si = 0; si < N_SHAPES; si++) {
            const shape *s = &shapes[si];
            kn_kv_fmt f = {KN_KV_Q8, group_for(s->hd), kn_kv_rot_block(s->hd)};
            if (!f.group || !f.rot) continue;
            for (int32_t full = 0; full <= 1; full++) {
                cache c = make_cache(s->n_heads, s->n_kv, s->hd, s->bt, s->n_tok);
                qcache q = make_qcache(&c, f, full);
                int32_t nb = (s->n_tok + s->bt - 1) / s->bt;
                size_t bfl = (size_t)s->bt * s->n_kv * s->hd;
                /* the decoded rows back in the model's basis */
                cache u = c;
                float *mem = malloc(2 * nb * bfl * 4);
                u.kb = malloc(nb * sizeof *u.kb);
                u.vb = malloc(nb * sizeof *u.vb);
                for (int32_t j = 0; j < nb; j++)
                    for (int kv = 0; kv < 2; kv++) {
                        float *dst = mem + (size_t)(2 * j + kv) * bfl;
                        memcpy(dst, (kv ? q.dvb : q.dkb)[j], bfl * 4);
                        if (j >= full)
                            for (size_t r = 0; r < bfl; r += (size_t)s->hd)
                                kn_kv_rotate(f.rot, dst + r, s->hd);
                        (kv ? u.vb : u.kb)[j] = dst;
                    }
                int32_t pos0 = s->n_tok / 3, n_q = s->n_tok - pos0;
                float *out = malloc((size_t)n_q * s->n_heads * s->hd * 4);
                kn_attn_args a = args_for(&c, pos0, n_q, out, s->softcap, s->window);
                a.k_blocks = q.kb;
                a.v_blocks = q.vb;
                a.fmt = f;
                a.full_blocks = full;
                run(&a, 0, s->n_heads);
                double *o = malloc((size_t)s->hd * sizeof *o), md = 0;
                for (int32_t i = 0; i < n_q; i++)
                    for (int32_t h = 0; h < s->n_heads; h++) {
                        dense(&u, pos0 + i, h, s->softcap, s->window, o);
                        for (int32_t e = 0; e < s->hd; e++)
                            md = fmax(md,
                                      fabs(out[((size_t)i * s->n_heads + h) * s->hd + e] - o[e]));
                    }
                free(o);
                free(out);
                free(mem);
                free(u.kb);
                free(u.vb);
                free_qcache(&q);
                free_cache(&c);
                if (!(md <= 2e-5))
                    TEST_FAIL_("%s shape %d rot %d full %d: max error %.3g", variants[vi], si,
                               (int)f.rot, (int)full, md);
            }
        }
    }
}

/* ref and AVX2 read the same quantized bytes to within their f32 tolerance. */
static void test_quantized_avx2_matches_ref(void)
{
    if (!have("avx2")) TEST_SKIP("no avx2 on this CPU");
    const shape *s = &shapes[1];
    cache c = make_cache(s->n_heads, s->n_kv, s->hd, s->bt, s->n_tok);
    kn_kv_fmt f = {KN_KV_Q4, 32, 64};
    qcache q = make_qcache(&c, f, 1);
    size_t total = (size_t)s->n_tok * s->n_heads * s->hd;
    float *o1 = malloc(total * 4), *o2 = malloc(total * 4);
    kn_attn_args a = args_for(&c, 0, s->n_tok, o1, 0, 0);
    a.k_blocks = q.kb;
    a.v_blocks = q.vb;
    a.fmt = f;
    a.full_blocks = 1;
    have("ref");
    run(&a, 0, s->n_heads);
    a.out = o2;
    have("avx2");
    run(&a, 0, s->n_heads);
    double md = 0;
    for (size_t i = 0; i < total; i++)
        md = fmax(md, fabs((double)o1[i] - o2[i]));
    free(o1);
    free(o2);
    free_qcache(&q);
    free_cache(&c);
    ASSERT_TRUE(md <= 3e-6);
}

int main(void)
{
    RUN(test_every_variant_matches_dense_reference);
    RUN(test_output_is_bitwise_batch_invariant);
    RUN(test_avx2_matches_ref_closely);
    RUN(test_quantized_equals_decoded_and_is_batch_invariant);
    RUN(test_rotated_matches_dense_on_unrotated_rows);
    RUN(test_quantized_avx2_matches_ref);
    return TEST_DONE();
}
