/*
 * srv_conns.c — every open HTTP connection, its deadline, and the caps (see
 * srv_conns.h).
 *
 * A connection's phase, and the function that moves it:
 *   (opened)  -> WAIT    srv_conns_opened()    accepted; its request headers are awaited
 *   WAIT      -> BODY    srv_conns_begin()     the headers are in (first handler call)
 *   BODY      -> ACTIVE  srv_conns_dispatch()  the body is in; the handler runs or streams
 *   BODY|ACTIVE -> WAIT  srv_conns_end()       the request is over; keep-alive waits
 *   any       -> (gone)  srv_conns_closed()    libmicrohttpd closes the socket
 * A connection is "doomed" once shutdown(2) was called on its socket (doom());
 * libmicrohttpd then reads end-of-file and closes it. Who dooms:
 *   reap()       WAIT past header_timeout (new) or keepalive (after a request),
 *                BODY past body_timeout; ACTIVE never (the engine's --timeout applies)
 *   make_room()  while the live (not doomed) connections exceed max_total, or an
 *                address's exceed max_per_addr: the oldest WAIT connection (of that
 *                address) that has waited at least min_idle_age — idle clients give
 *                way to clients with a request, so idle or slow connections cannot
 *                lock anyone out; only when every slot holds a request does a new
 *                request get 503 (srv_conns_begin's verdict)
 * Invariants:
 *   (1) a record is in the table exactly from srv_conns_opened to srv_conns_closed;
 *       libmicrohttpd closes the fd only after notifying CLOSED, so a shutdown(2)
 *       under mu never reaches a reused descriptor
 *   (2) n_open == records on the list; n_doomed == doomed records on it; the same
 *       per address slot, and a slot is freed when its n_open drops to 0
 * Threads: MHD's accept thread (opened/closed), connection threads (begin,
 * dispatch, end), the reaper thread; mu guards everything.
 */
#include "server/srv_conns.h"
#include "util/kiln_log.h"
#include "util/plat.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { PH_WAIT, PH_BODY, PH_ACTIVE };
#define N_BUCKETS 1024
#define REAP_PERIOD_MS 100

typedef struct addr_slot {
    uint8_t key[8]; /* IPv4 address, or the /64 of an IPv6 one */
    uint8_t klen;
    int32_t n_open, n_doomed; /* (2) */
    struct addr_slot *next;   /* bucket chain */
} addr_slot;

struct srv_conn_rec {
    int fd;
    int phase;
    bool keepalive; /* WAIT after a request (keepalive deadline), not a new connection */
    bool doomed;
    double t;      /* when the phase began (plat_now) */
    addr_slot *as; /* NULL: no address (unix socket) */
    srv_conn_rec *prev, *next;
};

struct srv_conns {
    srv_conns_cfg cfg;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* wakes the reaper (stop) */
    pthread_t reaper;
    bool reaper_started, stop;
    srv_conn_rec *head; /* every open connection (1) */
    int64_t n_open, n_doomed;
    addr_slot *buckets[N_BUCKETS];
    srv_conns_stats st; /* counters; open/waiting/busy filled by get_stats */
};

/* ---------------------------------------------------------------- addresses */

/* The cap's key for addr: IPv4 (also IPv4-mapped IPv6) by address, IPv6 by /64
 * (one host usually owns a whole /64). Returns 0 when there is none. */
static int addr_key(const struct sockaddr *a, socklen_t len, uint8_t key[8])
{
    if (!a) return 0;
    if (a->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        memcpy(key, &((const struct sockaddr_in *)a)->sin_addr, 4);
        return 4;
    }
    if (a->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        const uint8_t *b = ((const struct sockaddr_in6 *)a)->sin6_addr.s6_addr;
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!memcmp(b, mapped, 12)) {
            memcpy(key, b + 12, 4);
            return 4;
        }
        memcpy(key, b, 8);
        return 8;
    }
    return 0;
}

static unsigned bucket_of(const uint8_t *key, int klen)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (int i = 0; i < klen; i++)
        h = (h ^ key[i]) * 16777619u;
    return h % N_BUCKETS;
}

/* The slot for key, created when absent; NULL when out of memory. Under mu. */
static addr_slot *slot_get(srv_conns *t, const uint8_t *key, int klen)
{
    unsigned b = bucket_of(key, klen);
    for (addr_slot *s = t->buckets[b]; s; s = s->next)
        if (s->klen == klen && !memcmp(s->key, key, (size_t)klen)) return s;
    addr_slot *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    memcpy(s->key, key, (size_t)klen);
    s->klen = (uint8_t)klen;
    s->next = t->buckets[b];
    t->buckets[b] = s;
    return s;
}

static void slot_drop(srv_conns *t, addr_slot *s)
{
    addr_slot **pp = &t->buckets[bucket_of(s->key, s->klen)];
    while (*pp && *pp != s)
        pp = &(*pp)->next;
    if (*pp) *pp = s->next;
    free(s);
}

/* ---------------------------------------------------------------- dooming */

static void doom(srv_conns *t, srv_conn_rec *r, int64_t *counter)
{
    if (r->doomed) return;
    r->doomed = true;
    t->n_doomed++;
    if (r->as) r->as->n_doomed++;
    if (counter) (*counter)++;
    if (r->fd >= 0) shutdown(r->fd, SHUT_RDWR); /* (1): the fd is still this connection's */
}

/* The WAIT connection that has waited longest (at least min age), of slot as
 * when as is not NULL, other than except; NULL when there is none. */
static srv_conn_rec *oldest_waiting(srv_conns *t, const addr_slot *as, const srv_conn_rec *except,
                                    double now)
{
    srv_conn_rec *best = NULL;
    for (srv_conn_rec *r = t->head; r; r = r->next) {
        if (r == except || r->doomed || r->phase != PH_WAIT || (as && r->as != as)) continue;
        if (now - r->t < t->cfg.min_idle_age_s) continue;
        if (!best || r->t < best->t) best = r;
    }
    return best;
}

/* Gives up waiting connections while the live ones exceed the caps (the total,
 * and the address of r when r is not NULL). */
static void make_room(srv_conns *t, const srv_conn_rec *r, double now)
{
    while (t->n_open - t->n_doomed > (int64_t)t->cfg.max_total) {
        srv_conn_rec *v = oldest_waiting(t, NULL, r, now);
        if (!v) break;
        doom(t, v, &t->st.evicted);
    }
    addr_slot *as = r ? r->as : NULL;
    while (as && t->cfg.max_per_addr && as->n_open - as->n_doomed > (int64_t)t->cfg.max_per_addr) {
        srv_conn_rec *v = oldest_waiting(t, as, r, now);
        if (!v) break;
        doom(t, v, &t->st.evicted);
    }
}

/* One pass of the deadlines. Under mu. */
static void reap(srv_conns *t, double now)
{
    for (srv_conn_rec *r = t->head; r; r = r->next) {
        if (r->doomed) continue;
        double age = now - r->t;
        if (r->phase == PH_WAIT && !r->keepalive && age > t->cfg.header_timeout_s)
            doom(t, r, &t->st.closed_header);
        else if (r->phase == PH_WAIT && r->keepalive && age > t->cfg.keepalive_s)
            doom(t, r, &t->st.closed_keepalive);
        else if (r->phase == PH_BODY && age > t->cfg.body_timeout_s)
            doom(t, r, &t->st.closed_body);
    }
    make_room(t, NULL, now);
}

static void *reaper_main(void *arg)
{
    srv_conns *t = arg;
    pthread_mutex_lock(&t->mu);
    while (!t->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += REAP_PERIOD_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&t->cv, &t->mu, &ts);
        if (!t->stop) reap(t, plat_now());
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* ---------------------------------------------------------------- API */

srv_conns_cfg srv_conns_cfg_default(void)
{
    return (srv_conns_cfg){.max_total = 1024,
                           .max_per_addr = 256,
                           .header_timeout_s = 15,
                           .keepalive_s = 30,
                           .body_timeout_s = 60,
                           .min_idle_age_s = 1.0};
}

kiln_code srv_conns_create(const srv_conns_cfg *cfg, srv_conns **out, kiln_err *err)
{
    *out = NULL;
    if (cfg->max_total < 1 || !(cfg->header_timeout_s > 0) || !(cfg->keepalive_s > 0) ||
        !(cfg->body_timeout_s > 0))
        return kiln_fail(err, KILN_E_INVALID,
                         "connection limits: the cap must be >= 1 and "
                         "every timeout > 0");
    srv_conns *t = calloc(1, sizeof *t);
    if (!t) return kiln_fail(err, KILN_E_NOMEM, "connection table: out of memory");
    t->cfg = *cfg;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    if (pthread_create(&t->reaper, NULL, reaper_main, t) != 0) {
        srv_conns_destroy(t);
        return kiln_fail(err, KILN_E_NOMEM, "connection table: cannot start its thread");
    }
    t->reaper_started = true;
    *out = t;
    return KILN_OK;
}

void srv_conns_destroy(srv_conns *t)
{
    if (!t) return;
    if (t->reaper_started) {
        pthread_mutex_lock(&t->mu);
        t->stop = true;
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->reaper, NULL);
    }
    while (t->head)
        srv_conns_closed(t, t->head);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}

srv_conn_rec *srv_conns_opened(srv_conns *t, int fd, const struct sockaddr *addr, socklen_t len)
{
    srv_conn_rec *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->fd = fd;
    r->phase = PH_WAIT;
    uint8_t key[8];
    int klen = addr_key(addr, len, key);
    pthread_mutex_lock(&t->mu);
    double now = plat_now();
    r->t = now;
    if (klen && !(r->as = slot_get(t, key, klen))) {
        pthread_mutex_unlock(&t->mu);
        free(r);
        return NULL;
    }
    r->next = t->head;
    if (t->head) t->head->prev = r;
    t->head = r;
    t->n_open++;
    if (r->as) r->as->n_open++;
    t->st.accepted++;
    make_room(t, r, now);
    pthread_mutex_unlock(&t->mu);
    return r;
}

srv_conn_verdict srv_conns_begin(srv_conns *t, srv_conn_rec *r)
{
    if (!r) return SRV_CONN_OK;
    pthread_mutex_lock(&t->mu);
    double now = plat_now();
    r->phase = PH_BODY;
    r->t = now;
    make_room(t, r, now);
    srv_conn_verdict v = SRV_CONN_OK;
    if (t->n_open - t->n_doomed > (int64_t)t->cfg.max_total) {
        v = SRV_CONN_OVER_TOTAL;
        t->st.refused_total++;
    } else if (r->as && t->cfg.max_per_addr &&
               r->as->n_open - r->as->n_doomed > (int64_t)t->cfg.max_per_addr) {
        v = SRV_CONN_OVER_ADDR;
        t->st.refused_addr++;
    }
    if (v != SRV_CONN_OK) r->phase = PH_ACTIVE; /* its 503 goes out, then it closes */
    pthread_mutex_unlock(&t->mu);
    return v;
}

void srv_conns_dispatch(srv_conns *t, srv_conn_rec *r)
{
    if (!r) return;
    pthread_mutex_lock(&t->mu);
    r->phase = PH_ACTIVE;
    r->t = plat_now();
    pthread_mutex_unlock(&t->mu);
}

void srv_conns_end(srv_conns *t, srv_conn_rec *r)
{
    if (!r) return;
    pthread_mutex_lock(&t->mu);
    r->phase = PH_WAIT;
    r->keepalive = true;
    r->t = plat_now();
    pthread_mutex_unlock(&t->mu);
}

void srv_conns_closed(srv_conns *t, srv_conn_rec *r)
{
    if (!r) return;
    pthread_mutex_lock(&t->mu);
    if (r->prev)
        r->prev->next = r->next;
    else
        t->head = r->next;
    if (r->next) r->next->prev = r->prev;
    t->n_open--;
    if (r->doomed) t->n_doomed--;
    if (r->as) {
        r->as->n_open--;
        if (r->doomed) r->as->n_doomed--;
        if (r->as->n_open == 0) slot_drop(t, r->as); /* (2) */
    }
    pthread_mutex_unlock(&t->mu);
    free(r);
}

srv_conns_stats srv_conns_get_stats(srv_conns *t)
{
    pthread_mutex_lock(&t->mu);
    srv_conns_stats st = t->st;
    st.open = t->n_open;
    for (srv_conn_rec *r = t->head; r; r = r->next) {
        if (r->phase == PH_WAIT)
            st.waiting++;
        else
            st.busy++;
    }
    pthread_mutex_unlock(&t->mu);
    return st;
}

srv_conns_cfg srv_conns_get_cfg(const srv_conns *t)
{
    return t->cfg;
}
