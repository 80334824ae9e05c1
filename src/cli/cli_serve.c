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
#include "cli/cli_models.h"
#include "engine/eng_admit.h"
#include "cli/cli_ssd.h"
#include "engine/eng_engine.h"
#include "engine/eng_fit_report.h"
#include "kv/kv_pool.h"
#include "kv/kv_ssd.h"
#include "kernels/kn_cpu.h"
#include "cli/cli_lora.h"
#include "server/srv.h"
#include "server/srv_toolcall.h"
#include "tokenizer/tok.h"
#include "util/kiln_assert.h"
#include "util/kiln_log.h"
#include "util/plat.h"
#include "weights/wt_config.h"
#include "weights/wt_set.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *model, *host, *thinking, *api_key, *tool_parser, *unix_path;
    int tool_family; /* srv_tc_family, or -1: detect from the chat template */
    int64_t port, batch, ctx, max_tokens, top_k, max_queue, threads, max_body;
    double temperature, top_p, min_p, prompt_cache, timeout, responses_ttl, responses_store_mib;
    double request_memory_mib; /* --request-memory; 0 = default (srv_request_memory_default) */
    double memory_budget, kv_budget; /* decimal GB; 0 = none */
    double max_stall_ms;             /* prefill time per step beside streams; < 0 = default */
    int64_t max_conns, max_conns_ip; /* --max-connections, --max-connections-per-ip */
    double header_timeout, keepalive_timeout, body_timeout; /* seconds */
    int32_t env_limit;                                      /* KILN_CONTEXT_LIMIT; 0 = unset */
    const char *ssd_cache;                                  /* --ssd-cache DIR */
    const char *data_dir; /* --data-dir DIR: conversations (NULL = XDG default, "" = none) */
    const char *pooling;  /* --pooling MODE for /v1/embeddings (NULL = the model's) */
    int offline;          /* --offline: never download */
    double ssd_cache_max; /* GiB; 0 = no cap */
    double ssd_queue_mib; /* --ssd-queue-mib; 0 = cli_ssd_queue_bytes' default */
    int64_t gen_ckpt;     /* --generation-checkpoint N; 0 = off */
    int64_t grammar_ws;   /* --grammar-ws N */
    int64_t grammar_compile_ms; /* --grammar-compile-ms N */
    double grammar_cache_mb;    /* --grammar-cache MB */
    const char *spec;      /* --spec off|ngram|draft */
    const char *draft_model; /* --draft-model DIR|REPO */
    int spec_fixed;          /* --spec-fixed: no adaptive length, no cost rule */
    int64_t spec_max_draft, spec_ngram; /* --spec-max-draft N, --spec-ngram N */
    cli_kv_flags kv;
    cli_list lora;              /* --lora NAME=DIR (repeatable) */
    const char *lora_dir;       /* --lora-dir DIR: every adapter folder in it */
    const char *lora_default;   /* --lora-default NAME */
    double lora_memory_mib;     /* --lora-memory MIB: room for adapters loaded while serving */
} serve_flags;

/* Fills the sampling defaults: flag → generation_config.json → built-in. */
static srv_sampling_defaults pick_defaults(const serve_flags *f, const cli_flag *flags,
                                           const wt_config *c)
{
    srv_sampling_defaults d = {
        .temperature = 0.7f, .top_p = 1.0f, .top_k = 0, .min_p = 0.0f, .repetition_penalty = 1.0f};
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
        if (!strcmp(f->thinking, "true") || !strcmp(f->thinking, "1"))
            *thinking = 1;
        else if (!strcmp(f->thinking, "false") || !strcmp(f->thinking, "0"))
            *thinking = 0;
        else {
            fprintf(stderr, "kiln serve: --thinking must be true or false, got '%s'\n",
                    f->thinking);
            return 2;
        }
    }
    const char *bad =
        f->port < 0 || f->port > 65535               ? "--port must be 0..65535"
        : f->batch < 1 || f->batch > 256             ? "--batch must be 1..256"
        : f->ctx < 0                                 ? "--ctx must be >= 0"
        : f->max_tokens < 0                          ? "--max-tokens must be >= 0"
        : f->temperature < 0 || f->temperature > 2   ? "--temperature must be in [0, 2]"
        : f->top_p <= 0 || f->top_p > 1              ? "--top-p must be in (0, 1]"
        : f->top_k < 0                               ? "--top-k must be >= 0"
        : f->min_p < 0 || f->min_p > 1               ? "--min-p must be in [0, 1]"
        : f->max_queue < 0                           ? "--max-queue must be >= 0"
        : f->threads < 0                             ? "--threads must be >= 0"
        : f->max_body < 1                            ? "--max-body must be >= 1"
        : f->prompt_cache < 0                        ? "--prompt-cache must be >= 0"
        : !(f->lora_memory_mib >= 0 && f->lora_memory_mib < 1e9) ? "--lora-memory must be >= 0 (MiB)"
        : f->timeout < 0                             ? "--timeout must be >= 0"
        : f->max_conns < 1 || f->max_conns > 1000000 ? "--max-connections must be 1..1000000"
        : f->max_conns_ip < 0 || f->max_conns_ip > 1000000
            ? "--max-connections-per-ip must be 0..1000000"
        : !(f->header_timeout > 0 && f->header_timeout <= 86400) ||
                !(f->keepalive_timeout > 0 && f->keepalive_timeout <= 86400) ||
                !(f->body_timeout > 0 && f->body_timeout <= 86400)
            ? "--header-timeout, --keepalive-timeout and --body-timeout must be in (0, 86400]"
        : f->memory_budget < 0                     ? "--memory-budget must be > 0 (decimal GB)"
        : f->kv_budget < 0                         ? "--kv-budget must be > 0 (decimal GB)"
        : f->grammar_ws < 0 || f->grammar_ws > 256 ? "--grammar-ws must be 0..256"
        : f->grammar_compile_ms < 0 || f->grammar_compile_ms > 600000
            ? "--grammar-compile-ms must be 0..600000"
        : !(f->grammar_cache_mb >= 0 && f->grammar_cache_mb <= 1048576)
            ? "--grammar-cache must be 0..1048576 (MB)"
            : NULL;
    if (bad) {
        fprintf(stderr, "kiln serve: %s\n", bad);
        return 2;
    }
    return 0;
}

/* The memory plan: context limit and KV pool size (inside --memory-budget
 * when given, narrowed by KILN_CONTEXT_LIMIT). Prints the refusal and returns
 * non-zero when the budget leaves no room for any context. */
static int plan_memory(const serve_flags *f, const char *dir, const char *draft_dir,
                       const wt_config *cfg, const srv_config *sc, const eng_runtime_opts *o,
                       eng_admit_plan *plan)
{
    kiln_err err;
    eng_draft_cost dc = {0};
    if (draft_dir) { /* sized for the largest context: the plan may only shrink it */
        eng_runtime_opts r = eng_runtime_resolve(cfg, o);
        if (eng_draft_cost_of(draft_dir, &r, &dc, &err)) return cli_fail("serve: --draft-model", &err);
    }
    eng_draft_cost mc = {0};
    if (f->spec && strcmp(f->spec, "mtp") == 0) { /* the model's own MTP head, as a drafter */
        eng_runtime_opts r = eng_runtime_resolve(cfg, o);
        if (eng_mtp_cost_of(dir, &r, &mc, &err)) return cli_fail("serve: --spec mtp", &err);
    }
    wt_set *ws;
    if (wt_set_open(dir, &ws, &err)) return cli_fail("serve", &err);
    uint64_t weights = mdl_weights_used_bytes(cfg, ws);
    wt_set_close(ws);
    eng_fit base;
    eng_fit_compute(cfg, weights, o, &base);
    eng_admit_in in = eng_admit_in_default();
    in.budget_bytes = (uint64_t)(f->memory_budget * 1e9);
    in.env_limit = f->env_limit;
    in.ctx_explicit = f->ctx > 0;
    in.draft_fixed_bytes = dc.fixed_bytes + mc.fixed_bytes;
    in.draft_block_bytes = dc.block_bytes + mc.block_bytes;
    /* the server's own memory: the Responses store and the requests' bodies and JSON */
    in.overhead_bytes = eng_admit_overhead_for_dir(
        dir, (uint64_t)sc->responses_store_bytes + sc->request_memory, base.o.max_seqs);
    /* --ssd-cache: the copies its write queue may hold */
    if (f->ssd_cache) in.overhead_bytes += cli_ssd_queue_bytes(f->ssd_queue_mib, in.budget_bytes);
    /* the adapters --lora / --lora-dir will load, from their headers */
    if (cli_loras_bytes(&f->lora, f->lora_dir, &in.adapter_bytes, &err))
        return cli_fail("serve", &err);
    in.adapter_bytes += (uint64_t)(f->lora_memory_mib * 1048576.0); /* hot loads' room */
    if (f->prompt_cache > 0) {
        /* --prompt-cache GiB of blocks beyond batch x ctx, at the KV format's bytes */
        double extra = f->prompt_cache * 1073741824.0 /
                       ((double)base.kv_bytes_per_token * (double)base.o.block_tokens);
        in.extra_blocks = (int32_t)(extra > 1e8 ? 1e8 : extra);
    }
    if (eng_admit_compute(cfg, weights, o, &in, plan, &err)) {
        fprintf(stderr, "kiln serve: %s\n  Raise --memory-budget, or lower --batch / --threads.\n",
                err.msg);
        return 1;
    }
    if (plan->budget_bytes)
        KLOG_INFO("admit",
                  "memory_budget=%llu weights=%llu fixed=%llu usable=%llu kv_blocks=%d "
                  "max_safe_context=%d enforced=%d source=%s",
                  (unsigned long long)plan->budget_bytes, (unsigned long long)weights,
                  (unsigned long long)plan->fixed_bytes, (unsigned long long)plan->usable_bytes,
                  (int)plan->n_blocks, (int)plan->max_safe_context, (int)plan->enforced_context,
                  eng_limit_source_name(plan->source));
    return 0;
}

typedef struct {
    eng_runtime *rt;
    tok_tokenizer *tok;
    eng_engine *eng;
    srv_server *srv;
    kv_ssd *ssd;
    cli_loras loras;
    eng_draft *draft;
    eng_mtp *mtp;
} serve_state;

static void serve_close(serve_state *st)
{
    srv_quiesce(st->srv);
    srv_stop(st->srv);        /* cancels in flight, waits (bounded), joins HTTP threads */
    if (st->ssd && st->eng) { /* SSD: what is published goes to disk before we go */
        eng_flush_result fr;
        eng_cache_flush(st->eng, 10000, &fr, NULL);
        KLOG_INFO("ssd", "shutdown flush durable=%d queued=%llu written=%llu pending=%llu",
                  (int)fr.durable, (unsigned long long)fr.queued, (unsigned long long)fr.flushed,
                  (unsigned long long)fr.pending);
    }
    eng_engine_stop(st->eng);
    cli_loras_free(&st->loras); /* after the engine: no request runs with them any more */
    eng_draft_close(st->draft); /* before the runtime: it runs on the target's threads */
    eng_mtp_close(st->mtp);
    kv_ssd_close(st->ssd, 5.0);
    tok_destroy(st->tok);
    eng_runtime_close(st->rt);
}

static void load_progress(void *user, double fraction)
{
    srv_set_load_progress(user, fraction);
}

static int serve_run(const serve_flags *f, const cli_flag *flags, int thinking, sigset_t *sigs)
{
    char dir[4096], id[512], ddir[4096], did[512];
    int rc = cli_pick_model("serve", f->model, f->offline, dir, sizeof dir, id, sizeof id);
    if (rc) return rc;
    if (f->draft_model &&
        (rc = cli_pick_model("serve", f->draft_model, f->offline, ddir, sizeof ddir, did, sizeof did)))
        return rc;
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
    sc.grammar_ws = (int32_t)f->grammar_ws;
    sc.grammar_compile_ms = (int32_t)f->grammar_compile_ms;
    sc.grammar_cache_bytes = (size_t)(f->grammar_cache_mb * 1048576.0);
    sc.responses_ttl_s = f->responses_ttl;
    sc.responses_store_bytes = (size_t)(f->responses_store_mib * 1048576.0);
    sc.request_memory = f->request_memory_mib > 0
                            ? (size_t)(f->request_memory_mib * 1048576.0)
                            : srv_request_memory_default(sc.max_body);
    sc.defaults = pick_defaults(f, flags, &cfg);
    sc.timeout_s = f->timeout;
    sc.unix_path = f->unix_path;
    sc.max_connections = (unsigned)f->max_conns;
    sc.max_connections_per_ip = (unsigned)f->max_conns_ip;
    sc.header_timeout_s = f->header_timeout;
    sc.keepalive_timeout_s = f->keepalive_timeout;
    sc.body_timeout_s = f->body_timeout;
    sc.data_dir = f->data_dir;
    eng_pooling pool = ENG_POOL_NONE;
    if (f->pooling && eng_pool_parse(f->pooling, &pool) != 0) {
        wt_config_free(&cfg);
        fprintf(stderr,
                "kiln serve: --pooling must be mean, cls, last, max or mean_sqrt_len, got '%s'\n",
                f->pooling);
        return 2;
    }
    sc.pooling = (int)pool;
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
    kv_format kf; /* lives as long as the server: o.kv_fmt points here */
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
    o.kv_fmt = &kf; /* the plan and the runtime size KV at the format's true bytes */
    /* What the process holds before the model: /fit reports it beside the plan,
     * which covers only what the model adds (weights, KV, scratch). */
    uint64_t process_bytes = plat_rss_bytes();
    eng_admit_plan plan;
    rc = plan_memory(f, dir, f->draft_model ? ddir : NULL, &cfg, &sc, &o, &plan);
    wt_config_free(&cfg);
    if (rc) {
        serve_close(&st);
        return rc;
    }
    o.ctx = plan.ctx;           /* the enforced context limit */
    o.n_blocks = plan.n_blocks; /* the KV pool, inside --memory-budget when given */
    cli_warm_weights(dir, id, load_progress, st.srv); /* progress bar; /health says how far */
    if (eng_runtime_open(dir, &o, &st.rt, &err) || tok_load(dir, &st.tok, &err)) {
        serve_close(&st);
        return cli_fail("serve", &err);
    }
    if (cli_loras_load(st.rt->model, &f->lora, f->lora_dir, &st.loras, &err)) {
        serve_close(&st);
        return cli_fail("serve", &err);
    }
    /* the draft model: its own KV pool, one block per target block (counted by the plan) */
    if (f->draft_model && eng_draft_open(ddir, st.rt, st.tok, plan.n_blocks, &st.draft, &err)) {
        serve_close(&st);
        return cli_fail("serve: --draft-model", &err);
    }
    eng_engine_opts eo = eng_engine_opts_default();
    eo.max_queue = (int32_t)f->max_queue;
    eo.draft = st.draft;
    if (st.draft) eo.spec.method = ENG_SPEC_DRAFT; /* the default with a draft model; --spec wins */
    if (f->max_stall_ms >= 0) eo.max_stall_s = f->max_stall_ms / 1000.0;
    eo.kv_budget_bytes = (uint64_t)(f->kv_budget * 1e9);
    eo.kv_bytes_per_token = plan.fit.kv_bytes_per_token;
    if (f->spec && eng_spec_method_parse(f->spec, &eo.spec.method, &err) != KILN_OK) {
        serve_close(&st);
        return cli_fail("serve", &err);
    }
    /* --spec mtp: the model's own MTP head (its weights, scratch and one-layer pool are in
     * the plan like a draft model's: eng_mtp_cost_of) */
    if (eo.spec.method == ENG_SPEC_MTP && eng_mtp_open(dir, st.rt, &st.mtp, &err)) {
        serve_close(&st);
        return cli_fail("serve: --spec mtp", &err);
    }
    eo.mtp = st.mtp;
    eo.spec.max_draft = (int32_t)f->spec_max_draft;
    eo.spec.adaptive = !f->spec_fixed;
    eo.spec.ngram_max = (int32_t)f->spec_ngram;
    if (eo.spec.ngram_min > eo.spec.ngram_max) eo.spec.ngram_min = eo.spec.ngram_max;
    if (f->ssd_cache) {
        uint64_t qb = cli_ssd_queue_bytes(f->ssd_queue_mib, (uint64_t)(f->memory_budget * 1e9));
        if (cli_ssd_open(f->ssd_cache, f->ssd_cache_max, qb, dir, st.rt, f->gen_ckpt > 0, &st.ssd,
                         &err)) {
            serve_close(&st);
            return cli_fail("serve", &err);
        }
        eo.ssd = st.ssd;
        const char *wb = getenv("KILN_SSD_WRITEBEHIND");
        eo.ssd_writebehind = !(wb && !strcmp(wb, "0"));
        eo.ckpt_every = (int32_t)f->gen_ckpt;
        const char *ck = getenv("KILN_CKPT_CANCELLED_KEEP_S");
        if (ck && *ck) eo.ckpt_cancel_keep_s = atof(ck);
    }
    const cli_flag *pc = cli_find(flags, "prompt-cache");
    if (pc && pc->seen && f->prompt_cache == 0) eo.prefix_cache = false; /* --prompt-cache 0: off */
    if (f->prompt_cache > 0) {
        /* the byte cap on cached (unreferenced) prefix blocks */
        double cap =
            f->prompt_cache * 1073741824.0 / (double)kv_pool_block_bytes(kv_pool_cfg(st.rt->kv));
        kv_pool_set_cache_cap(st.rt->kv, cap > 1e9 ? 1000000000 : (int32_t)cap);
    }
    if (eng_engine_start(st.rt, st.tok, &eo, &st.eng, &err)) {
        serve_close(&st);
        return cli_fail("serve", &err);
    }
    /* ctx is decided by the runtime (model max, 4096 by default). */
    eng_stats es = eng_get_stats(st.eng);
    /* GET /fit: the plan of the runtime as opened, in `kiln fit --json`'s words */
    KILN_ASSERT(st.rt->o.ctx == plan.ctx && st.rt->o.n_blocks == plan.n_blocks);
    char *fit_json = eng_fit_report_json(&plan.fit, &plan, 0);
    srv_model m = {.engine = st.eng,
                   .tok = st.tok,
                   .ctx = st.rt->o.ctx,
                   .n_threads = st.rt->o.n_threads,
                   .admission = &plan,
                   .kv_budget_bytes = eo.kv_budget_bytes,
                   .fit_json = fit_json,
                   .process_bytes = process_bytes,
                   .adapters = st.loras.ads,
                   .n_adapters = st.loras.n,
                   .default_adapter = f->lora_default,
                   .model = st.rt->model,
                   .lora_dir = f->lora_dir,
                   /* with a budget, hot loads get only the room the plan kept for them */
                   .lora_hot_bytes = f->lora_memory_mib > 0
                                         ? (uint64_t)(f->lora_memory_mib * 1048576.0)
                                         : (f->memory_budget > 0 ? 1 : 0)};
    int arc = srv_attach(st.srv, &m, &err);
    free(fit_json);
    if (arc) {
        serve_close(&st);
        return cli_fail("serve", &err);
    }
    printf("kiln: serving %s at http://%s:%d/v1 (threads %d, isa %s, matmul %s, batch %d, ctx %d, "
           "KV pool %d "
           "blocks x %d tokens = %.1f MiB, KV %s)\n",
           id, f->host, srv_port(st.srv), st.rt->o.n_threads, kn_isa_name(), kn_matmul_mode(),
           (int)f->batch, (int)st.rt->o.ctx, (int)es.kv.n_blocks, (int)es.kv_block_tokens,
           (double)es.kv.bytes / 1048576.0, st.rt->kv_desc);
    printf("kiln: chat page at http://%s:%d/\n", f->host, srv_port(st.srv));
    if (f->unix_path) printf("kiln: also serving on unix:%s\n", f->unix_path);
    for (int i = 0; i < st.loras.n; i++) {
        mdl_lora_info li = mdl_lora_get_info(st.loras.ads[i].lora);
        printf("kiln: adapter %s%s (%s, rank %d, scale %g, %s; %.1f MiB)\n", st.loras.ads[i].name,
               f->lora_default && !strcmp(f->lora_default, st.loras.ads[i].name) ? " [default]" : "",
               li.format == MDL_LORA_PEFT ? "peft" : "mlx-lm", (int)li.rank, (double)li.scale,
               li.targets, li.bytes / 1048576.0);
    }
    if (st.draft) {
        eng_draft_info di = eng_draft_get_info(st.draft);
        printf("kiln: draft model %s (%s, %lld layers, %.1f MiB weights; KV pool %d blocks = %.1f "
               "MiB); default speculative method: %s\n",
               did, di.arch, (long long)di.layers, (double)di.weights_bytes / 1048576.0,
               (int)di.kv.n_blocks, (double)di.kv_bytes / 1048576.0,
               eng_spec_method_name(eo.spec.method));
    }
    if (plan.budget_bytes)
        printf("kiln: memory budget %.3f GB: max safe context %d tokens, enforced %d (%s), %.1f "
               "MiB usable for KV\n",
               (double)plan.budget_bytes / 1e9, (int)plan.max_safe_context, (int)plan.ctx,
               eng_limit_source_name(plan.source), (double)plan.usable_bytes / 1048576.0);
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
    serve_flags f = {.host = "127.0.0.1",
                     .port = 8080,
                     .batch = 8,
                     .max_queue = 64,
                     .temperature = 0.7,
                     .top_p = 1.0,
                     .max_body = 4 << 20,
                     .responses_ttl = 3600,
                     .responses_store_mib = 64,
                     .max_stall_ms = -1,
                     .grammar_ws = 20,
                     .grammar_compile_ms = 500,
                     .grammar_cache_mb = 64,
                     .spec_max_draft = 4,
                     .spec_ngram = 3};
    srv_config dc = srv_config_default();
    f.max_conns = dc.max_connections;
    f.max_conns_ip = dc.max_connections_per_ip;
    f.header_timeout = dc.header_timeout_s;
    f.keepalive_timeout = dc.keepalive_timeout_s;
    f.body_timeout = dc.body_timeout_s;
    cli_flag flags[] = {
        {"model", CLI_STR, &f.model, "DIR|REPO",
         "model folder or Hugging Face repo id, downloaded when not cached (default: the "
         "built-in " CLI_DEFAULT_MODEL_NAME ")",
         0},
        {"offline", CLI_BOOL, &f.offline, NULL,
         "never download: a repo id must already be in the cache (also HF_HUB_OFFLINE=1)", 0},
        {"lora", CLI_LIST, &f.lora, "NAME=DIR",
         "load a LoRA adapter (PEFT or mlx-lm folder) served as model NAME or BASE:NAME; "
         "repeatable (docs/lora.md)", 0},
        {"lora-dir", CLI_STR, &f.lora_dir, "DIR",
         "load every adapter folder under DIR, each named after its folder", 0},
        {"lora-default", CLI_STR, &f.lora_default, "NAME",
         "the adapter requests get when they name none (default: the base model)", 0},
        {"lora-memory", CLI_FLOAT, &f.lora_memory_mib, "MIB",
         "memory for adapters loaded while serving (POST /v1/adapters, from --lora-dir): counted "
         "in --memory-budget's plan and a cap on such loads (default 0: no cap without a budget, "
         "no hot loads with one)",
         0},
        {"data-dir", CLI_STR, &f.data_dir, "DIR",
         "where the chat page's conversations are kept (default $XDG_DATA_HOME/kiln, else "
         "~/.local/share/kiln; '' = not kept)",
         0},
        {"pooling", CLI_STR, &f.pooling, "MODE",
         "/v1/embeddings pooling: mean, cls, last, max, mean_sqrt_len (default: the model's "
         "modules.json, else last)",
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
        {"request-memory", CLI_FLOAT, &f.request_memory_mib, "MIB",
         "memory for the bodies, parsed JSON and chat template renders of the requests in flight, inside --memory-budget; "
         "past it 503 + Retry-After (default 4 x --max-body: 16)",
         0},
        {"timeout", CLI_FLOAT, &f.timeout, "S", "cancel a request after S seconds (default: none)",
         0},
        {"max-connections", CLI_INT, &f.max_conns, "N",
         "connections served at once; past it idle ones are closed, else 503 (default 1024)", 0},
        {"max-connections-per-ip", CLI_INT, &f.max_conns_ip, "N",
         "the same per client address, IPv6 per /64 (default 256; 0 = no cap)", 0},
        {"header-timeout", CLI_FLOAT, &f.header_timeout, "S",
         "a new connection must send its request headers within S seconds (default 15)", 0},
        {"keepalive-timeout", CLI_FLOAT, &f.keepalive_timeout, "S",
         "close a keep-alive connection idle for S seconds (default 30)", 0},
        {"body-timeout", CLI_FLOAT, &f.body_timeout, "S",
         "a request body must arrive within S seconds of its headers (default 60)", 0},
        {"unix", CLI_STR, &f.unix_path, "PATH",
         "also serve the API on this unix-domain socket (mode 0600), with POST /admin/lease", 0},
        {"memory-budget", CLI_FLOAT, &f.memory_budget, "GB",
         "process memory budget (decimal GB): KV pool and scratch sized inside it, its max safe "
         "context "
         "enforced (default: none)",
         0},
        {"kv-budget", CLI_FLOAT, &f.kv_budget, "GB",
         "cap on the running requests' projected KV (prompt + max_tokens); joiners over it wait "
         "(default: none)",
         0},
        {"max-stall-ms", CLI_FLOAT, &f.max_stall_ms, "MS",
         "while streams decode, prefill at most about this much work per step (default 1000; 0 = "
         "whole chunks)",
         0},
        {"ssd-cache", CLI_STR, &f.ssd_cache, "DIR",
         "persist KV blocks of cached prefixes in DIR (survives restarts; one server per DIR)", 0},
        {"ssd-cache-max", CLI_FLOAT, &f.ssd_cache_max, "GIB",
         "size cap of --ssd-cache, least recently used evicted (default: none)", 0},
        {"ssd-queue-mib", CLI_FLOAT, &f.ssd_queue_mib, "MIB",
         "memory for --ssd-cache's write queue (copies waiting for the disk; past it the oldest "
         "are dropped), inside --memory-budget (default 2048, or 1/16 of --memory-budget within "
         "32..2048)",
         0},
        {"generation-checkpoint", CLI_INT, &f.gen_ckpt, "N",
         "persist each generation every N tokens in --ssd-cache; an identical retried request "
         "resumes after a crash (default: off)",
         0},
        {"grammar-ws", CLI_INT, &f.grammar_ws, "N",
         "constrained JSON (response_format, tool calls): most whitespace bytes between two "
         "tokens (default 20; 0 = compact JSON)", 0},
        {"grammar-compile-ms", CLI_INT, &f.grammar_compile_ms, "N",
         "CPU time one schema/grammar compile may take before the request gets a 400 "
         "(default 500; 0 = no limit)",
         0},
        {"grammar-cache", CLI_FLOAT, &f.grammar_cache_mb, "MB",
         "compiled schemas/grammars kept for reuse by identical requests, least recently used "
         "evicted (default 64; 0 = off)",
         0},
        {"spec", CLI_STR, &f.spec, "off|ngram|draft|mtp",
         "speculative decoding by default (per request: \"speculative\"); ngram drafts from the "
         "prompt and output, draft from --draft-model, mtp from the model's own "
         "multi-token-prediction head (Qwen3.5 mtp.*); never changes the output (default off, "
         "draft with --draft-model)",
         0},
        {"draft-model", CLI_STR, &f.draft_model, "DIR|REPO",
         "a small model with the same tokenizer that drafts tokens for the model to verify "
         "(--spec draft; its own KV pool, counted by --memory-budget)",
         0},
        {"spec-max-draft", CLI_INT, &f.spec_max_draft, "N",
         "most draft tokens one sequence verifies per step (1..16, default 4)", 0},
        {"spec-fixed", CLI_BOOL, &f.spec_fixed, NULL,
         "every drafting row drafts --spec-max-draft tokens each step: no adaptive length and no "
         "step cost rule (measurements and tests; output unchanged)",
         0},
        {"spec-ngram", CLI_INT, &f.spec_ngram, "N",
         "longest suffix the n-gram drafter matches, tried down to 1 (default 3)", 0},
        CLI_KV_FLAGS(f.kv),
        {0},
    };
    int pr =
        cli_parse("serve", "Serve a model over an OpenAI-compatible HTTP API.", flags, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    int thinking;
    if (check_flags(&f, &thinking)) return 2;
    const cli_flag *mb = cli_find(flags, "memory-budget"), *kb = cli_find(flags, "kv-budget");
    const cli_flag *ms = cli_find(flags, "max-stall-ms");
    if (ms->seen && !(f.max_stall_ms >= 0 && f.max_stall_ms <= 3.6e6)) {
        fprintf(stderr, "kiln serve: --max-stall-ms must be in [0, 3600000]\n");
        return 2;
    }
    if ((mb->seen && f.memory_budget <= 0) || (kb->seen && f.kv_budget <= 0)) {
        fprintf(stderr, "kiln serve: --memory-budget and --kv-budget must be > 0 (decimal GB)\n");
        return 2;
    }
    kiln_err lerr;
    if (eng_admit_parse_limit(getenv("KILN_CONTEXT_LIMIT"), &f.env_limit, &lerr)) {
        fprintf(stderr, "kiln serve: %s\n", lerr.msg);
        return 2;
    }
    f.tool_family = f.tool_parser ? srv_tc_family_from_name(f.tool_parser) : -1;
    if (f.gen_ckpt < 0 || f.gen_ckpt > 1000000 || (f.gen_ckpt > 0 && !f.ssd_cache)) {
        fprintf(
            stderr,
            "kiln serve: --generation-checkpoint N needs --ssd-cache DIR and 1 <= N <= 1000000\n");
        return 2;
    }
    if (f.ssd_cache_max < 0 || (f.ssd_cache_max > 0 && !f.ssd_cache)) {
        fprintf(stderr, "kiln serve: --ssd-cache-max needs --ssd-cache and must be >= 0\n");
        return 2;
    }
    if (f.ssd_queue_mib < 0 || (f.ssd_queue_mib > 0 && !f.ssd_cache) ||
        (f.ssd_queue_mib > 0 && f.ssd_queue_mib < 1)) {
        fprintf(stderr, "kiln serve: --ssd-queue-mib needs --ssd-cache and must be >= 1\n");
        return 2;
    }
    if (f.request_memory_mib < 0 ||
        (f.request_memory_mib > 0 && f.request_memory_mib * 1048576.0 < (double)f.max_body + 1)) {
        fprintf(stderr, "kiln serve: --request-memory must hold one body of --max-body (%lld "
                        "bytes)\n",
                (long long)f.max_body);
        return 2;
    }
    if (f.spec_max_draft < 1 || f.spec_max_draft > ENG_SPEC_MAX_DRAFT || f.spec_ngram < 1 ||
        f.spec_ngram > 64) {
        fprintf(stderr, "kiln serve: --spec-max-draft must be in 1..%d and --spec-ngram in 1..64\n",
                ENG_SPEC_MAX_DRAFT);
        return 2;
    }
    eng_spec_method spec_m;
    if (f.spec && eng_spec_method_parse(f.spec, &spec_m, &lerr)) {
        fprintf(stderr, "kiln serve: --spec: %s\n", lerr.msg);
        return 2;
    }
    if (f.spec && spec_m == ENG_SPEC_DRAFT && !f.draft_model) {
        fprintf(stderr, "kiln serve: --spec draft needs --draft-model DIR\n");
        return 2;
    }
    if (f.responses_ttl <= 0 || f.responses_store_mib <= 0) {
        fprintf(stderr, "kiln serve: --responses-ttl and --responses-store-mib must be > 0\n");
        return 2;
    }
    if (f.tool_parser && f.tool_family < 0) {
        fprintf(stderr,
                "kiln serve: --tool-parser must be hermes, qwen3_coder, llama3, mistral, gemma "
                "or none, got '%s'\n",
                f.tool_parser);
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
