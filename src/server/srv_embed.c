/*
 * srv_embed.c — POST /v1/embeddings (OpenAI shape) and the pooling config it
 * follows (see srv_embed.h).
 *
 * A request's inputs (a string, strings, one token array, or token arrays) each
 * become one engine request with eng_params.pooling set: they run in the same
 * batched steps as every generation (prefill only), and the engine pools the
 * final-normed hidden states (eng_pool.c). At most `window` of them wait in the
 * engine at once, so one request with 2048 inputs neither fills the queue nor
 * starves the others. Then, per input: truncate to `dimensions` (Matryoshka),
 * L2-normalise when the model's Normalize module says so, and answer floats or
 * base64 of little-endian float32.
 * Invariants:
 *   (1) every submitted handle is released exactly once (done or cancelled),
 *       whatever way the request ends, so a client that goes frees its KV
 * Threads: the connection's thread; waits on its engine handles.
 */
#include "server/srv_embed.h"
#include "server/srv_int.h"
#include "server/srv_json.h"
#include "util/plat.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EMBED_MAX_INPUTS 2048

/* ---------------------------------------------------------------- config */

static json_t *load_json(const char *dir, const char *rel, kiln_err *err)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    if (!plat_is_file(p)) return NULL;
    json_error_t je;
    json_t *j = json_load_file(p, JSON_REJECT_DUPLICATES, &je);
    if (!j) kiln_fail(err, KILN_E_CORRUPT, "%s: %s (line %d)", p, je.text, je.line);
    return j;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* The pooling_mode_* flags of a Pooling config; refuses what kiln does not run. */
static void pooling_from(const json_t *pc, srv_embed_cfg *c)
{
    static const struct {
        const char *key;
        eng_pooling mode;
    } modes[] = {{"pooling_mode_cls_token", ENG_POOL_CLS},
                 {"pooling_mode_mean_tokens", ENG_POOL_MEAN},
                 {"pooling_mode_max_tokens", ENG_POOL_MAX},
                 {"pooling_mode_mean_sqrt_len_tokens", ENG_POOL_MEAN_SQRT_LEN},
                 {"pooling_mode_lasttoken", ENG_POOL_LAST}};
    int n = 0;
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
        if (json_is_true(json_object_get(pc, modes[i].key))) {
            c->pooling = modes[i].mode;
            n++;
        }
    if (json_is_true(json_object_get(pc, "pooling_mode_weightedmean_tokens")))
        snprintf(c->unsupported, sizeof c->unsupported, "weighted-mean pooling is not supported");
    else if (n > 1)
        snprintf(c->unsupported, sizeof c->unsupported,
                 "the model concatenates several pooling modes; kiln pools one way");
    else if (n == 0)
        snprintf(c->unsupported, sizeof c->unsupported, "the Pooling config sets no pooling mode");
    const json_t *ip = json_object_get(pc, "include_prompt");
    if (ip && json_is_false(ip) && c->pooling != ENG_POOL_LAST && c->pooling != ENG_POOL_CLS)
        snprintf(c->unsupported, sizeof c->unsupported,
                 "include_prompt false (prompt tokens left out of the mean) is not supported");
}

kiln_code srv_embed_load(const char *dir, eng_pooling force, srv_embed_cfg *out, kiln_err *err)
{
    memset(out, 0, sizeof *out);
    out->pooling = ENG_POOL_LAST;
    out->source = "default (no modules.json)";
    kiln_err e2;
    e2.code = KILN_OK;
    json_t *cfg = load_json(dir, "config.json", &e2);
    json_t *hs = json_object_get(cfg, "hidden_size");
    if (!hs) hs = json_object_get(json_object_get(cfg, "text_config"), "hidden_size");
    out->hidden = json_is_integer(hs) ? (int64_t)json_integer_value(hs) : 0;
    json_decref(cfg);
    json_t *mods = load_json(dir, "modules.json", &e2);
    if (e2.code) return kiln_fail(err, e2.code, "%s", e2.msg);
    if (mods) {
        out->source = "modules.json";
        size_t i;
        json_t *m;
        bool pooled = false;
        json_array_foreach(mods, i, m) {
            const char *type = json_string_value(json_object_get(m, "type"));
            const char *path = json_string_value(json_object_get(m, "path"));
            if (!type) continue;
            if (ends_with(type, "models.Transformer")) continue;
            if (ends_with(type, "models.Normalize")) {
                out->normalize = true;
                continue;
            }
            if (ends_with(type, "models.Pooling")) {
                pooled = true;
                if (!path || path[0] == '/' || strstr(path, "..")) {
                    snprintf(out->unsupported, sizeof out->unsupported,
                             "modules.json: the Pooling module's path is not inside the model");
                    continue;
                }
                char rel[600];
                snprintf(rel, sizeof rel, "%s%sconfig.json", path, path[0] ? "/" : "");
                json_t *pc = load_json(dir, rel, &e2);
                if (e2.code) {
                    json_decref(mods);
                    return kiln_fail(err, e2.code, "%s", e2.msg);
                }
                if (pc) pooling_from(pc, out);
                else snprintf(out->unsupported, sizeof out->unsupported, "%s is missing", rel);
                json_decref(pc);
                continue;
            }
            snprintf(out->unsupported, sizeof out->unsupported,
                     "modules.json has a %.120s module, which kiln does not run", type);
        }
        if (!pooled && !out->unsupported[0])
            snprintf(out->unsupported, sizeof out->unsupported, "modules.json has no Pooling module");
        json_decref(mods);
    }
    json_t *stc = load_json(dir, "config_sentence_transformers.json", &e2);
    if (e2.code) return kiln_fail(err, e2.code, "%s", e2.msg);
    json_t *pr = json_object_get(stc, "prompts");
    if (json_is_object(pr)) {
        const char *k;
        json_t *v;
        json_object_foreach(pr, k, v) if (!json_is_string(v)) {
            json_decref(stc);
            return kiln_fail(err, KILN_E_CORRUPT, "config_sentence_transformers.json: prompt '%s' "
                             "is not a string", k);
        }
        out->prompts = json_incref(pr);
    }
    const char *dp = json_string_value(json_object_get(stc, "default_prompt_name"));
    if (dp && out->prompts && json_object_get(out->prompts, dp)) out->default_prompt = strdup(dp);
    json_decref(stc);
    if (force != ENG_POOL_NONE) {
        out->pooling = force;
        out->source = "--pooling";
        if (!strncmp(out->unsupported, "the model concatenates", 22) ||
            !strncmp(out->unsupported, "weighted", 8) || !strncmp(out->unsupported, "the Pooling", 11))
            out->unsupported[0] = 0; /* the flag decides the pooling */
    }
    return KILN_OK;
}

void srv_embed_cfg_free(srv_embed_cfg *c)
{
    json_decref(c->prompts);
    free(c->default_prompt);
    memset(c, 0, sizeof *c);
}

/* ---------------------------------------------------------------- request */

typedef struct {
    int32_t *ids; /* OWNED */
    int32_t n;
    eng_handle *h; /* OWNED while in flight (1) */
    float *emb;    /* OWNED result [n_emb] */
    int32_t n_emb;
    bool done;
} embed_input;

typedef struct {
    embed_input *in; /* OWNED [n] */
    size_t n;
    mdl_lora_set lora; /* the `model` field's adapter (references held), n = 0: the base */
    char *label;       /* OWNED: the model id the reply reports; NULL = the served id */
} embed_job;

static void job_free(embed_job *j)
{
    mdl_lora_set_release(&j->lora);
    free(j->label);
    for (size_t i = 0; i < j->n; i++) {
        eng_handle_release(j->in[i].h); /* (1) NULL is a no-op; cancels one still running */
        free(j->in[i].ids);
        free(j->in[i].emb);
    }
    free(j->in);
}

static int err_out(int kind, const char *param, char **text, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int err_out(int kind, const char *param, char **text, size_t *len, const char *fmt, ...)
{
    srv_error e = srv_error_make(kind, param, "%s", "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    json_t *j = srv_error_json(&e);
    *text = j ? srv_json_dump(j, len) : NULL;
    json_decref(j);
    return srv_error_status(kind);
}

/* One input's token ids: a string (with the prompt prefix) or an array of ids. */
static int input_ids(srv_server *s, const json_t *v, const char *prefix, size_t i, embed_input *in,
                     char **text, size_t *len)
{
    char param[32];
    snprintf(param, sizeof param, "input[%zu]", i);
    if (json_is_string(v)) {
        size_t pl = prefix ? strlen(prefix) : 0, tl = json_string_length(v);
        char *t = malloc(pl + tl + 1);
        if (!t) return err_out(KILN_E_NOMEM, NULL, text, len, "out of memory");
        if (pl) memcpy(t, prefix, pl);
        memcpy(t + pl, json_string_value(v), tl);
        t[pl + tl] = 0;
        size_t n = 0;
        kiln_err err;
        kiln_code rc = tok_encode(s->tok, t, pl + tl, TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL, &in->ids, &n, &err);
        free(t);
        if (rc) return err_out(rc, param, text, len, "%s", err.msg);
        in->n = (int32_t)n;
    } else if (json_is_array(v)) {
        size_t n = json_array_size(v), k;
        in->ids = malloc((n ? n : 1) * sizeof *in->ids);
        if (!in->ids) return err_out(KILN_E_NOMEM, NULL, text, len, "out of memory");
        int32_t vocab = tok_vocab_size(s->tok);
        json_t *t;
        json_array_foreach(v, k, t) {
            if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= vocab)
                return err_out(KILN_E_INVALID, param, text, len,
                               "'%s' must hold token ids in [0, %d)", param, (int)vocab);
            in->ids[k] = (int32_t)json_integer_value(t);
        }
        in->n = (int32_t)n;
    } else {
        return err_out(KILN_E_INVALID, param, text, len, "'%s' must be a string or an array of "
                       "token ids", param);
    }
    if (in->n == 0)
        return err_out(KILN_E_INVALID, param, text, len, "'%s' is empty", param);
    if (in->n >= s->cfg.ctx)
        return err_out(SRV_E_CONTEXT, param, text, len,
                       "This model's maximum context length is %d tokens, but '%s' has %d tokens",
                       (int)s->cfg.ctx, param, (int)in->n);
    return 0;
}

/* Splits `input` into per-input token ids. */
static int parse_inputs(srv_server *s, const json_t *input, const char *prefix, embed_job *job,
                        char **text, size_t *len)
{
    json_t *wrap = NULL;
    const json_t *list = input;
    if (json_is_string(input)) list = wrap = json_pack("[O]", input);
    else if (json_is_array(input) && json_array_size(input) > 0 &&
             json_is_integer(json_array_get(input, 0)))
        list = wrap = json_pack("[O]", input); /* one token array */
    if (!json_is_array(list) || json_array_size(list) == 0) {
        json_decref(wrap);
        return err_out(KILN_E_INVALID, "input", text, len,
                       "'input' must be a non-empty string, array of strings, or token array(s)");
    }
    if (json_array_size(list) > EMBED_MAX_INPUTS) {
        json_decref(wrap);
        return err_out(KILN_E_INVALID, "input", text, len, "at most %d inputs per request",
                       EMBED_MAX_INPUTS);
    }
    job->n = json_array_size(list);
    job->in = calloc(job->n, sizeof *job->in);
    int status = job->in ? 0 : err_out(KILN_E_NOMEM, NULL, text, len, "out of memory");
    size_t i;
    const json_t *v;
    json_array_foreach(list, i, v) {
        if (status) break;
        status = input_ids(s, v, prefix, i, &job->in[i], text, len);
    }
    json_decref(wrap);
    return status;
}

/* Submits inputs [next..) while fewer than `window` are in flight; 0, or an HTTP status. */
static int submit_more(srv_server *s, eng_engine *eng, embed_job *job, size_t *next, int *in_flight,
                       int window, char **text, size_t *len)
{
    while (*next < job->n && *in_flight < window) {
        embed_input *in = &job->in[*next];
        eng_params p = eng_params_default();
        p.prompt = in->ids;
        p.n_prompt = in->n;
        p.max_tokens = 1;
        p.pooling = s->embed.pooling;
        p.sp.temperature = 0;
        p.lora = job->lora;
        kiln_err err;
        if (eng_submit(eng, &p, &in->h, &err)) {
            if (err.code == KILN_E_BUSY && *in_flight > 0) return 0; /* wait for ours, then retry */
            char param[32];
            snprintf(param, sizeof param, "input[%zu]", *next);
            return err_out(err.code == KILN_E_BUDGET ? SRV_E_KV_BUDGET : err.code == KILN_E_BUSY ? SRV_E_QUEUE : err.code,
                           err.code == KILN_E_INVALID ? param : NULL, text, len, "%s", err.msg);
        }
        (*next)++;
        (*in_flight)++;
    }
    return 0;
}

/* Takes the events of in-flight inputs; waits up to wait_ms on the oldest. */
static int collect(embed_job *job, int *in_flight, int wait_ms, char **text, size_t *len)
{
    bool waited = false;
    for (size_t i = 0; i < job->n; i++) {
        embed_input *in = &job->in[i];
        if (!in->h || in->done) continue;
        eng_event ev;
        int r = eng_handle_next(in->h, &ev, waited ? 0 : wait_ms);
        waited = true;
        if (r != 0) continue;
        if (ev.kind == ENG_EV_TOKEN) {
            eng_event_clear(&ev);
            continue;
        }
        in->done = true;
        (*in_flight)--;
        if (ev.kind == ENG_EV_ERROR) {
            eng_event_clear(&ev);
            char param[32];
            snprintf(param, sizeof param, "input[%zu]", i);
            return err_out(ev.err.code, ev.err.code == KILN_E_INVALID ? param : NULL, text, len, "%s",
                           ev.err.msg);
        }
        if (ev.finish != ENG_FINISH_STOP || !ev.embedding) {
            eng_event_clear(&ev);
            return err_out(ev.finish == ENG_FINISH_CANCELLED ? SRV_E_LOADING : KILN_E_INTERNAL, NULL,
                           text, len, "the embedding of input %zu was %s", i,
                           ev.finish == ENG_FINISH_CANCELLED ? "cancelled" : "not computed");
        }
        in->emb = ev.embedding;
        in->n_emb = ev.n_embedding;
        ev.embedding = NULL;
        eng_event_clear(&ev);
        eng_handle_release(in->h); /* (1) */
        in->h = NULL;
    }
    return 0;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* base64 of n little-endian float32 values, OWNED. */
static json_t *base64_floats(const float *v, int32_t n)
{
    size_t nb = (size_t)n * 4, k = 0;
    unsigned char *b = malloc(nb ? nb : 1);
    char *out = malloc(4 * ((nb + 2) / 3) + 1);
    if (!b || !out) {
        free(b);
        free(out);
        return NULL;
    }
    for (int32_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int j = 0; j < 4; j++) b[4 * (size_t)i + (size_t)j] = (unsigned char)(u >> (8 * j));
    }
    for (size_t i = 0; i < nb; i += 3) {
        uint32_t x = (uint32_t)b[i] << 16 | (i + 1 < nb ? (uint32_t)b[i + 1] << 8 : 0) |
                     (i + 2 < nb ? b[i + 2] : 0);
        out[k++] = B64[x >> 18 & 63];
        out[k++] = B64[x >> 12 & 63];
        out[k++] = i + 1 < nb ? B64[x >> 6 & 63] : '=';
        out[k++] = i + 2 < nb ? B64[x & 63] : '=';
    }
    out[k] = 0;
    free(b);
    json_t *j = json_stringn(out, k);
    free(out);
    return j;
}

/* Truncate (Matryoshka) then L2-normalise when the model says so, in place. */
static int32_t finish_vector(float *v, int32_t n, int64_t dims, bool normalize)
{
    if (dims > 0 && dims < n) n = (int32_t)dims;
    if (normalize) {
        double ss = 0;
        for (int32_t i = 0; i < n; i++) ss += (double)v[i] * v[i];
        double inv = 1.0 / fmax(sqrt(ss), 1e-12); /* torch.nn.functional.normalize's eps */
        for (int32_t i = 0; i < n; i++) v[i] = (float)((double)v[i] * inv);
    }
    return n;
}

static int respond(srv_server *s, embed_job *job, bool b64, int64_t dims, char **text, size_t *len)
{
    json_t *data = json_array();
    int64_t tokens = 0;
    for (size_t i = 0; i < job->n && data; i++) {
        embed_input *in = &job->in[i];
        tokens += in->n;
        int32_t n = finish_vector(in->emb, in->n_emb, dims, s->embed.normalize);
        json_t *vec;
        if (b64) {
            vec = base64_floats(in->emb, n);
        } else {
            vec = json_array();
            for (int32_t k = 0; k < n && vec; k++) json_array_append_new(vec, json_real((double)in->emb[k]));
        }
        json_t *o = vec ? json_pack("{s:s, s:i, s:o}", "object", "embedding", "index", (int)i,
                                    "embedding", vec)
                        : NULL;
        if (!o || json_array_append_new(data, o)) {
            json_decref(data);
            data = NULL;
        }
    }
    json_t *r = data ? json_pack("{s:s, s:o, s:s, s:{s:I, s:I}}", "object", "list", "data", data,
                                 "model", job->label ? job->label : s->model_id, "usage",
                                 "prompt_tokens", (json_int_t)tokens,
                                 "total_tokens", (json_int_t)tokens)
                     : NULL;
    /* %.9g: every float32 survives the round trip, and the body is half as long */
    *text = r ? json_dumps(r, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    *len = *text ? strlen(*text) : 0;
    json_decref(r);
    return *text ? 200 : err_out(KILN_E_NOMEM, NULL, text, len, "out of memory");
}

int srv_route_embeddings(srv_server *s, const char *req, size_t len, srv_alive_fn alive,
                         void *actx, char **text, size_t *text_len)
{
    *text = NULL;
    *text_len = 0;
    eng_engine *eng = atomic_load(&s->engine);
    if (!eng || atomic_load(&s->stopping))
        return err_out(SRV_E_LOADING, NULL, text, text_len, eng ? "the server is shutting down"
                                                                 : "the model is still loading");
    if (s->embed.unsupported[0])
        return err_out(KILN_E_UNSUPPORTED, NULL, text, text_len,
                       "model '%s' cannot serve embeddings: %s", s->model_id, s->embed.unsupported);
    json_t *root;
    kiln_err err;
    if (srv_json_parse_object(req, len, &root, &err))
        return err_out(err.code, NULL, text, text_len, "%s", err.msg);
    const json_t *fmt = json_object_get(root, "encoding_format");
    const json_t *dim = json_object_get(root, "dimensions");
    const json_t *pn = json_object_get(root, "prompt_name");
    int status = 0;
    bool b64 = false;
    int64_t dims = 0;
    const char *prefix = NULL;
    if (fmt && !json_is_null(fmt)) {
        const char *f = json_string_value(fmt);
        if (f && !strcmp(f, "base64")) b64 = true;
        else if (!f || strcmp(f, "float"))
            status = err_out(KILN_E_INVALID, "encoding_format", text, text_len,
                             "'encoding_format' must be \"float\" or \"base64\"");
    }
    if (!status && dim && !json_is_null(dim)) {
        dims = json_is_integer(dim) ? (int64_t)json_integer_value(dim) : -1;
        if (dims < 1 || (s->embed.hidden > 0 && dims > s->embed.hidden))
            status = err_out(KILN_E_INVALID, "dimensions", text, text_len,
                             "'dimensions' must be an integer in [1, %lld]", (long long)s->embed.hidden);
    }
    const char *pname = json_is_string(pn) ? json_string_value(pn) : s->embed.default_prompt;
    if (!status && pn && !json_is_null(pn) && !json_is_string(pn))
        status = err_out(KILN_E_INVALID, "prompt_name", text, text_len, "'prompt_name' must be a string");
    if (!status && pname) {
        prefix = json_string_value(json_object_get(s->embed.prompts, pname));
        if (!prefix)
            status = err_out(KILN_E_INVALID, "prompt_name", text, text_len,
                             "the model has no prompt named '%.64s'", pname);
    }
    embed_job job = {0};
    /* `model` may name a LoRA adapter, as for generation (docs/lora.md) */
    const json_t *mv = json_object_get(root, "model");
    if (!status && mv && !json_is_null(mv) && !json_is_string(mv))
        status = err_out(KILN_E_INVALID, "model", text, text_len, "'model' must be a string");
    if (!status && json_is_string(mv)) {
        const char *label = NULL;
        srv_error e;
        if (srv_lora_resolve(&s->lora, s->model_id, json_string_value(mv), NULL, NULL, -1,
                             &job.lora, &label, &e))
            status = err_out(e.kind, e.param[0] ? e.param : NULL, text, text_len, "%s", e.message);
        else if (label && !(job.label = strdup(label)))
            status = err_out(KILN_E_NOMEM, NULL, text, text_len, "out of memory");
    } else if (!status) {
        srv_error e; /* no model: the --lora-default adapter, if any */
        srv_lora_resolve(&s->lora, s->model_id, NULL, NULL, NULL, -1, &job.lora, NULL, &e);
    }
    if (!status) status = parse_inputs(s, json_object_get(root, "input"), prefix, &job, text, text_len);
    json_decref(root);
    /* a window of twice the batch keeps every slot busy without flooding the queue */
    int window = s->cfg.batch > 0 ? 2 * s->cfg.batch : 16, in_flight = 0;
    size_t next = 0;
    while (!status && (next < job.n || in_flight > 0)) {
        if ((status = submit_more(s, eng, &job, &next, &in_flight, window, text, text_len))) break;
        if ((status = collect(&job, &in_flight, 200, text, text_len))) break;
        if (atomic_load(&s->stopping))
            status = err_out(SRV_E_LOADING, NULL, text, text_len, "the server is shutting down");
        else if (alive && !alive(actx))
            status = 499; /* the client went: nothing to send; job_free cancels the rest */
    }
    if (!status) status = respond(s, &job, b64, dims, text, text_len);
    job_free(&job);
    return status;
}
