/*
 * test_srv_conv.c — the conversation store (srv_conv.c) and its REST mapping
 * (srv_conv_api.c) on a temporary SQLite file: create / get / replace / append /
 * rename / delete, FTS5 search (words, prefixes, diacritics, snippets, rank; no
 * FTS syntax reaches SQLite from the user), export then import round trip, bad
 * documents refused with the field named, limits, reopening the file, and ids that
 * never escape the store.
 */
#include "server/srv_conv.h"
#include "server/srv_int.h"
#include "test.h"

#include <stdlib.h>
#include <sys/stat.h>

static char dir[256];

static srv_conv_store *fresh(void)
{
    snprintf(dir, sizeof dir, "/tmp/kiln-conv-test-XXXXXX");
    if (!mkdtemp(dir)) return NULL;
    srv_conv_store *st = NULL;
    kiln_err err;
    if (srv_conv_open(dir, &st, &err) != KILN_OK) fprintf(stderr, "open: %s\n", err.msg);
    return st;
}

static void cleanup(srv_conv_store *st)
{
    char cmd[400];
    srv_conv_close(st);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
}

static json_t *doc(const char *title, const char *u, const char *a)
{
    return json_pack("{s:s, s:s, s:{s:f}, s:[{s:s, s:s}, {s:s, s:s, s:{s:i}}]}", "title", title, "system",
                     "be kind", "settings", "temperature", 0.5, "messages", "role", "user", "content", u,
                     "role", "assistant", "content", a, "figures", "completion_tokens", 7);
}

/* REST call helper: status, body in *out (OWNED). */
static int call(srv_conv_store *st, const char *method, const char *rest, const char *q,
                const char *body, json_t **out)
{
    srv_conv_call c = {.method = method, .rest = rest, .q = q, .body = body, .len = body ? strlen(body) : 0};
    char att[128];
    return srv_conv_route(st, "", &c, out, att, sizeof att);
}

static void test_create_get_replace_append_delete(void)
{
    srv_conv_store *st = fresh();
    ASSERT_TRUE(st != NULL);
    kiln_err err;
    char id[SRV_CONV_ID_MAX];
    json_t *d = doc("Greetings", "hello there", "general kenobi");
    ASSERT_OK(srv_conv_create(st, d, id, &err));
    json_decref(d);
    ASSERT_TRUE(srv_conv_id_ok(id) && !strncmp(id, "conv_", 5) && strlen(id) == 29);
    json_t *got;
    ASSERT_OK(srv_conv_get(st, id, &got, &err));
    ASSERT_STR_EQ(json_string_value(json_object_get(got, "title")), "Greetings");
    ASSERT_STR_EQ(json_string_value(json_object_get(got, "system")), "be kind");
    ASSERT_NEAR_F32(json_real_value(json_object_get(json_object_get(got, "settings"), "temperature")), 0.5, 1e-9);
    json_t *msgs = json_object_get(got, "messages");
    ASSERT_EQ_I64(json_array_size(msgs), 2);
    ASSERT_EQ_I64(json_integer_value(json_object_get(json_object_get(json_array_get(msgs, 1), "figures"),
                                                     "completion_tokens")), 7);
    json_decref(got);
    /* append one, then an array */
    json_t *m = json_pack("{s:s, s:s, s:s}", "role", "user", "content", "and then?", "reasoning", "hmm");
    long long first = 0;
    ASSERT_OK(srv_conv_append(st, id, m, &first, &err));
    ASSERT_TRUE(first > 0);
    json_decref(m);
    m = json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "assistant", "content", "x", "role", "user", "content", "y");
    ASSERT_OK(srv_conv_append(st, id, m, NULL, &err));
    json_decref(m);
    ASSERT_OK(srv_conv_get(st, id, &got, &err));
    msgs = json_object_get(got, "messages");
    ASSERT_EQ_I64(json_array_size(msgs), 5);
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(msgs, 2), "reasoning")), "hmm");
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(msgs, 4), "content")), "y");
    json_decref(got);
    /* replace: messages rewritten, title kept when absent */
    m = json_pack("{s:[{s:s, s:s}]}", "messages", "role", "user", "content", "only this");
    ASSERT_OK(srv_conv_replace(st, id, m, &err));
    json_decref(m);
    ASSERT_OK(srv_conv_get(st, id, &got, &err));
    ASSERT_EQ_I64(json_array_size(json_object_get(got, "messages")), 1);
    ASSERT_STR_EQ(json_string_value(json_object_get(got, "title")), "Greetings");
    json_decref(got);
    ASSERT_OK(srv_conv_delete(st, id, &err));
    ASSERT_EQ_I64(srv_conv_get(st, id, &got, &err), KILN_E_NOT_FOUND);
    ASSERT_EQ_I64(srv_conv_delete(st, id, &err), KILN_E_NOT_FOUND);
    json_t *lost = json_pack("{s:s}", "role", "user");
    kiln_code rc = srv_conv_append(st, "conv_nope", lost, NULL, &err);
    json_decref(lost);
    ASSERT_EQ_I64(rc, KILN_E_NOT_FOUND);
    cleanup(st);
}

static const char *id_of(json_t *list, size_t i)
{
    return json_string_value(json_object_get(json_array_get(list, i), "id"));
}

static void test_search_words_prefixes_diacritics_and_operators(void)
{
    srv_conv_store *st = fresh();
    ASSERT_TRUE(st != NULL);
    kiln_err err;
    char a[SRV_CONV_ID_MAX], b[SRV_CONV_ID_MAX], c[SRV_CONV_ID_MAX];
    json_t *d = doc("Trip to Zürich", "what should I pack for the mountains", "warm clothes");
    ASSERT_OK(srv_conv_create(st, d, a, &err));
    json_decref(d);
    d = doc("Soup", "a recipe for tomato soup", "simmer the tomatoes with basil");
    ASSERT_OK(srv_conv_create(st, d, b, &err));
    json_decref(d);
    d = doc("Quotes \"and\" NEAR OR", "x AND y OR z NOT w", "column:filter *");
    ASSERT_OK(srv_conv_create(st, d, c, &err));
    json_decref(d);
    json_t *list;
    int more;
    ASSERT_OK(srv_conv_list(st, NULL, 10, 0, &list, &more, &err));
    ASSERT_EQ_I64(json_array_size(list), 3);
    ASSERT_STR_EQ(id_of(list, 0), c); /* most recent first */
    json_decref(list);
    ASSERT_OK(srv_conv_list(st, NULL, 2, 0, &list, &more, &err));
    ASSERT_EQ_I64(json_array_size(list), 2);
    ASSERT_EQ_I64(more, 1);
    json_decref(list);
    ASSERT_OK(srv_conv_list(st, "tomato", 10, 0, &list, &more, &err));
    ASSERT_EQ_I64(json_array_size(list), 1);
    ASSERT_STR_EQ(id_of(list, 0), b);
    const char *snip = json_string_value(json_object_get(json_array_get(list, 0), "snippet"));
    ASSERT_TRUE(snip && strstr(snip, "\xee\x80\x80" "tomato"));
    json_decref(list);
    ASSERT_OK(srv_conv_list(st, "zurich", 10, 0, &list, &more, &err)); /* diacritics folded */
    ASSERT_EQ_I64(json_array_size(list), 1);
    ASSERT_STR_EQ(id_of(list, 0), a);
    json_decref(list);
    ASSERT_OK(srv_conv_list(st, "moun", 10, 0, &list, &more, &err)); /* the last word is a prefix */
    ASSERT_EQ_I64(json_array_size(list), 1);
    json_decref(list);
    ASSERT_OK(srv_conv_list(st, "soup basil", 10, 0, &list, &more, &err)); /* every word: title + message */
    ASSERT_EQ_I64(json_array_size(list), 0);
    json_decref(list);
    ASSERT_OK(srv_conv_list(st, "tomatoes basil", 10, 0, &list, &more, &err));
    ASSERT_EQ_I64(json_array_size(list), 1);
    json_decref(list);
    const char *hostile[] = {"AND", "\"", "NEAR(", "col:x", "*", "x OR", "^", "-a", "\"\"\"", "((", "NOT"};
    for (size_t i = 0; i < sizeof hostile / sizeof *hostile; i++) {
        kiln_code rc = srv_conv_list(st, hostile[i], 10, 0, &list, &more, &err);
        if (rc) TEST_FAIL_("search '%s': %s", hostile[i], err.msg);
        json_decref(list);
    }
    ASSERT_OK(srv_conv_list(st, "AND", 10, 0, &list, &more, &err)); /* a word like any other */
    ASSERT_EQ_I64(json_array_size(list), 1);
    ASSERT_STR_EQ(id_of(list, 0), c);
    json_decref(list);
    ASSERT_OK(srv_conv_list(st, "   ", 10, 0, &list, &more, &err)); /* no word: the plain list */
    ASSERT_EQ_I64(json_array_size(list), 3);
    json_decref(list);
    /* rename reindexes the title; delete removes the messages from the index */
    json_t *t = json_pack("{s:s}", "title", "Tomato thoughts");
    ASSERT_OK(srv_conv_replace(st, a, t, &err));
    json_decref(t);
    ASSERT_OK(srv_conv_list(st, "thoughts", 10, 0, &list, &more, &err));
    ASSERT_EQ_I64(json_array_size(list), 1);
    json_decref(list);
    ASSERT_OK(srv_conv_delete(st, b, &err));
    ASSERT_OK(srv_conv_list(st, "basil", 10, 0, &list, &more, &err));
    ASSERT_EQ_I64(json_array_size(list), 0);
    json_decref(list);
    cleanup(st);
}

static void test_export_import_round_trip_and_reopen(void)
{
    srv_conv_store *st = fresh();
    ASSERT_TRUE(st != NULL);
    kiln_err err;
    char a[SRV_CONV_ID_MAX], b[SRV_CONV_ID_MAX];
    json_t *d = doc("One", "ünïcödé ✓ 😀", "two\nlines");
    ASSERT_OK(srv_conv_create(st, d, a, &err));
    json_decref(d);
    d = doc("Two", "b", "c");
    ASSERT_OK(srv_conv_create(st, d, b, &err));
    json_decref(d);
    json_t *ex, *ids;
    ASSERT_OK(srv_conv_export(st, NULL, &ex, &err));
    ASSERT_STR_EQ(json_string_value(json_object_get(ex, "object")), "kiln.conversations");
    ASSERT_EQ_I64(json_array_size(json_object_get(ex, "conversations")), 2);
    ASSERT_OK(srv_conv_import(st, ex, &ids, &err));
    ASSERT_EQ_I64(json_array_size(ids), 2);
    json_t *copy;
    ASSERT_OK(srv_conv_get(st, json_string_value(json_array_get(ids, 0)), &copy, &err));
    json_t *orig = json_array_get(json_object_get(ex, "conversations"), 0);
    ASSERT_STR_EQ(json_string_value(json_object_get(copy, "title")), json_string_value(json_object_get(orig, "title")));
    ASSERT_TRUE(json_equal(json_object_get(json_array_get(json_object_get(copy, "messages"), 0), "content"),
                           json_object_get(json_array_get(json_object_get(orig, "messages"), 0), "content")));
    ASSERT_NEAR_F32(json_real_value(json_object_get(copy, "created_at")), json_real_value(json_object_get(orig, "created_at")), 1e-3);
    json_decref(copy);
    json_decref(ids);
    json_decref(ex);
    /* all or nothing: one bad document imports none */
    json_t *bad = json_pack("[{s:s}, {s:[{s:s}]}]", "title", "fine", "messages", "role", "wizard");
    ASSERT_EQ_I64(srv_conv_import(st, bad, &ids, &err), KILN_E_INVALID);
    json_decref(bad);
    srv_conv_close(st);
    /* the file is 0600 and reopens with everything in it */
    char path[400];
    snprintf(path, sizeof path, "%s/%s", dir, SRV_CONV_DB_NAME);
    struct stat sb;
    ASSERT_TRUE(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0600);
    ASSERT_OK(srv_conv_open(dir, &st, &err));
    json_t *list;
    int more;
    ASSERT_OK(srv_conv_list(st, NULL, 100, 0, &list, &more, &err));
    ASSERT_EQ_I64(json_array_size(list), 4);
    json_decref(list);
    cleanup(st);
}

static void test_rest_routes_and_errors(void)
{
    srv_conv_store *st = fresh();
    ASSERT_TRUE(st != NULL);
    json_t *b;
    ASSERT_EQ_I64(call(st, "POST", "", NULL, "{\"title\": \"t\", \"messages\": []}", &b), 200);
    char id[64];
    snprintf(id, sizeof id, "/%s", json_string_value(json_object_get(b, "id")));
    json_decref(b);
    ASSERT_EQ_I64(call(st, "GET", id, NULL, NULL, &b), 200);
    json_decref(b);
    char sub[128];
    snprintf(sub, sizeof sub, "%s/messages", id);
    ASSERT_EQ_I64(call(st, "POST", sub, NULL, "{\"role\": \"user\", \"content\": \"hi\"}", &b), 200);
    ASSERT_EQ_I64(json_integer_value(json_object_get(b, "appended")), 1);
    json_decref(b);
    ASSERT_EQ_I64(call(st, "PATCH", id, NULL, "{\"title\": \"renamed\"}", &b), 200);
    ASSERT_STR_EQ(json_string_value(json_object_get(b, "title")), "renamed");
    ASSERT_EQ_I64(json_array_size(json_object_get(b, "messages")), 1);
    json_decref(b);
    ASSERT_EQ_I64(call(st, "PATCH", id, NULL, "{\"messages\": []}", &b), 400); /* PUT replaces messages */
    json_decref(b);
    struct {
        const char *method, *rest, *body, *param;
        int status;
    } bad[] = {
        {"POST", "", "{\"title\": 5}", NULL, 400},
        {"POST", "", "[1,2]", NULL, 400},
        {"POST", "", "{nope", NULL, 400},
        {"POST", "", "{\"messages\": [{\"role\": \"user\", \"content\": 3}]}", NULL, 400},
        {"POST", "", "{\"settings\": []}", NULL, 400},
        {"POST", "", "{\"a\": 1, \"a\": 2}", NULL, 400},
        {"GET", "/conv_missing", NULL, NULL, 404},
        {"GET", "/../../etc/passwd", NULL, NULL, 404},
        {"GET", "/a%20b", NULL, NULL, 404},
        {"PUT", "", "{}", NULL, 405},
        {"POST", "/conv_x/other", "{}", NULL, 404},
        {"GET", "/import", NULL, NULL, 405},
        {"DELETE", "/conv_missing", NULL, NULL, 404},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int status = call(st, bad[i].method, bad[i].rest, NULL, bad[i].body, &b);
        if (status != bad[i].status)
            TEST_FAIL_("%s %s %s: %d, want %d", bad[i].method, bad[i].rest, bad[i].body ? bad[i].body : "",
                       status, bad[i].status);
        ASSERT_TRUE(json_object_get(b, "error") != NULL);
        json_decref(b);
    }
    srv_conv_call c = {.method = "GET", .rest = "", .limit = "0"};
    char att[64];
    ASSERT_EQ_I64(srv_conv_route(st, "", &c, &b, att, sizeof att), 400);
    json_decref(b);
    c.rest = "/export";
    c.limit = NULL;
    ASSERT_EQ_I64(srv_conv_route(st, "", &c, &b, att, sizeof att), 200);
    ASSERT_STR_EQ(att, "kiln-conversations.json");
    json_decref(b);
    ASSERT_EQ_I64(srv_conv_route(NULL, "no data folder", &c, &b, att, sizeof att), 503);
    json_decref(b);
    ASSERT_EQ_I64(call(st, "DELETE", id, NULL, NULL, &b), 200);
    ASSERT_TRUE(json_is_true(json_object_get(b, "deleted")));
    json_decref(b);
    cleanup(st);
}

static void test_limits(void)
{
    srv_conv_store *st = fresh();
    ASSERT_TRUE(st != NULL);
    kiln_err err;
    char id[SRV_CONV_ID_MAX];
    char big[SRV_CONV_MAX_TITLE + 2];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    json_t *d = json_pack("{s:s}", "title", big);
    ASSERT_EQ_I64(srv_conv_create(st, d, id, &err), KILN_E_TOO_LARGE);
    json_decref(d);
    d = json_pack("{s:s%}", "title", "a\0b", (size_t)3);
    ASSERT_EQ_I64(srv_conv_create(st, d, id, &err), KILN_E_INVALID);
    json_decref(d);
    json_t *msgs = json_array();
    for (int i = 0; i < SRV_CONV_MAX_MESSAGES; i++)
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", "m"));
    d = json_pack("{s:O}", "messages", msgs);
    ASSERT_OK(srv_conv_create(st, d, id, &err));
    json_t *one = json_pack("{s:s, s:s}", "role", "user", "content", "one too many");
    ASSERT_EQ_I64(srv_conv_append(st, id, one, NULL, &err), KILN_E_TOO_LARGE);
    json_decref(one);
    json_decref(d);
    json_decref(msgs);
    cleanup(st);
}

int main(void)
{
    RUN(test_create_get_replace_append_delete);
    RUN(test_search_words_prefixes_diacritics_and_operators);
    RUN(test_export_import_round_trip_and_reopen);
    RUN(test_rest_routes_and_errors);
    RUN(test_limits);
    return TEST_DONE();
}
