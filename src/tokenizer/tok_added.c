/*
 * tok_added.c — added tokens in the input: a byte trie over their contents and
 * HF's leftmost-longest search, with special (switchable), lstrip, rstrip and
 * single_word.
 *
 * Node 0 is the root; root children sit in a 256-entry array (the hot path: most
 * input bytes start no token), deeper edges in one open-addressing table.
 * Invariants:
 *   (1) term[node] >= 0 iff some added token's content ends at node.
 *   (2) a match never starts before `from`, so lstrip cannot eat into the
 *       previous match.
 * Threads: read-only after load. Errors: -1 on allocation failure.
 */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_int.h"

int tok_trie_init(tok_trie *tr)
{
    memset(tr, 0, sizeof *tr);
    for (int i = 0; i < 256; i++) tr->root[i] = -1;
    tr->cap_nodes = 64;
    tr->term = malloc(tr->cap_nodes * sizeof *tr->term);
    tr->edge_mask = 255;
    tr->edges = calloc(tr->edge_mask + 1, sizeof *tr->edges);
    if (!tr->term || !tr->edges) return -1;
    tr->term[0] = -1;
    tr->n_nodes = 1;
    return 0;
}

void tok_trie_free(tok_trie *tr)
{
    free(tr->term);
    free(tr->edges);
    memset(tr, 0, sizeof *tr);
}

static size_t edge_slot(const tok_trie *tr, uint64_t key)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & tr->edge_mask;
}

static int32_t edge_get(const tok_trie *tr, int32_t node, unsigned char c)
{
    if (node == 0) return tr->root[c];
    uint64_t key = ((uint64_t)node << 8 | c) + 1;
    size_t i = edge_slot(tr, key);
    while (tr->edges[i].key) {
        if (tr->edges[i].key == key) return tr->edges[i].child;
        i = (i + 1) & tr->edge_mask;
    }
    return -1;
}

static int edge_grow(tok_trie *tr)
{
    size_t cap = (tr->edge_mask + 1) * 2;
    struct tok_edge *old = tr->edges;
    size_t old_cap = tr->edge_mask + 1;
    tr->edges = calloc(cap, sizeof *tr->edges);
    if (!tr->edges) {
        tr->edges = old;
        return -1;
    }
    tr->edge_mask = cap - 1;
    for (size_t i = 0; i < old_cap; i++) {
        if (!old[i].key) continue;
        size_t j = edge_slot(tr, old[i].key);
        while (tr->edges[j].key) j = (j + 1) & tr->edge_mask;
        tr->edges[j] = old[i];
    }
    free(old);
    return 0;
}

static int32_t node_new(tok_trie *tr)
{
    if (tr->n_nodes == tr->cap_nodes) {
        int32_t *p = realloc(tr->term, tr->cap_nodes * 2 * sizeof *p);
        if (!p) return -1;
        tr->term = p;
        tr->cap_nodes *= 2;
    }
    tr->term[tr->n_nodes] = -1;
    return (int32_t)tr->n_nodes++;
}

int tok_trie_add(tok_trie *tr, const char *s, size_t n, int32_t idx)
{
    if (n == 0) return 0; /* an empty token can never match */
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int32_t ch = edge_get(tr, node, c);
        if (ch < 0) {
            ch = node_new(tr);
            if (ch < 0) return -1;
            if (node == 0) {
                tr->root[c] = ch;
            } else {
                if ((tr->n_edges + 1) * 2 > tr->edge_mask + 1 && edge_grow(tr)) return -1;
                uint64_t key = ((uint64_t)node << 8 | c) + 1;
                size_t j = edge_slot(tr, key);
                while (tr->edges[j].key) j = (j + 1) & tr->edge_mask;
                tr->edges[j] = (struct tok_edge){key, ch};
                tr->n_edges++;
            }
        }
        node = ch;
    }
    if (tr->term[node] < 0) tr->term[node] = idx; /* first definition wins */
    return 0;
}

/* ================================================================ search */

static bool is_word_char(uint32_t cp)
{
    if (cp == '_') return true;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
           (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

static bool last_char(const char *s, size_t end, size_t floor, uint32_t *cp, size_t *at)
{
    if (end <= floor) return false;
    size_t p = end - 1;
    while (p > floor && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
    if (!tok_utf8_next((const unsigned char *)s + p, end - p, cp)) return false;
    *at = p;
    return true;
}

static bool single_word_ok(const char *s, size_t n, size_t ms, size_t me)
{
    uint32_t cp;
    size_t at;
    if (last_char(s, ms, 0, &cp, &at) && is_word_char(cp)) return false;
    if (me < n && tok_utf8_next((const unsigned char *)s + me, n - me, &cp) && is_word_char(cp))
        return false;
    return true;
}

int tok_trie_find(const tok_tokenizer *t, const tok_trie *tr, const char *s, size_t n,
                  size_t from, bool parse_special, size_t *ms, size_t *me, int32_t *idx)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = from; i < n; i++) {
        int32_t node = tr->root[u[i]];
        if (node < 0) continue;
        size_t j = i + 1, best_end = 0;
        int32_t best = -1;
        for (;;) {
            int32_t a = tr->term[node];
            if (a >= 0 && (parse_special || !t->added[a].special)) {
                best = a;
                best_end = j;
            }
            if (j == n) break;
            node = edge_get(tr, node, u[j]);
            if (node < 0) break;
            j++;
        }
        if (best < 0) continue;
        const tok_added *ad = &t->added[best];
        if (ad->single_word && !single_word_ok(s, n, i, best_end)) continue;
        size_t a0 = i, b0 = best_end;
        if (ad->lstrip) {
            uint32_t cp;
            size_t at;
            while (last_char(s, a0, from, &cp, &at) && tok_is_whitespace(cp)) a0 = at;
        }
        if (ad->rstrip) {
            uint32_t cp;
            int l;
            while (b0 < n && (l = tok_utf8_next(u + b0, n - b0, &cp)) && tok_is_whitespace(cp))
                b0 += (size_t)l;
        }
        *ms = a0;
        *me = b0;
        *idx = best;
        return 1;
    }
    return 0;
}
