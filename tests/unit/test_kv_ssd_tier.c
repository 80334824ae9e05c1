/*
 * test_kv_ssd_tier.c — the SSD store as the pool's second tier: a CACHED block
 * evicted from RAM is spilled, a RAM miss loads it back (same bytes, published,
 * retained), invariants hold throughout, a miss allocates nothing.
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
    kv_pool_release(p, a);                           /* CACHED */
    ASSERT_EQ_I64(kv_pool_lookup_tier(p, 0x77, 0), -1); /* in RAM: the tier is not asked */
    ASSERT_OK(kv_pool_alloc(p, &b, &err));
    kv_block_id c2;
    ASSERT_OK(kv_pool_alloc(p, &c2, &err)); /* reuses a: spilled first */
    ASSERT_EQ_I64(c2, a);
    ASSERT_TRUE(kv_ssd_has(ssd, KV_SSD_BLOCK, 0x77));
    ASSERT_EQ_I64(kv_pool_lookup(p, 0x77), -1);
    memset(kv_pool_block_data_mut(p, c2, NULL), 0, n); /* the RAM copy is gone */
    kv_pool_release(p, c2);
    ASSERT_EQ_U64(kv_ssd_flush(ssd, 5000, NULL), 0);
    kv_block_id got = kv_pool_lookup_tier(p, 0x77, 0);
    ASSERT_TRUE(got >= 0);
    ASSERT_EQ_I64(kv_pool_refcnt(p, got), 1);
    const float *g = kv_pool_block_data(p, got, NULL);
    for (size_t i = 0; i < n / sizeof(float); i++)
        if (g[i] != (float)i * 0.5f) TEST_FAIL_("float %zu differs after the round trip", i);
    ASSERT_EQ_I64(kv_pool_lookup(p, 0x77), got); /* published again */
    kv_pool_release(p, got);
    ASSERT_EQ_I64(kv_pool_check(p), 0);
    /* a miss allocates nothing */
    int32_t avail = kv_pool_available(p);
    ASSERT_EQ_I64(kv_pool_lookup_tier(p, 0x78, 0), -1);
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

int main(void)
{
    RUN(test_evicted_block_round_trips_through_the_tier);
    return TEST_DONE();
}
