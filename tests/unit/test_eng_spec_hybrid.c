/*
 * test_eng_spec_hybrid.c — speculative decoding on a hybrid (Qwen3.5) target
 * (docs/speculative.md, Recurrent state): a rejected draft must leave the
 * gated-DeltaNet state (conv rows + S) exactly where plain decoding has it.
 * On a synthetic Qwen3.5 (tools/make-test-model --arch qwen3_5, 8 layers, 6
 * recurrent), with n-gram drafting and with a draft model (a 2-layer Qwen3 of
 * the same tokenizer), greedy and seeded sampling, alone and 8 rows at once
 * with two of them not drafting: tokens, text, finish and every logprob equal
 * drafting off; drafts were both accepted and rejected; KV and state pool
 * counts after a run equal a plain run's; a request cancelled while drafting
 * leaves nothing active; a pool with few state blocks drafts fewer tokens
 * and stays identical.
 */
#include "engine/eng_draft.h"
#include "engine/eng_engine.h"
#include "eng_collect.h"
#include "engine/eng_spec.h"
#include "test_model.h"
#include "tokenizer/tok.h"

static char hyb_dir[512], qd_dir[512];

static eng_runtime *rt;
static tok_tokenizer *tok;
static eng_draft *draft;
static eng_mtp *mtp;
static int with_mtp; /* start(): open the target's MTP head too */

/* state_blocks 0: the default pool */
static eng_engine *start(const char *ddir, int32_t state_blocks)
{
    kiln_err err;
    eng_runtime_opts o = eng_runtime_opts_default();
    o.ctx = 512;
    o.max_seqs = 8;
    o.n_threads = 2;
    o.block_tokens = 8;
    o.max_step_tokens = 64;
    o.state_blocks = state_blocks;
    if (eng_runtime_open(hyb_dir, &o, &rt, &err)) {
        fprintf(stderr, "target: %s\n", err.msg);
        return NULL;
    }
    if (tok_load(hyb_dir, &tok, &err)) return NULL;
    draft = NULL;
    if (ddir && eng_draft_open(ddir, rt, tok, 0, &draft, &err)) {
        fprintf(stderr, "draft: %s\n", err.msg);
        return NULL;
    }
    mtp = NULL;
    if (with_mtp && eng_mtp_open(hyb_dir, rt, &mtp, &err)) {
        fprintf(stderr, "mtp: %s\n", err.msg);
        return NULL;
    }
    eng_engine_opts eo = eng_engine_opts_default();
    eo.mtp = mtp;
    eo.max_queue = 64;
    eo.prefill_chunk = 16;
    eo.max_stall_s = 0;
    eo.spec.method = ENG_SPEC_OFF;
    eo.spec.max_draft = 5;
    eo.spec.adaptive = 0; /* every drafting row drafts max_draft: the most rollbacks */
    eo.draft = draft;
    eng_engine *e;
    if (eng_engine_start(rt, tok, &eo, &e, &err)) return NULL;
    return e;
}

static void stop_all(eng_engine *e)
{
    eng_engine_stop(e);
    eng_draft_close(draft);
    eng_mtp_close(mtp);
    eng_runtime_close(rt);
    tok_destroy(tok);
    rt = NULL;
    tok = NULL;
    draft = NULL;
    mtp = NULL;
}

static void run_all(eng_engine *e, eng_params *ps, int n, int together, collected *out)
{
    kiln_err err;
    eng_handle *hs[16];
    for (int i = 0; i < n; i++) {
        ASSERT_OK(eng_submit(e, &ps[i], &hs[i], &err));
        if (!together) {
            ASSERT_EQ_I64(collect(hs[i], &out[i]), 0);
            eng_handle_release(hs[i]);
        }
    }
    if (together)
        for (int i = 0; i < n; i++) {
            ASSERT_EQ_I64(collect(hs[i], &out[i]), 0);
            eng_handle_release(hs[i]);
        }
}

/* The prompt quotes the model's own greedy continuation of a seed text
 * (quote_prompt), so n-gram drafts from the quote get accepted by the greedy
 * rows; sampled rows diverge from it (rejections). */
static int32_t prompt[160];
static int32_t n_prompt;

static void quote_prompt(eng_engine *e)
{
    static const int32_t seed[] = {3, 9, 14, 5, 11, 7};
    eng_params q = eng_params_default();
    q.prompt = seed;
    q.n_prompt = 6;
    q.max_tokens = 60;
    q.ignore_eos = true;
    collected c;
    run_all(e, &q, 1, 0, &c);
    n_prompt = 0;
    for (int r = 0; r < 2; r++) {
        for (int32_t i = 0; i < 6; i++)
            prompt[n_prompt++] = seed[i];
        for (int32_t i = 0; i < c.n_toks && (r == 0 || i < 8); i++)
            prompt[n_prompt++] = c.toks[i];
    }
}

static const eng_bias loop_bias[] = {{7, 100.0f},                          /* 7 7 7 ... */
                                     {7, 6.0f},   {9, 6.0f},  {11, 6.0f}, /* among 3 */
                                     {17, 9.0f},  {19, 9.0f}, {23, 9.0f}};

static void mixed_params(eng_params *ps, const eng_bias *bias)
{
    for (int i = 0; i < 8; i++) {
        ps[i] = eng_params_default();
        ps[i].prompt = prompt;
        ps[i].n_prompt = n_prompt;
        ps[i].max_tokens = 90;
        ps[i].ignore_eos = true;
        ps[i].want_logprobs = true;
        ps[i].sp.seed = 200 + (uint64_t)i;
    }
    /* the random model's own text never repeats: logit_bias makes rows that do,
     * so drafts are accepted whole (row 0) or in part (rows 1, 5) */
    ps[0].sp.logit_bias = loop_bias;
    ps[0].sp.n_bias = 1;
    ps[1].sp.logit_bias = loop_bias + 1;
    ps[1].sp.n_bias = 3;
    ps[5].sp.logit_bias = loop_bias + 4;
    ps[5].sp.n_bias = 3;
    ps[1].sp.temperature = 0.3f;
    ps[2].sp.temperature = 0.8f;
    ps[2].sp.top_p = 0.9f;
    ps[3].sp.temperature = 0.7f;
    ps[3].sp.top_k = 5;
    ps[3].sp.repetition_penalty = 1.2f;
    ps[4].sp.temperature = 1.2f;
    ps[4].sp.min_p = 0.1f;
    ps[5].sp.presence_penalty = 0.4f;
    ps[5].sp.frequency_penalty = 0.3f;
    ps[5].sp.top_logprobs = 3;
    ps[6].sp.logit_bias = bias;
    ps[6].sp.n_bias = 1;
    ps[7].max_tokens = 7; /* ends inside a drafted run */
}

/* Reference: every row alone with drafting off. Then alone with `m`, then
 * all 8 together with rows 6 and 7 not drafting. Returns accepted and
 * rejected draft tokens over the drafting runs. */
static void check_identity(eng_engine *e, eng_spec_method m, int32_t *acc, int32_t *rej)
{
    quote_prompt(e);
    eng_bias bias = {7, -1.0f};
    eng_params ps[8];
    mixed_params(ps, &bias);
    collected ref[8], alone[8], together[8];
    for (int i = 0; i < 8; i++)
        ps[i].spec = ENG_SPEC_OFF;
    run_all(e, ps, 8, 0, ref);
    for (int i = 0; i < 8; i++)
        ps[i].spec = m;
    run_all(e, ps, 8, 0, alone);
    ps[6].spec = ps[7].spec = ENG_SPEC_OFF;
    run_all(e, ps, 8, 1, together);
    *acc = *rej = 0;
    for (int i = 0; i < 8; i++) {
        ASSERT_TRUE(ref[i].n_toks > 0);
        if (!same(&ref[i], &alone[i]) || !same(&ref[i], &together[i]))
            fprintf(stderr, "request %d differs: %d / %d / %d tokens\n", i, ref[i].n_toks,
                    alone[i].n_toks, together[i].n_toks);
        ASSERT_TRUE(same(&ref[i], &alone[i]));
        ASSERT_TRUE(same(&ref[i], &together[i]));
        if (getenv("SPEC_DEBUG"))
        {
            fprintf(stderr, "  row %d: %d toks acc %d rej %d:", i, alone[i].n_toks,
                    alone[i].accepted, alone[i].rejected);
            for (int t = 0; t < ref[i].n_toks && t < 40; t++) fprintf(stderr, " %d", ref[i].toks[t]);
            fprintf(stderr, "\n");
        }
        ASSERT_EQ_I64(ref[i].accepted + ref[i].rejected, 0);
        *acc += alone[i].accepted + together[i].accepted;
        *rej += alone[i].rejected + together[i].rejected;
    }
    ASSERT_EQ_I64(together[6].accepted + together[6].rejected, 0);
    eng_stats st = eng_get_stats(e);
    ASSERT_EQ_I64(st.kv.n_active, 0);
    ASSERT_EQ_I64(st.kv.state.n_active, 0);
    ASSERT_EQ_U64(st.spec.accepted, (uint64_t)*acc);
    ASSERT_EQ_U64(st.spec.emitted, st.spec.accepted + st.spec.rows);
    ASSERT_EQ_I64(kv_pool_check(rt->kv), 0);
    fprintf(stderr, "  %s: drafted %llu accepted %d rejected %d verifications %llu\n",
            eng_spec_method_name(m), (unsigned long long)st.spec.drafted, *acc, *rej,
            (unsigned long long)st.spec.rows);
}

static void test_identity_ngram(void)
{
    eng_engine *e = start(NULL, 0);
    ASSERT_TRUE(e != NULL);
    int32_t acc, rej;
    check_identity(e, ENG_SPEC_NGRAM, &acc, &rej);
    ASSERT_TRUE(acc > 20); /* the state after accepted runs was kept */
    ASSERT_TRUE(rej > 0);  /* and rolled back after rejected ones */
    stop_all(e);
}

/* A 2-layer Qwen3 with the target's tokenizer drafts (random weights: nearly
 * every draft is rejected, so every verification rolls the state back). */
static void test_identity_draft_model(void)
{
    eng_engine *e = start(qd_dir, 0);
    ASSERT_TRUE(e != NULL);
    int32_t acc, rej;
    check_identity(e, ENG_SPEC_DRAFT, &acc, &rej);
    ASSERT_TRUE(rej > 50);
    stop_all(e);
}

/* The target drafting for itself (a recurrent draft model: its draft
 * sequences roll back through snapshot + replay): greedy rows accept every
 * draft. */
static void test_identity_self_draft(void)
{
    eng_engine *e = start(hyb_dir, 0);
    ASSERT_TRUE(e != NULL);
    int32_t acc, rej;
    check_identity(e, ENG_SPEC_DRAFT, &acc, &rej);
    ASSERT_TRUE(acc > 100);
    ASSERT_EQ_I64(kv_pool_get_stats(eng_draft_runtime(draft)->kv).state.n_active, 0);
    ASSERT_EQ_I64(kv_pool_get_stats(eng_draft_runtime(draft)->kv).n_active, 0);
    stop_all(e);
}

/* The model's own MTP head drafts (mtp.*; eng_mtp.h): identity, drafts
 * verified in every step, the head fed from the target's hidden states; a
 * request for "mtp" on an engine without the head is refused. */
static void test_identity_mtp_head(void)
{
    with_mtp = 1;
    eng_engine *e = start(NULL, 0);
    with_mtp = 0;
    ASSERT_TRUE(e != NULL);
    int32_t acc, rej;
    check_identity(e, ENG_SPEC_MTP, &acc, &rej);
    ASSERT_TRUE(acc + rej > 100); /* the head drafted */
    eng_mtp_info mi = eng_mtp_get_info(mtp);
    ASSERT_TRUE(mi.fed > 0 && mi.drafted > 0 && mi.forwards > 0);
    eng_stats st = eng_get_stats(e);
    ASSERT_TRUE(st.spec_by[ENG_SPEC_MTP].drafted > 0);
    /* the budget's view of the head is what it opened with: its own weights
     * (not the shared embeddings) and one pool block per target block */
    kiln_err err;
    eng_draft_cost mc;
    ASSERT_OK(eng_mtp_cost_of(hyb_dir, &rt->o, &mc, &err));
    ASSERT_EQ_U64(mc.weights_bytes, mi.weights_bytes);
    ASSERT_TRUE(mc.weights_bytes > 0 && mc.weights_bytes < mdl_get_info(rt->model).weights_bytes);
    ASSERT_EQ_U64(mc.block_bytes * (uint64_t)rt->o.n_blocks, mi.kv_bytes);
    ASSERT_TRUE(mc.fixed_bytes > mc.weights_bytes);
    stop_all(e);
    e = start(NULL, 0);
    ASSERT_TRUE(e != NULL);
    eng_params p = eng_params_default();
    p.prompt = prompt;
    p.n_prompt = 8;
    p.spec = ENG_SPEC_MTP;
    eng_handle *h;
    ASSERT_CODE(eng_submit(e, &p, &h, &err), KILN_E_INVALID);
    ASSERT_TRUE(strstr(err.msg, "mtp") != NULL);
    stop_all(e);
}

/* Few state blocks (2 per sequence are the running ones' own): the drafts'
 * per-position states take what is left, rows draft fewer tokens or none,
 * the output is still plain decoding's. */
static void test_identity_with_few_state_blocks(void)
{
    eng_engine *e = start(NULL, 20);
    ASSERT_TRUE(e != NULL);
    int32_t acc, rej;
    check_identity(e, ENG_SPEC_NGRAM, &acc, &rej);
    ASSERT_TRUE(acc > 0);
    stop_all(e);
}

/* KV and state pools after 8 rows together equal a plain run's: rejected
 * drafts' K/V blocks and per-position states went back, snapshots at block
 * boundaries crossed inside accepted runs were kept and published as plain
 * decoding keeps them. */
static void test_pool_counts_equal_a_plain_run(void)
{
    kv_pool_stats kv[2];
    uint64_t accepted = 0;
    for (int on = 0; on < 2; on++) {
        eng_engine *e = start(NULL, 0);
        ASSERT_TRUE(e != NULL);
        quote_prompt(e);
        eng_bias bias = {7, -1.0f};
        eng_params ps[8];
        mixed_params(ps, &bias);
        for (int i = 0; i < 8; i++)
            ps[i].spec = on ? ENG_SPEC_NGRAM : ENG_SPEC_OFF;
        collected out[8];
        run_all(e, ps, 8, 1, out);
        eng_stats st = eng_get_stats(e);
        kv[on] = st.kv;
        if (on) accepted = st.spec.accepted;
        ASSERT_EQ_I64(kv_pool_check(rt->kv), 0);
        stop_all(e);
    }
    ASSERT_TRUE(accepted > 0);
    ASSERT_EQ_I64(kv[1].n_active, 0);
    ASSERT_EQ_I64(kv[0].n_free, kv[1].n_free);
    ASSERT_EQ_I64(kv[0].n_cached, kv[1].n_cached);
    ASSERT_EQ_I64(kv[1].state.n_active, 0);
    ASSERT_EQ_I64(kv[0].state.n_free, kv[1].state.n_free);
    ASSERT_EQ_I64(kv[0].state.n_cached, kv[1].state.n_cached);
}

/* Cancelled while drafting (n-gram and draft model): nothing stays active
 * in the target's KV and state pools. */
static void test_cancel_while_drafting_frees_everything(void)
{
    for (int k = 0; k < 2; k++) {
        eng_engine *e = start(k ? qd_dir : NULL, 0);
        ASSERT_TRUE(e != NULL);
        kiln_err err;
        quote_prompt(e);
        eng_bias bias = {7, -1.0f};
        eng_params ps[8];
        mixed_params(ps, &bias);
        eng_params p = ps[0];
        p.max_tokens = 400;
        p.spec = k ? ENG_SPEC_DRAFT : ENG_SPEC_NGRAM;
        eng_handle *h;
        ASSERT_OK(eng_submit(e, &p, &h, &err));
        eng_event ev;
        for (int i = 0; i < 25; i++) {
            ASSERT_EQ_I64(eng_handle_next(h, &ev, 60000), 0);
            eng_event_clear(&ev);
        }
        eng_handle_release(h);
        eng_stats st;
        for (int i = 0; i < 3000; i++) {
            st = eng_get_stats(e);
            if (st.requests_finished == 2) break;
            usleep(10000);
        }
        ASSERT_EQ_I64(st.requests_cancelled, 1);
        ASSERT_TRUE(st.spec.drafted > 0);
        ASSERT_EQ_I64(st.kv.n_active, 0);
        ASSERT_EQ_I64(st.kv.state.n_active, 0);
        ASSERT_EQ_I64(st.running, 0);
        ASSERT_EQ_I64(kv_pool_check(rt->kv), 0);
        stop_all(e);
    }
}

int main(void)
{
    if (tm_make_model(hyb_dir, sizeof hyb_dir, "unit-spec-hybrid-target", "--arch qwen3_5 --dtype f32") ||
        tm_make_model(qd_dir, sizeof qd_dir, "unit-spec-hybrid-qwen3-draft", "--arch qwen3 --dtype f32 --layers 2")) {
        fprintf(stderr, "cannot make the test models (tools/make-test-model, python3-numpy)\n");
        return 1;
    }
    RUN(test_identity_ngram);
    RUN(test_identity_draft_model);
    RUN(test_identity_self_draft);
    RUN(test_identity_mtp_head);
    RUN(test_identity_with_few_state_blocks);
    RUN(test_pool_counts_equal_a_plain_run);
    RUN(test_cancel_while_drafting_frees_everything);
    return TEST_DONE();
}
