/*
 * kv_pool.c — the KV block pool: every KV block in the process lives here.
 *
 * Block states, and the function that moves each one:
 *   FREE   -> ACTIVE   kv_pool_alloc()      a sequence needs a new block
 *   ACTIVE -> CACHED   kv_pool_release()    refcnt hit 0 and the block is published
 *   ACTIVE -> FREE     kv_pool_release()    refcnt hit 0, block never published
 *   CACHED -> ACTIVE   kv_pool_lookup()     prefix hit
 *   CACHED -> ACTIVE   kv_pool_alloc()      evicted (loses its hash) and reused
 *   CACHED -> FREE     kv_pool_release()    over the cache cap (kv_pool_set_cache_cap)
 * Invariants, checked by kv_pool_check():
 *   (1) refcnt > 0  <=>  state == ACTIVE
 *   (2) every CACHED block is on the LRU list exactly once; no other block is
 *   (3) n_free + n_active + n_cached == n_blocks
 *   (4) a block is in the hash index iff it is published (has_hash), and the
 *       index maps its hash to it
 *   (5) a block never changes class: ids [0, n_blocks_full) are full-precision
 *       blocks, the rest main-format blocks; each class has its own free list
 *       and LRU list (allocation of one class never evicts the other)
 * Layout: the slab holds the full-precision blocks first, then the main ones;
 * inside a block, layer L's K records start at koff[cls][L] and its V records
 * at voff[cls][L] (per-layer formats differ in size).
 * Threads: engine thread only; nothing here locks.
 * Errors: KILN_E_BUDGET when no FREE or CACHED block of the class is left.
 */
#include "kv/kv_pool.h"
#include "util/kiln_assert.h"
#include "util/kiln_math.h"

#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

typedef enum { KV_BLOCK_FREE, KV_BLOCK_ACTIVE, KV_BLOCK_CACHED } kv_block_state;

typedef struct {
    int32_t refcnt;
    uint8_t state, has_hash;
    uint64_t hash;
    uint64_t lru_tick;              /* CACHED only: when it joined its LRU list */
    kv_block_id lru_prev, lru_next; /* CACHED only */
    kv_block_id free_next;          /* FREE only */
} kv_meta;

struct kv_pool {
    kv_pool_config cfg;
    kv_format fmt;             /* cfg.fmt points here */
    size_t block_bytes[2];     /* per class (KV_CLASS_FULL, KV_CLASS_MAIN) */
    size_t *koff[2], *voff[2]; /* OWNED [n_layers] byte offsets inside a block */
    uint8_t *slab;             /* OWNED */
    kv_meta *meta;             /* OWNED [n_blocks] */
    kv_block_id free_head[2];
    kv_block_id lru_head[2], lru_tail[2]; /* head = least recently used */
    uint64_t tick;
    int32_t n_free, n_active, n_cached;
    int32_t n_free_cls[2], n_cached_cls[2];
    int32_t cache_cap; /* max CACHED blocks (kv_pool_set_cache_cap) */
    /* open-addressing hash index: hash -> block (-1 empty, -2 tombstone) */
    kv_block_id *index; /* OWNED [index_cap] */
    uint64_t *index_keys;
    int32_t index_cap;
    uint64_t hits, misses, evictions;
    kv_tier tier;         /* SSD tier hooks (kv_pool_set_tier); all NULL = none */
    uint64_t publish_gen; /* bumped by every publish (write-behind knows when to look) */
};

/* ---------------------------------------------------------------- index */

static int32_t index_slot(const kv_pool *p, uint64_t h)
{
    return (int32_t)(h & (uint64_t)(p->index_cap - 1));
}

static kv_block_id index_find(const kv_pool *p, uint64_t h)
{
    for (int32_t i = index_slot(p, h), n = 0; n < p->index_cap;
         i = (i + 1) & (p->index_cap - 1), n++) {
        kv_block_id b = p->index[i];
        if (b == -1) return -1;
        if (b >= 0 && p->index_keys[i] == h) return b;
    }
    return -1;
}

static void index_insert(kv_pool *p, uint64_t h, kv_block_id b)
{
    for (int32_t i = index_slot(p, h);; i = (i + 1) & (p->index_cap - 1)) {
        if (p->index[i] < 0) {
            p->index[i] = b;
            p->index_keys[i] = h;
            return;
        }
    }
}

static void index_remove(kv_pool *p, uint64_t h, kv_block_id b)
{
    for (int32_t i = index_slot(p, h), n = 0; n < p->index_cap;
         i = (i + 1) & (p->index_cap - 1), n++) {
        if (p->index[i] == -1) return;
        if (p->index[i] == b && p->index_keys[i] == h) {
            p->index[i] = -2;
            return;
        }
    }
}

/* ---------------------------------------------------------------- lists */

static int cls_of(const kv_pool *p, kv_block_id b)
{
    return b < p->cfg.n_blocks_full ? KV_CLASS_FULL : KV_CLASS_MAIN;
}

static void lru_unlink(kv_pool *p, kv_block_id b)
{
    kv_meta *m = &p->meta[b];
    int c = cls_of(p, b);
    if (m->lru_prev >= 0) p->meta[m->lru_prev].lru_next = m->lru_next;
    else
        p->lru_head[c] = m->lru_next;
    if (m->lru_next >= 0) p->meta[m->lru_next].lru_prev = m->lru_prev;
    else
        p->lru_tail[c] = m->lru_prev;
    m->lru_prev = m->lru_next = -1;
    p->n_cached_cls[c]--;
}

static void lru_push_tail(kv_pool *p, kv_block_id b)
{
    kv_meta *m = &p->meta[b];
    int c = cls_of(p, b);
    m->lru_prev = p->lru_tail[c];
    m->lru_next = -1;
    m->lru_tick = ++p->tick;
    if (p->lru_tail[c] >= 0)
        p->meta[p->lru_tail[c]].lru_next = b;
    else
        p->lru_head[c] = b;
    p->lru_tail[c] = b;
    p->n_cached_cls[c]++;
}

static void spill(kv_pool *p, kv_block_id b);

static void free_push(kv_pool *p, kv_block_id b)
{
    int c = cls_of(p, b);
    p->meta[b].state = KV_BLOCK_FREE;
    p->meta[b].free_next = p->free_head[c];
    p->free_head[c] = b;
    p->n_free++;
    p->n_free_cls[c]++;
}

/* CACHED -> FREE for the least recently used block of either class (the cache cap). */
static void evict_to_free(kv_pool *p)
{
    kv_block_id a = p->lru_head[0], m = p->lru_head[1];
    kv_block_id b = a < 0 ? m : m < 0 ? a : p->meta[a].lru_tick < p->meta[m].lru_tick ? a : m;
    spill(p, b);
    lru_unlink(p, b);
    index_remove(p, p->meta[b].hash, b);
    p->meta[b].has_hash = 0;
    p->n_cached--;
    free_push(p, b);
    p->evictions++;
}

/* ---------------------------------------------------------------- API */

/* The format of a config (f32 everywhere when it names none). */
static void cfg_format(const kv_pool_config *c, kv_format *f)
{
    if (c->fmt) {
        *f = *c->fmt;
        return;
    }
    kv_format_init(f, KV_QUANT_OFF, 0, 0, c->n_layers, c->head_dim, NULL);
}

static size_t class_bytes(const kv_pool_config *c, const kv_format *f, int cls)
{
    size_t per_pos = 0;
    for (int32_t l = 0; l < c->n_layers; l++)
        per_pos +=
            2 * (size_t)c->n_kv_heads * kn_kv_rec_bytes(kv_format_at(f, cls, l), c->head_dim);
    return per_pos * (size_t)c->block_tokens;
}

size_t kv_pool_class_bytes(const kv_pool_config *c, int cls)
{
    if (c->n_layers <= 0 || c->n_layers > KV_FMT_MAX_LAYERS || c->head_dim <= 0 ||
        c->head_dim > 65536)
        return 0;
    kv_format f;
    cfg_format(c, &f);
    return class_bytes(c, &f, cls);
}

size_t kv_pool_block_bytes(const kv_pool_config *c)
{
    return kv_pool_class_bytes(c, KV_CLASS_MAIN);
}

kiln_code kv_pool_create(const kv_pool_config *cfg, kv_pool **out, kiln_err *err)
{
    *out = NULL;
    if (cfg->n_blocks <= 0 || cfg->block_tokens <= 0 || cfg->n_layers <= 0 ||
        cfg->n_layers > KV_FMT_MAX_LAYERS || cfg->n_kv_heads <= 0 || cfg->head_dim <= 0 ||
        cfg->head_dim > 65536 || cfg->n_blocks_full < 0 || cfg->n_blocks_full > cfg->n_blocks ||
        cfg->window < 0 || cfg->max_chunk < 0)
        return kiln_fail(err, KILN_E_INVALID, "kv pool: bad shape (%d blocks of %d tokens)",
                         (int)cfg->n_blocks, (int)cfg->block_tokens);
    if (cfg->fmt && (cfg->fmt->n_layers != cfg->n_layers || cfg->fmt->head_dim != cfg->head_dim))
        return kiln_fail(err, KILN_E_INVALID, "kv pool: the KV format is for another shape");
    kv_pool *p = calloc(1, sizeof *p);
    if (!p) return kiln_fail(err, KILN_E_NOMEM, "kv pool: out of memory");
    p->cfg = *cfg;
    cfg_format(cfg, &p->fmt);
    p->cfg.fmt = &p->fmt;
    if (!kv_format_split(&p->fmt)) p->cfg.n_blocks_full = 0; /* one class */
    size_t total = 0, part;
    int32_t n_main = p->cfg.n_blocks - p->cfg.n_blocks_full;
    for (int c = 0; c < 2; c++) {
        p->block_bytes[c] = class_bytes(&p->cfg, &p->fmt, c);
        p->koff[c] = malloc(sizeof(size_t) * (size_t)cfg->n_layers);
        p->voff[c] = malloc(sizeof(size_t) * (size_t)cfg->n_layers);
        if (!p->koff[c] || !p->voff[c]) goto nomem;
        size_t at = 0;
        for (int32_t l = 0; l < cfg->n_layers; l++) {
            size_t half = (size_t)cfg->block_tokens * (size_t)cfg->n_kv_heads *
                          kn_kv_rec_bytes(kv_format_at(&p->fmt, c, l), cfg->head_dim);
            p->koff[c][l] = at;
            p->voff[c][l] = at + half;
            at += 2 * half;
        }
    }
    if (kiln_mul_size(p->block_bytes[0], (size_t)p->cfg.n_blocks_full, &total) ||
        kiln_mul_size(p->block_bytes[1], (size_t)n_main, &part) || total + part < total) {
        kv_pool_destroy(p);
        return kiln_fail(err, KILN_E_TOO_LARGE, "kv pool: size overflows");
    }
    total += part;
    void *slab = NULL;
    if (posix_memalign(&slab, 64, total ? total : 64) != 0) goto nomem;
    p->slab = slab;
    p->meta = calloc((size_t)cfg->n_blocks, sizeof *p->meta);
    p->index_cap = 16;
    while (p->index_cap < 2 * cfg->n_blocks) p->index_cap *= 2;
    p->index = malloc((size_t)p->index_cap * sizeof *p->index);
    p->index_keys = calloc((size_t)p->index_cap, sizeof *p->index_keys);
    if (!p->meta || !p->index || !p->index_keys) goto nomem;
    for (int32_t i = 0; i < p->index_cap; i++) p->index[i] = -1;
    for (int c = 0; c < 2; c++)
        p->free_head[c] = p->lru_head[c] = p->lru_tail[c] = -1;
    /* free lists in ascending order so allocation is deterministic */
    for (int32_t b = cfg->n_blocks - 1; b >= 0; b--) {
        p->meta[b].lru_prev = p->meta[b].lru_next = -1;
        free_push(p, b);
    }
    p->cache_cap = cfg->n_blocks;
    *out = p;
    return KILN_OK;
nomem:
    kv_pool_destroy(p);
    return kiln_fail(err, KILN_E_NOMEM, "kv pool: cannot allocate %d blocks (%zu bytes)",
                     (int)cfg->n_blocks, total);
}

void kv_pool_destroy(kv_pool *p)
{
    if (!p) return;
    free(p->slab);
    for (int c = 0; c < 2; c++) {
        free(p->koff[c]);
        free(p->voff[c]);
    }
    free(p->meta);
    free(p->index);
    free(p->index_keys);
    free(p);
}

const kv_pool_config *kv_pool_cfg(const kv_pool *p)
{
    return &p->cfg;
}

int kv_pool_class_of(const kv_pool *p, int32_t block_index)
{
    return kv_format_class(&p->fmt, block_index, p->cfg.block_tokens);
}

static kiln_code alloc_class(kv_pool *p, int c, kv_block_id *out, kiln_err *err)
{
    kv_block_id b;
    if (p->free_head[c] >= 0) {
        b = p->free_head[c];
        p->free_head[c] = p->meta[b].free_next;
        p->n_free--;
        p->n_free_cls[c]--;
    } else if (p->lru_head[c] >= 0) {
        b = p->lru_head[c];
        spill(p, b);
        lru_unlink(p, b);
        index_remove(p, p->meta[b].hash, b);
        p->meta[b].has_hash = 0;
        p->n_cached--;
        p->evictions++;
    } else {
        *out = -1;
        return kiln_fail(err, KILN_E_BUDGET, "kv cache full: all %d %sblocks are in use",
                         (int)(c == KV_CLASS_FULL ? p->cfg.n_blocks_full
                                                  : p->cfg.n_blocks - p->cfg.n_blocks_full),
                         c == KV_CLASS_FULL ? "full-precision " : "");
    }
    kv_meta *m = &p->meta[b];
    m->state = KV_BLOCK_ACTIVE;
    m->refcnt = 1;
    m->free_next = -1;
    p->n_active++;
    *out = b;
    return KILN_OK;
}

kiln_code kv_pool_alloc_at(kv_pool *p, int32_t block_index, kv_block_id *out, kiln_err *err)
{
    return alloc_class(p, kv_pool_class_of(p, block_index), out, err);
}

kiln_code kv_pool_alloc(kv_pool *p, kv_block_id *out, kiln_err *err)
{
    return alloc_class(p, KV_CLASS_MAIN, out, err);
}

void kv_pool_retain(kv_pool *p, kv_block_id b)
{
    KILN_ASSERT(b >= 0 && b < p->cfg.n_blocks);
    KILN_ASSERT(p->meta[b].state == KV_BLOCK_ACTIVE && p->meta[b].refcnt > 0); /* (1) */
    p->meta[b].refcnt++;
}

void kv_pool_release(kv_pool *p, kv_block_id b)
{
    KILN_ASSERT(b >= 0 && b < p->cfg.n_blocks);
    kv_meta *m = &p->meta[b];
    KILN_ASSERT(m->state == KV_BLOCK_ACTIVE && m->refcnt > 0); /* (1) */
    if (--m->refcnt > 0) return;
    p->n_active--;
    if (m->has_hash) {
        m->state = KV_BLOCK_CACHED;
        lru_push_tail(p, b);
        p->n_cached++;
        while (p->n_cached > p->cache_cap) evict_to_free(p);
    } else {
        free_push(p, b);
    }
}

int32_t kv_pool_refcnt(const kv_pool *p, kv_block_id b)
{
    KILN_ASSERT(b >= 0 && b < p->cfg.n_blocks);
    return p->meta[b].refcnt;
}

int kv_pool_publish(kv_pool *p, kv_block_id b, uint64_t hash)
{
    KILN_ASSERT(b >= 0 && b < p->cfg.n_blocks && p->meta[b].state == KV_BLOCK_ACTIVE);
    if (p->meta[b].has_hash) return p->meta[b].hash == hash;
    if (index_find(p, hash) >= 0) return 0;
    p->meta[b].has_hash = 1;
    p->meta[b].hash = hash;
    index_insert(p, hash, b);
    p->publish_gen++;
    return 1;
}

kv_block_id kv_pool_lookup(kv_pool *p, uint64_t hash)
{
    kv_block_id b = index_find(p, hash);
    if (b < 0) {
        p->misses++;
        return -1;
    }
    p->hits++;
    kv_meta *m = &p->meta[b];
    if (m->state == KV_BLOCK_CACHED) {
        lru_unlink(p, b);
        m->state = KV_BLOCK_ACTIVE;
        m->refcnt = 1;
        p->n_cached--;
        p->n_active++;
    } else {
        m->refcnt++;
    }
    return b;
}

static uint8_t *block_base(const kv_pool *p, kv_block_id b)
{
    int32_t nf = p->cfg.n_blocks_full;
    if (b < nf) return p->slab + (size_t)b * p->block_bytes[0];
    return p->slab + (size_t)nf * p->block_bytes[0] + (size_t)(b - nf) * p->block_bytes[1];
}

void *kv_pool_layer_k(kv_pool *p, kv_block_id b, int32_t layer)
{
    KILN_DASSERT(b >= 0 && b < p->cfg.n_blocks && layer >= 0 && layer < p->cfg.n_layers);
    return block_base(p, b) + p->koff[cls_of(p, b)][layer];
}

void *kv_pool_layer_v(kv_pool *p, kv_block_id b, int32_t layer)
{
    KILN_DASSERT(b >= 0 && b < p->cfg.n_blocks && layer >= 0 && layer < p->cfg.n_layers);
    return block_base(p, b) + p->voff[cls_of(p, b)][layer];
}

kn_kv_fmt kv_pool_layer_fmt(const kv_pool *p, kv_block_id b, int32_t layer)
{
    KILN_DASSERT(b >= 0 && b < p->cfg.n_blocks && layer >= 0 && layer < p->cfg.n_layers);
    return kv_format_at(&p->fmt, cls_of(p, b), layer);
}

const void *kv_pool_block_data(const kv_pool *p, kv_block_id b, size_t *bytes)
{
    KILN_ASSERT(b >= 0 && b < p->cfg.n_blocks);
    if (bytes) *bytes = p->block_bytes[cls_of(p, b)];
    return block_base(p, b);
}

void *kv_pool_block_data_mut(kv_pool *p, kv_block_id b, size_t *bytes)
{
    KILN_ASSERT(b >= 0 && b < p->cfg.n_blocks);
    if (bytes) *bytes = p->block_bytes[cls_of(p, b)];
    return block_base(p, b);
}

kv_pool_stats kv_pool_get_stats(const kv_pool *p)
{
    kv_pool_stats s = {
        .n_blocks = p->cfg.n_blocks,
        .n_free = p->n_free,
        .n_active = p->n_active,
        .n_cached = p->n_cached,
        .hits = p->hits,
        .misses = p->misses,
        .evictions = p->evictions,
        .bytes = p->block_bytes[0] * (size_t)p->cfg.n_blocks_full +
                 p->block_bytes[1] * (size_t)(p->cfg.n_blocks - p->cfg.n_blocks_full),
        .n_blocks_full = p->cfg.n_blocks_full,
        .block_bytes = p->block_bytes[1],
        .block_bytes_full = p->block_bytes[0],
    };
    return s;
}

void kv_pool_set_cache_cap(kv_pool *p, int32_t max_cached)
{
    p->cache_cap = max_cached < 0 ? 0 : max_cached;
    while (p->n_cached > p->cache_cap) evict_to_free(p);
}

int32_t kv_pool_available(const kv_pool *p)
{
    return p->n_free + p->n_cached;
}

int32_t kv_window_first_block(int32_t window, int32_t block_tokens, int64_t pos)
{
    if (window <= 0 || block_tokens <= 0) return 0;
    int64_t lo = pos - window + 1; /* the oldest position the query at pos reads */
    return lo > 0 ? (int32_t)(lo / block_tokens) : 0;
}

int64_t kv_seq_max_blocks(int32_t window, int32_t max_chunk, int32_t block_tokens,
                          int64_t n_positions)
{
    if (block_tokens <= 0 || n_positions <= 0) return 0;
    int64_t n = (n_positions + block_tokens - 1) / block_tokens;
    if (window <= 0) return n;
    int64_t span = (int64_t)window - 1 + (max_chunk > 0 ? max_chunk : 1);
    int64_t cap = (span + block_tokens - 1) / block_tokens + 1;
    return n < cap ? n : cap;
}

int kv_pool_can_hold(const kv_pool *p, int32_t n_blocks)
{
    int32_t need[2] = {0, 0};
    int64_t held = kv_seq_max_blocks(p->cfg.window, p->cfg.max_chunk, p->cfg.block_tokens,
                                     (int64_t)n_blocks * p->cfg.block_tokens);
    for (int32_t j = n_blocks - (int32_t)held; j < n_blocks; j++) {
        if (kv_pool_class_of(p, j) == KV_CLASS_MAIN) {
            need[1] += n_blocks - j;
            break;
        }
        need[0]++;
    }
    return need[0] <= p->n_free_cls[0] + p->n_cached_cls[0] &&
           need[1] <= p->n_free_cls[1] + p->n_cached_cls[1];
}

int kv_pool_check(const kv_pool *p)
{
    int32_t nf = 0, na = 0, nc = 0, on_lru = 0;
    for (int32_t b = 0; b < p->cfg.n_blocks; b++) {
        const kv_meta *m = &p->meta[b];
        if ((m->refcnt > 0) != (m->state == KV_BLOCK_ACTIVE)) return 1; /* (1) */
        nf += m->state == KV_BLOCK_FREE;
        na += m->state == KV_BLOCK_ACTIVE;
        nc += m->state == KV_BLOCK_CACHED;
        if (m->has_hash && index_find(p, m->hash) != b) return 4;
        if (!m->has_hash && m->state == KV_BLOCK_CACHED) return 4;
    }
    for (int c = 0; c < 2; c++) {
        int32_t here = 0;
        for (kv_block_id b = p->lru_head[c]; b >= 0; b = p->meta[b].lru_next) {
            if (p->meta[b].state != KV_BLOCK_CACHED || cls_of(p, b) != c) return 2;
            if (++here > p->cfg.n_blocks) return 2;
        }
        if (here != p->n_cached_cls[c]) return 2;
        on_lru += here;
        int32_t nfree = 0;
        for (kv_block_id b = p->free_head[c]; b >= 0; b = p->meta[b].free_next) {
            if (p->meta[b].state != KV_BLOCK_FREE || cls_of(p, b) != c) return 5;
            if (++nfree > p->cfg.n_blocks) return 5;
        }
        if (nfree != p->n_free_cls[c]) return 5;
    }
    if (on_lru != nc) return 2;
    if (nf != p->n_free || na != p->n_active || nc != p->n_cached) return 3;
    if (nf + na + nc != p->cfg.n_blocks) return 3;
    return 0;
}

uint64_t kv_hash_block(uint64_t parent, uint64_t ns, const int32_t *tokens, int32_t n)
{
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, &parent, sizeof parent);
    XXH3_64bits_update(&st, &ns, sizeof ns);
    XXH3_64bits_update(&st, tokens, (size_t)n * sizeof *tokens);
    uint64_t h = XXH3_64bits_digest(&st);
    return h ? h : 1; /* 0 means "no parent" */
}

/* ---------------------------------------------------------------- raw bytes and SSD tier hooks */

void kv_pool_set_tier(kv_pool *p, const kv_tier *tier)
{
    if (tier) p->tier = *tier;
    else memset(&p->tier, 0, sizeof p->tier);
}

/* A CACHED published block is about to lose its bytes: the tier may copy them. */
static void spill(kv_pool *p, kv_block_id b)
{
    if (!p->tier.evict || !p->meta[b].has_hash) return;
    size_t n;
    const void *d = kv_pool_block_data(p, b, &n);
    p->tier.evict(p->tier.user, p->meta[b].hash, d, n);
}

kv_block_id kv_pool_lookup_tier(kv_pool *p, uint64_t hash, int32_t block_index)
{
    if (!p->tier.load || index_find(p, hash) >= 0) return -1;
    kv_block_id b;
    if (kv_pool_alloc_at(p, block_index, &b, NULL) != KILN_OK) return -1;
    size_t n;
    void *d = kv_pool_block_data_mut(p, b, &n);
    if (p->tier.load(p->tier.user, hash, d, n) != 0 || kv_pool_publish(p, b, hash) != 1) {
        kv_pool_release(p, b); /* never published: back to FREE */
        return -1;
    }
    return b;
}

int kv_pool_find(const kv_pool *p, uint64_t hash)
{
    if (index_find(p, hash) >= 0) return 1;
    return p->tier.has && p->tier.has(p->tier.user, hash) ? 2 : 0;
}

kv_block_id kv_pool_peek(const kv_pool *p, uint64_t hash)
{
    return index_find(p, hash);
}

kv_block_id kv_pool_next_published(const kv_pool *p, int32_t *cursor, uint64_t *hash)
{
    while (*cursor >= 0 && *cursor < p->cfg.n_blocks) {
        kv_block_id b = (*cursor)++;
        if (p->meta[b].has_hash) {
            *hash = p->meta[b].hash;
            return b;
        }
    }
    return -1;
}

uint64_t kv_pool_publish_gen(const kv_pool *p)
{
    return p->publish_gen;
}
