/*
 * srv_buf.h — a growable byte buffer (NUL-terminated for convenience).
 *
 *   srv_buf b = {0};  srv_buf_add(&b, "data: ", 6);  ...;  srv_buf_free(&b);
 */
#ifndef KILN_SRV_BUF_H
#define KILN_SRV_BUF_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *p;    /* OWNED; NULL until the first add */
    size_t len; /* bytes, not counting the NUL */
    size_t cap;
} srv_buf;

/* API */
/* Appends n bytes; returns 0, or -1 when out of memory (b unchanged). */
static inline int srv_buf_add(srv_buf *b, const char *s, size_t n)
{
    if (n > (SIZE_MAX >> 2) - b->len) return -1;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) return -1;
        b->p = np;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}
static inline int srv_buf_adds(srv_buf *b, const char *s)
{
    return srv_buf_add(b, s, strlen(s));
}
/* Drops the first n bytes. */
static inline void srv_buf_consume(srv_buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
    } else {
        memmove(b->p, b->p + n, b->len - n);
        b->len -= n;
    }
    if (b->p) b->p[b->len] = 0;
}
static inline void srv_buf_reset(srv_buf *b)
{
    b->len = 0;
    if (b->p) b->p[0] = 0;
}
static inline void srv_buf_free(srv_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

#endif
