/*
 * test_gr_schema.c — the JSON Schema compiler on known texts: what each
 * supported keyword lets through and what it stops, number bounds against C's
 * own arithmetic over every short decimal in a range, lengths counted in
 * characters (escapes and multi-byte ones), extra keys that must differ from
 * declared ones, dates with leap years, the refusals naming their keyword, and
 * the same schemas in Gemma 4's argument syntax (gr_builder_add_json_schema_as).
 * (Generated outputs are validated by Debian's python3-jsonschema in
 * tests/cli/test_grammar_corpus.sh.)
 */
#include "grammar/gr_int.h"
#include "gr_test_util.h"

#include <jansson.h>
#include <math.h>

static gr_vocab *V;

static gr_grammar *schema(const char *text, kiln_err *err)
{
    json_error_t je;
    json_t *s = json_loads(text, 0, &je);
    if (!s) {
        fprintf(stderr, "  bad test schema: %s\n", je.text);
        return NULL;
    }
    gr_grammar *g = NULL;
    gr_options o = gr_options_default();
    o.json_ws_max = 2;
    if (gr_compile_json_schema(s, &o, &g, err) != KILN_OK) g = NULL;
    json_decref(s);
    return g;
}

/* 1 if the grammar accepts text as a whole sentence. */
static int accepts(gr_grammar *g, const char *text)
{
    kiln_err err;
    gr_matcher *m;
    if (gr_matcher_create(g, V, &m, &err)) return -1;
    int ok =
        gr_matcher_accept_bytes(m, text, strlen(text), &err) == KILN_OK && gr_matcher_accepting(m);
    gr_matcher_destroy(m);
    return ok;
}

#define EXPECT(g, text, want)                                                                      \
    do {                                                                                           \
        int got_ = accepts((g), (text));                                                           \
        if (got_ != (want)) TEST_FAIL_("%s: accepts(%s) = %d, want %d", #g, text, got_, (want));   \
    } while (0)

static void test_objects_required_optional_and_extras(void)
{
    kiln_err err;
    gr_grammar *g = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                           "\"ab\":{\"type\":\"string\"},\"c\":{\"type\":\"boolean\"}},"
                           "\"required\":[\"c\"],\"additionalProperties\":{\"type\":\"null\"}}",
                           &err);
    ASSERT_TRUE(g);
    EXPECT(g, "{\"c\":true}", 1);
    EXPECT(g, "{\"a\":1,\"ab\":\"x\",\"c\":false}", 1);
    EXPECT(g, "{\"ab\":\"x\",\"c\":false}", 1);
    EXPECT(g, "{\"a\":1}", 0);                /* c is required */
    EXPECT(g, "{\"c\":true,\"zz\":null}", 1); /* an extra key, its schema */
    EXPECT(g, "{\"c\":true,\"zz\":1}", 0);
    EXPECT(g, "{\"c\":true,\"a\":null}", 0); /* a declared key is never an extra */
    EXPECT(g, "{\"c\":true,\"abc\":null}", 1);
    EXPECT(g, "{\"c\":true,\"\":null}", 1);
    EXPECT(g, "{\"c\":true,\"a\\u0062\":null}", 0); /* no escapes in extra keys */
    EXPECT(g, "{ \"c\" : true }", 1);               /* bounded whitespace (2 here) */
    EXPECT(g, "{   \"c\":true}", 0);
    gr_grammar_release(g);
    /* strict (the default): no additionalProperties means none */
    g = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}", &err);
    ASSERT_TRUE(g);
    EXPECT(g, "{}", 1);
    EXPECT(g, "{\"a\":-3}", 1);
    EXPECT(g, "{\"b\":1}", 0);
    gr_grammar_release(g);
}

static void test_arrays_tuples_and_counts(void)
{
    kiln_err err;
    gr_grammar *g = schema("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},"
                           "{\"type\":\"string\"}],\"items\":{\"type\":\"null\"},\"minItems\":1,"
                           "\"maxItems\":3}",
                           &err);
    ASSERT_TRUE(g);
    EXPECT(g, "[]", 0);
    EXPECT(g, "[1]", 1);
    EXPECT(g, "[1,\"x\"]", 1);
    EXPECT(g, "[1,\"x\",null]", 1);
    EXPECT(g, "[1,\"x\",null,null]", 0);
    EXPECT(g, "[\"x\"]", 0);
    gr_grammar_release(g);
    g = schema("{\"items\":{\"enum\":[1,\"two\",[3]]},\"minItems\":2}", &err);
    ASSERT_TRUE(g);
    EXPECT(g, "[1,\"two\"]", 1);
    EXPECT(g, "[[3],[3],1]", 1);
    EXPECT(g, "[1]", 0);
    EXPECT(g, "[1,2]", 0);
    gr_grammar_release(g);
}

static void test_string_lengths_count_characters(void)
{
    kiln_err err;
    gr_grammar *g = schema("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", &err);
    ASSERT_TRUE(g);
    EXPECT(g, "\"ab\"", 1);
    EXPECT(g, "\"a\"", 0);
    EXPECT(g, "\"abcd\"", 0);
    EXPECT(g, "\"\xc3\xa9\xe2\x82\xac\"", 1); /* é€: 2 characters, 5 bytes */
    EXPECT(g, "\"\\n\\u00e9x\"", 1);          /* 3 escapes/characters */
    EXPECT(g, "\"\\ud83d\\ude00\"", 0);       /* no surrogate escapes */
    EXPECT(g, "\"a\x01\"", 0);                /* controls must be escaped */
    gr_grammar_release(g);
    /* pattern and length together: an intersection */
    g = schema("{\"type\":\"string\",\"pattern\":\"^[a-z]+-[0-9]{2,4}$\",\"maxLength\":6}", &err);
    ASSERT_TRUE(g);
    EXPECT(g, "\"ab-12\"", 1);
    EXPECT(g, "\"ab-123\"", 1);
    EXPECT(g, "\"ab-1234\"", 0);
    EXPECT(g, "\"-12\"", 0);
    gr_grammar_release(g);
    /* unanchored patterns match anywhere */
    g = schema("{\"type\":\"string\",\"pattern\":\"x\\\\d\"}", &err);
    ASSERT_TRUE(g);
    EXPECT(g, "\"ax1b\"", 1);
    EXPECT(g, "\"x1\"", 1);
    EXPECT(g, "\"xa\"", 0);
    gr_grammar_release(g);
}

static void test_formats_dates_and_more(void)
{
    kiln_err err;
    gr_grammar *g = schema("{\"type\":\"string\",\"format\":\"date\"}", &err);
    ASSERT_TRUE(g);
    EXPECT(g, "\"2024-02-29\"", 1);
    EXPECT(g, "\"2000-02-29\"", 1);
    EXPECT(g, "\"2023-02-29\"", 0);
    EXPECT(g, "\"1900-02-29\"", 0);
    EXPECT(g, "\"2023-04-31\"", 0);
    EXPECT(g, "\"0000-01-01\"", 0);
    gr_grammar_release(g);
    g = schema("{\"format\":\"date-time\"}", &err);
    ASSERT_TRUE(g);
    EXPECT(g, "\"2021-12-31T23:59:59Z\"", 1);
    EXPECT(g, "\"2021-12-31T23:59:59.123+05:30\"", 1);
    EXPECT(g, "\"2021-12-31T24:00:00Z\"", 0);
    gr_grammar_release(g);
    g = schema("{\"format\":\"uuid\"}", &err);
    ASSERT_TRUE(g);
    EXPECT(g, "\"123e4567-e89b-12d3-a456-426614174000\"", 1);
    EXPECT(g, "\"123e4567e89b12d3a456426614174000\"", 0);
    gr_grammar_release(g);
    g = schema("{\"format\":\"ipv4\"}", &err);
    ASSERT_TRUE(g);
    EXPECT(g, "\"255.0.10.1\"", 1);
    EXPECT(g, "\"256.0.0.1\"", 0);
    EXPECT(g, "\"01.2.3.4\"", 0);
    gr_grammar_release(g);
    g = schema("{\"type\":\"string\",\"format\":\"x-custom\"}", &err); /* annotation: ignored */
    ASSERT_TRUE(g);
    EXPECT(g, "\"anything\"", 1);
    gr_grammar_release(g);
}

/* Every decimal a.bc in [-30, 30] with up to 2 fraction digits: the grammar
 * accepts it iff C says the bound holds. */
static void check_bounds(const char *sch, double lo, int lo_strict, double hi, int hi_strict,
                         int integer, int *bad)
{
    kiln_err err;
    gr_grammar *g = schema(sch, &err);
    if (!g) {
        fprintf(stderr, "  %s: %s\n", sch, err.msg);
        (*bad)++;
        return;
    }
    char buf[32];
    for (int k = -3000; k <= 3000; k++) {
        int a = abs(k);
        const char *sign = k < 0 ? "-" : "";
        for (int form = 0; form < 3; form++) {
            if (form == 0 && a % 100) continue;
            if (form == 2 && a % 10) continue;
            if (form == 0) snprintf(buf, sizeof buf, "%s%d", sign, a / 100);
            if (form == 1) snprintf(buf, sizeof buf, "%s%d.%02d", sign, a / 100, a % 100);
            if (form == 2) snprintf(buf, sizeof buf, "%s%d.%d", sign, a / 100, a / 10 % 10);
            if (!strcmp(buf, "-0")) continue; /* JSON allows it; kiln never writes it */
            double x = strtod(buf, NULL);
            int want = (lo_strict ? x > lo : x >= lo) && (hi_strict ? x < hi : x <= hi);
            if (integer && form != 0) want = 0;
            if (accepts(g, buf) != want) {
                if (*bad < 10)
                    fprintf(stderr, "  %s: '%s' accepted=%d want=%d\n", sch, buf, !want, want);
                (*bad)++;
            }
        }
    }
    gr_grammar_release(g);
}

static void test_number_bounds_exact(void)
{
    int bad = 0;
    check_bounds("{\"type\":\"number\",\"minimum\":0,\"maximum\":1.5}", 0, 0, 1.5, 0, 0, &bad);
    check_bounds("{\"type\":\"number\",\"exclusiveMinimum\":-2.25,\"maximum\":3}", -2.25, 1, 3, 0,
                 0, &bad);
    check_bounds("{\"type\":\"number\",\"exclusiveMaximum\":0}", -1e300, 0, 0, 1, 0, &bad);
    check_bounds("{\"type\":\"number\",\"minimum\":-12.5,\"exclusiveMaximum\":-0.05}", -12.5, 0,
                 -0.05, 1, 0, &bad);
    check_bounds("{\"type\":\"number\",\"minimum\":0.1}", 0.1, 0, 1e300, 0, 0, &bad);
    check_bounds("{\"type\":\"integer\",\"minimum\":-15,\"maximum\":20}", -15, 0, 20, 0, 1, &bad);
    check_bounds("{\"type\":\"integer\",\"exclusiveMinimum\":2.5,\"exclusiveMaximum\":7}", 2.5, 1,
                 7, 1, 1, &bad);
    check_bounds("{\"type\":\"number\",\"minimum\":3,\"exclusiveMinimum\":true,\"maximum\":9}", 3,
                 1, 9, 0, 0, &bad); /* draft 4 */
    ASSERT_EQ_I64(bad, 0);
    kiln_err err;
    gr_grammar *g = schema("{\"type\":\"integer\",\"multipleOf\":7}", &err);
    ASSERT_TRUE(g);
    for (int k = -100; k <= 100; k++) {
        char buf[16];
        snprintf(buf, sizeof buf, "%d", k);
        EXPECT(g, buf, k % 7 == 0);
    }
    gr_grammar_release(g);
}

static void test_refs_recursion_allof_oneof(void)
{
    kiln_err err;
    gr_grammar *g =
        schema("{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":"
               "\"integer\"},\"k\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"}}},"
               "\"required\":[\"v\"]}},\"$ref\":\"#/$defs/n\"}",
               &err);
    ASSERT_TRUE(g);
    EXPECT(g, "{\"v\":1,\"k\":[{\"v\":2,\"k\":[{\"v\":3}]},{\"v\":4}]}", 1);
    EXPECT(g, "{\"v\":1,\"k\":[{\"k\":[]}]}", 0);
    gr_grammar_release(g);
    g = schema("{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":5}},"
               "\"required\":[\"a\"]},{\"properties\":{\"a\":{\"maximum\":9},\"b\":{}}}]}",
               &err);
    ASSERT_TRUE(g);
    EXPECT(g, "{\"a\":7,\"b\":[1]}", 1);
    EXPECT(g, "{\"a\":10}", 0);
    EXPECT(g, "{\"a\":4}", 0);
    gr_grammar_release(g);
    /* allOf with additionalProperties false in one branch: only its keys */
    g = schema("{\"allOf\":[{\"properties\":{\"a\":{}},\"additionalProperties\":false},"
               "{\"properties\":{\"b\":{}}}]}",
               &err);
    ASSERT_TRUE(g);
    EXPECT(g, "{\"a\":1}", 1);
    EXPECT(g, "{\"b\":1}", 0);
    gr_grammar_release(g);
    /* oneOf with a discriminator is exact; overlapping alternatives are refused */
    g = schema(
        "{\"oneOf\":[{\"properties\":{\"t\":{\"const\":\"x\"},\"n\":{\"type\":\"integer\"}},"
        "\"required\":[\"t\"]},{\"properties\":{\"t\":{\"const\":\"y\"}},\"required\":[\"t\"]}]}",
        &err);
    ASSERT_TRUE(g);
    EXPECT(g, "{\"t\":\"x\",\"n\":2}", 1);
    EXPECT(g, "{\"t\":\"y\"}", 1);
    EXPECT(g, "{\"t\":\"z\"}", 0);
    gr_grammar_release(g);
    g = schema("{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"integer\"},{\"type\":\"null\"}]}",
               &err);
    ASSERT_TRUE(g);
    EXPECT(g, "null", 1);
    EXPECT(g, "3", 1);
    gr_grammar_release(g);
}

static void test_subsets_for_pattern_properties_not_dependencies_unique(void)
{
    kiln_err err;
    /* a declared key a pattern matches takes the pattern's schema too; no
     * key is generated for a pattern alone */
    gr_grammar *g = schema(
        "{\"type\":\"object\",\"properties\":{\"x-a\":{},\"b\":{\"type\":\"integer\"}},"
        "\"patternProperties\":{\"^x-\":{\"type\":\"string\"}},\"additionalProperties\":true}",
        &err);
    ASSERT_TRUE(g);
    EXPECT(g, "{\"x-a\":\"s\",\"b\":1}", 1);
    EXPECT(g, "{\"x-a\":1}", 0);
    EXPECT(g, "{\"b\":1,\"x-z\":\"s\"}", 0);
    gr_grammar_release(g);
    /* not: {required}, not: {type} */
    g = schema("{\"properties\":{\"a\":{},\"b\":{}},\"not\":{\"required\":[\"a\"]}}", &err);
    ASSERT_TRUE(g);
    EXPECT(g, "{\"b\":1}", 1);
    EXPECT(g, "{\"a\":1}", 0);
    gr_grammar_release(g);
    g = schema("{\"type\":[\"string\",\"null\",\"boolean\"],\"not\":{\"type\":\"null\"}}", &err);
    ASSERT_TRUE(g);
    EXPECT(g, "\"s\"", 1);
    EXPECT(g, "null", 0);
    gr_grammar_release(g);
    /* dependencies: a present key's dependents become required */
    g = schema("{\"properties\":{\"a\":{},\"b\":{}},\"dependencies\":{\"a\":[\"b\"]}}", &err);
    ASSERT_TRUE(g);
    EXPECT(g, "{\"a\":1,\"b\":2}", 1);
    EXPECT(g, "{\"a\":1}", 0);
    gr_grammar_release(g);
    /* uniqueItems: at most one item */
    g = schema("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"uniqueItems\":true}", &err);
    ASSERT_TRUE(g);
    EXPECT(g, "[]", 1);
    EXPECT(g, "[3]", 1);
    EXPECT(g, "[3,4]", 0);
    gr_grammar_release(g);
    /* oneOf made exclusive: each alternative leaves out a key the other requires */
    g = schema(
        "{\"type\":\"object\",\"properties\":{\"p\":{},\"q\":{}},\"oneOf\":[{\"required\":[\"p\"]},"
        "{\"required\":[\"q\"]}]}",
        &err);
    ASSERT_TRUE(g);
    EXPECT(g, "{\"p\":1}", 1);
    EXPECT(g, "{\"q\":1}", 1);
    EXPECT(g, "{\"p\":1,\"q\":1}", 0);
    gr_grammar_release(g);
    /* oneOf by length */
    g = schema("{\"type\":\"string\",\"oneOf\":[{\"maxLength\":0},{\"minLength\":2}]}", &err);
    ASSERT_TRUE(g);
    EXPECT(g, "\"\"", 1);
    EXPECT(g, "\"ab\"", 1);
    EXPECT(g, "\"a\"", 0);
    gr_grammar_release(g);
}

static void test_refusals_name_the_keyword(void)
{
    struct {
        const char *s, *want;
        kiln_code code;
    } cases[] = {
        {"{\"not\":{\"minimum\":3}}", "'not'", KILN_E_UNSUPPORTED},
        {"{\"type\":\"array\",\"uniqueItems\":true,\"minItems\":2}", "'uniqueItems'",
         KILN_E_UNSUPPORTED},
        {"{\"if\":{},\"then\":{}}", "'if'", KILN_E_UNSUPPORTED},
        {"{\"$ref\":\"https://example.com/s.json\"}", "'$ref'", KILN_E_UNSUPPORTED},
        {"{\"$ref\":\"#/$defs/missing\"}", "does not resolve", KILN_E_INVALID},
        {"{\"oneOf\":[{\"type\":\"integer\"},{\"minimum\":0}]}", "'oneOf'", KILN_E_UNSUPPORTED},
        {"{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}"
         "}}",
         "backreferences", KILN_E_UNSUPPORTED},
        {"{\"type\":\"number\",\"multipleOf\":0.1}", "'multipleOf'", KILN_E_UNSUPPORTED},
        {"{\"type\":\"string\",\"format\":\"idn-hostname\",\"pattern\":\"(?=a)\"}", "lookaround",
         KILN_E_UNSUPPORTED},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"patternProperties\":{\"(\":{}}}",
         "'patternProperties'", KILN_E_UNSUPPORTED},
        {"{\"type\":\"nope\"}", "unknown type", KILN_E_INVALID},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"contains\":{}}}}", "at /properties/a",
         KILN_E_UNSUPPORTED},
        {"{\"type\":\"object\",\"required\":[\"a\"],\"properties\":{\"a\":false}}",
         "matches nothing", KILN_E_INVALID},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        kiln_err err = {0};
        json_error_t je;
        json_t *s = json_loads(cases[i].s, 0, &je);
        ASSERT_TRUE(s);
        gr_grammar *g = NULL;
        kiln_code rc = gr_compile_json_schema(s, NULL, &g, &err);
        json_decref(s);
        if (rc != cases[i].code || !strstr(err.msg, cases[i].want)) {
            fprintf(stderr, "  case %zu: %s '%s', want %s '%s'\n", i, kiln_code_name(rc), err.msg,
                    kiln_code_name(cases[i].code), cases[i].want);
            ASSERT_TRUE(0);
        }
        gr_grammar_release(g);
    }
}

/* The schema in Gemma 4's argument syntax (gr_builder_add_json_schema_as):
 * bare keys, strings raw between a delimiter (here its text; the server uses
 * the special token), no delimiter or call end inside, numbers a JSON reader
 * reads back, quoted keys where a bare one cannot be read back. */
static gr_grammar *schema_as(const char *text, kiln_err *err)
{
    static const char *const forbid[] = {"<|\"|>", "<tool_call|>"};
    json_t *s = json_loads(text, 0, NULL);
    gr_options o = gr_options_default();
    o.json_ws_max = 0;
    gr_builder *b;
    gr_grammar *g = NULL;
    if (!s || gr_builder_create(&o, &b, err)) {
        json_decref(s);
        return NULL;
    }
    gr_value_syntax syn = {gr_str(b, "<|\"|>"), "<|\"|>", forbid, 2};
    gr_expr v;
    gr_rule root = gr_rule_new(b, "root");
    if (!gr_builder_add_json_schema_as(b, s, true, &syn, &v, err) &&
        !gr_rule_define(b, root, v, err))
        (void)gr_builder_compile(b, root, &g, err);
    gr_builder_destroy(b);
    json_decref(s);
    return g;
}

static void test_gemma4_argument_syntax(void)
{
    kiln_err err;
    gr_grammar *g = schema_as(
        "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":5},"
        "\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7},\"unit\":{\"enum\":[\"c\",[1,{\"k\":\"v\"}]]},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"pattern\":\"^[a-z]+$\"}},"
        "\"a:b\":{\"type\":\"boolean\"},\"meta\":{\"type\":\"object\",\"additionalProperties\":true},\"x\":{\"type\":\"number\"}},"
        "\"required\":[\"city\",\"days\"]}",
        &err);
    ASSERT_TRUE(g);
    EXPECT(g, "{city:<|\"|>Paris<|\"|>,days:3}", 1);
    EXPECT(g, "{city:<|\"|>a\"b\\\\<|\"|>,days:3}", 1); /* raw: quotes and backslashes as they are */
    EXPECT(g, "{city:<|\"|>\xc3\xa9t\xc3\xa9<|\"|>,days:3}", 1);
    EXPECT(g, "{city:\"Paris\",days:3}", 0);          /* JSON's quotes are not strings here */
    EXPECT(g, "{\"city\":<|\"|>Paris<|\"|>,days:3}", 0); /* nor JSON's keys */
    EXPECT(g, "{city:<|\"|>Parisx<|\"|>,days:3}", 0);   /* maxLength in characters */
    EXPECT(g, "{city:<|\"|>a<tool_call|><|\"|>,days:3}", 0);
    EXPECT(g, "{city:<|\"|>x<|\"|>,days:8}", 0);
    EXPECT(g, "{city: <|\"|>x<|\"|>,days:1}", 0); /* compact, as the template writes it */
    EXPECT(g, "{city:<|\"|>x<|\"|>,days:1,unit:<|\"|>c<|\"|>}", 1);
    EXPECT(g, "{city:<|\"|>x<|\"|>,days:1,unit:[1,{k:<|\"|>v<|\"|>}]}", 1);
    EXPECT(g, "{city:<|\"|>x<|\"|>,days:1,unit:<|\"|>d<|\"|>}", 0);
    EXPECT(g, "{city:<|\"|>x<|\"|>,days:1,tags:[<|\"|>ab<|\"|>,<|\"|>c<|\"|>]}", 1);
    EXPECT(g, "{city:<|\"|>x<|\"|>,days:1,tags:[<|\"|>Ab<|\"|>]}", 0);
    EXPECT(g, "{city:<|\"|>x<|\"|>,days:1,<|\"|>a:b<|\"|>:true}", 1); /* ':' in a key: quoted */
    EXPECT(g, "{city:<|\"|>x<|\"|>,days:1,a:b:true}", 0);
    EXPECT(g, "{city:<|\"|>x<|\"|>,days:1,meta:{k:1,z_2:[null,<|\"|>s<|\"|>,false]}}", 1);
    EXPECT(g, "{city:<|\"|>x<|\"|>,days:1,meta:{<|\"|>k<|\"|>:1}}", 0);
    EXPECT(g, "{city:<|\"|>x<|\"|>,days:1,x:-1.5e-12}", 1);
    EXPECT(g, "{city:<|\"|>x<|\"|>,days:1,x:1e308}", 0); /* three exponent digits: a reader may overflow */
    EXPECT(g, "{city:<|\"|>x<|\"|>,days:1,x:1234567890123456789}", 0); /* 19 digits */
    EXPECT(g, "{city:<|\"|>x<|\"|>,days:1,other:1}", 0);              /* strict: no extras */
    gr_grammar_release(g);
    /* not strict: extra keys, bare, non-empty, never a declared one */
    g = schema_as("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
                  "\"additionalProperties\":true}",
                  &err);
    ASSERT_TRUE(g);
    EXPECT(g, "{a:1,b_c:<|\"|>z<|\"|>}", 1);
    EXPECT(g, "{a:1,a:2}", 0);
    EXPECT(g, "{a:1,:2}", 0);
    gr_grammar_release(g);
    /* a key no spelling carries: refused, naming it */
    ASSERT_TRUE(!schema_as("{\"type\":\"object\",\"properties\":{\"x<|\\\"|>\":{}}}", &err));
    ASSERT_CODE(err.code, KILN_E_UNSUPPORTED);
    ASSERT_TRUE(strstr(err.msg, "x<|"));
    ASSERT_TRUE(!schema_as("{\"type\":\"object\",\"properties\":{\"\":{}},\"required\":[\"\"]}", &err));
    ASSERT_CODE(err.code, KILN_E_UNSUPPORTED);
}

int main(void)
{
    char p[4096];
    tok_tokenizer *tok = NULL;
    kiln_err err;
    if (tok_load(test_shared_path(p, sizeof p, "models/stories260K"), &tok, &err) ||
        gr_vocab_create(tok, &V, &err)) {
        fprintf(stderr, "no stories260K tokenizer: %s\n", err.msg);
        return 1;
    }
    RUN(test_objects_required_optional_and_extras);
    RUN(test_arrays_tuples_and_counts);
    RUN(test_string_lengths_count_characters);
    RUN(test_formats_dates_and_more);
    RUN(test_number_bounds_exact);
    RUN(test_refs_recursion_allof_oneof);
    RUN(test_subsets_for_pattern_properties_not_dependencies_unique);
    RUN(test_refusals_name_the_keyword);
    RUN(test_gemma4_argument_syntax);
    gr_vocab_destroy(V);
    tok_destroy(tok);
    return TEST_DONE();
}
