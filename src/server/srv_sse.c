/*
 * srv_sse.c — SSE frames (see srv_sse.h). JSON is dumped compact, so it never
 * contains a raw newline and one "data:" line per frame is enough.
 * Threads: no shared state.
 */
#include "server/srv_sse.h"
#include "server/srv_json.h"

#include <stdlib.h>

/* On failure the buffer is cut back to where the frame began: never half a frame. */
int srv_sse_data(srv_buf *b, const json_t *j)
{
    size_t n, at = b->len;
    char *s = j ? srv_json_dump(j, &n) : NULL;
    if (!s) return -1;
    int rc = srv_buf_add(b, "data: ", 6) || srv_buf_add(b, s, n) || srv_buf_add(b, "\n\n", 2) ? -1 : 0;
    free(s);
    if (rc && b->p) b->len = at, b->p[at] = 0;
    return rc;
}

int srv_sse_event(srv_buf *b, const char *name, const json_t *j)
{
    size_t at = b->len;
    if (srv_buf_adds(b, "event: ") || srv_buf_adds(b, name) || srv_buf_adds(b, "\n") ||
        srv_sse_data(b, j)) {
        if (b->p) b->len = at, b->p[at] = 0;
        return -1;
    }
    return 0;
}

int srv_sse_done(srv_buf *b)
{
    return srv_buf_adds(b, "data: [DONE]\n\n");
}

int srv_sse_comment(srv_buf *b, const char *text)
{
    return srv_buf_adds(b, ": ") || srv_buf_adds(b, text) || srv_buf_adds(b, "\n\n") ? -1 : 0;
}
