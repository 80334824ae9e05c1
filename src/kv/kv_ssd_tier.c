/*
 * kv_ssd_tier.c — the SSD store as the KV pool's second tier: evicted
 * published blocks are copied into the write queue (spill-on-evict), and a RAM
 * miss reads the block back (verified) into a fresh pool block.
 * Threads: the pool's thread (the engine thread); kv_ssd locks inside.
 */
#include "kv/kv_pool.h"
#include "kv/kv_ssd.h"

static void tier_evict(void *user, uint64_t hash, const void *data, size_t bytes)
{
    kv_ssd_put(user, KV_SSD_BLOCK, hash, data, bytes);
}

static int tier_load(void *user, uint64_t hash, void *dst, size_t bytes)
{
    return kv_ssd_get(user, KV_SSD_BLOCK, hash, dst, bytes, NULL) == KILN_OK ? 0 : -1;
}

static int tier_has(void *user, uint64_t hash)
{
    return kv_ssd_has(user, KV_SSD_BLOCK, hash);
}

void kv_ssd_attach(kv_ssd *s, kv_pool *pool)
{
    if (!s) {
        kv_pool_set_tier(pool, NULL);
        return;
    }
    kv_tier t = {.user = s, .evict = tier_evict, .load = tier_load, .has = tier_has};
    kv_pool_set_tier(pool, &t);
}
