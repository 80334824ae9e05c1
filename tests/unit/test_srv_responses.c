/*
 * test_srv_responses.c — the request side of tools and agents: `tools` /
 * `tool_choice` / assistant `tool_calls` normalisation, Anthropic tool blocks
 * and Responses items rewritten onto srv_request, the previous_response_id
 * store (hits, unknown ids, TTL, byte-capped LRU), and the Responses output.
 */
#include "server/srv_anthropic.h"
#include "server/srv_responses.h"
#include "server/srv_rstore.h"
#include "test.h"

static kiln_code parse(srv_api api, const char *body, srv_request *r, char *param)
{
    kiln_err err;
    return api == SRV_API_ANTHROPIC ? srv_parse_anthropic(body, strlen(body), r, param, &err)
                                    : srv_parse_request(api, body, strlen(body), r, param, &err);
}

#define TOOL "{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}"
#define TOOL_G "{\"type\":\"function\",\"function\":{\"name\":\"g\"}}"

static void test_tool_choice_forms(void)
{
    srv_request r;
    char param[64];
    ASSERT_EQ_I64(parse(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[" TOOL "," TOOL_G "]}", &r, param), KILN_OK);
    ASSERT_EQ_I64(r.tool_choice, SRV_TOOLS_AUTO);
    ASSERT_EQ_I64(json_array_size(r.tools), 2);
    ASSERT_TRUE(r.parallel_tool_calls);
    srv_request_free(&r);
    ASSERT_EQ_I64(parse(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[" TOOL "," TOOL_G "],"
                        "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}},\"parallel_tool_calls\":false}", &r, param), KILN_OK);
    ASSERT_EQ_I64(r.tool_choice, SRV_TOOLS_NAMED);
    ASSERT_STR_EQ(r.tool_name, "g");
    ASSERT_EQ_I64(json_array_size(r.tools), 1); /* only the named tool is shown */
    ASSERT_TRUE(!r.parallel_tool_calls);
    srv_request_free(&r);
    ASSERT_EQ_I64(parse(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[" TOOL "],\"tool_choice\":\"none\"}", &r, param), KILN_OK);
    ASSERT_TRUE(r.tools == NULL); /* none: the model never sees them */
    srv_request_free(&r);
    ASSERT_EQ_I64(parse(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[" TOOL "],\"tool_choice\":\"required\"}", &r, param), KILN_OK);
    ASSERT_EQ_I64(r.tool_choice, SRV_TOOLS_REQUIRED);
    srv_request_free(&r);
}

static void test_bad_tool_fields_name_their_param(void)
{
    srv_request r;
    char param[64];
    ASSERT_EQ_I64(parse(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[" TOOL "],\"tool_choice\":\"sometimes\"}", &r, param), KILN_E_INVALID);
    ASSERT_STR_EQ(param, "tool_choice");
    ASSERT_EQ_I64(parse(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[" TOOL "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"zz\"}}}", &r, param), KILN_E_INVALID);
    ASSERT_STR_EQ(param, "tool_choice");
    ASSERT_EQ_I64(parse(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}", &r, param), KILN_E_INVALID);
    ASSERT_STR_EQ(param, "tool_choice");
    ASSERT_EQ_I64(parse(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\"}]}", &r, param), KILN_E_INVALID);
    ASSERT_STR_EQ(param, "tools");
    ASSERT_EQ_I64(parse(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"parallel_tool_calls\":1}", &r, param), KILN_E_INVALID);
    ASSERT_STR_EQ(param, "parallel_tool_calls");
}

static void test_assistant_tool_call_arguments_become_objects(void)
{
    srv_request r;
    char param[64];
    ASSERT_EQ_I64(parse(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":null,"
                        "\"tool_calls\":[{\"id\":\"call_1\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}},"
                        "{\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{\"b\":2}}},"
                        "{\"id\":\"call_3\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"not json\"}}]},"
                        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"ok\"}]}", &r, param), KILN_OK);
    json_t *calls = json_object_get(json_array_get(r.messages, 1), "tool_calls");
    ASSERT_EQ_I64(json_integer_value(json_object_get(json_object_get(json_object_get(json_array_get(calls, 0), "function"), "arguments"), "a")), 1);
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(calls, 0), "type")), "function");
    ASSERT_EQ_I64(json_integer_value(json_object_get(json_object_get(json_object_get(json_array_get(calls, 1), "function"), "arguments"), "b")), 2);
    ASSERT_STR_EQ(json_string_value(json_object_get(json_object_get(json_array_get(calls, 2), "function"), "arguments")), "not json");
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(r.messages, 2), "tool_call_id")), "call_1");
    srv_request_free(&r);
}

static void test_anthropic_tool_blocks_map_to_openai(void)
{
    srv_request r;
    char param[64];
    const char *body =
        "{\"max_tokens\":8,\"tools\":[{\"name\":\"w\",\"input_schema\":{\"type\":\"object\"}}],"
        "\"tool_choice\":{\"type\":\"tool\",\"name\":\"w\",\"disable_parallel_tool_use\":true},\"messages\":["
        "{\"role\":\"user\",\"content\":\"hi\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"t\",\"signature\":\"\"},"
        "{\"type\":\"text\",\"text\":\"let me see\"},{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"w\",\"input\":{\"c\":\"P\"}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":\"sunny\"},"
        "{\"type\":\"text\",\"text\":\"thanks\"}]}]}";
    ASSERT_EQ_I64(parse(SRV_API_ANTHROPIC, body, &r, param), KILN_OK);
    ASSERT_EQ_I64(r.api, SRV_API_ANTHROPIC);
    ASSERT_EQ_I64(r.tool_choice, SRV_TOOLS_NAMED);
    ASSERT_TRUE(!r.parallel_tool_calls);
    ASSERT_EQ_I64(json_array_size(r.messages), 4); /* user, assistant(+call), tool, user */
    json_t *a = json_array_get(r.messages, 1);
    ASSERT_STR_EQ(json_string_value(json_object_get(a, "content")), "let me see");
    ASSERT_STR_EQ(json_string_value(json_object_get(json_object_get(json_object_get(json_array_get(json_object_get(a, "tool_calls"), 0), "function"), "arguments"), "c")), "P");
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(r.messages, 2), "role")), "tool");
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(r.messages, 2), "tool_call_id")), "toolu_1");
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(r.messages, 3), "content")), "thanks");
    ASSERT_STR_EQ(json_string_value(json_object_get(json_object_get(json_array_get(r.tools, 0), "function"), "name")), "w");
    srv_request_free(&r);
    ASSERT_EQ_I64(parse(SRV_API_ANTHROPIC, "{\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}", &r, param),
                  KILN_E_UNSUPPORTED);
    ASSERT_STR_EQ(param, "messages");
    kiln_err err;
    const char *ct = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    ASSERT_EQ_I64(srv_parse_anthropic(ct, strlen(ct), &r, param, &err), KILN_E_INVALID); /* max_tokens */
    ASSERT_EQ_I64(srv_parse_anthropic_ex(ct, strlen(ct), true, &r, param, &err), KILN_OK);
    srv_request_free(&r);
}

static void test_responses_items_and_previous_id(void)
{
    srv_rstore *st;
    ASSERT_EQ_I64(srv_rstore_create(3600, 1 << 20, &st, NULL), KILN_OK);
    srv_request r;
    char param[64];
    kiln_err err;
    const char *b1 = "{\"instructions\":\"brief\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"w?\"}]},"
                     "{\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"w\",\"arguments\":\"{}\"},"
                     "{\"type\":\"function_call\",\"call_id\":\"call_2\",\"name\":\"w\",\"arguments\":\"{}\"},"
                     "{\"type\":\"function_call_output\",\"call_id\":\"call_1\",\"output\":\"sunny\"}],"
                     "\"tools\":[{\"type\":\"function\",\"name\":\"w\",\"parameters\":{\"type\":\"object\"}}],"
                     "\"tool_choice\":{\"type\":\"function\",\"name\":\"w\"},\"max_output_tokens\":7,\"reasoning\":{\"effort\":\"none\"}}";
    ASSERT_EQ_I64(srv_parse_responses(st, b1, strlen(b1), &r, param, &err), KILN_OK);
    ASSERT_EQ_I64(r.api, SRV_API_RESPONSES);
    ASSERT_TRUE(r.instructions && r.store);
    ASSERT_EQ_I64(r.max_tokens, 7);
    ASSERT_EQ_I64(r.tool_choice, SRV_TOOLS_NAMED);
    ASSERT_EQ_I64(json_array_size(r.messages), 4); /* system, user, assistant with 2 calls, tool */
    ASSERT_EQ_I64(json_array_size(json_object_get(json_array_get(r.messages, 2), "tool_calls")), 2);
    ASSERT_TRUE(json_is_false(json_object_get(r.template_kwargs, "enable_thinking")));
    srv_rstore_put(st, "resp_a", r.messages);
    srv_request_free(&r);
    const char *b2 = "{\"previous_response_id\":\"resp_a\",\"input\":\"next\"}";
    ASSERT_EQ_I64(srv_parse_responses(st, b2, strlen(b2), &r, param, &err), KILN_OK);
    ASSERT_EQ_I64(json_array_size(r.messages), 5);
    ASSERT_STR_EQ(r.previous_response_id, "resp_a");
    srv_request_free(&r);
    const char *b3 = "{\"previous_response_id\":\"resp_zz\",\"input\":\"next\"}";
    ASSERT_EQ_I64(srv_parse_responses(st, b3, strlen(b3), &r, param, &err), KILN_E_NOT_FOUND);
    ASSERT_STR_EQ(param, "previous_response_id");
    const char *b4 = "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"x\"}]}]}";
    ASSERT_EQ_I64(srv_parse_responses(st, b4, strlen(b4), &r, param, &err), KILN_E_UNSUPPORTED);
    srv_rstore_stats s = srv_rstore_get_stats(st);
    ASSERT_EQ_I64(s.hits, 1);
    ASSERT_EQ_I64(s.misses, 1);
    srv_rstore_destroy(st);
}

static void test_store_evicts_lru_past_the_cap_and_expires(void)
{
    srv_rstore *st;
    ASSERT_EQ_I64(srv_rstore_create(3600, 600, &st, NULL), KILN_OK);
    json_t *m = json_pack("[{s:s, s:s}]", "role", "user", "content", "0123456789012345678901234567890123456789");
    srv_rstore_put(st, "a", m);
    srv_rstore_put(st, "b", m);
    json_decref(srv_rstore_get(st, "a")); /* a is now the most recent */
    for (int i = 0; i < 8; i++) srv_rstore_put(st, i % 2 ? "c" : "d", m);
    srv_rstore_stats s = srv_rstore_get_stats(st);
    ASSERT_TRUE(s.bytes <= 600);
    ASSERT_TRUE(s.evicted > 0);
    json_t *b = srv_rstore_get(st, "b");
    ASSERT_TRUE(b == NULL); /* b was least recently used */
    srv_rstore_destroy(st);
    ASSERT_EQ_I64(srv_rstore_create(1e-9, 1 << 20, &st, NULL), KILN_OK);
    srv_rstore_put(st, "x", m);
    usleep(1000);
    ASSERT_TRUE(srv_rstore_get(st, "x") == NULL);
    ASSERT_EQ_I64(srv_rstore_get_stats(st).expired, 1);
    srv_rstore_destroy(st);
    json_decref(m);
}

static void test_response_object_items_in_order(void)
{
    srv_reply_meta m = {.api = SRV_API_RESPONSES, .id = "resp_1", .created = 7, .model = "tiny"};
    srv_request r = {.store = true};
    srv_resp *o = srv_resp_new(&m, &r);
    srv_buf sse = {0};
    ASSERT_EQ_I64(srv_resp_begin(o, &sse), 0);
    ASSERT_EQ_I64(srv_resp_text(o, &sse, "hmm", 3, NULL, 0), 0);
    ASSERT_EQ_I64(srv_resp_text(o, &sse, NULL, 0, "Hi", 2), 0);
    ASSERT_EQ_I64(srv_resp_call(o, &sse, "call_1", "w", "{\"c\":1}"), 0);
    json_t *resp = srv_resp_end(o, &sse, "completed", srv_resp_usage(3, 4, 0, 1));
    json_t *out = json_object_get(resp, "output");
    ASSERT_EQ_I64(json_array_size(out), 3);
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(out, 0), "type")), "reasoning");
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(out, 1), "type")), "message");
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(out, 2), "call_id")), "call_1");
    ASSERT_TRUE(strstr(sse.p, "event: response.created\n") == sse.p);
    ASSERT_TRUE(strstr(sse.p, "response.reasoning_summary_text.delta") && strstr(sse.p, "response.output_text.done") &&
                strstr(sse.p, "response.function_call_arguments.done") && strstr(sse.p, "event: response.completed\n"));
    json_t *cm = srv_resp_chat_message(o);
    ASSERT_STR_EQ(json_string_value(json_object_get(cm, "content")), "Hi");
    ASSERT_EQ_I64(json_array_size(json_object_get(cm, "tool_calls")), 1);
    json_decref(cm);
    json_decref(resp);
    srv_buf_free(&sse);
    srv_resp_free(o);
}

/* A call streamed in fragments: .delta per fragment, .done and the item with
 * the whole arguments; a call cut short by text (malformed after it showed)
 * ends "incomplete" and is not one of the response's calls. The response
 * repeats the request's settings (instructions, tools with strict/parameters). */
static void test_call_streamed_in_fragments(void)
{
    srv_reply_meta m = {.api = SRV_API_RESPONSES, .id = "resp_2", .created = 7, .model = "tiny"};
    srv_request r = {.store = true};
    char param[64];
    kiln_err err;
    const char *body = "{\"input\":\"hi\",\"instructions\":\"Be brief.\",\"temperature\":0.5,"
                       "\"tools\":[{\"type\":\"function\",\"name\":\"w\"}]}";
    ASSERT_EQ_I64(srv_parse_responses(NULL, body, strlen(body), &r, param, &err), KILN_OK);
    srv_resp *o = srv_resp_new(&m, &r);
    srv_buf sse = {0};
    ASSERT_EQ_I64(srv_resp_call_open(o, &sse, "call_1", "w"), 0);
    ASSERT_EQ_I64(srv_resp_call_delta(o, &sse, "{\"c\":", 5), 0);
    ASSERT_EQ_I64(srv_resp_call_delta(o, &sse, "1}", 2), 0);
    ASSERT_EQ_I64(srv_resp_call_close(o, &sse, true), 0);
    ASSERT_EQ_I64(srv_resp_call_open(o, &sse, "call_2", "w"), 0);
    ASSERT_EQ_I64(srv_resp_call_delta(o, &sse, "{\"c\"", 4), 0);
    ASSERT_EQ_I64(srv_resp_text(o, &sse, NULL, 0, "oops", 4), 0);
    json_t *resp = srv_resp_end(o, &sse, "completed", srv_resp_usage(3, 4, 0, 0));
    json_t *out = json_object_get(resp, "output");
    ASSERT_EQ_I64(json_array_size(out), 3);
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(out, 0), "arguments")), "{\"c\":1}");
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(out, 0), "status")), "completed");
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(out, 1), "status")), "incomplete");
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(out, 1), "arguments")), "{\"c\"");
    ASSERT_TRUE(strstr(sse.p, "\"delta\":\"{\\\"c\\\":\"") && strstr(sse.p, "\"delta\":\"1}\""));
    ASSERT_TRUE(strstr(sse.p, "\"type\":\"response.function_call_arguments.done\"") &&
                strstr(sse.p, "\"name\":\"w\",\"arguments\":\"{\\\"c\\\":1}\""));
    ASSERT_STR_EQ(json_string_value(json_object_get(resp, "instructions")), "Be brief.");
    ASSERT_TRUE(json_real_value(json_object_get(resp, "temperature")) == 0.5);
    ASSERT_TRUE(json_is_null(json_object_get(resp, "top_p")));
    ASSERT_STR_EQ(json_string_value(json_object_get(resp, "tool_choice")), "auto");
    json_t *t0 = json_array_get(json_object_get(resp, "tools"), 0);
    ASSERT_TRUE(json_is_null(json_object_get(t0, "strict")) && json_is_null(json_object_get(t0, "parameters")));
    json_t *cm = srv_resp_chat_message(o);
    ASSERT_EQ_I64(json_array_size(json_object_get(cm, "tool_calls")), 1); /* the incomplete one is not a call */
    json_decref(cm);
    json_decref(resp);
    srv_buf_free(&sse);
    srv_resp_free(o);
    srv_request_free(&r);
}

int main(void)
{
    RUN(test_tool_choice_forms);
    RUN(test_bad_tool_fields_name_their_param);
    RUN(test_assistant_tool_call_arguments_become_objects);
    RUN(test_anthropic_tool_blocks_map_to_openai);
    RUN(test_responses_items_and_previous_id);
    RUN(test_store_evicts_lru_past_the_cap_and_expires);
    RUN(test_response_object_items_in_order);
    RUN(test_call_streamed_in_fragments);
    return TEST_DONE();
}
