/*
 * test_tmpl_lex.c — template text to tokens: whitespace control, trim_blocks and
 * lstrip_blocks as transformers sets them, comments, string escapes, the
 * {% generation %} tag, and syntax errors reported at the user's line:column.
 */
#include "../template/tmpl_test_util.h"

static void test_text_and_expressions_interleave(void)
{
    ASSERT_RENDER("Hello world!", NULL, "Hello world!");
    ASSERT_RENDER("0{{ 'A' }}1{{ 'B' }}{{ 'C' }}2", NULL, "0A1BC2");
    ASSERT_RENDER("", NULL, "");
    ASSERT_RENDER("{# only a comment #}", NULL, "");
}

static void test_single_trailing_newline_is_dropped(void)
{
    ASSERT_RENDER("a\n", NULL, "a");
    ASSERT_RENDER("a\n\n", NULL, "a\n");
}

static void test_dash_markers_strip_whitespace_on_their_side(void)
{
    ASSERT_RENDER("A {{- ' B ' -}} C", NULL, "A B C");
    ASSERT_RENDER("  {%- if true -%}  A  {%- endif -%}  ", NULL, "A");
    ASSERT_RENDER("x \n {#- c -#} \n y", NULL, "xy");
    ASSERT_RENDER("{\n{%- for i in [1, 2, 3] -%}\n  {{ i }}\n{%- endfor -%}\n}", NULL, "{123}");
}

static void test_trim_and_lstrip_blocks_are_on_by_default(void)
{
    ASSERT_RENDER("  {% if true %}\n  x\n  {% endif %}\ny", NULL, "  x\ny");
    ASSERT_RENDER("a {% if true %}b{% endif %}", NULL, "a b"); /* not at line start */
    ASSERT_RENDER("{# c #}\nz", NULL, "z");
    ASSERT_RENDER("{{ 1 }}\nz", NULL, "1\nz"); /* expressions keep their newline */
}

static void test_options_can_turn_trimming_off(void)
{
    tmpl_options o = tmpl_options_default();
    o.trim_blocks = o.lstrip_blocks = false;
    char *got = tt_render_opt("  {% if true %}\n  x\n  {% endif %}\ny", NULL, &o);
    ASSERT_STR_EQ(got, "  \n  x\n  \ny");
    free(got);
}

static void test_string_escapes_decode(void)
{
    ASSERT_RENDER("{{ '\\n\\t\\'\\\"\\\\' }}", NULL, "\n\t'\"\\");
    ASSERT_RENDER("{{ '\\u00e9\\x41' }}", NULL,
                  "\xc3\xa9"
                  "A");
    ASSERT_RENDER("{{ '\\ud83e\\udd17' }}", NULL, "\xf0\x9f\xa4\x97");
    ASSERT_RENDER("{{ 'a' 'b' \"c\" }}", NULL, "abc");
    ASSERT_RENDER("|{{ '{{ \"hi\" }}' }}|", NULL, "|{{ \"hi\" }}|");
}

static void test_generation_tags_vanish(void)
{
    ASSERT_RENDER("a{% generation %}b{% endgeneration %}c", NULL, "abc");
    ASSERT_RENDER("a  {%- generation -%}  b", NULL, "ab");
}

static void test_negative_literals_and_binary_minus(void)
{
    ASSERT_RENDER("{{ 5 -1 }}|{{ [-1, -2.5][1] }}|{{ 3-1 }}|{{ -(2) }}", NULL, "4|-2.5|2|-2");
}

static void test_syntax_errors_carry_line_and_column(void)
{
    ASSERT_RENDER_ERR("line1\n  {{ 'unterminated }}", NULL, KILN_E_INVALID, "template:2:6:");
    ASSERT_RENDER_ERR("{% if x %}never closed", NULL, KILN_E_INVALID, "never closed");
    ASSERT_RENDER_ERR("{{ 'a' \\q }}", NULL, KILN_E_INVALID, "unexpected character");
    ASSERT_RENDER_ERR("{{ '\\q' }}", NULL, KILN_E_INVALID, "escaped character");
    ASSERT_RENDER_ERR("ab\n{# open comment", NULL, KILN_E_INVALID,
                      "template:2:1: missing end of comment");
    ASSERT_RENDER_ERR("{% endfor %}", NULL, KILN_E_INVALID, "unknown statement 'endfor'");
    ASSERT_RENDER_ERR("{{ 1 + }}", NULL, KILN_E_INVALID, "template:1:8:");
    ASSERT_RENDER_ERR("{% for %}{% endfor %}", NULL, KILN_E_INVALID, "template:1:");
}

static void test_deep_nesting_is_refused_not_crashed(void)
{
    char src[4000];
    size_t n = 0;
    n += (size_t)sprintf(src + n, "{{ ");
    for (int i = 0; i < 1000; i++)
        src[n++] = '(';
    src[n++] = '1';
    for (int i = 0; i < 1000; i++)
        src[n++] = ')';
    sprintf(src + n, " }}");
    ASSERT_RENDER_ERR(src, NULL, KILN_E_INVALID, "nested more than");
}

int main(void)
{
    RUN(test_text_and_expressions_interleave);
    RUN(test_single_trailing_newline_is_dropped);
    RUN(test_dash_markers_strip_whitespace_on_their_side);
    RUN(test_trim_and_lstrip_blocks_are_on_by_default);
    RUN(test_options_can_turn_trimming_off);
    RUN(test_string_escapes_decode);
    RUN(test_generation_tags_vanish);
    RUN(test_negative_literals_and_binary_minus);
    RUN(test_syntax_errors_carry_line_and_column);
    RUN(test_deep_nesting_is_refused_not_crashed);
    return TEST_DONE();
}
