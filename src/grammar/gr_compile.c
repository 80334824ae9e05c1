/*
 * gr_compile.c — builder rules to the compiled grammar the matcher runs.
 *
 * Per rule reachable from the root:
 *   expression --Thompson--> NFA (byte-range, call and empty edges)
 *              --subsets--> DFA over byte classes and call symbols
 *              --Moore----> minimal DFA, states renumbered breadth-first
 * then, over all rules: the fewest bytes that finish each state (fixpoint
 * over calls), pruning of edges that can never finish, the left-recursion
 * check, tail calls and the canonical form of leaf rules.
 * Invariants of the result (the matcher relies on them):
 *   (1) every edge leads to a state with a finite distance; the root's is finite
 *   (2) no rule can reach a call of itself without consuming a byte
 *   (3) equal leaf rules have equal blobs (canonical numbering)
 * Errors: KILN_E_INVALID names the rule (undefined, left-recursive, matches
 * nothing) or the limit; KILN_E_NOMEM.
 */
#include "grammar/gr_int.h"
#include "util/plat.h"

#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

/* ------------------------------------------------------------ growable arrays */

typedef struct {
    int32_t *v;
    int32_t n, cap;
} ivec;
#define VEC(T)                                                                                     \
    struct {                                                                                       \
        T *v;                                                                                      \
        int32_t n, cap;                                                                            \
    }

static int vgrow(void **p, int32_t *cap, int64_t need, size_t sz)
{
    if (need <= *cap) return 0;
    if (need > INT32_MAX / 2) return -1;
    int64_t nc = *cap ? *cap : 16;
    while (nc < need)
        nc *= 2;
    void *q = realloc(*p, (size_t)nc * sz);
    if (!q) return -1;
    *p = q;
    *cap = (int32_t)nc;
    return 0;
}
#define VPUSH(vec, x)                                                                              \
    (vgrow((void **)&(vec).v, &(vec).cap, (int64_t)(vec).n + 1, sizeof *(vec).v)                   \
         ? -1                                                                                      \
         : ((vec).v[(vec).n++] = (x), 0))

/* ------------------------------------------------------------ NFA */

enum { SYM_BYTES = -1, SYM_EPS = -2 };

typedef struct {
    int32_t to, next; /* target; next edge of the same state */
    int32_t sym;      /* SYM_BYTES, SYM_EPS or a compiled rule index (call) */
    uint8_t lo, hi;
} nedge;

typedef struct {
    gr_builder *b;
    ivec first; /* per NFA state: first edge, -1 none */
    VEC(nedge) edges;
    int32_t *rmap; /* builder rule -> compiled rule, -1 unreachable */
    int32_t total; /* NFA states over all rules (limit) */
} nfa;

typedef struct {
    int32_t s, e;
} frag;

/* Both fail for good once the builder has failed, so that `s = nstate(n),
 * e = nstate(n)` never pairs a failed state with a good one. */
static int32_t nstate(nfa *n)
{
    if (n->b->failed) return -1;
    if (n->total >= n->b->o.max_nfa_states) {
        gr_b_fail(n->b, KILN_E_INVALID,
                  "grammar compile exceeded %d states (automaton states before "
                  "determinization)",
                  (int)n->b->o.max_nfa_states);
        return -1;
    }
    if (VPUSH(n->first, -1)) {
        gr_b_fail(n->b, KILN_E_NOMEM, "grammar: out of memory");
        return -1;
    }
    n->total++;
    return n->first.n - 1;
}

static int nedge_add(nfa *n, int32_t from, int32_t to, int32_t sym, uint8_t lo, uint8_t hi)
{
    if (n->b->failed || from < 0 || to < 0) return -1;
    nedge e = {.to = to, .next = n->first.v[from], .sym = sym, .lo = lo, .hi = hi};
    if (VPUSH(n->edges, e)) {
        gr_b_fail(n->b, KILN_E_NOMEM, "grammar: out of memory");
        return -1;
    }
    n->first.v[from] = n->edges.n - 1;
    return 0;
}

typedef struct {
    nfa *n;
    int32_t s, e;
} class_ctx;

static int class_emit(void *ctx, const uint8_t *lo, const uint8_t *hi, int len)
{
    class_ctx *c = ctx;
    int32_t cur = c->s;
    for (int i = 0; i < len; i++) {
        int32_t to = i == len - 1 ? c->e : nstate(c->n);
        if (to < 0 || nedge_add(c->n, cur, to, SYM_BYTES, lo[i], hi[i])) return -1;
        cur = to;
    }
    return 0;
}

static frag build(nfa *n, gr_expr x, int depth);

/* Text containing none of the patterns (NUL-separated, ASCII): the states of
 * their Aho-Corasick automaton minus the ones that complete a pattern, all
 * final; characters in no pattern go back to the root. */
static frag build_without(nfa *n, const char *pats, int32_t len)
{
    frag bad = {-1, -1};
    enum { MAXS = 4097 };
    int32_t(*go)[128] = malloc(sizeof *go * MAXS);
    int32_t *fail = malloc(sizeof *fail * MAXS), *q = malloc(sizeof *q * MAXS);
    uint8_t *dead = calloc(MAXS, 1), used[128] = {0};
    int32_t *st = malloc(sizeof *st * MAXS);
    frag out = bad;
    if (!go || !fail || !q || !dead || !st) {
        gr_b_fail(n->b, KILN_E_NOMEM, "grammar: out of memory");
        goto done;
    }
    int32_t ns = 1;
    memset(go[0], -1, sizeof go[0]);
    for (int32_t i = 0; i < len;) { /* the trie */
        int32_t cur = 0;
        for (; i < len && pats[i]; i++) {
            int c = pats[i];
            used[c] = 1;
            if (go[cur][c] < 0) {
                memset(go[ns], -1, sizeof go[ns]);
                go[cur][c] = ns++;
            }
            cur = go[cur][c];
        }
        dead[cur] = 1;
        i++;
    }
    int32_t head = 0, tail = 0; /* failure links, breadth first; complete the goto function */
    fail[0] = 0;
    for (int c = 0; c < 128; c++) {
        if (go[0][c] < 0)
            go[0][c] = 0;
        else
            fail[go[0][c]] = 0, q[tail++] = go[0][c];
    }
    while (head < tail) {
        int32_t r = q[head++];
        dead[r] |= dead[fail[r]];
        for (int c = 0; c < 128; c++) {
            int32_t u = go[r][c];
            if (u < 0) {
                go[r][c] = go[fail[r]][c];
            } else {
                fail[u] = go[fail[r]][c];
                q[tail++] = u;
            }
        }
    }
    uint32_t other[2 * 130];
    int no = 0; /* code points in no pattern */
    for (int c = 0; c < 128;) {
        if (used[c]) {
            c++;
            continue;
        }
        int d = c;
        while (d + 1 < 128 && !used[d + 1])
            d++;
        other[2 * no] = (uint32_t)c, other[2 * no + 1] = (uint32_t)d, no++;
        c = d + 1;
    }
    other[2 * no] = 0x80, other[2 * no + 1] = 0xD7FF, no++;
    other[2 * no] = 0xE000, other[2 * no + 1] = GR_MAX_CP, no++;
    int32_t end = nstate(n);
    if (end < 0) goto done;
    for (int32_t s = 0; s < ns; s++)
        st[s] = dead[s] ? -1 : nstate(n);
    for (int32_t s = 0; s < ns; s++) {
        if (dead[s]) continue;
        if (st[s] < 0 || nedge_add(n, st[s], end, SYM_EPS, 0, 0)) goto done;
        for (int c = 0; c < 128; c++)
            if (used[c] && !dead[go[s][c]] &&
                nedge_add(n, st[s], st[go[s][c]], SYM_BYTES, (uint8_t)c, (uint8_t)c))
                goto done;
        class_ctx cc = {n, st[s], st[0]};
        for (int k = 0; k < no; k++)
            if (gr_utf8_ranges(other[2 * k], other[2 * k + 1], class_emit, &cc)) goto done;
    }
    out = (frag){st[0], end};
done:
    free(go);
    free(fail);
    free(q);
    free(dead);
    free(st);
    return out;
}

static uint32_t next_cp(const unsigned char **p)
{
    const unsigned char *u = *p;
    uint32_t c = *u;
    int k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    if (k > 1) c &= (1u << (7 - k)) - 1;
    for (int i = 1; i < k && u[i]; i++)
        c = c << 6 | (u[i] & 0x3F);
    for (int i = 0; i < k && **p; i++)
        (*p)++;
    return c;
}

static bool in_class(const gr_builder *b, const gr_node *cls, uint32_t c)
{
    for (int32_t i = 0; i < cls->b; i++)
        if (c >= b->ranges[cls->a + 2 * i] && c <= b->ranges[cls->a + 2 * i + 1]) return true;
    return false;
}

/* Strings of class characters unequal to every name: a trie over the names'
 * characters (those in the class); from each node a character no name
 * continues with leads to a free state that loops on the class; every state
 * but a name's end is final. */
static frag build_except(nfa *n, const gr_node *nd)
{
    frag bad = {-1, -1};
    gr_builder *b = n->b;
    const gr_node *cls = &b->nodes[nd->a];
    const char *names = (const char *)b->bytes + nd->b;
    int32_t total = nd->min;
    /* trie: node 0 root; kids as (parent, cp) -> child in a flat list */
    int32_t cap = total + 2, nn = 1;
    int32_t *parent = malloc(sizeof *parent * (size_t)cap);
    uint32_t *cp = malloc(sizeof *cp * (size_t)cap);
    uint8_t *term = calloc((size_t)cap, 1);
    int32_t *st = malloc(sizeof *st * (size_t)cap);
    uint32_t *pairs = malloc(sizeof *pairs * 2 * ((size_t)cls->b + (size_t)cap + 2));
    frag out = bad;
    if (!parent || !cp || !term || !st || !pairs) {
        gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
        goto done;
    }
    for (int32_t i = 0; i < total;) {
        const unsigned char *p = (const unsigned char *)names + i;
        int32_t cur = 0;
        bool live = true;
        while (*p) {
            uint32_t c = next_cp(&p);
            if (!live) continue;
            if (!in_class(b, cls, c)) { /* no string of the class holds it */
                live = false;
                continue;
            }
            int32_t k = -1;
            for (int32_t j = 1; j < nn && k < 0; j++)
                if (parent[j] == cur && cp[j] == c) k = j;
            if (k < 0) {
                parent[nn] = cur;
                cp[nn] = c;
                k = nn++;
            }
            cur = k;
        }
        if (live) term[cur] = 1;
        i = (int32_t)((const char *)p - names) + 1;
    }
    int32_t end = nstate(n), free_st = nstate(n);
    if (free_st < 0) goto done;
    for (int32_t j = 0; j < nn; j++)
        if ((st[j] = nstate(n)) < 0) goto done;
    if (nedge_add(n, free_st, end, SYM_EPS, 0, 0)) goto done;
    class_ctx loop = {n, free_st, free_st};
    for (int32_t k = 0; k < cls->b; k++)
        if (gr_utf8_ranges(b->ranges[cls->a + 2 * k], b->ranges[cls->a + 2 * k + 1], class_emit,
                           &loop))
            goto done;
    for (int32_t t = 0; t < nn; t++) {
        if (!term[t] && nedge_add(n, st[t], end, SYM_EPS, 0, 0)) goto done;
        /* the class minus the kids' characters: to the free state */
        int32_t np = 0;
        for (int32_t k = 0; k < cls->b; k++) {
            uint32_t lo = b->ranges[cls->a + 2 * k], hi = b->ranges[cls->a + 2 * k + 1];
            pairs[2 * np] = lo, pairs[2 * np + 1] = hi, np++;
        }
        for (int32_t j = 1; j < nn; j++) {
            if (parent[j] != t) continue;
            class_ctx cc = {n, st[t], st[j]};
            if (gr_utf8_ranges(cp[j], cp[j], class_emit, &cc)) goto done;
            /* cut cp[j] out of the ranges */
            for (int32_t k = 0; k < np; k++) {
                uint32_t lo = pairs[2 * k], hi = pairs[2 * k + 1], c = cp[j];
                if (c < lo || c > hi) continue;
                if (lo == hi)
                    pairs[2 * k] = 1, pairs[2 * k + 1] = 0; /* empty */
                else if (c == lo)
                    pairs[2 * k] = lo + 1;
                else if (c == hi)
                    pairs[2 * k + 1] = hi - 1;
                else {
                    pairs[2 * k + 1] = c - 1;
                    pairs[2 * np] = c + 1, pairs[2 * np + 1] = hi, np++;
                }
                break;
            }
        }
        class_ctx dev = {n, st[t], free_st};
        for (int32_t k = 0; k < np; k++)
            if (pairs[2 * k] <= pairs[2 * k + 1] &&
                gr_utf8_ranges(pairs[2 * k], pairs[2 * k + 1], class_emit, &dev))
                goto done;
    }
    out = (frag){st[0], end};
done:
    free(parent);
    free(cp);
    free(term);
    free(st);
    free(pairs);
    return out;
}

static frag build_rep(nfa *n, const gr_node *nd, int depth)
{
    frag bad = {-1, -1};
    int32_t s = nstate(n);
    if (s < 0) return bad;
    int32_t cur = s;
    for (int32_t i = 0; i < nd->min; i++) {
        frag f = build(n, nd->a, depth + 1);
        if (f.s < 0 || nedge_add(n, cur, f.s, SYM_EPS, 0, 0)) return bad;
        cur = f.e;
    }
    if (nd->max < 0) { /* x*: a loop state */
        int32_t loop = nstate(n);
        frag f = build(n, nd->a, depth + 1);
        if (loop < 0 || f.s < 0 || nedge_add(n, cur, loop, SYM_EPS, 0, 0) ||
            nedge_add(n, loop, f.s, SYM_EPS, 0, 0) || nedge_add(n, f.e, loop, SYM_EPS, 0, 0))
            return bad;
        return (frag){s, loop};
    }
    int32_t end = nstate(n);
    if (end < 0) return bad;
    for (int32_t i = nd->min; i < nd->max; i++) { /* (x(x(x)?)?)? */
        frag f = build(n, nd->a, depth + 1);
        if (f.s < 0 || nedge_add(n, cur, end, SYM_EPS, 0, 0) ||
            nedge_add(n, cur, f.s, SYM_EPS, 0, 0))
            return bad;
        cur = f.e;
    }
    if (nedge_add(n, cur, end, SYM_EPS, 0, 0)) return bad;
    return (frag){s, end};
}

static frag build(nfa *n, gr_expr x, int depth)
{
    frag bad = {-1, -1};
    gr_builder *b = n->b;
    if (b->failed) return bad;
    if (depth > 2000) {
        gr_b_fail(b, KILN_E_INVALID, "grammar is nested too deeply");
        return bad;
    }
    const gr_node *nd = &b->nodes[x];
    switch (nd->kind) {
    case GR_E_EMPTY: {
        int32_t s = nstate(n);
        return (frag){s, s};
    }
    case GR_E_NONE: {
        int32_t s = nstate(n), e = nstate(n);
        return e < 0 ? bad : (frag){s, e};
    }
    case GR_E_BYTES: {
        int32_t s = nstate(n), cur = s;
        for (int32_t i = 0; i < nd->b && cur >= 0; i++) {
            int32_t t = nstate(n);
            uint8_t c = b->bytes[nd->a + i];
            if (t < 0 || nedge_add(n, cur, t, SYM_BYTES, c, c)) return bad;
            cur = t;
        }
        return cur < 0 ? bad : (frag){s, cur};
    }
    case GR_E_CLASS: {
        class_ctx c = {n, nstate(n), nstate(n)};
        if (c.e < 0) return bad;
        for (int32_t i = 0; i < nd->b; i++)
            if (gr_utf8_ranges(b->ranges[nd->a + 2 * i], b->ranges[nd->a + 2 * i + 1], class_emit,
                               &c))
                return bad;
        return (frag){c.s, c.e};
    }
    case GR_E_SEQ: {
        frag f = {-1, -1};
        for (int32_t i = 0; i < nd->b; i++) {
            frag g = build(n, b->kids[nd->a + i], depth + 1);
            if (g.s < 0) return bad;
            if (f.s < 0)
                f = g;
            else if (nedge_add(n, f.e, g.s, SYM_EPS, 0, 0))
                return bad;
            else
                f.e = g.e;
        }
        return f;
    }
    case GR_E_ALT: {
        int32_t s = nstate(n), e = nstate(n);
        if (e < 0) return bad;
        for (int32_t i = 0; i < nd->b; i++) {
            frag g = build(n, b->kids[nd->a + i], depth + 1);
            if (g.s < 0 || nedge_add(n, s, g.s, SYM_EPS, 0, 0) ||
                nedge_add(n, g.e, e, SYM_EPS, 0, 0))
                return bad;
        }
        return (frag){s, e};
    }
    case GR_E_REP:
        return build_rep(n, nd, depth);
    case GR_E_REF: {
        int32_t s = nstate(n), e = nstate(n);
        if (e < 0 || nedge_add(n, s, e, n->rmap[nd->a], 0, 0)) return bad;
        return (frag){s, e};
    }
    case GR_E_AND:
        break; /* only a whole rule body (compile_rules) */
    case GR_E_WITHOUT:
        return build_without(n, (const char *)b->bytes + nd->a, nd->b);
    case GR_E_EXCEPT:
        return build_except(n, nd);
    }
    gr_b_fail(b, KILN_E_INTERNAL, "grammar: unknown node kind %d", nd->kind);
    return bad;
}

/* ------------------------------------------------------------ hoisting big repetitions */

/* Rough NFA size of x (capped), so that copying a repeated sub-expression
 * max times never explodes: a big body becomes a rule of its own (a call). */
static int64_t esize(const gr_builder *b, gr_expr x, int depth)
{
    const gr_node *nd = &b->nodes[x];
    if (depth > 200) return 1 << 20;
    int64_t s = 1;
    switch (nd->kind) {
    case GR_E_BYTES:
        return nd->b + 1;
    case GR_E_CLASS:
        return 2 + 3 * (int64_t)nd->b;
    case GR_E_SEQ:
    case GR_E_ALT:
    case GR_E_AND:
        for (int32_t i = 0; i < nd->b && s < (1 << 20); i++)
            s += esize(b, b->kids[nd->a + i], depth + 1);
        return s;
    case GR_E_REP: {
        int64_t c = esize(b, nd->a, depth + 1);
        int64_t k = nd->max < 0 ? nd->min + 1 : nd->max;
        return c * k > (1 << 20) ? (1 << 20) : c * k + 2;
    }
    default:
        return 2;
    }
}

/* Replaces the body of every repetition whose copies would be large by a call
 * of a new rule with that body (rules are exact: the language is unchanged). */
static void hoist(gr_builder *b, gr_expr x, const char *name, int depth, uint8_t *seen)
{
    if (b->failed || depth > 2000 || seen[x]) return;
    seen[x] = 1;
    gr_node nd = b->nodes[x];
    if (nd.kind == GR_E_SEQ || nd.kind == GR_E_ALT) {
        for (int32_t i = 0; i < nd.b; i++)
            hoist(b, b->kids[nd.a + i], name, depth + 1, seen);
    } else if (nd.kind == GR_E_REP) {
        hoist(b, nd.a, name, depth + 1, seen);
        int64_t k = nd.max < 0 ? nd.min + 1 : nd.max;
        int64_t c = esize(b, nd.a, 0);
        if (k > 1 && c > 16 && c * k > 2048 && b->nodes[nd.a].kind != GR_E_REF) {
            char nm[96];
            snprintf(nm, sizeof nm, "%.80s~rep", name);
            gr_rule r = gr_rule_new(b, nm);
            gr_expr ref = gr_ref(b, r);
            if (ref < 0) return;
            b->rules[r].body = nd.a;
            b->nodes[x].a = ref; /* b->nodes may have moved: index again */
        }
    }
}

/* ------------------------------------------------------------ per-rule DFA */

typedef struct {
    int32_t sym, to;
} dcall;

typedef struct {
    int32_t n_states, n_classes, start;
    uint8_t cls[256];
    uint8_t *final; /* [n_states] */
    int32_t *trans; /* [n_states * n_classes], -1 none */
    int32_t *coff;  /* [n_states + 1] */
    dcall *calls;   /* sorted by (state, sym); sym = compiled rule */
    int32_t n_calls;
} rdfa;

static void rdfa_free(rdfa *d)
{
    free(d->final);
    free(d->trans);
    free(d->coff);
    free(d->calls);
    memset(d, 0, sizeof *d);
}

/* interning of sorted NFA state sets */
typedef struct {
    ivec pool;
    ivec off;     /* per DFA state: offset in pool; length = off[i+1]-off[i] */
    int32_t *tab; /* open addressing: DFA state + 1, 0 empty */
    uint32_t mask;
} setmap;

static uint64_t set_hash(const int32_t *s, int32_t n)
{
    return XXH3_64bits(s, (size_t)n * sizeof *s);
}

static int setmap_rehash(setmap *m)
{
    uint32_t cap = m->mask ? (m->mask + 1) * 2 : 256;
    int32_t *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (int32_t i = 0; i + 1 < m->off.n; i++) {
        uint64_t h = set_hash(m->pool.v + m->off.v[i], m->off.v[i + 1] - m->off.v[i]);
        uint32_t j = (uint32_t)h & (cap - 1);
        while (t[j])
            j = (j + 1) & (cap - 1);
        t[j] = i + 1;
    }
    free(m->tab);
    m->tab = t;
    m->mask = cap - 1;
    return 0;
}

/* Returns the DFA state of set s[0..n) (sorted), adding it; *added = 1 if new. -1 on OOM. */
static int32_t setmap_get(setmap *m, const int32_t *s, int32_t n, int *added)
{
    *added = 0;
    int32_t count = m->off.n ? m->off.n - 1 : 0;
    if (!m->tab || (uint32_t)count * 2 >= m->mask) {
        if (setmap_rehash(m)) return -1;
    }
    uint64_t h = set_hash(s, n);
    uint32_t j = (uint32_t)h & m->mask;
    while (m->tab[j]) {
        int32_t i = m->tab[j] - 1;
        int32_t len = m->off.v[i + 1] - m->off.v[i];
        if (len == n && !memcmp(m->pool.v + m->off.v[i], s, (size_t)n * sizeof *s)) return i;
        j = (j + 1) & m->mask;
    }
    if (m->off.n == 0 && VPUSH(m->off, 0)) return -1;
    for (int32_t k = 0; k < n; k++)
        if (VPUSH(m->pool, s[k])) return -1;
    if (VPUSH(m->off, m->pool.n)) return -1;
    m->tab[j] = count + 1;
    *added = 1;
    return count;
}

static void setmap_free(setmap *m)
{
    free(m->pool.v);
    free(m->off.v);
    free(m->tab);
}

typedef struct {
    int32_t key, to; /* key: class, or 256 + call symbol index */
} kt;

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int cmp_kt(const void *a, const void *b)
{
    const kt *x = a, *y = b;
    if (x->key != y->key) return (x->key > y->key) - (x->key < y->key);
    return (x->to > y->to) - (x->to < y->to);
}

typedef struct {
    nfa *n;
    int32_t *stamp, gen; /* per NFA state */
    ivec stack;
} closer;

/* Appends the epsilon closure of the states in/out to out (unsorted, unique). */
static int closure(closer *c, const int32_t *in, int32_t n_in, ivec *out)
{
    c->gen++;
    c->stack.n = 0;
    for (int32_t i = 0; i < n_in; i++)
        if (VPUSH(c->stack, in[i])) return -1;
    while (c->stack.n) {
        int32_t s = c->stack.v[--c->stack.n];
        if (c->stamp[s] == c->gen) continue;
        c->stamp[s] = c->gen;
        if (VPUSH(*out, s)) return -1;
        for (int32_t e = c->n->first.v[s]; e >= 0; e = c->n->edges.v[e].next)
            if (c->n->edges.v[e].sym == SYM_EPS && c->stamp[c->n->edges.v[e].to] != c->gen)
                if (VPUSH(c->stack, c->n->edges.v[e].to)) return -1;
    }
    return 0;
}

/* Subset construction of one rule (NFA start s, end e). *dfa_total counts states
 * over all rules (limit). */
static int determinize(nfa *n, closer *cl, int32_t s, int32_t e, int32_t *dfa_total, rdfa *d)
{
    gr_builder *b = n->b;
    memset(d, 0, sizeof *d);
    /* byte classes from every byte edge reachable from s */
    uint8_t mark[257] = {0};
    ivec reach = {0};
    ivec syms = {0};
    { /* all states reachable by any edge */
        cl->gen++;
        ivec st = {0};
        if (VPUSH(st, s)) goto nomem;
        reach.n = 0;
        while (st.n) {
            int32_t x = st.v[--st.n];
            if (cl->stamp[x] == cl->gen) continue;
            cl->stamp[x] = cl->gen;
            if (VPUSH(reach, x)) {
                free(st.v);
                goto nomem;
            }
            for (int32_t k = n->first.v[x]; k >= 0; k = n->edges.v[k].next) {
                nedge *ed = &n->edges.v[k];
                if (ed->sym == SYM_BYTES)
                    mark[ed->lo] = mark[ed->hi + 1] = 1;
                else if (ed->sym >= 0 && VPUSH(syms, ed->sym)) {
                    free(st.v);
                    goto nomem;
                }
                if (cl->stamp[ed->to] != cl->gen && VPUSH(st, ed->to)) {
                    free(st.v);
                    goto nomem;
                }
            }
        }
        free(st.v);
    }
    int nc = 0;
    for (int i = 0; i < 256; i++) {
        if (i > 0 && mark[i]) nc++;
        d->cls[i] = (uint8_t)nc;
    }
    d->n_classes = nc + 1;
    if ((size_t)syms.n > 1) /* qsort(NULL, 0) is undefined */
        qsort(syms.v, (size_t)syms.n, sizeof *syms.v, cmp_i32);
    int32_t ns = 0;
    for (int32_t i = 0; i < syms.n; i++)
        if (i == 0 || syms.v[i] != syms.v[i - 1]) syms.v[ns++] = syms.v[i];
    syms.n = ns;

    setmap m = {0};
    ivec cur = {0};
    VEC(kt) moves = {0};
    ivec tmp = {0};
    ivec trans = {0};
    VEC(uint8_t) fin = {0};
    VEC(dcall) calls = {0};
    ivec coff = {0};
    int added;
    if (closure(cl, &s, 1, &cur)) goto nomem2;
    if ((size_t)cur.n > 1) /* qsort(NULL, 0) is undefined */
        qsort(cur.v, (size_t)cur.n, sizeof *cur.v, cmp_i32);
    if (setmap_get(&m, cur.v, cur.n, &added) < 0) goto nomem2;
    for (int32_t D = 0; D + 1 < m.off.n; D++) {
        if ((D & 255) == 0 && gr_b_check_time(b)) goto fail;
        if (++*dfa_total > b->o.max_dfa_states) {
            gr_b_fail(b, KILN_E_INVALID, "grammar compile exceeded %d states (automaton states)",
                      (int)b->o.max_dfa_states);
            goto fail;
        }
        moves.n = 0;
        int is_final = 0;
        for (int32_t k = m.off.v[D]; k < m.off.v[D + 1]; k++) {
            int32_t x = m.pool.v[k];
            if (x == e) is_final = 1;
            for (int32_t j = n->first.v[x]; j >= 0; j = n->edges.v[j].next) {
                nedge *ed = &n->edges.v[j];
                if (ed->sym == SYM_BYTES) {
                    for (int c = d->cls[ed->lo]; c <= d->cls[ed->hi]; c++)
                        if (VPUSH(moves, ((kt){c, ed->to}))) goto nomem2;
                } else if (ed->sym >= 0) {
                    int32_t *p = bsearch(&ed->sym, syms.v, (size_t)syms.n, sizeof *syms.v, cmp_i32);
                    if (VPUSH(moves, ((kt){256 + (int32_t)(p - syms.v), ed->to}))) goto nomem2;
                }
            }
        }
        if (VPUSH(fin, (uint8_t)is_final) || VPUSH(coff, calls.n)) goto nomem2;
        int32_t row = trans.n;
        for (int c = 0; c < d->n_classes; c++)
            if (VPUSH(trans, -1)) goto nomem2;
        if ((size_t)moves.n > 1) /* qsort(NULL, 0) is undefined */
            qsort(moves.v, (size_t)moves.n, sizeof *moves.v, cmp_kt);
        for (int32_t i = 0; i < moves.n;) {
            int32_t j = i, key = moves.v[i].key;
            tmp.n = 0;
            while (j < moves.n && moves.v[j].key == key) {
                if (j == i || moves.v[j].to != moves.v[j - 1].to)
                    if (VPUSH(tmp, moves.v[j].to)) goto nomem2;
                j++;
            }
            cur.n = 0;
            if (closure(cl, tmp.v, tmp.n, &cur)) goto nomem2;
            if ((size_t)cur.n > 1) /* qsort(NULL, 0) is undefined */
                qsort(cur.v, (size_t)cur.n, sizeof *cur.v, cmp_i32);
            int32_t T = setmap_get(&m, cur.v, cur.n, &added);
            if (T < 0) goto nomem2;
            if (key < 256)
                trans.v[row + key] = T;
            else if (VPUSH(calls, ((dcall){syms.v[key - 256], T})))
                goto nomem2;
            i = j;
        }
    }
    if (VPUSH(coff, calls.n)) goto nomem2;
    d->n_states = m.off.n - 1;
    d->final = fin.v;
    d->trans = trans.v;
    d->coff = coff.v;
    d->calls = calls.v;
    d->n_calls = calls.n;
    setmap_free(&m);
    free(cur.v);
    free(moves.v);
    free(tmp.v);
    free(reach.v);
    free(syms.v);
    return 0;
nomem2:
    gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
fail:
    setmap_free(&m);
    free(cur.v);
    free(moves.v);
    free(tmp.v);
    free(trans.v);
    free(fin.v);
    free(calls.v);
    free(coff.v);
    free(reach.v);
    free(syms.v);
    return -1;
nomem:
    free(reach.v);
    free(syms.v);
    gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
    return -1;
}

/* Moore partition refinement, then breadth-first renumbering from the start
 * (classes in order, then calls by symbol): equal languages, equal tables. */
static int minimize(gr_builder *b, rdfa *d)
{
    int32_t n = d->n_states, C = d->n_classes;
    int32_t *blk = malloc(sizeof(int32_t) * (size_t)n), *nb = malloc(sizeof(int32_t) * (size_t)n);
    int32_t sigw = 1 + C + 2 * (d->n_calls + 1);
    int32_t *sig = malloc(sizeof(int32_t) * (size_t)sigw);
    setmap m = {0};
    int32_t *order = NULL, *newid = NULL;
    if (!blk || !nb || !sig) goto nomem;
    for (int32_t s = 0; s < n; s++)
        blk[s] = d->final[s];
    int32_t nblk = -1;
    for (;;) {
        setmap_free(&m);
        memset(&m, 0, sizeof m);
        for (int32_t s = 0; s < n; s++) {
            int32_t k = 0, added;
            sig[k++] = blk[s];
            for (int32_t c = 0; c < C; c++) {
                int32_t t = d->trans[(size_t)s * C + c];
                sig[k++] = t < 0 ? -1 : blk[t];
            }
            for (int32_t j = d->coff[s]; j < d->coff[s + 1]; j++) {
                sig[k++] = d->calls[j].sym;
                sig[k++] = blk[d->calls[j].to];
            }
            nb[s] = setmap_get(&m, sig, k, &added);
            if (nb[s] < 0) goto nomem;
        }
        int32_t cnt = m.off.n - 1;
        memcpy(blk, nb, sizeof(int32_t) * (size_t)n);
        if (cnt == nblk) break;
        nblk = cnt;
        if (gr_b_check_time(b)) goto fail;
    }
    /* BFS from the start block over representative states */
    int32_t *rep = nb; /* reuse: representative state of each block */
    for (int32_t i = 0; i < nblk; i++)
        rep[i] = -1;
    for (int32_t s = 0; s < n; s++)
        if (rep[blk[s]] < 0) rep[blk[s]] = s;
    order = malloc(sizeof(int32_t) * (size_t)nblk);
    newid = malloc(sizeof(int32_t) * (size_t)nblk);
    if (!order || !newid) goto nomem;
    for (int32_t i = 0; i < nblk; i++)
        newid[i] = -1;
    int32_t head = 0, tail = 0;
    newid[blk[0]] = tail;
    order[tail++] = blk[0];
    while (head < tail) {
        int32_t s = rep[order[head++]];
        for (int32_t c = 0; c < C; c++) {
            int32_t t = d->trans[(size_t)s * C + c];
            if (t >= 0 && newid[blk[t]] < 0) {
                newid[blk[t]] = tail;
                order[tail++] = blk[t];
            }
        }
        for (int32_t j = d->coff[s]; j < d->coff[s + 1]; j++) {
            int32_t t = d->calls[j].to;
            if (newid[blk[t]] < 0) {
                newid[blk[t]] = tail;
                order[tail++] = blk[t];
            }
        }
    }
    rdfa o = {.n_states = tail, .n_classes = C};
    memcpy(o.cls, d->cls, sizeof o.cls);
    o.final = malloc((size_t)tail);
    o.trans = malloc(sizeof(int32_t) * (size_t)tail * (size_t)C);
    o.coff = malloc(sizeof(int32_t) * (size_t)(tail + 1));
    o.calls = malloc(sizeof(dcall) * (size_t)(d->n_calls + 1));
    if (!o.final || !o.trans || !o.coff || !o.calls) {
        rdfa_free(&o);
        goto nomem;
    }
    for (int32_t i = 0; i < tail; i++) {
        int32_t s = rep[order[i]];
        o.final[i] = d->final[s];
        for (int32_t c = 0; c < C; c++) {
            int32_t t = d->trans[(size_t)s * C + c];
            o.trans[(size_t)i * C + c] = t < 0 ? -1 : newid[blk[t]];
        }
        o.coff[i] = o.n_calls;
        for (int32_t j = d->coff[s]; j < d->coff[s + 1]; j++)
            o.calls[o.n_calls++] = (dcall){d->calls[j].sym, newid[blk[d->calls[j].to]]};
    }
    o.coff[tail] = o.n_calls;
    rdfa_free(d);
    *d = o;
    setmap_free(&m);
    free(blk);
    free(nb);
    free(sig);
    free(order);
    free(newid);
    return 0;
nomem:
    gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
fail:
    setmap_free(&m);
    free(blk);
    free(nb);
    free(sig);
    free(order);
    free(newid);
    return -1;
}

/* x := x ∩ y for two call-free DFAs: the product over paired byte classes. */
static int product(gr_builder *b, rdfa *x, const rdfa *y, int32_t *dfa_total)
{
    if (x->n_calls || y->n_calls) {
        gr_b_fail(b, KILN_E_INTERNAL, "grammar: intersection of expressions with rule references");
        return -1;
    }
    rdfa o = {0};
    int32_t cx[256], cy[256], nc = 0;
    for (int c = 0; c < 256; c++) {
        int k;
        for (k = 0; k < nc; k++)
            if (cx[k] == x->cls[c] && cy[k] == y->cls[c]) break;
        if (k == nc) {
            cx[nc] = x->cls[c];
            cy[nc] = y->cls[c];
            nc++;
        }
        o.cls[c] = (uint8_t)k;
    }
    o.n_classes = nc;
    setmap m = {0};
    ivec trans = {0}, coff = {0};
    VEC(uint8_t) fin = {0};
    int added;
    int32_t start[2] = {0, 0};
    if (setmap_get(&m, start, 2, &added) < 0) goto nomem;
    for (int32_t P = 0; P + 1 < m.off.n; P++) {
        if ((P & 255) == 0 && gr_b_check_time(b)) goto fail;
        if (++*dfa_total > b->o.max_dfa_states) {
            gr_b_fail(b, KILN_E_INVALID, "grammar compile exceeded %d states (automaton states)",
                      (int)b->o.max_dfa_states);
            goto fail;
        }
        int32_t p = m.pool.v[m.off.v[P]], q = m.pool.v[m.off.v[P] + 1];
        if (VPUSH(fin, (uint8_t)(x->final[p] && y->final[q])) || VPUSH(coff, 0)) goto nomem;
        for (int32_t k = 0; k < nc; k++) {
            int32_t tp = x->trans[(size_t)p * x->n_classes + cx[k]];
            int32_t tq = y->trans[(size_t)q * y->n_classes + cy[k]];
            int32_t T = -1;
            if (tp >= 0 && tq >= 0) {
                int32_t pr[2] = {tp, tq};
                if ((T = setmap_get(&m, pr, 2, &added)) < 0) goto nomem;
            }
            if (VPUSH(trans, T)) goto nomem;
        }
    }
    if (VPUSH(coff, 0)) goto nomem;
    o.n_states = m.off.n - 1;
    o.final = fin.v;
    o.trans = trans.v;
    o.coff = coff.v;
    o.calls = malloc(sizeof(dcall));
    if (!o.calls) {
        rdfa_free(&o);
        setmap_free(&m);
        gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
        return -1;
    }
    setmap_free(&m);
    rdfa_free(x);
    *x = o;
    return minimize(b, x);
nomem:
    gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
fail:
    setmap_free(&m);
    free(trans.v);
    free(coff.v);
    free(fin.v);
    return -1;
}

/* ------------------------------------------------------------ whole grammar */

void gr_grammar_retain(gr_grammar *g)
{
    atomic_fetch_add(&g->refs, 1);
}

static void grammar_free(gr_grammar *g)
{
    if (!g) return;
    for (int32_t i = 0; g->rules && i < g->n_rules;
         i++) /* rules may be missing: a failed compile */
        free(g->rules[i].name);
    free(g->rules);
    free(g->flags);
    free(g->rule_of);
    free(g->row);
    free(g->trans);
    free(g->call_off);
    free(g->calls);
    free(g->dist);
    free(g->blob);
    free(g);
}

void gr_grammar_release(gr_grammar *g)
{
    if (g && atomic_fetch_sub(&g->refs, 1) == 1) grammar_free(g);
}

gr_grammar_info gr_grammar_get_info(const gr_grammar *g)
{
    gr_grammar_info in = {.rules = g->n_rules,
                          .states = g->n_states,
                          .nfa_states = g->nfa_states,
                          .compile_s = g->compile_s};
    for (int32_t i = 0; i < g->n_rules; i++)
        in.leaf_rules += g->rules[i].leaf_blob >= 0;
    return in;
}

static int32_t sat_add(int32_t a, int32_t b)
{
    int64_t s = (int64_t)a + b;
    return s >= GR_INF_DIST ? GR_INF_DIST : (int32_t)s;
}

/* Fewest bytes from each state to its rule's end, a call costing its
 * callee's fewest bytes: Knuth's generalization of Dijkstra's algorithm.
 * States are settled in order of distance from the final ones, backwards; a
 * call edge p --R--> ret is relaxed once both R's start and ret are settled.
 * Returns -1 on OOM (the caller fails the compile). */
typedef struct {
    int32_t d, s;
} hitem;

static void heap_push(hitem *h, int32_t *n, hitem x)
{
    int32_t i = (*n)++;
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (h[p].d <= x.d) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static hitem heap_pop(hitem *h, int32_t *n)
{
    hitem top = h[0], x = h[--*n];
    int32_t i = 0;
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1].d < h[c].d) c++;
        if (x.d <= h[c].d) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
    return top;
}

static int distances(gr_grammar *g)
{
    int32_t S = g->n_states;
    int32_t C = g->call_off[S];
    int64_t E = 0;
    for (int32_t s = 0; s < S; s++)
        E += g->rules[g->rule_of[s]].n_classes;
    int32_t *boff = calloc((size_t)S + 1, sizeof *boff); /* byte predecessors (CSR) */
    int32_t *bpred = malloc(sizeof *bpred * (size_t)(E + 1));
    int32_t *coff = calloc((size_t)S + 1, sizeof *coff); /* calls touching a state */
    int32_t *cref = malloc(sizeof *cref * (size_t)(2 * C + 1));
    int32_t *cfrom = malloc(sizeof *cfrom * (size_t)(C + 1));
    uint8_t *done = calloc((size_t)S, 1);
    hitem *heap = malloc(sizeof *heap * (size_t)(E + 2 * C + S + 1));
    int rc = -1;
    if (!boff || !bpred || !coff || !cref || !cfrom || !done || !heap) goto out;
    /* CSR: count, prefix-sum, fill (a class run with one target counts once) */
    for (int32_t s = 0; s < S; s++) {
        const gr_crule *R = &g->rules[g->rule_of[s]];
        for (int32_t c = 0; c < R->n_classes; c++) {
            int32_t t = g->trans[g->row[s] + c];
            if (t >= 0 && (c == 0 || g->trans[g->row[s] + c - 1] != t)) boff[t + 1]++;
        }
        for (int32_t j = g->call_off[s]; j < g->call_off[s + 1]; j++) {
            cfrom[j] = s;
            coff[g->calls[j].start + 1]++;
            if (g->calls[j].ret != g->calls[j].start) coff[g->calls[j].ret + 1]++;
        }
    }
    for (int32_t s = 0; s < S; s++)
        boff[s + 1] += boff[s], coff[s + 1] += coff[s];
    {
        int32_t *bf = malloc(sizeof *bf * (size_t)S), *cf = malloc(sizeof *cf * (size_t)S);
        if (!bf || !cf) {
            free(bf);
            free(cf);
            goto out;
        }
        memcpy(bf, boff, sizeof *bf * (size_t)S);
        memcpy(cf, coff, sizeof *cf * (size_t)S);
        for (int32_t s = 0; s < S; s++) {
            const gr_crule *R = &g->rules[g->rule_of[s]];
            for (int32_t c = 0; c < R->n_classes; c++) {
                int32_t t = g->trans[g->row[s] + c];
                if (t >= 0 && (c == 0 || g->trans[g->row[s] + c - 1] != t)) bpred[bf[t]++] = s;
            }
            for (int32_t j = g->call_off[s]; j < g->call_off[s + 1]; j++) {
                cref[cf[g->calls[j].start]++] = j;
                if (g->calls[j].ret != g->calls[j].start) cref[cf[g->calls[j].ret]++] = j;
            }
        }
        free(bf);
        free(cf);
    }
    int32_t hn = 0;
    for (int32_t s = 0; s < S; s++) {
        g->dist[s] = GR_INF_DIST;
        if (g->flags[s] & GR_ST_FINAL) {
            g->dist[s] = 0;
            heap_push(heap, &hn, (hitem){0, s});
        }
    }
    while (hn) {
        hitem x = heap_pop(heap, &hn);
        if (done[x.s] || x.d != g->dist[x.s]) continue;
        done[x.s] = 1;
        for (int32_t k = boff[x.s]; k < boff[x.s + 1]; k++) {
            int32_t p = bpred[k];
            if (!done[p] && x.d + 1 < g->dist[p]) {
                g->dist[p] = x.d + 1;
                heap_push(heap, &hn, (hitem){x.d + 1, p});
            }
        }
        for (int32_t k = coff[x.s]; k < coff[x.s + 1]; k++) {
            const gr_call *cl = &g->calls[cref[k]];
            if (!done[cl->start] || !done[cl->ret]) continue;
            int32_t p = cfrom[cref[k]];
            int32_t v = sat_add(g->dist[cl->start], g->dist[cl->ret]);
            if (!done[p] && v < g->dist[p]) {
                g->dist[p] = v;
                heap_push(heap, &hn, (hitem){v, p});
            }
        }
    }
    rc = 0;
out:
    free(boff);
    free(bpred);
    free(coff);
    free(cref);
    free(cfrom);
    free(done);
    free(heap);
    return rc;
}

/* Removes edges into states that can never finish (invariant 1). */
static void prune(gr_grammar *g)
{
    int32_t w = 0;
    for (int32_t s = 0; s < g->n_states; s++) {
        const gr_crule *R = &g->rules[g->rule_of[s]];
        int bytes = 0;
        for (int32_t c = 0; c < R->n_classes; c++) {
            int32_t *t = &g->trans[g->row[s] + c];
            if (*t >= 0 && g->dist[*t] >= GR_INF_DIST) *t = -1;
            bytes |= *t >= 0;
        }
        int32_t a = g->call_off[s], z = g->call_off[s + 1];
        g->call_off[s] = w;
        for (int32_t j = a; j < z; j++)
            if (g->dist[g->calls[j].start] < GR_INF_DIST && g->dist[g->calls[j].ret] < GR_INF_DIST)
                g->calls[w++] = g->calls[j];
        g->flags[s] = (uint8_t)((g->flags[s] & ~GR_ST_BYTES) | (bytes ? GR_ST_BYTES : 0));
    }
    g->call_off[g->n_states] = w;
    for (int32_t s = 0; s < g->n_states; s++)
        for (int32_t j = g->call_off[s]; j < g->call_off[s + 1]; j++) {
            int32_t r = g->calls[j].ret;
            const gr_crule *R = &g->rules[g->rule_of[r]];
            int edges = g->call_off[r] != g->call_off[r + 1];
            for (int32_t c = 0; c < R->n_classes && !edges; c++)
                edges = g->trans[g->row[r] + c] >= 0;
            g->calls[j].tail = (g->flags[r] & GR_ST_FINAL) && !edges;
        }
}

/* Invariant (2): a rule that reaches a call of itself through states it can
 * reach without consuming a byte would make the parser push forever. The
 * graph r -> callee over such calls must be acyclic. */
static int left_recursion(gr_grammar *g, gr_builder *b)
{
    int32_t R = g->n_rules;
    VEC(kt) ed = {0};
    int32_t *adj_off = calloc((size_t)R + 1, sizeof *adj_off);
    uint8_t *color = calloc((size_t)R, 1);
    int32_t *stk = malloc(sizeof(int32_t) * (size_t)(g->n_states + R + 1));
    uint8_t *seen = calloc((size_t)g->n_states, 1);
    int32_t *it = malloc(sizeof(int32_t) * (size_t)(R + 1));
    int rc = 0;
    if (!adj_off || !color || !stk || !seen || !it) goto nomem;
    for (int32_t r = 0; r < R; r++) { /* states of r reachable by zero-byte moves */
        int32_t n = 0;
        stk[n++] = g->rules[r].first;
        seen[g->rules[r].first] = 1;
        while (n) {
            int32_t s = stk[--n];
            for (int32_t j = g->call_off[s]; j < g->call_off[s + 1]; j++) {
                if (VPUSH(ed, ((kt){r, g->rule_of[g->calls[j].start]}))) goto nomem;
                if (g->dist[g->calls[j].start] == 0 && !seen[g->calls[j].ret]) {
                    seen[g->calls[j].ret] = 1;
                    stk[n++] = g->calls[j].ret;
                }
            }
        }
    }
    if ((size_t)ed.n > 1) /* qsort(NULL, 0) is undefined */
        qsort(ed.v, (size_t)ed.n, sizeof *ed.v, cmp_kt);
    for (int32_t i = 0; i < ed.n; i++)
        adj_off[ed.v[i].key + 1]++;
    for (int32_t r = 0; r < R; r++)
        adj_off[r + 1] += adj_off[r];
    /* cycle search: iterative DFS with colors (1 on the path, 2 done) */
    for (int32_t r0 = 0; r0 < R && !rc; r0++) {
        if (color[r0]) continue;
        int32_t n = 0;
        stk[n++] = r0;
        it[r0] = adj_off[r0];
        color[r0] = 1;
        while (n && !rc) {
            int32_t r = stk[n - 1];
            if (it[r] >= adj_off[r + 1]) {
                color[r] = 2;
                n--;
                continue;
            }
            int32_t t = ed.v[it[r]++].to;
            if (color[t] == 1) {
                gr_b_fail(b, KILN_E_INVALID,
                          "grammar: rule '%s' is left-recursive (it can reach "
                          "itself without consuming input)",
                          g->rules[t].name);
                rc = -1;
            } else if (!color[t]) {
                color[t] = 1;
                it[t] = adj_off[t];
                stk[n++] = t;
            }
        }
    }
    goto done;
nomem:
    gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
    rc = -1;
done:
    free(ed.v);
    free(adj_off);
    free(color);
    free(stk);
    free(seen);
    free(it);
    return rc;
}

/* Leaf rules (no calls): serialized canonical DFA + hash, for gr_vocab's cache. */
static int leaves(gr_grammar *g)
{
    size_t total = 0;
    for (int32_t r = 0; r < g->n_rules; r++) {
        gr_crule *R = &g->rules[r];
        R->leaf_blob = -1;
        int leaf = 1;
        for (int32_t s = R->first; s < R->first + R->n_states && leaf; s++)
            leaf = g->call_off[s] == g->call_off[s + 1];
        if (!leaf) continue;
        R->leaf_blob_len =
            (int32_t)(8 + 256 + (size_t)R->n_states * (1 + 4 * (size_t)R->n_classes));
        total += (size_t)R->leaf_blob_len;
        R->leaf_blob = 0; /* placed below */
    }
    g->blob = malloc(total ? total : 1);
    if (!g->blob) return -1;
    size_t at = 0;
    for (int32_t r = 0; r < g->n_rules; r++) {
        gr_crule *R = &g->rules[r];
        if (R->leaf_blob < 0) continue;
        uint8_t *p = g->blob + at;
        R->leaf_blob = (int32_t)at;
        int32_t hdr[2] = {R->n_states, R->n_classes};
        memcpy(p, hdr, 8);
        memcpy(p + 8, R->cls, 256);
        uint8_t *q = p + 264;
        for (int32_t s = 0; s < R->n_states; s++) {
            int32_t gs = R->first + s;
            *q++ = g->flags[gs] & GR_ST_FINAL;
            for (int32_t c = 0; c < R->n_classes; c++) {
                int32_t t = g->trans[g->row[gs] + c];
                int32_t local = t < 0 ? -1 : t - R->first;
                memcpy(q, &local, 4);
                q += 4;
            }
            g->flags[gs] |= GR_ST_LEAF;
        }
        R->leaf_hash = XXH3_64bits(p, (size_t)R->leaf_blob_len) | 1;
        at += (size_t)R->leaf_blob_len;
    }
    return 0;
}

/* Rules reachable from root, in discovery order (root first). */
static int reachable(gr_builder *b, gr_rule root, int32_t *rmap, int32_t *order, int32_t *n_order)
{
    for (int32_t i = 0; i < b->n_rules; i++)
        rmap[i] = -1;
    int32_t n = 0;
    rmap[root] = n;
    order[n++] = root;
    gr_expr *stk = malloc(sizeof(gr_expr) * (size_t)(b->n_nodes + 1));
    uint8_t *seen = calloc((size_t)b->n_nodes + 1, 1);
    if (!stk || !seen) {
        free(stk);
        free(seen);
        return gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
    }
    for (int32_t k = 0; k < n; k++) {
        gr_brule *r = &b->rules[order[k]];
        if (r->body < 0) {
            free(stk);
            free(seen);
            return gr_b_fail(b, KILN_E_INVALID, "grammar: rule '%s' is not defined", r->name);
        }
        int32_t sp = 0;
        stk[sp++] = r->body;
        while (sp) {
            gr_expr x = stk[--sp];
            if (seen[x]) continue;
            seen[x] = 1;
            const gr_node *nd = &b->nodes[x];
            if (nd->kind == GR_E_SEQ || nd->kind == GR_E_ALT || nd->kind == GR_E_AND) {
                for (int32_t i = 0; i < nd->b; i++)
                    stk[sp++] = b->kids[nd->a + i];
            } else if (nd->kind == GR_E_REP) {
                stk[sp++] = nd->a;
            } else if (nd->kind == GR_E_REF && rmap[nd->a] < 0) {
                rmap[nd->a] = n;
                order[n++] = nd->a;
            }
        }
    }
    free(stk);
    free(seen);
    *n_order = n;
    return 0;
}

static kiln_code compile_rules(gr_builder *b, int32_t *rmap, int32_t *order, int32_t nr,
                               gr_grammar *g)
{
    nfa n = {.b = b, .rmap = rmap};
    closer cl = {.n = &n};
    rdfa *d = calloc((size_t)nr, sizeof *d);
    int32_t *ns = malloc(sizeof(int32_t) * (size_t)nr), *ne = malloc(sizeof(int32_t) * (size_t)nr);
    int32_t dfa_total = 0;
    if (!d || !ns || !ne) {
        gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
        goto out;
    }
    /* AND bodies: their parts' fragments go after the rules' own, in order */
    ivec parts = {0};
    for (int32_t i = 0; i < nr && !b->failed; i++) {
        const gr_node *nd = &b->nodes[b->rules[order[i]].body];
        if (nd->kind == GR_E_AND) {
            ns[i] = ne[i] = -1;
            for (int32_t k = 0; k < nd->b && !b->failed; k++) {
                frag f = build(&n, b->kids[nd->a + k], 0);
                if (VPUSH(parts, f.s) || VPUSH(parts, f.e))
                    gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
            }
        } else {
            frag f = build(&n, b->rules[order[i]].body, 0);
            ns[i] = f.s;
            ne[i] = f.e;
        }
        if (gr_b_check_time(b)) break;
    }
    if (b->failed) {
        free(parts.v);
        goto out;
    }
    g->nfa_states = n.total;
    cl.stamp = calloc((size_t)n.first.n + 1, sizeof *cl.stamp);
    if (!cl.stamp) {
        free(parts.v);
        gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
        goto out;
    }
    int32_t pk = 0;
    for (int32_t i = 0; i < nr && !b->failed; i++) {
        const gr_node *nd = &b->nodes[b->rules[order[i]].body];
        if (nd->kind != GR_E_AND) {
            if (!determinize(&n, &cl, ns[i], ne[i], &dfa_total, &d[i])) minimize(b, &d[i]);
            continue;
        }
        for (int32_t k = 0; k < nd->b && !b->failed; k++, pk++) {
            rdfa part;
            if (determinize(&n, &cl, parts.v[2 * pk], parts.v[2 * pk + 1], &dfa_total, &part))
                break;
            if (minimize(b, &part)) {
                rdfa_free(&part);
                break;
            }
            if (k == 0) {
                d[i] = part;
            } else {
                product(b, &d[i], &part, &dfa_total);
                rdfa_free(&part);
            }
        }
    }
    free(parts.v);
    if (b->failed) goto out;
    /* global numbering */
    int64_t states = 0, trans = 0, calls = 0;
    for (int32_t i = 0; i < nr; i++) {
        states += d[i].n_states;
        trans += (int64_t)d[i].n_states * d[i].n_classes;
        calls += d[i].n_calls;
    }
    if (trans > INT32_MAX / 2) {
        gr_b_fail(b, KILN_E_INVALID, "grammar is too large (transition table)");
        goto out;
    }
    g->n_rules = nr;
    g->n_states = (int32_t)states;
    g->rules = calloc((size_t)nr, sizeof *g->rules);
    g->flags = calloc((size_t)states + 1, 1);
    g->rule_of = malloc(sizeof(int32_t) * ((size_t)states + 1));
    g->row = malloc(sizeof(int32_t) * ((size_t)states + 1));
    g->trans = malloc(sizeof(int32_t) * ((size_t)trans + 1));
    g->call_off = malloc(sizeof(int32_t) * ((size_t)states + 1));
    g->calls = malloc(sizeof(gr_call) * ((size_t)calls + 1));
    g->dist = malloc(sizeof(int32_t) * ((size_t)states + 1));
    if (!g->rules || !g->flags || !g->rule_of || !g->row || !g->trans || !g->call_off ||
        !g->calls || !g->dist) {
        gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
        goto out;
    }
    int32_t first = 0, tr = 0, cs = 0;
    for (int32_t i = 0; i < nr; i++) {
        g->rules[i].first = first;
        g->rules[i].n_states = d[i].n_states;
        g->rules[i].n_classes = d[i].n_classes;
        g->rules[i].leaf_blob = -1;
        memcpy(g->rules[i].cls, d[i].cls, 256);
        g->rules[i].name = strdup(b->rules[order[i]].name);
        if (!g->rules[i].name) {
            gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
            goto out;
        }
        first += d[i].n_states;
    }
    for (int32_t i = 0; i < nr; i++) {
        const rdfa *D = &d[i];
        int32_t base = g->rules[i].first;
        for (int32_t s = 0; s < D->n_states; s++) {
            int32_t gs = base + s;
            g->rule_of[gs] = i;
            g->row[gs] = tr;
            g->flags[gs] = D->final[s] ? GR_ST_FINAL : 0;
            for (int32_t c = 0; c < D->n_classes; c++) {
                int32_t t = D->trans[(size_t)s * D->n_classes + c];
                g->trans[tr++] = t < 0 ? -1 : base + t;
            }
            g->call_off[gs] = cs;
            for (int32_t j = D->coff[s]; j < D->coff[s + 1]; j++)
                g->calls[cs++] = (gr_call){.start = g->rules[D->calls[j].sym].first,
                                           .ret = base + D->calls[j].to};
        }
    }
    g->call_off[states] = cs;
out:
    if (d)
        for (int32_t i = 0; i < nr; i++)
            rdfa_free(&d[i]);
    free(d);
    free(ns);
    free(ne);
    free(cl.stamp);
    free(cl.stack.v);
    free(n.first.v);
    free(n.edges.v);
    return b->failed ? b->err.code : KILN_OK;
}

/* The grammar's size and fingerprint, once its tables are final. Fields are
 * hashed one by one: structs with padding would hash indeterminate bytes. */
static void seal(gr_grammar *g)
{
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    int32_t hdr[3] = {g->n_rules, g->n_states, g->root};
    XXH3_64bits_update(&st, hdr, sizeof hdr);
    size_t ntrans = 0, blob = 0, names = 0;
    for (int32_t r = 0; r < g->n_rules; r++) {
        const gr_crule *R = &g->rules[r];
        int32_t v[5] = {R->first, R->n_states, R->n_classes, R->leaf_blob, R->leaf_blob_len};
        XXH3_64bits_update(&st, v, sizeof v);
        XXH3_64bits_update(&st, R->cls, sizeof R->cls);
        ntrans += (size_t)R->n_states * (size_t)R->n_classes;
        if (R->leaf_blob >= 0) blob += (size_t)R->leaf_blob_len;
        names += strlen(R->name) + 1;
    }
    size_t ns = (size_t)g->n_states, ncalls = (size_t)g->call_off[g->n_states];
    XXH3_64bits_update(&st, g->flags, ns);
    XXH3_64bits_update(&st, g->rule_of, 4 * ns);
    XXH3_64bits_update(&st, g->row, 4 * ns);
    XXH3_64bits_update(&st, g->trans, 4 * ntrans);
    XXH3_64bits_update(&st, g->call_off, 4 * (ns + 1));
    for (size_t j = 0; j < ncalls; j++) {
        int32_t c[3] = {g->calls[j].start, g->calls[j].ret, g->calls[j].tail};
        XXH3_64bits_update(&st, c, sizeof c);
    }
    XXH3_64bits_update(&st, g->dist, 4 * ns);
    uint64_t h = XXH3_64bits_digest(&st);
    g->fingerprint = h ? h : 1;
    g->bytes = sizeof *g + (size_t)g->n_rules * sizeof *g->rules + names + ns * (1 + 4 * 4) +
               4 * ntrans + (ns + 1) * 4 + ncalls * sizeof *g->calls + blob;
}

size_t gr_grammar_bytes(const gr_grammar *g)
{
    return g->bytes;
}

uint64_t gr_grammar_fingerprint(const gr_grammar *g)
{
    return g->fingerprint;
}

kiln_code gr_builder_compile(gr_builder *b, gr_rule root, gr_grammar **out, kiln_err *err)
{
    *out = NULL;
    double t0 = plat_now();
    if (!b->failed && (root < 0 || root >= b->n_rules))
        gr_b_fail(b, KILN_E_INTERNAL, "grammar: bad root rule");
    gr_grammar *g = NULL;
    int32_t *rmap = NULL, *order = NULL, nr = 0;
    if (b->failed) goto fail;
    { /* hoisting adds rules: size the maps after it */
        int32_t nrules = b->n_rules;
        uint8_t *seen = calloc((size_t)b->n_nodes + 1, 1);
        if (!seen) {
            gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
            goto fail;
        }
        for (int32_t r = 0; r < nrules && !b->failed; r++)
            if (b->rules[r].body >= 0) hoist(b, b->rules[r].body, b->rules[r].name, 0, seen);
        free(seen);
    }
    if (b->failed) goto fail;
    rmap = malloc(sizeof(int32_t) * (size_t)(b->n_rules + 1));
    order = malloc(sizeof(int32_t) * (size_t)(b->n_rules + 1));
    g = calloc(1, sizeof *g);
    if (!rmap || !order || !g) {
        gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
        goto fail;
    }
    atomic_init(&g->refs, 1);
    if (reachable(b, root, rmap, order, &nr)) goto fail;
    if (compile_rules(b, rmap, order, nr, g)) goto fail;
    if (distances(g)) {
        gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
        goto fail;
    }
    g->root = g->rules[0].first;
    if (g->dist[g->root] >= GR_INF_DIST) {
        gr_b_fail(b, KILN_E_INVALID,
                  "grammar: rule '%s' matches nothing (no finite text "
                  "satisfies it)",
                  g->rules[0].name);
        goto fail;
    }
    prune(g);
    if (left_recursion(g, b)) goto fail;
    if (leaves(g)) {
        gr_b_fail(b, KILN_E_NOMEM, "grammar: out of memory");
        goto fail;
    }
    free(rmap);
    free(order);
    seal(g);
    g->compile_s = plat_now() - t0;
    *out = g;
    return KILN_OK;
fail:
    free(rmap);
    free(order);
    grammar_free(g);
    if (err) *err = b->err;
    return b->err.code;
}
