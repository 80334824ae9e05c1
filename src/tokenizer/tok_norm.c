/*
 * tok_norm.c — normalizers: NFC, NFD, NFKC, NFKD (utf8proc), Lowercase, Replace,
 * Prepend, Strip, StripAccents and Sequence, applied to one text segment.
 *
 * Invariants:
 *   (1) input and output are valid UTF-8 (utf8proc refuses anything else).
 *   (2) Prepend adds its text only to a non-empty segment (HF Rust).
 * Threads: read-only on the normalizer; per-call buffers only.
 * Errors: KILN_E_NOMEM; utf8proc failures are KILN_E_INTERNAL.
 */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_int.h"

static kiln_code nomem(kiln_err *err)
{
    return kiln_fail(err, KILN_E_NOMEM, "tokenizer: out of memory in normalizer");
}

static kiln_code map_run(utf8proc_option_t o, const char *s, size_t len, tok_buf *out, kiln_err *err)
{
    if (len == 0) return KILN_OK;
    utf8proc_uint8_t *res = NULL;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &res, o);
    if (n < 0) return kiln_fail(err, KILN_E_INTERNAL, "normalizer: %s", utf8proc_errmsg(n));
    int rc = tok_buf_put(out, res, (size_t)n);
    free(res);
    return rc ? nomem(err) : KILN_OK;
}

/* ASCII is fixed by all four forms, and an ASCII character followed by another
 * cannot interact with what comes before or after: only the non-ASCII runs (with
 * the ASCII character before each, which a combining mark may join) go through
 * utf8proc. */
static kiln_code norm_unicode(tok_norm_kind k, const char *s, size_t len, tok_buf *out,
                              kiln_err *err)
{
    utf8proc_option_t o = UTF8PROC_STABLE;
    if (k == TOK_NORM_NFC || k == TOK_NORM_NFKC) o |= UTF8PROC_COMPOSE;
    if (k == TOK_NORM_NFD || k == TOK_NORM_NFKD) o |= UTF8PROC_DECOMPOSE;
    if (k == TOK_NORM_NFKC || k == TOK_NORM_NFKD) o |= UTF8PROC_COMPAT;
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && u[j] < 0x80) j++;
        if (j == len) return tok_buf_put(out, s + i, len - i) ? nomem(err) : KILN_OK;
        size_t start = j > i ? j - 1 : j;
        if (tok_buf_put(out, s + i, start - i)) return nomem(err);
        size_t e = j;
        while (e < len && !(u[e] < 0x80 && (e + 1 == len || u[e + 1] < 0x80))) e++;
        kiln_code rc = map_run(o, s + start, e - start, out, err);
        if (rc != KILN_OK) return rc;
        i = e;
    }
    return KILN_OK;
}

static bool is_cased_letter(uint32_t cp)
{
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

/* Lowercase as Rust's str::to_lowercase: simple mappings plus U+0130 -> "i\u0307"
 * and the final-sigma rule (approximated: a cased letter before, none after). */
static kiln_code norm_lower(const char *s, size_t len, tok_buf *out, kiln_err *err)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    bool prev_cased = false;
    while (i < len) {
        uint32_t cp;
        int l = tok_utf8_next(u + i, len - i, &cp);
        if (!l) return kiln_fail(err, KILN_E_INTERNAL, "normalizer: invalid UTF-8");
        uint32_t lc;
        int rc;
        if (cp == 0x130) {
            rc = tok_buf_put(out, "i\xCC\x87", 3);
        } else if (cp == 0x3A3) {
            uint32_t nx = 0;
            bool next_cased = i + (size_t)l < len &&
                              tok_utf8_next(u + i + l, len - i - (size_t)l, &nx) &&
                              is_cased_letter(nx);
            lc = (prev_cased && !next_cased) ? 0x3C2 : 0x3C3;
            rc = tok_utf8_put(out, lc);
        } else {
            lc = (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
            rc = tok_utf8_put(out, lc);
        }
        if (rc) return nomem(err);
        prev_cased = is_cased_letter(cp);
        i += (size_t)l;
    }
    return KILN_OK;
}

static kiln_code norm_replace(const tok_norm *n, tok_rx *rx, const char *s, size_t len,
                              tok_buf *out, kiln_err *err)
{
    tok_range *v = NULL;
    size_t nv = 0, cap = 0;
    kiln_code rc = tok_pattern_find(&n->pat, rx, s, len, &v, &nv, &cap, err);
    if (rc != KILN_OK) return rc;
    size_t at = 0;
    for (size_t i = 0; i < nv && rc == KILN_OK; i++) {
        if (tok_buf_put(out, s + at, v[i].start - at) ||
            tok_buf_put(out, n->content, n->content_len))
            rc = nomem(err);
        at = v[i].end;
    }
    if (rc == KILN_OK && tok_buf_put(out, s + at, len - at)) rc = nomem(err);
    free(v);
    return rc;
}

static kiln_code norm_strip(const tok_norm *n, const char *s, size_t len, tok_buf *out,
                            kiln_err *err)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t a = 0, b = len;
    if (n->strip_left) {
        while (a < b) {
            uint32_t cp;
            int l = tok_utf8_next(u + a, b - a, &cp);
            if (!l || !tok_is_whitespace(cp)) break;
            a += (size_t)l;
        }
    }
    if (n->strip_right) {
        while (b > a) {
            size_t p = b - 1;
            while (p > a && (u[p] & 0xC0) == 0x80) p--;
            uint32_t cp;
            if (!tok_utf8_next(u + p, b - p, &cp) || !tok_is_whitespace(cp)) break;
            b = p;
        }
    }
    return tok_buf_put(out, s + a, b - a) ? nomem(err) : KILN_OK;
}

static kiln_code norm_strip_accents(const char *s, size_t len, tok_buf *out, kiln_err *err)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        int l = tok_utf8_next(u + i, len - i, &cp);
        if (!l) return kiln_fail(err, KILN_E_INTERNAL, "normalizer: invalid UTF-8");
        if (utf8proc_category((utf8proc_int32_t)cp) != UTF8PROC_CATEGORY_MN &&
            tok_buf_put(out, s + i, (size_t)l))
            return nomem(err);
        i += (size_t)l;
    }
    return KILN_OK;
}

kiln_code tok_norm_apply(const tok_norm *n, tok_rx *rx, const char *s, size_t len, tok_buf *out,
                         kiln_err *err)
{
    out->len = 0;
    if (out->p) out->p[0] = 0;
    switch (n->kind) {
    case TOK_NORM_SEQUENCE: {
        if (tok_buf_put(out, s, len)) return nomem(err);
        tok_buf tmp = {0};
        kiln_code rc = KILN_OK;
        for (size_t i = 0; i < n->n_subs && rc == KILN_OK; i++) {
            rc = tok_norm_apply(&n->subs[i], rx, out->p ? out->p : "", out->len, &tmp, err);
            tok_buf sw = *out;
            *out = tmp;
            tmp = sw;
        }
        tok_buf_free(&tmp);
        return rc;
    }
    case TOK_NORM_NFC:
    case TOK_NORM_NFD:
    case TOK_NORM_NFKC:
    case TOK_NORM_NFKD:
        return norm_unicode(n->kind, s, len, out, err);
    case TOK_NORM_LOWERCASE:
        return norm_lower(s, len, out, err);
    case TOK_NORM_REPLACE:
        return norm_replace(n, rx, s, len, out, err);
    case TOK_NORM_PREPEND:
        if (len && tok_buf_put(out, n->content, n->content_len)) return nomem(err);
        return tok_buf_put(out, s, len) ? nomem(err) : KILN_OK;
    case TOK_NORM_STRIP:
        return norm_strip(n, s, len, out, err);
    case TOK_NORM_STRIP_ACCENTS:
        return norm_strip_accents(s, len, out, err);
    }
    return kiln_fail(err, KILN_E_INTERNAL, "normalizer: unknown kind %d", (int)n->kind);
}
