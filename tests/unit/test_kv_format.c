/*
 * test_kv_format.c — the K/V record codec (kernels/kn_kvq.h) and the per-layer
 * format (kv/kv_format.h): round-trip error bounds per format, determinism,
 * AVX2 decode == scalar decode bit for bit, byte sizes, group clamping and
 * errors, kv_config.json parsing (good and bad input), describe and hash.
 */
#include "kernels/kn_cpu.h"
#include "kernels/kn_kvq.h"
#include "kv/kv_format.h"
#include "test.h"

#include <xxhash.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float rndf(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(uint32_t)(rng >> 16) / 2147483648.0 - 1.0);
}

static void fill(float *x, int32_t n, float amp)
{
    for (int32_t i = 0; i < n; i++)
        x[i] = rndf() * amp;
    x[3] = 9.5f * amp; /* an outlier: the group range must cover it */
}

static void test_rec_bytes(void)
{
    ASSERT_EQ_U64(kn_kv_rec_bytes((kn_kv_fmt){KN_KV_F32, 0, 0}, 64), 256);
    ASSERT_EQ_U64(kn_kv_rec_bytes((kn_kv_fmt){KN_KV_F16, 0, 0}, 64), 128);
    ASSERT_EQ_U64(kn_kv_rec_bytes((kn_kv_fmt){KN_KV_BF16, 0, 0}, 64), 128);
    ASSERT_EQ_U64(kn_kv_rec_bytes((kn_kv_fmt){KN_KV_Q8, 64, 0}, 64), 64 + 8);
    ASSERT_EQ_U64(kn_kv_rec_bytes((kn_kv_fmt){KN_KV_Q4, 64, 0}, 64), 32 + 8);
    ASSERT_EQ_U64(kn_kv_rec_bytes((kn_kv_fmt){KN_KV_Q4, 32, 0}, 128), 64 + 4 * 8);
}

/* Squared error of min/max affine coding of one group (the encoder's starting
 * point, which its least-squares refit may only improve on). */
static double minmax_sse(const float *x, int32_t g, int levels)
{
    float mn = x[0], mx = x[0];
    for (int32_t j = 0; j < g; j++) {
        mn = x[j] < mn ? x[j] : mn;
        mx = x[j] > mx ? x[j] : mx;
    }
    float s = (mx - mn) / (float)levels;
    double se = 0;
    for (int32_t j = 0; j < g; j++) {
        float c = s > 0 ? (float)lrintf((x[j] - mn) / s) : 0;
        double e = (double)(c * s + mn) - x[j];
        se += e * e;
    }
    return se;
}

/* Error bounds: f16 half an ulp (2^-11 relative, normal range), bf16 2^-8
 * relative; affine: each value within one step of the group's min/max scale
 * and the group's squared error at most min/max coding's. */
static void round_trip(kn_kv_fmt f, int32_t n, float amp)
{
    float x[256], y[256];
    uint8_t a[1200], b[1200];
    fill(x, n, amp);
    kn_kv_store(f, x, n, a);
    kn_kv_store(f, x, n, b);
    ASSERT_TRUE(memcmp(a, b, kn_kv_rec_bytes(f, n)) == 0); /* deterministic */
    kn_kv_load(f, a, n, y);
    for (int32_t i = 0; i < n; i++) {
        double e = fabs((double)y[i] - x[i]), bound;
        switch (f.dtype) {
        case KN_KV_F32:
            bound = 0;
            break;
        case KN_KV_F16:
            bound = fabs(x[i]) * 0x1p-11 + 0x1p-25;
            break;
        case KN_KV_BF16:
            bound = fabs(x[i]) * 0x1p-8;
            break;
        default: {
            int32_t g = i / f.group;
            float mn = x[g * f.group], mx = mn;
            for (int32_t j = g * f.group; j < (g + 1) * f.group; j++) {
                mn = x[j] < mn ? x[j] : mn;
                mx = x[j] > mx ? x[j] : mx;
            }
            int levels = f.dtype == KN_KV_Q8 ? 255 : 15;
            double step = ((double)mx - mn) / levels;
            bound = step + 1e-6 * (fabs(mx) + fabs(mn));
            if (i % f.group == 0) {
                double se = 0;
                for (int32_t j = i; j < i + f.group; j++)
                    se += ((double)y[j] - x[j]) * ((double)y[j] - x[j]);
                if (!(se <= minmax_sse(x + i, f.group, levels) * (1 + 1e-6)))
                    TEST_FAIL_("%s g%d: group %d squared error %.3g above min/max coding's",
                               kn_kv_dtype_name(f.dtype), (int)f.group, (int)g, se);
            }
        }
        }
        if (!(e <= bound))
            TEST_FAIL_("%s g%d: x[%d]=%.9g -> %.9g (error %.3g > %.3g)", kn_kv_dtype_name(f.dtype),
                       (int)f.group, (int)i, x[i], y[i], e, bound);
    }
}

static void test_round_trip_bounds(void)
{
    for (int r = 0; r < 20; r++) {
        float amp = r % 2 ? 0.01f : 30.0f;
        round_trip((kn_kv_fmt){KN_KV_F32, 0, 0}, 64, amp);
        round_trip((kn_kv_fmt){KN_KV_F16, 0, 0}, 64, amp);
        round_trip((kn_kv_fmt){KN_KV_BF16, 0, 0}, 64, amp);
        round_trip((kn_kv_fmt){KN_KV_Q8, 64, 0}, 64, amp);
        round_trip((kn_kv_fmt){KN_KV_Q8, 32, 0}, 128, amp);
        round_trip((kn_kv_fmt){KN_KV_Q4, 64, 0}, 64, amp);
        round_trip((kn_kv_fmt){KN_KV_Q4, 8, 0}, 8, amp);
        round_trip((kn_kv_fmt){KN_KV_Q8, 6, 0}, 12, amp); /* group not a multiple of 8 */
        if (test_case_failed_) return;
    }
}

static void test_constant_group_is_exact(void)
{
    float x[64], y[64];
    uint8_t a[128];
    for (int i = 0; i < 64; i++)
        x[i] = 1.25f;
    kn_kv_store((kn_kv_fmt){KN_KV_Q4, 64, 0}, x, 64, a);
    kn_kv_load((kn_kv_fmt){KN_KV_Q4, 64, 0}, a, 64, y);
    for (int i = 0; i < 64; i++)
        ASSERT_NEAR_F32(y[i], 1.25f, 0);
}

/* The installed (AVX2 when present) decoder gives the scalar floats bit for bit. */
static void test_fast_decode_matches_scalar(void)
{
    kiln_err err;
    ASSERT_OK(kn_init(NULL, &err));
    const kn_kv_fmt fs[] = {{KN_KV_F16, 0, 0}, {KN_KV_BF16, 0, 0}, {KN_KV_Q8, 64, 0},
                            {KN_KV_Q8, 16, 0}, {KN_KV_Q4, 64, 0},  {KN_KV_Q4, 32, 0},
                            {KN_KV_Q4, 8, 0},  {KN_KV_Q8, 6, 0},   {KN_KV_Q8, 64, 128},
                            {KN_KV_Q4, 32, 64}};
    for (size_t k = 0; k < sizeof fs / sizeof fs[0]; k++) {
        int32_t n = fs[k].group == 6 ? 120 : 128;
        float x[128], a[128], b[128];
        uint8_t rec[1024];
        fill(x, n, 3.0f);
        kn_kv_store(fs[k], x, n, rec);
        kn_kv_load(fs[k], rec, n, a);
        kn_kv_load_fast(fs[k], rec, n, b);
        if (memcmp(a, b, sizeof(float) * (size_t)n) != 0)
            TEST_FAIL_("%s g%d: isa %s decodes differently", kn_kv_dtype_name(fs[k].dtype),
                       (int)fs[k].group, kn_isa_name());
    }
}

static void test_format_init_and_errors(void)
{
    kiln_err err;
    kv_format f;
    ASSERT_OK(kv_format_init(&f, KV_QUANT_8, 0, 0, 4, 128, &err));
    ASSERT_EQ_I64(f.layer[3].dtype, KN_KV_Q8);
    ASSERT_EQ_I64(f.layer[3].group, 64);
    ASSERT_EQ_U64(kv_format_bytes_per_token(&f, KV_CLASS_MAIN, 2), 4 * 2 * 2 * (128 + 16));
    ASSERT_OK(kv_format_init(&f, KV_QUANT_4, 64, 0, 2, 8, &err)); /* clamped to head_dim */
    ASSERT_EQ_I64(f.layer[0].group, 8);
    ASSERT_CODE(kv_format_init(&f, KV_QUANT_4, 48, 0, 2, 64, &err), KILN_E_INVALID);
    ASSERT_TRUE(strstr(err.msg, "divide head_dim 64") != NULL);
    ASSERT_CODE(kv_format_init(&f, KV_QUANT_8, 3, 0, 2, 6, &err), KILN_E_INVALID); /* odd */
    ASSERT_CODE(kv_format_init(&f, KV_QUANT_8, 0, -1, 2, 64, &err), KILN_E_INVALID);
    ASSERT_CODE(kv_format_init(&f, KV_QUANT_CONFIG, 0, 0, 2, 64, &err), KILN_E_INVALID);
    ASSERT_CODE(kv_format_init(&f, KV_QUANT_8, 0, 0, KV_FMT_MAX_LAYERS + 1, 64, &err),
                KILN_E_UNSUPPORTED);
    kv_quant_mode m;
    ASSERT_OK(kv_quant_parse("bf16", &m, &err));
    ASSERT_EQ_I64(m, KV_QUANT_BF16);
    ASSERT_OK(kv_quant_parse("off", &m, &err));
    ASSERT_EQ_I64(m, KV_QUANT_OFF);
    ASSERT_CODE(kv_quant_parse("6", &m, &err), KILN_E_INVALID);
}

static void test_split_and_classes(void)
{
    kiln_err err;
    kv_format f;
    ASSERT_OK(kv_format_init(&f, KV_QUANT_OFF, 0, 64, 2, 64, &err));
    ASSERT_EQ_I64(kv_format_split(&f), 0); /* f32 after the start too: one class */
    ASSERT_OK(kv_format_init(&f, KV_QUANT_4, 0, 20, 2, 64, &err));
    ASSERT_EQ_I64(kv_format_split(&f), 1);
    ASSERT_EQ_I64(kv_format_class(&f, 0, 16), KV_CLASS_FULL);
    ASSERT_EQ_I64(kv_format_class(&f, 1, 16), KV_CLASS_FULL); /* starts at 16 < 20 */
    ASSERT_EQ_I64(kv_format_class(&f, 2, 16), KV_CLASS_MAIN);
    ASSERT_EQ_U64(kv_format_bytes_per_token(&f, KV_CLASS_FULL, 1), 2 * 2 * 256);
    ASSERT_EQ_U64(kv_format_bytes_per_token(&f, KV_CLASS_MAIN, 1), 2 * 2 * 40);
}

static kiln_code parse(const char *json, int32_t n_layers, kv_format *f, kiln_err *err)
{
    return kv_format_parse_config(json, strlen(json), "kv_config.json", 0, 0, n_layers, 64, f, err);
}

static void test_config_good(void)
{
    kiln_err err;
    kv_format f;
    ASSERT_OK(
        parse("{\"default\":{\"bits\":8,\"group_size\":64},"
              "\"layers\":{\"0\":{\"bits\":4},\"2\":{\"bits\":8,\"group_size\":32},\"3\":16}}",
              5, &f, &err));
    ASSERT_EQ_I64(f.layer[0].dtype, KN_KV_Q4);
    ASSERT_EQ_I64(f.layer[0].group, 64);
    ASSERT_EQ_I64(f.layer[1].dtype, KN_KV_Q8);
    ASSERT_EQ_I64(f.layer[2].group, 32);
    ASSERT_EQ_I64(f.layer[3].dtype, KN_KV_BF16);
    ASSERT_EQ_I64(f.layer[4].dtype, KN_KV_Q8);
    char d[128];
    kv_format_describe(&f, d, sizeof d);
    ASSERT_STR_EQ(d, "q4g64,q8g64,q8g32,bf16,q8g64");
    /* array form; unlisted layers (no default) stay f32 */
    ASSERT_OK(parse("{\"layers\":[4, null, {\"dtype\":\"f16\"}]}", 4, &f, &err));
    ASSERT_EQ_I64(f.layer[0].dtype, KN_KV_Q4);
    ASSERT_EQ_I64(f.layer[1].dtype, KN_KV_F32);
    ASSERT_EQ_I64(f.layer[2].dtype, KN_KV_F16);
    ASSERT_EQ_I64(f.layer[3].dtype, KN_KV_F32);
    kv_format_describe(&f, d, sizeof d);
    ASSERT_STR_EQ(d, "q4g64,f32,f16,f32");
    ASSERT_OK(parse("{\"bits\":4,\"group_size\":32}", 3, &f, &err)); /* flat */
    kv_format_describe(&f, d, sizeof d);
    ASSERT_STR_EQ(d, "q4g32");
    ASSERT_OK(parse("{}", 3, &f, &err));
    kv_format_describe(&f, d, sizeof d);
    ASSERT_STR_EQ(d, "f32");
}

static void test_config_bad(void)
{
    static const char *const bad[] = {
        "",
        "[1,2]",
        "{\"layers\":{\"7\":{\"bits\":4}}}", /* layer out of range */
        "{\"layers\":{\"-1\":4}}",
        "{\"layers\":{\"01\":4}}",
        "{\"layers\":{\" 1\":4}}",
        "{\"layers\":{\"99999999999\":4}}",
        "{\"layers\":{\"0\":{\"bits\":5}}}",
        "{\"layers\":{\"0\":{\"bits\":4,\"group_size\":48}}}", /* does not divide 64 */
        "{\"layers\":{\"0\":{\"bits\":4,\"group_size\":-2}}}",
        "{\"layers\":{\"0\":{\"bits\":\"4\"}}}",
        "{\"layers\":{\"0\":{\"group_size\":64}}}",
        "{\"layers\":{\"0\":{\"dtype\":\"fp8\"}}}",
        "{\"layers\":{\"0\":4,\"0\":8}}", /* duplicate key */
        "{\"layers\":[4,4,4,4,4]}",       /* more entries than layers */
        "{\"layers\":7}",
        "{\"default\":{\"bits\":3}}",
        "{\"default\":\"8\"}",
        "{\"layers\":{\"0\":9223372036854775807}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kiln_err err = {0};
        kv_format f;
        if (parse(bad[i], 4, &f, &err) != KILN_E_INVALID)
            TEST_FAIL_("accepted bad kv_config.json: %s", bad[i]);
        ASSERT_TRUE(strstr(err.msg, "kv_config.json") != NULL);
    }
}

static void test_hash_and_describe(void)
{
    kiln_err err;
    kv_format a, b;
    ASSERT_OK(kv_format_init(&a, KV_QUANT_OFF, 0, 0, 4, 64, &err));
    ASSERT_OK(kv_format_init(&b, KV_QUANT_OFF, 0, 128, 4, 64, &err));
    ASSERT_EQ_U64(kv_format_hash(&a), kv_format_hash(&b)); /* same bytes, same namespace */
    uint64_t seen[6];
    kv_quant_mode modes[] = {KV_QUANT_OFF, KV_QUANT_F16, KV_QUANT_BF16, KV_QUANT_8, KV_QUANT_4};
    for (int i = 0; i < 5; i++) {
        ASSERT_OK(kv_format_init(&a, modes[i], 0, 0, 4, 64, &err));
        seen[i] = kv_format_hash(&a);
        for (int j = 0; j < i; j++)
            ASSERT_TRUE(seen[i] != seen[j]);
    }
    ASSERT_OK(kv_format_init(&a, KV_QUANT_4, 32, 0, 4, 64, &err));
    seen[5] = kv_format_hash(&a);
    ASSERT_TRUE(seen[5] != seen[4]); /* group size matters */
    ASSERT_OK(kv_format_init(&b, KV_QUANT_4, 32, 16, 4, 64, &err));
    ASSERT_TRUE(kv_format_hash(&b) != seen[5]); /* so does the start */
    char d[64];
    kv_format_describe(&b, d, sizeof d);
    ASSERT_STR_EQ(d, "q4g32@16");
}

static void test_rotation_blocks(void)
{
    ASSERT_EQ_I64(kn_kv_rot_block(8), 8);
    ASSERT_EQ_I64(kn_kv_rot_block(128), 128);
    ASSERT_EQ_I64(kn_kv_rot_block(80), 16);
    ASSERT_EQ_I64(kn_kv_rot_block(96), 32);
    ASSERT_EQ_I64(kn_kv_rot_block(1024), 512);
    ASSERT_EQ_I64(kn_kv_rot_block(7), 0);
    ASSERT_EQ_I64(kn_kv_rot_block(2048), 0); /* longer than the encoder's row buffer */
    ASSERT_EQ_I64(kn_kv_rot_of((kn_kv_fmt){KN_KV_Q8, 64, 64}, 128), 64);
    ASSERT_EQ_I64(kn_kv_rot_of((kn_kv_fmt){KN_KV_Q8, 64, 48}, 96), 0); /* not a power of two */
    ASSERT_EQ_I64(kn_kv_rot_of((kn_kv_fmt){KN_KV_Q8, 8, 16}, 24), 0);  /* does not divide */
    ASSERT_EQ_I64(kn_kv_rot_of((kn_kv_fmt){KN_KV_Q8, 8, 1024}, 1024), 0);
    /* orthonormal: H(e_0) has every entry 1/sqrt(8); H(H(x)) = x to rounding */
    float x[16] = {1}, y[16];
    kn_kv_rotate(8, x, 16);
    for (int i = 0; i < 8; i++)
        ASSERT_NEAR_F32(x[i], 0.35355339f, 1e-7f);
    for (int i = 0; i < 16; i++)
        x[i] = y[i] = rndf() * 5;
    kn_kv_rotate(16, x, 16);
    kn_kv_rotate(16, x, 16);
    for (int i = 0; i < 16; i++)
        ASSERT_NEAR_F32(x[i], y[i], 5e-6f);
    kn_kv_rotate(0, x, 16); /* no-op */
    /* the unrolled/vectorized butterflies give the floats of the plain loop */
    static float big[1024], want[1024];
    for (int32_t b = 2; b <= KN_KV_ROT_MAX; b *= 2) {
        for (int i = 0; i < 1024; i++)
            big[i] = want[i] = rndf() * 7;
        kn_kv_rotate(b, big, 1024);
        float norm = (float)(1.0 / sqrt((double)b));
        for (int32_t o = 0; o < 1024; o += b) {
            for (int32_t h = 1; h < b; h *= 2)
                for (int32_t i = o; i < o + b; i += 2 * h)
                    for (int32_t j = i; j < i + h; j++) {
                        float p = want[j], q = want[j + h];
                        want[j] = p + q;
                        want[j + h] = p - q;
                    }
            for (int32_t i = o; i < o + b; i++)
                want[i] *= norm;
        }
        if (memcmp(big, want, sizeof big) != 0) TEST_FAIL_("block %d differs", (int)b);
    }
}

/* A rotated record decodes to the rotated row; rotating back gives the input
 * within the affine error (norm-preserving: |error| <= sqrt(n) * step / 2
 * over the rotated row's own range). And it is what the rotation is for:
 * rows whose range is set by one outlier channel lose much less. */
static void test_rotated_round_trip_and_outliers(void)
{
    const kn_kv_fmt fs[] = {
        {KN_KV_Q8, 64, 64}, {KN_KV_Q4, 32, 64}, {KN_KV_Q8, 80, 16}, {KN_KV_Q8, 8, 8}};
    for (size_t k = 0; k < sizeof fs / sizeof fs[0]; k++) {
        kn_kv_fmt f = fs[k], plain = {f.dtype, f.group, 0};
        int32_t n = f.group == 80 ? 80 : 64;
        double e_rot = 0, e_plain = 0;
        for (int r = 0; r < 50; r++) {
            float x[80], xr[80], y[80], z[80];
            uint8_t a[256];
            for (int32_t i = 0; i < n; i++)
                x[i] = rndf();
            x[5] = 20.0f; /* the outlier channel */
            x[n - 3] = -12.0f;
            kn_kv_store(f, x, n, a);
            kn_kv_load(f, a, n, y);
            memcpy(xr, x, sizeof x);
            kn_kv_rotate(f.rot, xr, n);
            float mn = xr[0], mx = xr[0];
            for (int32_t i = 0; i < n; i++) {
                mn = xr[i] < mn ? xr[i] : mn;
                mx = xr[i] > mx ? xr[i] : mx;
            }
            kn_kv_rotate(f.rot, y, n);
            kn_kv_store(plain, x, n, a);
            kn_kv_load(plain, a, n, z);
            double se = 0, sp = 0;
            for (int32_t i = 0; i < n; i++) {
                se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
                sp += ((double)z[i] - x[i]) * ((double)z[i] - x[i]);
            }
            double step = ((double)mx - mn) / (f.dtype == KN_KV_Q8 ? 255 : 15);
            if (!(sqrt(se) <= sqrt((double)n) * step / 2 + 1e-4))
                TEST_FAIL_("%s g%d rot %d: error %.3g", kn_kv_dtype_name(f.dtype), (int)f.group,
                           (int)f.rot, sqrt(se));
            e_rot += se;
            e_plain += sp;
        }
        /* 8-value blocks help least (only 8 values to spread over) */
        double want = f.rot >= 16 ? 0.5 : 0.9;
        if (!(e_rot < want * e_plain))
            TEST_FAIL_("%s g%d rot %d: squared error %.3g not below %.2f x unrotated %.3g",
                       kn_kv_dtype_name(f.dtype), (int)f.group, (int)f.rot, e_rot, want, e_plain);
    }
}

/* kv/ rotates every affine format; the namespace of f32/f16/bf16 is what it
 * was before rotation existed ((dtype, group) pairs), rotated q8/q4 move away
 * from it (their old entries decode differently). */
static void test_format_rotation_and_namespace(void)
{
    kiln_err err;
    kv_format f;
    ASSERT_OK(kv_format_init(&f, KV_QUANT_8, 0, 0, 3, 128, &err));
    ASSERT_EQ_I64(f.layer[2].rot, 128);
    ASSERT_EQ_I64(f.full.rot, 0);
    ASSERT_OK(kv_format_init(&f, KV_QUANT_4, 16, 0, 3, 80, &err));
    ASSERT_EQ_I64(f.layer[0].rot, 16);
    ASSERT_OK(parse("{\"default\":{\"bits\":8},\"layers\":{\"1\":16}}", 3, &f, &err));
    ASSERT_EQ_I64(f.layer[0].rot, 64);
    ASSERT_EQ_I64(f.layer[1].rot, 0);
    kv_quant_mode modes[] = {KV_QUANT_OFF, KV_QUANT_F16, KV_QUANT_BF16, KV_QUANT_8};
    for (int i = 0; i < 4; i++) {
        ASSERT_OK(kv_format_init(&f, modes[i], 0, 0, 4, 64, &err));
        int32_t hdr[4] = {0x6b766631, 4, 64, 0}, pairs[8], full[2] = {KN_KV_F32, 0};
        for (int l = 0; l < 4; l++) {
            pairs[2 * l] = f.layer[l].dtype;
            pairs[2 * l + 1] = f.layer[l].group;
        }
        XXH64_hash_t h = XXH3_64bits_withSeed(hdr, sizeof hdr, 0);
        h = XXH3_64bits_withSeed(pairs, sizeof pairs, h);
        h = XXH3_64bits_withSeed(full, sizeof full, h);
        if (modes[i] == KV_QUANT_8)
            ASSERT_TRUE(kv_format_hash(&f) != h);
        else
            ASSERT_EQ_U64(kv_format_hash(&f), h);
    }
}

int main(void)
{
    RUN(test_rec_bytes);
    RUN(test_round_trip_bounds);
    RUN(test_constant_group_is_exact);
    RUN(test_fast_decode_matches_scalar);
    RUN(test_format_init_and_errors);
    RUN(test_split_and_classes);
    RUN(test_config_good);
    RUN(test_config_bad);
    RUN(test_hash_and_describe);
    RUN(test_rotation_blocks);
    RUN(test_rotated_round_trip_and_outliers);
    RUN(test_format_rotation_and_namespace);
    return TEST_DONE();
}
