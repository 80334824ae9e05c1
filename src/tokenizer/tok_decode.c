/*
 * tok_decode.c — ids to text: the decoder chain (ByteLevel, ByteFallback,
 * Metaspace, Fuse, Strip, Replace, BPEDecoder, Sequence), tok_decode, and HF's
 * clean_up_tokenization.
 *
 * The chain works on raw byte strings, one per token to begin with; only the
 * final text is repaired to UTF-8 (one U+FFFD per maximal ill-formed subpart).
 * That keeps a chunk of tokens decodable on its own, which tok_stream.c needs:
 *   first  the chunk starts the text: Metaspace drops the first token's leading
 *          space, a Strip after Fuse strips the text's start;
 *   whole  the chunk ends the text: a Strip after Fuse strips the text's end.
 * Invariant: for any split of ids into chunks, concatenating tok_dec_run of each
 * chunk (first only on the first, whole only on a single chunk) gives the bytes
 * of tok_dec_run on all ids, except for Strip "stop" after Fuse (no real
 * tokenizer uses it) and Replace patterns spanning a Fuse of several tokens.
 * Errors: KILN_E_INVALID for an id outside the vocabulary; KILN_E_NOMEM.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_int.h"

typedef struct {
    tok_pieces *cur, *tmp; /* borrowed */
    bool fused, first, whole;
} chain;

static kiln_code nomem(kiln_err *err)
{
    return kiln_fail(err, KILN_E_NOMEM, "tokenizer: out of memory in decoder");
}

static void swap(chain *c)
{
    tok_pieces *x = c->cur;
    c->cur = c->tmp;
    c->tmp = x;
}

static const char *P(const chain *c, size_t i)
{
    return c->cur->text.p + c->cur->v[i].off;
}

static kiln_code dec_bytelevel(chain *c, kiln_err *err)
{
    tok_pieces_clear(c->tmp);
    if (tok_pieces_add(c->tmp, "", 0, false)) return nomem(err); /* the one output piece */
    tok_buf *o = &c->tmp->text;
    for (size_t i = 0; i < c->cur->n; i++) {
        const unsigned char *s = (const unsigned char *)P(c, i);
        size_t n = c->cur->v[i].len, start = o->len, j = 0;
        bool ok = !c->cur->v[i].added;
        while (ok && j < n) {
            uint32_t cp;
            int l = tok_utf8_next(s + j, n - j, &cp), b = l ? tok_bytelevel_byte(cp) : -1;
            if (b < 0) {
                ok = false;
                break;
            }
            if (tok_buf_putc(o, (char)b)) return nomem(err);
            j += (size_t)l;
        }
        if (!ok) { /* not all chars map (or an added token): the token's own bytes */
            o->len = start;
            if (tok_buf_put(o, s, n)) return nomem(err);
        }
    }
    c->tmp->v[0].len = o->len;
    c->fused = true;
    swap(c);
    return KILN_OK;
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    return -1;
}

static kiln_code dec_bytefallback(chain *c, kiln_err *err)
{
    tok_pieces_clear(c->tmp);
    for (size_t i = 0; i < c->cur->n; i++) {
        const char *s = P(c, i);
        size_t n = c->cur->v[i].len;
        int h, l;
        if (n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && (h = hexval(s[3])) >= 0 &&
            (l = hexval(s[4])) >= 0) {
            char b = (char)(h << 4 | l);
            if (tok_pieces_add(c->tmp, &b, 1, false)) return nomem(err);
        } else if (tok_pieces_add(c->tmp, s, n, false)) {
            return nomem(err);
        }
    }
    swap(c);
    return KILN_OK;
}

/* Replaces every occurrence of pat (a literal) in s by rep, appending to out. */
static int replace_lit(tok_buf *out, const char *s, size_t n, const char *pat, size_t pn,
                       const char *rep, size_t rn)
{
    size_t i = 0;
    while (pn && i + pn <= n) {
        const char *hit = tok_memmem(s + i, n - i, pat, pn);
        if (!hit) break;
        size_t at = (size_t)(hit - s);
        if (tok_buf_put(out, s + i, at - i) || tok_buf_put(out, rep, rn)) return -1;
        i = at + pn;
    }
    return tok_buf_put(out, s + i, n - i);
}

static kiln_code dec_replace(const tok_dec *d, chain *c, tok_rx *rx, kiln_err *err)
{
    tok_pieces_clear(c->tmp);
    tok_range *v = NULL;
    size_t cap = 0;
    tok_buf tmp = {0};
    kiln_code rc = KILN_OK;
    for (size_t i = 0; i < c->cur->n && rc == KILN_OK; i++) {
        const char *s = P(c, i);
        size_t n = c->cur->v[i].len, nv = 0;
        tmp.len = 0;
        if (!d->pat.is_regex) {
            if (replace_lit(&tmp, s, n, d->pat.lit, d->pat.lit_len, d->content, d->content_len))
                rc = nomem(err);
        } else if (!tok_utf8_valid(s, n)) { /* PCRE2 needs UTF-8: leave raw bytes alone */
            if (tok_buf_put(&tmp, s, n)) rc = nomem(err);
        } else if ((rc = tok_pattern_find(&d->pat, rx, s, n, &v, &nv, &cap, err)) == KILN_OK) {
            size_t at = 0;
            for (size_t k = 0; k < nv && rc == KILN_OK; k++) {
                if (tok_buf_put(&tmp, s + at, v[k].start - at) ||
                    tok_buf_put(&tmp, d->content, d->content_len))
                    rc = nomem(err);
                at = v[k].end;
            }
            if (rc == KILN_OK && tok_buf_put(&tmp, s + at, n - at)) rc = nomem(err);
        }
        if (rc == KILN_OK && tok_pieces_add(c->tmp, tmp.p ? tmp.p : "", tmp.len, false)) rc = nomem(err);
    }
    free(v);
    tok_buf_free(&tmp);
    if (rc == KILN_OK) swap(c);
    return rc;
}

static kiln_code dec_metaspace(const tok_dec *d, chain *c, kiln_err *err)
{
    tok_pieces_clear(c->tmp);
    tok_buf tmp = {0};
    for (size_t i = 0; i < c->cur->n; i++) {
        tmp.len = 0;
        if (replace_lit(&tmp, P(c, i), c->cur->v[i].len, d->repl, d->repl_len, " ", 1)) goto oom;
        size_t skip = (i == 0 && c->first && d->prepend_first && tmp.len && tmp.p[0] == ' ') ? 1 : 0;
        if (tok_pieces_add(c->tmp, tmp.p ? tmp.p + skip : "", tmp.len - skip, false)) goto oom;
    }
    tok_buf_free(&tmp);
    swap(c);
    return KILN_OK;
oom:
    tok_buf_free(&tmp);
    return nomem(err);
}

static kiln_code dec_fuse(chain *c, kiln_err *err)
{
    tok_pieces_clear(c->tmp);
    if (tok_pieces_add(c->tmp, c->cur->text.p ? c->cur->text.p : "", 0, false)) return nomem(err);
    tok_buf *o = &c->tmp->text;
    for (size_t i = 0; i < c->cur->n; i++)
        if (tok_buf_put(o, P(c, i), c->cur->v[i].len)) return nomem(err);
    c->tmp->v[0].len = o->len;
    c->fused = true;
    swap(c);
    return KILN_OK;
}

static kiln_code dec_strip(const tok_dec *d, chain *c, kiln_err *err)
{
    char ch[4];
    size_t cl;
    {
        tok_buf b = {0};
        if (tok_utf8_put(&b, d->strip_cp)) return nomem(err);
        cl = b.len;
        memcpy(ch, b.p, cl);
        tok_buf_free(&b);
    }
    int start = (!c->fused || c->first) ? d->strip_start : 0;
    int stop = (!c->fused || c->whole) ? d->strip_stop : 0;
    for (size_t i = 0; i < c->cur->n; i++) {
        tok_span *sp = &c->cur->v[i];
        for (int k = 0; k < start && sp->len >= cl && !memcmp(c->cur->text.p + sp->off, ch, cl); k++) {
            sp->off += cl;
            sp->len -= cl;
        }
        for (int k = 0; k < stop && sp->len >= cl &&
                        !memcmp(c->cur->text.p + sp->off + sp->len - cl, ch, cl);
             k++)
            sp->len -= cl;
    }
    return KILN_OK;
}

static kiln_code dec_bpe(const tok_dec *d, chain *c, kiln_err *err)
{
    tok_pieces_clear(c->tmp);
    tok_buf tmp = {0};
    for (size_t i = 0; i < c->cur->n; i++) {
        bool last = c->whole && i + 1 == c->cur->n;
        tmp.len = 0;
        if (replace_lit(&tmp, P(c, i), c->cur->v[i].len, d->content, d->content_len, " ", last ? 0 : 1) ||
            tok_pieces_add(c->tmp, tmp.p ? tmp.p : "", tmp.len, false)) {
            tok_buf_free(&tmp);
            return nomem(err);
        }
    }
    tok_buf_free(&tmp);
    swap(c);
    return KILN_OK;
}

static kiln_code run(const tok_dec *d, chain *c, tok_rx *rx, kiln_err *err)
{
    switch (d->kind) {
    case TOK_DEC_SEQUENCE:
        for (size_t i = 0; i < d->n_subs; i++) {
            kiln_code rc = run(&d->subs[i], c, rx, err);
            if (rc != KILN_OK) return rc;
        }
        return KILN_OK;
    case TOK_DEC_BYTELEVEL:
        return dec_bytelevel(c, err);
    case TOK_DEC_BYTEFALLBACK:
        return dec_bytefallback(c, err);
    case TOK_DEC_METASPACE:
        return dec_metaspace(d, c, err);
    case TOK_DEC_FUSE:
        return dec_fuse(c, err);
    case TOK_DEC_STRIP:
        return dec_strip(d, c, err);
    case TOK_DEC_REPLACE:
        return dec_replace(d, c, rx, err);
    case TOK_DEC_BPE:
        return dec_bpe(d, c, err);
    }
    return kiln_fail(err, KILN_E_INTERNAL, "decoder: bad kind %d", (int)d->kind);
}

/* Does the chain hold a Replace (the only step that needs a regex context)?
 * Making the context costs a JIT stack (an mmap): not per token for nothing. */
static bool needs_rx(const tok_dec *d)
{
    if (d->kind == TOK_DEC_REPLACE) return d->pat.is_regex;
    if (d->kind == TOK_DEC_SEQUENCE)
        for (size_t i = 0; i < d->n_subs; i++)
            if (needs_rx(&d->subs[i])) return true;
    return false;
}

kiln_code tok_dec_run(const tok_tokenizer *t, const int32_t *ids, size_t n, bool first, bool whole,
                      tok_buf *out, kiln_err *err)
{
    tok_pieces a = {0}, b = {0};
    kiln_code rc = KILN_OK;
    for (size_t i = 0; i < n && rc == KILN_OK; i++) {
        size_t len;
        const char *p = tok_token_to_piece(t, ids[i], &len);
        if (!p) {
            rc = kiln_fail(err, KILN_E_INVALID, "token id %d is not in the vocabulary (size %d)",
                           (int)ids[i], (int)t->n_ids);
            break;
        }
        if (tok_pieces_add(&a, p, len, false)) rc = nomem(err);
        else a.v[a.n - 1].added = tok_strmap_get(&t->added_map, p, len) == ids[i];
    }
    chain c = {&a, &b, false, first, whole};
    tok_rx rx = {0};
    if (rc == KILN_OK && t->dec) {
        if (needs_rx(t->dec) && tok_rx_init(&rx)) rc = nomem(err);
        if (rc == KILN_OK) rc = run(t->dec, &c, &rx, err);
    }
    for (size_t i = 0; i < c.cur->n && rc == KILN_OK; i++) {
        if (!t->dec && !(first && i == 0) && tok_buf_putc(out, ' ')) rc = nomem(err);
        if (rc == KILN_OK && tok_buf_put(out, c.cur->text.p + c.cur->v[i].off, c.cur->v[i].len))
            rc = nomem(err);
    }
    tok_rx_free(&rx);
    tok_pieces_free(&a);
    tok_pieces_free(&b);
    return rc;
}

/* HF clean_up_tokenization, in its order. */
static int cleanup(tok_buf *b)
{
    static const char *pairs[][2] = {{" .", "."},   {" ?", "?"},     {" !", "!"},   {" ,", ","},
                                     {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"},
                                     {" 've", "'ve"}, {" 're", "'re"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        tok_buf o = {0};
        if (replace_lit(&o, b->p ? b->p : "", b->len, pairs[i][0], strlen(pairs[i][0]), pairs[i][1],
                        strlen(pairs[i][1]))) {
            tok_buf_free(&o);
            return -1;
        }
        tok_buf_free(b);
        *b = o;
    }
    return 0;
}

kiln_code tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                     char **text, size_t *len, kiln_err *err)
{
    *text = NULL;
    if (len) *len = 0;
    int32_t *keep = malloc((n + 1) * sizeof *keep);
    if (!keep) return nomem(err);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!(flags & TOK_SKIP_SPECIAL) || !tok_is_special(t, ids[i])) keep[k++] = ids[i];
    tok_buf raw = {0}, out = {0};
    kiln_code rc = tok_dec_run(t, keep, k, true, true, &raw, err);
    free(keep);
    if (rc == KILN_OK && tok_utf8_lossy(&out, raw.p ? raw.p : "", raw.len)) rc = nomem(err);
    if (rc == KILN_OK && (flags & TOK_CLEANUP_SPACES) && cleanup(&out)) rc = nomem(err);
    if (rc == KILN_OK && !out.p && tok_buf_put(&out, "", 0)) rc = nomem(err);
    tok_buf_free(&raw);
    if (rc != KILN_OK) {
        tok_buf_free(&out);
        return rc;
    }
    *text = out.p;
    if (len) *len = out.len;
    return KILN_OK;
}

kiln_code tok_token_bytes(const tok_tokenizer *t, int32_t id, char **bytes, size_t *len,
                          kiln_err *err)
{
    *bytes = NULL;
    *len = 0;
    tok_buf raw = {0};
    kiln_code rc = tok_dec_run(t, &id, 1, false, false, &raw, err);
    if (rc == KILN_OK && tok_buf_putc(&raw, '\0')) rc = nomem(err);
    if (rc != KILN_OK) {
        tok_buf_free(&raw);
        return rc;
    }
    *bytes = raw.p;
    *len = raw.len - 1;
    return KILN_OK;
}
