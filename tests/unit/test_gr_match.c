/*
 * test_gr_match.c — the grammar engine against itself and against parsers
 * nobody here wrote: masks equal "the token's bytes can be accepted" for every
 * token, the cached / leaf paths equal a plain trie walk, random generations
 * under a length budget always finish and parse (jansson for JSON), rollback,
 * distances, GBNF errors, special tokens as terminals. Runs on the stories260K tokenizer (../shared) and, when
 * they can be fetched, the real Llama 3 and Qwen3 tokenizers.
 */
#include "grammar/gr_int.h"
#include "gr_test_util.h"

#include <jansson.h>

static tok_tokenizer *load_tok(const char *dir)
{
    tok_tokenizer *t = NULL;
    kiln_err err;
    if (tok_load(dir, &t, &err) != KILN_OK) {
        fprintf(stderr, "  tokenizer %s: %s\n", dir, err.msg);
        return NULL;
    }
    return t;
}

static tok_tokenizer *stories_tok(void)
{
    char p[4096];
    return load_tok(test_shared_path(p, sizeof p, "models/stories260K"));
}

static gr_grammar *gbnf(const char *text)
{
    gr_grammar *g = NULL;
    kiln_err err;
    if (gr_compile_gbnf(text, strlen(text), NULL, &g, &err) != KILN_OK) {
        fprintf(stderr, "  gbnf: %s\n", err.msg);
        return NULL;
    }
    return g;
}

/* Every token: in the mask iff accept_token succeeds (then rolled back). */
static int check_mask_exact(gr_matcher *m, const gr_vocab *v, const uint64_t *bits)
{
    kiln_err err;
    for (int32_t t = 0; t < gr_vocab_size(v); t++) {
        int ok = gr_matcher_accept_token(m, t, &err) == KILN_OK;
        if (ok) gr_matcher_rollback(m, 1, &err);
        if (ok != gr_bit(bits, t)) {
            size_t n;
            const uint8_t *b = gr_vocab_token(v, t, &n);
            fprintf(stderr, "  token %d '%.*s': mask %d, accept %d\n", (int)t, (int)n,
                    (const char *)b, gr_bit(bits, t), ok);
            return 0;
        }
    }
    return 1;
}

/* Generates up to max_tokens under the grammar, finishing within the budget
 * the way the engine does; appends the text to out. Returns the tokens used
 * or -1 on a failed check. exact: check every mask against every token. */
static int generate(gr_matcher *m, const gr_vocab *v, uint64_t seed, int max_tokens, int exact,
                    char *out, size_t cap)
{
    kiln_err err;
    size_t words = gr_vocab_words(v), len = 0;
    uint64_t *bits = calloc(words, 8), *walk_bits = calloc(words, 8);
    int used = 0, rc = -1;
    out[0] = 0;
    for (; used < max_tokens; used++) {
        if (gr_matcher_done(m)) break;
        if (gr_matcher_accepting(m) && gr_test_rand(&seed) % 8 == 0) break;
        if (gr_matcher_mask(m, bits, &err) != KILN_OK) goto done;
        if (gr_matcher_mask_walk(m, walk_bits, &err) != KILN_OK) goto done;
        if (memcmp(bits, walk_bits, words * 8)) {
            fprintf(stderr, "  step %d: cached/leaf mask differs from the walk\n", used);
            goto done;
        }
        if (exact && !check_mask_exact(m, v, bits)) goto done;
        int32_t left = max_tokens - used - 1;
        int32_t t = gr_test_pick(v, bits, &seed, 0);
        if (t >= 0 && gr_matcher_distance_after(m, t) > left) {
            if (gr_matcher_mask_within(m, left, bits, &err) != KILN_OK) goto done;
            t = gr_test_pick(v, bits, &seed, 1);
        }
        if (t < 0) {
            if (gr_matcher_accepting(m)) break;
            fprintf(stderr, "  step %d: no token allowed and not accepting (dist %d)\n", used,
                    (int)gr_matcher_distance(m));
            goto done;
        }
        if (gr_matcher_accept_token(m, t, &err) != KILN_OK) {
            fprintf(stderr, "  step %d: accept of an allowed token failed: %s\n", used, err.msg);
            goto done;
        }
        size_t n;
        const uint8_t *b = gr_vocab_token(v, t, &n);
        if (len + n + 1 < cap) {
            memcpy(out + len, b, n);
            len += n;
            out[len] = 0;
        }
    }
    if (!gr_matcher_accepting(m)) {
        fprintf(stderr, "  did not finish within %d tokens: '%s'\n", max_tokens, out);
        goto done;
    }
    rc = used;
done:
    free(bits);
    free(walk_bits);
    return rc;
}

static const char *ARITH = "root ::= expr\n"
                           "expr ::= term ((\"+\" | \"-\") term)*\n"
                           "term ::= factor ((\"*\" | \"/\") factor)*\n"
                           "factor ::= [0-9]{1,3} | \"(\" expr \")\"  # nested\n";

/* A tiny evaluator-parser for ARITH output: returns 1 if s parses completely. */
static const char *ar_expr(const char *s);
static const char *ar_factor(const char *s)
{
    if (*s == '(') {
        s = ar_expr(s + 1);
        return s && *s == ')' ? s + 1 : NULL;
    }
    int n = 0;
    while (*s >= '0' && *s <= '9')
        s++, n++;
    return n >= 1 && n <= 3 ? s : NULL;
}
static const char *ar_term(const char *s)
{
    s = ar_factor(s);
    while (s && (*s == '*' || *s == '/'))
        s = ar_factor(s + 1);
    return s;
}
static const char *ar_expr(const char *s)
{
    s = ar_term(s);
    while (s && (*s == '+' || *s == '-'))
        s = ar_term(s + 1);
    return s;
}

static void test_gbnf_accepts_and_rejects_strings(void)
{
    tok_tokenizer *tok = stories_tok();
    if (!tok) TEST_SKIP("no stories260K tokenizer");
    kiln_err err;
    gr_vocab *v;
    ASSERT_OK(gr_vocab_create(tok, &v, &err));
    gr_grammar *g = gbnf(ARITH);
    ASSERT_TRUE(g);
    const char *good[] = {"1", "12+3", "(1+2)*345", "((7))", "1-2/3*(4+5)"};
    const char *bad[] = {"1234", "+1", "(1", "1++2", "a"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        gr_matcher *m;
        ASSERT_OK(gr_matcher_create(g, v, &m, &err));
        ASSERT_OK(gr_matcher_accept_bytes(m, good[i], strlen(good[i]), &err));
        ASSERT_TRUE(gr_matcher_accepting(m));
        ASSERT_EQ_I64(gr_matcher_distance(m), 0);
        gr_matcher_destroy(m);
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        gr_matcher *m;
        ASSERT_OK(gr_matcher_create(g, v, &m, &err));
        kiln_code rc = gr_matcher_accept_bytes(m, bad[i], strlen(bad[i]), &err);
        ASSERT_TRUE(rc != KILN_OK || !gr_matcher_accepting(m));
        gr_matcher_destroy(m);
    }
    /* "(1" needs one more byte: ")" */
    gr_matcher *m;
    ASSERT_OK(gr_matcher_create(g, v, &m, &err));
    ASSERT_OK(gr_matcher_accept_bytes(m, "((1", 3, &err));
    ASSERT_EQ_I64(gr_matcher_distance(m), 2);
    ASSERT_EQ_I64(gr_matcher_history(m), 1);
    ASSERT_OK(gr_matcher_rollback(m, 1, &err));
    ASSERT_EQ_I64(gr_matcher_distance(m), 1);
    gr_matcher_destroy(m);
    gr_grammar_release(g);
    gr_vocab_destroy(v);
    tok_destroy(tok);
}

static void test_gbnf_errors_name_the_problem(void)
{
    struct {
        const char *text, *want;
        kiln_code code;
    } cases[] = {
        {"root ::= foo", "'foo' is used but not defined", KILN_E_INVALID},
        {"root ::= root \"x\" | \"y\"", "left-recursive", KILN_E_INVALID},
        {"expr ::= \"x\"", "no 'root' rule", KILN_E_INVALID},
        {"root ::= \"\\q\"", "unknown escape", KILN_E_INVALID},
        {"root ::= <|im_end|>", "token references", KILN_E_UNSUPPORTED},
        {"root ::= \"a\" root", "matches nothing", KILN_E_INVALID},
        {"root ::= [z-a]", "out of order", KILN_E_INVALID},
        {"root ::= (\"a\"", "expected ')'", KILN_E_INVALID},
        {"root ::= \"a\"{3,1}", "n < m", KILN_E_INVALID},
        {"root ::= \"a\"\nroot ::= \"b\"", "defined twice", KILN_E_INVALID},
        {"", "empty", KILN_E_INVALID},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gr_grammar *g = NULL;
        kiln_err err = {0};
        kiln_code rc = gr_compile_gbnf(cases[i].text, strlen(cases[i].text), NULL, &g, &err);
        if (rc != cases[i].code || !strstr(err.msg, cases[i].want)) {
            fprintf(stderr, "  case %zu: got %s '%s', want '%s'\n", i, kiln_code_name(rc), err.msg,
                    cases[i].want);
            ASSERT_TRUE(0);
        }
        ASSERT_TRUE(g == NULL);
    }
}

static void test_masks_exact_on_small_vocab(void)
{
    tok_tokenizer *tok = stories_tok();
    if (!tok) TEST_SKIP("no stories260K tokenizer");
    kiln_err err;
    gr_vocab *v;
    ASSERT_OK(gr_vocab_create(tok, &v, &err));
    const char *grammars[] = {
        ARITH,
        "root ::= \"Once upon a time\" (\" \" [a-z]+){2,5} \".\"\n",
        "root ::= item (\", \" item)*\nitem ::= \"cat\" | \"dog\" | \"a big \" item\n",
        "root ::= [^\\n]{0,40} \"\\n\"\n",
    };
    for (size_t k = 0; k < sizeof grammars / sizeof *grammars; k++) {
        gr_grammar *g = gbnf(grammars[k]);
        ASSERT_TRUE(g);
        for (uint64_t seed = 1; seed <= 4; seed++) {
            gr_matcher *m;
            ASSERT_OK(gr_matcher_create(g, v, &m, &err));
            char out[4096];
            int n = generate(m, v, seed * 77 + k, 60, 1, out, sizeof out);
            if (n < 0) fprintf(stderr, "  grammar %zu seed %d\n", k, (int)seed);
            ASSERT_TRUE(n >= 0);
            if (k == 0) ASSERT_TRUE(ar_expr(out) && *ar_expr(out) == 0);
            gr_matcher_destroy(m);
        }
        gr_grammar_release(g);
    }
    gr_vocab_destroy(v);
    tok_destroy(tok);
}

static void json_walks(const char *name, int n_walks, int exact_steps)
{
    char dir[4096];
    tok_tokenizer *tok = NULL;
    if (!strcmp(name, "stories260K"))
        tok = stories_tok();
    else if (gr_test_tok_dir(dir, sizeof dir, name))
        tok = load_tok(dir);
    if (!tok) TEST_SKIP("tokenizer %s unavailable", name);
    kiln_err err;
    gr_vocab *v;
    ASSERT_OK(gr_vocab_create(tok, &v, &err));
    gr_grammar *g;
    ASSERT_OK(gr_compile_json_any(NULL, NULL, &g, &err));
    for (int w = 0; w < n_walks; w++) {
        gr_matcher *m;
        ASSERT_OK(gr_matcher_create(g, v, &m, &err));
        static char out[1 << 16];
        int n = generate(m, v, 1000 + (uint64_t)w, 120, w < exact_steps, out, sizeof out);
        ASSERT_TRUE(n >= 0);
        json_error_t je;
        json_t *j = json_loads(out, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &je);
        if (!j) fprintf(stderr, "  %s walk %d: not JSON (%s): '%s'\n", name, w, je.text, out);
        ASSERT_TRUE(j != NULL);
        json_decref(j);
        gr_matcher_destroy(m);
    }
    gr_grammar_release(g);
    gr_vocab_destroy(v);
    tok_destroy(tok);
}

static void test_json_any_walks_parse_stories(void)
{
    json_walks("stories260K", 12, 4);
}

static void test_json_any_walks_parse_llama3(void)
{
    json_walks("llama3", 6, 1);
}

static void test_json_any_walks_parse_qwen3(void)
{
    json_walks("qwen3", 6, 0);
}

static void test_special_tokens_never_allowed(void)
{
    tok_tokenizer *tok = stories_tok();
    if (!tok) TEST_SKIP("no stories260K tokenizer");
    kiln_err err;
    gr_vocab *v;
    ASSERT_OK(gr_vocab_create(tok, &v, &err));
    gr_grammar *g = gbnf("root ::= [^x]*\n"); /* "</s>" as text would match */
    gr_matcher *m;
    ASSERT_OK(gr_matcher_create(g, v, &m, &err));
    uint64_t *bits = calloc(gr_vocab_words(v), 8);
    ASSERT_OK(gr_matcher_mask(m, bits, &err));
    for (int32_t t = 0; t < gr_vocab_size(v); t++)
        if (tok_is_special(tok, t)) ASSERT_TRUE(!gr_bit(bits, t));
    ASSERT_CODE(gr_matcher_accept_token(m, 2, &err), KILN_E_INVALID);
    free(bits);
    gr_matcher_destroy(m);
    gr_grammar_release(g);
    gr_vocab_destroy(v);
    tok_destroy(tok);
}

/* A special token as a terminal (gr_special): allowed exactly where the grammar
 * names it, as one token; its text spelled by ordinary tokens never matches;
 * other special tokens stay masked out; the cached / leaf masks equal the walk
 * and every token's accept while generating text and specials mixed. */
static void test_special_token_terminal(void)
{
    tok_tokenizer *tok = stories_tok();
    if (!tok) TEST_SKIP("no stories260K tokenizer");
    kiln_err err;
    gr_vocab *v;
    ASSERT_OK(gr_vocab_create(tok, &v, &err));
    int32_t sp = -1, other = -1;
    for (int32_t t = 0; t < gr_vocab_size(v); t++)
        if (tok_is_special(tok, t)) {
            if (sp < 0)
                sp = t;
            else if (other < 0)
                other = t;
        }
    ASSERT_TRUE(sp >= 0 && other >= 0);
    char *text = NULL;
    size_t tlen = 0;
    ASSERT_OK(tok_token_bytes(tok, sp, &text, &tlen, NULL));
    ASSERT_TRUE(tlen > 0);
    /* an ordinary token holding byte 0xFF (byte fallback) is never constrainable */
    for (int32_t t = 0; t < gr_vocab_size(v); t++) {
        char *b = NULL;
        size_t n = 0;
        if (tok_is_special(tok, t) || tok_token_bytes(tok, t, &b, &n, NULL)) continue;
        if (memchr(b, 0xFF, n)) ASSERT_TRUE(!gr_vocab_constrainable(v, t));
        free(b);
    }
    gr_builder *b;
    ASSERT_OK(gr_builder_create(NULL, &b, &err));
    ASSERT_TRUE(gr_special(b, -1) < 0); /* out of range: the builder fails */
    gr_builder_destroy(b);
    ASSERT_OK(gr_builder_create(NULL, &b, &err));
    ASSERT_TRUE(gr_special(b, 1 << 21) < 0);
    gr_builder_destroy(b);
    /* root ::= "a" SP "b" */
    ASSERT_OK(gr_builder_create(NULL, &b, &err));
    gr_rule root = gr_rule_new(b, "root");
    gr_expr x[] = {gr_str(b, "a"), gr_special(b, sp), gr_str(b, "b")};
    ASSERT_OK(gr_rule_define(b, root, gr_seq(b, x, 3), &err));
    gr_grammar *g;
    ASSERT_OK(gr_builder_compile(b, root, &g, &err));
    gr_builder_destroy(b);
    gr_matcher *m;
    ASSERT_OK(gr_matcher_create(g, v, &m, &err));
    uint64_t *bits = calloc(gr_vocab_words(v), 8);
    ASSERT_OK(gr_matcher_mask(m, bits, &err));
    ASSERT_TRUE(!gr_bit(bits, sp) && !gr_bit(bits, other));
    ASSERT_TRUE(check_mask_exact(m, v, bits));
    ASSERT_OK(gr_matcher_accept_bytes(m, "a", 1, &err));
    ASSERT_EQ_I64(gr_matcher_distance(m), 4 + 1); /* the marker, then "b" */
    ASSERT_OK(gr_matcher_mask(m, bits, &err));
    int64_t pop = 0;
    for (size_t w = 0; w < gr_vocab_words(v); w++)
        pop += __builtin_popcountll(bits[w]);
    ASSERT_EQ_I64(pop, 1); /* the special token and nothing else */
    ASSERT_TRUE(gr_bit(bits, sp));
    ASSERT_TRUE(check_mask_exact(m, v, bits));
    /* its text, spelled, is not the token */
    ASSERT_CODE(gr_matcher_accept_bytes(m, text, tlen, &err), KILN_E_INVALID);
    ASSERT_CODE(gr_matcher_accept_token(m, other, &err), KILN_E_INVALID);
    ASSERT_OK(gr_matcher_accept_token(m, sp, &err));
    ASSERT_TRUE(!gr_matcher_accepting(m));
    ASSERT_OK(gr_matcher_accept_bytes(m, "b", 1, &err));
    ASSERT_TRUE(gr_matcher_done(m));
    /* rollback over the special: the same mask again */
    ASSERT_OK(gr_matcher_rollback(m, 2, &err));
    ASSERT_OK(gr_matcher_mask(m, bits, &err));
    ASSERT_TRUE(gr_bit(bits, sp));
    gr_matcher_destroy(m);
    uint64_t fp = gr_grammar_fingerprint(g);
    gr_grammar_release(g);
    /* the same text around another special: another grammar */
    ASSERT_OK(gr_builder_create(NULL, &b, &err));
    root = gr_rule_new(b, "root");
    gr_expr y[] = {gr_str(b, "a"), gr_special(b, other), gr_str(b, "b")};
    ASSERT_OK(gr_rule_define(b, root, gr_seq(b, y, 3), &err));
    ASSERT_OK(gr_builder_compile(b, root, &g, &err));
    gr_builder_destroy(b);
    ASSERT_TRUE(gr_grammar_fingerprint(g) != fp);
    gr_grammar_release(g);
    /* free text and specials mixed, under a budget: root ::= ([a-z ]{1,12} SP)+ "." */
    ASSERT_OK(gr_builder_create(NULL, &b, &err));
    root = gr_rule_new(b, "root");
    static const uint32_t az[] = {'a', 'z', ' ', ' '};
    gr_expr item = gr_seq2(b, gr_rep(b, gr_class(b, az, 2, false), 1, 12), gr_special(b, sp));
    ASSERT_OK(gr_rule_define(b, root, gr_seq2(b, gr_rep(b, item, 1, -1), gr_str(b, ".")), &err));
    ASSERT_OK(gr_builder_compile(b, root, &g, &err));
    gr_builder_destroy(b);
    for (uint64_t seed = 1; seed <= 6; seed++) {
        ASSERT_OK(gr_matcher_create(g, v, &m, &err));
        char out[4096];
        int used = generate(m, v, seed, 60, seed <= 2, out, sizeof out);
        ASSERT_TRUE(used > 0);
        /* the text: runs of [a-z ] each closed by exactly the marker, then "." */
        size_t n = strlen(out), runs = 0;
        ASSERT_TRUE(n > 0 && out[n - 1] == '.');
        for (size_t i = 0; i + 1 < n;) {
            size_t j = i;
            while (j < n && ((out[j] >= 'a' && out[j] <= 'z') || out[j] == ' '))
                j++;
            ASSERT_TRUE(j > i && j + 4 <= n && (uint8_t)out[j] == 0xFF);
            ASSERT_EQ_I64(((out[j + 1] & 0x7F) << 14) | ((out[j + 2] & 0x7F) << 7) | (out[j + 3] & 0x7F),
                          sp);
            runs++;
            i = j + 4;
        }
        ASSERT_TRUE(runs >= 1);
        gr_matcher_destroy(m);
    }
    gr_grammar_release(g);
    free(bits);
    free(text);
    gr_vocab_destroy(v);
    tok_destroy(tok);
}

static void test_try_tokens_and_rollback_for_drafts(void)
{
    tok_tokenizer *tok = stories_tok();
    if (!tok) TEST_SKIP("no stories260K tokenizer");
    kiln_err err;
    gr_vocab *v;
    ASSERT_OK(gr_vocab_create(tok, &v, &err));
    gr_grammar *g = gbnf(ARITH);
    gr_matcher *m;
    ASSERT_OK(gr_matcher_create(g, v, &m, &err));
    int32_t ids[4];
    size_t n = 4;
    const char *want[] = {"1", "+", "2", ")"};
    for (int i = 0; i < 4; i++) { /* the single-byte token of each character */
        ids[i] = -1;
        for (int32_t t = 0; t < gr_vocab_size(v) && ids[i] < 0; t++) {
            size_t len;
            const uint8_t *b = gr_vocab_token(v, t, &len);
            if (len == 1 && b[0] == (uint8_t)want[i][0] && gr_vocab_constrainable(v, t)) ids[i] = t;
        }
        ASSERT_TRUE(ids[i] >= 0);
    }
    int32_t k = gr_matcher_try_tokens(m, ids, (int32_t)n);
    ASSERT_EQ_I64(k, 3); /* "1+2" fits, ")" does not */
    ASSERT_EQ_I64(gr_matcher_history(m), k);
    ASSERT_OK(gr_matcher_rollback(m, k, &err));
    ASSERT_EQ_I64(gr_matcher_history(m), 0);
    ASSERT_CODE(gr_matcher_rollback(m, 1, &err), KILN_E_INVALID);
    gr_matcher_destroy(m);
    gr_grammar_release(g);
    gr_vocab_destroy(v);
    tok_destroy(tok);
}

static void test_text_without_markers(void)
{
    tok_tokenizer *tok = stories_tok();
    if (!tok) TEST_SKIP("no stories260K tokenizer");
    kiln_err err;
    gr_vocab *v;
    ASSERT_OK(gr_vocab_create(tok, &v, &err));
    gr_builder *b;
    ASSERT_OK(gr_builder_create(NULL, &b, &err));
    const char *pats[] = {"</think>", "<tool_call>"};
    gr_rule root = gr_rule_new(b, "root");
    gr_expr body = gr_seq2(b, gr_text_without(b, pats, 2), gr_str(b, "</think>!"));
    ASSERT_OK(gr_rule_define(b, root, body, &err));
    gr_grammar *g;
    ASSERT_OK(gr_builder_compile(b, root, &g, &err));
    gr_builder_destroy(b);
    struct {
        const char *s;
        int ok;
    } cases[] = {{"</think>!", 1},
                 {"abc</think>!", 1},
                 {"<</think>!", 1},
                 {"</thi</think>!", 1},
                 {"a</think>b</think>!", 0},
                 {"x<tool_call>y</think>!", 0},
                 {"\xc3\xa9<tool</think>!", 1},
                 {"no end", 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gr_matcher *m;
        ASSERT_OK(gr_matcher_create(g, v, &m, &err));
        int ok = gr_matcher_accept_bytes(m, cases[i].s, strlen(cases[i].s), &err) == KILN_OK &&
                 gr_matcher_accepting(m);
        if (ok != cases[i].ok) fprintf(stderr, "  '%s': %d\n", cases[i].s, ok);
        ASSERT_EQ_I64(ok, cases[i].ok);
        gr_matcher_destroy(m);
    }
    /* masks stay exact here too */
    gr_matcher *m;
    ASSERT_OK(gr_matcher_create(g, v, &m, &err));
    char out[4096];
    ASSERT_TRUE(generate(m, v, 9, 40, 1, out, sizeof out) >= 0);
    gr_matcher_destroy(m);
    gr_grammar_release(g);
    gr_vocab_destroy(v);
    tok_destroy(tok);
}

int main(void)
{
    RUN(test_gbnf_accepts_and_rejects_strings);
    RUN(test_gbnf_errors_name_the_problem);
    RUN(test_masks_exact_on_small_vocab);
    RUN(test_special_tokens_never_allowed);
    RUN(test_special_token_terminal);
    RUN(test_try_tokens_and_rollback_for_drafts);
    RUN(test_text_without_markers);
    RUN(test_json_any_walks_parse_stories);
    RUN(test_json_any_walks_parse_llama3);
    RUN(test_json_any_walks_parse_qwen3);
    return TEST_DONE();
}
