/*
 * test_kn_mat.c — matmul over every format and bit width: each variant the CPU
 * has against ref, batch invariance (n = 1, 5, 13; 1..3 threads; bitwise per
 * row), kn_mat_row against the exact dequantization, odd shapes, and the
 * int16-activation path (4/8-bit) against the exact f64 dot.
 */
#include "kernels/kn_cpu.h"
#include "kernels/kn_mat.h"
#include "test.h"
#include "util/half.h"

/* ---------------------------------------------------------------- helpers */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd32(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float rndf(void) /* [-1, 1) */
{
    return (float)((double)rnd32() / 2147483648.0 - 1.0);
}

typedef struct {
    kn_mat m;
    void *w, *s, *b; /* OWNED */
} test_mat;

static void put_sf(void *p, kn_fmt f, int64_t i, float v)
{
    if (f == KN_F32)
        ((float *)p)[i] = v;
    else if (f == KN_F16)
        ((uint16_t *)p)[i] = kiln_f32_to_f16(v);
    else
        ((uint16_t *)p)[i] = kiln_f32_to_bf16(v);
}

static test_mat make_mat(kn_fmt fmt, int64_t rows, int64_t cols, kn_fmt sfmt, int bits, int group)
{
    test_mat t;
    memset(&t, 0, sizeof t);
    t.m.fmt = fmt;
    t.m.rows = rows;
    t.m.cols = cols;
    if (fmt == KN_QAFFINE) {
        int64_t words = rows * cols * bits / 32, ng = rows * (cols / group);
        uint32_t *w = malloc((size_t)words * 4);
        for (int64_t i = 0; i < words; i++)
            w[i] = rnd32();
        size_t ss = sfmt == KN_F32 ? 4 : 2;
        t.s = malloc((size_t)ng * ss);
        t.b = malloc((size_t)ng * ss);
        for (int64_t i = 0; i < ng; i++) {
            put_sf(t.s, sfmt, i, rndf() * 0.1f); /* negative scales too */
            put_sf(t.b, sfmt, i, rndf() * 0.5f);
        }
        t.w = w;
        t.m.scales = t.s;
        t.m.biases = t.b;
        t.m.sfmt = sfmt;
        t.m.bits = bits;
        t.m.group = group;
    } else {
        int64_t el = rows * cols;
        t.w = malloc((size_t)el * 4);
        for (int64_t i = 0; i < el; i++)
            put_sf(t.w, fmt, i, rndf());
    }
    t.m.w = t.w;
    return t;
}

static void free_mat(test_mat *t)
{
    free(t->w);
    free(t->s);
    free(t->b);
}

static float *rnd_vec(int64_t n)
{
    float *v = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
        v[i] = rndf();
    return v;
}

/* Σ_i |W[r][i] · x[i]| from the dequantized row (the tolerance's scale). */
static double abs_dot(const kn_mat *W, int64_t r, const float *x, float *row)
{
    kn_mat_row(W, r, row);
    double s = 0;
    for (int64_t i = 0; i < W->cols; i++)
        s += fabs((double)row[i] * x[i]);
    return s;
}

/* auto: AVX2, and the int8 mode with AVX512-VNNI where the CPU has it */
static const char *variants[] = {"ref", "avx2", "auto"};
static const char *mm_mode; /* kn_init_mode's matmul mode for the helpers: NULL = exact */

static int variant_ok(const char *v)
{
    kiln_err err;
    return kn_init_mode(v, mm_mode, &err) == KILN_OK;
}

/* Variant v against ref on n tokens; returns 0 on mismatch (prints it). */
static int check_vs_ref(const test_mat *t, const char *v, int64_t n, kn_pool *pool)
{
    kiln_err err;
    const kn_mat *W = &t->m;
    float *x = rnd_vec(n * W->cols);
    float *y = malloc((size_t)(n * W->rows) * 4), *yr = malloc((size_t)(n * W->rows) * 4);
    float *row = malloc((size_t)W->cols * 4);
    kn_init_mode("ref", mm_mode, &err);
    kn_matmul(NULL, W, x, n, yr);
    kn_init_mode(v, mm_mode, &err);
    kn_matmul(pool, W, x, n, y);
    int ok = 1;
    for (int64_t tt = 0; tt < n && ok; tt++)
        for (int64_t r = 0; r < W->rows && ok; r++) {
            double tol = 2e-6 * abs_dot(W, r, x + tt * W->cols, row) + 1e-30;
            double d = fabs((double)y[tt * W->rows + r] - yr[tt * W->rows + r]);
            if (!(d <= tol)) {
                fprintf(stderr,
                        "  %s fmt=%d bits=%d g=%d rows=%" PRId64 " cols=%" PRId64 " t=%" PRId64
                        " r=%" PRId64 ": %.9g vs ref %.9g (tol %g)\n",
                        v, W->fmt, W->bits, W->group, W->rows, W->cols, tt, r, y[tt * W->rows + r],
                        yr[tt * W->rows + r], tol);
                ok = 0;
            }
        }
    free(x);
    free(y);
    free(yr);
    free(row);
    return ok;
}

/* y rows for n = 1, 5, 13 and 1..3 threads are bitwise equal to n = 1 alone. */
static int check_invariance(const test_mat *t, const char *v, kn_pool **pools)
{
    kiln_err err;
    kn_init_mode(v, mm_mode, &err);
    const kn_mat *W = &t->m;
    int64_t nmax = 13;
    float *x = rnd_vec(nmax * W->cols);
    float *y1 = malloc((size_t)(nmax * W->rows) * 4), *y = malloc((size_t)(nmax * W->rows) * 4);
    for (int64_t tt = 0; tt < nmax; tt++)
        kn_matmul(NULL, W, x + tt * W->cols, 1, y1 + tt * W->rows);
    int ok = 1;
    static const int64_t ns[] = {1, 5, 13};
    for (int pi = 0; pi < 3 && ok; pi++)
        for (int ni = 0; ni < 3 && ok; ni++) {
            int64_t n = ns[ni];
            kn_matmul(pools[pi], W, x, n, y);
            if (memcmp(y, y1, (size_t)(n * W->rows) * 4) != 0) {
                fprintf(stderr, "  %s fmt=%d bits=%d: n=%" PRId64 " threads=%d differs from n=1\n",
                        v, W->fmt, W->bits, n, kn_pool_threads(pools[pi]));
                ok = 0;
            }
        }
    /* a token at offset 7 of a 13-batch equals the same token at offset 0 of a 5-batch */
    free(x);
    free(y1);
    free(y);
    return ok;
}

static kn_pool *pools[3];

/* ---------------------------------------------------------------- cases */

static void test_float_formats_match_ref_and_are_batch_invariant(void)
{
    static const kn_fmt fmts[] = {KN_F32, KN_F16, KN_BF16};
    static const int64_t shapes[][2] = {{1, 1},    {1, 7},    {3, 8},    {5, 33},
                                        {17, 100}, {37, 257}, {64, 512}, {70, 1000}};
    for (size_t v = 0; v < 2; v++) {
        if (!variant_ok(variants[v])) continue;
        for (size_t f = 0; f < 3; f++)
            for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
                test_mat t = make_mat(fmts[f], shapes[s][0], shapes[s][1], KN_F32, 0, 0);
                int ok = check_vs_ref(&t, variants[v], 1, pools[1]) &&
                         check_vs_ref(&t, variants[v], 6, pools[2]) &&
                         check_invariance(&t, variants[v], pools);
                free_mat(&t);
                if (!ok)
                    TEST_FAIL_("variant %s fmt %d shape %" PRId64 "x%" PRId64, variants[v], fmts[f],
                               shapes[s][0], shapes[s][1]);
            }
    }
}

static void test_qaffine_all_bits_groups_scales_match_ref_and_are_batch_invariant(void)
{
    static const int bits[] = {2, 3, 4, 5, 6, 8};
    static const int groups[] = {32, 64, 128};
    static const kn_fmt sf[] = {KN_F32, KN_F16, KN_BF16};
    static const int64_t shapes[][2] = {{1, 128}, {7, 256}, {21, 384}, {40, 1024}};
    for (size_t v = 0; v < 2; v++) {
        if (!variant_ok(variants[v])) continue;
        for (size_t b = 0; b < 6; b++)
            for (size_t g = 0; g < 3; g++)
                for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
                    test_mat t = make_mat(KN_QAFFINE, shapes[s][0], shapes[s][1],
                                          sf[(b + g + s) % 3], bits[b], groups[g]);
                    int ok = check_vs_ref(&t, variants[v], 1, pools[1]) &&
                             check_vs_ref(&t, variants[v], 7, pools[2]) &&
                             check_invariance(&t, variants[v], pools);
                    free_mat(&t);
                    if (!ok)
                        TEST_FAIL_("variant %s bits %d group %d", variants[v], bits[b], groups[g]);
                }
    }
}

static void test_mat_row_is_the_exact_dequantization(void)
{
    kiln_err err;
    static const int bits[] = {2, 3, 4, 5, 6, 8};
    for (size_t v = 0; v < 2; v++) {
        if (!variant_ok(variants[v])) continue;
        for (size_t b = 0; b < 6; b++) {
            test_mat t = make_mat(KN_QAFFINE, 3, 256, KN_BF16, bits[b], 64);
            float row[256];
            const uint32_t *w = t.w;
            int64_t wpr = 256 * bits[b] / 32;
            kn_init(variants[v], &err);
            for (int64_t r = 0; r < 3; r++) {
                kn_mat_row(&t.m, r, row);
                for (int64_t i = 0; i < 256; i++) {
                    /* slow bit-by-bit extraction, independent of the kernels */
                    uint32_t q = 0;
                    for (int j = 0; j < bits[b]; j++) {
                        int64_t p = i * bits[b] + j;
                        q |= ((w[r * wpr + p / 32] >> (p % 32)) & 1u) << j;
                    }
                    float s = kiln_bf16_to_f32(((uint16_t *)t.s)[r * 4 + i / 64]);
                    float bb = kiln_bf16_to_f32(((uint16_t *)t.b)[r * 4 + i / 64]);
                    volatile float sq = s * (float)q;
                    float want = sq + bb;
                    if (memcmp(&want, &row[i], 4) != 0) {
                        free_mat(&t);
                        TEST_FAIL_("bits %d r %" PRId64 " i %" PRId64 ": %.9g vs %.9g", bits[b], r,
                                   i, row[i], want);
                    }
                }
            }
            free_mat(&t);
        }
    }
}

static void test_mat_bytes_counts_weights_scales_biases(void)
{
    kn_mat m = {
        .fmt = KN_QAFFINE, .rows = 10, .cols = 256, .sfmt = KN_BF16, .bits = 4, .group = 64};
    ASSERT_EQ_U64(kn_mat_bytes(&m), 10 * 128 + 2 * 10 * 4 * 2);
    kn_mat f = {.fmt = KN_BF16, .rows = 3, .cols = 5};
    ASSERT_EQ_U64(kn_mat_bytes(&f), 30);
}

static void test_large_row_count_splits_over_threads(void)
{
    /* rows not a multiple of any tile, big enough for both threads */
    for (size_t v = 0; v < 2; v++) {
        if (!variant_ok(variants[v])) continue;
        test_mat t = make_mat(KN_QAFFINE, 203, 512, KN_F16, 4, 64);
        int ok =
            check_vs_ref(&t, variants[v], 3, pools[1]) && check_invariance(&t, variants[v], pools);
        free_mat(&t);
        ASSERT_TRUE(ok);
        test_mat u = make_mat(KN_BF16, 203, 515, KN_F32, 0, 0);
        ok =
            check_vs_ref(&u, variants[v], 20, pools[1]) && check_invariance(&u, variants[v], pools);
        free_mat(&u);
        ASSERT_TRUE(ok);
    }
}

/* Many tokens (several token blocks), wide rows (several column slabs, fewer
 * tokens per block when groups are many): each row still equals n = 1. */
static int prefill_equals_decode(const test_mat *t, const char *v, int64_t n)
{
    kiln_err err;
    kn_init_mode(v, mm_mode, &err);
    const kn_mat *W = &t->m;
    float *x = rnd_vec(n * W->cols);
    float *y = malloc((size_t)(n * W->rows) * 4), *y1 = malloc((size_t)W->rows * 4);
    kn_matmul(pools[1], W, x, n, y);
    int ok = 1;
    for (int64_t tt = 0; tt < n && ok; tt++) {
        kn_matmul(NULL, W, x + tt * W->cols, 1, y1);
        if (memcmp(y1, y + tt * W->rows, (size_t)W->rows * 4) != 0) {
            fprintf(stderr, "  %s fmt=%d bits=%d n=%" PRId64 ": token %" PRId64 " differs\n", v,
                    W->fmt, W->bits, n, tt);
            ok = 0;
        }
    }
    free(x);
    free(y);
    free(y1);
    return ok;
}

static void test_prefill_blocks_and_slabs_match_decode_bitwise(void)
{
    for (size_t v = 0; v < 2; v++) {
        if (!variant_ok(variants[v])) continue;
        test_mat a = make_mat(KN_QAFFINE, 37, 640, KN_BF16, 4, 64);
        test_mat b = make_mat(KN_QAFFINE, 5, 8192, KN_F16, 3, 32);
        test_mat c = make_mat(KN_BF16, 21, 777, KN_F32, 0, 0);
        test_mat d = make_mat(KN_QAFFINE, 19, 512, KN_F32, 8, 128);
        /* more tokens than one prefill token block (64), several row slabs,
         * an odd width, and one wider than the whole-row slab (8192) */
        test_mat e = make_mat(KN_BF16, 41, 523, KN_F32, 0, 0);
        test_mat f = make_mat(KN_QAFFINE, 23, 256, KN_F16, 6, 32);
        test_mat g = make_mat(KN_F16, 6, 8200, KN_F32, 0, 0);
        /* batched-decode sizes (the few-token paths): 8-bit with 2..4 tokens,
         * floats with up to 16 and a cols % 8 tail */
        test_mat h = make_mat(KN_QAFFINE, 23, 320, KN_BF16, 8, 32);
        test_mat k = make_mat(KN_F32, 13, 100, KN_F32, 0, 0);
        int ok = prefill_equals_decode(&a, variants[v], 50) &&
                 prefill_equals_decode(&b, variants[v], 31) &&
                 prefill_equals_decode(&c, variants[v], 49) &&
                 prefill_equals_decode(&d, variants[v], 26) &&
                 prefill_equals_decode(&e, variants[v], 70) &&
                 prefill_equals_decode(&f, variants[v], 133) &&
                 prefill_equals_decode(&g, variants[v], 7) &&
                 prefill_equals_decode(&h, variants[v], 3) &&
                 prefill_equals_decode(&h, variants[v], 4) &&
                 prefill_equals_decode(&k, variants[v], 16) &&
                 prefill_equals_decode(&k, variants[v], 2);
        free_mat(&a);
        free_mat(&b);
        free_mat(&c);
        free_mat(&d);
        free_mat(&e);
        free_mat(&f);
        free_mat(&g);
        free_mat(&h);
        free_mat(&k);
        if (!ok) TEST_FAIL_("variant %s", variants[v]);
    }
}

/* 4/8-bit affine use int16 activations (kn_int.h): even with outliers 1000×
 * the typical |x| in a block, every variant stays within 1e-6 of the exact
 * f64 dot of the dequantized row (relative to Σ|w·x|), for n = 1 and n > 1. */
static void test_int16_activations_track_the_exact_dot(void)
{
    static const int bits[] = {4, 8};
    static const int groups[] = {32, 64, 128};
    for (size_t v = 0; v < 2; v++) {
        if (!variant_ok(variants[v])) continue;
        for (size_t b = 0; b < 2; b++)
            for (size_t g = 0; g < 3; g++) {
                test_mat t = make_mat(KN_QAFFINE, 9, 512, KN_BF16, bits[b], groups[g]);
                const int64_t n = 3, cols = 512, rows = 9;
                float *x = rnd_vec(n * cols), *y = malloc((size_t)(n * rows) * 4),
                      *row = malloc(512 * 4);
                for (int64_t i = 0; i < n * cols; i += 37)
                    x[i] *= 1000.0f; /* outliers */
                for (int64_t i = 5; i < n * cols; i += 97)
                    x[i] *= 1e-6f; /* tiny values */
                kiln_err err;
                kn_init(variants[v], &err);
                kn_matmul(pools[1], &t.m, x, n, y);
                int ok = 1;
                for (int64_t tt = 0; tt < n; tt++)
                    for (int64_t r = 0; r < rows; r++) {
                        kn_mat_row(&t.m, r, row);
                        double want = 0, sa = 0;
                        for (int64_t i = 0; i < cols; i++) {
                            want += (double)row[i] * x[tt * cols + i];
                            sa += fabs((double)row[i] * x[tt * cols + i]);
                        }
                        double d = fabs(y[tt * rows + r] - want);
                        if (!(d <= 1e-6 * sa)) {
                            fprintf(stderr,
                                    "  %s bits=%d g=%d t=%" PRId64 " r=%" PRId64
                                    ": %.9g vs %.9g (rel %.3g)\n",
                                    variants[v], bits[b], groups[g], tt, r, y[tt * rows + r], want,
                                    d / sa);
                            ok = 0;
                        }
                    }
                free(x);
                free(y);
                free(row);
                free_mat(&t);
                if (!ok) TEST_FAIL_("variant %s bits %d group %d", variants[v], bits[b], groups[g]);
            }
    }
}

/* int8 mode (kn_int.h): every variant against ref-int8 (same integers), and
 * bitwise batch invariance over token counts that take the decode driver
 * (1–3), several token groups (1x8 tiles; 2x4 past 4096 columns), several
 * token blocks and the thread
 * split; what kn_i8_ok refuses (8-bit, cols % 64) keeps the exact path. */
static void test_int8_mode_matches_ref_and_is_batch_invariant(void)
{
    static const int bits[] = {4, 8};
    static const int groups[] = {32, 64, 128};
    static const kn_fmt sf[] = {KN_F32, KN_F16, KN_BF16};
    static const int64_t shapes[][2] = {{1, 128}, {7, 256}, {21, 384}, {40, 1024}, {9, 96 * 4},
                                        {7, 8192} /* > 4096: 2x4 tiles + a row */};
    mm_mode = "int8";
    for (size_t v = 0; v < sizeof variants / sizeof *variants; v++) {
        if (!variant_ok(variants[v])) continue;
        for (size_t b = 0; b < 2; b++)
            for (size_t g = 0; g < 3; g++)
                for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
                    test_mat t = make_mat(KN_QAFFINE, shapes[s][0], shapes[s][1],
                                          sf[(b + g + s) % 3], bits[b], groups[g]);
                    int ok = check_vs_ref(&t, variants[v], 1, pools[1]) &&
                             check_vs_ref(&t, variants[v], 7, pools[2]) &&
                             check_invariance(&t, variants[v], pools) &&
                             prefill_equals_decode(&t, variants[v], 2) &&
                             prefill_equals_decode(&t, variants[v], 3) &&
                             prefill_equals_decode(&t, variants[v], 70);
                    free_mat(&t);
                    if (!ok)
                        TEST_FAIL_("int8 variant %s bits %d group %d", variants[v], bits[b],
                                   groups[g]);
                }
        test_mat odd = make_mat(KN_QAFFINE, 13, 96, KN_BF16, 4, 32); /* 96 % 64: exact path */
        int ok = check_vs_ref(&odd, variants[v], 3, pools[1]) &&
                 prefill_equals_decode(&odd, variants[v], 9);
        free_mat(&odd);
        if (!ok) TEST_FAIL_("int8 fallback variant %s", variants[v]);
    }
    mm_mode = NULL;
}

/* The int8 error bound: |x_i − d_h·q_i| ≤ d_h/2 = amax_h/254 over each 32
 * columns h, and y = Σ w_i·x̂_i (the bias term sums the quantized x̂ too), so
 * |y − exact| ≤ Σ_i (amax_h(i)/254)·|w_i| (+ f32 rounding), with
 * outliers and tiny values mixed in a block. The exact mode's bound is 1e-6
 * of Σ|w·x| (test above); this one is two orders looser, as documented. */
static void test_int8_activations_stay_within_their_bound(void)
{
    static const int bits[] = {4};
    static const int groups[] = {32, 64, 128};
    for (size_t v = 0; v < sizeof variants / sizeof *variants; v++) {
        kiln_err err;
        if (kn_init_mode(variants[v], "int8", &err) != KILN_OK) continue;
        ASSERT_STR_EQ(kn_matmul_mode(), "int8");
        for (size_t b = 0; b < 1; b++)
            for (size_t g = 0; g < 3; g++) {
                const int64_t n = 3, cols = 512, rows = 9;
                test_mat t = make_mat(KN_QAFFINE, rows, cols, KN_F32, bits[b], groups[g]);
                float *x = rnd_vec(n * cols), *y = malloc((size_t)(n * rows) * 4),
                      *row = malloc(512 * 4);
                for (int64_t i = 0; i < n * cols; i += 37)
                    x[i] *= 1000.0f;
                for (int64_t i = 5; i < n * cols; i += 97)
                    x[i] *= 1e-6f;
                kn_matmul(pools[1], &t.m, x, n, y);
                int ok = 1;
                double worst = 0;
                for (int64_t tt = 0; tt < n; tt++)
                    for (int64_t r = 0; r < rows; r++) {
                        const float *xt = x + tt * cols;
                        kn_mat_row(&t.m, r, row);
                        double want = 0, bound = 0, sa = 0;
                        for (int64_t b0 = 0; b0 < cols; b0 += 32) {
                            double amax = 0;
                            for (int64_t i = b0; i < b0 + 32; i++)
                                amax = fmax(amax, fabs(xt[i]));
                            for (int64_t i = b0; i < b0 + 32; i++) {
                                want += (double)row[i] * xt[i];
                                bound += amax / 254.0 * fabs((double)row[i]);
                                sa += fabs((double)row[i] * xt[i]);
                            }
                        }
                        double d = fabs(y[tt * rows + r] - want);
                        worst = fmax(worst, d / sa);
                        if (!(d <= bound + 1e-6 * sa)) {
                            fprintf(stderr,
                                    "  %s bits=%d g=%d t=%" PRId64 " r=%" PRId64
                                    ": err %.3g > bound %.3g\n",
                                    variants[v], bits[b], groups[g], tt, r, d, bound);
                            ok = 0;
                        }
                    }
                /* and it is not the exact path in disguise */
                ASSERT_TRUE(worst > 1e-5);
                free(x);
                free(y);
                free(row);
                free_mat(&t);
                if (!ok) TEST_FAIL_("variant %s bits %d group %d", variants[v], bits[b], groups[g]);
            }
    }
    kiln_err e2;
    kn_init(NULL, &e2);
}

int main(void)
{
    kiln_err err;
    for (int i = 0; i < 3; i++)
        if (kn_pool_create(i + 1, &pools[i], &err) != KILN_OK) return 1;
    fprintf(stderr, "  cpu variants: ref%s\n", variant_ok("avx2") ? " avx2" : "");
    RUN(test_float_formats_match_ref_and_are_batch_invariant);
    RUN(test_qaffine_all_bits_groups_scales_match_ref_and_are_batch_invariant);
    RUN(test_mat_row_is_the_exact_dequantization);
    RUN(test_mat_bytes_counts_weights_scales_biases);
    RUN(test_large_row_count_splits_over_threads);
    RUN(test_prefill_blocks_and_slabs_match_decode_bitwise);
    RUN(test_int16_activations_track_the_exact_dot);
    RUN(test_int8_mode_matches_ref_and_is_batch_invariant);
    RUN(test_int8_activations_stay_within_their_bound);
    for (int i = 0; i < 3; i++)
        kn_pool_destroy(pools[i]);
    return TEST_DONE();
}
