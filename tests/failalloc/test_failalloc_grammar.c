/*
 * test_failalloc_grammar.c — allocation failures while a grammar is compiled
 * and used: a JSON Schema (nested object, enum, pattern, array bounds) and a
 * GBNF grammar are compiled, a matcher over the stories260K vocabulary writes
 * masks and accepts a valid document, token by token where it can. With the
 * N-th allocation failing (failalloc.h), every N over the whole workload
 * (~2,400 runs, 2 s under ASan; KILN_FAILALLOC_RUNS=K samples about K) must give
 * either the reference result or a clean error (KILN_E_NOMEM / KILN_E_BUDGET
 * with a message) — never a crash, and under the sanitizer build no leak.
 * Regressions: a failed compile freed the rule names of a rule table it had
 * not managed to allocate (grammar_free); a failed NFA state paired with a
 * good one indexed state -1 (nstate); a failed json_array() in enum/const
 * made the schema "match nothing" (a 400 instead of out of memory).
 * Linux only (GNU ld's --wrap); CMake adds it where that links.
 */
#include "failalloc.h"
#include "grammar/gr.h"
#include "test.h"
#include "tokenizer/tok.h"
#include "util/kiln_json.h"

#include <jansson.h>

static const char SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"pattern\":\"^[a-z]+$\"},"
    "\"kind\":{\"enum\":[\"cat\",\"dog\"]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"maxItems\":3},"
    "\"home\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"}},"
    "\"required\":[\"x\"]}},"
    "\"required\":[\"name\",\"kind\"]}";
static const char DOC[] =
    "{\"name\":\"tom\",\"kind\":\"cat\",\"tags\":[1,22],\"home\":{\"x\":-1.5}}";

static const char GBNF[] = "root ::= expr\n"
                           "expr ::= term ((\"+\" | \"-\") term)*\n"
                           "term ::= num | \"(\" expr \")\"\n"
                           "num ::= [0-9]+\n";
static const char ARITH[] = "(12+3)-4";

static tok_tokenizer *tok;
static gr_vocab *vocab;
static json_t *schema;

/* Feeds text through a matcher: masks at every step, then the bytes. The
 * result: 1 accepted and complete, or the failing call's code (negated). */
static int feed(gr_grammar *g, const char *text, kiln_code *code, kiln_err *err)
{
    gr_matcher *m = NULL;
    uint64_t *bits = NULL;
    int res = 0;
    *code = gr_matcher_create(g, vocab, &m, err);
    if (*code) goto out;
    bits = malloc(gr_vocab_words(vocab) * sizeof *bits);
    if (!bits) {
        *code = KILN_E_NOMEM;
        snprintf(err->msg, sizeof err->msg, "test: out of memory");
        goto out;
    }
    for (size_t i = 0; text[i]; i++) {
        *code = gr_matcher_mask(m, bits, err);
        if (*code) goto out;
        *code = gr_matcher_accept_bytes(m, text + i, 1, err);
        if (*code) goto out;
    }
    res = gr_matcher_accepting(m) ? 1 : 0;
out:
    free(bits);
    gr_matcher_destroy(m);
    return res;
}

/* The whole workload; 3 = everything compiled and both texts accepted. */
static int workload(kiln_code *code, kiln_err *err)
{
    gr_grammar *gs = NULL, *gg = NULL;
    int score = 0;
    *code = gr_compile_json_schema(schema, NULL, &gs, err);
    if (*code) goto out;
    score += feed(gs, DOC, code, err);
    if (*code) goto out;
    *code = gr_compile_gbnf(GBNF, strlen(GBNF), NULL, &gg, err);
    if (*code) goto out;
    score += feed(gg, ARITH, code, err);
    if (*code) goto out;
    score += 1;
out:
    gr_grammar_release(gs);
    gr_grammar_release(gg);
    return score;
}

static void test_every_allocation_failure_is_clean(void)
{
    char p[4096];
    kiln_err err;
    if (tok_load(test_shared_path(p, sizeof p, "models/stories260K"), &tok, &err) != KILN_OK)
        TEST_SKIP("no stories260K tokenizer: %s", err.msg);
    ASSERT_OK(gr_vocab_create(tok, &vocab, &err));
    schema = json_loads(SCHEMA, 0, NULL);
    ASSERT_TRUE(schema != NULL);

    kiln_code code;
    ASSERT_EQ_I64(workload(&code, &err), 3); /* warms the vocabulary's shared caches */
    uint64_t c0 = failalloc_count();
    ASSERT_EQ_I64(workload(&code, &err), 3);
    uint64_t total = failalloc_count() - c0;
    ASSERT_TRUE(total > 20);

    const char *rv = getenv("KILN_FAILALLOC_RUNS");
    uint64_t runs = rv && *rv ? strtoull(rv, NULL, 10) : 0;
    uint64_t stride = runs == 0 || total <= runs ? 1 : total / runs + 1;
    uint64_t n_runs = 0, n_failed = 0;
    for (uint64_t at = 1; at <= total; at += at < 64 ? 1 : stride) {
        uint64_t f0 = failalloc_failures();
        memset(&err, 0, sizeof err);
        failalloc_arm(at);
        int score = workload(&code, &err);
        failalloc_arm(0);
        int injected = failalloc_failures() > f0;
        n_runs++;
        if (code == KILN_OK) {
            if (score != 3) TEST_FAIL_("N=%" PRIu64 ": OK but score %d", at, score);
            continue;
        }
        n_failed++;
        if (!injected)
            TEST_FAIL_("N=%" PRIu64 ": %s without an injected failure: %s", at,
                       kiln_code_name(code), err.msg);
        if (code != KILN_E_NOMEM && code != KILN_E_BUDGET)
            TEST_FAIL_("N=%" PRIu64 ": %s (%s), expected out of memory", at, kiln_code_name(code),
                       err.msg);
        if (!err.msg[0]) TEST_FAIL_("N=%" PRIu64 ": an error without a message", at);
    }
    /* nothing broken afterwards */
    ASSERT_EQ_I64(workload(&code, &err), 3);
    fprintf(stderr, "  %" PRIu64 " allocations, %" PRIu64 " runs, %" PRIu64 " clean errors\n",
            total, n_runs, n_failed);
    ASSERT_TRUE(n_failed > 0);
    json_decref(schema);
    gr_vocab_destroy(vocab);
    tok_destroy(tok);
}

int main(void)
{
    kiln_json_init(); /* as main() does: jansson's allocations through kiln (and --wrap) */
    RUN(test_every_allocation_failure_is_clean);
    return TEST_DONE();
}
