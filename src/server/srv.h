/*
 * srv.h — kiln's HTTP server: OpenAI-compatible routes over one engine.
 *
 *   srv_config c = srv_config_default();  c.port = 8080; c.model_id = "qwen3";
 *   srv_server *s;  srv_start(&c, &s, &err);       // listening; /health says 503
 *   srv_attach(s, &(srv_model){engine, tok, ctx, threads}, &err);  // /health 200
 *   ... wait for a signal ...
 *   srv_quiesce(s);  eng_engine_stop(engine);  srv_stop(s);
 *
 * Routes: POST /v1/chat/completions, POST /v1/completions, POST /v1/messages,
 * POST /v1/messages/count_tokens, POST /v1/responses, GET /v1/models,
 * GET /health, GET /stats, GET /metrics, GET /fit, POST /tokenize, POST /detokenize,
 * POST /v1/embeddings, /v1/conversations[/...] and the chat page at / (docs/server.md,
 * docs/webui.md); POST /admin/lease on the unix socket only. The server sees only
 * engine/eng_engine.h, the tokenizer and the template: never model/ or kv/. Threads: libmicrohttpd
 * runs one thread per connection; each one parses, renders and tokenizes its request, then waits on
 * its engine handle.
 */
#ifndef KILN_SRV_H
#define KILN_SRV_H

#include <stddef.h>
#include <stdint.h>

#include "server/srv_lora.h"
#include "engine/eng_admit.h"
#include "engine/eng_engine.h"
#include "tokenizer/tok.h"

typedef struct srv_server srv_server;

/* Sampling defaults below the request (request → these → built-in). The CLI
 * fills them from its flags, then generation_config.json. */
typedef struct {
    float temperature, top_p, min_p, repetition_penalty;
    int32_t top_k;
} srv_sampling_defaults;

typedef struct {
    const char *host;        /* BORROWED during srv_start; default "127.0.0.1" */
    int port;                /* 0 = any free port (srv_port tells which) */
    const char *model_id;    /* BORROWED during srv_start: the served id */
    const char *model_dir;   /* BORROWED during srv_start: chat template source */
    const char *api_key;     /* BORROWED during srv_start; NULL = no auth */
    size_t max_body;         /* bytes; larger bodies get 413 */
    size_t request_memory;   /* bytes held at once by the requests in flight: bodies as they
                                arrive and the JSON parsed from them (kiln_json.h); past it a
                                request gets 503 + Retry-After (413 alone). 0 = default:
                                srv_request_memory_default(max_body) */
    int32_t ctx;             /* context per sequence (tokens); srv_attach sets the real one */
    int32_t max_tokens;      /* server cap on generated tokens; 0 = none */
    int32_t batch;           /* concurrent sequences (for /stats) */
    int32_t max_queue;       /* waiting requests (for /stats) */
    int n_threads;           /* compute threads (for /stats) */
    int thinking;            /* enable_thinking default: -1 template's, 0 off, 1 on */
    double responses_ttl_s;  /* Responses store: seconds an entry lives (default 3600) */
    size_t responses_store_bytes; /* Responses store cap, bytes (default 64 MiB) */
    int tool_parser;         /* srv_tc_family (srv_toolcall.h); -1 = detect from the template */
    int32_t grammar_ws;      /* constrained JSON: most whitespace bytes between tokens (0 = compact) */
    int32_t grammar_compile_ms; /* CPU time a schema/grammar compile may take (0 = no limit) */
    size_t grammar_cache_bytes; /* compiled grammars kept for reuse (0 = no cache) */
    srv_sampling_defaults defaults;
    unsigned max_connections;        /* connections served at once (idle ones give way past it; a
                                        request beyond it with every slot busy gets 503) */
    unsigned max_connections_per_ip; /* the same per client address (IPv6: per /64); 0 = none */
    double header_timeout_s;         /* a new connection's request headers must be in within this */
    double keepalive_timeout_s;      /* an idle keep-alive connection is closed after this */
    double body_timeout_s;           /* a request body must be in within this of its headers */
    double timeout_s;        /* per-request wall-clock limit; 0 = none (then cancelled) */
    const char *unix_path;   /* BORROWED during srv_start: also serve on this unix-domain
                                socket (mode 0600; a stale socket file is replaced, any other
                                file refused); POST /admin/lease is served only there. NULL = none */
    const char *data_dir;    /* BORROWED during srv_start: where conversations are kept
                                (docs/webui.md); NULL = srv_conv_default_dir, "" = not kept */
    int pooling;             /* eng_pooling forced on /v1/embeddings (--pooling); 0 = the model's */
} srv_config;

/* What srv_attach makes available. */
typedef struct {
    eng_engine *engine;       /* BORROWED: must outlive the server (stop the server first) */
    const tok_tokenizer *tok; /* BORROWED: the same */
    int32_t ctx;              /* the runtime's context per sequence (tokens) */
    int n_threads;            /* compute threads (for /stats) */
    const eng_admit_plan
        *admission;           /* BORROWED during srv_attach (copied): the memory plan
                                 (/stats admission, context_over_budget errors); NULL = none */
    uint64_t kv_budget_bytes; /* --kv-budget (for /stats); 0 = none */
    const char *fit_json;     /* BORROWED during srv_attach (copied): GET /fit body; NULL = 404 */
    uint64_t process_bytes;   /* resident bytes before the model was opened (binary, libraries,
                                 HTTP threads), measured; GET /fit adds it; 0 = unknown */
    const srv_adapter *adapters; /* BORROWED during srv_attach (names copied; the adapters
                                    must outlive the server): LoRA adapters by name */
    int n_adapters;
    const char *default_adapter; /* one of their names: requests that name none use it; NULL = base */
    const mdl_model *model;      /* BORROWED: must outlive the server; adapters load against it */
    const char *lora_dir;        /* BORROWED during srv_attach (copied): POST /v1/adapters reads
                                    only folders inside it; NULL = no hot loads */
    uint64_t lora_hot_bytes;     /* --lora-memory: bytes hot-loaded adapters may hold; 0 = no cap */
} srv_model;

/* API */
srv_config srv_config_default(void);
/* The default request memory cap: 4 x max_body (16 MiB at the default 4 MiB):
 * one largest body with its parsed JSON, or several smaller requests. */
size_t srv_request_memory_default(size_t max_body);
/* Binds and starts listening (a clear KILN_E_IO when the port is taken).
 * Until srv_attach, /health answers 503 and generation routes 503.
 * *out is OWNED by the caller (srv_stop). */
kiln_code srv_start(const srv_config *c, srv_server **out, kiln_err *err);
/* Makes the model available. Loads the chat template from c.model_dir (a
 * model without one serves /v1/completions only). */
kiln_code srv_attach(srv_server *s, const srv_model *m, kiln_err *err);
int srv_port(const srv_server *s);
/* While the model loads: the fraction done (0..1; < 0 unknown), shown by /health. Any thread. */
void srv_set_load_progress(srv_server *s, double fraction);
/* Stops accepting connections; requests in flight continue until the engine
 * ends them (eng_engine_stop cancels them). */
void srv_quiesce(srv_server *s);
/* Ends every connection (in-flight streams get their final frames), joins the
 * threads and frees the server. NULL is a no-op. */
void srv_stop(srv_server *s);

#endif
