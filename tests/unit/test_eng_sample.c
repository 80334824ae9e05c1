/*
 * test_eng_sample.c — greedy, filters, penalties, bias, seeds, validation.
 */
#include "engine/eng_sample.h"
#include "test.h"

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
    return TEST_DONE();
}
