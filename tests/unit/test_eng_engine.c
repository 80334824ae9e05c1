/*
 * test_eng_engine.c — the serving engine on a real model (stories260K):
 * results independent of load, stop strings with hold-back, cancellation
 * freeing KV, queue limits, prefix-cache reuse.
 */
#include "engine/eng_engine.h"
#include "eng_collect.h"
#include "test_model.h"

/* Submits p, collects its whole stream, releases the handle. */
static kiln_code run_one(eng_engine *e, const eng_params *p, collected *c, kiln_err *err)
{
    eng_handle *h;
    kiln_code rc = eng_submit(e, p, &h, err);
    if (rc) return rc;
    collect(h, c);
    eng_handle_release(h);
    return KILN_OK;
}

static eng_runtime *rt;
static tok_tokenizer *tok;
static char dir[512];

static int prefix_cache_on = 1;

static uint64_t kv_budget; /* start(): --kv-budget bytes, 0 = none */
static int32_t chunk = 16;  /* start(): prefill_chunk */
static double max_stall_s;  /* start(): eng_engine_opts.max_stall_s */

static eng_engine *start(int max_seqs, int max_queue)
{
    kiln_err err;
    eng_runtime_opts o = eng_runtime_opts_default();
    o.ctx = 512;
    o.max_seqs = max_seqs;
    o.n_threads = 1;
    o.block_tokens = 8;
    o.max_step_tokens = 64;
    if (eng_runtime_open(dir, &o, &rt, &err)) return NULL;
    if (tok_load(dir, &tok, &err)) return NULL;
    eng_engine_opts eo = eng_engine_opts_default();
    eo.max_queue = max_queue;
    eo.prefill_chunk = chunk;
    eo.max_stall_s = max_stall_s;
    eo.prefix_cache = prefix_cache_on;
    eo.kv_budget_bytes = kv_budget;
    eo.kv_bytes_per_token = 1280; /* stories260K: 5 layers x K,V x 4 heads x 8 x f32 */
    eng_engine *e;
    if (eng_engine_start(rt, tok, &eo, &e, &err)) return NULL;
    return e;
}

static void stop_all(eng_engine *e)
{
    eng_engine_stop(e);
    eng_runtime_close(rt);
    tok_destroy(tok);
    rt = NULL;
    tok = NULL;
}

static eng_params params(const int32_t *prompt, int32_t n, int32_t max_tokens, float temp,
                         uint64_t seed)
{
    eng_params p = eng_params_default();
    p.prompt = prompt;
    p.n_prompt = n;
    p.max_tokens = max_tokens;
    p.sp.temperature = temp;
    p.sp.seed = seed;
    return p;
}

static const int32_t prompt_a[] = {1, 403, 407, 261, 378, 432};
static const int32_t prompt_b[] = {1, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338,
                                   381, 261, 370, 268, 414, 444, 373, 280};

static int skip_if_absent(void)
{
    test_shared_path(dir, sizeof dir, "models/stories260K");
    return !test_path_exists(dir);
}

static void test_concurrent_requests_equal_each_alone(void)
{
    if (skip_if_absent()) TEST_SKIP("stories260K absent");
    eng_engine *e = start(8, 64);
    ASSERT_TRUE(e != NULL);
    kiln_err err;
    enum { N = 6 };
    eng_params ps[N] = {
        params(prompt_a, 5, 40, 0.0f, 0),   params(prompt_b, 21, 30, 0.0f, 0),
        params(prompt_a, 5, 40, 0.8f, 7),   params(prompt_b, 21, 35, 1.0f, 9),
        params(prompt_a, 3, 25, 0.7f, 11),  params(prompt_b, 10, 33, 0.0f, 0),
    };
    ps[3].sp.top_p = 0.9f;
    ps[4].sp.top_k = 5;
    ps[4].sp.repetition_penalty = 1.3f;
    ps[5].sp.presence_penalty = 0.5f;
    collected alone[N], together[N];
    for (int i = 0; i < N; i++) ASSERT_OK(run_one(e, &ps[i], &alone[i], &err));
    eng_handle *hs[N];
    for (int i = 0; i < N; i++) ASSERT_OK(eng_submit(e, &ps[i], &hs[i], &err));
    for (int i = 0; i < N; i++) {
        collect(hs[i], &together[i]);
        eng_handle_release(hs[i]);
    }
    for (int i = 0; i < N; i++) {
        ASSERT_TRUE(alone[i].n_toks > 0);
        ASSERT_EQ_I64(alone[i].n_toks, together[i].n_toks);
        ASSERT_TRUE(memcmp(alone[i].toks, together[i].toks, sizeof(int32_t) * (size_t)alone[i].n_toks) == 0);
        ASSERT_EQ_I64(alone[i].text_len, together[i].text_len);
        ASSERT_TRUE(memcmp(alone[i].text, together[i].text, alone[i].text_len) == 0);
    }
    eng_stats st = eng_get_stats(e);
    ASSERT_EQ_I64(st.kv.n_active, 0);
    ASSERT_TRUE(st.requests_finished == 2 * N);
    stop_all(e);
}

static void test_stop_string_across_tokens_is_excluded_and_never_leaked(void)
{
    if (skip_if_absent()) TEST_SKIP("stories260K absent");
    eng_engine *e = start(4, 16);
    ASSERT_TRUE(e != NULL);
    kiln_err err;
    eng_params p = params(prompt_a, 5, 60, 0.0f, 0);
    collected full, cut;
    ASSERT_OK(run_one(e, &p, &full, &err));
    ASSERT_TRUE(full.text_len > 40);
    /* a stop string made of the text around a token boundary, 20+ bytes in */
    char stop[16];
    memcpy(stop, full.text + 20, 7);
    stop[7] = '\0';
    const char *first = strstr(full.text, stop);
    size_t at = (size_t)(first - full.text);
    p.stop[0] = "zzzz-never";
    p.stop[1] = stop;
    p.n_stop = 2;
    ASSERT_OK(run_one(e, &p, &cut, &err)); /* the stop never reaches the text */
    ASSERT_EQ_I64(cut.finish, ENG_FINISH_STOP);
    ASSERT_STR_EQ(cut.stop_matched, stop);
    ASSERT_EQ_I64(cut.text_len, at);
    ASSERT_TRUE(memcmp(cut.text, full.text, at) == 0);
    stop_all(e);
}

static void test_cancel_frees_blocks(void)
{
    if (skip_if_absent()) TEST_SKIP("stories260K absent");
    eng_engine *e = start(4, 16);
    ASSERT_TRUE(e != NULL);
    kiln_err err;
    eng_params p = params(prompt_b, 21, 400, 0.0f, 0);
    p.ignore_eos = true;
    eng_handle *h;
    ASSERT_OK(eng_submit(e, &p, &h, &err));
    eng_event ev;
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ_I64(eng_handle_next(h, &ev, 60000), 0);
        eng_event_clear(&ev);
    }
    eng_handle_release(h); /* client gone */
    eng_stats st;
    for (int i = 0; i < 500; i++) {
        st = eng_get_stats(e);
        if (st.requests_finished == 1) break;
        usleep(10000);
    }
    ASSERT_EQ_I64(st.requests_cancelled, 1);
    ASSERT_EQ_I64(st.kv.n_active, 0);
    ASSERT_EQ_I64(st.running, 0);
    stop_all(e);
}

static void test_queue_full_is_busy_and_stop_cancels_waiting(void)
{
    if (skip_if_absent()) TEST_SKIP("stories260K absent");
    eng_engine *e = start(1, 2);
    ASSERT_TRUE(e != NULL);
    kiln_err err;
    eng_params p = params(prompt_b, 21, 300, 0.0f, 0);
    p.ignore_eos = true;
    eng_handle *h[4] = {0};
    ASSERT_OK(eng_submit(e, &p, &h[0], &err));
    for (int i = 0; i < 1000 && eng_get_stats(e).running < 1; i++) usleep(5000); /* admitted */
    ASSERT_OK(eng_submit(e, &p, &h[1], &err));
    ASSERT_OK(eng_submit(e, &p, &h[2], &err));
    ASSERT_CODE(eng_submit(e, &p, &h[3], &err), KILN_E_BUSY);
    eng_engine_stop(e); /* in-flight and waiting get CANCELLED */
    for (int i = 0; i < 3; i++) {
        collected c;
        ASSERT_EQ_I64(collect(h[i], &c), 0);
        ASSERT_EQ_I64(c.finish, ENG_FINISH_CANCELLED);
        eng_handle_release(h[i]);
    }
    eng_runtime_close(rt);
    tok_destroy(tok);
}

static void test_prefix_cache_reuses_blocks_with_same_output(void)
{
    if (skip_if_absent()) TEST_SKIP("stories260K absent");
    eng_engine *e = start(4, 16);
    ASSERT_TRUE(e != NULL);
    kiln_err err;
    eng_params p = params(prompt_b, 21, 20, 0.0f, 0);
    collected c1, c2;
    ASSERT_OK(run_one(e, &p, &c1, &err));
    ASSERT_OK(run_one(e, &p, &c2, &err));
    ASSERT_EQ_I64(c1.cached, 0);
    ASSERT_EQ_I64(c2.cached, 16); /* two full blocks of 8; the last token is recomputed */
    ASSERT_EQ_I64(c1.n_toks, c2.n_toks);
    ASSERT_TRUE(memcmp(c1.toks, c2.toks, sizeof(int32_t) * (size_t)c1.n_toks) == 0);
    ASSERT_TRUE(eng_get_stats(e).kv.hits >= 2);
    stop_all(e);
}

static void test_prefix_cache_off_reuses_nothing(void)
{
    if (skip_if_absent()) TEST_SKIP("stories260K absent");
    prefix_cache_on = 0;
    eng_engine *e = start(4, 16);
    prefix_cache_on = 1;
    ASSERT_TRUE(e != NULL);
    kiln_err err;
    eng_params p = params(prompt_b, 21, 20, 0.0f, 0);
    collected c1, c2;
    ASSERT_OK(run_one(e, &p, &c1, &err));
    ASSERT_OK(run_one(e, &p, &c2, &err));
    ASSERT_EQ_I64(c2.cached, 0);
    ASSERT_EQ_I64(eng_get_stats(e).kv.n_cached, 0);
    ASSERT_TRUE(memcmp(c1.toks, c2.toks, sizeof(int32_t) * (size_t)c1.n_toks) == 0);
    stop_all(e);
}

/* The streamed text is exactly decode(prompt + output) minus decode(prompt):
 * the first piece keeps the space SentencePiece gives it after the prompt. */
static void test_streamed_text_continues_the_prompt(void)
{
    if (skip_if_absent()) TEST_SKIP("stories260K absent");
    eng_engine *e = start(2, 4);
    ASSERT_TRUE(e != NULL);
    kiln_err err;
    eng_params p = params(prompt_a, 6, 12, 0.0f, 0); /* continues with " there" */
    collected c;
    ASSERT_OK(run_one(e, &p, &c, &err));
    int32_t all[64];
    memcpy(all, prompt_a, sizeof prompt_a);
    all[5] = 432;
    memcpy(all + 6, c.toks, sizeof(int32_t) * (size_t)c.n_toks);
    char *full = NULL, *pre = NULL;
    size_t fl = 0, pl = 0;
    ASSERT_OK(tok_decode(tok, all, (size_t)(6 + c.n_toks), TOK_SKIP_SPECIAL, &full, &fl, &err));
    ASSERT_OK(tok_decode(tok, all, 6, TOK_SKIP_SPECIAL, &pre, &pl, &err));
    int ok = fl == pl + c.text_len && memcmp(full, pre, pl) == 0 &&
             memcmp(full + pl, c.text, c.text_len) == 0;
    if (!ok) fprintf(stderr, "  full='%s' prompt='%s' streamed='%.*s'\n", full, pre, (int)c.text_len, c.text);
    free(full);
    free(pre);
    stop_all(e);
    ASSERT_TRUE(ok);
}

static void test_invalid_requests_are_refused(void)
{
    if (skip_if_absent()) TEST_SKIP("stories260K absent");
    eng_engine *e = start(2, 4);
    ASSERT_TRUE(e != NULL);
    kiln_err err;
    eng_handle *h;
    eng_params p = params(prompt_a, 0, 5, 0.0f, 0);
    ASSERT_CODE(eng_submit(e, &p, &h, &err), KILN_E_INVALID);
    int32_t bad[2] = {1, 600};
    p = params(bad, 2, 5, 0.0f, 0);
    ASSERT_CODE(eng_submit(e, &p, &h, &err), KILN_E_INVALID);
    p = params(prompt_a, 5, 5, -2.0f, 0);
    ASSERT_CODE(eng_submit(e, &p, &h, &err), KILN_E_INVALID);
    stop_all(e);
}

/* --kv-budget of 2.5 units (1 unit = 64 positions): A and B (1 unit each) run,
 * C (2 units) waits for both, D (1 unit) arrives after C and must not overtake
 * it although it would fit beside B: D is admitted only once C has finished
 * (C beside D is 3 units), so C's DONE is queued before D's first token. */
static void test_kv_budget_queues_fifo_without_overtaking(void)
{
    if (skip_if_absent()) TEST_SKIP("stories260K absent");
    kv_budget = (uint64_t)(2.5 * 64 * 1280);
    eng_engine *e = start(8, 64);
    kv_budget = 0;
    ASSERT_TRUE(e != NULL);
    kiln_err err;
    eng_params big = params(prompt_a, 6, 64 * 3, 0.0f, 0);
    eng_handle *h[4];
    ASSERT_EQ_I64(eng_submit(e, &big, &h[0], &err), KILN_E_BUDGET); /* over the budget alone */
    ASSERT_TRUE(strstr(err.msg, "--kv-budget") != NULL);
    int32_t mt[4] = {58, 58, 122, 58}; /* 6 + mt = 64, 64, 128, 64 positions */
    for (int i = 0; i < 4; i++) {
        eng_params p = params(prompt_a, 6, mt[i], 0.0f, 0);
        p.ignore_eos = true;
        ASSERT_OK(eng_submit(e, &p, &h[i], &err));
    }
    eng_event ev;
    ASSERT_EQ_I64(eng_handle_next(h[3], &ev, 60000), 0); /* D's first event */
    ASSERT_TRUE(ev.kind == ENG_EV_TOKEN);
    eng_event_clear(&ev);
    int c_done = 0, rc;
    while (!c_done && (rc = eng_handle_next(h[2], &ev, 0)) == 0) { /* only what is queued */
        c_done = ev.kind != ENG_EV_TOKEN;
        if (c_done) ASSERT_EQ_I64(ev.completion_tokens, 122);
        eng_event_clear(&ev);
    }
    ASSERT_TRUE(c_done);
    collected c;
    ASSERT_EQ_I64(collect(h[3], &c), 0);
    ASSERT_EQ_I64(c.completion_tokens, 58);
    for (int i = 0; i < 2; i++) {
        ASSERT_EQ_I64(collect(h[i], &c), 0);
        ASSERT_EQ_I64(c.completion_tokens, 58);
    }
    eng_stats st = eng_get_stats(e);
    ASSERT_TRUE(st.kv_budget_waits >= 2);
    for (int i = 0; i < 4; i++)
        eng_handle_release(h[i]);
    stop_all(e);
}

/* While a lease is held no step runs: a request waits (no event), a cancelled
 * one still leaves; after the release the waiting one completes. */
static void test_lease_holds_steps_until_released(void)
{
    if (skip_if_absent()) TEST_SKIP("stories260K absent");
    eng_engine *e = start(4, 64);
    ASSERT_TRUE(e != NULL);
    kiln_err err;
    eng_engine_lease_acquire(e);
    ASSERT_EQ_I64(eng_get_stats(e).leases, 1);
    eng_params p = params(prompt_a, 6, 8, 0.0f, 0);
    p.ignore_eos = true;
    eng_handle *h, *gone;
    ASSERT_OK(eng_submit(e, &p, &h, &err));
    ASSERT_OK(eng_submit(e, &p, &gone, &err));
    eng_event ev;
    ASSERT_EQ_I64(eng_handle_next(h, &ev, 300), 1); /* nothing while leased */
    eng_handle_cancel(gone);
    ASSERT_EQ_I64(eng_handle_next(gone, &ev, 5000), 0); /* cancellation works while leased */
    ASSERT_EQ_I64(ev.kind, ENG_EV_DONE);
    ASSERT_EQ_I64(ev.finish, ENG_FINISH_CANCELLED);
    eng_event_clear(&ev);
    eng_stats st = eng_get_stats(e);
    ASSERT_EQ_U64(st.steps, 0);
    ASSERT_EQ_I64(st.waiting, 1);
    eng_engine_lease_release(e);
    collected c;
    ASSERT_EQ_I64(collect(h, &c), 0);
    ASSERT_EQ_I64(c.completion_tokens, 8);
    eng_handle_release(h);
    eng_handle_release(gone);
    /* stop while leased: the waiting request is cancelled, the thread joins */
    eng_engine_lease_acquire(e);
    ASSERT_OK(eng_submit(e, &p, &h, &err));
    stop_all(e);
    ASSERT_EQ_I64(eng_handle_next(h, &ev, 5000), 0);
    ASSERT_EQ_I64(ev.finish, ENG_FINISH_CANCELLED);
    eng_event_clear(&ev);
    eng_handle_release(h);
}

/* Steps a 200-token prompt (max_tokens 1) took beside a decoding stream; its
 * greedy token goes to *tok_out. */
static int64_t steps_for_long_prompt_beside_a_stream(eng_engine *e, int32_t *tok_out)
{
    kiln_err err;
    static int32_t longp[200];
    for (int i = 0; i < 200; i++) longp[i] = i == 0 ? 1 : 260 + (i * 37) % 240;
    eng_params a = params(prompt_a, 5, 400, 0.0f, 0);
    a.ignore_eos = true;
    eng_handle *ha, *hb;
    if (eng_submit(e, &a, &ha, &err)) return -1;
    eng_event ev;
    if (eng_handle_next(ha, &ev, 60000) != 0) return -1; /* a is decoding now */
    eng_event_clear(&ev);
    eng_params b = params(longp, 200, 1, 0.0f, 0);
    if (eng_submit(e, &b, &hb, &err)) return -1;
    collected cb;
    collect(hb, &cb);
    eng_handle_release(hb);
    eng_handle_release(ha); /* cancels a */
    *tok_out = cb.n_toks == 1 ? cb.toks[0] : -1;
    return cb.steps;
}

static void test_prefill_beside_streams_is_sliced_by_time(void)
{
    if (skip_if_absent()) TEST_SKIP("stories260K absent");
    /* whole chunks: 200 tokens go in steps of up to 64 (the step budget) */
    chunk = 256;
    max_stall_s = 0;
    eng_engine *e = start(4, 16);
    ASSERT_TRUE(e != NULL);
    int32_t t_whole, t_sliced;
    int64_t whole = steps_for_long_prompt_beside_a_stream(e, &t_whole);
    stop_all(e);
    /* a 1 ns stall target: every step after the first measured one prefills
     * ENG_MIN_PREFILL_SLICE tokens */
    max_stall_s = 1e-9;
    e = start(4, 16);
    ASSERT_TRUE(e != NULL);
    int64_t sliced = steps_for_long_prompt_beside_a_stream(e, &t_sliced);
    stop_all(e);
    chunk = 16;
    max_stall_s = 0;
    ASSERT_EQ_I64(whole, 4);   /* 63 + 63 + 63 + 11 beside one decode each */
    ASSERT_EQ_I64(sliced, 10); /* 63 (measures s/token), then 16 per step: 1 + ceil(137 / 16) */
    ASSERT_TRUE(t_whole >= 0);
    ASSERT_EQ_I64(t_whole, t_sliced); /* same result, other timing */
}

int main(void)
{
    RUN(test_concurrent_requests_equal_each_alone);
    RUN(test_stop_string_across_tokens_is_excluded_and_never_leaked);
    RUN(test_cancel_frees_blocks);
    RUN(test_queue_full_is_busy_and_stop_cancels_waiting);
    RUN(test_prefix_cache_reuses_blocks_with_same_output);
    RUN(test_prefix_cache_off_reuses_nothing);
    RUN(test_streamed_text_continues_the_prompt);
    RUN(test_invalid_requests_are_refused);
    RUN(test_kv_budget_queues_fifo_without_overtaking);
    RUN(test_lease_holds_steps_until_released);
    RUN(test_prefill_beside_streams_is_sliced_by_time);
    return TEST_DONE();
}
