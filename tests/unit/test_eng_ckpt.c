/*
 * test_eng_ckpt.c — generation checkpoints: the payload round-trips, broken
 * payloads are refused, and the identity tells apart exactly what decides the
 * tokens (the seed only when the client chose it).
 */
#include "engine/eng_ckpt.h"
#include "test.h"

static void test_payload_round_trips(void)
{
    kiln_err err;
    int32_t gen[5] = {7, 8, 9, 10, 11};
    eng_ckpt ck = {.id = 0xabcdef, .n_prompt = 42, .n_gen = 5, .rng = {{1, 2, 3, 4}}, .gen = gen};
    uint8_t *buf = NULL;
    size_t n = 0;
    ASSERT_OK(eng_ckpt_encode(&ck, &buf, &n, &err));
    ASSERT_EQ_I64(n, 56 + 5 * 4);
    eng_ckpt out;
    ASSERT_OK(eng_ckpt_decode(buf, n, &out, &err));
    ASSERT_EQ_U64(out.id, 0xabcdef);
    ASSERT_EQ_I64(out.n_prompt, 42);
    ASSERT_EQ_I64(out.n_gen, 5);
    ASSERT_EQ_U64(out.rng.s[3], 4);
    ASSERT_EQ_I64(out.gen[4], 11);
    eng_ckpt_clear(&out);
    ASSERT_CODE(eng_ckpt_decode(buf, n - 1, &out, &err), KILN_E_CORRUPT); /* truncated */
    buf[4] ^= 1;                                                          /* another ABI */
    ASSERT_CODE(eng_ckpt_decode(buf, n, &out, &err), KILN_E_CORRUPT);
    free(buf);
}

static void test_identity_covers_what_decides_the_tokens(void)
{
    int32_t prompt[3] = {1, 2, 3};
    eng_params p = eng_params_default();
    p.prompt = prompt;
    p.n_prompt = 3;
    p.sp.seed = 5;
    uint64_t base = eng_ckpt_identity(&p, 99);
    ASSERT_EQ_U64(eng_ckpt_identity(&p, 99), base);
    ASSERT_TRUE(eng_ckpt_identity(&p, 98) != base); /* another model / KV format */
    eng_params q = p;
    q.sp.seed = 6;
    ASSERT_TRUE(eng_ckpt_identity(&q, 99) != base);
    q = p;
    q.sp.temperature = 0.5f;
    ASSERT_TRUE(eng_ckpt_identity(&q, 99) != base);
    q = p;
    q.max_tokens = 17;
    ASSERT_TRUE(eng_ckpt_identity(&q, 99) != base);
    int32_t other[3] = {1, 2, 4};
    q = p;
    q.prompt = other;
    ASSERT_TRUE(eng_ckpt_identity(&q, 99) != base);
    q = p;
    q.stop[0] = "END";
    q.n_stop = 1;
    ASSERT_TRUE(eng_ckpt_identity(&q, 99) != base);
    /* a server-picked seed is not part of it: a retry gets another seed */
    eng_params r1 = p, r2 = p;
    r1.seed_random = r2.seed_random = true;
    r1.sp.seed = 111;
    r2.sp.seed = 222;
    ASSERT_EQ_U64(eng_ckpt_identity(&r1, 99), eng_ckpt_identity(&r2, 99));
    r2.choice = 1; /* but the choice index among n is */
    ASSERT_TRUE(eng_ckpt_identity(&r1, 99) != eng_ckpt_identity(&r2, 99));
}

int main(void)
{
    RUN(test_payload_round_trips);
    RUN(test_identity_covers_what_decides_the_tokens);
    return TEST_DONE();
}
