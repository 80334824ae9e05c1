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
 *   (5) a block never changes class: a class is (group, precision), and class
 *       c owns ids [start[c], start[c] + count[c]), classes in order (group
 *       0 full, group 0 main, group 1 full, ...); each class has its own free
 *       list and LRU list (allocation of one class never evicts another)
 *   (6) a published block is indexed under kv_pool_key(its group, hash)
 *   (7) state blocks (hybrid models) are one more class, STATE_CLS, after every
 *       KV class: group KV_STATE_GROUP, block = every recurrent layer's state;
 *       the --prompt-cache cap counts KV blocks only (the state class is
 *       bounded by its own size)
 * Layout: the slab holds the classes in that order; inside a block of class c,
 * layer L's K records start at koff[c][L] and its V records at voff[c][L]
 * (layers of other groups have no offset; per-layer formats and geometries
 * differ in size).
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

/* class = 2 * group + precision (KV_CLASS_FULL/MAIN); then the state class */
#define STATE_CLS (2 * KV_MAX_GROUPS)
#define N_CLS (STATE_CLS + 1)

typedef struct {
    int32_t refcnt;
    uint8_t state, has_hash, cls;
    uint64_t hash;                  /* the key: kv_pool_key(group, chain hash) */
    uint64_t lru_tick;              /* CACHED only: when it joined its LRU list */
    kv_block_id lru_prev, lru_next; /* CACHED only */
    kv_block_id free_next;          /* FREE only */
} kv_meta;

struct kv_pool {
    kv_pool_config cfg;
    kv_format fmt;    /* cfg.fmt points here */
    kv_layout layout; /* cfg.layout points here */
    int32_t n_total;  /* blocks of every class */
    int32_t start[N_CLS], count[N_CLS];
    size_t block_bytes[N_CLS];
    size_t slab_off[N_CLS];            /* where class c's first block starts in the slab */
    size_t *koff[N_CLS], *voff[N_CLS]; /* OWNED [n_layers] byte offsets inside a block */
    size_t *soff;                      /* OWNED [n_layers]: a layer's part of a state block */
    uint8_t *slab;                     /* OWNED */
    kv_meta *meta;                     /* OWNED [n_total] */
    kv_block_id free_head[N_CLS];
    kv_block_id lru_head[N_CLS], lru_tail[N_CLS]; /* head = least recently used */
    uint64_t tick;
    int32_t n_free, n_active, n_cached;
    int32_t n_free_cls[N_CLS], n_cached_cls[N_CLS];
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
    return p->meta[b].cls;
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

/* CACHED KV blocks (the cache cap counts no state block, (7)). */
static int32_t cached_kv(const kv_pool *p)
{
    return p->n_cached - p->n_cached_cls[STATE_CLS];
}

/* CACHED -> FREE for the least recently used KV block of any class (the cache cap). */
static void evict_to_free(kv_pool *p)
{
    kv_block_id b = -1;
    for (int c = 0; c < STATE_CLS; c++) {
        kv_block_id h = p->lru_head[c];
        if (h >= 0 && (b < 0 || p->meta[h].lru_tick < p->meta[b].lru_tick)) b = h;
    }
    spill(p, b);
    lru_unlink(p, b);
    index_remove(p, p->meta[b].hash, b);
    p->meta[b].has_hash = 0;
    p->n_cached--;
    free_push(p, b);
    p->evictions++;
}

/* ---------------------------------------------------------------- API */

/* The layout of a config: its own, or the uniform shape of its fields. */
static void cfg_layout(const kv_pool_config *c, kv_layout *l)
{
    if (c->layout)
        *l = *c->layout;
    else
        kv_layout_uniform(l, c->n_layers, c->n_kv_heads, c->head_dim, c->window);
}

/* The format of a config (f32 everywhere when it names none). */
static void cfg_format(const kv_pool_config *c, const kv_layout *l, kv_format *f)
{
    if (c->fmt) {
        *f = *c->fmt;
        return;
    }
    kv_format_init_dims(f, KV_QUANT_OFF, 0, 0, l->n_layers, l->head_dim, NULL);
}

static size_t class_bytes(const kv_pool_config *c, const kv_layout *l, const kv_format *f,
                          int group, int prec)
{
    size_t per_pos = 0;
    for (int32_t i = 0; i < l->n_layers; i++)
        if (l->group[i] == group)
            per_pos += 2 * (size_t)l->n_kv_heads[i] *
                       kn_kv_rec_bytes(kv_format_at(f, prec, i), l->head_dim[i]);
    return per_pos * (size_t)c->block_tokens;
}

/* 1 when the config's shapes are usable (and *l, *f filled). */
static int cfg_resolve(const kv_pool_config *c, kv_layout *l, kv_format *f)
{
    if (!c->layout && (c->n_layers <= 0 || c->n_layers > KV_FMT_MAX_LAYERS || c->n_kv_heads <= 0 ||
                       c->head_dim <= 0 || c->head_dim > 65536))
        return 0;
    cfg_layout(c, l);
    if (!kv_layout_valid(l)) return 0;
    cfg_format(c, l, f);
    if (f->n_layers != l->n_layers) return 0;
    for (int32_t i = 0; i < l->n_layers; i++)
        if (f->hd[i] != l->head_dim[i]) return 0;
    return 1;
}

size_t kv_pool_group_class_bytes(const kv_pool_config *c, int group, int cls)
{
    kv_layout l;
    kv_format f;
    if (!cfg_resolve(c, &l, &f)) return 0;
    size_t b = 0;
    for (int g = 0; g < l.n_groups; g++)
        if (group < 0 || g == group) b += class_bytes(c, &l, &f, g, cls);
    return b;
}

size_t kv_pool_class_bytes(const kv_pool_config *c, int cls)
{
    return kv_pool_group_class_bytes(c, -1, cls);
}

size_t kv_pool_block_bytes(const kv_pool_config *c)
{
    return kv_pool_class_bytes(c, KV_CLASS_MAIN);
}

kiln_code kv_pool_create(const kv_pool_config *cfg, kv_pool **out, kiln_err *err)
{
    *out = NULL;
    kv_pool *p = calloc(1, sizeof *p);
    if (!p) return kiln_fail(err, KILN_E_NOMEM, "kv pool: out of memory");
    if (cfg->block_tokens <= 0 || cfg->window < 0 || cfg->max_chunk < 0 ||
        !cfg_resolve(cfg, &p->layout, &p->fmt)) {
        free(p);
        if (cfg->fmt && cfg->fmt->n_layers != (cfg->layout ? cfg->layout->n_layers : cfg->n_layers))
            return kiln_fail(err, KILN_E_INVALID, "kv pool: the KV format is for another shape");
        return kiln_fail(err, KILN_E_INVALID, "kv pool: bad shape (%d blocks of %d tokens)",
                         (int)cfg->n_blocks, (int)cfg->block_tokens);
    }
    p->cfg = *cfg;
    p->cfg.fmt = &p->fmt;
    p->cfg.layout = &p->layout;
    p->cfg.group_blocks[0] = cfg->n_blocks;
    p->cfg.group_blocks_full[0] = cfg->n_blocks_full;
    int split = kv_format_split(&p->fmt);
    size_t total = 0;
    for (int g = 0; g < KV_MAX_GROUPS; g++) {
        int32_t nb = g < p->layout.n_groups ? p->cfg.group_blocks[g] : 0;
        int32_t nf = g < p->layout.n_groups && split ? p->cfg.group_blocks_full[g] : 0;
        if (nb <= 0 && g < p->layout.n_groups) goto bad;
        if (nf < 0 || nf > nb) goto bad;
        p->cfg.group_blocks[g] = nb;
        p->cfg.group_blocks_full[g] = nf;
        p->count[2 * g + KV_CLASS_FULL] = nf;
        p->count[2 * g + KV_CLASS_MAIN] = nb - nf;
    }
    p->cfg.n_blocks_full = p->cfg.group_blocks_full[0];
    uint64_t sb = kv_layout_state_bytes(&p->layout);
    if (cfg->state_blocks < 0 || (sb > 0 && cfg->state_blocks < 1) || sb > SIZE_MAX / 2) goto bad;
    p->count[STATE_CLS] = sb > 0 ? cfg->state_blocks : 0;
    p->soff = calloc((size_t)p->layout.n_layers, sizeof *p->soff);
    if (!p->soff) goto nomem;
    for (int32_t l = 0; l < p->layout.n_layers; l++)
        p->soff[l] = (size_t)kv_layout_state_offset(&p->layout, l);
    for (int c = 0; c < N_CLS; c++) {
        int g = c / 2, prec = c % 2;
        if (p->n_total > INT32_MAX - p->count[c]) goto too_large;
        p->start[c] = p->n_total;
        p->n_total += p->count[c];
        p->block_bytes[c] = c == STATE_CLS ? (size_t)sb
                            : g < p->layout.n_groups
                                ? class_bytes(&p->cfg, &p->layout, &p->fmt, g, prec)
                                : 0;
        p->koff[c] = malloc(sizeof(size_t) * (size_t)p->layout.n_layers);
        p->voff[c] = malloc(sizeof(size_t) * (size_t)p->layout.n_layers);
        if (!p->koff[c] || !p->voff[c]) goto nomem;
        size_t at = 0;
        for (int32_t l = 0; l < p->layout.n_layers; l++) {
            p->koff[c][l] = p->voff[c][l] = 0;
            if (c == STATE_CLS || p->layout.group[l] != g) continue;
            size_t half = (size_t)cfg->block_tokens * (size_t)p->layout.n_kv_heads[l] *
                          kn_kv_rec_bytes(kv_format_at(&p->fmt, prec, l), p->layout.head_dim[l]);
            p->koff[c][l] = at;
            p->voff[c][l] = at + half;
            at += 2 * half;
        }
        size_t part;
        p->slab_off[c] = total;
        if (kiln_mul_size(p->block_bytes[c], (size_t)p->count[c], &part) || total + part < total)
            goto too_large;
        total += part;
    }
    void *slab = NULL;
    if (posix_memalign(&slab, 64, total ? total : 64) != 0) goto nomem;
    p->slab = slab;
    p->meta = calloc((size_t)p->n_total, sizeof *p->meta);
    p->index_cap = 16;
    while (p->index_cap < 2 * p->n_total)
        p->index_cap *= 2;
    p->index = malloc((size_t)p->index_cap * sizeof *p->index);
    p->index_keys = calloc((size_t)p->index_cap, sizeof *p->index_keys);
    if (!p->meta || !p->index || !p->index_keys) goto nomem;
    for (int32_t i = 0; i < p->index_cap; i++)
        p->index[i] = -1;
    for (int c = 0; c < N_CLS; c++)
        p->free_head[c] = p->lru_head[c] = p->lru_tail[c] = -1;
    for (int c = 0; c < N_CLS; c++)
        for (int32_t b = p->start[c]; b < p->start[c] + p->count[c]; b++)
            p->meta[b].cls = (uint8_t)c;
    /* free lists in ascending order so allocation is deterministic */
    for (int32_t b = p->n_total - 1; b >= 0; b--) {
        p->meta[b].lru_prev = p->meta[b].lru_next = -1;
        free_push(p, b);
    }
    p->cache_cap = p->n_total;
    *out = p;
    return KILN_OK;
bad:
    kv_pool_destroy(p);
    return kiln_fail(err, KILN_E_INVALID, "kv pool: bad shape (%d blocks of %d tokens)",
                     (int)cfg->n_blocks, (int)cfg->block_tokens);
too_large:
    kv_pool_destroy(p);
    return kiln_fail(err, KILN_E_TOO_LARGE, "kv pool: size overflows");
nomem:
    kv_pool_destroy(p);
    return kiln_fail(err, KILN_E_NOMEM, "kv pool: cannot allocate %d blocks (%zu bytes)",
                     (int)cfg->n_blocks, total);
}

void kv_pool_destroy(kv_pool *p)
{
    if (!p) return;
    free(p->slab);
    for (int c = 0; c < N_CLS; c++) {
        free(p->koff[c]);
        free(p->voff[c]);
    }
    free(p->soff);
    free(p->meta);
    free(p->index);
    free(p->index_keys);
    free(p);
}

const kv_pool_config *kv_pool_cfg(const kv_pool *p)
{
    return &p->cfg;
}

const kv_layout *kv_pool_layout(const kv_pool *p)
{
    return &p->layout;
}

int kv_pool_n_groups(const kv_pool *p)
{
    return p->layout.n_groups;
}

int kv_pool_group_of(const kv_pool *p, kv_block_id b)
{
    KILN_DASSERT(b >= 0 && b < p->n_total);
    return p->meta[b].cls / 2;
}

int kv_pool_layer_group(const kv_pool *p, int32_t layer)
{
    return layer >= 0 && layer < p->layout.n_layers ? p->layout.group[layer] : -1;
}

int32_t kv_pool_group_window(const kv_pool *p, int group)
{
    return group >= 0 && group < p->layout.n_groups ? p->layout.window[group] : 0;
}

uint64_t kv_pool_key(int group, uint64_t hash)
{
    if (group == 0) return hash;
    uint64_t k = (hash ^ ((uint64_t)group * 0x9e3779b97f4a7c15ull)) * 0xbf58476d1ce4e5b9ull;
    k ^= k >> 31;
    return k ? k : 1;
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
        if (c == STATE_CLS)
            return kiln_fail(err, KILN_E_BUDGET,
                             "kv cache full: all %d recurrent-state blocks are in use",
                             (int)p->count[c]);
        return kiln_fail(err, KILN_E_BUDGET, "kv cache full: all %d %sblocks%s are in use",
                         (int)p->count[c], c % 2 == KV_CLASS_FULL ? "full-precision " : "",
                         p->layout.n_groups > 1 ? (p->layout.window[c / 2] ? " of a sliding group"
                                                                           : " of a full group")
                                                : "");
    }
    kv_meta *m = &p->meta[b];
    m->state = KV_BLOCK_ACTIVE;
    m->refcnt = 1;
    m->free_next = -1;
    p->n_active++;
    *out = b;
    return KILN_OK;
}

kiln_code kv_pool_alloc_at(kv_pool *p, int group, int32_t block_index, kv_block_id *out,
                           kiln_err *err)
{
    if (group == KV_STATE_GROUP) return kv_pool_state_alloc(p, out, err);
    KILN_ASSERT(group >= 0 && group < p->layout.n_groups);
    return alloc_class(p, 2 * group + kv_pool_class_of(p, block_index), out, err);
}

kiln_code kv_pool_alloc(kv_pool *p, kv_block_id *out, kiln_err *err)
{
    return alloc_class(p, KV_CLASS_MAIN, out, err);
}

void kv_pool_retain(kv_pool *p, kv_block_id b)
{
    KILN_ASSERT(b >= 0 && b < p->n_total);
    KILN_ASSERT(p->meta[b].state == KV_BLOCK_ACTIVE && p->meta[b].refcnt > 0); /* (1) */
    p->meta[b].refcnt++;
}

void kv_pool_release(kv_pool *p, kv_block_id b)
{
    KILN_ASSERT(b >= 0 && b < p->n_total);
    kv_meta *m = &p->meta[b];
    KILN_ASSERT(m->state == KV_BLOCK_ACTIVE && m->refcnt > 0); /* (1) */
    if (--m->refcnt > 0) return;
    p->n_active--;
    if (m->has_hash) {
        m->state = KV_BLOCK_CACHED;
        lru_push_tail(p, b);
        p->n_cached++;
        while (cached_kv(p) > p->cache_cap)
            evict_to_free(p);
    } else {
        free_push(p, b);
    }
}

int32_t kv_pool_refcnt(const kv_pool *p, kv_block_id b)
{
    KILN_ASSERT(b >= 0 && b < p->n_total);
    return p->meta[b].refcnt;
}

int kv_pool_publish(kv_pool *p, kv_block_id b, uint64_t hash)
{
    KILN_ASSERT(b >= 0 && b < p->n_total && p->meta[b].state == KV_BLOCK_ACTIVE);
    hash = kv_pool_key(p->meta[b].cls / 2, hash); /* (6) */
    if (p->meta[b].has_hash) return p->meta[b].hash == hash;
    if (index_find(p, hash) >= 0) return 0;
    p->meta[b].has_hash = 1;
    p->meta[b].hash = hash;
    index_insert(p, hash, b);
    p->publish_gen++;
    return 1;
}

kv_block_id kv_pool_lookup(kv_pool *p, int group, uint64_t hash)
{
    kv_block_id b = index_find(p, kv_pool_key(group, hash));
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
    int c = cls_of(p, b);
    return p->slab + p->slab_off[c] + (size_t)(b - p->start[c]) * p->block_bytes[c];
}

void *kv_pool_layer_k(kv_pool *p, kv_block_id b, int32_t layer)
{
    KILN_DASSERT(b >= 0 && b < p->n_total && layer >= 0 && layer < p->layout.n_layers &&
                 p->layout.group[layer] == cls_of(p, b) / 2);
    return block_base(p, b) + p->koff[cls_of(p, b)][layer];
}

void *kv_pool_layer_v(kv_pool *p, kv_block_id b, int32_t layer)
{
    KILN_DASSERT(b >= 0 && b < p->n_total && layer >= 0 && layer < p->layout.n_layers &&
                 p->layout.group[layer] == cls_of(p, b) / 2);
    return block_base(p, b) + p->voff[cls_of(p, b)][layer];
}

kn_kv_fmt kv_pool_layer_fmt(const kv_pool *p, kv_block_id b, int32_t layer)
{
    KILN_DASSERT(b >= 0 && b < p->n_total && layer >= 0 && layer < p->layout.n_layers);
    return kv_format_at(&p->fmt, cls_of(p, b) % 2, layer);
}

const void *kv_pool_block_data(const kv_pool *p, kv_block_id b, size_t *bytes)
{
    KILN_ASSERT(b >= 0 && b < p->n_total);
    if (bytes) *bytes = p->block_bytes[cls_of(p, b)];
    return block_base(p, b);
}

void *kv_pool_block_data_mut(kv_pool *p, kv_block_id b, size_t *bytes)
{
    KILN_ASSERT(b >= 0 && b < p->n_total);
    if (bytes) *bytes = p->block_bytes[cls_of(p, b)];
    return block_base(p, b);
}

kv_pool_stats kv_pool_get_stats(const kv_pool *p)
{
    kv_pool_stats s = {
        .n_blocks = p->n_total,
        .n_free = p->n_free,
        .n_active = p->n_active,
        .n_cached = p->n_cached,
        .hits = p->hits,
        .misses = p->misses,
        .evictions = p->evictions,
        .n_groups = p->layout.n_groups,
    };
    s.state.n_blocks = p->count[STATE_CLS];
    s.state.n_free = p->n_free_cls[STATE_CLS];
    s.state.n_cached = p->n_cached_cls[STATE_CLS];
    s.state.n_active = s.state.n_blocks - s.state.n_free - s.state.n_cached;
    s.state.block_bytes = p->block_bytes[STATE_CLS];
    s.n_blocks -= s.state.n_blocks; /* the KV blocks' counts; the state apart */
    s.n_free -= s.state.n_free;
    s.n_active -= s.state.n_active;
    s.n_cached -= s.state.n_cached;
    for (int c = 0; c < STATE_CLS; c++) {
        kv_pool_group_stats *g = &s.group[c / 2];
        s.bytes += p->block_bytes[c] * (size_t)p->count[c];
        g->n_blocks += p->count[c];
        g->n_free += p->n_free_cls[c];
        g->n_cached += p->n_cached_cls[c];
        if (c % 2 == KV_CLASS_FULL) {
            s.n_blocks_full += p->count[c];
            g->n_blocks_full += p->count[c];
            g->block_bytes_full = p->block_bytes[c];
            s.block_bytes_full += p->block_bytes[c];
        } else {
            g->block_bytes = p->block_bytes[c];
            s.block_bytes += p->block_bytes[c];
        }
    }
    for (int g = 0; g < KV_MAX_GROUPS; g++)
        s.group[g].n_active = s.group[g].n_blocks - s.group[g].n_free - s.group[g].n_cached;
    return s;
}

void kv_pool_set_cache_cap(kv_pool *p, int32_t max_cached)
{
    p->cache_cap = max_cached < 0 ? 0 : max_cached;
    while (cached_kv(p) > p->cache_cap)
        evict_to_free(p);
}

int32_t kv_pool_available(const kv_pool *p)
{
    return p->n_free - p->n_free_cls[STATE_CLS] + cached_kv(p);
}

/* ---------------------------------------------------------------- state blocks */

int kv_pool_has_state(const kv_pool *p)
{
    return p->count[STATE_CLS] > 0;
}

size_t kv_pool_state_bytes(const kv_pool *p)
{
    return p->block_bytes[STATE_CLS];
}

kiln_code kv_pool_state_alloc(kv_pool *p, kv_block_id *out, kiln_err *err)
{
    if (p->count[STATE_CLS] == 0) {
        *out = -1;
        return kiln_fail(err, KILN_E_INTERNAL, "kv pool: the model keeps no recurrent state");
    }
    return alloc_class(p, STATE_CLS, out, err);
}

float *kv_pool_state_layer(kv_pool *p, kv_block_id b, int32_t layer)
{
    KILN_DASSERT(b >= 0 && b < p->n_total && cls_of(p, b) == STATE_CLS && layer >= 0 &&
                 layer < p->layout.n_layers && p->layout.state_floats[layer] > 0);
    return (float *)(void *)(block_base(p, b) + p->soff[layer]);
}

int32_t kv_pool_state_available(const kv_pool *p)
{
    return p->n_free_cls[STATE_CLS] + p->n_cached_cls[STATE_CLS];
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
    /* a recurrent model's sequence needs its working state and room for a snapshot */
    if (p->count[STATE_CLS] > 0 && kv_pool_state_available(p) < 2) return 0;
    for (int g = 0; g < p->layout.n_groups; g++) {
        int32_t need[2] = {0, 0};
        int64_t held = kv_seq_max_blocks(p->layout.window[g], p->cfg.max_chunk, p->cfg.block_tokens,
                                         (int64_t)n_blocks * p->cfg.block_tokens);
        for (int32_t j = n_blocks - (int32_t)held; j < n_blocks; j++) {
            if (kv_pool_class_of(p, j) == KV_CLASS_MAIN) {
                need[1] += n_blocks - j;
                break;
            }
            need[0]++;
        }
        for (int c = 0; c < 2; c++)
            if (need[c] > p->n_free_cls[2 * g + c] + p->n_cached_cls[2 * g + c]) return 0;
    }
    return 1;
}

int kv_pool_check(const kv_pool *p)
{
    int32_t nf = 0, na = 0, nc = 0, on_lru = 0;
    for (int32_t b = 0; b < p->n_total; b++) {
        const kv_meta *m = &p->meta[b];
        if ((m->refcnt > 0) != (m->state == KV_BLOCK_ACTIVE)) return 1; /* (1) */
        nf += m->state == KV_BLOCK_FREE;
        na += m->state == KV_BLOCK_ACTIVE;
        nc += m->state == KV_BLOCK_CACHED;
        if (m->has_hash && index_find(p, m->hash) != b) return 4;
        if (!m->has_hash && m->state == KV_BLOCK_CACHED) return 4;
        if (b < p->start[m->cls] || b >= p->start[m->cls] + p->count[m->cls]) return 5;
    }
    for (int c = 0; c < N_CLS; c++) {
        int32_t here = 0;
        for (kv_block_id b = p->lru_head[c]; b >= 0; b = p->meta[b].lru_next) {
            if (p->meta[b].state != KV_BLOCK_CACHED || cls_of(p, b) != c) return 2;
            if (++here > p->n_total) return 2;
        }
        if (here != p->n_cached_cls[c]) return 2;
        on_lru += here;
        int32_t nfree = 0;
        for (kv_block_id b = p->free_head[c]; b >= 0; b = p->meta[b].free_next) {
            if (p->meta[b].state != KV_BLOCK_FREE || cls_of(p, b) != c) return 5;
            if (++nfree > p->n_total) return 5;
        }
        if (nfree != p->n_free_cls[c]) return 5;
    }
    if (on_lru != nc) return 2;
    if (nf != p->n_free || na != p->n_active || nc != p->n_cached) return 3;
    if (nf + na + nc != p->n_total) return 3;
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

kv_block_id kv_pool_lookup_tier(kv_pool *p, int group, uint64_t hash, int32_t block_index)
{
    uint64_t key = kv_pool_key(group, hash);
    if (!p->tier.load || index_find(p, key) >= 0) return -1;
    kv_block_id b;
    if (kv_pool_alloc_at(p, group, block_index, &b, NULL) != KILN_OK) return -1;
    size_t n;
    void *d = kv_pool_block_data_mut(p, b, &n);
    if (p->tier.load(p->tier.user, key, d, n) != 0 || kv_pool_publish(p, b, hash) != 1) {
        kv_pool_release(p, b); /* never published: back to FREE */
        return -1;
    }
    return b;
}

int kv_pool_find(const kv_pool *p, int group, uint64_t hash)
{
    uint64_t key = kv_pool_key(group, hash);
    if (index_find(p, key) >= 0) return 1;
    return p->tier.has && p->tier.has(p->tier.user, key) ? 2 : 0;
}

kv_block_id kv_pool_peek(const kv_pool *p, int group, uint64_t hash)
{
    return index_find(p, kv_pool_key(group, hash));
}

kv_block_id kv_pool_next_published(const kv_pool *p, int32_t *cursor, uint64_t *hash)
{
    while (*cursor >= 0 && *cursor < p->n_total) {
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
