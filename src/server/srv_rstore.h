/*
 * srv_rstore.h — the Responses API store: what previous_response_id points
 * at (the conversation so far, as chat messages), in memory, with a TTL and a
 * byte cap evicting least-recently-used entries first.
 *
 *   srv_rstore *st;  srv_rstore_create(3600, 64 << 20, &st, &err);
 *   srv_rstore_put(st, "resp_1", messages);          // copies
 *   json_t *m = srv_rstore_get(st, "resp_1");         // new reference or NULL
 *   srv_rstore_destroy(st);
 */
#ifndef KILN_SRV_RSTORE_H
#define KILN_SRV_RSTORE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "util/kiln_err.h"

typedef struct srv_rstore srv_rstore;

typedef struct {
    int64_t entries, bytes;           /* now */
    int64_t stored, hits, misses, evicted, expired; /* totals */
    int64_t refused; /* entries larger than the whole cap, not kept (total) */
} srv_rstore_stats;

/* API */
/* ttl_s: seconds an entry lives (<= 0: 3600); max_bytes: cap (0: 64 MiB). *out OWNED. */
kiln_code srv_rstore_create(double ttl_s, size_t max_bytes, srv_rstore **out, kiln_err *err);
void srv_rstore_destroy(srv_rstore *st); /* NULL is a no-op */
/* Keeps a deep copy of messages under id (an entry over the cap is not kept). */
void srv_rstore_put(srv_rstore *st, const char *id, const json_t *messages);
/* A new reference to the messages (caller decrefs), or NULL: unknown or expired. */
json_t *srv_rstore_get(srv_rstore *st, const char *id);
srv_rstore_stats srv_rstore_get_stats(srv_rstore *st);

#endif
