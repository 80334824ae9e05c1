/*
 * test_srv_limits.c — the request depth limits (server/srv_json.h): a request
 * body nested past SRV_JSON_MAX_DEPTH, and a tool schema, a response_format
 * schema, a tool call's arguments or chat_template_kwargs nested past
 * SRV_VALUE_MAX_DEPTH, are refused with KILN_E_INVALID (a 400) naming the
 * limit and the field, on the chat, Anthropic and Responses parsers; exactly
 * at the limit they are accepted. Every parse runs on a thread with a 256 KiB
 * stack, so a parser that recursed once per level of a 10,000-deep body would
 * crash here rather than pass.
 */
#include <pthread.h>

#include "server/srv_anthropic.h"
#include "server/srv_json.h"
#include "server/srv_responses.h"
#include "test.h"
#include "util/kiln_json.h"

/* "{\"a\":" x n + inner + "}" x n: an object nested n levels around inner. */
static char *nest_obj(int n, const char *inner)
{
    size_t len = (size_t)n * 6 + strlen(inner) + 1;
    char *s = malloc(len), *p = s;
    for (int i = 0; i < n; i++)
        p += sprintf(p, "{\"a\":");
    p += sprintf(p, "%s", inner);
    for (int i = 0; i < n; i++)
        *p++ = '}';
    *p = 0;
    return s;
}

/* "[" x n + "]" x n: an array nested n levels. */
static char *nest_arr(int n)
{
    char *s = malloc((size_t)n * 2 + 1);
    memset(s, '[', (size_t)n);
    memset(s + n, ']', (size_t)n);
    s[2 * n] = 0;
    return s;
}

/* The same object nesting as text inside a JSON string ({\"a\":...}). */
static char *nest_obj_escaped(int n)
{
    char *s = malloc((size_t)n * 8 + 8), *p = s;
    for (int i = 0; i < n; i++)
        p += sprintf(p, "{\\\"a\\\":");
    p += sprintf(p, "1");
    for (int i = 0; i < n; i++)
        *p++ = '}';
    *p = 0;
    return s;
}

static char *fmt(const char *f, const char *a)
{
    size_t n = strlen(f) + strlen(a) + 1;
    char *s = malloc(n);
    snprintf(s, n, f, a);
    return s;
}

typedef struct {
    srv_api api; /* SRV_API_CHAT, SRV_API_ANTHROPIC, SRV_API_RESPONSES */
    const char *body;
    kiln_code rc;
    char param[64];
    kiln_err err;
} job;

static void *run_parse(void *arg)
{
    job *j = arg;
    srv_request r;
    size_t n = strlen(j->body);
    j->rc = j->api == SRV_API_ANTHROPIC ? srv_parse_anthropic(j->body, n, &r, j->param, &j->err)
            : j->api == SRV_API_RESPONSES
                ? srv_parse_responses(NULL, j->body, n, &r, j->param, &j->err)
                : srv_parse_request(j->api, j->body, n, &r, j->param, &j->err);
    if (j->rc == KILN_OK) srv_request_free(&r);
    return NULL;
}

/* Parses body on a thread with a 256 KiB stack. */
static job parse_small_stack(srv_api api, const char *body)
{
    job j = {.api = api, .body = body, .rc = KILN_E_INTERNAL};
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 256 << 10);
    pthread_t t;
    if (pthread_create(&t, &a, run_parse, &j) == 0) pthread_join(t, NULL);
    pthread_attr_destroy(&a);
    return j;
}

#define ASSERT_REFUSED(j, want_param, needle)                                                      \
    do {                                                                                           \
        ASSERT_EQ_I64((j).rc, KILN_E_INVALID);                                                     \
        ASSERT_STR_EQ((j).param, want_param);                                                      \
        if (!strstr((j).err.msg, needle))                                                          \
            TEST_FAIL_("message '%s' lacks '%s'", (j).err.msg, needle);                            \
    } while (0)

/* The body made of f (one %s) with at, the value nested at the limit, parses;
 * with over, one level more, it is refused on param, the message holding needle. */
#define ASSERT_AT_AND_PAST(api, f, at, over, param, needle)                                        \
    do {                                                                                           \
        char *b_at_ = fmt(f, at), *b_over_ = fmt(f, over);                                         \
        job j_ = parse_small_stack(api, b_at_), k_ = parse_small_stack(api, b_over_);              \
        free(b_at_), free(b_over_);                                                                \
        ASSERT_EQ_I64(j_.rc, KILN_OK);                                                             \
        ASSERT_REFUSED(k_, param, needle);                                                         \
    } while (0)

static void test_text_and_value_depth(void)
{
    ASSERT_EQ_I64(kiln_json_text_depth("1", 1, 10), 0);
    ASSERT_EQ_I64(kiln_json_text_depth("[]", 2, 10), 1);
    ASSERT_EQ_I64(kiln_json_text_depth("{\"a\":[[1],[[2]]]}", 17, 10), 4);
    /* brackets inside strings and escaped quotes do not count */
    const char *s = "[\"[[[\\\"[[\", {\"k]\":\"{{\"}]";
    ASSERT_EQ_I64(kiln_json_text_depth(s, strlen(s), 10), 2);
    char *deep = nest_arr(10000);
    ASSERT_EQ_I64(kiln_json_text_depth(deep, strlen(deep), 128), 129); /* stops past the limit */
    ASSERT_EQ_I64(kiln_json_text_depth(deep, strlen(deep), 20000), 10000);
    free(deep);
    json_t *v = json_loads("{\"a\":[[1],[[2]]],\"b\":{}}", 0, NULL);
    ASSERT_EQ_I64(kiln_json_value_depth(v, 10), 4);
    ASSERT_EQ_I64(kiln_json_value_depth(v, 3), 4); /* limit + 1 */
    json_decref(v);
    json_t *one = json_integer(1);
    ASSERT_EQ_I64(kiln_json_value_depth(one, 3), 0);
    json_decref(one);
    ASSERT_EQ_I64(kiln_json_value_depth(NULL, 3), 0);
}

static void test_body_depth_limit(void)
{
    /* the body's root object is level 1, "extra" adds k levels */
    const char *f = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"extra\":%s}";
    char *at = nest_arr(SRV_JSON_MAX_DEPTH - 1), *over = nest_arr(SRV_JSON_MAX_DEPTH);
    ASSERT_AT_AND_PAST(SRV_API_CHAT, f, at, over, "", "more than 128 levels");
    free(at), free(over);

    /* 10,000 levels: every parser refuses it from the bytes, on a small stack */
    char *deep = nest_arr(10000);
    srv_api apis[] = {SRV_API_CHAT, SRV_API_COMPLETION, SRV_API_ANTHROPIC, SRV_API_RESPONSES};
    for (size_t i = 0; i < sizeof apis / sizeof *apis; i++) {
        job j = parse_small_stack(apis[i], deep);
        ASSERT_REFUSED(j, "", "more than 128 levels");
    }
    free(deep);

    /* brackets inside a string are text, not nesting */
    char *text = malloc(20001);
    memset(text, '[', 20000);
    text[20000] = 0;
    char *b = fmt("{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}", text);
    job j = parse_small_stack(SRV_API_CHAT, b);
    ASSERT_EQ_I64(j.rc, KILN_OK);
    free(text), free(b);
}

static void test_tool_schema_depth_limit(void)
{
    const char *f =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
        "\"function\":{\"name\":\"deep\",\"parameters\":%s}}]}";
    char *at = nest_obj(SRV_VALUE_MAX_DEPTH, "1"), *over = nest_obj(SRV_VALUE_MAX_DEPTH + 1, "1");
    ASSERT_AT_AND_PAST(SRV_API_CHAT, f, at, over, "tools",
                       "tool 'deep' nests arrays/objects more than 64 levels");

    /* Anthropic: input_schema */
    const char *fa =
        "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
        "\"tools\":[{\"name\":\"deep\",\"input_schema\":%s}]}";
    ASSERT_AT_AND_PAST(SRV_API_ANTHROPIC, fa, at, over, "tools", "more than 64 levels");

    /* Responses: flat function tools */
    const char *fr =
        "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"deep\",\"parameters\":%s}]}";
    ASSERT_AT_AND_PAST(SRV_API_RESPONSES, fr, at, over, "tools", "more than 64 levels");
    free(at), free(over);
}

static void test_response_format_schema_depth_limit(void)
{
    const char *f =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":"
        "\"json_schema\",\"json_schema\":{\"name\":\"s\",\"schema\":%s}}}";
    char *at = nest_obj(SRV_VALUE_MAX_DEPTH, "1"), *over = nest_obj(SRV_VALUE_MAX_DEPTH + 1, "1");
    ASSERT_AT_AND_PAST(SRV_API_CHAT, f, at, over, "response_format",
                       "the JSON schema nests arrays/objects more than 64 levels");
    /* Responses: text.format */
    const char *fr = "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":"
                     "\"s\",\"schema\":%s}}}";
    ASSERT_AT_AND_PAST(SRV_API_RESPONSES, fr, at, over, "text", "more than 64 levels");
    free(at), free(over);
}

static void test_tool_call_arguments_depth_limit(void)
{
    /* arguments as JSON text (OpenAI chat, Responses function_call items) */
    const char *f = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\","
                    "\"tool_calls\":"
                    "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
                    "\"arguments\":\"%s\"}}]},"
                    "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"r\"}]}";
    char *at = nest_obj_escaped(SRV_VALUE_MAX_DEPTH),
         *over = nest_obj_escaped(SRV_VALUE_MAX_DEPTH + 1);
    ASSERT_AT_AND_PAST(
        SRV_API_CHAT, f, at, over, "messages",
        "the arguments of tool call 0 of message 1 nests arrays/objects more than 64");
    /* a 10,000-deep arguments string fits in a body of depth 5 */
    char *deep = malloc(20001);
    memset(deep, '[', 10000), memset(deep + 10000, ']', 10000), deep[20000] = 0;
    char *b = fmt(f, deep);
    job j = parse_small_stack(SRV_API_CHAT, b);
    ASSERT_REFUSED(j, "messages", "more than 64 levels");
    free(b);
    const char *fr = "{\"input\":[{\"role\":\"user\",\"content\":\"x\"},{\"type\":\"function_"
                     "call\",\"call_id\":\"c1\","
                     "\"name\":\"f\",\"arguments\":\"%s\"},{\"type\":\"function_call_output\","
                     "\"call_id\":\"c1\","
                     "\"output\":\"r\"}]}";
    ASSERT_AT_AND_PAST(SRV_API_RESPONSES, fr, at, over, "input", "more than 64 levels");
    b = fmt(fr, deep);
    j = parse_small_stack(SRV_API_RESPONSES, b);
    ASSERT_REFUSED(j, "input", "more than 64 levels");
    free(b), free(deep), free(at), free(over);

    /* Anthropic: tool_use input as an object */
    const char *fa =
        "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"f\","
        "\"input\":%s}]},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
        "\"tool_use_id\":\"t1\",\"content\":\"r\"}]}]}";
    at = nest_obj(SRV_VALUE_MAX_DEPTH, "1"), over = nest_obj(SRV_VALUE_MAX_DEPTH + 1, "1");
    ASSERT_AT_AND_PAST(SRV_API_ANTHROPIC, fa, at, over, "messages", "more than 64 levels");
    free(at), free(over);
}

static void test_template_kwargs_depth_limit(void)
{
    const char *f = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_"
                    "kwargs\":{\"k\":%s}}";
    /* the kwargs object is level 1 */
    char *at = nest_obj(SRV_VALUE_MAX_DEPTH - 1, "1"), *over = nest_obj(SRV_VALUE_MAX_DEPTH, "1");
    ASSERT_AT_AND_PAST(SRV_API_CHAT, f, at, over, "chat_template_kwargs",
                       "'chat_template_kwargs' nests arrays/objects more than 64");
    free(at), free(over);
}

/* Found by fuzz_anthropic: a tool_use whose input is an array reached the
 * template as the call's arguments; arguments are an object (Anthropic) or a
 * JSON string / object (OpenAI), anything else is a 400 on 'messages'. */
static void test_tool_call_arguments_must_be_an_object_or_a_string(void)
{
    const char *a =
        "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\","
        "\"input\":[1]}]}]}";
    job j = parse_small_stack(SRV_API_ANTHROPIC, a);
    ASSERT_REFUSED(j, "messages", "tool_use blocks need an object 'input'");
    const char *o =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\","
        "\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\","
        "\"arguments\":7}}]}]}";
    j = parse_small_stack(SRV_API_CHAT, o);
    ASSERT_REFUSED(j, "messages", "must be a JSON string");
    /* null arguments / input are no arguments: {} */
    const char *n =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\","
        "\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\","
        "\"arguments\":null}}]}]}";
    srv_request r;
    char param[64];
    kiln_err err;
    ASSERT_OK(srv_parse_request(SRV_API_CHAT, n, strlen(n), &r, param, &err));
    json_t *args = json_object_get(
        json_object_get(
            json_array_get(json_object_get(json_array_get(r.messages, 1), "tool_calls"), 0),
            "function"),
        "arguments");
    ASSERT_TRUE(json_is_object(args) && json_object_size(args) == 0);
    srv_request_free(&r);
}

int main(void)
{
    kiln_json_init();
    RUN(test_text_and_value_depth);
    RUN(test_body_depth_limit);
    RUN(test_tool_schema_depth_limit);
    RUN(test_response_format_schema_depth_limit);
    RUN(test_tool_call_arguments_depth_limit);
    RUN(test_template_kwargs_depth_limit);
    RUN(test_tool_call_arguments_must_be_an_object_or_a_string);
    return TEST_DONE();
}
