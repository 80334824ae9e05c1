/*
 * test_srv_openai.c — OpenAI request parsing: types, ranges, defaults, the
 * field named on errors, message normalization, and the fuzz corpus seeds.
 */
#include "server/srv_anthropic.h"
#include "test.h"

static kiln_code parse(srv_api api, const char *body, srv_request *r, char *param, kiln_err *err)
{
    return srv_parse_request(api, body, strlen(body), r, param, err);
}

static void test_minimal_chat_request_gets_defaults(void)
{
    srv_request r;
    char param[64];
    kiln_err err;
    ASSERT_OK(parse(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &r, param, &err));
    ASSERT_EQ_I64(r.n, 1);
    ASSERT_EQ_I64(r.max_tokens, 0);
    ASSERT_EQ_I64(r.set, 0);
    ASSERT_TRUE(!r.stream && !r.logprobs && r.skip_special && r.add_generation_prompt);
    ASSERT_EQ_I64(json_array_size(r.messages), 1);
    ASSERT_TRUE(json_is_object(r.template_kwargs));
    srv_request_free(&r);
}

static void test_all_sampling_fields_are_read(void)
{
    const char *b = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":0.5,"
                    "\"top_p\":0.9,\"top_k\":40,\"min_p\":0.05,\"seed\":7,\"presence_penalty\":0.5,"
                    "\"frequency_penalty\":-0.5,\"repetition_penalty\":1.1,\"max_completion_tokens\":9,"
                    "\"stop\":[\"a\",\"bb\"],\"logit_bias\":{\"12\":-100,\"3\":5},\"logprobs\":true,"
                    "\"top_logprobs\":3,\"n\":4,\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                    "\"unknown_field\":{\"x\":1}}";
    srv_request r;
    char param[64];
    kiln_err err;
    ASSERT_OK(parse(SRV_API_CHAT, b, &r, param, &err));
    ASSERT_NEAR_F32(r.sp.temperature, 0.5, 1e-6);
    ASSERT_NEAR_F32(r.sp.top_p, 0.9, 1e-6);
    ASSERT_EQ_I64(r.sp.top_k, 40);
    ASSERT_NEAR_F32(r.sp.min_p, 0.05, 1e-6);
    ASSERT_EQ_U64(r.sp.seed, 7);
    ASSERT_NEAR_F32(r.sp.presence_penalty, 0.5, 1e-6);
    ASSERT_NEAR_F32(r.sp.frequency_penalty, -0.5, 1e-6);
    ASSERT_NEAR_F32(r.sp.repetition_penalty, 1.1, 1e-6);
    ASSERT_EQ_I64(r.set, SRV_SET_TEMPERATURE | SRV_SET_TOP_P | SRV_SET_TOP_K | SRV_SET_MIN_P |
                             SRV_SET_REP | SRV_SET_SEED);
    ASSERT_EQ_I64(r.max_tokens, 9);
    ASSERT_EQ_I64(r.n_stop, 2);
    ASSERT_STR_EQ(r.stop[1], "bb");
    ASSERT_EQ_I64(r.sp.n_bias, 2);
    ASSERT_TRUE(r.sp.logit_bias == r.bias);
    ASSERT_TRUE(r.logprobs);
    ASSERT_EQ_I64(r.top_logprobs, 3);
    ASSERT_EQ_I64(r.n, 4);
    ASSERT_TRUE(r.stream && r.include_usage);
    srv_request_free(&r);
}

typedef struct {
    const char *body;
    const char *param;
} bad_case;

static void test_type_and_range_errors_name_the_field(void)
{
    static const bad_case cases[] = {
        {"[1,2]", ""},
        {"{\"messages\":\"hi\"}", "messages"},
        {"{\"messages\":[]}", "messages"},
        {"{}", "messages"},
        {"{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "messages"},
        {"{\"messages\":[{\"content\":\"x\"}]}", "messages"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":null}]}", "messages"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":\"hot\"}", "temperature"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":3}", "temperature"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_p\":0}", "top_p"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}", "max_tokens"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1.5}", "max_tokens"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":0}", "n"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":1000}", "n"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":5}", "stop"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[1]}", "stop"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"a\":1}}", "logit_bias"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"1\":500}}", "logit_bias"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":21}", "top_logprobs"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"presence_penalty\":-3}", "presence_penalty"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":\"yes\"}", "stream"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream_options\":[]}", "stream_options"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":\"max\"}", "reasoning_effort"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":1}", "chat_template_kwargs"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"seed\":\"1\"}", "seed"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        srv_request r;
        char param[64];
        kiln_err err;
        kiln_code rc = parse(SRV_API_CHAT, cases[i].body, &r, param, &err);
        if (rc == KILN_OK) TEST_FAIL_("case %zu accepted: %s", i, cases[i].body);
        ASSERT_EQ_I64(rc, KILN_E_INVALID);
        if (strcmp(param, cases[i].param) != 0)
            TEST_FAIL_("case %zu: param '%s', expected '%s' (%s)", i, param, cases[i].param, err.msg);
    }
}

static void test_invalid_json_is_400_with_position(void)
{
    srv_request r;
    char param[64];
    kiln_err err;
    ASSERT_CODE(parse(SRV_API_CHAT, "{\"messages\": [", &r, param, &err), KILN_E_INVALID);
    ASSERT_TRUE(strstr(err.msg, "invalid JSON") != NULL);
    ASSERT_CODE(srv_parse_request(SRV_API_CHAT, "", 0, &r, param, &err), KILN_E_INVALID);
}

static void test_nul_in_a_string_is_read_as_replacement_character(void)
{
    /* a client sends back model output that held a NUL byte: valid JSON, and
     * the text keeps its length (U+FFFD in place of the NUL) */
    const char *b = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}],"
                    "\"stop\":\"x\\u0000\"}";
    srv_request r;
    char param[64];
    kiln_err err;
    ASSERT_OK(parse(SRV_API_CHAT, b, &r, param, &err));
    json_t *c = json_object_get(json_array_get(r.messages, 0), "content");
    ASSERT_TRUE(json_string_length(c) == 5);
    ASSERT_STR_EQ(json_string_value(c), "a\xef\xbf\xbd" "b");
    srv_request_free(&r);
    /* an escaped backslash before u0000 is plain text */
    ASSERT_OK(parse(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"\\\\u0000\"}]}", &r,
                    param, &err));
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(r.messages, 0), "content")), "\\u0000");
    srv_request_free(&r);
}

static void test_content_parts_are_joined_and_developer_becomes_system(void)
{
    const char *b = "{\"messages\":[{\"role\":\"developer\",\"content\":\"rules\"},{\"role\":\"user\","
                    "\"content\":[{\"type\":\"text\",\"text\":\"ab\"},{\"type\":\"text\",\"text\":\"cd\"}]},"
                    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[]},"
                    "{\"role\":\"tool\",\"content\":\"42\",\"tool_call_id\":\"t1\"}]}";
    srv_request r;
    char param[64];
    kiln_err err;
    ASSERT_OK(parse(SRV_API_CHAT, b, &r, param, &err));
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(r.messages, 0), "role")), "system");
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(r.messages, 1), "content")), "abcd");
    ASSERT_TRUE(json_is_null(json_object_get(json_array_get(r.messages, 2), "content")));
    ASSERT_TRUE(json_object_get(json_array_get(r.messages, 2), "tool_calls") != NULL);
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(r.messages, 3), "tool_call_id")), "t1");
    srv_request_free(&r);
}

static void test_image_parts_are_unsupported(void)
{
    const char *b = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
                    "\"image_url\":{\"url\":\"x\"}}]}]}";
    srv_request r;
    char param[64];
    kiln_err err;
    ASSERT_CODE(parse(SRV_API_CHAT, b, &r, param, &err), KILN_E_UNSUPPORTED);
    ASSERT_STR_EQ(param, "messages");
}

static void test_reasoning_effort_none_disables_thinking(void)
{
    srv_request r;
    char param[64];
    kiln_err err;
    ASSERT_OK(parse(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                  "\"reasoning_effort\":\"none\"}", &r, param, &err));
    ASSERT_TRUE(r.thinking_set);
    ASSERT_TRUE(json_is_false(json_object_get(r.template_kwargs, "enable_thinking")));
    srv_request_free(&r);
    ASSERT_OK(parse(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                  "\"chat_template_kwargs\":{\"enable_thinking\":true},"
                                  "\"reasoning_effort\":\"none\"}", &r, param, &err));
    ASSERT_TRUE(json_is_true(json_object_get(r.template_kwargs, "enable_thinking")));
    srv_request_free(&r);
}

static void test_completion_prompt_forms(void)
{
    srv_request r;
    char param[64];
    kiln_err err;
    ASSERT_OK(parse(SRV_API_COMPLETION, "{\"prompt\":\"Once\",\"logprobs\":2,\"echo\":true}", &r, param, &err));
    ASSERT_STR_EQ(r.prompt, "Once");
    ASSERT_TRUE(r.logprobs && r.echo);
    ASSERT_EQ_I64(r.top_logprobs, 2);
    srv_request_free(&r);
    ASSERT_OK(parse(SRV_API_COMPLETION, "{\"prompt\":[1,2,3]}", &r, param, &err));
    ASSERT_EQ_I64(r.n_prompt_ids, 3);
    ASSERT_EQ_I64(r.prompt_ids[2], 3);
    srv_request_free(&r);
    ASSERT_OK(parse(SRV_API_COMPLETION, "{\"prompt\":[\"one\"]}", &r, param, &err));
    ASSERT_STR_EQ(r.prompt, "one");
    srv_request_free(&r);
    ASSERT_CODE(parse(SRV_API_COMPLETION, "{\"prompt\":[\"a\",\"b\"]}", &r, param, &err), KILN_E_UNSUPPORTED);
    ASSERT_CODE(parse(SRV_API_COMPLETION, "{\"prompt\":[1,-2]}", &r, param, &err), KILN_E_INVALID);
    ASSERT_STR_EQ(param, "prompt");
    ASSERT_CODE(parse(SRV_API_COMPLETION, "{\"prompt\":[]}", &r, param, &err), KILN_E_INVALID);
    ASSERT_CODE(parse(SRV_API_COMPLETION, "{}", &r, param, &err), KILN_E_INVALID);
}

static void test_null_fields_mean_default_and_single_stop_string(void)
{
    srv_request r;
    char param[64];
    kiln_err err;
    ASSERT_OK(parse(SRV_API_COMPLETION, "{\"prompt\":\"x\",\"temperature\":null,\"max_tokens\":null,"
                                        "\"stop\":\"END\",\"top_k\":-1}", &r, param, &err));
    ASSERT_EQ_I64(r.set & SRV_SET_TEMPERATURE, 0);
    ASSERT_EQ_I64(r.n_stop, 1);
    ASSERT_STR_EQ(r.stop[0], "END");
    ASSERT_EQ_I64(r.sp.top_k, 0);
    srv_request_free(&r);
}

/* "speculative": object, method string or boolean; errors name the field. */
static void test_speculative_field(void)
{
    static const struct {
        const char *v;
        eng_spec_method m;
        int32_t k;
    } ok[] = {
        {"{\"method\":\"ngram\",\"max_draft\":6}", ENG_SPEC_NGRAM, 6},
        {"{\"method\":\"off\"}", ENG_SPEC_OFF, 0},
        {"{\"max_draft\":3}", ENG_SPEC_NGRAM, 3},
        {"{\"method\":\"ngram\",\"max_draft\":0}", ENG_SPEC_OFF, 0},
        {"\"ngram\"", ENG_SPEC_NGRAM, 0},
        {"true", ENG_SPEC_NGRAM, 0},
        {"false", ENG_SPEC_OFF, 0},
        {"null", ENG_SPEC_DEFAULT, 0},
    };
    char b[256], param[64];
    kiln_err err;
    srv_request r;
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        snprintf(b, sizeof b, "{\"prompt\":\"x\",\"speculative\":%s}", ok[i].v);
        ASSERT_OK(parse(SRV_API_COMPLETION, b, &r, param, &err));
        ASSERT_EQ_I64(r.spec, ok[i].m);
        ASSERT_EQ_I64(r.spec_max_draft, ok[i].k);
        srv_request_free(&r);
    }
    ASSERT_OK(parse(SRV_API_COMPLETION, "{\"prompt\":\"x\"}", &r, param, &err));
    ASSERT_EQ_I64(r.spec, ENG_SPEC_DEFAULT);
    srv_request_free(&r);
    static const struct {
        const char *v, *param;
    } bad[] = {
        {"{\"method\":\"medusa\"}", "speculative.method"},
        {"{\"method\":3}", "speculative.method"},
        {"{\"max_draft\":17}", "speculative.max_draft"},
        {"{\"max_draft\":-1}", "speculative.max_draft"},
        {"{\"max_draft\":\"4\"}", "speculative.max_draft"},
        {"7", "speculative"},
        {"[]", "speculative"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(b, sizeof b, "{\"prompt\":\"x\",\"speculative\":%s}", bad[i].v);
        ASSERT_CODE(parse(SRV_API_COMPLETION, b, &r, param, &err), KILN_E_INVALID);
        ASSERT_STR_EQ(param, bad[i].param);
    }
}

static void test_too_many_stop_strings(void)
{
    char b[1024] = "{\"prompt\":\"x\",\"stop\":[";
    for (int i = 0; i < ENG_MAX_STOP + 1; i++) strcat(b, i ? ",\"s\"" : "\"s\"");
    strcat(b, "]}");
    srv_request r;
    char param[64];
    kiln_err err;
    ASSERT_CODE(parse(SRV_API_COMPLETION, b, &r, param, &err), KILN_E_INVALID);
    ASSERT_STR_EQ(param, "stop");
}

static void test_anthropic_body_maps_onto_the_chat_request(void)
{
    const char *b = "{\"model\":\"m\",\"max_tokens\":8,\"system\":[{\"type\":\"text\",\"text\":\"S\"}],"
                    "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Q\"}]}],"
                    "\"stop_sequences\":[\"END\"],\"temperature\":0.5,\"stream\":true,"
                    "\"thinking\":{\"type\":\"disabled\"}}";
    srv_request r;
    char param[64];
    kiln_err err;
    ASSERT_OK(srv_parse_anthropic(b, strlen(b), &r, param, &err));
    ASSERT_EQ_I64(r.api, SRV_API_ANTHROPIC);
    ASSERT_EQ_I64(json_array_size(r.messages), 2);
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(r.messages, 0), "content")), "S");
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(r.messages, 1), "content")), "Q");
    ASSERT_EQ_I64(r.max_tokens, 8);
    ASSERT_STR_EQ(r.stop[0], "END");
    ASSERT_TRUE(r.stream);
    ASSERT_TRUE(json_is_false(json_object_get(r.template_kwargs, "enable_thinking")));
    srv_request_free(&r);
    const char *nomax = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    ASSERT_CODE(srv_parse_anthropic(nomax, strlen(nomax), &r, param, &err), KILN_E_INVALID);
    ASSERT_STR_EQ(param, "max_tokens");
    const char *sysrole = "{\"max_tokens\":1,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}";
    ASSERT_CODE(srv_parse_anthropic(sysrole, strlen(sysrole), &r, param, &err), KILN_E_INVALID);
    const char *badstop = "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop_sequences\":3}";
    ASSERT_CODE(srv_parse_anthropic(badstop, strlen(badstop), &r, param, &err), KILN_E_INVALID);
    ASSERT_STR_EQ(param, "stop_sequences");
}

int main(void)
{
    RUN(test_anthropic_body_maps_onto_the_chat_request);
    RUN(test_minimal_chat_request_gets_defaults);
    RUN(test_all_sampling_fields_are_read);
    RUN(test_type_and_range_errors_name_the_field);
    RUN(test_invalid_json_is_400_with_position);
    RUN(test_nul_in_a_string_is_read_as_replacement_character);
    RUN(test_content_parts_are_joined_and_developer_becomes_system);
    RUN(test_image_parts_are_unsupported);
    RUN(test_reasoning_effort_none_disables_thinking);
    RUN(test_completion_prompt_forms);
    RUN(test_null_fields_mean_default_and_single_stop_string);
    RUN(test_too_many_stop_strings);
    RUN(test_speculative_field);
    return TEST_DONE();
}
