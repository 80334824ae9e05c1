/*
 * test_srv_toolcall.c — tool-call parsing per family on hand-written model
 * outputs (from each format's documentation): complete calls, several calls,
 * every split into two chunks and byte-by-byte streaming, malformed JSON,
 * markup inside code blocks, unicode arguments, schema coercion, detection;
 * Gemma 4's <|tool_call> format with its <|"|> strings.
 */
#include "server/srv_toolcall.h"
#include "test.h"

static const char *TOOLS_JSON =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},"
    "\"metric\":{\"type\":\"boolean\"},\"zip\":{\"type\":\"string\"},\"opts\":{\"type\":\"object\"}}}}}]";

/* What a stream sent for one call: the serial and the arguments so far. */
typedef struct {
    size_t serial;
    char name[64];
    srv_buf sent;
} sent_call;

typedef struct {
    srv_buf content;
    srv_tc *p;
    sent_call open[16];
    size_t n_open;
    size_t fragments; /* non-empty argument fragments sent */
    int bad;          /* a shown prefix shrank or changed, or a name changed */
} run;

/* As srv_gen streams: each open call's new bytes are a fragment; what was
 * shown before must be a prefix of what is shown now. */
static void watch(run *r)
{
    for (size_t k = 0; k < srv_tc_open_count(r->p); k++) {
        size_t serial, len;
        const char *name, *args;
        srv_tc_open_get(r->p, k, &serial, &name, &args, &len);
        sent_call *c = NULL;
        for (size_t j = 0; j < r->n_open; j++)
            if (r->open[j].serial == serial) c = &r->open[j];
        if (!c) {
            if (r->n_open == 16) {
                r->bad = 1;
                return;
            }
            c = &r->open[r->n_open++];
            memset(c, 0, sizeof *c);
            c->serial = serial;
            snprintf(c->name, sizeof c->name, "%s", name);
        }
        if (strcmp(c->name, name) || len < c->sent.len || (c->sent.len && memcmp(c->sent.p, args, c->sent.len))) {
            fprintf(stderr, "    serial %zu: shown [%.*s] then [%.*s]\n", serial, (int)c->sent.len,
                    c->sent.p ? c->sent.p : "", (int)len, args);
            r->bad = 1;
        } else if (len > c->sent.len) {
            r->fragments++;
            srv_buf_add(&c->sent, args + c->sent.len, len - c->sent.len);
        }
    }
}

/* Feeds text in pieces split at `cuts` (sorted offsets; n_cuts may be 0). */
static int feed(srv_tc_family f, const json_t *tools, const char *text, const size_t *cuts,
                size_t n_cuts, run *r)
{
    memset(r, 0, sizeof *r);
    if (srv_tc_create(f, tools, &r->p, NULL)) return -1;
    size_t at = 0, len = strlen(text);
    for (size_t i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : len;
        if (srv_tc_push(r->p, text + at, end - at, &r->content)) return -1;
        watch(r);
        at = end;
    }
    return srv_tc_finish(r->p, &r->content);
}

static void run_free(run *r)
{
    srv_tc_free(r->p);
    srv_buf_free(&r->content);
    for (size_t j = 0; j < r->n_open; j++) srv_buf_free(&r->open[j].sent);
}

/* Every parsed call's arguments begin with what the stream sent for its
 * serial (the rest is the last fragment): the fragments concatenate to them. */
static int check_stream(run *r)
{
    if (r->bad) return -1;
    for (size_t i = 0; i < srv_tc_count(r->p); i++) {
        const char *n, *a;
        srv_tc_get(r->p, i, &n, &a);
        for (size_t j = 0; j < r->n_open; j++) {
            sent_call *c = &r->open[j];
            if (c->serial != srv_tc_serial(r->p, i)) continue;
            if (strcmp(c->name, n) || strlen(a) < c->sent.len || memcmp(c->sent.p, a, c->sent.len)) {
                fprintf(stderr, "    call %zu [%s %s]: sent [%s %.*s]\n", i, n, a, c->name, (int)c->sent.len,
                        c->sent.p);
                return -1;
            }
        }
    }
    return 0;
}

/* Checks: content equals want_content; calls equal "name args|name args". */
static int check(run *r, const char *want_content, const char *want_calls)
{
    char got[2048] = "";
    for (size_t i = 0; i < srv_tc_count(r->p); i++) {
        const char *n, *a;
        srv_tc_get(r->p, i, &n, &a);
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s %s", i ? "|" : "", n, a);
    }
    const char *c = r->content.p ? r->content.p : "";
    if (strcmp(c, want_content) || strcmp(got, want_calls)) {
        fprintf(stderr, "    content [%s] want [%s]\n    calls [%s] want [%s]\n", c, want_content, got,
                want_calls);
        return -1;
    }
    return 0;
}

/* Whole, every two-chunk split, and byte by byte must all agree. */
static int check_all_splits(srv_tc_family f, const char *text, const char *want_content,
                            const char *want_calls)
{
    json_t *tools = json_loads(TOOLS_JSON, 0, NULL);
    int bad = 0;
    size_t len = strlen(text);
    run r;
    for (size_t cut = 0; cut <= len && !bad; cut++) {
        bad |= feed(f, tools, text, &cut, 1, &r) || check(&r, want_content, want_calls) || check_stream(&r);
        if (bad) fprintf(stderr, "    split at %zu\n", cut);
        run_free(&r);
    }
    size_t *cuts = malloc((len + 1) * sizeof *cuts);
    for (size_t i = 0; i < len; i++) cuts[i] = i + 1;
    if (!bad) {
        bad |= feed(f, tools, text, cuts, len ? len - 1 : 0, &r) || check(&r, want_content, want_calls) ||
               check_stream(&r);
        if (bad) fprintf(stderr, "    byte by byte\n");
        run_free(&r);
    }
    free(cuts);
    json_decref(tools);
    return bad;
}

#define EXPECT(f, text, content, calls) ASSERT_EQ_I64(check_all_splits((f), (text), (content), (calls)), 0)

static void test_hermes_single_call(void)
{
    EXPECT(SRV_TC_HERMES,
           "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
           "Let me check.\n", "get_weather {\"city\":\"Paris\"}");
}

static void test_hermes_several_calls(void)
{
    EXPECT(SRV_TC_HERMES,
           "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
           "{\"name\": \"b\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>\n",
           "", "a {}|b {\"x\":[1,2]}");
}

static void test_hermes_arguments_as_string_and_unclosed_at_end(void)
{
    EXPECT(SRV_TC_HERMES, "<tool_call>{\"name\":\"f\",\"arguments\":\"{\\\"k\\\":1}\"}", "", "f {\"k\":1}");
}

static void test_hermes_malformed_json_is_content(void)
{
    EXPECT(SRV_TC_HERMES, "x<tool_call>{\"name\": \"f\", \"arguments\": {oops}</tool_call> y",
           "x<tool_call>{\"name\": \"f\", \"arguments\": {oops}</tool_call> y", "");
    EXPECT(SRV_TC_HERMES, "<tool_call>{\"arguments\": {}}</tool_call>",
           "<tool_call>{\"arguments\": {}}</tool_call>", "");
    EXPECT(SRV_TC_HERMES, "text <tool_call>{\"name\": \"f\"", "text <tool_call>{\"name\": \"f\"", "");
}

static void test_markup_inside_code_block_is_content(void)
{
    const char *t = "Example:\n```\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n```\ndone";
    EXPECT(SRV_TC_HERMES, t, t, "");
    EXPECT(SRV_TC_HERMES, "```x```<tool_call>{\"name\":\"g\",\"arguments\":{}}</tool_call>", "```x```",
           "g {}");
}

static void test_partial_marker_is_held_then_released(void)
{
    EXPECT(SRV_TC_HERMES, "a <tool_c", "a <tool_c", "");
    EXPECT(SRV_TC_HERMES, "1 < 2 and <tool_cal> is not a tag", "1 < 2 and <tool_cal> is not a tag", "");
}

static void test_unicode_arguments(void)
{
    EXPECT(SRV_TC_HERMES, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich 東京 🌧\"}}</tool_call>",
           "", "get_weather {\"city\":\"Zürich 東京 🌧\"}");
    EXPECT(SRV_TC_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"\\u00e9\"}}</tool_call>", "",
           "f {\"s\":\"\\u00e9\"}");
}

static void test_qwen3_coder_xml_with_schema_coercion(void)
{
    EXPECT(SRV_TC_QWEN3_CODER,
           "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSão Paulo\n</parameter>\n"
           "<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n"
           "<parameter=zip>\n01310\n</parameter>\n<parameter=opts>\n{\"a\": 1}\n</parameter>\n"
           "</function>\n</tool_call>",
           "Sure.\n", "get_weather {\"city\":\"São Paulo\",\"days\":3,\"metric\":true,\"zip\":\"01310\",\"opts\":{\"a\":1}}");
}

/* An integer past int64 (jansson refuses it as an integer) is still a JSON
 * number for an "integer" parameter, never a string the schema rejects. */
static void test_qwen3_coder_huge_integer_stays_a_number(void)
{
    EXPECT(SRV_TC_QWEN3_CODER,
           "<tool_call>\n<function=get_weather>\n<parameter=days>\n910656736991031010103310\n"
           "</parameter>\n</function>\n</tool_call>",
           "", "get_weather {\"days\":9.1065673699103096e23}");
}

static void test_qwen3_coder_several_and_unknown_params_stay_strings(void)
{
    EXPECT(SRV_TC_QWEN3_CODER,
           "<tool_call>\n<function=other>\n<parameter=n>\n5\n</parameter>\n</function>\n</tool_call>\n"
           "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>",
           "", "other {\"n\":\"5\"}|get_weather {\"city\":\"Oslo\"}");
    /* a bare <function=...> (no <tool_call> wrapper), and the JSON form under the same family */
    EXPECT(SRV_TC_QWEN3_CODER, "<function=f><parameter=x>1</parameter></function>", "", "f {\"x\":\"1\"}");
    EXPECT(SRV_TC_QWEN3_CODER, "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>", "", "f {}");
}

static void test_qwen3_coder_malformed_is_content(void)
{
    const char *t = "<tool_call>\n<function=>\n</function>\n</tool_call>";
    EXPECT(SRV_TC_QWEN3_CODER, t, t, "");
}

static void test_llama3_bare_json_and_python_tag(void)
{
    EXPECT(SRV_TC_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}", "",
           "get_weather {\"city\":\"Rome\"}");
    EXPECT(SRV_TC_LLAMA3, "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"q\": \"é\"}}",
           "", "a {}|b {\"q\":\"é\"}");
    /* JSON after prose is prose */
    EXPECT(SRV_TC_LLAMA3, "Here: {\"name\": \"a\", \"parameters\": {}}", "Here: {\"name\": \"a\", \"parameters\": {}}", "");
    /* JSON that is not a call is content */
    EXPECT(SRV_TC_LLAMA3, "{\"answer\": 42}", "{\"answer\": 42}", "");
}

static void test_mistral_both_forms(void)
{
    EXPECT(SRV_TC_MISTRAL,
           "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]",
           "", "a {\"x\":1}|b {}");
    EXPECT(SRV_TC_MISTRAL, "ok[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Nice\"}[TOOL_CALLS]b[ARGS]{}", "ok",
           "get_weather {\"city\":\"Nice\"}|b {}");
    EXPECT(SRV_TC_MISTRAL, "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {x}}]",
           "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {x}}]", "");
}

static void test_gemma_call_syntax(void)
{
    EXPECT(SRV_TC_GEMMA,
           "<start_function_call>call:get_weather{city:<escape>Köln, DE<escape>,days:2,metric:false,"
           "opts:{a:<escape>x<escape>,b:[1,2]}}<end_function_call>",
           "", "get_weather {\"city\":\"Köln, DE\",\"days\":2,\"metric\":false,\"opts\":{\"a\":\"x\",\"b\":[1,2]}}");
    EXPECT(SRV_TC_GEMMA, "<start_function_call>call:f{}<end_function_call><start_function_call>call:g{n:1.5}<end_function_call>",
           "", "f {}|g {\"n\":1.5}");
    const char *bad = "<start_function_call>call:f{x:<escape>unterminated}<end_function_call>";
    EXPECT(SRV_TC_GEMMA, bad, bad, "");
}

/* Gemma 4: <|"|> strings (raw: quotes, braces and commas inside), bare keys,
 * nested objects and arrays, schema coercion of bare values, several calls,
 * and the <|tool_response> / stray <tool_call|> the model writes after them. */
static void test_gemma4_call_syntax(void)
{
    EXPECT(SRV_TC_GEMMA4,
           "Checking.<|tool_call>call:get_weather{city:<|\"|>Köln, \"DE\" {x}<|\"|>,days:2,metric:false,"
           "zip:01310,opts:{a:<|\"|>x<|\"|>,b:[1,<|\"|>two<|\"|>,null,{c:true}]}}<tool_call|><|tool_response>",
           "Checking.",
           "get_weather {\"city\":\"Köln, \\\"DE\\\" {x}\",\"days\":2,\"metric\":false,\"zip\":\"01310\","
           "\"opts\":{\"a\":\"x\",\"b\":[1,\"two\",null,{\"c\":true}]}}");
    EXPECT(SRV_TC_GEMMA4,
           "<|tool_call>call:f{}<tool_call|><|tool_call>call:g{n:1.5,s:<|\"|>a}b,c<|\"|>}<tool_call|>\n<tool_call|>",
           "", "f {}|g {\"n\":1.5,\"s\":\"a}b,c\"}");
    /* a quoted key; text after the calls is content */
    EXPECT(SRV_TC_GEMMA4, "<|tool_call>call:get_weather{<|\"|>city<|\"|>:<|\"|>Oslo<|\"|>}<tool_call|>\nDone.",
           "Done.", "get_weather {\"city\":\"Oslo\"}");
    const char *bad = "<|tool_call>call:f{x:<|\"|>unterminated}<tool_call|>";
    EXPECT(SRV_TC_GEMMA4, bad, bad, "");
    /* the other Gemma's markup, and a partial marker, are text here */
    EXPECT(SRV_TC_GEMMA4, "a <start_function_call>call:f{}<end_function_call> <|tool_",
           "a <start_function_call>call:f{}<end_function_call> <|tool_", "");
    /* <|tool_response> before any call is text (only the noise after a call is dropped) */
    EXPECT(SRV_TC_GEMMA4, "x <|tool_response> y", "x <|tool_response> y", "");
}

/* Byte by byte, a call's arguments arrive in many fragments, the first as
 * soon as the name is known; the fragments concatenate to the final text. */
static size_t fragments(srv_tc_family f, const char *text, const char *want_args, size_t *first_at)
{
    json_t *tools = json_loads(TOOLS_JSON, 0, NULL);
    size_t len = strlen(text), *cuts = malloc(len * sizeof *cuts);
    for (size_t i = 0; i + 1 < len; i++) cuts[i] = i + 1;
    run r;
    *first_at = 0;
    /* the first byte at which a call shows: the shortest prefix with an open call */
    for (size_t k = 1; k <= len && !*first_at; k++) {
        srv_tc *p;
        srv_buf sink = {0};
        srv_tc_create(f, tools, &p, NULL);
        srv_tc_push(p, text, k, &sink);
        if (srv_tc_open_count(p)) *first_at = k;
        srv_tc_free(p);
        srv_buf_free(&sink);
    }
    size_t n = 0;
    if (!feed(f, tools, text, cuts, len - 1, &r) && !check_stream(&r) && srv_tc_count(r.p) == 1) {
        const char *nm, *a;
        srv_tc_get(r.p, 0, &nm, &a);
        if (!strcmp(a, want_args) && r.n_open == 1) n = r.fragments;
    }
    run_free(&r);
    free(cuts);
    json_decref(tools);
    return n;
}

static void test_arguments_stream_in_fragments(void)
{
    size_t at;
    const char *h = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>";
    ASSERT_TRUE(fragments(SRV_TC_HERMES, h, "{\"city\":\"Paris\",\"days\":3}", &at) > 10);
    ASSERT_EQ_I64((int64_t)at, (int64_t)(strstr(h, "{\"city") - h) + 1); /* at the arguments' '{' */
    ASSERT_TRUE(fragments(SRV_TC_LLAMA3, "{\"name\": \"f\", \"parameters\": {\"q\": \"a long query\"}}",
                     "{\"q\":\"a long query\"}", &at) > 10);
    ASSERT_TRUE(fragments(SRV_TC_MISTRAL, "[TOOL_CALLS]f[ARGS]{\"q\": \"a long query\"}", "{\"q\":\"a long query\"}", &at) > 10);
    ASSERT_TRUE(fragments(SRV_TC_MISTRAL, "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"q\": \"a long query\"}}]",
                     "{\"q\":\"a long query\"}", &at) > 10);
    /* rebuilt families: one fragment per parameter, then the closing brace */
    ASSERT_EQ_I64((int64_t)fragments(SRV_TC_QWEN3_CODER,
                                     "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
                                     "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
                                     "{\"city\":\"Oslo\",\"days\":2}", &at), 3);
    ASSERT_EQ_I64((int64_t)fragments(SRV_TC_GEMMA4, "<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>,days:2,metric:true}<tool_call|>",
                                     "{\"city\":\"Oslo\",\"days\":2,\"metric\":true}", &at), 4);
    ASSERT_EQ_I64((int64_t)fragments(SRV_TC_GEMMA, "<start_function_call>call:f{a:1,b:<escape>x<escape>}<end_function_call>",
                                     "{\"a\":1,\"b\":\"x\"}", &at), 3);
}

/* Arguments are kept as written less whitespace (the streamed bytes are the
 * final bytes); duplicate keys make a call malformed. */
static void test_arguments_as_written_and_duplicates(void)
{
    EXPECT(SRV_TC_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": {\"n\": 1.50, \"s\": \"a b\\n\"}}</tool_call>", "",
           "f {\"n\":1.50,\"s\":\"a b\\n\"}");
    const char *dup = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1, \"a\": 2}}</tool_call>";
    EXPECT(SRV_TC_HERMES, dup, dup, "");
    const char *both = "<tool_call>{\"name\": \"f\", \"arguments\": {}, \"parameters\": {}}</tool_call>";
    EXPECT(SRV_TC_HERMES, both, both, "");
    const char *xdup = "<function=f><parameter=x>1</parameter><parameter=x>2</parameter></function>";
    EXPECT(SRV_TC_QWEN3_CODER, xdup, xdup, "");
    const char *gdup = "<|tool_call>call:f{a:1,a:2}<tool_call|>";
    EXPECT(SRV_TC_GEMMA4, gdup, gdup, "");
}

/* A call shown while written that then turns out malformed: its text is
 * content as without streaming, and srv_tc_settled moves past its serial (the
 * stream ends what it showed); no call is reported. */
static void test_shown_call_turning_malformed(void)
{
    const char *t = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}} junk</tool_call> after";
    EXPECT(SRV_TC_HERMES, t, t, "");
    srv_tc *p;
    srv_buf content = {0};
    ASSERT_EQ_I64(srv_tc_create(SRV_TC_HERMES, NULL, &p, NULL), KILN_OK);
    const char *cut = strstr(t, " junk");
    ASSERT_EQ_I64(srv_tc_push(p, t, (size_t)(cut - t), &content), 0);
    ASSERT_EQ_I64((int64_t)srv_tc_open_count(p), 1);
    size_t serial, len;
    const char *name, *args;
    srv_tc_open_get(p, 0, &serial, &name, &args, &len);
    ASSERT_STR_EQ(name, "f");
    ASSERT_EQ_I64((int64_t)len, 7);
    ASSERT_TRUE(!memcmp(args, "{\"a\":1}", 7));
    ASSERT_TRUE(srv_tc_settled(p) <= serial);
    ASSERT_EQ_I64(srv_tc_push(p, cut, strlen(cut), &content), 0);
    ASSERT_EQ_I64(srv_tc_finish(p, &content), 0);
    ASSERT_TRUE(srv_tc_settled(p) > serial);
    ASSERT_EQ_I64((int64_t)srv_tc_count(p), 0);
    ASSERT_EQ_I64((int64_t)srv_tc_open_count(p), 0);
    srv_tc_free(p);
    srv_buf_free(&content);
}

static void test_none_family_passes_everything(void)
{
    EXPECT(SRV_TC_NONE, "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>",
           "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>", "");
}

static void test_detect_from_template_text_and_names(void)
{
    ASSERT_EQ_I64(srv_tc_detect("{% for tool in tools %}<tool_call>{{ tool }}</tool_call>", NULL), SRV_TC_HERMES);
    ASSERT_EQ_I64(srv_tc_detect("<tool_call>\n<function=x>\n<parameter=y>", NULL), SRV_TC_QWEN3_CODER);
    ASSERT_EQ_I64(srv_tc_detect("{{ '[TOOL_CALLS]' }}", NULL), SRV_TC_MISTRAL);
    ASSERT_EQ_I64(srv_tc_detect("<|python_tag|>", NULL), SRV_TC_LLAMA3);
    ASSERT_EQ_I64(srv_tc_detect("<start_function_call>", NULL), SRV_TC_GEMMA);
    ASSERT_EQ_I64(srv_tc_detect("{{- '<|tool_call>call:' + function['name'] + '{' -}}{{- '}<tool_call|>' -}}", NULL),
                  SRV_TC_GEMMA4);
    ASSERT_EQ_I64(srv_tc_detect("{{ messages }}", NULL), SRV_TC_NONE);
    ASSERT_EQ_I64(srv_tc_family_from_name("qwen3_coder"), SRV_TC_QWEN3_CODER);
    ASSERT_EQ_I64(srv_tc_family_from_name("hermes"), SRV_TC_HERMES);
    ASSERT_EQ_I64(srv_tc_family_from_name("bogus"), -1);
    ASSERT_STR_EQ(srv_tc_family_name(SRV_TC_GEMMA), "gemma");
    ASSERT_STR_EQ(srv_tc_family_name(SRV_TC_GEMMA4), "gemma4");
    ASSERT_EQ_I64(srv_tc_family_from_name("gemma4"), SRV_TC_GEMMA4);
}

int main(void)
{
    RUN(test_hermes_single_call);
    RUN(test_hermes_several_calls);
    RUN(test_hermes_arguments_as_string_and_unclosed_at_end);
    RUN(test_hermes_malformed_json_is_content);
    RUN(test_markup_inside_code_block_is_content);
    RUN(test_partial_marker_is_held_then_released);
    RUN(test_unicode_arguments);
    RUN(test_qwen3_coder_xml_with_schema_coercion);
    RUN(test_qwen3_coder_huge_integer_stays_a_number);
    RUN(test_qwen3_coder_several_and_unknown_params_stay_strings);
    RUN(test_qwen3_coder_malformed_is_content);
    RUN(test_llama3_bare_json_and_python_tag);
    RUN(test_mistral_both_forms);
    RUN(test_gemma_call_syntax);
    RUN(test_gemma4_call_syntax);
    RUN(test_arguments_stream_in_fragments);
    RUN(test_arguments_as_written_and_duplicates);
    RUN(test_shown_call_turning_malformed);
    RUN(test_none_family_passes_everything);
    RUN(test_detect_from_template_text_and_names);
    return TEST_DONE();
}
