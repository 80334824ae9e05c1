/*
 * gr_cache.c — compiled grammars reused across requests (see gr.h).
 *
 * A hash table (chains, keyed by XXH3 of the key bytes, compared in full) and
 * a doubly linked recency list, both under one mutex. Entry cost = key + aux +
 * gr_grammar_bytes. Invariants:
 *   (1) bytes = sum of the entries' costs <= max_bytes after every put
 *   (2) every entry holds exactly one reference to its grammar, dropped when
 *       the entry goes (evicted or cache destroyed); readers hold their own
 * Errors: KILN_E_NOMEM. Threads: any; compiles happen outside the lock.
 */
#include "grammar/gr_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef struct ent {
    uint64_t hash;
    uint8_t *key; /* OWNED: key bytes, then aux bytes */
    size_t klen, alen, cost;
    gr_grammar *g;             /* one reference */
    struct ent *chain;         /* next in the bucket */
    struct ent *newer, *older; /* recency list */
} ent;

struct gr_cache {
    pthread_mutex_t mu;
    ent **tab; /* OWNED [nb] */
    size_t nb;
    ent *newest, *oldest;
    gr_cache_stats st;
};

kiln_code gr_cache_create(size_t max_bytes, gr_cache **out, kiln_err *err)
{
    *out = NULL;
    gr_cache *c = calloc(1, sizeof *c);
    if (c) c->tab = calloc(64, sizeof *c->tab);
    if (!c || !c->tab) {
        free(c);
        return kiln_fail(err, KILN_E_NOMEM, "grammar cache: out of memory");
    }
    c->nb = 64;
    c->st.max_bytes = max_bytes;
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return KILN_OK;
}

static void ent_free(ent *e)
{
    gr_grammar_release(e->g);
    free(e->key);
    free(e);
}

void gr_cache_destroy(gr_cache *c)
{
    if (!c) return;
    for (ent *e = c->newest, *nx; e; e = nx) {
        nx = e->older;
        ent_free(e);
    }
    free(c->tab);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static ent **slot(gr_cache *c, uint64_t h, const void *key, size_t klen)
{
    ent **p = &c->tab[h & (c->nb - 1)];
    while (*p && !((*p)->hash == h && (*p)->klen == klen && !memcmp((*p)->key, key, klen)))
        p = &(*p)->chain;
    return p;
}

static void list_unlink(gr_cache *c, ent *e)
{
    if (e->newer)
        e->newer->older = e->older;
    else
        c->newest = e->older;
    if (e->older)
        e->older->newer = e->newer;
    else
        c->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void list_front(gr_cache *c, ent *e)
{
    e->older = c->newest;
    e->newer = NULL;
    if (c->newest) c->newest->newer = e;
    c->newest = e;
    if (!c->oldest) c->oldest = e;
}

bool gr_cache_get(gr_cache *c, const void *key, size_t klen, gr_grammar **g, void *aux,
                  size_t aux_cap, size_t *aux_len)
{
    *g = NULL;
    if (aux_len) *aux_len = 0;
    if (!c) return false;
    uint64_t h = XXH3_64bits(key, klen);
    pthread_mutex_lock(&c->mu);
    ent *e = *slot(c, h, key, klen);
    if (!e) {
        c->st.misses++;
        pthread_mutex_unlock(&c->mu);
        return false;
    }
    c->st.hits++;
    list_unlink(c, e);
    list_front(c, e);
    gr_grammar_retain(e->g);
    *g = e->g;
    size_t n = e->alen < aux_cap ? e->alen : aux_cap;
    if (n) memcpy(aux, e->key + e->klen, n);
    if (aux_len) *aux_len = n;
    pthread_mutex_unlock(&c->mu);
    return true;
}

/* Doubles the bucket array when the chains grow long; a failed allocation only
 * leaves them longer. Under mu. */
static void maybe_grow(gr_cache *c)
{
    if ((size_t)c->st.entries < c->nb || c->nb > ((size_t)1 << 40)) return;
    size_t nb = c->nb * 2;
    ent **t = calloc(nb, sizeof *t);
    if (!t) return;
    for (size_t i = 0; i < c->nb; i++)
        for (ent *e = c->tab[i], *nx; e; e = nx) {
            nx = e->chain;
            e->chain = t[e->hash & (nb - 1)];
            t[e->hash & (nb - 1)] = e;
        }
    free(c->tab);
    c->tab = t;
    c->nb = nb;
}

static void evict_oldest(gr_cache *c)
{
    ent *e = c->oldest;
    ent **p = slot(c, e->hash, e->key, e->klen);
    *p = e->chain;
    list_unlink(c, e);
    c->st.bytes -= e->cost;
    c->st.entries--;
    c->st.evictions++;
    ent_free(e);
}

kiln_code gr_cache_put(gr_cache *c, const void *key, size_t klen, gr_grammar *g, const void *aux,
                       size_t aux_len, kiln_err *err)
{
    if (!c || !g) return KILN_OK;
    if (klen > SIZE_MAX / 4 || aux_len > SIZE_MAX / 4) return KILN_OK; /* the sum cannot wrap */
    size_t cost = sizeof(ent) + klen + aux_len + gr_grammar_bytes(g);
    if (cost > c->st.max_bytes) return KILN_OK;
    ent *e = calloc(1, sizeof *e);
    uint8_t *kb = e ? malloc(klen + aux_len + 1) : NULL;
    if (!kb) {
        free(e);
        return kiln_fail(err, KILN_E_NOMEM, "grammar cache: out of memory");
    }
    memcpy(kb, key, klen);
    if (aux_len) memcpy(kb + klen, aux, aux_len);
    *e = (ent){.hash = XXH3_64bits(key, klen),
               .key = kb,
               .klen = klen,
               .alen = aux_len,
               .cost = cost,
               .g = g};
    pthread_mutex_lock(&c->mu);
    ent **p = slot(c, e->hash, key, klen);
    if (*p) { /* another request compiled the same key first: keep its entry */
        pthread_mutex_unlock(&c->mu);
        free(kb);
        free(e);
        return KILN_OK;
    }
    gr_grammar_retain(g);
    *p = e;
    list_front(c, e);
    c->st.entries++;
    c->st.bytes += cost;
    while (c->st.bytes > c->st.max_bytes)
        evict_oldest(c); /* never e itself: cost <= max_bytes */
    maybe_grow(c);
    pthread_mutex_unlock(&c->mu);
    return KILN_OK;
}

gr_cache_stats gr_cache_get_stats(gr_cache *c)
{
    gr_cache_stats s = {0};
    if (!c) return s;
    pthread_mutex_lock(&c->mu);
    s = c->st;
    pthread_mutex_unlock(&c->mu);
    return s;
}
