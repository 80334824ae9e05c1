/*
 * test_kn_ops.c — small vector kernels: ref against closed forms, and every
 * variant the CPU has against ref (odd lengths, aliasing where allowed).
 */
#include "kernels/kn_cpu.h"
#include "kernels/kn_ops.h"
#include "test.h"

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static float rndf(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(uint32_t)(rng_state >> 16) / 2147483648.0 - 1.0);
}

static const int64_t lens[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 64, 100, 257, 2048, 2051};
#define N_LENS ((int)(sizeof lens / sizeof *lens))

static int close_rel(const float *a, const float *b, int64_t n, double rel, double abs_tol)
{
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= abs_tol + rel * fabs((double)b[i]))) {
            fprintf(stderr, "  [%" PRId64 "/%" PRId64 "] %.9g vs ref %.9g\n", i, n, a[i], b[i]);
            return 0;
        }
    }
    return 1;
}

static void fill(float *v, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++) v[i] = rndf() * scale;
}

static void set_isa(const char *v)
{
    kiln_err err;
    if (kn_init(v, &err) != KILN_OK) fprintf(stderr, "kn_init(%s): %s\n", v, err.msg);
}

static int have(const char *v)
{
    kiln_err err;
    return kn_init(v, &err) == KILN_OK;
}

static void test_ref_matches_closed_forms(void)
{
    set_isa("ref");
    float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 0}, o[4];
    kn_rmsnorm(o, x, w, 4, 0.0f, 0.0f);
    float inv = 1.0f / sqrtf(7.5f);
    ASSERT_NEAR_F32(o[0], 1 * inv, 1e-6);
    ASSERT_NEAR_F32(o[2], 6 * inv, 1e-6);
    ASSERT_NEAR_F32(o[3], 0, 0);
    kn_rmsnorm(o, x, w, 4, 0.0f, 1.0f); /* Gemma: w + 1 */
    ASSERT_NEAR_F32(o[2], 9 * inv, 1e-6);
    float g[2] = {0.0f, 2.0f}, u[2] = {3.0f, 1.0f};
    kn_silu_mul(o, g, u, 2);
    ASSERT_NEAR_F32(o[0], 0, 0);
    ASSERT_NEAR_F32(o[1], 2.0f / (1.0f + expf(-2.0f)), 1e-6);
    kn_gelu_tanh_mul(o, g, u, 2);
    ASSERT_NEAR_F32(o[1], 1.9545977f, 1e-5);
    float s[3] = {1, 2, 3};
    kn_softmax(s, 3);
    ASSERT_NEAR_F32(s[0] + s[1] + s[2], 1.0f, 1e-6);
    ASSERT_NEAR_F32(s[2], expf(3) / (expf(1) + expf(2) + expf(3)), 1e-6);
    ASSERT_NEAR_F32(kn_dot(x, w, 4), 9.0f, 0);
    float y[4] = {1, 1, 1, 1};
    kn_axpy(y, 2.0f, x, 4);
    ASSERT_NEAR_F32(y[3], 9.0f, 0);
    kn_add(y, x, 4);
    ASSERT_NEAR_F32(y[3], 13.0f, 0);
    float r[4] = {1, 2, 3, 4}, cs[4] = {0, 1, 1, 0}; /* angle 90° for i=0, 0° for i=1 */
    kn_rope_neox(r, 4, cs);
    ASSERT_NEAR_F32(r[0], -3.0f, 0);
    ASSERT_NEAR_F32(r[2], 1.0f, 0);
    ASSERT_NEAR_F32(r[1], 2.0f, 0);
    ASSERT_NEAR_F32(r[3], 4.0f, 0);
}

static void test_every_variant_matches_ref(void)
{
    static const char *vs[] = {"avx2"};
    for (size_t vi = 0; vi < 1; vi++) {
        if (!have(vs[vi])) continue;
        for (int li = 0; li < N_LENS; li++) {
            int64_t n = lens[li];
            float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4), *w = malloc((size_t)n * 4);
            float *o1 = malloc((size_t)n * 4), *o2 = malloc((size_t)n * 4);
            fill(a, n, 4.0f);
            fill(b, n, 2.0f);
            fill(w, n, 1.0f);
            int ok = 1;
            for (int off = 0; off < 2; off++) {
                set_isa("ref");
                kn_rmsnorm(o1, a, off ? NULL : w, n, 1e-5f, (float)off);
                set_isa(vs[vi]);
                kn_rmsnorm(o2, a, off ? NULL : w, n, 1e-5f, (float)off);
                ok &= close_rel(o2, o1, n, 2e-6, 1e-7);
            }
            set_isa("ref");
            kn_silu_mul(o1, a, b, n);
            set_isa(vs[vi]);
            kn_silu_mul(o2, a, b, n);
            ok &= close_rel(o2, o1, n, 4e-6, 1e-7);
            set_isa("ref");
            kn_gelu_tanh_mul(o1, a, b, n);
            set_isa(vs[vi]);
            kn_gelu_tanh_mul(o2, a, b, n);
            ok &= close_rel(o2, o1, n, 4e-6, 1e-6);
            memcpy(o1, a, (size_t)n * 4);
            memcpy(o2, a, (size_t)n * 4);
            for (int64_t i = 0; i < n; i++) o1[i] = o2[i] = a[i] * 10.0f;
            set_isa("ref");
            kn_softmax(o1, n);
            set_isa(vs[vi]);
            kn_softmax(o2, n);
            ok &= close_rel(o2, o1, n, 4e-6, 1e-9);
            set_isa("ref");
            float d1 = kn_dot(a, b, n);
            set_isa(vs[vi]);
            float d2 = kn_dot(a, b, n);
            double sa = 0;
            for (int64_t i = 0; i < n; i++) sa += fabs((double)a[i] * b[i]);
            ok &= fabs((double)d1 - d2) <= 2e-6 * sa;
            memcpy(o1, w, (size_t)n * 4);
            memcpy(o2, w, (size_t)n * 4);
            set_isa("ref");
            kn_axpy(o1, 0.37f, a, n);
            kn_add(o1, b, n);
            set_isa(vs[vi]);
            kn_axpy(o2, 0.37f, a, n);
            kn_add(o2, b, n);
            ok &= close_rel(o2, o1, n, 1e-6, 1e-6);
            if (n % 2 == 0) {
                float *cs = malloc((size_t)n * 4);
                for (int64_t i = 0; i < n / 2; i++) {
                    float ang = 0.1f * (float)i + 3.0f;
                    cs[i] = cosf(ang);
                    cs[n / 2 + i] = sinf(ang);
                }
                memcpy(o1, a, (size_t)n * 4);
                memcpy(o2, a, (size_t)n * 4);
                set_isa("ref");
                kn_rope_neox(o1, n, cs);
                set_isa(vs[vi]);
                kn_rope_neox(o2, n, cs);
                ok &= close_rel(o2, o1, n, 1e-6, 1e-6);
                free(cs);
            }
            free(a);
            free(b);
            free(w);
            free(o1);
            free(o2);
            if (!ok) TEST_FAIL_("variant %s n=%" PRId64, vs[vi], n);
        }
    }
}

static void test_rmsnorm_and_silu_allow_aliasing(void)
{
    static const char *vs[] = {"ref", "avx2"};
    for (size_t vi = 0; vi < 2; vi++) {
        if (!have(vs[vi])) continue;
        float x[37], w[37], o[37], g[37], u[37], h[37];
        fill(x, 37, 1);
        fill(w, 37, 1);
        fill(g, 37, 3);
        fill(u, 37, 1);
        kn_rmsnorm(o, x, w, 37, 1e-6f, 0);
        kn_rmsnorm(x, x, w, 37, 1e-6f, 0);
        ASSERT_TRUE(memcmp(o, x, sizeof o) == 0);
        kn_silu_mul(h, g, u, 37);
        kn_silu_mul(g, g, u, 37);
        ASSERT_TRUE(memcmp(h, g, sizeof h) == 0);
    }
}

static void test_softmax_handles_large_and_equal_inputs(void)
{
    static const char *vs[] = {"ref", "avx2"};
    for (size_t vi = 0; vi < 2; vi++) {
        if (!have(vs[vi])) continue;
        float x[19];
        for (int i = 0; i < 19; i++) x[i] = 1000.0f;
        kn_softmax(x, 19);
        for (int i = 0; i < 19; i++) ASSERT_NEAR_F32(x[i], 1.0f / 19, 1e-7);
        float y[9] = {-1e30f, -100, 0, 88, 89, -INFINITY, 5, 6, 7};
        kn_softmax(y, 9);
        ASSERT_NEAR_F32(y[5], 0, 0);
        ASSERT_TRUE(y[4] > y[3] && y[3] > 0.2f);
        double s = 0;
        for (int i = 0; i < 9; i++) s += y[i];
        ASSERT_NEAR_F32(s, 1.0, 1e-6);
    }
}

static void test_unknown_isa_is_refused(void)
{
    kiln_err err;
    ASSERT_CODE(kn_init("mmx", &err), KILN_E_INVALID);
    ASSERT_OK(kn_init("ref", &err));
    ASSERT_STR_EQ(kn_isa_name(), "ref");
    ASSERT_OK(kn_init(NULL, &err));
    kn_cpu c = kn_cpu_detect();
    if (!(c.avx512f && c.avx512bw && c.avx512vl))
        ASSERT_CODE(kn_init("avx512", &err), KILN_E_UNSUPPORTED);
    ASSERT_OK(kn_init("auto", &err));
    fprintf(stderr, "  isa=%s avx2=%d fma=%d f16c=%d avx512f=%d amx=%d\n", kn_isa_name(), c.avx2,
            c.fma, c.f16c, c.avx512f, c.amx_tile);
}

int main(void)
{
    RUN(test_ref_matches_closed_forms);
    RUN(test_every_variant_matches_ref);
    RUN(test_rmsnorm_and_silu_allow_aliasing);
    RUN(test_softmax_handles_large_and_equal_inputs);
    RUN(test_unknown_isa_is_refused);
    return TEST_DONE();
}
