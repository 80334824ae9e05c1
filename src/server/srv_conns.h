/*
 * srv_conns.h — the table of open HTTP connections: per-connection deadlines,
 * a cap in total and per client address, and idle connections given up under
 * pressure, so that idle, slow or half-sent connections never lock out a client
 * that sends a request.
 *
 *   srv_conns *t;  srv_conns_create(&cfg, &t, &err);     // starts the reaper thread
 *   rec = srv_conns_opened(t, fd, addr, addrlen, false);  // MHD notify STARTED
 *   if (srv_conns_begin(t, rec) != SRV_CONN_OK) -> 503     // request headers are in
 *   srv_conns_dispatch(t, rec);                            // body is in, handler runs
 *   srv_conns_end(t, rec);                                 // request done (keep-alive)
 *   srv_conns_closed(t, rec);                              // MHD notify CLOSED
 *   srv_conns_destroy(t);                                  // after the daemons stopped
 *
 * The reaper closes a connection with shutdown(2) on its socket; libmicrohttpd
 * then sees end-of-file and closes it the ordinary way. Threads: every function
 * may be called from any thread; one mutex guards the table.
 */
#ifndef KILN_SRV_CONNS_H
#define KILN_SRV_CONNS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "util/kiln_err.h"

typedef struct srv_conns srv_conns;
typedef struct srv_conn_rec srv_conn_rec; /* one open connection; opaque */

typedef struct {
    unsigned max_total;      /* connections served at once; idle ones are given up past it */
    unsigned max_per_addr;   /* per client address (IPv4, IPv6 /64); 0 = no cap */
    double header_timeout_s; /* a new connection's request headers complete within this */
    double keepalive_s;      /* an idle keep-alive connection waits this long for the next */
    double body_timeout_s;   /* a request body arrives completely within this of its headers */
    double min_idle_age_s;   /* a waiting connection younger than this is never given up */
} srv_conns_cfg;

typedef enum { SRV_CONN_OK, SRV_CONN_OVER_TOTAL, SRV_CONN_OVER_ADDR } srv_conn_verdict;

typedef struct {
    int64_t open, waiting, busy; /* now: all, between requests / before headers, in a request */
    int64_t accepted;            /* since start */
    int64_t closed_header;       /* request headers not complete by the deadline */
    int64_t closed_keepalive;    /* idle keep-alive past --keepalive-timeout */
    int64_t closed_body;         /* request body not complete by the deadline */
    int64_t evicted;             /* waiting connections given up to make room */
    int64_t refused_total;       /* requests answered 503: every slot busy */
    int64_t refused_addr;        /* requests answered 503: the address's slots busy */
} srv_conns_stats;

/* API */
srv_conns_cfg srv_conns_cfg_default(void);
/* *out OWNED by the caller (srv_conns_destroy). Starts the reaper thread. */
kiln_code srv_conns_create(const srv_conns_cfg *cfg, srv_conns **out, kiln_err *err);
/* Stops the reaper and frees the table. Every connection must be closed first
 * (the daemons stopped). NULL is a no-op. */
void srv_conns_destroy(srv_conns *t);
/* A connection was accepted. addr may be NULL (unix socket: no per-address cap).
 * Returns the record (OWNED by the table until srv_conns_closed), or NULL when
 * out of memory (the connection is then not tracked). May give up the oldest
 * waiting connections to make room. */
srv_conn_rec *srv_conns_opened(srv_conns *t, int fd, const struct sockaddr *addr, socklen_t len);
/* The request's headers are complete. Not OK: answer 503 and close. */
srv_conn_verdict srv_conns_begin(srv_conns *t, srv_conn_rec *r);
/* The body is complete: no deadline applies while the handler runs or streams. */
void srv_conns_dispatch(srv_conns *t, srv_conn_rec *r);
/* The request is over; the connection waits for the next one (keep-alive). */
void srv_conns_end(srv_conns *t, srv_conn_rec *r);
/* MHD is closing the socket: forget it (r is freed). NULL is a no-op. */
void srv_conns_closed(srv_conns *t, srv_conn_rec *r);
srv_conns_stats srv_conns_get_stats(srv_conns *t);
srv_conns_cfg srv_conns_get_cfg(const srv_conns *t);

#endif
