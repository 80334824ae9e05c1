/*
 * tok_bpe.c — the BPE model: one pre-token in, ids out.
 *
 * Steps for a word (HF Rust's BPE::merge_word + Word::merge_all):
 *   1. ignore_merges: a word that is itself in the vocab is one token.
 *   2. symbols: one per character (per byte, through bytes_to_unicode, for a
 *      lazy byte-level word); a character missing from the vocab becomes its
 *      <0xXX> byte tokens (byte_fallback) or unk (consecutive unks fused when
 *      fuse_unk).
 *   3. merges: repeatedly merge the adjacent pair with the lowest rank, the
 *      leftmost among equals. Short words scan (O(n^2), n small); long words use
 *      a binary heap with lazy deletion over a linked list: O(n log n), so 1 MB
 *      without a space or of one repeated character stays near-linear.
 * A per-call cache (tok_bpe_cache) maps word bytes to their ids: prose repeats
 * words. Invariants:
 *   (1) a heap entry is applied only if both its symbols are alive, adjacent,
 *       and still form a pair whose merge gives the entry's id.
 *   (2) the cache holds words shorter than CACHE_MAX_WORD bytes, at most
 *       CACHE_MAX_ENTRIES of them, and only grows within one tok_encode call.
 *   (3) splitting a word where no vocab token spans the split point gives the
 *       same ids: a merge across it would create a token that is not in the vocab.
 * Errors: KILN_E_NOMEM.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_int.h"

#define SCAN_MAX 64 /* words with at most this many symbols merge by scanning */
#define CACHE_MAX_WORD 256
#define CACHE_MAX_ENTRIES 65536

struct tok_bpe_cache {
    tok_strmap map; /* word bytes -> entry index */
    struct {
        uint32_t off, n;
    } *ents;        /* OWNED */
    size_t n_ents, cap_ents;
    int32_t *ids;   /* OWNED pool */
    size_t n_ids, cap_ids;
};

tok_bpe_cache *tok_bpe_cache_new(void)
{
    tok_bpe_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    if (tok_strmap_init(&c->map, 256)) {
        free(c);
        return NULL;
    }
    return c;
}

void tok_bpe_cache_free(tok_bpe_cache *c)
{
    if (!c) return;
    tok_strmap_free(&c->map);
    free(c->ents);
    free(c->ids);
    free(c);
}

static int ids_push(int32_t **ids, size_t *n, size_t *cap, int32_t id)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        int32_t *p = realloc(*ids, c * sizeof *p);
        if (!p) return -1;
        *ids = p;
        *cap = c;
    }
    (*ids)[(*n)++] = id;
    return 0;
}

static void cache_put(tok_bpe_cache *c, const char *s, size_t n, const int32_t *ids, size_t k)
{
    if (!c || n >= CACHE_MAX_WORD || c->n_ents >= CACHE_MAX_ENTRIES) return;
    if (c->n_ents == c->cap_ents) {
        size_t cap = c->cap_ents ? c->cap_ents * 2 : 256;
        void *p = realloc(c->ents, cap * sizeof *c->ents);
        if (!p) return;
        c->ents = p;
        c->cap_ents = cap;
    }
    while (c->n_ids + k > c->cap_ids) {
        size_t cap = c->cap_ids ? c->cap_ids * 2 : 1024;
        int32_t *p = realloc(c->ids, cap * sizeof *p);
        if (!p) return;
        c->ids = p;
        c->cap_ids = cap;
    }
    if (tok_strmap_put(&c->map, s, n, (int32_t)c->n_ents)) return; /* a cache: failure is fine */
    if (k) memcpy(c->ids + c->n_ids, ids, k * sizeof *ids);
    c->ents[c->n_ents].off = (uint32_t)c->n_ids;
    c->ents[c->n_ents].n = (uint32_t)k;
    c->n_ents++;
    c->n_ids += k;
}

/* ================================================================ symbols */

/* Appends the initial symbols of word s to sym. */
static int word_symbols(const tok_tokenizer *t, const char *s, size_t n, bool bytelevel,
                        int32_t **sym, size_t *ns, size_t *cap)
{
    if (bytelevel) {
        for (size_t i = 0; i < n; i++) {
            int32_t id = t->bl_ids[(unsigned char)s[i]];
            if (id < 0) id = t->unk_id;
            if (id >= 0 && ids_push(sym, ns, cap, id)) return -1;
        }
        return 0;
    }
    const unsigned char *u = (const unsigned char *)s;
    bool prev_unk = false;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int l = tok_utf8_next(u + i, n - i, &cp);
        if (!l) l = 1; /* cannot happen on repaired input; stay total */
        int32_t id = tok_strmap_get(&t->vocab, s + i, (size_t)l);
        if (id >= 0) {
            if (ids_push(sym, ns, cap, id)) return -1;
            prev_unk = false;
        } else {
            bool done = false;
            if (t->byte_fallback) {
                bool all = true;
                for (int k = 0; k < l; k++) all = all && t->byte_ids[u[i + (size_t)k]] >= 0;
                if (all) {
                    for (int k = 0; k < l; k++)
                        if (ids_push(sym, ns, cap, t->byte_ids[u[i + (size_t)k]])) return -1;
                    done = true;
                    prev_unk = false;
                }
            }
            if (!done && t->unk_id >= 0) {
                if (!(t->fuse_unk && prev_unk) && ids_push(sym, ns, cap, t->unk_id)) return -1;
                prev_unk = true;
            }
        }
        i += (size_t)l;
    }
    return 0;
}

/* ================================================================ merging */

/* Pair ranks are looked up once and refreshed only next to a merge: the scan
 * itself touches a small int array, the merge table O(n) times. */
static void pair_at(const tok_tokenizer *t, const int32_t *sym, size_t i, int32_t *rank,
                    int32_t *id)
{
    const struct tok_mergeent *e = tok_mergemap_get(&t->merges, sym[i], sym[i + 1]);
    rank[i] = e ? e->rank : INT32_MAX;
    id[i] = e ? e->id : -1;
}

static void merge_scan(const tok_tokenizer *t, int32_t *sym, size_t *ns)
{
    size_t n = *ns;
    int32_t rank[SCAN_MAX], id[SCAN_MAX];
    for (size_t i = 0; i + 1 < n; i++) pair_at(t, sym, i, rank, id);
    while (n > 1) {
        int32_t best = INT32_MAX;
        size_t at = 0;
        for (size_t i = 0; i + 1 < n; i++)
            if (rank[i] < best) {
                best = rank[i];
                at = i;
            }
        if (best == INT32_MAX) break;
        sym[at] = id[at];
        memmove(sym + at + 1, sym + at + 2, (n - at - 2) * sizeof *sym);
        if (at + 2 < n) {
            memmove(rank + at + 1, rank + at + 2, (n - at - 3) * sizeof *rank);
            memmove(id + at + 1, id + at + 2, (n - at - 3) * sizeof *id);
        }
        n--;
        if (at + 1 < n) pair_at(t, sym, at, rank, id);
        if (at > 0) pair_at(t, sym, at - 1, rank, id);
    }
    *ns = n;
}

/* A 4-ary min-heap of (rank << 32 | pos): one integer compare orders by rank,
 * then leftmost position; the merged id is looked up again when popped (a rank
 * names exactly one pair in the merge table, so it also validates the entry). */
static void heap_push(uint64_t *h, size_t *n, uint64_t e)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 4;
        if (h[p] <= e) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static uint64_t heap_pop(uint64_t *h, size_t *n)
{
    uint64_t top = h[0], last = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 4 * i + 1, best = c;
        if (c >= m) break;
        for (size_t k = c + 1; k < c + 4 && k < m; k++)
            if (h[k] < h[best]) best = k;
        if (h[best] >= last) break;
        h[i] = h[best];
        i = best;
    }
    if (m) h[i] = last;
    return top;
}

static void push_pair(const tok_tokenizer *t, const int32_t *sym, uint64_t *h, size_t *hn,
                      int32_t p, int32_t q)
{
    const struct tok_mergeent *e = tok_mergemap_get(&t->merges, sym[p], sym[q]);
    if (e) heap_push(h, hn, (uint64_t)(uint32_t)e->rank << 32 | (uint32_t)p);
}

static int merge_heap(const tok_tokenizer *t, int32_t *sym, size_t *ns)
{
    size_t n = *ns;
    int32_t *prev = malloc(n * sizeof *prev), *next = malloc(n * sizeof *next);
    /* each merge adds at most 2 entries on top of the initial n - 1 */
    uint64_t *h = malloc((3 * n + 1) * sizeof *h);
    if (!prev || !next || !h) {
        free(prev);
        free(next);
        free(h);
        return -1;
    }
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        if (i + 1 < n) push_pair(t, sym, h, &hn, (int32_t)i, (int32_t)i + 1);
    }
    while (hn) {
        uint64_t top = heap_pop(h, &hn);
        int32_t p = (int32_t)(uint32_t)top, q = next[p];
        if (sym[p] < 0 || q < 0) continue; /* invariant (1) */
        const struct tok_mergeent *e = tok_mergemap_get(&t->merges, sym[p], sym[q]);
        if (!e || (uint32_t)e->rank != (uint32_t)(top >> 32)) continue;
        sym[p] = e->id;
        sym[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        if (prev[p] >= 0) push_pair(t, sym, h, &hn, prev[p], p);
        if (next[p] >= 0) push_pair(t, sym, h, &hn, p, next[p]);
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (sym[i] >= 0) sym[k++] = sym[i];
    *ns = k;
    free(prev);
    free(next);
    free(h);
    return 0;
}

/* ================================================================ API */

static int32_t whole_word_id(const tok_tokenizer *t, const char *s, size_t n, bool bytelevel)
{
    if (!bytelevel) return tok_strmap_get(&t->vocab, s, n);
    char stackbuf[512];
    stackbuf[0] = 0;
    char *buf = n * 2 <= sizeof stackbuf ? stackbuf : calloc(n, 2);
    if (!buf) return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += (size_t)tok_bytelevel_char((unsigned char)s[i], buf + k);
    int32_t id = tok_strmap_get(&t->vocab, buf, k);
    if (buf != stackbuf) free(buf);
    return id;
}

static kiln_code bpe_one(const tok_tokenizer *t, tok_bpe_cache *cache, const char *s, size_t n,
                         bool bytelevel, int32_t **ids, size_t *nids, size_t *cap, kiln_err *err);

static bool meta_prev_ok(const tok_tokenizer *t, const char *s, size_t i)
{
    size_t p = i - 1;
    while (p > 0 && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
    uint32_t cp;
    if (!tok_utf8_next((const unsigned char *)s + p, i - p, &cp)) return false;
    for (int j = 0; j < t->n_meta_prev; j++)
        if (t->meta_prev[j] == cp) return false;
    return true;
}

/* Invariant (3): a long SentencePiece word splits before each "▁" that no merge
 * can cross (meta_split), so each part is BPE'd (and cached) on its own with the
 * same result. */
kiln_code tok_bpe_word(const tok_tokenizer *t, tok_bpe_cache *cache, const char *s, size_t n,
                       bool bytelevel, int32_t **ids, size_t *nids, size_t *cap, kiln_err *err)
{
    if (bytelevel || !t->meta_split || n < 64) return bpe_one(t, cache, s, n, bytelevel, ids, nids, cap, err);
    size_t start = 0;
    for (size_t i = 1; i + 3 <= n; i++) {
        if ((unsigned char)s[i] != 0xE2 || (unsigned char)s[i + 1] != 0x96 || (unsigned char)s[i + 2] != 0x81)
            continue;
        if (!meta_prev_ok(t, s, i)) continue;
        kiln_code rc = bpe_one(t, cache, s + start, i - start, false, ids, nids, cap, err);
        if (rc != KILN_OK) return rc;
        start = i;
    }
    return bpe_one(t, cache, s + start, n - start, false, ids, nids, cap, err);
}

static kiln_code bpe_one(const tok_tokenizer *t, tok_bpe_cache *cache, const char *s, size_t n,
                         bool bytelevel, int32_t **ids, size_t *nids, size_t *cap, kiln_err *err)
{
    if (n == 0) return KILN_OK;
    if (cache && n < CACHE_MAX_WORD) {
        int32_t e = tok_strmap_get(&cache->map, s, n);
        if (e >= 0) {
            for (uint32_t i = 0; i < cache->ents[e].n; i++)
                if (ids_push(ids, nids, cap, cache->ids[cache->ents[e].off + i])) goto nomem;
            return KILN_OK;
        }
    }
    if (t->ignore_merges) {
        int32_t id = whole_word_id(t, s, n, bytelevel);
        if (id >= 0) {
            if (ids_push(ids, nids, cap, id)) goto nomem;
            cache_put(cache, s, n, &id, 1);
            return KILN_OK;
        }
    }
    int32_t *sym = NULL;
    size_t ns = 0, scap = 0;
    if (word_symbols(t, s, n, bytelevel, &sym, &ns, &scap)) {
        free(sym);
        goto nomem;
    }
    if (ns <= SCAN_MAX)
        merge_scan(t, sym, &ns);
    else if (merge_heap(t, sym, &ns)) {
        free(sym);
        goto nomem;
    }
    for (size_t i = 0; i < ns; i++)
        if (ids_push(ids, nids, cap, sym[i])) {
            free(sym);
            goto nomem;
        }
    cache_put(cache, s, n, sym, ns);
    free(sym);
    return KILN_OK;
nomem:
    return kiln_fail(err, KILN_E_NOMEM, "tokenizer: out of memory in BPE");
}
