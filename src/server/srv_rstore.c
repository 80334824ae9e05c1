/*
 * srv_rstore.c — the Responses API store (see srv_rstore.h).
 *
 * Entries sit on one doubly linked list, most recently used first.
 *   absent -> STORED   srv_rstore_put()   (the oldest are evicted past the cap)
 *   STORED -> absent   srv_rstore_get()   when older than the TTL (expired)
 *                      evict()            when the byte cap is exceeded (LRU tail first)
 * Invariants:
 *   (1) bytes == the sum of the entries' bytes <= max_bytes after every put
 *   (2) the list is ordered by last use, newest at head
 * Threads: any HTTP thread; one mutex guards everything.
 * Errors: only create fails (out of memory); a put that cannot allocate is dropped.
 */
#include "server/srv_rstore.h"
#include "util/kiln_json.h"
#include "util/plat.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    char *id;             /* OWNED */
    json_t *messages;     /* OWNED */
    size_t bytes;         /* memory held (the copy's allocations, id, entry), the unit of the cap */
    double t_put;         /* plat_now() at put */
    struct entry *prev, *next;
} entry;

struct srv_rstore {
    pthread_mutex_t mu;
    double ttl_s;
    size_t max_bytes;
    entry *head, *tail;   /* (2) */
    srv_rstore_stats st;  /* (1): st.bytes */
};

static void unlink_entry(srv_rstore *s, entry *e)
{
    if (e->prev) e->prev->next = e->next;
    else s->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else s->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(srv_rstore *s, entry *e)
{
    e->next = s->head;
    e->prev = NULL;
    if (s->head) s->head->prev = e;
    s->head = e;
    if (!s->tail) s->tail = e;
}

static void drop(srv_rstore *s, entry *e)
{
    unlink_entry(s, e);
    s->st.entries--;
    s->st.bytes -= (int64_t)e->bytes;
    free(e->id);
    json_decref(e->messages);
    free(e);
}

kiln_code srv_rstore_create(double ttl_s, size_t max_bytes, srv_rstore **out, kiln_err *err)
{
    *out = NULL;
    srv_rstore *s = calloc(1, sizeof *s);
    if (!s) return kiln_fail(err, KILN_E_NOMEM, "response store: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    s->ttl_s = ttl_s > 0 ? ttl_s : 3600;
    s->max_bytes = max_bytes ? max_bytes : (size_t)64 << 20;
    *out = s;
    return KILN_OK;
}

void srv_rstore_destroy(srv_rstore *s)
{
    if (!s) return;
    while (s->head) drop(s, s->head);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* The cap counts memory, not text: what the copy's allocations hold (a JSON
 * value costs tens of bytes per element whatever its text — a million-element
 * array of 0 is 2 MB of text and ~70 MB of values), measured through
 * kiln_json's allocator; with jansson's own allocator (no kiln_json_init:
 * some tests) the serialized size stands in. */
void srv_rstore_put(srv_rstore *s, const char *id, const json_t *messages)
{
    entry *e = calloc(1, sizeof *e);
    char *text = NULL;
    if (!e) goto fail;
    e->id = strdup(id);
    uint64_t f0 = kiln_json_failures();
    int64_t n0 = kiln_json_net_bytes();
    e->messages = json_deep_copy(messages);
    int64_t held = kiln_json_net_bytes() - n0;
    if (!e->id || !e->messages || kiln_json_failures() != f0) goto fail;
    if (held <= 0) {
        text = json_dumps(messages, JSON_COMPACT);
        if (!text) goto fail;
        held = (int64_t)strlen(text);
        free(text);
        text = NULL;
    }
    e->bytes = (size_t)held + strlen(id) + 1 + sizeof *e;
    if (e->bytes > s->max_bytes) { /* larger than the whole store: not kept */
        pthread_mutex_lock(&s->mu);
        s->st.refused++;
        pthread_mutex_unlock(&s->mu);
        goto fail;
    }
    e->t_put = plat_now();
    pthread_mutex_lock(&s->mu);
    while (s->tail && (size_t)s->st.bytes + e->bytes > s->max_bytes) {
        drop(s, s->tail);
        s->st.evicted++;
    }
    push_front(s, e);
    s->st.entries++;
    s->st.stored++;
    s->st.bytes += (int64_t)e->bytes;
    pthread_mutex_unlock(&s->mu);
    return;
fail:
    free(text);
    if (e) {
        free(e->id);
        json_decref(e->messages);
        free(e);
    }
}

json_t *srv_rstore_get(srv_rstore *s, const char *id)
{
    json_t *m = NULL;
    double now = plat_now();
    pthread_mutex_lock(&s->mu);
    for (entry *e = s->head; e; e = e->next) {
        if (strcmp(e->id, id)) continue;
        if (now - e->t_put > s->ttl_s) {
            drop(s, e);
            s->st.expired++;
            break;
        }
        unlink_entry(s, e);
        push_front(s, e);
        m = json_incref(e->messages);
        break;
    }
    if (m) s->st.hits++;
    else s->st.misses++;
    pthread_mutex_unlock(&s->mu);
    return m;
}

srv_rstore_stats srv_rstore_get_stats(srv_rstore *s)
{
    pthread_mutex_lock(&s->mu);
    srv_rstore_stats st = s->st;
    pthread_mutex_unlock(&s->mu);
    return st;
}
