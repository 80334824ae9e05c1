/*
 * gr_match.c — one sequence's parse state: the set of pushdown stacks that
 * are consistent with the text so far, token masks, advancing, rollback.
 *
 * A stack is interned as (top gstate, parent stack) -> id; id 0 is the empty
 * stack (the root rule finished: the text is a sentence). A configuration is
 * an interned sorted set of stacks, closed under the moves that consume
 * nothing: each member's top state has a byte edge, or the member is stack 0.
 *   closure:  a call edge pushes (callee start) over (return state); a final
 *             top pops; a tail call returns straight to the caller's caller
 *   step(C, b): every member whose top has an edge on b moves, then closure
 * Steps are memoized per configuration in a lazily filled row of 256 entries,
 * so the configurations form a lazy DFA over bytes: walking the token trie from
 * C costs one table read per trie node visited.
 * Masks: cached per configuration. A configuration whose every stack sits in a
 * leaf rule (a JSON string body, say) is answered from the vocabulary's leaf
 * sets: their union, plus each `maybe` token checked by stepping its bytes.
 * Otherwise the trie is walked, skipping each dead subtree at once. Special
 * tokens sit in the trie under their markers (0xFF id): only a grammar that
 * names one (gr_special) ever steps into that subtree.
 * Invariants:
 *   (1) hist[n_hist-1] is the current configuration; hist[0] the start
 *   (2) rows and masks are caches: dropping them (memory cap) changes no result
 *   (3) a configuration is never empty (an empty step result is DEAD)
 * Errors: KILN_E_INVALID for a token the grammar does not allow; KILN_E_BUDGET
 * when stacks/configurations exceed the matcher's cap; KILN_E_NOMEM.
 */
#include "grammar/gr_int.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define MAX_DEPTH 1000       /* parse stack frames (JSON nesting, recursion) */
#define MAX_STACKS (1 << 22) /* interned stacks per matcher */
#define MAX_CONFS (1 << 20)  /* interned configurations per matcher */
#define ROW_CACHE_BYTES ((size_t)64 << 20)
#define MASK_CACHE_BYTES ((size_t)64 << 20)
#define UNKNOWN (-2)
#define DEAD (-1)

typedef struct {
    int32_t top, parent; /* top gstate (-1 for stack 0); parent stack id */
    int32_t depth, dist; /* frames; fewest bytes to empty the stack */
} gstack;

typedef struct {
    int32_t off, n; /* members in spool */
    int32_t dist;   /* min over members */
    int32_t row;    /* index of its 256-entry row in rows, -1 none */
    int32_t mask;   /* index in masks, -1 none */
    uint8_t accept;
    uint8_t leafy; /* 0 unknown, 1 every member is in a leaf with a useful set, 2 no */
} gconf;

typedef struct {
    int32_t n_ids; /* < 0: a bitset of words at off; else n_ids ids at off */
    size_t off;    /* in mpool (uint32 units) */
} gmask;

typedef struct {
    int32_t *v;
    int32_t n, cap;
} ivec;

struct gr_matcher {
    gr_grammar *g; /* retained */
    gr_vocab *v;   /* BORROWED (the leaf cache inside mutates under its lock) */
    gstack *st;
    int32_t n_st, cap_st;
    int32_t *st_tab; /* open addressing: id + 1 */
    uint32_t st_mask;
    gconf *cf;
    int32_t n_cf, cap_cf;
    int32_t *cf_tab;
    uint32_t cf_mask;
    ivec spool;    /* members of configurations */
    int32_t *rows; /* [n_rows * 256] */
    int32_t n_rows, cap_rows;
    gmask *masks;
    int32_t n_masks, cap_masks;
    uint32_t *mpool;
    size_t n_mpool, cap_mpool;
    ivec hist; /* configurations after each accept (invariant 1) */
    /* scratch */
    ivec out, work;
    int32_t *mark; /* per stack: generation of the last closure that saw it */
    int32_t gen;
    int32_t *walk; /* [max trie depth + 1] configurations along the walk */
    const gr_leaf_set **lsets;
    int32_t cap_lsets;
};

/* ------------------------------------------------------------ small helpers */

static int ipush(ivec *a, int32_t x)
{
    if (a->n == a->cap) {
        int32_t nc = a->cap ? a->cap * 2 : 64;
        int32_t *p = realloc(a->v, sizeof *p * (size_t)nc);
        if (!p) return -1;
        a->v = p;
        a->cap = nc;
    }
    a->v[a->n++] = x;
    return 0;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static uint32_t mix2(int32_t a, int32_t b)
{
    uint64_t x = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(x >> 32) ^ (uint32_t)x;
}

/* ------------------------------------------------------------ stacks */

static int st_rehash(gr_matcher *m)
{
    uint32_t cap = m->st_mask ? (m->st_mask + 1) * 2 : 1024;
    int32_t *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (int32_t i = 0; i < m->n_st; i++) {
        uint32_t j = mix2(m->st[i].top, m->st[i].parent) & (cap - 1);
        while (t[j])
            j = (j + 1) & (cap - 1);
        t[j] = i + 1;
    }
    free(m->st_tab);
    m->st_tab = t;
    m->st_mask = cap - 1;
    return 0;
}

/* The stack (top over parent): its id, -1 on OOM / cap, -3 when too deep. */
static int32_t st_intern(gr_matcher *m, int32_t top, int32_t parent)
{
    uint32_t j = mix2(top, parent) & m->st_mask;
    while (m->st_tab[j]) {
        int32_t i = m->st_tab[j] - 1;
        if (m->st[i].top == top && m->st[i].parent == parent) return i;
        j = (j + 1) & m->st_mask;
    }
    if (m->st[parent].depth >= MAX_DEPTH) return -3;
    if (m->n_st >= MAX_STACKS) return -1;
    if (m->n_st == m->cap_st) {
        int32_t nc = m->cap_st * 2;
        gstack *p = realloc(m->st, sizeof *p * (size_t)nc);
        int32_t *mk = realloc(m->mark, sizeof *mk * (size_t)nc);
        if (mk) m->mark = mk;
        if (!p || !mk) {
            if (p) m->st = p;
            return -1;
        }
        memset(mk + m->cap_st, 0, sizeof *mk * (size_t)(nc - m->cap_st));
        m->st = p;
        m->cap_st = nc;
    }
    int64_t d = (int64_t)m->g->dist[top] + m->st[parent].dist;
    m->st[m->n_st] =
        (gstack){top, parent, m->st[parent].depth + 1, d > GR_INF_DIST ? GR_INF_DIST : (int32_t)d};
    m->st_tab[j] = ++m->n_st;
    if ((uint32_t)m->n_st * 2 > m->st_mask && st_rehash(m)) return -1;
    return m->n_st - 1;
}

/* ------------------------------------------------------------ configurations */

static uint32_t cf_hash(const int32_t *s, int32_t n)
{
    uint64_t h = XXH3_64bits(s, sizeof *s * (size_t)n);
    return (uint32_t)(h ^ (h >> 32));
}

static int cf_rehash(gr_matcher *m)
{
    uint32_t cap = m->cf_mask ? (m->cf_mask + 1) * 2 : 1024;
    int32_t *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (int32_t i = 0; i < m->n_cf; i++) {
        uint32_t j = cf_hash(m->spool.v + m->cf[i].off, m->cf[i].n) & (cap - 1);
        while (t[j])
            j = (j + 1) & (cap - 1);
        t[j] = i + 1;
    }
    free(m->cf_tab);
    m->cf_tab = t;
    m->cf_mask = cap - 1;
    return 0;
}

/* The configuration of sorted unique members s[0..n), n >= 1; -1 on OOM / cap. */
static int32_t cf_intern(gr_matcher *m, const int32_t *s, int32_t n)
{
    uint32_t h = cf_hash(s, n), j = h & m->cf_mask;
    while (m->cf_tab[j]) {
        const gconf *c = &m->cf[m->cf_tab[j] - 1];
        if (c->n == n && !memcmp(m->spool.v + c->off, s, sizeof *s * (size_t)n))
            return m->cf_tab[j] - 1;
        j = (j + 1) & m->cf_mask;
    }
    if (m->n_cf >= MAX_CONFS) return -1;
    if (m->n_cf == m->cap_cf) {
        int32_t nc = m->cap_cf * 2;
        gconf *p = realloc(m->cf, sizeof *p * (size_t)nc);
        if (!p) return -1;
        m->cf = p;
        m->cap_cf = nc;
    }
    gconf c = {.off = m->spool.n, .n = n, .dist = GR_INF_DIST, .row = -1, .mask = -1};
    for (int32_t i = 0; i < n; i++) {
        if (ipush(&m->spool, s[i])) return -1;
        if (m->st[s[i]].dist < c.dist) c.dist = m->st[s[i]].dist;
        if (s[i] == 0) c.accept = 1;
    }
    m->cf[m->n_cf] = c;
    m->cf_tab[j] = ++m->n_cf;
    if ((uint32_t)m->n_cf * 2 > m->cf_mask && cf_rehash(m)) return -1;
    return m->n_cf - 1;
}

/* Adds the closure of stack s to m->out (see the file comment). -1 on OOM. */
static int closure(gr_matcher *m, int32_t s)
{
    const gr_grammar *g = m->g;
    m->work.n = 0;
    if (ipush(&m->work, s)) return -1;
    while (m->work.n) {
        int32_t x = m->work.v[--m->work.n];
        if (m->mark[x] == m->gen) continue;
        m->mark[x] = m->gen;
        if (x == 0) {
            if (ipush(&m->out, 0)) return -1;
            continue;
        }
        int32_t top = m->st[x].top, parent = m->st[x].parent;
        if (g->flags[top] & GR_ST_BYTES && ipush(&m->out, x)) return -1;
        for (int32_t j = g->call_off[top]; j < g->call_off[top + 1]; j++) {
            const gr_call *c = &g->calls[j];
            int32_t par = c->tail ? parent : st_intern(m, c->ret, parent);
            if (par == -3) continue; /* too deep: this path is cut */
            int32_t y = par < 0 ? par : st_intern(m, c->start, par);
            if (y == -3) continue;
            if (y < 0 || ipush(&m->work, y)) return -1;
        }
        if (g->flags[top] & GR_ST_FINAL && ipush(&m->work, parent)) return -1;
    }
    return 0;
}

/* m->out (unsorted, with repeats) as a configuration; DEAD when empty. */
static int32_t out_intern(gr_matcher *m)
{
    if (m->out.n == 0) return DEAD;
    if ((size_t)m->out.n > 1) /* qsort(NULL, 0) is undefined */
        qsort(m->out.v, (size_t)m->out.n, sizeof *m->out.v, cmp_i32);
    int32_t k = 0;
    for (int32_t i = 0; i < m->out.n; i++)
        if (i == 0 || m->out.v[i] != m->out.v[i - 1]) m->out.v[k++] = m->out.v[i];
    m->out.n = k;
    return cf_intern(m, m->out.v, k);
}

/* Drops every row (invariant 2). */
static void rows_drop(gr_matcher *m)
{
    for (int32_t i = 0; i < m->n_cf; i++)
        m->cf[i].row = -1;
    m->n_rows = 0;
}

static int32_t row_new(gr_matcher *m, int32_t c)
{
    if ((size_t)m->n_rows * 1024 >= ROW_CACHE_BYTES) rows_drop(m);
    if (m->n_rows == m->cap_rows) {
        int32_t nc = m->cap_rows ? m->cap_rows * 2 : 64;
        int32_t *p = realloc(m->rows, sizeof *p * 256 * (size_t)nc);
        if (!p) return -1;
        m->rows = p;
        m->cap_rows = nc;
    }
    int32_t r = m->n_rows++;
    for (int i = 0; i < 256; i++)
        m->rows[(size_t)r * 256 + i] = UNKNOWN;
    m->cf[c].row = r;
    return r;
}

/* step(c, b) computed (not memoized). -1 DEAD, -4 error. */
static int32_t step_compute(gr_matcher *m, int32_t c, uint8_t b)
{
    const gr_grammar *g = m->g;
    m->out.n = 0;
    if (++m->gen == INT32_MAX) {
        memset(m->mark, 0, sizeof *m->mark * (size_t)m->cap_st);
        m->gen = 1;
    }
    int32_t off = m->cf[c].off, n = m->cf[c].n;
    for (int32_t i = 0; i < n; i++) {
        int32_t s = m->spool.v[off + i];
        if (s == 0) continue;
        int32_t t = gr_step_byte(g, m->st[s].top, b);
        if (t < 0) continue;
        int32_t y = st_intern(m, t, m->st[s].parent);
        if (y == -3) continue;
        if (y < 0 || closure(m, y)) return -4;
        off = m->cf[c].off; /* spool may have moved */
    }
    int32_t r = out_intern(m);
    return r == -1 && m->out.n ? -4 : r;
}

/* Memoized step: the next configuration, DEAD, or -4 on error. */
static inline int32_t step(gr_matcher *m, int32_t c, uint8_t b)
{
    int32_t r = m->cf[c].row;
    if (r >= 0) {
        int32_t x = m->rows[(size_t)r * 256 + b];
        if (x != UNKNOWN) return x;
    }
    int32_t x = step_compute(m, c, b);
    if (x == -4) return x;
    r = m->cf[c].row;
    if (r < 0 && (r = row_new(m, c)) < 0) return x; /* no row: still a correct answer */
    m->rows[(size_t)r * 256 + b] = x;
    return x;
}

static int32_t step_bytes(gr_matcher *m, int32_t c, const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n && c >= 0; i++)
        c = step(m, c, s[i]);
    return c;
}

/* ------------------------------------------------------------ lifecycle */

void gr_matcher_destroy(gr_matcher *m)
{
    if (!m) return;
    gr_grammar_release(m->g);
    free(m->st);
    free(m->st_tab);
    free(m->cf);
    free(m->cf_tab);
    free(m->spool.v);
    free(m->rows);
    free(m->masks);
    free(m->mpool);
    free(m->hist.v);
    free(m->out.v);
    free(m->work.v);
    free(m->mark);
    free(m->walk);
    free(m->lsets);
    free(m);
}

kiln_code gr_matcher_create(gr_grammar *g, const gr_vocab *v, gr_matcher **out, kiln_err *err)
{
    *out = NULL;
    gr_matcher *m = calloc(1, sizeof *m);
    if (!m) return kiln_fail(err, KILN_E_NOMEM, "grammar matcher: out of memory");
    gr_grammar_retain(g);
    m->g = g;
    m->v = (gr_vocab *)v;
    m->cap_st = 256;
    m->cap_cf = 64;
    m->st = malloc(sizeof *m->st * (size_t)m->cap_st);
    m->mark = calloc((size_t)m->cap_st, sizeof *m->mark);
    m->cf = malloc(sizeof *m->cf * (size_t)m->cap_cf);
    m->walk = malloc(sizeof *m->walk * ((size_t)v->max_depth + 2));
    if (!m->st || !m->mark || !m->cf || !m->walk || st_rehash(m) || cf_rehash(m)) goto nomem;
    m->st[0] = (gstack){-1, -1, 0, 0};
    m->n_st = 1;
    m->st_tab[mix2(-1, -1) & m->st_mask] = 1;
    m->gen = 1;
    m->out.n = 0;
    int32_t root = st_intern(m, g->root, 0);
    if (root < 0 || closure(m, root)) goto nomem;
    int32_t c = out_intern(m);
    if (c < 0 || ipush(&m->hist, c)) goto nomem;
    *out = m;
    return KILN_OK;
nomem:
    gr_matcher_destroy(m);
    return kiln_fail(err, KILN_E_NOMEM, "grammar matcher: out of memory");
}

/* ------------------------------------------------------------ masks */

static void add_tok(const gr_vocab *v, uint64_t *bits, int32_t t)
{
    for (; t >= 0; t = v->dup[t])
        bits[t >> 6] |= 1ull << (t & 63);
}

static kiln_code fail_step(kiln_err *err)
{
    return kiln_fail(err, KILN_E_BUDGET, "grammar: the parse state outgrew its memory cap");
}

/* Walks the token trie from c; within >= 0: only tokens after which the
 * distance is at most `within`. */
static kiln_code walk(gr_matcher *m, int32_t c, int32_t within, uint64_t *bits, kiln_err *err)
{
    const gr_vocab *v = m->v;
    int32_t *cfg = m->walk;
    cfg[0] = c;
    for (int32_t i = 0; i < v->n_nodes;) {
        int32_t d = v->tdepth[i];
        int32_t x = step(m, cfg[d - 1], v->tbyte[i]);
        if (x < 0) {
            if (x == -4) return fail_step(err);
            i = v->tend[i];
            continue;
        }
        cfg[d] = x;
        if (v->ttok[i] >= 0 && (within < 0 || m->cf[x].dist <= within))
            add_tok(v, bits, v->ttok[i]);
        i++;
    }
    return KILN_OK;
}

/* Are all members of c in leaves with useful sets? Fills m->lsets. */
static int leafy(gr_matcher *m, int32_t c)
{
    gconf *C = &m->cf[c];
    if (C->leafy) return C->leafy == 1;
    if (C->n > m->cap_lsets) {
        const gr_leaf_set **p = realloc(m->lsets, sizeof *p * (size_t)C->n);
        if (!p) return 0;
        m->lsets = p;
        m->cap_lsets = C->n;
    }
    int ok = 1;
    for (int32_t i = 0; i < C->n && ok; i++) {
        int32_t s = m->spool.v[C->off + i];
        if (s == 0) {
            m->lsets[i] = NULL;
            continue;
        }
        int32_t top = m->st[s].top;
        if (!(m->g->flags[top] & GR_ST_LEAF)) {
            ok = 0;
            break;
        }
        const gr_leaf_set *ls = gr_vocab_leaf(m->v, m->g, top);
        if (!ls || !ls->useful) ok = 0;
        m->lsets[i] = ls;
    }
    m->cf[c].leafy = ok ? 1 : 2;
    return ok;
}

static kiln_code leaf_mask(gr_matcher *m, int32_t c, uint64_t *bits, kiln_err *err)
{
    const gr_vocab *v = m->v;
    int32_t n = m->cf[c].n;
    for (int32_t i = 0; i < n; i++) {
        int32_t s = m->spool.v[m->cf[c].off + i];
        if (s == 0) continue;
        const gr_leaf_set *ls = gr_vocab_leaf(m->v, m->g, m->st[s].top); /* cached: cheap */
        if (!ls) return walk(m, c, -1, bits, err);
        for (size_t w = 0; w < v->words; w++)
            bits[w] |= ls->accept[w];
    }
    for (int32_t i = 0; i < n; i++) {
        int32_t s = m->spool.v[m->cf[c].off + i];
        if (s == 0) continue;
        const gr_leaf_set *ls = gr_vocab_leaf(m->v, m->g, m->st[s].top);
        for (int32_t k = 0; k < ls->n_maybe; k++) {
            int32_t t = ls->maybe[k];
            if (bits[t >> 6] >> (t & 63) & 1) continue;
            int32_t x = step_bytes(m, c, v->bytes + v->off[t], v->off[t + 1] - v->off[t]);
            if (x == -4) return fail_step(err);
            if (x >= 0) bits[t >> 6] |= 1ull << (t & 63);
        }
    }
    return KILN_OK;
}

static void masks_drop(gr_matcher *m)
{
    for (int32_t i = 0; i < m->n_cf; i++)
        m->cf[i].mask = -1;
    m->n_masks = 0;
    m->n_mpool = 0;
}

/* Keeps a copy of bits for configuration c (ids when sparse). Best effort. */
static void mask_store(gr_matcher *m, int32_t c, const uint64_t *bits)
{
    const gr_vocab *v = m->v;
    int64_t pop = 0;
    for (size_t w = 0; w < v->words; w++)
        pop += __builtin_popcountll(bits[w]);
    size_t need = pop * 32 < (int64_t)v->words * 64 ? (size_t)pop : v->words * 2;
    if ((m->n_mpool + need) * 4 > MASK_CACHE_BYTES) masks_drop(m);
    if (m->n_mpool + need > m->cap_mpool) {
        size_t nc = m->cap_mpool ? m->cap_mpool : 4096;
        while (nc < m->n_mpool + need)
            nc *= 2;
        uint32_t *p = realloc(m->mpool, sizeof *p * nc);
        if (!p) return;
        m->mpool = p;
        m->cap_mpool = nc;
    }
    if (m->n_masks == m->cap_masks) {
        int32_t nc = m->cap_masks ? m->cap_masks * 2 : 64;
        gmask *p = realloc(m->masks, sizeof *p * (size_t)nc);
        if (!p) return;
        m->masks = p;
        m->cap_masks = nc;
    }
    gmask gm = {.off = m->n_mpool};
    uint32_t *dst = need ? m->mpool + m->n_mpool : NULL; /* an empty mask: mpool may be NULL */
    if (need == v->words * 2) {
        gm.n_ids = -1;
        memcpy(dst, bits, v->words * 8);
    } else {
        gm.n_ids = (int32_t)pop;
        size_t k = 0;
        for (size_t w = 0; w < v->words; w++)
            for (uint64_t x = bits[w]; x; x &= x - 1)
                dst[k++] = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(x));
    }
    m->n_mpool += need;
    m->masks[m->n_masks] = gm;
    m->cf[c].mask = m->n_masks++;
}

kiln_code gr_matcher_mask(gr_matcher *m, uint64_t *bits, kiln_err *err)
{
    const gr_vocab *v = m->v;
    int32_t c = m->hist.v[m->hist.n - 1];
    if (m->cf[c].mask >= 0) {
        const gmask *gm = &m->masks[m->cf[c].mask];
        if (gm->n_ids < 0) {
            memcpy(bits, m->mpool + gm->off, v->words * 8);
        } else {
            memset(bits, 0, v->words * 8);
            const uint32_t *ids = m->mpool + gm->off;
            for (int32_t k = 0; k < gm->n_ids; k++)
                bits[ids[k] >> 6] |= 1ull << (ids[k] & 63);
        }
        return KILN_OK;
    }
    memset(bits, 0, v->words * 8);
    kiln_code rc = leafy(m, c) ? leaf_mask(m, c, bits, err) : walk(m, c, -1, bits, err);
    if (rc) return rc;
    mask_store(m, c, bits);
    return KILN_OK;
}

kiln_code gr_matcher_mask_within(gr_matcher *m, int32_t max_bytes, uint64_t *bits, kiln_err *err)
{
    memset(bits, 0, m->v->words * 8);
    if (max_bytes < 0) return KILN_OK;
    return walk(m, m->hist.v[m->hist.n - 1], max_bytes, bits, err);
}

/* ------------------------------------------------------------ advancing */

static int32_t cur(const gr_matcher *m)
{
    return m->hist.v[m->hist.n - 1];
}

bool gr_matcher_accepting(const gr_matcher *m)
{
    return m->cf[cur(m)].accept;
}

bool gr_matcher_done(const gr_matcher *m)
{
    const gconf *c = &m->cf[cur(m)];
    return c->n == 1 && m->spool.v[c->off] == 0;
}

int32_t gr_matcher_distance(const gr_matcher *m)
{
    return m->cf[cur(m)].dist;
}

static kiln_code push_state(gr_matcher *m, int32_t x, const char *what, kiln_err *err)
{
    if (x == -4) return fail_step(err);
    if (x < 0) return kiln_fail(err, KILN_E_INVALID, "grammar: %s is not allowed here", what);
    if (ipush(&m->hist, x)) return kiln_fail(err, KILN_E_NOMEM, "grammar matcher: out of memory");
    return KILN_OK;
}

kiln_code gr_matcher_accept_token(gr_matcher *m, int32_t tok, kiln_err *err)
{
    if (!gr_vocab_constrainable(m->v, tok))
        return kiln_fail(err, KILN_E_INVALID, "grammar: token %d is empty or holds byte 0xFF", (int)tok);
    size_t n;
    const uint8_t *b = gr_vocab_token(m->v, tok, &n);
    return push_state(m, step_bytes(m, cur(m), b, n), "this token", err);
}

kiln_code gr_matcher_accept_bytes(gr_matcher *m, const char *s, size_t n, kiln_err *err)
{
    return push_state(m, step_bytes(m, cur(m), (const uint8_t *)s, n), "this text", err);
}

int32_t gr_matcher_distance_after(gr_matcher *m, int32_t tok)
{
    if (!gr_vocab_constrainable(m->v, tok)) return -1;
    size_t n;
    const uint8_t *b = gr_vocab_token(m->v, tok, &n);
    int32_t x = step_bytes(m, cur(m), b, n);
    return x < 0 ? -1 : m->cf[x].dist;
}

int32_t gr_matcher_try_tokens(gr_matcher *m, const int32_t *toks, int32_t n)
{
    int32_t k = 0;
    while (k < n && gr_matcher_accept_token(m, toks[k], NULL) == KILN_OK)
        k++;
    return k;
}

kiln_code gr_matcher_rollback(gr_matcher *m, int32_t k, kiln_err *err)
{
    if (k < 0 || k >= m->hist.n)
        return kiln_fail(err, KILN_E_INVALID, "grammar: cannot roll back %d of %d accepts", (int)k,
                         (int)(m->hist.n - 1));
    m->hist.n -= k;
    return KILN_OK;
}

int32_t gr_matcher_history(const gr_matcher *m)
{
    return m->hist.n - 1;
}

kiln_code gr_matcher_mask_walk(gr_matcher *m, uint64_t *bits, kiln_err *err)
{
    memset(bits, 0, m->v->words * 8);
    return walk(m, cur(m), -1, bits, err);
}
