/*
 * tok_stream.c — streaming detokenizer: ids in one at a time, UTF-8 text out,
 * never half a character.
 *
 * Each pushed id runs through the decoder chain alone (tok_dec_run), with
 * first = "no token decoded yet", so the SentencePiece leading-space rule (Strip
 * after Fuse, Metaspace) applies to the first kept token only, as HF's decode of
 * the whole prefix does. The raw bytes go to `pending`; the longest prefix of
 * complete characters is returned, ill-formed bytes become U+FFFD at once, and
 * a tail that may still become a character (at most 3 bytes) waits.
 * States: FRESH (started = false) -> STARTED on the first kept token;
 *         tok_stream_reset() -> FRESH. tok_stream_flush() empties pending.
 * Invariants:
 *   (1) pending never holds a complete character or an ill-formed subpart:
 *       only a proper prefix of a valid sequence, so pending.len <= 3 between calls.
 *   (2) all text returned plus the flush equals tok_decode (same flags).
 * Threads: one thread at a time per stream; the tokenizer is only read.
 * Errors: KILN_E_INVALID for an id outside the vocabulary; KILN_E_NOMEM.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_int.h"

struct tok_stream {
    const tok_tokenizer *t; /* borrowed */
    unsigned flags;
    bool started;
    tok_buf pending; /* OWNED: raw bytes not yet returned (invariant 1) */
    tok_buf out;     /* OWNED: the text last returned */
};

kiln_code tok_stream_create(const tok_tokenizer *t, unsigned flags, tok_stream **out, kiln_err *err)
{
    *out = NULL;
    if (flags & TOK_CLEANUP_SPACES)
        return kiln_fail(err, KILN_E_INVALID, "stream: clean-up of spaces needs look-ahead; not supported");
    tok_stream *s = calloc(1, sizeof *s);
    if (!s) return kiln_fail(err, KILN_E_NOMEM, "stream: out of memory");
    s->t = t;
    s->flags = flags;
    *out = s;
    return KILN_OK;
}

void tok_stream_destroy(tok_stream *s)
{
    if (!s) return;
    tok_buf_free(&s->pending);
    tok_buf_free(&s->out);
    free(s);
}

void tok_stream_reset(tok_stream *s)
{
    s->started = false;
    s->pending.len = 0;
    s->out.len = 0;
}

static size_t expected_len(unsigned char c)
{
    return c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 1;
}

/* Moves complete characters from pending to out; keeps a possible tail. */
static int drain(tok_stream *s, bool final)
{
    const unsigned char *u = (const unsigned char *)s->pending.p;
    size_t n = s->pending.len, i = 0, run = 0;
    while (i < n) {
        uint32_t cp;
        int l = u[i] < 0x80 ? 1 : tok_utf8_next(u + i, n - i, &cp);
        if (l) {
            i += (size_t)l;
            continue;
        }
        size_t bad = tok_utf8_bad_len(u + i, n - i);
        if (!final && i + bad == n && n - i < expected_len(u[i])) break; /* may complete later */
        if (tok_buf_put(&s->out, s->pending.p + run, i - run) || tok_buf_put(&s->out, "\xEF\xBF\xBD", 3))
            return -1;
        i += bad;
        run = i;
    }
    if (tok_buf_put(&s->out, n ? s->pending.p + run : "", i - run)) return -1;
    if (n > i) memmove(s->pending.p, s->pending.p + i, n - i);
    s->pending.len = n - i;
    return 0;
}

static void result(tok_stream *s, const char **text, size_t *len)
{
    *text = s->out.p ? s->out.p : "";
    if (len) *len = s->out.len;
}

kiln_code tok_stream_push(tok_stream *s, int32_t id, const char **text, size_t *len, kiln_err *err)
{
    s->out.len = 0;
    if (s->out.p) s->out.p[0] = 0;
    result(s, text, len);
    if ((s->flags & TOK_SKIP_SPECIAL) && tok_is_special(s->t, id)) return KILN_OK;
    kiln_code rc = tok_dec_run(s->t, &id, 1, !s->started, false, &s->pending, err);
    if (rc != KILN_OK) return rc;
    s->started = true;
    if (drain(s, false)) return kiln_fail(err, KILN_E_NOMEM, "stream: out of memory");
    result(s, text, len);
    return KILN_OK;
}

kiln_code tok_stream_flush(tok_stream *s, const char **text, size_t *len, kiln_err *err)
{
    s->out.len = 0;
    if (s->out.p) s->out.p[0] = 0;
    if (drain(s, true)) return kiln_fail(err, KILN_E_NOMEM, "stream: out of memory");
    result(s, text, len);
    return KILN_OK;
}
