/*
 * srv_sse.c — SSE frames (see srv_sse.h). JSON is dumped compact, so it never
 * contains a raw newline and one "data:" line per frame is enough.
 * Threads: no shared state.
 */
#include "server/srv_sse.h"
#include "server/srv_json.h"

#include <stdlib.h>

int srv_sse_data(srv_buf *b, const json_t *j)
{
    size_t n;
    char *s = srv_json_dump(j, &n);
    if (!s) return -1;
    int rc = srv_buf_add(b, "data: ", 6) || srv_buf_add(b, s, n) || srv_buf_add(b, "\n\n", 2) ? -1 : 0;
    free(s);
    return rc;
}

int srv_sse_event(srv_buf *b, const char *name, const json_t *j)
{
    if (srv_buf_adds(b, "event: ") || srv_buf_adds(b, name) || srv_buf_adds(b, "\n")) return -1;
    return srv_sse_data(b, j);
}

int srv_sse_done(srv_buf *b)
{
    return srv_buf_adds(b, "data: [DONE]\n\n");
}

int srv_sse_comment(srv_buf *b, const char *text)
{
    return srv_buf_adds(b, ": ") || srv_buf_adds(b, text) || srv_buf_adds(b, "\n\n") ? -1 : 0;
}
