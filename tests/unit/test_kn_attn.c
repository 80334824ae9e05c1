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

int main(void)
{
    RUN(test_every_variant_matches_dense_reference);
    RUN(test_output_is_bitwise_batch_invariant);
    RUN(test_avx2_matches_ref_closely);
    return TEST_DONE();
}
