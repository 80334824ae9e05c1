/*
 * test_tmpl_filters.c — filters, tests and the string/dict methods, with the
 * argument forms real chat templates use.
 */
#include "../template/tmpl_test_util.h"

static void test_string_filters(void)
{
    ASSERT_RENDER(
        "|{{ '  a b  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'aBc' | upper }}|{{ 'aBc' | lower }}|"
        "{{ 'hELLO wORLD' | title }}|{{ 'hELLO' | capitalize }}|{{ '\xc3\xa9t\xc3\xa9' | upper }}|",
        NULL, "|a b|a|ABC|abc|Hello World|Hello|\xc3\x89T\xc3\x89|");
    ASSERT_RENDER("{{ 'a-b-c' | replace('-', '+', 1) }}|{{ 'x' | replace('', '_') }}|{{ 'one two  "
                  "three' | wordcount }}",
                  NULL, "a+b-c|_x_|3");
    ASSERT_RENDER("{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' "
                  "| indent('> ', blank=true) }}",
                  NULL, "a\n  b\n\n  c|  a\n  b|a\n> \n> b");
    ASSERT_RENDER(
        "{{ '<a href=\"x\">&\\'' | e }}|{{ '<b>' | safe }}|{{ '%s-%d' | format('a', 3) }}", NULL,
        "&lt;a href=&#34;x&#34;&gt;&amp;&#39;|<b>|a-3");
    ASSERT_RENDER_ERR("{{ [1] | trim }}", NULL, KILN_E_INVALID,
                      "cannot apply filter 'trim' to list");
}

static void test_number_filters(void)
{
    ASSERT_RENDER("{{ '42' | int + 1 }}|{{ '4.7' | int }}|{{ 'x' | int(-1) }}|{{ 3.9 | int }}|{{ "
                  "'2.5' | float }}|"
                  "{{ 'x' | float }}|{{ -3 | abs }}|{{ 2.567 | round(2) }}|{{ 2.5 | round }}|{{ "
                  "2.1 | round(0, 'ceil') }}",
                  NULL, "43|4|-1|3|2.5|0.0|3|2.57|3.0|3.0");
}

static void test_sequence_filters(void)
{
    ASSERT_RENDER(
        "{{ [3, 1, 2] | sort }}|{{ ['b', 'A', 'c'] | sort(reverse=true) }}|{{ [1, 2] | reverse }}|"
        "{{ 'abc' | reverse }}|{{ [1, 2, 3] | first }}{{ [1, 2, 3] | last }}|{{ [] | first }}|"
        "{{ [1, 2, 1, 'a', 'A'] | unique }}|{{ [1, 2, 3] | join('-') }}|{{ 'abc' | list }}|{{ [4, "
        "5] | length }}",
        NULL,
        "[1, 2, 3]|[\"c\", \"b\", \"A\"]|[2, 1]|cba|13||[1, 2, \"a\"]|1-2-3|[\"a\", \"b\", "
        "\"c\"]|2");
    ASSERT_RENDER("{{ [1, 2, 3, 4, 5] | batch(2) | list }}|{{ [1, 2, 3] | batch(2, 0) }}|{{ [3, 1, "
                  "2] | min }}"
                  "{{ [3, 1, 2] | max }}|{{ [1, 2, 3] | sum }}",
                  NULL, "[[1, 2], [3, 4], [5]]|[[1, 2], [3, 0]]|13|6");
    ASSERT_RENDER_ERR("{{ [1, 'a'] | sort }}", NULL, KILN_E_INVALID, "cannot compare");
    /* empty containers (a tool without parameters, as Gemma 4's template sorts
     * them): nothing to sort, no copy from a NULL array (UBSan aborted here) */
    ASSERT_RENDER("{{ [] | sort }}|{{ {} | dictsort }}|{% for k, v in {} | dictsort %}x{% endfor %}|"
                  "{{ [] | sort(attribute='a') }}",
                  NULL, "[]|[]||[]");
}

static void test_select_reject_map_family(void)
{
    const char *ctx = "{\"ms\": [{\"role\": \"system\", \"n\": 1}, {\"role\": \"user\", \"n\": 2}, "
                      "{\"role\": \"user\", \"tool\": {\"name\": \"t\"}}]}";
    ASSERT_RENDER(
        "{{ ms | selectattr('role', 'equalto', 'user') | list | length }}|"
        "{{ ms | rejectattr('role', 'eq', 'user') | map(attribute='n') | list }}|"
        "{{ ms | selectattr('tool') | map(attribute='tool.name') | first }}|"
        "{{ ms | map(attribute='n', default=0) | list }}|"
        "{{ ms | map(attribute='role') | map('upper') | join(',') }}|"
        "{{ [1, 2, 3, 4] | select('odd') | list }}{{ [1, 2, 3, 4] | reject('divisibleby', 2) | "
        "list }}|"
        "{{ [0, 1, '', 'a'] | select | list }}|{{ ms | selectattr('n', '>', 1) | list | length }}",
        ctx, "2|[1]|t|[1, 2, 0]|SYSTEM,USER,USER|[1, 3][1, 3]|[1, \"a\"]|1");
    ASSERT_RENDER("{{ ms | sort(attribute='role', reverse=true) | map(attribute='role') | join }}",
                  ctx,
                  "useruser"
                  "system");
}

static void test_dict_filters_and_methods(void)
{
    const char *ctx = "{\"d\": {\"b\": 2, \"a\": 1, \"C\": 3}}";
    ASSERT_RENDER(
        "{{ d | items | list }}|{{ d | dictsort }}|{{ d | dictsort(by='value', reverse=true) | "
        "first }}|"
        "{{ d.keys() | list }}|{{ d | values }}|{{ d.get('a') }}{{ d.get('z', 9) }}{{ d.get('z') "
        "is none }}",
        ctx,
        "[[\"b\", 2], [\"a\", 1], [\"C\", 3]]|[[\"a\", 1], [\"b\", 2], [\"C\", 3]]|[\"C\", 3]|"
        "[\"b\", \"a\", \"C\"]|[2, 1, 3]|19true");
    ASSERT_RENDER("{{ d | length }}{{ undefined_x | length }}{{ undefined_x | default('dflt') }}{{ "
                  "'' | d('e', true) }}"
                  "{{ none | default('n') }}{{ 0 | default('z', boolean=true) }}",
                  ctx, "30dfltez"); /* none is defined: default() keeps it */
    ASSERT_RENDER("{{ dict(a=1, b=[2]) | tojson }}|{{ namespace(x=1).x }}", NULL,
                  "{\"a\": 1, \"b\": [2]}|1");
}

static void test_tojson_matches_python_json_dumps(void)
{
    const char *ctx = "{\"o\": {\"s\": \"h\xc3\xa9\\\"\\\\\\n\\u0001/\", \"f\": 1.5, \"g\": 1.0, "
                      "\"i\": -3, \"b\": true, \"n\": null, "
                      "\"l\": [], \"d\": {}, \"z\": [1, {\"k\": \"v\"}]}}";
    ASSERT_RENDER("{{ o | tojson }}", ctx,
                  "{\"s\": \"h\xc3\xa9\\\"\\\\\\n\\u0001/\", \"f\": 1.5, \"g\": 1.0, \"i\": -3, "
                  "\"b\": true, \"n\": null, "
                  "\"l\": [], \"d\": {}, \"z\": [1, {\"k\": \"v\"}]}");
    ASSERT_RENDER("{{ o.z | tojson(indent=2) }}", ctx, "[\n  1,\n  {\n    \"k\": \"v\"\n  }\n]");
    ASSERT_RENDER("{{ {'b': 1, 'a': '\xc3\xa9\xf0\x9f\xa4\x97'} | tojson(sort_keys=true, "
                  "ensure_ascii=true) }}",
                  NULL, "{\"a\": \"\\u00e9\\ud83e\\udd17\", \"b\": 1}");
    ASSERT_RENDER("{{ [1, {'a': 2}] | tojson(separators=(',', ':')) }}|{{ undefined_x | tojson }}",
                  NULL, "[1,{\"a\":2}]|null");
}

static void test_tests(void)
{
    ASSERT_RENDER(
        "{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 's' is string }}{{ 1 is number "
        "}}"
        "{{ 1.5 is float }}{{ 1 is integer }}{{ true is boolean }}{{ {} is mapping }}{{ [] is "
        "iterable }}"
        "{{ 'a' is sequence }}{{ range is callable }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is "
        "divisibleby(3) }}"
        "{{ 9 is divisibleby 4 }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ 1 is in [1] }}{{ x is "
        "sameas none }}"
        "{{ 2 is eq 2 }}{{ 2 is equalto(3) }}{{ true is true }}{{ false is false }}{{ 3 is gt 2 }}",
        "{\"x\": null}",
        "truetruetruetruetruetruetruetruetruetruetruetruetruetruetruefalsetruetruetruetruetruefalse"
        "truetruetrue");
    ASSERT_RENDER("{{ true is number }}{{ 1 is boolean }}{{ {} is iterable }}{{ 1 is not string }}",
                  NULL, "falsefalsetruetrue");
}

static void test_string_methods(void)
{
    ASSERT_RENDER(
        "{{ '  x '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\n\\na'.lstrip('\\n') }}|{{ 'a  "
        "'.rstrip() }}|"
        "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ 'a,b,,c'.split(',') }}|"
        "{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'aXbX'.replace('X', '-') }}|"
        "{{ '{} and {name}'.format(1, name='n') }}|{{ 'banana'.count('an') }}|{{ "
        "'h\xc3\xa9llo'.find('l') }}|"
        "{{ ', '.join(['a', 'b']) }}|{{ 'hello world'.title() }}|{{ 'x'.upper() }}",
        NULL,
        "x|a|a|a|truetrue|[\"a\", \"b\", \"\", \"c\"]|[\"a\", \"b\"]|[\"a\", \"b c\"]|a-b-|1 and "
        "n|2|2|a, b|"
        "Hello World|X");
    ASSERT_RENDER_ERR("{{ 'a'.split('') }}", NULL, KILN_E_INVALID, "empty separator");
}

int main(void)
{
    RUN(test_string_filters);
    RUN(test_number_filters);
    RUN(test_sequence_filters);
    RUN(test_select_reject_map_family);
    RUN(test_dict_filters_and_methods);
    RUN(test_tojson_matches_python_json_dumps);
    RUN(test_tests);
    RUN(test_string_methods);
    return TEST_DONE();
}
