/*
 * test_tmpl_eval.c — statements and expressions: if/for/set/macro/call/filter
 * blocks, loop variables and loop control, scoping and namespaces, operators with
 * their Python / @huggingface/jinja semantics, printing of values, errors
 * (raise_exception verbatim, runtime errors with line:column) and the limits.
 */
#include <pthread.h>

#include "../template/tmpl_test_util.h"

static void test_if_elif_else_picks_one_branch(void)
{
    ASSERT_RENDER("{% if 1 == 2 %}A{% elif 2 == 3 %}B{% elif x %}C{% else %}D{% endif %}",
                  "{\"x\": 1}", "C");
    ASSERT_RENDER("{% if '' or [] or {} or 0 or none %}T{% else %}F{% endif %}", NULL, "F");
}

static void test_for_loop_exposes_loop_variables(void)
{
    ASSERT_RENDER(
        "{% for x in 'abc' | list %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
        "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
        NULL, "1032truefalse3;2121falsefalse3;3210falsetrue3;");
    ASSERT_RENDER(
        "{% for x in [1, 2, 3] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}|{% endfor %}",
        NULL, "<1>2|1<2>3|2<3>|");
}

static void test_for_loop_filter_else_and_unpacking(void)
{
    ASSERT_RENDER("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}",
                  NULL, "2242");
    ASSERT_RENDER("{% for x in [] %}A{% else %}empty{% endfor %}", NULL, "empty");
    ASSERT_RENDER("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}",
                  "{\"d\": {\"b\": 1, \"a\": 2}}", "b=1,a=2,");
    ASSERT_RENDER("{% for k in d %}{{ k }}{% endfor %}", "{\"d\": {\"b\": 1, \"a\": 2}}", "ba");
    ASSERT_RENDER("{% for x in missing %}A{% else %}none{% endfor %}", NULL, "none");
}

static void test_break_keeps_output_so_far_and_continue_skips(void)
{
    ASSERT_RENDER(
        "{% for x in [1, 2, 3, 4] %}{{ x }}{% if x == 2 %}{% break %}{% endif %}{% endfor %}", NULL,
        "12");
    ASSERT_RENDER(
        "{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %}", NULL,
        "13");
    ASSERT_RENDER("{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}|{{ range(3) }}", NULL,
                  "531|[0, 1, 2]");
}

static void test_set_scoping_and_namespaces(void)
{
    ASSERT_RENDER("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", NULL, "1");
    ASSERT_RENDER("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}{% "
                  "endfor %}{{ ns.x }}",
                  NULL, "4");
    ASSERT_RENDER("{% set a, b = 1, 2 %}{{ b }}{{ a }}", NULL, "21");
    ASSERT_RENDER("{% set t %}<{{ 1 + 1 }}>{% endset %}{{ t }}{{ t | length }}", NULL, "<2>3");
    ASSERT_RENDER("{% set messages = messages[1:] %}{{ messages | length }}",
                  "{\"messages\": [1, 2, 3]}", "2");
    ASSERT_RENDER_ERR("{% set d = {} %}{% set d.x = 1 %}", NULL, KILN_E_INVALID, "non-namespace");
}

static void test_macros_defaults_kwargs_and_caller(void)
{
    ASSERT_RENDER("{% macro f(a, b=2, c=a) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ f(1) }}|{{ f(1, "
                  "c=5) }}|{{ f(*[7, 8]) }}",
                  NULL, "121|125|787");
    ASSERT_RENDER(
        "{% macro f() %}{{ kwargs.x }}{{ varargs | length }}{% endmacro %}{{ f(1, 2, x=3) }}", NULL,
        "32");
    ASSERT_RENDER("{% macro wrap(t) %}<{{ t }}:{{ caller() }}>{% endmacro %}{% call wrap('b') "
                  "%}in{% endcall %}",
                  NULL, "<b:in>");
    ASSERT_RENDER("{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}"
                  "{% call(v) each([1, 2]) %}[{{ v }}]{% endcall %}",
                  NULL, "[1][2]");
    ASSERT_RENDER_ERR("{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}", NULL, KILN_E_INVALID,
                      "takes not more than 1");
    ASSERT_RENDER_ERR("{% macro f(a) %}{% endmacro %}{{ f(b=2) }}", NULL, KILN_E_INVALID,
                      "no keyword argument 'b'");
}

static void test_filter_blocks_apply_to_their_body(void)
{
    ASSERT_RENDER("{% filter upper %}a{{ 'b' }}{% endfilter %}", NULL, "AB");
    ASSERT_RENDER("{% filter replace('a', 'o') %}banana{% endfilter %}", NULL, "bonono");
}

static void test_arithmetic_follows_python(void)
{
    ASSERT_RENDER("{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7.5 // 2 }}|{{ -7 % 3 }}|{{ 7 % -3 }}|{{ 7 / 2 "
                  "}}|{{ 2 ** 10 }}|{{ 2 ** -1 }}",
                  NULL, "3|-4|-4.0|2|-2|3.5|1024|0.5");
    ASSERT_RENDER(
        "{{ 1 + 2.0 }}|{{ 0.1 + 0.2 }}|{{ 1e3 if false else 1.0e0 if false else 3 * 1.5 }}", NULL,
        "3.0|0.30000000000000004|4.5");
    ASSERT_RENDER("{{ 9223372036854775807 + 1 }}", NULL, "9.223372036854776e+18");
    ASSERT_RENDER("{{ 'ab' * 3 }}|{{ [1] * 2 }}|{{ [1] + [2] }}", NULL, "ababab|[1, 1]|[1, 2]");
    ASSERT_RENDER_ERR("{{ 1 / 0 }}", NULL, KILN_E_INVALID, "division by zero");
    ASSERT_RENDER_ERR("{{ 1 // 0 }}", NULL, KILN_E_INVALID, "by zero");
}

static void test_string_concatenation_and_comparison(void)
{
    ASSERT_RENDER("{{ 'a' + 1 }}|{{ 1 ~ 'b' ~ true ~ none ~ undefined_thing }}|{{ 'abc' < 'abd' }}",
                  NULL, "a1|1btrue|true");
    ASSERT_RENDER_ERR("{{ 'a' + none }}", NULL, KILN_E_INVALID, "unsupported operand");
    ASSERT_RENDER_ERR("{{ nope + 1 }}", NULL, KILN_E_INVALID, "undefined");
}

static void test_membership_and_equality(void)
{
    ASSERT_RENDER(
        "{{ 1 in [true] }}|{{ true in [true] }}|{{ 1 == true }}|{{ 'b' in 'abc' }}|{{ 'k' in {'k': "
        "1} }}|"
        "{{ 1 not in [1] }}|{{ x in y }}|{{ [1, [2]] == [1, [2]] }}|{{ none == undefined_x }}",
        NULL, "false|true|true|true|true|false|false|true|true");
}

static void test_ternary_select_and_short_circuit(void)
{
    ASSERT_RENDER("{{ 'a' if x else 'b' }}|{{ 'c' if not x }}|{{ 0 or 'd' }}|{{ 1 and 2 }}",
                  "{\"x\": false}", "b|c|d|2");
    ASSERT_RENDER("{{ false and raise_exception('no') }}{{ true or raise_exception('no') }}", NULL,
                  "falsetrue");
}

static void test_member_access_index_and_slices(void)
{
    const char *ctx =
        "{\"m\": [[\"a\", \"b\"], [\"c\"]], \"o\": {\"k\": {\"x\": 5}}, \"s\": \"h\xc3\xa9llo\"}";
    ASSERT_RENDER(
        "{{ m.0.1 }}{{ m[1][0] }}{{ m[-1] }}{{ o.k.x }}{{ o['k']['x'] }}{{ o.missing.deeper }}",
        ctx, "bc[\"c\"]55");
    ASSERT_RENDER("{{ s[1] }}|{{ s[::-1] }}|{{ s[1:3] }}|{{ s[-2:] }}|{{ [1, 2, 3, 4][::2] }}|{{ "
                  "[1, 2, 3][5:] }}",
                  ctx, "\xc3\xa9|oll\xc3\xa9h|\xc3\xa9l|lo|[1, 3]|[]");
    ASSERT_RENDER("{{ m.length }}{{ s.length }}", ctx, "25");
}

static void test_values_print_as_huggingface_jinja_prints_them(void)
{
    ASSERT_RENDER("{{ true }}|{{ none }}|{{ undefined_thing }}|{{ 1.0 }}|{{ 1e-7 * 1 }}|{{ [1, "
                  "'a', none, true] }}|"
                  "{{ {'a': [1.5]} }}|{{ -0.0 }}",
                  NULL, "true|||1.0|1e-07|[1, \"a\", null, true]|{\"a\": [1.5]}|-0.0");
    ASSERT_RENDER("{{ 2.5e16 * 1 }}|{{ 123456789.125 }}|{{ 1 / 3 }}", NULL,
                  "2.5e+16|123456789.125|0.3333333333333333");
}

static void test_raise_exception_surfaces_the_message_verbatim(void)
{
    char *got = tt_render("{% if true %}{{ raise_exception('Conversation roles must alternate "
                          "user/assistant') }}{% endif %}",
                          NULL);
    ASSERT_STR_EQ(got, "ERR(invalid): Conversation roles must alternate user/assistant");
    free(got);
}

static void test_runtime_errors_carry_line_and_column(void)
{
    ASSERT_RENDER_ERR("a\nb {{ x | nosuchfilter }}", "{\"x\": 1}", KILN_E_INVALID, "template:2:");
    ASSERT_RENDER_ERR("{{ x | nosuchfilter }}", "{\"x\": 1}", KILN_E_INVALID,
                      "unknown filter 'nosuchfilter'");
    ASSERT_RENDER_ERR("{{ 1 is nosuchtest }}", NULL, KILN_E_INVALID, "unknown test 'nosuchtest'");
    ASSERT_RENDER_ERR("{{ x() }}", "{\"x\": 1}", KILN_E_INVALID, "not a function");
}

static void test_limits_fail_cleanly(void)
{
    ASSERT_RENDER_ERR("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL,
                      KILN_E_TOO_LARGE, "recursion");
    ASSERT_RENDER_ERR(
        "{% for i in range(2000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", NULL,
        KILN_E_TOO_LARGE, "loop iterations");
    ASSERT_RENDER_ERR("{{ range(10000000000) }}", NULL, KILN_E_TOO_LARGE, "range()");
    tmpl_options o = tmpl_options_default();
    o.max_output = 1000;
    char *got = tt_render_opt("{% for i in range(500) %}xyz{% endfor %}", NULL, &o);
    ASSERT_TRUE(strstr(got, "ERR(too_large)") && strstr(got, "output exceeds"));
    free(got);
    o = tmpl_options_default();
    o.max_memory = 1 << 20;
    got = tt_render_opt("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}"
                        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                        NULL, &o);
    ASSERT_TRUE(strstr(got, "ERR(too_large)") != NULL);
    free(got);
}

/* The shared account (the server's --request-memory): a render reserves what
 * its values and text buffers hold as they grow, gives all of it back at the
 * end, and stops with KILN_E_BUSY, holding nothing, when the account is full. */
typedef struct {
    size_t held, peak, cap;
} test_acct;

static kiln_code acct_reserve(void *ctx, size_t n, size_t total)
{
    test_acct *a = ctx;
    if (a->cap && total > a->cap) return KILN_E_TOO_LARGE;
    if (a->cap && a->held + n > a->cap) return KILN_E_BUSY;
    a->held += n;
    if (a->held > a->peak) a->peak = a->held;
    return KILN_OK;
}

static void acct_release(void *ctx, size_t n)
{
    test_acct *a = ctx;
    a->held -= n;
}

static kiln_code render_acct(const char *src, test_acct *a, size_t *out_len, kiln_err *err)
{
    tmpl_options o = tmpl_options_default();
    o.acct_reserve = acct_reserve;
    o.acct_release = acct_release;
    o.acct_ctx = a;
    o.acct_name = "the test account";
    tmpl_template *t = NULL;
    kiln_code rc = tmpl_compile(src, strlen(src), &o, &t, err);
    char *out = NULL;
    if (!rc) rc = tmpl_render(t, NULL, &out, out_len, err);
    free(out);
    tmpl_free(t);
    return rc;
}

static void test_renders_reserve_what_they_hold_in_a_shared_account(void)
{
    /* a 1 MiB string (16 bytes doubled 16 times), printed */
    const char *big = "{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(16) %}"
                      "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}";
    test_acct a = {0};
    size_t len = 0;
    kiln_err err;
    ASSERT_EQ_I64(render_acct(big, &a, &len, &err), KILN_OK);
    ASSERT_EQ_U64(len, (size_t)1 << 20);
    ASSERT_EQ_U64(a.held, 0);                         /* all given back */
    ASSERT_TRUE(a.peak >= (size_t)2 << 20);           /* the string and the text it printed */
    ASSERT_TRUE(a.peak <= (size_t)8 << 20);           /* not the sum of every step */
    ASSERT_EQ_U64(a.peak % ((size_t)64 << 10), 0);    /* reserved in 64 KiB steps */
    test_acct small = {0};
    ASSERT_EQ_I64(render_acct("{% for i in range(100) %}{{ i }}{% endfor %}", &small, &len, &err),
                  KILN_OK);
    ASSERT_TRUE(small.peak > 0 && small.peak <= (size_t)128 << 10);
    ASSERT_EQ_U64(small.held, 0);
    /* more than the whole account: TOO_LARGE (a 400 in the server), nothing kept */
    test_acct small_cap = {.cap = (size_t)512 << 10};
    ASSERT_EQ_I64(render_acct(big, &small_cap, &len, &err), KILN_E_TOO_LARGE);
    ASSERT_TRUE(strstr(err.msg, "more than the test account holds") != NULL);
    ASSERT_EQ_U64(small_cap.held, 0);
    ASSERT_TRUE(small_cap.peak <= small_cap.cap);
    /* the account held by others: BUSY (a 503), nothing kept */
    test_acct others = {.cap = (size_t)8 << 20, .held = (size_t)7 << 20};
    ASSERT_EQ_I64(render_acct(big, &others, &len, &err), KILN_E_BUSY);
    ASSERT_TRUE(strstr(err.msg, "which other requests hold now") != NULL);
    ASSERT_EQ_U64(others.held, (size_t)7 << 20);
}

static void test_reference_cycles_are_swept(void)
{
    /* a namespace holding itself, and a caller stored in a namespace: freed at the end
     * (ASan/LSan builds check there is no leak) */
    ASSERT_RENDER("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me.me is defined }}", NULL,
                  "true");
    ASSERT_RENDER("{% set ns = namespace() %}{% macro m() %}{% set ns.c = caller %}{% endmacro %}"
                  "{% call m() %}x{% endcall %}{{ ns.c() }}",
                  NULL, "x");
}

static void test_deeply_nested_garbage_is_freed_without_deep_recursion(void)
{
    ASSERT_RENDER("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] "
                  "%}{% endfor %}"
                  "{{ ns.x | length }}{% set ns.x = none %}ok",
                  NULL, "1ok");
}

static void test_strftime_now_uses_the_injected_clock(void)
{
    tmpl_options o = tmpl_options_default();
    o.fixed_now = 1752148800; /* 2025-07-10T12:00:00Z */
    char *got =
        tt_render_opt("{{ strftime_now('%d %b %Y|%B %-d|%H:%M:%S|%A %j %p %y') }}", NULL, &o);
    ASSERT_STR_EQ(got, "10 Jul 2025|July 10|12:00:00|Thursday 191 PM 25");
    free(got);
    got = tt_render("{{ strftime_now('%Y') | length }}", NULL);
    ASSERT_STR_EQ(got, "4");
    free(got);
}

static void test_compiled_template_renders_many_contexts(void)
{
    kiln_err err;
    tmpl_template *t;
    const char *src = "{{ name | upper }}";
    ASSERT_OK(tmpl_compile(src, strlen(src), NULL, &t, &err));
    for (int i = 0; i < 3; i++) {
        tmpl_value *ctx = tmpl_value_dict_new();
        ASSERT_OK(tmpl_value_dict_set(ctx, "name", tmpl_value_cstring(i ? "b" : "a"), &err));
        char *out;
        size_t n;
        ASSERT_OK(tmpl_render(t, ctx, &out, &n, &err));
        ASSERT_STR_EQ(out, i ? "B" : "A");
        free(out);
        tmpl_value_free(ctx);
    }
    tmpl_value *notdict = tmpl_value_int(1);
    char *out;
    ASSERT_CODE(tmpl_render(t, notdict, &out, NULL, &err), KILN_E_INVALID);
    tmpl_value_free(notdict);
    tmpl_free(t);
}

/* Renders src on a thread with a 256 KiB stack (what tmpl.h says a render needs;
 * AddressSanitizer's redzones make frames ~3x larger, so 1 MiB there) into *out
 * ("ERR(...)" on failure): recursion past max_depth must end in the limit's
 * error there, not overrun the stack. */
#if defined(__SANITIZE_ADDRESS__)
#define RENDER_STACK (1024u << 10)
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RENDER_STACK (1024u << 10)
#endif
#endif
#ifndef RENDER_STACK
#define RENDER_STACK (256u << 10)
#endif
typedef struct {
    const char *src, *ctx;
    char *out;
} small_job;

static void *small_run(void *a)
{
    small_job *j = a;
    j->out = tt_render(j->src, j->ctx);
    return NULL;
}

static char *render_small_stack(const char *src, const char *ctx)
{
    small_job j = {src, ctx, NULL};
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, RENDER_STACK);
    pthread_t t;
    if (pthread_create(&t, &a, small_run, &j) == 0) pthread_join(t, NULL);
    pthread_attr_destroy(&a);
    return j.out ? j.out : strdup("thread failed");
}

static void test_recursion_stops_at_the_depth_limit_on_a_small_stack(void)
{
    /* each shape recurses without end; each must name the limit (500) */
    static const char *const shapes[] = {
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "{% macro f(n) %}{% for x in [1] %}{% if true %}{{ f(n + 1) }}{% endif %}{% endfor %}"
        "{% endmacro %}{{ f(0) }}",
        "{% macro f() %}{% call f() %}x{% endcall %}{% endmacro %}{{ f() }}",
        "{% macro f(n) %}{% set x %}{{ f(n + 1) }}{% endset %}{{ x }}{% endmacro %}{{ f(0) }}",
        "{% macro f(n) %}{{ caller() }}{% endmacro %}"
        "{% macro g(n) %}{% call f(n) %}{{ g(n + 1) }}{% endcall %}{% endmacro %}{{ g(0) }}",
        "{% macro f(n) %}{{ [f(n + 1)] | map('trim') | join }}{% endmacro %}{{ f(0) }}",
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        char *got = render_small_stack(shapes[i], NULL);
        if (!strstr(got, "ERR(too_large)") || !strstr(got, "template recursion deeper than 500")) {
            fprintf(stderr, "  shape %zu: %s\n", i, got);
            free(got);
            TEST_FAIL_("recursion did not stop at the limit");
        }
        free(got);
    }
    /* a recursion driven by the data stops there too, and a shallow one renders */
    const char *src = "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% else %}done{% endif %}{% endmacro %}"
                      "{{ f(depth) }}";
    char *got = render_small_stack(src, "{\"depth\": 100000}");
    ASSERT_TRUE(strstr(got, "template recursion deeper than 500") != NULL);
    free(got);
    got = render_small_stack(src, "{\"depth\": 50}");
    ASSERT_STR_EQ(got, "done");
    free(got);
    /* a long expression chain (a left-leaning tree 100,000 deep) */
    size_t n = 100000;
    char *chain = malloc(n * 4 + 16), *p = chain;
    p += sprintf(p, "{{ 1");
    for (size_t i = 0; i < n; i++) p += sprintf(p, " ~1");
    sprintf(p, " }}");
    got = render_small_stack(chain, NULL);
    ASSERT_TRUE(strstr(got, "template recursion deeper than 500") != NULL);
    free(got);
    free(chain);
}

static void test_context_deeper_than_the_limit_is_invalid_not_out_of_memory(void)
{
    kiln_err err;
    tmpl_value *v = NULL;
    json_t *j = json_integer(1);
    for (int i = 0; i < 513; i++) j = json_pack("[o]", j); /* 513 levels: one past */
    ASSERT_CODE(tmpl_value_from_json(j, &v, &err), KILN_E_INVALID);
    ASSERT_TRUE(v == NULL && strstr(err.msg, "more than 512 levels") != NULL);
    json_t *at = json_array_get(j, 0); /* 512 levels */
    ASSERT_OK(tmpl_value_from_json(at, &v, &err));
    tmpl_value_free(v);
    json_decref(j);
}

int main(void)
{
    RUN(test_if_elif_else_picks_one_branch);
    RUN(test_for_loop_exposes_loop_variables);
    RUN(test_for_loop_filter_else_and_unpacking);
    RUN(test_break_keeps_output_so_far_and_continue_skips);
    RUN(test_set_scoping_and_namespaces);
    RUN(test_macros_defaults_kwargs_and_caller);
    RUN(test_filter_blocks_apply_to_their_body);
    RUN(test_arithmetic_follows_python);
    RUN(test_string_concatenation_and_comparison);
    RUN(test_membership_and_equality);
    RUN(test_ternary_select_and_short_circuit);
    RUN(test_member_access_index_and_slices);
    RUN(test_values_print_as_huggingface_jinja_prints_them);
    RUN(test_raise_exception_surfaces_the_message_verbatim);
    RUN(test_runtime_errors_carry_line_and_column);
    RUN(test_limits_fail_cleanly);
    RUN(test_renders_reserve_what_they_hold_in_a_shared_account);
    RUN(test_reference_cycles_are_swept);
    RUN(test_deeply_nested_garbage_is_freed_without_deep_recursion);
    RUN(test_strftime_now_uses_the_injected_clock);
    RUN(test_compiled_template_renders_many_contexts);
    RUN(test_recursion_stops_at_the_depth_limit_on_a_small_stack);
    RUN(test_context_deeper_than_the_limit_is_invalid_not_out_of_memory);
    return TEST_DONE();
}
