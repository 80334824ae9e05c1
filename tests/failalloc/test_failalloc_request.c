/*
 * test_failalloc_request.c — allocation failures over a whole request's life.
 *
 * An in-process kiln server (stories260K with a small chat template, the
 * hermes tool-call parser, 2 compute threads) on 127.0.0.1 gets a streaming
 * chat request with tools, logprobs and a stop string, then a non-streaming
 * one (developer role, content parts, top logprobs): JSON parse → template
 * render → tokenize → engine (admission, steps, sampling, detokenize, stop
 * strings) → tool-call parsing → SSE reply. failalloc.h makes the N-th
 * allocation of kiln's code (and jansson's) fail:
 *   1. one request is counted (T allocations from arming to the reply's end);
 *   2. for N over 1..T — every N up to 64, then a deterministic sample so
 *      that about KILN_FAILALLOC_RUNS (default 160) runs happen in all;
 *      KILN_FAILALLOC_RUNS=0 runs every N — the request is sent with the N-th
 *      allocation failing: the server must answer with a clean HTTP reply (a
 *      status line; 200 with [DONE] or an error event, or 4xx/5xx with an
 *      error object), or close the connection when it could not even build
 *      one (counted and printed, and allowed only there), within 30 s;
 *      a 200 must be the whole reply (stream: content, tool calls and finish
 *      reason as the reference's; full: the JSON equal to the reference's but
 *      for id, created and cached tokens); then a plain request must give
 *      200 and the baseline text (nothing broken, no KV block or slot lost);
 *   3. at the end /stats shows nothing running and no KV block in use, and
 *      the sanitizer build's LeakSanitizer reports no leak at exit.
 * Linux only (GNU ld's --wrap); CMake adds it where that links.
 */
#include "engine/eng_engine.h"
#include "engine/eng_runtime.h"
#include "failalloc.h"
#include "server/srv.h"
#include "test.h"
#include "tokenizer/tok.h"
#include "util/kiln_json.h"
#include "util/kiln_log.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STORIES KILN_SHARED_DIR "/models/stories260K"

static char model_dir[512];
static char resp[1 << 16]; /* static: the test's own buffers never allocate */

static const char TEMPLATE[] =
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    "{% if tools %}tools: {% for t in tools %}{{ t.function.name }} {% endfor %}\n{% endif %}"
    "{% if add_generation_prompt %}assistant:{% endif %}";

static const char REQ_INJECT[] =
    "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
    "{\"role\":\"user\",\"content\":\"Once upon a time there was a cat\"}],"
    "\"max_tokens\":6,\"temperature\":0,\"stream\":true,"
    "\"stream_options\":{\"include_usage\":true},\"logprobs\":true,\"top_logprobs\":2,"
    "\"stop\":[\"zzz\"],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]}";

static const char REQ_FULL[] =
    "{\"messages\":[{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"Be \"},"
    "{\"type\":\"text\",\"text\":\"brief.\"}]},"
    "{\"role\":\"user\",\"content\":\"Once upon a time there was a dog\"}],"
    "\"max_tokens\":6,\"temperature\":0,\"logprobs\":true,\"top_logprobs\":3,"
    "\"stop\":[\"zzz\",\"qqq\"],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}}}}}]}";

static const char REQ_PLAIN[] =
    "{\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time there was a cat\"}],"
    "\"max_tokens\":6,\"temperature\":0}";

/* A snapshot folder: stories260K's files plus a tokenizer_config.json that
 * has a chat template (stories260K itself is no chat model). */
static int make_model_dir(void)
{
    snprintf(model_dir, sizeof model_dir, "%s/failalloc-model-%d", KILN_BINARY_DIR, (int)getpid());
    mkdir(model_dir, 0700);
    const char *files[] = {"config.json", "generation_config.json", "model.safetensors",
                           "tokenizer.json"};
    char a[1024], b[1024];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(a, sizeof a, "%s/%s", STORIES, files[i]);
        snprintf(b, sizeof b, "%s/%s", model_dir, files[i]);
        if (access(a, R_OK) != 0) return -1;
        unlink(b);
        if (symlink(a, b) != 0) return -1;
    }
    snprintf(a, sizeof a, "%s/tokenizer_config.json", STORIES);
    json_t *tc = json_load_file(a, 0, NULL);
    if (!tc) return -1;
    json_object_set_new(tc, "chat_template", json_string(TEMPLATE));
    snprintf(b, sizeof b, "%s/tokenizer_config.json", model_dir);
    int rc = json_dump_file(tc, b, 0);
    json_decref(tc);
    return rc;
}

static void remove_model_dir(void)
{
    const char *files[] = {"config.json", "generation_config.json", "model.safetensors",
                           "tokenizer.json", "tokenizer_config.json"};
    char b[1024];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(b, sizeof b, "%s/%s", model_dir, files[i]);
        unlink(b);
    }
    rmdir(model_dir);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One HTTP/1.1 request (Connection: close); the whole reply lands in resp.
 * Returns the status (0: closed without a status line, -1: no connection,
 * -2: no end within 30 s). */
static int http(int port, const char *method, const char *path, const char *body)
{
    resp[0] = 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    char head[512];
    size_t bl = body ? strlen(body) : 0;
    int hl = snprintf(head, sizeof head,
                      "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                      method, path, bl);
    if (send(fd, head, (size_t)hl, MSG_NOSIGNAL) != hl ||
        (bl && send(fd, body, bl, MSG_NOSIGNAL) != (ssize_t)bl)) {
        close(fd);
        return 0;
    }
    size_t got = 0;
    double t0 = now_s();
    int ended = 0;
    while (now_s() - t0 < 30.0) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 1000) <= 0) continue;
        ssize_t n = recv(fd, resp + got, sizeof resp - 1 - got, 0);
        if (n <= 0) {
            ended = 1;
            break;
        }
        got += (size_t)n;
        if (got == sizeof resp - 1) got = 0; /* only the status line and the tail matter */
    }
    resp[got] = 0;
    close(fd);
    if (!ended) return -2;
    int status = 0;
    if (sscanf(resp, "HTTP/1.%*d %d", &status) != 1) return 0;
    return status;
}

/* The reply's text: the concatenated "content" strings of a non-streaming chat reply. */
static int reply_text(char *out, size_t n)
{
    const char *b = strstr(resp, "\r\n\r\n");
    json_t *j = b ? json_loads(b + 4, 0, NULL) : NULL;
    const char *c = json_string_value(
        json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0),
                                        "message"),
                        "content"));
    int ok = c != NULL;
    snprintf(out, n, "%s", c ? c : "");
    json_decref(j);
    return ok ? 0 : -1;
}

typedef struct {
    eng_runtime *rt;
    tok_tokenizer *tok;
    eng_engine *eng;
    srv_server *srv;
} server;

static int start(server *s)
{
    memset(s, 0, sizeof *s);
    kiln_err err;
    srv_config sc = srv_config_default();
    sc.port = 0;
    sc.model_id = "stories-chat";
    sc.model_dir = model_dir;
    sc.tool_parser = 1; /* SRV_TC_HERMES */
    sc.batch = 4;
    if (srv_start(&sc, &s->srv, &err)) goto fail;
    eng_runtime_opts o = eng_runtime_opts_default();
    o.n_threads = 2;
    o.ctx = 256;
    o.max_seqs = 4;
    if (eng_runtime_open(model_dir, &o, &s->rt, &err) || tok_load(model_dir, &s->tok, &err))
        goto fail;
    eng_engine_opts eo = eng_engine_opts_default();
    if (eng_engine_start(s->rt, s->tok, &eo, &s->eng, &err)) goto fail;
    srv_model m = {.engine = s->eng, .tok = s->tok, .ctx = s->rt->o.ctx, .n_threads = 2};
    if (srv_attach(s->srv, &m, &err)) goto fail;
    return 0;
fail:
    fprintf(stderr, "  start: %s\n", err.msg);
    return -1;
}

static void stop(server *s)
{
    if (s->srv) srv_quiesce(s->srv);
    eng_engine_stop(s->eng);
    srv_stop(s->srv);
    tok_destroy(s->tok);
    eng_runtime_close(s->rt);
}

/* The body of resp with chunked transfer coding undone, into out (NUL-terminated). */
static size_t dechunk(char *out, size_t cap)
{
    const char *b = strstr(resp, "\r\n\r\n");
    size_t n = 0;
    if (!b) return 0;
    b += 4;
    if (!strstr(resp, "chunked")) {
        n = strlen(b) < cap - 1 ? strlen(b) : cap - 1;
        memcpy(out, b, n);
    } else {
        for (;;) {
            char *end;
            unsigned long k = strtoul(b, &end, 16);
            if (end == b || !k || strncmp(end, "\r\n", 2)) break;
            b = end + 2;
            if (strlen(b) < k || n + k >= cap) break;
            memcpy(out + n, b, k);
            n += k;
            b += k + 2;
        }
    }
    out[n] = 0;
    return n;
}

/* What a streamed chat reply says: its content, its tool calls' names and
 * arguments and its finish reason, in order, as one string. */
static void sse_summary(char *out, size_t cap)
{
    static char body[1 << 16];
    dechunk(body, sizeof body);
    size_t n = 0;
    out[0] = 0;
    for (char *line = strtok(body, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "data: {", 7)) continue;
        json_error_t je;
        json_t *j = json_loads(line + 6, 0, &je);
        if (!j) fprintf(stderr, "  (unparsed line: %s at %d: %s)\n", je.text, je.position, line);
        json_t *c = json_array_get(json_object_get(j, "choices"), 0);
        json_t *d = json_object_get(c, "delta");
        const char *parts[4] = {json_string_value(json_object_get(d, "content")),
                                json_string_value(json_object_get(c, "finish_reason")), NULL,
                                NULL};
        json_t *tc = json_array_get(json_object_get(d, "tool_calls"), 0);
        json_t *fn = json_object_get(tc, "function");
        parts[2] = json_string_value(json_object_get(fn, "name"));
        parts[3] = json_string_value(json_object_get(fn, "arguments"));
        for (int i = 0; i < 4; i++)
            if (parts[i]) n += (size_t)snprintf(out + n, n < cap ? cap - n : 0, "%d:%s|", i, parts[i]);
        json_decref(j);
        if (n >= cap) break;
    }
}

/* A non-streaming reply as canonical JSON (sorted keys) without what changes
 * from run to run (id, created, cached token counts). */
static void full_summary(char *out, size_t cap)
{
    const char *b = strstr(resp, "\r\n\r\n");
    json_t *j = b ? json_loads(b + 4, 0, NULL) : NULL;
    json_object_del(j, "id");
    json_object_del(j, "created");
    json_object_del(json_object_get(json_object_get(j, "usage"), "prompt_tokens_details"),
                    "cached_tokens");
    char *t = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    snprintf(out, cap, "%s", t ? t : "");
    free(t);
    json_decref(j);
}

/* A clean reply to the injected request (see the file comment). */
static const char *judge(int status)
{
    if (status == -2) return "no end within 30 s";
    if (status == -1) return "no connection";
    if (status == 0) return NULL; /* closed: judged by the caller */
    if (status == 200 && strstr(resp, "text/event-stream"))
        return strstr(resp, "data: [DONE]") || strstr(resp, "\"error\"") ? NULL
                                                                          : "200 without an end";
    if (status == 200) return NULL; /* compared with the reference by the caller */
    if (status >= 400 && status < 600)
        return strstr(resp, "\"error\"") ? NULL : "error status without an error object";
    return "unexpected status";
}

/* Sweeps the allocations of one request (stream: SSE, else one JSON reply). */
static void sweep(int port, const char *req, int stream, const char *base)
{
    static char want[16384], got[16384], text[4096];
    /* 1. the request's allocations (twice: the first warms lazily built state) */
    ASSERT_EQ_I64(http(port, "POST", "/v1/chat/completions", req), 200);
    uint64_t c0 = failalloc_count();
    ASSERT_EQ_I64(http(port, "POST", "/v1/chat/completions", req), 200);
    uint64_t total = failalloc_count() - c0;
    if (stream) {
        ASSERT_TRUE(strstr(resp, "data: [DONE]") != NULL);
        sse_summary(want, sizeof want);
    } else {
        full_summary(want, sizeof want);
    }
    ASSERT_TRUE(strlen(want) > 4);
    ASSERT_TRUE(total > 50);
    /* 2. the sweep */
    const char *rv = getenv("KILN_FAILALLOC_RUNS");
    uint64_t runs = rv && *rv ? strtoull(rv, NULL, 10) : 160;
    uint64_t stride = runs == 0 || total <= runs ? 1 : (total - 64) / (runs - 64) + 1;
    int n_runs = 0, n_closed = 0, n_failed_replies = 0, bad = 0;
    double t0 = now_s();
    for (uint64_t n = 1; n <= total + 8 && bad < 20; n = n < 64 ? n + 1 : n + stride) {
        /* the sample moves inside each stride from run to run of the loop (n * 7) */
        uint64_t at = n < 64 || stride == 1 ? n : n - (n * 7) % stride;
        const char *only = getenv("KILN_FAILALLOC_ONLY"); /* debugging one N */
        if (only && *only && at != strtoull(only, NULL, 10)) continue;
        uint64_t f0 = failalloc_failures();
        failalloc_arm(at);
        int st = http(port, "POST", "/v1/chat/completions", req);
        failalloc_arm(0);
        int injected = failalloc_failures() > f0;
        const char *why = judge(st);
        n_runs++;
        if (st == 0) {
            n_closed++;
            fprintf(stderr, "  note: allocation %" PRIu64 " failed: connection closed without a reply\n", at);
        }
        if (st != 200 || strstr(resp, "\"error\"")) {
            n_failed_replies++;
        } else if (!why) { /* a 200 without an error must be the whole reply */
            if (stream)
                sse_summary(got, sizeof got);
            else
                full_summary(got, sizeof got);
            if (strcmp(got, want)) why = "a 200 reply that differs from the reference";
        }
        if (why) {
            fprintf(stderr, "  FAIL at allocation %" PRIu64 " (injected %d): %s\n%.4000s\n", at,
                    injected, why, resp);
            if (why[0] == 'a') fprintf(stderr, "  want %s\n  got  %s\n", want, got);
            bad++;
        }
        /* the server still works, and gives the same text */
        int st2 = http(port, "POST", "/v1/chat/completions", REQ_PLAIN);
        if (st2 != 200 || reply_text(text, sizeof text) != 0 || strcmp(text, base) != 0) {
            fprintf(stderr, "  FAIL after allocation %" PRIu64 " failed: the next request got %d: %.400s\n",
                    at, st2, resp);
            bad++;
        }
    }
    fprintf(stderr,
            "  %s: %" PRIu64 " allocations per request; %d runs (stride %" PRIu64 "), %d error "
            "replies, %d closed without a reply, %.1f s\n",
            stream ? "stream" : "full", total, n_runs, stride, n_failed_replies, n_closed,
            now_s() - t0);
    ASSERT_TRUE(!bad);
}

static void test_every_allocation_of_a_request_may_fail(void)
{
    if (make_model_dir() != 0) TEST_SKIP("no %s", STORIES);
    server s;
    ASSERT_TRUE(start(&s) == 0);
    int port = srv_port(s.srv);
    char base[4096];
    ASSERT_EQ_I64(http(port, "POST", "/v1/chat/completions", REQ_PLAIN), 200);
    ASSERT_TRUE(reply_text(base, sizeof base) == 0);
    sweep(port, REQ_INJECT, 1, base);
    sweep(port, REQ_FULL, 0, base);
    /* 3. nothing left behind in the engine. /stats is the snapshot taken at the
     * end of the engine's step, and the last reply completes inside that step:
     * wait (up to 5 s) for the snapshot after it instead of reading a stale one. */
    json_int_t active = -1, used = -1;
    for (int tries = 0; tries < 500 && (active != 0 || used != 0); tries++) {
        if (tries) usleep(10000);
        ASSERT_EQ_I64(http(port, "GET", "/stats", NULL), 200);
        const char *b = strstr(resp, "\r\n\r\n");
        json_t *j = b ? json_loads(b + 4, 0, NULL) : NULL;
        ASSERT_TRUE(j != NULL);
        active = json_integer_value(json_object_get(json_object_get(j, "batch"), "active"));
        used = json_integer_value(json_object_get(json_object_get(j, "kv"), "blocks_used"));
        json_decref(j);
    }
    ASSERT_EQ_I64(active, 0);
    ASSERT_EQ_I64(used, 0);
    stop(&s);
    remove_model_dir();
}

int main(void)
{
    kiln_json_init(); /* as main() does: jansson's allocations through kiln (and --wrap) */
    kiln_log_set_level(KLOG_ERROR); /* each injected failure would log a line */
    RUN(test_every_allocation_of_a_request_may_fail);
    return TEST_DONE();
}
