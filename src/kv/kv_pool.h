/*
 * kv_pool.h — the paged KV cache: one pool of fixed-size blocks, reference
 * counted and content-addressed so that sequences share prefixes with zero copies.
 *
 *   kv_pool_config c = {.n_blocks = 256, .block_tokens = 16, .n_layers = L,
 *                       .n_kv_heads = H, .head_dim = D};
 *   kv_pool *kv; kv_pool_create(&c, &kv, &err);
 *   kv_block_id b; kv_pool_alloc(kv, &b, &err);         // refcnt 1, ACTIVE
 *   float *k = kv_pool_k(kv, b, layer);                 // [block_tokens, H, D]
 *   kv_pool_release(kv, b);                             // -> FREE or CACHED
 *
 * A block holds, for every layer, K then V of block_tokens consecutive
 * positions of one sequence: [n_layers][2][block_tokens][n_kv_heads][head_dim] f32.
 * A full block may be published under a content hash (kv_pool_publish): the
 * hash of (parent block's hash, its token ids, the namespace), see kv_hash_block.
 * Published blocks whose refcount drops to 0 stay CACHED (on an LRU list) until
 * kv_pool_alloc needs their space; kv_pool_lookup revives them.
 */
#ifndef KILN_KV_POOL_H
#define KILN_KV_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "util/kiln_err.h"

typedef int32_t kv_block_id; /* index into the pool; -1 = none */

typedef struct {
    int32_t n_blocks;
    int32_t block_tokens;
    int32_t n_layers, n_kv_heads, head_dim;
} kv_pool_config;

typedef struct {
    int32_t n_blocks, n_free, n_active, n_cached;
    uint64_t hits, misses, evictions;
    size_t bytes; /* the pool's slab */
} kv_pool_stats;

typedef struct kv_pool kv_pool;

/* A second tier below the pool (the SSD cache, kv_ssd_attach). Called on the
 * thread that uses the pool. */
typedef struct {
    void *user;
    /* a CACHED published block is about to be reused or freed: copy its bytes */
    void (*evict)(void *user, uint64_t hash, const void *data, size_t bytes);
    /* fill dst (bytes long) with the block published under hash; 0 on success */
    int (*load)(void *user, uint64_t hash, void *dst, size_t bytes);
} kv_tier;

/* API */
/* *out is new: kv_pool_destroy frees it. */
kiln_code kv_pool_create(const kv_pool_config *cfg, kv_pool **out, kiln_err *err);
void kv_pool_destroy(kv_pool *pool); /* NULL is a no-op */
const kv_pool_config *kv_pool_cfg(const kv_pool *pool);
size_t kv_pool_block_bytes(const kv_pool_config *cfg);
/* A block with refcnt 1 (FREE first, else the least recently used CACHED one,
 * which loses its hash). KILN_E_BUDGET when every block is ACTIVE. */
kiln_code kv_pool_alloc(kv_pool *pool, kv_block_id *out, kiln_err *err);
void kv_pool_retain(kv_pool *pool, kv_block_id b);
/* Drops one reference; at 0 a published block becomes CACHED, else FREE. */
void kv_pool_release(kv_pool *pool, kv_block_id b);
int32_t kv_pool_refcnt(const kv_pool *pool, kv_block_id b);
/* Publishes a full ACTIVE block under `hash`. If another block already holds
 * that hash, nothing changes and 0 is returned; 1 when published. */
int kv_pool_publish(kv_pool *pool, kv_block_id b, uint64_t hash);
/* A block published under `hash`, retained for the caller (CACHED -> ACTIVE);
 * -1 when none. Counts a hit or a miss. */
kv_block_id kv_pool_lookup(kv_pool *pool, uint64_t hash);
float *kv_pool_k(kv_pool *pool, kv_block_id b, int32_t layer); /* [block_tokens, H, D] */
float *kv_pool_v(kv_pool *pool, kv_block_id b, int32_t layer);
kv_pool_stats kv_pool_get_stats(const kv_pool *pool);
/* At most max_cached blocks stay CACHED (unreferenced but published); past it the
 * least recently used go FREE at once (the --prompt-cache byte cap). */
void kv_pool_set_cache_cap(kv_pool *pool, int32_t max_cached);
int32_t kv_pool_available(const kv_pool *pool); /* FREE + CACHED */
/* The raw bytes of block b (all layers; *bytes set to their count): what an
 * SSD tier writes and reads back. The layout is fixed by the KV format, which
 * is part of the namespace hash, so equal hashes mean equal layouts. */
const void *kv_pool_block_data(const kv_pool *pool, kv_block_id b, size_t *bytes);
void *kv_pool_block_data_mut(kv_pool *pool, kv_block_id b, size_t *bytes);
/* SSD tier hooks (kv_pool.c, section "SSD tier hooks"). tier is copied; NULL removes it. */
void kv_pool_set_tier(kv_pool *pool, const kv_tier *tier);
/* After a RAM miss: a new block filled by the tier and published under hash,
 * retained for the caller (ACTIVE); -1 when the tier has none or no block is free. */
kv_block_id kv_pool_lookup_tier(kv_pool *pool, uint64_t hash);
/* Walks published blocks (ACTIVE or CACHED) from *cursor (start at 0); -1 at the end. */
kv_block_id kv_pool_next_published(const kv_pool *pool, int32_t *cursor, uint64_t *hash);
uint64_t kv_pool_publish_gen(const kv_pool *pool); /* changes whenever a block is published */
/* Checks invariants (1)..(4) of kv_pool.c; returns 0 when they hold. Tests. */
int kv_pool_check(const kv_pool *pool);

/* Hash chain over token ids: hash of one block given its parent's hash (0 for
 * the first block) and a namespace (model identity, adapter, KV format). */
uint64_t kv_hash_block(uint64_t parent, uint64_t ns, const int32_t *tokens, int32_t n);

#endif
