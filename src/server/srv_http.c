/*
 * srv_http.c — the HTTP front: libmicrohttpd with one thread per connection,
 * routing, API keys, body limits, JSON and SSE responses.
 *
 * A connection's request, and the function that moves it:
 *   HEADERS  -> BODY      on_request(), first call: route, method, key and
 *                         Content-Length are checked (errors answer at once)
 *   BODY     -> DISPATCH  on_request(), last call: the route handler runs
 *   DISPATCH -> STREAMING stream_read() pulls SSE frames from the srv_gen
 *   any      -> FREED     on_completed() / stream_free() release everything
 * Invariants:
 *   (1) the body buffer never grows past cfg.max_body (the rest is dropped, 413)
 *   (2) a streaming srv_gen is freed by stream_free exactly once, whatever way
 *       the connection ends (that cancels the engine request: blocks are freed)
 * Threads: MHD's; each handler runs on its connection's thread and may block
 * on the engine. Shared state lives in srv_server (atomics, s->mu).
 * Errors: every failure becomes the OpenAI error JSON via srv_error.c.
 */
#include "server/srv_anthropic.h"
#include "server/srv_int.h"
#include "server/srv_json.h"
#include "server/srv_responses.h"
#include "server/srv_webui.h"
#include "util/kiln_json.h"
#include "util/kiln_log.h"
#include "util/plat.h"

#include <errno.h>
#include <stdarg.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#if MHD_VERSION < 0x00097002
typedef int MHD_RESULT;
#else
typedef enum MHD_Result MHD_RESULT;
#endif

/* ---------------------------------------------------------------- routes */

typedef enum {
    R_CHAT,
    R_COMPLETIONS,
    R_MESSAGES,
    R_MODELS,
    R_MODEL,
    R_HEALTH,
    R_STATS,
    R_METRICS,
    R_TOKENIZE,
    R_DETOKENIZE,
    R_COUNT_TOKENS,
    R_RESPONSES,
    R_FIT,
    R_LEASE,
    R_CACHE_FLUSH,
    R_EMBEDDINGS,
    R_CONVERSATIONS,
    R_ADAPTERS,
    R_WEBUI
} route_id;

typedef struct {
    const char *path;
    const char *method; /* NULL: any (the handler answers 405 itself) */
    route_id id;
    int public;    /* no API key needed */
    int unix_only; /* reachable only over --unix (404 over TCP) */
} route;

static const route routes[] = {
    {"/v1/chat/completions", "POST", R_CHAT, 0, 0},
    {"/v1/completions", "POST", R_COMPLETIONS, 0, 0},
    {"/v1/messages", "POST", R_MESSAGES, 0, 0},
    {"/v1/messages/count_tokens", "POST", R_COUNT_TOKENS, 0, 0},
    {"/v1/responses", "POST", R_RESPONSES, 0, 0},
    {"/v1/models", "GET", R_MODELS, 0, 0},
    {"/health", "GET", R_HEALTH, 1, 0},
    {"/stats", "GET", R_STATS, 0, 0},
    {"/metrics", "GET", R_METRICS, 0, 0},
    {"/tokenize", "POST", R_TOKENIZE, 0, 0},
    {"/detokenize", "POST", R_DETOKENIZE, 0, 0},
    {"/fit", "GET", R_FIT, 0, 0},
    {"/admin/lease", "POST", R_LEASE, 0, 1},
    {"/admin/cache/flush", "POST", R_CACHE_FLUSH, 0, 0},
    {"/v1/embeddings", "POST", R_EMBEDDINGS, 0, 0},
};
/* Routes matched by prefix: the conversations tree, and the chat page's files (public:
 * the page itself holds nothing; the API calls it makes need the key). */
static const route conv_route = {"/v1/conversations", NULL, R_CONVERSATIONS, 0, 0};
static const route adapters_route = {"/v1/adapters", NULL, R_ADAPTERS, 0, 0}; /* and /NAME */
static const route model_route = {"/v1/models/", "GET", R_MODEL, 0, 0}; /* /v1/models/{id} */
static const route webui_route = {"/", "GET", R_WEBUI, 1, 0};

/* The route for path (a trailing slash is forgiven), or NULL. */
static const route *find_route(const char *url)
{
    size_t n = strlen(url);
    if (n > 1 && url[n - 1] == '/') n--;
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
        if (strlen(routes[i].path) == n && !memcmp(routes[i].path, url, n)) return &routes[i];
    if (!strncmp(url, "/v1/conversations", 17) && (url[17] == 0 || url[17] == '/')) return &conv_route;
    if (!strncmp(url, "/v1/adapters", 12) && (url[12] == 0 || url[12] == '/')) return &adapters_route;
    if (!strncmp(url, "/v1/models/", 11) && n > 11) return &model_route;
    if (srv_webui_find(url)) return &webui_route;
    return NULL;
}

/* ---------------------------------------------------------------- per-connection state */

typedef struct {
    srv_server *s;
    const route *rt;
    srv_buf body;   /* OWNED: the request body so far, (1) */
    uint64_t reserved; /* request memory reserved for the body (kiln_json.h), released at the end */
    bool too_large;
    bool no_memory;    /* the body did not fit in the request memory: 503 (or 413) at its end */
    uint64_t refused;  /* the capacity body_add could not reserve */
    bool answered;  /* an error was queued on the first call */
    bool via_unix;  /* accepted on the --unix socket */
    int fd;
    srv_conn_rec *rec; /* BORROWED from s->conns (NULL: untracked); lives until the socket closes */
    char method[16];  /* of the first call (routes that take several methods) */
    char url[1024];   /* the path (conversations, page files); longer ones get 404 */
} srv_conn;

typedef struct {
    srv_server *s;
    srv_gen *g;     /* OWNED: (2) */
    srv_buf out;    /* OWNED: frames not yet handed to MHD */
    size_t off;
    int fd;
    bool done;
    double t_emit;  /* last time bytes went out (keep-alive comments) */
} srv_stream;

/* Has the peer closed its side? A non-blocking peek: 0 bytes means FIN. */
static int peer_alive(void *ctx)
{
    int fd = *(int *)ctx;
    if (fd < 0) return 1;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return 0;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return 0;
    return 1;
}

/* ---------------------------------------------------------------- responses */

static MHD_RESULT send_bytes(struct MHD_Connection *c, int status, char *text, size_t len,
                             const char *ctype, const char *const *hdrs);

static MHD_RESULT send_text(struct MHD_Connection *c, int status, char *text, size_t len,
                            const char *ctype)
{
    return send_bytes(c, status, text, len, ctype, NULL);
}

/* text is OWNED (freed by MHD); hdrs: extra name, value pairs, NULL-ended (may be NULL). */
static MHD_RESULT send_bytes(struct MHD_Connection *c, int status, char *text, size_t len,
                             const char *ctype, const char *const *hdrs)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, text, text ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    if (status == 503 || status == 429) MHD_add_response_header(r, "Retry-After", "1");
    for (size_t i = 0; hdrs && hdrs[i]; i += 2) MHD_add_response_header(r, hdrs[i], hdrs[i + 1]);
    MHD_RESULT rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

/* Sends j (stolen) as the body; close: the connection ends after it. */
static MHD_RESULT send_json_ex(srv_conn *cn, struct MHD_Connection *c, int status, json_t *j,
                               bool close)
{
    size_t len = 0;
    char *s = j ? srv_json_dump(j, &len) : NULL;
    json_decref(j);
    if (!s) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                                  "\"param\":null,\"code\":null}}";
        s = strdup(oom);
        len = s ? strlen(s) : 0;
        status = 500;
    }
    srv_metrics_request(cn->s->metrics, cn->rt ? cn->rt->path : "other", status);
    static const char *const close_hdrs[] = {MHD_HTTP_HEADER_CONNECTION, "close", NULL};
    return send_bytes(c, status, s, len, "application/json", close ? close_hdrs : NULL);
}

static MHD_RESULT send_json(srv_conn *cn, struct MHD_Connection *c, int status, json_t *j)
{
    return send_json_ex(cn, c, status, j, false);
}

static MHD_RESULT send_error_ex(srv_conn *cn, struct MHD_Connection *c, const srv_error *e,
                                bool close)
{
    if (srv_error_status(e->kind) >= 500 && e->kind != SRV_E_OVERLOADED)
        KLOG_WARN("srv", "status=%d error=\"%s\"", srv_error_status(e->kind), e->message);
    bool anthropic = cn->rt && (cn->rt->id == R_MESSAGES || cn->rt->id == R_COUNT_TOKENS);
    return send_json_ex(cn, c, srv_error_status(e->kind),
                        anthropic ? srv_error_json_anthropic(e) : srv_error_json(e), close);
}

static MHD_RESULT send_error(srv_conn *cn, struct MHD_Connection *c, const srv_error *e)
{
    return send_error_ex(cn, c, e, false);
}

/* ---------------------------------------------------------------- streaming */

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    srv_stream *st = cls;
    while (st->off >= st->out.len) {
        srv_buf_reset(&st->out);
        st->off = 0;
        if (st->done) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!peer_alive(&st->fd)) return MHD_CONTENT_READER_END_WITH_ERROR;
        st->done = srv_gen_stream(st->g, &st->out, 250) == 1;
        if (!st->out.len && !st->done && plat_now() - st->t_emit > 10.0)
            srv_buf_adds(&st->out, ": keep-alive\n\n");
    }
    size_t n = st->out.len - st->off;
    if (n > max) n = max;
    memcpy(buf, st->out.p + st->off, n);
    st->off += n;
    st->t_emit = plat_now();
    return (ssize_t)n;
}

static void stream_free(void *cls)
{
    srv_stream *st = cls;
    srv_gen_free(st->g);
    srv_buf_free(&st->out);
    free(st);
}

static MHD_RESULT start_stream(srv_conn *cn, struct MHD_Connection *c, srv_gen *g)
{
    srv_stream *st = calloc(1, sizeof *st);
    if (!st) {
        srv_gen_free(g);
        srv_error e = srv_error_make(KILN_E_NOMEM, NULL, "out of memory");
        return send_error(cn, c, &e);
    }
    st->s = cn->s;
    st->g = g;
    st->fd = cn->fd;
    st->t_emit = plat_now();
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read,
                                                               st, stream_free);
    if (!r) {
        stream_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    MHD_RESULT rc = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    srv_metrics_request(cn->s->metrics, cn->rt->path, 200);
    return rc;
}

/* ---------------------------------------------------------------- execution lease */

/* POST /admin/lease: once the engine has finished its step in progress, one
 * line "leased\n", then the connection stays open; the lease is released when
 * the client goes (or the server stops), in lease_free. */
typedef struct {
    srv_server *s;
    eng_engine *e; /* BORROWED: outlives every connection (srv_stop runs first) */
    int fd;
    bool sent;
} srv_lease;

static ssize_t lease_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    srv_lease *l = cls;
    (void)pos;
    if (!l->sent && max >= 7) {
        memcpy(buf, "leased\n", 7);
        l->sent = true;
        return 7;
    }
    for (;;) { /* hold until the client disconnects or the server stops */
        if (atomic_load(&l->s->stopping)) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!peer_alive(&l->fd)) return MHD_CONTENT_READER_END_WITH_ERROR;
        usleep(50000);
    }
}

static void lease_free(void *cls)
{
    srv_lease *l = cls;
    eng_engine_lease_release(l->e);
    KLOG_INFO("srv", "lease ended");
    free(l);
}

static MHD_RESULT start_lease(srv_conn *cn, struct MHD_Connection *c)
{
    eng_engine *e = atomic_load(&cn->s->engine);
    srv_lease *l = e ? calloc(1, sizeof *l) : NULL;
    if (!l) {
        srv_error err = e ? srv_error_make(KILN_E_NOMEM, NULL, "out of memory")
                          : srv_error_make(SRV_E_LOADING, NULL, "the model is still loading");
        return send_error(cn, c, &err);
    }
    l->s = cn->s;
    l->e = e;
    l->fd = cn->fd;
    eng_engine_lease_acquire(e); /* returns after the step in progress */
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64, lease_read, l, lease_free);
    if (!r) {
        lease_free(l);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/plain");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_RESULT rc = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    srv_metrics_request(cn->s->metrics, cn->rt->path, 200);
    return rc;
}

/* ---------------------------------------------------------------- embeddings, conversations, page */

static MHD_RESULT do_embeddings(srv_conn *cn, struct MHD_Connection *c)
{
    char *text = NULL;
    size_t len = 0;
    int status = srv_route_embeddings(cn->s, cn->body.p ? cn->body.p : "", cn->body.len, peer_alive,
                                      &cn->fd, &text, &len);
    if (status == 499) { /* the client went: nothing to answer */
        free(text);
        return MHD_NO;
    }
    if (!text) return send_json(cn, c, 500, NULL); /* out of memory */
    if (status >= 500) KLOG_WARN("srv", "status=%d route=/v1/embeddings", status);
    srv_metrics_request(cn->s->metrics, cn->rt->path, status);
    return send_text(c, status, text, len, "application/json");
}

static MHD_RESULT do_conversations(srv_conn *cn, struct MHD_Connection *c)
{
    srv_conv_call call = {
        .method = cn->method,
        .rest = cn->url + strlen(conv_route.path),
        .q = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "q"),
        .limit = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit"),
        .offset = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "offset"),
        .body = cn->body.p ? cn->body.p : "",
        .len = cn->body.len,
    };
    json_t *body = NULL;
    char att[160], disp[220];
    int status = srv_conv_route(cn->s->conv, cn->s->conv_off, &call, &body, att, sizeof att);
    if (!att[0]) return send_json(cn, c, status, body);
    size_t len = 0;
    char *text = body ? json_dumps(body, JSON_INDENT(1) | JSON_ENSURE_ASCII) : NULL;
    json_decref(body);
    if (!text) return send_json(cn, c, 500, NULL);
    len = strlen(text);
    snprintf(disp, sizeof disp, "attachment; filename=\"%s\"", att);
    const char *hdrs[] = {"Content-Disposition", disp, NULL};
    srv_metrics_request(cn->s->metrics, conv_route.path, status);
    return send_bytes(c, status, text, len, "application/json", hdrs);
}

/* The chat page's files: static bytes in the binary, with an ETag (304 when unchanged). */
static MHD_RESULT do_webui(srv_conn *cn, struct MHD_Connection *c)
{
    const srv_asset *a = srv_webui_find(cn->url);
    if (!a) {
        srv_error e = srv_error_make(SRV_E_ROUTE, NULL, "no route GET %.200s", cn->url);
        return send_error(cn, c, &e);
    }
    char etag[40];
    srv_webui_etag(a, etag, sizeof etag);
    const char *inm = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "If-None-Match");
    int status = inm && !strcmp(inm, etag) ? 304 : 200;
    struct MHD_Response *r = MHD_create_response_from_buffer(status == 304 ? 0 : a->len,
                                                             (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", a->ctype);
    MHD_add_response_header(r, "ETag", etag);
    for (size_t i = 0; srv_webui_headers[i]; i += 2)
        MHD_add_response_header(r, srv_webui_headers[i], srv_webui_headers[i + 1]);
    MHD_RESULT rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    srv_metrics_request(cn->s->metrics, "/", status);
    return rc;
}

/* ---------------------------------------------------------------- dispatch */

static srv_error reqmem_error(const srv_conn *cn, uint64_t need, const char *what);

static MHD_RESULT do_generate(srv_conn *cn, struct MHD_Connection *c, srv_api api)
{
    srv_request r;
    char param[64];
    kiln_err err;
    const char *b = cn->body.p ? cn->body.p : "";
    /* the request's JSON (the body's tree and what parsing derives from it: tool
     * arguments parsed into objects, Responses items into messages) is charged to
     * the request memory until the request is freed */
    uint64_t bf0 = kiln_json_budget_failures();
    bool was = kiln_json_charge(true);
    kiln_code prc = api == SRV_API_ANTHROPIC ? srv_parse_anthropic(b, cn->body.len, &r, param, &err)
                    : api == SRV_API_RESPONSES
                        ? srv_parse_responses(cn->s->rstore, b, cn->body.len, &r, param, &err)
                        : srv_parse_request(api, b, cn->body.len, &r, param, &err);
    kiln_json_charge(was);
    if (prc) {
        srv_error e = kiln_json_budget_failures() != bf0
                          ? reqmem_error(cn, kiln_json_budget_need(), "the request's parsed JSON")
                          : srv_error_from(&err, param[0] ? param : NULL);
        return send_error(cn, c, &e);
    }
    bool stream = r.stream;
    srv_gen *g;
    srv_error e;
    if (srv_gen_start(cn->s, &r, &g, &e)) return send_error(cn, c, &e);
    if (stream) return start_stream(cn, c, g);
    json_t *resp = srv_gen_collect(g, peer_alive, &cn->fd, &e);
    srv_gen_free(g);
    return resp ? send_json(cn, c, 200, resp) : send_error(cn, c, &e);
}

static MHD_RESULT dispatch(srv_conn *cn, struct MHD_Connection *c)
{
    srv_server *s = cn->s;
    json_t *body = NULL;
    int status;
    const char *b = cn->body.p ? cn->body.p : "";
    switch (cn->rt->id) {
    case R_CHAT: return do_generate(cn, c, SRV_API_CHAT);
    case R_COMPLETIONS: return do_generate(cn, c, SRV_API_COMPLETION);
    case R_MESSAGES: return do_generate(cn, c, SRV_API_ANTHROPIC);
    case R_RESPONSES: return do_generate(cn, c, SRV_API_RESPONSES);
    case R_LEASE:
        return start_lease(cn, c);
    case R_MODELS: status = srv_route_models(s, &body); break;
    case R_MODEL: status = srv_route_model(s, cn->url + 11, &body); break;
    case R_HEALTH: status = srv_route_health(s, &body); break;
    case R_STATS: status = srv_route_stats(s, &body); break;
    case R_FIT:
        status = srv_route_fit(s, &body);
        break;
    case R_TOKENIZE: status = srv_route_tokenize(s, b, cn->body.len, &body); break;
    case R_COUNT_TOKENS: status = srv_route_count_tokens(s, b, cn->body.len, &body); break;
    case R_DETOKENIZE: status = srv_route_detokenize(s, b, cn->body.len, &body); break;
    case R_CACHE_FLUSH: status = srv_route_cache_flush(s, &body); break;
    case R_EMBEDDINGS: return do_embeddings(cn, c);
    case R_CONVERSATIONS: return do_conversations(cn, c);
    case R_ADAPTERS: {
        size_t ul = strlen(cn->url);
        if (ul > 12 && cn->url[ul - 1] == '/') cn->url[ul - 1] = 0; /* a trailing '/' is forgiven */
        status = srv_route_adapters(s, cn->method, cn->url + 12, b, cn->body.len,
                                    cn->via_unix || s->api_key != NULL, &body);
        break;
    }
    case R_WEBUI: return do_webui(cn, c);
    case R_METRICS: {
        srv_buf t = {0};
        status = srv_route_metrics(s, &t);
        srv_metrics_request(s->metrics, cn->rt->path, status);
        return send_text(c, status, t.p ? t.p : strdup(""), t.len,
                         "text/plain; version=0.0.4; charset=utf-8");
    }
    default: status = 500; break;
    }
    return send_json(cn, c, status, body);
}

/* ---------------------------------------------------------------- access handler */

static int key_ok(const srv_server *s, struct MHD_Connection *c)
{
    if (!s->api_key) return 1;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *xkey = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    const char *given = NULL;
    if (auth && !strncasecmp(auth, "Bearer ", 7)) given = auth + 7;
    size_t kl = strlen(s->api_key);
    for (int pass = 0; pass < 2; pass++, given = xkey) {
        if (!given || strlen(given) != kl) continue;
        unsigned char diff = 0; /* constant time over the key */
        for (size_t i = 0; i < kl; i++) diff |= (unsigned char)(given[i] ^ s->api_key[i]);
        if (!diff) return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- request memory */

/* Appends to the body, its capacity reserved in the request memory account
 * first (kiln_json.h): false when the account is full or malloc failed. */
static bool body_add(srv_conn *cn, const char *d, size_t n)
{
    srv_buf *b = &cn->body;
    size_t need = b->len + n + 1;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096, lim = cn->s->cfg.max_body + 1;
        if (cap < need) cap = need;
        if (cap > lim && need <= lim) cap = lim;
        if (cap > cn->reserved) {
            if (!kiln_reqmem_reserve(cap - cn->reserved)) {
                cn->refused = cap;
                return false;
            }
            cn->reserved = cap;
        }
        char *np = realloc(b->p, cap);
        if (!np) return false;
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
    b->p[b->len] = 0;
    return true;
}

static void body_drop(srv_conn *cn)
{
    srv_buf_free(&cn->body);
    kiln_reqmem_release(cn->reserved);
    cn->reserved = 0;
}

/* need bytes of request memory were refused: 413 when they can never fit,
 * else 503 + Retry-After (others hold the rest). */
static srv_error reqmem_error(const srv_conn *cn, uint64_t need, const char *what)
{
    uint64_t cap = kiln_reqmem_cap(), used = kiln_reqmem_used();
    uint64_t mine = cn->reserved;
    if (cap && need + mine > cap)
        return srv_error_make(KILN_E_TOO_LARGE, NULL,
                              "%s needs more than %llu bytes of request memory, more than the "
                              "%llu the server has for all requests in flight (--request-memory)",
                              what, (unsigned long long)(need + mine), (unsigned long long)cap);
    return srv_error_make(SRV_E_OVERLOADED, NULL,
                          "%s needs more than %llu bytes of request memory; %llu of %llu are "
                          "held by other requests in flight (--request-memory): retry later",
                          what, (unsigned long long)need,
                          (unsigned long long)(used > mine ? used - mine : 0),
                          (unsigned long long)cap);
}

/* First call: decide whether to read the body at all. */
static MHD_RESULT first_call(srv_conn *cn, struct MHD_Connection *c, const char *url,
                             const char *method)
{
    srv_error e;
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cn->rt && cn->rt->unix_only && !cn->via_unix) cn->rt = NULL; /* not reachable over TCP */
    srv_conn_verdict v = srv_conns_begin(cn->s->conns, cn->rec);
    if (v != SRV_CONN_OK) {
        srv_conns_cfg cc = srv_conns_get_cfg(cn->s->conns);
        e = v == SRV_CONN_OVER_TOTAL
                ? srv_error_make(
                      SRV_E_OVERLOADED, NULL,
                      "the server is at its limit of %u "
                      "connections, each with a request in progress (--max-connections); "
                      "retry later",
                      cc.max_total)
                : srv_error_make(SRV_E_OVERLOADED, NULL,
                                 "your address is at its limit of %u "
                                 "connections, each with a request in progress "
                                 "(--max-connections-per-ip); retry later",
                                 cc.max_per_addr);
        cn->answered = true;
        return send_error_ex(cn, c, &e, true);
    }
    if (!cn->rt) {
        e = srv_error_make(SRV_E_ROUTE, NULL, "no route %.100s %.200s", method, url);
    } else if (cn->rt->method && strcmp(method, cn->rt->method) != 0 &&
               !(cn->rt->id == R_WEBUI && !strcmp(method, "HEAD"))) {
        e = srv_error_make(SRV_E_METHOD, NULL, "%.100s expects %s, got %.16s", cn->rt->path,
                           cn->rt->method, method);
    } else if (!cn->rt->public && !key_ok(cn->s, c)) {
        e = srv_error_make(SRV_E_AUTH, NULL, "missing or invalid API key (send Authorization: "
                           "Bearer KEY or x-api-key: KEY)");
    } else if (cl && strtoull(cl, NULL, 10) > cn->s->cfg.max_body) {
        e = srv_error_make(KILN_E_TOO_LARGE, NULL, "request body of %.24s bytes is over the "
                           "limit of %zu bytes (--max-body)", cl, cn->s->cfg.max_body);
    } else if (cl && strtoull(cl, NULL, 10) > 0 &&
               !kiln_reqmem_reserve(strtoull(cl, NULL, 10) + 1)) {
        /* the whole body is reserved before it is read: it arrives into that */
        e = reqmem_error(cn, strtoull(cl, NULL, 10) + 1, "the request body");
    } else {
        if (cl && strtoull(cl, NULL, 10) > 0) {
            cn->reserved = strtoull(cl, NULL, 10) + 1;
            cn->body.p = malloc(cn->reserved);
            if (cn->body.p) {
                cn->body.cap = cn->reserved;
                cn->body.p[0] = 0;
            }
        }
        return MHD_YES;
    }
    cn->answered = true;
    return send_error(cn, c, &e);
}

static MHD_RESULT on_request(void *cls, struct MHD_Connection *c, const char *url,
                             const char *method, const char *version, const char *upload_data,
                             size_t *upload_size, void **con_cls)
{
    srv_server *s = cls;
    srv_conn *cn = *con_cls;
    if (!cn) {
        cn = calloc(1, sizeof *cn);
        if (!cn) return MHD_NO;
        cn->s = s;
        cn->rt = strlen(url) < sizeof cn->url ? find_route(url) : NULL;
        snprintf(cn->url, sizeof cn->url, "%s", url);
        snprintf(cn->method, sizeof cn->method, "%s", method);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        cn->fd = ci ? ci->connect_fd : -1;
        const union MHD_ConnectionInfo *di = MHD_get_connection_info(c, MHD_CONNECTION_INFO_DAEMON);
        cn->via_unix = s->mhd_unix && di && di->daemon == s->mhd_unix;
        const union MHD_ConnectionInfo *si =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        cn->rec = si ? si->socket_context : NULL;
        *con_cls = cn;
        return first_call(cn, c, url, method);
    }
    if (*upload_size) {
        if (!cn->answered && !cn->too_large && !cn->no_memory) {
            if (cn->body.len + *upload_size > s->cfg.max_body) {
                cn->too_large = true; /* (1) */
                body_drop(cn);
            } else if (!body_add(cn, upload_data, *upload_size)) {
                cn->no_memory = true;
                body_drop(cn);
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (cn->answered) return MHD_YES;
    cn->answered = true;
    srv_conns_dispatch(s->conns, cn->rec);
    if (cn->too_large) {
        srv_error e = srv_error_make(KILN_E_TOO_LARGE, NULL, "request body is over the limit of %zu "
                                     "bytes (--max-body)", s->cfg.max_body);
        return send_error(cn, c, &e);
    }
    if (cn->no_memory) {
        srv_error e = reqmem_error(cn, cn->refused, "the request body");
        return send_error(cn, c, &e);
    }
    return dispatch(cn, c);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    srv_conn *cn = *con_cls;
    if (!cn) return;
    srv_conns_end(cn->s->conns, cn->rec);
    body_drop(cn);
    free(cn);
    *con_cls = NULL;
}

/* Every socket MHD opens and closes enters and leaves the connection table
 * (srv_conns.c), which keeps its deadlines and caps. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    srv_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        srv_conns_closed(s->conns, *socket_context);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *fi =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ai ? ai->client_addr : NULL;
    socklen_t len = !sa                         ? 0
                    : sa->sa_family == AF_INET6 ? (socklen_t)sizeof(struct sockaddr_in6)
                    : sa->sa_family == AF_INET  ? (socklen_t)sizeof(struct sockaddr_in)
                                                : 0;
    *socket_context = srv_conns_opened(s->conns, fi ? fi->connect_fd : -1, len ? sa : NULL, len);
}

/* libmicrohttpd's own messages (clients that hang up mid-request, ...) are
 * DEBUG lines: a misbehaving client must not fill the log. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    if (kiln_log_level() < KLOG_DEBUG) return;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
    KLOG_DEBUG("http", "mhd=\"%s\"", line);
}

/* ---------------------------------------------------------------- listening */

/* Sockets MHD may hold beyond kiln's cap: newcomers that displace idle
 * connections or are answered 503 (srv_conns.c). */
static unsigned conn_slack(unsigned cap)
{
    return cap / 8 + 16;
}

/* File descriptors kiln needs beside its sockets (model files, SSD tier, logs). */
#define FD_RESERVE 256

/* Raises the open-file limit to fit the connection cap (plus MHD's slack and
 * the reserve); narrows the cap, with a warning, when the system will not. */
static void fit_fd_limit(srv_conns_cfg *cc)
{
    uint64_t want = (uint64_t)cc->max_total + conn_slack(cc->max_total) + FD_RESERVE;
    uint64_t got = plat_raise_fd_limit(want);
    if (got >= want || got == 0) return;
    uint64_t room = got > FD_RESERVE + 32 ? got - FD_RESERVE : 32;
    unsigned cap = (unsigned)(room * 8 / 9 > 16 ? room * 8 / 9 - 16 : 16);
    KLOG_WARN("srv",
              "open-file limit %llu is too low for --max-connections %u: serving at most "
              "%u connections (raise ulimit -n)",
              (unsigned long long)got, cc->max_total, cap);
    cc->max_total = cap;
}

static kiln_code listen_on(const char *host, int port, int *fd_out, int *port_out, kiln_err *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int gai = getaddrinfo(host, ps, &hints, &ai);
    if (gai) return kiln_fail(err, KILN_E_INVALID, "cannot resolve host '%s': %s", host, gai_strerror(gai));
    int fd = -1, saved = 0;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 1024) == 0) break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        if (saved == EADDRINUSE)
            return kiln_fail(err, KILN_E_IO, "port %d on %s is already in use (another server "
                             "running? pick one with --port)", port, host);
        return kiln_fail(err, KILN_E_IO, "cannot listen on %s:%d: %s", host, port, strerror(saved));
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    *port_out = port;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        *port_out = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                             : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    *fd_out = fd;
    return KILN_OK;
}

/* A unix-domain listening socket at path, mode 0600. An existing socket file
 * is replaced when nothing listens on it (stale); a live one, or any other
 * kind of file, is refused and left alone. Called before any other thread
 * exists in kiln serve (it sets the umask around bind). */
static kiln_code listen_unix(const char *path, int *fd_out, unsigned long long *dev,
                             unsigned long long *ino, kiln_err *err)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (!path[0] || strlen(path) >= sizeof sa.sun_path)
        return kiln_fail(err, KILN_E_INVALID, "--unix path must be 1..%zu bytes",
                         sizeof sa.sun_path - 1);
    memcpy(sa.sun_path, path, strlen(path));
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return kiln_fail(err, KILN_E_IO,
                             "--unix %s exists and is not a socket; not replacing it", path);
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int live = probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof sa) == 0;
        if (probe >= 0) close(probe);
        if (live) return kiln_fail(err, KILN_E_IO, "another server is listening on %s", path);
        if (unlink(path) != 0)
            return kiln_fail(err, KILN_E_IO, "cannot remove the stale socket %s: %s", path,
                             strerror(errno));
        KLOG_INFO("srv", "removed stale socket path=%s", path);
    } else if (errno != ENOENT) {
        return kiln_fail(err, KILN_E_IO, "--unix %s: %s", path, strerror(errno));
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return kiln_fail(err, KILN_E_IO, "unix socket: %s", strerror(errno));
    mode_t old = umask(0177); /* the file is born 0600: no window with wider access */
    int b = bind(fd, (struct sockaddr *)&sa, sizeof sa);
    int saved = errno;
    umask(old);
    if (b != 0) {
        close(fd);
        return kiln_fail(err, KILN_E_IO, "cannot bind %s: %s", path, strerror(saved));
    }
    if (chmod(path, 0600) != 0 || lstat(path, &st) != 0 || listen(fd, 128) != 0) {
        saved = errno;
        unlink(path);
        close(fd);
        return kiln_fail(err, KILN_E_IO, "cannot listen on %s: %s", path, strerror(saved));
    }
    *dev = (unsigned long long)st.st_dev;
    *ino = (unsigned long long)st.st_ino;
    *fd_out = fd;
    return KILN_OK;
}

/* Thread per connection: a handler may block on the engine for as long as its
 * generation runs, and a waiting connection costs a parked thread (its stack is
 * virtual memory, touched pages only) and MHD's 32 KiB buffer, not a busy loop.
 * MHD's own limit sits above kiln's cap (srv_conns) so that a connection beyond
 * the cap is still accepted: it displaces an idle one, or gets a clear 503,
 * instead of a silent close. MHD's inactivity timeout is only a backstop (no
 * byte in either direction for that long); kiln's deadlines are srv_conns'. */
static struct MHD_Daemon *start_daemon(srv_server *s, int fd)
{
    srv_conns_cfg cc = srv_conns_get_cfg(s->conns);
    double backstop = cc.keepalive_s;
    if (cc.header_timeout_s > backstop) backstop = cc.header_timeout_s;
    if (cc.body_timeout_s > backstop) backstop = cc.body_timeout_s;
    if (backstop < 60) backstop = 60;
    return MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                                MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG,
                            0, NULL, NULL, on_request, s, MHD_OPTION_LISTEN_SOCKET, fd,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_CONNECTION_LIMIT, cc.max_total + conn_slack(cc.max_total),
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(backstop + 0.999),
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, MHD_OPTION_END);
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

size_t srv_request_memory_default(size_t max_body)
{
    return max_body <= SIZE_MAX / 8 ? 4 * max_body : SIZE_MAX / 2;
}

srv_config srv_config_default(void)
{
    srv_config c = {
        .host = "127.0.0.1",
        .port = 8080,
        .model_id = "kiln",
        .max_body = 4u << 20,
        .ctx = 4096,
        .batch = 8,
        .max_queue = 64,
        .thinking = -1,
        .tool_parser = -1,
        .grammar_ws = 20,
        .grammar_compile_ms = 500,
        .grammar_cache_bytes = (size_t)64 << 20,
        .responses_ttl_s = 3600,
        .responses_store_bytes = (size_t)64 << 20,
        .defaults = {.temperature = 0.7f,
                     .top_p = 1.0f,
                     .min_p = 0.0f,
                     .repetition_penalty = 1.0f,
                     .top_k = 0},
    };
    srv_conns_cfg cc = srv_conns_cfg_default();
    c.max_connections = cc.max_total;
    c.max_connections_per_ip = cc.max_per_addr;
    c.header_timeout_s = cc.header_timeout_s;
    c.keepalive_timeout_s = cc.keepalive_s;
    c.body_timeout_s = cc.body_timeout_s;
    return c;
}

/* The conversation store; a folder that cannot be used is a warning, not a refusal to
 * serve: /v1/conversations then answers 503 saying why. */
static void open_conversations(srv_server *s, const char *dir)
{
    char def[4096];
    if (dir && !dir[0]) {
        snprintf(s->conv_off, sizeof s->conv_off, "started with --data-dir ''");
        return;
    }
    if (!dir) {
        srv_conv_default_dir(def, sizeof def);
        dir = def;
    }
    kiln_err e;
    if (srv_conv_open(dir, &s->conv, &e) != KILN_OK) {
        snprintf(s->conv_off, sizeof s->conv_off, "%s", e.msg);
        KLOG_WARN("srv", "conversations are not stored: %s", e.msg);
        return;
    }
    KLOG_INFO("srv", "conversations db=%s", srv_conv_db_path(s->conv));
}

kiln_code srv_start(const srv_config *c, srv_server **out, kiln_err *err)
{
    *out = NULL;
    if (c->max_body == 0) return kiln_fail(err, KILN_E_INVALID, "--max-body must be > 0");
    if (c->ctx < 2) return kiln_fail(err, KILN_E_INVALID, "context of %d tokens is too small", (int)c->ctx);
    srv_server *s = calloc(1, sizeof *s);
    if (!s) return kiln_fail(err, KILN_E_NOMEM, "server: out of memory");
    s->cfg = *c;
    if (!s->cfg.request_memory) s->cfg.request_memory = srv_request_memory_default(c->max_body);
    kiln_reqmem_set_cap(s->cfg.request_memory); /* process-wide: one server per process */
    s->listen_fd = -1;
    s->unix_fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    srv_lora_table_init(&s->lora, NULL, 0, -1, NULL); /* empty until srv_attach */
    s->host = strdup(c->host ? c->host : "127.0.0.1");
    s->model_id = strdup(c->model_id ? c->model_id : "kiln");
    s->model_dir = dup_or_null(c->model_dir);
    s->api_key = c->api_key && c->api_key[0] ? strdup(c->api_key) : NULL;
    s->metrics = srv_metrics_new();
    s->t_start = plat_now();
    s->t_created = time(NULL);
    if (srv_rstore_create(c->responses_ttl_s, c->responses_store_bytes, &s->rstore, err) ||
        (c->grammar_cache_bytes && gr_cache_create(c->grammar_cache_bytes, &s->gcache, err))) {
        srv_stop(s);
        return err ? err->code : KILN_E_NOMEM;
    }
    srv_conns_cfg cc = srv_conns_cfg_default();
    if (c->max_connections) cc.max_total = c->max_connections;
    cc.max_per_addr = c->max_connections_per_ip;
    if (c->header_timeout_s > 0) cc.header_timeout_s = c->header_timeout_s;
    if (c->keepalive_timeout_s > 0) cc.keepalive_s = c->keepalive_timeout_s;
    if (c->body_timeout_s > 0) cc.body_timeout_s = c->body_timeout_s;
    fit_fd_limit(&cc);
    kiln_code crc = srv_conns_create(&cc, &s->conns, err);
    if (crc) {
        srv_stop(s);
        return crc;
    }
    if (!s->host || !s->model_id || (c->model_dir && !s->model_dir) || !s->metrics ||
        (c->api_key && c->api_key[0] && !s->api_key)) {
        srv_stop(s);
        return kiln_fail(err, KILN_E_NOMEM, "server: out of memory");
    }
    s->cfg.host = s->host;
    s->cfg.model_id = s->model_id;
    s->cfg.model_dir = s->model_dir;
    s->cfg.api_key = s->api_key;
    s->cfg.data_dir = NULL; /* borrowed during srv_start only */
    atomic_store(&s->load_permille, -1);
    open_conversations(s, c->data_dir);
    if (c->unix_path) {
        kiln_code urc =
            (s->unix_path = strdup(c->unix_path))
                ? listen_unix(s->unix_path, &s->unix_fd, &s->unix_dev, &s->unix_ino, err)
                : kiln_fail(err, KILN_E_NOMEM, "server: out of memory");
        if (urc) {
            free(s->unix_path);
            s->unix_path = NULL; /* not ours: never unlinked */
            srv_stop(s);
            return urc;
        }
        s->cfg.unix_path = s->unix_path;
    }
    kiln_code rc = listen_on(s->host, c->port, &s->listen_fd, &s->port, err);
    if (rc) {
        srv_stop(s);
        return rc;
    }
    s->mhd = start_daemon(s, s->listen_fd);
    if (!s->mhd) {
        srv_stop(s);
        return kiln_fail(err, KILN_E_IO, "cannot start the HTTP server on %s:%d", c->host, c->port);
    }
    s->listen_fd = -1; /* MHD owns it now */
    if (s->unix_path) {
        s->mhd_unix = start_daemon(s, s->unix_fd);
        if (!s->mhd_unix) {
            srv_stop(s);
            return kiln_fail(err, KILN_E_IO, "cannot start the HTTP server on %s", s->unix_path);
        }
        s->unix_fd = -1;
    }
    *out = s;
    return KILN_OK;
}

kiln_code srv_attach(srv_server *s, const srv_model *m, kiln_err *err)
{
    if (m->ctx < 2) return kiln_fail(err, KILN_E_INVALID, "context of %d tokens is too small", (int)m->ctx);
    s->tok = m->tok;
    s->cfg.ctx = m->ctx;
    if (m->admission) s->adm = *m->admission;
    s->kv_budget_bytes = m->kv_budget_bytes;
    if (m->fit_json) {
        json_error_t je;
        s->fit = json_loads(m->fit_json, 0, &je);
        if (!s->fit) return kiln_fail(err, KILN_E_INTERNAL, "fit report: %s", je.text);
        if (m->process_bytes &&
            json_object_set_new(s->fit, "process_bytes", json_integer((json_int_t)m->process_bytes)))
            return kiln_fail(err, KILN_E_NOMEM, "fit report: out of memory");
    }
    s->cfg.n_threads = m->n_threads;
    int dflt = -1;
    for (int i = 0; m->default_adapter && i < m->n_adapters; i++)
        if (strcmp(m->adapters[i].name, m->default_adapter) == 0) dflt = i;
    if (m->default_adapter && dflt < 0)
        return kiln_fail(err, KILN_E_INVALID, "--lora-default %s: no adapter of that name",
                         m->default_adapter);
    srv_lora_table_free(&s->lora); /* the empty table srv_start made */
    kiln_code lrc = srv_lora_table_init(&s->lora, m->adapters, m->n_adapters, dflt, err);
    s->model = m->model;
    s->lora_hot_cap = m->lora_hot_bytes;
    if (!lrc && m->lora_dir && !(s->lora_dir = strdup(m->lora_dir)))
        lrc = kiln_fail(err, KILN_E_NOMEM, "out of memory");
    if (lrc) return lrc;
    if (s->model_dir) {
        kiln_err e2;
        kiln_code rc = srv_chat_load(s->model_dir, &s->chat, &e2);
        /* a render holds its prompt text and its values: each bounded by the
         * request memory cap, as a body and its parsed JSON are */
        if (rc == KILN_OK)
            srv_chat_set_limits(s->chat, s->cfg.request_memory, s->cfg.request_memory);
        if (rc == KILN_E_NOT_FOUND) {
            KLOG_INFO("srv", "model has no chat template: /v1/chat/completions answers 400");
        } else if (rc) {
            if (err) *err = e2;
            return kiln_err_prefix(err, "chat template: ");
        }
    }
    if (s->model_dir) {
        kiln_code erc = srv_embed_load(s->model_dir, (eng_pooling)s->cfg.pooling, &s->embed, err);
        if (erc) return kiln_err_prefix(err, "embeddings: ");
        KLOG_INFO("srv", "embeddings pooling=%s normalize=%d source=\"%s\"%s%s",
                  eng_pool_name(s->embed.pooling), (int)s->embed.normalize, s->embed.source,
                  s->embed.unsupported[0] ? " refused=" : "", s->embed.unsupported);
    } else {
        s->embed.pooling = s->cfg.pooling ? (eng_pooling)s->cfg.pooling : ENG_POOL_LAST;
        s->embed.source = "default";
    }
    s->tool_family = s->cfg.tool_parser >= 0 ? (srv_tc_family)s->cfg.tool_parser
                     : s->chat ? srv_tc_detect(srv_chat_template_text(s->chat, true), s->tok)
                               : SRV_TC_NONE;
    KLOG_INFO("srv", "tool_parser=%s%s", srv_tc_family_name(s->tool_family),
              s->cfg.tool_parser >= 0 ? " (--tool-parser)" : "");
    atomic_store(&s->engine, m->engine);
    return KILN_OK;
}

int srv_port(const srv_server *s)
{
    return s->port;
}

void srv_set_load_progress(srv_server *s, double fraction)
{
    int pm = fraction < 0 ? -1 : fraction > 1 ? 1000 : (int)(fraction * 1000.0);
    atomic_store(&s->load_permille, pm);
}

void srv_quiesce(srv_server *s)
{
    if (!s) return;
    atomic_store(&s->stopping, 1);
    struct MHD_Daemon *ds[2] = {s->mhd, s->mhd_unix};
    for (int i = 0; i < 2; i++) {
        if (!ds[i]) continue;
        MHD_socket fd = MHD_quiesce_daemon(ds[i]);
        if (fd != MHD_INVALID_SOCKET) close(fd);
    }
}

void srv_stop(srv_server *s)
{
    if (!s) return;
    atomic_store(&s->stopping, 1);
    srv_gen_cancel_all(s);
    /* Give cancelled streams a bounded time to write their last frames. */
    double until = plat_now() + 5.0;
    pthread_mutex_lock(&s->mu);
    while (s->n_active > 0 && plat_now() < until) {
        pthread_mutex_unlock(&s->mu);
        srv_gen_cancel_all(s);
        usleep(20000);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    if (s->mhd) MHD_stop_daemon(s->mhd);
    if (s->mhd_unix) MHD_stop_daemon(s->mhd_unix); /* a lease in flight ends: stopping is set */
    srv_conns_destroy(s->conns);                   /* after the daemons: every socket is closed */
    if (s->listen_fd >= 0) close(s->listen_fd);
    if (s->unix_fd >= 0) close(s->unix_fd);
    struct stat st;
    if (s->unix_path && lstat(s->unix_path, &st) == 0 &&
        (unsigned long long)st.st_dev == s->unix_dev &&
        (unsigned long long)st.st_ino == s->unix_ino)
        unlink(s->unix_path); /* only the file we made */
    free(s->unix_path);
    srv_chat_free(s->chat);
    srv_embed_cfg_free(&s->embed);
    srv_conv_close(s->conv);
    json_decref(s->fit);
    srv_rstore_destroy(s->rstore);
    gr_cache_destroy(s->gcache);
    srv_metrics_free(s->metrics);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->host);
    srv_lora_table_free(&s->lora);
    free(s->lora_dir);
    free(s->model_id);
    free(s->model_dir);
    free(s->api_key);
    free(s);
}
