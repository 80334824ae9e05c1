/*
 * test_eng_sample.c — greedy, filters, penalties, bias, seeds, validation; every
 * setting at its extreme (tiny and huge temperature, top_p 1e-300, min_p 1,
 * top_k 1 and huge, bias +-1e30 and overflow, penalties at their bounds) and
 * NaN/inf logits: a defined pick, never a NaN, never an empty candidate set.
 */
#include "engine/eng_sample.h"
#include "test.h"

#include <float.h>
#include <stdalign.h>

static alignas(64) unsigned char scratch[1 << 16];

static void test_greedy_picks_lowest_id_on_ties(void)
{
    eng_sampling sp = eng_sampling_default();
    float l[5] = {1, 3, 3, 2, 0};
    eng_rng r;
    eng_rng_seed(&r, 1);
    eng_sample_out o;
    ASSERT_EQ_I64(eng_sample_row(&sp, l, 5, NULL, 0, &r, scratch, &o), 1);
    /* logprob of the pick: 3 - log(e^1 + 2e^3 + e^2 + 1) */
    double lse = log(exp(1) + 2 * exp(3) + exp(2) + 1);
    ASSERT_NEAR_F32(o.logprob, 3 - lse, 1e-5);
}

static void test_top_k_one_is_greedy_at_any_temperature(void)
{
    eng_sampling sp = eng_sampling_default();
    sp.temperature = 5.0f;
    sp.top_k = 1;
    eng_rng r;
    eng_rng_seed(&r, 7);
    for (int i = 0; i < 50; i++) {
        float l[4] = {0.1f, 0.5f, 0.4f, 0.45f};
        ASSERT_EQ_I64(eng_sample_row(&sp, l, 4, NULL, 0, &r, scratch, NULL), 1);
    }
}

static void test_top_p_keeps_smallest_set_reaching_mass(void)
{
    /* probs 0.5, 0.3, 0.2: top_p 0.6 keeps {0, 1}; token 2 never drawn */
    eng_sampling sp = eng_sampling_default();
    sp.temperature = 1.0f;
    sp.top_p = 0.6f;
    eng_rng r;
    eng_rng_seed(&r, 3);
    int seen[3] = {0};
    for (int i = 0; i < 400; i++) {
        float l[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
        seen[eng_sample_row(&sp, l, 3, NULL, 0, &r, scratch, NULL)]++;
    }
    ASSERT_EQ_I64(seen[2], 0);
    ASSERT_TRUE(seen[0] > seen[1] && seen[1] > 50);
}

static void test_min_p_drops_unlikely_tokens(void)
{
    eng_sampling sp = eng_sampling_default();
    sp.temperature = 1.0f;
    sp.min_p = 0.5f;
    eng_rng r;
    eng_rng_seed(&r, 3);
    for (int i = 0; i < 300; i++) {
        float l[3] = {logf(0.45f), logf(0.35f), logf(0.2f)}; /* 0.2 < 0.5 * 0.45 */
        ASSERT_TRUE(eng_sample_row(&sp, l, 3, NULL, 0, &r, scratch, NULL) != 2);
    }
}

static void test_same_seed_same_tokens(void)
{
    eng_sampling sp = eng_sampling_default();
    sp.temperature = 1.0f;
    int32_t a[64], b[64];
    for (int pass = 0; pass < 2; pass++) {
        eng_rng r;
        eng_rng_seed(&r, 1234);
        for (int i = 0; i < 64; i++) {
            float l[16];
            for (int j = 0; j < 16; j++) l[j] = (float)((j * 7) % 5) * 0.3f;
            (pass ? b : a)[i] = eng_sample_row(&sp, l, 16, NULL, 0, &r, scratch, NULL);
        }
    }
    ASSERT_TRUE(memcmp(a, b, sizeof a) == 0);
    int distinct = 0;
    for (int i = 1; i < 64; i++) distinct += a[i] != a[0];
    ASSERT_TRUE(distinct > 0);
}

/* The draw at a position is a pure function of (seed, position): whatever was
 * drawn before, at that position or elsewhere, it comes out the same (what
 * makes speculative verification exact). */
static void test_draw_is_a_function_of_seed_and_position(void)
{
    eng_rng a, b;
    eng_rng_seed(&a, 42);
    eng_rng_seed(&b, 42);
    for (int i = 0; i < 17; i++) eng_rng_uniform(&b); /* b has drawn a lot */
    eng_rng_at(&b, 1000);
    eng_rng_uniform(&b);
    for (int64_t pos = 0; pos < 300; pos++) {
        eng_rng_at(&a, pos);
        eng_rng_at(&b, pos);
        double x = eng_rng_uniform(&a);
        ASSERT_TRUE(x == eng_rng_uniform(&b));
        ASSERT_TRUE(x != eng_rng_uniform(&a)); /* a second draw (a redraw) differs */
    }
    /* another seed, other numbers; the words look uniform (mean and buckets) */
    eng_rng c;
    eng_rng_seed(&c, 43);
    eng_rng_at(&a, 5);
    eng_rng_at(&c, 5);
    ASSERT_TRUE(eng_rng_uniform(&a) != eng_rng_uniform(&c));
    int bucket[10] = {0};
    double sum = 0;
    enum { N = 20000 };
    for (int64_t pos = 0; pos < N; pos++) {
        eng_rng_at(&a, pos);
        double x = eng_rng_uniform(&a);
        ASSERT_TRUE(x >= 0.0 && x < 1.0);
        sum += x;
        bucket[(int)(x * 10)]++;
    }
    ASSERT_NEAR_F32(sum / N, 0.5, 0.01);
    for (int i = 0; i < 10; i++) ASSERT_TRUE(bucket[i] > N / 10 - 300 && bucket[i] < N / 10 + 300);
    /* sampling: the token at a position does not depend on the draws before */
    eng_sampling sp = eng_sampling_default();
    sp.temperature = 1.0f;
    for (int64_t pos = 0; pos < 64; pos++) {
        float l1[16], l2[16];
        for (int j = 0; j < 16; j++) l1[j] = l2[j] = (float)((j * 7) % 5) * 0.3f;
        eng_rng_at(&a, pos);
        eng_rng_at(&b, pos);
        eng_rng_uniform(&b);
        eng_rng_at(&b, pos);
        ASSERT_EQ_I64(eng_sample_row(&sp, l1, 16, NULL, 0, &a, scratch, NULL),
                      eng_sample_row(&sp, l2, 16, NULL, 0, &b, scratch, NULL));
    }
}

static void test_penalties_and_bias_change_the_pick(void)
{
    eng_sampling sp = eng_sampling_default();
    int32_t hist[3] = {0, 0, 2};
    eng_rng r;
    eng_rng_seed(&r, 1);
    sp.repetition_penalty = 2.0f; /* token 0: 4 -> 2 */
    float l[3] = {4.0f, 3.0f, -1.0f};
    ASSERT_EQ_I64(eng_sample_row(&sp, l, 3, hist, 3, &r, scratch, NULL), 1);
    ASSERT_NEAR_F32(l[0], 2.0f, 0);
    ASSERT_NEAR_F32(l[2], -2.0f, 0);
    sp = eng_sampling_default();
    sp.frequency_penalty = 0.6f; /* token 0 seen twice: 4 - 1.2 = 2.8 < 3 */
    float l2[3] = {4.0f, 3.0f, -1.0f};
    ASSERT_EQ_I64(eng_sample_row(&sp, l2, 3, hist, 3, &r, scratch, NULL), 1);
    sp = eng_sampling_default();
    sp.penalty_window = 1; /* only token 2 is in the window */
    sp.presence_penalty = 2.0f;
    float l3[3] = {4.0f, 3.0f, -1.0f};
    ASSERT_EQ_I64(eng_sample_row(&sp, l3, 3, hist, 3, &r, scratch, NULL), 0);
    ASSERT_NEAR_F32(l3[2], -3.0f, 0);
    eng_bias bias = {2, 10.0f};
    sp = eng_sampling_default();
    sp.logit_bias = &bias;
    sp.n_bias = 1;
    float l4[3] = {4.0f, 3.0f, -1.0f};
    ASSERT_EQ_I64(eng_sample_row(&sp, l4, 3, NULL, 0, &r, scratch, NULL), 2);
}

static void test_top_logprobs_are_sorted(void)
{
    eng_sampling sp = eng_sampling_default();
    sp.top_logprobs = 3;
    float l[5] = {0.0f, 2.0f, 1.0f, 3.0f, -1.0f};
    eng_rng r;
    eng_rng_seed(&r, 1);
    eng_sample_out o;
    eng_sample_row(&sp, l, 5, NULL, 0, &r, scratch, &o);
    ASSERT_EQ_I64(o.n_top, 3);
    ASSERT_EQ_I64(o.top_ids[0], 3);
    ASSERT_EQ_I64(o.top_ids[1], 1);
    ASSERT_EQ_I64(o.top_ids[2], 2);
    ASSERT_TRUE(o.top_logprobs[0] > o.top_logprobs[1]);
}

static void test_validation_names_the_field(void)
{
    kiln_err err;
    eng_sampling sp = eng_sampling_default();
    sp.temperature = -1;
    ASSERT_CODE(eng_sampling_validate(&sp, 10, &err), KILN_E_INVALID);
    ASSERT_TRUE(strstr(err.msg, "temperature") != NULL);
    sp = eng_sampling_default();
    sp.top_p = 0;
    ASSERT_CODE(eng_sampling_validate(&sp, 10, &err), KILN_E_INVALID);
    ASSERT_TRUE(strstr(err.msg, "top_p") != NULL);
    sp = eng_sampling_default();
    sp.min_p = 1.5f;
    ASSERT_CODE(eng_sampling_validate(&sp, 10, &err), KILN_E_INVALID);
    eng_bias b = {10, 1.0f};
    sp = eng_sampling_default();
    sp.logit_bias = &b;
    sp.n_bias = 1;
    ASSERT_CODE(eng_sampling_validate(&sp, 10, &err), KILN_E_INVALID);
    sp = eng_sampling_default();
    ASSERT_OK(eng_sampling_validate(&sp, 10, &err));
}


/* A flat distribution over a large vocabulary (most of it within the candidate
 * window): the selected prefix must equal what a full sort gives. */
static void test_selection_equals_full_sort_on_flat_logits(void)
{
    enum { V = 3000 };
    static float l[V], keep[V];
    uint32_t x = 12345;
    for (int i = 0; i < V; i++) {
        x = x * 1664525u + 1013904223u;
        l[i] = (float)(x >> 20) / 4096.0f; /* [0, 1): many exact ties */
    }
    memcpy(keep, l, sizeof l);
    /* reference: the 5 best by (logit desc, id asc), by repeated scans */
    int32_t ref[5];
    for (int k = 0; k < 5; k++) {
        int32_t b = -1;
        for (int32_t i = 0; i < V; i++) {
            int used = 0;
            for (int j = 0; j < k; j++) used |= ref[j] == i;
            if (!used && (b < 0 || l[i] > l[b])) b = i;
        }
        ref[k] = b;
    }
    eng_sampling sp = eng_sampling_default();
    sp.top_logprobs = 5;
    eng_rng r;
    eng_rng_seed(&r, 3);
    eng_sample_out o;
    static alignas(64) unsigned char big[1 << 17];
    ASSERT_EQ_I64(eng_sample_row(&sp, l, V, NULL, 0, &r, big, &o), ref[0]);
    ASSERT_EQ_I64(o.n_top, 5);
    for (int k = 0; k < 5; k++) ASSERT_EQ_I64(o.top_ids[k], ref[k]);
    /* top_k sampling draws only from the k best, and not always the first */
    sp.temperature = 1.0f;
    sp.top_logprobs = 0;
    sp.top_k = 5;
    int firsts = 0;
    for (int t = 0; t < 200; t++) {
        memcpy(l, keep, sizeof l);
        int32_t tok = eng_sample_row(&sp, l, V, NULL, 0, &r, big, NULL);
        int in = 0;
        for (int k = 0; k < 5; k++) in |= tok == ref[k];
        ASSERT_TRUE(in);
        firsts += tok == ref[0];
    }
    ASSERT_TRUE(firsts > 0 && firsts < 200);
}

/* ---------------------------------------------------------------- extremes */

/* Draws `n` tokens from a copy of l[v] each time; checks every pick is a token
 * and every reported number finite; counts picks per id in seen[v]. */
static int draw_many(const eng_sampling *sp, const float *l, int v, const int32_t *hist,
                     int n_hist, int n, int *seen)
{
    eng_rng r;
    eng_rng_seed(&r, 11);
    float row[64];
    for (int t = 0; t < n; t++) {
        memcpy(row, l, sizeof(float) * (size_t)v);
        eng_sample_out o;
        int32_t tok = eng_sample_row(sp, row, v, hist, n_hist, &r, scratch, &o);
        if (tok < 0 || tok >= v || o.token != tok || !isfinite(o.logprob)) return -1;
        for (int i = 0; i < v; i++)
            if (row[i] != row[i]) return -2; /* a NaN left in the processed row */
        for (int i = 0; i < o.n_top; i++)
            if (!isfinite(o.top_logprobs[i])) return -3;
        seen[tok]++;
    }
    return 0;
}

static void test_extreme_temperatures_give_the_best_or_uniform(void)
{
    const float l[5] = {0.5f, 2.0f, 2.0f - 1e-6f, -3.0f, 1.0f};
    const float tiny[] = {1e-30f, FLT_MIN, 1e-45f /* denormal */};
    for (size_t k = 0; k < sizeof tiny / sizeof *tiny; k++) {
        eng_sampling sp = eng_sampling_default();
        sp.temperature = tiny[k];
        sp.top_logprobs = 3;
        int seen[5] = {0};
        ASSERT_EQ_I64(draw_many(&sp, l, 5, NULL, 0, 200, seen), 0);
        ASSERT_EQ_I64(seen[1], 200); /* T -> 0 is argmax, even 1e-6 nats apart */
    }
    /* exact ties at a tiny T: both tied tokens, nothing else */
    const float tie[4] = {3.0f, 1.0f, 3.0f, 0.0f};
    eng_sampling sp = eng_sampling_default();
    sp.temperature = 1e-30f;
    int seen[5] = {0};
    ASSERT_EQ_I64(draw_many(&sp, tie, 4, NULL, 0, 400, seen), 0);
    ASSERT_TRUE(seen[0] > 100 && seen[2] > 100 && seen[0] + seen[2] == 400);
    /* a huge T: every candidate equally likely (none dropped, no NaN) */
    const float huge[] = {1e30f, FLT_MAX};
    for (size_t k = 0; k < 2; k++) {
        sp = eng_sampling_default();
        sp.temperature = huge[k];
        int cnt[5] = {0};
        ASSERT_EQ_I64(draw_many(&sp, l, 5, NULL, 0, 1000, cnt), 0);
        for (int i = 0; i < 5; i++) ASSERT_TRUE(cnt[i] > 120 && cnt[i] < 280);
    }
}

static void test_extreme_filters_keep_at_least_the_best(void)
{
    const float l[6] = {1.0f, 4.0f, 3.9f, 0.0f, -2.0f, 4.0f};
    eng_sampling sp = eng_sampling_default();
    sp.temperature = 1.0f;
    /* top_p at the smallest float (what the API's 1e-300 becomes): the best token */
    sp.top_p = FLT_MIN;
    int seen[6] = {0};
    ASSERT_EQ_I64(draw_many(&sp, l, 6, NULL, 0, 200, seen), 0);
    ASSERT_EQ_I64(seen[1], 200); /* ties by id: 1 before 5 */
    /* top_p just under 1: every candidate stays */
    sp.top_p = nextafterf(1.0f, 0.0f);
    memset(seen, 0, sizeof seen);
    ASSERT_EQ_I64(draw_many(&sp, l, 6, NULL, 0, 2000, seen), 0);
    ASSERT_TRUE(seen[4] > 0);
    /* min_p = 1: only the tokens tied with the best */
    sp = eng_sampling_default();
    sp.temperature = 1.0f;
    sp.min_p = 1.0f;
    memset(seen, 0, sizeof seen);
    ASSERT_EQ_I64(draw_many(&sp, l, 6, NULL, 0, 400, seen), 0);
    ASSERT_TRUE(seen[1] > 100 && seen[5] > 100 && seen[1] + seen[5] == 400);
    /* min_p just under 1: still only the tied best (3.9 is 0.1 nats down) */
    sp.min_p = nextafterf(1.0f, 0.0f);
    memset(seen, 0, sizeof seen);
    ASSERT_EQ_I64(draw_many(&sp, l, 6, NULL, 0, 400, seen), 0);
    ASSERT_EQ_I64(seen[1] + seen[5], 400);
    /* min_p at the smallest float: off in effect */
    sp.min_p = FLT_MIN;
    memset(seen, 0, sizeof seen);
    ASSERT_EQ_I64(draw_many(&sp, l, 6, NULL, 0, 2000, seen), 0);
    ASSERT_TRUE(seen[4] > 0);
    /* top_k 1 and top_k far over the vocabulary */
    sp = eng_sampling_default();
    sp.temperature = 1.0f;
    sp.top_k = 1;
    memset(seen, 0, sizeof seen);
    ASSERT_EQ_I64(draw_many(&sp, l, 6, NULL, 0, 100, seen), 0);
    ASSERT_EQ_I64(seen[1], 100);
    sp.top_k = INT32_MAX;
    memset(seen, 0, sizeof seen);
    ASSERT_EQ_I64(draw_many(&sp, l, 6, NULL, 0, 2000, seen), 0);
    ASSERT_TRUE(seen[4] > 0);
    /* every filter at its extreme at once, tiny T: the best */
    sp.top_k = 1;
    sp.top_p = FLT_MIN;
    sp.min_p = 1.0f;
    sp.temperature = 1e-30f;
    memset(seen, 0, sizeof seen);
    ASSERT_EQ_I64(draw_many(&sp, l, 6, NULL, 0, 50, seen), 0);
    ASSERT_EQ_I64(seen[1], 50);
}

static void test_logit_bias_at_1e30_and_beyond(void)
{
    const float l[5] = {2.0f, 1.0f, 0.0f, 5.0f, -1.0f};
    eng_bias force[2] = {{2, 1e30f}, {4, 1e30f}};
    eng_sampling sp = eng_sampling_default();
    sp.temperature = 1.0f;
    sp.logit_bias = force;
    sp.n_bias = 1;
    int seen[5] = {0};
    ASSERT_EQ_I64(draw_many(&sp, l, 5, NULL, 0, 100, seen), 0);
    ASSERT_EQ_I64(seen[2], 100); /* +1e30 forces the token */
    eng_rng r;
    eng_rng_seed(&r, 1);
    eng_sample_out o;
    float row[5];
    memcpy(row, l, sizeof row);
    sp.temperature = 0;
    ASSERT_EQ_I64(eng_sample_row(&sp, row, 5, NULL, 0, &r, scratch, &o), 2);
    ASSERT_NEAR_F32(o.logprob, 0.0f, 1e-6); /* all the mass, finite */
    /* two forced tokens: they tie, both drawn */
    sp.temperature = 1.0f;
    sp.n_bias = 2;
    memset(seen, 0, sizeof seen);
    ASSERT_EQ_I64(draw_many(&sp, l, 5, NULL, 0, 400, seen), 0);
    ASSERT_TRUE(seen[2] > 100 && seen[4] > 100 && seen[2] + seen[4] == 400);
    /* -1e30 on the best token: never drawn, even greedy */
    eng_bias ban = {3, -1e30f};
    sp.logit_bias = &ban;
    sp.n_bias = 1;
    memset(seen, 0, sizeof seen);
    ASSERT_EQ_I64(draw_many(&sp, l, 5, NULL, 0, 400, seen), 0);
    ASSERT_EQ_I64(seen[3], 0);
    /* a bias that overflows to +inf (FLT_MAX on a large logit) ties at the top */
    const float big[3] = {3e38f, 1.0f, 3e38f};
    eng_bias over[2] = {{0, FLT_MAX}, {2, FLT_MAX}};
    sp.logit_bias = over;
    sp.n_bias = 2;
    memset(seen, 0, sizeof seen);
    ASSERT_EQ_I64(draw_many(&sp, big, 3, NULL, 0, 400, seen), 0);
    ASSERT_TRUE(seen[0] > 100 && seen[2] > 100 && seen[1] == 0);
    /* -inf on every token but one (the validator allows -inf): that one */
    eng_bias most[4] = {{0, -INFINITY}, {1, -INFINITY}, {3, -INFINITY}, {4, -INFINITY}};
    sp.logit_bias = most;
    sp.n_bias = 4;
    memset(seen, 0, sizeof seen);
    ASSERT_EQ_I64(draw_many(&sp, l, 5, NULL, 0, 50, seen), 0);
    ASSERT_EQ_I64(seen[2], 50);
    /* -inf on every token: no token, said as -1 (the engine ends the request) */
    eng_bias all[5] = {{0, -INFINITY}, {1, -INFINITY}, {2, -INFINITY}, {3, -INFINITY},
                       {4, -INFINITY}};
    sp.logit_bias = all;
    sp.n_bias = 5;
    memcpy(row, l, sizeof row);
    ASSERT_EQ_I64(eng_sample_row(&sp, row, 5, NULL, 0, &r, scratch, &o), -1);
    ASSERT_EQ_I64(o.token, -1);
}

static void test_penalties_at_their_bounds(void)
{
    const float l[6] = {30.0f, -30.0f, 5.0f, 4.0f, 0.0f, 1e30f};
    int32_t hist[64];
    for (int i = 0; i < 64; i++) hist[i] = i % 2 ? 0 : 5; /* 0 and 5, 32 times each */
    const float reps[] = {1e-30f, 1e-3f, 100.0f, 1e30f, FLT_MAX};
    for (size_t k = 0; k < sizeof reps / sizeof *reps; k++) {
        eng_sampling sp = eng_sampling_default();
        sp.repetition_penalty = reps[k];
        sp.temperature = 1.0f;
        sp.top_logprobs = 5;
        int seen[6] = {0};
        ASSERT_EQ_I64(draw_many(&sp, l, 6, hist, 64, 50, seen), 0);
        sp.temperature = 0;
        memset(seen, 0, sizeof seen);
        ASSERT_EQ_I64(draw_many(&sp, l, 6, hist, 64, 1, seen), 0);
    }
    /* presence and frequency at +-2 over a full window: 2 + 2 * 32 per token */
    eng_sampling sp = eng_sampling_default();
    sp.presence_penalty = 2.0f;
    sp.frequency_penalty = 2.0f;
    const float m[3] = {65.5f, 0.0f, 1.0f};
    int32_t h2[64];
    for (int i = 0; i < 64; i++) h2[i] = i % 2 ? 0 : 2;
    int seen[3] = {0};
    ASSERT_EQ_I64(draw_many(&sp, m, 3, h2, 64, 1, seen), 0);
    ASSERT_EQ_I64(seen[1], 1); /* 65.5 - 66 < 0; 1 - 66 < 0; token 1 stays at 0 */
    sp.presence_penalty = -2.0f;
    sp.frequency_penalty = -2.0f;
    memset(seen, 0, sizeof seen);
    ASSERT_EQ_I64(draw_many(&sp, m, 3, h2, 64, 1, seen), 0);
    ASSERT_EQ_I64(seen[0], 1);
}

static void test_nan_and_inf_logits(void)
{
    const float nan = NAN;
    /* a NaN where the best would be: never drawn, counted */
    float l[5] = {1.0f, nan, 2.0f, nan, 0.5f};
    eng_sampling sp = eng_sampling_default();
    sp.temperature = 1.0f;
    sp.top_logprobs = 5;
    eng_rng r;
    eng_rng_seed(&r, 5);
    eng_sample_out o;
    int seen[5] = {0};
    for (int t = 0; t < 300; t++) {
        float row[5];
        memcpy(row, l, sizeof row);
        int32_t tok = eng_sample_row(&sp, row, 5, NULL, 0, &r, scratch, &o);
        ASSERT_TRUE(tok == 0 || tok == 2 || tok == 4);
        ASSERT_EQ_I64(o.n_nan, 2);
        ASSERT_TRUE(isfinite(o.logprob));
        ASSERT_EQ_I64(o.n_top, 3); /* the NaN ones are not candidates */
        seen[tok]++;
    }
    ASSERT_TRUE(seen[2] > seen[0] && seen[0] > 0);
    /* +inf from the model: ties at the top, drawn; greedy picks it */
    float inf_row[4] = {1.0f, INFINITY, 0.0f, INFINITY};
    sp.temperature = 0;
    ASSERT_EQ_I64(eng_sample_row(&sp, inf_row, 4, NULL, 0, &r, scratch, &o), 1);
    ASSERT_TRUE(isfinite(o.logprob));
    /* a NaN plus a penalty or a bias stays out */
    float p[3] = {nan, 0.0f, -1.0f};
    eng_bias b = {0, 100.0f};
    sp.logit_bias = &b;
    sp.n_bias = 1;
    sp.repetition_penalty = 1.5f;
    int32_t h[1] = {0};
    ASSERT_EQ_I64(eng_sample_row(&sp, p, 3, h, 1, &r, scratch, &o), 1);
    /* nothing finite at all: -1 */
    float all[3] = {nan, -INFINITY, nan};
    sp = eng_sampling_default();
    sp.temperature = 0.7f;
    ASSERT_EQ_I64(eng_sample_row(&sp, all, 3, NULL, 0, &r, scratch, &o), -1);
    ASSERT_EQ_I64(o.n_nan, 2);
    ASSERT_EQ_I64(o.token, -1);
}

int main(void)
{
    RUN(test_greedy_picks_lowest_id_on_ties);
    RUN(test_top_k_one_is_greedy_at_any_temperature);
    RUN(test_top_p_keeps_smallest_set_reaching_mass);
    RUN(test_min_p_drops_unlikely_tokens);
    RUN(test_same_seed_same_tokens);
    RUN(test_draw_is_a_function_of_seed_and_position);
    RUN(test_penalties_and_bias_change_the_pick);
    RUN(test_top_logprobs_are_sorted);
    RUN(test_validation_names_the_field);
    RUN(test_selection_equals_full_sort_on_flat_logits);
    RUN(test_extreme_temperatures_give_the_best_or_uniform);
    RUN(test_extreme_filters_keep_at_least_the_best);
    RUN(test_logit_bias_at_1e30_and_beyond);
    RUN(test_penalties_at_their_bounds);
    RUN(test_nan_and_inf_logits);
    return TEST_DONE();
}
