/*
 * srv_reasoning.c — the <think>…</think> splitter (see srv_reasoning.h).
 *
 * State: OUTSIDE (text is content, looking for "<think>") and INSIDE (text is
 * reasoning, looking for "</think>"); srv_think_push moves between them.
 * Invariant: hold[0..n_hold) is always a proper prefix of the tag searched
 * for in the current state, so it never grows past the tag length.
 * Threads: one srv_think per choice, used by one thread.
 */
#include "server/srv_reasoning.h"

#include <string.h>

static const char OPEN[] = "<think>", CLOSE[] = "</think>";

void srv_think_init(srv_think *t, bool enabled, bool start_inside)
{
    memset(t, 0, sizeof *t);
    t->enabled = enabled;
    t->inside = enabled && start_inside;
}

static const char *find(const char *s, size_t n, const char *tag, size_t tl)
{
    for (size_t i = 0; i + tl <= n; i++)
        if (s[i] == tag[0] && !memcmp(s + i, tag, tl)) return s + i;
    return NULL;
}

bool srv_think_prompt_open(const char *p, size_t len)
{
    const char *last = NULL, *at = p;
    size_t left = len;
    const char *f;
    while ((f = find(at, left, OPEN, sizeof OPEN - 1))) {
        last = f;
        left -= (size_t)(f + 1 - at);
        at = f + 1;
    }
    if (!last) return false;
    size_t rest = len - (size_t)(last - p);
    return find(last, rest, CLOSE, sizeof CLOSE - 1) == NULL;
}

static int emit(srv_think *t, const char *s, size_t n, srv_buf *content, srv_buf *reasoning)
{
    if (t->inside) return srv_buf_add(reasoning, s, n);
    if (t->after_close) {
        while (n && (*s == '\n' || *s == '\r'))
            s++, n--;
        if (n) t->after_close = false;
    }
    for (size_t i = 0; i < n && !t->content; i++)
        t->content = s[i] != ' ' && s[i] != '\n' && s[i] != '\r' && s[i] != '\t';
    return srv_buf_add(content, s, n);
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of tag. */
static size_t partial_tail(const char *s, size_t n, const char *tag, size_t tl)
{
    for (size_t k = tl - 1 < n ? tl - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, tag, k)) return k;
    return 0;
}

static int split(srv_think *t, const char *s, size_t n, srv_buf *content, srv_buf *reasoning)
{
    while (n) {
        const char *tag = t->inside ? CLOSE : OPEN;
        size_t tl = t->inside ? sizeof CLOSE - 1 : sizeof OPEN - 1;
        if (t->leading && !t->inside && t->content) return emit(t, s, n, content, reasoning);
        const char *f = find(s, n, tag, tl);
        if (!f) {
            size_t keep = partial_tail(s, n, tag, tl);
            if (emit(t, s, n - keep, content, reasoning)) return -1;
            memcpy(t->hold, s + n - keep, keep);
            t->n_hold = keep;
            return 0;
        }
        if (emit(t, s, (size_t)(f - s), content, reasoning)) return -1;
        t->inside = !t->inside;
        t->after_close = !t->inside;
        if (t->leading && !t->inside) t->content = true; /* one block, then content only */
        n -= (size_t)(f - s) + tl;
        s = f + tl;
    }
    return 0;
}

int srv_think_push(srv_think *t, const char *s, size_t n, srv_buf *content, srv_buf *reasoning)
{
    if (!t->enabled) return srv_buf_add(content, s, n);
    if (!t->n_hold) return split(t, s, n, content, reasoning);
    /* Re-scan the held bytes with the new ones (small: at most a tag's length). */
    srv_buf tmp = {0};
    int rc = srv_buf_add(&tmp, t->hold, t->n_hold) || srv_buf_add(&tmp, s, n) ? -1 : 0;
    t->n_hold = 0;
    if (!rc) rc = split(t, tmp.p, tmp.len, content, reasoning);
    srv_buf_free(&tmp);
    return rc;
}

int srv_think_flush(srv_think *t, srv_buf *content, srv_buf *reasoning)
{
    size_t n = t->n_hold;
    t->n_hold = 0;
    return n ? emit(t, t->hold, n, content, reasoning) : 0;
}
