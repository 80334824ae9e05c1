/*
 * kv_pool.h — the paged KV cache: one pool of fixed-size blocks, reference
 * counted and content-addressed so that sequences share prefixes with zero copies.
 *
 *   kv_pool_config c = {.n_blocks = 256, .block_tokens = 16, .n_layers = L,
 *                       .n_kv_heads = H, .head_dim = D, .fmt = &fmt};  // fmt NULL: f32
 *   kv_pool *kv; kv_pool_create(&c, &kv, &err);
 *   kv_block_id b; kv_pool_alloc_at(kv, 0, j, &b, &err); // group 0, block j of a sequence
 *   void *k = kv_pool_layer_k(kv, b, layer);            // [block_tokens, H] records
 *   kn_kv_fmt f = kv_pool_layer_fmt(kv, b, layer);      // ... in this format
 *   kv_pool_release(kv, b);                             // -> FREE or CACHED
 *
 * Groups (kv_layout.h): the layers that store K/V are split into groups that
 * keep the same positions (full-attention layers; sliding layers of one
 * window). A block belongs to one group and holds, for block_tokens
 * consecutive positions of one sequence, K then V records of each layer of
 * its group in that layer's geometry (n_kv_heads x head_dim) and kv_format.
 * A sequence has one block table per group (eng_seq). Without a layout the
 * pool is one group of n_layers uniform layers (the Llama-family shape).
 * With --quantized-kv-start each group has two block classes of different
 * byte sizes: a sequence's blocks that start before the start keep the
 * full-precision format; a block's class follows from its index in the
 * sequence (kv_pool_alloc_at), never from load.
 * A full block may be published under a content hash (kv_pool_publish): the
 * hash of (parent block's hash, its token ids, the namespace), see
 * kv_hash_block; the pool keys it by (hash, group) (kv_pool_key), so the
 * blocks of every group at one prefix boundary share the chain.
 * Published blocks whose refcount drops to 0 stay CACHED (on an LRU list per
 * class) until an allocation of that class needs their space; kv_pool_lookup
 * revives them.
 *
 * Sliding window (a group's window W > 0): a sequence gives back that group's
 * blocks that fall out of the window (eng_seq), so it holds at most
 * kv_seq_max_blocks of them however long it runs; admission
 * (kv_pool_can_hold), `kiln fit` and the pool size count that cap.
 */
#ifndef KILN_KV_POOL_H
#define KILN_KV_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kn_kvq.h"
#include "kv/kv_format.h"
#include "kv/kv_layout.h"
#include "util/kiln_err.h"

typedef int32_t kv_block_id; /* index into the pool; -1 = none */

typedef struct {
    int32_t n_blocks; /* group 0's blocks */
    int32_t block_tokens;
    int32_t n_layers, n_kv_heads, head_dim; /* the uniform shape (layout NULL) */
    const kv_format *fmt;    /* NULL = f32 everywhere; copied by kv_pool_create (kv_pool_cfg's
                                points at the pool's copy) */
    int32_t n_blocks_full;   /* of group 0's blocks, the full-precision class (only when fmt
                                splits) */
    int32_t window;          /* uniform shape: 0, or W: every layer sees at most the last W
                                positions, so a sequence keeps only the blocks of its window */
    int32_t max_chunk;       /* with windows: the most positions one step adds to a sequence */
    const kv_layout *layout; /* NULL: one group of the uniform shape above; else copied by
                                kv_pool_create (kv_pool_cfg's points at the copy) and
                                n_layers/n_kv_heads/head_dim/window are ignored */
    int32_t group_blocks[KV_MAX_GROUPS];      /* blocks of groups 1..n_groups-1 (group 0:
                                                 n_blocks; kv_pool_create fills [0]) */
    int32_t group_blocks_full[KV_MAX_GROUPS]; /* of them, full precision ([0] likewise) */
    int32_t state_blocks; /* recurrent-state blocks (layout with state_floats; >= 1 then) */
    int32_t state_every;  /* engine policy (eng_seq.c): publish a state snapshot every N
                             block boundaries; 0 = only the ones a sequence keeps */
} kv_pool_config;

typedef struct {
    int32_t n_blocks, n_free, n_active, n_cached;
    size_t block_bytes;      /* one main-class block */
    size_t block_bytes_full; /* one full-precision block */
    int32_t n_blocks_full;
} kv_pool_group_stats;

typedef struct {
    int32_t n_blocks, n_free, n_active, n_cached; /* over every group */
    uint64_t hits, misses, evictions;
    size_t bytes;            /* the pool's KV blocks (the slab less the state blocks) */
    int32_t n_blocks_full;   /* blocks of the full-precision classes (0: one class) */
    size_t block_bytes;      /* bytes of one main-class block of every group together
                                (block_tokens positions of every layer that stores K/V) */
    size_t block_bytes_full; /* the same at full precision */
    int32_t n_groups;
    kv_pool_group_stats group[KV_MAX_GROUPS];
    kv_pool_group_stats state; /* recurrent-state blocks (block_bytes: one state); zeros
                                  without recurrent layers; not counted in bytes nor in
                                  n_blocks/n_free/... above (they are the KV blocks') */
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
    /* 1 when load would find hash (a cheap index probe; optional) */
    int (*has)(void *user, uint64_t hash);
} kv_tier;

/* API */
/* *out is new: kv_pool_destroy frees it. */
kiln_code kv_pool_create(const kv_pool_config *cfg, kv_pool **out, kiln_err *err);
void kv_pool_destroy(kv_pool *pool); /* NULL is a no-op */
const kv_pool_config *kv_pool_cfg(const kv_pool *pool);
/* Bytes of one block of a class (KV_CLASS_MAIN, KV_CLASS_FULL) of every group
 * together (group < 0) or of one group, for a config. */
size_t kv_pool_class_bytes(const kv_pool_config *cfg, int cls);
size_t kv_pool_group_class_bytes(const kv_pool_config *cfg, int group, int cls);
size_t kv_pool_block_bytes(const kv_pool_config *cfg); /* the main class, every group */
/* The layout the pool was made with (the uniform one when cfg.layout was NULL). */
const kv_layout *kv_pool_layout(const kv_pool *pool);
int kv_pool_n_groups(const kv_pool *pool);
int kv_pool_group_of(const kv_pool *pool, kv_block_id b);
/* Layer L's group (-1: it stores no K/V). */
int kv_pool_layer_group(const kv_pool *pool, int32_t layer);
int32_t kv_pool_group_window(const kv_pool *pool, int group);
/* The precision class of a sequence's block_index-th block (every group alike). */
int kv_pool_class_of(const kv_pool *pool, int32_t block_index);
/* A block of `group` with refcnt 1 for a sequence's block_index-th block, of the
 * class that index implies (FREE first, else the least recently used CACHED
 * block of that class, which loses its hash). KILN_E_BUDGET when the class is
 * all ACTIVE. */
kiln_code kv_pool_alloc_at(kv_pool *pool, int group, int32_t block_index, kv_block_id *out,
                           kiln_err *err);
/* kv_pool_alloc_at for a main-class block of group 0 (any index past --quantized-kv-start). */
kiln_code kv_pool_alloc(kv_pool *pool, kv_block_id *out, kiln_err *err);
void kv_pool_retain(kv_pool *pool, kv_block_id b);
/* Drops one reference; at 0 a published block becomes CACHED, else FREE. */
void kv_pool_release(kv_pool *pool, kv_block_id b);
int32_t kv_pool_refcnt(const kv_pool *pool, kv_block_id b);
/* The key a block of `group` at chain hash `hash` is indexed (and stored in
 * the SSD tier) under: the hash itself for group 0, a salted one for others. */
uint64_t kv_pool_key(int group, uint64_t hash);
/* Publishes a full ACTIVE block under `hash` (keyed for its group). If another
 * block already holds that key, nothing changes and 0 is returned; 1 when
 * published. */
int kv_pool_publish(kv_pool *pool, kv_block_id b, uint64_t hash);
/* The block of `group` published under `hash`, retained for the caller
 * (CACHED -> ACTIVE); -1 when none. Counts a hit or a miss. */
kv_block_id kv_pool_lookup(kv_pool *pool, int group, uint64_t hash);
/* Layer `layer` of block b: K (or V) records [block_tokens][n_kv_heads], each
 * kn_kv_rec_bytes(kv_pool_layer_fmt(..), head_dim) bytes. */
void *kv_pool_layer_k(kv_pool *pool, kv_block_id b, int32_t layer);
void *kv_pool_layer_v(kv_pool *pool, kv_block_id b, int32_t layer);
kn_kv_fmt kv_pool_layer_fmt(const kv_pool *pool, kv_block_id b, int32_t layer);
/* The raw bytes of block b (its group's layers; *bytes set to their count):
 * what an SSD tier writes and reads back. The layout is fixed by the kv_format
 * and the model, both part of the namespace hash, and the group salts the key,
 * so equal keys mean equal layouts. */
const void *kv_pool_block_data(const kv_pool *pool, kv_block_id b, size_t *bytes);
void *kv_pool_block_data_mut(kv_pool *pool, kv_block_id b, size_t *bytes);
kv_pool_stats kv_pool_get_stats(const kv_pool *pool);
/* At most max_cached blocks stay CACHED (unreferenced but published); past it the
 * least recently used go FREE at once (the --prompt-cache byte cap). */
void kv_pool_set_cache_cap(kv_pool *pool, int32_t max_cached);
int32_t kv_pool_available(const kv_pool *pool); /* FREE + CACHED */
/* SSD tier hooks (kv_pool.c, section "SSD tier hooks"): the tier sees keys
 * (kv_pool_key). tier is copied; NULL removes it. */
void kv_pool_set_tier(kv_pool *pool, const kv_tier *tier);
/* After a RAM miss: a new block of `group` (of the class of a sequence's
 * block_index) filled by the tier and published under hash, retained for the
 * caller (ACTIVE); -1 when the tier has none or no block is free. */
kv_block_id kv_pool_lookup_tier(kv_pool *pool, int group, uint64_t hash, int32_t block_index);
/* Where group's block published under hash is, without taking it or counting
 * a hit: 1 in RAM, 2 only in the tier (its `has`), 0 nowhere. */
int kv_pool_find(const kv_pool *pool, int group, uint64_t hash);
/* group's RAM block published under hash (ACTIVE or CACHED), not taken and not
 * counted: read its bytes before the pool next changes. -1 when none. */
kv_block_id kv_pool_peek(const kv_pool *pool, int group, uint64_t hash);
/* Walks published blocks (ACTIVE or CACHED) from *cursor (start at 0); -1 at
 * the end. *key: the block's key (kv_pool_key), what the tier stores it under. */
kv_block_id kv_pool_next_published(const kv_pool *pool, int32_t *cursor, uint64_t *key);
uint64_t kv_pool_publish_gen(const kv_pool *pool); /* changes whenever a block is published */
/* 1 when blocks for indices [0, n_blocks) of a new sequence could be allocated
 * now in every group (each class counted apart); in a group with a window
 * only the last kv_seq_max_blocks of them, the ones such a sequence holds at once. */
int kv_pool_can_hold(const kv_pool *pool, int32_t n_blocks);
/* Checks invariants (1)..(4) of kv_pool.c; returns 0 when they hold. Tests. */
int kv_pool_check(const kv_pool *pool);

/* Recurrent state (kv_layout.h; docs/hybrid.md). A state block holds every
 * recurrent layer's state of one sequence: a working state (updated in place
 * by the step) or a snapshot, published like a KV block under
 * kv_pool_key(KV_STATE_GROUP, chain hash) (kv_pool_publish, kv_pool_lookup,
 * kv_pool_find, the tier hooks and kv_pool_alloc_at take KV_STATE_GROUP). */
int kv_pool_has_state(const kv_pool *pool);
size_t kv_pool_state_bytes(const kv_pool *pool); /* one state block */
/* A state block with refcnt 1 (FREE first, else the least recently used
 * CACHED snapshot, which loses its hash). Its bytes are not cleared.
 * KILN_E_BUDGET when every state block is ACTIVE. */
kiln_code kv_pool_state_alloc(kv_pool *pool, kv_block_id *out, kiln_err *err);
/* Layer `layer`'s part of state block b (kv_layout.state_floats[layer] f32). */
float *kv_pool_state_layer(kv_pool *pool, kv_block_id b, int32_t layer);
int32_t kv_pool_state_available(const kv_pool *pool); /* FREE + CACHED state blocks */

/* Sliding window. The first block a sequence whose next query sits at position
 * `pos` still reads: attention at p reads positions p - window + 1 .. p, so
 * blocks before floor((pos - window + 1) / bt) hold only older positions.
 * 0 without a window (window <= 0). */
int32_t kv_window_first_block(int32_t window, int32_t block_tokens, int64_t pos);
/* The most blocks a sequence of n_positions holds at once: ceil(n / bt); with
 * a window at most ceil((window - 1 + max_chunk) / bt) + 1 (a step adds up to
 * max_chunk positions after the window of its first query, and the window may
 * straddle one more block boundary). */
int64_t kv_seq_max_blocks(int32_t window, int32_t max_chunk, int32_t block_tokens,
                          int64_t n_positions);

/* Hash chain over token ids: hash of one block given its parent's hash (0 for
 * the first block) and a namespace (model identity, adapter, KV format). */
uint64_t kv_hash_block(uint64_t parent, uint64_t ns, const int32_t *tokens, int32_t n);

#endif
