/*
 * test_kv_ssd_tier.c — the SSD store as the pool's second tier: a CACHED block
 * evicted from RAM is spilled, a RAM miss loads it back (same bytes, published,
 * retained), invariants hold throughout, a miss allocates nothing; with
 * --quantized-kv-start both block classes round-trip across a restart and land
 * in the class of their index.
 */
#include "kv/kv_pool.h"
#include "kv/kv_ssd.h"
#include "test.h"

static const kv_ssd_ident ID = {.model_fp = 7, .kv_format = 8, .tok_fp = 9, .block_tokens = 4};

static void test_evicted_block_round_trips_through_the_tier(void)
{
    kiln_err err;
    char dir[256], cmd[600];
    snprintf(dir, sizeof dir, "%s/kv_ssd_tier_%d", KILN_BINARY_DIR, (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ASSERT_TRUE(system(cmd) == 0);
    kv_ssd_config sc = kv_ssd_config_default();
    sc.dir = dir;
    sc.id = ID;
    kv_ssd *ssd = NULL;
    ASSERT_OK(kv_ssd_open(&sc, &ssd, &err));
    kv_pool_config c = {
        .n_blocks = 2, .block_tokens = 4, .n_layers = 2, .n_kv_heads = 2, .head_dim = 8};
    kv_pool *p = NULL;
    ASSERT_OK(kv_pool_create(&c, &p, &err));
    kv_ssd_attach(ssd, p);
    kv_block_id a, b;
    ASSERT_OK(kv_pool_alloc(p, &a, &err));
    size_t n;
    float *d = kv_pool_block_data_mut(p, a, &n);
    ASSERT_EQ_U64(n, kv_pool_block_bytes(&c));
    for (size_t i = 0; i < n / sizeof(float); i++)
        d[i] = (float)i * 0.5f;
    ASSERT_EQ_I64(kv_pool_publish(p, a, 0x77), 1);
    kv_pool_release(p, a);                                 /* CACHED */
    ASSERT_EQ_I64(kv_pool_lookup_tier(p, 0, 0x77, 0), -1); /* in RAM: the tier is not asked */
    ASSERT_OK(kv_pool_alloc(p, &b, &err));
    kv_block_id c2;
    ASSERT_OK(kv_pool_alloc(p, &c2, &err)); /* reuses a: spilled first */
    ASSERT_EQ_I64(c2, a);
    ASSERT_TRUE(kv_ssd_has(ssd, KV_SSD_BLOCK, 0x77));
    ASSERT_EQ_I64(kv_pool_lookup(p, 0, 0x77), -1);
    memset(kv_pool_block_data_mut(p, c2, NULL), 0, n); /* the RAM copy is gone */
    kv_pool_release(p, c2);
    ASSERT_EQ_U64(kv_ssd_flush(ssd, 5000, NULL), 0);
    kv_block_id got = kv_pool_lookup_tier(p, 0, 0x77, 0);
    ASSERT_TRUE(got >= 0);
    ASSERT_EQ_I64(kv_pool_refcnt(p, got), 1);
    const float *g = kv_pool_block_data(p, got, NULL);
    for (size_t i = 0; i < n / sizeof(float); i++)
        if (g[i] != (float)i * 0.5f) TEST_FAIL_("float %zu differs after the round trip", i);
    ASSERT_EQ_I64(kv_pool_lookup(p, 0, 0x77), got); /* published again */
    kv_pool_release(p, got);
    ASSERT_EQ_I64(kv_pool_check(p), 0);
    /* a miss allocates nothing */
    int32_t avail = kv_pool_available(p);
    ASSERT_EQ_I64(kv_pool_lookup_tier(p, 0, 0x78, 0), -1);
    ASSERT_EQ_I64(kv_pool_available(p), avail);
    kv_pool_release(p, got);
    ASSERT_EQ_I64(kv_pool_check(p), 0);
    kv_ssd_stats st = kv_ssd_get_stats(ssd);
    ASSERT_EQ_U64(st.hits, 1);
    kv_ssd_attach(NULL, p);
    kv_pool_destroy(p);
    kv_ssd_close(ssd, 1);
    ASSERT_TRUE(system(cmd) == 0);
}

/* --quantized-kv-start: a pool with an f32 class (block indices 0, 1) and a
 * q4 class. A block of each class is spilled, the tier is closed and opened
 * again (a restart) with a fresh pool, and each block loads back into the
 * class its index implies with the same bytes; asking for a block at an index
 * of the other class is a miss that allocates nothing and quarantines nothing. */
static void test_both_block_classes_round_trip_across_a_restart(void)
{
    kiln_err err;
    char dir[256], cmd[600];
    snprintf(dir, sizeof dir, "%s/kv_ssd_tier2_%d", KILN_BINARY_DIR, (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ASSERT_TRUE(system(cmd) == 0);
    kv_format f;
    ASSERT_OK(kv_format_init(&f, KV_QUANT_4, 0, 8, 2, 8, &err)); /* q4g8, f32 before 8 */
    kv_pool_config c = {.n_blocks = 4,
                        .block_tokens = 4,
                        .n_layers = 2,
                        .n_kv_heads = 2,
                        .head_dim = 8,
                        .fmt = &f,
                        .n_blocks_full = 2};
    size_t full = kv_pool_class_bytes(&c, KV_CLASS_FULL), main = kv_pool_block_bytes(&c);
    ASSERT_TRUE(full != main);
    kv_ssd_config sc = kv_ssd_config_default();
    sc.dir = dir;
    sc.id = ID;
    kv_ssd *ssd = NULL;
    ASSERT_OK(kv_ssd_open(&sc, &ssd, &err));
    kv_pool *p = NULL;
    ASSERT_OK(kv_pool_create(&c, &p, &err));
    kv_ssd_attach(ssd, p);
    /* block 0 (f32 class) under 0xA0, block 2 (q4 class) under 0xB2 */
    kv_block_id fb, mb, x[4];
    ASSERT_OK(kv_pool_alloc_at(p, 0, 0, &fb, &err));
    ASSERT_OK(kv_pool_alloc_at(p, 0, 2, &mb, &err));
    ASSERT_TRUE(fb < 2 && mb >= 2);
    size_t n;
    uint8_t *d = kv_pool_block_data_mut(p, fb, &n);
    ASSERT_EQ_U64(n, full);
    for (size_t i = 0; i < n; i++)
        d[i] = (uint8_t)(i * 3 + 1);
    d = kv_pool_block_data_mut(p, mb, &n);
    ASSERT_EQ_U64(n, main);
    for (size_t i = 0; i < n; i++)
        d[i] = (uint8_t)(i * 5 + 2);
    ASSERT_EQ_I64(kv_pool_publish(p, fb, 0xA0), 1);
    ASSERT_EQ_I64(kv_pool_publish(p, mb, 0xB2), 1);
    kv_pool_release(p, fb);
    kv_pool_release(p, mb);
    /* fill both classes: each CACHED block is evicted, and spilled, by its own class */
    for (int j = 0; j < 4; j++)
        ASSERT_OK(kv_pool_alloc_at(p, 0, j, &x[j], &err));
    ASSERT_TRUE(kv_ssd_has(ssd, KV_SSD_BLOCK, 0xA0) && kv_ssd_has(ssd, KV_SSD_BLOCK, 0xB2));
    for (int j = 0; j < 4; j++) {
        memset(kv_pool_block_data_mut(p, x[j], NULL), 0, j < 2 ? full : main);
        kv_pool_release(p, x[j]);
    }
    ASSERT_EQ_I64(kv_pool_check(p), 0);
    ASSERT_EQ_U64(kv_ssd_flush(ssd, 5000, NULL), 0);
    kv_ssd_attach(NULL, p);
    kv_pool_destroy(p);
    kv_ssd_close(ssd, 1);

    /* restart: a new tier on the same directory, a new pool */
    ASSERT_OK(kv_ssd_open(&sc, &ssd, &err));
    ASSERT_EQ_U64(kv_ssd_get_stats(ssd).entries, 2);
    ASSERT_OK(kv_pool_create(&c, &p, &err));
    kv_ssd_attach(ssd, p);
    int32_t avail = kv_pool_available(p);
    ASSERT_EQ_I64(kv_pool_lookup_tier(p, 0, 0xA0, 2), -1); /* f32 bytes at a q4 index: no */
    ASSERT_EQ_I64(kv_pool_lookup_tier(p, 0, 0xB2, 1), -1); /* q4 bytes at an f32 index: no */
    ASSERT_EQ_I64(kv_pool_available(p), avail);
    ASSERT_EQ_U64(kv_ssd_get_stats(ssd).quarantined, 0); /* a size mismatch is not corruption */
    ASSERT_EQ_I64(kv_pool_check(p), 0);
    kv_block_id gf = kv_pool_lookup_tier(p, 0, 0xA0, 0);
    kv_block_id gm = kv_pool_lookup_tier(p, 0, 0xB2, 2);
    ASSERT_TRUE(gf >= 0 && gf < 2); /* the f32 class */
    ASSERT_TRUE(gm >= 2);           /* the q4 class */
    ASSERT_EQ_I64(kv_pool_layer_fmt(p, gf, 1).dtype, KN_KV_F32);
    ASSERT_EQ_I64(kv_pool_layer_fmt(p, gm, 1).dtype, KN_KV_Q4);
    const uint8_t *g = kv_pool_block_data(p, gf, &n);
    ASSERT_EQ_U64(n, full);
    for (size_t i = 0; i < n; i++)
        if (g[i] != (uint8_t)(i * 3 + 1)) TEST_FAIL_("f32 block: byte %zu differs", i);
    g = kv_pool_block_data(p, gm, &n);
    ASSERT_EQ_U64(n, main);
    for (size_t i = 0; i < n; i++)
        if (g[i] != (uint8_t)(i * 5 + 2)) TEST_FAIL_("q4 block: byte %zu differs", i);
    ASSERT_EQ_I64(kv_pool_lookup(p, 0, 0xA0), gf); /* published again, in RAM */
    ASSERT_EQ_I64(kv_pool_lookup(p, 0, 0xB2), gm);
    for (int k = 0; k < 2; k++) {
        kv_pool_release(p, gf);
        kv_pool_release(p, gm);
    }
    ASSERT_EQ_I64(kv_pool_check(p), 0);
    ASSERT_EQ_U64(kv_ssd_get_stats(ssd).hits, 2);
    kv_ssd_attach(NULL, p);
    kv_pool_destroy(p);
    kv_ssd_close(ssd, 1);
    ASSERT_TRUE(system(cmd) == 0);
}

int main(void)
{
    RUN(test_evicted_block_round_trips_through_the_tier);
    RUN(test_both_block_classes_round_trip_across_a_restart);
    return TEST_DONE();
}
