/*
 * srv_gen.c — one generation request in flight: the prompt is built, the
 * engine gets n requests (one per choice), and their events become either one
 * response object or a stream of SSE chunks.
 *
 * A choice's life (the function that moves it):
 *   SUBMITTED -> RUNNING   first TOKEN event (choice_event)
 *   RUNNING   -> DONE      DONE or ERROR event (choice_event)
 * The generation is over when every choice is DONE; a stream then gets the
 * usage chunk (include_usage) and [DONE].
 * Invariants:
 *   (1) every handle is released exactly once, in srv_gen_free (which cancels
 *       it first if it still runs): a client that vanishes frees its KV blocks
 *   (2) a gen is on s->active from the moment all its requests are submitted
 *       until the start of srv_gen_free, so shutdown (srv_gen_cancel_all) can
 *       cancel it and never sees a released handle
 * Threads: a gen belongs to its connection's thread; s->mu guards s->active.
 */
#include "server/srv_int.h"
#include "server/srv_constraint.h"
#include "util/kiln_json.h"
#include "server/srv_reasoning.h"
#include "server/srv_responses.h"
#include "server/srv_reply.h"
#include "server/srv_json.h"
#include "server/srv_sse.h"
#include "util/kiln_log.h"
#include "util/plat.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    eng_handle *h;          /* OWNED reference; released by srv_gen_free */
    srv_think think;
    srv_tc *tc;             /* OWNED: tool-call parser when the request has tools, else NULL */
    srv_buf raw;            /* scratch: the think splitter's content before tc sees it */
    srv_buf content, reasoning; /* pending text: all of it (collect) or this chunk's (stream) */
    size_t n_sent_calls;    /* parsed tool calls already handled */
    /* streaming tool calls as they are written (srv_tc_open_get): */
    size_t ann_upto;        /* calls with serials below this were shown (or left out) */
    size_t n_streamed;      /* calls shown so far: the next one's index */
    bool sc_open;           /* a call is open in the stream: */
    size_t sc_serial, sc_sent, sc_index; /* its serial, argument bytes sent, index */
    int32_t reasoning_tokens; /* tokens that fell inside a think block */
    int ant_block;          /* Anthropic stream: index of the next content block */
    int ant_open;           /* Anthropic stream: open block kind (0 none, 1 thinking, 2 text) */
    json_t *logprobs;       /* OWNED: accumulated (collect) or this chunk's (stream) */
    int64_t text_off;       /* bytes of completion text so far (completions text_offset) */
    bool done;
    eng_finish finish;
    int32_t prompt_tokens, completion_tokens, cached_tokens;
    int32_t resumed_tokens; /* from a generation checkpoint (--generation-checkpoint) */
    int32_t spec_accepted, spec_rejected; /* speculative decoding's draft tokens */
    bool errored;
    kiln_err err;
    const char *stop_matched; /* BORROWED from the handle (lives until srv_gen_free) */
} gen_choice;

struct srv_gen {
    srv_server *s;
    srv_request r;          /* OWNED */
    srv_reply_meta meta;
    int32_t n_prompt;
    gen_choice *c;          /* OWNED [r.n] */
    int n_done;
    bool started, finished, think;
    srv_think_style think_style; /* its tags (when think) */
    bool think_special;     /* the tags are special tokens: detokenize keeping them */
    srv_tc_family tc_family; /* SRV_TC_NONE: tool calls are not parsed */
    gr_grammar *grammar;    /* OWNED: what the output must be (srv_constraint.c); NULL = free */
    int32_t gtrig[SRV_MAX_TRIGGERS], n_gtrig; /* special tokens after which it starts */
    srv_resp *resp;         /* OWNED: the Responses API output (api SRV_API_RESPONSES) */
    bool registered;        /* on s->active */
    bool timed_out;         /* cfg.timeout_s passed: every choice was cancelled */
    bool broken;            /* streaming: a frame could not be built (out of memory): the
                               stream ends with an error frame instead of going on with a hole */
    double t_start, t_first, t_last;
    int64_t n_tokens;       /* tokens seen over all choices */
    srv_gen *prev, *next;   /* s->active, under s->mu */
};

/* ---------------------------------------------------------------- setup */

static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void apply_defaults(const srv_server *s, const srv_request *r, eng_sampling *sp)
{
    const srv_sampling_defaults *d = &s->cfg.defaults;
    if (!(r->set & SRV_SET_TEMPERATURE)) sp->temperature = d->temperature;
    if (!(r->set & SRV_SET_TOP_P)) sp->top_p = d->top_p;
    if (!(r->set & SRV_SET_TOP_K)) sp->top_k = d->top_k;
    if (!(r->set & SRV_SET_MIN_P)) sp->min_p = d->min_p;
    if (!(r->set & SRV_SET_REP)) sp->repetition_penalty = d->repetition_penalty;
}

/* printf into a new string (*out OWNED); -1 on OOM. */
static int dupf(char **out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    *out = n < 0 ? NULL : malloc((size_t)n + 1);
    if (!*out) return -1;
    va_start(ap, fmt);
    vsnprintf(*out, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return n;
}

/* Tool calls: which parser, one per choice, and a forced opening for
 * required/named tool_choice (the parser sees it as the model's own text). */
static int setup_tools(srv_gen *g, srv_error *e)
{
    srv_request *r = &g->r;
    g->tc_family = r->tools ? g->s->tool_family : SRV_TC_NONE;
    if (g->tc_family == SRV_TC_NONE) return 0;
    if (r->tool_name && strpbrk(r->tool_name, "\"<>{}\\\n")) {
        *e = srv_error_make(KILN_E_INVALID, "tool_choice", "tool name '%.64s' has characters "
                            "a tool-call format cannot carry", r->tool_name);
        return -1;
    }
    r->prefill = srv_tool_prefill(g->tc_family, r, g->s->tok);
    for (int i = 0; i < r->n; i++) {
        kiln_err err;
        if (srv_tc_create(g->tc_family, r->tools, &g->c[i].tc, &err)) {
            *e = srv_error_from(&err, NULL);
            return -1;
        }
        srv_buf sink = {0};
        if (r->prefill) srv_tc_push(g->c[i].tc, r->prefill, strlen(r->prefill), &sink);
        srv_buf_free(&sink);
    }
    return 0;
}

/* The grammar the output must follow (a format, forced or auto tool calls),
 * knowing whether the model starts inside a think block or may open one. */
static int build_grammar(srv_gen *g, bool think_open, bool think_maybe, srv_error *e)
{
    srv_cctx cx = {.family = g->tc_family, .think_open = think_open, .think_maybe = think_maybe,
                   .think_style = g->think_style, .tok = g->s->tok, .ws_max = g->s->cfg.grammar_ws,
                   .compile_ms = g->s->cfg.grammar_compile_ms, .cache = g->s->gcache};
    return srv_constraint_build(&g->r, &cx, &g->grammar, g->gtrig, &g->n_gtrig, e);
}

/* Prompt ids for the request; the rendered chat text decides whether the
 * model starts inside a think block. */
static int build_prompt(srv_gen *g, int32_t **ids, int32_t *n, srv_error *e)
{
    srv_server *s = g->s;
    srv_request *r = &g->r;
    kiln_err err;
    kiln_code rc;
    if (r->api != SRV_API_COMPLETION) {
        if (!s->chat) {
            *e = srv_error_make(KILN_E_INVALID, "messages", "model '%s' has no chat template; use "
                                "/v1/completions with a prompt", s->model_id);
            return -1;
        }
        char *text = NULL;
        if (setup_tools(g, e)) return -1;
        rc = srv_chat_prompt(s->chat, s->tok, r, s->cfg.thinking, ids, n, &text, &err);
        int style = rc ? -1 : srv_think_detect(s->tok, text);
        if (style < 0) style = srv_think_detect(NULL, srv_chat_template_text(s->chat, r->tools != NULL));
        g->think = style >= 0;
        g->think_style = g->think ? (srv_think_style)style : SRV_THINK_TAGS;
        g->think_special = g->think && srv_think_needs_special(g->think_style, s->tok);
        if (!rc && r->prefill && g->think && srv_think_prompt_open_as(g->think_style, text, strlen(text))) {
            /* the template opened a think block: a forced call starts after closing it */
            char *pf = NULL;
            const char *close = g->think_style == SRV_THINK_TAGS ? "</think>\n\n"
                                                                 : srv_think_marks_of(g->think_style)->close;
            if (dupf(&pf, "%s%s", close, r->prefill) < 0) {
                rc = kiln_fail(&err, KILN_E_NOMEM, "out of memory");
            } else {
                free(r->prefill);
                r->prefill = pf;
                free(*ids);
                free(text);
                *ids = NULL;
                text = NULL;
                rc = srv_chat_prompt(s->chat, s->tok, r, s->cfg.thinking, ids, n, &text, &err);
            }
        }
        if (rc) {
            *e = srv_chat_error(&err, "messages");
            return -1;
        }
        bool open = g->think && srv_think_prompt_open_as(g->think_style, text, strlen(text));
        srv_think_start(&g->c[0].think, g->think_style, g->think, text, strlen(text));
        for (int i = 1; i < r->n; i++) g->c[i].think = g->c[0].think;
        free(text);
        if (build_grammar(g, open, g->think && !open, e)) return -1;
        if (g->grammar) /* the grammar allows a think block only at the start */
            for (int i = 0; i < r->n; i++) g->c[i].think.leading = true;
        return 0;
    }
    if (build_grammar(g, false, false, e)) return -1;
    if (r->prompt_ids) {
        int32_t vocab = tok_vocab_size(s->tok);
        for (int32_t i = 0; i < r->n_prompt_ids; i++)
            if (r->prompt_ids[i] >= vocab) {
                *e = srv_error_make(KILN_E_INVALID, "prompt", "prompt token %d is out of range "
                                    "(vocab %d)", (int)r->prompt_ids[i], (int)vocab);
                return -1;
            }
        *ids = r->prompt_ids;
        *n = r->n_prompt_ids;
        r->prompt_ids = NULL;
        r->n_prompt_ids = 0;
        return 0;
    }
    if ((rc = srv_text_prompt(s->tok, r->prompt, r->prompt_len, ids, n, &err))) {
        *e = srv_error_from(&err, "prompt");
        return -1;
    }
    if (*n == 0) {
        *e = srv_error_make(KILN_E_INVALID, "prompt", "the prompt is empty");
        return -1;
    }
    return 0;
}

/* max_tokens: unset = the room left in the context; a client value or the
 * server cap narrows it; clamped to the room left (s->cfg.ctx is the enforced
 * limit: --ctx, --memory-budget's max safe context or KILN_CONTEXT_LIMIT), so
 * a clamped request ends with finish_reason "length" at the clamp. */
static int32_t pick_max_tokens(const srv_server *s, const srv_request *r, int32_t n_prompt)
{
    int64_t room = (int64_t)s->cfg.ctx - n_prompt;
    int64_t mt = r->max_tokens > 0 ? r->max_tokens : room;
    if (s->cfg.max_tokens > 0 && mt > s->cfg.max_tokens) mt = s->cfg.max_tokens;
    if (mt > room) mt = room;
    return (int32_t)mt;
}

/* The prompt alone fills the context. When the limit is the memory budget or
 * KILN_CONTEXT_LIMIT it is a memory-admission refusal, with the plan's numbers. */
static void context_error(const srv_server *s, int32_t n, const char *param, srv_error *e)
{
    const eng_admit_plan *a = &s->adm;
    if (a->source == ENG_LIMIT_BUDGET)
        *e = srv_error_make(
            SRV_E_CTX_BUDGET, param,
            "the prompt has %d tokens, which leaves no room under the memory-admission "
            "context limit of %d tokens (--memory-budget %llu bytes: weights %llu, "
            "fixed overhead %llu, KV pool %d blocks of %d tokens)",
            (int)n, (int)s->cfg.ctx, (unsigned long long)a->budget_bytes,
            (unsigned long long)a->fit.weights_bytes,
            (unsigned long long)(a->fixed_bytes - a->fit.weights_bytes), (int)a->n_blocks,
            (int)a->fit.o.block_tokens);
    else if (a->source == ENG_LIMIT_ENV)
        *e = srv_error_make(
            SRV_E_CTX_BUDGET, param,
            "the prompt has %d tokens, which leaves no room under the context limit of "
            "%d tokens set by KILN_CONTEXT_LIMIT (max safe context %d)",
            (int)n, (int)s->cfg.ctx, (int)a->max_safe_context);
    else
        *e = srv_error_make(SRV_E_CONTEXT, param,
                            "This model's maximum context length is %d tokens, but the prompt has "
                            "%d tokens, which leaves no room to generate",
                            (int)s->cfg.ctx, (int)n);
}

static int submit_all(srv_gen *g, eng_engine *eng, const int32_t *ids, int32_t n, srv_error *e)
{
    srv_server *s = g->s;
    srv_request *r = &g->r;
    eng_params p = eng_params_default();
    p.prompt = ids;
    p.n_prompt = n;
    p.max_tokens = pick_max_tokens(s, r, n);
    p.sp = r->sp;
    apply_defaults(s, r, &p.sp);
    for (int i = 0; i < r->n_stop; i++) p.stop[i] = r->stop[i];
    p.n_stop = r->n_stop;
    p.ignore_eos = r->ignore_eos;
    p.skip_special = r->skip_special && !srv_tc_needs_special(g->tc_family) && !g->think_special;
    int32_t tool_end = g->tc_family == SRV_TC_GEMMA4 ? tok_piece_to_id(s->tok, "<|tool_response>", 16) : -1;
    if (tool_end >= 0) { /* Gemma 4 writes it after its calls: the turn is over */
        p.stop_ids = &tool_end;
        p.n_stop_ids = 1;
    }
    p.want_logprobs = r->logprobs;
    if (srv_lora_resolve(&s->lora, s->model_id, r->model, r->has_adapters ? r->adapter_names : NULL,
                         r->adapter_scales, r->n_adapters, &p.lora, &g->meta.model, e))
        return -1;
    if (!g->meta.model) g->meta.model = s->model_id; /* else the adapter's id, as requested */
    p.grammar = g->grammar;
    p.grammar_triggers = g->gtrig;
    p.n_grammar_triggers = g->n_gtrig;
    p.spec = r->spec;
    p.spec_max_draft = r->spec_max_draft;
    uint64_t base = r->set & SRV_SET_SEED ? r->sp.seed
                                         : mix64((uint64_t)time(NULL) ^ (atomic_fetch_add(&s->next_id, 1) << 20));
    int rc = 0;
    for (int i = 0; i < r->n && !rc; i++) {
        kiln_err err;
        p.sp.seed = base + (uint64_t)i;
        p.seed_random = !(r->set & SRV_SET_SEED); /* checkpoints: resume by state, not seed */
        p.choice = i;
        if (eng_submit(eng, &p, &g->c[i].h, &err)) {
            *e = srv_error_from(&err, err.code == KILN_E_INVALID ? "" : NULL);
            if (err.code == KILN_E_BUDGET)
                e->kind = SRV_E_KV_BUDGET; /* the engine's --kv-budget check */
            rc = -1;
        }
    }
    /* each submitted request holds its own references to the adapters */
    mdl_lora_set_release(&p.lora);
    return rc;
}

static void active_add(srv_server *s, srv_gen *g)
{
    pthread_mutex_lock(&s->mu);
    g->registered = true;
    g->next = s->active;
    if (s->active) s->active->prev = g;
    s->active = g;
    s->n_active++;
    pthread_mutex_unlock(&s->mu);
}

static void active_remove(srv_server *s, srv_gen *g)
{
    if (!g->registered) return;
    pthread_mutex_lock(&s->mu);
    g->registered = false;
    if (g->prev) g->prev->next = g->next;
    else if (s->active == g) s->active = g->next;
    if (g->next) g->next->prev = g->prev;
    s->n_active--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

int srv_gen_start(srv_server *s, srv_request *r, srv_gen **out, srv_error *e)
{
    *out = NULL;
    eng_engine *eng = atomic_load(&s->engine);
    if (!eng || atomic_load(&s->stopping)) {
        *e = srv_error_make(SRV_E_LOADING, NULL, eng ? "the server is shutting down"
                                                     : "the model is still loading");
        srv_request_free(r);
        return -1;
    }
    srv_gen *g = calloc(1, sizeof *g);
    gen_choice *c = g ? calloc((size_t)r->n, sizeof *c) : NULL;
    if (!g || !c) {
        free(g);
        srv_request_free(r);
        *e = srv_error_make(KILN_E_NOMEM, NULL, "out of memory");
        return -1;
    }
    g->s = s;
    g->r = *r;
    memset(r, 0, sizeof *r);
    g->c = c;
    g->t_start = plat_now();
    g->meta.api = g->r.api;
    g->meta.created = (int64_t)time(NULL);
    g->meta.model = s->model_id;
    snprintf(g->meta.id, sizeof g->meta.id, "%s%016llx",
             g->r.api == SRV_API_CHAT        ? "chatcmpl-"
             : g->r.api == SRV_API_ANTHROPIC ? "msg_"
             : g->r.api == SRV_API_RESPONSES ? "resp_"
                                             : "cmpl-",
             (unsigned long long)mix64(atomic_fetch_add(&s->next_id, 1) ^ (uint64_t)g->meta.created));
    for (int i = 0; i < g->r.n; i++) srv_think_init(&c[i].think, false, false);
    int32_t *ids = NULL, n = 0;
    if (g->r.api == SRV_API_RESPONSES && !(g->resp = srv_resp_new(&g->meta, &g->r))) {
        *e = srv_error_make(KILN_E_NOMEM, NULL, "out of memory");
        goto fail;
    }
    uint64_t f0 = kiln_json_failures(); /* rendering may meet a failure jansson hides */
    if (build_prompt(g, &ids, &n, e)) goto fail;
    if (kiln_json_failures() != f0) {
        *e = srv_error_make(KILN_E_NOMEM, NULL, "out of memory rendering the prompt");
        goto fail;
    }
    g->n_prompt = n;
    if (n >= s->cfg.ctx) {
        context_error(s, n, g->r.api != SRV_API_COMPLETION ? "messages" : "prompt", e);
        goto fail;
    }
    if (submit_all(g, eng, ids, n, e)) goto fail;
    active_add(s, g);
    free(ids);
    *out = g;
    return 0;
fail:
    free(ids);
    srv_gen_free(g);
    return -1;
}

/* ---------------------------------------------------------------- events */

static const char *finish_name(eng_finish f)
{
    switch (f) {
    case ENG_FINISH_STOP: return "stop";
    case ENG_FINISH_LENGTH: return "length";
    default: return "error"; /* never sent: a cancelled or failed choice is an error */
    }
}

/* Tool calls the choice reports (parallel_tool_calls false: the first only). */
static size_t n_calls(const srv_gen *g, const gen_choice *c)
{
    size_t n = srv_tc_count(c->tc);
    return !g->r.parallel_tool_calls && n > 1 ? 1 : n;
}

static const char *choice_finish(const srv_gen *g, const gen_choice *c)
{
    if (n_calls(g, c) && (c->finish == ENG_FINISH_STOP || c->finish == ENG_FINISH_LENGTH))
        return "tool_calls";
    return finish_name(c->finish);
}

static const char *anthropic_stop(const srv_gen *g, const gen_choice *c)
{
    if (n_calls(g, c) && (c->finish == ENG_FINISH_STOP || c->finish == ENG_FINISH_LENGTH)) return "tool_use";
    if (c->finish == ENG_FINISH_LENGTH) return "max_tokens";
    return c->stop_matched ? "stop_sequence" : "end_turn";
}

static int event(srv_buf *out, const char *name, json_t *j /* stolen */)
{
    int rc = !j || srv_sse_event(out, name, j);
    json_decref(j);
    return rc;
}

/* Anthropic stream: blocks open lazily (thinking, text, tool_use), one at a time. */
static int ant_close(gen_choice *c, srv_buf *out)
{
    if (!c->ant_open) return 0;
    c->ant_open = 0;
    return event(out, "content_block_stop",
                 json_pack("{s:s, s:i}", "type", "content_block_stop", "index", c->ant_block++));
}

static int ant_open(gen_choice *c, srv_buf *out, int kind)
{
    if (c->ant_open == kind) return 0;
    int rc = ant_close(c, out);
    c->ant_open = kind;
    json_t *blk = kind == 1 ? json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", "")
                            : json_pack("{s:s, s:s}", "type", "text", "text", "");
    return rc | event(out, "content_block_start", json_pack("{s:s, s:i, s:o}", "type", "content_block_start",
                                                            "index", c->ant_block, "content_block", blk));
}

static int ant_delta(gen_choice *c, srv_buf *out, json_t *delta /* stolen */)
{
    return event(out, "content_block_delta", json_pack("{s:s, s:i, s:o}", "type", "content_block_delta",
                                                       "index", c->ant_block, "delta", delta));
}

static int stream_calls(srv_gen *g, gen_choice *c, int idx, srv_buf *out, bool shown_only);

static int flush_anthropic(srv_gen *g, gen_choice *c, srv_buf *out)
{
    int rc = c->tc ? stream_calls(g, c, (int)(c - g->c), out, true) : 0; /* before text */
    if (c->reasoning.len) {
        rc |= ant_open(c, out, 1);
        rc |= ant_delta(c, out, json_pack("{s:s, s:o}", "type", "thinking_delta", "thinking",
                                          srv_json_text(c->reasoning.p, c->reasoning.len)));
    }
    if (c->content.len) {
        rc |= ant_open(c, out, 2);
        rc |= ant_delta(c, out, json_pack("{s:s, s:o}", "type", "text_delta", "text",
                                          srv_json_text(c->content.p, c->content.len)));
    }
    return rc | (c->tc ? stream_calls(g, c, (int)(c - g->c), out, false) : 0);
}

static int finish_anthropic(srv_gen *g, gen_choice *c, srv_buf *out)
{
    int rc = 0;
    if (!c->ant_block && !c->ant_open) rc |= ant_open(c, out, 2); /* always at least one block */
    rc |= ant_close(c, out);
    json_t *md = json_pack("{s:s, s:{s:s, s:o}, s:{s:i}}", "type", "message_delta", "delta",
                           "stop_reason", anthropic_stop(g, c), "stop_sequence",
                           c->stop_matched ? json_string(c->stop_matched) : json_null(), "usage",
                           "output_tokens", (int)c->completion_tokens);
    if (md && c->resumed_tokens > 0) /* generation checkpoint resumed */
        json_object_set_new(json_object_get(md, "usage"), "resumed_tokens", json_integer(c->resumed_tokens));
    rc |= event(out, "message_delta", md);
    rc |= event(out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    return rc;
}

/* ---------------------------------------------------------------- streamed calls
 * A call shows in the stream as soon as its name is known and its arguments
 * follow in fragments as they become final (srv_toolcall.h); the fragments
 * concatenate to the parsed call's arguments. */

static int call_start(srv_gen *g, gen_choice *c, int idx, srv_buf *out, const char *name)
{
    char id[48];
    if (g->r.api == SRV_API_ANTHROPIC) {
        srv_reply_call_id(id, "toolu_", g->meta.id, idx, c->sc_index);
        int rc = ant_close(c, out);
        json_t *blk = srv_reply_tool_use(id, name, "{}");
        rc |= event(out, "content_block_start", json_pack("{s:s, s:i, s:o}", "type", "content_block_start",
                                                          "index", c->ant_block, "content_block", blk));
        c->ant_open = 3;
        return rc;
    }
    srv_reply_call_id(id, "call_", g->meta.id, g->r.api == SRV_API_RESPONSES ? 0 : idx, c->sc_index);
    if (g->r.api == SRV_API_RESPONSES) return srv_resp_call_open(g->resp, out, id, name);
    json_t *ch = srv_reply_chunk(&g->meta, idx, srv_reply_tool_call_delta(c->sc_index, id, name, ""), NULL, NULL);
    int rc = !ch || srv_sse_data(out, ch);
    json_decref(ch);
    return rc;
}

static int call_args(srv_gen *g, gen_choice *c, int idx, srv_buf *out, const char *frag, size_t n)
{
    if (!n) return 0;
    c->sc_sent += n;
    if (g->r.api == SRV_API_ANTHROPIC)
        return c->ant_open != 3 ? 0
                                : ant_delta(c, out, json_pack("{s:s, s:o}", "type", "input_json_delta",
                                                              "partial_json", srv_json_text(frag, n)));
    if (g->r.api == SRV_API_RESPONSES) return srv_resp_call_delta(g->resp, out, frag, n);
    json_t *d = json_pack("{s:[{s:I, s:{s:o}}]}", "tool_calls", "index", (json_int_t)c->sc_index, "function",
                          "arguments", srv_json_text(frag, n));
    json_t *ch = srv_reply_chunk(&g->meta, idx, d, NULL, NULL);
    int rc = !ch || srv_sse_data(out, ch);
    json_decref(ch);
    return rc;
}

/* complete: the call was parsed; else it turned out malformed after it showed. */
static int call_end(srv_gen *g, gen_choice *c, srv_buf *out, bool complete)
{
    c->sc_open = false;
    if (g->r.api == SRV_API_ANTHROPIC) return c->ant_open == 3 ? ant_close(c, out) : 0;
    if (g->r.api == SRV_API_RESPONSES) return srv_resp_call_close(g->resp, out, complete);
    return 0;
}

static int call_show(srv_gen *g, gen_choice *c, int idx, srv_buf *out, size_t serial, const char *name)
{
    c->sc_open = true;
    c->sc_serial = serial;
    c->sc_sent = 0;
    c->sc_index = c->n_streamed++;
    c->ann_upto = serial + 1;
    return call_start(g, c, idx, out, name);
}

/* Parsed calls, then (unless shown_only) the calls still being written.
 * shown_only: only what finishes or ends the call already open, so that text
 * that follows it goes out after it. */
static int stream_calls(srv_gen *g, gen_choice *c, int idx, srv_buf *out, bool shown_only)
{
    int rc = 0;
    for (size_t n = n_calls(g, c); c->n_sent_calls < n; c->n_sent_calls++) {
        const char *name, *args;
        srv_tc_get(c->tc, c->n_sent_calls, &name, &args);
        size_t serial = srv_tc_serial(c->tc, c->n_sent_calls), len = strlen(args);
        if (c->sc_open && serial == c->sc_serial) {
            if (len > c->sc_sent) rc |= call_args(g, c, idx, out, args + c->sc_sent, len - c->sc_sent);
            rc |= call_end(g, c, out, true);
            continue;
        }
        if (serial < c->ann_upto) continue; /* shown whole while its markup went on */
        if (shown_only) break;
        if (c->sc_open) rc |= call_end(g, c, out, false);
        rc |= call_show(g, c, idx, out, serial, name);
        rc |= call_args(g, c, idx, out, args, len);
        rc |= call_end(g, c, out, true);
    }
    if (c->sc_open && c->sc_serial < srv_tc_settled(c->tc)) rc |= call_end(g, c, out, false);
    if (shown_only) return rc;
    for (size_t k = 0; k < srv_tc_open_count(c->tc); k++) {
        size_t serial, len;
        const char *name, *args;
        srv_tc_open_get(c->tc, k, &serial, &name, &args, &len);
        if (c->sc_open && serial == c->sc_serial) {
            if (len > c->sc_sent) rc |= call_args(g, c, idx, out, args + c->sc_sent, len - c->sc_sent);
            continue;
        }
        if (serial < c->ann_upto) continue;
        if (!g->r.parallel_tool_calls && c->n_streamed) break;
        if (c->sc_open) rc |= call_end(g, c, out, true); /* an earlier call of the same markup, whole */
        rc |= call_show(g, c, idx, out, serial, name);
        rc |= call_args(g, c, idx, out, args, len);
    }
    return rc;
}

/* Responses: text and new calls into the response (events when out != NULL). */
static int flush_responses(srv_gen *g, gen_choice *c, srv_buf *out)
{
    if (out) {
        int rc = stream_calls(g, c, 0, out, true);
        rc |= srv_resp_text(g->resp, out, c->reasoning.p, c->reasoning.len, c->content.p, c->content.len);
        return rc | stream_calls(g, c, 0, out, false);
    }
    int rc = srv_resp_text(g->resp, out, c->reasoning.p, c->reasoning.len, c->content.p, c->content.len);
    for (size_t n = n_calls(g, c); c->n_sent_calls < n; c->n_sent_calls++) {
        const char *name, *args;
        char id[48];
        srv_tc_get(c->tc, c->n_sent_calls, &name, &args);
        srv_reply_call_id(id, "call_", g->meta.id, 0, c->n_sent_calls);
        rc |= srv_resp_call(g->resp, out, id, name, args);
    }
    return rc;
}

/* Stream: moves the choice's pending text/logprobs into chunks. */
static int flush_chunks(srv_gen *g, int idx, srv_buf *out)
{
    gen_choice *c = &g->c[idx];
    int rc = 0;
    if (c->tc && g->r.api == SRV_API_CHAT) rc |= stream_calls(g, c, idx, out, true); /* before text */
    if (g->r.api == SRV_API_ANTHROPIC) {
        rc = flush_anthropic(g, c, out);
    } else if (g->r.api == SRV_API_RESPONSES) {
        rc = flush_responses(g, c, out);
    } else if (g->r.api == SRV_API_CHAT) {
        if (c->reasoning.len) {
            json_t *d = json_pack("{s:o, s:o}", "reasoning", srv_json_text(c->reasoning.p, c->reasoning.len),
                                  "reasoning_content", srv_json_text(c->reasoning.p, c->reasoning.len));
            json_t *ch = srv_reply_chunk(&g->meta, idx, d, NULL, NULL);
            rc |= !ch || srv_sse_data(out, ch);
            json_decref(ch);
        }
        if (c->content.len || c->logprobs) {
            json_t *d = json_pack("{s:o}", "content", srv_json_text(c->content.p, c->content.len));
            json_t *ch = srv_reply_chunk(&g->meta, idx, d, NULL, c->logprobs);
            c->logprobs = NULL;
            rc |= !ch || srv_sse_data(out, ch);
            json_decref(ch);
        }
        if (c->tc) rc |= stream_calls(g, c, idx, out, false);
    } else if (c->content.len || c->logprobs) {
        json_t *ch = srv_reply_chunk(&g->meta, idx, srv_json_text(c->content.p, c->content.len),
                                     NULL, c->logprobs);
        c->logprobs = NULL;
        rc |= !ch || srv_sse_data(out, ch);
        json_decref(ch);
    }
    srv_buf_reset(&c->content);
    srv_buf_reset(&c->reasoning);
    return rc ? -1 : 0;
}

static void note_token(srv_gen *g)
{
    double now = plat_now();
    if (g->n_tokens++ == 0) {
        g->t_first = now;
        srv_metrics_ttft(g->s->metrics, now - g->t_start);
    } else if (g->r.stream) {
        srv_metrics_itl(g->s->metrics, now - g->t_last);
    }
    g->t_last = now;
}

static void choice_done(srv_gen *g, gen_choice *c, const eng_event *ev)
{
    c->done = true;
    g->n_done++;
    c->finish = ev->finish;
    c->prompt_tokens = ev->prompt_tokens;
    c->completion_tokens = ev->completion_tokens;
    c->cached_tokens = ev->cached_tokens;
    c->resumed_tokens = ev->resumed_tokens;
    c->spec_accepted = ev->spec_accepted;
    c->spec_rejected = ev->spec_rejected;
    c->stop_matched = ev->stop_matched;
    srv_metrics_tokens(g->s->metrics, c == g->c ? ev->prompt_tokens : 0, ev->completion_tokens,
                       c == g->c ? ev->cached_tokens : 0);
}

/* Text → think split → tool-call split → content / reasoning. */
static int push_text(gen_choice *c, const char *s, size_t n)
{
    if (!c->tc) return srv_think_push(&c->think, s, n, &c->content, &c->reasoning);
    srv_buf_reset(&c->raw);
    int rc = srv_think_push(&c->think, s, n, &c->raw, &c->reasoning);
    return rc | srv_tc_push(c->tc, c->raw.p, c->raw.len, &c->content);
}

static int flush_text(gen_choice *c)
{
    if (!c->tc) return srv_think_flush(&c->think, &c->content, &c->reasoning);
    srv_buf_reset(&c->raw);
    int rc = srv_think_flush(&c->think, &c->raw, &c->reasoning);
    rc |= srv_tc_push(c->tc, c->raw.p, c->raw.len, &c->content);
    return rc | srv_tc_finish(c->tc, &c->content);
}

/* The error frame of a failed choice (c->err) in the API's stream shape. */
static int stream_error(srv_gen *g, const gen_choice *c, srv_buf *out)
{
    srv_error e = srv_error_from(&c->err, NULL);
    if (g->r.api == SRV_API_RESPONSES) return srv_resp_fail(g->resp, out, e.message);
    json_t *j = g->r.api == SRV_API_ANTHROPIC ? srv_error_json_anthropic(&e) : srv_error_json(&e);
    int rc = !j || (g->r.api == SRV_API_ANTHROPIC ? srv_sse_event(out, "error", j) : srv_sse_data(out, j));
    json_decref(j);
    return rc;
}

/* Handles one event of choice idx; out is the SSE buffer when streaming. */
static int choice_event(srv_gen *g, int idx, const eng_event *ev, srv_buf *out)
{
    gen_choice *c = &g->c[idx];
    int rc = 0;
    if (ev->kind == ENG_EV_ERROR) {
        c->done = c->errored = true;
        c->finish = ENG_FINISH_ERROR;
        c->err = ev->err;
        g->n_done++;
        if (out) rc = stream_error(g, c, out);
        return rc ? -1 : 0;
    }
    /* Cancelled by the server (--timeout, shutdown; a client that left reads
     * nothing): no API has a finish reason for it, so it ends as an error —
     * a 503 reply, or an error frame after what was streamed. */
    bool cancelled = ev->kind == ENG_EV_DONE && ev->finish == ENG_FINISH_CANCELLED;
    if (ev->kind == ENG_EV_TOKEN) note_token(g);
    size_t reasoning_before = c->reasoning.len;
    bool was_inside = c->think.inside;
    if (ev->text_len) rc |= push_text(c, ev->text, ev->text_len);
    if (ev->kind == ENG_EV_TOKEN && (was_inside || c->reasoning.len > reasoning_before)) c->reasoning_tokens++;
    if (ev->kind == ENG_EV_TOKEN && g->r.logprobs) {
        if (!c->logprobs) c->logprobs = srv_logprobs_new(g->r.api);
        rc |= !c->logprobs || srv_logprobs_add(c->logprobs, g->r.api, g->s->tok, &ev->so, c->text_off);
    }
    c->text_off += (int64_t)ev->text_len;
    if (ev->kind == ENG_EV_DONE) {
        rc |= flush_text(c);
        choice_done(g, c, ev);
    }
    if (cancelled) {
        c->errored = true;
        if (g->timed_out)
            kiln_fail(&c->err, KILN_E_CANCELLED, "the request ran past the server's --timeout of %g s "
                      "and was cancelled", g->s->cfg.timeout_s);
        else
            kiln_fail(&c->err, KILN_E_CANCELLED, "the request was cancelled: the server is shutting down");
    }
    if (!out) return rc ? -1 : 0;
    rc |= flush_chunks(g, idx, out);
    if (cancelled) {
        rc |= stream_error(g, c, out);
    } else if (ev->kind == ENG_EV_DONE && g->r.api == SRV_API_ANTHROPIC) {
        rc |= finish_anthropic(g, c, out);
    } else if (ev->kind == ENG_EV_DONE && g->r.api != SRV_API_RESPONSES) {
        json_t *d = g->r.api == SRV_API_CHAT ? json_object() : json_string("");
        json_t *ch = srv_reply_chunk(&g->meta, idx, d, choice_finish(g, c), NULL);
        rc |= !ch || srv_sse_data(out, ch);
        json_decref(ch);
    }
    return rc ? -1 : 0;
}

/* Past the server's per-request limit: cancel once; DONE events follow. */
static void check_deadline(srv_gen *g)
{
    double lim = g->s->cfg.timeout_s;
    if (g->timed_out || lim <= 0 || plat_now() - g->t_start < lim) return;
    g->timed_out = true;
    KLOG_WARN("srv", "req=%s timeout_s=%g: cancelled", g->meta.id, lim);
    for (int i = 0; i < g->r.n; i++)
        if (!g->c[i].done) eng_handle_cancel(g->c[i].h);
}

/* Reads every ready event; when none is ready waits up to timeout_ms on one
 * handle. Returns the number of events handled. */
static int pump(srv_gen *g, srv_buf *out, int timeout_ms)
{
    int got = 0;
    check_deadline(g);
    for (int i = 0; i < g->r.n; i++) {
        eng_event ev;
        while (!g->c[i].done && eng_handle_next(g->c[i].h, &ev, 0) == 0) {
            if (choice_event(g, i, &ev, out)) g->broken = true;
            eng_event_clear(&ev);
            got++;
        }
    }
    if (got || g->n_done == g->r.n) return got;
    int wait = g->r.n > 1 && timeout_ms > 5 ? 5 : timeout_ms;
    for (int i = 0; i < g->r.n; i++) {
        if (g->c[i].done) continue;
        eng_event ev;
        if (eng_handle_next(g->c[i].h, &ev, wait) == 0) {
            if (choice_event(g, i, &ev, out)) g->broken = true;
            eng_event_clear(&ev);
            got++;
        }
        break;
    }
    return got;
}

/* usage.resumed_tokens: only when a generation checkpoint was resumed. */
static void add_resumed(json_t *u, const srv_gen *g)
{
    int32_t resumed = 0;
    for (int i = 0; i < g->r.n; i++) resumed += g->c[i].resumed_tokens;
    if (u && resumed > 0) json_object_set_new(u, "resumed_tokens", json_integer(resumed));
}

static json_t *usage(const srv_gen *g)
{
    int32_t completion = 0;
    int32_t reasoning = 0;
    for (int i = 0; i < g->r.n; i++) completion += g->c[i].completion_tokens;
    for (int i = 0; i < g->r.n; i++) reasoning += g->c[i].reasoning_tokens;
    int32_t acc = 0, rej = 0;
    for (int i = 0; i < g->r.n; i++) acc += g->c[i].spec_accepted, rej += g->c[i].spec_rejected;
    json_t *u = srv_reply_usage(g->n_prompt, completion, g->c[0].cached_tokens);
    srv_reply_usage_reasoning(u, reasoning);
    srv_reply_usage_predictions(u, acc, rej);
    add_resumed(u, g);
    return u;
}

static void log_done(const srv_gen *g)
{
    const gen_choice *c = &g->c[0];
    KLOG_INFO("srv", "req=%s api=%s n=%d prompt=%d completion=%d cached=%d finish=%s ttft_ms=%.1f "
              "total_ms=%.1f", g->meta.id,
              g->r.api == SRV_API_CHAT        ? "chat"
              : g->r.api == SRV_API_ANTHROPIC ? "messages"
              : g->r.api == SRV_API_RESPONSES ? "responses"
                                              : "completions",
              g->r.n, (int)g->n_prompt, (int)c->completion_tokens, (int)c->cached_tokens,
              finish_name(c->finish), g->n_tokens ? (g->t_first - g->t_start) * 1e3 : 0.0,
              (plat_now() - g->t_start) * 1e3);
}

/* Responses: closes the output, stores the conversation (store: true) and
 * returns the response object (OWNED); streaming appends response.completed. */
static json_t *finish_responses(srv_gen *g, srv_buf *out)
{
    const gen_choice *c = &g->c[0];
    const char *status = c->finish == ENG_FINISH_LENGTH && !n_calls(g, c) ? "incomplete" : "completed";
    json_t *resp = srv_resp_end(g->resp, out, status,
                                srv_resp_usage(g->n_prompt, c->completion_tokens, c->cached_tokens,
                                               c->reasoning_tokens));
    if (resp && g->r.store && g->s->rstore && c->finish != ENG_FINISH_CANCELLED) {
        json_t *conv = json_array();
        size_t i;
        json_t *m;
        json_array_foreach(g->r.messages, i, m) if (i > 0 || !g->r.instructions) json_array_append(conv, m);
        json_array_append_new(conv, srv_resp_chat_message(g->resp));
        srv_rstore_put(g->s->rstore, g->meta.id, conv);
        json_decref(conv);
    }
    return resp;
}

/* ---------------------------------------------------------------- API */

static json_t *collect(srv_gen *g, srv_alive_fn alive, void *ctx, srv_error *e);

/* A reply built while an allocation failed (ours: g->broken; jansson's, which
 * it may carry on after: kiln_json_failures) is never sent: 500 out of memory. */
json_t *srv_gen_collect(srv_gen *g, srv_alive_fn alive, void *ctx, srv_error *e)
{
    uint64_t f0 = kiln_json_failures();
    json_t *r = collect(g, alive, ctx, e);
    if (r && (g->broken || kiln_json_failures() != f0)) {
        json_decref(r);
        *e = srv_error_make(KILN_E_NOMEM, NULL, "out of memory building the response");
        return NULL;
    }
    return r;
}

static json_t *collect(srv_gen *g, srv_alive_fn alive, void *ctx, srv_error *e)
{
    while (g->n_done < g->r.n) {
        pump(g, NULL, 200);
        if (g->n_done < g->r.n && alive && !alive(ctx)) {
            *e = srv_error_make(KILN_E_CANCELLED, NULL, "the client went away");
            return NULL;
        }
    }
    for (int i = 0; i < g->r.n; i++)
        if (g->c[i].errored) {
            *e = srv_error_from(&g->c[i].err, NULL);
            return NULL;
        }
    if (g->r.api == SRV_API_RESPONSES) {
        flush_responses(g, &g->c[0], NULL);
        json_t *resp = finish_responses(g, NULL);
        if (!resp) *e = srv_error_make(KILN_E_NOMEM, NULL, "out of memory building the response");
        log_done(g);
        return resp;
    }
    if (g->r.api == SRV_API_ANTHROPIC) {
        gen_choice *c = &g->c[0];
        size_t nc = n_calls(g, c);
        json_t *m = srv_reply_anthropic(&g->meta, nc && !c->content.len ? NULL
                                                  : srv_json_text(c->content.p ? c->content.p : "", c->content.len),
                                        c->reasoning.len ? srv_json_text(c->reasoning.p, c->reasoning.len) : NULL,
                                        anthropic_stop(g, c), c->stop_matched, g->n_prompt,
                                        c->completion_tokens, c->cached_tokens);
        add_resumed(json_object_get(m, "usage"), g);
        json_t *blocks = json_object_get(m, "content");
        for (size_t i = 0; i < nc && blocks; i++) {
            const char *name, *args;
            char id[48];
            srv_tc_get(c->tc, i, &name, &args);
            srv_reply_call_id(id, "toolu_", g->meta.id, 0, i);
            json_array_append_new(blocks, srv_reply_tool_use(id, name, args));
        }
        if (!m) *e = srv_error_make(KILN_E_NOMEM, NULL, "out of memory building the response");
        log_done(g);
        return m;
    }
    json_t *choices = json_array();
    for (int i = 0; i < g->r.n && choices; i++) {
        gen_choice *c = &g->c[i];
        json_t *text;
        if (g->r.api == SRV_API_COMPLETION && g->r.echo && g->r.prompt) {
            srv_buf t = {0};
            srv_buf_add(&t, g->r.prompt, g->r.prompt_len);
            srv_buf_add(&t, c->content.p ? c->content.p : "", c->content.len);
            text = srv_json_text(t.p ? t.p : "", t.len);
            srv_buf_free(&t);
        } else {
            text = srv_json_text(c->content.p ? c->content.p : "", c->content.len);
        }
        json_t *reasoning = c->reasoning.len ? srv_json_text(c->reasoning.p, c->reasoning.len) : NULL;
        json_t *lp = c->logprobs;
        c->logprobs = NULL;
        size_t nc = n_calls(g, c);
        if (nc && !c->content.len) {
            json_decref(text);
            text = NULL; /* content: null beside tool_calls, as OpenAI sends it */
        }
        json_t *ch = srv_reply_choice(&g->meta, i, text, reasoning, choice_finish(g, c), lp);
        json_t *calls = nc ? json_array() : NULL;
        for (size_t k = 0; k < nc && calls; k++) {
            const char *name, *args;
            char id[48];
            srv_tc_get(c->tc, k, &name, &args);
            srv_reply_call_id(id, "call_", g->meta.id, i, k);
            json_array_append_new(calls, srv_reply_tool_call(id, name, args));
        }
        if (calls) json_object_set_new(json_object_get(ch, "message"), "tool_calls", calls);
        if (json_array_append_new(choices, ch)) {
            json_decref(choices);
            choices = NULL;
        }
    }
    json_t *resp = choices ? srv_reply_full(&g->meta, choices, usage(g)) : NULL;
    if (!resp) *e = srv_error_make(KILN_E_NOMEM, NULL, "out of memory building the response");
    log_done(g);
    return resp;
}

static int stream_start(srv_gen *g, srv_buf *out)
{
    int rc = 0;
    g->started = true;
    if (g->r.api == SRV_API_RESPONSES) return srv_resp_begin(g->resp, out);
    if (g->r.api == SRV_API_ANTHROPIC) {
        json_t *msg = srv_reply_anthropic(&g->meta, NULL, NULL, NULL, NULL, g->n_prompt, 0, 0);
        rc |= event(out, "message_start", json_pack("{s:s, s:o}", "type", "message_start", "message", msg));
        return rc;
    }
    for (int i = 0; i < g->r.n; i++) {
        json_t *ch;
        if (g->r.api == SRV_API_CHAT)
            ch = srv_reply_chunk(&g->meta, i, json_pack("{s:s, s:s}", "role", "assistant", "content", ""),
                                 NULL, NULL);
        else if (g->r.echo && g->r.prompt)
            ch = srv_reply_chunk(&g->meta, i, srv_json_text(g->r.prompt, g->r.prompt_len), NULL, NULL);
        else
            continue;
        rc |= !ch || srv_sse_data(out, ch);
        json_decref(ch);
    }
    return rc;
}

/* A frame could not be built (out of memory): the client gets an error frame
 * made of static text (nothing to allocate but the frame's bytes) and the
 * end of the stream, never a reply with a hole; what still runs is cancelled. */
static int stream_broken(srv_gen *g, srv_buf *out)
{
    static const char chat[] =
        "data: {\"error\":{\"message\":\"out of memory while streaming the reply\","
        "\"type\":\"server_error\",\"param\":null,\"code\":\"out_of_memory\"}}\n\n"
        "data: [DONE]\n\n";
    static const char anthropic[] =
        "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\","
        "\"message\":\"out of memory while streaming the reply\"}}\n\n";
    static const char responses[] =
        "event: error\ndata: {\"type\":\"error\",\"code\":\"out_of_memory\","
        "\"message\":\"out of memory while streaming the reply\",\"param\":null}\n\n";
    for (int i = 0; i < g->r.n; i++)
        if (g->c[i].h && !g->c[i].done) eng_handle_cancel(g->c[i].h);
    const char *f = g->r.api == SRV_API_ANTHROPIC   ? anthropic
                    : g->r.api == SRV_API_RESPONSES ? responses
                                                    : chat;
    KLOG_WARN("srv", "req=%s out of memory while streaming: the stream ends with an error",
              g->meta.id);
    (void)srv_buf_adds(out, f); /* when even this fails, the connection just ends */
    g->finished = true;
    return 1;
}

static int stream(srv_gen *g, srv_buf *out, int timeout_ms);

/* Frames built while jansson met a failed allocation are taken back (it may
 * have carried on and left a member out): the stream ends with the error frame. */
int srv_gen_stream(srv_gen *g, srv_buf *out, int timeout_ms)
{
    uint64_t f0 = kiln_json_failures();
    size_t at = out->len;
    int r = stream(g, out, timeout_ms);
    if (kiln_json_failures() != f0) {
        out->len = at;
        if (out->p) out->p[at] = 0;
        g->finished = false;
        return stream_broken(g, out);
    }
    return r;
}

static int stream(srv_gen *g, srv_buf *out, int timeout_ms)
{
    if (g->finished) return 1;
    if (!g->started) {
        if (stream_start(g, out)) g->broken = true;
        if (g->broken) return stream_broken(g, out);
        if (out->len) return 0;
    }
    pump(g, out, timeout_ms);
    if (g->broken) return stream_broken(g, out);
    if (g->n_done < g->r.n) return 0;
    if (g->r.api == SRV_API_RESPONSES) {
        if (!g->c[0].errored) json_decref(finish_responses(g, out));
        g->finished = true;
        log_done(g);
        return 1;
    }
    if (g->r.api == SRV_API_ANTHROPIC) {
        g->finished = true;
        log_done(g);
        return 1;
    }
    if (g->r.include_usage) {
        json_t *u = srv_reply_usage_chunk(&g->meta, usage(g));
        int bad = !u || srv_sse_data(out, u);
        json_decref(u);
        if (bad) return stream_broken(g, out);
    }
    if (srv_sse_done(out)) return stream_broken(g, out);
    g->finished = true;
    log_done(g);
    return 1;
}

void srv_gen_free(srv_gen *g)
{
    if (!g) return;
    active_remove(g->s, g); /* (2) first: srv_gen_cancel_all must not see released handles */
    for (int i = 0; i < g->r.n; i++) {
        gen_choice *c = &g->c[i];
        if (c->h) {
            if (!c->done) eng_handle_cancel(c->h);
            eng_handle_release(c->h);
        }
        srv_buf_free(&c->content);
        srv_buf_free(&c->reasoning);
        srv_buf_free(&c->raw);
        srv_tc_free(c->tc);
        json_decref(c->logprobs);
    }
    free(g->c);
    gr_grammar_release(g->grammar);
    srv_resp_free(g->resp);
    srv_request_free(&g->r);
    free(g);
}

void srv_gen_cancel_all(srv_server *s)
{
    pthread_mutex_lock(&s->mu);
    for (srv_gen *g = s->active; g; g = g->next)
        for (int i = 0; i < g->r.n; i++)
            if (g->c[i].h) eng_handle_cancel(g->c[i].h);
    pthread_mutex_unlock(&s->mu);
}
