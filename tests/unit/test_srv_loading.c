/*
 * test_srv_loading.c — a server that is listening but has no model yet (between
 * srv_start and srv_attach, while `kiln serve` reads the weights): /health says
 * loading with the progress fraction, every 503 carries Retry-After, generation
 * and embeddings routes answer 503, the chat page is already served (so a browser
 * opened early shows "loading"), and conversations follow --data-dir.
 */
#include "server/srv.h"
#include "test.h"

#include <curl/curl.h>
#include <jansson.h>

typedef struct {
    char body[8192];
    size_t len;
    char retry_after[32];
    char ctype[128];
} reply;

static size_t on_body(char *p, size_t sz, size_t n, void *u)
{
    reply *r = u;
    size_t k = sz * n;
    if (r->len + k < sizeof r->body) {
        memcpy(r->body + r->len, p, k);
        r->len += k;
        r->body[r->len] = 0;
    }
    return k;
}

static size_t on_header(char *p, size_t sz, size_t n, void *u)
{
    reply *r = u;
    size_t k = sz * n;
    if (k > 13 && !strncasecmp(p, "Retry-After: ", 13)) snprintf(r->retry_after, sizeof r->retry_after, "%.*s", (int)(k - 15), p + 13);
    if (k > 14 && !strncasecmp(p, "Content-Type: ", 14)) snprintf(r->ctype, sizeof r->ctype, "%.*s", (int)(k - 16), p + 14);
    return k;
}

static long http(int port, const char *method, const char *path, const char *body, reply *r)
{
    memset(r, 0, sizeof *r);
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body) curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
    long status = 0;
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    return status;
}

static void test_loading_server_answers_503_with_retry_after_and_progress(void)
{
    srv_config cfg = srv_config_default();
    cfg.port = 0;
    cfg.model_id = "big-model";
    cfg.data_dir = ""; /* conversations off */
    srv_server *s;
    kiln_err err;
    ASSERT_OK(srv_start(&cfg, &s, &err));
    int port = srv_port(s);
    reply r;
    ASSERT_EQ_I64(http(port, "GET", "/health", NULL, &r), 503);
    ASSERT_STR_EQ(r.retry_after, "1");
    json_t *j = json_loads(r.body, 0, NULL);
    ASSERT_STR_EQ(json_string_value(json_object_get(j, "status")), "loading");
    ASSERT_STR_EQ(json_string_value(json_object_get(j, "model")), "big-model");
    ASSERT_TRUE(json_object_get(j, "progress") == NULL); /* unknown yet */
    json_decref(j);
    srv_set_load_progress(s, 0.25);
    ASSERT_EQ_I64(http(port, "GET", "/health", NULL, &r), 503);
    j = json_loads(r.body, 0, NULL);
    ASSERT_NEAR_F32(json_real_value(json_object_get(j, "progress")), 0.25, 1e-9);
    json_decref(j);
    const char *routes[][2] = {{"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"},
                               {"/v1/completions", "{\"prompt\":\"hi\"}"},
                               {"/v1/embeddings", "{\"input\":\"hi\"}"}};
    for (size_t i = 0; i < 3; i++) {
        ASSERT_EQ_I64(http(port, "POST", routes[i][0], routes[i][1], &r), 503);
        ASSERT_STR_EQ(r.retry_after, "1");
        ASSERT_TRUE(strstr(r.body, "loading") != NULL);
    }
    ASSERT_EQ_I64(http(port, "GET", "/", NULL, &r), 200); /* the page is there already */
    ASSERT_TRUE(strstr(r.ctype, "text/html") != NULL);
    ASSERT_TRUE(strstr(r.body, "/webui/app.js") != NULL);
    ASSERT_EQ_I64(http(port, "GET", "/webui/nope.js", NULL, &r), 404);
    ASSERT_EQ_I64(http(port, "GET", "/v1/conversations", NULL, &r), 503); /* --data-dir '' */
    ASSERT_TRUE(strstr(r.body, "not stored") != NULL);
    srv_quiesce(s);
    srv_stop(s);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    RUN(test_loading_server_answers_503_with_retry_after_and_progress);
    curl_global_cleanup();
    return TEST_DONE();
}
