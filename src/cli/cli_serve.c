/*
 * cli_serve.c — `kiln serve`: resolve the model, bind the port, load the
 * model, start the engine and the HTTP server, print the ready line, and shut
 * down cleanly on SIGINT/SIGTERM (stop accepting, cancel in-flight requests
 * within a bounded time, exit 0).
 *
 * Sampling defaults, highest first: the request, these flags, the model's
 * generation_config.json, then kiln's built-in fallback (temperature 0.7,
 * top_p 1, top_k off, min_p off, repetition penalty off — mlx-bun's choice).
 */
#include "cli/cli.h"
#include "cli/cli_args.h"
#include "cli/cli_hf.h"
#include "engine/eng_engine.h"
#include "kv/kv_pool.h"
#include "kernels/kn_cpu.h"
#include "server/srv.h"
#include "server/srv_toolcall.h"
#include "tokenizer/tok.h"
#include "util/kiln_log.h"
#include "util/plat.h"
#include "weights/wt_config.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *model, *host, *thinking, *api_key, *tool_parser;
    int tool_family; /* srv_tc_family, or -1: detect from the chat template */
    int64_t port, batch, ctx, max_tokens, top_k, max_queue, threads, max_body;
    double temperature, top_p, min_p, prompt_cache, timeout, responses_ttl, responses_store_mib;
    cli_kv_flags kv;
} serve_flags;

/* Fills the sampling defaults: flag → generation_config.json → built-in. */
static srv_sampling_defaults pick_defaults(const serve_flags *f, const cli_flag *flags,
                                           const wt_config *c)
{
    srv_sampling_defaults d = {.temperature = 0.7f, .top_p = 1.0f, .top_k = 0, .min_p = 0.0f,
                               .repetition_penalty = 1.0f};
    if (c->has_gen_temperature) d.temperature = (float)c->gen_temperature;
    if (c->has_gen_top_p) d.top_p = (float)c->gen_top_p;
    if (c->has_gen_top_k) d.top_k = (int32_t)c->gen_top_k;
    if (c->has_gen_min_p) d.min_p = (float)c->gen_min_p;
    if (c->has_gen_repetition_penalty) d.repetition_penalty = (float)c->gen_repetition_penalty;
    if (cli_find(flags, "temperature")->seen) d.temperature = (float)f->temperature;
    if (cli_find(flags, "top-p")->seen) d.top_p = (float)f->top_p;
    if (cli_find(flags, "top-k")->seen) d.top_k = (int32_t)f->top_k;
    if (cli_find(flags, "min-p")->seen) d.min_p = (float)f->min_p;
    return d;
}

static int check_flags(const serve_flags *f, int *thinking)
{
    *thinking = -1;
    if (f->thinking) {
        if (!strcmp(f->thinking, "true") || !strcmp(f->thinking, "1")) *thinking = 1;
        else if (!strcmp(f->thinking, "false") || !strcmp(f->thinking, "0")) *thinking = 0;
        else {
            fprintf(stderr, "kiln serve: --thinking must be true or false, got '%s'\n", f->thinking);
            return 2;
        }
    }
    const char *bad = f->port < 0 || f->port > 65535 ? "--port must be 0..65535"
                      : f->batch < 1 || f->batch > 256 ? "--batch must be 1..256"
                      : f->ctx < 0 ? "--ctx must be >= 0"
                      : f->max_tokens < 0 ? "--max-tokens must be >= 0"
                      : f->temperature < 0 || f->temperature > 2 ? "--temperature must be in [0, 2]"
                      : f->top_p <= 0 || f->top_p > 1 ? "--top-p must be in (0, 1]"
                      : f->top_k < 0 ? "--top-k must be >= 0"
                      : f->min_p < 0 || f->min_p > 1 ? "--min-p must be in [0, 1]"
                      : f->max_queue < 0 ? "--max-queue must be >= 0"
                      : f->threads < 0 ? "--threads must be >= 0"
                      : f->max_body < 1 ? "--max-body must be >= 1"
                      : f->prompt_cache < 0 ? "--prompt-cache must be >= 0"
                      : f->timeout < 0 ? "--timeout must be >= 0"
                                            : NULL;
    if (bad) {
        fprintf(stderr, "kiln serve: %s\n", bad);
        return 2;
    }
    return 0;
}

/* The model folder and the id to serve it under. */
static int pick_model(const char *model, char *dir, size_t n, char *id, size_t id_n)
{
    kiln_err err;
    if (model) {
        if (cli_hf_resolve(model, dir, n, &err)) {
            if (cli_hf_is_repo_id(model) && !plat_is_dir(model)) {
                fprintf(stderr, "kiln serve: %s is not cached; downloading it\n", model);
                if (cli_hf_download(model, 0, dir, n, &err) == KILN_OK) goto named;
            }
            return cli_fail("serve", &err);
        }
    named:;
        const char *base = strrchr(model, '/');
        snprintf(id, id_n, "%s", cli_hf_is_repo_id(model) && !plat_is_dir(model) ? model
                                 : base && base[1] ? base + 1 : model);
        return 0;
    }
    if (cli_hf_find_cached(dir, n, id, id_n, &err) == KILN_OK) {
        fprintf(stderr, "kiln serve: no --model given; using %s from the cache\n", id);
        return 0;
    }
    fprintf(stderr, "kiln serve: no --model given and no model in the Hugging Face cache; "
                    "trying to download %s\n", CLI_HF_DEFAULT_MODEL);
    if (cli_hf_download(CLI_HF_DEFAULT_MODEL, 0, dir, n, &err) == KILN_OK) {
        snprintf(id, id_n, "%s", CLI_HF_DEFAULT_MODEL);
        return 0;
    }
    fprintf(stderr, "kiln serve: %s\n  Give a model folder with --model DIR, or download one "
                    "first with: kiln get %s\n", err.msg, CLI_HF_DEFAULT_MODEL);
    return 1;
}

typedef struct {
    eng_runtime *rt;
    tok_tokenizer *tok;
    eng_engine *eng;
    srv_server *srv;
} serve_state;

static void serve_close(serve_state *st)
{
    srv_quiesce(st->srv);
    srv_stop(st->srv);  /* cancels in flight, waits (bounded), joins HTTP threads */
    eng_engine_stop(st->eng);
    tok_destroy(st->tok);
    eng_runtime_close(st->rt);
}

static int serve_run(const serve_flags *f, const cli_flag *flags, int thinking, sigset_t *sigs)
{
    char dir[4096], id[512];
    int rc = pick_model(f->model, dir, sizeof dir, id, sizeof id);
    if (rc) return rc;
    kiln_err err;
    wt_config cfg;
    if (wt_config_load(dir, &cfg, &err)) return cli_fail("serve", &err);
    srv_config sc = srv_config_default();
    sc.host = f->host;
    sc.port = (int)f->port;
    sc.model_id = id;
    sc.model_dir = dir;
    sc.api_key = f->api_key;
    sc.max_body = (size_t)f->max_body;
    sc.max_tokens = (int32_t)f->max_tokens;
    sc.batch = (int32_t)f->batch;
    sc.max_queue = (int32_t)f->max_queue;
    sc.thinking = thinking;
    sc.tool_parser = f->tool_family;
    sc.responses_ttl_s = f->responses_ttl;
    sc.responses_store_bytes = (size_t)(f->responses_store_mib * 1048576.0);
    sc.defaults = pick_defaults(f, flags, &cfg);
    sc.timeout_s = f->timeout;
    serve_state st = {0};
    /* Bind first: a taken port fails in milliseconds, not after the load. */
    if (srv_start(&sc, &st.srv, &err)) {
        wt_config_free(&cfg);
        return cli_fail("serve", &err);
    }
    eng_runtime_opts o = eng_runtime_opts_default();
    o.n_threads = (int)f->threads;
    o.ctx = (int32_t)f->ctx;
    o.max_seqs = (int32_t)f->batch;
    o.isa = getenv("KILN_ISA");
    kv_format kf;
    if (cli_kv_apply("serve", &f->kv, &o)) {
        wt_config_free(&cfg);
        serve_close(&st);
        return 2;
    }
    if (eng_runtime_kv_format(dir, &cfg, &o, &kf, &err)) {
        wt_config_free(&cfg);
        serve_close(&st);
        return cli_fail("serve", &err);
    }
    if (f->prompt_cache > 0) {
        /* KV bytes per token at the format's true size (the main block class) */
        uint64_t per_tok = kv_format_bytes_per_token(&kf, KV_CLASS_MAIN, (int32_t)cfg.n_kv_heads);
        int32_t ctx = o.ctx > 0 ? o.ctx : cfg.max_pos > 0 && cfg.max_pos < 4096 ? (int32_t)cfg.max_pos : 4096;
        int64_t per_seq = (ctx + o.block_tokens - 1) / o.block_tokens + 1;
        double extra = f->prompt_cache * 1073741824.0 / ((double)per_tok * o.block_tokens);
        o.n_blocks = (int32_t)(per_seq * o.max_seqs + (extra > 1e8 ? 1e8 : extra));
    }
    wt_config_free(&cfg);
    if (eng_runtime_open(dir, &o, &st.rt, &err) || tok_load(dir, &st.tok, &err)) {
        serve_close(&st);
        return cli_fail("serve", &err);
    }
    eng_engine_opts eo = eng_engine_opts_default();
    eo.max_queue = (int32_t)f->max_queue;
    const cli_flag *pc = cli_find(flags, "prompt-cache");
    if (pc && pc->seen && f->prompt_cache == 0) eo.prefix_cache = false; /* --prompt-cache 0: off */
    if (f->prompt_cache > 0) {
        /* the byte cap on cached (unreferenced) prefix blocks */
        double cap = f->prompt_cache * 1073741824.0 / (double)kv_pool_block_bytes(kv_pool_cfg(st.rt->kv));
        kv_pool_set_cache_cap(st.rt->kv, cap > 1e9 ? 1000000000 : (int32_t)cap);
    }
    if (eng_engine_start(st.rt, st.tok, &eo, &st.eng, &err)) {
        serve_close(&st);
        return cli_fail("serve", &err);
    }
    /* ctx is decided by the runtime (model max, 4096 by default). */
    eng_stats es = eng_get_stats(st.eng);
    srv_model m = {.engine = st.eng, .tok = st.tok, .ctx = st.rt->o.ctx, .n_threads = st.rt->o.n_threads};
    if (srv_attach(st.srv, &m, &err)) {
        serve_close(&st);
        return cli_fail("serve", &err);
    }
    printf("kiln: serving %s at http://%s:%d/v1 (threads %d, isa %s, batch %d, ctx %d, KV pool %d "
           "blocks x %d tokens = %.1f MiB, KV %s)\n",
           id, f->host, srv_port(st.srv), st.rt->o.n_threads, kn_isa_name(), (int)f->batch,
           (int)st.rt->o.ctx, (int)es.kv.n_blocks, (int)es.kv_block_tokens,
           (double)es.kv.bytes / 1048576.0, st.rt->kv_desc);
    fflush(stdout);
    int sig = 0;
    sigwait(sigs, &sig);
    KLOG_INFO("srv", "signal=%d: stopping (cancelling requests in flight)", sig);
    serve_close(&st);
    KLOG_INFO("srv", "stopped");
    return 0;
}

int cli_serve(int argc, char **argv)
{
    serve_flags f = {.host = "127.0.0.1", .port = 8080, .batch = 8, .max_queue = 64,
                     .temperature = 0.7, .top_p = 1.0, .max_body = 4 << 20,
                     .responses_ttl = 3600, .responses_store_mib = 64};
    cli_flag flags[] = {
        {"model", CLI_STR, &f.model, "DIR|REPO",
         "model folder or Hugging Face repo id (default: "
         "a cached model, else " CLI_HF_DEFAULT_MODEL ")",
         0},
        {"host", CLI_STR, &f.host, "ADDR", "address to listen on (default 127.0.0.1)", 0},
        {"port", CLI_INT, &f.port, "N", "port (default 8080; 0 = any free port)", 0},
        {"batch", CLI_INT, &f.batch, "N", "sequences decoded at once (default 8)", 0},
        {"ctx", CLI_INT, &f.ctx, "N", "context length per sequence (default: min(model, 4096))", 0},
        {"max-tokens", CLI_INT, &f.max_tokens, "N",
         "cap on generated tokens per request (default: none)", 0},
        {"temperature", CLI_FLOAT, &f.temperature, "T",
         "default temperature (else generation_config, else 0.7)", 0},
        {"top-p", CLI_FLOAT, &f.top_p, "P", "default top_p (else generation_config, else 1)", 0},
        {"top-k", CLI_INT, &f.top_k, "K", "default top_k (else generation_config, else off)", 0},
        {"min-p", CLI_FLOAT, &f.min_p, "M", "default min_p (else generation_config, else off)", 0},
        {"thinking", CLI_STR, &f.thinking, "true|false",
         "default enable_thinking for chat templates", 0},
        {"tool-parser", CLI_STR, &f.tool_parser, "NAME",
         "tool-call format: hermes, qwen3_coder, llama3, mistral, gemma or none (default: from the "
         "chat template)",
         0},
        {"prompt-cache", CLI_FLOAT, &f.prompt_cache, "GIB",
         "KV memory for cached prefixes (added to the pool, and their cap); 0 turns the prefix "
         "cache off",
         0},
        {"api-key", CLI_STR, &f.api_key, "KEY",
         "require this key (Authorization: Bearer or x-api-key)", 0},
        {"max-queue", CLI_INT, &f.max_queue, "N", "requests that may wait before 429 (default 64)",
         0},
        {"threads", CLI_INT, &f.threads, "N", "compute threads (default: all CPUs)", 0},
        {"max-body", CLI_INT, &f.max_body, "BYTES",
         "largest request body (default 4 MiB; else 413)", 0},
        {"responses-ttl", CLI_FLOAT, &f.responses_ttl, "S",
         "seconds a /v1/responses result stays available to previous_response_id (default 3600)",
         0},
        {"responses-store-mib", CLI_FLOAT, &f.responses_store_mib, "MIB",
         "memory for stored /v1/responses conversations, least recently used evicted (default 64)",
         0},
        {"timeout", CLI_FLOAT, &f.timeout, "S", "cancel a request after S seconds (default: none)",
         0},
        CLI_KV_FLAGS(f.kv),
        {0},
    };
    int pr = cli_parse("serve", "Serve a model over an OpenAI-compatible HTTP API.", flags, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    int thinking;
    if (check_flags(&f, &thinking)) return 2;
    f.tool_family = f.tool_parser ? srv_tc_family_from_name(f.tool_parser) : -1;
    if (f.responses_ttl <= 0 || f.responses_store_mib <= 0) {
        fprintf(stderr, "kiln serve: --responses-ttl and --responses-store-mib must be > 0\n");
        return 2;
    }
    if (f.tool_parser && f.tool_family < 0) {
        fprintf(stderr, "kiln serve: --tool-parser must be hermes, qwen3_coder, llama3, mistral, gemma "
                        "or none, got '%s'\n", f.tool_parser);
        return 2;
    }
    /* Block the stop signals in every thread (MHD's and the engine's inherit
     * this mask); the main thread takes them with sigwait. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    return serve_run(&f, flags, thinking, &sigs);
}
