/*
 * srv_sse.h — Server-Sent Events framing: "data: <json>\n\n" frames, the
 * closing "data: [DONE]\n\n", and ": keep-alive" comments (which every SSE
 * client ignores) to notice a client that went away during a long prefill.
 */
#ifndef KILN_SRV_SSE_H
#define KILN_SRV_SSE_H

#include <jansson.h>

#include "server/srv_buf.h"

/* API */
/* Appends one data frame holding j (compact JSON); -1 when out of memory. */
int srv_sse_data(srv_buf *b, const json_t *j);
/* "event: NAME\ndata: <json>\n\n" (the Anthropic stream's framing). */
int srv_sse_event(srv_buf *b, const char *name, const json_t *j);
int srv_sse_done(srv_buf *b);
int srv_sse_comment(srv_buf *b, const char *text);

#endif
