/*
 * test_srv_sse.c — SSE framing, streaming chunk shapes, usage, and the
 * <think> splitter used for `reasoning` deltas.
 */
#include "server/srv_reasoning.h"
#include "server/srv_reply.h"
#include "server/srv_sse.h"
#include "test.h"

static void test_data_frame_and_done(void)
{
    srv_buf b = {0};
    json_t *j = json_pack("{s:s}", "a", "x\ny");
    ASSERT_EQ_I64(srv_sse_data(&b, j), 0);
    json_decref(j);
    ASSERT_STR_EQ(b.p, "data: {\"a\":\"x\\ny\"}\n\n");
    ASSERT_EQ_I64(srv_sse_done(&b), 0);
    ASSERT_TRUE(strstr(b.p, "\n\ndata: [DONE]\n\n") != NULL);
    srv_buf_reset(&b);
    srv_sse_comment(&b, "keep-alive");
    ASSERT_STR_EQ(b.p, ": keep-alive\n\n");
    srv_buf_free(&b);
}

static void test_chat_chunk_shape(void)
{
    srv_reply_meta m = {.api = SRV_API_CHAT, .id = "chatcmpl-1", .created = 7, .model = "tiny"};
    json_t *c = srv_reply_chunk(&m, 1, json_pack("{s:s}", "content", "Hi"), NULL, NULL);
    ASSERT_STR_EQ(json_string_value(json_object_get(c, "object")), "chat.completion.chunk");
    ASSERT_STR_EQ(json_string_value(json_object_get(c, "model")), "tiny");
    json_t *ch = json_array_get(json_object_get(c, "choices"), 0);
    ASSERT_EQ_I64(json_integer_value(json_object_get(ch, "index")), 1);
    ASSERT_STR_EQ(json_string_value(json_object_get(json_object_get(ch, "delta"), "content")), "Hi");
    ASSERT_TRUE(json_is_null(json_object_get(ch, "finish_reason")));
    json_decref(c);
    c = srv_reply_chunk(&m, 0, json_object(), "length", NULL);
    ch = json_array_get(json_object_get(c, "choices"), 0);
    ASSERT_STR_EQ(json_string_value(json_object_get(ch, "finish_reason")), "length");
    json_decref(c);
}

static void test_completion_chunk_and_usage_chunk(void)
{
    srv_reply_meta m = {.api = SRV_API_COMPLETION, .id = "cmpl-1", .created = 7, .model = "tiny"};
    json_t *c = srv_reply_chunk(&m, 0, json_string("abc"), NULL, NULL);
    ASSERT_STR_EQ(json_string_value(json_object_get(c, "object")), "text_completion");
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(json_object_get(c, "choices"), 0), "text")), "abc");
    json_decref(c);
    c = srv_reply_usage_chunk(&m, srv_reply_usage(10, 5, 4));
    ASSERT_EQ_I64(json_array_size(json_object_get(c, "choices")), 0);
    json_t *u = json_object_get(c, "usage");
    ASSERT_EQ_I64(json_integer_value(json_object_get(u, "total_tokens")), 15);
    ASSERT_EQ_I64(json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens")), 4);
    json_decref(c);
}

static void test_full_chat_response_with_reasoning(void)
{
    srv_reply_meta m = {.api = SRV_API_CHAT, .id = "chatcmpl-1", .created = 7, .model = "tiny"};
    json_t *ch = srv_reply_choice(&m, 0, json_string("answer"), json_string("thoughts"), "stop", NULL);
    json_t *r = srv_reply_full(&m, json_pack("[o]", ch), srv_reply_usage(1, 2, 0));
    json_t *msg = json_object_get(json_array_get(json_object_get(r, "choices"), 0), "message");
    ASSERT_STR_EQ(json_string_value(json_object_get(msg, "role")), "assistant");
    ASSERT_STR_EQ(json_string_value(json_object_get(msg, "content")), "answer");
    ASSERT_STR_EQ(json_string_value(json_object_get(msg, "reasoning")), "thoughts");
    ASSERT_STR_EQ(json_string_value(json_object_get(r, "object")), "chat.completion");
    json_decref(r);
}

/* Feeds s one byte at a time, or whole. */
static void split(const char *s, int bytewise, bool start_inside, srv_buf *c, srv_buf *r)
{
    srv_think t;
    srv_think_init(&t, true, start_inside);
    size_t n = strlen(s);
    if (bytewise)
        for (size_t i = 0; i < n; i++) srv_think_push(&t, s + i, 1, c, r);
    else
        srv_think_push(&t, s, n, c, r);
    srv_think_flush(&t, c, r);
}

static void test_think_split_whole_and_bytewise(void)
{
    for (int bw = 0; bw < 2; bw++) {
        srv_buf c = {0}, r = {0};
        split("<think>\nplan it</think>\n\nThe answer <b>", bw, false, &c, &r);
        ASSERT_STR_EQ(r.p, "\nplan it");
        ASSERT_STR_EQ(c.p, "The answer <b>");
        srv_buf_free(&c);
        srv_buf_free(&r);
    }
}

static void test_think_prompt_open_block(void)
{
    const char *p1 = "<|im_start|>assistant\n<think>\n";
    const char *p2 = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    ASSERT_TRUE(srv_think_prompt_open(p1, strlen(p1)));
    ASSERT_TRUE(!srv_think_prompt_open(p2, strlen(p2)));
    ASSERT_TRUE(!srv_think_prompt_open("plain", 5));
    srv_buf c = {0}, r = {0};
    split("reasoning here</think>final", 1, true, &c, &r);
    ASSERT_STR_EQ(r.p, "reasoning here");
    ASSERT_STR_EQ(c.p, "final");
    srv_buf_free(&c);
    srv_buf_free(&r);
}

static void test_think_disabled_and_partial_tag_flushed(void)
{
    srv_think t;
    srv_buf c = {0}, r = {0};
    srv_think_init(&t, false, true);
    srv_think_push(&t, "<think>x</think>", 16, &c, &r);
    ASSERT_STR_EQ(c.p, "<think>x</think>");
    ASSERT_TRUE(r.p == NULL);
    srv_buf_free(&c);
    srv_think_init(&t, true, false);
    srv_think_push(&t, "a <thi", 6, &c, &r);
    ASSERT_STR_EQ(c.p, "a ");
    srv_think_flush(&t, &c, &r);
    ASSERT_STR_EQ(c.p, "a <thi");
    srv_buf_free(&c);
    srv_buf_free(&r);
}

/* Gemma 4's channel: "thought\n" after <|channel> is a label, not reasoning;
 * a prompt may open the block (with or without the label) or close it empty. */
static void split_channel(const char *prompt, const char *s, int bytewise, srv_buf *c, srv_buf *r)
{
    srv_think t;
    srv_think_start(&t, SRV_THINK_CHANNEL, true, prompt, strlen(prompt));
    size_t n = strlen(s);
    if (bytewise)
        for (size_t i = 0; i < n; i++) srv_think_push(&t, s + i, 1, c, r);
    else
        srv_think_push(&t, s, n, c, r);
    srv_think_flush(&t, c, r);
}

static void test_think_channel_style(void)
{
    static const struct {
        const char *prompt, *out, *reasoning, *content;
    } cases[] = {
        {"<|turn>model\n", "<|channel>thought\nplan <it><channel|>The answer", "plan <it>", "The answer"},
        {"<|turn>model\n<|channel>thought\n", "more\n<channel|>\nfinal", "more\n", "final"},
        {"<|turn>model\n<|channel>", "thought\nx<channel|>y", "x", "y"},
        {"<|turn>model\n", "<|channel>plain<channel|>z", "plain", "z"},
        {"<|turn>model\n", "<|channel>thou", "thou", ""},
        {"<|turn>model\n<|channel>thought\n<channel|>", "Hello <|chan", "", "Hello <|chan"},
        {"<|turn>model\n", "<think>not these</think>", "", "<think>not these</think>"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int bw = 0; bw < 2; bw++) {
            srv_buf c = {0}, r = {0};
            split_channel(cases[i].prompt, cases[i].out, bw, &c, &r);
            ASSERT_STR_EQ(r.p ? r.p : "", cases[i].reasoning);
            ASSERT_STR_EQ(c.p ? c.p : "", cases[i].content);
            srv_buf_free(&c);
            srv_buf_free(&r);
        }
    ASSERT_TRUE(srv_think_prompt_open_as(SRV_THINK_CHANNEL, "a<|channel>thought\n", 19));
    ASSERT_TRUE(!srv_think_prompt_open_as(SRV_THINK_CHANNEL, "a<|channel>thought\n<channel|>", 29));
    ASSERT_EQ_I64(srv_think_detect(NULL, "{{ '<|channel>thought\\n<channel|>' }}"), SRV_THINK_CHANNEL);
    ASSERT_EQ_I64(srv_think_detect(NULL, "{{ '<think>' }}"), SRV_THINK_TAGS);
    ASSERT_EQ_I64(srv_think_detect(NULL, "{{ messages }}"), -1);
    ASSERT_STR_EQ(srv_think_marks_of(SRV_THINK_CHANNEL)->close, "<channel|>");
}

int main(void)
{
    RUN(test_data_frame_and_done);
    RUN(test_chat_chunk_shape);
    RUN(test_completion_chunk_and_usage_chunk);
    RUN(test_full_chat_response_with_reasoning);
    RUN(test_think_split_whole_and_bytewise);
    RUN(test_think_prompt_open_block);
    RUN(test_think_disabled_and_partial_tag_flushed);
    RUN(test_think_channel_style);
    return TEST_DONE();
}
