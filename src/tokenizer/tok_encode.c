/*
 * tok_encode.c — text to ids: the encode pipeline and the post-processor.
 *
 *   repair UTF-8 -> split on raw added tokens (tok_trie_find on trie_raw)
 *   -> each text segment: normalizer -> split on normalized added tokens
 *   -> each text sub-segment: pre-tokenizer -> pieces -> BPE -> ids
 *   -> post-processor ids around the whole (TOK_ADD_SPECIAL)
 * Each text segment is normalized on its own, as HF does: a Prepend("▁")
 * normalizer prefixes every segment that follows an added token.
 * Invariants:
 *   (1) everything after the repair step sees valid UTF-8.
 *   (2) all per-call state (regex match data, BPE cache, buffers) lives in one
 *       enc struct on the caller's stack; the tokenizer is never written.
 * Errors: KILN_E_NOMEM; regex failures (KILN_E_INTERNAL).
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_int.h"

typedef struct {
    const tok_tokenizer *t;
    tok_rx rx;
    tok_bpe_cache *cache;
    int32_t *ids; /* OWNED until handed to the caller */
    size_t n, cap;
    tok_buf norm;
    tok_pieces a, b;
    bool parse_special;
} enc;

static kiln_code push_id(enc *e, int32_t id, kiln_err *err)
{
    if (e->n == e->cap) {
        size_t c = e->cap ? e->cap * 2 : 64;
        int32_t *p = realloc(e->ids, c * sizeof *p);
        if (!p) return kiln_fail(err, KILN_E_NOMEM, "tokenizer: out of memory");
        e->ids = p;
        e->cap = c;
    }
    e->ids[e->n++] = id;
    return KILN_OK;
}

static kiln_code bpe_sink(void *ctx, const char *s, size_t n, bool bytelevel, kiln_err *err)
{
    enc *e = ctx;
    return tok_bpe_word(e->t, e->cache, s, n, bytelevel, &e->ids, &e->n, &e->cap, err);
}

/* A normalized sub-segment with no added token inside: pre-tokenize and BPE. */
static kiln_code enc_words(enc *e, const char *s, size_t n, bool at_start, kiln_err *err)
{
    if (n == 0) return KILN_OK;
    return tok_pretok_each(e->t, &e->rx, s, n, at_start, &e->a, &e->b, bpe_sink, e, err);
}

/* A raw text segment between added tokens: normalize, then split on normalized
 * added tokens. */
static kiln_code enc_segment(enc *e, const char *s, size_t n, bool at_start, kiln_err *err)
{
    const tok_tokenizer *t = e->t;
    if (n == 0) return KILN_OK;
    if (t->norm) {
        kiln_code rc = tok_norm_apply(t->norm, &e->rx, s, n, &e->norm, err);
        if (rc != KILN_OK) return rc;
        s = e->norm.p ? e->norm.p : "";
        n = e->norm.len;
    }
    size_t from = 0, ms, me;
    int32_t idx;
    while (t->trie_norm.n_nodes > 1 &&
           tok_trie_find(t, &t->trie_norm, s, n, from, e->parse_special, &ms, &me, &idx)) {
        kiln_code rc = enc_words(e, s + from, ms - from, at_start && from == 0, err);
        if (rc == KILN_OK) rc = push_id(e, t->added[idx].id, err);
        if (rc != KILN_OK) return rc;
        from = me;
    }
    return enc_words(e, s + from, n - from, at_start && from == 0, err);
}

static kiln_code enc_run(enc *e, const char *s, size_t n, unsigned flags, kiln_err *err)
{
    const tok_tokenizer *t = e->t;
    kiln_code rc = KILN_OK;
    if (flags & TOK_ADD_SPECIAL)
        for (size_t i = 0; i < t->n_post_pre && rc == KILN_OK; i++) rc = push_id(e, t->post_pre[i], err);
    size_t from = 0, ms, me;
    int32_t idx;
    while (rc == KILN_OK && tok_trie_find(t, &t->trie_raw, s, n, from, e->parse_special, &ms, &me, &idx)) {
        rc = enc_segment(e, s + from, ms - from, from == 0, err);
        if (rc == KILN_OK) rc = push_id(e, t->added[idx].id, err);
        from = me;
    }
    if (rc == KILN_OK) rc = enc_segment(e, s + from, n - from, from == 0, err);
    if (flags & TOK_ADD_SPECIAL)
        for (size_t i = 0; i < t->n_post_post && rc == KILN_OK; i++) rc = push_id(e, t->post_post[i], err);
    return rc;
}

kiln_code tok_encode(const tok_tokenizer *t, const char *text, size_t len, unsigned flags,
                     int32_t **ids, size_t *n, kiln_err *err)
{
    *ids = NULL;
    *n = 0;
    enc e = {.t = t, .parse_special = (flags & TOK_PARSE_SPECIAL) != 0};
    tok_buf fixed = {0};
    kiln_code rc = KILN_OK;
    if (!text) {
        text = "";
        len = 0;
    }
    if (!tok_utf8_valid(text, len)) { /* invariant (1) */
        if (tok_utf8_lossy(&fixed, text, len)) return kiln_fail(err, KILN_E_NOMEM, "tokenizer: out of memory");
        text = fixed.p;
        len = fixed.len;
    }
    if (tok_rx_init(&e.rx) || !(e.cache = tok_bpe_cache_new())) {
        rc = kiln_fail(err, KILN_E_NOMEM, "tokenizer: out of memory");
        goto done;
    }
    rc = enc_run(&e, text, len, flags, err);
done:
    tok_rx_free(&e.rx);
    tok_bpe_cache_free(e.cache);
    tok_buf_free(&e.norm);
    tok_pieces_free(&e.a);
    tok_pieces_free(&e.b);
    tok_buf_free(&fixed);
    if (rc != KILN_OK) {
        free(e.ids);
        return rc;
    }
    *ids = e.ids;
    *n = e.n;
    return KILN_OK;
}
