/*
 * test_srv_error.c — the kiln_code → HTTP status / OpenAI error table and the
 * error JSON shape.
 */
#include "server/srv_error.h"
#include "test.h"

static void test_status_table(void)
{
    ASSERT_EQ_I64(srv_error_status(KILN_E_INVALID), 400);
    ASSERT_EQ_I64(srv_error_status(KILN_E_TOO_LARGE), 413);
    ASSERT_EQ_I64(srv_error_status(KILN_E_UNSUPPORTED), 400);
    ASSERT_EQ_I64(srv_error_status(KILN_E_NOT_FOUND), 404);
    ASSERT_EQ_I64(srv_error_status(KILN_E_INTERNAL), 500);
    ASSERT_EQ_I64(srv_error_status(KILN_E_NOMEM), 500);
    ASSERT_EQ_I64(srv_error_status(SRV_E_AUTH), 401);
    ASSERT_EQ_I64(srv_error_status(SRV_E_ROUTE), 404);
    ASSERT_EQ_I64(srv_error_status(SRV_E_METHOD), 405);
    ASSERT_EQ_I64(srv_error_status(SRV_E_QUEUE), 429);
    ASSERT_EQ_I64(srv_error_status(SRV_E_CONTEXT), 400);
    ASSERT_EQ_I64(srv_error_status(SRV_E_LOADING), 503);
    ASSERT_EQ_I64(srv_error_status(-5), 500);
    ASSERT_EQ_I64(srv_error_status(9999), 500);
    for (int k = 0; k < SRV_E_END; k++) ASSERT_TRUE(srv_error_type(k) != NULL);
}

static void test_busy_becomes_429(void)
{
    kiln_err err;
    kiln_fail(&err, KILN_E_BUSY, "queue full");
    srv_error e = srv_error_from(&err, NULL);
    ASSERT_EQ_I64(srv_error_status(e.kind), 429);
    ASSERT_STR_EQ(srv_error_code(e.kind), "queue_full");
}

static void test_json_shape(void)
{
    srv_error e = srv_error_make(SRV_E_CONTEXT, "messages", "too long: %d", 5);
    json_t *j = srv_error_json(&e);
    json_t *o = json_object_get(j, "error");
    ASSERT_STR_EQ(json_string_value(json_object_get(o, "message")), "too long: 5");
    ASSERT_STR_EQ(json_string_value(json_object_get(o, "type")), "invalid_request_error");
    ASSERT_STR_EQ(json_string_value(json_object_get(o, "param")), "messages");
    ASSERT_STR_EQ(json_string_value(json_object_get(o, "code")), "context_length_exceeded");
    json_decref(j);
    e = srv_error_make(SRV_E_ROUTE, NULL, "x");
    j = srv_error_json(&e);
    ASSERT_TRUE(json_is_null(json_object_get(json_object_get(j, "error"), "param")));
    json_decref(j);
}

static void test_invalid_utf8_message_still_gives_json(void)
{
    srv_error e = srv_error_make(KILN_E_INVALID, NULL, "bad \xff\xfe bytes");
    json_t *j = srv_error_json(&e);
    ASSERT_TRUE(j != NULL);
    ASSERT_STR_EQ(json_string_value(json_object_get(json_object_get(j, "error"), "message")),
                  "bad \xEF\xBF\xBD\xEF\xBF\xBD bytes");
    json_decref(j);
}

int main(void)
{
    RUN(test_status_table);
    RUN(test_busy_becomes_429);
    RUN(test_json_shape);
    RUN(test_invalid_utf8_message_still_gives_json);
    return TEST_DONE();
}
