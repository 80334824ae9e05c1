/*
 * srv_reasoning.c — the think-block splitter (see srv_reasoning.h).
 *
 * State: OUTSIDE (text is content, looking for the open tag) and INSIDE (text
 * is reasoning, looking for the close tag); srv_think_push moves between them.
 * Right after an open tag (t->label) the style's label ("thought\n") is
 * dropped if it comes; while the text so far is a prefix of it, it is held.
 * Invariant: hold[0..n_hold) is always a proper prefix of what is searched
 * for in the current state (the tag, or the label), so it never grows past
 * the longest of them.
 * Threads: one srv_think per choice, used by one thread.
 */
#include "server/srv_reasoning.h"

#include <string.h>

static const srv_think_marks MARKS[SRV_THINK_COUNT] = {
    [SRV_THINK_TAGS] = {"<think>", "</think>", ""},
    [SRV_THINK_CHANNEL] = {"<|channel>", "<channel|>", "thought\n"},
};

const srv_think_marks *srv_think_marks_of(srv_think_style style)
{
    return &MARKS[style >= 0 && style < SRV_THINK_COUNT ? style : SRV_THINK_TAGS];
}

void srv_think_init(srv_think *t, bool enabled, bool start_inside)
{
    memset(t, 0, sizeof *t);
    t->style = SRV_THINK_TAGS;
    t->enabled = enabled;
    t->inside = enabled && start_inside;
}

static const char *find(const char *s, size_t n, const char *tag, size_t tl)
{
    for (size_t i = 0; i + tl <= n; i++)
        if (s[i] == tag[0] && !memcmp(s + i, tag, tl)) return s + i;
    return NULL;
}

/* The last open tag of p[0..len) with no close tag after it, or NULL. */
static const char *open_block(const srv_think_marks *m, const char *p, size_t len)
{
    size_t ol = strlen(m->open);
    const char *last = NULL, *at = p;
    size_t left = len;
    const char *f;
    while ((f = find(at, left, m->open, ol))) {
        last = f;
        left -= (size_t)(f + 1 - at);
        at = f + 1;
    }
    if (!last) return NULL;
    size_t rest = len - (size_t)(last - p);
    return find(last, rest, m->close, strlen(m->close)) ? NULL : last;
}

bool srv_think_prompt_open_as(srv_think_style style, const char *p, size_t len)
{
    return open_block(srv_think_marks_of(style), p, len) != NULL;
}

bool srv_think_prompt_open(const char *p, size_t len)
{
    return srv_think_prompt_open_as(SRV_THINK_TAGS, p, len);
}

void srv_think_start(srv_think *t, srv_think_style style, bool enabled, const char *prompt,
                     size_t len)
{
    const srv_think_marks *m = srv_think_marks_of(style);
    const char *o = enabled && prompt ? open_block(m, prompt, len) : NULL;
    srv_think_init(t, enabled, o != NULL);
    t->style = style;
    /* a prompt that ends right at the open tag leaves the label to the model */
    t->label = o && (size_t)(prompt + len - o) == strlen(m->open) && m->label[0];
}

int srv_think_detect(const tok_tokenizer *tok, const char *tmpl)
{
    if (tok && tok_piece_to_id(tok, "<|channel>", 10) >= 0 &&
        tok_piece_to_id(tok, "<channel|>", 10) >= 0)
        return SRV_THINK_CHANNEL;
    if (tok && tok_piece_to_id(tok, "<think>", 7) >= 0) return SRV_THINK_TAGS;
    if (tmpl && strstr(tmpl, "<think>")) return SRV_THINK_TAGS;
    if (tmpl && strstr(tmpl, "<|channel>") && strstr(tmpl, "<channel|>")) return SRV_THINK_CHANNEL;
    return -1;
}

bool srv_think_needs_special(srv_think_style style, const tok_tokenizer *tok)
{
    const srv_think_marks *m = srv_think_marks_of(style);
    const char *tags[] = {m->open, m->close};
    for (int i = 0; i < 2 && tok; i++) {
        int32_t id = tok_piece_to_id(tok, tags[i], strlen(tags[i]));
        if (id >= 0 && tok_is_special(tok, id)) return true;
    }
    return false;
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

static void hold(srv_think *t, const char *s, size_t n)
{
    memcpy(t->hold, s, n);
    t->n_hold = n;
}

static int split(srv_think *t, const char *s, size_t n, srv_buf *content, srv_buf *reasoning)
{
    const srv_think_marks *m = srv_think_marks_of(t->style);
    while (n) {
        if (t->label && t->inside) { /* drop the label, or wait until it is ruled out */
            size_t ll = strlen(m->label);
            if (n < ll && !memcmp(s, m->label, n)) {
                hold(t, s, n);
                return 0;
            }
            t->label = false;
            if (n >= ll && !memcmp(s, m->label, ll)) {
                s += ll;
                n -= ll;
                continue;
            }
        }
        const char *tag = t->inside ? m->close : m->open;
        size_t tl = strlen(tag);
        if (t->leading && !t->inside && t->content) return emit(t, s, n, content, reasoning);
        const char *f = find(s, n, tag, tl);
        if (!f) {
            size_t keep = partial_tail(s, n, tag, tl);
            if (emit(t, s, n - keep, content, reasoning)) return -1;
            hold(t, s + n - keep, keep);
            return 0;
        }
        if (emit(t, s, (size_t)(f - s), content, reasoning)) return -1;
        t->inside = !t->inside;
        t->after_close = !t->inside;
        t->label = t->inside && m->label[0];
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
    t->label = false; /* a held partial label is reasoning after all */
    return n ? emit(t, t->hold, n, content, reasoning) : 0;
}
