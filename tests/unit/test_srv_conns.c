/*
 * test_srv_conns.c — the connection table: idle connections give way oldest
 * first (in total and per address, IPv6 per /64), busy ones never; a request
 * with every slot busy is refused; the header, keep-alive and body deadlines
 * close the socket. Sockets are socketpairs: a closed one reads end-of-file on
 * the peer. Deadlines are waited for on conditions (bounded), never on sleeps.
 */
#include "server/srv_conns.h"
#include "test.h"
#include "util/plat.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

typedef struct {
    int fd[2]; /* [0] the table's, [1] the peer */
} pair;

static void pair_open(pair *p)
{
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, p->fd) != 0) p->fd[0] = p->fd[1] = -1;
}

static void pair_close(pair *p)
{
    close(p->fd[0]);
    close(p->fd[1]);
}

/* Has the table shut our socket down (the peer reads end-of-file)? */
static int shut(const pair *p)
{
    struct pollfd q = {.fd = p->fd[1], .events = POLLIN};
    char c;
    return poll(&q, 1, 0) > 0 && recv(p->fd[1], &c, 1, MSG_DONTWAIT) == 0;
}

/* Waits (at most 5 s) until shut(p). */
static int wait_shut(const pair *p)
{
    for (double t0 = plat_now(); plat_now() - t0 < 5;) {
        if (shut(p)) return 1;
        usleep(10000);
    }
    return 0;
}

static struct sockaddr_in v4(const char *ip)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

static struct sockaddr_in6 v6(const char *ip)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6};
    inet_pton(AF_INET6, ip, &a.sin6_addr);
    return a;
}

static srv_conns_cfg quiet(void)
{
    srv_conns_cfg c = srv_conns_cfg_default();
    c.header_timeout_s = c.keepalive_s = c.body_timeout_s = 3600;
    c.min_idle_age_s = 0;
    return c;
}

static srv_conn_rec *OPEN4(srv_conns *t, const pair *p, const char *ip)
{
    struct sockaddr_in a = v4(ip);
    return srv_conns_opened(t, p->fd[0], (const struct sockaddr *)&a, sizeof a);
}

static void test_oldest_idle_gives_way_busy_never(void)
{
    kiln_err err;
    srv_conns_cfg c = quiet();
    c.max_total = 2;
    c.max_per_addr = 0;
    srv_conns *t;
    ASSERT_OK(srv_conns_create(&c, &t, &err));
    pair a, b, d;
    pair_open(&a);
    pair_open(&b);
    pair_open(&d);
    srv_conn_rec *ra = OPEN4(t, &a, "10.0.0.1");
    usleep(2000);
    srv_conn_rec *rb = OPEN4(t, &b, "10.0.0.2");
    ASSERT_TRUE(ra && rb && !shut(&a) && !shut(&b));
    ASSERT_EQ_I64(srv_conns_begin(t, rb), SRV_CONN_OK); /* b is busy now */
    srv_conn_rec *rd = OPEN4(t, &d, "10.0.0.3");        /* over the cap: a (idle) gives way */
    ASSERT_TRUE(rd && shut(&a) && !shut(&b) && !shut(&d));
    srv_conns_stats st = srv_conns_get_stats(t);
    ASSERT_EQ_I64(st.evicted, 1);
    ASSERT_EQ_I64(st.open, 3); /* a stays in the table until MHD closes it */
    srv_conns_closed(t, ra);
    ASSERT_EQ_I64(srv_conns_begin(t, rd), SRV_CONN_OK);
    srv_conns_closed(t, rb);
    srv_conns_closed(t, rd);
    ASSERT_EQ_I64(srv_conns_get_stats(t).open, 0);
    srv_conns_destroy(t);
    pair_close(&a);
    pair_close(&b);
    pair_close(&d);
}

static void test_every_slot_busy_refuses(void)
{
    kiln_err err;
    srv_conns_cfg c = quiet();
    c.max_total = 2;
    c.max_per_addr = 0;
    srv_conns *t;
    ASSERT_OK(srv_conns_create(&c, &t, &err));
    pair p[3];
    srv_conn_rec *r[3];
    for (int i = 0; i < 3; i++) {
        pair_open(&p[i]);
        r[i] = OPEN4(t, &p[i], "10.0.0.1");
    }
    /* the first two were idle when the third came: the oldest gave way */
    ASSERT_TRUE(shut(&p[0]));
    srv_conns_closed(t, r[0]);
    pair q;
    pair_open(&q);
    ASSERT_EQ_I64(srv_conns_begin(t, r[1]), SRV_CONN_OK);
    ASSERT_EQ_I64(srv_conns_begin(t, r[2]), SRV_CONN_OK);
    srv_conn_rec *rq = OPEN4(t, &q, "10.0.0.9"); /* nobody idle to give way */
    ASSERT_EQ_I64(srv_conns_begin(t, rq), SRV_CONN_OVER_TOTAL);
    ASSERT_EQ_I64(srv_conns_get_stats(t).refused_total, 1);
    ASSERT_TRUE(!shut(&p[1]) && !shut(&p[2]));
    srv_conns_end(t, r[1]); /* a request ends: keep-alive, idle again */
    srv_conns_closed(t, rq);
    pair q2;
    pair_open(&q2);
    srv_conn_rec *rq2 = OPEN4(t, &q2, "10.0.0.9");
    ASSERT_TRUE(shut(&p[1]));
    ASSERT_EQ_I64(srv_conns_begin(t, rq2), SRV_CONN_OK);
    srv_conns_destroy(t); /* frees what is still in the table */
    for (int i = 0; i < 3; i++)
        pair_close(&p[i]);
    pair_close(&q);
    pair_close(&q2);
}

static void test_per_address_cap_and_ipv6_prefix(void)
{
    kiln_err err;
    srv_conns_cfg c = quiet();
    c.max_total = 100;
    c.max_per_addr = 1;
    srv_conns *t;
    ASSERT_OK(srv_conns_create(&c, &t, &err));
    pair a, b, d, e;
    pair_open(&a);
    pair_open(&b);
    pair_open(&d);
    pair_open(&e);
    struct sockaddr_in6 x = v6("2001:db8:1:2::1"), y = v6("2001:db8:1:2:ffff::7");
    struct sockaddr_in6 z = v6("2001:db8:1:3::1");
    srv_conn_rec *ra = srv_conns_opened(t, a.fd[0], (struct sockaddr *)&x, sizeof x);
    ASSERT_EQ_I64(srv_conns_begin(t, ra), SRV_CONN_OK);
    srv_conn_rec *rb = srv_conns_opened(t, b.fd[0], (struct sockaddr *)&y, sizeof y);
    ASSERT_EQ_I64(srv_conns_begin(t, rb), SRV_CONN_OVER_ADDR); /* the same /64 */
    srv_conn_rec *rd = srv_conns_opened(t, d.fd[0], (struct sockaddr *)&z, sizeof z);
    ASSERT_EQ_I64(srv_conns_begin(t, rd), SRV_CONN_OK); /* another /64 */
    /* IPv4-mapped IPv6 counts as its IPv4 address */
    struct sockaddr_in6 m = v6("::ffff:10.1.2.3");
    srv_conn_rec *re = srv_conns_opened(t, e.fd[0], (struct sockaddr *)&m, sizeof m);
    ASSERT_EQ_I64(srv_conns_begin(t, re), SRV_CONN_OK);
    pair f;
    pair_open(&f);
    srv_conn_rec *rf = OPEN4(t, &f, "10.1.2.3");
    ASSERT_EQ_I64(srv_conns_begin(t, rf), SRV_CONN_OVER_ADDR);
    /* no address (unix socket): never capped per address */
    pair g;
    pair_open(&g);
    srv_conn_rec *rg = srv_conns_opened(t, g.fd[0], NULL, 0);
    ASSERT_EQ_I64(srv_conns_begin(t, rg), SRV_CONN_OK);
    ASSERT_EQ_I64(srv_conns_get_stats(t).refused_addr, 2);
    srv_conns_destroy(t);
    pair_close(&a);
    pair_close(&b);
    pair_close(&d);
    pair_close(&e);
    pair_close(&f);
    pair_close(&g);
}

static void test_deadlines_close_sockets(void)
{
    kiln_err err;
    srv_conns_cfg c = quiet();
    c.header_timeout_s = 0.2;
    c.keepalive_s = 0.2;
    c.body_timeout_s = 0.2;
    srv_conns *t;
    ASSERT_OK(srv_conns_create(&c, &t, &err));
    pair h, k, b, act;
    pair_open(&h);
    pair_open(&k);
    pair_open(&b);
    pair_open(&act);
    srv_conn_rec *rh = OPEN4(t, &h, "10.0.0.1"); /* never sends its headers */
    srv_conn_rec *rk = OPEN4(t, &k, "10.0.0.1");
    srv_conns_begin(t, rk);
    srv_conns_dispatch(t, rk);
    srv_conns_end(t, rk); /* then idles in keep-alive */
    srv_conn_rec *rb = OPEN4(t, &b, "10.0.0.1");
    srv_conns_begin(t, rb); /* its body never completes */
    srv_conn_rec *ra = OPEN4(t, &act, "10.0.0.1");
    srv_conns_begin(t, ra);
    srv_conns_dispatch(t, ra); /* a long generation: no deadline */
    ASSERT_TRUE(wait_shut(&h) && wait_shut(&k) && wait_shut(&b));
    usleep(300000);
    ASSERT_TRUE(!shut(&act));
    srv_conns_stats st = srv_conns_get_stats(t);
    ASSERT_EQ_I64(st.closed_header, 1);
    ASSERT_EQ_I64(st.closed_keepalive, 1);
    ASSERT_EQ_I64(st.closed_body, 1);
    ASSERT_EQ_I64(st.busy, 2); /* b (still in the table until closed) and act */
    srv_conns_closed(t, rh);
    srv_conns_closed(t, rk);
    srv_conns_closed(t, rb);
    srv_conns_closed(t, ra);
    srv_conns_destroy(t);
    pair_close(&h);
    pair_close(&k);
    pair_close(&b);
    pair_close(&act);
}

static void test_young_idle_is_kept(void)
{
    kiln_err err;
    srv_conns_cfg c = quiet();
    c.max_total = 1;
    c.max_per_addr = 0;
    c.min_idle_age_s = 3600; /* nobody has waited long enough to be given up */
    srv_conns *t;
    ASSERT_OK(srv_conns_create(&c, &t, &err));
    pair a, b;
    pair_open(&a);
    pair_open(&b);
    OPEN4(t, &a, "10.0.0.1");
    srv_conn_rec *rb = OPEN4(t, &b, "10.0.0.2");
    ASSERT_TRUE(!shut(&a));
    ASSERT_EQ_I64(srv_conns_begin(t, rb), SRV_CONN_OVER_TOTAL);
    srv_conns_destroy(t);
    pair_close(&a);
    pair_close(&b);
}

int main(void)
{
    RUN(test_oldest_idle_gives_way_busy_never);
    RUN(test_every_slot_busy_refuses);
    RUN(test_per_address_cap_and_ipv6_prefix);
    RUN(test_deadlines_close_sockets);
    RUN(test_young_idle_is_kept);
    return TEST_DONE();
}
