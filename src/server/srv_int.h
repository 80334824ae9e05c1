/*
 * srv_int.h — the server's struct, shared only by the files of server/.
 */
#ifndef KILN_SRV_INT_H
#define KILN_SRV_INT_H

#include <pthread.h>
#include <time.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "grammar/gr.h"
#include "server/srv.h"
#include "server/srv_chat.h"
#include "server/srv_conns.h"
#include "server/srv_conv.h"
#include "server/srv_embed.h"
#include "server/srv_error.h"
#include "server/srv_metrics.h"
#include "server/srv_openai.h"
#include "server/srv_rstore.h"
#include "server/srv_toolcall.h"

struct MHD_Daemon;
typedef struct srv_gen srv_gen;

struct srv_server {
    srv_config cfg;               /* strings below are OWNED copies */
    char *host, *model_id, *model_dir, *api_key;
    struct MHD_Daemon *mhd;       /* OWNED */
    int listen_fd;                /* owned by mhd once started */
    int port;
    _Atomic(eng_engine *) engine; /* BORROWED; NULL until srv_attach */
    const tok_tokenizer *tok;     /* BORROWED; set before engine */
    srv_chat *chat;               /* OWNED; NULL: no chat template */
    srv_lora_table lora;          /* OWNED: adapters by name (srv_lora.h), filled at srv_attach */
    const mdl_model *model;       /* BORROWED (srv_attach): what adapters load against */
    char *lora_dir;               /* OWNED: --lora-dir (hot loads come only from it); NULL = none */
    uint64_t lora_hot_cap;        /* --lora-memory bytes for hot loads; 0 = no cap */
    srv_rstore *rstore;           /* OWNED: Responses API store (previous_response_id) */
    gr_cache *gcache;             /* OWNED: compiled grammars (--grammar-cache); NULL = off */
    srv_tc_family tool_family;    /* how tool calls are parsed (set by srv_attach) */
    srv_metrics *metrics;         /* OWNED */
    srv_conns *conns;             /* OWNED: open connections, deadlines, caps */
    _Atomic int stopping;         /* set by srv_quiesce: new requests get 503 */
    _Atomic uint64_t next_id;     /* request ids and unseeded RNG seeds */
    double t_start;
    time_t t_created; /* wall clock at start: every /v1/models entry's "created" */
    pthread_mutex_t mu;           /* guards active list */
    pthread_cond_t cv;            /* signalled when a gen leaves the list */
    srv_gen *active;              /* generations in flight (srv_gen.c) */
    int n_active;
    eng_admit_plan adm;       /* set by srv_attach; adm.ctx == 0: no plan */
    uint64_t kv_budget_bytes; /* --kv-budget; 0 = none */
    json_t *fit;              /* OWNED: GET /fit body; NULL = none */
    struct MHD_Daemon *mhd_unix;           /* OWNED: the --unix listener; NULL = none */
    char *unix_path;                       /* OWNED copy of cfg.unix_path */
    int unix_fd;                           /* owned by mhd_unix once started */
    unsigned long long unix_dev, unix_ino; /* the socket file we made (removed at stop) */
    srv_embed_cfg embed;           /* /v1/embeddings: pooling read by srv_attach (OWNED fields) */
    srv_conv_store *conv;          /* OWNED: /v1/conversations; NULL = not stored (conv_off says why) */
    char conv_off[300];
    _Atomic int load_permille;     /* model load progress for /health while loading; -1 = unknown */
};

/* Generation (srv_gen.c) */
/* Returns 1 while the client is still there. */
typedef int (*srv_alive_fn)(void *ctx);
/* Renders/tokenizes the prompt, applies defaults, submits r->n engine requests.
 * Takes ownership of *r (zeroed on return). On failure *e is filled, *out NULL. */
int srv_gen_start(srv_server *s, srv_request *r, srv_gen **out, srv_error *e);
/* Non-streaming: waits for every choice and returns the response (OWNED), or
 * NULL with *e filled. alive is polled while waiting. */
json_t *srv_gen_collect(srv_gen *g, srv_alive_fn alive, void *ctx, srv_error *e);
/* Streaming: appends SSE frames to out, waiting up to timeout_ms for events.
 * Returns 1 when the stream is complete ([DONE] appended), 0 otherwise. */
int srv_gen_stream(srv_gen *g, srv_buf *out, int timeout_ms);
/* Cancels what is still running and frees g. NULL is a no-op. */
void srv_gen_free(srv_gen *g);
/* Cancels every generation in flight (shutdown). */
void srv_gen_cancel_all(srv_server *s);

/* Routes that do not generate (srv_routes.c). Each returns the status and
 * sets *body (OWNED) to a JSON value, or *text for /metrics. */
int srv_route_models(srv_server *s, json_t **body);
/* GET /v1/models/{id}: the entry of /v1/models with that id (the base model
 * or an adapter "BASE:NAME"); 404 when none. id: the rest of the path (a
 * repo id keeps its '/'; one trailing '/' is forgiven). */
int srv_route_model(srv_server *s, const char *id, json_t **body);
int srv_route_health(srv_server *s, json_t **body);
int srv_route_stats(srv_server *s, json_t **body);
int srv_route_fit(srv_server *s, json_t **body);
int srv_route_metrics(srv_server *s, srv_buf *text);
int srv_route_tokenize(srv_server *s, const char *req, size_t len, json_t **body);
int srv_route_count_tokens(srv_server *s, const char *req, size_t len, json_t **body);
int srv_route_detokenize(srv_server *s, const char *req, size_t len, json_t **body);
/* /v1/adapters[/NAME] (srv_lora_api.c): GET lists, POST loads from --lora-dir,
 * DELETE unloads; admin: the caller may change the table (unix socket or API key). */
int srv_route_adapters(srv_server *s, const char *method, const char *rest, const char *body_text,
                       size_t len, int admin, json_t **body);
/* POST /v1/embeddings (srv_embed.c): the status; *text (OWNED) is the JSON body, or
 * NULL with status 499 when the client went away. alive is polled while waiting. */
int srv_route_embeddings(srv_server *s, const char *req, size_t len, srv_alive_fn alive,
                         void *actx, char **text, size_t *text_len);
/* /v1/conversations (srv_conv_api.c): one call per request. */
typedef struct {
    const char *method;       /* "GET", "POST", "PUT", "PATCH", "DELETE" */
    const char *rest;         /* the URL path after "/v1/conversations" */
    const char *q, *limit, *offset; /* query arguments or NULL */
    const char *body;
    size_t len;
} srv_conv_call;
/* Returns the status and sets *body (OWNED); attachment (an bytes) gets a file
 * name when the answer is a download (export), else "". st NULL: 503 saying why_off. */
int srv_conv_route(srv_conv_store *st, const char *why_off, const srv_conv_call *c, json_t **body,
                   char *attachment, size_t an);
/* SSD cache (srv_ssd.c): POST /admin/cache/flush, and /stats.ssd_cache (NULL on OOM). */
int srv_route_cache_flush(srv_server *s, json_t **body);
json_t *srv_ssd_stats_json(const eng_stats *st);

#endif
