/*
 * cli_run.c — `kiln run [MODEL]`: chat with a model in the terminal, in process
 * (the same engine, template and tokenizer as `kiln serve`; no HTTP). The model is
 * downloaded first when it is a repo id not in the cache (cli_pick_model).
 *
 * A turn: the conversation (system prompt + turns) is rendered with the model's
 * chat template (srv_chat_prompt: the request goes through the server's own
 * parser, so what runs here is what /v1/chat/completions would run), submitted
 * to the engine, and streamed to the terminal; <think> blocks are shown dimmed
 * and kept out of the history; a figures line follows every answer. The prefix
 * cache keeps earlier turns, so a follow-up only prefills what is new (the
 * figures show the cached tokens). A model without a chat template runs in
 * completion mode: the conversation is one text the model continues.
 *
 * Keys and commands: line editing and history from libedit; Ctrl-C during an
 * answer stops it (the engine request is cancelled; the partial answer stays),
 * at the prompt it clears the line; Ctrl-D or /quit leaves. /system TEXT, /reset,
 * /save [FILE] (into the conversation store the chat page shows, or an export
 * file), /help.
 * Threads: the main thread; SIGINT only sets a flag.
 */
#include "cli/cli.h"
#include "cli/cli_args.h"
#include "cli/cli_models.h"
#include "engine/eng_engine.h"
#include "server/srv_chat.h"
#include "server/srv_conv.h"
#include "server/srv_openai.h"
#include "server/srv_reasoning.h"
#include "tokenizer/tok.h"
#include "util/plat.h"
#include "weights/wt_config.h"

#include <editline/readline.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

typedef struct {
    const char *model, *system, *data_dir, *thinking;
    int64_t ctx, threads, max_tokens;
    double temperature, top_p;
    int offline, ignore_eos;
} run_flags;

typedef struct {
    eng_runtime *rt;
    tok_tokenizer *tok;
    eng_engine *eng;
    srv_chat *chat; /* NULL: completion mode */
    char dir[4096], id[512];
    json_t *msgs;   /* OWNED: [{role, content, reasoning?, figures?}] without the system prompt */
    char *system;   /* OWNED or NULL */
    int tty, thinking;
    const run_flags *f;
    const cli_flag *flags;
    wt_config cfg;
} run_state;

static const char *dim(const run_state *st)
{
    return st->tty ? "\033[2m" : "";
}
static const char *plain(const run_state *st)
{
    return st->tty ? "\033[0m" : "";
}

/* Model output is untrusted: on a terminal, control characters (ESC sequences could
 * move the cursor, retitle the window or worse) are dropped, C0 but \n and \t, DEL and
 * UTF-8-encoded C1. Piped output stays byte for byte. */
static void out_text(const run_state *st, const char *p, size_t n)
{
    if (!st->tty) {
        fwrite(p, 1, n, stdout);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) continue;
        if (c == 0xc2 && i + 1 < n && (unsigned char)p[i + 1] >= 0x80 && (unsigned char)p[i + 1] <= 0x9f) {
            i++;
            continue;
        }
        putchar(c);
    }
}

/* ---------------------------------------------------------------- the prompt */

/* Chat mode: the messages through the server's request parser and the template. */
static kiln_code chat_ids(run_state *st, int32_t **ids, int32_t *n, kiln_err *err)
{
    json_t *msgs = json_array();
    if (st->system && st->system[0])
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", st->system));
    size_t i;
    json_t *m;
    json_array_foreach(st->msgs, i, m)
        json_array_append_new(msgs, json_pack("{s:O, s:O}", "role", json_object_get(m, "role"),
                                              "content", json_object_get(m, "content")));
    json_t *body = json_pack("{s:o}", "messages", msgs);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text) return kiln_fail(err, KILN_E_NOMEM, "out of memory");
    srv_request r;
    char param[64];
    kiln_code rc = srv_parse_request(SRV_API_CHAT, text, strlen(text), &r, param, err);
    free(text);
    if (rc) return rc;
    char *rendered = NULL;
    rc = srv_chat_prompt(st->chat, st->tok, &r, st->thinking, ids, n, &rendered, err);
    free(rendered);
    srv_request_free(&r);
    return rc;
}

/* Completion mode: system, then each user turn on a new line, answers continuing it. */
static kiln_code text_ids(run_state *st, int32_t **ids, int32_t *n, kiln_err *err)
{
    srv_buf b = {0};
    if (st->system && st->system[0]) {
        srv_buf_adds(&b, st->system);
        srv_buf_adds(&b, "\n\n");
    }
    size_t i;
    json_t *m;
    json_array_foreach(st->msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (i && !strcmp(role, "user")) srv_buf_adds(&b, "\n");
        srv_buf_adds(&b, json_string_value(json_object_get(m, "content")));
    }
    kiln_code rc = srv_text_prompt(st->tok, b.p ? b.p : "", b.len, ids, n, err);
    srv_buf_free(&b);
    return rc;
}

/* ---------------------------------------------------------------- one answer */

static void print_figures(run_state *st, const eng_event *done, double t0, double t_first,
                          double t_last, int stopped)
{
    int32_t n = done ? done->completion_tokens : 0;
    double tps = n > 1 && t_last > t_first ? (n - 1) / (t_last - t_first) : 0;
    printf("%s[%d tokens", dim(st), (int)n);
    if (tps > 0) printf(" · %.1f tok/s", tps);
    if (t_first > 0) printf(" · TTFT %.0f ms", (t_first - t0) * 1000.0);
    if (done) printf(" · prompt %d (%d cached)", (int)done->prompt_tokens, (int)done->cached_tokens);
    printf(" · %s]%s\n", stopped ? "stopped" : done ? eng_finish_name(done->finish) : "error", plain(st));
    fflush(stdout);
}

static void answer(run_state *st)
{
    kiln_err err;
    int32_t *ids = NULL, n = 0;
    int style = st->chat ? srv_think_detect(st->tok, NULL) : -1; /* reasoning shown dimmed */
    kiln_code rc = st->chat ? chat_ids(st, &ids, &n, &err) : text_ids(st, &ids, &n, &err);
    if (!rc && n >= st->rt->o.ctx)
        rc = kiln_fail(&err, KILN_E_INVALID, "the conversation (%d tokens) fills the context (%d); "
                       "/reset starts over", (int)n, (int)st->rt->o.ctx);
    eng_handle *h = NULL;
    if (!rc) {
        eng_params p = eng_params_default();
        if (style >= 0 && srv_think_needs_special((srv_think_style)style, st->tok))
            p.skip_special = false; /* Gemma 4's <|channel> tags are special tokens */
        p.prompt = ids;
        p.n_prompt = n;
        int64_t room = st->rt->o.ctx - n;
        p.max_tokens = (int32_t)(st->f->max_tokens > 0 && st->f->max_tokens < room ? st->f->max_tokens : room);
        p.sp.temperature = (float)st->f->temperature;
        p.sp.top_p = (float)st->f->top_p;
        if (!cli_find(st->flags, "temperature")->seen && st->cfg.has_gen_temperature)
            p.sp.temperature = (float)st->cfg.gen_temperature;
        if (!cli_find(st->flags, "top-p")->seen && st->cfg.has_gen_top_p) p.sp.top_p = (float)st->cfg.gen_top_p;
        if (st->cfg.has_gen_top_k) p.sp.top_k = (int32_t)st->cfg.gen_top_k;
        p.sp.seed = (uint64_t)(plat_now() * 1e6) ^ (uint64_t)getpid();
        p.ignore_eos = st->f->ignore_eos != 0;
        rc = eng_submit(st->eng, &p, &h, &err);
    }
    free(ids);
    if (rc) {
        fprintf(stderr, "kiln run: %s\n", err.msg);
        json_array_remove(st->msgs, json_array_size(st->msgs) - 1); /* the turn did not happen */
        return;
    }
    srv_think think;
    srv_think_start(&think, style >= 0 ? (srv_think_style)style : SRV_THINK_TAGS, style >= 0, NULL, 0);
    srv_buf content = {0}, reasoning = {0};
    double t0 = plat_now(), t_first = 0, t_last = 0;
    int stopped = 0, in_think = 0;
    eng_event ev, done;
    memset(&done, 0, sizeof done);
    int have_done = 0;
    interrupted = 0;
    for (;;) {
        if (interrupted && !stopped) {
            eng_handle_cancel(h); /* the engine drops it before its next step */
            stopped = 1;
        }
        int r = eng_handle_next(h, &ev, 100);
        if (r == 1) continue;
        if (r < 0) break;
        if (ev.text_len) {
            if (!t_first) t_first = plat_now();
            t_last = plat_now();
            size_t c0 = content.len, r0 = reasoning.len;
            srv_think_push(&think, ev.text, ev.text_len, &content, &reasoning);
            if (reasoning.len > r0) {
                if (!in_think) printf("%s", dim(st));
                in_think = 1;
                out_text(st, reasoning.p + r0, reasoning.len - r0);
            }
            if (content.len > c0) {
                if (in_think) printf("%s\n", plain(st));
                in_think = 0;
                out_text(st, content.p + c0, content.len - c0);
            }
            fflush(stdout);
        }
        int last = ev.kind != ENG_EV_TOKEN;
        if (last) {
            have_done = ev.kind == ENG_EV_DONE;
            if (ev.kind == ENG_EV_ERROR) fprintf(stderr, "\nkiln run: %s\n", ev.err.msg);
            done = ev;
            done.text = NULL;
            done.embedding = NULL;
        }
        eng_event_clear(&ev);
        if (last) break;
    }
    size_t c0 = content.len;
    srv_think_flush(&think, &content, &reasoning);
    if (content.len > c0) out_text(st, content.p + c0, content.len - c0);
    if (in_think) printf("%s", plain(st));
    printf("\n");
    eng_handle_release(h);
    stopped = stopped || (have_done && done.finish == ENG_FINISH_CANCELLED);
    print_figures(st, have_done ? &done : NULL, t0, t_first, t_last, stopped);
    int32_t ntok = have_done ? done.completion_tokens : 0;
    double tps = ntok > 1 && t_last > t_first ? (ntok - 1) / (t_last - t_first) : 0;
    json_t *fig = json_pack("{s:i, s:i, s:i, s:f, s:f, s:s}", "prompt_tokens", have_done ? (int)done.prompt_tokens : 0,
                            "completion_tokens", (int)ntok, "cached_tokens", have_done ? (int)done.cached_tokens : 0,
                            "ttft_ms", t_first ? (t_first - t0) * 1000.0 : 0.0, "tok_s", tps, "finish_reason",
                            stopped ? "stopped" : have_done ? eng_finish_name(done.finish) : "error");
    json_t *m = json_pack("{s:s, s:s%, s:o}", "role", "assistant", "content", content.p ? content.p : "",
                          content.len, "figures", fig);
    if (m && reasoning.len) json_object_set_new(m, "reasoning", json_stringn(reasoning.p, reasoning.len));
    if (m) json_array_append_new(st->msgs, m);
    srv_buf_free(&content);
    srv_buf_free(&reasoning);
    interrupted = 0;
}

/* ---------------------------------------------------------------- commands */

static void save(run_state *st, const char *arg)
{
    kiln_err err;
    json_t *doc = json_pack("{s:s, s:s, s:s, s:O}", "title", "", "system", st->system ? st->system : "",
                            "model", st->id, "messages", st->msgs);
    const char *first = json_string_value(json_object_get(json_array_get(st->msgs, 0), "content"));
    char title[64];
    snprintf(title, sizeof title, "%.60s", first ? first : "kiln run");
    for (char *p = title; *p; p++)
        if (*p == '\n') *p = ' ';
    json_object_set_new(doc, "title", json_string(title));
    if (arg && *arg) { /* an export file, as the chat page's Export writes */
        json_t *ex = json_pack("{s:s, s:i, s:[O]}", "object", "kiln.conversations", "version", 1,
                               "conversations", doc);
        int bad = !ex || json_dump_file(ex, arg, JSON_INDENT(1)) != 0;
        json_decref(ex);
        json_decref(doc);
        if (bad) printf("could not write %s: %s\n", arg, strerror(errno));
        else printf("saved to %s\n", arg);
        return;
    }
    char dir[4096];
    if (st->f->data_dir) snprintf(dir, sizeof dir, "%s", st->f->data_dir);
    else srv_conv_default_dir(dir, sizeof dir);
    srv_conv_store *cs;
    char id[SRV_CONV_ID_MAX];
    if (srv_conv_open(dir, &cs, &err) || srv_conv_create(cs, doc, id, &err)) {
        printf("could not save: %s\n", err.msg);
    } else {
        printf("saved as %s in %s (the chat page of kiln serve lists it)\n", id, srv_conv_db_path(cs));
    }
    srv_conv_close(cs);
    json_decref(doc);
}

static void help(void)
{
    printf("/system TEXT   set the system prompt (empty: none)\n"
           "/reset         forget the conversation\n"
           "/save [FILE]   save it where the chat page finds it, or to FILE (JSON)\n"
           "/quit          leave (or Ctrl-D); Ctrl-C stops an answer\n");
}

/* Returns 1 to quit. */
static int command(run_state *st, char *line)
{
    if (!strcmp(line, "/quit") || !strcmp(line, "/exit") || !strcmp(line, "/bye")) return 1;
    if (!strcmp(line, "/help") || !strcmp(line, "/?")) {
        help();
    } else if (!strncmp(line, "/system", 7) && (line[7] == 0 || line[7] == ' ')) {
        const char *t = line + 7;
        while (*t == ' ') t++;
        free(st->system);
        st->system = *t ? strdup(t) : NULL;
        printf(*t ? "system prompt set\n" : "system prompt cleared\n");
    } else if (!strcmp(line, "/reset")) {
        json_array_clear(st->msgs);
        printf("conversation cleared\n");
    } else if (!strncmp(line, "/save", 5) && (line[5] == 0 || line[5] == ' ')) {
        const char *t = line + 5;
        while (*t == ' ') t++;
        save(st, t);
    } else {
        printf("unknown command %s (/help lists them)\n", line);
    }
    return 0;
}

/* A line from the user (OWNED), or NULL at end of input. Ctrl-C clears the line. */
static char *read_line(run_state *st)
{
    for (;;) {
        interrupted = 0;
        char *line;
        if (st->tty) {
            line = readline(st->chat ? ">>> " : "... ");
        } else {
            char buf[65536];
            line = fgets(buf, sizeof buf, stdin) ? strdup(buf) : NULL;
            if (line) line[strcspn(line, "\n")] = 0;
        }
        if (line) return line;
        if (interrupted) { /* Ctrl-C at the prompt: a fresh line, not the end */
            printf("\n");
            continue;
        }
        return NULL;
    }
}

static void loop(run_state *st)
{
    for (;;) {
        char *line = read_line(st);
        if (!line) {
            printf("\n");
            return;
        }
        char *t = line;
        while (*t == ' ' || *t == '\t') t++;
        if (!*t) {
            free(line);
            continue;
        }
        if (st->tty) add_history(t);
        if (*t == '/') {
            int quit = command(st, t);
            free(line);
            if (quit) return;
            continue;
        }
        json_array_append_new(st->msgs, json_pack("{s:s, s:s}", "role", "user", "content", t));
        free(line);
        answer(st);
    }
}

/* ---------------------------------------------------------------- the verb */

static void close_all(run_state *st)
{
    eng_engine_stop(st->eng);
    srv_chat_free(st->chat);
    tok_destroy(st->tok);
    eng_runtime_close(st->rt);
    json_decref(st->msgs);
    free(st->system);
    wt_config_free(&st->cfg);
}

int cli_run(int argc, char **argv)
{
    run_flags f = {.temperature = 0.7, .top_p = 1.0};
    cli_kv_flags kvf = {0};
    cli_flag flags[] = {
        {"model", CLI_STR, &f.model, "DIR|REPO", "the model (also as the first argument); default: "
         "the built-in " CLI_DEFAULT_MODEL_NAME, 0},
        {"offline", CLI_BOOL, &f.offline, NULL, "never download", 0},
        {"system", CLI_STR, &f.system, "TEXT", "system prompt", 0},
        {"temperature", CLI_FLOAT, &f.temperature, "T", "temperature (else generation_config, else 0.7)", 0},
        {"top-p", CLI_FLOAT, &f.top_p, "P", "top_p (else generation_config, else 1)", 0},
        {"max-tokens", CLI_INT, &f.max_tokens, "N", "cap on each answer (default: the room left)", 0},
        {"ignore-eos", CLI_BOOL, &f.ignore_eos, NULL, "keep going past the model's end-of-sequence tokens (until --max-tokens)", 0},
        {"thinking", CLI_STR, &f.thinking, "true|false", "enable_thinking for the chat template", 0},
        {"ctx", CLI_INT, &f.ctx, "N", "context length (default: min(model, 4096))", 0},
        {"threads", CLI_INT, &f.threads, "N", "compute threads (default: all CPUs)", 0},
        {"data-dir", CLI_STR, &f.data_dir, "DIR", "where /save keeps conversations (as kiln serve)", 0},
        CLI_KV_FLAGS(kvf),
        {0},
    };
    const char *pos = argc > 1 && argv[1][0] != '-' ? argv[1] : NULL;
    if (pos) {
        argv[1] = argv[0];
        argc--;
        argv++;
    }
    int pr = cli_parse("run", "Chat with a model in the terminal: kiln run [ORG/NAME|DIR]", flags, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if (pos && f.model) {
        fprintf(stderr, "kiln run: give the model once (argument or --model)\n");
        return 2;
    }
    if (pos) f.model = pos;
    if (f.temperature < 0 || f.temperature > 2 || f.top_p <= 0 || f.top_p > 1 || f.ctx < 0 ||
        f.threads < 0 || f.max_tokens < 0) {
        fprintf(stderr, "kiln run: --temperature in [0, 2], --top-p in (0, 1], counts >= 0\n");
        return 2;
    }
    run_state st;
    memset(&st, 0, sizeof st);
    st.f = &f;
    st.flags = flags;
    st.thinking = f.thinking ? (!strcmp(f.thinking, "true") || !strcmp(f.thinking, "1")) : -1;
    st.tty = isatty(0) && isatty(1);
    if (cli_pick_model("run", f.model, f.offline, st.dir, sizeof st.dir, st.id, sizeof st.id)) return 1;
    kiln_err err;
    if (wt_config_load(st.dir, &st.cfg, &err)) return cli_fail("run", &err);
    eng_runtime_opts o = eng_runtime_opts_default();
    o.n_threads = (int)f.threads;
    o.ctx = (int32_t)f.ctx;
    o.max_seqs = 1;
    o.isa = getenv("KILN_ISA");
    if (cli_kv_apply("run", &kvf, &o)) {
        wt_config_free(&st.cfg);
        return 2;
    }
    cli_warm_weights(st.dir, st.id, NULL, NULL);
    if (eng_runtime_open(st.dir, &o, &st.rt, &err) || tok_load(st.dir, &st.tok, &err)) {
        close_all(&st);
        return cli_fail("run", &err);
    }
    kiln_code crc = srv_chat_load(st.dir, &st.chat, &err);
    if (crc && crc != KILN_E_NOT_FOUND) {
        close_all(&st);
        return cli_fail("run", &err);
    }
    eng_engine_opts eo = eng_engine_opts_default();
    if (eng_engine_start(st.rt, st.tok, &eo, &st.eng, &err)) {
        close_all(&st);
        return cli_fail("run", &err);
    }
    st.msgs = json_array();
    st.system = f.system ? strdup(f.system) : NULL;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint; /* no SA_RESTART: a read at the prompt returns */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    printf("kiln run: %s (ctx %d, %s) — /help for commands, Ctrl-C stops an answer, Ctrl-D quits\n",
           st.id, (int)st.rt->o.ctx, st.chat ? "chat" : "completion mode: no chat template, it continues your text");
    fflush(stdout);
    loop(&st);
    close_all(&st);
    return 0;
}
