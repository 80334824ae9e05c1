/*
 * gr_vocab.c — a tokenizer's tokens as bytes: the token trie the matcher walks
 * and the leaf cache shared by every matcher on this vocabulary.
 *
 * Trie: the constrainable tokens (not empty, at most GR_MAX_TOKEN_BYTES
 * bytes; a special token as its marker 0xFF id id id, an ordinary token
 * holding 0xFF left out) sorted by their bytes; nodes are laid out in
 * preorder without the root, each with its byte, depth, the index just past
 * its subtree (tend: skipping a dead subtree is one assignment) and the token
 * that ends there (others with the same bytes chain through dup).
 * Leaf cache: for a state of a leaf rule (a rule without calls: a JSON string,
 * a number, a regular GBNF rule), the tokens that stay inside the rule from
 * that state (`accept`) and those that may leave it mid-token (`maybe`: they
 * need the whole parse stack). Equal leaf rules of different grammars share
 * entries (their canonical DFAs are compared byte for byte), so the JSON
 * string of every schema is walked once per tokenizer.
 * Invariants:
 *   (1) entries are never removed before gr_vocab_destroy (matchers keep pointers)
 *   (2) for an entry of state s: accept ∩ maybe = ∅, and every token whose
 *       bytes are accepted from s by some parse stack is in accept ∪ maybe
 * Threads: everything but the cache is read-only; mu guards the cache table.
 */
#include "grammar/gr_int.h"

#include <stdlib.h>
#include <string.h>

#define GR_MAX_TOKEN_BYTES 4096
#define LEAF_CACHE_BYTES ((size_t)256 << 20)

int32_t gr_vocab_size(const gr_vocab *v)
{
    return v->n_tokens;
}

size_t gr_vocab_words(const gr_vocab *v)
{
    return v->words;
}

const uint8_t *gr_vocab_token(const gr_vocab *v, int32_t id, size_t *n)
{
    if (id < 0 || id >= v->n_tokens) {
        *n = 0;
        return NULL;
    }
    *n = v->off[id + 1] - v->off[id];
    return v->bytes + v->off[id];
}

bool gr_vocab_constrainable(const gr_vocab *v, int32_t id)
{
    return id >= 0 && id < v->n_tokens && v->ok[id];
}

void gr_vocab_destroy(gr_vocab *v)
{
    if (!v) return;
    for (int32_t i = 0; i < v->lcap; i++) {
        gr_leaf_entry *e = v->ltab ? v->ltab[i] : NULL;
        while (e) {
            gr_leaf_entry *nx = e->next;
            free(e->blob);
            free(e->set.accept);
            free(e->set.maybe);
            free(e);
            e = nx;
        }
    }
    free(v->ltab);
    while (v->ctries) {
        gr_ctrie *t = v->ctries;
        v->ctries = t->next;
        free(t->ncls);
        free(t->depth);
        free(t->end);
        free(t->tok_off);
        free(t->toks);
        free(t);
    }
    pthread_mutex_destroy(&v->mu);
    free(v->bytes);
    free(v->off);
    free(v->ok);
    free(v->tbyte);
    free(v->tdepth);
    free(v->tend);
    free(v->ttok);
    free(v->dup);
    free(v);
}

typedef struct {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
} tokkey;

static int cmp_tok(const void *a, const void *b)
{
    const tokkey *x = a, *y = b;
    int c = memcmp(x->p, y->p, x->len < y->len ? x->len : y->len);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Builds the preorder trie from the sorted constrainable tokens. */
static kiln_code build_trie(gr_vocab *v, int32_t *ids, int32_t n, kiln_err *err)
{
    size_t total = 0;
    for (int32_t i = 0; i < n; i++)
        total += v->off[ids[i] + 1] - v->off[ids[i]];
    if (total > INT32_MAX / 2) return kiln_fail(err, KILN_E_INVALID, "vocabulary too large");
    v->tbyte = malloc(total + 1);
    v->tdepth = malloc(sizeof *v->tdepth * (total + 1));
    v->tend = malloc(sizeof *v->tend * (total + 1));
    v->ttok = malloc(sizeof *v->ttok * (total + 1));
    int32_t path[GR_MAX_TOKEN_BYTES + 1];
    if (!v->tbyte || !v->tdepth || !v->tend || !v->ttok)
        return kiln_fail(err, KILN_E_NOMEM, "grammar vocabulary: out of memory");
    int32_t nn = 0, plen = 0, prev = -1;
    for (int32_t k = 0; k < n; k++) {
        int32_t id = ids[k];
        const uint8_t *s = v->bytes + v->off[id];
        int32_t len = (int32_t)(v->off[id + 1] - v->off[id]);
        int32_t lcp = 0;
        if (prev >= 0) {
            const uint8_t *p = v->bytes + v->off[prev];
            int32_t pl = (int32_t)(v->off[prev + 1] - v->off[prev]);
            while (lcp < pl && lcp < len && p[lcp] == s[lcp])
                lcp++;
        }
        while (plen > lcp)
            v->tend[path[--plen]] = nn; /* close finished subtrees */
        for (int32_t d = plen; d < len; d++) {
            v->tbyte[nn] = s[d];
            v->tdepth[nn] = (uint16_t)(d + 1);
            v->ttok[nn] = -1;
            path[plen++] = nn++;
        }
        int32_t node = path[len - 1];
        if (v->ttok[node] < 0) {
            v->ttok[node] = id;
        } else { /* same bytes as an earlier token: chain it */
            int32_t t = v->ttok[node];
            while (v->dup[t] >= 0)
                t = v->dup[t];
            v->dup[t] = id;
        }
        if (len > v->max_depth) v->max_depth = len;
        prev = id;
    }
    while (plen > 0)
        v->tend[path[--plen]] = nn;
    v->n_nodes = nn;
    return KILN_OK;
}

kiln_code gr_vocab_create(const tok_tokenizer *tok, gr_vocab **out, kiln_err *err)
{
    *out = NULL;
    int32_t n = tok_vocab_size(tok);
    if (n <= 0) return kiln_fail(err, KILN_E_INVALID, "grammar vocabulary: the tokenizer is empty");
    gr_vocab *v = calloc(1, sizeof *v);
    if (!v) return kiln_fail(err, KILN_E_NOMEM, "grammar vocabulary: out of memory");
    pthread_mutex_init(&v->mu, NULL);
    v->n_tokens = n;
    v->words = ((size_t)n + 63) / 64;
    v->off = malloc(sizeof *v->off * ((size_t)n + 1));
    v->ok = calloc((size_t)n, 1);
    v->dup = malloc(sizeof *v->dup * (size_t)n);
    int32_t *ids = malloc(sizeof *ids * (size_t)n);
    size_t cap = (size_t)n * 8, len = 0;
    v->bytes = malloc(cap);
    kiln_code rc = KILN_OK;
    if (!v->off || !v->ok || !v->dup || !ids || !v->bytes) {
        rc = kiln_fail(err, KILN_E_NOMEM, "grammar vocabulary: out of memory");
        goto done;
    }
    int32_t n_ok = 0;
    for (int32_t id = 0; id < n; id++) {
        char *b = NULL, mark[GR_SPECIAL_LEN];
        size_t bl = 0;
        v->off[id] = (uint32_t)len;
        v->dup[id] = -1;
        bool special = tok_is_special(tok, id);
        if (special) { /* its marker: no text spells it (gr_special) */
            gr_special_marker(id, (uint8_t *)mark);
            bl = id <= GR_SPECIAL_MAX_ID ? GR_SPECIAL_LEN : 0;
        } else if (tok_token_bytes(tok, id, &b, &bl, NULL) != KILN_OK) {
            bl = 0; /* a hole in the ids */
        }
        if (len + bl > cap) {
            while (len + bl > cap)
                cap *= 2;
            uint8_t *nb = cap > UINT32_MAX ? NULL : realloc(v->bytes, cap);
            if (!nb) {
                free(b);
                rc = kiln_fail(err, KILN_E_NOMEM, "grammar vocabulary: out of memory");
                goto done;
            }
            v->bytes = nb;
        }
        if (bl) memcpy(v->bytes + len, special ? mark : b, bl);
        free(b);
        len += bl;
        /* an ordinary token holding 0xFF (a byte no UTF-8 text has) could start
         * a marker: out of the trie, as no grammar over text accepts it anyway */
        v->ok[id] = bl > 0 && bl <= GR_MAX_TOKEN_BYTES &&
                    (special || !memchr(v->bytes + len - bl, GR_SPECIAL_LEAD, bl));
        if (v->ok[id]) ids[n_ok++] = id;
    }
    v->off[n] = (uint32_t)len;
    tokkey *keys = malloc(sizeof *keys * ((size_t)n_ok + 1));
    if (!keys) {
        rc = kiln_fail(err, KILN_E_NOMEM, "grammar vocabulary: out of memory");
        goto done;
    }
    for (int32_t i = 0; i < n_ok; i++)
        keys[i] = (tokkey){v->bytes + v->off[ids[i]], v->off[ids[i] + 1] - v->off[ids[i]], ids[i]};
    if ((size_t)n_ok > 1) /* qsort(NULL, 0) is undefined */
        qsort(keys, (size_t)n_ok, sizeof *keys, cmp_tok);
    for (int32_t i = 0; i < n_ok; i++)
        ids[i] = keys[i].id;
    free(keys);
    rc = build_trie(v, ids, n_ok, err);
    if (rc) goto done;
    v->lcap = 1024;
    v->ltab = calloc((size_t)v->lcap, sizeof *v->ltab);
    v->lbytes_cap = LEAF_CACHE_BYTES;
    if (!v->ltab) rc = kiln_fail(err, KILN_E_NOMEM, "grammar vocabulary: out of memory");
done:
    free(ids);
    if (rc) {
        gr_vocab_destroy(v);
        return rc;
    }
    *out = v;
    return KILN_OK;
}

/* ------------------------------------------------------------ leaf sets */

static void ctrie_free(gr_ctrie *t)
{
    if (!t) return;
    free(t->ncls);
    free(t->depth);
    free(t->end);
    free(t->tok_off);
    free(t->toks);
    free(t);
}

typedef struct {
    const gr_vocab *v;
    const uint8_t *cls;
    gr_ctrie *t;
    int32_t *scratch; /* children of the sets along the current path, then their buckets */
    int32_t *counts;  /* [(max_depth + 1) * 257] per-level class counts */
    int32_t nn, nt;
} cbuild;

/* Emits the class-trie subtree below the set S[0..n) of byte-trie nodes (all
 * reached by one class string of length d): children grouped by class. */
static void cb_rec(cbuild *b, const int32_t *S, int32_t n, int d, int32_t *top)
{
    const gr_vocab *v = b->v;
    int32_t k = 0;
    for (int32_t j = 0; j < n; j++) { /* the children of every node in S */
        int32_t x = S[j], stop = x < 0 ? v->n_nodes : v->tend[x];
        for (int32_t c = x < 0 ? 0 : x + 1; c < stop; c = v->tend[c])
            top[k++] = c;
    }
    if (!k) return;
    int32_t *cnt = b->counts + (size_t)d * 257, *sorted = top + k;
    memset(cnt, 0, sizeof *cnt * 257);
    for (int32_t j = 0; j < k; j++)
        cnt[b->cls[v->tbyte[top[j]]] + 1]++;
    for (int c = 0; c < 256; c++)
        cnt[c + 1] += cnt[c];
    for (int32_t j = 0; j < k; j++)
        sorted[cnt[b->cls[v->tbyte[top[j]]]]++] = top[j];
    for (int32_t j = 0; j < k;) { /* one class-trie node per class present */
        uint8_t c = b->cls[v->tbyte[sorted[j]]];
        int32_t e = j;
        while (e < k && b->cls[v->tbyte[sorted[e]]] == c)
            e++;
        int32_t node = b->nn++;
        b->t->ncls[node] = c;
        b->t->depth[node] = (uint16_t)(d + 1);
        b->t->tok_off[node] = b->nt;
        for (int32_t q = j; q < e; q++)
            for (int32_t tk = v->ttok[sorted[q]]; tk >= 0; tk = v->dup[tk])
                b->t->toks[b->nt++] = tk;
        cb_rec(b, sorted + j, e - j, d + 1, sorted + k);
        b->t->end[node] = b->nn;
        j = e;
    }
}

/* The class trie of the constrainable tokens under class map cls, built from
 * the byte trie (every byte node falls into exactly one class node). */
static gr_ctrie *ctrie_build(const gr_vocab *v, const uint8_t *cls)
{
    gr_ctrie *t = calloc(1, sizeof *t);
    cbuild b = {.v = v, .cls = cls, .t = t};
    size_t cap = (size_t)v->n_nodes + 1;
    if (!t) return NULL;
    memcpy(t->cls, cls, 256);
    t->ncls = malloc(cap);
    t->depth = malloc(sizeof *t->depth * cap);
    t->end = malloc(sizeof *t->end * cap);
    t->tok_off = malloc(sizeof *t->tok_off * (cap + 1));
    t->toks = malloc(sizeof *t->toks * ((size_t)v->n_tokens + 1));
    b.scratch = malloc(sizeof *b.scratch * (2 * cap + 2));
    b.counts = malloc(sizeof *b.counts * 257 * ((size_t)v->max_depth + 2));
    if (!t->ncls || !t->depth || !t->end || !t->tok_off || !t->toks || !b.scratch || !b.counts) {
        free(b.scratch);
        free(b.counts);
        ctrie_free(t);
        return NULL;
    }
    int32_t root = -1;
    cb_rec(&b, &root, 1, 0, b.scratch);
    t->n_nodes = b.nn;
    t->tok_off[b.nn] = b.nt;
    free(b.scratch);
    free(b.counts);
    return t;
}

/* The class trie for cls: cached (list under mu), built on first use. */
static const gr_ctrie *ctrie_get(gr_vocab *v, const uint8_t *cls)
{
    pthread_mutex_lock(&v->mu);
    for (gr_ctrie *t = v->ctries; t; t = t->next)
        if (!memcmp(t->cls, cls, 256)) {
            pthread_mutex_unlock(&v->mu);
            return t;
        }
    pthread_mutex_unlock(&v->mu);
    gr_ctrie *t = ctrie_build(v, cls);
    if (!t) return NULL;
    pthread_mutex_lock(&v->mu);
    for (gr_ctrie *o = v->ctries; o; o = o->next)
        if (!memcmp(o->cls, cls, 256)) {
            pthread_mutex_unlock(&v->mu);
            ctrie_free(t);
            return o;
        }
    t->next = v->ctries;
    v->ctries = t;
    v->lbytes += (size_t)t->n_nodes * 11 + sizeof(int32_t) * (size_t)v->n_tokens;
    pthread_mutex_unlock(&v->mu);
    return t;
}

static int add_maybe(gr_leaf_set *out, size_t *mcap, const int32_t *ids, int32_t n, int32_t limit)
{
    if (out->n_maybe + n > limit) {
        out->useful = false;
        return 0;
    }
    if ((size_t)(out->n_maybe + n) > *mcap) {
        while ((size_t)(out->n_maybe + n) > *mcap)
            *mcap *= 2;
        int32_t *nm = realloc(out->maybe, sizeof *nm * *mcap);
        if (!nm) return -1;
        out->maybe = nm;
    }
    memcpy(out->maybe + out->n_maybe, ids, sizeof *ids * (size_t)n);
    out->n_maybe += n;
    return 0;
}

/* The same walk over the byte trie: cheaper than building a class trie when
 * few bytes leave s (digits, keywords, formats). */
static int leaf_bytes(const gr_vocab *v, const gr_grammar *g, int32_t s, gr_leaf_set *out)
{
    int32_t *st = malloc(sizeof *st * ((size_t)v->max_depth + 1));
    uint8_t *pf = malloc((size_t)v->max_depth + 1);
    size_t mcap = 256;
    int32_t limit = v->n_tokens / 16 > 2048 ? v->n_tokens / 16 : 2048;
    out->maybe = malloc(sizeof *out->maybe * mcap);
    if (!st || !pf || !out->maybe) goto nomem;
    st[0] = s;
    pf[0] = 0;
    for (int32_t i = 0; i < v->n_nodes && out->useful;) {
        int32_t d = v->tdepth[i];
        int32_t t = gr_step_byte(g, st[d - 1], v->tbyte[i]);
        if (t < 0) {
            for (int32_t j = i; pf[d - 1] && j < v->tend[i] && out->useful; j++)
                for (int32_t k = v->ttok[j]; k >= 0; k = v->dup[k])
                    if (add_maybe(out, &mcap, &k, 1, limit)) goto nomem;
            i = v->tend[i];
            continue;
        }
        st[d] = t;
        pf[d] = pf[d - 1] | (g->flags[t] & GR_ST_FINAL);
        for (int32_t k = v->ttok[i]; k >= 0; k = v->dup[k])
            out->accept[k >> 6] |= 1ull << (k & 63);
        i++;
    }
    free(st);
    free(pf);
    return 0;
nomem:
    free(st);
    free(pf);
    return -1;
}

/* Walks the leaf rule from gstate s over the tokens (see the file comment):
 * a token whose path dies after the rule could have ended is a `maybe`; one
 * whose path stays alive is accepted. States that many bytes leave (a string
 * body) walk the class trie, others the byte trie. */
static int leaf_compute(gr_vocab *v, const gr_grammar *g, int32_t s, gr_leaf_set *out)
{
    memset(out, 0, sizeof *out);
    const gr_crule *R = &g->rules[g->rule_of[s]];
    int live = 0;
    for (int c = 0; c < 256; c++)
        live += gr_step_byte(g, s, (uint8_t)c) >= 0;
    if (live < 64) {
        out->accept = calloc(v->words, sizeof *out->accept);
        out->useful = true;
        if (out->accept && !leaf_bytes(v, g, s, out)) return 0;
        free(out->accept);
        free(out->maybe);
        memset(out, 0, sizeof *out);
        return -1;
    }
    const gr_ctrie *ct = ctrie_get(v, R->cls);
    out->accept = calloc(v->words, sizeof *out->accept);
    int32_t *st = malloc(sizeof *st * ((size_t)v->max_depth + 1));
    uint8_t *pf = malloc((size_t)v->max_depth + 1);
    if (!ct || !out->accept || !st || !pf) goto nomem;
    int32_t limit = v->n_tokens / 16 > 2048 ? v->n_tokens / 16 : 2048;
    size_t mcap = 256;
    out->maybe = malloc(sizeof *out->maybe * mcap);
    if (!out->maybe) goto nomem;
    st[0] = s;
    pf[0] = 0;
    out->useful = true;
    for (int32_t i = 0; i < ct->n_nodes;) {
        int32_t d = ct->depth[i];
        int32_t t = g->trans[g->row[st[d - 1]] + ct->ncls[i]];
        int32_t lo = ct->tok_off[i];
        if (t < 0) {
            if (pf[d - 1]) { /* left the rule earlier on this path: the parent decides */
                int32_t hi = ct->tok_off[ct->end[i]];
                if (add_maybe(out, &mcap, ct->toks + lo, hi - lo, limit)) goto nomem;
                if (!out->useful) break;
            }
            i = ct->end[i];
            continue;
        }
        st[d] = t;
        pf[d] = pf[d - 1] | (g->flags[t] & GR_ST_FINAL);
        int32_t hi = ct->tok_off[i + 1]; /* the tokens ending exactly here */
        for (int32_t k = lo; k < hi; k++)
            out->accept[ct->toks[k] >> 6] |= 1ull << (ct->toks[k] & 63);
        i++;
    }
    free(st);
    free(pf);
    return 0;
nomem:
    free(st);
    free(pf);
    free(out->accept);
    free(out->maybe);
    memset(out, 0, sizeof *out);
    return -1;
}

const gr_leaf_set *gr_vocab_leaf(gr_vocab *v, const gr_grammar *g, int32_t s)
{
    const gr_crule *R = &g->rules[g->rule_of[s]];
    if (R->leaf_blob < 0) return NULL;
    int32_t local = s - R->first;
    const uint8_t *blob = g->blob + R->leaf_blob;
    uint64_t h = R->leaf_hash ^ ((uint64_t)local * 0x9E3779B97F4A7C15ull);
    uint32_t slot = (uint32_t)(h ^ (h >> 32)) & (uint32_t)(v->lcap - 1);
    pthread_mutex_lock(&v->mu);
    for (gr_leaf_entry *e = v->ltab[slot]; e; e = e->next)
        if (e->hash == h && e->local == local && e->blob_len == R->leaf_blob_len &&
            !memcmp(e->blob, blob, (size_t)e->blob_len)) {
            pthread_mutex_unlock(&v->mu);
            return &e->set;
        }
    bool full = v->lbytes >= v->lbytes_cap;
    pthread_mutex_unlock(&v->mu);
    if (full) return NULL;
    /* computed outside the lock: other threads keep using the cache meanwhile */
    gr_leaf_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->blob = malloc((size_t)R->leaf_blob_len);
    if (!e->blob || leaf_compute(v, g, s, &e->set)) {
        free(e->blob);
        free(e);
        return NULL;
    }
    memcpy(e->blob, blob, (size_t)R->leaf_blob_len);
    e->blob_len = R->leaf_blob_len;
    e->local = local;
    e->hash = h;
    if (!e->set.useful) { /* keep the verdict only */
        free(e->set.accept);
        free(e->set.maybe);
        e->set.accept = NULL;
        e->set.maybe = NULL;
        e->set.n_maybe = 0;
    }
    pthread_mutex_lock(&v->mu);
    for (gr_leaf_entry *o = v->ltab[slot]; o; o = o->next) /* another thread was faster */
        if (o->hash == h && o->local == local && o->blob_len == e->blob_len &&
            !memcmp(o->blob, e->blob, (size_t)e->blob_len)) {
            pthread_mutex_unlock(&v->mu);
            free(e->blob);
            free(e->set.accept);
            free(e->set.maybe);
            free(e);
            return &o->set;
        }
    e->next = v->ltab[slot];
    v->ltab[slot] = e;
    v->lbytes += sizeof *e + (size_t)e->blob_len + (e->set.accept ? v->words * 8 : 0) +
                 sizeof(int32_t) * (size_t)e->set.n_maybe;
    pthread_mutex_unlock(&v->mu);
    return &e->set;
}
