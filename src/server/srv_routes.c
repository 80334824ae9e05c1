/*
 * srv_routes.c — the routes that do not generate: /v1/models, /health,
 * /stats, /metrics, /tokenize, /detokenize, /v1/messages/count_tokens. Each returns an HTTP status
 * and a body; srv_http.c sends it. Threads: any HTTP thread; reads the engine through eng_get_stats
 * only.
 */
#include "server/srv_int.h"
#include "server/srv_anthropic.h"
#include "server/srv_json.h"
#include "util/kiln_json.h"
#include "util/plat.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static int fail(json_t **body, int kind, const char *param, const char *msg)
{
    srv_error e = srv_error_make(kind, param, "%s", msg);
    *body = srv_error_json(&e);
    return srv_error_status(kind);
}

static int fail_err(json_t **body, const kiln_err *err, const char *param)
{
    srv_error e = srv_error_from(err, param);
    *body = srv_error_json(&e);
    return srv_error_status(e.kind);
}

int srv_route_models(srv_server *s, json_t **body)
{
    time_t created = s->t_created; /* one value: list and retrieve agree to the second */
    *body = json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:i}]}", "object", "list", "data", "id",
                      s->model_id, "object", "model", "created", (json_int_t)created, "owned_by",
                      "kiln", "max_model_len", (int)s->cfg.ctx);
    /* what the served model can do (the chat page picks chat or completion mode from it) */
    json_t *caps = json_array(), *m = *body ? json_array_get(json_object_get(*body, "data"), 0) : NULL;
    if (caps && m) {
        json_array_append_new(caps, json_string("completion"));
        if (s->chat) json_array_append_new(caps, json_string("chat"));
        if (s->chat && s->tool_family != SRV_TC_NONE) json_array_append_new(caps, json_string("tools"));
        if (!s->embed.unsupported[0]) json_array_append_new(caps, json_string("embeddings"));
        json_object_set_new(m, "capabilities", caps);
        caps = NULL;
    }
    if (*body) /* LoRA adapters, each its own model (docs/lora.md) */
        srv_lora_models(&s->lora, s->model_id, (json_int_t)created, (int)s->cfg.ctx,
                        json_object_get(*body, "data"));
    json_decref(caps);
    return 200;
}

int srv_route_model(srv_server *s, const char *id, json_t **body)
{
    size_t n = strlen(id);
    if (n && id[n - 1] == '/') n--;
    json_t *list = NULL;
    int status = srv_route_models(s, &list);
    json_t *data = json_object_get(list, "data"), *m;
    /* an adapter is also "BASE:NAME", as requests may name it (docs/lora.md) */
    const char *key = id;
    size_t kn = n, bl = strlen(s->model_id);
    if (n > bl + 1 && !memcmp(id, s->model_id, bl) && id[bl] == ':') key = id + bl + 1, kn = n - bl - 1;
    size_t i;
    *body = NULL;
    for (int pass = 0; pass < 2 && !*body; pass++) /* the id as given first, then as BASE:NAME */
        json_array_foreach(data, i, m) {
            const char *mid = json_string_value(json_object_get(m, "id"));
            const char *k = pass ? key : id;
            size_t kl = pass ? kn : n;
            if (mid && strlen(mid) == kl && !memcmp(mid, k, kl) && (!pass || i > 0)) {
                *body = json_incref(m);
                break;
            }
        }
    json_decref(list);
    if (*body || status != 200) return *body ? 200 : 500;
    kiln_err err;
    kiln_fail(&err, KILN_E_NOT_FOUND, "The model '%.*s' does not exist (GET /v1/models lists the served model "
              "and its adapters)", (int)(n > 200 ? 200 : n), id);
    return fail_err(body, &err, "model");
}

int srv_route_health(srv_server *s, json_t **body)
{
    if (atomic_load(&s->stopping)) {
        *body = json_pack("{s:s}", "status", "stopping");
        return 503;
    }
    if (!atomic_load(&s->engine)) {
        int pm = atomic_load(&s->load_permille);
        *body = pm >= 0 ? json_pack("{s:s, s:s, s:f}", "status", "loading", "model", s->model_id,
                                    "progress", pm / 1000.0)
                        : json_pack("{s:s, s:s}", "status", "loading", "model", s->model_id);
        return 503;
    }
    *body = json_pack("{s:s, s:s}", "status", "ok", "model", s->model_id);
    return 200;
}

static json_t *bytes_or_null(uint64_t b)
{
    return b ? json_integer((json_int_t)b) : json_null();
}

/* The memory-admission numbers (docs/server.md, Memory admission): a new
 * object (OWNED by the caller), merged into /stats "admission". */
static json_t *admission_json(const srv_server *s, const eng_stats *st)
{
    const eng_admit_plan *a = &s->adm;
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "max_safe_context",
                        json_integer(a->ctx ? a->max_safe_context : s->cfg.ctx));
    json_object_set_new(o, "enforced_context_tokens",
                        a->enforced_context ? json_integer(a->enforced_context) : json_null());
    json_object_set_new(o, "context_limit_source", json_string(eng_limit_source_name(a->source)));
    json_object_set_new(o, "memory_budget_bytes", bytes_or_null(a->budget_bytes));
    json_object_set_new(o, "kv_budget_bytes", bytes_or_null(s->kv_budget_bytes));
    json_object_set_new(o, "weights_bytes", json_integer((json_int_t)a->fit.weights_bytes));
    json_object_set_new(o, "usable_bytes",
                        a->budget_bytes ? json_integer((json_int_t)a->usable_bytes) : json_null());
    json_object_set_new(o, "overhead_bytes", json_integer((json_int_t)a->overhead_bytes));
    json_object_set_new(o, "adapter_bytes", json_integer((json_int_t)a->adapter_bytes));
    json_object_set_new(o, "kv_bytes_per_token",
                        json_integer((json_int_t)a->fit.kv_bytes_per_token));
    json_object_set_new(o, "kv_projected_bytes", json_integer((json_int_t)st->kv_projected_bytes));
    json_object_set_new(o, "kv_budget_waits", json_integer((json_int_t)st->kv_budget_waits));
    return o;
}

int srv_route_fit(srv_server *s, json_t **body)
{
    if (!atomic_load(&s->engine))
        return fail(body, SRV_E_LOADING, NULL, "the model is still loading");
    if (!s->fit) return fail(body, KILN_E_NOT_FOUND, NULL, "no memory plan for this server");
    *body = json_incref(s->fit);
    return 200;
}

/* /stats connections: the table's gauges, caps and why connections were closed. */
static json_t *conns_json(srv_server *s)
{
    srv_conns_stats c = srv_conns_get_stats(s->conns);
    srv_conns_cfg cfg = srv_conns_get_cfg(s->conns);
    return json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:I}", "open",
        (json_int_t)c.open, "waiting", (json_int_t)c.waiting, "busy", (json_int_t)c.busy, "max",
        (json_int_t)cfg.max_total, "max_per_ip", (json_int_t)cfg.max_per_addr, "header_timeout_s",
        cfg.header_timeout_s, "keepalive_timeout_s", cfg.keepalive_s, "body_timeout_s",
        cfg.body_timeout_s, "accepted", (json_int_t)c.accepted, "closed_header_timeout",
        (json_int_t)c.closed_header, "closed_keepalive_timeout", (json_int_t)c.closed_keepalive,
        "closed_body_timeout", (json_int_t)c.closed_body, "evicted_idle", (json_int_t)c.evicted,
        "refused", (json_int_t)(c.refused_total + c.refused_addr));
}

int srv_route_stats(srv_server *s, json_t **body)
{
    eng_engine *e = atomic_load(&s->engine);
    if (!e) return fail(body, SRV_E_LOADING, NULL, "the model is still loading");
    eng_stats st = eng_get_stats(e);
    double per_tok = (double)st.kv_bytes_per_token;
    pthread_mutex_lock(&s->mu);
    int in_flight = s->n_active;
    pthread_mutex_unlock(&s->mu);
    json_t *j = json_pack(
        "{s:s, s:f, s:{s:i, s:i, s:i, s:i}, s:{s:i, s:i, s:i, s:i, s:i, s:I}, "
        "s:{s:I, s:I, s:I, s:I}, s:{s:i, s:i, s:I, s:I, s:i}, "
        "s:{s:I, s:I, s:I, s:I}, s:{s:I, s:I, s:I}, s:{s:I, s:I, s:I, s:f}}",
        "model", s->model_id, "uptime_s", plat_now() - s->t_start,
        "batch", "configured", (int)s->cfg.batch, "active", (int)st.running, "queued", (int)st.waiting,
        "http_in_flight", in_flight,
        "kv", "blocks_total", (int)st.kv.n_blocks, "blocks_used", (int)st.kv.n_active,
        "blocks_cached", (int)st.kv.n_cached, "blocks_free", (int)st.kv.n_free, "block_tokens",
        (int)st.kv_block_tokens, "bytes", (json_int_t)st.kv.bytes,
        "prefix_cache", "hits", (json_int_t)st.kv.hits, "misses", (json_int_t)st.kv.misses,
        "hit_tokens", (json_int_t)st.cached_tokens, "hit_bytes",
        (json_int_t)((double)st.cached_tokens * per_tok),
        "admission", "max_batch", (int)s->cfg.batch, "max_queue", (int)s->cfg.max_queue,
        "ctx", (json_int_t)s->cfg.ctx, "max_tokens", (json_int_t)s->cfg.max_tokens, "threads",
        s->cfg.n_threads,
        "requests", "total", (json_int_t)st.requests_total, "finished",
        (json_int_t)st.requests_finished, "cancelled", (json_int_t)st.requests_cancelled, "failed",
        (json_int_t)st.requests_failed,
        "tokens", "prompt", (json_int_t)st.prompt_tokens, "completion",
        (json_int_t)st.completion_tokens, "cached", (json_int_t)st.cached_tokens,
        "engine", "steps", (json_int_t)st.steps, "step_tokens", (json_int_t)st.step_tokens,
        "preemptions", (json_int_t)st.preemptions, "busy_s", st.busy_s);
    if (j) {
        json_t *ej = json_object_get(j, "engine");
        json_object_set_new(ej, "leases", json_integer(st.leases));
        json_object_set_new(ej, "isa", json_string(st.isa ? st.isa : ""));
        json_object_set_new(ej, "matmul", json_string(st.matmul ? st.matmul : ""));
        /* constrained decoding (docs/structured-output.md) */
        gr_cache_stats gc = gr_cache_get_stats(s->gcache);
        json_object_set_new(
            ej, "grammar",
            json_pack("{s:I, s:I, s:f, s:f, s:I, s:{s:I, s:I, s:I, s:I, s:I, s:I}}", "requests",
                      (json_int_t)st.grammar_requests, "masks", (json_int_t)st.grammar.masks,
                      "mask_s", st.grammar.mask_s, "wait_s", st.grammar.wait_s, "budget_redraws",
                      (json_int_t)st.grammar.budget_redraws, "cache", "entries",
                      (json_int_t)gc.entries, "bytes", (json_int_t)gc.bytes, "max_bytes",
                      (json_int_t)gc.max_bytes, "hits", (json_int_t)gc.hits, "misses",
                      (json_int_t)gc.misses, "evictions", (json_int_t)gc.evictions));
        /* rows of logits with NaN entries (never sampled, docs/engine.md Sampling) */
        json_object_set_new(ej, "nan_logit_rows", json_integer((json_int_t)st.nan_logit_rows));
        /* speculative decoding (docs/speculative.md) */
        const eng_spec_stats *sp = &st.spec;
        json_object_set_new(
            ej, "speculative",
            json_pack("{s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f}", "method",
                      eng_spec_method_name(st.spec_method), "max_draft", (int)st.spec_max_draft,
                      "steps", (json_int_t)sp->steps, "verifications", (json_int_t)sp->rows,
                      "drafted", (json_int_t)sp->drafted, "accepted", (json_int_t)sp->accepted,
                      "emitted", (json_int_t)sp->emitted, "declined_by_cost",
                      (json_int_t)sp->skipped_cost, "acceptance_rate",
                      sp->drafted ? (double)sp->accepted / (double)sp->drafted : 0.0,
                      "mean_accepted_length",
                      sp->rows ? (double)sp->accepted / (double)sp->rows : 0.0, "draft_s",
                      sp->draft_s, "verify_s", sp->verify_s));
        json_t *spj = json_object_get(ej, "speculative");
        json_t *bym = spj ? json_object() : NULL;
        static const eng_spec_method ms[] = {ENG_SPEC_NGRAM, ENG_SPEC_DRAFT, ENG_SPEC_MTP};
        for (size_t m = 0; bym && m < sizeof ms / sizeof *ms; m++) {
            const eng_spec_stats *b = &st.spec_by[ms[m]];
            json_object_set_new(
                bym, eng_spec_method_name(ms[m]),
                json_pack("{s:I, s:I, s:I, s:I, s:I, s:f}", "verifications", (json_int_t)b->rows,
                          "drafted", (json_int_t)b->drafted, "accepted", (json_int_t)b->accepted,
                          "emitted", (json_int_t)b->emitted, "declined_by_cost",
                          (json_int_t)b->skipped_cost, "acceptance_rate",
                          b->drafted ? (double)b->accepted / (double)b->drafted : 0.0));
        }
        if (bym) json_object_set_new(spj, "by_method", bym); /* per-request methods mix */
        if (spj && st.draft_on) { /* the draft model: what it is, what it holds, what it ran */
            const eng_draft_info *di = &st.draft;
            json_object_set_new(
                spj, "draft_model",
                json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:i, s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:I}",
                          "dir", di->dir, "architecture", di->arch, "layers", (json_int_t)di->layers,
                          "hidden", (json_int_t)di->hidden, "weights_bytes",
                          (json_int_t)di->weights_bytes, "kv_bytes", (json_int_t)di->kv_bytes,
                          "kv_blocks", (int)di->kv.n_blocks, "kv_blocks_free", (int)di->kv.n_free,
                          "kv_blocks_active", (int)di->kv.n_active, "kv_blocks_cached",
                          (int)di->kv.n_cached, "forwards", (json_int_t)di->forwards,
                          "catchup_tokens", (json_int_t)di->catchup_tokens, "drafted",
                          (json_int_t)di->drafted, "dropped_rows", (json_int_t)di->dropped_rows,
                          "deferred_rows", (json_int_t)di->deferred_rows));
        }
    }
    if (j) json_object_set_new(j, "connections", conns_json(s));
    json_t *adm = j ? admission_json(s, &st) : NULL;
    if (adm) json_object_update(json_object_get(j, "admission"), adm); /* takes new references */
    json_decref(adm);
    json_t *kvj = j ? json_object_get(j, "kv") : NULL;
    if (kvj) {
        /* the pool's real layout: bytes per token of a main-class block
         * (scale/bias included), and the full-precision blocks of
         * --quantized-kv-start */
        json_object_set_new(kvj, "kv_format", json_string(st.kv_format));
        json_object_set_new(kvj, "kv_bytes_per_token",
                            json_integer((json_int_t)st.kv_bytes_per_token));
        json_object_set_new(kvj, "blocks_full", json_integer(st.kv.n_blocks_full));
        json_object_set_new(kvj, "block_bytes", json_integer((json_int_t)st.kv.block_bytes));
        json_object_set_new(kvj, "block_bytes_full",
                            json_integer((json_int_t)st.kv.block_bytes_full));
        /* sliding windows: per layer kind, and the cap the pool applies (0 = none) */
        json_object_set_new(kvj, "kv_bytes_per_token_full_layers",
                            json_integer((json_int_t)st.kv_bytes_per_token_full_layers));
        json_object_set_new(kvj, "kv_bytes_per_token_sliding_layers",
                            json_integer((json_int_t)st.kv_bytes_per_token_sliding_layers));
        json_object_set_new(kvj, "sliding_window", json_integer(st.kv_sliding_window));
        json_object_set_new(kvj, "sliding_layers", json_integer(st.kv_sliding_layers));
        json_object_set_new(kvj, "kv_window", json_integer(st.kv_window));
        json_object_set_new(kvj, "seq_max_blocks", json_integer((json_int_t)st.kv_seq_max_blocks));
        /* KV groups (docs/kv.md): the layers that keep the same positions */
        json_t *groups = json_array();
        for (int g = 0; g < st.kv_n_groups && groups; g++) {
            const kv_pool_group_stats *gs = &st.kv.group[g];
            json_array_append_new(
                groups,
                json_pack("{s:i, s:i, s:I, s:i, s:i, s:i, s:i, s:I}", "window",
                          (int)st.kv_group_window[g], "layers", (int)st.kv_group_layers[g],
                          "bytes_per_token", (json_int_t)st.kv_group_bytes_per_token[g], "blocks",
                          (int)gs->n_blocks, "free", (int)gs->n_free, "active", (int)gs->n_active,
                          "cached", (int)gs->n_cached, "block_bytes", (json_int_t)gs->block_bytes));
        }
        if (groups) json_object_set_new(kvj, "groups", groups);
        /* recurrent state (hybrid models, docs/hybrid.md): one block = one state */
        if (st.kv.state.n_blocks > 0)
            json_object_set_new(
                kvj, "state",
                json_pack("{s:i, s:i, s:i, s:i, s:I, s:I, s:i}", "blocks",
                          (int)st.kv.state.n_blocks, "free", (int)st.kv.state.n_free, "active",
                          (int)st.kv.state.n_active, "cached", (int)st.kv.state.n_cached,
                          "block_bytes", (json_int_t)st.kv.state.block_bytes, "bytes",
                          (json_int_t)(st.kv.state.block_bytes * (size_t)st.kv.state.n_blocks),
                          "every", (int)st.kv_state_every));
    }
    srv_rstore_stats rs = srv_rstore_get_stats(s->rstore);
    if (j)
        json_object_set_new(j, "responses_store",
                            json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "entries",
                                      (json_int_t)rs.entries, "bytes", (json_int_t)rs.bytes,
                                      "stored", (json_int_t)rs.stored, "hits", (json_int_t)rs.hits,
                                      "misses", (json_int_t)rs.misses, "evicted",
                                      (json_int_t)rs.evicted, "expired", (json_int_t)rs.expired,
                                      "refused", (json_int_t)rs.refused));
    if (j)
        json_object_set_new(j, "request_memory",
                            json_pack("{s:I, s:I, s:I}", "used", (json_int_t)kiln_reqmem_used(),
                                      "peak", (json_int_t)kiln_reqmem_peak(), "max",
                                      (json_int_t)kiln_reqmem_cap()));
    if (j && st.ssd_on) json_object_set_new(j, "ssd_cache", srv_ssd_stats_json(&st));
    *body = j;
    return j ? 200 : 500;
}

int srv_route_metrics(srv_server *s, srv_buf *text)
{
    eng_engine *e = atomic_load(&s->engine);
    eng_stats st;
    if (e) st = eng_get_stats(e);
    return srv_metrics_render(s->metrics, e ? &st : NULL, plat_now() - s->t_start, text) ? 500 : 200;
}

/* ---------------------------------------------------------------- tokenize */

static json_t *load_object(const char *req, size_t len, json_t **body, int *status)
{
    json_t *j;
    kiln_err err;
    if (srv_json_parse_object(req, len, &j, &err)) { /* the one request reader: NUL, OOM, position */
        *status = fail_err(body, &err, NULL);
        return NULL;
    }
    return j;
}

int srv_route_tokenize(srv_server *s, const char *req, size_t len, json_t **body)
{
    if (!atomic_load(&s->engine)) return fail(body, SRV_E_LOADING, NULL, "the model is still loading");
    int status = 200;
    json_t *j = load_object(req, len, body, &status);
    if (!j) return status;
    int32_t *ids = NULL, n = 0;
    kiln_err err;
    kiln_code rc;
    json_t *prompt = json_object_get(j, "prompt");
    if (json_object_get(j, "messages")) {
        srv_request r;
        char param[64];
        if ((rc = srv_parse_request(SRV_API_CHAT, req, len, &r, param, &err))) {
            json_decref(j);
            return fail_err(body, &err, param[0] ? param : NULL);
        }
        rc = s->chat ? srv_chat_prompt(s->chat, s->tok, &r, s->cfg.thinking, &ids, &n, NULL, &err)
                     : kiln_fail(&err, KILN_E_INVALID, "the model has no chat template");
        srv_request_free(&r);
    } else if (json_is_string(prompt)) {
        json_t *add = json_object_get(j, "add_special_tokens");
        size_t nn = 0;
        unsigned fl = TOK_PARSE_SPECIAL | (add && !json_is_true(add) ? 0 : TOK_ADD_SPECIAL);
        rc = tok_encode(s->tok, json_string_value(prompt), json_string_length(prompt), fl, &ids, &nn, &err);
        n = (int32_t)nn;
    } else {
        json_decref(j);
        return fail(body, KILN_E_INVALID, "prompt", "send 'prompt' (a string) or 'messages'");
    }
    json_decref(j);
    if (rc) {
        srv_error e = srv_chat_error(&err, NULL);
        *body = srv_error_json(&e);
        return srv_error_status(e.kind);
    }
    json_t *arr = json_array();
    for (int32_t i = 0; i < n && arr; i++) json_array_append_new(arr, json_integer(ids[i]));
    free(ids);
    *body = json_pack("{s:o, s:i, s:i}", "tokens", arr ? arr : json_null(), "count", (int)n,
                      "max_model_len", (int)s->cfg.ctx);
    return *body ? 200 : 500;
}

int srv_route_count_tokens(srv_server *s, const char *req, size_t len, json_t **body)
{
    if (!atomic_load(&s->engine)) return fail(body, SRV_E_LOADING, NULL, "the model is still loading");
    srv_request r;
    char param[64];
    kiln_err err;
    int32_t *ids = NULL, n = 0;
    kiln_code rc = srv_parse_anthropic_ex(req, len, true, &r, param, &err);
    if (rc) goto fail;
    rc = s->chat ? srv_chat_prompt(s->chat, s->tok, &r, s->cfg.thinking, &ids, &n, NULL, &err)
                 : kiln_fail(&err, KILN_E_INVALID, "the model has no chat template");
    srv_request_free(&r);
    free(ids);
    param[0] = 0;
    if (rc) goto fail;
    *body = json_pack("{s:i}", "input_tokens", (int)n);
    return *body ? 200 : 500;
fail : {
    srv_error e = srv_chat_error(&err, param[0] ? param : NULL);
    *body = srv_error_json_anthropic(&e);
    return srv_error_status(e.kind);
}
}

int srv_route_detokenize(srv_server *s, const char *req, size_t len, json_t **body)
{
    if (!atomic_load(&s->engine)) return fail(body, SRV_E_LOADING, NULL, "the model is still loading");
    int status = 200;
    json_t *j = load_object(req, len, body, &status);
    if (!j) return status;
    json_t *toks = json_object_get(j, "tokens");
    if (!json_is_array(toks)) {
        json_decref(j);
        return fail(body, KILN_E_INVALID, "tokens", "'tokens' must be an array of token ids");
    }
    size_t n = json_array_size(toks), i;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    int32_t vocab = tok_vocab_size(s->tok);
    json_t *v;
    json_array_foreach(toks, i, v) {
        if (!ids || !json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= vocab) {
            free(ids);
            json_decref(j);
            return fail(body, KILN_E_INVALID, "tokens", "'tokens' must hold token ids in [0, vocab)");
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    json_decref(j);
    char *text = NULL;
    size_t tl = 0;
    kiln_err err;
    kiln_code rc = tok_decode(s->tok, ids, n, 0, &text, &tl, &err);
    free(ids);
    if (rc) return fail_err(body, &err, "tokens");
    *body = json_pack("{s:o}", "prompt", srv_json_text(text, tl));
    free(text);
    return *body ? 200 : 500;
}
