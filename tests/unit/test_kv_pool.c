/*
 * test_kv_pool.c — block states, refcounts, publishing, LRU eviction, invariants.
 */
#include "kv/kv_pool.h"
#include "test.h"

#include <string.h>

static kv_pool *make(int32_t n)
{
    kv_pool_config c = {
        .n_blocks = n, .block_tokens = 4, .n_layers = 2, .n_kv_heads = 2, .head_dim = 8};
    kv_pool *p = NULL;
    kiln_err err;
    kv_pool_create(&c, &p, &err);
    return p;
}

static void test_alloc_until_full_then_budget_error(void)
{
    kiln_err err;
    kv_pool *p = make(3);
    kv_block_id b[4];
    for (int i = 0; i < 3; i++) ASSERT_OK(kv_pool_alloc(p, &b[i], &err));
    ASSERT_CODE(kv_pool_alloc(p, &b[3], &err), KILN_E_BUDGET);
    ASSERT_EQ_I64(kv_pool_check(p), 0);
    kv_pool_release(p, b[1]);
    ASSERT_OK(kv_pool_alloc(p, &b[3], &err));
    ASSERT_EQ_I64(b[3], b[1]);
    for (int i = 0; i < 3; i++) kv_pool_release(p, b[i == 1 ? 3 : i]);
    ASSERT_EQ_I64(kv_pool_get_stats(p).n_free, 3);
    ASSERT_EQ_I64(kv_pool_check(p), 0);
    kv_pool_destroy(p);
}

static void test_release_to_zero_moves_published_block_to_lru(void)
{
    kiln_err err;
    kv_pool *p = make(2);
    kv_block_id a, b;
    ASSERT_OK(kv_pool_alloc(p, &a, &err));
    ASSERT_EQ_I64(kv_pool_publish(p, a, 42), 1);
    kv_pool_retain(p, a);
    kv_pool_release(p, a);
    ASSERT_EQ_I64(kv_pool_get_stats(p).n_active, 1);
    kv_pool_release(p, a);
    kv_pool_stats s = kv_pool_get_stats(p);
    ASSERT_EQ_I64(s.n_cached, 1);
    ASSERT_EQ_I64(kv_pool_check(p), 0);
    /* a hit revives it with its bytes */
    ((float *)kv_pool_layer_k(p, a, 1))[3] = 7.0f;
    kv_block_id h = kv_pool_lookup(p, 0, 42);
    ASSERT_EQ_I64(h, a);
    ASSERT_NEAR_F32(((float *)kv_pool_layer_k(p, h, 1))[3], 7.0f, 0);
    ASSERT_EQ_I64(kv_pool_lookup(p, 0, 43), -1);
    kv_pool_release(p, h);
    /* allocation takes the free block first, then evicts the cached one */
    ASSERT_OK(kv_pool_alloc(p, &b, &err));
    ASSERT_TRUE(b != a);
    kv_block_id c;
    ASSERT_OK(kv_pool_alloc(p, &c, &err));
    ASSERT_EQ_I64(c, a);
    ASSERT_EQ_I64(kv_pool_lookup(p, 0, 42), -1);
    ASSERT_EQ_I64(kv_pool_get_stats(p).evictions, 1);
    ASSERT_EQ_I64(kv_pool_check(p), 0);
    kv_pool_destroy(p);
}

static void test_publish_same_hash_twice_keeps_first(void)
{
    kiln_err err;
    kv_pool *p = make(4);
    kv_block_id a, b;
    ASSERT_OK(kv_pool_alloc(p, &a, &err));
    ASSERT_OK(kv_pool_alloc(p, &b, &err));
    ASSERT_EQ_I64(kv_pool_publish(p, a, 9), 1);
    ASSERT_EQ_I64(kv_pool_publish(p, b, 9), 0);
    kv_pool_release(p, b); /* unpublished: back to FREE */
    ASSERT_EQ_I64(kv_pool_get_stats(p).n_free, 3);
    ASSERT_EQ_I64(kv_pool_lookup(p, 0, 9), a);
    ASSERT_EQ_I64(kv_pool_refcnt(p, a), 2);
    ASSERT_EQ_I64(kv_pool_check(p), 0);
    kv_pool_destroy(p);
}

static void test_lru_evicts_least_recently_released(void)
{
    kiln_err err;
    kv_pool *p = make(3);
    kv_block_id b[3];
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(kv_pool_alloc(p, &b[i], &err));
        kv_pool_publish(p, b[i], 100 + (uint64_t)i);
    }
    kv_pool_release(p, b[2]);
    kv_pool_release(p, b[0]);
    kv_pool_release(p, b[1]);
    kv_block_id x;
    ASSERT_OK(kv_pool_alloc(p, &x, &err));
    ASSERT_EQ_I64(x, b[2]);
    ASSERT_EQ_I64(kv_pool_lookup(p, 0, 102), -1);
    ASSERT_EQ_I64(kv_pool_lookup(p, 0, 100), b[0]);
    ASSERT_EQ_I64(kv_pool_check(p), 0);
    kv_pool_destroy(p);
}

static void test_hash_chain_depends_on_parent_tokens_and_namespace(void)
{
    int32_t t[4] = {1, 2, 3, 4};
    uint64_t h0 = kv_hash_block(0, 7, t, 4);
    ASSERT_TRUE(h0 != 0);
    ASSERT_TRUE(kv_hash_block(1, 7, t, 4) != h0);
    ASSERT_TRUE(kv_hash_block(0, 8, t, 4) != h0);
    t[3] = 5;
    ASSERT_TRUE(kv_hash_block(0, 7, t, 4) != h0);
}

static void test_cache_cap_frees_least_recent_cached_blocks(void)
{
    kiln_err err;
    kv_pool *p = make(4);
    kv_block_id b[3];
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(kv_pool_alloc(p, &b[i], &err));
        kv_pool_publish(p, b[i], 200 + (uint64_t)i);
    }
    kv_pool_set_cache_cap(p, 1);
    kv_pool_release(p, b[0]);
    kv_pool_release(p, b[1]); /* b[0] goes FREE: over the cap */
    ASSERT_EQ_I64(kv_pool_get_stats(p).n_cached, 1);
    ASSERT_EQ_I64(kv_pool_lookup(p, 0, 200), -1);
    kv_pool_set_cache_cap(p, 0);
    ASSERT_EQ_I64(kv_pool_get_stats(p).n_cached, 0);
    ASSERT_EQ_I64(kv_pool_get_stats(p).n_free, 3);
    ASSERT_EQ_I64(kv_pool_check(p), 0);
    kv_pool_release(p, b[2]);
    ASSERT_EQ_I64(kv_pool_get_stats(p).n_free, 4);
    ASSERT_EQ_I64(kv_pool_check(p), 0);
    kv_pool_destroy(p);
}

static void test_bad_config_is_an_error(void)
{
    kiln_err err;
    kv_pool_config c = {
        .n_blocks = 0, .block_tokens = 4, .n_layers = 1, .n_kv_heads = 1, .head_dim = 1};
    kv_pool *p;
    ASSERT_CODE(kv_pool_create(&c, &p, &err), KILN_E_INVALID);
    ASSERT_TRUE(p == NULL);
}

/* --quantized-kv-start: two block classes of different sizes; the class of a
 * sequence's block follows from its index; each class fills up on its own;
 * raw block bytes and layer views are consistent. */
static void test_two_block_classes(void)
{
    kiln_err err;
    kv_format f;
    ASSERT_OK(kv_format_init(&f, KV_QUANT_4, 0, 6, 2, 8, &err)); /* q4g8, f32 before 6 */
    kv_pool_config c = {.n_blocks = 5,
                        .block_tokens = 4,
                        .n_layers = 2,
                        .n_kv_heads = 2,
                        .head_dim = 8,
                        .fmt = &f,
                        .n_blocks_full = 2};
    kv_pool *p = NULL;
    ASSERT_OK(kv_pool_create(&c, &p, &err));
    size_t full = 2 * 2 * 4 * 2 * 8 * 4, main = 2 * 2 * 4 * 2 * (4 + 8);
    ASSERT_EQ_U64(kv_pool_class_bytes(&c, KV_CLASS_FULL), full);
    ASSERT_EQ_U64(kv_pool_block_bytes(&c), main);
    kv_pool_stats st = kv_pool_get_stats(p);
    ASSERT_EQ_U64(st.bytes, 2 * full + 3 * main);
    ASSERT_EQ_I64(st.n_blocks_full, 2);
    ASSERT_EQ_I64(kv_pool_class_of(p, 0), KV_CLASS_FULL);
    ASSERT_EQ_I64(kv_pool_class_of(p, 1), KV_CLASS_FULL); /* positions 4..7, 4 < 6 */
    ASSERT_EQ_I64(kv_pool_class_of(p, 2), KV_CLASS_MAIN);
    ASSERT_TRUE(kv_pool_can_hold(p, 5));
    ASSERT_TRUE(!kv_pool_can_hold(p, 6)); /* a 4th main block does not exist */
    kv_block_id b[5];
    for (int j = 0; j < 5; j++)
        ASSERT_OK(kv_pool_alloc_at(p, 0, j, &b[j], &err));
    ASSERT_TRUE(b[0] < 2 && b[1] < 2 && b[2] >= 2 && b[3] >= 2 && b[4] >= 2);
    kv_block_id none;
    ASSERT_CODE(kv_pool_alloc_at(p, 0, 0, &none, &err), KILN_E_BUDGET);
    ASSERT_EQ_I64(none, -1);
    ASSERT_EQ_I64(kv_pool_check(p), 0);
    for (int j = 0; j < 5; j++) {
        size_t n;
        const uint8_t *d = kv_pool_block_data(p, b[j], &n);
        ASSERT_EQ_U64(n, j < 2 ? full : main);
        ASSERT_TRUE((uint8_t *)kv_pool_layer_k(p, b[j], 0) == d);
        ASSERT_TRUE((uint8_t *)kv_pool_layer_v(p, b[j], 1) == d + n - n / 4);
        ASSERT_EQ_I64(kv_pool_layer_fmt(p, b[j], 1).dtype, j < 2 ? KN_KV_F32 : KN_KV_Q4);
        ASSERT_TRUE(kv_pool_block_data_mut(p, b[j], NULL) == (void *)d);
    }
    /* a published full-precision block becomes CACHED in its own class and is
     * what the next full-class allocation evicts */
    ASSERT_EQ_I64(kv_pool_publish(p, b[0], 7), 1);
    kv_pool_release(p, b[0]);
    ASSERT_TRUE(kv_pool_can_hold(p, 1));
    ASSERT_TRUE(!kv_pool_can_hold(p, 2)); /* block 1 is still held */
    kv_pool_release(p, b[1]);
    ASSERT_TRUE(!kv_pool_can_hold(p, 3)); /* ... and no main block is free */
    kv_pool_release(p, b[2]);
    ASSERT_TRUE(kv_pool_can_hold(p, 3));
    ASSERT_EQ_I64(kv_pool_check(p), 0);
    kv_block_id x;
    ASSERT_OK(kv_pool_alloc_at(p, 0, 0, &x, &err)); /* the FREE block 1 first */
    ASSERT_EQ_I64(x, b[1]);
    ASSERT_OK(kv_pool_alloc_at(p, 0, 1, &x, &err)); /* then evicts the CACHED one */
    ASSERT_EQ_I64(x, b[0]);
    ASSERT_EQ_I64(kv_pool_lookup(p, 0, 7), -1); /* evicted: lost its hash */
    ASSERT_EQ_I64(kv_pool_check(p), 0);
    kv_pool_destroy(p);
}

/* With a window a new sequence of any length needs only the blocks it holds
 * at once (kv_seq_max_blocks), counted in the classes of its last indices;
 * kv_pool_find / kv_pool_peek see a published block without taking it. */
static void test_window_can_hold_counts_the_window(void)
{
    kiln_err err;
    kv_format f;
    ASSERT_OK(kv_format_init(&f, KV_QUANT_4, 0, 8, 2, 8, &err)); /* f32 before 8 */
    kv_pool_config c = {.n_blocks = 6, .block_tokens = 4, .n_layers = 2, .n_kv_heads = 2,
                        .head_dim = 8, .fmt = &f, .n_blocks_full = 2, .window = 6,
                        .max_chunk = 4};
    kv_pool *p;
    ASSERT_OK(kv_pool_create(&c, &p, &err));
    ASSERT_EQ_I64(kv_seq_max_blocks(6, 4, 4, 1000), 4); /* ceil(9 / 4) + 1 */
    ASSERT_TRUE(kv_pool_can_hold(p, 1000)); /* 4 main blocks: fits the 4 main ones */
    ASSERT_TRUE(kv_pool_can_hold(p, 4));    /* indices 0..3: 2 full + 2 main */
    kv_block_id b;
    ASSERT_OK(kv_pool_alloc_at(p, 0, 10, &b, &err)); /* a main block */
    ASSERT_TRUE(!kv_pool_can_hold(p, 1000));         /* 3 main left */
    ASSERT_TRUE(kv_pool_can_hold(p, 5));             /* indices 1..4: 1 full + 3 main */
    ASSERT_EQ_I64(kv_pool_find(p, 0, 99), 0);
    ASSERT_EQ_I64(kv_pool_publish(p, b, 99), 1);
    kv_pool_release(p, b); /* CACHED */
    uint64_t hits = kv_pool_get_stats(p).hits;
    ASSERT_EQ_I64(kv_pool_find(p, 0, 99), 1);
    ASSERT_EQ_I64(kv_pool_peek(p, 0, 99), b);
    ASSERT_EQ_U64(kv_pool_get_stats(p).hits, hits);  /* not counted */
    ASSERT_EQ_I64(kv_pool_get_stats(p).n_cached, 1); /* not taken */
    ASSERT_TRUE(kv_pool_can_hold(p, 1000));
    ASSERT_EQ_I64(kv_pool_check(p), 0);
    c.window = -1;
    kv_pool *bad;
    ASSERT_CODE(kv_pool_create(&c, &bad, &err), KILN_E_INVALID);
    kv_pool_destroy(p);
}

/* KV groups: layers 0 and 2 full (2 heads x 8), layer 1 sliding (1 head x 16,
 * window 6), layer 3 stores nothing (KV-shared). Each group's blocks have
 * their own size and offsets; the same chain hash names one block per group;
 * one group running out never takes another's blocks; can_hold counts each
 * group's cap; stats add up per group. */
static void test_groups(void)
{
    kiln_err err;
    kv_layout l;
    memset(&l, 0, sizeof l);
    l.n_layers = 4;
    l.n_groups = 2;
    l.window[1] = 6;
    int8_t grp[4] = {0, 1, 0, -1};
    int32_t heads[4] = {2, 1, 2, 2}, hd[4] = {8, 16, 8, 8};
    for (int i = 0; i < 4; i++) {
        l.group[i] = grp[i];
        l.n_kv_heads[i] = heads[i];
        l.head_dim[i] = hd[i];
    }
    kv_pool_config c = {.n_blocks = 6, .block_tokens = 4, .layout = &l, .max_chunk = 4};
    c.group_blocks[1] = 3;
    ASSERT_EQ_U64(kv_pool_group_class_bytes(&c, 0, KV_CLASS_MAIN), 4 * 2 * (2 * 8 + 2 * 8) * 4);
    ASSERT_EQ_U64(kv_pool_group_class_bytes(&c, 1, KV_CLASS_MAIN), 4 * 2 * 16 * 4);
    ASSERT_EQ_U64(kv_pool_block_bytes(&c), 4 * 2 * (2 * 8 + 2 * 8 + 16) * 4);
    kv_pool *p = NULL;
    ASSERT_OK(kv_pool_create(&c, &p, &err));
    ASSERT_EQ_I64(kv_pool_n_groups(p), 2);
    ASSERT_EQ_I64(kv_pool_layer_group(p, 1), 1);
    ASSERT_EQ_I64(kv_pool_layer_group(p, 3), -1);
    kv_pool_stats st = kv_pool_get_stats(p);
    ASSERT_EQ_I64(st.n_blocks, 9);
    ASSERT_EQ_I64(st.group[0].n_blocks, 6);
    ASSERT_EQ_I64(st.group[1].n_blocks, 3);
    ASSERT_EQ_U64(st.bytes, 6 * 1024 + 3 * 512);
    /* a block of each group at index 0, K/V regions inside the block, disjoint */
    kv_block_id a, b;
    ASSERT_OK(kv_pool_alloc_at(p, 0, 0, &a, &err));
    ASSERT_OK(kv_pool_alloc_at(p, 1, 0, &b, &err));
    ASSERT_EQ_I64(kv_pool_group_of(p, a), 0);
    ASSERT_EQ_I64(kv_pool_group_of(p, b), 1);
    size_t na, nb;
    uint8_t *da = kv_pool_block_data_mut(p, a, &na), *db = kv_pool_block_data_mut(p, b, &nb);
    ASSERT_EQ_U64(na, 1024);
    ASSERT_EQ_U64(nb, 512);
    ASSERT_TRUE((uint8_t *)kv_pool_layer_k(p, a, 0) == da);
    ASSERT_TRUE((uint8_t *)kv_pool_layer_v(p, a, 0) == da + 4 * 2 * 8 * 4);
    ASSERT_TRUE((uint8_t *)kv_pool_layer_k(p, a, 2) == da + 2 * 4 * 2 * 8 * 4);
    ASSERT_TRUE((uint8_t *)kv_pool_layer_v(p, b, 1) == db + 4 * 16 * 4);
    ASSERT_TRUE(db >= da + na || da >= db + nb);
    /* one chain hash, one block per group */
    ASSERT_EQ_I64(kv_pool_publish(p, a, 77), 1);
    ASSERT_EQ_I64(kv_pool_publish(p, b, 77), 1);
    ASSERT_TRUE(kv_pool_key(0, 77) == 77 && kv_pool_key(1, 77) != 77);
    ASSERT_EQ_I64(kv_pool_peek(p, 0, 77), a);
    ASSERT_EQ_I64(kv_pool_peek(p, 1, 77), b);
    kv_pool_release(p, a);
    kv_pool_release(p, b);
    ASSERT_EQ_I64(kv_pool_lookup(p, 1, 77), b);
    ASSERT_EQ_I64(kv_pool_lookup(p, 0, 77), a);
    /* group 1 has 3 blocks: a fourth fails though group 0 has room */
    kv_block_id x[3];
    ASSERT_OK(kv_pool_alloc_at(p, 1, 1, &x[0], &err));
    ASSERT_OK(kv_pool_alloc_at(p, 1, 2, &x[1], &err));
    ASSERT_CODE(kv_pool_alloc_at(p, 1, 3, &x[2], &err), KILN_E_BUDGET);
    ASSERT_EQ_I64(kv_pool_get_stats(p).group[0].n_free, 5);
    /* a new sequence of 5 blocks: group 0 needs 5 (5 free), group 1 its window's
     * kv_seq_max_blocks(6, 4, 4, 20) = 4 (0 free): no */
    ASSERT_EQ_I64(kv_pool_can_hold(p, 5), 0);
    kv_pool_release(p, b);
    kv_pool_release(p, x[0]);
    kv_pool_release(p, x[1]);
    ASSERT_EQ_I64(kv_pool_can_hold(p, 5), 0); /* group 1: 3 < 4 */
    ASSERT_EQ_I64(kv_pool_can_hold(p, 2), 1);
    kv_pool_release(p, a);
    ASSERT_EQ_I64(kv_pool_check(p), 0);
    kv_pool_destroy(p);
    /* a layout with an empty group, or an out-of-range group, is refused */
    l.group[1] = 0;
    ASSERT_CODE(kv_pool_create(&c, &p, &err), KILN_E_INVALID);
}

int main(void)
{
    RUN(test_two_block_classes);
    RUN(test_alloc_until_full_then_budget_error);
    RUN(test_release_to_zero_moves_published_block_to_lru);
    RUN(test_publish_same_hash_twice_keeps_first);
    RUN(test_lru_evicts_least_recently_released);
    RUN(test_hash_chain_depends_on_parent_tokens_and_namespace);
    RUN(test_cache_cap_frees_least_recent_cached_blocks);
    RUN(test_bad_config_is_an_error);
    RUN(test_window_can_hold_counts_the_window);
    RUN(test_groups);
    return TEST_DONE();
}
