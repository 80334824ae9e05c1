/*
 * test_gr_limits.c — compile limits and the compile cache.
 *
 * Limits: schemas and grammars built to blow up (a regex whose DFA doubles per
 * repetition, a long array with min/maxItems, a huge string length) fail with
 * a message naming the limit, within a bounded amount of the compiling
 * thread's CPU time (unbounded, the array one takes ~12 s); the state limits
 * name their count. Cache: hits hand out the stored grammar and its aux
 * bytes, misses count, the least recently used entry goes first, the byte
 * bound holds, a grammar held by a "request" outlives its eviction (ASan
 * checks), an oversized entry is not kept, concurrent users keep the counts
 * consistent. Fingerprints: equal for equal grammars, different otherwise.
 */
#include "grammar/gr.h"
#include "gr_test_util.h"
#include "util/plat.h"

#include <jansson.h>
#include <pthread.h>
#include <string.h>

static gr_vocab *V;

static kiln_code compile_schema(const char *text, const gr_options *o, gr_grammar **g,
                                kiln_err *err)
{
    json_error_t je;
    json_t *s = json_loads(text, 0, &je);
    if (!s) return kiln_fail(err, KILN_E_INVALID, "bad test schema: %s", je.text);
    kiln_code rc = gr_compile_json_schema(s, o, g, err);
    json_decref(s);
    return rc;
}

static gr_grammar *must(const char *text)
{
    gr_options o = gr_options_default();
    gr_grammar *g = NULL;
    kiln_err err;
    if (compile_schema(text, &o, &g, &err)) {
        fprintf(stderr, "  compile failed: %s\n", err.msg);
        return NULL;
    }
    return g;
}

static const char *BLOWUPS[] = {
    /* the DFA of "an a 18 characters from the end" has 2^19 states */
    "{\"type\":\"string\",\"pattern\":\"^(a|b)*a(a|b){18}$\"}",
    /* thousands of copies of an object (12 s of CPU without a limit) */
    "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
    "\"integer\"},\"b\":{\"type\":\"string\",\"maxLength\":20}},\"required\":[\"a\",\"b\"]},"
    "\"minItems\":3000,\"maxItems\":6000}",
    /* a length bound as a counted repetition of a UTF-8 character */
    "{\"type\":\"string\",\"minLength\":99999,\"maxLength\":100000}",
};

static void test_time_limit_names_itself_and_holds(void)
{
    gr_options o = gr_options_default();
    ASSERT_EQ_I64(o.max_ms, 500);
    o.max_ms = 150;
    o.max_dfa_states = 1 << 30; /* only the clock may stop these */
    o.max_nfa_states = 1 << 30;
    for (size_t i = 0; i < sizeof BLOWUPS / sizeof *BLOWUPS; i++) {
        gr_grammar *g = NULL;
        kiln_err err = {0};
        double t0 = plat_thread_cpu();
        kiln_code rc = compile_schema(BLOWUPS[i], &o, &g, &err);
        double ms = (plat_thread_cpu() - t0) * 1e3;
        ASSERT_EQ_I64(rc, KILN_E_INVALID);
        ASSERT_TRUE(g == NULL);
        if (!strstr(err.msg, "grammar compile exceeded 150 ms"))
            TEST_FAIL_("schema %zu: '%s'", i, err.msg);
        /* checks run every few hundred states: the overrun stays small */
        if (ms < 150 || ms > 150 * 4 + 250)
            TEST_FAIL_("schema %zu: stopped after %.0f ms of CPU", i, ms);
    }
    /* GBNF goes through the same clock */
    const char *gb = "root ::= (\"a\" | \"b\")* \"a\" (\"a\" | \"b\"){18}";
    gr_grammar *g = NULL;
    kiln_err err = {0};
    ASSERT_EQ_I64(gr_compile_gbnf(gb, strlen(gb), &o, &g, &err), KILN_E_INVALID);
    if (!strstr(err.msg, "exceeded 150 ms")) TEST_FAIL_("gbnf: '%s'", err.msg);
}

static void test_state_limits_name_their_count(void)
{
    gr_options o = gr_options_default();
    o.max_ms = 0; /* no clock: the state limits alone */
    o.max_dfa_states = 1000;
    gr_grammar *g = NULL;
    kiln_err err = {0};
    ASSERT_EQ_I64(
        compile_schema("{\"type\":\"string\",\"pattern\":\"^(a|b)*a(a|b){12}$\"}", &o, &g, &err),
        KILN_E_INVALID);
    if (!strstr(err.msg, "grammar compile exceeded 1000 states")) TEST_FAIL_("dfa: '%s'", err.msg);
    o = gr_options_default();
    o.max_ms = 0;
    o.max_nfa_states = 5000;
    ASSERT_EQ_I64(compile_schema(BLOWUPS[2], &o, &g, &err), KILN_E_INVALID);
    if (!strstr(err.msg, "grammar compile exceeded 5000 states")) TEST_FAIL_("nfa: '%s'", err.msg);
    /* the same schema under the limits it fits compiles */
    o = gr_options_default();
    gr_grammar *ok = NULL;
    ASSERT_OK(
        compile_schema("{\"type\":\"string\",\"pattern\":\"^(a|b)*a(a|b){12}$\"}", &o, &ok, &err));
    ASSERT_TRUE(gr_grammar_get_info(ok).states > 1000);
    gr_grammar_release(ok);
}

static const char *S1 =
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}";
static const char *S2 = "{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"maxItems\":3}";
static const char *S3 = "{\"type\":\"string\",\"enum\":[\"red\",\"green\"]}";

static void test_fingerprints(void)
{
    gr_grammar *a = must(S1), *b = must(S1), *c = must(S2);
    ASSERT_TRUE(a && b && c);
    ASSERT_TRUE(a != b);
    ASSERT_EQ_U64(gr_grammar_fingerprint(a), gr_grammar_fingerprint(b));
    ASSERT_TRUE(gr_grammar_fingerprint(a) != gr_grammar_fingerprint(c));
    ASSERT_TRUE(gr_grammar_bytes(a) > 1000 && gr_grammar_bytes(a) < (1u << 20));
    gr_grammar_release(a);
    gr_grammar_release(b);
    gr_grammar_release(c);
}

static int sentence(gr_grammar *g, const char *text)
{
    kiln_err err;
    gr_matcher *m;
    if (gr_matcher_create(g, V, &m, &err)) return -1;
    int ok =
        gr_matcher_accept_bytes(m, text, strlen(text), &err) == KILN_OK && gr_matcher_accepting(m);
    gr_matcher_destroy(m);
    return ok;
}

static void test_cache_hits_misses_lru_and_refcounts(void)
{
    gr_grammar *g1 = must(S1), *g2 = must(S2), *g3 = must(S3);
    ASSERT_TRUE(g1 && g2 && g3);
    /* room for any two entries (each costs its tables and ~100 bytes more), not all three */
    size_t cap = gr_grammar_bytes(g1) + gr_grammar_bytes(g2) + gr_grammar_bytes(g3);
    gr_cache *c;
    kiln_err err;
    ASSERT_OK(gr_cache_create(cap, &c, &err));
    gr_grammar *got = NULL;
    int32_t aux[4] = {0};
    size_t alen = 99;
    ASSERT_TRUE(!gr_cache_get(c, "k1", 2, &got, aux, sizeof aux, &alen));
    ASSERT_TRUE(got == NULL && alen == 0);
    int32_t trig[2] = {7, 11};
    ASSERT_OK(gr_cache_put(c, "k1", 2, g1, trig, sizeof trig, &err));
    ASSERT_OK(gr_cache_put(c, "k2", 2, g2, NULL, 0, &err));
    ASSERT_OK(gr_cache_put(c, "k1", 2, g2, NULL, 0, &err)); /* present: the first entry stays */
    ASSERT_TRUE(gr_cache_get(c, "k1", 2, &got, aux, sizeof aux, &alen));
    ASSERT_TRUE(got == g1);
    ASSERT_EQ_I64((int64_t)alen, (int64_t)sizeof trig);
    ASSERT_EQ_I64(aux[0], 7);
    ASSERT_EQ_I64(aux[1], 11);
    gr_grammar_release(got);
    ASSERT_TRUE(!gr_cache_get(c, "k", 1, &got, NULL, 0, NULL)); /* a prefix is another key */
    gr_cache_stats st = gr_cache_get_stats(c);
    ASSERT_EQ_I64(st.entries, 2);
    ASSERT_EQ_U64(st.hits, 1);
    ASSERT_EQ_U64(st.misses, 2);
    ASSERT_TRUE(st.bytes > gr_grammar_bytes(g1) + gr_grammar_bytes(g2) && st.bytes <= cap);
    /* a request holds k2's grammar; k1 was used last, so k3 evicts k2 */
    gr_grammar *held = NULL;
    ASSERT_TRUE(gr_cache_get(c, "k2", 2, &held, NULL, 0, NULL));
    ASSERT_TRUE(gr_cache_get(c, "k1", 2, &got, NULL, 0, NULL));
    gr_grammar_release(got);
    ASSERT_OK(gr_cache_put(c, "k3", 2, g3, NULL, 0, &err));
    st = gr_cache_get_stats(c);
    ASSERT_EQ_I64(st.entries, 2);
    ASSERT_EQ_U64(st.evictions, 1);
    ASSERT_TRUE(st.bytes <= cap);
    ASSERT_TRUE(!gr_cache_get(c, "k2", 2, &got, NULL, 0, NULL));
    ASSERT_TRUE(gr_cache_get(c, "k3", 2, &got, NULL, 0, NULL));
    gr_grammar_release(got);
    /* our own references go: only the cache's and the held one remain */
    gr_grammar_release(g1);
    gr_grammar_release(g2);
    gr_grammar_release(g3);
    ASSERT_EQ_I64(sentence(held, "[true,false]"), 1); /* alive after eviction (ASan) */
    ASSERT_EQ_I64(sentence(held, "[1]"), 0);
    gr_grammar_release(held);
    /* an entry bigger than the whole cache is not kept */
    gr_cache *tiny;
    ASSERT_OK(gr_cache_create(64, &tiny, &err));
    gr_grammar *g = must(S3);
    ASSERT_OK(gr_cache_put(tiny, "x", 1, g, NULL, 0, &err));
    ASSERT_EQ_I64(gr_cache_get_stats(tiny).entries, 0);
    gr_cache_destroy(tiny);
    /* destroying the cache leaves a handed-out grammar alive */
    ASSERT_TRUE(gr_cache_get(c, "k1", 2, &got, NULL, 0, NULL));
    gr_cache_destroy(c);
    ASSERT_EQ_I64(sentence(got, "{\"a\":5}"), 1);
    gr_grammar_release(got);
    ASSERT_EQ_I64(sentence(g, "\"red\""), 1);
    gr_grammar_release(g);
    /* NULL cache: a miss that counts nothing */
    ASSERT_TRUE(!gr_cache_get(NULL, "k1", 2, &got, NULL, 0, NULL));
    ASSERT_OK(gr_cache_put(NULL, "k1", 2, NULL, NULL, 0, &err));
}

typedef struct {
    gr_cache *c;
    gr_grammar *gs[3];
    uint64_t seed, gets;
    int fail;
} worker;

static void *hammer(void *arg)
{
    worker *w = arg;
    kiln_err err;
    for (int i = 0; i < 4000; i++) {
        int k = (int)(gr_test_rand(&w->seed) % 12);
        char key[8];
        snprintf(key, sizeof key, "k%d", k);
        gr_grammar *g = NULL;
        int32_t aux = -1;
        size_t alen = 0;
        w->gets++;
        if (gr_cache_get(w->c, key, strlen(key), &g, &aux, sizeof aux, &alen)) {
            if (g != w->gs[k % 3] || alen != sizeof aux || aux != k) w->fail = 1;
            gr_grammar_release(g);
        } else {
            if (gr_cache_put(w->c, key, strlen(key), w->gs[k % 3], &k, sizeof k, &err)) w->fail = 1;
        }
    }
    return NULL;
}

static void test_cache_threads(void)
{
    gr_grammar *gs[3] = {must(S1), must(S2), must(S3)};
    ASSERT_TRUE(gs[0] && gs[1] && gs[2]);
    size_t cap = 5 * (gr_grammar_bytes(gs[0]) + 256); /* fewer slots than keys: evictions */
    gr_cache *c;
    kiln_err err;
    ASSERT_OK(gr_cache_create(cap, &c, &err));
    worker w[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker){.c = c, .gs = {gs[0], gs[1], gs[2]}, .seed = 100 + (uint64_t)i};
        ASSERT_TRUE(pthread_create(&th[i], NULL, hammer, &w[i]) == 0);
    }
    uint64_t gets = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ASSERT_EQ_I64(w[i].fail, 0);
        gets += w[i].gets;
    }
    gr_cache_stats st = gr_cache_get_stats(c);
    ASSERT_EQ_U64(st.hits + st.misses, gets);
    ASSERT_TRUE(st.hits > 0 && st.evictions > 0);
    ASSERT_TRUE(st.bytes <= cap && st.entries >= 1 && st.entries <= 12);
    gr_cache_destroy(c);
    for (int i = 0; i < 3; i++)
        gr_grammar_release(gs[i]);
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
    RUN(test_time_limit_names_itself_and_holds);
    RUN(test_state_limits_name_their_count);
    RUN(test_fingerprints);
    RUN(test_cache_hits_misses_lru_and_refcounts);
    RUN(test_cache_threads);
    gr_vocab_destroy(V);
    tok_destroy(tok);
    return TEST_DONE();
}
