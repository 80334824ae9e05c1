/*
 * tok_pretok.c — pre-tokenizers: ByteLevel (with or without GPT-2's regex),
 * Split (String or PCRE2 regex; Removed, Isolated, MergedWithPrevious,
 * MergedWithNext, Contiguous; invert), Digits, Metaspace, Whitespace,
 * WhitespaceSplit, Punctuation, Replace and Sequence.
 *
 * Every stage maps a list of pieces to a new list (tok_pieces io -> tmp, then the
 * two swap). Splitting follows HF Rust exactly: matches and gaps become an
 * alternating list of (range, is_match) covering the piece; invert flips the
 * flags; the behaviour merges or drops ranges; empty ranges vanish.
 * Invariants:
 *   (1) pieces are valid UTF-8, except after a lazy ByteLevel (*bytelevel set),
 *       which is always the last stage: its pieces are raw bytes for the model.
 *   (2) at_start marks only a piece that begins at input offset 0.
 * Errors: KILN_E_NOMEM; regex failures from tok_regex.c.
 */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_int.h"

typedef struct {
    size_t start, end;
    bool flag; /* is_match, then "remove" after the behaviour */
} ev;

static kiln_code nomem(kiln_err *err)
{
    return kiln_fail(err, KILN_E_NOMEM, "tokenizer: out of memory in pre-tokenizer");
}

/* Emits s[0..n) split at the matches m (sorted, non-overlapping) into out. */
static kiln_code split_emit(const char *s, size_t n, bool at_start, const tok_range *m, size_t nm,
                            tok_split_behavior beh, bool invert, tok_pieces *out, kiln_err *err)
{
    ev *e = malloc((2 * nm + 2) * sizeof *e);
    ev *r = malloc((2 * nm + 2) * sizeof *r);
    size_t ne = 0, nr = 0;
    kiln_code rc = KILN_OK;
    if (!e || !r) {
        rc = nomem(err);
        goto done;
    }
    size_t prev = 0;
    for (size_t i = 0; i < nm; i++) {
        if (m[i].start > prev) e[ne++] = (ev){prev, m[i].start, false};
        e[ne++] = (ev){m[i].start, m[i].end, true};
        prev = m[i].end;
    }
    if (prev < n || ne == 0) e[ne++] = (ev){prev, n, false};
    if (invert)
        for (size_t i = 0; i < ne; i++) e[i].flag = !e[i].flag;
    bool pm = false;
    switch (beh) {
    case TOK_SPLIT_REMOVED:
        memcpy(r, e, ne * sizeof *e);
        nr = ne;
        break;
    case TOK_SPLIT_ISOLATED:
        for (size_t i = 0; i < ne; i++) r[nr++] = (ev){e[i].start, e[i].end, false};
        break;
    case TOK_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < ne; i++) {
            if (e[i].flag == pm && nr)
                r[nr - 1].end = e[i].end;
            else
                r[nr++] = (ev){e[i].start, e[i].end, false};
            pm = e[i].flag;
        }
        break;
    case TOK_SPLIT_MERGED_PREV:
        for (size_t i = 0; i < ne; i++) {
            if (e[i].flag && !pm && nr)
                r[nr - 1].end = e[i].end;
            else
                r[nr++] = (ev){e[i].start, e[i].end, false};
            pm = e[i].flag;
        }
        break;
    case TOK_SPLIT_MERGED_NEXT:
        for (size_t i = ne; i-- > 0;) {
            if (e[i].flag && !pm && nr)
                r[nr - 1].start = e[i].start;
            else
                r[nr++] = (ev){e[i].start, e[i].end, false};
            pm = e[i].flag;
        }
        for (size_t i = 0; i < nr / 2; i++) {
            ev t = r[i];
            r[i] = r[nr - 1 - i];
            r[nr - 1 - i] = t;
        }
        break;
    }
    for (size_t i = 0; i < nr; i++) {
        if (r[i].flag || r[i].end <= r[i].start) continue;
        if (tok_pieces_add(out, s + r[i].start, r[i].end - r[i].start,
                           at_start && r[i].start == 0)) {
            rc = nomem(err);
            break;
        }
    }
done:
    free(e);
    free(r);
    return rc;
}

/* Each character satisfying pred is one match (HF's char-predicate pattern). */
static kiln_code char_matches(const char *s, size_t n, bool (*pred)(uint32_t), tok_range **v,
                              size_t *nv, size_t *cap, kiln_err *err)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        uint32_t cp = u[i];
        int l = u[i] < 0x80 ? 1 : tok_utf8_next(u + i, n - i, &cp);
        if (!l) l = 1;
        if (pred(cp)) {
            if (*nv == *cap) {
                size_t c = *cap ? *cap * 2 : 32;
                tok_range *p = realloc(*v, c * sizeof *p);
                if (!p) return nomem(err);
                *v = p;
                *cap = c;
            }
            (*v)[(*nv)++] = (tok_range){i, i + (size_t)l};
        }
        i += (size_t)l;
    }
    return KILN_OK;
}

static bool is_ascii_digit(uint32_t c)
{
    return c >= '0' && c <= '9';
}

/* Rust: char::is_ascii_punctuation || Unicode general category P*. */
static bool is_punct(uint32_t c)
{
    if (c < 128) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
                        (c >= 123 && c <= 126);
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

static kiln_code map_bytelevel(const char *s, size_t n, bool at_start, tok_pieces *out,
                               kiln_err *err)
{
    /* Reserve a span first, then write the mapped bytes straight into the text. */
    if (tok_pieces_add(out, "", 0, at_start)) return nomem(err);
    tok_span *sp = &out->v[out->n - 1];
    if (tok_buf_reserve(&out->text, 2 * n)) return nomem(err);
    for (size_t i = 0; i < n; i++) {
        char c[2];
        int l = tok_bytelevel_char((unsigned char)s[i], c);
        tok_buf_put(&out->text, c, (size_t)l); /* cannot fail: reserved */
    }
    sp->len = out->text.len - sp->off;
    return KILN_OK;
}

static kiln_code stage(const tok_tokenizer *t, const tok_pretok *p, tok_rx *rx, bool last,
                       tok_pieces *io, tok_pieces *tmp, bool *bytelevel, kiln_err *err);

static kiln_code piece_stage(const tok_pretok *p, tok_rx *rx, bool last, const char *s, size_t n,
                             bool at_start, tok_pieces *out, tok_buf *scratch, tok_range **v,
                             size_t *cap, bool *bytelevel, kiln_err *err)
{
    size_t nv = 0;
    kiln_code rc = KILN_OK;
    switch (p->kind) {
    case TOK_PRE_SPLIT:
        rc = tok_pattern_find(&p->pat, rx, s, n, v, &nv, cap, err);
        if (rc == KILN_OK) rc = split_emit(s, n, at_start, *v, nv, p->behavior, p->invert, out, err);
        return rc;
    case TOK_PRE_DIGITS:
        rc = char_matches(s, n, is_ascii_digit, v, &nv, cap, err);
        if (rc == KILN_OK)
            rc = split_emit(s, n, at_start, *v, nv,
                            p->individual_digits ? TOK_SPLIT_ISOLATED : TOK_SPLIT_CONTIGUOUS,
                            false, out, err);
        return rc;
    case TOK_PRE_PUNCTUATION:
        rc = char_matches(s, n, is_punct, v, &nv, cap, err);
        if (rc == KILN_OK) rc = split_emit(s, n, at_start, *v, nv, p->behavior, false, out, err);
        return rc;
    case TOK_PRE_WHITESPACE_SPLIT:
        rc = char_matches(s, n, tok_is_whitespace, v, &nv, cap, err);
        if (rc == KILN_OK)
            rc = split_emit(s, n, at_start, *v, nv, TOK_SPLIT_REMOVED, false, out, err);
        return rc;
    case TOK_PRE_WHITESPACE:
        rc = tok_pattern_find(&p->pat, rx, s, n, v, &nv, cap, err);
        if (rc == KILN_OK)
            rc = split_emit(s, n, at_start, *v, nv, TOK_SPLIT_REMOVED, true, out, err);
        return rc;
    case TOK_PRE_REPLACE: {
        rc = tok_pattern_find(&p->pat, rx, s, n, v, &nv, cap, err);
        if (rc != KILN_OK) return rc;
        scratch->len = 0;
        size_t at = 0;
        for (size_t i = 0; i < nv; i++) {
            if (tok_buf_put(scratch, s + at, (*v)[i].start - at) ||
                tok_buf_put(scratch, p->content, p->content_len))
                return nomem(err);
            at = (*v)[i].end;
        }
        if (tok_buf_put(scratch, s + at, n - at)) return nomem(err);
        return tok_pieces_add(out, scratch->p, scratch->len, at_start) ? nomem(err) : KILN_OK;
    }
    case TOK_PRE_METASPACE: {
        scratch->len = 0;
        bool prepend = p->prepend == TOK_PREPEND_ALWAYS ||
                       (p->prepend == TOK_PREPEND_FIRST && at_start);
        bool starts = n >= p->repl_len && memcmp(s, p->repl, p->repl_len) == 0;
        bool starts_space = n > 0 && s[0] == ' ';
        if (prepend && !starts && !starts_space && tok_buf_put(scratch, p->repl, p->repl_len))
            return nomem(err);
        for (size_t i = 0; i < n; i++) {
            int r = s[i] == ' ' ? tok_buf_put(scratch, p->repl, p->repl_len)
                                : tok_buf_putc(scratch, s[i]);
            if (r) return nomem(err);
        }
        if (!p->split)
            return tok_pieces_add(out, scratch->p, scratch->len, at_start) ? nomem(err) : KILN_OK;
        tok_pattern lit = {.is_regex = false, .lit = (char *)p->repl, .lit_len = p->repl_len};
        rc = tok_pattern_find(&lit, rx, scratch->p, scratch->len, v, &nv, cap, err);
        if (rc == KILN_OK)
            rc = split_emit(scratch->p, scratch->len, at_start, *v, nv, TOK_SPLIT_MERGED_NEXT,
                            false, out, err);
        return rc;
    }
    case TOK_PRE_BYTELEVEL: {
        const char *src = s;
        size_t len = n;
        if (p->add_prefix_space && (n == 0 || s[0] != ' ')) {
            scratch->len = 0;
            if (tok_buf_putc(scratch, ' ') || tok_buf_put(scratch, s, n)) return nomem(err);
            src = scratch->p;
            len = scratch->len;
        }
        tok_pieces one = {0};
        tok_pieces *dst = last ? out : &one;
        if (p->use_regex) {
            rc = tok_pattern_find(&p->pat, rx, src, len, v, &nv, cap, err);
            if (rc == KILN_OK)
                rc = split_emit(src, len, at_start, *v, nv, TOK_SPLIT_ISOLATED, false, dst, err);
        } else if (len && tok_pieces_add(dst, src, len, at_start)) {
            rc = nomem(err);
        }
        if (last) {
            *bytelevel = true; /* the model maps bytes itself (invariant 1) */
        } else {
            for (size_t i = 0; i < one.n && rc == KILN_OK; i++)
                rc = map_bytelevel(one.text.p + one.v[i].off, one.v[i].len, one.v[i].at_start,
                                   out, err);
        }
        tok_pieces_free(&one);
        return rc;
    }
    case TOK_PRE_SEQUENCE:
        break;
    }
    return kiln_fail(err, KILN_E_INTERNAL, "pre-tokenizer: bad stage %d", (int)p->kind);
}

static kiln_code stage(const tok_tokenizer *t, const tok_pretok *p, tok_rx *rx, bool last,
                       tok_pieces *io, tok_pieces *tmp, bool *bytelevel, kiln_err *err)
{
    if (p->kind == TOK_PRE_SEQUENCE) {
        for (size_t i = 0; i < p->n_subs; i++) {
            kiln_code rc =
                stage(t, &p->subs[i], rx, last && i + 1 == p->n_subs, io, tmp, bytelevel, err);
            if (rc != KILN_OK) return rc;
        }
        return KILN_OK;
    }
    if (p->kind == TOK_PRE_BYTELEVEL && last && !p->use_regex && !p->add_prefix_space) {
        *bytelevel = true; /* identity on the bytes: the model maps them (invariant 1) */
        return KILN_OK;
    }
    tok_pieces_clear(tmp);
    tok_buf scratch = {0};
    tok_range *v = NULL;
    size_t cap = 0;
    kiln_code rc = KILN_OK;
    for (size_t i = 0; i < io->n && rc == KILN_OK; i++) {
        const tok_span *sp = &io->v[i];
        rc = piece_stage(p, rx, last, io->text.p + sp->off, sp->len, sp->at_start, tmp, &scratch,
                         &v, &cap, bytelevel, err);
    }
    free(v);
    tok_buf_free(&scratch);
    tok_pieces sw = *io;
    *io = *tmp;
    *tmp = sw;
    return rc;
}

kiln_code tok_pretok_apply(const tok_tokenizer *t, const tok_pretok *p, tok_rx *rx,
                           tok_pieces *io, tok_pieces *tmp, bool *bytelevel, kiln_err *err)
{
    *bytelevel = false;
    return stage(t, p, rx, t->pre_bytelevel_last, io, tmp, bytelevel, err);
}

/* ================================================================ streaming */

/* The first stage is a regex/literal split whose pieces do not depend on their
 * neighbours (Isolated, Removed): pieces can go to the next stages one by one,
 * so a long text never materializes as one huge piece list. */
static bool streamable(const tok_pretok *p)
{
    if (p->kind == TOK_PRE_SPLIT)
        return p->behavior == TOK_SPLIT_ISOLATED || p->behavior == TOK_SPLIT_REMOVED;
    return p->kind == TOK_PRE_BYTELEVEL && p->use_regex && !p->add_prefix_space;
}

typedef struct {
    const tok_tokenizer *t;
    const tok_pretok *rest; /* stages after the first */
    size_t n_rest;
    bool rest_last;         /* the last of rest is the pre-tokenizer's last stage */
    tok_rx *rx;
    tok_pieces *a, *b;
    tok_pretok_sink sink;
    void *ctx;
} stream_ctx;

static kiln_code emit_piece(stream_ctx *c, const char *s, size_t n, bool at_start, bool bl_first,
                            kiln_err *err)
{
    bool bytelevel = bl_first;
    if (c->n_rest == 0) return c->sink(c->ctx, s, n, bytelevel, err);
    tok_pieces_clear(c->a);
    if (tok_pieces_add(c->a, s, n, at_start)) return nomem(err);
    for (size_t i = 0; i < c->n_rest; i++) {
        kiln_code rc = stage(c->t, &c->rest[i], c->rx, c->rest_last && i + 1 == c->n_rest, c->a,
                             c->b, &bytelevel, err);
        if (rc != KILN_OK) return rc;
    }
    for (size_t i = 0; i < c->a->n; i++) {
        kiln_code rc = c->sink(c->ctx, c->a->text.p + c->a->v[i].off, c->a->v[i].len, bytelevel, err);
        if (rc != KILN_OK) return rc;
    }
    return KILN_OK;
}

kiln_code tok_pretok_each(const tok_tokenizer *t, tok_rx *rx, const char *s, size_t n, bool at_start,
                          tok_pieces *a, tok_pieces *b, tok_pretok_sink sink, void *ctx, kiln_err *err)
{
    const tok_pretok *p = t->pre, *first = p;
    size_t n_rest = 0;
    const tok_pretok *rest = NULL;
    if (p && p->kind == TOK_PRE_SEQUENCE && p->n_subs) {
        first = &p->subs[0];
        rest = p->subs + 1;
        n_rest = p->n_subs - 1;
    }
    bool ok = p && (p->kind != TOK_PRE_SEQUENCE || p->n_subs) && streamable(first);
    for (size_t i = 0; ok && i < n_rest; i++) ok = rest[i].kind != TOK_PRE_SEQUENCE;
    /* a ByteLevel that maps eagerly (others follow it) takes the general path */
    if (ok && first->kind == TOK_PRE_BYTELEVEL && n_rest > 0) ok = false;
    if (!ok) { /* the general path: all stages over the whole segment */
        bool bytelevel = false;
        tok_pieces_clear(a);
        if (tok_pieces_add(a, s, n, at_start)) return nomem(err);
        if (p) {
            kiln_code rc = tok_pretok_apply(t, p, rx, a, b, &bytelevel, err);
            if (rc != KILN_OK) return rc;
        }
        for (size_t i = 0; i < a->n; i++) {
            kiln_code rc = sink(ctx, a->text.p + a->v[i].off, a->v[i].len, bytelevel, err);
            if (rc != KILN_OK) return rc;
        }
        return KILN_OK;
    }
    stream_ctx c = {t, rest, n_rest, t->pre_bytelevel_last, rx, a, b, sink, ctx};
    /* a ByteLevel first stage is also the last here: it maps lazily (invariant 1) */
    bool bl_first = first->kind == TOK_PRE_BYTELEVEL;
    bool keep_match = first->kind == TOK_PRE_BYTELEVEL || first->behavior == TOK_SPLIT_ISOLATED || first->invert;
    bool keep_gap = first->kind == TOK_PRE_BYTELEVEL || first->behavior == TOK_SPLIT_ISOLATED || !first->invert;
    tok_range *v = NULL;
    size_t cap = 0, prev = 0;
    kiln_code rc = KILN_OK;
    /* matches in batches of the whole text would materialize them all: search in
     * windows instead, resuming after the last match (a match never crosses the
     * point where the previous search resumed). */
    size_t from = 0;
    while (rc == KILN_OK && from <= n) {
        size_t nv = 0;
        rc = tok_pattern_find_from(&first->pat, rx, s, n, from, 4096, &v, &nv, &cap, err);
        if (rc != KILN_OK) break;
        for (size_t i = 0; i < nv && rc == KILN_OK; i++) {
            if (v[i].start > prev && keep_gap)
                rc = emit_piece(&c, s + prev, v[i].start - prev, at_start && prev == 0, bl_first, err);
            if (rc == KILN_OK && keep_match)
                rc = emit_piece(&c, s + v[i].start, v[i].end - v[i].start, at_start && v[i].start == 0,
                                bl_first, err);
            prev = v[i].end;
        }
        if (nv < 4096) break;
        from = v[nv - 1].end;
    }
    if (rc == KILN_OK && prev < n && keep_gap)
        rc = emit_piece(&c, s + prev, n - prev, at_start && prev == 0, bl_first, err);
    free(v);
    return rc;
}
